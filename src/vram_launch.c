/**
 *  @file   vram_launch.c
 *  @brief  The engine's own device kernels (`uform_device_launch`, test/uform_testing.h), loaded lazily per executor and device.
 */
#define _GNU_SOURCE
#include "vram_private.h"

#include <float.h> // `FLT_MAX`
#include <math.h>  // `isnan`
#include <string.h> // `memcpy`

static char const *const vram_kernel_names[vram_kernels_count_k] = {
    [uform_kernel_empty_k] = "uform_kernel_empty",   [uform_kernel_fill_f32_k] = "uform_kernel_fill_f32",
    [uform_kernel_sleep_k] = "uform_kernel_sleep",   [uform_kernel_trap_k] = "uform_kernel_trap",
    [uform_kernel_add_f32_k] = "uform_kernel_add_f32",
};

_Thread_local vram_device_t *vram_active_device = NULL;

/** Loads the engine's kernels into the device's context (current: we are inside its callback). */
static uform_status_t vram_load_kernels(vram_device_t *device) {
    vram_executor_t *self = device->owner;
    uform_cuda_t const *cuda = self->cuda;
    CUmodule module = NULL;
    CUresult result = cuda->ModuleLoadData(&module, uform_kernels_fatbin);
    char const *what = "cuModuleLoadData";
    CUfunction functions[vram_kernels_count_k] = {0};
    for (size_t kernel = 0; kernel < vram_kernels_count_k && result == CUDA_SUCCESS; ++kernel)
        what = vram_kernel_names[kernel], result = cuda->ModuleGetFunction(&functions[kernel], module, vram_kernel_names[kernel]);
    if (result != CUDA_SUCCESS) {
        if (module) cuda->ModuleUnload(module);
        return vram_fail(self, device->index, result, "cuModuleLoadData", "uform_device_launch",
                         uform_status_unsupported_k,
                         "the engine's kernels (sm_80, sm_90, compute_90 PTX) did not load on device %zu (ordinal "
                         "%d, driver %d) at %s",
                         device->index, (int)device->ordinal, cuda->driver_version, what);
    }
    memcpy(device->functions, functions, sizeof(functions));
    device->module = module;
    return uform_status_ok_k;
}

/**
 *  Launches one of the engine's kernels on the slot's stream. Only from inside a device callback,
 *  with the slot it was handed (INVALID_ARGUMENT otherwise: the kernels are the executor's, loaded
 *  into its device's context on the first launch). Checks, all INVALID_ARGUMENT: a NULL slot, a kernel
 *  outside `uform_kernel_t`; for FILL and ADD with `count` > 0, a NULL or not 4-byte aligned
 *  `buffer`, a finite `value` beyond float's range; for SLEEP, a `value` that is NaN, negative or
 *  above 1e18 ns. FILL and ADD with `count` 0 launch nothing. Geometry: EMPTY, SLEEP and TRAP one
 *  thread; FILL and ADD blocks of 256 threads, up to 65535 blocks, each thread striding over the
 *  rest. DEVICE_FAULT on a poisoned executor or when the launch meets a sticky error (which
 *  poisons it); UNSUPPORTED when the kernels cannot load on the device (no SASS or PTX it runs).
 */
uform_status_t uform_device_launch(uform_device_slot_t const *slot, uform_kernel_t kernel, uint64_t buffer,
                                   uint64_t count, double value) {
    uform_status_t status = vram_check_launch(slot, kernel);
    if (status != uform_status_ok_k) return status;
    vram_device_t *device = vram_active_device;
    if (!device || device->context != (CUcontext)slot->cu_context || device->stream != (CUstream)slot->stream)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_device_launch: call it from inside a device callback, with the slot that callback "
                          "was handed");
    vram_executor_t *self = device->owner;
    if (UFORM_UNLIKELY(atomic_load_explicit(&self->faulted, memory_order_acquire)))
        return vram_fault_status(self, "uform_device_launch");

    unsigned grid = 1, block = 1;
    void *arguments[3];
    void **parameters = NULL;
    unsigned long long elements = count, nanoseconds = 0;
    CUdeviceptr pointer = (CUdeviceptr)buffer;
    float scalar = 0;
    switch (kernel) {
    case uform_kernel_fill_f32_k:
    case uform_kernel_add_f32_k:
        if (!count) return uform_status_ok_k;
        if (!buffer || buffer % sizeof(float))
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_device_launch: buffer 0x%llx is %s; %s needs a 4-byte aligned device pointer",
                              (unsigned long long)buffer, buffer ? "misaligned" : "NULL", vram_kernel_names[kernel]);
        if (isfinite(value) && fabs(value) > FLT_MAX)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_device_launch: value %g is outside the range of a float", value);
        scalar = (float)value;
        block = 256;
        // Grid-stride kernels: one thread per element up to 65535 blocks, then each thread loops.
        {
            uint64_t const blocks = count / block + (count % block != 0);
            grid = blocks > 65535u ? 65535u : (unsigned)blocks;
        }
        arguments[0] = &pointer, arguments[1] = &elements, arguments[2] = &scalar;
        parameters = arguments;
        break;
    case uform_kernel_sleep_k:
        if (isnan(value) || value < 0 || value > 1e18)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_device_launch: value %g is not a sleep in nanoseconds, 0 to 1e18", value);
        nanoseconds = (unsigned long long)value;
        arguments[0] = &nanoseconds;
        parameters = arguments;
        break;
    default: break;
    }
    if (UFORM_UNLIKELY(!device->module)) {
        status = vram_load_kernels(device);
        if (status != uform_status_ok_k) return status;
    }
    CUresult result = self->cuda->LaunchKernel(device->functions[kernel], grid, 1, 1, block, 1, 1, 0, device->stream,
                                               parameters, NULL);
    if (UFORM_LIKELY(result == CUDA_SUCCESS)) return uform_status_ok_k;
    return vram_fail(self, device->index, result, "cuLaunchKernel", "uform_device_launch",
                     uform_status_invalid_argument_k, "cuLaunchKernel(%s) on device %zu (ordinal %d)",
                     vram_kernel_names[kernel], device->index, (int)device->ordinal);
}
