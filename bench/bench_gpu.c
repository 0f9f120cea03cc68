/**
 *  @file   bench_gpu.c
 *  @brief  Per-call overhead of VRAM executors against the raw CUDA driver, side by side in one
 *          process on GPU 0, with PyTorch's numbers (taken by bench_torch_launch.py) beside them.
 *
 *  (a) deferred_launch: a deferred call whose device callback launches the engine's empty kernel,
 *      against a raw `cuLaunchKernel` of the same kernel on a stream of the same primary context;
 *      per launch over `--launches` launches, synchronised once at the end. The deferred calls
 *      cycle through `deferred_limit` outcomes, waiting for each before reusing it, as a real
 *      pipeline would. Measured with the context already current on the thread (as in a process
 *      that also uses the CUDA runtime), and again with none current (the executor then switches
 *      it in and out on every call).
 *  (b) blocking_round_trip: a blocking call launching the empty kernel and waiting for it, against
 *      raw `cuLaunchKernel` + `cuStreamSynchronize`.
 *  Each figure is the median of `--repeats` alternating runs, after a warm-up.
 *
 *  Prints `name: uform X us, raw Y us, ratio Z` lines; `--torch-us T` and `--torch-submit-us S`
 *  add the PyTorch comparisons. Without a GPU it prints why and exits 0.
 *
 *  Usage: bench_gpu [--launches N] [--round-trips N] [--repeats R] [--quick]
 *                   [--torch-us T] [--torch-submit-us S]
 */
#define _GNU_SOURCE
#include "cuda_driver.h"

#include <stdio.h>  // `printf`
#include <stdlib.h> // `exit`

#include "strict_number.h"
#include <string.h> // `strcmp`
#include <time.h>   // `clock_gettime`

#if UFORM_WITH_CUDA

static double now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static int compare_doubles(void const *a, void const *b) {
    double const x = *(double const *)a, y = *(double const *)b;
    return (x > y) - (x < y);
}

static double median(double *values, size_t count) {
    qsort(values, count, sizeof(double), compare_doubles);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

static uform_status_t launch_empty(void *context, uform_device_slot_t const *slot) {
    (void)context;
    return uform_device_launch(slot, uform_kernel_empty_k, 0, 0, 0);
}

typedef struct bench_t {
    uform_cuda_t const *cuda;
    uform_executor_t executor;
    CUcontext context;
    CUstream stream;
    CUfunction empty;
    uform_outcome_t *outcomes;
    size_t outcomes_count;
    int failures;
} bench_t;

#define BENCH_CU(bench, expression)                                                                \
    do {                                                                                           \
        CUresult bench_result_ = (expression);                                                     \
        if (bench_result_ != CUDA_SUCCESS) {                                                       \
            fprintf(stderr, "bench_gpu: %s returned CUresult %d\n", #expression, (int)bench_result_); \
            ++(bench)->failures;                                                                   \
        }                                                                                          \
    } while (0)

/** Seconds per deferred call, `count` calls then a drain. */
static double uform_deferred(bench_t *bench, size_t count) {
    uform_call_t const call = {.residency = uform_residency_vram_k, .device = launch_empty};
    double const start = now_seconds();
    for (size_t index = 0; index < count; ++index) {
        uform_outcome_t *outcome = &bench->outcomes[index % bench->outcomes_count];
        if (index >= bench->outcomes_count && uform_outcome_wait(outcome, -1) != uform_status_ok_k) ++bench->failures;
        if (uform_executor_call(bench->executor, &call, outcome) != uform_status_ok_k) ++bench->failures;
    }
    if (uform_executor_drain(bench->executor, uform_mood_parked_k) != uform_status_ok_k) ++bench->failures;
    return (now_seconds() - start) / (double)count;
}

static double raw_deferred(bench_t *bench, size_t count) {
    double const start = now_seconds();
    for (size_t index = 0; index < count; ++index)
        BENCH_CU(bench, bench->cuda->LaunchKernel(bench->empty, 1, 1, 1, 1, 1, 1, 0, bench->stream, NULL, NULL));
    BENCH_CU(bench, bench->cuda->StreamSynchronize(bench->stream));
    return (now_seconds() - start) / (double)count;
}

static double uform_blocking(bench_t *bench, size_t count) {
    uform_call_t const call = {.residency = uform_residency_vram_k, .device = launch_empty};
    double const start = now_seconds();
    for (size_t index = 0; index < count; ++index)
        if (uform_executor_call(bench->executor, &call, NULL) != uform_status_ok_k) ++bench->failures;
    return (now_seconds() - start) / (double)count;
}

static double raw_blocking(bench_t *bench, size_t count) {
    double const start = now_seconds();
    for (size_t index = 0; index < count; ++index) {
        BENCH_CU(bench, bench->cuda->LaunchKernel(bench->empty, 1, 1, 1, 1, 1, 1, 0, bench->stream, NULL, NULL));
        BENCH_CU(bench, bench->cuda->StreamSynchronize(bench->stream));
    }
    return (now_seconds() - start) / (double)count;
}

static void report(char const *name, double ours, double raw) {
    printf("%s: uform %.3f us, raw %.3f us, ratio %.3f\n", name, ours * 1e6, raw * 1e6, ours / raw);
}

int main(int argc, char **argv) {
    size_t launches = 100000, round_trips = 20000, repeats = 5;
    double torch_us = 0, torch_submit_us = 0;
    for (int index = 1; index < argc; ++index) {
        char const *flag = argv[index];
        char const *value = index + 1 < argc ? argv[index + 1] : NULL;
        bool ok = true, takes_value = true;
        if (!strcmp(flag, "--quick")) launches = 2000, round_trips = 500, repeats = 1, takes_value = false;
        else if (!strcmp(flag, "--launches")) ok = strict_count(value, 1, (size_t)1 << 40, false, &launches);
        else if (!strcmp(flag, "--round-trips")) ok = strict_count(value, 1, (size_t)1 << 40, false, &round_trips);
        else if (!strcmp(flag, "--repeats")) ok = strict_count(value, 1, 99, false, &repeats);
        else if (!strcmp(flag, "--torch-us")) ok = strict_real(value, 0, 1e9, &torch_us);
        else if (!strcmp(flag, "--torch-submit-us")) ok = strict_real(value, 0, 1e9, &torch_submit_us);
        else {
            fprintf(stderr, "bench_gpu: unknown argument '%s'\n", flag);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "bench_gpu: %s takes %s, not '%s'\n", flag,
                    strncmp(flag, "--torch", 7) ? "a positive whole number (repeats: at most 99)"
                                                : "a non-negative number of microseconds",
                    value ? value : "(nothing)");
            return 2;
        }
        index += takes_value;
    }
    if (uform_gpu_status() != uform_status_ok_k) {
        printf("bench_gpu: no GPU to measure (%s)\n", uform_error_message());
        return 0;
    }

    bench_t bench = {0};
    if (uform_cuda(&bench.cuda) != uform_status_ok_k) return 1;
    uform_cuda_t const *cuda = bench.cuda;
    int32_t const ordinals[] = {0};
    uform_vram_options_t const vram = {.devices = ordinals, .devices_count = 1};
    if (uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &bench.executor) != uform_status_ok_k) {
        fprintf(stderr, "bench_gpu: %s\n", uform_error_message());
        return 1;
    }
    uform_executor_description_t description;
    if (uform_executor_describe(bench.executor, &description) != uform_status_ok_k) {
        fprintf(stderr, "bench_gpu: %s\n", uform_error_message());
        return 1;
    }
    bench.outcomes_count = description.deferred_limit;
    bench.outcomes = calloc(bench.outcomes_count, sizeof(uform_outcome_t));

    // The raw side: the same primary context, its own non-blocking stream, the same kernel.
    CUmodule module = NULL;
    BENCH_CU(&bench, cuda->DevicePrimaryCtxRetain(&bench.context, 0));
    BENCH_CU(&bench, cuda->CtxSetCurrent(bench.context));
    BENCH_CU(&bench, cuda->StreamCreate(&bench.stream, CU_STREAM_NON_BLOCKING));
    BENCH_CU(&bench, cuda->ModuleLoadData(&module, uform_kernels_fatbin));
    BENCH_CU(&bench, cuda->ModuleGetFunction(&bench.empty, module, "uform_kernel_empty"));
    if (bench.failures || !bench.outcomes) return 1;

    char name[256] = "";
    if (uform_gpu_device_name(0, name, sizeof(name)) != uform_status_ok_k) snprintf(name, sizeof(name), "(unnamed)");
    printf("bench_gpu: GPU 0 %s, driver %d.%d, %zu launches and %zu round trips, median of %zu\n", name,
           cuda->driver_version / 1000, cuda->driver_version % 1000 / 10, launches, round_trips, repeats);

    // Warm-up: kernels loaded, scratch-free paths, clocks up.
    uform_deferred(&bench, 2000);
    raw_deferred(&bench, 2000);
    uform_blocking(&bench, 500);
    raw_blocking(&bench, 500);

    double deferred[99], deferred_raw[99], detached[99], blocking[99], blocking_raw[99];
    for (size_t repeat = 0; repeat < repeats; ++repeat) {
        deferred_raw[repeat] = raw_deferred(&bench, launches);
        deferred[repeat] = uform_deferred(&bench, launches);
        BENCH_CU(&bench, cuda->CtxSetCurrent(NULL));
        detached[repeat] = uform_deferred(&bench, launches);
        BENCH_CU(&bench, cuda->CtxSetCurrent(bench.context));
        blocking_raw[repeat] = raw_blocking(&bench, round_trips);
        blocking[repeat] = uform_blocking(&bench, round_trips);
    }
    double const raw_launch = median(deferred_raw, repeats), raw_trip = median(blocking_raw, repeats);
    double const uform_trip = median(blocking, repeats);
    report("deferred_launch", median(deferred, repeats), raw_launch);
    report("deferred_launch_no_current_context", median(detached, repeats), raw_launch);
    report("blocking_round_trip", uform_trip, raw_trip);
    if (torch_submit_us > 0)
        printf("torch_submit: uform %.3f us, torch %.3f us, ratio %.3f\n", median(deferred, repeats) * 1e6,
               torch_submit_us, median(deferred, repeats) * 1e6 / torch_submit_us);
    if (torch_us > 0)
        printf("torch_round_trip: uform %.3f us, torch %.3f us, ratio %.3f\n", uform_trip * 1e6, torch_us,
               uform_trip * 1e6 / torch_us);

    BENCH_CU(&bench, cuda->ModuleUnload(module));
    BENCH_CU(&bench, cuda->StreamDestroy(bench.stream));
    BENCH_CU(&bench, cuda->CtxSetCurrent(NULL));
    BENCH_CU(&bench, cuda->DevicePrimaryCtxRelease(0));
    uform_executor_free(bench.executor);
    free(bench.outcomes);
    if (bench.failures) fprintf(stderr, "bench_gpu: %d calls failed\n", bench.failures);
    return bench.failures ? 1 : 0;
}

#else

int main(void) {
    printf("bench_gpu: built without GPU support, nothing to measure\n");
    return 0;
}

#endif
