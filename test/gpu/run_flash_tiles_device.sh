#!/usr/bin/env bash
# The flash attention kernel's key tiles awaited one by one (UFORM_GPU_FLASH_RESIDENT=2) against all
# of them before the first product (1, the default) on the GPU machine (2026-12-06, second session):
# the VRAM text and image tests with 2, compute-sanitizer racecheck and memcheck on an image call with
# 2, the attention kernel's own time under Nsight Compute (ViT-B/16 batch 256, MiniLM 128 tokens batch
# 1,024), and the towers' rates alternating 1 and 2.
#
#   bash test/gpu/run_flash_tiles_device.sh   (carry build-gpu/device-deps)
#
# Logs go to $LOGS (default build-device/flash-logs); the summary is printed last.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${UFORM_DEVICE_BUILD:-$ROOT/build-device}
LOGS=${LOGS:-$BUILD/flash-logs}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
SUMMARY=$LOGS/summary.txt
: >"$SUMMARY"
FAILED=0
# shellcheck source=test/gpu/steps.sh
source "$ROOT/test/gpu/steps.sh"

CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=ON)
unpack_deps "$ROOT/build-gpu/device-deps" "$BUILD"
step configure "$LOGS/build.log" required cmake -S "$ROOT" -B "$BUILD" "${CONFIGURE[@]}" &&
    step compile "$LOGS/build.log" required cmake --build "$BUILD" -j "$(nproc)" || { tail -30 "$LOGS/build.log"; cat "$SUMMARY"; exit 1; }
note "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | head -1)"

step texts_gpu_tiles "$LOGS/texts.log" required env UFORM_GPU_FLASH_RESIDENT=2 timeout 300 "$BUILD/test/test_encode_gpu"
grep -E 'worst|passed|FAIL' "$LOGS/texts.log" | head -12 | sed 's/^/  /' >>"$SUMMARY"
step images_gpu_tiles "$LOGS/images.log" required env UFORM_GPU_FLASH_RESIDENT=2 timeout 300 "$BUILD/test/test_encode_images_gpu"
grep -E 'worst|passed|FAIL' "$LOGS/images.log" | head -12 | sed 's/^/  /' >>"$SUMMARY"
for tool in racecheck memcheck; do
    step "${tool}_tiles" "$LOGS/sanitizer.log" required env UFORM_GPU_FLASH_RESIDENT=2 timeout 120 compute-sanitizer --tool $tool \
        --error-exitcode 99 "$BUILD/bench/bench_image_gpu" --shape vit-s16 --batch 3 --seconds 0 --min-calls 1
done
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$LOGS/sanitizer.log" | sed 's/^/  /' >>"$SUMMARY"

# The kernel alone: the last launches of a call, graphs off so each launch is its own.
if command -v ncu >/dev/null; then
    for resident in 1 2; do
        UFORM_GPU_FLASH_RESIDENT=$resident UFORM_GPU_NO_GRAPHS=1 timeout 120 ncu --cache-control none --clock-control none \
            --kernel-name regex:attention_flash --launch-skip 12 --launch-count 12 --metrics gpu__time_duration.sum --csv \
            "$BUILD/bench/bench_image_gpu" --shape vit-b16 --batch 256 --seconds 0 --min-calls 2 >"$LOGS/ncu-vitb-$resident.csv" 2>>"$LOGS/ncu.log"
        UFORM_GPU_FLASH_RESIDENT=$resident UFORM_GPU_NO_GRAPHS=1 timeout 120 ncu --cache-control none --clock-control none \
            --kernel-name regex:attention_flash --launch-skip 6 --launch-count 6 --metrics gpu__time_duration.sum --csv \
            "$BUILD/bench/bench_text_gpu" --shape minilm --tokens 128 --batch 1024 --seconds 0 >"$LOGS/ncu-minilm-$resident.csv" 2>>"$LOGS/ncu.log"
        for which in vitb minilm; do
            echo "  ncu attention_flash, $which, resident $resident: $(python3 -c "
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10 and r[-3] == 'gpu__time_duration.sum']
values = sorted(float(r[-1].replace(',', '')) for r in rows)
print(f'{len(values)} launches, median {values[len(values) // 2]:.1f} {rows[0][-2]}' if values else 'none')
" "$LOGS/ncu-$which-$resident.csv" 2>&1)" >>"$SUMMARY"
        done
    done
fi

# The towers, alternating the two settings.
for round in 1 2; do
    for resident in 1 2; do
        for shape in vit-b16 vit-s16; do
            for batch in 50 256; do
                echo "  r$round resident $resident: $(UFORM_GPU_FLASH_RESIDENT=$resident timeout 30 "$BUILD/bench/bench_image_gpu" \
                    --shape $shape --batch $batch --seconds 1 2>&1 | tail -1)" >>"$SUMMARY"
            done
        done
        for case in minilm:128:1024 uform3:64:1024 minilm:128:50; do
            IFS=: read -r shape tokens batch <<<"$case"
            echo "  r$round resident $resident: $(UFORM_GPU_FLASH_RESIDENT=$resident timeout 30 "$BUILD/bench/bench_text_gpu" \
                --shape "$shape" --tokens "$tokens" --batch "$batch" --seconds 1 2>&1 | tail -1)" >>"$SUMMARY"
        done
    done
done
cat "$SUMMARY"
exit $FAILED
