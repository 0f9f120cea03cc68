/**
 *  @file   safetensors.h
 *  @brief  A validating reader of `.safetensors` files (untrusted bytes). Internal only.
 *
 *  The format: 8 bytes of little-endian header length N, N bytes of JSON (an object mapping tensor
 *  names to `{"dtype", "shape", "data_offsets": [begin, end]}`, plus an optional `__metadata__`
 *  object, which is ignored), then the data region, which offsets are relative to.
 *
 *  Everything a later read relies on is checked once, here: N within the file and at most
 *  `UFORM_SAFETENSORS_MAX_HEADER` bytes; the header well-formed JSON (cJSON) with every key of every
 *  tensor present and of the right type; each shape's element count and byte size free of overflow
 *  and equal to `end - begin` (for dtypes whose size is known); every `[begin, end)` inside the data
 *  region; no two tensors overlapping; no name twice. Dtypes the engine computes with (F32, BF16,
 *  F16) are flagged; other known dtypes (I64, U8, ...) are checked the same way and only refused
 *  when a model asks for that tensor; a dtype the reader does not know is bounds-checked only.
 *  Holes between tensors and trailing bytes are tolerated. Messages name the file and the tensor.
 *
 *  `uform_safetensors_open` maps the file; the model loader keeps the mapping only while it converts
 *  the tensors into its replicas. A file truncated by another process during that window can still
 *  raise SIGBUS, as with any mapping; files are expected to be replaced by rename, not rewritten.
 */
#ifndef UFORM_MODELS_SAFETENSORS_H
#define UFORM_MODELS_SAFETENSORS_H

#include <uform.h>
#include <stddef.h>
#include <stdint.h>

/** The largest header accepted, as the reference implementation's limit. */
#define UFORM_SAFETENSORS_MAX_HEADER ((size_t)100000000)
/** Dimensions kept per tensor; a tensor of higher rank is readable only as a whole. */
#define UFORM_SAFETENSORS_MAX_RANK 8

typedef struct uform_safetensor_t {
    char const *name;          /**< NUL-terminated, owned by the index. */
    char dtype_name[12];       /**< As written ("F32", "I64"), truncated; for messages. */
    int computable;            /**< F32, BF16 or F16: `dtype` holds which. */
    uform_dtype_t dtype;       /**< Valid when `computable`. */
    size_t rank;               /**< Dimensions; only the first `UFORM_SAFETENSORS_MAX_RANK` are kept. */
    size_t shape[UFORM_SAFETENSORS_MAX_RANK];
    size_t elements;           /**< Product of the shape (1 for rank 0). */
    uint8_t const *data;       /**< Inside the file's data region; not aligned. */
    size_t bytes;              /**< end - begin */
} uform_safetensor_t;

typedef struct uform_safetensors_t {
    char *label;                 /**< The file, for messages. */
    uint8_t const *file;         /**< The whole file (mapped, or the caller's bytes). */
    size_t file_size;
    int mapped;                  /**< `file` is our mapping. */
    size_t count;
    uform_safetensor_t *tensors; /**< Sorted by name. */
} uform_safetensors_t;

/** @brief Validates `size` bytes already in memory (borrowed; they must outlive the index). `label`
 *  names them in messages. On failure nothing is left allocated and `*index` is zeroed. */
uform_status_t uform_safetensors_parse(char const *label, void const *bytes, size_t size, uform_safetensors_t *index);

/** @brief Maps `path` read-only and validates it. SYSTEM_ERROR when it cannot be opened or mapped. */
uform_status_t uform_safetensors_open(char const *path, uform_safetensors_t *index);

/** @brief Unmaps and frees; a zeroed index is a no-op. */
void uform_safetensors_close(uform_safetensors_t *index);

/** @brief The tensor named `name`, or NULL. */
uform_safetensor_t const *uform_safetensors_find(uform_safetensors_t const *index, char const *name);

/**
 *  @brief The tensor `name` of shape `shape[0 .. rank)` in a dtype the engine computes with (F32,
 *  BF16, F16), into `*tensor`: CORRUPT_FILE when it is missing or of another shape, UNSUPPORTED for
 *  another dtype, each message naming the file, the tensor and the shapes. What every tower's binder
 *  checks before it records where a tensor goes.
 */
uform_status_t uform_safetensors_expect(uform_safetensors_t const *index, char const *name, size_t rank,
                                        size_t const *shape, uform_safetensor_t const **tensor);

/** @brief Writes "[a, b]" into `buffer`. */
char const *uform_safetensor_shape_string(uform_safetensor_t const *tensor, char *buffer, size_t capacity);

#endif // UFORM_MODELS_SAFETENSORS_H
