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
 *  On AVX-512 classes the same products go through oneDNN's matmul primitive instead (`gemm->matmul`):
 *  on AMX classes (Sapphire Rapids and above) every product, the primitive being the only API of
 *  oneDNN 2.6 that reaches AMX tiles (brgemm; its GEMM functions stop at AVX-512 BF16); without AMX,
 *  bf16 products and the f32 ones the packed GEMM functions serve worse (tiles of under
 *  UFORM_GEMM_SGEMM_ROWS_MIN rows, and slices their layout would pad: the batch-1 plan's), measured
 *  on a Zen 4 and on the host with lower classes pinned (bench/RESULTS.md). A primitive has fixed M, N, K and strides (a runtime M makes
 *  oneDNN fall back from brgemm to its GEMM), so primitives are created lazily per tile shape, kept
 *  in a process-wide cache behind a mutex (bounded: past `MATMUL_ENTRIES_MAX` shapes, or where oneDNN
 *  refuses, the GEMM functions serve), and executed concurrently by every thread on its own stream
 *  with its own scratchpad (user scratchpad mode) and its own memory objects. Weights stay in the
 *  tower's [out][in] layout, described as the transposed B by strides; pinned weights (a model's
 *  replicas: `uform_gemm_pin`) are also kept packed in the primitive's own layout, once per slice,
 *  so oneDNN does not pack them again on every call (see "Pinned weights" below).
 *  `UFORM_GEMM_MATMUL=1` forces the primitive first for every product on every library class (bf16
 *  where the class multiplies bf16 natively, else f32), `=0` keeps it off. Off AMX, pinned f32
 *  weights are kept packed for oneDNN's packed GEMM ("f32 weights packed once" below), which takes
 *  the f32 products of 32 rows and more first.
 *
 *  Where bf16 multiplies natively, a pass may hand A over in bf16 (`uform_gemm_tile_bf16`), converted
 *  once by the phase that produced it, instead of every tile converting the rows it reads. The image
 *  pass's bf16 attention products may take the primitive too (`uform_gemm_bf16_with`, behind
 *  UFORM_ATTENTION_MATMUL=1): oneDNN's GEMM functions never reach AMX.
 */
#define _GNU_SOURCE
#include "kernels/kernels.h"
#include "internal.h" // `uform_global_lock`: the primitive cache's lock is taken around fork like every global lock

#include <dlfcn.h>    // `dlsym`
#include <dnnl.h>     // `dnnl_sgemm`, the matmul primitive
#include <stdio.h>    // `snprintf`
#include <pthread.h>  // `pthread_once`, `pthread_sigmask`
#include <signal.h>   // `sigfillset`
#include <stdlib.h>   // `getenv`
#include <stdatomic.h> // the pins' generation
#include <string.h>   // `strcmp`
#include <unistd.h>   // `sysconf`

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

void uform_gemm_thread_enter(uform_gemm_thread_t *saved) {
    sigset_t asynchronous;
    sigfillset(&asynchronous);
    int const synchronous[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof synchronous / sizeof synchronous[0]; ++i) sigdelset(&asynchronous, synchronous[i]);
    pthread_sigmask(SIG_BLOCK, &asynchronous, &saved->signals);
    saved->omp_threads = 0;
    pthread_once(&omp_once, omp_resolve);
    if (!omp_get_max_threads_fn) return;
    saved->omp_threads = omp_get_max_threads_fn();
    if (saved->omp_threads != 1) omp_set_num_threads_fn(1);
}

void uform_gemm_thread_leave(uform_gemm_thread_t const *saved) {
    if (omp_set_num_threads_fn && saved->omp_threads > 1) omp_set_num_threads_fn(saved->omp_threads);
    pthread_sigmask(SIG_SETMASK, &saved->signals, NULL);
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

int uform_gemm_bf16(int transposed, size_t m, size_t n, size_t k, float alpha, uint16_t const *a, size_t lda,
                    uint16_t const *b, size_t ldb, float *c, size_t ldc) {
    return dnnl_gemm_bf16bf16f32('N', transposed ? 'T' : 'N', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, alpha, a,
                                 (dnnl_dim_t)lda, b, (dnnl_dim_t)ldb, 0.0f, c, (dnnl_dim_t)ldc) == dnnl_success;
}

static int matmul_run_as(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                         void const *w, size_t ldw, float *c, size_t ldc, int stable, int rows_k, float alpha);

/* A fused epilogue's post-ops (`uform_gemm_epilogue_t`), as bits of a primitive's key. */
enum { epilogue_bias_k = 1, epilogue_gelu_k = 2, epilogue_scale_k = 4, epilogue_sum_k = 8, epilogue_bf16_k = 16 };

int uform_gemm_bf16_with(uform_gemm_t const *gemm, int transposed, size_t m, size_t n, size_t k, float alpha,
                         uint16_t const *a, size_t lda, uint16_t const *b, size_t ldb, float *c, size_t ldc) {
    if (gemm->matmul && gemm->attention_matmul && m && n &&
        matmul_run_as(dnnl_bf16, m, n, k, a, lda, b, ldb, c, ldc, 0, !transposed, alpha))
        return 1;
    return uform_gemm_bf16(transposed, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

/* The matmul primitive path. */

#define MATMUL_ENTRIES_MAX 1024
#define MATMUL_RECENT 512  /* a thread's recent shapes, with their memory objects */
#define PACKED_RECENT 2048 /* a thread's recent (weights, primitive) pairs and their packed weights */
#define PACKED_MAX 8192    /* packed slices of the process */
#define PINS_MAX 1024      /* pinned weight ranges of the process */
#define SGEMM_RECENT 512   /* a thread's recent slices packed for oneDNN's packed f32 GEMM */

/* A slot of a thread's direct-mapped tables: the keys (weight slices 16 columns apart, shapes 16
 * columns apart) differ in few, regular bits, which a plain sum of multiples folded onto a few slots
 * (every slice of a 3072-deep product onto one): every tile then missed and took the global lock. */
static size_t slot_of(uint64_t key, size_t slots) {
    key ^= key >> 30, key *= 0xBF58476D1CE4E5B9ull;
    key ^= key >> 27, key *= 0x94D049BB133111EBull;
    key ^= key >> 31;
    return (size_t)(key % slots);
}

typedef struct matmul_entry_t {
    dnnl_data_type_t type;
    size_t m, n, k, lda, ldw, ldc;
    int packed;                 /**< Weights in the layout the primitive chose (`weights`), packed once. */
    int rows_k;                 /**< B as [k][n] (`ab`, rows `ldw` apart: attention's V), not the weights' [n][k]. */
    float alpha;                /**< C = alpha A B (output scales where not 1). */
    unsigned epilogue;          /**< `epilogue_*_k` bits: post-ops inside the primitive, C's dtype. */
    dnnl_primitive_t primitive; /**< NULL: oneDNN refused this shape. */
    dnnl_memory_desc_t src, weights, dst, columns; /**< `columns`: [1][n] f32 (the bias, the scale). */
    size_t scratchpad_bytes;
} matmul_entry_t;

/* Weights packed once into a primitive's layout: a slice of pinned weights (`uform_gemm_pin`). */
typedef struct packed_t {
    void const *plain; /**< The slice's first weight row, [n][ldw] in the tower's layout. */
    size_t n, k, ldw;
    dnnl_data_type_t type;
    int sgemm;                 /**< oneDNN's packed-GEMM format (`sgemm_pack`), not a primitive's `layout`. */
    dnnl_memory_desc_t layout;
    void *data; /**< NULL: packing failed (the plain path serves). From `uform_numa_alloc` on `node`. */
    size_t bytes;
    int32_t node; /**< The pinned range's NUMA node (its replica's), -1 for any. */
} packed_t;

/* A shape this thread ran lately, with its memory objects (their data handles set per call). */
typedef struct matmul_recent_t {
    matmul_entry_t const *entry;
    dnnl_memory_t src, weights, dst, pad, bias, scale;
} matmul_recent_t;

typedef struct matmul_thread_t {
    dnnl_stream_t stream;
    void *scratchpad;
    size_t scratchpad_bytes;
    float *dense; /**< A dense dst for tiles whose rows lie apart: brgemm refuses strided dst. */
    size_t dense_bytes;
    matmul_recent_t recent[MATMUL_RECENT];
    struct { void const *plain; matmul_entry_t const *entry; packed_t const *packed; size_t generation; } packs[PACKED_RECENT];
    /* The slices this thread multiplied lately through oneDNN's packed GEMM (`sgemm_packed_run`). */
    struct { void const *plain; size_t n, k, ldw; packed_t const *packed; size_t generation; } sgemm_packs[SGEMM_RECENT];
    struct matmul_thread_t *prev, *next;
} matmul_thread_t;

static matmul_entry_t *matmul_entries[MATMUL_ENTRIES_MAX]; /* Never freed: reachable until exit. */
/* Pinned weights and their packed slices, under the same lock; `pins_generation` changes whenever a
 * pin adds a range or an unpin frees packed slices, so a thread's recent pairs are checked against it. */
static struct { char const *begin; size_t bytes; int32_t node; } pins[PINS_MAX];
static size_t pins_count;
static packed_t *packed_entries[PACKED_MAX];
static size_t packed_count, packed_bytes;
static atomic_size_t pins_generation;
static size_t matmul_count;
static matmul_thread_t *matmul_threads; /* Live thread states, so they stay reachable. */
static struct { char name[48]; size_t shapes; } matmul_impls[8]; /* Distinct implementations chosen. */
static char matmul_impl[8 * 64];
static dnnl_engine_t matmul_engine;
static pthread_key_t matmul_key;
static int matmul_ready;
static pthread_once_t matmul_once = PTHREAD_ONCE_INIT;

static void matmul_recent_clear(matmul_recent_t *recent) {
    dnnl_memory_t memories[6] = {recent->src, recent->weights, recent->dst, recent->pad, recent->bias, recent->scale};
    for (int i = 0; i < 6; ++i)
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

static void pack_budget_init(void);

static void matmul_init(void) {
    pack_budget_init();
    if (pthread_key_create(&matmul_key, matmul_thread_free) != 0) return;
    if (dnnl_engine_create(&matmul_engine, dnnl_cpu, 0) != dnnl_success) return;
    matmul_ready = 1;
}

int uform_gemm_matmul_for(uform_cpu_class_t cpu_class) {
    char const *forced = getenv("UFORM_GEMM_MATMUL");
    if (forced && strcmp(forced, "1") == 0) return cpu_class != uform_cpu_class_serial_k;
    if (forced && strcmp(forced, "0") == 0) return 0;
    /* AVX-512 classes: brgemm with weights packed once (bf16 with epilogues fused, where native);
     * below AVX-512 oneDNN 2.6 has no f32 brgemm. */
    return uform_kernels_avx512(cpu_class);
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

/* The weights of a shape in the tower's [out][in] layout, described as the transposed B (`ba`). */
static int plain_weights_md(dnnl_memory_desc_t *md, dnnl_data_type_t type, size_t n, size_t k, size_t ldw) {
    dnnl_dims_t w_dims = {(dnnl_dim_t)k, (dnnl_dim_t)n}, w_strides = {1, (dnnl_dim_t)ldw};
    return dnnl_memory_desc_init_by_strides(md, 2, w_dims, type, w_strides) == dnnl_success;
}

/* Creates the primitive of one shape (NULL primitive where oneDNN refuses); called under the lock.
 * `packed`: its weights in the layout it picks (`entry->weights` gets it), else the plain `ba`, or
 * `ab` with `rows_k`; `alpha` other than 1 scales C (output scales). */

static matmul_entry_t *matmul_create(dnnl_data_type_t type, size_t m, size_t n, size_t k, size_t lda, size_t ldw,
                                     size_t ldc, int packed, int rows_k, float alpha, unsigned epilogue) {
    matmul_entry_t *entry = (matmul_entry_t *)calloc(1, sizeof *entry);
    if (!entry) return NULL;
    *entry = (matmul_entry_t){.type = type, .m = m, .n = n, .k = k, .lda = lda, .ldw = ldw, .ldc = ldc, .packed = packed,
                              .rows_k = rows_k, .alpha = alpha, .epilogue = epilogue};
    dnnl_dims_t columns_dims = {1, (dnnl_dim_t)n};
    dnnl_post_ops_t post_ops = NULL;
    dnnl_dims_t kn_strides = {(dnnl_dim_t)ldw, 1};
    dnnl_dims_t src_dims = {(dnnl_dim_t)m, (dnnl_dim_t)k}, src_strides = {(dnnl_dim_t)lda, 1};
    dnnl_dims_t w_dims = {(dnnl_dim_t)k, (dnnl_dim_t)n};
    dnnl_dims_t dst_dims = {(dnnl_dim_t)m, (dnnl_dim_t)n}, dst_strides = {(dnnl_dim_t)ldc, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    /* Packed: the primitive picks its weights' layout (`any`), which `pack_slice` reorders into once. */
    if (dnnl_memory_desc_init_by_strides(&entry->src, 2, src_dims, type, src_strides) != dnnl_success ||
        !(packed   ? dnnl_memory_desc_init_by_tag(&entry->weights, 2, w_dims, type, dnnl_format_tag_any) == dnnl_success
          : rows_k ? dnnl_memory_desc_init_by_strides(&entry->weights, 2, w_dims, type, kn_strides) == dnnl_success
                   : plain_weights_md(&entry->weights, type, n, k, ldw)) ||
        dnnl_memory_desc_init_by_strides(&entry->dst, 2, dst_dims, epilogue & epilogue_bf16_k ? dnnl_bf16 : dnnl_f32,
                                         dst_strides) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&entry->columns, 2, columns_dims, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_matmul_desc_init(&desc, &entry->src, &entry->weights, epilogue & epilogue_bias_k ? &entry->columns : NULL,
                              &entry->dst) != dnnl_success ||
        dnnl_primitive_attr_create(&attr) != dnnl_success)
        return entry;
    /* The epilogue's post-ops, in `uform_gemm_epilogue_t`'s order: GELU, the factor, the sum. */
    int post_ops_ok = !epilogue || dnnl_post_ops_create(&post_ops) == dnnl_success;
    if (post_ops_ok && (epilogue & epilogue_gelu_k))
        post_ops_ok = dnnl_post_ops_append_eltwise(post_ops, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f) == dnnl_success;
    if (post_ops_ok && (epilogue & epilogue_scale_k))
        post_ops_ok = dnnl_post_ops_append_binary(post_ops, dnnl_binary_mul, &entry->columns) == dnnl_success;
    if (post_ops_ok && (epilogue & epilogue_sum_k)) post_ops_ok = dnnl_post_ops_append_sum(post_ops, 1.0f) == dnnl_success;
    if (post_ops_ok && post_ops) post_ops_ok = dnnl_primitive_attr_set_post_ops(attr, post_ops) == dnnl_success;
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    if (post_ops_ok && dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success &&
        (alpha == 1.0f || dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success) &&
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
        dnnl_memory_desc_t const *chosen = packed ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
        if (chosen) entry->weights = *chosen;
        /* A fused epilogue pays only inside brgemm: any other implementation is refused (the caller's
         * own epilogue serves). */
        int slow = epilogue && !(impl && strncmp(impl, "brg", 3) == 0);
        if ((packed && !chosen) || slow || dnnl_primitive_create(&entry->primitive, pd) != dnnl_success)
            entry->primitive = NULL;
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

/* ---- Pinned weights, packed once ----
 *
 * With plain weights, brgemm copies (packs) every call's B into its blocked layout before it
 * multiplies: per call, each thread re-packs all the weights it multiplies by. At a batch of about
 * as many texts or images as threads (one thread per group, each multiplying by every weight) that
 * is the whole model read and written by every thread per call, which with AMX's fast products
 * dominates. Weights that stay put (a model's replicas, pinned by model.c and image_model.c for
 * their lifetime) are therefore reordered once per (slice, primitive layout) into the layout the
 * primitive chose, and the primitive reads them as they are. Bounded by UFORM_GEMM_PACK_MIB
 * (default 2048 MiB; 0 disables packing, for comparison): past it the plain path serves. A product
 * whose plan splits the weights' columns over the threads (the batch-1 plan) packs its slices too:
 * on the AMX host (16 cores, 14 threads) UForm3-small at batch 1 measured 967 / 1,018 texts/s packed
 * against 901 / 925 reading the weights as they lie, and the plan's tiles on one thread 0.71-0.76x
 * the time packed (bench_text_tiles), once the threads' tables below stopped folding slices onto a
 * few slots; UFORM_GEMM_PACK_SPLIT=0 reads them as they lie (`uform_gemm_t.plain_weights`), for
 * comparison. */

static size_t pack_budget; /* set once by matmul_init */

static void pack_budget_init(void) {
    char const *text = getenv("UFORM_GEMM_PACK_MIB");
    char *end = NULL;
    unsigned long long mib = text && *text ? strtoull(text, &end, 10) : 2048;
    pack_budget = (end && *end) || mib > ((size_t)1 << 30) ? (size_t)2048 << 20 : (size_t)mib << 20;
}

void uform_gemm_pin(void const *begin, size_t bytes) { uform_gemm_pin_on(begin, bytes, -1); }

void uform_gemm_pin_on(void const *begin, size_t bytes, int32_t node) {
    if (!begin || !bytes) return;
    uform_global_lock(uform_global_lock_matmul_k);
    if (pins_count < PINS_MAX)
        pins[pins_count].begin = (char const *)begin, pins[pins_count].bytes = bytes, pins[pins_count++].node = node;
    /* Threads may remember these addresses as not pinned (a tower built by hand there before). */
    atomic_fetch_add_explicit(&pins_generation, 1, memory_order_release);
    uform_global_unlock(uform_global_lock_matmul_k);
}

void uform_gemm_unpin(void const *begin, size_t bytes) {
    if (!begin || !bytes) return;
    char const *low = (char const *)begin, *high = low + bytes;
    uform_global_lock(uform_global_lock_matmul_k);
    for (size_t i = 0; i < pins_count;)
        if (pins[i].begin == low && pins[i].bytes == bytes) pins[i] = pins[--pins_count];
        else ++i;
    int freed = 0;
    for (size_t i = 0; i < packed_count;) {
        packed_t *packed = packed_entries[i];
        char const *plain = (char const *)packed->plain;
        if (plain >= low && plain < high) {
            if (packed->data) packed_bytes -= packed->bytes;
            uform_numa_free(packed->data, packed->bytes);
            free(packed);
            packed_entries[i] = packed_entries[--packed_count];
            freed = 1;
        } else ++i;
    }
    if (freed) atomic_fetch_add_explicit(&pins_generation, 1, memory_order_release);
    uform_global_unlock(uform_global_lock_matmul_k);
}

size_t uform_gemm_packed_bytes(void) {
    uform_global_lock(uform_global_lock_matmul_k);
    size_t bytes = packed_bytes;
    uform_global_unlock(uform_global_lock_matmul_k);
    return bytes;
}

/* Whether the slice of `n` rows of `ldw` elements lies inside one pinned range, and that range's node;
 * under the lock. */
static int pinned_slice(void const *w, size_t n, size_t k, size_t ldw, size_t element, int32_t *node) {
    char const *low = (char const *)w, *high = low + ((n - 1) * ldw + k) * element;
    for (size_t i = 0; i < pins_count; ++i)
        if (low >= pins[i].begin && high <= pins[i].begin + pins[i].bytes) return *node = pins[i].node, 1;
    return 0;
}

/* Pages a packing never wrote (a layout's padding) have no node and are not counted. */
size_t uform_gemm_packed_misplaced(size_t *checked) {
    size_t misplaced = 0, placed = 0;
    long const page = sysconf(_SC_PAGESIZE);
    uform_global_lock(uform_global_lock_matmul_k);
    for (size_t i = 0; i < packed_count; ++i) {
        packed_t const *packed = packed_entries[i];
        if (!packed->data || packed->node < 0) continue;
        ++placed;
        int wrong = 0;
        for (size_t offset = 0; offset < packed->bytes && !wrong; offset += (size_t)page) {
            int actual = -1;
            wrong = uform_numa_node_of_address((char const *)packed->data + offset, &actual) && actual != packed->node;
        }
        misplaced += (size_t)wrong;
    }
    uform_global_unlock(uform_global_lock_matmul_k);
    if (checked) *checked = placed;
    return misplaced;
}

/* Reorders one slice of weights into `packed->layout`, on this thread. */
static int pack_slice(matmul_thread_t *state, packed_t *packed) {
    dnnl_memory_desc_t plain_md;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_memory_t from = NULL, to = NULL;
    int ok = 0;
    if (plain_weights_md(&plain_md, packed->type, packed->n, packed->k, packed->ldw) &&
        dnnl_reorder_primitive_desc_create(&pd, &plain_md, matmul_engine, &packed->layout, matmul_engine, NULL) == dnnl_success &&
        dnnl_primitive_create(&reorder, pd) == dnnl_success &&
        dnnl_memory_create(&from, &plain_md, matmul_engine, (void *)packed->plain) == dnnl_success &&
        dnnl_memory_create(&to, &packed->layout, matmul_engine, packed->data) == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = dnnl_primitive_execute(reorder, state->stream, 2, args) == dnnl_success &&
             dnnl_stream_wait(state->stream) == dnnl_success;
    }
    if (from) dnnl_memory_destroy(from);
    if (to) dnnl_memory_destroy(to);
    if (reorder) dnnl_primitive_destroy(reorder);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* The packed weights of `w` for `entry`'s layout: the thread's recent pairs, else the process's
 * (packing them on first use); NULL where `w` is not pinned or packing failed or is over budget. */
static packed_t const *packed_for(matmul_thread_t *state, matmul_entry_t const *entry, void const *w) {
    size_t generation = atomic_load_explicit(&pins_generation, memory_order_acquire);
    size_t slot = slot_of((uint64_t)(uintptr_t)w * 0x9E3779B97F4A7C15ull + (uint64_t)(uintptr_t)entry, PACKED_RECENT);
    if (state->packs[slot].plain == w && state->packs[slot].entry == entry && state->packs[slot].generation == generation)
        return state->packs[slot].packed;
    size_t element = entry->type == dnnl_f32 ? 4 : 2;
    packed_t *found = NULL;
    uform_global_lock(uform_global_lock_matmul_k);
    generation = atomic_load_explicit(&pins_generation, memory_order_relaxed);
    for (size_t i = 0; i < packed_count && !found; ++i) {
        packed_t *p = packed_entries[i];
        if (!p->sgemm && p->plain == w && p->n == entry->n && p->k == entry->k && p->ldw == entry->ldw &&
            p->type == entry->type && dnnl_memory_desc_equal(&p->layout, &entry->weights))
            found = p;
    }
    int32_t node = -1;
    if (!found && packed_count < PACKED_MAX && pinned_slice(w, entry->n, entry->k, entry->ldw, element, &node) &&
        (found = (packed_t *)calloc(1, sizeof *found)) != NULL) {
        *found = (packed_t){.plain = w, .n = entry->n, .k = entry->k, .ldw = entry->ldw, .type = entry->type,
                            .layout = entry->weights, .bytes = dnnl_memory_desc_get_size(&entry->weights), .node = node};
        if (found->bytes && packed_bytes + found->bytes <= pack_budget &&
            (found->data = uform_numa_alloc(found->bytes, node)) != NULL && !pack_slice(state, found))
            uform_numa_free(found->data, found->bytes), found->data = NULL;
        if (found->data) packed_bytes += found->bytes;
        packed_entries[packed_count++] = found;
    }
    uform_global_unlock(uform_global_lock_matmul_k);
    packed_t const *packed = found && found->data ? found : NULL;
    state->packs[slot].plain = w, state->packs[slot].entry = entry, state->packs[slot].packed = packed;
    state->packs[slot].generation = generation;
    return packed;
}

/* A fused product's epilogue: its bits and the columns' data. */
typedef struct epilogue_args_t {
    unsigned bits;
    float const *bias, *scale;
} epilogue_args_t;

static int matmul_execute(matmul_thread_t *state, dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a,
                          size_t lda, void const *w, size_t ldw, void *c, size_t ldc, int packed, int rows_k, float alpha,
                          epilogue_args_t const *epilogue);

/* C = alpha A W^T (or alpha A W with `rows_k`: W as [k][n]) through the primitive of this shape; 0
 * where it is unavailable (the caller falls back). `stable`: `w` may be a pinned model's weights (not
 * a scratch copy), so packing them may pay (never with `rows_k`). */
static int matmul_run_shape(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                            void const *w, size_t ldw, float *c, size_t ldc, int stable, int rows_k, float alpha);

/* Rows split into a multiple of MATMUL_ROWS_STEP and the rest, so the shapes a pass of texts of any
 * lengths creates stay few (a primitive per tile size, plus one per remainder below the step). */
#define MATMUL_ROWS_STEP 32

static int matmul_run_as(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                         void const *w, size_t ldw, float *c, size_t ldc, int stable, int rows_k, float alpha) {
    size_t main_rows = m / MATMUL_ROWS_STEP * MATMUL_ROWS_STEP, element = type == dnnl_f32 ? 4 : 2;
    if (main_rows == 0 || main_rows == m)
        return matmul_run_shape(type, m, n, k, a, lda, w, ldw, c, ldc, stable, rows_k, alpha);
    return matmul_run_shape(type, main_rows, n, k, a, lda, w, ldw, c, ldc, stable, rows_k, alpha) &&
           matmul_run_shape(type, m - main_rows, n, k, (char const *)a + main_rows * lda * element, lda, w, ldw,
                            c + main_rows * ldc, ldc, stable, rows_k, alpha);
}

static int matmul_run(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                      void const *w, size_t ldw, float *c, size_t ldc, int stable) {
    return matmul_run_as(type, m, n, k, a, lda, w, ldw, c, ldc, stable, 0, 1.0f);
}

static int matmul_run_shape(dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a, size_t lda,
                            void const *w, size_t ldw, float *c, size_t ldc, int stable, int rows_k, float alpha) {
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
    if (!(stable && !rows_k && pack_budget && matmul_execute(state, type, m, n, k, a, lda, w, ldw, out, ldo, 1, 0, alpha, NULL)) &&
        !matmul_execute(state, type, m, n, k, a, lda, w, ldw, out, ldo, 0, rows_k, alpha, NULL))
        return 0;
    if (out != c)
        for (size_t i = 0; i < m; ++i) memcpy(c + i * ldc, out + i * n, n * sizeof(float));
    return 1;
}

/* `packed`: through the primitive that reads packed weights, which `w` must have (else 0). */
static int matmul_execute(matmul_thread_t *state, dnnl_data_type_t type, size_t m, size_t n, size_t k, void const *a,
                          size_t lda, void const *w, size_t ldw, void *c, size_t ldc, int packed, int rows_k, float alpha,
                          epilogue_args_t const *fused) {
    unsigned const epilogue = fused ? fused->bits : 0;
    /* Strides too: Q/K/V tiles (ldc 3 x hidden) and the output product's (ldc hidden) share m, n, k. */
    union { float f; uint32_t u; } scale = {.f = alpha};
    uint64_t key = ((uint64_t)scale.u << 16) + (uint64_t)epilogue * 256u + (uint64_t)type * 4u + (uint64_t)(packed != 0) * 2u +
                   (uint64_t)(rows_k != 0);
    size_t const fields[6] = {m, n, k, lda, ldw, ldc};
    for (size_t f = 0; f < 6; ++f) key = key * 0x100000001B3ull + fields[f];
    matmul_recent_t *recent = &state->recent[slot_of(key, MATMUL_RECENT)];
    matmul_entry_t const *entry = recent->entry;
    if (!entry || entry->type != type || entry->m != m || entry->n != n || entry->k != k || entry->lda != lda ||
        entry->ldw != ldw || entry->ldc != ldc || entry->packed != packed || entry->rows_k != rows_k ||
        entry->alpha != alpha || entry->epilogue != epilogue) {
        entry = NULL;
        uform_global_lock(uform_global_lock_matmul_k);
        for (size_t i = 0; i < matmul_count && !entry; ++i) {
            matmul_entry_t const *e = matmul_entries[i];
            if (e->type == type && e->m == m && e->n == n && e->k == k && e->lda == lda && e->ldw == ldw &&
                e->ldc == ldc && e->packed == packed && e->rows_k == rows_k && e->alpha == alpha && e->epilogue == epilogue)
                entry = e;
        }
        if (!entry && matmul_count < MATMUL_ENTRIES_MAX) {
            matmul_entry_t *created = matmul_create(type, m, n, k, lda, ldw, ldc, packed, rows_k, alpha, epilogue);
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
            dnnl_memory_create(&recent->pad, &pad_md, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success ||
            ((epilogue & epilogue_bias_k) &&
             dnnl_memory_create(&recent->bias, &entry->columns, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success) ||
            ((epilogue & epilogue_scale_k) &&
             dnnl_memory_create(&recent->scale, &entry->columns, matmul_engine, DNNL_MEMORY_NONE) != dnnl_success)) {
            matmul_recent_clear(recent);
            return 0;
        }
        recent->entry = entry;
    }
    void const *weights = w;
    if (packed) {
        packed_t const *slice = packed_for(state, entry, w);
        if (!slice) return 0;
        weights = slice->data;
    }
    if (entry->scratchpad_bytes > state->scratchpad_bytes) {
        void *grown = NULL;
        if (posix_memalign(&grown, 64, entry->scratchpad_bytes) != 0) return 0;
        free(state->scratchpad);
        state->scratchpad = grown, state->scratchpad_bytes = entry->scratchpad_bytes;
    }
    if (dnnl_memory_set_data_handle(recent->src, (void *)a) != dnnl_success ||
        dnnl_memory_set_data_handle(recent->weights, (void *)weights) != dnnl_success ||
        dnnl_memory_set_data_handle(recent->dst, c) != dnnl_success ||
        dnnl_memory_set_data_handle(recent->pad, entry->scratchpad_bytes ? state->scratchpad : NULL) != dnnl_success ||
        ((epilogue & epilogue_bias_k) && dnnl_memory_set_data_handle(recent->bias, (void *)fused->bias) != dnnl_success) ||
        ((epilogue & epilogue_scale_k) && dnnl_memory_set_data_handle(recent->scale, (void *)fused->scale) != dnnl_success))
        return 0;
    dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, recent->src}, {DNNL_ARG_WEIGHTS, recent->weights},
                               {DNNL_ARG_DST, recent->dst}, {DNNL_ARG_SCRATCHPAD, recent->pad}};
    int count = 4;
    if (epilogue & epilogue_bias_k) args[count++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, recent->bias};
    /* The factor's binary post-op follows GELU's eltwise one where both are there. */
    if (epilogue & epilogue_scale_k)
        args[count++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP((epilogue & epilogue_gelu_k) ? 1 : 0) | DNNL_ARG_SRC_1,
                                          recent->scale};
    return dnnl_primitive_execute(entry->primitive, state->stream, count, args) == dnnl_success &&
           dnnl_stream_wait(state->stream) == dnnl_success;
}

/* ---- f32 weights packed once for oneDNN's packed GEMM (classes off the primitive path) ----
 *
 * Where f32 products go through oneDNN's GEMM functions (AVX2 and AVX-512 classes without AMX: its
 * matmul primitive has no brgemm for f32 below AVX-512 in oneDNN 2.6, so it could not keep weights
 * packed), `dnnl_sgemm` copies every call's weights into its blocked layout before it multiplies.
 * oneDNN also has the packed GEMM that its RNN primitives use (`sgemm_pack_get_size`, `sgemm_pack`,
 * `sgemm_compute`, as MKL's `cblas_sgemm_pack`): exported by libdnnl 2.6 but declared in no public
 * header, so found at run time by their (C++) names in the libdnnl this library loaded; where they
 * are missing (another oneDNN), `dnnl_sgemm` serves as before. Pinned weights (`uform_gemm_pin`) are
 * packed once per slice, with the pinned-primitive slices' budget and lifetime (packed_t with
 * `sgemm`), and multiplied packed. Column-major for oneDNN: C^T[n][m] = W[n][k] A^T, so the weights
 * are its A ("T", packed) and our A its B ("N"). Measured on an AVX2-only AMD EPYC (2 cores), one
 * thread, the 8 products of UForm3-small's two layers with weights cold: 64 rows 41.7 ms median with
 * `dnnl_sgemm`, 29.9 ms packed; 512 rows 251.7 against 216.7 ms (bench/RESULTS.md). The layout is
 * chosen for SGEMM_PACK_ROWS rows (its blocks then pad least); any rows multiply through it. */

#define SGEMM_PACK_ROWS 512
/* The layout pads a slice's columns to its blocks, differently by ISA (over 512 rows, depth 768):
 * AVX2 8.3 times the slice's bytes for 64 columns, 1.0 for 576 and more; AVX-512 pads to blocks of
 * 512 columns (384: 1.38, 576: 1.81, 768: 1.36, 1,024: 1.02). Slices it would pad past this factor
 * stay plain. */
#define SGEMM_PACK_PAD_MAX 1.5

typedef dnnl_status_t (*sgemm_pack_get_size_t)(char const *, char const *, char const *, dnnl_dim_t const *,
                                                dnnl_dim_t const *, dnnl_dim_t const *, dnnl_dim_t const *,
                                                dnnl_dim_t const *, size_t *, _Bool *);
typedef dnnl_status_t (*sgemm_pack_t)(char const *, char const *, char const *, dnnl_dim_t const *, dnnl_dim_t const *,
                                      dnnl_dim_t const *, dnnl_dim_t const *, dnnl_dim_t const *, float const *, float *);
typedef dnnl_status_t (*sgemm_compute_t)(char const *, char const *, dnnl_dim_t const *, dnnl_dim_t const *,
                                         dnnl_dim_t const *, float const *, dnnl_dim_t const *, float const *,
                                         dnnl_dim_t const *, float const *, float *, dnnl_dim_t const *);
static sgemm_pack_get_size_t sgemm_pack_get_size_fn;
static sgemm_pack_t sgemm_pack_fn;
static sgemm_compute_t sgemm_compute_fn;
static pthread_once_t sgemm_pack_once = PTHREAD_ONCE_INIT;

static void sgemm_pack_resolve(void) {
    /* The libdnnl that `dnnl_sgemm` came from, whatever scope this library was loaded in. */
    Dl_info info;
    void *library = NULL;
    if (dladdr((void *)dnnl_sgemm, &info) && info.dli_fname) library = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!library) return;
    sgemm_pack_get_size_t get_size =
        (sgemm_pack_get_size_t)dlsym(library, "_ZN4dnnl4impl3cpu19sgemm_pack_get_sizeEPKcS3_S3_PKlS5_S5_S5_S5_PmPb");
    sgemm_pack_t pack = (sgemm_pack_t)dlsym(library, "_ZN4dnnl4impl3cpu10sgemm_packEPKcS3_S3_PKlS5_S5_S5_S5_PKfPf");
    sgemm_compute_t compute =
        (sgemm_compute_t)dlsym(library, "_ZN4dnnl4impl3cpu13sgemm_computeEPKcS3_PKlS5_S5_PKfS5_S7_S5_S7_PfS5_");
    if (get_size && pack && compute) sgemm_pack_get_size_fn = get_size, sgemm_pack_fn = pack, sgemm_compute_fn = compute;
    dlclose(library); /* NOLOAD took a reference of a library that stays loaded (this one needs it) */
}

int uform_gemm_sgemm_packs(void) {
    pthread_once(&sgemm_pack_once, sgemm_pack_resolve);
    pthread_once(&matmul_once, matmul_init);
    return sgemm_compute_fn != NULL && matmul_ready && pack_budget != 0;
}

/* The packed copy of the slice `w` ([n][ldw], k used), from the thread's table, else the process's
 * (packing it on first use, under the lock); NULL where `w` is not pinned, packing failed or is over
 * budget. */
static packed_t const *sgemm_packed_for(matmul_thread_t *state, float const *w, size_t n, size_t k, size_t ldw) {
    size_t generation = atomic_load_explicit(&pins_generation, memory_order_acquire);
    size_t slot = slot_of((uint64_t)(uintptr_t)w * 0x9E3779B97F4A7C15ull + n * 0x100000001B3ull + k * 31u + ldw, SGEMM_RECENT);
    if (state->sgemm_packs[slot].plain == w && state->sgemm_packs[slot].n == n && state->sgemm_packs[slot].k == k &&
        state->sgemm_packs[slot].ldw == ldw && state->sgemm_packs[slot].generation == generation)
        return state->sgemm_packs[slot].packed;
    packed_t *found = NULL;
    uform_global_lock(uform_global_lock_matmul_k);
    generation = atomic_load_explicit(&pins_generation, memory_order_relaxed);
    for (size_t i = 0; i < packed_count && !found; ++i) {
        packed_t *p = packed_entries[i];
        if (p->sgemm && p->plain == w && p->n == n && p->k == k && p->ldw == ldw) found = p;
    }
    int32_t node = -1;
    if (!found && packed_count < PACKED_MAX && pinned_slice(w, n, k, ldw, sizeof(float), &node) &&
        (found = (packed_t *)calloc(1, sizeof *found)) != NULL) {
        *found = (packed_t){.plain = w, .n = n, .k = k, .ldw = ldw, .type = dnnl_f32, .sgemm = 1, .node = node};
        dnnl_dim_t rows = (dnnl_dim_t)n, columns = SGEMM_PACK_ROWS, depth = (dnnl_dim_t)k, ld = (dnnl_dim_t)ldw;
        _Bool worth = 1;
        size_t bytes = 0;
        if (sgemm_pack_get_size_fn("A", "T", "N", &rows, &columns, &depth, &ld, &depth, &bytes, &worth) == dnnl_success &&
            bytes && bytes <= SGEMM_PACK_PAD_MAX * (double)(n * k * sizeof(float)) && packed_bytes + bytes <= pack_budget &&
            (found->data = uform_numa_alloc(bytes, node)) != NULL) {
            found->bytes = bytes;
            if (sgemm_pack_fn("A", "T", "N", &rows, &columns, &depth, &ld, &depth, w, (float *)found->data) != dnnl_success)
                uform_numa_free(found->data, bytes), found->data = NULL;
        }
        if (found->data) packed_bytes += found->bytes;
        packed_entries[packed_count++] = found;
    }
    uform_global_unlock(uform_global_lock_matmul_k);
    packed_t const *packed = found && found->data ? found : NULL;
    state->sgemm_packs[slot].plain = w, state->sgemm_packs[slot].n = n, state->sgemm_packs[slot].k = k;
    state->sgemm_packs[slot].ldw = ldw, state->sgemm_packs[slot].packed = packed;
    state->sgemm_packs[slot].generation = generation;
    return packed;
}

/* C = A W^T through the packed copy of pinned `w`; 0 where there is none (the caller falls back). */
static int sgemm_packed_run(size_t m, size_t n, size_t k, float const *a, size_t lda, float const *w, size_t ldw, float *c,
                            size_t ldc) {
    if (!uform_gemm_sgemm_packs()) return 0;
    matmul_thread_t *state = matmul_thread();
    packed_t const *packed = state ? sgemm_packed_for(state, w, n, k, ldw) : NULL;
    if (!packed) return 0;
    dnnl_dim_t rows = (dnnl_dim_t)n, columns = (dnnl_dim_t)m, depth = (dnnl_dim_t)k, ld_packed = (dnnl_dim_t)ldw;
    dnnl_dim_t ld_a = (dnnl_dim_t)lda, ld_c = (dnnl_dim_t)ldc;
    float const beta = 0.0f;
    return sgemm_compute_fn("P", "N", &rows, &columns, &depth, (float const *)packed->data, &ld_packed, a, &ld_a, &beta, c,
                            &ld_c) == dnnl_success;
}

static void sgemm(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, float const *a, size_t lda,
                  float const *w, size_t ldw, float *c, size_t ldc, int stable) {
    int packs = stable && !gemm->plain_weights;
    /* Off AMX, a tile of few rows goes through brgemm too: the packed GEMM functions' fixed cost per
     * call outweighs their kernel there (MiniLM at 16 tokens, batch 1). */
    if (gemm->use_library && gemm->matmul && (!gemm->sgemm_packed || m < UFORM_GEMM_SGEMM_ROWS_MIN) &&
        matmul_run(dnnl_f32, m, n, k, a, lda, w, ldw, c, ldc, packs))
        return;
    if (gemm->use_library && packs && sgemm_packed_run(m, n, k, a, lda, w, ldw, c, ldc)) return;
    /* A slice the packed GEMM leaves plain (too narrow for its layout: the batch-1 plan's column
     * tiles) goes through brgemm on its own packed copy where the class has it (AVX-512). */
    if (gemm->use_library && gemm->matmul && packs && matmul_run(dnnl_f32, m, n, k, a, lda, w, ldw, c, ldc, 1)) return;
    if (gemm->use_library &&
        dnnl_sgemm('N', 'T', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, 1.0f, a, (dnnl_dim_t)lda, w,
                   (dnnl_dim_t)ldw, 0.0f, c, (dnnl_dim_t)ldc) == dnnl_success)
        return;
    gemm->kernels->gemm_portable(m, n, k, a, lda, w, ldw, c, ldc);
}

/* C = A W^T, both bf16, through the library; 0 where it refused. */
static int bf16_library(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, uint16_t const *a16, size_t lda,
                        uint16_t const *w16, size_t ldw, float *c, size_t ldc) {
    return (gemm->matmul && matmul_run(dnnl_bf16, m, n, k, a16, lda, w16, ldw, c, ldc, !gemm->plain_weights)) ||
           dnnl_gemm_bf16bf16f32('N', 'T', (dnnl_dim_t)m, (dnnl_dim_t)n, (dnnl_dim_t)k, 1.0f, a16, (dnnl_dim_t)lda,
                                 w16, (dnnl_dim_t)ldw, 0.0f, c, (dnnl_dim_t)ldc) == dnnl_success;
}

void uform_gemm_tile(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, float const *a, size_t lda,
                     void const *w, uform_dtype_t dtype, size_t ldw, float *c, size_t ldc, void *scratch) {
    if (m == 0 || n == 0) return;
    if (dtype == uform_dtype_f32_k) {
        sgemm(gemm, m, n, k, a, lda, (float const *)w, ldw, c, ldc, 1);
        return;
    }
    uint16_t const *w16 = (uint16_t const *)w;
    if (gemm_widens(gemm, dtype)) {
        float *wide = (float *)scratch;
        for (size_t j = 0; j < n; ++j)
            (dtype == uform_dtype_f16_k ? gemm->kernels->f16_to_f32 : gemm->kernels->bf16_to_f32)(w16 + j * ldw, wide + j * k, k);
        sgemm(gemm, m, n, k, a, lda, wide, k, c, ldc, 0);
        return;
    }
    uint16_t *narrow = (uint16_t *)scratch;
    for (size_t i = 0; i < m; ++i) gemm->kernels->f32_to_bf16(a + i * lda, narrow + i * k, k);
    /* The A already in bf16 entry point: oneDNN, or (where it refused) the exact loop over the same bf16 A. */
    uform_gemm_tile_bf16(gemm, m, n, k, narrow, k, w16, ldw, c, ldc);
}

int uform_gemm_takes_bf16(uform_gemm_t const *gemm, uform_dtype_t dtype) {
    return dtype == uform_dtype_bf16_k && !gemm_widens(gemm, dtype);
}

void uform_gemm_tile_bf16(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, uint16_t const *a16, size_t lda,
                          uint16_t const *w16, size_t ldw, float *c, size_t ldc) {
    if (m == 0 || n == 0 || bf16_library(gemm, m, n, k, a16, lda, w16, ldw, c, ldc)) return;
    /* oneDNN refused (it should not): multiply exactly, 256 columns of depth at a time. */
    float row[256], left[256];
    for (size_t j = 0; j < n; ++j)
        for (size_t i = 0; i < m; ++i) {
            float sum = 0.0f;
            for (size_t p0 = 0; p0 < k; p0 += 256) {
                size_t len = k - p0 < 256 ? k - p0 : 256;
                gemm->kernels->bf16_to_f32(w16 + j * ldw + p0, row, len);
                gemm->kernels->bf16_to_f32(a16 + i * lda + p0, left, len);
                for (size_t p = 0; p < len; ++p) sum += left[p] * row[p];
            }
            c[i * ldc + j] = sum;
        }
}

/* One fused primitive call: packed weights where pinned, else as they lie. */
static int fused_part(uform_gemm_t const *gemm, matmul_thread_t *state, size_t m, size_t n, size_t k, uint16_t const *a16,
                      size_t lda, uint16_t const *w16, size_t ldw, void *c, size_t ldc, epilogue_args_t const *args) {
    int stable = !gemm->plain_weights;
    return (stable && pack_budget && matmul_execute(state, dnnl_bf16, m, n, k, a16, lda, w16, ldw, c, ldc, 1, 0, 1.0f, args)) ||
           matmul_execute(state, dnnl_bf16, m, n, k, a16, lda, w16, ldw, c, ldc, 0, 0, 1.0f, args);
}

int uform_gemm_tile_bf16_fused(uform_gemm_t const *gemm, size_t m, size_t n, size_t k, uint16_t const *a16, size_t lda,
                               uint16_t const *w16, size_t ldw, void *c, size_t ldc, uform_gemm_epilogue_t const *epilogue) {
    if (!gemm->use_library || !gemm->matmul || !gemm->fused || !gemm->native_bf16 || m == 0 || n == 0 || ldc != n ||
        (epilogue->accumulate && (epilogue->bf16_out || epilogue->rows_vary)) || gemm->fused == 2)
        return 0;
    pthread_once(&matmul_once, matmul_init);
    if (!matmul_ready) return 0;
    matmul_thread_t *state = matmul_thread();
    if (!state) return 0;
    epilogue_args_t args = {.bits = (epilogue->bias ? epilogue_bias_k : 0u) | (epilogue->gelu ? epilogue_gelu_k : 0u) |
                                    (epilogue->scale ? epilogue_scale_k : 0u) | (epilogue->accumulate ? epilogue_sum_k : 0u) |
                                    (epilogue->bf16_out ? epilogue_bf16_k : 0u),
                            .bias = epilogue->bias, .scale = epilogue->scale};
    /* One primitive of exactly these rows (no split at MATMUL_ROWS_STEP) unless they vary: a refusal
     * then leaves C untouched, which the caller's fallback (with `accumulate`, a second sum) relies on. */
    size_t main_rows = epilogue->rows_vary ? m / MATMUL_ROWS_STEP * MATMUL_ROWS_STEP : m;
    if (main_rows == 0) main_rows = m;
    size_t element = epilogue->bf16_out ? 2 : 4;
    return fused_part(gemm, state, main_rows, n, k, a16, lda, w16, ldw, c, ldc, &args) &&
           (main_rows == m || fused_part(gemm, state, m - main_rows, n, k, a16 + main_rows * lda, lda, w16, ldw,
                                         (char *)c + main_rows * ldc * element, ldc, &args));
}

size_t uform_gemm_plane_width(size_t f) {
    for (size_t width = 768; width >= 64; width -= 64)
        if (f % width == 0) return width;
    return f;
}

void uform_gemm_up_plane(uform_gemm_t const *gemm, size_t rows, size_t width, size_t k, uint16_t const *a16,
                         uint16_t const *w16, float const *bias, uint16_t *plane, float *staging, size_t staging_ld) {
    uform_gemm_epilogue_t fused = {.bias = bias, .gelu = 1, .bf16_out = 1};
    if (uform_gemm_tile_bf16_fused(gemm, rows, width, k, a16, k, w16, k, plane, width, &fused)) return;
    /* Refused: the f32 product, the class's GELU, then bf16. */
    uform_gemm_tile_bf16(gemm, rows, width, k, a16, k, w16, k, staging, staging_ld);
    gemm->kernels->bias_gelu(staging, staging_ld, rows, width, bias);
    for (size_t i = 0; i < rows; ++i) gemm->kernels->f32_to_bf16(staging + i * staging_ld, plane + i * width, width);
}

void uform_gemm_down_planes(uform_gemm_t const *gemm, size_t rows, size_t n, size_t width, size_t parts,
                            uint16_t const *planes, size_t plane_stride, uint16_t const *w16, size_t ldw, float *c,
                            float *staging) {
    for (size_t p = 0; p < parts; ++p) {
        uint16_t const *plane = planes + p * plane_stride;
        uform_gemm_epilogue_t fused = {.accumulate = p > 0};
        if (uform_gemm_tile_bf16_fused(gemm, rows, n, width, plane, width, w16 + p * width, ldw, c, n, &fused)) continue;
        /* Refused: this part's product apart, then summed (a refused call left C as it was). */
        uform_gemm_tile_bf16(gemm, rows, n, width, plane, width, w16 + p * width, ldw, p ? staging : c, n);
        if (p)
            for (size_t i = 0; i < rows * n; ++i) c[i] += staging[i];
    }
}

uform_gemm_t uform_gemm_for(uform_cpu_class_t cpu_class) {
    uform_gemm_t gemm = {.kernels = uform_kernels_for(cpu_class),
                         .use_library = cpu_class != uform_cpu_class_serial_k,
                         .native_bf16 = uform_kernels_native_bf16(cpu_class),
                         .matmul = uform_gemm_matmul_for(cpu_class)};
    char const *pack_split = getenv("UFORM_GEMM_PACK_SPLIT"), *attention = getenv("UFORM_ATTENTION_MATMUL");
    gemm.pack_split = !(pack_split && strcmp(pack_split, "0") == 0); /* packed by default: measured faster */
    gemm.attention_matmul = attention && strcmp(attention, "1") == 0;
    char const *fused = getenv("UFORM_GEMM_FUSED"), *planes = getenv("UFORM_MLP_PLANES");
    /* `refuse`: the passes take their fused layouts, and every fused call is refused (the tests of
     * the fallbacks). */
    gemm.fused = !gemm.matmul || (fused && strcmp(fused, "0") == 0) ? 0 : fused && strcmp(fused, "refuse") == 0 ? 2 : 1;
    gemm.mlp_planes = gemm.fused && !(planes && strcmp(planes, "0") == 0);
    /* f32 through the packed GEMM functions first, off AMX classes (and unless UFORM_GEMM_MATMUL=1
     * forces the primitive first): on the 16-core host, 14 threads, brgemm first lost 17-25% on
     * ViT-B/16 f32 at batch 50 (many rows a product) while it gained 20-55% at batch 1, where the
     * slices are narrow; such slices, which the packed GEMM leaves plain, still take brgemm (sgemm). */
    char const *forced = getenv("UFORM_GEMM_MATMUL");
    int primitive_first = uform_kernels_amx_bf16(cpu_class) || (forced && strcmp(forced, "1") == 0);
    gemm.sgemm_packed = gemm.use_library && !(gemm.matmul && primitive_first) && uform_gemm_sgemm_packs();
    gemm.row_tiles_threads = uform_forward_row_tiles_threads();
    return gemm;
}
