/**
 *  @file   random_text_tower.h
 *  @brief  The text towers the benchmarks time, built in memory with random weights: the
 *          all-MiniLM-L6-v2 shape (384 wide, 6 layers, mean pooling, normalised) and the
 *          UForm3-small shape (768 wide, 2 unimodal layers, CLS pooling, a 256-wide projection).
 *          Shared by bench_text.c (CPU) and bench_text_gpu.c (VRAM), so both time the same towers.
 *          Weights are drawn from a fixed xorshift stream; their values matter for timing only.
 */
#ifndef UFORM_BENCH_RANDOM_TEXT_TOWER_H
#define UFORM_BENCH_RANDOM_TEXT_TOWER_H

#include "models/tower.h"

#include <math.h>   // `sqrtf`
#include <stdint.h> // `uint64_t`
#include <stdlib.h> // `malloc`, `calloc`, `abort`

/** @brief A uniform float in [-1, 1) from a fixed xorshift stream. */
static inline float random_uniform(void) {
    static uint64_t state = 0x2545F4914F6CDD1Dull;
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) / (double)(1ull << 52) - 1.0);
}

/** @brief `rows` x `cols` values `offset + scale * uniform` in `dtype` (f32, bf16 rounded to
 *  nearest even, f16 truncated: enough for timing). Aborts when out of memory. The benchmarks keep
 *  their towers until they exit. */
static inline uform_tensor_t random_tensor(size_t rows, size_t cols, float scale, float offset, uform_dtype_t dtype) {
    size_t n = rows * cols;
    void *data = malloc(n * (dtype == uform_dtype_f32_k ? 4 : 2));
    if (!data) abort();
    for (size_t i = 0; i < n; ++i) {
        float value = offset + scale * random_uniform();
        union {
            float f;
            uint32_t u;
        } bits = {.f = value};
        if (dtype == uform_dtype_f32_k) ((float *)data)[i] = value;
        else if (dtype == uform_dtype_bf16_k)
            ((uint16_t *)data)[i] = (uint16_t)((bits.u + 0x7FFFu + ((bits.u >> 16) & 1u)) >> 16);
        else {
            uint32_t sign = (bits.u >> 16) & 0x8000u;
            int exponent = (int)((bits.u >> 23) & 0xFF) - 127 + 15;
            ((uint16_t *)data)[i] = exponent <= 0 ? (uint16_t)sign
                                                  : (uint16_t)(sign | ((uint32_t)exponent << 10) | ((bits.u >> 13) & 0x3FFu));
        }
    }
    return (uform_tensor_t){.data = data, .dtype = dtype, .rows = rows, .cols = cols};
}

/** @brief The UForm3-small shape when `uform3`, else all-MiniLM-L6-v2's, with weights in `dtype`
 *  (LayerNorm parameters and biases f32, as the loaders give them). */
static inline uform_text_tower_t random_text_tower(int uform3, uform_dtype_t dtype) {
    uform_text_tower_t t = {0};
    t.hidden = uform3 ? 768 : 384, t.heads = 12, t.intermediate = 4 * t.hidden, t.layers_count = uform3 ? 2 : 6;
    t.vocab_size = 30522, t.max_positions = 512, t.context = 510, t.layer_norm_epsilon = 1e-12;
    t.embedding_dimensions = uform3 ? 256 : 384, t.pooling = uform3 ? uform_pooling_cls_k : uform_pooling_mean_k;
    t.position_ids = uform3 ? uform_position_ids_roberta_k : uform_position_ids_absolute_k, t.pad_id = 0;
    t.normalize = !uform3, t.weights_dtype = dtype;
    size_t h = t.hidden, in = t.intermediate;
    float ws = 1.0f / sqrtf((float)h), wi = 1.0f / sqrtf((float)in);
    uform_dtype_t const f32 = uform_dtype_f32_k;
    t.word_embeddings = random_tensor(t.vocab_size, h, 0.5f, 0, dtype);
    t.position_embeddings = random_tensor(t.max_positions, h, 0.5f, 0, dtype);
    if (!uform3) t.token_type_embeddings = random_tensor(2, h, 0.5f, 0, dtype);
    t.embedding_norm_weight = random_tensor(1, h, 0.2f, 1, f32);
    t.embedding_norm_bias = random_tensor(1, h, 0.1f, 0, f32);
    t.layers = calloc(t.layers_count, sizeof(uform_text_layer_t));
    if (!t.layers) abort();
    for (size_t l = 0; l < t.layers_count; ++l) {
        uform_text_layer_t *y = &t.layers[l];
        y->query_weight = random_tensor(h, h, ws, 0, dtype), y->query_bias = random_tensor(1, h, 0.1f, 0, f32);
        y->key_weight = random_tensor(h, h, ws, 0, dtype), y->key_bias = random_tensor(1, h, 0.1f, 0, f32);
        y->value_weight = random_tensor(h, h, ws, 0, dtype), y->value_bias = random_tensor(1, h, 0.1f, 0, f32);
        y->attention_output_weight = random_tensor(h, h, ws, 0, dtype);
        y->attention_output_bias = random_tensor(1, h, 0.1f, 0, f32);
        y->attention_norm_weight = random_tensor(1, h, 0.2f, 1, f32);
        y->attention_norm_bias = random_tensor(1, h, 0.1f, 0, f32);
        y->intermediate_weight = random_tensor(in, h, ws, 0, dtype);
        y->intermediate_bias = random_tensor(1, in, 0.1f, 0, f32);
        y->output_weight = random_tensor(h, in, wi, 0, dtype), y->output_bias = random_tensor(1, h, 0.1f, 0, f32);
        y->output_norm_weight = random_tensor(1, h, 0.2f, 1, f32);
        y->output_norm_bias = random_tensor(1, h, 0.1f, 0, f32);
    }
    if (uform3) t.projection = random_tensor(t.embedding_dimensions, h, ws, 0, dtype);
    return t;
}

/** @brief Frees what `random_text_tower` allocated. */
static inline void random_text_tower_free(uform_text_tower_t *t) {
    uform_tensor_t *once[] = {&t->word_embeddings, &t->position_embeddings, &t->token_type_embeddings,
                              &t->embedding_norm_weight, &t->embedding_norm_bias, &t->projection};
    for (size_t i = 0; i < sizeof once / sizeof once[0]; ++i) free((void *)once[i]->data);
    for (size_t l = 0; l < t->layers_count; ++l) {
        uform_text_layer_t *y = &t->layers[l];
        uform_tensor_t *each[] = {&y->query_weight, &y->query_bias, &y->key_weight, &y->key_bias, &y->value_weight,
                                  &y->value_bias, &y->attention_output_weight, &y->attention_output_bias,
                                  &y->attention_norm_weight, &y->attention_norm_bias, &y->intermediate_weight,
                                  &y->intermediate_bias, &y->output_weight, &y->output_bias, &y->output_norm_weight,
                                  &y->output_norm_bias};
        for (size_t i = 0; i < sizeof each / sizeof each[0]; ++i) free((void *)each[i]->data);
    }
    free(t->layers);
    t->layers = NULL;
}

#endif // UFORM_BENCH_RANDOM_TEXT_TOWER_H
