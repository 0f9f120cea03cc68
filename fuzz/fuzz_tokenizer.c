/**
 *  @file   fuzz_tokenizer.c
 *  @brief  libFuzzer target for the tokenizers: `tokenizer.json` parsing and encoding.
 *
 *  The first input byte picks the mode:
 *  - even: the rest is a text, encoded by one of three real tokenizers (all-MiniLM-L6-v2, the
 *    trained Unigram, the trained Unigram with byte fallback; fixtures of test/tokenizer), chosen by
 *    bits 1-2, at a max_tokens from bits 3-7 (0: untruncated);
 *  - odd: the rest is `tokenizer.json` bytes up to the first NUL, then a text; an opened tokenizer
 *    (with bit 1 set, truncating as the `uform` package's processor: its JSON `truncation`, then
 *    a slice to max_tokens) encodes the text, the JSON itself and a few fixed strings.
 *  Every result is checked: a valid text gets OK (or, for a model without unk, INVALID_ARGUMENT),
 *  invalid UTF-8 gets INVALID_ARGUMENT; ids lie below the vocabulary size; the count respects
 *  max_tokens; encoding twice gives the same ids. Violations abort.
 *
 *  Built two ways (fuzz/tokenizer.cmake): with -DUFORM_FUZZ=ON and clang as the libFuzzer target
 *  fuzz_tokenizer; always, with -DUFORM_FUZZ_REPLAY, as fuzz_replay_tokenizer, whose main()
 *  replays the kept corpus (fuzz/corpus/tokenizer) with the normal compiler, for ctest.
 */
#include "text/tokenizer.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#ifndef UFORM_TOKENIZER_FIXTURES
#error "UFORM_TOKENIZER_FIXTURES must name test/tokenizer"
#endif

static uform_tokenizer_t *fixtures[3];

static void load_fixtures(void) {
    static int loaded = 0;
    if (loaded) return;
    loaded = 1;
    char const *names[3] = {"minilm", "unigram", "unigram_bytes"};
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/tokenizer.json.gz", UFORM_TOKENIZER_FIXTURES, names[i]);
        gzFile file = gzopen(path, "rb");
        if (!file) {
            fprintf(stderr, "fuzz_tokenizer: cannot open %s\n", path);
            abort();
        }
        size_t capacity = 1 << 20, used = 0;
        char *data = malloc(capacity);
        for (int got; data && (got = gzread(file, data + used, (unsigned)(capacity - used))) > 0;) {
            used += (size_t)got;
            if (used == capacity) data = realloc(data, capacity *= 2);
        }
        gzclose(file);
        if (!data || uform_tokenizer_open_json(data, used, names[i], &fixtures[i]) != uform_status_ok_k) {
            fprintf(stderr, "fuzz_tokenizer: cannot open %s: %s\n", path, uform_error_message());
            abort();
        }
        free(data);
    }
}

static int valid_utf8(uint8_t const *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t b = s[i];
        size_t need;
        uint32_t c, min;
        if (b < 0x80) { i++; continue; }
        if (b >= 0xC2 && b <= 0xDF) need = 1, c = b & 0x1F, min = 0x80;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, c = b & 0x0F, min = 0x800;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, c = b & 0x07, min = 0x10000;
        else return 0;
        if (n - i <= need) return 0;
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
        i += need + 1;
    }
    return 1;
}

#define REQUIRE(condition)                                                                          \
    do {                                                                                            \
        if (!(condition)) {                                                                         \
            fprintf(stderr, "fuzz_tokenizer: %s failed (%s)\n", #condition, uform_error_message()); \
            abort();                                                                                \
        }                                                                                           \
    } while (0)

static void encode_checked(uform_tokenizer_t const *tokenizer, uint8_t const *text, size_t length, size_t max_tokens) {
    enum { capacity = 4096 };
    static int32_t ids[capacity], again[capacity];
    size_t count = 0, count2 = 0;
    uform_status_t status = uform_tokenizer_encode(tokenizer, (char const *)text, length, max_tokens, ids, capacity, &count);
    if (status == uform_status_invalid_argument_k && strstr(uform_error_message(), "leaves no room")) {
        REQUIRE(max_tokens > 0); // fewer than the specials
        return;
    }
    if (!valid_utf8(text, length)) {
        REQUIRE(status == uform_status_invalid_argument_k && strstr(uform_error_message(), "invalid UTF-8 at byte"));
        REQUIRE(count == 0);
        return;
    }
    if (status == uform_status_invalid_argument_k) { // a model that cannot express a character
        REQUIRE(strstr(uform_error_message(), "unknown token") || strstr(uform_error_message(), "unk_id"));
        return;
    }
    REQUIRE(status == uform_status_ok_k);
    REQUIRE(!max_tokens || count <= max_tokens);
    size_t vocab = uform_tokenizer_vocab_size(tokenizer);
    for (size_t i = 0; i < count && i < capacity; i++) REQUIRE(ids[i] >= 0 && (size_t)ids[i] < vocab);
    // Again, into a short buffer: the same count and the same first ids.
    size_t short_capacity = count / 2;
    REQUIRE(uform_tokenizer_encode(tokenizer, (char const *)text, length, max_tokens, again, short_capacity, &count2) ==
            uform_status_ok_k);
    REQUIRE(count2 == count);
    REQUIRE(!memcmp(ids, again, (short_capacity < capacity ? short_capacity : capacity) * sizeof(int32_t)));
}

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size) {
    if (!size) return 0;
    load_fixtures();
    uint8_t mode = data[0];
    data++, size--;
    if (!(mode & 1)) {
        uform_tokenizer_t const *tokenizer = fixtures[((mode >> 1) & 3) % 3];
        size_t max_tokens = (size_t)(mode >> 3) * 4; // 0, 4, ..., 124
        encode_checked(tokenizer, data, size, max_tokens);
        if (max_tokens) encode_checked(tokenizer, data, size, 0);
        return 0;
    }
    uint8_t const *nul = memchr(data, 0, size);
    size_t json_size = nul ? (size_t)(nul - data) : size;
    uform_tokenizer_t *tokenizer = NULL;
    uform_status_t status = uform_tokenizer_open_json((char const *)data, json_size, "fuzz.json", &tokenizer);
    if (status != uform_status_ok_k) {
        REQUIRE(tokenizer == NULL);
        REQUIRE(status == uform_status_corrupt_file_k || status == uform_status_unsupported_k ||
                status == uform_status_limit_exceeded_k || status == uform_status_out_of_memory_k);
        REQUIRE(strstr(uform_error_message(), "fuzz.json"));
        return 0;
    }
    if (mode & 2) { // truncated as the uform package's processor (UForm3 towers): its JSON truncation, then a slice
        status = uform_tokenizer_use_processor_truncation(tokenizer, "fuzz.json", (mode & 4) == 0);
        if (status != uform_status_ok_k) {
            REQUIRE(status == uform_status_corrupt_file_k || status == uform_status_unsupported_k);
            REQUIRE(strstr(uform_error_message(), "fuzz.json"));
            uform_tokenizer_free(tokenizer);
            return 0;
        }
    }
    if (nul) encode_checked(tokenizer, nul + 1, size - json_size - 1, (mode >> 3) * 2);
    encode_checked(tokenizer, data, json_size, 0);
    static char const *fixed[] = {"", " ", "Hello, World!", "[CLS] a [SEP]", "<s>x</s>", "ÄÖÜ naïve café 東京",
                                  "\xe2\x96\x81\xe2\x96\x81 a"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        encode_checked(tokenizer, (uint8_t const *)fixed[i], strlen(fixed[i]), i);
    uform_tokenizer_free(tokenizer);
    return 0;
}

#ifdef UFORM_FUZZ_REPLAY
/* Replays every file under the given paths through the entry point, each in an exact-size copy so
 * reads past an input's end are caught by AddressSanitizer. */
static size_t replayed = 0;

static int replay(char const *path) {
    struct stat info;
    if (stat(path, &info) != 0) {
        fprintf(stderr, "replay: no such file or directory: %s\n", path);
        return 1;
    }
    if (S_ISDIR(info.st_mode)) {
        DIR *directory = opendir(path);
        if (!directory) return 1;
        int failures = 0;
        for (struct dirent *entry; (entry = readdir(directory));) {
            if (entry->d_name[0] == '.') continue;
            char child[4096];
            snprintf(child, sizeof child, "%s/%s", path, entry->d_name);
            failures += replay(child);
        }
        closedir(directory);
        return failures;
    }
    FILE *file = fopen(path, "rb");
    if (!file) return 1;
    uint8_t *data = malloc(info.st_size ? (size_t)info.st_size : 1);
    size_t size = data ? fread(data, 1, (size_t)info.st_size, file) : 0;
    fclose(file);
    if (!data || size != (size_t)info.st_size) {
        free(data);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    replayed++;
    return 0;
}

int main(int argc, char **argv) {
    int failures = 0;
    for (int i = 1; i < argc; i++) failures += replay(argv[i]);
    for (int i = 0; i < 3; i++) uform_tokenizer_free(fixtures[i]);
    printf("replayed %zu inputs\n", replayed);
    if (!replayed) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    return failures ? 1 : 0;
}
#endif
