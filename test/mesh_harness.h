/**
 *  @file   mesh_harness.h
 *  @brief  What the mesh tests share (test_mesh.c, test_mesh_faults.c): device buffers and their
 *          checks, the all-reduce exercise, and the multi-process shapes' children (`--child ROLE
 *          INDEX COUNT DIRECTORY JOB ORDINAL`), started with posix_spawn of the same program, never
 *          by fork(), so no child inherits a CUDA context. Every child gets NCCL_NVLS_ENABLE=0.
 */
#ifndef UFORM_TEST_MESH_HARNESS_H
#define UFORM_TEST_MESH_HARNESS_H

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

static inline double now(void) { return uform_now_seconds(); }

/** How late past its 1 s timeout a bounded wait may end before a test calls it wrong: bounds here
 *  tell "ended at its deadline" from "waited for something else" (or hung), never how fast; CI runs
 *  the fake-NCCL roles under sanitizers on a loaded 2-core machine (load average 10 and more). */
#define SLACK_SECONDS 5.0

static inline int remove_entry(char const *path, struct stat const *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/** Removes a temporary directory the test made, with everything in it. */
static inline void remove_tree(char const *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

#endif

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

static inline bool buffers_alloc(uform_executor_t executor, size_t count, size_t bytes_each, buffers_t *buffers) {
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

static inline void buffers_free(buffers_t *buffers) {
    for (size_t d = 0; d < buffers->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)buffers->members[d].cu_context);
        cuda->MemFree((CUdeviceptr)buffers->pointers[d]);
        cuda->CtxPopCurrent(&popped);
    }
}

static inline bool copy(buffers_t const *buffers, size_t d, void *host, bool to_device) {
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
static inline uform_status_t fill_device(void *context, uform_device_slot_t const *slot) {
    fill_t const *fill = context;
    return uform_device_launch(slot, uform_kernel_fill_f32_k, fill->buffers->pointers[slot->device_index],
                               fill->buffers->count, (double)(fill->first_gpu + slot->device_index + 1));
}

static inline uint16_t bf16_of(float value) {
    uint32_t bits;
    memcpy(&bits, &value, 4);
    bits += 0x7FFF + ((bits >> 16) & 1);
    return (uint16_t)(bits >> 16);
}

static inline float float_of_bf16(uint16_t value) {
    uint32_t bits = (uint32_t)value << 16;
    float result;
    memcpy(&result, &bits, 4);
    return result;
}

/** Checks every element of every device's f32 buffer equals `expected`. */
static inline bool check_f32(buffers_t const *buffers, float expected) {
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
static inline bool check_f32_per_device(buffers_t const *buffers, float first, float second) {
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
static inline int exercise(uform_executor_t executor, uform_mesh_t mesh, char const *label, size_t count) {
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

static inline uform_gpu_class_t own_class_of(size_t ordinal) {
    uform_gpu_device_t devices[64];
    size_t count = 0;
    if (uform_gpu_devices(devices, 64, &count) != uform_status_ok_k) return uform_gpu_class_unknown_k;
    return ordinal < count ? devices[ordinal].gpu_class : uform_gpu_class_unknown_k;
}

/** One process over every GPU. */

/** The fake-NCCL roles of `child_main`, set by the program that has them (test_mesh_faults.c). */
static int (*mesh_fake_nccl_child)(char const *role, uform_executor_t executor, uform_mesh_options_t *options) = NULL;

/* ---- Multi-process shapes: the children ---- */

/** `--child ROLE INDEX COUNT DIRECTORY JOB ORDINAL`: one process of a shape. Exit 0 on success. */
static inline int child_main(char **argv) {
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
    if (strncmp(role, "fake-nccl", 9) == 0) // the fake-NCCL roles are test_mesh_faults.c's
        return mesh_fake_nccl_child ? mesh_fake_nccl_child(role, executor, &options) : 2;
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
static inline int run_children(char const *role, size_t count, char const *directory, char const *job, int expect_killed_last) {
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


/** What both mesh programs do first: NVLink multicast off in the test and in every process it
 *  starts, and a process started as `--child ROLE ...` runs that role (`*code` its exit status). */
static bool mesh_child_begin(int argc, char **argv, int *code) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!getenv("UFORM_ALLOW_MULTICAST")) setenv("NCCL_NVLS_ENABLE", "0", 1);
    if (argc > 2 && strcmp(argv[1], "--child") == 0) {
        *code = argc < 8 ? 2 : uform_cuda(&cuda) != uform_status_ok_k ? 3 : child_main(argv + 2);
        return true;
    }
    return false;
}

#endif // UFORM_WITH_CUDA

#endif // UFORM_TEST_MESH_HARNESS_H
