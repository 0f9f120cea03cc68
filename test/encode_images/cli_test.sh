#!/usr/bin/env bash
# `uform encode --image`: a directory expands to its images in name order, files keep the order
# given, jsonl/f32/npy have the right shapes, an undecodable image exits 1 naming the file and the
# reason (and leaves --output as it was), a FIFO or device as an image is refused, an empty directory
# is a usage error; a directory's dangling or looping link fails naming it, its FIFOs, subdirectories
# and hidden files are passed over, a file name's newline is shown escaped, and SIGPIPE on standard
# error removes --output's temporary. --features in the three formats against each image's alone. Row i of a run is image i alone (images of different sizes, in no order of size) in
# jsonl, f32 and npy. The progress bar on a terminal standard error (a pseudo-terminal) for more than
# 256 images, never without a terminal or for 256 images, never changing standard output and never
# sharing a line with a row or an error. The pseudo-terminal and the rows' comparison are
# test/encode/cli_test.sh's helpers.
#   cli_test.sh UFORM_BINARY MAKE_TOWER TEST_SOURCE_DIR
set -u
uform=$1 make_tower=$2 source=$3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { echo "FAIL: python3 (which build.sh installs) is needed for the pseudo-terminal and the rows"; exit 1; }
helpers=$tmp
bash "$source/encode/cli_test.sh" --helpers "$helpers" && source "$helpers/helpers.sh" || { echo "FAIL: the helpers"; exit 1; }
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
# --features: every image's [CLS], register and patch rows, all of them in jsonl too; the three formats
# of one run against each image alone.
: >"$tmp/features-alone.jsonl"
for name in "${names[@]}"; do
  "$uform" encode --model "$tmp/tiny" --features --image "$photos/$name" >>"$tmp/features-alone.jsonl" || fail "--features: $name alone"
done
"$uform" encode --model "$tmp/tiny" --features --image "$photos" >"$tmp/features.jsonl" || fail "--features: jsonl"
"$uform" encode --model "$tmp/tiny" --features --format npy --output "$tmp/features.npy" --image "$photos" || fail "--features: npy"
"$uform" encode --model "$tmp/tiny" --features --format f32 --image "$photos" >"$tmp/features.f32" || fail "--features: f32"
hidden=$(python3 -c 'import json, sys; print(len(json.loads(open(sys.argv[1]).readline())[0]))' "$tmp/features.jsonl")
same_features "$tmp/features.jsonl" "$tmp/features.npy" "$tmp/features.f32" "$hidden" "images --features" "$tmp/features-alone.jsonl"
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
grep -q "^uform encode: --image needs at least one image file; the directory $tmp/empty holds no .jpg, .jpeg or .png file$" "$tmp/err" ||
  fail "an empty directory: $(head -n 1 "$tmp/err")"
"$uform" encode --model "$tmp/tiny" --image -- "$photos" >"$tmp/after.jsonl" 2>"$tmp/err" || fail "--image -- DIR: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/after.jsonl") == "$count" ]] || fail "--image -- DIR: $(wc -l <"$tmp/after.jsonl") lines, expected $count"
"$uform" encode --model "$tmp/tiny" --image "$tmp/missing.jpg" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "missing image: exit $code, expected 1"
grep -q "cannot read $tmp/missing.jpg" "$tmp/err" || fail "missing image: $(cat "$tmp/err")"
"$uform" encode --model "$tmp/tiny" --image >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "--image without files: exit $code, expected 2"
grep -q "^uform encode: --image needs at least one image file$" "$tmp/err" || fail "--image without files: $(head -n 1 "$tmp/err")"
# A directory's entries: a dangling link and a looping one fail the run naming the entry (as those
# paths given alone do); a FIFO, a subdirectory and hidden files are passed over; a name's newline is
# shown escaped, not as a second message line.
mkdir -p "$tmp/entries/sub.jpg" "$tmp/links"
cp "$photos/${names[0]}" "$tmp/entries/a.jpg" && cp "$photos/${names[0]}" "$tmp/entries/.hidden.jpg"
mkfifo "$tmp/entries/fifo.png"
timeout 20 "$uform" encode --model "$tmp/tiny" --image "$tmp/entries" >"$tmp/out" 2>"$tmp/err" || fail "special entries: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/out") == 1 ]] || fail "special entries: $(wc -l <"$tmp/out") rows, expected 1 (a.jpg)"
cp "$photos/${names[0]}" "$tmp/links/a.jpg" && ln -s /nonexistent "$tmp/links/b.jpg" && ln -s c.jpg "$tmp/links/c.jpg"
"$uform" encode --model "$tmp/tiny" --image "$tmp/links" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 && ! -s $tmp/out ]] || fail "a dangling link in a directory: exit $code, expected 1 and no rows"
grep -qF "cannot read $tmp/links/b.jpg: No such file or directory" "$tmp/err" || fail "a dangling link in a directory: $(cat "$tmp/err")"
rm "$tmp/links/b.jpg"
"$uform" encode --model "$tmp/tiny" --image "$tmp/links" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] && grep -qF "cannot read $tmp/links/c.jpg: Too many levels of symbolic links" "$tmp/err" ||
  fail "a looping link in a directory: exit $code: $(cat "$tmp/err")"
mkdir "$tmp/newline" && head -c 100 "$photos/${names[0]}" >"$tmp/newline/a.jpg: ok"$'\n'"uform encode: b.jpg"
"$uform" encode --model "$tmp/tiny" --image "$tmp/newline" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -qF 'a.jpg: ok\x0auform encode: b.jpg: corrupt_file' "$tmp/err" ||
  fail "a newline in a file name: exit $code: $(cat "$tmp/err")"
# A message to a standard error whose reader is gone (SIGPIPE) still removes --output's temporary.
mkdir "$tmp/sigpipe"
python3 - "$uform" "$tmp/tiny" "$tmp/sigpipe/out.jsonl" "$photos/${names[0]}" "$source/image/bad/truncated.jpg" <<'PY' ||
import os, signal, subprocess, sys
uform, model, output, good, bad = sys.argv[1:]
read, write = os.pipe()
os.close(read)  # the reader is gone before the run starts
code = subprocess.call([uform, "encode", "--model", model, "--output", output, "--image", good, bad], stderr=write,
                       stdout=subprocess.DEVNULL)
left = os.listdir(os.path.dirname(output))
sys.exit(0 if code == -signal.SIGPIPE and not left else f"exit {code}, left {left}")
PY
  fail "SIGPIPE on standard error left --output's temporary"
# An item before --image is a text: not taken as an image path, nor encoded as a text beside images.
"$uform" encode --model "$tmp/tiny" "$photos/${names[0]}" --image "$photos/${names[1]}" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 && ! -s $tmp/out ]] || fail "a text before --image: exit $code, expected 2 and no rows"
grep -qF "uform encode: '$photos/${names[0]}' came before --image, as a text; a run encodes texts or images" "$tmp/err" ||
  fail "a text before --image: $(head -2 "$tmp/err")"

# Row i of a run is image i alone: photos and synthetic images from 1x1 to 1000x3 pixels, JPEG and PNG
# of several modes, in no order of size. Batching may change the products' rounding (measured up to
# 1.9e-7 of the row's norm with two threads, 0 with one; other classes block the products otherwise),
# so rows agree within 1e-5 of their norm, a hundredth of the 1e-3 by which any two rows differ.
order=("$photos/horse.png" "$source/image/synth/rgb_1x1.png" "$photos/grace_hopper.jpg" "$source/image/synth/jpeg_37x211.jpg"
  "$source/image/synth/rgb_1000x3.png" "$photos/astronaut.png" "$source/image/synth/mode_p.png" "$source/image/synth/jpeg_cmyk.jpg")
: >"$tmp/alone.jsonl"
for image in "${order[@]}"; do "$uform" encode --model "$tmp/tiny" --image "$image" >>"$tmp/alone.jsonl" || fail "$image alone"; done
"$uform" encode --model "$tmp/tiny" --image "${order[@]}" >"$tmp/order.jsonl" || fail "order: jsonl"
"$uform" encode --model "$tmp/tiny" --format f32 --image "${order[@]}" >"$tmp/order.f32" || fail "order: f32"
"$uform" encode --model "$tmp/tiny" --format npy --output "$tmp/order.npy" --image "${order[@]}" || fail "order: npy"
same_rows "$tmp/order.jsonl" jsonl "$tmp/alone.jsonl" jsonl 32 1e-5 "images, jsonl: row i against image i alone" order
same_rows "$tmp/order.f32" f32 "$tmp/alone.jsonl" jsonl 32 1e-5 "images, f32: row i against image i alone" order
same_rows "$tmp/order.npy" npy "$tmp/alone.jsonl" jsonl 32 1e-5 "images, npy: row i against image i alone" order
same_rows "$tmp/order.f32" f32 "$tmp/order.jsonl" jsonl 32 0 "images, f32 against jsonl" quiet
same_rows "$tmp/order.npy" npy "$tmp/order.jsonl" jsonl 32 0 "images, npy against jsonl" quiet

# ---- The progress bar: 300 small images (eight files in turn) ----
bar='\[[# ]{40}\] [0-9]+/300 images'
small=(rgb_100x80.png jpeg_37x211.jpg rgb_150x100.png jpeg_420.jpg mode_p.png grey2.png jpeg_progressive.jpg rgb_1x300.png)
many=()
for i in $(seq 0 299); do many+=("$source/image/synth/${small[i % 8]}"); done
"$uform" encode --model "$tmp/tiny" --image "${many[@]}" >"$tmp/plain.jsonl" 2>"$tmp/plain.err" || fail "300 images: $(cat "$tmp/plain.err")"
[[ $(wc -l <"$tmp/plain.jsonl") == 300 ]] || fail "300 images: $(wc -l <"$tmp/plain.jsonl") rows"
# Without a terminal (standard error to a file): no bar.
if grep -q $'\r' "$tmp/plain.err" || grep -Eq "$bar" "$tmp/plain.err"; then fail "a bar without a terminal: $(head -c 200 "$tmp/plain.err" | od -c | head -5)"; fi
# On a terminal: drawn at 0, 256 and 300 (the whole bar) on one line, which ends; standard output the
# same bytes (jsonl and npy).
on_tty "$tmp/bar" /dev/null "$tmp/tty.jsonl" "$uform" encode --model "$tmp/tiny" --image "${many[@]}" ||
  fail "300 images on a terminal: exit $?: $(tr '\r' '\n' <"$tmp/bar")"
cmp -s "$tmp/tty.jsonl" "$tmp/plain.jsonl" || fail "a terminal on standard error changed standard output (jsonl)"
[[ $(cat "$tmp/bar") == "$(printf '\r[%40s] 0/300 images\r[%-40s] 256/300 images\r[%s] 300/300 images' '' \
   "$(printf '#%.0s' $(seq 34))" "$(printf '#%.0s' $(seq 40))")" && $(tail -c 1 "$tmp/bar" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "the bar is not drawn at 0, 256 and 300 of 300 on one ended line: $(od -c "$tmp/bar" | head -12)"
on_tty "$tmp/bar.npy.err" /dev/null "$tmp/tty.npy" "$uform" encode --model "$tmp/tiny" --format npy --image "${many[@]}" ||
  fail "npy on a terminal: exit $?"
"$uform" encode --model "$tmp/tiny" --format npy --image "${many[@]}" >"$tmp/plain.npy" 2>/dev/null || fail "300 images, npy"
cmp -s "$tmp/tty.npy" "$tmp/plain.npy" || fail "a terminal on standard error changed standard output (npy)"
grep -q "300/300 images" "$tmp/bar.npy.err" || fail "no bar for npy: $(tr '\r' '\n' <"$tmp/bar.npy.err")"
# 256 images (one batch) on a terminal: no bar.
on_tty "$tmp/bar256" /dev/null "$tmp/tty256.jsonl" "$uform" encode --model "$tmp/tiny" --image "${many[@]:0:256}" ||
  fail "256 images on a terminal: exit $?"
if grep -q $'\r' "$tmp/bar256" || grep -q "images" "$tmp/bar256"; then fail "a bar for 256 images: $(tr '\r' '\n' <"$tmp/bar256")"; fi
cmp -s "$tmp/tty256.jsonl" <(head -n 256 "$tmp/plain.jsonl") || fail "256 images: rows differ from the first 256 of 300"
# Standard output on the same terminal: every line a whole row or a whole drawing of the bar.
on_tty "$tmp/both" /dev/null - "$uform" encode --model "$tmp/tiny" --image "${many[@]}" || fail "300 images, both on a terminal: exit $?"
tr -d '\r' <"$tmp/both" | grep -Ev "^$bar\$" >"$tmp/both.rows"
cmp -s "$tmp/both.rows" "$tmp/plain.jsonl" || fail "rows and the bar share lines on one terminal: $(grep -En "images\[" "$tmp/both.rows" | head -c 300)"
[[ $(tr -d '\r' <"$tmp/both" | grep -Ec "^$bar\$") == 3 ]] || fail "not three drawings of the bar among the rows"
# An image that cannot be read (a FIFO) or decoded (truncated) in the second batch: the rows of the
# images before it are written (a file that cannot be read ends its batch, so the bar is drawn at 280
# too), and the bar's line ends before the error, which has a line of its own.
bar256='^\[[# ]{40}\] 256/300 images$' bar280='^\[[# ]{40}\] 280/300 images$'
bad_files=("$tmp/fifo.jpg" "$source/image/bad/truncated.jpg") bad_messages=("not a regular file" "corrupt_file: ")
for k in 0 1; do
  file=${bad_files[k]} message=${bad_messages[k]} lines=$((4 - k))
  on_tty "$tmp/bad.err" /dev/null "$tmp/out" "$uform" encode --model "$tmp/tiny" --image "${many[@]:0:280}" "$file" "${many[@]:281}"; code=$?
  [[ $code == 1 ]] || fail "$file at 280 on a terminal: exit $code, expected 1"
  tr '\r' '\n' <"$tmp/bad.err" | grep -v '^$' >"$tmp/bad.lines"
  [[ $(sed -n ${lines}p "$tmp/bad.lines") == *"$file: $message"* && $(sed -n 2p "$tmp/bad.lines") =~ $bar256 &&
     ($k == 1 || $(sed -n 3p "$tmp/bad.lines") =~ $bar280) &&
     $(wc -l <"$tmp/bad.lines") == "$lines" && $(tail -c 1 "$tmp/bad.err" | od -An -c | tr -d ' ') == '\n' ]] ||
    fail "$file at 280 on a terminal: the error does not have a line of its own: $(od -c "$tmp/bad.err" | tail -8)"
  [[ $(wc -l <"$tmp/out") == 280 ]] || fail "$file at 280 on a terminal: $(wc -l <"$tmp/out") rows before the error, expected 280"
  cmp -s "$tmp/out" <(head -n 280 "$tmp/plain.jsonl") || fail "$file at 280 on a terminal: the rows before it differ"
done
[[ $failures == 0 ]] && echo "cli_test (images): all checks passed"
exit $((failures > 0))
