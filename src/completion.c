/**
 *  @file   completion.c
 *  @brief  The one completion-and-wait layer under every executor kind: the deferred ring, the
 *          outcome finisher, saved failures, and the spin-then-park wait on bell words.
 *
 *  Who uses what (the walk of a call, whatever the executor):
 *  - executor.c checks the call, takes the gate (`uform_gate_enter`), begins the outcome, hands the
 *    call to the backend and leaves the gate; a refused deferred call's outcome is finished here.
 *  - A deferred call takes a slot of the executor's `uform_ring_t` (`uform_ring_full` when none is
 *    free); the slot is consumed in order, and its outcome finished with `uform_outcome_finish`, by
 *    the leader thread (RAM, pool) or by whichever thread polls the devices (VRAM).
 *  - Every host wait (a round's join, a worker between rounds, a ticket, the leader's queue) is
 *    `uform_bell_wait`; `uform_outcome_wait` parks on the outcome with `uform_outcome_park`.
 *    Waits on what no host word announces are `uform_poll_until`, the one poll-with-deadline loop:
 *    the VRAM executor's device waits (the driver's events and streams, vram_queue.c), NCCL's
 *    asynchronous errors (the mesh's settle) and other processes' files (the rendezvous's join and
 *    blob).
 *  - A call refused before it reaches an executor (a verb's argument checks, a mesh's) finishes its
 *    outcome with `uform_outcome_refuse`, as `uform_executor_call` does its own refusals.
 *  - `uform_executor_drain` and `uform_executor_free` (executor.c) settle the backend, then apply
 *    the mood: one drain for every kind.
 */
#include "internal.h"

#include <stdio.h>  // `snprintf`
#include <stdlib.h> // `calloc`
#include <string.h> // `memcpy`

/* ---- Saved failures ---- */

void uform_failure_save(uform_failure_t *failure, uform_status_t status) {
    failure->status = status;
    if (status == uform_status_ok_k) failure->message[0] = '\0';
    else memcpy(failure->message, uform_error_message(), sizeof(failure->message));
    failure->message[sizeof(failure->message) - 1] = '\0';
}

uform_status_t uform_failure_raise(uform_failure_t const *failure) {
    if (failure->status == uform_status_ok_k) return failure->status;
    return uform_fail(failure->status, "%s", failure->message);
}

/* ---- The deferred ring ---- */

uform_status_t uform_ring_check_limit(size_t deferred_limit, char const *verb) {
    if (deferred_limit > UFORM_DEFERRED_LIMIT_MAX)
        return uform_fail(uform_status_invalid_argument_k, "%s: deferred_limit %zu is above the maximum of %zu", verb,
                          deferred_limit, UFORM_DEFERRED_LIMIT_MAX);
    return uform_status_ok_k;
}

uform_status_t uform_ring_init(uform_ring_t *ring, size_t deferred_limit, size_t slot_bytes, char const *verb) {
    uform_status_t status = uform_ring_check_limit(deferred_limit, verb);
    if (status != uform_status_ok_k) return status;
    atomic_init(&ring->tail, 0u);
    atomic_init(&ring->head, 0u);
    ring->capacity = (uint32_t)(deferred_limit ? deferred_limit : UFORM_DEFERRED_LIMIT_DEFAULT);
    uint32_t slots = 1;
    while (slots < ring->capacity) slots <<= 1; // at most UFORM_DEFERRED_LIMIT_MAX, itself a power of two
    ring->mask = slots - 1;
    ring->slot_bytes = slot_bytes;
    ring->slots = calloc(slots, slot_bytes);
    if (!ring->slots)
        return uform_fail(uform_status_out_of_memory_k, "%s: cannot allocate %u deferred slots", verb,
                          (unsigned)ring->capacity);
    return uform_status_ok_k;
}

void uform_ring_free(uform_ring_t *ring) {
    free(ring->slots);
    ring->slots = NULL;
}

uform_status_t uform_ring_full(uform_ring_t const *ring) {
    return uform_fail(uform_status_deferred_full_k,
                      "uform_executor_call: %u deferred calls are already tracked, the executor's deferred_limit, "
                      "and none has finished; wait for an outcome or drain, then submit again",
                      (unsigned)ring->capacity);
}

/* ---- Outcomes ---- */

void uform_outcome_begin(uform_outcome_t *outcome, uform_executor_t executor) {
    __atomic_store_n(&outcome->finished, 0u, __ATOMIC_RELAXED);
    outcome->status = uform_status_pending_k;
    outcome->reserved[0] = (uint64_t)(uintptr_t)executor;
    outcome->reserved[1] = 0;
    outcome->reserved[2] = 0;
    outcome->reserved[3] = uform_fork_generation(); // a child finds a pending outcome FORKED
    outcome->message[0] = '\0';
}

void uform_outcome_record_failure(uform_outcome_t *outcome, uform_status_t status, char const *message) {
    if (status == uform_status_ok_k || outcome->reserved[2]) return; // the first failure stays
    size_t length = message ? strlen(message) : 0;
    if (length >= sizeof(outcome->message)) length = sizeof(outcome->message) - 1;
    memcpy(outcome->message, message ? message : "", length);
    outcome->message[length] = '\0';
    outcome->reserved[2] = (uint64_t)status;
}

void uform_outcome_settle(uform_outcome_t *outcome, uform_status_t status, char const *message, bool wake) {
    if (status == uform_status_ok_k && outcome->reserved[2]) {
        // The call's own tasks recorded a failure (`uform_outcome_record_failure`): its message is in place.
        status = (uform_status_t)outcome->reserved[2];
    } else {
        size_t length = status != uform_status_ok_k && message ? strlen(message) : 0;
        if (length >= sizeof(outcome->message)) length = sizeof(outcome->message) - 1;
        memcpy(outcome->message, message ? message : "", length);
        outcome->message[length] = '\0';
    }
    outcome->status = status;
    __atomic_store_n(&outcome->finished, 1u, __ATOMIC_RELEASE);
    // Nothing of the outcome is read once `finished` is set (its owner may reuse it at once): the
    // wake-up names the address only, as a futex key.
    if (wake) uform_futex_wake(&outcome->finished, 1 << 30);
}

void uform_outcome_finish(uform_outcome_t *outcome, uform_status_t status, char const *message) {
    uform_outcome_settle(outcome, status, message, true);
}

uform_status_t uform_outcome_refuse(uform_outcome_t *outcome, uform_status_t status) {
    if (outcome) {
        uform_outcome_begin(outcome, NULL);
        uform_outcome_finish(outcome, status, status == uform_status_ok_k ? "" : uform_error_message());
    }
    return status;
}

uform_status_t uform_verb_refusal(uform_outcome_t *outcome, uform_status_t status, char const *verb) {
    static char const inner[] = "uform_executor_call: ";
    if (status != uform_status_contended_k && status != uform_status_deferred_full_k) return status;
    char const *message = uform_error_message();
    if (strncmp(message, inner, sizeof inner - 1) != 0) return status;
    char rest[1024];
    snprintf(rest, sizeof rest, "%s", message + sizeof inner - 1);
    return uform_outcome_refuse(outcome, uform_fail(status, "%s: %s", verb, rest));
}

void uform_outcome_park(uform_outcome_t *outcome, struct timespec const *timeout) {
    uform_futex_wait(&outcome->finished, 0u, timeout);
}

/* ---- Spinning and parking ---- */

/**
 *  Spins of an idle PARKED thread before it sleeps: 1024 `pause`s (about 20-60 microseconds) at
 *  first, adapted to how calls arrive: a sleep cut short by the next round within a millisecond
 *  quadruples that thread's spin, up to 32 times the first; a sleep of 50 ms or more (an executor
 *  left idle) brings it back.
 *
 *  Why: with every core in use, a worker preempted for a moment (a kernel thread, a hypervisor)
 *  makes thread 0 outwait its spin and sleep; waking it takes long enough that the other workers
 *  outwait theirs and sleep too, and the next round then wakes them all, one system call and one
 *  wake-up latency after another, which again outlasts every spin. Back-to-back rounds stayed in
 *  that regime (a median of 121 us per empty round at 32 threads on 32 cores, against 1.5 us
 *  SPINNING). A spin that grows after sleeps cut short breaks the cycle within a few rounds.
 */
#define UFORM_SHORT_PARK_SECONDS 1e-3
#define UFORM_LONG_PARK_SECONDS 0.05

unsigned uform_adapt_spins(unsigned spins, double parked_seconds) {
    if (parked_seconds < UFORM_SHORT_PARK_SECONDS)
        return spins >= UFORM_PARK_SPINS_MAX / 4 ? UFORM_PARK_SPINS_MAX : spins * 4;
    if (parked_seconds >= UFORM_LONG_PARK_SECONDS) return UFORM_PARK_SPINS;
    return spins;
}

void uform_bell_park(uform_bell_t *bell, bool (*ready)(void *), void *context, uform_spin_t *spin) {
    // The word is read before the last looks at the condition and the mood: whatever rings it after
    // them (the condition changing, a drain into SPINNING, stopping) changes the word, so the sleep
    // below returns at once instead of missing the wake-up.
    unsigned const word = atomic_load_explicit(&bell->word, memory_order_seq_cst);
    atomic_fetch_add_explicit(&bell->sleepers, 1u, memory_order_seq_cst);
    if (!ready(context) &&
        (!spin->mood || atomic_load_explicit(spin->mood, memory_order_seq_cst) != uform_mood_spinning_k)) {
        if (UFORM_UNLIKELY(spin->before_park != NULL)) spin->before_park();
        double const parked_at = spin->adaptive ? uform_now_seconds() : 0;
        uform_futex_wait((uint32_t *)&bell->word, word, NULL);
        if (spin->adaptive) spin->budget = uform_adapt_spins(spin->budget, uform_now_seconds() - parked_at);
    }
    atomic_fetch_sub_explicit(&bell->sleepers, 1u, memory_order_seq_cst);
}

/* ---- Polling where there is no bell ---- */

/**
 *  Waits with nothing to park on: the CUDA driver, NCCL's asynchronous errors and other processes'
 *  files signal no host word this process could sleep on, so those waits look, then spin
 *  (`pauses` pauses a time) for `spin_seconds` (without end while the mood is SPINNING), then sleep
 *  from `nap_min` seconds, growing by `growth` up to `nap_max` (from `nap_min` again after a look
 *  that saw progress), never past the deadline. Every look comes before the deadline is checked, so
 *  a condition met at the last moment is not reported as a timeout.
 */
uform_status_t uform_poll_until(uform_poll_look_t look, void *context, double seconds,
                                uform_poll_backoff_t const *backoff) {
    double const start = uform_now_seconds();
    double nap = backoff->nap_min;
    unsigned const pauses = backoff->pauses ? backoff->pauses : 1;
    for (;;) {
        bool progress = false;
        uform_status_t const status = look(context, &progress);
        if (status != uform_status_pending_k) return status;
        if (progress) nap = backoff->nap_min;
        double const waited = uform_now_seconds() - start;
        if (seconds >= 0 && waited >= seconds) return uform_status_pending_k;
        if (waited < backoff->spin_seconds ||
            (backoff->mood && atomic_load_explicit(backoff->mood, memory_order_relaxed) == uform_mood_spinning_k)) {
            for (unsigned spin = 0; spin < pauses; ++spin) uform_spin_pause();
            continue;
        }
        uform_sleep_seconds(seconds >= 0 && nap > seconds - waited ? seconds - waited : nap);
        nap = nap * backoff->growth > backoff->nap_max ? backoff->nap_max : nap * backoff->growth;
    }
}
