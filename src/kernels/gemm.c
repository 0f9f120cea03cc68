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
 *
 *  On AMX classes (Sapphire Rapids and above) the same products go through oneDNN's matmul primitive
 *  instead (`gemm->matmul`), the only API of oneDNN 2.6 that reaches AMX tiles (brgemm); its GEMM
 *  functions stop at AVX-512 BF16. A primitive has fixed M, N, K and strides (a runtime M makes
 *  oneDNN fall back from brgemm to its GEMM), so primitives are created lazily per tile shape, kept
 *  in a process-wide cache behind a mutex (bounded: past `MATMUL_ENTRIES_MAX` shapes, or where oneDNN
 *  refuses, the GEMM functions serve), and executed concurrently by every thread on its own stream
 *  with its own scratchpad (user scratchpad mode) and its own memory objects. Weights stay in the
 *  tower's [out][in] layout, described as the transposed B by strides. `UFORM_GEMM_MATMUL=1` forces
 *  the primitive on every library class (bf16 where the class multiplies bf16 natively, else f32).
 */
#define _GNU_SOURCE
#include "kernels/kernels.h"
#include "internal.h" // `uform_global_lock`: the primitive cache's lock is taken around fork like every global lock

#include <dlfcn.h>    // `dlsym`
#include <dnnl.h>     // `dnnl_sgemm`, the matmul primitive
#include <stdio.h>    // `snprintf`
#include <pthread.h>  // `pthread_once`
#include <stdlib.h>   // `getenv`
#include <string.h>   // `strcmp`

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

/* The matmul primitive path. */

#define MATMUL_ENTRIES_MAX 1024
#define MATMUL_RECENT 64

typedef struct matmul_entry_t {
    dnnl_data_type_t type;
    size_t m, n, k, lda, ldw, ldc;
    dnnl_primitive_t primitive; /**< NULL: oneDNN refused this shape. */
    dnnl_memory_desc_t src, weights, dst;
    size_t scratchpad_bytes;
} matmul_entry_t;

/* A shape this thread ran lately, with its memory objects (their data handles set per call). */
typedef struct matmul_recent_t {
    matmul_entry_t const *entry;
    dnnl_memory_t src, weights, dst, pad;
} matmul_recent_t;

typedef struct matmul_thread_t {
    dnnl_stream_t stream;
    void *scratchpad;
    size_t scratchpad_bytes;
    float *dense; /**< A dense dst for tiles whose rows lie apart: brgemm refuses strided dst. */
    size_t dense_bytes;
    matmul_recent_t recent[MATMUL_RECENT];
    struct matmul_thread_t *prev, *next;
} matmul_thread_t;

static matmul_entry_t *matmul_entries[MATMUL_ENTRIES_MAX]; /* Never freed: reachable until exit. */
static size_t matmul_count;
static matmul_thread_t *matmul_threads; /* Live thread states, so they stay reachable. */
static struct { char name[48]; size_t shapes; } matmul_impls[8]; /* Distinct implementations chosen. */
static char matmul_impl[8 * 64];
static dnnl_engine_t matmul_engine;
static pthread_key_t matmul_key;
static int matmul_ready;
static pthread_once_t matmul_once = PTHREAD_ONCE_INIT;

static void matmul_recent_clear(matmul_recent_t *recent) {
    dnnl_memory_t memories[4] = {recent->src, recent->weights, recent->dst, recent->pad};
    for (int i = 0; i < 4; ++i)
        if (memories[i]) dnnl_memory_destroy(memories[i]);
    *recent = (matmul_recent_t){0};
}

static void matmul_thread_free(void *opaque) {
    matmul_thread_t *state = (matmul_thread_t *)opaque;
    uform_global_lock(uform_global_lock_matmul_k);
    if (state->prev) state->prev->next = state->next;
    else matmul_threads = state->next;
    if (state->next) state->next->prev = state->prev;
    uform_global_unlock(uform_global_lock_matmul_k);
    for (size_t i = 0; i < MATMUL_RECENT; ++i) matmul_recent_clear(&state->recent[i]);
    if (state->stream) dnnl_stream_destroy(state->stream);
    free(state->scratchpad);
    free(state->dense);
    free(state);
}

static void matmul_init(void) {
    if (pthread_key_create(&matmul_key, matmul_thread_free) != 0) return;
    if (dnnl_engine_create(&matmul_engine, dnnl_cpu, 0) != dnnl_success) return;
    matmul_ready = 1;
}

int uform_gemm_matmul_for(uform_cpu_class_t cpu_class) {
    char const *forced = getenv("UFORM_GEMM_MATMUL");
    if (forced && strcmp(forced, "1") == 0) return cpu_class != uform_cpu_class_serial_k;
    if (forced && strcmp(forced, "0") == 0) return 0;
    return cpu_class == uform_cpu_class_intel_sapphire_k || cpu_class == uform_cpu_class_intel_granite_k ||
           cpu_class == uform_cpu_class_intel_diamond_k;
}

char const *uform_gemm_matmul_impl(void) {
    uform_global_lock(uform_global_lock_matmul_k);
    size_t used = 0;
    matmul_impl[0] = 0;
    for (size_t i = 0; i < 8 && matmul_impls[i].shapes; ++i)
        used += (size_t)snprintf(matmul_impl + used, sizeof matmul_impl - used, "%s%s (%zu shapes)", i ? ", " : "",
                                 matmul_impls[i].name, matmul_impls[i].shapes);
    char const *impl = matmul_impl[0] ? matmul_impl : NULL;
    uform_global_unlock(uform_global_lock_matmul_k);
    return impl;
}

/* Creates the primitive of one shape (NULL primitive where oneDNN refuses); called under the lock. */
static matmul_entry_t *matmul_create(dnnl_data_type_t type, size_t m, size_t n, size_t k, size_t lda, size_t ldw,
                                     size_t ldc) {
    matmul_entry_t *entry = (matmul_entry_t *)calloc(1, sizeof *entry);
    if (!entry) return NULL;
    *entry = (matmul_entry_t){.type = type, .m = m, .n = n, .k = k, .lda = lda, .ldw = ldw, .ldc = ldc};
    dnnl_dims_t src_dims = {(dnnl_dim_t)m, (dnnl_dim_t)k}, src_strides = {(dnnl_dim_t)lda, 1};
    dnnl_dims_t w_dims = {(dnnl_dim_t)k, (dnnl_dim_t)n}, w_strides = {1, (dnnl_dim_t)ldw}; /* [out][in]: `ba` */
    dnnl_dims_t dst_dims = {(dnnl_dim_t)m, (dnnl_dim_t)n}, dst_strides = {(dnnl_dim_t)ldc, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&entry->src, 2, src_dims, type, src_strides) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&entry->weights, 2, w_dims, type, w_strides) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&entry->dst, 2, dst_dims, dnnl_f32, dst_strides) != dnnl_success ||
        dnnl_matmul_desc_init(&desc, &entry->src, &entry->weights, NULL, &entry->dst) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success)
        return entry;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &desc, attr, matmul_engine, NULL) == dnnl_success) {
        char const *impl = NULL;
        if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
            for (size_t i = 0; i < 8; ++i)
                if (!matmul_impls[i].shapes || strncmp(matmul_impls[i].name, impl, sizeof matmul_impls[i].name - 1) == 0) {
                    if (!matmul_impls[i].shapes) snprintf(matmul_impls[i].name, sizeof matmul_impls[i].name, "%s", impl);
                    ++matmul_impls[i].shapes;
                    break;
                }
        dnnl_memory_desc_t const *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        entry->scratchpad_bytes = pad ? dnnl_memory_desc_get_size(pad) : 0;
        if (dnnl_primitive_create(&entry->primitive, pd) != dnnl_success) entry->primitive = NULL;
        dnnl_primitive_desc_destroy(pd);
    }
    dnnl_primitive_attr_destroy(attr);
    return entry;
}

static matmul_thread_t *matmul_thread(void) {
    matmul_thread_t *state = (matmul_thread_t *)pthread_getspecific(matmul_key);
    if (state) return state;
    state = (matmul_thread_t *)calloc(1, sizeof *state);
    if (!state) return NULL;
    if (dnnl_stream_create(&state->stream, matmul_engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(matmul_key, state) != 0) {
        if (state->stream) dnnl_stream_destroy(state->stream);
        free(state);
        return NULL;
    }
    uform_global_lock(uform_global_lock_matmul_k);
    state->next = matmul_threads;
    if (matmul_threads) matmul_threads->prev = state;
    matmul_threads = state;
    uform_global_unlock(uform_global_lock_matmul_k);
    return state;
}

static int matmul_execute(matmul_thread_t *state, dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a,
                          size_t lda, void const *w, size_t ldw, float *c, size_t ldc);

/* C = A W^T through the primitive of this shape; 0 where it is unavailable (the caller falls back). */
static int matmul_run_shape(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                            void const *w, size_t ldw, float *c, size_t ldc);

/* Rows split into a multiple of MATMUL_ROWS_STEP and the rest, so the shapes a pass of texts of any
 * lengths creates stay few (a primitive per tile size, plus one per remainder below the step). */
#define MATMUL_ROWS_STEP 32

static int matmul_run(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                      void const *w, size_t ldw, float *c, size_t ldc) {
    size_t main_rows = m / MATMUL_ROWS_STEP * MATMUL_ROWS_STEP, element = type == dnnl_f32 ? 4 : 2;
    if (main_rows == 0 || main_rows == m) return matmul_run_shape(type, m, n, k, a, lda, w, ldw, c, ldc);
    return matmul_run_shape(type, main_rows, n, k, a, lda, w, ldw, c, ldc) &&
           matmul_run_shape(type, m - main_rows, n, k, (char const *)a + main_rows * lda * element, lda, w, ldw,
                            c + main_rows * ldc, ldc);
}

static int matmul_run_shape(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                            void const *w, size_t ldw, float *c, size_t ldc) {
    pthread_once(&matmul_once, matmul_init);
    if (!matmul_ready) return 0;
    matmul_thread_t *state = matmul_thread();
    if (!state) return 0;
    /* oneDNN 2.6's brgemm takes only a dense dst (with `ldc` > `n` it picks gemm:jit): such tiles go
     * through a dense buffer of the thread and are copied into place. */
    float *out = c;
    size_t ldo = ldc;
    if (ldc != n) {
        if (m * n * sizeof(float) > state->dense_bytes) {
            void *grown = NULL;
            if (posix_memalign(&grown, 64, m * n * sizeof(float)) != 0) return 0;
            free(state->dense);
            state->dense = (float *)grown, state->dense_bytes = m * n * sizeof(float);
        }
        out = state->dense, ldo = n;
    }
    if (!matmul_execute(state, type, m, n, k, a, lda, w, ldw, out, ldo)) return 0;
    if (out != c)
        for (size_t i = 0; i < m; ++i) memcpy(c + i * ldc, out + i * n, n * sizeof(float));
    return 1;
}

static int matmul_execute(matmul_thread_t *state, dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a,
                          size_t lda, void const *w, size_t ldw, float *c, size_t ldc) {
    /* Strides too: Q/K/V tiles (ldc 3 x hidden) and the output product's (ldc hidden) share m, n, k. */
    matmul_recent_t *recent =
        &state->recent[(m * 131u + n * 31u + k * 7u + lda * 17u + ldw * 13u + ldc * 11u + (size_t)type) % MATMUL_RECENT];
    matmul_entry_t const *entry = recent->entry;
    if (!entry || entry->type != type || entry->m != m || entry->n != n || entry->k != k || entry->lda != lda ||
        entry->ldw != ldw || entry->ldc != ldc) {
        entry = NULL;
        uform_global_lock(uform_global_lock_matmul_k);
        for (size_t i = 0; i < matmul_count && !entry; ++i) {
            matmul_entry_t const *e = matmul_entries[i];
            if (e->type == type && e->m == m && e->n == n && e->k == k && e->lda == lda && e->ldw == ldw &&
                e->ldc == ldc)
                entry = e;
        }
        if (!entry && matmul_count < MATMUL_ENTRIES_MAX) {
            matmul_entry_t *created = matmul_create(type, m, n, k, lda, ldw, ldc);
            if (created) matmul_entries[matmul_count++] = created, entry = created;
        }
        uform_global_unlock(uform_global_lock_matmul_k);
        if (!entry || !entry->primitive) return 0;
        matmul_recent_clear(recent);
        dnnl_memory_desc_t pad_md;
        dnnl_dims_t pad_dims = {(dnnl_dim_t)(entry->scratchpad_bytes ? entry->scratchpad_bytes : 1)};
        if (dnnl_memory_create(&recent->src, &entry->src, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success ||
            dnnl_memory_create(&recent->weights, &entry->weights, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success ||
            dnnl_memory_create(&recent->dst, &entry->dst, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success ||
            dnnl_memory_desc_init_by_tag(&pad_md, 1, pad_dims, dnnl_u8, dnnl_a) != dnnl_success ||
            dnnl_memory_create(&recent->pad, &pad_md, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success) {
            matmul_recent_clear(recent);
            return 0;
        }
        recent->entry = entry;
    }
    if (entry->scratchpad_bytes > state->scratchpad_bytes) {
        void *grown = NULL;
        if (posix_memalign(&grown, 64, entry->scratchpad_bytes) != 0) return 0;
        free(state->scratchpad);
        state->scratchpad = grown, state->scratchpad_bytes = entry->scratchpad_bytes;
    }
    if (dnnl_memory_set_data_handle(recent->src, (void *)a) != dnnl_success ||
        dnnl_memory_set_data_handle(recent->weights, (void *)w) != dnnl_success ||
        dnnl_memory_set_data_handle(recent->dst, c) != dnnl_success ||
        dnnl_memory_set_data_handle(recent->pad, entry->scratchpad_bytes ? state->scratchpad : NULL) != dnnl_success)
        return 0;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, recent->src}, {DNNL_ARG_WEIGHTS, recent->weights},
                               {DNNL_ARG_DST, recent->dst}, {DNNL_ARG_SCRATCHPAD, recent->pad}};
    return dnnl_primitive_execute(entry->primitive, state->stream, 4, args) == dnnl_success &&
           dnnl_stream_wait(state->stream) == dnnl_success;
}

static void sgemm(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, float const *a, size_t lda,
                  float const *w, size_t ldw, float *c, size_t ldc) {
    if (gemm->use_library && gemm->matmul && matmul_run(dnnl_f32, m, n, k, a, lda, w, ldw, c, ldc)) return;
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
    if (gemm->matmul && matmul_run(dnnl_bf16, m, n, k, narrow, k, w16, ldw, c, ldc)) return;
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

uform_gemm_t uform_gemm_for(uform_cpu_class_t cpu_class) {
    uform_gemm_t gemm = {.kernels = uform_kernels_for(cpu_class),
                         .use_library = cpu_class != uform_cpu_class_serial_k,
                         .native_bf16 = uform_kernels_native_bf16(cpu_class),
                         .matmul = uform_gemm_matmul_for(cpu_class)};
    return gemm;
}
