/**
 *  @file   attention_bf16.c
 *  @brief  One head's attention over bf16 queries, keys and values on the CPU, for the classes with
 *          native bf16: AVX-512 BF16 (`vdpbf16ps`; AMD Zen 4, Intel Sapphire Rapids and later) and
 *          AMX-BF16 tiles (`tdpbf16ps`; Sapphire Rapids and later).
 *
 *  The image pass took two calls of oneDNN's bf16 GEMM function per (image, head, block of query
 *  rows) for this: that function never reaches AMX, packs both operands on every call, and on a
 *  197-token ViT head ran at about 30 GFLOP/s, 42% of ViT-S/16's CPU pass on a Sapphire Rapids host
 *  (bench/RESULTS.md, "UFORM_CPU_PROFILE"). Here the head's keys and values are laid out once per
 *  call in the pairs both instructions multiply, in `packed`:
 *
 *      scores  [R][W] f32        R = rows rounded up to 16, W = keys rounded up to 32
 *      keys    [head / 2][W]     32-bit pairs (k[j][2p], k[j][2p + 1]); keys past `length` are 0
 *      values  [W / 2][head]     32-bit pairs (v[2q][c], v[2q + 1][c]); missing keys are 0
 *      P       [R][W] bf16       the probabilities, zeros past `length` and in rows past `rows`
 *      tails   16 query rows and 16 x 64 outputs for the last block of rows (AMX)
 *
 *  S = Q K^T in f32 (AVX-512: register blocks of 4 rows x 64 keys; AMX: tiles of 16 rows x 16 keys
 *  over 32 dimensions at a time), the softmax of scale S in f32 (exp as a power of two in 16
 *  lanes, as accurate as the kernels' Cephes exp), P rounded to bf16 (nearest even, `vcvtne2ps2bf16`), O = P V accumulated in f32 (4 x 64
 *  register blocks, or 16 x 16 tiles over 32 keys at a time): the arithmetic PyTorch's bf16
 *  attention does, as the GEMM path did.
 */
#include "kernels/kernels.h"

#include <pthread.h>     // `pthread_once`
#include <stdlib.h>      // `getenv`
#include <string.h>      // `memcpy`, `memset`
#include <sys/syscall.h> // `SYS_arch_prctl`
#include <unistd.h>      // `syscall`

static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static int mode = 2;
static void mode_read(void) {
    char const *value = getenv("UFORM_ATTENTION_BF16");
    if (value && !strcmp(value, "0")) mode = 0;
    else if (value && !strcmp(value, "avx512")) mode = 1;
}

int uform_attention_bf16_mode(void) {
    pthread_once(&mode_once, mode_read);
    return mode;
}

uform_attention_bf16_t uform_attention_bf16_for_gemm(uform_gemm_t const *gemm, uform_cpu_class_t cpu_class) {
    int const allowed = uform_attention_bf16_mode();
    if (!allowed || !uform_gemm_takes_bf16(gemm, uform_dtype_bf16_k)) return NULL;
    return uform_attention_bf16_for(gemm->native_bf16, allowed == 2 && uform_kernels_amx_bf16(cpu_class));
}

/** Where each part of `packed` lies (the file's comment); every part starts 64-byte aligned. */
typedef struct attention_layout_t {
    size_t width, rows16;
    float *scores;
    uint32_t *keys, *values;
    uint16_t *probs, *query_tail;
    float *out_tail;
    size_t bytes;
} attention_layout_t;

static attention_layout_t attention_layout(void *packed, size_t rows, size_t length, size_t head) {
    attention_layout_t layout = {.width = (length + 31) / 32 * 32, .rows16 = (rows + 15) / 16 * 16};
    size_t const w = layout.width, r = layout.rows16;
    size_t const parts[6] = {r * w * 4, head / 2 * w * 4, w / 2 * head * 4, r * w * 2, 16 * head * 2, 16 * 64 * 4};
    size_t offsets[6], at = 0;
    for (size_t i = 0; i < 6; ++i) offsets[i] = at, at += (parts[i] + 63) / 64 * 64;
    unsigned char *base = (unsigned char *)packed;
    if (base) {
        layout.scores = (float *)(void *)(base + offsets[0]);
        layout.keys = (uint32_t *)(void *)(base + offsets[1]);
        layout.values = (uint32_t *)(void *)(base + offsets[2]);
        layout.probs = (uint16_t *)(void *)(base + offsets[3]);
        layout.query_tail = (uint16_t *)(void *)(base + offsets[4]);
        layout.out_tail = (float *)(void *)(base + offsets[5]);
    }
    layout.bytes = at;
    return layout;
}

size_t uform_attention_bf16_bytes(size_t rows, size_t length, size_t head) {
    return attention_layout(NULL, rows, length, head).bytes;
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

/** For rows r < `live` of 4 (rows past them repeat the last): c[r][0 .. 16 N) (rows `c_ld` floats
 *  apart) = the sum over `steps` of the bf16 pair a_rows[r][step], broadcast, times the 16 N pairs at
 *  `b` + step `b_step` (32-bit pairs), in f32. S = Q K^T steps over the head's pairs of dimensions,
 *  O = P V over pairs of keys. */
#define PAIR_BLOCK(N, a_rows, live, steps, b, b_step, c, c_ld)                                                         \
    do {                                                                                                               \
        __m512 acc[4][N];                                                                                              \
        for (int r = 0; r < 4; ++r)                                                                                    \
            for (int t = 0; t < N; ++t) acc[r][t] = _mm512_setzero_ps();                                               \
        for (size_t step = 0; step < (steps); ++step) {                                                                \
            __m512i b_at[N];                                                                                           \
            for (int t = 0; t < N; ++t) b_at[t] = _mm512_loadu_si512((b) + step * (b_step) + 16 * t);                  \
            for (int r = 0; r < 4; ++r) {                                                                              \
                __m512i const a_pair = _mm512_set1_epi32((int)pair_at((a_rows)[r], step));                             \
                for (int t = 0; t < N; ++t)                                                                            \
                    acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)a_pair, (__m512bh)b_at[t]);                      \
            }                                                                                                          \
        }                                                                                                              \
        for (size_t r = 0; r < (live); ++r)                                                                            \
            for (int t = 0; t < N; ++t) _mm512_storeu_ps((c) + r * (c_ld) + 16 * t, acc[r][t]);                        \
    } while (0)

/** 2^t in 16 lanes: t = n + f with n the nearest integer and f in [-1/2, 1/2], 2^f by a degree-5
 *  polynomial fitted for relative error (at most 2.4e-7 evaluated in f32, as the kernels' Cephes
 *  expf), then scaled by 2^n (`vscalefps`, which also takes n below the f32 range to 0: no clamp).
 *  The softmax folds log2(e) into its scale, so exp(x) costs the reduction, six FMAs and the scale
 *  instead of Cephes' fifteen operations (1.3-1.5x per 128-key row, bench/RESULTS.md). */
TARGET static inline __m512 exp2_16(__m512 t) {
    __m512 const n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 const f = _mm512_sub_ps(t, n);
    __m512 p = _mm512_set1_ps(0.001327647129073739f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009675541892647743f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05550713092088699f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24022120237350464f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931469440460205f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
    return _mm512_scalef_ps(p, n);
}

static inline __mmask16 first16(size_t count) { return count >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << count) - 1u); }

/** A row of raw scores in place to exp(scale s - scale max), then P = exp / sum in bf16 into `probs`
 *  (`width` wide, zeros past `length`): the softmax in f32 and P's rounding to nearest even. */
TARGET static void softmax_to_bf16(float *row, size_t length, float scale, size_t width, uint16_t *probs) {
    __m512 highest = _mm512_set1_ps(-3.402823466e38f);
    for (size_t j = 0; j < length; j += 16)
        highest = _mm512_max_ps(highest, _mm512_mask_loadu_ps(highest, first16(length - j), row + j));
    /* exp(scale (s - max)) = 2^(s scale log2(e) - max scale log2(e)). */
    float const scale2 = scale * 1.44269504088896341f;
    __m512 const scaled = _mm512_set1_ps(scale2), shift = _mm512_set1_ps(-scale2 * _mm512_reduce_max_ps(highest));
    __m512 sums = _mm512_setzero_ps();
    for (size_t j = 0; j < length; j += 16) {
        __mmask16 const mask = first16(length - j);
        __m512 const e = exp2_16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, row + j), scaled, shift));
        sums = _mm512_mask_add_ps(sums, mask, sums, e);
        _mm512_mask_storeu_ps(row + j, mask, e);
    }
    __m512 const inverse = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sums));
    for (size_t j = 0; j < width; j += 32) {
        __m512 const low = _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j ? length - j : 0), row + j), inverse);
        __m512 const high =
            _mm512_mul_ps(_mm512_maskz_loadu_ps(first16(length > j + 16 ? length - j - 16 : 0), row + j + 16), inverse);
        _mm512_storeu_si512(probs + j, (__m512i)_mm512_cvtne2ps_pbh(high, low)); /* width: a multiple of 32 */
    }
}

/** keys[p][j] = (k[j][2p], k[j][2p + 1]) for j < `width`; keys past `length` are zeros. */
TARGET static void pack_keys(uint16_t const *k, size_t ld, size_t length, size_t pairs, size_t width, uint32_t *keys) {
    for (size_t j = 0; j < length; ++j)
        for (size_t p = 0; p < pairs; ++p) keys[p * width + j] = pair_at(k + j * ld, p);
    for (size_t p = 0; p < pairs; ++p)
        for (size_t j = length; j < width; ++j) keys[p * width + j] = 0;
}

/** values[q][c] = (v[2q][c], v[2q + 1][c]) for q < `width` / 2: two rows' 32 columns interleaved by
 *  one permutation each half; keys past `length` are zeros. */
TARGET static void pack_values(uint16_t const *v, size_t ld, size_t length, size_t head, size_t width, uint32_t *values) {
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
    size_t const done = (length + 1) / 2;
    memset(values + done * head, 0, (width / 2 - done) * head * sizeof(uint32_t));
}

TARGET static int attention_bf16_avx512(uint16_t const *q, uint16_t const *k, uint16_t const *v, size_t ld, size_t rows,
                                        size_t length, size_t head, float scale, void *packed, float *out,
                                        size_t out_ld) {
    if (!rows || !length || head % 32 || head > 256) return 0;
    attention_layout_t const layout = attention_layout(packed, rows, length, head);
    size_t const pairs = head / 2, w = layout.width, l16 = (length + 15) / 16 * 16;
    float *scores = layout.scores;
    uint32_t *keys = layout.keys, *values = layout.values;
    uint16_t *probs = layout.probs;
    pack_keys(k, ld, length, pairs, w, keys);
    pack_values(v, ld, length, head, w, values);

    /* S = Q K^T, 4 rows x 64 keys per block, over the keys rounded up to 16. */
    for (size_t i0 = 0; i0 < rows; i0 += 4) {
        size_t const live = rows - i0 < 4 ? rows - i0 : 4;
        uint16_t const *query_rows[4];
        for (size_t r = 0; r < 4; ++r) query_rows[r] = q + (i0 + (r < live ? r : live - 1)) * ld;
        for (size_t j0 = 0; j0 < l16; j0 += 64) {
            switch ((l16 - j0) / 16) {
            case 1: PAIR_BLOCK(1, query_rows, live, pairs, keys + j0, w, scores + i0 * w + j0, w); break;
            case 2: PAIR_BLOCK(2, query_rows, live, pairs, keys + j0, w, scores + i0 * w + j0, w); break;
            case 3: PAIR_BLOCK(3, query_rows, live, pairs, keys + j0, w, scores + i0 * w + j0, w); break;
            default: PAIR_BLOCK(4, query_rows, live, pairs, keys + j0, w, scores + i0 * w + j0, w); break;
            }
        }
    }
    for (size_t i = 0; i < rows; ++i) softmax_to_bf16(scores + i * w, length, scale, w, probs + i * w);

    /* O = P V, 4 rows x 64 columns per block. */
    for (size_t i0 = 0; i0 < rows; i0 += 4) {
        size_t const live = rows - i0 < 4 ? rows - i0 : 4;
        uint16_t const *prob_rows[4];
        for (size_t r = 0; r < 4; ++r) prob_rows[r] = probs + (i0 + (r < live ? r : live - 1)) * w;
        for (size_t c0 = 0; c0 < head; c0 += 64) {
            switch ((head - c0) / 16) {
            case 2: PAIR_BLOCK(2, prob_rows, live, w / 2, values + c0, head, out + i0 * out_ld + c0, out_ld); break;
            default: PAIR_BLOCK(4, prob_rows, live, w / 2, values + c0, head, out + i0 * out_ld + c0, out_ld); break;
            }
        }
    }
    return 1;
}

/* ---- AMX tiles ---- */

#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

/** `ldtilecfg`'s 64 bytes: palette 1, then bytes per row and rows of each tile. */
typedef struct tile_config_t {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes_per_row[16];
    uint8_t rows[16];
} tile_config_t;

/** Linux hands a process AMX's tile data only once asked (ARCH_REQ_XCOMP_PERM for XTILEDATA). */
static pthread_once_t tiles_once = PTHREAD_ONCE_INIT;
static int tiles_granted;
static void tiles_request(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    tiles_granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
}

/* The tile intrinsics of GCC are `asm` statements that do not tell the compiler they read memory:
 * every tile load is preceded by a compiler barrier, so the stores it reads (packing, the softmax,
 * the tail copies, the configuration) are made first. */
#define MEMORY_BARRIER() __asm__ __volatile__("" ::: "memory")

/** Tiles 0 .. NT-1 = 16 rows of A (tile 4, `a` + 32 k0, rows `a_stride` bytes apart) times the 16-column
 *  blocks of B at `b` + 16 t (tile 5; its rows of pairs `b_stride` bytes apart, 16 pair rows per 32
 *  of depth), over `depth` in steps of 32. */
#define TILE_PRODUCT(NT, a, a_stride, b, b_stride, b_step, depth)                                                      \
    do {                                                                                                               \
        _tile_zero(0);                                                                                                 \
        _tile_zero(1);                                                                                                 \
        if (NT == 4) {                                                                                                 \
            _tile_zero(2);                                                                                             \
            _tile_zero(3);                                                                                             \
        }                                                                                                              \
        for (size_t k0 = 0; k0 < (depth); k0 += 32) {                                                                  \
            _tile_loadd(4, (a) + k0, (a_stride));                                                                      \
            uint32_t const *b_at = (b) + (k0 / 32) * (b_step);                                                         \
            _tile_loadd(5, b_at, (b_stride));                                                                          \
            _tile_dpbf16ps(0, 4, 5);                                                                                   \
            _tile_loadd(5, b_at + 16, (b_stride));                                                                     \
            _tile_dpbf16ps(1, 4, 5);                                                                                   \
            if (NT == 4) {                                                                                             \
                _tile_loadd(5, b_at + 32, (b_stride));                                                                 \
                _tile_dpbf16ps(2, 4, 5);                                                                               \
                _tile_loadd(5, b_at + 48, (b_stride));                                                                 \
                _tile_dpbf16ps(3, 4, 5);                                                                               \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

/** Stores tiles 0 .. NT-1 (16 x 16 f32 each) side by side at `c`, rows `c_stride` bytes apart. */
#define TILE_STORE(NT, c, c_stride)                                                                                    \
    do {                                                                                                               \
        _tile_stored(0, (c), (c_stride));                                                                              \
        _tile_stored(1, (c) + 16, (c_stride));                                                                         \
        if (NT == 4) {                                                                                                 \
            _tile_stored(2, (c) + 32, (c_stride));                                                                     \
            _tile_stored(3, (c) + 48, (c_stride));                                                                     \
        }                                                                                                              \
    } while (0)

AMX_TARGET static int attention_bf16_amx(uint16_t const *q, uint16_t const *k, uint16_t const *v, size_t ld, size_t rows,
                                         size_t length, size_t head, float scale, void *packed, float *out,
                                         size_t out_ld) {
    if (!rows || !length || head % 32 || head > 256) return 0;
    pthread_once(&tiles_once, tiles_request);
    if (!tiles_granted) return attention_bf16_avx512(q, k, v, ld, rows, length, head, scale, packed, out, out_ld);
    attention_layout_t const layout = attention_layout(packed, rows, length, head);
    size_t const pairs = head / 2, w = layout.width;
    pack_keys(k, ld, length, pairs, w, layout.keys);
    pack_values(v, ld, length, head, w, layout.values);
    tile_config_t config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 6; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
    MEMORY_BARRIER();
    _tile_loadconfig(&config);

    /* S = Q K^T: 16 rows x 64 (or 32) keys per step; the last rows' queries copied, zero-padded. */
    for (size_t i0 = 0; i0 < rows; i0 += 16) {
        size_t const live = rows - i0 < 16 ? rows - i0 : 16;
        uint16_t const *a = q + i0 * ld;
        size_t a_stride = ld * 2;
        if (live < 16) {
            memset(layout.query_tail, 0, 16 * head * 2);
            for (size_t r = 0; r < live; ++r) memcpy(layout.query_tail + r * head, a + r * ld, head * 2);
            a = layout.query_tail, a_stride = head * 2;
        }
        MEMORY_BARRIER();
        for (size_t j0 = 0; j0 < w; j0 += 64) {
            float *c = layout.scores + i0 * w + j0;
            if (w - j0 >= 64) {
                TILE_PRODUCT(4, a, a_stride, layout.keys + j0, w * 4, 16 * w, head);
                TILE_STORE(4, c, w * 4);
            } else {
                TILE_PRODUCT(2, a, a_stride, layout.keys + j0, w * 4, 16 * w, head);
                TILE_STORE(2, c, w * 4);
            }
        }
    }
    for (size_t i = 0; i < rows; ++i) softmax_to_bf16(layout.scores + i * w, length, scale, w, layout.probs + i * w);
    if (layout.rows16 > rows) memset(layout.probs + rows * w, 0, (layout.rows16 - rows) * w * 2);
    MEMORY_BARRIER();

    /* O = P V: 16 rows x 64 (or 32) columns per step over the keys, 32 at a time. */
    for (size_t i0 = 0; i0 < rows; i0 += 16) {
        size_t const live = rows - i0 < 16 ? rows - i0 : 16;
        uint16_t const *a = layout.probs + i0 * w;
        for (size_t c0 = 0; c0 < head; c0 += 64) {
            size_t const columns = head - c0 >= 64 ? 64 : 32;
            float *c = live == 16 ? out + i0 * out_ld + c0 : layout.out_tail;
            size_t const c_stride = live == 16 ? out_ld * 4 : 64 * 4;
            if (columns == 64) {
                TILE_PRODUCT(4, a, w * 2, layout.values + c0, head * 4, 16 * head, w);
                TILE_STORE(4, c, c_stride);
            } else {
                TILE_PRODUCT(2, a, w * 2, layout.values + c0, head * 4, 16 * head, w);
                TILE_STORE(2, c, c_stride);
            }
            if (live < 16)
                for (size_t r = 0; r < live; ++r)
                    memcpy(out + (i0 + r) * out_ld + c0, layout.out_tail + r * 64, columns * sizeof(float));
        }
    }
    _tile_release();
    return 1;
}

uform_attention_bf16_t uform_attention_bf16_for(int avx512_bf16, int amx) {
    return amx ? attention_bf16_amx : avx512_bf16 ? attention_bf16_avx512 : NULL;
}
#else
uform_attention_bf16_t uform_attention_bf16_for(int avx512_bf16, int amx) {
    (void)avx512_bf16, (void)amx;
    return NULL;
}
#endif
