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
 *  multiple of 8, so every row of the product is 16-byte aligned). One thread per output element.
 *
 *  `assemble`: the residual stream x [images sequence][dim] from the patch product (bias already
 *  added by its epilogue): `prefix` rows ([CLS] then the register tokens, f32) first, then each
 *  patch's product plus its position embedding (f32), as the package's ImageEncoder does.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace uform_image {

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T store(float v);
template <> __device__ __forceinline__ float store<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half store<__half>(float v) { return __float2half_rn(v); }

template <typename T>
__device__ void patches(T *out, uint8_t const *pixels, unsigned long long rows, int side, int patch, int grid, int depth,
                        float mean0, float mean1, float mean2, float std0, float std1, float std2) {
    unsigned long long const total = rows * (unsigned long long)depth;
    unsigned long long const stride = (unsigned long long)gridDim.x * blockDim.x;
    int const area = patch * patch, patches_per_image = grid * grid;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        unsigned long long const row = i / (unsigned long long)depth;
        int const column = (int)(i % (unsigned long long)depth);
        float value = 0.f;
        if (column < 3 * area) {
            unsigned long long const image = row / (unsigned long long)patches_per_image;
            int const local = (int)(row % (unsigned long long)patches_per_image);
            int const gy = local / grid, gx = local % grid;
            int const channel = column / area, y = column % area / patch, x = column % patch;
            uint8_t const v = pixels[(image * (unsigned long long)side + (unsigned long long)(gy * patch + y)) * 3ull *
                                         (unsigned long long)side +
                                     (unsigned long long)((gx * patch + x) * 3 + channel)];
            float const mean = channel == 0 ? mean0 : channel == 1 ? mean1 : mean2;
            float const deviation = channel == 0 ? std0 : channel == 1 ? std1 : std2;
            value = (__fdiv_rn((float)v, 255.f) - mean) / deviation;
        }
        out[i] = store<T>(value);
    }
}

template <typename T>
__device__ void assemble(T *x, T const *embedded, float const *position, float const *prefix, int images, int sequence,
                         int prefix_rows, int dim) {
    unsigned long long const total = (unsigned long long)images * (unsigned long long)sequence * (unsigned long long)dim;
    unsigned long long const stride = (unsigned long long)gridDim.x * blockDim.x;
    int const patches = sequence - prefix_rows;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        unsigned long long const row = i / (unsigned long long)dim;
        int const column = (int)(i % (unsigned long long)dim);
        int const image = (int)(row / (unsigned long long)sequence), t = (int)(row % (unsigned long long)sequence);
        float value;
        if (t < prefix_rows) value = prefix[(size_t)t * dim + column];
        else {
            int const p = t - prefix_rows;
            value = load(embedded[((size_t)image * patches + p) * dim + column]) + position[(size_t)p * dim + column];
        }
        x[i] = store<T>(value);
    }
}

} // namespace uform_image

#define UFORM_IMAGE_KERNELS(T, suffix)                                                                                 \
    extern "C" __global__ void uform_image_patches_##suffix(T *out, uint8_t const *pixels, unsigned long long rows,  \
                                                            int side, int patch, int grid, int depth, float mean0,     \
                                                            float mean1, float mean2, float std0, float std1,          \
                                                            float std2) {                                              \
        uform_image::patches<T>(out, pixels, rows, side, patch, grid, depth, mean0, mean1, mean2, std0, std1, std2);    \
    }                                                                                                                  \
    extern "C" __global__ void uform_image_assemble_##suffix(T *x, T const *embedded, float const *position,          \
                                                             float const *prefix, int images, int sequence,            \
                                                             int prefix_rows, int dim) {                               \
        uform_image::assemble<T>(x, embedded, position, prefix, images, sequence, prefix_rows, dim);                    \
    }

UFORM_IMAGE_KERNELS(float, f32)
UFORM_IMAGE_KERNELS(__nv_bfloat16, bf16)
UFORM_IMAGE_KERNELS(__half, f16)
