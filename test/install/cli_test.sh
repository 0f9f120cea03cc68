#!/usr/bin/env bash
# shellcheck disable=SC2015 # `check && check || fail` fails when either check does, as meant
# Checks the `uform` program: usage and exit codes, `uform info` in text and JSON (parsed by
# `python3 -m json.tool`, then its values cross-checked), and `uform bench` reaching bench_ram.
#
# usage: cli_test.sh UFORM_BINARY CASE [BENCH_ARGS...]   CASE: usage | info | json | bench | options | orphan
set -euo pipefail

uform=$1 case=$2
shift 2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/uform-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "cli test ($case): $*" >&2; exit 1; }

version=$("$uform" --version) || fail "--version failed"
[[ $version =~ ^uform\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "--version printed '$version'"

case $case in
usage)
  "$uform" --help >"$tmp/out" 2>"$tmp/err" || fail "--help exited $?"
  grep -q '^usage: uform' "$tmp/out" && [[ ! -s $tmp/err ]] || fail "--help prints usage on stdout only"
  code=0; "$uform" frobnicate >"$tmp/out" 2>"$tmp/err" || code=$?
  [[ $code == 2 ]] || fail "an unknown command exited $code, not 2"
  grep -q "unknown command 'frobnicate'" "$tmp/err" && grep -q '^usage: uform' "$tmp/err" && [[ ! -s $tmp/out ]] ||
    fail "an unknown command prints the error and usage on stderr only"
  code=0; "$uform" >/dev/null 2>"$tmp/err" || code=$?
  [[ $code == 2 ]] && grep -q '^usage: uform' "$tmp/err" || fail "no command exited $code, not 2 with usage"
  code=0; "$uform" info --bogus >/dev/null 2>"$tmp/err" || code=$?
  [[ $code == 2 ]] || fail "info --bogus exited $code, not 2"
  ;;
info)
  "$uform" info >"$tmp/out" || fail "info exited $?: $(cat "$tmp/out")"
  cat "$tmp/out"
  head -n1 "$tmp/out" | grep -qx "$version" || fail "the first line is not '$version'"
  for line in '^cpu: [a-z0-9_]+$' '^  class: a tier of instruction sets, not a vendor' '^  features:' '^memory domains: [0-9]+, [0-9]+ cores?$' '^  node [0-9]+: ' \
              '^gpus: ' '^default threads: [0-9]+ '; do
    grep -qE "$line" "$tmp/out" || fail "no line matching /$line/"
  done
  ;;
json)
  "$uform" info --json >"$tmp/info.json" || fail "info --json exited $?: $(cat "$tmp/info.json")"
  python3 -m json.tool "$tmp/info.json" || fail "info --json is not valid JSON"
  python3 - "$tmp/info.json" "${version#uform }" <<'PY' || fail "info --json has wrong values"
import json, os, sys
info = json.load(open(sys.argv[1]))
assert info["version"] == sys.argv[2], info["version"]
assert info["cpu"]["class"] not in ("invalid", "unknown"), info["cpu"]
assert info["cpu"]["class_is_tier"] is True, info["cpu"]
assert all(isinstance(f, str) and f != "invalid" for f in info["cpu"]["features"]), info["cpu"]
domains = info["memory_domains"]
cores = sorted(c for d in domains for c in d["cores"])
assert cores and len(cores) == len(set(cores)) == info["cores"], (cores, info["cores"])
allowed = sorted(os.sched_getaffinity(0))
assert set(cores) <= set(allowed), (cores, allowed)
assert info["default_threads"] == max(1, len(cores) * 7 // 8), info["default_threads"]
assert info["default_executor"]["kind"] == "ram" and info["default_executor"]["threads"] == info["default_threads"]
gpus = info["gpus"]
assert isinstance(gpus["devices"], list)
if not gpus["devices"]:
    assert gpus["absent"]["status"] == "unsupported" and gpus["absent"]["message"], gpus
print("json: ok:", info["cpu"]["class"], len(domains), "domains,", len(cores), "cores,",
      info["default_threads"], "default threads,", len(gpus["devices"]), "gpus")
PY
  ;;
bench)
  "$uform" bench "$@" >"$tmp/out" || fail "bench exited $?: $(cat "$tmp/out")"
  cat "$tmp/out"
  grep -qE '^fork-join threads=1: uform [0-9]+ ns' "$tmp/out" || fail "no fork-join line"
  ;;
options)
  # Every numeric option rejects negatives, overflow and junk with exit 2 (strtoull took "-1" as
  # 2^64-1 and ran forever); usage errors say what was wrong on stderr.
  for option in --rounds --repetitions --bytes --sum-repetitions --trials --threads; do
    for value in -1 18446744073709551616 99999999999999999999999 12abc '' ' 5' +5 0x10 1e3 nan; do
      code=0; timeout 60 "$uform" bench "$option" "$value" >"$tmp/out" 2>"$tmp/err" || code=$?
      [[ $code == 2 ]] || fail "bench $option '$value' exited $code, not 2"
      grep -q -- "$option" "$tmp/err" || fail "bench $option '$value' did not name the option: $(cat "$tmp/err")"
    done
  done
  for value in 0 65 1-0 1,,2 , 3-; do
    code=0; timeout 60 "$uform" bench --repetitions "${value%%[-,]*}" --threads "$value" >/dev/null 2>&1 || code=$?
    [[ $code == 2 ]] || fail "bench --threads '$value' exited $code, not 2"
  done
  code=0; "$uform" bench --mood sideways >/dev/null 2>"$tmp/err" || code=$?
  [[ $code == 2 ]] || fail "bench --mood sideways exited $code, not 2"
  code=0; "$uform" bench --bogus >/dev/null 2>"$tmp/err" || code=$?
  [[ $code == 2 ]] && grep -q "unknown option '--bogus'" "$tmp/err" || fail "bench --bogus exited $code, not 2"
  ;;
orphan)
  # A benchmark killed mid-run takes its child with it (PR_SET_PDEATHSIG): nothing keeps spinning.
  alive() { local state; state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $state != Z* ]]; }
  "$uform" bench --threads 1 --only uform --mood spinning --bytes 0 --rounds 1000000000000 >/dev/null 2>&1 &
  parent=$!
  child=
  for _ in $(seq 1 1500); do
    child=$(pgrep -P "$parent" | head -n1) || true
    [[ -n $child ]] && break
    sleep 0.02
  done
  [[ -n $child ]] || { kill -9 "$parent"; fail "no benchmark child appeared within 30 s"; }
  kill -9 "$parent"
  wait "$parent" 2>/dev/null || true
  for _ in $(seq 1 1500); do alive "$child" || break; sleep 0.02; done
  if alive "$child"; then
    kill -9 "$child"
    fail "the benchmark child $child kept running after its parent was killed"
  fi
  ;;
*) fail "unknown case" ;;
esac
echo "cli test ($case): ok"
