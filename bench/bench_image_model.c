/**
 *  @file   bench_image_model.c
 *  @brief  Images per second of `uform_encode_images` on ViT towers of real shapes with random
 *          weights (test/encode_images/towers.h), through the public ABI. bench_image_model.py runs
 *          it beside PyTorch (f32, bf16) and ONNX Runtime and prints them side by side.
 *
 *      bench_image_model [--shape vit-s16|vit-b16] [--mode model|whole] [--batch N] [--threads N]
 *                        [--dtype f32|bf16|f16] [--devices N] [--seconds S] [--min-calls N] [--images DIR]
 *                        [--cpu-class NAME] [--in-flight N] [--ab NAME=A,B] [--features] [--json]
 *
 *  Shapes: vit-s16 (384 wide, 6 heads, 12 layers), vit-b16 (768 wide, 12 heads, 12 layers), both
 *  patch 16 at 224 pixels, CLS pooling, a 256-wide projection. Modes: `whole` feeds the JPEG files of
 *  --images (default test/image/photos) as bytes, cycled to fill the batch: decoding, PIL-exact
 *  resize and crop, normalisation and the tower, all on the executor's threads; `model` feeds raw
 *  224 x 224 RGB pixels, so the resize is the identity and what is measured is the tower (plus
 *  normalisation and im2col, well under 1%).
 *
 *  `--devices N` (N >= 1) holds the tower on GPUs 0 .. N-1 (VRAM residency) and encodes on a VRAM
 *  executor over them: decoding on its host threads, the 8-bit crops uploaded, the rest on the
 *  devices; the line then adds the achieved TFLOP/s (the products and attention the pass executes, 2 FLOPs per
 *  multiply-add), and UFORM_GPU_PROFILE=1 prints the time per kernel and product. bench_image_gpu.c
 *  is this program with `--devices 1 --dtype bf16` as defaults (bench_image_gpu.py drives it).
 *
 *  `--in-flight N` (N >= 2) submits the calls deferred, up to N at once (each into its own rows),
 *  waiting for the oldest before reusing its slot: the rate a caller streaming batches gets when one
 *  call's decoding and uploads overlap the call before on the devices. The call times are then the
 *  intervals between submissions; the rate includes waiting for the last calls.
 *
 *  `--ab NAME=A,B` alternates blocking calls between the environment variable NAME set to A and to
 *  B (`call_ab_run`), for `--seconds`, and prints each variant's best, first quartile and median call
 *  and the ratio of the medians instead of the usual line: an A/B both sides of which meet the same
 *  neighbours on a shared machine.
 *
 *  `--cpu-class NAME` (e.g. intel_haswell) pins the RAM executor's class (`uform_ram_options_t`):
 *  that class's kernels and GEMM paths; DNNL_MAX_CPU_ISA in the environment bounds oneDNN's own.
 */
#define _GNU_SOURCE 1
#include "../test/encode_images/towers.h"
#include "../tools/strict_number.h"
#include "bench_cpu_class.h"
#include "call_times.h"

#include <uform.h>
#include "models/text_vram.h" // `uform_text_vram_profile_report`
#include "kernels/kernels.h"    // `uform_cpu_profile_report` (UFORM_CPU_PROFILE=1)

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef UFORM_BENCH_PHOTOS
#define UFORM_BENCH_PHOTOS "test/image/photos"
#endif

#ifndef BENCH_NAME
#define BENCH_NAME "bench_image_model"
#define BENCH_DEFAULT_DEVICES 0
#define BENCH_DEFAULT_DTYPE "f32"
#endif

static tower_spec_t const bench_specs[] = {
    {"vit-s16", 384, 6, 12, 16, 224, 256, 0, "cls", 11},
    {"vit-b16", 768, 12, 12, 16, 224, 256, 0, "cls", 12},
};

static char *slurp(char const *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long length = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)length);
    if (data && fread(data, 1, (size_t)length, f) != (size_t)length) free(data), data = NULL;
    fclose(f);
    *size = (size_t)length;
    return data;
}

static void remove_tower(char const *directory) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", directory), unlink(path);
    snprintf(path, sizeof path, "%s/image_encoder.safetensors", directory), unlink(path);
    rmdir(directory);
}

/** One timed call: the batch through the verb. */
typedef struct image_call_t {
    uform_executor_t executor;
    uform_model_t model;
    uform_image_t const *images;
    size_t batch;
    uform_embeddings_t *out;
    uform_status_t *statuses;
    /* --in-flight N: N slots of rows and outcomes, used in turn. */
    size_t in_flight, next;
    uform_embeddings_t *outs;
    uform_outcome_t *outcomes;
    int *pending;
} image_call_t;

static int encode_images(void *context) {
    image_call_t *c = (image_call_t *)context;
    if (c->in_flight < 2)
        return uform_encode_images(c->executor, c->model, c->images, c->batch, c->out, c->statuses, NULL) != uform_status_ok_k;
    size_t k = c->next;
    c->next = (k + 1) % c->in_flight;
    if (c->pending[k] && (c->pending[k] = 0, uform_outcome_wait(&c->outcomes[k], -1) != uform_status_ok_k)) return 1;
    if (uform_encode_images(c->executor, c->model, c->images, c->batch, &c->outs[k], NULL, &c->outcomes[k]) !=
        uform_status_ok_k)
        return 1;
    c->pending[k] = 1;
    return 0;
}

/** Waits for every call still in flight; 0 when they all succeeded. */
static int finish_in_flight(image_call_t *c) {
    int failed = 0;
    for (size_t k = 0; k < c->in_flight; ++k)
        if (c->pending[k]) c->pending[k] = 0, failed |= uform_outcome_wait(&c->outcomes[k], -1) != uform_status_ok_k;
    return failed;
}

int main(int argc, char **argv) {
    char const *shape = "vit-s16", *dtype_name = BENCH_DEFAULT_DTYPE, *mode = "model", *images_dir = UFORM_BENCH_PHOTOS;
    size_t batch = 50, threads = 0, min_calls = 3, devices = BENCH_DEFAULT_DEVICES, in_flight = 1;
    double seconds = 3.0;
    int json = 0, ab_given = 0, with_features = 0;
    call_ab_t ab;
    uform_cpu_class_t cpu_class = uform_cpu_class_unknown_k;
    for (int i = 1; i < argc; ++i) {
        char const *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--features")) with_features = 1;
        else if (v && !strcmp(a, "--shape")) shape = v, ++i;
        else if (v && !strcmp(a, "--dtype") && (!strcmp(v, "f32") || !strcmp(v, "bf16") || !strcmp(v, "f16")))
            dtype_name = v, ++i;
        else if (v && !strcmp(a, "--mode")) mode = v, ++i;
        else if (v && !strcmp(a, "--images")) images_dir = v, ++i;
        else if (v && !strcmp(a, "--batch") && strict_count(v, 1, (size_t)1 << 20, false, &batch)) ++i;
        else if (v && !strcmp(a, "--threads") && strict_count(v, 0, 4096, false, &threads)) ++i;
        else if (v && !strcmp(a, "--min-calls") && strict_count(v, 1, (size_t)1 << 30, false, &min_calls)) ++i;
        else if (v && !strcmp(a, "--seconds") && strict_real(v, 0, 3600, &seconds)) ++i;
        else if (v && !strcmp(a, "--devices") && strict_count(v, 0, 8, false, &devices)) ++i;
        else if (v && !strcmp(a, "--cpu-class") && bench_cpu_class(v, &cpu_class)) ++i;
        else if (v && !strcmp(a, "--in-flight") && strict_count(v, 1, 64, false, &in_flight)) ++i;
        else if (v && !strcmp(a, "--ab") && call_ab_parse(v, &ab)) ab_given = 1, ++i;
        else {
            fprintf(stderr, "usage: " BENCH_NAME " [--shape vit-s16|vit-b16] [--mode model|whole] [--batch N] "
                            "[--threads N] [--dtype f32|bf16|f16] [--devices N] [--seconds S] [--min-calls N] "
                            "[--images DIR] [--cpu-class NAME] [--in-flight N] [--ab NAME=A,B] [--features] [--json]\n");
            return 2;
        }
    }
    tower_spec_t const *spec = NULL;
    for (size_t i = 0; i < 2; ++i)
        if (!strcmp(shape, bench_specs[i].name)) spec = &bench_specs[i];
    int whole = !strcmp(mode, "whole");
    if (!spec || (!whole && strcmp(mode, "model")) || !batch) {
        fprintf(stderr, BENCH_NAME ": unknown shape '%s' or mode '%s', or a zero batch\n", shape, mode);
        return 2;
    }
    if (devices && uform_gpu_status() != uform_status_ok_k) {
        printf(BENCH_NAME ": skipped: %s\n", uform_error_message());
        return 0;
    }
    int32_t ordinals[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = devices};
    char directory[256];
    snprintf(directory, sizeof directory, "%s/uform-bench-vit-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(directory) || !tower_write(directory, spec)) {
        fprintf(stderr, BENCH_NAME ": cannot write the tower under %s\n", directory);
        return 1;
    }
    uform_model_options_t options = {.path = directory, .modality = uform_modality_image_k,
                                     .residency = devices ? uform_residency_vram_k : uform_residency_ram_k,
                                     .vram = devices ? &vram : NULL,
                                     .weights_dtype = !strcmp(dtype_name, "bf16")  ? uform_dtype_bf16_k
                                                      : !strcmp(dtype_name, "f16") ? uform_dtype_f16_k
                                                                                   : uform_dtype_f32_k};
    uform_model_t model = NULL;
    uform_status_t status = uform_model_open(&options, &model);
    remove_tower(directory);
    if (status != uform_status_ok_k) {
        fprintf(stderr, BENCH_NAME ": %s\n", uform_error_message());
        return 1;
    }

    /* Inputs: the JPEGs of `images_dir` cycled, or raw 224 x 224 pixels. */
    uform_image_t *images = calloc(batch, sizeof(uform_image_t));
    char *files[64];
    size_t sizes[64], files_count = 0;
    uint8_t *pixels = NULL;
    if (whole) {
        DIR *d = opendir(images_dir);
        char names[64][256];
        for (struct dirent *e; d && (e = readdir(d)) && files_count < 64;) {
            char const *dot = strrchr(e->d_name, '.');
            if (dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg")))
                snprintf(names[files_count++], sizeof names[0], "%s", e->d_name);
        }
        if (d) closedir(d);
        qsort(names, files_count, sizeof names[0], (int (*)(void const *, void const *))strcmp);
        for (size_t i = 0; i < files_count; ++i) {
            char path[600];
            snprintf(path, sizeof path, "%s/%s", images_dir, names[i]);
            files[i] = slurp(path, &sizes[i]);
            if (!files[i]) {
                fprintf(stderr, BENCH_NAME ": cannot read %s\n", path);
                return 1;
            }
        }
        if (!files_count) {
            fprintf(stderr, BENCH_NAME ": no JPEG files in %s\n", images_dir);
            return 1;
        }
        for (size_t i = 0; i < batch; ++i) images[i] = (uform_image_t){.data = files[i % files_count], .size = sizes[i % files_count]};
    }
    else {
        size_t side = spec->image_size, bytes = side * side * 3;
        pixels = malloc(bytes);
        uint64_t s = 1;
        for (size_t i = 0; i < bytes; ++i) pixels[i] = (uint8_t)(tower_splitmix64(&s) >> 56);
        for (size_t i = 0; i < batch; ++i) images[i] = (uform_image_t){.data = pixels, .size = bytes, .width = side, .height = side};
    }
    float *rows = malloc(in_flight * batch * spec->embedding_dim * sizeof(float));
    uform_status_t *statuses = malloc(batch * sizeof(uform_status_t));
    /* --features: every token's last hidden state too, f32 [batch][tokens][dim] per call in flight. */
    uform_model_description_t described;
    size_t feature_floats = 0;
    if (with_features && uform_model_describe(model, &described) == uform_status_ok_k)
        feature_floats = batch * described.tokens * described.hidden;
    float *features = feature_floats ? malloc(in_flight * feature_floats * sizeof(float)) : NULL;
    if (feature_floats && !features) {
        fprintf(stderr, BENCH_NAME ": no memory for the features\n");
        return 1;
    }
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k, .features = features};
    uform_executor_t executor = NULL;
    status = devices ? uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor)
                     : uform_executor_for_ram(&(uform_ram_options_t){.cpu_class = cpu_class}, threads, 0, &executor);
    if (status != uform_status_ok_k) {
        fprintf(stderr, BENCH_NAME ": %s\n", uform_error_message());
        return 1;
    }
    uform_executor_description_t description;
    if (uform_executor_describe(executor, &description) != uform_status_ok_k ||
        uform_executor_drain(executor, uform_mood_spinning_k) != uform_status_ok_k) {
        fprintf(stderr, BENCH_NAME ": %s\n", uform_error_message());
        return 1;
    }
    /* One warm-up call, then as many as fit in `seconds`. */
    image_call_t call = {executor, model, images, batch, &out, statuses, .in_flight = in_flight};
    call.outs = calloc(in_flight, sizeof(uform_embeddings_t));
    call.outcomes = calloc(in_flight, sizeof(uform_outcome_t));
    call.pending = calloc(in_flight, sizeof(int));
    for (size_t k = 0; k < in_flight; ++k)
        call.outs[k] = (uform_embeddings_t){.data = rows + k * batch * spec->embedding_dim, .dtype = uform_dtype_f32_k,
                                            .features = features ? features + k * feature_floats : NULL};
    call_summary_t timed;
    int ran = encode_images(&call) == 0 && finish_in_flight(&call) == 0;
    if (ab_given && ran && in_flight == 1) {
        if (!call_ab_run(encode_images, &call, &ab, seconds, min_calls)) {
            fprintf(stderr, BENCH_NAME ": %s\n", uform_error_message());
            return 1;
        }
        char what[128];
        snprintf(what, sizeof what, "%s %s %s batch %zu, %zu threads:", shape, mode, dtype_name, batch, description.threads_count);
        call_ab_print(stdout, what, &ab);
        goto done;
    }
    double const timed_start = call_times_clock(CLOCK_MONOTONIC);
    ran = ran && call_times_run(encode_images, &call, seconds, min_calls, &timed);
    if (ran && in_flight > 1) /* the rate counts until the last call finished */
        ran = finish_in_flight(&call) == 0, timed.elapsed = call_times_clock(CLOCK_MONOTONIC) - timed_start;
    if (!ran) {
        fprintf(stderr, BENCH_NAME ": %s\n", uform_error_message());
        return 1;
    }
    if (uform_executor_drain(executor, uform_mood_parked_k) != uform_status_ok_k) {
        fprintf(stderr, BENCH_NAME ": %s\n", uform_error_message());
        return 1;
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double rate = (double)(timed.calls * batch) / timed.elapsed;
    /* FLOPs per image the pass executes: the patch product, per layer the four d x d products, the MLP's
     * two and attention's two; with the CLS tail (`uform_forward_cls_tail`, CLS pooling) the last
     * layer's output product and MLP for the [CLS] row alone. */
    double d = (double)spec->dim, S = 1.0 + (double)(spec->image_size / spec->patch) * (double)(spec->image_size / spec->patch);
    double layer = 2.0 * S * 12.0 * d * d + 4.0 * S * S * d;
    double last = uform_forward_cls_tail(!strcmp(spec->pooling, "cls"), spec->layers) ? 2.0 * S * 3.0 * d * d + 4.0 * S * S * d + 18.0 * d * d
                                                                            : layer;
    double per_image = 2.0 * (S - 1.0) * 3.0 * spec->patch * spec->patch * d + (double)(spec->layers - 1) * layer + last +
                       2.0 * d * spec->embedding_dim;
    double tflops = rate * per_image / 1e12;
    if (json)
        printf("{\"system\": \"uform%s\", \"shape\": \"%s\", \"mode\": \"%s\", \"dtype\": \"%s\", \"batch\": %zu, "
               "\"threads\": %zu, \"devices\": %zu, \"cpu_class\": \"%s\", \"images_per_second\": %.2f, "
               "\"best_call_ms\": %.3f, \"median_call_ms\": %.3f, \"p90_call_ms\": %.3f, \"cpu_ms_per_call\": %.3f, "
               "\"tflops\": %.2f, \"peak_rss_mib\": %.1f}\n",
               devices ? "-gpu" : "", shape, mode, dtype_name, batch, description.threads_count, devices,
               uform_cpu_class_name(description.cpu_class), rate, timed.best * 1e3, timed.median * 1e3, timed.p90 * 1e3, timed.cpu_per_call * 1e3,
               tflops,
               usage.ru_maxrss / 1024.0);
    else
        printf("uform%s %s %s %s: batch %zu, %zu threads, %zu device(s), class %s: %.2f images/s, best call %.3f ms "
               "(median %.3f, p90 %.3f), CPU %.3f ms per call, %.2f TFLOP/s, peak RSS %.1f MiB\n",
               devices ? "-gpu" : "", shape, mode, dtype_name, batch, description.threads_count, devices,
               uform_cpu_class_name(description.cpu_class), rate, timed.best * 1e3, timed.median * 1e3, timed.p90 * 1e3, timed.cpu_per_call * 1e3,
               tflops,
               usage.ru_maxrss / 1024.0);
    if (devices) uform_text_vram_profile_report(stderr);
    else if (uform_cpu_profiling()) uform_cpu_profile_report(stderr);
done:
    uform_executor_free(executor);
    uform_model_free(model);
    for (size_t i = 0; i < files_count; ++i) free(files[i]);
    free(pixels), free(images), free(rows), free(statuses);
    free(call.outs), free(call.outcomes), free(call.pending);
    return 0;
}
