/**
 *  @file   unicode.h
 *  @brief  UTF-8 decoding and the character classes and normal forms of Hugging Face `tokenizers`,
 *          computed with utf8proc and corrected by the generated lists in hf_unicode.c where the
 *          Unicode versions of `tokenizers`' Rust crates differ from utf8proc's.
 */
#ifndef UFORM_TEXT_UNICODE_H
#define UFORM_TEXT_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct uform_codepoint_range_t {
    uint32_t first, last; /**< Inclusive. */
} uform_codepoint_range_t;

typedef struct uform_lower_exception_t {
    uint32_t code;     /**< The code point. */
    uint32_t lower[3]; /**< Its lower case as `tokenizers` gives it, zero-padded. */
} uform_lower_exception_t;

extern uform_codepoint_range_t const uform_hf_other_flip[], uform_hf_punct_flip[], uform_hf_mn_flip[],
    uform_hf_mark_flip[], uform_hf_norm_unknown[];
extern size_t const uform_hf_other_flip_count, uform_hf_punct_flip_count, uform_hf_mn_flip_count,
    uform_hf_mark_flip_count, uform_hf_norm_unknown_count;
typedef struct uform_decomposition_exception_t {
    uint32_t code;
    uint32_t canonical[4], compatibility[4]; /**< Zero-padded. */
} uform_decomposition_exception_t;

extern uform_codepoint_range_t const uform_hf_no_compose[];
extern size_t const uform_hf_no_compose_count;
extern uform_decomposition_exception_t const uform_hf_decompositions[];
extern size_t const uform_hf_decompositions_count;
extern uform_lower_exception_t const uform_hf_lower_table[];
extern size_t const uform_hf_lower_table_count;

/** @brief Validates UTF-8 (no overlongs, surrogates or code points past U+10FFFF). Returns the
 *  byte offset of the first invalid sequence, or `length` when all is valid. */
size_t uform_utf8_invalid_offset(char const *text, size_t length);

/** @brief Decodes valid UTF-8 into code points; returns how many. `out` holds `length` entries. */
size_t uform_utf8_decode(char const *text, size_t length, uint32_t *out);

/** @brief Encodes one code point, returns its byte count (1-4). */
size_t uform_utf8_put(uint32_t code, char *out);

/** @brief Rust's `char::is_whitespace` (the White_Space property). */
bool uform_is_whitespace(uint32_t c);
/** @brief `tokenizers`' "other" class (Cc, Cf, Co as its tables know them), which clean_text drops. */
bool uform_hf_is_other(uint32_t c);
/** @brief BertPreTokenizer's punctuation: ASCII punctuation or P* as `tokenizers` knows it. */
bool uform_hf_is_punct(uint32_t c);
/** @brief Mn as `tokenizers` knows it (BertNormalizer's strip_accents drops these after NFD). */
bool uform_hf_is_mn(uint32_t c);
/** @brief Mn, Mc or Me as `tokenizers` knows them (the StripAccents normaliser drops these). */
bool uform_hf_is_mark(uint32_t c);
/** @brief BertNormalizer's Chinese characters (CJK ideograph blocks). */
bool uform_is_cjk(uint32_t c);

/** @brief Appends `c` lower-cased as `tokenizers` does (1 to 3 code points); returns how many. */
size_t uform_hf_lower(uint32_t c, uint32_t *out);

/** @brief Normal forms, as `tokenizers` computes them. */
typedef enum uform_normal_form_t {
    uform_nfd_k, uform_nfkd_k, uform_nfc_k, uform_nfkc_k,
} uform_normal_form_t;

/** @brief Normalises `in[0..count)` into `out`, which holds at least
 *  `uform_normalize_capacity(in, count, form)` entries; returns the new count. */
size_t uform_normalize(uint32_t const *in, size_t count, uform_normal_form_t form, uint32_t *out);
/** @brief Room enough for `uform_normalize`: 18 per code point (the longest decomposition) for
 *  short texts, the exact decomposed length for long ones (so a long text costs no 18-fold buffer). */
size_t uform_normalize_capacity(uint32_t const *in, size_t count, uform_normal_form_t form);

#endif // UFORM_TEXT_UNICODE_H
