/**
 *  @file   config.h
 *  @brief  Reading a text tower's configuration (UForm3 `config.json` with a `text_encoder` section;
 *          Hugging Face BERT `config.json` with sentence-transformers' `modules.json`,
 *          `1_Pooling/config.json` and `sentence_bert_config.json`) and binding its tensors out of a
 *          safetensors index into towers. Pure: no files are opened here, so the fuzzer drives it
 *          with bytes. Internal only.
 */
#ifndef UFORM_MODELS_CONFIG_H
#define UFORM_MODELS_CONFIG_H

#include "models/safetensors.h"
#include "models/tower.h"
#include "text/tokenizer.h"

#include <stddef.h>

/** Layers a config may declare; more is refused as implausible (each needs 16 tensors anyway). */
#define UFORM_TEXT_MAX_LAYERS 1024
/** Widths a config may declare (hidden, vocabulary, positions...); more is refused as implausible. */
#define UFORM_TEXT_MAX_EXTENT ((size_t)1 << 26)
/** The longest context a text tower may have: attention holds a context x context block of scores
 *  per thread (256 MiB at 8,192), and BERT's absolute positions stop at 512 in practice. */
#define UFORM_TEXT_MAX_CONTEXT ((size_t)8192)
/** Small JSON files (configs) are read whole; larger ones are refused. */
#define UFORM_CONFIG_MAX_BYTES ((size_t)16 << 20)

typedef enum uform_text_layout_t {
    uform_text_layout_uform3_k = 0, /**< `config.json` with `text_encoder`, `text_encoder.safetensors`. */
    uform_text_layout_bert_k = 1,   /**< Hugging Face BERT, `model.safetensors`, sentence-transformers files. */
} uform_text_layout_t;

typedef struct uform_text_config_t {
    uform_text_layout_t layout;
    size_t vocab_size, hidden, heads, intermediate, max_positions, type_vocab_size;
    size_t layers_total;                              /**< Layers in the file. */
    unsigned char skipped[UFORM_TEXT_MAX_LAYERS];     /**< UForm3's multimodal layers, left out. */
    size_t layers_count;                              /**< Layers to run. */
    size_t context;
    size_t embedding_dimensions;                      /**< UForm3: the projection's rows; BERT: hidden. */
    size_t matryoshka[8];                             /**< Ascending, narrower than the width, zero-padded. */
    double layer_norm_epsilon;
    uform_pooling_t pooling;
    uform_position_ids_t position_ids;
    int32_t pad_id;
    int normalize;
    int has_pooling_module;                           /**< sentence-transformers: modules.json names one. */
    uform_tokenizer_bert_t tokenizer;                 /**< BERT: what tokenizer_config.json and
                                                           sentence_bert_config.json make of the tokenizer. */
    size_t model_max_length;                          /**< tokenizer_config.json's, 0 if absent or unbounded. */
    int has_max_seq_length;                           /**< sentence_bert_config.json names max_seq_length. */
    int truncates_left;                               /**< tokenizer_config.json's truncation_side "left". */
    char transformer_path[256];                       /**< modules.json: the Transformer's folder ("" the model's). */
    char pooling_path[256];                           /**< modules.json: the Pooling module's folder ("" if none). */
    int excludes_prompt;                              /**< The Pooling config's include_prompt false. */
    char prompt[1024];                                /**< config_sentence_transformers.json's default prompt, or "". */
    char prefix[8];                                   /**< BERT tensors' prefix: "" or "bert."; set by binding. */
} uform_text_config_t;

/** @brief Parses JSON bytes, CORRUPT_FILE naming `label` and the byte where it broke. */
uform_status_t uform_json_parse(char const *label, char const *text, size_t length, void **root);
void uform_json_free(void *root);
/** @brief Whether a parsed root is `{}`. */
int uform_json_is_empty_object(void const *root);

/** @brief Reads a small file whole (NUL-terminated copy). `*missing` (if not NULL) is set instead of
 *  failing when the file does not exist. SYSTEM_ERROR or CORRUPT_FILE (too large) otherwise. */
uform_status_t uform_read_small_file(char const *path, char **text, size_t *length, int *missing);

/** @brief Which layout a `config.json` root describes: UForm3 when it has a `text_encoder` or
 *  `image_encoder` section, BERT when `model_type` is "bert"; UNSUPPORTED for another model_type,
 *  CORRUPT_FILE for neither. */
uform_status_t uform_config_layout(char const *label, void const *root, uform_text_layout_t *layout);

/** @brief Fills `config` from a UForm3 `config.json` root's `text_encoder` section. */
uform_status_t uform_config_uform3(char const *label, void const *root, uform_text_config_t *config);

/** @brief Fills `config` from a BERT `config.json` root (defaults: mean pooling, no normalisation,
 *  context max_position_embeddings, transformers' tokenizer defaults); the sentence-transformers
 *  files refine it, then `uform_config_bert_context` settles the context. */
uform_status_t uform_config_bert(char const *label, void const *root, uform_text_config_t *config);

/** @brief Applies `modules.json`: Transformer (its folder, the model's own or an older release's
 *  "0_Transformer"), Pooling (its folder), Normalize; the class paths of sentence-transformers before
 *  and since 6.0. */
uform_status_t uform_config_modules(char const *label, void const *root, uform_text_config_t *config);

/** @brief Applies a Pooling module's `config.json`: `pooling_mode` (sentence-transformers 6) or the
 *  older `pooling_mode_*` flags, the width, `include_prompt`. */
uform_status_t uform_config_pooling(char const *label, void const *root, uform_text_config_t *config);

/** @brief Applies `sentence_bert_config.json` (or an older release's `sentence_roberta_config.json`...):
 *  max_seq_length, do_lower_case; refuses (UNSUPPORTED, by key) the keyword arguments and task keys
 *  that would make sentence-transformers build another model or tokenizer. */
uform_status_t uform_config_sentence_bert(char const *label, void const *root, uform_text_config_t *config);

/** @brief Applies `config_sentence_transformers.json`: the prompt named by `default_prompt_name`,
 *  which sentence-transformers puts before every text; UNSUPPORTED for a `model_type` other than
 *  SentenceTransformer. */
uform_status_t uform_config_prompts(char const *label, void const *root, uform_text_config_t *config);

/** @brief Applies `tokenizer_config.json`: tokenizer_class, do_lower_case, strip_accents,
 *  tokenize_chinese_chars (see `uform_tokenizer_bert_t`), model_max_length. */
uform_status_t uform_config_tokenizer(char const *label, void const *root, uform_text_config_t *config);

/** @brief A BERT directory's context as sentence-transformers sets it: max_seq_length where
 *  sentence_bert_config.json names one (at most max_position_embeddings here, past which the
 *  reference fails), else min(tokenizer_config.json's model_max_length, max_position_embeddings). */
void uform_config_bert_context(uform_text_config_t *config);

/** @brief UNSUPPORTED (naming `label` and where the context came from) for a context past
 *  UFORM_TEXT_MAX_CONTEXT. */
uform_status_t uform_config_context_check(char const *label, uform_text_config_t const *config);

/** @brief Reads a `matryoshka_dims` list (NULL or JSON null: none) into `matryoshka`: ascending,
 *  unique widths narrower than `width_max`, the narrowest eight, zero-padded; CORRUPT_FILE naming
 *  `section` and the key otherwise. For both towers' configurations. */
uform_status_t uform_config_matryoshka_widths(char const *label, char const *section, void const *list, size_t width_max,
                                             size_t matryoshka[8]);

/** @brief One tensor a tower needs, text or image: where it comes from and what it becomes. */
typedef struct uform_binding_t {
    uform_safetensor_t const *source;
    size_t rows, cols;   /**< Vectors: rows = 1. */
    int parameter;       /**< LayerNorm parameter or bias: held in f32. */
    size_t layer;        /**< Index into the tower's layers, or SIZE_MAX for tower-level tensors. */
    size_t field;        /**< Byte offset of the `uform_tensor_t` in the tower or layer struct. */
} uform_binding_t;

/** @brief Finds every tensor `config` needs in `index`, checking each exists, has a dtype the
 *  engine computes with (UNSUPPORTED naming the tensor and dtype) and the shape the config implies
 *  (CORRUPT_FILE naming the file, tensor, expected and found shapes). Sets `config->prefix`.
 *  `*bindings` (free with `free`) receives `*count` entries. */
uform_status_t uform_config_bind(uform_text_config_t *config, uform_safetensors_t const *index,
                                 uform_binding_t **bindings, size_t *count);

/** @brief Bytes one replica needs for `bindings` in `dtype`, each tensor 64-byte aligned. */
size_t uform_replica_bytes(uform_binding_t const *bindings, size_t count, uform_dtype_t dtype);

/** @brief Converts every binding's tensor into `block` (of `uform_replica_bytes`), one after the
 *  other, and points its `uform_tensor_t` at it: in `tower`, or in `layers` (of `layer_size`
 *  bytes each) for a layer's tensor. Both loaders' towers are filled by it. */
/** @brief After `uform_bindings_place` into `block`: CORRUPT_FILE naming `file`, the tensor and the
 *  element where a weight is NaN or infinite; UNSUPPORTED where a finite weight became infinite in
 *  `dtype` (past f16's 65504, say), naming the value and the dtypes that hold it. */
uform_status_t uform_bindings_check(char const *file, uform_binding_t const *bindings, size_t count, uform_dtype_t dtype,
                                    void const *block);

void uform_bindings_place(uform_binding_t const *bindings, size_t count, uform_dtype_t dtype, void *block, void *tower,
                          void *layers, size_t layer_size);

/** @brief Fills a tower from `bindings`, converting into `block` (of `uform_replica_bytes`),
 *  `layers` an array of `config->layers_count` entries the tower points to. */
void uform_text_tower_fill(uform_text_config_t const *config, uform_binding_t const *bindings, size_t count,
                           uform_dtype_t dtype, void *block, uform_text_layer_t *layers, uform_text_tower_t *tower);

#endif // UFORM_MODELS_CONFIG_H
