/**
 *  @file   bench_tokenizer.c
 *  @brief  Tokenizer throughput, one thread: every valid text of test/tokenizer/corpus.bin.gz encoded
 *          untruncated by each fixture tokenizer, best of `--rounds` passes. bench_tokenizer.py runs
 *          this beside Hugging Face `tokenizers` on the same texts and prints the ratio.
 *
 *  usage: bench_tokenizer [--fixtures DIR] [--rounds N] [--quick] [NAME...]
 *         NAME: minilm (default), unigram (default), unigram_bytes, wp_cased, wp_strip, wp_keep_accents
 *  Prints one line per tokenizer: RESULT name texts texts_per_s ids_per_s megabytes_per_s
 */
#include "text/tokenizer.h"
#include "../tools/strict_number.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "read_gz.h"

#ifndef UFORM_TOKENIZER_FIXTURES
#define UFORM_TOKENIZER_FIXTURES "test/tokenizer"
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    char const *fixtures = UFORM_TOKENIZER_FIXTURES;
    size_t rounds = 5, limit = SIZE_MAX;
    char const *names[16];
    size_t names_count = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fixtures") && i + 1 < argc) fixtures = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && strict_count(argv[i + 1], 1, (size_t)1 << 30, false, &rounds)) ++i;
        else if (!strcmp(argv[i], "--quick")) rounds = 1, limit = 2000;
        else if (argv[i][0] != '-' && names_count < 16) names[names_count++] = argv[i];
        else {
            fprintf(stderr, "usage: %s [--fixtures DIR] [--rounds N] [--quick] [NAME...]\n", argv[0]);
            return 2;
        }
    }
    if (!names_count) names[names_count++] = "minilm", names[names_count++] = "unigram";
    if (!rounds) rounds = 1;

    char path[1024];
    snprintf(path, sizeof path, "%s/corpus.bin.gz", fixtures);
    size_t size;
    char *corpus = read_gz(path, &size);
    if (!corpus) {
        fprintf(stderr, "bench_tokenizer: cannot read %s\n", path);
        return 1;
    }
    size_t capacity = 1 << 18, count = 0;
    char const **texts = malloc(capacity * sizeof(char *));
    size_t *lengths = malloc(capacity * sizeof(size_t));
    for (size_t at = 0; at < size && count < limit;) {
        char *end;
        size_t length = strtoull(corpus + at, &end, 10);
        if (*end != '\n' || (size_t)(end + 1 - corpus) + length >= size) break;
        if (count == capacity) {
            capacity *= 2;
            texts = realloc(texts, capacity * sizeof(char *));
            lengths = realloc(lengths, capacity * sizeof(size_t));
        }
        texts[count] = end + 1, lengths[count] = length, count++;
        at = (size_t)(end + 1 - corpus) + length + 1;
    }

    enum { ids_capacity = 1 << 16 };
    static int32_t ids[ids_capacity];
    int failures = 0;
    for (size_t n = 0; n < names_count; n++) {
        snprintf(path, sizeof path, "%s/%s/tokenizer.json.gz", fixtures, names[n]);
        size_t json_size;
        char *json = read_gz(path, &json_size);
        uform_tokenizer_t *tokenizer = NULL;
        if (!json || uform_tokenizer_open_json(json, json_size, path, &tokenizer) != uform_status_ok_k) {
            fprintf(stderr, "bench_tokenizer: cannot open %s: %s\n", path, json ? uform_error_message() : "unreadable");
            free(json);
            failures++;
            continue;
        }
        free(json);
        // Which texts are valid UTF-8 (the peer cannot take the others), and the work in them.
        size_t valid = 0, bytes = 0, total_ids = 0;
        char *ok = calloc(count, 1);
        for (size_t t = 0; t < count; t++) {
            size_t got = 0;
            if (uform_tokenizer_encode(tokenizer, texts[t], lengths[t], 0, ids, ids_capacity, &got) == uform_status_ok_k)
                ok[t] = 1, valid++, bytes += lengths[t], total_ids += got;
        }
        double best = 1e30;
        for (size_t r = 0; r < rounds; r++) {
            double start = now();
            size_t sum = 0;
            for (size_t t = 0; t < count; t++) {
                if (!ok[t]) continue;
                size_t got = 0;
                uform_tokenizer_encode(tokenizer, texts[t], lengths[t], 0, ids, ids_capacity, &got);
                sum += got;
            }
            double seconds = now() - start;
            if (sum != total_ids) {
                fprintf(stderr, "bench_tokenizer: %s gave %zu ids, then %zu\n", names[n], total_ids, sum);
                failures++;
            }
            if (seconds < best) best = seconds;
        }
        printf("RESULT %s %zu %.0f %.0f %.2f\n", names[n], valid, (double)valid / best, (double)total_ids / best,
               (double)bytes / best / 1e6);
        fflush(stdout);
        free(ok);
        uform_tokenizer_free(tokenizer);
    }
    free(texts), free(lengths), free(corpus);
    return failures ? 1 : 0;
}
