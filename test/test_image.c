/**
 *  @file   test_image.c
 *  @brief  Image decoding and preprocessing against PIL, pixel for pixel: every case of
 *          test/image/manifest.tsv (made by test/image/make_fixtures.py with Pillow 13.0.0), raw
 *          pixels, the DCT-scaled JPEG path, and every error path with its status and message.
 */
#include "check.h"
#include "image/image.h"

#include <math.h>
#include <pthread.h>
#include <spng.h>
#include <stdint.h>

#ifndef UFORM_IMAGE_FIXTURES
#error "UFORM_IMAGE_FIXTURES names test/image"
#endif

static float const clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
static float const clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};

static uint8_t *read_file(char const *relative, size_t *size) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", UFORM_IMAGE_FIXTURES, relative);
    FILE *file = fopen(path, "rb");
    if (!file) {
        fprintf(stderr, "cannot open %s\n", path);
        return NULL;
    }
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    uint8_t *data = malloc(length > 0 ? (size_t)length : 1);
    *size = length > 0 && fread(data, 1, (size_t)length, file) == (size_t)length ? (size_t)length : 0;
    fclose(file);
    return data;
}

/* The expected pixels, read with libspng directly (not through the code under test). */
static uint8_t *read_expected(char const *relative, size_t side) {
    size_t size = 0;
    uint8_t *png = read_file(relative, &size);
    if (!png) return NULL;
    spng_ctx *ctx = spng_ctx_new(0);
    spng_set_png_buffer(ctx, png, size);
    struct spng_ihdr ihdr;
    uint8_t *rgb = NULL;
    size_t length = 0;
    if (!spng_get_ihdr(ctx, &ihdr) && ihdr.width == side && ihdr.height == side &&
        !spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &length) && length == side * side * 3) {
        rgb = malloc(length);
        if (spng_decode_image(ctx, rgb, length, SPNG_FMT_RGB8, 0)) free(rgb), rgb = NULL;
    }
    spng_ctx_free(ctx);
    free(png);
    return rgb;
}

static uint64_t fnv1a64(uint8_t const *data, size_t size) {
    uint64_t hash = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 0x100000001B3ull;
    return hash;
}

static uform_status_t status_named(char const *name) {
    for (int s = 0; s <= uform_status_pending_k; ++s)
        if (!strcmp(uform_status_name((uform_status_t)s), name)) return (uform_status_t)s;
    return (uform_status_t)-1;
}

typedef struct totals_t {
    size_t cases, pixels, exact, off_by_one, worse;
    int max_difference;
} totals_t;

/* Compares a crop with PIL's; returns the largest difference and counts into `totals`. */
static int compare(uint8_t const *mine, uint8_t const *theirs, size_t bytes, totals_t *totals) {
    int largest = 0;
    for (size_t i = 0; i < bytes; ++i) {
        int d = abs((int)mine[i] - (int)theirs[i]);
        if (d > largest) largest = d;
        totals->pixels++;
        if (d == 0) totals->exact++;
        else if (d == 1) totals->off_by_one++;
        else totals->worse++;
    }
    if (largest > totals->max_difference) totals->max_difference = largest;
    return largest;
}

static void check_floats(uint8_t const *rgb, float const *chw, size_t side) {
    size_t plane = side * side, wrong = 0;
    for (size_t i = 0; i < plane; ++i)
        for (size_t c = 0; c < 3; ++c) {
            float expected = ((float)rgb[3 * i + c] / 255.0f - clip_mean[c]) / clip_std[c];
            if (memcmp(&expected, &chw[c * plane + i], sizeof(float))) ++wrong;
        }
    CHECK(wrong == 0);
}

static void test_manifest(uform_image_scratch_t *scratch, char const *path) {
    size_t manifest_size = 0;
    char *manifest = (char *)read_file("manifest.tsv", &manifest_size);
    CHECK_FATAL(manifest && manifest_size);
    manifest = realloc(manifest, manifest_size + 1);
    manifest[manifest_size] = '\0';
    totals_t totals = {0};
    size_t bad_cases = 0;
    for (char *line = strtok(manifest, "\n"), *next; line; line = next) {
        next = strtok(NULL, "\n");
        if (line[0] == '#') continue;
        char *fields[8] = {0};
        size_t count = 0;
        for (char *cursor = line; count < 8; ++count) {
            fields[count] = cursor;
            char *tab = strchr(cursor, '\t');
            if (!tab) {
                ++count;
                break;
            }
            *tab = '\0';
            cursor = tab + 1;
        }
        CHECK_FATAL(count >= 7);
        char const *kind = fields[0], *file = fields[1];
        size_t side = strtoul(fields[2], NULL, 10);
        size_t size = 0;
        uint8_t *data = read_file(file, &size);
        CHECK_FATAL(data);
        uform_image_t image = {.data = data, .size = size};
        uform_image_preprocess_options_t options = {.side = side ? side : 64};
        memcpy(options.mean, clip_mean, sizeof(clip_mean));
        memcpy(options.std, clip_std, sizeof(clip_std));
        if (!strcmp(kind, "bad")) {
            uform_status_t expected = status_named(fields[3]);
            uform_pixels_t pixels;
            CHECK_STATUS(uform_image_decode(&image, NULL, scratch, &pixels), expected);
            CHECK_MESSAGE(fields[6]);
            CHECK_MESSAGE("image: ");
            float chw[3 * 64 * 64];
            CHECK_STATUS(uform_image_preprocess(&image, &options, scratch, chw, NULL), expected);
            CHECK_MESSAGE(fields[6]);
            ++bad_cases;
            free(data);
            continue;
        }
        /* Decoding: the bytes of PIL's convert("RGB"), by hash. */
        size_t width = 0, height = 0;
        uint8_t *rgb = NULL;
        CHECK_STATUS(uform_image_decode_rgb(&image, 0, &rgb, &width, &height), uform_status_ok_k);
        if (rgb) {
            CHECK(width == strtoul(fields[4], NULL, 10) && height == strtoul(fields[5], NULL, 10));
            uint64_t hash = fnv1a64(rgb, width * height * 3);
            if (hash != strtoull(fields[6], NULL, 16)) {
                fprintf(stderr, "%s: decoded RGB differs from PIL's convert(\"RGB\") (%s)\n", file, fields[7]);
                ++check_failures;
            }
            free(rgb);
        }
        /* Preprocessing: the crop, pixel for pixel, and the floats. */
        uint8_t *expected = read_expected(fields[3], side);
        CHECK_FATAL(expected);
        uint8_t *crop = malloc(side * side * 3);
        float *chw = malloc(side * side * 3 * sizeof(float));
        CHECK_STATUS(uform_image_preprocess(&image, &options, scratch, chw, crop), uform_status_ok_k);
        int largest = compare(crop, expected, side * side * 3, &totals);
        totals.cases++;
        if (largest) printf("%-36s side %3zu: max difference %d (%s)\n", file, side, largest, fields[7]);
        CHECK(largest <= 1);
        check_floats(crop, chw, side);
        /* The same without the RGB output (the scratch's own crop). */
        float *again = malloc(side * side * 3 * sizeof(float));
        CHECK_STATUS(uform_image_preprocess(&image, &options, scratch, again, NULL), uform_status_ok_k);
        CHECK(!memcmp(chw, again, side * side * 3 * sizeof(float)));
        free(again);
        free(chw);
        free(crop);
        free(expected);
        free(data);
    }
    printf("manifest (%s path): %zu crops, %zu channel values: %zu exact, %zu off by one, %zu worse, max difference %d; "
           "%zu bad files\n",
           path, totals.cases, totals.pixels, totals.exact, totals.off_by_one, totals.worse, totals.max_difference, bad_cases);
    CHECK(totals.cases >= 90 && bad_cases >= 15);
    CHECK(totals.worse == 0 && totals.off_by_one == 0); /* PIL's pixels exactly, not merely within 1 */
    free(manifest);
}

/* Raw RGB pixels with a padded stride give what the PNG of the same pixels gives. */
static void test_raw_pixels(uform_image_scratch_t *scratch) {
    size_t size = 0;
    uint8_t *png = read_file("synth/rgb_97x61.png", &size);
    CHECK_FATAL(png);
    uform_image_t encoded = {.data = png, .size = size};
    uint8_t *rgb = NULL;
    size_t width = 0, height = 0;
    CHECK_STATUS(uform_image_decode_rgb(&encoded, 0, &rgb, &width, &height), uform_status_ok_k);
    CHECK_FATAL(rgb && width == 97 && height == 61);
    size_t stride = width * 3 + 13;
    uint8_t *padded = calloc(stride * height, 1);
    for (size_t y = 0; y < height; ++y) memcpy(padded + y * stride, rgb + y * width * 3, width * 3);
    uform_image_preprocess_options_t options = {.side = 64, .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}};
    uint8_t from_png[64 * 64 * 3], from_raw[64 * 64 * 3];
    CHECK_STATUS(uform_image_preprocess(&encoded, &options, scratch, NULL, from_png), uform_status_ok_k);
    uform_image_t raw = {.data = padded, .size = stride * (height - 1) + width * 3, .width = width, .height = height,
                         .stride = stride};
    CHECK_STATUS(uform_image_preprocess(&raw, &options, scratch, NULL, from_raw), uform_status_ok_k);
    CHECK(!memcmp(from_png, from_raw, sizeof(from_png)));
    uint8_t *expected = read_expected("expected/rgb_97x61.png.64.png", 64);
    CHECK(expected && !memcmp(expected, from_raw, sizeof(from_raw)));
    free(expected);

    /* Packed rows (stride 0). */
    uform_image_t packed = {.data = rgb, .size = width * height * 3, .width = width, .height = height};
    CHECK_STATUS(uform_image_preprocess(&packed, &options, scratch, NULL, from_raw), uform_status_ok_k);
    CHECK(!memcmp(from_png, from_raw, sizeof(from_png)));

    /* Bad raw pixels: INVALID_ARGUMENT naming what is wrong. */
    uform_pixels_t pixels;
    uform_image_t bad = raw;
    bad.size -= 1;
    CHECK_STATUS(uform_image_decode(&bad, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    CHECK_MESSAGE("bytes of raw pixels are fewer than 97 x 61");
    bad = raw, bad.stride = width * 3 - 1;
    CHECK_STATUS(uform_image_decode(&bad, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    CHECK_MESSAGE("stride of 290 bytes is shorter than a row of 97 RGB pixels");
    bad = raw, bad.data = NULL;
    CHECK_STATUS(uform_image_decode(&bad, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    CHECK_MESSAGE("NULL data");
    bad = raw, bad.height = 0;
    CHECK_STATUS(uform_image_decode(&bad, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    CHECK_MESSAGE("zero height");
    bad = raw, bad.height = SIZE_MAX / 2;
    CHECK_STATUS(uform_image_decode(&bad, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    bad = raw, bad.width = SIZE_MAX / 2;
    CHECK_STATUS(uform_image_decode(&bad, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    /* Named as what it is, not as the stride `3 * width` wraps to (with the default stride, 0). */
    char wide[160];
    snprintf(wide, sizeof wide, "raw pixels %zu wide; a row of 3 bytes a pixel would pass the address space", SIZE_MAX / 2);
    CHECK_MESSAGE(wide);

    /* A strip whose resize would be 224 x 22,400,000: LIMIT_EXCEEDED before any allocation. */
    uint8_t strip[3 * 100] = {0};
    uform_image_t thin = {.data = strip, .size = sizeof(strip), .width = 1, .height = 100};
    options.side = 224;
    float *chw = malloc(3 * 224 * 224 * sizeof(float));
    CHECK_STATUS(uform_image_preprocess(&thin, &options, scratch, chw, NULL), uform_status_ok_k); /* 224 x 22400 */
    static uint8_t tall[3 * 100000];
    thin.data = tall, thin.size = sizeof(tall), thin.height = 100000;
    CHECK_STATUS(uform_image_preprocess(&thin, &options, scratch, chw, NULL), uform_status_limit_exceeded_k);
    CHECK_MESSAGE("resizing 1 x 100000 pixels to a shorter side of 224");
    free(chw);

    /* Arguments. */
    CHECK_STATUS(uform_image_decode(NULL, NULL, scratch, &pixels), uform_status_invalid_argument_k);
    CHECK_MESSAGE("NULL image");
    CHECK_STATUS(uform_image_decode(&raw, NULL, NULL, &pixels), uform_status_invalid_argument_k);
    CHECK_MESSAGE("NULL scratch");
    CHECK_STATUS(uform_image_preprocess(&raw, NULL, scratch, NULL, from_raw), uform_status_invalid_argument_k);
    CHECK_MESSAGE("NULL options");
    options.side = 0;
    CHECK_STATUS(uform_image_preprocess(&raw, &options, scratch, NULL, from_raw), uform_status_invalid_argument_k);
    CHECK_MESSAGE("a side of 0 pixels");
    options.side = 64, options.std[1] = 0.0f;
    CHECK_STATUS(uform_image_preprocess(&raw, &options, scratch, NULL, from_raw), uform_status_invalid_argument_k);
    CHECK_MESSAGE("normalisation of channel 1");
    options.std[1] = 0.5f, options.mean[2] = NAN;
    CHECK_STATUS(uform_image_preprocess(&raw, &options, scratch, NULL, from_raw), uform_status_invalid_argument_k);
    CHECK_MESSAGE("normalisation of channel 2");
    CHECK_STATUS(uform_image_decode_rgb(&encoded, 0, NULL, &width, &height), uform_status_invalid_argument_k);

    /* The pixel limit: the header's 97 x 61 against a limit of 5000 pixels. */
    uform_image_decode_options_t limited = {.max_pixels = 5000};
    CHECK_STATUS(uform_image_decode(&encoded, &limited, scratch, &pixels), uform_status_limit_exceeded_k);
    CHECK_MESSAGE("97 x 61 pixels, above the limit of 5000 pixels");
    uint8_t *refused = (uint8_t *)&width; /* must come back NULL */
    CHECK_STATUS(uform_image_decode_rgb(&encoded, 5000, &refused, &width, &height), uform_status_limit_exceeded_k);
    CHECK(refused == NULL);
    limited.max_pixels = 97 * 61;
    CHECK_STATUS(uform_image_decode(&encoded, &limited, scratch, &pixels), uform_status_ok_k);

    free(rgb);
    free(padded);
    free(png);
}

/* Every prefix of a JPEG and a PNG fails cleanly (never a crash, never success with padding). */
static void test_truncations(uform_image_scratch_t *scratch) {
    char const *files[] = {"synth/jpeg_420.jpg", "synth/jpeg_progressive.jpg", "synth/mode_rgba.png",
                           "synth/rgb_adam7.png", "synth/jpeg_37x211.jpg", "photos/franz-kafka.jpg"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); ++f) {
        size_t size = 0;
        uint8_t *data = read_file(files[f], &size);
        CHECK_FATAL(data && size > 64);
        size_t step = size / 97 + 1, succeeded = 0;
        for (size_t length = 0; length < size; length += step) {
            uint8_t *copy = malloc(length ? length : 1); /* exactly `length` bytes: ASan sees over-reads */
            memcpy(copy, data, length);
            uform_image_t image = {.data = copy, .size = length};
            uform_pixels_t pixels;
            uform_status_t status = uform_image_decode(&image, NULL, scratch, &pixels);
            if (status == uform_status_ok_k) ++succeeded;
            else CHECK(status == uform_status_corrupt_file_k);
            /* The same through preprocessing, which decodes only the rows a small crop reads but
             * still reads the whole file: a cut after those rows fails too. */
            uform_image_preprocess_options_t options = {.side = 8, .mean = {0, 0, 0}, .std = {1, 1, 1}};
            uint8_t crop[8 * 8 * 3];
            uform_status_t preprocessed = uform_image_preprocess(&image, &options, scratch, NULL, crop);
            if (preprocessed != status)
                fprintf(stderr, "%s cut at %zu of %zu: decode %s, preprocess %s (%s)\n", files[f], length, size,
                        uform_status_name(status), uform_status_name(preprocessed), uform_error_message());
            CHECK(preprocessed == status);
            free(copy);
        }
        /* A PNG cut inside its trailing IEND decodes (its image data is whole); no JPEG prefix does. */
        if (strstr(files[f], ".jpg")) CHECK(succeeded == 0);
        free(data);
    }
}

/* The DCT-scaled JPEG path: not PIL's pixels, so only measured: the difference is printed. */
static void test_fast_jpeg(uform_image_scratch_t *scratch) {
    char const *files[] = {"photos/franz-kafka.jpg", "photos/grace_hopper.jpg", "photos/rocket.jpg",
                           "synth/rgb_801x599.jpg"};
    char const *expected_files[] = {"expected/franz-kafka.jpg.224.png", "expected/grace_hopper.jpg.224.png",
                                    "expected/rocket.jpg.224.png", "expected/rgb_801x599.jpg.224.png"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); ++f) {
        size_t size = 0;
        uint8_t *data = read_file(files[f], &size);
        uint8_t *expected = read_expected(expected_files[f], 224);
        CHECK_FATAL(data && expected);
        uform_image_t image = {.data = data, .size = size};
        uform_image_preprocess_options_t options = {.side = 224, .decode = {.jpeg_min_side = 224}};
        memcpy(options.mean, clip_mean, sizeof(clip_mean));
        memcpy(options.std, clip_std, sizeof(clip_std));
        uint8_t crop[224 * 224 * 3];
        CHECK_STATUS(uform_image_preprocess(&image, &options, scratch, NULL, crop), uform_status_ok_k);
        uform_pixels_t pixels;
        CHECK_STATUS(uform_image_decode(&image, &options.decode, scratch, &pixels), uform_status_ok_k);
        double sum = 0;
        int largest = 0;
        for (size_t i = 0; i < sizeof(crop); ++i) {
            int d = abs((int)crop[i] - (int)expected[i]);
            sum += d;
            if (d > largest) largest = d;
        }
        printf("fast JPEG %-26s decoded at %zu x %zu: mean difference %.3f, max %d levels\n", files[f],
               pixels.width, pixels.height, sum / (double)sizeof(crop), largest);
        free(expected);
        free(data);
    }
}

/* Decoding only the rows a crop reads (`region_side`) gives exactly the whole decode's rows, and
 * the same crop, for every kind of JPEG and many sides (so many first and last rows). */
static void test_regions(uform_image_scratch_t *scratch) {
    char const *files[] = {"photos/franz-kafka.jpg", "synth/jpeg_420.jpg", "synth/jpeg_422.jpg",
                           "synth/jpeg_progressive.jpg", "synth/jpeg_grey.jpg", "synth/jpeg_cmyk.jpg",
                           "synth/jpeg_ycck.jpg", "synth/jpeg_37x211.jpg", "synth/rgb_801x599.jpg",
                           "synth/jpeg_444.jpg", "synth/rgb_640x480.jpg", "photos/rocket.jpg"};
    uform_image_scratch_t whole_scratch = {0};
    size_t regions = 0, cropped = 0;
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); ++f) {
        size_t size = 0;
        uint8_t *data = read_file(files[f], &size);
        CHECK_FATAL(data);
        uform_image_t image = {.data = data, .size = size};
        uform_pixels_t whole;
        CHECK_STATUS(uform_image_decode(&image, NULL, &whole_scratch, &whole), uform_status_ok_k);
        for (size_t side = 1; side <= 230; side += side < 20 ? 1 : 13) {
            uform_image_decode_options_t options = {.region_side = side};
            uform_pixels_t region;
            CHECK_STATUS(uform_image_decode(&image, &options, scratch, &region), uform_status_ok_k);
            size_t y0 = region.full_width ? region.y0 : 0, x0 = region.full_width ? region.x0 : 0;
            size_t bytes = uform_image_mode_bytes(region.mode);
            CHECK(region.mode == whole.mode && region.stride == region.width * bytes);
            /* The columns the resize reads, margins excluded (the outermost ones may differ). */
            size_t columns_x0 = 0, columns_x1 = 0, rows_y0 = 0, rows_y1 = 0;
            CHECK_STATUS(uform_image_region(whole.width, whole.height, side, &whole_scratch, &columns_x0, &columns_x1,
                                            &rows_y0, &rows_y1),
                         uform_status_ok_k);
            bool same = y0 + region.height <= whole.height && x0 + region.width <= whole.width &&
                        x0 <= columns_x0 && columns_x1 <= x0 + region.width;
            for (size_t y = 0; same && y < region.height; ++y)
                same = !memcmp(region.data + y * region.stride + (columns_x0 - x0) * bytes,
                               whole.data + (y0 + y) * whole.stride + columns_x0 * bytes,
                               (columns_x1 - columns_x0) * bytes);
            if (!same) fprintf(stderr, "%s: rows %zu+%zu, columns %zu+%zu for side %zu differ from the whole decode\n",
                               files[f], y0, region.height, x0, region.width, side);
            CHECK(same);
            uint8_t *from_region = malloc(side * side * 3), *from_whole = malloc(side * side * 3);
            CHECK_STATUS(uform_image_resize_crop(&region, side, scratch, from_region), uform_status_ok_k);
            CHECK_STATUS(uform_image_resize_crop(&whole, side, &whole_scratch, from_whole), uform_status_ok_k);
            CHECK(!memcmp(from_region, from_whole, side * side * 3));
            free(from_region), free(from_whole);
            regions += region.height < whole.height;
            cropped += region.width < whole.width;
        }
        free(data);
    }
    printf("regions: %zu decodes of fewer rows than the image, %zu of fewer columns, all equal to whole decodes\n",
           regions, cropped);
    CHECK(regions > 50 && cropped > 20);
    uform_image_scratch_free(&whole_scratch);
}

/* Threads preprocessing at once, each with its own scratch (as the encoder's workers will): the same
 * bytes as one thread alone. ThreadSanitizer checks the decoders share nothing. */
typedef struct worker_t {
    char const *files[4];
    uint8_t crops[4][64 * 64 * 3];
    int failures;
} worker_t;

static void *preprocess_files(void *argument) {
    worker_t *worker = argument;
    uform_image_scratch_t scratch = {0};
    uform_image_preprocess_options_t options = {.side = 64, .mean = {0.5f, 0.5f, 0.5f}, .std = {0.25f, 0.25f, 0.25f}};
    for (int round = 0; round < 3; ++round)
        for (size_t f = 0; f < 4; ++f) {
            size_t size = 0;
            uint8_t *data = read_file(worker->files[f], &size);
            uform_image_t image = {.data = data, .size = size};
            if (!data || uform_image_preprocess(&image, &options, &scratch, NULL, worker->crops[f]) != uform_status_ok_k)
                ++worker->failures;
            free(data);
        }
    uform_image_scratch_free(&scratch);
    return NULL;
}

static void test_threads(void) {
    worker_t workers[3] = {
        {.files = {"photos/franz-kafka.jpg", "synth/mode_rgba.png", "synth/jpeg_progressive.jpg", "synth/mode_i16.png"}},
        {.files = {"synth/mode_i16.png", "synth/jpeg_progressive.jpg", "synth/mode_rgba.png", "photos/franz-kafka.jpg"}},
        {.files = {"synth/jpeg_cmyk.jpg", "synth/mode_la.png", "synth/p2_adam7.png", "photos/grace_hopper.jpg"}},
    };
    worker_t alone = workers[0];
    preprocess_files(&alone);
    pthread_t threads[3];
    for (int t = 0; t < 3; ++t) CHECK_FATAL(pthread_create(&threads[t], NULL, preprocess_files, &workers[t]) == 0);
    for (int t = 0; t < 3; ++t) pthread_join(threads[t], NULL);
    for (int t = 0; t < 3; ++t) CHECK(workers[t].failures == 0);
    CHECK(!memcmp(alone.crops, workers[0].crops, sizeof(alone.crops)));
    CHECK(!memcmp(workers[0].crops[0], workers[1].crops[3], sizeof(workers[0].crops[0])));
    CHECK(!memcmp(workers[0].crops[1], workers[1].crops[2], sizeof(workers[0].crops[0])));
}

static uint32_t png_crc(uint8_t const *data, size_t size) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < size; ++i) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; ++bit) crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* `png` with `count` tEXt chunks put after IHDR (whose chunk ends at byte 33); free the result. */
static uint8_t *png_with_texts(uint8_t const *png, size_t size, size_t count, size_t *out_size) {
    uint8_t const text[] = {'t', 'E', 'X', 't', 'C', 'o', 'm', 'm', 'e', 'n', 't', 0, 'h', 'i'};
    size_t const chunk = 4 + sizeof(text) + 4;
    uint8_t *out = malloc(size + count * chunk), *at = out;
    memcpy(at, png, 33), at += 33;
    for (size_t i = 0; i < count; ++i) {
        uint32_t const length = sizeof(text) - 4, crc = png_crc(text, sizeof(text));
        uint8_t const head[4] = {(uint8_t)(length >> 24), (uint8_t)(length >> 16), (uint8_t)(length >> 8), (uint8_t)length};
        uint8_t const tail[4] = {(uint8_t)(crc >> 24), (uint8_t)(crc >> 16), (uint8_t)(crc >> 8), (uint8_t)crc};
        memcpy(at, head, 4), memcpy(at + 4, text, sizeof(text)), memcpy(at + 4 + sizeof(text), tail, 4), at += chunk;
    }
    memcpy(at, png + 33, size - 33), at += size - 33;
    *out_size = (size_t)(at - out);
    return out;
}

/* Legal files past what this build decodes, or past its limits: UNSUPPORTED naming why, where PIL
 * opens them (lossless JPEG needs libjpeg-turbo 3; libspng 0.7 keeps at most 1,000 ancillary chunks,
 * PIL any number). */
static void test_unsupported(uform_image_scratch_t *scratch) {
    uint8_t const lossless[] = {0xFF, 0xD8, 0xFF, 0xC3, 0x00, 0x0B, 0x08, 0x00, 0x10, 0x00,
                                0x10, 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9};
    uform_image_t image = {.data = lossless, .size = sizeof(lossless)};
    uform_pixels_t pixels;
    CHECK_STATUS(uform_image_decode(&image, NULL, scratch, &pixels), uform_status_unsupported_k);
    CHECK_MESSAGE("image: unsupported JPEG: Unsupported JPEG process: SOF type 0xc3");
    /* 1,000 text chunks decode to the same pixels; 1,001 pass libspng's limit. */
    size_t size = 0, plain_size = 0, text_size = 0;
    uint8_t *png = read_file("synth/grey2.png", &size);
    CHECK(png && size > 33);
    if (!png || size <= 33) return;
    image = (uform_image_t){.data = png, .size = size};
    uint8_t *rgb = NULL, *with_rgb = NULL;
    size_t width = 0, height = 0, with_width = 0, with_height = 0;
    CHECK_STATUS(uform_image_decode_rgb(&image, 0, &rgb, &width, &height), uform_status_ok_k);
    plain_size = width * height * 3;
    uint8_t *texts = png_with_texts(png, size, 1000, &text_size);
    image = (uform_image_t){.data = texts, .size = text_size};
    CHECK_STATUS(uform_image_decode_rgb(&image, 0, &with_rgb, &with_width, &with_height), uform_status_ok_k);
    CHECK(with_rgb && width == with_width && height == with_height && !memcmp(rgb, with_rgb, plain_size));
    free(texts), free(with_rgb);
    texts = png_with_texts(png, size, 1001, &text_size);
    image = (uform_image_t){.data = texts, .size = text_size};
    CHECK_STATUS(uform_image_decode(&image, NULL, scratch, &pixels), uform_status_unsupported_k);
    CHECK_MESSAGE("its ancillary chunks pass libspng's limits (16 MiB each, 64 MiB and 1,000 chunks in all)");
    free(texts), free(rgb), free(png);
}

int main(void) {
    uform_image_scratch_t scratch = {0}; /* one scratch for everything: reuse across sizes and modes */
    test_manifest(&scratch, "AVX-512 VNNI or AVX2, the widest the CPU has");
    uform_image_set_simd(1);
    test_manifest(&scratch, "AVX2 where the CPU has it");
    uform_image_use_simd(false);
    test_manifest(&scratch, "portable");
    uform_image_use_simd(true);
    test_raw_pixels(&scratch);
    test_truncations(&scratch);
    test_unsupported(&scratch);
    test_fast_jpeg(&scratch);
    test_regions(&scratch);
    test_threads();
    uform_image_scratch_free(&scratch);
    uform_image_scratch_free(&scratch); /* twice is harmless */
    uform_image_scratch_free(NULL);
    CHECK_DONE();
}
