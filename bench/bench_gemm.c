/**
 *  @file   bench_gemm.c
 *  @brief  Chooses the GEMM library by measurement: oneDNN (dnnl_sgemm, dnnl_gemm_bf16bf16f32)
 *          against OpenBLAS (cblas_sgemm), BLIS (bli_sgemm) and libxsmm (its JIT batch-reduce
 *          kernels) on the towers' shapes, one thread per call (the engine's threads parallelise),
 *          C = A W^T with W in nn.Linear layout. Every library's C is checked against oneDNN's.
 *
 *  Build (Debian: libdnnl-dev, libopenblas-dev, libblis-serial-dev, libxsmm-dev):
 *    cc -O2 -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/bench_gemm.c -ldnnl -lopenblas -lgomp \
 *       -L/usr/lib -lxsmm -lxsmmnoblas -ldl -lm -o bench_gemm
 *  run under `taskset -c 0 env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./bench_gemm`.
 *
 *  BLIS is loaded with dlopen (RTLD_LOCAL, its serial build), so its cblas_* and BLAS symbols never
 *  meet OpenBLAS's; it multiplies through its typed API with general strides (W read as W^T without
 *  a copy). libxsmm has no large-GEMM driver of its own (its BLAS-like entry forwards large products
 *  to BLAS), so it is used as frameworks use it: its JIT batch-reduce kernel per 64 x 16 tile of C,
 *  summing 128-deep slices of K, over W transposed once (as the engine packs weights once).
 *
 *  `--tiles` measures instead the tiles the text plans (src/models/text_plan.c) cut on 2 threads, f32
 *  only, oneDNN and OpenBLAS alternating six times (best of each): the batch-1 plan's column tiles
 *  (UForm3-small at 64 tokens, MiniLM at 128), the batch-parallel pass's 512-row tiles, and attention's
 *  two products per head (S = Q K^T and O = P V, rows 3 x hidden apart). For the AVX2 class bound the
 *  libraries: `DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell BLIS_ARCH_TYPE=haswell LIBXSMM_TARGET=hsw`.
 *  A product the library refuses (oneDNN's bf16 under an AVX2 bound) reads 0.0 GFLOP/s.
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
#include <dlfcn.h>
#include <math.h>
#include <libxsmm.h>

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

/* BLIS's typed gemm (blis.h: trans_t is an enum, dim_t and inc_t 64-bit on LP64), through dlopen. */
typedef void (*bli_sgemm_t)(int transa, int transb, int64_t m, int64_t n, int64_t k, float const *alpha, float const *a,
                            int64_t rsa, int64_t csa, float const *b, int64_t rsb, int64_t csb, float const *beta, float *c,
                            int64_t rsc, int64_t csc);
static bli_sgemm_t bli_sgemm_ptr;
static char const *blis_version = "absent";

static void blis_load(void) {
    char const *paths[] = {"/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4", "libblis.so.4"};
    for (size_t i = 0; i < 2 && !bli_sgemm_ptr; ++i) {
        void *handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!handle) continue;
        bli_sgemm_ptr = (bli_sgemm_t)dlsym(handle, "bli_sgemm");
        char const *(*version)(void) = (char const *(*)(void))dlsym(handle, "bli_info_get_version_str");
        if (version) blis_version = version();
    }
}

/* C[M][N] = A[M][K] W^T: BLIS with W as a K x N operand of strides (1, K), no copy. */
static void blis_gemm(size_t M, size_t N, size_t K, float const *a, float const *w, float *c) {
    float one = 1, zero = 0;
    bli_sgemm_ptr(0, 0, (int64_t)M, (int64_t)N, (int64_t)K, &one, a, (int64_t)K, 1, w, 1, (int64_t)K, &zero, c,
                  (int64_t)N, 1);
}

/* libxsmm: column-major, C^T (N x M, ld N) = W^T' (N x K, ld N: `wt` is W transposed once, [K][N]) times
 * A^T (K x M, ld K); one batch-reduce call per 64 x 16 tile over 128-deep slices of K. */
enum { XSMM_MB = 64, XSMM_NB = 16, XSMM_KB = 128 };
static void xsmm_gemm(size_t M, size_t N, size_t K, float const *a, float const *wt, float *c) {
    float one = 1, zero = 0;
    int flags = 0;
    libxsmm_blasint lda = (libxsmm_blasint)N, ldb = (libxsmm_blasint)K, ldc = (libxsmm_blasint)N;
    size_t kb = K % XSMM_KB == 0 ? XSMM_KB : K;
    libxsmm_smmfunction_reducebatch_addr kernel =
        libxsmm_smmdispatch_reducebatch_addr(XSMM_MB, XSMM_NB, (libxsmm_blasint)kb, &lda, &ldb, &ldc, &one, &zero, &flags, NULL);
    float const *as[64], *bs[64];
    unsigned long long count = K / kb;
    for (size_t m0 = 0; m0 < M; m0 += XSMM_NB)
        for (size_t n0 = 0; n0 < N; n0 += XSMM_MB) {
            for (size_t i = 0; i < count; ++i) as[i] = wt + i * kb * N + n0, bs[i] = a + m0 * K + i * kb;
            kernel(as, bs, c + m0 * N + n0, &count);
        }
}

/* Largest |x - y| over the largest |y|: a library's C against oneDNN's. */
static double relative_error(float const *x, float const *y, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) worst = fmax(worst, fabs((double)x[i] - y[i])), scale = fmax(scale, fabs((double)y[i]));
    return scale > 0 ? worst / scale : worst;
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
    blis_load();
    libxsmm_init();
    if (!bli_sgemm_ptr) fprintf(stderr, "bench_gemm: BLIS not found (libblis4-serial); its column reads 0\n");
    printf("libraries: oneDNN %d.%d.%d, OpenBLAS %s, BLIS %s, libxsmm %s (target %s)\n", dnnl_version()->major,
           dnnl_version()->minor, dnnl_version()->patch, openblas_get_config(), blis_version, LIBXSMM_VERSION,
           libxsmm_get_target_arch());
    size_t ms[] = {16, 128, 1024, 8192};
    size_t nk[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}, {2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    size_t max = 8192 * 3072;
    float *a = malloc(max * 4), *w = malloc(3072 * 3072 * 4), *wt = malloc(3072 * 3072 * 4), *c = malloc(8192 * 3072 * 4);
    float *reference = malloc(8192 * 3072 * 4);
    uint16_t *ab = malloc(max * 2), *wb = malloc(3072 * 3072 * 2);
    for (size_t i = 0; i < max; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f, ab[i] = to_bf16(a[i]);
    for (size_t i = 0; i < 3072 * 3072; ++i) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f, wb[i] = to_bf16(w[i]);
    printf("threads at start: %d\n", threads_now());
    printf("%6s %5s %5s | %9s %9s %9s %9s | %6s %6s %6s | %9s | %s  (GFLOP/s; ratios: oneDNN over each)\n", "M", "N", "K",
           "dnnl f32", "oblas f32", "blis f32", "xsmm f32", "/oblas", "/blis", "/xsmm", "dnnl bf16", "max error vs oneDNN");
    int mismatches = 0;
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
        for (size_t s = 0; s < sizeof nk / sizeof *nk; ++s) {
            size_t M = ms[mi], N = nk[s][0], K = nk[s][1];
            for (size_t k = 0; k < K; ++k) /* W transposed once, for libxsmm */
                for (size_t n = 0; n < N; ++n) wt[k * N + n] = w[n * K + k];
            double r[5], error[4] = {0};
            for (int lib = 0; lib < 5; ++lib) {
                if (lib == 2 && !bli_sgemm_ptr) { r[lib] = 0; continue; }
                size_t reps = 0; double start = now(), t = 0;
                do {
                    if (lib == 0) dnnl_sgemm('N', 'T', M, N, K, 1.f, a, K, w, K, 0.f, c, N);
                    else if (lib == 1) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, K, w, K, 0.f, c, N);
                    else if (lib == 2) blis_gemm(M, N, K, a, w, c);
                    else if (lib == 3) xsmm_gemm(M, N, K, a, wt, c);
                    else if (dnnl_gemm_bf16bf16f32('N', 'T', M, N, K, 1.f, ab, K, wb, K, 0.f, c, N) != dnnl_success) break;
                    ++reps; t = now() - start;
                } while (t < budget);
                r[lib] = !reps ? 0 : 2.0 * M * N * K * reps / t / 1e9;
                if (lib == 0) memcpy(reference, c, M * N * 4);
                else if (lib < 4) error[lib] = relative_error(c, reference, M * N);
            }
            int bad = error[1] > 1e-4 || error[2] > 1e-4 || error[3] > 1e-4;
            mismatches += bad;
            printf("%6zu %5zu %5zu | %9.1f %9.1f %9.1f %9.1f | %6.2f %6.2f %6.2f | %9.1f | %.1e %.1e %.1e%s\n", M, N, K, r[0],
                   r[1], r[2], r[3], r[0] / r[1], r[2] > 0 ? r[0] / r[2] : 0, r[0] / r[3], r[4], error[1], error[2], error[3],
                   bad ? "  MISMATCH" : "");
            fflush(stdout);
        }
    printf("threads at end: %d\n", threads_now());
    if (mismatches) fprintf(stderr, "bench_gemm: %d shapes where a library's C differs from oneDNN's by more than 1e-4\n", mismatches);
    free(a), free(w), free(wt), free(c), free(reference), free(ab), free(wb);
    return mismatches ? 1 : 0;
}
