/**
 *  @file   fuzz_image.c
 *  @brief  libFuzzer target for image decoding and preprocessing: any bytes go through
 *          `uform_image_decode` (JPEG, PNG, neither), and what decodes goes through the RGB
 *          conversion and the resize and crop to a side picked from the input's last byte, on the
 *          exact path or (odd sizes) the DCT-scaled JPEG path. One scratch persists across inputs,
 *          as a thread's does across a batch. Every status is acceptable; crashes, leaks, undefined
 *          behaviour and unbounded allocations are not (the pixel limit is 4 Mpx here).
 */
#include "image/image.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size);

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size) {
    static uform_image_scratch_t scratch; /* reused, as a worker thread reuses its own */
    static uint8_t crop[97 * 97 * 3];
    static float chw[3 * 97 * 97];
    uform_image_t image = {.data = data, .size = size};
    size_t side = size ? 1 + data[size - 1] % 97 : 1;
    uform_image_preprocess_options_t options = {
        .side = side, .mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f},
        .decode = {.max_pixels = (size_t)1 << 22, .jpeg_min_side = size % 2 ? side : 0}};
    uform_pixels_t pixels;
    if (uform_image_decode(&image, &options.decode, &scratch, &pixels) == uform_status_ok_k) {
        uint8_t *rgb = malloc(pixels.width * 3);
        if (rgb) {
            for (size_t y = 0; y < pixels.height; y += 1 + pixels.height / 7) {
                uform_pixels_t row = pixels;
                row.data += y * pixels.stride, row.height = 1;
                uform_image_to_rgb(&row, rgb, pixels.width * 3);
            }
            free(rgb);
        }
        uform_image_resize_crop(&pixels, side, &scratch, crop);
    }
    uform_image_preprocess(&image, &options, &scratch, chw, crop);
    return 0;
}
