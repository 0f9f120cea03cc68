/**
 *  @file   bench_gemm.c
 *  @brief  Chooses the GEMM library by measurement: oneDNN (dnnl_sgemm, dnnl_gemm_bf16bf16f32)
 *          against OpenBLAS (cblas_sgemm, cblas_sbgemm) on the text towers' shapes, one thread
 *          per call (the engine's threads parallelise), C = A W^T with W in nn.Linear layout.
 *
 *  Build: cc -O2 bench/bench_gemm.c -ldnnl -lopenblas -lgomp -o bench_gemm; run under
 *  `taskset -c 0 env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./bench_gemm`.
 *
 *  `--tiles` measures instead the tiles the text plans (src/models/text_plan.c) cut on 2 threads, f32
 *  only, both libraries alternating six times (best of each): the batch-1 plan's column tiles
 *  (UForm3-small at 64 tokens, MiniLM at 128), the batch-parallel pass's 512-row tiles, and attention's
 *  two products per head (S = Q K^T and O = P V, rows 3 x hidden apart). For the AVX2 class bound both
 *  libraries: `DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell`. A product the library refuses
 *  (oneDNN's bf16 under an AVX2 bound) reads 0.0 GFLOP/s.
 */
#define _GNU_SOURCE
#include "../tools/strict_number.h"

#include <dnnl.h>
#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>

/* Exported by libdnnl 2.6 but not declared in its public header. */
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                    uint16_t const *A, dnnl_dim_t lda, uint16_t const *B, dnnl_dim_t ldb, float beta,
                                    float *C, dnnl_dim_t ldc);

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7FFF + ((u >> 16) & 1); return (uint16_t)(u >> 16); }
static int threads_now(void) { int n = 0; DIR *d = opendir("/proc/self/task"); struct dirent *e; while ((e = readdir(d))) if (e->d_name[0] != '.') ++n; closedir(d); return n; }

/* The plans' tiles (M, N, K, attention: 0 for C = A W^T, 1 for S = Q K^T, 2 for O = P V). */
static size_t const plan_tiles[][4] = {
    {64, 576, 768, 0}, {64, 192, 768, 0}, {64, 768, 768, 0}, {64, 192, 3072, 0},     /* UForm3-small, batch 1 */
    {128, 288, 384, 0}, {128, 96, 384, 0}, {128, 384, 384, 0}, {128, 96, 1536, 0},   /* MiniLM, batch 1 */
    {512, 2304, 768, 0}, {512, 768, 768, 0}, {512, 3072, 768, 0}, {512, 768, 3072, 0}, /* batch-parallel */
    {512, 1152, 384, 0}, {512, 1536, 384, 0}, {512, 384, 1536, 0},
    {64, 64, 64, 1}, {64, 64, 64, 2}, {128, 128, 32, 1}, {128, 32, 128, 2}};        /* attention per head */

static int tiles_main(double budget) {
    float *a = malloc(512 * 3072 * 4), *w = malloc(3072 * 3072 * 4), *c = malloc(512 * 3072 * 4);
    if (!a || !w || !c) return 1;
    for (size_t i = 0; i < 512 * 3072; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < 3072 * 3072; ++i) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    printf("threads at start: %d\n", threads_now());
    printf("%-9s %5s %5s %5s | %10s %10s %6s  (GFLOP/s, best of 6 alternations)\n", "product", "M", "N", "K", "dnnl f32",
           "oblas f32", "ratio");
    for (size_t s = 0; s < sizeof plan_tiles / sizeof *plan_tiles; ++s) {
        size_t M = plan_tiles[s][0], N = plan_tiles[s][1], K = plan_tiles[s][2], kind = plan_tiles[s][3];
        size_t ld = kind ? 3 * 768 : K; /* attention reads Q, K, V from rows 3 x hidden apart */
        double best[2] = {1e30, 1e30};
        for (int round = 0; round < 6; ++round)
            for (int lib = 0; lib < 2; ++lib) {
                size_t reps = 0;
                double start = now(), t;
                do {
                    if (kind == 2) { /* O[M][N] = P[M][K] V[K][N] */
                        if (lib == 0) dnnl_sgemm('N', 'N', M, N, K, 1.f, a, K, w, ld, 0.f, c, N);
                        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a, K, w, ld, 0.f, c, N);
                    } else if (lib == 0) dnnl_sgemm('N', 'T', M, N, K, 1.f, a, ld, w, ld, 0.f, c, N);
                    else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, ld, w, ld, 0.f, c, N);
                    ++reps, t = now() - start;
                } while (t < budget / 12);
                if (t / reps < best[lib]) best[lib] = t / reps;
            }
        double flops = 2.0 * M * N * K / 1e9;
        printf("%-9s %5zu %5zu %5zu | %10.1f %10.1f %6.2f\n", kind == 0 ? "A W^T" : kind == 1 ? "Q K^T" : "P V", M, N, K,
               flops / best[0], flops / best[1], best[1] / best[0]);
        fflush(stdout);
    }
    printf("threads at end: %d\n", threads_now());
    free(a), free(w), free(c);
    return 0;
}

int main(int argc, char **argv) {
    double budget = 0.3;
    int tiles = argc >= 2 && strcmp(argv[argc - 1], "--tiles") == 0;
    if (tiles) --argc;
    if (argc > 2 || (argc == 2 && !strict_real(argv[1], 0, 3600, &budget))) {
        fprintf(stderr, "usage: bench_gemm [SECONDS per shape, default 0.3] [--tiles]\n");
        return 2;
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    if (tiles) return tiles_main(budget);
    size_t ms[] = {16, 128, 1024, 8192};
    size_t nk[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}, {2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    size_t max = 8192 * 3072;
    float *a = malloc(max * 4), *w = malloc(3072 * 3072 * 4), *c = malloc(8192 * 3072 * 4);
    uint16_t *ab = malloc(max * 2), *wb = malloc(3072 * 3072 * 2);
    for (size_t i = 0; i < max; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f, ab[i] = to_bf16(a[i]);
    for (size_t i = 0; i < 3072 * 3072; ++i) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f, wb[i] = to_bf16(w[i]);
    printf("threads at start: %d\n", threads_now());
    printf("%6s %5s %5s | %10s %10s %6s | %10s %10s %6s  (GFLOP/s)\n", "M", "N", "K", "dnnl f32", "oblas f32", "ratio", "dnnl bf16", "oblas bf16", "ratio");
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
        for (size_t s = 0; s < sizeof nk / sizeof *nk; ++s) {
            size_t M = ms[mi], N = nk[s][0], K = nk[s][1];
            double r[4];
            for (int lib = 0; lib < 4; ++lib) {
                size_t reps = 0; double start = now(), t = 0;
                do {
                    if (lib == 0) dnnl_sgemm('N', 'T', M, N, K, 1.f, a, K, w, K, 0.f, c, N);
                    else if (lib == 1) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, K, w, K, 0.f, c, N);
                    else if (lib == 2) {
                        if (dnnl_gemm_bf16bf16f32('N', 'T', M, N, K, 1.f, ab, K, wb, K, 0.f, c, N) != dnnl_success) break;
                    }
                    else break; /* Debian's OpenBLAS 0.3.21 is built without bf16 (no cblas_sbgemm) */
                    ++reps; t = now() - start;
                } while (t < budget);
                r[lib] = lib == 3 || !reps ? 0 : 2.0 * M * N * K * reps / t / 1e9;
            }
            printf("%6zu %5zu %5zu | %10.1f %10.1f %6.2f | %10.1f %10.1f %6.2f\n", M, N, K, r[0], r[1], r[0] / r[1], r[2], r[3], r[2] / r[3]);
            fflush(stdout);
        }
    printf("threads at end: %d\n", threads_now());
    return 0;
}
