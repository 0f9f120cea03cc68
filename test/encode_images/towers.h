/**
 *  @file   towers.h
 *  @brief  Deterministic random ViT towers in the UForm3 layout (`config.json` with an
 *          `image_encoder` section, `image_encoder.safetensors` in F32), written from a splitmix64
 *          stream, so tests and benchmarks need neither torch nor committed weights.
 *          test/encode_images/make_references.py draws the same values bit for bit (its numpy
 *          splitmix64) before running the `uform` package's PyTorch `ImageEncoder` on them.
 *
 *  Every tensor, in the order `tower_tensors` lists them, takes the next values of one stream
 *  (test/encode/random_weights.h, shared with the text towers): `u = (splitmix64() >> 40) * 2^-24`,
 *  `value = (float)(center + (2u - 1) * half)` in double.
 *  LayerScale gammas are drawn in [0.8, 1.2] (not the package's 1e-5), so attention and MLP
 *  matter; matrices in +-sqrt(3 / fan_in), so activations stay O(1).
 */
#ifndef UFORM_TEST_ENCODE_IMAGES_TOWERS_H
#define UFORM_TEST_ENCODE_IMAGES_TOWERS_H

#include "../encode/random_weights.h"

typedef struct tower_spec_t {
    char const *name;
    size_t dim, heads, layers, patch, image_size, embedding_dim, reg_tokens;
    char const *pooling;
    uint64_t seed;
} tower_spec_t;

/** The towers the correctness test runs (make_references.py has the same list). */
static tower_spec_t const tower_specs[] = {
    {"vit-s16", 384, 6, 3, 16, 224, 256, 0, "cls", 0x5eed0001u},
    {"vit-b16", 768, 12, 2, 16, 224, 512, 0, "mean", 0x5eed0002u},
    {"vit-p14-reg4", 384, 6, 2, 14, 230, 256, 4, "cls", 0x5eed0003u},
};

/** Lists the tensors of `spec` in stream order; returns how many (`out` may be NULL). */
static size_t tower_tensors(tower_spec_t const *spec, tower_tensor_t *out) {
    size_t count = 0, d = spec->dim, p = spec->patch, grid = spec->image_size / spec->patch;
    TOWER_NAME("patch_embed.weight"); TOWER_ADD(4, 0, sqrt(3.0 / (3.0 * p * p)), d, 3, p, p);
    TOWER_NAME("patch_embed.bias"); TOWER_ADD(1, 0, 0.1, d);
    TOWER_NAME("pos_embed"); TOWER_ADD(3, 0, 0.5, 1, grid * grid, d);
    TOWER_NAME("cls_token"); TOWER_ADD(3, 0, 1.0, 1, 1, d);
    if (spec->reg_tokens) {
        TOWER_NAME("reg_token");
        TOWER_ADD(3, 0, 1.0, 1, spec->reg_tokens, d);
    }
    for (size_t l = 0; l < spec->layers; ++l) {
        TOWER_NAME("blocks.%zu.norm1.weight", l); TOWER_ADD(1, 1, 0.1, d);
        TOWER_NAME("blocks.%zu.norm1.bias", l); TOWER_ADD(1, 0, 0.1, d);
        char const *projections[] = {"query", "key", "value", "out"};
        for (int i = 0; i < 4; ++i) {
            TOWER_NAME("blocks.%zu.attn.%s.weight", l, projections[i]); TOWER_ADD(2, 0, sqrt(3.0 / d), d, d);
            TOWER_NAME("blocks.%zu.attn.%s.bias", l, projections[i]); TOWER_ADD(1, 0, 0.1, d);
        }
        TOWER_NAME("blocks.%zu.ls1.gamma", l); TOWER_ADD(1, 1, 0.2, d);
        TOWER_NAME("blocks.%zu.norm2.weight", l); TOWER_ADD(1, 1, 0.1, d);
        TOWER_NAME("blocks.%zu.norm2.bias", l); TOWER_ADD(1, 0, 0.1, d);
        TOWER_NAME("blocks.%zu.mlp.hidden_layer.weight", l); TOWER_ADD(2, 0, sqrt(3.0 / d), 4 * d, d);
        TOWER_NAME("blocks.%zu.mlp.hidden_layer.bias", l); TOWER_ADD(1, 0, 0.1, 4 * d);
        TOWER_NAME("blocks.%zu.mlp.output_layer.weight", l); TOWER_ADD(2, 0, sqrt(3.0 / (4.0 * d)), d, 4 * d);
        TOWER_NAME("blocks.%zu.mlp.output_layer.bias", l); TOWER_ADD(1, 0, 0.1, d);
        TOWER_NAME("blocks.%zu.ls2.gamma", l); TOWER_ADD(1, 1, 0.2, d);
    }
    TOWER_NAME("norm.weight"); TOWER_ADD(1, 1, 0.1, d);
    TOWER_NAME("norm.bias"); TOWER_ADD(1, 0, 0.1, d);
    TOWER_NAME("embedding_projection.weight"); TOWER_ADD(2, 0, sqrt(3.0 / d), spec->embedding_dim, d);
    return count;
}

/**
 *  @brief Writes `directory/config.json` and `directory/image_encoder.safetensors` (creating the
 *  directory) and returns the checksum of all values in stream order: the sum over i of bits(value i) * (2 i + 1)
 *  mod 2^64, with the float32 bit patterns (0 on failure).
 */
static uint64_t tower_write(char const *directory, tower_spec_t const *spec) {
    mkdir(directory, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", directory);
    FILE *file = fopen(path, "w");
    if (!file) return 0;
    fprintf(file,
            "{\"image_encoder\": {\"dim\": %zu, \"patch_size\": %zu, \"image_size\": %zu, \"num_layers\": %zu, "
            "\"num_heads\": %zu, \"embedding_dim\": %zu, \"pooling\": \"%s\", \"num_reg_tokens\": %zu, "
            "\"normalization_means\": [0.48145466, 0.4578275, 0.40821073], "
            "\"normalization_deviations\": [0.26862954, 0.26130258, 0.27577711]}%s}\n",
            spec->dim, spec->patch, spec->image_size, spec->layers, spec->heads, spec->embedding_dim, spec->pooling,
            spec->reg_tokens, spec->embedding_dim > 128 ? ", \"matryoshka_dims\": [64, 128]" : "");
    fclose(file);

    size_t count = tower_tensors(spec, NULL);
    tower_tensor_t *tensors = (tower_tensor_t *)calloc(count, sizeof(tower_tensor_t));
    if (!tensors) return 0;
    tower_tensors(spec, tensors);
    snprintf(path, sizeof path, "%s/image_encoder.safetensors", directory);
    uint64_t hash = tower_write_safetensors(path, tensors, count, spec->seed);
    free(tensors);
    return hash;
}

#endif // UFORM_TEST_ENCODE_IMAGES_TOWERS_H
