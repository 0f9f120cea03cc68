#!/usr/bin/env python3
"""Images per second of ViT image towers, side by side in one run, same threads: the engine
(bench_image_model, C), PyTorch f32 and bf16 (the `uform` package's ImageEncoder), ONNX Runtime f32
(CPU provider, the same ImageEncoder exported to ONNX).

    /work/venv/bin/python bench/bench_image_model.py --binary build/bench/bench_image_model --threads 2 \
        [--shapes vit-s16,vit-b16] [--modes model,whole] [--batches 1,50,256] [--seconds 3] [--min-calls 3] [--rounds N]

Every system runs in a process of its own (peak RSS is its own, from wait4), on towers of the same
shape with random weights: ViT-S/16 (384 wide, 6 heads) or ViT-B/16 (768, 12 heads), 12 layers, patch
16 at 224 pixels, CLS pooling, 256-wide projection. Modes:
  model  the tower alone: peers get a ready [batch, 3, 224, 224] tensor; the engine gets raw 224 x 224
         RGB pixels (its resize is then the identity; normalisation and im2col are under 1%).
  whole  from JPEG bytes (the JPEGs of test/image/photos, cycled): peers decode with PIL and run the
         `uform` package's ImageProcessor per image, then the model; the engine decodes, resizes
         (PIL-exact) and encodes on its executor's threads.
Prints one row per case: images/s of each system, the engine's ratio to the best peer, peak RSS.
`--by-best-call` takes each system's images/s from its best call instead (batch / best call).
"""
import argparse
import io
import json
import os
import sys
import tempfile
import time

from cpu_class_env import CLASS_ISAS, class_environment
from peer_process import measure, ratios, rotated, run_rounds

SHAPES = {"vit-s16": (384, 6), "vit-b16": (768, 12)}
PHOTOS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "image", "photos")


def build_torch(shape, dtype):
    import torch
    from uform.torch_encoders import ImageEncoder
    torch.manual_seed(0)
    dim, heads = SHAPES[shape]
    model = ImageEncoder(dim=dim, patch_size=16, image_size=224, num_layers=12, num_heads=heads, embedding_dim=256,
                         pooling="cls").eval()
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model


def processor_for(directory):
    from uform.torch_processors import ImageProcessor
    path = os.path.join(directory, "config.json")
    with open(path, "w") as f:
        json.dump({"image_encoder": {"image_size": 224, "normalization_means": [0.48145466, 0.4578275, 0.40821073],
                                     "normalization_deviations": [0.26862954, 0.26130258, 0.27577711]}}, f)
    return ImageProcessor(path)


def jpegs(batch):
    names = sorted(n for n in os.listdir(PHOTOS) if n.lower().endswith((".jpg", ".jpeg")))
    blobs = [open(os.path.join(PHOTOS, n), "rb").read() for n in names]
    return [blobs[i % len(blobs)] for i in range(batch)]


def timed(run, seconds, min_calls):
    run()  # one warm-up call
    calls, best, start = 0, float("inf"), time.perf_counter()
    while True:
        before = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - before)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= min_calls:
            return calls, elapsed, best


def run_peer(system, shape, mode, batch, threads, seconds, min_calls):
    import torch
    from PIL import Image
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    blobs = jpegs(batch)
    with tempfile.TemporaryDirectory() as directory:
        processor = processor_for(directory)

        def pixels(dtype):
            if mode == "model":
                return torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1)).to(dtype)
            return processor([Image.open(io.BytesIO(b)) for b in blobs])["images"].to(dtype)

        if system in ("torch-f32", "torch-bf16"):
            dtype = torch.bfloat16 if system == "torch-bf16" else torch.float32
            model = build_torch(shape, "bf16" if dtype == torch.bfloat16 else "f32")
            fixed = pixels(dtype)
            with torch.inference_mode():
                run = (lambda: model.encode(fixed)) if mode == "model" else (lambda: model.encode(pixels(dtype)))
                calls, elapsed, best = timed(run, seconds, min_calls)
        else:
            import onnxruntime as ort
            model = build_torch(shape, "f32")
            path = os.path.join(directory, "model.onnx")
            example = torch.randn(1, 3, 224, 224)
            torch.onnx.export(model, (example,), path, input_names=["images"], output_names=["out"],
                              dynamic_axes={"images": {0: "b"}}, opset_version=17, dynamo=False)
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            fixed = pixels(torch.float32).numpy()
            if mode == "model":
                run = lambda: session.run(None, {"images": fixed})
            else:
                run = lambda: session.run(None, {"images": pixels(torch.float32).numpy()})
            calls, elapsed, best = timed(run, seconds, min_calls)
    return {"system": system, "images_per_second": calls * batch / elapsed, "best_call_ms": best * 1e3}




def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/bench/bench_image_model")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--min-calls", type=int, default=3)
    parser.add_argument("--shapes", default="vit-s16,vit-b16")
    parser.add_argument("--modes", default="model,whole")
    parser.add_argument("--batches", default="1,50,256")
    parser.add_argument("--systems", default="uform-f32,uform-bf16,torch-f32,torch-bf16,ort-f32")
    parser.add_argument("--cpu-class", default="", help="pin the engine to this class (e.g. intel_haswell) and "
                        "bound every library to its instruction sets where it has a switch (not ONNX Runtime)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the table, rotating the systems' order, "
                        "then print each system's best over the rounds")
    parser.add_argument("--by-best-call", action="store_true", help="images/s from each system's best call "
                        "(batch / best call) instead of from all its calls: on a shared machine whose neighbours "
                        "slow calls by 2-4x within seconds, the least disturbed figure of each")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--peer", nargs=5, metavar=("SYSTEM", "SHAPE", "MODE", "BATCH", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        system, shape, mode, batch, threads = args.peer
        print(json.dumps(run_peer(system, shape, mode, int(batch), int(threads), args.seconds, args.min_calls)))
        return
    systems = args.systems.split(",")
    environment = class_environment(args.cpu_class)
    if args.cpu_class:
        print(f"# --cpu-class {args.cpu_class}: the engine pinned to it; the engine and PyTorch under "
              f"{' '.join(f'{k}={v}' for k, v in CLASS_ISAS[args.cpu_class].items())}; ONNX Runtime unrestricted "
              f"(no switch)", flush=True)
    print(f"# threads {args.threads}, {args.seconds} s and {args.min_calls} calls at least per measurement, "
          f"random weights" + (", images/s from each system's best call" if args.by_best_call else ""), flush=True)
    header = f"{'case':<14} {'batch':>5} " + " ".join(f"{s:>16}" for s in systems) + f" {'f32 ratio':>9} {'bf16 ratio':>10}"
    print(header + "   (images/s [peak RSS MiB])", flush=True)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    run_rounds(args.rounds, lambda round_index: run_round(args, systems, environment, round_index), systems,
               "images_per_second", args.json)


def run_round(args, systems, environment, round_index):
    """One table: every shape, mode and batch, each system in its own process, the order rotated by round."""
    rows = []
    order = rotated(systems, round_index)
    for shape in args.shapes.split(","):
        for mode in args.modes.split(","):
            for batch in [int(b) for b in args.batches.split(",")]:
                results = {}
                for system in order:
                    if system.startswith("uform"):
                        command = [args.binary, "--json", "--shape", shape, "--mode", mode, "--batch", str(batch),
                                   "--threads", str(args.threads), "--seconds", str(args.seconds),
                                   "--min-calls", str(args.min_calls), "--dtype", system.split("-")[1]]
                    else:
                        command = [sys.executable, os.path.abspath(__file__), "--seconds", str(args.seconds),
                                   "--min-calls", str(args.min_calls), "--peer", system.replace("ort-f32", "ort"), shape,
                                   mode, str(batch), str(args.threads)]
                    if system.startswith("uform") and args.cpu_class:
                        command += ["--cpu-class", args.cpu_class]
                    results[system] = measure(command, environment if system != "ort-f32" else None)
                    if args.by_best_call and results[system].get("best_call_ms"):
                        results[system]["images_per_second"] = batch * 1e3 / results[system]["best_call_ms"]
                rate = {s: r.get("images_per_second", 0.0) for s, r in results.items()}
                f32_ratio, bf16_ratio = ratios(rate)
                cells = []
                for s in systems:
                    r = results[s]
                    cells.append(f"{r['images_per_second']:>9.2f} [{r['peak_rss_mib']:>4.0f}]" if "error" not in r
                                 else f"{'error':>16}")
                    if "error" in r:
                        print(f"# {s}: {r['error']}", file=sys.stderr)
                case = f"{shape}/{mode}"
                bf16_cell = f"{bf16_ratio:>9.2f}x" if "uform-bf16" in systems else f"{'-':>10}"
                print(f"{case:<14} {batch:>5} " + " ".join(f"{c:>16}" for c in cells) + f" {f32_ratio:>8.2f}x " + bf16_cell,
                      flush=True)
                rows.append({"case": case, "batch": batch, "round": round_index + 1, "results": results,
                             "f32_ratio": f32_ratio, "bf16_ratio": bf16_ratio})
    return rows


if __name__ == "__main__":
    main()
