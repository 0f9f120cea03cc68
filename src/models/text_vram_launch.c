/**
 *  @file   text_vram_launch.c
 *  @brief  One text chunk's pass on a device (text_vram.c describes it): its launches and cuBLASLt
 *          products through vram_tower.c (algorithm cache, graphs, profiling), and the attention
 *          launch (`text_vram_attention`) that the image towers share.
 */
#define _GNU_SOURCE
#include "models/text_vram_private.h"

#include <math.h>    // `sqrt`
#include <pthread.h> // `pthread_once`
#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `getenv`, `atoi`
#include <string.h>  // `memcmp`, `strcmp`

/** What the chunk's products and launches run on. */
static vram_exec_t exec_of(vram_job_t const *job, vram_share_t const *share, CUdeviceptr workspace) {
    return (vram_exec_t){.vram = job->vram, .copy = share->copy, .stream = share->stream, .workspace = workspace,
                         .workspace_bytes = job->workspace, .verb = "uform_encode_texts"};
}

static uform_status_t launch(vram_job_t *job, vram_share_t *share, CUfunction function, char const *name, unsigned grid,
                             unsigned block, unsigned shared, void **arguments) {
    vram_exec_t e = exec_of(job, share, 0);
    return vram_launch(&e, function, name, grid, block, shared, arguments);
}

/** D[m][n] = A[m][k] W[n][k]^T (+ bias[n]) (+ C[m][n] when `residual`), see `vram_gemm`. */
static uform_status_t gemm(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, char const *label, size_t m,
                           size_t n, size_t k, CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual,
                           CUdeviceptr d, int epilogue) {
    vram_exec_t e = exec_of(job, share, b->workspace);
    return vram_gemm(&e, label, m, n, k, a, w, bias, residual, d, epilogue);
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
    if (result != CUDA_SUCCESS) return vram_launch_failed(result, "uform_encode_texts", "cuMemcpyHtoDAsync", copy->ordinal);
    CHECK_STEP(enqueue_graph(job, share, b, first, texts, tokens, longest));
    if (!job->out.features) return uform_status_ok_k;
    return vram_copy_features(job->vram, share, b->qkv, job->offsets, job->order, first, end, &job->out,
                              job->features_stride, job->features_row_bytes, job->staged_features,
                              job->piecewise ? &job->pieces : NULL, "uform_encode_texts");
}

/** A layer past its attention on `rows` rows (post-norm): x = norm1(ctx W_out + b + x) in place, the MLP
 *  with its residual, then `x_out` = norm2(...) (x itself, or the pooled rows of a CLS tail). */
static uform_status_t layer_past_attention(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b,
                                           vram_layer_t const *layer, size_t rows, CUdeviceptr ctx, CUdeviceptr x,
                                           CUdeviceptr x_out) {
    uform_text_tower_t const *tower = job->tower;
    vram_copy_t *copy = share->copy;
    int hidden = (int)tower->hidden, inter = (int)tower->intermediate, rows_i = (int)rows;
    float epsilon = (float)tower->layer_norm_epsilon;
    unsigned row_blocks = (unsigned)((rows + 3) / 4);
    CHECK_STEP(gemm(job, share, b, "gemm out", rows, (size_t)hidden, (size_t)hidden, ctx, layer->output_weight,
                    layer->output_bias, x, b->tmp, uform_lt_epilogue_bias_k));
    {
        void *arguments[] = {&x, (void *)&b->tmp, (void *)&layer->norm1_gamma, (void *)&layer->norm1_beta, &rows_i,
                             &hidden, &epsilon};
        CHECK_STEP(launch(job, share, copy->layer_norm, "layer_norm", row_blocks, 128, 0, arguments));
    }
    int exact = tower->weights_dtype == uform_dtype_f32_k;
    CHECK_STEP(gemm(job, share, b, "gemm up", rows, (size_t)inter, (size_t)hidden, x, layer->up_weight, layer->up_bias, 0,
                    b->ffn, exact ? uform_lt_epilogue_bias_k : uform_lt_epilogue_gelu_bias_k));
    if (exact) {
        unsigned long long elements = (unsigned long long)rows * (unsigned long long)inter;
        unsigned grid = (unsigned)((elements + 255) / 256 > 65535 ? 65535 : (elements + 255) / 256);
        void *arguments[] = {(void *)&b->ffn, &elements};
        CHECK_STEP(launch(job, share, copy->gelu, "gelu", grid, 256, 0, arguments));
    }
    CHECK_STEP(gemm(job, share, b, "gemm down", rows, (size_t)hidden, (size_t)inter, b->ffn, layer->down_weight,
                    layer->down_bias, x, b->tmp, uform_lt_epilogue_bias_k));
    void *arguments[] = {&x_out, (void *)&b->tmp, (void *)&layer->norm2_gamma, (void *)&layer->norm2_beta, &rows_i,
                         &hidden, &epsilon};
    return launch(job, share, copy->layer_norm, "layer_norm", row_blocks, 128, 0, arguments);
}

/** The last layer past its attention for the texts' first rows alone: those rows of x and of the
 *  attention's output gathered (the CLS pooling kernel) into `texts`-row buffers in qkv (free once
 *  attention has read it), then the rest of the layer on them, its last LayerNorm into the pooled rows. */
static uform_status_t enqueue_cls_tail(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b,
                                       vram_layer_t const *layer, size_t texts) {
    uform_text_tower_t const *tower = job->tower;
    vram_copy_t *copy = share->copy;
    int hidden = (int)tower->hidden, first = 0;
    size_t element = uform_dtype_bytes(tower->weights_dtype);
    CUdeviceptr xc = b->qkv, ctxc = b->qkv + share->chunk_tokens * (size_t)hidden * element;
    {
        void *arguments[] = {&xc, (void *)&b->x, (void *)&b->offsets, &hidden, &first};
        CHECK_STEP(launch(job, share, copy->pool, "gather", (unsigned)texts, 128, 0, arguments));
    }
    {
        void *arguments[] = {&ctxc, (void *)&b->ctx, (void *)&b->offsets, &hidden, &first};
        CHECK_STEP(launch(job, share, copy->pool, "gather", (unsigned)texts, 128, 0, arguments));
    }
    return layer_past_attention(job, share, b, layer, texts, ctxc, xc, b->pooled);
}

/** The chunk's launches (everything after the uploads): what a graph captures. */
static uform_status_t enqueue_compute(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                      size_t texts, size_t tokens, size_t longest) {
    uform_text_tower_t const *tower = job->tower;
    vram_copy_t *copy = share->copy;

    int hidden = (int)tower->hidden, heads = (int)tower->heads, head = hidden / heads;
    int tokens_i = (int)tokens, texts_i = (int)texts;
    float epsilon = (float)tower->layer_norm_epsilon;
    CUdeviceptr type0 = copy->w.type0;
    {
        void *arguments[] = {(void *)&b->x, (void *)&b->ids, (void *)&b->positions, &copy->w.word, &copy->w.position, &type0,
                             &copy->w.embed_gamma, &copy->w.embed_beta, &tokens_i, &hidden, &epsilon};
        CHECK_STEP(launch(job, share, copy->embed, "embed", (unsigned)((tokens + 3) / 4), 128, 0, arguments));
    }
    int tail = job->cls_tail;
    for (size_t l = 0; l < tower->layers_count; ++l) {
        vram_layer_t const *layer = &copy->layers[l];
        CHECK_STEP(gemm(job, share, b, "gemm qkv", tokens, 3 * (size_t)hidden, (size_t)hidden, b->x, layer->qkv_weight, layer->qkv_bias,
                        0, b->qkv, uform_lt_epilogue_bias_k));
        CHECK_STEP(text_vram_attention(job->vram->cuda, copy, share->stream, tower->weights_dtype, b->ctx, b->qkv, b->offsets,
                                       texts, longest, heads, head));
        if (tail && l + 1 == tower->layers_count) {
            CHECK_STEP(enqueue_cls_tail(job, share, b, layer, texts));
            break;
        }
        CHECK_STEP(layer_past_attention(job, share, b, layer, tokens, b->ctx, b->x, b->x));
    }
    int mean = tower->pooling == uform_pooling_mean_k;
    if (!tail) {
        void *arguments[] = {(void *)&b->pooled, (void *)&b->x, (void *)&b->offsets, &hidden, &mean};
        CHECK_STEP(launch(job, share, copy->pool, "pool", (unsigned)texts, 128, 0, arguments));
    }
    CUdeviceptr source = b->pooled;
    int width = (int)tower->embedding_dimensions;
    if (copy->w.projection) {
        CHECK_STEP(gemm(job, share, b, "gemm projection", texts, tower->embedding_dimensions, (size_t)hidden, b->pooled, copy->w.projection, 0, 0,
                        b->projected, uform_lt_epilogue_default_k));
        source = b->projected;
    }
    {
        CUdeviceptr out = b->out + (first - share->first) * job->row_bytes;
        int dims = (int)job->dims, layout = tower->normalize, user = job->out.normalize != 0;
        int out_dtype = job->out.dtype == uform_dtype_f32_k ? 0 : job->out.dtype == uform_dtype_bf16_k ? 1 : 2;
        void *arguments[] = {&out, &source, &texts_i, &width, &dims, &layout, &user, &out_dtype};
        CHECK_STEP(launch(job, share, copy->finish, "finish", (unsigned)((texts + 3) / 4), 128, 0, arguments));
        if (job->out.features) {
            /* Every token's row in the output dtype, into qkv (free once attention read it, and as
             * large at least: 3 hidden activations a row), for `text_vram_enqueue_chunk` to copy. */
            int none = 0;
            void *features[] = {(void *)&b->qkv, (void *)&b->x, &tokens_i, &hidden, &hidden, &none, &none, &out_dtype};
            CHECK_STEP(launch(job, share, copy->finish, "features", (unsigned)((tokens + 3) / 4), 128, 0, features));
        }
    }
    return uform_status_ok_k;
}

typedef struct text_chunk_t {
    vram_job_t *job;
    vram_share_t *share;
    vram_buffers_t const *b;
    size_t first, texts, tokens, longest;
} text_chunk_t;

static uform_status_t chunk_compute(void *context) {
    text_chunk_t const *c = (text_chunk_t const *)context;
    return enqueue_compute(c->job, c->share, c->b, c->first, c->texts, c->tokens, c->longest);
}

/** Launches the chunk through `vram_graph`, keyed by everything its launches depend on. */
static uform_status_t enqueue_graph(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t texts, size_t tokens, size_t longest) {
    uint64_t const key[12] = {(uint64_t)(uintptr_t)share->stream, (uint64_t)share->scratch, job->workspace,
                              (share->end - share->first) * job->row_bytes, share->chunk_tokens, tokens, texts,
                              align_up(longest, 16), (first - share->first) * job->row_bytes, job->dims,
                              (uint64_t)job->out.dtype, (uint64_t)(job->out.normalize != 0) | (uint64_t)job->cls_tail << 1 |
                                                            (uint64_t)(job->out.features != NULL) << 2};
    text_chunk_t chunk = {job, share, b, first, texts, tokens, longest};
    vram_exec_t e = exec_of(job, share, b->workspace);
    return vram_graph(&e, key, chunk_compute, &chunk);
}

/* ---- Attention: the kernel choice and geometry (vram_tower.h describes `text_vram_attention`) ---- */

enum { attention_flash_k = 0, attention_wmma_k = 1, attention_simt_k = 2 };
static int attention_ceiling_value = attention_flash_k;
/** Warps per head and block of the flash kernel at most: 8, or UFORM_GPU_FLASH_WARPS (1 to 8). */
static size_t attention_flash_warps = 8;
/** Keys per softmax step of the flash kernel: 0 (by head width: 32 for 32-wide heads, where it
 *  saves a third of the registers, else 64), or UFORM_GPU_FLASH_STEP (32 or 64). */
static int attention_flash_step = 0;
/** Whether every key tile of a text gets its own shared buffer, loaded up front (one barrier per
 *  block instead of two per tile) where they fit: 1, or UFORM_GPU_FLASH_RESIDENT=0 (two buffers). */
static int attention_flash_resident = 1;
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
    char const *resident = getenv("UFORM_GPU_FLASH_RESIDENT");
    if (resident && (!strcmp(resident, "0") || !strcmp(resident, "1"))) attention_flash_resident = atoi(resident);
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
        /* All of the unified L1 as shared memory where the driver allows it: the staged tiles, not L1,
         * serve the keys and values, and registers then bound the blocks per SM, not shared bytes. */
        int found = cuda->ModuleGetFunction(&function, copy->module, name) == CUDA_SUCCESS &&
                    cuda->FuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           copy->shared_optin) == CUDA_SUCCESS;
        if (found)
            (void)cuda->FuncSetAttribute(function, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                         CU_SHAREDMEM_CARVEOUT_MAX_SHARED);
        copy->attention_flash[slot][which] = found ? function : NULL;
        copy->attention_flash_state[slot][which] = found ? 1 : 2;
    }
    CUfunction function = copy->attention_flash[slot][which];
    pthread_mutex_unlock(&copy->lock);
    return function;
}

uform_status_t text_vram_attention(uform_cuda_t const *cuda, vram_copy_t *copy, CUstream stream, uform_dtype_t dtype,
                                   CUdeviceptr context, CUdeviceptr qkv, CUdeviceptr offsets, size_t sequences,
                                   size_t longest, int heads, int head) {
    float scale = (float)(1.0 / sqrt((double)head));
    size_t const element = uform_dtype_bytes(dtype), optin = (size_t)copy->shared_optin;
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
        size_t const tiles = (longest + 63) / 64, tile_bytes = (size_t)group * 2 * 64 * ((size_t)head + 8) * element;
        int resident = attention_flash_resident && tiles > 1 && tiles * tile_bytes <= optin;
        size_t const buffers = resident ? tiles : tiles > 1 ? 2 : 1; /* 64 keys per staged tile (`flash_keys`) */
        size_t const shared = buffers * tile_bytes;
        if (shared <= optin) {
            int chunks_argument = (int)chunks;
            void *arguments[] = {&context, &qkv, &offsets, &heads, &scale, &group, &chunks_argument, &resident};
            return vram_launch_grid(cuda, stream, copy->ordinal, "attention", flash, "attention_flash",
                                    (unsigned)(sequences * (size_t)(heads / group) * chunks), 1,
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
        return vram_launch_grid(cuda, stream, copy->ordinal, "attention", copy->attention_mma, "attention_mma", blocks, 1, 128,
                           (unsigned)mma_shared, arguments);
    }
    size_t const simt_shared = (longest * (size_t)(head + 1) + longest * (size_t)head + 4 * ((size_t)head + longest)) * 4;
    if (simt_shared > optin)
        return uform_fail(uform_status_unsupported_k,
                          "attention over %zu tokens with %d-wide heads needs %zu bytes of shared "
                          "memory; device %d allows %zu",
                          longest, head, simt_shared, (int)copy->ordinal, optin);
    void *arguments[] = {&context, &qkv, &offsets, &heads, &head, &scale};
    return vram_launch_grid(cuda, stream, copy->ordinal, "attention", copy->attention_simt, "attention_simt", blocks, 1, 128,
                       (unsigned)simt_shared, arguments);
}
