/**
 *  @file   cuda_driver.h
 *  @brief  The CUDA driver as the engine loads it at run time: one table of function pointers, the
 *          devices it found, GPU class rules, and error formatting. Shared by gpu.c, vram.c and
 *          mesh.c; never seen by users.
 *
 *  The driver is `libcuda.so.1`, opened once per process with `dlopen` (RTLD_NOW | RTLD_LOCAL) the
 *  first time any of this is asked for; the library never links it, and needs only the toolkit's
 *  headers to build. Each entry is resolved through `cuGetProcAddress_v2` at the ABI version named
 *  in `UFORM_CUDA_FUNCTIONS` (so the signature always matches the `PFN_*` typedef it is stored as,
 *  whatever the driver's own version), falling back to `dlsym` of the versioned export name on
 *  drivers older than 12.0 that lack `cuGetProcAddress_v2`.
 *
 *  In a build without CUDA (`UFORM_WITH_CUDA` 0), only the class rules and an opaque
 *  `uform_cuda_t` exist, and `uform_cuda` always reports UNSUPPORTED.
 *
 *  @code{.c}
 *  uform_cuda_t const *cuda;
 *  if (uform_cuda(&cuda) != uform_status_ok_k) return uform_status_unsupported_k; // message set
 *  CUresult result = cuda->MemAlloc(&pointer, bytes);
 *  if (result != CUDA_SUCCESS)
 *      return uform_cuda_fail(uform_status_out_of_memory_k, result, "cuMemAlloc of %zu bytes", bytes);
 *  @endcode
 */
#ifndef UFORM_CUDA_DRIVER_H
#define UFORM_CUDA_DRIVER_H

#include "internal.h"

#ifndef UFORM_WITH_CUDA
#define UFORM_WITH_CUDA 0
#endif

/** The reason every GPU function of a build without CUDA gives (the `*_stub.c` files). */
#define UFORM_NO_GPU_REASON                                                                        \
    "built without GPU support: libuform was configured with UFORM_WITH_CUDA=OFF or without the "  \
    "CUDA toolkit"

/** Argument checks of the listing functions, shared by gpu_driver.c and gpu_stub.c (gpu.c). */
uform_status_t gpu_check_listing(uform_gpu_device_t const *devices, size_t capacity, size_t const *count);
uform_status_t gpu_check_name_buffer(char const *name, size_t capacity);

/* ---- GPU classes (gpu.c, in every build) ---- */

/** @brief The class of an NVIDIA device of compute capability `major.minor`, per uform.h's table:
 *  below 8.9 AMPERE, 8.9 ADA, 9.x HOPPER, 10.x and 11.x BLACKWELL, 12.x BLACKWELLRTX, 13+ RUBIN. */
uform_gpu_class_t uform_gpu_class_of_capability(int major, int minor);

/** @brief Whether a device of class `own` can run kernels dispatched as `pinned`: `pinned` is `own`
 *  or one of its ancestors (AMPERE < ADA < HOPPER < BLACKWELL < RUBIN, AMPERE < ADA < BLACKWELLRTX).
 *  False for UNKNOWN and for classes of other vendors. */
bool uform_gpu_class_runs(uform_gpu_class_t own, uform_gpu_class_t pinned);

/** @brief The highest class that devices of classes `a` and `b` can both run (their meet in the
 *  tree above): HOPPER and BLACKWELLRTX meet at ADA. UNKNOWN if either is UNKNOWN. */
uform_gpu_class_t uform_gpu_class_common(uform_gpu_class_t a, uform_gpu_class_t b);

#if UFORM_WITH_CUDA

#include <cuda.h>
#include <cudaTypedefs.h>

/**
 *  @brief Every driver function the engine uses: (field, ABI version, exported symbol). The field
 *  is the CUDA name without its `cu` prefix (so cuda.h's `#define cuMemAlloc cuMemAlloc_v2` never
 *  renames it), the version picks both the `PFN_cu<field>_v<version>` typedef and what
 *  `cuGetProcAddress` returns, and the symbol is the `dlsym` fallback. Add a line to add a function.
 */
#define UFORM_CUDA_FUNCTIONS(X)                                                                    \
    X(Init, 2000, "cuInit")                                                                        \
    X(DriverGetVersion, 2020, "cuDriverGetVersion")                                                \
    X(GetErrorName, 6000, "cuGetErrorName")                                                        \
    X(GetErrorString, 6000, "cuGetErrorString")                                                    \
    X(DeviceGet, 2000, "cuDeviceGet")                                                              \
    X(DeviceGetCount, 2000, "cuDeviceGetCount")                                                    \
    X(DeviceGetName, 2000, "cuDeviceGetName")                                                      \
    X(DeviceTotalMem, 3020, "cuDeviceTotalMem_v2")                                                 \
    X(DeviceGetAttribute, 2000, "cuDeviceGetAttribute")                                            \
    X(DeviceGetPCIBusId, 4010, "cuDeviceGetPCIBusId")                                              \
    X(DeviceGetUuid, 11040, "cuDeviceGetUuid_v2")                                                  \
    X(DeviceCanAccessPeer, 4000, "cuDeviceCanAccessPeer")                                          \
    X(DevicePrimaryCtxRetain, 7000, "cuDevicePrimaryCtxRetain")                                    \
    X(DevicePrimaryCtxRelease, 11000, "cuDevicePrimaryCtxRelease_v2")                              \
    X(DevicePrimaryCtxGetState, 7000, "cuDevicePrimaryCtxGetState")                                \
    X(CtxGetCurrent, 4000, "cuCtxGetCurrent")                                                      \
    X(CtxSetCurrent, 4000, "cuCtxSetCurrent")                                                      \
    X(CtxPushCurrent, 4000, "cuCtxPushCurrent_v2")                                                 \
    X(CtxPopCurrent, 4000, "cuCtxPopCurrent_v2")                                                   \
    X(CtxEnablePeerAccess, 4000, "cuCtxEnablePeerAccess")                                          \
    X(StreamCreate, 2000, "cuStreamCreate")                                                        \
    X(StreamDestroy, 4000, "cuStreamDestroy_v2")                                                   \
    X(StreamQuery, 2000, "cuStreamQuery")                                                          \
    X(StreamSynchronize, 2000, "cuStreamSynchronize")                                              \
    X(StreamWaitEvent, 3020, "cuStreamWaitEvent")                                                  \
    X(EventCreate, 2000, "cuEventCreate")                                                          \
    X(EventDestroy, 4000, "cuEventDestroy_v2")                                                     \
    X(EventRecord, 2000, "cuEventRecord")                                                          \
    X(EventQuery, 2000, "cuEventQuery")                                                            \
    X(EventSynchronize, 2000, "cuEventSynchronize")                                                \
    X(EventElapsedTime, 2000, "cuEventElapsedTime")                                                \
    X(MemAlloc, 3020, "cuMemAlloc_v2")                                                             \
    X(MemFree, 3020, "cuMemFree_v2")                                                               \
    X(MemHostAlloc, 2020, "cuMemHostAlloc")                                                        \
    X(MemFreeHost, 2000, "cuMemFreeHost")                                                          \
    X(MemGetInfo, 3020, "cuMemGetInfo_v2")                                                         \
    X(MemcpyHtoD, 3020, "cuMemcpyHtoD_v2")                                                         \
    X(MemcpyDtoH, 3020, "cuMemcpyDtoH_v2")                                                         \
    X(MemcpyHtoDAsync, 3020, "cuMemcpyHtoDAsync_v2")                                               \
    X(MemcpyDtoHAsync, 3020, "cuMemcpyDtoHAsync_v2")                                               \
    X(MemcpyPeerAsync, 4000, "cuMemcpyPeerAsync")                                                  \
    X(MemsetD8Async, 3020, "cuMemsetD8Async")                                                      \
    X(MemsetD32Async, 3020, "cuMemsetD32Async")                                                    \
    X(ModuleLoadData, 2000, "cuModuleLoadData")                                                    \
    X(ModuleUnload, 2000, "cuModuleUnload")                                                        \
    X(ModuleGetFunction, 2000, "cuModuleGetFunction")                                              \
    X(LaunchKernel, 4000, "cuLaunchKernel")                                                        \
    X(FuncSetAttribute, 9000, "cuFuncSetAttribute")                                                \
    X(StreamBeginCapture, 10010, "cuStreamBeginCapture_v2")                                        \
    X(StreamEndCapture, 10000, "cuStreamEndCapture")                                               \
    X(GraphInstantiateWithFlags, 11040, "cuGraphInstantiateWithFlags")                             \
    X(GraphLaunch, 10000, "cuGraphLaunch")                                                         \
    X(GraphExecDestroy, 10000, "cuGraphExecDestroy")                                               \
    X(GraphDestroy, 10000, "cuGraphDestroy")

/** @brief The loaded driver: immutable once `uform_cuda` returned it, shared by every thread. */
typedef struct uform_cuda_t {
#define UFORM_CUDA_FIELD(name, version, symbol) PFN_cu##name##_v##version name;
    UFORM_CUDA_FUNCTIONS(UFORM_CUDA_FIELD)
#undef UFORM_CUDA_FIELD
    int driver_version; /**< `cuDriverGetVersion`, as 1000 * major + 10 * minor. */
} uform_cuda_t;

/** @brief One device as the driver reported it when the driver was loaded (listing order). */
typedef struct uform_cuda_device_t {
    CUdevice device;                  /**< The driver's handle, equal to its CUDA ordinal. */
    int major, minor;                 /**< Compute capability. */
    uform_gpu_class_t own_class;      /**< `uform_gpu_class_of_capability(major, minor)`. */
    uint32_t multiprocessors;         /**< CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT. */
    uint64_t memory_bytes;            /**< `cuDeviceTotalMem`. */
    bool multicast_supported;         /**< CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, a query only. */
    char name[256];                   /**< `cuDeviceGetName`. */
    char pci_bus_id[32];              /**< `cuDeviceGetPCIBusId`, lower-cased as sysfs spells it. */
} uform_cuda_device_t;

/** @brief The engine's kernels as one fatbin (nvcc from kernels.cu), embedded by kernels_fatbin.c. */
extern unsigned char const uform_kernels_fatbin[];
extern size_t const uform_kernels_fatbin_size;

/** @brief The devices found at load time; UNSUPPORTED (with the reason as the thread's message and
 *  `*count` zero) when there is no driver or no device. Loads the driver on first use. */
uform_status_t uform_cuda_devices(uform_cuda_device_t const **devices, size_t *count);

/** @brief Formats "CUDA_ERROR_NAME (the driver's sentence)" for `result` into `buffer`, or
 *  "CUresult N" when the driver cannot name it. Returns `buffer`. */
char const *uform_cuda_error_text(CUresult result, char *buffer, size_t capacity);

/** @brief True for the errors after which the context is unusable (sticky faults: illegal address
 *  or instruction, misaligned address, launch failure, trap, hardware stack error, ECC, assert,
 *  launch timeout, unknown): the executor that sees one is poisoned. */
bool uform_cuda_error_is_fault(CUresult result);

/** @brief The one CUresult-to-status mapping: OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY, DEVICE_FAULT
 *  for a sticky error (`uform_cuda_error_is_fault`), else `otherwise`. */
uform_status_t uform_cuda_status(CUresult result, uform_status_t otherwise);

/** @brief Records "<formatted context>: <uform_cuda_error_text(result)>" as the thread's message and
 *  returns `status`. */
uform_status_t uform_cuda_fail(uform_status_t status, CUresult result, char const *format, ...) UFORM_PRINTF(3, 4);

/** @brief The ordinal "one free device" derives to, per uform_vram_options_t's rule, using NVML
 *  (`libnvidia-ml.so.1`, loaded at run time) so that no context is created on any device. Without
 *  NVML the lowest ordinal. `*used_nvml` (may be NULL) tells which. Expects at least one device. */
size_t uform_cuda_pick_free_device(bool *used_nvml);

/** @brief The one way the engine makes contexts current (the VRAM executor and the mesh): the
 *  calling thread's context on entry, restored on leaving, and the one made current since, so that
 *  consecutive uses of one context cost no driver call.
 *
 *  @code
 *  uform_cuda_context_t context;
 *  uform_cuda_context_enter(cuda, &context);
 *  for (size_t d = 0; d < count; ++d)
 *      if (uform_cuda_context_use(cuda, &context, contexts[d]) == CUDA_SUCCESS) work_on(d);
 *  uform_cuda_context_leave(cuda, &context);
 *  @endcode */
typedef struct uform_cuda_context_t {
    CUcontext saved, current;
} uform_cuda_context_t;

static inline void uform_cuda_context_enter(uform_cuda_t const *cuda, uform_cuda_context_t *state) {
    if (cuda->CtxGetCurrent(&state->saved) != CUDA_SUCCESS) state->saved = NULL;
    state->current = state->saved;
}

static inline CUresult uform_cuda_context_use(uform_cuda_t const *cuda, uform_cuda_context_t *state, CUcontext context) {
    if (state->current == context) return CUDA_SUCCESS;
    CUresult result = cuda->CtxSetCurrent(context);
    if (result == CUDA_SUCCESS) state->current = context;
    return result;
}

static inline void uform_cuda_context_leave(uform_cuda_t const *cuda, uform_cuda_context_t *state) {
    if (state->current != state->saved) cuda->CtxSetCurrent(state->saved);
    state->current = state->saved;
}

/** @brief `uform_fork_generation()` when the driver was initialised: CUDA cannot be used in a child
 *  forked after that, so creating executors there is refused. */
uint64_t uform_cuda_fork_generation(void);

#else

typedef struct uform_cuda_t uform_cuda_t; /**< Opaque: a build without CUDA has no table. */

#endif

/** @brief The loaded driver table. UNSUPPORTED, with the reason as the thread's message, in a build
 *  without CUDA, without `libcuda.so.1`, with a driver missing a function the engine needs, or when
 *  `cuInit` failed. Zero devices is not a failure here (`uform_cuda_devices` reports that). */
uform_status_t uform_cuda(uform_cuda_t const **driver);

#endif // UFORM_CUDA_DRIVER_H
