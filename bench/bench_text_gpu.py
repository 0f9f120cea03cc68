#!/usr/bin/env python3
"""Texts per second of text towers on one GPU (or two), side by side in one run: the engine's VRAM
towers (bench_text_gpu, C) against PyTorch eager bf16 on CUDA (and torch.compile with --compile), on
towers of the same shapes with random weights, token ids given (tokenising excluded for all).

    python3 bench/bench_text_gpu.py --binary build/bench/bench_text_gpu [--seconds 2]
        [--cases uform3:64,minilm:128] [--batches 1,50,1024] [--compile] [--devices 1]

Shapes as bench/bench_text.py's (whose build_torch builds the PyTorch models): minilm is transformers'
BertModel + mean pooling + L2 norm; uform3 is the `uform` package's TextEncoder. Each system runs in a
process of its own. Prints texts/s, the engine's ratio to each peer, and the engine's TFLOP/s.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_peer(system, shape, tokens, batch, seconds):
    import torch
    from bench_text import build_torch
    model = build_torch(shape, "bf16").cuda().eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (batch, tokens), generator=g).cuda()
    mask = torch.ones((batch, tokens), dtype=torch.long).cuda()
    if system == "torch-compile":
        model = torch.compile(model)
    with torch.inference_mode():
        def run():
            model(ids, mask)
            torch.cuda.synchronize()
        for _ in range(3):
            run()
        calls, best, start = 0, float("inf"), time.perf_counter()
        while True:
            before = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - before)
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and calls >= 3:
                break
    return {"system": system, "texts_per_second": calls * batch / elapsed, "best_call_ms": best * 1e3}


def measure(command, timeout):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": "timeout"}
    if done.returncode != 0:
        return {"error": ((done.stderr or done.stdout).strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/bench/bench_text_gpu")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--cases", default="uform3:64,minilm:128")
    parser.add_argument("--batches", default="1,50,1024")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--peer", nargs=4, metavar=("SYSTEM", "SHAPE", "TOKENS", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        system, shape, tokens, batch = args.peer
        print(json.dumps(run_peer(system, shape, int(tokens), int(batch), args.seconds)))
        return
    peers = ["torch-bf16"] + (["torch-compile"] if args.compile else [])
    print(f"# {args.seconds} s per measurement, random weights, ids given, engine on {args.devices} device(s)", flush=True)
    print(f"{'case':<11} {'batch':>5} {'uform-bf16':>11} " + " ".join(f"{p:>13}" for p in peers) +
          " " + " ".join(f"{'x ' + p:>16}" for p in peers) + f" {'TFLOP/s':>8} {'best ms':>8}", flush=True)
    for case in args.cases.split(","):
        shape, tokens = case.split(":")
        for batch in [int(b) for b in args.batches.split(",")]:
            ours = measure([args.binary, "--json", "--shape", shape, "--tokens", tokens, "--batch", str(batch),
                            "--dtype", "bf16", "--devices", str(args.devices), "--seconds", str(args.seconds)], 300)
            theirs = {p: measure([sys.executable, os.path.abspath(__file__), "--seconds", str(args.seconds), "--peer", p,
                                  shape, tokens, str(batch)], 600) for p in peers}
            rate = ours.get("texts_per_second", 0.0)
            cells = [f"{theirs[p].get('texts_per_second', 0.0):>13.1f}" if "error" not in theirs[p] else f"{'error':>13}"
                     for p in peers]
            ratios = [f"{rate / theirs[p]['texts_per_second']:>15.2f}x" if theirs[p].get("texts_per_second") else f"{'-':>16}"
                      for p in peers]
            ours_cell = f"{rate:>11.1f}" if "error" not in ours else f"{'error':>11}"
            print(f"{case:<11} {batch:>5} {ours_cell} " + " ".join(cells) + " " + " ".join(ratios) +
                  f" {ours.get('tflops', 0.0):>8.1f} {ours.get('best_call_ms', 0.0):>8.3f}", flush=True)
            for name, result in [("uform", ours)] + list(theirs.items()):
                if "error" in result:
                    print(f"#   {name} {case} {batch}: {result['error']}", flush=True)


if __name__ == "__main__":
    main()
