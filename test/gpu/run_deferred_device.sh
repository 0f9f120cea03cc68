#!/usr/bin/env bash
# The deferred VRAM encodes on the GPU machine (2026-12-06): after `run_minilm_device.sh first` built
# build-device/, the VRAM text and image tests (deferred encodes in flight, device faults), the
# executor's GPU tests (the completion ring's settle hook), compute-sanitizer memcheck with leak
# checks on deferred image encodes, and images/s at batch 50 blocking against two calls in flight,
# with and without the alternating crop buffers. Without build-device/ (a fresh machine) it
# configures and builds it first.
# Logs go to $LOGS (default build-device/deferred-logs); the summary is printed last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${LOGS:-$BUILD/deferred-logs}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
[[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]] &&
    export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ ! -f $BUILD/build.ninja ]]; then
    CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
    unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
    step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" || { cat "$SUMMARY"; exit 1; }
fi
step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" || { cat "$SUMMARY"; exit 1; }
step texts_gpu "$LOGS/texts.log" required timeout 300 "$BUILD/test/test_encode_gpu"
grep -E 'deferred|fault|trap|poison|untouched|passed|FAIL' "$LOGS/texts.log" | sed 's/^/  /' >>"$SUMMARY"
step images_gpu "$LOGS/images.log" required timeout 300 "$BUILD/test/test_encode_images_gpu"
grep -E 'deferred|fault|trap|poison|untouched|passed|FAIL' "$LOGS/images.log" | sed 's/^/  /' >>"$SUMMARY"
step executor_gpu "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure --timeout 300 \
    -R '^(test_gpu|test_vram|test_vram_calls|test_vram_tower|test_mesh|test_encode_images_gpu_split)$'
grep -E 'tests passed|tests failed|Failed' "$LOGS/ctest.log" | sed 's/^/  /' >>"$SUMMARY"
step memcheck_deferred "$LOGS/sanitizer.log" required timeout 120 compute-sanitizer --error-exitcode 99 --leak-check full \
    "$BUILD/bench/bench_image_gpu" --shape vit-s16 --mode whole --batch 34 --seconds 0 --min-calls 3 --in-flight 2
grep -E 'ERROR SUMMARY|LEAK SUMMARY' "$LOGS/sanitizer.log" | sed 's/^/  /' >>"$SUMMARY"
# Images/s at batch 50: one call at a time and two in flight, crops into the scratch behind the stream
# (UFORM_GPU_ALTERNATE=0) and into the model's two alternating buffers (1, the default).
for round in 1 2; do
    for shape in vit-b16 vit-s16; do
        for alternate in 0 1; do
            for flight in 1 2; do
                echo "  round $round alternate $alternate in-flight $flight: $(UFORM_GPU_ALTERNATE=$alternate timeout 30 \
                    "$BUILD/bench/bench_image_gpu" --shape $shape --batch 50 --seconds 1 --in-flight $flight 2>&1 | tail -1)" >>"$SUMMARY"
            done
        done
    done
done
cat "$SUMMARY"
exit $FAILED
