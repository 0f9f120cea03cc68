/**
 *  @file   dtype.h
 *  @brief  Element sizes of the dtypes weights, features and embeddings come in. Internal.
 */
#ifndef UFORM_MODELS_DTYPE_H
#define UFORM_MODELS_DTYPE_H

#include <uform.h>
#include <stddef.h>

/** @brief Bytes per element of f32 (4), bf16 or f16 (2); 0 for any other dtype, which callers
 *  refuse before sizing anything with it. */
static inline size_t uform_dtype_bytes(uform_dtype_t dtype) {
    switch (dtype) {
    case uform_dtype_f32_k: return 4;
    case uform_dtype_bf16_k:
    case uform_dtype_f16_k: return 2;
    default: return 0;
    }
}

#endif // UFORM_MODELS_DTYPE_H
