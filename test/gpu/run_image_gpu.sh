#!/usr/bin/env bash
# VRAM image towers on a GPU machine (issue 14): build (or reuse build-device/), test against the CPU
# path and the `uform` package's ImageEncoder on CUDA, compute-sanitizer memcheck on a small run,
# benchmark beside PyTorch eager bf16 and torch.compile. Under 5 minutes on one H200. Logs into $OUT
# (or build-device/image-logs): summary.txt, machine.txt, build.log, tests.log, sanitizer.log,
# bench.log (6 files).
#
#   bash test/gpu/run_image_gpu.sh [--bench-only] [--no-compile] [--batches 1,50,256] [--seconds 1]
#
# Required: the build, test_encode_images_gpu, the PyTorch check and test_encode_gpu (the text towers
# share the machinery); the rest (surfaces, profile, benchmarks, memcheck, torch.compile) runs while
# the budget lasts.
#
# Needs the carried Debian packages (build-gpu/device-deps, see run_device.sh) and, for the `uform`
# package's ImageEncoder, a wheel at .dev-wheels/uform-*.whl or .whl/uform-*.whl (installed --no-deps
# into the build tree) unless python3 already imports uform.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEPS=${DEPS:-$ROOT/build-gpu/device-deps}
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${OUT:-$BUILD/image-logs}
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
BENCH_ONLY=0 COMPILE=256 BATCHES=1,50,256 SECONDS_PER=${BENCH_SECONDS:-1}
while [[ $# -gt 0 ]]; do
    case $1 in
    --bench-only) BENCH_ONLY=1 ;;
    --no-compile) COMPILE="" ;;
    --batches) BATCHES=$2; shift ;;
    --seconds) SECONDS_PER=$2; shift ;;
    esac
    shift
done
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
START=$(date +%s)
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
# The uform package for PyTorch's ImageEncoder.
if ! python3 -c 'import uform.torch_encoders' >/dev/null 2>&1; then
    for wheel in "$ROOT"/.dev-wheels/uform-*.whl "$ROOT"/.whl/uform-*.whl; do
        [[ -f $wheel ]] || continue
        python3 -m pip install --quiet --no-deps --no-index --target "$BUILD/py" "$wheel" >/dev/null 2>&1 && break
    done
    export PYTHONPATH="$BUILD/py${PYTHONPATH:+:$PYTHONPATH}"
fi
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
unpack_deps "$DEPS" "$BUILD"
# A build folder configured for another source tree (the coordinator's checkout) cannot be reused.
if [[ -f $BUILD/CMakeCache.txt ]] && ! grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD/CMakeCache.txt"; then
    BUILD=$BUILD-image
    note "build: build-device belongs to another checkout; building into $BUILD"
    mkdir -p "$BUILD"
fi
[[ -f $BUILD/build.ninja ]] && note "build: reusing $BUILD (incremental)"
if ! step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" ||
    ! step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" --target test_encode_images_gpu test_encode_gpu bench_image_gpu bench_text_gpu uform_cli uform; then
    tail -40 "$LOGS/build.log"; cat "$SUMMARY"; exit 1
fi
# Optional steps run only while the budget lasts (BUDGET seconds from the start, 270 by default).
BUDGET=${BUDGET:-270}
time_left() { (( $(date +%s) - START < BUDGET - ${1:-0} )); }
if [[ $BENCH_ONLY == 0 ]]; then
    rm -rf "$BUILD/image-dump"
    step test_encode_images_gpu "$LOGS/tests.log" required timeout 300 "$BUILD/test/test_encode_images_gpu" --dump "$BUILD/image-dump"
    grep -E 'cosine|bad image|limit:|scratch held|without|one GPU|three calls|passed|FAILED|CHECK|SKIPPED' "$LOGS/tests.log" |
        sed 's/^/  /' | tee -a "$SUMMARY"
    step torch_check "$LOGS/tests.log" required timeout 200 python3 "$ROOT/test/encode_images/gpu_torch_check.py" "$BUILD/image-dump"
    grep -E '^torch-cuda|Error|error' "$LOGS/tests.log" | tail -12 | sed 's/^/  /' | tee -a "$SUMMARY"
    # The text towers share the machinery this branch lifted into vram_tower.c: their test too.
    step test_encode_gpu "$LOGS/tests.log" required timeout 240 "$BUILD/test/test_encode_gpu"
    grep -E 'cosine|bad text|limit:|scratch held|three calls|passed|FAILED|CHECK' "$LOGS/tests.log" | tail -16 |
        sed 's/^/  text: /' | tee -a "$SUMMARY"
    # The surfaces: the CLI on one photo, and Python's get_model(device='cuda') against device='cpu'.
    PHOTO=$ROOT/test/image/photos/franz-kafka.jpg
    if [[ -x $BUILD/uform ]]; then
        step cli "$LOGS/tests.log" optional timeout 60 "$BUILD/uform" encode --model "$BUILD/image-dump/vit-s16" --device 0 --image "$PHOTO"
        tail -2 "$LOGS/tests.log" | cut -c1-160 | sed 's/^/  cli: /' | tee -a "$SUMMARY"
    fi
    LIBRARY=$(ls "$BUILD"/libuform.so* "$BUILD"/*/libuform.so* 2>/dev/null | head -1)
    [[ -z $LIBRARY ]] && note "python: skipped (no libuform.so under $BUILD)"
    if [[ -n $LIBRARY ]]; then
        step python "$LOGS/tests.log" optional timeout 120 env UFORM_LIBRARY="$LIBRARY" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" \
            python3 -c "
import sys, numpy as np, uform
photo = '$PHOTO'
rows = {}
for device in ('cpu', 'cuda'):
    processors, models = uform.get_model('$BUILD/image-dump/vit-s16', modalities=['image_encoder'], device=device)
    key = list(models)[0]
    rows[device] = np.asarray(models[key].encode(processors[key](photo)), dtype=np.float32).reshape(-1)
c = float(rows['cpu'] @ rows['cuda'] / np.linalg.norm(rows['cpu']) / np.linalg.norm(rows['cuda']))
print(f'python get_model device=cuda vs cpu: cosine {c:.7f}')
sys.exit(0 if c >= 0.99999 else 1)"
        grep -E '^python|Error' "$LOGS/tests.log" | tail -3 | sed 's/^/  /' | tee -a "$SUMMARY"
    fi
fi
note "elapsed so far: $(($(date +%s) - START)) s"
# Where the time goes at batch 256 (every step synchronised and timed).
for shape in vit-s16 vit-b16; do
    UFORM_GPU_PROFILE=1 timeout 60 "$BUILD/bench/bench_image_gpu" --shape "$shape" --batch 256 --seconds 0.3 --min-calls 2 2>&1 |
        sed "s/^/  profile $shape: /" | tee -a "$SUMMARY"
done
# cuBLASLt's first heuristic (UFORM_GPU_GEMM_TUNE=0) against the fastest of its first 8 (=1, the default), images and texts.
for shape in vit-s16 vit-b16; do
    for batch in 50 256; do
        for tune in 0 1; do
            UFORM_GPU_GEMM_TUNE=$tune timeout 40 "$BUILD/bench/bench_image_gpu" --shape "$shape" --batch "$batch" --seconds 0.5 2>/dev/null |
                sed "s/^/  gemm tune=$tune: /" | tee -a "$SUMMARY"
        done
    done
done
for case in "uform3 64" "minilm 128"; do
    set -- $case
    for tune in 0 1; do
        UFORM_GPU_GEMM_TUNE=$tune timeout 40 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 --seconds 0.5 2>/dev/null |
            sed "s/^/  gemm tune=$tune: /" | tee -a "$SUMMARY"
    done
done
time_left 60 && step bench "$LOGS/bench.log" optional timeout $((BUDGET - $(date +%s) + START)) python3 "$ROOT/bench/bench_image_gpu.py" \
    --binary "$BUILD/bench/bench_image_gpu" --seconds "$SECONDS_PER" --batches "$BATCHES" --modes model
time_left 40 && step bench_whole "$LOGS/bench.log" optional timeout 90 python3 "$ROOT/bench/bench_image_gpu.py" \
    --binary "$BUILD/bench/bench_image_gpu" --seconds "$SECONDS_PER" --batches 50 --modes whole --shapes vit-s16
if [[ $BENCH_ONLY == 0 ]] && time_left 20; then
    step memcheck "$LOGS/sanitizer.log" optional timeout 120 compute-sanitizer --error-exitcode 99 --leak-check full \
        "$BUILD/bench/bench_image_gpu" --shape vit-s16 --mode whole --batch 2 --seconds 0 --min-calls 1
    grep -E 'ERROR SUMMARY|LEAK SUMMARY|images/s' "$LOGS/sanitizer.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
[[ -n $COMPILE ]] && time_left 0 && step bench_compile "$LOGS/bench.log" optional timeout 100 python3 "$ROOT/bench/bench_image_gpu.py" \
    --binary "$BUILD/bench/bench_image_gpu" --seconds "$SECONDS_PER" --batches "$COMPILE" --modes model --shapes vit-s16 \
    --compile-batches "$COMPILE" --compile-timeout 80
grep -vE '^====' "$LOGS/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY"
note "elapsed: $(($(date +%s) - START)) s"
note "$([[ $FAILED == 0 ]] && echo 'all required steps passed' || echo 'SOME REQUIRED STEPS FAILED')"
exit $FAILED
