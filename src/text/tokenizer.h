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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct uform_tokenizer_s uform_tokenizer_t;

/** @brief How sentence-transformers (through transformers' `BertTokenizer`) builds the tokenizer of a
 *  BERT directory around its vocabulary, whatever `tokenizer.json`'s own pipeline says: from
 *  `tokenizer_config.json`, a BertNormalizer (clean_text, and the flags below with transformers'
 *  defaults), BertPreTokenizer, WordPiece ("##", 100 characters a word at most) and [CLS] $A [SEP];
 *  from `sentence_bert_config.json`, a Lowercase normaliser first. Pinned to transformers 5.25 and
 *  sentence-transformers 6.3 (transformers 4's BertTokenizerFast overrides the same three flags). */
typedef struct uform_tokenizer_bert_t {
    int pipeline;       /**< tokenizer_class is BERT's (or absent): rebuild as above; 0 keeps tokenizer.json's. */
    int lowercase;      /**< `do_lower_case` (default 1). */
    int strip_accents;  /**< `strip_accents`: 1, 0, or -1 for null or absent (then as `lowercase`). */
    int chinese;        /**< `tokenize_chinese_chars` (default 1). */
    int lowercase_first; /**< sentence_bert_config.json's `do_lower_case`: a Lowercase step before the
                              normaliser unless it lower-cases already (as sentence-transformers 6.3). */
} uform_tokenizer_bert_t;

/** The settings `tokenizer_config.json` implies when it says nothing: transformers' defaults. */
#define UFORM_TOKENIZER_BERT_DEFAULTS ((uform_tokenizer_bert_t){1, 1, -1, 1, 0})

/** @brief Opens `directory/tokenizer.json`, else `directory/vocab.txt` (BERT WordPiece, normalised
 *  per `bert` (NULL: the defaults) since vocab.txt carries no normaliser settings, as `tokenizers`'
 *  BertWordPieceTokenizer: [CLS] $A [SEP], its specials matched in the raw text). `bert` NULL keeps
 *  tokenizer.json's pipeline as it is (UForm3 towers, as the `uform` package's processor reads it);
 *  otherwise its `pipeline` rebuilds a WordPiece tokenizer.json's pipeline (UNSUPPORTED for another
 *  model) and its `lowercase_first` applies to either file. CORRUPT_FILE naming
 *  the file and key for malformed JSON or missing keys; UNSUPPORTED naming the model type, normaliser,
 *  pre-tokeniser or post-processor it does not implement (BPE, Precompiled, regex Replace, ...);
 *  SYSTEM_ERROR when neither file can be read; OUT_OF_MEMORY. The JSON's `padding` is ignored
 *  (callers pad themselves), and so is its `truncation` unless `uform_tokenizer_use_processor_truncation`
 *  asks for it: callers pass `max_tokens`.
 *
 *  Implemented: models WordPiece and Unigram (byte_fallback, unk_id); normalizers BertNormalizer,
 *  NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace (string pattern) and
 *  Sequence; pre-tokenizers BertPreTokenizer, WhitespaceSplit, Metaspace (any prepend_scheme, split)
 *  and a Sequence of one; post-processors TemplateProcessing, BertProcessing, RobertaProcessing;
 *  added tokens matched in the raw text (lstrip, rstrip). */
uform_status_t uform_tokenizer_open(char const *directory, uform_tokenizer_bert_t const *bert, uform_tokenizer_t **tokenizer);

/** @brief "tokenizer.json" or "vocab.txt": the file it was read from (for messages). */
char const *uform_tokenizer_file_name(uform_tokenizer_t const *tokenizer);

/** @brief Whether tokenizer.json's `truncation` has the direction "Left". */
int uform_tokenizer_truncates_left(uform_tokenizer_t const *tokenizer);

/** @brief Opens a tokenizer from `tokenizer.json` bytes in memory (`name` only labels messages), with
 *  the statuses of `uform_tokenizer_open`; for fuzzing and for callers that hold the file already. */
uform_status_t uform_tokenizer_open_json(char const *json, size_t size, char const *name, uform_tokenizer_t **tokenizer);

/** @brief Encodes one UTF-8 text with the post-processor's specials ([CLS] ... [SEP], or <s> ... </s>),
 *  truncating the content so that specials included at most `max_tokens` ids result (as HF's
 *  `enable_truncation(max_length=max_tokens)`); `max_tokens` 0 does not truncate. `*count` gets the
 *  number of ids; the first `min(capacity, *count)` are written (`ids` may be NULL when `capacity`
 *  is 0). INVALID_ARGUMENT for NULL `tokenizer` or `count`, NULL `text` with a nonzero length, NULL
 *  `ids` with a nonzero capacity, `max_tokens` below the number of specials, or invalid UTF-8 (the
 *  message: "text: invalid UTF-8 at byte N (0xBB)"); then `*count` is 0. Thread-safe: the tokenizer
 *  is only read; each call allocates its own scratch (a few buffers per call, none per token). */
uform_status_t uform_tokenizer_encode(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                      size_t max_tokens, int32_t *ids, size_t capacity, size_t *count);

/** @brief The padding id: the JSON's `padding.pad_id`, else `[PAD]` or `<pad>` in the vocabulary,
 *  else 0. The vocabulary size: one past the largest id the tokenizer can produce (model, added
 *  tokens, specials). Both 0 for NULL. */
int32_t uform_tokenizer_pad_id(uform_tokenizer_t const *tokenizer);
size_t uform_tokenizer_vocab_size(uform_tokenizer_t const *tokenizer);
/** The special tokens the post-processor adds to every text (before and after it together). */
size_t uform_tokenizer_specials_count(uform_tokenizer_t const *tokenizer);

/** @brief Truncates as the `uform` package's text processor does, for UForm3 models: `tokenizers`
 *  applies the JSON's own `truncation` (specials kept: content cut to `max_length` minus the
 *  specials), then the processor slices the ids to the model's context, which may cut the closing
 *  specials off a long text ("[CLS] a b c" where HF's truncation gives "[CLS] a b [SEP]"). After this
 *  call `uform_tokenizer_encode`'s `max_tokens` slices that way. Without `slice` (RoBERTa positions,
 *  whose table a slice would run past) the JSON's truncation still applies first, then `max_tokens`
 *  truncates as HF does (specials kept). UNSUPPORTED (naming `label`) for a JSON truncation from the
 *  left; CORRUPT_FILE for one shorter than the specials. Call it once, before the tokenizer is shared. */
uform_status_t uform_tokenizer_use_processor_truncation(uform_tokenizer_t *tokenizer, char const *label, bool slice);

/** @brief Puts `prompt` (UTF-8, NUL-terminated) before every text `uform_tokenizer_encode` sees, as
 *  sentence-transformers does with a model's default prompt: the two are tokenised as one text (so
 *  truncation counts the prompt too). CORRUPT_FILE for invalid UTF-8, OUT_OF_MEMORY. Call it once,
 *  before the tokenizer is shared. */
uform_status_t uform_tokenizer_set_prompt(uform_tokenizer_t *tokenizer, char const *prompt);

/** @brief Releases the tokenizer; NULL is a no-op. */
void uform_tokenizer_free(uform_tokenizer_t *tokenizer);

#endif // UFORM_TEXT_TOKENIZER_H
