/**
 *  @file   strict_number.h
 *  @brief  The one strict parser of numeric command-line options, shared by the `uform` program and
 *          the benchmarks: a value is accepted only when the whole text is a number in range.
 *
 *  `strtoull` alone accepts "-1" (as 2^64 - 1), leading spaces, "+5" and a trailing "abc" when the
 *  end pointer is not checked; `strtod` accepts "nan", "inf" and hexadecimal floats. Here a count is
 *  plain decimal digits (no sign, no space, no prefix), optionally followed by one binary suffix
 *  where the caller allows it, and must not overflow; a real is a finite decimal in a closed range.
 *  Callers print their usage and exit 2 when a parser returns false.
 */
#ifndef UFORM_STRICT_NUMBER_H
#define UFORM_STRICT_NUMBER_H

#include <errno.h>   // `errno`
#include <math.h>    // `isfinite`
#include <stdbool.h> // `bool`
#include <stdint.h>  // `SIZE_MAX`
#include <stdlib.h>  // `strtod`
#include <string.h>  // `strspn`

/**
 *  @brief Parses a count: one or more decimal digits, then (when `suffixes`) an optional K, M or G
 *  (binary: 2^10, 2^20, 2^30, either case), nothing else. The value must lie in [minimum, maximum].
 *  `*value` is written only on success.
 */
static inline bool strict_count(char const *text, size_t minimum, size_t maximum, bool suffixes, size_t *value) {
    if (!text || text[0] < '0' || text[0] > '9') return false;
    size_t number = 0;
    char const *cursor = text;
    for (; *cursor >= '0' && *cursor <= '9'; ++cursor) {
        size_t const digit = (size_t)(*cursor - '0');
        if (number > (SIZE_MAX - digit) / 10) return false; // overflow
        number = number * 10 + digit;
    }
    size_t scale = 1;
    if (suffixes && *cursor) {
        switch (*cursor) {
        case 'K': case 'k': scale = (size_t)1 << 10; break;
        case 'M': case 'm': scale = (size_t)1 << 20; break;
        case 'G': case 'g': scale = (size_t)1 << 30; break;
        default: return false;
        }
        ++cursor;
    }
    if (*cursor || (number && number > SIZE_MAX / scale)) return false;
    number *= scale;
    if (number < minimum || number > maximum) return false;
    *value = number;
    return true;
}

/** @brief Parses a finite decimal real (digits, one optional point, an optional exponent; a leading
 *  minus only when `minimum` is negative) in [minimum, maximum]. */
static inline bool strict_real(char const *text, double minimum, double maximum, double *value) {
    if (!text || !*text) return false;
    char const *start = text + (text[0] == '-');
    if (start == text + 1 && minimum >= 0) return false;
    // Only the characters of a plain decimal: no "nan", "inf", hexadecimal or spaces.
    if (*start < '0' || *start > '9' || strspn(start, "0123456789.eE+-") != strlen(start)) return false;
    char *end = NULL;
    errno = 0;
    double const number = strtod(text, &end);
    if (errno || !end || *end || !isfinite(number) || number < minimum || number > maximum) return false;
    *value = number;
    return true;
}

#endif // UFORM_STRICT_NUMBER_H
