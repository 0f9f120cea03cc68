#!/usr/bin/env bash
# The CPU towers' benchmarks on a GPU machine's host (the H200 hosts: Sapphire Rapids with AMX, 16 or
# 32 cores), every step time-boxed and the whole script within UFORM_CPU_HOST_BUDGET_S (default 400 s,
# build included), so it ends in under 7 minutes on 16 cores; a step the budget no longer covers is
# skipped and says so:
#
#   bash test/gpu/run_cpu_host.sh
#
#   0. build-device/: configured and built as run_session_device.sh's prepare_host_run does when it is
#      missing (the carried Debian packages in build-gpu/device-deps unpacked first); when it exists,
#      rebuilt incrementally (it may come from an earlier step's tree), only the benchmarks' targets;
#   1. A/B, the engine alone, bf16, in alternation: the default (epilogues inside oneDNN's brgemm,
#      Q/K/V and the MLP's hidden activations in planes) against UFORM_GEMM_FUSED=0 (the passes' own
#      epilogues, as before) and UFORM_MLP_PLANES=0 (fused, the MLP whole): ViT-S/16 and ViT-B/16,
#      UForm3-small at 64 tokens and MiniLM at 128, batch 50 (UFORM_CPU_HOST_ARMS replaces the arms);
#      then one UFORM_CPU_PROFILE=1 run of each image tower at batch 50 (where the pass's time goes);
#   2. (only with UFORM_CPU_HOST_AVX2=1) "the AVX2 machine", f32 only: the engine pinned to class intel_haswell (and its oneDNN to AVX2),
#      PyTorch bounded to AVX2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_/DNNL_MAX_CPU_ISA=AVX2,
#      MKL_ENABLE_INSTRUCTIONS=AVX2), ONNX Runtime unrestricted (it has no such switch: the peer keeps
#      AVX-512); bench_text.py for MiniLM at 128 tokens and UForm3-small at 64, batches 1 and 50;
#      bench_image_model.py for ViT-S/16 and ViT-B/16, model only, batch 50;
#   3. bench_text.py: UForm3-small at 64 tokens and MiniLM at 128, batches 1 and 50 (engine f32/bf16, PyTorch f32/bf16,
#      ONNX Runtime f32), all at the machine's widest instructions (AMX);
#   4. bench_image_model.py, model only, batch 50: ViT-S/16, then ViT-B/16 (one step each);
#   5. UForm3-small bf16 at batch 1 on 1, half and all the threads (how the tile-split pass scales);
#   6. the image and text towers at batch 1 on groups of 2, 4 and 8 threads, bf16: whole-row tiles
#      (UFORM_ROW_TILES_THREADS=N) against column tiles (0), call by call (`--ab`), then every system
#      beside the engine on 2 threads (bench_image_model.py, best of 2 rounds).
#
# UFORM_CPU_HOST_STEPS picks the steps (default "1 2 3 4 5 6"; step 2 also needs UFORM_CPU_HOST_AVX2=1).
#
# Threads: UFORM_BENCH_THREADS, else the cores less two, at most 28 (14 on 16 cores, 28 on 32). Logs
# go to $OUT (default build-device/cpu-host-logs): summary.txt (every line that matters), bench.log
# (the steps' output), build.log, host.txt. Carry build-gpu/device-deps and .whl (the `uform` 3.1.3
# wheel) when the image lacks them. UFORM_CPU_HOST_SECONDS (default 0.4) is each measurement's time,
# UFORM_CPU_HOST_BATCH (default 50) the large batch. A try on a 2-core machine:
#   UFORM_BENCH_THREADS=2 UFORM_CPU_HOST_SECONDS=0.1 UFORM_CPU_HOST_BATCH=2 UFORM_DEVICE_BUILD=build \
#       PATH=/work/venv/bin:$PATH bash test/gpu/run_cpu_host.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${OUT:-$BUILD/cpu-host-logs}
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
: >"$LOGS/bench.log"
FAILED=0
CORES=$(nproc)
THREADS=${UFORM_BENCH_THREADS:-$((CORES - 2 > 28 ? 28 : CORES - 2 < 1 ? 1 : CORES - 2))}
TIME=${UFORM_CPU_HOST_SECONDS:-0.4}
BATCH=${UFORM_CPU_HOST_BATCH:-50} # the large batch (smaller for a try on a small machine)
BUDGET=${UFORM_CPU_HOST_BUDGET_S:-400}
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
    bench_image_model bench_text_tiles uform_cli || {
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

# Seconds left of the budget; `boxed` runs a step with its box cut to them, or skips it. `fresh`
# prints the lines bench.log got since the last `boxed` began (a skipped step's summary stays empty).
left() { echo $((STARTED + BUDGET - $(date +%s))); }
MARK=0
fresh() { tail -n +$((MARK + 1)) "$LOGS/bench.log" 2>/dev/null; }
boxed() { # NAME BOX COMMAND...
    local name=$1 box=$2 remaining
    shift 2
    remaining=$(left)
    MARK=$(wc -l <"$LOGS/bench.log" 2>/dev/null || echo 0)
    if ((remaining < 8)); then
        note "$name: skipped (the ${BUDGET} s budget is spent)"
        return 1
    fi
    ((box > remaining)) && box=$remaining
    step "$name" "$LOGS/bench.log" optional timeout "$box" "$@"
}
# engine LABEL ARM COMMAND...: one run of the engine alone under an arm (default, or one variable of
# the environment: UFORM_GEMM_PACK_SPLIT=0, UFORM_GEMM_PACK_MIB=0, UFORM_ATTENTION_MATMUL=1), its
# output line into the summary.
engine() {
    local label=$1 arm=$2 box=15 remaining
    shift 2
    [[ $label == vit* ]] && box=25
    remaining=$(left)
    if ((remaining < 8)); then
        echo "  $label, $arm: skipped (budget spent)" >>"$SUMMARY"
        return
    fi
    ((box > remaining)) && box=$remaining
    local arm_env=()
    [[ $arm != default ]] && arm_env=("$arm")
    echo "  $label, $arm: $(env "${arm_env[@]}" timeout "$box" "$@" 2>&1 | tr '\n' ' ')" >>"$SUMMARY"
}
export TMPDIR=${TMPDIR:-/tmp}
STEPS=" ${UFORM_CPU_HOST_STEPS:-1 2 3 4 5 6} "
want() { [[ $STEPS == *" $1 "* ]]; }

# 1. The fused products' A/B, alternating (A B C A B C).
if want 1; then
read -r -a ARMS <<<"${UFORM_CPU_HOST_ARMS:-default UFORM_GEMM_FUSED=0 UFORM_MLP_PLANES=0}"
note "1. A/B, bf16, $THREADS threads, batch $BATCH: ${ARMS[*]}"
for _ in 1 2; do
    for shape in vit-s16 vit-b16; do
        for arm in "${ARMS[@]}"; do
            engine "$shape bf16 batch $BATCH" "$arm" "$BUILD/bench/bench_image_model" --shape "$shape" --mode model \
                --dtype bf16 --threads "$THREADS" --seconds "$TIME" --batch "$BATCH" --min-calls 2
        done
    done
    for text in uform3:64 minilm:128; do
        for arm in "${ARMS[@]}"; do
            engine "${text%%:*} ${text##*:} tokens bf16 batch $BATCH" "$arm" "$BUILD/bench/bench_text" --shape "${text%%:*}" \
                --tokens "${text##*:}" --batch "$BATCH" --dtype bf16 --threads "$THREADS" --seconds "$TIME" --min-calls 2
        done
    done
done
for shape in vit-s16 vit-b16; do
    boxed "profile $shape" 30 env UFORM_CPU_PROFILE=1 "$BUILD/bench/bench_image_model" --shape "$shape" --mode model \
        --dtype bf16 --threads "$THREADS" --seconds "$TIME" --batch "$BATCH" --min-calls 2
    fresh | grep -E '^(cpu profile|uform)' | sed "s/^/  ($shape) /" >>"$SUMMARY"
done
fi

# 2. The AVX2 machine, f32: the engine as intel_haswell, PyTorch bounded to AVX2, ONNX Runtime not.
if want 2 && [[ ${UFORM_CPU_HOST_AVX2:-0} == 1 ]]; then
note "2. f32 as on an AVX2 machine: engine --cpu-class intel_haswell (oneDNN AVX2), PyTorch AVX2, ONNX Runtime unrestricted"
boxed "avx2 bench_text" 120 python3 "$ROOT/bench/bench_text.py" --binary "$BUILD/bench/bench_text" --threads "$THREADS" \
    --seconds "$TIME" --cases minilm:128,uform3:64 --batches "1,$BATCH" --systems uform-f32,torch-f32,ort-f32 \
    --cpu-class intel_haswell
fresh | grep -E '^(case|minilm|uform3)' | sed 's/^/  (avx2) /' >>"$SUMMARY"
for shape in vit-s16 vit-b16; do
    box=50
    [[ $shape == vit-b16 ]] && box=90
    boxed "avx2 bench_image_model $shape" $box python3 "$ROOT/bench/bench_image_model.py" \
        --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds "$TIME" --min-calls 1 --shapes "$shape" \
        --modes model --batches "$BATCH" --systems uform-f32,torch-f32,ort-f32 --cpu-class intel_haswell
    fresh | grep -E "^(case|vit)" | sed 's/^/  (avx2) /' >>"$SUMMARY"
done
fi

# 3. Text towers against the peers, every system at the machine's widest instructions.
if want 3; then
note "3. bf16 and f32 at the machine's own class, $THREADS threads"
boxed bench_text 150 python3 "$ROOT/bench/bench_text.py" --binary "$BUILD/bench/bench_text" --threads "$THREADS" \
    --seconds "$TIME" --cases uform3:64,minilm:128 --batches "1,$BATCH"
fresh | grep -E '^(case|uform3|minilm)' | sed 's/^/  /' >>"$SUMMARY"
fi

# 4. Image towers against the peers, model only, batch 50: one step per shape.
want 4 && for shape in vit-s16 vit-b16; do
    box=70
    [[ $shape == vit-b16 ]] && box=110
    boxed "bench_image_model $shape" $box python3 "$ROOT/bench/bench_image_model.py" \
        --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds "$TIME" --min-calls 1 \
        --shapes "$shape" --modes model --batches "1,$BATCH"
    fresh | grep -E "^(case|vit)" | sed 's/^/  /' >>"$SUMMARY"
done

# 5. The batch-1 pass by thread count.
want 5 && for threads in $(printf '%s\n' 1 $((THREADS / 2)) "$THREADS" | sort -nu); do
    ((threads >= 1)) || continue
    engine "uform3 bf16 batch 1, $threads threads" default "$BUILD/bench/bench_text" --shape uform3 --tokens 64 \
        --batch 1 --dtype bf16 --threads "$threads" --seconds "$TIME"
done
# 6. Whole-row tiles for small groups at batch 1 (UFORM_ROW_TILES_THREADS), then the peers on 2 threads.
if want 6; then
    note "6. batch 1, bf16: whole-row tiles (UFORM_ROW_TILES_THREADS=N) against column tiles (0), call by call"
    step "6. build the CPU tests" "$LOGS/build.log" optional timeout 120 cmake --build "$BUILD" -j "$(nproc)" --target \
        test_encode test_encode_images test_text_plan
    for groups in "" 2 4; do
        boxed "tests, groups of ${groups:-any} threads" 120 env ${groups:+UFORM_FORWARD_GROUP=$groups} sh -c \
            "'$BUILD/test/test_encode' && '$BUILD/test/test_encode_images' && '$BUILD/test/test_text_plan'"
        fresh | grep -E 'one photo|alone on 2|CHECK|FAIL' | sed 's/^/  /' >>"$SUMMARY"
    done
    for threads in 2 4 8; do
        for shape in vit-s16 vit-b16; do
            boxed "rows $shape $threads threads" 40 "$BUILD/bench/bench_image_model" --shape "$shape" --batch 1 \
                --dtype bf16 --threads "$threads" --seconds 3 --min-calls 4 --ab "UFORM_ROW_TILES_THREADS=0,$threads"
            fresh | grep -E ': [0-9]+ calls|median UFORM' | sed 's/^/  /' >>"$SUMMARY"
        done
        for text in minilm:128 uform3:64; do
            boxed "rows ${text%%:*} ${text##*:} tokens $threads threads" 30 "$BUILD/bench/bench_text" --shape "${text%%:*}" \
                --tokens "${text##*:}" --batch 1 --dtype bf16 --threads "$threads" --seconds 3 --min-calls 4 \
                --ab "UFORM_ROW_TILES_THREADS=0,$threads"
            fresh | grep -E ': [0-9]+ calls|median UFORM' | sed 's/^/  /' >>"$SUMMARY"
        done
    done
    boxed "bench_image_model 2 threads batch 1" 200 python3 "$ROOT/bench/bench_image_model.py" \
        --binary "$BUILD/bench/bench_image_model" --threads 2 --seconds 2 --min-calls 2 --shapes vit-s16,vit-b16 \
        --modes model --batches 1 --rounds 2
    fresh | grep -E "^(case|vit|#)" | sed 's/^/  /' >>"$SUMMARY"
fi
note "cpu host benchmarks done in $(($(date +%s) - STARTED)) s (budget $BUDGET s)"
cat "$SUMMARY"
exit $FAILED
