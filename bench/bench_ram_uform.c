/**
 *  @file   bench_ram_uform.c
 *  @brief  bench_ram's UForm child: a RAM executor's fork-join rounds (blocking calls, THREADS
 *          schedule, in the mood asked for), the memory-bound sum over the same executor, and the
 *          cores the idle executor burns afterwards. See bench_ram.c for the whole benchmark.
 */
#define _GNU_SOURCE // `sched_setaffinity`, `CPU_SET`
#include "bench_ram.h"
#include "internal.h" // `uform_host_join_limits`: the engine's rounds, chosen per child

#include <errno.h>  // `errno`
#include <sched.h>  // `sched_setaffinity`
#include <stdio.h>  // `fprintf`
#include <string.h> // `strerror`, `memset`

static double process_cpu_seconds(void) {
    struct timespec time;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
    return (double)time.tv_sec + (double)time.tv_nsec * 1e-9;
}

/** @brief Per-thread partial sums, a cache line pair apart. */
typedef struct partial_t {
    _Alignas(128) double value;
} partial_t;

static void uform_empty(void *context, size_t task, size_t thread, size_t domain) {
    (void)context, (void)task, (void)thread, (void)domain;
}

typedef struct uform_sum_t {
    float *values;
    size_t floats;
    partial_t *partials;
} uform_sum_t;

static void uform_fill_block(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    uform_sum_t *sum = context;
    size_t begin = task * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
    if (end > sum->floats) end = sum->floats;
    block_fill(sum->values + begin, end - begin);
}

static void uform_sum_block(void *context, size_t task, size_t thread, size_t domain) {
    (void)domain;
    uform_sum_t *sum = context;
    size_t begin = task * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
    if (end > sum->floats) end = sum->floats;
    sum->partials[thread].value += block_sum(sum->values + begin, end - begin);
}

static int uform_fail_report(char const *what, uform_status_t status) {
    fprintf(stderr, "bench_ram: uform: %s: %s: %s\n", what, uform_status_name(status), uform_error_message());
    return 1;
}

/** `--join`: which of the engine's joins (src/host.c, `host_join_t`) the executor's rounds use, as
 *  limits on the worker count: SHARED up to the first, SLOTS up to the second, LINES above. */
static struct {
    char const *name;
    size_t shared_workers, slot_workers;
} const bench_joins[] = {
    {"default", UFORM_HOST_SHARED_WORKERS_DEFAULT, UFORM_HOST_SLOT_WORKERS_DEFAULT},
    {"legacy", 2, 0},                   // before the slots: SHARED up to 3 threads, LINES above
    {"shared", BENCH_MAX_THREADS, 0},   // every worker counts in on the publish line
    {"slots", 0, BENCH_MAX_THREADS},    // a slot line per worker
    {"lines", 0, 0},                    // woken on the publish line, answering on their own lines
};

bool bench_join_known(char const *name) {
    for (size_t i = 0; i < sizeof bench_joins / sizeof bench_joins[0]; ++i)
        if (name && !strcmp(name, bench_joins[i].name)) return true;
    return false;
}

int child_uform(size_t threads, config_t const *config, double *round_ns, double *gbps, double *idle) {
    for (size_t i = 0; i < sizeof bench_joins / sizeof bench_joins[0]; ++i)
        if (!strcmp(config->join, bench_joins[i].name))
            uform_host_join_limits(bench_joins[i].shared_workers, bench_joins[i].slot_workers);
    uform_executor_t executor = NULL;
    uform_status_t status = uform_executor_for_ram(NULL, threads, 0, &executor);
    if (status != uform_status_ok_k) return uform_fail_report("uform_executor_for_ram", status);

    uform_executor_description_t description;
    if ((status = uform_executor_describe(executor, &description)) != uform_status_ok_k ||
        description.threads_count != threads) {
        if (status == uform_status_ok_k)
            fprintf(stderr, "bench_ram: uform: asked for %zu threads, the executor has %zu\n", threads,
                    description.threads_count);
        else uform_fail_report("uform_executor_describe", status);
        uform_executor_free(executor);
        return 1;
    }

    // The caller is thread 0 of every blocking call; it sits on thread 0's core, as OpenMP's
    // OMP_PROC_BIND puts its primary thread on the first place.
    int32_t core = -1, node = -1;
    if ((status = uform_executor_thread_placement(executor, 0, &core, &node)) == uform_status_ok_k && core >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)core, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            fprintf(stderr, "bench_ram: uform: could not pin the caller to core %d: %s\n", (int)core, strerror(errno));
    }
    else fprintf(stderr, "bench_ram: uform: thread 0's placement is unknown (%s): the caller stays unpinned\n",
                 uform_status_name(status));

    int code = 0;
    if ((status = uform_executor_drain(executor, config->mood)) != uform_status_ok_k) {
        code = uform_fail_report("uform_executor_drain", status);
        goto done;
    }

    // Fork-join rounds.
    uform_call_t round = {.schedule = uform_schedule_threads_k, .task = uform_empty};
    size_t warmup = config->rounds / 10 + 1;
    for (size_t i = 0; i < warmup; ++i)
        if ((status = uform_executor_call(executor, &round, NULL)) != uform_status_ok_k) {
            code = uform_fail_report("uform_executor_call", status);
            goto done;
        }
    double samples[64];
    size_t repetitions = config->repetitions < 64 ? config->repetitions : 64;
    for (size_t repetition = 0; repetition < repetitions; ++repetition) {
        double start = now_seconds();
        for (size_t i = 0; i < config->rounds; ++i)
            if ((status = uform_executor_call(executor, &round, NULL)) != uform_status_ok_k) {
                code = uform_fail_report("uform_executor_call", status);
                goto done;
            }
        samples[repetition] = (now_seconds() - start) * 1e9 / (double)config->rounds;
    }
    *round_ns = median(samples, repetitions);

    // The memory-bound sum.
    if (config->bytes) {
        uform_sum_t sum = {.floats = config->bytes / sizeof(float)};
        size_t blocks = (sum.floats + BENCH_BLOCK_FLOATS - 1) / BENCH_BLOCK_FLOATS;
        sum.values = buffer_map(sum.floats * sizeof(float));
        sum.partials = aligned_alloc(_Alignof(partial_t), threads * sizeof *sum.partials); // a multiple of it
        if (sum.partials) memset(sum.partials, 0, threads * sizeof *sum.partials);
        if (!sum.values || !sum.partials) {
            fprintf(stderr, "bench_ram: uform: cannot allocate %zu bytes\n", config->bytes);
            code = 1;
        }
        uform_call_t fill = {.schedule = uform_schedule_static_k, .tasks = blocks, .task = uform_fill_block, .context = &sum};
        uform_call_t read = {.schedule = uform_schedule_static_k, .tasks = blocks, .task = uform_sum_block, .context = &sum};
        if (!code && (status = uform_executor_call(executor, &fill, NULL)) != uform_status_ok_k)
            code = uform_fail_report("uform_executor_call (first touch)", status);
        size_t sum_repetitions = config->sum_repetitions < 64 ? config->sum_repetitions : 64;
        for (size_t repetition = 0; !code && repetition <= sum_repetitions; ++repetition) {
            for (size_t t = 0; t < threads; ++t) sum.partials[t].value = 0;
            double start = now_seconds();
            if ((status = uform_executor_call(executor, &read, NULL)) != uform_status_ok_k) {
                code = uform_fail_report("uform_executor_call (sum)", status);
                break;
            }
            double seconds = now_seconds() - start;
            double total = 0;
            for (size_t t = 0; t < threads; ++t) total += sum.partials[t].value;
            if (total != (double)sum.floats) {
                fprintf(stderr, "bench_ram: uform: the sum is %.1f, expected %zu\n", total, sum.floats);
                code = 1;
            }
            if (repetition) samples[repetition - 1] = (double)(sum.floats * sizeof(float)) / seconds * 1e-9;
        }
        if (!code) *gbps = median(samples, sum_repetitions);
        if (sum.values) munmap(sum.values, sum.floats * sizeof(float));
        free(sum.partials);
    }

    // What the idle executor burns in its mood: after a 50 ms settle (a PARKED worker spins a
    // little before it sleeps), cores of CPU time per second of wall time over 200 ms.
    nanosleep(&(struct timespec) {.tv_nsec = 50000000}, NULL);
    double const cpu_before = process_cpu_seconds(), wall_before = now_seconds();
    nanosleep(&(struct timespec) {.tv_nsec = 200000000}, NULL);
    *idle = (process_cpu_seconds() - cpu_before) / (now_seconds() - wall_before);

done:
    uform_executor_free(executor);
    return code;
}
