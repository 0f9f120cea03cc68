/**
 *  @file   call_times.h
 *  @brief  The benchmarks' record of every timed call, for the median and the 90th percentile next
 *          to the best call: a run whose average trails its best by far stalls in some calls, and the
 *          quantiles say whether in many or in a few.
 */
#ifndef UFORM_BENCH_CALL_TIMES_H
#define UFORM_BENCH_CALL_TIMES_H

#include <stdlib.h> // `qsort`, `realloc`, `free`
#include <time.h>   // `clock_gettime`

typedef struct call_times_t {
    double *seconds;
    size_t count, capacity;
} call_times_t;

/** Records one call; a failed allocation drops it (the quantiles then cover fewer calls). */
static inline void call_times_add(call_times_t *times, double seconds) {
    if (times->count == times->capacity) {
        size_t capacity = times->capacity ? times->capacity * 2 : 1024;
        double *grown = (double *)realloc(times->seconds, capacity * sizeof(double));
        if (!grown) return;
        times->seconds = grown, times->capacity = capacity;
    }
    times->seconds[times->count++] = seconds;
}

static inline int call_times_compare(void const *a, void const *b) {
    double x = *(double const *)a, y = *(double const *)b;
    return (x > y) - (x < y);
}

/** The `fraction` quantile of the calls (0.5: the median), nearest rank; 0 with no calls. Sorts. */
static inline double call_times_quantile(call_times_t *times, double fraction) {
    if (!times->count) return 0;
    qsort(times->seconds, times->count, sizeof(double), call_times_compare);
    size_t rank = (size_t)(fraction * (double)(times->count - 1) + 0.5);
    return times->seconds[rank < times->count ? rank : times->count - 1];
}

static inline void call_times_free(call_times_t *times) {
    free(times->seconds);
    *times = (call_times_t){0};
}

/** What `call_times_run` measured: wall seconds of the timed calls, the best, median and 90th
 *  percentile call, and the process's CPU seconds per call (every thread's). */
typedef struct call_summary_t {
    size_t calls;
    double elapsed, best, median, p90, cpu_per_call;
} call_summary_t;

static inline double call_times_clock(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/** Times `call(context)` as many times as fit in `seconds`, at least `min_calls` times; 0 as soon as a
 *  call returns non-zero (its error stays the engine's last message), else 1 and `summary`. */
static inline int call_times_run(int (*call)(void *context), void *context, double seconds, size_t min_calls,
                                 call_summary_t *summary) {
    call_times_t times = {0};
    double cpu_start = call_times_clock(CLOCK_PROCESS_CPUTIME_ID), start = call_times_clock(CLOCK_MONOTONIC);
    double elapsed, best = 1e30;
    size_t calls = 0;
    do {
        double before = call_times_clock(CLOCK_MONOTONIC);
        if (call(context) != 0) {
            call_times_free(&times);
            return 0;
        }
        double took = call_times_clock(CLOCK_MONOTONIC) - before;
        if (took < best) best = took;
        call_times_add(&times, took);
        ++calls;
        elapsed = call_times_clock(CLOCK_MONOTONIC) - start;
    } while (elapsed < seconds || calls < min_calls);
    double cpu = call_times_clock(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
    *summary = (call_summary_t){.calls = calls, .elapsed = elapsed, .best = best, .cpu_per_call = cpu / (double)calls};
    summary->median = call_times_quantile(&times, 0.5);
    summary->p90 = call_times_quantile(&times, 0.9);
    call_times_free(&times);
    return 1;
}

#endif
