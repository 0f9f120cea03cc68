#!/usr/bin/env bash
# The CPU benchmarks on a GPU machine's host (the H200 machines are 16- or 32-core Sapphire Rapids
# with AMX), after test/gpu/run_device.sh built build-device/:
#   1. bench_ram: fork-join rounds (PARKED and SPINNING) and the memory-bound sum against OpenMP;
#   2. text: bench_text.py, texts/s against PyTorch f32/bf16 and ONNX Runtime, 28 threads (MiniLM at 16
#      and 128 tokens, UForm3-small at 64, batches 1, 50, 256), then the engine alone: the batch-parallel
#      groups against the tile-split pass (UFORM_FORWARD_GROUP=28), the matmul primitive (AMX) against
#      the GEMM functions (UFORM_GEMM_MATMUL=0), and batch 1 over 1-28 threads; at most 4 minutes;
#   3. image: bench_image_model.py, images/s against the same peers, 28 threads (ViT-S/16 and ViT-B/16,
#      model only at batches 1, 50, 256, from JPEG bytes at 50); at most 4 minutes.
# Arguments pick steps (default: ram text image); `text image` takes at most 8 minutes. Needs the `uform` 3.1.3 wheel (pure Python) carried in .whl when the image lacks it. Logs go to
# $LOGS (default build-device/logs); every line that matters is also in $LOGS/host-summary.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${LOGS:-$BUILD/logs}
mkdir -p "$LOGS"
SUMMARY=$LOGS/host-summary.txt
: >"$SUMMARY"
FAILED=0
THREADS=${UFORM_BENCH_THREADS:-28}
STEPS=" ${*:-ram text image} "
want() { [[ $STEPS == *" $1 "* ]]; }
SECONDS_PER_CASE=${UFORM_BENCH_SECONDS:-0.5}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
if [[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]]; then
    export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! python3 -c 'import uform' 2>/dev/null && compgen -G "$ROOT/.whl/uform-*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/uform-site "$ROOT"/.whl/uform-*.whl &&
        export PYTHONPATH=/tmp/uform-site${PYTHONPATH:+:$PYTHONPATH}
fi
{ lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-400; "$BUILD/uform" info; } >"$LOGS/host.txt" 2>&1
note "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $("$BUILD/uform" info 2>/dev/null | grep -i 'cpu class' | head -1)"

want ram && step bench_ram "$LOGS/host-bench.log" optional timeout 200 "$BUILD/bench/bench_ram" --threads 1-4,8,16,28,32 \
    --rounds 20000 --repetitions 5 --trials 3 --bytes 256M
want ram && grep -E 'ratio|threads' "$LOGS/host-bench.log" | tail -40 | sed 's/^/  /' >>"$SUMMARY"
want text && step bench_text "$LOGS/host-bench.log" optional timeout 200 python3 "$ROOT/bench/bench_text.py" \
    --binary "$BUILD/bench/bench_text" --threads "$THREADS" --seconds "$SECONDS_PER_CASE" \
    --cases minilm:16,minilm:128,uform3:64 --batches 1,50,256
want text && grep -E '^(case|minilm|uform3)' "$LOGS/host-bench.log" | tail -10 | sed 's/^/  /' >>"$SUMMARY"
# The engine alone, MiniLM bf16: grouping, AMX, and batch 1 by threads (one line each in the summary).
engine_text() { # LABEL ENV... -- ARGS...
    local label=$1
    shift
    local environment=()
    while [[ $1 != -- ]]; do environment+=("$1"); shift; done
    shift
    echo "  $label: $(env "${environment[@]}" timeout 20 "$BUILD/bench/bench_text" --shape minilm --dtype bf16 \
        --seconds "$SECONDS_PER_CASE" "$@" 2>&1 | tr '\n' ' ')" >>"$SUMMARY"
}
if want text; then
    start=$(date +%s)
    for tokens in 16 128; do
        engine_text "groups (default), $tokens tokens, batch 50" -- --tokens "$tokens" --batch 50 --threads "$THREADS"
        engine_text "tile-split (UFORM_FORWARD_GROUP=$THREADS), $tokens tokens, batch 50" UFORM_FORWARD_GROUP="$THREADS" -- \
            --tokens "$tokens" --batch 50 --threads "$THREADS"
        engine_text "GEMM functions (UFORM_GEMM_MATMUL=0), $tokens tokens, batch 50" UFORM_GEMM_MATMUL=0 -- \
            --tokens "$tokens" --batch 50 --threads "$THREADS"
    done
    for threads in 1 2 4 8 16 "$THREADS"; do
        engine_text "batch 1, 16 tokens, $threads threads" -- --tokens 16 --batch 1 --threads "$threads"
    done
    note "engine-only text runs in $(($(date +%s) - start)) s"
fi
want image && step bench_image_model "$LOGS/host-bench.log" optional timeout 190 python3 "$ROOT/bench/bench_image_model.py" \
    --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds "$SECONDS_PER_CASE" --min-calls 1 \
    --shapes vit-s16,vit-b16 --modes model --batches 1,50,256
want image && step bench_image_whole "$LOGS/host-bench.log" optional timeout 50 python3 "$ROOT/bench/bench_image_model.py" \
    --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds "$SECONDS_PER_CASE" --min-calls 1 \
    --shapes vit-s16,vit-b16 --modes whole --batches 50
want image && grep -E '^(case|vit)' "$LOGS/host-bench.log" | tail -12 | sed 's/^/  /' >>"$SUMMARY"
note "host benchmarks done"
cat "$SUMMARY"
exit $FAILED
