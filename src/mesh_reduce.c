/**
 *  @file   mesh_reduce.c
 *  @brief  A mesh's all-reduce as an executor call, and the watchdog that turns a lost peer into
 *          PEER_LOST (mesh.c describes the design); seams for tests and benchmarks.
 */
#include "mesh_private.h"

#include <stdio.h>    // `snprintf`

/* ---- The watchdog ---- */

uform_status_t mesh_watchdog(void *context) {
    uform_mesh_t mesh = context;
    if (pthread_mutex_trylock(&mesh->lock) != 0) return uform_status_ok_k; // a call is enqueueing: later
    uform_status_t status = uform_status_ok_k;
    if (!atomic_load(&mesh->aborted) && mesh->comms) {
        for (size_t d = 0; d < mesh->devices_count && status == uform_status_ok_k; ++d) {
            uform_nccl_result_t error = uform_nccl_success_k;
            uform_nccl_result_t result = mesh->nccl->CommGetAsyncError(mesh->comms[d], &error);
            if (result != uform_nccl_success_k) error = result;
            if (error != uform_nccl_success_k && error != uform_nccl_in_progress_k)
                status = uform_nccl_fail(uform_status_peer_lost_k, error, mesh->comms[d],
                                         "mesh all-reduce failed on rank %zu; communicators aborted",
                                         mesh->description.first_gpu_index + d);
        }
        bool const pending = status == uform_status_ok_k && mesh->events_recorded && mesh_events_pending(mesh);
        double now = uform_now_seconds();
        if (!pending) mesh->pending_since = 0;
        else if (!mesh->pending_since) mesh->pending_since = now;
        else if (now - mesh->pending_since > mesh->timeout)
            status = uform_fail(uform_status_peer_lost_k,
                                "mesh all-reduce did not finish within %g s: a peer is gone or stalled; "
                                "communicators aborted",
                                mesh->timeout);
        if (status != uform_status_ok_k) mesh_abort(mesh, uform_error_message());
    }
    pthread_mutex_unlock(&mesh->lock);
    return status;
}

/* ---- All-reduce ---- */



/** Enqueues every device's collective in one NCCL group, the mutex held (so the watchdog cannot
 *  abort the communicators between the group's start and end), and releases it before returning. */
static uform_status_t mesh_enqueue(uform_mesh_t mesh, reduce_context_t const *reduce) {
    pthread_mutex_lock(&mesh->lock);
    // A communicator that already reports an error (a lost peer) takes no more work.
    for (size_t d = 0; d < mesh->devices_count && !atomic_load(&mesh->aborted); ++d) {
        uform_nccl_result_t error = uform_nccl_success_k;
        uform_nccl_result_t result = mesh->nccl->CommGetAsyncError(mesh->comms[d], &error);
        if (result != uform_nccl_success_k) error = result;
        if (error != uform_nccl_success_k && error != uform_nccl_in_progress_k) {
            uform_nccl_fail(uform_status_peer_lost_k, error, mesh->comms[d],
                            "mesh all-reduce: rank %zu failed; communicators aborted",
                            mesh->description.first_gpu_index + d);
            mesh_abort(mesh, uform_error_message());
        }
    }
    if (atomic_load(&mesh->aborted)) {
        pthread_mutex_unlock(&mesh->lock);
        return uform_fail(uform_status_peer_lost_k, "mesh all-reduce: the communicators were aborted: %s",
                          mesh->abort_message);
    }
    uform_status_t status = uform_status_ok_k;
    static char const stage[] = "mesh all-reduce (ncclGroupEnd)";
    mesh_guard_begin(mesh, stage); // blocking communicators: bounded from the guard thread
    mesh->nccl->GroupStart();
    for (size_t d = 0; d < mesh->devices_count && status == uform_status_ok_k; ++d) {
        void *buffer = (void *)(uintptr_t)mesh->staging[d].buffer;
        uform_nccl_result_t result = mesh->nccl->AllReduce(buffer, buffer, reduce->count, reduce->dtype, uform_nccl_sum_k,
                                                           mesh->comms[d], mesh->staging[d].stream);
        if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k)
            status = uform_nccl_fail(mesh_nccl_status(result), result, mesh->comms[d], "ncclAllReduce of %zu elements on rank %zu",
                                     reduce->count, mesh->description.first_gpu_index + d);
    }
    // NCCL drops a group that recorded an error; otherwise an error or a stall here leaves the
    // communicators in an unknown state, so they are aborted.
    uform_nccl_result_t result = mesh->nccl->GroupEnd();
    char fired[400];
    if (mesh_guard_end(mesh, fired, sizeof fired)) {
        mesh_abort(mesh, fired);
        pthread_mutex_unlock(&mesh->lock);
        return uform_fail(uform_status_peer_lost_k, "%s", fired);
    }
    if (status == uform_status_ok_k) {
        if (result == uform_nccl_in_progress_k) // non-blocking communicators (NCCL before 2.18)
            status = mesh_settle(mesh, mesh->comms, mesh->timeout, stage, NULL);
        else if (result != uform_nccl_success_k)
            status = uform_nccl_fail(mesh_nccl_status(result), result, NULL, "mesh all-reduce (ncclGroupEnd)");
        if (status != uform_status_ok_k) {
            char message[512];
            snprintf(message, sizeof message, "%s; communicators aborted", uform_error_message());
            mesh_abort(mesh, message);
            status = uform_fail(status == uform_status_timeout_k ? uform_status_peer_lost_k : status, "%s", message);
        }
    }
    if (status == uform_status_ok_k) mesh_events_record(mesh);
    pthread_mutex_unlock(&mesh->lock);
    return status;
}

/**
 *  Device call. Every device but the last only notes where its collective goes (and stages a host
 *  buffer in, on its own stream); the last enqueues all of them in one NCCL group. Nothing is held
 *  from one callback to the next: a call the executor stops part-way (a device's context that cannot
 *  be made current, a failed copy) has enqueued no collective, holds no lock, leaves no NCCL group
 *  open, and the mesh stays usable.
 */
static uform_status_t mesh_reduce_device(void *context, uform_device_slot_t const *slot) {
    reduce_context_t *reduce = context;
    uform_mesh_t mesh = reduce->mesh;
    size_t d = slot->device_index;
    if (!mesh->comms || reduce->count == 0) return uform_status_ok_k; // one GPU, or nothing to do
    if (atomic_load(&mesh->aborted))
        return uform_fail(uform_status_peer_lost_k, "mesh all-reduce: the communicators were aborted: %s",
                          mesh->abort_message);
    mesh->staging[d] = (reduce_staging_t) {reduce->buffers ? reduce->buffers[d] : slot->scratch, slot->stream,
                                           slot->cu_context};
    if (reduce->host_buffers) { // this device's context is current: the copy lands before the collective
        uform_status_t status = mesh_stage_in(reduce, slot);
        if (status != uform_status_ok_k) return status;
    }
    if (d + 1 < mesh->devices_count) return uform_status_ok_k;
    uform_status_t status = mesh_enqueue(mesh, reduce);
    if (status == uform_status_ok_k && reduce->host_buffers) status = mesh_stage_out(reduce);
    return status;
}

/** Both all-reduce entries: device buffers, or host buffers staged through each device's scratch. */
static uform_status_t mesh_all_reduce(uform_mesh_t mesh, uint64_t const *buffers, void *const *host_buffers,
                                      size_t count, uform_dtype_t dtype, uform_outcome_t *outcome, char const *verb) {
    if (!mesh) return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: mesh is NULL", verb));
    static uform_nccl_dtype_t const nccl_types[] = {
        [uform_dtype_f32_k] = uform_nccl_float32_k, [uform_dtype_bf16_k] = uform_nccl_bfloat16_k,
        [uform_dtype_f16_k] = uform_nccl_float16_k, [uform_dtype_f64_k] = uform_nccl_float64_k,
        [uform_dtype_i32_k] = uform_nccl_int32_k,
    };
    static size_t const element_bytes[] = {
        [uform_dtype_f32_k] = 4, [uform_dtype_bf16_k] = 2, [uform_dtype_f16_k] = 2,
        [uform_dtype_f64_k] = 8, [uform_dtype_i32_k] = 4,
    };
    if ((unsigned)dtype >= sizeof nccl_types / sizeof nccl_types[0])
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: dtype %d is not a uform_dtype_t (0 to %zu)",
                                                        verb, (int)dtype, sizeof nccl_types / sizeof nccl_types[0] - 1));
    bool const host = host_buffers != NULL;
    if (count && !buffers && !host_buffers)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: buffers is NULL for %zu elements", verb,
                                                        count));
    for (size_t d = 0; count && d < mesh->devices_count; ++d)
        if (host ? !host_buffers[d] : !buffers[d])
            return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                            "%s: buffers[%zu] is %s; pass one %s per device of the executor (%zu)",
                                                            verb, d, host ? "NULL" : "0", host ? "host buffer" : "CUdeviceptr",
                                                            mesh->devices_count));
    if (count > SIZE_MAX / element_bytes[dtype])
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: %zu elements overflow a size_t of bytes",
                                                        verb, count));
    if (mesh->fork_generation != uform_fork_generation())
        return uform_outcome_refuse(outcome, uform_fail(uform_status_forked_k,
                                                        "%s: the mesh was created before a fork(); only uform_mesh_free may be called "
                                                        "on it",
                                                        verb));
    if (atomic_load(&mesh->aborted))
        return uform_outcome_refuse(outcome, uform_fail(uform_status_peer_lost_k,
                                                        "%s: the mesh's communicators were aborted after: %s; free it and bootstrap "
                                                        "again",
                                                        verb, mesh->abort_message));
    // Device callbacks run inside `uform_executor_call`, deferred calls too: the context lives here.
    reduce_context_t reduce = {.mesh = mesh, .buffers = host ? NULL : buffers, .host_buffers = host ? host_buffers : NULL,
                               .count = count, .bytes = count * element_bytes[dtype], .dtype = nccl_types[dtype]};
    uform_call_t call = {.residency = uform_residency_vram_k, .device = mesh_reduce_device, .context = &reduce};
    if (host && count && mesh->comms) call.scratch_bytes = reduce.bytes;
    return uform_executor_call(mesh->executor, &call, outcome);
}

uform_status_t uform_mesh_all_reduce(uform_mesh_t mesh, uint64_t const *buffers, size_t count, uform_dtype_t dtype,
                                     uform_outcome_t *outcome) {
    return mesh_all_reduce(mesh, buffers, NULL, count, dtype, outcome, "uform_mesh_all_reduce");
}

uform_status_t uform_mesh_all_reduce_host(uform_mesh_t mesh, void *const *buffers, size_t count, uform_dtype_t dtype,
                                          uform_outcome_t *outcome) {
    if (count && !buffers)
        return uform_outcome_refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                                        "uform_mesh_all_reduce_host: buffers is NULL for %zu elements", count));
    return mesh_all_reduce(mesh, NULL, buffers, count, dtype, outcome, "uform_mesh_all_reduce_host");
}

/* ---- Seams for tests and benchmarks ---- */

void uform_mesh_timings(uform_mesh_t mesh, uform_mesh_timings_t *timings) {
    if (timings) *timings = mesh ? mesh->timings : (uform_mesh_timings_t){0};
}

size_t uform_mesh_comms(uform_mesh_t mesh, uform_nccl_comm_t const **comms) {
    if (comms) *comms = mesh ? mesh->comms : NULL;
    return mesh && mesh->comms ? mesh->devices_count : 0;
}
