/**
 *  @file   fuzz_safetensors.c
 *  @brief  libFuzzer target: arbitrary bytes as a `.safetensors` file. Every tensor the index accepts
 *          is read whole and converted, so a bound the reader failed to check shows up as an
 *          out-of-bounds read under AddressSanitizer.
 */
#include "models/convert.h"
#include "models/safetensors.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size);

int LLVMFuzzerTestOneInput(uint8_t const *data, size_t size) {
    uform_safetensors_t index;
    if (uform_safetensors_parse("fuzz.safetensors", data, size, &index) != uform_status_ok_k) return 0;
    for (size_t i = 0; i < index.count; ++i) {
        uform_safetensor_t const *tensor = &index.tensors[i];
        char shape[96];
        uform_safetensor_shape_string(tensor, shape, sizeof(shape));
        if (uform_safetensors_find(&index, tensor->name) != tensor) abort();
        /* Touch every byte the index claims. */
        volatile uint8_t sink = 0;
        for (size_t b = 0; b < tensor->bytes; ++b) sink ^= tensor->data[b];
        (void)sink;
        if (!tensor->computable || tensor->elements > (1u << 20)) continue;
        float *converted = malloc((tensor->elements ? tensor->elements : 1) * sizeof(float));
        uint16_t *halves = malloc((tensor->elements ? tensor->elements : 1) * sizeof(uint16_t));
        if (converted && halves) {
            uform_convert(converted, uform_dtype_f32_k, tensor->data, tensor->dtype, tensor->elements);
            uform_convert(halves, uform_dtype_bf16_k, tensor->data, tensor->dtype, tensor->elements);
            uform_convert(halves, uform_dtype_f16_k, tensor->data, tensor->dtype, tensor->elements);
        }
        free(converted), free(halves);
    }
    uform_safetensors_close(&index);
    return 0;
}
