/**
 *  @file   attention_bf16.c
 *  @brief  One head's attention over bf16 queries, keys and values with AVX-512 BF16 (`vdpbf16ps`):
 *          the genoa class's `attention_bf16` (AMD Zen 4, Intel Sapphire Rapids and later).
 *
 *  The image and text passes took two calls of oneDNN's bf16 GEMM function per (sequence, head,
 *  block of query rows) for this: that function never reaches AMX, packs both operands on every
 *  call, and on a 197-token ViT head ran at about 30 GFLOP/s, 42% of ViT-S/16's CPU pass on a
 *  Sapphire Rapids host (bench/RESULTS.md, "UFORM_CPU_PROFILE"). Here the head's keys and values are
 *  laid out once per call in the pairs `vdpbf16ps` multiplies, and register blocks of 4 query rows
 *  x 64 columns accumulate in f32:
 *
 *      keys    [head / 2][L16]   32-bit pairs (k[j][2p], k[j][2p + 1]); keys past `length` are 0
 *      values  [Lp / 2][head]    32-bit pairs (v[2q][c], v[2q + 1][c]); a missing odd key is 0
 *      P       [rows][Lp]        the probabilities in bf16, a zero after an odd `length`
 *
 *  with L16 = `length` rounded up to 16 and Lp to 2. S = scale Q K^T in f32, the softmax in f32 (the
 *  kernels' Cephes exp in 16 lanes), P rounded to bf16 (nearest even, `vcvtne2ps2bf16`), O = P V in
 *  f32: the arithmetic PyTorch's bf16 attention does, as the GEMM path did.
 */
#include "kernels/kernels.h"

#include <pthread.h> // `pthread_once`
#include <stdlib.h>  // `getenv`
#include <string.h>  // `memcpy`

static pthread_once_t enabled_once = PTHREAD_ONCE_INIT;
static int enabled = 1;
static void enabled_read(void) {
    char const *value = getenv("UFORM_ATTENTION_BF16");
    enabled = !(value && value[0] == '0' && !value[1]);
}

int uform_attention_bf16_enabled(void) {
    pthread_once(&enabled_once, enabled_read);
    return enabled;
}

size_t uform_attention_bf16_bytes(size_t rows, size_t length, size_t head) {
    size_t const l16 = (length + 15) / 16 * 16, lp = (length + 1) / 2 * 2;
    return (head / 2) * l16 * 4 + (lp / 2) * head * 4 + rows * lp * 2 + 64;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/** The bf16 pair `row[2 p]`, `row[2 p + 1]` as one 32-bit word (one load, no aliasing). */
static inline uint32_t pair_at(uint16_t const *row, size_t p) {
    uint32_t value;
    memcpy(&value, row + 2 * p, sizeof value);
    return value;
}

/** S[r][j0 .. j0 + 16 NJ) = scale q_r . k_j for rows r < 4 of `q` (rows past `rows` repeat the last). */
#define QK_BLOCK(NJ)                                                                                                   \
    do {                                                                                                               \
        __m512 acc[4][NJ];                                                                                             \
        for (int r = 0; r < 4; ++r)                                                                                    \
            for (int t = 0; t < NJ; ++t) acc[r][t] = _mm512_setzero_ps();                                              \
        for (size_t p = 0; p < pairs; ++p) {                                                                           \
            __m512i keys_at[NJ];                                                                                       \
            for (int t = 0; t < NJ; ++t) keys_at[t] = _mm512_loadu_si512(keys + p * l16 + j0 + 16 * t);               \
            for (int r = 0; r < 4; ++r) {                                                                              \
                __m512i const query = _mm512_set1_epi32((int)pair_at(query_rows[r], p));                                        \
                for (int t = 0; t < NJ; ++t)                                                                           \
                    acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)query, (__m512bh)keys_at[t]);                   \
            }                                                                                                          \
        }                                                                                                              \
        for (size_t r = 0; r < live; ++r)                                                                              \
            for (int t = 0; t < NJ; ++t)                                                                               \
                _mm512_storeu_ps(scores + (i0 + r) * l16 + j0 + 16 * t, _mm512_mul_ps(acc[r][t], scaled));             \
    } while (0)

/** O[r][c0 .. c0 + 16 ND) = sum over keys of P[r][j] v[j] for rows r < 4 (as above). */
#define PV_BLOCK(ND)                                                                                                   \
    do {                                                                                                               \
        __m512 acc[4][ND];                                                                                             \
        for (int r = 0; r < 4; ++r)                                                                                    \
            for (int t = 0; t < ND; ++t) acc[r][t] = _mm512_setzero_ps();                                              \
        for (size_t q = 0; q < lp / 2; ++q) {                                                                          \
            __m512i values_at[ND];                                                                                     \
            for (int t = 0; t < ND; ++t) values_at[t] = _mm512_loadu_si512(values + q * head + c0 + 16 * t);          \
            for (int r = 0; r < 4; ++r) {                                                                              \
                __m512i const weight = _mm512_set1_epi32((int)pair_at(prob_rows[r], q));                                        \
                for (int t = 0; t < ND; ++t)                                                                           \
                    acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)weight, (__m512bh)values_at[t]);                \
            }                                                                                                          \
        }                                                                                                              \
        for (size_t r = 0; r < live; ++r)                                                                              \
            for (int t = 0; t < ND; ++t) _mm512_storeu_ps(out + (i0 + r) * out_ld + c0 + 16 * t, acc[r][t]);          \
    } while (0)

/** exp(x) in 16 lanes: the kernels' Cephes expf (fused.inc's `exp_lane`, the same constants and
 *  clamp to [-87, 88]), relative error about 2e-7. */
TARGET static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 const n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 const y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(y, n);
}

static inline __mmask16 first16(size_t count) { return count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u); }
static inline __mmask32 first32(size_t count) { return count >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << count) - 1u); }

/** A row of scores in place to exp(s - max), then P = exp / sum in bf16 into `probs` (`lp` wide,
 *  zeros past `length`): the softmax in f32 and P's rounding to nearest even. */
TARGET static void softmax_to_bf16(float *row, size_t length, size_t lp, uint16_t *probs) {
    __m512 highest = _mm512_set1_ps(-3.402823466e38f);
    for (size_t j = 0; j < length; j += 16)
        highest = _mm512_max_ps(highest, _mm512_mask_loadu_ps(highest, first16(length - j), row + j));
    __m512 const top = _mm512_set1_ps(_mm512_reduce_max_ps(highest));
    __m512 sums = _mm512_setzero_ps();
    for (size_t j = 0; j < length; j += 16) {
        __mmask16 const mask = first16(length - j);
        __m512 const e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, row + j), top));
        sums = _mm512_mask_add_ps(sums, mask, sums, e);
        _mm512_mask_storeu_ps(row + j, mask, e);
    }
    __m512 const inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sums));
    for (size_t j = 0; j < lp; j += 32) {
        __m512 const low = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j ? length - j : 0), row + j), inverse);
        __m512 const high =
            _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j + 16 ? length - j - 16 : 0), row + j + 16), inverse);
        _mm512_mask_storeu_epi16(probs + j, first32(lp - j), (__m512i)_mm512_cvtne2ps_pbh(high, low));
    }
}

TARGET static void pack_keys(uint16_t const *k, size_t ld, size_t length, size_t pairs, size_t l16, uint32_t *keys) {
    for (size_t j = 0; j < length; ++j)
        for (size_t p = 0; p < pairs; ++p) keys[p * l16 + j] = pair_at(k + j * ld, p);
    for (size_t p = 0; p < pairs; ++p)
        for (size_t j = length; j < l16; ++j) keys[p * l16 + j] = 0;
}

/** values[q][c] = (v[2q][c], v[2q + 1][c]): two rows' 32 columns interleaved by one permutation each half. */
TARGET static void pack_values(uint16_t const *v, size_t ld, size_t length, size_t head, uint32_t *values) {
    __m512i const low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                         37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    __m512i const high = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,
                                          22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    for (size_t q = 0; 2 * q < length; ++q) {
        uint16_t const *even = v + 2 * q * ld, *odd = 2 * q + 1 < length ? even + ld : NULL;
        uint32_t *target = values + q * head;
        for (size_t c = 0; c < head; c += 32) {
            __m512i const a = _mm512_loadu_si512(even + c);
            __m512i const b = odd ? _mm512_loadu_si512(odd + c) : _mm512_setzero_si512();
            _mm512_storeu_si512(target + c, _mm512_permutex2var_epi16(a, low, b));
            _mm512_storeu_si512(target + c + 16, _mm512_permutex2var_epi16(a, high, b));
        }
    }
}

TARGET static int attention_bf16_avx512(uint16_t const *q, uint16_t const *k,
                                        uint16_t const *v, size_t ld, size_t rows, size_t length, size_t head,
                                        float scale, float *scores, void *packed, float *out, size_t out_ld) {
    if (!rows || !length || head % 32 || head > 256) return 0;
    size_t const pairs = head / 2, l16 = (length + 15) / 16 * 16, lp = (length + 1) / 2 * 2;
    uint32_t *keys = (uint32_t *)packed;
    uint32_t *values = keys + pairs * l16;
    uint16_t *probs = (uint16_t *)(values + (lp / 2) * head);
    pack_keys(k, ld, length, pairs, l16, keys);
    pack_values(v, ld, length, head, values);
    __m512 const scaled = _mm512_set1_ps(scale);

    /* S = scale Q K^T, 4 rows x 64 keys per block. */
    for (size_t i0 = 0; i0 < rows; i0 += 4) {
        size_t const live = rows - i0 < 4 ? rows - i0 : 4;
        uint16_t const *query_rows[4];
        for (size_t r = 0; r < 4; ++r) query_rows[r] = q + (i0 + (r < live ? r : live - 1)) * ld;
        for (size_t j0 = 0; j0 < l16; j0 += 64) {
            switch ((l16 - j0) / 16) {
            case 1: QK_BLOCK(1); break;
            case 2: QK_BLOCK(2); break;
            case 3: QK_BLOCK(3); break;
            default: QK_BLOCK(4); break;
            }
        }
    }
    for (size_t i = 0; i < rows; ++i) softmax_to_bf16(scores + i * l16, length, lp, probs + i * lp);

    /* O = P V, 4 rows x 64 columns per block. */
    for (size_t i0 = 0; i0 < rows; i0 += 4) {
        size_t const live = rows - i0 < 4 ? rows - i0 : 4;
        uint16_t const *prob_rows[4];
        for (size_t r = 0; r < 4; ++r) prob_rows[r] = probs + (i0 + (r < live ? r : live - 1)) * lp;
        for (size_t c0 = 0; c0 < head; c0 += 64) {
            switch ((head - c0) / 16) {
            case 2: PV_BLOCK(2); break;
            default: PV_BLOCK(4); break;
            }
        }
    }
    return 1;
}

uform_attention_bf16_t uform_attention_bf16_for(int avx512_bf16) {
    return avx512_bf16 ? attention_bf16_avx512 : NULL;
}
#else
uform_attention_bf16_t uform_attention_bf16_for(int avx512_bf16) {
    (void)avx512_bf16;
    return NULL;
}
#endif
