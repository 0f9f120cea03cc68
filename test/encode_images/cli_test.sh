#!/usr/bin/env bash
# `uform encode --image`: a directory expands to its images in name order, files keep the order
# given, jsonl/f32/npy have the right shapes, an undecodable image exits 1 naming the file and the
# reason (and leaves --output as it was), a FIFO or device as an image is refused, an empty directory
# is a usage error.
#   cli_test.sh UFORM_BINARY MAKE_TOWER TEST_SOURCE_DIR
set -u
uform=$1 make_tower=$2 source=$3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$make_tower" tiny "$tmp/tiny" >/dev/null || { echo "make_tower failed"; exit 1; }
photos=$source/image/photos
count=$(ls "$photos" | grep -ciE '\.(jpe?g|png)$')

"$uform" encode --model "$tmp/tiny" --image "$photos" >"$tmp/all.jsonl" 2>"$tmp/err" || fail "directory: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/all.jsonl") == "$count" ]] || fail "directory: $(wc -l <"$tmp/all.jsonl") lines, expected $count"
[[ $(head -1 "$tmp/all.jsonl" | tr ',' '\n' | wc -l) == 32 ]] || fail "jsonl row is not 32 numbers"
mapfile -t names < <(ls "$photos" | grep -iE '\.(jpe?g|png)$' | LC_ALL=C sort)
last=$(( ${#names[@]} - 1 ))
"$uform" encode --model "$tmp/tiny" --image "$photos/${names[$last]}" "$photos/${names[0]}" >"$tmp/two.jsonl" || fail "two files"
# Rows of different batches agree up to the products' rounding.
same() { awk -v a="$1" -v b="$2" 'BEGIN { gsub(/[][ ]/, "", a); gsub(/[][ ]/, "", b); n = split(a, x, ","); split(b, y, ",");
  for (i = 1; i <= n; ++i) { d = x[i] - y[i]; if (d > 1e-4 || d < -1e-4) exit 1 } exit n == 0 }'; }
same "$(sed -n 1p "$tmp/two.jsonl")" "$(sed -n "$count"p "$tmp/all.jsonl")" || fail "the first file's row is not the directory's last"
same "$(sed -n 2p "$tmp/two.jsonl")" "$(sed -n 1p "$tmp/all.jsonl")" || fail "the second file's row is not the directory's first"
same "$(sed -n 1p "$tmp/two.jsonl")" "$(sed -n 1p "$tmp/all.jsonl")" && fail "different images gave the same row"
"$uform" encode --model "$tmp/tiny" --format npy --output "$tmp/out.npy" --image "$photos" || fail "npy"
head -c 128 "$tmp/out.npy" | grep -q "'shape': ($count, 32)" || fail "npy header"
"$uform" encode --model "$tmp/tiny" --format f32 --image "$photos/${names[0]}" >"$tmp/out.f32" || fail "f32"
[[ $(stat -c %s "$tmp/out.f32") == 128 ]] || fail "f32 size $(stat -c %s "$tmp/out.f32")"
"$uform" encode --model "$tmp/tiny" --image "$photos/${names[0]}" "$source/image/bad/truncated.jpg" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "truncated image: exit $code, expected 1"
grep -q "truncated.jpg: corrupt_file: [a-zA-Z]" "$tmp/err" || fail "truncated image: $(cat "$tmp/err")"
echo keep >"$tmp/keep.jsonl"
"$uform" encode --model "$tmp/tiny" --output "$tmp/keep.jsonl" --image "$photos/${names[0]}" "$source/image/bad/truncated.jpg" \
  >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 && $(cat "$tmp/keep.jsonl") == keep ]] || fail "a failed run changed --output (exit $code)"
mkfifo "$tmp/fifo.jpg"
timeout 20 "$uform" encode --model "$tmp/tiny" --image "$tmp/fifo.jpg" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "a FIFO as an image: exit $code, expected 1"
grep -q "cannot read $tmp/fifo.jpg: not a regular file" "$tmp/err" || fail "FIFO image: $(cat "$tmp/err")"
timeout 20 "$uform" encode --model "$tmp/tiny" --image /dev/zero >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "/dev/zero as an image: exit $code, expected 1"
mkdir "$tmp/empty"
"$uform" encode --model "$tmp/tiny" --image "$tmp/empty" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "an empty directory: exit $code, expected 2"
"$uform" encode --model "$tmp/tiny" --image -- "$photos" >"$tmp/after.jsonl" 2>"$tmp/err" || fail "--image -- DIR: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/after.jsonl") == "$count" ]] || fail "--image -- DIR: $(wc -l <"$tmp/after.jsonl") lines, expected $count"
"$uform" encode --model "$tmp/tiny" --image "$tmp/missing.jpg" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "missing image: exit $code, expected 1"
grep -q "cannot read $tmp/missing.jpg" "$tmp/err" || fail "missing image: $(cat "$tmp/err")"
"$uform" encode --model "$tmp/tiny" --image >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "--image without files: exit $code, expected 2"
[[ $failures == 0 ]] && echo "cli_test (images): all checks passed"
exit $((failures > 0))
