/**
 *  @file   bench_image_products.c
 *  @brief  The CPU image pass's four products per layer (Q/K/V, output, MLP up, MLP down) as the
 *          batch-parallel pass runs them: every thread alone on its own images (`--images` per
 *          thread, 197 rows each), weights in bf16, pinned (packed once, as a model's replicas are),
 *          `--layers` distinct layers of weights so that they come from memory as in the pass
 *          (`--layers 1`: the same layer over and over, weights hot in cache). Prints per product
 *          the thread's time and GFLOP/s, and the sum over threads: what the products could reach
 *          apart from the pass's epilogues, attention and barriers.
 *
 *      bench_image_products [--shape vit-s16|vit-b16] [--threads N] [--images N] [--layers N] [--rounds N]
 *
 *  Threads are pinned one per core from core 0. bf16 weights where the class multiplies bf16
 *  natively (AMX on Sapphire Rapids through oneDNN's matmul primitive), else f32.
 */
#define _GNU_SOURCE 1
#include "internal.h" // `uform_now_seconds`
#include "kernels/kernels.h"
#include "../tools/strict_number.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { products_k = 4 };
static char const *const product_names[products_k] = {"qkv", "out", "up", "down"};

typedef struct bench_t {
    uform_gemm_t gemm;
    size_t dim, inter, rows, layers, rounds, threads;
    int bf16;
    void **weights; /* [layers][products_k]: qkv is [3 dim][dim], out [dim][dim], up [inter][dim], down [dim][inter] */
    pthread_barrier_t start;
    double (*seconds)[products_k]; /* per thread, best round */
} bench_t;

typedef struct worker_t {
    bench_t *bench;
    size_t index;
} worker_t;

static void product_shape(bench_t const *b, size_t p, size_t *n, size_t *k) {
    size_t const n_of[products_k] = {3 * b->dim, b->dim, b->inter, b->dim};
    size_t const k_of[products_k] = {b->dim, b->dim, b->dim, b->inter};
    *n = n_of[p], *k = k_of[p];
}

static void *worker(void *argument) {
    worker_t *w = (worker_t *)argument;
    bench_t *b = w->bench;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)w->index, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    size_t widest = b->inter > 3 * b->dim ? b->inter : 3 * b->dim;
    float *a = aligned_alloc(64, b->rows * widest * sizeof(float));
    float *c = aligned_alloc(64, b->rows * widest * sizeof(float));
    uint16_t *a16 = aligned_alloc(64, b->rows * widest * sizeof(uint16_t));
    size_t scratch_bytes = uform_gemm_scratch_bytes(&b->gemm, b->bf16 ? uform_dtype_bf16_k : uform_dtype_f32_k,
                                                    b->rows, widest, widest);
    void *scratch = aligned_alloc(64, scratch_bytes ? (scratch_bytes + 63) / 64 * 64 : 64);
    for (size_t i = 0; i < b->rows * widest; ++i) a[i] = (float)((i * 37 + w->index) % 101) / 101.0f - 0.5f;
    b->gemm.kernels->f32_to_bf16(a, a16, b->rows * widest);
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    double *best = b->seconds[w->index];
    for (size_t p = 0; p < products_k; ++p) best[p] = 1e30;
    pthread_barrier_wait(&b->start);
    for (size_t round = 0; round < b->rounds + 1; ++round) {
        double took[products_k] = {0};
        for (size_t l = 0; l < b->layers; ++l)
            for (size_t p = 0; p < products_k; ++p) {
                size_t n, k;
                product_shape(b, p, &n, &k);
                double started = uform_now_seconds();
                /* Q, K and V are three products of dim columns each, as the pass calls them. */
                size_t parts = p == 0 ? 3 : 1, cols = n / parts;
                for (size_t part = 0; part < parts; ++part) {
                    char const *weights = (char const *)b->weights[l * products_k + p] + part * cols * k * (b->bf16 ? 2 : 4);
                    for (size_t i0 = 0; i0 < b->rows; i0 += 512) {
                        size_t rows = b->rows - i0 < 512 ? b->rows - i0 : 512;
                        if (b->bf16)
                            uform_gemm_tile_bf16(&b->gemm, rows, cols, k, a16 + i0 * k, k, (uint16_t const *)weights, k,
                                                 c + i0 * n + part * cols, n);
                        else
                            uform_gemm_tile(&b->gemm, rows, cols, k, a + i0 * k, k, weights, uform_dtype_f32_k, k,
                                            c + i0 * n + part * cols, n, scratch);
                    }
                }
                took[p] += uform_now_seconds() - started;
            }
        if (round == 0) continue; /* warm-up: the packed slices are made on first use */
        for (size_t p = 0; p < products_k; ++p)
            if (took[p] < best[p]) best[p] = took[p];
    }
    uform_gemm_thread_leave(&previous);
    free(a), free(c), free(a16), free(scratch);
    return NULL;
}

int main(int argc, char **argv) {
    size_t threads = 1, images = 1, layers = 12, rounds = 5;
    char const *shape = "vit-b16";
    for (int i = 1; i < argc; ++i) {
        char const *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && !strcmp(o, "--threads") && strict_count(v, 1, 1024, false, &threads)) ++i;
        else if (v && !strcmp(o, "--images") && strict_count(v, 1, 64, false, &images)) ++i;
        else if (v && !strcmp(o, "--layers") && strict_count(v, 1, 64, false, &layers)) ++i;
        else if (v && !strcmp(o, "--rounds") && strict_count(v, 1, 1000, false, &rounds)) ++i;
        else if (v && !strcmp(o, "--shape") && (!strcmp(v, "vit-s16") || !strcmp(v, "vit-b16"))) shape = v, ++i;
        else {
            fprintf(stderr, "usage: bench_image_products [--shape vit-s16|vit-b16] [--threads N] [--images N] "
                            "[--layers N] [--rounds N]\n");
            return 2;
        }
    }
    uform_cpu_class_t cpu_class = uform_cpu_class_serial_k;
    if (uform_cpu_detect(&cpu_class, NULL) != uform_status_ok_k) return 1;
    bench_t b = {.gemm = uform_gemm_for(cpu_class), .rows = images * 197, .layers = layers, .rounds = rounds, .threads = threads};
    if (!b.gemm.use_library) {
        printf("bench_image_products: skipped: class %s multiplies without the library\n", uform_cpu_class_name(cpu_class));
        return 0;
    }
    b.gemm = uform_gemm_for_product(&b.gemm, 1); /* whole rows per tile: the packed weights */
    b.dim = strcmp(shape, "vit-s16") ? 768 : 384, b.inter = 4 * b.dim;
    b.bf16 = uform_gemm_takes_bf16(&b.gemm, uform_dtype_bf16_k);
    size_t element = b.bf16 ? 2 : 4;
    b.weights = calloc(layers * products_k, sizeof(void *));
    b.seconds = calloc(threads, sizeof *b.seconds);
    pthread_t *ids = calloc(threads, sizeof(pthread_t));
    worker_t *workers = calloc(threads, sizeof(worker_t));
    if (!b.weights || !b.seconds || !ids || !workers) return 1;
    for (size_t l = 0; l < layers; ++l)
        for (size_t p = 0; p < products_k; ++p) {
            size_t n, k;
            product_shape(&b, p, &n, &k);
            void **slot = &b.weights[l * products_k + p];
            if (posix_memalign(slot, 4096, n * k * element) != 0) return 1;
            for (size_t i = 0; i < n * k; ++i) {
                float value = (float)((i * 13 + l) % 97) / 970.0f - 0.05f;
                if (b.bf16) b.gemm.kernels->f32_to_bf16(&value, (uint16_t *)*slot + i, 1);
                else ((float *)*slot)[i] = value;
            }
            uform_gemm_pin(*slot, n * k * element);
        }
    pthread_barrier_init(&b.start, NULL, (unsigned)threads);
    for (size_t t = 0; t < threads; ++t) {
        workers[t] = (worker_t){&b, t};
        if (pthread_create(&ids[t], NULL, worker, &workers[t]) != 0) return 1;
    }
    for (size_t t = 0; t < threads; ++t) pthread_join(ids[t], NULL);
    printf("bench_image_products %s %s, class %s, %s, %zu threads alone on %zu image(s) = %zu rows each, %zu layer(s) of weights:\n",
           shape, b.bf16 ? "bf16" : "f32", uform_cpu_class_name(cpu_class),
           uform_gemm_matmul_impl() ? uform_gemm_matmul_impl() : "GEMM functions", threads, images, b.rows, layers);
    double total_flops = 0, total_slowest = 0;
    for (size_t p = 0; p < products_k; ++p) {
        size_t n, k;
        product_shape(&b, p, &n, &k);
        double flops = 2.0 * (double)b.rows * (double)n * (double)k * (double)layers, slowest = 0, sum = 0;
        for (size_t t = 0; t < threads; ++t) {
            sum += b.seconds[t][p];
            if (b.seconds[t][p] > slowest) slowest = b.seconds[t][p];
        }
        double mean = sum / (double)threads;
        printf("  %-5s M %5zu N %5zu K %5zu: %8.3f ms per thread (slowest %8.3f), %7.1f GFLOP/s per thread, %8.1f over all\n",
               product_names[p], b.rows, n, k, mean * 1e3 / (double)layers, slowest * 1e3 / (double)layers,
               flops / mean * 1e-9, flops * (double)threads / slowest * 1e-9);
        total_flops += flops, total_slowest += slowest;
    }
    printf("  all   %.1f GFLOP/s per thread (slowest thread), %.1f over all\n", total_flops / total_slowest * 1e-9,
           total_flops * (double)threads / total_slowest * 1e-9);
    for (size_t l = 0; l < layers; ++l)
        for (size_t p = 0; p < products_k; ++p) {
            size_t n, k;
            product_shape(&b, p, &n, &k);
            uform_gemm_unpin(b.weights[l * products_k + p], n * k * element);
            free(b.weights[l * products_k + p]);
        }
    free(b.weights), free(b.seconds), free(ids), free(workers);
    return 0;
}
