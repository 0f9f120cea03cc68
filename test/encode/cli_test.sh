#!/usr/bin/env bash
# `uform encode`: usage errors exit 2, engine errors exit 1 with the status name, and with
# all-MiniLM-L6-v2 (when this build tokenises) jsonl, f32 and npy outputs of the right shape, texts from
# arguments and from standard input in input order; a failing text named by its index and line, an
# --output file replaced only on success, a FIFO as a model file refused at once, NaN weights refused.
#   cli_test.sh UFORM_BINARY MINILM_DIR
set -u
uform=$1 minilm=$2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$uform" encode >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "no --model: exit $code, expected 2"
grep -q -- "--model DIR is required" "$tmp/err" || fail "no --model: $(cat "$tmp/err")"
"$uform" encode --model x --format xml a >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "--format xml: exit $code, expected 2"
grep -q "jsonl, npy or f32, not 'xml'" "$tmp/err" || fail "--format xml: $(cat "$tmp/err")"
"$uform" encode --model x --threads many a >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "--threads many: exit $code, expected 2"
"$uform" encode --model x --threads 99999999999999999999 a >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "--threads out of range: exit $code, expected 2"
grep -q "takes a count from 0 to 65536" "$tmp/err" || fail "--threads out of range: $(cat "$tmp/err")"
"$uform" encode --model x -o out.npy >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 2 ]] || fail "-o: exit $code, expected 2 (a one-letter option is not a text)"
grep -q "unknown option or missing value: '-o'" "$tmp/err" || fail "-o: $(cat "$tmp/err")"
"$uform" encode --help >"$tmp/out" 2>&1 || fail "--help failed"
grep -q "usage: uform encode" "$tmp/out" || fail "--help prints no usage"
"$uform" encode --model /nonexistent/uform-model "a cat" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "missing model: exit $code, expected 1"
grep -q "uform encode: /nonexistent/uform-model: [a-z_]*: " "$tmp/err" || fail "missing model: $(cat "$tmp/err")"

if [[ ! -f $minilm/config.json ]]; then
  echo "no all-MiniLM-L6-v2 at $minilm: the encoding half is skipped"
elif ! "$uform" encode --model "$minilm" "probe" >"$tmp/out" 2>"$tmp/err"; then
  if grep -q "unsupported" "$tmp/err"; then echo "this build cannot tokenise yet: $(cat "$tmp/err")"
  else fail "encode probe: $(cat "$tmp/err")"; fi
else
  "$uform" encode --model "$minilm" "a cat on a mat" "a dog in the fog" >"$tmp/two.jsonl" || fail "two texts"
  [[ $(wc -l <"$tmp/two.jsonl") == 2 ]] || fail "two texts: $(wc -l <"$tmp/two.jsonl") lines"
  [[ $(head -1 "$tmp/two.jsonl" | tr ',' '\n' | wc -l) == 384 ]] || fail "jsonl row is not 384 numbers"
  printf 'a cat on a mat\na dog in the fog\n' | "$uform" encode --model "$minilm" >"$tmp/stdin.jsonl" || fail "stdin"
  cmp -s "$tmp/two.jsonl" "$tmp/stdin.jsonl" || fail "stdin and arguments differ"
  printf 'one\ntwo\nthree\n' | "$uform" encode --model "$minilm" --format f32 --output "$tmp/out.f32" || fail "f32"
  [[ $(stat -c %s "$tmp/out.f32") == $((3 * 384 * 4)) ]] || fail "f32 size $(stat -c %s "$tmp/out.f32")"
  printf 'one\ntwo\n' | "$uform" encode --model "$minilm" --format npy >"$tmp/out.npy" || fail "npy"
  head -c 128 "$tmp/out.npy" | grep -q "'shape': (2, 384)" || fail "npy header"
  [[ $(stat -c %s "$tmp/out.npy") == $((128 + 2 * 384 * 4)) ]] || fail "npy size $(stat -c %s "$tmp/out.npy")"
  printf 'fine\n\xff\xfe\n' | "$uform" encode --model "$minilm" >"$tmp/out" 2>"$tmp/err"; code=$?
  [[ $code == 1 ]] || fail "invalid UTF-8: exit $code, expected 1"
  grep -q "invalid_argument" "$tmp/err" || fail "invalid UTF-8: $(cat "$tmp/err")"
  # A bad text in the second batch: named by its own index and line, and --output left as it was.
  { for i in $(seq 0 299); do echo "line $i"; done; printf 'bad \xff\n'; echo "after"; } >"$tmp/bad300.txt"
  echo keep >"$tmp/keep.jsonl"
  "$uform" encode --model "$minilm" --output "$tmp/keep.jsonl" <"$tmp/bad300.txt" >"$tmp/out" 2>"$tmp/err"; code=$?
  [[ $code == 1 ]] || fail "text 300: exit $code, expected 1"
  grep -q "text 300 (line 301 of standard input): invalid_argument: text: invalid UTF-8 at byte 4 (0xFF)" "$tmp/err" ||
    fail "text 300: $(cat "$tmp/err")"
  [[ $(cat "$tmp/keep.jsonl") == keep ]] || fail "a failed run changed --output: $(head -c 100 "$tmp/keep.jsonl")"
  [[ -z $(ls "$tmp" | grep 'keep.jsonl.') ]] || fail "a failed run left its temporary: $(ls "$tmp")"
  printf 'one\n' | "$uform" encode --model "$minilm" --output "$tmp/keep.jsonl" || fail "--output over a file"
  [[ $(wc -l <"$tmp/keep.jsonl") == 1 && $(head -c 1 "$tmp/keep.jsonl") == "[" ]] || fail "--output not replaced"
  ln -s keep.jsonl "$tmp/link.jsonl"
  printf 'one\ntwo\n' | "$uform" encode --model "$minilm" --output "$tmp/link.jsonl" || fail "--output through a link"
  [[ -L $tmp/link.jsonl && $(wc -l <"$tmp/keep.jsonl") == 2 ]] || fail "--output replaced the link, not written through it"
  printf 'one\n' | "$uform" encode --model "$minilm" --output /dev/null || fail "--output /dev/null (written in place)"
  [[ -c /dev/null ]] || fail "/dev/null is no longer a device"
  "$uform" encode --model "$minilm" -- -5 "-x" >"$tmp/dash.jsonl" || fail "texts after --"
  [[ $(wc -l <"$tmp/dash.jsonl") == 2 ]] || fail "texts after --: $(wc -l <"$tmp/dash.jsonl") lines"
  # Model files that are FIFOs fail at once; weights that hold NaN fail rather than print "nan".
  mkdir "$tmp/fifo" && cp -r "$minilm"/. "$tmp/fifo"/ && rm "$tmp/fifo/config.json" && mkfifo "$tmp/fifo/config.json"
  timeout 20 "$uform" encode --model "$tmp/fifo" "a" >"$tmp/out" 2>"$tmp/err"; code=$?
  [[ $code == 1 ]] || fail "a FIFO as config.json: exit $code, expected 1"
  grep -q "config.json: not a regular file (a FIFO)" "$tmp/err" || fail "FIFO config: $(cat "$tmp/err")"
  if command -v python3 >/dev/null; then
    mkdir "$tmp/nan" && cp -r "$minilm"/. "$tmp/nan"/
    python3 - "$tmp/nan/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    begin, end = header["embeddings.word_embeddings.weight"]["data_offsets"]
    f.seek(8 + n + begin)
    f.write(b"\xff" * (end - begin))
PY
    "$uform" encode --model "$tmp/nan" "hello" >"$tmp/out" 2>"$tmp/err"; code=$?
    [[ $code == 1 ]] || fail "NaN weights: exit $code, expected 1"
    grep -q "text 0: the embedding is not finite" "$tmp/err" || fail "NaN weights: $(cat "$tmp/err")"
    [[ ! -s $tmp/out ]] || fail "NaN weights printed: $(head -c 100 "$tmp/out")"
  fi
fi
[[ $failures == 0 ]] && echo "cli_test: all checks passed"
exit $((failures > 0))
