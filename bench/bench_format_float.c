/**
 *  @file   bench_format_float.c
 *  @brief  The JSON numbers of `uform encode` (tools/format_float.h) against glibc's printf "%.9g",
 *          side by side in one run: nanoseconds per number and rows per second (384 numbers a row)
 *          on embedding-like values (normal draws of a normalised 384-wide row's scale), one thread.
 *
 *      bench_format_float [--rows N] [--rounds N]
 *
 *  Each round formats every row with printf's `snprintf` and then with `format_float_g9` into one
 *  buffer (the same bytes: checked), and keeps each side's best round.
 */
#define _GNU_SOURCE 1
#include "../tools/format_float.h"
#include "../tools/strict_number.h"
#include "call_times.h" // `call_times_clock`

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double now(void) { return call_times_clock(CLOCK_MONOTONIC); }

int main(int argc, char **argv) {
    size_t rows = 5000, rounds = 3;
    size_t const dims = 384;
    for (int i = 1; i < argc; ++i) {
        char const *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(argv[i], "--rows") && strict_count(v, 1, 1000000, false, &rows)) ++i;
        else if (v && !strcmp(argv[i], "--rounds") && strict_count(v, 1, 1000, false, &rounds)) ++i;
        else {
            fprintf(stderr, "usage: bench_format_float [--rows N] [--rounds N]\n");
            return 2;
        }
    }
    float *values = malloc(rows * dims * sizeof(float));
    char *ours = malloc(rows * dims * 32), *theirs = malloc(rows * dims * 32);
    if (!values || !ours || !theirs) return 1;
    uint64_t state = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < rows * dims; ++i) { /* Box-Muller: N(0, 1/384), a unit row's numbers */
        double u[2];
        for (int k = 0; k < 2; ++k)
            state = state * 6364136223846793005ull + 1442695040888963407ull, u[k] = ((double)(state >> 11) + 0.5) / 9007199254740992.0;
        values[i] = (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]) / sqrt((double)dims));
    }
    double best_printf = 1e30, best_ours = 1e30;
    size_t bytes_printf = 0, bytes_ours = 0;
    for (size_t round = 0; round < rounds; ++round) {
        double start = now();
        char *cursor = theirs;
        for (size_t i = 0; i < rows * dims; ++i) cursor += snprintf(cursor, 32, "%.9g", (double)values[i]), *cursor++ = ' ';
        double const took_printf = now() - start;
        bytes_printf = (size_t)(cursor - theirs);
        start = now();
        cursor = ours;
        for (size_t i = 0; i < rows * dims; ++i) cursor += format_float_g9(cursor, values[i]), *cursor++ = ' ';
        double const took_ours = now() - start;
        bytes_ours = (size_t)(cursor - ours);
        if (took_printf < best_printf) best_printf = took_printf;
        if (took_ours < best_ours) best_ours = took_ours;
    }
    if (bytes_ours != bytes_printf || memcmp(ours, theirs, bytes_ours) != 0) {
        fprintf(stderr, "bench_format_float: the two outputs differ\n");
        return 1;
    }
    double const numbers = (double)(rows * dims);
    printf("printf \"%%.9g\": %.1f ns a number, %.0f rows/s; format_float_g9: %.1f ns a number, %.0f rows/s; %.2fx "
           "(%zu rows of %zu, best of %zu rounds, %zu bytes each)\n",
           best_printf / numbers * 1e9, (double)rows / best_printf, best_ours / numbers * 1e9, (double)rows / best_ours,
           best_printf / best_ours, rows, dims, rounds, bytes_ours);
    free(values), free(ours), free(theirs);
    return 0;
}
