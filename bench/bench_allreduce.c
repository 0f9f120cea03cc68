/**
 *  @file   bench_allreduce.c
 *  @brief  All-reduce bus bandwidth through a mesh against NCCL called directly on the same
 *          communicators and streams, f32, 1 MiB to 1 GiB in powers of 4; and bootstrap times.
 *
 *      bench_allreduce [--quick] [--torch FILE]
 *
 *  Shapes, with G GPUs: one process over all G (when G >= 2), then G processes over one GPU each
 *  (children started by posix_spawn of this program), then two processes once more for their
 *  bootstrap time alone when G > 2. Without a GPU it says so and exits 0.
 *
 *  Method, per size, the same for every column: warm-up (3 calls), then the best of 3 trials of N
 *  back-to-back asynchronous all-reduces (N from 40 at 1 MiB down to 8 at 1 GiB) followed by ONE
 *  wait, timed on the host from the first submission to the end of that wait, processes aligned
 *  by a one-element all-reduce before each trial:
 *  - mesh: N deferred `uform_mesh_all_reduce` calls (each with its outcome), then one
 *    `uform_outcome_wait` on the last (calls finish in order), in the executor's default mood
 *    (PARKED: the wait sleeps between polls);
 *  - mesh_spin: the same after `uform_executor_drain(SPINNING)` (the wait spins, as a CUDA
 *    synchronisation does by default);
 *  - nccl: N groups of `ncclAllReduce` over the mesh's (non-blocking) communicators on the
 *    executor's streams, then one `cuStreamSynchronize` per stream;
 *  - nccl_blk (one process over every GPU only): the same on blocking communicators this benchmark
 *    creates, as torch.distributed does: tells what NCCL's non-blocking mode itself costs;
 *  - torch (`--torch FILE`, lines "torch_busbw BYTES GBPS" from bench_allreduce_torch.py): N
 *    `all_reduce(async_op=True)`, then one `wait()` and `torch.cuda.synchronize()`.
 *  Bus bandwidth is bytes / time * 2 (n - 1) / n, as nccl-tests reports it.
 *
 *  NVLink multicast stays off: NCCL_NVLS_ENABLE=0 is set unless UFORM_ALLOW_MULTICAST=1.
 */
#include "cuda_driver.h"
#include "nccl_loader.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#if UFORM_WITH_CUDA

#define MAX_SIZES 8

static uform_cuda_t const *cuda;
static int quick = 0;
static double torch_busbw[MAX_SIZES];

static size_t sizes[MAX_SIZES];
static size_t sizes_count = 0;

static void pick_sizes(void) {
    for (size_t bytes = (size_t)1 << 20; bytes <= ((size_t)1 << 30) && sizes_count < MAX_SIZES; bytes *= 4) {
        if (quick && bytes > ((size_t)16 << 20)) break;
        sizes[sizes_count++] = bytes;
    }
}

static int iterations_for(size_t bytes) {
    if (quick) return 3;
    if (bytes <= ((size_t)4 << 20)) return 40;
    if (bytes <= ((size_t)64 << 20)) return 20;
    if (bytes <= ((size_t)256 << 20)) return 12;
    return 8;
}

static void read_torch(char const *path) {
    FILE *file = fopen(path, "r");
    if (!file) return;
    char line[256];
    while (fgets(line, sizeof line, file)) {
        unsigned long long bytes;
        double busbw;
        if (sscanf(line, "torch_busbw %llu %lf", &bytes, &busbw) != 2) continue;
        for (size_t i = 0; i < sizes_count; ++i)
            if (sizes[i] == bytes) torch_busbw[i] = busbw;
    }
    fclose(file);
}

typedef struct run_t {
    uform_executor_t executor;
    uform_mesh_t mesh;
    uform_mesh_description_t description;
    uform_vram_member_t const *members;
    size_t devices;
    uint64_t buffers[16], barrier[16];
    uform_nccl_t const *nccl;
    uform_nccl_comm_t const *comms;
    uform_nccl_comm_t blocking[16]; /**< Blocking communicators (one process over every GPU only). */
    bool has_blocking;
} run_t;

static int fail(char const *what) {
    fprintf(stderr, "bench_allreduce: %s failed: %s\n", what, uform_error_message());
    return 1;
}

static double wall_seconds(void);

static int run_open(run_t *run, int32_t const *ordinals, size_t count, uform_mesh_options_t const *options,
                    double start_at) {
    memset(run, 0, sizeof *run);
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = count};
    if (uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &run->executor) != uform_status_ok_k)
        return fail("uform_executor_for_vram");
    double wait = start_at - wall_seconds();
    if (wait > 0 && wait < 60) usleep((useconds_t)(wait * 1e6));
    if (uform_mesh_bootstrap(run->executor, options, &run->mesh) != uform_status_ok_k) return fail("uform_mesh_bootstrap");
    if (uform_mesh_describe(run->mesh, &run->description) != uform_status_ok_k) return fail("uform_mesh_describe");
    run->devices = uform_vram_members(run->executor, &run->members);
    uform_nccl(&run->nccl);
    uform_mesh_comms(run->mesh, &run->comms);
    size_t largest = sizes[sizes_count - 1];
    for (size_t d = 0; d < run->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)run->members[d].cu_context);
        CUdeviceptr pointer = 0, barrier = 0;
        CUresult result = cuda->MemAlloc(&pointer, largest);
        if (result == CUDA_SUCCESS) result = cuda->MemAlloc(&barrier, 256);
        if (result == CUDA_SUCCESS) result = cuda->MemsetD32Async(pointer, 0, largest / 4, (CUstream)run->members[d].stream);
        if (result == CUDA_SUCCESS) result = cuda->MemsetD32Async(barrier, 0, 64, (CUstream)run->members[d].stream);
        if (result == CUDA_SUCCESS) result = cuda->StreamSynchronize((CUstream)run->members[d].stream);
        cuda->CtxPopCurrent(&popped);
        if (result != CUDA_SUCCESS) return fprintf(stderr, "bench_allreduce: cannot allocate %zu bytes\n", largest), 1;
        run->buffers[d] = pointer, run->barrier[d] = barrier;
    }
    return 0;
}

static void run_close(run_t *run) {
    for (size_t d = 0; d < run->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)run->members[d].cu_context);
        cuda->MemFree((CUdeviceptr)run->buffers[d]);
        cuda->MemFree((CUdeviceptr)run->barrier[d]);
        cuda->CtxPopCurrent(&popped);
    }
    uform_mesh_free(run->mesh);
    uform_executor_free(run->executor);
}

static int barrier(run_t *run) {
    return uform_mesh_all_reduce(run->mesh, run->barrier, 1, uform_dtype_f32_k, NULL) == uform_status_ok_k ? 0 : 1;
}

/** Seconds per all-reduce through the mesh: deferred calls back to back, then one wait (on the
 *  last outcome: calls on an executor finish in submission order). */
static double time_mesh(run_t *run, size_t count, int iterations, uform_outcome_t *outcomes) {
    double start = uform_now_seconds();
    for (int i = 0; i < iterations; ++i)
        if (uform_mesh_all_reduce(run->mesh, run->buffers, count, uform_dtype_f32_k, &outcomes[i]) != uform_status_ok_k)
            return -1;
    if (uform_outcome_wait(&outcomes[iterations - 1], -1) != uform_status_ok_k) return -1;
    double seconds = (uform_now_seconds() - start) / iterations;
    for (int i = 0; i < iterations; ++i)
        if (uform_outcome_poll(&outcomes[i]) != uform_status_ok_k) return -1;
    return seconds;
}

/** Sets the mood every later wait of the executor takes (a drain adopts it). */
static int set_mood(run_t *run, uform_mood_t mood) {
    return uform_executor_drain(run->executor, mood) == uform_status_ok_k ? 0 : 1;
}

/** One process over every GPU: blocking communicators of its own, as torch.distributed makes. */
static void open_blocking(run_t *run) {
    uform_nccl_unique_id_t id;
    if (run->devices < 2 || run->description.gpus_per_colocated_domain != run->devices ||
        run->nccl->GetUniqueId(&id) != uform_nccl_success_k)
        return;
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_NONBLOCKING;
    config.blocking = 1;
    bool ok = run->nccl->GroupStart() == uform_nccl_success_k;
    for (size_t d = 0; ok && d < run->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)run->members[d].cu_context);
        ok = run->nccl->CommInitRankConfig(&run->blocking[d], (int)run->devices, id, (int)d, &config) ==
             uform_nccl_success_k;
        cuda->CtxPopCurrent(&popped);
    }
    ok = run->nccl->GroupEnd() == uform_nccl_success_k && ok;
    run->has_blocking = ok;
    if (!ok) printf("bench_allreduce: blocking communicators could not be made; no nccl_blk column\n");
}

static void close_blocking(run_t *run) {
    for (size_t d = 0; run->has_blocking && d < run->devices; ++d) run->nccl->CommDestroy(run->blocking[d]);
    run->has_blocking = false;
}

/** Waits until no communicator reports work in progress (NCCL may connect lazily). */
static int settle(run_t *run) {
    for (int spins = 0; spins < 10000000; ++spins) {
        bool busy = false;
        for (size_t d = 0; d < run->devices; ++d) {
            uform_nccl_result_t error = uform_nccl_success_k;
            run->nccl->CommGetAsyncError(run->comms[d], &error);
            if (error == uform_nccl_in_progress_k) busy = true;
            else if (error != uform_nccl_success_k) return 1;
        }
        if (!busy) return 0;
    }
    return 1;
}

/** Seconds per all-reduce through NCCL directly on the executor's streams: the mesh's
 *  communicators, or (`blocking`) the benchmark's blocking ones; groups back to back, then one
 *  synchronisation per stream. */
static double time_nccl(run_t *run, size_t count, int iterations, bool blocking) {
    double start = uform_now_seconds();
    for (int i = 0; i < iterations; ++i) {
        run->nccl->GroupStart();
        for (size_t d = 0; d < run->devices; ++d) {
            void *buffer = (void *)(uintptr_t)run->buffers[d];
            run->nccl->AllReduce(buffer, buffer, count, uform_nccl_float32_k, uform_nccl_sum_k,
                                 blocking ? run->blocking[d] : run->comms[d], run->members[d].stream);
        }
        uform_nccl_result_t result = run->nccl->GroupEnd();
        if (result == uform_nccl_in_progress_k && settle(run)) return -1;
        if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k) return -1;
    }
    for (size_t d = 0; d < run->devices; ++d) {
        CUcontext popped;
        cuda->CtxPushCurrent((CUcontext)run->members[d].cu_context);
        CUresult result = cuda->StreamSynchronize((CUstream)run->members[d].stream);
        cuda->CtxPopCurrent(&popped);
        if (result != CUDA_SUCCESS) return -1;
    }
    return (uform_now_seconds() - start) / iterations;
}

static int measure(run_t *run, char const *shape) {
    bool report = run->description.host_domain_index == 0;
    size_t ranks = run->description.gpus_per_colocated_domain;
    double factor = 2.0 * (double)(ranks - 1) / (double)ranks;
    uform_outcome_t outcomes[64];
    if (report) {
        printf("\n%s: %zu ranks (%zu per process), f32, bus bandwidth in GB/s (best of 3 trials)\n", shape, ranks,
               run->description.gpus_per_host_domain);
        printf("%10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "bytes", "mesh_us", "mesh", "mesh_spin", "nccl",
               "nccl_blk", "torch", "mesh/nccl", "spin/torch");
    }
    for (size_t s = 0; s < sizes_count; ++s) {
        size_t bytes = sizes[s], count = bytes / sizeof(float);
        int iterations = iterations_for(bytes);
        if (barrier(run)) return fail("barrier");
        if (time_mesh(run, count, 3, outcomes) < 0 || time_nccl(run, count, 3, false) < 0 ||
            (run->has_blocking && time_nccl(run, count, 3, true) < 0))
            return fail("warm-up");
        double mesh = 1e9, spin = 1e9, nccl = 1e9, blocking = 1e9;
        for (int trial = 0; trial < 3; ++trial) {
            if (barrier(run) || set_mood(run, uform_mood_parked_k)) return fail("barrier");
            double t = time_mesh(run, count, iterations, outcomes);
            if (t < 0) return fail("mesh all-reduce");
            if (t < mesh) mesh = t;
            if (barrier(run) || set_mood(run, uform_mood_spinning_k)) return fail("barrier");
            t = time_mesh(run, count, iterations, outcomes);
            if (set_mood(run, uform_mood_parked_k) || t < 0) return fail("mesh all-reduce, spinning");
            if (t < spin) spin = t;
            if (barrier(run)) return fail("barrier");
            t = time_nccl(run, count, iterations, false);
            if (t < 0) return fail("NCCL all-reduce");
            if (t < nccl) nccl = t;
            if (!run->has_blocking) continue;
            if (barrier(run)) return fail("barrier");
            t = time_nccl(run, count, iterations, true);
            if (t < 0) return fail("NCCL all-reduce, blocking communicators");
            if (t < blocking) blocking = t;
        }
        double mesh_busbw = (double)bytes / mesh * factor / 1e9, nccl_busbw = (double)bytes / nccl * factor / 1e9;
        double spin_busbw = (double)bytes / spin * factor / 1e9;
        if (report) {
            char torch[32] = "-", blocked[32] = "-", versus[32] = "-";
            if (torch_busbw[s] > 0) snprintf(torch, sizeof torch, "%.1f", torch_busbw[s]);
            if (torch_busbw[s] > 0) snprintf(versus, sizeof versus, "%.3f", spin_busbw / torch_busbw[s]);
            if (run->has_blocking) snprintf(blocked, sizeof blocked, "%.1f", (double)bytes / blocking * factor / 1e9);
            printf("%10zu %10.1f %10.1f %10.1f %10.1f %10s %10s %10.3f %10s\n", bytes, mesh * 1e6, mesh_busbw,
                   spin_busbw, nccl_busbw, blocked, torch, mesh_busbw / nccl_busbw, versus);
            printf("allreduce_busbw shape=%s ranks=%zu bytes=%zu mesh=%.2f mesh_spin=%.2f nccl=%.2f nccl_blocking=%s "
                   "torch=%s ratio=%.4f spin_vs_torch=%s\n",
                   shape, ranks, bytes, mesh_busbw, spin_busbw, nccl_busbw, blocked, torch, mesh_busbw / nccl_busbw,
                   versus);
        }
    }
    return 0;
}

static void print_timings(run_t *run, char const *shape) {
    uform_mesh_timings_t timings;
    uform_mesh_timings(run->mesh, &timings);
    printf("bootstrap shape=%s process=%zu ranks=%zu: rendezvous %.1f ms + NCCL id %.1f ms = %.1f ms without NCCL "
           "init; NCCL init %.1f ms\n",
           shape, run->description.host_domain_index, run->description.gpus_per_colocated_domain,
           timings.rendezvous_seconds * 1e3, timings.blob_seconds * 1e3,
           (timings.rendezvous_seconds + timings.blob_seconds) * 1e3, timings.nccl_seconds * 1e3);
}

static double wall_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

/** `--child ROLE RANK COUNT DIRECTORY JOB TORCH START [--quick]`: one process over GPU RANK. Every
 *  child creates its executor, then waits for the wall-clock time START, so the bootstrap times
 *  measure the exchange rather than the skew of the processes' own start-up. */
static int child(char **argv) {
    char const *role = argv[0];
    size_t rank = strtoull(argv[1], NULL, 10), count = strtoull(argv[2], NULL, 10);
    if (argv[5][0]) read_torch(argv[5]);
    double start_at = strtod(argv[6], NULL);
    int32_t ordinal = (int32_t)rank;
    uform_mesh_options_t options = {.host_domain_index = rank, .host_domain_count = count, .directory = argv[3],
                                    .job = argv[4], .timeout_seconds = 120};
    run_t run;
    if (run_open(&run, &ordinal, 1, &options, start_at)) return 1;
    print_timings(&run, role);
    int failed = 0;
    if (strcmp(role, "processes") == 0) failed = measure(&run, "one process per GPU");
    run_close(&run);
    return failed;
}

static int spawn(char const *role, size_t count, char const *directory, char const *job, char const *torch) {
    pid_t pids[16];
    char start_at[32];
    snprintf(start_at, sizeof start_at, "%.3f", wall_seconds() + 5.0); // past every child's CUDA start-up
    for (size_t i = 0; i < count; ++i) {
        char rank[24], total[24];
        snprintf(rank, sizeof rank, "%zu", i);
        snprintf(total, sizeof total, "%zu", count);
        char *args[] = {"/proc/self/exe", "--child", (char *)role, rank, total, (char *)directory, (char *)job,
                        (char *)(torch ? torch : ""), start_at, quick ? "--quick" : NULL, NULL};
        fflush(NULL);
        if (posix_spawn(&pids[i], "/proc/self/exe", NULL, NULL, args, environ) != 0) return 1;
    }
    int failed = 0;
    for (size_t i = 0; i < count; ++i) {
        int status = 0;
        while (waitpid(pids[i], &status, 0) < 0 && errno == EINTR) {}
        failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!getenv("UFORM_ALLOW_MULTICAST")) setenv("NCCL_NVLS_ENABLE", "0", 1);
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
    pick_sizes();
    if (argc >= 9 && strcmp(argv[1], "--child") == 0) {
        if (uform_cuda(&cuda) != uform_status_ok_k) return 3;
        return child(argv + 2);
    }
    char const *torch = NULL;
    for (int i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "--torch") == 0) torch = argv[i + 1];
    if (torch) read_torch(torch);
    size_t gpus = 0;
    if (uform_gpu_status() != uform_status_ok_k || uform_gpu_devices(NULL, 0, &gpus) != uform_status_ok_k || !gpus) {
        printf("bench_allreduce: no GPU (%s); nothing to measure\n", uform_error_message());
        return 0;
    }
    char name[256] = "";
    if (uform_gpu_device_name(0, name, sizeof name) != uform_status_ok_k) snprintf(name, sizeof name, "(unnamed)");
    if (strstr(name, "UForm Fake GPU") && !getenv("UFORM_BENCH_ON_FAKE")) {
        printf("bench_allreduce: the fake test driver; nothing to measure (UFORM_BENCH_ON_FAKE=1 runs the code "
               "paths anyway, with meaningless figures)\n");
        return 0;
    }
    if (uform_nccl(NULL) != uform_status_ok_k) {
        printf("bench_allreduce: %s\n", uform_error_message());
        return 1;
    }
    if (gpus > 16) gpus = 16;
    if (uform_cuda(&cuda) != uform_status_ok_k) return 1;
    printf("bench_allreduce: %zu x %s, NCCL_NVLS_ENABLE=%s\n", gpus, name, getenv("NCCL_NVLS_ENABLE"));
    int failed = 0;
    if (gpus >= 2) {
        int32_t ordinals[16];
        for (size_t i = 0; i < gpus; ++i) ordinals[i] = (int32_t)i;
        run_t run;
        failed |= run_open(&run, ordinals, gpus, NULL, 0);
        if (!failed) {
            print_timings(&run, "one-process");
            open_blocking(&run);
            failed |= measure(&run, "one process over every GPU");
            close_blocking(&run);
            run_close(&run);
        }
        char directory[] = "/tmp/uform-bench-XXXXXX";
        if (!mkdtemp(directory)) return 1;
        failed |= spawn("processes", gpus, directory, "processes", torch) != 0;
        if (gpus > 2) failed |= spawn("bootstrap", 2, directory, "bootstrap", NULL) != 0;
    }
    else printf("bench_allreduce: one GPU; an all-reduce needs two\n");
    return failed;
}

#else

int main(void) {
    printf("bench_allreduce: built without CUDA; nothing to measure\n");
    return 0;
}

#endif
