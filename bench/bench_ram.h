/**
 *  @file   bench_ram.h
 *  @brief  What the CPU benchmark's parts share: the children's configuration, clocks, the median,
 *          and the sum's kernel and buffer, which both systems use unchanged.
 *
 *  bench_ram.c is the parent (options, child processes, the report); each child lives in a file
 *  of its own: bench_ram_uform.c (the RAM executor), bench_ram_openmp.c (libgomp) and
 *  bench_ram_floor.c (the ping-pong floor).
 */
#ifndef UFORM_BENCH_RAM_H
#define UFORM_BENCH_RAM_H

#include <uform.h>

#include <stdbool.h>  // `bool`
#include <stdlib.h>   // `qsort`
#include <string.h>   // `memcpy`
#include <sys/mman.h> // `mmap`
#include <time.h>     // `clock_gettime`

#define BENCH_BLOCK_FLOATS 16384 // 64 KiB: one task of the sum, a unit of the static split
#define BENCH_MAX_THREADS 4096

typedef struct config_t {
    size_t rounds;          /**< Fork-join rounds per repetition. */
    size_t repetitions;     /**< Fork-join repetitions; the median is reported. */
    size_t bytes;           /**< Bytes of floats the sum reads. */
    size_t sum_repetitions; /**< Sum repetitions; the median is reported. */
    uform_mood_t mood;      /**< The UForm child's mood. */
    char const *join;       /**< How the UForm child's rounds wake and join workers: `--join`. */
} config_t;

/** @brief The names `--join` takes, each with what it picks (bench_ram_uform.c applies them). */
#define BENCH_JOIN_NAMES "default, legacy, shared, slots, lines"
bool bench_join_known(char const *name);

static inline double now_seconds(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec + (double)time.tv_nsec * 1e-9;
}

static inline int compare_doubles(void const *a, void const *b) {
    double x = *(double const *)a, y = *(double const *)b;
    return (x > y) - (x < y);
}

static inline double median(double *values, size_t count) {
    qsort(values, count, sizeof *values, compare_doubles);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

typedef float f32x4_t __attribute__((vector_size(16)));

/** @brief The sum's kernel, shared by both systems: four independent vector accumulators. */
static inline float block_sum(float const *values, size_t count) {
    f32x4_t a = {0}, b = {0}, c = {0}, d = {0};
    size_t i = 0;
    for (; i + 16 <= count; i += 16) {
        f32x4_t va, vb, vc, vd;
        memcpy(&va, values + i, sizeof va);
        memcpy(&vb, values + i + 4, sizeof vb);
        memcpy(&vc, values + i + 8, sizeof vc);
        memcpy(&vd, values + i + 12, sizeof vd);
        a += va, b += vb, c += vc, d += vd;
    }
    f32x4_t s = (a + b) + (c + d);
    float total = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < count; ++i) total += values[i];
    return total;
}

static inline void block_fill(float *values, size_t count) {
    for (size_t i = 0; i < count; ++i) values[i] = 1.0f;
}

/** @brief The buffer: anonymous pages, untouched, so the first writer places them. */
static inline float *buffer_map(size_t bytes) {
    void *pointer = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return pointer == MAP_FAILED ? NULL : (float *)pointer;
}

/** @brief The UForm child (bench_ram_uform.c): fork-join rounds, the sum, and the idle executor's
 *  burn in `config->mood`. Returns 0, or 1 after printing why. */
int child_uform(size_t threads, config_t const *config, double *round_ns, double *gbps, double *idle);

/** @brief The OpenMP child (bench_ram_openmp.c): the same rounds and sum over libgomp. */
int child_openmp(size_t threads, config_t const *config, double *round_ns, double *gbps);

/** @brief The floor (bench_ram_floor.c): median nanoseconds per round trip of a cache line
 *  between the first two allowed cores. */
int child_pingpong(config_t const *config, double *round_ns);

#endif // UFORM_BENCH_RAM_H
