"""Image towers from Python: `uform.Model.encode_images` with bytes, paths, NumPy arrays and PIL
images, per-image statuses, errors naming the index, and `uform.get_model` for images. The tower is a
tiny random ViT written here (UForm3 layout); its numbers against PyTorch are test_encode_images's."""

from __future__ import annotations

import json
import math
import os
import random
import socket
import struct
import tempfile
import threading
import unittest

import uform

from _support import REPOSITORY, close_during, library

PHOTOS = os.path.join(REPOSITORY, "test", "image", "photos")
BAD = os.path.join(REPOSITORY, "test", "image", "bad")
MEANS = (0.48145466, 0.4578275, 0.40821073)
DEVIATIONS = (0.26862954, 0.26130258, 0.27577711)

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None
try:
    from PIL import Image
except ImportError:  # pragma: no cover
    Image = None


def write_tower(directory: str, dim=64, heads=2, layers=1, patch=16, size=64, embedding=32) -> None:
    config = {"image_encoder": {"dim": dim, "patch_size": patch, "image_size": size, "num_layers": layers,
                                "num_heads": heads, "embedding_dim": embedding, "pooling": "cls",
                                "normalization_means": list(MEANS), "normalization_deviations": list(DEVIATIONS)}}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    grid = size // patch
    shapes = [("patch_embed.weight", [dim, 3, patch, patch]), ("patch_embed.bias", [dim]),
              ("pos_embed", [1, grid * grid, dim]), ("cls_token", [1, 1, dim])]
    for l in range(layers):
        b = f"blocks.{l}."
        shapes += [(b + "norm1.weight", [dim]), (b + "norm1.bias", [dim])]
        for name in ("query", "key", "value", "out"):
            shapes += [(b + f"attn.{name}.weight", [dim, dim]), (b + f"attn.{name}.bias", [dim])]
        shapes += [(b + "ls1.gamma", [dim]), (b + "norm2.weight", [dim]), (b + "norm2.bias", [dim]),
                   (b + "mlp.hidden_layer.weight", [4 * dim, dim]), (b + "mlp.hidden_layer.bias", [4 * dim]),
                   (b + "mlp.output_layer.weight", [dim, 4 * dim]), (b + "mlp.output_layer.bias", [dim]),
                   (b + "ls2.gamma", [dim])]
    shapes += [("norm.weight", [dim]), ("norm.bias", [dim]), ("embedding_projection.weight", [embedding, dim])]
    rng = random.Random(13)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes:
        count = math.prod(shape)
        center = 1.0 if name.endswith(("gamma", "norm1.weight", "norm2.weight", "norm.weight")) else 0.0
        half = math.sqrt(3.0 / shape[-1]) if len(shape) >= 2 and name != "pos_embed" else 0.2
        blob = struct.pack(f"<{count}f", *(center + rng.uniform(-half, half) for _ in range(count)))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(directory, "image_encoder.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rows_close(a, b, tolerance=1e-4) -> bool:
    return all(abs(float(x) - float(y)) <= tolerance for x, y in zip(a, b))


def cosine(a, b) -> float:
    a, b = [float(x) for x in a], [float(x) for x in b]
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def package_resize(image, size: int):
    """What the uform package's PyTorch processor does to a PIL image before its crop, written out
    with PIL: torchvision's Resize(size, BICUBIC) (the short side to size, the long side
    int(size * long / short), nothing where the short side is size already), then convert("RGB")."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    if short != size:
        scaled = int(size * long / short)
        image = image.resize((size, scaled) if width <= height else (scaled, size), Image.BICUBIC)
    return image.convert("RGB")


def package_pixels(image, size: int):
    """The uint8 RGB pixels [size, size, 3] the package's processor normalises: `package_resize`,
    then torchvision's CenterCrop (offsets int(round((side - size) / 2.0)))."""
    image = package_resize(image, size)
    top, left = int(round((image.height - size) / 2.0)), int(round((image.width - size) / 2.0))
    return np.asarray(image.crop((left, top, left + size, top + size)))


class Images(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.library = library()
        cls.directory = tempfile.TemporaryDirectory()
        write_tower(cls.directory.name)
        cls.model = uform.Model.open(cls.library, cls.directory.name, uform.Modality.IMAGE_ENCODER)
        cls.executor = uform.Executor.for_ram(cls.library, threads=min(2, len(os.sched_getaffinity(0))))
        cls.paths = [os.path.join(PHOTOS, name) for name in ("grace_hopper.jpg", "camera.png", "chelsea.png")]
        cls.bytes = []
        for path in cls.paths:
            with open(path, "rb") as f:
                cls.bytes.append(f.read())

    @classmethod
    def tearDownClass(cls):
        cls.executor.close()
        cls.model.close()
        cls.directory.cleanup()

    def test_describe(self):
        d = self.model.describe()
        self.assertEqual((d.modality, d.image_size, d.dimensions, d.layers), (uform.Modality.IMAGE_ENCODER, 64, 32, 1))

    def test_bytes_and_paths(self):
        from_bytes = self.model.encode_images(self.executor, self.bytes)
        from_paths = self.model.encode_images(self.executor, self.paths)
        self.assertEqual(len(from_bytes), 3)
        for a, b in zip(from_bytes, from_paths):
            self.assertEqual(list(a), list(b))
        self.assertFalse(rows_close(from_bytes[0], from_bytes[1]))
        single = self.model.encode_images(None, self.bytes[0])
        self.assertTrue(rows_close(single[0], from_bytes[0]))

    @unittest.skipIf(np is None or Image is None, "NumPy and PIL are needed")
    def test_numpy_and_pil(self):
        expected = self.model.encode_images(self.executor, self.bytes)
        opened = [Image.open(path) for path in self.paths]  # RGB, L, RGB
        self.assertEqual(opened[1].mode, "L")
        from_pil = self.model.encode_images(self.executor, opened)
        from_numpy = self.model.encode_images(self.executor, [np.asarray(opened[0]), np.asarray(opened[2])])
        for a, b in zip(from_pil, expected):
            self.assertTrue(rows_close(a, b))
        self.assertTrue(rows_close(from_numpy[0], expected[0]) and rows_close(from_numpy[1], expected[2]))
        strided = np.asarray(opened[0])[:, ::2]  # not contiguous: copied
        self.assertEqual(len(self.model.encode_images(self.executor, strided)), 1)
        with self.assertRaises(uform.Error) as caught:
            self.model.encode_images(self.executor, np.zeros((4, 4, 4), dtype=np.uint8))
        self.assertEqual(caught.exception.kind, uform.Status.INVALID_ARGUMENT)

    @unittest.skipIf(np is None or Image is None, "NumPy and PIL are needed")
    def test_pil_modes_png_cannot_hold_are_resized_in_their_own_mode_as_the_packages_processor(self):
        # The package's processor resizes in the image's mode, then converts to RGB, then crops; CMYK,
        # YCbCr, LAB, HSV, I, F, PA, RGBX, RGBa give the same rows as the pixels it would crop.
        size = self.model.describe().image_size
        with Image.open(self.paths[2]) as photo:
            base = photo.convert("RGB")
        ramp = (np.indices((150, 97)).sum(0) * 7 % 1001).astype(np.int32)  # 0..1000: mode I past 255
        shapes = {"portrait": (97, 150), "landscape, short side the model's already": (130, size),
                  "smaller than the model's": (40, 50)}
        def cmyk(im):  # with black ink too (RGB's CMYK has none), so that CMYK -> RGB clips
            ink = 255 - np.asarray(im)
            black = (np.resize(ramp, (im.height, im.width)) % 256).astype(np.uint8)[..., None]
            return Image.fromarray(np.concatenate([ink, black], axis=2), "CMYK")

        made = {"CMYK": cmyk, "YCbCr": lambda im: im.convert("YCbCr"),
                "LAB": lambda im: im.convert("LAB"), "HSV": lambda im: im.convert("HSV"),
                "RGBX": lambda im: im.convert("RGBX"), "RGBa": lambda im: im.convert("RGBA").convert("RGBa"),
                "PA": lambda im: im.convert("P").convert("PA"),
                "I": lambda im: Image.fromarray(np.resize(ramp, (im.height, im.width)), "I"),
                "F": lambda im: Image.fromarray(np.resize(ramp, (im.height, im.width)).astype(np.float32) / 3, "F")}
        try:  # the reference itself, where torchvision is importable: its Resize on PIL images
            from torchvision.transforms import InterpolationMode, Resize
        except ImportError:
            Resize = None
        processor = uform.models.ImageProcessor(self.model)
        for shape_name, shape in shapes.items():
            for mode, make in made.items():
                with self.subTest(shape_name, mode=mode):
                    image = make(base.resize(shape, Image.BICUBIC))
                    self.assertEqual(image.mode, mode)
                    if Resize is not None:
                        reference = Resize(size, interpolation=InterpolationMode.BICUBIC)(image).convert("RGB")
                        self.assertTrue(np.array_equal(np.asarray(reference), np.asarray(package_resize(image, size))))
                    expected = self.model.encode_images(self.executor, package_pixels(image, size))
                    for name, rows in (("encode_images", self.model.encode_images(self.executor, image)),
                                       ("ImageProcessor", self.model.encode_images(self.executor,
                                                                                    processor(image)["images"]))):
                        self.assertGreaterEqual(cosine(rows[0], expected[0]), 0.99999, name)
                        self.assertTrue(rows_close(rows[0], expected[0], 1e-5), name)
        # Where it matters: converting to RGB first (as before) gives other pixels, and other rows.
        for mode in ("CMYK", "I"):
            image = made[mode](base.resize(shapes["portrait"], Image.BICUBIC))
            first = np.asarray(package_resize(image.convert("RGB"), size)).astype(int)
            self.assertGreater(int(np.abs(first - np.asarray(package_resize(image, size))).max()), 10, mode)
            self.assertFalse(rows_close(self.model.encode_images(self.executor, image)[0],
                                        self.model.encode_images(self.executor, image.convert("RGB"))[0], 1e-4), mode)
        # What the processor keeps for such an image: the resized RGB pixels, which C crops.
        kept = processor(made["CMYK"](base.resize(shapes["portrait"], Image.BICUBIC)))["images"][0]
        self.assertEqual((type(kept), kept.shape, kept.dtype), (np.ndarray, (int(size * 150 / 97), size, 3), np.uint8))

    def test_statuses_and_errors(self):
        with open(os.path.join(BAD, "truncated.jpg"), "rb") as f:
            truncated = f.read()
        rows, statuses = self.model.encode_images(self.executor, [self.bytes[0], truncated, b""], statuses=True)
        self.assertEqual(statuses, [uform.Status.OK, uform.Status.CORRUPT_FILE, uform.Status.CORRUPT_FILE])
        self.assertTrue(all(float(x) == 0.0 for x in rows[1]))
        with self.assertRaises(uform.Error) as caught:
            self.model.encode_images(self.executor, [self.bytes[0], truncated])
        self.assertEqual(caught.exception.kind, uform.Status.CORRUPT_FILE)
        self.assertIn("image 1", str(caught.exception))
        with self.assertRaises(TypeError):
            self.model.encode_images(self.executor, [3.5])

    @unittest.skipIf(np is None, "NumPy is needed")
    def test_numpy_layouts_c_cannot_read_are_copied(self):
        pixels = np.random.default_rng(7).integers(0, 256, (60, 80, 3), dtype=np.uint8)
        row = pixels[:1]
        base = pixels.reshape(-1)
        layouts = {
            "broadcast rows (row stride 0)": np.broadcast_to(row, (50, 80, 3)),
            "overlapping rows (row stride 3)": np.lib.stride_tricks.as_strided(base, (50, 80, 3), (3, 3, 1)),
            "upside down (negative row stride)": pixels[::-1],
            "a crop (row stride above a row)": pixels[5:45, 10:70],
            "one row": pixels[:1],
            "one column": pixels[:, :1],
        }
        for name, image in layouts.items():
            with self.subTest(name):
                expected = self.model.encode_images(self.executor, np.ascontiguousarray(image))
                self.assertEqual(list(self.model.encode_images(self.executor, image)[0]), list(expected[0]))
        batch = np.stack([pixels, pixels[::-1]])  # [images, height, width, 3]: one row each
        rows = self.model.encode_images(self.executor, batch)
        self.assertEqual(len(rows), 2)
        self.assertTrue(rows_close(rows[1], self.model.encode_images(self.executor, pixels[::-1])[0]))

    @unittest.skipIf(np is None, "NumPy is needed")
    def test_a_broadcast_view_is_copied_only_within_the_decoders_pixel_cap(self):
        pixel = np.zeros((1, 1, 3), np.uint8)
        huge = np.broadcast_to(pixel, (20000, 20000, 3))  # 3 bytes behind 1.2 GB of view
        with self.assertRaises(uform.Error) as caught:
            self.model.encode_images(self.executor, [self.bytes[0], huge])
        self.assertEqual(caught.exception.kind, uform.Status.LIMIT_EXCEEDED)
        self.assertEqual(caught.exception.message,
                         "image 1: a NumPy image of shape (20000, 20000, 3) would be copied for C to read (its rows "
                         "are not contiguous and ascending), and 400000000 pixels pass the 178956970 that decoded "
                         "images may have; pass a C-contiguous array")
        small = np.broadcast_to(pixel, (300, 400, 3))  # within the cap: copied and encoded
        self.assertEqual(list(self.model.encode_images(self.executor, small)[0]),
                         list(self.model.encode_images(self.executor, np.zeros((300, 400, 3), np.uint8))[0]))

    def test_mappings_and_sets_of_images_are_refused(self):
        with self.assertRaises(TypeError) as caught:
            self.model.encode_images(self.executor, {"images": self.bytes})
        self.assertEqual(str(caught.exception), "images must be a sequence, not a dict, whose iteration gives its keys "
                                                "(a processor's output? pass its 'texts' or 'images')")
        with self.assertRaises(TypeError) as caught:
            self.model.encode_images(self.executor, set(self.paths))
        self.assertEqual(str(caught.exception), "images must be a sequence, not a set, whose order is arbitrary; "
                                                "pass a list")

    @unittest.skipIf(np is None or Image is None, "NumPy and PIL are needed")
    def test_an_empty_pil_image_is_named_as_one(self):
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            self.model.encode_images(self.executor, [self.bytes[0], Image.new("RGB", (0, 0))])
        self.assertEqual(caught.exception.message, "image 1: a PIL image of shape (0, 0, 3) has zero width")
        for mode, bands in (("L", 1), ("P", 1), ("LA", 2), ("1", 1), ("CMYK", 4), ("RGB", 3)):  # before PNG refuses it
            for size, side in (((0, 5), "width"), ((5, 0), "height")):
                with self.subTest(mode=mode, size=size), self.assertRaises(uform.InvalidArgumentError) as caught:
                    self.model.encode_images(self.executor, [self.bytes[0], Image.new(mode, size)], statuses=True)
                self.assertEqual(caught.exception.message,
                                 f"image 1: a PIL image of shape {(size[1], size[0], bands)} has zero {side}")

    @unittest.skipIf(np is None, "NumPy is needed")
    def test_numpy_shapes_c_cannot_take_are_named(self):
        for shape, side in (((10, 0, 3), "width"), ((0, 10, 3), "height")):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.encode_images(self.executor, [self.bytes[0], np.zeros(shape, np.uint8)], statuses=True)
            self.assertEqual(caught.exception.message, f"image 1: a NumPy image of shape {shape} has zero {side}")
        gray = np.zeros((64, 64), np.uint8)  # not a batch of 64 rows
        processor = uform.models.ImageProcessor(self.model)
        for call in (lambda: self.model.encode_images(self.executor, gray), lambda: processor(gray)):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                call()
            self.assertIn("not an array of shape (64, 64) uint8", caught.exception.message)
            self.assertIn("[height, width, 3]", caught.exception.message)
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            self.model.encode_images(self.executor, [self.bytes[0], gray])
        self.assertEqual(caught.exception.message,
                         "image 1: a NumPy image must be [height, width, 3] uint8 RGB, not (64, 64) uint8")

    def test_arguments_of_the_wrong_type(self):
        for executor in ("x", 42):
            with self.assertRaises(TypeError) as caught:
                self.model.encode_images(executor, self.bytes[0])
            self.assertEqual(str(caught.exception),
                             f"executor must be a uform.Executor or None (inline), not {executor!r}")
        with self.assertRaises(TypeError) as caught:
            self.model.encode_images(self.executor, 3.5)
        self.assertEqual(str(caught.exception), "images must be an image or a sequence of images, not float")
        for item, name in ((3.5, "float"), (None, "NoneType"), (7, "int")):  # TypeError, as encode_texts([None])
            with self.assertRaises(TypeError) as caught:
                self.model.encode_images(self.executor, [self.bytes[0], item])
            self.assertNotIsInstance(caught.exception, uform.Error)
            self.assertEqual(str(caught.exception),
                             f"image 1: an image is bytes, a path, a NumPy array or a PIL image, not {name}")
        with self.assertRaises(TypeError) as caught:
            self.model.encode_images(self.executor, self.bytes[0], dimensions=1.5)
        self.assertEqual(str(caught.exception), "dimensions must be an integer, not 1.5")

    def test_paths_that_are_not_regular_files_are_refused_unread(self):
        with tempfile.TemporaryDirectory() as directory:
            fifo = os.path.join(directory, "fifo.png")
            os.mkfifo(fifo)
            done = threading.Event()

            def unblock():  # were the FIFO opened to be read, a writer ends the wait with EOF
                if not done.wait(10):
                    with open(fifo, "wb"):
                        pass

            threading.Thread(target=unblock, daemon=True).start()
            try:
                with self.assertRaises(uform.InvalidArgumentError) as caught:
                    self.model.encode_images(self.executor, [self.paths[0], fifo])
            finally:
                done.set()
            self.assertEqual(caught.exception.message, f"image 1: cannot read {fifo!r}: not a regular file (a FIFO)")
            for path, kind in ((os.devnull, "a character device"), (directory, "a directory")):
                with self.assertRaises(uform.InvalidArgumentError) as caught:
                    self.model.encode_images(self.executor, path)
                self.assertEqual(caught.exception.message,
                                 f"image 0: cannot read {path!r}: not a regular file ({kind})")
            # Above the CLI's 1 GiB cap: refused from its size, before a byte is read (the file is sparse).
            large = os.path.join(directory, "large.png")
            with open(large, "wb") as f:
                f.truncate((1 << 30) + 1)
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.encode_images(self.executor, [self.bytes[0], large])
            self.assertEqual(caught.exception.message,
                             f"image 1: cannot read {large!r}: larger than 1 GiB (1073741825 bytes)")
            # A path that cannot be opened: named as the others, not a bare OSError or ValueError.
            absent, socket_path = os.path.join(directory, "absent.png"), os.path.join(directory, "socket.png")
            listener = socket.socket(socket.AF_UNIX)
            self.addCleanup(listener.close)
            listener.bind(socket_path)
            for path, reason in ((absent, "No such file or directory"), ("", "No such file or directory"),
                                 (directory + "/a\0b.png", "embedded null byte"),
                                 (socket_path, "not a regular file (a socket)")):
                with self.subTest(path=path), self.assertRaises(uform.InvalidArgumentError) as caught:
                    self.model.encode_images(self.executor, [self.bytes[0], path], statuses=True)
                self.assertEqual(caught.exception.message, f"image 1: cannot read {path!r}: {reason}")
            # A symbolic link is followed: to a regular file it reads, to the FIFO it refuses.
            link, to_fifo = os.path.join(directory, "link.png"), os.path.join(directory, "to-fifo.png")
            os.symlink(self.paths[1], link)
            os.symlink(fifo, to_fifo)
            self.assertEqual(list(self.model.encode_images(self.executor, link)[0]),
                             list(self.model.encode_images(self.executor, self.bytes[1])[0]))
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.encode_images(self.executor, to_fifo)
            self.assertEqual(caught.exception.message, f"image 0: cannot read {to_fifo!r}: not a regular file (a FIFO)")

    @unittest.skipIf(np is None or Image is None, "NumPy and PIL are needed")
    def test_a_1d_object_array_is_a_sequence_of_images(self):
        items = [self.bytes[0], self.paths[1], np.asarray(Image.open(self.paths[2])), Image.open(self.paths[0])]
        column = np.empty(len(items), dtype=object)  # what pandas.Series.values gives for a column of images
        for i, item in enumerate(items):
            column[i] = item
        expected = self.model.encode_images(self.executor, items)
        rows = self.model.encode_images(self.executor, column)
        self.assertEqual(rows.shape, (4, 32))
        for a, b in zip(rows, expected):
            self.assertEqual(list(a), list(b))
        self.assertEqual(len(uform.models.ImageProcessor(self.model)(column)["images"]), 4)
        with self.assertRaises(TypeError) as caught:  # its items are checked as a list's are
            self.model.encode_images(self.executor, np.array([self.bytes[0], None], dtype=object))
        self.assertEqual(str(caught.exception),
                         "image 1: an image is bytes, a path, a NumPy array or a PIL image, not NoneType")
        square = np.empty((2, 2), dtype=object)
        square[:] = [[self.bytes[0], self.bytes[1]], [self.bytes[2], self.bytes[0]]]
        for other in (square, np.array([b"\x89PNG", b"\xff\xd8"])):  # another rank; bytes of a fixed width
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.encode_images(self.executor, other)
            self.assertEqual(caught.exception.message,
                             f"images must be a NumPy image [height, width, 3] or batch [images, height, width, 3] of "
                             f"uint8 RGB, a 1-D object array of images, or a sequence of images, not an array of shape "
                             f"{other.shape} {other.dtype}")

    def test_host_tensors_in_bfloat16_or_requiring_grad(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed")
        if np is None:
            self.skipTest("NumPy is needed")
        encoder = uform.models.ImageEncoder(self.model, self.executor, (MEANS, DEVIATIONS))
        means = torch.tensor(MEANS, dtype=torch.float64).view(1, 3, 1, 1)
        deviations = torch.tensor(DEVIATIONS, dtype=torch.float64).view(1, 3, 1, 1)

        def normalised(pixels, dtype):  # what the uform package's PyTorch processor makes of uint8 RGB
            return ((torch.from_numpy(pixels).permute(0, 3, 1, 2).double() / 255 - means) / deviations).to(dtype)

        # Levels whose normalised values bfloat16 holds to 0.005 of a level, per channel: tellable back.
        levels = np.arange(256, dtype=np.uint8).reshape(256, 1, 1, 1).repeat(3, axis=3)  # 256 images of 1 pixel
        back = (normalised(levels, torch.bfloat16).double() * deviations + means).reshape(256, 3).numpy() * 255
        held = [np.flatnonzero(np.abs(back[:, c] - np.arange(256)) <= 0.005).astype(np.uint8) for c in range(3)]
        rng = np.random.default_rng(5)
        exact = np.stack([rng.choice(held[c], (2, 64, 64)) for c in range(3)], axis=-1)
        pixels = rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
        for name, tensor, expected in (
                ("float32 requiring grad", normalised(pixels, torch.float32).requires_grad_(), pixels),
                ("bfloat16", normalised(exact, torch.bfloat16), exact),
                ("bfloat16 requiring grad", normalised(exact, torch.bfloat16).requires_grad_(), exact)):
            with self.subTest(name):
                rows = encoder.encode({"images": tensor})
                self.assertEqual(rows.tolist(), self.model.encode_images(self.executor, expected).tolist())
        # bfloat16 and float16 round most levels too far to tell them back: the same refusal for both.
        for dtype, named in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                encoder.encode({"images": normalised(pixels, dtype).requires_grad_()})
            self.assertEqual(caught.exception.message,
                             "images: this float array is not 8-bit pixels normalised with this model's "
                             "normalization_means and normalization_deviations, as the uform package's ImageProcessor "
                             "for this model makes them; pass the images themselves (or float32 pixels: "
                             f"{named} may round them by more than the 0.01 of a level allowed)")
        # A tensor off the host (here PyTorch's meta device, which needs no GPU) still gets the advice.
        with self.assertRaises(TypeError) as caught:
            encoder.encode({"images": torch.empty((1, 3, 64, 64), device="meta")})
        self.assertRegex(str(caught.exception), r"^images: a Tensor NumPy cannot read \(.*\); it is on meta: pass it "
                                                r"in host memory \(\.cpu\(\)\)$")

    def test_close_while_another_thread_encodes_is_contended(self):
        model = uform.Model.open(self.library, self.directory.name, uform.Modality.IMAGE_ENCODER)
        expected = self.model.encode_images(self.executor, self.bytes[0])
        refusal, rows = close_during(model, "uform_encode_images",
                                     lambda: model.encode_images(self.executor, self.bytes[0]))
        self.assertIsInstance(refusal, uform.ContendedError)
        self.assertEqual(refusal.message, "another thread is inside a call on this model; close it after")
        self.assertEqual(list(rows[0]), list(expected[0]))
        self.assertFalse(model.closed)
        model.close()
        self.assertTrue(model.closed)

    def test_matryoshka_and_dtypes(self):
        full = self.model.encode_images(self.executor, self.bytes[:1])
        narrow = self.model.encode_images(self.executor, self.bytes[:1], dimensions=8, normalize=True,
                                          dtype=uform.DType.F16)
        norm = math.sqrt(sum(float(x) ** 2 for x in full[0][:8]))
        self.assertTrue(rows_close(narrow[0], [float(x) / norm for x in full[0][:8]], 2e-3))

    def test_get_model(self):
        processors, models = uform.get_model(self.directory.name, modalities=["image_encoder"], library=self.library,
                                             threads=1)
        processor, encoder = processors[uform.Modality.IMAGE_ENCODER], models[uform.Modality.IMAGE_ENCODER]
        rows = encoder.encode(processor(self.paths))
        expected = self.model.encode_images(self.executor, self.bytes)
        for a, b in zip(rows, expected):
            self.assertTrue(rows_close(a, b))
        encoder.executor.close()
        encoder.model.close()


if __name__ == "__main__":
    unittest.main()
