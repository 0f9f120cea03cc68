#!/usr/bin/env bash
# What a VRAM text tower's features cost at large batches, and where (one short `run` call): builds
# bench_text_gpu into build-device/, then UForm3-small-shaped towers (64 tokens) at batches 50, 256
# and 1,024 without features, with them staged and item by item, at the real model's context (77)
# and at 510 (the random tower's before: 446 zero rows a text); the same with UFORM_GPU_PROFILE=1
# (each step synchronised and timed: the copies to the staging buffer and to the caller's rows); and
# the host's ceilings for those copies on PyTorch (test/gpu/copy_bandwidth.py). Carry
# build-gpu/device-deps. Logs in build-device/session-logs/features-copy.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=$BUILD/session-logs/features-copy
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
export NCCL_NVLS_ENABLE=0
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs), $(nproc) cores"
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
    step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" --target bench_text_gpu ||
    { tail -30 "$LOGS/build.log"; exit 1; }
bench_case() {
    local label=$1
    shift
    echo "== $label" >>"$LOGS/bench.log"
    timeout 90 "$@" >"$LOGS/case.txt" 2>&1
    cat "$LOGS/case.txt" >>"$LOGS/bench.log"
    grep -E '^uform|^profile|features to' "$LOGS/case.txt" | sed "s|^|  $label: |" >>"$SUMMARY"
}
BENCH=$BUILD/bench/bench_text_gpu
for round in 1 2; do
    for batch in 50 256 1024; do
        for context in 77 510; do
            label="round $round uform3 b$batch context $context"
            bench_case "$label" "$BENCH" --shape uform3 --tokens 64 --batch "$batch" --context "$context" --seconds 1
            bench_case "$label features staged" "$BENCH" --shape uform3 --tokens 64 --batch "$batch" \
                --context "$context" --seconds 1 --features
            UFORM_GPU_FEATURES_STAGED=0 bench_case "$label features item by item" "$BENCH" --shape uform3 --tokens 64 \
                --batch "$batch" --context "$context" --seconds 1 --features
        done
    done
done
for context in 77 510; do
    UFORM_GPU_PROFILE=1 bench_case "profiled b1024 context $context features" "$BENCH" --shape uform3 --tokens 64 \
        --batch 1024 --context "$context" --seconds 2 --features
done
step copy_bandwidth "$LOGS/copy.log" optional python3 "$ROOT/test/gpu/copy_bandwidth.py" --threads 14
sed 's/^/  /' "$LOGS/copy.log" | grep GB/s >>"$SUMMARY"
cat "$SUMMARY"
exit "$FAILED"
