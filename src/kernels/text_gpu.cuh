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
 *  Attention never writes a score matrix to global memory. Three kernels, picked by
 *  `text_vram_attention` (src/models/text_vram_launch.c): `attention_flash` (attention_flash.cuh:
 *  bf16 and f16, heads of 32, 64 or 128, any length: FlashAttention-2 style on mma.sync with Q and
 *  the scores in registers, keys and values streamed through shared memory 64 rows at a time), else
 *  `attention_mma` (bf16 and f16, heads a multiple of 16: one block per (text, head), the text's keys
 *  and values in shared memory, Q K^T and P V through WMMA 16x16x16 fragments staged in shared
 *  memory), else `attention_simt` (any dtype, the f32 checking path; scores per warp in shared memory).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "attention_flash.cuh"

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

/** Rows whose width is a multiple of `width` move as 16-byte vectors: lane + 32 i holds the vector of
 *  columns (lane + 32 i) width .. + width - 1 in v[i width ..]; `count` vectors per lane at most. */
template <typename T> struct row_vectors {
    static constexpr int width = 16 / (int)sizeof(T), count = row_slots / width;
    static __device__ __forceinline__ void unpack(uint4 raw, float *out) {
        T const *e = (T const *)&raw;
#pragma unroll
        for (int j = 0; j < width; ++j) out[j] = load(e[j]);
    }
    static __device__ __forceinline__ uint4 pack(float const *in) {
        uint4 raw;
        T *e = (T *)&raw;
#pragma unroll
        for (int j = 0; j < width; ++j) e[j] = store<T>(in[j]);
        return raw;
    }
};

/** `warp_layer_norm` of a row held as vectors (`row_vectors`), written with 16-byte stores. */
template <typename T>
__device__ __forceinline__ void warp_layer_norm_vectors(float (&v)[row_slots], int cols, float const *gamma,
                                                        float const *beta, float epsilon, T *out) {
    using rv = row_vectors<T>;
    int const lane = threadIdx.x & 31, vectors = cols / rv::width;
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < rv::count; ++i)
        if (lane + 32 * i < vectors)
#pragma unroll
            for (int j = 0; j < rv::width; ++j) sum += v[i * rv::width + j];
    float const mean = warp_sum(sum) / (float)cols;
    float squares = 0.f;
#pragma unroll
    for (int i = 0; i < rv::count; ++i)
        if (lane + 32 * i < vectors)
#pragma unroll
            for (int j = 0; j < rv::width; ++j) squares += (v[i * rv::width + j] - mean) * (v[i * rv::width + j] - mean);
    float const inverse = rsqrtf(warp_sum(squares) / (float)cols + epsilon);
#pragma unroll
    for (int i = 0; i < rv::count; ++i) {
        int const vector = lane + 32 * i;
        if (vector >= vectors) continue;
        float4 const *g = (float4 const *)(gamma + vector * rv::width), *b = (float4 const *)(beta + vector * rv::width);
        float o[rv::width];
#pragma unroll
        for (int q = 0; q < rv::width / 4; ++q) {
            float4 const gq = g[q], bq = b[q];
            float const *x = v + i * rv::width + 4 * q;
            o[4 * q + 0] = (x[0] - mean) * inverse * gq.x + bq.x;
            o[4 * q + 1] = (x[1] - mean) * inverse * gq.y + bq.y;
            o[4 * q + 2] = (x[2] - mean) * inverse * gq.z + bq.z;
            o[4 * q + 3] = (x[3] - mean) * inverse * gq.w + bq.w;
        }
        *(uint4 *)(out + vector * rv::width) = rv::pack(o);
    }
}

/** x[t] = LayerNorm(word[ids[t]] + position[positions[t]] (+ type0)): one warp per token, 16-byte
 *  vectors when the width allows. */
template <typename T>
__device__ void embed(T *x, int const *ids, int const *positions, T const *word, T const *position, T const *type0,
                      float const *gamma, float const *beta, int tokens, int cols, float epsilon) {
    int const token = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (token >= tokens) return;
    T const *w = word + (size_t)ids[token] * cols, *p = position + (size_t)positions[token] * cols;
    float v[row_slots];
    using rv = row_vectors<T>;
    if (cols % rv::width == 0) {
        int const vectors = cols / rv::width;
#pragma unroll
        for (int i = 0; i < rv::count; ++i) {
            int const vector = lane + 32 * i;
            float a[rv::width], b[rv::width], c[rv::width];
            if (vector < vectors) {
                rv::unpack(*(uint4 const *)(w + vector * rv::width), a);
                rv::unpack(*(uint4 const *)(p + vector * rv::width), b);
                if (type0) rv::unpack(*(uint4 const *)(type0 + vector * rv::width), c);
            }
#pragma unroll
            for (int j = 0; j < rv::width; ++j)
                v[i * rv::width + j] = vector < vectors ? a[j] + b[j] + (type0 ? c[j] : 0.f) : 0.f;
        }
        warp_layer_norm_vectors(v, cols, gamma, beta, epsilon, x + (size_t)token * cols);
        return;
    }
#pragma unroll
    for (int k = 0; k < row_slots; ++k) {
        int const c = lane + 32 * k;
        v[k] = c < cols ? load(w[c]) + load(p[c]) + (type0 ? load(type0[c]) : 0.f) : 0.f;
    }
    warp_layer_norm(v, cols, gamma, beta, epsilon, x + (size_t)token * cols);
}

/** out = LayerNorm(in), row by row, one warp per row; `out` may be `in`. A row whose width allows
 *  moves as 16-byte vectors, held packed (bf16/f16: 16 registers for 1,024 columns) and widened in
 *  each pass, so more warps fit an SM; other widths read their row from memory in each pass. */
template <typename T>
__device__ void layer_norm(T *out, T const *in, float const *gamma, float const *beta, int rows, int cols,
                           float epsilon) {
    int const row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= rows) return;
    T const *r = in + (size_t)row * cols;
    T *o = out + (size_t)row * cols;
    using rv = row_vectors<T>;
    float sum = 0.f, squares = 0.f;
    if (cols % rv::width == 0) {
        int const vectors = cols / rv::width;
        uint4 raw[rv::count];
        float x[rv::width];
#pragma unroll
        for (int i = 0; i < rv::count; ++i) {
            int const vector = lane + 32 * i;
            raw[i] = vector < vectors ? *(uint4 const *)(r + vector * rv::width) : make_uint4(0, 0, 0, 0);
            rv::unpack(raw[i], x); /* zeros past the row add nothing */
#pragma unroll
            for (int j = 0; j < rv::width; ++j) sum += x[j];
        }
        float const mean = warp_sum(sum) / (float)cols;
#pragma unroll
        for (int i = 0; i < rv::count; ++i)
            if (lane + 32 * i < vectors) {
                rv::unpack(raw[i], x);
#pragma unroll
                for (int j = 0; j < rv::width; ++j) squares += (x[j] - mean) * (x[j] - mean);
            }
        float const inverse = rsqrtf(warp_sum(squares) / (float)cols + epsilon);
#pragma unroll
        for (int i = 0; i < rv::count; ++i) {
            int const vector = lane + 32 * i;
            if (vector >= vectors) continue;
            rv::unpack(raw[i], x);
            float4 const *g = (float4 const *)(gamma + vector * rv::width), *b = (float4 const *)(beta + vector * rv::width);
#pragma unroll
            for (int q = 0; q < rv::width / 4; ++q) {
                float4 const gq = g[q], bq = b[q];
                x[4 * q + 0] = (x[4 * q + 0] - mean) * inverse * gq.x + bq.x;
                x[4 * q + 1] = (x[4 * q + 1] - mean) * inverse * gq.y + bq.y;
                x[4 * q + 2] = (x[4 * q + 2] - mean) * inverse * gq.z + bq.z;
                x[4 * q + 3] = (x[4 * q + 3] - mean) * inverse * gq.w + bq.w;
            }
            *(uint4 *)(o + vector * rv::width) = rv::pack(x);
        }
        return;
    }
    for (int c = lane; c < cols; c += 32) sum += load(r[c]);
    float const mean = warp_sum(sum) / (float)cols;
    for (int c = lane; c < cols; c += 32) squares += (load(r[c]) - mean) * (load(r[c]) - mean);
    float const inverse = rsqrtf(warp_sum(squares) / (float)cols + epsilon);
    for (int c = lane; c < cols; c += 32) o[c] = store<T>((load(r[c]) - mean) * inverse * gamma[c] + beta[c]);
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
/* The flash kernel per head width and softmax step (keys per step: 32 keeps fewer registers live).
 * Held to 80 or 96 registers (three blocks per SM) it ran slower on an H200 (spills, step 32), so
 * it is not built so (bench/RESULTS.md, 2026-12-01). */
#define UFORM_TEXT_FLASH(T, suffix, head, step)                                                                        \
    extern "C" __global__ void __launch_bounds__(256) uform_text_attention_flash##head##x##step##_##suffix(             \
        T *context, T const *qkv, int const *offsets, int heads, float scale, int group, int chunks, int resident) {  \
        uform_text::attention_flash<T, head, step>(context, qkv, offsets, heads, scale, group, chunks, resident);     \
    }
#define UFORM_TEXT_FLASH_STEPS(T, suffix, head)                                                                        \
    UFORM_TEXT_FLASH(T, suffix, head, 32)                                                                              \
    UFORM_TEXT_FLASH(T, suffix, head, 64)
UFORM_TEXT_FLASH_STEPS(__nv_bfloat16, bf16, 32)
UFORM_TEXT_FLASH_STEPS(__nv_bfloat16, bf16, 64)
UFORM_TEXT_FLASH_STEPS(__nv_bfloat16, bf16, 128)
UFORM_TEXT_FLASH_STEPS(__half, f16, 32)
UFORM_TEXT_FLASH_STEPS(__half, f16, 64)
UFORM_TEXT_FLASH_STEPS(__half, f16, 128)
extern "C" __global__ void uform_text_attention_mma_f16(__half *context, __half const *qkv, int const *offsets,
                                                        int heads, int head, float scale, int padded) {
    uform_text::attention_mma<__half>(context, qkv, offsets, heads, head, scale, padded);
}
