/**
 *  @file   image_pass.c
 *  @brief  The pre-norm ViT of the `uform` package's `ImageEncoder` over one chunk of images on a
 *          group's threads (image_pass.h), with the text tower's kernels (src/kernels/), and the
 *          decoding phase before it. The verb's call, its groups and scratch are image_forward.c's.
 *
 *  Layout of one chunk of `n` images, each a sequence of S = 1 + R + P tokens ([CLS], R register
 *  tokens, P patches), packed without padding:
 *
 *      patches [n P][3 p p]   pixels of each patch, normalised, in (channel, row, column) order
 *      x       [n S][dim]     the residual stream
 *      h       [n S][dim]     LayerNorm(x)
 *      qkv     [n S][3 dim]   queries, keys, values side by side
 *      ctx     [n S][dim]     attention output, heads side by side
 *      tmp     [n S][dim]     a product before LayerScale (and the patch embedding)
 *      ffn     [n S][4 dim]   GELU(h W1^T + b1)
 *
 *  Within a group every thread walks the same phases, taking tiles from each phase's counter,
 *  meeting at the group's barrier after each: im2col, the patch GEMM, assembly (position embeddings
 *  added, then [CLS] and registers in front, as the package does), per block
 *  `x += ls1 * attn(norm1(x))`, `x += ls2 * mlp(norm2(x))`, the final LayerNorm with pooling, the
 *  projection and the output rows. With UFORM_CPU_PROFILE=1 every thread times its steps.
 */
#define _GNU_SOURCE
#include "models/image_pass.h"

#include "internal.h" // `uform_now_seconds`

#include <math.h>   // `sqrt`
#include <stdio.h>  // `snprintf`
#include <string.h> // `memcpy`, `memset`

/** UFORM_CPU_PROFILE=1: the thread's time since `*since` goes to `step`, and `*since` moves to now. */
static void profile_step(char const *step, double *since) {
    if (!uform_cpu_profiling()) return;
    double now = uform_now_seconds();
    if (*since > 0) uform_cpu_profile_add(step, now - *since);
    *since = now;
}
static double profile_start(void) { return uform_cpu_profiling() ? uform_now_seconds() : 0; }

static void barrier(image_group_t *group) {
    double since = profile_start();
    uform_phase_barrier_wait(&group->barrier, group->threads);
    profile_step("barrier wait", &since);
}

static uform_gemm_plan_t plan_for(image_job_t const *job, size_t threads, uform_dtype_t dtype, size_t m, size_t n) {
    return uform_gemm_plan(&job->gemm, threads, dtype, m, n);
}

/** Whether the group's bf16 products of `tokens` rows may split rows alone (`row_tiles_threads`):
 *  a group of several threads, few enough, each with a tile of 32 rows at least, A in bf16 and the
 *  epilogues inside the library's kernel. Where the plan would split columns, Q/K/V and the output
 *  product then take whole-row tiles (`rows_plan`) and the MLP runs over planes (`mlp_planes`). */
static int rows_alone(image_job_t const *job, image_group_t const *group, size_t tokens) {
    return group->threads > 1 && group->threads <= job->gemm.row_tiles_threads && tokens >= 32 * group->threads &&
           group->a16 && group->ffn16 && job->gemm.fused && job->gemm.mlp_planes;
}

/** `m` rows in tiles of whole rows, one per thread, each a whole number of AMX tiles' 16 rows (197
 *  rows on 2 threads: 112 + 85, seven tiles and six, 1-4% faster than 128 + 69 in 32-row blocks). */
static uform_gemm_plan_t rows_plan(size_t threads, size_t m, size_t n) {
    size_t rows = 16 * ceil_div(ceil_div(m, 16), threads);
    return (uform_gemm_plan_t){.rows_per_tile = rows, .cols_per_tile = n, .tiles_m = ceil_div(m, rows), .tiles_n = 1};
}

typedef enum epilogue_t { epilogue_none_k, epilogue_bias_k, epilogue_bias_gelu_k, epilogue_layer_scale_k } epilogue_t;

/** A LayerNorm that a product applies to the rows of A as it reads them. */
typedef struct norm_t {
    uform_tensor_t const *weight, *bias;
    float epsilon;
} norm_t;

/** Rows [i0, i0 + rows) of `in` normalised into the thread's norm buffer, unless they are there. */
static float const *normalised_rows(image_job_t *job, size_t thread, norm_t const *norm, float const *in, size_t cols,
                                    size_t i0, size_t rows, size_t *cached) {
    float *normed = (float *)job->per_thread[thread].scratch + job->norm_offset;
    if (*cached != i0)
        job->kernels->layer_norm(in + i0 * cols, cols, normed, cols, rows, cols, (float const *)norm->weight->data,
                                 (float const *)norm->bias->data, norm->epsilon);
    *cached = i0;
    return normed;
}

/** C = A W^T + epilogue, in the plan's tiles, or in tiles of whole rows (`whole_rows`, `rows_plan`).
 *  `epilogue_layer_scale_k`: C gets the product plus bias, then
 *  `residual[i][j] += gamma[j] * C[i][j]` (LayerScale into the residual stream). `a16` (may be NULL,
 *  never with `a_norm`): A already in bf16, `k` wide; `c16` (may be NULL): C after the epilogue
 *  also written in bf16, `ldc` apart (the next product's `a16`).
 *
 *  Where the library runs the epilogue inside its kernel (`uform_gemm_tile_bf16_fused`: AMX, A in
 *  bf16, a tile of whole rows), a tile writes only what the next phase reads: with `c16`, C in bf16
 *  alone; with LayerScale, the residual alone (C itself is then not written). */
static void gemm_phase(image_job_t *job, image_group_t *group, size_t thread, char const *const label[2], atomic_size_t *counter,
                       size_t m, size_t n, size_t k, float const *a, size_t lda, uform_tensor_t const *weight, float *c,
                       size_t ldc, epilogue_t epilogue, uform_tensor_t const *bias, uform_tensor_t const *gamma,
                       float *residual, size_t residual_ld, norm_t const *a_norm, uint16_t const *a16, uint16_t *c16,
                       int whole_rows) {
    double since = profile_start();
    uform_gemm_plan_t plan = whole_rows ? rows_plan(group->threads, m, n) : plan_for(job, group->threads, weight->dtype, m, n);
    uform_gemm_t gemm = uform_gemm_for_product(&job->gemm, plan.tiles_n); /* plain weights where columns split */
    size_t tiles = plan.tiles_m * plan.tiles_n;
    size_t element = uform_dtype_bytes(weight->dtype);
    float const *b = bias && bias->data ? (float const *)bias->data : NULL;
    size_t cached = SIZE_MAX;
    for (size_t tile; (tile = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < tiles;) {
        size_t tm = tile / plan.tiles_n, tn = tile % plan.tiles_n;
        size_t i0 = tm * plan.rows_per_tile, j0 = tn * plan.cols_per_tile;
        size_t rows = m - i0 < plan.rows_per_tile ? m - i0 : plan.rows_per_tile;
        size_t cols = n - j0 < plan.cols_per_tile ? n - j0 : plan.cols_per_tile;
        float *ct = c + i0 * ldc + j0;
        if (a16 && !a_norm && epilogue != epilogue_none_k && job->gemm.fused) {
            uform_gemm_epilogue_t fused = {.bias = b ? b + j0 : NULL, .gelu = epilogue == epilogue_bias_gelu_k};
            void *target = ct;
            size_t target_ld = ldc;
            if (epilogue == epilogue_layer_scale_k) {
                fused.scale = (float const *)gamma->data + j0, fused.accumulate = 1;
                target = residual + i0 * residual_ld + j0, target_ld = residual_ld;
            } else if (c16)
                fused.bf16_out = 1, target = c16 + i0 * ldc + j0;
            if (uform_gemm_tile_bf16_fused(&gemm, rows, cols, k, a16 + i0 * k, k, (uint16_t const *)weight->data + j0 * k,
                                           k, target, target_ld, &fused)) {
                profile_step(label[0], &since);
                continue;
            }
        }
        if (a16 && !a_norm)
            uform_gemm_tile_bf16(&gemm, rows, cols, k, a16 + i0 * k, k, (uint16_t const *)weight->data + j0 * k, k, ct, ldc);
        else {
            float const *at = a_norm ? normalised_rows(job, thread, a_norm, a, k, i0, rows, &cached) : a + i0 * lda;
            uform_gemm_tile(&gemm, rows, cols, k, at, a_norm ? k : lda, (char const *)weight->data + j0 * k * element,
                            weight->dtype, k, ct, ldc, job->per_thread[thread].scratch);
        }
        profile_step(label[0], &since);
        switch (epilogue) {
        case epilogue_none_k: break;
        case epilogue_bias_k:
            if (b) job->kernels->bias_residual(ct, ldc, rows, cols, b + j0, NULL, 0);
            break;
        case epilogue_bias_gelu_k: job->kernels->bias_gelu(ct, ldc, rows, cols, b + j0); break;
        case epilogue_layer_scale_k: {
            if (b) job->kernels->bias_residual(ct, ldc, rows, cols, b + j0, NULL, 0);
            float const *g = (float const *)gamma->data + j0;
            for (size_t i = 0; i < rows; ++i) {
                float const *source = ct + i * ldc;
                float *target = residual + (i0 + i) * residual_ld + j0;
                for (size_t j = 0; j < cols; ++j) target[j] += g[j] * source[j];
            }
            break;
        }
        }
        if (c16)
            for (size_t i = 0; i < rows; ++i) job->kernels->f32_to_bf16(ct + i * ldc, c16 + (i0 + i) * ldc + j0, cols);
        profile_step(label[1], &since);
    }
    barrier(group);
}

/** out = LayerNorm(in), in blocks of 16 rows; also into `out16` in bf16 unless it is NULL. */
static void norm_phase(image_job_t *job, image_group_t *group, atomic_size_t *counter, size_t rows, float const *in, float *out, size_t cols,
                       uform_tensor_t const *weight, uform_tensor_t const *bias, float epsilon, uint16_t *out16) {
    size_t blocks = ceil_div(rows, 16);
    double since = profile_start();
    for (size_t block; (block = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < blocks;) {
        size_t first = block * 16, count = rows - first < 16 ? rows - first : 16;
        job->kernels->layer_norm(in + first * cols, cols, out + first * cols, cols, count, cols,
                                 (float const *)weight->data, (float const *)bias->data, epsilon);
        if (out16) job->kernels->f32_to_bf16(out + first * cols, out16 + first * cols, count * cols);
    }
    profile_step("layer norm", &since);
    barrier(group);
}

/* ---- Per-thread scratch: [GEMM][scores S * max(S, head + 1)][row max(dim, E)] ---- */

size_t image_pass_gemm_scratch_floats(image_job_t const *job) {
    uform_image_config_t const *c = &job->tower0->config;
    size_t n = job->chunk_images, tokens = n * c->sequence;
    /* The last four: the CLS tail's products (a row per image) and the projection. */
    size_t shapes[8][3] = {{n * c->patches, c->dim, 3 * c->patch_size * c->patch_size},
                           {tokens, c->dim, c->dim},
                           {tokens, c->intermediate, c->dim},
                           {tokens, c->dim, c->intermediate},
                           {n, c->dim, c->dim},
                           {n, c->intermediate, c->dim},
                           {n, c->dim, c->intermediate},
                           {n, c->embedding_dimensions, c->dim}};
    size_t bytes = 0;
    for (size_t g = 0; g < job->groups_count; ++g)
        for (size_t s = 0; s < 8; ++s) {
            uform_gemm_plan_t plan = plan_for(job, job->groups[g].threads, job->tower0->weights_dtype, shapes[s][0],
                                              shapes[s][1]);
            size_t b = uform_gemm_scratch_bytes(&job->gemm, job->tower0->weights_dtype, plan.rows_per_tile,
                                                plan.cols_per_tile, shapes[s][2]);
            if (b > bytes) bytes = b;
        }
    return round_up(bytes, 64) / sizeof(float);
}

size_t image_pass_scores_floats(uform_image_config_t const *c) {
    size_t head = c->dim / c->heads, s = c->sequence;
    return s * (s > head + 1 ? s : head + 1);
}


/* ---- The walk ---- */

/** Decodes and preprocesses every image into `rgb`, recording statuses and this thread's first failure. */
void image_pass_decode(image_job_t *job, size_t thread, atomic_size_t *counter) {
    image_thread_t *self = &job->per_thread[thread];
    size_t side = job->preprocess.side, bytes = side * side * 3;
    double since = profile_start();
    for (size_t i; (i = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < job->count;) {
        uform_status_t status =
            uform_image_preprocess(&job->images[i], &job->preprocess, &self->images, NULL, job->rgb + i * bytes);
        job->item[i] = status;
        if (job->statuses) job->statuses[i] = status;
        if (status != uform_status_ok_k && i < self->failed_index) {
            self->failed_index = i, self->failed_status = status;
            snprintf(self->failed_message, sizeof self->failed_message, "%s", uform_error_message());
        }
    }
    profile_step("decode", &since);
    uform_phase_barrier_wait(&job->barrier, job->threads);
    profile_step("barrier wait", &since);
}

/** Blocks of query rows per (image, head) for `pairs` pairs of `S` tokens on `threads` threads: at
 *  least enough for two tasks per thread, at most blocks of 16 rows; among those, the fewest whose
 *  tasks fill nine tenths of the threads' rounds, else the best filling (ViT-B/16 at batch 1 on 28
 *  threads: 7 blocks, 84 tasks, 3 per thread; 5 gave 60 tasks, a third round for 4 threads). */
static size_t attention_blocks(size_t threads, size_t pairs, size_t S) {
    size_t least = ceil_div(2 * threads, pairs), most = ceil_div(S, 16);
    if (threads <= 1 || least >= most) return least < 1 ? 1 : least > most ? most : least;
    size_t best = least;
    double best_fill = 0;
    for (size_t b = least; b <= most; ++b) {
        size_t tasks = pairs * ceil_div(S, ceil_div(S, b)); /* the blocks the rows make */
        double fill = (double)tasks / (double)(threads * ceil_div(tasks, threads));
        if (fill > best_fill + 1e-9) best = b, best_fill = fill;
        if (fill >= 0.9) break; /* the fewest blocks that fill nine tenths of the rounds */
    }
    return best;
}

/** Attention of query rows [first, first + rows) of one (image, head) with Q, K and V in bf16 (the
 *  head's columns of its first token, rows `ld` apart), as PyTorch's bf16 runs it: S = scale Q K^T
 *  in f32, softmax in f32, the probabilities rounded to bf16, O = P V in f32 (`ob`, rows `d` apart).
 *  Returns 0 where the library refused (the caller then takes the f32 path). */
static int attention_bf16(image_job_t *job, size_t thread, uint16_t const *q16, uint16_t const *k16, uint16_t const *v16,
                          size_t ld, size_t d, size_t first, size_t rows, size_t S, size_t head, float scale, float *scores,
                          float *ob, double *since) {
    uint16_t *probs = (uint16_t *)((float *)job->per_thread[thread].scratch + job->probs_offset);
    if (job->attention16) {
        void *packed = (float *)job->per_thread[thread].scratch + job->probs_offset;
        if (job->attention16(q16 + first * ld, k16, v16, ld, rows, S, head, scale, packed, ob, d)) {
            profile_step("attention kernel", since);
            return 1;
        }
    }
    if (!uform_gemm_bf16_with(&job->gemm, 1, rows, S, head, scale, q16 + first * ld, ld, k16, ld, scores, S))
        return 0;
    profile_step("attention gemm", since);
    job->kernels->softmax_rows(scores, S, rows, S);
    job->kernels->f32_to_bf16(scores, probs, rows * S);
    profile_step("attention softmax", since);
    int done = uform_gemm_bf16_with(&job->gemm, 0, rows, head, S, 1.0f, probs, S, v16, ld, ob, d);
    profile_step("attention gemm", since);
    return done;
}

/** The MLP of a one-thread group on the fused path, its hidden activations in bf16 as planes of
 *  [tokens][`uform_gemm_plane_width`]: the up product a plane at a time (bias and GELU inside the
 *  library's kernel), the down product as a sum over the planes into `tmp`, then bias and LayerScale
 *  into x. */
static void mlp_planes(image_job_t *job, image_group_t *group, atomic_size_t *up_counter, atomic_size_t *down_counter,
                       uform_image_layer_t const *layer, size_t tokens, size_t d, size_t f, double *since) {
    uform_gemm_plan_t plan = plan_for(job, 1, layer->hidden_weight.dtype, tokens, f);
    uform_gemm_t gemm = uform_gemm_for_product(&job->gemm, 1);
    size_t width = uform_gemm_plane_width(f), parts = f / width;
    uint16_t const *up_w = (uint16_t const *)layer->hidden_weight.data, *down_w = (uint16_t const *)layer->output_weight.data;
    float const *up_b = (float const *)layer->hidden_bias.data, *down_b = (float const *)layer->output_bias.data;
    float const *gamma = (float const *)layer->ls2.data;
    for (size_t task; (task = atomic_fetch_add_explicit(up_counter, 1, memory_order_relaxed)) < plan.tiles_m * parts;) {
        size_t i0 = task / parts * plan.rows_per_tile, p = task % parts;
        size_t rows = tokens - i0 < plan.rows_per_tile ? tokens - i0 : plan.rows_per_tile;
        /* A refusal stages through the f32 activations, unused on this path. */
        uform_gemm_up_plane(&gemm, rows, width, d, group->a16 + i0 * d, up_w + p * width * d, up_b + p * width,
                            group->ffn16 + p * tokens * width + i0 * width, group->ffn + i0 * f + p * width, f);
        profile_step("gemm up", since);
    }
    barrier(group);
    /* The down product in row tiles: the plan's for one thread, one a thread for several. */
    size_t down_rows = group->threads > 1 ? rows_plan(group->threads, tokens, d).rows_per_tile : plan.rows_per_tile;
    size_t down_tiles = ceil_div(tokens, down_rows);
    for (size_t tile; (tile = atomic_fetch_add_explicit(down_counter, 1, memory_order_relaxed)) < down_tiles;) {
        size_t i0 = tile * down_rows, rows = tokens - i0 < down_rows ? tokens - i0 : down_rows;
        float *ct = group->tmp + i0 * d;
        uform_gemm_down_planes(&gemm, rows, d, width, parts, group->ffn16 + i0 * width, tokens * width, down_w, f, ct,
                               group->ffn + i0 * f);
        profile_step("gemm down", since);
        job->kernels->bias_residual(ct, d, rows, d, down_b, NULL, 0);
        for (size_t i = 0; i < rows; ++i) {
            float const *source = ct + i * d;
            float *target = group->x + (i0 + i) * d;
            for (size_t j = 0; j < d; ++j) target[j] += gamma[j] * source[j];
        }
        profile_step("epilogue down", since);
    }
    barrier(group);
}

void image_pass_chunk(image_job_t *job, image_group_t *group, size_t thread, size_t first_image, size_t n,
                      size_t *phase) {
    uform_image_tower_t const *tower = job->per_thread[thread].tower;
    uform_image_config_t const *c = &tower->config;
    uform_kernels_t const *kernels = job->kernels;
    size_t d = c->dim, f = c->intermediate, heads = c->heads, head = d / heads, p = c->patch_size;
    size_t S = c->sequence, P = c->patches, R = c->reg_tokens, grid = c->grid, side = c->image_size;
    size_t tokens = n * S, depth = 3 * p * p;
    float epsilon = (float)c->layer_norm_epsilon;
    float *scores = (float *)job->per_thread[thread].scratch + image_pass_gemm_scratch_floats(job);
    float *row = scores + image_pass_scores_floats(c);

    /* im2col: one task per (image, patch row); failed images get zero patches. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        size_t tasks = n * grid;
        double since = profile_start();
        for (size_t task; (task = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < tasks;) {
            size_t local = task / grid, gy = task % grid, index = first_image + local;
            float *target = group->patches + (local * P + gy * grid) * depth;
            if (job->item[index] != uform_status_ok_k) {
                memset(target, 0, grid * depth * sizeof(float));
                continue;
            }
            uint8_t const *rgb = job->rgb + index * side * side * 3;
            for (size_t gx = 0; gx < grid; ++gx) {
                float *patch = target + gx * depth;
                for (size_t ch = 0; ch < 3; ++ch)
                    for (size_t y = 0; y < p; ++y) {
                        uint8_t const *pixels = rgb + ((gy * p + y) * side + gx * p) * 3 + ch;
                        float *out = patch + (ch * p + y) * p;
                        float const *lut = job->lut[ch];
                        for (size_t xx = 0; xx < p; ++xx) out[xx] = lut[pixels[3 * xx]];
                    }
            }
        }
        profile_step("im2col and assembly", &since);
        barrier(group);
    }
    /* Patch embedding into tmp (n P rows), bias added. */
    static char const *const patch_label[2] = {"gemm patches", "epilogue patches"};
    static char const *const out_label[2] = {"gemm out", "epilogue out"};
    static char const *const up_label[2] = {"gemm up", "epilogue up (gelu)"};
    static char const *const down_label[2] = {"gemm down", "epilogue down"};
    static char const *const projection_label[2] = {"gemm projection", "epilogue projection"};
    gemm_phase(job, group, thread, patch_label, &group->counters[(*phase)++], n * P, d, depth, group->patches, depth, &tower->patch_weight,
               group->tmp, d, epilogue_bias_k, &tower->patch_bias, NULL, NULL, 0, NULL, NULL, NULL, 0);
    /* Assembly: x = [CLS, registers, patches + pos_embed] per image. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        float const *pos = (float const *)tower->pos_embed.data;
        double since = profile_start();
        for (size_t local; (local = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < n;) {
            float *x = group->x + local * S * d;
            memcpy(x, tower->cls_token.data, d * sizeof(float));
            if (R) memcpy(x + d, tower->reg_token.data, R * d * sizeof(float));
            float const *embedded = group->tmp + local * P * d;
            for (size_t i = 0; i < P * d; ++i) x[(1 + R) * d + i] = embedded[i] + pos[i];
        }
        profile_step("im2col and assembly", &since);
        barrier(group);
    }

    float scale = (float)(1.0 / sqrt((double)head));
    int tail = job->cls_tail;
    /* How the layers' d-wide products split (every layer alike: the same rows, widths and dtype). */
    uform_dtype_t const weights_dtype = tower->weights_dtype;
    uform_gemm_plan_t const columns_plan = plan_for(job, group->threads, weights_dtype, tokens, d);
    /* With several threads in the group and A in f32, the two LayerNorms are not phases of their
     * own: the products that read them (Q/K/V, the MLP's up product) normalise the rows of x they
     * take; unless those products split rows into more than two column tiles (few images on many
     * threads), where every tile would normalise its rows again: a phase is cheaper. Where A is
     * bf16 (`a16`) the phase is cheaper too: it normalises and rounds each row once, and the
     * products then read bf16 with their epilogues inside the library's kernel where they can
     * (ViT-B/16 and ViT-S/16 at batch 1 on 2 AMX threads: 10-13% less time per call; see
     * bench/RESULTS.md, session 2026-12-06 third). */
    int const fuse = group->threads > 1 && !job->widens && !group->a16 && columns_plan.tiles_n <= 2 &&
                     plan_for(job, group->threads, weights_dtype, tokens, f).tiles_n <= 2;
    int const whole_rows = !fuse && rows_alone(job, group, tokens) && columns_plan.tiles_n > 1;
    for (size_t l = 0; l < c->layers_count; ++l) {
        uform_image_layer_t const *layer = &tower->layers[l];
        norm_t norm1 = {&layer->norm1_weight, &layer->norm1_bias, epsilon}, norm2 = {&layer->norm2_weight, &layer->norm2_bias, epsilon};
        /* Q, K and V in bf16 as three planes [3][tokens][dim], each product's C dense (brgemm's dst, so
         * the bias and the rounding to bf16 run inside the library's kernel), where the bf16
         * attention kernel reads them and never refuses (head a multiple of 32 up to 256); else
         * side by side, [tokens][3 dim]. */
        int planes = !fuse && group->a16 && group->qkv16 && job->attention16 && job->gemm.fused && head % 32 == 0 &&
                     head <= 256;
        if (!fuse)
            norm_phase(job, group, &group->counters[(*phase)++], tokens, group->x, group->h, d, &layer->norm1_weight,
                       &layer->norm1_bias, epsilon, group->a16);
        /* Q, K and V: one counter over the tiles of the three products. */
        {
            atomic_size_t *counter = &group->counters[(*phase)++];
            uform_gemm_plan_t const plan = planes && whole_rows ? rows_plan(group->threads, tokens, d) : columns_plan;
            uform_gemm_t gemm = uform_gemm_for_product(&job->gemm, plan.tiles_n);
            size_t per = plan.tiles_m * plan.tiles_n;
            uform_tensor_t const *weights[3] = {&layer->query_weight, &layer->key_weight, &layer->value_weight};
            uform_tensor_t const *biases[3] = {&layer->query_bias, &layer->key_bias, &layer->value_bias};
            size_t cached = SIZE_MAX;
            double since = profile_start();
            for (size_t tile; (tile = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < 3 * per;) {
                size_t which = tile / per, local = tile % per;
                size_t tm = local / plan.tiles_n, tn = local % plan.tiles_n;
                size_t i0 = tm * plan.rows_per_tile, j0 = tn * plan.cols_per_tile;
                size_t rows = tokens - i0 < plan.rows_per_tile ? tokens - i0 : plan.rows_per_tile;
                size_t cols = d - j0 < plan.cols_per_tile ? d - j0 : plan.cols_per_tile;
                float *ct = group->qkv + i0 * 3 * d + which * d + j0;
                uint16_t *plane = planes ? group->qkv16 + which * tokens * d : NULL;
                if (planes) {
                    uform_gemm_epilogue_t fused = {.bias = (float const *)biases[which]->data + j0, .bf16_out = 1};
                    if (uform_gemm_tile_bf16_fused(&gemm, rows, cols, d, group->a16 + i0 * d, d,
                                                   (uint16_t const *)weights[which]->data + j0 * d, d, plane + i0 * d + j0, d,
                                                   &fused)) {
                        profile_step("gemm qkv", &since);
                        continue;
                    }
                }
                if (!fuse && group->a16)
                    uform_gemm_tile_bf16(&gemm, rows, cols, d, group->a16 + i0 * d, d,
                                         (uint16_t const *)weights[which]->data + j0 * d, d, ct, 3 * d);
                else {
                    float const *at = fuse ? normalised_rows(job, thread, &norm1, group->x, d, i0, rows, &cached) : group->h + i0 * d;
                    uform_gemm_tile(&gemm, rows, cols, d, at, d,
                                    (char const *)weights[which]->data + j0 * d * uform_dtype_bytes(weights[which]->dtype),
                                    weights[which]->dtype, d, ct, 3 * d, job->per_thread[thread].scratch);
                }
                profile_step("gemm qkv", &since);
                kernels->bias_residual(ct, 3 * d, rows, cols, (float const *)biases[which]->data + j0, NULL, 0);
                if (group->qkv16)
                    for (size_t i = 0; i < rows; ++i)
                        kernels->f32_to_bf16(ct + i * 3 * d,
                                             planes ? plane + (i0 + i) * d + j0 : group->qkv16 + (i0 + i) * 3 * d + which * d + j0,
                                             cols);
                profile_step("epilogue qkv", &since);
            }
            barrier(group);
        }
        /* Attention per (image, head, block of query rows) through the library's GEMM: S = scale Q
         * K^T, softmax, O = S V; the blocks split few images over many threads. SERIAL (or a refusal
         * of the library) takes the fused kernel over whole (image, head) pairs. */
        {
            atomic_size_t *counter = &group->counters[(*phase)++];
            /* The fused kernel takes whole pairs: one block each (two would run a pair twice, at once). */
            size_t blocks = job->gemm.use_library ? attention_blocks(group->threads, n * heads, S) : 1;
            size_t block_rows = ceil_div(S, blocks);
            blocks = ceil_div(S, block_rows);
            double since = profile_start();
            for (size_t task; (task = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < n * heads * blocks;) {
                size_t local = task / (heads * blocks), hh = task / blocks % heads, block = task % blocks;
                size_t first = block * block_rows, rows = S - first < block_rows ? S - first : block_rows;
                float const *q = group->qkv + local * S * 3 * d + hh * head;
                float *o = group->ctx + local * S * d + hh * head;
                float const *qb = q + first * 3 * d;
                float *ob = o + first * d;
                if (!job->gemm.use_library)
                    kernels->attention(q, q + d, q + 2 * d, 3 * d, o, d, S, head, scale, scores);
                else if (!(group->qkv16 &&
                           (planes ? attention_bf16(job, thread, group->qkv16 + local * S * d + hh * head,
                                                    group->qkv16 + (tokens + local * S) * d + hh * head,
                                                    group->qkv16 + (2 * tokens + local * S) * d + hh * head, d, d, first,
                                                    rows, S, head, scale, scores, ob, &since)
                                   : attention_bf16(job, thread, group->qkv16 + local * S * 3 * d + hh * head,
                                                    group->qkv16 + local * S * 3 * d + d + hh * head,
                                                    group->qkv16 + local * S * 3 * d + 2 * d + hh * head, 3 * d, d, first,
                                                    rows, S, head, scale, scores, ob, &since))) &&
                         (!uform_gemm_f32(1, rows, S, head, scale, qb, 3 * d, q + d, 3 * d, scores, S) ||
                         (kernels->softmax_rows(scores, S, rows, S),
                          !uform_gemm_f32(0, rows, head, S, 1.0f, scores, S, q + 2 * d, 3 * d, ob, d))))
                    uform_attention_rows_plain(kernels, qb, q + d, q + 2 * d, 3 * d, ob, d, rows, S, head, scale, scores);
                if (group->a16) /* the output product's A (library path only: whole pairs otherwise) */
                    for (size_t i = 0; i < rows; ++i)
                        kernels->f32_to_bf16(ob + i * d, group->a16 + (local * S + first + i) * d + hh * head, head);
                profile_step("attention (f32, conversions)", &since); /* what attention_bf16's steps left */
            }
            barrier(group);
        }
        if (tail && l + 1 == c->layers_count) {
            /* The CLS tail (`job->cls_tail`): past attention, the [CLS] rows alone. x's and the
             * attention output's [CLS] rows gathered into n-row buffers in qkv (read by attention
             * only), then the rest of the layer on them; the pooling reads them. Each row's products
             * and norms are its own: the values the whole layer gives those rows. */
            float *xc = group->qkv, *ctxc = group->qkv + n * d;
            atomic_size_t *counter = &group->counters[(*phase)++];
            for (size_t local; (local = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < n;) {
                memcpy(xc + local * d, group->x + local * S * d, d * sizeof(float));
                memcpy(ctxc + local * d, group->ctx + local * S * d, d * sizeof(float));
            }
            barrier(group);
            gemm_phase(job, group, thread, out_label, &group->counters[(*phase)++], n, d, d, ctxc, d, &layer->out_weight,
                       group->tmp, d, epilogue_layer_scale_k, &layer->out_bias, &layer->ls1, xc, d, NULL, NULL, NULL, 0);
            norm_phase(job, group, &group->counters[(*phase)++], n, xc, group->h, d, &layer->norm2_weight,
                       &layer->norm2_bias, epsilon, NULL);
            gemm_phase(job, group, thread, up_label, &group->counters[(*phase)++], n, f, d, group->h, d,
                       &layer->hidden_weight, group->ffn, f, epilogue_bias_gelu_k, &layer->hidden_bias, NULL, NULL, 0,
                       NULL, NULL, NULL, 0);
            gemm_phase(job, group, thread, down_label, &group->counters[(*phase)++], n, d, f, group->ffn, f,
                       &layer->output_weight, group->tmp, d, epilogue_layer_scale_k, &layer->output_bias, &layer->ls2, xc,
                       d, NULL, NULL, NULL, 0);
            break;
        }
        gemm_phase(job, group, thread, out_label, &group->counters[(*phase)++], tokens, d, d, group->ctx, d, &layer->out_weight, group->tmp, d,
                   epilogue_layer_scale_k, &layer->out_bias, &layer->ls1, group->x, d, NULL, group->a16, NULL, whole_rows);
        if (!fuse)
            norm_phase(job, group, &group->counters[(*phase)++], tokens, group->x, group->h, d, &layer->norm2_weight,
                       &layer->norm2_bias, epsilon, group->a16);
        if (job->gemm.mlp_planes && (group->threads == 1 || whole_rows) && !fuse && group->a16 && group->ffn16) {
            atomic_size_t *up_counter = &group->counters[(*phase)++];
            double since = profile_start();
            mlp_planes(job, group, up_counter, &group->counters[(*phase)++], layer, tokens, d, f, &since);
            continue;
        }
        gemm_phase(job, group, thread, up_label, &group->counters[(*phase)++], tokens, f, d, fuse ? group->x : group->h, d,
                   &layer->hidden_weight, group->ffn, f, epilogue_bias_gelu_k, &layer->hidden_bias, NULL, NULL, 0,
                   fuse ? &norm2 : NULL, fuse ? NULL : group->a16, group->ffn16, 0);
        gemm_phase(job, group, thread, down_label, &group->counters[(*phase)++], tokens, d, f, group->ffn, f, &layer->output_weight, group->tmp, d,
                   epilogue_layer_scale_k, &layer->output_bias, &layer->ls2, group->x, d, NULL, group->ffn16, NULL, 0);
    }

    /* Final LayerNorm and pooling per image: the [CLS] row alone, or the mean over all S rows; with
     * features, every row, written out (zeros for an image that failed). */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        for (size_t local; (local = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < n;) {
            float const *x = tail ? group->qkv + local * d : group->x + local * S * d;
            float *pooled = group->pooled + local * d;
            if (job->out.features) {
                size_t index = first_image + local;
                float *h = group->h + local * S * d;
                kernels->layer_norm(x, d, h, d, S, d, (float const *)tower->norm_weight.data,
                                    (float const *)tower->norm_bias.data, epsilon);
                if (c->pooling == uform_pooling_cls_k) memcpy(pooled, h, d * sizeof(float));
                else kernels->mean_rows(h, d, S, d, pooled);
                uform_features_write(kernels, h, job->item[index] == uform_status_ok_k ? S : 0, d, S,
                                     (char *)job->out.features + index * job->features_stride, job->out.dtype);
            } else if (c->pooling == uform_pooling_cls_k)
                kernels->layer_norm(x, d, pooled, d, 1, d, (float const *)tower->norm_weight.data,
                                    (float const *)tower->norm_bias.data, epsilon);
            else {
                float *h = group->h + local * S * d;
                kernels->layer_norm(x, d, h, d, S, d, (float const *)tower->norm_weight.data,
                                    (float const *)tower->norm_bias.data, epsilon);
                kernels->mean_rows(h, d, S, d, pooled);
            }
        }
        barrier(group);
    }
    gemm_phase(job, group, thread, projection_label, &group->counters[(*phase)++], n, c->embedding_dimensions, d, group->pooled, d, &tower->projection,
               group->projected, c->embedding_dimensions, epilogue_none_k, NULL, NULL, NULL, 0, NULL, NULL, NULL, 0);
    /* Output rows: truncation, the caller's normalisation, the dtype; zero rows for failed images. */
    {
        atomic_size_t *counter = &group->counters[(*phase)++];
        size_t width = c->embedding_dimensions, dims = job->out_dimensions;
        for (size_t local; (local = atomic_fetch_add_explicit(counter, 1, memory_order_relaxed)) < n;) {
            size_t index = first_image + local;
            char *target = (char *)job->out.data + index * job->out_stride;
            if (job->item[index] != uform_status_ok_k) {
                memset(target, 0, dims * uform_dtype_bytes(job->out.dtype));
                continue;
            }
            memcpy(row, group->projected + local * width, width * sizeof(float));
            if (job->out.normalize) kernels->l2_normalize(row, dims);
            switch (job->out.dtype) {
            case uform_dtype_bf16_k: kernels->f32_to_bf16(row, (uint16_t *)target, dims); break;
            case uform_dtype_f16_k: kernels->f32_to_f16(row, (uint16_t *)target, dims); break;
            default: memcpy(target, row, dims * sizeof(float)); break;
            }
        }
        barrier(group);
    }
}
