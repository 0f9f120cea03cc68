/**
 *  @file   image_gpu.cuh
 *  @brief  The device kernels of VRAM image towers that the text towers have no counterpart for
 *          (src/models/image_vram_encode.c launches them), included by src/kernels.cu into the same
 *          fatbin: `uform_image_<kernel>_<dtype>` with C linkage, for f32, bf16 and f16 activations.
 *          LayerNorm, GELU, attention, pooling and the output rows are text_gpu.cuh's kernels.
 *
 *  `patches`: the uploaded 8-bit crops (HWC RGB, `side` x `side` each, as the CPU path's decoder
 *  leaves them) normalised as torchvision does in f32, `(v / 255 - mean[c]) / std[c]`, and laid out
 *  as the patch matrix [images patches][depth]: patch (gy, gx) of an image is row gy grid + gx, its
 *  columns in the Conv2d weight's (channel, row, column) order, zero past `3 p p` up to `depth` (a
 *  multiple of 8, so every row of the product is 16-byte aligned). The 3 x 256 normalised levels are
 *  computed once per block into shared memory; threads then look them up.
 *
 *  `assemble`: the residual stream x [images sequence][dim] from the patch product (bias already
 *  added by its epilogue): `prefix` rows ([CLS] then the register tokens, f32) first, then each
 *  patch's product plus its position embedding (f32), as the package's ImageEncoder does.
 */
#include <stdint.h> // text_gpu.cuh (which kernels.cu includes first) brings cuda_bf16.h, cuda_fp16.h and uform_text

namespace uform_image {

using uform_text::load; // text_gpu.cuh's conversions (kernels.cu includes it first)
using uform_text::store;

/** The normalised value of every 8-bit level of every channel, computed as the reference does (two
 *  correctly rounded divisions), into `table` [3][256]; a barrier follows. */
__device__ __forceinline__ void normalised_levels(float *table, float mean0, float mean1, float mean2, float std0,
                                                  float std1, float std2) {
    for (int i = threadIdx.x; i < 3 * 256; i += blockDim.x) {
        int const channel = i >> 8;
        float const mean = channel == 0 ? mean0 : channel == 1 ? mean1 : mean2;
        float const deviation = channel == 0 ? std0 : channel == 1 ? std1 : std2;
        table[i] = __fdiv_rn(__fdiv_rn((float)(i & 255), 255.f) - mean, deviation);
    }
    __syncthreads();
}

/** `rows` patch rows (image, patch). Where a patch's pixel rows are whole 16-byte pieces (`patch` a
 *  multiple of 16, `side` x 3 bytes a multiple of 16: `patches_wide`), each thread takes 16 pixels of
 *  one pixel row of a patch (three 16-byte loads) and writes their 16 columns of each channel as
 *  16-byte stores; else each thread takes one column. Launch: rows x patch x patch / 16 threads when
 *  wide, else rows x depth (image_vram_encode.c's `launch_patches`). */
__device__ __forceinline__ bool patches_wide(int side, int patch) { return patch % 16 == 0 && side * 3 % 16 == 0; }

template <typename T>
__device__ void patches(T *out, uint8_t const *pixels, int side, int patch, int grid, int depth, float mean0,
                        float mean1, float mean2, float std0, float std1, float std2, int rows) {
    __shared__ float table[3 * 256];
    normalised_levels(table, mean0, mean1, mean2, std0, std1, std2);
    int const area = patch * patch, patches_per_image = grid * grid;
    size_t const thread = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (patches_wide(side, patch)) {
        int const segments = patch / 16, per_row = patch * segments;
        if (thread >= (size_t)rows * per_row) return;
        size_t const row = thread / per_row;
        int const rest = (int)(thread % per_row), y = rest / segments, s = rest % segments;
        size_t const image = row / patches_per_image;
        int const local = (int)(row % patches_per_image), gy = local / grid, gx = local % grid;
        uint4 const *source = (uint4 const *)(pixels + ((image * side + (size_t)gy * patch + y) * side +
                                                        (size_t)gx * patch + (size_t)s * 16) * 3);
        uint4 raw[3] = {source[0], source[1], source[2]};
        uint8_t const *bytes = (uint8_t const *)raw;
        T *target = out + row * depth + y * patch + s * 16;
#pragma unroll
        for (int channel = 0; channel < 3; ++channel) {
            uint4 packed[sizeof(T)]; /* 16 values of T */
            T *values = (T *)packed;
#pragma unroll
            for (int x = 0; x < 16; ++x) values[x] = store<T>(table[channel * 256 + bytes[x * 3 + channel]]);
            uint4 *destination = (uint4 *)(target + (size_t)channel * area);
#pragma unroll
            for (int piece = 0; piece < (int)sizeof(T); ++piece) destination[piece] = packed[piece];
        }
        if (rest == 0)
            for (int column = 3 * area; column < depth; ++column) out[row * depth + column] = store<T>(0.f);
        return;
    }
    if (thread >= (size_t)rows * depth) return;
    size_t const row = thread / depth;
    int const column = (int)(thread % depth);
    size_t const image = row / patches_per_image;
    int const local = (int)(row % patches_per_image), gy = local / grid, gx = local % grid;
    float value = 0.f;
    if (column < 3 * area) {
        int const channel = column / area, y = column % area / patch, x = column % patch;
        uint8_t const *origin = pixels + ((image * side + (size_t)gy * patch) * side + (size_t)gx * patch) * 3;
        value = table[channel * 256 + origin[((size_t)y * side + x) * 3 + channel]];
    }
    out[thread] = store<T>(value);
}

/** `rows` token rows (image, t): each thread 8 columns (`dim` a multiple of 8; else 1), loads and
 *  stores of 16 bytes per 8 values of T and 32 bytes per 8 floats. Launch: rows x dim / 8 threads
 *  (rows x dim where dim is not a multiple of 8). */
template <typename T>
__device__ void assemble(T *x, T const *embedded, float const *position, float const *prefix, int sequence,
                         int prefix_rows, int dim, int rows) {
    int const width = dim % 8 == 0 ? 8 : 1, groups = dim / width, patches = sequence - prefix_rows;
    size_t const thread = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (thread >= (size_t)rows * groups) return;
    size_t const row = thread / groups;
    int const c = (int)(thread % groups) * width, t = (int)(row % sequence);
    size_t const image = row / sequence;
    T *target = x + row * dim + c;
    float const *add = t < prefix_rows ? prefix + (size_t)t * dim + c : position + (size_t)(t - prefix_rows) * dim + c;
    T const *source = t < prefix_rows ? NULL : embedded + (image * patches + (t - prefix_rows)) * dim + c;
    if (width == 1) {
        *target = store<T>((source ? load(*source) : 0.f) + *add);
        return;
    }
    float4 const a0 = ((float4 const *)add)[0], a1 = ((float4 const *)add)[1];
    float sum[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    uint4 packed[sizeof(T) / 2]; /* 8 values of T */
    T *values = (T *)packed;
    if (source) {
#pragma unroll
        for (int piece = 0; piece < (int)sizeof(T) / 2; ++piece) packed[piece] = ((uint4 const *)source)[piece];
#pragma unroll
        for (int i = 0; i < 8; ++i) sum[i] = load(values[i]) + sum[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) values[i] = store<T>(sum[i]);
#pragma unroll
    for (int piece = 0; piece < (int)sizeof(T) / 2; ++piece) ((uint4 *)target)[piece] = packed[piece];
}

} // namespace uform_image

#define UFORM_IMAGE_KERNELS(T, suffix)                                                                                 \
    extern "C" __global__ void uform_image_patches_##suffix(T *out, uint8_t const *pixels, int side, int patch,       \
                                                            int grid, int depth, float mean0, float mean1,             \
                                                            float mean2, float std0, float std1, float std2, int rows) {\
        uform_image::patches<T>(out, pixels, side, patch, grid, depth, mean0, mean1, mean2, std0, std1, std2, rows);    \
    }                                                                                                                  \
    extern "C" __global__ void uform_image_assemble_##suffix(T *x, T const *embedded, float const *position,          \
                                                             float const *prefix, int sequence, int prefix_rows,       \
                                                             int dim, int rows) {                                      \
        uform_image::assemble<T>(x, embedded, position, prefix, sequence, prefix_rows, dim, rows);                     \
    }

UFORM_IMAGE_KERNELS(float, f32)
UFORM_IMAGE_KERNELS(__nv_bfloat16, bf16)
UFORM_IMAGE_KERNELS(__half, f16)
