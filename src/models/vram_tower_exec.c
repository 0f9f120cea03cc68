/**
 *  @file   vram_tower_exec.c
 *  @brief  How the VRAM text and image towers run their chunks (vram_tower.h): kernel launches, the
 *          cuBLASLt products with their algorithm cache and the timing of large products' candidates,
 *          CUDA graphs per chunk shape, and profiling (UFORM_GPU_PROFILE=1). Opening, the copies and
 *          the jobs' planning are vram_tower.c's.
 */
#define _GNU_SOURCE
#include "models/vram_tower.h" // and kernels/kernels.h: `uform_step_profile_t`

#include <stdio.h>   // `fprintf`
#include <stdlib.h>  // `getenv`
#include <string.h>  // `memcmp`, `strcmp`

/* ---- Profiling (UFORM_GPU_PROFILE=1): every step synchronised and timed, graphs off; for the benchmarks ---- */

static int vram_profile = -1;
static uform_step_profile_t vram_profile_steps = {.lock = PTHREAD_MUTEX_INITIALIZER};

int vram_profiling(void) {
    if (vram_profile < 0) {
        char const *value = getenv("UFORM_GPU_PROFILE");
        vram_profile = value && *value && *value != '0';
    }
    return vram_profile;
}

void vram_profile_add(char const *name, double seconds) { uform_step_profile_add(&vram_profile_steps, name, seconds); }

void uform_text_vram_profile_report(FILE *file) { uform_step_profile_report(&vram_profile_steps, file, "profile"); }

/* ---- Launches and products ---- */

uform_status_t vram_launch_failed(CUresult result, char const *verb, char const *what, int32_t ordinal) {
    return uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k : uform_status_invalid_argument_k,
                           result, "%s: %s on device %d", verb, what, (int)ordinal);
}

uform_status_t text_vram_launch_failed(uform_cuda_t const *cuda, CUresult result, char const *what, int32_t ordinal) {
    (void)cuda;
    return vram_launch_failed(result, "uform_encode_texts", what, ordinal);
}

uform_status_t vram_launch_grid(uform_cuda_t const *cuda, CUstream stream, int32_t ordinal, char const *verb,
                                CUfunction function, char const *name, unsigned grid_x, unsigned grid_y, unsigned block,
                                unsigned shared, void **arguments) {
    double start = 0;
    if (vram_profiling()) cuda->StreamSynchronize(stream), start = uform_now_seconds();
    CUresult result = cuda->LaunchKernel(function, grid_x, grid_y, 1, block, 1, 1, shared, stream, arguments, NULL);
    if (vram_profiling()) cuda->StreamSynchronize(stream), vram_profile_add(name, uform_now_seconds() - start);
    return result == CUDA_SUCCESS ? uform_status_ok_k : vram_launch_failed(result, verb, name, ordinal);
}

uform_status_t vram_launch(vram_exec_t const *e, CUfunction function, char const *name, unsigned grid, unsigned block,
                           unsigned shared, void **arguments) {
    return vram_launch_grid(e->vram->cuda, e->stream, e->copy->ordinal, e->verb, function, name, grid, 1, block, shared,
                            arguments);
}

/** Set on the thread while it captures a graph: products then take cuBLASLt's first algorithm
 *  instead of timing candidates (no synchronisation is allowed during a capture). */
static _Thread_local int vram_capturing;
/** Set by `gemm_run` when it timed candidates, so the profile leaves that product out. */
static _Thread_local int vram_tuned;

/** Products of at least this many multiply-adds time cuBLASLt's candidates on first sight. */
#define VRAM_TUNE_MACS (1ull << 30)
#define VRAM_TUNE_CANDIDATES 8

/** Whether to time candidate algorithms: on unless UFORM_GPU_GEMM_TUNE=0 (read once). On an H200 the
 *  fastest of the first 8 ran the image towers 1.3-4.0% faster than the heuristic's first pick (ViT-S/16
 *  and ViT-B/16 at batch 50 and 256; the output projection with its residual at batch 50 alone 37%
 *  faster), bench/RESULTS.md, 2026-12-01 (sixth). */
static int gemm_tune_value = 1;
static pthread_once_t gemm_tune_once = PTHREAD_ONCE_INIT;
static void gemm_tune_read(void) {
    char const *value = getenv("UFORM_GPU_GEMM_TUNE");
    if (value && (!strcmp(value, "0") || !strcmp(value, "1"))) gemm_tune_value = *value == '1';
}

/** Times each of `count` candidate algorithms on the product itself (one run to warm up, then three
 *  between events; running it again is harmless, as D never aliases A, W or C) and returns the index
 *  of the fastest, 0 when timing is impossible. Candidates that fail are passed over. Profiling
 *  (UFORM_GPU_PROFILE=1) prints each candidate's time to standard error. */
static int gemm_fastest(vram_exec_t const *e, size_t m, size_t n, size_t k, int epilogue, uform_lt_desc_t desc, uform_lt_layout_t la, uform_lt_layout_t lb,
                        uform_lt_layout_t lc, CUdeviceptr a, CUdeviceptr w, CUdeviceptr residual, CUdeviceptr d,
                        uform_lt_heuristic_t const *candidates, int count) {
    uform_cuda_t const *cuda = e->vram->cuda;
    uform_cublaslt_t const *lt = e->vram->lt;
    CUevent start = NULL, stop = NULL;
    int best = 0;
    float best_ms = 0.f;
    if (cuda->EventCreate(&start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) start = NULL;
    if (start && cuda->EventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS) stop = NULL;
    float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
    for (int i = 0; i < count && start && stop; ++i) {
        if (candidates[i].state != 0 || candidates[i].workspace_size > e->workspace_bytes) continue;
        int failed = 0;
        for (int run = 0; run < 4 && !failed; ++run) {
            if (run == 1 && cuda->EventRecord(start, e->stream) != CUDA_SUCCESS) failed = 1;
            failed = failed || lt->Matmul(e->copy->lt, desc, &alpha, (void const *)(uintptr_t)w, la,
                                          (void const *)(uintptr_t)a, lb, &beta,
                                          (void const *)(uintptr_t)(residual ? residual : d), lc, (void *)(uintptr_t)d,
                                          lc, &candidates[i].algo, (void *)(uintptr_t)e->workspace, e->workspace_bytes,
                                          e->stream) != 0;
        }
        float ms = 0.f;
        if (failed || cuda->EventRecord(stop, e->stream) != CUDA_SUCCESS || cuda->EventSynchronize(stop) != CUDA_SUCCESS ||
            cuda->EventElapsedTime(&ms, start, stop) != CUDA_SUCCESS) {
            if (cuda->StreamSynchronize(e->stream) != CUDA_SUCCESS) break; /* a fault: the caller's run reports it */
            continue;
        }
        if (vram_profiling())
            fprintf(stderr, "tune %zu x %zu x %zu epilogue %d%s: candidate %d %.1f us\n", m, n, k, epilogue,
                    residual ? " +residual" : "", i, ms * 1e3 / 3);
        if (best_ms == 0.f || ms < best_ms) best = i, best_ms = ms;
    }
    if (stop) cuda->EventDestroy(stop);
    if (start) cuda->EventDestroy(start);
    return best;
}

/** Looks `key` (all but its `algo`) up in `table` (one of `copy`'s algorithm caches) under its lock. */
static int algo_find(vram_copy_t *copy, vram_algo_t const *table, vram_algo_t const *key, uform_lt_algo_t *algo) {
    int found = 0;
    pthread_mutex_lock(&copy->lock);
    for (size_t i = 0; i < VRAM_CACHE; ++i) {
        vram_algo_t const *entry = &table[i];
        if (entry->valid && entry->m == key->m && entry->n == key->n && entry->k == key->k &&
            entry->workspace == key->workspace && entry->epilogue == key->epilogue && entry->residual == key->residual)
            *algo = entry->algo, found = 1;
    }
    pthread_mutex_unlock(&copy->lock);
    return found;
}

/** Keeps `entry` in `table` under `copy`'s lock: a free slot first, so the shapes of a pass rarely
 *  evict each other; else the hashed one. */
static void algo_store(vram_copy_t *copy, vram_algo_t *table, vram_algo_t entry) {
    entry.valid = 1;
    pthread_mutex_lock(&copy->lock);
    size_t slot = (entry.m * 31 + entry.n * 7 + entry.k + (size_t)entry.epilogue * 3 + (size_t)entry.residual) % VRAM_CACHE;
    for (size_t i = 0; i < VRAM_CACHE; ++i)
        if (!table[i].valid) {
            slot = i;
            break;
        }
    table[slot] = entry;
    pthread_mutex_unlock(&copy->lock);
}

/** The candidate to use: timed once per shape and power-of-two bucket of m; later m of the bucket look
 *  for the winner among their own candidates (so it is valid for them) and else take the first. */
static int gemm_pick(vram_exec_t const *e, size_t m, size_t n, size_t k, int epilogue, CUdeviceptr residual,
                     uform_lt_desc_t desc, uform_lt_layout_t la, uform_lt_layout_t lb, uform_lt_layout_t lc,
                     CUdeviceptr a, CUdeviceptr w, CUdeviceptr d, uform_lt_heuristic_t const *candidates, int returned) {
    vram_copy_t *copy = e->copy;
    size_t bucket = 0;
    while (((size_t)1 << bucket) < m) ++bucket;
    vram_algo_t key = {.m = bucket, .n = n, .k = k, .workspace = e->workspace_bytes, .epilogue = epilogue,
                       .residual = residual != 0};
    uform_lt_algo_t winner;
    if (algo_find(copy, copy->tuned, &key, &winner)) {
        for (int i = 0; i < returned; ++i)
            if (!memcmp(&candidates[i].algo, &winner, sizeof winner)) return i;
        return 0;
    }
    vram_tuned = 1;
    int const pick = gemm_fastest(e, m, n, k, epilogue, desc, la, lb, lc, a, w, residual, d, candidates, returned);
    key.algo = candidates[pick].algo;
    algo_store(copy, copy->tuned, key);
    return pick;
}

/** In cuBLASLt's column-major terms: D^T (n x m) = W (n x k) A^T (k x m). */
static uform_status_t gemm_run(vram_exec_t const *e, size_t m, size_t n, size_t k, CUdeviceptr a, CUdeviceptr w,
                               CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d, int epilogue) {
    uform_cublaslt_t const *lt = e->vram->lt;
    vram_copy_t *copy = e->copy;
    int type = e->vram->lt_type;
    uform_lt_desc_t desc = NULL;
    uform_lt_layout_t la = NULL, lb = NULL, lc = NULL;
    uform_lt_preference_t preference = NULL;
    uform_status_t status = uform_status_ok_k;
    int lt_status = lt->MatmulDescCreate(&desc, uform_lt_compute_32f_k, uform_lt_r_32f_k);
    int32_t transpose = uform_lt_op_t_k, plain = uform_lt_op_n_k;
    uint32_t epilogue_value = (uint32_t)epilogue;
    void *bias_pointer = (void *)(uintptr_t)bias;
    if (!lt_status) lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_transa_k, &transpose, sizeof transpose);
    if (!lt_status) lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_transb_k, &plain, sizeof plain);
    if (!lt_status) lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_epilogue_k, &epilogue_value, sizeof epilogue_value);
    if (!lt_status && epilogue != uform_lt_epilogue_default_k)
        lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_bias_pointer_k, &bias_pointer, sizeof bias_pointer);
    if (!lt_status) lt_status = lt->MatrixLayoutCreate(&la, type, k, n, (int64_t)k);
    if (!lt_status) lt_status = lt->MatrixLayoutCreate(&lb, type, k, m, (int64_t)k);
    if (!lt_status) lt_status = lt->MatrixLayoutCreate(&lc, type, n, m, (int64_t)n);
    uform_lt_algo_t algo;
    vram_algo_t key = {.m = m, .n = n, .k = k, .workspace = e->workspace_bytes, .epilogue = epilogue,
                       .residual = residual != 0};
    int found = !lt_status && algo_find(copy, copy->cache, &key, &algo);
    if (!lt_status && !found) {
        uint64_t workspace = e->workspace_bytes;
        uform_lt_heuristic_t candidates[VRAM_TUNE_CANDIDATES];
        int returned = 0;
        pthread_once(&gemm_tune_once, gemm_tune_read);
        /* Large products time cuBLASLt's first candidates and keep the fastest: its first pick can be
         * far from it (UForm3's QKV product ran at about half the up projection's rate on an H200). */
        int tune = gemm_tune_value && !vram_capturing && (unsigned long long)m * n * k >= VRAM_TUNE_MACS;
        lt_status = lt->MatmulPreferenceCreate(&preference);
        if (!lt_status)
            lt_status = lt->MatmulPreferenceSetAttribute(preference, uform_lt_pref_max_workspace_k, &workspace, sizeof workspace);
        if (!lt_status)
            lt_status = lt->MatmulAlgoGetHeuristic(copy->lt, desc, la, lb, lc, lc, preference,
                                                   tune ? VRAM_TUNE_CANDIDATES : 1, candidates, &returned);
        if (!lt_status && returned < 1) {
            status = uform_fail(uform_status_unsupported_k,
                                "%s: cuBLASLt has no algorithm for a %zu x %zu x %zu product on device %d", e->verb, m,
                                n, k, (int)copy->ordinal);
        } else if (!lt_status) {
            int chosen = tune && returned > 1 ? gemm_pick(e, m, n, k, epilogue, residual, desc, la, lb, lc, a, w, d,
                                                          candidates, returned)
                                              : 0;
            algo = candidates[chosen].algo, found = 1;
            key.algo = algo;
            algo_store(copy, copy->cache, key);
        }
    }
    if (!lt_status && found) {
        float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
        lt_status = lt->Matmul(copy->lt, desc, &alpha, (void const *)(uintptr_t)w, la, (void const *)(uintptr_t)a, lb,
                               &beta, (void const *)(uintptr_t)(residual ? residual : d), lc, (void *)(uintptr_t)d, lc,
                               &algo, (void *)(uintptr_t)e->workspace, e->workspace_bytes, e->stream);
    }
    if (lt_status && status == uform_status_ok_k)
        status = uform_fail(uform_status_unsupported_k, "%s: cuBLASLt failed (status %d) on a %zu x %zu x %zu product on device %d",
                            e->verb, lt_status, m, n, k, (int)copy->ordinal);
    if (preference) lt->MatmulPreferenceDestroy(preference);
    if (la) lt->MatrixLayoutDestroy(la);
    if (lb) lt->MatrixLayoutDestroy(lb);
    if (lc) lt->MatrixLayoutDestroy(lc);
    if (desc) lt->MatmulDescDestroy(desc);
    return status;
}

uform_status_t vram_gemm(vram_exec_t const *e, char const *label, size_t m, size_t n, size_t k, CUdeviceptr a,
                         CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d, int epilogue) {
    if (!vram_profiling()) return gemm_run(e, m, n, k, a, w, bias, residual, d, epilogue);
    e->vram->cuda->StreamSynchronize(e->stream);
    double start = uform_now_seconds();
    vram_tuned = 0;
    uform_status_t status = gemm_run(e, m, n, k, a, w, bias, residual, d, epilogue);
    e->vram->cuda->StreamSynchronize(e->stream);
    if (!vram_tuned) vram_profile_add(label, uform_now_seconds() - start);
    return status;
}

/* ---- Graphs ---- */

uform_status_t vram_graph(vram_exec_t const *e, uint64_t const key_in[12], uform_status_t (*compute)(void *context),
                          void *context) {
    static int disabled = -1;
    if (disabled < 0) {
        char const *value = getenv("UFORM_GPU_NO_GRAPHS");
        disabled = value && *value && *value != '0';
    }
    if (disabled || vram_profiling()) return compute(context);
    uform_cuda_t const *cuda = e->vram->cuda;
    vram_copy_t *copy = e->copy;
    uint64_t key[12];
    memcpy(key, key_in, sizeof key);
    int capture = 0;
    pthread_mutex_lock(&copy->lock);
    vram_graph_t *entry = NULL, *oldest = &copy->graphs[0];
    for (size_t g = 0; g < VRAM_GRAPHS; ++g) {
        vram_graph_t *candidate = &copy->graphs[g];
        if (candidate->state && !memcmp(candidate->key, key, sizeof key)) entry = candidate;
        if (candidate->used < oldest->used) oldest = candidate;
    }
    if (entry && entry->state == 2) {
        entry->used = ++copy->graph_clock;
        CUresult result = cuda->GraphLaunch(entry->exec, e->stream);
        pthread_mutex_unlock(&copy->lock);
        return result == CUDA_SUCCESS ? uform_status_ok_k : vram_launch_failed(result, e->verb, "cuGraphLaunch", copy->ordinal);
    }
    if (entry) capture = entry->state == 1;
    else {
        if (oldest->exec) cuda->GraphExecDestroy(oldest->exec);
        memset(oldest, 0, sizeof *oldest);
        memcpy(oldest->key, key, sizeof key);
        oldest->state = 1, oldest->used = ++copy->graph_clock;
    }
    pthread_mutex_unlock(&copy->lock);
    if (!capture) return compute(context);

    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    int captured = 0;
    if (cuda->StreamBeginCapture(e->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS) {
        vram_capturing = 1;
        uform_status_t status = compute(context);
        vram_capturing = 0;
        CUresult ended = cuda->StreamEndCapture(e->stream, &graph);
        captured = status == uform_status_ok_k && ended == CUDA_SUCCESS && graph &&
                   cuda->GraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS;
        if (graph) cuda->GraphDestroy(graph);
    }
    pthread_mutex_lock(&copy->lock);
    entry = NULL;
    for (size_t g = 0; g < VRAM_GRAPHS; ++g)
        if (copy->graphs[g].state && !memcmp(copy->graphs[g].key, key, sizeof key)) entry = &copy->graphs[g];
    if (captured && entry && entry->state != 2) entry->exec = exec, entry->state = 2, exec = NULL;
    else if (!captured && entry) entry->state = 3;
    CUresult result = CUDA_SUCCESS;
    if (captured) result = cuda->GraphLaunch(entry && entry->exec ? entry->exec : exec, e->stream);
    pthread_mutex_unlock(&copy->lock);
    if (exec) {
        /* Another thread stored the same shape first, or it was evicted: ours ran, free it after. */
        if (!entry || entry->exec != exec) cuda->GraphExecDestroy(exec);
    }
    if (!captured) return compute(context);
    return result == CUDA_SUCCESS ? uform_status_ok_k : vram_launch_failed(result, e->verb, "cuGraphLaunch", copy->ordinal);
}
