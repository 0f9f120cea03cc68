#!/usr/bin/env python3
"""all-MiniLM-L6-v2 through the Python surface on a GPU (`uform.get_model(path, device="cuda")`)
against sentence-transformers on CUDA, on the fixtures' sentences; f32 and bf16 weights, and the
engine's CPU rows (`device="cpu"`) beside. Exits 1 when a worst cosine is under its threshold
(f32 0.99999, bf16 0.999), 77 without CUDA in PyTorch.

    UFORM_LIBRARY=build/libuform.so PYTHONPATH=python minilm_cuda_check.py MODEL_DIR SENTENCES [LIMIT]
"""
import sys
import time

import numpy as np


def worst(rows, reference):
    rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    reference = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    cosines = np.sum(rows * reference, axis=1)
    return float(cosines.min()), int(cosines.argmin())


def main():
    import torch
    from sentence_transformers import SentenceTransformer

    import uform

    model_dir, sentences_path = sys.argv[1], sys.argv[2]
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with open(sentences_path, encoding="utf-8") as file:
        texts = [line.rstrip("\n") for line in file]
    texts = texts[:limit] if limit else texts
    if not torch.cuda.is_available():
        print("SKIP: PyTorch sees no CUDA device")
        return 77
    reference = SentenceTransformer(model_dir, device="cuda")
    reference_f32 = reference.encode(texts, batch_size=256, convert_to_numpy=True)
    failed = 0
    for dtype, threshold in (("f32", 0.99999), ("bf16", 0.999)):
        weights = uform.DType.F32 if dtype == "f32" else uform.DType.BF16
        _, models = uform.get_model(model_dir, device="cuda", weights_dtype=weights)
        encoder = models["text"]
        rows = encoder.encode(texts)  # the first call builds the plans and graphs
        started = time.perf_counter()
        rows = np.asarray(encoder.encode(texts), dtype=np.float32)
        seconds = time.perf_counter() - started
        cosine, at = worst(rows, reference_f32)
        ok = cosine >= threshold
        failed |= not ok
        print(f"uform cuda {dtype:4} weights against sentence-transformers on CUDA (f32): {len(texts)} texts, "
              f"worst cosine {cosine:.7f} (text {at}), threshold {threshold}: {'ok' if ok else 'FAIL'} "
              f"({len(texts) / seconds:,.0f} texts/s through Python)")
        if dtype == "f32":
            _, cpu_models = uform.get_model(model_dir, device="cpu")
            cpu_rows = np.asarray(cpu_models["text"].encode(texts), dtype=np.float32)
            cosine, at = worst(rows, cpu_rows)
            ok = cosine >= threshold
            failed |= not ok
            print(f"uform cuda f32  weights against uform cpu f32: worst cosine {cosine:.7f} (text {at}): "
                  f"{'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
