/**
 *  @file   decode.c
 *  @brief  JPEG (libjpeg-turbo's libjpeg API) and PNG (libspng) decoding from memory into PIL's
 *          modes, with the pixel limit checked against the header before any allocation.
 */
#include "image/image.h"
#include "image/scratch.h"
#include "internal.h"

#include <setjmp.h> // `setjmp`, `longjmp`
#include <stdio.h>  // `jpeglib.h` needs `FILE`
#include <stdlib.h> // `malloc`, `free`
#include <string.h> // `memcpy`, `memcmp`

#include <jpeglib.h>
#include <jerror.h>
#include <spng.h>

size_t uform_image_mode_bytes(uform_image_mode_t mode) {
    switch (mode) {
    case uform_image_mode_l_k: return 1;
    case uform_image_mode_la_k: return 2;
    case uform_image_mode_rgb_k: return 3;
    case uform_image_mode_rgba_k: return 4;
    case uform_image_mode_cmyk_k: return 4;
    case uform_image_mode_i16_k: return 2;
    case uform_image_mode_bilevel_k: return 1;
    case uform_image_mode_palette_k: return 3;
    }
    return 0;
}

char const *uform_image_mode_name(uform_image_mode_t mode) {
    static char const *const names[] = {"L", "LA", "RGB", "RGBA", "CMYK", "I;16", "1", "P"};
    return (unsigned)mode < sizeof(names) / sizeof(names[0]) ? names[mode] : "?";
}

void *uform_image_scratch_reserve(uform_image_scratch_t *scratch, size_t slot, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (scratch->capacities[slot] >= bytes) return scratch->buffers[slot];
    free(scratch->buffers[slot]);
    scratch->buffers[slot] = malloc(bytes);
    scratch->capacities[slot] = scratch->buffers[slot] ? bytes : 0;
    return scratch->buffers[slot];
}

void uform_image_scratch_free(uform_image_scratch_t *scratch) {
    if (!scratch) return;
    for (size_t i = 0; i < sizeof(scratch->buffers) / sizeof(scratch->buffers[0]); ++i) {
        free(scratch->buffers[i]);
        scratch->buffers[i] = NULL;
        scratch->capacities[i] = 0;
    }
}

static uform_status_t check_pixels(char const *format, size_t width, size_t height, size_t max_pixels) {
    if (width == 0 || height == 0)
        return uform_fail(uform_status_corrupt_file_k, "image: the %s header says %zu x %zu pixels, an empty image",
                          format, width, height);
    if (height > max_pixels / width)
        return uform_fail(uform_status_limit_exceeded_k,
                          "image: the %s header says %zu x %zu pixels, above the limit of %zu pixels "
                          "(a decompression bomb?)",
                          format, width, height, max_pixels);
    return uform_status_ok_k;
}

/* ---- JPEG ---- */

#define UFORM_JPEG_MAX_SCANS 1000
/** Pixels decoded past each side of the columns a resize reads (see `decode_jpeg`). */
#define UFORM_JPEG_CROP_MARGIN 16

typedef struct jpeg_state_t {
    struct jpeg_error_mgr manager; /* first: libjpeg's `cinfo->err` points here */
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    uform_status_t status;
    char message[JMSG_LENGTH_MAX + 64];
} jpeg_state_t;

static void jpeg_fail_exit(j_common_ptr cinfo) {
    jpeg_state_t *state = (jpeg_state_t *)cinfo->err;
    char text[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, text);
    /* A process this libjpeg does not implement (lossless, SOF3, came in libjpeg-turbo 3.0; PIL's wheels
     * bundle a newer one) is a legal file: UNSUPPORTED, not corrupt. */
    int const code = cinfo->err->msg_code;
    bool const unsupported = code == JERR_SOF_UNSUPPORTED || code == JERR_ARITH_NOTIMPL || code == JERR_NOT_COMPILED;
    snprintf(state->message, sizeof(state->message), "image: %s JPEG: %s", unsupported ? "unsupported" : "corrupt", text);
    state->status = code == JERR_OUT_OF_MEMORY ? uform_status_out_of_memory_k
                    : unsupported          ? uform_status_unsupported_k
                                           : uform_status_corrupt_file_k;
    longjmp(state->jump, 1);
}

static void jpeg_emit(j_common_ptr cinfo, int level) {
    jpeg_state_t *state = (jpeg_state_t *)cinfo->err;
    if (level >= 0) return; /* trace messages */
    /* Warnings: libjpeg pads a truncated file (even one missing only its EOI marker) with grey and
     * carries on; PIL raises "image file is truncated" instead, so do we. Not once every row is
     * out: PIL's reader then stops without looking for EOI, so a single-scan file whose data ends
     * in another marker segment decodes (a progressive one reads to its end before any row, and
     * fails). Other warnings (extraneous bytes, corrupt data it recovered from) PIL ignores, and
     * so do we. */
    j_decompress_ptr const decompress = (j_decompress_ptr)cinfo;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF &&
        !(decompress->output_height && decompress->output_scanline >= decompress->output_height)) {
        snprintf(state->message, sizeof(state->message),
                 "image: truncated JPEG: the data ends before the image does");
        state->status = uform_status_corrupt_file_k;
        longjmp(state->jump, 1);
    }
}

static void jpeg_progress(j_common_ptr cinfo) {
    jpeg_state_t *state = (jpeg_state_t *)cinfo->err;
    j_decompress_ptr decompress = (j_decompress_ptr)cinfo;
    if (decompress->input_scan_number > UFORM_JPEG_MAX_SCANS) {
        snprintf(state->message, sizeof(state->message), "image: corrupt JPEG: more than %d scans",
                 UFORM_JPEG_MAX_SCANS);
        state->status = uform_status_corrupt_file_k;
        longjmp(state->jump, 1);
    }
}

/* Everything the decoding touches after `setjmp` lives behind this pointer, so nothing needs to be
 * `volatile`. */
typedef struct jpeg_job_t {
    struct jpeg_decompress_struct cinfo;
    jpeg_state_t state;
    uint8_t *pixels;
    JSAMPROW row;
} jpeg_job_t;

static uform_status_t decode_jpeg(uint8_t const *data, size_t size, uform_image_decode_options_t const *options,
                                  size_t max_pixels, uform_image_scratch_t *scratch, uform_pixels_t *out) {
    jpeg_job_t *job = calloc(1, sizeof(jpeg_job_t));
    if (!job) return uform_fail(uform_status_out_of_memory_k, "image: no memory for a JPEG decoder");
    uform_status_t status = uform_status_ok_k;
    job->cinfo.err = jpeg_std_error(&job->state.manager);
    job->state.manager.error_exit = jpeg_fail_exit;
    job->state.manager.emit_message = jpeg_emit;
    job->state.progress.progress_monitor = jpeg_progress;
    if (setjmp(job->state.jump)) {
        status = uform_fail(job->state.status, "%s", job->state.message);
        jpeg_destroy_decompress(&job->cinfo);
        free(job);
        return status;
    }
    jpeg_create_decompress(&job->cinfo);
    job->cinfo.progress = &job->state.progress;
    jpeg_mem_src(&job->cinfo, data, (unsigned long)size);
    jpeg_read_header(&job->cinfo, TRUE);

    struct jpeg_decompress_struct *cinfo = &job->cinfo;
    status = check_pixels("JPEG", cinfo->image_width, cinfo->image_height, max_pixels);
    if (status != uform_status_ok_k) goto done;
    uform_image_mode_t mode;
    switch (cinfo->num_components) {
    case 1: cinfo->out_color_space = JCS_GRAYSCALE, mode = uform_image_mode_l_k; break;
    case 3: cinfo->out_color_space = JCS_RGB, mode = uform_image_mode_rgb_k; break;
    case 4: cinfo->out_color_space = JCS_CMYK, mode = uform_image_mode_cmyk_k; break;
    default:
        status = uform_fail(uform_status_corrupt_file_k, "image: a JPEG of %d components (1, 3 or 4 decode)",
                            cinfo->num_components);
        goto done;
    }
    if (options && options->jpeg_min_side) {
        /* DCT-domain downscaling by 1/2, 1/4 or 1/8 (the scales libjpeg-turbo has SIMD IDCTs for;
         * 3/8, 5/8, ... measured no faster than full size): the smallest keeping the shorter side at
         * or above the bound. */
        size_t shorter = cinfo->image_width < cinfo->image_height ? cinfo->image_width : cinfo->image_height;
        unsigned denominator = 1;
        while (denominator < 8 && (shorter + 2 * denominator - 1) / (2 * denominator) >= options->jpeg_min_side)
            denominator *= 2;
        cinfo->scale_num = 1;
        cinfo->scale_denom = denominator;
    }
    jpeg_start_decompress(cinfo);
    size_t full_width = cinfo->output_width, full_height = cinfo->output_height;
    size_t bytes = uform_image_mode_bytes(mode);
    if ((size_t)cinfo->output_components != bytes) {
        status = uform_fail(uform_status_corrupt_file_k, "image: libjpeg gives %d components for a %s JPEG",
                            cinfo->output_components, uform_image_mode_name(mode));
        goto done;
    }
    /* Only the rows and columns the resize reads. Rows outside are skipped (no IDCT, upsampling or
     * colour conversion; their data is still read, so a truncated file still fails). Columns:
     * libjpeg-turbo's `jpeg_crop_scanline` decodes whole iMCU columns from an aligned start, but its
     * fancy upsampling takes the cropped edges for image edges (replicated chroma), which changes
     * the outermost pixels: the crop asked for is therefore wider than the region by a margin of
     * UFORM_JPEG_CROP_MARGIN pixels on each side, so the changed pixels fall outside what the resize
     * reads (test_image compares every region with the whole decode, byte for byte). */
    size_t x0 = 0, x1 = full_width, y0 = 0, y1 = full_height;
    if (options && options->region_side) {
        status = uform_image_region(full_width, full_height, options->region_side, scratch, &x0, &x1, &y0, &y1);
        if (status != uform_status_ok_k) goto done;
        size_t start = x0 > UFORM_JPEG_CROP_MARGIN ? x0 - UFORM_JPEG_CROP_MARGIN : 0;
        size_t end = x1 + UFORM_JPEG_CROP_MARGIN < full_width ? x1 + UFORM_JPEG_CROP_MARGIN : full_width;
        x0 = 0, x1 = full_width;
        if ((end - start) * 8 < full_width * 7) { /* worth it: an eighth of the columns or more saved */
            JDIMENSION xoffset = (JDIMENSION)start, crop_width = (JDIMENSION)(end - start);
            jpeg_crop_scanline(cinfo, &xoffset, &crop_width);
            x0 = xoffset, x1 = (size_t)xoffset + crop_width;
            if (x1 > full_width || x0 > start || x1 < end) {
                status = uform_fail(uform_status_corrupt_file_k, "image: libjpeg crops columns %zu to %zu for %zu to %zu",
                                    x0, x1, start, end);
                goto done;
            }
        }
    }
    size_t width = x1 - x0, height = y1 - y0, stride = width * bytes;
    job->pixels = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_PIXELS, stride * height);
    if (!job->pixels) {
        status = uform_fail(uform_status_out_of_memory_k, "image: no memory for %zu x %zu decoded pixels", width,
                            height);
        goto done;
    }
    if (y0 > 0) jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
    while (cinfo->output_scanline < y1) {
        job->row = job->pixels + ((size_t)cinfo->output_scanline - y0) * stride;
        jpeg_read_scanlines(cinfo, &job->row, 1);
    }
    /* The rows after the region: skipping up to the end would mark the image finished without
     * reading its data (libjpeg-turbo sets EOI reached), so a file cut there would pass. Skip all
     * but the last row, then read that one: every byte is read, truncation fails as in a whole
     * decode. */
    if (y1 + 1 < full_height) jpeg_skip_scanlines(cinfo, (JDIMENSION)(full_height - y1 - 1));
    if (cinfo->output_scanline < full_height) {
        job->row = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_RAW, stride);
        if (!job->row) {
            status = uform_fail(uform_status_out_of_memory_k, "image: no memory for a row of %zu pixels", width);
            goto done;
        }
        jpeg_read_scanlines(cinfo, &job->row, 1);
    }
    if (!jpeg_finish_decompress(cinfo)) { /* it could not read on to the end: never silently */
        status = uform_fail(uform_status_corrupt_file_k, "image: truncated JPEG: the data ends before the image does");
        goto done;
    }
    if (mode == uform_image_mode_cmyk_k) /* PIL's "CMYK;I" raw mode: Adobe's inverted ink */
        for (size_t i = 0; i < stride * height; ++i) job->pixels[i] = (uint8_t)(255 - job->pixels[i]);
    *out = (uform_pixels_t){.width = width, .height = height, .stride = stride, .mode = mode, .data = job->pixels};
    if (width != full_width || height != full_height)
        out->full_width = full_width, out->full_height = full_height, out->x0 = x0, out->y0 = y0;
done:
    jpeg_destroy_decompress(&job->cinfo);
    free(job);
    return status;
}

/* ---- PNG ---- */

static uform_status_t spng_failure(int error, char const *what) {
    if (error == SPNG_EMEM) return uform_fail(uform_status_out_of_memory_k, "image: no memory %s", what);
    if (error == SPNG_ECHUNK_LIMITS)
        return uform_fail(uform_status_unsupported_k, "image: PNG %s: its ancillary chunks pass libspng's limits "
                          "(16 MiB each, 64 MiB and 1,000 chunks in all)", what);
    return uform_fail(uform_status_corrupt_file_k, "image: corrupt PNG %s: %s", what, spng_strerror(error));
}

/* A libspng decoder over `data`, its chunk CRCs checked as `critical` and `ancillary` say. */
static spng_ctx *png_context(uint8_t const *data, size_t size, int critical, int ancillary, int *error) {
    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return *error = SPNG_EMEM, NULL;
    /* Ancillary chunks (text, ICC profiles) are bounded: 16 MiB each, 64 MiB in all, and 1,000 of them
     * (libspng 0.7's SPNG_CHUNK_COUNT_LIMIT may only be lowered; PIL has no such limit). */
    spng_set_chunk_limits(ctx, (size_t)16 << 20, (size_t)64 << 20);
    if ((*error = spng_set_crc_action(ctx, critical, ancillary)) || (*error = spng_set_png_buffer(ctx, data, size))) {
        spng_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

static uform_status_t decode_png(uint8_t const *data, size_t size, size_t max_pixels, uform_image_scratch_t *scratch,
                                 uform_pixels_t *out) {
    /* Chunk CRCs as PIL checks them: every chunk before the first IDAT (IHDR, PLTE, text, ICC
     * profile...) must have a right CRC, and none from the first IDAT on is compared (PIL's loader
     * reads those CRCs without checking them), while zlib's Adler-32 of the image data is checked
     * (PIL raises "broken data stream" on a wrong one). So two passes of libspng:
     * - the chunks before the first IDAT alone (`spng_decode_chunks`), every CRC an error;
     * - the image with the ancillary CRC action SPNG_CRC_USE, under which libspng 0.7.3 (and every
     *   later release so far) computes no CRC for any chunk after IHDR, IDATs included (its
     *   `read_header` sets `skip_crc` for critical chunks too then; the CRC-32 of the compressed
     *   data was 1-6% of the decode, bench/RESULTS.md), while the critical action SPNG_CRC_ERROR keeps
     *   zlib's Adler-32 validation on (`inflateValidate`). test_image checks both halves: a wrong
     *   IDAT CRC decodes to PIL's pixels, a wrong Adler-32 or pre-IDAT CRC fails. */
    int error = 0;
    spng_ctx *ctx = png_context(data, size, SPNG_CRC_ERROR, SPNG_CRC_ERROR, &error);
    if (!ctx) return spng_failure(error, "buffer");
    uform_status_t status = uform_status_ok_k;
    struct spng_ihdr ihdr;
    if ((error = spng_get_ihdr(ctx, &ihdr))) {
        status = spng_failure(error, "header");
        goto done;
    }
    status = check_pixels("PNG", ihdr.width, ihdr.height, max_pixels);
    if (status != uform_status_ok_k) goto done;
    if ((error = spng_decode_chunks(ctx))) {
        status = spng_failure(error, "chunk");
        goto done;
    }
    spng_ctx_free(ctx);
    if (!(ctx = png_context(data, size, SPNG_CRC_ERROR, SPNG_CRC_USE, &error))) return spng_failure(error, "buffer");
    if ((error = spng_get_ihdr(ctx, &ihdr))) {
        status = spng_failure(error, "header");
        goto done;
    }

    size_t width = ihdr.width, height = ihdr.height;
    unsigned depth = ihdr.bit_depth;
    uform_image_mode_t mode;
    switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE:
        mode = depth == 1 ? uform_image_mode_bilevel_k : depth == 16 ? uform_image_mode_i16_k : uform_image_mode_l_k;
        break;
    case SPNG_COLOR_TYPE_TRUECOLOR: mode = uform_image_mode_rgb_k; break;
    case SPNG_COLOR_TYPE_INDEXED: mode = uform_image_mode_palette_k; break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
        /* PIL opens 16-bit grey+alpha as RGBA ("LA;16B" raw mode). */
        mode = depth == 16 ? uform_image_mode_rgba_k : uform_image_mode_la_k;
        break;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA: mode = uform_image_mode_rgba_k; break;
    default: status = uform_fail(uform_status_corrupt_file_k, "image: PNG colour type %u", ihdr.color_type); goto done;
    }
    size_t bytes = uform_image_mode_bytes(mode), stride = width * bytes;
    /* Where libspng's output is already our layout, it decodes straight into the pixels: 8 bits
     * (not palette) as they lie; 16-bit RGB, RGBA and grey+alpha through its RGB8 and RGBA8
     * formats, which keep each sample's high byte as PIL does (grey+alpha replicated into RGBA, as
     * PIL's "LA;16B"; no tRNS applied, as PIL's convert("RGB") applies none); 16-bit grey as
     * SPNG_FMT_PNG gives it, in host order ("I;16"). Palette images and 1, 2 and 4 bits of grey are
     * converted below (PIL's black past the palette's end). */
    int format = SPNG_FMT_PNG;
    if (depth == 16 && ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR) format = SPNG_FMT_RGB8;
    else if (depth == 16 && ihdr.color_type != SPNG_COLOR_TYPE_GRAYSCALE) format = SPNG_FMT_RGBA8;
    bool direct = depth >= 8 && ihdr.color_type != SPNG_COLOR_TYPE_INDEXED;
    size_t raw_size = 0;
    if ((error = spng_decoded_image_size(ctx, format, &raw_size))) {
        status = spng_failure(error, "size");
        goto done;
    }
    uint8_t *pixels = uform_image_scratch_reserve(scratch, UFORM_SCRATCH_PIXELS, stride * height);
    uint8_t *raw = direct ? pixels : uform_image_scratch_reserve(scratch, UFORM_SCRATCH_RAW, raw_size);
    if (!pixels || !raw) {
        status = uform_fail(uform_status_out_of_memory_k, "image: no memory for %zu x %zu decoded pixels", width,
                            height);
        goto done;
    }
    if (direct && raw_size != stride * height) {
        status = uform_fail(uform_status_corrupt_file_k, "image: libspng sizes a %zu x %zu PNG at %zu bytes", width,
                            height, raw_size);
        goto done;
    }
    /* The palette before the image: PLTE precedes the IDATs, and asked for after them libspng reads
     * on to IEND, which PIL never needs (a palette PNG cut after its image data decodes there). */
    struct spng_plte plte = {0};
    if (ihdr.color_type == SPNG_COLOR_TYPE_INDEXED && (error = spng_get_plte(ctx, &plte))) {
        status = spng_failure(error, "palette");
        goto done;
    }
    /* libspng ORs the pixels of interlaced images of 1, 2 and 4 bits into place: start from zeros. */
    if (depth < 8) memset(raw, 0, raw_size);
    if ((error = spng_decode_image(ctx, raw, raw_size, format, 0))) {
        status = spng_failure(error, "data");
        goto done;
    }
    size_t raw_stride = raw_size / height;
    if (!direct) {
        for (size_t y = 0; y < height; ++y) {
            uint8_t const *in = raw + y * raw_stride;
            uint8_t *row = pixels + y * stride;
            unsigned mask = (1u << depth) - 1;
            for (size_t x = 0; x < width; ++x) {
                size_t bit = x * depth;
                unsigned value = (in[bit / 8] >> (8 - depth - bit % 8)) & mask;
                if (mode == uform_image_mode_palette_k) {
                    if (value < plte.n_entries) {
                        row[3 * x] = plte.entries[value].red;
                        row[3 * x + 1] = plte.entries[value].green;
                        row[3 * x + 2] = plte.entries[value].blue;
                    } else { /* past the palette's end PIL gives black */
                        row[3 * x] = row[3 * x + 1] = row[3 * x + 2] = 0;
                    }
                } else if (mode == uform_image_mode_bilevel_k) {
                    row[x] = value ? 255 : 0;
                } else { /* grey of 2 or 4 bits, scaled as PIL's "L;2" and "L;4" unpackers */
                    row[x] = (uint8_t)(value * (255 / mask));
                }
            }
        }
    }
    *out = (uform_pixels_t){.width = width, .height = height, .stride = stride, .mode = mode, .data = pixels};
done:
    spng_ctx_free(ctx);
    return status;
}

uform_status_t uform_image_decode(uform_image_t const *image, uform_image_decode_options_t const *options,
                                  uform_image_scratch_t *scratch, uform_pixels_t *pixels) {
    if (!image || !scratch || !pixels)
        return uform_fail(uform_status_invalid_argument_k, "image: NULL %s",
                          !image ? "image" : !scratch ? "scratch" : "pixels");
    size_t max_pixels = options && options->max_pixels ? options->max_pixels : UFORM_IMAGE_DEFAULT_MAX_PIXELS;
    if (image->width) { /* raw RGB pixels, borrowed */
        size_t stride = image->stride ? image->stride : 3 * image->width;
        if (!image->data)
            return uform_fail(uform_status_invalid_argument_k, "image: NULL data for %zu x %zu raw pixels",
                              image->width, image->height);
        if (image->height == 0)
            return uform_fail(uform_status_invalid_argument_k, "image: raw pixels of zero height");
        if (image->width > SIZE_MAX / 3) /* before `3 * width` is formed anywhere, the default stride included */
            return uform_fail(uform_status_invalid_argument_k,
                              "image: raw pixels %zu wide; a row of 3 bytes a pixel would pass the address space",
                              image->width);
        if (stride < 3 * image->width)
            return uform_fail(uform_status_invalid_argument_k,
                              "image: a stride of %zu bytes is shorter than a row of %zu RGB pixels", stride,
                              image->width);
        if (image->height - 1 > (SIZE_MAX - 3 * image->width) / stride ||
            image->size < stride * (image->height - 1) + 3 * image->width)
            return uform_fail(uform_status_invalid_argument_k,
                              "image: %zu bytes of raw pixels are fewer than %zu x %zu RGB pixels with a stride "
                              "of %zu need",
                              image->size, image->width, image->height, stride);
        *pixels = (uform_pixels_t){.width = image->width, .height = image->height, .stride = stride,
                                   .mode = uform_image_mode_rgb_k, .data = image->data};
        return uform_status_ok_k;
    }
    uint8_t const *data = image->data;
    if (!data || image->size == 0) return uform_fail(uform_status_corrupt_file_k, "image: empty data (0 bytes)");
    static uint8_t const png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (image->size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return decode_jpeg(data, image->size, options, max_pixels, scratch, pixels);
    if (image->size >= 8 && memcmp(data, png_signature, 8) == 0)
        return decode_png(data, image->size, max_pixels, scratch, pixels);
    char hex[3 * 8 + 1] = "";
    for (size_t i = 0; i < image->size && i < 8; ++i) snprintf(hex + 3 * i, 4, " %02x", data[i]);
    return uform_fail(uform_status_corrupt_file_k, "image: neither JPEG nor PNG (%zu bytes starting%s)", image->size,
                      hex);
}

void uform_image_to_rgb(uform_pixels_t const *pixels, uint8_t *rgb, size_t rgb_stride) {
    for (size_t y = 0; y < pixels->height; ++y)
        uform_image_row_to_rgb(pixels->mode, pixels->data + y * pixels->stride, pixels->width, rgb + y * rgb_stride);
}

uform_status_t uform_image_decode_rgb(uform_image_t const *image, size_t max_pixels, uint8_t **rgb, size_t *width,
                                      size_t *height) {
    if (!rgb || !width || !height)
        return uform_fail(uform_status_invalid_argument_k, "image: NULL output pointer");
    *rgb = NULL;
    uform_image_scratch_t scratch = {0};
    uform_pixels_t pixels;
    uform_image_decode_options_t options = {.max_pixels = max_pixels};
    uform_status_t status = uform_image_decode(image, &options, &scratch, &pixels);
    if (status == uform_status_ok_k) {
        uint8_t *out = malloc(pixels.width * pixels.height * 3);
        if (!out) {
            status = uform_fail(uform_status_out_of_memory_k, "image: no memory for %zu x %zu RGB pixels", pixels.width,
                                pixels.height);
        } else {
            uform_image_to_rgb(&pixels, out, pixels.width * 3);
            *rgb = out, *width = pixels.width, *height = pixels.height;
        }
    }
    uform_image_scratch_free(&scratch);
    return status;
}
