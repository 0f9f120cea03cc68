"""Models from Python: `uform.Model` (open, describe, tokenize, encode_texts) and `uform.get_model`
shaped like the ``uform`` package's, against the committed sentence-transformers reference for
all-MiniLM-L6-v2 (test/encode/). The model directory comes from $UFORM_TEST_MINILM (ctest sets it to
the copy build.sh fetches); without it, or without a tokenizer in this build, those tests skip.
"""

from __future__ import annotations

import math
import os
import struct
import unittest

import uform

from _support import REPOSITORY, library

MINILM = os.environ.get("UFORM_TEST_MINILM", "")
ENCODE = os.path.join(REPOSITORY, "test", "encode")


def reference(count: int):
    with open(os.path.join(ENCODE, "sentences.txt"), encoding="utf-8") as f:
        texts = [line.rstrip("\n") for line in f][:count]
    with open(os.path.join(ENCODE, "minilm_f32.bin"), "rb") as f:
        raw = f.read(count * 384 * 4)
    flat = struct.unpack(f"<{count * 384}f", raw)
    return texts, [flat[i * 384:(i + 1) * 384] for i in range(count)]


def cosine(a, b) -> float:
    ab = sum(float(x) * float(y) for x, y in zip(a, b))
    aa = sum(float(x) * float(x) for x in a)
    bb = sum(float(y) * float(y) for y in b)
    return ab / math.sqrt(aa * bb)


class ModelErrors(unittest.TestCase):
    def test_missing_directory(self):
        with self.assertRaises(uform.Error) as caught:
            uform.Model.open(library(), "/nonexistent/uform-model")
        self.assertNotEqual(caught.exception.kind, uform.Status.OK)
        self.assertIn("/nonexistent/uform-model", caught.exception.message)

    def test_bad_modality_and_device(self):
        with self.assertRaises(uform.Error) as caught:
            uform.Model.open(library(), "/nonexistent", modality="audio")
        self.assertEqual(caught.exception.kind, uform.Status.INVALID_ARGUMENT)
        with self.assertRaises(uform.Error) as caught:
            uform.get_model("/nonexistent", device="tpu")
        self.assertEqual(caught.exception.kind, uform.Status.UNSUPPORTED)
        try:
            library().gpu_status()
            has_gpu = True
        except uform.Error:
            has_gpu = False
        with self.assertRaises(uform.Error) as caught:
            uform.get_model("/nonexistent", device="cuda")
        if not has_gpu:  # with a GPU the directory's absence is the error
            self.assertEqual(caught.exception.kind, uform.Status.UNSUPPORTED)


@unittest.skipUnless(os.path.isfile(os.path.join(MINILM, "config.json")), "no all-MiniLM-L6-v2 ($UFORM_TEST_MINILM)")
class MiniLM(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = uform.Model.open(library(), MINILM)
        try:
            cls.model.tokenize("probe")
            cls.tokenizes = True
        except uform.Error as error:
            cls.tokenizes = error.kind != uform.Status.UNSUPPORTED

    @classmethod
    def tearDownClass(cls):
        cls.model.close()

    def setUp(self):
        if not self.tokenizes and self._testMethodName != "test_describe":
            self.skipTest("this build's tokenizer is a placeholder")

    def test_describe(self):
        d = self.model.describe()
        self.assertEqual(d.modality, uform.Modality.TEXT_ENCODER)
        self.assertEqual(d.dimensions, 384)
        self.assertEqual(d.context, 256)
        self.assertEqual(d.layers, 6)

    def test_encode_texts_matches_sentence_transformers(self):
        texts, expected = reference(24)
        with uform.Executor.for_ram(library()) as threads:
            rows = self.model.encode_texts(threads, texts)
        inline = self.model.encode_texts(None, texts)
        for i in range(len(texts)):
            self.assertGreaterEqual(cosine(rows[i], expected[i]), 0.99999, texts[i])
            self.assertGreaterEqual(cosine(inline[i], expected[i]), 0.99999, texts[i])
        self.assertEqual(len(rows), 24)
        self.assertEqual(len(rows[0]), 384)

    def test_matryoshka_and_dtypes(self):
        texts, expected = reference(3)
        rows = self.model.encode_texts(None, texts, dimensions=64, normalize=True)
        for i in range(3):
            self.assertAlmostEqual(sum(float(x) ** 2 for x in rows[i]), 1.0, places=5)
            self.assertGreaterEqual(cosine(rows[i], expected[i][:64]), 0.99999)
        half = self.model.encode_texts(None, texts, dtype=uform.DType.F16)
        for i in range(3):
            self.assertGreaterEqual(cosine(half[i], expected[i]), 0.999)

    def test_statuses_for_invalid_utf8(self):
        texts, expected = reference(2)
        rows, statuses = self.model.encode_texts(None, [texts[0], b"\xff\xfe bad", texts[1]], statuses=True)
        self.assertEqual(statuses, [uform.Status.OK, uform.Status.INVALID_ARGUMENT, uform.Status.OK])
        self.assertTrue(all(float(x) == 0.0 for x in rows[1]))
        self.assertGreaterEqual(cosine(rows[2], expected[1]), 0.99999)
        with self.assertRaises(uform.Error) as caught:
            self.model.encode_texts(None, [texts[0], b"\xff\xfe bad"])
        self.assertEqual(caught.exception.kind, uform.Status.INVALID_ARGUMENT)
        self.assertIn("text 1", caught.exception.message)

    def test_get_model_like_the_uform_package(self):
        texts, expected = reference(2)
        processors, models = uform.get_model(MINILM, modalities=[uform.Modality.TEXT_ENCODER])
        self.assertEqual(set(processors), {uform.Modality.TEXT_ENCODER})
        processed = processors[uform.Modality.TEXT_ENCODER](texts)
        self.assertIn("input_ids", processed)
        self.assertIn("attention_mask", processed)
        embeddings = models[uform.Modality.TEXT_ENCODER].encode(processed)
        for i in range(2):
            self.assertGreaterEqual(cosine(embeddings[i], expected[i]), 0.99999)
        with self.assertRaises(uform.Error):
            models[uform.Modality.TEXT_ENCODER].encode(processed, return_features=True)


if __name__ == "__main__":
    unittest.main()
