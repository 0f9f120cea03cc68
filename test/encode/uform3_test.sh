#!/usr/bin/env bash
# One UForm3-shaped random text tower against the `uform` package's PyTorch TextEncoder, without torch:
# make_text_tower writes the tower (text_towers.h) into OUT/NAME, its weights' checksum must be the one
# make_references.py drew (uform3_references.txt), then test_encode_models compares its embeddings of the
# committed ids (uform3_ids.txt) with expected/NAME.f32. With all-MiniLM-L6-v2's tokenizer.json in
# MINILM_DIR it is copied beside the tower, so tokenising the texts themselves is checked too.
# With a seventh argument --vram, the tower runs VRAM-resident instead (skipped without a GPU); without
# it, the tower's features (last hidden states) are checked too, against expected/features-NAME.f32.
#   uform3_test.sh TEST_ENCODE MAKE_TEXT_TOWER OUT NAME LIMIT MINILM_DIR [--vram]
set -u
test_encode=$1 make_text_tower=$2 out=$3 name=$4 limit=$5 minilm=$6 where=(${7:-})
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
rm -rf "${out:?}/$name"
checksum=$("$make_text_tower" "$name" "$out/$name") || { echo "FAIL: make_text_tower $name"; exit 1; }
wanted=$(awk -v n="$name" '$1 == n {print $2}' "$here/uform3_references.txt")
if [[ $checksum != "$wanted" ]]; then
  echo "FAIL: $name weights' checksum $checksum, make_references.py drew $wanted"; exit 1
fi
echo "$name: weights' checksum $checksum as make_references.py's"
texts=()
if [[ -f $minilm/tokenizer.json ]]; then
  cp "$minilm/tokenizer.json" "$out/$name/tokenizer.json" && texts=(--texts "$here/sentences.txt")
else
  echo "no all-MiniLM-L6-v2 tokenizer at $minilm: the ids are checked, not the tokenising of the texts"
fi
features=()
if [[ ${#where[@]} -eq 0 ]]; then features=(--features "$here/expected/features-$name.f32"); fi
exec "$test_encode" "${where[@]}" --model "$out/$name" --ids "$here/uform3_ids.txt" --expected "$here/expected/$name.f32" \
  "${texts[@]}" "${features[@]}" --limit "$limit"
