#!/usr/bin/env bash
# The GPU half of the suite, on a machine with NVIDIA GPUs (made for the H200 machines; any works).
#
#   bash test/gpu/run_device.sh              builds from scratch into build-device/ (cmake + ninja,
#                                            UFORM_WITH_CUDA=ON), then runs, each logged:
#     1. test_gpu, test_vram, test_vram_calls and the bench_gpu smoke run through ctest (they must
#        pass, not skip);
#     2. compute-sanitizer memcheck (with leak checks) on test_vram, test_vram_calls and test_gpu,
#        and racecheck on both VRAM tests, with UFORM_TEST_UNDER_SANITIZER=1 (skips the deliberate trap and impossible
#        allocation, which the sanitizer would count as errors);
#     3. PyTorch's launch costs (bench/bench_torch_launch.py), then bench_gpu beside them;
#     4. the rest of the ctest suite, for information.
#   bash test/gpu/run_device.sh --fetch-deps  (on a machine with apt, before) downloads the Debian
#                                            packages the engine builds against into
#                                            build-gpu/device-deps, which the device run unpacks;
#                                            carry that folder with the run.
#
# Logs go to $OUT when set (at most 8 files), else build-device/logs; summary.txt ends with every
# step's status and the benchmark lines, and is printed last. Exits non-zero if any required step
# failed. Designed to finish in well under 6 minutes on a 16-core H200 machine. Never touches
# multicast: NCCL_NVLS_ENABLE=0 and friends stay set for everything it starts.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEPS=$ROOT/build-gpu/device-deps

if [[ ${1:-} == --fetch-deps ]]; then
    # shellcheck source=test/gpu/steps.sh
    SUMMARY=/dev/null source "$ROOT/test/gpu/steps.sh"
    mkdir -p "$DEPS" && cd "$DEPS" && apt-get download "${UFORM_DEVICE_DEB_PACKAGES[@]}" && ls -l "$DEPS"
    exit $?
fi

BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
rm -rf "$BUILD"
mkdir -p "$BUILD"
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
JOBS=$(nproc)
FAILED=0
STARTED=$(date +%s)

# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

# 0. The machine.
{
    date -u
    nvidia-smi
    nvidia-smi --query-gpu=index,pci.bus_id,name,memory.total,compute_cap,driver_version --format=csv
    nvcc --version
    cmake --version | head -1
    echo "cores: $JOBS"
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), "GPUs")'
} >"$LOGS/machine.txt" 2>&1
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs), $JOBS cores"

# 1. Build from scratch. libnuma comes from carried Debian packages only where the image lacks it.
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
# UFORM_DEVICE_MINILM: an all-MiniLM-L6-v2 directory carried to the machine (the GPU fixture tests use it).
[[ -n ${UFORM_DEVICE_MINILM:-} ]] && CONFIGURE+=(-DUFORM_MINILM_DIR="$UFORM_DEVICE_MINILM")
unpack_deps "$DEPS" "$BUILD"
if ! step build "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" ||
    ! step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$JOBS"; then
    tail -40 "$LOGS/build.log"
    cat "$SUMMARY"
    exit 1
fi

# 2. The GPU tests; a skip here means the GPU was not found, which is a failure on this machine.
step gpu_tests "$LOGS/tests.log" required \
    ctest --test-dir "$BUILD" -R '^(test_gpu|test_vram|test_vram_calls|bench_gpu_smoke)$' --output-on-failure --timeout 240
if grep -q 'Skipped' "$LOGS/tests.log"; then
    note "gpu_tests: FAILED: a GPU test skipped on a GPU machine"
    FAILED=1
fi
grep -E '^(GPU [0-9]|device [0-9]|deferred 50|[0-9]+ deferred|scratch:|watchdog:|two devices|trap:|after freeing|one free|no stray|executor on GPU)' \
    "$LOGS/tests.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 3. compute-sanitizer on the device tests.
SANITIZER=(compute-sanitizer --error-exitcode 99 --target-processes application-only)
export UFORM_TEST_UNDER_SANITIZER=1
step memcheck_vram "$LOGS/sanitizer.log" required timeout 240 "${SANITIZER[@]}" --tool memcheck --leak-check full \
    "$BUILD/test/test_vram"
step memcheck_vram_calls "$LOGS/sanitizer.log" required timeout 240 "${SANITIZER[@]}" --tool memcheck --leak-check full \
    "$BUILD/test/test_vram_calls"
step memcheck_gpu "$LOGS/sanitizer.log" required timeout 120 "${SANITIZER[@]}" --tool memcheck --leak-check full \
    "$BUILD/test/test_gpu"
step racecheck_vram "$LOGS/sanitizer.log" required timeout 240 "${SANITIZER[@]}" --tool racecheck \
    "$BUILD/test/test_vram"
step racecheck_vram_calls "$LOGS/sanitizer.log" required timeout 240 "${SANITIZER[@]}" --tool racecheck \
    "$BUILD/test/test_vram_calls"
unset UFORM_TEST_UNDER_SANITIZER
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$LOGS/sanitizer.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 4. Benchmarks: PyTorch first, then ours with its numbers beside.
step torch_bench "$LOGS/bench.log" optional timeout 120 python3 "$ROOT/bench/bench_torch_launch.py"
TORCH_US=$(sed -n 's/^torch_round_trip_us: //p' "$LOGS/bench.log" | tail -1)
TORCH_SUBMIT_US=$(sed -n 's/^torch_submit_us: //p' "$LOGS/bench.log" | tail -1)
step bench_gpu "$LOGS/bench.log" required timeout 180 "$BUILD/bench/bench_gpu" \
    ${TORCH_US:+--torch-us "$TORCH_US"} ${TORCH_SUBMIT_US:+--torch-submit-us "$TORCH_SUBMIT_US"}
grep -E '^(bench_gpu:|torch |torch_|deferred_|blocking_)' "$LOGS/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY"

# 5. The rest of the suite, for information (its own owners judge it).
step other_tests "$LOGS/ctest_all.log" optional \
    ctest --test-dir "$BUILD" -E '^(test_gpu|test_vram|test_vram_calls|bench_gpu_smoke)$' --output-on-failure --timeout 120 -j 4
grep -E 'tests passed|tests failed|\*\*\*Failed|Failed  ' "$LOGS/ctest_all.log" | sed 's/^/  /' | tee -a "$SUMMARY"

note "total: $(($(date +%s) - STARTED)) s, $([[ $FAILED == 0 ]] && echo 'all required steps passed' || echo 'SOME REQUIRED STEPS FAILED')"
echo
echo "==== summary ($LOGS/summary.txt)"
cat "$SUMMARY"
exit $FAILED
