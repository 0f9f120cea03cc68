/**
 *  @file   image_tower.h
 *  @brief  The image tower (a pre-norm ViT, as the `uform` package's `ImageEncoder`): its config,
 *          its weights per replica, the loader (image_model.c) and the forward pass
 *          (image_forward.c, image_pass.c). Internal only.
 *
 *  Matrices keep PyTorch's `nn.Linear` layout (`weight[out][in]`); the patch embedding's
 *  `Conv2d` weight `[dim][3][p][p]` is read as the matrix `[dim][3 * p * p]`, so the patch
 *  embedding is a GEMM over patches unrolled in (channel, row, column) order. Weights have the
 *  tower's dtype; LayerNorm parameters, biases, LayerScale gammas, position embeddings and the
 *  CLS and register tokens are always f32.
 */
#ifndef UFORM_MODELS_IMAGE_TOWER_H
#define UFORM_MODELS_IMAGE_TOWER_H

#include "models/tower.h"

/** Register tokens a config may declare. */
#define UFORM_IMAGE_MAX_REG_TOKENS 256
/** The largest image side and patch side a config may declare. */
#define UFORM_IMAGE_MAX_SIDE 4096
/** The most tokens an image tower's sequence may hold ([CLS], registers, patches): attention holds a
 *  tokens x tokens block of scores per thread (256 MiB at 8,192; ViT-L/14 at 336 pixels has 577). */
#define UFORM_IMAGE_MAX_SEQUENCE ((size_t)8192)

typedef struct uform_image_layer_t {
    uform_tensor_t norm1_weight, norm1_bias;
    uform_tensor_t query_weight, query_bias, key_weight, key_bias, value_weight, value_bias;
    uform_tensor_t out_weight, out_bias;
    uform_tensor_t ls1;
    uform_tensor_t norm2_weight, norm2_bias;
    uform_tensor_t hidden_weight, hidden_bias; /**< [4 dim][dim] */
    uform_tensor_t output_weight, output_bias; /**< [dim][4 dim] */
    uform_tensor_t ls2;
} uform_image_layer_t;

typedef struct uform_image_config_t {
    size_t dim, patch_size, image_size, layers_count, heads, embedding_dimensions, reg_tokens;
    size_t grid;        /**< image_size / patch_size patches per side. */
    size_t patches;     /**< grid * grid */
    size_t sequence;    /**< 1 + reg_tokens + patches */
    size_t intermediate;
    double layer_norm_epsilon;
    uform_pooling_t pooling;
    float mean[3], std[3];
    size_t matryoshka[8];
} uform_image_config_t;

typedef struct uform_image_tower_t {
    uform_image_config_t config;
    uform_dtype_t weights_dtype;
    uform_tensor_t patch_weight;  /**< [dim][3 p p] */
    uform_tensor_t patch_bias;    /**< [dim] */
    uform_tensor_t pos_embed;     /**< [patches][dim] */
    uform_tensor_t cls_token;     /**< [dim] */
    uform_tensor_t reg_token;     /**< [reg_tokens][dim], absent without registers */
    uform_image_layer_t *layers;
    uform_tensor_t norm_weight, norm_bias;
    uform_tensor_t projection;    /**< [embedding_dimensions][dim] */
} uform_image_tower_t;

struct uform_model_s;

/** @brief Parses the `image_encoder` section of a UForm3 `config.json` root (cJSON). */
uform_status_t uform_image_config_parse(char const *label, void const *root, uform_image_config_t *config);

/** @brief Opens the image tower of `model` (already holding its options' modality, residency and
 *  dtype): config, `image_encoder.safetensors`, one replica per memory domain. */
uform_status_t uform_image_model_load(struct uform_model_s *model, uform_model_options_t const *options);

/** @brief Releases what `uform_image_model_load` made. */
void uform_image_model_release(struct uform_model_s *model);

/** @brief The replica a thread on `node` reads. */
uform_image_tower_t const *uform_model_image_replica(struct uform_model_s const *model, int32_t node);

#endif // UFORM_MODELS_IMAGE_TOWER_H
