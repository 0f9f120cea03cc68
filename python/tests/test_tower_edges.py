"""Tower shapes the fixtures' towers never took, found by a differential probe of random configs: a
CLS-pooled BERT tower whose intermediate width is narrower than its hidden width, with weights
widened per tile (f16 held, or bf16 on classes without bf16 products), on two threads (its last
layer's K and V product took wider tiles than the thread's scratch was sized for: a heap overflow);
an image tower of one head on the SERIAL class with one image on two threads (both threads ran the
same (image, head) pair into the same rows). Each must give, call after call, what one thread gives.
Pure Python (no NumPy): the weights are written with `struct`."""

from __future__ import annotations

import json
import math
import os
import random
import struct
import tempfile
import unittest

import uform

from _support import library
from test_images import PHOTOS, write_tower


def write_safetensors(path: str, shapes: list, seed: int) -> None:
    rng = random.Random(seed)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes:
        count = math.prod(shape)
        center = 1.0 if name.endswith("LayerNorm.weight") else 0.0
        blob = struct.pack(f"<{count}f", *(center + rng.uniform(-0.1, 0.1) for _ in range(count)))
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_bert(directory: str, hidden=96, heads=6, inter=37, layers=2) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cat", "dog"]
    shapes = [("embeddings.word_embeddings.weight", [len(vocab), hidden]),
              ("embeddings.position_embeddings.weight", [64, hidden]),
              ("embeddings.token_type_embeddings.weight", [2, hidden]),
              ("embeddings.LayerNorm.weight", [hidden]), ("embeddings.LayerNorm.bias", [hidden])]
    for l in range(layers):
        p = f"encoder.layer.{l}."
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"):
            shapes += [(p + n + ".weight", [hidden, hidden]), (p + n + ".bias", [hidden])]
        shapes += [(p + "intermediate.dense.weight", [inter, hidden]), (p + "intermediate.dense.bias", [inter]),
                   (p + "output.dense.weight", [hidden, inter]), (p + "output.dense.bias", [hidden])]
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes += [(p + n + ".weight", [hidden]), (p + n + ".bias", [hidden])]
    write_safetensors(os.path.join(directory, "model.safetensors"), shapes, 7)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"model_type": "bert", "hidden_size": hidden, "num_attention_heads": heads, "intermediate_size": inter,
                   "num_hidden_layers": layers, "vocab_size": len(vocab), "max_position_embeddings": 64,
                   "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}, f)
    with open(os.path.join(directory, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    with open(os.path.join(directory, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}], f)
    os.makedirs(os.path.join(directory, "1_Pooling"))
    with open(os.path.join(directory, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": hidden, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, f)


CLASSES = ("UNKNOWN", "SERIAL", "INTEL_HASWELL", "INTEL_SKYLAKE")  # the machine's own, then narrower ones


class TowerEdges(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.library = library()
        cls.threads = min(2, len(os.sched_getaffinity(0)))

    def executor(self, cpu_class, threads):
        return uform.Executor.for_ram(self.library, uform.RamOptions(cpu_class=cpu_class), threads=threads)

    def test_cls_tower_narrow_intermediate_widened_weights(self):
        with tempfile.TemporaryDirectory() as directory:
            write_bert(directory)
            for dtype in (uform.DType.F16, uform.DType.BF16):
                model = uform.Model.open(self.library, directory, uform.Modality.TEXT_ENCODER, weights_dtype=dtype)
                try:
                    for cpu_class in (getattr(uform.CPUClass, name) for name in CLASSES):
                        with self.subTest(dtype=dtype.name, cpu_class=cpu_class.name):
                            try:
                                one = self.executor(cpu_class, 1)
                            except uform.Error:
                                continue  # a class this machine cannot run
                            many = self.executor(cpu_class, self.threads)
                            try:
                                expected = model.encode_texts(one, ["cat dog", "dog"])
                                for _ in range(20):
                                    got = model.encode_texts(many, ["cat dog", "dog"])
                                    for row, want in zip(got, expected):
                                        self.assertLessEqual(max(abs(float(a) - float(b)) for a, b in zip(row, want)), 1e-5)
                            finally:
                                one.close(), many.close()
                finally:
                    model.close()

    def test_one_head_serial_image_on_two_threads(self):
        with tempfile.TemporaryDirectory() as directory:
            write_tower(directory, dim=40, heads=1, layers=1, patch=8, size=32, embedding=16)
            model = uform.Model.open(self.library, directory, uform.Modality.IMAGE_ENCODER)
            image = os.path.join(PHOTOS, "camera.png")
            try:
                one, many = self.executor(uform.CPUClass.SERIAL, 1), self.executor(uform.CPUClass.SERIAL, self.threads)
                try:
                    expected = model.encode_images(one, [image])[0]
                    for _ in range(300):
                        got = model.encode_images(many, [image])[0]
                        self.assertLessEqual(max(abs(float(a) - float(b)) for a, b in zip(got, expected)), 1e-5)
                finally:
                    one.close(), many.close()
            finally:
                model.close()


if __name__ == "__main__":
    unittest.main()
