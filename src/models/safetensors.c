/**
 *  @file   safetensors.c
 *  @brief  Validating `.safetensors` reader: header length, JSON header, dtypes, shapes, offsets,
 *          overlaps. See safetensors.h for the rules.
 */
#include "models/safetensors.h"
#include "internal.h"
#include "json_scan.h"

#include <cjson/cJSON.h>

#include <errno.h>    // `errno`
#include <math.h>     // `isfinite`, `floor`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `malloc`, `calloc`, `free`, `qsort`
#include <string.h>   // `strcmp`, `strlen`, `memcpy`, `strerror`
#include <sys/mman.h> // `mmap`, `munmap`
#include <sys/stat.h> // `struct stat`
#include <unistd.h>   // `close`

/* JSON numbers are doubles: integers above 2^53 are not exact, so they are refused. */
#define UFORM_JSON_MAX_EXACT 9007199254740992.0

typedef struct uform_dtype_size_t {
    char const *name;
    size_t bytes;
} uform_dtype_size_t;

/* Every dtype of the format with a whole number of bytes per element. */
static uform_dtype_size_t const uform_known_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
};

/** @brief A JSON number that is a whole number in [0, 2^53]. */
static int uform_json_size(cJSON const *item, size_t *value) {
    if (!cJSON_IsNumber(item)) return 0;
    double const number = item->valuedouble;
    if (!isfinite(number) || number < 0 || number > UFORM_JSON_MAX_EXACT || floor(number) != number) return 0;
    *value = (size_t)number;
    return 1;
}

static int uform_compare_names(void const *a, void const *b) {
    return strcmp(((uform_safetensor_t const *)a)->name, ((uform_safetensor_t const *)b)->name);
}

static int uform_compare_offsets(void const *a, void const *b) {
    uform_safetensor_t const *x = *(uform_safetensor_t const *const *)a, *y = *(uform_safetensor_t const *const *)b;
    if (x->data != y->data) return x->data < y->data ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

char const *uform_safetensor_shape_string(uform_safetensor_t const *tensor, char *buffer, size_t capacity) {
    size_t length = 0;
    if (capacity < 8) return "[...]";
    buffer[length++] = '[';
    for (size_t i = 0; i < tensor->rank; ++i) {
        if (i >= UFORM_SAFETENSORS_MAX_RANK) {
            snprintf(buffer + length, capacity - length, ", ...]");
            return buffer;
        }
        int const written = snprintf(buffer + length, capacity - length, "%s%zu", i ? ", " : "", tensor->shape[i]);
        if (written < 0 || (size_t)written >= capacity - length - 1) {
            memcpy(buffer + capacity - 5, "...]", 5);
            return buffer;
        }
        length += (size_t)written;
    }
    buffer[length++] = ']';
    buffer[length] = '\0';
    return buffer;
}

void uform_safetensors_close(uform_safetensors_t *index) {
    if (!index) return;
    if (index->tensors)
        for (size_t i = 0; i < index->count; ++i) free((char *)index->tensors[i].name);
    free(index->tensors);
    free(index->label);
    if (index->mapped && index->file) munmap((void *)index->file, index->file_size);
    memset(index, 0, sizeof(*index));
}

/** @brief Reads one tensor's entry into `tensor` (name set by the caller). */
static uform_status_t uform_safetensors_entry(char const *label, cJSON const *entry, uint8_t const *data,
                                              size_t data_size, uform_safetensor_t *tensor) {
    char const *name = tensor->name;
    if (!cJSON_IsObject(entry))
        return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s': its entry is not a JSON object", label, name);
    cJSON const *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    cJSON const *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    cJSON const *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s': 'dtype' is missing or not a string", label, name);
    if (!cJSON_IsArray(shape))
        return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s': 'shape' is missing or not an array", label, name);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return uform_fail(uform_status_corrupt_file_k,
                          "%s: tensor '%s': 'data_offsets' is missing or not an array of two integers", label, name);

    /* The dtype: known (size checked), computable (flagged), or unknown (bounds only). */
    char const *dtype_name = dtype->valuestring;
    size_t const dtype_length = strlen(dtype_name);
    snprintf(tensor->dtype_name, sizeof(tensor->dtype_name), "%s", dtype_name);
    size_t element_bytes = 0;
    for (size_t i = 0; i < sizeof(uform_known_dtypes) / sizeof(uform_known_dtypes[0]); ++i)
        if (dtype_length == strlen(uform_known_dtypes[i].name) && strcmp(dtype_name, uform_known_dtypes[i].name) == 0)
            element_bytes = uform_known_dtypes[i].bytes;
    if (strcmp(dtype_name, "F32") == 0) tensor->computable = 1, tensor->dtype = uform_dtype_f32_k;
    else if (strcmp(dtype_name, "BF16") == 0) tensor->computable = 1, tensor->dtype = uform_dtype_bf16_k;
    else if (strcmp(dtype_name, "F16") == 0) tensor->computable = 1, tensor->dtype = uform_dtype_f16_k;

    /* The shape: non-negative integers, the product free of overflow. */
    size_t elements = 1;
    int overflow = 0;
    tensor->rank = 0;
    cJSON const *dimension = NULL;
    cJSON_ArrayForEach(dimension, shape) {
        size_t extent;
        if (!uform_json_size(dimension, &extent))
            return uform_fail(uform_status_corrupt_file_k,
                              "%s: tensor '%s': shape dimension %zu is not a non-negative integer", label, name, tensor->rank);
        if (tensor->rank < UFORM_SAFETENSORS_MAX_RANK) tensor->shape[tensor->rank] = extent;
        ++tensor->rank;
        if (__builtin_mul_overflow(elements, extent, &elements)) overflow = 1;
    }
    /* A zero extent anywhere makes the product zero whatever overflowed before it. */
    for (size_t i = 0; i < tensor->rank && i < UFORM_SAFETENSORS_MAX_RANK; ++i)
        if (tensor->shape[i] == 0) overflow = 0, elements = 0;
    if (overflow)
        return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s': the shape's element count overflows", label, name);
    tensor->elements = elements;

    size_t begin, end;
    if (!uform_json_size(cJSON_GetArrayItem(offsets, 0), &begin) || !uform_json_size(cJSON_GetArrayItem(offsets, 1), &end))
        return uform_fail(uform_status_corrupt_file_k,
                          "%s: tensor '%s': 'data_offsets' is not two non-negative integers", label, name);
    if (begin > end)
        return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s': data_offsets [%zu, %zu] run backwards", label,
                          name, begin, end);
    if (end > data_size)
        return uform_fail(uform_status_corrupt_file_k,
                          "%s: tensor '%s': data_offsets [%zu, %zu] run past the data region of %zu bytes", label, name,
                          begin, end, data_size);
    if (element_bytes) {
        size_t bytes;
        char shape_text[96];
        if (__builtin_mul_overflow(elements, element_bytes, &bytes))
            return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s': the shape's byte size overflows", label, name);
        if (bytes != end - begin)
            return uform_fail(uform_status_corrupt_file_k,
                              "%s: tensor '%s': shape %s of %s needs %zu bytes, data_offsets [%zu, %zu] hold %zu", label,
                              name, uform_safetensor_shape_string(tensor, shape_text, sizeof(shape_text)), dtype_name,
                              bytes, begin, end, end - begin);
    }
    tensor->data = data + begin;
    tensor->bytes = end - begin;
    return uform_status_ok_k;
}

uform_status_t uform_safetensors_parse(char const *label, void const *bytes, size_t size, uform_safetensors_t *index) {
    if (!index) return uform_fail(uform_status_invalid_argument_k, "safetensors index is NULL");
    memset(index, 0, sizeof(*index));
    if (!label) label = "safetensors";
    if (!bytes && size) return uform_fail(uform_status_invalid_argument_k, "%s: bytes are NULL", label);
    uint8_t const *file = (uint8_t const *)bytes;
    if (size < 8)
        return uform_fail(uform_status_corrupt_file_k, "%s: %zu bytes, too short for the 8-byte header length", label, size);
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | file[i];
    if (header_size > UFORM_SAFETENSORS_MAX_HEADER)
        return uform_fail(uform_status_corrupt_file_k, "%s: header of %llu bytes exceeds the limit of %zu bytes", label,
                          (unsigned long long)header_size, UFORM_SAFETENSORS_MAX_HEADER);
    if (header_size > size - 8)
        return uform_fail(uform_status_corrupt_file_k, "%s: header of %llu bytes runs past the end of the %zu-byte file",
                          label, (unsigned long long)header_size, size);
    if (header_size < 2 || file[8] != '{')
        return uform_fail(uform_status_corrupt_file_k, "%s: the header does not start with a JSON object", label);

    char const *header = (char const *)file + 8;
    /* One scan serves the value count here and the NUL escape below (the padding after the object is
     * spaces, checked before that is read, so the whole header holds the object's escapes alone). */
    uform_json_scan_t const scanned = uform_json_scan(header, (size_t)header_size, 0);
    if (scanned.values > UFORM_JSON_MAX_VALUES)
        return uform_fail(uform_status_corrupt_file_k, "%s: a header of up to %zu JSON values, more than the %zu this "
                          "engine reads", label, scanned.values, UFORM_JSON_MAX_VALUES);
    char const *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, (size_t)header_size, &parse_end, 0);
    if (!root) {
        size_t const at = parse_end && parse_end >= header ? (size_t)(parse_end - header) : 0;
        return uform_fail(uform_status_corrupt_file_k, "%s: malformed JSON header near byte %zu of %llu", label, at,
                          (unsigned long long)header_size);
    }
    /* Only whitespace (the format pads with spaces) may follow the object. */
    size_t const consumed = parse_end && parse_end >= header ? (size_t)(parse_end - header) : 0;
    for (size_t i = consumed; i < header_size; ++i) {
        char const c = header[i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            cJSON_Delete(root);
            return uform_fail(uform_status_corrupt_file_k, "%s: bytes after the JSON header's object, at byte %zu", label, i);
        }
    }
    /* A NUL inside a name or dtype would end cJSON's copy of it ("F32\u0000x" read as "F32"). */
    size_t const nul = scanned.nul_escape;
    if (nul < consumed) {
        cJSON_Delete(root);
        return uform_fail(uform_status_corrupt_file_k, "%s: a string in the header holds U+0000 (the escape at byte %zu)",
                          label, nul);
    }
    uform_status_t status = uform_status_ok_k;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return uform_fail(uform_status_corrupt_file_k, "%s: the header is not a JSON object", label);
    }

    uint8_t const *data = file + 8 + header_size;
    size_t const data_size = size - 8 - (size_t)header_size;
    size_t count = 0;
    cJSON const *entry = NULL;
    cJSON_ArrayForEach(entry, root) ++count;
    uform_safetensors_t result = {.file = file, .file_size = size};
    result.label = strdup(label);
    result.tensors = calloc(count ? count : 1, sizeof(uform_safetensor_t));
    uform_safetensor_t const **by_offset = calloc(count ? count : 1, sizeof(uform_safetensor_t const *));
    if (!result.label || !result.tensors || !by_offset) {
        status = uform_fail(uform_status_out_of_memory_k, "%s: out of memory for the index of %zu tensors", label, count);
        goto done;
    }
    cJSON_ArrayForEach(entry, root) {
        char const *name = entry->string ? entry->string : "";
        if (strcmp(name, "__metadata__") == 0) continue;
        uform_safetensor_t *tensor = &result.tensors[result.count];
        if (!(tensor->name = strdup(name))) {
            status = uform_fail(uform_status_out_of_memory_k, "%s: out of memory for tensor names", label);
            goto done;
        }
        ++result.count;
        status = uform_safetensors_entry(label, entry, data, data_size, tensor);
        if (status != uform_status_ok_k) goto done;
    }

    /* Names are unique (cJSON keeps duplicate keys; names with a NUL inside collide here too). */
    qsort(result.tensors, result.count, sizeof(uform_safetensor_t), uform_compare_names);
    for (size_t i = 1; i < result.count; ++i)
        if (strcmp(result.tensors[i - 1].name, result.tensors[i].name) == 0) {
            status = uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s' appears twice in the header", label,
                                result.tensors[i].name);
            goto done;
        }
    /* No two tensors share a byte: sorted by start, each starts at or after the previous end. */
    for (size_t i = 0; i < result.count; ++i) by_offset[i] = &result.tensors[i];
    qsort(by_offset, result.count, sizeof(by_offset[0]), uform_compare_offsets);
    uform_safetensor_t const *previous = NULL;
    for (size_t i = 0; i < result.count; ++i) {
        uform_safetensor_t const *tensor = by_offset[i];
        if (!tensor->bytes) continue;
        if (previous && tensor->data < previous->data + previous->bytes) {
            status = uform_fail(uform_status_corrupt_file_k,
                                "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap", label, previous->name,
                                (size_t)(previous->data - data), (size_t)(previous->data - data) + previous->bytes,
                                tensor->name, (size_t)(tensor->data - data), (size_t)(tensor->data - data) + tensor->bytes);
            goto done;
        }
        previous = tensor;
    }

done:
    free(by_offset);
    cJSON_Delete(root);
    if (status != uform_status_ok_k) {
        uform_safetensors_close(&result);
        return status;
    }
    *index = result;
    return uform_status_ok_k;
}

uform_status_t uform_safetensors_open(char const *path, uform_safetensors_t *index) {
    if (!index) return uform_fail(uform_status_invalid_argument_k, "safetensors index is NULL");
    memset(index, 0, sizeof(*index));
    if (!path) return uform_fail(uform_status_invalid_argument_k, "safetensors path is NULL");
    struct stat info;
    int const fd = uform_open_regular_file(path, &info, NULL);
    if (fd < 0) return uform_status_system_error_k;
    size_t const size = (size_t)info.st_size;
    if (size < 8) {
        close(fd);
        return uform_fail(uform_status_corrupt_file_k, "%s: %zu bytes, too short for the 8-byte header length", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int const error = errno;
    close(fd);
    if (map == MAP_FAILED) return uform_fail(uform_status_system_error_k, "%s: cannot map: %s", path, strerror(error));
    uform_status_t const status = uform_safetensors_parse(path, map, size, index);
    if (status != uform_status_ok_k) {
        munmap(map, size);
        return status;
    }
    index->mapped = 1;
    return uform_status_ok_k;
}

uform_safetensor_t const *uform_safetensors_find(uform_safetensors_t const *index, char const *name) {
    if (!index || !name || !index->count) return NULL;
    uform_safetensor_t key = {.name = name};
    return (uform_safetensor_t const *)bsearch(&key, index->tensors, index->count, sizeof(uform_safetensor_t),
                                               uform_compare_names);
}

uform_status_t uform_safetensors_expect(uform_safetensors_t const *index, char const *name, size_t rank,
                                        size_t const *shape, uform_safetensor_t const **tensor) {
    char const *label = index->label ? index->label : "safetensors";
    uform_safetensor_t const *found = uform_safetensors_find(index, name);
    char expected[96] = "[", actual[96];
    for (size_t i = 0; i < rank; ++i) {
        size_t const used = strlen(expected);
        snprintf(expected + used, sizeof(expected) - used, "%s%zu", i ? ", " : "", shape[i]);
    }
    strncat(expected, "]", sizeof(expected) - strlen(expected) - 1);
    if (!found) return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s' of shape %s is missing", label, name, expected);
    if (!found->computable)
        return uform_fail(uform_status_unsupported_k, "%s: tensor '%s' has dtype %s; only F32, BF16 and F16 are supported",
                          label, name, found->dtype_name);
    int matches = found->rank == rank;
    for (size_t i = 0; matches && i < rank; ++i) matches = found->shape[i] == shape[i];
    if (!matches)
        return uform_fail(uform_status_corrupt_file_k, "%s: tensor '%s' should have shape %s, found %s", label, name,
                          expected, uform_safetensor_shape_string(found, actual, sizeof(actual)));
    *tensor = found;
    return uform_status_ok_k;
}
