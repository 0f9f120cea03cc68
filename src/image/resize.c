/**
 *  @file   resize.c
 *  @brief  torchvision's `Resize(side, BICUBIC)` + `convert("RGB")` + `CenterCrop(side)` on PIL
 *          images, computed only where the crop keeps pixels, with PIL's arithmetic.
 *
 *  PIL's bicubic resize (`ImagingResample`) is separable: a horizontal pass over the input rows the
 *  vertical pass needs, rounded and clipped to 8 bits, then a vertical pass. Each output pixel of
 *  a pass sums a window of input pixels with weights of the cubic kernel (a = -0.5), its support
 *  widened by the scale factor when downscaling (antialiasing), the window rounded to whole pixels,
 *  the weights normalised to sum to one in double precision and then turned to fixed point with
 *  22 fractional bits (rounded half away from zero); sums start at half a unit and are clipped to
 *  0..255. 16-bit grey sums the double weights and rounds half away from zero. "P" and "1" images
 *  are resized by nearest neighbour, stepping through the input in double precision by
 *  accumulation, as PIL's affine scaling does. Every output pixel depends only on its own windows,
 *  so computing the crop alone gives the same bytes as resizing everything and cropping after.
 *
 *  This file is compiled with `-ffp-contract=off`: a fused multiply-add would change the weights.
 */
#include "image/image.h"
#include "image/scratch.h"
#include "internal.h"

#include <math.h>   // `ceil`
#include <string.h> // `memcpy`, `memset`

#define UFORM_PRECISION_BITS 22 /* 32 - 8 - 2, as PIL */

static double bicubic(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * -0.5;
    return 0.0;
}

/** Weights of `count` outputs starting at output `first`, of a resize from `in_size` to `out_size`. */
typedef struct weights_t {
    size_t ksize;    /**< Weights per output. */
    int *bounds;     /**< Per output: first input, number of inputs. */
    double *doubles; /**< [count * ksize] normalised weights. */
    int32_t *fixed;  /**< [count * ksize] the same in fixed point. */
} weights_t;

static uform_status_t compute_weights(size_t in_size, size_t out_size, size_t first, size_t count,
                                      uform_image_scratch_t *scratch, size_t slot, weights_t *weights) {
    /* PIL passes the box as floats: exact below 2^24, which the geometry guarantees. */
    double scale = (double)(float)in_size / (double)out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    size_t ksize = (size_t)ceil(support) * 2 + 1;
    size_t bytes = count * (2 * sizeof(int) + ksize * (sizeof(double) + sizeof(int32_t)));
    uint8_t *memory = uform_image_scratch_reserve(scratch, slot, bytes);
    if (!memory) return uform_fail(uform_status_out_of_memory_k, "image: no memory for resize weights");
    weights->ksize = ksize;
    weights->doubles = (double *)memory;
    weights->fixed = (int32_t *)(memory + count * ksize * sizeof(double));
    weights->bounds = (int *)(memory + count * ksize * (sizeof(double) + sizeof(int32_t)));
    double inv_filterscale = 1.0 / filterscale;
    for (size_t i = 0; i < count; ++i) {
        size_t xx = first + i;
        double center = ((double)xx + 0.5) * scale;
        double sum = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > (int)in_size) xmax = (int)in_size;
        xmax -= xmin;
        double *k = weights->doubles + i * ksize;
        for (int x = 0; x < xmax; ++x) {
            double w = bicubic(((double)(x + xmin) - center + 0.5) * inv_filterscale);
            k[x] = w;
            sum += w;
        }
        if (sum != 0.0)
            for (int x = 0; x < xmax; ++x) k[x] /= sum;
        int32_t *f = weights->fixed + i * ksize;
        for (int x = 0; x < xmax; ++x)
            f[x] = k[x] < 0 ? (int32_t)(-0.5 + k[x] * (1 << UFORM_PRECISION_BITS))
                            : (int32_t)(0.5 + k[x] * (1 << UFORM_PRECISION_BITS));
        weights->bounds[2 * i] = xmin;
        weights->bounds[2 * i + 1] = xmax;
    }
    return uform_status_ok_k;
}

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

/* Compiled twice: for the baseline and for AVX2 (wider integer vectors), chosen at run time. */
static void horizontal_pass_baseline(uint8_t const *in, size_t in_stride, size_t rows, size_t in_width, uint8_t *out,
                                     size_t out_stride, size_t count, weights_t const *weights, size_t channels,
                                     uint8_t *padded) {
    horizontal_body(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, padded);
}
static void vertical_pass_baseline(uint8_t const *in, size_t in_stride, size_t row0, uint8_t *out, size_t out_stride,
                                   size_t rows, size_t width, weights_t const *weights, int32_t *sums) {
    vertical_body(in, in_stride, row0, out, out_stride, rows, width, weights, sums);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define UFORM_RESIZE_AVX2 1
#include <immintrin.h>

/* `horizontal_row4` with the byte-to-lane widening done by one instruction (vpmovzxbd), which the
 * vector extension's conversion does not get from the compiler. Same sums, same bytes. */
__attribute__((target("avx2"))) static inline void horizontal_row4_avx2(uint8_t const *in, uint8_t *out, size_t count,
                                                                        weights_t const *weights,
                                                                        size_t out_channels) {
    __m128i const half = _mm_set1_epi32(1 << (UFORM_PRECISION_BITS - 1));
    for (size_t i = 0; i < count; ++i) {
        int32_t const *k = weights->fixed + i * weights->ksize;
        uint8_t const *window = in + (size_t)weights->bounds[2 * i] * 4;
        int n = weights->bounds[2 * i + 1];
        __m128i sum = half, other = _mm_setzero_si128();
        int x = 0;
        for (; x + 1 < n; x += 2) { /* two chains, so the additions do not wait on each other */
            int32_t first, second;
            memcpy(&first, window + 4 * x, 4);
            memcpy(&second, window + 4 * x + 4, 4);
            sum = _mm_add_epi32(sum, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(first)), _mm_set1_epi32(k[x])));
            other = _mm_add_epi32(other,
                                  _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(second)), _mm_set1_epi32(k[x + 1])));
        }
        if (x < n) {
            int32_t last;
            memcpy(&last, window + 4 * x, 4);
            sum = _mm_add_epi32(sum, _mm_mullo_epi32(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(last)), _mm_set1_epi32(k[x])));
        }
        /* Integer addition is associative (no overflow: |sums| stay below 2^31), so the split is exact. */
        sum = _mm_add_epi32(sum, other);
        int32_t lanes[4];
        memcpy(lanes, &sum, sizeof(lanes));
        for (size_t c = 0; c < out_channels; ++c) out[i * out_channels + c] = clip8(lanes[c]);
    }
}

/* Two rows at once: `pair` holds rows A and B interleaved, 8 bytes per pixel (A's RGBX or RGBA, then
 * B's), so one 64-bit load and one vpmovzxbd give both rows' pixel in the 8 lanes of a 256-bit
 * register and one vpmulld weighs them. The lanes' sums are the scalar sums, exactly. */
__attribute__((target("avx2"))) static inline void horizontal_pair_avx2(uint8_t const *pair, uint8_t *out_a,
                                                                        uint8_t *out_b, size_t count,
                                                                        weights_t const *weights,
                                                                        size_t out_channels) {
    __m256i const half = _mm256_set1_epi32(1 << (UFORM_PRECISION_BITS - 1));
    for (size_t i = 0; i < count; ++i) {
        int32_t const *k = weights->fixed + i * weights->ksize;
        uint8_t const *window = pair + (size_t)weights->bounds[2 * i] * 8;
        int n = weights->bounds[2 * i + 1];
        __m256i sum = half, other = _mm256_setzero_si256();
        int x = 0;
        for (; x + 1 < n; x += 2) {
            __m128i first = _mm_loadl_epi64((__m128i const *)(window + 8 * x));
            __m128i second = _mm_loadl_epi64((__m128i const *)(window + 8 * x + 8));
            sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(first), _mm256_set1_epi32(k[x])));
            other = _mm256_add_epi32(other,
                                     _mm256_mullo_epi32(_mm256_cvtepu8_epi32(second), _mm256_set1_epi32(k[x + 1])));
        }
        if (x < n) {
            __m128i last = _mm_loadl_epi64((__m128i const *)(window + 8 * x));
            sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(last), _mm256_set1_epi32(k[x])));
        }
        sum = _mm256_add_epi32(sum, other);
        int32_t lanes[8];
        memcpy(lanes, &sum, sizeof(lanes));
        for (size_t c = 0; c < out_channels; ++c) {
            out_a[i * out_channels + c] = clip8(lanes[c]);
            out_b[i * out_channels + c] = clip8(lanes[4 + c]);
        }
    }
}

__attribute__((target("avx2"))) static void horizontal_pass_avx2(uint8_t const *in, size_t in_stride, size_t rows,
                                                                 size_t in_width, uint8_t *out, size_t out_stride,
                                                                 size_t count, weights_t const *weights,
                                                                 size_t channels, uint8_t *padded) {
    if (channels < 3) {
        horizontal_body(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, padded);
        return;
    }
    size_t y = 0;
    for (; y + 1 < rows; y += 2) { /* `padded` holds 8 bytes per pixel */
        uint8_t const *a = in + y * in_stride, *b = a + in_stride;
        if (channels == 3)
            for (size_t x = 0; x < in_width; ++x) {
                uint8_t *p = padded + 8 * x;
                p[0] = a[3 * x], p[1] = a[3 * x + 1], p[2] = a[3 * x + 2], p[3] = 0;
                p[4] = b[3 * x], p[5] = b[3 * x + 1], p[6] = b[3 * x + 2], p[7] = 0;
            }
        else
            for (size_t x = 0; x < in_width; ++x) memcpy(padded + 8 * x, a + 4 * x, 4), memcpy(padded + 8 * x + 4, b + 4 * x, 4);
        horizontal_pair_avx2(padded, out + y * out_stride, out + (y + 1) * out_stride, count, weights, channels);
    }
    if (y < rows) { /* the odd last row */
        uint8_t const *row = in + y * in_stride;
        if (channels == 3) {
            for (size_t x = 0; x < in_width; ++x)
                padded[4 * x] = row[3 * x], padded[4 * x + 1] = row[3 * x + 1], padded[4 * x + 2] = row[3 * x + 2],
                padded[4 * x + 3] = 0;
            row = padded;
        }
        horizontal_row4_avx2(row, out + y * out_stride, count, weights, channels);
    }
}
__attribute__((target("avx2"))) static void vertical_pass_avx2(uint8_t const *in, size_t in_stride, size_t row0,
                                                               uint8_t *out, size_t out_stride, size_t rows,
                                                               size_t width, weights_t const *weights, int32_t *sums) {
    vertical_body(in, in_stride, row0, out, out_stride, rows, width, weights, sums);
}

/* ---- AVX-512 VNNI: the same integer sums through 8-bit dot products ----
 *
 * A 22-bit weight w is split into three signed 8-bit digits, w = d2 * 2^16 + d1 * 2^8 + d0 (each
 * in -128..127), and vpdpbusd sums 4 products of an unsigned pixel byte by a signed digit into a
 * 32-bit lane, without saturation. The three digit sums recombine as s0 + (s1 << 8) + (s2 << 16):
 * the arithmetic is modulo 2^32, and the true sum fits in 32 bits (PIL's own int sums), so the
 * result is PIL's sum exactly, wherever an intermediate wrapped. */
#define UFORM_RESIZE_VNNI 1
#define UFORM_VNNI_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi"

/** Packs the weights into digit quads: for output `i` and group `g` of 4 taps, three 32-bit words
 *  (the 4 taps' d0 bytes, their d1 bytes, their d2 bytes) at `digits[(i * groups + g) * 3 ...]`;
 *  taps past an output's window weigh 0. False when a weight does not split (never for PIL's). */
static bool weight_digits(weights_t const *weights, size_t count, int32_t *digits) {
    size_t ksize = weights->ksize, groups = (ksize + 3) / 4;
    for (size_t i = 0; i < count; ++i) {
        int32_t const *k = weights->fixed + i * ksize;
        int n = weights->bounds[2 * i + 1];
        for (size_t g = 0; g < groups; ++g) {
            uint32_t packed[3] = {0, 0, 0};
            for (size_t t = 0; t < 4; ++t) {
                size_t tap = 4 * g + t;
                int32_t w = tap < (size_t)n ? k[tap] : 0;
                int32_t d0 = (int32_t)(((uint32_t)w + 128u) & 255u) - 128;
                int32_t w1 = (w - d0) / 256;
                int32_t d1 = (int32_t)(((uint32_t)w1 + 128u) & 255u) - 128;
                int32_t d2 = (w1 - d1) / 256;
                if (d2 < -128 || d2 > 127) return false;
                packed[0] |= (uint32_t)(uint8_t)d0 << (8 * t);
                packed[1] |= (uint32_t)(uint8_t)d1 << (8 * t);
                packed[2] |= (uint32_t)(uint8_t)d2 << (8 * t);
            }
            memcpy(digits + (i * groups + g) * 3, packed, sizeof(packed));
        }
    }
    return true;
}

/* 16 bytes of a row from byte `offset`, zeros past `row_bytes` (a masked load never touches them). */
__attribute__((target(UFORM_VNNI_TARGET))) static inline __m128i load_row16(uint8_t const *row, size_t offset,
                                                                             size_t row_bytes) {
    if (offset + 16 <= row_bytes) return _mm_loadu_si128((__m128i const *)(row + offset));
    __mmask16 mask = (__mmask16)((1u << (row_bytes - offset)) - 1u);
    return _mm_maskz_loadu_epi8(mask, row + offset);
}

/* Four rows at once, 3 or 4 channels: lane 4r + c of a 512-bit register sums row r's channel c.
 * The 4 rows are first interleaved 4 bytes at a time (`quads`: 16 bytes per 4 bytes of a row, one
 * 4 x 4 transpose of 32-bit words per 16 bytes of the rows), so a group of 4 taps (4 pixels, 12 or
 * 16 bytes of each row, plus up to 3 bytes before them in their first word) is one 64-byte load,
 * which one vpermb puts in place (the permutation depends only on the window's start modulo 4
 * bytes, so one per output), then three vpdpbusd weigh it. */
__attribute__((target(UFORM_VNNI_TARGET))) static void horizontal_pass_vnni(uint8_t const *in, size_t in_stride,
                                                                            size_t rows, size_t in_width, uint8_t *out,
                                                                            size_t out_stride, size_t count,
                                                                            weights_t const *weights, size_t channels,
                                                                            int32_t const *digits, uint8_t *quads) {
    size_t groups = (weights->ksize + 3) / 4, row_bytes = in_width * channels;
    __m512i permutations[4];
    for (size_t sub = 0; sub < 4; ++sub) {
        uint8_t index[64];
        for (size_t lane = 0; lane < 16; ++lane) {
            size_t r = lane / 4, c = lane % 4 < channels ? lane % 4 : 0;
            for (size_t t = 0; t < 4; ++t) {
                size_t byte = sub + t * channels + c; /* from the first word loaded */
                index[4 * lane + t] = (uint8_t)(16 * (byte / 4) + 4 * r + byte % 4);
            }
        }
        permutations[sub] = _mm512_loadu_si512(index);
    }
    /* The words the windows read: from the first window's to past the last one's, plus the 3 words
     * a last group's load reaches beyond (zeros past the row). */
    size_t word_first = (size_t)weights->bounds[0] * channels / 4;
    size_t word_end = ((size_t)weights->bounds[2 * (count - 1)] + (size_t)weights->bounds[2 * (count - 1) + 1]) *
                      channels / 4 + 4;
    for (size_t i = 0; i < count; ++i) { /* windows need not grow monotonically at the ends */
        size_t first = (size_t)weights->bounds[2 * i] * channels / 4;
        size_t end = ((size_t)weights->bounds[2 * i] + 4 * ((size_t)weights->bounds[2 * i + 1] + 3) / 4) * channels / 4 + 4;
        if (first < word_first) word_first = first;
        if (end > word_end) word_end = end;
    }
    __m512i const half = _mm512_set1_epi32(1 << (UFORM_PRECISION_BITS - 1)), zero = _mm512_setzero_si512();
    for (size_t y = 0; y < rows; y += 4) {
        uint8_t const *row[4];
        for (size_t j = 0; j < 4; ++j) row[j] = in + (y + j < rows ? y + j : rows - 1) * in_stride;
        for (size_t word = word_first; word < word_end; word += 4) {
            size_t offset = 4 * word;
            __m128i a = offset < row_bytes ? load_row16(row[0], offset, row_bytes) : _mm_setzero_si128();
            __m128i b = offset < row_bytes ? load_row16(row[1], offset, row_bytes) : _mm_setzero_si128();
            __m128i c = offset < row_bytes ? load_row16(row[2], offset, row_bytes) : _mm_setzero_si128();
            __m128i d = offset < row_bytes ? load_row16(row[3], offset, row_bytes) : _mm_setzero_si128();
            __m128i t0 = _mm_unpacklo_epi32(a, b), t1 = _mm_unpacklo_epi32(c, d);
            __m128i t2 = _mm_unpackhi_epi32(a, b), t3 = _mm_unpackhi_epi32(c, d);
            uint8_t *target = quads + 16 * (word - word_first);
            _mm_storeu_si128((__m128i *)target, _mm_unpacklo_epi64(t0, t1));
            _mm_storeu_si128((__m128i *)(target + 16), _mm_unpackhi_epi64(t0, t1));
            _mm_storeu_si128((__m128i *)(target + 32), _mm_unpacklo_epi64(t2, t3));
            _mm_storeu_si128((__m128i *)(target + 48), _mm_unpackhi_epi64(t2, t3));
        }
        for (size_t i = 0; i < count; ++i) {
            size_t start = (size_t)weights->bounds[2 * i] * channels;
            size_t n = (size_t)weights->bounds[2 * i + 1];
            __m512i const permutation = permutations[start % 4];
            uint8_t const *source = quads + 16 * (start / 4 - word_first);
            int32_t const *d = digits + i * groups * 3;
            __m512i s0 = zero, s1 = zero, s2 = zero;
            for (size_t g = 0; 4 * g < n; ++g, d += 3, source += 16 * channels) {
                __m512i x = _mm512_permutexvar_epi8(permutation, _mm512_loadu_si512(source));
                s0 = _mm512_dpbusd_epi32(s0, x, _mm512_set1_epi32(d[0]));
                s1 = _mm512_dpbusd_epi32(s1, x, _mm512_set1_epi32(d[1]));
                s2 = _mm512_dpbusd_epi32(s2, x, _mm512_set1_epi32(d[2]));
            }
            __m512i sum = _mm512_add_epi32(_mm512_add_epi32(s0, half),
                                           _mm512_add_epi32(_mm512_slli_epi32(s1, 8), _mm512_slli_epi32(s2, 16)));
            /* PIL's clip8: negative to 0, else >> 22 and saturate at 255 */
            sum = _mm512_srai_epi32(_mm512_max_epi32(sum, zero), UFORM_PRECISION_BITS);
            /* The pixels leave through registers: vpmovusdb to memory is slow on some cores (Zen 4). */
            __m128i bytes = _mm512_cvtusepi32_epi8(sum);
            uint32_t pixels[4] = {(uint32_t)_mm_cvtsi128_si32(bytes), (uint32_t)_mm_extract_epi32(bytes, 1),
                                  (uint32_t)_mm_extract_epi32(bytes, 2), (uint32_t)_mm_extract_epi32(bytes, 3)};
            /* 4-byte stores, the next output overwriting a padding byte, but never past a row. */
            size_t stored = channels == 4 || i + 1 < count ? 4 : channels;
            for (size_t j = 0; j < 4 && y + j < rows; ++j)
                memcpy(out + (y + j) * out_stride + i * channels, &pixels[j], stored);
        }
    }
}

/** Bytes `horizontal_pass_vnni` needs for its interleaved rows. */
static size_t vnni_quads_bytes(size_t in_width, size_t channels) { return 16 * (in_width * channels / 4 + 12); }

/* The vertical pass with the same digits: for each output row and 64 columns at a time, the 4 rows
 * of a tap group are interleaved byte by byte (vpunpck*: column c's 4 taps in one 32-bit lane, the
 * columns permuted within 128-bit lanes), weighed by vpdpbusd, and put back in column order by a
 * 4 x 4 transpose of 32-bit words. Taps past an output's window weigh 0 and read its last row. */
__attribute__((target(UFORM_VNNI_TARGET))) static void vertical_pass_vnni(uint8_t const *in, size_t in_stride,
                                                                          size_t row0, uint8_t *out,
                                                                          size_t out_stride, size_t rows,
                                                                          size_t width, weights_t const *weights,
                                                                          int32_t const *digits) {
    size_t groups = (weights->ksize + 3) / 4;
    __m512i const half = _mm512_set1_epi32(1 << (UFORM_PRECISION_BITS - 1)), zero = _mm512_setzero_si512();
    for (size_t i = 0; i < rows; ++i) {
        size_t ymin = (size_t)weights->bounds[2 * i] - row0;
        size_t n = (size_t)weights->bounds[2 * i + 1];
        int32_t const *d = digits + i * groups * 3;
        uint8_t *target = out + i * out_stride;
        for (size_t x = 0; x < width; x += 64) {
            __mmask64 mask = width - x >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (width - x)) - 1);
            __m512i sums[4][3];
            for (size_t k = 0; k < 4; ++k) sums[k][0] = sums[k][1] = sums[k][2] = zero;
            for (size_t g = 0; 4 * g < n; ++g) {
                __m512i r[4];
                for (size_t t = 0; t < 4; ++t) {
                    size_t tap = 4 * g + t < n ? 4 * g + t : n - 1;
                    r[t] = _mm512_maskz_loadu_epi8(mask, in + (ymin + tap) * in_stride + x);
                }
                __m512i low01 = _mm512_unpacklo_epi8(r[0], r[1]), high01 = _mm512_unpackhi_epi8(r[0], r[1]);
                __m512i low23 = _mm512_unpacklo_epi8(r[2], r[3]), high23 = _mm512_unpackhi_epi8(r[2], r[3]);
                __m512i quads[4] = {_mm512_unpacklo_epi16(low01, low23), _mm512_unpackhi_epi16(low01, low23),
                                    _mm512_unpacklo_epi16(high01, high23), _mm512_unpackhi_epi16(high01, high23)};
                __m512i w0 = _mm512_set1_epi32(d[3 * g]), w1 = _mm512_set1_epi32(d[3 * g + 1]),
                        w2 = _mm512_set1_epi32(d[3 * g + 2]);
                for (size_t k = 0; k < 4; ++k) {
                    sums[k][0] = _mm512_dpbusd_epi32(sums[k][0], quads[k], w0);
                    sums[k][1] = _mm512_dpbusd_epi32(sums[k][1], quads[k], w1);
                    sums[k][2] = _mm512_dpbusd_epi32(sums[k][2], quads[k], w2);
                }
            }
            __m128i b[4]; /* b[k]'s word L: columns 16 L + 4 k ... + 3 */
            for (size_t k = 0; k < 4; ++k) {
                __m512i sum = _mm512_add_epi32(_mm512_add_epi32(sums[k][0], half),
                                               _mm512_add_epi32(_mm512_slli_epi32(sums[k][1], 8),
                                                                _mm512_slli_epi32(sums[k][2], 16)));
                sum = _mm512_srai_epi32(_mm512_max_epi32(sum, zero), UFORM_PRECISION_BITS);
                b[k] = _mm512_cvtusepi32_epi8(sum);
            }
            __m128i t0 = _mm_unpacklo_epi32(b[0], b[1]), t1 = _mm_unpacklo_epi32(b[2], b[3]);
            __m128i t2 = _mm_unpackhi_epi32(b[0], b[1]), t3 = _mm_unpackhi_epi32(b[2], b[3]);
            __m512i row = _mm512_castsi128_si512(_mm_unpacklo_epi64(t0, t1));
            row = _mm512_inserti32x4(row, _mm_unpackhi_epi64(t0, t1), 1);
            row = _mm512_inserti32x4(row, _mm_unpacklo_epi64(t2, t3), 2);
            row = _mm512_inserti32x4(row, _mm_unpackhi_epi64(t2, t3), 3);
            _mm512_mask_storeu_epi8(target + x, mask, row);
        }
    }
}
#endif

/* Which vector paths may run: 2 all (AVX-512 VNNI, AVX2), 1 up to AVX2, 0 none (tests). */
static atomic_int uform_image_simd_level = 2;

void uform_image_use_simd(bool enabled) { atomic_store(&uform_image_simd_level, enabled ? 2 : 0); }

void uform_image_set_simd(int level) { atomic_store(&uform_image_simd_level, level < 0 ? 0 : level > 2 ? 2 : level); }

static bool use_avx2(void) {
#if defined(UFORM_RESIZE_AVX2)
    return atomic_load_explicit(&uform_image_simd_level, memory_order_relaxed) >= 1 && __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

static bool use_vnni(void) {
#if defined(UFORM_RESIZE_VNNI)
    return atomic_load_explicit(&uform_image_simd_level, memory_order_relaxed) >= 2 &&
           __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vbmi");
#else
    return false;
#endif
}

static void horizontal_pass(uint8_t const *in, size_t in_stride, size_t rows, size_t in_width, uint8_t *out,
                            size_t out_stride, size_t count, weights_t const *weights, size_t channels,
                            uint8_t *padded, int32_t *digits) {
#if defined(UFORM_RESIZE_VNNI)
    if (digits && channels >= 3 && use_vnni() && weight_digits(weights, count, digits)) {
        horizontal_pass_vnni(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, digits, padded);
        return;
    }
#else
    (void)digits;
#endif
#if defined(UFORM_RESIZE_AVX2)
    if (use_avx2()) {
        horizontal_pass_avx2(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, padded);
        return;
    }
#endif
    horizontal_pass_baseline(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, padded);
}

static void vertical_pass(uint8_t const *in, size_t in_stride, size_t row0, uint8_t *out, size_t out_stride,
                          size_t rows, size_t width, weights_t const *weights, int32_t *sums, int32_t *digits) {
#if defined(UFORM_RESIZE_VNNI)
    if (digits && use_vnni() && weight_digits(weights, rows, digits)) {
        vertical_pass_vnni(in, in_stride, row0, out, out_stride, rows, width, weights, digits);
        return;
    }
#else
    (void)digits;
#endif
#if defined(UFORM_RESIZE_AVX2)
    if (use_avx2()) {
        vertical_pass_avx2(in, in_stride, row0, out, out_stride, rows, width, weights, sums);
        return;
    }
#endif
    vertical_pass_baseline(in, in_stride, row0, out, out_stride, rows, width, weights, sums);
}

/* 16-bit grey, PIL's `ImagingResample*_16bpc`: double sums, rounded half away from zero, clipped. */
static inline uint16_t round_clip16(double sum) {
    int value = (int)(sum >= 0.0 ? sum + 0.5F : sum - 0.5F);
    return value <= 0 ? 0 : value >= 65535 ? 65535 : (uint16_t)value;
}

static void horizontal_pass16(uint8_t const *in, size_t in_stride, size_t rows, uint8_t *out, size_t out_stride,
                              size_t count, weights_t const *weights) {
    for (size_t y = 0; y < rows; ++y) {
        uint8_t const *row = in + y * in_stride;
        for (size_t i = 0; i < count; ++i) {
            double const *k = weights->doubles + i * weights->ksize;
            int xmin = weights->bounds[2 * i], n = weights->bounds[2 * i + 1];
            double sum = 0.0;
            for (int x = 0; x < n; ++x) {
                uint16_t v;
                memcpy(&v, row + 2 * (size_t)(x + xmin), 2);
                sum += v * k[x];
            }
            uint16_t v = round_clip16(sum);
            memcpy(out + y * out_stride + 2 * i, &v, 2);
        }
    }
}

static void vertical_pass16(uint8_t const *in, size_t in_stride, size_t row0, uint8_t *out, size_t out_stride,
                            size_t rows, size_t width, weights_t const *weights) {
    for (size_t i = 0; i < rows; ++i) {
        double const *k = weights->doubles + i * weights->ksize;
        size_t ymin = (size_t)weights->bounds[2 * i] - row0;
        int n = weights->bounds[2 * i + 1];
        for (size_t x = 0; x < width; ++x) {
            double sum = 0.0;
            for (int y = 0; y < n; ++y) {
                uint16_t v;
                memcpy(&v, in + (ymin + (size_t)y) * in_stride + 2 * x, 2);
                sum += v * k[y];
            }
            uint16_t v = round_clip16(sum);
            memcpy(out + i * out_stride + 2 * x, &v, 2);
        }
    }
}

/* PIL's MULDIV255 and the RGBa/La round trip PIL's resize makes for images with alpha. */
static inline uint8_t muldiv255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

static inline uint8_t unpremultiply(unsigned value, unsigned alpha) {
    if (alpha == 0 || alpha == 255) return (uint8_t)value;
    unsigned v = (255 * value) / alpha;
    return v > 255 ? 255 : (uint8_t)v;
}

void uform_image_row_to_rgb(uform_image_mode_t mode, uint8_t const *in, size_t width, uint8_t *rgb) {
    switch (mode) {
    case uform_image_mode_rgb_k:
    case uform_image_mode_palette_k: memcpy(rgb, in, 3 * width); break;
    case uform_image_mode_l_k:
    case uform_image_mode_bilevel_k:
        for (size_t x = 0; x < width; ++x) rgb[3 * x] = rgb[3 * x + 1] = rgb[3 * x + 2] = in[x];
        break;
    case uform_image_mode_la_k:
        for (size_t x = 0; x < width; ++x) rgb[3 * x] = rgb[3 * x + 1] = rgb[3 * x + 2] = in[2 * x];
        break;
    case uform_image_mode_rgba_k:
        for (size_t x = 0; x < width; ++x)
            rgb[3 * x] = in[4 * x], rgb[3 * x + 1] = in[4 * x + 1], rgb[3 * x + 2] = in[4 * x + 2];
        break;
    case uform_image_mode_cmyk_k:
        for (size_t x = 0; x < width; ++x) {
            int nk = 255 - in[4 * x + 3];
            for (int c = 0; c < 3; ++c) {
                int v = nk - muldiv255(in[4 * x + c], (unsigned)nk);
                rgb[3 * x + c] = (uint8_t)(v <= 0 ? 0 : v);
            }
        }
        break;
    case uform_image_mode_i16_k: /* PIL's I16_RGB clips, it does not scale */
        for (size_t x = 0; x < width; ++x) {
            uint16_t v;
            memcpy(&v, in + 2 * x, 2);
            rgb[3 * x] = rgb[3 * x + 1] = rgb[3 * x + 2] = v > 255 ? 255 : (uint8_t)v;
        }
        break;
    }
}

static size_t round_half_even_half(size_t difference) {
    size_t half = difference / 2;
    if (difference % 2 && half % 2) ++half; /* k + 0.5 goes to the even one of k, k + 1 */
    return half;
}

uform_status_t uform_image_geometry(size_t width, size_t height, size_t side, size_t *resized_width,
                                    size_t *resized_height, size_t *left, size_t *top) {
    if (side == 0 || side > UFORM_IMAGE_MAX_RESIZED_SIDE)
        return uform_fail(uform_status_invalid_argument_k, "image: a side of %zu pixels (1 to %zu)", side,
                          UFORM_IMAGE_MAX_RESIZED_SIDE);
    size_t shorter = width <= height ? width : height, longer = width <= height ? height : width;
    if (shorter == 0) return uform_fail(uform_status_invalid_argument_k, "image: %zu x %zu pixels", width, height);
    /* torchvision: int(side * long / short) in double precision; exact below 2^53. */
    double product = (double)side * (double)longer;
    if (product > (double)UFORM_IMAGE_MAX_RESIZED_SIDE * (double)shorter)
        return uform_fail(uform_status_limit_exceeded_k,
                          "image: resizing %zu x %zu pixels to a shorter side of %zu makes the longer side pass %zu "
                          "pixels",
                          width, height, side, UFORM_IMAGE_MAX_RESIZED_SIDE);
    size_t resized_long = (size_t)(product / (double)shorter);
    size_t w = width <= height ? side : resized_long, h = width <= height ? resized_long : side;
    *resized_width = w, *resized_height = h;
    *left = round_half_even_half(w - side);
    *top = round_half_even_half(h - side);
    return uform_status_ok_k;
}

/* PIL's nearest-neighbour scaling (ImagingScaleAffine): positions accumulate in double precision. */
static void nearest_crop(uform_pixels_t const *pixels, size_t resized_width, size_t resized_height, size_t left,
                         size_t top, size_t side, uint8_t *out, size_t bytes) {
    double step_x = (double)(float)pixels->width / (double)resized_width;
    double step_y = (double)(float)pixels->height / (double)resized_height;
    double xo = step_x * 0.5, yo = step_y * 0.5;
    for (size_t y = 0; y < top; ++y) yo += step_y;
    for (size_t x = 0; x < left; ++x) xo += step_x;
    for (size_t i = 0; i < side; ++i, yo += step_y) {
        long yi = yo < 0.0 ? -1 : (long)yo;
        uint8_t *row = out + i * side * bytes;
        if (yi < 0 || (size_t)yi >= pixels->height) {
            memset(row, 0, side * bytes);
            continue;
        }
        uint8_t const *in = pixels->data + (size_t)yi * pixels->stride;
        double x = xo;
        for (size_t j = 0; j < side; ++j, x += step_x) {
            long xi = x < 0.0 ? -1 : (long)x;
            if (xi < 0 || (size_t)xi >= pixels->width) memset(row + j * bytes, 0, bytes);
            else memcpy(row + j * bytes, in + (size_t)xi * bytes, bytes);
        }
    }
}

uform_status_t uform_image_region(size_t width, size_t height, size_t side, uform_image_scratch_t *scratch, size_t *x0,
                                  size_t *x1, size_t *y0, size_t *y1) {
    size_t resized_width = 0, resized_height = 0, left = 0, top = 0;
    uform_status_t status = uform_image_geometry(width, height, side, &resized_width, &resized_height, &left, &top);
    if (status != uform_status_ok_k) return status;
    *x0 = left, *x1 = left + side, *y0 = top, *y1 = top + side;
    if (resized_width == width && resized_height == height) return uform_status_ok_k;
    weights_t weights;
    if (resized_height != height) {
        status = compute_weights(height, resized_height, top, side, scratch, UFORM_SCRATCH_VERTICAL, &weights);
        if (status != uform_status_ok_k) return status;
        *y0 = (size_t)weights.bounds[0];
        *y1 = (size_t)weights.bounds[2 * (side - 1)] + (size_t)weights.bounds[2 * (side - 1) + 1];
    }
    if (resized_width != width) {
        status = compute_weights(width, resized_width, left, side, scratch, UFORM_SCRATCH_HORIZONTAL, &weights);
        if (status != uform_status_ok_k) return status;
        *x0 = (size_t)weights.bounds[0];
        *x1 = (size_t)weights.bounds[2 * (side - 1)] + (size_t)weights.bounds[2 * (side - 1) + 1];
    }
    return uform_status_ok_k;
}

uform_status_t uform_image_resize_crop(uform_pixels_t const *pixels, size_t side, uform_image_scratch_t *scratch,
                                       uint8_t *rgb) {
    if (!pixels || !scratch || !rgb)
        return uform_fail(uform_status_invalid_argument_k, "image: NULL %s",
                          !pixels ? "pixels" : !scratch ? "scratch" : "output");
    /* A decoded region stands in the full image at (x0, y0); geometry and weights are the full
     * image's, reads are shifted into the region. */
    size_t full_width = pixels->full_width ? pixels->full_width : pixels->width;
    size_t full_height = pixels->full_width ? pixels->full_height : pixels->height;
    size_t x0 = pixels->full_width ? pixels->x0 : 0, y0 = pixels->full_width ? pixels->y0 : 0;
    size_t resized_width = 0, resized_height = 0, left = 0, top = 0;
    uform_status_t status =
        uform_image_geometry(full_width, full_height, side, &resized_width, &resized_height, &left, &top);
    if (status != uform_status_ok_k) return status;
    uform_image_mode_t mode = pixels->mode;
    size_t bytes = uform_image_mode_bytes(mode);
    size_t crop_stride = side * bytes;
    uint8_t *crop = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_CROP, crop_stride * side);
    if (!crop) return uform_fail(uform_status_out_of_memory_k, "image: no memory for a %zu-pixel crop", side);

    bool need_horizontal = resized_width != full_width, need_vertical = resized_height != full_height;
    bool alpha = mode == uform_image_mode_la_k || mode == uform_image_mode_rgba_k;
    if (!need_horizontal && !need_vertical) {
        if (left < x0 || top < y0 || left + side > x0 + pixels->width || top + side > y0 + pixels->height)
            return uform_fail(uform_status_invalid_argument_k, "image: the decoded region lacks the crop");
        /* PIL copies an image already of the size; no premultiplication round trip either. */
        for (size_t y = 0; y < side; ++y)
            uform_image_row_to_rgb(mode, pixels->data + (top - y0 + y) * pixels->stride + (left - x0) * bytes, side,
                                   rgb + y * side * 3);
        return uform_status_ok_k;
    }
    if ((mode == uform_image_mode_bilevel_k || mode == uform_image_mode_palette_k) && pixels->full_width)
        return uform_fail(uform_status_invalid_argument_k, "image: nearest-neighbour modes are decoded whole");
    if (mode == uform_image_mode_bilevel_k || mode == uform_image_mode_palette_k) {
        nearest_crop(pixels, resized_width, resized_height, left, top, side, crop, bytes);
    } else {
        weights_t vertical = {0}, horizontal = {0};
        size_t row_first = top, row_last = top + side; /* input rows the vertical pass reads */
        if (need_vertical) {
            status = compute_weights(full_height, resized_height, top, side, scratch, UFORM_SCRATCH_VERTICAL,
                                     &vertical);
            if (status != uform_status_ok_k) return status;
            row_first = (size_t)vertical.bounds[0];
            row_last = (size_t)vertical.bounds[2 * (side - 1)] + (size_t)vertical.bounds[2 * (side - 1) + 1];
        }
        if (need_horizontal) {
            status = compute_weights(full_width, resized_width, left, side, scratch, UFORM_SCRATCH_HORIZONTAL,
                                     &horizontal);
            if (status != uform_status_ok_k) return status;
            if ((size_t)horizontal.bounds[0] < x0 ||
                (size_t)horizontal.bounds[2 * (side - 1)] + (size_t)horizontal.bounds[2 * (side - 1) + 1] >
                    x0 + pixels->width)
                return uform_fail(uform_status_invalid_argument_k, "image: the decoded region lacks columns");
            for (size_t i = 0; i < side; ++i) horizontal.bounds[2 * i] -= (int)x0;
        }
        if (row_first < y0 || row_last > y0 + pixels->height)
            return uform_fail(uform_status_invalid_argument_k, "image: the decoded region lacks rows");
        size_t rows = row_last - row_first;
        /* The input rows, premultiplied for LA and RGBA (PIL's La and RGBa): LA keeps grey and alpha,
         * PIL's La computing only bands 0 and 3. */
        uint8_t const *source = pixels->data + (row_first - y0) * pixels->stride;
        size_t source_stride = pixels->stride;
        if (alpha) {
            size_t row_bytes = pixels->width * bytes;
            uint8_t *premultiplied = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_RAW, rows * row_bytes);
            if (!premultiplied) return uform_fail(uform_status_out_of_memory_k, "image: no memory to resize");
            for (size_t y = 0; y < rows; ++y) {
                uint8_t const *in = source + y * source_stride;
                uint8_t *out = premultiplied + y * row_bytes;
                for (size_t x = 0; x < pixels->width; ++x) {
                    unsigned a = in[x * bytes + bytes - 1];
                    for (size_t c = 0; c + 1 < bytes; ++c) out[x * bytes + c] = muldiv255(in[x * bytes + c], a);
                    out[x * bytes + bytes - 1] = (uint8_t)a;
                }
            }
            source = premultiplied, source_stride = row_bytes;
        }
        /* Horizontal pass: the needed rows, the crop's columns only. */
        uint8_t const *columns = source; /* without a horizontal pass, the crop's columns */
        size_t columns_stride = source_stride;
        if (!need_horizontal) {
            if (left < x0 || left + side > x0 + pixels->width)
                return uform_fail(uform_status_invalid_argument_k, "image: the decoded region lacks columns");
            columns = source + (left - x0) * bytes;
        } else {
            uint8_t *temporary = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_ROWS, rows * crop_stride);
            /* AVX2: two rows of 4 bytes a pixel; VNNI: four rows interleaved (see `vnni_quads_bytes`). */
            size_t padded_bytes = pixels->width * 8;
#if defined(UFORM_RESIZE_VNNI)
            if (vnni_quads_bytes(pixels->width, bytes) > padded_bytes) padded_bytes = vnni_quads_bytes(pixels->width, bytes);
#endif
            uint8_t *padded = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_PADDED, padded_bytes);
            int32_t *digits = uform_image_scratch_reserve(
                scratch, UFORM_SCRATCH_DIGITS, side * ((horizontal.ksize + 3) / 4) * 3 * sizeof(int32_t));
            if (!temporary || !padded || !digits)
                return uform_fail(uform_status_out_of_memory_k, "image: no memory to resize");
            if (mode == uform_image_mode_i16_k)
                horizontal_pass16(source, source_stride, rows, temporary, crop_stride, side, &horizontal);
            else
                horizontal_pass(source, source_stride, rows, pixels->width, temporary, crop_stride, side, &horizontal,
                                bytes, padded, digits);
            columns = temporary, columns_stride = crop_stride;
        }
        if (need_vertical) {
            int32_t *sums = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_SUMS, crop_stride * sizeof(int32_t));
            int32_t *digits = uform_image_scratch_reserve(
                scratch, UFORM_SCRATCH_VERTICAL_DIGITS, side * ((vertical.ksize + 3) / 4) * 3 * sizeof(int32_t));
            if (!sums || !digits) return uform_fail(uform_status_out_of_memory_k, "image: no memory to resize");
            if (mode == uform_image_mode_i16_k)
                vertical_pass16(columns, columns_stride, row_first, crop, crop_stride, side, side, &vertical);
            else
                vertical_pass(columns, columns_stride, row_first, crop, crop_stride, side, crop_stride, &vertical,
                              sums, digits);
        } else {
            for (size_t y = 0; y < side; ++y) memcpy(crop + y * crop_stride, columns + y * columns_stride, crop_stride);
        }
        if (alpha)
            for (size_t i = 0; i < side * side; ++i) {
                uint8_t *p = crop + i * bytes;
                unsigned a = p[bytes - 1];
                for (size_t c = 0; c + 1 < bytes; ++c) p[c] = unpremultiply(p[c], a);
            }
    }
    for (size_t y = 0; y < side; ++y) uform_image_row_to_rgb(mode, crop + y * crop_stride, side, rgb + y * side * 3);
    return uform_status_ok_k;
}

#if defined(UFORM_RESIZE_VNNI)
/* 16 pixels at a time: one vpermb splits 48 bytes of RGB into 16 R, 16 G and 16 B, then the same
 * float32 operations as the table's, in the same order (no contraction), so the same floats. */
__attribute__((target(UFORM_VNNI_TARGET))) static size_t normalize_avx512(uint8_t const *rgb, size_t plane,
                                                                          float const mean[3], float const std[3],
                                                                          float *chw) {
    uint8_t index[64] = {0};
    for (size_t c = 0; c < 3; ++c)
        for (size_t k = 0; k < 16; ++k) index[16 * c + k] = (uint8_t)(3 * k + c);
    __m512i const split = _mm512_loadu_si512(index);
    __m512 const scale = _mm512_set1_ps(255.0f);
    __m512 const means[3] = {_mm512_set1_ps(mean[0]), _mm512_set1_ps(mean[1]), _mm512_set1_ps(mean[2])};
    __m512 const deviations[3] = {_mm512_set1_ps(std[0]), _mm512_set1_ps(std[1]), _mm512_set1_ps(std[2])};
    size_t i = 0;
    for (; i + 16 <= plane; i += 16) {
        __m512i bytes = _mm512_permutexvar_epi8(split, _mm512_maskz_loadu_epi8(((__mmask64)1 << 48) - 1, rgb + 3 * i));
        __m128i channel[3] = {_mm512_castsi512_si128(bytes), _mm512_extracti32x4_epi32(bytes, 1),
                              _mm512_extracti32x4_epi32(bytes, 2)};
        for (size_t c = 0; c < 3; ++c) {
            __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(channel[c]));
            v = _mm512_div_ps(_mm512_sub_ps(_mm512_div_ps(v, scale), means[c]), deviations[c]);
            _mm512_storeu_ps(chw + c * plane + i, v);
        }
    }
    return i;
}
#endif

void uform_image_normalize(uint8_t const *rgb, size_t side, float const mean[3], float const std[3], float *chw) {
    size_t plane = side * side, done = 0;
#if defined(UFORM_RESIZE_VNNI)
    if (use_vnni()) done = normalize_avx512(rgb, plane, mean, std, chw);
#endif
    float table[3][256];
    for (int c = 0; c < 3; ++c)
        for (int v = 0; v < 256; ++v) table[c][v] = ((float)v / 255.0f - mean[c]) / std[c];
    for (size_t i = done; i < plane; ++i) {
        chw[i] = table[0][rgb[3 * i]];
        chw[plane + i] = table[1][rgb[3 * i + 1]];
        chw[2 * plane + i] = table[2][rgb[3 * i + 2]];
    }
}

uform_status_t uform_image_preprocess(uform_image_t const *image, uform_image_preprocess_options_t const *options,
                                      uform_image_scratch_t *scratch, float *chw, uint8_t *rgb) {
    if (!image || !options || !scratch)
        return uform_fail(uform_status_invalid_argument_k, "image: NULL %s",
                          !image ? "image" : !options ? "options" : "scratch");
    if (options->side == 0 || options->side > 65536)
        return uform_fail(uform_status_invalid_argument_k, "image: a side of %zu pixels (1 to 65536)", options->side);
    for (int c = 0; c < 3; ++c)
        if (!isfinite(options->std[c]) || options->std[c] == 0.0f || !isfinite(options->mean[c]))
            return uform_fail(uform_status_invalid_argument_k, "image: normalisation of channel %d: mean %g, deviation %g",
                              c, (double)options->mean[c], (double)options->std[c]);
    uform_pixels_t pixels;
    uform_image_decode_options_t decode = options->decode;
    decode.region_side = options->side; /* decode only what the crop reads (JPEG) */
    uform_status_t status = uform_image_decode(image, &decode, scratch, &pixels);
    if (status != uform_status_ok_k) return status;
    size_t side = options->side;
    uint8_t *target = rgb ? rgb : uform_image_scratch_reserve(scratch, UFORM_SCRATCH_RGB, side * side * 3);
    if (!target) return uform_fail(uform_status_out_of_memory_k, "image: no memory for a %zu-pixel crop", side);
    status = uform_image_resize_crop(&pixels, side, scratch, target);
    if (status == uform_status_ok_k && chw) uform_image_normalize(target, side, options->mean, options->std, chw);
    return status;
}
