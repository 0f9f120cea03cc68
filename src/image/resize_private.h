/**
 *  @file   resize_private.h
 *  @brief  What the portable resize (resize.c) and its x86 vector passes (resize_x86.c) share: the
 *          fixed-point weights, the scalar pass bodies both instantiate, and the vector passes'
 *          entry points. Internal to src/image/. Both files are compiled with `-ffp-contract=off`.
 */
#ifndef UFORM_IMAGE_RESIZE_PRIVATE_H
#define UFORM_IMAGE_RESIZE_PRIVATE_H

#include <stdbool.h> // `bool`
#include <stddef.h>  // `size_t`
#include <stdint.h>  // `int32_t`, `uint8_t`
#include <string.h>  // `memcpy`

#define UFORM_PRECISION_BITS 22 /* 32 - 8 - 2, as PIL */

/** Weights of `count` outputs starting at output `first`, of a resize from `in_size` to `out_size`. */
typedef struct weights_t {
    size_t ksize;    /**< Weights per output. */
    int *bounds;     /**< Per output: first input, number of inputs. */
    double *doubles; /**< [count * ksize] normalised weights. */
    int32_t *fixed;  /**< [count * ksize] the same in fixed point. */
} weights_t;

static inline uint8_t clip8(int32_t sum) {
    if (sum < 0) return 0;
    sum >>= UFORM_PRECISION_BITS;
    return sum > 255 ? 255 : (uint8_t)sum;
}

/* The horizontal pass over one row, for `channels` interleaved 8-bit channels; specialised per
 * channel count by inlining. Used for grey and grey+alpha. */
static inline __attribute__((always_inline)) void horizontal_row(uint8_t const *in, uint8_t *out, size_t count,
                                                                 weights_t const *weights, size_t channels) {
    for (size_t i = 0; i < count; ++i) {
        int32_t const *k = weights->fixed + i * weights->ksize;
        uint8_t const *window = in + (size_t)weights->bounds[2 * i] * channels;
        int n = weights->bounds[2 * i + 1];
        int32_t sums[2] = {1 << (UFORM_PRECISION_BITS - 1), 1 << (UFORM_PRECISION_BITS - 1)};
        for (int x = 0; x < n; ++x)
            for (size_t c = 0; c < channels; ++c) sums[c] += window[x * channels + c] * k[x];
        for (size_t c = 0; c < channels; ++c) out[i * channels + c] = clip8(sums[c]);
    }
}

/* Four channels at once (RGB padded to RGBX, RGBA, CMYK): one vector multiply-add per tap, the same
 * 32-bit integer arithmetic as the scalar sums, so the same bytes. */
typedef int32_t uform_v4si_t __attribute__((vector_size(16)));
typedef uint8_t uform_v4qu_t __attribute__((vector_size(4)));

static inline __attribute__((always_inline)) void horizontal_row4(uint8_t const *in, uint8_t *out, size_t count,
                                                                  weights_t const *weights, size_t out_channels) {
    for (size_t i = 0; i < count; ++i) {
        int32_t const *k = weights->fixed + i * weights->ksize;
        uint8_t const *window = in + (size_t)weights->bounds[2 * i] * 4;
        int n = weights->bounds[2 * i + 1];
        uform_v4si_t sum = {1 << (UFORM_PRECISION_BITS - 1), 1 << (UFORM_PRECISION_BITS - 1),
                            1 << (UFORM_PRECISION_BITS - 1), 1 << (UFORM_PRECISION_BITS - 1)};
        for (int x = 0; x < n; ++x) {
            uform_v4qu_t pixel;
            memcpy(&pixel, window + 4 * x, 4);
            sum += __builtin_convertvector(pixel, uform_v4si_t) * k[x];
        }
        for (size_t c = 0; c < out_channels; ++c) out[i * out_channels + c] = clip8(sum[c]);
    }
}

/* The vertical pass: output row `i` sums rows `bounds[2i] - row0 ...` of `in`, `width` bytes each,
 * through an accumulator row so the inner loop runs over contiguous bytes (vectorised). */
static inline __attribute__((always_inline)) void vertical_body(uint8_t const *in, size_t in_stride, size_t row0,
                                                                uint8_t *out, size_t out_stride, size_t rows,
                                                                size_t width, weights_t const *weights,
                                                                int32_t *sums) {
    for (size_t i = 0; i < rows; ++i) {
        int32_t const *k = weights->fixed + i * weights->ksize;
        size_t ymin = (size_t)weights->bounds[2 * i] - row0;
        int n = weights->bounds[2 * i + 1];
        for (size_t x = 0; x < width; ++x) sums[x] = 1 << (UFORM_PRECISION_BITS - 1);
        for (int y = 0; y < n; ++y) {
            uint8_t const *row = in + (ymin + (size_t)y) * in_stride;
            int32_t weight = k[y];
            for (size_t x = 0; x < width; ++x) sums[x] += row[x] * weight;
        }
        uint8_t *target = out + i * out_stride;
        for (size_t x = 0; x < width; ++x) target[x] = clip8(sums[x]);
    }
}

/* The horizontal pass over `rows` rows: RGB rows are padded to RGBX one at a time into `padded`. */
static inline __attribute__((always_inline)) void horizontal_body(uint8_t const *in, size_t in_stride, size_t rows,
                                                                  size_t in_width, uint8_t *out, size_t out_stride,
                                                                  size_t count, weights_t const *weights,
                                                                  size_t channels, uint8_t *padded) {
    for (size_t y = 0; y < rows; ++y) {
        uint8_t const *row = in + y * in_stride;
        uint8_t *target = out + y * out_stride;
        switch (channels) {
        case 1: horizontal_row(row, target, count, weights, 1); break;
        case 2: horizontal_row(row, target, count, weights, 2); break;
        case 3:
            for (size_t x = 0; x < in_width; ++x)
                padded[4 * x] = row[3 * x], padded[4 * x + 1] = row[3 * x + 1], padded[4 * x + 2] = row[3 * x + 2],
                padded[4 * x + 3] = 0;
            horizontal_row4(padded, target, count, weights, 3);
            break;
        default: horizontal_row4(row, target, count, weights, 4); break;
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define UFORM_RESIZE_AVX2 1
#define UFORM_RESIZE_VNNI 1
#define UFORM_VNNI_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"

/** The horizontal pass with AVX2: two rows at a time through `padded` (8 bytes a pixel). */
void uform_resize_horizontal_avx2(uint8_t const *in, size_t in_stride, size_t rows, size_t in_width, uint8_t *out,
                                  size_t out_stride, size_t count, weights_t const *weights, size_t channels,
                                  uint8_t *padded);
/** The vertical pass compiled for AVX2 (the same sums, wider vectors). */
void uform_resize_vertical_avx2(uint8_t const *in, size_t in_stride, size_t row0, uint8_t *out, size_t out_stride,
                                size_t rows, size_t width, weights_t const *weights, int32_t *sums);
/** Splits the fixed-point weights into the signed 8-bit digits the VNNI passes weigh with; false
 *  when one does not split (never for PIL's weights). */
bool uform_resize_weight_digits(weights_t const *weights, size_t count, int32_t *digits);
/** The horizontal pass with AVX-512 VNNI: four rows interleaved in `quads`, 3 or 4 channels. */
void uform_resize_horizontal_vnni(uint8_t const *in, size_t in_stride, size_t rows, size_t in_width, uint8_t *out,
                                  size_t out_stride, size_t count, weights_t const *weights, size_t channels,
                                  int32_t const *digits, uint8_t *quads);
/** Bytes `uform_resize_horizontal_vnni` needs for its interleaved rows. */
size_t uform_resize_vnni_quads_bytes(size_t in_width, size_t channels);
/** The vertical pass with AVX-512 VNNI, 64 columns at a time. */
void uform_resize_vertical_vnni(uint8_t const *in, size_t in_stride, size_t row0, uint8_t *out, size_t out_stride,
                                size_t rows, size_t width, weights_t const *weights, int32_t const *digits);
/** Normalises the first pixels of `rgb` into `chw`, 16 at a time; returns how many it did. */
size_t uform_resize_normalize_avx512(uint8_t const *rgb, size_t plane, float const mean[3], float const std[3],
                                     float *chw);
#endif

#endif // UFORM_IMAGE_RESIZE_PRIVATE_H
