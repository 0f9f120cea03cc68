/**
 *  @file   test_unicode.c
 *  @brief  The tokenizers' normaliser (`uform_normalize`, src/text/unicode.c) on runs of combining
 *          marks: canonical ordering is a stable sort of each run of non-starters by combining class,
 *          for short runs (insertion) and long ones (counting), equal classes keeping their order;
 *          then composition (NFC) across a reordered mark. Long runs come only from crafted text
 *          ("a" and thousands of alternating marks), which used to take quadratic time; the results
 *          are checked here, not the time.
 */
#include "check.h"
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

/** Normalises `in` and checks the result is `expected`. */
static void check_form(uint32_t const *in, size_t count, uform_normal_form_t form, uint32_t const *expected,
                       size_t expected_count, char const *label) {
    uint32_t *out = malloc(uform_normalize_capacity(in, count, form) * sizeof(uint32_t));
    CHECK_FATAL(out != NULL);
    size_t const got = uform_normalize(in, count, form, out);
    if (got != expected_count || memcmp(out, expected, got * sizeof(uint32_t))) {
        fprintf(stderr, "%s: %zu code points, expected %zu\n", label, got, expected_count);
        ++check_failures;
    }
    free(out);
}

/** "a" and `pairs` repeats of `marks` (four marks: two of class 230, two of class 220): NFD keeps
 *  "a", then every class-220 mark in input order, then every class-230 mark in input order. */
static void check_marks(size_t pairs) {
    uint32_t const marks[4] = {0x0301, 0x0316, 0x0300, 0x0317}; // 230, 220, 230, 220
    size_t const count = 1 + 4 * pairs;
    uint32_t *in = malloc(count * sizeof(uint32_t)), *expected = malloc(count * sizeof(uint32_t));
    CHECK_FATAL(in && expected);
    in[0] = expected[0] = 'a';
    for (size_t p = 0; p < pairs; p++)
        for (size_t m = 0; m < 4; m++) in[1 + 4 * p + m] = marks[m];
    size_t e = 1;
    for (size_t p = 0; p < pairs; p++) expected[e++] = 0x0316, expected[e++] = 0x0317;
    for (size_t p = 0; p < pairs; p++) expected[e++] = 0x0301, expected[e++] = 0x0300;
    char label[64];
    snprintf(label, sizeof label, "NFD of a and %zu marks", 4 * pairs);
    check_form(in, count, uform_nfd_k, expected, count, label);
    free(in), free(expected);
}

int main(void) {
    size_t const pairs[] = {1, 2, 7, 8, 9, 100, 25000}; // runs of 4 to 100,000 marks: both sorts
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) check_marks(pairs[i]);
    /* Two runs split by a starter sort apart; a starter never moves. */
    uint32_t const split[] = {'x', 0x0301, 0x0316, 'y', 0x0301, 0x0316, 0x0316};
    uint32_t const split_nfd[] = {'x', 0x0316, 0x0301, 'y', 0x0316, 0x0316, 0x0301};
    check_form(split, 7, uform_nfd_k, split_nfd, 7, "NFD of two runs");
    /* NFC: "a" U+0301 U+0316 reorders to "a" U+0316 U+0301, then a + U+0301 composes to U+00E1
     * (U+0316, of a lower class, does not block it), as Python's unicodedata.normalize gives. */
    uint32_t const acute[] = {'a', 0x0301, 0x0316};
    uint32_t const acute_nfc[] = {0x00E1, 0x0316};
    check_form(acute, 3, uform_nfc_k, acute_nfc, 2, "NFC of a, U+0301, U+0316");
    /* The composition exclusions added after Unicode 3.0 stay decomposed under NFC and NFKC, as
     * Unicode's NormalizationTest.txt and `tokenizers` have them: U+1D15E is U+1D157 U+1D165,
     * U+2ADC is U+2ADD U+0338, U+1D1C0 is U+1D1BA U+1D165 U+1D16F. */
    uint32_t const half[] = {0x1D15E}, half_nfc[] = {0x1D157, 0x1D165};
    uint32_t const forking[] = {0x2ADC}, forking_nfc[] = {0x2ADD, 0x0338};
    uint32_t const fusa[] = {0x1D1C0}, fusa_nfc[] = {0x1D1BA, 0x1D165, 0x1D16F};
    for (int compatibility = 0; compatibility < 2; ++compatibility) {
        uform_normal_form_t const form = compatibility ? uform_nfkc_k : uform_nfc_k;
        check_form(half, 1, form, half_nfc, 2, "NFC/NFKC of U+1D15E");
        check_form(forking, 1, form, forking_nfc, 2, "NFC/NFKC of U+2ADC");
        check_form(fusa, 1, form, fusa_nfc, 3, "NFC/NFKC of U+1D1C0");
        /* U+11A7 after an LV syllable stays (utf8proc 2.8 composed the pair into the syllable alone);
         * a real final (U+11A8) still composes: U+AC00 U+11A8 is U+AC01. */
        uint32_t const lv_11a7[] = {0xAC00, 0x11A7}, lv_11a8[] = {0xAC00, 0x11A8}, lvt[] = {0xAC01};
        uint32_t const jamo_11a7[] = {0x1100, 0x1161, 0x11A7}, jamo_11a7_nfc[] = {0xAC00, 0x11A7};
        check_form(lv_11a7, 2, form, lv_11a7, 2, "NFC/NFKC of U+AC00 U+11A7");
        check_form(jamo_11a7, 3, form, jamo_11a7_nfc, 2, "NFC/NFKC of U+1100 U+1161 U+11A7");
        check_form(lv_11a8, 2, form, lvt, 1, "NFC/NFKC of U+AC00 U+11A8");
    }
    CHECK_DONE();
}
