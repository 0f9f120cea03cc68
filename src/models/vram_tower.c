/**
 *  @file   vram_tower.c
 *  @brief  The machinery the VRAM text and image towers share (vram_tower.h describes it): opening
 *          and freeing the per-device copies, the pinned staging buffer, the split of a batch over
 *          devices and gathering the rows. Launches, products, graphs and profiling are in
 *          vram_tower_exec.c.
 *
 *  Opening: model.c (texts) or image_model.c (images) reads the directory into one host tower
 *  exactly as for RAM models (nothing is read twice or differently); the tower's layout function
 *  packs it into one host image, uploaded per device into one `cuMemAlloc` block in the device's
 *  primary context (the one VRAM executors use). Each copy also holds the engine's module (the
 *  same fatbin as vram.c's, text and image kernels together) and a cuBLASLt handle.
 */
#define _GNU_SOURCE
#include "models/vram_tower.h"
#include "../../tools/strict_number.h"

#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `calloc`, `getenv`
#include <string.h>  // `memcpy`

/* ---- The host image ---- */

size_t vram_image_take(vram_image_t *image, size_t bytes) {
    size_t offset = align_up(image->used, VRAM_ALIGN);
    image->used = offset + bytes;
    return offset;
}

size_t vram_image_matrix(vram_image_t *image, uform_tensor_t const *tensor, size_t rows, size_t cols, uform_dtype_t dtype) {
    size_t bytes = rows * cols * uform_dtype_bytes(dtype);
    size_t offset = vram_image_take(image, bytes);
    if (image->bytes && tensor && tensor->data) memcpy(image->bytes + offset, tensor->data, bytes);
    return offset;
}

void vram_image_vector_at(vram_image_t *image, size_t offset, uform_tensor_t const *tensor, size_t count, uform_dtype_t dtype) {
    if (!image->bytes || !tensor || !tensor->data) return;
    uform_kernels_t const *kernels = uform_kernels_for(uform_cpu_class_serial_k);
    float const *values = (float const *)tensor->data;
    if (dtype == uform_dtype_f32_k) memcpy(image->bytes + offset, values, count * sizeof(float));
    else if (dtype == uform_dtype_bf16_k) kernels->f32_to_bf16(values, (uint16_t *)(image->bytes + offset), count);
    else kernels->f32_to_f16(values, (uint16_t *)(image->bytes + offset), count);
}

size_t vram_image_vector(vram_image_t *image, uform_tensor_t const *tensor, size_t count, uform_dtype_t dtype) {
    size_t offset = vram_image_take(image, count * uform_dtype_bytes(dtype));
    vram_image_vector_at(image, offset, tensor, count, dtype);
    return offset;
}

void vram_image_qkv(vram_image_t *image, uform_tensor_t const *const weights[3], uform_tensor_t const *const biases[3],
                    size_t width, uform_dtype_t dtype, CUdeviceptr *weight_at, CUdeviceptr *bias_at) {
    size_t matrix = width * width * uform_dtype_bytes(dtype), vector = width * uform_dtype_bytes(dtype);
    *weight_at = vram_image_take(image, 3 * matrix);
    *bias_at = vram_image_take(image, 3 * vector);
    for (size_t i = 0; i < 3; ++i) {
        if (image->bytes) memcpy(image->bytes + *weight_at + i * matrix, weights[i]->data, matrix);
        vram_image_vector_at(image, *bias_at + i * vector, biases[i], width, dtype);
    }
}

/* ---- Copies ---- */

static void uploader_release(uform_cuda_t const *cuda, vram_uploader_t *uploader) {
    if (uploader->stream) cuda->StreamDestroy(uploader->stream);
    if (uploader->start) cuda->EventDestroy(uploader->start);
    for (size_t r = 0; r < 2; ++r) {
        if (uploader->ready[r]) cuda->EventDestroy(uploader->ready[r]);
        if (uploader->freed[r]) cuda->EventDestroy(uploader->freed[r]);
        if (uploader->pixels[r]) cuda->MemFree(uploader->pixels[r]);
    }
    memset(uploader, 0, sizeof *uploader);
}

vram_uploader_t *vram_uploader_take(vram_tower_t const *vram, vram_copy_t *copy, CUstream owner) {
    uform_cuda_t const *cuda = vram->cuda;
    vram_uploader_t *found = NULL, *free_slot = NULL;
    pthread_mutex_lock(&copy->lock);
    for (size_t u = 0; u < VRAM_UPLOADERS && !found; ++u) {
        vram_uploader_t *uploader = &copy->uploaders[u];
        if (uploader->owner == owner && uploader->stream) found = uploader;
        else if (!uploader->stream && !free_slot) free_slot = uploader;
    }
    if (!found && free_slot) {
        int made = cuda->StreamCreate(&free_slot->stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
                   cuda->EventCreate(&free_slot->start, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                   cuda->EventCreate(&free_slot->ready[0], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                   cuda->EventCreate(&free_slot->ready[1], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                   cuda->EventCreate(&free_slot->freed[0], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                   cuda->EventCreate(&free_slot->freed[1], CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
        if (made) free_slot->owner = owner, found = free_slot;
        else uploader_release(cuda, free_slot);
    }
    if (found && found->busy) found = NULL;
    if (found) found->busy = 1;
    pthread_mutex_unlock(&copy->lock);
    return found;
}

void vram_uploader_give(vram_copy_t *copy, vram_uploader_t *uploader) {
    if (!uploader) return;
    pthread_mutex_lock(&copy->lock);
    uploader->busy = 0;
    pthread_mutex_unlock(&copy->lock);
}

static void copy_release(vram_tower_t *vram, vram_copy_t *copy) {
    uform_cuda_t const *cuda = vram->cuda;
    if (copy->context) {
        CUcontext previous = NULL;
        if (cuda->CtxPushCurrent(copy->context) == CUDA_SUCCESS) {
            for (size_t g = 0; g < VRAM_GRAPHS; ++g)
                if (copy->graphs[g].exec) cuda->GraphExecDestroy(copy->graphs[g].exec);
            for (size_t u = 0; u < VRAM_UPLOADERS; ++u) uploader_release(cuda, &copy->uploaders[u]);
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
    return model && model->vram ? ((vram_tower_t const *)model->vram)->count : 0;
}

/** Frees staging buffer `slot` in the first copy's context (pinned memory belongs to a context). */
static void staging_release(vram_tower_t *vram, size_t slot) {
    if (!vram->staging[slot]) return;
    CUcontext previous = NULL;
    if (vram->count && vram->copies[0].context && vram->cuda->CtxPushCurrent(vram->copies[0].context) == CUDA_SUCCESS) {
        vram->cuda->MemFreeHost(vram->staging[slot]);
        vram->cuda->CtxPopCurrent(&previous);
    }
    vram->staging[slot] = NULL, vram->staging_bytes[slot] = 0;
}

void *vram_staging_take(vram_tower_t *vram, size_t bytes) {
    void *buffer = NULL;
    pthread_mutex_lock(&vram->staging_lock);
    /* A free buffer large enough, else the largest free one grown. */
    size_t slot = VRAM_STAGING;
    for (size_t s = 0; s < VRAM_STAGING; ++s)
        if (!vram->staging_lent[s] &&
            (slot == VRAM_STAGING || (vram->staging_bytes[slot] < bytes && vram->staging_bytes[s] > vram->staging_bytes[slot])))
            slot = s;
    if (slot < VRAM_STAGING && vram->count && vram->copies[0].context) {
        if (vram->staging_bytes[slot] < bytes) {
            staging_release(vram, slot);
            CUcontext previous = NULL;
            if (vram->cuda->CtxPushCurrent(vram->copies[0].context) == CUDA_SUCCESS) {
                size_t grown = bytes + bytes / 4; /* room for a somewhat larger batch next time */
                if (vram->cuda->MemHostAlloc(&vram->staging[slot], grown, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS)
                    vram->staging_bytes[slot] = grown;
                else vram->staging[slot] = NULL;
                vram->cuda->CtxPopCurrent(&previous);
            }
        }
        if (vram->staging[slot]) buffer = vram->staging[slot], vram->staging_lent[slot] = 1;
    }
    pthread_mutex_unlock(&vram->staging_lock);
    return buffer;
}

void vram_staging_give(vram_tower_t *vram, void *buffer) {
    pthread_mutex_lock(&vram->staging_lock);
    for (size_t s = 0; s < VRAM_STAGING; ++s)
        if (buffer && buffer == vram->staging[s]) vram->staging_lent[s] = 0;
    pthread_mutex_unlock(&vram->staging_lock);
}

void uform_text_vram_free(struct uform_model_s *model) {
    vram_tower_t *vram = model ? (vram_tower_t *)model->vram : NULL;
    if (!vram) return;
    for (size_t s = 0; s < VRAM_STAGING; ++s) staging_release(vram, s);
    pthread_mutex_destroy(&vram->staging_lock);
    for (size_t i = 0; i < vram->count; ++i) copy_release(vram, &vram->copies[i]);
    free(vram->copies);
    free(vram);
    model->vram = NULL;
}

static char const *const suffixes[3] = {"f32", "bf16", "f16"};

/** Adds the block's base to every present offset (0 is absent: the image's first bytes are reserved). */
static void rebase(CUdeviceptr *pointers, CUdeviceptr const *offsets, size_t count, CUdeviceptr base) {
    for (size_t i = 0; i < count; ++i) pointers[i] = offsets[i] ? base + offsets[i] : 0;
}

/** Uploads the image to one device and loads its module (every tower's kernels) and cuBLASLt handle. */
static uform_status_t copy_open(vram_tower_t *vram, vram_copy_t *copy, vram_image_t const *image,
                                vram_weights_t const *weights, vram_layer_t const *layers, size_t layers_count) {
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
        char const *tower, *name;
    } const functions[] = {{&copy->embed, "text", "embed"},
                           {&copy->layer_norm, "text", "layer_norm"},
                           {&copy->gelu, "text", "gelu"},
                           {&copy->attention_simt, "text", "attention_simt"},
                           {&copy->pool, "text", "pool"},
                           {&copy->finish, "text", "finish"},
                           {&copy->attention_mma, "text", "attention_mma"},
                           {&copy->image_patches, "image", "patches"},
                           {&copy->image_assemble, "image", "assemble"}};
    for (size_t f = 0; f < sizeof functions / sizeof *functions && result == CUDA_SUCCESS; ++f) {
        if (vram->suffix == 0 && !strcmp(functions[f].name, "attention_mma")) continue; /* no f32 tensor-core path */
        snprintf(what, sizeof what, "uform_%s_%s_%s", functions[f].tower, functions[f].name, suffixes[vram->suffix]);
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
    rebase((CUdeviceptr *)&copy->w, (CUdeviceptr const *)weights, sizeof(vram_weights_t) / sizeof(CUdeviceptr), copy->block);
    rebase((CUdeviceptr *)copy->layers, (CUdeviceptr const *)layers,
           layers_count * (sizeof(vram_layer_t) / sizeof(CUdeviceptr)), copy->block);
done:;
    CUcontext previous = NULL;
    cuda->CtxPopCurrent(&previous);
    return status;
}

uform_status_t vram_tower_open(struct uform_model_s *model, uform_vram_options_t const *options, void const *tower,
                               size_t layers_count, uform_dtype_t dtype, vram_layout_t layout) {
    uform_cuda_t const *cuda = NULL;
    uform_cuda_device_t const *devices = NULL;
    size_t devices_count = 0;
    /* uform_model_open judged the list already (uform_vram_devices_check): here only what needs the driver. */
    uform_status_t status = uform_cuda(&cuda);
    if (status == uform_status_ok_k) status = uform_cuda_devices(&devices, &devices_count);
    if (status != uform_status_ok_k)
        return uform_fail(uform_status_unsupported_k, "uform_model_open: VRAM residency needs a GPU: %s",
                          uform_error_message());
    uform_cublaslt_t const *lt = NULL;
    if (uform_cublaslt(&lt) != uform_status_ok_k)
        return uform_fail(uform_status_unsupported_k, "uform_model_open: %s", uform_error_message());

    int32_t derived = 0;
    int32_t const *ordinals = &derived;
    size_t count = 1;
    if (options && options->devices_count) ordinals = options->devices, count = options->devices_count;
    else derived = (int32_t)uform_cuda_pick_free_device(NULL);
    for (size_t i = 0; i < count; ++i)
        if (ordinals[i] < 0 || (size_t)ordinals[i] >= devices_count)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_model_open: vram.devices[%zu] is %d; this machine has %zu GPUs", i,
                              (int)ordinals[i], devices_count);

    vram_tower_t *vram = (vram_tower_t *)calloc(1, sizeof *vram);
    vram_image_t image = {0};
    vram_weights_t weights = {0};
    vram_layer_t *layers = (vram_layer_t *)calloc(layers_count ? layers_count : 1, sizeof(vram_layer_t));
    if (vram) vram->copies = (vram_copy_t *)calloc(count, sizeof(vram_copy_t));
    if (!vram || !layers || !vram->copies) {
        free(layers);
        if (vram) free(vram->copies);
        free(vram);
        return uform_fail(uform_status_out_of_memory_k, "uform_model_open: out of memory");
    }
    vram->cuda = cuda, vram->lt = lt;
    pthread_mutex_init(&vram->staging_lock, NULL);
    vram->suffix = dtype == uform_dtype_f32_k ? 0 : dtype == uform_dtype_bf16_k ? 1 : 2;
    vram->lt_type = vram->suffix == 0 ? uform_lt_r_32f_k : vram->suffix == 1 ? uform_lt_r_16bf_k : uform_lt_r_16f_k;
    model->vram = vram;
    /* Counted once, then written; the first VRAM_ALIGN bytes stay reserved so that 0 means absent. */
    image.used = VRAM_ALIGN;
    layout(&image, tower, &weights, layers);
    image.size = image.used;
    image.bytes = (unsigned char *)calloc(1, image.size);
    if (!image.bytes) {
        free(layers);
        uform_text_vram_free(model);
        return uform_fail(uform_status_out_of_memory_k, "uform_model_open: no memory for a %zu-byte weights image",
                          image.size);
    }
    image.used = VRAM_ALIGN;
    layout(&image, tower, &weights, layers);
    for (size_t i = 0; i < count && status == uform_status_ok_k; ++i) {
        vram_copy_t *copy = &vram->copies[i];
        pthread_mutex_init(&copy->lock, NULL);
        ++vram->count; /* counted first, so a failure releases what was made */
        copy->ordinal = ordinals[i];
        copy->device = devices[ordinals[i]].device;
        copy->multiprocessors = devices[ordinals[i]].multiprocessors ? devices[ordinals[i]].multiprocessors : 1;
        copy->layers = (vram_layer_t *)calloc(layers_count ? layers_count : 1, sizeof(vram_layer_t));
        if (!copy->layers) status = uform_fail(uform_status_out_of_memory_k, "uform_model_open: out of memory");
        else status = copy_open(vram, copy, &image, &weights, layers, layers_count);
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

/* ---- Jobs: devices, shares, rows ---- */

uform_status_t vram_bind_shares(uform_executor_t executor, struct uform_model_s const *model, vram_share_t **shares_out,
                                size_t *count, char const *verb) {
    vram_tower_t *vram = (vram_tower_t *)model->vram;
    uform_vram_member_t const *members = NULL;
    size_t members_count = uform_vram_members(executor, &members);
    *shares_out = NULL, *count = 0;
    if (!vram || !members_count) return uform_fail(uform_status_residency_mismatch_k, "%s: the executor drives no GPU", verb);
    vram_share_t *shares = (vram_share_t *)calloc(members_count, sizeof(vram_share_t));
    if (!shares) return uform_fail(uform_status_out_of_memory_k, "%s: out of memory", verb);
    for (size_t d = 0; d < members_count; ++d) {
        for (size_t c = 0; c < vram->count; ++c)
            if (vram->copies[c].ordinal == members[d].ordinal) shares[d].copy = &vram->copies[c];
        if (!shares[d].copy) {
            free(shares);
            return uform_fail(uform_status_residency_mismatch_k,
                              "%s: the executor's device %d holds no copy of the model; open the model with that device "
                              "among its vram.devices",
                              verb, (int)members[d].ordinal);
        }
    }
    *shares_out = shares, *count = members_count;
    return uform_status_ok_k;
}

size_t vram_share_bytes(vram_share_t const *share, size_t workspace, size_t row_bytes, vram_chunk_bytes_t chunk_bytes,
                        void const *context) {
    return align_up(workspace, VRAM_ALIGN) + align_up((share->end - share->first) * row_bytes, VRAM_ALIGN) +
           chunk_bytes(context, share->chunk_tokens);
}

uform_status_t vram_plan_shares(vram_share_t *shares, size_t count, size_t encoded, size_t const *offsets,
                                size_t longest, size_t workspace, size_t row_bytes, size_t limit,
                                vram_chunk_bytes_t chunk_bytes, void const *context, char const *verb,
                                char const *what, size_t *scratch) {
    size_t multiprocessors = 0, taken = 0;
    *scratch = 0;
    for (size_t d = 0; d < count; ++d) multiprocessors += shares[d].copy->multiprocessors;
    for (size_t d = 0; d < count; ++d) {
        vram_share_t *share = &shares[d];
        size_t quota = d + 1 == count ? encoded - taken
                                      : (size_t)((double)encoded * share->copy->multiprocessors / (double)multiprocessors + 0.5);
        if (quota > encoded - taken) quota = encoded - taken;
        share->first = taken, share->end = taken + quota, taken += quota;
        share->tokens = offsets[share->end] - offsets[share->first];
        size_t fixed = align_up(workspace, VRAM_ALIGN) + align_up(quota * row_bytes, VRAM_ALIGN);
        size_t budget = limit ? limit : VRAM_DEFAULT_BUDGET;
        size_t capacity = share->tokens;
        if (fixed + chunk_bytes(context, capacity) > budget) {
            /* Largest chunk that fits: per-token bytes are near-linear; step down from the estimate. */
            size_t per_token = chunk_bytes(context, 1024) / 1024 + 1;
            capacity = budget > fixed ? (budget - fixed) / per_token : 0;
            while (capacity && fixed + chunk_bytes(context, capacity) > budget) --capacity;
        }
        if (quota && capacity < longest) {
            size_t needed = fixed + chunk_bytes(context, longest);
            return uform_fail(uform_status_limit_exceeded_k,
                              "%s: %s needs %zu bytes of device scratch; the executor's scratch_limit is %zu", verb, what,
                              needed, limit);
        }
        share->chunk_tokens = quota ? capacity : 0;
        size_t bytes = vram_share_bytes(share, workspace, row_bytes, chunk_bytes, context);
        if (bytes > *scratch) *scratch = bytes;
    }
    return uform_status_ok_k;
}

uform_status_t vram_copy_rows(vram_tower_t const *vram, vram_share_t const *shares, size_t shares_count,
                             unsigned char *host_rows, size_t row_bytes, int wait, char const *verb) {
    uform_cuda_t const *cuda = vram->cuda;
    for (size_t d = 0; d < shares_count; ++d) {
        vram_share_t const *share = &shares[d];
        if (share->end == share->first) continue;
        CUcontext previous = NULL;
        CUresult result = cuda->CtxPushCurrent(share->context);
        if (result != CUDA_SUCCESS) return vram_launch_failed(result, verb, "cuCtxPushCurrent", share->copy->ordinal);
        result = cuda->MemcpyDtoHAsync(host_rows + share->first * row_bytes, share->out, (share->end - share->first) * row_bytes,
                                       share->stream);
        if (result == CUDA_SUCCESS && wait) result = cuda->StreamSynchronize(share->stream);
        cuda->CtxPopCurrent(&previous);
        if (result != CUDA_SUCCESS) return vram_launch_failed(result, verb, "copying embeddings back", share->copy->ordinal);
    }
    return uform_status_ok_k;
}

void vram_write_rows(unsigned char const *host_rows, size_t row_bytes, size_t const *order, size_t encoded, size_t count,
                     uform_embeddings_t const *out, uform_status_t const *items, uform_status_t *statuses) {
    size_t stride = out->stride ? out->stride : row_bytes;
    unsigned char *rows = (unsigned char *)out->data;
    size_t next = 0;
    for (size_t i = 0; i < count; ++i) {
        if (next < encoded && order[next] == i) {
            memcpy(rows + i * stride, host_rows + next * row_bytes, row_bytes);
            ++next;
        } else memset(rows + i * stride, 0, row_bytes);
        if (statuses) statuses[i] = items[i];
    }
}

void vram_pieces_free(uform_cuda_t const *cuda, vram_pieces_t *pieces) {
    for (size_t i = 0; i < pieces->count; ++i) {
        CUcontext previous = NULL;
        if (cuda->CtxPushCurrent(pieces->items[i].context) != CUDA_SUCCESS) continue;
        cuda->EventDestroy(pieces->items[i].event);
        cuda->CtxPopCurrent(&previous);
    }
    free(pieces->items);
    *pieces = (vram_pieces_t){0};
}

/** UFORM_GPU_FEATURES_PIECES, read once: 0 off, 1 (the default) from `VRAM_PIECEWISE_MIN_BYTES` in
 *  pieces of at least `VRAM_PIECE_MIN_BYTES`, `small` (for the GPU tests' small batches) any staged
 *  features in pieces of at least 64 KiB. */
static int pieces_mode = 1;
static pthread_once_t pieces_mode_once = PTHREAD_ONCE_INIT;
static void pieces_mode_read(void) {
    char const *value = getenv("UFORM_GPU_FEATURES_PIECES");
    if (value && !strcmp(value, "0")) pieces_mode = 0;
    else if (value && !strcmp(value, "small")) pieces_mode = 2;
}

static int pieces_mode_get(void) {
    pthread_once(&pieces_mode_once, pieces_mode_read);
    return pieces_mode;
}

/** Features pieces of a chunk: at most this many, of at least `VRAM_PIECE_MIN_BYTES` each. */
#define VRAM_PIECES_PER_CHUNK 8
#define VRAM_PIECE_MIN_BYTES ((size_t)4 << 20)

/** Appends staging rows [row_begin, row_end) to `pieces`, marked by an event recorded on `share`'s
 *  stream (its context current); on any failure marks the list broken instead. */
static void piece_mark(uform_cuda_t const *cuda, vram_share_t const *share, vram_pieces_t *pieces, size_t row_begin,
                       size_t row_end) {
    if (pieces->count == pieces->capacity) {
        size_t capacity = pieces->capacity ? 2 * pieces->capacity : 16;
        vram_piece_t *grown = (vram_piece_t *)realloc(pieces->items, capacity * sizeof(vram_piece_t));
        if (!grown) {
            pieces->broken = 1;
            return;
        }
        pieces->items = grown, pieces->capacity = capacity;
    }
    CUevent event = NULL;
    if (cuda->EventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        pieces->broken = 1;
        return;
    }
    if (cuda->EventRecord(event, share->stream) != CUDA_SUCCESS) {
        cuda->EventDestroy(event);
        pieces->broken = 1;
        return;
    }
    pieces->items[pieces->count++] = (vram_piece_t){event, share->context, row_begin, row_end};
}

uform_status_t vram_copy_features(vram_tower_t const *vram, vram_share_t const *share, CUdeviceptr converted,
                                  size_t const *offsets, size_t const *order, size_t first, size_t end,
                                  uform_embeddings_t const *out, size_t stride, size_t row_bytes,
                                  unsigned char *staged, vram_pieces_t *pieces, char const *verb) {
    uform_cuda_t const *cuda = vram->cuda;
    double start = vram_profiling() ? (cuda->StreamSynchronize(share->stream), uform_now_seconds()) : 0;
    CUresult result = CUDA_SUCCESS;
    if (staged) { /* the chunk's rows packed as on the device: in one copy, or in pieces each with its event */
        size_t const base = offsets[first], last = offsets[end];
        size_t step = last - base;
        if (pieces && !pieces->broken) {
            size_t const smallest = pieces_mode_get() == 2 ? (size_t)64 << 10 : VRAM_PIECE_MIN_BYTES;
            size_t const least = (smallest + row_bytes - 1) / row_bytes;
            step = (last - base + VRAM_PIECES_PER_CHUNK - 1) / VRAM_PIECES_PER_CHUNK;
            if (step < least) step = least;
        }
        for (size_t row = base; row < last && result == CUDA_SUCCESS;) {
            size_t const next = pieces && pieces->broken ? last : last - row > step ? row + step : last;
            result = cuda->MemcpyDtoHAsync(staged + row * row_bytes, converted + (row - base) * row_bytes,
                                           (next - row) * row_bytes, share->stream);
            if (result == CUDA_SUCCESS && pieces && !pieces->broken) piece_mark(cuda, share, pieces, row, next);
            row = next;
        }
    }
    for (size_t e = first; !staged && e < end && result == CUDA_SUCCESS; ++e)
        result = cuda->MemcpyDtoHAsync((unsigned char *)out->features + order[e] * stride,
                                       converted + (offsets[e] - offsets[first]) * row_bytes,
                                       (offsets[e + 1] - offsets[e]) * row_bytes, share->stream);
    if (result != CUDA_SUCCESS) return vram_launch_failed(result, verb, "copying features back", share->copy->ordinal);
    if (vram_profiling())
        cuda->StreamSynchronize(share->stream),
            vram_profile_add(staged ? "features to staging" : "features to caller, item by item", uform_now_seconds() - start);
    return uform_status_ok_k;
}

int vram_features_piecewise(size_t staged_bytes) {
    int const mode = pieces_mode_get();
    return mode == 2 ? staged_bytes > 0 : mode == 1 && staged_bytes >= VRAM_PIECEWISE_MIN_BYTES;
}

size_t vram_staged_features_bytes(size_t bytes) {
    size_t staged = 1;
    if (strict_count(getenv("UFORM_GPU_FEATURES_STAGED"), 0, 1, false, &staged) && !staged) return 0;
    return bytes > VRAM_STAGED_FEATURES_MAX ? 0 : bytes;
}

/** What `vram_write_features` hands each task: inputs [task * count / tasks, (task + 1) * count / tasks). */
typedef struct features_writer_t {
    uform_embeddings_t const *out;
    size_t stride, rows_total, row_bytes;
    size_t const *order, *offsets;
    size_t encoded, count, tasks;
    unsigned char const *staged;
} features_writer_t;

static void write_features_range(features_writer_t const *w, size_t begin, size_t end) {
    unsigned char *features = (unsigned char *)w->out->features;
    /* The first encoded item at or past input `begin` (`order` increases). */
    size_t low = 0, high = w->encoded;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (w->order[middle] < begin) low = middle + 1;
        else high = middle;
    }
    for (size_t i = begin, next = low; i < end; ++i) {
        size_t rows = 0;
        unsigned char *item = features + i * w->stride;
        if (next < w->encoded && w->order[next] == i) {
            rows = w->offsets[next + 1] - w->offsets[next];
            if (w->staged) memcpy(item, w->staged + w->offsets[next] * w->row_bytes, rows * w->row_bytes);
            ++next;
        }
        if (rows < w->rows_total) memset(item + rows * w->row_bytes, 0, (w->rows_total - rows) * w->row_bytes);
    }
}

static void write_features_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    features_writer_t const *w = (features_writer_t const *)context;
    write_features_range(w, task * w->count / w->tasks, (task + 1) * w->count / w->tasks);
}

/** Runs `tasks` tasks of `task` on `executor`'s threads; with NULL, one task, or the call refused
 *  (another thread's call), one after another on this thread. 1 where the executor ran them. */
static int run_tasks(uform_executor_t executor, size_t tasks, uform_task_callback_t task, void *context) {
    if (executor && tasks > 1) {
        uform_call_t call = {.residency = uform_residency_any_k, .schedule = uform_schedule_dynamic_k,
                             .tasks = tasks, .task = task, .context = context};
        if (uform_executor_call(executor, &call, NULL) == uform_status_ok_k) return 1;
    }
    for (size_t t = 0; t < tasks; ++t) task(context, t, 0, 0);
    return 0;
}

void vram_write_features(uform_executor_t executor, uform_embeddings_t const *out, size_t stride, size_t rows_total,
                         size_t row_bytes, size_t const *order, size_t const *offsets, size_t encoded, size_t count,
                         unsigned char const *staged) {
    features_writer_t w = {out, stride, rows_total, row_bytes, order, offsets, encoded, count, 1, staged};
    double const start = vram_profiling() ? uform_now_seconds() : 0;
    uform_executor_description_t description;
    /* Copying out of the staging buffer is bound by memory and the caller's first touches: on the
     * decoder threads when there are several and the features are large (a call per item would not pay). */
    if (executor && count > 1 && (size_t)count * rows_total * row_bytes >= (4u << 20) &&
        uform_executor_describe(executor, &description) == uform_status_ok_k && description.threads_count > 1)
        w.tasks = description.threads_count < count ? description.threads_count : count;
    int const threaded = run_tasks(executor, w.tasks, write_features_task, &w);
    if (vram_profiling())
        vram_profile_add(threaded ? "features to caller, threads" : "features to caller, one thread",
                         uform_now_seconds() - start);
}

/** What `vram_write_features_pieces` hands each task of a piece: staging rows [begin, end) split. */
typedef struct piece_writer_t {
    features_writer_t const *w;
    size_t begin, end, tasks;
} piece_writer_t;

/** Copies staging rows [begin, end) to their items: encoded item e owns rows [offsets[e], offsets[e + 1]). */
static void copy_staged_rows(features_writer_t const *w, size_t begin, size_t end) {
    unsigned char *features = (unsigned char *)w->out->features;
    size_t low = 0, high = w->encoded; /* the first item whose rows end past `begin` */
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (w->offsets[middle + 1] <= begin) low = middle + 1;
        else high = middle;
    }
    for (size_t e = low; e < w->encoded && w->offsets[e] < end; ++e) {
        size_t from = w->offsets[e] > begin ? w->offsets[e] : begin;
        size_t to = w->offsets[e + 1] < end ? w->offsets[e + 1] : end;
        if (from < to)
            memcpy(features + w->order[e] * w->stride + (from - w->offsets[e]) * w->row_bytes,
                   w->staged + from * w->row_bytes, (to - from) * w->row_bytes);
    }
}

static void piece_task(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    piece_writer_t const *p = (piece_writer_t const *)context;
    size_t const rows = p->end - p->begin;
    copy_staged_rows(p->w, p->begin + task * rows / p->tasks, p->begin + (task + 1) * rows / p->tasks);
}

int vram_write_features_pieces(uform_executor_t decoders, uform_embeddings_t const *out, size_t stride,
                               size_t rows_total, size_t row_bytes, size_t const *order, size_t const *offsets,
                               size_t encoded, size_t count, unsigned char const *staged, vram_piece_t const *pieces,
                               size_t pieces_count, vram_piece_wait_t wait, void *wait_context) {
    double const start = vram_profiling() ? uform_now_seconds() : 0;
    size_t threads = 1;
    uform_executor_description_t description;
    if (decoders && uform_executor_describe(decoders, &description) == uform_status_ok_k && description.threads_count)
        threads = description.threads_count;
    features_writer_t zeros = {out, stride, rows_total, row_bytes, order, offsets, encoded, count, 1, NULL};
    zeros.tasks = threads < count ? threads : count ? count : 1;
    run_tasks(decoders, zeros.tasks, write_features_task, &zeros); /* no staged rows: the zeros alone */
    features_writer_t rows = zeros;
    rows.staged = staged;
    for (size_t p = 0; p < pieces_count; ++p) {
        if (!wait(wait_context, p)) return 0;
        piece_writer_t piece = {&rows, pieces[p].row_begin, pieces[p].row_end, 1};
        size_t const per_task = (size_t)256 << 10, bytes = (piece.end - piece.begin) * row_bytes;
        piece.tasks = bytes / per_task < threads ? bytes / per_task : threads;
        if (!piece.tasks) piece.tasks = 1;
        run_tasks(decoders, piece.tasks, piece_task, &piece);
    }
    if (vram_profiling()) vram_profile_add("features to caller, pieces", uform_now_seconds() - start);
    return 1;
}

typedef struct piece_events_t {
    uform_cuda_t const *cuda;
    vram_piece_t const *pieces;
} piece_events_t;

static int piece_event_wait(void *context, size_t index) {
    piece_events_t const *events = (piece_events_t const *)context;
    uform_cuda_t const *cuda = events->cuda;
    CUcontext previous = NULL;
    if (cuda->CtxPushCurrent(events->pieces[index].context) != CUDA_SUCCESS) return 0;
    CUresult const result = cuda->EventSynchronize(events->pieces[index].event);
    cuda->CtxPopCurrent(&previous);
    return result == CUDA_SUCCESS;
}

int vram_write_features_landed(uform_cuda_t const *cuda, uform_executor_t executor, uform_embeddings_t const *out,
                               size_t stride, size_t rows_total, size_t row_bytes, size_t const *order,
                               size_t const *offsets, size_t encoded, size_t count, unsigned char const *staged,
                               vram_pieces_t const *pieces) {
    if (pieces->broken || !staged) return 0;
    piece_events_t events = {cuda, pieces->items};
    return vram_write_features_pieces(uform_vram_decoders(executor), out, stride, rows_total, row_bytes, order, offsets,
                                      encoded, count, staged, pieces->items, pieces->count, piece_event_wait, &events);
}

uform_status_t vram_gather(vram_tower_t const *vram, vram_share_t const *shares, size_t shares_count,
                           unsigned char *host_rows, size_t row_bytes, size_t const *order, size_t encoded,
                           size_t count, uform_embeddings_t const *out, uform_status_t const *items,
                           uform_status_t *statuses, char const *verb) {
    CHECK_STEP(vram_copy_rows(vram, shares, shares_count, host_rows, row_bytes, 1, verb));
    vram_write_rows(host_rows, row_bytes, order, encoded, count, out, items, statuses);
    return uform_status_ok_k;
}

/* ---- Waves ---- */

uform_status_t vram_waves_submit(vram_waves_t *waves, uform_executor_t executor, uform_call_t const *call, int deferred) {
    if (waves->failure.status != uform_status_ok_k) return waves->failure.status;
    uform_status_t status;
    for (;;) {
        status = uform_executor_call(executor, call, &waves->outcomes[waves->used]);
        if (status == uform_status_ok_k) {
            ++waves->used;
            return status;
        }
        if (status != uform_status_deferred_full_k) break;
        if (waves->waited < waves->used) { /* our oldest wave frees a slot */
            status = uform_outcome_wait(&waves->outcomes[waves->waited++], -1);
            if (status != uform_status_ok_k) break;
            continue;
        }
        if (deferred) break; /* the caller's deferred call meets a full ring */
        status = uform_executor_call(executor, call, NULL);
        break;
    }
    if (status != uform_status_ok_k) uform_failure_save(&waves->failure, status);
    return status;
}

bool vram_waves_submit_last(vram_waves_t *waves, uform_executor_t executor, uform_call_t const *call,
                            uform_outcome_t *outcome, uform_vram_settle_t settle, void *context) {
    if (waves->failure.status != uform_status_ok_k) return false;
    for (;;) {
        bool attached = false;
        uform_status_t status = uform_vram_call_settling(executor, call, outcome, settle, context, &attached);
        if (attached) return true;
        if (status == uform_status_ok_k) /* queued without the settle (not a VRAM executor's ring): as a wave */
            status = uform_outcome_wait(outcome, -1);
        else if (status == uform_status_deferred_full_k && waves->waited < waves->used) {
            status = uform_outcome_wait(&waves->outcomes[waves->waited++], -1);
            if (status == uform_status_ok_k) continue;
        }
        if (status != uform_status_ok_k) uform_failure_save(&waves->failure, status);
        return false;
    }
}

void vram_waves_settled(vram_waves_t const *waves, uform_status_t *status, char *message, size_t message_bytes) {
    for (size_t w = waves->waited; w < waves->used && *status == uform_status_ok_k; ++w)
        if (waves->outcomes[w].status != uform_status_ok_k) {
            *status = waves->outcomes[w].status;
            snprintf(message, message_bytes, "%s", waves->outcomes[w].message);
        }
}

uform_status_t vram_waves_finish(vram_waves_t *waves) {
    for (; waves->waited < waves->used; ++waves->waited) {
        uform_status_t done = uform_outcome_wait(&waves->outcomes[waves->waited], -1);
        if (done != uform_status_ok_k && waves->failure.status == uform_status_ok_k) uform_failure_save(&waves->failure, done);
    }
    return waves->failure.status == uform_status_ok_k ? uform_status_ok_k : uform_failure_raise(&waves->failure);
}
