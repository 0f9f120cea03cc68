/**
 *  @file   gemm.c
 *  @brief  Matrix products of one thread: oneDNN for every class but SERIAL, single-threaded on the
 *          calling thread (the engine's threads parallelise); portable loops for SERIAL.
 *
 *  oneDNN was chosen by measurement against OpenBLAS (bench/bench_gemm.c; bench/RESULTS.md): faster
 *  or level in f32 on these shapes, and the only one of the two with a bf16 GEMM in Debian (Debian's
 *  OpenBLAS 0.3.21 is built without `cblas_sbgemm`). Debian's oneDNN threads through OpenMP
 *  (libgomp): a call from a thread whose OpenMP `nthreads` exceeds one would start a team of OpenMP
 *  threads of its own, so every engine thread sets its own `nthreads` to one for the duration of a
 *  verb (`uform_gemm_thread_enter`) and restores it after, through libgomp's functions found at run
 *  time (libdnnl loads libgomp), so the library itself links no OpenMP.
 *
 *  Weights in bf16 multiply as bf16 through `dnnl_gemm_bf16bf16f32` on classes with native bf16
 *  (AVX-512 BF16, AMX); elsewhere, and for f16 weights (oneDNN 2.6 has no f16 GEMM), a tile of
 *  weights widens to f32 in the thread's scratch first.
 */
#define _GNU_SOURCE
#include "kernels/kernels.h"

#include <dlfcn.h>    // `dlsym`
#include <dnnl.h>     // `dnnl_sgemm`
#include <pthread.h>  // `pthread_once`

/* Exported by libdnnl 2.6 (row-major, as `dnnl_sgemm`) but not declared in its public header. */
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                    uint16_t const *A, dnnl_dim_t lda, uint16_t const *B, dnnl_dim_t ldb, float beta,
                                    float *C, dnnl_dim_t ldc);

typedef int (*omp_get_max_threads_t)(void);
typedef void (*omp_set_num_threads_t)(int);
static omp_get_max_threads_t omp_get_max_threads_fn;
static omp_set_num_threads_t omp_set_num_threads_fn;
static pthread_once_t omp_once = PTHREAD_ONCE_INIT;

static void omp_resolve(void) {
    omp_get_max_threads_fn = (omp_get_max_threads_t)dlsym(RTLD_DEFAULT, "omp_get_max_threads");
    omp_set_num_threads_fn = (omp_set_num_threads_t)dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (!omp_get_max_threads_fn || !omp_set_num_threads_fn) omp_get_max_threads_fn = NULL, omp_set_num_threads_fn = NULL;
}

int uform_gemm_thread_enter(void) {
    pthread_once(&omp_once, omp_resolve);
    if (!omp_get_max_threads_fn) return 0;
    int previous = omp_get_max_threads_fn();
    if (previous != 1) omp_set_num_threads_fn(1);
    return previous;
}

void uform_gemm_thread_leave(int previous) {
    if (omp_set_num_threads_fn && previous > 1) omp_set_num_threads_fn(previous);
}

static int gemm_widens(uform_gemm_t const *gemm, uform_dtype_t dtype) {
    return dtype == uform_dtype_f16_k || (dtype == uform_dtype_bf16_k && !(gemm->use_library && gemm->native_bf16));
}

size_t uform_gemm_scratch_bytes(uform_gemm_t const *gemm, uform_dtype_t dtype, size_t rows, size_t cols, size_t depth) {
    if (dtype == uform_dtype_f32_k) return 0;
    if (gemm_widens(gemm, dtype)) return cols * depth * sizeof(float);
    return rows * depth * sizeof(uint16_t);
}

int uform_gemm_f32(int transposed, size_t m, size_t n, size_t k, float alpha, float const *a, size_t lda,
                   float const *b, size_t ldb, float *c, size_t ldc) {
    return dnnl_sgemm('N', transposed ? 'T' : 'N', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, alpha, a,
                      (dnnl_dim_t)lda, b, (dnnl_dim_t)ldb, 0.0f, c, (dnnl_dim_t)ldc) == dnnl_success;
}

static void sgemm(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, float const *a, size_t lda,
                  float const *w, size_t ldw, float *c, size_t ldc) {
    if (gemm->use_library &&
        dnnl_sgemm('N', 'T', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, 1.0f, a, (dnnl_dim_t)lda, w,
                   (dnnl_dim_t)ldw, 0.0f, c, (dnnl_dim_t)ldc) == dnnl_success)
        return;
    gemm->kernels->gemm_portable(m, n, k, a, lda, w, ldw, c, ldc);
}

void uform_gemm_tile(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, float const *a, size_t lda,
                     void const *w, uform_dtype_t dtype, size_t ldw, float *c, size_t ldc, void *scratch) {
    if (m == 0 || n == 0) return;
    if (dtype == uform_dtype_f32_k) {
        sgemm(gemm, m, n, k, a, lda, (float const *)w, ldw, c, ldc);
        return;
    }
    uint16_t const *w16 = (uint16_t const *)w;
    if (gemm_widens(gemm, dtype)) {
        float *wide = (float *)scratch;
        for (size_t j = 0; j < n; ++j)
            (dtype == uform_dtype_f16_k ? gemm->kernels->f16_to_f32 : gemm->kernels->bf16_to_f32)(w16 + j * ldw, wide + j * k, k);
        sgemm(gemm, m, n, k, a, lda, wide, k, c, ldc);
        return;
    }
    uint16_t *narrow = (uint16_t *)scratch;
    for (size_t i = 0; i < m; ++i) gemm->kernels->f32_to_bf16(a + i * lda, narrow + i * k, k);
    if (dnnl_gemm_bf16bf16f32('N', 'T', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, 1.0f, narrow, (dnnl_dim_t)k, w16,
                              (dnnl_dim_t)ldw, 0.0f, c, (dnnl_dim_t)ldc) == dnnl_success)
        return;
    /* oneDNN refused (it should not): multiply exactly, one weight row at a time. */
    float row[256];
    for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < m; ++i) {
            float sum = 0.0f;
            for (size_t p0 = 0; p0 < k; p0 += 256) {
                size_t len = k - p0 < 256 ? k - p0 : 256;
                gemm->kernels->bf16_to_f32(w16 + j * ldw + p0, row, len);
                for (size_t p = 0; p < len; ++p) sum += a[i * lda + p0 + p] * row[p];
            }
            c[i * ldc + j] = sum;
        }
}
