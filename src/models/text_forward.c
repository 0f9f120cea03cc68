/**
 *  @file   text_forward.c
 *  @brief  The walk of one thread through the text forward pass: the phases of each chunk of its
 *          group's texts, each cut into tasks by text_plan.h, between the group's barriers. The job
 *          it walks (text_job.h) was built and checked by text_submit.c.
 */
#define _GNU_SOURCE
#include "models/text_job.h"
#include "models/text_plan.h"

#include <math.h>   // `sqrt`
#include <stdlib.h> // `free`
#include <string.h> // `memset`

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }
static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static void forward_barrier(forward_group_t *group) { uform_phase_barrier_wait(&group->barrier, group->threads); }

/** The next task of a phase from its counter, or 0 when none is left. */
static int next_task(atomic_size_t *counter, size_t tasks, size_t *task) {
    *task = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    return *task < tasks;
}

typedef enum epilogue_t { epilogue_none_k, epilogue_bias_k, epilogue_bias_gelu_k, epilogue_bias_residual_k } epilogue_t;

/** A LayerNorm that a phase applies to rows as it reads them (see `forward_chunk`). */
typedef struct norm_t {
    float const *gamma, *beta;
    float epsilon;
} norm_t;

/** One product of a GEMM phase: C[:, 0..cols) = A W^T (+ bias), `cols` = W's rows. Q, K and V are
 *  three of one phase, side by side in the same output rows. */
typedef struct product_t {
    uform_tensor_t const *weight, *bias;
    float *c;
    size_t cols;
} product_t;

static float *thread_floats(forward_job_t *job, size_t thread, size_t offset_floats) {
    return (float *)job->per_thread[thread].scratch + offset_floats;
}

/** Rows [i0, i0 + rows) of `in` (`cols` wide), normalised into the thread's norm buffer, unless they
 *  are there already (`*cached` is the first row there, or SIZE_MAX). */
static float const *normalised_rows(forward_job_t *job, size_t thread, norm_t const *norm, float const *in, size_t ld,
                                    size_t i0, size_t rows, size_t cols, size_t *cached) {
    float *normed = thread_floats(job, thread, job->norm_offset);
    if (*cached != i0) job->kernels->layer_norm(in + i0 * ld, ld, normed, cols, rows, cols, norm->gamma, norm->beta, norm->epsilon);
    *cached = i0;
    return normed;
}

static void epilogue_apply(forward_job_t *job, size_t thread, epilogue_t epilogue, float *ct, size_t ldc, size_t i0,
                           size_t rows, size_t j0, size_t cols, size_t n, float const *bias, float const *residual,
                           size_t residual_ld, norm_t const *residual_norm, size_t *cached) {
    uform_kernels_t const *kernels = job->kernels;
    switch (epilogue) {
    case epilogue_none_k: break;
    case epilogue_bias_k:
        if (bias) kernels->bias_residual(ct, ldc, rows, cols, bias + j0, NULL, 0);
        break;
    case epilogue_bias_gelu_k: {
        static float const zeros[64] = {0};
        if (bias) kernels->bias_gelu(ct, ldc, rows, cols, bias + j0);
        else
            for (size_t j = 0; j < cols; j += 64) kernels->bias_gelu(ct + j, ldc, rows, cols - j < 64 ? cols - j : 64, zeros);
        break;
    }
    case epilogue_bias_residual_k: {
        float const *r = residual_norm ? normalised_rows(job, thread, residual_norm, residual, residual_ld, i0, rows, n, cached) + j0
                                       : residual + i0 * residual_ld + j0;
        kernels->bias_residual(ct, ldc, rows, cols, bias ? bias + j0 : NULL, r, residual_norm ? n : residual_ld);
        break;
    }
    }
}

/** C = A W^T (+ epilogue) for every product, over the tasks of `uform_text_gemm_plan` taken from
 *  `counter`. `a_norm` (may be NULL) normalises A's rows as tasks read them, `residual_norm` the
 *  residual's (one product only, its `cols` wide). `a16` (may be NULL, never with `a_norm`): A as its
 *  producer already converted it to bf16, `k` wide, so no task converts it again; `c16` (may be
 *  NULL): where the tasks also write C in bf16 after the epilogue (`ldc` apart), for the next
 *  product's `a16`; with `c16_planes`, each product's C in bf16 is a plane of its own, `m` rows of
 *  its `cols` (Q, K and V for the bf16 attention kernel).
 *
 *  Where the library runs the epilogue inside its kernel (`uform_gemm_tile_bf16_fused`: AMX, A in
 *  bf16, a task of a product's every column, bias or bias + GELU, and `c16`), a task writes C in
 *  bf16 alone: the next phase reads nothing else. */
static void gemm_phase(forward_job_t *job, forward_group_t const *group, size_t thread, atomic_size_t *counter, size_t m,
                       size_t k, float const *a, size_t lda, product_t const *products, size_t count, size_t ldc,
                       epilogue_t epilogue, float const *residual, size_t residual_ld, norm_t const *a_norm,
                       norm_t const *residual_norm, uint16_t const *a16, uint16_t *c16, int c16_planes) {
    size_t widths[3];
    for (size_t p = 0; p < count; ++p) widths[p] = products[p].cols;
    uform_text_gemm_plan_t plan = uform_text_gemm_plan(&job->gemm, group->threads, products[0].weight->dtype, m, widths, count);
    uform_gemm_t gemm = job->gemm; /* this product's: plain weights where the plan splits columns */
    gemm.plain_weights = plan.plain_weights;
    size_t cached = SIZE_MAX;
    for (size_t task; next_task(counter, plan.tiles_m * plan.tiles_n, &task);) {
        size_t i0, rows, u0, units;
        uform_text_split(m, plan.tiles_m, task / plan.tiles_n, &i0, &rows);
        uform_text_split(plan.units, plan.tiles_n, task % plan.tiles_n, &u0, &units);
        float const *at = a + i0 * lda;
        size_t at_ld = lda;
        if (a_norm) at = normalised_rows(job, thread, a_norm, a, lda, i0, rows, k, &cached), at_ld = k;
        /* The task's units, product by product (a task may end in one product and begin the next). */
        for (size_t p = 0, first = 0; p < count; ++p) {
            product_t const *product = &products[p];
            size_t product_units = ceil_div(product->cols, UFORM_TEXT_COLUMN_UNIT);
            size_t lo = u0 > first ? u0 : first, hi = min_size(u0 + units, first + product_units);
            size_t own = first;
            first += product_units;
            if (lo >= hi) continue;
            size_t j0 = (lo - own) * UFORM_TEXT_COLUMN_UNIT;
            size_t cols = min_size((hi - own) * UFORM_TEXT_COLUMN_UNIT, product->cols) - j0;
            uform_tensor_t const *weight = product->weight;
            size_t element = uform_dtype_bytes(weight->dtype);
            float *ct = product->c + i0 * ldc + j0;
            size_t c_column = (size_t)(product->c - products[0].c); /* the product's columns among its neighbours' */
            /* Where this task's C goes in bf16: its rows `c16_ld` apart. */
            uint16_t *c16t = !c16 ? NULL : c16_planes ? c16 + p * m * product->cols + i0 * product->cols + j0
                                                      : c16 + i0 * ldc + c_column + j0;
            size_t c16_ld = c16_planes ? product->cols : ldc;
            float const *bias = product->bias && product->bias->data ? (float const *)product->bias->data : NULL;
            if (c16t && a16 && !a_norm && (epilogue == epilogue_bias_k || epilogue == epilogue_bias_gelu_k) && gemm.fused) {
                uform_gemm_epilogue_t fused = {.bias = bias ? bias + j0 : NULL, .gelu = epilogue == epilogue_bias_gelu_k,
                                               .bf16_out = 1, .rows_vary = 1};
                if (uform_gemm_tile_bf16_fused(&gemm, rows, cols, k, a16 + i0 * k, k, (uint16_t const *)weight->data + j0 * k,
                                               k, c16t, c16_ld, &fused))
                    continue;
            }
            if (a16 && !a_norm)
                uform_gemm_tile_bf16(&gemm, rows, cols, k, a16 + i0 * k, k, (uint16_t const *)weight->data + j0 * k, k,
                                     ct, ldc);
            else
                uform_gemm_tile(&gemm, rows, cols, k, at, at_ld, (char const *)weight->data + j0 * k * element,
                                weight->dtype, k, ct, ldc, job->per_thread[thread].scratch);
            epilogue_apply(job, thread, epilogue, ct, ldc, i0, rows, j0, cols, product->cols, bias, residual, residual_ld,
                           residual_norm, &cached);
            if (c16t)
                for (size_t i = 0; i < rows; ++i) job->kernels->f32_to_bf16(ct + i * ldc, c16t + i * c16_ld, cols);
        }
    }
}

/** out = LayerNorm(in) for `rows` rows, in the row tasks of the plan; also into `out16` in bf16
 *  when it is not NULL (the next product's A). */
static void norm_phase(forward_job_t *job, forward_group_t const *group, atomic_size_t *counter, size_t rows,
                       float const *in, float *out, size_t cols, uform_tensor_t const *gamma, uform_tensor_t const *beta,
                       float epsilon, uint16_t *out16) {
    size_t tasks = uform_text_row_tasks(rows, group->threads);
    for (size_t task; next_task(counter, tasks, &task);) {
        size_t first, count;
        uform_text_split(rows, tasks, task, &first, &count);
        job->kernels->layer_norm(in + first * cols, cols, out + first * cols, cols, count, cols,
                                 (float const *)gamma->data, (float const *)beta->data, epsilon);
        if (out16) job->kernels->f32_to_bf16(out + first * cols, out16 + first * cols, count * cols);
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


/** Attention of `rows` queries from row `row0` of one (text, head): through the library, S = scale
 *  Q K^T, softmax, O = S V; the fused kernel over the whole sequence for SERIAL; plain loops should
 *  the library refuse. */
static void attention_piece(forward_job_t *job, forward_group_t const *group, size_t thread, size_t hidden, size_t head,
                            size_t h, size_t first, size_t length, size_t row0, size_t rows, float *scores, size_t planes) {
    uform_kernels_t const *kernels = job->kernels;
    float scale = (float)(1.0 / sqrt((double)head));
    float const *q = group->qkv + first * 3 * hidden + h * head;
    float *o = group->ctx + first * hidden + h * head;
    float const *qb = q + row0 * 3 * hidden;
    float *ob = o + row0 * hidden;
    /* bf16 Q, K and V side by side, or (`planes`: the chunk's tokens) as three planes. */
    size_t ld16 = planes ? hidden : 3 * hidden, k_offset = planes ? planes * hidden : hidden;
    uint16_t const *q16 = group->qkv16 ? group->qkv16 + first * ld16 + h * head : NULL;
    if (q16 && job->attention16(q16 + row0 * ld16, q16 + k_offset, q16 + 2 * k_offset, ld16, rows, length, head,
                                scale, thread_floats(job, thread, job->packed_offset), ob, hidden))
        ; /* S and the softmax in f32, P in bf16, as PyTorch's bf16 runs it (and the image pass) */
    else if (!job->gemm.use_library) { /* whole sequences here (uform_text_attention_tasks), a CLS tail's one row */
        if (row0 == 0 && rows == length)
            kernels->attention(q, q + hidden, q + 2 * hidden, 3 * hidden, o, hidden, length, head, scale, scores);
        else uform_attention_rows_plain(kernels, qb, q + hidden, q + 2 * hidden, 3 * hidden, ob, hidden, rows, length, head, scale, scores);
    }
    else if (!uform_gemm_f32(1, rows, length, head, scale, qb, 3 * hidden, q + hidden, 3 * hidden, scores, length) ||
             (kernels->softmax_rows(scores, length, rows, length),
              !uform_gemm_f32(0, rows, head, length, 1.0f, scores, length, q + 2 * hidden, 3 * hidden, ob, hidden)))
        uform_attention_rows_plain(kernels, qb, q + hidden, q + 2 * hidden, 3 * hidden, ob, hidden, rows, length, head, scale, scores);
    if (group->a16) /* the output product's A, in bf16 (library path only: whole sequences otherwise) */
        for (size_t i = 0; i < rows; ++i)
            kernels->f32_to_bf16(ob + i * hidden, group->a16 + (first + row0 + i) * hidden + h * head, head);
}

/** Attention of one chunk's texts: per (text, head), or even ranges of query rows (text_plan.h). */
static void attention_phase(forward_job_t *job, forward_group_t const *group, size_t thread, atomic_size_t *counter,
                            forward_chunk_t const *chunk, size_t hidden, size_t heads, float *scores, size_t planes) {
    size_t head = hidden / heads, texts = chunk->end_text - chunk->first_text;
    size_t const *offsets = job->offsets + chunk->first_text;
    size_t units = 0;
    for (size_t text = 0; text < texts; ++text) units += heads * uform_text_attention_blocks(offsets[text + 1] - offsets[text]);
    size_t tasks = uform_text_attention_tasks(texts * heads, units, chunk->longest, group->threads, job->gemm.use_library);
    if (!tasks) {
        for (size_t task; next_task(counter, texts * heads, &task);) {
            size_t text = task / heads, length = offsets[text + 1] - offsets[text];
            attention_piece(job, group, thread, hidden, head, task % heads, offsets[text] - offsets[0], length, 0, length, scores,
                            planes);
        }
        return;
    }
    for (size_t task; next_task(counter, tasks, &task);) {
        size_t unit, count;
        uform_text_split(units, tasks, task, &unit, &count);
        /* Units are (text, head, block) in that order; a piece is a task's blocks of one (text, head). */
        for (size_t text = 0, base = 0; text < texts && count; ++text) {
            size_t length = offsets[text + 1] - offsets[text], blocks = uform_text_attention_blocks(length);
            while (count && unit < base + heads * blocks) {
                size_t h = (unit - base) / blocks, b0 = (unit - base) % blocks;
                size_t taken = min_size(count, blocks - b0);
                size_t row0 = b0 * UFORM_TEXT_QUERY_BLOCK;
                size_t end = b0 + taken == blocks ? length : (b0 + taken) * UFORM_TEXT_QUERY_BLOCK;
                attention_piece(job, group, thread, hidden, head, h, offsets[text] - offsets[0], length, row0, end - row0, scores,
                                planes);
                unit += taken, count -= taken;
            }
            base += heads * blocks;
        }
    }
}

/** Rows [*i0, *i0 + *rows) of `task` among a chunk's `tokens` cut for `mlp_planes`: tiles of 512, the
 *  rest as a multiple of 32 and what remains (so texts of any length make few primitive shapes);
 *  0 past the last. */
static int plane_tile(size_t tokens, size_t task, size_t *i0, size_t *rows) {
    size_t full = tokens / 512, rest = tokens % 512, main = rest / 32 * 32, tail = rest % 32;
    if (task < full) return *i0 = task * 512, *rows = 512, 1;
    task -= full;
    if (main && task == 0) return *i0 = full * 512, *rows = main, 1;
    task -= main ? 1 : 0;
    if (tail && task == 0) return *i0 = full * 512 + main, *rows = tail, 1;
    return 0;
}

/** The MLP of a one-thread group on the fused path with its hidden activations in bf16 as planes of
 *  [tokens][`uform_gemm_plane_width`] (as the image pass's `mlp_planes`): the up product a plane at a
 *  time (bias and GELU inside the library's kernel), the down product as a sum over the planes into
 *  `tmp`, then bias and residual (x) added; the LayerNorm phase follows as before. */
static void mlp_planes(forward_job_t *job, forward_group_t *group, atomic_size_t *up_counter, atomic_size_t *down_counter,
                       uform_text_layer_t const *layer, size_t tokens, size_t hidden, size_t inter) {
    size_t width = uform_gemm_plane_width(inter), parts = inter / width;
    uint16_t const *up_w = (uint16_t const *)layer->intermediate_weight.data, *down_w = (uint16_t const *)layer->output_weight.data;
    float const *up_b = (float const *)layer->intermediate_bias.data, *down_b = (float const *)layer->output_bias.data;
    for (size_t task, i0, rows; (task = atomic_fetch_add_explicit(up_counter, 1, memory_order_relaxed),
                                plane_tile(tokens, task / parts, &i0, &rows));) {
        size_t p = task % parts; /* a refusal stages through the f32 activations, unused on this path */
        uform_gemm_up_plane(&job->gemm, rows, width, hidden, group->a16 + i0 * hidden, up_w + p * width * hidden,
                            up_b + p * width, group->ffn16 + p * tokens * width + i0 * width,
                            group->ffn + i0 * inter + p * width, inter);
    }
    forward_barrier(group);
    for (size_t task, i0, rows; (task = atomic_fetch_add_explicit(down_counter, 1, memory_order_relaxed),
                                plane_tile(tokens, task, &i0, &rows));) {
        float *ct = group->tmp + i0 * hidden;
        uform_gemm_down_planes(&job->gemm, rows, hidden, width, parts, group->ffn16 + i0 * width, tokens * width, down_w,
                               inter, ct, group->ffn + i0 * inter);
        job->kernels->bias_residual(ct, hidden, rows, hidden, down_b, group->x + i0 * hidden, hidden);
    }
    forward_barrier(group);
}

/** Whether a layer's Q, K and V go to `qkv16` as three planes [3][tokens][hidden]: where the bf16
 *  attention kernel reads them and never refuses (a head a multiple of 32 up to 256), so each
 *  product's C is dense (brgemm's dst) and its epilogue runs inside the library's kernel; else side
 *  by side, [tokens][3 hidden]. */
static int qkv_planes(forward_job_t const *job, forward_group_t const *group, norm_t const *x_norm, size_t head) {
    return !x_norm && group->a16 && group->qkv16 && job->attention16 && job->gemm.fused && head % 32 == 0 && head <= 256;
}

/** Q, K and V of one layer for every token: three products, one phase, side by side in qkv, then
 *  the barrier. Returns `qkv_planes`. */
static int qkv_phase(forward_job_t *job, forward_group_t *group, size_t thread, size_t tokens,
                     uform_text_layer_t const *layer, norm_t const *x_norm, size_t *phase) {
    uform_text_tower_t const *tower = job->per_thread[thread].tower;
    size_t hidden = tower->hidden;
    product_t qkv[3] = {{&layer->query_weight, &layer->query_bias, group->qkv, hidden},
                        {&layer->key_weight, &layer->key_bias, group->qkv + hidden, hidden},
                        {&layer->value_weight, &layer->value_bias, group->qkv + 2 * hidden, hidden}};
    int planes = qkv_planes(job, group, x_norm, hidden / tower->heads);
    gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, group->x, hidden, qkv, 3, 3 * hidden,
               epilogue_bias_k, NULL, 0, x_norm, NULL, x_norm ? NULL : group->a16, group->qkv16, planes);
    forward_barrier(group);
    return planes;
}

/** The last layer of a CLS-pooled tower, for each text's first token alone (`job->cls_tail`): K and V
 *  for every token (one phase, as Q/K/V in any layer, where they land the same), the texts' first
 *  rows of x gathered (normalised when x's LayerNorm is pending) into `texts` rows in tmp, Q for those
 *  rows alone (into ffn), attention for the first query row of each (text, head) (each task puts its
 *  head's Q where the attention reads it), the attention's first rows gathered into qkv (free once
 *  attention has read it), and there the output product, the LayerNorms and the MLP; the last
 *  LayerNorm writes the pooled rows. Each row's products and norms are its own, so these are the
 *  values the whole layer gives those rows, for about a sixth of its work past the keys and values. */
static void forward_cls_tail(forward_job_t *job, forward_group_t *group, size_t thread, forward_chunk_t const *chunk,
                             uform_text_layer_t const *layer, norm_t const *x_norm, float *scores, size_t *phase) {
    uform_text_tower_t const *tower = job->per_thread[thread].tower;
    uform_kernels_t const *kernels = job->kernels;
    size_t hidden = tower->hidden, inter = tower->intermediate, heads = tower->heads, head = hidden / heads;
    size_t tokens = chunk->tokens, texts = chunk->end_text - chunk->first_text;
    size_t const *offsets = job->offsets + chunk->first_text;
    float epsilon = (float)tower->layer_norm_epsilon;
    /* K and V beside where Q would be: in qkv's columns, and in qkv16's planes 1 and 2 or its columns. */
    int planes = qkv_planes(job, group, x_norm, head);
    {
        product_t kv[2] = {{&layer->key_weight, &layer->key_bias, group->qkv + hidden, hidden},
                           {&layer->value_weight, &layer->value_bias, group->qkv + 2 * hidden, hidden}};
        uint16_t *kv16 = !group->qkv16 ? NULL : planes ? group->qkv16 + tokens * hidden : group->qkv16 + hidden;
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, group->x, hidden, kv, 2, 3 * hidden,
                   epilogue_bias_k, NULL, 0, x_norm, NULL, x_norm ? NULL : group->a16, kv16, planes);
        forward_barrier(group);
    }
    float *xc = group->tmp, *qc = group->ffn;
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        for (size_t text; next_task(counter, texts, &text);) {
            size_t first = offsets[text] - offsets[0];
            if (x_norm)
                kernels->layer_norm(group->x + first * hidden, hidden, xc + text * hidden, hidden, 1, hidden, x_norm->gamma,
                                    x_norm->beta, x_norm->epsilon);
            else memcpy(xc + text * hidden, group->x + first * hidden, hidden * sizeof(float));
        }
        forward_barrier(group);
    }
    product_t query = {&layer->query_weight, &layer->query_bias, qc, hidden};
    gemm_phase(job, group, thread, &group->counters[(*phase)++], texts, hidden, xc, hidden, &query, 1, hidden,
               epilogue_bias_k, NULL, 0, NULL, NULL, NULL, NULL, 0);
    forward_barrier(group);
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        for (size_t task; next_task(counter, texts * heads, &task);) {
            size_t text = task / heads, h = task % heads, first = offsets[text] - offsets[0];
            float const *q = qc + text * hidden + h * head;
            memcpy(group->qkv + first * 3 * hidden + h * head, q, head * sizeof(float));
            if (group->qkv16)
                kernels->f32_to_bf16(q, group->qkv16 + first * (planes ? hidden : 3 * hidden) + h * head, head);
            attention_piece(job, group, thread, hidden, head, h, first, offsets[text + 1] - offsets[text], 0, 1, scores,
                            planes ? tokens : 0);
        }
        forward_barrier(group);
    }
    float *ctxc = group->qkv, *tmpc = ctxc + texts * hidden;
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        for (size_t text; next_task(counter, texts, &text);)
            memcpy(ctxc + text * hidden, group->ctx + (offsets[text] - offsets[0]) * hidden, hidden * sizeof(float));
        forward_barrier(group);
    }
    product_t output = {&layer->attention_output_weight, &layer->attention_output_bias, tmpc, hidden};
    gemm_phase(job, group, thread, &group->counters[(*phase)++], texts, hidden, ctxc, hidden, &output, 1, hidden,
               epilogue_bias_residual_k, xc, hidden, NULL, NULL, NULL, NULL, 0);
    forward_barrier(group);
    norm_phase(job, group, &group->counters[(*phase)++], texts, tmpc, xc, hidden, &layer->attention_norm_weight,
               &layer->attention_norm_bias, epsilon, NULL);
    forward_barrier(group);
    product_t up = {&layer->intermediate_weight, &layer->intermediate_bias, group->ffn, inter};
    gemm_phase(job, group, thread, &group->counters[(*phase)++], texts, hidden, xc, hidden, &up, 1, inter,
               epilogue_bias_gelu_k, NULL, 0, NULL, NULL, NULL, NULL, 0);
    forward_barrier(group);
    product_t down = {&layer->output_weight, &layer->output_bias, tmpc, hidden};
    gemm_phase(job, group, thread, &group->counters[(*phase)++], texts, inter, group->ffn, inter, &down, 1, hidden,
               epilogue_bias_residual_k, xc, hidden, NULL, NULL, NULL, NULL, 0);
    forward_barrier(group);
    norm_phase(job, group, &group->counters[(*phase)++], texts, tmpc, group->pooled, hidden,
               &layer->output_norm_weight, &layer->output_norm_bias, epsilon, NULL);
    forward_barrier(group);
}

/* ---- One chunk ---- */

static void forward_chunk(forward_job_t *job, forward_group_t *group, size_t thread, forward_chunk_t const *chunk,
                          size_t *phase) {
    uform_text_tower_t const *tower = job->per_thread[thread].tower;
    uform_kernels_t const *kernels = job->kernels;
    size_t hidden = tower->hidden, inter = tower->intermediate, heads = tower->heads, head = hidden / heads;
    size_t tokens = chunk->tokens, texts = chunk->end_text - chunk->first_text;
    float epsilon = (float)tower->layer_norm_epsilon;
    float *scores = thread_floats(job, thread, uform_text_gemm_scratch_floats(job));
    float *wide = scores + job->longest * (job->longest > head + 1 ? job->longest : head + 1);
    int32_t const *ids = job->ids + chunk->first_token;
    int32_t const *positions = job->positions + chunk->first_token;
    size_t const *offsets = job->offsets + chunk->first_text;
    size_t base = offsets[0];

    /* Embeddings: word + position (+ token type 0), then LayerNorm, in row tasks. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        size_t tasks = uform_text_row_tasks(tokens, group->threads);
        for (size_t task; next_task(counter, tasks, &task);) {
            size_t first, count;
            uform_text_split(tokens, tasks, task, &first, &count);
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
            if (group->a16) kernels->f32_to_bf16(group->x + first * hidden, group->a16 + first * hidden, count * hidden);
        }
        forward_barrier(group);
    }

    /* Where the products split rows into at most two column tasks (text_plan.h), the LayerNorms are
     * not phases of their own: the products that read a normalised stream normalise its rows as they
     * take them (A of the MLP's up product, the residual of its down product, A of the next layer's
     * Q/K/V and the residual of its output product), five barriers per layer instead of seven; the
     * down product then writes the un-normalised stream into x, and the last layer's LayerNorm runs
     * as a phase, in place, before pooling. Both ways compute the same values. */
    int fuse = uform_text_fuse_norms(&job->gemm, group->threads, tower->weights_dtype, tokens, hidden, inter);
    norm_t pending = {0}; /* x's LayerNorm still to apply, when `pending.gamma` is set. */
    for (size_t l = 0; l < tower->layers_count; ++l) {
        uform_text_layer_t const *layer = &tower->layers[l];
        norm_t const *x_norm = pending.gamma ? &pending : NULL;
        if (job->cls_tail && l + 1 == tower->layers_count) {
            forward_cls_tail(job, group, thread, chunk, layer, x_norm, scores, phase);
            break;
        }
        int planes = qkv_phase(job, group, thread, tokens, layer, x_norm, phase);
        attention_phase(job, group, thread, &group->counters[(*phase)++], chunk, hidden, heads, scores, planes ? tokens : 0);
        forward_barrier(group);
        /* Output product + bias + residual into tmp. */
        product_t output = {&layer->attention_output_weight, &layer->attention_output_bias, group->tmp, hidden};
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, group->ctx, hidden, &output, 1,
                   hidden, epilogue_bias_residual_k, group->x, hidden, NULL, x_norm, group->a16, NULL, 0);
        forward_barrier(group);
        product_t up = {&layer->intermediate_weight, &layer->intermediate_bias, group->ffn, inter};
        if (fuse) {
            norm_t attention = {(float const *)layer->attention_norm_weight.data,
                                (float const *)layer->attention_norm_bias.data, epsilon};
            gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, group->tmp, hidden, &up, 1,
                       inter, epilogue_bias_gelu_k, NULL, 0, &attention, NULL, NULL, group->ffn16, 0);
            forward_barrier(group);
            product_t down = {&layer->output_weight, &layer->output_bias, group->x, hidden};
            gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, inter, group->ffn, inter, &down, 1,
                       hidden, epilogue_bias_residual_k, group->tmp, hidden, NULL, &attention, group->ffn16, NULL, 0);
            forward_barrier(group);
            pending = (norm_t){(float const *)layer->output_norm_weight.data, (float const *)layer->output_norm_bias.data,
                               epsilon};
            if (l + 1 == tower->layers_count) {
                norm_phase(job, group, &group->counters[(*phase)++], tokens, group->x, group->x, hidden,
                           &layer->output_norm_weight, &layer->output_norm_bias, epsilon, NULL);
                forward_barrier(group);
            }
            continue;
        }
        norm_phase(job, group, &group->counters[(*phase)++], tokens, group->tmp, group->x, hidden,
                   &layer->attention_norm_weight, &layer->attention_norm_bias, epsilon, group->a16);
        forward_barrier(group);
        /* MLP: up + bias + GELU, down + bias + residual, LayerNorm into x. */
        if (job->gemm.mlp_planes && group->threads == 1 && group->a16 && group->ffn16) {
            atomic_size_t *up_counter = &group->counters[(*phase)++];
            mlp_planes(job, group, up_counter, &group->counters[(*phase)++], layer, tokens, hidden, inter);
            norm_phase(job, group, &group->counters[(*phase)++], tokens, group->tmp, group->x, hidden,
                       &layer->output_norm_weight, &layer->output_norm_bias, epsilon, group->a16);
            forward_barrier(group);
            continue;
        }
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, hidden, group->x, hidden, &up, 1, inter,
                   epilogue_bias_gelu_k, NULL, 0, NULL, NULL, group->a16, group->ffn16, 0);
        forward_barrier(group);
        product_t down = {&layer->output_weight, &layer->output_bias, group->tmp, hidden};
        gemm_phase(job, group, thread, &group->counters[(*phase)++], tokens, inter, group->ffn, inter, &down, 1, hidden,
                   epilogue_bias_residual_k, group->x, hidden, NULL, NULL, group->ffn16, NULL, 0);
        forward_barrier(group);
        norm_phase(job, group, &group->counters[(*phase)++], tokens, group->tmp, group->x, hidden,
                   &layer->output_norm_weight, &layer->output_norm_bias, epsilon, group->a16);
        forward_barrier(group);
    }

    /* Pooling per text (a CLS tail has written the pooled rows), and the features where asked. */
    if (!job->cls_tail) {
        atomic_size_t *counter = &group->counters[(*phase)++];
        for (size_t text; next_task(counter, texts, &text);) {
            size_t first = offsets[text] - base, length = offsets[text + 1] - offsets[text];
            float *pooled = group->pooled + text * hidden;
            if (tower->pooling == uform_pooling_cls_k) memcpy(pooled, group->x + first * hidden, hidden * sizeof(float));
            else kernels->mean_rows(group->x + first * hidden, hidden, length, hidden, pooled);
            if (job->out.features)
                uform_features_write(kernels, group->x + first * hidden, length, hidden, job->features_rows,
                                     (char *)job->out.features + job->order[chunk->first_text + text] * job->features_stride,
                                     job->out.dtype);
        }
        forward_barrier(group);
    }
    /* Projection. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        if (tower->projection.data) {
            product_t projection = {&tower->projection, NULL, group->projected, tower->embedding_dimensions};
            gemm_phase(job, group, thread, counter, texts, hidden, group->pooled, hidden, &projection, 1,
                       tower->embedding_dimensions, epilogue_none_k, NULL, 0, NULL, NULL, NULL, NULL, 0);
            forward_barrier(group);
        }
    }
    /* Output: the layout's normalisation, truncation, the caller's normalisation, the dtype. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        size_t width = tower->embedding_dimensions, dims = job->out_dimensions;
        float const *source = tower->projection.data ? group->projected : group->pooled;
        float *row = wide;
        for (size_t text; next_task(counter, texts, &text);) {
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

/* ---- The job's threads ---- */

size_t uform_text_gemm_scratch_floats(forward_job_t const *job) {
    uform_text_tower_t const *tower = &job->model->text_replicas[0];
    size_t hidden = tower->hidden, inter = tower->intermediate, qkv[3] = {hidden, hidden, hidden};
    size_t tokens = job->chunk_tokens_max, texts = job->chunk_texts_max;
    /* A CLS tail's products (`forward_cls_tail`) are K and V alone (two of qkv's), then a row per text.
     * Every shape a phase multiplies must be here: the plan's tiles differ by shape. */
    struct { size_t m, k, count; size_t const *widths; } shapes[] = {
        {tokens, hidden, 3, qkv}, {tokens, hidden, 2, qkv}, {tokens, hidden, 1, &hidden}, {tokens, hidden, 1, &inter},
        {tokens, inter, 1, &hidden}, {texts, hidden, 1, &tower->embedding_dimensions}, {texts, hidden, 1, &hidden},
        {texts, hidden, 1, &inter}, {texts, inter, 1, &hidden}};
    size_t bytes = 0;
    /* The largest over every group size, so every thread's scratch has the same layout. A task's rows
     * never exceed 512 (or its chunk's), whatever the chunk's tokens; its columns do not depend on them. */
    for (size_t g = 0; g < job->groups_count; ++g)
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
            uform_text_gemm_plan_t plan = uform_text_gemm_plan(&job->gemm, job->groups[g].threads, tower->weights_dtype,
                                                               shapes[s].m, shapes[s].widths, shapes[s].count);
            size_t rows = min_size(shapes[s].m, 512);
            size_t b = uform_gemm_scratch_bytes(&job->gemm, tower->weights_dtype, rows, plan.cols_max, shapes[s].k);
            if (b > bytes) bytes = b;
        }
    return round_up(bytes, 64) / sizeof(float);
}

size_t uform_text_norm_floats(forward_job_t const *job) {
    uform_text_tower_t const *tower = &job->model->text_replicas[0];
    int fused = 0;
    /* A group of several threads may fuse on some chunk (uform_text_fuse_norms): a task's rows (at
     * most 512, the plan's largest) of hidden. */
    for (size_t g = 0; g < job->groups_count; ++g)
        fused |= job->groups[g].threads > 1 && uform_gemm_scratch_bytes(&job->gemm, tower->weights_dtype, 1, 1, 1) != sizeof(float);
    return fused ? min_size(job->chunk_tokens_max, 512) * tower->hidden : 0;
}

void uform_text_job_free(forward_job_t *job) {
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

void uform_text_job_thread(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)domain;
    forward_job_t *job = (forward_job_t *)context;
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    if (thread == 0 && job->statuses)
        for (size_t i = 0; i < job->count; ++i) job->statuses[i] = job->item_statuses ? job->item_statuses[i] : uform_status_ok_k;
    if (thread == 0 && job->skipped) {
        size_t bytes = job->out_dimensions * uform_dtype_bytes(job->out.dtype);
        size_t feature_bytes = job->features_rows * job->model->text_replicas[0].hidden * uform_dtype_bytes(job->out.dtype);
        for (size_t i = 0; i < job->count; ++i) {
            if (!job->skipped[i]) continue;
            memset((char *)job->out.data + i * job->out_stride, 0, bytes);
            if (job->out.features) memset((char *)job->out.features + i * job->features_stride, 0, feature_bytes);
        }
    }
    forward_group_t *group = &job->groups[job->per_thread[thread].group];
    size_t phase = 0;
    if (job->chunks_shared) /* one thread per group: the next chunk of the job's; the group's counters reset */
        for (size_t c; (c = atomic_fetch_add_explicit(&job->next_chunk, 1, memory_order_relaxed)) < job->chunks_count;) {
            for (size_t i = 0; i < phase; ++i) atomic_store_explicit(&group->counters[i], 0, memory_order_relaxed);
            phase = 0;
            forward_chunk(job, group, thread, &job->chunks[c], &phase);
        }
    else
        for (size_t c = 0; c < group->chunks_count; ++c)
            forward_chunk(job, group, thread, &job->chunks[group->first_chunk + c], &phase);
    uform_gemm_thread_leave(&previous);
    if (atomic_fetch_sub(&job->threads_left, 1) == 1) uform_text_job_free(job);
}
