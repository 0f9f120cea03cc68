/**
 *  @file   text_gpu.cuh
 *  @brief  The device kernels of VRAM text towers (src/models/text_vram.c launches them), included
 *          by src/kernels.cu so they share its fatbin. Each is instantiated for f32, bf16 and f16
 *          activations with C linkage: `uform_text_<kernel>_<dtype>`.
 *
 *  Layouts mirror the CPU pass (src/models/text_forward.c): texts packed without padding, `offsets`
 *  (int32, texts + 1, relative to the chunk) delimit them; rows are row-major `[tokens][width]`.
 *  Every reduction (LayerNorm, softmax, pooling, norms) runs in f32 whatever the storage type.
 *
 *  Attention is one block per (text, head) with the text's keys and values in shared memory, so no
 *  score matrix ever reaches global memory: `attention_simt` (any dtype, scores per warp in shared
 *  memory; the f32 checking path) and `attention_mma` (bf16 and f16: Q K^T and P V on tensor cores
 *  through WMMA 16x16x16 fragments, the text padded to a multiple of 16 inside shared memory only).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

namespace uform_text {

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T store(float v);
template <> __device__ __forceinline__ float store<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half store<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

/** Up to 32 values per lane: rows of at most 1024 (the host refuses wider towers). */
constexpr int row_slots = 32;

/** LayerNorm of the `cols` values a warp holds (`v[k]` is column lane + 32 k), written to `out`. */
template <typename T>
__device__ __forceinline__ void warp_layer_norm(float (&v)[row_slots], int cols, float const *gamma, float const *beta,
                                                float epsilon, T *out) {
    int const lane = threadIdx.x & 31;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < row_slots; ++k)
        if (lane + 32 * k < cols) sum += v[k];
    float const mean = warp_sum(sum) / (float)cols;
    float squares = 0.f;
#pragma unroll
    for (int k = 0; k < row_slots; ++k)
        if (lane + 32 * k < cols) squares += (v[k] - mean) * (v[k] - mean);
    float const inverse = rsqrtf(warp_sum(squares) / (float)cols + epsilon);
#pragma unroll
    for (int k = 0; k < row_slots; ++k) {
        int const c = lane + 32 * k;
        if (c < cols) out[c] = store<T>((v[k] - mean) * inverse * gamma[c] + beta[c]);
    }
}

/** x[t] = LayerNorm(word[ids[t]] + position[positions[t]] (+ type0)): one warp per token. */
template <typename T>
__device__ void embed(T *x, int const *ids, int const *positions, T const *word, T const *position, T const *type0,
                      float const *gamma, float const *beta, int tokens, int cols, float epsilon) {
    int const token = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (token >= tokens) return;
    T const *w = word + (size_t)ids[token] * cols, *p = position + (size_t)positions[token] * cols;
    float v[row_slots];
#pragma unroll
    for (int k = 0; k < row_slots; ++k) {
        int const c = lane + 32 * k;
        v[k] = c < cols ? load(w[c]) + load(p[c]) + (type0 ? load(type0[c]) : 0.f) : 0.f;
    }
    warp_layer_norm(v, cols, gamma, beta, epsilon, x + (size_t)token * cols);
}

/** out = LayerNorm(in), row by row, one warp per row; `out` may be `in`. */
template <typename T>
__device__ void layer_norm(T *out, T const *in, float const *gamma, float const *beta, int rows, int cols,
                           float epsilon) {
    int const row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    T const *r = in + (size_t)row * cols;
    float v[row_slots];
#pragma unroll
    for (int k = 0; k < row_slots; ++k) {
        int const c = lane + 32 * k;
        v[k] = c < cols ? load(r[c]) : 0.f;
    }
    warp_layer_norm(v, cols, gamma, beta, epsilon, out + (size_t)row * cols);
}

/** The exact GELU, in place, after a product whose epilogue added the bias (the f32 path). */
template <typename T> __device__ void gelu(T *x, unsigned long long count) {
    unsigned long long const stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float const v = load(x[i]);
        x[i] = store<T>(0.5f * v * (1.f + erff(v * 0.70710678118654752f)));
    }
}

/** Attention of one (text, head) per block, 4 warps: keys and values of the text in shared memory as
 *  f32 (keys padded to `head + 1` columns against bank conflicts), each warp taking query rows. */
template <typename T>
__device__ void attention_simt(T *context, T const *qkv, int const *offsets, int heads, int head, float scale) {
    extern __shared__ float shared[];
    int const text = blockIdx.x / heads, h = blockIdx.x % heads;
    int const first = offsets[text], length = offsets[text + 1] - first;
    int const hidden = heads * head, warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    float *keys = shared, *values = keys + length * (head + 1);
    float *query = values + length * head + warp * (head + length), *scores = query + head;
    for (int i = threadIdx.x; i < length * head; i += blockDim.x) {
        int const j = i / head, c = i % head;
        T const *row = qkv + (size_t)(first + j) * 3 * hidden + h * head + c;
        keys[j * (head + 1) + c] = load(row[hidden]);
        values[j * head + c] = load(row[2 * hidden]);
    }
    __syncthreads();
    for (int i = warp; i < length; i += warps) {
        T const *q = qkv + (size_t)(first + i) * 3 * hidden + h * head;
        for (int c = lane; c < head; c += 32) query[c] = load(q[c]) * scale;
        __syncwarp();
        float best = -INFINITY;
        for (int j = lane; j < length; j += 32) {
            float s = 0.f;
            float const *k = keys + j * (head + 1);
            for (int c = 0; c < head; ++c) s += query[c] * k[c];
            scores[j] = s;
            best = fmaxf(best, s);
        }
        best = warp_max(best);
        float sum = 0.f;
        for (int j = lane; j < length; j += 32) {
            float const e = expf(scores[j] - best);
            scores[j] = e;
            sum += e;
        }
        float const inverse = 1.f / warp_sum(sum);
        __syncwarp();
        T *o = context + (size_t)(first + i) * hidden + h * head;
        for (int c = lane; c < head; c += 32) {
            float acc = 0.f;
            for (int j = 0; j < length; ++j) acc += scores[j] * values[j * head + c];
            o[c] = store<T>(acc * inverse);
        }
        __syncwarp();
    }
}

/** Attention of one (text, head) per block on tensor cores (bf16, f16), 4 warps. Keys and values of
 *  the text sit in shared memory, zero-padded to `padded` rows (a multiple of 16); each warp takes
 *  16-query strips of this text (its length rounded up to 16, not the chunk's longest): its queries
 *  (zero-padded) into its own shared strip, S = Q K^T in f32 fragments
 *  stored to its strip, softmax in f32 into P (T, unnormalised), O = P V, scaled by 1 / sum on the
 *  way out. No score matrix leaves the SM. `head` is a multiple of 16.
 *  Shared bytes: 2 padded (head + 8) sizeof(T) + 4 (16 lds 4 + 16 (padded + 8) sizeof(T) + 64 +
 *  16 (head + 8) sizeof(T)), lds = max(padded, head) + 4. */
template <typename T>
__device__ void attention_mma(T *context, T const *qkv, int const *offsets, int heads, int head, float scale,
                              int padded) {
    using namespace nvcuda;
    extern __shared__ __align__(128) unsigned char raw[];
    int const text = blockIdx.x / heads, h = blockIdx.x % heads;
    int const first = offsets[text], length = offsets[text + 1] - first;
    int const hidden = heads * head, warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    int const ldh = head + 8, lds = (padded > head ? padded : head) + 4, ldp = padded + 8;
    T *k = (T *)raw, *v = k + padded * ldh;
    float *s = (float *)(v + padded * ldh) + warp * 16 * lds;                  // [16][lds] per warp
    T *p = (T *)((float *)(v + padded * ldh) + warps * 16 * lds) + warp * 16 * ldp; // [16][ldp] per warp
    float *inverse = (float *)((T *)((float *)(v + padded * ldh) + warps * 16 * lds) + warps * 16 * ldp);
    T *q = (T *)(inverse + warps * 16) + warp * 16 * ldh;                      // [16][ldh] per warp
    inverse += warp * 16;
    int const vectors = head / 8; // 8 elements (16 bytes) at a time
    int const mine = (length + 15) & ~15; // this text's rows, padded; `padded` is the chunk's longest
    for (int i = threadIdx.x; i < mine * vectors; i += blockDim.x) {
        int const j = i / vectors, c = (i % vectors) * 8;
        uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
        if (j < length) {
            T const *row = qkv + (size_t)(first + j) * 3 * hidden + h * head + c;
            kv = *(uint4 const *)(row + hidden), vv = *(uint4 const *)(row + 2 * hidden);
        }
        *(uint4 *)(k + j * ldh + c) = kv, *(uint4 *)(v + j * ldh + c) = vv;
    }
    __syncthreads();
    int const tiles = mine / 16, head_tiles = head / 16;
    for (int strip = warp; strip < tiles; strip += warps) {
        int const row0 = strip * 16; // < length: every strip holds at least one query
        for (int i = lane; i < 16 * vectors; i += 32) {
            int const r = i / vectors, c = (i % vectors) * 8;
            uint4 qv = make_uint4(0, 0, 0, 0);
            if (row0 + r < length) qv = *(uint4 const *)(qkv + (size_t)(first + row0 + r) * 3 * hidden + h * head + c);
            *(uint4 *)(q + r * ldh + c) = qv;
        }
        __syncwarp();
        for (int tj = 0; tj < tiles; ++tj) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
            for (int c = 0; c < head; c += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
                wmma::load_matrix_sync(a, q + c, ldh);
                wmma::load_matrix_sync(b, k + tj * 16 * ldh + c, ldh);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(s + tj * 16, acc, lds, wmma::mem_row_major);
        }
        __syncwarp();
        /* Softmax: two lanes per row (lanes r and r + 16, alternate columns), one shuffle each for
         * the maximum and the sum; rows past the text's end get zeros. */
        int const rows = length - row0 < 16 ? length - row0 : 16;
        {
            int const r = lane & 15, half = lane >> 4;
            bool const active = r < rows;
            float const *row = s + r * lds;
            T *prow = p + r * ldp;
            float best = -INFINITY;
            if (active)
                for (int j = half; j < length; j += 2) best = fmaxf(best, row[j]);
            best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, 16)) * scale;
            float sum = 0.f;
            for (int j = half; j < mine; j += 2) {
                float const e = active && j < length ? __expf(row[j] * scale - best) : 0.f;
                T const stored = store<T>(e);
                prow[j] = stored;
                sum += load(stored);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 16);
            if (active && half == 0) inverse[r] = 1.f / sum;
        }
        __syncwarp();
        for (int tj = 0; tj < head_tiles; ++tj) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            wmma::fill_fragment(acc, 0.f);
            for (int c = 0; c < mine; c += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                wmma::load_matrix_sync(a, p + c, ldp);
                wmma::load_matrix_sync(b, v + c * ldh + tj * 16, ldh);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(s + tj * 16, acc, lds, wmma::mem_row_major);
        }
        __syncwarp();
        for (int i = lane; i < rows * head; i += 32) {
            int const r = i / head, c = i % head;
            context[(size_t)(first + row0 + r) * hidden + h * head + c] = store<T>(s[r * lds + c] * inverse[r]);
        }
        __syncwarp();
    }
}

/* ---- attention_flash: FlashAttention-2 style on mma.sync.m16n8k16 (sm_80+, bf16 and f16) ---- */

/** Keys per tile staged in shared memory (and the width of a score strip a warp holds). */
constexpr int flash_keys = 64;

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

/** Attention on tensor cores, FlashAttention-2 style, for `HEAD`-wide heads (32, 64, 128).
 *
 *  Grid: x = text * (heads / group) + head group, y = query chunk; block: `warps` = group x chunk
 *  warps. Warp w serves head `group_index * group + w / chunk` and the 16 query rows
 *  `(y * chunk + w % chunk) * 16` of the text (rows past its end are computed from zeros and never
 *  stored; a block whose first row is past the text's end returns at once). Q stays in registers as
 *  mma A fragments for the whole pass. The block stages keys and values of its heads in shared memory
 *  `flash_keys` rows at a time (cp.async, two buffers: the next tile loads while this one computes;
 *  rows past the text are zeros), each warp computes S = Q K^T for the tile (16 x 64 in f32
 *  registers), masks keys past the text, keeps the running row maximum and sum (online softmax,
 *  base 2 with `scale log2 e` folded in), rescales its O accumulator and adds P V with P taken from
 *  the S registers as the A operand (no trip through shared memory). O / sum goes out as T.
 *  Padding never changes a text's result: every text reads only its own rows.
 *  Shared bytes: buffers (1, or 2 when the chunk's longest text spans more than one tile) x group x
 *  2 (K, V) x flash_keys x (HEAD + 8) x sizeof(T). */
template <typename T, int HEAD>
__device__ void attention_flash(T *context, T const *qkv, int const *offsets, int heads, float scale, int group) {
    static_assert(HEAD % 16 == 0 && HEAD <= 128, "heads of 16 .. 128 in steps of 16");
    constexpr int ld = HEAD + 8;              // shared row pitch: 8 rows of an ldmatrix hit distinct banks
    constexpr int vectors = HEAD / 8;         // 16-byte pieces per row
    constexpr int tile_elements = flash_keys * ld;
    extern __shared__ __align__(128) unsigned char raw[];
    T *const shared = (T *)raw;
    int const groups = heads / group, text = blockIdx.x / groups, group_index = blockIdx.x % groups;
    int const warps = blockDim.x / 32, chunk = warps / group, warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    int const first = offsets[text], length = offsets[text + 1] - first;
    if ((int)blockIdx.y * chunk * 16 >= length) return;
    int const hidden = heads * HEAD, stride = 3 * hidden;
    int const h_local = warp / chunk, h = group_index * group + h_local;
    int const row0 = ((int)blockIdx.y * chunk + warp % chunk) * 16;
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

    for (int tile = 0; tile < tiles; ++tile) {
        if (tile + 1 < tiles) {
            stage(tile + 1, (tile + 1) & 1);
            copy_wait<1>();
        } else copy_wait<0>();
        __syncthreads();
        if (busy) {
            T const *k = shared + ((size_t)((tile & 1) * group + h_local) * 2) * tile_elements;
            T const *v = k + tile_elements;
            /* S = Q K^T: 8 column blocks of 8 keys; ldmatrix.x4 gives two blocks' B fragments per 16 dims. */
            float s[flash_keys / 8][4];
#pragma unroll
            for (int j = 0; j < flash_keys / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
            int const valid = length - tile * flash_keys; // >= 1
            int const key_steps = (valid + 15) / 16;      // 16-key steps with at least one key inside
#pragma unroll
            for (int p = 0; p < flash_keys / 16; ++p) {
                if (p >= key_steps) break;
#pragma unroll
                for (int c = 0; c < HEAD / 16; ++c) {
                    unsigned b[4];
                    int const m = lane >> 3;
                    ldmatrix_x4(b, k + (16 * p + (m >> 1) * 8 + (lane & 7)) * ld + 16 * c + (m & 1) * 8);
                    flash_pair<T>::mma(s[2 * p], q[c], b[0], b[1]);
                    flash_pair<T>::mma(s[2 * p + 1], q[c], b[2], b[3]);
                }
            }
            /* Online softmax over this tile: lanes 4g .. 4g + 3 share rows g and g + 8. */
            float tile_low = -INFINITY, tile_high = -INFINITY;
#pragma unroll
            for (int j = 0; j < flash_keys / 8; ++j) {
                int const key = 8 * j + 2 * t;
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    bool const inside = key + (e & 1) < valid;
                    s[j][e] = inside ? s[j][e] * scale2 : -INFINITY;
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
            float const keep_low = exp2f(best_low - next_low), keep_high = exp2f(best_high - next_high);
            best_low = next_low, best_high = next_high;
            sum_low *= keep_low, sum_high *= keep_high;
#pragma unroll
            for (int j = 0; j < HEAD / 8; ++j) o[j][0] *= keep_low, o[j][1] *= keep_low, o[j][2] *= keep_high, o[j][3] *= keep_high;
            /* P = exp2(S - max) packed straight into A fragments: 16 keys per k step. */
            unsigned pa[flash_keys / 16][4];
#pragma unroll
            for (int j = 0; j < flash_keys / 8; ++j) {
                float const p0 = exp2f(s[j][0] - best_low), p1 = exp2f(s[j][1] - best_low);
                float const p2 = exp2f(s[j][2] - best_high), p3 = exp2f(s[j][3] - best_high);
                sum_low += p0 + p1, sum_high += p2 + p3;
                pa[j / 2][(j & 1) * 2] = flash_pair<T>::pack(p0, p1);
                pa[j / 2][(j & 1) * 2 + 1] = flash_pair<T>::pack(p2, p3);
            }
            /* O += P V: V's B fragments through ldmatrix.trans, two 8-wide column blocks per load. */
#pragma unroll
            for (int kk = 0; kk < flash_keys / 16; ++kk) {
                if (kk >= key_steps) break;
#pragma unroll
                for (int d = 0; d < HEAD / 16; ++d) {
                    unsigned b[4];
                    int const m = lane >> 3;
                    ldmatrix_x4_trans(b, v + (16 * kk + (m & 1) * 8 + (lane & 7)) * ld + 16 * d + (m >> 1) * 8);
                    flash_pair<T>::mma(o[2 * d], pa[kk], b[0], b[1]);
                    flash_pair<T>::mma(o[2 * d + 1], pa[kk], b[2], b[3]);
                }
            }
        }
        __syncthreads(); // the buffer this tile used is the one the tile after next loads into
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

/** pooled[text] = x[first] (CLS, mean 0) or the mean of the text's rows (mean 1): one block per text. */
template <typename T>
__device__ void pool(T *pooled, T const *x, int const *offsets, int cols, int mean) {
    int const text = blockIdx.x, first = offsets[text], length = offsets[text + 1] - first;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float value;
        if (!mean) value = load(x[(size_t)first * cols + c]);
        else {
            value = 0.f;
            for (int j = 0; j < length; ++j) value += load(x[(size_t)(first + j) * cols + c]);
            value *= 1.f / (float)length;
        }
        pooled[(size_t)text * cols + c] = store<T>(value);
    }
}

/** Output rows: the layout's L2 normalisation over `width`, truncation to `dims`, the caller's
 *  normalisation over `dims`, conversion to `out_dtype` (0 f32, 1 bf16, 2 f16); one warp per text,
 *  rows packed at `out + text * dims`. */
template <typename T>
__device__ void finish(void *out, T const *rows, int texts, int width, int dims, int layout_normalize,
                       int user_normalize, int out_dtype) {
    int const text = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (text >= texts) return;
    T const *row = rows + (size_t)text * width;
    float first = 1.f, second = 1.f;
    if (layout_normalize) {
        float sum = 0.f;
        for (int c = lane; c < width; c += 32) sum += load(row[c]) * load(row[c]);
        float const norm = sqrtf(warp_sum(sum));
        if (norm > 0.f) first = 1.f / norm;
    }
    if (user_normalize) {
        float sum = 0.f;
        for (int c = lane; c < dims; c += 32) sum += (load(row[c]) * first) * (load(row[c]) * first);
        float const norm = sqrtf(warp_sum(sum));
        if (norm > 0.f) second = 1.f / norm;
    }
    for (int c = lane; c < dims; c += 32) {
        float const value = load(row[c]) * first * second;
        size_t const index = (size_t)text * dims + c;
        if (out_dtype == 0) ((float *)out)[index] = value;
        else if (out_dtype == 1) ((__nv_bfloat16 *)out)[index] = __float2bfloat16_rn(value);
        else ((__half *)out)[index] = __float2half_rn(value);
    }
}

} // namespace uform_text

#define UFORM_TEXT_KERNELS(T, suffix)                                                                                  \
    extern "C" __global__ void uform_text_embed_##suffix(T *x, int const *ids, int const *positions, T const *word,  \
                                                         T const *position, T const *type0, float const *gamma,      \
                                                         float const *beta, int tokens, int cols, float epsilon) {   \
        uform_text::embed<T>(x, ids, positions, word, position, type0, gamma, beta, tokens, cols, epsilon);          \
    }                                                                                                                  \
    extern "C" __global__ void uform_text_layer_norm_##suffix(T *out, T const *in, float const *gamma,               \
                                                              float const *beta, int rows, int cols, float epsilon) { \
        uform_text::layer_norm<T>(out, in, gamma, beta, rows, cols, epsilon);                                          \
    }                                                                                                                  \
    extern "C" __global__ void uform_text_gelu_##suffix(T *x, unsigned long long count) { uform_text::gelu<T>(x, count); } \
    extern "C" __global__ void uform_text_attention_simt_##suffix(T *context, T const *qkv, int const *offsets,      \
                                                                  int heads, int head, float scale) {                 \
        uform_text::attention_simt<T>(context, qkv, offsets, heads, head, scale);                                      \
    }                                                                                                                  \
    extern "C" __global__ void uform_text_pool_##suffix(T *pooled, T const *x, int const *offsets, int cols,         \
                                                        int mean) {                                                   \
        uform_text::pool<T>(pooled, x, offsets, cols, mean);                                                           \
    }                                                                                                                  \
    extern "C" __global__ void uform_text_finish_##suffix(void *out, T const *rows, int texts, int width, int dims,  \
                                                          int layout_normalize, int user_normalize, int out_dtype) {  \
        uform_text::finish<T>(out, rows, texts, width, dims, layout_normalize, user_normalize, out_dtype);             \
    }

UFORM_TEXT_KERNELS(float, f32)
UFORM_TEXT_KERNELS(__nv_bfloat16, bf16)
UFORM_TEXT_KERNELS(__half, f16)

extern "C" __global__ void uform_text_attention_mma_bf16(__nv_bfloat16 *context, __nv_bfloat16 const *qkv,
                                                         int const *offsets, int heads, int head, float scale,
                                                         int padded) {
    uform_text::attention_mma<__nv_bfloat16>(context, qkv, offsets, heads, head, scale, padded);
}
#define UFORM_TEXT_FLASH(T, suffix, head)                                                                              \
    extern "C" __global__ void __launch_bounds__(256) uform_text_attention_flash##head##_##suffix(                     \
        T *context, T const *qkv, int const *offsets, int heads, float scale, int group) {                            \
        uform_text::attention_flash<T, head>(context, qkv, offsets, heads, scale, group);                             \
    }
UFORM_TEXT_FLASH(__nv_bfloat16, bf16, 32)
UFORM_TEXT_FLASH(__nv_bfloat16, bf16, 64)
UFORM_TEXT_FLASH(__nv_bfloat16, bf16, 128)
UFORM_TEXT_FLASH(__half, f16, 32)
UFORM_TEXT_FLASH(__half, f16, 64)
UFORM_TEXT_FLASH(__half, f16, 128)
extern "C" __global__ void uform_text_attention_mma_f16(__half *context, __half const *qkv, int const *offsets,
                                                        int heads, int head, float scale, int padded) {
    uform_text::attention_mma<__half>(context, qkv, offsets, heads, head, scale, padded);
}
