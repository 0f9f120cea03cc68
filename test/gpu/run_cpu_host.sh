#!/usr/bin/env bash
# The CPU towers' benchmarks on a GPU machine's host (the H200 hosts: 32-core Sapphire Rapids with
# AMX), in under 4 minutes, every step time-boxed so each finishes and the next one still runs:
#
#   bash test/gpu/run_cpu_host.sh
#
#   0. build-device/: configured and built as run_session_device.sh's prepare_host_run does when it is
#      missing (the carried Debian packages in build-gpu/device-deps unpacked first); when it exists,
#      rebuilt incrementally (it may come from an earlier step's tree), only the benchmarks' targets;
#   1. bench_text.py, 28 threads: UForm3-small at 64 tokens, batches 1 and 50 (engine f32/bf16, PyTorch
#      f32/bf16, ONNX Runtime f32);
#   2. bench_image_model.py, 28 threads, model only, batch 50: ViT-S/16, then ViT-B/16 (one step each);
#   3. the engine alone, bf16, A/B in alternation: weights packed once (default) against packed per
#      call by oneDNN (UFORM_GEMM_PACK_MIB=0), UForm3-small batches 1 and 50, ViT-B/16 batch 50; then
#      UForm3-small bf16 at batch 1 on 1, 14 and 28 threads (how the tile-split pass scales).
#
# Logs go to $OUT (default build-device/cpu-host-logs): summary.txt (every line that matters),
# bench.log (the steps' output), build.log, host.txt. Carry build-gpu/device-deps and .whl (the
# `uform` 3.1.3 wheel) when the image lacks them. UFORM_BENCH_THREADS overrides 28.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${OUT:-$BUILD/cpu-host-logs}
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
THREADS=${UFORM_BENCH_THREADS:-28}
STARTED=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

# 0. The build. unpack_deps unpacks the carried packages into $BUILD/deps when missing and exports the
# loader's and the compiler's paths to them; without them carried, an existing $BUILD/deps serves.
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
if compgen -G "$ROOT/build-gpu/device-deps/*.deb" >/dev/null || [[ ! -d $BUILD/deps/usr ]]; then
    unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
else
    deps=$BUILD/deps/usr
    export LD_LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export CPATH="$deps/include:$deps/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$deps/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
    CONFIGURE+=(-DCMAKE_PREFIX_PATH="$deps")
fi
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    step configure "$LOGS/build.log" required timeout 60 cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" || {
        cat "$SUMMARY"
        exit 1
    }
fi
step compile "$LOGS/build.log" required timeout 120 cmake --build "$BUILD" -j "$(nproc)" --target bench_text \
    bench_image_model uform_cli || {
    tail -20 "$LOGS/build.log"
    cat "$SUMMARY"
    exit 1
}
if ! python3 -c 'import uform' 2>/dev/null && compgen -G "$ROOT/.whl/uform-*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/uform-site "$ROOT"/.whl/uform-*.whl &&
        export PYTHONPATH=/tmp/uform-site${PYTHONPATH:+:$PYTHONPATH}
fi
{
    lscpu | grep -E 'Model name|^CPU\(s\)|NUMA node' | cut -c1-200
    "$BUILD/uform" info
    git -C "$ROOT" log -1 --format='commit %h %s' 2>/dev/null
} >"$LOGS/host.txt" 2>&1
note "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(git -C "$ROOT" log -1 --format=%h 2>/dev/null)"

# 1. Text towers against the peers.
step bench_text "$LOGS/bench.log" optional timeout 85 python3 "$ROOT/bench/bench_text.py" \
    --binary "$BUILD/bench/bench_text" --threads "$THREADS" --seconds 0.4 --cases uform3:64 --batches 1,50
grep -E '^(case|uform3)' "$LOGS/bench.log" | sed 's/^/  /' >>"$SUMMARY"

# 2. Image towers against the peers, model only, batch 50: one step per shape.
for shape in vit-s16 vit-b16; do
    box=45
    [[ $shape == vit-b16 ]] && box=75
    step "bench_image_model $shape" "$LOGS/bench.log" optional timeout $box python3 "$ROOT/bench/bench_image_model.py" \
        --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds 0.4 --min-calls 1 \
        --shapes "$shape" --modes model --batches 50
    grep -E "^vit" "$LOGS/bench.log" | grep -F "$shape" | tail -1 | sed 's/^/  /' >>"$SUMMARY"
done
grep -E '^case' "$LOGS/bench.log" | tail -1 | sed 's/^/  (images) /' >>"$SUMMARY"

# 3. Packed weights against oneDNN's per-call packing, the engine alone, alternating (A B A).
engine() { # LABEL PACK_MIB COMMAND...
    local label=$1 pack=$2 box=12
    shift 2
    [[ $label == vit* ]] && box=20
    echo "  $label, UFORM_GEMM_PACK_MIB=${pack:-default}: $(env ${pack:+UFORM_GEMM_PACK_MIB=$pack} timeout $box "$@" 2>&1 |
        tr '\n' ' ')" >>"$SUMMARY"
}
for pack in "" 0 ""; do
    engine "uform3 bf16 batch 50" "$pack" "$BUILD/bench/bench_text" --shape uform3 --tokens 64 --batch 50 --dtype bf16 \
        --threads "$THREADS" --seconds 0.4
    engine "uform3 bf16 batch 1" "$pack" "$BUILD/bench/bench_text" --shape uform3 --tokens 64 --batch 1 --dtype bf16 \
        --threads "$THREADS" --seconds 0.4
done
for pack in "" 0; do
    engine "vit-b16 bf16 batch 50" "$pack" "$BUILD/bench/bench_image_model" --shape vit-b16 --mode model --batch 50 \
        --dtype bf16 --threads "$THREADS" --seconds 0.4 --min-calls 2
done
for threads in 1 14 "$THREADS"; do
    engine "uform3 bf16 batch 1, $threads threads" "" "$BUILD/bench/bench_text" --shape uform3 --tokens 64 --batch 1 \
        --dtype bf16 --threads "$threads" --seconds 0.3
done
note "cpu host benchmarks done in $(($(date +%s) - STARTED)) s"
cat "$SUMMARY"
exit $FAILED
