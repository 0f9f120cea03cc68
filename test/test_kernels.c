/**
 *  @file   test_kernels.c
 *  @brief  How the forward passes spread a batch over threads (`uform_batch_groups`) and the pool of
 *          activation arenas they take their buffers from (src/kernels/phases.c, arena.c). The
 *          passes themselves are checked against PyTorch by test_encode and test_encode_images,
 *          which also run with the grouping forced (ctest's test_encode_group1, _group2, ...).
 *          And attention's bf16 products through the matmul primitive (`uform_gemm_bf16_with`): the
 *          same values as the GEMM functions, K as [n][k] and V as [k][n], scaled, strided.
 *          And the fused GELU and softmax of every class this machine runs, whose exp clamps by
 *          masks (so the AVX2 class vectorises them): values against double precision from -1e30
 *          to 1e30, NaN kept, the vector body and its tail.
 */
#include "check.h"
#include "internal.h" // `uform_cpu_resolve_class`
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct split_t {
    size_t groups, group_threads[64], group_of[256], items[64];
    double load[64];
} split_t;

static split_t split(size_t threads, size_t count, double const *costs, size_t forced) {
    split_t s;
    memset(&s, 0, sizeof s);
    size_t order[256];
    s.groups = uform_batch_groups(threads, count, costs, forced, s.group_threads, s.group_of, order);
    size_t total = 0;
    for (size_t g = 0; g < s.groups; ++g) {
        total += s.group_threads[g];
        CHECK(s.group_threads[g] >= 1);
    }
    CHECK(total == threads); /* every thread in exactly one group */
    for (size_t i = 0; i < count; ++i) {
        CHECK_FATAL(s.group_of[i] < s.groups);
        ++s.items[s.group_of[i]], s.load[s.group_of[i]] += costs[i];
    }
    return s;
}

static void test_groups(void) {
    double equal[256], skewed[9] = {100, 1, 1, 1, 1, 1, 1, 1, 1};
    for (size_t i = 0; i < 256; ++i) equal[i] = 1.0;

    /* No items, one item: one group of every thread (the tile-split pass). */
    split_t s = split(4, 0, equal, 0);
    CHECK(s.groups == 1 && s.group_threads[0] == 4);
    s = split(28, 1, equal, 0);
    CHECK(s.groups == 1 && s.group_threads[0] == 28 && s.group_of[0] == 0);

    /* As many items as threads or more: one thread per group, the items dealt evenly. */
    s = split(4, 8, equal, 0);
    CHECK(s.groups == 4);
    for (size_t g = 0; g < 4; ++g) CHECK(s.group_threads[g] == 1 && s.items[g] == 2);
    s = split(28, 50, equal, 0);
    CHECK(s.groups == 28);
    for (size_t g = 0; g < 28; ++g) CHECK(s.items[g] == 1 || s.items[g] == 2);
    s = split(28, 256, equal, 0);
    CHECK(s.groups == 28);
    for (size_t g = 0; g < 28; ++g) CHECK(s.items[g] == 9 || s.items[g] == 10);

    /* Fewer items than threads: one group per item, the threads shared out (4 x 4 + 4 x 3). */
    s = split(28, 8, equal, 0);
    CHECK(s.groups == 8);
    for (size_t g = 0; g < 8; ++g) CHECK(s.items[g] == 1 && s.group_threads[g] == (g < 4 ? 4 : 3));

    /* One text far longer than the rest: one thread alone on it would be the straggler, so every
     * thread splits the tiles of the whole batch instead. */
    s = split(4, 9, skewed, 0);
    CHECK(s.groups == 1 && s.group_threads[0] == 4);

    /* Longest first: with two long and six short items on two threads, each long one gets a
     * thread and the short ones balance the loads exactly. */
    double mixed[8] = {1, 4, 1, 1, 4, 1, 1, 1};
    s = split(2, 8, mixed, 0);
    CHECK(s.groups == 2 && s.load[0] == 7.0 && s.load[1] == 7.0);
    CHECK(s.group_of[1] != s.group_of[4]);

    /* Forced threads per group (UFORM_FORWARD_GROUP), never more groups than items. */
    s = split(4, 8, equal, 2);
    CHECK(s.groups == 2 && s.group_threads[0] == 2 && s.group_threads[1] == 2 && s.items[0] == 4);
    s = split(4, 8, equal, 4);
    CHECK(s.groups == 1);
    s = split(4, 2, equal, 1);
    CHECK(s.groups == 2 && s.group_threads[0] + s.group_threads[1] == 4);
    s = split(2, 8, equal, 28);
    CHECK(s.groups == 1 && s.group_threads[0] == 2);
    printf("groups: every split checked\n");
}

static void test_arenas(void) {
    size_t granted = 0, pooled = uform_arena_pooled_bytes();
    char *a = (char *)uform_arena_take(100000, -1, &granted);
    CHECK_FATAL(a != NULL);
    CHECK(granted >= 100000 && granted % 4096 == 0);
    memset(a, 7, granted);
    uform_arena_give(a, granted, -1);
    CHECK(uform_arena_pooled_bytes() == pooled + granted);
    /* Taken again (it fits and is not four times too big): the same pages, with what was left. */
    size_t again = 0;
    char *b = (char *)uform_arena_take(90000, -1, &again);
    CHECK(b == a && again == granted && b[granted - 1] == 7);
    CHECK(uform_arena_pooled_bytes() == pooled);
    /* Too big a pooled arena for a small request is left in the pool: a new one is mapped. */
    uform_arena_give(b, again, -1);
    size_t small = 0;
    char *c = (char *)uform_arena_take(100, -1, &small);
    CHECK(c != NULL && c != b && small == 4096);
    uform_arena_give(c, small, -1);
    CHECK(uform_arena_take(0, -1, &small) == NULL && small == 0);
    uform_arena_give(NULL, 0, -1); /* a no-op */
    /* Sizes map a class up: a quarter of a power of two pages at most. */
    CHECK(granted == 28 * 4096); /* 100,000 bytes: 25 pages, classed 28 */
    char *d = (char *)uform_arena_take(4 * 4096 + 1, -1, &again);
    CHECK(d != NULL && again == 5 * 4096);
    uform_arena_give(d, again, -1);
    /* A growing walk (calls meeting ever longer texts): each miss supersedes the pooled arenas it
     * would serve, so the pool holds about the last size, not every size it passed; a few mappings
     * per doubling. */
    uform_arena_trim();
    CHECK(uform_arena_pooled_bytes() == 0);
    size_t mappings = 0, worst = 0;
    char *last = NULL;
    for (size_t bytes = 200000; bytes <= 24u << 20; bytes += 37000) {
        char *e = (char *)uform_arena_take(bytes, -1, &again);
        CHECK_FATAL(e != NULL);
        CHECK(again >= bytes && again < bytes + bytes / 4 + 4096);
        mappings += e != last, last = e;
        e[bytes - 1] = 1;
        uform_arena_give(e, again, -1);
        size_t const pooled_now = uform_arena_pooled_bytes();
        CHECK(pooled_now == again); /* the walk's one arena, nothing it superseded */
        worst = pooled_now > worst ? pooled_now : worst;
    }
    CHECK(mappings <= 4 * 7 + 2); /* 200 KB to 24 MB: under 7 doublings */
    /* A small arena beside a large one: the large does not supersede what it would not serve. */
    char *small_one = (char *)uform_arena_take(8192, -1, &small);
    uform_arena_give(small_one, small, -1);
    CHECK(uform_arena_pooled_bytes() == worst + small);
    uform_arena_trim();
    CHECK(uform_arena_pooled_bytes() == 0);
    /* A burst of calls of one size (deferred calls each take one while queued): four stay pooled. */
    enum { burst = 12 };
    char *held[burst];
    size_t held_bytes[burst];
    for (size_t i = 0; i < burst; ++i) {
        held[i] = (char *)uform_arena_take(300000, -1, &held_bytes[i]);
        CHECK_FATAL(held[i] != NULL);
    }
    for (size_t i = 0; i < burst; ++i) uform_arena_give(held[i], held_bytes[i], -1);
    CHECK(uform_arena_pooled_bytes() == 4 * held_bytes[0]);
    uform_arena_trim();
    printf("arenas: reused, bounded by size; a walk from 200 KB to 24 MB mapped %zu arenas, pooled at most %zu bytes; "
           "trimmed\n", mappings, worst);
}

/** S = scale Q K^T and O = P V as the image pass runs them (Q, K, V side by side in rows `3 d`
 *  apart, O into rows `d` apart), through the primitive and through the GEMM functions, against a
 *  double-precision reference of the same bf16 inputs. */
static void test_attention_products(void) {
    uform_cpu_class_t cpu_class = uform_cpu_class_serial_k;
    CHECK_OK(uform_cpu_detect(&cpu_class, NULL));
    uform_gemm_t gemm = uform_gemm_for(cpu_class);
    if (!uform_gemm_takes_bf16(&gemm, uform_dtype_bf16_k)) {
        printf("attention products: skipped (class %s does not multiply bf16 natively)\n", uform_cpu_class_name(cpu_class));
        return;
    }
    enum { ROWS = 37, S = 53, HEAD = 64, D = 128 };
    uint16_t *qkv = malloc(S * 3 * D * 2), *probs = malloc(ROWS * S * 2);
    float *wide = malloc(S * 3 * D * 4), *p = malloc(ROWS * S * 4);
    float *scores[2] = {malloc(ROWS * S * 4), malloc(ROWS * S * 4)}, *out[2] = {malloc(ROWS * D * 4), malloc(ROWS * D * 4)};
    CHECK_FATAL(qkv && probs && wide && p && scores[0] && scores[1] && out[0] && out[1]);
    for (size_t i = 0; i < S * 3 * D; ++i) wide[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    gemm.kernels->f32_to_bf16(wide, qkv, S * 3 * D);
    gemm.kernels->bf16_to_f32(qkv, wide, S * 3 * D);
    for (size_t i = 0; i < ROWS * S; ++i) p[i] = (float)((i * 104729) % 1001) / 1000.0f;
    gemm.kernels->f32_to_bf16(p, probs, ROWS * S);
    gemm.kernels->bf16_to_f32(probs, p, ROWS * S);
    float const scale = 0.125f;
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    for (int via = 0; via < 2; ++via) { /* 0: the GEMM functions; 1: the primitive */
        uform_gemm_t g = gemm;
        g.matmul = via, g.attention_matmul = via;
        memset(out[via], 0, ROWS * D * 4);
        CHECK(uform_gemm_bf16_with(&g, 1, ROWS, S, HEAD, scale, qkv + 5 * 3 * D, 3 * D, qkv + D, 3 * D, scores[via], S));
        CHECK(uform_gemm_bf16_with(&g, 0, ROWS, HEAD, S, 1.0f, probs, S, qkv + 2 * D + 64, 3 * D, out[via] + 64, D));
    }
    uform_gemm_thread_leave(&previous);
    double worst[2] = {0, 0};
    for (size_t i = 0; i < ROWS; ++i) {
        for (size_t j = 0; j < S; ++j) {
            double reference = 0;
            for (size_t e = 0; e < HEAD; ++e) reference += (double)wide[(5 + i) * 3 * D + e] * (double)wide[j * 3 * D + D + e];
            reference *= scale;
            for (int via = 0; via < 2; ++via) worst[0] = fmax(worst[0], fabs(scores[via][i * S + j] - reference));
        }
        for (size_t e = 0; e < HEAD; ++e) {
            double reference = 0;
            for (size_t j = 0; j < S; ++j) reference += (double)p[i * S + j] * (double)wide[j * 3 * D + 2 * D + 64 + e];
            for (int via = 0; via < 2; ++via) worst[1] = fmax(worst[1], fabs(out[via][i * D + 64 + e] - reference));
        }
        for (int via = 0; via < 2; ++via) CHECK(out[via][i * D] == 0.0f && out[via][i * D + 63] == 0.0f); /* other heads untouched */
    }
    printf("attention products (%s): |scores - reference| %.1e, |out - reference| %.1e, both paths\n",
           uform_cpu_class_name(cpu_class), worst[0], worst[1]);
    CHECK(worst[0] <= 1e-4 && worst[1] <= 1e-4);
    free(qkv), free(probs), free(wide), free(p);
    for (int via = 0; via < 2; ++via) free(scores[via]), free(out[via]);
}

/** 0.5 x (1 + erf(x / sqrt 2)) in double: the exact GELU the kernels approximate. */
static double gelu_reference(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

static void test_fused_math(void) {
    uform_cpu_class_t const classes[] = {uform_cpu_class_serial_k, uform_cpu_class_intel_haswell_k,
                                         uform_cpu_class_intel_skylake_k, uform_cpu_class_amd_genoa_k};
    /* Extremes where exp's argument leaves [-87, 88] (GELU's -x^2 / 2 overflows to -inf at 1e30),
     * then a sweep: 21 + 64 values, so 16-lane bodies run and a tail is left. */
    enum { EXTREMES = 21, COUNT = EXTREMES + 64 };
    float const extremes[EXTREMES] = {-1e30f, -1e10f, -200.0f, -20.0f, -13.3f, -13.0f, -9.5f, -5.0f, -1.0f, -0.5f, 0.0f,
                                      0.3f,   1.0f,   3.0f,    9.5f,   13.0f,  13.3f,  20.0f, 200.0f, 1e10f, 1e30f};
    float inputs[COUNT], bias[COUNT], rows[2 * COUNT];
    for (size_t j = 0; j < COUNT; ++j) {
        inputs[j] = j < EXTREMES ? extremes[j] : -12.0f + 24.0f * (float)(j - EXTREMES) / 63.0f;
        bias[j] = j < EXTREMES ? 0.0f : 0.125f;
    }
    size_t ran = 0;
    for (size_t k = 0; k < sizeof classes / sizeof *classes; ++k) {
        uform_cpu_class_t resolved;
        if (uform_cpu_resolve_class(classes[k], &resolved) != uform_status_ok_k || resolved != classes[k]) continue;
        uform_kernels_t const *kernels = uform_kernels_for(classes[k]);
        ++ran;
        /* GELU over two rows `COUNT` apart, the second shifted, with a bias. */
        for (size_t j = 0; j < COUNT; ++j) rows[j] = inputs[j], rows[COUNT + j] = inputs[j] * 0.5f;
        kernels->bias_gelu(rows, COUNT, 2, COUNT, bias);
        double worst = 0;
        for (size_t i = 0; i < 2; ++i)
            for (size_t j = 0; j < COUNT; ++j) {
                double x = (double)(i ? inputs[j] * 0.5f : inputs[j]) + (double)bias[j];
                double want = gelu_reference(x), got = rows[i * COUNT + j];
                CHECK(isfinite(got));
                double error = fabs(got - want) / fmax(1.0, fabs(want));
                worst = fmax(worst, error);
            }
        CHECK(worst <= 1e-6);
        float nan_row[17];
        for (size_t j = 0; j < 17; ++j) nan_row[j] = j == 3 || j == 16 ? NAN : 1.0f;
        kernels->bias_gelu(nan_row, 17, 1, 17, bias + EXTREMES);
        CHECK(isnan(nan_row[3]) && isnan(nan_row[16]) && isfinite(nan_row[0]) && isfinite(nan_row[15]));

        /* Softmax: a row spanning -1e30 to 88.5 (its exps underflow past the clamp) and the sweep. */
        float scores[COUNT];
        for (size_t j = 0; j < COUNT; ++j) scores[j] = j < EXTREMES ? (extremes[j] > 88.5f ? 88.5f : extremes[j]) : inputs[j];
        kernels->softmax_rows(scores, COUNT, 1, COUNT);
        double highest = -INFINITY, total = 0, worst_p = 0;
        for (size_t j = 0; j < COUNT; ++j) {
            double x = j < EXTREMES ? (extremes[j] > 88.5f ? 88.5 : extremes[j]) : inputs[j];
            highest = fmax(highest, x);
        }
        for (size_t j = 0; j < COUNT; ++j) {
            double x = j < EXTREMES ? (extremes[j] > 88.5f ? 88.5 : extremes[j]) : inputs[j];
            total += exp(x - highest);
        }
        for (size_t j = 0; j < COUNT; ++j) {
            double x = j < EXTREMES ? (extremes[j] > 88.5f ? 88.5 : extremes[j]) : inputs[j];
            worst_p = fmax(worst_p, fabs(scores[j] - exp(x - highest) / total));
        }
        CHECK(worst_p <= 1e-6);
        printf("fused math (%s kernels): GELU relative error %.1e, softmax |p - reference| %.1e, NaN kept\n",
               kernels->name, worst, worst_p);
    }
    CHECK(ran >= 1); /* SERIAL runs everywhere */
}

/** The step profiles' table: sums and counts per name, order of first sight, a 33rd name dropped. */
static void test_step_profile(void) {
    static uform_step_profile_t profile = {.lock = PTHREAD_MUTEX_INITIALIZER};
    static char names[33][8];
    uform_step_profile_add(&profile, "gemm", 0.25);
    uform_step_profile_add(&profile, "softmax", 0.5);
    uform_step_profile_add(&profile, "gemm", 0.25);
    for (int i = 0; i < 31; ++i) snprintf(names[i], sizeof names[i], "s%d", i), uform_step_profile_add(&profile, names[i], 0.0);
    CHECK(profile.counts[0] == 2 && profile.seconds[0] == 0.5 && !strcmp(profile.names[0], "gemm"));
    CHECK(profile.counts[1] == 1 && profile.seconds[1] == 0.5 && !strcmp(profile.names[1], "softmax"));
    CHECK(!strcmp(profile.names[31], "s29")); /* "s30", the 33rd name, found no slot */
    FILE *file = tmpfile();
    CHECK_FATAL(file != NULL);
    uform_step_profile_report(&profile, file, "cpu profile");
    rewind(file);
    char line[160];
    CHECK(fgets(line, sizeof line, file) && strstr(line, "cpu profile gemm") && strstr(line, "2 runs") &&
          strstr(line, "500.000 ms") && strstr(line, "50.0%"));
    fclose(file);
}

int main(void) {
    test_step_profile();
    test_groups();
    test_arenas();
    test_attention_products();
    test_fused_math();
    return check_failures ? 1 : 0;
}
