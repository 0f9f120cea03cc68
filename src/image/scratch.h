/**
 *  @file   scratch.h
 *  @brief  What decode.c and resize.c share: the scratch slots and the per-row RGB conversion.
 */
#ifndef UFORM_IMAGE_SCRATCH_H
#define UFORM_IMAGE_SCRATCH_H

#include "image/image.h"

enum {
    UFORM_SCRATCH_PIXELS = 0,     /**< Decoded pixels. */
    UFORM_SCRATCH_RAW = 1,        /**< libspng's output before conversion; premultiplied input rows. */
    UFORM_SCRATCH_ROWS = 2,       /**< The horizontal pass's rows. */
    UFORM_SCRATCH_VERTICAL = 3,   /**< Vertical coefficients and bounds. */
    UFORM_SCRATCH_HORIZONTAL = 4, /**< Horizontal coefficients and bounds. */
    UFORM_SCRATCH_CROP = 5,       /**< The resized crop, in the decoded mode. */
    UFORM_SCRATCH_SUMS = 6,       /**< The vertical pass's accumulator row. */
    UFORM_SCRATCH_RGB = 7,        /**< The RGB crop when the caller does not want it. */
    UFORM_SCRATCH_PADDED = 8,     /**< Input rows padded to 4 bytes a pixel (two rows interleaved for AVX2). */
    UFORM_SCRATCH_DIGITS = 9,     /**< Horizontal weights split into 8-bit digits (AVX-512 VNNI). */
    UFORM_SCRATCH_VERTICAL_DIGITS = 10, /**< Vertical weights split into 8-bit digits (AVX-512 VNNI). */
};

/** @brief Slot `slot` of at least `bytes` bytes (contents not kept), or NULL when out of memory. */
void *uform_image_scratch_reserve(uform_image_scratch_t *scratch, size_t slot, size_t bytes);

/** @brief One row of `width` pixels of `mode` to RGB, as PIL's `convert("RGB")`. */
void uform_image_row_to_rgb(uform_image_mode_t mode, uint8_t const *in, size_t width, uint8_t *rgb);

#endif // UFORM_IMAGE_SCRATCH_H
