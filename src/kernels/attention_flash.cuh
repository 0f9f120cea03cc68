/**
 *  @file   attention_flash.cuh
 *  @brief  The text (and image) towers' attention on tensor cores, FlashAttention-2 style on
 *          `mma.sync.aligned.m16n8k16` (sm_80 and later: Ampere, Ada, Hopper), bf16 and f16 with f32
 *          accumulation. Included by text_gpu.cuh, which instantiates `attention_flash<T, HEAD>` as
 *          `uform_text_attention_flash<HEAD>_<dtype>`; `text_vram_attention` (text_vram_launch.c)
 *          picks the geometry.
 *
 *  The warp-level primitives (mma, ldmatrix, cp.async, shuffles, barriers) are the only device-specific
 *  code: with UFORM_FLASH_EMULATION defined, the includer supplies them instead, and
 *  test/gpu/flash_emulation.cpp runs this very kernel on the CPU, one thread per lane, against a
 *  plain attention (test/gpu/flash_emulation.sh).
 */
#ifndef UFORM_KERNELS_ATTENTION_FLASH_CUH
#define UFORM_KERNELS_ATTENTION_FLASH_CUH

namespace uform_text {

/** Keys per tile staged in shared memory (and the width of a score strip a warp holds). */
constexpr int flash_keys = 64;

#ifndef UFORM_FLASH_EMULATION
#define UFORM_FLASH_SHARED(name) extern __shared__ __align__(128) unsigned char name[]

template <typename T> struct flash_pair;
template <> struct flash_pair<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(unsigned *)&v;
    }
    static __device__ __forceinline__ void mma(float (&d)[4], unsigned const (&a)[4], unsigned b0, unsigned b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct flash_pair<__half> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *(unsigned *)&v;
    }
    static __device__ __forceinline__ void mma(float (&d)[4], unsigned const (&a)[4], unsigned b0, unsigned b1) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], void const *shared) {
    unsigned const address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], void const *shared) {
    unsigned const address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
/** 16 bytes from global to shared without the register file; `bytes` 0 writes zeros (rows past the text). */
__device__ __forceinline__ void copy16_async(void *shared, void const *global, int bytes) {
    unsigned const address = (unsigned)__cvta_generic_to_shared(shared);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(bytes));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int pending> __device__ __forceinline__ void copy_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}
/** 2^x on the special-function unit, subnormal results flushed to zero (probabilities under 2^-126
 *  weigh nothing beside the row's largest, which is 1). */
__device__ __forceinline__ float flash_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif // UFORM_FLASH_EMULATION

/** Attention on tensor cores, FlashAttention-2 style, for `HEAD`-wide heads (32, 64, 128).
 *
 *  Grid: x = (text * (heads / group) + head group) * chunks + query chunk, so the blocks that read
 *  the same keys and values run side by side and find them in L2; block: `warps` = group x chunk
 *  warps. Warp w serves head `group_index * group + w / chunk` and the 16 query rows
 *  `(query chunk * chunk + w % chunk) * 16` of the text (rows past its end are computed from zeros and never
 *  stored; a block whose first row is past the text's end returns at once). Q stays in registers as
 *  mma A fragments for the whole pass. The block stages keys and values of its heads in shared memory
 *  `flash_keys` rows at a time (cp.async; rows past the text are zeros): with `resident` 0 in two
 *  buffers (the next tile loads while this one computes, two barriers a tile); with `resident` 1 every
 *  tile of the text in a buffer of its own, all loaded up front, then one barrier, after which the
 *  warps run without waiting for each other. Each warp computes S = Q K^T for `STEP` keys of the tile at a
 *  time (16 x STEP in f32 registers; 32 keeps a third fewer registers live than 64 for 32-wide
 *  heads, so more blocks fit an SM), masks keys past the text, keeps the running row maximum and sum (online softmax,
 *  base 2 with `scale log2 e` folded in), rescales its O accumulator and adds P V with P taken from
 *  the S registers as the A operand (no trip through shared memory). O / sum goes out as T.
 *  Padding never changes a text's result: every text reads only its own rows.
 *  Shared bytes: buffers (resident: the tiles of the chunk's longest text; else 1, or 2 when it spans
 *  more than one tile) x group x 2 (K, V) x flash_keys x (HEAD + 8) x sizeof(T). */
template <typename T, int HEAD, int STEP = flash_keys>
__device__ void attention_flash(T *context, T const *qkv, int const *offsets, int heads, float scale, int group,
                                int chunks, int resident) {
    static_assert(HEAD % 16 == 0 && HEAD <= 128, "heads of 16 .. 128 in steps of 16");
    static_assert(STEP % 16 == 0 && flash_keys % STEP == 0, "softmax steps of 16-key multiples dividing a tile");
    constexpr int ld = HEAD + 8;              // shared row pitch: 8 rows of an ldmatrix hit distinct banks
    constexpr int vectors = HEAD / 8;         // 16-byte pieces per row
    constexpr int tile_elements = flash_keys * ld;
    UFORM_FLASH_SHARED(raw);
    T *const shared = (T *)raw;
    int const groups = heads / group, query_chunk = (int)blockIdx.x % chunks, pair = (int)blockIdx.x / chunks;
    int const text = pair / groups, group_index = pair % groups;
    int const warps = blockDim.x / 32, chunk = warps / group, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    int const first = offsets[text], length = offsets[text + 1] - first;
    if (query_chunk * chunk * 16 >= length) return;
    int const hidden = heads * HEAD, stride = 3 * hidden;
    int const h_local = warp / chunk, h = group_index * group + h_local;
    int const row0 = (query_chunk * chunk + warp % chunk) * 16;
    bool const busy = row0 < length;
    int const tiles = (length + flash_keys - 1) / flash_keys;
    int const g = lane >> 2, t = lane & 3;

    /* Stage tile `tile` of every head of the group into buffer `buffer`: [buffer][head][K|V][row][ld]. */
    auto stage = [&](int tile, int buffer) {
        int const pieces = group * flash_keys * vectors;
        for (int i = threadIdx.x; i < pieces; i += blockDim.x) {
            int const c = (i % vectors) * 8, r = (i / vectors) % flash_keys, hl = i / (vectors * flash_keys);
            int const key = tile * flash_keys + r;
            bool const inside = key < length;
            T const *row = qkv + (size_t)(first + (inside ? key : 0)) * stride + (group_index * group + hl) * HEAD + c;
            T *k = shared + ((size_t)(buffer * group + hl) * 2) * tile_elements + r * ld + c;
            copy16_async(k, row + hidden, inside ? 16 : 0);
            copy16_async(k + tile_elements, row + 2 * hidden, inside ? 16 : 0);
        }
        copy_commit();
    };
    if (resident)
        for (int tile = 0; tile < tiles; ++tile) stage(tile, tile);
    else
        stage(0, 0);

    /* Q as A fragments: rows g and g + 8 of the strip, columns 16 c + 2 t (+1) and + 8. */
    unsigned q[HEAD / 16][4];
    {
        T const *q_low = qkv + (size_t)(first + row0 + g) * stride + h * HEAD + 2 * t;
        T const *q_high = q_low + (size_t)8 * stride;
        bool const low = busy && row0 + g < length, high = busy && row0 + g + 8 < length;
#pragma unroll
        for (int c = 0; c < HEAD / 16; ++c) {
            q[c][0] = low ? *(unsigned const *)(q_low + 16 * c) : 0u;
            q[c][1] = high ? *(unsigned const *)(q_high + 16 * c) : 0u;
            q[c][2] = low ? *(unsigned const *)(q_low + 16 * c + 8) : 0u;
            q[c][3] = high ? *(unsigned const *)(q_high + 16 * c + 8) : 0u;
        }
    }
    float o[HEAD / 8][4];
#pragma unroll
    for (int j = 0; j < HEAD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float best_low = -INFINITY, best_high = -INFINITY, sum_low = 0.f, sum_high = 0.f;
    float const scale2 = scale * 1.4426950408889634f;

    if (resident) {
        copy_wait<0>();
        __syncthreads(); // every tile landed: the only barrier
        if (!busy) return;
    }
    for (int tile = 0; tile < tiles; ++tile) {
        if (!resident) {
            if (tile + 1 < tiles) {
                stage(tile + 1, (tile + 1) & 1);
                copy_wait<1>();
            } else copy_wait<0>();
            __syncthreads();
        }
        if (busy) {
            int const buffer = resident ? tile : tile & 1;
            T const *k = shared + ((size_t)(buffer * group + h_local) * 2) * tile_elements;
            T const *v = k + tile_elements;
            int const valid = length - tile * flash_keys; // >= 1
            /* STEP keys at a time (fewer live registers with 32: more blocks fit an SM). */
#pragma unroll 1
            for (int base = 0; base < flash_keys && base < valid; base += STEP) {
                int const here = valid - base;           // keys inside from `base`, >= 1
                int const key_steps = (here + 15) / 16;  // 16-key steps with at least one key inside
                /* S = Q K^T: STEP / 8 column blocks of 8 keys; ldmatrix.x4 gives two blocks' B fragments
                 * per 16 dims. */
                float s[STEP / 8][4];
#pragma unroll
                for (int j = 0; j < STEP / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
                for (int p = 0; p < STEP / 16; ++p) {
                    if (p >= key_steps) break;
#pragma unroll
                    for (int c = 0; c < HEAD / 16; ++c) {
                        unsigned b[4];
                        int const m = lane >> 3;
                        ldmatrix_x4(b, k + (base + 16 * p + (m >> 1) * 8 + (lane & 7)) * ld + 16 * c + (m & 1) * 8);
                        flash_pair<T>::mma(s[2 * p], q[c], b[0], b[1]);
                        flash_pair<T>::mma(s[2 * p + 1], q[c], b[2], b[3]);
                    }
                }
                /* Online softmax over these keys: lanes 4g .. 4g + 3 share rows g and g + 8. The maxima
                 * are of the raw scores; the scale (with log2 e) is folded into one FMA per score below.
                 * Only the 16-key steps with a key inside are touched; keys past the text are masked
                 * only in the step that holds the text's end. */
                bool const tail = here < STEP;
                float tile_low = -INFINITY, tile_high = -INFINITY;
#pragma unroll
                for (int j = 0; j < STEP / 8; ++j) {
                    if (j >= 2 * key_steps) break;
                    if (tail) {
                        int const key = 8 * j + 2 * t;
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            if (key + (e & 1) >= here) s[j][e] = -INFINITY;
                    }
                    tile_low = fmaxf(tile_low, fmaxf(s[j][0], s[j][1]));
                    tile_high = fmaxf(tile_high, fmaxf(s[j][2], s[j][3]));
                }
#pragma unroll
                for (int offset = 1; offset < 4; offset <<= 1) {
                    tile_low = fmaxf(tile_low, __shfl_xor_sync(0xffffffffu, tile_low, offset));
                    tile_high = fmaxf(tile_high, __shfl_xor_sync(0xffffffffu, tile_high, offset));
                }
                float const next_low = fmaxf(best_low, tile_low), next_high = fmaxf(best_high, tile_high);
                float const keep_low = flash_exp2((best_low - next_low) * scale2);
                float const keep_high = flash_exp2((best_high - next_high) * scale2);
                best_low = next_low, best_high = next_high;
                float const shift_low = -next_low * scale2, shift_high = -next_high * scale2;
                sum_low *= keep_low, sum_high *= keep_high;
#pragma unroll
                for (int j = 0; j < HEAD / 8; ++j)
                    o[j][0] *= keep_low, o[j][1] *= keep_low, o[j][2] *= keep_high, o[j][3] *= keep_high;
                /* P = exp2(S scale - max scale) packed straight into A fragments: 16 keys per k step. */
                unsigned pa[STEP / 16][4];
#pragma unroll
                for (int j = 0; j < STEP / 8; ++j) {
                    if (j >= 2 * key_steps) break;
                    float const p0 = flash_exp2(fmaf(s[j][0], scale2, shift_low));
                    float const p1 = flash_exp2(fmaf(s[j][1], scale2, shift_low));
                    float const p2 = flash_exp2(fmaf(s[j][2], scale2, shift_high));
                    float const p3 = flash_exp2(fmaf(s[j][3], scale2, shift_high));
                    sum_low += p0 + p1, sum_high += p2 + p3;
                    pa[j / 2][(j & 1) * 2] = flash_pair<T>::pack(p0, p1);
                    pa[j / 2][(j & 1) * 2 + 1] = flash_pair<T>::pack(p2, p3);
                }
                /* O += P V: V's B fragments through ldmatrix.trans, two 8-wide column blocks per load. */
#pragma unroll
                for (int kk = 0; kk < STEP / 16; ++kk) {
                    if (kk >= key_steps) break;
#pragma unroll
                    for (int d = 0; d < HEAD / 16; ++d) {
                        unsigned b[4];
                        int const m = lane >> 3;
                        ldmatrix_x4_trans(b, v + (base + 16 * kk + (m & 1) * 8 + (lane & 7)) * ld + 16 * d + (m >> 1) * 8);
                        flash_pair<T>::mma(o[2 * d], pa[kk], b[0], b[1]);
                        flash_pair<T>::mma(o[2 * d + 1], pa[kk], b[2], b[3]);
                    }
                }
            }
        }
        if (!resident) __syncthreads(); // the buffer this tile used is the one the tile after next loads into
    }
    if (!busy) return;
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
        sum_low += __shfl_xor_sync(0xffffffffu, sum_low, offset);
        sum_high += __shfl_xor_sync(0xffffffffu, sum_high, offset);
    }
    float const inverse_low = 1.f / sum_low, inverse_high = 1.f / sum_high;
    T *out_low = context + (size_t)(first + row0 + g) * hidden + h * HEAD + 2 * t;
    T *out_high = out_low + (size_t)8 * hidden;
    bool const low = row0 + g < length, high = row0 + g + 8 < length;
#pragma unroll
    for (int j = 0; j < HEAD / 8; ++j) {
        if (low) *(unsigned *)(out_low + 8 * j) = flash_pair<T>::pack(o[j][0] * inverse_low, o[j][1] * inverse_low);
        if (high) *(unsigned *)(out_high + 8 * j) = flash_pair<T>::pack(o[j][2] * inverse_high, o[j][3] * inverse_high);
    }
}

} // namespace uform_text

#endif // UFORM_KERNELS_ATTENTION_FLASH_CUH
