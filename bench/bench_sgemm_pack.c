/**
 *  @file   bench_sgemm_pack.c
 *  @brief  Why gemm.c multiplies pinned f32 weights through oneDNN's packed GEMM off the matmul
 *          primitive path: one thread, the 8 products of UForm3-small's two layers (Q/K/V 2304 x 768,
 *          output 768 x 768, up 3072 x 768, down 768 x 3072; 54 MiB of f32 weights, more than the
 *          L3 of the 2-core VM) at 64 and 512 rows, each product's weights cold as in a pass:
 *          `dnnl_sgemm` (which packs the weights on every call) against `sgemm_compute` on weights
 *          packed once by `sgemm_pack` (exported by libdnnl 2.6, declared in no public header). Checks
 *          the packed products against `dnnl_sgemm`'s for 1 to 512 rows first.
 *
 *  Build and run (not part of the CMake build, like bench_gemm.c):
 *      cc -O2 bench/bench_sgemm_pack.c -ldnnl -lm -o bench_sgemm_pack
 *      OMP_NUM_THREADS=1 taskset -c 1 ./bench_sgemm_pack [ROWS_PACKED_FOR]   (default 512, as gemm.c)
 */
#include <dnnl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef dnnl_dim_t dim_t;
extern dnnl_status_t sgemm_pack_get_size(char const *, char const *, char const *, dim_t const *, dim_t const *,
                                         dim_t const *, dim_t const *, dim_t const *, size_t *, bool *)
    __asm__("_ZN4dnnl4impl3cpu19sgemm_pack_get_sizeEPKcS3_S3_PKlS5_S5_S5_S5_PmPb");
extern dnnl_status_t sgemm_pack(char const *, char const *, char const *, dim_t const *, dim_t const *, dim_t const *,
                                dim_t const *, dim_t const *, float const *, float *)
    __asm__("_ZN4dnnl4impl3cpu10sgemm_packEPKcS3_S3_PKlS5_S5_S5_S5_PKfPf");
extern dnnl_status_t sgemm_compute(char const *, char const *, dim_t const *, dim_t const *, dim_t const *, float const *,
                                   dim_t const *, float const *, dim_t const *, float const *, float *, dim_t const *)
    __asm__("_ZN4dnnl4impl3cpu13sgemm_computeEPKcS3_PKlS5_S5_PKfS5_S7_S5_S7_PfS5_");

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int by_value(void const *a, void const *b) { double x = *(double const *)a, y = *(double const *)b; return (x > y) - (x < y); }

enum { PRODUCTS = 8, CALLS = 60 };
static long const shapes[4][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}}; /* [n][k] */

int main(int argc, char **argv) {
    dim_t packed_for = argc > 1 ? atol(argv[1]) : 512;
    float *w[PRODUCTS], *packed[PRODUCTS];
    size_t plain_bytes = 0, packed_bytes = 0;
    for (int p = 0; p < PRODUCTS; ++p) {
        dim_t n = shapes[p % 4][0], k = shapes[p % 4][1];
        size_t bytes = 0;
        bool worth = true;
        w[p] = malloc(sizeof(float) * n * k);
        for (long i = 0; i < n * k; ++i) w[p][i] = (float)(rand() % 1000) * 1e-3f - 0.5f;
        if (sgemm_pack_get_size("A", "T", "N", &n, &packed_for, &k, &k, &k, &bytes, &worth) != dnnl_success ||
            !(packed[p] = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)) ||
            sgemm_pack("A", "T", "N", &n, &packed_for, &k, &k, &k, w[p], packed[p]) != dnnl_success)
            return fprintf(stderr, "packing refused\n"), 1;
        plain_bytes += sizeof(float) * n * k, packed_bytes += bytes;
    }
    printf("weights %.1f MiB, packed (for %ld rows) %.1f MiB\n", plain_bytes / 1048576.0, (long)packed_for, packed_bytes / 1048576.0);
    float *a = malloc(sizeof(float) * 512 * 3072), *c = malloc(sizeof(float) * 512 * 3072), *r = malloc(sizeof(float) * 512 * 3072);
    for (long i = 0; i < 512 * 3072; ++i) a[i] = (float)(rand() % 1000) * 1e-3f - 0.5f;
    long const rows_checked[] = {1, 7, 64, 100, 512};
    for (int t = 0; t < 5; ++t) {
        double worst = 0, largest = 1e-30;
        for (int p = 0; p < 4; ++p) {
            dim_t n = shapes[p][0], k = shapes[p][1], m = rows_checked[t];
            float const zero = 0;
            sgemm_compute("P", "N", &n, &m, &k, packed[p], &k, a, &k, &zero, c, &n);
            dnnl_sgemm('N', 'T', m, n, k, 1.f, a, k, w[p], k, 0.f, r, n);
            for (long i = 0; i < m * n; ++i) worst = fmax(worst, fabs(c[i] - r[i])), largest = fmax(largest, fabs(r[i]));
        }
        printf("%3ld rows: packed against dnnl_sgemm, worst difference %.1e of the largest value\n", rows_checked[t], worst / largest);
    }
    for (long m = 64; m <= 512; m *= 8)
        for (int packs = 0; packs < 2; ++packs) {
            double seconds[CALLS];
            for (int call = 0; call < CALLS; ++call) {
                double start = now();
                for (int p = 0; p < PRODUCTS; ++p) {
                    dim_t n = shapes[p % 4][0], k = shapes[p % 4][1], rows = m;
                    float const zero = 0;
                    if (packs) sgemm_compute("P", "N", &n, &rows, &k, packed[p], &k, a, &k, &zero, c, &n);
                    else dnnl_sgemm('N', 'T', m, n, k, 1.f, a, k, w[p], k, 0.f, c, n);
                }
                seconds[call] = now() - start;
            }
            qsort(seconds, CALLS, sizeof(double), by_value);
            double flops = 2.0 * (double)m * (2304 * 768 + 768 * 768 + 3072 * 768 + 768 * 3072) * 2;
            printf("%3ld rows, %-11s best %7.2f ms, median %7.2f ms, %5.1f GFLOP/s at the median\n", m,
                   packs ? "packed once" : "dnnl_sgemm", seconds[0] * 1e3, seconds[CALLS / 2] * 1e3, flops / seconds[CALLS / 2] / 1e9);
        }
    return 0;
}
