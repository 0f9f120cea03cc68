/**
 *  @file   model_harness.h
 *  @brief  What the model-file tests share (test_model.c, test_model_files.c): file and tree
 *          helpers, a safetensors writer for mutated files, opening with expected failures, and
 *          bit-exact comparisons against the fixtures of test/models (make_fixtures.py).
 */
#ifndef UFORM_TEST_MODEL_HARNESS_H
#define UFORM_TEST_MODEL_HARNESS_H

#define _GNU_SOURCE 1
/* Paths here are short temporary ones; truncation would only garble a message. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif
#include "check.h"
#include "internal.h"
#include "models/config.h"
#include "models/convert.h"
#include "models/model.h"
#include "models/safetensors.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef UFORM_TEST_MODELS_DIR
#error "UFORM_TEST_MODELS_DIR must name test/models"
#endif

static char const *const models_dir = UFORM_TEST_MODELS_DIR;
static char scratch[4096]; /* a temporary directory for this run */

/* ---- Files ---- */

static inline void write_bytes(char const *path, void const *data, size_t size) {
    FILE *file = fopen(path, "wb");
    CHECK_FATAL(file);
    CHECK_FATAL(fwrite(data, 1, size, file) == size);
    CHECK_FATAL(fclose(file) == 0);
}

static inline void write_text(char const *path, char const *text) { write_bytes(path, text, strlen(text)); }

static inline void *read_bytes(char const *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    CHECK_FATAL(file);
    fseek(file, 0, SEEK_END);
    long const length = ftell(file);
    fseek(file, 0, SEEK_SET);
    void *data = malloc((size_t)length + 1);
    CHECK_FATAL(data && fread(data, 1, (size_t)length, file) == (size_t)length);
    fclose(file);
    ((char *)data)[length] = '\0';
    *size = (size_t)length;
    return data;
}

static inline void copy_tree(char const *from, char const *to) {
    mkdir(to, 0755);
    DIR *directory = opendir(from);
    CHECK_FATAL(directory);
    for (struct dirent *entry; (entry = readdir(directory));) {
        if (entry->d_name[0] == '.') continue;
        char source[4096], target[4096];
        snprintf(source, sizeof(source), "%s/%s", from, entry->d_name);
        snprintf(target, sizeof(target), "%s/%s", to, entry->d_name);
        struct stat info;
        CHECK_FATAL(stat(source, &info) == 0);
        if (S_ISDIR(info.st_mode)) copy_tree(source, target);
        else {
            size_t size;
            void *data = read_bytes(source, &size);
            write_bytes(target, data, size);
            free(data);
        }
    }
    closedir(directory);
}

static inline void remove_tree(char const *path) {
    DIR *directory = opendir(path);
    if (!directory) {
        unlink(path);
        return;
    }
    for (struct dirent *entry; (entry = readdir(directory));) {
        if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, "..")) continue;
        char child[4096];
        snprintf(child, sizeof(child), "%s/%s", path, entry->d_name);
        remove_tree(child);
    }
    closedir(directory);
    rmdir(path);
}

/** A fresh copy of fixture `name` under the scratch directory; returns its path (static buffer). */
static inline char const *fixture_copy(char const *name, char const *as) {
    static char path[4096];
    char source[4096];
    snprintf(source, sizeof(source), "%s/%s", models_dir, name);
    snprintf(path, sizeof(path), "%s/%s", scratch, as);
    remove_tree(path);
    copy_tree(source, path);
    return path;
}

static inline char const *join(char const *directory, char const *name) {
    static char path[4096];
    snprintf(path, sizeof(path), "%s/%s", directory, name);
    return path;
}

/* ---- A safetensors writer for mutated files ---- */

typedef struct edit_t {
    char const *drop;         /**< A tensor left out. */
    char const *rename_from;  /**< Renamed... */
    char const *rename_to;    /**< ...to this. */
    char const *prefix;       /**< Put before every name. */
    char const *transpose;    /**< A 2-D tensor written with its dimensions swapped. */
    char const *retype;       /**< A tensor whose dtype string becomes `dtype` (bytes unchanged). */
    char const *dtype;
    char const *poke;         /**< An F32 tensor whose element `poke_element` becomes `poke_value`. */
    size_t poke_element;
    float poke_value;
} edit_t;

/** Rewrites `source` (a valid file) into `target` with `edit` applied. */
static inline void rewrite_safetensors(char const *source, char const *target, edit_t edit) {
    uform_safetensors_t index;
    CHECK_STATUS(uform_safetensors_open(source, &index), uform_status_ok_k);
    size_t capacity = 1 << 16, length = 0, data_size = 0;
    char *header = malloc(capacity);
    for (size_t i = 0; i < index.count; ++i) data_size += index.tensors[i].bytes;
    uint8_t *data = malloc(data_size ? data_size : 1);
    size_t offset = 0;
    length += (size_t)snprintf(header + length, capacity - length, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (size_t i = 0; i < index.count; ++i) {
        uform_safetensor_t const *t = &index.tensors[i];
        if (edit.drop && !strcmp(t->name, edit.drop)) continue;
        char const *name = edit.rename_from && !strcmp(t->name, edit.rename_from) ? edit.rename_to : t->name;
        char const *dtype = edit.retype && !strcmp(t->name, edit.retype) ? edit.dtype : t->dtype_name;
        size_t shape[8];
        memcpy(shape, t->shape, sizeof(shape));
        if (edit.transpose && !strcmp(t->name, edit.transpose)) shape[0] = t->shape[1], shape[1] = t->shape[0];
        length += (size_t)snprintf(header + length, capacity - length, ", \"%s%s\": {\"dtype\": \"%s\", \"shape\": [",
                                   edit.prefix ? edit.prefix : "", name, dtype);
        for (size_t d = 0; d < t->rank; ++d)
            length += (size_t)snprintf(header + length, capacity - length, "%s%zu", d ? ", " : "", shape[d]);
        length += (size_t)snprintf(header + length, capacity - length, "], \"data_offsets\": [%zu, %zu]}", offset,
                                   offset + t->bytes);
        memcpy(data + offset, t->data, t->bytes);
        if (edit.poke && !strcmp(t->name, edit.poke)) {
            CHECK_FATAL(t->dtype == uform_dtype_f32_k && edit.poke_element < t->elements);
            memcpy(data + offset + 4 * edit.poke_element, &edit.poke_value, 4);
        }
        offset += t->bytes;
    }
    length += (size_t)snprintf(header + length, capacity - length, "}");
    CHECK_FATAL(length < capacity);
    FILE *file = fopen(target, "wb");
    CHECK_FATAL(file);
    uint8_t prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = (uint8_t)((uint64_t)length >> (8 * i));
    fwrite(prefix, 1, 8, file);
    fwrite(header, 1, length, file);
    fwrite(data, 1, offset, file);
    fclose(file);
    free(header), free(data);
    uform_safetensors_close(&index);
}

/** A file of an 8-byte length, the header text and `data_size` zero bytes. */
static inline void write_raw_safetensors(char const *path, uint64_t header_length, char const *header, size_t data_size) {
    size_t const text = strlen(header);
    size_t const size = 8 + text + data_size;
    uint8_t *bytes = calloc(1, size);
    for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)(header_length >> (8 * i));
    memcpy(bytes + 8, header, text);
    write_bytes(path, bytes, size);
    free(bytes);
}

/** Parses header text (its true length) over `data_size` zero bytes, in memory. */
static inline uform_status_t parse_header(char const *header, size_t data_size, uform_safetensors_t *index) {
    size_t const text = strlen(header), size = 8 + text + data_size;
    uint8_t *bytes = calloc(1, size);
    for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)((uint64_t)text >> (8 * i));
    memcpy(bytes + 8, header, text);
    uform_status_t const status = uform_safetensors_parse("lying.safetensors", bytes, size, index);
    /* The index borrows the bytes: only a failed parse may free them here. */
    if (status == uform_status_ok_k) uform_safetensors_close(index);
    free(bytes);
    return status;
}

/* ---- Opening ---- */

static inline uform_status_t open_model(char const *path, uform_dtype_t dtype, uform_model_t *model) {
    uform_model_options_t options = {.path = path, .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = dtype};
    return uform_model_open(&options, model);
}

/** Expects opening `path` to fail with `status` and a message containing every needle. */
static inline void expect_open_failure(int line, char const *path, uform_status_t expected, char const *needle1,
                                char const *needle2, char const *needle3) {
    uform_model_t model = (uform_model_t)(uintptr_t)1;
    uform_status_t const status = open_model(path, uform_dtype_f32_k, &model);
    if (status != expected) {
        fprintf(stderr, "line %d: open(%s) returned %s, expected %s (message: %s)\n", line, path, uform_status_name(status),
                uform_status_name(expected), uform_error_message());
        ++check_failures;
    }
    if (model) {
        fprintf(stderr, "line %d: a failed open left *model set\n", line);
        ++check_failures;
        if (status == uform_status_ok_k) uform_model_free(model);
    }
    char const *needles[] = {needle1, needle2, needle3};
    for (int i = 0; i < 3; ++i)
        if (needles[i] && !strstr(uform_error_message(), needles[i])) {
            fprintf(stderr, "line %d: message \"%s\" lacks \"%s\"\n", line, uform_error_message(), needles[i]);
            ++check_failures;
        }
}
#define EXPECT_OPEN_FAILURE(path, status, a, b, c) expect_open_failure(__LINE__, path, status, a, b, c)

/* ---- Expectations ---- */

static inline uform_safetensor_t const *expected_tensor(uform_safetensors_t const *index, char const *name) {
    uform_safetensor_t const *tensor = uform_safetensors_find(index, name);
    if (!tensor) fprintf(stderr, "expectations lack '%s'\n", name);
    CHECK_FATAL(tensor);
    return tensor;
}

static inline uint16_t u16_at(uform_safetensor_t const *tensor, size_t i) {
    uint16_t value;
    memcpy(&value, tensor->data + 2 * i, 2);
    return value;
}

static inline uint32_t u32_at(uform_safetensor_t const *tensor, size_t i) {
    uint32_t value;
    memcpy(&value, tensor->data + 4 * i, 4);
    return value;
}

static inline float f32_of(uint32_t bits) {
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/** Compares a held tensor's bits with an expected U16 or F32 tensor; returns mismatches. */
static inline size_t compare_bits(uform_tensor_t const *held, uform_safetensor_t const *expected, char const *what) {
    size_t const count = held->rows * held->cols;
    size_t mismatches = 0;
    if (expected->elements != count) {
        fprintf(stderr, "%s: %zu elements held, %zu expected\n", what, count, expected->elements);
        ++check_failures;
        return 1;
    }
    for (size_t i = 0; i < count; ++i) {
        int same;
        if (held->dtype == uform_dtype_f32_k) same = ((uint32_t const *)held->data)[i] == u32_at(expected, i);
        else same = ((uint16_t const *)held->data)[i] == u16_at(expected, i);
        if (!same && !mismatches++) fprintf(stderr, "%s: element %zu differs\n", what, i);
    }
    if (mismatches) ++check_failures;
    return mismatches;
}


/** Makes the run's temporary directory (`scratch`). */
static void model_scratch_begin(void) {
    char const *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/uform-test-model.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK_FATAL(mkdtemp(scratch));
}

#endif // UFORM_TEST_MODEL_HARNESS_H
