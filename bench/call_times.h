/**
 *  @file   call_times.h
 *  @brief  The benchmarks' record of every timed call, for the median and the 90th percentile next
 *          to the best call: a run whose average trails its best by far stalls in some calls, and the
 *          quantiles say whether in many or in a few.
 */
#ifndef UFORM_BENCH_CALL_TIMES_H
#define UFORM_BENCH_CALL_TIMES_H

#include <stdio.h>  // `fprintf`
#include <stdlib.h> // `qsort`, `realloc`, `free`, `setenv`
#include <string.h> // `strchr`, `memcpy`
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

/** An A/B of one environment variable inside one run (`--ab NAME=A,B`): the calls alternate between
 *  NAME=A and NAME=B (set in the caller's thread before each call, while no call runs), so both
 *  variants meet the same neighbours on a shared machine, where runs a minute apart differ by up to
 *  4x. Suits switches the engine reads as a call begins (UFORM_ROW_TILES_THREADS, UFORM_MLP_PLANES). */
typedef struct call_ab_t {
    char name[64], values[2][64];
    call_times_t times[2];
} call_ab_t;

/** Parses `NAME=A,B`; 0 where it is not of that form or a part is too long. */
static inline int call_ab_parse(char const *spec, call_ab_t *ab) {
    char const *equals = strchr(spec, '='), *comma = equals ? strchr(equals, ',') : NULL;
    if (!equals || !comma || equals == spec || (size_t)(equals - spec) >= sizeof ab->name ||
        (size_t)(comma - equals - 1) >= sizeof ab->values[0] || strlen(comma + 1) >= sizeof ab->values[1])
        return 0;
    *ab = (call_ab_t){0};
    memcpy(ab->name, spec, (size_t)(equals - spec));
    memcpy(ab->values[0], equals + 1, (size_t)(comma - equals - 1));
    strcpy(ab->values[1], comma + 1);
    return 1;
}

/** Alternates the variants call by call for `seconds`, each at least `min_calls` times; 0 as soon as
 *  a call fails. The variable is left unset. */
static inline int call_ab_run(int (*call)(void *context), void *context, call_ab_t *ab, double seconds,
                              size_t min_calls) {
    double start = call_times_clock(CLOCK_MONOTONIC);
    for (size_t i = 0;; ++i) {
        size_t variant = i % 2;
        if (setenv(ab->name, ab->values[variant], 1) != 0) return 0;
        double before = call_times_clock(CLOCK_MONOTONIC);
        int failed = call(context) != 0;
        call_times_add(&ab->times[variant], call_times_clock(CLOCK_MONOTONIC) - before);
        if (failed) return unsetenv(ab->name), 0;
        if (variant == 1 && ab->times[1].count >= min_calls && call_times_clock(CLOCK_MONOTONIC) - start >= seconds) break;
    }
    unsetenv(ab->name);
    return 1;
}

/** One line per variant (calls, best, first quartile, median, in ms), then the ratio of the medians. */
static inline void call_ab_print(FILE *out, char const *what, call_ab_t *ab) {
    double medians[2];
    for (size_t v = 0; v < 2; ++v) {
        double best = call_times_quantile(&ab->times[v], 0), quarter = call_times_quantile(&ab->times[v], 0.25);
        medians[v] = call_times_quantile(&ab->times[v], 0.5);
        fprintf(out, "%s %s=%s: %zu calls, best %.3f ms, p25 %.3f ms, median %.3f ms\n", what, ab->name, ab->values[v],
                ab->times[v].count, best * 1e3, quarter * 1e3, medians[v] * 1e3);
    }
    fprintf(out, "%s median %s=%s / %s=%s: %.3f\n", what, ab->name, ab->values[0], ab->name, ab->values[1],
            medians[1] > 0 ? medians[0] / medians[1] : 0.0);
    call_times_free(&ab->times[0]), call_times_free(&ab->times[1]);
}

#endif
