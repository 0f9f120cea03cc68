/**
 *  @file   phases.c
 *  @brief  What the forward passes (text and image) share to walk their phases together: the
 *          barrier between phases and the GEMM tile plan each phase's threads take tiles from.
 */
#define _GNU_SOURCE
#include "kernels/kernels.h"

#include "internal.h" // `uform_futex_wait`, `uform_spin_pause`

#include <limits.h>  // `INT_MAX`
#include <pthread.h> // `pthread_mutex_t`
#include <sched.h>   // `sched_yield`
#include <stdio.h>   // `fprintf`
#include <stdlib.h>  // `qsort_r`, `getenv`, `strtoul`
#include <string.h>  // `strcmp`

/** How long a thread spins at a barrier before it sleeps on the futex, unless UFORM_PHASE_SPIN_US
 *  says otherwise (microseconds, 0 to 100,000). */
#define UFORM_PHASE_SPIN_SECONDS 100e-6
/** How long a spin at a barrier runs before it yields its core at every look at the clock. */
#define UFORM_PHASE_SPIN_YIELD_AFTER 20e-6
/** Pauses between two looks at the clock while spinning at a barrier. */
#define UFORM_PHASE_SPIN_CLOCK_EVERY 64u
/** Rows per GEMM tile when rows are many; up to four times this while every thread keeps two tiles. */
#define UFORM_GEMM_TILE_ROWS 128

static double phase_spin_seconds = UFORM_PHASE_SPIN_SECONDS;
static pthread_once_t phase_spin_once = PTHREAD_ONCE_INIT;

static void phase_spin_init(void) {
    char const *value = getenv("UFORM_PHASE_SPIN_US");
    char *end = NULL;
    unsigned long micros = value && *value ? strtoul(value, &end, 10) : 0;
    if (end && *end == 0 && micros <= 100000) phase_spin_seconds = (double)micros * 1e-6;
}

double uform_phase_spin_seconds(void) {
    pthread_once(&phase_spin_once, phase_spin_init);
    return phase_spin_seconds;
}

void uform_phase_barrier_wait(uform_phase_barrier_t *barrier, size_t threads) {
    if (threads == 1) return;
    unsigned generation = atomic_load(&barrier->generation);
    if (atomic_fetch_add(&barrier->arrived, 1) + 1 == threads) {
        atomic_store(&barrier->arrived, 0);
        atomic_fetch_add(&barrier->generation, 1);
        if (atomic_load(&barrier->sleepers)) uform_futex_wake((uint32_t *)&barrier->generation, INT_MAX);
        return;
    }
    /* Spin for a time, not a count: `pause` lasts from about 10 to 140 cycles by CPU. A thread that
     * sleeps costs the phase its wake-up (a futex wake, and on a virtual machine the halted vCPU's
     * return), so the spin outlasts the usual imbalance of a phase; past the first
     * UFORM_PHASE_SPIN_YIELD_AFTER seconds it yields at every look at the clock, so that where threads
     * outnumber cores a spinning thread does not hold the core a late one waits for. */
    double spin = uform_phase_spin_seconds(), started = 0;
    for (unsigned pauses = 0;; ++pauses) {
        if (atomic_load_explicit(&barrier->generation, memory_order_acquire) != generation) return;
        if (pauses % UFORM_PHASE_SPIN_CLOCK_EVERY == 0) {
            double now = uform_now_seconds();
            if (pauses == 0) started = now;
            else if (now - started >= spin) break;
            else if (now - started >= UFORM_PHASE_SPIN_YIELD_AFTER) sched_yield();
        }
        uform_spin_pause();
    }
    atomic_fetch_add(&barrier->sleepers, 1);
    while (atomic_load(&barrier->generation) == generation)
        uform_futex_wait((uint32_t *)&barrier->generation, generation, NULL);
    atomic_fetch_sub(&barrier->sleepers, 1);
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

uform_gemm_plan_t uform_gemm_plan(uform_gemm_t const *gemm, size_t threads, uform_dtype_t dtype, size_t m, size_t n) {
    uform_gemm_plan_t plan;
    size_t wanted = threads == 1 ? 1 : threads * 2;
    int widens = uform_gemm_scratch_bytes(gemm, dtype, 1, 1, 1) == sizeof(float);
    /* Bigger row tiles amortise the library's packing of the weights, as long as every thread
     * still gets two tiles. */
    size_t rows = UFORM_GEMM_TILE_ROWS;
    while (rows < 4 * UFORM_GEMM_TILE_ROWS && m / (rows * 2) >= wanted) rows *= 2;
    plan.rows_per_tile = widens ? (m ? m : 1) : rows;
    plan.tiles_m = m ? ceil_div(m, plan.rows_per_tile) : 0;
    /* Where slices of packed f32 weights would pad (gemm.c), rows too few for two tiles per thread
     * split evenly into one tile per thread, of every column, while a tile keeps 32 rows. */
    if (gemm->sgemm_packed && dtype == uform_dtype_f32_k && threads > 1 && plan.tiles_m < wanted && m >= 32 * threads) {
        plan.rows_per_tile = ceil_div(m, threads), plan.tiles_m = ceil_div(m, plan.rows_per_tile);
        plan.cols_per_tile = n, plan.tiles_n = n ? 1 : 0;
        return plan;
    }
    size_t splits = plan.tiles_m >= wanted || !plan.tiles_m ? 1 : ceil_div(wanted, plan.tiles_m);
    plan.cols_per_tile = ceil_div(ceil_div(n, splits), 16) * 16;
    if (plan.cols_per_tile < 64 && !widens) plan.cols_per_tile = 64;
    if (plan.cols_per_tile > n) plan.cols_per_tile = n;
    plan.tiles_n = ceil_div(n, plan.cols_per_tile);
    return plan;
}

/** How much slower than one thread per thread a group of several is, per extra thread. */
#define UFORM_GROUP_PENALTY 0.05

static int by_cost_descending(void const *a, void const *b, void *context) {
    double const *costs = (double const *)context;
    size_t i = *(size_t const *)a, j = *(size_t const *)b;
    if (costs[i] != costs[j]) return costs[i] > costs[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

static double group_speed(size_t threads) { return (double)threads / (1.0 + UFORM_GROUP_PENALTY * (double)(threads - 1)); }

/* Deals the items (in `order`) to `groups` groups of `threads` threads, returning the estimated
 * finish of the slowest; `group_of` (when not NULL) gets each item's group. */
static double deal(size_t threads, size_t groups, size_t count, double const *costs, size_t const *order,
                   size_t *group_of, double *loads) {
    for (size_t g = 0; g < groups; ++g) loads[g] = 0;
    double slowest = 0;
    for (size_t n = 0; n < count; ++n) {
        size_t item = order[n], best = 0;
        double best_finish = 0;
        for (size_t g = 0; g < groups; ++g) {
            size_t size = threads / groups + (g < threads % groups);
            double finish = (loads[g] + costs[item]) / group_speed(size);
            if (g == 0 || finish < best_finish) best = g, best_finish = finish;
        }
        loads[best] += costs[item];
        if (best_finish > slowest) slowest = best_finish;
        if (group_of) group_of[item] = best;
    }
    return slowest;
}

size_t uform_batch_groups(size_t threads, size_t count, double const *costs, size_t forced, size_t *group_threads,
                          size_t *group_of, size_t *order) {
    if (threads == 0) threads = 1;
    size_t most = count < threads ? count : threads;
    if (most == 0) {
        group_threads[0] = threads;
        return 1;
    }
    for (size_t i = 0; i < count; ++i) order[i] = i;
    qsort_r(order, count, sizeof(size_t), by_cost_descending, (void *)costs);
    double loads_stack[64];
    double *loads = threads <= 64 ? loads_stack : (double *)malloc(threads * sizeof(double));
    size_t groups = most;
    if (forced) groups = threads / forced ? threads / forced : 1, groups = groups < most ? groups : most;
    else if (loads && count < 4 * threads) {
        double best = 0;
        for (size_t candidate = most; candidate >= 1; --candidate) {
            double finish = deal(threads, candidate, count, costs, order, NULL, loads);
            /* Fewer threads per group wins ties: fewer barriers. */
            if (candidate == most || finish < best * (1 - 1e-9)) best = finish, groups = candidate;
        }
    }
    if (loads) deal(threads, groups, count, costs, order, group_of, loads);
    else
        for (size_t i = 0; i < count; ++i) group_of[i] = i % groups;
    if (loads != loads_stack) free(loads);
    for (size_t g = 0; g < groups; ++g) group_threads[g] = threads / groups + (g < threads % groups);
    return groups;
}

/** The environment variable `name` as a count of threads, else `otherwise` (unset, empty or not a
 *  plain decimal number). */
static size_t threads_from_environment(char const *name, size_t otherwise) {
    char const *value = getenv(name);
    if (!value || !*value) return otherwise;
    char *end = NULL;
    unsigned long threads = strtoul(value, &end, 10);
    return end && *end == 0 ? (size_t)threads : otherwise;
}

size_t uform_forward_group_forced(void) { return threads_from_environment("UFORM_FORWARD_GROUP", 0); }

size_t uform_forward_row_tiles_threads(void) { return threads_from_environment("UFORM_ROW_TILES_THREADS", 4); }

int uform_forward_cls_tail(int cls_pooling, size_t layers) {
    if (!cls_pooling || !layers) return 0;
    char const *value = getenv("UFORM_CLS_TAIL");
    return !(value && value[0] == '0' && value[1] == 0);
}

void uform_attention_rows_plain(uform_kernels_t const *kernels, float const *q, float const *k, float const *v, size_t ld,
                           float *out, size_t out_ld, size_t rows, size_t length, size_t head, float scale, float *scores) {
    for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < length; ++j) {
            float dot = 0;
            for (size_t c = 0; c < head; ++c) dot += q[i * ld + c] * k[j * ld + c];
            scores[i * length + j] = dot * scale;
        }
    kernels->softmax_rows(scores, length, rows, length);
    for (size_t i = 0; i < rows; ++i) {
        float *o = out + i * out_ld;
        for (size_t c = 0; c < head; ++c) o[c] = 0;
        for (size_t j = 0; j < length; ++j)
            for (size_t c = 0; c < head; ++c) o[c] += scores[i * length + j] * v[j * ld + c];
    }
}

/* ---- Step profiles: UFORM_CPU_PROFILE=1 here, UFORM_GPU_PROFILE=1 in vram_tower_exec.c ---- */

void uform_step_profile_add(uform_step_profile_t *profile, char const *step, double seconds) {
    pthread_mutex_lock(&profile->lock);
    for (size_t i = 0; i < 32; ++i)
        if (!profile->names[i] || !strcmp(profile->names[i], step)) {
            profile->names[i] = step, profile->seconds[i] += seconds, ++profile->counts[i];
            break;
        }
    pthread_mutex_unlock(&profile->lock);
}

void uform_step_profile_report(uform_step_profile_t *profile, void *file, char const *prefix) {
    pthread_mutex_lock(&profile->lock);
    double total = 0;
    for (size_t i = 0; i < 32 && profile->names[i]; ++i) total += profile->seconds[i];
    for (size_t i = 0; i < 32 && profile->names[i]; ++i)
        fprintf((FILE *)file, "%s %-28s %9zu runs %11.3f ms %5.1f%%\n", prefix, profile->names[i], profile->counts[i],
                profile->seconds[i] * 1e3, total > 0 ? 100.0 * profile->seconds[i] / total : 0.0);
    pthread_mutex_unlock(&profile->lock);
}

static pthread_once_t cpu_profile_once = PTHREAD_ONCE_INIT;
static int cpu_profile_on;
static uform_step_profile_t cpu_profile = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void cpu_profile_read(void) {
    char const *value = getenv("UFORM_CPU_PROFILE");
    cpu_profile_on = value && *value && *value != '0';
}

int uform_cpu_profiling(void) {
    pthread_once(&cpu_profile_once, cpu_profile_read);
    return cpu_profile_on;
}

void uform_cpu_profile_add(char const *step, double seconds) { uform_step_profile_add(&cpu_profile, step, seconds); }

void uform_cpu_profile_report(void *file) { uform_step_profile_report(&cpu_profile, file, "cpu profile"); }
