#!/usr/bin/env bash
# Fork-join rounds before and after the slot join (src/host.c, `host_join_t`), on a many-core host
# (made for the H200 machines' 32-core host; any Linux machine with OpenMP works). In under 4 minutes:
#
#   1. builds this tree's bench_ram and test_forkjoin (cmake + ninja, RelWithDebInfo, no CUDA: the
#      fork-join needs none) into build-forkjoin/, and the "before" tree's bench_ram into
#      build-forkjoin-before/ when one is given (below);
#   2. runs test_forkjoin (2 to 9 threads, every join, values checked) on real cores;
#   3. runs `bench_ram --threads 2-8,16,28,32 --rounds 20000 --repetitions 5 --trials 3 --bytes 0`
#      four times, alternating after / before / after / before, each run with its own OpenMP
#      children (ratios are against the OpenMP of the same run). "after" is this tree's default;
#      "before" is the before tree's bench_ram if built, else this tree's with `--join legacy` (the
#      joins as they were before the slots: SHARED up to 3 threads, LINES above);
#   4. if time is left, each join alone at 2, 3, 4, 8, 16 and 32 threads (SPINNING, engine only).
#
#   bash test/gpu/run_forkjoin.sh                  the run (logs to $OUT, else build-forkjoin/logs)
#   bash test/gpu/run_forkjoin.sh --prepare-before [REV]
#                                                  on a machine with git (before the run): writes the
#                                                  sources of REV (default: main; once this branch is
#                                                  merged, the commit before the merge, e.g. main~1)
#                                                  into .dev-forkjoin-before/ (ignored; about 7 MiB),
#                                                  which the run builds as "before" when it travels
#                                                  along, or point BEFORE_SRC at any such tree.
#
# From a helper's worktree (device.md): rsync the worktree into /work/main/.dev-forkjoin (its
# .dev-forkjoin-before comes along), carry [".dev-forkjoin", "build-gpu/device-deps"], and run
#   cd .dev-forkjoin && bash test/gpu/run_forkjoin.sh
#
# FORKJOIN_THREADS and FORKJOIN_ALONE_THREADS change the thread counts of steps 3 and 4 (a dry run
# on a small machine). Dependencies: as test/gpu/run_device.sh, the Debian packages carried in build-gpu/device-deps
# (DEPS overrides; ../build-gpu/device-deps is tried too, for a copy of the tree inside a checkout).
# Logs: forkjoin-summary.txt (every figure that matters, printed last), forkjoin-bench.log (every
# run in full), forkjoin-build.log, forkjoin-machine.txt.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

if [[ ${1:-} == --prepare-before ]]; then
    rev=${2:-main}
    target=$ROOT/.dev-forkjoin-before
    rm -rf "$target" && mkdir -p "$target" || exit 1
    # The whole tree but its test data (tens of MiB), which configuring and bench_ram do not read.
    git -C "$ROOT" archive "$rev" | tar -x -C "$target" --exclude=fuzz/corpus --exclude=test/tokenizer \
        --exclude=test/image --exclude=test/models || exit 1
    git -C "$ROOT" rev-parse "$rev" >"$target/REVISION"
    echo "run_forkjoin: $rev ($(cut -c1-12 "$target/REVISION")) in $target, $(du -sh "$target" | cut -f1); carry .dev-forkjoin-before"
    exit 0
fi

STARTED=$(date +%s)
BUDGET=${FORKJOIN_BUDGET_SECONDS:-225} # stop starting runs past this, to end inside 4 minutes
BUILD=$ROOT/build-forkjoin
BEFORE_BUILD=$ROOT/build-forkjoin-before
BEFORE_SRC=${BEFORE_SRC:-$ROOT/.dev-forkjoin-before}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/forkjoin-summary.txt
BENCH_LOG=$LOGS/forkjoin-bench.log
BUILD_LOG=$LOGS/forkjoin-build.log
: >"$SUMMARY"
: >"$BENCH_LOG"
FAILED=0
JOBS=$(nproc)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
elapsed() { echo $(($(date +%s) - STARTED)); }
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

{
    date -u
    lscpu
    lscpu -e=CPU,CORE,SOCKET,NODE,CACHE 2>/dev/null | head -40
    uptime
} >"$LOGS/forkjoin-machine.txt" 2>&1
note "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, threads per core $(lscpu | sed -n 's/^Thread(s) per core: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"

DEPS=${DEPS:-$ROOT/build-gpu/device-deps}
[[ -d $DEPS || ! -d $ROOT/../build-gpu/device-deps ]] || DEPS=$ROOT/../build-gpu/device-deps
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=OFF)
unpack_deps "$DEPS" "$BUILD"

# 1. Builds: this tree, and the before tree when there is one (each its own build directory).
# shellcheck disable=SC2317 # called through `step`
build_tree() { # SOURCE BUILD TARGETS...
    local source=$1 build=$2
    shift 2
    cmake -S "$source" -B "$build" "${CONFIGURE[@]}" >>"$BUILD_LOG" 2>&1 &&
        cmake --build "$build" -j "$JOBS" --target "$@" >>"$BUILD_LOG" 2>&1
}
if ! step build_after "$BUILD_LOG" required build_tree "$ROOT" "$BUILD" bench_ram test_forkjoin; then
    tail -30 "$BUILD_LOG"
    cat "$SUMMARY"
    exit 1
fi
BEFORE=()
if [[ -f $BEFORE_SRC/CMakeLists.txt ]]; then
    if step build_before "$BUILD_LOG" optional build_tree "$BEFORE_SRC" "$BEFORE_BUILD" bench_ram; then
        BEFORE=("$BEFORE_BUILD/bench/bench_ram")
        note "before: $BEFORE_SRC ($(cut -c1-12 "$BEFORE_SRC/REVISION" 2>/dev/null)), its own bench_ram"
    fi
fi
if ((${#BEFORE[@]} == 0)); then
    BEFORE=("$BUILD/bench/bench_ram" --join legacy)
    note "before: this tree's bench_ram --join legacy (no before tree at $BEFORE_SRC)"
fi
AFTER=("$BUILD/bench/bench_ram" --join default)

# 2. Correctness on real cores.
step test_forkjoin "$BENCH_LOG" required timeout 120 "$BUILD/test/test_forkjoin"

# 3. Before and after, alternating; each run's fork-join lines go to the summary.
# The counts the issue names, those the machine has (a 16-core host stops at 16).
fit() { local list="" count; for count in "$@"; do ((count <= JOBS)) && list+=${list:+,}$count; done; echo "$list"; }
COMMON=(--threads "${FORKJOIN_THREADS:-$(fit 2 3 4 5 6 7 8 16 28 32)}" --rounds 20000 --repetitions 5 --trials 3 --bytes 0)
bench_run() { # LABEL COMMAND...
    local label=$1
    shift
    if (($(elapsed) > BUDGET - 45)); then
        note "$label: skipped, $(elapsed) s used"
        return 0
    fi
    local start
    start=$(date +%s)
    echo "==== $label: $* ${COMMON[*]}" >>"$BENCH_LOG"
    local output
    output=$(timeout 90 "$@" "${COMMON[@]}" 2>&1)
    local rc=$?
    echo "$output" >>"$BENCH_LOG"
    note "$label: rc $rc in $(($(date +%s) - start)) s"
    echo "$output" | grep -E '^(floor|fork-join threads|worst)' | sed 's/^/  /' >>"$SUMMARY"
    ((rc == 0)) || FAILED=1
}
bench_run "after 1" "${AFTER[@]}"
bench_run "before 1" "${BEFORE[@]}"
bench_run "after 2" "${AFTER[@]}"
bench_run "before 2" "${BEFORE[@]}"

# 4. Each join alone, where time allows: which is cheapest at which count (SPINNING, engine only).
for join in slots lines shared; do
    if (($(elapsed) > BUDGET - 15)); then
        note "join $join alone: skipped, $(elapsed) s used"
        continue
    fi
    output=$(timeout 30 "$BUILD/bench/bench_ram" --join "$join" --only uform --mood spinning --threads "${FORKJOIN_ALONE_THREADS:-$(fit 2 3 4 8 16 32)}" \
        --rounds 20000 --repetitions 5 --trials 3 --bytes 0 2>&1)
    echo "==== join $join alone" >>"$BENCH_LOG"
    echo "$output" >>"$BENCH_LOG"
    note "join $join alone (SPINNING): $(echo "$output" | grep -E '^fork-join threads' | sed -E 's/fork-join threads=([0-9]+): uform ([0-9]+) ns spinning/\1:\2/' | tr '\n' ' ')"
done

note "done in $(elapsed) s"
cat "$SUMMARY"
exit $FAILED
