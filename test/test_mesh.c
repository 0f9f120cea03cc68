/**
 *  @file   test_mesh.c
 *  @brief  Meshes: every error path that needs no GPU, always; then, with GPUs, both shapes of a
 *          run (one process over every GPU, and one process per GPU, started by this test), a
 *          mismatched pair failing on both sides, and a peer dying between all-reduces.
 *
 *      test_mesh                       the whole test (GPU parts skip with 77 without a GPU)
 *      test_mesh --child ROLE ...      one process of a multi-process shape (started by the test)
 *
 *  Multi-process children are started with posix_spawn of this same program, never by fork(), so
 *  no child inherits a CUDA context. Every child gets NCCL_NVLS_ENABLE=0.
 */
#define _GNU_SOURCE // `nftw`
#include "check.h"
#include "cuda_driver.h"
#include "nccl_loader.h"
#include "rendezvous.h"

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#if UFORM_WITH_CUDA // helpers of the GPU half only

static double now(void) { return uform_now_seconds(); }

/** How late past its 1 s timeout a bounded wait may end before a test calls it wrong: bounds here
 *  tell "ended at its deadline" from "waited for something else" (or hung), never how fast; CI runs
 *  the fake-NCCL roles under sanitizers on a loaded 2-core machine (load average 10 and more). */
#define SLACK_SECONDS 5.0

static int remove_entry(char const *path, struct stat const *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/** Removes a temporary directory the test made, with everything in it. */
static void remove_tree(char const *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

#endif

/* ---- Without a GPU ---- */

static void test_arguments(void) {
    uform_mesh_t mesh = (uform_mesh_t)(uintptr_t)0x1234, untouched = mesh;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("mesh is NULL");
    CHECK_STATUS(uform_mesh_bootstrap(NULL, NULL, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("VRAM executor");
    CHECK_MESSAGE("NULL (inline)");
    CHECK(mesh == untouched);
    uform_executor_t ram = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_bootstrap(ram, NULL, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("RAM executor");
    uform_mesh_options_t alone = {.host_domain_count = 1};
    CHECK_STATUS(uform_mesh_bootstrap(ram, &alone, &mesh), uform_status_invalid_argument_k);
    CHECK(mesh == untouched);
    uform_executor_free(ram);

    // Options are checked before the executor, so these read the same on every machine.
    uform_mesh_options_t options = {.host_domain_index = 0, .host_domain_count = 2, .directory = NULL, .job = "j"};
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("directory is required");
    options.directory = "/tmp", options.job = "..";
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("job must not be '..'");
    options.job = "a/b";
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("[A-Za-z0-9._-]");
    options.job = "ok", options.host_domain_index = 2;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("host_domain_index 2 is not below host_domain_count 2");
    options.host_domain_index = 0, options.timeout_seconds = -1;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("timeout_seconds");
    // Counts above the documented maximum are refused at once (4,194,304 used to run past its
    // timeout with gigabytes resident).
    options.timeout_seconds = 1, options.host_domain_count = 4194304;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("above the maximum of 65536 processes (UFORM_MESH_PROCESSES_MAX)");
    options.host_domain_count = 2;
    CHECK(mesh == untouched);

    // Describe zeroes its output on failure.
    uform_mesh_description_t description;
    memset(&description, 0xAB, sizeof description);
    CHECK_STATUS(uform_mesh_describe(NULL, &description), uform_status_invalid_argument_k);
    uform_mesh_description_t zero = {0};
    CHECK(memcmp(&description, &zero, sizeof zero) == 0);
    CHECK_STATUS(uform_mesh_describe(NULL, NULL), uform_status_invalid_argument_k);
    uform_mesh_free(NULL);

    // All-reduce on no mesh: refused, and an outcome handed in is finished with the same status.
    uint64_t buffers[1] = {0};
    CHECK_STATUS(uform_mesh_all_reduce(NULL, buffers, 1, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    uform_outcome_t outcome;
    memset(&outcome, 0, sizeof outcome);
    CHECK_STATUS(uform_mesh_all_reduce(NULL, buffers, 1, uform_dtype_f32_k, &outcome), uform_status_invalid_argument_k);
    void *host_buffers[1] = {&outcome};
    CHECK_STATUS(uform_mesh_all_reduce_host(NULL, host_buffers, 1, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_mesh_all_reduce_host: mesh is NULL");
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_invalid_argument_k);
    CHECK(strstr(outcome.message, "mesh is NULL") != NULL);
}

static void test_nccl_loader(void) {
    // Multicast stays off: whatever the environment said, loading NCCL forces NCCL_NVLS_ENABLE=0
    // unless the user opted in.
    char const *opted_in = getenv("UFORM_ALLOW_MULTICAST");
    bool opt_in = opted_in && strcmp(opted_in, "1") == 0;
    if (!opt_in) setenv("NCCL_NVLS_ENABLE", "1", 1);
    uform_nccl_t const *nccl = NULL;
    uform_status_t status = uform_nccl(&nccl);
    if (status == uform_status_ok_k) {
        CHECK(nccl && nccl->version >= 21400);
        printf("NCCL %d loaded\n", nccl ? nccl->version : 0);
    }
    else {
        CHECK(status == uform_status_unsupported_k);
        CHECK(strstr(uform_error_message(), "libnccl.so.2") || strstr(uform_error_message(), "without CUDA"));
        printf("NCCL unavailable: %s\n", uform_error_message());
    }
    if (!opt_in && UFORM_WITH_CUDA) {
        char const *value = getenv("NCCL_NVLS_ENABLE");
        CHECK(value && strcmp(value, "0") == 0);
    }
    // The restated configuration prefix keeps NCCL's layout: size, magic, version, blocking.
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_NONBLOCKING;
    CHECK(config.size == sizeof config && config.magic == 0xcafebeefu && config.version == 21400u && config.blocking == 0);
    CHECK(offsetof(uform_nccl_config_t, blocking) == 16 && sizeof(uform_nccl_unique_id_t) == 128);
}

#if UFORM_WITH_CUDA

/* ---- With GPUs ---- */

static uform_cuda_t const *cuda = NULL;

/** One buffer of `count` elements of `bytes_each` per device of the executor. */
typedef struct buffers_t {
    size_t devices;
    uint64_t pointers[16];
    size_t count, bytes_each;
    uform_vram_member_t const *members;
} buffers_t;

static bool buffers_alloc(uform_executor_t executor, size_t count, size_t bytes_each, buffers_t *buffers) {
    memset(buffers, 0, sizeof *buffers);
    buffers->devices = uform_vram_members(executor, &buffers->members);
    buffers->count = count, buffers->bytes_each = bytes_each;
    for (size_t d = 0; d < buffers->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)buffers->members[d].cu_context);
        CUdeviceptr pointer = 0;
        CUresult result = cuda->MemAlloc(&pointer, count * bytes_each);
        cuda->CtxPopCurrent(&popped);
        if (result != CUDA_SUCCESS) return false;
        buffers->pointers[d] = (uint64_t)pointer;
    }
    return true;
}

static void buffers_free(buffers_t *buffers) {
    for (size_t d = 0; d < buffers->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)buffers->members[d].cu_context);
        cuda->MemFree((CUdeviceptr)buffers->pointers[d]);
        cuda->CtxPopCurrent(&popped);
    }
}

static bool copy(buffers_t const *buffers, size_t d, void *host, bool to_device) {
    CUcontext popped;
    cuda->CtxPushCurrent((CUcontext)buffers->members[d].cu_context);
    size_t bytes = buffers->count * buffers->bytes_each;
    CUresult result = to_device ? cuda->MemcpyHtoD((CUdeviceptr)buffers->pointers[d], host, bytes)
                                : cuda->MemcpyDtoH(host, (CUdeviceptr)buffers->pointers[d], bytes);
    cuda->CtxPopCurrent(&popped);
    return result == CUDA_SUCCESS;
}

typedef struct fill_t {
    buffers_t const *buffers;
    size_t first_gpu;
} fill_t;

/** Device call: GPU g of the run writes g + 1 into its floats. */
static uform_status_t fill_device(void *context, uform_device_slot_t const *slot) {
    fill_t const *fill = context;
    return uform_device_launch(slot, uform_kernel_fill_f32_k, fill->buffers->pointers[slot->device_index],
                               fill->buffers->count, (double)(fill->first_gpu + slot->device_index + 1));
}

static uint16_t bf16_of(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    bits += 0x7FFF + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

static float float_of_bf16(uint16_t value) {
    uint32_t bits = (uint32_t)value << 16;
    float result;
    memcpy(&result, &bits, 4);
    return result;
}

/** Checks every element of every device's f32 buffer equals `expected`. */
static bool check_f32(buffers_t const *buffers, float expected) {
    float *host = malloc(buffers->count * sizeof(float));
    bool ok = host != NULL;
    for (size_t d = 0; ok && d < buffers->devices; ++d) {
        ok = copy(buffers, d, host, false);
        for (size_t i = 0; ok && i < buffers->count; ++i)
            if (host[i] != expected) {
                fprintf(stderr, "device %zu element %zu: %g, expected %g\n", d, i, (double)host[i], (double)expected);
                ok = false;
            }
    }
    free(host);
    return ok;
}

/** Checks device 0's f32 buffer holds `first` everywhere and device 1's `second`. */
static bool check_f32_per_device(buffers_t const *buffers, float first, float second) {
    float *host = malloc(buffers->count * sizeof(float));
    bool ok = host != NULL;
    for (size_t d = 0; ok && d < buffers->devices && d < 2; ++d) {
        ok = copy(buffers, d, host, false);
        for (size_t i = 0; ok && i < buffers->count; ++i) ok = host[i] == (d == 0 ? first : second);
    }
    free(host);
    return ok;
}

/**
 *  Runs the all-reduce checks on a bootstrapped mesh: f32 integers exact (blocking, then deferred),
 *  bf16 within tolerance, i32, and the argument errors. Returns the failures seen.
 */
static int exercise(uform_executor_t executor, uform_mesh_t mesh, char const *label, size_t count) {
    int failures_before = check_failures;
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    size_t const total = description.gpus_per_colocated_domain;
    float const sum = (float)(total * (total + 1) / 2);
    buffers_t buffers;
    CHECK_FATAL(buffers_alloc(executor, count, sizeof(float), &buffers));
    fill_t fill = {.buffers = &buffers, .first_gpu = description.first_gpu_index};
    uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};

    // f32, blocking: each GPU g holds g + 1, so every element sums to total (total + 1) / 2.
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    double start = now();
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_f32_k, NULL), uform_status_ok_k);
    double first = now() - start;
    CHECK(check_f32(&buffers, sum));
    // f32, deferred, twice in a row: sum * total, then sum * total^2.
    uform_outcome_t outcomes[2];
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_f32_k, &outcomes[0]), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_f32_k, &outcomes[1]), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcomes[0], 60), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcomes[1], 60), uform_status_ok_k);
    CHECK(check_f32(&buffers, sum * (float)total * (float)total));

    // i32 and f64 through the same bytes: counts of whole elements of their own size.
    {
        int32_t *host = malloc(count * sizeof(int32_t));
        for (size_t d = 0; d < buffers.devices; ++d) {
            for (size_t i = 0; i < count; ++i) host[i] = (int32_t)(i % 1000) - 500 + (int32_t)(description.first_gpu_index + d);
            CHECK(copy(&buffers, d, host, true));
        }
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_i32_k, NULL), uform_status_ok_k);
        int32_t offset = (int32_t)(total * (total - 1) / 2);
        for (size_t d = 0; d < buffers.devices; ++d) {
            CHECK(copy(&buffers, d, host, false));
            bool ok = true;
            for (size_t i = 0; i < count && ok; ++i) ok = host[i] == ((int32_t)(i % 1000) - 500) * (int32_t)total + offset;
            CHECK(ok);
        }
        free(host);
    }

    // bf16: quarter-integers, exact in bf16 and in every partial sum, compared within tolerance.
    {
        size_t elements = count * 2; // the same bytes as bf16
        uint16_t *host = malloc(elements * sizeof(uint16_t));
        buffers_t halves = buffers;
        halves.count = elements, halves.bytes_each = 2;
        for (size_t d = 0; d < buffers.devices; ++d) {
            size_t g = description.first_gpu_index + d;
            for (size_t i = 0; i < elements; ++i) host[i] = bf16_of((float)((i % 13) + g + 1) * 0.25f);
            CHECK(copy(&halves, d, host, true));
        }
        CHECK_STATUS(uform_mesh_all_reduce(mesh, halves.pointers, elements, uform_dtype_bf16_k, NULL), uform_status_ok_k);
        double worst = 0;
        for (size_t d = 0; d < buffers.devices; ++d) {
            CHECK(copy(&halves, d, host, false));
            for (size_t i = 0; i < elements; ++i) {
                double expected = 0.25 * ((double)(i % 13) * (double)total + (double)(total * (total + 1) / 2));
                double error = fabs((double)float_of_bf16(host[i]) - expected) / expected;
                if (error > worst) worst = error;
            }
        }
        CHECK(worst <= 1.0 / 128); // bf16 carries 8 significant bits
        free(host);
    }

    // Host buffers, staged through each device's scratch: blocking, then deferred.
    {
        float *host[16];
        void *pointers[16] = {0};
        for (size_t d = 0; d < buffers.devices; ++d) {
            host[d] = malloc(count * sizeof(float));
            for (size_t i = 0; i < count; ++i) host[d][i] = (float)(description.first_gpu_index + d + 1) + (float)(i % 7);
            pointers[d] = host[d];
        }
        CHECK_STATUS(uform_mesh_all_reduce_host(mesh, pointers, count, uform_dtype_f32_k, NULL), uform_status_ok_k);
        size_t wrong = 0;
        for (size_t d = 0; d < buffers.devices; ++d)
            for (size_t i = 0; i < count; ++i) wrong += host[d][i] != sum + (float)(i % 7) * (float)total;
        CHECK(wrong == 0);
        uform_outcome_t outcome;
        CHECK_STATUS(uform_mesh_all_reduce_host(mesh, pointers, count, uform_dtype_f32_k, &outcome), uform_status_ok_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, 60), uform_status_ok_k);
        for (size_t d = 0; d < buffers.devices; ++d)
            for (size_t i = 0; i < count; ++i)
                wrong += host[d][i] != (sum + (float)(i % 7) * (float)total) * (float)total;
        CHECK(wrong == 0);
        void *missing[16] = {0};
        CHECK_STATUS(uform_mesh_all_reduce_host(mesh, missing, count, uform_dtype_f32_k, NULL),
                     uform_status_invalid_argument_k);
        CHECK_MESSAGE("buffers[0] is NULL");
        CHECK_STATUS(uform_mesh_all_reduce_host(mesh, NULL, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
        CHECK_STATUS(uform_mesh_all_reduce_host(mesh, NULL, 0, uform_dtype_f32_k, NULL), uform_status_ok_k);
        for (size_t d = 0; d < buffers.devices; ++d) free(host[d]);
    }

    // Arguments.
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 0, uform_dtype_f32_k, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, NULL, 0, uform_dtype_f32_k, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, NULL, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, (uform_dtype_t)99, NULL),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("dtype 99");
    uint64_t holes[16] = {0};
    CHECK_STATUS(uform_mesh_all_reduce(mesh, holes, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("buffers[0] is 0");

    uform_mesh_timings_t timings;
    uform_mesh_timings(mesh, &timings);
    printf("%s: %zu GPU(s) of %zu in the run from %zu: all-reduce checks %s; first %zu-byte all-reduce %.2f ms; "
           "bootstrap: rendezvous %.1f ms, NCCL id %.1f ms, NCCL init %.1f ms\n",
           label, description.gpus_per_host_domain, total, description.first_gpu_index,
           check_failures == failures_before ? "passed" : "FAILED", count * sizeof(float), first * 1e3,
           timings.rendezvous_seconds * 1e3,
           timings.blob_seconds * 1e3, timings.nccl_seconds * 1e3);
    buffers_free(&buffers);
    return check_failures - failures_before;
}

static uform_gpu_class_t own_class_of(size_t ordinal) {
    uform_gpu_device_t devices[64];
    size_t count = 0;
    if (uform_gpu_devices(devices, 64, &count) != uform_status_ok_k) return uform_gpu_class_unknown_k;
    return ordinal < count ? devices[ordinal].gpu_class : uform_gpu_class_unknown_k;
}

/** One process over every GPU. */
static void test_one_process(size_t gpus) {
    int32_t ordinals[16];
    for (size_t i = 0; i < gpus; ++i) ordinals[i] = (int32_t)i;
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = gpus};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (!executor) return;
    uform_mesh_t mesh = NULL;
    uform_mesh_options_t options = {.timeout_seconds = 60};
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    if (!mesh) {
        uform_executor_free(executor);
        return;
    }
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_host_domain == gpus && description.gpus_per_colocated_domain == gpus);
    CHECK(description.gpus_per_multimem_domain == gpus && description.host_domain_index == 0);
    CHECK(description.first_gpu_index == 0 && description.multimem_tier == uform_multimem_tier_peer_read_k);
    CHECK(description.gpu_class == own_class_of(0));
    // A second mesh on the same executor is refused.
    uform_mesh_t second = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &second), uform_status_invalid_argument_k);
    CHECK_MESSAGE("already carries a mesh");
    exercise(executor, mesh, "one process", (size_t)1 << 22); // 16 MiB of f32
    uform_mesh_free(mesh);
    // Freed: the executor takes a mesh again, with a given span.
    options.gpus_per_multimem_domain = 1;
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_multimem_domain == 1);
    uform_mesh_free(mesh);
    uform_executor_free(executor);
}

/** Device call: device 0 sleeps `value` nanoseconds on its stream (the engine's sleep kernel). */
static uform_status_t sleep_device(void *context, uform_device_slot_t const *slot) {
    if (slot->device_index != 0) return uform_status_ok_k;
    return uform_device_launch(slot, uform_kernel_sleep_k, 0, 0, *(double const *)context);
}

/**
 *  Roles on the fake driver with the fake NCCL (test/gpu/fake_nccl.c), which sums in place across
 *  the ranks of this process: the NCCL paths of a mesh without a GPU.
 */
/** Checks that the mesh's collectives run on blocking communicators split off the non-blocking
 *  ones (the fake records each communicator's config), each having enqueued at least `collectives`;
 *  with `UFORM_MESH_BLOCKING=0`, on the non-blocking ones NCCL started with. */
static void check_blocking_children(uform_mesh_t mesh, size_t devices, long collectives) {
    void *library = dlopen(UFORM_FAKE_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
    int (*describe)(uform_nccl_comm_t, int *, int *, long *) =
        library ? (int (*)(uform_nccl_comm_t, int *, int *, long *))dlsym(library, "fake_nccl_describe") : NULL;
    CHECK_FATAL(describe != NULL);
    uform_nccl_comm_t const *comms = NULL;
    CHECK(uform_mesh_comms(mesh, &comms) == devices);
    for (size_t d = 0; comms && d < devices; ++d) {
        int blocking = -1, child = -1;
        long enqueued = -1;
        CHECK(describe(comms[d], &blocking, &child, &enqueued) == 0);
        char const *wanted = getenv("UFORM_MESH_BLOCKING");
        if (wanted && strcmp(wanted, "0") == 0) CHECK(blocking == 0 && child == 0);
        else CHECK(blocking == 1 && child == 1);
        CHECK(enqueued >= collectives);
        if (enqueued < collectives) fprintf(stderr, "rank %zu enqueued %ld collectives\n", d, enqueued);
    }
    if (library) dlclose(library);
}

static int fake_nccl_child(char const *role, uform_executor_t executor, uform_mesh_options_t *options) {
    uform_mesh_t mesh = NULL;
    double start = now();
    if (strcmp(role, "fake-nccl-single") == 0) {
        // Two GPUs, no peers: initialisation polled to the end, then the whole all-reduce suite, on
        // the blocking children split off the non-blocking communicators NCCL started with.
        options->host_domain_count = 0, options->directory = NULL;
        char const *wanted = getenv("UFORM_MESH_BLOCKING");
        char kept[8];
        snprintf(kept, sizeof kept, "%s", wanted ? wanted : "");
        setenv("UFORM_MESH_BLOCKING", "yes", 1);
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_invalid_argument_k);
        CHECK_MESSAGE("UFORM_MESH_BLOCKING is \"yes\"; use 1 (collectives on blocking NCCL communicators, the "
                      "default) or 0");
        CHECK(mesh == NULL);
        if (wanted) setenv("UFORM_MESH_BLOCKING", kept, 1);
        else unsetenv("UFORM_MESH_BLOCKING");
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        if (mesh) check_blocking_children(mesh, 2, 0);
        if (mesh) exercise(executor, mesh, "fake NCCL, one process", 4096);
        if (mesh) check_blocking_children(mesh, 2, 7); // every non-empty all-reduce of `exercise`
    }
    else if (strcmp(role, "fake-nccl-split-hang") == 0) {
        // NCCL starts, but the split into blocking communicators never completes: bounded too.
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_timeout_k);
        CHECK_MESSAGE("NCCL split into blocking communicators (ncclCommSplit of 2 ranks, 2 in this process) did not "
                      "finish within 1 s; this process's ranks 0, 1 (of 2 in the run) are still waiting");
        CHECK_MESSAGE("communicators aborted");
        double elapsed = now() - start;
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_timeout_k), elapsed, uform_error_message());
        CHECK(mesh == NULL);
    }
    else if (strcmp(role, "fake-nccl-blocked") == 0) {
        // A peer is lost: the blocking ncclGroupEnd of the second all-reduce never returns by itself.
        // The guard thread aborts the communicators at the timeout, which releases it: PEER_LOST,
        // blocking or deferred, and the mesh stays aborted; freeing it returns at once.
        alarm(30);
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        check_blocking_children(mesh, 2, 1);
        start = now();
        uform_outcome_t outcome;
        uform_status_t status = uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, &outcome);
        CHECK(status == uform_status_peer_lost_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, 10), uform_status_peer_lost_k);
        double elapsed = now() - start;
        CHECK_MESSAGE("mesh all-reduce (ncclGroupEnd) did not return within 1 s: a peer is gone or stalled; "
                      "communicators aborted");
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_peer_lost_k), elapsed,
               uform_error_message());
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        CHECK_MESSAGE("did not return within 1 s");
        buffers_free(&buffers);
    }
    else if (strcmp(role, "fake-nccl-stalled") == 0) {
        // A peer was SIGKILLed between all-reduces (test_mesh's "death" case on the fake): the next
        // ncclGroupEnd returns, but its kernels spin on the dead peer until their communicators are
        // aborted, and no communicator reports an error. The executor's wait runs the watchdog,
        // which aborts at the timeout: PEER_LOST, blocking or deferred, within the timeout. Aborting
        // must start with the blocking children the kernels run on: an NCCL abort frees device
        // memory, which waits for the device, so aborting a parent first waited forever for the
        // child's spinning kernel (the hang on 2 x H200; here: 10 s and "fake_nccl: misuse").
        alarm(60);
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        fill_t fill = {.buffers = &buffers};
        uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};
        CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k); // GPU g holds g + 1
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        CHECK(check_f32(&buffers, 3.0f));
        check_blocking_children(mesh, 2, 1);
        bool deferred = getenv("FAKE_TEST_DEFERRED") != NULL;
        start = now();
        uform_outcome_t outcome;
        uform_status_t status = uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k,
                                                      deferred ? &outcome : NULL);
        if (deferred) { // enqueued: the wait on its outcome fails
            CHECK_STATUS(status, uform_status_ok_k);
            status = uform_outcome_wait(&outcome, 30);
        }
        double elapsed = now() - start;
        CHECK_STATUS(status, uform_status_peer_lost_k);
        CHECK_MESSAGE("mesh all-reduce did not finish within 1 s: a peer is gone or stalled; communicators aborted");
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s%s: %s after %.2f s: %s\n", role, deferred ? " (deferred)" : "", uform_status_name(status), elapsed,
               uform_error_message());
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        CHECK_MESSAGE("aborted");
        // The aborted kernels quit: the executor drains, and freeing returns at once.
        CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
        double freeing = now();
        uform_mesh_free(mesh);
        mesh = NULL;
        CHECK(now() - freeing < 10);
        buffers_free(&buffers);
    }
    else if (strcmp(role, "fake-nccl-pair") == 0) {
        // Two processes: the unique ID through the directory, then every file removed.
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        uform_mesh_description_t description;
        CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
        CHECK(description.gpus_per_colocated_domain == 2 && description.first_gpu_index == options->host_domain_index);
    }
    else if (strcmp(role, "fake-nccl-init-hang") == 0) {
        // NCCL never finishes starting: bounded by the timeout, naming the stage and the ranks.
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_timeout_k);
        CHECK_MESSAGE("NCCL initialisation (ncclCommInitRankConfig of 2 ranks, 2 in this process) did not finish "
                      "within 1 s; this process's ranks 0, 1 (of 2 in the run) are still waiting, so a rank of "
                      "another process never joined or stalled");
        CHECK_MESSAGE("communicators aborted");
        double elapsed = now() - start;
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_timeout_k), elapsed, uform_error_message());
        CHECK(mesh == NULL);
    }
    else if (strcmp(role, "fake-nccl-early-exit") == 0) {
        // The executor stops an all-reduce after device 0 (device 1's context cannot be made
        // current). The mesh used to keep its mutex and an open NCCL group from device 0's callback,
        // so the next all-reduce or uform_mesh_free deadlocked; now nothing is held across callbacks:
        // the failed call enqueued nothing, the next one sums, and free returns.
        alarm(30);
        options->host_domain_count = 0, options->directory = NULL;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        void (*refuse_context)(int, int) = driver ? (void (*)(int, int))dlsym(driver, "fake_cuda_refuse_context") : NULL;
        CHECK_FATAL(refuse_context != NULL);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        fill_t fill = {.buffers = &buffers};
        uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};
        CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k); // GPU g holds g + 1
        refuse_context(1, 1);
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL),
                     uform_status_system_error_k);
        CHECK_MESSAGE("cannot make device 1's context current");
        uform_outcome_t outcome;
        refuse_context(1, 1);
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, &outcome),
                     uform_status_system_error_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, 10), uform_status_system_error_k);
        CHECK(check_f32_per_device(&buffers, 1.0f, 2.0f)); // nothing was reduced
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        CHECK(check_f32(&buffers, 3.0f));
        buffers_free(&buffers);
        double freeing = now();
        uform_mesh_free(mesh);
        mesh = NULL;
        CHECK(now() - freeing < 10);
        printf("%s: a call stopped after device 0 left the mesh usable; free took %.3f s\n", role, now() - freeing);
    }
    else if (strcmp(role, "fake-nccl-remote-error") == 0) {
        // A communicator reports a lost peer after one collective: the watchdog (during any wait
        // on the executor) or the next all-reduce aborts the communicators, PEER_LOST from then on.
        options->host_domain_count = 0, options->directory = NULL;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        uform_status_t first = uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL);
        CHECK(first == uform_status_ok_k || first == uform_status_peer_lost_k);
        if (first == uform_status_ok_k) {
            // A 500 ms wait, so the watchdog runs (about every millisecond of a wait) and aborts:
            // PEER_LOST. Only a wait that lasts lets it run: a loaded CI machine that keeps this
            // thread off a core until the sleep ended (seen under AddressSanitizer with a 50 ms
            // sleep) finds the call finished, OK, with nothing checked; then the next all-reduce
            // must find the error instead.
            double nanoseconds = 500e6;
            uform_call_t call = {.residency = uform_residency_vram_k, .device = sleep_device, .context = &nanoseconds};
            uform_status_t const slept = uform_executor_call(executor, &call, NULL);
            CHECK(slept == uform_status_peer_lost_k || slept == uform_status_ok_k);
            if (slept == uform_status_ok_k) {
                printf("%s: the watchdog did not run during the sleep; the next all-reduce checks\n", role);
                CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL),
                             uform_status_peer_lost_k);
            }
        }
        CHECK_MESSAGE("ncclRemoteError");
        CHECK_MESSAGE("communicators aborted");
        printf("%s: %s\n", role, uform_error_message());
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        CHECK_MESSAGE("aborted");
        uform_outcome_t outcome;
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, &outcome),
                     uform_status_peer_lost_k);
        CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_peer_lost_k);
        buffers_free(&buffers);
    }
    else if (strcmp(role, "fake-nccl-timeout") == 0) {
        // A collective queued behind 8 s of other work outlasts a 1 s timeout: the watchdog aborts.
        // The work outlasts the bound below too (3 s did not leave a loaded machine that much room).
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        double nanoseconds = 8e9;
        uform_outcome_t slept;
        uform_call_t call = {.residency = uform_residency_vram_k, .device = sleep_device, .context = &nanoseconds};
        CHECK_STATUS(uform_executor_call(executor, &call, &slept), uform_status_ok_k);
        start = now();
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        double elapsed = now() - start;
        CHECK_MESSAGE("did not finish within 1 s");
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_peer_lost_k), elapsed, uform_error_message());
        CHECK(uform_outcome_wait(&slept, 30) != uform_status_pending_k);
        // The sleep outlasts the abort: the executor drains it here, so freeing the mesh below (which
        // drains the executor first) returns at once.
        CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
        buffers_free(&buffers);
    }
    start = now();
    uform_mesh_free(mesh);
    CHECK(now() - start < 5);
    uform_executor_free(executor);
    return check_failures ? 1 : 0;
}

/* ---- Multi-process shapes: the children ---- */

/** `--child ROLE INDEX COUNT DIRECTORY JOB ORDINAL`: one process of a shape. Exit 0 on success. */
static int child_main(char **argv) {
    char const *role = argv[0];
    size_t index = strtoull(argv[1], NULL, 10), count = strtoull(argv[2], NULL, 10);
    int32_t ordinal = (int32_t)strtol(argv[5], NULL, 10);
    alarm(200);
    int32_t both[2] = {0, 1};
    bool two_gpus = strcmp(role, "no-nccl-two-gpus") == 0 ||
                    (strncmp(role, "fake-nccl", 9) == 0 && strcmp(role, "fake-nccl-pair") != 0);
    uform_vram_options_t vram = {.devices = two_gpus ? both : &ordinal, .devices_count = two_gpus ? 2 : 1};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (!executor) return 1;
    uform_mesh_options_t options = {.host_domain_index = index, .host_domain_count = count, .directory = argv[3],
                                    .job = argv[4], .timeout_seconds = 60};
    if (strncmp(role, "no-nccl", 7) == 0) {
        // Process 0 lacks NCCL (UFORM_NCCL_LIBRARY names no library) and the run has two GPUs, so
        // it cannot draw the unique ID; the others hear of it at once, not at their timeout (or,
        // where this machine has no NCCL at all, fail alike on their own).
        if (index == 0) setenv("UFORM_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        bool own_nccl = index > 0 && uform_nccl(NULL) == uform_status_ok_k;
        options.timeout_seconds = 20;
        uform_mesh_t mesh = NULL;
        double start = now();
        CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_unsupported_k);
        double failed_after = now() - start;
        CHECK_MESSAGE("NCCL is not available");
        CHECK_MESSAGE("UFORM_NCCL_LIBRARY");
        if (own_nccl) CHECK_MESSAGE("process 0 (host ");
        CHECK(failed_after < 5);
        CHECK(mesh == NULL);
        printf("%s, process %zu: %s after %.3f s: %s\n", role, index, uform_status_name(uform_status_unsupported_k),
               failed_after, uform_error_message());
        uform_executor_free(executor);
        return check_failures ? 1 : 0;
    }
    if (strncmp(role, "fake-nccl", 9) == 0) return fake_nccl_child(role, executor, &options);
    if (strcmp(role, "mismatch") == 0) {
        // The last process believes NVLink domains span one GPU; everyone must refuse the run.
        options.timeout_seconds = 20;
        if (index + 1 == count) options.gpus_per_multimem_domain = 1;
        uform_mesh_t mesh = NULL;
        CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_config_mismatch_k);
        CHECK_MESSAGE("gpus_per_multimem_domain");
        printf("mismatch, process %zu: %s\n", index, uform_error_message());
        uform_mesh_free(mesh);
        uform_executor_free(executor);
        return check_failures ? 1 : 0;
    }
    if (strcmp(role, "death") == 0) options.timeout_seconds = 10;
    uform_mesh_t mesh = NULL;
    double start = now();
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    double bootstrap = now() - start;
    if (!mesh) return 1;
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_host_domain == 1 && description.gpus_per_colocated_domain == count);
    CHECK(description.host_domain_index == index && description.first_gpu_index == index);
    CHECK(description.gpus_per_multimem_domain == count); // one host: the run's GPUs on it
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k);
    CHECK(description.gpu_class == own_class_of((size_t)ordinal));
    if (strcmp(role, "agree") == 0) {
        char label[64];
        snprintf(label, sizeof label, "process %zu of %zu", index, count);
        exercise(executor, mesh, label, (size_t)1 << 22);
        printf("process %zu of %zu: bootstrap %.1f ms\n", index, count, bootstrap * 1e3);
    }
    else if (strcmp(role, "death") == 0) {
        // Both take one all-reduce; then the last process dies and the others' next one must fail
        // with PEER_LOST within the timeout (10 s) plus a margin, never hang.
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 1 << 20, sizeof(float), &buffers));
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 1 << 20, uform_dtype_f32_k, NULL), uform_status_ok_k);
        if (index + 1 == count) {
            usleep(200 * 1000);
            raise(SIGKILL);
        }
        usleep(500 * 1000);
        start = now();
        uform_status_t status = uform_mesh_all_reduce(mesh, buffers.pointers, 1 << 20, uform_dtype_f32_k, NULL);
        if (status == uform_status_ok_k) // a collective can still complete in flight: the next cannot
            status = uform_mesh_all_reduce(mesh, buffers.pointers, 1 << 20, uform_dtype_f32_k, NULL);
        double failed_after = now() - start;
        CHECK(status == uform_status_peer_lost_k);
        printf("peer death, process %zu: %s after %.2f s: %s\n", index, uform_status_name(status), failed_after,
               uform_error_message());
        CHECK(failed_after < 10 + 5);
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 1 << 20, uform_dtype_f32_k, NULL),
                     uform_status_peer_lost_k);
        CHECK_MESSAGE("aborted");
        start = now();
        uform_mesh_free(mesh);
        CHECK(now() - start < 10);
        buffers_free(&buffers);
        uform_executor_free(executor);
        return check_failures ? 1 : 0;
    }
    uform_mesh_free(mesh);
    uform_executor_free(executor);
    return check_failures ? 1 : 0;
}

/** Starts `count` children of `role`, one GPU each, and returns how many failed. */
static int run_children(char const *role, size_t count, char const *directory, char const *job, int expect_killed_last) {
    pid_t pids[16];
    for (size_t i = 0; i < count; ++i) {
        char index[24], total[24], ordinal[24];
        snprintf(index, sizeof index, "%zu", i);
        snprintf(total, sizeof total, "%zu", count);
        snprintf(ordinal, sizeof ordinal, "%zu", i);
        char *args[] = {"/proc/self/exe", "--child", (char *)role, index, total, (char *)directory, (char *)job, ordinal, NULL};
        fflush(NULL);
        CHECK_FATAL(posix_spawn(&pids[i], "/proc/self/exe", NULL, NULL, args, environ) == 0);
    }
    int failed = 0;
    for (size_t i = 0; i < count; ++i) {
        int status = 0;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {}
        bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        bool ok = (expect_killed_last && i + 1 == count) ? killed : (WIFEXITED(status) && WEXITSTATUS(status) == 0);
        if (!ok) {
            fprintf(stderr, "%s child %zu ended with status 0x%x\n", role, i, status);
            ++failed;
        }
    }
    return failed;
}

static void test_many_processes(size_t gpus) {
    char directory[] = "/tmp/uform-mesh-XXXXXX";
    CHECK_FATAL(mkdtemp(directory) != NULL);
    double start = now();
    CHECK(run_children("agree", gpus, directory, "agree", 0) == 0);
    printf("%zu processes over one GPU each: %.2f s including start-up\n", gpus, now() - start);
    CHECK(run_children("mismatch", 2, directory, "mismatch", 0) == 0);
    CHECK(run_children("death", 2, directory, "death", 1) == 0);
    if (!check_failures) remove_tree(directory);
}

/** The same API on the fake driver (test/gpu/fake_cuda.c): a run of one GPU needs no NCCL and its
 *  all-reduce is the identity; runs of two GPUs without NCCL fail with UNSUPPORTED everywhere. */
static void test_fake_driver(void) {
    int32_t ordinal = 0;
    uform_vram_options_t vram = {.devices = &ordinal, .devices_count = 1};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (!executor) return;
    uform_mesh_t mesh = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &mesh), uform_status_ok_k);
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_host_domain == 1 && description.gpus_per_colocated_domain == 1);
    CHECK(description.gpus_per_multimem_domain == 1 && description.first_gpu_index == 0);
    CHECK(description.host_domain_index == 0 && description.gpu_class == uform_gpu_class_nvidia_hopper_k);
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k);
    uform_mesh_t second = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &second), uform_status_invalid_argument_k);
    CHECK_MESSAGE("already carries a mesh");
    CHECK(second == NULL);
    // The binding is the executor's own: another executor on the same device carries a mesh of its
    // own meanwhile, and freeing that one leaves the first bound.
    uform_executor_t other = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &other), uform_status_ok_k);
    uform_mesh_t other_mesh = NULL;
    if (other) CHECK_STATUS(uform_mesh_bootstrap(other, NULL, &other_mesh), uform_status_ok_k);
    uform_mesh_free(other_mesh);
    uform_executor_free(other);
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &second), uform_status_invalid_argument_k);
    CHECK_MESSAGE("already carries a mesh");

    size_t const count = 4096;
    buffers_t buffers;
    CHECK_FATAL(buffers_alloc(executor, count, sizeof(float), &buffers));
    fill_t fill = {.buffers = &buffers};
    uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_f32_k, NULL), uform_status_ok_k);
    uform_outcome_t outcome;
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_bf16_k, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, 10), uform_status_ok_k);
    CHECK(check_f32(&buffers, 1.0f)); // a sum over one GPU
    CHECK_STATUS(uform_mesh_all_reduce(mesh, NULL, 0, uform_dtype_f32_k, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, NULL, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, (uform_dtype_t)-1, &outcome),
                 uform_status_invalid_argument_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_invalid_argument_k);
    uint64_t holes[1] = {0};
    CHECK_STATUS(uform_mesh_all_reduce(mesh, holes, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    uform_mesh_free(mesh);

    // Opting in to multicast is not enough: the fake devices report no multicast support.
    setenv("UFORM_ALLOW_MULTICAST", "1", 1);
    uform_mesh_options_t options = {.gpus_per_multimem_domain = 4};
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k && description.gpus_per_multimem_domain == 4);
    unsetenv("UFORM_ALLOW_MULTICAST");
    uform_mesh_free(mesh);
    buffers_free(&buffers);
    uform_executor_free(executor);

    // Two GPUs without NCCL, in one process and in two.
    char directory[] = "/tmp/uform-mesh-fake-XXXXXX";
    CHECK_FATAL(mkdtemp(directory) != NULL);
    CHECK(run_children("no-nccl-two-gpus", 1, directory, "single", 0) == 0);
    CHECK(run_children("no-nccl", 2, directory, "pair", 0) == 0);

#ifdef UFORM_FAKE_NCCL_PATH
    // The NCCL paths on the fake NCCL, one child each, so each loads it afresh with its settings.
    setenv("UFORM_NCCL_LIBRARY", UFORM_FAKE_NCCL_PATH, 1);
    setenv("FAKE_NCCL_DIR", directory, 1);
    CHECK(run_children("fake-nccl-single", 1, directory, "fake-single", 0) == 0);
    setenv("UFORM_MESH_BLOCKING", "0", 1); // collectives on the non-blocking communicators
    CHECK(run_children("fake-nccl-single", 1, directory, "fake-single-nonblocking", 0) == 0);
    setenv("FAKE_NCCL_STALL_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-stalled", 1, directory, "fake-stalled-nonblocking", 0) == 0);
    unsetenv("FAKE_NCCL_STALL_AFTER");
    unsetenv("UFORM_MESH_BLOCKING");
    setenv("FAKE_NCCL_SPLIT_HANG", "1", 1);
    CHECK(run_children("fake-nccl-split-hang", 1, directory, "fake-split-hang", 0) == 0);
    unsetenv("FAKE_NCCL_SPLIT_HANG");
    setenv("FAKE_NCCL_BLOCK_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-blocked", 1, directory, "fake-blocked", 0) == 0);
    unsetenv("FAKE_NCCL_BLOCK_AFTER");
    setenv("FAKE_NCCL_STALL_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-stalled", 1, directory, "fake-stalled", 0) == 0);
    setenv("FAKE_TEST_DEFERRED", "1", 1);
    CHECK(run_children("fake-nccl-stalled", 1, directory, "fake-stalled-deferred", 0) == 0);
    unsetenv("FAKE_TEST_DEFERRED");
    unsetenv("FAKE_NCCL_STALL_AFTER");
    CHECK(run_children("fake-nccl-pair", 2, directory, "fake-pair", 0) == 0);
    char leftover[512];
    snprintf(leftover, sizeof leftover, "%s/fake-pair/run", directory);
    CHECK(access(leftover, F_OK) != 0); // NCCL up, so every process removed its files
    snprintf(leftover, sizeof leftover, "%s/fake-pair/process-1", directory);
    CHECK(access(leftover, F_OK) != 0);
    setenv("FAKE_NCCL_INIT_HANG", "1", 1);
    CHECK(run_children("fake-nccl-init-hang", 1, directory, "fake-hang", 0) == 0);
    unsetenv("FAKE_NCCL_INIT_HANG");
    CHECK(run_children("fake-nccl-early-exit", 1, directory, "fake-early-exit", 0) == 0);
    setenv("FAKE_NCCL_REMOTE_ERROR_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-remote-error", 1, directory, "fake-remote", 0) == 0);
    unsetenv("FAKE_NCCL_REMOTE_ERROR_AFTER");
    setenv("FAKE_NCCL_SYNC", "0", 1);
    CHECK(run_children("fake-nccl-timeout", 1, directory, "fake-timeout", 0) == 0);
    unsetenv("FAKE_NCCL_SYNC");
    unsetenv("UFORM_NCCL_LIBRARY");
    unsetenv("FAKE_NCCL_DIR");
#endif
    if (!check_failures) remove_tree(directory);
}

#endif // UFORM_WITH_CUDA

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    // NVLink multicast stays off in this test and in every process it starts.
    if (!getenv("UFORM_ALLOW_MULTICAST")) setenv("NCCL_NVLS_ENABLE", "0", 1);
#if UFORM_WITH_CUDA
    if (argc > 2 && strcmp(argv[1], "--child") == 0) {
        if (argc < 8) return 2;
        if (uform_cuda(&cuda) != uform_status_ok_k) return 3;
        return child_main(argv + 2);
    }
#endif
    (void)argc, (void)argv;
    alarm(280);
    test_arguments();
    test_nccl_loader();
    if (uform_gpu_status() != uform_status_ok_k) {
        if (check_failures) CHECK_DONE();
        SKIP("no GPU: %s", uform_error_message());
    }
#if UFORM_WITH_CUDA
    size_t gpus = 0;
    CHECK_FATAL(uform_gpu_devices(NULL, 0, &gpus) == uform_status_ok_k);
    if (gpus > 16) gpus = 16;
    CHECK_FATAL(uform_cuda(&cuda) == uform_status_ok_k);
    char name[256] = "";
    CHECK_FATAL(uform_gpu_device_name(0, name, sizeof name) == uform_status_ok_k);
    if (strstr(name, "UForm Fake GPU")) {
        test_fake_driver();
        CHECK_DONE();
    }
    test_one_process(gpus);
    if (uform_nccl(NULL) != uform_status_ok_k) {
        printf("NCCL is missing: the multi-process shapes need it: %s\n", uform_error_message());
        ++check_failures;
    }
    else if (gpus >= 2) test_many_processes(gpus);
    else printf("one GPU: the multi-process shapes need two or more; not run\n");
#endif
    CHECK_DONE();
}
