/**
 *  @file   text_vram_launch.c
 *  @brief  One chunk's pass on a device (text_vram.c describes it): the kernel launches, the cuBLASLt
 *          products with their algorithm cache, the captured graphs, and profiling (UFORM_GPU_PROFILE=1).
 */
#define _GNU_SOURCE
#include "models/text_vram_private.h"

#include <math.h>    // `sqrt`
#include <stdio.h>   // `fprintf`, `snprintf`
#include <stdlib.h>  // `getenv`
#include <string.h>  // `memcmp`, `strcmp`

/* ---- Profiling (UFORM_GPU_PROFILE=1): every step synchronised and timed, graphs off; for bench_text_gpu ---- */

#define VRAM_PROFILE_STEPS 24
static int vram_profile = -1;
static pthread_mutex_t vram_profile_lock = PTHREAD_MUTEX_INITIALIZER;
static char const *vram_profile_names[VRAM_PROFILE_STEPS];
static double vram_profile_seconds[VRAM_PROFILE_STEPS];
static size_t vram_profile_counts[VRAM_PROFILE_STEPS];

static int profiling(void) {
    if (vram_profile < 0) {
        char const *value = getenv("UFORM_GPU_PROFILE");
        vram_profile = value && *value && *value != '0';
    }
    return vram_profile;
}

static void profile_add(char const *name, double seconds) {
    pthread_mutex_lock(&vram_profile_lock);
    for (size_t i = 0; i < VRAM_PROFILE_STEPS; ++i)
        if (!vram_profile_names[i] || !strcmp(vram_profile_names[i], name)) {
            vram_profile_names[i] = name, vram_profile_seconds[i] += seconds, ++vram_profile_counts[i];
            break;
        }
    pthread_mutex_unlock(&vram_profile_lock);
}

void uform_text_vram_profile_report(FILE *file) {
    double total = 0;
    for (size_t i = 0; i < VRAM_PROFILE_STEPS && vram_profile_names[i]; ++i) total += vram_profile_seconds[i];
    for (size_t i = 0; i < VRAM_PROFILE_STEPS && vram_profile_names[i]; ++i)
        fprintf(file, "profile %-16s %8zu runs %10.3f ms %5.1f%%\n", vram_profile_names[i], vram_profile_counts[i],
                vram_profile_seconds[i] * 1e3, total > 0 ? 100.0 * vram_profile_seconds[i] / total : 0.0);
}

uform_status_t text_vram_launch_failed(uform_cuda_t const *cuda, CUresult result, char const *what, int32_t ordinal) {
    (void)cuda;
    return uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k : uform_status_invalid_argument_k,
                           result, "uform_encode_texts: %s on device %d", what, (int)ordinal);
}

/** Launches `function` on `stream` over a grid_x x grid_y grid of `block`-thread blocks; timed under
 *  `name` when profiling. */
static uform_status_t launch_grid(uform_cuda_t const *cuda, CUstream stream, int32_t ordinal, CUfunction function,
                                  char const *name, unsigned grid_x, unsigned grid_y, unsigned block, unsigned shared,
                                  void **arguments) {
    double start = 0;
    if (profiling()) cuda->StreamSynchronize(stream), start = uform_now_seconds();
    CUresult result = cuda->LaunchKernel(function, grid_x, grid_y, 1, block, 1, 1, shared, stream, arguments, NULL);
    if (profiling()) cuda->StreamSynchronize(stream), profile_add(name, uform_now_seconds() - start);
    return result == CUDA_SUCCESS ? uform_status_ok_k : text_vram_launch_failed(cuda, result, name, ordinal);
}

static uform_status_t launch(vram_job_t *job, vram_share_t *share, CUfunction function, char const *name, unsigned grid,
                             unsigned block, unsigned shared, void **arguments) {
    return launch_grid(job->vram->cuda, share->stream, share->copy->ordinal, function, name, grid, 1, block, shared,
                       arguments);
}

/* ---- Attention: the kernel choice and geometry (text_vram_private.h describes `text_vram_attention`) ---- */

enum { attention_flash_k = 0, attention_wmma_k = 1, attention_simt_k = 2 };
static int attention_ceiling_value = attention_flash_k;
/** Warps per head and block of the flash kernel at most: 8, or UFORM_GPU_FLASH_WARPS (1 to 8). */
static size_t attention_flash_warps = 8;
/** Keys per softmax step of the flash kernel: 0 (by head width: 32 for 32-wide heads, where it
 *  saves a third of the registers, else 64), or UFORM_GPU_FLASH_STEP (32 or 64). */
static int attention_flash_step = 0;
static pthread_once_t attention_ceiling_once = PTHREAD_ONCE_INIT;

static void attention_ceiling_read(void) {
    char const *value = getenv("UFORM_GPU_ATTENTION"), *simt = getenv("UFORM_GPU_ATTENTION_SIMT");
    char const *warps = getenv("UFORM_GPU_FLASH_WARPS");
    if (value && !strcmp(value, "wmma")) attention_ceiling_value = attention_wmma_k;
    else if (value && !strcmp(value, "simt")) attention_ceiling_value = attention_simt_k;
    if (simt && *simt && *simt != '0') attention_ceiling_value = attention_simt_k;
    if (warps && *warps >= '1' && *warps <= '8' && !warps[1]) attention_flash_warps = (size_t)(*warps - '0');
    char const *step = getenv("UFORM_GPU_FLASH_STEP");
    if (step && (!strcmp(step, "32") || !strcmp(step, "64"))) attention_flash_step = atoi(step);
}

/** The most capable attention kernel the environment allows (UFORM_GPU_ATTENTION, read once). */
static int attention_ceiling(void) {
    pthread_once(&attention_ceiling_once, attention_ceiling_read);
    return attention_ceiling_value;
}

/** `uform_text_attention_flash<head>x<step>_<dtype>` of `copy`'s module, looked up once; NULL where
 *  there is none (f32, other head widths, a fatbin without it). */
static CUfunction attention_flash_function(uform_cuda_t const *cuda, vram_copy_t *copy, uform_dtype_t dtype, int head) {
    int const slot = head == 32 ? 0 : head == 64 ? 1 : head == 128 ? 2 : -1;
    if (slot < 0 || dtype == uform_dtype_f32_k || !copy->module) return NULL;
    int const step = attention_flash_step ? attention_flash_step : head == 32 ? 32 : 64, which = step == 32 ? 0 : 1;
    pthread_mutex_lock(&copy->lock);
    if (!copy->attention_flash_state[slot][which]) {
        char name[64];
        snprintf(name, sizeof name, "uform_text_attention_flash%dx%d_%s", head, step,
                 dtype == uform_dtype_bf16_k ? "bf16" : "f16");
        CUfunction function = NULL;
        int found = cuda->ModuleGetFunction(&function, copy->module, name) == CUDA_SUCCESS &&
                    cuda->FuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           copy->shared_optin) == CUDA_SUCCESS;
        copy->attention_flash[slot][which] = found ? function : NULL;
        copy->attention_flash_state[slot][which] = found ? 1 : 2;
    }
    CUfunction function = copy->attention_flash[slot][which];
    pthread_mutex_unlock(&copy->lock);
    return function;
}

uform_status_t text_vram_attention(uform_cuda_t const *cuda, vram_copy_t *copy, CUstream stream, CUdeviceptr context,
                                   CUdeviceptr qkv, CUdeviceptr offsets, size_t sequences, size_t longest, int heads,
                                   int head, uform_dtype_t dtype) {
    float scale = (float)(1.0 / sqrt((double)head));
    size_t const element = element_size(dtype), optin = (size_t)copy->shared_optin;
    int const ceiling = attention_ceiling();
    if (!sequences || !longest) return uform_status_ok_k;
    /* FlashAttention-2 style on mma.sync: warps of 16 query rows, up to 8 per head and block
     * (`chunk`; UFORM_GPU_FLASH_WARPS lowers it), and for short sequences up to 4 heads per block
     * (`group`) so blocks keep 4 or more warps. */
    CUfunction flash = ceiling <= attention_flash_k ? attention_flash_function(cuda, copy, dtype, head) : NULL;
    if (flash) {
        size_t const most = attention_flash_warps;
        size_t const strips = (longest + 15) / 16, chunks = (strips + most - 1) / most;
        size_t const chunk = (strips + chunks - 1) / chunks;
        int group = 1;
        while (chunk * (size_t)group * 2 <= 4 && heads % (group * 2) == 0) group *= 2;
        size_t const buffers = longest > 64 ? 2 : 1; /* 64 keys per staged tile (`flash_keys`) */
        size_t const shared = buffers * (size_t)group * 2 * 64 * ((size_t)head + 8) * element;
        if (shared <= optin) {
            void *arguments[] = {&context, &qkv, &offsets, &heads, &scale, &group};
            return launch_grid(cuda, stream, copy->ordinal, flash, "attention_flash",
                               (unsigned)(sequences * (size_t)(heads / group)), (unsigned)chunks,
                               (unsigned)(chunk * (size_t)group * 32), (unsigned)shared, arguments);
        }
    }
    /* WMMA 16x16x16 through shared memory: one block of 4 warps per (sequence, head). */
    int padded = (int)align_up(longest, 16);
    size_t const ldh = (size_t)head + 8, lds = (size_t)(padded > head ? padded : head) + 4, ldp = (size_t)padded + 8;
    size_t const mma_shared = 2 * (size_t)padded * ldh * element +
                              4 * (16 * lds * 4 + 16 * ldp * element + 16 * 4 + 16 * ldh * element);
    unsigned const blocks = (unsigned)(sequences * (size_t)heads);
    if (ceiling <= attention_wmma_k && copy->attention_mma && head % 16 == 0 && mma_shared <= optin) {
        void *arguments[] = {&context, &qkv, &offsets, &heads, &head, &scale, &padded};
        return launch_grid(cuda, stream, copy->ordinal, copy->attention_mma, "attention_mma", blocks, 1, 128,
                           (unsigned)mma_shared, arguments);
    }
    size_t const simt_shared = (longest * (size_t)(head + 1) + longest * (size_t)head + 4 * ((size_t)head + longest)) * 4;
    if (simt_shared > optin)
        return uform_fail(uform_status_unsupported_k,
                          "uform_encode_texts: attention over %zu tokens with %d-wide heads needs %zu bytes of shared "
                          "memory; device %d allows %zu",
                          longest, head, simt_shared, (int)copy->ordinal, optin);
    void *arguments[] = {&context, &qkv, &offsets, &heads, &head, &scale};
    return launch_grid(cuda, stream, copy->ordinal, copy->attention_simt, "attention_simt", blocks, 1, 128,
                       (unsigned)simt_shared, arguments);
}

/** D[m][n] = A[m][k] W[n][k]^T (+ bias[n]) (+ C[m][n] when `residual`) (GELU with the GELU epilogue),
 *  in cuBLASLt's column-major terms: D^T (n x m) = W (n x k) A^T (k x m). */
static uform_status_t gemm_run(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t m, size_t n, size_t k,
                               CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d,
                               int epilogue);

/** `gemm_run`, timed under `label` when profiling. */
static uform_status_t gemm(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, char const *label, size_t m,
                           size_t n, size_t k, CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual,
                           CUdeviceptr d, int epilogue) {
    if (!profiling()) return gemm_run(job, share, b, m, n, k, a, w, bias, residual, d, epilogue);
    job->vram->cuda->StreamSynchronize(share->stream);
    double start = uform_now_seconds();
    uform_status_t status = gemm_run(job, share, b, m, n, k, a, w, bias, residual, d, epilogue);
    job->vram->cuda->StreamSynchronize(share->stream);
    profile_add(label, uform_now_seconds() - start);
    return status;
}

static uform_status_t gemm_run(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t m, size_t n, size_t k,
                               CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d,
                               int epilogue) {
    uform_cublaslt_t const *lt = job->vram->lt;
    vram_copy_t *copy = share->copy;
    int type = job->vram->lt_type;
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
    int found = 0;
    if (!lt_status) {
        pthread_mutex_lock(&copy->lock);
        for (size_t i = 0; i < VRAM_CACHE; ++i) {
            vram_algo_t const *entry = &copy->cache[i];
            if (entry->valid && entry->m == m && entry->n == n && entry->k == k && entry->workspace == job->workspace &&
                entry->epilogue == epilogue && entry->residual == (residual != 0))
                algo = entry->algo, found = 1;
        }
        pthread_mutex_unlock(&copy->lock);
    }
    if (!lt_status && !found) {
        uint64_t workspace = job->workspace;
        uform_lt_heuristic_t heuristic;
        int returned = 0;
        lt_status = lt->MatmulPreferenceCreate(&preference);
        if (!lt_status)
            lt_status = lt->MatmulPreferenceSetAttribute(preference, uform_lt_pref_max_workspace_k, &workspace, sizeof workspace);
        if (!lt_status)
            lt_status = lt->MatmulAlgoGetHeuristic(copy->lt, desc, la, lb, lc, lc, preference, 1, &heuristic, &returned);
        if (!lt_status && returned < 1) {
            status = uform_fail(uform_status_unsupported_k,
                                "uform_encode_texts: cuBLASLt has no algorithm for a %zu x %zu x %zu product on device %d",
                                m, n, k, (int)copy->ordinal);
        } else if (!lt_status) {
            algo = heuristic.algo, found = 1;
            pthread_mutex_lock(&copy->lock);
            size_t slot = (m * 31 + n * 7 + k + (size_t)epilogue * 3 + (residual != 0)) % VRAM_CACHE;
            copy->cache[slot] = (vram_algo_t){.m = m, .n = n, .k = k, .workspace = job->workspace, .epilogue = epilogue,
                                              .residual = residual != 0, .valid = 1, .algo = algo};
            pthread_mutex_unlock(&copy->lock);
        }
    }
    if (!lt_status && found) {
        float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
        lt_status = lt->Matmul(copy->lt, desc, &alpha, (void const *)(uintptr_t)w, la, (void const *)(uintptr_t)a, lb,
                               &beta, (void const *)(uintptr_t)(residual ? residual : d), lc, (void *)(uintptr_t)d, lc,
                               &algo, (void *)(uintptr_t)b->workspace, job->workspace, share->stream);
    }
    if (lt_status && status == uform_status_ok_k)
        status = uform_fail(uform_status_unsupported_k,
                            "uform_encode_texts: cuBLASLt failed (status %d) on a %zu x %zu x %zu product on device %d",
                            lt_status, m, n, k, (int)copy->ordinal);
    if (preference) lt->MatmulPreferenceDestroy(preference);
    if (la) lt->MatrixLayoutDestroy(la);
    if (lb) lt->MatrixLayoutDestroy(lb);
    if (lc) lt->MatrixLayoutDestroy(lc);
    if (desc) lt->MatmulDescDestroy(desc);
    return status;
}


static uform_status_t enqueue_graph(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t texts, size_t tokens, size_t longest);

/** Enqueues one chunk: encoded texts [first, end) of the job, written at output row `first - share->first`. */
uform_status_t text_vram_enqueue_chunk(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t end, int32_t *offsets) {
    uform_cuda_t const *cuda = job->vram->cuda;
    vram_copy_t *copy = share->copy;
    size_t texts = end - first, base = job->offsets[first], tokens = job->offsets[end] - base, longest = 0;
    for (size_t e = first; e <= end; ++e) offsets[e - first] = (int32_t)(job->offsets[e] - base);
    for (size_t e = first; e < end; ++e)
        if (job->offsets[e + 1] - job->offsets[e] > longest) longest = job->offsets[e + 1] - job->offsets[e];
    CUresult result = cuda->MemcpyHtoDAsync(b->ids, job->ids + base, tokens * 4, share->stream);
    if (result == CUDA_SUCCESS) result = cuda->MemcpyHtoDAsync(b->positions, job->positions + base, tokens * 4, share->stream);
    if (result == CUDA_SUCCESS) result = cuda->MemcpyHtoDAsync(b->offsets, offsets, (texts + 1) * 4, share->stream);
    if (result != CUDA_SUCCESS) return text_vram_launch_failed(cuda, result, "cuMemcpyHtoDAsync", copy->ordinal);
    return enqueue_graph(job, share, b, first, texts, tokens, longest);
}

/** The chunk's launches (everything after the uploads): what a graph captures. */
static uform_status_t enqueue_compute(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                      size_t texts, size_t tokens, size_t longest) {
    uform_text_tower_t const *tower = job->tower;
    vram_copy_t *copy = share->copy;

    int hidden = (int)tower->hidden, heads = (int)tower->heads, head = hidden / heads, inter = (int)tower->intermediate;
    int tokens_i = (int)tokens, texts_i = (int)texts;
    float epsilon = (float)tower->layer_norm_epsilon;
    CUdeviceptr type0 = copy->type0;
    {
        void *arguments[] = {(void *)&b->x, (void *)&b->ids, (void *)&b->positions, &copy->word, &copy->position, &type0,
                             &copy->embed_gamma, &copy->embed_beta, &tokens_i, &hidden, &epsilon};
        CHECK_STEP(launch(job, share, copy->embed, "embed", (unsigned)((tokens + 3) / 4), 128, 0, arguments));
    }
    unsigned row_blocks = (unsigned)((tokens + 3) / 4);
    for (size_t l = 0; l < tower->layers_count; ++l) {
        vram_layer_t const *layer = &copy->layers[l];
        CHECK_STEP(gemm(job, share, b, "gemm qkv", tokens, 3 * (size_t)hidden, (size_t)hidden, b->x, layer->qkv_weight, layer->qkv_bias,
                        0, b->qkv, uform_lt_epilogue_bias_k));
        CHECK_STEP(text_vram_attention(job->vram->cuda, copy, share->stream, b->ctx, b->qkv, b->offsets, texts, longest,
                                       heads, head, tower->weights_dtype));
        CHECK_STEP(gemm(job, share, b, "gemm out", tokens, (size_t)hidden, (size_t)hidden, b->ctx, layer->output_weight,
                        layer->output_bias, b->x, b->tmp, uform_lt_epilogue_bias_k));
        {
            void *arguments[] = {(void *)&b->x, (void *)&b->tmp, (void *)&layer->norm1_gamma, (void *)&layer->norm1_beta,
                                 &tokens_i, &hidden, &epsilon};
            CHECK_STEP(launch(job, share, copy->layer_norm, "layer_norm", row_blocks, 128, 0, arguments));
        }
        int exact = tower->weights_dtype == uform_dtype_f32_k;
        CHECK_STEP(gemm(job, share, b, "gemm up", tokens, (size_t)inter, (size_t)hidden, b->x, layer->up_weight, layer->up_bias, 0,
                        b->ffn, exact ? uform_lt_epilogue_bias_k : uform_lt_epilogue_gelu_bias_k));
        if (exact) {
            unsigned long long elements = (unsigned long long)tokens * (unsigned long long)inter;
            unsigned grid = (unsigned)((elements + 255) / 256 > 65535 ? 65535 : (elements + 255) / 256);
            void *arguments[] = {(void *)&b->ffn, &elements};
            CHECK_STEP(launch(job, share, copy->gelu, "gelu", grid, 256, 0, arguments));
        }
        CHECK_STEP(gemm(job, share, b, "gemm down", tokens, (size_t)hidden, (size_t)inter, b->ffn, layer->down_weight, layer->down_bias,
                        b->x, b->tmp, uform_lt_epilogue_bias_k));
        {
            void *arguments[] = {(void *)&b->x, (void *)&b->tmp, (void *)&layer->norm2_gamma, (void *)&layer->norm2_beta,
                                 &tokens_i, &hidden, &epsilon};
            CHECK_STEP(launch(job, share, copy->layer_norm, "layer_norm", row_blocks, 128, 0, arguments));
        }
    }
    int mean = tower->pooling == uform_pooling_mean_k;
    {
        void *arguments[] = {(void *)&b->pooled, (void *)&b->x, (void *)&b->offsets, &hidden, &mean};
        CHECK_STEP(launch(job, share, copy->pool, "pool", (unsigned)texts, 128, 0, arguments));
    }
    CUdeviceptr source = b->pooled;
    int width = (int)tower->embedding_dimensions;
    if (copy->projection) {
        CHECK_STEP(gemm(job, share, b, "gemm projection", texts, tower->embedding_dimensions, (size_t)hidden, b->pooled, copy->projection, 0, 0,
                        b->projected, uform_lt_epilogue_default_k));
        source = b->projected;
    }
    {
        CUdeviceptr out = b->out + (first - share->first) * job->row_bytes;
        int dims = (int)job->dims, layout = tower->normalize, user = job->out.normalize != 0;
        int out_dtype = job->out.dtype == uform_dtype_f32_k ? 0 : job->out.dtype == uform_dtype_bf16_k ? 1 : 2;
        void *arguments[] = {&out, &source, &texts_i, &width, &dims, &layout, &user, &out_dtype};
        CHECK_STEP(launch(job, share, copy->finish, "finish", (unsigned)((texts + 3) / 4), 128, 0, arguments));
    }
    return uform_status_ok_k;
}

/** Launches the chunk as a CUDA graph when its shape was seen before (captured on the second
 *  sighting, replayed after), else directly. UFORM_GPU_NO_GRAPHS=1 turns graphs off. A capture that
 *  fails marks the shape as not capturable and the chunk runs directly. */
static uform_status_t enqueue_graph(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t texts, size_t tokens, size_t longest) {
    static int disabled = -1;
    if (disabled < 0) {
        char const *value = getenv("UFORM_GPU_NO_GRAPHS");
        disabled = value && *value && *value != '0';
    }
    if (disabled || profiling()) return enqueue_compute(job, share, b, first, texts, tokens, longest);
    uform_cuda_t const *cuda = job->vram->cuda;
    vram_copy_t *copy = share->copy;
    uint64_t const key[12] = {(uint64_t)(uintptr_t)share->stream, (uint64_t)share->scratch, job->workspace,
                              (share->end - share->first) * job->row_bytes, share->chunk_tokens, tokens, texts,
                              align_up(longest, 16), (first - share->first) * job->row_bytes, job->dims,
                              (uint64_t)job->out.dtype, (uint64_t)(job->out.normalize != 0)};
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
        CUresult result = cuda->GraphLaunch(entry->exec, share->stream);
        pthread_mutex_unlock(&copy->lock);
        return result == CUDA_SUCCESS ? uform_status_ok_k : text_vram_launch_failed(cuda, result, "cuGraphLaunch", copy->ordinal);
    }
    if (entry) capture = entry->state == 1;
    else {
        if (oldest->exec) cuda->GraphExecDestroy(oldest->exec);
        memset(oldest, 0, sizeof *oldest);
        memcpy(oldest->key, key, sizeof key);
        oldest->state = 1, oldest->used = ++copy->graph_clock;
    }
    pthread_mutex_unlock(&copy->lock);
    if (!capture) return enqueue_compute(job, share, b, first, texts, tokens, longest);

    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    int captured = 0;
    if (cuda->StreamBeginCapture(share->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS) {
        uform_status_t status = enqueue_compute(job, share, b, first, texts, tokens, longest);
        CUresult ended = cuda->StreamEndCapture(share->stream, &graph);
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
    if (captured) result = cuda->GraphLaunch(entry && entry->exec ? entry->exec : exec, share->stream);
    pthread_mutex_unlock(&copy->lock);
    if (exec) {
        /* Another thread stored the same shape first, or it was evicted: ours ran, free it after. */
        if (!entry || entry->exec != exec) cuda->GraphExecDestroy(exec);
    }
    if (!captured) return enqueue_compute(job, share, b, first, texts, tokens, longest);
    return result == CUDA_SUCCESS ? uform_status_ok_k : text_vram_launch_failed(cuda, result, "cuGraphLaunch", copy->ordinal);
}

/** Copies every device's rows back (waiting on each stream in turn), then writes them in input order. */
