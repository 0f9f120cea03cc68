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
#include "models/text_vram.h"

#include "cublaslt.h"
#include "cuda_driver.h"
#include "internal.h"
#include "kernels/kernels.h"

#include <math.h>    // `sqrt`
#include <pthread.h> // `pthread_mutex_t`
#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `memcpy`

#if UFORM_WITH_CUDA

#define VRAM_ALIGN 256u
#define VRAM_CACHE 48u

typedef struct vram_layer_t {
    CUdeviceptr qkv_weight, qkv_bias, output_weight, output_bias, norm1_gamma, norm1_beta;
    CUdeviceptr up_weight, up_bias, down_weight, down_bias, norm2_gamma, norm2_beta;
} vram_layer_t;

typedef struct vram_algo_t {
    size_t m, n, k, workspace;
    int epilogue, residual, valid;
    uform_lt_algo_t algo;
} vram_algo_t;

/** A captured chunk: the key names everything its launches depend on (see `enqueue_chunk`). */
typedef struct vram_graph_t {
    uint64_t key[12];
    int state;      /**< 0 empty, 1 seen once (captured on the next sighting), 2 captured, 3 not capturable. */
    CUgraphExec exec;
    uint64_t used;  /**< LRU clock. */
} vram_graph_t;

#define VRAM_GRAPHS 16u

typedef struct vram_copy_t {
    int32_t ordinal;
    CUdevice device;
    CUcontext context; /**< Retained primary context, or NULL before. */
    uint32_t multiprocessors;
    int shared_optin;  /**< Dynamic shared memory a block may opt into. */
    CUdeviceptr block;
    CUmodule module;
    CUfunction embed, layer_norm, gelu, attention_simt, attention_mma, pool, finish;
    uform_lt_handle_t lt;
    CUdeviceptr word, position, type0, embed_gamma, embed_beta, projection;
    vram_layer_t *layers;
    pthread_mutex_t lock; /**< Guards `cache` and `graphs` (held across a graph's launch). */
    vram_algo_t cache[VRAM_CACHE];
    vram_graph_t graphs[VRAM_GRAPHS];
    uint64_t graph_clock;
} vram_copy_t;

typedef struct uform_text_vram_s {
    uform_cuda_t const *cuda;
    uform_cublaslt_t const *lt;
    size_t count;
    vram_copy_t *copies;
    int lt_type; /**< CUDA_R_* of the activations and weights. */
    int suffix;  /**< 0 f32, 1 bf16, 2 f16. */
} uform_text_vram_t;

static size_t align_up(size_t value, size_t alignment) { return (value + alignment - 1) / alignment * alignment; }
static size_t element_size(uform_dtype_t dtype) { return dtype == uform_dtype_f32_k ? 4 : 2; }

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

/* ---- Encoding ---- */

/** One device's share of a job: encoded texts [first, end), its chunk capacity, its scratch plan. */
typedef struct vram_share_t {
    vram_copy_t *copy;
    size_t first, end;         /**< Encoded texts. */
    size_t tokens;             /**< Their tokens. */
    size_t chunk_tokens;       /**< Tokens per chunk at most (a chunk's texts are at most as many). */
    CUdeviceptr scratch;       /**< The slot's scratch, once its callback ran. */
    CUstream stream;
    CUcontext context;
} vram_share_t;

typedef struct vram_job_t {
    struct uform_model_s const *model;
    uform_text_vram_t *vram;
    uform_text_tower_t const *tower;
    char const *const *texts;
    size_t const *lengths;
    size_t count, context;
    int32_t *slots;            /**< [count][context] ids. */
    size_t *produced;          /**< [count] ids per text. */
    uform_status_t *items;     /**< [count] tokenisation statuses. */
    /* Packed. */
    size_t encoded, total, longest;
    size_t *order;             /**< [encoded] original indices. */
    int32_t *ids, *positions;  /**< [total] */
    size_t *offsets;           /**< [encoded + 1] */
    int32_t *chunk_offsets;    /**< [encoded + 1] scratch for one chunk's offsets at a time (per device, see below) */
    /* Output. */
    uform_embeddings_t out;
    size_t dims, row_bytes;
    unsigned char *host_rows;  /**< [encoded][row_bytes] */
    uform_status_t *statuses;
    /* Devices. */
    size_t shares_count;
    vram_share_t *shares;
    size_t workspace;          /**< cuBLASLt workspace bytes per device. */
    size_t chunks;             /**< Chunks enqueued so far, over all devices. */
} vram_job_t;

static void job_free(vram_job_t *job) {
    if (!job) return;
    free(job->slots), free(job->produced), free(job->items), free(job->order), free(job->ids), free(job->positions);
    free(job->offsets), free(job->chunk_offsets), free(job->host_rows), free(job->shares);
    free(job);
}

static void tokenize_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    vram_job_t *job = (vram_job_t *)context;
    char const *text = job->texts[task] ? job->texts[task] : "";
    size_t length = job->lengths ? job->lengths[task] : strlen(text), produced = 0;
    uform_status_t status = uform_tokenizer_encode(job->model->tokenizer, text, length, job->context,
                                                   job->slots + task * job->context, job->context, &produced);
    if (status == uform_status_ok_k && produced > job->context) produced = job->context;
    if (status == uform_status_ok_k && produced == 0) status = uform_status_invalid_argument_k;
    job->produced[task] = status == uform_status_ok_k ? produced : 0;
    job->items[task] = status;
}

/** Bytes of one chunk's buffers for `tokens` tokens (and as many texts at most), activations of `element` bytes. */
static size_t chunk_bytes(uform_text_tower_t const *tower, size_t tokens, size_t element) {
    size_t hidden = tower->hidden, texts = tokens;
    size_t bytes = 0;
    bytes += align_up(tokens * 4, VRAM_ALIGN) * 2 + align_up((texts + 1) * 4, VRAM_ALIGN); /* ids, positions, offsets */
    bytes += align_up(tokens * hidden * element, VRAM_ALIGN) * 3;                         /* x, ctx, tmp */
    bytes += align_up(tokens * 3 * hidden * element, VRAM_ALIGN);                         /* qkv */
    bytes += align_up(tokens * tower->intermediate * element, VRAM_ALIGN);                 /* ffn */
    bytes += align_up(texts * hidden * element, VRAM_ALIGN);                              /* pooled */
    bytes += align_up(texts * tower->embedding_dimensions * element, VRAM_ALIGN);          /* projected */
    return bytes;
}

/** Pointers into one device's scratch: [workspace][output rows][chunk buffers]. */
typedef struct vram_buffers_t {
    CUdeviceptr workspace, out, ids, positions, offsets, x, ctx, tmp, qkv, ffn, pooled, projected;
} vram_buffers_t;

static vram_buffers_t buffers_at(vram_job_t const *job, vram_share_t const *share, CUdeviceptr base) {
    uform_text_tower_t const *tower = job->tower;
    size_t element = element_size(tower->weights_dtype), hidden = tower->hidden, tokens = share->chunk_tokens;
    vram_buffers_t b;
    CUdeviceptr at = base;
#define TAKE(field, bytes) (b.field = at, at += align_up((bytes), VRAM_ALIGN))
    TAKE(workspace, job->workspace);
    TAKE(out, (share->end - share->first) * job->row_bytes);
    TAKE(ids, tokens * 4);
    TAKE(positions, tokens * 4);
    TAKE(offsets, (tokens + 1) * 4);
    TAKE(x, tokens * hidden * element);
    TAKE(ctx, tokens * hidden * element);
    TAKE(tmp, tokens * hidden * element);
    TAKE(qkv, tokens * 3 * hidden * element);
    TAKE(ffn, tokens * tower->intermediate * element);
    TAKE(pooled, tokens * hidden * element);
    TAKE(projected, tokens * tower->embedding_dimensions * element);
#undef TAKE
    return b;
}

static size_t share_scratch(vram_job_t const *job, vram_share_t const *share) {
    return align_up(job->workspace, VRAM_ALIGN) + align_up((share->end - share->first) * job->row_bytes, VRAM_ALIGN) +
           chunk_bytes(job->tower, share->chunk_tokens, element_size(job->tower->weights_dtype));
}

/* ---- Profiling (UFORM_GPU_PROFILE=1): every step synchronised and timed, graphs off; for bench_text_gpu ---- */

#define VRAM_PROFILE_STEPS 24
static int vram_profile = -1;
static pthread_mutex_t vram_profile_lock = PTHREAD_MUTEX_INITIALIZER;
static char const *vram_profile_names[VRAM_PROFILE_STEPS];
static double vram_profile_seconds[VRAM_PROFILE_STEPS];
static size_t vram_profile_counts[VRAM_PROFILE_STEPS];

static int profiling(void) {
    if (vram_profile < 0) {
        char const *value = getenv("UFORM_GPU_PROFILE");
        vram_profile = value && *value && *value != '0';
    }
    return vram_profile;
}

static void profile_add(char const *name, double seconds) {
    pthread_mutex_lock(&vram_profile_lock);
    for (size_t i = 0; i < VRAM_PROFILE_STEPS; ++i)
        if (!vram_profile_names[i] || !strcmp(vram_profile_names[i], name)) {
            vram_profile_names[i] = name, vram_profile_seconds[i] += seconds, ++vram_profile_counts[i];
            break;
        }
    pthread_mutex_unlock(&vram_profile_lock);
}

void uform_text_vram_profile_report(FILE *file) {
    double total = 0;
    for (size_t i = 0; i < VRAM_PROFILE_STEPS && vram_profile_names[i]; ++i) total += vram_profile_seconds[i];
    for (size_t i = 0; i < VRAM_PROFILE_STEPS && vram_profile_names[i]; ++i)
        fprintf(file, "profile %-16s %8zu runs %10.3f ms %5.1f%%\n", vram_profile_names[i], vram_profile_counts[i],
                vram_profile_seconds[i] * 1e3, total > 0 ? 100.0 * vram_profile_seconds[i] / total : 0.0);
}

static uform_status_t launch_failed(uform_cuda_t const *cuda, CUresult result, char const *what, int32_t ordinal) {
    (void)cuda;
    return uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k : uform_status_invalid_argument_k,
                           result, "uform_encode_texts: %s on device %d", what, (int)ordinal);
}

static uform_status_t launch(vram_job_t *job, vram_share_t *share, CUfunction function, char const *name, unsigned grid,
                             unsigned block, unsigned shared, void **arguments) {
    double start = 0;
    if (profiling()) job->vram->cuda->StreamSynchronize(share->stream), start = uform_now_seconds();
    CUresult result = job->vram->cuda->LaunchKernel(function, grid, 1, 1, block, 1, 1, shared, share->stream, arguments, NULL);
    if (profiling()) job->vram->cuda->StreamSynchronize(share->stream), profile_add(name, uform_now_seconds() - start);
    return result == CUDA_SUCCESS ? uform_status_ok_k : launch_failed(job->vram->cuda, result, name, share->copy->ordinal);
}

/** D[m][n] = A[m][k] W[n][k]^T (+ bias[n]) (+ C[m][n] when `residual`) (GELU with the GELU epilogue),
 *  in cuBLASLt's column-major terms: D^T (n x m) = W (n x k) A^T (k x m). */
static uform_status_t gemm_run(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t m, size_t n, size_t k,
                               CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d,
                               int epilogue);

/** `gemm_run`, timed under `label` when profiling. */
static uform_status_t gemm(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, char const *label, size_t m,
                           size_t n, size_t k, CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual,
                           CUdeviceptr d, int epilogue) {
    if (!profiling()) return gemm_run(job, share, b, m, n, k, a, w, bias, residual, d, epilogue);
    job->vram->cuda->StreamSynchronize(share->stream);
    double start = uform_now_seconds();
    uform_status_t status = gemm_run(job, share, b, m, n, k, a, w, bias, residual, d, epilogue);
    job->vram->cuda->StreamSynchronize(share->stream);
    profile_add(label, uform_now_seconds() - start);
    return status;
}

static uform_status_t gemm_run(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t m, size_t n, size_t k,
                               CUdeviceptr a, CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d,
                               int epilogue) {
    uform_cublaslt_t const *lt = job->vram->lt;
    vram_copy_t *copy = share->copy;
    int type = job->vram->lt_type;
    uform_lt_desc_t desc = NULL;
    uform_lt_layout_t la = NULL, lb = NULL, lc = NULL;
    uform_lt_preference_t preference = NULL;
    uform_status_t status = uform_status_ok_k;
    int lt_status = lt->MatmulDescCreate(&desc, uform_lt_compute_32f_k, uform_lt_r_32f_k);
    int32_t transpose = uform_lt_op_t_k, plain = uform_lt_op_n_k;
    uint32_t epilogue_value = (uint32_t)epilogue;
    void *bias_pointer = (void *)(uintptr_t)bias;
    if (!lt_status) lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_transa_k, &transpose, sizeof transpose);
    if (!lt_status) lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_transb_k, &plain, sizeof plain);
    if (!lt_status) lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_epilogue_k, &epilogue_value, sizeof epilogue_value);
    if (!lt_status && epilogue != uform_lt_epilogue_default_k)
        lt_status = lt->MatmulDescSetAttribute(desc, uform_lt_desc_bias_pointer_k, &bias_pointer, sizeof bias_pointer);
    if (!lt_status) lt_status = lt->MatrixLayoutCreate(&la, type, k, n, (int64_t)k);
    if (!lt_status) lt_status = lt->MatrixLayoutCreate(&lb, type, k, m, (int64_t)k);
    if (!lt_status) lt_status = lt->MatrixLayoutCreate(&lc, type, n, m, (int64_t)n);
    uform_lt_algo_t algo;
    int found = 0;
    if (!lt_status) {
        pthread_mutex_lock(&copy->lock);
        for (size_t i = 0; i < VRAM_CACHE; ++i) {
            vram_algo_t const *entry = &copy->cache[i];
            if (entry->valid && entry->m == m && entry->n == n && entry->k == k && entry->workspace == job->workspace &&
                entry->epilogue == epilogue && entry->residual == (residual != 0))
                algo = entry->algo, found = 1;
        }
        pthread_mutex_unlock(&copy->lock);
    }
    if (!lt_status && !found) {
        uint64_t workspace = job->workspace;
        uform_lt_heuristic_t heuristic;
        int returned = 0;
        lt_status = lt->MatmulPreferenceCreate(&preference);
        if (!lt_status)
            lt_status = lt->MatmulPreferenceSetAttribute(preference, uform_lt_pref_max_workspace_k, &workspace, sizeof workspace);
        if (!lt_status)
            lt_status = lt->MatmulAlgoGetHeuristic(copy->lt, desc, la, lb, lc, lc, preference, 1, &heuristic, &returned);
        if (!lt_status && returned < 1) {
            status = uform_fail(uform_status_unsupported_k,
                                "uform_encode_texts: cuBLASLt has no algorithm for a %zu x %zu x %zu product on device %d",
                                m, n, k, (int)copy->ordinal);
        } else if (!lt_status) {
            algo = heuristic.algo, found = 1;
            pthread_mutex_lock(&copy->lock);
            size_t slot = (m * 31 + n * 7 + k + (size_t)epilogue * 3 + (residual != 0)) % VRAM_CACHE;
            copy->cache[slot] = (vram_algo_t){.m = m, .n = n, .k = k, .workspace = job->workspace, .epilogue = epilogue,
                                              .residual = residual != 0, .valid = 1, .algo = algo};
            pthread_mutex_unlock(&copy->lock);
        }
    }
    if (!lt_status && found) {
        float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
        lt_status = lt->Matmul(copy->lt, desc, &alpha, (void const *)(uintptr_t)w, la, (void const *)(uintptr_t)a, lb,
                               &beta, (void const *)(uintptr_t)(residual ? residual : d), lc, (void *)(uintptr_t)d, lc,
                               &algo, (void *)(uintptr_t)b->workspace, job->workspace, share->stream);
    }
    if (lt_status && status == uform_status_ok_k)
        status = uform_fail(uform_status_unsupported_k,
                            "uform_encode_texts: cuBLASLt failed (status %d) on a %zu x %zu x %zu product on device %d",
                            lt_status, m, n, k, (int)copy->ordinal);
    if (preference) lt->MatmulPreferenceDestroy(preference);
    if (la) lt->MatrixLayoutDestroy(la);
    if (lb) lt->MatrixLayoutDestroy(lb);
    if (lc) lt->MatrixLayoutDestroy(lc);
    if (desc) lt->MatmulDescDestroy(desc);
    return status;
}

#define CHECK_STEP(expression)                                                                                         \
    do {                                                                                                               \
        uform_status_t step_ = (expression);                                                                           \
        if (step_ != uform_status_ok_k) return step_;                                                                  \
    } while (0)

static uform_status_t enqueue_graph(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t texts, size_t tokens, size_t longest);

/** Enqueues one chunk: encoded texts [first, end) of the job, written at output row `first - share->first`. */
static uform_status_t enqueue_chunk(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t end, int32_t *offsets) {
    uform_cuda_t const *cuda = job->vram->cuda;
    vram_copy_t *copy = share->copy;
    size_t texts = end - first, base = job->offsets[first], tokens = job->offsets[end] - base, longest = 0;
    for (size_t e = first; e <= end; ++e) offsets[e - first] = (int32_t)(job->offsets[e] - base);
    for (size_t e = first; e < end; ++e)
        if (job->offsets[e + 1] - job->offsets[e] > longest) longest = job->offsets[e + 1] - job->offsets[e];
    CUresult result = cuda->MemcpyHtoDAsync(b->ids, job->ids + base, tokens * 4, share->stream);
    if (result == CUDA_SUCCESS) result = cuda->MemcpyHtoDAsync(b->positions, job->positions + base, tokens * 4, share->stream);
    if (result == CUDA_SUCCESS) result = cuda->MemcpyHtoDAsync(b->offsets, offsets, (texts + 1) * 4, share->stream);
    if (result != CUDA_SUCCESS) return launch_failed(cuda, result, "cuMemcpyHtoDAsync", copy->ordinal);
    return enqueue_graph(job, share, b, first, texts, tokens, longest);
}

/** The chunk's launches (everything after the uploads): what a graph captures. */
static uform_status_t enqueue_compute(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                      size_t texts, size_t tokens, size_t longest) {
    uform_text_tower_t const *tower = job->tower;
    vram_copy_t *copy = share->copy;

    int hidden = (int)tower->hidden, heads = (int)tower->heads, head = hidden / heads, inter = (int)tower->intermediate;
    int tokens_i = (int)tokens, texts_i = (int)texts;
    float epsilon = (float)tower->layer_norm_epsilon, scale = (float)(1.0 / sqrt((double)head));
    CUdeviceptr type0 = copy->type0;
    {
        void *arguments[] = {(void *)&b->x, (void *)&b->ids, (void *)&b->positions, &copy->word, &copy->position, &type0,
                             &copy->embed_gamma, &copy->embed_beta, &tokens_i, &hidden, &epsilon};
        CHECK_STEP(launch(job, share, copy->embed, "embed", (unsigned)((tokens + 3) / 4), 128, 0, arguments));
    }
    /* Attention geometry for this chunk's longest text. */
    int padded = (int)align_up(longest, 16);
    size_t element = element_size(tower->weights_dtype);
    size_t ldh = (size_t)head + 8, lds = (size_t)(padded > head ? padded : head) + 4, ldp = (size_t)padded + 8;
    size_t mma_shared = 2 * (size_t)padded * ldh * element +
                        4 * (16 * lds * 4 + 16 * ldp * element + 16 * 4 + 16 * ldh * element);
    size_t simt_shared = (longest * (size_t)(head + 1) + longest * (size_t)head + 4 * ((size_t)head + longest)) * 4;
    int use_mma = copy->attention_mma && head % 16 == 0 && mma_shared <= (size_t)copy->shared_optin &&
                  !getenv("UFORM_GPU_ATTENTION_SIMT");
    if (!use_mma && simt_shared > (size_t)copy->shared_optin)
        return uform_fail(uform_status_unsupported_k,
                          "uform_encode_texts: attention over %zu tokens with %d-wide heads needs %zu bytes of shared "
                          "memory; device %d allows %d",
                          longest, head, simt_shared, (int)copy->ordinal, copy->shared_optin);
    unsigned blocks = (unsigned)(texts * (size_t)heads);
    unsigned row_blocks = (unsigned)((tokens + 3) / 4);
    for (size_t l = 0; l < tower->layers_count; ++l) {
        vram_layer_t const *layer = &copy->layers[l];
        CHECK_STEP(gemm(job, share, b, "gemm qkv", tokens, 3 * (size_t)hidden, (size_t)hidden, b->x, layer->qkv_weight, layer->qkv_bias,
                        0, b->qkv, uform_lt_epilogue_bias_k));
        if (use_mma) {
            void *arguments[] = {(void *)&b->ctx, (void *)&b->qkv, (void *)&b->offsets, &heads, &head, &scale, &padded};
            CHECK_STEP(launch(job, share, copy->attention_mma, "attention_mma", blocks, 128, (unsigned)mma_shared, arguments));
        } else {
            void *arguments[] = {(void *)&b->ctx, (void *)&b->qkv, (void *)&b->offsets, &heads, &head, &scale};
            CHECK_STEP(launch(job, share, copy->attention_simt, "attention_simt", blocks, 128, (unsigned)simt_shared, arguments));
        }
        CHECK_STEP(gemm(job, share, b, "gemm out", tokens, (size_t)hidden, (size_t)hidden, b->ctx, layer->output_weight,
                        layer->output_bias, b->x, b->tmp, uform_lt_epilogue_bias_k));
        {
            void *arguments[] = {(void *)&b->x, (void *)&b->tmp, (void *)&layer->norm1_gamma, (void *)&layer->norm1_beta,
                                 &tokens_i, &hidden, &epsilon};
            CHECK_STEP(launch(job, share, copy->layer_norm, "layer_norm", row_blocks, 128, 0, arguments));
        }
        int exact = tower->weights_dtype == uform_dtype_f32_k;
        CHECK_STEP(gemm(job, share, b, "gemm up", tokens, (size_t)inter, (size_t)hidden, b->x, layer->up_weight, layer->up_bias, 0,
                        b->ffn, exact ? uform_lt_epilogue_bias_k : uform_lt_epilogue_gelu_bias_k));
        if (exact) {
            unsigned long long elements = (unsigned long long)tokens * (unsigned long long)inter;
            unsigned grid = (unsigned)((elements + 255) / 256 > 65535 ? 65535 : (elements + 255) / 256);
            void *arguments[] = {(void *)&b->ffn, &elements};
            CHECK_STEP(launch(job, share, copy->gelu, "gelu", grid, 256, 0, arguments));
        }
        CHECK_STEP(gemm(job, share, b, "gemm down", tokens, (size_t)hidden, (size_t)inter, b->ffn, layer->down_weight, layer->down_bias,
                        b->x, b->tmp, uform_lt_epilogue_bias_k));
        {
            void *arguments[] = {(void *)&b->x, (void *)&b->tmp, (void *)&layer->norm2_gamma, (void *)&layer->norm2_beta,
                                 &tokens_i, &hidden, &epsilon};
            CHECK_STEP(launch(job, share, copy->layer_norm, "layer_norm", row_blocks, 128, 0, arguments));
        }
    }
    int mean = tower->pooling == uform_pooling_mean_k;
    {
        void *arguments[] = {(void *)&b->pooled, (void *)&b->x, (void *)&b->offsets, &hidden, &mean};
        CHECK_STEP(launch(job, share, copy->pool, "pool", (unsigned)texts, 128, 0, arguments));
    }
    CUdeviceptr source = b->pooled;
    int width = (int)tower->embedding_dimensions;
    if (copy->projection) {
        CHECK_STEP(gemm(job, share, b, "gemm projection", texts, tower->embedding_dimensions, (size_t)hidden, b->pooled, copy->projection, 0, 0,
                        b->projected, uform_lt_epilogue_default_k));
        source = b->projected;
    }
    {
        CUdeviceptr out = b->out + (first - share->first) * job->row_bytes;
        int dims = (int)job->dims, layout = tower->normalize, user = job->out.normalize != 0;
        int out_dtype = job->out.dtype == uform_dtype_f32_k ? 0 : job->out.dtype == uform_dtype_bf16_k ? 1 : 2;
        void *arguments[] = {&out, &source, &texts_i, &width, &dims, &layout, &user, &out_dtype};
        CHECK_STEP(launch(job, share, copy->finish, "finish", (unsigned)((texts + 3) / 4), 128, 0, arguments));
    }
    return uform_status_ok_k;
}

/** Launches the chunk as a CUDA graph when its shape was seen before (captured on the second
 *  sighting, replayed after), else directly. UFORM_GPU_NO_GRAPHS=1 turns graphs off. A capture that
 *  fails marks the shape as not capturable and the chunk runs directly. */
static uform_status_t enqueue_graph(vram_job_t *job, vram_share_t *share, vram_buffers_t const *b, size_t first,
                                    size_t texts, size_t tokens, size_t longest) {
    static int disabled = -1;
    if (disabled < 0) {
        char const *value = getenv("UFORM_GPU_NO_GRAPHS");
        disabled = value && *value && *value != '0';
    }
    if (disabled || profiling()) return enqueue_compute(job, share, b, first, texts, tokens, longest);
    uform_cuda_t const *cuda = job->vram->cuda;
    vram_copy_t *copy = share->copy;
    uint64_t const key[12] = {(uint64_t)(uintptr_t)share->stream, (uint64_t)share->scratch, job->workspace,
                              (share->end - share->first) * job->row_bytes, share->chunk_tokens, tokens, texts,
                              align_up(longest, 16), (first - share->first) * job->row_bytes, job->dims,
                              (uint64_t)job->out.dtype, (uint64_t)(job->out.normalize != 0)};
    int capture = 0;
    pthread_mutex_lock(&copy->lock);
    vram_graph_t *entry = NULL, *oldest = &copy->graphs[0];
    for (size_t g = 0; g < VRAM_GRAPHS; ++g) {
        vram_graph_t *candidate = &copy->graphs[g];
        if (candidate->state && !memcmp(candidate->key, key, sizeof key)) entry = candidate;
        if (candidate->used < oldest->used) oldest = candidate;
    }
    if (entry && entry->state == 2) {
        entry->used = ++copy->graph_clock;
        CUresult result = cuda->GraphLaunch(entry->exec, share->stream);
        pthread_mutex_unlock(&copy->lock);
        return result == CUDA_SUCCESS ? uform_status_ok_k : launch_failed(cuda, result, "cuGraphLaunch", copy->ordinal);
    }
    if (entry) capture = entry->state == 1;
    else {
        if (oldest->exec) cuda->GraphExecDestroy(oldest->exec);
        memset(oldest, 0, sizeof *oldest);
        memcpy(oldest->key, key, sizeof key);
        oldest->state = 1, oldest->used = ++copy->graph_clock;
    }
    pthread_mutex_unlock(&copy->lock);
    if (!capture) return enqueue_compute(job, share, b, first, texts, tokens, longest);

    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    int captured = 0;
    if (cuda->StreamBeginCapture(share->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS) {
        uform_status_t status = enqueue_compute(job, share, b, first, texts, tokens, longest);
        CUresult ended = cuda->StreamEndCapture(share->stream, &graph);
        captured = status == uform_status_ok_k && ended == CUDA_SUCCESS && graph &&
                   cuda->GraphInstantiateWithFlags(&exec, graph, 0) == CUDA_SUCCESS;
        if (graph) cuda->GraphDestroy(graph);
    }
    pthread_mutex_lock(&copy->lock);
    entry = NULL;
    for (size_t g = 0; g < VRAM_GRAPHS; ++g)
        if (copy->graphs[g].state && !memcmp(copy->graphs[g].key, key, sizeof key)) entry = &copy->graphs[g];
    if (captured && entry && entry->state != 2) entry->exec = exec, entry->state = 2, exec = NULL;
    else if (!captured && entry) entry->state = 3;
    CUresult result = CUDA_SUCCESS;
    if (captured) result = cuda->GraphLaunch(entry && entry->exec ? entry->exec : exec, share->stream);
    pthread_mutex_unlock(&copy->lock);
    if (exec) {
        /* Another thread stored the same shape first, or it was evicted: ours ran, free it after. */
        if (!entry || entry->exec != exec) cuda->GraphExecDestroy(exec);
    }
    if (!captured) return enqueue_compute(job, share, b, first, texts, tokens, longest);
    return result == CUDA_SUCCESS ? uform_status_ok_k : launch_failed(cuda, result, "cuGraphLaunch", copy->ordinal);
}

/** Copies every device's rows back (waiting on each stream in turn), then writes them in input order. */
static uform_status_t gather(vram_job_t *job) {
    uform_cuda_t const *cuda = job->vram->cuda;
    for (size_t d = 0; d < job->shares_count; ++d) {
        vram_share_t *share = &job->shares[d];
        if (share->end == share->first) continue;
        CUcontext previous = NULL;
        CUresult result = cuda->CtxPushCurrent(share->context);
        if (result != CUDA_SUCCESS) return launch_failed(cuda, result, "cuCtxPushCurrent", share->copy->ordinal);
        vram_buffers_t b = buffers_at(job, share, share->scratch);
        result = cuda->MemcpyDtoHAsync(job->host_rows + share->first * job->row_bytes, b.out,
                                       (share->end - share->first) * job->row_bytes, share->stream);
        if (result == CUDA_SUCCESS) result = cuda->StreamSynchronize(share->stream);
        cuda->CtxPopCurrent(&previous);
        if (result != CUDA_SUCCESS) return launch_failed(cuda, result, "copying embeddings back", share->copy->ordinal);
    }
    size_t stride = job->out.stride ? job->out.stride : job->row_bytes;
    unsigned char *rows = (unsigned char *)job->out.data;
    size_t next = 0;
    for (size_t i = 0; i < job->count; ++i) {
        if (next < job->encoded && job->order[next] == i) {
            memcpy(rows + i * stride, job->host_rows + next * job->row_bytes, job->row_bytes);
            ++next;
        } else memset(rows + i * stride, 0, job->row_bytes);
        if (job->statuses) job->statuses[i] = job->items[i];
    }
    return uform_status_ok_k;
}

static uform_status_t device_part(void *context, uform_device_slot_t const *slot) {
    vram_job_t *job = (vram_job_t *)context;
    vram_share_t *share = &job->shares[slot->device_index];
    share->scratch = (CUdeviceptr)slot->scratch;
    share->stream = (CUstream)slot->stream;
    share->context = (CUcontext)slot->cu_context;
    if (share->end > share->first) {
        vram_buffers_t b = buffers_at(job, share, share->scratch);
        for (size_t e = share->first; e < share->end;) {
            size_t first = e, base = job->offsets[e];
            while (e < share->end && job->offsets[e + 1] - base <= share->chunk_tokens) ++e;
            /* Each chunk's offsets get their own stretch (texts + 1 entries), never reused within the job. */
            CHECK_STEP(enqueue_chunk(job, share, &b, first, e, job->chunk_offsets + first + job->chunks++));
        }
    }
    if (slot->device_index + 1 < job->shares_count) return uform_status_ok_k;
    return gather(job);
}

static uform_status_t vram_run(vram_job_t *job, uform_executor_t executor,
                               uform_executor_description_t const *executor_description, uform_outcome_t *outcome);

/** A job for `count` items on the executor's devices, or NULL with the status in `*status_out`. */
static uform_status_t vram_refuse(uform_outcome_t *outcome, uform_status_t status) {
    if (outcome) {
        uform_outcome_begin(outcome, NULL);
        uform_outcome_finish(outcome, status, status == uform_status_ok_k ? "" : uform_error_message());
    }
    return status;
}

static vram_job_t *vram_job_new(uform_executor_t executor, struct uform_model_s const *model, size_t count,
                                uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                uform_executor_description_t *description, uform_status_t *status_out) {
    uform_text_vram_t *vram = (uform_text_vram_t *)model->vram;
    uform_vram_member_t const *members = NULL;
    size_t members_count = uform_vram_members(executor, &members);
    uform_status_t status = uform_executor_describe(executor, description);
    vram_job_t *job = NULL;
    if (status != uform_status_ok_k) goto failed;
    if (!vram || !members_count) {
        status = uform_fail(uform_status_residency_mismatch_k, "uform_encode_texts: the executor drives no GPU");
        goto failed;
    }
    job = (vram_job_t *)calloc(1, sizeof *job);
    if (!job) {
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: out of memory");
        goto failed;
    }
    job->model = model, job->vram = vram, job->tower = &model->text_replicas[0];
    job->count = count, job->context = job->tower->context;
    job->out = *embeddings, job->statuses = statuses;
    job->dims = embeddings->dimensions ? embeddings->dimensions : job->tower->embedding_dimensions;
    job->row_bytes = job->dims * element_size(embeddings->dtype);
    job->shares_count = members_count;
    job->shares = (vram_share_t *)calloc(members_count, sizeof(vram_share_t));
    if (!job->shares) {
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: out of memory");
        goto failed;
    }
    for (size_t d = 0; d < members_count; ++d) {
        for (size_t c = 0; c < vram->count; ++c)
            if (vram->copies[c].ordinal == members[d].ordinal) job->shares[d].copy = &vram->copies[c];
        if (!job->shares[d].copy) {
            status = uform_fail(uform_status_residency_mismatch_k,
                                "uform_encode_texts: the executor's device %d holds no copy of the model; open the model "
                                "with that device among its vram.devices",
                                (int)members[d].ordinal);
            goto failed;
        }
    }
    *status_out = uform_status_ok_k;
    return job;
failed:
    job_free(job);
    *status_out = status;
    return NULL;
}

uform_status_t uform_text_vram_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                          int32_t const *ids, size_t const *offsets, size_t count,
                                          uform_embeddings_t const *embeddings, uform_outcome_t *outcome) {
    uform_executor_description_t description;
    uform_status_t status;
    vram_job_t *job = vram_job_new(executor, model, count, embeddings, NULL, &description, &status);
    if (!job) return vram_refuse(outcome, status);
    size_t longest = 1;
    for (size_t i = 0; i < count; ++i)
        if (offsets[i + 1] - offsets[i] > longest) longest = offsets[i + 1] - offsets[i];
    if (longest > job->context) {
        job_free(job);
        return vram_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                               "uform_encode_texts: a text of %zu ids; the model's context is %zu",
                                               longest, job->tower->context));
    }
    job->slots = (int32_t *)malloc((count ? count : 1) * job->context * sizeof(int32_t));
    job->produced = (size_t *)calloc(count ? count : 1, sizeof(size_t));
    job->items = (uform_status_t *)calloc(count ? count : 1, sizeof(uform_status_t));
    if (!job->slots || !job->produced || !job->items) {
        job_free(job);
        return vram_refuse(outcome, uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: out of memory"));
    }
    for (size_t i = 0; i < count; ++i) {
        size_t length = offsets[i + 1] - offsets[i];
        for (size_t t = 0; t < length; ++t) {
            int32_t id = ids[offsets[i] + t];
            if (id < 0 || (size_t)id >= job->tower->word_embeddings.rows) {
                job_free(job);
                return vram_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                       "uform_encode_texts: text %zu: token %zu is id %d; the "
                                                       "vocabulary has %zu",
                                                       i, t, (int)id, job->tower->word_embeddings.rows));
            }
        }
        memcpy(job->slots + i * job->context, ids + offsets[i], length * sizeof(int32_t));
        job->produced[i] = length;
        job->items[i] = length ? uform_status_ok_k : uform_status_invalid_argument_k;
    }
    return vram_run(job, executor, &description, outcome);
}



uform_status_t uform_text_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                      char const *const *texts, size_t const *lengths, size_t count,
                                      uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                      uform_outcome_t *outcome) {
    uform_executor_description_t description;
    uform_status_t status;
    vram_job_t *job = vram_job_new(executor, model, count, embeddings, statuses, &description, &status);
    if (!job) goto refused;
    job->texts = texts, job->lengths = lengths;
    /* 1. Tokenise on the decoder threads. */
    size_t slots = count * job->context;
    job->slots = (int32_t *)malloc((slots ? slots : 1) * sizeof(int32_t));
    job->produced = (size_t *)calloc(count ? count : 1, sizeof(size_t));
    job->items = (uform_status_t *)calloc(count ? count : 1, sizeof(uform_status_t));
    if (!job->slots || !job->produced || !job->items) {
        job_free(job);
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: no memory for the tokens of %zu texts", count);
        goto refused;
    }
    if (count) {
        uform_call_t tokenise = {.residency = uform_residency_vram_k, .schedule = uform_schedule_dynamic_k,
                                 .tasks = count, .task = tokenize_task, .context = job};
        status = uform_executor_call(executor, &tokenise, NULL);
        if (status != uform_status_ok_k) {
            job_free(job);
            goto refused;
        }
    }
    for (size_t i = 0; i < count; ++i) {
        if (job->items[i] == uform_status_ok_k) continue;
        if (!statuses || job->items[i] != uform_status_invalid_argument_k) {
            /* Tokenise it again here for the message. */
            char const *text = texts[i] ? texts[i] : "";
            size_t length = lengths ? lengths[i] : strlen(text), produced = 0;
            uform_status_t again = uform_tokenizer_encode(model->tokenizer, text, length, job->context,
                                                          job->slots + i * job->context, job->context, &produced);
            char message[512];
            snprintf(message, sizeof message, "%s",
                     again == uform_status_ok_k ? "the tokenizer produced no tokens" : uform_error_message());
            uform_status_t failed = job->items[i];
            job_free(job);
            status = uform_fail(failed, "uform_encode_texts: text %zu: %s", i, message);
            goto refused;
        }
    }

    return vram_run(job, executor, &description, outcome);

refused:
    if (outcome) {
        uform_outcome_begin(outcome, NULL);
        uform_outcome_finish(outcome, status, status == uform_status_ok_k ? "" : uform_error_message());
    }
    return status;
}

/** Packs, plans and runs a job whose `slots`, `produced` and `items` are filled; frees it. */
static uform_status_t vram_run(vram_job_t *job, uform_executor_t executor, uform_executor_description_t const *executor_description,
                               uform_outcome_t *outcome) {
    uform_status_t status = uform_status_ok_k;
    size_t count = job->count, members_count = job->shares_count, multiprocessors = 0;
    for (size_t d = 0; d < members_count; ++d) multiprocessors += job->shares[d].copy->multiprocessors;
    uform_executor_description_t description = *executor_description;
    /* 2. Pack the encoded texts, check positions. */
    uform_text_tower_t const *tower = job->tower;
    (void)executor;
    for (size_t i = 0; i < count; ++i)
        if (job->items[i] == uform_status_ok_k) {
            ++job->encoded, job->total += job->produced[i];
            if (job->produced[i] > job->longest) job->longest = job->produced[i];
        }
    job->order = (size_t *)malloc((job->encoded ? job->encoded : 1) * sizeof(size_t));
    job->offsets = (size_t *)malloc((job->encoded + 1) * sizeof(size_t));
    job->chunk_offsets = (int32_t *)malloc((2 * job->encoded + 2) * sizeof(int32_t));
    job->ids = (int32_t *)malloc((job->total ? job->total : 1) * sizeof(int32_t));
    job->positions = (int32_t *)malloc((job->total ? job->total : 1) * sizeof(int32_t));
    job->host_rows = (unsigned char *)malloc(job->encoded * job->row_bytes + 1);
    if (!job->order || !job->offsets || !job->chunk_offsets || !job->ids || !job->positions || !job->host_rows) {
        job_free(job);
        status = uform_fail(uform_status_out_of_memory_k, "uform_encode_texts: no memory for %zu tokens", job->total);
        goto refused;
    }
    size_t first_position = tower->position_ids == uform_position_ids_roberta_k ? (size_t)tower->pad_id + 1 : 0;
    if (job->longest && first_position + job->longest > tower->position_embeddings.rows) {
        status = uform_fail(uform_status_invalid_argument_k,
                            "uform_encode_texts: a text of %zu tokens needs position %zu; the model has %zu", job->longest,
                            first_position + job->longest - 1, tower->position_embeddings.rows);
        job_free(job);
        goto refused;
    }
    job->offsets[0] = 0;
    for (size_t i = 0, e = 0; i < count; ++i) {
        if (job->items[i] != uform_status_ok_k) continue;
        size_t at = job->offsets[e], length = job->produced[i];
        memcpy(job->ids + at, job->slots + i * job->context, length * sizeof(int32_t));
        for (size_t t = 0; t < length; ++t) job->positions[at + t] = (int32_t)(first_position + t);
        job->order[e] = i;
        job->offsets[++e] = at + length;
    }

    /* 3. Shares per device (by SMs), chunks within the scratch each may hold. */
    job->workspace = 32u << 20;
    size_t limit = description.scratch_limit;
    if (limit && limit < (256u << 20)) job->workspace = 1u << 20;
    size_t element = element_size(tower->weights_dtype), taken = 0, scratch = 0;
    for (size_t d = 0; d < members_count; ++d) {
        vram_share_t *share = &job->shares[d];
        size_t quota = d + 1 == members_count
                           ? job->encoded - taken
                           : (size_t)((double)job->encoded * share->copy->multiprocessors / (double)multiprocessors + 0.5);
        if (quota > job->encoded - taken) quota = job->encoded - taken;
        share->first = taken, share->end = taken + quota, taken += quota;
        share->tokens = job->offsets[share->end] - job->offsets[share->first];
        size_t fixed = align_up(job->workspace, VRAM_ALIGN) + align_up(quota * job->row_bytes, VRAM_ALIGN);
        size_t budget = limit ? limit : (size_t)4 << 30;
        size_t capacity = share->tokens;
        if (fixed + chunk_bytes(tower, capacity, element) > budget) {
            /* Largest chunk that fits: per-token bytes are near-linear; step down from the estimate. */
            size_t per_token = chunk_bytes(tower, 1024, element) / 1024 + 1;
            capacity = budget > fixed ? (budget - fixed) / per_token : 0;
            while (capacity && fixed + chunk_bytes(tower, capacity, element) > budget) --capacity;
        }
        if (quota && capacity < job->longest) {
            size_t needed = fixed + chunk_bytes(tower, job->longest, element), longest = job->longest;
            job_free(job);
            status = uform_fail(uform_status_limit_exceeded_k,
                                "uform_encode_texts: a text of %zu tokens needs %zu bytes of device scratch; the "
                                "executor's scratch_limit is %zu",
                                longest, needed, limit);
            goto refused;
        }
        share->chunk_tokens = quota ? capacity : 0;
        size_t bytes = share_scratch(job, share);
        if (bytes > scratch) scratch = bytes;
    }

    /* 4. The device call; when it returns, the work ran (or failed) and the job is ours again. */
    uform_call_t call = {.residency = uform_residency_vram_k, .device = device_part, .scratch_bytes = scratch,
                         .context = job};
    if (!job->encoded) {
        job->shares_count = 0;
        gather(job);
        job_free(job);
        return vram_refuse(outcome, uform_status_ok_k);
    }
    status = uform_executor_call(executor, &call, outcome);
    job_free(job);
    return status;

refused:
    return vram_refuse(outcome, status);
}

#else /* UFORM_WITH_CUDA */

uform_status_t uform_text_vram_encode_ids(uform_executor_t executor, struct uform_model_s const *model,
                                          int32_t const *ids, size_t const *offsets, size_t count,
                                          uform_embeddings_t const *embeddings, uform_outcome_t *outcome) {
    (void)executor, (void)model, (void)ids, (void)offsets, (void)count, (void)embeddings, (void)outcome;
    return uform_fail(uform_status_unsupported_k, "uform_encode_texts: a build without CUDA");
}

uform_status_t uform_text_vram_open(struct uform_model_s *model, uform_vram_options_t const *vram) {
    (void)model, (void)vram;
    return uform_fail(uform_status_unsupported_k,
                      "uform_model_open: VRAM residency needs a GPU: this build has none (UFORM_WITH_CUDA was off)");
}

void uform_text_vram_free(struct uform_model_s *model) { (void)model; }

void uform_text_vram_profile_report(FILE *file) { (void)file; }

size_t uform_text_vram_copies(struct uform_model_s const *model) {
    (void)model;
    return 0;
}

uform_status_t uform_text_vram_encode(uform_executor_t executor, struct uform_model_s const *model,
                                      char const *const *texts, size_t const *lengths, size_t count,
                                      uform_embeddings_t const *embeddings, uform_status_t *statuses,
                                      uform_outcome_t *outcome) {
    (void)executor, (void)model, (void)texts, (void)lengths, (void)count, (void)embeddings, (void)statuses;
    uform_status_t status = uform_fail(uform_status_unsupported_k, "uform_encode_texts: a build without CUDA");
    if (outcome) {
        uform_outcome_begin(outcome, NULL);
        uform_outcome_finish(outcome, status, uform_error_message());
    }
    return status;
}

#endif /* UFORM_WITH_CUDA */
