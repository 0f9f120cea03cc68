/**
 *  @file   test_gemm_pack.c
 *  @brief  The matmul primitive's packed weights (src/kernels/gemm.c, `uform_gemm_pin`): products of
 *          pinned weights equal the plain path's and the reference's, whole and as column slices; after
 *          an unpin, new values at the same address are never multiplied through the old packed copy
 *          (the lifetime a model's close relies on); weights never pinned are read as they are now; and
 *          `uform_gemm_tile_bf16` (A already in bf16) equals `uform_gemm_tile` on the f32 A it came from.
 *          Then the fused epilogues (`uform_gemm_tile_bf16_fused`: bias and bf16 C, bias + GELU, bias +
 *          LayerScale summed into C), pinned and not, against double-precision references; and its
 *          refusals (a strided C, a bf16 sum, fusing off, a class without native bf16) leave C untouched.
 *          Forced onto the matmul primitive on any library class (as UFORM_GEMM_MATMUL=1 would).
 *          Then the f32 path off the primitive (`uform_gemm_sgemm_packs`: oneDNN's packed GEMM): the
 *          same values packed and plain, for 1 to 600 rows and strided A and C, whole products and
 *          slices, narrow slices left plain, the unpin lifetime, and 8 threads racing to pack and
 *          multiply the same weights.
 */
#include "check.h"
#include "kernels/kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { M = 40, N = 96, K = 64 }; /* 40 rows: a main part of 32 and a remainder, as the engine splits */

static uint64_t state = 88172645463325252ull;
static float uniform(void) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) / (double)(1ull << 53)) * 2.0f - 1.0f;
}

/* The worst |got - want| over |want|'s largest, of C = A W^T over columns [j0, j0 + n). */
static double worst_error(float const *a, float const *w_f32, size_t j0, size_t n, float const *c, size_t ldc) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < n; ++j) {
            double want = 0;
            for (size_t p = 0; p < K; ++p) want += (double)a[i * K + p] * (double)w_f32[(j0 + j) * K + p];
            double error = fabs(want - (double)c[i * ldc + j]);
            worst = error > worst ? error : worst;
            scale = fabs(want) > scale ? fabs(want) : scale;
        }
    return worst / scale;
}

/* Fills `w` (N x K of `dtype`) and `w_f32` (its values in f32, rounded as stored). */
static void fill(uform_kernels_t const *kernels, uform_dtype_t dtype, void *w, float *w_f32) {
    for (size_t i = 0; i < (size_t)N * K; ++i) w_f32[i] = uniform();
    if (dtype == uform_dtype_f32_k) memcpy(w, w_f32, sizeof(float) * N * K);
    else {
        kernels->f32_to_bf16(w_f32, (uint16_t *)w, (size_t)N * K);
        kernels->bf16_to_f32((uint16_t const *)w, w_f32, (size_t)N * K);
    }
}

static void check_dtype(uform_gemm_t const *gemm, uform_dtype_t dtype) {
    char const *name = dtype == uform_dtype_f32_k ? "f32" : "bf16";
    double tolerance = 1e-5; /* bf16: the reference gets the same bf16-rounded inputs; sums in f32 either way */
    size_t element = dtype == uform_dtype_f32_k ? 4 : 2, ldc = N;
    float *a = malloc(sizeof(float) * M * K), *w_f32 = malloc(sizeof(float) * N * K);
    float *plain = malloc(sizeof(float) * M * N), *c = malloc(sizeof(float) * M * N);
    void *w = NULL, *scratch = NULL;
    size_t scratch_bytes = uform_gemm_scratch_bytes(gemm, dtype, M, N, K) + 64;
    uint16_t *a16 = malloc(sizeof(uint16_t) * M * K);
    CHECK_FATAL(a && w_f32 && plain && c && a16 && posix_memalign(&w, 4096, element * N * K) == 0 &&
                posix_memalign(&scratch, 64, scratch_bytes) == 0);
    for (size_t i = 0; i < (size_t)M * K; ++i) a[i] = uniform();
    if (dtype == uform_dtype_bf16_k) { /* the product multiplies A in bf16: the reference gets the same A */
        gemm->kernels->f32_to_bf16(a, a16, (size_t)M * K);
        gemm->kernels->bf16_to_f32(a16, a, (size_t)M * K);
    }

    /* Not pinned: the plain path. */
    fill(gemm->kernels, dtype, w, w_f32);
    uform_gemm_tile(gemm, M, N, K, a, K, w, dtype, K, plain, ldc, scratch);
    double error = worst_error(a, w_f32, 0, N, plain, ldc);
    printf("%s, not pinned: worst relative error %.2e\n", name, error);
    CHECK(error < tolerance);

    /* Pinned: packed on the first call, read packed on the second; both equal the plain path. */
    uform_gemm_pin(w, element * N * K);
    for (int call = 0; call < 2; ++call) {
        memset(c, 0, sizeof(float) * M * N);
        uform_gemm_tile(gemm, M, N, K, a, K, w, dtype, K, c, ldc, scratch);
        error = worst_error(a, w_f32, 0, N, c, ldc);
        printf("%s, pinned, call %d: worst relative error %.2e\n", name, call + 1, error);
        CHECK(error < tolerance);
    }
    size_t whole = uform_gemm_packed_bytes();
    printf("%s, pinned: %zu bytes packed\n", name, whole);
    CHECK(whole >= element * N * K);
    /* A column slice (as a tile of a column-split product: rows of the output apart). */
    memset(c, 0, sizeof(float) * M * N);
    uform_gemm_tile(gemm, M, 32, K, a, K, (char const *)w + 48 * K * element, dtype, K, c + 48, ldc, scratch);
    error = worst_error(a, w_f32, 48, 32, c + 48, ldc);
    printf("%s, pinned slice: worst relative error %.2e\n", name, error);
    CHECK(error < tolerance);
    if (dtype == uform_dtype_bf16_k) {
        float *from_f32 = malloc(sizeof(float) * M * N);
        CHECK_FATAL(from_f32 != NULL);
        uform_gemm_tile(gemm, M, N, K, a, K, w, dtype, K, from_f32, ldc, scratch);
        uform_gemm_tile_bf16(gemm, M, N, K, a16, K, (uint16_t const *)w, K, c, ldc);
        CHECK(memcmp(from_f32, c, sizeof(float) * M * N) == 0);
        free(from_f32);
    }

    CHECK(uform_gemm_packed_bytes() > whole); /* the slice: a copy of its own */
    /* Unpinned, new values at the same address, pinned again: the new values, never the old copy. */
    uform_gemm_unpin(w, element * N * K);
    CHECK(uform_gemm_packed_bytes() == 0);
    fill(gemm->kernels, dtype, w, w_f32);
    uform_gemm_pin(w, element * N * K);
    uform_gemm_tile(gemm, M, N, K, a, K, w, dtype, K, c, ldc, scratch);
    error = worst_error(a, w_f32, 0, N, c, ldc);
    printf("%s, re-pinned after new values: worst relative error %.2e\n", name, error);
    CHECK(error < tolerance);
    uform_gemm_tile(gemm, M, 32, K, a, K, (char const *)w + 48 * K * element, dtype, K, c + 48, ldc, scratch);
    CHECK(worst_error(a, w_f32, 48, 32, c + 48, ldc) < tolerance);

    /* Unpinned and changed again, not pinned: read as they are (and nothing packed). */
    uform_gemm_unpin(w, element * N * K);
    fill(gemm->kernels, dtype, w, w_f32);
    uform_gemm_tile(gemm, M, N, K, a, K, w, dtype, K, c, ldc, scratch);
    error = worst_error(a, w_f32, 0, N, c, ldc);
    printf("%s, unpinned after new values: worst relative error %.2e\n", name, error);
    CHECK(error < tolerance);
    CHECK(uform_gemm_packed_bytes() == 0);

    free(a), free(w_f32), free(plain), free(c), free(a16), free(w), free(scratch);
}

static float from_bf16(uint16_t value) {
    union { uint32_t u; float f; } bits = {.u = (uint32_t)value << 16};
    return bits.f;
}

/* The fused epilogues against double-precision references on the same bf16 inputs. `required`: the
 * class runs them (AMX); elsewhere a refusal is allowed, but must leave C untouched. */
static void check_fused(uform_gemm_t const *gemm, int required) {
    float *a = malloc(sizeof(float) * M * K), *w_f32 = malloc(sizeof(float) * N * K), *c = malloc(sizeof(float) * M * N);
    float *before = malloc(sizeof(float) * M * N), bias[N], gamma[N];
    uint16_t *a16 = malloc(sizeof(uint16_t) * M * K), *c16 = malloc(sizeof(uint16_t) * M * N);
    void *w = NULL;
    CHECK_FATAL(a && w_f32 && c && before && a16 && c16 && posix_memalign(&w, 4096, 2 * N * K) == 0);
    for (size_t i = 0; i < (size_t)M * K; ++i) a[i] = uniform();
    gemm->kernels->f32_to_bf16(a, a16, (size_t)M * K);
    gemm->kernels->bf16_to_f32(a16, a, (size_t)M * K);
    fill(gemm->kernels, uform_dtype_bf16_k, w, w_f32);
    for (size_t j = 0; j < N; ++j) bias[j] = uniform(), gamma[j] = 0.5f + uniform();
    for (int pinned = 0; pinned < 2; ++pinned) {
        if (pinned) uform_gemm_pin(w, 2 * N * K);
        for (int kind = 0; kind < 3; ++kind) { /* bias into bf16; bias + GELU into bf16; bias + LayerScale summed */
            uform_gemm_epilogue_t epilogue = {.bias = bias, .gelu = kind == 1, .scale = kind == 2 ? gamma : NULL,
                                              .accumulate = kind == 2, .bf16_out = kind != 2};
            for (size_t i = 0; i < (size_t)M * N; ++i) c[i] = uniform(), c16[i] = 0x7FC1; /* a NaN: seen if untouched */
            memcpy(before, c, sizeof(float) * M * N);
            int done = uform_gemm_tile_bf16_fused(gemm, M, N, K, a16, K, (uint16_t const *)w, K, kind == 2 ? (void *)c : c16,
                                                  N, &epilogue);
            if (!done) {
                printf("fused kind %d, pinned %d: refused by this class\n", kind, pinned);
                CHECK(!required);
                CHECK(memcmp(before, c, sizeof(float) * M * N) == 0);
                for (size_t i = 0; i < (size_t)M * N; ++i) CHECK(c16[i] == 0x7FC1);
                continue;
            }
            double worst = 0;
            for (size_t i = 0; i < M; ++i)
                for (size_t j = 0; j < N; ++j) {
                    double sum = bias[j], magnitude = fabs(bias[j]);
                    for (size_t p = 0; p < K; ++p)
                        sum += (double)a[i * K + p] * (double)w_f32[j * K + p], magnitude += fabs(a[i * K + p] * w_f32[j * K + p]);
                    double want = kind == 0 ? sum
                                : kind == 1 ? 0.5 * sum * (1.0 + erf(sum / sqrt(2.0)))
                                            : (double)before[i * N + j] + (double)gamma[j] * sum;
                    if (kind == 2) magnitude = fabs(before[i * N + j]) + fabs(gamma[j]) * magnitude;
                    double got = kind == 2 ? (double)c[i * N + j] : (double)from_bf16(c16[i * N + j]);
                    /* f32 sums: 1e-5 of the terms' magnitude; a bf16 C also half an ulp of its 8 bits */
                    double error = fabs(got - want), bound = 1e-5 * magnitude + (kind == 2 ? 0 : fabs(want) / 256);
                    worst = error / (bound > 0 ? bound : 1) > worst ? error / (bound > 0 ? bound : 1) : worst;
                    if (error > bound) CHECK(error <= bound);
                }
            printf("fused kind %d, pinned %d: worst error %.2f of its bound\n", kind, pinned, worst);
        }
        if (pinned) uform_gemm_unpin(w, 2 * N * K);
    }
    /* Refusals, C untouched: a strided C, a sum into bf16, fusing switched off. */
    uform_gemm_epilogue_t sum16 = {.bias = bias, .accumulate = 1, .bf16_out = 1}, plain = {.bias = bias};
    uform_gemm_t off = *gemm;
    off.fused = 0;
    for (size_t i = 0; i < (size_t)M * N; ++i) c[i] = uniform();
    memcpy(before, c, sizeof(float) * M * N);
    CHECK(uform_gemm_tile_bf16_fused(gemm, M, 32, K, a16, K, (uint16_t const *)w, K, c, N, &plain) == 0);
    CHECK(uform_gemm_tile_bf16_fused(gemm, M, N, K, a16, K, (uint16_t const *)w, K, c, N, &sum16) == 0);
    CHECK(uform_gemm_tile_bf16_fused(&off, M, N, K, a16, K, (uint16_t const *)w, K, c, N, &plain) == 0);
    CHECK(memcmp(before, c, sizeof(float) * M * N) == 0);
    free(a), free(w_f32), free(c), free(before), free(a16), free(c16), free(w);
}

/* ---- f32 through oneDNN's packed GEMM ---- */

/* 1,024 columns and their halves pad at most 1.4 times in oneDNN's packed layouts for AVX2 and
 * AVX-512 alike (its AVX-512 layout pads columns to blocks of 512: 576 would pad 1.8 times and stay
 * plain), so the whole and the half are packed on every class that runs this. */
enum { SN = 1024, SK = 96, SM = 600, SLDA = SK + 8, SLDC = SN + 16 };

/* The worst |got - want| over |want|'s largest, of `rows` rows of C = A W^T over columns [j0, j0 + n). */
static double sgemm_error(float const *a, float const *w, size_t rows, size_t j0, size_t n, float const *c) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < n; ++j) {
            double want = 0;
            for (size_t p = 0; p < SK; ++p) want += (double)a[i * SLDA + p] * (double)w[(j0 + j) * SK + p];
            worst = fmax(worst, fabs(want - (double)c[i * SLDC + j]));
            scale = fmax(scale, fabs(want));
        }
    return worst / scale;
}

typedef struct racer_t {
    uform_gemm_t const *gemm;
    float const *a, *w;
    float *c;
    size_t j0, n;
} racer_t;

static void *race(void *opaque) {
    racer_t *r = (racer_t *)opaque;
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    for (int round = 0; round < 20; ++round)
        uform_gemm_tile(r->gemm, 64, r->n, SK, r->a, SLDA, r->w + r->j0 * SK, uform_dtype_f32_k, SK, r->c, SLDC, NULL);
    uform_gemm_thread_leave(&previous);
    return NULL;
}

static void check_sgemm_packed(uform_gemm_t const *gemm) {
    float *a = malloc(sizeof(float) * SM * SLDA), *w = NULL, *c = malloc(sizeof(float) * SM * SLDC);
    CHECK_FATAL(a && c && posix_memalign((void **)&w, 4096, sizeof(float) * SN * SK) == 0);
    for (size_t i = 0; i < (size_t)SM * SLDA; ++i) a[i] = uniform();
    for (size_t i = 0; i < (size_t)SN * SK; ++i) w[i] = uniform();
    size_t const rows[] = {1, 7, 64, 512, 600};
    /* Not pinned: the plain path, nothing packed. */
    uform_gemm_tile(gemm, 64, SN, SK, a, SLDA, w, uform_dtype_f32_k, SK, c, SLDC, NULL);
    CHECK(sgemm_error(a, w, 64, 0, SN, c) < 1e-5);
    CHECK(uform_gemm_packed_bytes() == 0);
    /* Pinned: packed on first use, the same values for any rows, twice. */
    uform_gemm_pin(w, sizeof(float) * SN * SK);
    for (int call = 0; call < 2; ++call)
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
            for (size_t i = 0; i < (size_t)SM * SLDC; ++i) c[i] = NAN;
            uform_gemm_tile(gemm, rows[r], SN, SK, a, SLDA, w, uform_dtype_f32_k, SK, c, SLDC, NULL);
            double error = sgemm_error(a, w, rows[r], 0, SN, c);
            if (call) printf("sgemm packed, %zu rows: worst relative error %.2e\n", rows[r], error);
            CHECK(error < 1e-5);
            CHECK(rows[r] == SM || isnan(c[rows[r] * SLDC])); /* nothing past the rows, nor between (below) */
            CHECK(isnan(c[SN]));
        }
    size_t whole = uform_gemm_packed_bytes();
    printf("sgemm packed: %zu bytes for %zu of weights\n", whole, sizeof(float) * SN * SK);
    CHECK(whole >= sizeof(float) * SN * SK && whole <= 2 * sizeof(float) * SN * SK);
    /* A slice of 512 columns: a copy of its own; one of 64: left plain (its layout would pad 8 times). */
    uform_gemm_tile(gemm, 64, 512, SK, a, SLDA, w + 512 * SK, uform_dtype_f32_k, SK, c, SLDC, NULL);
    CHECK(sgemm_error(a, w, 64, 512, 512, c) < 1e-5);
    size_t sliced = uform_gemm_packed_bytes();
    CHECK(sliced > whole);
    uform_gemm_tile(gemm, 64, 64, SK, a, SLDA, w + 128 * SK, uform_dtype_f32_k, SK, c, SLDC, NULL);
    CHECK(sgemm_error(a, w, 64, 128, 64, c) < 1e-5);
    CHECK(uform_gemm_packed_bytes() == sliced);
    /* Unpinned, new values at the same address, pinned again: the new values, never the old copy. */
    uform_gemm_unpin(w, sizeof(float) * SN * SK);
    CHECK(uform_gemm_packed_bytes() == 0);
    for (size_t i = 0; i < (size_t)SN * SK; ++i) w[i] = uniform();
    uform_gemm_pin(w, sizeof(float) * SN * SK);
    uform_gemm_tile(gemm, 64, SN, SK, a, SLDA, w, uform_dtype_f32_k, SK, c, SLDC, NULL);
    CHECK(sgemm_error(a, w, 64, 0, SN, c) < 1e-5);
    uform_gemm_unpin(w, sizeof(float) * SN * SK);
    CHECK(uform_gemm_packed_bytes() == 0);

    /* 8 threads at once, first use included: 4 on the whole product, 4 on the two halves. */
    for (size_t i = 0; i < (size_t)SN * SK; ++i) w[i] = uniform();
    uform_gemm_pin(w, sizeof(float) * SN * SK);
    enum { RACERS = 8 };
    float *outs[RACERS];
    racer_t racers[RACERS];
    pthread_t threads[RACERS];
    for (size_t t = 0; t < RACERS; ++t) {
        outs[t] = malloc(sizeof(float) * 64 * SLDC);
        CHECK_FATAL(outs[t] != NULL);
        size_t half = t % 4 == 3 ? 1 : 0;
        racers[t] = (racer_t){gemm, a, w, outs[t], t < 4 ? 0 : half * 512, t < 4 ? SN : 512};
        CHECK_FATAL(pthread_create(&threads[t], NULL, race, &racers[t]) == 0);
    }
    for (size_t t = 0; t < RACERS; ++t) {
        pthread_join(threads[t], NULL);
        CHECK(sgemm_error(a, w, 64, racers[t].j0, racers[t].n, outs[t]) < 1e-5);
        free(outs[t]);
    }
    printf("sgemm packed: 8 racing threads, %zu bytes packed\n", uform_gemm_packed_bytes());
    CHECK(uform_gemm_packed_bytes() > whole); /* the whole product and a half: one copy each */
    uform_gemm_unpin(w, sizeof(float) * SN * SK);
    CHECK(uform_gemm_packed_bytes() == 0);
    free(a), free(c), free(w);
}

int main(void) {
    uform_cpu_class_t cpu_class;
    CHECK_FATAL(uform_cpu_detect(&cpu_class, NULL) == uform_status_ok_k);
    uform_gemm_t gemm = uform_gemm_for(cpu_class);
    if (!gemm.use_library) {
        printf("SKIP: SERIAL class, no library products\n");
        return 77;
    }
    gemm.matmul = 1;
    uform_gemm_thread_t previous;
    uform_gemm_thread_enter(&previous);
    check_dtype(&gemm, uform_dtype_f32_k);
    if (uform_gemm_takes_bf16(&gemm, uform_dtype_bf16_k)) check_dtype(&gemm, uform_dtype_bf16_k);
    else printf("bf16: this class widens bf16 weights (never packed: not checked)\n");
    gemm.fused = 1;
    if (uform_gemm_takes_bf16(&gemm, uform_dtype_bf16_k)) check_fused(&gemm, uform_kernels_amx_bf16(cpu_class));
    else { /* no native bf16: every fused call refused */
        uint16_t a16[K] = {0}, w16[K] = {0};
        float c[1] = {42.0f};
        uform_gemm_epilogue_t plain = {0};
        CHECK(uform_gemm_tile_bf16_fused(&gemm, 1, 1, K, a16, K, w16, K, c, 1, &plain) == 0 && c[0] == 42.0f);
        printf("fused: refused without native bf16, as it must be\n");
    }
    printf("matmul primitives: %s\n", uform_gemm_matmul_impl() ? uform_gemm_matmul_impl() : "none");
    uform_gemm_t functions = uform_gemm_for(cpu_class);
    functions.matmul = 0, functions.fused = 0, functions.mlp_planes = 0;
    char const *budget = getenv("UFORM_GEMM_PACK_MIB");
    if (uform_gemm_sgemm_packs()) check_sgemm_packed(&functions);
    else {
        printf("sgemm packed: not here (%s)\n", budget && !strcmp(budget, "0") ? "UFORM_GEMM_PACK_MIB=0" : "libdnnl lacks it");
        CHECK(budget && !strcmp(budget, "0")); /* Debian's libdnnl 2.6 exports it */
    }
    uform_gemm_thread_leave(&previous);
    return check_failures ? 1 : 0;
}
