/**
 *  @file   model.h
 *  @brief  The open model behind `uform_model_t`: options, replicas of the tower per memory domain,
 *          the tokenizer. Internal only. Written by `src/models/` (files), read by the verbs.
 */
#ifndef UFORM_MODELS_MODEL_H
#define UFORM_MODELS_MODEL_H

#include "models/tower.h"
#include "text/tokenizer.h"

/** @brief The memory of a RAM model's replicas, text or image alike: per replica, one weight block
 *  of `block_bytes` on its node and its array of layer records. */
struct uform_placement_t;

typedef struct uform_replica_memory_t {
    void **blocks;      /**< [replicas] weights, from `uform_numa_alloc`. */
    size_t block_bytes;
    void **layers;      /**< [replicas] `uform_text_layer_t` or `uform_image_layer_t` arrays. */
} uform_replica_memory_t;

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
    uform_replica_memory_t memory;     /**< The replicas' weights and layer records (either modality). */
    void *vram;                        /**< VRAM text towers: the per-device copies (models/text_vram.c); NULL for RAM. */
};

/** @brief The replica a thread on `node` reads: the one on its node, else replica 0. */
uform_text_tower_t const *uform_model_text_replica(struct uform_model_s const *model, int32_t node);

/** @brief The checks every encode verb makes of the caller's `embeddings` before it submits: not
 *  NULL, a known dtype, at most `width` dimensions (0 takes all), a stride that holds a row, data
 *  for `count` items; with features, a stride that holds an item's `feature_elements` (tokens times
 *  hidden) and items inside the address space. Messages start with `prefix` and call the items
 *  `items` ("texts"). */
uform_status_t uform_embeddings_check(char const *prefix, char const *items, size_t width, size_t feature_elements,
                                      uform_embeddings_t const *embeddings, size_t count);

struct uform_kernels_t;

/** @brief Bytes between items' features: `embeddings->features_stride`, or for 0 an item's
 *  `elements` (tokens times hidden) packed in the embeddings' dtype. */
size_t uform_features_stride(uform_embeddings_t const *embeddings, size_t elements);

/** @brief Writes one item's features (`uform_embeddings_t`): its `rows` f32 rows of `hidden` (packed)
 *  in `dtype` at `target`, then zero rows up to `rows_total`. */
void uform_features_write(struct uform_kernels_t const *kernels, float const *rows, size_t count, size_t hidden,
                          size_t rows_total, void *target, uform_dtype_t dtype);

/** @brief The NUMA node a RAM executor's thread `thread` is pinned to; -1 for other kinds, or when
 *  the placement is unknown. */
int32_t uform_model_thread_node(uform_executor_t executor, uform_executor_kind_t kind, size_t thread);

/** @brief RESIDENCY_MISMATCH, its message starting with `prefix`, when one of the executor's threads
 *  runs on a NUMA node that holds no replica of `model`; OK otherwise. */
uform_status_t uform_model_check_replicas(char const *prefix, struct uform_model_s const *model,
                                          uform_executor_t executor, uform_executor_description_t const *description);

/**
 *  @brief Allocates one replica per memory domain of `placement` for either loader: `*towers`
 *  (`tower_size` bytes each, zeroed), `model->replica_nodes`, and in `model->memory` each node's
 *  weight block of `block_bytes` and `layers` layer records of `layer_size` bytes. Each replica is
 *  counted in `model->replicas_count` before it is made, so that `uform_model_free` releases what a
 *  failure left. The caller fills the towers.
 */
uform_status_t uform_replica_memory_alloc(struct uform_model_s *model, struct uform_placement_t const *placement,
                                          size_t block_bytes, void **towers, size_t tower_size, size_t layers,
                                          size_t layer_size, char const *directory);

/** @brief Releases `model->memory` (the replicas' blocks and layer records) and clears it. */
void uform_replica_memory_free(struct uform_model_s *model);

#endif // UFORM_MODELS_MODEL_H
