/**
 *  @file   bench_image_gpu.c
 *  @brief  Images per second of VRAM image towers: bench_image_model.c's program (the same towers,
 *          modes, options and output; nothing copied) with `--devices 1 --dtype bf16` as defaults.
 *          bench_image_gpu.py runs it beside PyTorch eager bf16 and torch.compile on CUDA.
 *
 *      bench_image_gpu [--shape vit-s16|vit-b16] [--mode model|whole] [--batch N] [--dtype bf16|f16|f32]
 *                      [--devices N] [--seconds S] [--min-calls N] [--images DIR] [--features] [--json]
 *
 *  `model` feeds raw 224 x 224 RGB pixels (the resize is the identity: what is measured is the
 *  upload of the 8-bit crops and the tower, as the peers get ready tensors); `whole` feeds JPEG
 *  bytes (decoding, PIL-exact resize and crop on the executor's host threads, then the devices).
 *  Without a GPU it prints why and exits 0.
 */
#define BENCH_NAME "bench_image_gpu"
#define BENCH_DEFAULT_DEVICES 1
#define BENCH_DEFAULT_DTYPE "bf16"
#include "bench_image_model.c"
