/**
 *  @file   unicode.c
 *  @brief  UTF-8, character classes and normal forms as Hugging Face `tokenizers` sees them:
 *          utf8proc's data, corrected by the measured lists of hf_unicode.c.
 */
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

size_t uform_utf8_invalid_offset(char const *text, size_t length) {
    unsigned char const *s = (unsigned char const *)text;
    size_t i = 0;
    while (i < length) {
        // Eight ASCII bytes at a time.
        while (i + 8 <= length) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (word & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= length) break;
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint32_t c, min;
        if (b >= 0xC2 && b <= 0xDF) need = 1, c = b & 0x1F, min = 0x80;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, c = b & 0x0F, min = 0x800;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, c = b & 0x07, min = 0x10000;
        else return i;
        if (length - i <= need) return i;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return i;
        i += need + 1;
    }
    return length;
}

size_t uform_utf8_decode(char const *text, size_t length, uint32_t *out) {
    unsigned char const *s = (unsigned char const *)text;
    size_t n = 0, i = 0;
    while (i < length) {
        unsigned char b = s[i];
        if (b < 0x80) out[n++] = b, i += 1;
        else if (b < 0xE0) out[n++] = ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F), i += 2;
        else if (b < 0xF0)
            out[n++] = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F), i += 3;
        else
            out[n++] = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                       ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F),
            i += 4;
    }
    return n;
}

size_t uform_utf8_put(uint32_t c, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) return o[0] = (unsigned char)c, 1;
    if (c < 0x800) return o[0] = (unsigned char)(0xC0 | (c >> 6)), o[1] = (unsigned char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return o[0] = (unsigned char)(0xE0 | (c >> 12)), o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)),
               o[2] = (unsigned char)(0x80 | (c & 0x3F)), 3;
    o[0] = (unsigned char)(0xF0 | (c >> 18)), o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)), o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

static bool in_ranges(uform_codepoint_range_t const *ranges, size_t count, uint32_t c) {
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < ranges[mid].first) hi = mid;
        else if (c > ranges[mid].last) lo = mid + 1;
        else return true;
    }
    return false;
}

bool uform_is_whitespace(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

bool uform_hf_is_other(uint32_t c) {
    if (c < 0x80) return c < 0x20 || c == 0x7F;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    bool other = cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CO;
    return other != in_ranges(uform_hf_other_flip, uform_hf_other_flip_count, c);
}

bool uform_hf_is_punct(uint32_t c) {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    bool punct = cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
    return punct != in_ranges(uform_hf_punct_flip, uform_hf_punct_flip_count, c);
}

bool uform_hf_is_mn(uint32_t c) {
    if (c < 0x300) return false;
    bool mn = utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN;
    return mn != in_ranges(uform_hf_mn_flip, uform_hf_mn_flip_count, c);
}

bool uform_hf_is_mark(uint32_t c) {
    if (c < 0x300) return false;
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
    bool mark = cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME;
    return mark != in_ranges(uform_hf_mark_flip, uform_hf_mark_flip_count, c);
}

bool uform_is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

size_t uform_hf_lower(uint32_t c, uint32_t *out) {
    if (c < 0x80) {
        out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        return 1;
    }
    size_t lo = 0, hi = uform_hf_lower_table_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < uform_hf_lower_table[mid].code) hi = mid;
        else if (c > uform_hf_lower_table[mid].code) lo = mid + 1;
        else {
            size_t n = 0;
            while (n < 3 && uform_hf_lower_table[mid].lower[n]) out[n] = uform_hf_lower_table[mid].lower[n], n++;
            return n;
        }
    }
    out[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}

static inline bool norm_unknown(uint32_t c) {
    return in_ranges(uform_hf_norm_unknown, uform_hf_norm_unknown_count, c);
}

static inline unsigned combining_class(uint32_t c) {
    if (c < 0x300) return 0;
    if (norm_unknown(c)) return 0;
    return utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
}

size_t uform_normalize_capacity(uint32_t const *in, size_t count, uform_normal_form_t form) {
    if (count < 4096) return count * 18 + 4;
    bool compat = form == uform_nfkd_k || form == uform_nfkc_k;
    utf8proc_option_t options = (utf8proc_option_t)(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
    size_t total = 4;
    for (size_t i = 0; i < count; i++) {
        uint32_t c = in[i];
        if (c < 0xA0) {
            total++;
            continue;
        }
        int boundclass = 0;
        utf8proc_ssize_t got = utf8proc_decompose_char((utf8proc_int32_t)c, NULL, 0, options, &boundclass);
        total += got > 0 && got <= 18 ? (size_t)got : 18;
        if (norm_unknown(c)) total += 4; // an exception's decomposition (at most 4)
    }
    return total;
}

/** Sorts a run of non-starters by combining class, stably. Short runs (all real text) by insertion;
 *  long ones, which only crafted text has ("a" and thousands of alternating marks of classes 230 and
 *  220 made insertion quadratic: 54 s for 320 kB), by counting classes, each looked up once. Where the
 *  counting sort's buffers cannot be allocated, insertion serves: slower, the same result. */
static void sort_marks(uint32_t *run, size_t length) {
    enum { short_run = 32 };
    unsigned char *classes = length > short_run ? malloc(length) : NULL;
    uint32_t *sorted = classes ? malloc(length * sizeof(uint32_t)) : NULL;
    if (!sorted) {
        free(classes);
        for (size_t i = 1; i < length; i++) {
            uint32_t const c = run[i];
            unsigned const cc = combining_class(c);
            size_t j = i;
            while (j > 0 && combining_class(run[j - 1]) > cc) run[j] = run[j - 1], j--;
            run[j] = c;
        }
        return;
    }
    size_t starts[257] = {0};
    for (size_t i = 0; i < length; i++) classes[i] = (unsigned char)combining_class(run[i]), starts[classes[i] + 1]++;
    for (size_t k = 1; k < 257; k++) starts[k] += starts[k - 1];
    for (size_t i = 0; i < length; i++) sorted[starts[classes[i]]++] = run[i];
    memcpy(run, sorted, length * sizeof(uint32_t));
    free(sorted), free(classes);
}

size_t uform_normalize(uint32_t const *in, size_t count, uform_normal_form_t form, uint32_t *out) {
    bool compat = form == uform_nfkd_k || form == uform_nfkc_k;
    bool compose = form == uform_nfc_k || form == uform_nfkc_k;
    utf8proc_option_t options = (utf8proc_option_t)(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
    // Decompose, code point by code point.
    size_t n = 0;
    bool any_mark = false;
    for (size_t i = 0; i < count; i++) {
        uint32_t c = in[i];
        if (c < 0xA0) {
            out[n++] = c;
            continue;
        }
        if (norm_unknown(c)) {
            out[n++] = c;
            for (size_t k = 0; k < uform_hf_decompositions_count; k++)
                if (uform_hf_decompositions[k].code == c) {
                    uint32_t const *parts = compat ? uform_hf_decompositions[k].compatibility
                                                   : uform_hf_decompositions[k].canonical;
                    n--;
                    for (size_t j = 0; j < 4 && parts[j]; j++) out[n++] = parts[j];
                    any_mark = true;
                }
            continue;
        }
        int boundclass = 0;
        utf8proc_ssize_t got = utf8proc_decompose_char((utf8proc_int32_t)c, (utf8proc_int32_t *)(out + n), 18,
                                                       options, &boundclass);
        if (got <= 0 || got > 18) out[n++] = c;
        else n += (size_t)got;
        any_mark = true;
    }
    if (!any_mark) return n; // ASCII and Latin-1 controls only: nothing reorders or composes
    // Canonical ordering: a stable sort of every run of non-starters by combining class.
    for (size_t i = 0; i < n;) {
        if (combining_class(out[i]) == 0) {
            i++;
            continue;
        }
        size_t end = i + 1;
        while (end < n && combining_class(out[end]) != 0) end++;
        sort_marks(out + i, end - i);
        i = end;
    }
    if (!compose) return n;
    // Compose each stretch between code points the normaliser does not know: those are starters
    // that compose with nothing, so no composition crosses them. U+11A7 is one too (T index 0 is
    // "no final consonant"), though utf8proc 2.8 composes an LV syllable with it into that syllable,
    // dropping it.
    size_t w = 0, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && !(out[i] >= 0x300 && (norm_unknown(out[i]) || out[i] == 0x11A7 ||
                                          in_ranges(uform_hf_no_compose, uform_hf_no_compose_count, out[i]))))
            continue;
        size_t len = i - start;
        if (len) {
            /* STABLE: the composition exclusions added after Unicode 3.0 (U+2ADC, U+1D15E..U+1D164,
             * U+1D1BB..U+1D1C0) stay decomposed, as Unicode and `tokenizers` keep them. */
            utf8proc_ssize_t got = utf8proc_normalize_utf32((utf8proc_int32_t *)(out + start), (utf8proc_ssize_t)len,
                                                            UTF8PROC_COMPOSE | UTF8PROC_STABLE);
            if (got < 0) got = (utf8proc_ssize_t)len;
            memmove(out + w, out + start, (size_t)got * sizeof(uint32_t));
            w += (size_t)got;
        }
        if (i < n) out[w++] = out[i];
        start = i + 1;
    }
    return w;
}
