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
 *  The x86 vector passes (AVX2, AVX-512 VNNI) are in resize_x86.c; what both share in
 *  resize_private.h.
 */
#include "image/image.h"
#include "image/scratch.h"
#include "internal.h"
#include "image/resize_private.h"

#include <math.h>   // `ceil`
#include <string.h> // `memcpy`, `memset`

static double bicubic(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * -0.5;
    return 0.0;
}


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
    if (digits && channels >= 3 && use_vnni() && uform_resize_weight_digits(weights, count, digits)) {
        uform_resize_horizontal_vnni(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, digits,
                                     padded);
        return;
    }
#else
    (void)digits;
#endif
#if defined(UFORM_RESIZE_AVX2)
    if (use_avx2()) {
        uform_resize_horizontal_avx2(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, padded);
        return;
    }
#endif
    horizontal_pass_baseline(in, in_stride, rows, in_width, out, out_stride, count, weights, channels, padded);
}

static void vertical_pass(uint8_t const *in, size_t in_stride, size_t row0, uint8_t *out, size_t out_stride,
                          size_t rows, size_t width, weights_t const *weights, int32_t *sums, int32_t *digits) {
#if defined(UFORM_RESIZE_VNNI)
    if (digits && use_vnni() && uform_resize_weight_digits(weights, rows, digits)) {
        uform_resize_vertical_vnni(in, in_stride, row0, out, out_stride, rows, width, weights, digits);
        return;
    }
#else
    (void)digits;
#endif
#if defined(UFORM_RESIZE_AVX2)
    if (use_avx2()) {
        uform_resize_vertical_avx2(in, in_stride, row0, out, out_stride, rows, width, weights, sums);
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

/** The horizontal pass's buffers over rows of `in_width` pixels: the padded rows (AVX2: two rows
 *  of 4 bytes a pixel; VNNI: four rows interleaved, see `uform_resize_vnni_quads_bytes`) and the
 *  weights' 8-bit digits for `count` outputs. NULL where out of memory. */
static void horizontal_buffers(uform_image_scratch_t *scratch, size_t in_width, size_t bytes, size_t count,
                               weights_t const *horizontal, uint8_t **padded, int32_t **digits) {
    size_t padded_bytes = in_width * 8;
#if defined(UFORM_RESIZE_VNNI)
    size_t quads_bytes = uform_resize_vnni_quads_bytes(in_width, bytes);
    if (quads_bytes > padded_bytes) padded_bytes = quads_bytes;
#else
    (void)bytes;
#endif
    *padded = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_PADDED, padded_bytes);
    *digits = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_DIGITS,
                                          count * ((horizontal->ksize + 3) / 4) * 3 * sizeof(int32_t));
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
        /* Pillow 13 runs the vertical pass first where both run and the height shrinks by more than
         * twice what the width does; the 8-bit rounding between the passes makes the order show. */
        bool const vertical_first =
            need_horizontal && need_vertical && full_height > resized_height &&
            (long long)(full_height - resized_height) > 2 * ((long long)full_width - (long long)resized_width);
        size_t column_first = x0, column_last = x0 + pixels->width; /* input columns the horizontal pass reads */
        if (need_horizontal) {
            status = compute_weights(full_width, resized_width, left, side, scratch, UFORM_SCRATCH_HORIZONTAL,
                                     &horizontal);
            if (status != uform_status_ok_k) return status;
            if ((size_t)horizontal.bounds[0] < x0 ||
                (size_t)horizontal.bounds[2 * (side - 1)] + (size_t)horizontal.bounds[2 * (side - 1) + 1] >
                    x0 + pixels->width)
                return uform_fail(uform_status_invalid_argument_k, "image: the decoded region lacks columns");
            /* Vertical first: the horizontal pass reads a band of just the columns it needs. */
            if (vertical_first)
                column_first = (size_t)horizontal.bounds[0],
                column_last = (size_t)horizontal.bounds[2 * (side - 1)] + (size_t)horizontal.bounds[2 * (side - 1) + 1];
            for (size_t i = 0; i < side; ++i) horizontal.bounds[2 * i] -= (int)column_first;
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
        if (vertical_first) {
            /* The crop's rows over the band's columns, then the band's columns to the crop's. */
            size_t const band_width = column_last - column_first, band_stride = band_width * bytes;
            uint8_t *band = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_ROWS, side * band_stride);
            int32_t *sums = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_SUMS, band_stride * sizeof(int32_t));
            int32_t *vertical_digits = uform_image_scratch_reserve(
                scratch, UFORM_SCRATCH_VERTICAL_DIGITS, side * ((vertical.ksize + 3) / 4) * 3 * sizeof(int32_t));
            uint8_t *padded = NULL;
            int32_t *digits = NULL;
            horizontal_buffers(scratch, band_width, bytes, side, &horizontal, &padded, &digits);
            if (!band || !sums || !vertical_digits || !padded || !digits)
                return uform_fail(uform_status_out_of_memory_k, "image: no memory to resize");
            uint8_t const *band_source = source + (column_first - x0) * bytes;
            if (mode == uform_image_mode_i16_k) {
                vertical_pass16(band_source, source_stride, row_first, band, band_stride, side, band_width, &vertical);
                horizontal_pass16(band, band_stride, side, crop, crop_stride, side, &horizontal);
            } else {
                vertical_pass(band_source, source_stride, row_first, band, band_stride, side, band_stride, &vertical,
                              sums, vertical_digits);
                horizontal_pass(band, band_stride, side, band_width, crop, crop_stride, side, &horizontal, bytes,
                                padded, digits);
            }
        } else {
            /* Horizontal pass: the needed rows, the crop's columns only. */
            uint8_t const *columns = source; /* without a horizontal pass, the crop's columns */
            size_t columns_stride = source_stride;
            if (!need_horizontal) {
                if (left < x0 || left + side > x0 + pixels->width)
                    return uform_fail(uform_status_invalid_argument_k, "image: the decoded region lacks columns");
                columns = source + (left - x0) * bytes;
            } else {
                uint8_t *temporary = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_ROWS, rows * crop_stride);
                uint8_t *padded = NULL;
                int32_t *digits = NULL;
                horizontal_buffers(scratch, pixels->width, bytes, side, &horizontal, &padded, &digits);
                if (!temporary || !padded || !digits)
                    return uform_fail(uform_status_out_of_memory_k, "image: no memory to resize");
                if (mode == uform_image_mode_i16_k)
                    horizontal_pass16(source, source_stride, rows, temporary, crop_stride, side, &horizontal);
                else
                    horizontal_pass(source, source_stride, rows, pixels->width, temporary, crop_stride, side,
                                    &horizontal, bytes, padded, digits);
                columns = temporary, columns_stride = crop_stride;
            }
            if (need_vertical) {
                int32_t *sums =
                    uform_image_scratch_reserve(scratch, UFORM_SCRATCH_SUMS, crop_stride * sizeof(int32_t));
                int32_t *digits = uform_image_scratch_reserve(
                    scratch, UFORM_SCRATCH_VERTICAL_DIGITS, side * ((vertical.ksize + 3) / 4) * 3 * sizeof(int32_t));
                if (!sums || !digits) return uform_fail(uform_status_out_of_memory_k, "image: no memory to resize");
                if (mode == uform_image_mode_i16_k)
                    vertical_pass16(columns, columns_stride, row_first, crop, crop_stride, side, side, &vertical);
                else
                    vertical_pass(columns, columns_stride, row_first, crop, crop_stride, side, crop_stride, &vertical,
                                  sums, digits);
            } else {
                for (size_t y = 0; y < side; ++y)
                    memcpy(crop + y * crop_stride, columns + y * columns_stride, crop_stride);
            }
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


void uform_image_normalize(uint8_t const *rgb, size_t side, float const mean[3], float const std[3], float *chw) {
    size_t plane = side * side, done = 0;
#if defined(UFORM_RESIZE_VNNI)
    if (use_vnni()) done = uform_resize_normalize_avx512(rgb, plane, mean, std, chw);
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
