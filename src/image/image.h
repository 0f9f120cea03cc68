/**
 *  @file   image.h
 *  @brief  Image decoding (JPEG through libjpeg-turbo, PNG through libspng, or raw RGB pixels) and
 *          the `uform` package's preprocessing, pixel for pixel: torchvision's `Resize(side,
 *          BICUBIC)` on the image as PIL opened it, `convert("RGB")`, `CenterCrop(side)`,
 *          `ToTensor()` and `Normalize(mean, std)`. Internal only; the image verbs call it.
 *
 *  What "as PIL does" means here (Pillow 13.0, the reference the tests' fixtures were made with):
 *  - A decoded image keeps PIL's mode (`uform_image_mode_t`): the resize runs in that mode, before
 *    the conversion to RGB, as torchvision's pipeline does. So RGBA and LA are resized with
 *    premultiplied alpha (PIL's RGBa / La round trip), CMYK is resized as ink and converted after,
 *    16-bit grey ("I;16") is resized in 16 bits and then clipped (not scaled) to 8 bits, palette and
 *    1-bit images are resized by nearest neighbour.
 *  - Conversions to RGB: grey is replicated; alpha is dropped, never composited; CMYK becomes
 *    `255 - k - c * (255 - k) / 255` (PIL's rounding); 16-bit RGB and RGBA keep their high bytes;
 *    2- and 4-bit grey are scaled to 8 bits; indices past the palette's end are black (as
 *    Pillow 13 gives them); transparency chunks are ignored.
 *  - JPEG: libjpeg's default (accurate integer) IDCT and fancy upsampling, as PIL decodes; CMYK and
 *    YCCK JPEGs are taken as Adobe-inverted CMYK, as PIL does. EXIF orientation is not applied.
 *
 *  Bad input never crashes or allocates without bound:
 *  - CORRUPT_FILE: empty data, neither JPEG nor PNG, a truncated file (a JPEG cut anywhere before
 *    its EOI marker: libjpeg's "premature end" warning, after which it would pad with grey, is an
 *    error here, as PIL raises "image file is truncated"), corrupt data libjpeg or libspng reject
 *    (a PNG's zlib Adler-32 included, as PIL), a wrong CRC on any PNG chunk before the first IDAT
 *    (PIL refuses those; the CRCs of the IDATs and of the chunks after them PIL does not check, and
 *    neither do we), zero width or height, 12-bit JPEG, 2-component JPEG, a progressive JPEG of
 *    more than 1000 scans. The message names what was wrong. Data after the image (after a JPEG's
 *    EOI or a PNG's IEND) is ignored, as PIL ignores it.
 *  - LIMIT_EXCEEDED: a header promising more than `max_pixels` pixels (a decompression bomb, such as
 *    a 100,000 x 100,000 PNG), checked against the header before anything is allocated; or a resize
 *    whose long side would pass 2^24 pixels (a 1 x 100,000 strip resized to 224 wide).
 *  - INVALID_ARGUMENT: NULL pointers, raw pixels whose `size` is shorter than `stride * (height - 1)
 *    + 3 * width`, a stride below `3 * width`, a zero side, a zero deviation.
 *  - OUT_OF_MEMORY.
 *
 *  Threads: every function is reentrant; a scratch belongs to one thread at a time.
 */
#ifndef UFORM_IMAGE_IMAGE_H
#define UFORM_IMAGE_IMAGE_H

#include <uform.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** @brief PIL's own threshold for `DecompressionBombError` (twice `Image.MAX_IMAGE_PIXELS`). The
 *  default `max_pixels` when a caller passes 0. */
#define UFORM_IMAGE_DEFAULT_MAX_PIXELS ((size_t)178956970)

/** @brief The longest side a resize may produce (torchvision makes 1 x N strips 224 x 224N). */
#define UFORM_IMAGE_MAX_RESIZED_SIDE ((size_t)1 << 24)

/** @brief A decoded image's pixel layout, named after the PIL mode it stands for. */
typedef enum uform_image_mode_t {
    uform_image_mode_l_k = 0,       /**< 1 byte: grey ("L"). */
    uform_image_mode_la_k = 1,      /**< 2 bytes: grey, alpha ("LA"). */
    uform_image_mode_rgb_k = 2,     /**< 3 bytes ("RGB"). */
    uform_image_mode_rgba_k = 3,    /**< 4 bytes, straight alpha ("RGBA"). */
    uform_image_mode_cmyk_k = 4,    /**< 4 bytes of ink, Adobe's inversion undone ("CMYK"). */
    uform_image_mode_i16_k = 5,     /**< 2 bytes: host-endian 16-bit grey ("I;16"). */
    uform_image_mode_bilevel_k = 6, /**< 1 byte, 0 or 255, resized by nearest neighbour ("1"). */
    uform_image_mode_palette_k = 7, /**< 3 bytes: palette entries looked up, resized by nearest
                                         neighbour, as PIL resizes "P" images. */
} uform_image_mode_t;

/** @brief Bytes per pixel of a mode. */
size_t uform_image_mode_bytes(uform_image_mode_t mode);

/** @brief A PIL mode's name ("RGB", "I;16", ...). */
char const *uform_image_mode_name(uform_image_mode_t mode);

/** @brief Decoded pixels: row `y` at `data + y * stride`. Borrowed: they live in a scratch (or are
 *  the caller's raw pixels) until its next use. */
typedef struct uform_pixels_t {
    size_t width, height, stride;
    uform_image_mode_t mode;
    uint8_t const *data;
    /** When only a region was decoded (`region_side`): the full image's size, and where the region
     *  starts in it. `full_width == 0` means the pixels are the whole image. */
    size_t full_width, full_height, x0, y0;
} uform_pixels_t;

/** @brief Buffers reused from one image to the next (decoded pixels, resize rows, coefficients).
 *  Zero-initialise; release with `uform_image_scratch_free`. One thread at a time. */
typedef struct uform_image_scratch_t {
    void *buffers[12];
    size_t capacities[12];
} uform_image_scratch_t;

void uform_image_scratch_free(uform_image_scratch_t *scratch);

/** @brief How to decode. Zero-initialised means: PIL's pixel limit, full resolution. */
typedef struct uform_image_decode_options_t {
    size_t max_pixels; /**< Refuse headers promising more pixels than this; 0 takes the default. */
    /** Nonzero: a JPEG may be decoded at a reduced scale (libjpeg's DCT scaling by 1/2, 1/4 or 1/8)
     *  as long as its shorter side stays at least this many pixels. Faster for large photos (4x for
     *  12 megapixels), but the pixels are no longer PIL's (a mean 0.5 to 2 levels off, see
     *  bench/RESULTS.md): the exact path is the default. */
    size_t jpeg_min_side;
    /** Nonzero: decode only the rows and columns a resize and crop to this side reads (JPEG, through
     *  libjpeg-turbo's `jpeg_skip_scanlines` and `jpeg_crop_scanline`, the columns with a margin of
     *  16 pixels each side, where the cropped upsampling's edges may differ; the whole file is still
     *  read, so truncation is still caught). The pixels the resize reads are those of the whole
     *  decode (the tests check it); `uform_pixels_t` says where the region lies. */
    size_t region_side;
} uform_image_decode_options_t;

/**
 *  @brief Decodes an image (encoded bytes when `image->width` is 0, else raw RGB pixels, borrowed
 *  without a copy) into its PIL mode. `pixels->data` lives in `scratch` (or the caller's buffer).
 */
uform_status_t uform_image_decode(uform_image_t const *image, uform_image_decode_options_t const *options,
                                  uform_image_scratch_t *scratch, uform_pixels_t *pixels);

/** @brief Converts decoded pixels to 8-bit RGB as PIL's `convert("RGB")`: `3 * width` bytes per row
 *  at `rgb + y * rgb_stride`. */
void uform_image_to_rgb(uform_pixels_t const *pixels, uint8_t *rgb, size_t rgb_stride);

/**
 *  @brief Decodes and converts to RGB into a new buffer: `*rgb` (`3 * width * height` bytes, rows
 *  packed) is the caller's to `free`.
 */
uform_status_t uform_image_decode_rgb(uform_image_t const *image, size_t max_pixels, uint8_t **rgb,
                                      size_t *width, size_t *height);

/** @brief What the model's preprocessing is. */
typedef struct uform_image_preprocess_options_t {
    size_t side;      /**< The model's image size: the shorter side is resized to it, then cropped. */
    float mean[3];    /**< Normalisation means per channel (R, G, B). */
    float std[3];     /**< Normalisation deviations per channel; none may be 0. */
    uform_image_decode_options_t decode;
} uform_image_preprocess_options_t;

/** @brief The torchvision geometry for an image of `width` x `height`: the resized size and the crop
 *  offsets (round half to even, as Python's `round`). LIMIT_EXCEEDED past the resize limit. */
uform_status_t uform_image_geometry(size_t width, size_t height, size_t side, size_t *resized_width,
                                    size_t *resized_height, size_t *left, size_t *top);

/**
 *  @brief The whole preprocessing of one image. Writes `3 * side * side` floats in CHW order to
 *  `chw` (may be NULL) and, when `rgb` is not NULL, the `side * side * 3` bytes of RGB after the
 *  resize and the crop (HWC), the 8-bit pixels PIL would hold.
 *
 *  @code{.c}
 *  uform_image_scratch_t scratch = {0};
 *  uform_image_preprocess_options_t options = {.side = 224, .mean = {0.48145466f, 0.4578275f, 0.40821073f},
 *                                              .std = {0.26862954f, 0.26130258f, 0.27577711f}};
 *  uform_image_t image = {.data = jpeg_bytes, .size = jpeg_size};
 *  float *chw = malloc(3 * 224 * 224 * sizeof(float));
 *  if (uform_image_preprocess(&image, &options, &scratch, chw, NULL) != uform_status_ok_k)
 *      fprintf(stderr, "image: %s\n", uform_error_message());
 *  uform_image_scratch_free(&scratch);
 *  @endcode
 */
uform_status_t uform_image_preprocess(uform_image_t const *image, uform_image_preprocess_options_t const *options,
                                      uform_image_scratch_t *scratch, float *chw, uint8_t *rgb);

/** @brief The input rows `[*y0, *y1)` and columns `[*x0, *x1)` a resize and crop of a `width` x
 *  `height` image to `side` reads. Uses the scratch's weight slots. */
uform_status_t uform_image_region(size_t width, size_t height, size_t side, uform_image_scratch_t *scratch, size_t *x0,
                                  size_t *x1, size_t *y0, size_t *y1);

/** @brief The resize, crop and RGB conversion alone, on decoded pixels: `side * side * 3` bytes. */
uform_status_t uform_image_resize_crop(uform_pixels_t const *pixels, size_t side, uform_image_scratch_t *scratch,
                                       uint8_t *rgb);

/** @brief `ToTensor` and `Normalize` exactly as torch does them in float32:
 *  `(v / 255.f - mean[c]) / std[c]`, from HWC bytes to CHW floats. */
void uform_image_normalize(uint8_t const *rgb, size_t side, float const mean[3], float const std[3], float *chw);

/** @brief Tests only: `false` makes the resize take its portable path even where AVX2 runs (both
 *  give the same bytes; the test checks it). Process-wide. */
void uform_image_use_simd(bool enabled);

/** @brief Tests and benchmarks only: the widest vector path the resize may take, where the CPU has
 *  it: 2 (the default) AVX-512 VNNI (F, BW, VL, VNNI, VBMI) then AVX2, 1 AVX2 at most, 0 portable.
 *  Every path gives the same bytes. Process-wide. */
void uform_image_set_simd(int level);

#endif // UFORM_IMAGE_IMAGE_H
