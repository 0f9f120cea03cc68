#!/usr/bin/env python3
"""Texts per second of text towers, side by side in one run, same threads: the engine (bench_text,
C), PyTorch f32 and bf16, ONNX Runtime f32 (CPU provider, the same PyTorch model exported to ONNX).

    /work/venv/bin/python bench/bench_text.py --binary build/bench/bench_text --threads 2 [--seconds 3]
        [--cases minilm:16,minilm:128,uform3:64] [--batches 1,50,256] [--json]
        [--baseline OTHER_BINARY] [--rounds N]

Every system runs in a process of its own (so peak RSS is its own, read from wait4), on towers of the
same shape with random weights, token ids given (tokenising excluded for all):
  minilm  all-MiniLM-L6-v2's shape: BERT 384 wide, 6 layers, 12 heads, 1536 inner; mean pooling, L2 norm
          (PyTorch: transformers' BertModel + the pooling sentence-transformers runs).
  uform3  a UForm3-small-shaped text tower: the `uform` package's TextEncoder, 768 wide, 4 layers of which
          2 multimodal (skipped), 12 heads, CLS pooling, 256-wide projection, RoBERTa positions.
Prints one row per case: texts/s of each system, the engine's ratio to the best peer, peak RSS.
`--baseline` adds the engine's systems again from another build (`base-f32`, `base-bf16`: a before/after
in the same run, with the new build's ratio over it); `--rounds` repeats the table (then prints each system's
best over the rounds and the ratios of the bests), the order of the
systems rotated each round, so load on a shared machine falls on every system alike.
"""
import argparse
import json
import os
import sys
import tempfile
import time

from cpu_class_env import CLASS_ISAS, class_environment
from peer_process import measure, ratios, rotated, run_rounds


def build_torch(shape, dtype):
    import torch
    torch.manual_seed(0)
    if shape == "minilm":
        from transformers import BertConfig, BertModel
        config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                            intermediate_size=1536, max_position_embeddings=512)
        bert = BertModel(config, add_pooling_layer=False).eval()

        class Minilm(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bert = bert

            def forward(self, ids, mask):
                x = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
                m = mask.unsqueeze(-1).to(x.dtype)
                pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(pooled, p=2, dim=1)

        model = Minilm().eval()
    else:
        from uform.torch_encoders import TextEncoder
        model = TextEncoder(model_type="roberta", dim=768, context_dim=768, vocab_size=30522, padding_idx=0,
                            num_layers=4, num_heads=12, embedding_dim=256, multimodal_layers_ids=(2, 3),
                            head_one_neuron=False, pooling="cls", max_position_embeddings=77).eval()
    if dtype == "bf16":
        model = model.to(torch.bfloat16)
    return model


def inputs(batch, tokens):
    import torch
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (batch, tokens), generator=g)
    mask = torch.ones((batch, tokens), dtype=torch.long)
    return ids, mask


def timed(run, seconds):
    run(), run()
    calls, durations, start = 0, [], time.perf_counter()
    while True:
        before = time.perf_counter()
        run()
        durations.append(time.perf_counter() - before)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 3:
            return calls, elapsed, sorted(durations)


def run_peer(system, shape, tokens, batch, threads, seconds):
    import torch
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    ids, mask = inputs(batch, tokens)
    if system in ("torch-f32", "torch-bf16"):
        model = build_torch(shape, "bf16" if system == "torch-bf16" else "f32")
        with torch.inference_mode():
            calls, elapsed, durations = timed(lambda: model(ids, mask), seconds)
    else:
        import onnxruntime as ort
        model = build_torch(shape, "f32")
        with tempfile.TemporaryDirectory() as directory:
            path = os.path.join(directory, "model.onnx")
            torch.onnx.export(model, (ids, mask), path, input_names=["ids", "mask"], output_names=["out"],
                              dynamic_axes={"ids": {0: "b", 1: "t"}, "mask": {0: "b", 1: "t"}}, opset_version=17,
                              dynamo=False)
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
            feed = {"ids": ids.numpy(), "mask": mask.numpy()}
            calls, elapsed, durations = timed(lambda: session.run(None, feed), seconds)
    return {"system": system, "texts_per_second": calls * batch / elapsed, "best_call_ms": durations[0] * 1e3,
            "median_call_ms": durations[len(durations) // 2] * 1e3,
            "p90_call_ms": durations[min(len(durations) - 1, len(durations) * 9 // 10)] * 1e3}




def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default="build/bench/bench_text")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cases", default="minilm:16,minilm:128,uform3:64")
    parser.add_argument("--batches", default="1,50,256")
    parser.add_argument("--systems", default="uform-f32,uform-bf16,torch-f32,torch-bf16,ort-f32")
    parser.add_argument("--cpu-class", default="", help="pin the engine to this class (e.g. intel_haswell) and "
                        "bound every library to its instruction sets where it has a switch (not ONNX Runtime)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--baseline", default="", help="another build's bench_text, run as base-f32/base-bf16")
    parser.add_argument("--rounds", type=int, default=1, help="repeat the table, rotating the systems' order")
    parser.add_argument("--peer", nargs=5, metavar=("SYSTEM", "SHAPE", "TOKENS", "BATCH", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        system, shape, tokens, batch, threads = args.peer
        print(json.dumps(run_peer(system, shape, int(tokens), int(batch), int(threads), args.seconds)))
        return
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    systems = args.systems.split(",")
    if args.baseline:
        systems += [s.replace("uform-", "base-") for s in systems if s.startswith("uform-")]
    environment = class_environment(args.cpu_class)
    print(f"# threads {args.threads}, {args.seconds} s per measurement, random weights, ids given", flush=True)
    if args.cpu_class:
        print(f"# --cpu-class {args.cpu_class}: the engine pinned to it; the engine and PyTorch under "
              f"{' '.join(f'{k}={v}' for k, v in CLASS_ISAS[args.cpu_class].items())}; ONNX Runtime unrestricted "
              f"(no switch)", flush=True)
    header = f"{'case':<14} {'batch':>5} " + " ".join(f"{s:>16}" for s in systems) + f" {'f32 ratio':>9} {'bf16 ratio':>10}"
    if args.baseline:
        header += f" {'f32 new/base':>12}"
    print(header + "   (texts/s [peak RSS MiB])", flush=True)
    run_rounds(args.rounds, lambda round_index: run_round(args, systems, environment, round_index), systems,
               "texts_per_second", args.json)


def run_round(args, systems, environment, round_index):
    """One table: every case and batch, each system in its own process, the order rotated by round."""
    rows = []
    order = rotated(systems, round_index)
    for case in args.cases.split(","):
        shape, tokens = case.split(":")
        for batch in [int(b) for b in args.batches.split(",")]:
            results = {}
            for system in order:
                if system.startswith(("uform", "base")):
                    binary = args.baseline if system.startswith("base") else args.binary
                    command = [binary, "--json", "--shape", shape, "--tokens", tokens, "--batch", str(batch),
                               "--threads", str(args.threads), "--seconds", str(args.seconds),
                               "--dtype", system.split("-")[1]]
                else:
                    command = [sys.executable, os.path.abspath(__file__), "--seconds", str(args.seconds),
                               "--peer", system.replace("ort-f32", "ort"), shape, tokens, str(batch), str(args.threads)]
                if system.startswith(("uform", "base")) and args.cpu_class:
                    command += ["--cpu-class", args.cpu_class]
                results[system] = measure(command, environment if system != "ort-f32" else None)
            rate = {s: r.get("texts_per_second", 0.0) for s, r in results.items()}
            f32_ratio, bf16_ratio = ratios(rate)
            cells = []
            for s in systems:
                r = results[s]
                cells.append(f"{r['texts_per_second']:>9.1f} [{r['peak_rss_mib']:>4.0f}]" if "error" not in r else f"{'error':>16}")
                if "error" in r:
                    print(f"# {s}: {r['error']}", file=sys.stderr)
            bf16_cell = f"{bf16_ratio:>9.2f}x" if "uform-bf16" in systems else f"{'-':>10}"
            if args.baseline:
                base = rate.get("base-f32", 0)
                bf16_cell += f" {rate.get('uform-f32', 0) / base:>11.2f}x" if base else f" {'-':>12}"
            print(f"{case:<14} {batch:>5} " + " ".join(f"{c:>16}" for c in cells) + f" {f32_ratio:>8.2f}x " + bf16_cell,
                  flush=True)
            rows.append({"case": case, "batch": batch, "round": round_index + 1, "results": results,
                         "f32_ratio": f32_ratio, "bf16_ratio": bf16_ratio})
    return rows


if __name__ == "__main__":
    main()
