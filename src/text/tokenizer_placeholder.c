/**
 *  @file   tokenizer_placeholder.c
 *  @brief  Stands in for the tokenizer (src/text/, another branch) until it is merged, so the model
 *          loader links and opens models: `open` only checks a tokenizer file is there, `encode`
 *          is UNSUPPORTED. Deleted when the real tokenizer lands.
 */
#include "text/tokenizer.h"
#include "internal.h"

#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `calloc`, `free`
#include <unistd.h>   // `access`

struct uform_tokenizer_s {
    int placeholder;
};

uform_status_t uform_tokenizer_open(char const *directory, int lower_case_hint, uform_tokenizer_t **tokenizer) {
    (void)lower_case_hint;
    if (!directory || !tokenizer) return uform_fail(uform_status_invalid_argument_k, "tokenizer arguments are NULL");
    *tokenizer = NULL;
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", directory);
    if (access(path, R_OK) != 0) {
        snprintf(path, sizeof(path), "%s/vocab.txt", directory);
        if (access(path, R_OK) != 0)
            return uform_fail(uform_status_system_error_k, "%s: neither tokenizer.json nor vocab.txt can be read", directory);
    }
    *tokenizer = calloc(1, sizeof(**tokenizer));
    if (!*tokenizer) return uform_fail(uform_status_out_of_memory_k, "out of memory for the tokenizer");
    return uform_status_ok_k;
}

uform_status_t uform_tokenizer_encode(uform_tokenizer_t const *tokenizer, char const *text, size_t length,
                                      size_t max_tokens, int32_t *ids, size_t capacity, size_t *count) {
    (void)tokenizer, (void)text, (void)length, (void)max_tokens, (void)ids, (void)capacity;
    if (count) *count = 0;
    return uform_fail(uform_status_unsupported_k, "the tokenizer is not built yet");
}

int32_t uform_tokenizer_pad_id(uform_tokenizer_t const *tokenizer) {
    (void)tokenizer;
    return 0;
}

size_t uform_tokenizer_vocab_size(uform_tokenizer_t const *tokenizer) {
    (void)tokenizer;
    return 0;
}

void uform_tokenizer_free(uform_tokenizer_t *tokenizer) { free(tokenizer); }
