#!/usr/bin/env bash
# What a VRAM tower's features cost at large batches, and where (one short `run` call), built into
# build-device/. Without an argument: UForm3-small-shaped towers (64 tokens) at batches 50, 256 and
# 1,024 without features, with them staged and item by item, at the real model's context (77) and at
# 510 (the random tower's before: 446 zero rows a text); the same with UFORM_GPU_PROFILE=1 (each step
# synchronised and timed: the copies to the staging buffer and to the caller's rows); and the host's
# ceilings for those copies on PyTorch (test/gpu/copy_bandwidth.py).
# With `pieces`: the staged features of blocking calls copied out piece by piece as they land. First
# the tests (the text towers' and image towers' features against the CPU path through ctest, once as
# they run and once with UFORM_GPU_FEATURES_PIECES=small, so the small fixtures go in many pieces;
# test_vram_tower; compute-sanitizer memcheck with leak checks over the 384-wide text tower with
# small pieces), then texts/s and images/s with features, pieces on and off (UFORM_GPU_FEATURES_PIECES=0)
# alternating, two rounds, and one profiled run (`pieces bench`: the timings alone).
# Carry build-gpu/device-deps, and for `pieces` build-gpu/minilm-tokenizer (all-MiniLM-L6-v2's
# tokenizer.json, which the text towers' tests tokenise with). Logs in build-device/session-logs/features-copy.
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
TARGETS=(bench_text_gpu)
if [[ ${1:-} == pieces ]]; then
    CONFIGURE+=(-DUFORM_MINILM_DIR="$ROOT/build-gpu/minilm-tokenizer")
    TARGETS+=(bench_image_gpu test_encode_models test_encode_images_gpu make_text_tower test_vram_tower)
fi
unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
    step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" ||
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
if [[ ${1:-} == pieces && ${2:-} != bench ]]; then
    GPU_TESTS='^(test_encode_uform3-768-cls_gpu|test_encode_uform3-384-mean_gpu|test_encode_images_gpu|test_vram_tower)$'
    step ctest "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure -R "$GPU_TESTS"
    UFORM_GPU_FEATURES_PIECES=small step ctest_small_pieces "$LOGS/ctest-small.log" required \
        ctest --test-dir "$BUILD" --output-on-failure -R "$GPU_TESTS"
    grep -E 'features|worst cosine|tests passed|Failed|SKIPPED' "$LOGS/ctest.log" "$LOGS/ctest-small.log" |
        sed 's/^/  /' >>"$SUMMARY"
    UFORM_GPU_FEATURES_PIECES=small step memcheck_small_pieces "$LOGS/memcheck.log" required timeout 240 \
        compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 "$BUILD/test/test_encode_models" --vram \
        --model "$BUILD/encode-towers-gpu/uform3-384-mean" --ids "$ROOT/test/encode/uform3_ids.txt" \
        --expected "$ROOT/test/encode/expected/uform3-384-mean.f32" --texts "$ROOT/test/encode/sentences.txt" --limit 30
    grep -E 'ERROR SUMMARY|LEAK SUMMARY|bytes leaked' "$LOGS/memcheck.log" | sed 's/^/  /' >>"$SUMMARY"
fi
if [[ ${1:-} == pieces ]]; then
    IMAGES=$BUILD/bench/bench_image_gpu
    for round in 1 2; do
        for pieces in 1 0; do
            for batch in 256 1024; do
                UFORM_GPU_FEATURES_PIECES=$pieces bench_case "round $round pieces $pieces uform3 b$batch features" \
                    "$BENCH" --shape uform3 --tokens 64 --batch "$batch" --seconds 1 --features
            done
            for batch in 50 256; do
                UFORM_GPU_FEATURES_PIECES=$pieces bench_case "round $round pieces $pieces vit-b16 b$batch features" \
                    "$IMAGES" --shape vit-b16 --batch "$batch" --seconds 1 --features
            done
        done
    done
    bench_case "uform3 b1024 no features" "$BENCH" --shape uform3 --tokens 64 --batch 1024 --seconds 1
    bench_case "vit-b16 b256 no features" "$IMAGES" --shape vit-b16 --batch 256 --seconds 1
    UFORM_GPU_PROFILE=1 bench_case "profiled pieces uform3 b1024 features" "$BENCH" --shape uform3 --tokens 64 \
        --batch 1024 --seconds 2 --features
    cat "$SUMMARY"
    [[ -n ${OUT:-} ]] && cp -r "$LOGS" "$OUT/"
    exit "$FAILED"
fi
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
