#!/usr/bin/env python3
"""Image preprocessing per core: PIL + the `uform` package's ImageProcessor against bench_image (C).

    OMP_NUM_THREADS=1 /work/venv/bin/python bench/bench_image.py [--bench build/bench/bench_image] [--seconds 1]

Both sides start from the encoded bytes in memory and end with the 3 x 224 x 224 float tensor the
model takes: PIL's `Image.open(BytesIO(bytes))` then uform 3.1.3's torch `ImageProcessor` (torchvision
Resize(224, BICUBIC), convert("RGB"), CenterCrop, ToTensor, Normalize) with torch on one thread,
against `uform_image_preprocess` (exact: PIL's pixels; fast: libjpeg's DCT scaling first). Times are
the thread's CPU time per image, best of 3 rounds, so other processes on the machine matter little.
The files: test/image/photos (real photos, 300 to 650 pixels a side) and two larger JPEGs made here
from astronaut.png (1920 x 1080 and 4032 x 3024, quality 90), typical of camera output.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import PIL  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ["franz-kafka.jpg", "grace_hopper.jpg", "rocket.jpg", "astronaut.png", "coffee.png", "chelsea.png"]


def uform_processor(side):
    import uform
    from uform.torch_processors import ImageProcessor

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"image_encoder": {"image_size": side, "normalization_means": [0.48145466, 0.4578275, 0.40821073],
                                     "normalization_deviations": [0.26862954, 0.26130258, 0.27577711]}}, f)
    processor = ImageProcessor(f.name)
    os.unlink(f.name)
    return processor, getattr(uform, "__version__", "3.1.3")


def cpu_time_per_image(function, seconds):
    best = float("inf")
    for _ in range(3):
        runs, start = 0, time.thread_time()
        while True:
            function()
            runs += 1
            elapsed = time.thread_time() - start
            if elapsed >= seconds / 3 and runs >= 3:
                break
        best = min(best, elapsed / runs)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "bench_image"))
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--side", type=int, default=224)
    args = parser.parse_args()
    torch.set_num_threads(1)

    work = tempfile.mkdtemp(prefix="uform_bench_image_")
    files = [os.path.join(ROOT, "test", "image", "photos", name) for name in PHOTOS]
    astronaut = Image.open(files[3]).convert("RGB")
    for w, h in ((1920, 1080), (4032, 3024)):
        path = os.path.join(work, f"astronaut_{w}x{h}.jpg")
        astronaut.resize((w, h), Image.LANCZOS).save(path, quality=90)
        files.append(path)

    processor, version = uform_processor(args.side)
    pil_us = {}
    for path in files:
        data = open(path, "rb").read()
        pil_us[path] = cpu_time_per_image(lambda: processor(Image.open(io.BytesIO(data))), args.seconds)

    output = subprocess.run([args.bench, "--side", str(args.side), "--seconds", str(args.seconds), *files],
                            check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in output.splitlines() if line and not line.startswith("#")]
    print(f"# Pillow {PIL.__version__}, torch {torch.__version__} (1 thread), uform {version}, numpy {np.__version__}; "
          f"side {args.side}; CPU time per image, one core")
    print("| image | size | PIL + uform | C exact | ratio | C decode alone | C fast (short side >= 224) | ratio | "
          "its diff: mean / max levels | C fast (short side >= 448) | ratio | its diff |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    totals = [0.0] * 4
    ratios = []
    for path, size, exact_us, fast_us, decode_us, mean_diff, max_diff, mild_us, mild_mean, mild_max in rows:
        pil = pil_us[path]
        exact_us, fast_us, mild_us = float(exact_us), float(fast_us), float(mild_us)
        for i, value in enumerate((pil, exact_us, fast_us, mild_us)):
            totals[i] += value
        ratios.append((pil / exact_us, pil / fast_us, pil / mild_us))
        print(f"| {os.path.basename(path)} | {size} | {pil / 1000:.2f} ms | {exact_us / 1000:.2f} ms | {pil / exact_us:.1f}x | "
              f"{float(decode_us) / 1000:.2f} ms | {fast_us / 1000:.2f} ms | {pil / fast_us:.1f}x | "
              f"{float(mean_diff):.2f} / {max_diff} | {mild_us / 1000:.2f} ms | {pil / mild_us:.1f}x | "
              f"{float(mild_mean):.2f} / {mild_max} |")
    means = [float(np.exp(np.mean(np.log([r[k] for r in ratios])))) for k in range(3)]
    print(f"| geometric mean of the {len(rows)} ratios | | | | {means[0]:.1f}x | | | {means[1]:.1f}x | | | "
          f"{means[2]:.1f}x | |")
    print(f"| all {len(rows)} | | {totals[0] / 1000:.1f} ms | {totals[1] / 1000:.1f} ms | {totals[0] / totals[1]:.1f}x | | "
          f"{totals[2] / 1000:.1f} ms | {totals[0] / totals[2]:.1f}x | | {totals[3] / 1000:.1f} ms | "
          f"{totals[0] / totals[3]:.1f}x | |")
    for path in files:
        if path.startswith(work):
            os.unlink(path)
    os.rmdir(work)


if __name__ == "__main__":
    sys.exit(main())
