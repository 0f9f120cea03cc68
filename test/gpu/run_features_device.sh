#!/usr/bin/env bash
# The features (uform_embeddings_t.features) of VRAM towers on a GPU machine, in one short `run` call:
# builds only what the checks need into build-device/, then
#   - the UForm3 text towers VRAM-resident (f32, bf16, f16) against PyTorch's rows and the CPU path,
#     their features against the CPU path's (test_encode_models --vram, through ctest);
#   - the image towers likewise, features included (test_encode_images_gpu);
#   - compute-sanitizer memcheck with leak checks over the 384-wide text tower's VRAM run, features
#     included;
#   - what features cost: texts/s and images/s without them, with them copied item by item
#     (UFORM_GPU_FEATURES_STAGED=0) and staged (bench_text_gpu, bench_image_gpu).
# Carry build-gpu/device-deps (Debian packages, test/gpu/run_device.sh --fetch-deps) and
# build-gpu/minilm-tokenizer (all-MiniLM-L6-v2's tokenizer.json alone: the text towers tokenise the
# committed sentences with it; the model's weights exceed what a run may carry). Logs in
# build-device/session-logs/features. With the argument `bench`, only the timings; with `quick`,
# only the tests (a short call: the benchmarks are not built). Where
# build-gpu/baseline holds another tree (`git archive REV | tar -x -C build-gpu/baseline`, carried),
# it is built into build-device-baseline and timed beside this one, case by case.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=$BUILD/session-logs/features
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
export NCCL_NVLS_ENABLE=0
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | xargs), $(nproc) cores"
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON
    -DUFORM_MINILM_DIR="$ROOT/build-gpu/minilm-tokenizer")
unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
TARGETS=(test_encode_models test_encode_images_gpu make_text_tower test_vram_tower)
[[ ${1:-} == quick ]] || TARGETS+=(bench_text_gpu bench_image_gpu)
step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
    step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" --target "${TARGETS[@]}" ||
    { tail -30 "$LOGS/build.log"; exit 1; }
if [[ ${1:-} != bench ]]; then
step ctest "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure \
    -R '^(test_encode_uform3-768-cls_gpu|test_encode_uform3-384-mean_gpu|test_encode_images_gpu|test_vram_tower)$'
grep -E 'features|worst cosine|tests passed|Failed|SKIPPED' "$LOGS/ctest.log" | sed 's/^/  /' >>"$SUMMARY"
fi
if [[ ${1:-} == quick ]]; then cat "$SUMMARY"; exit "$FAILED"; fi
TREES=("$BUILD")
if [[ -f $ROOT/build-gpu/baseline/CMakeLists.txt ]]; then
    BASE=$ROOT/build-device-baseline
    step configure_baseline "$LOGS/build.log" optional cmake -S "$ROOT/build-gpu/baseline" -B "$BASE" "${CONFIGURE[@]}" &&
        step compile_baseline "$LOGS/build.log" optional cmake --build "$BASE" -j "$(nproc)" --target bench_text_gpu \
            bench_image_gpu && TREES=("$BASE" "$BUILD")
fi
# bench TREE-LABEL COMMAND...: one case, its result line labelled.
bench_case() {
    local label=$1
    shift
    echo "== $label (UFORM_GPU_FEATURES_STAGED=${UFORM_GPU_FEATURES_STAGED:-})" >>"$LOGS/bench.log"
    timeout 60 "$@" >"$LOGS/case.txt" 2>&1
    cat "$LOGS/case.txt" >>"$LOGS/bench.log"
    grep -E '^uform' "$LOGS/case.txt" | sed "s|^|  $label: |" >>"$SUMMARY"
}
# Each case without features, with them copied item by item (UFORM_GPU_FEATURES_STAGED=0, the path
# before the staging buffer and the one past its cap), and with them staged.
for shape in "text_gpu uform3 50" "text_gpu uform3 1024" "image_gpu vit-b16 50" "image_gpu vit-b16 256"; do
    read -r program name batch <<<"$shape"
    extra=()
    [[ $program == text_gpu ]] && extra=(--tokens 64)
    for tree in "${TREES[@]}"; do
        bench_case "$(basename "$tree") $name b$batch" "$tree/bench/bench_$program" --shape "$name" "${extra[@]}" \
            --batch "$batch" --seconds 1
        UFORM_GPU_FEATURES_STAGED=0 bench_case "$(basename "$tree") $name b$batch features item by item" \
            "$tree/bench/bench_$program" --shape "$name" "${extra[@]}" --batch "$batch" --seconds 1 --features
        bench_case "$(basename "$tree") $name b$batch features" "$tree/bench/bench_$program" --shape "$name" \
            "${extra[@]}" --batch "$batch" --seconds 1 --features
    done
done
if [[ ${1:-} != bench ]]; then
step memcheck_features "$LOGS/memcheck.log" required timeout 240 compute-sanitizer --tool memcheck --leak-check full \
    --error-exitcode 99 "$BUILD/test/test_encode_models" --vram --model "$BUILD/encode-towers-gpu/uform3-384-mean" \
    --ids "$ROOT/test/encode/uform3_ids.txt" --expected "$ROOT/test/encode/expected/uform3-384-mean.f32" \
    --texts "$ROOT/test/encode/sentences.txt" --limit 30
grep -E 'ERROR SUMMARY|LEAK SUMMARY|bytes leaked' "$LOGS/memcheck.log" | sed 's/^/  /' >>"$SUMMARY"
fi
cat "$SUMMARY"
exit "$FAILED"
