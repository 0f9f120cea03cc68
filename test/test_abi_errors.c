/**
 *  @file   test_abi_errors.c
 *  @brief  Error paths include/uform.h promises that no other test triggered through the public ABI
 *          with both the status and the message checked: RAM options refused by
 *          `uform_executor_for_ram`, refused calls (and the outcome a refused deferred call leaves),
 *          CONTENDED from a second thread, NULL and wrong-kind executors, meshes without a VRAM
 *          executor, GPU paths on a machine without a GPU, tokenizing and encoding with bad
 *          arguments on the committed tiny model (test/models/tiny-bert), holds of a pool no
 *          executor uses, a UForm3 directory without a text tower, and inherited handles in a
 *          forked child.
 */
#include "check.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void nap(void) {
    struct timespec const pause = {.tv_sec = 0, .tv_nsec = 1000000};
    nanosleep(&pause, NULL);
}

static void visit(void *context, size_t task, size_t thread, size_t domain) {
    (void)context, (void)task, (void)thread, (void)domain;
}

static uform_status_t device_part(void *context, uform_device_slot_t const *slot) {
    (void)context, (void)slot;
    return uform_status_ok_k;
}

/** Checks a refused deferred submission left its outcome finished with the same status and message. */
static void check_refused_outcome(uform_outcome_t const *outcome, uform_status_t status) {
    CHECK(outcome->finished != 0);
    CHECK(outcome->status == status);
    if (strcmp(outcome->message, uform_error_message()) != 0) {
        fprintf(stderr, "outcome message \"%s\" differs from the error message \"%s\"\n", outcome->message,
                uform_error_message());
        ++check_failures;
    }
}

/* ---- RAM options through the public constructor ---- */

static void test_ram_options(void) {
    uform_executor_t const sentinel = (uform_executor_t)(uintptr_t)0x1;
    uform_executor_t executor = sentinel; // untouched on every failure below

    int32_t const negative_node[] = {-3};
    uform_ram_options_t negative = {.memory_domains = negative_node, .memory_domains_count = 1};
    CHECK_STATUS(uform_executor_for_ram(&negative, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("memory_domains[0] is -3, not a NUMA node ID");

    uform_ram_options_t null_with_count = {.memory_domains = NULL, .memory_domains_count = 2};
    CHECK_STATUS(uform_executor_for_ram(&null_with_count, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("memory_domains is NULL");

    size_t domains_count = 0;
    CHECK_OK(uform_memory_domains(NULL, 0, &domains_count));
    CHECK_FATAL(domains_count > 0);
    uform_memory_domain_t first;
    CHECK_OK(uform_memory_domains(&first, 1, &domains_count));
    int32_t const twice[] = {first.node, first.node};
    uform_ram_options_t duplicate = {.memory_domains = twice, .memory_domains_count = 2};
    CHECK_STATUS(uform_executor_for_ram(&duplicate, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("repeats NUMA node");

    uform_ram_options_t out_of_range = {.cpu_class = (uform_cpu_class_t)99};
    CHECK_STATUS(uform_executor_for_ram(&out_of_range, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("cpu_class 99");

    // The WASM classes and MONOVERSIONED are never native here: UNSUPPORTED naming the class.
    uform_cpu_class_t const foreign[] = {uform_cpu_class_wasm32_v128_k, uform_cpu_class_wasm64_extended_k,
                                         uform_cpu_class_monoversioned_k};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; ++i) {
        uform_ram_options_t pinned = {.cpu_class = foreign[i]};
        CHECK_STATUS(uform_executor_for_ram(&pinned, 0, 0, &executor), uform_status_unsupported_k);
        CHECK_MESSAGE(uform_cpu_class_name(foreign[i]));
    }

    // A class whose features the CPU lacks: UNSUPPORTED naming the class and a missing feature.
    uform_cpu_class_t detected = uform_cpu_class_unknown_k;
    uint64_t features = 0;
    CHECK_OK(uform_cpu_detect(&detected, &features));
    size_t refused = 0;
    for (int candidate = uform_cpu_class_serial_k; candidate <= uform_cpu_class_alibaba_c930_k; ++candidate) {
        uint64_t const required = uform_cpu_class_features((uform_cpu_class_t)candidate);
        uint64_t const missing = required & ~features;
        if (!missing) continue;
        uint64_t const lowest = missing & (~missing + 1);
        uform_ram_options_t above = {.cpu_class = (uform_cpu_class_t)candidate};
        CHECK_STATUS(uform_executor_for_ram(&above, 1, 0, &executor), uform_status_unsupported_k);
        CHECK_MESSAGE(uform_cpu_class_name((uform_cpu_class_t)candidate));
        CHECK_MESSAGE(uform_cpu_feature_name(lowest));
        ++refused;
    }
    CHECK(refused > 0); // at least the other architectures' classes
    CHECK(executor == sentinel);

    // The pool constructor's output pointer, before ForkUnion is looked for.
    CHECK_STATUS(uform_executor_on_pool((void *)&executor, NULL, 0, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("executor is NULL");

    // Listing the cores of a node: a NULL count, and a NULL buffer with room claimed.
    int32_t cores[4];
    CHECK_STATUS(uform_memory_domain_cores(first.node, cores, 4, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("count is NULL");
    size_t count = 0;
    CHECK_STATUS(uform_memory_domain_cores(first.node, NULL, 4, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("capacity 4");
}

/* ---- Calls refused at submission ---- */

typedef struct holder_t {
    uform_executor_t executor;
    atomic_int entered, release;
    uform_status_t status;
} holder_t;

static void hold_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)domain;
    holder_t *holder = context;
    if (thread != 0) return;
    atomic_store(&holder->entered, 1);
    while (!atomic_load(&holder->release)) nap();
}

static void *hold_thread(void *argument) {
    holder_t *holder = argument;
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = hold_task, .context = holder};
    holder->status = uform_executor_call(holder->executor, &call, NULL);
    return NULL;
}

static void test_calls(void) {
    // The NULL executor: an out-of-range residency, a device part with no stream to run it.
    uform_call_t bad_residency = {.residency = (uform_residency_t)-1, .tasks = 1, .task = visit};
    CHECK_STATUS(uform_executor_call(NULL, &bad_residency, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_executor_call: residency -1 is not one of");
    uform_call_t device_call = {.device = device_part};
    CHECK_STATUS(uform_executor_call(NULL, &device_call, NULL), uform_status_unsupported_k);
    CHECK_MESSAGE("the NULL executor has no device streams");
    uform_outcome_t outcome;
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(NULL, &device_call, &outcome), uform_status_unsupported_k);
    check_refused_outcome(&outcome, uform_status_unsupported_k);

    uform_executor_t ram = NULL;
    CHECK_OK(uform_executor_for_ram(NULL, 1, 0, &ram));
    CHECK_FATAL(ram != NULL);

    // A device part on a RAM executor, with and without a host part.
    CHECK_STATUS(uform_executor_call(ram, &device_call, NULL), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("a device callback needs a VRAM executor, not a RAM one");
    uform_call_t both = {.tasks = 1, .task = visit, .device = device_part};
    CHECK_STATUS(uform_executor_call(ram, &both, NULL), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("a device callback needs a VRAM executor, not a RAM one");
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(ram, &both, &outcome), uform_status_residency_mismatch_k);
    check_refused_outcome(&outcome, uform_status_residency_mismatch_k);

    // Refused deferred calls: the outcome carries the same message as the thread.
    uform_call_t vram_call = {.residency = uform_residency_vram_k, .tasks = 1, .task = visit};
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(ram, &vram_call, &outcome), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("a VRAM-resident call met a RAM executor");
    check_refused_outcome(&outcome, uform_status_residency_mismatch_k);
    uform_call_t bad_schedule = {.schedule = (uform_schedule_t)9, .tasks = 1, .task = visit};
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(ram, &bad_schedule, &outcome), uform_status_invalid_argument_k);
    CHECK_MESSAGE("schedule 9");
    check_refused_outcome(&outcome, uform_status_invalid_argument_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_invalid_argument_k);
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(ram, NULL, &outcome), uform_status_invalid_argument_k);
    CHECK_MESSAGE("call is NULL");
    check_refused_outcome(&outcome, uform_status_invalid_argument_k);

    // Waiting on no outcome.
    CHECK_STATUS(uform_outcome_wait(NULL, 0.0), uform_status_invalid_argument_k);
    CHECK_MESSAGE("outcome is NULL");
    CHECK_STATUS(uform_outcome_wait(NULL, -1.0), uform_status_invalid_argument_k);
    CHECK_MESSAGE("outcome is NULL");

    // Describing into nothing; placements of executors whose threads are not the engine's.
    CHECK_STATUS(uform_executor_describe(ram, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("description is NULL");
    CHECK_STATUS(uform_executor_describe(NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("description is NULL");
    int32_t core = -7, node = -7;
    CHECK_STATUS(uform_executor_thread_placement(NULL, 0, &core, &node), uform_status_unsupported_k);
    CHECK_MESSAGE("executor's threads are not the engine's to pin");
    CHECK(core == -7 && node == -7);
    CHECK_STATUS(uform_executor_thread_placement(ram, 1, &core, &node), uform_status_invalid_argument_k);
    CHECK_MESSAGE("thread 1 is out of range, the executor has 1");
    CHECK(core == -7 && node == -7);

    // Device scratch on host executors.
    CHECK_STATUS(uform_executor_scratch_release(ram), uform_status_unsupported_k);
    CHECK_MESSAGE("uform_executor_scratch_release: the RAM or pool executor holds no device memory");
    size_t bytes = 12345;
    CHECK_STATUS(uform_executor_scratch_bytes(ram, 0, &bytes), uform_status_unsupported_k);
    CHECK_MESSAGE("RAM or pool executor holds no device memory");
    CHECK(bytes == 12345);

    // CONTENDED: a second thread is inside a blocking call on the executor.
    holder_t holder = {.executor = ram, .status = uform_status_pending_k};
    pthread_t thread;
    CHECK_FATAL(pthread_create(&thread, NULL, hold_thread, &holder) == 0);
    while (!atomic_load(&holder.entered)) nap();
    uform_call_t quick = {.tasks = 1, .task = visit};
    CHECK_STATUS(uform_executor_call(ram, &quick, NULL), uform_status_contended_k);
    CHECK_MESSAGE("another call holds the executor");
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(ram, &quick, &outcome), uform_status_contended_k);
    check_refused_outcome(&outcome, uform_status_contended_k);
    atomic_store(&holder.release, 1);
    CHECK_FATAL(pthread_join(thread, NULL) == 0);
    CHECK(holder.status == uform_status_ok_k);
    CHECK_OK(uform_executor_call(ram, &quick, NULL)); // usable again

    uform_executor_free(ram);

    // Pools: NULL for the non-waiting lock and for the release.
    CHECK_STATUS(uform_pool_try_lock(NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("fu_pool is NULL");
    CHECK_STATUS(uform_pool_unlock(NULL), uform_status_invalid_argument_k);
}

/* Holds of a pool no executor uses (the gate needs no ForkUnion): a second take on the holding thread
 * is CONTENDED without waiting, and a release with no hold left is INVALID_ARGUMENT. */
static void test_pool_holds(void) {
    static int pool; // any address names a pool to the gate
    CHECK_OK(uform_pool_lock(&pool));
    CHECK_STATUS(uform_pool_try_lock(&pool), uform_status_contended_k);
    CHECK_MESSAGE("uform_pool_try_lock: this thread already holds the pool");
    CHECK_STATUS(uform_pool_lock(&pool), uform_status_contended_k);
    CHECK_MESSAGE("uform_pool_lock: this thread already holds the pool");
    CHECK_OK(uform_pool_unlock(&pool));
    CHECK_STATUS(uform_pool_unlock(&pool), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_pool_unlock: this thread's innermost hold is not a uform_pool_lock of this pool");
}

/* ---- Meshes without a VRAM executor ---- */

static void test_meshes(void) {
    uform_executor_t ram = NULL;
    CHECK_OK(uform_executor_for_ram(NULL, 1, 0, &ram));
    uform_mesh_t mesh = (uform_mesh_t)(uintptr_t)0x1;
    uform_mesh_options_t alone = {0};
    CHECK_STATUS(uform_mesh_bootstrap(ram, &alone, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("RAM executor");
    CHECK(mesh == (uform_mesh_t)(uintptr_t)0x1);
    uform_executor_free(ram);

    // A failed describe zeroes the description.
    uform_mesh_description_t description;
    memset(&description, 0xAB, sizeof description);
    CHECK_STATUS(uform_mesh_describe(NULL, &description), uform_status_invalid_argument_k);
    CHECK_MESSAGE("mesh is NULL");
    uform_mesh_description_t zero;
    memset(&zero, 0, sizeof zero);
    CHECK(memcmp(&description, &zero, sizeof zero) == 0);

    uint64_t buffers[1] = {0x1000};
    CHECK_STATUS(uform_mesh_all_reduce(NULL, buffers, 1, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_mesh_all_reduce: mesh is NULL");
    uform_outcome_t outcome;
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_mesh_all_reduce(NULL, buffers, 1, uform_dtype_f32_k, &outcome), uform_status_invalid_argument_k);
    check_refused_outcome(&outcome, uform_status_invalid_argument_k);
    float host[1] = {0};
    void *host_buffers[1] = {host};
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_mesh_all_reduce_host(NULL, host_buffers, 1, uform_dtype_f32_k, &outcome),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_mesh_all_reduce_host: mesh is NULL");
    check_refused_outcome(&outcome, uform_status_invalid_argument_k);
}

/* ---- GPU paths on a machine without one ---- */

static void test_without_gpu(void) {
    if (uform_gpu_status() == uform_status_ok_k) {
        printf("a GPU is present: the no-GPU paths are left to test_gpu and test_vram\n");
        return;
    }
    // The reason (no driver library, no device, a build without CUDA) is named, and every refusal
    // that needs a GPU quotes the same reason.
    CHECK_STATUS(uform_gpu_status(), uform_status_unsupported_k);
    char reason[256];
    snprintf(reason, sizeof reason, "%s", uform_error_message());
    CHECK(strlen(reason) > 10);
    printf("no GPU: %s\n", reason);
    size_t count = 99;
    CHECK_OK(uform_gpu_devices(NULL, 0, &count));
    CHECK(count == 0);
    char name[32];
    CHECK_STATUS(uform_gpu_device_name(0, name, sizeof name), uform_status_invalid_argument_k);
    CHECK_MESSAGE(reason);

    // Executors: arguments first, so a repeated ordinal is INVALID_ARGUMENT with or without GPUs.
    uform_executor_t executor = (uform_executor_t)(uintptr_t)0x1;
    uform_gpu_ordinal_t const repeated[] = {1, 1};
    uform_vram_options_t twice = {.devices = repeated, .devices_count = 2};
    CHECK_STATUS(uform_executor_for_vram(&twice, NULL, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("ordinal 1 is repeated");
    uform_gpu_ordinal_t const one[] = {0};
    uform_vram_options_t first = {.devices = one, .devices_count = 1};
    CHECK_STATUS(uform_executor_for_vram(&first, NULL, NULL, 0, 0, &executor), uform_status_unsupported_k);
    CHECK_MESSAGE(reason);
    CHECK(executor == (uform_executor_t)(uintptr_t)0x1);

    // Models: VRAM residency needs a GPU, the message quoting the reason; a NULL device list with a
    // count is refused before the tower is read.
    uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                     .residency = uform_residency_vram_k, .vram = &first,
                                     .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = (uform_model_t)(uintptr_t)0x1;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_unsupported_k);
    CHECK_MESSAGE("uform_model_open: VRAM residency needs a GPU");
    CHECK_MESSAGE(reason);
    uform_vram_options_t hole = {.devices = NULL, .devices_count = 2};
    options.vram = &hole;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("vram.devices is NULL with a count of 2");
    CHECK(model == NULL);
}

/* Ordinals no driver is needed to judge: refused before any file is read, with or without GPUs
 * (they were UNSUPPORTED, "needs a GPU", on a machine without one). */
static void test_model_ordinals(void) {
    uform_gpu_ordinal_t const negative[] = {-2}, repeated[] = {1, 1};
    uform_vram_options_t vram = {.devices = negative, .devices_count = 1};
    uform_model_options_t options = {.path = "/nonexistent/uform-model", .modality = uform_modality_text_k,
                                     .residency = uform_residency_vram_k, .vram = &vram,
                                     .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = (uform_model_t)(uintptr_t)0x1;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_model_open: vram.devices[0] is -2; ordinals are positions in uform_gpu_devices, from 0");
    CHECK(model == NULL);
    vram = (uform_vram_options_t){.devices = repeated, .devices_count = 2};
    options.modality = uform_modality_image_k;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_model_open: ordinal 1 is repeated, at vram.devices[0] and [1]; name each device once");
    options.residency = uform_residency_ram_k; /* RAM residency ignores vram (missing directory then) */
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_system_error_k);
}

/* ---- Tokenizing and encoding on the tiny model ---- */

static void test_models(void) {
    uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = NULL;
    CHECK_OK(uform_model_open(&options, &model));
    CHECK_FATAL(model != NULL);
    uform_model_description_t description;
    CHECK_OK(uform_model_describe(model, &description));
    size_t const dims = description.dimensions;
    CHECK_FATAL(dims > 0 && dims <= 64);

    // Tokenize: NULL model and count named; `*count` is 0 on any failure after those were checked.
    int32_t ids[16];
    size_t count = 77;
    CHECK_STATUS(uform_model_tokenize(NULL, "a", 1, ids, 16, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    CHECK_STATUS(uform_model_tokenize(model, "a", 1, ids, 16, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("count is NULL");
    count = 77;
    CHECK_STATUS(uform_model_tokenize(model, NULL, 1, ids, 16, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("text is NULL");
    CHECK(count == 0);
    count = 77;
    CHECK_STATUS(uform_model_tokenize(model, "a", 1, NULL, 16, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("ids is NULL");
    CHECK(count == 0);
    count = 77;
    CHECK_STATUS(uform_model_tokenize(model, "\xc3", 1, ids, 16, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("invalid UTF-8 at byte 0");
    CHECK(count == 0);

    // Rows that do not fit the model, through the public verb; nothing written.
    char const *texts[] = {"a cat", "a dog"};
    float rows[2][64];
    for (size_t i = 0; i < 2 * 64; ++i) rows[i / 64][i % 64] = 7.0f;
    uform_embeddings_t const out = {.data = rows, .stride = sizeof rows[0], .dtype = uform_dtype_f32_k};
    uform_embeddings_t bad = out;
    bad.dtype = uform_dtype_f64_k;
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 2, &bad, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.dtype is 3");
    bad = out, bad.dtype = (uform_dtype_t)77;
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 2, &bad, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.dtype is 77");
    bad = out, bad.dimensions = dims + 1;
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 2, &bad, NULL, NULL), uform_status_invalid_argument_k);
    char wanted[160];
    snprintf(wanted, sizeof wanted, "embeddings.dimensions is %zu; the model's embeddings are %zu wide", dims + 1, dims);
    CHECK_MESSAGE(wanted);
    bad = out, bad.stride = dims * sizeof(float) - 1;
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 2, &bad, NULL, NULL), uform_status_invalid_argument_k);
    snprintf(wanted, sizeof wanted, "embeddings.stride is %zu bytes; a row of %zu f32 values takes %zu",
             dims * sizeof(float) - 1, dims, dims * sizeof(float));
    CHECK_MESSAGE(wanted);
    bad = out, bad.stride = SIZE_MAX;
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 2, &bad, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_texts: embeddings: 2 rows 18446744073709551615 bytes apart run past the end of the "
                  "address space");
    bad = out, bad.data = NULL;
    CHECK_STATUS(uform_encode_texts(NULL, model, texts, NULL, 2, &bad, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.data is NULL");
    for (size_t i = 0; i < 2 * 64; ++i) CHECK(rows[i / 64][i % 64] == 7.0f);

    // The same refusals as deferred calls on a RAM executor: the outcome finished with the message.
    uform_executor_t ram = NULL;
    CHECK_OK(uform_executor_for_ram(NULL, 1, 0, &ram));
    uform_outcome_t outcome;
    memset(&outcome, 0xAB, sizeof outcome);
    bad = out, bad.dimensions = dims + 1;
    CHECK_STATUS(uform_encode_texts(ram, model, texts, NULL, 2, &bad, NULL, &outcome), uform_status_invalid_argument_k);
    CHECK_MESSAGE("embeddings.dimensions");
    check_refused_outcome(&outcome, uform_status_invalid_argument_k);
    char const *mixed[] = {"fine", "bad \xff byte"};
    memset(&outcome, 0xAB, sizeof outcome);
    uform_status_t status = uform_encode_texts(ram, model, mixed, NULL, 2, &out, NULL, &outcome);
    if (status == uform_status_ok_k) status = uform_outcome_wait(&outcome, -1);
    CHECK(status == uform_status_invalid_argument_k);
    CHECK(outcome.finished && outcome.status == uform_status_invalid_argument_k);
    CHECK(strstr(outcome.message, "uform_encode_texts: text 1:") != NULL);
    for (size_t i = 0; i < 2 * 64; ++i) CHECK(rows[i / 64][i % 64] == 7.0f);
    uform_executor_free(ram);

    // A text model handed to the image verb.
    unsigned char const png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    uform_image_t image = {.data = png_signature, .size = sizeof png_signature};
    CHECK_STATUS(uform_encode_images(NULL, model, &image, 1, &out, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_encode_images: the model is a text model");
    uform_status_t statuses[1] = {uform_status_pending_k};
    CHECK_STATUS(uform_encode_images(NULL, model, &image, 1, &out, statuses, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("text model");

    uform_model_free(model);

    // A directory that does not exist: SYSTEM_ERROR naming it, with strerror.
    options.path = UFORM_TEST_MODELS_DIR "/no-such-model";
    model = (uform_model_t)(uintptr_t)0x1;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_system_error_k);
    CHECK_MESSAGE("no-such-model");
    CHECK_MESSAGE("No such file or directory");
}

/* A deferred encode meeting a full ring: DEFERRED_FULL, nothing written, its outcome finished alike. */
/* The committed tiny BERT and a one-thread RAM executor tracking at most `deferred_limit` deferred calls. */
static void open_tiny_bert(size_t deferred_limit, uform_model_t *model, uform_executor_t *ram) {
    uform_model_options_t options = {.path = UFORM_TEST_MODELS_DIR "/tiny-bert", .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    *model = NULL, *ram = NULL;
    CHECK_OK(uform_model_open(&options, model));
    CHECK_OK(uform_executor_for_ram(NULL, 1, deferred_limit, ram));
    CHECK_FATAL(*model && *ram);
}

static void test_encode_deferred_full(void) {
    uform_model_t model;
    uform_executor_t ram;
    open_tiny_bert(1, &model, &ram);
    holder_t holder = {.executor = ram};
    uform_call_t hold = {.schedule = uform_schedule_threads_k, .task = hold_task, .context = &holder};
    uform_outcome_t held;
    CHECK_OK(uform_executor_call(ram, &hold, &held));
    while (!atomic_load(&holder.entered)) nap();

    char const *texts[] = {"a cat"};
    float rows[1][64];
    for (size_t i = 0; i < 64; ++i) rows[0][i] = 7.0f;
    uform_embeddings_t const out = {.data = rows, .dtype = uform_dtype_f32_k};
    uform_outcome_t outcome;
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_encode_texts(ram, model, texts, NULL, 1, &out, NULL, &outcome), uform_status_deferred_full_k);
    CHECK_MESSAGE("1 deferred calls are already tracked, the executor's deferred_limit");
    check_refused_outcome(&outcome, uform_status_deferred_full_k);
    atomic_store(&holder.release, 1);
    CHECK_OK(uform_outcome_wait(&held, -1));
    for (size_t i = 0; i < 64; ++i) CHECK(rows[0][i] == 7.0f);
    CHECK_OK(uform_encode_texts(ram, model, texts, NULL, 1, &out, NULL, &outcome)); // room again
    CHECK_OK(uform_outcome_wait(&outcome, -1));
    uform_executor_free(ram);
    uform_model_free(model);
}

/* A UForm3 config with an image tower alone, opened for texts: UNSUPPORTED before any tensor is read. */
static void test_model_without_text_tower(void) {
    char directory[] = "/tmp/uform-abi-XXXXXX", config[64];
    CHECK_FATAL(mkdtemp(directory) != NULL);
    snprintf(config, sizeof config, "%s/config.json", directory);
    FILE *file = fopen(config, "w");
    CHECK_FATAL(file != NULL);
    fputs("{\"image_encoder\": {}}", file);
    CHECK_FATAL(fclose(file) == 0);
    uform_model_options_t options = {.path = directory, .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    uform_model_t model = (uform_model_t)(uintptr_t)0x1;
    CHECK_STATUS(uform_model_open(&options, &model), uform_status_unsupported_k);
    CHECK_MESSAGE("config.json: missing key 'text_encoder': the model has no text tower");
    CHECK(model == NULL);
    CHECK(unlink(config) == 0 && rmdir(directory) == 0);
}

/* ---- Inherited handles in a forked child ---- */

/* The child: every use of the parent's executor but free is FORKED, naming the function, and a refused
 * deferred call's outcome carries it; encoding or a mesh on it is refused alike, while the inherited
 * model still encodes on the NULL executor. Exits non-zero on a failed check. */
static void forked_child(uform_executor_t ram, uform_model_t model) {
    uform_call_t quick = {.tasks = 1, .task = visit};
    uform_outcome_t outcome;
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_executor_call(ram, &quick, &outcome), uform_status_forked_k);
    CHECK_MESSAGE("uform_executor_call: the executor was created before a fork() by the parent process");
    check_refused_outcome(&outcome, uform_status_forked_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_forked_k);
    CHECK_MESSAGE("uform_executor_call: the executor was created before a fork()");
    CHECK_STATUS(uform_executor_drain(ram, uform_mood_parked_k), uform_status_forked_k);
    CHECK_MESSAGE("uform_executor_drain: the executor was created before a fork()");
    uform_executor_description_t description;
    CHECK_STATUS(uform_executor_describe(ram, &description), uform_status_forked_k);
    CHECK_MESSAGE("uform_executor_describe: the executor was created before a fork()");
    int32_t core = -7, node = -7;
    CHECK_STATUS(uform_executor_thread_placement(ram, 0, &core, &node), uform_status_forked_k);
    CHECK_MESSAGE("uform_executor_thread_placement: the executor was created before a fork()");
    CHECK(core == -7 && node == -7);

    char const *texts[] = {"a cat"};
    float rows[1][64];
    for (size_t i = 0; i < 64; ++i) rows[0][i] = 7.0f;
    uform_embeddings_t const out = {.data = rows, .dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_encode_texts(ram, model, texts, NULL, 1, &out, NULL, NULL), uform_status_forked_k);
    CHECK_MESSAGE("uform_encode_texts: the executor was created before a fork()");
    uform_mesh_t mesh = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(ram, NULL, &mesh), uform_status_forked_k); // not "a NULL (inline) executor"
    CHECK_MESSAGE("uform_mesh_bootstrap: the executor was created before a fork()");
    CHECK(mesh == NULL);
    /* The inherited model holds no threads: it still encodes on the NULL executor, as in the parent. */
    CHECK_OK(uform_encode_texts(NULL, model, texts, NULL, 1, &out, NULL, NULL));
    for (size_t i = 0; i < 64; ++i) CHECK(isfinite(rows[0][i]));
    for (size_t i = 0; i < 64; ++i) rows[0][i] = 7.0f;
    memset(&outcome, 0xAB, sizeof outcome);
    CHECK_STATUS(uform_encode_texts(ram, model, texts, NULL, 1, &out, NULL, &outcome), uform_status_forked_k);
    check_refused_outcome(&outcome, uform_status_forked_k);
    for (size_t i = 0; i < 64; ++i) CHECK(rows[0][i] == 7.0f);
    uform_executor_free(ram);
    uform_model_free(model);
    fflush(NULL);
    _exit(check_failures ? 1 : 0);
}

static void test_forked(void) {
    uform_model_t model;
    uform_executor_t ram;
    open_tiny_bert(0, &model, &ram);
    fflush(NULL);
    pid_t const child = fork();
    CHECK_FATAL(child >= 0);
    if (child == 0) forked_child(ram, model);
    int wait_status = 0;
    CHECK(waitpid(child, &wait_status, 0) == child);
    CHECK(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
    uform_call_t quick = {.tasks = 1, .task = visit};
    CHECK_OK(uform_executor_call(ram, &quick, NULL)); // the parent's executor is untouched
    uform_executor_free(ram);
    uform_model_free(model);
}

int main(void) {
    test_ram_options();
    test_calls();
    test_pool_holds();
    test_meshes();
    test_without_gpu();
    test_models();
    test_model_ordinals();
    test_encode_deferred_full();
    test_model_without_text_tower();
    test_forked();
    CHECK_DONE();
}
