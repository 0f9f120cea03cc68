#!/usr/bin/env bash
# shellcheck disable=SC2015 # `check && check || fail` fails when either check does, as meant
# Checks the `uform` program: usage and exit codes, `uform info` in text and JSON (parsed by
# `python3 -m json.tool`, then its values cross-checked), and `uform bench` reaching bench_ram.
# Output that cannot be written fails every command (write_errors; encode_write_error, which must
# also stop an endless input; --output /dev/stdout written through the open descriptor; standard
# input from a regular file not read through without a progress bar); SIGINT, SIGTERM, SIGHUP,
# SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGVTALRM and SIGXFSZ leave no temporary of `encode --output`
# (encode_signal); the longest line of standard input (encode_line_limit); `encode --output ""`
# and `--model ""` are usage errors, a 255-byte --output name works, a FILE or directory the user
# cannot write is refused (encode_output_empty). The encode cases use the tiny BERT of test/models.
#
# usage: cli_test.sh UFORM_BINARY CASE [BENCH_ARGS...]
#   CASE: usage | info | json | bench | options | orphan | write_errors | encode_write_error |
#         encode_signal | encode_output_empty | encode_line_limit [full]
set -euo pipefail

uform=$1 case=$2
shift 2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/uform-cli.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
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
  # Every uform run failing (more threads than cores): "failed" where the figures would be, no line
  # cut short ("idle threads=N: uform", " (goal: at most 0.35)" without a ratio).
  code=0; "$uform" bench --threads $(($(nproc) + 1)) --quick --rounds 10 --bytes 0 >"$tmp/out" 2>"$tmp/err" || code=$?
  cat "$tmp/out"
  grep -q '^fork-join threads=.*: uform failed' "$tmp/out" || fail "more threads than cores: the uform runs did not fail"
  ! grep -qE ': uform$|^ \(goal' "$tmp/out" || fail "every uform run failed: a line without its figures: $(cat "$tmp/out")"
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
  # --output /dev/stdout (or /dev/stderr) is the open descriptor, not reopened: a file the shell
  # appends to keeps its lines (fopen "wb" truncated it), and a closed standard output fails (the
  # rows went to the held /dev/null, exit 0).
  printf 'one\ntwo\n' >"$tmp/log"
  "$uform" encode --model "$tiny" --output /dev/stdout "a cat" >>"$tmp/log" || fail "--output /dev/stdout >> exited $?"
  [[ $(wc -l <"$tmp/log") == 3 && $(head -n 1 "$tmp/log") == one ]] || fail "--output /dev/stdout >>: $(head -c 100 "$tmp/log")"
  "$uform" encode --model "$tiny" --output /dev/stderr "a cat" 2>>"$tmp/log" || fail "--output /dev/stderr 2>> exited $?"
  [[ $(wc -l <"$tmp/log") == 4 && $(head -n 1 "$tmp/log") == one ]] || fail "--output /dev/stderr 2>>: $(head -c 100 "$tmp/log")"
  for name in /dev/stdout /proc/self/fd/1; do
    code=0; "$uform" encode --model "$tiny" --output "$name" "a cat" >&- 2>"$tmp/err" || code=$?
    [[ $code == 1 ]] && grep -q 'Bad file descriptor' "$tmp/err" || fail "--output $name, closed: exit $code: $(head -c 300 "$tmp/err")"
  done
  # Standard input from a regular file with no terminal for the bar is not read through to count its
  # lines first. A hang guard, not a timing: a sparse 4 TiB file (16 GiB where the file system caps
  # files lower) fails at its first line in about a second, where counting first took about 45 s
  # per 16 GiB, hours for 4 TiB; 60 s leaves any loaded or sanitised build far more than it needs.
  truncate -s 4T "$tmp/sparse" 2>/dev/null || truncate -s 16G "$tmp/sparse"
  code=0; timeout 60 "$uform" encode --model "$tiny" <"$tmp/sparse" >/dev/null 2>"$tmp/err" || code=$?
  [[ $code == 1 ]] && grep -q 'line 1 of standard input is longer than' "$tmp/err" ||
    fail "a sparse standard input: exit $code (124: still counting after 60 s): $(head -c 300 "$tmp/err")"
  rm -f "$tmp/sparse"
  ;;
encode_line_limit)
  # The longest line of standard input is 64 MiB, its line end aside ('\r\n' too): one byte more is
  # refused naming the line (exit 1); with "full" (plain builds: 64 MiB of text is encoded, about
  # 1 GB and seconds) a line of exactly 64 MiB is encoded (it was refused as "longer than 64 MiB").
  limit=$((64 << 20))
  code=0; { printf 'a cat\n'; head -c $((limit + 1)) /dev/zero | tr '\0' a; printf '\n'; } |
    "$uform" encode --model "$tiny" --format f32 >"$tmp/out" 2>"$tmp/err" || code=$?
  [[ $code == 1 && $(cat "$tmp/err") == "uform encode: line 2 of standard input is longer than 64 MiB" ]] ||
    fail "a line of 64 MiB + 1: exit $code: $(head -c 300 "$tmp/err")"
  [[ $(stat -c %s "$tmp/out") -gt 0 ]] || fail "a line of 64 MiB + 1: the row before it is not written"
  if [[ ${1:-} == full ]]; then
    for end in '\n' '\r\n'; do
      code=0; { head -c $limit /dev/zero | tr '\0' a; printf "$end"; } |
        "$uform" encode --model "$tiny" --format f32 >"$tmp/out" 2>"$tmp/err" || code=$?
      [[ $code == 0 && $(stat -c %s "$tmp/out") -gt 0 ]] || fail "a line of 64 MiB ending '$end': exit $code: $(head -c 300 "$tmp/err")"
    done
  fi
  ;;
encode_signal)
  # Killed while --output FILE is written under its temporary name (a batch written, the next line
  # awaited): the process dies of the signal, the temporary is gone and FILE holds what it held.
  set -m # background jobs that do not ignore SIGINT (a script's otherwise do)
  mkfifo "$tmp/in"
  mkdir "$tmp/sig" # FILE's directory: whatever else is there is a temporary
  others() { find "$tmp/sig" -mindepth 1 ! -name out.jsonl "$@"; }
  for signal in INT TERM HUP QUIT ALRM USR1 USR2 VTALRM; do
    echo keep >"$tmp/sig/out.jsonl"
    "$uform" encode --model "$tiny" --output "$tmp/sig/out.jsonl" <"$tmp/in" 2>"$tmp/err" &
    pid=$!
    exec 3>"$tmp/in"
    printf 'a cat\na dog\n' >&3
    temporary=
    for _ in $(seq 1 1500); do
      temporary=$(others -print -quit)
      [[ -n $temporary && -s $temporary ]] && break
      sleep 0.02
    done
    [[ -n $temporary && -s $temporary ]] || { kill -9 "$pid"; fail "SIG$signal: no rows in a temporary within 30 s"; }
    kill -s "$signal" "$pid"
    code=0; wait "$pid" || code=$?
    exec 3>&-
    [[ $code == $((128 + $(kill -l "$signal"))) ]] || fail "SIG$signal: exit $code, not $((128 + $(kill -l "$signal"))): $(cat "$tmp/err")"
    [[ ! -s $tmp/err ]] || fail "SIG$signal: $(cat "$tmp/err")"
    leftover=$(others) && [[ -z $leftover ]] || fail "SIG$signal left the temporary $leftover"
    [[ $(cat "$tmp/sig/out.jsonl") == keep ]] || fail "SIG$signal changed --output: $(head -c 100 "$tmp/sig/out.jsonl")"
  done
  # A file size limit reached (SIGXFSZ, its default action) removes the temporary too.
  for _ in $(seq 300); do echo 'a cat'; done >"$tmp/many.txt"
  code=0
  { (ulimit -f 1; exec "$uform" encode --model "$tiny" --output "$tmp/sig/out.jsonl" <"$tmp/many.txt" 2>"$tmp/err") || code=$?; } 2>/dev/null
  [[ $code == $((128 + $(kill -l XFSZ))) ]] || fail "SIGXFSZ: exit $code, not $((128 + $(kill -l XFSZ))): $(cat "$tmp/err")"
  leftover=$(others) && [[ -z $leftover ]] || fail "SIGXFSZ left the temporary $leftover"
  [[ $(cat "$tmp/sig/out.jsonl") == keep ]] || fail "SIGXFSZ changed --output: $(head -c 100 "$tmp/sig/out.jsonl")"
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
  # `--model ""` is a usage error too (it was the engine's invalid_argument, exit 1).
  code=0; "$uform" encode --model "" "a cat" >"$tmp/out" 2>"$tmp/err" || code=$?
  [[ $code == 2 && $(head -n 1 "$tmp/err") == "uform encode: --model takes a model directory, not ''" && ! -s $tmp/out ]] ||
    fail "--model '' exited $code: $(cat "$tmp/err")"
  # Control bytes of --output and --model names are shown escaped, so a name cannot forge a line.
  code=0; "$uform" encode --model "$tiny" --output "$tmp/cwd/no"$'\n'"such/out" "a cat" 2>"$tmp/err" || code=$?
  [[ $code == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -q 'no\\x0asuch/out' "$tmp/err" ||
    fail "an --output name with a newline: exit $code: $(cat "$tmp/err")"
  code=0; "$uform" encode --model "$tmp/cwd/no"$'\n'"model" "a cat" 2>"$tmp/err" || code=$?
  [[ $code == 1 && $(wc -l <"$tmp/err") == 1 ]] && grep -q 'no\\x0amodel' "$tmp/err" ||
    fail "a --model name with a newline: exit $code: $(cat "$tmp/err")"
  # A file name of NAME_MAX (255) bytes: its temporary is a short name beside it ("NAME.XXXXXX" was too long).
  name=$(printf 'x%.0s' $(seq 255))
  "$uform" encode --model "$tiny" --output "$name" "a cat" 2>"$tmp/err" || fail "--output of 255 bytes exited $?: $(cat "$tmp/err")"
  [[ $(wc -l <"$name") == 1 && $(ls -A) == "$name" ]] || fail "--output of 255 bytes: $(ls -A)"
  # What the user may not write (as nobody where run as root): a read-only FILE is refused, not
  # replaced; a writable FILE in a directory it may not write fails naming the directory.
  user=()
  if ((EUID == 0)); then
    command -v setpriv >/dev/null || { echo "cli test ($case): no setpriv to drop root: permissions not checked"; exit 0; }
    user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    # A checkout under a directory nobody may enter (/root) cannot be run as nobody.
    "${user[@]}" test -x "$uform" -a -r "$tiny/config.json" ||
      { echo "cli test ($case): nobody cannot run $uform here: permissions not checked"; exit 0; }
  fi
  chmod 755 "$tmp"
  mkdir -m 777 "$tmp/open" && echo keep >"$tmp/open/ro.jsonl" && chmod 444 "$tmp/open/ro.jsonl"
  mkdir "$tmp/shut" && echo keep >"$tmp/shut/rw.jsonl" && chmod 666 "$tmp/shut/rw.jsonl" && chmod 555 "$tmp/shut"
  code=0; "${user[@]}" "$uform" encode --model "$tiny" --output "$tmp/open/ro.jsonl" "a cat" 2>"$tmp/err" || code=$?
  [[ $code == 1 && $(cat "$tmp/err") == "uform encode: cannot write $tmp/open/ro.jsonl: Permission denied" ]] ||
    fail "a 0444 --output: exit $code: $(cat "$tmp/err")"
  [[ $(cat "$tmp/open/ro.jsonl") == keep && -z $(compgen -G "$tmp/open/.uform-*") ]] || fail "a 0444 --output was changed: $(ls -A "$tmp/open")"
  code=0; "${user[@]}" "$uform" encode --model "$tiny" --output "$tmp/shut/rw.jsonl" "a cat" 2>"$tmp/err" || code=$?
  [[ $code == 1 && $(cat "$tmp/err") == "uform encode: cannot write $tmp/shut/rw.jsonl: cannot create its temporary file in the directory $tmp/shut: Permission denied" ]] ||
    fail "--output in a read-only directory: exit $code: $(cat "$tmp/err")"
  [[ $(cat "$tmp/shut/rw.jsonl") == keep ]] || fail "--output in a read-only directory was changed"
  # Another user's writable FILE in a sticky directory (/tmp's mode) that is not the user's either:
  # renaming over it would fail after all the work, so it is refused first.
  if ((EUID == 0)); then
    mkdir -m 1777 "$tmp/sticky" && echo keep >"$tmp/sticky/root.jsonl" && chmod 666 "$tmp/sticky/root.jsonl"
    code=0; "${user[@]}" "$uform" encode --model "$tiny" --output "$tmp/sticky/root.jsonl" "a cat" 2>"$tmp/err" || code=$?
    [[ $code == 1 && $(cat "$tmp/err") == "uform encode: cannot write $tmp/sticky/root.jsonl: it belongs to user 0 in a sticky directory, where only its owner may replace it; remove it or write another file" ]] ||
      fail "another user's --output in a sticky directory: exit $code: $(cat "$tmp/err")"
    [[ $(cat "$tmp/sticky/root.jsonl") == keep && -z $(compgen -G "$tmp/sticky/.uform-*") ]] ||
      fail "another user's --output in a sticky directory was changed: $(ls -A "$tmp/sticky")"
    # Its owner replaces it as before.
    "$uform" encode --model "$tiny" --output "$tmp/sticky/root.jsonl" "a cat" 2>"$tmp/err" || fail "the owner's --output in a sticky directory exited $?"
    [[ $(wc -l <"$tmp/sticky/root.jsonl") == 1 && $(head -c 1 "$tmp/sticky/root.jsonl") == "[" ]] || fail "the owner's --output in a sticky directory"
  else
    echo "cli test ($case): not root: another user's file in a sticky directory not checked"
  fi
  ;;
*) fail "unknown case" ;;
esac
echo "cli test ($case): ok"
