/**
 *  @file   resize_x86.c
 *  @brief  The x86 vector passes of the PIL-exact resize (resize.c chooses them at run time): AVX2
 *          and AVX-512 VNNI, each giving the portable passes' integer sums exactly, and the
 *          AVX-512 normalisation. Compiled with `-ffp-contract=off`, as resize.c.
 */
#include "image/resize_private.h"

#if defined(UFORM_RESIZE_AVX2)
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

__attribute__((target("avx2"))) void uform_resize_horizontal_avx2(uint8_t const *in, size_t in_stride, size_t rows,
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
__attribute__((target("avx2"))) void uform_resize_vertical_avx2(uint8_t const *in, size_t in_stride, size_t row0,
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

/** Packs the weights into digit quads: for output `i` and group `g` of 4 taps, three 32-bit words
 *  (the 4 taps' d0 bytes, their d1 bytes, their d2 bytes) at `digits[(i * groups + g) * 3 ...]`;
 *  taps past an output's window weigh 0. False when a weight does not split (never for PIL's). */
bool uform_resize_weight_digits(weights_t const *weights, size_t count, int32_t *digits) {
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
__attribute__((target(UFORM_VNNI_TARGET))) void uform_resize_horizontal_vnni(uint8_t const *in, size_t in_stride,
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

/** Bytes `uform_resize_horizontal_vnni` needs for its interleaved rows. */
size_t uform_resize_vnni_quads_bytes(size_t in_width, size_t channels) { return 16 * (in_width * channels / 4 + 12); }

/* The vertical pass with the same digits: for each output row and 64 columns at a time, the 4 rows
 * of a tap group are interleaved byte by byte (vpunpck*: column c's 4 taps in one 32-bit lane, the
 * columns permuted within 128-bit lanes), weighed by vpdpbusd, and put back in column order by a
 * 4 x 4 transpose of 32-bit words. Taps past an output's window weigh 0 and read its last row. */
__attribute__((target(UFORM_VNNI_TARGET))) void uform_resize_vertical_vnni(uint8_t const *in, size_t in_stride,
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

#if defined(UFORM_RESIZE_VNNI)
/* 16 pixels at a time: one vpermb splits 48 bytes of RGB into 16 R, 16 G and 16 B, then the same
 * float32 operations as the table's, in the same order (no contraction), so the same floats. */
__attribute__((target(UFORM_VNNI_TARGET))) size_t uform_resize_normalize_avx512(uint8_t const *rgb, size_t plane,
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
