/**
 *  @file   bench_image.c
 *  @brief  Image preprocessing speed on one core: decode + resize + crop + normalise per image, as
 *          the `uform` processor does it (bench_image.py measures PIL + that processor on the same
 *          files and prints the ratio). Single-threaded; files are read into memory first.
 *
 *  usage: bench_image [--side N] [--seconds S] [--quick] [--stages] [--dump DIR] FILE...
 *
 *  `--stages` prints instead the exact path's time and its stages apart: decoding the region the
 *  crop reads, resize + crop (on that region), ToTensor + Normalize. `--dump DIR` writes instead,
 *  per file, the float tensors (3 x side x side, CHW, host-order float32) of the exact path and of
 *  the two DCT-scaled ones as DIR/<index>.{exact,fast,fast2}.f32 (bench_image_fast.py compares their
 *  embeddings).
 *
 *  Per file it prints one line: `file WIDTHxHEIGHT exact_us fast_us decode_us fast_mean_diff
 *  fast_max_diff fast2_us fast2_mean_diff fast2_max_diff`: microseconds per image on the exact path
 *  (PIL's pixels), on the DCT-scaled JPEG path (`jpeg_min_side = side`; equal to exact for PNGs),
 *  for decoding alone, how far the fast path's crop is from the exact one (mean and max levels),
 *  then the same for a milder fast path (`jpeg_min_side = 2 * side`). Times are this thread's CPU time (best
 *  of 3 rounds), so other processes on the machine inflate them little.
 */
#include "image/image.h"
#include "internal.h"
#include "../tools/strict_number.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of this thread: the figure per core, robust to other processes sharing the machine. */
static double cpu_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static uint8_t *read_all(char const *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) return NULL;
    fseek(file, 0, SEEK_END);
    long length = ftell(file);
    fseek(file, 0, SEEK_SET);
    uint8_t *data = malloc(length > 0 ? (size_t)length : 1);
    *size = data && length > 0 && fread(data, 1, (size_t)length, file) == (size_t)length ? (size_t)length : 0;
    fclose(file);
    return data;
}

typedef enum { run_exact, run_fast, run_decode, run_region, run_resize, run_normalize } run_kind_t;

/* The stages' input (`--stages`): the decoded region and the resized crop. */
static uform_pixels_t const *stage_pixels;
static uint8_t *stage_rgb;

/* Microseconds per image: repeats until `seconds` passed (at least 3 runs), best of 3 rounds. */
static double time_per_image(uform_image_t const *image, uform_image_preprocess_options_t const *options,
                             uform_image_scratch_t *scratch, float *chw, run_kind_t kind, double seconds) {
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
        size_t runs = 0;
        double start = cpu_seconds(), now = start;
        do {
            uform_status_t status;
            if (kind == run_decode || kind == run_region) {
                uform_pixels_t pixels;
                uform_image_decode_options_t decode = options->decode;
                if (kind == run_region) decode.region_side = options->side;
                status = uform_image_decode(image, &decode, scratch, &pixels);
            } else if (kind == run_resize) { /* on the region decoded before, still in the scratch */
                status = uform_image_resize_crop(stage_pixels, options->side, scratch, stage_rgb);
            } else if (kind == run_normalize) {
                uform_image_normalize(stage_rgb, options->side, options->mean, options->std, chw);
                status = uform_status_ok_k;
            } else {
                status = uform_image_preprocess(image, options, scratch, chw, NULL);
            }
            if (status != uform_status_ok_k) {
                fprintf(stderr, "bench_image: %s\n", uform_error_message());
                exit(1);
            }
            ++runs;
            now = cpu_seconds();
        } while (now - start < seconds / 3 || runs < 3);
        double per = (now - start) / (double)runs * 1e6;
        if (per < best) best = per;
    }
    return best;
}

int main(int argc, char **argv) {
    size_t side = 224;
    double seconds = 1.0;
    int first = 1, stages = 0;
    char const *dump = NULL; /* `--dump DIR`: the exact and fast tensors, for bench_image_fast.py */
    for (; first < argc && !strncmp(argv[first], "--", 2); ++first) {
        if (!strcmp(argv[first], "--side") && first + 1 < argc && strict_count(argv[first + 1], 1, 4096, false, &side)) ++first;
        else if (!strcmp(argv[first], "--seconds") && first + 1 < argc && strict_real(argv[first + 1], 0, 3600, &seconds)) ++first;
        else if (!strcmp(argv[first], "--quick")) seconds = 0.03;
        else if (!strcmp(argv[first], "--stages")) stages = 1;
        else if (!strcmp(argv[first], "--dump") && first + 1 < argc) dump = argv[++first];
        else {
            fprintf(stderr, "usage: bench_image [--side N] [--seconds S] [--quick] [--stages] [--dump DIR] FILE...\n");
            return 2;
        }
    }
    if (first == argc) {
        fprintf(stderr, "usage: bench_image [--side N] [--seconds S] [--quick] [--stages] [--dump DIR] FILE...\n");
        return 2;
    }
    uform_image_scratch_t scratch = {0};
    float *chw = malloc(3 * side * side * sizeof(float));
    uint8_t *exact = malloc(3 * side * side), *fast = malloc(3 * side * side);
    double total_exact = 0, total_fast = 0;
    printf("# file size exact_us fast_us decode_us fast_mean_diff fast_max_diff fast2_us fast2_mean_diff fast2_max_diff"
           " (side %zu, one thread)\n",
           side);
    for (int i = first; i < argc; ++i) {
        size_t size = 0;
        uint8_t *data = read_all(argv[i], &size);
        if (!data || !size) {
            fprintf(stderr, "bench_image: cannot read %s\n", argv[i]);
            return 1;
        }
        uform_image_t image = {.data = data, .size = size};
        uform_image_preprocess_options_t options = {.side = side, .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                                                    .std = {0.26862954f, 0.26130258f, 0.27577711f}};
        uform_image_preprocess_options_t fast_options = options;
        fast_options.decode.jpeg_min_side = side;
        uform_image_preprocess_options_t mild_options = options;
        mild_options.decode.jpeg_min_side = 2 * side;
        uform_pixels_t pixels;
        if (uform_image_decode(&image, NULL, &scratch, &pixels) != uform_status_ok_k ||
            uform_image_preprocess(&image, &options, &scratch, NULL, exact) != uform_status_ok_k) {
            fprintf(stderr, "bench_image: %s: %s\n", argv[i], uform_error_message());
            return 1;
        }
        size_t width = pixels.width, height = pixels.height;
        if (dump) {
            uform_image_preprocess_options_t const *variants[3] = {&options, &fast_options, &mild_options};
            char const *names[3] = {"exact", "fast", "fast2"};
            for (int v = 0; v < 3; ++v) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%d.%s.f32", dump, i - first, names[v]);
                FILE *file = fopen(path, "wb");
                if (!file || uform_image_preprocess(&image, variants[v], &scratch, chw, NULL) != uform_status_ok_k ||
                    fwrite(chw, sizeof(float), 3 * side * side, file) != 3 * side * side) {
                    fprintf(stderr, "bench_image: cannot dump %s\n", path);
                    return 1;
                }
                fclose(file);
            }
            printf("%s %zux%zu dumped\n", argv[i], width, height);
            free(data);
            continue;
        }
        if (stages) { /* the exact path's stages apart: region decode, resize + crop, normalise */
            double whole_us = time_per_image(&image, &options, &scratch, chw, run_exact, seconds);
            double region_us = time_per_image(&image, &options, &scratch, chw, run_region, seconds);
            uform_image_decode_options_t decode = options.decode;
            decode.region_side = side;
            uform_pixels_t region;
            if (uform_image_decode(&image, &decode, &scratch, &region) != uform_status_ok_k) return 1;
            stage_pixels = &region, stage_rgb = exact;
            double resize_us = time_per_image(&image, &options, &scratch, chw, run_resize, seconds);
            double normalize_us = time_per_image(&image, &options, &scratch, chw, run_normalize, seconds);
            printf("%s %zux%zu exact %.1f = region decode (%zux%zu) %.1f + resize and crop %.1f + normalise %.1f us\n",
                   argv[i], width, height, whole_us, region.width, region.height, region_us, resize_us, normalize_us);
            free(data);
            continue;
        }
        double mean[2] = {0, 0};
        int largest[2] = {0, 0};
        for (int variant = 0; variant < 2; ++variant) {
            if (uform_image_preprocess(&image, variant ? &mild_options : &fast_options, &scratch, NULL, fast) !=
                uform_status_ok_k) {
                fprintf(stderr, "bench_image: %s: %s\n", argv[i], uform_error_message());
                return 1;
            }
            for (size_t j = 0; j < 3 * side * side; ++j) {
                int d = abs((int)exact[j] - (int)fast[j]);
                mean[variant] += d;
                if (d > largest[variant]) largest[variant] = d;
            }
            mean[variant] /= (double)(3 * side * side);
        }
        double exact_us = time_per_image(&image, &options, &scratch, chw, run_exact, seconds);
        double fast_us = time_per_image(&image, &fast_options, &scratch, chw, run_fast, seconds);
        double decode_us = time_per_image(&image, &options, &scratch, chw, run_decode, seconds);
        double mild_us = time_per_image(&image, &mild_options, &scratch, chw, run_fast, seconds);
        total_exact += exact_us, total_fast += fast_us;
        printf("%s %zux%zu %.1f %.1f %.1f %.3f %d %.1f %.3f %d\n", argv[i], width, height, exact_us, fast_us,
               decode_us, mean[0], largest[0], mild_us, mean[1], largest[1]);
        free(data);
    }
    printf("# all files: exact %.1f images/s, fast %.1f images/s\n", (argc - first) / total_exact * 1e6,
           (argc - first) / total_fast * 1e6);
    free(chw), free(exact), free(fast);
    uform_image_scratch_free(&scratch);
    return 0;
}
