/**
 *  @file   config.c
 *  @brief  Text-tower configurations of both layouts, and binding their tensors out of safetensors.
 */
#include "models/config.h"
#include "models/convert.h"
#include "internal.h"
#include "json_scan.h"

#include <cjson/cJSON.h>

#include <float.h>    // `FLT_MIN`
#include <math.h>     // `isfinite`, `floor`
#include <stddef.h>   // `offsetof`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `malloc`, `free`
#include <string.h>   // `strcmp`, `memset`

/* ---- JSON helpers ---- */

/** The first key that appears twice in one object anywhere under `item` (NULL when none); `parent`
 *  gets the key of the object holding it ("" for the document). Keys are sorted, so an object of n
 *  keys costs n log n, whatever a hostile file holds. */
static int json_key_order(void const *a, void const *b) {
    return strcmp(*(char const *const *)a, *(char const *const *)b);
}
static char const *json_duplicate_key(cJSON const *item, char const **parent, int *out_of_memory) {
    if (!cJSON_IsObject(item) && !cJSON_IsArray(item)) return NULL;
    size_t count = 0;
    cJSON const *child = NULL;
    cJSON_ArrayForEach(child, item) ++count;
    if (cJSON_IsObject(item) && count > 1) {
        char const **keys = (char const **)malloc(count * sizeof(char const *));
        if (!keys) return *out_of_memory = 1, NULL;
        size_t at = 0;
        cJSON_ArrayForEach(child, item) keys[at++] = child->string ? child->string : "";
        qsort(keys, count, sizeof(char const *), json_key_order);
        char const *twice = NULL;
        for (size_t i = 1; i < count && !twice; ++i)
            if (!strcmp(keys[i - 1], keys[i])) twice = keys[i];
        free(keys);
        if (twice) return *parent = item->string ? item->string : "", twice;
    }
    cJSON_ArrayForEach(child, item) {
        char const *twice = json_duplicate_key(child, parent, out_of_memory);
        if (twice || *out_of_memory) return twice;
    }
    return NULL;
}

uform_status_t uform_json_parse(char const *label, char const *text, size_t length, void **root) {
    *root = NULL;
    /* One scan serves the value count here and the NUL escape below: bytes after the value are
     * whitespace (checked before that is read), so it finds the same escape as a scan of the value. */
    uform_json_scan_t const scanned = uform_json_scan(text, length, 0);
    if (scanned.values > UFORM_JSON_MAX_VALUES)
        return uform_fail(uform_status_corrupt_file_k, "%s: up to %zu JSON values, more than the %zu a model's "
                          "configuration may hold", label, scanned.values, UFORM_JSON_MAX_VALUES);
    char const *end = NULL;
    cJSON *parsed = cJSON_ParseWithLengthOpts(text, length, &end, 0);
    if (!parsed) {
        size_t const at = end && end >= text ? (size_t)(end - text) : 0;
        /* cJSON stops at CJSON_NESTING_LIMIT levels: say so rather than "malformed". */
        if (uform_json_scan(text, length, at < length ? at + 1 : length).max_depth >= CJSON_NESTING_LIMIT)
            return uform_fail(uform_status_corrupt_file_k, "%s: JSON nested deeper than %d levels, at byte %zu", label,
                              CJSON_NESTING_LIMIT, at);
        return uform_fail(uform_status_corrupt_file_k, "%s: malformed JSON near byte %zu", label, at);
    }
    size_t const consumed = end && end >= text ? (size_t)(end - text) : length;
    for (size_t i = consumed; i < length; ++i)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r' && text[i] != '\0') {
            cJSON_Delete(parsed);
            return uform_fail(uform_status_corrupt_file_k, "%s: malformed JSON: bytes after the value, at byte %zu", label, i);
        }
    /* What cJSON reads differently from Python's json (which transformers uses): a NUL inside a
     * string, which would end cJSON's copy early, and a key given twice, where Python keeps the last
     * and cJSON finds the first. Both are refused rather than read another way. */
    size_t const nul = scanned.nul_escape;
    if (nul < consumed) {
        cJSON_Delete(parsed);
        return uform_fail(uform_status_corrupt_file_k, "%s: a string holds U+0000 (the escape at byte %zu)", label, nul);
    }
    char const *parent = NULL;
    int out_of_memory = 0;
    char const *twice = json_duplicate_key(parsed, &parent, &out_of_memory);
    if (twice || out_of_memory) {
        uform_status_t const status =
            out_of_memory ? uform_fail(uform_status_out_of_memory_k, "%s: out of memory checking the JSON's keys", label)
            : *parent     ? uform_fail(uform_status_corrupt_file_k, "%s: key '%s' appears twice in the object '%s'", label,
                                       twice, parent)
                          : uform_fail(uform_status_corrupt_file_k, "%s: key '%s' appears twice in the top-level object",
                                       label, twice);
        cJSON_Delete(parsed);
        return status;
    }
    *root = parsed;
    return uform_status_ok_k;
}

void uform_json_free(void *root) { cJSON_Delete((cJSON *)root); }

int uform_json_is_empty_object(void const *root) {
    return cJSON_IsObject((cJSON const *)root) && !((cJSON const *)root)->child;
}

uform_status_t uform_read_small_file(char const *path, char **text, size_t *length, int *missing) {
    return uform_read_regular_file(path, UFORM_CONFIG_MAX_BYTES, uform_status_corrupt_file_k, text, length, missing);
}

/** A key's value: `present` false when absent or JSON null. */
static cJSON const *uform_json_get(cJSON const *object, char const *key) {
    cJSON const *item = cJSON_GetObjectItemCaseSensitive(object, key);
    return item && !cJSON_IsNull(item) ? item : NULL;
}

/** Reads an integer in [low, high]; absent: the default when `required` is 0, else CORRUPT_FILE. */
static uform_status_t uform_json_integer(char const *label, char const *section, cJSON const *object, char const *key,
                                         int required, long long fallback, long long low, long long high, long long *value) {
    cJSON const *item = uform_json_get(object, key);
    if (!item) {
        if (required)
            return uform_fail(uform_status_corrupt_file_k, "%s: missing key '%s%s'", label, section, key);
        *value = fallback;
        return uform_status_ok_k;
    }
    double const number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
    if (!isfinite(number) || floor(number) != number || number < (double)low || number > (double)high)
        return uform_fail(uform_status_corrupt_file_k, "%s: '%s%s' must be an integer in [%lld, %lld]", label, section,
                          key, low, high);
    *value = (long long)number;
    return uform_status_ok_k;
}

static uform_status_t uform_json_extent(char const *label, char const *section, cJSON const *object, char const *key,
                                        int required, size_t fallback, size_t *value) {
    long long number = 0;
    uform_status_t const status = uform_json_integer(label, section, object, key, required, (long long)fallback, 1,
                                                     (long long)UFORM_TEXT_MAX_EXTENT, &number);
    if (status == uform_status_ok_k) *value = (size_t)number;
    return status;
}

static uform_status_t uform_json_bool(char const *label, char const *section, cJSON const *object, char const *key,
                                      int fallback, int *value) {
    cJSON const *item = uform_json_get(object, key);
    if (!item) {
        *value = fallback;
        return uform_status_ok_k;
    }
    if (!cJSON_IsBool(item))
        return uform_fail(uform_status_corrupt_file_k, "%s: '%s%s' must be true or false", label, section, key);
    *value = cJSON_IsTrue(item);
    return uform_status_ok_k;
}

/** Reads a string; absent: `fallback` (NULL with `required` is CORRUPT_FILE). */
static uform_status_t uform_json_string(char const *label, char const *section, cJSON const *object, char const *key,
                                        char const *fallback, char const **value) {
    cJSON const *item = uform_json_get(object, key);
    if (!item) {
        if (!fallback) return uform_fail(uform_status_corrupt_file_k, "%s: missing key '%s%s'", label, section, key);
        *value = fallback;
        return uform_status_ok_k;
    }
    if (!cJSON_IsString(item) || !item->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: '%s%s' must be a string", label, section, key);
    *value = item->valuestring;
    return uform_status_ok_k;
}

#define UFORM_TRY(expression)                                                                                          \
    do {                                                                                                               \
        uform_status_t const try_status_ = (expression);                                                               \
        if (try_status_ != uform_status_ok_k) return try_status_;                                                      \
    } while (0)

/* ---- Layouts ---- */

uform_status_t uform_config_layout(char const *label, void const *root_, uform_text_layout_t *layout) {
    cJSON const *root = (cJSON const *)root_;
    if (!cJSON_IsObject(root)) return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON object", label);
    if (uform_json_get(root, "text_encoder") || uform_json_get(root, "image_encoder")) {
        *layout = uform_text_layout_uform3_k;
        return uform_status_ok_k;
    }
    cJSON const *type = uform_json_get(root, "model_type");
    if (!type)
        return uform_fail(uform_status_corrupt_file_k,
                          "%s: neither a 'text_encoder' section (UForm3) nor a 'model_type' (Hugging Face)", label);
    if (!cJSON_IsString(type) || !type->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'model_type' must be a string", label);
    if (strcmp(type->valuestring, "bert") != 0)
        return uform_fail(uform_status_unsupported_k, "%s: model_type '%.64s' is not supported (only 'bert')", label,
                          type->valuestring);
    *layout = uform_text_layout_bert_k;
    return uform_status_ok_k;
}

uform_status_t uform_config_matryoshka_widths(char const *label, char const *section, void const *list_, size_t width_max,
                                             size_t matryoshka[8]) {
    cJSON const *list = (cJSON const *)list_;
    if (!list || cJSON_IsNull(list)) return uform_status_ok_k;
    if (!cJSON_IsArray(list))
        return uform_fail(uform_status_corrupt_file_k, "%s: '%smatryoshka_dims' must be an array of integers", label, section);
    size_t kept = 0;
    cJSON const *item = NULL;
    cJSON_ArrayForEach(item, list) {
        double const number = cJSON_IsNumber(item) ? item->valuedouble : NAN;
        if (!isfinite(number) || floor(number) != number || number < 1 || number > (double)width_max)
            return uform_fail(uform_status_corrupt_file_k,
                              "%s: '%smatryoshka_dims' must hold integers in [1, %zu], the embedding width", label,
                              section, width_max);
        size_t const width = (size_t)number;
        if (width == width_max) continue;
        /* Insert sorted, unique, keeping the narrowest eight. */
        size_t at = 0;
        while (at < kept && matryoshka[at] < width) ++at;
        if (at < kept && matryoshka[at] == width) continue;
        if (at >= 8) continue;
        size_t const last = kept < 8 ? kept : 7;
        for (size_t i = last; i > at; --i) matryoshka[i] = matryoshka[i - 1];
        matryoshka[at] = width;
        if (kept < 8) ++kept;
    }
    return uform_status_ok_k;
}

/** Reads `matryoshka_dims` (absent is fine): ascending widths narrower than the embedding's. */
static uform_status_t uform_config_matryoshka(char const *label, char const *section, cJSON const *object,
                                              uform_text_config_t *config) {
    return uform_config_matryoshka_widths(label, section, cJSON_GetObjectItemCaseSensitive(object, "matryoshka_dims"),
                                          config->embedding_dimensions, config->matryoshka);
}

uform_status_t uform_config_uform3(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    memset(config, 0, sizeof(*config));
    config->layout = uform_text_layout_uform3_k;
    cJSON const *text = cJSON_GetObjectItemCaseSensitive(root, "text_encoder");
    if (!text) /* a UForm3 config with an image tower alone (`uform_config_layout` saw one of the two) */
        return uform_fail(uform_status_unsupported_k,
                          "%s: missing key 'text_encoder': the model has no text tower (an image-only model?)", label);
    if (!cJSON_IsObject(text)) return uform_fail(uform_status_corrupt_file_k, "%s: 'text_encoder' must be an object", label);
    char const *section = "text_encoder.";

    char const *model_type = NULL, *pooling = NULL;
    UFORM_TRY(uform_json_string(label, section, text, "model_type", NULL, &model_type));
    if (strcmp(model_type, "bert") == 0) config->position_ids = uform_position_ids_absolute_k;
    else if (strcmp(model_type, "roberta") == 0) config->position_ids = uform_position_ids_roberta_k;
    else
        return uform_fail(uform_status_unsupported_k, "%s: '%smodel_type' is '%.64s'; only 'bert' and 'roberta' are supported",
                          label, section, model_type);
    UFORM_TRY(uform_json_extent(label, section, text, "dim", 1, 0, &config->hidden));
    UFORM_TRY(uform_json_extent(label, section, text, "vocab_size", 1, 0, &config->vocab_size));
    UFORM_TRY(uform_json_extent(label, section, text, "num_heads", 1, 0, &config->heads));
    UFORM_TRY(uform_json_extent(label, section, text, "embedding_dim", 1, 0, &config->embedding_dimensions));
    UFORM_TRY(uform_json_extent(label, section, text, "max_position_embeddings", 0, 77, &config->max_positions));
    long long number;
    UFORM_TRY(uform_json_integer(label, section, text, "num_layers", 1, 0, 0, UFORM_TEXT_MAX_LAYERS, &number));
    config->layers_total = (size_t)number;
    UFORM_TRY(uform_json_integer(label, section, text, "padding_idx", 1, 0, 0, (long long)config->vocab_size - 1, &number));
    config->pad_id = (int32_t)number;
    /* Fields the text embedding does not use, type-checked when present. */
    size_t unused;
    int unused_flag;
    UFORM_TRY(uform_json_extent(label, section, text, "context_dim", 0, 1, &unused));
    UFORM_TRY(uform_json_bool(label, section, text, "head_one_neuron", 0, &unused_flag));
    UFORM_TRY(uform_json_string(label, section, text, "pooling", "cls", &pooling));
    if (strcmp(pooling, "cls") == 0) config->pooling = uform_pooling_cls_k;
    else if (strcmp(pooling, "mean") == 0) config->pooling = uform_pooling_mean_k;
    else
        return uform_fail(uform_status_unsupported_k, "%s: '%spooling' is '%.64s'; only 'cls' and 'mean' are supported",
                          label, section, pooling);
    if (config->hidden % config->heads)
        return uform_fail(uform_status_corrupt_file_k, "%s: '%sdim' %zu is not a multiple of '%snum_heads' %zu", label,
                          section, config->hidden, section, config->heads);

    cJSON const *multimodal = cJSON_GetObjectItemCaseSensitive(text, "multimodal_layers_ids");
    if (!multimodal) return uform_fail(uform_status_corrupt_file_k, "%s: missing key '%smultimodal_layers_ids'", label, section);
    if (!cJSON_IsArray(multimodal))
        return uform_fail(uform_status_corrupt_file_k, "%s: '%smultimodal_layers_ids' must be an array of layer numbers",
                          label, section);
    cJSON const *item = NULL;
    cJSON_ArrayForEach(item, multimodal) {
        double const id = cJSON_IsNumber(item) ? item->valuedouble : NAN;
        if (!isfinite(id) || floor(id) != id || id < 0 || id >= (double)config->layers_total)
            return uform_fail(uform_status_corrupt_file_k,
                              "%s: '%smultimodal_layers_ids' must hold layer numbers below num_layers (%zu)", label,
                              section, config->layers_total);
        config->skipped[(size_t)id] = 1;
    }
    for (size_t layer = 0; layer < config->layers_total; ++layer) config->layers_count += !config->skipped[layer];

    config->intermediate = 4 * config->hidden; /* the package's MLP expands by 4 */
    config->layer_norm_epsilon = 1e-12;        /* fixed in the package's TextEncoder */
    /* The package's processor truncates to max_position_embeddings; RoBERTa positions start after
       the padding index, so fewer tokens fit there without running off the position table. */
    config->context = config->max_positions;
    if (config->position_ids == uform_position_ids_roberta_k)
        config->context = config->max_positions > (size_t)config->pad_id + 1 ? config->max_positions - (size_t)config->pad_id - 1 : 0;
    if (config->context < 2)
        return uform_fail(uform_status_corrupt_file_k,
                          "%s: '%smax_position_embeddings' %zu leaves room for %zu tokens, fewer than the 2 specials", label,
                          section, config->max_positions, config->context);
    UFORM_TRY(uform_config_matryoshka(label, section, text, config));
    if (!config->matryoshka[0]) UFORM_TRY(uform_config_matryoshka(label, "", root, config));
    return uform_status_ok_k;
}

uform_status_t uform_config_bert(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    memset(config, 0, sizeof(*config));
    config->layout = uform_text_layout_bert_k;
    char const *section = "";
    uform_text_layout_t layout;
    UFORM_TRY(uform_config_layout(label, root, &layout));
    if (layout != uform_text_layout_bert_k)
        return uform_fail(uform_status_corrupt_file_k, "%s: a UForm3 config, not a BERT one", label);
    UFORM_TRY(uform_json_extent(label, section, root, "hidden_size", 1, 0, &config->hidden));
    UFORM_TRY(uform_json_extent(label, section, root, "num_attention_heads", 1, 0, &config->heads));
    UFORM_TRY(uform_json_extent(label, section, root, "intermediate_size", 1, 0, &config->intermediate));
    UFORM_TRY(uform_json_extent(label, section, root, "vocab_size", 1, 0, &config->vocab_size));
    UFORM_TRY(uform_json_extent(label, section, root, "max_position_embeddings", 0, 512, &config->max_positions));
    UFORM_TRY(uform_json_extent(label, section, root, "type_vocab_size", 0, 2, &config->type_vocab_size));
    long long number;
    UFORM_TRY(uform_json_integer(label, section, root, "num_hidden_layers", 1, 0, 0, UFORM_TEXT_MAX_LAYERS, &number));
    config->layers_total = config->layers_count = (size_t)number;
    UFORM_TRY(uform_json_integer(label, section, root, "pad_token_id", 0, 0, 0, (long long)config->vocab_size - 1, &number));
    config->pad_id = (int32_t)number;
    if (config->hidden % config->heads)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'hidden_size' %zu is not a multiple of 'num_attention_heads' %zu",
                          label, config->hidden, config->heads);

    cJSON const *epsilon = uform_json_get(root, "layer_norm_eps");
    config->layer_norm_epsilon = 1e-12;
    if (epsilon) {
        /* No smaller than float32's smallest normal: the passes add it in float32, where 0 would divide by zero. */
        if (!cJSON_IsNumber(epsilon) || !isfinite(epsilon->valuedouble) || epsilon->valuedouble <= 0 ||
            epsilon->valuedouble >= 1 || (float)epsilon->valuedouble < FLT_MIN)
            return uform_fail(uform_status_corrupt_file_k,
                              "%s: 'layer_norm_eps' must be a number in (0, 1) that float32 holds as a normal number", label);
        config->layer_norm_epsilon = epsilon->valuedouble;
    }
    char const *activation, *positions;
    UFORM_TRY(uform_json_string(label, section, root, "hidden_act", "gelu", &activation));
    if (strcmp(activation, "gelu") != 0)
        return uform_fail(uform_status_unsupported_k,
                          "%s: 'hidden_act' is '%.64s'; only 'gelu' (exact, with erf) is supported", label, activation);
    UFORM_TRY(uform_json_string(label, section, root, "position_embedding_type", "absolute", &positions));
    if (strcmp(positions, "absolute") != 0)
        return uform_fail(uform_status_unsupported_k,
                          "%s: 'position_embedding_type' is '%.64s'; only 'absolute' is supported", label, positions);
    int decoder;
    UFORM_TRY(uform_json_bool(label, "", root, "is_decoder", 0, &decoder));
    if (decoder)
        return uform_fail(uform_status_unsupported_k, "%s: 'is_decoder' is true: causal (decoder) attention is not "
                          "supported", label);
    config->position_ids = uform_position_ids_absolute_k;
    config->pooling = uform_pooling_mean_k; /* sentence-transformers' default for a bare model */
    config->embedding_dimensions = config->hidden;
    config->context = config->max_positions;
    if (config->context < 2)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'max_position_embeddings' %zu leaves no room for the 2 specials",
                          label, config->max_positions);
    config->tokenizer = UFORM_TOKENIZER_BERT_DEFAULTS;
    return uform_status_ok_k;
}

/** A module folder: relative, without "..". */
static int uform_safe_relative_path(char const *path) {
    if (path[0] == '/') return 0;
    for (char const *part = path; *part;) {
        char const *slash = strchr(part, '/');
        size_t const length = slash ? (size_t)(slash - part) : strlen(part);
        if (length == 2 && part[0] == '.' && part[1] == '.') return 0;
        part += length + (slash ? 1 : 0);
    }
    return 1;
}

/** Which sentence-transformers module `type` names: the class paths sentence-transformers 6.3 resolves to
 *  Transformer (0), Pooling (1) or Normalize (2), as versions before 6 (`sentence_transformers.models.*`)
 *  and since (`sentence_transformers.base.modules...`) write them; -1 for another. */
static int uform_module_kind(char const *type) {
    static char const *const names[][6] = {
        {"sentence_transformers.models.Transformer", "sentence_transformers.models.Transformer.Transformer",
         "sentence_transformers.base.modules.transformer.Transformer", "sentence_transformers.base.modules.Transformer",
         "sentence_transformers.sentence_transformer.modules.Transformer", NULL},
        {"sentence_transformers.models.Pooling", "sentence_transformers.models.Pooling.Pooling",
         "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
         "sentence_transformers.sentence_transformer.modules.Pooling", NULL, NULL},
        {"sentence_transformers.models.Normalize", "sentence_transformers.models.Normalize.Normalize",
         "sentence_transformers.base.modules.normalize.Normalize", "sentence_transformers.base.modules.Normalize",
         "sentence_transformers.sentence_transformer.modules.normalize.Normalize",
         "sentence_transformers.sentence_transformer.modules.Normalize"}};
    for (int kind = 0; kind < 3; ++kind)
        for (size_t k = 0; k < 6 && names[kind][k]; ++k)
            if (!strcmp(type, names[kind][k])) return kind;
    return -1;
}

/** Copies a module's folder `path` into `into` (256 bytes): relative, inside the model folder. */
static uform_status_t uform_module_folder(char const *label, size_t index, char const *path, char *into, size_t capacity) {
    if (!uform_safe_relative_path(path))
        return uform_fail(uform_status_corrupt_file_k, "%s: module %zu: path '%.64s' leaves the model folder", label, index,
                          path);
    if (strlen(path) >= capacity)
        return uform_fail(uform_status_unsupported_k, "%s: module %zu: path '%.64s...' has %zu bytes, more than the %zu "
                          "a module folder may have", label, index, path, strlen(path), capacity - 1);
    snprintf(into, capacity, "%s", strcmp(path, ".") ? path : "");
    return uform_status_ok_k;
}

uform_status_t uform_config_modules(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    if (!cJSON_IsArray(root)) return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON array of modules", label);
    size_t index = 0;
    int transformer = 0;
    cJSON const *module = NULL;
    cJSON_ArrayForEach(module, root) {
        if (!cJSON_IsObject(module))
            return uform_fail(uform_status_corrupt_file_k, "%s: module %zu is not a JSON object", label, index);
        char key[32];
        snprintf(key, sizeof(key), "[%zu].", index);
        char const *type = NULL, *path = NULL;
        UFORM_TRY(uform_json_string(label, key, module, "type", NULL, &type));
        UFORM_TRY(uform_json_string(label, key, module, "path", "", &path));
        int const kind = uform_module_kind(type);
        if (kind == 0) {
            if (transformer || index != 0)
                return uform_fail(uform_status_unsupported_k, "%s: module %zu: a Transformer that is not the first module",
                                  label, index);
            /* sentence-transformers before 1.0 kept the model in a folder of its own ("0_Transformer"). */
            UFORM_TRY(uform_module_folder(label, index, path, config->transformer_path, sizeof(config->transformer_path)));
            transformer = 1;
        }
        else if (kind == 1) {
            if (!transformer || config->has_pooling_module)
                return uform_fail(uform_status_unsupported_k, "%s: module %zu: a Pooling out of place (one, after the Transformer)",
                                  label, index);
            UFORM_TRY(uform_module_folder(label, index, path, config->pooling_path, sizeof(config->pooling_path)));
            config->has_pooling_module = 1;
        }
        else if (kind == 2) {
            if (!config->has_pooling_module)
                return uform_fail(uform_status_unsupported_k, "%s: module %zu: Normalize before Pooling", label, index);
            config->normalize = 1;
        }
        else
            return uform_fail(uform_status_unsupported_k, "%s: module %zu of type '%.96s' is not supported (only "
                              "sentence-transformers' Transformer, Pooling and Normalize)", label, index, type);
        ++index;
    }
    if (!transformer) return uform_fail(uform_status_unsupported_k, "%s: no sentence_transformers.models.Transformer module", label);
    if (!config->has_pooling_module)
        return uform_fail(uform_status_unsupported_k, "%s: no sentence_transformers.models.Pooling module", label);
    return uform_status_ok_k;
}

/** sentence-transformers 6's `pooling_mode`: a name or a list of names (concatenated: refused). */
static uform_status_t uform_pooling_mode(char const *label, cJSON const *mode, uform_pooling_t *pooling) {
    if (cJSON_IsArray(mode) && cJSON_GetArraySize(mode) == 1) mode = cJSON_GetArrayItem(mode, 0);
    else if (cJSON_IsArray(mode))
        return uform_fail(uform_status_unsupported_k, "%s: 'pooling_mode' lists %d modes, whose outputs sentence-transformers "
                          "concatenates; only one mode, 'cls' or 'mean', is supported", label, cJSON_GetArraySize(mode));
    if (!cJSON_IsString(mode) || !mode->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'pooling_mode' must be a string or a list of strings", label);
    if (!strcmp(mode->valuestring, "cls")) *pooling = uform_pooling_cls_k;
    else if (!strcmp(mode->valuestring, "mean")) *pooling = uform_pooling_mean_k;
    else
        return uform_fail(uform_status_unsupported_k, "%s: 'pooling_mode' '%.64s' is not supported (only 'cls' and 'mean')",
                          label, mode->valuestring);
    return uform_status_ok_k;
}

uform_status_t uform_config_pooling(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    if (!cJSON_IsObject(root)) return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON object", label);
    cJSON const *mode = uform_json_get(root, "pooling_mode");
    if (mode) UFORM_TRY(uform_pooling_mode(label, mode, &config->pooling)); /* the older keys are then ignored */
    else {
        static char const *const refused[] = {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                              "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"};
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); ++i) {
            int on = 0;
            UFORM_TRY(uform_json_bool(label, "", root, refused[i], 0, &on));
            if (on) return uform_fail(uform_status_unsupported_k, "%s: '%s' is not supported (only CLS and mean pooling)", label, refused[i]);
        }
        int cls = 0, mean = 0;
        UFORM_TRY(uform_json_bool(label, "", root, "pooling_mode_cls_token", 0, &cls));
        UFORM_TRY(uform_json_bool(label, "", root, "pooling_mode_mean_tokens", 0, &mean));
        if (cls && mean)
            return uform_fail(uform_status_unsupported_k, "%s: both 'pooling_mode_cls_token' and 'pooling_mode_mean_tokens' "
                              "are true: sentence-transformers concatenates the two; only one mode is supported", label);
        config->pooling = cls ? uform_pooling_cls_k : uform_pooling_mean_k; /* none set: mean, as 6.3 reads it */
    }
    /* sentence-transformers 6 renamed word_embedding_dimension. */
    char const *width_key = uform_json_get(root, "embedding_dimension") ? "embedding_dimension" : "word_embedding_dimension";
    size_t width;
    UFORM_TRY(uform_json_extent(label, "", root, width_key, 0, config->hidden, &width));
    if (width != config->hidden)
        return uform_fail(uform_status_corrupt_file_k, "%s: '%s' %zu differs from hidden_size %zu", label, width_key,
                          width, config->hidden);
    int include_prompt = 1;
    UFORM_TRY(uform_json_bool(label, "", root, "include_prompt", 1, &include_prompt));
    config->excludes_prompt = !include_prompt;
    return uform_status_ok_k;
}

/** An object of keyword arguments in sentence_bert_config.json: only `allowed` keys (and
 *  trust_remote_code, which sentence-transformers drops) may be there; any other changes what the
 *  reference builds, so it is refused by name. */
static uform_status_t uform_config_kwargs(char const *label, cJSON const *root, char const *key,
                                          char const *const *allowed, size_t allowed_count) {
    cJSON const *object = uform_json_get(root, key);
    if (!object) return uform_status_ok_k;
    if (!cJSON_IsObject(object)) return uform_fail(uform_status_corrupt_file_k, "%s: '%s' must be an object", label, key);
    cJSON const *item = NULL;
    cJSON_ArrayForEach(item, object) {
        int known = !strcmp(item->string, "trust_remote_code");
        for (size_t k = 0; k < allowed_count; ++k) known |= !strcmp(item->string, allowed[k]);
        if (!known)
            return uform_fail(uform_status_unsupported_k, "%s: '%s.%.64s' is not supported (it changes the model or "
                              "tokenizer sentence-transformers builds)", label, key, item->string);
    }
    return uform_status_ok_k;
}

uform_status_t uform_config_sentence_bert(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    if (!cJSON_IsObject(root)) return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON object", label);
    size_t context;
    UFORM_TRY(uform_json_extent(label, "", root, "max_seq_length", 0, 0, &context));
    if (uform_json_get(root, "max_seq_length")) {
        if (context < 2)
            return uform_fail(uform_status_corrupt_file_k, "%s: 'max_seq_length' %zu leaves no room for the 2 specials",
                              label, context);
        config->context = context < config->max_positions ? context : config->max_positions;
        config->has_max_seq_length = 1;
    }
    /* The Transformer module's other keys: each either keeps what this engine runs or is refused. */
    static char const *const model_kwargs[] = {"torch_dtype", "dtype", "attn_implementation"};
    static char const *const kwargs_names[][2] = {{"model_args", "model_kwargs"}, {"tokenizer_args", "processor_kwargs"},
                                                  {"config_args", "config_kwargs"}, {"processing_kwargs", NULL}};
    for (size_t k = 0; k < 4; ++k)
        for (size_t n = 0; n < 2 && kwargs_names[k][n]; ++n)
            UFORM_TRY(uform_config_kwargs(label, root, kwargs_names[k][n], model_kwargs, k == 0 ? 3 : 0));
    if (uform_json_get(root, "tokenizer_name_or_path"))
        return uform_fail(uform_status_unsupported_k, "%s: 'tokenizer_name_or_path' is not supported (the tokenizer is "
                          "read from the model's folder)", label);
    char const *task, *output;
    UFORM_TRY(uform_json_string(label, "", root, "transformer_task", "feature-extraction", &task));
    if (strcmp(task, "feature-extraction") != 0)
        return uform_fail(uform_status_unsupported_k, "%s: 'transformer_task' '%.64s' is not supported (only "
                          "'feature-extraction')", label, task);
    UFORM_TRY(uform_json_string(label, "", root, "module_output_name", "token_embeddings", &output));
    if (strcmp(output, "token_embeddings") != 0)
        return uform_fail(uform_status_unsupported_k, "%s: 'module_output_name' '%.64s' is not supported (only "
                          "'token_embeddings')", label, output);
    cJSON const *modality = uform_json_get(root, "modality_config");
    cJSON const *text = modality ? uform_json_get(modality, "text") : NULL;
    if (modality && !cJSON_IsObject(modality))
        return uform_fail(uform_status_corrupt_file_k, "%s: 'modality_config' must be an object", label);
    if (text) {
        char const *method, *method_output;
        if (!cJSON_IsObject(text))
            return uform_fail(uform_status_corrupt_file_k, "%s: 'modality_config.text' must be an object", label);
        UFORM_TRY(uform_json_string(label, "modality_config.text.", text, "method", "forward", &method));
        UFORM_TRY(uform_json_string(label, "modality_config.text.", text, "method_output_name", "last_hidden_state",
                                    &method_output));
        if (strcmp(method, "forward") != 0 || strcmp(method_output, "last_hidden_state") != 0)
            return uform_fail(uform_status_unsupported_k, "%s: 'modality_config.text' runs '%.32s' for '%.32s'; only "
                              "'forward' for 'last_hidden_state' is supported", label, method, method_output);
    }
    static char const *const unset[] = {"query_length", "document_length", "query_expansion"};
    for (size_t k = 0; k < 3; ++k)
        if (uform_json_get(root, unset[k]))
            return uform_fail(uform_status_unsupported_k, "%s: '%s' is set: multi-vector (late interaction) models are "
                              "not supported", label, unset[k]);
    return uform_json_bool(label, "", root, "do_lower_case", 0, &config->tokenizer.lowercase_first);
}

uform_status_t uform_config_prompts(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    if (!cJSON_IsObject(root)) return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON object", label);
    char const *type;
    UFORM_TRY(uform_json_string(label, "", root, "model_type", "SentenceTransformer", &type));
    if (strcmp(type, "SentenceTransformer") != 0)
        return uform_fail(uform_status_unsupported_k, "%s: 'model_type' '%.64s' is not supported (only "
                          "'SentenceTransformer')", label, type);
    cJSON const *name = uform_json_get(root, "default_prompt_name");
    if (!name) return uform_status_ok_k;
    if (!cJSON_IsString(name) || !name->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'default_prompt_name' must be a string or null", label);
    cJSON const *prompts = uform_json_get(root, "prompts");
    cJSON const *prompt = cJSON_IsObject(prompts) ? cJSON_GetObjectItemCaseSensitive(prompts, name->valuestring) : NULL;
    /* A SentenceTransformer always knows "query" and "document", empty unless the file names them. */
    if (!prompt && (!strcmp(name->valuestring, "query") || !strcmp(name->valuestring, "document"))) return uform_status_ok_k;
    if (!prompt)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'default_prompt_name' '%.64s' is not a key of 'prompts'", label,
                          name->valuestring);
    if (cJSON_IsNull(prompt)) return uform_status_ok_k; /* sentence-transformers reads null as "" */
    if (!cJSON_IsString(prompt) || !prompt->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'prompts.%.64s' must be a string", label, name->valuestring);
    size_t const length = strlen(prompt->valuestring);
    if (length >= sizeof(config->prompt))
        return uform_fail(uform_status_unsupported_k, "%s: the default prompt '%.64s' has %zu bytes, more than the %zu "
                          "supported", label, name->valuestring, length, sizeof(config->prompt) - 1);
    memcpy(config->prompt, prompt->valuestring, length + 1);
    return uform_status_ok_k;
}

uform_status_t uform_config_tokenizer(char const *label, void const *root_, uform_text_config_t *config) {
    cJSON const *root = (cJSON const *)root_;
    if (!cJSON_IsObject(root)) return uform_fail(uform_status_corrupt_file_k, "%s: not a JSON object", label);
    uform_tokenizer_bert_t *tokenizer = &config->tokenizer;
    char const *class_name;
    UFORM_TRY(uform_json_string(label, "", root, "tokenizer_class", "BertTokenizer", &class_name));
    /* transformers 5 rebuilds BertTokenizer's pipeline around the vocabulary for these classes (copies of
     * it); PreTrainedTokenizerFast and TokenizersBackend keep tokenizer.json's. Another class builds a
     * pipeline of its own (a Japanese word splitter, XLM-R's Metaspace after WhitespaceSplit, ...). */
    static char const *const bert_classes[] = {"BertTokenizer", "DistilBertTokenizer", "ElectraTokenizer",
                                               "LayoutLMTokenizer", "MobileBertTokenizer", "SqueezeBertTokenizer"};
    static char const *const json_classes[] = {"PreTrainedTokenizerFast", "TokenizersBackend"};
    size_t const base = strlen(class_name) >= 4 && !strcmp(class_name + strlen(class_name) - 4, "Fast")
                            ? strlen(class_name) - 4 : strlen(class_name); /* "BertTokenizerFast" is "BertTokenizer" */
    int known = 0;
    tokenizer->pipeline = 0;
    for (size_t k = 0; k < sizeof(bert_classes) / sizeof(bert_classes[0]); k++)
        if (strlen(bert_classes[k]) == base && !strncmp(class_name, bert_classes[k], base)) tokenizer->pipeline = known = 1;
    for (size_t k = 0; k < sizeof(json_classes) / sizeof(json_classes[0]); k++) known |= !strcmp(class_name, json_classes[k]);
    if (!known)
        return uform_fail(uform_status_unsupported_k, "%s: 'tokenizer_class' '%.64s' is not supported: transformers builds "
                          "its own pipeline; BertTokenizer's kind (Bert, DistilBert, Electra, ...) and "
                          "PreTrainedTokenizerFast (tokenizer.json as written) are", label, class_name);
    /* BertTokenizer's template and unknown token are the ones named here; only BERT's own are kept.
     * PreTrainedTokenizerFast keeps tokenizer.json's, which name their own. */
    char const *specials[3][2] = {{"cls_token", "[CLS]"}, {"sep_token", "[SEP]"}, {"unk_token", "[UNK]"}};
    for (size_t k = 0; tokenizer->pipeline && k < 3; k++) {
        cJSON const *item = uform_json_get(root, specials[k][0]);
        if (cJSON_IsObject(item)) item = uform_json_get(item, "content"); /* an AddedToken's form */
        if (item && !cJSON_IsString(item))
            return uform_fail(uform_status_corrupt_file_k, "%s: '%s' must be a string or an object with a 'content' "
                              "string", label, specials[k][0]);
        if (item && strcmp(item->valuestring, specials[k][1]) != 0)
            return uform_fail(uform_status_unsupported_k, "%s: '%s' is '%.64s'; only BERT's '%s' is supported", label,
                              specials[k][0], item->valuestring, specials[k][1]);
    }
    char const *side;
    UFORM_TRY(uform_json_string(label, "", root, "truncation_side", "right", &side));
    if (strcmp(side, "right") != 0 && strcmp(side, "left") != 0)
        return uform_fail(uform_status_corrupt_file_k, "%s: 'truncation_side' must be \"right\" or \"left\"", label);
    config->truncates_left = !strcmp(side, "left");
    UFORM_TRY(uform_json_bool(label, "", root, "do_lower_case", 1, &tokenizer->lowercase));
    UFORM_TRY(uform_json_bool(label, "", root, "tokenize_chinese_chars", 1, &tokenizer->chinese));
    tokenizer->strip_accents = -1; // null or absent: as do_lower_case
    if (uform_json_get(root, "strip_accents")) {
        int strip;
        UFORM_TRY(uform_json_bool(label, "", root, "strip_accents", 0, &strip));
        tokenizer->strip_accents = strip;
    }
    /* transformers writes 1e30 for "no limit": any length past what a text may hold is none. */
    cJSON const *length = uform_json_get(root, "model_max_length");
    if (length) {
        double const value = cJSON_IsNumber(length) ? length->valuedouble : NAN;
        if (!isfinite(value) || floor(value) != value || value < 2)
            return uform_fail(uform_status_corrupt_file_k, "%s: 'model_max_length' must be an integer of at least 2", label);
        config->model_max_length = value > (double)UFORM_TEXT_MAX_EXTENT ? 0 : (size_t)value;
    }
    return uform_status_ok_k;
}

uform_status_t uform_config_context_check(char const *label, uform_text_config_t const *config) {
    if (config->context <= UFORM_TEXT_MAX_CONTEXT) return uform_status_ok_k;
    if (config->layout == uform_text_layout_uform3_k)
        return uform_fail(uform_status_unsupported_k, "%s: 'text_encoder.max_position_embeddings' %zu gives a context "
                          "of %zu tokens, more than the %zu this engine's attention holds", label, config->max_positions,
                          config->context, UFORM_TEXT_MAX_CONTEXT);
    return uform_fail(uform_status_unsupported_k, "%s: a context of %zu tokens (%s), more than the %zu this engine's "
                      "attention holds; a sentence_bert_config.json 'max_seq_length' of at most %zu sets it", label,
                      config->context, config->has_max_seq_length ? "sentence_bert_config.json's 'max_seq_length'"
                                       : config->model_max_length ? "tokenizer_config.json's 'model_max_length'"
                                                                  : "'max_position_embeddings'",
                      UFORM_TEXT_MAX_CONTEXT, UFORM_TEXT_MAX_CONTEXT);
}

void uform_config_bert_context(uform_text_config_t *config) {
    if (config->has_max_seq_length || !config->model_max_length) return;
    config->context = config->model_max_length < config->max_positions ? config->model_max_length : config->max_positions;
}

/* ---- Binding tensors ---- */

typedef struct uform_binder_t {
    uform_text_config_t const *config;
    uform_safetensors_t const *index;
    uform_binding_t *bindings;
    size_t count;
} uform_binder_t;

/** Binds one tensor `name` of shape [rows, cols] (cols only for a vector when `rows` is 0). */
static uform_status_t uform_bind(uform_binder_t *binder, char const *name, size_t rows, size_t cols, int parameter,
                                 size_t layer, size_t field) {
    size_t const shape[2] = {rows, cols};
    uform_safetensor_t const *tensor = NULL;
    uform_status_t const status = uform_safetensors_expect(binder->index, name, rows ? 2 : 1, rows ? shape : shape + 1,
                                                           &tensor);
    if (status != uform_status_ok_k) return status;
    binder->bindings[binder->count++] = (uform_binding_t){
        .source = tensor, .rows = rows ? rows : 1, .cols = cols, .parameter = parameter, .layer = layer, .field = field};
    return uform_status_ok_k;
}

#define UFORM_TOWER_FIELD(member) offsetof(uform_text_tower_t, member)
#define UFORM_LAYER_FIELD(member) offsetof(uform_text_layer_t, member)

/**
 *  Binds every layer's tensors, one table for both layouts: the same shapes and fields under the
 *  package's names ("blocks.<layer>.<name>", skipping its multimodal layers) and under
 *  transformers' BERT names ("<prefix>encoder.layer.<layer>.<name>").
 */
static uform_status_t uform_bind_layers(uform_binder_t *b, int bert, char const *prefix) {
    uform_text_config_t const *c = b->config;
    size_t const h = c->hidden, f = c->intermediate;
    struct {
        char const *uform3, *bert;
        size_t rows, cols;
        int parameter;
        size_t field;
    } const parts[] = {
        {"attention.query.weight", "attention.self.query.weight", h, h, 0, UFORM_LAYER_FIELD(query_weight)},
        {"attention.query.bias", "attention.self.query.bias", 0, h, 1, UFORM_LAYER_FIELD(query_bias)},
        {"attention.key.weight", "attention.self.key.weight", h, h, 0, UFORM_LAYER_FIELD(key_weight)},
        {"attention.key.bias", "attention.self.key.bias", 0, h, 1, UFORM_LAYER_FIELD(key_bias)},
        {"attention.value.weight", "attention.self.value.weight", h, h, 0, UFORM_LAYER_FIELD(value_weight)},
        {"attention.value.bias", "attention.self.value.bias", 0, h, 1, UFORM_LAYER_FIELD(value_bias)},
        {"attention.out.weight", "attention.output.dense.weight", h, h, 0, UFORM_LAYER_FIELD(attention_output_weight)},
        {"attention.out.bias", "attention.output.dense.bias", 0, h, 1, UFORM_LAYER_FIELD(attention_output_bias)},
        {"norm_attn.weight", "attention.output.LayerNorm.weight", 0, h, 1, UFORM_LAYER_FIELD(attention_norm_weight)},
        {"norm_attn.bias", "attention.output.LayerNorm.bias", 0, h, 1, UFORM_LAYER_FIELD(attention_norm_bias)},
        {"mlp.hidden_layer.weight", "intermediate.dense.weight", f, h, 0, UFORM_LAYER_FIELD(intermediate_weight)},
        {"mlp.hidden_layer.bias", "intermediate.dense.bias", 0, f, 1, UFORM_LAYER_FIELD(intermediate_bias)},
        {"mlp.output_layer.weight", "output.dense.weight", h, f, 0, UFORM_LAYER_FIELD(output_weight)},
        {"mlp.output_layer.bias", "output.dense.bias", 0, h, 1, UFORM_LAYER_FIELD(output_bias)},
        {"norm_mlp.weight", "output.LayerNorm.weight", 0, h, 1, UFORM_LAYER_FIELD(output_norm_weight)},
        {"norm_mlp.bias", "output.LayerNorm.bias", 0, h, 1, UFORM_LAYER_FIELD(output_norm_bias)},
    };
    size_t run = 0;
    for (size_t layer = 0; layer < c->layers_total; ++layer) {
        if (c->skipped[layer]) continue; // only the package's configurations skip layers
        for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); ++i) {
            char name[160];
            if (bert) snprintf(name, sizeof(name), "%sencoder.layer.%zu.%s", prefix, layer, parts[i].bert);
            else snprintf(name, sizeof(name), "blocks.%zu.%s", layer, parts[i].uform3);
            UFORM_TRY(uform_bind(b, name, parts[i].rows, parts[i].cols, parts[i].parameter, run, parts[i].field));
        }
        ++run;
    }
    return uform_status_ok_k;
}

static uform_status_t uform_bind_uform3(uform_binder_t *b) {
    uform_text_config_t const *c = b->config;
    size_t const h = c->hidden;
    UFORM_TRY(uform_bind(b, "word_embeddings.weight", c->vocab_size, h, 0, SIZE_MAX, UFORM_TOWER_FIELD(word_embeddings)));
    UFORM_TRY(uform_bind(b, "position_embeddings.weight", c->max_positions, h, 0, SIZE_MAX, UFORM_TOWER_FIELD(position_embeddings)));
    UFORM_TRY(uform_bind(b, "layer_norm.weight", 0, h, 1, SIZE_MAX, UFORM_TOWER_FIELD(embedding_norm_weight)));
    UFORM_TRY(uform_bind(b, "layer_norm.bias", 0, h, 1, SIZE_MAX, UFORM_TOWER_FIELD(embedding_norm_bias)));
    UFORM_TRY(uform_bind_layers(b, 0, ""));
    return uform_bind(b, "embedding_projection.weight", c->embedding_dimensions, h, 0, SIZE_MAX, UFORM_TOWER_FIELD(projection));
}

static uform_status_t uform_bind_bert(uform_binder_t *b, char const *prefix) {
    uform_text_config_t const *c = b->config;
    size_t const h = c->hidden;
    char name[128];
#define UFORM_NAME(...) (snprintf(name, sizeof(name), __VA_ARGS__), name)
    UFORM_TRY(uform_bind(b, UFORM_NAME("%sembeddings.word_embeddings.weight", prefix), c->vocab_size, h, 0, SIZE_MAX,
                         UFORM_TOWER_FIELD(word_embeddings)));
    UFORM_TRY(uform_bind(b, UFORM_NAME("%sembeddings.position_embeddings.weight", prefix), c->max_positions, h, 0, SIZE_MAX,
                         UFORM_TOWER_FIELD(position_embeddings)));
    UFORM_TRY(uform_bind(b, UFORM_NAME("%sembeddings.token_type_embeddings.weight", prefix), c->type_vocab_size, h, 0,
                         SIZE_MAX, UFORM_TOWER_FIELD(token_type_embeddings)));
    UFORM_TRY(uform_bind(b, UFORM_NAME("%sembeddings.LayerNorm.weight", prefix), 0, h, 1, SIZE_MAX,
                         UFORM_TOWER_FIELD(embedding_norm_weight)));
    UFORM_TRY(uform_bind(b, UFORM_NAME("%sembeddings.LayerNorm.bias", prefix), 0, h, 1, SIZE_MAX,
                         UFORM_TOWER_FIELD(embedding_norm_bias)));
#undef UFORM_NAME
    return uform_bind_layers(b, 1, prefix);
}

uform_status_t uform_config_bind(uform_text_config_t *config, uform_safetensors_t const *index,
                                 uform_binding_t **bindings, size_t *count) {
    *bindings = NULL, *count = 0;
    size_t const capacity = 6 + 16 * config->layers_total;
    uform_binder_t binder = {.config = config, .index = index, .bindings = calloc(capacity, sizeof(uform_binding_t))};
    if (!binder.bindings) return uform_fail(uform_status_out_of_memory_k, "out of memory binding %zu tensors", capacity);
    uform_status_t status;
    if (config->layout == uform_text_layout_uform3_k)
        config->prefix[0] = '\0', status = uform_bind_uform3(&binder);
    else {
        /* Checkpoints saved from `BertModel` have no prefix, those from task models have "bert.". */
        int const prefixed = !uform_safetensors_find(index, "embeddings.word_embeddings.weight") &&
                             uform_safetensors_find(index, "bert.embeddings.word_embeddings.weight");
        snprintf(config->prefix, sizeof(config->prefix), "%s", prefixed ? "bert." : "");
        status = uform_bind_bert(&binder, config->prefix);
    }
    if (status != uform_status_ok_k) {
        free(binder.bindings);
        return status;
    }
    *bindings = binder.bindings, *count = binder.count;
    return uform_status_ok_k;
}

static size_t uform_binding_bytes(uform_binding_t const *binding, uform_dtype_t dtype) {
    size_t const element = binding->parameter ? 4 : uform_dtype_bytes(dtype);
    return (binding->rows * binding->cols * element + 63) & ~(size_t)63;
}

size_t uform_replica_bytes(uform_binding_t const *bindings, size_t count, uform_dtype_t dtype) {
    size_t total = 0;
    for (size_t i = 0; i < count; ++i) total += uform_binding_bytes(&bindings[i], dtype);
    return total;
}

void uform_text_tower_fill(uform_text_config_t const *config, uform_binding_t const *bindings, size_t count,
                           uform_dtype_t dtype, void *block, uform_text_layer_t *layers, uform_text_tower_t *tower) {
    memset(tower, 0, sizeof(*tower));
    memset(layers, 0, config->layers_count * sizeof(uform_text_layer_t));
    tower->vocab_size = config->vocab_size;
    tower->hidden = config->hidden;
    tower->heads = config->heads;
    tower->intermediate = config->intermediate;
    tower->max_positions = config->max_positions;
    tower->layers_count = config->layers_count;
    tower->context = config->context;
    tower->embedding_dimensions = config->embedding_dimensions;
    tower->layer_norm_epsilon = config->layer_norm_epsilon;
    tower->pooling = config->pooling;
    tower->position_ids = config->position_ids;
    tower->pad_id = config->pad_id;
    tower->normalize = config->normalize;
    tower->weights_dtype = dtype;
    tower->layers = layers;
    uform_bindings_place(bindings, count, dtype, block, tower, layers, sizeof(uform_text_layer_t));
}

uform_status_t uform_bindings_check(char const *file, uform_binding_t const *bindings, size_t count, uform_dtype_t dtype,
                                    void const *block) {
    uint8_t const *cursor = (uint8_t const *)block;
    for (size_t i = 0; i < count; ++i) {
        uform_binding_t const *binding = &bindings[i];
        uform_dtype_t const target = binding->parameter ? uform_dtype_f32_k : dtype;
        size_t const elements = binding->rows * binding->cols;
        size_t const at = uform_first_nonfinite(cursor, target, elements);
        if (at < elements) {
            float const value = uform_element(binding->source->data, binding->source->dtype, at);
            if (!isfinite(value))
                return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s' holds %s at element %zu", file,
                                  binding->source->name, isnan(value) ? "NaN" : "infinity", at);
            return uform_fail(uform_status_unsupported_k,
                              "%s: tensor '%s' holds %g at element %zu, past the range of %s weights; open the "
                              "model with %s weights", file, binding->source->name, (double)value, at,
                              target == uform_dtype_f16_k ? "f16" : "bf16", target == uform_dtype_f16_k ? "bf16 or f32" : "f32");
        }
        cursor += uform_binding_bytes(binding, dtype);
    }
    return uform_status_ok_k;
}

void uform_bindings_place(uform_binding_t const *bindings, size_t count, uform_dtype_t dtype, void *block, void *tower,
                          void *layers, size_t layer_size) {
    uint8_t *cursor = (uint8_t *)block;
    for (size_t i = 0; i < count; ++i) {
        uform_binding_t const *binding = &bindings[i];
        uform_dtype_t const target = binding->parameter ? uform_dtype_f32_k : dtype;
        uform_convert(cursor, target, binding->source->data, binding->source->dtype, binding->rows * binding->cols);
        uint8_t *owner = binding->layer == SIZE_MAX ? (uint8_t *)tower : (uint8_t *)layers + binding->layer * layer_size;
        uform_tensor_t *slot = (uform_tensor_t *)(owner + binding->field);
        *slot = (uform_tensor_t){.data = cursor, .dtype = target, .rows = binding->rows, .cols = binding->cols};
        cursor += uform_binding_bytes(binding, dtype);
    }
}
