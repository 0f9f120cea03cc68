/**
 *  @file   call_times.h
 *  @brief  The benchmarks' record of every timed call, for the median and the 90th percentile next
 *          to the best call: a run whose average trails its best by far stalls in some calls, and the
 *          quantiles say whether in many or in a few.
 */
#ifndef UFORM_BENCH_CALL_TIMES_H
#define UFORM_BENCH_CALL_TIMES_H

#include <stdlib.h> // `qsort`, `realloc`, `free`

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

#endif
