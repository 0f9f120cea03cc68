#!/usr/bin/env bash
# `uform encode` on the GPU machine (2026-12-06, second session): the streamed, two-in-flight CLI with
# the exact "%.9g" formatter against the CLI before it (the previous tools/encode.c, carried in
# .old-cli/encode.c and built against the same libuform.so), on all-MiniLM-L6-v2 with bf16-rounded
# weights (.minilm-16 from `carry_minilm.py --bf16`), on the GPU (--device 0) and on the host's CPU
# threads; then texts/s of bench_text_gpu with one call and two calls in flight, and images/s with two
# calls in flight beside PyTorch eager and torch.compile.
#
#   bash test/gpu/run_cli_device.sh [all]   (carry build-gpu/device-deps, .minilm-16, .old-cli, .whl)
#   bash test/gpu/run_cli_device.sh format  the same build and model, then only the JSON rows formatted
#                                           on the formatter's threads (the default with --device)
#                                           against one thread (UFORM_ENCODE_FORMAT_THREADS=0), 400,000
#                                           lines, batches of 256 and 1,024, and f32 rows beside them
#   bash test/gpu/run_cli_device.sh check   the same build and model, then the CLI's tests and the
#                                           defaults' rates: old and new on the GPU (jsonl, 400,000
#                                           lines) and on the host's cores (jsonl, 20,000 lines)
#
# Logs go to $LOGS (default build-device/cli-logs), written as each step ends; the summary last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${LOGS:-$BUILD/cli-logs}
PHASE=${1:-all}
MODEL=$BUILD/minilm-model
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
STARTED=$(date +%s)
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON -DUFORM_MINILM_DIR="$MODEL")
unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
    step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" || { tail -30 "$LOGS/build.log"; cat "$SUMMARY"; exit 1; }
rm -rf "$MODEL" && cp -r "$ROOT/.minilm-16/model" "$MODEL" &&
    step join "$LOGS/join.log" required python3 "$ROOT/test/gpu/carry_minilm.py" --join "$ROOT/.minilm-16/weights.xz" - "$MODEL" ||
    { cat "$SUMMARY"; exit 1; }
step old_cli "$LOGS/build.log" required cc -O2 -std=gnu17 -I"$ROOT/include" "$ROOT/tools/uform.c" "$ROOT/.old-cli/encode.c" \
    -o "$BUILD/uform-old" -L"$BUILD" -luform -Wl,-rpath,"$BUILD"
note "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

# lines COUNT FILE: the fixture's 1,200 sentences repeated to COUNT lines.
lines() {
    python3 -c "
import itertools, sys
lines = open(sys.argv[1]).read().splitlines()
open(sys.argv[3], 'w').write(''.join(line + '\n' for line in itertools.islice(itertools.cycle(lines), int(sys.argv[2]))))
" "$ROOT/test/encode/sentences.txt" "$1" "$2"
}
# rate NAME LINES COMMAND...: runs COMMAND on LINES, its rows into $LOGS/out.NAME; notes texts/s (wall
# time, model open included) and peak RSS.
rate() {
    local name=$1 input=$2 count start end
    shift 2
    count=$(wc -l <"$input")
    start=$(date +%s.%N)
    /usr/bin/time -f '%M' -o "$LOGS/time.txt" "$@" <"$input" >"$LOGS/out.$name" 2>>"$LOGS/cli-rates.log" ||
        echo "  $name: FAILED" >>"$SUMMARY"
    end=$(date +%s.%N)
    echo "  $name: $(python3 -c "print(f'{$count / ($end - $start):,.0f} texts/s, {$end - $start:.2f} s')"), peak RSS $(($(cat "$LOGS/time.txt") / 1024)) MiB" >>"$SUMMARY"
}
# same NAME_A NAME_B: notes whether the two runs wrote the same bytes; DIFFERS fails the run.
same() {
    if cmp -s "$LOGS/out.$1" "$LOGS/out.$2"; then echo "  $2: the same bytes as $1" >>"$SUMMARY"
    else echo "  $2: DIFFERS from $1" >>"$SUMMARY"; FAILED=1; fi
}

if [[ $PHASE == check ]]; then
    lines 400000 "$BUILD/lines400k.txt" && lines 20000 "$BUILD/lines20k.txt"
    step cli_tests "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure --timeout 300 \
        -R '^(test_encode_cli|test_encode_images_cli|test_format_float)$'
    grep -E 'tests passed|tests failed|Failed|SKIPPED' "$LOGS/ctest.log" | sed 's/^/  /' >>"$SUMMARY"
    note "the CLI's defaults (threads, batch, formatter), jsonl, bf16 weights"
    for round in 1 2; do
        rate "gpu-old-r$round" "$BUILD/lines400k.txt" "$BUILD/uform-old" encode --model "$MODEL" --device 0 --dtype bf16
        rate "gpu-new-r$round" "$BUILD/lines400k.txt" "$BUILD/uform" encode --model "$MODEL" --device 0 --dtype bf16
        rate "cpu-old-r$round" "$BUILD/lines20k.txt" "$BUILD/uform-old" encode --model "$MODEL" --dtype bf16
        rate "cpu-new-r$round" "$BUILD/lines20k.txt" "$BUILD/uform" encode --model "$MODEL" --dtype bf16
    done
    same cpu-old-r1 cpu-new-r1 # the GPU runs' batches differ in size (256 and 1,024), so their rounding may
    rm -f "$LOGS"/out.*
    cat "$SUMMARY"
    exit $FAILED
fi
if [[ $PHASE == format ]]; then
    lines 400000 "$BUILD/lines400k.txt"
    step cli_tests "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure --timeout 300 -R '^test_encode_cli$'
    grep -E 'tests passed|tests failed|Failed|SKIPPED' "$LOGS/ctest.log" | sed 's/^/  /' >>"$SUMMARY"
    note "400,000 lines, --device 0, bf16 weights"
    encode=("$BUILD/uform" encode --model "$MODEL" --device 0 --dtype bf16)
    for round in 1 2; do
        for batch in 256 1024; do
            rate "jsonl-threads-b$batch-r$round" "$BUILD/lines400k.txt" "${encode[@]}" --batch $batch
            rate "jsonl-one-b$batch-r$round" "$BUILD/lines400k.txt" env UFORM_ENCODE_FORMAT_THREADS=0 "${encode[@]}" --batch $batch
            rate "f32-b$batch-r$round" "$BUILD/lines400k.txt" "${encode[@]}" --batch $batch --format f32
        done
    done
    for batch in 256 1024; do same "jsonl-one-b$batch-r1" "jsonl-threads-b$batch-r1"; done
    rm -f "$LOGS"/out.*
    cat "$SUMMARY"
    exit $FAILED
fi

# The CLI's tests with the model (its --device 0 rows against the CPU's among them), the formatter's.
step cli_tests "$LOGS/ctest.log" required ctest --test-dir "$BUILD" --output-on-failure --timeout 300 \
    -R '^(test_encode_cli|test_encode_images_cli|test_format_float|bench_text_gpu_smoke|bench_text_gpu_in_flight_smoke)$'
grep -E 'tests passed|tests failed|Failed|SKIPPED' "$LOGS/ctest.log" | sed 's/^/  /' >>"$SUMMARY"

# Texts/s of the CLI: 100,000 lines (the fixture's 1,200 sentences over and over) on the GPU,
# 20,000 on the CPU; old and new alternating, each output compared with the other's.
lines 100000 "$BUILD/lines100k.txt" && lines 20000 "$BUILD/lines20k.txt"
note "cli rates (GPU: 100,000 lines; CPU: 20,000 lines, 14 threads; bf16 weights unless said)"
for round in 1 2; do
    for format in jsonl f32; do
        rate "gpu-old-$format-r$round" "$BUILD/lines100k.txt" "$BUILD/uform-old" encode --model "$MODEL" --device 0 --dtype bf16 --format $format
        rate "gpu-new-$format-r$round" "$BUILD/lines100k.txt" "$BUILD/uform" encode --model "$MODEL" --device 0 --dtype bf16 --format $format
    done
    rate "gpu-new-jsonl-batch1024-r$round" "$BUILD/lines100k.txt" "$BUILD/uform" encode --model "$MODEL" --device 0 --dtype bf16 --batch 1024
    rate "cpu-old-jsonl-r$round" "$BUILD/lines20k.txt" "$BUILD/uform-old" encode --model "$MODEL" --threads 14 --dtype bf16
    rate "cpu-new-jsonl-r$round" "$BUILD/lines20k.txt" "$BUILD/uform" encode --model "$MODEL" --threads 14 --dtype bf16
done
for pair in gpu-%s-jsonl-r1 gpu-%s-f32-r1 cpu-%s-jsonl-r1; do
    # shellcheck disable=SC2059 # the pair is the format
    same "$(printf "$pair" old)" "$(printf "$pair" new)"
done
rm -f "$LOGS"/out.*

# Texts/s of the tower from strings (tokenising on the decoder threads), one call and two in flight.
note "bench_text_gpu --texts, bf16"
for round in 1 2; do
    for case in minilm:128 uform3:64; do
        for batch in 50 256 1024; do
            for flight in 1 2; do
                echo "  r$round $(timeout 60 "$BUILD/bench/bench_text_gpu" --texts --shape ${case%:*} --tokens ${case#*:} \
                    --batch $batch --seconds 1 --in-flight $flight 2>>"$LOGS/bench-text.log" | tail -1)" >>"$SUMMARY"
            done
        done
    done
done

# Images/s with two calls in flight beside PyTorch eager and torch.compile (model mode).
if ! python3 -c 'import uform' 2>/dev/null && compgen -G "$ROOT/.whl/uform-*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/uform-site "$ROOT"/.whl/uform-*.whl &&
        export PYTHONPATH=/tmp/uform-site${PYTHONPATH:+:$PYTHONPATH}
fi
note "images, model mode, two calls in flight, beside eager and torch.compile ($(( $(date +%s) - STARTED )) s in)"
step images_in_flight "$LOGS/images-in-flight.log" optional timeout $((560 - ($(date +%s) - STARTED))) python3 \
    "$ROOT/bench/bench_image_gpu.py" --binary "$BUILD/bench/bench_image_gpu" --seconds 0.6 --shapes vit-b16,vit-s16 \
    --modes model --batches 50,256 --compile-batches 50,256 --in-flight 2
grep -E '^vit|^#' "$LOGS/images-in-flight.log" | sed 's/^/  /' >>"$SUMMARY"
cat "$SUMMARY"
exit $FAILED
