#!/usr/bin/env bash
# `uform encode`: usage errors exit 2, engine errors exit 1 with the status name. With the tiny BERT
# committed in test/models (always): the progress bar on a terminal standard error (a pseudo-terminal)
# for more than 256 texts, never without a terminal or for 256 texts or fewer, never changing standard
# output and never sharing a line with a row or an error; and row i of a run equal to text i encoded
# alone, for texts of different lengths in a shuffled order, in jsonl, f32 and npy. With
# all-MiniLM-L6-v2: jsonl, f32 and npy outputs of the right shape, texts from arguments and from standard
# input in input order, row i again as text i alone; a failing text named by its index and line, an
# --output file replaced only on success, a FIFO as a model file refused at once, NaN weights refused
# at open, finite weights that overflow the arithmetic named at their text.
# Without all-MiniLM-L6-v2 the rest still runs, and then the test exits 77 (ctest's SKIP_RETURN_CODE)
# naming what did not run, or 1 if anything failed.
#   cli_test.sh UFORM_BINARY MINILM_DIR
#   cli_test.sh --helpers DIR   only writes the helpers below into DIR (test/encode_images/cli_test.sh)
set -u

# The helpers, written into a directory: on_tty.py, rows.py and helpers.sh (bash functions around
# them, which find them in $helpers and count failures with the caller's `fail`).
write_helpers() {
  # on_tty.py CAPTURE STDIN STDOUT COMMAND...: runs COMMAND with standard error on a pseudo-terminal in
  # raw mode (bytes as written, no "\r\n" for "\n"), standard input from STDIN and standard output to
  # STDOUT ("-": the same terminal); what reached the terminal goes to CAPTURE, read until the last
  # writer closed it. Exits with COMMAND's status.
  cat >"$1/on_tty.py" <<'PY'
import os, pty, subprocess, sys, tty
capture, stdin, stdout, command = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
master, slave = pty.openpty()
tty.setraw(slave)
with open(stdin, "rb") as i, open(os.devnull if stdout == "-" else stdout, "wb") as o:
    child = subprocess.Popen(command, stdin=i, stdout=slave if stdout == "-" else o, stderr=slave)
os.close(slave)
data = bytearray()
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:  # EIO: every holder of the terminal closed it
        break
    if not chunk:
        break
    data += chunk
code = child.wait()
with open(capture, "wb") as f:
    f.write(data)
sys.exit(code if code >= 0 else 128 - code)
PY
  # rows.py A FORMAT_A B FORMAT_B DIMS TOLERANCE [distinct]: A and B (jsonl, f32 or npy) hold the same
  # number of rows of DIMS float32 numbers, and every number of A's row i is within TOLERANCE times the
  # L2 norm of B's row i of B's (0: the same floats); with `distinct`, B's rows differ from each other by
  # more than 1e-3 of their norm, so that rows out of order would show. Prints the largest difference.
  cat >"$1/rows.py" <<'PY'
import ast, json, math, struct, sys
def read(path, form, dims):
    data = open(path, "rb").read()
    if form == "jsonl":
        rows = [json.loads(line) for line in data.decode().splitlines()]  # "%.9g": float32 again exactly
        rows = [struct.unpack(f"<{len(row)}f", struct.pack(f"<{len(row)}f", *row)) for row in rows]
    else:
        if form == "npy":
            if data[:8] != b"\x93NUMPY\x01\x00":
                sys.exit(f"{path}: not a version 1.0 npy file")
            n = struct.unpack("<H", data[8:10])[0]
            header, data = ast.literal_eval(data[10:10 + n].decode()), data[10 + n:]
            if header["descr"] != "<f4" or header["fortran_order"] or header["shape"] != (len(data) // 4 // dims, dims):
                sys.exit(f"{path}: npy header {header} for {len(data)} bytes of {dims}-number rows")
        if len(data) % (4 * dims):
            sys.exit(f"{path}: {len(data)} bytes are not whole rows of {dims} float32")
        values = struct.unpack(f"<{len(data) // 4}f", data)
        rows = [values[i:i + dims] for i in range(0, len(values), dims)]
    for i, row in enumerate(rows):
        if len(row) != dims:
            sys.exit(f"{path}: row {i} has {len(row)} numbers, not {dims}")
    return rows
a_path, a_form, b_path, b_form, dims, tolerance = sys.argv[1:7]
distinct = sys.argv[7:] == ["distinct"]
dims, tolerance = int(dims), float(tolerance)
a, b = read(a_path, a_form, dims), read(b_path, b_form, dims)
if len(a) != len(b):
    sys.exit(f"{a_path} has {len(a)} rows, {b_path} {len(b)}")
norm = lambda row: math.sqrt(sum(v * v for v in row))
worst = 0.0
for i, (x, y) in enumerate(zip(a, b)):
    difference = max(abs(p - q) for p, q in zip(x, y)) / norm(y)
    worst = max(worst, difference)
    if difference > tolerance:
        sys.exit(f"row {i} of {a_path} differs from {b_path}'s by {difference:.3g} of its norm (tolerance {tolerance:g})")
for i in range(len(b) if distinct else 0):
    for j in range(i):
        if max(abs(p - q) for p, q in zip(b[i], b[j])) <= 1e-3 * norm(b[i]):
            sys.exit(f"rows {j} and {i} of {b_path} are the same: the order of its rows is not checked")
print(f"{len(a)} rows, largest difference {worst:.3g} of the row's norm")
PY
  # features.py JSONL NPY F32 HIDDEN [ALONE_JSONL [EMBEDDINGS_JSONL]]: one run's --features in the three
  # formats: NPY [items, tokens, HIDDEN] float32, F32 its bytes, JSONL line i item i's first k_i rows
  # (k_i >= 1, none all zero) of the same floats, NPY's rows past k_i zero; ALONE_JSONL (each item
  # alone) the same row counts within 1e-5 of each row's norm; EMBEDDINGS_JSONL (a mean-pooled,
  # normalised model) the normalised mean of item i's k_i rows its embedding within 1e-5.
  cat >"$1/features.py" <<'PY'
import ast, json, math, struct, sys
jsonl, npy, f32, hidden = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
alone = sys.argv[5] if len(sys.argv) > 5 else None
embeddings = sys.argv[6] if len(sys.argv) > 6 else None
data = open(npy, "rb").read()
n = struct.unpack("<H", data[8:10])[0]
header, body = ast.literal_eval(data[10:10 + n].decode()), data[10 + n:]
items, tokens, width = header["shape"]
if header["descr"] != "<f4" or width != hidden or len(body) != items * tokens * hidden * 4:
    sys.exit(f"{npy}: header {header} for {len(body)} bytes of {hidden}-number rows")
if open(f32, "rb").read() != body:
    sys.exit(f"{f32} is not the npy array's bytes")
values = struct.unpack(f"<{len(body) // 4}f", body)
row = lambda i, t: values[(i * tokens + t) * hidden:(i * tokens + t + 1) * hidden]
f32s = lambda r: struct.unpack(f"<{len(r)}f", struct.pack(f"<{len(r)}f", *r))
norm = lambda r: math.sqrt(sum(v * v for v in r))
lines = [json.loads(line) for line in open(jsonl)]
if len(lines) != items:
    sys.exit(f"{jsonl}: {len(lines)} lines for {items} items")
counts = []
for i, rows in enumerate(lines):
    k = len(rows)
    if not 1 <= k <= tokens or any(len(r) != hidden for r in rows):
        sys.exit(f"{jsonl}: item {i} has {k} rows of {[len(r) for r in rows][:3]} numbers")
    for t in range(tokens):
        if t < k and (tuple(f32s(rows[t])) != row(i, t) or not any(row(i, t))):
            sys.exit(f"item {i} row {t}: jsonl {rows[t][:3]}... against npy {row(i, t)[:3]}...")
        if t >= k and any(row(i, t)):
            sys.exit(f"item {i} row {t} past its {k} tokens is not zero")
    counts.append(k)
worst = 0.0
if alone:
    single = [json.loads(line) for line in open(alone)]
    if [len(r) for r in single] != counts:
        sys.exit(f"row counts {counts} in the run, {[len(r) for r in single]} alone")
    for i, rows in enumerate(single):
        for t, r in enumerate(rows):
            worst = max(worst, max(abs(p - q) for p, q in zip(f32s(r), row(i, t))) / norm(r))
    if worst > 1e-5:
        sys.exit(f"an item's features alone differ from the run's by {worst:.3g} of a row's norm")
if embeddings:
    for i, e in enumerate(json.loads(line) for line in open(embeddings)):
        mean = [sum(row(i, t)[j] for t in range(counts[i])) / counts[i] for j in range(hidden)]
        scale = norm(mean)
        difference = max(abs(m / scale - v) for m, v in zip(mean, e))
        if difference > 1e-5:
            sys.exit(f"item {i}: the normalised mean of its features differs from its embedding by {difference:.3g}")
print(f"{items} items of {tokens} x {hidden}, rows per item {min(counts)} to {max(counts)}, alone within {worst:.3g}")
PY
  cat >"$1/helpers.sh" <<'SH'
on_tty() { python3 "$helpers/on_tty.py" "$@"; }
# same_rows A FORMAT_A B FORMAT_B DIMS TOLERANCE WHAT [order|quiet]: rows.py, a failure counted by `fail`;
# `order` checks B's rows distinct and prints the largest difference, `quiet` neither.
same_rows() {
  local said mode=${8:-}
  if ! said=$(python3 "$helpers/rows.py" "$1" "$2" "$3" "$4" "$5" "$6" "${mode/order/distinct}" 2>&1); then fail "$7: $said"
  elif [[ $mode == order ]]; then echo "$7: $said"; fi
}
# same_features JSONL NPY F32 HIDDEN WHAT [ALONE [EMBEDDINGS]]: features.py, a failure counted by `fail`.
same_features() {
  local said what=$5
  if said=$(python3 "$helpers/features.py" "$1" "$2" "$3" "$4" "${@:6}" 2>&1); then echo "$what: $said"
  else fail "$what: $said"; fi
}
SH
}
if [[ ${1:-} == --helpers ]]; then write_helpers "$2"; exit; fi

uform=$1 minilm=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tiny=$here/../models/tiny-bert
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v python3 >/dev/null || { echo "FAIL: python3 (which build.sh installs) is needed for the pseudo-terminal and the rows"; exit 1; }
helpers=$tmp
write_helpers "$helpers" && source "$helpers/helpers.sh"

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

# ---- The progress bar, with the tiny BERT (8 numbers a row): 300 texts of 1 to 12 of its words ----
bar='\[[# ]{40}\] [0-9]+/300 texts' bar301='^\[[# ]{40}\] 256/301 texts$'
awk 'BEGIN { split("a cat dog the on mat in fog sat ran big small red , . ! ? is was and or not hello world unable to be it of at by", w, " ");
  for (i = 0; i < 300; ++i) { s = ""; for (k = 0; k <= i % 12; ++k) s = s (k ? " " : "") w[1 + (i * 7 + k * 13 + int(i / 30)) % 32]; print s } }' >"$tmp/300.txt"
"$uform" encode --model "$tiny" <"$tmp/300.txt" >"$tmp/plain.jsonl" 2>"$tmp/plain.err" || fail "300 texts: $(cat "$tmp/plain.err")"
[[ $(wc -l <"$tmp/plain.jsonl") == 300 ]] || fail "300 texts: $(wc -l <"$tmp/plain.jsonl") rows"
# Without a terminal (standard error to a file): no bar.
if grep -q $'\r' "$tmp/plain.err" || grep -Eq "$bar" "$tmp/plain.err"; then fail "a bar without a terminal: $(head -c 200 "$tmp/plain.err" | od -c | head -5)"; fi
# On a terminal: drawn at 0, after the first batch (256) and at the end (300, the whole bar), each
# drawing from the line's start ("\r"), nothing but drawings, the line ended; standard output the same bytes.
on_tty "$tmp/bar" "$tmp/300.txt" "$tmp/tty.jsonl" "$uform" encode --model "$tiny" || fail "300 texts on a terminal: exit $?: $(tr '\r' '\n' <"$tmp/bar")"
cmp -s "$tmp/tty.jsonl" "$tmp/plain.jsonl" || fail "a terminal on standard error changed standard output (jsonl)"
[[ $(tail -c 1 "$tmp/bar" | od -An -c | tr -d ' ') == '\n' ]] || fail "the bar's line is not ended: $(tail -c 80 "$tmp/bar" | od -c | tail -3)"
printf '\r[%s] 300/300 texts\n' "########################################" >"$tmp/bar.end"
[[ $(tail -c "$(stat -c %s "$tmp/bar.end")" "$tmp/bar") == "$(cat "$tmp/bar.end")" ]] || fail "the bar does not end full at 300/300: $(tail -c 80 "$tmp/bar" | od -c | tail -4)"
tr '\r' '\n' <"$tmp/bar" | grep -v '^$' >"$tmp/bar.lines"
[[ $(cat "$tmp/bar.lines") == "$(printf '[%40s] 0/300 texts\n[%-40s] 256/300 texts\n[%s] 300/300 texts' '' "$(printf '#%.0s' $(seq 34))" "$(printf '#%.0s' $(seq 40))")" ]] ||
  fail "the bar's drawings are not 0, 256 and 300 of 300: $(cat "$tmp/bar.lines")"
[[ $(grep -c $'\r' "$tmp/bar") == 1 && $(tr -cd '\r' <"$tmp/bar" | wc -c) == 3 ]] || fail "the bar is not one line drawn three times: $(od -c "$tmp/bar" | head)"
# npy and f32 under the bar: the same bytes as without it.
on_tty "$tmp/bar.npy.err" "$tmp/300.txt" "$tmp/tty.npy" "$uform" encode --model "$tiny" --format npy || fail "npy on a terminal: exit $?"
"$uform" encode --model "$tiny" --format npy <"$tmp/300.txt" >"$tmp/plain.npy" 2>/dev/null || fail "npy"
cmp -s "$tmp/tty.npy" "$tmp/plain.npy" || fail "a terminal on standard error changed standard output (npy)"
grep -q "300/300 texts" "$tmp/bar.npy.err" || fail "no bar for npy: $(tr '\r' '\n' <"$tmp/bar.npy.err")"
on_tty "$tmp/bar.f32.err" "$tmp/300.txt" "$tmp/tty.f32" "$uform" encode --model "$tiny" --format f32 || fail "f32 on a terminal: exit $?"
same_rows "$tmp/tty.f32" f32 "$tmp/plain.jsonl" jsonl 8 0 "f32 under the bar as jsonl without it" quiet
# 256 texts (one batch) and one text on a terminal: no bar.
head -n 256 "$tmp/300.txt" >"$tmp/256.txt"
on_tty "$tmp/bar256" "$tmp/256.txt" "$tmp/tty256.jsonl" "$uform" encode --model "$tiny" || fail "256 texts on a terminal: exit $?"
if grep -q $'\r' "$tmp/bar256" || grep -q "texts" "$tmp/bar256"; then fail "a bar for 256 texts: $(tr '\r' '\n' <"$tmp/bar256")"; fi
cmp -s "$tmp/tty256.jsonl" <(head -n 256 "$tmp/plain.jsonl") || fail "256 texts: rows differ from the first 256 of 300"
on_tty "$tmp/bar1" /dev/null "$tmp/tty1.jsonl" "$uform" encode --model "$tiny" "hello world" || fail "one text on a terminal: exit $?"
[[ ! -s $tmp/bar1 && $(wc -l <"$tmp/tty1.jsonl") == 1 ]] || fail "one text on a terminal: $(tr '\r' '\n' <"$tmp/bar1")"
# Standard output on the same terminal: every line is a whole row or a whole drawing of the bar (the
# bar ends its line each time), and the rows are those of the run without a terminal.
on_tty "$tmp/both" "$tmp/300.txt" - "$uform" encode --model "$tiny" || fail "300 texts, both on a terminal: exit $?"
tr -d '\r' <"$tmp/both" | grep -Ev "^$bar\$" >"$tmp/both.rows"
cmp -s "$tmp/both.rows" "$tmp/plain.jsonl" || fail "rows and the bar share lines on one terminal: $(grep -En "texts\[|\]\[" "$tmp/both.rows" | head -c 300)"
[[ $(tr -d '\r' <"$tmp/both" | grep -Ec "^$bar\$") == 3 ]] || fail "not three drawings of the bar among the rows"
# A bad text in the second batch: the bar's line is ended before the error, which has a line of its
# own; in the first batch (nothing drawn past 0): the error starts the line after the drawing at 0.
{ cat "$tmp/300.txt"; printf 'bad \xff\n'; } >"$tmp/bad300.txt"
on_tty "$tmp/bad.err" "$tmp/bad300.txt" "$tmp/out" "$uform" encode --model "$tiny"; code=$?
[[ $code == 1 ]] || fail "text 300 on a terminal: exit $code, expected 1"
tr '\r' '\n' <"$tmp/bad.err" | grep -v '^$' >"$tmp/bad.lines"
[[ $(sed -n 3p "$tmp/bad.lines") == "uform encode: text 300 (line 301 of standard input): invalid_argument: "* &&
   $(sed -n 2p "$tmp/bad.lines") =~ $bar301 && $(wc -l <"$tmp/bad.lines") == 3 && $(tail -c 1 "$tmp/bad.err" | od -An -c | tr -d ' ') == '\n' ]] ||
  fail "text 300 on a terminal: the error does not have a line of its own: $(od -c "$tmp/bad.err" | tail -12)"
[[ $(wc -l <"$tmp/out") == 300 ]] || fail "text 300 on a terminal: $(wc -l <"$tmp/out") rows before the error, expected 300"
{ printf 'bad \xff\n'; cat "$tmp/300.txt"; } >"$tmp/bad0.txt"
on_tty "$tmp/bad0.err" "$tmp/bad0.txt" "$tmp/out" "$uform" encode --model "$tiny"; code=$?
[[ $code == 1 ]] || fail "text 0 on a terminal: exit $code, expected 1"
tr '\r' '\n' <"$tmp/bad0.err" | grep -v '^$' >"$tmp/bad0.lines"
[[ $(sed -n 1p "$tmp/bad0.lines") =~ ^\[\ {40}\]\ 0/301\ texts$ &&
   $(sed -n 2p "$tmp/bad0.lines") == "uform encode: text 0 (line 1 of standard input): invalid_argument: "* &&
   $(wc -l <"$tmp/bad0.lines") == 2 && $(grep -c '^$' "$tmp/bad0.err") == 0 ]] || fail "text 0 on a terminal: $(od -c "$tmp/bad0.err" | head -8)"

# ---- Standard input read as it comes, npy through a pipe, --batch ----
# A writer that keeps its pipe open gets the rows of the lines it wrote (a batch takes the lines
# already there and waits only for its first), then the rest once it writes more and closes.
cat >"$tmp/stream.py" <<'PY'
import os, select, subprocess, sys
uform, model, expected = sys.argv[1], sys.argv[2], open(sys.argv[3]).read().splitlines()
child = subprocess.Popen([uform, "encode", "--model", model], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def rows(count, seconds=120):
    got, data = [], b""
    while len(got) < count:
        ready, _, _ = select.select([child.stdout], [], [], seconds)
        if not ready:
            sys.exit(f"no row {len(got)} within {seconds} s while the pipe stays open")
        chunk = os.read(child.stdout.fileno(), 65536)
        if not chunk:
            break
        data += chunk
        got = data.decode().splitlines() if data.endswith(b"\n") else data.decode().splitlines()[:-1]
    return got
lines = open(sys.argv[4]).read().splitlines()
child.stdin.write(("\n".join(lines[:3]) + "\n").encode()); child.stdin.flush()
first = rows(3)
if first != expected[:3]:
    sys.exit(f"the first 3 rows, read while the pipe is open, are not those of a whole run: {first!r:.300}")
child.stdin.write(("\n".join(lines[3:]) + "\n").encode()); child.stdin.close()
rest = child.stdout.read().decode().splitlines()
if child.wait() != 0 or first + rest != expected:
    sys.exit(f"exit {child.returncode}; {len(first) + len(rest)} rows, expected {len(expected)}")
print(f"stream: 3 rows while the pipe was open, then {len(rest)}")
PY
head -n 40 "$tmp/300.txt" >"$tmp/40.txt"
"$uform" encode --model "$tiny" <"$tmp/40.txt" >"$tmp/40.jsonl" || fail "40 texts"
python3 "$tmp/stream.py" "$uform" "$tiny" "$tmp/40.jsonl" "$tmp/40.txt" || fail "texts from a pipe held open"
# From a pipe the total is not known: on a terminal, the count alone from the second batch on, then
# the final count on a line of its own; the rows those of the file.
cat >"$tmp/pipe_tty.py" <<'PY'
import os, pty, subprocess, sys, tty
capture, source, stdout, command = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
master, slave = pty.openpty()
tty.setraw(slave)
with open(stdout, "wb") as o:
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=o, stderr=slave)
os.close(slave)
child.stdin.write(open(source, "rb").read()); child.stdin.close()
data = bytearray()
while True:
    try:
        chunk = os.read(master, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
open(capture, "wb").write(data)
sys.exit(child.wait())
PY
python3 "$tmp/pipe_tty.py" "$tmp/pipe.err" "$tmp/300.txt" "$tmp/pipe.jsonl" "$uform" encode --model "$tiny" || fail "300 texts from a pipe on a terminal: exit $?"
cmp -s "$tmp/pipe.jsonl" "$tmp/plain.jsonl" || fail "300 texts from a pipe: rows differ from the file's"
tr '\r' '\n' <"$tmp/pipe.err" | grep -v '^$' >"$tmp/pipe.lines"
# Drawn after batch 0 (when batch 1 was read: 256) unless batch 1 came in later reads; always ends at 300.
[[ $(tail -n 1 "$tmp/pipe.lines") == "300 texts" && $(tail -c 1 "$tmp/pipe.err" | od -An -c | tr -d ' ') == '\n' ]] &&
  ! grep -q '\[' "$tmp/pipe.lines" || fail "300 texts from a pipe on a terminal: $(od -c "$tmp/pipe.err" | head -5)"
# npy to a pipe (rows spooled until the count is known), appended to a file (no seeking back) and into a
# file (header rewritten in place): the same array.
"$uform" encode --model "$tiny" --format npy <"$tmp/300.txt" | cat >"$tmp/piped.npy" || fail "npy into a pipe"
cmp -s "$tmp/piped.npy" "$tmp/plain.npy" || fail "npy into a pipe differs from npy into a file"
printf 'head' >"$tmp/appended.npy"
"$uform" encode --model "$tiny" --format npy <"$tmp/300.txt" >>"$tmp/appended.npy" || fail "npy appended"
cmp -s "$tmp/appended.npy" <(printf 'head'; cat "$tmp/plain.npy") || fail "npy appended to a file is not 'head' then the array"
{ printf 'head'; "$uform" encode --model "$tiny" --format npy <"$tmp/300.txt"; } >"$tmp/after.npy" || fail "npy after 4 bytes"
cmp -s "$tmp/after.npy" <(printf 'head'; cat "$tmp/plain.npy") || fail "npy written from offset 4 of a file: its header went elsewhere"
"$uform" encode --model "$tiny" --format npy </dev/null >"$tmp/none.npy" || fail "npy of no texts"
# Rows that do not reach a seekable npy --output (a file size limit, SIGXFSZ ignored: EFBIG) fail the
# run saying so, as jsonl and f32 do, and leave no temporary behind.
mkdir "$tmp/fsize"
seq 1 3000 | sed 's/^/text /' >"$tmp/fsize.txt"
for format in npy f32 jsonl; do
  (ulimit -f 16; trap '' XFSZ; exec "$uform" encode --model "$tiny" --batch 1024 --format $format --output "$tmp/fsize/out" <"$tmp/fsize.txt") \
    >/dev/null 2>"$tmp/fsize.err"; code=$?
  [[ $code == 1 ]] && grep -qF "could not write $tmp/fsize/out: File too large" "$tmp/fsize.err" && [[ -z $(ls -A "$tmp/fsize") ]] ||
    fail "$format past a file size limit: exit $code, left $(ls -A "$tmp/fsize"): $(cat "$tmp/fsize.err")"
done
python3 -c "import ast,sys; d=open(sys.argv[1],'rb').read(); assert len(d)==128 and ast.literal_eval(d[10:].decode())['shape']==(0, 8), d" "$tmp/none.npy" ||
  fail "npy of no texts is not a (0, 8) array"
# Stopped at text 300 (invalid UTF-8), in the second batch: into a file and into a pipe, the npy is a
# whole array of the 300 rows before it (the first batch's and the second's before text 300), as in
# a run of them alone (jsonl and f32 keep them too).
mkfifo "$tmp/out.fifo"
for into in file pipe fifo; do # fifo: an --output that is no regular file, written in place
  code=0
  if [[ $into == file ]]; then "$uform" encode --model "$tiny" --format npy <"$tmp/bad300.txt" >"$tmp/bad.npy" 2>"$tmp/err" || code=$?
  elif [[ $into == pipe ]]; then
    "$uform" encode --model "$tiny" --format npy <"$tmp/bad300.txt" 2>"$tmp/err" | cat >"$tmp/bad.npy"; code=${PIPESTATUS[0]}
  else
    cat "$tmp/out.fifo" >"$tmp/bad.npy" &
    "$uform" encode --model "$tiny" --format npy --output "$tmp/out.fifo" <"$tmp/bad300.txt" 2>"$tmp/err" || code=$?
    wait $!
  fi
  [[ $code == 1 ]] || fail "npy stopped at text 300, into a $into: exit $code, expected 1"
  cmp -s "$tmp/bad.npy" "$tmp/plain.npy" || fail "npy stopped at text 300, into a $into: not the (300, 8) array of the rows before it"
done
# Into a pipe the rows wait in an unlinked temporary file, not in memory.
mkfifo "$tmp/npy.in"
"$uform" encode --model "$tiny" --format npy <"$tmp/npy.in" >/dev/null 2>&1 &
pid=$!
exec 4>"$tmp/npy.in"
spooled=
for _ in $(seq 100); do
  spooled=$(find "/proc/$pid/fd" -lname '* (deleted)' 2>/dev/null | head -1) && [[ -n $spooled ]] && break
  sleep 0.1
done
exec 4>&-
wait "$pid"
[[ -n $spooled ]] || fail "npy into a pipe: no unlinked temporary file among the process's descriptors"
# A spool that cannot be written (past a 1 KiB file size limit, SIGXFSZ ignored): exit 1 naming the
# temporary file, and nothing on standard output (no header for rows it could not keep).
( trap '' XFSZ; ulimit -f 1; exec "$uform" encode --model "$tiny" --format npy <"$tmp/300.txt" 2>"$tmp/err" ) | cat >"$tmp/xfsz.npy"
code=${PIPESTATUS[0]}
[[ $code == 1 && ! -s $tmp/xfsz.npy &&
   $(cat "$tmp/err") == "uform encode: could not spool the npy rows to a temporary file: File too large" ]] ||
  fail "npy spool past the file size limit: exit $code, $(wc -c <"$tmp/xfsz.npy") bytes out, $(head -c 300 "$tmp/err")"
# Standard input that is no text: a line past 64 MiB (/dev/zero) fails the run after the rows of the
# lines before it; a directory fails at once.
{ printf 'one\ntwo\n'; head -c 70M /dev/zero; } | "$uform" encode --model "$tiny" >"$tmp/zero.jsonl" 2>"$tmp/err"; code=$?
[[ $code == 1 && $(wc -l <"$tmp/zero.jsonl") == 2 ]] && grep -q "^uform encode: line 3 of standard input is longer than 64 MiB$" "$tmp/err" ||
  fail "a 70 MiB line: exit $code, $(wc -l <"$tmp/zero.jsonl") rows: $(head -c 200 "$tmp/err")"
"$uform" encode --model "$tiny" <"$tmp" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] && grep -q "cannot read standard input: Is a directory" "$tmp/err" || fail "a directory as standard input: exit $code: $(cat "$tmp/err")"
# JSON rows formatted on threads of their own (as beside a GPU): the same bytes, also when more
# threads are asked than there are cores (one thread formats then).
for threads in 2 99; do
  UFORM_ENCODE_FORMAT_THREADS=$threads "$uform" encode --model "$tiny" <"$tmp/300.txt" >"$tmp/formatted.jsonl" || fail "format threads $threads"
  cmp -s "$tmp/formatted.jsonl" "$tmp/plain.jsonl" || fail "JSON rows formatted on $threads threads differ from one thread's"
done
# --batch: any size gives the rows of the default's (within rounding); a bad size is a usage error.
for size in 1 7 300; do
  "$uform" encode --model "$tiny" --batch $size <"$tmp/300.txt" >"$tmp/batch$size.jsonl" || fail "--batch $size"
  same_rows "$tmp/batch$size.jsonl" jsonl "$tmp/plain.jsonl" jsonl 8 1e-5 "--batch $size" quiet
done
for size in 0 65537 -3 x 1e3; do
  "$uform" encode --model "$tiny" --batch "$size" a >"$tmp/out" 2>"$tmp/err"; code=$?
  [[ $code == 2 ]] && grep -q -- "--batch takes a count from 1 to 65536, not '$size'" "$tmp/err" || fail "--batch $size: exit $code: $(head -1 "$tmp/err")"
done

# ---- Row i of a run is text i alone: texts of 1 to 23 words (past the tiny BERT's 16 positions),
# in no order of length, from standard input (jsonl, npy) and from arguments (f32) ----
# Batching may change the products' rounding (measured up to 4.1e-7 of the row's norm with
# all-MiniLM-L6-v2 and 1.9e-7 with image towers, on AVX-512 and AVX2 classes; other classes and thread
# counts block the products otherwise), so rows agree within 1e-5 of their norm, still a hundredth of
# the 1e-3 by which any two reference rows differ.
order_check() { # order_check MODEL DIMS WHAT TEXT...
  local model=$1 dims=$2 what=$3
  shift 3
  printf '%s\n' "$@" >"$tmp/order.txt"
  : >"$tmp/alone.jsonl"
  for text in "$@"; do "$uform" encode --model "$model" -- "$text" >>"$tmp/alone.jsonl" || fail "$what: '$text' alone"; done
  "$uform" encode --model "$model" <"$tmp/order.txt" >"$tmp/order.jsonl" || fail "$what: jsonl"
  "$uform" encode --model "$model" --format f32 -- "$@" >"$tmp/order.f32" || fail "$what: f32"
  "$uform" encode --model "$model" --format npy --output "$tmp/order.npy" <"$tmp/order.txt" || fail "$what: npy"
  same_rows "$tmp/order.jsonl" jsonl "$tmp/alone.jsonl" jsonl "$dims" 1e-5 "$what, jsonl: row i against text i alone" order
  same_rows "$tmp/order.f32" f32 "$tmp/alone.jsonl" jsonl "$dims" 1e-5 "$what, f32: row i against text i alone" order
  same_rows "$tmp/order.npy" npy "$tmp/alone.jsonl" jsonl "$dims" 1e-5 "$what, npy: row i against text i alone" order
  # The formats of one run hold the same floats.
  same_rows "$tmp/order.f32" f32 "$tmp/order.jsonl" jsonl "$dims" 0 "$what, f32 against jsonl" quiet
  same_rows "$tmp/order.npy" npy "$tmp/order.jsonl" jsonl "$dims" 0 "$what, npy against jsonl" quiet
}
order_check "$tiny" 8 "tiny BERT" "the big red dog sat on the mat, and the small cat ran in the fog." "cat" \
  "a small cat ran in the fog and the big dog was not able to be on it at all by the mat or the red dog sat" \
  "hello world!" "unable to be" "dogs and cats?" "the mat is red" "was it a cat or a dog? it was not."

# ---- --features: every token's last hidden state (the tiny BERT: 12 tokens of 8) in the three
# formats of one run, against each text's alone, in one batch and in batches of 7, formatted on one
# thread and on two; invalid UTF-8 named, no line written ----
features_check() { # features_check MODEL HIDDEN WHAT TEXTS_FILE [EMBEDDINGS_JSONL]
  local model=$1 hidden=$2 what=$3 texts=$4 batch
  : >"$tmp/features-alone.jsonl"
  while IFS= read -r text; do
    "$uform" encode --model "$model" --features -- "$text" >>"$tmp/features-alone.jsonl" || fail "$what --features: '$text' alone"
  done <"$texts"
  for batch in 256 7; do
    "$uform" encode --model "$model" --features --batch $batch <"$texts" >"$tmp/features.jsonl" || fail "$what --features: jsonl"
    "$uform" encode --model "$model" --features --batch $batch --format npy --output "$tmp/features.npy" <"$texts" ||
      fail "$what --features: npy"
    "$uform" encode --model "$model" --features --batch $batch --format f32 <"$texts" >"$tmp/features.f32" ||
      fail "$what --features: f32"
    same_features "$tmp/features.jsonl" "$tmp/features.npy" "$tmp/features.f32" "$hidden" "$what --features --batch $batch" \
      "$tmp/features-alone.jsonl" ${5:+"$5"}
  done
  # JSON formatted on 2 threads: the same bytes as on one (the run of batch 7 above).
  UFORM_ENCODE_FORMAT_THREADS=2 "$uform" encode --model "$model" --features --batch 7 <"$texts" >"$tmp/features2.jsonl" ||
    fail "$what --features on 2 formatting threads"
  cmp -s "$tmp/features.jsonl" "$tmp/features2.jsonl" || fail "$what --features: formatted on 2 threads, other bytes"
}
features_check "$tiny" 8 "tiny BERT" "$tmp/order.txt"
printf 'one\n\xff\xfe\n' | "$uform" encode --model "$tiny" --features >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "--features with invalid UTF-8: exit $code, expected 1"
grep -q "text 1 (line 2 of standard input): invalid_argument" "$tmp/err" || fail "--features, invalid UTF-8: $(cat "$tmp/err")"
[[ $(wc -l <"$tmp/out") == 1 && $(head -c 2 "$tmp/out") == "[[" ]] ||
  fail "--features with invalid UTF-8 in text 1 printed $(wc -l <"$tmp/out") lines, expected text 0's"

if [[ ! -f $minilm/config.json ]]; then
  if ((failures)); then echo "cli_test: $failures checks failed (and no all-MiniLM-L6-v2 at $minilm)"; exit 1; fi
  echo "SKIPPED: no all-MiniLM-L6-v2 at $minilm (build.sh fetches it): the checks with the tiny BERT passed, those with all-MiniLM-L6-v2 did not run"
  exit 77
fi
"$uform" encode --model "$minilm" "probe" >"$tmp/out" 2>"$tmp/err" || fail "encode probe: $(cat "$tmp/err")"
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
# Row i is text i alone: one word to past the model's 256 tokens, mixed scripts, in no order of length.
long=$(for i in $(seq 1 150); do printf 'word%d and ' "$i"; done)
fox="The quick brown fox jumps over the lazy dog while the cat watches from the windowsill, unimpressed."
order_check "$minilm" 384 "all-MiniLM-L6-v2" "$fox $fox" "x" "$long" "日本語の文章と中文句子，还有 emoji 🙂 und ein bisschen Deutsch." \
  "a cat on a mat" "$fox" "ok" "Nel mezzo del cammin di nostra vita mi ritrovai per una selva oscura, ché la diritta via era smarrita."
# all-MiniLM-L6-v2 pools by the mean and normalises: the normalised mean of a text's rows is its row.
"$uform" encode --model "$minilm" <"$tmp/order.txt" >"$tmp/minilm-rows.jsonl" || fail "all-MiniLM-L6-v2 rows"
features_check "$minilm" 384 "all-MiniLM-L6-v2" "$tmp/order.txt" "$tmp/minilm-rows.jsonl"
# --device 0: without a GPU, exit 1 saying why and writing no row; with one, the rows of the CPU run
# (GPU products round otherwise: within 1e-3 of the row's norm, the distance between any two rows).
"$uform" encode --model "$minilm" --device 0 <"$tmp/order.txt" >"$tmp/device.jsonl" 2>"$tmp/err"; code=$?
if grep -q "VRAM residency needs a GPU" "$tmp/err"; then
  [[ $code == 1 && ! -s $tmp/device.jsonl ]] || fail "--device without a GPU: exit $code, $(wc -c <"$tmp/device.jsonl") bytes"
  grep -q "^uform encode: $minilm: unsupported: uform_model_open: VRAM residency needs a GPU" "$tmp/err" ||
    fail "--device without a GPU: $(cat "$tmp/err")"
else
  [[ $code == 0 ]] || fail "--device 0: exit $code: $(cat "$tmp/err")"
  same_rows "$tmp/device.jsonl" jsonl "$tmp/order.jsonl" jsonl 384 1e-3 "--device 0 against the CPU" order
fi
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
# A link whose target does not exist yet: the target is created, the link kept.
ln -s new-target.jsonl "$tmp/dangling.jsonl"
printf 'one\ntwo\n' | "$uform" encode --model "$minilm" --output "$tmp/dangling.jsonl" || fail "--output through a dangling link"
[[ -L $tmp/dangling.jsonl && $(wc -l <"$tmp/new-target.jsonl") == 2 ]] ||
  fail "--output through a dangling link: the link was replaced or its target not written: $(ls -l "$tmp" | grep -E 'dangling|new-target')"
# A bad text after good ones of its batch: their rows first, then the error (exit 1).
"$uform" encode --model "$minilm" one two $'\xc3' four >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 && $(wc -l <"$tmp/out") == 2 ]] || fail "text 2 invalid: exit $code, $(wc -l <"$tmp/out") rows, expected 1 and 2"
cmp -s "$tmp/out" <("$uform" encode --model "$minilm" one two) || fail "text 2 invalid: the rows before it differ from theirs alone"
grep -q "^uform encode: text 2: invalid_argument: text: invalid UTF-8 at byte 0 (0xC3)" "$tmp/err" || fail "text 2 invalid: $(cat "$tmp/err")"
printf 'one\n' | "$uform" encode --model "$minilm" --output /dev/null || fail "--output /dev/null (written in place)"
[[ -c /dev/null ]] || fail "/dev/null is no longer a device"
"$uform" encode --model "$minilm" -- -5 "-x" >"$tmp/dash.jsonl" || fail "texts after --"
[[ $(wc -l <"$tmp/dash.jsonl") == 2 ]] || fail "texts after --: $(wc -l <"$tmp/dash.jsonl") lines"
# Model files that are FIFOs fail at once; weights that hold NaN fail at open, naming the tensor.
mkdir "$tmp/fifo" && cp -r "$minilm"/. "$tmp/fifo"/ && rm "$tmp/fifo/config.json" && mkfifo "$tmp/fifo/config.json"
timeout 20 "$uform" encode --model "$tmp/fifo" "a" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 ]] || fail "a FIFO as config.json: exit $code, expected 1"
grep -q "config.json: not a regular file (a FIFO)" "$tmp/err" || fail "FIFO config: $(cat "$tmp/err")"
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
grep -q "corrupt_file: $tmp/nan/model.safetensors: tensor 'embeddings.word_embeddings.weight' holds NaN at element 0" "$tmp/err" ||
  fail "NaN weights: $(cat "$tmp/err")"
[[ ! -s $tmp/out ]] || fail "NaN weights printed: $(head -c 100 "$tmp/out")"
# Finite weights so large that the arithmetic overflows: the run fails at that text, saying so (the
# message blamed NaN weights, which open refuses), after the rows before it.
mkdir "$tmp/huge" && cp -r "$minilm"/. "$tmp/huge"/
python3 - "$tmp/huge/model.safetensors" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    entry = header["embeddings.word_embeddings.weight"]
    assert entry["dtype"] == "F32"
    row = 4937 * entry["shape"][1] * 4  # the row of "cat"
    f.seek(8 + n + entry["data_offsets"][0] + row)
    f.write(struct.pack("<f", 3e38) * entry["shape"][1])
PY
printf 'dog\ncat\n' | "$uform" encode --model "$tmp/huge" >"$tmp/out" 2>"$tmp/err"; code=$?
[[ $code == 1 && $(wc -l <"$tmp/out") == 1 ]] || fail "overflowing weights: exit $code, $(wc -l <"$tmp/out") rows, expected 1 and 1"
[[ $(cat "$tmp/err") == "uform encode: text 1 (line 2 of standard input): the embedding is not finite (the model's arithmetic overflowed f32: weights or activations too large)" ]] ||
  fail "overflowing weights: $(cat "$tmp/err")"
[[ $failures == 0 ]] && echo "cli_test: all checks passed"
exit $((failures > 0))
