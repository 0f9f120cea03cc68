/**
 *  @file   vram_tower.c
 *  @brief  The machinery the VRAM text and image towers share (vram_tower.h describes it): opening
 *          and freeing the per-device copies, the cuBLASLt product with its algorithm cache, kernel
 *          launches, graphs, profiling (UFORM_GPU_PROFILE=1), the split of a batch over devices and
 *          gathering the rows.
 *
 *  Opening: model.c (texts) or image_model.c (images) reads the directory into one host tower
 *  exactly as for RAM models (nothing is read twice or differently); the tower's layout function
 *  packs it into one host image, uploaded per device into one `cuMemAlloc` block in the device's
 *  primary context (the one VRAM executors use). Each copy also holds the engine's module (the
 *  same fatbin as vram.c's, text and image kernels together) and a cuBLASLt handle.
 */
#define _GNU_SOURCE
#include "models/vram_tower.h"

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
    size_t bytes = rows * cols * element_size(dtype);
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
    size_t offset = vram_image_take(image, count * element_size(dtype));
    vram_image_vector_at(image, offset, tensor, count, dtype);
    return offset;
}

void vram_image_qkv(vram_image_t *image, uform_tensor_t const *const weights[3], uform_tensor_t const *const biases[3],
                    size_t width, uform_dtype_t dtype, CUdeviceptr *weight_at, CUdeviceptr *bias_at) {
    size_t matrix = width * width * element_size(dtype), vector = width * element_size(dtype);
    *weight_at = vram_image_take(image, 3 * matrix);
    *bias_at = vram_image_take(image, 3 * vector);
    for (size_t i = 0; i < 3; ++i) {
        if (image->bytes) memcpy(image->bytes + *weight_at + i * matrix, weights[i]->data, matrix);
        vram_image_vector_at(image, *bias_at + i * vector, biases[i], width, dtype);
    }
}

/* ---- Copies ---- */

static void copy_release(vram_tower_t *vram, vram_copy_t *copy) {
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
    return model && model->vram ? ((vram_tower_t const *)model->vram)->count : 0;
}

/** Frees the staging buffer in the first copy's context (pinned memory belongs to a context). */
static void staging_release(vram_tower_t *vram) {
    if (!vram->staging) return;
    CUcontext previous = NULL;
    if (vram->count && vram->copies[0].context && vram->cuda->CtxPushCurrent(vram->copies[0].context) == CUDA_SUCCESS) {
        vram->cuda->MemFreeHost(vram->staging);
        vram->cuda->CtxPopCurrent(&previous);
    }
    vram->staging = NULL, vram->staging_bytes = 0;
}

void *vram_staging_take(vram_tower_t *vram, size_t bytes) {
    void *buffer = NULL;
    pthread_mutex_lock(&vram->staging_lock);
    if (!vram->staging_lent && vram->count && vram->copies[0].context) {
        if (vram->staging_bytes < bytes) {
            staging_release(vram);
            CUcontext previous = NULL;
            if (vram->cuda->CtxPushCurrent(vram->copies[0].context) == CUDA_SUCCESS) {
                size_t grown = bytes + bytes / 4; /* room for a somewhat larger batch next time */
                if (vram->cuda->MemHostAlloc(&vram->staging, grown, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS)
                    vram->staging_bytes = grown;
                else vram->staging = NULL;
                vram->cuda->CtxPopCurrent(&previous);
            }
        }
        if (vram->staging) buffer = vram->staging, vram->staging_lent = 1;
    }
    pthread_mutex_unlock(&vram->staging_lock);
    return buffer;
}

void vram_staging_give(vram_tower_t *vram, void *buffer) {
    pthread_mutex_lock(&vram->staging_lock);
    if (buffer && buffer == vram->staging) vram->staging_lent = 0;
    pthread_mutex_unlock(&vram->staging_lock);
}

void uform_text_vram_free(struct uform_model_s *model) {
    vram_tower_t *vram = model ? (vram_tower_t *)model->vram : NULL;
    if (!vram) return;
    staging_release(vram);
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

/* ---- Profiling (UFORM_GPU_PROFILE=1): every step synchronised and timed, graphs off; for the benchmarks ---- */

#define VRAM_PROFILE_STEPS 24
static int vram_profile = -1;
static pthread_mutex_t vram_profile_lock = PTHREAD_MUTEX_INITIALIZER;
static char const *vram_profile_names[VRAM_PROFILE_STEPS];
static double vram_profile_seconds[VRAM_PROFILE_STEPS];
static size_t vram_profile_counts[VRAM_PROFILE_STEPS];

int vram_profiling(void) {
    if (vram_profile < 0) {
        char const *value = getenv("UFORM_GPU_PROFILE");
        vram_profile = value && *value && *value != '0';
    }
    return vram_profile;
}

void vram_profile_add(char const *name, double seconds) {
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

/* ---- Launches and products ---- */

uform_status_t vram_launch_failed(CUresult result, char const *verb, char const *what, int32_t ordinal) {
    return uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k : uform_status_invalid_argument_k,
                           result, "%s: %s on device %d", verb, what, (int)ordinal);
}

uform_status_t text_vram_launch_failed(uform_cuda_t const *cuda, CUresult result, char const *what, int32_t ordinal) {
    (void)cuda;
    return vram_launch_failed(result, "uform_encode_texts", what, ordinal);
}

uform_status_t vram_launch_grid(uform_cuda_t const *cuda, CUstream stream, int32_t ordinal, char const *verb,
                                CUfunction function, char const *name, unsigned grid_x, unsigned grid_y, unsigned block,
                                unsigned shared, void **arguments) {
    double start = 0;
    if (vram_profiling()) cuda->StreamSynchronize(stream), start = uform_now_seconds();
    CUresult result = cuda->LaunchKernel(function, grid_x, grid_y, 1, block, 1, 1, shared, stream, arguments, NULL);
    if (vram_profiling()) cuda->StreamSynchronize(stream), vram_profile_add(name, uform_now_seconds() - start);
    return result == CUDA_SUCCESS ? uform_status_ok_k : vram_launch_failed(result, verb, name, ordinal);
}

uform_status_t vram_launch(vram_exec_t const *e, CUfunction function, char const *name, unsigned grid, unsigned block,
                           unsigned shared, void **arguments) {
    return vram_launch_grid(e->vram->cuda, e->stream, e->copy->ordinal, e->verb, function, name, grid, 1, block, shared,
                            arguments);
}

/** Set on the thread while it captures a graph: products then take cuBLASLt's first algorithm
 *  instead of timing candidates (no synchronisation is allowed during a capture). */
static _Thread_local int vram_capturing;
/** Set by `gemm_run` when it timed candidates, so the profile leaves that product out. */
static _Thread_local int vram_tuned;

/** Products of at least this many multiply-adds time cuBLASLt's candidates on first sight. */
#define VRAM_TUNE_MACS (1ull << 30)
#define VRAM_TUNE_CANDIDATES 8

/** Whether to time candidate algorithms (UFORM_GPU_GEMM_TUNE=0 turns it off; read once). */
static int gemm_tune_value = 1;
static pthread_once_t gemm_tune_once = PTHREAD_ONCE_INIT;
static void gemm_tune_read(void) {
    char const *value = getenv("UFORM_GPU_GEMM_TUNE");
    gemm_tune_value = !(value && *value == '0');
}

/** Times each of `count` candidate algorithms on the product itself (one run to warm up, then three
 *  between events; running it again is harmless, as D never aliases A, W or C) and returns the index
 *  of the fastest, 0 when timing is impossible. Candidates that fail are passed over. */
static int gemm_fastest(vram_exec_t const *e, uform_lt_desc_t desc, uform_lt_layout_t la, uform_lt_layout_t lb,
                        uform_lt_layout_t lc, CUdeviceptr a, CUdeviceptr w, CUdeviceptr residual, CUdeviceptr d,
                        uform_lt_heuristic_t const *candidates, int count) {
    uform_cuda_t const *cuda = e->vram->cuda;
    uform_cublaslt_t const *lt = e->vram->lt;
    CUevent start = NULL, stop = NULL;
    int best = 0;
    float best_ms = 0.f;
    if (cuda->EventCreate(&start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) start = NULL;
    if (start && cuda->EventCreate(&stop, CU_EVENT_DEFAULT) != CUDA_SUCCESS) stop = NULL;
    float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
    for (int i = 0; i < count && start && stop; ++i) {
        if (candidates[i].state != 0 || candidates[i].workspace_size > e->workspace_bytes) continue;
        int failed = 0;
        for (int run = 0; run < 4 && !failed; ++run) {
            if (run == 1 && cuda->EventRecord(start, e->stream) != CUDA_SUCCESS) failed = 1;
            failed = failed || lt->Matmul(e->copy->lt, desc, &alpha, (void const *)(uintptr_t)w, la,
                                          (void const *)(uintptr_t)a, lb, &beta,
                                          (void const *)(uintptr_t)(residual ? residual : d), lc, (void *)(uintptr_t)d,
                                          lc, &candidates[i].algo, (void *)(uintptr_t)e->workspace, e->workspace_bytes,
                                          e->stream) != 0;
        }
        float ms = 0.f;
        if (failed || cuda->EventRecord(stop, e->stream) != CUDA_SUCCESS || cuda->EventSynchronize(stop) != CUDA_SUCCESS ||
            cuda->EventElapsedTime(&ms, start, stop) != CUDA_SUCCESS) {
            if (cuda->StreamSynchronize(e->stream) != CUDA_SUCCESS) break; /* a fault: the caller's run reports it */
            continue;
        }
        if (best_ms == 0.f || ms < best_ms) best = i, best_ms = ms;
    }
    if (stop) cuda->EventDestroy(stop);
    if (start) cuda->EventDestroy(start);
    return best;
}

/** The candidate to use: timed once per shape and power-of-two bucket of m; later m of the bucket look
 *  for the winner among their own candidates (so it is valid for them) and else take the first. */
static int gemm_pick(vram_exec_t const *e, size_t m, size_t n, size_t k, int epilogue, CUdeviceptr residual,
                     uform_lt_desc_t desc, uform_lt_layout_t la, uform_lt_layout_t lb, uform_lt_layout_t lc,
                     CUdeviceptr a, CUdeviceptr w, CUdeviceptr d, uform_lt_heuristic_t const *candidates, int returned) {
    vram_copy_t *copy = e->copy;
    size_t bucket = 0;
    while (((size_t)1 << bucket) < m) ++bucket;
    int known = 0, pick = 0;
    uform_lt_algo_t winner;
    pthread_mutex_lock(&copy->lock);
    for (size_t i = 0; i < VRAM_CACHE; ++i) {
        vram_algo_t const *entry = &copy->tuned[i];
        if (entry->valid && entry->m == bucket && entry->n == n && entry->k == k && entry->workspace == e->workspace_bytes &&
            entry->epilogue == epilogue && entry->residual == (residual != 0))
            winner = entry->algo, known = 1;
    }
    pthread_mutex_unlock(&copy->lock);
    if (known) {
        for (int i = 0; i < returned; ++i)
            if (!memcmp(&candidates[i].algo, &winner, sizeof winner)) return i;
        return 0;
    }
    vram_tuned = 1;
    pick = gemm_fastest(e, desc, la, lb, lc, a, w, residual, d, candidates, returned);
    pthread_mutex_lock(&copy->lock);
    size_t slot = (bucket * 31 + n * 7 + k + (size_t)epilogue * 3 + (residual != 0)) % VRAM_CACHE;
    for (size_t i = 0; i < VRAM_CACHE; ++i)
        if (!copy->tuned[i].valid) {
            slot = i;
            break;
        }
    copy->tuned[slot] = (vram_algo_t){.m = bucket, .n = n, .k = k, .workspace = e->workspace_bytes, .epilogue = epilogue,
                                      .residual = residual != 0, .valid = 1, .algo = candidates[pick].algo};
    pthread_mutex_unlock(&copy->lock);
    return pick;
}

/** In cuBLASLt's column-major terms: D^T (n x m) = W (n x k) A^T (k x m). */
static uform_status_t gemm_run(vram_exec_t const *e, size_t m, size_t n, size_t k, CUdeviceptr a, CUdeviceptr w,
                               CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d, int epilogue) {
    uform_cublaslt_t const *lt = e->vram->lt;
    vram_copy_t *copy = e->copy;
    int type = e->vram->lt_type;
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
            if (entry->valid && entry->m == m && entry->n == n && entry->k == k && entry->workspace == e->workspace_bytes &&
                entry->epilogue == epilogue && entry->residual == (residual != 0))
                algo = entry->algo, found = 1;
        }
        pthread_mutex_unlock(&copy->lock);
    }
    if (!lt_status && !found) {
        uint64_t workspace = e->workspace_bytes;
        uform_lt_heuristic_t candidates[VRAM_TUNE_CANDIDATES];
        int returned = 0;
        pthread_once(&gemm_tune_once, gemm_tune_read);
        /* Large products time cuBLASLt's first candidates and keep the fastest: its first pick can be
         * far from it (UForm3's QKV product ran at about half the up projection's rate on an H200). */
        int tune = gemm_tune_value && !vram_capturing && (unsigned long long)m * n * k >= VRAM_TUNE_MACS;
        lt_status = lt->MatmulPreferenceCreate(&preference);
        if (!lt_status)
            lt_status = lt->MatmulPreferenceSetAttribute(preference, uform_lt_pref_max_workspace_k, &workspace, sizeof workspace);
        if (!lt_status)
            lt_status = lt->MatmulAlgoGetHeuristic(copy->lt, desc, la, lb, lc, lc, preference,
                                                   tune ? VRAM_TUNE_CANDIDATES : 1, candidates, &returned);
        if (!lt_status && returned < 1) {
            status = uform_fail(uform_status_unsupported_k,
                                "%s: cuBLASLt has no algorithm for a %zu x %zu x %zu product on device %d", e->verb, m,
                                n, k, (int)copy->ordinal);
        } else if (!lt_status) {
            int chosen = tune && returned > 1 ? gemm_pick(e, m, n, k, epilogue, residual, desc, la, lb, lc, a, w, d,
                                                          candidates, returned)
                                              : 0;
            algo = candidates[chosen].algo, found = 1;
            pthread_mutex_lock(&copy->lock);
            /* A free slot first, so the shapes of a pass rarely evict each other; else the hashed one. */
            size_t slot = (m * 31 + n * 7 + k + (size_t)epilogue * 3 + (residual != 0)) % VRAM_CACHE;
            for (size_t i = 0; i < VRAM_CACHE; ++i)
                if (!copy->cache[i].valid) {
                    slot = i;
                    break;
                }
            copy->cache[slot] = (vram_algo_t){.m = m, .n = n, .k = k, .workspace = e->workspace_bytes,
                                              .epilogue = epilogue, .residual = residual != 0, .valid = 1, .algo = algo};
            pthread_mutex_unlock(&copy->lock);
        }
    }
    if (!lt_status && found) {
        float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
        lt_status = lt->Matmul(copy->lt, desc, &alpha, (void const *)(uintptr_t)w, la, (void const *)(uintptr_t)a, lb,
                               &beta, (void const *)(uintptr_t)(residual ? residual : d), lc, (void *)(uintptr_t)d, lc,
                               &algo, (void *)(uintptr_t)e->workspace, e->workspace_bytes, e->stream);
    }
    if (lt_status && status == uform_status_ok_k)
        status = uform_fail(uform_status_unsupported_k, "%s: cuBLASLt failed (status %d) on a %zu x %zu x %zu product on device %d",
                            e->verb, lt_status, m, n, k, (int)copy->ordinal);
    if (preference) lt->MatmulPreferenceDestroy(preference);
    if (la) lt->MatrixLayoutDestroy(la);
    if (lb) lt->MatrixLayoutDestroy(lb);
    if (lc) lt->MatrixLayoutDestroy(lc);
    if (desc) lt->MatmulDescDestroy(desc);
    return status;
}

uform_status_t vram_gemm(vram_exec_t const *e, char const *label, size_t m, size_t n, size_t k, CUdeviceptr a,
                         CUdeviceptr w, CUdeviceptr bias, CUdeviceptr residual, CUdeviceptr d, int epilogue) {
    if (!vram_profiling()) return gemm_run(e, m, n, k, a, w, bias, residual, d, epilogue);
    e->vram->cuda->StreamSynchronize(e->stream);
    double start = uform_now_seconds();
    vram_tuned = 0;
    uform_status_t status = gemm_run(e, m, n, k, a, w, bias, residual, d, epilogue);
    e->vram->cuda->StreamSynchronize(e->stream);
    if (!vram_tuned) vram_profile_add(label, uform_now_seconds() - start);
    return status;
}

/* ---- Graphs ---- */

uform_status_t vram_graph(vram_exec_t const *e, uint64_t const key_in[12], uform_status_t (*compute)(void *context),
                          void *context) {
    static int disabled = -1;
    if (disabled < 0) {
        char const *value = getenv("UFORM_GPU_NO_GRAPHS");
        disabled = value && *value && *value != '0';
    }
    if (disabled || vram_profiling()) return compute(context);
    uform_cuda_t const *cuda = e->vram->cuda;
    vram_copy_t *copy = e->copy;
    uint64_t key[12];
    memcpy(key, key_in, sizeof key);
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
        CUresult result = cuda->GraphLaunch(entry->exec, e->stream);
        pthread_mutex_unlock(&copy->lock);
        return result == CUDA_SUCCESS ? uform_status_ok_k : vram_launch_failed(result, e->verb, "cuGraphLaunch", copy->ordinal);
    }
    if (entry) capture = entry->state == 1;
    else {
        if (oldest->exec) cuda->GraphExecDestroy(oldest->exec);
        memset(oldest, 0, sizeof *oldest);
        memcpy(oldest->key, key, sizeof key);
        oldest->state = 1, oldest->used = ++copy->graph_clock;
    }
    pthread_mutex_unlock(&copy->lock);
    if (!capture) return compute(context);

    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    int captured = 0;
    if (cuda->StreamBeginCapture(e->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) == CUDA_SUCCESS) {
        vram_capturing = 1;
        uform_status_t status = compute(context);
        vram_capturing = 0;
        CUresult ended = cuda->StreamEndCapture(e->stream, &graph);
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
    if (captured) result = cuda->GraphLaunch(entry && entry->exec ? entry->exec : exec, e->stream);
    pthread_mutex_unlock(&copy->lock);
    if (exec) {
        /* Another thread stored the same shape first, or it was evicted: ours ran, free it after. */
        if (!entry || entry->exec != exec) cuda->GraphExecDestroy(exec);
    }
    if (!captured) return compute(context);
    return result == CUDA_SUCCESS ? uform_status_ok_k : vram_launch_failed(result, e->verb, "cuGraphLaunch", copy->ordinal);
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
        size_t budget = limit ? limit : (size_t)4 << 30;
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

uform_status_t vram_gather(vram_tower_t const *vram, vram_share_t const *shares, size_t shares_count,
                           unsigned char *host_rows, size_t row_bytes, size_t const *order, size_t encoded,
                           size_t count, uform_embeddings_t const *out, uform_status_t const *items,
                           uform_status_t *statuses, char const *verb) {
    uform_cuda_t const *cuda = vram->cuda;
    for (size_t d = 0; d < shares_count; ++d) {
        vram_share_t const *share = &shares[d];
        if (share->end == share->first) continue;
        CUcontext previous = NULL;
        CUresult result = cuda->CtxPushCurrent(share->context);
        if (result != CUDA_SUCCESS) return vram_launch_failed(result, verb, "cuCtxPushCurrent", share->copy->ordinal);
        result = cuda->MemcpyDtoHAsync(host_rows + share->first * row_bytes, share->out, (share->end - share->first) * row_bytes,
                                       share->stream);
        if (result == CUDA_SUCCESS) result = cuda->StreamSynchronize(share->stream);
        cuda->CtxPopCurrent(&previous);
        if (result != CUDA_SUCCESS) return vram_launch_failed(result, verb, "copying embeddings back", share->copy->ordinal);
    }
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
    return uform_status_ok_k;
}
