/**
 *  @file   tokenizer.c
 *  @brief  Loading `tokenizer.json` (cJSON) or `vocab.txt`, and the encode pipeline of Hugging Face
 *          `tokenizers`: added tokens split out of the raw text, then per stretch the normaliser,
 *          the pre-tokeniser and the model, then truncation and the post-processor's specials.
 *          Only ids are produced, so no offsets are tracked.
 */
#include "text/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- String maps ---- */

uint64_t uform_hash_bytes(void const *data, size_t length) {
    unsigned char const *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (length * 0xD6E8FEB86659FD93ull);
    while (length >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8, length -= 8;
    }
    if (length) {
        uint64_t w = 0;
        memcpy(&w, p, length);
        h = (h ^ w) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

uform_status_t uform_strmap_init(uform_strmap_t *map, size_t expected, char const *blob) {
    size_t slots = 16;
    while (slots < expected * 2) slots <<= 1;
    map->slots = calloc(slots, sizeof(uform_strmap_slot_t));
    if (!map->slots) return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory for a vocabulary");
    map->mask = slots - 1;
    map->count = 0;
    map->blob = blob;
    return uform_status_ok_k;
}

void uform_strmap_put(uform_strmap_t *map, uint32_t offset, uint32_t length, int32_t id) {
    uint64_t h = uform_hash_bytes(map->blob + offset, length);
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    for (size_t i = (size_t)h & map->mask;; i = (i + 1) & map->mask) {
        uform_strmap_slot_t *slot = &map->slots[i];
        if (!slot->hash) {
            *slot = (uform_strmap_slot_t){.hash = tag, .id = id, .offset = offset, .length = length};
            map->count++;
            return;
        }
        if (slot->hash == tag && slot->length == length && !memcmp(map->blob + slot->offset, map->blob + offset, length)) {
            slot->id = id;
            return;
        }
    }
}

int32_t uform_strmap_get(uform_strmap_t const *map, char const *key, size_t length) {
    uint64_t h = uform_hash_bytes(key, length);
    uint32_t tag = (uint32_t)(h >> 32) | 1u;
    for (size_t i = (size_t)h & map->mask;; i = (i + 1) & map->mask) {
        uform_strmap_slot_t const *slot = &map->slots[i];
        if (!slot->hash) return -1;
        if (slot->hash == tag && slot->length == length && !memcmp(map->blob + slot->offset, key, length)) return slot->id;
    }
}

void uform_strmap_free(uform_strmap_t *map) {
    free(map->slots);
    map->slots = NULL;
}

bool uform_ids_grow(uform_ids_t *ids, size_t at_least) {
    size_t capacity = ids->capacity ? ids->capacity * 2 : 256;
    while (capacity < at_least) capacity *= 2;
    int32_t *data = realloc(ids->data, capacity * sizeof(int32_t));
    if (!data) return false;
    ids->data = data, ids->capacity = capacity;
    return true;
}

bool uform_scratch_reserve_u32(uint32_t **buffer, size_t *capacity, size_t count) {
    if (*capacity >= count) return true;
    size_t grown = count < 64 ? 64 : count + count / 2;
    uint32_t *data = realloc(*buffer, grown * sizeof(uint32_t));
    if (!data) return false;
    *buffer = data, *capacity = grown;
    return true;
}

void uform_scratch_free(uform_scratch_t *scratch) {
    free(scratch->a), free(scratch->b), free(scratch->bytes);
    free(scratch->scores), free(scratch->starts), free(scratch->pieces);
    free(scratch->ids.data);
}

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
    int32_t prefix[8], suffix[8];
    size_t prefix_count, suffix_count;
};

/* ---- Loading ---- */

typedef struct loader_t {
    char const *file; // for messages
    char *blob;
    size_t blob_size, blob_capacity;
    int32_t max_id;
} loader_t;

static uform_status_t corrupt(loader_t const *loader, char const *what, char const *key) {
    return uform_fail(uform_status_corrupt_file_k, "%s: %s \"%s\"", loader->file, what, key);
}

/** Appends bytes to the blob; returns the offset through `offset`. */
static uform_status_t blob_add(loader_t *loader, char const *bytes, size_t length, uint32_t *offset) {
    if (loader->blob_size + length + 1 > UINT32_MAX)
        return uform_fail(uform_status_limit_exceeded_k, "%s: more than 4 GiB of token strings", loader->file);
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

static uform_status_t read_file(char const *path, char **data, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) return uform_fail(uform_status_system_error_k, "%s: cannot open: %s", path, strerror(errno));
    char *buffer = NULL;
    size_t used = 0, capacity = 0;
    for (;;) {
        if (used == capacity) {
            if (capacity >= ((size_t)1 << 30)) {
                free(buffer), fclose(file);
                return uform_fail(uform_status_limit_exceeded_k, "%s: larger than 1 GiB", path);
            }
            capacity = capacity ? capacity * 2 : 1 << 20;
            char *grown = realloc(buffer, capacity + 1);
            if (!grown) {
                free(buffer), fclose(file);
                return uform_fail(uform_status_out_of_memory_k, "%s: out of memory reading it", path);
            }
            buffer = grown;
        }
        size_t got = fread(buffer + used, 1, capacity - used, file);
        used += got;
        if (got == 0) break;
    }
    bool failed = ferror(file);
    fclose(file);
    if (failed) {
        free(buffer);
        return uform_fail(uform_status_system_error_k, "%s: read error", path);
    }
    buffer[used] = 0;
    *data = buffer, *size = used;
    return uform_status_ok_k;
}

/** A JSON string decoded to code points (malloc'd); NULL `*out` for the empty string. */
static uform_status_t to_code_points(loader_t const *loader, char const *text, char const *key, uint32_t **out,
                                     size_t *count) {
    size_t length = strlen(text);
    if (uform_utf8_invalid_offset(text, length) != length) return corrupt(loader, "invalid UTF-8 in", key);
    *out = NULL, *count = 0;
    if (!length) return uform_status_ok_k;
    *out = malloc(length * sizeof(uint32_t));
    if (!*out) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    *count = uform_utf8_decode(text, length, *out);
    return uform_status_ok_k;
}

static bool json_flag(cJSON const *object, char const *key, bool fallback) {
    cJSON const *item = cJSON_GetObjectItemCaseSensitive(object, key);
    if (cJSON_IsBool(item)) return cJSON_IsTrue(item);
    return fallback;
}

static uform_status_t json_type(loader_t const *loader, cJSON const *object, char const *where, char const **type) {
    cJSON const *item = cJSON_GetObjectItemCaseSensitive(object, "type");
    if (!cJSON_IsString(item)) return corrupt(loader, "no string \"type\" in", where);
    *type = item->valuestring;
    return uform_status_ok_k;
}

static uform_status_t add_step(uform_tokenizer_t *tokenizer, loader_t const *loader, step_t step) {
    step_t *steps = realloc(tokenizer->steps, (tokenizer->steps_count + 1) * sizeof(step_t));
    if (!steps) {
        free(step.pattern), free(step.content);
        return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    }
    tokenizer->steps = steps;
    tokenizer->steps[tokenizer->steps_count++] = step;
    return uform_status_ok_k;
}

static uform_status_t load_normalizer(uform_tokenizer_t *tokenizer, loader_t const *loader, cJSON const *json,
                                      unsigned depth) {
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsObject(json)) return corrupt(loader, "not an object:", "normalizer");
    if (depth > 16) return corrupt(loader, "nested too deep:", "normalizer");
    char const *type = NULL;
    uform_status_t status = json_type(loader, json, "normalizer", &type);
    if (status != uform_status_ok_k) return status;
    step_t step = {0};
    if (!strcmp(type, "Sequence")) {
        cJSON const *list = cJSON_GetObjectItemCaseSensitive(json, "normalizers");
        if (!cJSON_IsArray(list)) return corrupt(loader, "no array", "normalizer.normalizers");
        cJSON const *item;
        cJSON_ArrayForEach(item, list) {
            status = load_normalizer(tokenizer, loader, item, depth + 1);
            if (status != uform_status_ok_k) return status;
        }
        return uform_status_ok_k;
    } else if (!strcmp(type, "BertNormalizer")) {
        step.kind = step_bert_k;
        step.clean_text = json_flag(json, "clean_text", true);
        step.chinese = json_flag(json, "handle_chinese_chars", true);
        step.lowercase = json_flag(json, "lowercase", true);
        step.strip_accents = json_flag(json, "strip_accents", step.lowercase); // null follows lowercase
    } else if (!strcmp(type, "NFD")) step.kind = step_nfd_k;
    else if (!strcmp(type, "NFKD")) step.kind = step_nfkd_k;
    else if (!strcmp(type, "NFC")) step.kind = step_nfc_k;
    else if (!strcmp(type, "NFKC")) step.kind = step_nfkc_k;
    else if (!strcmp(type, "Lowercase")) step.kind = step_lowercase_k;
    else if (!strcmp(type, "StripAccents")) step.kind = step_strip_accents_k;
    else if (!strcmp(type, "Strip")) {
        step.kind = step_strip_k;
        step.left = json_flag(json, "strip_left", true);
        step.right = json_flag(json, "strip_right", true);
    } else if (!strcmp(type, "Replace")) {
        step.kind = step_replace_k;
        cJSON const *pattern = cJSON_GetObjectItemCaseSensitive(json, "pattern");
        cJSON const *content = cJSON_GetObjectItemCaseSensitive(json, "content");
        cJSON const *literal = cJSON_GetObjectItemCaseSensitive(pattern, "String");
        if (cJSON_GetObjectItemCaseSensitive(pattern, "Regex"))
            return uform_fail(uform_status_unsupported_k, "%s: the Replace normalizer with a Regex pattern is not supported",
                              loader->file);
        if (!cJSON_IsString(literal)) return corrupt(loader, "no string", "normalizer.pattern.String");
        if (!cJSON_IsString(content)) return corrupt(loader, "no string", "normalizer.content");
        status = to_code_points(loader, literal->valuestring, "normalizer.pattern", &step.pattern, &step.pattern_length);
        if (status == uform_status_ok_k)
            status = to_code_points(loader, content->valuestring, "normalizer.content", &step.content, &step.content_length);
        if (status == uform_status_ok_k && !step.pattern_length) {
            free(step.pattern), free(step.content);
            return corrupt(loader, "an empty pattern in", "normalizer.pattern.String");
        }
        if (status != uform_status_ok_k) {
            free(step.pattern), free(step.content);
            return status;
        }
    } else if (!strcmp(type, "Prepend")) {
        step.kind = step_prepend_k;
        cJSON const *content = cJSON_GetObjectItemCaseSensitive(json, "prepend");
        if (!cJSON_IsString(content)) return corrupt(loader, "no string", "normalizer.prepend");
        status = to_code_points(loader, content->valuestring, "normalizer.prepend", &step.content, &step.content_length);
        if (status != uform_status_ok_k) return status;
    } else
        return uform_fail(uform_status_unsupported_k, "%s: the %s normalizer is not supported", loader->file, type);
    return add_step(tokenizer, loader, step);
}

static uform_status_t load_pre_tokenizer(uform_tokenizer_t *tokenizer, loader_t const *loader, cJSON const *json) {
    tokenizer->pre = pre_none_k;
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsObject(json)) return corrupt(loader, "not an object:", "pre_tokenizer");
    char const *type = NULL;
    uform_status_t status = json_type(loader, json, "pre_tokenizer", &type);
    if (status != uform_status_ok_k) return status;
    if (!strcmp(type, "Sequence")) { // a sequence of one is that one
        cJSON const *list = cJSON_GetObjectItemCaseSensitive(json, "pretokenizers");
        if (!cJSON_IsArray(list)) return corrupt(loader, "no array", "pre_tokenizer.pretokenizers");
        if (cJSON_GetArraySize(list) == 0) return uform_status_ok_k;
        if (cJSON_GetArraySize(list) != 1)
            return uform_fail(uform_status_unsupported_k, "%s: a Sequence of several pre-tokenizers is not supported",
                              loader->file);
        return load_pre_tokenizer(tokenizer, loader, cJSON_GetArrayItem(list, 0));
    }
    if (!strcmp(type, "BertPreTokenizer")) tokenizer->pre = pre_bert_k;
    else if (!strcmp(type, "WhitespaceSplit")) tokenizer->pre = pre_whitespace_split_k;
    else if (!strcmp(type, "Metaspace")) {
        tokenizer->pre = pre_metaspace_k;
        cJSON const *replacement = cJSON_GetObjectItemCaseSensitive(json, "replacement");
        if (!cJSON_IsString(replacement)) return corrupt(loader, "no string", "pre_tokenizer.replacement");
        uint32_t *points = NULL;
        size_t count = 0;
        status = to_code_points(loader, replacement->valuestring, "pre_tokenizer.replacement", &points, &count);
        if (status != uform_status_ok_k) return status;
        if (count != 1) {
            free(points);
            return corrupt(loader, "not one character:", "pre_tokenizer.replacement");
        }
        tokenizer->replacement = points[0];
        free(points);
        tokenizer->replacement_bytes = uform_utf8_put(tokenizer->replacement, tokenizer->replacement_utf8);
        tokenizer->prepend = prepend_always_k;
        cJSON const *scheme = cJSON_GetObjectItemCaseSensitive(json, "prepend_scheme");
        if (cJSON_IsString(scheme)) {
            if (!strcmp(scheme->valuestring, "always")) tokenizer->prepend = prepend_always_k;
            else if (!strcmp(scheme->valuestring, "first")) tokenizer->prepend = prepend_first_k;
            else if (!strcmp(scheme->valuestring, "never")) tokenizer->prepend = prepend_never_k;
            else return corrupt(loader, "an unknown value of", "pre_tokenizer.prepend_scheme");
        }
        cJSON const *prefix = cJSON_GetObjectItemCaseSensitive(json, "add_prefix_space");
        if (cJSON_IsFalse(prefix)) {
            if (cJSON_IsString(scheme) && tokenizer->prepend != prepend_never_k)
                return corrupt(loader, "add_prefix_space false contradicts", "pre_tokenizer.prepend_scheme");
            tokenizer->prepend = prepend_never_k;
        }
        tokenizer->split = json_flag(json, "split", true);
    } else
        return uform_fail(uform_status_unsupported_k, "%s: the %s pre-tokenizer is not supported", loader->file, type);
    return uform_status_ok_k;
}

/** The ids of `[name, id]` pairs (BertProcessing, RobertaProcessing). */
static uform_status_t pair_id(loader_t *loader, cJSON const *json, char const *key, int32_t *id) {
    cJSON const *pair = cJSON_GetObjectItemCaseSensitive(json, key);
    cJSON const *value = cJSON_GetArrayItem(pair, 1);
    if (!cJSON_IsArray(pair) || !cJSON_IsNumber(value) || value->valuedouble < 0 || value->valuedouble > INT32_MAX)
        return corrupt(loader, "no [token, id] pair", key);
    *id = (int32_t)value->valuedouble;
    if (*id > loader->max_id) loader->max_id = *id;
    return uform_status_ok_k;
}

static uform_status_t load_post_processor(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json) {
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsObject(json)) return corrupt(loader, "not an object:", "post_processor");
    char const *type = NULL;
    uform_status_t status = json_type(loader, json, "post_processor", &type);
    if (status != uform_status_ok_k) return status;
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        tokenizer->prefix_count = tokenizer->suffix_count = 1;
        status = pair_id(loader, json, "cls", &tokenizer->prefix[0]);
        if (status == uform_status_ok_k) status = pair_id(loader, json, "sep", &tokenizer->suffix[0]);
        return status;
    }
    if (!strcmp(type, "Sequence")) { // of one processor that adds specials, as tokenizers saves ByteLevel+Template
        cJSON const *list = cJSON_GetObjectItemCaseSensitive(json, "processors");
        if (!cJSON_IsArray(list)) return corrupt(loader, "no array", "post_processor.processors");
        cJSON const *item;
        cJSON_ArrayForEach(item, list) {
            cJSON const *inner = cJSON_GetObjectItemCaseSensitive(item, "type");
            if (cJSON_IsString(inner) && !strcmp(inner->valuestring, "ByteLevel")) continue;
            status = load_post_processor(tokenizer, loader, item);
            if (status != uform_status_ok_k) return status;
        }
        return uform_status_ok_k;
    }
    if (strcmp(type, "TemplateProcessing"))
        return uform_fail(uform_status_unsupported_k, "%s: the %s post-processor is not supported", loader->file, type);
    cJSON const *single = cJSON_GetObjectItemCaseSensitive(json, "single");
    cJSON const *specials = cJSON_GetObjectItemCaseSensitive(json, "special_tokens");
    if (!cJSON_IsArray(single)) return corrupt(loader, "no array", "post_processor.single");
    bool seen_sequence = false;
    tokenizer->prefix_count = tokenizer->suffix_count = 0;
    cJSON const *item;
    cJSON_ArrayForEach(item, single) {
        cJSON const *sequence = cJSON_GetObjectItemCaseSensitive(item, "Sequence");
        cJSON const *special = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
        if (sequence) {
            if (seen_sequence)
                return uform_fail(uform_status_unsupported_k, "%s: a single-sequence template with two sequences",
                                  loader->file);
            seen_sequence = true;
            continue;
        }
        cJSON const *name = cJSON_GetObjectItemCaseSensitive(special, "id");
        if (!cJSON_IsString(name)) return corrupt(loader, "no special token id in", "post_processor.single");
        cJSON const *entry = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        cJSON const *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
        if (!cJSON_IsArray(ids)) return corrupt(loader, "no ids for the special token", name->valuestring);
        cJSON const *id;
        cJSON_ArrayForEach(id, ids) {
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX)
                return corrupt(loader, "a bad id for the special token", name->valuestring);
            size_t *count = seen_sequence ? &tokenizer->suffix_count : &tokenizer->prefix_count;
            int32_t *list = seen_sequence ? tokenizer->suffix : tokenizer->prefix;
            if (*count == 8)
                return uform_fail(uform_status_unsupported_k, "%s: more than 8 special ids on one side of the template",
                                  loader->file);
            list[(*count)++] = (int32_t)id->valuedouble;
            if ((int32_t)id->valuedouble > loader->max_id) loader->max_id = (int32_t)id->valuedouble;
        }
    }
    if (!seen_sequence) return corrupt(loader, "no $A sequence in", "post_processor.single");
    return uform_status_ok_k;
}

static uform_status_t add_added_token(uform_tokenizer_t *tokenizer, loader_t *loader, char const *content,
                                      size_t length, int32_t id, bool lstrip, bool rstrip) {
    if (!length) return uform_status_ok_k;
    added_t *added = realloc(tokenizer->added, (tokenizer->added_count + 1) * sizeof(added_t));
    if (!added) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    tokenizer->added = added;
    added_t *token = &added[tokenizer->added_count];
    uform_status_t status = blob_add(loader, content, length, &token->offset);
    if (status != uform_status_ok_k) return status;
    token->length = (uint32_t)length, token->id = id, token->lstrip = lstrip, token->rstrip = rstrip;
    tokenizer->added_first_byte[(unsigned char)content[0]] = true;
    tokenizer->added_count++;
    if (id > loader->max_id) loader->max_id = id;
    return uform_status_ok_k;
}

static uform_status_t load_added_tokens(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json) {
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsArray(json)) return corrupt(loader, "not an array:", "added_tokens");
    cJSON const *item;
    cJSON_ArrayForEach(item, json) {
        cJSON const *content = cJSON_GetObjectItemCaseSensitive(item, "content");
        cJSON const *id = cJSON_GetObjectItemCaseSensitive(item, "id");
        if (!cJSON_IsString(content)) return corrupt(loader, "no string", "added_tokens[].content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX)
            return corrupt(loader, "no id for the added token", content->valuestring);
        size_t length = strlen(content->valuestring);
        if (uform_utf8_invalid_offset(content->valuestring, length) != length)
            return corrupt(loader, "invalid UTF-8 in", "added_tokens[].content");
        if (json_flag(item, "normalized", !json_flag(item, "special", false)))
            return uform_fail(uform_status_unsupported_k,
                              "%s: the added token \"%s\" is matched after normalisation, which is not supported",
                              loader->file, content->valuestring);
        if (json_flag(item, "single_word", false))
            return uform_fail(uform_status_unsupported_k, "%s: the single-word added token \"%s\" is not supported",
                              loader->file, content->valuestring);
        uform_status_t status =
            add_added_token(tokenizer, loader, content->valuestring, length, (int32_t)id->valuedouble,
                            json_flag(item, "lstrip", false), json_flag(item, "rstrip", false));
        if (status != uform_status_ok_k) return status;
    }
    return uform_status_ok_k;
}

/** The vocabulary strings go into the blob first; then the maps, which point into the final blob. */
typedef struct pieces_t {
    uint32_t *offsets, *lengths;
    int32_t *ids;
    double *scores;
    size_t count;
} pieces_t;

static void pieces_free(pieces_t *pieces) {
    free(pieces->offsets), free(pieces->lengths), free(pieces->ids), free(pieces->scores);
}

static uform_status_t pieces_alloc(pieces_t *pieces, size_t count, char const *file) {
    pieces->offsets = malloc((count + 1) * sizeof(uint32_t));
    pieces->lengths = malloc((count + 1) * sizeof(uint32_t));
    pieces->ids = malloc((count + 1) * sizeof(int32_t));
    pieces->scores = malloc((count + 1) * sizeof(double));
    pieces->count = 0;
    if (!pieces->offsets || !pieces->lengths || !pieces->ids || !pieces->scores)
        return uform_fail(uform_status_out_of_memory_k, "%s: out of memory for the vocabulary", file);
    return uform_status_ok_k;
}

static uform_status_t build_wordpiece(uform_tokenizer_t *tokenizer, loader_t *loader, pieces_t const *pieces,
                                      char const *prefix, char const *unk, size_t max_chars) {
    uform_wordpiece_t *model = &tokenizer->wordpiece;
    model->max_chars = max_chars;
    uform_status_t status = uform_strmap_init(&model->words, pieces->count, NULL);
    if (status == uform_status_ok_k) status = uform_strmap_init(&model->continuations, pieces->count, NULL);
    if (status != uform_status_ok_k) return status;
    (void)loader;
    size_t prefix_length = strlen(prefix), total = 0;
    for (size_t i = 0; i < pieces->count; i++) total += pieces->lengths[i];
    status = uform_trie_init(&model->word_trie, total);
    if (status == uform_status_ok_k) status = uform_trie_init(&model->continuation_trie, total);
    if (status != uform_status_ok_k) return status;
    for (size_t i = 0; i < pieces->count; i++) {
        char const *piece = tokenizer->blob + pieces->offsets[i];
        model->words.blob = model->continuations.blob = tokenizer->blob;
        uform_strmap_put(&model->words, pieces->offsets[i], pieces->lengths[i], pieces->ids[i]);
        if (!uform_trie_insert(&model->word_trie, (unsigned char const *)piece, pieces->lengths[i], pieces->ids[i]))
            return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory for the WordPiece trie");
        if (pieces->lengths[i] > model->longest_word) model->longest_word = pieces->lengths[i];
        if (pieces->lengths[i] >= prefix_length && !memcmp(piece, prefix, prefix_length)) {
            uform_strmap_put(&model->continuations, pieces->offsets[i] + (uint32_t)prefix_length,
                             pieces->lengths[i] - (uint32_t)prefix_length, pieces->ids[i]);
            if (!uform_trie_insert(&model->continuation_trie, (unsigned char const *)piece + prefix_length,
                                   pieces->lengths[i] - prefix_length, pieces->ids[i]))
                return uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory for the WordPiece trie");
            if (pieces->lengths[i] - prefix_length > model->longest_continuation)
                model->longest_continuation = pieces->lengths[i] - prefix_length;
        }
    }
    model->unk_id = uform_strmap_get(&model->words, unk, strlen(unk));
    return uform_status_ok_k;
}

static uform_status_t load_model(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json, pieces_t *pieces,
                                 char **prefix, char **unk, size_t *max_chars) {
    if (!cJSON_IsObject(json)) return corrupt(loader, "no object", "model");
    cJSON const *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    cJSON const *vocab = cJSON_GetObjectItemCaseSensitive(json, "vocab");
    char const *kind = cJSON_IsString(type) ? type->valuestring
                       : cJSON_IsArray(vocab)  ? "Unigram"
                       : cJSON_GetObjectItemCaseSensitive(json, "continuing_subword_prefix") ? "WordPiece"
                                                                                           : NULL;
    if (!kind) return corrupt(loader, "no string", "model.type");
    uform_status_t status;
    if (!strcmp(kind, "WordPiece")) {
        tokenizer->model = model_wordpiece_k;
        if (!cJSON_IsObject(vocab)) return corrupt(loader, "no object", "model.vocab");
        cJSON const *unk_token = cJSON_GetObjectItemCaseSensitive(json, "unk_token");
        cJSON const *prefix_json = cJSON_GetObjectItemCaseSensitive(json, "continuing_subword_prefix");
        cJSON const *max_json = cJSON_GetObjectItemCaseSensitive(json, "max_input_chars_per_word");
        *unk = strdup(cJSON_IsString(unk_token) ? unk_token->valuestring : "[UNK]");
        *prefix = strdup(cJSON_IsString(prefix_json) ? prefix_json->valuestring : "##");
        if (!*unk || !*prefix) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
        *max_chars = 100;
        if (cJSON_IsNumber(max_json)) {
            if (max_json->valuedouble < 0) return corrupt(loader, "a negative", "model.max_input_chars_per_word");
            *max_chars = max_json->valuedouble > 1e18 ? (size_t)1e18 : (size_t)max_json->valuedouble;
        }
        status = pieces_alloc(pieces, (size_t)cJSON_GetArraySize(vocab), loader->file);
        if (status != uform_status_ok_k) return status;
        cJSON const *item;
        cJSON_ArrayForEach(item, vocab) {
            if (!cJSON_IsNumber(item) || item->valuedouble < 0 || item->valuedouble > INT32_MAX)
                return corrupt(loader, "a bad id for the vocabulary entry", item->string);
            size_t length = strlen(item->string);
            if (uform_utf8_invalid_offset(item->string, length) != length)
                return corrupt(loader, "invalid UTF-8 in", "model.vocab");
            size_t i = pieces->count++;
            status = blob_add(loader, item->string, length, &pieces->offsets[i]);
            if (status != uform_status_ok_k) return status;
            pieces->lengths[i] = (uint32_t)length;
            pieces->ids[i] = (int32_t)item->valuedouble;
            if (pieces->ids[i] > loader->max_id) loader->max_id = pieces->ids[i];
        }
        return uform_status_ok_k;
    }
    if (!strcmp(kind, "Unigram")) {
        tokenizer->model = model_unigram_k;
        uform_unigram_t *model = &tokenizer->unigram;
        if (!cJSON_IsArray(vocab)) return corrupt(loader, "no array", "model.vocab");
        size_t count = (size_t)cJSON_GetArraySize(vocab);
        if (!count) return corrupt(loader, "an empty", "model.vocab");
        status = pieces_alloc(pieces, count, loader->file);
        if (status != uform_status_ok_k) return status;
        model->min_score = 1e300;
        cJSON const *item;
        cJSON_ArrayForEach(item, vocab) {
            cJSON const *piece = cJSON_GetArrayItem(item, 0), *score = cJSON_GetArrayItem(item, 1);
            if (!cJSON_IsString(piece) || !cJSON_IsNumber(score))
                return corrupt(loader, "a vocabulary entry that is not [piece, score] in", "model.vocab");
            size_t length = strlen(piece->valuestring);
            if (uform_utf8_invalid_offset(piece->valuestring, length) != length)
                return corrupt(loader, "invalid UTF-8 in", "model.vocab");
            size_t i = pieces->count++;
            status = blob_add(loader, piece->valuestring, length, &pieces->offsets[i]);
            if (status != uform_status_ok_k) return status;
            pieces->lengths[i] = (uint32_t)length;
            pieces->ids[i] = (int32_t)i;
            pieces->scores[i] = score->valuedouble;
            if (score->valuedouble < model->min_score) model->min_score = score->valuedouble;
        }
        loader->max_id = (int32_t)count - 1 > loader->max_id ? (int32_t)count - 1 : loader->max_id;
        cJSON const *unk_id = cJSON_GetObjectItemCaseSensitive(json, "unk_id");
        model->unk_id = -1;
        if (cJSON_IsNumber(unk_id)) {
            if (unk_id->valuedouble < 0 || unk_id->valuedouble >= (double)count)
                return corrupt(loader, "an id past the vocabulary in", "model.unk_id");
            model->unk_id = (int32_t)unk_id->valuedouble;
        }
        model->byte_fallback = json_flag(json, "byte_fallback", false);
        return uform_status_ok_k;
    }
    return uform_fail(uform_status_unsupported_k, "%s: the %s tokenizer model is not supported (WordPiece and Unigram are)",
                      loader->file, kind);
}

static uform_status_t finish_unigram(uform_tokenizer_t *tokenizer, pieces_t *pieces) {
    uform_unigram_t *model = &tokenizer->unigram;
    model->pieces = pieces->count;
    model->scores = pieces->scores;
    pieces->scores = NULL;
    uform_status_t status = uform_unigram_build(model, tokenizer->blob, pieces->offsets, pieces->lengths, pieces->count);
    if (status == uform_status_ok_k) status = uform_strmap_init(&model->lookup, pieces->count, tokenizer->blob);
    if (status != uform_status_ok_k) return status;
    for (size_t i = 0; i < pieces->count; i++)
        uform_strmap_put(&model->lookup, pieces->offsets[i], pieces->lengths[i], (int32_t)i);
    for (unsigned b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        model->byte_ids[b] = uform_strmap_get(&model->lookup, name, 6);
    }
    return uform_status_ok_k;
}

static uform_status_t open_json(uform_tokenizer_t *tokenizer, loader_t *loader, char const *data, size_t size) {
    char const *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(data, size, &end, false);
    if (!root) {
        size_t at = end && end >= data && end <= data + size ? (size_t)(end - data) : size;
        return uform_fail(uform_status_corrupt_file_k, "%s: malformed JSON near byte %zu", loader->file, at);
    }
    uform_status_t status = uform_status_ok_k;
    pieces_t pieces = {0};
    char *prefix = NULL, *unk = NULL;
    size_t max_chars = 100;
    if (!cJSON_IsObject(root)) status = corrupt(loader, "not an object:", "the document");
    if (status == uform_status_ok_k)
        status = load_model(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "model"), &pieces, &prefix, &unk,
                            &max_chars);
    if (status == uform_status_ok_k)
        status = load_normalizer(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), 0);
    if (status == uform_status_ok_k)
        status = load_pre_tokenizer(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"));
    if (status == uform_status_ok_k)
        status = load_post_processor(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    if (status == uform_status_ok_k)
        status = load_added_tokens(tokenizer, loader, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"));
    if (status == uform_status_ok_k) {
        tokenizer->pad_id = -1;
        cJSON const *padding = cJSON_GetObjectItemCaseSensitive(root, "padding");
        cJSON const *pad_id = cJSON_GetObjectItemCaseSensitive(padding, "pad_id");
        if (cJSON_IsNumber(pad_id) && pad_id->valuedouble >= 0 && pad_id->valuedouble <= INT32_MAX)
            tokenizer->pad_id = (int32_t)pad_id->valuedouble;
    }
    cJSON_Delete(root);
    if (status == uform_status_ok_k) {
        tokenizer->blob = loader->blob, tokenizer->blob_size = loader->blob_size;
        loader->blob = NULL;
        if (tokenizer->model == model_wordpiece_k)
            status = build_wordpiece(tokenizer, loader, &pieces, prefix, unk, max_chars);
        else
            status = finish_unigram(tokenizer, &pieces);
    }
    free(prefix), free(unk);
    pieces_free(&pieces);
    return status;
}

/** `vocab.txt`: one piece per line, its line number its id (as `tokenizers`' WordPiece::read_file);
 *  BERT's defaults around it (as `tokenizers`' BertWordPieceTokenizer). */
static uform_status_t open_vocab_txt(uform_tokenizer_t *tokenizer, loader_t *loader, char const *data, size_t size,
                                     int lower_case) {
    if (uform_utf8_invalid_offset(data, size) != size)
        return uform_fail(uform_status_corrupt_file_k, "%s: invalid UTF-8 at byte %zu", loader->file,
                          uform_utf8_invalid_offset(data, size));
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    pieces_t pieces = {0};
    uform_status_t status = pieces_alloc(&pieces, lines, loader->file);
    uint32_t *points = NULL;
    size_t points_capacity = 0;
    for (size_t start = 0; status == uform_status_ok_k && start < size;) {
        char const *newline = memchr(data + start, '\n', size - start);
        size_t end = newline ? (size_t)(newline - data) : size;
        size_t length = end - start;
        // trim_end: trailing White_Space code points.
        if (!uform_scratch_reserve_u32(&points, &points_capacity, length + 1)) {
            status = uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
            break;
        }
        size_t n = uform_utf8_decode(data + start, length, points);
        while (n && uform_is_whitespace(points[n - 1])) {
            char tmp[4];
            length -= uform_utf8_put(points[--n], tmp);
        }
        size_t i = pieces.count++;
        status = blob_add(loader, data + start, length, &pieces.offsets[i]);
        pieces.lengths[i] = (uint32_t)length;
        pieces.ids[i] = (int32_t)i;
        start = newline ? end + 1 : size;
    }
    free(points);
    if (status == uform_status_ok_k && !pieces.count) status = corrupt(loader, "no tokens in", "the file");
    if (status == uform_status_ok_k) {
        loader->max_id = (int32_t)pieces.count - 1;
        tokenizer->model = model_wordpiece_k;
        tokenizer->blob = loader->blob, tokenizer->blob_size = loader->blob_size;
        loader->blob = NULL;
        status = build_wordpiece(tokenizer, loader, &pieces, "##", "[UNK]", 100);
    }
    pieces_free(&pieces);
    if (status != uform_status_ok_k) return status;
    step_t bert = {.kind = step_bert_k, .clean_text = true, .chinese = true, .lowercase = lower_case != 0,
                   .strip_accents = lower_case != 0};
    status = add_step(tokenizer, loader, bert);
    if (status != uform_status_ok_k) return status;
    tokenizer->pre = pre_bert_k;
    uform_strmap_t const *words = &tokenizer->wordpiece.words;
    int32_t cls = uform_strmap_get(words, "[CLS]", 5), sep = uform_strmap_get(words, "[SEP]", 5);
    if (cls < 0 || sep < 0) return corrupt(loader, "no [CLS] or [SEP] token:", "[CLS]/[SEP]");
    tokenizer->prefix[0] = cls, tokenizer->suffix[0] = sep;
    tokenizer->prefix_count = tokenizer->suffix_count = 1;
    // The specials BertWordPieceTokenizer adds, where the vocabulary has them; the blob may move
    // while they are added, so the maps are re-pointed after.
    char const *names[] = {"[SEP]", "[CLS]", "[PAD]", "[MASK]", "[UNK]"};
    int32_t ids[5];
    for (size_t k = 0; k < 5; k++) ids[k] = uform_strmap_get(words, names[k], strlen(names[k]));
    loader->blob = tokenizer->blob, loader->blob_size = tokenizer->blob_size, loader->blob_capacity = tokenizer->blob_size + 1;
    tokenizer->blob = NULL;
    for (size_t k = 0; k < 5 && status == uform_status_ok_k; k++)
        if (ids[k] >= 0) status = add_added_token(tokenizer, loader, names[k], strlen(names[k]), ids[k], false, false);
    tokenizer->blob = loader->blob, tokenizer->blob_size = loader->blob_size;
    loader->blob = NULL;
    tokenizer->wordpiece.words.blob = tokenizer->wordpiece.continuations.blob = tokenizer->blob;
    tokenizer->pad_id = ids[2];
    return status;
}

/** The vocabulary size and the padding id, once everything is loaded. */
static void finish_open(uform_tokenizer_t *result, loader_t const *loader) {
    result->vocab_size = (size_t)loader->max_id + 1;
    if (result->pad_id < 0) {
        char const *pads[] = {"[PAD]", "<pad>"};
        for (size_t k = 0; k < 2 && result->pad_id < 0; k++)
            result->pad_id = result->model == model_wordpiece_k ? uform_strmap_get(&result->wordpiece.words, pads[k], 5)
                                                                : uform_strmap_get(&result->unigram.lookup, pads[k], 5);
        if (result->pad_id < 0) result->pad_id = 0;
    }
}

uform_status_t uform_tokenizer_open(char const *directory, int lower_case_hint, uform_tokenizer_t **tokenizer) {
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
    uform_status_t status = read_file(path, &data, &size);
    if (status == uform_status_system_error_k) {
        snprintf(path, directory_length + 32, "%s/vocab.txt", directory);
        FILE *probe = fopen(path, "rb");
        if (probe) {
            fclose(probe);
            json = false;
            status = read_file(path, &data, &size);
        } else {
            status = uform_fail(uform_status_system_error_k, "%s: neither tokenizer.json nor vocab.txt can be opened",
                                directory);
        }
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
        status = json ? open_json(result, &loader, data, size) : open_vocab_txt(result, &loader, data, size, lower_case_hint);
    }
    free(data);
    free(loader.blob);
    if (status == uform_status_ok_k) {
        finish_open(result, &loader);
        *tokenizer = result;
    } else
        uform_tokenizer_free(result);
    free(path);
    return status;
}

uform_status_t uform_tokenizer_open_json(char const *json, size_t size, char const *name, uform_tokenizer_t **tokenizer) {
    if (!tokenizer) return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_open_json: tokenizer is NULL");
    *tokenizer = NULL;
    if (!json && size) return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_open_json: json is NULL");
    uform_tokenizer_t *result = calloc(1, sizeof(uform_tokenizer_t));
    if (!result) return uform_fail(uform_status_out_of_memory_k, "uform_tokenizer_open_json: out of memory");
    result->unigram.unk_id = result->wordpiece.unk_id = -1;
    loader_t loader = {.file = name ? name : "tokenizer.json", .max_id = -1};
    uform_status_t status = open_json(result, &loader, json ? json : "", size);
    free(loader.blob);
    if (status == uform_status_ok_k) {
        finish_open(result, &loader);
        *tokenizer = result;
    } else
        uform_tokenizer_free(result);
    return status;
}

void uform_tokenizer_free(uform_tokenizer_t *tokenizer) {
    if (!tokenizer) return;
    uform_strmap_free(&tokenizer->wordpiece.words);
    uform_strmap_free(&tokenizer->wordpiece.continuations);
    uform_trie_free(&tokenizer->wordpiece.word_trie);
    uform_trie_free(&tokenizer->wordpiece.continuation_trie);
    uform_unigram_free(&tokenizer->unigram);
    for (size_t i = 0; i < tokenizer->steps_count; i++) free(tokenizer->steps[i].pattern), free(tokenizer->steps[i].content);
    free(tokenizer->steps);
    free(tokenizer->added);
    free(tokenizer->blob);
    free(tokenizer);
}

int32_t uform_tokenizer_pad_id(uform_tokenizer_t const *tokenizer) { return tokenizer ? tokenizer->pad_id : 0; }
size_t uform_tokenizer_vocab_size(uform_tokenizer_t const *tokenizer) { return tokenizer ? tokenizer->vocab_size : 0; }

/* ---- Encoding ---- */

#define OOM() uform_fail(uform_status_out_of_memory_k, "tokenizer: out of memory")

/** Makes `b` hold at least `count`, then swaps `a` and `b` after the step writes `b`. */
static inline void swap_buffers(uform_scratch_t *s) {
    uint32_t *t = s->a;
    size_t c = s->a_cap;
    s->a = s->b, s->a_cap = s->b_cap;
    s->b = t, s->b_cap = c;
}

static uform_status_t run_step(step_t const *step, uform_scratch_t *s, size_t *count) {
    size_t n = *count, w = 0;
    switch (step->kind) {
    case step_bert_k: {
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, n * 3 + 1)) return OOM();
        bool any_wide = false;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = s->a[i];
            if (step->clean_text) {
                if (c == 0 || c == 0xFFFD) continue;
                if (c != '\t' && c != '\n' && c != '\r' && uform_hf_is_other(c)) continue;
                if (uform_is_whitespace(c)) c = ' ';
            }
            if (c >= 0x80) any_wide = true;
            if (step->chinese && c >= 0x3400 && uform_is_cjk(c)) {
                s->b[w++] = ' ', s->b[w++] = c, s->b[w++] = ' ';
                continue;
            }
            else if (step->lowercase && c >= 'A' && c <= 'Z') c += 32;
            s->b[w++] = c;
        }
        swap_buffers(s), n = w;
        if (!any_wide) break; // ASCII: nothing decomposes, and the letters are lower-cased already
        if (step->strip_accents) {
            if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, uform_normalize_capacity(s->a, n, uform_nfd_k))) return OOM();
            n = uform_normalize(s->a, n, uform_nfd_k, s->b);
            w = 0;
            for (size_t i = 0; i < n; i++)
                if (!uform_hf_is_mn(s->b[i])) s->b[w++] = s->b[i];
            swap_buffers(s), n = w;
        }
        if (step->lowercase) {
            if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, n * 3 + 1)) return OOM();
            w = 0;
            for (size_t i = 0; i < n; i++) w += uform_hf_lower(s->a[i], s->b + w);
            swap_buffers(s), n = w;
        }
        break;
    }
    case step_nfd_k: case step_nfkd_k: case step_nfc_k: case step_nfkc_k: {
        uform_normal_form_t form = step->kind == step_nfd_k    ? uform_nfd_k
                                   : step->kind == step_nfkd_k ? uform_nfkd_k
                                   : step->kind == step_nfc_k  ? uform_nfc_k
                                                               : uform_nfkc_k;
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, uform_normalize_capacity(s->a, n, form))) return OOM();
        n = uform_normalize(s->a, n, form, s->b);
        swap_buffers(s);
        break;
    }
    case step_lowercase_k:
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, n * 3 + 1)) return OOM();
        for (size_t i = 0; i < n; i++) w += uform_hf_lower(s->a[i], s->b + w);
        swap_buffers(s), n = w;
        break;
    case step_strip_accents_k:
        for (size_t i = 0; i < n; i++)
            if (!uform_hf_is_mark(s->a[i])) s->a[w++] = s->a[i];
        n = w;
        break;
    case step_strip_k: {
        size_t first = 0, last = n;
        if (step->left) while (first < last && uform_is_whitespace(s->a[first])) first++;
        if (step->right) while (last > first && uform_is_whitespace(s->a[last - 1])) last--;
        memmove(s->a, s->a + first, (last - first) * sizeof(uint32_t));
        n = last - first;
        break;
    }
    case step_prepend_k:
        if (!n) break;
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, n + step->content_length + 1)) return OOM();
        if (step->content_length) memcpy(s->b, step->content, step->content_length * sizeof(uint32_t));
        memcpy(s->b + step->content_length, s->a, n * sizeof(uint32_t));
        swap_buffers(s), n += step->content_length;
        break;
    case step_replace_k: {
        size_t p = step->pattern_length, r = step->content_length;
        size_t bound = r > p ? n / p * (r - p) + n + 1 : n + 1;
        if (!uform_scratch_reserve_u32(&s->b, &s->b_cap, bound)) return OOM();
        for (size_t i = 0; i < n;) {
            if (i + p <= n && !memcmp(s->a + i, step->pattern, p * sizeof(uint32_t))) {
                if (r) memcpy(s->b + w, step->content, r * sizeof(uint32_t));
                w += r, i += p;
            } else
                s->b[w++] = s->a[i++];
        }
        swap_buffers(s), n = w;
        break;
    }
    }
    *count = n;
    return uform_status_ok_k;
}

/** Runs the model on one pre-tokenized word given as code points. */
static uform_status_t run_model(uform_tokenizer_t const *tokenizer, uint32_t const *word, size_t chars,
                                uform_scratch_t *s) {
    if (!chars) return uform_status_ok_k;
    size_t length = 0;
    for (size_t i = 0; i < chars; i++) length += uform_utf8_put(word[i], s->bytes + length);
    if (tokenizer->model == model_wordpiece_k)
        return uform_wordpiece_encode(&tokenizer->wordpiece, s->bytes, length, chars, s);
    return uform_unigram_encode(&tokenizer->unigram, s->bytes, length, s);
}

/** Whether the normaliser keeps something of the text's first code point. `tokenizers` prepends
 *  Metaspace's "first" replacement only where the normalised text still starts at original offset 0,
 *  which a normaliser that deletes the first character (a leading accent, a control) moves. */
static uform_status_t first_survives(uform_tokenizer_t const *tokenizer, uint32_t first, bool *survives) {
    uform_scratch_t tiny = {0};
    uform_status_t status = uform_status_ok_k;
    size_t n = 1;
    if (!uform_scratch_reserve_u32(&tiny.a, &tiny.a_cap, 4)) status = OOM();
    else tiny.a[0] = first;
    for (size_t i = 0; i < tokenizer->steps_count && status == uform_status_ok_k && n; i++)
        status = run_step(&tokenizer->steps[i], &tiny, &n);
    *survives = n > 0;
    uform_scratch_free(&tiny);
    return status;
}

/** Normalises, pre-tokenizes and encodes one stretch of text between added tokens. */
static uform_status_t encode_stretch(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                     bool at_start, uform_scratch_t *s) {
    if (!uform_scratch_reserve_u32(&s->a, &s->a_cap, length + 2)) return OOM();
    size_t n = uform_utf8_decode(text, length, s->a);
    if (at_start && n && tokenizer->pre == pre_metaspace_k && tokenizer->prepend == prepend_first_k) {
        uform_status_t status = first_survives(tokenizer, s->a[0], &at_start);
        if (status != uform_status_ok_k) return status;
    }
    for (size_t i = 0; i < tokenizer->steps_count; i++) {
        uform_status_t status = run_step(&tokenizer->steps[i], s, &n);
        if (status != uform_status_ok_k) return status;
    }
    // Room for the words' UTF-8 (and a prepended replacement).
    if (s->bytes_cap < n * 4 + 8) {
        char *bytes = realloc(s->bytes, n * 4 + 8);
        if (!bytes) return OOM();
        s->bytes = bytes, s->bytes_cap = n * 4 + 8;
    }
    uint32_t *cps = s->a;
    uform_status_t status = uform_status_ok_k;
    switch (tokenizer->pre) {
    case pre_none_k: return run_model(tokenizer, cps, n, s);
    case pre_bert_k:
    case pre_whitespace_split_k: {
        size_t start = 0;
        for (size_t i = 0; i <= n && status == uform_status_ok_k; i++) {
            if (s->ids.count >= s->limit) return uform_status_ok_k;
            if (i == n || uform_is_whitespace(cps[i])) {
                status = run_model(tokenizer, cps + start, i - start, s);
                start = i + 1;
            } else if (tokenizer->pre == pre_bert_k && uform_hf_is_punct(cps[i])) {
                status = run_model(tokenizer, cps + start, i - start, s);
                if (status == uform_status_ok_k && s->ids.count < s->limit) status = run_model(tokenizer, cps + i, 1, s);
                start = i + 1;
            }
        }
        return status;
    }
    case pre_metaspace_k: {
        if (!n) return uform_status_ok_k; // `tokenizers` drops empty stretches before pre-tokenizing
        if (!uform_scratch_reserve_u32(&s->a, &s->a_cap, n + 1)) return OOM();
        cps = s->a;
        uint32_t r = tokenizer->replacement;
        for (size_t i = 0; i < n; i++)
            if (cps[i] == ' ') cps[i] = r;
        bool prepend = tokenizer->prepend == prepend_always_k || (tokenizer->prepend == prepend_first_k && at_start);
        if (prepend && (n == 0 || cps[0] != r)) {
            memmove(cps + 1, cps, n * sizeof(uint32_t));
            cps[0] = r, n++;
        }
        if (!tokenizer->split) return run_model(tokenizer, cps, n, s);
        size_t start = 0;
        for (size_t i = 1; i <= n && status == uform_status_ok_k; i++) {
            if (s->ids.count >= s->limit) return uform_status_ok_k;
            if (i == n || cps[i] == r) {
                status = run_model(tokenizer, cps + start, i - start, s);
                start = i;
            }
        }
        return status;
    }
    }
    return status;
}

/** The added token matching at `text[i]`, longest first, or NULL. */
static added_t const *match_added(uform_tokenizer_t const *tokenizer, char const *text, size_t length, size_t i) {
    added_t const *best = NULL;
    for (size_t k = 0; k < tokenizer->added_count; k++) {
        added_t const *token = &tokenizer->added[k];
        if (token->length <= length - i && (!best || token->length > best->length) &&
            !memcmp(text + i, tokenizer->blob + token->offset, token->length))
            best = token;
    }
    return best;
}

/** Code point at `text[i]` and its byte length (valid UTF-8). */
static uint32_t code_point_at(char const *text, size_t i, size_t *bytes) {
    uint32_t c;
    unsigned char b = (unsigned char)text[i];
    *bytes = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    uform_utf8_decode(text + i, *bytes, &c);
    return c;
}

/** The code point ending just before `text[i]`, and its length. */
static uint32_t code_point_before(char const *text, size_t i, size_t *bytes) {
    size_t j = i - 1;
    while (j > 0 && ((unsigned char)text[j] & 0xC0) == 0x80) j--;
    return code_point_at(text, j, bytes);
}

/* Each thread keeps its scratch between calls (released when the thread exits), so the steady state
 * allocates nothing; buffers a very long text grew are released after its call. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_key_made = false;

static void scratch_destroy(void *scratch) {
    uform_scratch_free(scratch);
    free(scratch);
}

static void scratch_key_create(void) { scratch_key_made = pthread_key_create(&scratch_key, scratch_destroy) == 0; }

/** This thread's scratch, or a fresh one when there is no key (`*owned` then says to free it). */
static uform_scratch_t *scratch_acquire(bool *owned) {
    pthread_once(&scratch_once, scratch_key_create);
    uform_scratch_t *scratch = scratch_key_made ? pthread_getspecific(scratch_key) : NULL;
    *owned = false;
    if (scratch) return scratch;
    scratch = calloc(1, sizeof(uform_scratch_t));
    if (!scratch) return NULL;
    if (!scratch_key_made || pthread_setspecific(scratch_key, scratch) != 0) *owned = true;
    return scratch;
}

static void scratch_release(uform_scratch_t *scratch, bool owned) {
    enum { keep = 1 << 20 }; // elements kept between calls, per buffer
    if (owned || scratch->a_cap > keep || scratch->b_cap > keep || scratch->bytes_cap > 4 * keep ||
        scratch->lattice_cap > keep || scratch->ids.capacity > keep) {
        uform_scratch_free(scratch);
        memset(scratch, 0, sizeof *scratch);
        if (owned) free(scratch);
    }
}

uform_status_t uform_tokenizer_encode(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                      size_t max_tokens, int32_t *ids, size_t capacity, size_t *count) {
    if (!tokenizer || !count || (!text && length) || (!ids && capacity))
        return uform_fail(uform_status_invalid_argument_k, "uform_tokenizer_encode: %s is NULL",
                          !tokenizer ? "tokenizer" : !count ? "count" : !ids && capacity ? "ids" : "text");
    *count = 0;
    if (!text) text = "";
    size_t invalid = uform_utf8_invalid_offset(text, length);
    if (invalid != length)
        return uform_fail(uform_status_invalid_argument_k, "text: invalid UTF-8 at byte %zu (0x%02X)", invalid,
                          (unsigned)(unsigned char)text[invalid]);
    size_t specials = tokenizer->prefix_count + tokenizer->suffix_count;
    if (max_tokens && max_tokens < specials)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_tokenizer_encode: max_tokens %zu leaves no room for the %zu special tokens", max_tokens,
                          specials);
    bool owned;
    uform_scratch_t *scratch = scratch_acquire(&owned);
    if (!scratch) return OOM();
    uform_scratch_t s = *scratch; // a local copy for the compiler; written back below
    s.ids.count = 0;
    s.limit = max_tokens ? max_tokens - specials : SIZE_MAX;
    uform_status_t status = uform_status_ok_k;
    if (!length) status = encode_stretch(tokenizer, text, 0, true, &s);
    size_t done = 0; // bytes consumed into stretches and added tokens
    for (size_t i = 0; i < length && status == uform_status_ok_k && s.ids.count < s.limit;) {
        added_t const *token = tokenizer->added_first_byte[(unsigned char)text[i]] ? match_added(tokenizer, text, length, i)
                                                                                    : NULL;
        if (!token) {
            i++;
            if (i == length) status = encode_stretch(tokenizer, text + done, length - done, done == 0, &s);
            continue;
        }
        size_t start = i, stop = i + token->length, bytes;
        if (token->lstrip)
            while (start > done && uform_is_whitespace(code_point_before(text, start, &bytes))) start -= bytes;
        if (token->rstrip)
            while (stop < length && uform_is_whitespace(code_point_at(text, stop, &bytes))) stop += bytes;
        if (start > done) status = encode_stretch(tokenizer, text + done, start - done, done == 0, &s);
        if (status == uform_status_ok_k && s.ids.count < s.limit && !uform_ids_push(&s.ids, token->id)) status = OOM();
        done = i = stop;
    }
    if (status == uform_status_ok_k) {
        size_t content = s.ids.count < s.limit ? s.ids.count : s.limit;
        size_t total = specials + content, w = 0;
        for (size_t k = 0; k < tokenizer->prefix_count; k++, w++)
            if (w < capacity) ids[w] = tokenizer->prefix[k];
        for (size_t k = 0; k < content; k++, w++)
            if (w < capacity) ids[w] = s.ids.data[k];
        for (size_t k = 0; k < tokenizer->suffix_count; k++, w++)
            if (w < capacity) ids[w] = tokenizer->suffix[k];
        *count = total;
    }
    *scratch = s;
    scratch_release(scratch, owned);
    return status;
}
