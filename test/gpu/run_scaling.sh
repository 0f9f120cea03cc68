#!/usr/bin/env bash
# Issue 14's scaling goal on a two-GPU machine (nvidia-h200-x2): texts/s and images/s at batch 1,024
# on one H200 and on two (one VRAM executor over both, the batch split by SMs), the engine alone,
# alternating, two rounds (SCALING_ROUNDS). Needs build-device/ with bench_text_gpu and bench_image_gpu (after
# `run_session_device.sh gpu`, or builds them). Logs into $LOGS (default build-device/scaling-logs).
#
#   bash test/gpu/run_scaling.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${LOGS:-$BUILD/scaling-logs}
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
export NCCL_NVLS_ENABLE=0
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
if [[ ! -x $BUILD/bench/bench_image_gpu || ! -x $BUILD/bench/bench_text_gpu ]]; then
    CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
    unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
    step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
        step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" --target bench_image_gpu bench_text_gpu ||
        exit 1
fi
[[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]] &&
    export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs), $(nproc) cores"
for round in $(seq 1 "${SCALING_ROUNDS:-2}"); do
    for devices in 1 2; do
        for shape in vit-s16 vit-b16; do
            note "  round $round: $(timeout 60 "$BUILD/bench/bench_image_gpu" --shape $shape --batch 1024 --devices $devices \
                --seconds 1.5 2>&1 | tail -1)"
        done
        note "  round $round: $(timeout 60 "$BUILD/bench/bench_image_gpu" --shape vit-b16 --mode whole --batch 1024 \
            --devices $devices --seconds 1.5 2>&1 | tail -1)"
        for case in "uform3 64" "minilm 128"; do
            set -- $case
            note "  round $round: $(timeout 60 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 \
                --devices $devices --seconds 1.5 2>&1 | tail -1)"
            note "  round $round: $(timeout 60 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 \
                --devices $devices --seconds 1.5 --texts 2>&1 | tail -1)"
        done
    done
done
exit $FAILED
