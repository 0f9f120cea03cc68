#!/usr/bin/env python3
"""Images per second of ViT image towers on one GPU (or more), side by side in one run: the engine's
VRAM towers (bench_image_gpu, C) against the `uform` package's ImageEncoder in PyTorch eager bf16 on
CUDA and, with --compile-batches, torch.compile of it (compile time excluded and reported).

    python3 bench/bench_image_gpu.py --binary build/bench/bench_image_gpu [--seconds 2]
        [--shapes vit-s16,vit-b16] [--modes model,whole] [--batches 1,50,256] [--compile-batches 256]
        [--devices 1] [--in-flight 2]

Towers as bench_image_model.py's (whose build_torch, processor_for and jpegs this reuses): ViT-S/16
(384 wide, 6 heads) or ViT-B/16 (768, 12 heads), 12 layers, patch 16 at 224 pixels, CLS pooling,
256-wide projection, random weights. Modes:
  model  the tower alone: the peers get a ready [batch, 3, 224, 224] bf16 tensor already on the GPU;
         the engine gets raw 224 x 224 RGB pixels on the host (its resize is the identity) and
         uploads the 8-bit crops.
  whole  from JPEG bytes (test/image/photos' JPEGs, cycled): the peers decode with PIL and run the
         package's ImageProcessor per image, then copy the batch to the GPU; the engine decodes and
         resizes on its VRAM executor's host threads, then uploads the 8-bit crops.
Each system runs in a process of its own. Prints images/s, the engine's ratio to each peer, and the
engine's achieved TFLOP/s (against the H200's ~790 dense bf16 TFLOP/s).
"""
import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def run_peer(system, shape, mode, batch, seconds):
    import torch
    from PIL import Image
    from bench_image_model import build_torch, jpegs, processor_for
    torch.set_num_threads(os.cpu_count() or 1)
    model = build_torch(shape, "bf16").cuda().eval()
    blobs = jpegs(batch)
    compile_seconds = 0.0
    with tempfile.TemporaryDirectory() as directory, torch.inference_mode():
        processor = processor_for(directory)
        fixed = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).cuda()
        encode = model.encode
        if system == "torch-compile":
            encode = torch.compile(model.forward)
            before = time.perf_counter()
            encode(fixed)
            torch.cuda.synchronize()
            compile_seconds = time.perf_counter() - before

        def run():
            if mode == "model":
                encode(fixed)
            else:
                pixels = processor([Image.open(io.BytesIO(b)) for b in blobs])["images"]
                encode(pixels.to(torch.bfloat16).cuda())
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
    return {"system": system, "images_per_second": calls * batch / elapsed, "best_call_ms": best * 1e3,
            "compile_seconds": compile_seconds}


def measure(command, timeout):
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout} s"}
    if done.returncode != 0:
        return {"error": ((done.stderr or done.stdout).strip().splitlines() or ["failed"])[-1]}
    last = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        return {"error": last or "no output"}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/bench/bench_image_gpu")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--shapes", default="vit-s16,vit-b16")
    parser.add_argument("--modes", default="model,whole")
    parser.add_argument("--batches", default="1,50,256")
    parser.add_argument("--compile-batches", default="", help="batches (model mode) that also run torch.compile")
    parser.add_argument("--compile-timeout", type=int, default=240)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=1,
                        help="the engine's calls deferred, this many at once (its own rows each): 1 is blocking")
    parser.add_argument("--peer", nargs=4, metavar=("SYSTEM", "SHAPE", "MODE", "BATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        system, shape, mode, batch = args.peer
        print(json.dumps(run_peer(system, shape, mode, int(batch), args.seconds)))
        return
    compiled = {int(b) for b in args.compile_batches.split(",") if b}
    print(f"# {args.seconds} s per measurement, random weights, engine on {args.devices} device(s), bf16, "
          f"{args.in_flight} call(s) in flight", flush=True)
    print(f"{'case':<14} {'batch':>5} {'uform-bf16':>11} {'torch-bf16':>11} {'compile':>11} {'x eager':>8} "
          f"{'x compile':>9} {'TFLOP/s':>8} {'best ms':>8}", flush=True)
    for shape in args.shapes.split(","):
        for mode in args.modes.split(","):
            for batch in [int(b) for b in args.batches.split(",")]:
                ours = measure([args.binary, "--json", "--shape", shape, "--mode", mode, "--batch", str(batch),
                                "--dtype", "bf16", "--devices", str(args.devices), "--seconds", str(args.seconds),
                                "--in-flight", str(args.in_flight)], 300)
                peer = [sys.executable, os.path.abspath(__file__), "--seconds", str(args.seconds), "--peer"]
                eager = measure(peer + ["torch-bf16", shape, mode, str(batch)], 300)
                compile_result = (measure(peer + ["torch-compile", shape, mode, str(batch)], args.compile_timeout)
                                  if mode == "model" and batch in compiled else {})
                rate = ours.get("images_per_second", 0.0)

                def cell(result):
                    if "error" in result:
                        return f"{'error':>11}"
                    return f"{result['images_per_second']:>11.1f}" if result else f"{'-':>11}"

                def ratio(result, width):
                    value = result.get("images_per_second") if result else None
                    return f"{rate / value:>{width - 1}.2f}x" if value and rate else f"{'-':>{width}}"
                case = f"{shape}/{mode}"
                print(f"{case:<14} {batch:>5} {cell(ours)} {cell(eager)} {cell(compile_result)} {ratio(eager, 8)} "
                      f"{ratio(compile_result, 9)} {ours.get('tflops', 0.0):>8.1f} {ours.get('best_call_ms', 0.0):>8.3f}",
                      flush=True)
                if compile_result.get("compile_seconds"):
                    print(f"#   torch.compile {case} {batch}: compiled in {compile_result['compile_seconds']:.1f} s",
                          flush=True)
                for name, result in [("uform", ours), ("torch-bf16", eager), ("torch-compile", compile_result)]:
                    if "error" in result:
                        print(f"#   {name} {case} {batch}: {result['error']}", flush=True)


if __name__ == "__main__":
    main()
