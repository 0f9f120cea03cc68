#!/usr/bin/env bash
# The text towers' attention kernels on one GPU (issue 14): build (reusing build-device/ when there),
# the correctness checks against the CPU path and PyTorch on CUDA (flash, the default), then
# the benchmark beside PyTorch eager with both kernels in one run, and the per-step profile at batch
# 1,024 with each. Logs into $OUT (or BUILD/logs): summary.txt, build.log, tests.log, bench.log.
# Under 5 minutes on one H200 (torch.compile only at batch 1,024, and skipped once 200 s have gone).
#
#   bash test/gpu/run_attn_gpu.sh [--no-compile] [--compile-only] [--batches 1,50,1024] [--seconds 1]
#
# --compile-only: the build, then only the benchmark beside torch.compile (and eager) at batches 50
# and 1,024 for both shapes (each compile time-boxed to 120 s).
#
# Needs the carried Debian packages (build-gpu/device-deps, see run_device.sh) and, for the `uform`
# package's TextEncoder, a wheel at .dev-wheels/uform-*.whl (installed --no-deps into the build tree).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEPS=${DEPS:-$ROOT/build-gpu/device-deps}
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${OUT:-$BUILD/logs}
mkdir -p "$BUILD" "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
START=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
COMPILE=1 COMPILE_ONLY=0 BATCHES=1,50,1024 SECONDS_PER=1
while [[ $# -gt 0 ]]; do
    case $1 in
    --no-compile) COMPILE=0 ;;
    --compile-only) COMPILE_ONLY=1 ;;
    --batches) BATCHES=$2; shift ;;
    --seconds) SECONDS_PER=$2; shift ;;
    esac
    shift
done
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"
note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c | xargs), $(nproc) cores, $(nvcc --version | tail -1)"
if [[ -e $ROOT/.git ]]; then
    note "commit: $(git -C "$ROOT" rev-parse --short HEAD)"
else # a copy of a worktree (no .git of its own): name the sources by content
    note "sources: $(cat "$ROOT"/src/kernels/*.cuh "$ROOT"/src/models/text_vram_launch.c | sha256sum | cut -c1-12) (sha256 of src/kernels/*.cuh + text_vram_launch.c)"
fi
if ! ls /usr/local/cuda/lib64/libcublasLt.so.1[23] >/dev/null 2>&1 && ! ldconfig -p | grep -q libcublasLt.so.1; then
    LT=$(python3 -c 'import glob, os, nvidia; print(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "cu*/lib/libcublasLt.so.1*")) + glob.glob(os.path.join(list(nvidia.__path__)[0], "cublas/lib/libcublasLt.so.1*")))[-1])' 2>/dev/null)
    [[ -n $LT ]] && export UFORM_CUBLASLT=$LT
fi
if compgen -G "$ROOT/.dev-wheels/uform-*.whl" >/dev/null; then
    python3 -m pip install --quiet --no-deps --no-index --target "$BUILD/py" "$ROOT"/.dev-wheels/uform-*.whl >/dev/null 2>&1
    export PYTHONPATH="$BUILD/py${PYTHONPATH:+:$PYTHONPATH}"
fi
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
unpack_deps "$DEPS" "$BUILD"
if ! step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" ||
    ! step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" --target test_encode_gpu bench_text_gpu; then
    tail -40 "$LOGS/build.log"; cat "$SUMMARY"; exit 1
fi
grep -E 'ptxas|warning' "$LOGS/build.log" | head -5 | sed 's/^/  /' | tee -a "$SUMMARY"
if [[ $COMPILE_ONLY == 1 ]]; then
    step bench_compile "$LOGS/bench.log" optional timeout $((290 - ($(date +%s) - START))) python3 \
        "$ROOT/bench/bench_text_gpu.py" --binary "$BUILD/bench/bench_text_gpu" --seconds "$SECONDS_PER" --devices 1 \
        --batches 50,1024 --attention flash --compile --compile-timeout 120
    grep -vE '^====' "$LOGS/bench.log" | sed 's/^/  compile: /' | tee -a "$SUMMARY"
    note "total: $(($(date +%s) - START)) s"
    exit $FAILED
fi

# Correctness: every tower against the CPU path, then PyTorch on CUDA, with the flash kernel (the
# default; the WMMA kernel's figures are in bench/RESULTS.md's issue 14 section).
rm -rf "$BUILD/dump-flash"
step test_encode_gpu "$LOGS/tests.log" required timeout 300 "$BUILD/test/test_encode_gpu" --dump "$BUILD/dump-flash"
grep -E 'cosine|not run|passed|FAILED|CHECK|SKIPPED' "$LOGS/tests.log" | sed 's/^/  /' | tee -a "$SUMMARY"
step torch_check "$LOGS/tests.log" required timeout 240 python3 "$ROOT/test/encode/gpu_torch_check.py" "$BUILD/dump-flash"
awk '/^==== torch_check/ {on = 1} on' "$LOGS/tests.log" | grep -E '^torch-cuda|Error|error' | tail -16 | sed 's/^/  flash: /' |
    tee -a "$SUMMARY"

# Where the time goes at batch 1,024, per kernel (every step synchronised and timed).
for kernel in flash wmma; do
    for case in "uform3 64" "minilm 128"; do
        set -- $case
        UFORM_GPU_ATTENTION=$kernel UFORM_GPU_PROFILE=1 timeout 60 "$BUILD/bench/bench_text_gpu" --shape "$1" \
            --tokens "$2" --batch 1024 --seconds 0.5 2>&1 | sed "s/^/  profile $kernel $1: /" | tee -a "$SUMMARY"
    done
done
# Flash kernel variants at batch 1,024: keys per softmax step (32 or 64; the default is 32 for 32-wide
# heads, 64 otherwise) and at most 4 warps per head and block (2 blocks per head of a 128-token text).
for variant in "UFORM_GPU_FLASH_STEP=32" "UFORM_GPU_FLASH_STEP=64" "UFORM_GPU_FLASH_WARPS=4"; do
    for case in "uform3 64" "minilm 128"; do
        set -- $case
        env "$variant" timeout 60 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch 1024 --seconds 1 2>&1 |
            sed "s/^/  $variant: /" | tee -a "$SUMMARY"
    done
done
# Longer sequences (ViT-like 197 and 261 tokens of 64-wide heads live in the image towers; here the
# text towers at 256 and 510 tokens), flash against the older choice (at 510 tokens WMMA does not fit
# shared memory and the SIMT kernel runs).
for case in "uform3 256 256" "minilm 510 128"; do
    set -- $case
    for kernel in flash wmma; do
        UFORM_GPU_ATTENTION=$kernel timeout 60 "$BUILD/bench/bench_text_gpu" --shape "$1" --tokens "$2" --batch "$3" \
            --seconds 1 2>&1 | sed "s/^/  long $kernel: /" | tee -a "$SUMMARY"
    done
done

# Beside PyTorch eager (and torch.compile at batch 1,024 while time remains), both kernels in one run.
step bench "$LOGS/bench.log" optional timeout 150 python3 "$ROOT/bench/bench_text_gpu.py" \
    --binary "$BUILD/bench/bench_text_gpu" --seconds "$SECONDS_PER" --devices 1 --batches "$BATCHES" --attention flash,wmma
grep -vE '^====' "$LOGS/bench.log" | sed 's/^/  /' | tee -a "$SUMMARY"
if [[ $COMPILE == 1 && $(($(date +%s) - START)) -lt 200 ]]; then
    step bench_compile "$LOGS/bench.log" optional timeout $((290 - ($(date +%s) - START))) python3 \
        "$ROOT/bench/bench_text_gpu.py" --binary "$BUILD/bench/bench_text_gpu" --seconds "$SECONDS_PER" --devices 1 \
        --batches 1024 --attention flash --compile --compile-batches 1024 --compile-timeout 120
    awk '/^==== bench_compile/ {on = 1} on' "$LOGS/bench.log" | grep -vE '^====' | sed 's/^/  compile: /' | tee -a "$SUMMARY"
elif [[ $COMPILE == 1 ]]; then
    note "torch.compile: skipped, $(($(date +%s) - START)) s gone"
fi
note "total: $(($(date +%s) - START)) s; $([[ $FAILED == 0 ]] && echo 'all required steps passed' || echo 'SOME REQUIRED STEPS FAILED')"
exit $FAILED
