/**
 *  @file   gpu_driver.c
 *  @brief  The CUDA driver loaded at run time, its function table, the device listing and the "one
 *          free device" rule (gpu.c says what they promise). Compiled only with CUDA.
 */
#define _GNU_SOURCE
#include "cuda_driver.h"

#include <stdio.h>  // `snprintf`
#include <string.h> // `memcpy`
#include <ctype.h>   // `tolower`
#include <dlfcn.h>   // `dlopen`
#include <pthread.h> // `pthread_once`
#include <stdlib.h>  // `calloc`

/** Everything discovery learnt, written once under `pthread_once` and read-only afterwards. */
static struct {
    pthread_once_t once;
    bool table_ready;           /**< The library, every function and `cuInit` succeeded. */
    uform_cuda_t table;
    uint64_t fork_generation;   /**< At load time. */
    size_t devices_count;
    uform_cuda_device_t *devices;
    char reason[480];           /**< Why `devices_count` is zero, or why `table_ready` is false. */
} uform_gpu = {.once = PTHREAD_ONCE_INIT};

char const *uform_cuda_error_text(CUresult result, char *buffer, size_t capacity) {
    char const *name = NULL, *sentence = NULL;
    if (uform_gpu.table.GetErrorName && uform_gpu.table.GetErrorName(result, &name) != CUDA_SUCCESS) name = NULL;
    if (uform_gpu.table.GetErrorString && uform_gpu.table.GetErrorString(result, &sentence) != CUDA_SUCCESS)
        sentence = NULL;
    if (!name && result == CUDA_ERROR_STUB_LIBRARY) // the stub names nothing, not even itself
        name = "CUDA_ERROR_STUB_LIBRARY", sentence = "the toolkit's stub libcuda was loaded, not the NVIDIA driver's";
    if (name && sentence) snprintf(buffer, capacity, "%s (%s)", name, sentence);
    else if (name) snprintf(buffer, capacity, "%s", name);
    else snprintf(buffer, capacity, "CUresult %d", (int)result);
    return buffer;
}

bool uform_cuda_error_is_fault(CUresult result) {
    switch (result) {
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_NVLINK_UNCORRECTABLE:
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_EXTERNAL_DEVICE:
    case CUDA_ERROR_UNKNOWN: return true;
    default: return false;
    }
}

uform_status_t uform_cuda_status(CUresult result, uform_status_t otherwise) {
    if (result == CUDA_ERROR_OUT_OF_MEMORY) return uform_status_out_of_memory_k;
    if (uform_cuda_error_is_fault(result)) return uform_status_device_fault_k;
    return otherwise;
}

uform_status_t uform_cuda_fail(uform_status_t status, CUresult result, char const *format, ...) {
    char context[320], error[160];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(context, sizeof(context), format, arguments);
    va_end(arguments);
    return uform_fail(status, "%s: %s", context, uform_cuda_error_text(result, error, sizeof(error)));
}

/** Fills the table: `cuGetProcAddress_v2` when the driver has it (12.0+), `dlsym` otherwise. */
static bool uform_gpu_resolve(void *library) {
    PFN_cuGetProcAddress_v12000 get_proc_address = (PFN_cuGetProcAddress_v12000)dlsym(library, "cuGetProcAddress_v2");
#define UFORM_CUDA_RESOLVE(name, version, symbol)                                                  \
    {                                                                                              \
        void *function = NULL;                                                                     \
        CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;               \
        if (!get_proc_address ||                                                                   \
            get_proc_address("cu" #name, &function, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != \
                CUDA_SUCCESS ||                                                                    \
            found != CU_GET_PROC_ADDRESS_SUCCESS)                                                  \
            function = dlsym(library, symbol);                                                     \
        if (!function) {                                                                           \
            snprintf(uform_gpu.reason, sizeof(uform_gpu.reason),                                   \
                     "the CUDA driver (libcuda.so.1) lacks %s (ABI %d), which the engine needs; "   \
                     "update the NVIDIA driver",                                                   \
                     symbol, version);                                                             \
            return false;                                                                          \
        }                                                                                          \
        /* POSIX guarantees `void *` and function pointers convert both ways. */                   \
        memcpy(&uform_gpu.table.name, &function, sizeof(function));                                \
    }
    UFORM_CUDA_FUNCTIONS(UFORM_CUDA_RESOLVE)
#undef UFORM_CUDA_RESOLVE
    return true;
}

/** Reads one device's facts; false with `reason` set when the driver refuses a query. */
static bool uform_gpu_read_device(int ordinal, uform_cuda_device_t *out) {
    uform_cuda_t const *cuda = &uform_gpu.table;
    char error[160];
    CUresult result = cuda->DeviceGet(&out->device, ordinal);
    char const *what = "cuDeviceGet";
    int multiprocessors = 0, multicast = 0;
    size_t memory = 0;
    if (result == CUDA_SUCCESS)
        what = "cuDeviceGetName", result = cuda->DeviceGetName(out->name, (int)sizeof(out->name), out->device);
    if (result == CUDA_SUCCESS)
        what = "cuDeviceTotalMem", result = cuda->DeviceTotalMem(&memory, out->device);
    if (result == CUDA_SUCCESS)
        what = "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
        result = cuda->DeviceGetAttribute(&out->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, out->device);
    if (result == CUDA_SUCCESS)
        what = "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
        result = cuda->DeviceGetAttribute(&out->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, out->device);
    if (result == CUDA_SUCCESS)
        what = "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
        result = cuda->DeviceGetAttribute(&multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, out->device);
    if (result == CUDA_SUCCESS)
        what = "cuDeviceGetPCIBusId",
        result = cuda->DeviceGetPCIBusId(out->pci_bus_id, (int)sizeof(out->pci_bus_id), out->device);
    if (result != CUDA_SUCCESS) {
        snprintf(uform_gpu.reason, sizeof(uform_gpu.reason), "%s failed for CUDA device %d: %s", what, ordinal,
                 uform_cuda_error_text(result, error, sizeof(error)));
        return false;
    }
    // Older drivers do not know the attribute: then multicast is simply not supported. The engine
    // only ever queries it; it never creates multicast objects.
    if (cuda->DeviceGetAttribute(&multicast, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, out->device) != CUDA_SUCCESS)
        multicast = 0;
    out->name[sizeof(out->name) - 1] = '\0';
    out->pci_bus_id[sizeof(out->pci_bus_id) - 1] = '\0';
    for (char *cursor = out->pci_bus_id; *cursor; ++cursor) *cursor = (char)tolower((unsigned char)*cursor);
    out->own_class = uform_gpu_class_of_capability(out->major, out->minor);
    out->multiprocessors = multiprocessors > 0 ? (uint32_t)multiprocessors : 0;
    out->memory_bytes = (uint64_t)memory;
    out->multicast_supported = multicast != 0;
    return true;
}

static void uform_gpu_load(void) {
    // Registers the fork handler now, so a child forked after this load sees a new generation.
    uform_gpu.fork_generation = uform_fork_generation();
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        char const *error = dlerror();
        snprintf(uform_gpu.reason, sizeof(uform_gpu.reason),
                 "no CUDA driver: dlopen(\"libcuda.so.1\") failed: %s", error ? error : "unknown error");
        return;
    }
    if (!uform_gpu_resolve(library)) {
        memset(&uform_gpu.table, 0, sizeof(uform_gpu.table));
        return;
    }
    char error[160];
    CUresult result = uform_gpu.table.Init(0);
    if (result != CUDA_SUCCESS) {
        snprintf(uform_gpu.reason, sizeof(uform_gpu.reason),
                 result == CUDA_ERROR_NO_DEVICE ? "no GPU: cuInit reports %s"
                                                : "the CUDA driver failed to initialise: cuInit returned %s",
                 uform_cuda_error_text(result, error, sizeof(error)));
        return;
    }
    uform_gpu.table_ready = true;
    if (uform_gpu.table.DriverGetVersion(&uform_gpu.table.driver_version) != CUDA_SUCCESS)
        uform_gpu.table.driver_version = 0;

    int count = 0;
    result = uform_gpu.table.DeviceGetCount(&count);
    if (result != CUDA_SUCCESS) {
        snprintf(uform_gpu.reason, sizeof(uform_gpu.reason), "cuDeviceGetCount failed: %s",
                 uform_cuda_error_text(result, error, sizeof(error)));
        return;
    }
    if (count <= 0) {
        char const *visible = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(uform_gpu.reason, sizeof(uform_gpu.reason), "no GPU: the CUDA driver %d.%d lists no device%s%s%s",
                 uform_gpu.table.driver_version / 1000, uform_gpu.table.driver_version % 1000 / 10,
                 visible ? " (CUDA_VISIBLE_DEVICES is \"" : "", visible ? visible : "", visible ? "\")" : "");
        return;
    }
    uform_cuda_device_t *devices = calloc((size_t)count, sizeof(uform_cuda_device_t));
    if (!devices) {
        snprintf(uform_gpu.reason, sizeof(uform_gpu.reason), "cannot allocate the list of %d GPUs", count);
        return;
    }
    for (int ordinal = 0; ordinal < count; ++ordinal)
        if (!uform_gpu_read_device(ordinal, &devices[ordinal])) {
            free(devices);
            return;
        }
    uform_gpu.devices = devices;
    uform_gpu.devices_count = (size_t)count;
}

static void uform_gpu_ensure(void) { pthread_once(&uform_gpu.once, uform_gpu_load); }

uform_status_t uform_cuda(uform_cuda_t const **driver) {
    uform_gpu_ensure();
    if (!uform_gpu.table_ready) return uform_fail(uform_status_unsupported_k, "%s", uform_gpu.reason);
    if (driver) *driver = &uform_gpu.table;
    return uform_status_ok_k;
}

uform_status_t uform_cuda_devices(uform_cuda_device_t const **devices, size_t *count) {
    uform_gpu_ensure();
    if (count) *count = uform_gpu.devices_count;
    if (!uform_gpu.devices_count) return uform_fail(uform_status_unsupported_k, "%s", uform_gpu.reason);
    if (devices) *devices = uform_gpu.devices;
    return uform_status_ok_k;
}

uint64_t uform_cuda_fork_generation(void) {
    uform_gpu_ensure();
    return uform_gpu.fork_generation;
}

/* ---- The public listing ---- */

uform_status_t uform_gpu_devices(uform_gpu_device_t *devices, size_t capacity, size_t *count) {
    uform_status_t const status = gpu_check_listing(devices, capacity, count);
    if (status != uform_status_ok_k) return status;
    uform_gpu_ensure();
    size_t const total = uform_gpu.devices_count;
    for (size_t index = 0; index < total && index < capacity; ++index) {
        uform_cuda_device_t const *device = &uform_gpu.devices[index];
        devices[index] = (uform_gpu_device_t) {
            .vendor = uform_gpu_vendor_nvidia_k,
            .vendor_ordinal = (uform_gpu_ordinal_t)device->device,
            .gpu_class = device->own_class,
            .compute_units = device->multiprocessors,
            .memory_bytes = device->memory_bytes,
        };
    }
    *count = total;
    return uform_status_ok_k;
}

uform_status_t uform_gpu_device_name(uform_gpu_ordinal_t ordinal, char *name, size_t capacity) {
    uform_status_t const status = gpu_check_name_buffer(name, capacity);
    if (status != uform_status_ok_k) return status;
    uform_gpu_ensure();
    if (ordinal < 0 || (size_t)ordinal >= uform_gpu.devices_count) {
        if (!uform_gpu.devices_count)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_gpu_device_name: ordinal %d is out of range, no GPU is listed: %s", (int)ordinal,
                              uform_gpu.reason);
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_gpu_device_name: ordinal %d is out of range, %zu GPUs are listed (0 to %zu)",
                          (int)ordinal, uform_gpu.devices_count, uform_gpu.devices_count - 1);
    }
    char const *source = uform_gpu.devices[ordinal].name;
    size_t length = strlen(source);
    if (length >= capacity) length = capacity - 1;
    memcpy(name, source, length);
    name[length] = '\0';
    return uform_status_ok_k;
}

uform_status_t uform_gpu_status(void) {
    uform_gpu_ensure();
    if (!uform_gpu.devices_count) return uform_fail(uform_status_unsupported_k, "%s", uform_gpu.reason);
    return uform_status_ok_k;
}

/* ---- One free device, through NVML ---- */

/** The few NVML declarations needed, as nvml.h spells them (the toolkit may not ship nvml.h). */
typedef int uform_nvml_return_t;
typedef struct uform_nvml_device_s *uform_nvml_device_t;
typedef struct uform_nvml_memory_t {
    unsigned long long total, free, used;
} uform_nvml_memory_t;
#define UFORM_NVML_SUCCESS 0
#define UFORM_NVML_ERROR_INSUFFICIENT_SIZE 7

size_t uform_cuda_pick_free_device(bool *used_nvml) {
    if (used_nvml) *used_nvml = false;
    uform_gpu_ensure();
    if (uform_gpu.devices_count <= 1) return 0;
    void *library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library) return 0;
    uform_nvml_return_t (*init)(void), (*shutdown)(void);
    uform_nvml_return_t (*by_pci)(char const *, uform_nvml_device_t *);
    uform_nvml_return_t (*memory_info)(uform_nvml_device_t, uform_nvml_memory_t *);
    uform_nvml_return_t (*processes)(uform_nvml_device_t, unsigned *, void *);
    void *symbols[5] = {dlsym(library, "nvmlInit_v2"), dlsym(library, "nvmlShutdown"),
                        dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"), dlsym(library, "nvmlDeviceGetMemoryInfo"),
                        dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3")};
    if (!symbols[4]) symbols[4] = dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!symbols[4]) symbols[4] = dlsym(library, "nvmlDeviceGetComputeRunningProcesses");
    size_t best = 0;
    bool ready = true;
    for (size_t index = 0; index < 5; ++index) ready = ready && symbols[index];
    if (ready) {
        memcpy(&init, &symbols[0], sizeof(void *));
        memcpy(&shutdown, &symbols[1], sizeof(void *));
        memcpy(&by_pci, &symbols[2], sizeof(void *));
        memcpy(&memory_info, &symbols[3], sizeof(void *));
        memcpy(&processes, &symbols[4], sizeof(void *));
        ready = init() == UFORM_NVML_SUCCESS;
    }
    if (ready) {
        bool best_idle = false, have_best = false;
        unsigned long long best_free = 0;
        for (size_t index = 0; index < uform_gpu.devices_count; ++index) {
            uform_nvml_device_t device;
            uform_nvml_memory_t memory = {0};
            if (by_pci(uform_gpu.devices[index].pci_bus_id, &device) != UFORM_NVML_SUCCESS) continue;
            if (memory_info(device, &memory) != UFORM_NVML_SUCCESS) memory.free = 0;
            // A zero-capacity query returns SUCCESS for no process and INSUFFICIENT_SIZE for some; a
            // device whose count cannot be read counts as idle, so memory decides.
            unsigned running = 0;
            bool idle = processes(device, &running, NULL) != UFORM_NVML_ERROR_INSUFFICIENT_SIZE || running == 0;
            if (!have_best || (idle && !best_idle) || (idle == best_idle && memory.free > best_free))
                best = index, best_idle = idle, best_free = memory.free, have_best = true;
        }
        // NVML decided only if it knew at least one of the devices (a fake or foreign driver's
        // devices are unknown to it): otherwise `best` is still the lowest ordinal.
        if (used_nvml) *used_nvml = have_best;
        shutdown();
    }
    dlclose(library);
    return best;
}
