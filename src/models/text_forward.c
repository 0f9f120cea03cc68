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
 *  Every thread runs `job_thread`, walking the same phases; a phase's work is cut into tiles that
 *  threads take from the phase's own counter, then everyone meets at the barrier. Nothing in the
 *  call allocates or fails: `uform_text_encode_ids` allocated and checked everything before.
 */
#define _GNU_SOURCE
#include "models/text_forward.h"

#include "internal.h"
#include "kernels/kernels.h"

#include <math.h>      // `sqrt`
#include <stdatomic.h> // `atomic_size_t`
#include <stdlib.h>    // `calloc`
#include <string.h>    // `memset`

/** Floats of activations per chunk: tokens * hidden stays near this (six buffers of it, about). */
#define FORWARD_CHUNK_FLOATS (4096u * 384u)

typedef struct forward_chunk_t {
    size_t first_text, end_text; /**< Texts [first, end) among the job's non-skipped order. */
    size_t first_token, tokens;  /**< Their tokens in the packed ids. */
} forward_chunk_t;

typedef struct forward_thread_t {
    uform_text_tower_t const *tower; /**< The replica on this thread's node. */
    void *scratch;                   /**< GEMM scratch, scores and the output row, on its node. */
    size_t scratch_bytes;
} forward_thread_t;

typedef struct forward_job_t {
    struct uform_model_s const *model;
    uform_embeddings_t out;
    size_t out_dimensions, out_stride;
    uform_gemm_t gemm;
    uform_kernels_t const *kernels;
    size_t threads;
    forward_thread_t *per_thread;

    /* Texts. */
    size_t count;            /**< All texts, skipped included (rows of the output). */
    size_t encoded;          /**< Texts that are encoded, in `order`. */
    size_t *order;           /**< [encoded] original index of each encoded text. */
    size_t *offsets;         /**< [encoded + 1] into `ids`. */
    int32_t *ids;            /**< Packed ids of the encoded texts. */
    int32_t *positions;      /**< Position-embedding row of each packed token. */
    unsigned char *skipped;  /**< [count] or NULL. */
    uform_status_t *item_statuses; /**< [count] or NULL: copied into `statuses` as the call starts. */
    uform_status_t *statuses;

    /* Chunks and buffers. */
    size_t chunks_count;
    forward_chunk_t *chunks;
    size_t chunk_tokens_max, chunk_texts_max;
    float *x, *qkv, *ctx, *tmp, *ffn, *pooled, *projected;
    size_t activation_bytes;

    /* Synchronisation. */
    atomic_size_t *counters; /**< One per phase, in the order every thread walks them. */
    size_t counters_count;
    uform_phase_barrier_t barrier;
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

static void forward_barrier(forward_job_t *job) { uform_phase_barrier_wait(&job->barrier, job->threads); }

static uform_gemm_plan_t gemm_plan(forward_job_t const *job, uform_dtype_t dtype, size_t m, size_t n) {
    return uform_gemm_plan(&job->gemm, job->threads, dtype, m, n);
}

typedef enum epilogue_t { epilogue_none_k, epilogue_bias_k, epilogue_bias_gelu_k, epilogue_bias_residual_k } epilogue_t;

/** C = A W^T (+ epilogue) over all tiles of the phase, taking tiles from `counter`. */
static void gemm_phase(forward_job_t *job, size_t thread, atomic_size_t *counter, size_t m, size_t n, size_t k,
                       float const *a, size_t lda, uform_tensor_t const *weight, float *c, size_t ldc,
                       epilogue_t epilogue, uform_tensor_t const *bias, float const *residual, size_t residual_ld) {
    uform_gemm_plan_t plan = gemm_plan(job, weight->dtype, m, n);
    size_t tiles = plan.tiles_m * plan.tiles_n;
    size_t element = weight->dtype == uform_dtype_f32_k ? 4 : 2;
    float const *bias_data = bias && bias->data ? (float const *)bias->data : NULL;
    for (size_t tile; (tile = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < tiles;) {
        size_t tm = tile / plan.tiles_n, tn = tile % plan.tiles_n;
        size_t i0 = tm * plan.rows_per_tile, j0 = tn * plan.cols_per_tile;
        size_t rows = m - i0 < plan.rows_per_tile ? m - i0 : plan.rows_per_tile;
        size_t cols = n - j0 < plan.cols_per_tile ? n - j0 : plan.cols_per_tile;
        float *ct = c + i0 * ldc + j0;
        uform_gemm_tile(&job->gemm, rows, cols, k, a + i0 * lda, lda, (char const *)weight->data + j0 * k * element,
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

static void forward_chunk(forward_job_t *job, size_t thread, forward_chunk_t const *chunk, size_t *phase) {
    uform_text_tower_t const *tower = job->per_thread[thread].tower;
    uform_kernels_t const *kernels = job->kernels;
    size_t hidden = tower->hidden, inter = tower->intermediate, heads = tower->heads, head = hidden / heads;
    size_t tokens = chunk->tokens, texts = chunk->end_text - chunk->first_text;
    float epsilon = (float)tower->layer_norm_epsilon;
    float *scores = thread_floats(job, thread, gemm_scratch_floats(job));
    float *wide = scores + tower->context * (tower->context > head + 1 ? tower->context : head + 1);
    int32_t const *ids = job->ids + chunk->first_token;
    int32_t const *positions = job->positions + chunk->first_token;
    size_t const *offsets = job->offsets + chunk->first_text;
    size_t base = offsets[0];

    /* Embeddings: word + position (+ token type 0), then LayerNorm, 16 tokens per tile. */
    {
        atomic_size_t *counter = &job->counters[(*phase)++];
        size_t blocks = ceil_div(tokens, 16);
        for (size_t block; (block = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < blocks;) {
            size_t first = block * 16, count = tokens - first < 16 ? tokens - first : 16;
            for (size_t t = first; t < first + count; ++t) {
                float *row = job->x + t * hidden;
                memset(row, 0, hidden * sizeof(float));
                add_row(job, row, &tower->word_embeddings, (size_t)ids[t], wide);
                add_row(job, row, &tower->position_embeddings, (size_t)positions[t], wide);
                if (tower->token_type_embeddings.data) add_row(job, row, &tower->token_type_embeddings, 0, wide);
            }
            kernels->layer_norm(job->x + first * hidden, hidden, job->x + first * hidden, hidden, count, hidden,
                                (float const *)tower->embedding_norm_weight.data,
                                (float const *)tower->embedding_norm_bias.data, epsilon);
        }
        forward_barrier(job);
    }

    float scale = (float)(1.0 / sqrt((double)head));
    for (size_t l = 0; l < tower->layers_count; ++l) {
        uform_text_layer_t const *layer = &tower->layers[l];
        /* Q, K and V: three products, one phase. */
        {
            /* The three share one counter: the tiles of Q, then those of K, then of V. */
            atomic_size_t *counter = &job->counters[(*phase)++];
            uform_gemm_plan_t plan = gemm_plan(job, layer->query_weight.dtype, tokens, hidden);
            size_t per = plan.tiles_m * plan.tiles_n;
            uform_tensor_t const *weights[3] = {&layer->query_weight, &layer->key_weight, &layer->value_weight};
            uform_tensor_t const *biases[3] = {&layer->query_bias, &layer->key_bias, &layer->value_bias};
            for (size_t tile; (tile = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < 3 * per;) {
                size_t which = tile / per;
                size_t local = tile % per;
                size_t tm = local / plan.tiles_n, tn = local % plan.tiles_n;
                size_t i0 = tm * plan.rows_per_tile, j0 = tn * plan.cols_per_tile;
                size_t rows = tokens - i0 < plan.rows_per_tile ? tokens - i0 : plan.rows_per_tile;
                size_t cols = hidden - j0 < plan.cols_per_tile ? hidden - j0 : plan.cols_per_tile;
                size_t element = weights[which]->dtype == uform_dtype_f32_k ? 4 : 2;
                float *ct = job->qkv + i0 * 3 * hidden + which * hidden + j0;
                uform_gemm_tile(&job->gemm, rows, cols, hidden, job->x + i0 * hidden, hidden,
                                (char const *)weights[which]->data + j0 * hidden * element, weights[which]->dtype,
                                hidden, ct, 3 * hidden, job->per_thread[thread].scratch);
                if (biases[which]->data)
                    kernels->bias_residual(ct, 3 * hidden, rows, cols, (float const *)biases[which]->data + j0, NULL, 0);
            }
            forward_barrier(job);
        }
        /* Attention per (text, head). */
        {
            atomic_size_t *counter = &job->counters[(*phase)++];
            size_t tasks = texts * heads;
            for (size_t task; (task = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < tasks;) {
                size_t text = task / heads, h = task % heads;
                size_t first = offsets[text] - base, length = offsets[text + 1] - offsets[text];
                float const *q = job->qkv + first * 3 * hidden + h * head;
                float *o = job->ctx + first * hidden + h * head;
                /* Through the library: S = scale Q K^T, softmax, O = S V; the fused kernel for SERIAL
                 * (or should the library refuse). */
                if (!job->gemm.use_library ||
                    !uform_gemm_f32(1, length, length, head, scale, q, 3 * hidden, q + hidden, 3 * hidden, scores, length) ||
                    (kernels->softmax_rows(scores, length, length, length),
                     !uform_gemm_f32(0, length, head, length, 1.0f, scores, length, q + 2 * hidden, 3 * hidden, o, hidden)))
                    kernels->attention(q, q + hidden, q + 2 * hidden, 3 * hidden, o, hidden, length, head, scale, scores);
            }
            forward_barrier(job);
        }
        /* Output product + bias + residual, then LayerNorm into x. */
        gemm_phase(job, thread, &job->counters[(*phase)++], tokens, hidden, hidden, job->ctx, hidden,
                   &layer->attention_output_weight, job->tmp, hidden, epilogue_bias_residual_k,
                   &layer->attention_output_bias, job->x, hidden);
        forward_barrier(job);
        norm_phase(job, &job->counters[(*phase)++], tokens, job->tmp, job->x, hidden, &layer->attention_norm_weight,
                   &layer->attention_norm_bias, epsilon);
        forward_barrier(job);
        /* MLP: up + bias + GELU, down + bias + residual, LayerNorm into x. */
        gemm_phase(job, thread, &job->counters[(*phase)++], tokens, inter, hidden, job->x, hidden,
                   &layer->intermediate_weight, job->ffn, inter, epilogue_bias_gelu_k, &layer->intermediate_bias, NULL, 0);
        forward_barrier(job);
        gemm_phase(job, thread, &job->counters[(*phase)++], tokens, hidden, inter, job->ffn, inter,
                   &layer->output_weight, job->tmp, hidden, epilogue_bias_residual_k, &layer->output_bias, job->x, hidden);
        forward_barrier(job);
        norm_phase(job, &job->counters[(*phase)++], tokens, job->tmp, job->x, hidden, &layer->output_norm_weight,
                   &layer->output_norm_bias, epsilon);
        forward_barrier(job);
    }

    /* Pooling per text. */
    {
        atomic_size_t *counter = &job->counters[(*phase)++];
        for (size_t text; (text = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < texts;) {
            size_t first = offsets[text] - base, length = offsets[text + 1] - offsets[text];
            float *pooled = job->pooled + text * hidden;
            if (tower->pooling == uform_pooling_cls_k) memcpy(pooled, job->x + first * hidden, hidden * sizeof(float));
            else kernels->mean_rows(job->x + first * hidden, hidden, length, hidden, pooled);
        }
        forward_barrier(job);
    }
    /* Projection. */
    {
        atomic_size_t *counter = &job->counters[(*phase)++];
        if (tower->projection.data) {
            gemm_phase(job, thread, counter, texts, tower->embedding_dimensions, hidden, job->pooled, hidden,
                       &tower->projection, job->projected, tower->embedding_dimensions, epilogue_none_k, NULL, NULL, 0);
            forward_barrier(job);
        }
    }
    /* Output: the layout's normalisation, truncation, the caller's normalisation, the dtype. */
    {
        atomic_size_t *counter = &job->counters[(*phase)++];
        size_t width = tower->embedding_dimensions, dims = job->out_dimensions;
        float const *source = tower->projection.data ? job->projected : job->pooled;
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
        forward_barrier(job);
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
    for (size_t s = 0; s < 4; ++s) {
        uform_gemm_plan_t plan = gemm_plan(job, tower->weights_dtype, shapes[s][0], shapes[s][1]);
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
            if (job->per_thread[t].scratch) uform_numa_free(job->per_thread[t].scratch, job->per_thread[t].scratch_bytes);
    free(job->per_thread);
    if (job->x) uform_numa_free(job->x, job->activation_bytes);
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
    size_t phase = 0;
    for (size_t c = 0; c < job->chunks_count; ++c) forward_chunk(job, thread, &job->chunks[c], &phase);
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
    if (cpu_class == uform_cpu_class_unknown_k) uform_cpu_detect(&cpu_class, NULL);

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
    job->kernels = uform_kernels_for(cpu_class);
    job->gemm.kernels = job->kernels;
    job->gemm.use_library = cpu_class != uform_cpu_class_serial_k;
    job->gemm.native_bf16 = uform_kernels_native_bf16(cpu_class);
    job->gemm.matmul = uform_gemm_matmul_for(cpu_class);
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
    job->offsets[0] = 0;
    size_t max_position = tower0->position_embeddings.rows;
    for (size_t i = 0, e = 0; i < count; ++i) {
        if (item_statuses && item_statuses[i] != uform_status_ok_k) continue;
        size_t length = offsets[i + 1] - offsets[i], first = job->offsets[e];
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
            job->ids[first + t] = id;
            job->positions[first + t] = (int32_t)position;
        }
        job->order[e] = i;
        job->offsets[++e] = first + length;
    }

    /* Chunks of whole texts, about FORWARD_CHUNK_FLOATS / hidden tokens each. */
    size_t chunk_limit = FORWARD_CHUNK_FLOATS / tower0->hidden;
    if (chunk_limit < longest) chunk_limit = longest;
    job->chunks = (forward_chunk_t *)malloc((encoded ? encoded : 1) * sizeof(forward_chunk_t));
    if (!job->chunks) {
        job_free(job);
        return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the encoding job"));
    }
    for (size_t e = 0; e < encoded;) {
        forward_chunk_t *chunk = &job->chunks[job->chunks_count++];
        chunk->first_text = e, chunk->first_token = job->offsets[e];
        while (e < encoded && job->offsets[e + 1] - chunk->first_token <= chunk_limit) ++e;
        chunk->end_text = e, chunk->tokens = job->offsets[e] - chunk->first_token;
        if (chunk->tokens > job->chunk_tokens_max) job->chunk_tokens_max = chunk->tokens;
        if (e - chunk->first_text > job->chunk_texts_max) job->chunk_texts_max = e - chunk->first_text;
    }
    size_t phases_per_chunk = 4 + 7 * tower0->layers_count;
    job->counters_count = job->chunks_count * phases_per_chunk;
    job->counters = (atomic_size_t *)calloc(job->counters_count ? job->counters_count : 1, sizeof(atomic_size_t));

    /* Activations for the largest chunk, one block. */
    size_t hidden = tower0->hidden, tokens = job->chunk_tokens_max, texts = job->chunk_texts_max;
    size_t floats = tokens * hidden * 6 + tokens * tower0->intermediate + texts * hidden + texts * tower0->embedding_dimensions;
    job->activation_bytes = round_up(floats * sizeof(float) + 64 * 8, 4096);
    if (encoded) job->x = (float *)uform_numa_alloc(job->activation_bytes, -1);
    job->per_thread = (forward_thread_t *)calloc(threads, sizeof(forward_thread_t));
    if (!job->counters || (encoded && !job->x) || !job->per_thread) {
        job_free(job);
        return refuse(outcome, uform_fail(uform_status_out_of_memory_k, "no memory for the activations of %zu tokens",
                                          tokens));
    }
    if (encoded) {
        job->qkv = job->x + tokens * hidden;
        job->ctx = job->qkv + tokens * hidden * 3;
        job->tmp = job->ctx + tokens * hidden;
        job->ffn = job->tmp + tokens * hidden;
        job->pooled = job->ffn + tokens * tower0->intermediate;
        job->projected = job->pooled + texts * hidden;
    }
    size_t row_floats = hidden > tower0->embedding_dimensions ? hidden : tower0->embedding_dimensions;
    size_t head = tower0->hidden / tower0->heads;
    size_t attention_floats = tower0->context * (tower0->context > head + 1 ? tower0->context : head + 1);
    size_t scratch_bytes = (gemm_scratch_floats(job) + attention_floats + row_floats + 16) * sizeof(float);
    for (size_t t = 0; t < threads; ++t) {
        int32_t node = replica_node_of_thread(executor, description.kind, t);
        job->per_thread[t].tower = replica_on(model, node);
        job->per_thread[t].scratch_bytes = scratch_bytes;
        job->per_thread[t].scratch = uform_numa_alloc(scratch_bytes, node);
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
