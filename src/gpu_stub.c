/**
 *  @file   gpu_stub.c
 *  @brief  GPU discovery in a build without CUDA: the arguments are checked as in a CUDA build,
 *          then nothing is listed and every status says why. CMake compiles it instead of gpu_driver.c.
 */
#include "cuda_driver.h"

uform_status_t uform_cuda(uform_cuda_t const **driver) {
    (void)driver;
    return uform_fail(uform_status_unsupported_k, "%s", UFORM_NO_GPU_REASON);
}

uform_status_t uform_gpu_devices(uform_gpu_device_t *devices, size_t capacity, size_t *count) {
    uform_status_t const status = gpu_check_listing(devices, capacity, count);
    if (status != uform_status_ok_k) return status;
    *count = 0;
    return uform_status_ok_k;
}

uform_status_t uform_gpu_device_name(uform_gpu_ordinal_t ordinal, char *name, size_t capacity) {
    uform_status_t const status = gpu_check_name_buffer(name, capacity);
    if (status != uform_status_ok_k) return status;
    return uform_fail(uform_status_invalid_argument_k,
                      "uform_gpu_device_name: ordinal %d is out of range, no GPU is listed: %s", (int)ordinal,
                      UFORM_NO_GPU_REASON);
}

uform_status_t uform_gpu_status(void) { return uform_fail(uform_status_unsupported_k, "%s", UFORM_NO_GPU_REASON); }
