/**
 *  @file   test_encode_images_gpu.c
 *  @brief  `uform_encode_images` with VRAM-resident image towers, against this engine's CPU path on the
 *          same model files: the random ViTs of test/encode_images/towers.h (ViT-S/16-shaped with CLS
 *          pooling, ViT-B/16-shaped with mean pooling, patch 14 with 4 register tokens and a
 *          remainder) and the photos of test/image/photos, decoded from their bytes.
 *
 *  Checks: cosine >= 0.99999 per row in f32 and >= 0.999 in bf16 and f16 against the CPU path in f32;
 *  features likewise (per token row), from a deferred call and past the 256 MiB the staging buffer
 *  takes; output options (truncation, normalisation, bf16 rows, a stride); a bad image's status and zero
 *  row; a bad image failing the call without statuses, naming its index; RESIDENCY_MISMATCH (RAM
 *  executor, RAM model on a VRAM executor, a device without a copy), UNSUPPORTED on the NULL
 *  executor; LIMIT_EXCEEDED when one image cannot fit `scratch_limit`; a batch split into chunks to
 *  fit a small limit; graphs (three calls of one shape give identical rows); deferred calls; waves
 *  (a batch decoded in parts while the device runs the part before: bad items, forced wave sizes, a
 *  one-entry ring, a deferred call, all against the CPU path); two devices when there are two; a
 *  device fault during an encode (a trapping kernel queued ahead of the verb, in a child process as
 *  the sticky error breaks the device's primary context for the whole process): DEVICE_FAULT naming
 *  the driver's error, no row written, the executor poisoned for later calls, the RAM executor
 *  beside it unharmed, clean frees.
 *  ctest runs it twice: as is, and with UFORM_GPU_UPLOAD_SPLIT=2, where every share of two or more
 *  images is cut in two chunks with overlapped uploads (as shares of 128 images and more are by
 *  default). Without a GPU (here and in CI) it checks the refusals and exits 77
 *  (skipped) naming the reason.
 *
 *      test_encode_images_gpu [--dump DIRECTORY]   keeps the towers, the photo list and the GPU
 *                                                  embeddings there for
 *                                                  test/encode_images/gpu_torch_check.py.
 *
 *  Environment: UFORM_TEST_UNDER_SANITIZER=1 skips the fault (the trap), which compute-sanitizer
 *  would count as an error.
 */
#define _GNU_SOURCE
#include "check.h"
#include "rows.h"
#include "encode_images/towers.h"
#include "fault_harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef UFORM_TEST_SOURCE_DIR
#error "UFORM_TEST_SOURCE_DIR must name test/"
#endif

static char const *dump_directory = NULL;
static char root[512];
static uform_executor_t ram_executor = NULL;

static char const *const photo_names[] = {"astronaut.png", "camera.png", "chelsea.png", "coffee.png", "franz-kafka.jpg",
                                          "grace_hopper.jpg", "horse.png", "logo.png", "rocket.jpg"};
#define PHOTOS (sizeof photo_names / sizeof *photo_names)
#define BATCH 24
static uform_image_t batch[BATCH];
static char *photo_bytes[PHOTOS];

static uform_model_t open_model(char const *path, uform_residency_t residency, uform_dtype_t dtype,
                                uform_vram_options_t const *vram) {
    uform_model_options_t options = {.path = path, .modality = uform_modality_image_k, .residency = residency,
                                     .vram = vram, .weights_dtype = dtype};
    uform_model_t model = NULL;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_ok_k);
    return model;
}

static size_t width_of(uform_model_t model) {
    uform_model_description_t description;
    CHECK_FATAL(uform_model_describe(model, &description) == uform_status_ok_k);
    return description.dimensions;
}

/** CPU reference rows (f32 weights) for the batch. */
static float *cpu_rows(char const *path, size_t *dims) {
    uform_model_t model = open_model(path, uform_residency_ram_k, uform_dtype_f32_k, NULL);
    CHECK_FATAL(model != NULL);
    *dims = width_of(model);
    float *rows = (float *)calloc(BATCH * *dims, sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_images(ram_executor, model, batch, BATCH, &out, NULL, NULL), uform_status_ok_k);
    uform_model_free(model);
    return rows;
}

static void dump(char const *name, float const *rows, size_t count, size_t dims) {
    if (!dump_directory) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.f32", dump_directory, name);
    FILE *file = fopen(path, "wb");
    CHECK_FATAL(file != NULL);
    fwrite(rows, sizeof(float), count * dims, file);
    fclose(file);
}

/** Encodes the batch on `executor` with `dtype` weights and checks every row's cosine to the CPU's. */
static void check_tower(char const *label, char const *path, uform_executor_t executor, uform_vram_options_t const *vram,
                        uform_dtype_t dtype, double threshold) {
    size_t dims = 0;
    float *expected = cpu_rows(path, &dims);
    uform_model_t model = open_model(path, uform_residency_vram_k, dtype, vram);
    if (!model) {
        free(expected);
        return;
    }
    float *rows = (float *)calloc(BATCH * dims, sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    uform_status_t statuses[BATCH];
    CHECK_STATUS(uform_encode_images(executor, model, batch, BATCH, &out, statuses, NULL), uform_status_ok_k);
    double worst = 1.0;
    size_t worst_row = 0;
    for (size_t i = 0; i < BATCH; ++i) {
        CHECK(statuses[i] == uform_status_ok_k);
        double c = cosine(rows + i * dims, expected + i * dims, dims);
        if (c < worst) worst = c, worst_row = i;
    }
    printf("%-40s %d images, worst cosine %.7f (row %zu), threshold %g\n", label, BATCH, worst, worst_row, threshold);
    CHECK(worst >= threshold);
    char name[256];
    snprintf(name, sizeof name, "%s", label);
    for (char *c = name; *c; ++c)
        if (*c == ' ' || *c == '/') *c = '_';
    dump(name, rows, PHOTOS, dims);
    free(rows), free(expected);
    uform_model_free(model);
}

/** The VRAM tower's features of the batch and of a corrupt image after it (with statuses) against
 *  the CPU tower's (f32 weights): cosine >= `threshold` per token row, the corrupt image's features
 *  and row zero, the rows asked with features against the CPU's; then bf16 features at a wider
 *  stride, the bytes between items untouched. */
static void check_tower_features(char const *label, char const *path, uform_executor_t executor,
                                 uform_vram_options_t const *vram, uform_dtype_t dtype, double threshold) {
    uform_model_t cpu = open_model(path, uform_residency_ram_k, uform_dtype_f32_k, NULL);
    uform_model_t gpu = open_model(path, uform_residency_vram_k, dtype, vram);
    CHECK_FATAL(cpu && gpu);
    uform_model_description_t md;
    CHECK_OK(uform_model_describe(gpu, &md));
    size_t const n = BATCH + 1, item = md.tokens * md.hidden, dims = md.dimensions;
    uform_image_t images[BATCH + 1];
    memcpy(images, batch, sizeof batch);
    images[BATCH] = (uform_image_t){.data = "not an image", .size = 12};
    float *cpu_features = malloc(n * item * sizeof(float)), *gpu_features = malloc(n * item * sizeof(float));
    float *cpu_out = malloc(n * dims * sizeof(float)), *gpu_out = malloc(n * dims * sizeof(float));
    memset(gpu_features, 0x5A, n * item * sizeof(float));
    uform_status_t statuses[BATCH + 1];
    uform_embeddings_t a = {.data = cpu_out, .dtype = uform_dtype_f32_k, .features = cpu_features};
    uform_embeddings_t b = {.data = gpu_out, .dtype = uform_dtype_f32_k, .features = gpu_features};
    CHECK_STATUS(uform_encode_images(ram_executor, cpu, images, n, &a, statuses, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_encode_images(executor, gpu, images, n, &b, statuses, NULL), uform_status_ok_k);
    CHECK(statuses[BATCH] == uform_status_corrupt_file_k);
    double worst = 1, worst_row = 1;
    for (size_t i = 0; i < BATCH; ++i) {
        for (size_t t = 0; t < md.tokens; ++t) {
            double c = cosine(gpu_features + i * item + t * md.hidden, cpu_features + i * item + t * md.hidden, md.hidden);
            worst = c < worst ? c : worst;
        }
        double c = cosine(gpu_out + i * dims, cpu_out + i * dims, dims);
        worst_row = c < worst_row ? c : worst_row;
    }
    size_t nonzero = 0;
    for (size_t v = 0; v < item; ++v) nonzero += gpu_features[BATCH * item + v] != 0.0f;
    for (size_t v = 0; v < dims; ++v) nonzero += gpu_out[BATCH * dims + v] != 0.0f;
    printf("%-40s features: worst cosine %.7f per token, rows %.7f\n", label, worst, worst_row);
    CHECK(worst >= threshold && worst_row >= threshold);
    CHECK(nonzero == 0);
    /* bf16 features at a wider stride: the f32 run's within bf16, the gap untouched. */
    size_t const stride = item * 2 + 32;
    unsigned char *narrow = malloc(BATCH * stride);
    memset(narrow, 0xA5, BATCH * stride);
    uform_embeddings_t c16 = {.data = gpu_out, .dtype = uform_dtype_bf16_k, .features = narrow, .features_stride = stride};
    CHECK_STATUS(uform_encode_images(executor, gpu, batch, BATCH, &c16, NULL, NULL), uform_status_ok_k);
    size_t touched = 0;
    double worst16 = 1;
    float *row = malloc(md.hidden * sizeof(float));
    for (size_t i = 0; i < BATCH; ++i) {
        for (size_t g = item * 2; g < stride; ++g) touched += narrow[i * stride + g] != 0xA5;
        uint16_t const *bits = (uint16_t const *)(narrow + i * stride);
        for (size_t t = 0; t < md.tokens; t += 7) {
            for (size_t j = 0; j < md.hidden; ++j) row[j] = from_bf16(bits[t * md.hidden + j]);
            double c = cosine(row, cpu_features + i * item + t * md.hidden, md.hidden);
            worst16 = c < worst16 ? c : worst16;
        }
    }
    printf("%-40s bf16 features at a %zu-byte stride: worst cosine %.7f, gap bytes touched %zu\n", label, stride, worst16,
           touched);
    CHECK(worst16 >= (threshold < 0.999 ? threshold : 0.999) && touched == 0);
    free(row), free(narrow), free(cpu_features), free(gpu_features), free(cpu_out), free(gpu_out);
    uform_model_free(cpu), uform_model_free(gpu);
}

/* ---- A device fault during an encode (in a child process) ---- */

static void load_photos(void) {
    for (size_t i = 0; i < PHOTOS; ++i) {
        char path[1024];
        size_t size = 0;
        snprintf(path, sizeof path, "%s/image/photos/%s", UFORM_TEST_SOURCE_DIR, photo_names[i]);
        photo_bytes[i] = read_file(path, &size);
        CHECK_FATAL(photo_bytes[i] != NULL);
        for (size_t j = i; j < BATCH; j += PHOTOS) batch[j] = (uform_image_t){.data = photo_bytes[i], .size = size};
    }
}


/* ---- Deferred encodes in flight together ---- */


/** Two deferred encodes of one model behind a 300 ms device sleep return before the device gets to
 *  them, their rows unwritten until their outcomes finish; then both match the CPU rows. */
static void test_deferred_in_flight(char const *tower, uform_vram_options_t const *one) {
    size_t dims = 0;
    float *expected = cpu_rows(tower, &dims);
    uform_model_t gpu = open_model(tower, uform_residency_vram_k, uform_dtype_f32_k, one);
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(one, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    CHECK_FATAL(gpu && executor);
    float *rows[2];
    uform_outcome_t outcomes[2];
    for (int c = 0; c < 2; ++c) {
        rows[c] = (float *)malloc(BATCH * dims * sizeof(float));
        uform_embeddings_t out = {.data = rows[c], .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(executor, gpu, batch, BATCH, &out, NULL, NULL), uform_status_ok_k); // warm
    }
    double const nanoseconds = 300e6;
    uform_call_t const sleep = {.residency = uform_residency_vram_k, .device = fault_sleep_callback, .context = (void *)&nanoseconds};
    uform_outcome_t slept;
    CHECK_STATUS(uform_executor_call(executor, &sleep, &slept), uform_status_ok_k);
    int pending[2], untouched[2];
    for (int c = 0; c < 2; ++c) {
        memset(rows[c], 0x7f, BATCH * dims * sizeof(float));
        uform_embeddings_t out = {.data = rows[c], .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(executor, gpu, batch, BATCH, &out, NULL, &outcomes[c]), uform_status_ok_k);
        pending[c] = !__atomic_load_n(&outcomes[c].finished, __ATOMIC_ACQUIRE);
        untouched[c] = rows_untouched(rows[c], BATCH * dims);
    }
    printf("two deferred image encodes behind a 300 ms device sleep: pending on return %d %d, rows untouched %d %d\n",
           pending[0], pending[1], untouched[0], untouched[1]);
    CHECK(pending[0] && pending[1] && untouched[0] && untouched[1]);
    for (int c = 1; c >= 0; --c) {
        CHECK_STATUS(uform_outcome_wait(&outcomes[c], -1), uform_status_ok_k);
        double worst = 1.0;
        for (size_t i = 0; i < BATCH; ++i) {
            double const cos = cosine(rows[c] + i * dims, expected + i * dims, dims);
            if (cos < worst) worst = cos;
        }
        printf("deferred image encode %d: worst cosine %.7f\n", c, worst);
        CHECK(worst >= 0.99999);
    }
    CHECK_STATUS(uform_outcome_wait(&slept, -1), uform_status_ok_k);
    uform_executor_free(executor);
    uform_model_free(gpu);
    free(rows[0]), free(rows[1]), free(expected);
}

/** The features' copy paths against one blocking call of the batch (f32, per token row cosine >=
 *  0.999999 and rows likewise): a deferred call (its outcome writes them from the staging buffer), 96
 *  images decoded in two waves (each wave's features where its images go), and a batch of the photos
 *  over and over past 256 MiB of features (`VRAM_STAGED_FEATURES_MAX`: each image's copied straight
 *  into the caller's memory as its chunk ends). */
static void check_features_paths(char const *path, uform_executor_t executor, uform_vram_options_t const *vram) {
    uform_model_t gpu = open_model(path, uform_residency_vram_k, uform_dtype_f32_k, vram);
    CHECK_FATAL(gpu != NULL);
    uform_model_description_t md;
    CHECK_OK(uform_model_describe(gpu, &md));
    size_t const item = md.tokens * md.hidden, dims = md.dimensions;
    size_t const large = ((256u << 20) / (item * sizeof(float)) / BATCH + 1) * BATCH;
    float *reference = malloc(BATCH * item * sizeof(float)), *reference_rows = malloc(BATCH * dims * sizeof(float));
    float *features = malloc(large * item * sizeof(float)), *rows = malloc(large * dims * sizeof(float));
    uform_image_t *images = malloc(large * sizeof(uform_image_t));
    CHECK_FATAL(reference && reference_rows && features && rows && images);
    for (size_t i = 0; i < large; ++i) images[i] = batch[i % BATCH];
    uform_embeddings_t out = {.data = reference_rows, .dtype = uform_dtype_f32_k, .features = reference};
    CHECK_STATUS(uform_encode_images(executor, gpu, batch, BATCH, &out, NULL, NULL), uform_status_ok_k);
    /* Cases: a deferred call of one wave; 96 images, decoded in two waves of 48, staged; `large`, in
     * waves of 128, copied item by item. */
    size_t const sizes[3] = {BATCH, 96, large};
    for (int c = 0; c < 3; ++c) {
        int const deferred = c == 0;
        size_t const n = sizes[c];
        memset(features, 0x5A, n * item * sizeof(float));
        out = (uform_embeddings_t){.data = rows, .dtype = uform_dtype_f32_k, .features = features};
        uform_outcome_t outcome;
        CHECK_STATUS(uform_encode_images(executor, gpu, images, n, &out, NULL, deferred ? &outcome : NULL),
                     uform_status_ok_k);
        if (deferred) CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
        double worst = 1, worst_row = 1;
        for (size_t i = 0; i < n; ++i) {
            for (size_t t = 0; t < md.tokens; ++t) {
                double c = cosine(features + i * item + t * md.hidden, reference + i % BATCH * item + t * md.hidden, md.hidden);
                worst = c < worst ? c : worst;
            }
            double c = cosine(rows + i * dims, reference_rows + i % BATCH * dims, dims);
            worst_row = c < worst_row ? c : worst_row;
        }
        printf("features %s, %zu images (%.0f MiB of them): worst cosine to one blocking call's %.7f, rows %.7f\n",
               c == 0 ? "of a deferred call" : c == 1 ? "of two waves, staged" : "past the staging cap", n,
               n * item * 4.0 / (1 << 20), worst, worst_row);
        CHECK(worst >= 0.999999 && worst_row >= 0.999999);
    }
    free(reference), free(reference_rows), free(features), free(rows), free(images);
    uform_model_free(gpu);
}

/** Runs in `test_encode_images_gpu --fault-child TOWER` (a tower the parent wrote). */
static int fault_child(char const *tower) {
    int32_t const first[] = {0};
    uform_vram_options_t one = {.devices = first, .devices_count = 1};
    uform_executor_t victim = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram_executor), uform_status_ok_k);
    CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 0, &victim), uform_status_ok_k);
    CHECK_FATAL(victim && ram_executor);
    load_photos();
    size_t dims = 0;
    float *expected = cpu_rows(tower, &dims);
    uform_model_t cpu = open_model(tower, uform_residency_ram_k, uform_dtype_f32_k, NULL);
    uform_model_t gpu = open_model(tower, uform_residency_vram_k, uform_dtype_f32_k, &one);
    CHECK_FATAL(cpu && gpu);
    float *rows = (float *)calloc(BATCH * dims, sizeof(float));
    uform_embeddings_t out = {.data = rows, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_images(victim, gpu, batch, BATCH, &out, NULL, NULL), uform_status_ok_k);
    CHECK(cosine(rows, expected, dims) >= 0.99999);

    // A trap queued (deferred) on the executor's stream, then the verb behind it.
    uform_call_t const trap = {.residency = uform_residency_vram_k, .device = fault_trap_callback};
    uform_outcome_t trapped;
    CHECK_STATUS(uform_executor_call(victim, &trap, &trapped), uform_status_ok_k);
    memset(rows, 0x7f, BATCH * dims * sizeof(float));
    uform_status_t statuses[BATCH];
    CHECK_STATUS(uform_encode_images(victim, gpu, batch, BATCH, &out, statuses, NULL), uform_status_device_fault_k);
    CHECK_MESSAGE("CUDA_ERROR");
    printf("an image encode behind a trap: %s\n", uform_error_message());
    int const untouched = rows_untouched(rows, BATCH * dims);
    printf("rows untouched after the fault: %d\n", untouched);
    CHECK(untouched);
    CHECK_STATUS(uform_outcome_wait(&trapped, -1), uform_status_device_fault_k);
    CHECK(trapped.finished && trapped.status == uform_status_device_fault_k);
    CHECK_STATUS(uform_encode_images(victim, gpu, batch, 2, &out, NULL, NULL), uform_status_device_fault_k);
    CHECK_MESSAGE("poisoned");
    uform_outcome_t later;
    uform_status_t const deferred = uform_encode_images(victim, gpu, batch, 2, &out, NULL, &later);
    CHECK(deferred == uform_status_device_fault_k);
    if (deferred == uform_status_device_fault_k) CHECK(later.finished && later.status == uform_status_device_fault_k);
    CHECK(rows_untouched(rows, BATCH * dims));

    // The RAM executor beside it still encodes, the same rows as before.
    memset(rows, 0, BATCH * dims * sizeof(float));
    CHECK_STATUS(uform_encode_images(ram_executor, cpu, batch, BATCH, &out, NULL, NULL), uform_status_ok_k);
    CHECK(!memcmp(rows, expected, BATCH * dims * sizeof(float)));
    uform_model_free(gpu);
    uform_executor_free(victim);
    uform_model_free(cpu);
    uform_executor_free(ram_executor);
    free(rows), free(expected);
    for (size_t i = 0; i < PHOTOS; ++i) free(photo_bytes[i]);
    printf("fault child: %s\n", check_failures ? "FAILED" : "passed");
    return check_failures ? 1 : 0;
}

static void test_fault(char const *self, char const *tower) { fault_run_child(self, "--fault-child", tower, 180, "fault"); }

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--fault-child")) return fault_child(argv[2]);
    for (int i = 1; i < argc; ++i)
        if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump_directory = argv[++i];
    snprintf(root, sizeof root, "%s", dump_directory ? dump_directory : "/tmp/uform-test-images-gpu-XXXXXX");
    if (dump_directory) mkdir(root, 0755);
    else CHECK_FATAL(mkdtemp(root) != NULL);
    char towers[3][600];
    for (size_t t = 0; t < 3; ++t) {
        snprintf(towers[t], sizeof towers[t], "%s/%s", root, tower_specs[t].name);
        CHECK_FATAL(tower_write(towers[t], &tower_specs[t]) != 0);
    }

    /* Refusals that hold on every machine. */
    if (uform_gpu_status() != uform_status_ok_k) {
        uform_model_options_t options = {.path = towers[0], .modality = uform_modality_image_k,
                                         .residency = uform_residency_vram_k, .weights_dtype = uform_dtype_bf16_k};
        uform_model_t model = NULL;
        CHECK_STATUS(uform_model_open(&options, &model), uform_status_unsupported_k);
        CHECK_MESSAGE("uform_model_open: VRAM residency needs a GPU");
        printf("without a GPU: %s\n", uform_error_message());
        CHECK(model == NULL);
        uform_vram_options_t vram = {.devices = NULL, .devices_count = 1};
        options.vram = &vram;
        CHECK_STATUS(uform_model_open(&options, &model), uform_status_invalid_argument_k);
        CHECK_MESSAGE("vram.devices is NULL");
        char command[700];
        snprintf(command, sizeof command, "rm -rf '%s'", root);
        if (!dump_directory && system(command) != 0) fprintf(stderr, "could not remove %s\n", root);
        if (check_failures) return 1;
        CHECK(uform_gpu_status() != uform_status_ok_k); // sets the message the skip quotes
        SKIP("no GPU to run VRAM image towers on (%s); the refusals without one passed", uform_error_message());
    }
    setenv("UFORM_NO_CUBLASLT", "1", 1);
    {
        uform_model_options_t options = {.path = towers[0], .modality = uform_modality_image_k,
                                         .residency = uform_residency_vram_k, .weights_dtype = uform_dtype_bf16_k};
        uform_model_t model = NULL;
        CHECK_STATUS(uform_model_open(&options, &model), uform_status_unsupported_k);
        CHECK_MESSAGE("cuBLASLt");
        CHECK(model == NULL);
        printf("without cuBLASLt: %s\n", uform_error_message());
    }
    unsetenv("UFORM_NO_CUBLASLT");
    {
        uform_model_options_t options = {.path = towers[0], .modality = uform_modality_image_k,
                                         .residency = uform_residency_vram_k, .weights_dtype = uform_dtype_bf16_k};
        uform_model_t model = NULL;
        uform_status_t status = uform_model_open(&options, &model);
        if (status == uform_status_unsupported_k && strstr(uform_error_message(), "cuBLASLt")) {
            printf("SKIPPED: %s\n", uform_error_message());
            return 77;
        }
        CHECK_STATUS(status, uform_status_ok_k);
        uform_model_free(model);
    }

    load_photos();
    if (dump_directory) {
        char path[1024];
        snprintf(path, sizeof path, "%s/photos.txt", dump_directory);
        FILE *file = fopen(path, "w");
        CHECK_FATAL(file != NULL);
        for (size_t i = 0; i < PHOTOS; ++i) fprintf(file, "%s/image/photos/%s\n", UFORM_TEST_SOURCE_DIR, photo_names[i]);
        fclose(file);
    }

    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, &ram_executor), uform_status_ok_k);
    size_t gpus = 0;
    uform_gpu_device_t listed[16];
    CHECK_FATAL(uform_gpu_devices(listed, 16, &gpus) == uform_status_ok_k);
    int32_t const first[] = {0};
    uform_vram_options_t one = {.devices = first, .devices_count = 1};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    CHECK_FATAL(executor != NULL);

    uform_dtype_t const dtypes[] = {uform_dtype_f32_k, uform_dtype_bf16_k, uform_dtype_f16_k};
    char const *names[] = {"f32", "bf16", "f16"};
    double const thresholds[] = {0.99999, 0.999, 0.999};
    for (int d = 0; d < 3; ++d)
        for (size_t t = 0; t < 3; ++t) {
            char label[128];
            snprintf(label, sizeof label, "%s %s", tower_specs[t].name, names[d]);
            check_tower(label, towers[t], executor, &one, dtypes[d], thresholds[d]);
            check_tower_features(label, towers[t], executor, &one, dtypes[d], thresholds[d]);
        }
    check_features_paths(towers[0], executor, &one);

    /* Output options: truncation, normalisation, bf16 rows with a stride; against the CPU with the same. */
    uform_model_t gpu = open_model(towers[2], uform_residency_vram_k, uform_dtype_f32_k, &one);
    CHECK_FATAL(gpu != NULL);
    {
        uform_model_t cpu = open_model(towers[2], uform_residency_ram_k, uform_dtype_f32_k, NULL);
        size_t stride = 160;
        unsigned char *a = (unsigned char *)calloc(BATCH, stride), *b = (unsigned char *)calloc(BATCH, stride);
        uform_embeddings_t out = {.data = a, .stride = stride, .dimensions = 64, .dtype = uform_dtype_bf16_k, .normalize = 1};
        CHECK_STATUS(uform_encode_images(ram_executor, cpu, batch, BATCH, &out, NULL, NULL), uform_status_ok_k);
        out.data = b;
        CHECK_STATUS(uform_encode_images(executor, gpu, batch, BATCH, &out, NULL, NULL), uform_status_ok_k);
        int untouched = 1;
        double worst = bf16_rows_worst(a, b, BATCH, stride, 64, &untouched);
        printf("%-40s worst cosine %.7f, rows normalised, padding untouched: %d\n", "vit-p14-reg4 64 dims bf16 rows", worst,
               untouched);
        CHECK(worst >= 0.9999);
        CHECK(untouched);
        free(a), free(b);
        uform_model_free(cpu);
    }

    /* A bad image: its own status and a zero row with statuses; the call's failure without. */
    {
        uform_image_t images[4] = {batch[0], batch[1], {.data = "not an image", .size = 12}, batch[3]};
        size_t dims = width_of(gpu);
        float *rows = (float *)malloc(4 * dims * sizeof(float));
        memset(rows, 0x7f, 4 * dims * sizeof(float));
        uform_status_t statuses[4];
        uform_embeddings_t plain = {.data = rows, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(executor, gpu, images, 4, &plain, statuses, NULL), uform_status_ok_k);
        CHECK(statuses[0] == uform_status_ok_k && statuses[1] == uform_status_ok_k && statuses[3] == uform_status_ok_k);
        CHECK(statuses[2] == uform_status_corrupt_file_k);
        int zero = 1, nonzero = 0;
        for (size_t j = 0; j < dims; ++j) zero &= rows[2 * dims + j] == 0.0f, nonzero |= rows[3 * dims + j] != 0.0f;
        CHECK(zero && nonzero);
        CHECK_STATUS(uform_encode_images(executor, gpu, images, 4, &plain, NULL, NULL), uform_status_corrupt_file_k);
        CHECK_MESSAGE("image 2");
        printf("bad image: %s\n", uform_error_message());

        /* Residency. */
        CHECK_STATUS(uform_encode_images(ram_executor, gpu, images, 2, &plain, NULL, NULL), uform_status_residency_mismatch_k);
        CHECK_MESSAGE("VRAM-resident");
        CHECK_STATUS(uform_encode_images(NULL, gpu, images, 2, &plain, NULL, NULL), uform_status_unsupported_k);
        CHECK_MESSAGE("NULL executor has no stream");
        uform_model_t ram = open_model(towers[2], uform_residency_ram_k, uform_dtype_f32_k, NULL);
        CHECK_STATUS(uform_encode_images(executor, ram, images, 2, &plain, NULL, NULL), uform_status_residency_mismatch_k);
        uform_model_free(ram);

        /* Zero images; a deferred call. */
        CHECK_STATUS(uform_encode_images(executor, gpu, images, 0, &plain, NULL, NULL), uform_status_ok_k);
        uform_outcome_t outcome;
        memset(rows, 0, 4 * dims * sizeof(float));
        CHECK_STATUS(uform_encode_images(executor, gpu, images, 2, &plain, NULL, &outcome), uform_status_ok_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
        CHECK(rows[dims] != 0.0f);
        free(rows);
    }

    /* The same batch three times: the second call captures a graph, the third replays it; the rows
     * are bit for bit the first's. */
    {
        size_t dims = width_of(gpu);
        float *runs[3];
        for (int r = 0; r < 3; ++r) {
            runs[r] = (float *)calloc(BATCH * dims, sizeof(float));
            uform_embeddings_t again = {.data = runs[r], .dtype = uform_dtype_f32_k};
            CHECK_STATUS(uform_encode_images(executor, gpu, batch, BATCH, &again, NULL, NULL), uform_status_ok_k);
        }
        int same = !memcmp(runs[0], runs[1], BATCH * dims * sizeof(float)) &&
                   !memcmp(runs[0], runs[2], BATCH * dims * sizeof(float));
        printf("three calls of one shape (eager, captured, replayed): rows identical: %d\n", same);
        CHECK(same);
        for (int r = 0; r < 3; ++r) free(runs[r]);
    }

    /* Waves: 70 encoded images decode in two waves of 35, the second decoding while the device runs the
     * first. A bad image in the second wave gets its status and a zero row (or, without statuses,
     * fails the call naming it, writing nothing); forced small waves, a one-entry ring (each wave
     * waits for the one before) and a deferred call give the CPU path's rows too. */
    {
        enum { WAVED = 70, BAD = 45 };
        size_t dims = width_of(gpu);
        uform_image_t *many = (uform_image_t *)calloc(WAVED, sizeof(uform_image_t));
        for (size_t i = 0; i < WAVED; ++i) many[i] = batch[i % BATCH];
        many[BAD] = (uform_image_t){.data = "\xff\xd8\xff truncated", .size = 16};
        uform_model_t cpu = open_model(towers[2], uform_residency_ram_k, uform_dtype_f32_k, NULL);
        float *expected = (float *)calloc(WAVED * dims, sizeof(float)), *rows = (float *)calloc(WAVED * dims, sizeof(float));
        uform_status_t cpu_statuses[WAVED], statuses[WAVED];
        uform_embeddings_t out = {.data = expected, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(ram_executor, cpu, many, WAVED, &out, cpu_statuses, NULL), uform_status_ok_k);
        CHECK(cpu_statuses[BAD] == uform_status_corrupt_file_k);
        uform_executor_t one_slot = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 0, 1, &one_slot), uform_status_ok_k);
        char const *const waves[] = {"", "8", "0"};
        for (int variant = 0; variant < 5; ++variant) {
            char const *wave = waves[variant < 3 ? variant : 0];
            if (*wave) setenv("UFORM_GPU_IMAGE_WAVE", wave, 1);
            else unsetenv("UFORM_GPU_IMAGE_WAVE");
            memset(rows, 0x7f, WAVED * dims * sizeof(float));
            memset(statuses, 0, sizeof statuses);
            out.data = rows;
            uform_executor_t on = variant == 3 ? one_slot : executor;
            if (variant == 4) {
                uform_outcome_t outcome;
                CHECK_STATUS(uform_encode_images(on, gpu, many, WAVED, &out, statuses, &outcome), uform_status_ok_k);
                CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
            } else CHECK_STATUS(uform_encode_images(on, gpu, many, WAVED, &out, statuses, NULL), uform_status_ok_k);
            int zero = 1, same_statuses = 1;
            double worst = rows_worst_but(expected, rows, WAVED, dims, BAD, statuses, cpu_statuses, &zero, &same_statuses);
            static char const *const labels[] = {"waves of 35", "waves of 8", "one wave", "waves, deferred_limit 1",
                                                 "waves, a deferred call"};
            printf("%-40s worst cosine %.7f, bad image's row zero: %d\n", labels[variant], worst, zero);
            CHECK(worst >= 0.99999);
            CHECK(zero && same_statuses);
        }
        unsetenv("UFORM_GPU_IMAGE_WAVE");
        memset(rows, 0x7f, WAVED * dims * sizeof(float));
        CHECK_STATUS(uform_encode_images(executor, gpu, many, WAVED, &out, NULL, NULL), uform_status_corrupt_file_k);
        CHECK_MESSAGE("image 45");
        int untouched = rows_untouched(rows, WAVED * dims);
        printf("a bad image in the second wave without statuses: %s; rows untouched: %d\n", uform_error_message(), untouched);
        CHECK(untouched);
        /* The executor stays usable after the failed call. */
        CHECK_STATUS(uform_encode_images(executor, gpu, many, 2, &out, NULL, NULL), uform_status_ok_k);
        CHECK(cosine(expected, rows, dims) >= 0.99999);
        uform_executor_free(one_slot);
        uform_model_free(cpu);
        free(expected), free(rows), free(many);
    }

    /* LIMIT_EXCEEDED: one image cannot fit 4 MiB of scratch; a batch split into chunks to fit 24 MiB. */
    {
        uform_executor_t small = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 4u << 20, 0, &small), uform_status_ok_k);
        float row[256];
        uform_embeddings_t out = {.data = row, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(small, gpu, batch, 1, &out, NULL, NULL), uform_status_limit_exceeded_k);
        CHECK_MESSAGE("scratch_limit");
        printf("limit: %s\n", uform_error_message());
        uform_executor_free(small);
        uform_executor_t limited = NULL;
        CHECK_STATUS(uform_executor_for_vram(&one, NULL, NULL, 24u << 20, 0, &limited), uform_status_ok_k);
        check_tower("vit-p14-reg4 f32 in 24 MiB of scratch", towers[2], limited, &one, uform_dtype_f32_k, 0.99999);
        check_tower("vit-b16 bf16 in 24 MiB of scratch", towers[1], limited, &one, uform_dtype_bf16_k, 0.999);
        size_t bytes = 0;
        CHECK_STATUS(uform_executor_scratch_bytes(limited, 0, &bytes), uform_status_ok_k);
        printf("scratch held under a 24 MiB limit: %zu bytes\n", bytes);
        CHECK(bytes > 0 && bytes <= (24u << 20));
        uform_executor_free(limited);
    }
    uform_model_free(gpu);

    /* Two devices: the batch split in proportion, rows in input order. */
    if (gpus >= 2) {
        int32_t const both[] = {0, 1}, second[] = {1};
        uform_vram_options_t two = {.devices = both, .devices_count = 2}, other = {.devices = second, .devices_count = 1};
        uform_executor_t pair = NULL;
        CHECK_STATUS(uform_executor_for_vram(&two, NULL, NULL, 0, 0, &pair), uform_status_ok_k);
        check_tower("vit-s16 f32 on two devices", towers[0], pair, &two, uform_dtype_f32_k, 0.99999);
        check_tower("vit-p14-reg4 bf16 on two devices", towers[2], pair, &two, uform_dtype_bf16_k, 0.999);
        uform_model_t on_first = open_model(towers[0], uform_residency_vram_k, uform_dtype_bf16_k, &one);
        uform_executor_t on_second = NULL;
        CHECK_STATUS(uform_executor_for_vram(&other, NULL, NULL, 0, 0, &on_second), uform_status_ok_k);
        float row[256];
        uform_embeddings_t out = {.data = row, .dtype = uform_dtype_f32_k};
        CHECK_STATUS(uform_encode_images(on_second, on_first, batch, 1, &out, NULL, NULL), uform_status_residency_mismatch_k);
        CHECK_MESSAGE("holds no copy");
        uform_model_free(on_first);
        uform_executor_free(on_second);
        uform_executor_free(pair);
    } else printf("one GPU: the two-device checks need two\n");

    test_deferred_in_flight(towers[0], &one);
    test_fault(argv[0], towers[0]);
    for (size_t i = 0; i < PHOTOS; ++i) free(photo_bytes[i]);
    uform_executor_free(executor);
    uform_executor_free(ram_executor);
    if (!dump_directory) {
        char command[700];
        snprintf(command, sizeof command, "rm -rf '%s'", root);
        if (system(command) != 0) fprintf(stderr, "could not remove %s\n", root);
    }
    printf("%s\n", check_failures ? "FAILED" : "passed");
    return check_failures ? 1 : 0;
}
