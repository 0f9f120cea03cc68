/**
 *  @file   test_attention_bf16.c
 *  @brief  The bf16 attention kernels (`uform_attention_bf16_for`, src/kernels/attention_bf16.c):
 *          AVX-512 BF16 where the CPU has it, AMX tiles where the detected class has them, each
 *          against the same arithmetic in double: S = scale Q K^T of bf16 rows, softmax, P rounded to
 *          bf16, O = P V. Every remainder the kernels' blocks have (rows not a multiple of 4 or 16,
 *          keys not a multiple of 16, 32 or 64, heads of 32, 64, 96, 128, 256), strided rows (Q, K
 *          and V of one head inside [tokens][3 dim] as the passes hold them), output rows strided
 *          with the other heads' columns untouched, the scratch it asks for never overrun, and the
 *          refusals (0 and nothing written) for heads they do not serve. Skipped (77) where the CPU
 *          has no AVX-512 BF16.
 */
#include "check.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float bf16_value(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t bf16_bits(float f) { /* round to nearest even, as the kernels' f32_to_bf16 */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/** The reference: double sums of the bf16 values, softmax in double, P rounded to bf16. */
static void reference(uint16_t const *q, uint16_t const *k, uint16_t const *v, size_t ld, size_t rows, size_t length,
                      size_t head, float scale, double *out) {
    double *s = malloc(length * sizeof(double));
    for (size_t i = 0; i < rows; ++i) {
        double highest = -INFINITY;
        for (size_t j = 0; j < length; ++j) {
            double dot = 0;
            for (size_t c = 0; c < head; ++c) dot += (double)bf16_value(q[i * ld + c]) * bf16_value(k[j * ld + c]);
            s[j] = dot * scale;
            highest = s[j] > highest ? s[j] : highest;
        }
        double total = 0;
        for (size_t j = 0; j < length; ++j) total += (s[j] = exp(s[j] - highest));
        for (size_t c = 0; c < head; ++c) out[i * head + c] = 0;
        for (size_t j = 0; j < length; ++j) {
            double p = bf16_value(bf16_bits((float)(s[j] / total)));
            for (size_t c = 0; c < head; ++c) out[i * head + c] += p * bf16_value(v[j * ld + c]);
        }
    }
    free(s);
}

static uint64_t state = 0x9E3779B97F4A7C15ull;
static float uniform(void) { /* splitmix64 in [-1, 1) */
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull, z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/** One case: `heads` heads of `head` in [length][3 dim] rows, queries [first, first + rows) of head `h`. */
static double run_case(uform_attention_bf16_t attention, size_t length, size_t head,
                       size_t heads, size_t h, size_t first, size_t rows, float spread) {
    size_t const dim = heads * head, ld = 3 * dim;
    uint16_t *qkv = malloc(length * ld * 2);
    for (size_t i = 0; i < length * ld; ++i) qkv[i] = bf16_bits(uniform() * spread);
    size_t const packed_bytes = uform_attention_bf16_bytes(rows, length, head);
    unsigned char *packed = aligned_alloc(64, (packed_bytes + 64 + 63) / 64 * 64);
    float *out = malloc(rows * dim * sizeof(float));
    double *expected = malloc(rows * head * sizeof(double));
    memset(packed + packed_bytes, 0xA5, 64); /* a fence after the bytes it asked for */
    for (size_t i = 0; i < rows * dim; ++i) out[i] = -7.0f;
    uint16_t const *q = qkv + first * ld + h * head, *k = qkv + dim + h * head, *v = qkv + 2 * dim + h * head;
    float const scale = 1.0f / sqrtf((float)head);
    CHECK(attention(q, k, v, ld, rows, length, head, scale, packed, out + h * head, dim) == 1);
    reference(q, k, v, ld, rows, length, head, scale, expected);
    double worst = 0;
    for (size_t i = 0; i < rows; ++i)
        for (size_t c = 0; c < dim; ++c) {
            float got = out[i * dim + c];
            if (c < h * head || c >= (h + 1) * head) CHECK(got == -7.0f); /* other heads' columns untouched */
            else {
                double error = fabs(got - expected[i * head + c - h * head]);
                worst = error > worst ? error : worst;
            }
        }
    for (size_t i = 0; i < 64; ++i) CHECK(packed[packed_bytes + i] == 0xA5);
    free(qkv), free(packed), free(out), free(expected);
    return worst;
}

/** Every case of one kernel; returns its worst error (and the peaked case's through `peaked`). */
static double run_kernel(uform_attention_bf16_t attention, char const *name, double *peaked) {
    /* Every remainder: rows 1-17 and a ViT's 197, keys 1 to 257, heads 32 to 256, one head of several. */
    size_t const lengths[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 197, 257};
    size_t const heads_wide[] = {32, 64, 96, 128, 256};
    double worst = 0;
    size_t cases = 0;
    for (size_t a = 0; a < sizeof lengths / sizeof lengths[0]; ++a)
        for (size_t b = 0; b < sizeof heads_wide / sizeof heads_wide[0]; ++b) {
            size_t const length = lengths[a], head = heads_wide[b];
            size_t const rows_choices[] = {1, 3, 4, 5, 9, 16, 17, length};
            for (size_t r = 0; r < sizeof rows_choices / sizeof rows_choices[0]; ++r) {
                size_t rows = rows_choices[r] < length ? rows_choices[r] : length, first = length - rows;
                double error = run_case(attention, length, head, 3, 1, first, rows, 1.0f);
                worst = error > worst ? error : worst, ++cases;
            }
        }
    /* Large scores (a peaked softmax): P near one-hot, still within bf16's rounding of P. */
    *peaked = run_case(attention, 197, 64, 6, 5, 0, 197, 4.0f);
    printf("attention_bf16 %s: %zu cases, worst |out - reference| %.2e; peaked scores %.2e\n", name, cases, worst, *peaked);
    return worst;
}

/** Refusals: heads that are not multiples of 32 up to 256, no rows, no keys; nothing written. */
static void refusals(uform_attention_bf16_t attention) {
    uform_attention_bf16_t const kernel = attention;
    static uint16_t rows16[3 * 288];
    static unsigned char packed[4096];
    float out[288];
    for (size_t i = 0; i < 288; ++i) out[i] = -7.0f;
    size_t const refused_heads[] = {16, 48, 288};
    for (size_t i = 0; i < 3; ++i) CHECK(kernel(rows16, rows16, rows16, 288, 1, 1, refused_heads[i], 1.0f, packed, out, 288) == 0);
    CHECK(kernel(rows16, rows16, rows16, 64, 0, 1, 64, 1.0f, packed, out, 64) == 0);
    CHECK(kernel(rows16, rows16, rows16, 64, 1, 0, 64, 1.0f, packed, out, 64) == 0);
    for (size_t i = 0; i < 288; ++i) CHECK(out[i] == -7.0f);
}

int main(void) {
    uform_cpu_class_t cpu_class = uform_cpu_class_serial_k;
    CHECK_OK(uform_cpu_detect(&cpu_class, NULL));
#if defined(__x86_64__) && defined(__GNUC__)
    int const has = __builtin_cpu_supports("avx512bf16");
#else
    int const has = 0;
#endif
    CHECK(uform_attention_bf16_for(0, 0) == NULL);
    uform_attention_bf16_t const avx512 = uform_attention_bf16_for(1, 0);
    if (!avx512 || !has || !uform_kernels_native_bf16(cpu_class)) {
        printf("SKIPPED: class %s has no AVX-512 BF16 attention kernel here\n", uform_cpu_class_name(cpu_class));
        return check_failures ? 1 : 77;
    }
    /* bf16 P carries a relative error of 2^-9; the outputs are averages of values in [-1, 1]. */
    double peaked = 0;
    CHECK(run_kernel(avx512, "AVX-512 BF16", &peaked) < 4e-3);
    CHECK(peaked < 1.6e-2);
    refusals(avx512);
    if (uform_kernels_amx_bf16(cpu_class)) {
        uform_attention_bf16_t const amx = uform_attention_bf16_for(1, 1);
        CHECK_FATAL(amx != NULL && amx != avx512);
        CHECK(run_kernel(amx, "AMX", &peaked) < 4e-3);
        CHECK(peaked < 1.6e-2);
        refusals(amx);
    } else printf("attention_bf16 AMX: not run (class %s has no AMX tiles)\n", uform_cpu_class_name(cpu_class));
    return check_failures ? 1 : 0;
}
