/**
 *  @file   vram_create.c
 *  @brief  The VRAM executor's construction and release (vram.c says what construction promises).
 */
#define _GNU_SOURCE
#include "vram_private.h"

#include <stdlib.h> // `aligned_alloc`
#include <string.h> // `memset`

/** Releases everything `self` holds; CUDA objects only in the process that created them. */
void vram_release(vram_executor_t *self) {
    uform_cuda_t const *cuda = self->cuda;
    bool const forked = self->base.fork_generation != uform_fork_generation();
    if (self->devices && !forked) {
        uform_cuda_context_t context;
        uform_cuda_context_enter(cuda, &context);
        for (size_t index = 0; index < self->devices_count; ++index) {
            vram_device_t *device = &self->devices[index];
            if (!device->context) continue;
            // Errors are ignored: on a poisoned context these fail at once, and nothing is left to do.
            if (uform_cuda_context_use(cuda, &context, device->context) == CUDA_SUCCESS) {
                if (device->module) cuda->ModuleUnload(device->module);
                if (device->scratch) cuda->MemFree(device->scratch);
                for (size_t mark = 0; mark < UFORM_VRAM_MARKS; ++mark)
                    if (device->marks[mark]) cuda->EventDestroy(device->marks[mark]);
                if (device->stream) cuda->StreamDestroy(device->stream);
            }
        }
        // The caller's context again before releasing, so no thread is left on a context we dropped.
        uform_cuda_context_leave(cuda, &context);
        for (size_t index = 0; index < self->devices_count; ++index)
            if (self->devices[index].context) cuda->DevicePrimaryCtxRelease(self->devices[index].device);
    }
    if (self->decoders) uform_executor_free(self->decoders);
    pthread_mutex_destroy(&self->lock);
    pthread_mutex_destroy(&self->watchdog_lock);
    uform_ring_free(&self->ring);
    free(self->members);
    free(self->devices);
    free(self);
}

/* ---- Construction ---- */

/** The decoders: a RAM executor near the devices unless `ram` names nodes; see the file comment. */
static uform_status_t vram_spawn_decoders(vram_executor_t *self, uform_ram_options_t const *ram,
                                          uform_cuda_device_t const *listing) {
    uform_ram_options_t options = ram ? *ram : (uform_ram_options_t) {0};
    int32_t *nodes = NULL;
    size_t nodes_count = 0;
    bool const derive = !options.memory_domains || !options.memory_domains_count;
    if (derive) {
        options.memory_domains = NULL, options.memory_domains_count = 0;
        nodes = calloc(self->devices_count, sizeof(int32_t));
        if (!nodes)
            return uform_fail(uform_status_out_of_memory_k, "uform_executor_for_vram: cannot allocate %zu node IDs",
                              self->devices_count);
        for (size_t index = 0; index < self->devices_count; ++index) {
            int32_t node = uform_numa_node_of_pci(listing[self->devices[index].ordinal].pci_bus_id);
            bool seen = node < 0;
            for (size_t other = 0; other < nodes_count && !seen; ++other) seen = nodes[other] == node;
            if (seen) continue;
            size_t position = nodes_count++; // ascending, by insertion
            while (position && nodes[position - 1] > node) nodes[position] = nodes[position - 1], --position;
            nodes[position] = node;
        }
        if (nodes_count) options.memory_domains = nodes, options.memory_domains_count = nodes_count;
    }
    uform_placement_t placement;
    uform_status_t status = uform_placement_resolve(&options, &placement);
    if (status != uform_status_ok_k && nodes_count) {
        // The nearest nodes are not this process's to use (cpuset, memory policy): every allowed node.
        options.memory_domains = NULL, options.memory_domains_count = 0;
        status = uform_placement_resolve(&options, &placement);
    }
    if (status == uform_status_ok_k) {
        size_t threads = uform_default_threads(placement.cores_count);
        uform_placement_free(&placement);
        status = uform_executor_for_ram(&options, threads, 1, &self->decoders);
    }
    free(nodes);
    return status;
}

/** Retains the device's primary context and opens its stream and mark events. */
static uform_status_t vram_open_device(vram_executor_t *self, vram_device_t *device, uform_cuda_context_t *context) {
    uform_cuda_t const *cuda = self->cuda;
    char const *what = "cuDevicePrimaryCtxRetain";
    CUcontext retained = NULL;
    CUresult result = cuda->DevicePrimaryCtxRetain(&retained, device->device);
    if (result == CUDA_SUCCESS) {
        device->context = retained;
        what = "cuCtxSetCurrent", result = uform_cuda_context_use(cuda, context, device->context);
    }
    if (result == CUDA_SUCCESS)
        what = "cuStreamCreate", result = cuda->StreamCreate(&device->stream, CU_STREAM_NON_BLOCKING);
    for (size_t mark = 0; mark < UFORM_VRAM_MARKS && result == CUDA_SUCCESS; ++mark)
        what = "cuEventCreate", result = cuda->EventCreate(&device->marks[mark], CU_EVENT_DISABLE_TIMING);
    if (result != CUDA_SUCCESS)
        return uform_cuda_fail(uform_cuda_status(result, uform_status_system_error_k), result,
                               "uform_executor_for_vram: %s failed on device %zu (ordinal %d)", what,
                               device->index, (int)device->ordinal);
    return uform_status_ok_k;
}

uform_status_t uform_executor_for_vram(uform_vram_options_t const *vram, uform_ram_options_t const *ram,
                                       void *const *streams, size_t scratch_limit, size_t deferred_limit,
                                       uform_executor_t *executor) {
    uform_status_t status = vram_check_arguments(vram, ram, streams, deferred_limit, executor);
    if (status != uform_status_ok_k) return status;
    uform_cuda_t const *cuda;
    uform_cuda_device_t const *listing;
    size_t listed = 0;
    if (uform_cuda(&cuda) != uform_status_ok_k || uform_cuda_devices(&listing, &listed) != uform_status_ok_k)
        return uform_fail(uform_status_unsupported_k, "uform_executor_for_vram: %s", uform_error_message());
    if (uform_cuda_fork_generation() != uform_fork_generation())
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_for_vram: the CUDA driver was initialised before this process was forked, "
                          "and CUDA does not survive fork(); create VRAM executors in the parent, or exec a new "
                          "process");

    uform_gpu_ordinal_t derived = 0;
    uform_gpu_ordinal_t const *ordinals = vram && vram->devices_count ? vram->devices : NULL;
    size_t count = ordinals ? vram->devices_count : 1;
    if (!ordinals) {
        derived = (int32_t)uform_cuda_pick_free_device(NULL);
        ordinals = &derived;
    }
    uform_gpu_class_t const pinned = vram ? vram->gpu_class : uform_gpu_class_unknown_k;
    for (size_t index = 0; index < count; ++index) {
        if ((size_t)ordinals[index] >= listed)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_executor_for_vram: ordinal %d (vram->devices[%zu]) is out of range, %zu GPU%s "
                              "listed (0 to %zu)",
                              (int)ordinals[index], index, listed, listed == 1 ? " is" : "s are", listed - 1);
        uform_cuda_device_t const *device = &listing[ordinals[index]];
        if (pinned != uform_gpu_class_unknown_k && !uform_gpu_class_runs(device->own_class, pinned))
            return uform_fail(uform_status_unsupported_k,
                              "uform_executor_for_vram: gpu_class %s is not one device %d can run: its own class is "
                              "%s (%s, compute capability %d.%d); pin that class, one it descends from, or UNKNOWN",
                              uform_gpu_class_name(pinned), (int)ordinals[index],
                              uform_gpu_class_name(device->own_class), device->name, device->major, device->minor);
    }

    vram_executor_t *self = aligned_alloc(128, (sizeof(vram_executor_t) + 127) / 128 * 128);
    if (!self) return uform_fail(uform_status_out_of_memory_k, "uform_executor_for_vram: cannot allocate an executor");
    memset(self, 0, sizeof(*self));
    uform_executor_init(&self->base, &vram_backend, uform_executor_kind_vram_k);
    pthread_mutex_init(&self->lock, NULL);
    pthread_mutex_init(&self->watchdog_lock, NULL);
    atomic_init(&self->enqueued, 0);
    atomic_init(&self->completed, 0);
    atomic_init(&self->faulted, false);
    self->cuda = cuda;
    self->devices_count = count;
    self->scratch_limit = scratch_limit;
    status = uform_ring_init(&self->ring, deferred_limit, sizeof(vram_entry_t), "uform_executor_for_vram");
    size_t const ring_capacity = self->ring.capacity;
    self->mark_interval = ring_capacity / 4 ? ring_capacity / 4 : 1;
    self->devices = calloc(count, sizeof(vram_device_t));
    self->members = calloc(count, sizeof(uform_vram_member_t));
    if (status != uform_status_ok_k || !self->devices || !self->members) {
        vram_release(self);
        return uform_fail(uform_status_out_of_memory_k,
                          "uform_executor_for_vram: cannot allocate the executor's %zu devices and %zu ring entries",
                          count, ring_capacity);
    }

    uform_cuda_context_t context;
    uform_cuda_context_enter(cuda, &context);
    uform_gpu_class_t common = uform_gpu_class_unknown_k;
    for (size_t index = 0; index < count && status == uform_status_ok_k; ++index) {
        uform_cuda_device_t const *listed_device = &listing[ordinals[index]];
        vram_device_t *device = &self->devices[index];
        device->owner = self;
        device->index = index;
        device->ordinal = ordinals[index];
        device->device = listed_device->device;
        device->gpu_class = pinned != uform_gpu_class_unknown_k ? pinned : listed_device->own_class;
        atomic_init(&device->scratch_capacity, 0);
        common = index ? uform_gpu_class_common(common, device->gpu_class) : device->gpu_class;
        status = vram_open_device(self, device, &context);
        self->members[index] = (uform_vram_member_t) {
            .ordinal = device->ordinal,
            .cu_device = (int)device->device,
            .cu_context = device->context,
            .stream = device->stream,
            .own_class = listed_device->own_class,
            .gpu_class = device->gpu_class,
            .multicast_supported = listed_device->multicast_supported,
        };
    }
    uform_cuda_context_leave(cuda, &context);
    if (status == uform_status_ok_k) status = vram_spawn_decoders(self, ram, listing);
    uform_executor_description_t decoders = {0};
    if (status == uform_status_ok_k) status = uform_executor_describe(self->decoders, &decoders);
    if (status != uform_status_ok_k) {
        uform_failure_t failure;
        uform_failure_save(&failure, status);
        vram_release(self);
        return uform_failure_raise(&failure);
    }
    uform_executor_description_t *description = &self->base.description;
    description->threads_count = decoders.threads_count;
    description->domains_count = decoders.domains_count;
    description->devices_count = count;
    description->cpu_class = decoders.cpu_class;
    description->gpu_class = common;
    description->mood = uform_mood_parked_k;
    description->deferred_limit = ring_capacity;
    description->scratch_limit = scratch_limit;
    *executor = &self->base;
    return uform_status_ok_k;
}

/** The executor's devices, in its device order; the array lives as long as the executor. */
size_t uform_vram_members(uform_executor_t executor, uform_vram_member_t const **members) {
    vram_executor_t *self = vram_cast(executor);
    if (members) *members = self ? self->members : NULL;
    return self ? self->devices_count : 0;
}
