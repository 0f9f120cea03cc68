/**
 *  @file   format_float.h
 *  @brief  `printf("%.9g", (double)value)` for a float32, byte for byte, seven to ten times faster:
 *          the JSON rows of `uform encode` (nine significant digits read back as the same float32).
 *
 *  glibc's `printf` spends 230-360 ns on one "%.9g" (Sapphire Rapids cores), so one thread formats
 *  7,000-11,000 rows of 384 numbers a second, a tenth of what one GPU encodes. Here normal floats
 *  from 2^-14 to below 2^30 that `%g` prints in fixed notation (decimal exponent X from -4 to 8 after
 *  rounding to nine digits) are formatted with integer arithmetic: such a float is m 2^q (m < 2^24,
 *  q from -37 to 6), so N = m 10^(8 - X) 2^q is computed exactly in 64 bits and rounded to an integer
 *  half to even, as glibc rounds the exact binary value in the default rounding mode; X comes from
 *  the binary exponent (a binade holds at most one power of ten) and is corrected by one when N has
 *  ten digits; the nine digits of N are printed with the point after X + 1 of them and the
 *  fraction's trailing zeros dropped, as `%g` does. Everything else (zeros, subnormals, values below
 *  2^-14 or from 2^30 up, those rounding outside X in [-4, 8], infinities, NaN) goes to `snprintf`.
 *  test/test_format_float.c compares both on a sample (every binade's ends, around every power of
 *  ten, the rounding ties, random bits); `test_format_float --all` on every float32 (bench/RESULTS.md).
 *  bench/bench_format_float.c times both.
 */
#ifndef UFORM_FORMAT_FLOAT_H
#define UFORM_FORMAT_FLOAT_H

#include <stdint.h> // `uint64_t`
#include <stdio.h>  // `snprintf`
#include <string.h> // `memcpy`

/** Bytes `format_float_g9` may write, its NUL included ("-1.23456789e-38" and the like). */
#define FORMAT_FLOAT_CAPACITY 24

static inline uint64_t format_float_power10(int p) {
    static uint64_t const powers[] = {1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
                                      100000000ull, 1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull,
                                      10000000000000ull};
    return powers[p];
}

/** m 10^p 2^q rounded to an integer, half to even (p in [0, 12], q in [-37, 6] with q <= 0 once
 *  p > 2, m < 2^24: the product stays below 2^64). */
static inline uint64_t format_float_scaled(uint32_t m, int p, int q) {
    uint64_t const a = (uint64_t)m * format_float_power10(p);
    if (q >= 0) return a << q;
    uint64_t const n = a >> -q, rest = a & ((1ull << -q) - 1), half = 1ull << (-q - 1);
    return n + (rest > half || (rest == half && (n & 1)));
}

/**
 *  @brief Writes `value` as `snprintf(out, FORMAT_FLOAT_CAPACITY, "%.9g", (double)value)` would, NUL
 *  included; returns the characters written before the NUL.
 */
static inline int format_float_g9(char *out, float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    uint32_t const exponent_bits = (bits >> 23) & 0xFF;
    /* Fast range: normal floats from 2^-14 (6.1e-5) to below 2^30 (1.07e9); the rest, and values
     * there that round outside X in [-4, 8], take `snprintf`. */
    if (exponent_bits < 127 - 14 || exponent_bits >= 127 + 30)
        return snprintf(out, FORMAT_FLOAT_CAPACITY, "%.9g", (double)value);
    uint32_t const m = (bits & 0x7FFFFFu) | 0x800000u;
    int const binary = (int)exponent_bits - 127, q = binary - 23; /* value = m 2^q, in [2^binary, 2^(binary+1)) */
    /* floor(log10(2^binary)), exact for |binary| < 1,000; a binade holds at most one power of ten, so
     * X is that or one more, which the first product tells (n of ten digits). */
    int x = binary >= 0 ? binary * 1233 / 4096 : -((-binary * 1233 + 4095) / 4096);
    uint64_t n = 0;
    for (int attempt = 0;; ++attempt) {
        if (x < -4 || x > 8 || attempt == 2) return snprintf(out, FORMAT_FLOAT_CAPACITY, "%.9g", (double)value);
        n = format_float_scaled(m, 8 - x, q);
        if (n >= 1000000000ull) ++x;    /* the value is at least 10^(x + 1), or rounds up to it */
        else if (n < 100000000ull) --x; /* never with the estimate below; kept as a guard */
        else break;
    }
    static char const pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                "8081828384858687888990919293949596979899";
    char digits[10];
    uint32_t rest = (uint32_t)n;
    for (int i = 8; i > 0; i -= 2) {
        uint32_t const pair = rest % 100;
        rest /= 100;
        digits[i - 1] = pairs[2 * pair], digits[i] = pairs[2 * pair + 1];
    }
    digits[0] = (char)('0' + rest);
    int const before_point = x >= 0 ? x + 1 : 0; /* digits before the point; the rest are the fraction's */
    int last = 8;                                 /* the last digit kept: the fraction's trailing zeros go */
    while (last >= before_point && last > 0 && digits[last] == '0') --last;
    char *cursor = out;
    *cursor = '-';
    cursor += bits >> 31;
    if (x >= 0) {
        memcpy(cursor, digits, 9);
        if (last >= before_point) { /* the point, then the fraction's kept digits */
            memmove(cursor + before_point + 1, cursor + before_point, (size_t)(last + 1 - before_point));
            cursor[before_point] = '.';
            cursor += last + 2;
        }
        else cursor += before_point;
    }
    else {
        memcpy(cursor, "0.0000", 6); /* "0." and -x - 1 zeros (at most 3) */
        cursor += 2 + (-x - 1);
        memcpy(cursor, digits, 9);
        cursor += last + 1;
    }
    *cursor = '\0';
    return (int)(cursor - out);
}

#endif // UFORM_FORMAT_FLOAT_H
