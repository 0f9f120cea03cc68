#!/usr/bin/env bash
# Generates the UForm3-shaped fixtures (test/encode/make_references.py uform3) into OUT when they are
# missing and PYTHON has torch and uform; otherwise says why and leaves the tests to skip. Never fails.
#   fixtures.sh PYTHON OUT MINILM_DIR
python=$1 out=$2 minilm=$3
here=$(dirname "${BASH_SOURCE[0]}")
if [[ -f $out/uform3-768-cls/ids.txt && -f $out/uform3-384-mean/ids.txt ]]; then echo "fixtures: present in $out"; exit 0; fi
if ! "$python" -c 'import torch, uform, tokenizers, safetensors' 2>/dev/null; then
  echo "fixtures: $python lacks torch, uform, tokenizers or safetensors; the UForm3 tests skip"; exit 0
fi
if [[ ! -f $minilm/tokenizer.json ]]; then echo "fixtures: no all-MiniLM-L6-v2 tokenizer at $minilm; the UForm3 tests skip"; exit 0; fi
"$python" "$here/make_references.py" uform3 "$out" "$minilm" || echo "fixtures: generation failed; the UForm3 tests skip"
exit 0
