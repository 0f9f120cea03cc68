/**
 *  @file   fake_cuda_memory.c
 *  @brief  The fake CUDA driver's memory: allocations, pinned host memory, copies and memsets.
 *          Part of the fake `libcuda.so.1` (see fake_cuda.c). Never installed.
 */
#include "fake_cuda_private.h"

static CUresult fake_mem_alloc(CUdeviceptr *pointer, size_t bytes) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (bytes > ((size_t)64 << 30)) return CUDA_ERROR_OUT_OF_MEMORY;
    if (fake_allocations_count == fake_allocations_capacity) {
        size_t capacity = fake_allocations_capacity ? fake_allocations_capacity * 2 : 64;
        fake_allocation_t *grown = realloc(fake_allocations, capacity * sizeof(fake_allocation_t));
        if (!grown) return CUDA_ERROR_OUT_OF_MEMORY;
        fake_allocations = grown, fake_allocations_capacity = capacity;
    }
    void *memory = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!memory) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(memory, 0x7F, bytes); // poison: unwritten floats read as a huge value
    fake_allocations[fake_allocations_count++] =
        (fake_allocation_t) {.base = (uint64_t)(uintptr_t)memory, .bytes = bytes, .context = context};
    context->allocations++;
    *pointer = (CUdeviceptr)(uintptr_t)memory;
    return CUDA_SUCCESS;
}
CUresult fake_cu_mem_alloc(CUdeviceptr *pointer, size_t bytes) { FAKE_LOCKED(fake_mem_alloc(pointer, bytes)); }

static CUresult fake_mem_free(CUdeviceptr pointer) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result == CUDA_ERROR_INVALID_CONTEXT) return result;
    for (size_t index = 0; index < fake_allocations_count; ++index)
        if (fake_allocations[index].base == pointer) {
            if (fake_allocations[index].context != context) return CUDA_ERROR_INVALID_VALUE;
            free((void *)(uintptr_t)pointer);
            fake_allocations[index] = fake_allocations[--fake_allocations_count];
            context->allocations--;
            return result; // freed even on a broken context, which reports its error
        }
    return CUDA_ERROR_INVALID_VALUE;
}
CUresult fake_cu_mem_free(CUdeviceptr pointer) { FAKE_LOCKED(fake_mem_free(pointer)); }

/** Pinned host memory: plain host memory here (a context must be current, as the driver wants). */
CUresult fake_cu_mem_host_alloc(void **pointer, size_t bytes, unsigned int flags) {
    (void)flags;
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    *pointer = malloc(bytes ? bytes : 1);
    return *pointer ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fake_cu_mem_free_host(void *pointer) {
    free(pointer);
    return CUDA_SUCCESS;
}

CUresult fake_cu_mem_get_info(size_t *free_bytes, size_t *total) {
    *free_bytes = (size_t)64 << 30;
    *total = (size_t)80 << 30;
    return CUDA_SUCCESS;
}

static CUresult fake_copy(void *to, void const *from, uint64_t device, size_t bytes) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    // A synchronous copy waits for work already due; the tests copy after their calls finished.
    if (!fake_inside(context, device, bytes)) return CUDA_ERROR_INVALID_VALUE;
    memcpy(to, from, bytes);
    return CUDA_SUCCESS;
}
CUresult fake_cu_memcpy_dtoh(void *host, CUdeviceptr device, size_t bytes) {
    FAKE_LOCKED(fake_copy(host, (void const *)(uintptr_t)device, device, bytes));
}
CUresult fake_cu_memcpy_htod(CUdeviceptr device, void const *host, size_t bytes) {
    FAKE_LOCKED(fake_copy((void *)(uintptr_t)device, host, device, bytes));
}
CUresult fake_cu_memcpy_dtoh_async(void *host, CUdeviceptr device, size_t bytes, CUstream stream) {
    (void)stream;
    return fake_cu_memcpy_dtoh(host, device, bytes);
}
CUresult fake_cu_memcpy_htod_async(CUdeviceptr device, void const *host, size_t bytes, CUstream stream) {
    (void)stream;
    return fake_cu_memcpy_htod(device, host, bytes);
}
CUresult fake_cu_memcpy_peer_async(CUdeviceptr to, CUcontext to_context, CUdeviceptr from, CUcontext from_context,
                                     size_t bytes, CUstream stream) {
    (void)to, (void)to_context, (void)from, (void)from_context, (void)bytes, (void)stream;
    return CUDA_ERROR_NOT_SUPPORTED;
}
/** Memsets run at once, like this fake's copies (the stream's earlier work is not waited for). */
static CUresult fake_memset(CUdeviceptr device, unsigned value, size_t count, size_t width) {
    struct CUctx_st *context;
    CUresult result = fake_current_context(&context);
    if (result != CUDA_SUCCESS) return result;
    if (!fake_inside(context, device, count * width)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t index = 0; index < count; ++index)
        if (width == 1) ((unsigned char *)(uintptr_t)device)[index] = (unsigned char)value;
        else ((uint32_t *)(uintptr_t)device)[index] = value;
    return CUDA_SUCCESS;
}
CUresult fake_cu_memset_d8_async(CUdeviceptr device, unsigned char value, size_t count, CUstream stream) {
    (void)stream;
    FAKE_LOCKED(fake_memset(device, value, count, 1));
}
CUresult fake_cu_memset_d32_async(CUdeviceptr device, unsigned value, size_t count, CUstream stream) {
    (void)stream;
    FAKE_LOCKED(fake_memset(device, value, count, 4));
}
