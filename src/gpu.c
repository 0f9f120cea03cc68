/**
 *  @file   gpu.c
 *  @brief  GPU discovery: the CUDA driver loaded at run time, its function table, the device
 *          listing, class and vendor names, and the "one free device" rule.
 *
 *  Decisions, for the public functions of this file:
 *
 *  - The driver is loaded once per process, on the first call that needs it (any listing, status
 *    or VRAM executor), under `pthread_once`. `dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)`; every
 *    function through `cuGetProcAddress_v2` at a pinned ABI version (see cuda_driver.h); `cuInit(0)`;
 *    then every device's facts are read once and cached. The library is never closed: CUDA keeps
 *    threads and handlers that would dangle. No context is created by discovery.
 *  - Whatever fails (no library, a missing function, `cuInit`, a device query, zero devices) leaves
 *    an empty listing and a sentence saying why, which `uform_gpu_status` and `uform_executor_for_vram`
 *    report with UNSUPPORTED. `uform_gpu_devices` itself then succeeds with zero devices.
 *  - The listing is the driver's order, after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, so a
 *    device's UForm ordinal equals its CUDA ordinal (`vendor_ordinal`). The facts are the ones read
 *    at load time: name, SMs, total memory and compute capability never change while a process runs.
 *  - A build without CUDA compiles the same public functions as stubs that list nothing and say
 *    "built without GPU support" (gpu_stub.c instead of gpu_driver.c, chosen by CMake).
 *
 *  This file holds what every build shares (names, the class rules, argument checks); the driver
 *  and the listing are in gpu_driver.c.
 */
#define _GNU_SOURCE
#include "cuda_driver.h"

#include <stdio.h>  // `snprintf`
#include <string.h> // `memcpy`

/* ---- Names and classes, in every build ---- */

char const *uform_gpu_class_name(uform_gpu_class_t gpu_class) {
    static char const *const names[] = {
        "unknown",    "nvidia_ampere", "nvidia_ada", "nvidia_hopper", "nvidia_blackwell",
        "nvidia_blackwellrtx", "nvidia_rubin", "amd_cdna3", "amd_cdna4", "amd_cdna5",
        "apple_metal7", "apple_metal9", "apple_metal10",
    };
    if ((unsigned)gpu_class >= sizeof(names) / sizeof(names[0])) return "invalid";
    return names[gpu_class];
}

char const *uform_gpu_vendor_name(uform_gpu_vendor_t vendor) {
    static char const *const names[] = {"unknown", "nvidia", "amd", "apple"};
    if ((unsigned)vendor >= sizeof(names) / sizeof(names[0])) return "invalid";
    return names[vendor];
}

uform_gpu_class_t uform_gpu_class_of_capability(int major, int minor) {
    if (major >= 13) return uform_gpu_class_nvidia_rubin_k;
    if (major == 12) return uform_gpu_class_nvidia_blackwellrtx_k;
    if (major == 10 || major == 11) return uform_gpu_class_nvidia_blackwell_k;
    if (major == 9) return uform_gpu_class_nvidia_hopper_k;
    if (major == 8 && minor >= 9) return uform_gpu_class_nvidia_ada_k;
    return uform_gpu_class_nvidia_ampere_k;
}

/** The parent of an NVIDIA class in the descent tree, UNKNOWN for the root and for other vendors. */
static uform_gpu_class_t uform_gpu_class_parent(uform_gpu_class_t gpu_class) {
    switch (gpu_class) {
    case uform_gpu_class_nvidia_ada_k: return uform_gpu_class_nvidia_ampere_k;
    case uform_gpu_class_nvidia_hopper_k: return uform_gpu_class_nvidia_ada_k;
    case uform_gpu_class_nvidia_blackwell_k: return uform_gpu_class_nvidia_hopper_k;
    case uform_gpu_class_nvidia_rubin_k: return uform_gpu_class_nvidia_blackwell_k;
    case uform_gpu_class_nvidia_blackwellrtx_k: return uform_gpu_class_nvidia_ada_k;
    default: return uform_gpu_class_unknown_k;
    }
}

bool uform_gpu_class_runs(uform_gpu_class_t own, uform_gpu_class_t pinned) {
    if (pinned == uform_gpu_class_unknown_k) return false;
    for (uform_gpu_class_t cursor = own; cursor != uform_gpu_class_unknown_k; cursor = uform_gpu_class_parent(cursor))
        if (cursor == pinned) return true;
    return false;
}

uform_gpu_class_t uform_gpu_class_common(uform_gpu_class_t a, uform_gpu_class_t b) {
    for (uform_gpu_class_t cursor = a; cursor != uform_gpu_class_unknown_k; cursor = uform_gpu_class_parent(cursor))
        if (uform_gpu_class_runs(b, cursor)) return cursor;
    return uform_gpu_class_unknown_k;
}

/* ---- Argument checks, the same with and without CUDA ---- */

uform_status_t gpu_check_listing(uform_gpu_device_t const *devices, size_t capacity, size_t const *count) {
    if (!count) return uform_fail(uform_status_invalid_argument_k, "uform_gpu_devices: count is NULL");
    if (capacity && !devices)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_gpu_devices: devices is NULL but capacity is %zu; pass capacity 0 to query the count",
                          capacity);
    return uform_status_ok_k;
}

uform_status_t gpu_check_name_buffer(char const *name, size_t capacity) {
    if (!name || !capacity)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_gpu_device_name: the name buffer is %s; pass a buffer of at least one byte",
                          name ? "of capacity 0" : "NULL");
    return uform_status_ok_k;
}
