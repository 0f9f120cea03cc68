#!/usr/bin/env bash
# `uform encode`: usage errors exit 2, engine errors exit 1 with the status name, and with
# all-MiniLM-L6-v2 (when this build tokenises) jsonl, f32 and npy outputs of the right shape, texts from
# arguments and from standard input in input order.
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
fi
[[ $failures == 0 ]] && echo "cli_test: all checks passed"
exit $((failures > 0))
