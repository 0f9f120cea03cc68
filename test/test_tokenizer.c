/**
 *  @file   test_tokenizer.c
 *  @brief  The tokenizers against Hugging Face `tokenizers` 0.23.3, id for id, on every text of
 *          test/tokenizer/corpus.bin.gz (made by test/tokenizer/make_fixtures.py): all-MiniLM-L6-v2
 *          from tokenizer.json and from vocab.txt alone, three trained WordPiece variants (every
 *          BertNormalizer branch), two trained Unigram tokenizers (NFKC + Metaspace; a normaliser
 *          sequence + byte fallback + prepend "first"), untruncated and truncated to 16 and 128; ten
 *          variants of them (make_variants.py: lstrip/rstrip added tokens, WhitespaceSplit, Strip,
 *          Prepend, Replace, RobertaProcessing, every Metaspace scheme, a bare model). Then
 *          the error paths (status and message), output capacity, and many threads on one tokenizer.
 */
#include "check.h"
#include "text/tokenizer.h"
#include "text/tokenizer_private.h" // `tokenizer_serde_f64`

#include <math.h> // `signbit`

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#ifndef UFORM_TOKENIZER_FIXTURES
#error "UFORM_TOKENIZER_FIXTURES must name test/tokenizer"
#endif

static char temp_dir[256];

/* Under ThreadSanitizer (10-20x slower) the corpus passes check every 4th text; the other builds
 * check every text. The threads test runs in full everywhere. */
#ifdef UFORM_TOKENIZER_TEXT_STRIDE
static size_t const text_stride = UFORM_TOKENIZER_TEXT_STRIDE;
#else
static size_t const text_stride = 1;
#endif

/** Reads a whole gzip file; exits when it cannot. */
static char *read_gz(char const *path, size_t *size) {
    gzFile file = gzopen(path, "rb");
    CHECK_FATAL(file != NULL);
    size_t capacity = 1 << 20, used = 0;
    char *data = malloc(capacity + 1);
    CHECK_FATAL(data != NULL);
    for (;;) {
        if (used == capacity) {
            capacity *= 2;
            data = realloc(data, capacity + 1);
            CHECK_FATAL(data != NULL);
        }
        int got = gzread(file, data + used, (unsigned)(capacity - used));
        CHECK_FATAL(got >= 0);
        if (got == 0) break;
        used += (size_t)got;
    }
    gzclose(file);
    data[used] = 0;
    *size = used;
    return data;
}

static void write_file(char const *path, char const *data, size_t size) {
    FILE *file = fopen(path, "wb");
    CHECK_FATAL(file != NULL);
    CHECK_FATAL(fwrite(data, 1, size, file) == size);
    fclose(file);
}

/** Decompresses fixture `name/file.gz` into `temp_dir/name/file`; returns the directory. */
static char const *unpack(char const *name, char const *file) {
    static char directory[512];
    char source[512], target[600];
    snprintf(source, sizeof source, "%s/%s/%s.gz", UFORM_TOKENIZER_FIXTURES, name, file);
    snprintf(directory, sizeof directory, "%s/%s", temp_dir, name);
    mkdir(directory, 0700);
    snprintf(target, sizeof target, "%s/%s", directory, file);
    size_t size;
    char *data = read_gz(source, &size);
    write_file(target, data, size);
    free(data);
    return directory;
}

typedef struct text_t {
    char const *data;
    size_t length;
} text_t;

static text_t *texts;
static size_t texts_count;
static char *corpus_data; // the texts point into it

static void load_corpus(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/corpus.bin.gz", UFORM_TOKENIZER_FIXTURES);
    size_t size;
    char *data = corpus_data = read_gz(path, &size);
    size_t capacity = 1 << 18;
    texts = malloc(capacity * sizeof(text_t));
    for (size_t at = 0; at < size;) {
        char *end;
        size_t length = strtoull(data + at, &end, 10);
        CHECK_FATAL(*end == '\n' && (size_t)(end + 1 - data) + length < size);
        if (texts_count == capacity) texts = realloc(texts, (capacity *= 2) * sizeof(text_t));
        texts[texts_count++] = (text_t){end + 1, length};
        at = (size_t)(end + 1 - data) + length + 1;
    }
}

static void print_text(text_t const *text) {
    fputc('"', stderr);
    for (size_t i = 0; i < text->length && i < 300; i++) {
        unsigned char c = (unsigned char)text->data[i];
        if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') fprintf(stderr, "\\x%02X", c);
        else fputc(c, stderr);
    }
    fprintf(stderr, "\"%s", text->length > 300 ? "..." : "");
}

static uint64_t read_varint(unsigned char const **cursor, unsigned char const *end) {
    uint64_t value = 0;
    for (unsigned shift = 0; *cursor < end && shift < 64; shift += 7) {
        unsigned char byte = *(*cursor)++;
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) return value;
    }
    CHECK_FATAL(!"a truncated varint in the expected ids");
    return 0;
}

/** The hash make_fixtures.py stores for the variants: FNV-1a over little-endian 32-bit ids, low bit set. */
static uint32_t ids_hash(int32_t const *ids, size_t count) {
    uint32_t h = 0x811C9DC5u;
    for (size_t i = 0; i < count; i++)
        for (unsigned k = 0; k < 4; k++) h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 0xFF)) * 0x01000193u;
    return h | 1u;
}

static void report(char const *label, size_t t, int32_t const *expected, size_t expected_count, uint32_t hash,
                   uform_status_t status, int32_t const *ours, size_t count) {
    fprintf(stderr, "%s: text %zu ", label, t);
    print_text(&texts[t]);
    if (expected) {
        fprintf(stderr, "\n  expected: %zu", expected_count);
        for (size_t k = 0; k < expected_count && k < 80; k++) fprintf(stderr, " %d", expected[k]);
    } else
        fprintf(stderr, "\n  expected: ids hashing to %08x (make_fixtures.py prints them)", hash);
    fprintf(stderr, "\n  ours (%s): %zu", uform_status_name(status), count);
    for (size_t k = 0; k < count && k < 80 && status == uform_status_ok_k; k++) fprintf(stderr, " %d", ours[k]);
    if (status != uform_status_ok_k) fprintf(stderr, " [%s]", uform_error_message());
    fprintf(stderr, "\n");
}

static bool check_invalid(uform_status_t status, uint64_t offset) {
    char message[64];
    snprintf(message, sizeof message, "invalid UTF-8 at byte %llu ", (unsigned long long)offset);
    return status == uform_status_invalid_argument_k && strstr(uform_error_message(), message);
}

/** Checks every text against the full ids in `expected_name` (varints, see make_fixtures.py), at
 *  `max_tokens` 0 (untruncated) or truncated: HF keeps the first ids and the two specials, which
 *  make_fixtures.py checks against enable_truncation on every text. Returns the mismatches. */
static size_t check_all(uform_tokenizer_t const *tokenizer, char const *label, char const *expected_name,
                        size_t max_tokens) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", UFORM_TOKENIZER_FIXTURES, expected_name);
    size_t size;
    char *data = read_gz(path, &size);
    unsigned char const *cursor = (unsigned char const *)data, *end = cursor + size;
    size_t capacity = 1 << 16, mismatches = 0, checked_ids = 0, errors = 0;
    int32_t *ours = malloc(capacity * sizeof(int32_t)), *expected = malloc(capacity * sizeof(int32_t));
    for (size_t t = 0; t < texts_count; t++) {
        uint64_t head = read_varint(&cursor, end);
        if (t % text_stride) { // skipped: read past its expected ids
            for (uint64_t k = head ? head - 1 : 1; k > 0; k--) read_varint(&cursor, end);
            continue;
        }
        size_t count = 0;
        uform_status_t status = uform_tokenizer_encode(tokenizer, texts[t].data, texts[t].length, max_tokens, ours,
                                                       capacity, &count);
        if (head == 0) {
            errors++;
            uint64_t offset = read_varint(&cursor, end);
            if (!check_invalid(status, offset) && ++mismatches <= 5) {
                fprintf(stderr, "%s: text %zu: expected invalid UTF-8 at byte %llu\n", label, t,
                        (unsigned long long)offset);
                report(label, t, NULL, 0, 0, status, ours, count);
            }
            continue;
        }
        size_t n = (size_t)head - 1;
        CHECK_FATAL(n <= capacity);
        for (size_t k = 0; k < n; k++) expected[k] = (int32_t)read_varint(&cursor, end);
        if (max_tokens && n > max_tokens) { // first ids, then the closing special
            expected[max_tokens - 1] = expected[n - 1];
            n = max_tokens;
        }
        checked_ids += n;
        bool ok = status == uform_status_ok_k && count == n && !memcmp(ours, expected, n * sizeof(int32_t));
        if (!ok && ++mismatches <= 5) report(label, t, expected, n, 0, status, ours, count);
    }
    CHECK(cursor == end);
    printf("%-34s %zu texts (%zu invalid UTF-8), %zu ids, %zu mismatches\n", label, texts_count / text_stride, errors,
           checked_ids, mismatches);
    free(ours), free(expected), free(data);
    return mismatches;
}

/** Checks every text against column `column` of `columns` hashes per text in variants.hashes.gz. */
static size_t check_hashes(uform_tokenizer_t const *tokenizer, char const *label, size_t column, size_t columns) {
    char path[512];
    snprintf(path, sizeof path, "%s/variants.hashes.gz", UFORM_TOKENIZER_FIXTURES);
    size_t size;
    unsigned char *data = (unsigned char *)read_gz(path, &size);
    CHECK_FATAL(size == texts_count * columns * 4);
    size_t capacity = 1 << 16, mismatches = 0, checked_ids = 0, errors = 0;
    int32_t *ours = malloc(capacity * sizeof(int32_t));
    for (size_t t = 0; t < texts_count; t += text_stride) {
        unsigned char const *at = data + (t * columns + column) * 4;
        uint32_t hash = (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
        size_t count = 0;
        uform_status_t status =
            uform_tokenizer_encode(tokenizer, texts[t].data, texts[t].length, 0, ours, capacity, &count);
        bool ok;
        if (hash == 0) {
            errors++;
            ok = status == uform_status_invalid_argument_k && strstr(uform_error_message(), "invalid UTF-8 at byte");
        } else {
            ok = status == uform_status_ok_k && count <= capacity && ids_hash(ours, count) == hash;
            checked_ids += count;
        }
        if (!ok && ++mismatches <= 5) report(label, t, NULL, 0, hash, status, ours, count);
    }
    printf("%-34s %zu texts (%zu invalid UTF-8), %zu ids, %zu mismatches\n", label, texts_count / text_stride, errors,
           checked_ids, mismatches);
    free(ours), free(data);
    return mismatches;
}

static uform_tokenizer_t *open_fixture(char const *name, char const *file) {
    uform_tokenizer_t *tokenizer = NULL;
    CHECK_STATUS(uform_tokenizer_open(unpack(name, file), NULL, &tokenizer), uform_status_ok_k);
    CHECK_FATAL(tokenizer != NULL);
    return tokenizer;
}

/** Opens a tokenizer.json written from `json`; returns the status. */
static uform_status_t open_json_text(char const *json, size_t length, uform_tokenizer_t **tokenizer) {
    char directory[512], path[600];
    snprintf(directory, sizeof directory, "%s/scratch", temp_dir);
    mkdir(directory, 0700);
    snprintf(path, sizeof path, "%s/tokenizer.json", directory);
    write_file(path, json, length);
    return uform_tokenizer_open(directory, NULL, tokenizer);
}

static void test_errors(void) {
    uform_tokenizer_t *tokenizer = (uform_tokenizer_t *)1;
    // Missing files.
    CHECK_STATUS(uform_tokenizer_open("/nonexistent/uform", NULL, &tokenizer), uform_status_system_error_k);
    CHECK_MESSAGE("/nonexistent/uform: neither tokenizer.json nor vocab.txt exists");
    CHECK(tokenizer == NULL);
    CHECK_STATUS(uform_tokenizer_open(NULL, NULL, &tokenizer), uform_status_invalid_argument_k);
    CHECK_MESSAGE("directory is NULL");
    CHECK_STATUS(uform_tokenizer_open("/tmp", NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("tokenizer is NULL");
    // Malformed and truncated JSON.
    char const *bad = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0,, }}}";
    CHECK_STATUS(open_json_text(bad, strlen(bad), &tokenizer), uform_status_corrupt_file_k);
    CHECK_MESSAGE("tokenizer.json: malformed JSON near byte 50"); // where cJSON gave up, after ",,"
    CHECK(tokenizer == NULL);
    char path[700];
    snprintf(path, sizeof path, "%s/minilm/tokenizer.json.gz", UFORM_TOKENIZER_FIXTURES);
    size_t size;
    char *minilm = read_gz(path, &size);
    CHECK_STATUS(open_json_text(minilm, size / 2, &tokenizer), uform_status_corrupt_file_k);
    CHECK_MESSAGE("malformed JSON near byte");
    CHECK_STATUS(open_json_text(minilm, 0, &tokenizer), uform_status_corrupt_file_k);
    CHECK_MESSAGE("malformed JSON near byte 0");
    free(minilm);
    /* Past cJSON's nesting limit: named as such (as configs are), not as "malformed". */
    size_t const depth = 5000;
    char *deep = malloc(2 * depth + 1);
    CHECK(deep != NULL);
    memset(deep, '[', depth), memset(deep + depth, ']', depth), deep[2 * depth] = '\0';
    CHECK_STATUS(open_json_text(deep, 2 * depth, &tokenizer), uform_status_corrupt_file_k);
    CHECK_MESSAGE("tokenizer.json: JSON nested deeper than 1000 levels, at byte");
    CHECK(tokenizer == NULL);
    free(deep);
    // Well-formed but wrong.
    struct {
        char const *json, *message;
        uform_status_t status;
    } cases[] = {
        {"[1, 2]", "not an object: \"the document\"", uform_status_corrupt_file_k},
        {"{}", "no object \"model\"", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
         "the BPE tokenizer model is not supported (WordPiece and Unigram are)", uform_status_unsupported_k},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": [1]}}", "no object \"model.vocab\"", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": -1}}}", "a bad id for the vocabulary entry \"a\"",
         uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "an empty \"model.vocab\"", uform_status_corrupt_file_k},
        /* HF keeps the piece "a\u0000b" whole; cJSON would cut it to "a", so it is refused. */
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\\u0000b\": 0, \"a\": 1}}}",
         "tokenizer.json: a string holds U+0000 (the escape at byte 44)", uform_status_unsupported_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]], \"unk_id\": 5}}",
         "an id past the vocabulary in \"model.unk_id\"", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\"]]}}", "not [piece, score]", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"normalizer\": {\"type\": \"Precompiled\", "
         "\"precompiled_charsmap\": \"\"}}",
         "the Precompiled normalizer is not supported", uform_status_unsupported_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"normalizer\": {\"type\": \"Replace\", "
         "\"pattern\": {\"Regex\": \" +\"}, \"content\": \" \"}}",
         "Replace normalizer with a Regex pattern is not supported", uform_status_unsupported_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         "the ByteLevel pre-tokenizer is not supported", uform_status_unsupported_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
         "\"replacement\": \"ab\"}}",
         "not one character: \"pre_tokenizer.replacement\"", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"post_processor\": {\"type\": "
         "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\"}}], \"special_tokens\": {}}}",
         "no ids for the special token \"<s>\"", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"normalizer\": {\"no type\": 1}}",
         "no string \"type\" in \"normalizer\"", uform_status_corrupt_file_k},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, \"added_tokens\": [{\"id\": 0, \"content\": "
         "\"a\", \"special\": false, \"normalized\": true}]}",
         "the added token \"a\" is matched after normalisation", uform_status_unsupported_k},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tokenizer = (uform_tokenizer_t *)1;
        uform_status_t status = open_json_text(cases[i].json, strlen(cases[i].json), &tokenizer);
        if (status != cases[i].status || !strstr(uform_error_message(), cases[i].message)) {
            fprintf(stderr, "case %zu: %s \"%s\", expected %s \"%s\"\n", i, uform_status_name(status),
                    uform_error_message(), uform_status_name(cases[i].status), cases[i].message);
            ++check_failures;
        }
        CHECK(tokenizer == NULL);
    }
    // A Unigram model without unk_id: fine until a character has no piece.
    char const *no_unk = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1], [\"b\", -2]]}}";
    CHECK_STATUS(open_json_text(no_unk, strlen(no_unk), &tokenizer), uform_status_ok_k);
    int32_t ids[8];
    size_t count = 0;
    CHECK_STATUS(uform_tokenizer_encode(tokenizer, "ab", 2, 0, ids, 8, &count), uform_status_ok_k);
    CHECK(count == 2 && ids[0] == 0 && ids[1] == 1);
    CHECK(uform_tokenizer_vocab_size(tokenizer) == 2);
    CHECK_STATUS(uform_tokenizer_encode(tokenizer, "ac", 2, 0, ids, 8, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("has no unk_id");
    uform_tokenizer_free(tokenizer);
    // A tokenizer.json of more values than any real one (cJSON would spend ~80 bytes on each): refused
    // before it is parsed. {"model": {"type": "WordPiece", "vocab": {}}, "x": [0,0,...]} of 4Mi + 1 values.
    {
        size_t const zeros = ((size_t)4 << 20) - 5; // counted: 1 + the commas + the brackets and braces
        char *big = malloc(2 * zeros + 128);
        CHECK_FATAL(big != NULL);
        size_t at = (size_t)sprintf(big, "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, \"x\": [");
        for (size_t i = 0; i < zeros; ++i) big[at++] = '0', big[at++] = ',';
        big[at - 1] = ']', big[at++] = '}';
        CHECK_STATUS(open_json_text(big, at, &tokenizer), uform_status_corrupt_file_k);
        CHECK_MESSAGE("up to 4194305 JSON values, more than the 4194304 a tokenizer may hold");
        CHECK(tokenizer == NULL);
        free(big);
    }
    // vocab.txt without [CLS].
    char directory[512];
    snprintf(directory, sizeof directory, "%s/vocab_no_cls", temp_dir);
    mkdir(directory, 0700);
    snprintf(path, sizeof path, "%s/vocab.txt", directory);
    write_file(path, "[PAD]\n[UNK]\nhello\n", 18);
    CHECK_STATUS(uform_tokenizer_open(directory, NULL, &tokenizer), uform_status_corrupt_file_k);
    CHECK_MESSAGE("vocab.txt: no [CLS] or [SEP] token");
    write_file(path, "[PAD]\n\xff\n", 8);
    CHECK_STATUS(uform_tokenizer_open(directory, NULL, &tokenizer), uform_status_corrupt_file_k);
    CHECK_MESSAGE("vocab.txt: invalid UTF-8 at byte 6");
    // A vocab.txt of BERT's specials and a few words, cased and lower-cased.
    char const *vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\n##s  \n";
    write_file(path, vocab, strlen(vocab));
    CHECK_STATUS(uform_tokenizer_open(directory, NULL, &tokenizer), uform_status_ok_k);
    CHECK_STATUS(uform_tokenizer_encode(tokenizer, "HELLOs Hello [MASK]x", 20, 0, ids, 8, &count), uform_status_ok_k);
    CHECK(count == 7 && ids[0] == 2 && ids[1] == 5 && ids[2] == 7 && ids[3] == 5 && ids[4] == 4 && ids[5] == 1 &&
          ids[6] == 3);
    CHECK(uform_tokenizer_pad_id(tokenizer) == 0 && uform_tokenizer_vocab_size(tokenizer) == 8);
    uform_tokenizer_free(tokenizer);
    uform_tokenizer_bert_t cased = UFORM_TOKENIZER_BERT_DEFAULTS;
    cased.lowercase = 0;
    CHECK_STATUS(uform_tokenizer_open(directory, &cased, &tokenizer), uform_status_ok_k);
    CHECK_STATUS(uform_tokenizer_encode(tokenizer, "Hellos hello", 12, 0, ids, 8, &count), uform_status_ok_k);
    CHECK(count == 5 && ids[1] == 6 && ids[2] == 7 && ids[3] == 5);
    uform_tokenizer_free(tokenizer);
}

static void test_encode_arguments(uform_tokenizer_t const *minilm) {
    int32_t ids[64];
    size_t count = 99;
    CHECK_STATUS(uform_tokenizer_encode(NULL, "a", 1, 0, ids, 64, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("tokenizer is NULL");
    CHECK_STATUS(uform_tokenizer_encode(minilm, NULL, 1, 0, ids, 64, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("text is NULL");
    CHECK_STATUS(uform_tokenizer_encode(minilm, "a", 1, 0, NULL, 64, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("ids is NULL");
    CHECK_STATUS(uform_tokenizer_encode(minilm, "a", 1, 0, ids, 64, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("count is NULL");
    CHECK_STATUS(uform_tokenizer_encode(minilm, "a", 1, 1, ids, 64, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("max_tokens 1 leaves no room for the 2 special tokens");
    CHECK_STATUS(uform_tokenizer_encode(minilm, "ab\xc3(", 4, 0, ids, 64, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("text: invalid UTF-8 at byte 2 (0xC3)");
    CHECK(count == 0);
    // NULL text of length 0 is the empty text; NULL ids with capacity 0 only counts.
    CHECK_STATUS(uform_tokenizer_encode(minilm, NULL, 0, 0, ids, 64, &count), uform_status_ok_k);
    CHECK(count == 2 && ids[0] == 101 && ids[1] == 102);
    CHECK_STATUS(uform_tokenizer_encode(minilm, "hello world", 11, 0, NULL, 0, &count), uform_status_ok_k);
    CHECK(count == 4);
    // A short buffer gets the first ids and the full count.
    ids[2] = -7;
    CHECK_STATUS(uform_tokenizer_encode(minilm, "hello world", 11, 0, ids, 2, &count), uform_status_ok_k);
    CHECK(count == 4 && ids[0] == 101 && ids[1] == 7592 && ids[2] == -7);
    // Truncation keeps the specials: exactly max_tokens ids.
    CHECK_STATUS(uform_tokenizer_encode(minilm, "hello world", 11, 3, ids, 64, &count), uform_status_ok_k);
    CHECK(count == 3 && ids[0] == 101 && ids[1] == 7592 && ids[2] == 102);
    CHECK_STATUS(uform_tokenizer_encode(minilm, "hello world", 11, 2, ids, 64, &count), uform_status_ok_k);
    CHECK(count == 2 && ids[0] == 101 && ids[1] == 102);
    CHECK(uform_tokenizer_pad_id(minilm) == 0 && uform_tokenizer_vocab_size(minilm) == 30522);
    CHECK(uform_tokenizer_pad_id(NULL) == 0 && uform_tokenizer_vocab_size(NULL) == 0);
    uform_tokenizer_free(NULL);
}

/** A long text (past the short-text buffer bounds): BERT's pre-tokenizer splits on spaces and the
 *  normaliser works per code point, so MiniLM's ids for texts joined by spaces are the texts' ids
 *  joined, specials once. Checked on the first 20,000 valid texts, joined, and truncated. */
static void test_long_text(uform_tokenizer_t const *minilm) {
    size_t joined_capacity = 1 << 24, joined_length = 0, expected_count = 1;
    char *joined = malloc(joined_capacity);
    int32_t *expected = malloc((1 << 22) * sizeof(int32_t)), *ours = malloc((1 << 22) * sizeof(int32_t));
    int32_t one[4096];
    expected[0] = 101;
    for (size_t t = 0, used = 0; t < texts_count && used < 20000; t++) {
        size_t count = 0;
        if (uform_tokenizer_encode(minilm, texts[t].data, texts[t].length, 0, one, 4096, &count) != uform_status_ok_k)
            continue;
        if (joined_length + texts[t].length + 1 > joined_capacity || expected_count + count > (1 << 22)) break;
        memcpy(joined + joined_length, texts[t].data, texts[t].length);
        joined_length += texts[t].length;
        joined[joined_length++] = ' ';
        memcpy(expected + expected_count, one + 1, (count - 2) * sizeof(int32_t));
        expected_count += count - 2;
        used++;
    }
    expected[expected_count++] = 102;
    size_t count = 0;
    CHECK_STATUS(uform_tokenizer_encode(minilm, joined, joined_length, 0, ours, 1 << 22, &count), uform_status_ok_k);
    CHECK(count == expected_count && !memcmp(ours, expected, count * sizeof(int32_t)));
    printf("long text: %zu bytes, %zu ids\n", joined_length, count);
    size_t const limits[] = {2, 3, 512, 100000};
    for (size_t k = 0; k < 4; k++) {
        CHECK_STATUS(uform_tokenizer_encode(minilm, joined, joined_length, limits[k], ours, 1 << 22, &count),
                     uform_status_ok_k);
        size_t want = limits[k] < expected_count ? limits[k] : expected_count;
        CHECK(count == want && !memcmp(ours, expected, (count - 1) * sizeof(int32_t)) && ours[count - 1] == 102);
    }
    free(joined), free(expected), free(ours);
}

/** Many added tokens, matched leftmost-longest in one walk down their trie: 20,000 tokens "ab0" ..
 *  "ab19999" over a Unigram of single letters and digits (the scan compared every added token at
 *  every byte: 18 s for a 200 kB text), the longest of nested ones ("ab1", "ab19", "ab199"), the first of
 *  two with one content, a token at the text's end and one cut by it; then an added token past the
 *  length cap (UNSUPPORTED, named). */
static void test_many_added_tokens(void) {
    enum { added = 20000 };
    size_t capacity = 64 * (size_t)added + 4096, length = 0;
    char *json = malloc(capacity);
    CHECK_FATAL(json != NULL);
    length += (size_t)snprintf(json + length, capacity - length, "{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, "
                               "\"vocab\": [[\"<unk>\", 0]");
    char const *letters = "ab0123456789 x";
    for (size_t k = 0; letters[k]; k++)
        length += (size_t)snprintf(json + length, capacity - length, ", [\"%c\", -1]", letters[k]);
    length += (size_t)snprintf(json + length, capacity - length, "]}, \"added_tokens\": [");
    /* Written as ids 100 + k, numbered 15 + k as tokenizers does (past the 15 pieces); then a second
     * "ab7" that must not win. */
    for (size_t k = 0; k < added; k++)
        length += (size_t)snprintf(json + length, capacity - length, "%s{\"id\": %zu, \"content\": \"ab%zu\", \"special\": true}",
                                   k ? ", " : "", 100 + k, k);
    length += (size_t)snprintf(json + length, capacity - length,
                               ", {\"id\": 99, \"content\": \"ab7\", \"special\": true}]}");
    CHECK_FATAL(length < capacity);
    uform_tokenizer_t *tokenizer = NULL;
    CHECK_STATUS(open_json_text(json, length, &tokenizer), uform_status_ok_k);
    if (tokenizer) {
        int32_t ids[64];
        size_t count = 0;
        char const *text = "xab199ab19xab1ab7ab19999ab";
        CHECK_STATUS(uform_tokenizer_encode(tokenizer, text, strlen(text), 0, ids, 64, &count), uform_status_ok_k);
        /* x | ab199 | ab19 | x | ab1 | ab7 (the first of its two ids) | ab19999 | a b */
        int32_t const expected[] = {14, 15 + 199, 15 + 19, 14, 15 + 1, 15 + 7, 15 + 19999, 1, 2};
        CHECK(count == sizeof expected / sizeof expected[0] && !memcmp(ids, expected, sizeof expected));
        /* A long text dense with added tokens: every one found (ids only, no counts of time). */
        size_t const repeats = 50000;
        char *long_text = malloc(repeats * 8 + 16);
        int32_t *long_ids = malloc(repeats * 2 * sizeof(int32_t));
        CHECK_FATAL(long_text && long_ids);
        size_t used = 0;
        for (size_t r = 0; r < repeats; r++) used += (size_t)snprintf(long_text + used, 16, "ab%zux", r % added);
        CHECK_STATUS(uform_tokenizer_encode(tokenizer, long_text, used, 0, long_ids, repeats * 2, &count),
                     uform_status_ok_k);
        bool all = count == 2 * repeats;
        for (size_t r = 0; all && r < repeats; r++)
            all = long_ids[2 * r] == (int32_t)(15 + r % added) && long_ids[2 * r + 1] == 14;
        CHECK(all);
        free(long_text), free(long_ids);
        uform_tokenizer_free(tokenizer);
    }
    /* An added token past TOKENIZER_ADDED_MAX_BYTES (256). */
    length = (size_t)snprintf(json, capacity, "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0]]}, "
                              "\"added_tokens\": [{\"id\": 1, \"content\": \"");
    memset(json + length, 'a', 257), length += 257;
    length += (size_t)snprintf(json + length, capacity - length, "\", \"special\": true}]}");
    tokenizer = (uform_tokenizer_t *)1;
    CHECK_STATUS(open_json_text(json, length, &tokenizer), uform_status_unsupported_k);
    CHECK_MESSAGE("has 257 bytes, more than the 256 this engine matches");
    CHECK(tokenizer == NULL);
    free(json);
}

/** Makes cJSON print each Unigram score with the digits it was read from (the shortest that give
 *  its double back, as `tokenizers` and Python write them), not its 15 or 17: the engine reads a
 *  score from its digits as serde_json does, which other digits can move by an ULP. */
static void keep_score_digits(cJSON *root) {
    cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "vocab");
    if (!cJSON_IsArray(vocab)) return;
    cJSON *entry;
    cJSON_ArrayForEach(entry, vocab) {
        cJSON const *score = cJSON_GetArrayItem(entry, 1);
        if (!cJSON_IsNumber(score)) continue;
        char digits[40];
        for (int precision = 1; precision <= 17; ++precision) {
            snprintf(digits, sizeof digits, "%.*g", precision, score->valuedouble);
            if (strtod(digits, NULL) == score->valuedouble) break;
        }
        CHECK_FATAL(cJSON_ReplaceItemInArray(entry, 1, cJSON_CreateRaw(digits)));
    }
}

/** A base fixture's tokenizer.json with the top-level keys of `patch` replaced (or added), as
 *  make_variants.py and make_edge_cases.py patch them through Python. */
static char *patched_json(char const *base, cJSON const *patch) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s/tokenizer.json.gz", UFORM_TOKENIZER_FIXTURES, base);
    size_t size;
    char *base_text = read_gz(path, &size);
    cJSON *root = cJSON_Parse(base_text);
    free(base_text);
    CHECK_FATAL(root != NULL);
    cJSON const *item;
    cJSON_ArrayForEach(item, patch) {
        cJSON *copy = cJSON_Duplicate(item, 1);
        if (cJSON_GetObjectItemCaseSensitive(root, item->string))
            cJSON_ReplaceItemInObjectCaseSensitive(root, item->string, copy);
        else
            cJSON_AddItemToObject(root, item->string, copy);
    }
    keep_score_digits(root);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    CHECK_FATAL(json != NULL);
    return json;
}

/** The texts of make_edge_cases.py (edge_cases.json) where the fuzzer found the engine apart from
 *  HF: Unigram scores tied to the last bit, the composition exclusions after Unicode 3.0, a Replace
 *  of two code points at the start before Metaspace's "first". Each case's ids, exactly. */
static void test_edge_cases(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/edge_cases.json", UFORM_TOKENIZER_FIXTURES);
    FILE *file = fopen(path, "rb");
    CHECK_FATAL(file != NULL);
    static char spec_text[1 << 16];
    size_t spec_size = fread(spec_text, 1, sizeof spec_text - 1, file);
    fclose(file);
    spec_text[spec_size] = 0;
    cJSON *spec = cJSON_Parse(spec_text);
    CHECK_FATAL(spec != NULL);
    size_t cases = 0, mismatches = 0;
    cJSON const *edge;
    cJSON_ArrayForEach(edge, cJSON_GetObjectItem(spec, "cases")) {
        char *json = patched_json(cJSON_GetObjectItem(edge, "base")->valuestring, cJSON_GetObjectItem(edge, "patch"));
        uform_tokenizer_t *tokenizer = NULL;
        CHECK_STATUS(uform_tokenizer_open_json(json, strlen(json), "edge", &tokenizer), uform_status_ok_k);
        free(json);
        if (!tokenizer) continue;
        char const *text = cJSON_GetObjectItem(edge, "text")->valuestring;
        cJSON const *expected = cJSON_GetObjectItem(edge, "ids");
        int32_t ids[64];
        size_t count = 0;
        CHECK_OK(uform_tokenizer_encode(tokenizer, text, strlen(text), 0, ids, 64, &count));
        bool same = count == (size_t)cJSON_GetArraySize(expected);
        for (size_t i = 0; same && i < count; ++i) same = ids[i] == (int32_t)cJSON_GetArrayItem(expected, (int)i)->valuedouble;
        if (!same && ++mismatches <= 5) {
            fprintf(stderr, "edge case %zu (%s): %zu ids:", cases, cJSON_GetObjectItem(edge, "base")->valuestring, count);
            for (size_t i = 0; i < count; ++i) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n");
        }
        ++cases;
        uform_tokenizer_free(tokenizer);
    }
    printf("edge cases: %zu texts, %zu mismatches\n", cases, mismatches);
    CHECK(cases >= 50 && mismatches == 0);
    cJSON_Delete(spec);

    /* The scores themselves: serde_json's reading, 1 ULP from strtod's on these (the unigram
     * fixture's), and its overflow rules. */
    struct { char const *text; double serde, nearest; } const scores[] = {
        {"-3.7162345838543427", -0x1.dbad9328f593bp+1, -0x1.dbad9328f593cp+1},
        {"-7.5365637370361735", -0x1.e2570f6db28ddp+2, -0x1.e2570f6db28dep+2},
        {"-7.5691959739961145", -0x1.e46db4f35500fp+2, -0x1.e46db4f35500ep+2},
        {"-10", -10.0, -10.0},
        {"-0", -0.0, -0.0},
        {"0.5e1", 5.0, 5.0},
        {"1E-400", 0.0, 0.0},
        /* 20 digits fit u64, the 4 past it only count: 12345678901234567890 x 1e4, not the nearest */
        {"123456789012345678901234", 0x1.a249b1f10a06cp+76, 0x1.a249b1f10a06dp+76},
        /* the fraction fills u64 (2^64 - 1, which converts to 2^64), the last digits dropped */
        {"1.8446744073709551615999", 0x1.d83c94fb6d2acp+0, 0x1.d83c94fb6d2acp+0},
        {"0e99999999999", 0.0, 0.0},
    };
    for (size_t i = 0; i < sizeof scores / sizeof *scores; ++i) {
        double value = 1;
        CHECK(tokenizer_serde_f64(scores[i].text, strlen(scores[i].text), &value) && value == scores[i].serde &&
              signbit(value) == signbit(scores[i].serde));
        CHECK(strtod(scores[i].text, NULL) == scores[i].nearest);
    }
    double value;
    CHECK(!tokenizer_serde_f64("1e400", 5, &value) && !tokenizer_serde_f64("2e99999999999", 13, &value));
}

/** The variants of make_variants.py (variants.json): a base tokenizer.json with top-level keys
 *  replaced, here through cJSON as there through Python; HF's ids as hashes on every stride-th text,
 *  untruncated and truncated. */
static void test_variants(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/variants.json", UFORM_TOKENIZER_FIXTURES);
    FILE *file = fopen(path, "rb");
    CHECK_FATAL(file != NULL);
    char spec_text[1 << 16];
    size_t spec_size = fread(spec_text, 1, sizeof spec_text - 1, file);
    fclose(file);
    spec_text[spec_size] = 0;
    cJSON *spec = cJSON_Parse(spec_text);
    CHECK_FATAL(spec != NULL);
    size_t stride = (size_t)cJSON_GetObjectItem(spec, "stride")->valuedouble;
    size_t truncate = (size_t)cJSON_GetObjectItem(spec, "truncate")->valuedouble;
    size_t chosen = (texts_count + stride - 1) / stride;
    snprintf(path, sizeof path, "%s/variants_ids.hashes.gz", UFORM_TOKENIZER_FIXTURES);
    size_t size;
    unsigned char *hashes = (unsigned char *)read_gz(path, &size);
    cJSON const *variants = cJSON_GetObjectItem(spec, "variants");
    CHECK_FATAL(size == (size_t)cJSON_GetArraySize(variants) * 2 * chosen * 4);
    int32_t *ours = malloc((1 << 16) * sizeof(int32_t));
    size_t k = 0;
    cJSON const *variant;
    cJSON_ArrayForEach(variant, variants) {
        char const *name = cJSON_GetObjectItem(variant, "name")->valuestring;
        char *json = patched_json(cJSON_GetObjectItem(variant, "base")->valuestring, cJSON_GetObjectItem(variant, "patch"));
        uform_tokenizer_t *tokenizer = NULL;
        CHECK_STATUS(uform_tokenizer_open_json(json, strlen(json), name, &tokenizer), uform_status_ok_k);
        free(json);
        if (!tokenizer) continue;
        for (size_t pass = 0; pass < 2; pass++, k++) {
            size_t mismatches = 0, max_tokens = pass ? truncate : 0;
            for (size_t c = 0; c < chosen; c++) {
                text_t const *text = &texts[c * stride];
                unsigned char const *at = hashes + (k * chosen + c) * 4;
                uint32_t hash = (uint32_t)at[0] | (uint32_t)at[1] << 8 | (uint32_t)at[2] << 16 | (uint32_t)at[3] << 24;
                size_t count = 0;
                uform_status_t status =
                    uform_tokenizer_encode(tokenizer, text->data, text->length, max_tokens, ours, 1 << 16, &count);
                bool ok = hash ? status == uform_status_ok_k && ids_hash(ours, count) == hash
                               : status == uform_status_invalid_argument_k;
                if (!ok && ++mismatches <= 3) report(name, c * stride, NULL, 0, hash, status, ours, count);
            }
            printf("%-34s %zu texts, max_tokens %zu, %zu mismatches\n", name, chosen, max_tokens, mismatches);
            CHECK(mismatches == 0);
        }
        uform_tokenizer_free(tokenizer);
    }
    free(ours), free(hashes);
    cJSON_Delete(spec);
}

typedef struct worker_t {
    uform_tokenizer_t const *tokenizer;
    size_t first, step, mismatches;
} worker_t;

/** Each thread encodes a strided share of the corpus twice: into a large and a tight buffer. */
static void *worker(void *argument) {
    worker_t *w = argument;
    int32_t ids[512], again[512];
    for (size_t t = w->first; t < texts_count; t += w->step) {
        size_t count = 0, count2 = 0;
        uform_status_t a = uform_tokenizer_encode(w->tokenizer, texts[t].data, texts[t].length, 128, ids, 512, &count);
        uform_status_t b = uform_tokenizer_encode(w->tokenizer, texts[t].data, texts[t].length, 128, again, 512, &count2);
        if (a != b || count != count2 || memcmp(ids, again, count * sizeof(int32_t))) w->mismatches++;
    }
    return NULL;
}

static void test_threads(uform_tokenizer_t const *tokenizer) {
    enum { threads = 4 };
    pthread_t handles[threads];
    worker_t workers[threads];
    for (size_t i = 0; i < threads; i++) {
        workers[i] = (worker_t){tokenizer, i, threads * 7, 0};
        CHECK_FATAL(pthread_create(&handles[i], NULL, worker, &workers[i]) == 0);
    }
    for (size_t i = 0; i < threads; i++) {
        pthread_join(handles[i], NULL);
        CHECK(workers[i].mismatches == 0);
    }
}

static void remove_tree(char const *path) {
    char command[600];
    snprintf(command, sizeof command, "rm -rf '%s'", path);
    if (system(command) != 0) fprintf(stderr, "could not remove %s\n", path);
}

/** UForm3 towers' truncation (`uform_tokenizer_use_processor_truncation`): tokenizer.json's own
 *  max_length first, with or without the processor's slice (RoBERTa positions keep the specials within
 *  the context; a probe found them ignoring the JSON's max_length), and a default prompt put first. */
static void test_processor_truncation_and_prompt(void) {
    char const *json = "{\"truncation\": {\"direction\": \"Right\", \"max_length\": 4, \"strategy\": \"LongestFirst\", "
                       "\"stride\": 0}, \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}, "
                       "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", "
                       "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", "
                       "\"type_id\": 0}}], \"special_tokens\": {\"[CLS]\": {\"id\": \"[CLS]\", \"ids\": [2], \"tokens\": [\"[CLS]\"]}, "
                       "\"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [3], \"tokens\": [\"[SEP]\"]}}}, \"model\": {\"type\": \"WordPiece\", "
                       "\"unk_token\": \"[UNK]\", \"continuing_subword_prefix\": \"##\", \"max_input_chars_per_word\": 100, "
                       "\"vocab\": {\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 2, \"[SEP]\": 3, \"a\": 4, \"b\": 5, \"c\": 6, \"q:\": 7}}}";
    for (int slice = 0; slice < 2; ++slice) {
        uform_tokenizer_t *tokenizer = NULL;
        CHECK_OK(uform_tokenizer_open_json(json, strlen(json), "truncation", &tokenizer));
        if (!tokenizer) continue;
        CHECK_OK(uform_tokenizer_use_processor_truncation(tokenizer, "truncation", slice == 1));
        int32_t ids[16];
        size_t count = 0;
        /* The JSON's max_length 4 keeps [CLS] a b [SEP] whatever the context (64 here). */
        CHECK_OK(uform_tokenizer_encode(tokenizer, "a b c a b", 9, 64, ids, 16, &count));
        CHECK(count == 4 && ids[0] == 2 && ids[1] == 4 && ids[2] == 5 && ids[3] == 3);
        /* A context of 3: the slice cuts [SEP] off ([CLS] a b); RoBERTa keeps it ([CLS] a [SEP]). */
        CHECK_OK(uform_tokenizer_encode(tokenizer, "a b c a b", 9, 3, ids, 16, &count));
        CHECK(count == 3 && ids[0] == 2 && ids[1] == 4 && ids[2] == (slice ? 5 : 3));
        /* A prompt goes first and counts toward the truncation. */
        CHECK_OK(uform_tokenizer_set_prompt(tokenizer, "q: "));
        CHECK_OK(uform_tokenizer_encode(tokenizer, "c b", 3, 64, ids, 16, &count));
        CHECK(count == 4 && ids[0] == 2 && ids[1] == 7 && ids[2] == 6 && ids[3] == 3);
        CHECK_STATUS(uform_tokenizer_set_prompt(tokenizer, "q\xC3"), uform_status_corrupt_file_k);
        CHECK_MESSAGE("the default prompt: invalid UTF-8 at byte 1");
        uform_tokenizer_free(tokenizer);
    }
}

/** Added tokens with rstrip: HF finds every match in the raw text, then widens each, so a token inside
 *  the whitespace an earlier rstrip took still matches (the engine used to resume after the widened
 *  end: "a\n\nb" gave one "\n"). Expected ids from tokenizers 0.23.3 on this file. */
static void test_rstrip_then_match(void) {
    char const *json = "{\"added_tokens\": [{\"id\": 5, \"content\": \"<mask>\", \"rstrip\": true, \"special\": true}, "
                       "{\"id\": 6, \"content\": \"\\n\", \"rstrip\": true, \"special\": true}, "
                       "{\"id\": 8, \"content\": \" <nl>\", \"special\": true}], \"normalizer\": null, "
                       "\"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}, \"post_processor\": {\"type\": \"TemplateProcessing\", "
                       "\"single\": [{\"SpecialToken\": {\"id\": \"[CLS]\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
                       "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"[SEP]\", \"type_id\": 0}}], \"special_tokens\": {\"[CLS]\": "
                       "{\"id\": \"[CLS]\", \"ids\": [1], \"tokens\": [\"[CLS]\"]}, \"[SEP]\": {\"id\": \"[SEP]\", \"ids\": [2], "
                       "\"tokens\": [\"[SEP]\"]}}}, \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", "
                       "\"continuing_subword_prefix\": \"##\", \"max_input_chars_per_word\": 100, \"vocab\": {\"[UNK]\": 0, "
                       "\"[CLS]\": 1, \"[SEP]\": 2, \"a\": 3, \"b\": 4, \"<mask>\": 5, \"\\n\": 6, \"<nl>\": 7}}}";
    struct {
        char const *text;
        int32_t ids[6];
    } const cases[] = {{"a <mask> <nl> b", {1, 3, 5, 8, 4, 2}}, {"a\n\nb", {1, 3, 6, 6, 4, 2}},
                       {"a\n \n b", {1, 3, 6, 6, 4, 2}}, {"a <mask>\n b", {1, 3, 5, 6, 4, 2}}};
    uform_tokenizer_t *tokenizer = NULL;
    CHECK_OK(uform_tokenizer_open_json(json, strlen(json), "rstrip", &tokenizer));
    for (size_t k = 0; tokenizer && k < sizeof(cases) / sizeof(cases[0]); ++k) {
        int32_t ids[16];
        size_t count = 0;
        CHECK_OK(uform_tokenizer_encode(tokenizer, cases[k].text, strlen(cases[k].text), 0, ids, 16, &count));
        CHECK(count == 6 && !memcmp(ids, cases[k].ids, sizeof(cases[k].ids)));
    }
    uform_tokenizer_free(tokenizer);
    /* Added tokens' ids as tokenizers assigns them, not as the JSON writes them: " <nl>" written as 3
     * is still 8 (the next past the 8 pieces), "b" written as 9 is the vocabulary's 4. */
    char renumbered[2048];
    char const *from = strstr(json, "\"id\": 8"), *end = strstr(json, "], \"normalizer\"");
    CHECK_FATAL(from && end && strlen(json) + 64 < sizeof renumbered);
    snprintf(renumbered, sizeof renumbered, "%.*s\"id\": 3%.*s, {\"id\": 9, \"content\": \"b\", \"special\": true}%s",
             (int)(from - json), json, (int)(end - from - 7), from + 7, end);
    tokenizer = NULL;
    CHECK_OK(uform_tokenizer_open_json(renumbered, strlen(renumbered), "renumbered", &tokenizer));
    if (tokenizer) {
        int32_t ids[16], expected[] = {1, 4, 8, 2};
        size_t count = 0;
        CHECK_OK(uform_tokenizer_encode(tokenizer, "b <nl>", 6, 0, ids, 16, &count));
        CHECK(count == 4 && !memcmp(ids, expected, sizeof expected));
        CHECK(uform_tokenizer_vocab_size(tokenizer) == 9);
    }
    uform_tokenizer_free(tokenizer);
    /* A Unigram list's size counts a repeated piece: "<new>" is 4 past <unk> a b a (and "a" the last 3). */
    char const *unigram = "{\"added_tokens\": [{\"id\": 99, \"content\": \"<new>\", \"special\": true}], \"model\": "
                          "{\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0], [\"a\", -1], [\"b\", -1], "
                          "[\"a\", -2]]}}";
    tokenizer = NULL;
    CHECK_OK(uform_tokenizer_open_json(unigram, strlen(unigram), "unigram", &tokenizer));
    if (tokenizer) {
        int32_t ids[16], expected[] = {3, 4, 3};
        size_t count = 0;
        CHECK_OK(uform_tokenizer_encode(tokenizer, "a<new>a", 7, 0, ids, 16, &count));
        CHECK(count == 3 && !memcmp(ids, expected, sizeof expected));
        CHECK(uform_tokenizer_vocab_size(tokenizer) == 5);
    }
    uform_tokenizer_free(tokenizer);
}

int main(void) {
    snprintf(temp_dir, sizeof temp_dir, "%s/uform_tokenizer_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    CHECK_FATAL(mkdtemp(temp_dir) != NULL);
    load_corpus();
    CHECK_FATAL(texts_count >= 100000);
    test_processor_truncation_and_prompt();
    test_rstrip_then_match();

    struct {
        char const *name, *file, *expected;
        size_t hash_column; // in variants.hashes.gz, when `expected` is NULL
    } fixtures[] = {
        {"minilm", "tokenizer.json", "minilm.ids.gz", 0},
        {"minilm_vocab", "vocab.txt", "minilm.ids.gz", 0},
        {"unigram", "tokenizer.json", "unigram.ids.gz", 0},
        {"wp_cased", "tokenizer.json", NULL, 0},
        {"wp_strip", "tokenizer.json", NULL, 1},
        {"wp_keep_accents", "tokenizer.json", NULL, 2},
        {"unigram_bytes", "tokenizer.json", NULL, 3},
    };
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) {
        uform_tokenizer_t *tokenizer = open_fixture(fixtures[i].name, fixtures[i].file);
        char label[128];
        snprintf(label, sizeof label, "%s", fixtures[i].name);
        if (fixtures[i].expected) {
            CHECK(check_all(tokenizer, label, fixtures[i].expected, 0) == 0);
            size_t const lengths[] = {16, 128};
            for (size_t k = 0; k < 2; k++) {
                snprintf(label, sizeof label, "%s, max_tokens %zu", fixtures[i].name, lengths[k]);
                CHECK(check_all(tokenizer, label, fixtures[i].expected, lengths[k]) == 0);
            }
        } else
            CHECK(check_hashes(tokenizer, label, fixtures[i].hash_column, 4) == 0);
        if (i == 0) test_encode_arguments(tokenizer), test_long_text(tokenizer);
        if (i == 0 || i == 6) test_threads(tokenizer);
        uform_tokenizer_free(tokenizer);
    }
    test_variants();
    test_edge_cases();
    test_errors();
    test_many_added_tokens();
    remove_tree(temp_dir);
    free(texts);
    free(corpus_data);
    CHECK_DONE();
}
