#!/usr/bin/env python3
"""Packs all-MiniLM-L6-v2 (as build.sh fetched it) for the GPU machine, whose transfers carry 64 MiB.

The f32 safetensors is 87 MiB and does not compress, so the carried copy zeroes the rows of the word
embeddings that no text of the fixtures indexes (test/encode/minilm_ids.txt; the rows the texts use,
and every other tensor, are the real weights bit for bit, so every fixture's embedding is unchanged),
compresses it with xz and cuts it in two parts, carried by two consecutive calls (the machine keeps
what an earlier call left in its build folder while it stays warm: test/gpu/run_minilm_device.sh).

    carry_minilm.py MODEL_DIR OUT_DIR_A OUT_DIR_B [--first-part-mib 26]
        writes OUT_DIR_A/model (the directory without its weights), OUT_DIR_A/weights.xz.part1 and
        OUT_DIR_B/weights.xz.part2
    carry_minilm.py --join PART1 PART2 TARGET     (writes the weights, TARGET/model.safetensors)
    carry_minilm.py --bf16 MODEL_DIR OUT_DIR      one call's worth (17 MiB): the same rows rounded to
        bf16 (round to nearest even, as the engine rounds f32 weights it is asked to hold in bf16),
        OUT_DIR/model and OUT_DIR/weights.xz; `--join OUT_DIR/weights.xz - TARGET` unpacks it. The
        GPU's bf16 rows are then checked against the f32 references, not the f32 path itself.
"""
import glob
import lzma
import os
import shutil
import sys


def pack(model_dir, out_a, out_b, first_mib):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    here = os.path.dirname(os.path.abspath(__file__))
    used = set()
    with open(os.path.join(here, "..", "encode", "minilm_ids.txt")) as lines:
        for line in lines:
            used.update(int(token) for token in line.split())
    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    (name,) = [key for key in tensors if key.endswith("word_embeddings.weight")]
    keep = np.zeros(tensors[name].shape[0], dtype=bool)
    keep[sorted(used)] = True
    tensors[name] = np.where(keep[:, None], tensors[name], np.float32(0))
    for folder in (out_a, out_b):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    model = os.path.join(out_a, "model")
    shutil.copytree(model_dir, model, ignore=shutil.ignore_patterns("model.safetensors", "README.md", "*.onnx"))
    pruned = os.path.join(out_a, "pruned.safetensors")
    save_file(tensors, pruned)
    with open(pruned, "rb") as file:
        packed = lzma.compress(file.read(), preset=9 | lzma.PRESET_EXTREME)
    os.remove(pruned)
    cut = first_mib << 20
    with open(os.path.join(out_a, "weights.xz.part1"), "wb") as file:
        file.write(packed[:cut])
    with open(os.path.join(out_b, "weights.xz.part2"), "wb") as file:
        file.write(packed[cut:])
    print(f"{len(used)} of {len(keep)} word rows kept; {len(packed) / 2**20:.1f} MiB packed, "
          f"{min(cut, len(packed)) / 2**20:.1f} MiB in {out_a}")


def pack_bf16(model_dir, out_dir):
    import torch
    from safetensors.torch import load_file, save

    here = os.path.dirname(os.path.abspath(__file__))
    used = set()
    with open(os.path.join(here, "..", "encode", "minilm_ids.txt")) as lines:
        for line in lines:
            used.update(int(token) for token in line.split())
    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    (name,) = [key for key in tensors if key.endswith("word_embeddings.weight")]
    keep = torch.zeros(tensors[name].shape[0], dtype=torch.bool)
    keep[sorted(used)] = True
    tensors[name] = torch.where(keep[:, None], tensors[name], torch.zeros(()))
    tensors = {key: value.to(torch.bfloat16) if value.is_floating_point() else value for key, value in tensors.items()}
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(model_dir, os.path.join(out_dir, "model"),
                    ignore=shutil.ignore_patterns("model.safetensors", "README.md", "*.onnx"))
    packed = lzma.compress(save(tensors), preset=9 | lzma.PRESET_EXTREME)
    with open(os.path.join(out_dir, "weights.xz"), "wb") as file:
        file.write(packed)
    print(f"{len(used)} of {len(keep)} word rows kept, bf16; {len(packed) / 2**20:.1f} MiB packed in {out_dir}")


def join(first, second, target_dir):
    parts = [first] if second == "-" else [first, second]
    missing = [part for part in parts if not os.path.exists(part)]
    if missing:
        sys.exit(f"carry_minilm: missing {', '.join(missing)} (the machine went cold between the calls?)")
    packed = b"".join(open(part, "rb").read() for part in parts)
    target = os.path.join(target_dir, "model.safetensors")
    with open(target, "wb") as file:
        file.write(lzma.decompress(packed))
    print(f"carry_minilm: wrote {target} ({os.path.getsize(target)} bytes)")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--bf16":
        pack_bf16(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "--join":
        join(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) in (4, 6):
        pack(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5]) if len(sys.argv) == 6 else 26)
    else:
        sys.exit(__doc__)
