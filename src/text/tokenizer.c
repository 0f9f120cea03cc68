/**
 *  @file   tokenizer.c
 *  @brief  Opening a tokenizer: `tokenizer.json` (cJSON) or `vocab.txt` from a directory, or JSON
 *          from memory; the loader's helpers the sections use; freeing. The sections of the file are read by
 *          tokenizer_pipeline.c and tokenizer_vocab.c, the encode pipeline runs in tokenizer_encode.c.
 */
#include "text/tokenizer_private.h"
#include "json_scan.h"

#include <math.h>  // `floor`
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** The largest tokenizer.json or vocab.txt read (the largest real ones are tens of MiB). */
#define UFORM_TOKENIZER_MAX_BYTES ((size_t)1 << 30)

/* ---- Loading ---- */

uform_status_t tokenizer_corrupt(loader_t const *loader, char const *what, char const *key) {
    return uform_fail(uform_status_corrupt_file_k, "%s: %s \"%s\"", loader->file, what, key);
}

/** Appends bytes to the blob; returns the offset through `offset`. */
uform_status_t tokenizer_blob_add(loader_t *loader, char const *bytes, size_t length, uint32_t *offset) {
    if (loader->blob_size + length + 1 > UINT32_MAX)
        return uform_fail(uform_status_unsupported_k, "%s: more than 4 GiB of token strings", loader->file);
    if (loader->blob_size + length + 1 > loader->blob_capacity) {
        size_t capacity = loader->blob_capacity ? loader->blob_capacity * 2 : 1 << 16;
        while (capacity < loader->blob_size + length + 1) capacity *= 2;
        char *blob = realloc(loader->blob, capacity);
        if (!blob) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
        loader->blob = blob, loader->blob_capacity = capacity;
    }
    memcpy(loader->blob + loader->blob_size, bytes, length);
    *offset = (uint32_t)loader->blob_size;
    loader->blob_size += length;
    loader->blob[loader->blob_size] = 0;
    return uform_status_ok_k;
}


/** A JSON string decoded to code points (malloc'd); NULL `*out` for the empty string. */
uform_status_t tokenizer_to_code_points(loader_t const *loader, char const *text, char const *key, uint32_t **out,
                                        size_t *count) {
    size_t length = strlen(text);
    if (uform_utf8_invalid_offset(text, length) != length) return tokenizer_corrupt(loader, "invalid UTF-8 in", key);
    *out = NULL, *count = 0;
    if (!length) return uform_status_ok_k;
    *out = malloc(length * sizeof(uint32_t));
    if (!*out) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    *count = uform_utf8_decode(text, length, *out);
    return uform_status_ok_k;
}

bool tokenizer_json_flag(cJSON const *object, char const *key, bool fallback) {
    cJSON const *item = cJSON_GetObjectItemCaseSensitive(object, key);
    if (cJSON_IsBool(item)) return cJSON_IsTrue(item);
    return fallback;
}

uform_status_t tokenizer_json_type(loader_t const *loader, cJSON const *object, char const *where, char const **type) {
    cJSON const *item = cJSON_GetObjectItemCaseSensitive(object, "type");
    if (!cJSON_IsString(item)) return tokenizer_corrupt(loader, "no string \"type\" in", where);
    *type = item->valuestring;
    return uform_status_ok_k;
}


/** The ids HF's tokenizers gives the added tokens, whatever `id` the JSON writes: a content already in
 *  the model's vocabulary takes the vocabulary's id, one already added its first id, any other the next
 *  id past the vocabulary's size (a WordPiece map's distinct pieces, a Unigram list's length), in order. Real files agree; a probe's did not. */
static uform_status_t renumber_added(uform_tokenizer_t *tokenizer, loader_t *loader, pieces_t const *pieces,
                                     int32_t before_added) {
    if (!tokenizer->added_count) return uform_status_ok_k;
    uform_strmap_t vocab = {0}, added = {0};
    uform_status_t status = uform_strmap_init(&vocab, pieces->count, loader->blob);
    if (status == uform_status_ok_k) status = uform_strmap_init(&added, tokenizer->added_count, loader->blob);
    if (status != uform_status_ok_k) {
        uform_strmap_free(&vocab);
        return status;
    }
    for (size_t k = 0; k < pieces->count; ++k) uform_strmap_put(&vocab, pieces->offsets[k], pieces->lengths[k], pieces->ids[k]);
    /* HF's vocabulary size: a WordPiece map's distinct keys, a Unigram list's length (repeats included). */
    int32_t next = (int32_t)(tokenizer->model == model_unigram_k ? pieces->count : vocab.count), max_id = before_added;
    for (size_t k = 0; k < tokenizer->added_count; ++k) {
        added_t *token = &tokenizer->added[k];
        char const *content = loader->blob + token->offset;
        int32_t id = uform_strmap_get(&vocab, content, token->length);
        if (id < 0) id = uform_strmap_get(&added, content, token->length);
        if (id < 0) id = next++;
        uform_strmap_put(&added, token->offset, token->length, id);
        token->id = id;
        if (id > max_id) max_id = id;
    }
    loader->max_id = max_id;
    uform_strmap_free(&vocab), uform_strmap_free(&added);
    return uform_status_ok_k;
}

static uform_status_t open_json(uform_tokenizer_t *tokenizer, loader_t *loader, char const *data, size_t size,
                                uform_tokenizer_bert_t const *bert) {
    uform_json_scan_t const scanned = uform_json_scan(data, size, 0);
    if (scanned.values > UFORM_TOKENIZER_JSON_MAX_VALUES)
        return uform_fail(uform_status_corrupt_file_k, "%s: up to %zu JSON values, more than the %zu a tokenizer may "
                          "hold", loader->file, scanned.values, UFORM_TOKENIZER_JSON_MAX_VALUES);
    char const *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data, size, &end, false);
    if (!root) {
        size_t at = end && end >= data && end <= data + size ? (size_t)(end - data) : size;
        /* cJSON stops at CJSON_NESTING_LIMIT levels: say so rather than "malformed", as configs do. */
        if (uform_json_scan(data, size, at < size ? at + 1 : size).max_depth >= CJSON_NESTING_LIMIT)
            return uform_fail(uform_status_corrupt_file_k, "%s: JSON nested deeper than %d levels, at byte %zu",
                              loader->file, CJSON_NESTING_LIMIT, at);
        return uform_fail(uform_status_corrupt_file_k, "%s: malformed JSON near byte %zu", loader->file, at);
    }
    /* cJSON ends a string at a U+0000 it decodes, so "a\u0000b" would read as the piece "a"; HF keeps
     * it whole. Such a vocabulary is refused, not read as another. */
    size_t const nul = scanned.nul_escape;
    if (nul < size) {
        cJSON_Delete(root);
        return uform_fail(uform_status_unsupported_k, "%s: a string holds U+0000 (the escape at byte %zu), which this "
                          "engine's JSON reader cannot keep", loader->file, nul);
    }
    uform_status_t status = uform_status_ok_k;
    pieces_t pieces = {0};
    char *prefix = NULL, *unk = NULL;
    size_t max_chars = 100;
    loader->json_text = data, loader->json_size = size, loader->json_root = root;
    if (!cJSON_IsObject(root)) status = tokenizer_corrupt(loader, "not an object:", "the document");
    if (status == uform_status_ok_k)
        status = tokenizer_load_model(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "model"), &pieces, &prefix, &unk,
                            &max_chars);
    if (status == uform_status_ok_k)
        status = tokenizer_load_normalizer(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), 0);
    if (status == uform_status_ok_k)
        status = tokenizer_load_pre_tokenizer(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (status == uform_status_ok_k)
        status = tokenizer_load_post_processor(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    int32_t const before_added = loader->max_id;
    if (status == uform_status_ok_k)
        status = tokenizer_load_added_tokens(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    if (status == uform_status_ok_k) status = renumber_added(tokenizer, loader, &pieces, before_added);
    if (status == uform_status_ok_k) {
        cJSON const *truncation = cJSON_GetObjectItemCaseSensitive(root, "truncation");
        if (truncation && !cJSON_IsNull(truncation)) {
            cJSON const *max_length = cJSON_GetObjectItemCaseSensitive(truncation, "max_length");
            cJSON const *direction = cJSON_GetObjectItemCaseSensitive(truncation, "direction");
            if (!cJSON_IsObject(truncation) || !cJSON_IsNumber(max_length) || max_length->valuedouble < 1 ||
                max_length->valuedouble > 1e9 || floor(max_length->valuedouble) != max_length->valuedouble)
                status = tokenizer_corrupt(loader, "no positive integer", "truncation.max_length");
            else if (direction && !(cJSON_IsString(direction) && (!strcmp(direction->valuestring, "Right") ||
                                                                    !strcmp(direction->valuestring, "Left"))))
                status = tokenizer_corrupt(loader, "not \"Right\" or \"Left\":", "truncation.direction");
            else {
                tokenizer->json_max_length = (size_t)max_length->valuedouble;
                tokenizer->json_truncates_left = direction && !strcmp(direction->valuestring, "Left");
            }
        }
    }
    if (status == uform_status_ok_k) {
        tokenizer->pad_id = -1;
        cJSON const *padding = cJSON_GetObjectItemCaseSensitive(root, "padding");
        cJSON const *pad_id = cJSON_GetObjectItemCaseSensitive(padding, "pad_id");
        if (cJSON_IsNumber(pad_id) && pad_id->valuedouble >= 0 && pad_id->valuedouble <= INT32_MAX)
            tokenizer->pad_id = (int32_t)pad_id->valuedouble;
    }
    cJSON_Delete(root);
    loader->json_text = NULL, loader->json_size = 0, loader->json_root = NULL;
    bool const rebuild = bert && bert->pipeline;
    if (status == uform_status_ok_k && rebuild && tokenizer->model != model_wordpiece_k)
        status = uform_fail(uform_status_unsupported_k, "%s: a Unigram model where tokenizer_config.json's "
                            "tokenizer_class (or its absence) asks for BERT's WordPiece tokenizer", loader->file);
    if (status == uform_status_ok_k) {
        tokenizer->blob = loader->blob, tokenizer->blob_size = loader->blob_size;
        loader->blob = NULL;
        if (tokenizer->model == model_wordpiece_k)
            status = tokenizer_build_wordpiece(tokenizer, loader, &pieces, rebuild ? "##" : prefix, unk,
                                               rebuild ? 100 : max_chars);
        else
            status = tokenizer_finish_unigram(tokenizer, &pieces);
    }
    if (status == uform_status_ok_k && rebuild) status = tokenizer_bert_pipeline(tokenizer, loader, bert);
    if (status == uform_status_ok_k && bert && bert->lowercase_first) status = tokenizer_lowercase_first(tokenizer, loader);
    free(prefix), free(unk);
    tokenizer_pieces_free(&pieces);
    return status;
}

/** The vocabulary size, the padding id and the added tokens' trie, once everything is loaded. */
static uform_status_t finish_open(uform_tokenizer_t *result, loader_t const *loader) {
    result->vocab_size = (size_t)loader->max_id + 1;
    if (result->pad_id < 0) {
        char const *pads[] = {"[PAD]", "<pad>"};
        for (size_t k = 0; k < 2 && result->pad_id < 0; k++)
            result->pad_id = result->model == model_wordpiece_k ? uform_strmap_get(&result->wordpiece.words, pads[k], 5)
                                                                : uform_strmap_get(&result->unigram.lookup, pads[k], 5);
        if (result->pad_id < 0) result->pad_id = 0;
    }
    if (!result->added_count) return uform_status_ok_k;
    size_t bytes = 0;
    for (size_t k = 0; k < result->added_count; k++) bytes += result->added[k].length;
    uform_status_t status = uform_trie_init(&result->added_trie, bytes);
    /* Backwards, so that of two added tokens with one content the first keeps it, as the scan did. */
    for (size_t k = result->added_count; k-- > 0 && status == uform_status_ok_k;) {
        added_t const *token = &result->added[k];
        if (!uform_trie_insert(&result->added_trie, (unsigned char const *)result->blob + token->offset, token->length,
                               (int32_t)k))
            status = uform_fail(uform_status_out_of_memory_k, "%s: out of memory indexing the added tokens", loader->file);
    }
    return status;
}

uform_status_t uform_tokenizer_open(char const *directory, uform_tokenizer_bert_t const *bert, uform_tokenizer_t **tokenizer) {
    if (!tokenizer) return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_open: tokenizer is NULL");
    *tokenizer = NULL;
    if (!directory) return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_open: directory is NULL");
    size_t directory_length = strlen(directory);
    char *path = malloc(directory_length + 32);
    if (!path) return uform_fail(uform_status_out_of_memory_k, "uform_tokenizer_open: out of memory");
    snprintf(path, directory_length + 32, "%s/tokenizer.json", directory);
    char *data = NULL;
    size_t size = 0;
    bool json = true;
    /* vocab.txt serves only where tokenizer.json does not exist: one that cannot be read fails. */
    int missing = 0;
    uform_status_t status = uform_read_regular_file(path, UFORM_TOKENIZER_MAX_BYTES, uform_status_corrupt_file_k, &data,
                                                    &size, &missing);
    if (status == uform_status_ok_k && missing) {
        snprintf(path, directory_length + 32, "%s/vocab.txt", directory);
        json = false;
        status = uform_read_regular_file(path, UFORM_TOKENIZER_MAX_BYTES, uform_status_corrupt_file_k, &data, &size,
                                         &missing);
        if (status == uform_status_ok_k && missing)
            status = uform_fail(uform_status_system_error_k, "%s: neither tokenizer.json nor vocab.txt exists", directory);
    }
    if (status != uform_status_ok_k) {
        free(path);
        return status;
    }
    uform_tokenizer_t *result = calloc(1, sizeof(uform_tokenizer_t));
    loader_t loader = {.file = path, .max_id = -1};
    if (!result) status = uform_fail(uform_status_out_of_memory_k, "uform_tokenizer_open: out of memory");
    else {
        result->unigram.unk_id = result->wordpiece.unk_id = -1;
        status = json ? open_json(result, &loader, data, size, bert)
                      : tokenizer_open_vocab_txt(result, &loader, data, size, bert ? bert : &UFORM_TOKENIZER_BERT_DEFAULTS);
    }
    free(data);
    free(loader.blob);
    if (status == uform_status_ok_k) status = finish_open(result, &loader);
    if (status == uform_status_ok_k) result->from_vocab_txt = !json, *tokenizer = result;
    else uform_tokenizer_free(result);
    free(path);
    return status;
}

char const *uform_tokenizer_file_name(uform_tokenizer_t const *tokenizer) {
    return tokenizer->from_vocab_txt ? "vocab.txt" : "tokenizer.json";
}

int uform_tokenizer_truncates_left(uform_tokenizer_t const *tokenizer) {
    return tokenizer->json_max_length && tokenizer->json_truncates_left;
}

uform_status_t uform_tokenizer_open_json(char const *json, size_t size, char const *name, uform_tokenizer_t **tokenizer) {
    if (!tokenizer) return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_open_json: tokenizer is NULL");
    *tokenizer = NULL;
    if (!json && size) return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_open_json: json is NULL");
    uform_tokenizer_t *result = calloc(1, sizeof(uform_tokenizer_t));
    if (!result) return uform_fail(uform_status_out_of_memory_k, "uform_tokenizer_open_json: out of memory");
    result->unigram.unk_id = result->wordpiece.unk_id = -1;
    loader_t loader = {.file = name ? name : "tokenizer.json", .max_id = -1};
    uform_status_t status = open_json(result, &loader, json ? json : "", size, NULL);
    free(loader.blob);
    if (status == uform_status_ok_k) status = finish_open(result, &loader);
    if (status == uform_status_ok_k) *tokenizer = result;
    else uform_tokenizer_free(result);
    return status;
}

void uform_tokenizer_free(uform_tokenizer_t *tokenizer) {
    if (!tokenizer) return;
    uform_strmap_free(&tokenizer->wordpiece.words);
    uform_strmap_free(&tokenizer->wordpiece.continuations);
    uform_trie_free(&tokenizer->wordpiece.word_trie);
    uform_trie_free(&tokenizer->wordpiece.continuation_trie);
    uform_trie_free(&tokenizer->added_trie);
    uform_unigram_free(&tokenizer->unigram);
    tokenizer_clear_steps(tokenizer);
    free(tokenizer->steps);
    free(tokenizer->added);
    free(tokenizer->blob);
    free(tokenizer->prompt);
    free(tokenizer);
}

int32_t uform_tokenizer_pad_id(uform_tokenizer_t const *tokenizer) { return tokenizer ? tokenizer->pad_id : 0; }
size_t uform_tokenizer_vocab_size(uform_tokenizer_t const *tokenizer) { return tokenizer ? tokenizer->vocab_size : 0; }
size_t uform_tokenizer_specials_count(uform_tokenizer_t const *tokenizer) {
    return tokenizer ? tokenizer->prefix_count + tokenizer->suffix_count : 0;
}

uform_status_t uform_tokenizer_set_prompt(uform_tokenizer_t *tokenizer, char const *prompt) {
    size_t const length = strlen(prompt);
    size_t const invalid = uform_utf8_invalid_offset(prompt, length);
    if (invalid != length)
        return uform_fail(uform_status_corrupt_file_k, "the default prompt: invalid UTF-8 at byte %zu (0x%02X)", invalid,
                          (unsigned)(unsigned char)prompt[invalid]);
    char *copy = malloc(length + 1);
    if (!copy) return uform_fail(uform_status_out_of_memory_k, "out of memory for a %zu-byte prompt", length);
    memcpy(copy, prompt, length + 1);
    free(tokenizer->prompt);
    tokenizer->prompt = copy;
    tokenizer->prompt_length = length;
    return uform_status_ok_k;
}

uform_status_t uform_tokenizer_use_processor_truncation(uform_tokenizer_t *tokenizer, char const *label, bool slice) {
    if (tokenizer->json_max_length && tokenizer->json_truncates_left)
        return uform_fail(uform_status_unsupported_k, "%s: tokenizer.json truncates from the left, which is not supported",
                          label);
    size_t const specials = tokenizer->prefix_count + tokenizer->suffix_count;
    if (tokenizer->json_max_length && tokenizer->json_max_length < specials)
        return uform_fail(uform_status_corrupt_file_k,
                          "%s: tokenizer.json truncates to %zu tokens, fewer than its %zu special tokens", label,
                          tokenizer->json_max_length, specials);
    tokenizer->processor_truncation = slice;
    tokenizer->json_truncation = true;
    return uform_status_ok_k;
}
