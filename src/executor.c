/**
 *  @file   executor.c
 *  @brief  The executor-independent half of every call: argument checks, fork and re-entry
 *          detection, the one-call-at-a-time gate, residency, the NULL executor, and outcomes.
 *
 *  Backends (host.c for RAM and pool executors, vram.c for device executors) see only calls that
 *  passed every check here, with the gate held.
 */
#include "internal.h"

#include <math.h>    // `isnan`

_Thread_local uform_executor_t uform_current_executor = NULL;

void uform_executor_init(uform_executor_t executor, uform_backend_t const *backend, uform_executor_kind_t kind) {
    atomic_init(&executor->gate, 0u);
    atomic_init(&executor->mood, (unsigned)uform_mood_parked_k);
    executor->backend = backend;
    executor->pool = NULL;
    executor->fork_generation = uform_fork_generation();
    atomic_init(&executor->attachment, NULL);
    executor->description = (uform_executor_description_t) {0};
    executor->description.kind = kind;
}

bool uform_executor_attach(uform_executor_t executor, void *owner) {
    void *expected = NULL;
    return atomic_compare_exchange_strong_explicit(&executor->attachment, &expected, owner, memory_order_acq_rel,
                                                   memory_order_acquire);
}

void uform_executor_detach(uform_executor_t executor, void *owner) {
    void *expected = owner;
    (void)atomic_compare_exchange_strong_explicit(&executor->attachment, &expected, NULL, memory_order_acq_rel,
                                                  memory_order_relaxed);
}

void uform_run_inline(uform_call_t const *call) {
    switch (call->schedule) {
    case uform_schedule_threads_k: call->task(call->context, 0, 0, 0); break;
    default:
        for (size_t task = 0; task < call->tasks; ++task) call->task(call->context, task, 0, 0);
        break;
    }
}

uform_status_t uform_check_forked(uform_executor_t executor, char const *verb) {
    if (UFORM_UNLIKELY(executor->fork_generation != uform_fork_generation()))
        return uform_fail(uform_status_forked_k,
                          "%s: the executor was created before a fork() by the parent process; its threads "
                          "and devices did not survive the fork, so only uform_executor_free may be called",
                          verb);
    return uform_status_ok_k;
}

/** Checks shared by calls and drains: a live executor of this process, not re-entered. */
static uform_status_t uform_check_usable(uform_executor_t executor, char const *verb) {
    uform_status_t status = uform_check_forked(executor, verb);
    if (UFORM_UNLIKELY(status != uform_status_ok_k)) return status;
    if (UFORM_UNLIKELY(uform_current_executor == executor))
        return uform_fail(uform_status_contended_k,
                          "%s: called from inside a callback of the same executor, which would wait on itself",
                          verb);
    return uform_status_ok_k;
}

uform_status_t uform_gate_enter(uform_executor_t executor, char const *verb) {
    uform_status_t status = uform_check_usable(executor, verb);
    if (UFORM_UNLIKELY(status != uform_status_ok_k)) return status;
    unsigned expected = 0;
    if (UFORM_UNLIKELY(!atomic_compare_exchange_strong_explicit(&executor->gate, &expected, 1u,
                                                                memory_order_acquire, memory_order_relaxed)))
        return uform_fail(uform_status_contended_k,
                          "%s: another call holds the executor; overlapping threads take one executor apiece", verb);
    return uform_status_ok_k;
}

/** Blocking calls and drains on a pool executor wait for its pool, which this thread may hold. */
static uform_status_t uform_check_pool(uform_executor_t executor, char const *verb) {
    if (UFORM_UNLIKELY(executor->pool && uform_current_pools && uform_pool_inside(executor->pool)))
        return uform_fail(uform_status_contended_k,
                          "%s: this thread holds the executor's ForkUnion pool (uform_pool_lock, or a call running "
                          "on it) or runs one of its tasks, so waiting for the pool would wait on itself",
                          verb);
    return uform_status_ok_k;
}

static uform_status_t uform_check_call(uform_call_t const *call) {
    if (UFORM_UNLIKELY(!call)) return uform_fail(uform_status_invalid_argument_k, "uform_executor_call: call is NULL");
    if (UFORM_UNLIKELY((unsigned)call->residency > uform_residency_vram_k))
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_call: residency %d is not one of any (0), ram (1), vram (2)",
                          (int)call->residency);
    if (UFORM_UNLIKELY((unsigned)call->schedule > uform_schedule_threads_k))
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_call: schedule %d is not one of static (0), dynamic (1), threads (2)",
                          (int)call->schedule);
    if (UFORM_UNLIKELY(!call->task && !call->device))
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_call: the call has neither a task nor a device callback");
    return uform_status_ok_k;
}

static uform_status_t uform_call_inline(uform_call_t const *call, uform_outcome_t *outcome) {
    if (call->device)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_call: the NULL executor has no device streams to run a device "
                          "callback on; use a VRAM executor");
    // Begun before the task runs, so a failure the task records (`uform_outcome_record_failure`) stays.
    if (outcome) uform_outcome_begin(outcome, NULL);
    uform_run_inline(call);
    if (outcome) uform_outcome_finish(outcome, uform_status_ok_k, NULL);
    return uform_status_ok_k;
}

static uform_status_t uform_executor_call_checked(uform_executor_t executor, uform_call_t const *call,
                                                  uform_outcome_t *outcome) {
    uform_status_t status = uform_check_call(call);
    if (UFORM_UNLIKELY(status != uform_status_ok_k)) return status;
    if (!executor) return uform_call_inline(call, outcome);
    if (UFORM_UNLIKELY(!outcome)) status = uform_check_pool(executor, "uform_executor_call");
    if (UFORM_LIKELY(status == uform_status_ok_k)) status = uform_gate_enter(executor, "uform_executor_call");
    if (UFORM_UNLIKELY(status != uform_status_ok_k)) return status;

    uform_executor_kind_t kind = executor->description.kind;
    bool device_executor = kind == uform_executor_kind_vram_k;
    if (UFORM_UNLIKELY(call->residency == uform_residency_ram_k && device_executor))
        status = uform_fail(uform_status_residency_mismatch_k,
                            "uform_executor_call: a RAM-resident call met a VRAM executor");
    else if (UFORM_UNLIKELY(call->residency == uform_residency_vram_k && !device_executor))
        status = uform_fail(uform_status_residency_mismatch_k,
                            "uform_executor_call: a VRAM-resident call met a %s executor",
                            kind == uform_executor_kind_pool_k ? "pool" : "RAM");
    else if (UFORM_UNLIKELY(call->device && !device_executor))
        status = uform_fail(uform_status_residency_mismatch_k,
                            "uform_executor_call: a device callback needs a VRAM executor, not a %s one",
                            kind == uform_executor_kind_pool_k ? "pool" : "RAM");
    else {
        if (outcome) uform_outcome_begin(outcome, executor);
        status = executor->backend->call(executor, call, outcome);
    }
    uform_gate_leave(executor);
    return status;
}

uform_status_t uform_executor_call(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome) {
    uform_status_t status = uform_executor_call_checked(executor, call, outcome);
    // A deferred call refused before it was queued finishes its outcome with the same status, so
    // an outcome handed to a failing call never stays pending.
    if (UFORM_UNLIKELY(status != uform_status_ok_k)) return uform_outcome_refuse(outcome, status);
    return status;
}

uform_status_t uform_executor_drain(uform_executor_t executor, uform_mood_t mood) {
    if ((unsigned)mood > uform_mood_spinning_k)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_drain: mood %d is not one of parked (0), spinning (1)", (int)mood);
    if (!executor) return uform_status_ok_k;
    uform_status_t status = uform_check_usable(executor, "uform_executor_drain");
    if (status == uform_status_ok_k) status = uform_check_pool(executor, "uform_executor_drain");
    if (status != uform_status_ok_k) return status;
    // One drain for every kind: settle the earlier calls, then apply the mood, keeping the first
    // failure (the mood is applied even after one, as a drain promises).
    uform_failure_t failure;
    uform_failure_save(&failure, executor->backend->settle(executor, "uform_executor_drain"));
    unsigned const previous = atomic_exchange_explicit(&executor->mood, (unsigned)mood, memory_order_seq_cst);
    status = executor->backend->apply_mood ? executor->backend->apply_mood(executor, (uform_mood_t)previous, mood)
                                           : uform_status_ok_k;
    if (failure.status != uform_status_ok_k) return uform_failure_raise(&failure);
    return status;
}

void uform_executor_free(uform_executor_t executor) {
    if (!executor) return;
    // Every earlier call finishes first, in the process that owns the executor's threads.
    if (executor->fork_generation == uform_fork_generation())
        (void)executor->backend->settle(executor, "uform_executor_free");
    executor->backend->free(executor);
}

uform_status_t uform_executor_describe(uform_executor_t executor, uform_executor_description_t *description) {
    if (!description)
        return uform_fail(uform_status_invalid_argument_k, "uform_executor_describe: description is NULL");
    if (!executor) {
        uform_executor_description_t inline_description = {0};
        inline_description.kind = uform_executor_kind_inline_k;
        inline_description.threads_count = 1;
        inline_description.domains_count = 1;
        uform_status_t const detected = uform_cpu_detect(&inline_description.cpu_class, NULL);
        if (detected != uform_status_ok_k) return detected;
        inline_description.mood = uform_mood_parked_k;
        *description = inline_description;
        return uform_status_ok_k;
    }
    uform_status_t status = uform_check_forked(executor, "uform_executor_describe");
    if (status != uform_status_ok_k) return status;
    *description = executor->description;
    description->mood = (uform_mood_t)atomic_load_explicit(&executor->mood, memory_order_relaxed);
    return uform_status_ok_k;
}

uform_status_t uform_executor_thread_placement(uform_executor_t executor, size_t thread, int32_t *core,
                                               int32_t *node) {
    uform_status_t status = executor ? uform_check_forked(executor, "uform_executor_thread_placement")
                                     : uform_status_ok_k;
    if (status != uform_status_ok_k) return status;
    if (!executor || executor->pool || !executor->backend->thread_placement)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_thread_placement: the %s executor's threads are not the engine's to pin",
                          executor ? "pool" : "NULL");
    if (thread >= executor->description.threads_count)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_thread_placement: thread %zu is out of range, the executor has %zu",
                          thread, executor->description.threads_count);
    return executor->backend->thread_placement(executor, thread, core, node);
}

/* ---- Outcomes ---- */

static uform_executor_t uform_outcome_executor(uform_outcome_t const *outcome) {
    return (uform_executor_t)(uintptr_t)outcome->reserved[0];
}

static uform_status_t uform_outcome_result(uform_outcome_t *outcome) {
    if (outcome->status != uform_status_ok_k) /* bounded: a caller's garbage outcome may hold no NUL */
        uform_fail(outcome->status, "%.*s", (int)sizeof outcome->message, outcome->message);
    return outcome->status;
}

uform_status_t uform_outcome_poll(uform_outcome_t *outcome) {
    if (!outcome) return uform_fail(uform_status_invalid_argument_k, "uform_outcome_poll: outcome is NULL");
    return uform_outcome_wait(outcome, 0);
}

/** The longest single futex wait: a longer (or infinite) timeout waits in slices of it, so the
 *  conversion to `time_t` never overflows. */
#define UFORM_WAIT_SLICE_SECONDS 3600.0

uform_status_t uform_outcome_wait(uform_outcome_t *outcome, double timeout_seconds) {
    if (!outcome) return uform_fail(uform_status_invalid_argument_k, "uform_outcome_wait: outcome is NULL");
    if (isnan(timeout_seconds))
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_outcome_wait: timeout_seconds is NaN; pass a negative value to wait forever");
    if (__atomic_load_n(&outcome->finished, __ATOMIC_ACQUIRE)) return uform_outcome_result(outcome);

    // Pending at a fork: the call runs (if at all) in the parent, whose threads this child lacks.
    if (UFORM_UNLIKELY(outcome->reserved[3] != uform_fork_generation())) {
        uform_outcome_finish(outcome, uform_status_forked_k,
                             "uform_outcome_wait: the call was pending when this process was forked from its "
                             "parent; it runs in the parent only, and this copy of its outcome never finishes");
        return uform_outcome_result(outcome);
    }

    uform_executor_t executor = uform_outcome_executor(outcome);
    // A pool executor's call runs only once this thread lets go of the pool: waiting would wait on itself.
    if (executor && timeout_seconds != 0) {
        uform_status_t const pool = uform_check_pool(executor, "uform_outcome_wait");
        if (UFORM_UNLIKELY(pool != uform_status_ok_k)) return pool;
        // A host executor runs one call at a time and finishes its outcome after the round: from inside
        // one of its callbacks, any of its pending calls (this one, or one queued behind it) waits on
        // that callback. (A VRAM executor's pending calls were enqueued already: they do finish.)
        if (UFORM_UNLIKELY(uform_current_executor == executor && !executor->backend->poll))
            return uform_fail(uform_status_contended_k,
                              "uform_outcome_wait: called from inside a callback of the executor that runs this call, "
                              "which cannot finish before that callback returns; wait for it after the callback");
    }
    if (executor && executor->backend->poll) {
        uform_status_t status = executor->backend->poll(executor, outcome, timeout_seconds);
        if (status != uform_status_ok_k) return status;
        if (__atomic_load_n(&outcome->finished, __ATOMIC_ACQUIRE)) return uform_outcome_result(outcome);
        return uform_fail(uform_status_pending_k, "uform_outcome_wait: the call has not finished yet");
    }

    // Negative: forever. Zero (either sign): a poll. Otherwise until the deadline, which may be
    // infinite; every wait is parked on the futex, a slice at a time.
    bool const forever = timeout_seconds < 0;
    double const deadline = forever ? 0 : uform_now_seconds() + timeout_seconds;
    while (!__atomic_load_n(&outcome->finished, __ATOMIC_ACQUIRE)) {
        double left = forever ? UFORM_WAIT_SLICE_SECONDS : deadline - uform_now_seconds();
        if (!(left > 0))
            return uform_fail(uform_status_pending_k, "uform_outcome_wait: the call has not finished yet");
        if (left > UFORM_WAIT_SLICE_SECONDS) left = UFORM_WAIT_SLICE_SECONDS;
        struct timespec timeout = {.tv_sec = (time_t)left, .tv_nsec = (long)((left - (double)(time_t)left) * 1e9)};
        uform_outcome_park(outcome, &timeout);
    }
    return uform_outcome_result(outcome);
}
