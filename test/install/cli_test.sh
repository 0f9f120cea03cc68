#!/usr/bin/env bash
# shellcheck disable=SC2015 # `check && check || fail` fails when either check does, as meant
# Checks the `uform` program: usage and exit codes, `uform info` in text and JSON (parsed by
# `python3 -m json.tool`, then its values cross-checked), and `uform bench` reaching bench_ram.
# Output that cannot be written fails every command (write_errors; encode_write_error, which must
# also stop an endless input); SIGINT, SIGTERM and SIGHUP leave no temporary of `encode --output`
# (encode_signal); `encode --output ""` is a usage error (encode_output_empty). The encode cases use
# the tiny BERT of test/models.
#
# usage: cli_test.sh UFORM_BINARY CASE [BENCH_ARGS...]
#   CASE: usage | info | json | bench | options | orphan | write_errors | encode_write_error |
#         encode_signal | encode_output_empty
set -euo pipefail

uform=$1 case=$2
shift 2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/uform-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "cli test ($case): $*" >&2; exit 1; }
tiny=$(cd "$(dirname "${BASH_SOURCE[0]}")/../models/tiny-bert" && pwd)

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
  # Fewer bytes than one float: no sum to read (it was reported as a failed allocation).
  for value in 1 3; do
    code=0; timeout 60 "$uform" bench --bytes "$value" >/dev/null 2>"$tmp/err" || code=$?
    [[ $code == 2 ]] && grep -q -- "--bytes: '$value'" "$tmp/err" || fail "bench --bytes $value exited $code, not 2: $(head -1 "$tmp/err")"
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
write_errors)
  # Standard output on a full device or closed: exit 1 saying why, not 0 with the text lost; the
  # benchmark (BENCH_ARGS) stops at its first lines.
  for command in "--help" "-V" "--version" "info --help" "info" "encode --help" "bench --help" "bench $*"; do
    read -r -a words <<<"$command"
    code=0; "$uform" "${words[@]}" >/dev/full 2>"$tmp/err" || code=$?
    [[ $code == 1 ]] || fail "uform $command >/dev/full exited $code, not 1: $(cat "$tmp/err")"
    grep -q "could not write standard output: No space left on device" "$tmp/err" || fail "uform $command >/dev/full: $(cat "$tmp/err")"
    code=0; "$uform" "${words[@]}" >&- 2>"$tmp/err" || code=$?
    [[ $code == 1 ]] || fail "uform $command >&- exited $code, not 1: $(cat "$tmp/err")"
    grep -q "could not write standard output: Bad file descriptor" "$tmp/err" || fail "uform $command >&-: $(cat "$tmp/err")"
  done
  ;;
encode_write_error)
  # A failed write ends `uform encode` after that batch (exit 1, naming the output and why), though
  # the input never ends: standard output or --output on a full device, a pipe whose reader left
  # while SIGPIPE is ignored.
  code=0; yes hi | timeout 60 "$uform" encode --model "$tiny" >/dev/full 2>"$tmp/err" || code=$?
  [[ $code == 1 ]] || fail "endless input to /dev/full exited $code, not 1 (124: still encoding after 60 s): $(head -c 300 "$tmp/err")"
  [[ $(cat "$tmp/err") == "uform encode: could not write standard output: No space left on device" ]] || fail "to /dev/full: $(head -c 300 "$tmp/err")"
  code=0; yes hi | timeout 60 "$uform" encode --model "$tiny" --output /dev/full 2>"$tmp/err" || code=$?
  [[ $code == 1 ]] || fail "endless input to --output /dev/full exited $code, not 1: $(head -c 300 "$tmp/err")"
  [[ $(cat "$tmp/err") == "uform encode: could not write /dev/full: No space left on device" ]] || fail "to --output /dev/full: $(head -c 300 "$tmp/err")"
  code=0; yes hi | (trap '' PIPE; exec timeout 60 "$uform" encode --model "$tiny" 2>"$tmp/err") | head -c 10 >/dev/null || code=$?
  [[ $code == 1 ]] || fail "endless input to a closed pipe exited $code, not 1: $(head -c 300 "$tmp/err")"
  [[ $(cat "$tmp/err") == "uform encode: could not write standard output: Broken pipe" ]] || fail "to a closed pipe: $(head -c 300 "$tmp/err")"
  # A closed standard output fails as closed to the end, but its number is held (/dev/null, read-only)
  # while the command runs, so no file opened later (the CUDA driver's /dev/nvidiactl) receives the rows.
  mkfifo "$tmp/held"
  "$uform" encode --model "$tiny" <"$tmp/held" >&- 2>"$tmp/err" &
  pid=$!
  exec 3>"$tmp/held"
  target=
  for _ in $(seq 100); do
    target=$(readlink "/proc/$pid/fd/1" 2>/dev/null) && [[ $target == /dev/null ]] && break
    sleep 0.1
  done
  flags=$(awk '/^flags/ { print $2 }' "/proc/$pid/fdinfo/1" 2>/dev/null)
  echo hi >&3
  exec 3>&-
  code=0; wait "$pid" || code=$?
  [[ $target == /dev/null && -n $flags ]] && (( (8#$flags & 3) == 0 )) ||
    fail "closed standard output: descriptor 1 is '$target' (flags '$flags'), not /dev/null read-only"
  [[ $code == 1 ]] || fail "closed standard output: exit $code, not 1"
  [[ $(cat "$tmp/err") == "uform encode: could not write standard output: Bad file descriptor" ]] ||
    fail "closed standard output: $(head -c 300 "$tmp/err")"
  ;;
encode_signal)
  # Killed while --output FILE is written under its temporary name (a batch written, the next line
  # awaited): the process dies of the signal, the temporary is gone and FILE holds what it held.
  set -m # background jobs that do not ignore SIGINT (a script's otherwise do)
  mkfifo "$tmp/in"
  for signal in INT TERM HUP; do
    echo keep >"$tmp/out.jsonl"
    "$uform" encode --model "$tiny" --output "$tmp/out.jsonl" <"$tmp/in" 2>"$tmp/err" &
    pid=$!
    exec 3>"$tmp/in"
    printf 'a cat\na dog\n' >&3
    temporary=
    for _ in $(seq 1 1500); do
      temporary=$(compgen -G "$tmp/out.jsonl.*") || true
      [[ -n $temporary && -s $temporary ]] && break
      sleep 0.02
    done
    [[ -n $temporary && -s $temporary ]] || { kill -9 "$pid"; fail "SIG$signal: no rows in a temporary within 30 s"; }
    kill -s "$signal" "$pid"
    code=0; wait "$pid" || code=$?
    exec 3>&-
    [[ $code == $((128 + $(kill -l "$signal"))) ]] || fail "SIG$signal: exit $code, not $((128 + $(kill -l "$signal"))): $(cat "$tmp/err")"
    [[ ! -s $tmp/err ]] || fail "SIG$signal: $(cat "$tmp/err")"
    leftover=$(compgen -G "$tmp/out.jsonl.*") && fail "SIG$signal left the temporary $leftover"
    [[ $(cat "$tmp/out.jsonl") == keep ]] || fail "SIG$signal changed --output: $(head -c 100 "$tmp/out.jsonl")"
  done
  ;;
encode_output_empty)
  # `--output ""` is refused before any work (it encoded everything into ".XXXXXX", then failed to
  # rename it to "").
  mkdir "$tmp/cwd" && cd "$tmp/cwd"
  for model in "$tiny" /nonexistent/uform-model; do
    code=0; "$uform" encode --model "$model" --output "" "a cat" >"$tmp/out" 2>"$tmp/err" || code=$?
    [[ $code == 2 ]] || fail "--output '' with $model exited $code, not 2: $(cat "$tmp/err")"
    [[ $(head -n 1 "$tmp/err") == "uform encode: --output takes a file name, not ''" && ! -s $tmp/out ]] ||
      fail "--output '' with $model: $(cat "$tmp/err")"
    [[ -z $(ls -A) ]] || fail "--output '' wrote $(ls -A)"
  done
  ;;
*) fail "unknown case" ;;
esac
echo "cli test ($case): ok"
