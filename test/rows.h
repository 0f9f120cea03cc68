/**
 *  @file   rows.h
 *  @brief  What the encoder tests share to compare embeddings: reading a fixture file, the cosine of
 *          two rows, bf16 and f16 values as floats, and the check of bf16 output rows written with a
 *          stride (normalised, the padding after them untouched). Include after check.h.
 */
#ifndef UFORM_TEST_ROWS_H
#define UFORM_TEST_ROWS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** The whole file, NUL-terminated (`*size` bytes before the NUL), or NULL. Free it. */
static inline char *read_file(char const *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long length = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = length >= 0 ? (char *)malloc((size_t)length + 1) : NULL;
    if (data && fread(data, 1, (size_t)length, f) != (size_t)length) free(data), data = NULL;
    fclose(f);
    if (data) data[length] = '\0', *size = (size_t)length;
    return data;
}

/** Cosine of two rows in double: 1 when both are zero, 0 when only one is. */
static inline double cosine(float const *a, float const *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

static inline float from_bf16(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static inline float from_half(uint16_t h) {
    int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    float value = exponent == 0 ? ldexpf((float)mantissa, -24) : ldexpf((float)(mantissa | 1024), exponent - 25);
    return sign ? -value : value;
}

/** Compares `n` rows of `dims` bf16 values (at most 256) written `stride` bytes apart, `expected`
 *  against `got`: returns the worst cosine, CHECKs every `got` row has unit norm (within 1%), and
 *  clears `*untouched` when a byte after a row's values is not zero. */
static inline double bf16_rows_worst(unsigned char const *expected, unsigned char const *got, size_t n, size_t stride,
                                     size_t dims, int *untouched) {
    double worst = 1;
    *untouched = 1;
    for (size_t i = 0; i < n; ++i) {
        float x[256], y[256];
        double norm = 0;
        for (size_t j = 0; j < dims && j < 256; ++j) {
            uint16_t p, q;
            memcpy(&p, expected + i * stride + 2 * j, 2), memcpy(&q, got + i * stride + 2 * j, 2);
            x[j] = from_bf16(p), y[j] = from_bf16(q);
            norm += (double)y[j] * y[j];
        }
        double c = cosine(x, y, dims);
        worst = c < worst ? c : worst;
        CHECK(fabs(norm - 1.0) < 0.01);
        for (size_t j = 2 * dims; j < stride; ++j) *untouched &= got[i * stride + j] == 0;
    }
    return worst;
}

/** Compares `count` f32 rows of `dims` with the expected ones, except item `bad`: returns the worst
 *  cosine; clears `*zero` unless row `bad` is all zeros, and `*same` unless every status equals the
 *  expected one. */
static inline double rows_worst_but(float const *expected, float const *rows, size_t count, size_t dims, size_t bad,
                                    uform_status_t const *statuses, uform_status_t const *expected_statuses, int *zero,
                                    int *same) {
    double worst = 1;
    *zero = 1, *same = 1;
    for (size_t i = 0; i < count; ++i) {
        *same &= statuses[i] == expected_statuses[i];
        if (i == bad) {
            for (size_t j = 0; j < dims; ++j) *zero &= rows[i * dims + j] == 0.0f;
            continue;
        }
        double c = cosine(expected + i * dims, rows + i * dims, dims);
        worst = c < worst ? c : worst;
    }
    return worst;
}

/** Whether every one of `count` floats still holds the 0x7f7f7f7f bytes a test filled them with. */
static inline int rows_untouched(float const *rows, size_t count) {
    int untouched = 1;
    for (size_t i = 0; i < count; ++i) {
        uint32_t bits;
        memcpy(&bits, &rows[i], 4);
        untouched &= bits == 0x7f7f7f7fu;
    }
    return untouched;
}

#endif // UFORM_TEST_ROWS_H
