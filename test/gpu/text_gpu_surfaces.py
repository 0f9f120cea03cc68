#!/usr/bin/env python3
"""The surfaces of VRAM text towers on a GPU machine: `uform encode --device 0` against the CPU run of
the same CLI, and Python's `get_model(..., device='cuda')` against `device='cpu'`, on a model directory
kept by `test_encode_gpu --dump` (the MiniLM-shaped tower). Prints the worst cosine of each; exits 1
below 0.99999 (f32 weights on both sides).

    python3 test/gpu/text_gpu_surfaces.py CLI MODEL_DIR   (UFORM_LIBRARY names libuform.so)
"""
import json
import subprocess
import sys

import numpy as np


def main():
    cli, model = sys.argv[1], sys.argv[2]
    texts = [" ".join(f"w{5 + (i * 7 + j * 13) % 990}" for j in range(1 + i % 40)) for i in range(40)]
    rows = {}
    for name, extra in (("cpu", []), ("gpu", ["--device", "0"])):
        done = subprocess.run([cli, "encode", "--model", model] + extra, input="\n".join(texts) + "\n",
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            print(f"cli {name}: {done.stderr.strip()}")
            return 1
        rows[name] = np.array([json.loads(line) for line in done.stdout.splitlines()])
    failed = 0
    cos = lambda a, b: ((a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))).min()
    worst = cos(rows["cpu"], rows["gpu"])
    failed += worst < 0.99999
    print(f"cli: uform encode --device 0 vs CPU, {len(texts)} texts, worst cosine {worst:.7f}")
    import uform
    _, cpu = uform.get_model(model, device="cpu")
    _, gpu = uform.get_model(model, device="cuda:0")
    a = np.asarray(cpu[uform.Modality.TEXT_ENCODER].encode(texts), dtype=np.float64)
    b = np.asarray(gpu[uform.Modality.TEXT_ENCODER].encode(texts), dtype=np.float64)
    worst = cos(a, b)
    failed += worst < 0.99999
    print(f"python: get_model(device='cuda:0') vs 'cpu', {len(texts)} texts, worst cosine {worst:.7f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
