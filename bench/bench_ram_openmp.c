/**
 *  @file   bench_ram_openmp.c
 *  @brief  bench_ram's OpenMP child: empty `#pragma omp parallel` regions as fork-join rounds, and
 *          the same sum with a static `parallel for`. Built with -fopenmp where CMake finds OpenMP;
 *          without it the child says so and fails. See bench_ram.c for the whole benchmark.
 */
#include "bench_ram.h"

#include <stdio.h> // `fprintf`

#if defined(_OPENMP)
#include <omp.h>
#endif

/** @brief The region's body: nothing, behind a compiler barrier, since GCC deletes a parallel
 *  region whose body is literally empty (and with it the fork-join being measured). */
static inline void empty_body(void) { __asm__ __volatile__("" ::: "memory"); }

int child_openmp(size_t threads, config_t const *config, double *round_ns, double *gbps) {
#if defined(_OPENMP)
    int team = (int)threads;
    omp_set_dynamic(0);
    omp_set_num_threads(team);

    size_t warmup = config->rounds / 10 + 1;
    for (size_t i = 0; i < warmup; ++i) {
#pragma omp parallel num_threads(team)
        { empty_body(); }
    }
    double samples[64];
    size_t repetitions = config->repetitions < 64 ? config->repetitions : 64;
    for (size_t repetition = 0; repetition < repetitions; ++repetition) {
        double start = now_seconds();
        for (size_t i = 0; i < config->rounds; ++i) {
#pragma omp parallel num_threads(team)
            { empty_body(); }
        }
        samples[repetition] = (now_seconds() - start) * 1e9 / (double)config->rounds;
    }
    *round_ns = median(samples, repetitions);

    if (config->bytes) {
        size_t floats = config->bytes / sizeof(float);
        long blocks = (long)((floats + BENCH_BLOCK_FLOATS - 1) / BENCH_BLOCK_FLOATS);
        float *values = buffer_map(floats * sizeof(float));
        if (!values) {
            fprintf(stderr, "bench_ram: openmp: cannot allocate %zu bytes\n", config->bytes);
            return 1;
        }
#pragma omp parallel for schedule(static) num_threads(team)
        for (long block = 0; block < blocks; ++block) {
            size_t begin = (size_t)block * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
            block_fill(values + begin, (end > floats ? floats : end) - begin);
        }
        size_t sum_repetitions = config->sum_repetitions < 64 ? config->sum_repetitions : 64;
        int code = 0;
        for (size_t repetition = 0; repetition <= sum_repetitions; ++repetition) {
            double total = 0;
            double start = now_seconds();
#pragma omp parallel for schedule(static) num_threads(team) reduction(+ : total)
            for (long block = 0; block < blocks; ++block) {
                size_t begin = (size_t)block * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
                total += block_sum(values + begin, (end > floats ? floats : end) - begin);
            }
            double seconds = now_seconds() - start;
            if (total != (double)floats) {
                fprintf(stderr, "bench_ram: openmp: the sum is %.1f, expected %zu\n", total, floats);
                code = 1;
                break;
            }
            if (repetition) samples[repetition - 1] = (double)(floats * sizeof(float)) / seconds * 1e-9;
        }
        if (!code) *gbps = median(samples, sum_repetitions);
        munmap(values, floats * sizeof(float));
        return code;
    }
    return 0;
#else
    (void)threads, (void)config, (void)round_ns, (void)gbps;
    fputs("bench_ram: built without OpenMP\n", stderr);
    return 1;
#endif
}
