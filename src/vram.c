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
 *    honoured either way. Their count is min(4 per device, 7/8 of the cores of those nodes), at
 *    least one: enough to decode ahead of a GPU without taking the host from the user's threads.
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
#include "cuda_driver.h"

#include <float.h>   // `FLT_MAX`
#include <math.h>    // `isnan`
#include <pthread.h> // `pthread_mutex_t`
#include <stdarg.h>  // `va_list`
#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `aligned_alloc`
#include <string.h>  // `memset`

/* ---- Argument checks, in every build ---- */

static uform_status_t vram_check_arguments(uform_vram_options_t const *vram, void *const *streams,
                                           size_t deferred_limit, uform_executor_t *executor) {
    if (!executor) return uform_fail(uform_status_invalid_argument_k, "uform_executor_for_vram: executor is NULL");
    if (vram) {
        if (vram->devices_count && !vram->devices)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_executor_for_vram: vram->devices is NULL but vram->devices_count is %zu",
                              vram->devices_count);
        for (size_t index = 0; vram->devices && index < vram->devices_count; ++index) {
            if (vram->devices[index] < 0)
                return uform_fail(uform_status_invalid_argument_k,
                                  "uform_executor_for_vram: vram->devices[%zu] is %d; ordinals are positions in "
                                  "uform_gpu_devices, from 0",
                                  index, (int)vram->devices[index]);
            for (size_t earlier = 0; earlier < index; ++earlier)
                if (vram->devices[earlier] == vram->devices[index])
                    return uform_fail(uform_status_invalid_argument_k,
                                      "uform_executor_for_vram: ordinal %d is repeated, at vram->devices[%zu] and "
                                      "[%zu]; name each device once",
                                      (int)vram->devices[index], earlier, index);
        }
        if ((unsigned)vram->gpu_class > uform_gpu_class_apple_metal10_k)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_executor_for_vram: vram->gpu_class %d is not a uform_gpu_class_t (0 to %d)",
                              (int)vram->gpu_class, (int)uform_gpu_class_apple_metal10_k);
    }
    if (streams)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_for_vram: borrowed streams are not wired yet; pass streams as NULL and "
                          "the executor opens its own");
    return uform_ring_check_limit(deferred_limit, "uform_executor_for_vram");
}

static uform_status_t vram_check_launch(uform_device_slot_t const *slot, uform_kernel_t kernel) {
    if (!slot) return uform_fail(uform_status_invalid_argument_k, "uform_device_launch: slot is NULL");
    if ((unsigned)kernel > uform_kernel_add_f32_k)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_device_launch: kernel %d is not a uform_kernel_t (0 to %d)", (int)kernel,
                          (int)uform_kernel_add_f32_k);
    return uform_status_ok_k;
}

#if UFORM_WITH_CUDA

/** Mark slots per executor: sets of one event per device recorded after a known sequence. */
#define UFORM_VRAM_MARKS 8
/** Seconds a wait spins before it starts sleeping, and the longest sleep between polls. */
#define UFORM_VRAM_SPIN_SECONDS 100e-6
#define UFORM_VRAM_NAP_MIN_NS 20000L
#define UFORM_VRAM_NAP_MAX_NS 500000L
#define UFORM_VRAM_WATCHDOG_SECONDS 1e-3

enum { vram_kernels_count_k = uform_kernel_add_f32_k + 1 };

static char const *const vram_kernel_names[vram_kernels_count_k] = {
    [uform_kernel_empty_k] = "uform_kernel_empty",   [uform_kernel_fill_f32_k] = "uform_kernel_fill_f32",
    [uform_kernel_sleep_k] = "uform_kernel_sleep",   [uform_kernel_trap_k] = "uform_kernel_trap",
    [uform_kernel_add_f32_k] = "uform_kernel_add_f32",
};

typedef struct vram_executor_s vram_executor_t;

typedef struct vram_device_t {
    vram_executor_t *owner;
    size_t index;             /**< Position among the executor's devices. */
    int32_t ordinal;          /**< UForm ordinal. */
    CUdevice device;
    CUcontext context;        /**< Retained primary context; NULL until retained. */
    CUstream stream;
    CUdeviceptr scratch;      /**< Touched only by the gate holder (calls, scratch release) and free. */
    atomic_size_t scratch_capacity; /**< Read from any thread by `uform_executor_scratch_bytes`. */
    CUmodule module;          /**< Loaded by the first launch, under the gate. */
    CUfunction functions[vram_kernels_count_k];
    CUevent marks[UFORM_VRAM_MARKS];
    uform_gpu_class_t gpu_class;
} vram_device_t;

typedef enum vram_mark_state_t {
    vram_mark_free_k = 0,
    vram_mark_recording_k = 1, /**< Reserved by the submitter, events being recorded. */
    vram_mark_pending_k = 2,   /**< Recorded after `mark_sequences[k]`, not yet seen complete. */
} vram_mark_state_t;

typedef struct vram_entry_t {
    uform_outcome_t *outcome;
    uint64_t sequence;
} vram_entry_t;

struct vram_executor_s {
    struct uform_executor_s base;
    uform_cuda_t const *cuda;
    uform_executor_t decoders;
    size_t devices_count;
    vram_device_t *devices;
    uform_vram_member_t *members;
    size_t scratch_limit;
    uint64_t mark_interval;

    // Owned by the gate holder.
    uint64_t submitted; /**< Sequence of the latest call taken. */
    uint64_t last_mark; /**< Sequence when a mark was last tried. */

    // Shared between the gate holder and pollers: written under `lock`, some read without it.
    pthread_mutex_t lock;
    _Atomic uint64_t enqueued;  /**< Every call up to this one has enqueued its work. */
    _Atomic uint64_t completed; /**< Every call up to this one has finished on the devices. */
    uform_ring_t ring; /**< `vram_entry_t`s: `tail` grows only under the gate (and `lock`), `head` under
                          `lock`, so a submitter may count it unlocked. */
    vram_mark_state_t mark_states[UFORM_VRAM_MARKS];
    uint64_t mark_sequences[UFORM_VRAM_MARKS];
    atomic_bool faulted;
    char fault[400]; /**< Written once, under `lock`, before `faulted` is set. */

    pthread_mutex_t watchdog_lock; /**< Held while the watchdog runs or is replaced. */
    uform_vram_watchdog_t watchdog;
    void *watchdog_context;
};

static uform_backend_t const vram_backend;

/** The device whose callback this thread runs, so `uform_device_launch` finds its kernels. */
static _Thread_local vram_device_t *vram_active_device = NULL;

static vram_executor_t *vram_cast(uform_executor_t executor) {
    return executor && executor->backend == &vram_backend ? (vram_executor_t *)executor : NULL;
}

/* ---- Current contexts ---- */

/** The calling thread's current context on entry, and the one made current since. */
typedef struct vram_context_t {
    CUcontext saved, current;
} vram_context_t;

static void vram_context_enter(uform_cuda_t const *cuda, vram_context_t *state) {
    if (cuda->CtxGetCurrent(&state->saved) != CUDA_SUCCESS) state->saved = NULL;
    state->current = state->saved;
}

static CUresult vram_context_use(uform_cuda_t const *cuda, vram_context_t *state, CUcontext context) {
    if (state->current == context) return CUDA_SUCCESS;
    CUresult result = cuda->CtxSetCurrent(context);
    if (result == CUDA_SUCCESS) state->current = context;
    return result;
}

static void vram_context_leave(uform_cuda_t const *cuda, vram_context_t *state) {
    if (state->current != state->saved) cuda->CtxSetCurrent(state->saved);
    state->current = state->saved;
}

/* ---- Outcomes, marks and faults: every function named `_locked` runs under `lock` ---- */

/** Finishes, in order, the tracked outcomes whose sequence is at most `completed` (all of them
 *  with `status` and `message` when `all`). */
static void vram_finish_locked(vram_executor_t *self, bool all, uform_status_t status, char const *message) {
    uint64_t const completed = atomic_load_explicit(&self->completed, memory_order_relaxed);
    unsigned head = atomic_load_explicit(&self->ring.head, memory_order_relaxed);
    unsigned const tail = atomic_load_explicit(&self->ring.tail, memory_order_relaxed);
    for (; head != tail; ++head) {
        vram_entry_t const *entry = uform_ring_at(&self->ring, head);
        if (!all && entry->sequence > completed) break;
        uform_outcome_finish(entry->outcome, all ? status : uform_status_ok_k, all ? message : NULL);
    }
    atomic_store_explicit(&self->ring.head, head, memory_order_release);
}

static void vram_finish_ready_locked(vram_executor_t *self) { vram_finish_locked(self, false, uform_status_ok_k, NULL); }

static void vram_finish_all_locked(vram_executor_t *self, uform_status_t status, char const *message) {
    vram_finish_locked(self, true, status, message);
}

static void vram_poison_locked(vram_executor_t *self, size_t device_index, CUresult result, char const *where) {
    if (atomic_load_explicit(&self->faulted, memory_order_relaxed)) return;
    vram_device_t const *device = &self->devices[device_index];
    char error[200];
    snprintf(self->fault, sizeof(self->fault),
             "device %zu (ordinal %d) faulted: %s, seen by %s; the executor is poisoned, free it and create "
             "another (every executor on that device is affected)",
             device_index, (int)device->ordinal, uform_cuda_error_text(result, error, sizeof(error)), where);
    atomic_store_explicit(&self->faulted, true, memory_order_release);
    vram_finish_all_locked(self, uform_status_device_fault_k, self->fault);
    for (size_t mark = 0; mark < UFORM_VRAM_MARKS; ++mark)
        if (self->mark_states[mark] == vram_mark_pending_k) self->mark_states[mark] = vram_mark_free_k;
}

static void vram_poison(vram_executor_t *self, size_t device_index, CUresult result, char const *where) {
    pthread_mutex_lock(&self->lock);
    vram_poison_locked(self, device_index, result, where);
    pthread_mutex_unlock(&self->lock);
}

static uform_status_t vram_fault_status(vram_executor_t *self, char const *verb) {
    return uform_fail(uform_status_device_fault_k, "%s: %s", verb, self->fault);
}

/**
 *  The one way a driver call's failure on a device becomes a status: a sticky error poisons the
 *  executor (DEVICE_FAULT with the fault's message under `verb`); anything else is
 *  `uform_cuda_status(result, otherwise)` with "<verb>: <formatted>: <the driver's error>".
 */
static uform_status_t vram_fail(vram_executor_t *self, size_t device_index, CUresult result, char const *where,
                                char const *verb, uform_status_t otherwise, char const *format, ...)
    UFORM_PRINTF(7, 8);
static uform_status_t vram_fail(vram_executor_t *self, size_t device_index, CUresult result, char const *where,
                                char const *verb, uform_status_t otherwise, char const *format, ...) {
    if (uform_cuda_error_is_fault(result)) {
        vram_poison(self, device_index, result, where);
        return vram_fault_status(self, verb);
    }
    char context[400];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(context, sizeof(context), format, arguments);
    va_end(arguments);
    return uform_cuda_fail(uform_cuda_status(result, otherwise), result, "%s: %s", verb, context);
}

/**
 *  Advances `completed` as far as the devices allow without blocking, finishes the outcomes it
 *  covers, and says whether `target` is complete: OK, PENDING, or DEVICE_FAULT.
 */
static uform_status_t vram_progress_locked(vram_executor_t *self, uint64_t target, vram_context_t *context) {
    uform_cuda_t const *cuda = self->cuda;
    if (atomic_load_explicit(&self->faulted, memory_order_relaxed)) return uform_status_device_fault_k;
    uint64_t completed = atomic_load_explicit(&self->completed, memory_order_relaxed);

    // Marks, oldest first: each one complete on every device completes its sequence.
    while (completed < target) {
        size_t oldest = UFORM_VRAM_MARKS;
        for (size_t mark = 0; mark < UFORM_VRAM_MARKS; ++mark)
            if (self->mark_states[mark] == vram_mark_pending_k &&
                (oldest == UFORM_VRAM_MARKS || self->mark_sequences[mark] < self->mark_sequences[oldest]))
                oldest = mark;
        if (oldest == UFORM_VRAM_MARKS) break;
        bool done = true;
        for (size_t index = 0; index < self->devices_count && done; ++index) {
            vram_device_t *device = &self->devices[index];
            CUresult result = vram_context_use(cuda, context, device->context);
            if (result == CUDA_SUCCESS) result = cuda->EventQuery(device->marks[oldest]);
            if (result == CUDA_ERROR_NOT_READY) done = false;
            else if (result != CUDA_SUCCESS) {
                vram_poison_locked(self, index, result, "cuEventQuery");
                return uform_status_device_fault_k;
            }
        }
        if (!done) break;
        if (self->mark_sequences[oldest] > completed) completed = self->mark_sequences[oldest];
        self->mark_states[oldest] = vram_mark_free_k;
    }

    if (completed < target) {
        // Read before the queries: every call published by now enqueued its work before them.
        uint64_t const published = atomic_load_explicit(&self->enqueued, memory_order_acquire);
        bool idle = true;
        for (size_t index = 0; index < self->devices_count && idle; ++index) {
            vram_device_t *device = &self->devices[index];
            CUresult result = vram_context_use(cuda, context, device->context);
            if (result == CUDA_SUCCESS) result = cuda->StreamQuery(device->stream);
            if (result == CUDA_ERROR_NOT_READY) idle = false;
            else if (result != CUDA_SUCCESS) {
                vram_poison_locked(self, index, result, "cuStreamQuery");
                return uform_status_device_fault_k;
            }
        }
        if (idle && published > completed) completed = published;
        if (!idle && target < published) {
            // The streams hold newer calls than the target: idle streams would overshoot, so mark
            // the current tail unless a pending mark already covers the target.
            size_t free_mark = UFORM_VRAM_MARKS;
            bool covered = false;
            for (size_t mark = 0; mark < UFORM_VRAM_MARKS; ++mark) {
                if (self->mark_states[mark] == vram_mark_pending_k && self->mark_sequences[mark] >= target)
                    covered = true;
                if (self->mark_states[mark] == vram_mark_free_k && free_mark == UFORM_VRAM_MARKS) free_mark = mark;
            }
            if (!covered && free_mark != UFORM_VRAM_MARKS) {
                bool recorded = true;
                for (size_t index = 0; index < self->devices_count && recorded; ++index) {
                    vram_device_t *device = &self->devices[index];
                    CUresult result = vram_context_use(cuda, context, device->context);
                    if (result == CUDA_SUCCESS) result = cuda->EventRecord(device->marks[free_mark], device->stream);
                    if (result != CUDA_SUCCESS) {
                        recorded = false;
                        if (uform_cuda_error_is_fault(result)) {
                            vram_poison_locked(self, index, result, "cuEventRecord");
                            return uform_status_device_fault_k;
                        }
                    }
                }
                if (recorded) {
                    self->mark_states[free_mark] = vram_mark_pending_k;
                    self->mark_sequences[free_mark] = published;
                }
            }
        }
    }
    atomic_store_explicit(&self->completed, completed, memory_order_release);
    vram_finish_ready_locked(self);
    return completed >= target ? uform_status_ok_k : uform_status_pending_k;
}

/** Runs the watchdog unless another waiter is running it; saves its failure. */
static uform_status_t vram_run_watchdog(vram_executor_t *self, uform_failure_t *failure) {
    failure->status = uform_status_ok_k;
    if (pthread_mutex_trylock(&self->watchdog_lock) != 0) return uform_status_ok_k;
    if (self->watchdog) uform_failure_save(failure, self->watchdog(self->watchdog_context));
    pthread_mutex_unlock(&self->watchdog_lock);
    return failure->status;
}

/**
 *  Waits until `target` completes, the executor is poisoned (DEVICE_FAULT), the watchdog fails
 *  (its status), or `timeout_seconds` (negative: forever) pass (PENDING). Sets the thread's message
 *  for every status but OK and PENDING.
 */
static uform_status_t vram_wait_in(vram_executor_t *self, uint64_t target, double timeout_seconds,
                                   vram_context_t *context, char const *verb) {
    if (atomic_load_explicit(&self->completed, memory_order_acquire) >= target &&
        !atomic_load_explicit(&self->faulted, memory_order_acquire))
        return uform_status_ok_k;
    double const start = uform_now_seconds();
    double next_watchdog = start + UFORM_VRAM_WATCHDOG_SECONDS;
    long nap = UFORM_VRAM_NAP_MIN_NS;
    for (;;) {
        pthread_mutex_lock(&self->lock);
        uform_status_t status = vram_progress_locked(self, target, context);
        pthread_mutex_unlock(&self->lock);
        if (status == uform_status_device_fault_k) return vram_fault_status(self, verb);
        if (status == uform_status_ok_k) return status;

        double const now = uform_now_seconds();
        if (timeout_seconds >= 0 && now - start >= timeout_seconds) return uform_status_pending_k;
        if (now >= next_watchdog) {
            uform_failure_t failure;
            if (vram_run_watchdog(self, &failure) != uform_status_ok_k) {
                pthread_mutex_lock(&self->lock);
                vram_finish_all_locked(self, failure.status, failure.message);
                pthread_mutex_unlock(&self->lock);
                return uform_failure_raise(&failure);
            }
            next_watchdog = now + UFORM_VRAM_WATCHDOG_SECONDS;
        }
        bool const spinning =
            atomic_load_explicit(&self->base.mood, memory_order_relaxed) == (unsigned)uform_mood_spinning_k;
        if (spinning || now - start < UFORM_VRAM_SPIN_SECONDS) {
            uform_spin_pause();
            continue;
        }
        double const left = timeout_seconds >= 0 ? timeout_seconds - (now - start) : 1.0;
        long sleep_ns = nap;
        if ((double)sleep_ns > left * 1e9) sleep_ns = (long)(left * 1e9) + 1;
        struct timespec pause = {.tv_sec = 0, .tv_nsec = sleep_ns};
        nanosleep(&pause, NULL);
        if (nap < UFORM_VRAM_NAP_MAX_NS) nap = nap * 2 > UFORM_VRAM_NAP_MAX_NS ? UFORM_VRAM_NAP_MAX_NS : nap * 2;
    }
}

static uform_status_t vram_wait(vram_executor_t *self, uint64_t target, double timeout_seconds, char const *verb) {
    if (atomic_load_explicit(&self->completed, memory_order_acquire) >= target &&
        !atomic_load_explicit(&self->faulted, memory_order_acquire))
        return uform_status_ok_k;
    vram_context_t context;
    vram_context_enter(self->cuda, &context);
    uform_status_t status = vram_wait_in(self, target, timeout_seconds, &context, verb);
    vram_context_leave(self->cuda, &context);
    return status;
}

/* ---- Scratch ---- */

/** Grows every device's scratch to at least `bytes`; frees an old buffer only after the device's
 *  stream ran every earlier call. */
static uform_status_t vram_reserve_scratch(vram_executor_t *self, size_t bytes, vram_context_t *context) {
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
        CUresult result = vram_context_use(cuda, context, device->context);
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

/** Reserves a mark slot for the submitter when one is due; UFORM_VRAM_MARKS when none. */
static size_t vram_reserve_mark(vram_executor_t *self, uint64_t sequence) {
    if (sequence - self->last_mark < self->mark_interval) return UFORM_VRAM_MARKS;
    self->last_mark = sequence;
    size_t reserved = UFORM_VRAM_MARKS;
    pthread_mutex_lock(&self->lock);
    for (size_t mark = 0; mark < UFORM_VRAM_MARKS && reserved == UFORM_VRAM_MARKS; ++mark)
        if (self->mark_states[mark] == vram_mark_free_k) {
            self->mark_states[mark] = vram_mark_recording_k;
            reserved = mark;
        }
    pthread_mutex_unlock(&self->lock);
    return reserved;
}

/** Makes the calls up to `sequence` visible to pollers and waiters. */
static void vram_publish_locked(vram_executor_t *self, uint64_t sequence, size_t mark, bool mark_recorded) {
    atomic_store_explicit(&self->enqueued, sequence, memory_order_release);
    if (mark != UFORM_VRAM_MARKS) {
        self->mark_states[mark] = mark_recorded ? vram_mark_pending_k : vram_mark_free_k;
        self->mark_sequences[mark] = sequence;
    }
}

static uform_status_t vram_call(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome) {
    vram_executor_t *self = (vram_executor_t *)executor;
    uform_cuda_t const *cuda = self->cuda;
    if (UFORM_UNLIKELY(atomic_load_explicit(&self->faulted, memory_order_acquire)))
        return vram_fault_status(self, "uform_executor_call");
    if (UFORM_UNLIKELY(self->scratch_limit && call->scratch_bytes > self->scratch_limit))
        return uform_fail(uform_status_limit_exceeded_k,
                          "uform_executor_call: the call asks for %zu bytes of scratch per device, above the "
                          "executor's scratch_limit of %zu",
                          call->scratch_bytes, self->scratch_limit);

    vram_context_t context;
    vram_context_enter(cuda, &context);
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
        vram_context_leave(cuda, &context);
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
            CUresult result = vram_context_use(cuda, &context, device->context);
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
        vram_context_leave(cuda, &context);
        if (waited != uform_status_ok_k) return waited;
        return uform_failure_raise(&failure);
    }

    if (!outcome) {
        pthread_mutex_lock(&self->lock);
        vram_publish_locked(self, sequence, mark, false);
        pthread_mutex_unlock(&self->lock);
        status = vram_wait_in(self, sequence, -1, &context, "uform_executor_call");
        vram_context_leave(cuda, &context);
        return status;
    }

    outcome->reserved[1] = sequence;
    pthread_mutex_lock(&self->lock);
    vram_publish_locked(self, sequence, mark, mark_recorded);
    unsigned const tail = atomic_load_explicit(&self->ring.tail, memory_order_relaxed);
    *(vram_entry_t *)uform_ring_at(&self->ring, tail) = (vram_entry_t) {.outcome = outcome, .sequence = sequence};
    atomic_store_explicit(&self->ring.tail, tail + 1, memory_order_release);
    pthread_mutex_unlock(&self->lock);
    vram_context_leave(cuda, &context);
    return uform_status_ok_k;
}

static uform_status_t vram_settle(uform_executor_t executor, char const *verb) {
    vram_executor_t *self = (vram_executor_t *)executor;
    return vram_wait(self, atomic_load_explicit(&self->enqueued, memory_order_acquire), -1, verb);
}

/** The mood reaches the decoders too; SPINNING makes the device waits spin instead of sleeping. */
static uform_status_t vram_apply_mood(uform_executor_t executor, uform_mood_t previous, uform_mood_t mood) {
    (void)previous;
    return uform_executor_drain(((vram_executor_t *)executor)->decoders, mood);
}

static uform_status_t vram_poll(uform_executor_t executor, uform_outcome_t *outcome, double timeout_seconds) {
    vram_executor_t *self = (vram_executor_t *)executor;
    uform_status_t const forked = uform_check_forked(executor, "uform_outcome_wait");
    if (forked != uform_status_ok_k) return forked;
    if (__atomic_load_n(&outcome->finished, __ATOMIC_ACQUIRE)) return uform_status_ok_k;
    // Faults and watchdog failures finish the outcome; only a timeout leaves it pending, which
    // executor.c reports after reading `finished`.
    uform_status_t status = vram_wait(self, outcome->reserved[1], timeout_seconds, "uform_outcome_wait");
    (void)status;
    return uform_status_ok_k;
}

static uform_status_t vram_thread_placement(uform_executor_t executor, size_t thread, int32_t *core, int32_t *node) {
    vram_executor_t *self = (vram_executor_t *)executor;
    return uform_executor_thread_placement(self->decoders, thread, core, node);
}

/** Releases everything `self` holds; CUDA objects only in the process that created them. */
static void vram_release(vram_executor_t *self) {
    uform_cuda_t const *cuda = self->cuda;
    bool const forked = self->base.fork_generation != uform_fork_generation();
    if (self->devices && !forked) {
        vram_context_t context;
        vram_context_enter(cuda, &context);
        for (size_t index = 0; index < self->devices_count; ++index) {
            vram_device_t *device = &self->devices[index];
            if (!device->context) continue;
            // Errors are ignored: on a poisoned context these fail at once, and nothing is left to do.
            if (vram_context_use(cuda, &context, device->context) == CUDA_SUCCESS) {
                if (device->module) cuda->ModuleUnload(device->module);
                if (device->scratch) cuda->MemFree(device->scratch);
                for (size_t mark = 0; mark < UFORM_VRAM_MARKS; ++mark)
                    if (device->marks[mark]) cuda->EventDestroy(device->marks[mark]);
                if (device->stream) cuda->StreamDestroy(device->stream);
            }
        }
        // The caller's context again before releasing, so no thread is left on a context we dropped.
        vram_context_leave(cuda, &context);
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

static void vram_free(uform_executor_t executor) {
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

static uform_backend_t const vram_backend = {
    .call = vram_call,
    .settle = vram_settle,
    .apply_mood = vram_apply_mood,
    .poll = vram_poll,
    .thread_placement = vram_thread_placement,
    .free = vram_free,
};

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
        if (threads > 4 * self->devices_count) threads = 4 * self->devices_count;
        if (threads == 0) threads = 1;
        uform_placement_free(&placement);
        status = uform_executor_for_ram(&options, threads, 1, &self->decoders);
    }
    free(nodes);
    return status;
}

/** Retains the device's primary context and opens its stream and mark events. */
static uform_status_t vram_open_device(vram_executor_t *self, vram_device_t *device, vram_context_t *context) {
    uform_cuda_t const *cuda = self->cuda;
    char const *what = "cuDevicePrimaryCtxRetain";
    CUcontext retained = NULL;
    CUresult result = cuda->DevicePrimaryCtxRetain(&retained, device->device);
    if (result == CUDA_SUCCESS) {
        device->context = retained;
        what = "cuCtxSetCurrent", result = vram_context_use(cuda, context, device->context);
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
    uform_status_t status = vram_check_arguments(vram, streams, deferred_limit, executor);
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

    int32_t derived = 0;
    int32_t const *ordinals = vram && vram->devices_count ? vram->devices : NULL;
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

    vram_context_t context;
    vram_context_enter(cuda, &context);
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
    vram_context_leave(cuda, &context);
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

/* ---- Device calls ---- */

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

/** The capacity of the device's scratch buffer (0 before any call asked for scratch, and after a
 *  release), read without the gate, so it may run beside a call. INVALID_ARGUMENT for a NULL `bytes`
 *  or an index out of range; UNSUPPORTED for the NULL, RAM and pool executors. */
uform_status_t uform_executor_scratch_bytes(uform_executor_t executor, size_t device_index, size_t *bytes) {
    if (!bytes) return uform_fail(uform_status_invalid_argument_k, "uform_executor_scratch_bytes: bytes is NULL");
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
    vram_executor_t *self = vram_cast(executor);
    if (!self)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_scratch_release: the %s executor holds no device memory; only VRAM executors do",
                          executor ? "RAM or pool" : "NULL");
    uform_status_t status = uform_gate_enter(executor, "uform_executor_scratch_release");
    if (status != uform_status_ok_k) return status;
    if (atomic_load_explicit(&self->faulted, memory_order_acquire))
        status = vram_fault_status(self, "uform_executor_scratch_release");
    vram_context_t context;
    vram_context_enter(self->cuda, &context);
    if (status == uform_status_ok_k)
        status = vram_wait_in(self, self->submitted, -1, &context, "uform_executor_scratch_release");
    for (size_t index = 0; index < self->devices_count && status == uform_status_ok_k; ++index) {
        vram_device_t *device = &self->devices[index];
        if (!device->scratch) continue;
        CUresult result = vram_context_use(self->cuda, &context, device->context);
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
    vram_context_leave(self->cuda, &context);
    uform_gate_leave(executor);
    return status;
}

/** The executor's devices, in its device order; the array lives as long as the executor. */
size_t uform_vram_members(uform_executor_t executor, uform_vram_member_t const **members) {
    vram_executor_t *self = vram_cast(executor);
    if (members) *members = self ? self->members : NULL;
    return self ? self->devices_count : 0;
}

/** Installs the watchdog every wait of this executor calls about once a millisecond (one waiter at a
 *  time runs it; others skip that tick); a no-op for other executors. */
void uform_vram_set_watchdog(uform_executor_t executor, uform_vram_watchdog_t watchdog, void *context) {
    vram_executor_t *self = vram_cast(executor);
    if (!self) return;
    // Waits for a running watchdog to return, so the old context is unused once this returns.
    pthread_mutex_lock(&self->watchdog_lock);
    self->watchdog = watchdog;
    self->watchdog_context = context;
    pthread_mutex_unlock(&self->watchdog_lock);
}

#else // UFORM_WITH_CUDA

#define UFORM_NO_GPU_REASON                                                                        \
    "built without GPU support: libuform was configured with UFORM_WITH_CUDA=OFF or without the "  \
    "CUDA toolkit"

uform_status_t uform_executor_for_vram(uform_vram_options_t const *vram, uform_ram_options_t const *ram,
                                       void *const *streams, size_t scratch_limit, size_t deferred_limit,
                                       uform_executor_t *executor) {
    (void)ram, (void)scratch_limit;
    uform_status_t status = vram_check_arguments(vram, streams, deferred_limit, executor);
    if (status != uform_status_ok_k) return status;
    return uform_fail(uform_status_unsupported_k, "uform_executor_for_vram: %s", UFORM_NO_GPU_REASON);
}

uform_status_t uform_device_launch(uform_device_slot_t const *slot, uform_kernel_t kernel, uint64_t buffer,
                                   uint64_t count, double value) {
    (void)buffer, (void)count, (void)value;
    uform_status_t status = vram_check_launch(slot, kernel);
    if (status != uform_status_ok_k) return status;
    return uform_fail(uform_status_unsupported_k, "uform_device_launch: %s", UFORM_NO_GPU_REASON);
}

uform_status_t uform_executor_scratch_bytes(uform_executor_t executor, size_t device_index, size_t *bytes) {
    (void)device_index;
    if (!bytes) return uform_fail(uform_status_invalid_argument_k, "uform_executor_scratch_bytes: bytes is NULL");
    return uform_fail(uform_status_unsupported_k,
                      "uform_executor_scratch_bytes: the %s executor holds no device memory; only VRAM executors do",
                      executor ? "RAM or pool" : "NULL");
}

uform_status_t uform_executor_scratch_release(uform_executor_t executor) {
    return uform_fail(uform_status_unsupported_k,
                      "uform_executor_scratch_release: the %s executor holds no device memory; only VRAM executors do",
                      executor ? "RAM or pool" : "NULL");
}

size_t uform_vram_members(uform_executor_t executor, uform_vram_member_t const **members) {
    (void)executor;
    if (members) *members = NULL;
    return 0;
}

void uform_vram_set_watchdog(uform_executor_t executor, uform_vram_watchdog_t watchdog, void *context) {
    (void)executor, (void)watchdog, (void)context;
}

#endif // UFORM_WITH_CUDA
