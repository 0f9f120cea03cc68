/**
 *  @file   image_vram_encode.c
 *  @brief  `uform_encode_images` on VRAM executors (image_vram.h): the job, the device callback and
 *          one chunk's pass, on the machinery the text towers share (vram_tower.h).
 *
 *  In waves of images (`wave_size`: up to 128, at least two from 32 images on, one for ready crops),
 *  each one deferred call on the executor whose host part decodes the wave while the devices still
 *  run the wave before (vram.c runs a call's host part before its device part, and a deferred call
 *  returns once its device part is enqueued), then (a blocking encode) waits for every wave:
 *  1. the host part (DYNAMIC, one task per image) decodes, resizes and centre-crops each image on the
 *     executor's decoder threads (each thread its own scratch) exactly as the CPU path does
 *     (src/image/), into `side * side * 3` bytes of 8-bit RGB per image in the tower's pinned staging
 *     buffer, recording its status. With `statuses`, a bad image gets its status and a zero row;
 *     without, the first bad image fails the call, naming its index, and nothing is written.
 *  2. the device part packs the wave's decoded images after the earlier waves' (failed ones left
 *     out), splits them over the executor's devices in proportion to their SMs, each share cut into
 *     chunks of whole images within the scratch the call holds (planned for the largest wave before
 *     anything is decoded: LIMIT_EXCEEDED when one image cannot fit `scratch_limit`). Per chunk of n
 *     images (S = 1 + registers + P tokens each, T = n S) the callback uploads the 8-bit crops and
 *     the sequences' offsets, then enqueues (as a CUDA graph from a shape's second sighting on):
 *       patches = normalise(pixels)             (image_gpu.cuh: [n P][depth], (v / 255 - mean) / std)
 *       tmp = patches Wp^T + bp                 (cuBLASLt, BIAS epilogue)
 *       x = [CLS, registers, tmp + pos]         (image_gpu.cuh)
 *       per layer:
 *         h = LayerNorm1(x); qkv = h Wqkv^T + b (BIAS)
 *         h = attention(qkv)                    (the text towers' kernel, one sequence per image)
 *         tmp = h (ls1 Wo)^T + ls1 bo + x       (BIAS, beta = 1 on x: LayerScale folded at upload)
 *         h = LayerNorm2(tmp); ffn = GELU(h W1^T + b1)
 *         x = ffn (ls2 W2)^T + ls2 b2 + tmp
 *       final LayerNorm with pooling (the [CLS] row, or the mean of all S rows after the norm, as
 *       image_pass.c), the projection, and the text towers' `finish` (truncation, the caller's
 *       normalisation, the output dtype) into the share's output rows.
 *     A share of at least `split_images()` images that fits one chunk is cut in two chunks instead
 *     (`enqueue_split`, a fifth and the rest): both chunks' crops go up on a copy stream beside the
 *     device's stream (the tower's `vram_uploader_t` for that stream), the second's while the
 *     first's pass runs. A smaller share that fits one chunk uploads on that copy stream into one of
 *     the uploader's own two device buffers, in turn (`enqueue_alternating`), waiting only for the
 *     pass that last read it: under the previous wave's or deferred call's pass.
 *     The last device's callback enqueues the copies of every device's rows into pinned host rows.
 *  When every wave finished, the rows are written in input order (`vram_write_rows`): by the verb
 *  when blocking; for a deferred encode, whose last wave carries the caller's outcome, by `job_settle`
 *  as that outcome finishes (`uform_vram_call_settling`), which also frees the job. Without the
 *  pinned buffers (two other calls of the same model hold them) there is one wave, copied back
 *  synchronously.
 */
#define _GNU_SOURCE
#include "models/image_vram.h"

#include "image/image.h"
#include "models/vram_tower.h"
#include "../../tools/strict_number.h"

#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `memmove`

#define VERB "uform_encode_images"

typedef struct image_job_t {
    struct uform_model_s const *model;
    vram_tower_t *vram;
    uform_image_tower_t const *tower;
    uform_image_t const *images;
    size_t count, side, per_image, sequence, depth;
    uform_image_preprocess_options_t preprocess;
    uform_image_scratch_t *scratches; /**< [threads] */
    size_t threads;
    uint8_t *rgb;                 /**< [count][per_image]; each wave's encoded ones packed after the previous waves'. */
    int pinned;                   /**< `rgb` and `host_rows` are in the tower's pinned staging buffer (else malloc'd). */
    uform_status_t *items;        /**< [count] decoding statuses. */
    size_t encoded;
    size_t *order;                /**< [encoded] original indices. */
    size_t *offsets;              /**< [encoded + 1]: e S. */
    int32_t *chunk_offsets;       /**< [encoded + 1]: e S, uploaded per chunk. */
    uform_embeddings_t out;
    size_t dims, row_bytes;
    /** With `out.features`: bytes between images' features, and of one row of them (dim, output dtype). */
    size_t features_stride, features_row_bytes;
    unsigned char *host_rows;     /**< [encoded][row_bytes] */
    /** With `out.features` and `pinned`: [count * sequence][features_row_bytes] in the staging buffer,
     *  every chunk's features copied in at once (else NULL: copied item by item). */
    unsigned char *staged_features;
    /** A blocking call's staged features, copied out piece by piece as they land (`piecewise`). */
    vram_pieces_t pieces;
    int piecewise;
    uform_status_t *statuses;
    vram_share_t *shares;
    size_t shares_count, workspace;
    /* The wave being submitted: inputs [wave_first, wave_end), packed from `wave_base` on. */
    size_t wave_first, wave_end, wave_base;
    size_t scratch; /**< Scratch each wave's call holds: planned for the largest wave. */
    int cls_tail;   /**< The last layer past attention for the [CLS] rows alone (`uform_forward_cls_tail`). */
    vram_waves_t run; /**< The waves' calls; `run.outcomes` is the job's. */
} image_job_t;

/** Pointers into one device's scratch: [workspace][output rows][a chunk's buffers]. */
typedef struct image_buffers_t {
    CUdeviceptr workspace, out, pixels, offsets, x, tmp, h, qkv, ffn, pooled, projected;
} image_buffers_t;

static void job_free(image_job_t *job) {
    if (!job) return;
    if (job->scratches)
        for (size_t t = 0; t < job->threads; ++t) uform_image_scratch_free(&job->scratches[t]);
    vram_pieces_free(job->vram->cuda, &job->pieces);
    if (job->pinned) vram_staging_give(job->vram, job->rgb);
    else free(job->rgb), free(job->host_rows), free(job->chunk_offsets);
    free(job->scratches), free(job->items), free(job->order), free(job->offsets), free(job->shares);
    free(job->run.outcomes);
    free(job);
}

/** The rows in input order, and the features (from the staging buffer, on `executor`'s decoder threads
 *  when given; those of images that failed zeroed). */
static void write_rows(image_job_t const *job, uform_executor_t executor, int features_written) {
    vram_write_rows(job->host_rows, job->row_bytes, job->order, job->encoded, job->count, &job->out, job->items,
                    job->statuses);
    if (job->out.features && !features_written)
        vram_write_features(executor, &job->out, job->features_stride, job->sequence, job->features_row_bytes,
                            job->order, job->offsets, job->encoded, job->count, job->staged_features);
}

/** A deferred encode's end (`uform_vram_settle_t`, its last wave settling): the rows in input order
 *  when every wave succeeded, then the job freed. */
static void job_settle(void *context, uform_status_t *status, char *message, size_t message_bytes) {
    image_job_t *job = (image_job_t *)context;
    vram_waves_settled(&job->run, status, message, message_bytes);
    if (*status == uform_status_ok_k) write_rows(job, NULL, 0);
    job_free(job);
}

static void decode_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)domain;
    image_job_t *job = (image_job_t *)context;
    size_t item = job->wave_first + task;
    job->items[item] = uform_image_preprocess(&job->images[item], &job->preprocess, &job->scratches[thread], NULL,
                                              job->rgb + item * job->per_image);
}

/** The layout of a chunk of `tokens / S` images (whole images only). */
static image_buffers_t chunk_layout(image_job_t const *job, size_t tokens, CUdeviceptr at) {
    uform_image_config_t const *c = &job->tower->config;
    size_t n = tokens / job->sequence, t = n * job->sequence, e = uform_dtype_bytes(job->tower->weights_dtype);
    size_t ffn = t * c->intermediate > n * c->patches * job->depth ? t * c->intermediate : n * c->patches * job->depth;
    image_buffers_t b = {0};
#define TAKE(field, bytes) (b.field = at, at += align_up((bytes), VRAM_ALIGN))
    TAKE(pixels, n * job->per_image);
    TAKE(offsets, (n + 1) * 4);
    TAKE(x, t * c->dim * e);
    TAKE(tmp, t * c->dim * e);
    TAKE(h, t * c->dim * e);
    TAKE(qkv, t * 3 * c->dim * e);
    TAKE(ffn, ffn * e);
    TAKE(pooled, n * c->dim * e);
    TAKE(projected, n * c->embedding_dimensions * e);
#undef TAKE
    b.workspace = at; /* the end: the chunk's size from 0 */
    return b;
}

static size_t chunk_bytes(void const *context, size_t tokens) {
    return (size_t)chunk_layout((image_job_t const *)context, tokens, 0).workspace;
}

static image_buffers_t buffers_at(image_job_t const *job, vram_share_t const *share, CUdeviceptr base) {
    CUdeviceptr out = base + align_up(job->workspace, VRAM_ALIGN);
    CUdeviceptr chunk = out + align_up((share->end - share->first) * job->row_bytes, VRAM_ALIGN);
    image_buffers_t b = chunk_layout(job, share->chunk_tokens, chunk);
    b.workspace = base, b.out = out;
    return b;
}

/* ---- One chunk ---- */

typedef struct image_chunk_t {
    image_job_t *job;
    vram_share_t *share;
    image_buffers_t const *b;
    vram_exec_t const *e;
    size_t first, n;
    CUdeviceptr pixels; /**< The chunk's 8-bit crops: `b->pixels`, or past the other chunk's in a split share. */
} image_chunk_t;

static uform_status_t ln(vram_exec_t const *e, CUdeviceptr out, CUdeviceptr in, CUdeviceptr gamma, CUdeviceptr beta,
                         size_t rows, int dim, float epsilon) {
    int rows_i = (int)rows;
    void *arguments[] = {&out, &in, &gamma, &beta, &rows_i, &dim, &epsilon};
    return vram_launch(e, e->copy->layer_norm, "layer_norm", (unsigned)((rows + 3) / 4), 128, 0, arguments);
}

static unsigned elementwise_grid(unsigned long long elements) {
    unsigned long long blocks = (elements + 255) / 256;
    return (unsigned)(blocks > 65535 ? 65535 : blocks ? blocks : 1);
}

/** A layer past its attention on `rows` rows: x_out = x + ls2 mlp(norm2(x + ls1 (ctx W_out + b))), the
 *  LayerScales folded into the weights; `ctx` and `x` are the attention's output and the stream,
 *  `tmp`, `h` and `ffn` the chunk's. `x_out` may be `x`. */
static uform_status_t layer_past_attention(vram_exec_t const *e, vram_layer_t const *layer, image_buffers_t const *b,
                                           size_t rows, CUdeviceptr ctx, CUdeviceptr x, CUdeviceptr x_out,
                                           uform_image_config_t const *c, int exact) {
    size_t d = c->dim, f = c->intermediate;
    int dim = (int)d;
    float epsilon = (float)c->layer_norm_epsilon;
    CHECK_STEP(vram_gemm(e, "gemm out", rows, d, d, ctx, layer->output_weight, layer->output_bias, x, b->tmp,
                         uform_lt_epilogue_bias_k));
    CHECK_STEP(ln(e, b->h, b->tmp, layer->norm2_gamma, layer->norm2_beta, rows, dim, epsilon));
    CHECK_STEP(vram_gemm(e, "gemm up", rows, f, d, b->h, layer->up_weight, layer->up_bias, 0, b->ffn,
                         exact ? uform_lt_epilogue_bias_k : uform_lt_epilogue_gelu_bias_k));
    if (exact) {
        unsigned long long elements = (unsigned long long)rows * (unsigned long long)f;
        void *arguments[] = {(void *)&b->ffn, &elements};
        CHECK_STEP(vram_launch(e, e->copy->gelu, "gelu", elementwise_grid(elements), 256, 0, arguments));
    }
    return vram_gemm(e, "gemm down", rows, d, f, b->ffn, layer->down_weight, layer->down_bias, b->tmp, x_out,
                     uform_lt_epilogue_bias_k);
}

static uform_status_t chunk_compute(void *context) {
    image_chunk_t const *chunk = (image_chunk_t const *)context;
    image_job_t *job = chunk->job;
    image_buffers_t const *b = chunk->b;
    vram_exec_t const *e = chunk->e;
    vram_copy_t *copy = e->copy;
    uform_image_config_t const *c = &job->tower->config;
    size_t n = chunk->n, S = job->sequence, T = n * S, P = c->patches, d = c->dim;
    int dim = (int)d, heads = (int)c->heads, head = dim / heads;
    float epsilon = (float)c->layer_norm_epsilon;
    {
        /* Threads as image_gpu.cuh's kernels take them: 16 pixels of a patch row each where patch rows are
         * whole 16-byte pieces, else a column; 8 columns of a token row each. */
        int side = (int)c->image_size, patch = (int)c->patch_size, grid = (int)c->grid, depth = (int)job->depth;
        int rows = (int)(n * P);
        float m0 = c->mean[0], m1 = c->mean[1], m2 = c->mean[2], s0 = c->std[0], s1 = c->std[1], s2 = c->std[2];
        int wide = patch % 16 == 0 && side * 3 % 16 == 0;
        unsigned long long threads = (unsigned long long)rows * (wide ? (unsigned long long)(patch * (patch / 16)) : (unsigned long long)depth);
        void *arguments[] = {(void *)&b->ffn, (void *)&chunk->pixels, &side, &patch, &grid, &depth,
                             &m0, &m1, &m2, &s0, &s1, &s2, &rows};
        CHECK_STEP(vram_launch(e, copy->image_patches, "image_patches", (unsigned)((threads + 255) / 256), 256, 0, arguments));
    }
    CHECK_STEP(vram_gemm(e, "gemm patches", n * P, d, job->depth, b->ffn, copy->w.patch_weight, copy->w.patch_bias, 0,
                         b->tmp, uform_lt_epilogue_bias_k));
    {
        int sequence = (int)S, prefix_rows = (int)(1 + c->reg_tokens), rows = (int)T;
        unsigned long long threads = (unsigned long long)T * (d % 8 == 0 ? d / 8 : d);
        void *arguments[] = {(void *)&b->x, (void *)&b->tmp, &copy->w.patch_position, &copy->w.prefix, &sequence,
                             &prefix_rows, &dim, &rows};
        CHECK_STEP(vram_launch(e, copy->image_assemble, "image_assemble", (unsigned)((threads + 255) / 256), 256, 0, arguments));
    }
    int exact = job->tower->weights_dtype == uform_dtype_f32_k, tail = job->cls_tail;
    for (size_t l = 0; l < c->layers_count; ++l) {
        vram_layer_t const *layer = &copy->layers[l];
        CHECK_STEP(ln(e, b->h, b->x, layer->norm1_gamma, layer->norm1_beta, T, dim, epsilon));
        CHECK_STEP(vram_gemm(e, "gemm qkv", T, 3 * d, d, b->h, layer->qkv_weight, layer->qkv_bias, 0, b->qkv,
                             uform_lt_epilogue_bias_k));
        CHECK_STEP(text_vram_attention(job->vram->cuda, copy, e->stream, job->tower->weights_dtype, b->h, b->qkv, b->offsets,
                                       n, S, heads, head));
        if (tail && l + 1 == c->layers_count) {
            /* The CLS tail: x's and the attention output's [CLS] rows gathered (the CLS pooling
             * kernel) into n-row buffers in qkv, free once attention has read it; the rest of the
             * layer on them. */
            size_t element = uform_dtype_bytes(job->tower->weights_dtype);
            CUdeviceptr xc = b->qkv, ctxc = b->qkv + align_up(n * d * element, VRAM_ALIGN);
            int first_row = 0;
            {
                void *arguments[] = {&xc, (void *)&b->x, (void *)&b->offsets, &dim, &first_row};
                CHECK_STEP(vram_launch(e, copy->pool, "gather", (unsigned)n, 128, 0, arguments));
            }
            {
                void *arguments[] = {&ctxc, (void *)&b->h, (void *)&b->offsets, &dim, &first_row};
                CHECK_STEP(vram_launch(e, copy->pool, "gather", (unsigned)n, 128, 0, arguments));
            }
            /* The down product writes the pooled rows, which the final LayerNorm takes. */
            CHECK_STEP(layer_past_attention(e, layer, b, n, ctxc, xc, b->pooled, c, exact));
            break;
        }
        CHECK_STEP(layer_past_attention(e, layer, b, T, b->h, b->x, b->x, c, exact));
    }
    int mean = c->pooling == uform_pooling_mean_k, features = job->out.features != NULL;
    if (mean || features) {
        /* Every row normalised (features need them all), then pooled: the mean, or the [CLS] row. */
        CHECK_STEP(ln(e, b->h, b->x, copy->w.norm_gamma, copy->w.norm_beta, T, dim, epsilon));
        void *arguments[] = {(void *)&b->pooled, (void *)&b->h, (void *)&b->offsets, &dim, &mean};
        CHECK_STEP(vram_launch(e, copy->pool, "pool", (unsigned)n, 128, 0, arguments));
    } else {
        if (!tail) {
            void *arguments[] = {(void *)&b->pooled, (void *)&b->x, (void *)&b->offsets, &dim, &mean};
            CHECK_STEP(vram_launch(e, copy->pool, "pool", (unsigned)n, 128, 0, arguments));
        }
        CHECK_STEP(ln(e, b->pooled, b->pooled, copy->w.norm_gamma, copy->w.norm_beta, n, dim, epsilon));
    }
    CHECK_STEP(vram_gemm(e, "gemm projection", n, c->embedding_dimensions, d, b->pooled, copy->w.projection, 0, 0,
                         b->projected, uform_lt_epilogue_default_k));
    {
        CUdeviceptr out = b->out + (chunk->first - chunk->share->first) * job->row_bytes;
        int images = (int)n, width = (int)c->embedding_dimensions, dims = (int)job->dims, layout = 0;
        int user = job->out.normalize != 0;
        int out_dtype = job->out.dtype == uform_dtype_f32_k ? 0 : job->out.dtype == uform_dtype_bf16_k ? 1 : 2;
        void *arguments[] = {&out, (void *)&b->projected, &images, &width, &dims, &layout, &user, &out_dtype};
        CHECK_STEP(vram_launch(e, copy->finish, "finish", (unsigned)((n + 3) / 4), 128, 0, arguments));
        if (features) {
            /* Every token's normalised row in the output dtype, into qkv (free after the last
             * attention, 3 dim activations a row), for `enqueue_pass` to copy. */
            int rows = (int)T, none = 0;
            void *rows_out[] = {(void *)&b->qkv, (void *)&b->h, &rows, &dim, &dim, &none, &none, &out_dtype};
            CHECK_STEP(vram_launch(e, copy->finish, "features", (unsigned)((T + 3) / 4), 128, 0, rows_out));
        }
    }
    return uform_status_ok_k;
}

/** Enqueues a chunk's pass (through `vram_graph`) on the share's stream, its crops already at `pixels`. */
static uform_status_t enqueue_pass(image_job_t *job, vram_share_t *share, image_buffers_t const *b, size_t first,
                                   size_t end, CUdeviceptr pixels) {
    size_t n = end - first;
    vram_exec_t e = {.vram = job->vram, .copy = share->copy, .stream = share->stream, .workspace = b->workspace,
                     .workspace_bytes = job->workspace, .verb = VERB};
    image_chunk_t chunk = {job, share, b, &e, first, n, pixels};
    uint64_t const key[12] = {(uint64_t)(uintptr_t)share->stream, (uint64_t)share->scratch, job->workspace,
                              (share->end - share->first) * job->row_bytes, share->chunk_tokens, n,
                              (first - share->first) * job->row_bytes, job->dims, (uint64_t)job->out.dtype,
                              (uint64_t)(job->out.normalize != 0),
                              0x1a6e | (uint64_t)job->cls_tail << 16 | (uint64_t)(job->out.features != NULL) << 17,
                              (uint64_t)(pixels - b->pixels)};
    CHECK_STEP(vram_graph(&e, key, chunk_compute, &chunk));
    if (!job->out.features) return uform_status_ok_k;
    /* Shares count the wave's images; `order` and `offsets` the job's. */
    return vram_copy_features(job->vram, share, b->qkv, job->offsets, job->order, job->wave_base + first,
                              job->wave_base + end, &job->out, job->features_stride, job->features_row_bytes,
                              job->staged_features, job->piecewise ? &job->pieces : NULL, VERB);
}

/** Uploads a chunk's pixels and offsets on the share's stream, then enqueues its pass. */
static uform_status_t enqueue_chunk(image_job_t *job, vram_share_t *share, image_buffers_t const *b, size_t first,
                                    size_t end) {
    uform_cuda_t const *cuda = job->vram->cuda;
    size_t n = end - first;
    double start = vram_profiling() ? (cuda->StreamSynchronize(share->stream), uform_now_seconds()) : 0;
    CUresult result = cuda->MemcpyHtoDAsync(b->pixels, job->rgb + (job->wave_base + first) * job->per_image,
                                            n * job->per_image, share->stream);
    if (result == CUDA_SUCCESS) result = cuda->MemcpyHtoDAsync(b->offsets, job->chunk_offsets, (n + 1) * 4, share->stream);
    if (vram_profiling()) cuda->StreamSynchronize(share->stream), vram_profile_add("upload pixels", uform_now_seconds() - start);
    if (result != CUDA_SUCCESS) return vram_launch_failed(result, VERB, "cuMemcpyHtoDAsync", share->copy->ordinal);
    return enqueue_pass(job, share, b, first, end, b->pixels);
}

/** Images a share needs before it is cut in two overlapped chunks (`enqueue_split`); at least 2.
 *  UFORM_GPU_UPLOAD_SPLIT=N sets it (0: never; 1 counts as 2). */
static size_t split_images(void) {
    static size_t value = 128;
    static int read = 0;
    if (!__atomic_load_n(&read, __ATOMIC_ACQUIRE)) {
        size_t forced = 0;
        if (strict_count(getenv("UFORM_GPU_UPLOAD_SPLIT"), 0, SIZE_MAX, false, &forced))
            __atomic_store_n(&value, forced == 1 ? 2 : forced, __ATOMIC_RELAXED);
        __atomic_store_n(&read, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&value, __ATOMIC_RELAXED);
}

/** Whether a share that fits one chunk below the split uploads its crops into the uploader's own
 *  buffers in turn (`enqueue_alternating`); UFORM_GPU_ALTERNATE=0 turns it off (into the scratch,
 *  behind everything on the stream, as before). */
static int alternating_allowed(void) {
    static int value = 1, read = 0;
    if (!__atomic_load_n(&read, __ATOMIC_ACQUIRE)) {
        size_t forced = 1;
        if (strict_count(getenv("UFORM_GPU_ALTERNATE"), 0, 1, false, &forced))
            __atomic_store_n(&value, (int)forced, __ATOMIC_RELAXED);
        __atomic_store_n(&read, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&value, __ATOMIC_RELAXED);
}

/** A share that fits one chunk, cut in two: both chunks' crops go up on the uploader's stream (after
 *  what the share's stream holds, so no earlier call's use of the scratch is overwritten), each into
 *  its own part of the chunk's pixel buffer, and the share's stream waits for each chunk's upload just
 *  before its pass: the second chunk's upload runs under the first chunk's pass. The first chunk is a
 *  fifth of the share, so only its upload is exposed: on an H200 at 256 raw crops a call, a fifth ran
 *  ViT-S/16 3.9% and ViT-B/16 1.1% faster than no cut, a third 2.2% and 0.6%, halves 1.0% and -0.8%
 *  (bench/RESULTS.md, 2026-12-01, seventh). */
static uform_status_t enqueue_split(image_job_t *job, vram_share_t *share, image_buffers_t const *b,
                                    vram_uploader_t *uploader) {
    uform_cuda_t const *cuda = job->vram->cuda;
    size_t first_images = (share->end - share->first) / 5;
    if (first_images < 1) first_images = 1;
    size_t const cut = share->first + first_images;
    size_t const bounds[3] = {share->first, cut, share->end};
    char const *what = "cuEventRecord";
    CUresult result = cuda->EventRecord(uploader->start, share->stream);
    if (result == CUDA_SUCCESS) what = "cuStreamWaitEvent", result = cuda->StreamWaitEvent(uploader->stream, uploader->start, 0);
    /* Offsets e S for the whole share: each chunk's are a prefix. */
    if (result == CUDA_SUCCESS)
        what = "cuMemcpyHtoDAsync",
        result = cuda->MemcpyHtoDAsync(b->offsets, job->chunk_offsets, (share->end - share->first + 1) * 4, share->stream);
    for (int c = 0; c < 2 && result == CUDA_SUCCESS; ++c) {
        size_t n = bounds[c + 1] - bounds[c];
        what = "cuMemcpyHtoDAsync";
        result = cuda->MemcpyHtoDAsync(b->pixels + (bounds[c] - share->first) * job->per_image,
                                       job->rgb + (job->wave_base + bounds[c]) * job->per_image, n * job->per_image,
                                       uploader->stream);
        if (result == CUDA_SUCCESS) what = "cuEventRecord", result = cuda->EventRecord(uploader->ready[c], uploader->stream);
    }
    if (result != CUDA_SUCCESS) return vram_launch_failed(result, VERB, what, share->copy->ordinal);
    for (int c = 0; c < 2; ++c) {
        result = cuda->StreamWaitEvent(share->stream, uploader->ready[c], 0);
        if (result != CUDA_SUCCESS) return vram_launch_failed(result, VERB, "cuStreamWaitEvent", share->copy->ordinal);
        CHECK_STEP(enqueue_pass(job, share, b, bounds[c], bounds[c + 1],
                                b->pixels + (bounds[c] - share->first) * job->per_image));
    }
    return uform_status_ok_k;
}

/** A share that fits one chunk, below the split: its crops go up on the uploader's stream into the
 *  uploader's own device buffers, used in turn, and the pass reads them from there. The upload waits
 *  only for the pass that last read that buffer (two calls of this model on this stream ago), not for
 *  the stream: so when the caller keeps deferred calls in flight, a call's upload runs under the
 *  call before's pass. False (nothing enqueued) when the buffers cannot be had: the caller then
 *  uploads into the scratch as usual. */
static bool enqueue_alternating(image_job_t *job, vram_share_t *share, image_buffers_t const *b, vram_uploader_t *u,
                                uform_status_t *status) {
    uform_cuda_t const *cuda = job->vram->cuda;
    size_t n = share->end - share->first, bytes = n * job->per_image;
    if (u->pixels_bytes < bytes) { /* grown once both buffers' last uploads and readers finished */
        if (cuda->StreamSynchronize(u->stream) != CUDA_SUCCESS) return false;
        for (int r = 0; r < 2; ++r) {
            if (!u->pixels[r]) continue;
            if (cuda->EventSynchronize(u->freed[r]) != CUDA_SUCCESS) return false;
            cuda->MemFree(u->pixels[r]);
            u->pixels[r] = 0;
        }
        u->pixels_bytes = 0;
        size_t grown = align_up(bytes + bytes / 4, VRAM_ALIGN);
        if (cuda->MemAlloc(&u->pixels[0], grown) != CUDA_SUCCESS) return u->pixels[0] = 0, false;
        if (cuda->MemAlloc(&u->pixels[1], grown) != CUDA_SUCCESS) {
            cuda->MemFree(u->pixels[0]);
            return u->pixels[0] = u->pixels[1] = 0, false;
        }
        u->pixels_bytes = grown;
    }
    int r = u->turn ^= 1;
    char const *what = "cuStreamWaitEvent";
    CUresult result = cuda->StreamWaitEvent(u->stream, u->freed[r], 0);
    if (result == CUDA_SUCCESS)
        what = "cuMemcpyHtoDAsync", result = cuda->MemcpyHtoDAsync(u->pixels[r], job->rgb + (job->wave_base + share->first) * job->per_image,
                                                                   bytes, u->stream);
    if (result == CUDA_SUCCESS) what = "cuEventRecord", result = cuda->EventRecord(u->ready[0], u->stream);
    if (result == CUDA_SUCCESS)
        what = "cuMemcpyHtoDAsync", result = cuda->MemcpyHtoDAsync(b->offsets, job->chunk_offsets, (n + 1) * 4, share->stream);
    if (result == CUDA_SUCCESS) what = "cuStreamWaitEvent", result = cuda->StreamWaitEvent(share->stream, u->ready[0], 0);
    if (result != CUDA_SUCCESS) return *status = vram_launch_failed(result, VERB, what, share->copy->ordinal), true;
    *status = enqueue_pass(job, share, b, share->first, share->end, u->pixels[r]);
    /* Recorded even after a failed pass: the stream waited for the upload, so the buffer's next use
     * waits for it too. */
    result = cuda->EventRecord(u->freed[r], share->stream);
    if (*status == uform_status_ok_k && result != CUDA_SUCCESS)
        *status = vram_launch_failed(result, VERB, "cuEventRecord", share->copy->ordinal);
    return true;
}

/** Packs the wave's decoded images after the earlier waves' (in input order) and splits them over
 *  the devices within the scratch the call holds. Without `statuses`, a bad image fails the call. */
static uform_status_t wave_pack(image_job_t *job) {
    job->wave_base = job->encoded;
    for (size_t i = job->wave_first; i < job->wave_end; ++i) {
        if (job->items[i] != uform_status_ok_k) {
            if (job->statuses) continue;
            /* Decode it again, into its own unused slot, for the message. */
            uform_status_t again = uform_image_preprocess(&job->images[i], &job->preprocess, &job->scratches[0], NULL,
                                                          job->rgb + i * job->per_image);
            char message[512];
            snprintf(message, sizeof message, "%s", again != uform_status_ok_k ? uform_error_message() : "decoding failed");
            return uform_fail(job->items[i], VERB ": image %zu: %s", i, message);
        }
        /* Earlier waves' uploads read only [0, wave_base): moving rows within [wave_base, i] is safe. */
        if (i != job->encoded) memmove(job->rgb + job->encoded * job->per_image, job->rgb + i * job->per_image, job->per_image);
        job->order[job->encoded++] = i;
    }
    char what[64];
    snprintf(what, sizeof what, "an image of %zu tokens", job->sequence);
    size_t scratch = 0;
    return vram_plan_shares(job->shares, job->shares_count, job->encoded - job->wave_base, job->offsets, job->sequence,
                            job->workspace, job->row_bytes, job->scratch, chunk_bytes, job, VERB, what, &scratch);
}

/** One wave's device part: packing (before the first device), its chunks on each device, and (after
 *  the last device) the copies of its rows back, asynchronous when the rows are pinned. */
static uform_status_t wave_device(void *context, uform_device_slot_t const *slot) {
    image_job_t *job = (image_job_t *)context;
    if (slot->device_index == 0) CHECK_STEP(wave_pack(job));
    vram_share_t *share = &job->shares[slot->device_index];
    share->scratch = (CUdeviceptr)slot->scratch;
    share->stream = (CUstream)slot->stream;
    share->context = (CUcontext)slot->cu_context;
    image_buffers_t b = buffers_at(job, share, share->scratch);
    share->out = b.out;
    size_t per_chunk = share->chunk_tokens / job->sequence, images = share->end - share->first;
    size_t split = split_images();
    int const one_chunk = images && per_chunk >= images && job->pinned && !vram_profiling();
    int const cut = one_chunk && split && images >= split;
    vram_uploader_t *uploader = one_chunk && (cut || alternating_allowed())
                                    ? vram_uploader_take(job->vram, share->copy, share->stream)
                                    : NULL;
    int done = 0;
    if (uploader) {
        uform_status_t status = uform_status_ok_k;
        if (cut) status = enqueue_split(job, share, &b, uploader), done = 1;
        else done = enqueue_alternating(job, share, &b, uploader, &status);
        vram_uploader_give(share->copy, uploader);
        CHECK_STEP(status);
    }
    for (size_t e = share->first; e < share->end && per_chunk && !done;) {
        size_t end = share->end - e < per_chunk ? share->end : e + per_chunk;
        CHECK_STEP(enqueue_chunk(job, share, &b, e, end));
        e = end;
    }
    if (slot->device_index + 1 < job->shares_count) return uform_status_ok_k;
    return vram_copy_rows(job->vram, job->shares, job->shares_count, job->host_rows + job->wave_base * job->row_bytes,
                          job->row_bytes, !job->pinned, VERB);
}

/** Images per wave: decoding a wave on the host threads overlaps the devices' work on the wave
 *  before. Inputs that need decoding or resizing go in waves of up to 128 (at least two waves from
 *  32 images on); ready crops (raw pixels of the model's side) in one. UFORM_GPU_IMAGE_WAVE=N
 *  sets N images per wave (0: one wave). */
static size_t wave_size(uform_image_t const *images, size_t count, size_t side) {
    size_t forced = 0;
    if (strict_count(getenv("UFORM_GPU_IMAGE_WAVE"), 0, SIZE_MAX, false, &forced)) return forced && forced < count ? forced : count;
    int cheap = 1;
    for (size_t i = 0; i < count && cheap; ++i) cheap = images[i].width == side && images[i].height == side;
    if (cheap || count < 32) return count;
    size_t half = (count + 1) / 2;
    return half < 128 ? half : 128;
}

/* ---- The verb ---- */

uform_status_t uform_image_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                       uform_image_t const *images, size_t count, uform_embeddings_t const *embeddings,
                                       uform_status_t *statuses, uform_outcome_t *outcome) {
    uform_image_tower_t const *tower = &model->image_replicas[0];
    uform_image_config_t const *c = &tower->config;
    uform_executor_description_t description;
    uform_status_t status = uform_executor_describe(executor, &description);
    if (status != uform_status_ok_k) return uform_outcome_refuse(outcome, status);
    image_job_t *job = (image_job_t *)calloc(1, sizeof *job);
    if (!job) return uform_outcome_refuse(outcome, uform_fail(uform_status_out_of_memory_k, VERB ": out of memory"));
    job->model = model, job->vram = (vram_tower_t *)model->vram, job->tower = tower;
    /* Features are every token's final state: no CLS tail. */
    job->cls_tail = !embeddings->features &&
                    uform_forward_cls_tail(tower->config.pooling == uform_pooling_cls_k, tower->config.layers_count);
    job->features_row_bytes = c->dim * uform_dtype_bytes(embeddings->dtype);
    job->features_stride = uform_features_stride(embeddings, c->sequence * c->dim);
    job->images = images, job->count = count;
    job->side = c->image_size, job->per_image = c->image_size * c->image_size * 3, job->sequence = c->sequence;
    job->depth = uform_image_vram_depth(c);
    job->preprocess.side = c->image_size;
    memcpy(job->preprocess.mean, c->mean, sizeof c->mean);
    memcpy(job->preprocess.std, c->std, sizeof c->std);
    job->out = *embeddings, job->statuses = statuses;
    job->dims = embeddings->dimensions ? embeddings->dimensions : c->embedding_dimensions;
    job->row_bytes = job->dims * uform_dtype_bytes(embeddings->dtype);
    status = vram_bind_shares(executor, model, &job->shares, &job->shares_count, VERB);
    if (status != uform_status_ok_k) goto refused;
    if (!count) {
        job_free(job);
        return uform_outcome_refuse(outcome, uform_status_ok_k);
    }

    /* 1. Buffers: the decoded crops and the output rows, pinned when the tower's staging buffer is free
     *    (then waves overlap; else one wave, with the rows copied back synchronously). */
    job->threads = description.threads_count ? description.threads_count : 1;
    job->scratches = (uform_image_scratch_t *)calloc(job->threads, sizeof(uform_image_scratch_t));
    size_t wave = wave_size(images, count, c->image_size);
    /* Pinned: [crops][rows][chunk offsets][features], so no upload or copy back waits for the stream. */
    size_t rgb_bytes = align_up(count * job->per_image, 64), rows_bytes = align_up(count * job->row_bytes + 1, 64);
    size_t offsets_bytes = align_up((count + 1) * sizeof(int32_t), 64);
    size_t features_bytes = embeddings->features ? count * job->sequence * job->features_row_bytes : 0;
    features_bytes = vram_staged_features_bytes(features_bytes);
    unsigned char *staging =
        (unsigned char *)vram_staging_take(job->vram, rgb_bytes + rows_bytes + offsets_bytes + features_bytes);
    if (staging) {
        job->pinned = 1, job->rgb = staging, job->host_rows = staging + rgb_bytes;
        job->chunk_offsets = (int32_t *)(staging + rgb_bytes + rows_bytes);
        if (features_bytes) job->staged_features = staging + rgb_bytes + rows_bytes + offsets_bytes;
        job->piecewise = !outcome && features_bytes && vram_features_piecewise(features_bytes);
    } else {
        wave = count;
        job->rgb = (uint8_t *)malloc(count * job->per_image);
        job->host_rows = (unsigned char *)malloc(rows_bytes);
        job->chunk_offsets = (int32_t *)malloc(offsets_bytes);
    }
    job->items = (uform_status_t *)calloc(count, sizeof(uform_status_t));
    job->order = (size_t *)malloc(count * sizeof(size_t));
    job->offsets = (size_t *)malloc((count + 1) * sizeof(size_t));
    size_t waves = (count + wave - 1) / wave;
    job->run = (vram_waves_t){.outcomes = (uform_outcome_t *)calloc(waves, sizeof(uform_outcome_t)),
                              .failure = {.status = uform_status_ok_k}};
    if (!job->scratches || !job->rgb || !job->host_rows || !job->items || !job->order || !job->offsets ||
        !job->chunk_offsets || !job->run.outcomes) {
        status = uform_fail(uform_status_out_of_memory_k, VERB ": no memory for the pixels of %zu images", count);
        goto refused;
    }
    for (size_t e = 0; e <= count; ++e) job->offsets[e] = e * job->sequence, job->chunk_offsets[e] = (int32_t)(e * job->sequence);

    /* 2. The scratch a wave's call holds: its images over the devices (by SMs), in chunks of whole
     *    images within `scratch_limit` (LIMIT_EXCEEDED, before decoding anything, when one cannot fit). */
    job->workspace = 32u << 20;
    size_t limit = description.scratch_limit;
    if (limit && limit < (256u << 20)) job->workspace = 1u << 20;
    char what[64];
    snprintf(what, sizeof what, "an image of %zu tokens", job->sequence);
    status = vram_plan_shares(job->shares, job->shares_count, wave, job->offsets, job->sequence, job->workspace,
                              job->row_bytes, limit, chunk_bytes, job, VERB, what, &job->scratch);
    if (status != uform_status_ok_k) goto refused;

    /* 3. One call per wave: its host part decodes the wave on the decoder threads (while the devices
     *    still run the wave before: calls are deferred), its device part packs and enqueues it. A
     *    deferred encode's last wave carries the caller's outcome and `job_settle`, which writes the
     *    rows and frees the job when it finishes: then the verb returns once everything is enqueued. */
    for (size_t w = 0; w < waves && job->run.failure.status == uform_status_ok_k; ++w) {
        job->wave_first = w * wave;
        job->wave_end = job->wave_first + wave < count ? job->wave_first + wave : count;
        uform_call_t call = {.residency = uform_residency_vram_k, .schedule = uform_schedule_dynamic_k,
                             .tasks = job->wave_end - job->wave_first, .task = decode_task, .device = wave_device,
                             .scratch_bytes = job->scratch, .context = job};
        if (outcome && w + 1 == waves) {
            if (vram_waves_submit_last(&job->run, executor, &call, outcome, job_settle, job))
                return uform_status_ok_k; /* the job is the settle's now, maybe freed already */
        } else (void)vram_waves_submit(&job->run, executor, &call, outcome != NULL);
    }
    /* A blocking call's staged features go out piece by piece while the later pieces still cross. */
    int features_written = 0;
    if (job->piecewise && job->run.failure.status == uform_status_ok_k)
        features_written = vram_write_features_landed(job->vram->cuda, executor, &job->out, job->features_stride,
                                                      job->sequence, job->features_row_bytes, job->order, job->offsets,
                                                      job->encoded, job->count, job->staged_features, &job->pieces);
    status = vram_waves_finish(&job->run); /* every submitted wave finishes before the job is freed */
    if (status == uform_status_ok_k) write_rows(job, executor, features_written);
    job_free(job);
    return uform_outcome_refuse(outcome, status);

refused:
    job_free(job);
    return uform_outcome_refuse(outcome, status);
}
