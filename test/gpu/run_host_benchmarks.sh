#!/usr/bin/env bash
# The CPU benchmarks on a GPU machine's host (the H200 machines are 16- or 32-core Sapphire Rapids
# with AMX), after test/gpu/run_device.sh built build-device/:
#   1. bench_ram: fork-join rounds (PARKED and SPINNING) and the memory-bound sum against OpenMP;
#   2. bench_text.py: texts/s against PyTorch f32/bf16 and ONNX Runtime, 28 threads;
#   3. bench_image_model.py: images/s against the same peers, 28 threads.
# Arguments pick steps (default: ram text image). Needs the `uform` 3.1.3 wheel (pure Python) carried in .whl when the image lacks it. Logs go to
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
SECONDS_PER_CASE=${UFORM_BENCH_SECONDS:-2}
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
want text && step bench_text "$LOGS/host-bench.log" optional timeout 330 python3 "$ROOT/bench/bench_text.py" \
    --binary "$BUILD/bench/bench_text" --threads "$THREADS" --seconds "$SECONDS_PER_CASE"
want image && step bench_image_model "$LOGS/host-bench.log" optional timeout 330 python3 "$ROOT/bench/bench_image_model.py" \
    --binary "$BUILD/bench/bench_image_model" --threads "$THREADS" --seconds "$SECONDS_PER_CASE" --min-calls 2 \
    --shapes vit-s16,vit-b16 --modes model,whole --batches 1,50
note "host benchmarks done"
cat "$SUMMARY"
exit $FAILED
