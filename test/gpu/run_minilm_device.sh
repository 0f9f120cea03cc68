#!/usr/bin/env bash
# all-MiniLM-L6-v2's real weights on the GPU machine, whose transfers carry 64 MiB: the packed
# weights (test/gpu/carry_minilm.py) travel in two consecutive calls, the machine keeping the first
# part in its build folder while it stays warm.
#
#   bash test/gpu/run_minilm_device.sh first    (carry .minilm-a, build-gpu/device-deps, .whl) builds
#                                               build-device/ (or brings it up to date), keeps .minilm-a's model
#                                               folder and first part in it
#   bash test/gpu/run_minilm_device.sh second   (carry .minilm-b) joins the weights, then runs every
#                                               ctest case that reads them (test_encode_minilm_gpu
#                                               among them) and test/gpu/minilm_cuda_check.py
#   bash test/gpu/run_minilm_device.sh bf16     (carry .minilm-16 from `carry_minilm.py --bf16`,
#                                               build-gpu/device-deps) one call: builds, unpacks the
#                                               bf16-rounded weights, runs minilm_cuda_check.py --stored-bf16
#
# Logs go to $LOGS (default build-device/minilm-logs); the summary is printed last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
PHASE=${1:?usage: run_minilm_device.sh first|second|bf16}
LOGS=${LOGS:-$BUILD/minilm-logs}
MODEL=$BUILD/minilm-model
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >>"$SUMMARY"
FAILED=0
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

case $PHASE in
first)
    CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON -DUFORM_MINILM_DIR="$MODEL")
    unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
    step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
        step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" || { cat "$SUMMARY"; exit 1; }
    rm -rf "$MODEL" && cp -r "$ROOT/.minilm-a/model" "$MODEL" && cp "$ROOT/.minilm-a/weights.xz.part1" "$BUILD/minilm-part1" &&
        note "kept: $MODEL and the first part ($(stat -c %s "$BUILD/minilm-part1") bytes)" || FAILED=1
    ;;
second)
    [[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]] &&
        export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! step join "$LOGS/join.log" required python3 "$ROOT/test/gpu/carry_minilm.py" --join "$BUILD/minilm-part1" \
        "$ROOT/.minilm-b/weights.xz.part2" "$MODEL"; then
        cat "$LOGS/join.log" "$SUMMARY"
        exit 1
    fi
    step minilm_ctest "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure --timeout 300 -V \
        -R '^(test_encode_minilm_gpu|test_encode_minilm|test_model_minilm|test_encode_cli|python_binding|python_binding_fake_gpu)$'
    grep -E 'worst cosine|tests passed|tests failed' "$LOGS/ctest.log" | sed 's/^/  /' >>"$SUMMARY"
    step minilm_cuda_check "$LOGS/cuda_check.log" required env UFORM_LIBRARY="$BUILD/libuform.so" PYTHONPATH="$ROOT/python" \
        timeout 240 python3 "$ROOT/test/gpu/minilm_cuda_check.py" "$MODEL" "$ROOT/test/encode/sentences.txt"
    grep -E 'uform cuda|SKIP' "$LOGS/cuda_check.log" | sed 's/^/  /' >>"$SUMMARY"
    ;;
bf16)
    CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
    unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
    step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
        step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" || { cat "$SUMMARY"; exit 1; }
    rm -rf "$MODEL" && cp -r "$ROOT/.minilm-16/model" "$MODEL" &&
        step join "$LOGS/join.log" required python3 "$ROOT/test/gpu/carry_minilm.py" --join "$ROOT/.minilm-16/weights.xz" - "$MODEL" &&
        step minilm_cuda_check "$LOGS/cuda_check.log" required env UFORM_LIBRARY="$BUILD/libuform.so" PYTHONPATH="$ROOT/python" \
            timeout 240 python3 "$ROOT/test/gpu/minilm_cuda_check.py" "$MODEL" "$ROOT/test/encode/sentences.txt" \
            --stored-bf16 "$ROOT/test/encode/minilm_f32.bin"
    grep -E '^uform|^sentence|SKIP|Error' "$LOGS/cuda_check.log" | sed 's/^/  /' >>"$SUMMARY"
    ;;
*)
    echo "usage: run_minilm_device.sh first|second|bf16" >&2
    exit 2
    ;;
esac
cat "$SUMMARY"
exit $FAILED
