#!/usr/bin/env bash
# One session's GPU-machine checks in two time-boxed phases, each fitting one `run` call of the
# device tool (10 minutes at most), on the nvidia-h200-x2 kind:
#
#   bash test/gpu/run_session_device.sh gpu    build-device/ from scratch, then test/gpu/run_device.sh's
#                                             GPU tests, compute-sanitizer runs and the rest of the
#                                             suite (test_mesh on both GPUs, test_encode_gpu), then
#                                             compute-sanitizer memcheck (leaks) and racecheck on the
#                                             VRAM text towers (bench_text_gpu); about 6 minutes.
#   bash test/gpu/run_session_device.sh encoders  after `gpu`: the VRAM text and image towers against the
#                                             CPU path and PyTorch on CUDA, compute-sanitizer on them,
#                                             then images/s and texts/s beside PyTorch eager and
#                                             torch.compile, and images/s from JPEG bytes (decoding
#                                             waves against one wave, and beside PyTorch with PIL);
#                                             about 9 minutes.
#   bash test/gpu/run_session_device.sh host   the CPU benchmarks on the host (28 threads): fork-join
#                                             against OpenMP at the counts the goal missed, texts/s and
#                                             images/s against PyTorch and ONNX Runtime; rebuilds
#                                             build-device/ first only when it is missing; about 5 minutes.
#
# Carry build-gpu/device-deps (Debian packages) and .whl (the `uform` 3.1.3 wheel). Logs go to
# $LOGS (default build-device/session-logs), one folder per phase; pack them into one file for $OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export UFORM_DEVICE_BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
BUILD=$UFORM_DEVICE_BUILD
PHASE=${1:?usage: run_session_device.sh gpu|host|encoders|rest}
LOGS=${LOGS:-$BUILD/session-logs}/$PHASE
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1

# racecheck_own_kernels LOG: racecheck over the VRAM text towers; fails on a hazard in any kernel
# that is not cuBLASLt's (nvjet_*), or when the tool itself fails.
racecheck_own_kernels() {
    local log=$1
    timeout 80 compute-sanitizer --tool racecheck "$BUILD/bench/bench_text_gpu" --shape uform3 --tokens 64 \
        --batch 4 --seconds 0.1 >>"$log" 2>&1
    local own
    own=$(grep 'Race reported' "$log" | grep -vc nvjet)
    if grep -q 'Internal Sanitizer Error' "$log" || [[ $own != 0 ]]; then
        note "racecheck_text_vram: FAILED ($own hazards outside cuBLASLt's kernels)"
        FAILED=1
    else
        note "racecheck_text_vram: ok ($(grep -c 'Race reported' "$log") hazard groups, all in cuBLASLt's nvjet kernels)"
    fi
}

# prepare_host_run: builds build-device/ when a cold machine lacks it, puts the carried libraries on
# the loader's path and the carried `uform` wheel on Python's (the host and rest phases).
prepare_host_run() {
    if [[ ! -x $BUILD/bench/bench_text ]]; then
        CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
        unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
        step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
            step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" || exit 1
    fi
    [[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]] &&
        export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if ! python3 -c 'import uform' 2>/dev/null && compgen -G "$ROOT/.whl/uform-*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/uform-site "$ROOT"/.whl/uform-*.whl &&
            export PYTHONPATH=/tmp/uform-site${PYTHONPATH:+:$PYTHONPATH}
    fi
}

# begin_host_phase: what the host and rest phases do first: a fresh summary, steps.sh's `step` and
# `note`, prepare_host_run, and THREADS (UFORM_BENCH_THREADS, default 28).
begin_host_phase() {
    mkdir -p "$LOGS"
    SUMMARY=$LOGS/summary.txt
    : >"$SUMMARY"
    FAILED=0
    # shellcheck source=test/gpu/steps.sh
    source "$ROOT/test/gpu/steps.sh"
    prepare_host_run
    THREADS=${UFORM_BENCH_THREADS:-28}
}

case $PHASE in
gpu)
    mkdir -p "$LOGS.tmp"
    # run_device.sh removes and rebuilds $BUILD, so its logs live outside it until it is done.
    OUT="$LOGS.tmp" timeout 380 bash "$ROOT/test/gpu/run_device.sh"
    rc=$?
    mkdir -p "$LOGS" && mv "$LOGS.tmp"/* "$LOGS"/ && rmdir "$LOGS.tmp"
    SUMMARY=$LOGS/summary.txt
    FAILED=$rc
    # shellcheck source=test/gpu/steps.sh
    source "$ROOT/test/gpu/steps.sh"
    [[ -d $BUILD/deps/usr/lib/x86_64-linux-gnu ]] &&
        export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    step memcheck_text_vram "$LOGS/sanitizer-text.log" required timeout 80 compute-sanitizer --error-exitcode 99 \
        --leak-check full "$BUILD/bench/bench_text_gpu" --shape minilm --tokens 64 --batch 8 --seconds 0.2
    # racecheck reports shared-memory hazards inside cuBLASLt's own Hopper kernels (nvjet_*, which
    # synchronise through asynchronous barriers the tool does not follow), and restricting it to the
    # engine's kernels (--kernel-name kns=uform_) crashed the tool on an H200; so it instruments
    # everything and the step fails on any hazard outside cuBLASLt's kernels.
    racecheck_own_kernels "$LOGS/sanitizer-text.log"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$LOGS/sanitizer-text.log" | sed 's/^/  /' | tee -a "$SUMMARY"
    exit $FAILED
    ;;
host)
    begin_host_phase
    { lscpu | grep -E 'Model name|^CPU\(s\)'; "$BUILD/uform" info; } >"$LOGS/host.txt" 2>&1
    step bench_ram "$LOGS/bench.log" optional timeout 90 "$BUILD/bench/bench_ram" --threads 2-4,16,28,32 \
        --rounds 20000 --repetitions 5 --trials 2 --bytes 0
    grep -E 'ratio|threads' "$LOGS/bench.log" | tail -20 | sed 's/^/  /' >>"$SUMMARY"
    step bench_text "$LOGS/bench.log" optional timeout 150 python3 "$ROOT/bench/bench_text.py" \
        --binary "$BUILD/bench/bench_text" --threads "$THREADS" --seconds 0.4 \
        --cases minilm:128,minilm:16,uform3:64 --batches 50,1
    grep -E '^(\||case|minilm|uform3)' "$LOGS/bench.log" | tail -14 | sed 's/^/  /' >>"$SUMMARY"
    for batch in 256; do
        for dtype in f32 bf16; do
            echo "  engine minilm:128 $dtype batch $batch: $(timeout 20 "$BUILD/bench/bench_text" --shape minilm \
                --tokens 128 --dtype $dtype --batch $batch --threads "$THREADS" --seconds 0.5 2>&1 | tr '\n' ' ')" >>"$SUMMARY"
        done
    done
    step bench_image_model "$LOGS/bench.log" optional timeout 110 python3 "$ROOT/bench/bench_image_model.py" \
        --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds 0.4 --min-calls 1 \
        --shapes vit-s16,vit-b16 --modes model --batches 1,50
    grep -E '^(\||case|vit)' "$LOGS/bench.log" | tail -12 | sed 's/^/  /' >>"$SUMMARY"
    cat "$SUMMARY"
    exit $FAILED
    ;;
encoders)
    # After `gpu` (build-device/ built): the VRAM towers against PyTorch on CUDA, racecheck and memcheck
    # of the image path and the flash attention, then speed beside PyTorch eager and torch.compile.
    begin_host_phase
    PHASE_START=$(date +%s)
    within() { (($(date +%s) - PHASE_START + $1 <= ${ENCODERS_BUDGET:-560})) || { note "skipped: no time left for a step of $1 s"; false; }; }
    DUMP=$BUILD/encoders-dump
    mkdir -p "$DUMP"
    step images_gpu "$LOGS/tests.log" required timeout 120 "$BUILD/test/test_encode_images_gpu" --dump "$DUMP/images"
    step images_torch "$LOGS/tests.log" required timeout 120 python3 "$ROOT/test/encode_images/gpu_torch_check.py" "$DUMP/images"
    step texts_gpu "$LOGS/tests.log" required timeout 120 "$BUILD/test/test_encode_gpu" --dump "$DUMP/texts"
    step texts_torch "$LOGS/tests.log" required timeout 120 python3 "$ROOT/test/encode/gpu_torch_check.py" "$DUMP/texts"
    grep -E 'cosine|passed|FAIL' "$LOGS/tests.log" | sed 's/^/  /' >>"$SUMMARY"
    racecheck_own_kernels "$LOGS/sanitizer.log"
    # 34 photos: two waves of 17, so the waves' overlapped decoding and asynchronous copies are checked.
    step memcheck_images "$LOGS/sanitizer.log" required timeout 100 compute-sanitizer --error-exitcode 99 --leak-check full \
        "$BUILD/bench/bench_image_gpu" --shape vit-s16 --mode whole --batch 34 --seconds 0 --min-calls 1
    grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY' "$LOGS/sanitizer.log" | sed 's/^/  /' >>"$SUMMARY"
    # The whole path from JPEG bytes: decoding waves overlapped with the device (default) against one
    # wave (UFORM_GPU_IMAGE_WAVE=0), alternating, the engine alone; then beside PyTorch with PIL.
    for round in 1 2; do
        for shape in vit-s16 vit-b16; do
            for batch in 256 1024; do
                for wave in "" 0; do
                    echo "  waves round $round wave=${wave:-default}: $(UFORM_GPU_IMAGE_WAVE=$wave timeout 40 \
                        "$BUILD/bench/bench_image_gpu" --shape $shape --mode whole --batch $batch --seconds 1 2>&1 | tail -1)" >>"$SUMMARY"
                done
            done
        done
    done
    # Texts from strings (MiniLM's real tokenizer on the decoder threads): tokenising waves against one
    # wave, and the same towers from ids (tokenising excluded), alternating.
    for round in 1 2; do
        for case in "uform3 64" "minilm 128"; do
            set -- $case
            for wave in "" 0 ids; do
                from=(--texts)
                [[ $wave == ids ]] && from=() && wave=""
                echo "  text waves round $round wave=${wave:-default}: $(UFORM_GPU_TEXT_WAVE=$wave timeout 40 \
                    "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 --seconds 1 "${from[@]}" 2>&1 | tail -1)" >>"$SUMMARY"
            done
        done
    done
    within 170 && step bench_whole "$LOGS/bench.log" optional timeout 170 python3 "$ROOT/bench/bench_image_gpu.py" \
        --binary "$BUILD/bench/bench_image_gpu" --seconds 1 --batches 50,256 --modes whole
    # What the time box leaves (ENCODERS_BUDGET seconds from the phase's start, 560 by default).
    within 120 && step bench_images "$LOGS/bench.log" optional timeout 120 python3 "$ROOT/bench/bench_image_gpu.py" \
        --binary "$BUILD/bench/bench_image_gpu" --seconds 0.7 --batches 1,50,256 --modes model
    within 100 && step bench_texts "$LOGS/bench.log" optional timeout 100 python3 "$ROOT/bench/bench_text_gpu.py" \
        --binary "$BUILD/bench/bench_text_gpu" --seconds 0.7 --batches 1,50,1024
    within 110 && step compile_images "$LOGS/bench.log" optional timeout 110 python3 "$ROOT/bench/bench_image_gpu.py" \
        --binary "$BUILD/bench/bench_image_gpu" --seconds 0.7 --batches 256 --modes model \
        --compile-batches 256 --compile-timeout 90
    grep -vE '^====' "$LOGS/bench.log" | sed 's/^/  /' >>"$SUMMARY"
    cat "$SUMMARY"
    exit $FAILED
    ;;
rest)
    # The cases the host phase's time boxes cut (after `gpu` or `host` left build-device/ there), and the
    # racecheck of the VRAM text towers' own kernels.
    begin_host_phase
    racecheck_own_kernels "$LOGS/sanitizer-text.log"
    grep -E 'RACECHECK SUMMARY|rror' "$LOGS/sanitizer-text.log" | head -5 | sed 's/^/  /' | tee -a "$SUMMARY"
    step bench_text "$LOGS/bench.log" optional timeout 120 python3 "$ROOT/bench/bench_text.py" \
        --binary "$BUILD/bench/bench_text" --threads "$THREADS" --seconds 0.4 --cases uform3:64,minilm:16 --batches 1,50,256
    grep -E '^(case|minilm|uform3)' "$LOGS/bench.log" | sed 's/^/  /' >>"$SUMMARY"
    step bench_image_model "$LOGS/bench.log" optional timeout 100 python3 "$ROOT/bench/bench_image_model.py" \
        --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds 0.4 --min-calls 1 \
        --shapes vit-b16 --modes model --batches 1,50
    grep -E '^(case|vit)' "$LOGS/bench.log" | sed 's/^/  /' >>"$SUMMARY"
    cat "$SUMMARY"
    exit $FAILED
    ;;
*)
    echo "usage: run_session_device.sh gpu|host|encoders|rest" >&2
    exit 2
    ;;
esac
