#!/usr/bin/env python3
"""Texts where an earlier engine differed from Hugging Face `tokenizers` (found by a differential
fuzzer over random Unicode), with HF's ids (tokenizers 0.23.3, untruncated) for test_tokenizer.c:

- Unigram scores read as serde_json reads them (not strtod's nearest double): segmentations whose
  scores tie to the last bit ('9422999': 9 + 99 against 99 + 9);
- NFC/NFKC leaving the composition exclusions added after Unicode 3.0 decomposed (U+2ADC,
  U+1D15E..U+1D164, U+1D1BB..U+1D1C0), each in the unigram fixture's NFKC and in a byte-fallback
  NFC variant where the code points show in the ids;
- a Replace of two or more code points at the text's start, after which Metaspace's "first" does
  not prepend (`tokenizers` aligns the replacement with the match's last code point).

Inputs: the committed base tokenizers. Output: edge_cases.json ({"cases": [{"base", "patch",
"text", "ids"}]}; a patch replaces top-level keys of the base, as in variants.json).
Run: /work/venv/bin/python test/tokenizer/make_edge_cases.py
"""
import gzip, json, os, sys

import tokenizers
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import PINNED  # noqa: E402

if tokenizers.__version__ != PINNED:
    sys.exit(f"tokenizers {tokenizers.__version__} is not the pinned {PINNED}")
HERE = os.path.dirname(os.path.abspath(__file__))
EXCLUDED = [0x2ADC] + list(range(0x1D15E, 0x1D165)) + list(range(0x1D1BB, 0x1D1C1))


def base(name):
    return json.loads(gzip.open(os.path.join(HERE, name, "tokenizer.json.gz")).read())


def main():
    cases = []
    def add(name, patch, texts):
        tokenizer_json = base(name)
        tokenizer_json.update(patch)
        tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json))
        for text in texts:
            cases.append({"base": name, "patch": patch, "text": text,
                          "ids": tokenizer.encode(text, add_special_tokens=True).ids})
    add("unigram", {}, ["9422999", "779566a999", "\u2015\n" + "\u2500" * 8, "a\U0001d162999|"] +
        ["a" + chr(c) + "999|" for c in EXCLUDED])
    nfc = {"normalizer": {"type": "NFC"}}
    add("unigram_bytes", nfc, [chr(c) for c in EXCLUDED] + ["x" + chr(c) + "y" for c in EXCLUDED])
    add("unigram_bytes", {}, ["``", "``a", "`` a", "```", "a``", "`a"])
    with open(os.path.join(HERE, "edge_cases.json"), "w") as f:  # one case a line
        f.write('{"tokenizers": "%s", "cases": [\n' % PINNED)
        f.write(",\n".join(json.dumps(case, ensure_ascii=True) for case in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
