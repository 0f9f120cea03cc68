/**
 *  @file   text_vram_private.h
 *  @brief  The VRAM text towers' job, shared by text_vram.c (the tower's layout for upload),
 *          text_vram_launch.c (one chunk's pass on a device) and text_vram_encode.c (the encode job:
 *          tokenising, packing, sharing the texts over devices). The copies, products, launches,
 *          graphs, shares and gathering are vram_tower.h's, shared with the image towers. Builds
 *          without CUDA compile text_vram_stub.c.
 */
#ifndef UFORM_MODELS_TEXT_VRAM_PRIVATE_H
#define UFORM_MODELS_TEXT_VRAM_PRIVATE_H

#include "models/text_vram.h"
#include "models/vram_tower.h"

typedef vram_tower_t uform_text_vram_t;

typedef struct vram_job_t {
    struct uform_model_s const *model;
    uform_text_vram_t *vram;
    uform_text_tower_t const *tower;
    char const *const *texts;
    size_t const *lengths;
    size_t count, context;
    int32_t *slots;            /**< [count][context] ids (the tokeniser's output, or the ids given). */
    size_t *produced;          /**< [count] ids per text. */
    uform_status_t *items;     /**< [count] tokenisation statuses. */
    /* Packed, wave after wave (text_vram_encode.c): encoded texts [wave_base, encoded) are the wave's. */
    size_t encoded, total, longest;
    size_t wave_first, wave_end; /**< The wave being tokenised: inputs [wave_first, wave_end). */
    size_t wave_base;            /**< The first encoded text of the wave being run on the devices. */
    size_t *order;             /**< [count] original indices of the encoded texts. */
    int32_t *ids, *positions;  /**< [count * context] at most: [total] used. */
    size_t *offsets;           /**< [count + 1]: [encoded + 1] used. */
    int32_t *chunk_offsets;    /**< [2 count + 2]: each chunk's offsets in a stretch of their own (see device_part). */
    int pinned;                /**< ids, positions, chunk offsets and host rows are in the tower's pinned staging buffer. */
    /* Output. */
    uform_embeddings_t out;
    size_t dims, row_bytes;
    /** With `out.features`: bytes between texts' features, and of one row of them (hidden, output dtype). */
    size_t features_stride, features_row_bytes;
    unsigned char *host_rows;  /**< [count][row_bytes]: [encoded] used. */
    /** With `out.features` and `pinned`: [count * context][features_row_bytes] in the staging buffer,
     *  every chunk's features copied in at once, packed by `offsets` (else NULL: copied item by item). */
    unsigned char *staged_features;
    /** A blocking call's staged features, copied out piece by piece as they land (`piecewise`). */
    vram_pieces_t pieces;
    int piecewise;
    uform_status_t *statuses;
    /* Devices. */
    size_t shares_count;
    vram_share_t *shares;
    size_t workspace;          /**< cuBLASLt workspace bytes per device. */
    size_t chunks;             /**< Chunks enqueued so far, over all devices. */
    int cls_tail;              /**< The last layer past attention for the first tokens alone (`uform_forward_cls_tail`). */
    vram_waves_t run;          /**< The waves' calls; `run.outcomes` is the job's. */
} vram_job_t;

/** Pointers into one device's scratch: [workspace][output rows][chunk buffers]. */
typedef struct vram_buffers_t {
    CUdeviceptr workspace, out, ids, positions, offsets, x, ctx, tmp, qkv, ffn, pooled, projected;
} vram_buffers_t;


/** Enqueues one chunk: encoded texts [first, end) of the job, written at output row `first - share->first`. */
uform_status_t text_vram_enqueue_chunk(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                       size_t end, int32_t *offsets);

#endif // UFORM_MODELS_TEXT_VRAM_PRIVATE_H
