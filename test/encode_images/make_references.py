#!/usr/bin/env python3
"""Reference image embeddings for test_encode_images, from the `uform` package's PyTorch ImageEncoder.

Run with /work/venv/bin/python (pinned: torch 2.15.0, numpy, pillow 13.0, uform 3.1.3):

    python test/encode_images/make_references.py

For each tower of `TOWERS` (the same list as towers.h) it draws the weights bit for bit as
towers.h does (splitmix64, `u = (x >> 40) * 2^-24`, `value = float32(center + (2u - 1) * half)`),
writes them as the UForm3 layout into a temporary directory, builds `uform.torch_encoders.ImageEncoder`
from that config and state dict, preprocesses every photo of test/image/photos with PIL and
`uform.torch_processors.ImageProcessor` (reading the same config.json), and writes

    test/encode_images/expected/<tower>.f32   float32 [photos][embedding_dim], little-endian
    test/encode_images/expected/<tower>-features.f32   float32 [photos][4][dim]: the rows of
                                              `feature_tokens` of the features (return_features=True)
    test/encode_images/references.txt         one line per tower: name, checksum of the weights, photos

The weights' hash lets the C test check it generated the very same tensors.
"""
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
from PIL import Image
from safetensors.numpy import save_file

from uform.torch_encoders import ImageEncoder
from uform.torch_processors import ImageProcessor

HERE = os.path.dirname(os.path.abspath(__file__))
PHOTOS = os.path.join(HERE, "..", "image", "photos")

# name, dim, heads, layers, patch, image_size, embedding_dim, reg_tokens, pooling, seed
TOWERS = [
    ("vit-s16", 384, 6, 3, 16, 224, 256, 0, "cls", 0x5EED0001),
    ("vit-b16", 768, 12, 2, 16, 224, 512, 0, "mean", 0x5EED0002),
    ("vit-p14-reg4", 384, 6, 2, 14, 230, 256, 4, "cls", 0x5EED0003),
]

MEANS = [0.48145466, 0.4578275, 0.40821073]
DEVIATIONS = [0.26862954, 0.26130258, 0.27577711]
GAMMA = np.uint64(0x9E3779B97F4A7C15)


def tensors(dim, heads, layers, patch, image_size, embedding_dim, reg_tokens):
    """(name, shape, center, half) in stream order, as tower_tensors in towers.h."""
    d, p, grid = dim, patch, image_size // patch
    out = [
        ("patch_embed.weight", (d, 3, p, p), 0.0, math.sqrt(3.0 / (3.0 * p * p))),
        ("patch_embed.bias", (d,), 0.0, 0.1),
        ("pos_embed", (1, grid * grid, d), 0.0, 0.5),
        ("cls_token", (1, 1, d), 0.0, 1.0),
    ]
    if reg_tokens:
        out.append(("reg_token", (1, reg_tokens, d), 0.0, 1.0))
    for l in range(layers):
        b = f"blocks.{l}."
        out += [(b + "norm1.weight", (d,), 1.0, 0.1), (b + "norm1.bias", (d,), 0.0, 0.1)]
        for name in ("query", "key", "value", "out"):
            out += [(b + f"attn.{name}.weight", (d, d), 0.0, math.sqrt(3.0 / d)), (b + f"attn.{name}.bias", (d,), 0.0, 0.1)]
        out += [
            (b + "ls1.gamma", (d,), 1.0, 0.2),
            (b + "norm2.weight", (d,), 1.0, 0.1),
            (b + "norm2.bias", (d,), 0.0, 0.1),
            (b + "mlp.hidden_layer.weight", (4 * d, d), 0.0, math.sqrt(3.0 / d)),
            (b + "mlp.hidden_layer.bias", (4 * d,), 0.0, 0.1),
            (b + "mlp.output_layer.weight", (d, 4 * d), 0.0, math.sqrt(3.0 / (4.0 * d))),
            (b + "mlp.output_layer.bias", (d,), 0.0, 0.1),
            (b + "ls2.gamma", (d,), 1.0, 0.2),
        ]
    out += [
        ("norm.weight", (d,), 1.0, 0.1),
        ("norm.bias", (d,), 0.0, 0.1),
        ("embedding_projection.weight", (embedding_dim, d), 0.0, math.sqrt(3.0 / d)),
    ]
    return out


def splitmix64(seed, start, count):
    """Outputs start .. start + count of splitmix64 seeded with `seed` (wrapping uint64)."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + np.arange(start + 1, start + count + 1, dtype=np.uint64) * GAMMA
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def draw(spec):
    name, dim, heads, layers, patch, image_size, embedding_dim, reg_tokens, pooling, seed = spec
    state = {}
    position = 0
    for tensor, shape, center, half in tensors(dim, heads, layers, patch, image_size, embedding_dim, reg_tokens):
        n = int(np.prod(shape))
        u = (splitmix64(seed, position, n) >> np.uint64(40)).astype(np.float64) * (1.0 / 16777216.0)
        state[tensor] = (center + (2.0 * u - 1.0) * half).astype(np.float32).reshape(shape)
        position += n
    return state


def hash_state(spec, state):
    """sum over i of bits(w[i]) * (2 i + 1) mod 2^64, the float32 bit patterns of all tensors in stream
    order (towers.h computes the same)."""
    order = [t[0] for t in tensors(*spec[1:8])]
    bits = np.concatenate([state[name].reshape(-1).view(np.uint32) for name in order]).astype(np.uint64)
    with np.errstate(over="ignore"):
        weights = np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        return int(np.sum(bits * weights, dtype=np.uint64))


def feature_tokens(sequence):
    """The token rows of an image's features the references keep (test_encode_images.c picks the same):
    [CLS], the next (a register token or the first patch), the middle, the last."""
    return [0, 1, sequence // 2, sequence - 1]


def main():
    from importlib.metadata import version

    pinned = {"torch": "2.15.0", "numpy": "2.4.6", "pillow": "13.0.0", "uform": "3.1.3", "safetensors": None}
    for package, wanted in pinned.items():
        found = version(package)
        print(package, found, file=sys.stderr)
        if wanted and not found.startswith(wanted):
            sys.exit(f"{package} {found} is installed; the references were made with {wanted}")
    photos = sorted(f for f in os.listdir(PHOTOS) if f.lower().endswith((".jpg", ".png")))
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    lines = []
    torch.manual_seed(0)
    for spec in TOWERS:
        name, dim, heads, layers, patch, image_size, embedding_dim, reg_tokens, pooling, seed = spec
        state = draw(spec)
        with tempfile.TemporaryDirectory() as directory:
            config = {
                "image_encoder": {
                    "dim": dim, "patch_size": patch, "image_size": image_size, "num_layers": layers,
                    "num_heads": heads, "embedding_dim": embedding_dim, "pooling": pooling,
                    "num_reg_tokens": reg_tokens, "normalization_means": MEANS,
                    "normalization_deviations": DEVIATIONS,
                },
                "matryoshka_dims": [64, 128],
            }
            config_path = os.path.join(directory, "config.json")
            with open(config_path, "w") as file:
                json.dump(config, file)
            save_file(state, os.path.join(directory, "image_encoder.safetensors"))
            encoder = ImageEncoder.from_pretrained(config_path, {k: torch.from_numpy(v) for k, v in state.items()})
            encoder.eval()
            processor = ImageProcessor(config_path)
            rows, features = [], []
            with torch.no_grad():
                for photo in photos:
                    image = Image.open(os.path.join(PHOTOS, photo))
                    batch = processor(image)
                    hidden, embedding = encoder.encode(batch, return_features=True)
                    rows.append(embedding.numpy()[0].astype(np.float32))
                    features.append(hidden.numpy()[0][feature_tokens(hidden.shape[1])].astype(np.float32))
        np.stack(rows).astype("<f4").tofile(os.path.join(HERE, "expected", f"{name}.f32"))
        np.stack(features).astype("<f4").tofile(os.path.join(HERE, "expected", f"{name}-features.f32"))
        digest = hash_state(spec, state)
        lines.append(f"{name} {digest:016x} {' '.join(photos)}")
        print(lines[-1], file=sys.stderr)
    with open(os.path.join(HERE, "references.txt"), "w") as file:
        file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
