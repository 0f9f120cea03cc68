/**
 *  @file   random_weights.h
 *  @brief  The deterministic weight stream of the random test towers (image: test/encode_images/towers.h;
 *          text: test/encode/text_towers.h) and the F32 safetensors writer they share, so tests and
 *          benchmarks need neither torch nor committed weights. The make_references.py scripts draw the
 *          same values bit for bit with numpy (test/encode_images/make_references.py: `splitmix64`).
 *
 *  Every tensor, in the order its tower lists them, takes the next values of one splitmix64 stream
 *  seeded with the tower's seed: `u = (splitmix64() >> 40) * 2^-24`,
 *  `value = (float)(center + (2u - 1) * half)` computed in double.
 *  The checksum of a tower is the sum over i of bits(value i) * (2 i + 1) mod 2^64, with the float32
 *  bit patterns in stream order.
 */
#ifndef UFORM_TEST_ENCODE_RANDOM_WEIGHTS_H
#define UFORM_TEST_ENCODE_RANDOM_WEIGHTS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/** One tensor of a random tower: its name, shape and the range its values are drawn from. */
typedef struct tower_tensor_t {
    char name[64];
    size_t shape[4], rank;
    double center, half;
} tower_tensor_t;

/** Helpers of the tensor-listing functions: they need `out` (tower_tensor_t *, may be NULL) and
 *  `count` (size_t) in scope. `TOWER_NAME(format, ...)` names the next tensor, then
 *  `TOWER_ADD(rank, center, half, dims...)` appends it. */
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

static inline size_t tower_elements(tower_tensor_t const *tensor) {
    size_t n = 1;
    for (size_t i = 0; i < tensor->rank; ++i) n *= tensor->shape[i];
    return n;
}

static inline uint64_t tower_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/** The next value of the stream for a tensor drawn in [center - half, center + half]. */
static inline float tower_value(uint64_t *state, double center, double half) {
    double u = (double)(tower_splitmix64(state) >> 40) * (1.0 / 16777216.0);
    return (float)(center + (2.0 * u - 1.0) * half);
}

/**
 *  @brief Writes `path` as an F32 safetensors file holding `tensors` (in that order, values from the
 *  stream seeded with `seed`) and returns the checksum (0 on failure).
 */
static inline uint64_t tower_write_safetensors(char const *path, tower_tensor_t const *tensors, size_t count,
                                               uint64_t seed) {
    size_t header_capacity = 256 + count * 160, used = 0, offset = 0;
    char *header = (char *)malloc(header_capacity);
    if (!header) return 0;
    used += (size_t)snprintf(header + used, header_capacity - used, "{");
    for (size_t t = 0; t < count; ++t) {
        size_t bytes = tower_elements(&tensors[t]) * 4;
        used += (size_t)snprintf(header + used, header_capacity - used, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[",
                                 t ? "," : "", tensors[t].name);
        for (size_t i = 0; i < tensors[t].rank; ++i)
            used += (size_t)snprintf(header + used, header_capacity - used, "%s%zu", i ? "," : "", tensors[t].shape[i]);
        used += (size_t)snprintf(header + used, header_capacity - used, "],\"data_offsets\":[%zu,%zu]}", offset,
                                 offset + bytes);
        offset += bytes;
    }
    used += (size_t)snprintf(header + used, header_capacity - used, "}");
    while (used % 8) header[used++] = ' ';
    FILE *file = fopen(path, "wb");
    uint64_t hash = 0, state = seed, position = 0;
    if (file) {
        uint64_t length = used;
        fwrite(&length, 8, 1, file);
        fwrite(header, 1, used, file);
        float buffer[4096];
        for (size_t t = 0; t < count; ++t) {
            size_t n = tower_elements(&tensors[t]);
            for (size_t done = 0; done < n;) {
                size_t step = n - done < 4096 ? n - done : 4096;
                for (size_t i = 0; i < step; ++i) buffer[i] = tower_value(&state, tensors[t].center, tensors[t].half);
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
    }
    free(header);
    return hash;
}

#endif // UFORM_TEST_ENCODE_RANDOM_WEIGHTS_H
