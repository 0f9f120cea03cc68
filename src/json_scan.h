/**
 *  @file   json_scan.h
 *  @brief  One pass over JSON text for what cJSON cannot report: a `\u0000` escape inside a string
 *          (cJSON decodes it into a NUL that ends its C string, so "cls\u0000x" would read as "cls"),
 *          how deep the brackets outside strings go (to name cJSON's nesting limit), and how many
 *          values it holds at most (cJSON spends about 80 bytes on each: a file of "[0,0,..." would
 *          take 40 times its size, so readers refuse one of more values than they expect).
 *
 *  Shared by the readers of every JSON file the engine opens (model configs, tokenizer.json,
 *  safetensors headers); header-only so the fuzz targets that link one reader get it too.
 */
#ifndef UFORM_JSON_SCAN_H
#define UFORM_JSON_SCAN_H

#include <stddef.h> // `size_t`

/** What `uform_json_scan` found in `text[0, length)`. */
typedef struct uform_json_scan_t {
    size_t nul_escape; /**< Offset of the first `\u0000` escape inside a string, or the length when none. */
    size_t max_depth;  /**< The most `[` and `{` open at once, outside strings, up to `depth_until`. */
    size_t values;     /**< At most this many values: 1 + the `,`, `[` and `{` outside strings. */
} uform_json_scan_t;

/** Scans `text[0, length)`; depths are counted over `text[0, depth_until)` only (where a parser
 *  stopped, say). Escapes are followed as JSON defines them: `\\` then `"` ends a string. */
static inline uform_json_scan_t uform_json_scan(char const *text, size_t length, size_t depth_until) {
    uform_json_scan_t found = {.nul_escape = length, .max_depth = 0, .values = 1};
    size_t depth = 0;
    int in_string = 0;
    for (size_t i = 0; i < length; ++i) {
        char const c = text[i];
        if (in_string) {
            if (c == '"') in_string = 0;
            else if (c == '\\' && i + 1 < length) {
                if (text[i + 1] == 'u' && i + 5 < length && text[i + 2] == '0' && text[i + 3] == '0' &&
                    text[i + 4] == '0' && text[i + 5] == '0' && found.nul_escape == length)
                    found.nul_escape = i;
                ++i; /* the escaped character (a `u`'s four digits are plain characters after it) */
            }
            continue;
        }
        if (c == '"') in_string = 1;
        else if (c == ',') ++found.values;
        else if (c == '[' || c == '{') {
            ++found.values;
            if (i < depth_until && ++depth > found.max_depth) found.max_depth = depth;
        }
        else if ((c == ']' || c == '}') && depth) --depth;
    }
    return found;
}

/** Values a model config (config.json, modules.json, tokenizer_config.json, ...) or a safetensors
 *  header may hold (about 80 MiB parsed); the largest real ones hold thousands. */
#define UFORM_JSON_MAX_VALUES ((size_t)1 << 20)
/** Values a tokenizer.json may hold (about 320 MiB parsed): the largest real vocabularies (250,000
 *  Unigram pieces, three values each; BPE merges) hold about a million. */
#define UFORM_TOKENIZER_JSON_MAX_VALUES ((size_t)4 << 20)

#endif // UFORM_JSON_SCAN_H
