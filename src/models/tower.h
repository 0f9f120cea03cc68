/**
 *  @file   tower.h
 *  @brief  The seam between model files (safetensors, configs: `src/models/`) and the CPU compute
 *          of text towers (`src/kernels/`, the forward pass, the encode verb). Internal only.
 *
 *  Both layouts a model directory may have (UForm3 `text_encoder.*`, sentence-transformers BERT)
 *  are read into one shape: a post-norm BERT encoder whose layers are exactly those to run (UForm3's
 *  multimodal layers are left out, as its `TextEncoder.forward_features` skips them).
 *
 *  Matrices keep PyTorch's `nn.Linear` layout: `weight[out][in]`, row-major, so `y = x W^T + b`.
 *  Every tensor of one tower has the tower's `weights_dtype` (f32, bf16 or f16) except LayerNorm
 *  parameters and biases, which are always f32 (they are tiny and precision-sensitive).
 */
#ifndef UFORM_MODELS_TOWER_H
#define UFORM_MODELS_TOWER_H

#include "models/dtype.h"

#include <uform.h>
#include <stddef.h>
#include <stdint.h>

/** @brief One tensor in memory the tower owns (or maps). `data == NULL` means absent (optional). */
typedef struct uform_tensor_t {
    void const *data;
    uform_dtype_t dtype;
    size_t rows, cols; /**< Vectors: rows = 1. */
} uform_tensor_t;

typedef enum uform_pooling_t {
    uform_pooling_cls_k = 0,  /**< The first token's features. */
    uform_pooling_mean_k = 1, /**< Mean over non-padding tokens. */
} uform_pooling_t;

typedef enum uform_position_ids_t {
    uform_position_ids_absolute_k = 0, /**< 0, 1, 2, ... (BERT). */
    uform_position_ids_roberta_k = 1,  /**< pad + cumulative count of non-pad tokens (UForm3 `model_type: roberta`). */
} uform_position_ids_t;

/** The position of a text's id `id` whose `counted` earlier ids are not `pad_id`, as the reference
 *  towers number them: its index `t` (absolute); RoBERTa's (the `uform` package's TextEncoder, as HF's
 *  create_position_ids_from_input_ids) count only the ids that are not `pad_id`, from pad_id + 1, and
 *  give a pad id itself position pad_id. Callers advance `counted` by `id != pad_id`. */
static inline size_t uform_text_position(uform_position_ids_t kind, int32_t pad_id, int32_t id, size_t t, size_t counted) {
    if (kind != uform_position_ids_roberta_k) return t;
    return id == pad_id ? (size_t)pad_id : (size_t)pad_id + 1 + counted;
}

typedef struct uform_text_layer_t {
    uform_tensor_t query_weight, query_bias;         /**< [hidden][hidden], [hidden] */
    uform_tensor_t key_weight, key_bias;
    uform_tensor_t value_weight, value_bias;
    uform_tensor_t attention_output_weight, attention_output_bias;
    uform_tensor_t attention_norm_weight, attention_norm_bias; /**< x = LN(x + attention(x)) */
    uform_tensor_t intermediate_weight, intermediate_bias;     /**< [intermediate][hidden] */
    uform_tensor_t output_weight, output_bias;                 /**< [hidden][intermediate] */
    uform_tensor_t output_norm_weight, output_norm_bias;       /**< x = LN(x + mlp(x)) */
} uform_text_layer_t;

typedef struct uform_text_tower_t {
    /* Shape, from config.json (and 1_Pooling/config.json, modules.json for sentence-transformers). */
    size_t vocab_size, hidden, heads, intermediate, max_positions;
    size_t layers_count;           /**< Layers to run, in order: `layers[0 .. layers_count)`. */
    size_t context;                /**< Max tokens per text, specials included (truncation point). */
    size_t embedding_dimensions;   /**< Output width: the projection's rows, or `hidden` without one. */
    double layer_norm_epsilon;
    uform_pooling_t pooling;
    uform_position_ids_t position_ids;
    int32_t pad_id;
    int normalize;                 /**< The layout asks for L2 normalisation (sentence-transformers' Normalize module). */
    uform_dtype_t weights_dtype;

    /* Weights. */
    uform_tensor_t word_embeddings;      /**< [vocab][hidden] */
    uform_tensor_t position_embeddings;  /**< [max_positions][hidden] */
    uform_tensor_t token_type_embeddings;/**< [types][hidden]; row 0 is added; absent for UForm3 */
    uform_tensor_t embedding_norm_weight, embedding_norm_bias;
    uform_text_layer_t *layers;
    uform_tensor_t projection;           /**< [embedding_dimensions][hidden], no bias; absent for BERT */
} uform_text_tower_t;

#endif // UFORM_MODELS_TOWER_H
