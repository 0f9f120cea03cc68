/**
 *  @file   image_vram.c
 *  @brief  VRAM image towers, opening (see image_vram.h): the host tower's layout for upload
 *          (`vram_tower_open` in vram_tower.c does the rest, as for text towers).
 *
 *  Matrices keep the tower's dtype and `nn.Linear` layout. The patch embedding's Conv2d weight is the
 *  matrix [dim][3 p p], each row zero-padded to a multiple of 8 columns (the patch kernel writes
 *  zeros there too), so the patch embedding is one cuBLASLt product with a BIAS epilogue. Q, K and V
 *  are stacked into one [3 dim][dim] matrix. LayerScale is folded in: `ls * (W x + b)` is
 *  `(ls W) x + ls b`, so the output and down projections' rows and biases are scaled by their gamma
 *  here (in f32, then rounded to the tower's dtype) and the residual stays a beta = 1 epilogue.
 *  Biases are stored in the activation dtype (cuBLASLt's epilogues read them so); LayerNorm
 *  parameters, position embeddings and the [CLS] and register tokens in f32.
 */
#define _GNU_SOURCE
#include "models/image_vram.h"

#include "models/image_tower.h"
#include "models/vram_tower.h"

#include <string.h> // `memcpy`

size_t uform_image_vram_depth(uform_image_config_t const *config) {
    return align_up(3 * config->patch_size * config->patch_size, 8);
}

static float value_at(void const *data, uform_dtype_t dtype, size_t index) {
    if (dtype == uform_dtype_f32_k) return ((float const *)data)[index];
    uform_kernels_t const *kernels = uform_kernels_for(uform_cpu_class_serial_k);
    float value = 0;
    if (dtype == uform_dtype_bf16_k) kernels->bf16_to_f32((uint16_t const *)data + index, &value, 1);
    else kernels->f16_to_f32((uint16_t const *)data + index, &value, 1);
    return value;
}

static void value_put(void *data, uform_dtype_t dtype, size_t index, float value) {
    uform_kernels_t const *kernels = uform_kernels_for(uform_cpu_class_serial_k);
    if (dtype == uform_dtype_f32_k) ((float *)data)[index] = value;
    else if (dtype == uform_dtype_bf16_k) kernels->f32_to_bf16(&value, (uint16_t *)data + index, 1);
    else kernels->f32_to_f16(&value, (uint16_t *)data + index, 1);
}

/** `weight` [rows][cols] with row j scaled by gamma[j], and `bias` scaled alike, in `dtype`: LayerScale folded. */
static void folded(vram_image_t *image, uform_tensor_t const *weight, uform_tensor_t const *bias, uform_tensor_t const *gamma,
                   size_t rows, size_t cols, uform_dtype_t dtype, CUdeviceptr *weight_at, CUdeviceptr *bias_at) {
    size_t element = uform_dtype_bytes(dtype);
    *weight_at = vram_image_take(image, rows * cols * element);
    *bias_at = vram_image_take(image, rows * element);
    if (!image->bytes) return;
    float const *g = (float const *)gamma->data, *b = (float const *)bias->data;
    void *w = image->bytes + *weight_at, *out_bias = image->bytes + *bias_at;
    for (size_t j = 0; j < rows; ++j) {
        for (size_t i = 0; i < cols; ++i)
            value_put(w, dtype, j * cols + i, g[j] * value_at(weight->data, dtype, j * cols + i));
        value_put(out_bias, dtype, j, g[j] * b[j]);
    }
}

/** `vram_layout_t` for image towers. */
static void image_layout(vram_image_t *image, void const *tower_, vram_weights_t *w, vram_layer_t *layers) {
    uform_image_tower_t const *tower = (uform_image_tower_t const *)tower_;
    uform_image_config_t const *c = &tower->config;
    uform_dtype_t dtype = tower->weights_dtype;
    size_t d = c->dim, f = c->intermediate, element = uform_dtype_bytes(dtype);
    size_t depth = 3 * c->patch_size * c->patch_size, padded = uform_image_vram_depth(c);
    w->patch_weight = vram_image_take(image, d * padded * element);
    if (image->bytes)
        for (size_t j = 0; j < d; ++j)
            memcpy(image->bytes + w->patch_weight + j * padded * element,
                   (unsigned char const *)tower->patch_weight.data + j * depth * element, depth * element);
    w->patch_bias = vram_image_vector(image, &tower->patch_bias, d, dtype);
    w->patch_position = vram_image_vector(image, &tower->pos_embed, c->patches * d, uform_dtype_f32_k);
    w->prefix = vram_image_take(image, (1 + c->reg_tokens) * d * sizeof(float));
    if (image->bytes) {
        memcpy(image->bytes + w->prefix, tower->cls_token.data, d * sizeof(float));
        if (c->reg_tokens)
            memcpy(image->bytes + w->prefix + d * sizeof(float), tower->reg_token.data, c->reg_tokens * d * sizeof(float));
    }
    w->norm_gamma = vram_image_vector(image, &tower->norm_weight, d, uform_dtype_f32_k);
    w->norm_beta = vram_image_vector(image, &tower->norm_bias, d, uform_dtype_f32_k);
    w->projection = vram_image_matrix(image, &tower->projection, c->embedding_dimensions, d, dtype);
    for (size_t l = 0; l < c->layers_count; ++l) {
        uform_image_layer_t const *layer = &tower->layers[l];
        vram_layer_t *out = &layers[l];
        uform_tensor_t const *const weights[3] = {&layer->query_weight, &layer->key_weight, &layer->value_weight};
        uform_tensor_t const *const biases[3] = {&layer->query_bias, &layer->key_bias, &layer->value_bias};
        vram_image_qkv(image, weights, biases, d, dtype, &out->qkv_weight, &out->qkv_bias);
        folded(image, &layer->out_weight, &layer->out_bias, &layer->ls1, d, d, dtype, &out->output_weight, &out->output_bias);
        out->norm1_gamma = vram_image_vector(image, &layer->norm1_weight, d, uform_dtype_f32_k);
        out->norm1_beta = vram_image_vector(image, &layer->norm1_bias, d, uform_dtype_f32_k);
        out->up_weight = vram_image_matrix(image, &layer->hidden_weight, f, d, dtype);
        out->up_bias = vram_image_vector(image, &layer->hidden_bias, f, dtype);
        folded(image, &layer->output_weight, &layer->output_bias, &layer->ls2, d, f, dtype, &out->down_weight, &out->down_bias);
        out->norm2_gamma = vram_image_vector(image, &layer->norm2_weight, d, uform_dtype_f32_k);
        out->norm2_beta = vram_image_vector(image, &layer->norm2_bias, d, uform_dtype_f32_k);
    }
}

uform_status_t uform_image_vram_open(struct uform_model_s *model, uform_vram_options_t const *options) {
    uform_image_tower_t const *tower = &model->image_replicas[0];
    uform_cuda_t const *cuda = NULL;
    /* The GPU's absence is reported before the shape (vram_tower_open checks it first). */
    if (uform_cuda(&cuda) == uform_status_ok_k && tower->config.dim > 1024)
        return uform_fail(uform_status_unsupported_k, "uform_model_open: VRAM image towers are at most 1024 wide; this one is %zu",
                          tower->config.dim);
    return vram_tower_open(model, options, tower, tower->config.layers_count, tower->weights_dtype, image_layout);
}
