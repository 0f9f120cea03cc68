/**
 *  @file   test_encode_images.c
 *  @brief  Image towers and `uform_encode_images`: three random ViTs (towers.h: ViT-S/16, ViT-B/16
 *          with mean pooling, a patch-14 tower with 4 register tokens and an image side that leaves
 *          a remainder) generated in a temporary directory, their weights' checksum checked against
 *          the reference script's, the photos of test/image/photos encoded from their bytes and
 *          compared with the `uform` package's PIL + PyTorch embeddings
 *          (test/encode_images/make_references.py): cosine >= 0.99999 in f32, >= 0.999 in bf16, on
 *          the default class and, with `--classes`, (three photos) pinned to each class the CPU runs.
 *          Then the verb's behaviour: raw pixels, batch vs alone, Matryoshka, per-item statuses,
 *          whole-call failures naming the index, deferred calls, CONTENDED, residency, decompression
 *          bombs among good images, a pool executor, threads racing on one model, the loader's
 *          validation messages and `layer_norm_eps`.
 */
#include "check.h"
#include "rows.h"
#include "encode_images/towers.h"
#include "image/image.h"
#include "internal.h"
#include "fused_refused.h"
#include "models/image_tower.h"
#include "models/model.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef UFORM_TEST_SOURCE_DIR
#error "UFORM_TEST_SOURCE_DIR must name test/"
#endif

static char root[256];

/* ---- Photos and references ---- */

#define PHOTOS_MAX 16
typedef struct reference_t {
    char name[32];
    uint64_t checksum;
    size_t photos;
    char photo[PHOTOS_MAX][64];
} reference_t;

static reference_t references[3];
static uform_image_t photos[PHOTOS_MAX];
static size_t photos_count;

static void load_references(void) {
    size_t size;
    char *text = read_file(UFORM_TEST_SOURCE_DIR "/encode_images/references.txt", &size);
    CHECK_FATAL(text != NULL);
    char *line = strtok(text, "\n");
    for (size_t t = 0; t < 3 && line; ++t, line = strtok(NULL, "\n")) {
        char *cursor = line;
        int used = 0;
        unsigned long long checksum = 0;
        CHECK_FATAL(sscanf(cursor, "%31s %llx%n", references[t].name, &checksum, &used) == 2);
        references[t].checksum = checksum;
        cursor += used;
        while (references[t].photos < PHOTOS_MAX && sscanf(cursor, " %63s%n", references[t].photo[references[t].photos], &used) == 1)
            cursor += used, ++references[t].photos;
        CHECK_FATAL(strcmp(references[t].name, tower_specs[t].name) == 0);
    }
    free(text);
    photos_count = references[0].photos;
    for (size_t i = 0; i < photos_count; ++i) {
        char path[512];
        snprintf(path, sizeof path, "%s/image/photos/%s", UFORM_TEST_SOURCE_DIR, references[0].photo[i]);
        photos[i].data = read_file(path, &photos[i].size);
        CHECK_FATAL(photos[i].data != NULL);
    }
}

static uform_model_t open_tower(char const *directory, uform_dtype_t dtype) {
    uform_model_options_t options = {.path = directory, .modality = uform_modality_image_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = dtype};
    uform_model_t model = NULL;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
    return model;
}

/** A RAM executor of `threads` threads, fewer where fewer cores are allowed (a test pinned to one). */
static uform_executor_t ram_executor(uform_cpu_class_t cpu_class, size_t threads, size_t deferred) {
    uform_ram_options_t ram = {.cpu_class = cpu_class};
    uform_memory_domain_t domain;
    size_t domains = 0;
    if (uform_memory_domains(&domain, 1, &domains) == uform_status_ok_k && domains && domain.cores_count < threads)
        threads = domain.cores_count ? domain.cores_count : 1;
    uform_executor_t executor = NULL;
    if (uform_executor_for_ram(&ram, threads, deferred, &executor) != uform_status_ok_k) return NULL;
    return executor;
}

/* ---- Against PyTorch, pinned to each CPU class ---- */

/** The classes this architecture has; those the CPU lacks are skipped, saying so. */
static uform_cpu_class_t const pinned_classes[] = {
    uform_cpu_class_serial_k,
#if defined(__x86_64__) || defined(_M_X64)
    uform_cpu_class_intel_haswell_k, uform_cpu_class_intel_sierra_k, uform_cpu_class_intel_skylake_k,
    uform_cpu_class_intel_icelake_k, uform_cpu_class_amd_genoa_k, uform_cpu_class_intel_sapphire_k,
    uform_cpu_class_intel_granite_k, uform_cpu_class_intel_diamond_k,
#elif defined(__aarch64__)
    uform_cpu_class_aws_g2_k, uform_cpu_class_apple_m2_k, uform_cpu_class_apple_m4_k, uform_cpu_class_aws_g5_k,
    uform_cpu_class_nvidia_vera_k,
#endif
};

/** Photos each pinned class encodes: the default class above checks all nine; these three (a
 *  grayscale PNG, an RGB JPEG, a PNG with alpha) keep the 9 classes x 3 towers x 2 dtypes within
 *  minutes under the sanitizers on 2 cores, and the CI's variants (matmul, groups, fused refused,
 *  whole layer) run them again. */
static size_t const pinned_photos[] = {1, 4, 7};

/** `model` (tower `t`, f32 when `k` is 0, else bf16) on a RAM executor pinned to each class the
 *  CPU runs, against the same PyTorch rows and bounds as the default class. */
static void check_classes(size_t t, size_t k, uform_model_t model, float const *expected) {
    tower_spec_t const *spec = &tower_specs[t];
    size_t const width = spec->embedding_dim, count = sizeof pinned_photos / sizeof *pinned_photos;
    double const bound = k == 0 ? 0.99999 : 0.999;
    uint64_t features = 0;
    CHECK_OK(uform_cpu_detect(NULL, &features));
    uform_image_t images[sizeof pinned_photos / sizeof *pinned_photos];
    for (size_t i = 0; i < count; ++i) images[i] = photos[pinned_photos[i]];
    float *rows = calloc(count * width, sizeof(float));
    CHECK_FATAL(rows != NULL);
    for (size_t c = 0; c < sizeof pinned_classes / sizeof *pinned_classes; ++c) {
        uform_cpu_class_t const cpu_class = pinned_classes[c];
        uint64_t const needs = uform_cpu_class_features(cpu_class);
        uform_ram_options_t ram = {.cpu_class = cpu_class};
        uform_memory_domain_t domain;
        size_t domains = 0;
        CHECK_OK(uform_memory_domains(&domain, 1, &domains));
        size_t const threads = domains && domain.cores_count >= 2 ? 2 : 1;
        uform_executor_t executor = NULL;
        uform_status_t status = uform_executor_for_ram(&ram, threads, 0, &executor);
        if ((needs & features) != needs) { /* pinning a class above the CPU is refused */
            CHECK_STATUS(status, uform_status_unsupported_k);
            if (t == 0 && k == 0)
                printf("class %-15s skipped: this CPU lacks its features (%s)\n", uform_cpu_class_name(cpu_class),
                       uform_error_message());
            continue;
        }
        CHECK_STATUS(status, uform_status_ok_k);
        if (!executor) continue;
        memset(rows, 0, count * width * sizeof(float));
        uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
        uform_status_t statuses[sizeof pinned_photos / sizeof *pinned_photos];
        CHECK_STATUS(uform_encode_images(executor, model, images, count, &out, statuses, NULL), uform_status_ok_k);
        double worst = 1;
        for (size_t i = 0; i < count; ++i) {
            size_t const photo = pinned_photos[i];
            CHECK(statuses[i] == uform_status_ok_k);
            double const cos = cosine(rows + i * width, expected + photo * width, width);
            if (cos < bound)
                fprintf(stderr, "%s %s class %s: %s cosine %.7f\n", spec->name, k ? "bf16" : "f32",
                        uform_cpu_class_name(cpu_class), references[t].photo[photo], cos);
            CHECK(cos >= bound);
            worst = cos < worst ? cos : worst;
        }
        printf("%-14s %-4s class %-15s kernels %-8s worst cosine over %zu photos %.7f\n", spec->name, k ? "bf16" : "f32",
               uform_cpu_class_name(cpu_class), uform_kernels_for(cpu_class)->name, count, worst);
        uform_executor_free(executor);
    }
    free(rows);
}

/* ---- Against PyTorch ---- */

/** The features (`uform_embeddings_t.features`: every token after the final LayerNorm) of every photo
 *  and of a corrupt image after them, against the `uform` package's (`return_features=True`) rows of
 *  [CLS], the next token, the middle and the last (expected/<tower>-features.f32): cosine >= `bound`
 *  per row; the corrupt image's features and row zeros; the embeddings asked with features (the
 *  whole last layer, no CLS tail) against `expected` as well. */
static void check_image_features(size_t t, uform_model_t model, uform_executor_t executor, float const *expected,
                                 double bound, char const *dtype_name) {
    tower_spec_t const *spec = &tower_specs[t];
    size_t const d = spec->dim, grid = spec->image_size / spec->patch, S = 1 + spec->reg_tokens + grid * grid;
    size_t const width = spec->embedding_dim, count = photos_count + 1;
    uform_model_description_t description;
    CHECK_OK(uform_model_describe(model, &description));
    CHECK(description.hidden == d && description.tokens == S);
    char path[600];
    size_t size = 0;
    snprintf(path, sizeof path, "%s/encode_images/expected/%s-features.f32", UFORM_TEST_SOURCE_DIR, spec->name);
    float *reference = (float *)read_file(path, &size);
    CHECK_FATAL(reference && size == photos_count * 4 * d * sizeof(float));
    uform_image_t images[PHOTOS_MAX + 1];
    memcpy(images, photos, photos_count * sizeof(uform_image_t));
    images[photos_count] = (uform_image_t){.data = "not an image", .size = 12};
    float *features = malloc(count * S * d * sizeof(float)), *rows = malloc(count * width * sizeof(float));
    memset(features, 0x5A, count * S * d * sizeof(float));
    memset(rows, 0x5A, count * width * sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k, .features = features};
    uform_status_t statuses[PHOTOS_MAX + 1];
    CHECK_STATUS(uform_encode_images(executor, model, images, count, &out, statuses, NULL), uform_status_ok_k);
    CHECK(statuses[photos_count] == uform_status_corrupt_file_k);
    double worst = 1, worst_embedding = 1;
    size_t const picked[4] = {0, 1, S / 2, S - 1};
    for (size_t i = 0; i < photos_count; ++i) {
        for (size_t p = 0; p < 4; ++p) {
            double c = cosine(features + (i * S + picked[p]) * d, reference + (i * 4 + p) * d, d);
            worst = c < worst ? c : worst;
        }
        double c = cosine(rows + i * width, expected + i * width, width);
        worst_embedding = c < worst_embedding ? c : worst_embedding;
    }
    size_t nonzero = 0;
    for (size_t v = 0; v < S * d; ++v) nonzero += features[photos_count * S * d + v] != 0.0f;
    for (size_t v = 0; v < width; ++v) nonzero += rows[photos_count * width + v] != 0.0f;
    printf("%-14s %s: features' worst cosine against PyTorch %.7f, embeddings with features %.7f\n", spec->name,
           dtype_name, worst, worst_embedding);
    CHECK(worst >= bound);
    CHECK(worst_embedding >= bound);
    CHECK(nonzero == 0);
    free(reference), free(features), free(rows);
}

/** Set by `--classes`: the references again pinned to each class (one ctest, not every variant). */
static int pin_classes = 0;

static void test_references(void) {
    for (size_t t = 0; t < 3; ++t) {
        tower_spec_t const *spec = &tower_specs[t];
        char directory[512];
        snprintf(directory, sizeof directory, "%s/%s", root, spec->name);
        uint64_t checksum = tower_write(directory, spec);
        CHECK(checksum == references[t].checksum);
        if (checksum != references[t].checksum)
            fprintf(stderr, "%s: weights checksum %016llx, the reference script drew %016llx\n", spec->name,
                    (unsigned long long)checksum, (unsigned long long)references[t].checksum);
        size_t size = 0, width = spec->embedding_dim;
        char path[600];
        snprintf(path, sizeof path, "%s/encode_images/expected/%s.f32", UFORM_TEST_SOURCE_DIR, spec->name);
        float *expected = (float *)read_file(path, &size);
        CHECK_FATAL(expected && size == photos_count * width * sizeof(float));

        uform_dtype_t const dtypes[2] = {uform_dtype_f32_k, uform_dtype_bf16_k};
        for (size_t k = 0; k < 2; ++k) {
            uform_model_t model = open_tower(directory, dtypes[k]);
            CHECK_FATAL(model != NULL);
            uform_model_description_t description;
            CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
            CHECK(description.modality == uform_modality_image_k && description.image_size == spec->image_size);
            CHECK(description.dimensions == width && description.layers == spec->layers);
            CHECK(description.matryoshka_dimensions[0] == 64 && description.matryoshka_dimensions[1] == 128 &&
                  description.matryoshka_dimensions[2] == 0);
            size_t grid = spec->image_size / spec->patch, d = spec->dim;
            size_t parameters = d * 3 * spec->patch * spec->patch + d + grid * grid * d + d + spec->reg_tokens * d +
                                spec->layers * (4 * d * d + 4 * d + 6 * d + 8 * d * d + 4 * d + d) + 2 * d +
                                spec->embedding_dim * d;
            CHECK(description.parameters == parameters);

            uform_executor_t executor = ram_executor(uform_cpu_class_unknown_k, 2, 0);
            CHECK_FATAL(executor != NULL);
            float *rows = calloc(photos_count * width, sizeof(float));
            uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
            uform_status_t statuses[PHOTOS_MAX];
            CHECK_STATUS(uform_encode_images(executor, model, photos, photos_count, &out, statuses, NULL), uform_status_ok_k);
            double worst = 1, bound = k == 0 ? 0.99999 : 0.999;
            for (size_t i = 0; i < photos_count; ++i) {
                CHECK(statuses[i] == uform_status_ok_k);
                double c = cosine(rows + i * width, expected + i * width, width);
                if (c < bound) fprintf(stderr, "%s %s: %s cosine %.7f\n", spec->name, k ? "bf16" : "f32", references[t].photo[i], c);
                CHECK(c >= bound);
                worst = c < worst ? c : worst;
            }
            printf("%-14s %s: worst cosine against PyTorch over %zu photos %.7f\n", spec->name, k ? "bf16" : "f32",
                   photos_count, worst);
            check_image_features(t, model, executor, expected, bound, k ? "bf16" : "f32");
            uform_executor_free(executor);

            /* The SERIAL class (portable loops, fused attention) on the NULL executor, one photo. */
            if (k == 0 && t == 2) {
                uform_executor_t serial = ram_executor(uform_cpu_class_serial_k, 1, 0);
                CHECK_FATAL(serial != NULL);
                float single[512];
                uform_embeddings_t one = {.data = single, .dtype = uform_dtype_f32_k};
                CHECK_STATUS(uform_encode_images(serial, model, &photos[4], 1, &one, NULL, NULL), uform_status_ok_k);
                double c = cosine(single, expected + 4 * width, width);
                printf("%-14s f32 SERIAL: cosine %.7f\n", spec->name, c);
                CHECK(c >= 0.99999);
                CHECK_STATUS(uform_encode_images(NULL, model, &photos[5], 1, &one, NULL, NULL), uform_status_ok_k);
                CHECK(cosine(single, expected + 5 * width, width) >= 0.99999);
                uform_executor_free(serial);
            }
            if (pin_classes) check_classes(t, k, model, expected);
            free(rows);
            uform_model_free(model);
        }
        free(expected);
    }
}

/* ---- The verb's behaviour, on the patch-14 tower ---- */

typedef struct reentry_t {
    uform_executor_t executor;
    uform_model_t model;
    uform_status_t status;
    char message[256];
} reentry_t;

static void reentry_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)domain;
    reentry_t *r = context;
    if (thread != 0) return;
    float row[256];
    uform_embeddings_t out = {.data = row, .dtype = uform_dtype_f32_k};
    r->status = uform_encode_images(r->executor, r->model, &photos[0], 1, &out, NULL, NULL);
    snprintf(r->message, sizeof r->message, "%s", uform_error_message());
}

typedef struct blocker_t {
    atomic_int entered, release;
} blocker_t;

static void block_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)thread, (void)domain;
    blocker_t *b = context;
    atomic_store(&b->entered, 1);
    while (!atomic_load(&b->release)) uform_sleep_seconds(0.001);
}

static void test_verb(void) {
    char directory[512];
    snprintf(directory, sizeof directory, "%s/%s", root, tower_specs[2].name);
    uform_model_t model = open_tower(directory, uform_dtype_f32_k);
    CHECK_FATAL(model != NULL);
    size_t const width = 256;
    uform_executor_t executor = ram_executor(uform_cpu_class_unknown_k, 2, 1);
    CHECK_FATAL(executor != NULL);

    /* Batch of four against each alone. */
    float batch[4][256], alone[256];
    uform_embeddings_t out = {.data = batch, .dtype = uform_dtype_f32_k};
    uform_image_t four[4] = {photos[0], photos[4], photos[5], photos[8]};
    CHECK_STATUS(uform_encode_images(executor, model, four, 4, &out, NULL, NULL), uform_status_ok_k);
    uform_embeddings_t one = {.data = alone, .dtype = uform_dtype_f32_k};
    for (size_t i = 0; i < 4; ++i) {
        CHECK_STATUS(uform_encode_images(executor, model, &four[i], 1, &one, NULL, NULL), uform_status_ok_k);
        CHECK(cosine(alone, batch[i], width) > 0.999999);
    }

    /* Raw pixels give what the bytes give (grace_hopper.jpg is an RGB JPEG). */
    uint8_t *rgb = NULL;
    size_t w = 0, h = 0;
    CHECK_STATUS(uform_image_decode_rgb(&four[2], 0, &rgb, &w, &h), uform_status_ok_k);
    uform_image_t raw = {.data = rgb, .size = w * h * 3, .width = w, .height = h};
    float from_raw[256];
    uform_embeddings_t raw_out = {.data = from_raw, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_images(executor, model, &four[2], 1, &one, NULL, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_encode_images(executor, model, &raw, 1, &raw_out, NULL, NULL), uform_status_ok_k);
    CHECK(memcmp(alone, from_raw, sizeof alone) == 0);
    free(rgb);

    /* Matryoshka: 64 of them in f16, normalised; and bf16 at full width. */
    uint16_t halves[4][64];
    uform_embeddings_t narrow = {.data = halves, .dimensions = 64, .dtype = uform_dtype_f16_k, .normalize = 1};
    CHECK_STATUS(uform_encode_images(executor, model, four, 4, &narrow, NULL, NULL), uform_status_ok_k);
    for (size_t i = 0; i < 4; ++i) {
        double norm = 0, head = 0;
        for (size_t j = 0; j < 64; ++j) norm += (double)from_half(halves[i][j]) * from_half(halves[i][j]);
        for (size_t j = 0; j < 64; ++j) head += (double)batch[i][j] * batch[i][j];
        CHECK(fabs(norm - 1.0) < 2e-3);
        CHECK(fabs(from_half(halves[i][3]) - batch[i][3] / sqrt(head)) < 2e-3);
    }
    uint16_t brain[4][256];
    uform_embeddings_t wide = {.data = brain, .dtype = uform_dtype_bf16_k};
    CHECK_STATUS(uform_encode_images(executor, model, four, 4, &wide, NULL, NULL), uform_status_ok_k);
    for (size_t i = 0; i < 4; ++i)
        for (size_t j = 0; j < width; ++j) CHECK(fabsf(from_bf16(brain[i][j]) - batch[i][j]) <= fabsf(batch[i][j]) / 128 + 1e-6f);

    /* Per-item statuses: a truncated JPEG and an empty image get theirs and zero rows. */
    size_t size = 0;
    char *truncated = read_file(UFORM_TEST_SOURCE_DIR "/image/bad/truncated.jpg", &size);
    CHECK_FATAL(truncated != NULL);
    uform_image_t mixed[4] = {photos[0], {.data = truncated, .size = size}, photos[5], {.data = "", .size = 0}};
    float rows[4][256];
    memset(rows, 0x7f, sizeof rows);
    uform_status_t statuses[4] = {99, 99, 99, 99};
    out.data = rows;
    CHECK_STATUS(uform_encode_images(executor, model, mixed, 4, &out, statuses, NULL), uform_status_ok_k);
    CHECK(statuses[0] == uform_status_ok_k && statuses[1] == uform_status_corrupt_file_k &&
          statuses[2] == uform_status_ok_k && statuses[3] == uform_status_corrupt_file_k);
    for (size_t j = 0; j < width; ++j) CHECK(rows[1][j] == 0.0f && rows[3][j] == 0.0f);
    CHECK(cosine(rows[0], batch[0], width) > 0.999999 && cosine(rows[2], batch[2], width) > 0.999999);

    /* Without statuses the first failure fails the call, naming it, and writes nothing. */
    memset(rows, 0x7f, sizeof rows);
    CHECK_STATUS(uform_encode_images(executor, model, mixed, 4, &out, NULL, NULL), uform_status_corrupt_file_k);
    CHECK_MESSAGE("uform_encode_images: image 1:");
    unsigned char sentinel[sizeof rows];
    memset(sentinel, 0x7f, sizeof sentinel);
    CHECK(memcmp(rows, sentinel, sizeof rows) == 0);

    /* Deferred, with statuses and without: decoded on the executor's threads either way. */
    uform_outcome_t outcome;
    memset(statuses, 0, sizeof statuses);
    CHECK_STATUS(uform_encode_images(executor, model, mixed, 4, &out, statuses, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(statuses[1] == uform_status_corrupt_file_k && statuses[2] == uform_status_ok_k);
    CHECK(cosine(rows[2], batch[2], width) > 0.999999);
    /* Without statuses the outcome fails with the lowest failed index (1 and 3 fail, maybe on
     * different threads), its message naming it, and nothing is written; the executor's next
     * deferred call reads OK again, on this executor and inline on the NULL one. */
    for (int round = 0; round < 8; ++round) {
        memset(rows, 0x7f, sizeof rows);
        CHECK_STATUS(uform_encode_images(executor, model, mixed, 4, &out, NULL, &outcome), uform_status_ok_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_corrupt_file_k);
        CHECK_MESSAGE("uform_encode_images: image 1: ");
        CHECK(outcome.finished && outcome.status == uform_status_corrupt_file_k);
        CHECK(strncmp(outcome.message, "uform_encode_images: image 1: ", 30) == 0);
        CHECK(memcmp(rows, sentinel, sizeof rows) == 0);
    }
    uform_image_t last_bad[4] = {photos[0], photos[1], photos[2], {.data = "", .size = 0}};
    CHECK_STATUS(uform_encode_images(NULL, model, last_bad, 4, &out, NULL, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_corrupt_file_k);
    CHECK(strncmp(outcome.message, "uform_encode_images: image 3: ", 30) == 0);
    CHECK(memcmp(rows, sentinel, sizeof rows) == 0);
    CHECK_STATUS(uform_encode_images(NULL, model, four, 1, &out, NULL, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(outcome.message[0] == '\0');
    CHECK(cosine(rows[0], batch[0], width) > 0.999999);
    CHECK_STATUS(uform_encode_images(executor, model, four, 4, &out, NULL, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    for (size_t i = 0; i < 4; ++i) CHECK(cosine(rows[i], batch[i], width) > 0.999999);

    /* DEFERRED_FULL: a deferred call holds the only slot. */
    blocker_t blocker = {0};
    uform_call_t hold = {.schedule = uform_schedule_static_k, .tasks = 1, .task = block_task, .context = &blocker};
    uform_outcome_t held;
    CHECK_STATUS(uform_executor_call(executor, &hold, &held), uform_status_ok_k);
    while (!atomic_load(&blocker.entered)) uform_sleep_seconds(0.001);
    CHECK_STATUS(uform_encode_images(executor, model, four, 4, &out, statuses, &outcome), uform_status_deferred_full_k);
    CHECK(outcome.finished && outcome.status == uform_status_deferred_full_k);
    atomic_store(&blocker.release, 1);
    CHECK_STATUS(uform_outcome_wait(&held, -1), uform_status_ok_k);

    /* CONTENDED from a callback of the same executor. */
    reentry_t reentry = {.executor = executor, .model = model, .status = 99};
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = reentry_task, .context = &reentry};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK(reentry.status == uform_status_contended_k);
    CHECK(strstr(reentry.message, "uform_encode_images: called from inside a callback") == reentry.message);

    /* Arguments. */
    CHECK_STATUS(uform_encode_images(executor, NULL, four, 1, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    CHECK_STATUS(uform_encode_images(executor, model, NULL, 1, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("images is NULL for 1 images");
    uform_image_t hole[2] = {photos[0], {.data = NULL, .size = 10}};
    CHECK_STATUS(uform_encode_images(executor, model, hole, 2, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("images[1].data is NULL");
    /* NULL data with zero size and width is an empty image: CORRUPT_FILE, its own status with statuses. */
    uform_image_t empty[2] = {photos[0], {.data = NULL}};
    CHECK_STATUS(uform_encode_images(executor, model, empty, 2, &out, NULL, NULL), uform_status_corrupt_file_k);
    CHECK_MESSAGE("uform_encode_images: image 1: image: empty data (0 bytes)");
    uform_status_t empty_statuses[2] = {uform_status_pending_k, uform_status_pending_k};
    CHECK_STATUS(uform_encode_images(executor, model, empty, 2, &out, empty_statuses, NULL), uform_status_ok_k);
    CHECK(empty_statuses[0] == uform_status_ok_k && empty_statuses[1] == uform_status_corrupt_file_k);
    uform_embeddings_t too_wide = {.data = rows, .dimensions = 300, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_images(executor, model, four, 1, &too_wide, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.dimensions is 300; the model's embeddings are 256 wide");
    uform_embeddings_t wrapping = {.data = rows, .stride = SIZE_MAX, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_images(executor, model, four, 2, &wrapping, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_images: embeddings: 2 rows 18446744073709551615 bytes apart run past the end of the address space");
    {
        /* A count past the address space is refused before `images` is walked: the two images given
         * end where a page that may not be read begins (reading images[2] would fault). */
        long const page = sysconf(_SC_PAGESIZE);
        unsigned char *pages = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(pages != MAP_FAILED && mprotect(pages + page, (size_t)page, PROT_NONE) == 0);
        uform_image_t *fenced = (uform_image_t *)(pages + page) - 2;
        fenced[0] = four[0], fenced[1] = four[1];
        uform_embeddings_t packed = {.data = rows, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(executor, model, fenced, (size_t)1 << 60, &packed, NULL, NULL),
                     uform_status_invalid_argument_k);
        CHECK_MESSAGE("run past the end of the address space");
        munmap(pages, 2 * (size_t)page);
    }
    float small_features[16];
    uform_embeddings_t short_features = {.data = rows, .dtype = uform_dtype_f32_k, .features = small_features,
                                         .features_stride = sizeof small_features};
    CHECK_STATUS(uform_encode_images(executor, model, four, 1, &short_features, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_images: embeddings.features_stride is 64 bytes; one item's features");
    short_features.features = NULL;
    CHECK_STATUS(uform_encode_images(executor, model, four, 1, &short_features, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_images: embeddings.features_stride is 64 with no features; set both or neither");
    /* bf16 rows at an odd address: the same bytes as aligned ones. */
    uint16_t aligned[2][256];
    unsigned char odd[2 * 513 + 1];
    uform_embeddings_t even_rows = {.data = aligned, .dtype = uform_dtype_bf16_k};
    uform_embeddings_t odd_rows = {.data = odd + 1, .stride = 513, .dtype = uform_dtype_bf16_k};
    CHECK_STATUS(uform_encode_images(executor, model, four, 2, &even_rows, NULL, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_encode_images(executor, model, four, 2, &odd_rows, NULL, NULL), uform_status_ok_k);
    CHECK(memcmp(odd + 1, aligned[0], 512) == 0 && memcmp(odd + 1 + 513, aligned[1], 512) == 0);
    CHECK_STATUS(uform_encode_images(executor, model, four, 1, NULL, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_encode_images(executor, model, four, 0, &out, NULL, NULL), uform_status_ok_k);
    char const *texts[] = {"a cat"};
    CHECK_STATUS(uform_encode_texts(executor, model, texts, NULL, 1, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("image model");
    int32_t ids[4];
    size_t produced = 0;
    CHECK_STATUS(uform_model_tokenize(model, "a", 1, ids, 4, &produced), uform_status_unsupported_k);

    /* Residency: a replica on another node than the executor's threads; a VRAM-resident model. */
    struct uform_model_s *inner = (struct uform_model_s *)model;
    int32_t saved = inner->replica_nodes[0];
    inner->replica_nodes[0] = 4095;
    CHECK_STATUS(uform_encode_images(executor, model, four, 1, &out, NULL, NULL), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("which holds no replica of the model");
    inner->replica_nodes[0] = saved;
    inner->residency = uform_residency_vram_k;
    CHECK_STATUS(uform_encode_images(executor, model, four, 1, &out, NULL, NULL), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("the model is VRAM-resident and the executor is a RAM executor");
    inner->residency = uform_residency_ram_k;

    free(truncated);
    uform_executor_free(executor);
    uform_model_free(model);
}

/* ---- Decompression bombs through the verb, on the patch-14 tower ---- */

/** The largest |a - b| over `n` values. */
static double max_difference(float const *a, float const *b, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = fabs((double)a[i] - b[i]) > worst ? fabs((double)a[i] - b[i]) : worst;
    return worst;
}

static void test_bombs(void) {
    char directory[512];
    snprintf(directory, sizeof directory, "%s/%s", root, tower_specs[2].name);
    uform_model_t model = open_tower(directory, uform_dtype_f32_k);
    CHECK_FATAL(model != NULL);
    size_t const width = 256;
    uform_executor_t executor = ram_executor(uform_cpu_class_unknown_k, 2, 1);
    CHECK_FATAL(executor != NULL);
    size_t png_size = 0, jpg_size = 0;
    char *png = read_file(UFORM_TEST_SOURCE_DIR "/image/bad/bomb.png", &png_size); /* 100,000 x 100,000 */
    char *jpg = read_file(UFORM_TEST_SOURCE_DIR "/image/bad/bomb.jpg", &jpg_size); /* 65,500 x 65,500 */
    CHECK_FATAL(png != NULL && jpg != NULL);
    uform_image_t const bomb_png = {.data = png, .size = png_size}, bomb_jpg = {.data = jpg, .size = jpg_size};

    /* The good photos alone. */
    uform_image_t const good[3] = {photos[0], photos[5], photos[8]};
    float alone[3][256];
    for (size_t i = 0; i < 3; ++i) {
        uform_embeddings_t one = {.data = alone[i], .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(executor, model, &good[i], 1, &one, NULL, NULL), uform_status_ok_k);
    }

    /* With statuses: each bomb gets LIMIT_EXCEEDED and a zero row, the call succeeds, and the good
     * photos' rows are those they get alone; blocking, then deferred. */
    uform_image_t const mixed[5] = {good[0], bomb_png, good[1], bomb_jpg, good[2]};
    size_t const good_at[3] = {0, 2, 4};
    float rows[5][256];
    unsigned char sentinel[sizeof rows];
    memset(sentinel, 0x7f, sizeof sentinel);
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    double worst_diff = 0;
    for (int deferred = 0; deferred < 2; ++deferred) {
        memset(rows, 0x7f, sizeof rows);
        uform_status_t statuses[5] = {99, 99, 99, 99, 99};
        uform_outcome_t outcome;
        CHECK_STATUS(uform_encode_images(executor, model, mixed, 5, &out, statuses, deferred ? &outcome : NULL),
                     uform_status_ok_k);
        if (deferred) CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
        CHECK(statuses[0] == uform_status_ok_k && statuses[1] == uform_status_limit_exceeded_k &&
              statuses[2] == uform_status_ok_k && statuses[3] == uform_status_limit_exceeded_k &&
              statuses[4] == uform_status_ok_k);
        for (size_t j = 0; j < width; ++j) CHECK(rows[1][j] == 0.0f && rows[3][j] == 0.0f);
        for (size_t i = 0; i < 3; ++i) {
            double const cos = cosine(rows[good_at[i]], alone[i], width), diff = max_difference(rows[good_at[i]], alone[i], width);
            if (!(cos > 0.999999 && diff < 1e-5))
                fprintf(stderr, "bombs%s: image %zu against alone: cosine %.9f, max |diff| %.2e\n",
                        deferred ? " (deferred)" : "", good_at[i], cos, diff);
            CHECK(cos > 0.999999 && diff < 1e-5);
            worst_diff = diff > worst_diff ? diff : worst_diff;
        }
    }

    /* Without statuses: the first bomb (lowest index) fails the call with LIMIT_EXCEEDED, the
     * message naming its index and the header's size, and no row is written. */
    memset(rows, 0x7f, sizeof rows);
    CHECK_STATUS(uform_encode_images(executor, model, mixed, 5, &out, NULL, NULL), uform_status_limit_exceeded_k);
    CHECK_MESSAGE("uform_encode_images: image 1: ");
    CHECK_MESSAGE("the PNG header says 100000 x 100000 pixels");
    CHECK_MESSAGE("a decompression bomb");
    CHECK(memcmp(rows, sentinel, sizeof rows) == 0);
    uform_image_t const late[4] = {good[0], good[1], bomb_jpg, good[2]};
    CHECK_STATUS(uform_encode_images(executor, model, late, 4, &out, NULL, NULL), uform_status_limit_exceeded_k);
    CHECK_MESSAGE("uform_encode_images: image 2: ");
    CHECK_MESSAGE("the JPEG header says 65500 x 65500 pixels");
    CHECK(memcmp(rows, sentinel, sizeof rows) == 0);
    /* ... and the NULL executor the same. */
    CHECK_STATUS(uform_encode_images(NULL, model, late, 4, &out, NULL, NULL), uform_status_limit_exceeded_k);
    CHECK_MESSAGE("uform_encode_images: image 2: ");
    CHECK(memcmp(rows, sentinel, sizeof rows) == 0);
    printf("bombs: LIMIT_EXCEEDED per item, good rows as alone within %.2e; without statuses: %s\n", worst_diff,
           uform_error_message());

    free(png), free(jpg);
    uform_executor_free(executor);
    uform_model_free(model);
}

/* ---- A pool executor, on the patch-14 tower ---- */

/** The photos on a ForkUnion pool of two threads (the stand-in, test/standin) give the rows a RAM
 *  executor gives, in f32 and bf16 weights. */
static void test_pool(void) {
#ifdef UFORM_FU_STANDIN_PATH
    void *library = dlopen(UFORM_FU_STANDIN_PATH, RTLD_NOW | RTLD_GLOBAL);
    void *(*pool_new)(char const *) = library ? (void *(*)(char const *))dlsym(library, "fu_pool_new") : NULL;
    int (*pool_spawn)(void *, size_t, int) = library ? (int (*)(void *, size_t, int))dlsym(library, "fu_pool_spawn") : NULL;
    void (*pool_delete)(void *) = library ? (void (*)(void *))dlsym(library, "fu_pool_delete") : NULL;
    if (!pool_new || !pool_spawn || !pool_delete) {
        fprintf(stderr, "pool executor: the ForkUnion stand-in did not load (%s)\n", dlerror());
        CHECK(pool_new && pool_spawn && pool_delete);
        return;
    }
    void *pool = pool_new("images");
    CHECK_FATAL(pool != NULL);
    CHECK(pool_spawn(pool, 2, 0));
    uform_executor_t pooled = NULL;
    CHECK_STATUS(uform_executor_on_pool(pool, NULL, 0, &pooled), uform_status_ok_k);
    CHECK_FATAL(pooled != NULL);
    uform_executor_t executor = ram_executor(uform_cpu_class_unknown_k, 2, 0);
    CHECK_FATAL(executor != NULL);
    uform_executor_description_t on_pool, on_ram;
    CHECK_OK(uform_executor_describe(pooled, &on_pool));
    CHECK_OK(uform_executor_describe(executor, &on_ram));
    CHECK(on_pool.kind == uform_executor_kind_pool_k && on_pool.threads_count == 2);
    CHECK(on_pool.cpu_class == on_ram.cpu_class);
    /* As many threads of the same class split the work the same way: the same bits. */
    int const same_split = on_ram.threads_count == on_pool.threads_count;
    char directory[512];
    snprintf(directory, sizeof directory, "%s/%s", root, tower_specs[2].name);
    size_t const width = 256;
    float *ram_rows = calloc(photos_count * width, sizeof(float)), *pool_rows = calloc(photos_count * width, sizeof(float));
    CHECK_FATAL(ram_rows && pool_rows);
    uform_dtype_t const dtypes[2] = {uform_dtype_f32_k, uform_dtype_bf16_k};
    for (size_t k = 0; k < 2; ++k) {
        uform_model_t model = open_tower(directory, dtypes[k]);
        CHECK_FATAL(model != NULL);
        uform_embeddings_t ram_out = {.data = ram_rows, .dtype = uform_dtype_f32_k};
        uform_embeddings_t pool_out = {.data = pool_rows, .dtype = uform_dtype_f32_k};
        uform_status_t statuses[PHOTOS_MAX];
        CHECK_STATUS(uform_encode_images(executor, model, photos, photos_count, &ram_out, NULL, NULL), uform_status_ok_k);
        CHECK_STATUS(uform_encode_images(pooled, model, photos, photos_count, &pool_out, statuses, NULL), uform_status_ok_k);
        double worst = 1, diff = max_difference(pool_rows, ram_rows, photos_count * width);
        for (size_t i = 0; i < photos_count; ++i) {
            CHECK(statuses[i] == uform_status_ok_k);
            double const cos = cosine(pool_rows + i * width, ram_rows + i * width, width);
            worst = cos < worst ? cos : worst;
        }
        printf("%-14s %-4s pool executor: worst cosine to the RAM executor over %zu photos %.7f, max |diff| %.2e\n",
               tower_specs[2].name, k ? "bf16" : "f32", photos_count, worst, diff);
        /* With other splits (a RAM executor held to fewer cores by the process's affinity) the
         * products block and round otherwise: f32 within 1e-5, bf16 activations by a bf16 step
         * (5.7e-3 measured on one core against the pool's two threads). */
        if (k == 0) CHECK(worst > 0.999999 && diff < 1e-5);
        else CHECK(worst > 0.9999);
        if (same_split) CHECK(memcmp(pool_rows, ram_rows, photos_count * width * sizeof(float)) == 0);
        uform_model_free(model);
    }
    free(ram_rows), free(pool_rows);
    uform_executor_free(executor);
    uform_executor_free(pooled);
    pool_delete(pool);
#else
    printf("pool executor: not built with the ForkUnion stand-in\n");
#endif
}

/* ---- One image at a time on a group of two threads ---- */

/** Each photo alone on a 2-thread executor (one group of both threads: the batch-1 plan) against the
 *  rows of the whole batch (one thread per image), for every tower in bf16, with the products split
 *  by whole rows (the default for groups of up to 4 threads, `uform_forward_row_tiles_threads`) and
 *  by columns (UFORM_ROW_TILES_THREADS=0); and in f32 (where columns serve). A split differs from
 *  another only in how the products block and round, so the rows agree to a bf16 step. */
static void test_one_at_a_time(void) {
    uform_executor_t executor = ram_executor(uform_cpu_class_unknown_k, 2, 0);
    CHECK_FATAL(executor != NULL);
    uform_executor_description_t description;
    CHECK_OK(uform_executor_describe(executor, &description));
    for (size_t t = 0; t < 3; ++t) {
        tower_spec_t const *spec = &tower_specs[t];
        char directory[512];
        snprintf(directory, sizeof directory, "%s/%s", root, spec->name);
        size_t const width = spec->embedding_dim;
        float *batch = calloc(photos_count * width, sizeof(float)), *alone = calloc(photos_count * width, sizeof(float));
        CHECK_FATAL(batch && alone);
        uform_dtype_t const dtypes[2] = {uform_dtype_bf16_k, uform_dtype_f32_k};
        for (size_t k = 0; k < 2; ++k) {
            uform_model_t model = open_tower(directory, dtypes[k]);
            CHECK_FATAL(model != NULL);
            uform_embeddings_t out = {.data = batch, .dtype = uform_dtype_f32_k};
            CHECK_STATUS(uform_encode_images(executor, model, photos, photos_count, &out, NULL, NULL), uform_status_ok_k);
            char const *splits[2] = {NULL, "0"};
            for (size_t split = 0; split < (k ? 1u : 2u); ++split) {
                if (splits[split]) CHECK(setenv("UFORM_ROW_TILES_THREADS", splits[split], 1) == 0);
                for (size_t i = 0; i < photos_count; ++i) {
                    uform_embeddings_t one = {.data = alone + i * width, .dtype = uform_dtype_f32_k};
                    CHECK_STATUS(uform_encode_images(executor, model, &photos[i], 1, &one, NULL, NULL), uform_status_ok_k);
                }
                CHECK(unsetenv("UFORM_ROW_TILES_THREADS") == 0);
                double worst = 1;
                for (size_t i = 0; i < photos_count; ++i) {
                    double const cos = cosine(alone + i * width, batch + i * width, width);
                    worst = cos < worst ? cos : worst;
                }
                printf("%-14s %-4s one photo at a time on %zu threads (%s): worst cosine to the batch's rows %.7f%s\n",
                       spec->name, k ? "f32" : "bf16", description.threads_count,
                       k ? "the plan's tiles" : split ? "column tiles" : "whole-row tiles", worst,
                       memcmp(alone, batch, photos_count * width * sizeof(float)) ? "" : " (bit for bit)");
                CHECK(worst > (k ? 0.999999 : 0.9999));
            }
            uform_model_free(model);
        }
        free(batch), free(alone);
    }
    uform_executor_free(executor);
}

/* ---- The loader's validation ---- */

static void write_text(char const *path, char const *text) {
    FILE *f = fopen(path, "w");
    CHECK_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void expect_open(char const *directory, uform_status_t status, char const *needle) {
    uform_model_options_t options = {.path = directory, .modality = uform_modality_image_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = (uform_model_t)0x1;
    CHECK_STATUS(uform_model_open(&options, &model), status);
    CHECK(model == NULL);
    CHECK_MESSAGE(needle);
}

/** `image_encoder.layer_norm_eps`: refused when not a number in (0, 1) that float32 holds as a normal
 *  number, naming the file and key; 1e-6 when absent or null; read into every replica and used. */
static void test_epsilon(char const *directory, char const *config_path, char const *base) {
    char config[1024];
    char const *refused[][2] = {
        {"\"1e-5\"", "must be a number in (0, 1)"},
        {"true", "must be a number in (0, 1)"},
        {"[1e-5]", "must be a number in (0, 1)"},
        {"0", "must be a number in (0, 1) that float32 holds as a normal number, not 0"},
        {"-1e-6", "not -1e-06"},
        {"1", "not 1"},
        {"1e999", "not inf"},
        {"1e-39", "not 1e-39"}, /* a float32 denormal */
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; ++i) {
        snprintf(config, sizeof config, "{\"image_encoder\": {%s, \"pooling\": \"cls\", \"layer_norm_eps\": %s}}", base,
                 refused[i][0]);
        write_text(config_path, config);
        expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.layer_norm_eps' must be a number in (0, 1)");
        CHECK_MESSAGE(config_path);
        CHECK_MESSAGE(refused[i][1]);
    }
    /* Absent, null, the default spelled out, a larger one: the replicas hold it, and only the
     * larger one changes the embedding. */
    char const *given[] = {NULL, "null", "1e-6", "0.5"};
    double const expected[] = {1e-6, 1e-6, 1e-6, 0.5};
    float rows[4][32];
    for (size_t i = 0; i < 4; ++i) {
        if (given[i])
            snprintf(config, sizeof config, "{\"image_encoder\": {%s, \"pooling\": \"cls\", \"layer_norm_eps\": %s}}",
                     base, given[i]);
        else snprintf(config, sizeof config, "{\"image_encoder\": {%s, \"pooling\": \"cls\"}}", base);
        write_text(config_path, config);
        uform_model_t model = open_tower(directory, uform_dtype_f32_k);
        CHECK_FATAL(model != NULL);
        struct uform_model_s const *inner = (struct uform_model_s const *)model;
        for (size_t r = 0; r < inner->replicas_count; ++r)
            CHECK(uform_model_image_replica(inner, inner->replica_nodes[r])->config.layer_norm_epsilon == expected[i]);
        uform_embeddings_t out = {.data = rows[i], .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(NULL, model, &photos[1], 1, &out, NULL, NULL), uform_status_ok_k);
        uform_model_free(model);
    }
    CHECK(memcmp(rows[1], rows[0], sizeof rows[0]) == 0 && memcmp(rows[2], rows[0], sizeof rows[0]) == 0);
    double const moved = cosine(rows[3], rows[0], 32);
    printf("layer_norm_eps 0.5 against the default 1e-6: cosine %.7f\n", moved);
    CHECK(moved < 0.999);
}

static void test_loader(void) {
    char directory[512], path[600];
    snprintf(directory, sizeof directory, "%s/broken", root);
    /* A tower whose file lacks the register tokens the config names. */
    tower_spec_t spec = tower_specs[2];
    spec.name = "broken", spec.layers = 1, spec.dim = 64, spec.heads = 2, spec.reg_tokens = 0, spec.embedding_dim = 32;
    tower_write(directory, &spec);
    snprintf(path, sizeof path, "%s/config.json", directory);
    char const *base = "\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, \"num_heads\": 2, "
                       "\"embedding_dim\": 32, \"normalization_means\": [0.5, 0.5, 0.5], "
                       "\"normalization_deviations\": [0.5, 0.5, 0.5]";
    char config[1024];
    snprintf(config, sizeof config, "{\"image_encoder\": {%s, \"pooling\": \"cls\", \"num_reg_tokens\": 2}}", base);
    write_text(path, config);
    expect_open(directory, uform_status_corrupt_file_k, "image_encoder.safetensors: tensor 'reg_token' of shape [1, 2, 64] is missing");
    snprintf(config, sizeof config,
             "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
             "\"num_heads\": 2, \"embedding_dim\": 48, \"pooling\": \"cls\", \"normalization_means\": [0.5, 0.5, 0.5], "
             "\"normalization_deviations\": [0.5, 0.5, 0.5]}}");
    write_text(path, config);
    expect_open(directory, uform_status_corrupt_file_k,
                "tensor 'embedding_projection.weight' should have shape [48, 64], found [32, 64]");
    snprintf(config, sizeof config, "{\"image_encoder\": {%s, \"pooling\": \"max\"}}", base);
    write_text(path, config);
    expect_open(directory, uform_status_unsupported_k, "'image_encoder.pooling' is 'max'");
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
                     "\"num_heads\": 3, \"embedding_dim\": 32, \"pooling\": \"cls\"}}");
    expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.dim' 64 is not a multiple of 'image_encoder.num_heads' 3");
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"normalization_means\": [0.5, 0.5, 0.5], "
                     "\"normalization_deviations\": [0.5, 0, 0.5]}}");
    expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.normalization_deviations' must hold 3 positive numbers, not 0");
    /* A deviation that rounds to a float32 denormal (or zero) would divide the pixels into infinity. */
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"normalization_means\": [0.5, 0.5, 0.5], "
                     "\"normalization_deviations\": [1e-45, 0.5, 0.5]}}");
    expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.normalization_deviations' must hold 3 positive numbers, not 1e-45");
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"normalization_means\": [0.5, 1e300, 0.5], "
                     "\"normalization_deviations\": [0.5, 0.5, 0.5]}}");
    expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.normalization_means' must hold 3 numbers, not 1e+300");
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"normalization_means\": [0.5, \"0.5\", 0.5], "
                     "\"normalization_deviations\": [0.5, 0.5, 0.5]}}");
    expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.normalization_means' must hold 3 numbers; item 1 is not one");
    /* Matryoshka widths name the section they came from: the image encoder's own, else the root's. */
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"normalization_means\": [0.5, 0.5, 0.5], "
                     "\"normalization_deviations\": [0.5, 0.5, 0.5], \"matryoshka_dims\": [8, 64]}}");
    expect_open(directory, uform_status_corrupt_file_k, "'image_encoder.matryoshka_dims' must hold integers in [1, 32]");
    write_text(path, "{\"matryoshka_dims\": [8, 64], \"image_encoder\": {\"dim\": 64, \"patch_size\": 14, \"image_size\": 230, "
                     "\"num_layers\": 1, \"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"normalization_means\": [0.5, 0.5, 0.5], "
                     "\"normalization_deviations\": [0.5, 0.5, 0.5]}}");
    expect_open(directory, uform_status_corrupt_file_k, ": 'matryoshka_dims' must hold integers in [1, 32]");
    /* A sequence whose attention scores (tokens x tokens per thread) could never be held: refused at open. */
    write_text(path, "{\"image_encoder\": {\"dim\": 64, \"patch_size\": 1, \"image_size\": 91, \"num_layers\": 1, "
                     "\"num_heads\": 2, \"embedding_dim\": 32, \"pooling\": \"cls\", \"num_reg_tokens\": 2, "
                     "\"normalization_means\": [0.5, 0.5, 0.5], \"normalization_deviations\": [0.5, 0.5, 0.5]}}");
    expect_open(directory, uform_status_unsupported_k, "'image_encoder.image_size' 91 in patches of 1 pixels (and 2 register "
                "tokens) makes 8284 tokens, more than the 8192 this engine's attention holds");
    write_text(path, "{\"text_encoder\": {}}");
    expect_open(directory, uform_status_unsupported_k, "missing key 'image_encoder': the model has no image tower");
    write_text(path, "[1, 2]");
    expect_open(directory, uform_status_corrupt_file_k, "config.json: not a JSON object");
    write_text(path, "{\"image_encoder\": {\"dim\": 64}}");
    expect_open(directory, uform_status_corrupt_file_k, "missing key 'image_encoder.patch_size'");
    snprintf(config, sizeof config, "{\"image_encoder\": {%s, \"pooling\": \"cls\"}}", base);
    write_text(path, config);
    uform_model_t model = open_tower(directory, uform_dtype_f16_k);
    uform_model_description_t description;
    CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
    CHECK(description.image_size == 230 && description.dimensions == 32 && description.weights_dtype == uform_dtype_f16_k);
    float row[32];
    uform_embeddings_t out = {.data = row, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_images(NULL, model, &photos[1], 1, &out, NULL, NULL), uform_status_ok_k);
    double norm = 0;
    for (size_t j = 0; j < 32; ++j) norm += (double)row[j] * row[j];
    CHECK(norm > 0 && isfinite(norm));
    uform_model_free(model);
    test_epsilon(directory, path, base);
    snprintf(path, sizeof path, "%s/image_encoder.safetensors", directory);
    write_text(path, "not safetensors");
    expect_open(directory, uform_status_corrupt_file_k, "image_encoder.safetensors");
}

static void remove_tree(char const *directory) {
    char const *names[] = {"config.json", "image_encoder.safetensors"};
    char const *towers[] = {"vit-s16", "vit-b16", "vit-p14-reg4", "broken"};
    for (size_t t = 0; t < 4; ++t) {
        char path[700];
        for (size_t n = 0; n < 2; ++n) {
            snprintf(path, sizeof path, "%s/%s/%s", directory, towers[t], names[n]);
            unlink(path);
        }
        snprintf(path, sizeof path, "%s/%s", directory, towers[t]);
        rmdir(path);
    }
    rmdir(directory);
}

/* ---- Many threads racing on one model ---- */

enum { image_racers = 6, image_race_rounds = 3, image_race_items = 3 };

typedef struct image_racer_t {
    uform_model_t model;
    uform_executor_t executor; /**< NULL: the NULL executor; else its own, or one it shares. */
    int deferred, shares;
    uform_image_t const *images;
    float const *expected; /**< `image_race_items` rows of 256. */
    size_t ok, contended, mismatched;
    uform_status_t failure;
    char message[256];
} image_racer_t;

static void *race_images_on_model(void *context) {
    image_racer_t *r = context;
    float rows[image_race_items][256], first[image_race_items][256];
    for (size_t round = 0; round < image_race_rounds;) {
        memset(rows, 0, sizeof rows);
        uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
        uform_outcome_t outcome;
        uform_status_t status = uform_encode_images(r->executor, r->model, r->images, image_race_items, &out, NULL,
                                                    r->deferred ? &outcome : NULL);
        if (status == uform_status_ok_k && r->deferred) status = uform_outcome_wait(&outcome, -1);
        if (status == uform_status_contended_k && r->shares && r->contended < 1000000) {
            ++r->contended, sched_yield();
            continue;
        }
        ++round;
        if (status != uform_status_ok_k) {
            if (!r->failure) r->failure = status, snprintf(r->message, sizeof r->message, "%s", uform_error_message());
            continue;
        }
        if (++r->ok == 1) memcpy(first, rows, sizeof rows);
        for (size_t i = 0; i < image_race_items; ++i)
            r->mismatched += cosine(rows[i], r->expected + i * 256, 256) <= 0.999999 ||
                             memcmp(rows[i], first[i], sizeof rows[i]) != 0;
    }
    return NULL;
}

/** One image model, six threads at once: two on the NULL executor, two on RAM executors of their
 *  own (one deferred), two sharing one (OK, or CONTENDED at once and tried again); photos from
 *  their bytes and from raw pixels, every row as the single-threaded baseline's, each racer's bit
 *  for bit its first. */
static void test_racing(void) {
    char directory[512];
    snprintf(directory, sizeof directory, "%s/%s", root, tower_specs[2].name);
    uform_model_t model = open_tower(directory, uform_dtype_f32_k);
    CHECK_FATAL(model != NULL && photos_count > 5);
    uint8_t *rgb = NULL;
    size_t w = 0, h = 0;
    CHECK_OK(uform_image_decode_rgb(&photos[5], 0, &rgb, &w, &h));
    uform_image_t const images[image_race_items] = {photos[0], {.data = rgb, .size = w * h * 3, .width = w, .height = h},
                                                    photos[4]};
    float expected[image_race_items][256];
    uform_embeddings_t out = {.data = expected, .dtype = uform_dtype_f32_k};
    CHECK_OK(uform_encode_images(NULL, model, images, image_race_items, &out, NULL, NULL));
    uform_executor_t executors[image_racers] = {
        NULL, NULL, ram_executor(uform_cpu_class_unknown_k, 1, 1), ram_executor(uform_cpu_class_unknown_k, 2, 1),
        ram_executor(uform_cpu_class_unknown_k, 1, 1), NULL};
    CHECK_FATAL(executors[2] && executors[3] && executors[4]);
    image_racer_t r[image_racers];
    pthread_t threads[image_racers];
    for (size_t i = 0; i < image_racers; ++i) {
        r[i] = (image_racer_t) {.model = model, .executor = i == 5 ? executors[4] : executors[i], .deferred = i % 2,
                                .shares = i >= 4, .images = images, .expected = &expected[0][0]};
        CHECK_FATAL(pthread_create(&threads[i], NULL, race_images_on_model, &r[i]) == 0);
    }
    size_t contended = 0;
    for (size_t i = 0; i < image_racers; ++i) {
        pthread_join(threads[i], NULL);
        if (r[i].failure) fprintf(stderr, "racer %zu: %s: %s\n", i, uform_status_name(r[i].failure), r[i].message);
        CHECK(r[i].failure == uform_status_ok_k && r[i].ok == image_race_rounds && r[i].mismatched == 0);
        CHECK(r[i].shares || r[i].contended == 0);
        contended += r[i].contended;
    }
    printf("racing: %d threads x %d rounds of %d images on one model, %zu CONTENDED (the shared executor), rows as "
           "the baseline\n", image_racers, image_race_rounds, image_race_items, contended);
    for (size_t i = 0; i < image_racers; ++i) uform_executor_free(executors[i]);
    free(rgb);
    uform_model_free(model);
}

int main(int argc, char **argv) {
    if (skip_refused_run()) return 77;
    pin_classes = argc > 1 && strcmp(argv[1], "--classes") == 0;
    char const *temporary = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/uform-test-images-XXXXXX", temporary && *temporary ? temporary : "/tmp");
    CHECK_FATAL(mkdtemp(root) != NULL);
    load_references();
    test_references();
    test_verb();
    test_bombs();
    test_pool();
    test_one_at_a_time();
    test_racing();
    test_loader();
    for (size_t i = 0; i < photos_count; ++i) free((void *)photos[i].data);
    remove_tree(root);
    if (check_failures) fprintf(stderr, "%d checks failed\n", check_failures);
    return check_failures ? 1 : 0;
}
