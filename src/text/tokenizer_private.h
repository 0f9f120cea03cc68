/**
 *  @file   tokenizer_private.h
 *  @brief  The tokenizer's representation and its loader, shared by the files that build and run it:
 *          tokenizer.c (opening, the loader's helpers), tokenizer_pipeline.c (normaliser, pre-tokeniser,
 *          post-processor and added tokens from `tokenizer.json`), tokenizer_vocab.c (the model's
 *          vocabulary from `tokenizer.json` or `vocab.txt`) and tokenizer_encode.c (the encode pipeline).
 */
#ifndef UFORM_TEXT_TOKENIZER_PRIVATE_H
#define UFORM_TEXT_TOKENIZER_PRIVATE_H

#include "text/text.h"

#include <cjson/cJSON.h>

/* ---- The tokenizer ---- */

typedef enum step_kind_t {
    step_bert_k, step_nfd_k, step_nfkd_k, step_nfc_k, step_nfkc_k, step_lowercase_k, step_strip_accents_k,
    step_replace_k, step_strip_k, step_prepend_k,
} step_kind_t;

typedef struct step_t {
    step_kind_t kind;
    bool clean_text, chinese, strip_accents, lowercase; // BertNormalizer
    bool left, right;                                  // Strip
    uint32_t *pattern, *content;                       // Replace (pattern, content), Prepend (content)
    size_t pattern_length, content_length;
} step_t;

typedef enum pre_kind_t { pre_none_k, pre_bert_k, pre_metaspace_k, pre_whitespace_split_k } pre_kind_t;
typedef enum prepend_t { prepend_never_k, prepend_always_k, prepend_first_k } prepend_t;
typedef enum model_kind_t { model_wordpiece_k, model_unigram_k } model_kind_t;

typedef struct added_t {
    uint32_t offset, length; // content in the blob
    int32_t id;
    bool lstrip, rstrip;
} added_t;

struct uform_tokenizer_s {
    model_kind_t model;
    uform_wordpiece_t wordpiece;
    uform_unigram_t unigram;
    char *blob; // every string the maps and added tokens point into
    size_t blob_size;
    size_t vocab_size;
    int32_t pad_id;
    step_t *steps;
    size_t steps_count;
    pre_kind_t pre;
    uint32_t replacement;
    char replacement_utf8[4];
    size_t replacement_bytes;
    prepend_t prepend;
    bool split;
    added_t *added;
    size_t added_count;
    bool added_first_byte[256];
    uform_trie_t added_trie; // the added tokens' contents; a node's piece is the index into `added`
    int32_t prefix[8], suffix[8];
    size_t prefix_count, suffix_count;
    size_t json_max_length; // tokenizer.json's truncation.max_length, 0 without one
    bool json_truncates_left; // its truncation.direction is "Left"
    bool processor_truncation; // `uform_tokenizer_use_processor_truncation` slices to max_tokens
    bool json_truncation; // ... and applies the JSON's own truncation first
    bool from_vocab_txt; // read from vocab.txt, not tokenizer.json
    char *prompt; // put before every text (`uform_tokenizer_set_prompt`), NULL without one
    size_t prompt_length;
};

typedef struct loader_t {
    char const *file; // for messages
    char *blob;
    size_t blob_size, blob_capacity;
    int32_t max_id;
    char const *json_text;  // tokenizer.json's bytes and parsed root (NULL for vocab.txt): Unigram scores are
    size_t json_size;       // read from their text as `tokenizers` reads them
    cJSON const *json_root;
} loader_t;

/** The vocabulary strings go into the blob first; then the maps, which point into the final blob. */
typedef struct pieces_t {
    uint32_t *offsets, *lengths;
    int32_t *ids;
    double *scores;
    size_t count;
} pieces_t;

/* ---- Loader helpers (tokenizer.c) and the sections of `tokenizer.json` (the other files) ---- */

uform_status_t tokenizer_corrupt(loader_t const *loader, char const *what, char const *key);

/** Appends bytes to the blob; returns the offset through `offset`. */
uform_status_t tokenizer_blob_add(loader_t *loader, char const *bytes, size_t length, uint32_t *offset);

/** A JSON string decoded to code points (malloc'd); NULL `*out` for the empty string. */
uform_status_t tokenizer_to_code_points(loader_t const *loader, char const *text, char const *key, uint32_t **out,
                                        size_t *count);

bool tokenizer_json_flag(cJSON const *object, char const *key, bool fallback);

uform_status_t tokenizer_json_type(loader_t const *loader, cJSON const *object, char const *where, char const **type);

/** Appends a normaliser step (taking ownership of its buffers, freed on failure). */
uform_status_t tokenizer_add_step(uform_tokenizer_t *tokenizer, loader_t const *loader, step_t step);

/** The longest added token's content, in bytes: longer ones are refused (UNSUPPORTED), so matching
 *  them at every byte of a text costs at most this many steps (real tokenizers' special tokens are
 *  tens of bytes). */
#define TOKENIZER_ADDED_MAX_BYTES 256

/** Registers an added (special) token: its content goes into the blob. */
uform_status_t tokenizer_add_added_token(uform_tokenizer_t *tokenizer, loader_t *loader, char const *content,
                                         size_t length, int32_t id, bool lstrip, bool rstrip);

uform_status_t tokenizer_load_normalizer(uform_tokenizer_t *tokenizer, loader_t const *loader, cJSON const *json,
                                         unsigned depth);

uform_status_t tokenizer_load_pre_tokenizer(uform_tokenizer_t *tokenizer, loader_t const *loader, cJSON const *json);

uform_status_t tokenizer_load_post_processor(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json);

uform_status_t tokenizer_load_added_tokens(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json);

void tokenizer_pieces_free(pieces_t *pieces);

uform_status_t tokenizer_pieces_alloc(pieces_t *pieces, size_t count, char const *file);

uform_status_t tokenizer_build_wordpiece(uform_tokenizer_t *tokenizer, loader_t *loader, pieces_t const *pieces,
                                         char const *prefix, char const *unk, size_t max_chars);

uform_status_t tokenizer_load_model(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json, pieces_t *pieces,
                                    char **prefix, char **unk, size_t *max_chars);

uform_status_t tokenizer_finish_unigram(uform_tokenizer_t *tokenizer, pieces_t *pieces);

/** The double `serde_json` reads from the JSON number `text[0, length)` as `tokenizers` builds it
 *  (without serde_json's `float_roundtrip`): the digits as a 64-bit integer (digits past its range
 *  dropped, those before the point counted in the exponent), converted, then multiplied or divided
 *  by a power of ten. Not always strtod's nearest double: a Unigram score 1 ULP apart decides ties
 *  between segmentations. False where serde_json refuses the number (out of range). */
bool tokenizer_serde_f64(char const *text, size_t length, double *value);

/** `vocab.txt`: one piece per line, its line number its id (as `tokenizers`' WordPiece::read_file);
 *  BERT's defaults around it (as `tokenizers`' BertWordPieceTokenizer). */
uform_status_t tokenizer_open_vocab_txt(uform_tokenizer_t *tokenizer, loader_t *loader, char const *data, size_t size,
                                        uform_tokenizer_bert_t const *bert);

/** Frees the normaliser steps' strings and empties the list (its array stays for reuse or `free`). */
void tokenizer_clear_steps(uform_tokenizer_t *tokenizer);

/** transformers' BertTokenizer around a built WordPiece vocabulary: the normaliser steps replaced by
 *  one BertNormalizer per `bert`, BertPreTokenizer, [CLS] $A [SEP] (CORRUPT_FILE without them). */
uform_status_t tokenizer_bert_pipeline(uform_tokenizer_t *tokenizer, loader_t const *loader, uform_tokenizer_bert_t const *bert);

/** sentence-transformers' `do_lower_case`: a Lowercase step first, unless a step lower-cases already. */
uform_status_t tokenizer_lowercase_first(uform_tokenizer_t *tokenizer, loader_t const *loader);

#endif // UFORM_TEXT_TOKENIZER_PRIVATE_H
