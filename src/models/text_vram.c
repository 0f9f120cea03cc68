/**
 *  @file   text_vram.c
 *  @brief  VRAM text towers: the weights uploaded once per device, and `uform_encode_texts` on VRAM
 *          executors (see text_vram.h).
 *
 *  Opening (`uform_text_vram_open`): model.c reads the directory into one host tower exactly as for
 *  RAM models (configuration, safetensors, tokenizer: nothing is read twice or differently); this
 *  file lays it out (`text_layout`) and `vram_tower_open` (vram_tower.c, shared with the image
 *  towers) packs it into one host image and uploads it per device into one `cuMemAlloc` block, in the
 *  device's primary context (the one VRAM executors use). Matrices keep the tower's dtype (f32, bf16
 *  or f16) and `nn.Linear` layout; Q, K and V are stacked into one [3 hidden][hidden] matrix so one
 *  product makes all three; biases are stored in the activation dtype (cuBLASLt's epilogues read them
 *  so), LayerNorm parameters in f32. Each copy also holds the engine's module (the same fatbin as
 *  vram.c's) and a cuBLASLt handle.
 *
 *  Encoding (`uform_text_vram_encode`, text_vram_encode.c), in waves of texts, each deferred call w
 *  tokenising wave w while the devices run the waves before and enqueuing wave w - 1:
 *  1. the host part (DYNAMIC, one task per text) tokenises on the executor's decoder threads into
 *     fixed slots of `context` ids per text, recording each text's status;
 *  2. the device part: texts packed without padding (encoded ones only), split over the executor's
 *     devices in proportion to their SMs (contiguous ranges, so results come back in input order),
 *     each device's share cut into chunks that fit the scratch the call asks for (`scratch_limit`
 *     bounds it: LIMIT_EXCEEDED when even one text cannot fit). Per chunk the device callback
 *     uploads ids, positions and offsets and enqueues the pass on the slot's stream:
 *       embed (gather + LayerNorm), then per layer:
 *         qkv = x Wqkv^T + b                     (cuBLASLt, BIAS epilogue)
 *         ctx = attention(qkv)                   (text_vram_attention: flash, else WMMA, else SIMT; no score matrix in memory)
 *         tmp = ctx Wo^T + b + x                 (cuBLASLt, BIAS epilogue, beta = 1 on x)
 *         x = LayerNorm(tmp)
 *         ffn = GELU(x W1^T + b1)                (GELU_BIAS epilogue for bf16/f16; BIAS + exact erf GELU for f32)
 *         tmp = ffn W2^T + b2 + x, x = LayerNorm(tmp)
 *       pool (CLS or mean), projection (cuBLASLt), finish (norms, truncation, output dtype) into a
 *       per-device output region of the scratch.
 *     The last device's callback enqueues the copies of every device's output region into pinned
 *     host rows. When every wave finished, the verb writes rows in input order with the caller's
 *     stride, zero rows for failed texts, and the statuses. So an encode call has finished when it
 *     returns, a deferred one included (its outcome is already final).
 *  The f32 path differs from the CPU path only by rounding; bf16/f16 keep activations in that dtype
 *  between kernels (as PyTorch does) and use cuBLASLt's tanh-approximated GELU epilogue.
 */
#define _GNU_SOURCE
#include "models/text_vram_private.h"

#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `memcpy`

/* ---- Opening ---- */

/** Lays the tower out (and copies it when `image->bytes` is set): `vram_layout_t` for text towers. */
static void text_layout(vram_image_t *image, void const *tower_, vram_weights_t *weights, vram_layer_t *layers) {
    uform_text_tower_t const *tower = (uform_text_tower_t const *)tower_;
    uform_dtype_t dtype = tower->weights_dtype;
    size_t hidden = tower->hidden, inter = tower->intermediate;
    weights->word = vram_image_matrix(image, &tower->word_embeddings, tower->word_embeddings.rows, hidden, dtype);
    weights->position = vram_image_matrix(image, &tower->position_embeddings, tower->position_embeddings.rows, hidden, dtype);
    weights->type0 = tower->token_type_embeddings.data ? vram_image_matrix(image, &tower->token_type_embeddings, 1, hidden, dtype) : 0;
    weights->embed_gamma = vram_image_vector(image, &tower->embedding_norm_weight, hidden, uform_dtype_f32_k);
    weights->embed_beta = vram_image_vector(image, &tower->embedding_norm_bias, hidden, uform_dtype_f32_k);
    weights->projection =
        tower->projection.data ? vram_image_matrix(image, &tower->projection, tower->embedding_dimensions, hidden, dtype) : 0;
    for (size_t l = 0; l < tower->layers_count; ++l) {
        uform_text_layer_t const *layer = &tower->layers[l];
        vram_layer_t *out = &layers[l];
        uform_tensor_t const *const weights[3] = {&layer->query_weight, &layer->key_weight, &layer->value_weight};
        uform_tensor_t const *const biases[3] = {&layer->query_bias, &layer->key_bias, &layer->value_bias};
        vram_image_qkv(image, weights, biases, hidden, dtype, &out->qkv_weight, &out->qkv_bias);
        out->output_weight = vram_image_matrix(image, &layer->attention_output_weight, hidden, hidden, dtype);
        out->output_bias = vram_image_vector(image, &layer->attention_output_bias, hidden, dtype);
        out->norm1_gamma = vram_image_vector(image, &layer->attention_norm_weight, hidden, uform_dtype_f32_k);
        out->norm1_beta = vram_image_vector(image, &layer->attention_norm_bias, hidden, uform_dtype_f32_k);
        out->up_weight = vram_image_matrix(image, &layer->intermediate_weight, inter, hidden, dtype);
        out->up_bias = vram_image_vector(image, &layer->intermediate_bias, inter, dtype);
        out->down_weight = vram_image_matrix(image, &layer->output_weight, hidden, inter, dtype);
        out->down_bias = vram_image_vector(image, &layer->output_bias, hidden, dtype);
        out->norm2_gamma = vram_image_vector(image, &layer->output_norm_weight, hidden, uform_dtype_f32_k);
        out->norm2_beta = vram_image_vector(image, &layer->output_norm_bias, hidden, uform_dtype_f32_k);
    }
}

uform_status_t uform_text_vram_open(struct uform_model_s *model, uform_vram_options_t const *options) {
    if (options && !options->devices && options->devices_count)
        return uform_fail(uform_status_invalid_argument_k, "uform_model_open: vram.devices is NULL with a count of %zu",
                          options->devices_count);
    uform_text_tower_t const *tower = &model->text_replicas[0];
    /* The GPU's absence is reported before the shape (vram_tower_open checks it first). */
    uform_cuda_t const *cuda = NULL;
    if (uform_cuda(&cuda) == uform_status_ok_k &&
        (tower->hidden > 1024 || tower->hidden % tower->heads || tower->embedding_dimensions > 1024 * 64))
        return uform_fail(uform_status_unsupported_k,
                          "uform_model_open: VRAM text towers are at most 1024 wide; this one is %zu with %zu heads",
                          tower->hidden, tower->heads);
    return vram_tower_open(model, options, tower, tower->layers_count, tower->weights_dtype, text_layout);
}
