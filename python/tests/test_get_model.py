"""`uform.get_model` as a stand-in for the ``uform`` PyPI package's (issues 12 and 13): every tower a
directory holds when no modalities are named, the package's modality spellings, its README's flow end
to end, the encoders taking plain texts and images and the package's own processor output, and the
features (``return_features=True``), and the refusal of token ids with its reason.

The model directory holds both towers: test/models/tiny-uform3's text tower (committed) beside a
tiny random image tower written here (test_images.write_tower), under one config.json. The
``uform`` package's processors run in a child interpreter ($UFORM_TEST_UFORM_PYTHON, else this
one) without this package on its path, since both are named ``uform``; where that interpreter lacks
the package (or NumPy, PIL, tokenizers) those tests skip, saying so.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import uform

from _support import REPOSITORY, library
from test_images import PHOTOS, rows_close, write_tower

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None
try:
    from PIL import Image
except ImportError:  # pragma: no cover
    Image = None

TINY_UFORM3 = os.path.join(REPOSITORY, "test", "models", "tiny-uform3")
TINY_BERT = os.path.join(REPOSITORY, "test", "models", "tiny-bert")
TEXTS = ["a cat sat on the mat", "the big red dog ran in the fog", "hello world"]
NAMES = ("grace_hopper.jpg", "camera.png", "chelsea.png")
IDS_REFUSED = ("encode got token ids (as the uform package's TextProcessor returns: 'input_ids' and 'attention_mask' "
               "without 'texts'), but the engine tokenizes texts itself and its C ABI takes no ids; pass the texts, "
               "or what this package's TextProcessor (processors[Modality.TEXT_ENCODER]) returns, which carries "
               "them under 'texts'")


class PackageModality(enum.Enum):
    """The ``uform`` package's own `Modality` (uform/shared.py), as code mixing both would hold."""

    TEXT_ENCODER = "text_encoder"
    IMAGE_ENCODER = "image_encoder"
    VIDEO_ENCODER = "video_encoder"
    TEXT_DECODER = "text_decoder"


def write_both_towers(directory: str) -> None:
    """tiny-uform3's text tower and a random image tower (6-wide embeddings both) in ``directory``."""
    write_tower(directory, embedding=6)
    for name in ("text_encoder.safetensors", "tokenizer.json", "vocab.txt"):
        shutil.copy(os.path.join(TINY_UFORM3, name), os.path.join(directory, name))
    with open(os.path.join(TINY_UFORM3, "config.json")) as f:
        text = json.load(f)["text_encoder"]
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    config["text_encoder"] = text
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)


def close_all(models) -> None:
    for encoder in models.values():
        encoder.executor.close()
        encoder.model.close()


def photo_bytes() -> list:
    out = []
    for name in NAMES:
        with open(os.path.join(PHOTOS, name), "rb") as f:
            out.append(f.read())
    return out


class GetModel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.library = library()
        cls.temporary = tempfile.TemporaryDirectory()
        cls.both = os.path.join(cls.temporary.name, "both")
        os.mkdir(cls.both)
        write_both_towers(cls.both)
        cls.image_only = os.path.join(cls.temporary.name, "image-only")
        os.mkdir(cls.image_only)
        write_tower(cls.image_only, embedding=6)
        cls.text = uform.Model.open(cls.library, cls.both, uform.Modality.TEXT_ENCODER)
        cls.image = uform.Model.open(cls.library, cls.both, uform.Modality.IMAGE_ENCODER)
        try:
            cls.text.tokenize("probe")
            cls.tokenizes = True
        except uform.Error as error:
            cls.tokenizes = error.kind != uform.Status.UNSUPPORTED
        cls.photos = photo_bytes()

    @classmethod
    def tearDownClass(cls):
        cls.text.close()
        cls.image.close()
        cls.temporary.cleanup()

    def setUp(self):
        if not self.tokenizes:
            self.skipTest("this build's tokenizer is a placeholder")

    def get_model(self, path, **arguments):
        processors, models = uform.get_model(path, library=self.library, threads=1, **arguments)
        self.addCleanup(close_all, models)
        return processors, models

    # ---- which towers ----

    def test_no_modalities_opens_every_tower_the_directory_holds(self):
        for path, expected in ((self.both, {uform.Modality.TEXT_ENCODER, uform.Modality.IMAGE_ENCODER}),
                               (TINY_UFORM3, {uform.Modality.TEXT_ENCODER}),  # an image section, no image weights
                               (TINY_BERT, {uform.Modality.TEXT_ENCODER}),  # sentence-transformers: model.safetensors
                               (self.image_only, {uform.Modality.IMAGE_ENCODER})):
            with self.subTest(path):
                processors, models = self.get_model(path)
                self.assertEqual(set(models), expected)
                self.assertEqual(set(processors), expected)
        processors, models = self.get_model(self.both)
        self.assertIsInstance(models[uform.Modality.TEXT_ENCODER], uform.models.TextEncoder)
        self.assertIsInstance(models[uform.Modality.IMAGE_ENCODER], uform.models.ImageEncoder)
        self.assertIsInstance(processors[uform.Modality.TEXT_ENCODER], uform.models.TextProcessor)
        self.assertIsInstance(processors[uform.Modality.IMAGE_ENCODER], uform.models.ImageProcessor)

    def test_no_modalities_on_a_directory_without_weights_names_what_is_missing(self):
        with self.assertRaises(uform.Error) as caught:
            uform.get_model(os.path.join(self.temporary.name, "nothing-here"), library=self.library)
        self.assertIn("nothing-here", caught.exception.message)

    def test_a_tower_present_but_broken_raises_rather_than_being_skipped(self):
        broken = os.path.join(self.temporary.name, "broken")
        os.mkdir(broken)
        write_both_towers(broken)
        with open(os.path.join(broken, "image_encoder.safetensors"), "r+b") as f:
            f.truncate(200)
        with self.assertRaises(uform.CorruptFileError) as caught:
            uform.get_model(broken, library=self.library, threads=1)
        self.assertIn("image_encoder.safetensors", caught.exception.message)

    def test_modality_spellings_of_the_uform_package(self):
        text, image = uform.Modality.TEXT_ENCODER, uform.Modality.IMAGE_ENCODER
        for modalities, expected in (([text, image], {text, image}), (("text_encoder", "image_encoder"), {text, image}),
                                     ([PackageModality.IMAGE_ENCODER], {image}), ("image_encoder", {image}),
                                     (PackageModality.TEXT_ENCODER, {text}), (["TEXT_ENCODER", "image"], {text, image}),
                                     (["text", "text_encoder", text], {text}), ([], set())):
            with self.subTest(modalities=modalities):
                processors, models = self.get_model(self.both, modalities=modalities)
                self.assertEqual(set(models), expected)
                self.assertEqual(set(processors), expected)
        processors, models = self.get_model(self.both)
        for key in ("image_encoder", "image", PackageModality.IMAGE_ENCODER, image):  # keys in every spelling too
            self.assertIs(models[key], models[image])
            self.assertIn(key, models)
            self.assertIs(processors.get(key), processors[image])
        self.assertNotIn("audio", models)
        self.assertIsNone(models.get(PackageModality.VIDEO_ENCODER))
        with self.assertRaises(KeyError):
            models["audio"]
        for lacking in (PackageModality.VIDEO_ENCODER, "text_decoder"):
            with self.assertRaises(uform.UnsupportedError) as caught:
                uform.get_model(self.both, modalities=[text, lacking], library=self.library)
            spelling = getattr(lacking, "value", lacking)
            self.assertEqual(caught.exception.message,
                             f"modality {spelling!r}: the engine has text and image encoders only "
                             f"(Modality.TEXT_ENCODER, Modality.IMAGE_ENCODER)")
        with self.assertRaises(uform.InvalidArgumentError):
            uform.get_model(self.both, modalities=["audio"], library=self.library)
        # One modality as Model.open takes it, the uform_modality_t code too; anything else names modalities.
        for modalities, expected in ((0, {text}), (1, {image}), ([1, "text"], {text, image})):
            with self.subTest(modalities=modalities):
                self.assertEqual(set(self.get_model(self.both, modalities=modalities)[1]), expected)
        for modalities, bad in ((True, True), (3.5, 3.5), (2, 2), (object, object), ([0, None], None)):
            with self.subTest(modalities=modalities), self.assertRaises(uform.InvalidArgumentError) as caught:
                uform.get_model(self.both, modalities=modalities, library=self.library)
            self.assertEqual(caught.exception.message,
                             f"modalities: {bad!r} is not a modality; expected Modality.TEXT_ENCODER or "
                             f"Modality.IMAGE_ENCODER, 'text_encoder' or 'image_encoder' ('text', 'image'), the code "
                             f"0 or 1, or a sequence of them")

    def test_the_packages_other_modalities_are_members_the_engine_opens_none_of(self):
        # The package's enum, names and values in its order; VIDEO_ENCODER and TEXT_DECODER are found,
        # never opened.
        self.assertEqual([(m.name, m.value) for m in uform.Modality], [(m.name, m.value) for m in PackageModality])
        video, decoder = uform.Modality.VIDEO_ENCODER, uform.Modality.TEXT_DECODER
        self.assertIs(uform.Modality("video_encoder"), video)
        self.assertEqual((uform.Modality.TEXT_ENCODER.code, uform.Modality.IMAGE_ENCODER.code), (0, 1))
        processors, models = self.get_model(self.both)
        for lacking in (video, decoder):
            spelling = lacking.value
            refusal = (f"modality {spelling!r}: the engine has text and image encoders only "
                       f"(Modality.TEXT_ENCODER, Modality.IMAGE_ENCODER)")
            self.assertIsNone(models.get(lacking))
            self.assertIsNone(processors.get(lacking))
            self.assertNotIn(lacking, models)
            with self.assertRaises(KeyError):
                models[lacking]
            for modalities in (lacking, [uform.Modality.TEXT_ENCODER, lacking]):
                with self.subTest(modalities=modalities), self.assertRaises(uform.UnsupportedError) as caught:
                    uform.get_model(self.both, modalities=modalities, library=self.library)
                self.assertEqual(caught.exception.message, refusal)
            for call in (lambda: uform.Model.open(self.library, self.both, lacking), lambda: lacking.code):
                with self.assertRaises(uform.UnsupportedError) as caught:
                    call()
                self.assertEqual(caught.exception.message, refusal)
        # "text" is still the text encoder's first word, not the decoder's.
        self.assertEqual(set(self.get_model(self.both, modalities="text")[1]), {uform.Modality.TEXT_ENCODER})

    # ---- the uform README's flow ----

    def test_the_uform_readme_flow(self):
        # from uform import get_model, Modality   ->   from uform import get_model, Modality (this package)
        from uform import Modality, get_model

        processors, models = get_model(self.both, library=self.library, threads=1)  # a local 'uform3-image-text-...'
        self.addCleanup(close_all, models)
        model_text = models[Modality.TEXT_ENCODER]
        model_image = models[Modality.IMAGE_ENCODER]
        processor_text = processors[Modality.TEXT_ENCODER]
        processor_image = processors[Modality.IMAGE_ENCODER]

        image = Image.open(os.path.join(PHOTOS, NAMES[0])) if Image is not None else self.photos[0]
        image_data = processor_image(image)
        image_embedding = model_image.encode(image_data)
        text = TEXTS[1]
        text_data = processor_text(text)
        text_embedding = model_text.encode(text_data)

        expected_image = self.image.encode_images(None, [self.photos[0]])
        expected_text = self.text.encode_texts(None, [text])
        self.assertEqual(len(image_embedding), 1)
        self.assertEqual(len(text_embedding), 1)
        self.assertEqual(len(image_embedding[0]), 6)
        self.assertEqual(len(text_embedding[0]), 6)
        self.assertTrue(rows_close(image_embedding[0], expected_image[0], 1e-5))
        self.assertTrue(rows_close(text_embedding[0], expected_text[0], 1e-5))
        for encoder, data, expected in ((model_image, image_data, image_embedding),
                                        (model_text, text_data, text_embedding)):
            self.assertTrue(rows_close(encoder.encode(data, return_features=False)[0], expected[0], 0.0))
            self.assertTrue(rows_close(encoder(data)[0], expected[0], 0.0))
        if np is not None:
            self.assertIsInstance(text_embedding, np.ndarray)
            self.assertEqual((text_embedding.dtype, text_embedding.shape), (np.float32, (1, 6)))
            self.assertEqual((image_embedding.dtype, image_embedding.shape), (np.float32, (1, 6)))
        # The README asks for the features too: the towers' last hidden states, before the embeddings.
        image_features, image_embedding_too = model_image.encode(image_data, return_features=True)
        text_features, text_embedding_too = model_text.encode(text_data, return_features=True)
        self.assertTrue(rows_close(image_embedding_too[0], image_embedding[0], 1e-5))
        self.assertTrue(rows_close(text_embedding_too[0], text_embedding[0], 1e-5))
        for features, model, expected in ((image_features, self.image, self.image.encode_images(
                None, [self.photos[0]], features=True)[0]), (text_features, self.text, self.text.encode_texts(
                None, [text], features=True)[0])):
            d = model.describe()
            self.assertEqual((len(features), len(features[0]), len(features[0][0])), (1, d.tokens, d.hidden))
            for row, wanted in zip(features[0], expected[0]):
                self.assertTrue(rows_close(row, wanted, 0.0))
        # As many feature rows as the processor's mask has columns, so the mask weighs them.
        self.assertEqual(len(text_features[0]), len(text_data["attention_mask"][0]))
        tokens = len(self.text.tokenize(text))
        self.assertTrue(all(any(v != 0 for v in row) for row in text_features[0][:tokens]))
        self.assertTrue(all(v == 0 for row in text_features[0][tokens:] for v in row))
        if np is not None:
            self.assertEqual(text_features.dtype, np.float32)
            self.assertEqual(image_features.shape, (1, self.image.describe().tokens, self.image.describe().hidden))

    def test_the_packages_argument_names_and_encoder_attributes(self):
        # The package's first parameter is model_name; path is this package's other name for it.
        for arguments in ({"model_name": self.both}, {"path": self.both}):
            with self.subTest(list(arguments)):
                processors, models = uform.get_model(library=self.library, threads=1, **arguments)
                self.addCleanup(close_all, models)
                self.assertEqual(set(models), {uform.Modality.TEXT_ENCODER, uform.Modality.IMAGE_ENCODER})
        for arguments in ({}, {"model_name": self.both, "path": self.both}):
            with self.subTest(list(arguments)), self.assertRaises(TypeError) as caught:
                uform.get_model(library=self.library, threads=1, **arguments)
            self.assertEqual(str(caught.exception),
                             "get_model takes the model directory once, as model_name (the first argument) or as path")
        for backend in (None, "onnx", "torch"):
            with self.subTest(backend=backend):
                self.get_model(self.both, backend=backend)
        with self.assertRaises(ValueError) as caught:
            self.get_model(self.both, backend="tensorrt")
        self.assertTrue(str(caught.exception).startswith("Unknown backend: 'tensorrt'"))
        processors, models = self.get_model(self.both)
        text, image = models[uform.Modality.TEXT_ENCODER], models[uform.Modality.IMAGE_ENCODER]
        self.assertEqual(text.embedding_dim, self.text.describe().dimensions)
        self.assertEqual((image.embedding_dim, image.image_size),
                         (self.image.describe().dimensions, self.image.describe().image_size))
        self.assertEqual(len(text.encode(TEXTS)[0]), text.embedding_dim)
        self.assertEqual(len(image.encode(self.photos[:1])[0]), image.embedding_dim)

    def test_return_features_attribute_as_the_package_encoders(self):
        processors, models = self.get_model(self.both)
        for modality, data in ((uform.Modality.TEXT_ENCODER, TEXTS), (uform.Modality.IMAGE_ENCODER, self.photos[:2])):
            encoder = models[modality]
            self.assertIs(encoder.return_features, False)
            embeddings = encoder.encode(data)
            self.assertEqual(len(embeddings), len(data))
            encoder.return_features = True  # what the package's ONNX encoders default to
            features, again = encoder.encode(data)
            self.assertEqual((len(features), len(features[0])), (len(data), encoder.model.describe().tokens))
            for row, wanted in zip(again, embeddings):
                self.assertTrue(rows_close(row, wanted, 1e-5))
            self.assertEqual(len(encoder.encode(data, return_features=False)), len(data))
            encoder.return_features = False
            self.assertEqual(len(encoder.encode(data, return_features=True)), 2)

    def test_features_and_mask_as_wide_as_the_packages_with_roberta_positions(self):
        # RoBERTa positions: the context is max_position_embeddings - padding_idx - 1 (9 of 12), and the
        # package's processor pads to 12 with padding_idx 1; so do ours and the features' rows.
        roberta = os.path.join(REPOSITORY, "test", "models", "tiny-uform3-roberta")
        processors, models = self.get_model(roberta)
        encoder = models[uform.Modality.TEXT_ENCODER]
        context = encoder.model.describe().tokens
        self.assertLess(context, 12)
        data = processors[uform.Modality.TEXT_ENCODER](TEXTS)
        ids = [encoder.model.tokenize(t) for t in TEXTS]
        self.assertEqual([list(row) for row in data["input_ids"]], [i + [1] * (12 - len(i)) for i in ids])
        self.assertEqual([list(row) for row in data["attention_mask"]], [[1] * len(i) + [0] * (12 - len(i)) for i in ids])
        features, embeddings = encoder.encode(data, return_features=True)
        alone, again = encoder.model.encode_texts(None, TEXTS, features=True)
        self.assertEqual((len(features), len(features[0]), len(features[0][0])),
                         (len(TEXTS), 12, encoder.model.describe().hidden))
        for i, row_ids in enumerate(ids):
            self.assertTrue(rows_close(embeddings[i], again[i], 1e-5))
            for t in range(12):
                wanted = alone[i][t] if t < context else [0.0] * len(features[i][t])
                self.assertTrue(rows_close(features[i][t], wanted, 1e-5) if t < len(row_ids) else
                                all(float(v) == 0.0 for v in features[i][t]))

    def test_eval_and_to_as_the_packages_modules(self):
        processors, models = self.get_model(self.both)
        try:
            import torch
        except ImportError:
            torch = None
        for modality, data in ((uform.Modality.TEXT_ENCODER, TEXTS), (uform.Modality.IMAGE_ENCODER, self.photos)):
            encoder = models[modality]
            expected = encoder.encode(data)
            with self.subTest(modality.name):
                self.assertIs(encoder.eval(), encoder)
                self.assertIs(encoder.training, False)  # as the package's modules after eval()
                here = ["cpu"] + ([torch.device("cpu")] if torch is not None else [])
                for device in here:
                    self.assertIs(encoder.to(device), encoder)
                    self.assertIs(encoder.to(device=device).eval(), encoder)
                elsewhere = ["cuda", "cuda:0", "mps"] + ([torch.device("cuda", 1)] if torch is not None else [])
                for device in elsewhere:
                    with self.assertRaises(uform.UnsupportedError) as caught:
                        encoder.to(device)
                    self.assertEqual(caught.exception.message,
                                     f"to({str(device)!r}): this encoder runs on 'cpu' and cannot move; pass the "
                                     f"device to get_model (its device argument: 'cpu', 'cuda' or 'cuda:N') to "
                                     f"encode there")
                self.assertTrue(rows_close(encoder.eval().to("cpu").encode(data)[0], expected[0], 0.0))
        # An encoder made directly runs where its model lies.
        self.assertIs(uform.models.ImageEncoder(self.image, None).to("cpu").eval().to("cpu").model, self.image)

    def test_a_processor_dict_with_an_attention_mask_is_refused_as_the_package_asserts(self):
        # The package: `assert attention_mask is None, "If `x` is a dictionary, then `attention_mask`
        # should be None"`, before reading the dict; here an InvalidArgumentError saying so.
        processors, models = self.get_model(self.both)
        encoder = models[uform.Modality.TEXT_ENCODER]
        data = processors[uform.Modality.TEXT_ENCODER](TEXTS)
        ids = {"input_ids": data["input_ids"], "attention_mask": data["attention_mask"]}
        for x in (data, ids, {"sentences": TEXTS}):
            for mask in (data["attention_mask"], [[1]]):
                with self.assertRaises(uform.InvalidArgumentError) as caught:
                    encoder.encode(x, data["attention_mask"])
                self.assertEqual(caught.exception.message,
                                 "encode got a processor's dict and an attention_mask; the dict carries its own: pass "
                                 "attention_mask=None (the uform package asserts \"If `x` is a dictionary, then "
                                 "`attention_mask` should be None\")")
                with self.assertRaises(uform.InvalidArgumentError):
                    encoder.encode(x, attention_mask=mask, return_features=True)
        # Without a dict the mask is accepted and unused, as before; None with a dict is the package's call.
        expected = encoder.encode(TEXTS)
        for x, mask in ((TEXTS, data["attention_mask"]), (data, None)):
            rows = encoder.encode(x, mask)
            for a, b in zip(rows, expected):
                self.assertTrue(rows_close(a, b, 0.0))

    def test_one_encoder_from_several_threads_at_once(self):
        # The package's encoders may be called from a web server's thread pool; the calls take turns on
        # the encoder's executor (one call at a time) instead of failing CONTENDED, each getting its rows.
        processors, models = self.get_model(self.both)
        text, image = models[uform.Modality.TEXT_ENCODER], models[uform.Modality.IMAGE_ENCODER]
        jobs = [(text, processors[uform.Modality.TEXT_ENCODER](t)) for t in TEXTS]
        jobs += [(image, processors[uform.Modality.IMAGE_ENCODER](p)) for p in self.photos]
        jobs += [(text, TEXTS), (image, self.photos)]
        expected = [encoder.encode(data) for encoder, data in jobs]
        threads, calls = 8, 6
        start = threading.Barrier(threads)
        results, failures = {}, []

        def work(worker):
            start.wait()
            for call in range(calls):
                job = (worker + call) % len(jobs)
                encoder, data = jobs[job]
                try:
                    results[worker, call] = job, encoder.encode(data)
                except Exception as error:  # noqa: BLE001 - every failure is reported below
                    failures.append(f"{type(error).__name__}: {error}")

        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
        self.assertFalse(any(worker.is_alive() for worker in workers))
        self.assertEqual(failures, [])
        self.assertEqual(len(results), threads * calls)
        for (worker, call), (job, rows) in results.items():
            self.assertEqual(len(rows), len(expected[job]))
            for a, b in zip(rows, expected[job]):
                self.assertTrue(rows_close(a, b, 0.0), (worker, call, job))

    @unittest.skipUnless(hasattr(os, "fork"), "no fork() here")
    def test_a_forked_child_is_refused_rather_than_waiting_for_the_parents_turn(self):
        if "tsan" in os.environ.get("LD_PRELOAD", ""):
            self.skipTest("fork() of a multi-threaded interpreter under a preloaded ThreadSanitizer")
        import time
        import warnings

        processors, models = self.get_model(self.both, modalities="text")
        encoder = models[uform.Modality.TEXT_ENCODER]
        encoder.encode(TEXTS)
        read, write = os.pipe()
        with encoder._turn, warnings.catch_warnings():  # as if another thread were encoding at the fork
            # Python 3.12+ warns on any fork of a threaded process; the engine's fork handling is under test.
            warnings.filterwarnings("ignore", "This process .* is multi-threaded", DeprecationWarning)
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                try:
                    encoder.encode(TEXTS)
                    said = "ran"
                except uform.Error as error:
                    said = error.kind.name
                except BaseException as error:  # noqa: BLE001 - reported to the parent
                    said = type(error).__name__
                os.write(write, said.encode())
                os._exit(0)
        os.close(write)
        deadline = time.monotonic() + 30
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                self.fail("the forked child waited for the parent's turn")
            time.sleep(0.01)
        with os.fdopen(read, "rb") as pipe:
            self.assertEqual(pipe.read(), b"FORKED")
        self.assertEqual(len(encoder.encode(TEXTS)), len(TEXTS))  # the parent's turn is free again

    @unittest.skipIf(np is None or Image is None, "NumPy and PIL are needed")
    def test_the_image_processor_takes_the_pixels_when_called(self):
        # As the package's processor, which makes its tensor when called: closing the image, drawing on
        # it or refilling a buffer afterwards changes nothing the encoder sees.
        processors, models = self.get_model(self.both)
        processor, encoder = processors[uform.Modality.IMAGE_ENCODER], models[uform.Modality.IMAGE_ENCODER]
        paths = [os.path.join(PHOTOS, name) for name in NAMES]  # RGB, L, RGB
        expected = encoder.encode(self.photos)
        with Image.open(paths[0]) as rgb, Image.open(paths[1]) as gray:  # lazily loaded, closed at the end
            data = processor([rgb, gray])
        kept = data["images"]
        self.assertEqual((type(kept[0]), kept[0].shape, kept[0].dtype), (np.ndarray, (rgb.height, rgb.width, 3), np.uint8))
        self.assertIsInstance(kept[1], bytes)  # mode L: uncompressed PNG, which C resizes in mode L
        rows = encoder.encode(data)
        for a, b in zip(rows, expected[:2]):
            self.assertTrue(rows_close(a, b, 1e-5))

        with Image.open(paths[2]) as photo:
            drawn = photo.convert("RGB")
        data = processor(drawn)
        drawn.paste((0, 0, 0), (0, 0, drawn.width // 2, drawn.height))
        self.assertTrue(rows_close(encoder.encode(data)[0], expected[2], 1e-5))
        self.assertFalse(rows_close(encoder.encode(drawn)[0], expected[2], 1e-3))

        buffer = np.array(Image.open(paths[0]).convert("RGB"))  # one frame buffer, refilled
        batch = np.stack([buffer, np.ascontiguousarray(buffer[::-1])])
        frames, batches, blobs = [], [], []
        for frame in (buffer, buffer[:, ::2]):  # a strided view is copied too
            frames.append(processor(frame))
        batches.append(processor(batch))
        blob = bytearray(self.photos[0])
        blobs.append(processor(blob))
        blobs.append(processor(memoryview(blob)))
        wanted = [encoder.encode(np.array(buffer)), encoder.encode(np.array(buffer[:, ::2])),
                  encoder.encode(np.array(batch))]
        buffer[:] = 0
        batch[:] = 0
        blob[:] = bytes(len(blob))
        self.assertEqual([type(x) for d in blobs for x in d["images"]], [bytes, bytes])
        for data, rows in zip(frames + batches, wanted):
            again = encoder.encode(data)
            self.assertEqual(len(again), len(rows))
            for a, b in zip(again, rows):
                self.assertTrue(rows_close(a, b, 0.0))
        for data in blobs:
            self.assertTrue(rows_close(encoder.encode(data)[0], expected[0], 0.0))
        # A NumPy image C cannot take is named when processed, as encode names it.
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            processor([buffer, np.zeros((4, 4, 4), dtype=np.uint8)])
        self.assertEqual(caught.exception.message,
                         "image 1: a NumPy image must be [height, width, 3] uint8 RGB, not (4, 4, 4) uint8")

    # ---- what the encoders take ----

    def test_processor_outputs_are_documented_shapes(self):
        processors, models = self.get_model(self.both)
        text_data = processors[uform.Modality.TEXT_ENCODER](TEXTS)
        self.assertEqual(set(text_data), {"input_ids", "attention_mask", "texts"})
        self.assertEqual(text_data["texts"], TEXTS)
        ids = [self.text.tokenize(t) for t in TEXTS]
        width = 10  # as the uform package pads: to config.json's max_position_embeddings, with its padding_idx
        self.assertEqual([list(row) for row in text_data["input_ids"]], [i + [0] * (width - len(i)) for i in ids])
        self.assertEqual([list(row) for row in text_data["attention_mask"]],
                         [[1] * len(i) + [0] * (width - len(i)) for i in ids])
        if np is not None:
            self.assertEqual(text_data["input_ids"].dtype, np.int64)
            self.assertEqual(text_data["attention_mask"].shape, (3, width))
        image_data = processors[uform.Modality.IMAGE_ENCODER](self.photos[0])
        self.assertEqual(image_data, {"images": [self.photos[0]]})

    def test_encoders_take_plain_texts_and_images(self):
        processors, models = self.get_model(self.both)
        text_encoder, image_encoder = models[uform.Modality.TEXT_ENCODER], models[uform.Modality.IMAGE_ENCODER]
        expected = self.text.encode_texts(None, TEXTS)
        inputs = [TEXTS, tuple(TEXTS), [t.encode() for t in TEXTS]]
        if np is not None:
            inputs.append(np.array(TEXTS))
        for texts in inputs:
            rows = text_encoder.encode(texts)
            for a, b in zip(rows, expected):
                self.assertTrue(rows_close(a, b, 0.0), type(texts).__name__)
        self.assertTrue(rows_close(text_encoder.encode(TEXTS[0])[0], expected[0], 0.0))
        expected = self.image.encode_images(None, self.photos)
        paths = [os.path.join(PHOTOS, name) for name in NAMES]
        for images in (self.photos, paths, processors[uform.Modality.IMAGE_ENCODER](paths)):
            rows = image_encoder.encode(images)
            for a, b in zip(rows, expected):
                self.assertTrue(rows_close(a, b, 0.0))
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            image_encoder.encode({"pixel_values": self.photos})
        self.assertEqual(caught.exception.message,
                         "encode takes what an image processor returned ({'images': ...}) or images, not a dict of "
                         "['pixel_values']")
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            text_encoder.encode({"sentences": TEXTS})
        self.assertEqual(caught.exception.message,
                         "encode takes what a text processor returned ({'texts': ...}) or texts, not a dict of "
                         "['sentences']")

    def test_token_ids_are_refused_with_the_reason(self):
        processors, models = self.get_model(self.both)
        text_encoder = models[uform.Modality.TEXT_ENCODER]
        ours = processors[uform.Modality.TEXT_ENCODER](TEXTS)
        ids = {"input_ids": ours["input_ids"], "attention_mask": ours["attention_mask"]}  # what uform's returns
        refused = [ids, [[2, 5, 6, 3]], [2, 5, 6, 3]]
        if np is not None:
            refused += [np.asarray(ours["input_ids"]), np.asarray(ours["input_ids"], dtype=np.int32)]
        for x in refused:
            with self.assertRaises(uform.UnsupportedError) as caught:
                text_encoder.encode(x)
            self.assertEqual(caught.exception.message, IDS_REFUSED)

    @unittest.skipIf(np is None, "NumPy is needed")
    def test_the_packages_preprocessed_pixels_are_taken_back_to_pixels(self):
        processors, models = self.get_model(self.both)
        encoder = models[uform.Modality.IMAGE_ENCODER]
        means, deviations = encoder.normalization
        self.assertEqual(means, (0.48145466, 0.4578275, 0.40821073))
        pixels = np.random.default_rng(3).integers(0, 256, (3, 64, 64, 3), dtype=np.uint8)
        # What the package's processors make of a 64 x 64 image: [images, 3, size, size] float32, normalised.
        normalised = ((pixels.astype(np.float32) / 255.0 - np.float32(means)) / np.float32(deviations))
        normalised = np.ascontiguousarray(normalised.transpose(0, 3, 1, 2), dtype=np.float32)
        expected = self.image.encode_images(None, pixels)
        for x in (normalised, {"images": normalised}):
            rows = encoder.encode(x)
            for a, b in zip(rows, expected):
                self.assertTrue(rows_close(a, b, 0.0))
        for bad, message in (
                (normalised * 1.5, "images: this float array is not 8-bit pixels normalised with this model's "
                                   "normalization_means and normalization_deviations, as the uform package's "
                                   "ImageProcessor for this model makes them; pass the images themselves"),
                (normalised[:, :, :32], "images: preprocessed pixels of shape (3, 3, 32, 64) are not [images, 3, 64, "
                                        "64], what this model sees; pass the images themselves"),
                (normalised[0], "images: a float array is taken as the uform package's preprocessed pixels [images, "
                                "3, size, size], not one of shape (3, 64, 64); pass uint8 RGB [height, width, 3] or "
                                "the images themselves")):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                encoder.encode(bad)
            self.assertEqual(caught.exception.message, message)
        bare = uform.models.ImageEncoder(encoder.model, None)  # made without the config's normalisation
        with self.assertRaises(uform.UnsupportedError) as caught:
            bare.encode(normalised)
        self.assertIn("need the model's normalization_means and normalization_deviations", caught.exception.message)
        self.assertEqual(len(bare.encode(pixels)), 3)


class DeviceStrings(unittest.TestCase):
    """``device`` is checked before any GPU is looked for, so this runs without one."""

    class Reached(Exception):
        pass

    class Probe:
        """A library whose GPU lookup records that it was reached."""

        def gpu_status(self):
            raise DeviceStrings.Reached()

    def test_cuda_indices_are_ascii_digits(self):
        with tempfile.TemporaryDirectory() as directory:
            write_tower(directory, embedding=6)
            for device in ("cuda", "cuda:0", "cuda:12", "gpu"):  # "gpu": the package's ONNX spelling
                with self.subTest(device), self.assertRaises(self.Reached):
                    uform.get_model(directory, device=device, library=self.Probe())
            # str.isdigit() takes superscripts and other scripts' digits, which int() refuses or reads.
            for device in ("cuda:\u00b2", "cuda:\u0663", "cuda:\uff11", "cuda:", "cuda:-1", "cuda:0\n", "cuda:0 ",
                           "CUDA", "GPU", "gpu:0"):
                with self.subTest(device), self.assertRaises(uform.UnsupportedError) as caught:
                    uform.get_model(directory, device=device, library=self.Probe())
                self.assertEqual(caught.exception.message, f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")


# ---- the uform package's own processors, in a child interpreter ----

_PACKAGE_SCRIPT = textwrap.dedent("""
    import json, sys
    try:
        import numpy as np
        from PIL import Image
        import uform
        from uform.numpy_processors import ImageProcessor, TextProcessor
    except Exception as error:
        print(f"SKIP: {type(error).__name__}: {error}")
        raise SystemExit(77)
    if not hasattr(uform, "numpy_processors"):
        print(f"SKIP: {uform.__file__} is not the uform PyPI package"); raise SystemExit(77)
    directory, out, *paths = sys.argv[1:]
    texts = %r
    config, tokenizer = directory + "/config.json", directory + "/tokenizer.json"
    images = [Image.open(path) for path in paths]
    results = {}
    text = TextProcessor(config, tokenizer)(texts)
    results["onnx_input_ids"], results["onnx_attention_mask"] = text["input_ids"], text["attention_mask"]
    results["onnx_images"] = ImageProcessor(config)(images)
    results["onnx_one_image"] = ImageProcessor(config)(images[0])
    try:
        from uform.torch_processors import ImageProcessor as TorchImages, TextProcessor as TorchTexts
    except Exception as error:
        print(f"no PyTorch processors: {type(error).__name__}: {error}")
    else:
        text = TorchTexts(config, tokenizer)(texts)
        results["torch_input_ids"] = text["input_ids"].numpy()
        results["torch_attention_mask"] = text["attention_mask"].numpy()
        results["torch_images"] = TorchImages(config)(images)["images"].numpy()
    with open(out, "w") as file:
        json.dump({key: [str(value.dtype), value.tolist()] for key, value in results.items()}, file)
""") % (TEXTS,)


class UformPackageProcessors(unittest.TestCase):
    """What the ``uform`` PyPI package's processors return, given to this package's encoders."""

    @classmethod
    def setUpClass(cls):
        cls.temporary = tempfile.TemporaryDirectory()
        cls.both = os.path.join(cls.temporary.name, "both")
        os.mkdir(cls.both)
        write_both_towers(cls.both)
        cls.outputs, cls.skip = None, None
        python = os.environ.get("UFORM_TEST_UFORM_PYTHON") or sys.executable
        environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        out = os.path.join(cls.temporary.name, "processed.json")
        paths = [os.path.join(PHOTOS, name) for name in NAMES]
        try:
            result = subprocess.run([python, "-c", _PACKAGE_SCRIPT, cls.both, out, *paths], capture_output=True,
                                    text=True, env=environment, cwd=cls.temporary.name, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as error:
            cls.skip = f"cannot run {python}: {error}"
            return
        if result.returncode == 77:
            cls.skip = (f"{python} cannot import the uform PyPI package's processors ({result.stdout.strip()}); "
                        f"set $UFORM_TEST_UFORM_PYTHON to an interpreter that can")
            return
        if result.returncode != 0:
            raise AssertionError(f"the uform package's processors failed under {python}:\n"
                                 f"{result.stdout}{result.stderr}")
        with open(out) as f:  # lists, or the arrays they were where NumPy is importable here too
            cls.outputs = {key: np.asarray(value, dtype=dtype) if np is not None else value
                           for key, (dtype, value) in json.load(f).items()}
        cls.library = library()
        cls.processors, cls.models = uform.get_model(cls.both, library=cls.library, threads=1)
        cls.image = uform.Model.open(cls.library, cls.both, uform.Modality.IMAGE_ENCODER)

    @classmethod
    def tearDownClass(cls):
        if cls.outputs is not None:
            close_all(cls.models)
            cls.image.close()
        cls.temporary.cleanup()

    def setUp(self):
        if self.skip:
            self.skipTest(self.skip)

    def test_its_text_processor_output_is_refused_with_the_reason(self):
        encoder = self.models[uform.Modality.TEXT_ENCODER]
        for backend in ("onnx", "torch"):
            if f"{backend}_input_ids" not in self.outputs:
                continue
            with self.subTest(backend):
                processed = {"input_ids": self.outputs[f"{backend}_input_ids"],
                             "attention_mask": self.outputs[f"{backend}_attention_mask"]}
                with self.assertRaises(uform.UnsupportedError) as caught:
                    encoder.encode(processed)
                self.assertEqual(caught.exception.message, IDS_REFUSED)
                with self.assertRaises(uform.UnsupportedError):
                    encoder.encode(processed["input_ids"], processed["attention_mask"])
                # Its ids and mask for these texts are ours, padding and shape included.
                ours = self.processors[uform.Modality.TEXT_ENCODER](TEXTS)
                self.assertEqual([list(row) for row in processed["input_ids"]], [list(row) for row in ours["input_ids"]])
                self.assertEqual([list(row) for row in processed["attention_mask"]],
                                 [list(row) for row in ours["attention_mask"]])

    def test_its_image_processor_output_is_accepted(self):
        if np is None:
            self.skipTest("NumPy is needed to take its float pixels back to 8-bit pixels")
        encoder = self.models[uform.Modality.IMAGE_ENCODER]
        paths = [os.path.join(PHOTOS, name) for name in NAMES]  # portrait RGB, square L, landscape RGB
        expected = self.image.encode_images(None, paths)
        if "torch_images" not in self.outputs:
            self.skipTest("the uform package's PyTorch processors are not importable there (no torch or torchvision)")
        # Its PyTorch processor (torchvision's geometry, as the engine's): the same pixels, the same rows.
        rows = encoder.encode({"images": self.outputs["torch_images"]})
        self.assertEqual(len(rows), len(NAMES))
        for a, b in zip(rows, expected):
            self.assertTrue(rows_close(a, b, 0.0), (a, b))

    def test_its_onnx_image_processor_output_is_encoded_as_given(self):
        if np is None:
            self.skipTest("NumPy is needed to take its float pixels back to 8-bit pixels")
        encoder = self.models[uform.Modality.IMAGE_ENCODER]
        paths = [os.path.join(PHOTOS, name) for name in NAMES]
        expected = self.image.encode_images(None, paths)
        rows = encoder.encode(self.outputs["onnx_images"])
        self.assertEqual(len(rows), len(NAMES))
        # The square and the landscape photos: its geometry is torchvision's, so the engine's rows.
        for a, b in zip(rows[1:], expected[1:]):
            self.assertTrue(rows_close(a, b, 0.0), (a, b))
        one = encoder.encode(self.outputs["onnx_one_image"])
        self.assertTrue(rows_close(one[0], rows[0], 0.0))
        # The portrait photo: uform 3.1.3's NumPy processor resizes a portrait to size x its own height
        # (`height = int(height / width * size)` after `width = size`), then crops; those pixels are what is
        # encoded, not the engine's own preprocessing of the photo.
        self.assertFalse(rows_close(rows[0], expected[0], 1e-2))
        if Image is None:
            return
        size = self.image.describe().image_size
        with Image.open(paths[0]) as photo:
            width, height = photo.size
            top = round((height - size) / 2)
            stretched = photo.resize((size, height), Image.BICUBIC).crop((0, top, size, top + size)).convert("RGB")
        self.assertTrue(rows_close(rows[0], self.image.encode_images(None, stretched)[0], 0.0))

if __name__ == "__main__":
    unittest.main()
