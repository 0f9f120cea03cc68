/**
 *  @file   text_job.h
 *  @brief  One call of the text forward pass on a host executor: the job that `uform_text_encode_ids`
 *          (text_submit.c) builds and checks before submitting, and that every thread of the call
 *          walks (text_forward.c). Internal only.
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
 *  phase's work is cut into tasks (text_plan.h) that the group's threads take from the phase's own
 *  counter, then they meet at the group's barrier. A group of one thread (the batch-parallel pass,
 *  for batches of at least about as many texts as threads) multiplies its texts' rows in one GEMM
 *  per product and never waits; one group of every thread (batch 1) is the tile-split pass, every
 *  phase cut into at least a task per thread where it has that many units. Activations and
 *  per-thread scratch come from the arena pool (src/kernels/arena.c), so repeated calls fault
 *  nothing in. Nothing in the call allocates or fails: `uform_text_encode_ids` allocated and
 *  checked everything before.
 */
#ifndef UFORM_MODELS_TEXT_JOB_H
#define UFORM_MODELS_TEXT_JOB_H

#include "internal.h"
#include "kernels/kernels.h"
#include "models/text_forward.h"

#include <stdatomic.h> // `atomic_size_t`

/** Floats of activations per chunk: tokens * hidden stays near this (six buffers of it, about),
 *  shared among the groups in proportion to their threads... */
#define FORWARD_CHUNK_FLOATS (4096u * 384u)
/** ...but a group's chunks take at least this many tokens (or its longest text). */
#define FORWARD_GROUP_TOKENS_MIN 256u

typedef struct forward_chunk_t {
    size_t first_text, end_text; /**< Texts [first, end) among the job's non-skipped order. */
    size_t first_token, tokens;  /**< Their tokens in the packed ids. */
    size_t longest;              /**< Its longest text's tokens. */
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
    /** Where the products multiply bf16 (`uform_gemm_takes_bf16`), A in bf16 as its producer writes it
     *  (else NULL): `a16` [tokens][hidden] holds x (after a LayerNorm phase) or the attention's output,
     *  each until the product that reads it; `ffn16` [tokens][intermediate] the MLP's hidden rows. */
    uint16_t *a16, *ffn16;
    /** [tokens][3 hidden]: Q, K and V in bf16 for the job's `attention16` kernel (else NULL). */
    uint16_t *qkv16;
    void *arena; /**< The activations, from the pool, on the first thread's node. */
    size_t arena_bytes;
    int32_t node;
    atomic_size_t *counters; /**< One per phase, in the order the group's threads walk them. */
} forward_group_t;

typedef struct forward_job_t {
    struct uform_model_s const *model;
    uform_embeddings_t out;
    size_t out_dimensions, out_stride;
    /** With `out.features`: bytes between texts' features, and rows per text (the context). */
    size_t features_stride, features_rows;
    uform_gemm_t gemm;
    uform_kernels_t const *kernels;
    /** The bf16 attention kernel of the class (AMX tiles, else AVX-512 BF16) for bf16 towers (as the
     *  image pass's), reading `qkv16`; NULL: attention's products in f32 through oneDNN. */
    uform_attention_bf16_t attention16;
    size_t packed_offset; /**< Floats into each thread's scratch of the kernel's packed keys and values. */
    size_t threads;
    forward_thread_t *per_thread;

    /* Texts, packed group after group (with shared chunks: all of them, longest first). */
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
    /** Every group is one thread, each with texts: the chunks are the job's, cut from the texts in
     *  order of cost (longest first), and every thread takes the next from `next_chunk` (a slower
     *  core takes fewer); the groups' `first_chunk` and `chunks_count` are then unused. */
    int chunks_shared;
    atomic_size_t next_chunk;
    size_t chunk_tokens_max, chunk_texts_max, longest;
    size_t norm_offset; /**< Floats into each thread's scratch of its norm buffer (fused phases). */
    /** CLS pooling: the last layer runs for each text's first token alone (`forward_cls_tail`). */
    int cls_tail;
    size_t groups_count;
    forward_group_t *groups;

    /* Synchronisation. */
    atomic_size_t *counters; /**< All groups' phase counters. */
    size_t counters_count;
    atomic_size_t threads_left; /**< The last thread out frees the job. */
} forward_job_t;

/** Phase counters a chunk takes at most: embeddings, 7 per layer (10 for a CLS tail's, which then
 *  takes the pooling's), pooling, projection, output. */
#define FORWARD_PHASES_PER_CHUNK(layers) (6 + 7 * (layers))

/** Floats of a thread's GEMM scratch: the most any plan of the job's groups asks. */
size_t uform_text_gemm_scratch_floats(forward_job_t const *job);

/** Floats of a thread's norm buffer (the fused phases' normalised rows), 0 where no group fuses. */
size_t uform_text_norm_floats(forward_job_t const *job);

/** The task every thread of the call runs: its group's chunks, then, for the last thread, the job's release. */
void uform_text_job_thread(void *context, size_t task, size_t thread, size_t domain);

/** Gives back the job's arenas and frees it (NULL is fine). */
void uform_text_job_free(forward_job_t *job);

#endif // UFORM_MODELS_TEXT_JOB_H
