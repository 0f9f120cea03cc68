#!/usr/bin/env bash
# CPU throughput of this tree beside the session's starting tree (build-gpu/before), alternating.
set -uo pipefail
ROOT=$(pwd); OUTDIR=${OUT:-/tmp}; LOG=$OUTDIR/ab.log; : >"$LOG"
export NCCL_NVLS_ENABLE=0
CONFIGURE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUFORM_WITH_CUDA=OFF)
SUMMARY=$LOG
source "$ROOT/test/gpu/steps.sh"
note() { echo "$*" | tee -a "$LOG"; }
unpack_deps "$ROOT/build-gpu/device-deps" "$ROOT/build-ab-deps"
lscpu | grep -E 'Model name|^CPU\(s\)' | tee -a "$LOG"
for tree in before now; do
  src=$ROOT; [[ $tree == before ]] && src=$ROOT/build-gpu/before
  cmake -S "$src" -B "$ROOT/build-ab-$tree" "${CONFIGURE[@]}" >>"$OUTDIR/build.log" 2>&1 &&
  cmake --build "$ROOT/build-ab-$tree" -j 16 --target bench_text bench_image_model >>"$OUTDIR/build.log" 2>&1 || { note "build $tree failed"; tail -20 "$OUTDIR/build.log"; exit 1; }
done
T=14
for round in 1 2; do
  for tree in before now now before; do
    B=$ROOT/build-ab-$tree/bench
    note "$tree r$round minilm128 b50 bf16: $(timeout 30 $B/bench_text --shape minilm --tokens 128 --dtype bf16 --batch 50 --threads $T --seconds 0.6 2>&1 | tail -1)"
    note "$tree r$round minilm128 b1 bf16: $(timeout 30 $B/bench_text --shape minilm --tokens 128 --dtype bf16 --batch 1 --threads $T --seconds 0.6 2>&1 | tail -1)"
    note "$tree r$round uform3 64 b50 bf16: $(timeout 30 $B/bench_text --shape uform3 --tokens 64 --dtype bf16 --batch 50 --threads $T --seconds 0.6 2>&1 | tail -1)"
    note "$tree r$round vit-b16 b50 bf16: $(cd $ROOT && timeout 40 $B/bench_image_model --shape vit-b16 --mode model --batch 50 --dtype bf16 --threads $T --seconds 0.8 2>&1 | tail -1)"
  done
done
