/**
 *  @file   text_vram.c
 *  @brief  VRAM text towers: the weights uploaded once per device, and `uform_encode_texts` on VRAM
 *          executors (see text_vram.h).
 *
 *  Opening (`uform_text_vram_open`): model.c reads the directory into one host tower exactly as for
 *  RAM models (configuration, safetensors, tokenizer: nothing is read twice or differently); this
 *  file packs it into one host image and uploads it per device into one `cuMemAlloc` block, in the
 *  device's primary context (the one VRAM executors use). Matrices keep the tower's dtype (f32, bf16
 *  or f16) and `nn.Linear` layout; Q, K and V are stacked into one [3 hidden][hidden] matrix so one
 *  product makes all three; biases are stored in the activation dtype (cuBLASLt's epilogues read them
 *  so), LayerNorm parameters in f32. Each copy also holds the engine's module (the same fatbin as
 *  vram.c's) and a cuBLASLt handle.
 *
 *  Encoding (`uform_text_vram_encode`), as two calls on the executor:
 *  1. a host call (DYNAMIC, one task per text) tokenises on the executor's decoder threads into
 *     fixed slots of `context` ids per text, recording each text's status;
 *  2. the device call: texts packed without padding (encoded ones only), split over the executor's
 *     devices in proportion to their SMs (contiguous ranges, so results come back in input order),
 *     each device's share cut into chunks that fit the scratch the call asks for (`scratch_limit`
 *     bounds it: LIMIT_EXCEEDED when even one text cannot fit). Per chunk the device callback
 *     uploads ids, positions and offsets and enqueues the pass on the slot's stream:
 *       embed (gather + LayerNorm), then per layer:
 *         qkv = x Wqkv^T + b                     (cuBLASLt, BIAS epilogue)
 *         ctx = attention(qkv)                   (one block per (text, head), no score matrix in memory)
 *         tmp = ctx Wo^T + b + x                 (cuBLASLt, BIAS epilogue, beta = 1 on x)
 *         x = LayerNorm(tmp)
 *         ffn = GELU(x W1^T + b1)                (GELU_BIAS epilogue for bf16/f16; BIAS + exact erf GELU for f32)
 *         tmp = ffn W2^T + b2 + x, x = LayerNorm(tmp)
 *       pool (CLS or mean), projection (cuBLASLt), finish (norms, truncation, output dtype) into a
 *       per-device output region of the scratch.
 *     The last device's callback copies every device's output region back (waiting on each stream
 *     in turn, so devices overlap), then writes rows in input order with the caller's stride, zero
 *     rows for failed texts, and the statuses. So an encode call has finished when it returns, a
 *     deferred one included (its outcome is already final).
 *  The f32 path differs from the CPU path only by rounding; bf16/f16 keep activations in that dtype
 *  between kernels (as PyTorch does) and use cuBLASLt's tanh-approximated GELU epilogue.
 */
#define _GNU_SOURCE
#include "models/text_vram_private.h"

#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `memcpy`

/* ---- Opening ---- */

/** The host image of one tower: offsets of every tensor in one block, then the bytes. */
typedef struct vram_image_t {
    unsigned char *bytes;
    size_t size, used;
} vram_image_t;

/** Reserves `bytes` (256-aligned) in the image; returns the offset. With `image->bytes` NULL only counts. */
static size_t image_take(vram_image_t *image, size_t bytes) {
    size_t offset = align_up(image->used, VRAM_ALIGN);
    image->used = offset + bytes;
    return offset;
}

/** Copies a matrix (already in the tower's dtype) or zero rows when absent. */
static size_t image_matrix(vram_image_t *image, uform_tensor_t const *tensor, size_t rows, size_t cols, uform_dtype_t dtype) {
    size_t bytes = rows * cols * element_size(dtype);
    size_t offset = image_take(image, bytes);
    if (image->bytes && tensor && tensor->data) memcpy(image->bytes + offset, tensor->data, bytes);
    return offset;
}

/** Writes an f32 vector (bias) converted to `dtype`, zeros when absent. */
static void image_vector_at(vram_image_t *image, size_t offset, uform_tensor_t const *tensor, size_t count,
                            uform_dtype_t dtype) {
    if (!image->bytes || !tensor || !tensor->data) return;
    uform_kernels_t const *kernels = uform_kernels_for(uform_cpu_class_serial_k);
    float const *values = (float const *)tensor->data;
    if (dtype == uform_dtype_f32_k) memcpy(image->bytes + offset, values, count * sizeof(float));
    else if (dtype == uform_dtype_bf16_k) kernels->f32_to_bf16(values, (uint16_t *)(image->bytes + offset), count);
    else kernels->f32_to_f16(values, (uint16_t *)(image->bytes + offset), count);
}

static size_t image_vector(vram_image_t *image, uform_tensor_t const *tensor, size_t count, uform_dtype_t dtype) {
    size_t offset = image_take(image, count * element_size(dtype));
    image_vector_at(image, offset, tensor, count, dtype);
    return offset;
}

/** Offsets of a tower's tensors in the image (device pointers once the block's base is added). */
typedef struct vram_offsets_t {
    size_t word, position, type0, embed_gamma, embed_beta, projection;
    int has_type0, has_projection;
} vram_offsets_t;

/** Lays the tower out (and copies it when `image->bytes` is set). `layers` receives per-layer offsets. */
static void image_tower(vram_image_t *image, uform_text_tower_t const *tower, vram_offsets_t *offsets, vram_layer_t *layers) {
    uform_dtype_t dtype = tower->weights_dtype;
    size_t hidden = tower->hidden, inter = tower->intermediate;
    image->used = 0;
    offsets->word = image_matrix(image, &tower->word_embeddings, tower->word_embeddings.rows, hidden, dtype);
    offsets->position = image_matrix(image, &tower->position_embeddings, tower->position_embeddings.rows, hidden, dtype);
    offsets->has_type0 = tower->token_type_embeddings.data != NULL;
    offsets->type0 = offsets->has_type0 ? image_matrix(image, &tower->token_type_embeddings, 1, hidden, dtype) : 0;
    offsets->embed_gamma = image_vector(image, &tower->embedding_norm_weight, hidden, uform_dtype_f32_k);
    offsets->embed_beta = image_vector(image, &tower->embedding_norm_bias, hidden, uform_dtype_f32_k);
    offsets->has_projection = tower->projection.data != NULL;
    offsets->projection =
        offsets->has_projection ? image_matrix(image, &tower->projection, tower->embedding_dimensions, hidden, dtype) : 0;
    size_t matrix = hidden * hidden * element_size(dtype);
    for (size_t l = 0; l < tower->layers_count; ++l) {
        uform_text_layer_t const *layer = &tower->layers[l];
        vram_layer_t *out = &layers[l];
        out->qkv_weight = image_take(image, 3 * matrix);
        if (image->bytes) {
            memcpy(image->bytes + out->qkv_weight, layer->query_weight.data, matrix);
            memcpy(image->bytes + out->qkv_weight + matrix, layer->key_weight.data, matrix);
            memcpy(image->bytes + out->qkv_weight + 2 * matrix, layer->value_weight.data, matrix);
        }
        out->qkv_bias = image_take(image, 3 * hidden * element_size(dtype));
        image_vector_at(image, out->qkv_bias, &layer->query_bias, hidden, dtype);
        image_vector_at(image, out->qkv_bias + hidden * element_size(dtype), &layer->key_bias, hidden, dtype);
        image_vector_at(image, out->qkv_bias + 2 * hidden * element_size(dtype), &layer->value_bias, hidden, dtype);
        out->output_weight = image_matrix(image, &layer->attention_output_weight, hidden, hidden, dtype);
        out->output_bias = image_vector(image, &layer->attention_output_bias, hidden, dtype);
        out->norm1_gamma = image_vector(image, &layer->attention_norm_weight, hidden, uform_dtype_f32_k);
        out->norm1_beta = image_vector(image, &layer->attention_norm_bias, hidden, uform_dtype_f32_k);
        out->up_weight = image_matrix(image, &layer->intermediate_weight, inter, hidden, dtype);
        out->up_bias = image_vector(image, &layer->intermediate_bias, inter, dtype);
        out->down_weight = image_matrix(image, &layer->output_weight, hidden, inter, dtype);
        out->down_bias = image_vector(image, &layer->output_bias, hidden, dtype);
        out->norm2_gamma = image_vector(image, &layer->output_norm_weight, hidden, uform_dtype_f32_k);
        out->norm2_beta = image_vector(image, &layer->output_norm_bias, hidden, uform_dtype_f32_k);
    }
}

static void copy_release(uform_text_vram_t *vram, vram_copy_t *copy) {
    uform_cuda_t const *cuda = vram->cuda;
    if (copy->context) {
        CUcontext previous = NULL;
        if (cuda->CtxPushCurrent(copy->context) == CUDA_SUCCESS) {
            for (size_t g = 0; g < VRAM_GRAPHS; ++g)
                if (copy->graphs[g].exec) cuda->GraphExecDestroy(copy->graphs[g].exec);
            if (copy->lt) vram->lt->Destroy(copy->lt);
            if (copy->module) cuda->ModuleUnload(copy->module);
            if (copy->block) cuda->MemFree(copy->block);
            cuda->CtxPopCurrent(&previous);
        }
        cuda->DevicePrimaryCtxRelease(copy->device);
    }
    free(copy->layers);
    pthread_mutex_destroy(&copy->lock);
}

size_t uform_text_vram_copies(struct uform_model_s const *model) {
    return model && model->vram ? ((uform_text_vram_t const *)model->vram)->count : 0;
}

void uform_text_vram_free(struct uform_model_s *model) {
    uform_text_vram_t *vram = model ? (uform_text_vram_t *)model->vram : NULL;
    if (!vram) return;
    for (size_t i = 0; i < vram->count; ++i) copy_release(vram, &vram->copies[i]);
    free(vram->copies);
    free(vram);
    model->vram = NULL;
}

static char const *const suffixes[3] = {"f32", "bf16", "f16"};

/** Uploads the image to one device and loads its module and cuBLASLt handle. */
static uform_status_t copy_open(uform_text_vram_t *vram, vram_copy_t *copy, vram_image_t const *image,
                                vram_offsets_t const *offsets, vram_layer_t const *layers, size_t layers_count) {
    uform_cuda_t const *cuda = vram->cuda;
    CUresult result = cuda->DevicePrimaryCtxRetain(&copy->context, copy->device);
    if (result != CUDA_SUCCESS) {
        copy->context = NULL;
        return uform_cuda_fail(uform_status_unsupported_k, result, "uform_model_open: retaining device %d's context",
                               (int)copy->ordinal);
    }
    result = cuda->CtxPushCurrent(copy->context);
    if (result != CUDA_SUCCESS)
        return uform_cuda_fail(uform_status_unsupported_k, result, "uform_model_open: entering device %d's context",
                               (int)copy->ordinal);
    uform_status_t status = uform_status_ok_k;
    char what[128] = "cuMemAlloc";
    result = cuda->MemAlloc(&copy->block, image->used);
    if (result != CUDA_SUCCESS) {
        copy->block = 0;
        status = uform_cuda_fail(uform_status_out_of_memory_k, result,
                                 "uform_model_open: %zu bytes of weights on device %d", image->used, (int)copy->ordinal);
        goto done;
    }
    snprintf(what, sizeof what, "cuMemcpyHtoD");
    result = cuda->MemcpyHtoD(copy->block, image->bytes, image->used);
    if (result == CUDA_SUCCESS) snprintf(what, sizeof what, "cuModuleLoadData"),
                                result = cuda->ModuleLoadData(&copy->module, uform_kernels_fatbin);
    if (result != CUDA_SUCCESS) copy->module = NULL;
    struct {
        CUfunction *function;
        char const *name;
    } const functions[] = {{&copy->embed, "embed"},         {&copy->layer_norm, "layer_norm"},
                           {&copy->gelu, "gelu"},           {&copy->attention_simt, "attention_simt"},
                           {&copy->pool, "pool"},           {&copy->finish, "finish"},
                           {&copy->attention_mma, "attention_mma"}};
    for (size_t f = 0; f < sizeof functions / sizeof *functions && result == CUDA_SUCCESS; ++f) {
        if (vram->suffix == 0 && !strcmp(functions[f].name, "attention_mma")) continue; /* no f32 tensor-core path */
        snprintf(what, sizeof what, "uform_text_%s_%s", functions[f].name, suffixes[vram->suffix]);
        result = cuda->ModuleGetFunction(functions[f].function, copy->module, what);
    }
    int optin = 0;
    if (result == CUDA_SUCCESS)
        snprintf(what, sizeof what, "cuDeviceGetAttribute"),
            result = cuda->DeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, copy->device);
    copy->shared_optin = optin > 48 * 1024 ? optin : 48 * 1024;
    if (result == CUDA_SUCCESS)
        snprintf(what, sizeof what, "cuFuncSetAttribute"),
            result = cuda->FuncSetAttribute(copy->attention_simt, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            copy->shared_optin);
    if (result == CUDA_SUCCESS && copy->attention_mma)
        result = cuda->FuncSetAttribute(copy->attention_mma, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        copy->shared_optin);
    if (result != CUDA_SUCCESS) {
        status = uform_cuda_fail(result == CUDA_ERROR_OUT_OF_MEMORY ? uform_status_out_of_memory_k
                                                                     : uform_status_unsupported_k,
                                 result, "uform_model_open: %s on device %d", what, (int)copy->ordinal);
        goto done;
    }
    uform_lt_status_t lt_status = vram->lt->Create(&copy->lt);
    if (lt_status != 0) {
        copy->lt = NULL;
        status = uform_fail(uform_status_unsupported_k, "uform_model_open: cublasLtCreate on device %d returned %d (%s)",
                            (int)copy->ordinal, lt_status, vram->lt->path);
        goto done;
    }
    copy->word = copy->block + offsets->word;
    copy->position = copy->block + offsets->position;
    copy->type0 = offsets->has_type0 ? copy->block + offsets->type0 : 0;
    copy->embed_gamma = copy->block + offsets->embed_gamma;
    copy->embed_beta = copy->block + offsets->embed_beta;
    copy->projection = offsets->has_projection ? copy->block + offsets->projection : 0;
    for (size_t l = 0; l < layers_count; ++l) {
        CUdeviceptr *out = (CUdeviceptr *)&copy->layers[l];
        CUdeviceptr const *in = (CUdeviceptr const *)&layers[l];
        for (size_t f = 0; f < sizeof(vram_layer_t) / sizeof(CUdeviceptr); ++f) out[f] = copy->block + in[f];
    }
done:;
    CUcontext previous = NULL;
    cuda->CtxPopCurrent(&previous);
    return status;
}

uform_status_t uform_text_vram_open(struct uform_model_s *model, uform_vram_options_t const *options) {
    uform_cuda_t const *cuda = NULL;
    uform_cuda_device_t const *devices = NULL;
    size_t devices_count = 0;
    if (options && !options->devices && options->devices_count)
        return uform_fail(uform_status_invalid_argument_k, "uform_model_open: vram.devices is NULL with a count of %zu",
                          options->devices_count);
    uform_status_t status = uform_cuda(&cuda);
    if (status == uform_status_ok_k) status = uform_cuda_devices(&devices, &devices_count);
    if (status != uform_status_ok_k)
        return uform_fail(uform_status_unsupported_k, "uform_model_open: VRAM residency needs a GPU: %s",
                          uform_error_message());
    uform_cublaslt_t const *lt = NULL;
    if (uform_cublaslt(&lt) != uform_status_ok_k)
        return uform_fail(uform_status_unsupported_k, "uform_model_open: %s", uform_error_message());
    uform_text_tower_t const *tower = &model->text_replicas[0];
    if (tower->hidden > 1024 || tower->hidden % tower->heads || tower->embedding_dimensions > 1024 * 64)
        return uform_fail(uform_status_unsupported_k,
                          "uform_model_open: VRAM text towers are at most 1024 wide; this one is %zu with %zu heads",
                          tower->hidden, tower->heads);

    int32_t derived = 0;
    int32_t const *ordinals = &derived;
    size_t count = 1;
    if (options && options->devices_count) ordinals = options->devices, count = options->devices_count;
    else derived = (int32_t)uform_cuda_pick_free_device(NULL);
    for (size_t i = 0; i < count; ++i) {
        if (ordinals[i] < 0 || (size_t)ordinals[i] >= devices_count)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_model_open: vram.devices[%zu] is %d; this machine has %zu GPUs", i,
                              (int)ordinals[i], devices_count);
        for (size_t j = 0; j < i; ++j)
            if (ordinals[j] == ordinals[i])
                return uform_fail(uform_status_invalid_argument_k, "uform_model_open: device %d is named twice",
                                  (int)ordinals[i]);
    }

    uform_text_vram_t *vram = (uform_text_vram_t *)calloc(1, sizeof *vram);
    vram_image_t image = {0};
    vram_offsets_t offsets;
    size_t layers_count = tower->layers_count;
    vram_layer_t *layers = (vram_layer_t *)calloc(layers_count ? layers_count : 1, sizeof(vram_layer_t));
    if (vram) vram->copies = (vram_copy_t *)calloc(count, sizeof(vram_copy_t));
    if (!vram || !layers || !vram->copies) {
        free(layers);
        if (vram) free(vram->copies);
        free(vram);
        return uform_fail(uform_status_out_of_memory_k, "uform_model_open: out of memory");
    }
    vram->cuda = cuda, vram->lt = lt;
    vram->suffix = tower->weights_dtype == uform_dtype_f32_k ? 0 : tower->weights_dtype == uform_dtype_bf16_k ? 1 : 2;
    vram->lt_type = vram->suffix == 0 ? uform_lt_r_32f_k : vram->suffix == 1 ? uform_lt_r_16bf_k : uform_lt_r_16f_k;
    model->vram = vram;
    image_tower(&image, tower, &offsets, layers);
    image.size = image.used;
    image.bytes = (unsigned char *)calloc(1, image.size ? image.size : 1);
    if (!image.bytes) {
        free(layers);
        uform_text_vram_free(model);
        return uform_fail(uform_status_out_of_memory_k, "uform_model_open: no memory for a %zu-byte weights image",
                          image.size);
    }
    image_tower(&image, tower, &offsets, layers);
    for (size_t i = 0; i < count && status == uform_status_ok_k; ++i) {
        vram_copy_t *copy = &vram->copies[i];
        pthread_mutex_init(&copy->lock, NULL);
        ++vram->count; /* counted first, so a failure releases what was made */
        copy->ordinal = ordinals[i];
        copy->device = devices[ordinals[i]].device;
        copy->multiprocessors = devices[ordinals[i]].multiprocessors ? devices[ordinals[i]].multiprocessors : 1;
        copy->layers = (vram_layer_t *)calloc(layers_count ? layers_count : 1, sizeof(vram_layer_t));
        if (!copy->layers) status = uform_fail(uform_status_out_of_memory_k, "uform_model_open: out of memory");
        else status = copy_open(vram, copy, &image, &offsets, layers, layers_count);
    }
    free(image.bytes);
    free(layers);
    if (status != uform_status_ok_k) {
        char message[1024];
        snprintf(message, sizeof message, "%s", uform_error_message());
        uform_text_vram_free(model);
        return uform_fail(status, "%s", message);
    }
    return uform_status_ok_k;
}
