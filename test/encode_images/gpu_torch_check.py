#!/usr/bin/env python3
"""Checks the engine's VRAM image towers against the `uform` package's ImageEncoder on CUDA with the
same weights and photos.

    build/test/test_encode_images_gpu --dump DIR && python3 test/encode_images/gpu_torch_check.py DIR

test_encode_images_gpu --dump keeps its towers (DIR/vit-s16, DIR/vit-b16, DIR/vit-p14-reg4: config.json
and image_encoder.safetensors), the photos it encoded (DIR/photos.txt, one path a line) and, per case,
the GPU embeddings of those photos (DIR/<tower>_<dtype>.f32, float32 [photos][width]). This
preprocesses the photos with PIL and the package's ImageProcessor, runs the package's ImageEncoder on
CUDA (f32 with TF32 off for the f32 and f16 cases, bf16 for the bf16 case) and prints the worst cosine
per case: >= 0.99999 in f32 and >= 0.999 in bf16 and f16 pass. Exits 1 when a case fails, 77 without
CUDA.
"""
import os
import sys

import numpy as np

THRESHOLDS = {"f32": 0.99999, "bf16": 0.999, "f16": 0.999}


def main():
    import torch
    device = os.environ.get("UFORM_CHECK_DEVICE", "cuda")  # "cpu" checks this script where there is no GPU
    if device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: no CUDA for PyTorch")
        return 77
    from PIL import Image
    from safetensors.torch import load_file
    from uform.torch_encoders import ImageEncoder
    from uform.torch_processors import ImageProcessor
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    directory = sys.argv[1]
    with open(os.path.join(directory, "photos.txt")) as file:
        photos = [line.strip() for line in file if line.strip()]
    failed = 0
    for tower in ("vit-s16", "vit-b16", "vit-p14-reg4"):
        path = os.path.join(directory, tower)
        config = os.path.join(path, "config.json")
        state = load_file(os.path.join(path, "image_encoder.safetensors"))
        processor = ImageProcessor(config)
        pixels = processor([Image.open(photo) for photo in photos])["images"]
        for dtype in ("f32", "bf16", "f16"):
            name = os.path.join(directory, f"{tower}_{dtype}.f32")
            if not os.path.exists(name):
                continue
            torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
            encoder = ImageEncoder.from_pretrained(config, dict(state)).eval().to(device, dtype=torch_dtype)
            with torch.inference_mode():
                expected = encoder.encode(pixels.to(device, dtype=torch_dtype)).float().cpu().numpy()
            ours = np.fromfile(name, dtype="<f4").reshape(len(photos), -1)
            cosines = (ours * expected).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(expected, axis=1))
            worst = float(cosines.min())
            ok = worst >= THRESHOLDS[dtype]
            failed += not ok
            print(f"torch-cuda {tower:<13} {dtype:<5} {len(photos)} photos, worst cosine {worst:.7f} "
                  f"(threshold {THRESHOLDS[dtype]}) {'ok' if ok else 'FAILED'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
