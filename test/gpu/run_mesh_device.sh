#!/usr/bin/env bash
# Meshes on a machine with two or more NVIDIA GPUs (made for the 2 x H200 machine; any count works).
#
#   bash test/gpu/run_mesh_device.sh
#
# Builds with cmake + ninja into build-device/ (UFORM_WITH_CUDA=ON; an existing build-device, as
# test/gpu/run_device.sh leaves it, is reused and brought up to date), then runs, each logged:
#   1. test_rendezvous (the directory exchange, GPU-free) and test_mesh with the real GPUs: one
#      process over every GPU, one process per GPU (started by the test), a mismatched pair failing
#      on both sides, a peer killed between all-reduces (PEER_LOST within the timeout). A skip
#      there is a failure on this machine.
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
if ! step compile "$LOG" required cmake --build "$BUILD" -j "$(nproc)" --target test_rendezvous test_mesh bench_allreduce; then
    tail -40 "$LOG"
    cat "$SUMMARY"
    exit 1
fi

# 2. Tests. test_mesh exits 77 when it finds no GPU: a failure here.
step test_rendezvous "$LOG" required timeout 60 "$BUILD/test/test_rendezvous"
step test_mesh "$LOG" required timeout 240 "$BUILD/test/test_mesh"
grep -E '^(one process|process [0-9]|[0-9]+ processes|mismatch|peer death|NCCL|SKIPPED|bootstrap of)' "$LOG" |
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
