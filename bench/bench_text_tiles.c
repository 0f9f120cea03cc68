/**
 *  @file   bench_text_tiles.c
 *  @brief  The batch-1 text plan's product tiles on one thread, through oneDNN's matmul primitive
 *          (brgemm; AMX on Sapphire Rapids), with the weights packed once against read as they lie
 *          (oneDNN packing each tile per call), alternating: what packing costs or saves per tile,
 *          apart from threads, barriers and the packed slices' lookup under many threads.
 *
 *      bench_text_tiles [--plan-threads N] [--tokens N] [--rounds N] [--shape minilm|uform3]
 *
 *  Every product of one layer (Q/K/V side by side, the output, up and down products) is cut as
 *  `uform_text_gemm_plan` cuts it for a group of `--plan-threads` threads over `--tokens` rows (the
 *  batch-1 pass), and this one thread runs every tile, `--rounds` times per arm; prints the best
 *  round of each arm. bf16 weights where the class multiplies bf16 natively, else f32.
 */
#define _GNU_SOURCE 1
#include "kernels/kernels.h"
#include "models/text_plan.h"
#include "../tools/strict_number.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t plan_threads = 28, tokens = 64, rounds = 40;
    char const *shape = "uform3";
    for (int i = 1; i < argc; ++i) {
        char const *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--plan-threads") && strict_count(v, 1, 4096, false, &plan_threads)) ++i;
        else if (v && !strcmp(a, "--tokens") && strict_count(v, 1, 4096, false, &tokens)) ++i;
        else if (v && !strcmp(a, "--rounds") && strict_count(v, 3, 100000, false, &rounds)) ++i;
        else if (v && !strcmp(a, "--shape") && (!strcmp(v, "minilm") || !strcmp(v, "uform3"))) shape = v, ++i;
        else {
            fprintf(stderr, "usage: bench_text_tiles [--plan-threads N] [--tokens N] [--rounds N] [--shape minilm|uform3]\n");
            return 2;
        }
    }
    uform_cpu_class_t cpu_class = uform_cpu_class_serial_k;
    if (uform_cpu_detect(&cpu_class, NULL) != uform_status_ok_k) return 1;
    uform_gemm_t gemm = uform_gemm_for(cpu_class);
    if (!gemm.use_library) {
        printf("bench_text_tiles: skipped: class %s multiplies without the library\n", uform_cpu_class_name(cpu_class));
        return 0;
    }
    gemm.matmul = 1, gemm.pack_split = 0; /* packing lives on the primitive's path only */
    int bf16 = uform_gemm_takes_bf16(&gemm, uform_dtype_bf16_k);
    size_t element = bf16 ? 2 : 4, hidden = strcmp(shape, "uform3") ? 384 : 768, inter = 4 * hidden;
    /* Columns of each product, its depth, and how many products share the phase (Q, K, V). */
    size_t const products[4][3] = {{hidden, hidden, 3}, {hidden, hidden, 1}, {inter, hidden, 1}, {hidden, inter, 1}};
    void *weights[4];
    size_t m = tokens;
    float *a = malloc(m * inter * sizeof(float)), *c = malloc(m * 3 * inter * sizeof(float));
    uint16_t *a16 = malloc(m * inter * 2);
    void *scratch = NULL;
    if (!a || !c || !a16) return 1;
    for (size_t i = 0; i < m * inter; ++i) a[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    gemm.kernels->f32_to_bf16(a, a16, m * inter);
    for (size_t p = 0; p < 4; ++p) {
        size_t count = products[p][0] * products[p][2] * products[p][1], bytes = count * element;
        if (posix_memalign(&weights[p], 4096, bytes) != 0) return 1;
        for (size_t i = 0; i < count; ++i) {
            float value = (float)((i * 13) % 97) / 970.0f - 0.05f;
            if (bf16) gemm.kernels->f32_to_bf16(&value, (uint16_t *)weights[p] + i, 1);
            else ((float *)weights[p])[i] = value;
        }
        uform_gemm_pin(weights[p], bytes); /* as a model's replicas are */
    }
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    double best[2] = {1e30, 1e30};
    size_t tiles = 0;
    for (size_t round = 0; round < rounds + 2; ++round)
        for (int packed = 0; packed < 2; ++packed) {
            double start = now();
            tiles = 0;
            for (size_t p = 0; p < 4; ++p) {
                size_t cols = products[p][0], k = products[p][1], count = products[p][2], ldc = cols * count;
                size_t widths[3] = {cols, cols, cols};
                uform_text_gemm_plan_t plan = uform_text_gemm_plan(&gemm, plan_threads, bf16 ? uform_dtype_bf16_k : uform_dtype_f32_k,
                                                                   m, widths, count);
                uform_gemm_t product = gemm;
                product.plain_weights = !packed;
                for (size_t task = 0; task < plan.tiles_m * plan.tiles_n; ++task, ++tiles) {
                    size_t i0, rows, u0, units;
                    uform_text_split(m, plan.tiles_m, task / plan.tiles_n, &i0, &rows);
                    uform_text_split(plan.units, plan.tiles_n, task % plan.tiles_n, &u0, &units);
                    /* The products side by side are one [count cols][k] block: a task's columns are its rows. */
                    size_t j0 = u0 * UFORM_TEXT_COLUMN_UNIT, width = units * UFORM_TEXT_COLUMN_UNIT;
                    if (j0 + width > ldc) width = ldc - j0;
                    if (bf16)
                        uform_gemm_tile_bf16(&product, rows, width, k, a16 + i0 * k, k, (uint16_t const *)weights[p] + j0 * k, k,
                                             c + i0 * ldc + j0, ldc);
                    else
                        uform_gemm_tile(&product, rows, width, k, a + i0 * k, k, (float const *)weights[p] + j0 * k,
                                        uform_dtype_f32_k, k, c + i0 * ldc + j0, ldc, scratch);
                }
            }
            double took = now() - start;
            if (round >= 2 && took < best[packed]) best[packed] = took; /* two warm-up rounds */
        }
    uform_gemm_thread_leave(&previous);
    printf("bench_text_tiles %s %s, %zu rows, the plan of %zu threads (%zu tiles per layer), one thread, %s: "
           "plain %.3f ms, packed %.3f ms per layer (packed / plain %.3f), packed copies %.1f MiB\n",
           shape, bf16 ? "bf16" : "f32", m, plan_threads, tiles, uform_gemm_matmul_impl() ? uform_gemm_matmul_impl() : "no primitive",
           best[0] * 1e3, best[1] * 1e3, best[1] / best[0], (double)uform_gemm_packed_bytes() / 1048576.0);
    for (size_t p = 0; p < 4; ++p) {
        uform_gemm_unpin(weights[p], products[p][0] * products[p][2] * products[p][1] * element);
        free(weights[p]);
    }
    free(a), free(c), free(a16);
    return 0;
}
