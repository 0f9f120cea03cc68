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
 *  multiple of 8, so every row of the product is 16-byte aligned). One block per patch row.
 *
 *  `assemble`: the residual stream x [images sequence][dim] from the patch product (bias already
 *  added by its epilogue): `prefix` rows ([CLS] then the register tokens, f32) first, then each
 *  patch's product plus its position embedding (f32), as the package's ImageEncoder does.
 */
#include <stdint.h> // text_gpu.cuh (which kernels.cu includes first) brings cuda_bf16.h, cuda_fp16.h and uform_text

namespace uform_image {

using uform_text::load; // text_gpu.cuh's conversions (kernels.cu includes it first)
using uform_text::store;

/** One block per patch row (image, patch), its threads over the row's `depth` columns. */
template <typename T>
__device__ void patches(T *out, uint8_t const *pixels, int side, int patch, int grid, int depth, float mean0,
                        float mean1, float mean2, float std0, float std1, float std2) {
    int const row = blockIdx.x, area = patch * patch, patches_per_image = grid * grid;
    int const image = row / patches_per_image, local = row % patches_per_image;
    int const gy = local / grid, gx = local % grid;
    uint8_t const *origin = pixels + ((size_t)image * side + (size_t)gy * patch) * 3 * side + (size_t)gx * patch * 3;
    T *target = out + (size_t)row * depth;
    for (int column = threadIdx.x; column < depth; column += blockDim.x) {
        float value = 0.f;
        if (column < 3 * area) {
            int const channel = column / area, y = column % area / patch, x = column % patch;
            float const v = (float)origin[(size_t)y * 3 * side + x * 3 + channel];
            float const mean = channel == 0 ? mean0 : channel == 1 ? mean1 : mean2;
            float const deviation = channel == 0 ? std0 : channel == 1 ? std1 : std2;
            value = __fdiv_rn(__fdiv_rn(v, 255.f) - mean, deviation);
        }
        target[column] = store<T>(value);
    }
}

/** One block per token row (image, t), its threads over `dim`. */
template <typename T>
__device__ void assemble(T *x, T const *embedded, float const *position, float const *prefix, int sequence,
                         int prefix_rows, int dim) {
    int const row = blockIdx.x, image = row / sequence, t = row % sequence, patches = sequence - prefix_rows;
    T *target = x + (size_t)row * dim;
    if (t < prefix_rows) {
        for (int c = threadIdx.x; c < dim; c += blockDim.x) target[c] = store<T>(prefix[(size_t)t * dim + c]);
        return;
    }
    int const p = t - prefix_rows;
    T const *source = embedded + ((size_t)image * patches + p) * dim;
    float const *pos = position + (size_t)p * dim;
    for (int c = threadIdx.x; c < dim; c += blockDim.x) target[c] = store<T>(load(source[c]) + pos[c]);
}

} // namespace uform_image

#define UFORM_IMAGE_KERNELS(T, suffix)                                                                                 \
    extern "C" __global__ void uform_image_patches_##suffix(T *out, uint8_t const *pixels, int side, int patch,       \
                                                            int grid, int depth, float mean0, float mean1,             \
                                                            float mean2, float std0, float std1, float std2) {         \
        uform_image::patches<T>(out, pixels, side, patch, grid, depth, mean0, mean1, mean2, std0, std1, std2);          \
    }                                                                                                                  \
    extern "C" __global__ void uform_image_assemble_##suffix(T *x, T const *embedded, float const *position,          \
                                                             float const *prefix, int sequence, int prefix_rows,       \
                                                             int dim) {                                                \
        uform_image::assemble<T>(x, embedded, position, prefix, sequence, prefix_rows, dim);                           \
    }

UFORM_IMAGE_KERNELS(float, f32)
UFORM_IMAGE_KERNELS(__nv_bfloat16, bf16)
UFORM_IMAGE_KERNELS(__half, f16)
