set -uo pipefail
source test/gpu/steps.sh 2>/dev/null
BUILD=build-device
export LD_LIBRARY_PATH="$BUILD/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cmake --build $BUILD --target bench_image_gpu bench_text_gpu >/dev/null 2>&1 || { echo build failed; exit 1; }
for round in 1 2 3; do for p in 1 0; do
  echo "round $round pieces $p vit-b16 b50: $(UFORM_GPU_FEATURES_PIECES=$p $BUILD/bench/bench_image_gpu --shape vit-b16 --batch 50 --seconds 1 --features 2>&1 | grep ^uform)"
  echo "round $round pieces $p vit-s16 b100: $(UFORM_GPU_FEATURES_PIECES=$p $BUILD/bench/bench_image_gpu --shape vit-s16 --batch 100 --seconds 1 --features 2>&1 | grep ^uform)"
done; done
