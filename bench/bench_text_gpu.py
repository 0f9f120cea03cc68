#!/usr/bin/env python3
"""Texts per second of text towers on one GPU (or two), side by side in one run: the engine's VRAM
towers (bench_text_gpu, C) against PyTorch eager bf16 on CUDA (and torch.compile with --compile), on
towers of the same shapes with random weights, token ids given (tokenising excluded for all).

    python3 bench/bench_text_gpu.py --binary build/bench/bench_text_gpu [--seconds 2]
        [--cases uform3:64,minilm:128] [--batches 1,50,1024] [--devices 1]
        [--attention flash,wmma] [--compile] [--compile-batches 1024] [--compile-mode default]
        [--compile-timeout 240] [--in-flight 2]

--attention runs the engine once per attention kernel (UFORM_GPU_ATTENTION=flash|wmma|simt in its
environment), one column each, ratios against the first. --compile adds a torch.compile column (of
the same PyTorch model; mode "default" or e.g. "max-autotune-no-cudagraphs") at --compile-batches
only: the compiling warm-up call is excluded from the rate and reported as "compile s"; a peer that
takes longer than --compile-timeout seconds in all is reported as a timeout.

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


def run_peer(system, shape, tokens, batch, seconds, compile_mode="default"):
    import torch
    from bench_text import build_torch
    model = build_torch(shape, "bf16").cuda().eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (batch, tokens), generator=g).cuda()
    mask = torch.ones((batch, tokens), dtype=torch.long).cuda()
    if system == "torch-compile":
        model = torch.compile(model, mode=None if compile_mode == "default" else compile_mode, dynamic=False)
    compile_seconds = None
    with torch.inference_mode():
        def run():
            model(ids, mask)
            torch.cuda.synchronize()
        before = time.perf_counter()
        run()  # compiles, for torch-compile
        if system == "torch-compile":
            compile_seconds = time.perf_counter() - before
        for _ in range(2):
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
    result = {"system": system, "texts_per_second": calls * batch / elapsed, "best_call_ms": best * 1e3}
    if compile_seconds is not None:
        result["compile_seconds"] = compile_seconds
    return result


def measure(command, timeout, environment=None):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, **(environment or {})))
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
    parser.add_argument("--in-flight", type=int, default=1,
                        help="the engine's calls deferred, this many at once (its own rows each): 1 is blocking")
    parser.add_argument("--attention", default="", help="engine columns per kernel, e.g. flash,wmma")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compile-batches", default="", help="batches with a torch.compile column (default: all)")
    parser.add_argument("--compile-mode", default="default")
    parser.add_argument("--compile-timeout", type=float, default=240.0)
    parser.add_argument("--peer", nargs=4, metavar=("SYSTEM", "SHAPE", "TOKENS", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        system, shape, tokens, batch = args.peer
        print(json.dumps(run_peer(system, shape, int(tokens), int(batch), args.seconds, args.compile_mode)))
        return
    kernels = [k for k in args.attention.split(",") if k]
    engines = [f"uform-{k}" for k in kernels] or ["uform-bf16"]
    peers = ["torch-bf16"] + (["torch-compile"] if args.compile else [])
    compile_batches = {int(b) for b in args.compile_batches.split(",") if b}
    print(f"# {args.seconds} s per measurement, random weights, ids given, engine on {args.devices} device(s), "
          f"{args.in_flight} call(s) in flight"
          + (f", torch.compile mode {args.compile_mode} (compile time excluded)" if args.compile else ""), flush=True)
    header = (f"{'case':<11} {'batch':>5} " + " ".join(f"{e:>11}" for e in engines) + " " +
              " ".join(f"{p:>13}" for p in peers) + " " + " ".join(f"{'x ' + p:>16}" for p in peers) +
              "".join(f" {'x ' + e:>13}" for e in engines[1:]) + f" {'TFLOP/s':>8} {'best ms':>8}" +
              (f" {'compile s':>9}" if args.compile else ""))
    print(header, flush=True)
    for case in args.cases.split(","):
        shape, tokens = case.split(":")
        for batch in [int(b) for b in args.batches.split(",")]:
            ours = {}
            for engine, kernel in zip(engines, kernels or [None]):
                ours[engine] = measure([args.binary, "--json", "--shape", shape, "--tokens", tokens, "--batch", str(batch),
                                        "--dtype", "bf16", "--devices", str(args.devices), "--seconds", str(args.seconds),
                                "--in-flight", str(args.in_flight)],
                                       300, {"UFORM_GPU_ATTENTION": kernel} if kernel else None)
            theirs = {}
            for p in peers:
                if p == "torch-compile" and compile_batches and batch not in compile_batches:
                    theirs[p] = {"skipped": True}
                    continue
                timeout = args.compile_timeout if p == "torch-compile" else 600
                theirs[p] = measure([sys.executable, os.path.abspath(__file__), "--seconds", str(args.seconds),
                                     "--compile-mode", args.compile_mode, "--peer", p, shape, tokens, str(batch)], timeout)
            first = ours[engines[0]]
            rate = first.get("texts_per_second", 0.0)

            def cell(result, width):
                if "error" in result:
                    return f"{'error':>{width}}"
                if "skipped" in result:
                    return f"{'-':>{width}}"
                return f"{result.get('texts_per_second', 0.0):>{width}.1f}"
            ratios = [f"{rate / theirs[p]['texts_per_second']:>15.2f}x" if theirs[p].get("texts_per_second") else f"{'-':>16}"
                      for p in peers]
            kernel_ratios = [f" {rate / ours[e]['texts_per_second']:>12.2f}x" if ours[e].get("texts_per_second")
                             else f" {'-':>13}" for e in engines[1:]]
            compile_cell = ""
            if args.compile:
                seconds = theirs["torch-compile"].get("compile_seconds")
                compile_cell = f" {seconds:>9.1f}" if seconds is not None else f" {'-':>9}"
            print(f"{case:<11} {batch:>5} " + " ".join(cell(ours[e], 11) for e in engines) + " " +
                  " ".join(cell(theirs[p], 13) for p in peers) + " " + " ".join(ratios) + "".join(kernel_ratios) +
                  f" {first.get('tflops', 0.0):>8.1f} {first.get('best_call_ms', 0.0):>8.3f}" + compile_cell, flush=True)
            for name, result in list(ours.items()) + list(theirs.items()):
                if "error" in result:
                    print(f"#   {name} {case} {batch}: {result['error']}", flush=True)


if __name__ == "__main__":
    main()
