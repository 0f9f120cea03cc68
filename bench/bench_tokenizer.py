#!/usr/bin/env python3
"""Tokenizer throughput, one thread, side by side: UForm's C tokenizer (bench_tokenizer, run here as a
subprocess) against Hugging Face `tokenizers` on the same valid texts of test/tokenizer/corpus.bin.gz
and the same tokenizer.json files, untruncated, best of --rounds passes. HF is measured two ways:
`encode_batch` over all texts with one Rayon thread (its fastest single-threaded path) and a Python
loop of `encode` calls (which adds the interpreter's per-call cost).

usage: bench_tokenizer.py BENCH_BINARY [--rounds N] [--quick] [NAME...]
e.g.   taskset -c 1 /work/venv/bin/python bench/bench_tokenizer.py build/bench/bench_tokenizer
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"  # before tokenizers starts its pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse, gzip, platform, subprocess, sys, time

import tokenizers
from tokenizers import Tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "test", "tokenizer")


def corpus(limit=None):
    data = gzip.open(os.path.join(FIXTURES, "corpus.bin.gz")).read()
    texts, at = [], 0
    while at < len(data):
        nl = data.index(b"\n", at)
        n = int(data[at:nl])
        texts.append(data[nl + 1:nl + 1 + n])
        at = nl + 1 + n + 1
        if limit and len(texts) >= limit:
            break
    out = []
    for t in texts:
        try:
            out.append(t.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    return out


def best_of(rounds, fn):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("names", nargs="*", default=["minilm", "unigram"])
    args = parser.parse_intermixed_args()
    rounds = 1 if args.quick else args.rounds
    texts = corpus(2000 if args.quick else None)
    nbytes = sum(len(t.encode()) for t in texts)

    command = [args.binary, "--rounds", str(rounds)] + (["--quick"] if args.quick else []) + args.names
    ours = {}
    for line in subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines():
        if line.startswith("RESULT "):
            _, name, n, tps, ips, mbps = line.split()
            ours[name] = (int(n), float(tps), float(ips), float(mbps))

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; tokenizers "
          f"{tokenizers.__version__}; {len(texts)} valid texts, {nbytes / 1e6:.1f} MB; best of {rounds}")
    print(f"{'tokenizer':<16} {'uform texts/s':>14} {'uform Mids/s':>13} {'uform MB/s':>11} "
          f"{'HF batch texts/s':>17} {'HF loop texts/s':>16} {'vs batch':>9} {'vs loop':>8}")
    for name in args.names:
        tok = Tokenizer.from_str(gzip.open(os.path.join(FIXTURES, name, "tokenizer.json.gz")).read().decode())
        tok.no_padding()
        tok.no_truncation()
        ids = sum(len(e.ids) for e in tok.encode_batch(texts))
        batch = best_of(rounds, lambda: tok.encode_batch(texts))
        loop = best_of(rounds, lambda: [tok.encode(t) for t in texts])
        n, tps, ips, mbps = ours[name]
        if n != len(texts):
            sys.exit(f"{name}: uform encoded {n} texts, HF {len(texts)}")
        hb, hl = len(texts) / batch, len(texts) / loop
        print(f"{name:<16} {tps:>14,.0f} {ips / 1e6:>13.2f} {mbps:>11.1f} {hb:>17,.0f} {hl:>16,.0f} "
              f"{tps / hb:>8.2f}x {tps / hl:>7.2f}x   (HF {ids / batch / 1e6:.2f} Mids/s batch)")


if __name__ == "__main__":
    main()
