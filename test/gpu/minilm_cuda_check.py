#!/usr/bin/env python3
"""all-MiniLM-L6-v2 through the Python surface on a GPU (`uform.get_model(path, device="cuda")`)
against sentence-transformers on CUDA, on the fixtures' sentences, and against the engine's CPU rows.
Exits 1 when a worst cosine is under its threshold (f32 0.99999, bf16 0.999), 77 without CUDA.

    UFORM_LIBRARY=build/libuform.so PYTHONPATH=python minilm_cuda_check.py MODEL_DIR SENTENCES [--limit N]
        f32 weights on the GPU against sentence-transformers (f32, CUDA) and the engine's CPU f32
        rows; bf16 weights against the same sentence-transformers rows
    ... minilm_cuda_check.py MODEL_DIR SENTENCES --stored-bf16 EXPECTED_F32
        for a model whose file holds the weights already rounded to bf16 (carry_minilm.py --bf16):
        f32 weights on the GPU (the stored values widened) against sentence-transformers in f32 on
        them; bf16 weights on the GPU against sentence-transformers run in bf16 on CUDA (the same rounded
        weights), against EXPECTED_F32 (test/encode/minilm_f32.bin: sentence-transformers' f32 rows
        of the real f32 weights, one per sentence) and against the engine's CPU bf16 rows
"""
import argparse
import sys
import time

import numpy as np


def worst(rows, reference):
    rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    reference = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    cosines = np.sum(rows * reference, axis=1)
    return float(cosines.min()), int(cosines.argmin())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("sentences")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--stored-bf16", metavar="EXPECTED_F32")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # "cpu" checks this script itself
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    import uform

    with open(args.sentences, encoding="utf-8") as file:
        texts = [line.rstrip("\n") for line in file]
    texts = texts[: args.limit] if args.limit else texts
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIP: PyTorch sees no CUDA device")
        return 77
    failed = False

    def check(label, rows, reference, threshold):
        nonlocal failed
        cosine, at = worst(rows, reference)
        ok = cosine >= threshold
        failed |= not ok
        print(f"{label}: {len(texts)} texts, worst cosine {cosine:.7f} (text {at}), threshold {threshold}: "
              f"{'ok' if ok else 'FAIL'}")

    def engine(device, dtype):
        _, models = uform.get_model(args.model, device=device, weights_dtype=dtype)
        encoder = models["text"]
        encoder.encode(texts)  # the first call plans (and on the GPU captures the graphs)
        started = time.perf_counter()
        rows = np.asarray(encoder.encode(texts), dtype=np.float32)
        return rows, len(texts) / (time.perf_counter() - started)

    reference = SentenceTransformer(args.model, device=args.device)
    if args.stored_bf16:
        # The f32 path on the same stored weights (bf16 values widened exactly to f32) against
        # sentence-transformers in f32 on them: the f32 GPU path's check on all-MiniLM-L6-v2's
        # architecture, tokeniser and (rounded) real weights, at the f32 threshold.
        # (sentence-transformers loads a bf16 file in bf16 unless told the dtype.)
        widened = SentenceTransformer(args.model, device=args.device, model_kwargs={"dtype": torch.float32})
        torch_f32 = widened.encode(texts, batch_size=256, convert_to_numpy=True)
        del widened
        rows, rate = engine(args.device, uform.DType.F32)
        print(f"uform {args.device} f32 weights: {rate:,.0f} texts/s through Python")
        check(f"uform {args.device} f32 against sentence-transformers f32 on {args.device} (same stored weights)",
              rows, torch_f32, 0.99999)
        reference = reference.to(torch.bfloat16)
        torch_bf16 = reference.encode(texts, batch_size=256, convert_to_numpy=False, convert_to_tensor=True)
        torch_bf16 = torch_bf16.float().cpu().numpy()
        expected = np.fromfile(args.stored_bf16, dtype=np.float32).reshape(-1, torch_bf16.shape[1])[: len(texts)]
        rows, rate = engine(args.device, uform.DType.BF16)
        print(f"uform {args.device} bf16 weights: {rate:,.0f} texts/s through Python")
        check(f"uform {args.device} bf16 against sentence-transformers bf16 on {args.device}", rows, torch_bf16, 0.999)
        check(f"uform {args.device} bf16 against sentence-transformers f32 (real f32 weights)", rows, expected, 0.999)
        check(f"sentence-transformers bf16 on {args.device} against its f32 (the peer's own drift)", torch_bf16, expected, 0.999)
        cpu_rows, _ = engine("cpu", uform.DType.BF16)
        check(f"uform {args.device} bf16 against uform cpu bf16", rows, cpu_rows, 0.999)
    else:
        torch_f32 = reference.encode(texts, batch_size=256, convert_to_numpy=True)
        for dtype, threshold in ((uform.DType.F32, 0.99999), (uform.DType.BF16, 0.999)):
            rows, rate = engine(args.device, dtype)
            name = "f32 " if dtype == uform.DType.F32 else "bf16"
            print(f"uform {args.device} {name} weights: {rate:,.0f} texts/s through Python")
            check(f"uform cuda {name} against sentence-transformers f32 on {args.device}", rows, torch_f32, threshold)
            if dtype == uform.DType.F32:
                cpu_rows, _ = engine("cpu", dtype)
                check(f"uform {args.device} f32  against uform cpu f32", rows, cpu_rows, threshold)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
