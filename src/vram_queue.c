/**
 *  @file   vram_queue.c
 *  @brief  The VRAM executor's completion: its ring of deferred outcomes (completion.c's `uform_ring_t`), marks, faults, device waits and the watchdog.
 */
#define _GNU_SOURCE
#include "vram_private.h"

#include <stdarg.h> // `va_list`
#include <stdio.h>  // `snprintf`

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
        // No wake-up: nobody parks on a VRAM outcome (`uform_outcome_wait` hands it to `vram_poll`).
        if (entry->settle) {
            // The call's own failure as `uform_outcome_settle` would take it, then the settle's word.
            uform_status_t settled = all ? status : (uform_status_t)entry->outcome->reserved[2];
            char text[sizeof(entry->outcome->message)];
            snprintf(text, sizeof(text), "%s", all ? (message ? message : "") : settled ? entry->outcome->message : "");
            entry->settle(entry->settle_context, &settled, text, sizeof(text));
            entry->outcome->reserved[2] = 0;
            uform_outcome_settle(entry->outcome, settled, text, false);
            continue;
        }
        uform_outcome_settle(entry->outcome, all ? status : uform_status_ok_k, all ? message : NULL, false);
    }
    atomic_store_explicit(&self->ring.head, head, memory_order_release);
}

static void vram_finish_ready_locked(vram_executor_t *self) { vram_finish_locked(self, false, uform_status_ok_k, NULL); }

void vram_finish_all_locked(vram_executor_t *self, uform_status_t status, char const *message) {
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

void vram_poison(vram_executor_t *self, size_t device_index, CUresult result, char const *where) {
    pthread_mutex_lock(&self->lock);
    vram_poison_locked(self, device_index, result, where);
    pthread_mutex_unlock(&self->lock);
}

uform_status_t vram_fault_status(vram_executor_t *self, char const *verb) {
    return uform_fail(uform_status_device_fault_k, "%s: %s", verb, self->fault);
}

/**
 *  The one way a driver call's failure on a device becomes a status: a sticky error poisons the
 *  executor (DEVICE_FAULT with the fault's message under `verb`); anything else is
 *  `uform_cuda_status(result, otherwise)` with "<verb>: <formatted>: <the driver's error>".
 */
uform_status_t vram_fail(vram_executor_t *self, size_t device_index, CUresult result, char const *where,
                                char const *verb, uform_status_t otherwise, char const *format, ...)
    UFORM_PRINTF(7, 8);
uform_status_t vram_fail(vram_executor_t *self, size_t device_index, CUresult result, char const *where,
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
uform_status_t vram_progress_locked(vram_executor_t *self, uint64_t target, uform_cuda_context_t *context) {
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
            CUresult result = uform_cuda_context_use(cuda, context, device->context);
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
            CUresult result = uform_cuda_context_use(cuda, context, device->context);
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
                    CUresult result = uform_cuda_context_use(cuda, context, device->context);
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

/** A device wait's state between looks (`vram_wait_look`). */
typedef struct vram_wait_t {
    vram_executor_t *self;
    uint64_t target;
    uform_cuda_context_t *context;
    char const *verb;
    double next_watchdog;
} vram_wait_t;

/** One look of a device wait: OK once `target` completed, DEVICE_FAULT once the executor is
 *  poisoned, the watchdog's failure (run about once a millisecond), else PENDING. */
static uform_status_t vram_wait_look(void *opaque, bool *progress) {
    (void)progress; // completion is all or nothing: there is no partial progress to look sooner for
    vram_wait_t *wait = opaque;
    vram_executor_t *self = wait->self;
    pthread_mutex_lock(&self->lock);
    uform_status_t status = vram_progress_locked(self, wait->target, wait->context);
    pthread_mutex_unlock(&self->lock);
    if (status == uform_status_device_fault_k) return vram_fault_status(self, wait->verb);
    if (status == uform_status_ok_k) return status;
    double const now = uform_now_seconds();
    if (now >= wait->next_watchdog) {
        uform_failure_t failure;
        if (vram_run_watchdog(self, &failure) != uform_status_ok_k) {
            pthread_mutex_lock(&self->lock);
            vram_finish_all_locked(self, failure.status, failure.message);
            pthread_mutex_unlock(&self->lock);
            return uform_failure_raise(&failure);
        }
        wait->next_watchdog = now + UFORM_VRAM_WATCHDOG_SECONDS;
    }
    return uform_status_pending_k;
}

/**
 *  Waits until `target` completes, the executor is poisoned (DEVICE_FAULT), the watchdog fails
 *  (its status), or `timeout_seconds` (negative: forever) pass (PENDING). Sets the thread's message
 *  for every status but OK and PENDING. The driver signals nothing a host thread could park on (a
 *  bell word), so this is completion.c's `uform_poll_until`: a look per pause for the first
 *  UFORM_VRAM_SPIN_SECONDS (forever in the SPINNING mood), then sleeps doubling from
 *  UFORM_VRAM_NAP_MIN_SECONDS to UFORM_VRAM_NAP_MAX_SECONDS.
 */
uform_status_t vram_wait_in(vram_executor_t *self, uint64_t target, double timeout_seconds,
                                   uform_cuda_context_t *context, char const *verb) {
    if (atomic_load_explicit(&self->completed, memory_order_acquire) >= target &&
        !atomic_load_explicit(&self->faulted, memory_order_acquire))
        return uform_status_ok_k;
    uform_poll_backoff_t const backoff = {.spin_seconds = UFORM_VRAM_SPIN_SECONDS,
                                          .nap_min = UFORM_VRAM_NAP_MIN_SECONDS,
                                          .nap_max = UFORM_VRAM_NAP_MAX_SECONDS,
                                          .growth = 2,
                                          .pauses = 1,
                                          .mood = &self->base.mood};
    vram_wait_t wait = {.self = self, .target = target, .context = context, .verb = verb,
                        .next_watchdog = uform_now_seconds() + UFORM_VRAM_WATCHDOG_SECONDS};
    return uform_poll_until(vram_wait_look, &wait, timeout_seconds, &backoff);
}

uform_status_t vram_wait(vram_executor_t *self, uint64_t target, double timeout_seconds, char const *verb) {
    if (atomic_load_explicit(&self->completed, memory_order_acquire) >= target &&
        !atomic_load_explicit(&self->faulted, memory_order_acquire))
        return uform_status_ok_k;
    uform_cuda_context_t context;
    uform_cuda_context_enter(self->cuda, &context);
    uform_status_t status = vram_wait_in(self, target, timeout_seconds, &context, verb);
    uform_cuda_context_leave(self->cuda, &context);
    return status;
}

/** Reserves a mark slot for the submitter when one is due; UFORM_VRAM_MARKS when none. */
size_t vram_reserve_mark(vram_executor_t *self, uint64_t sequence) {
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
void vram_publish_locked(vram_executor_t *self, uint64_t sequence, size_t mark, bool mark_recorded) {
    atomic_store_explicit(&self->enqueued, sequence, memory_order_release);
    if (mark != UFORM_VRAM_MARKS) {
        self->mark_states[mark] = mark_recorded ? vram_mark_pending_k : vram_mark_free_k;
        self->mark_sequences[mark] = sequence;
    }
}

uform_status_t vram_settle(uform_executor_t executor, char const *verb) {
    vram_executor_t *self = (vram_executor_t *)executor;
    return vram_wait(self, atomic_load_explicit(&self->enqueued, memory_order_acquire), -1, verb);
}


uform_status_t vram_poll(uform_executor_t executor, uform_outcome_t *outcome, double timeout_seconds) {
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

/** DEVICE_FAULT with the fault's message under `verb` once the executor is poisoned; OK otherwise
 *  (and for other executors). */
uform_status_t uform_vram_check_fault(uform_executor_t executor, char const *verb) {
    vram_executor_t *self = vram_cast(executor);
    if (!self || !atomic_load_explicit(&self->faulted, memory_order_acquire)) return uform_status_ok_k;
    return vram_fault_status(self, verb); // the message is written before the flag's release, as vram_call reads it
}
