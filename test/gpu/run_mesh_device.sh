#!/usr/bin/env bash
# Meshes on a machine with two or more NVIDIA GPUs (made for the 2 x H200 machine; any count works).
#
#   bash test/gpu/run_mesh_device.sh
#
# Builds with cmake + ninja into build-device/ (UFORM_WITH_CUDA=ON; an existing build-device, as
# test/gpu/run_device.sh leaves it, is reused and brought up to date), then runs, each logged:
#   1. test_rendezvous and test_rendezvous_hostile (the directory exchange, GPU-free) and test_mesh
#      with the real GPUs: one
#      process over every GPU, one process per GPU (started by the test), a mismatched pair failing
#      on both sides, a peer killed between all-reduces (PEER_LOST within the timeout). A skip
#      there is a failure on this machine.
#      With UFORM_MESH_DEATH_REPEATS=N, the killed-peer pair runs N more times first, each bounded
#      (45 s; on expiry the survivor's threads' stacks are logged when gdb is there, then both are
#      killed); should one fail, the rest and test_mesh (whose own death case would hang to its alarm) is skipped.
#   2. torch.distributed's all_reduce bus bandwidth (bench/bench_allreduce_torch.py, one process
#      per GPU, file store), then bench_allreduce: the mesh against NCCL called directly, in both
#      shapes, with torch's column beside, and the bootstrap times of two processes.
#
# NCCL: the copy PyTorch uses (the nvidia-nccl wheel) when there is one, so the three columns run
# one NCCL, else the system's libnccl.so.2. Two files go to $OUT when set (so it can share $OUT
# with test/gpu/run_device.sh), else to build-device/mesh-logs: mesh.log (the machine, the build,
# every test and benchmark line) and mesh-summary.txt (every step's status and the results),
# which is also printed last. Exits non-zero if a required step failed. Designed for well under
# 6 minutes on 2 GPUs.
# Never touches multicast: NCCL_NVLS_ENABLE=0 and friends stay set for everything it starts, and
# UFORM_ALLOW_MULTICAST is unset.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
DEPS=$ROOT/build-gpu/device-deps
LOGS=${OUT:-$BUILD/mesh-logs}
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/mesh-summary.txt
LOG=$LOGS/mesh.log
TORCH_RESULTS=$BUILD/mesh-torch.txt
: >"$LOG"
: >"$SUMMARY"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
unset UFORM_ALLOW_MULTICAST
FAILED=0
STARTED=$(date +%s)

# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

# 0. The machine, and which NCCL everything uses.
NCCL_WHEEL=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
if [[ -n $NCCL_WHEEL && -f $NCCL_WHEEL ]]; then
    export UFORM_NCCL_LIBRARY=$NCCL_WHEEL
fi
{
    date -u
    nvidia-smi
    nvidia-smi topo -m
    SYSTEM_NCCL=$(ldconfig -p | grep 'libnccl.so.2 ' | head -1)
    echo "NCCL for libuform: ${UFORM_NCCL_LIBRARY:-the system copy: $SYSTEM_NCCL}"
    python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), torch.cuda.device_count(), "GPUs")'
    echo "cores: $(nproc)"
} >>"$LOG" 2>&1
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs), $(nproc) cores; NCCL: ${UFORM_NCCL_LIBRARY:-system libnccl.so.2}"
((GPUS >= 2)) || note "fewer than two GPUs: the multi-process shapes and the benchmark do not run"

# 1. Build: configure once (libnuma from carried Debian packages where the image lacks it), then
#    bring the targets this run needs up to date.
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
    unpack_deps "$DEPS" "$BUILD"
    step configure "$LOG" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" || { cat "$SUMMARY"; exit 1; }
fi
if [[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]]; then
    export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CPATH="$BUILD/deps/usr/include:$BUILD/deps/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
fi
if ! step compile "$LOG" required cmake --build "$BUILD" -j "$(nproc)" --target test_rendezvous test_rendezvous_hostile test_mesh bench_allreduce; then
    tail -40 "$LOG"
    cat "$SUMMARY"
    exit 1
fi

# death_pair N: test_mesh's killed-peer case ("death": process 1 SIGKILLs itself between
# all-reduces, process 0 must get PEER_LOST within its 10 s timeout), bounded by 45 s.
death_pair() {
    local directory
    directory=$(mktemp -d /tmp/uform-death-XXXXXX)
    "$BUILD/test/test_mesh" --child death 0 2 "$directory" "death-$1" 0 &
    local survivor=$!
    "$BUILD/test/test_mesh" --child death 1 2 "$directory" "death-$1" 1 &
    local victim=$!
    local waited=0
    while kill -0 "$survivor" 2>/dev/null && ((waited < 450)); do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 "$survivor" 2>/dev/null; then
        echo "death pair $1: the survivor (pid $survivor) still runs after 45 s"
        command -v gdb >/dev/null && timeout 30 gdb -p "$survivor" -batch -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' | head -120
        kill -9 "$survivor" "$victim" 2>/dev/null
    fi
    wait "$survivor"
    local survived=$?
    wait "$victim"
    local victim_status=$?
    rm -rf "$directory"
    echo "death pair $1: survivor exit $survived, victim exit $victim_status (137: SIGKILL, as it should)"
    [[ $survived == 0 && $victim_status == 137 ]]
}

# 2. Tests. test_mesh exits 77 when it finds no GPU: a failure here.
step test_rendezvous "$LOG" required timeout 60 "$BUILD/test/test_rendezvous"
step test_rendezvous_hostile "$LOG" required timeout 60 "$BUILD/test/test_rendezvous_hostile"
DEATHS_OK=1
for ((repeat = 1; repeat <= ${UFORM_MESH_DEATH_REPEATS:-0} && GPUS >= 2; ++repeat)); do
    step "death_pair_$repeat" "$LOG" required death_pair "$repeat" || { DEATHS_OK=0; break; }
done
grep -E '^(peer death|death pair)' "$LOG" | cut -c1-400 | sed 's/^/  /' | tee -a "$SUMMARY"
if ((DEATHS_OK)); then
    step test_mesh "$LOG" required timeout 240 "$BUILD/test/test_mesh"
else
    note "test_mesh: skipped, a killed-peer pair failed above (its own death case would wait for its alarm)"
fi
sed -n '/^==== test_mesh/,$p' "$LOG" | grep -E '^(one process|process [0-9]|[0-9]+ processes|mismatch|peer death|NCCL|SKIPPED|bootstrap of)' |
    cut -c1-400 | sed 's/^/  /' | tee -a "$SUMMARY"

# 3. Benchmarks: torch first, then ours with its column beside.
if ((GPUS >= 2)); then
    step torch_bench "$LOG" optional timeout 150 python3 "$ROOT/bench/bench_allreduce_torch.py" \
        --output "$TORCH_RESULTS"
    step bench_allreduce "$LOG" required timeout 240 "$BUILD/bench/bench_allreduce" --torch "$TORCH_RESULTS"
    grep -E '^(torch_init|torch_version|allreduce_busbw|bootstrap shape|bench_allreduce:)' "$LOG" |
        sed 's/^/  /' | tee -a "$SUMMARY"
    grep -A9 -E '^one process.*ranks' "$LOG" >>"$SUMMARY"
fi

note "total: $(($(date +%s) - STARTED)) s, $([[ $FAILED == 0 ]] && echo 'all required steps passed' || echo 'SOME REQUIRED STEPS FAILED')"
echo
echo "==== summary ($SUMMARY)"
cat "$SUMMARY"
exit $FAILED
