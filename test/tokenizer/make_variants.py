#!/usr/bin/env python3
"""Variants of the committed tokenizers for the less common branches: added tokens with lstrip and
rstrip, WhitespaceSplit, Strip, Prepend and Replace normalisers, RobertaProcessing, Metaspace with
every prepend_scheme with and without split, and a bare Unigram model. Each variant is a base
tokenizer (minilm, unigram) with top-level keys replaced (`patch`); test_tokenizer.c applies the same
patches with cJSON. Expected: Hugging Face's ids (tokenizers 0.23.3) on every 48th text of
corpus.bin.gz, untruncated and with enable_truncation(7), as the hashes make_fixtures.py uses.

Inputs: the committed corpus.bin.gz and base tokenizers. Outputs: variants.json, variants_ids.hashes.gz.
Run: /work/venv/bin/python test/tokenizer/make_variants.py
"""
import copy, gzip, json, os, sys

import tokenizers
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import PINNED, ids_hash, invalid_offset, read_corpus, write_gz  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
STRIDE, TRUNCATE = 48, 7


def base(name):
    return json.loads(gzip.open(os.path.join(HERE, name, "tokenizer.json.gz")).read())


def variants():
    m, u = base("minilm"), base("unigram")
    added = copy.deepcopy(m["added_tokens"])
    for t in added:
        if t["content"] == "[MASK]":
            t["lstrip"] = t["rstrip"] = True
        if t["content"] == "[SEP]":
            t["rstrip"] = True
    yield "minilm_lstrip_rstrip", "minilm", {"added_tokens": added}
    yield "minilm_whitespace_strip", "minilm", {
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Strip", "strip_left": True, "strip_right": True},
                                                           {"type": "NFD"}, {"type": "StripAccents"},
                                                           {"type": "Lowercase"}]}}
    yield "minilm_roberta", "minilm", {
        "post_processor": {"type": "RobertaProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101],
                           "trim_offsets": True, "add_prefix_space": False},
        "normalizer": dict(m["normalizer"], strip_accents=False, clean_text=False)}
    u_added = copy.deepcopy(u["added_tokens"])
    for t in u_added:
        if t["content"] == "</s>":
            t["lstrip"] = True
    for scheme in ("never", "first", "always"):
        for split in (True, False):
            first = {"type": "Prepend", "prepend": "▁"} if scheme == "never" else {"type": "NFC"}
            yield f"unigram_{scheme}_{'split' if split else 'whole'}", "unigram", {
                "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split},
                "normalizer": {"type": "Sequence", "normalizers": [
                    first, {"type": "Replace", "pattern": {"String": "  "}, "content": " "},
                    {"type": "Strip", "strip_left": False, "strip_right": True}]},
                "added_tokens": u_added}
    yield "unigram_bare", "unigram", {"pre_tokenizer": None, "normalizer": None, "post_processor": None}


def main():
    if tokenizers.__version__ != PINNED:
        sys.exit(f"tokenizers {tokenizers.__version__} is not the pinned {PINNED}")
    chosen = read_corpus()[::STRIDE]
    valid = [(i, t.decode()) for i, t in enumerate(chosen) if invalid_offset(t) is None]
    specs, out = [], bytearray()
    for name, base_name, patch in variants():
        specs.append({"name": name, "base": base_name, "patch": patch})
        cfg = base(base_name)
        cfg.update(patch)
        tok = Tokenizer.from_str(json.dumps(cfg))
        tok.no_padding()
        for truncate in (0, TRUNCATE):
            if truncate:
                tok.enable_truncation(max_length=truncate)
            else:
                tok.no_truncation()
            ids = {i: e.ids for (i, _), e in zip(valid, tok.encode_batch([t for _, t in valid]))}
            for i in range(len(chosen)):
                out += ids_hash(ids[i] if i in ids else ("E", 0)).to_bytes(4, "little")
        print(name, file=sys.stderr)
    with open(os.path.join(HERE, "variants.json"), "w") as f:
        json.dump({"stride": STRIDE, "truncate": TRUNCATE, "variants": specs}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    write_gz(os.path.join(HERE, "variants_ids.hashes.gz"), bytes(out))


if __name__ == "__main__":
    main()
