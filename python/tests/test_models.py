"""Models from Python: `uform.Model` (open, describe, tokenize, encode_texts) and `uform.get_model`
shaped like the ``uform`` package's, against the committed sentence-transformers reference for
all-MiniLM-L6-v2 (test/encode/). The model directory comes from $UFORM_TEST_MINILM (ctest sets it to
the copy build.sh fetches); without it, or without a tokenizer in this build, those tests skip.
"""

from __future__ import annotations

import math
import os
import pathlib
import struct
import unittest

import uform

from _support import REPOSITORY, library, side_config_directory

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

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


    def test_paths_of_every_kind_and_none_empty_or_cut(self):
        with self.assertRaises(uform.Error) as caught:  # os.PathLike is a path, as for open()
            uform.Model.open(library(), pathlib.Path("/nonexistent/uform-model"))
        self.assertIn("/nonexistent/uform-model", caught.exception.message)
        for empty in ("", b""):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                uform.Model.open(library(), empty)
            self.assertEqual(caught.exception.message, "path is empty; name a model directory")
        directory = MINILM or "/nonexistent"
        for cut in (directory + "\0/does/not/exist", os.fsencode(directory) + b"\0"):  # C would read up to the NUL
            with self.assertRaises(ValueError) as caught:
                uform.Model.open(library(), cut)
            self.assertIsInstance(caught.exception, uform.InvalidArgumentError)
            self.assertIn("embedded null byte", caught.exception.message)
        with self.assertRaises(TypeError) as caught:
            uform.Model.open(library(), 5)
        self.assertEqual(str(caught.exception), "path must be a str, bytes or os.PathLike, not 5")

    def test_arguments_of_the_wrong_type_are_type_errors(self):
        with self.assertRaises(TypeError) as caught:
            uform.Model.open(None, "/nonexistent")
        self.assertEqual(str(caught.exception), "library must be a uform.Library, not None")
        with self.assertRaises(TypeError) as caught:
            uform.Model.open(library(), "/nonexistent", ram="x")
        self.assertEqual(str(caught.exception), "ram must be a uform.RamOptions, not 'x'")
        with self.assertRaises(TypeError) as caught:
            uform.Model.open(library(), "/nonexistent", vram=[0])
        self.assertEqual(str(caught.exception), "vram must be a uform.VramOptions, not [0]")
        with self.assertRaises(TypeError) as caught:
            uform.Model.open(library(), "/nonexistent", weights_dtype="f16")
        self.assertEqual(str(caught.exception),
                         "weights_dtype must be one of DType.F32, DType.BF16, DType.F16, not 'f16'")
        with self.assertRaises(TypeError) as caught:
            uform.Model.open(library(), "/nonexistent", residency="ram")
        self.assertEqual(str(caught.exception), "residency must be one of Residency.RAM, Residency.VRAM, not 'ram'")
        with self.assertRaises(TypeError):
            uform.Model.open(library(), "/nonexistent", residency=uform.DType.F32)  # another enumeration


@unittest.skipUnless(os.path.isfile(os.path.join(MINILM, "config.json")), "no all-MiniLM-L6-v2 ($UFORM_TEST_MINILM)")
class SideConfigs(unittest.TestCase):
    """all-MiniLM-L6-v2 with its side files edited (tokenizer_config.json's flags, class and
    model_max_length; sentence_bert_config.json's max_seq_length and do_lower_case; tokenizer.json's own
    pipeline; vocab.txt alone): the ids and context sentence-transformers gives each directory, from
    test/encode/expected/side_configs.json (test/encode/make_side_configs.py)."""

    def test_ids_and_context_as_sentence_transformers(self):
        import json
        import tempfile

        with open(os.path.join(ENCODE, "expected", "side_configs.json"), encoding="utf-8") as f:
            fixture = json.load(f)
        self.assertGreaterEqual(len(fixture["cases"]), 23)
        self.assertEqual(sum("embeddings" in case for case in fixture["cases"]), 9)
        with tempfile.TemporaryDirectory() as scratch:
            for number, case in enumerate(fixture["cases"]):
                with self.subTest(case=case["name"]):
                    directory = side_config_directory(MINILM, case["edits"], os.path.join(scratch, f"case{number}"))
                    model = uform.Model.open(library(), directory)
                    try:
                        self.assertEqual(model.describe().context, case["context"])
                        for text, expected in zip(fixture["texts"], case["ids"]):
                            self.assertEqual(model.tokenize(text), expected, text[:40])
                        if "embeddings" in case:  # pooling, normalisation and prompts as encode applies them
                            texts = fixture["texts"][:len(case["embeddings"])]
                            got = model.encode_texts(None, texts)
                            for row, expected in zip(got, case["embeddings"]):
                                dot = sum(float(a) * b for a, b in zip(row, expected))
                                norms = math.sqrt(sum(float(a) ** 2 for a in row) * sum(b * b for b in expected))
                                self.assertGreaterEqual(dot / norms, 0.99999, case["name"])
                    finally:
                        model.close()

    def test_refused_side_files(self):
        """Side files that make sentence-transformers build something this engine does not run: each is
        UNSUPPORTED (or CORRUPT_FILE when the file contradicts itself) naming the file and key, never a
        silent difference."""
        import tempfile

        bad = [({"tokenizer_config.json": {"tokenizer_class": "BertJapaneseTokenizer"}},
                "'tokenizer_class' 'BertJapaneseTokenizer' is not supported", uform.UnsupportedError),
               ({"tokenizer_config.json": {"tokenizer_class": "XLMRobertaTokenizer"}},
                "'tokenizer_class' 'XLMRobertaTokenizer' is not supported", uform.UnsupportedError),
               ({"sentence_bert_config.json": {"tokenizer_args": {"do_lower_case": False}}},
                "'tokenizer_args.do_lower_case' is not supported", uform.UnsupportedError),
               ({"sentence_bert_config.json": {"config_kwargs": {"layer_norm_eps": 0.5}}},
                "'config_kwargs.layer_norm_eps' is not supported", uform.UnsupportedError),
               ({"sentence_bert_config.json": {"model_args": {"load_in_8bit": True}}},
                "'model_args.load_in_8bit' is not supported", uform.UnsupportedError),
               ({"sentence_bert_config.json": {"transformer_task": "text-generation"}},
                "'transformer_task' 'text-generation' is not supported", uform.UnsupportedError),
               ({"sentence_bert_config.json": {"query_length": 32}}, "'query_length' is set", uform.UnsupportedError),
               ({"1_Pooling/config.json": {"pooling_mode": "max"}}, "'pooling_mode' 'max' is not supported",
                uform.UnsupportedError),
               ({"1_Pooling/config.json": {"pooling_mode": ["cls", "mean"]}}, "'pooling_mode' lists 2 modes",
                uform.UnsupportedError),
               ({"1_Pooling/config.json": {"pooling_mode": 3}}, "'pooling_mode' must be a string", uform.CorruptFileError),
               ({"1_Pooling/config.json": {"include_prompt": False},
                 "config_sentence_transformers.json": {"prompts": {"q": "query: "}, "default_prompt_name": "q"}},
                "include_prompt false with a default prompt", uform.UnsupportedError),
               ({"config_sentence_transformers.json": {"model_type": "SparseEncoder"}},
                "'model_type' 'SparseEncoder' is not supported", uform.UnsupportedError),
               ({"config_sentence_transformers.json": {"prompts": {"q": "query: "}, "default_prompt_name": "p"}},
                "'default_prompt_name' 'p' is not a key of 'prompts'", uform.CorruptFileError),
               ({"modules.json": {"1.type": "sentence_transformers.models.pooling.Pooling"}},
                "'sentence_transformers.models.pooling.Pooling' is not supported", uform.UnsupportedError),
               ({"modules.json": {"0.path": "../elsewhere"}}, "leaves the model folder", uform.CorruptFileError),
               ({"sentence_bert_config.json": {"tokenizer_name_or_path": "elsewhere"}},
                "'tokenizer_name_or_path' is not supported", uform.UnsupportedError)]
        with tempfile.TemporaryDirectory() as scratch:
            for number, (edits, message, error) in enumerate(bad):
                with self.subTest(message=message):
                    directory = side_config_directory(MINILM, edits, os.path.join(scratch, f"bad{number}"))
                    with self.assertRaises(error) as raised:
                        uform.Model.open(library(), directory)
                    self.assertIn(message, str(raised.exception))
                    self.assertTrue(any(name.split("/")[-1] in str(raised.exception) for name in edits)
                                    or "include_prompt" in message, str(raised.exception))
            # "query" and "document" are prompts every SentenceTransformer knows, empty unless named.
            directory = side_config_directory(MINILM, {"config_sentence_transformers.json": {
                "prompts": {}, "default_prompt_name": "query"}}, os.path.join(scratch, "implicit"))
            model = uform.Model.open(library(), directory)
            try:
                self.assertEqual(model.tokenize("hello"), [101, 7592, 102])
            finally:
                model.close()
            # Weights this engine does not read, where model.safetensors is not: named, not "cannot open".
            for number, (name, message) in enumerate([("model.safetensors.index.json", "weights sharded over several"),
                                                      ("pytorch_model.bin", "only safetensors weights are read")]):
                with self.subTest(weights=name):
                    directory = side_config_directory(MINILM, {"model.safetensors": None},
                                                      os.path.join(scratch, f"weights{number}"))
                    pathlib.Path(directory, name).write_bytes(b"{}")
                    with self.assertRaises(uform.UnsupportedError) as raised:
                        uform.Model.open(library(), directory)
                    self.assertIn(f"no model.safetensors beside {name}: {message}", str(raised.exception))

    def test_bad_side_values(self):
        import json
        import tempfile

        bad = [({"tokenizer_config.json": {"strip_accents": "yes"}}, "'strip_accents' must be true or false"),
               ({"tokenizer_config.json": {"model_max_length": 1.5}}, "'model_max_length' must be an integer"),
               ({"sentence_bert_config.json": {"do_lower_case": 1}}, "'do_lower_case' must be true or false"),
               ({"tokenizer_config.json": {"tokenizer_class": 7}}, "tokenizer_class")]
        with tempfile.TemporaryDirectory() as scratch:
            for number, (edits, message) in enumerate(bad):
                with self.subTest(edits=json.dumps(edits)):
                    directory = side_config_directory(MINILM, edits, os.path.join(scratch, f"bad{number}"))
                    with self.assertRaises(uform.CorruptFileError) as raised:
                        uform.Model.open(library(), directory)
                    self.assertIn(message, str(raised.exception))
                    self.assertIn(os.path.basename(next(iter(edits))), str(raised.exception))


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
        # With features: (features, rows, statuses); the bad text's features zero, the others' its
        # tokens' rows, then zeros; bf16 features are the f32 ones rounded (as uint16 bits).
        features, rows, statuses = self.model.encode_texts(None, [texts[0], b"\xff\xfe bad", texts[1]],
                                                           statuses=True, features=True)
        self.assertEqual(statuses, [uform.Status.OK, uform.Status.INVALID_ARGUMENT, uform.Status.OK])
        d = self.model.describe()
        self.assertEqual((len(features), len(features[0]), len(features[0][0])), (3, d.tokens, d.hidden))
        self.assertTrue(all(float(v) == 0.0 for row in features[1] for v in row))
        tokens = len(self.model.tokenize(texts[1]))
        self.assertTrue(all(any(float(v) != 0.0 for v in row) for row in features[2][:tokens]))
        self.assertTrue(all(float(v) == 0.0 for row in features[2][tokens:] for v in row))
        self.assertGreaterEqual(cosine(rows[2], expected[1]), 0.99999)
        if np is not None:
            bits, _, _ = self.model.encode_texts(None, [texts[0], b"\xff\xfe bad", texts[1]], statuses=True,
                                                 features=True, dtype=uform.DType.BF16)
            words = features.view(np.uint32).astype(np.uint64)
            rounded = ((words + 0x7FFF + ((words >> 16) & 1)) >> 16).astype(np.uint16)
            self.assertEqual(bits.dtype, np.uint16)
            self.assertTrue(np.array_equal(bits, rounded))
        # feature_rows: more rows per text, the engine's rows first, then zeros; the model's own
        # count is the default; fewer, or not an integer, refused before anything runs.
        wide, again = self.model.encode_texts(None, [texts[0], texts[1]], features=True, feature_rows=d.tokens + 3)
        self.assertEqual((len(wide), len(wide[0]), len(wide[0][0])), (2, d.tokens + 3, d.hidden))
        self.assertEqual([list(map(float, row)) for row in wide[1][:d.tokens]],
                         [list(map(float, row)) for row in features[2]])
        self.assertTrue(all(float(v) == 0.0 for item in wide for row in item[d.tokens:] for v in row))
        self.assertGreaterEqual(cosine(again[1], expected[1]), 0.99999)
        same, _ = self.model.encode_texts(None, [texts[1]], features=True, feature_rows=d.tokens)
        self.assertEqual(len(same[0]), d.tokens)
        with self.assertRaises(uform.Error) as caught:
            self.model.encode_texts(None, [texts[0]], features=True, feature_rows=d.tokens - 1)
        self.assertEqual(caught.exception.kind, uform.Status.INVALID_ARGUMENT)
        self.assertEqual(caught.exception.message,
                         f"feature_rows is {d.tokens - 1}: fewer than the {d.tokens} rows of the model's features")
        with self.assertRaises(TypeError):
            self.model.encode_texts(None, [texts[0]], features=True, feature_rows=2.5)

    def test_texts_are_str_or_bytes_like_only(self):
        bad = [([5], "texts[0]", "int"), ([[104, 105]], "texts[0]", "list"), ([None], "texts[0]", "NoneType"),
               ([2 * 10**9], "texts[0]", "int"), (["ok", -1], "texts[1]", "int"), ([b"ok", 3.5], "texts[1]", "float")]
        if np is not None:
            bad.append(([np.int64(3)], "texts[0]", "int64"))
        for texts, name, kind in bad:
            with self.assertRaises(TypeError) as caught:
                self.model.encode_texts(None, texts)
            self.assertEqual(str(caught.exception),
                             f"{name} must be a str or bytes-like (bytes, bytearray, memoryview), not {kind}")
        with self.assertRaises(TypeError) as caught:
            self.model.encode_texts(None, 5)
        self.assertEqual(str(caught.exception), "texts must be a str, bytes-like or a sequence of them, not int")
        with self.assertRaises(TypeError) as caught:
            self.model.tokenize(5)
        self.assertEqual(str(caught.exception),
                         "text must be a str or bytes-like (bytes, bytearray, memoryview), not int")
        # A mapping would be its keys, a set in arbitrary order: both refused, not encoded silently.
        processed = uform.models.TextProcessor(self.model)(["a cat", "a dog"])
        with self.assertRaises(TypeError) as caught:
            self.model.encode_texts(None, processed)
        self.assertEqual(str(caught.exception), "texts must be a sequence, not a dict, whose iteration gives its keys "
                                                "(a processor's output? pass its 'texts' or 'images')")
        self.assertEqual(len(self.model.encode_texts(None, processed["texts"])), 2)
        for unordered in ({"a cat", "a dog"}, frozenset({"a cat"})):
            with self.assertRaises(TypeError) as caught:
                self.model.encode_texts(None, unordered)
            self.assertEqual(str(caught.exception), f"texts must be a sequence, not a {type(unordered).__name__}, "
                                                    "whose order is arbitrary; pass a list")

    def test_one_bytes_like_is_one_text(self):
        expected = self.model.encode_texts(None, "hi there")
        for one in (b"hi there", bytearray(b"hi there"), memoryview(b"hi there")):
            rows = self.model.encode_texts(None, one)
            self.assertEqual(len(rows), 1, type(one).__name__)
            self.assertEqual(list(rows[0]), list(expected[0]), type(one).__name__)
            self.assertEqual(self.model.tokenize(one), self.model.tokenize("hi there"))
        processed = uform.models.TextProcessor(self.model)(bytearray(b"hi there"))
        self.assertEqual(len(processed["texts"]), 1)

    def test_subclasses_cannot_misstate_a_texts_length(self):
        class LyingBytes(bytes):  # C must get the buffer's real length, not this
            def __len__(self):
                return 1 << 20

            def __bytes__(self):
                return LyingBytes(b"hi there, and more")

        class LyingStr(str):
            def encode(self, *arguments, **keywords):
                return LyingBytes(b"hi")

        expected = self.model.encode_texts(None, ["hi there", "a cat"])
        for texts in ([LyingStr("hi there"), "a cat"], [LyingBytes(b"hi there"), "a cat"]):
            rows, statuses = self.model.encode_texts(None, texts, statuses=True)
            self.assertEqual(statuses, [uform.Status.OK] * 2, type(texts[0]).__name__)
            self.assertEqual([list(row) for row in rows], [list(row) for row in expected], type(texts[0]).__name__)
            self.assertEqual(self.model.tokenize(texts[0]), self.model.tokenize("hi there"))

    def test_lone_surrogates_are_invalid_utf8_per_text(self):
        texts = ["a cat", "\ud800 high", "low \udc80", "\udcc3\udca9", b"\xff"]  # not escaped bytes either
        rows, statuses = self.model.encode_texts(None, texts, statuses=True)
        self.assertEqual(statuses, [uform.Status.OK] + [uform.Status.INVALID_ARGUMENT] * 4)
        self.assertTrue(all(float(x) == 0.0 for row in rows[1:] for x in row))
        self.assertTrue(any(float(x) != 0.0 for x in rows[0]))
        for position in (1, 2, 3):
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.encode_texts(None, ["a cat", texts[position]])
            self.assertIn("text 1", caught.exception.message)
            self.assertIn("invalid UTF-8", caught.exception.message)
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.tokenize(texts[position])
            self.assertIn("invalid UTF-8", caught.exception.message)

    def test_arguments_of_the_wrong_type_or_value(self):
        for executor in ("x", 42, self.model):
            with self.assertRaises(TypeError) as caught:
                self.model.encode_texts(executor, ["a cat"])
            self.assertEqual(str(caught.exception),
                             f"executor must be a uform.Executor or None (inline), not {executor!r}")
        for dimensions in (1.5, "a", None):
            with self.assertRaises(TypeError) as caught:
                self.model.encode_texts(None, ["a cat"], dimensions=dimensions)
            self.assertEqual(str(caught.exception), f"dimensions must be an integer, not {dimensions!r}")
        with self.assertRaises(uform.InvalidArgumentError) as caught:
            self.model.encode_texts(None, ["a cat"], dimensions=-1)
        self.assertEqual(caught.exception.message, "dimensions must be in [0, 2**64), got -1")
        with self.assertRaises(uform.InvalidArgumentError) as caught:  # refused by the engine; no huge buffer first
            self.model.encode_texts(None, ["a cat"], dimensions=2**40)
        self.assertIn("384 wide", caught.exception.message)
        with self.assertRaises(TypeError) as caught:
            self.model.encode_texts(None, ["a cat"], dtype="f16")
        self.assertEqual(str(caught.exception), "dtype must be one of DType.F32, DType.BF16, DType.F16, not 'f16'")
        for dtype in (uform.DType.F64, uform.DType.I32, 9):  # the buffer's element size is unknown for them
            with self.assertRaises(uform.InvalidArgumentError) as caught:
                self.model.encode_texts(None, ["a cat"], dtype=dtype)
            self.assertIn("expected DType.F32, DType.BF16 or DType.F16", caught.exception.message)

    def test_get_model_takes_a_path_like_and_one_modality(self):
        texts, expected = reference(1)
        for modalities in ("text", uform.Modality.TEXT_ENCODER, "text_encoder"):
            processors, models = uform.get_model(pathlib.Path(MINILM), modalities=modalities, threads=1)
            self.assertEqual(set(models), {uform.Modality.TEXT_ENCODER}, modalities)
            encoder = models[uform.Modality.TEXT_ENCODER]
            self.assertGreaterEqual(cosine(encoder.encode(texts)[0], expected[0]), 0.99999)
            encoder.executor.close()
            encoder.model.close()

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
        # The features: every token's last hidden state; MiniLM pools them by mean, then normalises.
        features, again = models[uform.Modality.TEXT_ENCODER].encode(processed, return_features=True)
        for i in range(2):
            self.assertGreaterEqual(cosine(again[i], embeddings[i]), 0.99999)
            tokens = int(sum(processed["attention_mask"][i]))
            mean = [sum(row[j] for row in features[i][:tokens]) / tokens for j in range(len(features[i][0]))]
            self.assertGreaterEqual(cosine(mean, expected[i]), 0.99999)
            self.assertTrue(all(v == 0 for row in features[i][tokens:] for v in row))
        self.assertEqual(len(models[uform.Modality.TEXT_ENCODER].encode(processed, return_features=False)), 2)

    def test_get_model_without_modalities_opens_the_text_tower_of_a_text_model(self):
        processors, models = uform.get_model(MINILM, threads=1)
        self.assertEqual(set(models), {uform.Modality.TEXT_ENCODER})
        texts, expected = reference(1)
        self.assertGreaterEqual(cosine(models["text_encoder"].encode(texts)[0], expected[0]), 0.99999)
        models[uform.Modality.TEXT_ENCODER].executor.close()
        models[uform.Modality.TEXT_ENCODER].model.close()


if __name__ == "__main__":
    unittest.main()
