#!/usr/bin/env bash
# VRAM text towers on a GPU machine (issue 14): build, test against the CPU path and PyTorch on CUDA,
# benchmark beside PyTorch eager bf16. Logs into $OUT (or build-text-gpu/logs).
#
#   bash test/gpu/run_text_gpu.sh [--bench-only] [--compile] [--devices N] [--batches 1,50,1024]
#
# Needs the carried Debian packages (build-gpu/device-deps, see run_device.sh) and, for the `uform`
# package's TextEncoder, a wheel at .dev-wheels/uform-*.whl (installed --no-deps into the build tree).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEPS=${DEPS:-$ROOT/build-gpu/device-deps}
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-text-gpu}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
BENCH_ONLY=0 COMPILE="" DEVICES=1 BATCHES=1,50,1024 SANITIZE=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --bench-only) BENCH_ONLY=1 ;;
    --compile) COMPILE=--compile ;;
    --sanitize) SANITIZE=1 ;;
    --devices) DEVICES=$2; shift ;;
    --batches) BATCHES=$2; shift ;;
    esac
    shift
done
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
{
    date -u; nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv
    nvcc --version | tail -1; echo "cores: $(nproc)"
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), "GPUs")'
    ls /usr/local/cuda*/lib64/libcublasLt.so* 2>/dev/null
} >"$LOGS/machine.txt" 2>&1
note "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs), $(nproc) cores"
# cuBLASLt: the toolkit's, else the one PyTorch ships.
if ! ls /usr/local/cuda/lib64/libcublasLt.so.1[23] >/dev/null 2>&1 && ! ldconfig -p | grep -q libcublasLt.so.1; then
    LT=$(python3 -c 'import glob, os, nvidia; print(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "cu*/lib/libcublasLt.so.1*")) + glob.glob(os.path.join(list(nvidia.__path__)[0], "cublas/lib/libcublasLt.so.1*")))[-1])' 2>/dev/null)
    [[ -n $LT ]] && export UFORM_CUBLASLT=$LT
fi
note "cuBLASLt: ${UFORM_CUBLASLT:-from the toolkit or the loader path}"
# The uform package for PyTorch's TextEncoder.
if compgen -G "$ROOT/.dev-wheels/uform-*.whl" >/dev/null; then
    python3 -m pip install --quiet --no-deps --no-index --target "$BUILD/py" "$ROOT"/.dev-wheels/uform-*.whl >/dev/null 2>&1
    export PYTHONPATH="$BUILD/py${PYTHONPATH:+:$PYTHONPATH}"
fi
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
unpack_deps "$DEPS" "$BUILD"
if ! step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" ||
    ! step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)"; then
    tail -40 "$LOGS/build.log"; cat "$SUMMARY"; exit 1
fi
if [[ $BENCH_ONLY == 0 ]]; then
    rm -rf "$BUILD/dump"
    step test_encode_gpu "$LOGS/tests.log" required timeout 400 "$BUILD/test/test_encode_gpu" --dump "$BUILD/dump"
    grep -E 'cosine|bad text|limit:|scratch held|without|one GPU|three calls|passed|FAILED|CHECK|SKIPPED' "$LOGS/tests.log" | sed 's/^/  /' | tee -a "$SUMMARY"
    step torch_check "$LOGS/tests.log" required timeout 300 python3 "$ROOT/test/encode/gpu_torch_check.py" "$BUILD/dump"
    grep -E '^torch-cuda|Error|error' "$LOGS/tests.log" | tail -12 | sed 's/^/  /' | tee -a "$SUMMARY"
    step surfaces "$LOGS/tests.log" required timeout 200 env UFORM_LIBRARY="$(ls "$BUILD"/libuform.so | head -1)" \
        PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$ROOT/test/gpu/text_gpu_surfaces.py" "$BUILD/uform" "$BUILD/dump/minilm"
    grep -E '^(cli|python)' "$LOGS/tests.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
if [[ $SANITIZE == 1 ]]; then
    step memcheck "$LOGS/sanitizer.log" optional timeout 300 compute-sanitizer --error-exitcode 99 --leak-check full \
        "$BUILD/bench/bench_text_gpu" --shape minilm --tokens 64 --batch 8 --seconds 0.2
    step racecheck "$LOGS/sanitizer.log" optional timeout 300 compute-sanitizer --error-exitcode 99 --tool racecheck \
        "$BUILD/bench/bench_text_gpu" --shape uform3 --tokens 64 --batch 4 --seconds 0.1
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$LOGS/sanitizer.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
# Two devices against one at batch 1,024, in this run.
if [[ $DEVICES -ge 2 ]]; then
    for case in "uform3 64" "minilm 128"; do
        set -- $case
        for d in 1 "$DEVICES"; do
            "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 --seconds 2 --devices "$d" 2>&1 |
                sed 's/^/  scaling: /' | tee -a "$SUMMARY"
        done
    done
fi
# Where the time goes at batch 1,024 (every step synchronised and timed).
for case in "uform3 64" "minilm 128"; do
    set -- $case
    UFORM_GPU_PROFILE=1 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 --seconds 0.5 2>&1 |
        sed "s/^/  $1: /" | tee -a "$SUMMARY"
done
step bench "$LOGS/bench.log" optional timeout 150 python3 "$ROOT/bench/bench_text_gpu.py" --binary "$BUILD/bench/bench_text_gpu" \
    --seconds "${BENCH_SECONDS:-1}" --devices 1 --batches "$BATCHES" $COMPILE
grep -vE '^====' "$LOGS/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY"
# Graphs off, for the launch-bound small batches: what capture buys.
for case in "uform3 64 1" "uform3 64 50" "minilm 128 1" "minilm 128 50"; do
    set -- $case
    UFORM_GPU_NO_GRAPHS=1 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch "$3" --seconds 1 2>&1 |
        sed 's/^/  no graphs: /' | tee -a "$SUMMARY"
done
note "$([[ $FAILED == 0 ]] && echo 'all required steps passed' || echo 'SOME REQUIRED STEPS FAILED')"
exit $FAILED
