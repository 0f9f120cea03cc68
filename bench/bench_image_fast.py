#!/usr/bin/env python3
"""The DCT-scaled JPEG path's effect on embeddings: cosine against the exact path.

    /work/venv/bin/python bench/bench_image_fast.py [--bench build/bench/bench_image]

bench_image --dump writes, per file, the 3 x 224 x 224 tensors of the exact path (PIL's pixels) and
of the two fast paths (`jpeg_min_side` 224 and 448: libjpeg's DCT scaling by 1/2, 1/4 or 1/8 before
the same resize). Each goes through the `uform` package's PyTorch ImageEncoder (ViT-S/16 and ViT-B/16
shapes, random weights, seed 0, float32, LayerScale factors drawn near 1 so every branch counts), and
the script prints the cosine of each fast embedding with the exact one. Files: test/image/photos'
JPEGs and the two camera-sized JPEGs bench_image.py makes from astronaut.png.
"""

import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTOS = ["franz-kafka.jpg", "grace_hopper.jpg", "rocket.jpg"]
SHAPES = {"vit-s16": (384, 6), "vit-b16": (768, 12)}


def encoder(shape):
    from uform.torch_encoders import ImageEncoder
    torch.manual_seed(0)
    dim, heads = SHAPES[shape]
    model = ImageEncoder(dim=dim, patch_size=16, image_size=224, num_layers=12, num_heads=heads, embedding_dim=256,
                         pooling="cls").eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".gamma"):  # LayerScale (ls1, ls2): near 1, not the 1e-5 initialisation
                parameter.copy_(1 + 0.1 * torch.randn_like(parameter))
    return model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "bench_image"))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="uform_bench_image_fast_")
    files = [os.path.join(ROOT, "test", "image", "photos", name) for name in PHOTOS]
    astronaut = Image.open(os.path.join(ROOT, "test", "image", "photos", "astronaut.png")).convert("RGB")
    for w, h in ((1920, 1080), (4032, 3024)):
        path = os.path.join(work, f"astronaut_{w}x{h}.jpg")
        astronaut.resize((w, h), Image.LANCZOS).save(path, quality=90)
        files.append(path)
    subprocess.run([args.bench, "--dump", work, *files], check=True, capture_output=True)
    print("| image | size | model | cosine, fast (short side >= 224) | cosine, fast (short side >= 448) |")
    print("| --- | --- | --- | ---: | ---: |")
    for shape in SHAPES:
        model = encoder(shape)
        for index, path in enumerate(files):
            tensors = {name: torch.from_numpy(np.fromfile(os.path.join(work, f"{index}.{name}.f32"), dtype=np.float32)
                                              .reshape(1, 3, 224, 224)) for name in ("exact", "fast", "fast2")}
            with torch.no_grad():
                embeddings = {name: model(tensor) for name, tensor in tensors.items()}
            cosine = {name: torch.nn.functional.cosine_similarity(embeddings["exact"].flatten(1),
                                                                  embeddings[name].flatten(1)).item()
                      for name in ("fast", "fast2")}
            size = "x".join(map(str, Image.open(path).size))
            print(f"| {os.path.basename(path)} | {size} | {shape} | {cosine['fast']:.6f} | {cosine['fast2']:.6f} |")
    for name in os.listdir(work):
        os.unlink(os.path.join(work, name))
    os.rmdir(work)


if __name__ == "__main__":
    sys.exit(main())
