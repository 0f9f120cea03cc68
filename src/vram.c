/**
 *  @file   vram.c
 *  @brief  VRAM executors: one stream per named GPU driven by the submitting thread, host decoder
 *          threads, per-device scratch, lazy completion of deferred calls, device faults, and the
 *          engine's kernel launcher.
 *
 *  Decisions, for the public functions of this file (uform.h documents the contract; this is how
 *  it is kept, and what the header leaves open):
 *
 *  Construction (`uform_executor_for_vram`)
 *  - Arguments are checked first, in this order, before the driver is touched, so a malformed
 *    request reads the same on every machine: a NULL `executor`, a NULL `devices` with a non-zero
 *    count, a negative or repeated ordinal, a `gpu_class` outside the enum (INVALID_ARGUMENT), a
 *    non-NULL `streams` (UNSUPPORTED: borrowed streams are not wired yet), a `deferred_limit` above
 *    2^20 (INVALID_ARGUMENT). Then the build (UNSUPPORTED without CUDA), the driver and devices
 *    (UNSUPPORTED with `uform_gpu_status`'s reason), a fork after the driver was initialised
 *    (UNSUPPORTED: CUDA does not survive fork), an ordinal beyond the listing (INVALID_ARGUMENT) and a
 *    pinned class above a device's own (UNSUPPORTED, naming both classes and the device).
 *  - No ordinals derive one free device (`uform_cuda_pick_free_device`): among the listed devices,
 *    those on which NVML counts no compute process are preferred, then the most free memory, then
 *    the lowest ordinal; without NVML the lowest ordinal. Deriving creates no context anywhere.
 *  - Each named device's primary context is retained (never created for an unnamed device, never
 *    left current on the constructing thread), and gets one CU_STREAM_NON_BLOCKING stream and
 *    `UFORM_VRAM_MARKS` timing-free events. The engine's kernels load lazily, per executor and
 *    device, on the first `uform_device_launch`.
 *  - Host decoders are a RAM executor (`uform_executor_for_ram`). With `ram` NULL or naming no node,
 *    they live on the NUMA nodes nearest the devices (sysfs, by the devices' PCI bus IDs), or on
 *    every allowed node when those are unknown or not allowed to this process; `ram->cpu_class` is
 *    honoured either way. Their count is 7/8 of the cores of those nodes (`uform_default_threads`),
 *    at least one: an H200 encodes ViT-S/16 images about 20 times faster than one core decodes and
 *    resizes JPEGs (the engine's own exact path), so fewer threads would starve it. Idle decoders
 *    park and cost nothing.
 *  - The description reports the decoders' threads, domains and CPU class; `gpu_class` is the
 *    pinned class, or else the highest class every device runs (their own class when they agree).
 *
 *  Calls (`backend->call`, after executor.c's checks, with the gate held)
 *  - Refused at once, running nothing: a poisoned executor (DEVICE_FAULT with the fault's message),
 *    `scratch_bytes` above `scratch_limit` (LIMIT_EXCEEDED), a deferred call when `deferred_limit`
 *    outcomes are tracked and none could be seen finished (DEFERRED_FULL), scratch that the device
 *    cannot allocate (OUT_OF_MEMORY; the executor stays usable).
 *  - The host part (`task`), when set, runs first on the decoders as a blocking host call, for
 *    deferred calls too: deferral defers device work. It may overlap device work of earlier deferred
 *    calls still on the streams, which is the point of decoders (decode batch N+1 while the GPUs
 *    run batch N); device parts always run in submission order, being on the same streams.
 *  - The device part (`device`), when set, is invoked once per device in device order on the
 *    submitting thread, with that device's context current and `uform_current_executor` set; the
 *    thread's previous context is restored before the call returns. A status other than OK from a
 *    callback stops the loop; the call then waits until the work enqueued on earlier devices ran
 *    and fails with that status (returned even for a deferred call, whose outcome executor.c then
 *    finishes with it).
 *  - Scratch per device grows on demand to the call's `scratch_bytes` (rounded up to 256 bytes,
 *    never past `scratch_limit`): the old buffer is freed once the device's stream ran every earlier
 *    call, then one buffer of the new size is allocated. It is reused by every later call, so memory
 *    stays flat, and it is the only device memory the executor allocates itself, so it is what
 *    `uform_executor_scratch_bytes` reports and `scratch_limit` bounds.
 *  - A blocking call returns once every stream ran everything enqueued so far (so every earlier
 *    deferred call finished too). It polls `cuStreamQuery`: spinning for the first 100 us (for the
 *    whole wait while the mood is SPINNING), then sleeping from 20 us up to 500 us between polls,
 *    and calling the watchdog (internal.h) about every millisecond.
 *  - A deferred call returns right after its device part was enqueued: no event is recorded per
 *    call. Each call takes a sequence number; a ring of `deferred_limit` entries keeps (outcome,
 *    sequence) pairs in order, and outcomes are finished lazily, by whichever thread polls, waits,
 *    drains, submits into a full ring or frees: every sequence up to `completed` is finished.
 *    `completed` advances when every stream is idle (everything published so far ran) or when a
 *    "mark" completes: a set of one event per device recorded after a given sequence, either every
 *    `deferred_limit / 4` deferred calls by the submitter (amortised to nothing) or on demand by a
 *    poller waiting for an older call while newer ones keep the streams busy.
 *
 *  Faults
 *  - A sticky driver error (`uform_cuda_error_is_fault`: a trapping kernel, an illegal address or
 *    instruction, a launch failure, ECC...) seen by any query, launch or wait poisons the executor:
 *    every tracked outcome finishes with DEVICE_FAULT and the driver's error name and sentence, the
 *    call that saw it returns DEVICE_FAULT, drains return DEVICE_FAULT, and every later call,
 *    `uform_executor_scratch_release` and launch returns DEVICE_FAULT at once. A poisoned executor
 *    is dead: free it (that never hangs) and create another. The driver cannot tell which queued
 *    call faulted, so outcomes not yet seen finished when the fault is found all report it.
 *  - A sticky error breaks the process's primary context on that device, which every executor on
 *    the device shares: they fail with DEVICE_FAULT at their next call or wait too. Other devices,
 *    RAM and pool executors keep working. Once every executor on that device is freed (and nothing
 *    else in the process holds the primary context, such as the CUDA runtime), the driver discards
 *    the context, and a new executor on the device starts on a fresh one.
 *  - A watchdog failing during a wait ends that wait with the watchdog's status and message, and
 *    finishes every tracked outcome with it; the executor is not poisoned by that.
 *
 *  Drains, polls, frees
 *  - `drain` waits (as a blocking call does) until the calls published before it finished, drains
 *    the decoders with the mood, stores the mood (SPINNING makes waits spin instead of sleeping),
 *    and reports DEVICE_FAULT for a poisoned executor.
 *  - `poll` brings the outcome up to date within the timeout; executor.c reads it afterwards.
 *  - `free` drains (in the parent process only), finishes any outcome still tracked, unloads the
 *    kernels, frees scratch, destroys events and streams, releases the primary contexts and frees
 *    the decoders. In a forked child it touches no CUDA object and releases host memory only.
 */
#define _GNU_SOURCE
#include "vram_private.h"

#include <stdio.h> // `snprintf`

/* ---- Scratch ---- */

/** Grows every device's scratch to at least `bytes`; frees an old buffer only after the device's
 *  stream ran every earlier call. */
static uform_status_t vram_reserve_scratch(vram_executor_t *self, size_t bytes, uform_cuda_context_t *context) {
    uform_cuda_t const *cuda = self->cuda;
    size_t capacity = bytes + 255 < bytes ? bytes : (bytes + 255) / 256 * 256;
    if (self->scratch_limit && capacity > self->scratch_limit) capacity = bytes;
    bool waited = false;
    for (size_t index = 0; index < self->devices_count; ++index) {
        vram_device_t *device = &self->devices[index];
        if (atomic_load_explicit(&device->scratch_capacity, memory_order_relaxed) >= bytes) continue;
        if (!waited && device->scratch) {
            uform_status_t status = vram_wait_in(self, self->submitted, -1, context, "uform_executor_call");
            if (status != uform_status_ok_k) return status;
            waited = true;
        }
        CUresult result = uform_cuda_context_use(cuda, context, device->context);
        if (result == CUDA_SUCCESS && device->scratch) {
            result = cuda->MemFree(device->scratch);
            device->scratch = 0;
            atomic_store_explicit(&device->scratch_capacity, 0, memory_order_relaxed);
        }
        if (result == CUDA_SUCCESS) result = cuda->MemAlloc(&device->scratch, capacity);
        if (result != CUDA_SUCCESS) {
            device->scratch = 0;
            return vram_fail(self, index, result, "cuMemAlloc", "uform_executor_call", uform_status_system_error_k,
                             "cannot allocate %zu bytes of scratch on device %zu (ordinal %d)", capacity, index,
                             (int)device->ordinal);
        }
        atomic_store_explicit(&device->scratch_capacity, capacity, memory_order_relaxed);
    }
    return uform_status_ok_k;
}

/* ---- The backend ---- */

/** The settle `uform_vram_call_settling` hands to `vram_call` on this thread, for `executor` only
 *  (a device callback may call another executor). */
static _Thread_local struct {
    uform_executor_t executor;
    uform_vram_settle_t settle;
    void *context;
    bool attached;
} vram_pending_settle;

uform_status_t uform_vram_call_settling(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome,
                                        uform_vram_settle_t settle, void *context, bool *attached) {
    *attached = false;
    if (!outcome || !settle) return uform_executor_call(executor, call, outcome);
    vram_pending_settle.executor = executor, vram_pending_settle.settle = settle, vram_pending_settle.context = context;
    vram_pending_settle.attached = false;
    uform_status_t const status = uform_executor_call(executor, call, outcome);
    *attached = status == uform_status_ok_k && vram_pending_settle.attached;
    vram_pending_settle.executor = NULL, vram_pending_settle.settle = NULL, vram_pending_settle.context = NULL;
    vram_pending_settle.attached = false;
    return status;
}

uform_executor_t uform_vram_decoders(uform_executor_t executor) {
    if (!executor || executor->description.kind != uform_executor_kind_vram_k) return NULL;
    return ((vram_executor_t *)executor)->decoders;
}

uform_status_t vram_call(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome) {
    vram_executor_t *self = (vram_executor_t *)executor;
    uform_cuda_t const *cuda = self->cuda;
    if (UFORM_UNLIKELY(atomic_load_explicit(&self->faulted, memory_order_acquire)))
        return vram_fault_status(self, "uform_executor_call");
    if (UFORM_UNLIKELY(self->scratch_limit && call->scratch_bytes > self->scratch_limit))
        return uform_fail(uform_status_limit_exceeded_k,
                          "uform_executor_call: the call asks for %zu bytes of scratch per device, above the "
                          "executor's scratch_limit of %zu",
                          call->scratch_bytes, self->scratch_limit);

    uform_cuda_context_t context;
    uform_cuda_context_enter(cuda, &context);
    uform_status_t status = uform_status_ok_k;
    if (outcome && uform_ring_count(&self->ring) >= self->ring.capacity) {
        pthread_mutex_lock(&self->lock);
        unsigned const head = atomic_load_explicit(&self->ring.head, memory_order_relaxed);
        status = vram_progress_locked(self, ((vram_entry_t *)uform_ring_at(&self->ring, head))->sequence, &context);
        bool const full = uform_ring_count(&self->ring) >= self->ring.capacity;
        pthread_mutex_unlock(&self->lock);
        if (status == uform_status_device_fault_k) status = vram_fault_status(self, "uform_executor_call");
        else if (full) status = uform_ring_full(&self->ring);
        else status = uform_status_ok_k;
    }
    if (status == uform_status_ok_k && call->device && call->scratch_bytes)
        status = vram_reserve_scratch(self, call->scratch_bytes, &context);
    if (status == uform_status_ok_k && call->task) {
        uform_call_t host = *call;
        host.residency = uform_residency_any_k;
        host.device = NULL;
        host.scratch_bytes = 0;
        status = uform_executor_call(self->decoders, &host, NULL);
    }
    if (status != uform_status_ok_k) {
        uform_cuda_context_leave(cuda, &context);
        return status;
    }

    uint64_t const sequence = self->submitted + 1;
    size_t failed_index = 0;
    size_t mark = UFORM_VRAM_MARKS;
    bool mark_recorded = false;
    if (call->device) {
        if (outcome) mark = vram_reserve_mark(self, sequence);
        mark_recorded = mark != UFORM_VRAM_MARKS;
        uform_clear_error(); // so a callback failing without a message is told apart
        uform_executor_t const outer_executor = uform_current_executor;
        vram_device_t *const outer_device = vram_active_device;
        for (size_t index = 0; index < self->devices_count; ++index) {
            vram_device_t *device = &self->devices[index];
            CUresult result = uform_cuda_context_use(cuda, &context, device->context);
            if (UFORM_UNLIKELY(result != CUDA_SUCCESS)) {
                status = vram_fail(self, index, result, "cuCtxSetCurrent", "uform_executor_call",
                                   uform_status_system_error_k, "cannot make device %zu's context current", index);
                failed_index = index;
                break;
            }
            uform_device_slot_t const slot = {
                .device_index = index,
                .ordinal = device->ordinal,
                .gpu_class = device->gpu_class,
                .stream = device->stream,
                .cu_context = device->context,
                .scratch = device->scratch,
                .scratch_bytes = call->scratch_bytes,
            };
            uform_current_executor = executor;
            vram_active_device = device;
            status = call->device(call->context, &slot);
            uform_current_executor = outer_executor;
            vram_active_device = outer_device;
            if (UFORM_UNLIKELY(status != uform_status_ok_k)) {
                failed_index = index;
                break;
            }
            if (mark_recorded && cuda->EventRecord(device->marks[mark], device->stream) != CUDA_SUCCESS)
                mark_recorded = false;
        }
    }
    self->submitted = sequence;

    if (UFORM_UNLIKELY(status != uform_status_ok_k)) {
        if (!uform_error_message()[0])
            uform_fail(status, "uform_executor_call: the device callback returned %s on device %zu (ordinal %d)",
                       uform_status_name(status), failed_index, (int)self->devices[failed_index].ordinal);
        uform_failure_t failure;
        uform_failure_save(&failure, status);
        pthread_mutex_lock(&self->lock);
        vram_publish_locked(self, sequence, mark, false);
        pthread_mutex_unlock(&self->lock);
        // Nothing of a failed call may still run once it returned.
        uform_status_t const waited = vram_wait_in(self, sequence, -1, &context, "uform_executor_call");
        uform_cuda_context_leave(cuda, &context);
        if (waited != uform_status_ok_k) return waited;
        return uform_failure_raise(&failure);
    }

    if (!outcome) {
        pthread_mutex_lock(&self->lock);
        vram_publish_locked(self, sequence, mark, false);
        pthread_mutex_unlock(&self->lock);
        status = vram_wait_in(self, sequence, -1, &context, "uform_executor_call");
        uform_cuda_context_leave(cuda, &context);
        return status;
    }

    outcome->reserved[1] = sequence;
    vram_entry_t entry = {.outcome = outcome, .sequence = sequence};
    if (vram_pending_settle.settle && vram_pending_settle.executor == executor) {
        entry.settle = vram_pending_settle.settle, entry.settle_context = vram_pending_settle.context;
        vram_pending_settle.settle = NULL, vram_pending_settle.attached = true;
    }
    pthread_mutex_lock(&self->lock);
    vram_publish_locked(self, sequence, mark, mark_recorded);
    unsigned const tail = atomic_load_explicit(&self->ring.tail, memory_order_relaxed);
    *(vram_entry_t *)uform_ring_at(&self->ring, tail) = entry;
    atomic_store_explicit(&self->ring.tail, tail + 1, memory_order_release);
    pthread_mutex_unlock(&self->lock);
    uform_cuda_context_leave(cuda, &context);
    return uform_status_ok_k;
}

uform_status_t vram_apply_mood(uform_executor_t executor, uform_mood_t previous, uform_mood_t mood) {
    (void)previous;
    return uform_executor_drain(((vram_executor_t *)executor)->decoders, mood);
}

uform_status_t vram_thread_placement(uform_executor_t executor, size_t thread, int32_t *core, int32_t *node) {
    vram_executor_t *self = (vram_executor_t *)executor;
    return uform_executor_thread_placement(self->decoders, thread, core, node);
}

void vram_free(uform_executor_t executor) {
    vram_executor_t *self = (vram_executor_t *)executor;
    bool const forked = self->base.fork_generation != uform_fork_generation();
    // executor.c settled the calls unless forked; whatever is still tracked (a failed wait, a child's copy) is finished, so no waiter hangs.
    pthread_mutex_lock(&self->lock);
    if (atomic_load_explicit(&self->faulted, memory_order_relaxed))
        vram_finish_all_locked(self, uform_status_device_fault_k, self->fault);
    else
        vram_finish_all_locked(self, forked ? uform_status_forked_k : uform_status_device_fault_k,
                               forked ? "uform_executor_free: freed in a forked child"
                                      : "uform_executor_free: the executor was freed before the call finished");
    pthread_mutex_unlock(&self->lock);
    vram_release(self);
}

uform_backend_t const vram_backend = {
    .call = vram_call,
    .settle = vram_settle,
    .apply_mood = vram_apply_mood,
    .poll = vram_poll,
    .thread_placement = vram_thread_placement,
    .free = vram_free,
};

/** The capacity of the device's scratch buffer (0 before any call asked for scratch, and after a
 *  release), read without the gate, so it may run beside a call. INVALID_ARGUMENT for a NULL `bytes`
 *  or an index out of range; FORKED for any executor inherited across a fork; UNSUPPORTED for the
 *  NULL, RAM and pool executors. */
uform_status_t uform_executor_scratch_bytes(uform_executor_t executor, size_t device_index, size_t *bytes) {
    if (!bytes) return uform_fail(uform_status_invalid_argument_k, "uform_executor_scratch_bytes: bytes is NULL");
    uform_status_t const forked = executor ? uform_check_forked(executor, "uform_executor_scratch_bytes") : uform_status_ok_k;
    if (forked != uform_status_ok_k) return forked;
    vram_executor_t *self = vram_cast(executor);
    if (!self)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_scratch_bytes: the %s executor holds no device memory; only VRAM executors do",
                          executor ? "RAM or pool" : "NULL");
    if (device_index >= self->devices_count)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_scratch_bytes: device_index %zu is out of range, the executor drives %zu",
                          device_index, self->devices_count);
    *bytes = atomic_load_explicit(&self->devices[device_index].scratch_capacity, memory_order_relaxed);
    return uform_status_ok_k;
}

/** Takes the gate like a call (CONTENDED if held, or from inside one of the executor's callbacks),
 *  waits until every call ran, then frees every device's scratch. FORKED in a child; DEVICE_FAULT on
 *  a poisoned executor (whose scratch `uform_executor_free` releases); UNSUPPORTED for other kinds. */
uform_status_t uform_executor_scratch_release(uform_executor_t executor) {
    uform_status_t const forked = executor ? uform_check_forked(executor, "uform_executor_scratch_release") : uform_status_ok_k;
    if (forked != uform_status_ok_k) return forked;
    vram_executor_t *self = vram_cast(executor);
    if (!self)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_scratch_release: the %s executor holds no device memory; only VRAM executors do",
                          executor ? "RAM or pool" : "NULL");
    uform_status_t status = uform_gate_enter(executor, "uform_executor_scratch_release");
    if (status != uform_status_ok_k) return status;
    if (atomic_load_explicit(&self->faulted, memory_order_acquire))
        status = vram_fault_status(self, "uform_executor_scratch_release");
    uform_cuda_context_t context;
    uform_cuda_context_enter(self->cuda, &context);
    if (status == uform_status_ok_k)
        status = vram_wait_in(self, self->submitted, -1, &context, "uform_executor_scratch_release");
    for (size_t index = 0; index < self->devices_count && status == uform_status_ok_k; ++index) {
        vram_device_t *device = &self->devices[index];
        if (!device->scratch) continue;
        CUresult result = uform_cuda_context_use(self->cuda, &context, device->context);
        if (result == CUDA_SUCCESS) result = self->cuda->MemFree(device->scratch);
        if (result != CUDA_SUCCESS) {
            status = vram_fail(self, index, result, "cuMemFree", "uform_executor_scratch_release",
                               uform_status_system_error_k, "cuMemFree on device %zu (ordinal %d)", index,
                               (int)device->ordinal);
            break;
        }
        device->scratch = 0;
        atomic_store_explicit(&device->scratch_capacity, 0, memory_order_relaxed);
    }
    uform_cuda_context_leave(self->cuda, &context);
    uform_gate_leave(executor);
    return status;
}
