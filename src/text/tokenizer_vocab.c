/**
 *  @file   tokenizer_vocab.c
 *  @brief  The model's vocabulary: WordPiece or Unigram from `tokenizer.json`'s "model", or
 *          WordPiece from `vocab.txt` with BERT's defaults around it.
 */
#include "text/tokenizer_private.h"

#include <math.h>    // `isinf`
#include <pthread.h> // `pthread_once`
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tokenizer_pieces_free(pieces_t *pieces) {
    free(pieces->offsets), free(pieces->lengths), free(pieces->ids), free(pieces->scores);
}

uform_status_t tokenizer_pieces_alloc(pieces_t *pieces, size_t count, char const *file) {
    pieces->offsets = malloc((count + 1) * sizeof(uint32_t));
    pieces->lengths = malloc((count + 1) * sizeof(uint32_t));
    pieces->ids = malloc((count + 1) * sizeof(int32_t));
    pieces->scores = malloc((count + 1) * sizeof(double));
    pieces->count = 0;
    if (!pieces->offsets || !pieces->lengths || !pieces->ids || !pieces->scores)
        return uform_fail(uform_status_out_of_memory_k, "%s: out of memory for the vocabulary", file);
    return uform_status_ok_k;
}

uform_status_t tokenizer_build_wordpiece(uform_tokenizer_t *tokenizer, loader_t *loader, pieces_t const *pieces,
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

/** Appends `text` (valid UTF-8, else CORRUPT_FILE) to the vocabulary as `id`, for either model. */
static uform_status_t tokenizer_piece_add(loader_t *loader, pieces_t *pieces, char const *text, int32_t id) {
    size_t const length = strlen(text);
    if (uform_utf8_invalid_offset(text, length) != length) return tokenizer_corrupt(loader, "invalid UTF-8 in", "model.vocab");
    size_t const i = pieces->count++;
    uform_status_t const status = tokenizer_blob_add(loader, text, length, &pieces->offsets[i]);
    if (status != uform_status_ok_k) return status;
    pieces->lengths[i] = (uint32_t)length;
    pieces->ids[i] = id;
    if (id > loader->max_id) loader->max_id = id;
    return uform_status_ok_k;
}

/* ---- Unigram scores as `tokenizers` reads them ---- */

static double serde_powers[309]; /* 1e0 .. 1e308, each the nearest double, as serde_json's table */
static pthread_once_t serde_powers_once = PTHREAD_ONCE_INIT;

static void serde_powers_fill(void) {
    for (int e = 0; e < 309; ++e) {
        char literal[8];
        snprintf(literal, sizeof literal, "1e%d", e);
        serde_powers[e] = strtod(literal, NULL); /* glibc's strtod rounds to nearest */
    }
}

/** serde_json's `overflow!(significand * 10 + digit, u64::MAX)`. */
static bool serde_overflows(uint64_t significand, unsigned digit) {
    return significand >= UINT64_MAX / 10 && (significand > UINT64_MAX / 10 || digit > UINT64_MAX % 10);
}

bool tokenizer_serde_f64(char const *text, size_t length, double *value) {
    pthread_once(&serde_powers_once, serde_powers_fill);
    size_t i = 0;
    bool const negative = i < length && text[i] == '-';
    i += negative;
    uint64_t significand = 0;
    int64_t exponent = 0;
    bool integral = true, dropping = false;
    /* The integer part: past u64's range, each further digit only counts in the exponent. */
    for (; i < length && text[i] >= '0' && text[i] <= '9'; ++i) {
        unsigned const digit = (unsigned)(text[i] - '0');
        if (!dropping && serde_overflows(significand, digit)) dropping = true, integral = false;
        if (dropping) ++exponent;
        else significand = significand * 10 + digit;
    }
    /* The fraction: digits join the significand until one would overflow it; the rest are dropped. */
    if (i < length && text[i] == '.') {
        integral = false, dropping = false;
        for (++i; i < length && text[i] >= '0' && text[i] <= '9'; ++i) {
            unsigned const digit = (unsigned)(text[i] - '0');
            if (!dropping && serde_overflows(significand, digit)) dropping = true;
            if (!dropping) significand = significand * 10 + digit, --exponent;
        }
    }
    if (i < length && (text[i] == 'e' || text[i] == 'E')) {
        integral = false, ++i;
        bool const negative_exponent = i < length && text[i] == '-';
        i += i < length && (text[i] == '-' || text[i] == '+');
        int64_t written = 0;
        for (; i < length && text[i] >= '0' && text[i] <= '9'; ++i) {
            if (written * 10 + (text[i] - '0') > INT32_MAX) { /* serde_json: infinity refused, else zero */
                if (significand && !negative_exponent) return false;
                *value = negative ? -0.0 : 0.0;
                return true;
            }
            written = written * 10 + (text[i] - '0');
        }
        exponent += negative_exponent ? -written : written;
        if (exponent > INT32_MAX) exponent = INT32_MAX; /* serde_json's saturating add */
        if (exponent < INT32_MIN) exponent = INT32_MIN;
    }
    if (integral) { /* a u64 or an i64, converted as `as f64` does */
        *value = negative ? -(double)significand : (double)significand;
        return true;
    }
    double f = (double)significand;
    for (;;) {
        uint64_t const magnitude = exponent < 0 ? (uint64_t)(-exponent) : (uint64_t)exponent;
        if (magnitude <= 308) {
            if (exponent >= 0) {
                f *= serde_powers[magnitude];
                if (isinf(f)) return false;
            }
            else f /= serde_powers[magnitude];
            break;
        }
        if (f == 0) break;
        if (exponent >= 0) return false;
        f /= 1e308, exponent += 308;
    }
    *value = negative ? -f : f;
    return true;
}

/** Counts the numbers before `target` in document order under `node`; true once `target` is met. */
static bool numbers_before(cJSON const *node, cJSON const *target, size_t *count) {
    if (node == target) return true;
    if (cJSON_IsNumber(node)) ++*count;
    for (cJSON const *child = node->child; child; child = child->next)
        if (numbers_before(child, target, count)) return true;
    return false;
}

/** The text of the `wanted` numbers of `text` from the `first`-th on, in document order (a number
 *  starts outside strings with `-` or a digit); false if there are fewer. */
static bool number_spans(char const *text, size_t size, size_t first, size_t wanted, size_t *begins, size_t *ends) {
    size_t seen = 0;
    bool in_string = false;
    for (size_t i = 0; i < size && seen < first + wanted; ++i) {
        char const c = text[i];
        if (in_string) {
            if (c == '\\') ++i;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t end = i + 1;
            while (end < size && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.' || text[end] == 'e' ||
                                  text[end] == 'E' || text[end] == '+' || text[end] == '-'))
                ++end;
            if (seen >= first) begins[seen - first] = i, ends[seen - first] = end;
            ++seen, i = end - 1;
        }
    }
    return seen >= first + wanted;
}

/** Each score of the Unigram `vocab` (its entries checked to be [piece, number] pairs) as
 *  `tokenizers` reads it from the file's text. */
static uform_status_t unigram_scores(loader_t const *loader, cJSON const *vocab, size_t count, double *scores) {
    size_t first = 0;
    if (!loader->json_root || !numbers_before(loader->json_root, vocab, &first))
        return uform_fail(uform_status_corrupt_file_k, "%s: model.vocab is not in the parsed document", loader->file);
    size_t *spans = malloc(2 * count * sizeof(size_t));
    if (!spans) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
    uform_status_t status = uform_status_ok_k;
    if (!number_spans(loader->json_text, loader->json_size, first, count, spans, spans + count))
        status = tokenizer_corrupt(loader, "fewer scores than entries in", "model.vocab");
    for (size_t k = 0; k < count && status == uform_status_ok_k; ++k)
        if (!tokenizer_serde_f64(loader->json_text + spans[k], spans[count + k] - spans[k], &scores[k]))
            status = tokenizer_corrupt(loader, "a score out of double's range in", "model.vocab");
    free(spans);
    return status;
}

uform_status_t tokenizer_load_model(uform_tokenizer_t *tokenizer, loader_t *loader, cJSON const *json, pieces_t *pieces,
                                    char **prefix, char **unk, size_t *max_chars) {
    if (!cJSON_IsObject(json)) return tokenizer_corrupt(loader, "no object", "model");
    cJSON const *type = cJSON_GetObjectItemCaseSensitive(json, "type");
    cJSON const *vocab = cJSON_GetObjectItemCaseSensitive(json, "vocab");
    char const *kind = cJSON_IsString(type) ? type->valuestring
                       : cJSON_IsArray(vocab)  ? "Unigram"
                       : cJSON_GetObjectItemCaseSensitive(json, "continuing_subword_prefix") ? "WordPiece"
                                                                                           : NULL;
    if (!kind) return tokenizer_corrupt(loader, "no string", "model.type");
    uform_status_t status;
    if (!strcmp(kind, "WordPiece")) {
        tokenizer->model = model_wordpiece_k;
        if (!cJSON_IsObject(vocab)) return tokenizer_corrupt(loader, "no object", "model.vocab");
        cJSON const *unk_token = cJSON_GetObjectItemCaseSensitive(json, "unk_token");
        cJSON const *prefix_json = cJSON_GetObjectItemCaseSensitive(json, "continuing_subword_prefix");
        cJSON const *max_json = cJSON_GetObjectItemCaseSensitive(json, "max_input_chars_per_word");
        *unk = strdup(cJSON_IsString(unk_token) ? unk_token->valuestring : "[UNK]");
        *prefix = strdup(cJSON_IsString(prefix_json) ? prefix_json->valuestring : "##");
        if (!*unk || !*prefix) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", loader->file);
        *max_chars = 100;
        if (cJSON_IsNumber(max_json)) {
            if (max_json->valuedouble < 0) return tokenizer_corrupt(loader, "a negative", "model.max_input_chars_per_word");
            *max_chars = max_json->valuedouble > 1e18 ? (size_t)1e18 : (size_t)max_json->valuedouble;
        }
        status = tokenizer_pieces_alloc(pieces, (size_t)cJSON_GetArraySize(vocab), loader->file);
        if (status != uform_status_ok_k) return status;
        cJSON const *item;
        cJSON_ArrayForEach(item, vocab) {
            if (!cJSON_IsNumber(item) || item->valuedouble < 0 || item->valuedouble > INT32_MAX)
                return tokenizer_corrupt(loader, "a bad id for the vocabulary entry", item->string);
            status = tokenizer_piece_add(loader, pieces, item->string, (int32_t)item->valuedouble);
            if (status != uform_status_ok_k) return status;
        }
        return uform_status_ok_k;
    }
    if (!strcmp(kind, "Unigram")) {
        tokenizer->model = model_unigram_k;
        uform_unigram_t *model = &tokenizer->unigram;
        if (!cJSON_IsArray(vocab)) return tokenizer_corrupt(loader, "no array", "model.vocab");
        size_t count = (size_t)cJSON_GetArraySize(vocab);
        if (!count) return tokenizer_corrupt(loader, "an empty", "model.vocab");
        status = tokenizer_pieces_alloc(pieces, count, loader->file);
        if (status != uform_status_ok_k) return status;
        model->min_score = 1e300;
        cJSON const *item;
        cJSON_ArrayForEach(item, vocab) {
            cJSON const *piece = cJSON_GetArrayItem(item, 0), *score = cJSON_GetArrayItem(item, 1);
            if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2 || !cJSON_IsString(piece) || !cJSON_IsNumber(score))
                return tokenizer_corrupt(loader, "a vocabulary entry that is not [piece, score] in", "model.vocab");
            status = tokenizer_piece_add(loader, pieces, piece->valuestring, (int32_t)pieces->count);
            if (status != uform_status_ok_k) return status;
        }
        /* Each entry holds exactly one number, so the vocabulary's numbers are its scores, in order. */
        status = unigram_scores(loader, vocab, count, pieces->scores);
        if (status != uform_status_ok_k) return status;
        for (size_t k = 0; k < count; ++k)
            if (pieces->scores[k] < model->min_score) model->min_score = pieces->scores[k];
        loader->max_id = (int32_t)count - 1 > loader->max_id ? (int32_t)count - 1 : loader->max_id;
        cJSON const *unk_id = cJSON_GetObjectItemCaseSensitive(json, "unk_id");
        model->unk_id = -1;
        if (cJSON_IsNumber(unk_id)) {
            if (unk_id->valuedouble < 0 || unk_id->valuedouble >= (double)count)
                return tokenizer_corrupt(loader, "an id past the vocabulary in", "model.unk_id");
            model->unk_id = (int32_t)unk_id->valuedouble;
        }
        model->byte_fallback = tokenizer_json_flag(json, "byte_fallback", false);
        return uform_status_ok_k;
    }
    return uform_fail(uform_status_unsupported_k, "%s: the %s tokenizer model is not supported (WordPiece and Unigram are)",
                      loader->file, kind);
}

uform_status_t tokenizer_finish_unigram(uform_tokenizer_t *tokenizer, pieces_t *pieces) {
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

/** `vocab.txt`: one piece per line, its line number its id (as `tokenizers`' WordPiece::read_file);
 *  BERT's pipeline around it per `bert` (as transformers' BertTokenizer). */
uform_status_t tokenizer_open_vocab_txt(uform_tokenizer_t *tokenizer, loader_t *loader, char const *data, size_t size,
                                        uform_tokenizer_bert_t const *bert) {
    if (uform_utf8_invalid_offset(data, size) != size)
        return uform_fail(uform_status_corrupt_file_k, "%s: invalid UTF-8 at byte %zu", loader->file,
                          uform_utf8_invalid_offset(data, size));
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    pieces_t pieces = {0};
    uform_status_t status = tokenizer_pieces_alloc(&pieces, lines, loader->file);
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
        status = tokenizer_blob_add(loader, data + start, length, &pieces.offsets[i]);
        pieces.lengths[i] = (uint32_t)length;
        pieces.ids[i] = (int32_t)i;
        start = newline ? end + 1 : size;
    }
    free(points);
    if (status == uform_status_ok_k && !pieces.count) status = tokenizer_corrupt(loader, "no tokens in", "the file");
    if (status == uform_status_ok_k) {
        loader->max_id = (int32_t)pieces.count - 1;
        tokenizer->model = model_wordpiece_k;
        tokenizer->blob = loader->blob, tokenizer->blob_size = loader->blob_size;
        loader->blob = NULL;
        status = tokenizer_build_wordpiece(tokenizer, loader, &pieces, "##", "[UNK]", 100);
    }
    tokenizer_pieces_free(&pieces);
    if (status != uform_status_ok_k) return status;
    status = tokenizer_bert_pipeline(tokenizer, loader, bert);
    if (status == uform_status_ok_k && bert->lowercase_first) status = tokenizer_lowercase_first(tokenizer, loader);
    if (status != uform_status_ok_k) return status;
    uform_strmap_t const *words = &tokenizer->wordpiece.words;
    // The specials BertWordPieceTokenizer adds, where the vocabulary has them; the blob may move
    // while they are added, so the maps are re-pointed after.
    char const *names[] = {"[SEP]", "[CLS]", "[PAD]", "[MASK]", "[UNK]"};
    int32_t ids[5];
    for (size_t k = 0; k < 5; k++) ids[k] = uform_strmap_get(words, names[k], strlen(names[k]));
    loader->blob = tokenizer->blob, loader->blob_size = tokenizer->blob_size, loader->blob_capacity = tokenizer->blob_size + 1;
    tokenizer->blob = NULL;
    for (size_t k = 0; k < 5 && status == uform_status_ok_k; k++)
        if (ids[k] >= 0) status = tokenizer_add_added_token(tokenizer, loader, names[k], strlen(names[k]), ids[k], false, false);
    tokenizer->blob = loader->blob, tokenizer->blob_size = loader->blob_size;
    loader->blob = NULL;
    tokenizer->wordpiece.words.blob = tokenizer->wordpiece.continuations.blob = tokenizer->blob;
    tokenizer->pad_id = ids[2];
    return status;
}
