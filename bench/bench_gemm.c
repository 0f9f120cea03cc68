/**
 *  @file   bench_gemm.c
 *  @brief  Chooses the GEMM library by measurement: oneDNN (dnnl_sgemm, dnnl_gemm_bf16bf16f32) against
 *          OpenBLAS (cblas_sgemm; Debian's has no cblas_sbgemm), BLIS (bli_sgemm) and libxsmm (JIT kernels,
 *          f32 and bf16) on the text towers' shapes, one thread per call (the engine's threads parallelise),
 *          C = A W^T with W in nn.Linear layout. Every library's C is checked against oneDNN's (f32 against
 *          dnnl_sgemm, bf16 against dnnl_gemm_bf16bf16f32): the largest |C - C_dnnl| over the largest
 *          |C_dnnl| must stay under 1e-4, else the shape's line ends in MISMATCH and the program exits 1.
 *
 *  Build (Debian 12: libdnnl-dev, libopenblas-dev, libblis-serial-dev, libxsmm-dev):
 *    gcc -O2 -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/bench_gemm.c -ldnnl -lxsmm -lopenblas -lgomp \
 *        -lpthread -lrt -ldl -lm -o bench_gemm
 *  run: `taskset -c 1 ./bench_gemm 0.2` (SECONDS per shape and library; the libraries hold themselves to one
 *  thread: omp_set_num_threads(1) for oneDNN, openblas_set_num_threads(1), BLIS's serial build plus
 *  bli_thread_set_num_threads(1), libxsmm's sequential entry points; the thread count is printed before and after).
 *
 *  How each library is called:
 *  - BLIS: dlopen(RTLD_LOCAL | RTLD_DEEPBIND) of Debian's serial build (BLIS_LIBRARY, override with -DBLIS_LIBRARY=...)
 *    and dlsym of its native typed API, bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, ...) with general strides: its
 *    libblis also exports cblas_sgemm and sgemm_, which would collide with OpenBLAS's if linked.
 *  - libxsmm (1.17, static): its BLAS-like libxsmm_sgemm JITs only products with M N K <= 262144 (LIBXSMM_MAX_MNK)
 *    and hands larger ones to the linked BLAS (here OpenBLAS), so it is not used. "xsmm" tiles C^T (column-major,
 *    N x M) into 64 x min(M, 64) blocks, each one JIT kernel (libxsmm_smmdispatch) over the whole K, reading W^T
 *    (W transposed once per shape, outside the timing, as an engine would pack its weights at load: libxsmm 1.17's
 *    JIT has no transposed-A kernels). "xsmmT" is libxsmm's own blocked driver (libxsmm_gemm_handle_init with
 *    transa 'T', one task; libxsmm_gemm_thread(..., 0, 1)) on W as is, transposing tiles of W as it goes; it refuses
 *    (0.0) shapes it cannot tile. "xsmm bf16" is the f32 tiling with libxsmm_bsmmdispatch (bf16 in, f32 out), W^T
 *    repacked once into libxsmm's VNNI layout ([K/2][N][2]); its JIT needs AVX-512 (target cpx or spr).
 *  Ratios are oneDNN's GFLOP/s over the library's (above 1: oneDNN faster).
 *
 *  `--tiles` measures instead the tiles the text plans (src/models/text_plan.c) cut on 2 threads, f32
 *  only, the four libraries alternating six times (best of each): the batch-1 plan's column tiles
 *  (UForm3-small at 64 tokens, MiniLM at 128), the batch-parallel pass's 512-row tiles, and attention's
 *  two products per head (S = Q K^T and O = P V, rows 3 x hidden apart; libxsmm's Q K^T includes transposing
 *  the K rows, libxsmm_otrans, in its time). For the AVX2 class bound the libraries:
 *  `DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell BLIS_ARCH_TYPE=3 LIBXSMM_TARGET=hsw` (BLIS 0.9 reads
 *  BLIS_ARCH_TYPE as a number, blis.h's arch_t: 3 is haswell, and a name reads as 0, skx, AVX-512; the program
 *  prints the sub-configuration BLIS runs, zen3 by default on Zen 4: AVX2 kernels).
 *  `--matmul` measures oneDNN's matmul primitive, the path src/kernels/gemm.c takes on AVX-512 classes, with the
 *  weights reordered once into its own layout, beside dnnl_sgemm / dnnl_gemm_bf16bf16f32 and libxsmm (f32 and bf16),
 *  at M = 16 to 128 (the batch-1 plans' rows), each checked against oneDNN's GEMM function of its precision.
 *  A product the library refuses (oneDNN's bf16 under an AVX2 bound, a libxsmm kernel it cannot JIT) reads 0.0 GFLOP/s.
 */
#define _GNU_SOURCE
#include "../tools/strict_number.h"

#include <dnnl.h>
#include <cblas.h>
#include <libxsmm.h>
#include <omp.h>
#include <dlfcn.h>
#include <math.h>
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

/* ---- BLIS, through dlopen: blis.h's trans_t values (BLIS_TRANSPOSE is bit 3), dim_t and inc_t int64_t on LP64 ---- */
#ifndef BLIS_LIBRARY
#define BLIS_LIBRARY "/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4"
#endif
enum { blis_no_transpose = 0, blis_transpose = 0x8 };
typedef void (*bli_sgemm_t)(int transa, int transb, int64_t m, int64_t n, int64_t k, float const *alpha, float const *a,
                            int64_t rsa, int64_t csa, float const *b, int64_t rsb, int64_t csb, float const *beta,
                            float *c, int64_t rsc, int64_t csc);
static bli_sgemm_t bli_sgemm_p;

static int blis_load(void) {
    void *lib = dlopen(BLIS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!lib) { fprintf(stderr, "bench_gemm: cannot load BLIS (%s): %s\n", BLIS_LIBRARY, dlerror()); return 0; }
    bli_sgemm_p = (bli_sgemm_t)dlsym(lib, "bli_sgemm");
    void (*set_threads)(int64_t) = (void (*)(int64_t))dlsym(lib, "bli_thread_set_num_threads");
    int (*arch_id)(void) = (int (*)(void))dlsym(lib, "bli_arch_query_id");
    char const *(*arch_name)(int) = (char const *(*)(int))dlsym(lib, "bli_arch_string");
    char const *(*version)(void) = (char const *(*)(void))dlsym(lib, "bli_info_get_version_str");
    if (!bli_sgemm_p || !set_threads || !arch_id || !arch_name || !version) {
        fprintf(stderr, "bench_gemm: %s lacks bli_sgemm or its companions\n", BLIS_LIBRARY);
        return 0;
    }
    set_threads(1);
    printf("BLIS %s (%s), sub-configuration %s\n", version(), BLIS_LIBRARY, arch_name(arch_id()));
    return 1;
}

/* C[M][N] (row stride ldc) = A[M][K] (row stride lda) op(B): B stored row-major with row stride ldb, op = ^T when
 * `transposed` (B is then N x K, as W in nn.Linear layout or attention's K rows), else B is K x N (attention's V). */
static void blis_gemm(size_t M, size_t N, size_t K, float const *a, size_t lda, float const *b, size_t ldb, int transposed,
                      float *c, size_t ldc) {
    float one = 1, zero = 0;
    bli_sgemm_p(blis_no_transpose, transposed ? blis_transpose : blis_no_transpose, (int64_t)M, (int64_t)N, (int64_t)K,
                &one, a, (int64_t)lda, 1, b, (int64_t)ldb, 1, &zero, c, (int64_t)ldc, 1);
}

/* ---- libxsmm: column-major. Row-major C[M][N] = A[M][K] B with B = W^T is, read column-major, C^T (N x M) =
 * B^T (N x K) A^T (K x M): `x` is B^T column-major (for W: W^T row-major [K][N], ld N), `y` is A as stored. ---- */
enum { xsmm_bm = 64, xsmm_bn = 64 };

static int xsmm_f32(size_t M, size_t N, size_t K, float const *x, size_t ldx, float const *y, size_t ldy, float *c,
                    size_t ldc) {
    size_t bn = M < xsmm_bn ? M : xsmm_bn;
    libxsmm_blasint lda = (libxsmm_blasint)ldx, ldb = (libxsmm_blasint)ldy, ldcc = (libxsmm_blasint)ldc;
    float one = 1, zero = 0;
    int flags = LIBXSMM_GEMM_FLAG_BETA_0, prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    libxsmm_smmfunction kernel[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            size_t m = i && N % xsmm_bm ? N % xsmm_bm : xsmm_bm, n = j && M % bn ? M % bn : bn;
            kernel[i][j] = libxsmm_smmdispatch((libxsmm_blasint)(m < N ? m : N), (libxsmm_blasint)n, (libxsmm_blasint)K,
                                               &lda, &ldb, &ldcc, &one, &zero, &flags, &prefetch);
            if (!kernel[i][j]) return 0;
        }
    for (size_t n0 = 0; n0 < M; n0 += bn)
        for (size_t m0 = 0; m0 < N; m0 += xsmm_bm)
            kernel[m0 + xsmm_bm > N][n0 + bn > M](x + m0, y + n0 * ldy, c + n0 * ldc + m0);
    return 1;
}

/* bf16: `xv` is B^T in libxsmm's VNNI layout, [K/2][N][2]; `y` is A (bf16) as stored, row stride K. */
static int xsmm_bf16(size_t M, size_t N, size_t K, uint16_t const *xv, uint16_t const *y, float *c) {
    size_t bn = M < xsmm_bn ? M : xsmm_bn;
    libxsmm_blasint lda = (libxsmm_blasint)N, ldb = (libxsmm_blasint)K, ldcc = (libxsmm_blasint)N;
    float one = 1, zero = 0;
    int flags = LIBXSMM_GEMM_FLAG_BETA_0 | LIBXSMM_GEMM_FLAG_VNNI_A, prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    libxsmm_bsmmfunction kernel[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            size_t m = i && N % xsmm_bm ? N % xsmm_bm : xsmm_bm, n = j && M % bn ? M % bn : bn;
            kernel[i][j] = libxsmm_bsmmdispatch((libxsmm_blasint)(m < N ? m : N), (libxsmm_blasint)n, (libxsmm_blasint)K,
                                                &lda, &ldb, &ldcc, &one, &zero, &flags, &prefetch);
            if (!kernel[i][j]) return 0;
        }
    for (size_t n0 = 0; n0 < M; n0 += bn)
        for (size_t m0 = 0; m0 < N; m0 += xsmm_bm)
            kernel[m0 + xsmm_bm > N][n0 + bn > M](xv + m0 * 2, y + n0 * K, c + n0 * N + m0);
    return 1;
}

/* Largest |x - y| over the largest |y| (a library's C against oneDNN's); a NaN, or an element never written
 * (C is filled with NaN before the checked call), reads as an infinite error. */
static double relative_error(float const *x, float const *y, size_t M, size_t N, size_t ld) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < N; ++j) {
            double d = fabs((double)x[i * ld + j] - y[i * ld + j]), r = fabs((double)y[i * ld + j]);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d;
            if (r > scale) scale = r;
        }
    return scale > 0 ? worst / scale : worst;
}
static void fill_nan(float *c, size_t n) { for (size_t i = 0; i < n; ++i) c[i] = NAN; }
#define CHECK_LIMIT 1e-4

/* The plans' tiles (M, N, K, attention: 0 for C = A W^T, 1 for S = Q K^T, 2 for O = P V). */
static size_t const plan_tiles[][4] = {
    {64, 576, 768, 0}, {64, 192, 768, 0}, {64, 768, 768, 0}, {64, 192, 3072, 0},     /* UForm3-small, batch 1 */
    {128, 288, 384, 0}, {128, 96, 384, 0}, {128, 384, 384, 0}, {128, 96, 1536, 0},   /* MiniLM, batch 1 */
    {512, 2304, 768, 0}, {512, 768, 768, 0}, {512, 3072, 768, 0}, {512, 768, 3072, 0}, /* batch-parallel */
    {512, 1152, 384, 0}, {512, 1536, 384, 0}, {512, 384, 1536, 0},
    {64, 64, 64, 1}, {64, 64, 64, 2}, {128, 128, 32, 1}, {128, 32, 128, 2}};        /* attention per head */

static char const *const tile_libs[4] = {"dnnl", "oblas", "blis", "xsmm"};

/* One tile product by library `lib`; 0 when the library refuses it. `wt` holds W^T for kind 0, scratch for kind 1. */
static int tile_product(int lib, size_t kind, size_t M, size_t N, size_t K, size_t ld, float const *a, float const *w,
                        float *wt, float *c) {
    if (kind == 2) { /* O[M][N] = P[M][K] V[K][N] */
        if (lib == 0) dnnl_sgemm('N', 'N', M, N, K, 1.f, a, K, w, ld, 0.f, c, N);
        else if (lib == 1) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.f, a, K, w, ld, 0.f, c, N);
        else if (lib == 2) blis_gemm(M, N, K, a, K, w, ld, 0, c, N);
        else return xsmm_f32(M, N, K, w, ld, a, K, c, N); /* V row-major [K][ld] is V^T column-major, ld `ld` */
        return 1;
    }
    if (lib == 0) dnnl_sgemm('N', 'T', M, N, K, 1.f, a, ld, w, ld, 0.f, c, N);
    else if (lib == 1) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, ld, w, ld, 0.f, c, N);
    else if (lib == 2) blis_gemm(M, N, K, a, ld, w, ld, 1, c, N);
    else {
        if (kind == 1) libxsmm_otrans(wt, w, sizeof(float), (libxsmm_blasint)K, (libxsmm_blasint)N, (libxsmm_blasint)ld,
                                      (libxsmm_blasint)N); /* K rows [N][ld] -> [K][N], timed */
        return xsmm_f32(M, N, K, wt, N, a, ld, c, N);
    }
    return 1;
}

static int tiles_main(double budget) {
    float *a = malloc(512 * 3072 * 4), *w = malloc(3072 * 3072 * 4), *c = malloc(512 * 3072 * 4);
    float *wt = malloc(3072 * 3072 * 4), *reference = malloc(512 * 3072 * 4);
    if (!a || !w || !c || !wt || !reference) return 1;
    for (size_t i = 0; i < 512 * 3072; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < 3072 * 3072; ++i) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    printf("threads at start: %d\n", threads_now());
    printf("%-9s %5s %5s %5s | %10s %10s %6s %10s %6s %10s %6s | %8s  (GFLOP/s, best of 6 alternations; ratio: dnnl "
           "over each; err: worst library vs dnnl)\n",
           "product", "M", "N", "K", "dnnl f32", "oblas f32", "ratio", "blis f32", "ratio", "xsmm f32", "ratio", "err");
    int mismatches = 0;
    for (size_t s = 0; s < sizeof plan_tiles / sizeof *plan_tiles; ++s) {
        size_t M = plan_tiles[s][0], N = plan_tiles[s][1], K = plan_tiles[s][2], kind = plan_tiles[s][3];
        size_t ld = kind ? 3 * 768 : K; /* attention reads Q, K, V from rows 3 x hidden apart */
        if (kind == 0) /* W^T once, as the engine would pack its weights */
            for (size_t k = 0; k < K; ++k)
                for (size_t n = 0; n < N; ++n) wt[k * N + n] = w[n * K + k];
        double best[4] = {1e30, 1e30, 1e30, 1e30}, worst = 0;
        int refused[4] = {0}, bad = 0;
        for (int lib = 0; lib < 4; ++lib) { /* the check, outside the timing */
            fill_nan(c, M * N);
            refused[lib] = !tile_product(lib, kind, M, N, K, ld, a, w, wt, c);
            if (lib == 0) memcpy(reference, c, M * N * 4);
            else if (!refused[lib]) {
                double e = relative_error(c, reference, M, N, N);
                if (!(e <= CHECK_LIMIT)) bad = 1, printf("MISMATCH: %s, tile %zu x %zu x %zu: %.2e\n", tile_libs[lib], M, N, K, e);
                if (!(e <= worst)) worst = e;
            }
        }
        for (int round = 0; round < 6; ++round)
            for (int lib = 0; lib < 4; ++lib) {
                if (refused[lib]) continue;
                size_t reps = 0;
                double start = now(), t;
                do {
                    tile_product(lib, kind, M, N, K, ld, a, w, wt, c);
                    ++reps, t = now() - start;
                } while (t < budget / 12);
                if (t / reps < best[lib]) best[lib] = t / reps;
            }
        double flops = 2.0 * M * N * K / 1e9, r[4];
        for (int lib = 0; lib < 4; ++lib) r[lib] = refused[lib] ? 0 : flops / best[lib];
        mismatches += bad;
        printf("%-9s %5zu %5zu %5zu | %10.1f %10.1f %6.2f %10.1f %6.2f %10.1f %6.2f | %8.1e%s\n",
               kind == 0 ? "A W^T" : kind == 1 ? "Q K^T" : "P V", M, N, K, r[0], r[1], r[0] / r[1], r[2], r[0] / r[2], r[3],
               r[0] / r[3], worst, bad ? "  MISMATCH" : "");
        fflush(stdout);
    }
    printf("threads at end: %d\n", threads_now());
    if (mismatches) printf("RESULT CHECK FAILED: %d tiles where a library's C is more than %.0e off oneDNN's\n", mismatches, CHECK_LIMIT);
    else printf("result check passed: every library within %.0e of oneDNN on every tile\n", CHECK_LIMIT);
    free(a), free(w), free(c), free(wt), free(reference);
    return mismatches ? 1 : 0;
}

/* ---- `--matmul`: oneDNN's matmul primitive, the path the engine takes on AVX-512 classes (src/kernels/gemm.c),
 * with fixed M, N, K and the weights reordered once into the primitive's own layout (format `any`), against
 * dnnl_sgemm / dnnl_gemm_bf16bf16f32 and libxsmm at the small M of batch-1 plans. ---- */
typedef struct matmul_t {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t primitive;
    dnnl_memory_t src, weights, dst;
    void *packed;
} matmul_t;

static void matmul_free(matmul_t *m) {
    if (m->primitive) dnnl_primitive_destroy(m->primitive);
    if (m->src) dnnl_memory_destroy(m->src);
    if (m->weights) dnnl_memory_destroy(m->weights);
    if (m->dst) dnnl_memory_destroy(m->dst);
    free(m->packed);
    memset(m, 0, sizeof *m);
}

/* C[M][N] (f32) = A[M][K] W^T, W [N][K] (nn.Linear layout), A and W f32 or bf16 (`bf16`); 0 when oneDNN refuses. */
static int matmul_create(matmul_t *m, dnnl_engine_t engine, dnnl_stream_t stream, size_t M, size_t N, size_t K, int bf16,
                         void const *w, void *a, float *c) {
    memset(m, 0, sizeof *m);
    m->engine = engine, m->stream = stream;
    dnnl_data_type_t dt = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t a_dims = {(dnnl_dim_t)M, (dnnl_dim_t)K}, b_dims = {(dnnl_dim_t)K, (dnnl_dim_t)N}, c_dims = {(dnnl_dim_t)M, (dnnl_dim_t)N};
    dnnl_dims_t a_strides = {(dnnl_dim_t)K, 1}, w_strides = {1, (dnnl_dim_t)K}, c_strides = {(dnnl_dim_t)N, 1};
    dnnl_memory_desc_t a_md, w_md, any_md, c_md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL, reorder_pd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t w_plain = NULL;
    int ok = dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dt, a_strides) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&w_md, 2, b_dims, dt, w_strides) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&any_md, 2, b_dims, dt, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides) == dnnl_success &&
             dnnl_matmul_desc_init(&desc, &a_md, &any_md, NULL, &c_md) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&m->primitive, pd) == dnnl_success;
    if (ok) {
        dnnl_memory_desc_t const *packed_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        m->packed = aligned_alloc(64, (dnnl_memory_desc_get_size(packed_md) + 63) / 64 * 64);
        ok = m->packed && dnnl_memory_create(&w_plain, &w_md, engine, (void *)w) == dnnl_success &&
             dnnl_memory_create(&m->weights, packed_md, engine, m->packed) == dnnl_success &&
             dnnl_memory_create(&m->src, &a_md, engine, a) == dnnl_success &&
             dnnl_memory_create(&m->dst, &c_md, engine, c) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&reorder_pd, &w_md, engine, packed_md, engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&reorder, reorder_pd) == dnnl_success;
        if (ok) {
            dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, w_plain}, {DNNL_ARG_TO, m->weights}};
            ok = dnnl_primitive_execute(reorder, stream, 2, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success;
        }
    }
    if (reorder) dnnl_primitive_destroy(reorder);
    if (reorder_pd) dnnl_primitive_desc_destroy(reorder_pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (w_plain) dnnl_memory_destroy(w_plain);
    if (!ok) matmul_free(m);
    return ok;
}

static int matmul_run(matmul_t const *m) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, m->src}, {DNNL_ARG_WEIGHTS, m->weights}, {DNNL_ARG_DST, m->dst}};
    return dnnl_primitive_execute(m->primitive, m->stream, 3, args) == dnnl_success && dnnl_stream_wait(m->stream) == dnnl_success;
}

static int matmul_main(double budget) {
    size_t const ms[] = {16, 32, 64, 128};
    size_t const nk[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}, {2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    size_t const max_a = 128 * 3072, max_w = 3072 * 3072;
    float *a = malloc(max_a * 4), *w = malloc(max_w * 4), *wt = malloc(max_w * 4), *c = malloc(128 * 3072 * 4);
    float *ref = malloc(128 * 3072 * 4), *ref_bf16 = malloc(128 * 3072 * 4);
    uint16_t *ab = malloc(max_a * 2), *wb = malloc(max_w * 2), *wv = malloc(max_w * 2);
    dnnl_engine_t engine = NULL;
    dnnl_stream_t stream = NULL;
    if (!a || !w || !wt || !c || !ref || !ref_bf16 || !ab || !wb || !wv ||
        dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        return 1;
    for (size_t i = 0; i < max_a; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f, ab[i] = to_bf16(a[i]);
    for (size_t i = 0; i < max_w; ++i) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f, wb[i] = to_bf16(w[i]);
    printf("threads at start: %d\n", threads_now());
    printf("%4s %5s %5s | %9s %10s %10s %6s | %9s %10s %10s %6s | %8s %8s  (GFLOP/s, best of 6 alternations; ratio: the "
           "matmul primitive over libxsmm; err: worst vs dnnl's GEMM function)\n",
           "M", "N", "K", "sgemm", "matmul f32", "xsmm f32", "ratio", "gemm bf16", "matmul bf16", "xsmm bf16", "ratio",
           "err f32", "err bf16");
    int mismatches = 0;
    enum { S_sgemm, S_matmul, S_xsmm, B_gemm, B_matmul, B_xsmm, S_count };
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
        for (size_t s = 0; s < sizeof nk / sizeof *nk; ++s) {
            size_t M = ms[mi], N = nk[s][0], K = nk[s][1];
            for (size_t k = 0; k < K; ++k)
                for (size_t n = 0; n < N; ++n) wt[k * N + n] = w[n * K + k], wv[(k / 2) * N * 2 + n * 2 + k % 2] = wb[n * K + k];
            matmul_t f32, b16;
            int have_f32 = matmul_create(&f32, engine, stream, M, N, K, 0, w, a, c);
            int have_b16 = matmul_create(&b16, engine, stream, M, N, K, 1, wb, ab, c);
            int done[S_count] = {0};
            double best[S_count], err[S_count] = {0};
            int bad = 0;
            for (int sys = 0; sys < S_count; ++sys) best[sys] = 1e30;
            for (int round = -1; round < 6; ++round) /* round -1: one checked call each */
                for (int sys = 0; sys < S_count; ++sys) {
                    if (round >= 0 && !done[sys]) continue;
                    size_t reps = 0;
                    double start = now(), t = 0;
                    if (round < 0) fill_nan(c, M * N);
                    do {
                        int ok = 0;
                        if (sys == S_sgemm) ok = dnnl_sgemm('N', 'T', M, N, K, 1.f, a, K, w, K, 0.f, c, N) == dnnl_success;
                        else if (sys == S_matmul) ok = have_f32 && matmul_run(&f32);
                        else if (sys == S_xsmm) ok = xsmm_f32(M, N, K, wt, N, a, K, c, N);
                        else if (sys == B_gemm) ok = dnnl_gemm_bf16bf16f32('N', 'T', M, N, K, 1.f, ab, K, wb, K, 0.f, c, N) == dnnl_success;
                        else if (sys == B_matmul) ok = have_b16 && matmul_run(&b16);
                        else ok = xsmm_bf16(M, N, K, wv, ab, c);
                        if (round < 0) { done[sys] = ok; break; }
                        ++reps, t = now() - start;
                    } while (t < budget / 12);
                    if (round < 0) {
                        if (!done[sys]) continue;
                        if (sys == S_sgemm) memcpy(ref, c, M * N * 4);
                        else if (sys == B_gemm) memcpy(ref_bf16, c, M * N * 4);
                        else if (sys < B_gemm || done[B_gemm]) {
                            err[sys] = relative_error(c, sys < B_gemm ? ref : ref_bf16, M, N, N);
                            if (!(err[sys] <= CHECK_LIMIT))
                                bad = 1, printf("MISMATCH: system %d at M %zu N %zu K %zu: %.2e\n", sys, M, N, K, err[sys]);
                        }
                        continue;
                    }
                    if (t / reps < best[sys]) best[sys] = t / reps;
                }
            double flops = 2.0 * M * N * K / 1e9, r[S_count];
            for (int sys = 0; sys < S_count; ++sys) r[sys] = done[sys] ? flops / best[sys] : 0;
            double ef = err[S_matmul] > err[S_xsmm] ? err[S_matmul] : err[S_xsmm];
            double eb = err[B_matmul] > err[B_xsmm] ? err[B_matmul] : err[B_xsmm];
            printf("%4zu %5zu %5zu | %9.1f %10.1f %10.1f %6.2f | %9.1f %10.1f %10.1f %6.2f | %8.1e %8.1e%s\n", M, N, K, r[S_sgemm],
                   r[S_matmul], r[S_xsmm], r[S_xsmm] > 0 ? r[S_matmul] / r[S_xsmm] : 0, r[B_gemm], r[B_matmul], r[B_xsmm],
                   r[B_xsmm] > 0 ? r[B_matmul] / r[B_xsmm] : 0, ef, eb, bad ? "  MISMATCH" : "");
            fflush(stdout);
            mismatches += bad;
            if (have_f32) matmul_free(&f32);
            if (have_b16) matmul_free(&b16);
        }
    printf("threads at end: %d\n", threads_now());
    if (mismatches) printf("RESULT CHECK FAILED: %d shapes\n", mismatches);
    else printf("result check passed: every product within %.0e of oneDNN's GEMM function\n", CHECK_LIMIT);
    dnnl_stream_destroy(stream), dnnl_engine_destroy(engine);
    free(a), free(w), free(wt), free(c), free(ref), free(ref_bf16), free(ab), free(wb), free(wv);
    return mismatches ? 1 : 0;
}

/* Main mode's columns: f32 libraries, then bf16 ones. */
enum { L_dnnl_f32, L_oblas_f32, L_blis_f32, L_xsmm_f32_lib, L_xsmmt_f32, L_dnnl_bf16, L_oblas_bf16, L_xsmm_bf16_lib, L_count };
static char const *const lib_names[L_count] = {"dnnl f32", "oblas f32", "blis f32", "xsmm f32",
                                                 "xsmmT f32", "dnnl bf16", "oblas bf16", "xsmm bf16"};

int main(int argc, char **argv) {
    double budget = 0.3;
    int tiles = argc >= 2 && strcmp(argv[argc - 1], "--tiles") == 0;
    int matmul = argc >= 2 && strcmp(argv[argc - 1], "--matmul") == 0;
    if (tiles || matmul) --argc;
    if (argc > 2 || (argc == 2 && !strict_real(argv[1], 0, 3600, &budget))) {
        fprintf(stderr, "usage: bench_gemm [SECONDS per shape, default 0.3] [--tiles | --matmul]\n");
        return 2;
    }
    omp_set_num_threads(1);
    openblas_set_num_threads(1);
    if (!blis_load()) return 1;
    libxsmm_init();
    printf("oneDNN %d.%d.%d; OpenBLAS %s; libxsmm %s, JIT target %s\n", dnnl_version()->major, dnnl_version()->minor,
           dnnl_version()->patch, openblas_get_config(), LIBXSMM_VERSION, libxsmm_get_target_arch());
    if (tiles) return tiles_main(budget);
    if (matmul) return matmul_main(budget);
    size_t ms[] = {16, 128, 1024, 8192};
    size_t nk[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}, {2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    size_t max = 8192 * 3072;
    float *a = malloc(max * 4), *w = malloc(3072 * 3072 * 4), *c = malloc(8192 * 3072 * 4);
    float *wt = malloc(3072 * 3072 * 4), *ref = malloc(8192 * 3072 * 4), *ref_bf16 = malloc(8192 * 3072 * 4);
    uint16_t *ab = malloc(max * 2), *wb = malloc(3072 * 3072 * 2), *wv = malloc(3072 * 3072 * 2);
    if (!a || !w || !c || !wt || !ref || !ref_bf16 || !ab || !wb || !wv) return 1;
    for (size_t i = 0; i < max; ++i) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f, ab[i] = to_bf16(a[i]);
    for (size_t i = 0; i < 3072 * 3072; ++i) w[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f, wb[i] = to_bf16(w[i]);
    printf("threads at start: %d\n", threads_now());
    printf("%6s %5s %5s | %9s %9s %6s %9s %6s %9s %6s %9s %6s | %9s %10s %6s %9s %6s | %8s %8s  (GFLOP/s; ratio: dnnl over "
           "the column before; err: worst library vs dnnl)\n",
           "M", "N", "K", "dnnl f32", "oblas f32", "ratio", "blis f32", "ratio", "xsmm f32", "ratio", "xsmmT f32", "ratio",
           "dnnl bf16", "oblas bf16", "ratio", "xsmm bf16", "ratio", "err f32", "err bf16");
    double worst_of[L_count] = {0};
    int mismatches = 0;
    for (size_t mi = 0; mi < sizeof ms / sizeof *ms; ++mi)
        for (size_t s = 0; s < sizeof nk / sizeof *nk; ++s) {
            size_t M = ms[mi], N = nk[s][0], K = nk[s][1];
            /* libxsmm's operands, packed once per shape outside the timing: W^T [K][N], and W^T in VNNI [K/2][N][2] */
            for (size_t k = 0; k < K; ++k)
                for (size_t n = 0; n < N; ++n) wt[k * N + n] = w[n * K + k], wv[(k / 2) * N * 2 + n * 2 + k % 2] = wb[n * K + k];
            char ta = 'T', tb = 'N';
            libxsmm_blasint hm = (libxsmm_blasint)N, hn = (libxsmm_blasint)M, hk = (libxsmm_blasint)K, hlda = hk, hldb = hk,
                            hldc = hm;
            float one = 1, zero = 0;
            libxsmm_gemm_blob blob;
            libxsmm_gemm_handle *handle = libxsmm_gemm_handle_init(&blob, LIBXSMM_GEMM_PRECISION_F32, LIBXSMM_GEMM_PRECISION_F32,
                                                                   &ta, &tb, &hm, &hn, &hk, &hlda, &hldb, &hldc, &one, &zero,
                                                                   LIBXSMM_GEMM_HANDLE_FLAG_AUTO, 1);
            void *scratch = handle ? malloc(libxsmm_gemm_handle_get_scratch_size(handle) + 64) : NULL;
            double r[L_count], err[L_count] = {0};
            int bad = 0;
            for (int lib = 0; lib < L_count; ++lib) {
                int done = 0;
                size_t reps = 0;
                double start = 0, t = 0;
                fill_nan(c, M * N);
                for (int timing = 0; timing < 2; ++timing) { /* one checked call, then the timed ones */
                    if (timing) start = now();
                    do {
                        if (lib == L_dnnl_f32) done = dnnl_sgemm('N', 'T', M, N, K, 1.f, a, K, w, K, 0.f, c, N) == dnnl_success;
                        else if (lib == L_oblas_f32)
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.f, a, K, w, K, 0.f, c, N), done = 1;
                        else if (lib == L_blis_f32) blis_gemm(M, N, K, a, K, w, K, 1, c, N), done = 1;
                        else if (lib == L_xsmm_f32_lib) done = xsmm_f32(M, N, K, wt, N, a, K, c, N);
                        else if (lib == L_xsmmt_f32) {
                            if ((done = handle != NULL)) libxsmm_gemm_thread(handle, scratch, w, a, c, 0, 1);
                        } else if (lib == L_dnnl_bf16)
                            done = dnnl_gemm_bf16bf16f32('N', 'T', M, N, K, 1.f, ab, K, wb, K, 0.f, c, N) == dnnl_success;
                        else if (lib == L_oblas_bf16) done = 0; /* Debian's OpenBLAS 0.3.21 is built without bf16 (no cblas_sbgemm) */
                        else done = xsmm_bf16(M, N, K, wv, ab, c);
                        if (!done || !timing) break;
                        ++reps; t = now() - start;
                    } while (t < budget);
                    if (!done) break;
                    if (timing) continue;
                    if (lib == L_dnnl_f32) memcpy(ref, c, M * N * 4);
                    else if (lib == L_dnnl_bf16) memcpy(ref_bf16, c, M * N * 4);
                    else if (lib < L_dnnl_bf16 || r[L_dnnl_bf16] > 0) { /* bf16 is checked against oneDNN's bf16 when it ran */
                        err[lib] = relative_error(c, lib < L_dnnl_bf16 ? ref : ref_bf16, M, N, N);
                        if (!(err[lib] <= worst_of[lib])) worst_of[lib] = err[lib];
                        if (!(err[lib] <= CHECK_LIMIT))
                            bad = 1, printf("MISMATCH: %s at M %zu N %zu K %zu: max error %.2e against oneDNN's (limit %.0e)\n",
                                            lib_names[lib], M, N, K, err[lib], CHECK_LIMIT);
                    }
                }
                r[lib] = !done || !reps ? 0 : 2.0 * M * N * K * reps / t / 1e9;
            }
            double err_f32 = 0;
            for (int lib = L_oblas_f32; lib < L_dnnl_bf16; ++lib)
                if (!(err[lib] <= err_f32)) err_f32 = err[lib];
            char err_bf16[16] = "-"; /* unchecked when oneDNN's bf16 or libxsmm's refused */
            if (r[L_dnnl_bf16] > 0 && r[L_xsmm_bf16_lib] > 0) snprintf(err_bf16, sizeof err_bf16, "%.1e", err[L_xsmm_bf16_lib]);
            mismatches += bad;
            printf("%6zu %5zu %5zu | %9.1f %9.1f %6.2f %9.1f %6.2f %9.1f %6.2f %9.1f %6.2f | %9.1f %10.1f %6.2f %9.1f %6.2f | %8.1e "
                   "%8s%s\n",
                   M, N, K, r[L_dnnl_f32], r[L_oblas_f32], r[L_dnnl_f32] / r[L_oblas_f32], r[L_blis_f32], r[L_dnnl_f32] / r[L_blis_f32],
                   r[L_xsmm_f32_lib], r[L_dnnl_f32] / r[L_xsmm_f32_lib], r[L_xsmmt_f32], r[L_dnnl_f32] / r[L_xsmmt_f32], r[L_dnnl_bf16],
                   r[L_oblas_bf16], r[L_dnnl_bf16] / r[L_oblas_bf16], r[L_xsmm_bf16_lib], r[L_dnnl_bf16] / r[L_xsmm_bf16_lib], err_f32,
                   err_bf16, bad ? "  MISMATCH" : "");
            fflush(stdout);
            free(scratch);
        }
    printf("threads at end: %d\n", threads_now());
    printf("largest error against oneDNN over all shapes:");
    for (int lib = L_oblas_f32; lib < L_count; ++lib)
        if (lib != L_dnnl_bf16 && lib != L_oblas_bf16) printf(" %s %.1e", lib_names[lib], worst_of[lib]);
    printf("\n");
    if (mismatches) printf("RESULT CHECK FAILED: %d shapes where a library's C is more than %.0e off oneDNN's\n", mismatches, CHECK_LIMIT);
    else printf("result check passed: every library within %.0e of oneDNN on every shape\n", CHECK_LIMIT);
    free(a), free(w), free(c), free(wt), free(ref), free(ref_bf16), free(ab), free(wb), free(wv);
    return mismatches ? 1 : 0;
}
