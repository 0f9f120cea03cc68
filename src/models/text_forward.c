/**
 *  @file   text_forward.c
 *  @brief  The forward pass of a post-norm BERT text tower over packed sequences, spread over a host
 *          executor's threads as one call (see text_forward.h).
 *
 *  Layout of one chunk of texts (at most `chunk_tokens` tokens, all of them real: no padding):
 *
 *      x    [tokens][hidden]        the residual stream
 *      qkv  [tokens][3 * hidden]    queries, keys, values side by side
 *      ctx  [tokens][hidden]        attention output per head, heads side by side
 *      tmp  [tokens][hidden]        a product plus its residual, before LayerNorm
 *      ffn  [tokens][intermediate]  GELU(x W1^T + b1)
 *
 *  The threads are split into groups (`uform_batch_groups`): each group takes its own texts (dealt
 *  longest first to the group that would finish them first), packs them into its own activations
 *  and walks the whole pass over them alone. Within a group every thread runs the same phases; a
 *  phase's work is cut into tiles that the group's threads take from the phase's own counter, then
 *  they meet at the group's barrier. A group of one thread (the batch-parallel pass, for batches of
 *  at least about as many texts as threads) multiplies its texts' rows in one GEMM per product and
 *  never waits; one group of every thread (batch 1) is the tile-split pass. Activations and
 *  per-thread scratch come from the arena pool (src/kernels/arena.c), so repeated calls fault
 *  nothing in. Nothing in the call allocates or fails: `uform_text_encode_ids` allocated and
 *  checked everything before.
 */
#define _GNU_SOURCE
#include "models/text_forward.h"

#include "internal.h"
#include "kernels/kernels.h"

#include <math.h>      // `sqrt`
#include <stdatomic.h> // `atomic_size_t`
#include <stdlib.h>    // `calloc`
#include <string.h>    // `memset`

/** Floats of activations per chunk: tokens * hidden stays near this (six buffers of it, about),
 *  shared among the groups in proportion to their threads... */
#define FORWARD_CHUNK_FLOATS (4096u * 384u)
/** ...but a group's chunks take at least this many tokens (or its longest text). */
#define FORWARD_GROUP_TOKENS_MIN 256u

typedef struct forward_chunk_t {
    size_t first_text, end_text; /**< Texts [first, end) among the job's non-skipped order. */
    size_t first_token, tokens;  /**< Their tokens in the packed ids. */
} forward_chunk_t;

typedef struct forward_thread_t {
    uform_text_tower_t const *tower; /**< The replica on this thread's node. */
    void *scratch;                   /**< GEMM scratch, scores and the output row, on its node (an arena). */
    size_t scratch_bytes;
    int32_t node;
    size_t group;                    /**< Its group. */
} forward_thread_t;

/** Threads [first_thread, first_thread + threads) walking chunks [first_chunk, + chunks_count). */
typedef struct forward_group_t {
    _Alignas(64) uform_phase_barrier_t barrier; /**< On a cache line of its own (groups are 64-aligned). */
    size_t first_thread, threads;
    size_t first_chunk, chunks_count;
    size_t chunk_tokens_max, chunk_texts_max;
    float *x, *qkv, *ctx, *tmp, *ffn, *pooled, *projected;
    void *arena; /**< The activations, from the pool, on the first thread's node. */
    size_t arena_bytes;
    int32_t node;
    atomic_size_t *counters; /**< One per phase, in the order the group's threads walk them. */
} forward_group_t;

typedef struct forward_job_t {
    struct uform_model_s const *model;
    uform_embeddings_t out;
    size_t out_dimensions, out_stride;
    uform_gemm_t gemm;
    uform_kernels_t const *kernels;
    size_t threads;
    forward_thread_t *per_thread;

    /* Texts, packed group after group. */
    size_t count;            /**< All texts, skipped included (rows of the output). */
    size_t encoded;          /**< Texts that are encoded, in `order`. */
    size_t *order;           /**< [encoded] original index of each encoded text. */
    size_t *offsets;         /**< [encoded + 1] into `ids`. */
    int32_t *ids;            /**< Packed ids of the encoded texts. */
    int32_t *positions;      /**< Position-embedding row of each packed token. */
    unsigned char *skipped;  /**< [count] or NULL. */
    uform_status_t *item_statuses; /**< [count] or NULL: copied into `statuses` as the call starts. */
    uform_status_t *statuses;

    /* Chunks (each group's consecutive) and groups. */
    size_t chunks_count;
    forward_chunk_t *chunks;
    size_t chunk_tokens_max, chunk_texts_max, longest;
    size_t norm_offset; /**< Floats into each thread's scratch of its norm buffer (fused phases). */
    int widens;         /**< The GEMM widens weights per tile (f16, bf16 without native bf16): no fused norms. */
    size_t groups_count;
    forward_group_t *groups;

    /* Synchronisation. */
    atomic_size_t *counters; /**< All groups' phase counters. */
    size_t counters_count;
    atomic_size_t threads_left; /**< The last thread out frees the job. */
} forward_job_t;

/** The replica a thread on `node` reads: the one on its node, else replica 0. */
static uform_text_tower_t const *replica_on(struct uform_model_s const *model, int32_t node) {
    for (size_t r = 0; r < model->replicas_count; ++r)
        if (model->replica_nodes && model->replica_nodes[r] == node) return &model->text_replicas[r];
    return &model->text_replicas[0];
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }

static void forward_barrier(forward_group_t *group) { uform_phase_barrier_wait(&group->barrier, group->threads); }

static uform_gemm_plan_t gemm_plan(forward_job_t const *job, forward_group_t const *group, uform_dtype_t dtype, size_t m,
                                   size_t n) {
    return uform_gemm_plan(&job->gemm, group->threads, dtype, m, n);
}

typedef enum epilogue_t { epilogue_none_k, epilogue_bias_k, epilogue_bias_gelu_k, epilogue_bias_residual_k } epilogue_t;

/** A LayerNorm that a phase applies to rows as it reads them (see `forward_chunk`). */
typedef struct norm_t {
    float const *gamma, *beta;
    float epsilon;
} norm_t;

static float *thread_floats(forward_job_t *job, size_t thread, size_t offset_floats);

/** Rows [i0, i0 + rows) of `in` (`cols` wide), normalised into the thread's norm buffer, unless they
 *  are there already (`*cached` is the first row there, or SIZE_MAX). */
static float const *normalised_rows(forward_job_t *job, size_t thread, norm_t const *norm, float const *in, size_t ld,
                                    size_t i0, size_t rows, size_t cols, size_t *cached) {
    float *normed = thread_floats(job, thread, job->norm_offset);
    if (*cached != i0) job->kernels->layer_norm(in + i0 * ld, ld, normed, cols, rows, cols, norm->gamma, norm->beta, norm->epsilon);
    *cached = i0;
    return normed;
}

/** C = A W^T (+ epilogue) over all tiles of the phase, taking tiles from `counter`. `a_norm` (may be
 *  NULL) normalises A's rows as tiles read them, `residual_norm` the residual's (`n` wide). */
static void gemm_phase(forward_job_t *job, forward_group_t const *group, size_t thread, atomic_size_t *counter, size_t m,
                       size_t n, size_t k, float const *a, size_t lda, uform_tensor_t const *weight, float *c, size_t ldc,
                       epilogue_t epilogue, uform_tensor_t const *bias, float const *residual, size_t residual_ld,
                       norm_t const *a_norm, norm_t const *residual_norm) {
    uform_gemm_plan_t plan = gemm_plan(job, group, weight->dtype, m, n);
    size_t tiles = plan.tiles_m * plan.tiles_n;
    size_t element = weight->dtype == uform_dtype_f32_k ? 4 : 2;
    float const *bias_data = bias && bias->data ? (float const *)bias->data : NULL;
    size_t cached = SIZE_MAX;
    for (size_t tile; (tile = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < tiles;) {
        size_t tm = tile / plan.tiles_n, tn = tile % plan.tiles_n;
        size_t i0 = tm * plan.rows_per_tile, j0 = tn * plan.cols_per_tile;
        size_t rows = m - i0 < plan.rows_per_tile ? m - i0 : plan.rows_per_tile;
        size_t cols = n - j0 < plan.cols_per_tile ? n - j0 : plan.cols_per_tile;
        float *ct = c + i0 * ldc + j0;
        float const *at = a + i0 * lda;
        size_t at_ld = lda;
        if (a_norm) at = normalised_rows(job, thread, a_norm, a, lda, i0, rows, k, &cached), at_ld = k;
        uform_gemm_tile(&job->gemm, rows, cols, k, at, at_ld, (char const *)weight->data + j0 * k * element,
                        weight->dtype, k, ct, ldc, job->per_thread[thread].scratch);
        switch (epilogue) {
        case epilogue_none_k: break;
        case epilogue_bias_k:
            if (bias_data) job->kernels->bias_residual(ct, ldc, rows, cols, bias_data + j0, NULL, 0);
            break;
        case epilogue_bias_gelu_k: {
            static float const zeros[64] = {0};
            if (bias_data) job->kernels->bias_gelu(ct, ldc, rows, cols, bias_data + j0);
            else
                for (size_t j = 0; j < cols; j += 64)
                    job->kernels->bias_gelu(ct + j, ldc, rows, cols - j < 64 ? cols - j : 64, zeros);
            break;
        }
        case epilogue_bias_residual_k:
            if (residual_norm)
                job->kernels->bias_residual(ct, ldc, rows, cols, bias_data ? bias_data + j0 : NULL,
                                            normalised_rows(job, thread, residual_norm, residual, residual_ld, i0, rows,
                                                            n, &cached) + j0,
                                            n);
            else
                job->kernels->bias_residual(ct, ldc, rows, cols, bias_data ? bias_data + j0 : NULL,
                                            residual + i0 * residual_ld + j0, residual_ld);
            break;
        }
    }
}

/** out = LayerNorm(in) for `rows` rows, blocks of 16 rows from `counter`. */
static void norm_phase(forward_job_t *job, atomic_size_t *counter, size_t rows, float const *in, float *out, size_t cols,
                       uform_tensor_t const *gamma, uform_tensor_t const *beta, float epsilon) {
    size_t blocks = ceil_div(rows, 16);
    for (size_t block; (block = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < blocks;) {
        size_t first = block * 16, count = rows - first < 16 ? rows - first : 16;
        job->kernels->layer_norm(in + first * cols, cols, out + first * cols, cols, count, cols,
                                 (float const *)gamma->data, (float const *)beta->data, epsilon);
    }
}

/** Widens one row of an embedding table to f32 and adds it into `row`. */
static void add_row(forward_job_t const *job, float *row, uform_tensor_t const *table, size_t index, float *wide) {
    size_t cols = table->cols;
    if (table->dtype == uform_dtype_f32_k) {
        float const *source = (float const *)table->data + index * cols;
        for (size_t j = 0; j < cols; ++j) row[j] += source[j];
        return;
    }
    uint16_t const *source = (uint16_t const *)table->data + index * cols;
    (table->dtype == uform_dtype_bf16_k ? job->kernels->bf16_to_f32 : job->kernels->f16_to_f32)(source, wide, cols);
    for (size_t j = 0; j < cols; ++j) row[j] += wide[j];
}

/* ---- One thread's walk ---- */

static float *thread_floats(forward_job_t *job, size_t thread, size_t offset_floats) {
    return (float *)job->per_thread[thread].scratch + offset_floats;
}

/** Per-thread scratch: [GEMM scratch][attention: context * max(context, head + 1) floats][row: max(hidden, dims) floats]. */
static size_t gemm_scratch_floats(forward_job_t const *job);

static void forward_chunk(forward_job_t *job, forward_group_t *group, size_t thread, forward_chunk_t const *chunk,
                          size_t *phase) {
    uform_text_tower_t const *tower = job->per_thread[thread].tower;
    uform_kernels_t const *kernels = job->kernels;
    size_t hidden = tower->hidden, inter = tower->intermediate, heads = tower->heads, head = hidden / heads;
    size_t tokens = chunk->tokens, texts = chunk->end_text - chunk->first_text;
    float epsilon = (float)tower->layer_norm_epsilon;
    float *scores = thread_floats(job, thread, gemm_scratch_floats(job));
    float *wide = scores + job->longest * (job->longest > head + 1 ? job->longest : head + 1);
    int32_t const *ids = job->ids + chunk->first_token;
    int32_t const *positions = job->positions + chunk->first_token;
    size_t const *offsets = job->offsets + chunk->first_text;
    size_t base = offsets[0];

    /* Embeddings: word + position (+ token type 0), then LayerNorm, 16 tokens per tile. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        size_t blocks = ceil_div(tokens, 16);
        for (size_t block; (block = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < blocks;) {
            size_t first = block * 16, count = tokens - first < 16 ? tokens - first : 16;
            for (size_t t = first; t < first + count; ++t) {
                float *row = group->x + t * hidden;
                memset(row, 0, hidden * sizeof(float));
                add_row(job, row, &tower->word_embeddings, (size_t)ids[t], wide);
                add_row(job, row, &tower->position_embeddings, (size_t)positions[t], wide);
                if (tower->token_type_embeddings.data) add_row(job, row, &tower->token_type_embeddings, 0, wide);
            }
            kernels->layer_norm(group->x + first * hidden, hidden, group->x + first * hidden, hidden, count, hidden,
                                (float const *)tower->embedding_norm_weight.data,
                                (float const *)tower->embedding_norm_bias.data, epsilon);
        }
        forward_barrier(group);
    }

    /* With several threads in the group, the LayerNorms are not phases of their own: the products that
     * read a normalised stream normalise its rows as they take them (A of the MLP's up product, the
     * residual of its down product, A of the next layer's Q/K/V and the residual of its output
     * product), five barriers per layer instead of seven; the down product then writes the un-normalised
     * stream into x, and the last layer's LayerNorm runs as a phase, in place, before pooling. */
    int fuse = group->threads > 1 && !job->widens;
    norm_t pending = {0}; /* x's LayerNorm still to apply, when `pending.gamma` is set. */
    float scale = (float)(1.0 / sqrt((double)head));
    for (size_t l = 0; l < tower->layers_count; ++l) {
        uform_text_layer_t const *layer = &tower->layers[l];
        norm_t const *x_norm = pending.gamma ? &pending : NULL;
        /* Q, K and V: three products, one phase. */
        {
            /* The three share one counter: the tiles of Q, then those of K, then of V. */
            atomic_size_t *counter = &group->counters[(*phase)++];
            uform_gemm_plan_t plan = gemm_plan(job, group, layer->query_weight.dtype, tokens, hidden);
            size_t per = plan.tiles_m * plan.tiles_n;
            uform_tensor_t const *weights[3] = {&layer->query_weight, &layer->key_weight, &layer->value_weight};
            uform_tensor_t const *biases[3] = {&layer->query_bias, &layer->key_bias, &layer->value_bias};
            size_t cached = SIZE_MAX;
            for (size_t tile; (tile = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < 3 * per;) {
                size_t which = tile / per;
                size_t local = tile % per;
                size_t tm = local / plan.tiles_n, tn = local % plan.tiles_n;
                size_t i0 = tm * plan.rows_per_tile, j0 = tn * plan.cols_per_tile;
                size_t rows = tokens - i0 < plan.rows_per_tile ? tokens - i0 : plan.rows_per_tile;
                size_t cols = hidden - j0 < plan.cols_per_tile ? hidden - j0 : plan.cols_per_tile;
                size_t element = weights[which]->dtype == uform_dtype_f32_k ? 4 : 2;
                float *ct = group->qkv + i0 * 3 * hidden + which * hidden + j0;
                float const *at = x_norm ? normalised_rows(job, thread, x_norm, group->x, hidden, i0, rows, hidden, &cached)
                                         : group->x + i0 * hidden;
                uform_gemm_tile(&job->gemm, rows, cols, hidden, at, hidden,
                                (char const *)weights[which]->data + j0 * hidden * element, weights[which]->dtype,
                                hidden, ct, 3 * hidden, job->per_thread[thread].scratch);
                if (biases[which]->data)
                    kernels->bias_residual(ct, 3 * hidden, rows, cols, (float const *)biases[which]->data + j0, NULL, 0);
            }
            forward_barrier(group);
        }
        /* Attention per (text, head). */
        {
            atomic_size_t *counter = &group->counters[(*phase)++];
            size_t tasks = texts * heads;
            for (size_t task; (task = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < tasks;) {
                size_t text = task / heads, h = task % heads;
                size_t first = offsets[text] - base, length = offsets[text + 1] - offsets[text];
                float const *q = group->qkv + first * 3 * hidden + h * head;
                float *o = group->ctx + first * hidden + h * head;
                /* Through the library: S = scale Q K^T, softmax, O = S V; the fused kernel for SERIAL
                 * (or should the library refuse). */
                if (!job->gemm.use_library ||
                    !uform_gemm_f32(1, length, length, head, scale, q, 3 * hidden, q + hidden, 3 * hidden, scores, length) ||
                    (kernels->softmax_rows(scores, length, length, length),
                     !uform_gemm_f32(0, length, head, length, 1.0f, scores, length, q + 2 * hidden, 3 * hidden, o, hidden)))
                    kernels->attention(q, q + hidden, q + 2 * hidden, 3 * hidden, o, hidden, length, head, scale, scores);
            }
            forward_barrier(group);
        }
        /* Output product + bias + residual, then LayerNorm into x. */
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, hidden, group->ctx, hidden,
                   &layer->attention_output_weight, group->tmp, hidden, epilogue_bias_residual_k,
                   &layer->attention_output_bias, group->x, hidden, NULL, x_norm);
        forward_barrier(group);
        if (fuse) {
            norm_t attention = {(float const *)layer->attention_norm_weight.data,
                                (float const *)layer->attention_norm_bias.data, epsilon};
            gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, inter, hidden, group->tmp, hidden,
                       &layer->intermediate_weight, group->ffn, inter, epilogue_bias_gelu_k, &layer->intermediate_bias,
                       NULL, 0, &attention, NULL);
            forward_barrier(group);
            gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, inter, group->ffn, inter,
                       &layer->output_weight, group->x, hidden, epilogue_bias_residual_k, &layer->output_bias, group->tmp,
                       hidden, NULL, &attention);
            forward_barrier(group);
            pending = (norm_t){(float const *)layer->output_norm_weight.data, (float const *)layer->output_norm_bias.data,
                               epsilon};
            if (l + 1 == tower->layers_count) {
                norm_phase(job, &group->counters[(*phase)++], tokens, group->x, group->x, hidden,
                           &layer->output_norm_weight, &layer->output_norm_bias, epsilon);
                forward_barrier(group);
            }
            continue;
        }
        norm_phase(job, &group->counters[(*phase)++], tokens, group->tmp, group->x, hidden, &layer->attention_norm_weight,
                   &layer->attention_norm_bias, epsilon);
        forward_barrier(group);
        /* MLP: up + bias + GELU, down + bias + residual, LayerNorm into x. */
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, inter, hidden, group->x, hidden,
                   &layer->intermediate_weight, group->ffn, inter, epilogue_bias_gelu_k, &layer->intermediate_bias, NULL, 0,
                   NULL, NULL);
        forward_barrier(group);
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, inter, group->ffn, inter,
                   &layer->output_weight, group->tmp, hidden, epilogue_bias_residual_k, &layer->output_bias, group->x, hidden,
                   NULL, NULL);
        forward_barrier(group);
        norm_phase(job, &group->counters[(*phase)++], tokens, group->tmp, group->x, hidden, &layer->output_norm_weight,
                   &layer->output_norm_bias, epsilon);
        forward_barrier(group);
    }

    /* Pooling per text. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        for (size_t text; (text = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < texts;) {
            size_t first = offsets[text] - base, length = offsets[text + 1] - offsets[text];
            float *pooled = group->pooled + text * hidden;
            if (tower->pooling == uform_pooling_cls_k) memcpy(pooled, group->x + first * hidden, hidden * sizeof(float));
            else kernels->mean_rows(group->x + first * hidden, hidden, length, hidden, pooled);
        }
        forward_barrier(group);
    }
    /* Projection. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        if (tower->projection.data) {
            gemm_phase(job, group, thread, counter, texts, tower->embedding_dimensions, hidden, group->pooled, hidden,
                       &tower->projection, group->projected, tower->embedding_dimensions, epilogue_none_k, NULL, NULL, 0,
                       NULL, NULL);
            forward_barrier(group);
        }
    }
    /* Output: the layout's normalisation, truncation, the caller's normalisation, the dtype. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        size_t width = tower->embedding_dimensions, dims = job->out_dimensions;
        float const *source = tower->projection.data ? group->projected : group->pooled;
        float *row = wide;
        for (size_t text; (text = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < texts;) {
            memcpy(row, source + text * width, width * sizeof(float));
            if (tower->normalize) kernels->l2_normalize(row, width);
            if (job->out.normalize) kernels->l2_normalize(row, dims);
            size_t index = job->order[chunk->first_text + text];
            char *target = (char *)job->out.data + index * job->out_stride;
            switch (job->out.dtype) {
            case uform_dtype_bf16_k: kernels->f32_to_bf16(row, (uint16_t *)target, dims); break;
            case uform_dtype_f16_k: kernels->f32_to_f16(row, (uint16_t *)target, dims); break;
            default: memcpy(target, row, dims * sizeof(float)); break;
            }
        }
        forward_barrier(group);
    }
}

/* ---- Job lifetime ---- */

static size_t dtype_size(uform_dtype_t dtype) { return dtype == uform_dtype_f32_k ? 4 : 2; }

static size_t gemm_scratch_floats(forward_job_t const *job) {
    uform_text_tower_t const *tower = replica_on(job->model, -1);
    size_t hidden = tower->hidden, inter = tower->intermediate;
    size_t shapes[4][3] = {{job->chunk_tokens_max, hidden, hidden}, {job->chunk_tokens_max, inter, hidden},
                           {job->chunk_tokens_max, hidden, inter}, {job->chunk_texts_max, tower->embedding_dimensions, hidden}};
    size_t bytes = 0;
    /* The largest over every group size, so every thread's scratch has the same layout. */
    for (size_t g = 0; g < job->groups_count; ++g)
        for (size_t s = 0; s < 4; ++s) {
            uform_gemm_plan_t plan = gemm_plan(job, &job->groups[g], tower->weights_dtype, shapes[s][0], shapes[s][1]);
            size_t b = uform_gemm_scratch_bytes(&job->gemm, tower->weights_dtype, plan.rows_per_tile, plan.cols_per_tile,
                                                shapes[s][2]);
            if (b > bytes) bytes = b;
        }
    return round_up(bytes, 64) / sizeof(float);
}

static void job_free(forward_job_t *job) {
    if (!job) return;
    if (job->per_thread)
        for (size_t t = 0; t < job->threads; ++t)
            uform_arena_give(job->per_thread[t].scratch, job->per_thread[t].scratch_bytes, job->per_thread[t].node);
    free(job->per_thread);
    if (job->groups)
        for (size_t g = 0; g < job->groups_count; ++g)
            uform_arena_give(job->groups[g].arena, job->groups[g].arena_bytes, job->groups[g].node);
    free(job->groups);
    free(job->order);
    free(job->offsets);
    free(job->ids);
    free(job->positions);
    free(job->skipped);
    free(job->item_statuses);
    free(job->chunks);
    free(job->counters);
    free(job);
}

static void job_thread(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)domain;
    forward_job_t *job = (forward_job_t *)context;
    int previous = uform_gemm_thread_enter();
    if (thread == 0 && job->statuses)
        for (size_t i = 0; i < job->count; ++i) job->statuses[i] = job->item_statuses ? job->item_statuses[i] : uform_status_ok_k;
    if (thread == 0 && job->skipped) {
        size_t bytes = job->out_dimensions * dtype_size(job->out.dtype);
        for (size_t i = 0; i < job->count; ++i)
            if (job->skipped[i]) memset((char *)job->out.data + i * job->out_stride, 0, bytes);
    }
    forward_group_t *group = &job->groups[job->per_thread[thread].group];
    size_t phase = 0;
    for (size_t c = 0; c < group->chunks_count; ++c)
        forward_chunk(job, group, thread, &job->chunks[group->first_chunk + c], &phase);
    uform_gemm_thread_leave(previous);
    if (atomic_fetch_sub(&job->threads_left, 1) == 1) job_free(job);
}

/* ---- Submission ---- */

uform_status_t uform_text_check_embeddings(struct uform_model_s const *model, uform_embeddings_t const *embeddings,
                                           size_t count) {
    if (!embeddings) return uform_fail(uform_status_invalid_argument_k, "embeddings is NULL");
    if (embeddings->dtype != uform_dtype_f32_k && embeddings->dtype != uform_dtype_bf16_k &&
        embeddings->dtype != uform_dtype_f16_k)
        return uform_fail(uform_status_invalid_argument_k, "embeddings.dtype is %d; expected f32 (0), bf16 (1) or f16 (2)",
                          (int)embeddings->dtype);
    size_t width = model->text_replicas[0].embedding_dimensions;
    size_t dims = embeddings->dimensions ? embeddings->dimensions : width;
    if (dims > width)
        return uform_fail(uform_status_invalid_argument_k,
                          "embeddings.dimensions is %zu; the model's embeddings are %zu wide (0 takes all)",
                          embeddings->dimensions, width);
    size_t row = dims * dtype_size(embeddings->dtype);
    if (embeddings->stride && embeddings->stride < row)
        return uform_fail(uform_status_invalid_argument_k,
                          "embeddings.stride is %zu bytes; a row of %zu %s values takes %zu (0 packs rows)",
                          embeddings->stride, dims, embeddings->dtype == uform_dtype_f32_k ? "f32" : embeddings->dtype == uform_dtype_bf16_k ? "bf16" : "f16", row);
    if (!embeddings->data && count)
        return uform_fail(uform_status_invalid_argument_k, "embeddings.data is NULL for %zu texts", count);
    return uform_status_ok_k;
}

static int32_t replica_node_of_thread(uform_executor_t executor, uform_executor_kind_t kind, size_t thread) {
    if (kind != uform_executor_kind_ram_k) return -1;
    int32_t core = -1, node = -1;
    if (uform_executor_thread_placement(executor, thread, &core, &node) != uform_status_ok_k) return -1;
    return node;
}

/** A refusal before submission finishes the outcome as `uform_executor_call` does its own. */
static uform_status_t refuse(uform_outcome_t *outcome, uform_status_t status) {
    if (outcome) {
        uform_outcome_begin(outcome, NULL);
        uform_outcome_finish(outcome, status, uform_error_message());
    }
    return status;
}


uform_status_t uform_text_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                     int32_t const *ids, size_t const *offsets, size_t count,
                                     uform_status_t const *item_statuses, uform_status_t *statuses,
                                     uform_embeddings_t const *embeddings, uform_outcome_t *outcome) {
    uform_status_t status = uform_text_check_embeddings(model, embeddings, count);
    if (status != uform_status_ok_k) return refuse(outcome, status);
    uform_executor_description_t description;
    status = uform_executor_describe(executor, &description);
    if (status != uform_status_ok_k) return refuse(outcome, status);
    if (description.kind == uform_executor_kind_vram_k)
        return refuse(outcome, uform_fail(uform_status_residency_mismatch_k,
                                          "the model is RAM-resident and the executor is a VRAM executor; "
                                          "encode on a RAM, pool or NULL executor"));
    size_t threads = description.threads_count ? description.threads_count : 1;
    uform_cpu_class_t cpu_class = description.cpu_class;
    if (cpu_class == uform_cpu_class_unknown_k && (status = uform_cpu_detect(&cpu_class, NULL)) != uform_status_ok_k)
        return refuse(outcome, status);

    /* Every node the executor's threads run on must carry a replica. */
    for (size_t t = 0; t < threads; ++t) {
        int32_t node = replica_node_of_thread(executor, description.kind, t);
        if (node < 0) continue;
        int covered = 0;
        for (size_t r = 0; r < model->replicas_count; ++r) covered |= model->replica_nodes && model->replica_nodes[r] == node;
        if (!covered)
            return refuse(outcome, uform_fail(uform_status_residency_mismatch_k,
                                              "the executor's thread %zu runs on NUMA node %d, which holds no replica "
                                              "of the model; open the model with that node among its ram.memory_domains",
                                              t, (int)node));
    }

    uform_text_tower_t const *tower0 = replica_on(model, -1);
    forward_job_t *job = (forward_job_t *)calloc(1, sizeof *job);
    if (!job) return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    job->model = model;
    job->out = *embeddings;
    job->out_dimensions = embeddings->dimensions ? embeddings->dimensions : tower0->embedding_dimensions;
    job->out_stride = embeddings->stride ? embeddings->stride : job->out_dimensions * dtype_size(embeddings->dtype);
    job->gemm = uform_gemm_for(cpu_class);
    job->kernels = job->gemm.kernels;
    job->threads = threads;
    job->count = count;

    /* Texts to encode, their ids copied and checked, their positions. */
    size_t encoded = 0, total = 0, longest = 0;
    for (size_t i = 0; i < count; ++i) {
        if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
        size_t length = offsets[i + 1] - offsets[i];
        if (length == 0 || length > tower0->context) {
            job_free(job);
            return refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                              "text %zu has %zu tokens; expected 1 to %zu (the model's context)", i,
                                              length, tower0->context));
        }
        ++encoded, total += length, longest = length > longest ? length : longest;
    }
    job->encoded = encoded;
    job->order = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    job->offsets = (size_t *)malloc((encoded + 1) * sizeof(size_t));
    job->ids = (int32_t *)malloc((total ? total : 1) * sizeof(int32_t));
    job->positions = (int32_t *)malloc((total ? total : 1) * sizeof(int32_t));
    int skips = 0;
    for (size_t i = 0; item_statuses && i < count; ++i) skips |= item_statuses[i] != uform_status_ok_k;
    if (skips) job->skipped = (unsigned char *)malloc(count);
    if (item_statuses && count) job->item_statuses = (uform_status_t *)malloc(count * sizeof(uform_status_t));
    job->statuses = statuses;
    if (!job->order || !job->offsets || !job->ids || !job->positions || (skips && !job->skipped) ||
        (item_statuses && count && !job->item_statuses)) {
        job_free(job);
        return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for %zu tokens", total));
    }
    if (job->skipped)
        for (size_t i = 0; i < count; ++i) job->skipped[i] = item_statuses[i] != uform_status_ok_k;
    if (job->item_statuses) memcpy(job->item_statuses, item_statuses, count * sizeof(uform_status_t));
    size_t max_position = tower0->position_embeddings.rows;
    /* Every id and position checked in the texts' order, so the first bad one is named. */
    for (size_t i = 0; i < count; ++i) {
        if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
        size_t length = offsets[i + 1] - offsets[i];
        for (size_t t = 0; t < length; ++t) {
            int32_t id = ids[offsets[i] + t];
            size_t position = tower0->position_ids == uform_position_ids_roberta_k ? (size_t)tower0->pad_id + 1 + t : t;
            if (id < 0 || (size_t)id >= tower0->word_embeddings.rows || position >= max_position) {
                job_free(job);
                return refuse(outcome, id < 0 || (size_t)id >= tower0->word_embeddings.rows
                                           ? uform_fail(uform_status_invalid_argument_k,
                                                        "text %zu: token %zu is id %d; the model's vocabulary has %zu", i,
                                                        t, (int)id, tower0->word_embeddings.rows)
                                           : uform_fail(uform_status_invalid_argument_k,
                                                        "text %zu: token %zu needs position %zu; the model has %zu", i, t,
                                                        position, max_position));
            }
        }
    }

    /* Groups of threads, and the texts each group takes. */
    size_t hidden = tower0->hidden, head = hidden / tower0->heads;
    size_t *lengths = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *originals = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *group_of = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *sorted = (size_t *)malloc((encoded ? encoded : 1) * sizeof(size_t));
    size_t *group_threads = (size_t *)malloc(threads * sizeof(size_t));
    double *costs = (double *)malloc((encoded ? encoded : 1) * sizeof(double));
    job->chunks = (forward_chunk_t *)malloc((encoded ? encoded : 1) * sizeof(forward_chunk_t));
    job->per_thread = (forward_thread_t *)calloc(threads, sizeof(forward_thread_t));
    int lists_ok = lengths && originals && group_of && sorted && group_threads && costs && job->chunks && job->per_thread;
    if (lists_ok) {
        for (size_t i = 0, e = 0; i < count; ++i) {
            if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
            lengths[e] = offsets[i + 1] - offsets[i], originals[e] = i;
            /* Products grow with the tokens, attention with their square. */
            costs[e] = (double)lengths[e] * (double)(lengths[e] + 6 * hidden);
            ++e;
        }
        job->groups_count = uform_batch_groups(threads, encoded, costs, uform_forward_group_forced(), group_threads,
                                               group_of, sorted);
        job->groups = (forward_group_t *)aligned_alloc(64, round_up(job->groups_count * sizeof(forward_group_t), 64));
        lists_ok = job->groups != NULL;
    }
    if (!lists_ok) {
        free(lengths), free(originals), free(group_of), free(sorted), free(group_threads), free(costs);
        job_free(job);
        return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    }
    memset(job->groups, 0, job->groups_count * sizeof(forward_group_t));
    job->longest = longest;

    /* Packed group after group, each group's texts in their order, cut into chunks of whole texts of
     * about the group's share of FORWARD_CHUNK_FLOATS / hidden tokens each. */
    job->offsets[0] = 0;
    size_t phases_per_chunk = 4 + 7 * tower0->layers_count;
    for (size_t g = 0, e = 0, first_thread = 0; g < job->groups_count; ++g) {
        forward_group_t *group = &job->groups[g];
        group->first_thread = first_thread, group->threads = group_threads[g];
        first_thread += group_threads[g];
        size_t chunk_limit = FORWARD_CHUNK_FLOATS / hidden * group->threads / threads;
        if (chunk_limit < FORWARD_GROUP_TOKENS_MIN) chunk_limit = FORWARD_GROUP_TOKENS_MIN;
        if (chunk_limit < longest) chunk_limit = longest;
        size_t first_text = e;
        for (size_t n = 0; n < encoded; ++n) {
            if (group_of[n] != g) continue;
            size_t i = originals[n], length = lengths[n], first = job->offsets[e];
            for (size_t t = 0; t < length; ++t) {
                size_t position = tower0->position_ids == uform_position_ids_roberta_k ? (size_t)tower0->pad_id + 1 + t : t;
                job->ids[first + t] = ids[offsets[i] + t];
                job->positions[first + t] = (int32_t)position;
            }
            job->order[e] = i;
            job->offsets[++e] = first + length;
        }
        group->first_chunk = job->chunks_count;
        for (size_t f = first_text; f < e;) {
            forward_chunk_t *chunk = &job->chunks[job->chunks_count++];
            chunk->first_text = f, chunk->first_token = job->offsets[f];
            while (f < e && job->offsets[f + 1] - chunk->first_token <= chunk_limit) ++f;
            chunk->end_text = f, chunk->tokens = job->offsets[f] - chunk->first_token;
            if (chunk->tokens > group->chunk_tokens_max) group->chunk_tokens_max = chunk->tokens;
            if (f - chunk->first_text > group->chunk_texts_max) group->chunk_texts_max = f - chunk->first_text;
        }
        group->chunks_count = job->chunks_count - group->first_chunk;
        if (group->chunk_tokens_max > job->chunk_tokens_max) job->chunk_tokens_max = group->chunk_tokens_max;
        if (group->chunk_texts_max > job->chunk_texts_max) job->chunk_texts_max = group->chunk_texts_max;
        for (size_t t = group->first_thread; t < first_thread; ++t) job->per_thread[t].group = g;
    }
    free(lengths), free(originals), free(group_of), free(sorted), free(group_threads), free(costs);

    /* Phase counters: each group's on cache lines of their own. */
    size_t counters_per_group = 0;
    for (size_t g = 0; g < job->groups_count; ++g) {
        size_t wanted = round_up(job->groups[g].chunks_count * phases_per_chunk, 8);
        counters_per_group = wanted > counters_per_group ? wanted : counters_per_group;
    }
    job->counters_count = job->groups_count * (counters_per_group ? counters_per_group : 8);
    job->counters = (atomic_size_t *)aligned_alloc(64, round_up(job->counters_count * sizeof(atomic_size_t), 64));
    if (!job->counters) {
        job_free(job);
        return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    }
    for (size_t c = 0; c < job->counters_count; ++c) atomic_init(&job->counters[c], 0);

    /* Activations per group, from the arena pool on the node of the group's first thread. */
    for (size_t g = 0; g < job->groups_count; ++g) {
        forward_group_t *group = &job->groups[g];
        group->counters = job->counters + g * (job->counters_count / job->groups_count);
        size_t tokens = group->chunk_tokens_max, texts = group->chunk_texts_max;
        if (!tokens) continue;
        size_t floats = tokens * hidden * 6 + tokens * tower0->intermediate + texts * hidden + texts * tower0->embedding_dimensions;
        group->node = replica_node_of_thread(executor, description.kind, group->first_thread);
        group->arena = uform_arena_take(floats * sizeof(float) + 64 * 8, group->node, &group->arena_bytes);
        if (!group->arena) {
            job_free(job);
            return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the activations of %zu tokens",
                                              tokens));
        }
        group->x = (float *)group->arena;
        group->qkv = group->x + tokens * hidden;
        group->ctx = group->qkv + tokens * hidden * 3;
        group->tmp = group->ctx + tokens * hidden;
        group->ffn = group->tmp + tokens * hidden;
        group->pooled = group->ffn + tokens * tower0->intermediate;
        group->projected = group->pooled + texts * hidden;
    }
    size_t row_floats = hidden > tower0->embedding_dimensions ? hidden : tower0->embedding_dimensions;
    size_t attention_floats = longest * (longest > head + 1 ? longest : head + 1);
    /* The norm buffer of the fused phases: a tile's rows (at most 512, the plan's largest) of hidden. */
    job->widens = uform_gemm_scratch_bytes(&job->gemm, tower0->weights_dtype, 1, 1, 1) == sizeof(float);
    int fused = 0;
    for (size_t g = 0; g < job->groups_count; ++g) fused |= job->groups[g].threads > 1 && !job->widens;
    size_t norm_floats = fused ? (job->chunk_tokens_max < 512 ? job->chunk_tokens_max : 512) * hidden : 0;
    job->norm_offset = round_up(gemm_scratch_floats(job) + attention_floats + row_floats, 16);
    size_t scratch_bytes = (job->norm_offset + norm_floats + 16) * sizeof(float);
    for (size_t t = 0; t < threads; ++t) {
        int32_t node = replica_node_of_thread(executor, description.kind, t);
        job->per_thread[t].tower = replica_on(model, node);
        job->per_thread[t].node = node;
        job->per_thread[t].scratch = uform_arena_take(scratch_bytes, node, &job->per_thread[t].scratch_bytes);
        if (!job->per_thread[t].scratch) {
            job_free(job);
            return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for thread %zu's scratch", t));
        }
    }
    atomic_init(&job->threads_left, threads);

    uform_call_t call = {.residency = uform_residency_ram_k, .schedule = uform_schedule_threads_k, .task = job_thread,
                         .context = job};
    status = uform_executor_call(executor, &call, outcome);
    /* A host call that was run returns OK (tasks cannot fail), and its last thread freed the job; any
     * other status is a refusal that ran nothing, so the job is still ours. */
    if (status != uform_status_ok_k) job_free(job);
    return status;
}
