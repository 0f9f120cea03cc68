/**
 *  @file   image_pass.h
 *  @brief  What the image verb's call (image_forward.c) and the pass over its chunks (image_pass.c)
 *          share: the job, its thread groups and threads, and the pass's entry points. Internal.
 */
#ifndef UFORM_MODELS_IMAGE_PASS_H
#define UFORM_MODELS_IMAGE_PASS_H

#include "models/image_forward.h"

#include "image/image.h"
#include "kernels/kernels.h"

#include <stdatomic.h>

typedef struct image_thread_t {
    uform_image_tower_t const *tower;
    void *scratch; /**< An arena on the thread's node. */
    size_t scratch_bytes;
    int32_t node;
    size_t group;
    uform_image_scratch_t images; /**< Decoding and resize buffers, this thread's own. */
    size_t failed_index;          /**< The lowest image this thread failed to decode, or SIZE_MAX. */
    uform_status_t failed_status;
    char failed_message[256];
} image_thread_t;

/** Threads [first_thread, + threads) encoding images [first_image, + images), `chunk_images` at a time. */
typedef struct image_group_t {
    _Alignas(64) uform_phase_barrier_t barrier; /**< On a cache line of its own (groups are 64-aligned). */
    size_t first_thread, threads;
    size_t first_image, images, chunk_images;
    float *patches, *x, *h, *qkv, *ctx, *tmp, *ffn, *pooled, *projected;
    /** Where the products multiply bf16 (`uform_gemm_takes_bf16`), A in bf16 as the phase before a
     *  product writes it, for that product (else NULL): `a16` [tokens][dim] the LayerNorm phases'
     *  output (for Q/K/V and the up product) or the attention's (for the output product), each until
     *  the product that reads it; `ffn16` [tokens][intermediate] the MLP's hidden rows. */
    uint16_t *a16, *ffn16;
    uint16_t *qkv16; /**< [tokens][3 dim]: Q, K and V in bf16 for the attention, where `a16` is. */
    void *arena;
    size_t arena_bytes;
    int32_t node;
    atomic_size_t *counters;
} image_group_t;

typedef struct image_job_t {
    struct uform_model_s const *model;
    uform_image_tower_t const *tower0;
    uform_embeddings_t out;
    size_t out_dimensions, out_stride;
    size_t features_stride; /**< With `out.features`: bytes between images' features. */
    uform_gemm_t gemm;
    uform_kernels_t const *kernels;
    size_t threads;
    image_thread_t *per_thread;
    int caller_frees; /**< Blocking calls: the verb reads the failures, then frees. */
    uform_outcome_t *outcome; /**< Deferred calls': a strict call's failure is recorded on it. */

    size_t count;
    uform_image_t *images;        /**< [count] copies of the caller's (pixels borrowed). */
    uint8_t *rgb;                 /**< [count][side side 3] preprocessed pixels. */
    size_t rgb_bytes;
    uform_status_t *item;         /**< [count] decoding status of each image. */
    int strict;                   /**< No statuses: one failure fails the call. */
    int cls_tail;                 /**< CLS pooling: the last layer past attention for the [CLS] rows alone. */
    uform_status_t *statuses;
    uform_image_preprocess_options_t preprocess;
    float lut[3][256];            /**< `(v / 255 - mean) / std`, as `uform_image_normalize`. */

    size_t chunk_images; /**< The most of any group. */
    size_t norm_offset;  /**< Floats into each thread's scratch of its norm buffer (fused LayerNorms). */
    size_t probs_offset; /**< Floats into each thread's scratch of its bf16 attention probabilities. */
    /** The bf16 attention kernel of the class (AMX tiles, else AVX-512 BF16) for bf16 towers; NULL:
     *  oneDNN's GEMM functions. Its packed keys, values and scores take the probabilities' place. */
    uform_attention_bf16_t attention16;
    int widens;          /**< The GEMM widens weights per tile: no fused LayerNorms. */
    /** Every group is one thread, with images: the threads take chunks from `counters[1]` rather
     *  than each its group's run (chunks of `chunk_images`, the same in every group). */
    int chunks_shared;
    size_t groups_count;
    image_group_t *groups;

    atomic_size_t *counters; /**< [0]: decoding; [1]: shared chunks; then each group's, 8-aligned. */
    size_t counters_count;
    uform_phase_barrier_t barrier; /**< Every thread's, after decoding. */
    atomic_size_t threads_left;
} image_job_t;

static inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static inline size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }

/** Phases (each with its counter) of one chunk of images: im2col, patch product, assembly, 7 per
 *  layer (two LayerNorms, Q/K/V, attention, three products; the CLS tail's last one 8, with its
 *  gather), pooling, projection, output rows. */
static inline size_t image_pass_phases_per_chunk(uform_image_config_t const *c) { return 7 + 7 * c->layers_count; }

/** Decodes and preprocesses the job's images (from one counter shared by every thread) into `rgb`,
 *  recording statuses and this thread's first failure; meets every thread at the job's barrier. */
void image_pass_decode(image_job_t *job, size_t thread, atomic_size_t *counter);
/** One chunk of `n` images from `first_image` through the tower on the group's threads; `*phase`
 *  counts the group's phase counters used so far. */
void image_pass_chunk(image_job_t *job, image_group_t *group, size_t thread, size_t first_image, size_t n,
                      size_t *phase);
/** Floats of a thread's scratch that the products' tiles need (the largest of every group's plans). */
size_t image_pass_gemm_scratch_floats(image_job_t const *job);
/** Floats of a thread's attention scores (S x max(S, head + 1)). */
size_t image_pass_scores_floats(uform_image_config_t const *c);

#endif // UFORM_MODELS_IMAGE_PASS_H
