/**
 *  @file   test_format_float.c
 *  @brief  tools/format_float.h (the JSON rows of `uform encode`) against glibc's "%.9g", byte for
 *          byte: random bit patterns over every float32, the first and last 4,096 floats of every
 *          binade, the floats around every power of ten from 1e-6 to 1e10, every rounding tie (ten
 *          significant digits ending in 5, half to even) of several decades, both signs, zeros,
 *          subnormals, infinities and NaN.
 *
 *      test_format_float            the sample above (a few seconds)
 *      test_format_float --all      every float32 of both signs (minutes; bench/RESULTS.md)
 */
#include "check.h"

#include "../tools/format_float.h"

#include <math.h>
#include <stdint.h>

static size_t compared = 0, mismatches = 0;

static void compare(float value) {
    char ours[FORMAT_FLOAT_CAPACITY], theirs[64];
    int const length = format_float_g9(ours, value);
    int const expected = snprintf(theirs, sizeof theirs, "%.9g", (double)value);
    ++compared;
    if (length != expected || strcmp(ours, theirs) != 0) {
        if (++mismatches <= 20) {
            uint32_t bits;
            memcpy(&bits, &value, sizeof bits);
            fprintf(stderr, "0x%08x: format_float_g9 wrote \"%s\" (%d), printf \"%s\" (%d)\n", (unsigned)bits, ours, length,
                    theirs, expected);
        }
    }
}

static void compare_bits(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    compare(value);
}

static uint64_t random_state = 0x9E3779B97F4A7C15ull;
static uint32_t random_bits(void) {
    random_state ^= random_state << 13, random_state ^= random_state >> 7, random_state ^= random_state << 17;
    return (uint32_t)(random_state >> 16);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--all")) {
        for (uint64_t bits = 0; bits <= UINT32_MAX; ++bits) compare_bits((uint32_t)bits);
        printf("test_format_float --all: %zu floats, %zu differ\n", compared, mismatches);
        return mismatches != 0;
    }
    /* Special values. */
    float const specials[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, -1e-45f, 1.17549435e-38f, 3.40282347e38f,
                              1.f, -1.f, 0.1f, 0.0001f, 9.99999997e-5f, 6.10351562e-5f, 999999999.f, 1e9f, 1073741824.f,
                              1.001953125f, 123456789.f, 99999999.f, 100000000.f, 0.5f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) compare(specials[i]);
    /* Random bit patterns over everything. */
    for (int i = 0; i < 1000000; ++i) compare_bits(random_bits());
    /* The ends of every binade, both signs. */
    for (uint32_t exponent = 0; exponent < 255; ++exponent)
        for (uint32_t k = 0; k < 4096; ++k) {
            uint32_t const low = exponent << 23 | k, high = exponent << 23 | (0x7FFFFFu - k);
            compare_bits(low), compare_bits(high), compare_bits(low | 0x80000000u);
        }
    /* Around every power of ten the fast range's decimal exponent may be wrong by one. */
    for (int e = -6; e <= 10; ++e) {
        float const power = (float)pow(10.0, e);
        uint32_t bits;
        memcpy(&bits, &power, sizeof bits);
        for (int k = -20000; k <= 20000; ++k) compare_bits(bits + (uint32_t)k), compare_bits((bits + (uint32_t)k) | 0x80000000u);
    }
    /* Ties: i / 2^k with i odd has k fraction digits ending in 5; with 10 - k digits before the point
     * (or, below 1, k - 1 leading digits after "0.") it has ten significant digits, so "%.9g" rounds
     * half to even. Decades 0.01 to 1e6, up to 20,000 ties each (an even stride keeps i odd). */
    for (int k = 4; k <= 11; ++k) {
        double const step = ldexp(1.0, -k);
        double const from = k <= 9 ? pow(10.0, 9 - k) : k == 10 ? 0.1 : 0.01, to = from * 10.0;
        double const count = (to - from) / step, stride = count > 40000.0 ? 2.0 * floor(count / 40000.0) : 2.0;
        size_t ties = 0;
        for (double i = 2.0 * floor(from / step / 2.0) + 1.0; i * step < to; i += stride) {
            float const value = (float)(i * step);
            if (i * step < from || (double)value != i * step) continue; /* below the decade, or not a float32 */
            compare(value), compare(-value), ++ties;
        }
        if (ties <= 40) fprintf(stderr, "only %zu ties for k = %d\n", ties, k);
        CHECK(ties > 40);
    }
    printf("test_format_float: %zu floats compared with printf's \"%%.9g\", %zu differ\n", compared, mismatches);
    CHECK(mismatches == 0);
    return check_failures != 0;
}
