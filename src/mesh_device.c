/**
 *  @file   mesh_device.c
 *  @brief  The mesh's device side, in CUDA builds (mesh_device_stub.c without CUDA): one event per
 *          device recorded after each collective (the watchdog's "is a collective pending"), and the
 *          host buffers of `uform_mesh_all_reduce_host` staged through each device's scratch.
 */
#include "mesh_private.h"

/** Creates device `d`'s event, its context current (the NCCL start's device call). */
void mesh_event_create(uform_mesh_t mesh, size_t d) {
    uform_cuda_t const *cuda = NULL;
    if (uform_cuda(&cuda) == uform_status_ok_k) {
        CUevent event = NULL;
        if (cuda->EventCreate(&event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) mesh->events[d] = event;
    }
}

bool mesh_events_pending(uform_mesh_t mesh) {
    uform_cuda_t const *cuda = NULL;
    bool pending = false;
    if (uform_cuda(&cuda) == uform_status_ok_k) {
        uform_cuda_context_t context;
        uform_cuda_context_enter(cuda, &context);
        for (size_t d = 0; d < mesh->devices_count && !pending; ++d)
            pending = uform_cuda_context_use(cuda, &context, (CUcontext)mesh->members[d].cu_context) == CUDA_SUCCESS &&
                      cuda->EventQuery((CUevent)mesh->events[d]) == CUDA_ERROR_NOT_READY;
        uform_cuda_context_leave(cuda, &context);
    }
    return pending;
}

void mesh_events_destroy(uform_mesh_t mesh) {
    uform_cuda_t const *cuda = NULL;
    if (uform_cuda(&cuda) == uform_status_ok_k) {
        uform_cuda_context_t context;
        uform_cuda_context_enter(cuda, &context);
        for (size_t d = 0; d < mesh->devices_count; ++d) {
            if (!mesh->events[d]) continue;
            (void)uform_cuda_context_use(cuda, &context, (CUcontext)mesh->members[d].cu_context);
            cuda->EventDestroy((CUevent)mesh->events[d]);
        }
        uform_cuda_context_leave(cuda, &context);
    }
}

/** Records one event per device after the collective just enqueued (the mutex held). */
void mesh_events_record(uform_mesh_t mesh) {
    uform_cuda_t const *cuda = NULL;
    if (uform_cuda(&cuda) != uform_status_ok_k) return;
    bool recorded = true;
    uform_cuda_context_t context;
    uform_cuda_context_enter(cuda, &context);
    for (size_t d = 0; d < mesh->devices_count; ++d)
        recorded = recorded && mesh->events[d] &&
                   uform_cuda_context_use(cuda, &context, (CUcontext)mesh->members[d].cu_context) == CUDA_SUCCESS &&
                   cuda->EventRecord((CUevent)mesh->events[d], (CUstream)mesh->members[d].stream) == CUDA_SUCCESS;
    uform_cuda_context_leave(cuda, &context);
    mesh->events_recorded = recorded;
}

uform_status_t mesh_stage_in(reduce_context_t const *reduce, uform_device_slot_t const *slot) {
    size_t const d = slot->device_index;
    uform_cuda_t const *cuda = NULL;
    uform_status_t status = uform_cuda(&cuda);
    CUresult result = status == uform_status_ok_k
                          ? cuda->MemcpyHtoDAsync((CUdeviceptr)slot->scratch, reduce->host_buffers[d], reduce->bytes,
                                                  (CUstream)slot->stream)
                          : CUDA_SUCCESS;
    if (status != uform_status_ok_k) return status;
    if (result != CUDA_SUCCESS)
        return uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k
                                                                 : uform_status_system_error_k,
                               result, "mesh all-reduce: copying %zu bytes in from host buffer %zu", reduce->bytes, d);
    return uform_status_ok_k;
}

/** Copies each host buffer back from its device's scratch, on that device's stream, after the
 *  collective was enqueued there. Pageable host memory makes these copies synchronous. */
uform_status_t mesh_stage_out(reduce_context_t *reduce) {
    uform_cuda_t const *cuda = NULL;
    uform_status_t status = uform_cuda(&cuda);
    reduce_staging_t const *staging = reduce->mesh->staging;
    if (status != uform_status_ok_k) return status;
    uform_cuda_context_t context;
    uform_cuda_context_enter(cuda, &context);
    for (size_t d = 0; status == uform_status_ok_k && d < reduce->mesh->devices_count; ++d) {
        CUresult result = uform_cuda_context_use(cuda, &context, (CUcontext)staging[d].cu_context);
        if (result == CUDA_SUCCESS)
            result = cuda->MemcpyDtoHAsync(reduce->host_buffers[d], (CUdeviceptr)staging[d].buffer, reduce->bytes,
                                           (CUstream)staging[d].stream);
        if (result != CUDA_SUCCESS)
            status = uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k
                                                                       : uform_status_system_error_k,
                                     result, "mesh all-reduce: copying %zu bytes back to host buffer %zu", reduce->bytes,
                                     d);
    }
    uform_cuda_context_leave(cuda, &context);
    return status;
}
