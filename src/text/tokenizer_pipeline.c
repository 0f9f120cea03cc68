/**
 *  @file   tokenizer_pipeline.c
 *  @brief  The pipeline sections of `tokenizer.json`: the normaliser's steps, the pre-tokeniser, the
 *          post-processor's specials and the added tokens.
 */
#include "text/tokenizer_private.h"

#include <stdlib.h>
#include <string.h>

uform_status_t tokenizer_add_step(uform_tokenizer_t *tokenizer, loader_t const *loader, step_t step) {
    step_t *steps = realloc(tokenizer->steps, (tokenizer->steps_count + 1) * sizeof(step_t));
    if (!steps) {
        free(step.pattern), free(step.content);
        return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    }
    tokenizer->steps = steps;
    tokenizer->steps[tokenizer->steps_count++] = step;
    return uform_status_ok_k;
}

void tokenizer_clear_steps(uform_tokenizer_t *tokenizer) {
    for (size_t i = 0; i < tokenizer->steps_count; i++) free(tokenizer->steps[i].pattern), free(tokenizer->steps[i].content);
    tokenizer->steps_count = 0;
}

uform_status_t tokenizer_bert_pipeline(uform_tokenizer_t *tokenizer, loader_t const *loader, uform_tokenizer_bert_t const *bert) {
    tokenizer_clear_steps(tokenizer);
    step_t const step = {.kind = step_bert_k, .clean_text = true, .chinese = bert->chinese != 0,
                         .lowercase = bert->lowercase != 0,
                         .strip_accents = bert->strip_accents < 0 ? bert->lowercase != 0 : bert->strip_accents != 0};
    uform_status_t const status = tokenizer_add_step(tokenizer, loader, step);
    if (status != uform_status_ok_k) return status;
    tokenizer->pre = pre_bert_k;
    uform_strmap_t const *words = &tokenizer->wordpiece.words;
    int32_t const cls = uform_strmap_get(words, "[CLS]", 5), sep = uform_strmap_get(words, "[SEP]", 5);
    if (cls < 0 || sep < 0) return tokenizer_corrupt(loader, "no [CLS] or [SEP] token:", "[CLS]/[SEP]");
    tokenizer->prefix[0] = cls, tokenizer->suffix[0] = sep;
    tokenizer->prefix_count = tokenizer->suffix_count = 1;
    return uform_status_ok_k;
}

uform_status_t tokenizer_lowercase_first(uform_tokenizer_t *tokenizer, loader_t const *loader) {
    for (size_t i = 0; i < tokenizer->steps_count; i++)
        if (tokenizer->steps[i].kind == step_lowercase_k) return uform_status_ok_k;
    uform_status_t const status = tokenizer_add_step(tokenizer, loader, (step_t){.kind = step_lowercase_k});
    if (status != uform_status_ok_k) return status;
    memmove(tokenizer->steps + 1, tokenizer->steps, (tokenizer->steps_count - 1) * sizeof(step_t));
    tokenizer->steps[0] = (step_t){.kind = step_lowercase_k};
    return uform_status_ok_k;
}

uform_status_t tokenizer_load_normalizer(uform_tokenizer_t *tokenizer, loader_t const *loader, cJSON const *json,
                                         unsigned depth) {
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsObject(json)) return tokenizer_corrupt(loader, "not an object:", "normalizer");
    if (depth > 16) return tokenizer_corrupt(loader, "nested too deep:", "normalizer");
    char const *type = NULL;
    uform_status_t status = tokenizer_json_type(loader, json, "normalizer", &type);
    if (status != uform_status_ok_k) return status;
    step_t step = {0};
    if (!strcmp(type, "Sequence")) {
        cJSON const *list = cJSON_GetObjectItemCaseSensitive(json, "normalizers");
        if (!cJSON_IsArray(list)) return tokenizer_corrupt(loader, "no array", "normalizer.normalizers");
        cJSON const *item;
        cJSON_ArrayForEach(item, list) {
            status = tokenizer_load_normalizer(tokenizer, loader, item, depth + 1);
            if (status != uform_status_ok_k) return status;
        }
        return uform_status_ok_k;
    } else if (!strcmp(type, "BertNormalizer")) {
        step.kind = step_bert_k;
        step.clean_text = tokenizer_json_flag(json, "clean_text", true);
        step.chinese = tokenizer_json_flag(json, "handle_chinese_chars", true);
        step.lowercase = tokenizer_json_flag(json, "lowercase", true);
        step.strip_accents = tokenizer_json_flag(json, "strip_accents", step.lowercase); // null follows lowercase
    } else if (!strcmp(type, "NFD")) step.kind = step_nfd_k;
    else if (!strcmp(type, "NFKD")) step.kind = step_nfkd_k;
    else if (!strcmp(type, "NFC")) step.kind = step_nfc_k;
    else if (!strcmp(type, "NFKC")) step.kind = step_nfkc_k;
    else if (!strcmp(type, "Lowercase")) step.kind = step_lowercase_k;
    else if (!strcmp(type, "StripAccents")) step.kind = step_strip_accents_k;
    else if (!strcmp(type, "Strip")) {
        step.kind = step_strip_k;
        step.left = tokenizer_json_flag(json, "strip_left", true);
        step.right = tokenizer_json_flag(json, "strip_right", true);
    } else if (!strcmp(type, "Replace")) {
        step.kind = step_replace_k;
        cJSON const *pattern = cJSON_GetObjectItemCaseSensitive(json, "pattern");
        cJSON const *content = cJSON_GetObjectItemCaseSensitive(json, "content");
        cJSON const *literal = cJSON_GetObjectItemCaseSensitive(pattern, "String");
        if (cJSON_GetObjectItemCaseSensitive(pattern, "Regex"))
            return uform_fail(uform_status_unsupported_k, "%s: the Replace normalizer with a Regex pattern is not supported",
                              loader->file);
        if (!cJSON_IsString(literal)) return tokenizer_corrupt(loader, "no string", "normalizer.pattern.String");
        if (!cJSON_IsString(content)) return tokenizer_corrupt(loader, "no string", "normalizer.content");
        status = tokenizer_to_code_points(loader, literal->valuestring, "normalizer.pattern", &step.pattern, &step.pattern_length);
        if (status == uform_status_ok_k)
            status = tokenizer_to_code_points(loader, content->valuestring, "normalizer.content", &step.content, &step.content_length);
        if (status == uform_status_ok_k && !step.pattern_length) {
            free(step.pattern), free(step.content);
            return tokenizer_corrupt(loader, "an empty pattern in", "normalizer.pattern.String");
        }
        if (status != uform_status_ok_k) {
            free(step.pattern), free(step.content);
            return status;
        }
    } else if (!strcmp(type, "Prepend")) {
        step.kind = step_prepend_k;
        cJSON const *content = cJSON_GetObjectItemCaseSensitive(json, "prepend");
        if (!cJSON_IsString(content)) return tokenizer_corrupt(loader, "no string", "normalizer.prepend");
        status = tokenizer_to_code_points(loader, content->valuestring, "normalizer.prepend", &step.content, &step.content_length);
        if (status != uform_status_ok_k) return status;
    } else
        return uform_fail(uform_status_unsupported_k, "%s: the %s normalizer is not supported", loader->file, type);
    return tokenizer_add_step(tokenizer, loader, step);
}

uform_status_t tokenizer_load_pre_tokenizer(uform_tokenizer_t *tokenizer, loader_t const *loader, cJSON const *json) {
    tokenizer->pre = pre_none_k;
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsObject(json)) return tokenizer_corrupt(loader, "not an object:", "pre_tokenizer");
    char const *type = NULL;
    uform_status_t status = tokenizer_json_type(loader, json, "pre_tokenizer", &type);
    if (status != uform_status_ok_k) return status;
    if (!strcmp(type, "Sequence")) { // a sequence of one is that one
        cJSON const *list = cJSON_GetObjectItemCaseSensitive(json, "pretokenizers");
        if (!cJSON_IsArray(list)) return tokenizer_corrupt(loader, "no array", "pre_tokenizer.pretokenizers");
        if (cJSON_GetArraySize(list) == 0) return uform_status_ok_k;
        if (cJSON_GetArraySize(list) != 1)
            return uform_fail(uform_status_unsupported_k, "%s: a Sequence of several pre-tokenizers is not supported",
                              loader->file);
        return tokenizer_load_pre_tokenizer(tokenizer, loader, cJSON_GetArrayItem(list, 0));
    }
    if (!strcmp(type, "BertPreTokenizer")) tokenizer->pre = pre_bert_k;
    else if (!strcmp(type, "WhitespaceSplit")) tokenizer->pre = pre_whitespace_split_k;
    else if (!strcmp(type, "Metaspace")) {
        tokenizer->pre = pre_metaspace_k;
        cJSON const *replacement = cJSON_GetObjectItemCaseSensitive(json, "replacement");
        if (!cJSON_IsString(replacement)) return tokenizer_corrupt(loader, "no string", "pre_tokenizer.replacement");
        uint32_t *points = NULL;
        size_t count = 0;
        status = tokenizer_to_code_points(loader, replacement->valuestring, "pre_tokenizer.replacement", &points, &count);
        if (status != uform_status_ok_k) return status;
        if (count != 1) {
            free(points);
            return tokenizer_corrupt(loader, "not one character:", "pre_tokenizer.replacement");
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
            else return tokenizer_corrupt(loader, "an unknown value of", "pre_tokenizer.prepend_scheme");
        }
        cJSON const *prefix = cJSON_GetObjectItemCaseSensitive(json, "add_prefix_space");
        if (cJSON_IsFalse(prefix)) {
            if (cJSON_IsString(scheme) && tokenizer->prepend != prepend_never_k)
                return tokenizer_corrupt(loader, "add_prefix_space false contradicts", "pre_tokenizer.prepend_scheme");
            tokenizer->prepend = prepend_never_k;
        }
        tokenizer->split = tokenizer_json_flag(json, "split", true);
    } else
        return uform_fail(uform_status_unsupported_k, "%s: the %s pre-tokenizer is not supported", loader->file, type);
    return uform_status_ok_k;
}

/** The ids of `[name, id]` pairs (BertProcessing, RobertaProcessing). */
static uform_status_t pair_id(loader_t *loader, cJSON const *json, char const *key, int32_t *id) {
    cJSON const *pair = cJSON_GetObjectItemCaseSensitive(json, key);
    cJSON const *value = cJSON_GetArrayItem(pair, 1);
    if (!cJSON_IsArray(pair) || !cJSON_IsNumber(value) || value->valuedouble < 0 || value->valuedouble > INT32_MAX)
        return tokenizer_corrupt(loader, "no [token, id] pair", key);
    *id = (int32_t)value->valuedouble;
    if (*id > loader->max_id) loader->max_id = *id;
    return uform_status_ok_k;
}

uform_status_t tokenizer_load_post_processor(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json) {
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsObject(json)) return tokenizer_corrupt(loader, "not an object:", "post_processor");
    char const *type = NULL;
    uform_status_t status = tokenizer_json_type(loader, json, "post_processor", &type);
    if (status != uform_status_ok_k) return status;
    if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        tokenizer->prefix_count = tokenizer->suffix_count = 1;
        status = pair_id(loader, json, "cls", &tokenizer->prefix[0]);
        if (status == uform_status_ok_k) status = pair_id(loader, json, "sep", &tokenizer->suffix[0]);
        return status;
    }
    if (!strcmp(type, "Sequence")) { // of one processor that adds specials, as tokenizers saves ByteLevel+Template
        cJSON const *list = cJSON_GetObjectItemCaseSensitive(json, "processors");
        if (!cJSON_IsArray(list)) return tokenizer_corrupt(loader, "no array", "post_processor.processors");
        cJSON const *item;
        cJSON_ArrayForEach(item, list) {
            cJSON const *inner = cJSON_GetObjectItemCaseSensitive(item, "type");
            if (cJSON_IsString(inner) && !strcmp(inner->valuestring, "ByteLevel")) continue;
            status = tokenizer_load_post_processor(tokenizer, loader, item);
            if (status != uform_status_ok_k) return status;
        }
        return uform_status_ok_k;
    }
    if (strcmp(type, "TemplateProcessing"))
        return uform_fail(uform_status_unsupported_k, "%s: the %s post-processor is not supported", loader->file, type);
    cJSON const *single = cJSON_GetObjectItemCaseSensitive(json, "single");
    cJSON const *specials = cJSON_GetObjectItemCaseSensitive(json, "special_tokens");
    if (!cJSON_IsArray(single)) return tokenizer_corrupt(loader, "no array", "post_processor.single");
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
        if (!cJSON_IsString(name)) return tokenizer_corrupt(loader, "no special token id in", "post_processor.single");
        cJSON const *entry = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
        cJSON const *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids");
        if (!cJSON_IsArray(ids)) return tokenizer_corrupt(loader, "no ids for the special token", name->valuestring);
        cJSON const *id;
        cJSON_ArrayForEach(id, ids) {
            if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX)
                return tokenizer_corrupt(loader, "a bad id for the special token", name->valuestring);
            size_t *count = seen_sequence ? &tokenizer->suffix_count : &tokenizer->prefix_count;
            int32_t *list = seen_sequence ? tokenizer->suffix : tokenizer->prefix;
            if (*count == 8)
                return uform_fail(uform_status_unsupported_k, "%s: more than 8 special ids on one side of the template",
                                  loader->file);
            list[(*count)++] = (int32_t)id->valuedouble;
            if ((int32_t)id->valuedouble > loader->max_id) loader->max_id = (int32_t)id->valuedouble;
        }
    }
    if (!seen_sequence) return tokenizer_corrupt(loader, "no $A sequence in", "post_processor.single");
    return uform_status_ok_k;
}

uform_status_t tokenizer_add_added_token(uform_tokenizer_t *tokenizer, loader_t *loader, char const *content,
                                         size_t length, int32_t id, bool lstrip, bool rstrip) {
    if (!length) return uform_status_ok_k;
    if (length > TOKENIZER_ADDED_MAX_BYTES)
        return uform_fail(uform_status_unsupported_k, "%s: the added token \"%.32s...\" has %zu bytes, more than the %d "
                          "this engine matches", loader->file, content, length, TOKENIZER_ADDED_MAX_BYTES);
    added_t *added = realloc(tokenizer->added, (tokenizer->added_count + 1) * sizeof(added_t));
    if (!added) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    tokenizer->added = added;
    added_t *token = &added[tokenizer->added_count];
    uform_status_t status = tokenizer_blob_add(loader, content, length, &token->offset);
    if (status != uform_status_ok_k) return status;
    token->length = (uint32_t)length, token->id = id, token->lstrip = lstrip, token->rstrip = rstrip;
    tokenizer->added_first_byte[(unsigned char)content[0]] = true;
    tokenizer->added_count++;
    if (id > loader->max_id) loader->max_id = id;
    return uform_status_ok_k;
}

uform_status_t tokenizer_load_added_tokens(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json) {
    if (!json || cJSON_IsNull(json)) return uform_status_ok_k;
    if (!cJSON_IsArray(json)) return tokenizer_corrupt(loader, "not an array:", "added_tokens");
    cJSON const *item;
    cJSON_ArrayForEach(item, json) {
        cJSON const *content = cJSON_GetObjectItemCaseSensitive(item, "content");
        cJSON const *id = cJSON_GetObjectItemCaseSensitive(item, "id");
        if (!cJSON_IsString(content)) return tokenizer_corrupt(loader, "no string", "added_tokens[].content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX)
            return tokenizer_corrupt(loader, "no id for the added token", content->valuestring);
        size_t length = strlen(content->valuestring);
        if (uform_utf8_invalid_offset(content->valuestring, length) != length)
            return tokenizer_corrupt(loader, "invalid UTF-8 in", "added_tokens[].content");
        if (tokenizer_json_flag(item, "normalized", !tokenizer_json_flag(item, "special", false)))
            return uform_fail(uform_status_unsupported_k,
                              "%s: the added token \"%s\" is matched after normalisation, which is not supported",
                              loader->file, content->valuestring);
        if (tokenizer_json_flag(item, "single_word", false))
            return uform_fail(uform_status_unsupported_k, "%s: the single-word added token \"%s\" is not supported",
                              loader->file, content->valuestring);
        uform_status_t status =
            tokenizer_add_added_token(tokenizer, loader, content->valuestring, length, (int32_t)id->valuedouble,
                            tokenizer_json_flag(item, "lstrip", false), tokenizer_json_flag(item, "rstrip", false));
        if (status != uform_status_ok_k) return status;
    }
    return uform_status_ok_k;
}
