#!/usr/bin/env python3
"""Checks the engine's VRAM text towers against PyTorch on CUDA with the same weights.

    build/test/test_encode_gpu --dump DIR && python3 test/encode/gpu_torch_check.py DIR

test_encode_gpu --dump keeps its towers (DIR/uform3-small: the `uform` package's TextEncoder layout;
DIR/minilm: a sentence-transformers BERT) and, per case, the ids it encoded (NAME.ids) and the GPU
embeddings (NAME.f32). This runs the same ids through PyTorch on CUDA in the case's dtype (padded
batches with attention masks) and prints the worst cosine per case: >= 0.99999 in f32 and >= 0.999 in
bf16 pass. Exits 1 when a case fails, 77 without CUDA.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_references import padded  # noqa: E402 - the batch of ids as the uform package takes it


def load_ids(path):
    with open(path) as file:
        return [[int(x) for x in line.split()] for line in file if line.strip()]


def build(directory, dtype):
    import torch
    from safetensors.torch import load_file
    with open(os.path.join(directory, "config.json")) as file:
        config = json.load(file)
    if "text_encoder" in config:
        from uform.torch_encoders import TextEncoder
        model = TextEncoder(**config["text_encoder"]).eval()
        model.load_state_dict(load_file(os.path.join(directory, "text_encoder.safetensors")), strict=True)
        pad = config["text_encoder"]["padding_idx"]

        def run(ids, mask):
            return model(ids, mask)
    else:
        from transformers import BertConfig, BertModel
        bert = BertModel(BertConfig(**{k: v for k, v in config.items() if k != "model_type"}),
                         add_pooling_layer=False).eval()
        missing, unexpected = bert.load_state_dict(load_file(os.path.join(directory, "model.safetensors")), strict=False)
        assert not unexpected and all("position_ids" in m for m in missing), (missing, unexpected)
        model, pad = bert, 0

        def run(ids, mask):
            x = bert(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled.float(), p=2, dim=1)
    model = model.to("cuda", dtype=torch.bfloat16 if dtype == "bf16" else torch.float32)
    if dtype == "f32":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return run, pad


def main():
    import torch
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA for PyTorch")
        return 77
    root = sys.argv[1]
    failed = 0
    for name in sorted(os.listdir(root)):
        if not name.endswith(".ids"):
            continue
        case = name[:-4]
        # The tower is the dumped directory whose name begins the case's (the longest such).
        towers = [d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "config.json"))]
        tower = max((d for d in towers if case.startswith(d + "_")), key=len, default=None)
        # f32 and bf16 cases (f16 has no PyTorch peer here; the scratch-limited run repeats minilm_f32).
        dtype = "bf16" if "bf16" in case else "f32" if "f32" in case and "f32_in" not in case else None
        if tower is None or dtype is None:
            continue
        ids = load_ids(os.path.join(root, name))
        gpu = np.fromfile(os.path.join(root, case + ".f32"), dtype="<f4").reshape(len(ids), -1)
        run, pad = build(os.path.join(root, tower), dtype)
        rows = []
        with torch.inference_mode():
            for start in range(0, len(ids), 64):
                x, m = padded(ids[start:start + 64], pad)
                rows.append(run(x.cuda(), m.cuda()).float().cpu().numpy())
        torch_rows = np.concatenate(rows)
        a, b = gpu.astype(np.float64), torch_rows.astype(np.float64)
        cos = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))
        threshold = 0.99999 if dtype == "f32" else 0.999
        ok = cos.min() >= threshold
        failed += not ok
        print(f"torch-cuda {case:<36} {len(ids)} texts, worst cosine {cos.min():.7f}, threshold {threshold}: "
              f"{'ok' if ok else 'FAILED'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
