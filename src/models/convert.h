/**
 *  @file   convert.h
 *  @brief  Scalar conversions between f32, bf16 and f16 (round to nearest, ties to even; NaN stays
 *          NaN, quieted; overflow gives infinity of the same sign), for loading weights. Internal.
 */
#ifndef UFORM_MODELS_CONVERT_H
#define UFORM_MODELS_CONVERT_H

#include "models/dtype.h"

#include <uform.h>
#include <stddef.h>
#include <stdint.h>

uint16_t uform_f32_to_bf16(float value);
uint16_t uform_f32_to_f16(float value);
float uform_bf16_to_f32(uint16_t bits);
float uform_f16_to_f32(uint16_t bits);

/** @brief Converts `count` elements from `source` (f32, bf16 or f16, any alignment, little-endian
 *  as in safetensors) to `target` of `target_dtype` (f32, bf16 or f16, naturally aligned). Same
 *  dtypes copy bits unchanged. */
void uform_convert(void *target, uform_dtype_t target_dtype, void const *source, uform_dtype_t source_dtype, size_t count);

/** @brief The index of the first NaN or infinity among `count` elements of `data` (f32, bf16 or f16,
 *  naturally aligned), or `count` when every one is finite. */
size_t uform_first_nonfinite(void const *data, uform_dtype_t dtype, size_t count);

/** @brief Element `i` of `source` (f32, bf16 or f16, any alignment, little-endian) as a float. */
float uform_element(void const *source, uform_dtype_t dtype, size_t i);

#endif // UFORM_MODELS_CONVERT_H
