/**
 *  @file   model.h
 *  @brief  The open model behind `uform_model_t`: options, replicas of the tower per memory domain,
 *          the tokenizer. Internal only. Written by `src/models/` (files), read by the verbs.
 */
#ifndef UFORM_MODELS_MODEL_H
#define UFORM_MODELS_MODEL_H

#include "models/tower.h"
#include "text/tokenizer.h"

struct uform_model_s {
    uform_modality_t modality;
    uform_residency_t residency;
    uform_dtype_t weights_dtype;
    uform_model_description_t description;
    /* RAM: one replica per memory domain, in the order of `replica_nodes` (NUMA node IDs). A thread
     * running on node N reads the replica whose node is N. */
    size_t replicas_count;
    int32_t *replica_nodes;
    uform_text_tower_t *text_replicas; /**< Text towers, `replicas_count` of them; NULL for images. */
    uform_tokenizer_t *tokenizer;      /**< Text towers only. */
    struct uform_image_tower_t *image_replicas; /**< Image towers, `replicas_count` of them; NULL for texts. */
    void *image_owned;                 /**< What the image loader must release (models/image_model.c). */
    void *owned;                       /**< Whatever the loader must release (mappings, buffers). */
    void *vram;                        /**< VRAM text towers: the per-device copies (models/text_vram.c); NULL for RAM. */
};

/** @brief The replica a thread on `node` reads: the one on its node, else replica 0. */
uform_text_tower_t const *uform_model_text_replica(struct uform_model_s const *model, int32_t node);

/** @brief The checks every encode verb makes of the caller's `embeddings` before it submits: not
 *  NULL, a known dtype, at most `width` dimensions (0 takes all), a stride that holds a row, data
 *  for `count` items. Messages start with `prefix` and call the items `items` ("texts"). */
uform_status_t uform_embeddings_check(char const *prefix, char const *items, size_t width,
                                      uform_embeddings_t const *embeddings, size_t count);

/** @brief The NUMA node a RAM executor's thread `thread` is pinned to; -1 for other kinds, or when
 *  the placement is unknown. */
int32_t uform_model_thread_node(uform_executor_t executor, uform_executor_kind_t kind, size_t thread);

/** @brief RESIDENCY_MISMATCH, its message starting with `prefix`, when one of the executor's threads
 *  runs on a NUMA node that holds no replica of `model`; OK otherwise. */
uform_status_t uform_model_check_replicas(char const *prefix, struct uform_model_s const *model,
                                          uform_executor_t executor, uform_executor_description_t const *description);

#endif // UFORM_MODELS_MODEL_H
