/**
 *  @file   towers.h
 *  @brief  Deterministic random ViT towers in the UForm3 layout (`config.json` with an
 *          `image_encoder` section, `image_encoder.safetensors` in F32), written from a splitmix64
 *          stream, so tests and benchmarks need neither torch nor committed weights.
 *          test/encode_images/make_references.py draws the same values bit for bit (its numpy
 *          splitmix64) before running the `uform` package's PyTorch `ImageEncoder` on them.
 *
 *  Every tensor, in the order `tower_tensors` lists them, takes the next values of one stream:
 *  `u = (splitmix64() >> 40) * 2^-24`, `value = (float)(center + (2u - 1) * half)` in double.
 *  LayerScale gammas are drawn in [0.8, 1.2] (not the package's 1e-5), so attention and MLP
 *  matter; matrices in +-sqrt(3 / fan_in), so activations stay O(1).
 */
#ifndef UFORM_TEST_ENCODE_IMAGES_TOWERS_H
#define UFORM_TEST_ENCODE_IMAGES_TOWERS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

typedef struct tower_tensor_t {
    char name[64];
    size_t shape[4], rank;
    double center, half;
} tower_tensor_t;

/** Lists the tensors of `spec` in stream order; returns how many (`out` may be NULL). */
static size_t tower_tensors(tower_spec_t const *spec, tower_tensor_t *out) {
    size_t count = 0, d = spec->dim, p = spec->patch, grid = spec->image_size / spec->patch;
#define TOWER_ADD(rank_, center_, half_, ...)                                                                          \
    do {                                                                                                               \
        if (out) {                                                                                                     \
            size_t const shape_[] = {__VA_ARGS__};                                                                     \
            out[count].rank = rank_;                                                                                   \
            memcpy(out[count].shape, shape_, sizeof(shape_));                                                          \
            out[count].center = center_, out[count].half = half_;                                                      \
        }                                                                                                              \
        ++count;                                                                                                       \
    } while (0)
#define TOWER_NAME(...) (void)(out ? snprintf(out[count].name, sizeof(out[count].name), __VA_ARGS__) : 0)
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
#undef TOWER_ADD
#undef TOWER_NAME
    return count;
}

static size_t tower_elements(tower_tensor_t const *tensor) {
    size_t n = 1;
    for (size_t i = 0; i < tensor->rank; ++i) n *= tensor->shape[i];
    return n;
}

static uint64_t tower_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
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
    tower_tensors(spec, tensors);
    size_t header_capacity = 256 + count * 160, used = 0, offset = 0;
    char *header = (char *)malloc(header_capacity);
    used += (size_t)snprintf(header + used, header_capacity - used, "{");
    for (size_t t = 0; t < count; ++t) {
        size_t bytes = tower_elements(&tensors[t]) * 4;
        used += (size_t)snprintf(header + used, header_capacity - used, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[", t ? "," : "",
                                 tensors[t].name);
        for (size_t i = 0; i < tensors[t].rank; ++i)
            used += (size_t)snprintf(header + used, header_capacity - used, "%s%zu", i ? "," : "", tensors[t].shape[i]);
        used += (size_t)snprintf(header + used, header_capacity - used, "],\"data_offsets\":[%zu,%zu]}", offset, offset + bytes);
        offset += bytes;
    }
    used += (size_t)snprintf(header + used, header_capacity - used, "}");
    while (used % 8) header[used++] = ' ';
    snprintf(path, sizeof path, "%s/image_encoder.safetensors", directory);
    file = fopen(path, "wb");
    uint64_t hash = 0, state = spec->seed, position = 0;
    if (file) {
        uint64_t length = used;
        fwrite(&length, 8, 1, file);
        fwrite(header, 1, used, file);
        float buffer[4096];
        for (size_t t = 0; t < count; ++t) {
            size_t n = tower_elements(&tensors[t]);
            for (size_t done = 0; done < n;) {
                size_t step = n - done < 4096 ? n - done : 4096;
                for (size_t i = 0; i < step; ++i) {
                    double u = (double)(tower_splitmix64(&state) >> 40) * (1.0 / 16777216.0);
                    buffer[i] = (float)(tensors[t].center + (2.0 * u - 1.0) * tensors[t].half);
                }
                for (size_t i = 0; i < step; ++i) {
                    uint32_t bits;
                    memcpy(&bits, &buffer[i], 4);
                    hash += (uint64_t)bits * (2 * position++ + 1);
                }
                fwrite(buffer, 4, step, file);
                done += step;
            }
        }
        if (fclose(file) != 0) hash = 0;
    } else hash = 0;
    free(header);
    free(tensors);
    return hash;
}

#endif // UFORM_TEST_ENCODE_IMAGES_TOWERS_H
