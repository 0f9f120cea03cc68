#!/usr/bin/env python3
"""Writes the tiny synthetic model directories test_model.c, test_model_files.c and the fuzz corpora use, and the
conversion expectations, into test/models/. The outputs are committed (a few tens of KB), so CI
never runs this; rerun it after changing it:

    /work/venv/bin/python test/models/make_fixtures.py

Needs numpy, safetensors and tokenizers; torch for the bf16 expectations (numpy has no bf16, and
the reference rounding should come from an implementation other than ours).

Directories (random weights, fixed seed):
  tiny-bert/           sentence-transformers BERT: F32, mean pooling, Normalize, max_seq_length 12,
                       plus tensors the loader must ignore (position_ids I64, pooler.*)
  tiny-uform3/         UForm3 text tower: BF16, 3 layers with layer 1 multimodal (cross-attention
                       tensors present), CLS pooling, model_type bert, 6-wide projection
  tiny-uform3-roberta/ UForm3: F16, model_type roberta with padding_idx 1, mean pooling,
                       matryoshka_dims [4, 2, 6]
  expected/<name>.safetensors  U16 bits of chosen weights after conversion to bf16 and f16
  conversion.safetensors       special and random values with their bf16 and f16 bits
"""
import json
import os
import shutil
import struct

import numpy as np
import torch
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "the", "on", "mat", "in", "fog",
         "sat", "ran", "##s", "##ed", "big", "small", "red", ",", ".", "!", "?", "is", "was", "and", "or",
         "not", "hello", "world", "un", "##able", "##ing", "to", "be", "it", "of", "at", "by"]


def bf16_bits(values):
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def f16_bits(values):
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16)


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_tokenizer(directory):
    vocab = {token: i for i, token in enumerate(VOCAB)}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tokenizer.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "vocab.txt"), "w") as file:
        file.write("\n".join(VOCAB) + "\n")


def dump(path, value):
    with open(path, "w") as file:
        json.dump(value, file, indent=2)
        file.write("\n")


def fresh(name):
    directory = os.path.join(HERE, name)
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    return directory


def tiny_bert(rng):
    directory = fresh("tiny-bert")
    hidden, heads, layers, intermediate, vocab, positions = 8, 2, 2, 16, len(VOCAB), 16
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": hidden, "num_attention_heads": heads,
              "num_hidden_layers": layers, "intermediate_size": intermediate, "max_position_embeddings": positions,
              "vocab_size": vocab, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
              "pad_token_id": 0, "position_embedding_type": "absolute"}
    dump(os.path.join(directory, "config.json"), config)
    dump(os.path.join(directory, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    os.makedirs(os.path.join(directory, "1_Pooling"))
    dump(os.path.join(directory, "1_Pooling", "config.json"), {
        "word_embedding_dimension": hidden, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False})
    dump(os.path.join(directory, "sentence_bert_config.json"), {"max_seq_length": 12, "do_lower_case": False})
    dump(os.path.join(directory, "tokenizer_config.json"), {"do_lower_case": True})
    write_tokenizer(directory)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    tensors = {"embeddings.position_ids": np.arange(positions, dtype=np.int64).reshape(1, positions),
               "embeddings.word_embeddings.weight": r(vocab, hidden),
               "embeddings.position_embeddings.weight": r(positions, hidden),
               "embeddings.token_type_embeddings.weight": r(2, hidden),
               "embeddings.LayerNorm.weight": 1 + r(hidden), "embeddings.LayerNorm.bias": r(hidden),
               "pooler.dense.weight": r(hidden, hidden), "pooler.dense.bias": r(hidden)}
    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        for part in ("query", "key", "value"):
            tensors[p + f"attention.self.{part}.weight"] = r(hidden, hidden)
            tensors[p + f"attention.self.{part}.bias"] = r(hidden)
        tensors[p + "attention.output.dense.weight"] = r(hidden, hidden)
        tensors[p + "attention.output.dense.bias"] = r(hidden)
        tensors[p + "attention.output.LayerNorm.weight"] = 1 + r(hidden)
        tensors[p + "attention.output.LayerNorm.bias"] = r(hidden)
        tensors[p + "intermediate.dense.weight"] = r(intermediate, hidden)
        tensors[p + "intermediate.dense.bias"] = r(intermediate)
        tensors[p + "output.dense.weight"] = r(hidden, intermediate)
        tensors[p + "output.dense.bias"] = r(hidden)
        tensors[p + "output.LayerNorm.weight"] = 1 + r(hidden)
        tensors[p + "output.LayerNorm.bias"] = r(hidden)
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    words = tensors["embeddings.word_embeddings.weight"]
    dense = tensors["encoder.layer.1.intermediate.dense.weight"]
    bias = tensors["encoder.layer.1.intermediate.dense.bias"]
    save_file({"word_embeddings.bf16": bf16_bits(words), "word_embeddings.f16": f16_bits(words),
               "word_embeddings.f32": words, "layer1.intermediate.bf16": bf16_bits(dense),
               "layer1.intermediate.f16": f16_bits(dense), "layer1.intermediate.f32": dense,
               "layer1.intermediate_bias.f32": bias},
              os.path.join(HERE, "expected", "tiny-bert.safetensors"))


def uform3_tensors(rng, vocab, hidden, layers, multimodal, positions, embedding, dtype):
    def r(*shape):
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    tensors = {"word_embeddings.weight": r(vocab, hidden), "position_embeddings.weight": r(positions, hidden),
               "layer_norm.weight": 1 + r(hidden), "layer_norm.bias": r(hidden),
               "embedding_projection.weight": r(embedding, hidden),
               "matching_head.weight": r(1, hidden), "matching_head.bias": r(1)}
    for layer in range(layers):
        p = f"blocks.{layer}."
        parts = ["attention"] + (["crossattn"] if layer in multimodal else [])
        for attention in parts:
            for part in ("query", "key", "value", "out"):
                tensors[p + f"{attention}.{part}.weight"] = r(hidden, hidden)
                tensors[p + f"{attention}.{part}.bias"] = r(hidden)
        norms = ["norm_attn", "norm_mlp"] + (["norm_crossattn"] if layer in multimodal else [])
        for norm in norms:
            tensors[p + f"{norm}.weight"] = 1 + r(hidden)
            tensors[p + f"{norm}.bias"] = r(hidden)
        tensors[p + "mlp.hidden_layer.weight"] = r(4 * hidden, hidden)
        tensors[p + "mlp.hidden_layer.bias"] = r(4 * hidden)
        tensors[p + "mlp.output_layer.weight"] = r(hidden, 4 * hidden)
        tensors[p + "mlp.output_layer.bias"] = r(hidden)
    return tensors


def save_typed(tensors, path, dtype):
    """Writes F32 tensors as BF16 or F16 (safetensors.numpy has no bf16: write the file by hand)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        value = tensors[name]
        if dtype == "BF16":
            blob = bf16_bits(value).tobytes()
        elif dtype == "F16":
            blob = f16_bits(value).tobytes()
        else:
            blob = value.astype(np.float32).tobytes()
        header[name] = {"dtype": dtype, "shape": list(value.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def tiny_uform3(rng):
    directory = fresh("tiny-uform3")
    hidden, vocab, layers, positions, embedding = 8, len(VOCAB), 3, 10, 6
    dump(os.path.join(directory, "config.json"), {
        "text_encoder": {"model_type": "bert", "dim": hidden, "context_dim": hidden, "vocab_size": vocab,
                         "padding_idx": 0, "num_layers": layers, "num_heads": 2, "embedding_dim": embedding,
                         "multimodal_layers_ids": [1], "head_one_neuron": True, "pooling": "cls",
                         "max_position_embeddings": positions, "dropout_prob": 0.0},
        "image_encoder": {"dim": 16, "patch_size": 4, "image_size": 16, "num_layers": 1, "num_heads": 2,
                          "embedding_dim": embedding, "pooling": "cls", "num_reg_tokens": 0}})
    write_tokenizer(directory)
    tensors = uform3_tensors(rng, vocab, hidden, layers, {1}, positions, embedding, "BF16")
    save_typed(tensors, os.path.join(directory, "text_encoder.safetensors"), "BF16")
    stored = from_bf16_bits(bf16_bits(tensors["blocks.2.mlp.hidden_layer.weight"]))
    words = from_bf16_bits(bf16_bits(tensors["word_embeddings.weight"]))
    save_file({"layer2.hidden.f16": f16_bits(stored), "layer2.hidden.f32": stored, "word_embeddings.f16": f16_bits(words)},
              os.path.join(HERE, "expected", "tiny-uform3.safetensors"))


def tiny_uform3_roberta(rng):
    directory = fresh("tiny-uform3-roberta")
    hidden, vocab, layers, positions, embedding = 8, len(VOCAB), 2, 12, 6
    dump(os.path.join(directory, "config.json"), {
        "text_encoder": {"model_type": "roberta", "dim": hidden, "context_dim": 16, "vocab_size": vocab,
                         "padding_idx": 1, "num_layers": layers, "num_heads": 4, "embedding_dim": embedding,
                         "multimodal_layers_ids": [], "head_one_neuron": False, "pooling": "mean",
                         "max_position_embeddings": positions, "matryoshka_dims": [4, 2, 6]}})
    write_tokenizer(directory)
    tensors = uform3_tensors(rng, vocab, hidden, layers, set(), positions, embedding, "F16")
    tensors["context_projection.weight"] = (rng.standard_normal((hidden, 16)) * 0.5).astype(np.float32)
    save_typed(tensors, os.path.join(directory, "text_encoder.safetensors"), "F16")
    stored = f16_bits(tensors["embedding_projection.weight"]).view(np.float16).astype(np.float32)
    save_file({"projection.bf16": bf16_bits(stored), "projection.f32": stored},
              os.path.join(HERE, "expected", "tiny-uform3-roberta.safetensors"))


def conversion(rng):
    specials = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 65536.0, -70000.0, 1e-8, -1e-8,
                         2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 3 * 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 * 0.99999,
                         6.1e-5, 5.96e-8, 1e-45, 3.4e38, -3.4e38, np.inf, -np.inf, 1.00390625, 1.01171875,
                         1.0009765625, 1.0029296875, 1.00048828125, 1.00146484375, 3.14159265, -2.71828182],
                        dtype=np.float32)
    # Exact ties for both formats: values whose dropped bits are exactly half an ulp, odd and even.
    ties = []
    for mantissa in range(16):
        ties.append(np.uint32(0x3f800000 | (mantissa << 16) | 0x8000))  # bf16 ties
        ties.append(np.uint32(0x3f800000 | (mantissa << 13) | 0x1000))  # f16 ties
        ties.append(np.uint32(0x38000000 | (mantissa << 14) | 0x2000))  # f16 subnormal region
    ties = np.array(ties, dtype=np.uint32).view(np.float32)
    random_bits = rng.integers(0, 2 ** 32, size=2048, dtype=np.uint64).astype(np.uint32)
    random_bits = random_bits[((random_bits >> 23) & 0xff) != 0xff]  # no NaNs: their payloads differ by design
    wide = random_bits.view(np.float32)
    narrow = (rng.standard_normal(2048) * np.exp2(rng.integers(-30, 20, size=2048))).astype(np.float32)
    values = np.concatenate([specials, ties, wide, narrow]).astype(np.float32)
    f16_patterns = rng.integers(0, 2 ** 16, size=2048, dtype=np.uint32).astype(np.uint16)
    f16_patterns = f16_patterns[(f16_patterns & 0x7c00) != 0x7c00]
    f16_patterns = np.concatenate([np.array([0, 0x8000, 1, 0x8001, 0x3ff, 0x400, 0x7bff, 0xfbff, 0x7c00, 0xfc00],
                                            dtype=np.uint16), f16_patterns])
    f16_values = f16_patterns.view(np.float16).astype(np.float32)
    bf16_patterns = rng.integers(0, 2 ** 16, size=2048, dtype=np.uint32).astype(np.uint16)
    bf16_patterns = bf16_patterns[(bf16_patterns & 0x7f80) != 0x7f80]
    bf16_values = from_bf16_bits(bf16_patterns)
    save_file({"f32": values, "f32.bf16": bf16_bits(values), "f32.f16": f16_bits(values),
               "f16": f16_patterns, "f16.f32": f16_values, "f16.bf16": bf16_bits(f16_values),
               "bf16": bf16_patterns, "bf16.f32": bf16_values, "bf16.f16": f16_bits(bf16_values)},
              os.path.join(HERE, "conversion.safetensors"))


def main():
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    rng = np.random.default_rng(20261130)
    tiny_bert(rng)
    tiny_uform3(rng)
    tiny_uform3_roberta(rng)
    conversion(rng)


if __name__ == "__main__":
    main()
