/**
 *  @file   fake_cuda.c
 *  @brief  A fake CUDA driver, built as `libcuda.so.1` for tests only, so the VRAM executor's device
 *          paths run (under ASan, UBSan and TSan too) on machines without a GPU. Never installed.
 *
 *  It implements exactly the functions the engine resolves (through `cuGetProcAddress_v2`), with the
 *  semantics the engine relies on, and checks the engine's use of them strictly:
 *
 *  - Devices: `FAKE_CUDA_DEVICES` of them (default 2; 0 makes `cuInit` fail with NO_DEVICE), named
 *    "UForm Fake GPU", compute capability 9.0, 132 SMs, 80 GiB. One primary context each, with a
 *    reference count; released to zero it is reset (its sticky error cleared), and anything it
 *    still holds (memory, streams, events, modules) is reported on stderr as "fake_cuda: leak".
 *  - A thread's current context is thread-local. Creating streams, events, modules or memory, and
 *    launching, need the right context current: a stream, function or event of another context is
 *    CUDA_ERROR_INVALID_HANDLE, no current context CUDA_ERROR_INVALID_CONTEXT.
 *  - Streams are FIFOs on a virtual clock: an operation finishes at max(now, the stream's last
 *    finish) + its duration (empty 2 us, element-wise 5 us, sleep its nanoseconds, trap 1 us). Any
 *    call touching a context first applies, in order, every operation that finished by now: fills
 *    and adds write the (host-allocated) device memory; a kernel touching memory outside every live
 *    allocation, or a trap, sets the context's sticky error (ILLEGAL_ADDRESS, ILLEGAL_INSTRUCTION),
 *    drops the queued work, and from then on every call on that context returns that error.
 *  - Events record their stream's last finish time; queries compare it with now.
 *  - `cuMemAlloc` above 64 GiB is CUDA_ERROR_OUT_OF_MEMORY.
 *  - `fake_cuda_refuse_context(device, times)` (exported for tests) makes the next `times` calls
 *    making that device's context current fail, to stop a VRAM call part-way through its devices.
 *  - `fake_cuda_hold(stream, release)` (exported for the fake NCCL) enqueues work that never finishes
 *    until `*release` turns non-zero, as an NCCL kernel spins on a dead peer until its abort flag
 *    is set: the stream, and every event recorded behind it, stay NOT_READY until then.
 *
 *  This file holds the shared state, the virtual clock, devices, contexts and the lookup table;
 *  fake_cuda_memory.c the memory and copies; fake_cuda_streams.c streams, events, modules,
 *  launches and graphs; fake_cuda_private.h what they share (all hidden).
 */
#include "fake_cuda_private.h"

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static int fake_devices = -1;
static bool fake_initialised = false;
static struct CUctx_st fake_contexts[FAKE_MAX_DEVICES];
struct CUstream_st *fake_streams = NULL;
fake_allocation_t *fake_allocations = NULL;
size_t fake_allocations_count = 0, fake_allocations_capacity = 0;
static atomic_int fake_leaks = 0;
static _Thread_local struct CUctx_st *fake_current = NULL;

double fake_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}

static bool fake_valid_context(struct CUctx_st *context) {
    return context >= fake_contexts && context < fake_contexts + FAKE_MAX_DEVICES && context->references > 0;
}

bool fake_inside(struct CUctx_st *context, uint64_t buffer, uint64_t bytes) {
    for (size_t index = 0; index < fake_allocations_count; ++index) {
        fake_allocation_t const *allocation = &fake_allocations[index];
        if (allocation->context == context && buffer >= allocation->base &&
            buffer + bytes <= allocation->base + allocation->bytes)
            return true;
    }
    return false;
}

/** A released hold at the head of `stream` finishes now, and so does the work queued behind it up
 *  to the next hold still held (it had no finish time while the hold stood). */
static void fake_release_hold(struct CUstream_st *stream, double now) {
    stream->ops[stream->head].finish = now, stream->ops[stream->head].release = NULL;
    size_t index = 1;
    for (; index < stream->count; ++index) {
        fake_op_t *op = &stream->ops[(stream->head + index) % stream->capacity];
        if (op->release) break;
        if (isinf(op->finish)) op->finish = now;
    }
    if (index == stream->count && isinf(stream->last_finish)) stream->last_finish = now;
}

/** Applies every finished operation of the context's streams, in each stream's order. */
static void fake_advance(struct CUctx_st *context) {
    double const now = fake_now();
    for (struct CUstream_st *stream = fake_streams; stream; stream = stream->next) {
        if (stream->context != context) continue;
        while (stream->count && !context->error) {
            fake_op_t *op = &stream->ops[stream->head];
            if (op->release && __atomic_load_n(op->release, __ATOMIC_ACQUIRE)) fake_release_hold(stream, now);
            if (op->finish > now) break;
            if (op->kernel == fake_trap_k) context->error = CUDA_ERROR_ILLEGAL_INSTRUCTION;
            else if (op->kernel == fake_fill_k || op->kernel == fake_add_k) {
                if (!fake_inside(context, op->buffer, op->count * sizeof(float)))
                    context->error = CUDA_ERROR_ILLEGAL_ADDRESS;
                else {
                    float *values = (float *)(uintptr_t)op->buffer;
                    for (uint64_t index = 0; index < op->count; ++index)
                        values[index] = op->kernel == fake_fill_k ? op->value : values[index] + op->value;
                }
            }
            stream->head = (stream->head + 1) % stream->capacity;
            --stream->count;
            ++stream->retired;
        }
        if (context->error) stream->retired += stream->count, stream->count = 0; // a broken context runs nothing more
    }
}

CUresult fake_touch(struct CUctx_st *context) {
    fake_advance(context);
    return context->error;
}

CUresult fake_current_context(struct CUctx_st **context) {
    if (!fake_current || !fake_valid_context(fake_current)) return CUDA_ERROR_INVALID_CONTEXT;
    *context = fake_current;
    return fake_touch(fake_current);
}

/* ---- Initialisation, devices, errors ---- */

static CUresult fake_init(unsigned flags) {
    if (flags) return CUDA_ERROR_INVALID_VALUE;
    char const *devices = getenv("FAKE_CUDA_DEVICES");
    fake_devices = devices ? atoi(devices) : 2;
    if (fake_devices > FAKE_MAX_DEVICES) fake_devices = FAKE_MAX_DEVICES;
    if (fake_devices <= 0) return CUDA_ERROR_NO_DEVICE;
    for (int device = 0; device < FAKE_MAX_DEVICES; ++device) fake_contexts[device].device = device;
    fake_initialised = true;
    return CUDA_SUCCESS;
}
static CUresult cu_init(unsigned flags) { FAKE_LOCKED(fake_init(flags)); }

static CUresult cu_driver_get_version(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

static CUresult cu_get_error_name(CUresult error, char const **name) {
    switch (error) {
    case CUDA_SUCCESS: *name = "CUDA_SUCCESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: *name = "CUDA_ERROR_ILLEGAL_INSTRUCTION"; return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; return CUDA_SUCCESS;
    default: *name = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult cu_get_error_string(CUresult error, char const **text) {
    switch (error) {
    case CUDA_ERROR_ILLEGAL_INSTRUCTION: *text = "an illegal instruction was encountered (fake)"; return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *text = "an illegal memory access was encountered (fake)"; return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory (fake)"; return CUDA_SUCCESS;
    default: *text = "fake driver error"; return CUDA_SUCCESS;
    }
}

static CUresult fake_check_device(CUdevice device) {
    if (!fake_initialised) return CUDA_ERROR_NOT_INITIALIZED;
    return device >= 0 && device < fake_devices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult cu_device_get(CUdevice *device, int ordinal) {
    CUresult result = fake_check_device(ordinal);
    if (result == CUDA_SUCCESS) *device = ordinal;
    return result;
}

static CUresult cu_device_get_count(int *count) {
    if (!fake_initialised) return CUDA_ERROR_NOT_INITIALIZED;
    *count = fake_devices;
    return CUDA_SUCCESS;
}

static CUresult cu_device_get_name(char *name, int length, CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result == CUDA_SUCCESS) snprintf(name, (size_t)length, "UForm Fake GPU");
    return result;
}

static CUresult cu_device_total_mem(size_t *bytes, CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result == CUDA_SUCCESS) *bytes = (size_t)80 << 30;
    return result;
}

static CUresult cu_device_get_attribute(int *value, CUdevice_attribute attribute, CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result != CUDA_SUCCESS) return result;
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: *value = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

static CUresult cu_device_get_pci_bus_id(char *text, int length, CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result == CUDA_SUCCESS) snprintf(text, (size_t)length, "0000:%02X:00.0", 0x1A + device);
    return result;
}

static CUresult cu_device_get_uuid(CUuuid *uuid, CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result == CUDA_SUCCESS) memset(uuid->bytes, device + 1, sizeof(uuid->bytes));
    return result;
}

static CUresult cu_device_can_access_peer(int *can, CUdevice device, CUdevice peer) {
    CUresult result = fake_check_device(device);
    if (result == CUDA_SUCCESS) result = fake_check_device(peer);
    if (result == CUDA_SUCCESS) *can = device != peer;
    return result;
}

/* ---- Contexts ---- */

static void fake_report_leak(struct CUctx_st *context, char const *what, int count) {
    if (count <= 0) return;
    fprintf(stderr, "fake_cuda: leak: the primary context of device %d was released with %d %s\n", context->device,
            count, what);
    atomic_fetch_add(&fake_leaks, 1);
}

static CUresult fake_primary_retain(CUcontext *context, CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result != CUDA_SUCCESS) return result;
    fake_contexts[device].references++;
    *context = &fake_contexts[device];
    return CUDA_SUCCESS;
}
static CUresult cu_primary_retain(CUcontext *context, CUdevice device) { FAKE_LOCKED(fake_primary_retain(context, device)); }

static CUresult fake_primary_release(CUdevice device) {
    CUresult result = fake_check_device(device);
    if (result != CUDA_SUCCESS) return result;
    struct CUctx_st *context = &fake_contexts[device];
    if (context->references <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--context->references == 0) {
        fake_report_leak(context, "allocations", context->allocations);
        fake_report_leak(context, "streams", context->streams);
        fake_report_leak(context, "events", context->events);
        fake_report_leak(context, "modules", context->modules);
        *context = (struct CUctx_st) {.device = device};
    }
    return CUDA_SUCCESS;
}
static CUresult cu_primary_release(CUdevice device) { FAKE_LOCKED(fake_primary_release(device)); }

static CUresult fake_primary_state(CUdevice device, unsigned *flags, int *active) {
    CUresult result = fake_check_device(device);
    if (result != CUDA_SUCCESS) return result;
    *flags = 0;
    *active = fake_contexts[device].references > 0;
    return CUDA_SUCCESS;
}
static CUresult cu_primary_state(CUdevice device, unsigned *flags, int *active) {
    FAKE_LOCKED(fake_primary_state(device, flags, active));
}

static CUresult cu_ctx_get_current(CUcontext *context) {
    *context = fake_current;
    return CUDA_SUCCESS;
}

/* Test seam: `fake_cuda_refuse_context(device, times)` makes the next `times` calls making that
 * device's context current fail with CUDA_ERROR_INVALID_CONTEXT (not a sticky fault), so tests can
 * stop a VRAM call part-way through its devices. Tests find it with dlsym in libcuda.so.1. */
static atomic_int fake_refused_device = -1, fake_refusals = 0;

FAKE_API void fake_cuda_refuse_context(int device, int times) {
    atomic_store(&fake_refusals, times);
    atomic_store(&fake_refused_device, device);
}

static CUresult cu_ctx_set_current(CUcontext context) {
    if (context && context->device == atomic_load(&fake_refused_device) && atomic_load(&fake_refusals) > 0 &&
        atomic_fetch_sub(&fake_refusals, 1) > 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_current = context;
    return CUDA_SUCCESS;
}

static CUresult cu_ctx_push_current(CUcontext context) { return cu_ctx_set_current(context); }
static CUresult cu_ctx_pop_current(CUcontext *context) {
    if (context) *context = fake_current;
    fake_current = NULL;
    return CUDA_SUCCESS;
}
static CUresult cu_ctx_enable_peer_access(CUcontext peer, unsigned flags) {
    (void)peer, (void)flags;
    return CUDA_SUCCESS;
}

/* ---- Lookup ---- */

static struct {
    char const *name;
    void *function;
} const fake_table[] = {
    {"cuInit", (void *)cu_init},
    {"cuDriverGetVersion", (void *)cu_driver_get_version},
    {"cuGetErrorName", (void *)cu_get_error_name},
    {"cuGetErrorString", (void *)cu_get_error_string},
    {"cuDeviceGet", (void *)cu_device_get},
    {"cuDeviceGetCount", (void *)cu_device_get_count},
    {"cuDeviceGetName", (void *)cu_device_get_name},
    {"cuDeviceTotalMem", (void *)cu_device_total_mem},
    {"cuDeviceGetAttribute", (void *)cu_device_get_attribute},
    {"cuDeviceGetPCIBusId", (void *)cu_device_get_pci_bus_id},
    {"cuDeviceGetUuid", (void *)cu_device_get_uuid},
    {"cuDeviceCanAccessPeer", (void *)cu_device_can_access_peer},
    {"cuDevicePrimaryCtxRetain", (void *)cu_primary_retain},
    {"cuDevicePrimaryCtxRelease", (void *)cu_primary_release},
    {"cuDevicePrimaryCtxGetState", (void *)cu_primary_state},
    {"cuCtxGetCurrent", (void *)cu_ctx_get_current},
    {"cuCtxSetCurrent", (void *)cu_ctx_set_current},
    {"cuCtxPushCurrent", (void *)cu_ctx_push_current},
    {"cuCtxPopCurrent", (void *)cu_ctx_pop_current},
    {"cuCtxEnablePeerAccess", (void *)cu_ctx_enable_peer_access},
    {"cuStreamCreate", (void *)fake_cu_stream_create},
    {"cuStreamDestroy", (void *)fake_cu_stream_destroy},
    {"cuStreamQuery", (void *)fake_cu_stream_query},
    {"cuStreamSynchronize", (void *)fake_cu_stream_synchronize},
    {"cuStreamWaitEvent", (void *)fake_cu_stream_wait_event},
    {"cuEventCreate", (void *)fake_cu_event_create},
    {"cuEventDestroy", (void *)fake_cu_event_destroy},
    {"cuEventRecord", (void *)fake_cu_event_record},
    {"cuEventQuery", (void *)fake_cu_event_query},
    {"cuEventSynchronize", (void *)fake_cu_event_synchronize},
    {"cuEventElapsedTime", (void *)fake_cu_event_elapsed_time},
    {"cuMemAlloc", (void *)fake_cu_mem_alloc},
    {"cuMemFree", (void *)fake_cu_mem_free},
    {"cuMemHostAlloc", (void *)fake_cu_mem_host_alloc},
    {"cuMemFreeHost", (void *)fake_cu_mem_free_host},
    {"cuMemGetInfo", (void *)fake_cu_mem_get_info},
    {"cuMemcpyHtoD", (void *)fake_cu_memcpy_htod},
    {"cuMemcpyDtoH", (void *)fake_cu_memcpy_dtoh},
    {"cuMemcpyHtoDAsync", (void *)fake_cu_memcpy_htod_async},
    {"cuMemcpyDtoHAsync", (void *)fake_cu_memcpy_dtoh_async},
    {"cuMemcpyPeerAsync", (void *)fake_cu_memcpy_peer_async},
    {"cuMemsetD8Async", (void *)fake_cu_memset_d8_async},
    {"cuMemsetD32Async", (void *)fake_cu_memset_d32_async},
    {"cuModuleLoadData", (void *)fake_cu_module_load_data},
    {"cuModuleUnload", (void *)fake_cu_module_unload},
    {"cuModuleGetFunction", (void *)fake_cu_module_get_function},
    {"cuLaunchKernel", (void *)fake_cu_launch_kernel},
    {"cuFuncSetAttribute", (void *)fake_cu_func_set_attribute},
    {"cuStreamBeginCapture", (void *)fake_cu_stream_begin_capture},
    {"cuStreamEndCapture", (void *)fake_cu_stream_end_capture},
    {"cuGraphInstantiateWithFlags", (void *)fake_cu_graph_instantiate},
    {"cuGraphLaunch", (void *)fake_cu_graph_launch},
    {"cuGraphExecDestroy", (void *)fake_cu_graph_exec_destroy},
    {"cuGraphDestroy", (void *)fake_cu_graph_destroy},
};

FAKE_API CUresult cuGetProcAddress_v2(char const *symbol, void **function, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult *status) {
    (void)version, (void)flags;
    for (size_t index = 0; index < sizeof(fake_table) / sizeof(fake_table[0]); ++index)
        if (!strcmp(symbol, fake_table[index].name)) {
            *function = fake_table[index].function;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *function = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

/** At exit: a non-zero leak count is reported once more, for ctest's FAIL_REGULAR_EXPRESSION. */
__attribute__((destructor)) static void fake_cuda_exit_report(void) {
    if (atomic_load(&fake_leaks)) fprintf(stderr, "fake_cuda: leak: %d leak report(s) in this process\n", atomic_load(&fake_leaks));
}

// Every fake has the exact signature of the ABI version the engine asks for: a mismatch here
// fails the build (-Werror), instead of becoming undefined behaviour through a cast pointer.
static void fake_check_signatures(void) __attribute__((unused));
static void fake_check_signatures(void) {
    PFN_cuInit_v2000 init = cu_init;
    PFN_cuDriverGetVersion_v2020 driver_version = cu_driver_get_version;
    PFN_cuGetErrorName_v6000 error_name = cu_get_error_name;
    PFN_cuGetErrorString_v6000 error_string = cu_get_error_string;
    PFN_cuDeviceGet_v2000 device_get = cu_device_get;
    PFN_cuDeviceGetCount_v2000 device_count = cu_device_get_count;
    PFN_cuDeviceGetName_v2000 device_name = cu_device_get_name;
    PFN_cuDeviceTotalMem_v3020 total_mem = cu_device_total_mem;
    PFN_cuDeviceGetAttribute_v2000 attribute = cu_device_get_attribute;
    PFN_cuDeviceGetPCIBusId_v4010 bus_id = cu_device_get_pci_bus_id;
    PFN_cuDeviceGetUuid_v11040 uuid = cu_device_get_uuid;
    PFN_cuDeviceCanAccessPeer_v4000 can_access = cu_device_can_access_peer;
    PFN_cuDevicePrimaryCtxRetain_v7000 retain = cu_primary_retain;
    PFN_cuDevicePrimaryCtxRelease_v11000 release = cu_primary_release;
    PFN_cuDevicePrimaryCtxGetState_v7000 state = cu_primary_state;
    PFN_cuCtxGetCurrent_v4000 get_current = cu_ctx_get_current;
    PFN_cuCtxSetCurrent_v4000 set_current = cu_ctx_set_current;
    PFN_cuCtxPushCurrent_v4000 push = cu_ctx_push_current;
    PFN_cuCtxPopCurrent_v4000 pop = cu_ctx_pop_current;
    PFN_cuCtxEnablePeerAccess_v4000 enable_peer = cu_ctx_enable_peer_access;
    PFN_cuStreamCreate_v2000 stream_create = fake_cu_stream_create;
    PFN_cuStreamDestroy_v4000 stream_destroy = fake_cu_stream_destroy;
    PFN_cuStreamQuery_v2000 stream_query = fake_cu_stream_query;
    PFN_cuStreamSynchronize_v2000 stream_sync = fake_cu_stream_synchronize;
    PFN_cuStreamWaitEvent_v3020 stream_wait = fake_cu_stream_wait_event;
    PFN_cuEventCreate_v2000 event_create = fake_cu_event_create;
    PFN_cuEventDestroy_v4000 event_destroy = fake_cu_event_destroy;
    PFN_cuEventRecord_v2000 event_record = fake_cu_event_record;
    PFN_cuEventQuery_v2000 event_query = fake_cu_event_query;
    PFN_cuEventSynchronize_v2000 event_sync = fake_cu_event_synchronize;
    PFN_cuEventElapsedTime_v2000 elapsed = fake_cu_event_elapsed_time;
    PFN_cuMemAlloc_v3020 alloc = fake_cu_mem_alloc;
    PFN_cuMemFree_v3020 mem_free = fake_cu_mem_free;
    PFN_cuMemHostAlloc_v2020 host_alloc = fake_cu_mem_host_alloc;
    PFN_cuMemFreeHost_v2000 free_host = fake_cu_mem_free_host;
    PFN_cuMemGetInfo_v3020 info = fake_cu_mem_get_info;
    PFN_cuMemcpyHtoD_v3020 htod = fake_cu_memcpy_htod;
    PFN_cuMemcpyDtoH_v3020 dtoh = fake_cu_memcpy_dtoh;
    PFN_cuMemcpyHtoDAsync_v3020 htod_async = fake_cu_memcpy_htod_async;
    PFN_cuMemcpyDtoHAsync_v3020 dtoh_async = fake_cu_memcpy_dtoh_async;
    PFN_cuMemcpyPeerAsync_v4000 peer_async = fake_cu_memcpy_peer_async;
    PFN_cuMemsetD8Async_v3020 memset8 = fake_cu_memset_d8_async;
    PFN_cuMemsetD32Async_v3020 memset32 = fake_cu_memset_d32_async;
    PFN_cuModuleLoadData_v2000 load = fake_cu_module_load_data;
    PFN_cuModuleUnload_v2000 unload = fake_cu_module_unload;
    PFN_cuModuleGetFunction_v2000 get_function = fake_cu_module_get_function;
    PFN_cuLaunchKernel_v4000 launch = fake_cu_launch_kernel;
    PFN_cuFuncSetAttribute_v9000 set_attribute = fake_cu_func_set_attribute;
    PFN_cuStreamBeginCapture_v10010 begin_capture = fake_cu_stream_begin_capture;
    PFN_cuStreamEndCapture_v10000 end_capture = fake_cu_stream_end_capture;
    PFN_cuGraphInstantiateWithFlags_v11040 instantiate = fake_cu_graph_instantiate;
    PFN_cuGraphLaunch_v10000 graph_launch = fake_cu_graph_launch;
    PFN_cuGraphExecDestroy_v10000 exec_destroy = fake_cu_graph_exec_destroy;
    PFN_cuGraphDestroy_v10000 graph_destroy = fake_cu_graph_destroy;
    (void)set_attribute, (void)begin_capture, (void)end_capture, (void)instantiate, (void)graph_launch;
    (void)exec_destroy, (void)graph_destroy, (void)host_alloc, (void)free_host;
    PFN_cuGetProcAddress_v12000 get_proc_address = cuGetProcAddress_v2;
    (void)init, (void)driver_version, (void)error_name, (void)error_string, (void)device_get, (void)device_count;
    (void)device_name, (void)total_mem, (void)attribute, (void)bus_id, (void)uuid, (void)can_access, (void)retain;
    (void)release, (void)state, (void)get_current, (void)set_current, (void)push, (void)pop, (void)enable_peer;
    (void)stream_create, (void)stream_destroy, (void)stream_query, (void)stream_sync, (void)stream_wait;
    (void)event_create, (void)event_destroy, (void)event_record, (void)event_query, (void)event_sync, (void)elapsed;
    (void)alloc, (void)mem_free, (void)info, (void)htod, (void)dtoh, (void)htod_async, (void)dtoh_async;
    (void)peer_async, (void)memset8, (void)memset32, (void)load, (void)unload, (void)get_function, (void)launch;
    (void)get_proc_address;
}
