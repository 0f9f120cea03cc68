/**
 *  @file   tokenizer.h
 *  @brief  Tokenizers read from `tokenizer.json` (WordPiece with BERT's normaliser and
 *          pre-tokeniser; Unigram with Metaspace) or `vocab.txt`, giving exactly the ids of
 *          Hugging Face `tokenizers`. Internal only; `uform_model_tokenize` exposes it.
 *          Immutable once open: any number of threads may encode with one tokenizer at once.
 */
#ifndef UFORM_TEXT_TOKENIZER_H
#define UFORM_TEXT_TOKENIZER_H

#include <uform.h>
#include <stddef.h>
#include <stdint.h>

typedef struct uform_tokenizer_s uform_tokenizer_t;

/** @brief Opens `directory/tokenizer.json`, else `directory/vocab.txt` (BERT WordPiece, lower-cased
 *  per `lower_case_hint` since vocab.txt carries no normaliser settings). CORRUPT_FILE naming the
 *  file and key for malformed JSON or missing keys; UNSUPPORTED naming the model type, normaliser or
 *  pre-tokeniser it does not implement; SYSTEM_ERROR when neither file can be read. */
uform_status_t uform_tokenizer_open(char const *directory, int lower_case_hint, uform_tokenizer_t **tokenizer);

/** @brief Encodes one UTF-8 text with the post-processor's specials ([CLS] ... [SEP], or <s> ... </s>),
 *  truncating the content so that specials included at most `max_tokens` ids result (as HF's
 *  `truncation=True, max_length=max_tokens`). Writes the first `min(capacity, *count)` ids.
 *  INVALID_ARGUMENT naming the byte offset for invalid UTF-8. Thread-safe; allocation-free in
 *  the steady state is not required. */
uform_status_t uform_tokenizer_encode(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                      size_t max_tokens, int32_t *ids, size_t capacity, size_t *count);

/** @brief The padding id (`[PAD]`, `<pad>`), the vocabulary size. */
int32_t uform_tokenizer_pad_id(uform_tokenizer_t const *tokenizer);
size_t uform_tokenizer_vocab_size(uform_tokenizer_t const *tokenizer);

void uform_tokenizer_free(uform_tokenizer_t *tokenizer);

#endif // UFORM_TEXT_TOKENIZER_H
