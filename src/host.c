/**
 *  @file   host.c
 *  @brief  Host executors: RAM executors with their own pinned threads, and pool executors over a
 *          borrowed ForkUnion pool. Both share the deferred queue, the tickets and the drain.
 *
 *  A call is run as a "round" by a thread 0: the submitting thread for a blocking call, the
 *  executor's leader thread for a deferred one. On a RAM executor, thread 0 publishes the call by
 *  bumping `generation` or writing it into each worker's slot (`host_join_t` says which), runs its
 *  own share, and waits for every worker's answer. Idle workers spin (SPINNING) or park on a futex
 *  after a short spin (PARKED). They park on a bell word that everything meant to wake them rings (a
 *  new round while someone is parked, a drain into SPINNING, stopping), so no wake-up can slip in
 *  between a worker's last look and its sleep; the publisher rings and makes the wake-up system call
 *  only when someone is parked. Every one of those waits (the join, the workers, tickets, the
 *  leader) is completion.c's `uform_bell_wait`.
 *
 *  Pool executors hand each round to the borrowed ForkUnion pool, which takes one submitter at a
 *  time: every engine executor over one pool, and the pool's owner through `uform_pool_lock`, take
 *  the pool's gate (pool_gate.c: one per pool, shared, found by the pool's address) around each
 *  submission.
 *
 *  Tickets order everything: each accepted call takes `submitted`, each finished call bumps
 *  `finished`. A blocking call first waits until every earlier ticket finished (the deferred calls
 *  before it), a drain until every ticket before its own snapshot finished. Deferred calls sit in
 *  completion.c's ring of `deferred_limit` slots, consumed by the leader in order.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>   // `dlsym`
#include <errno.h>   // `EINVAL`
#include <limits.h>  // `INT_MAX`
#include <pthread.h> // `pthread_create`
#include <sched.h>   // `cpu_set_t`
#include <stdlib.h>  // `calloc`
#include <string.h>  // `strerror`

typedef struct host_executor_s host_executor_t;

/**
 *  How a round's workers are woken and how they answer, by how many there are. Every exchange is a
 *  cache line that one core writes and another reads; what costs is a line several cores write, or
 *  that many read while one writes.
 *
 *  - SHARED, 1 worker: it wakes on the publish line and counts in on it too, so signal and answer
 *    bounce one line, the cheapest exchange between two cores (2-thread round 220-250 ns against
 *    380-460 ns with a line per worker, on the 2-core VM).
 *  - SLOTS, 2 to 7 workers: each worker has a slot line of its own, into which thread 0 copies the
 *    call and the round's number, and on which the worker answers. Each slot bounces between thread
 *    0 and one worker only, like SHARED's one line, and the slots are independent, so their misses
 *    overlap. Nothing every worker reads is written in a round. SHARED with 2 workers made three
 *    cores fight over one line, and LINES woke every worker on one line thread 0 had just written;
 *    the mailbox tried before (feb0b72) woke workers on their own lines but still sent each to that
 *    line for the call. On the 32-core H200 host, 3 to 8 threads: 338-749 ns a round against
 *    523-892 ns before (0.18-0.31x OpenMP against 0.31-0.44x; bench/RESULTS.md).
 *  - LINES, 8 workers and up: they wake on the publish line, one store read by all, and answer on
 *    their own lines, which thread 0 scans with independent loads. From there on thread 0's stores
 *    to every slot cost more than the shared wake-up (SPINNING, same host: 792 ns at 16 threads
 *    against 1,152 ns with slots, 903 against 2,631 at 32; 7.5 us with one shared count).
 */
typedef enum host_join_t { host_join_shared_k, host_join_slots_k, host_join_lines_k } host_join_t;

static atomic_size_t host_shared_join_workers = UFORM_HOST_SHARED_WORKERS_DEFAULT,
                     host_slot_join_workers = UFORM_HOST_SLOT_WORKERS_DEFAULT;
static atomic_bool host_oversubscribe = false;

void uform_host_join_limits(size_t shared_workers, size_t slot_workers) {
    atomic_store(&host_shared_join_workers, shared_workers);
    atomic_store(&host_slot_join_workers, slot_workers);
}

void uform_host_allow_oversubscription(bool allow) { atomic_store(&host_oversubscribe, allow); }

/** The part of a call workers run, kept small so that it and its round number share one line. */
typedef struct host_round_t {
    uform_task_callback_t task;
    void *context;
    size_t tasks;
    uform_schedule_t schedule;
} host_round_t;

/** ForkUnion's C ABI, as its header declares it, resolved at run time. */
typedef void (*fu_for_threads_t)(void *context, size_t thread, size_t colocation);
typedef void (*fu_for_prongs_t)(void *context, size_t task, size_t thread, size_t colocation);
typedef struct fu_abi_t {
    size_t (*count_threads)(void *pool);
    void (*for_threads)(void *pool, fu_for_threads_t callback, void *context);
    void (*for_n)(void *pool, size_t n, fu_for_prongs_t callback, void *context);
    void (*for_n_dynamic)(void *pool, size_t n, fu_for_prongs_t callback, void *context);
} fu_abi_t;

/** A spawned thread's own state, allocated on its NUMA node. */
typedef struct host_thread_t {
    /** The worker's slot: one line, homed on the worker's node. It answers there (LINES, SLOTS),
     *  and with SLOTS thread 0 also writes the round there; thread 0 scans the slots with independent
     *  loads, so no line is fought over by every worker at once. */
    UFORM_ALIGNED struct {
        atomic_uint done;          /**< The last round this worker finished. */
        atomic_uint wake;          /**< SLOTS: the round to run, stored after `round` and `pools`. */
        host_round_t round;        /**< SLOTS: the call, written by thread 0 while the worker waits. */
        uform_pool_chain_t *pools; /**< SLOTS: thread 0's `uform_current_pools`. */
    } slot;
    // Read-only once spawned, on a line of their own: the round's writes never evict them.
    UFORM_ALIGNED host_executor_t *owner;
    size_t thread; /**< Index among the executor's threads; 0 for the leader. */
    size_t domain; /**< Index of its node among the executor's domains. */
    pthread_t handle;
    bool joinable;
} host_thread_t;

_Static_assert(sizeof(((host_thread_t *)0)->slot) <= 64, "a worker's slot fits one cache line");

typedef struct deferred_slot_t {
    uform_call_t call;
    uform_outcome_t *outcome;
} deferred_slot_t;

struct host_executor_s {
    struct uform_executor_s base;

    // The round (SHARED, LINES): written by thread 0 before `generation` is bumped, read by workers
    // after. All share one cache line, so a waking worker takes a single miss for the signal and the
    // call. With SLOTS only thread 0 touches it (`generation` numbers the rounds) until stopping.
    UFORM_ALIGNED struct {
        atomic_uint generation;
        atomic_uint finished_count; /**< SHARED: worker completions, never reset. */
        host_round_t round;
        uform_pool_chain_t *pools; /**< Thread 0's `uform_current_pools`, which workers adopt. */
    } publish;
    unsigned finished_target; /**< Owned by thread 0 of the rounds: the count ending this round. On a
                                   line of its own (the publish line is full): workers never read it. */
    // Thread 0 parked in a long join: workers then ring `join_bell`.
    UFORM_ALIGNED uform_bell_t join_bell;
    atomic_uint join_spins;  /**< Thread 0's adaptive spin before it sleeps in a join. */
    uform_bell_t worker_bell; /**< Parked workers sleep on it; rung by rounds, drains and stopping. */
    atomic_uint stopping;
    UFORM_ALIGNED atomic_size_t dynamic_next;

    // Tickets and the deferred ring. `finished` is a bell whose word is the count itself.
    UFORM_ALIGNED atomic_uint submitted;
    UFORM_ALIGNED uform_bell_t finished;
    /** The leader sleeps on it, rung by a submission while it is parked and by stopping. */
    UFORM_ALIGNED uform_bell_t leader_bell;
    uform_ring_t ring; /**< `deferred_slot_t` slots consumed by the leader in order. */

    // Threads: [1, threads_count) are workers; the leader is thread 0 of deferred calls. Read-mostly.
    size_t threads_count;
    host_join_t join; /**< How rounds join, fixed at construction by the worker count. */
    host_thread_t **workers; /**< [threads_count], entry 0 unused. */
    host_thread_t *leader;
    int32_t *thread_cores;   /**< [threads_count] pinned core, -1 for unpinned. */
    int32_t *thread_nodes;   /**< [threads_count] node of that core. */
    size_t *thread_domains;  /**< [threads_count] domain index. */
    uform_placement_t placement;

    // Pool executors only.
    void *pool;
    fu_abi_t fu;
    struct pool_gate_t *gate; /**< The pool's gate, shared with every executor over the pool. */
};


/* ---- Rounds ---- */

static void host_run_share(host_round_t const *round, atomic_size_t *dynamic_next, size_t thread, size_t threads,
                           size_t domain) {
    uform_task_callback_t task = round->task;
    void *context = round->context;
    switch (round->schedule) {
    case uform_schedule_threads_k: task(context, thread, thread, domain); break;
    case uform_schedule_static_k: {
        size_t base = round->tasks / threads, extra = round->tasks % threads;
        size_t begin = thread * base + (thread < extra ? thread : extra);
        size_t end = begin + base + (thread < extra ? 1 : 0);
        for (size_t index = begin; index < end; ++index) task(context, index, thread, domain);
        break;
    }
    case uform_schedule_dynamic_k:
        for (;;) {
            size_t index = atomic_fetch_add_explicit(dynamic_next, 1, memory_order_relaxed);
            if (index >= round->tasks) break;
            task(context, index, thread, domain);
        }
        break;
    }
}

/** True once every worker finished round `generation`. The loads are independent, so the CPU
 *  keeps many of these misses in flight at once rather than one after another. Sequentially
 *  consistent (a plain load on x86 and Arm), as a parked joiner's last look must be. */
static bool host_all_finished(host_executor_t *self, unsigned generation) {
    if (self->join == host_join_shared_k)
        return atomic_load_explicit(&self->publish.finished_count, memory_order_seq_cst) == self->finished_target;
    bool all = true;
    for (size_t thread = 1; thread < self->threads_count; ++thread)
        all &= atomic_load_explicit(&self->workers[thread]->slot.done, memory_order_seq_cst) == generation;
    return all;
}

/** What a host wait waits for: a round's join (the generation), a worker's next round (`word`
 *  changing from the round it saw last), or a ticket. One shape for `uform_bell_wait`'s three host
 *  conditions. */
typedef struct host_wait_t {
    host_executor_t *self;
    atomic_uint const *word;
    unsigned value;
} host_wait_t;

static bool host_join_ready(void *context) {
    host_wait_t const *wait = context;
    return host_all_finished(wait->self, wait->value);
}

/** Thread 0 waits for the round's workers: spinning first, then parking unless SPINNING. */
static void host_join(host_executor_t *self, unsigned generation) {
    host_wait_t wait = {.self = self, .value = generation};
    if (UFORM_LIKELY(host_join_ready(&wait))) return;
    uform_spin_t spin = {.budget = atomic_load_explicit(&self->join_spins, memory_order_relaxed),
                         .adaptive = true, .mood = &self->base.mood};
    unsigned const budget = spin.budget;
    uform_bell_wait(&self->join_bell, host_join_ready, &wait, &spin);
    if (spin.budget != budget) atomic_store_explicit(&self->join_spins, spin.budget, memory_order_relaxed);
}

/** Rings the workers' bell: every worker parked, or about to park, wakes and looks again. */
static void host_ring_workers(host_executor_t *self) { uform_bell_ring(&self->worker_bell, INT_MAX); }

void (*_Atomic uform_host_before_park)(void); // NULL, as every static (clang 14 refuses `= NULL` here)

/** Pool executors: adapt ForkUnion's callbacks, marking the thread as inside this executor and
 *  inside the pool (with every pool the submitter is inside). */
typedef struct pool_round_t {
    uform_call_t const *call;
    uform_executor_t executor;
    uform_pool_chain_t *pools;
} pool_round_t;

static void pool_prong(void *context, size_t task, size_t thread, size_t colocation) {
    pool_round_t const *round = context;
    uform_executor_t outer = uform_current_executor;
    uform_pool_chain_t *outer_pools = uform_current_pools;
    uform_current_executor = round->executor;
    uform_current_pools = round->pools;
    round->call->task(round->call->context, task, thread, colocation);
    uform_current_executor = outer;
    uform_current_pools = outer_pools;
}

static void pool_thread(void *context, size_t thread, size_t colocation) {
    pool_prong(context, thread, thread, colocation);
}

/** Runs a whole call as thread 0 of a round, on the caller or the leader. */
static void host_run_round(host_executor_t *self, uform_call_t const *call) {
    uform_executor_t outer = uform_current_executor;
    uform_current_executor = &self->base;
    if (self->pool) {
        // One submitter at a time per pool: this round waits for the pool's gate.
        uform_pool_chain_t entry = {.pool = self->pool, .outer = uform_current_pools};
        pool_round_t round = {.call = call, .executor = &self->base, .pools = &entry};
        pool_gate_take(self->gate);
        uform_current_pools = &entry;
        switch (call->schedule) {
        case uform_schedule_threads_k: self->fu.for_threads(self->pool, pool_thread, &round); break;
        case uform_schedule_static_k: self->fu.for_n(self->pool, call->tasks, pool_prong, &round); break;
        case uform_schedule_dynamic_k: self->fu.for_n_dynamic(self->pool, call->tasks, pool_prong, &round); break;
        }
        uform_current_pools = entry.outer;
        pool_gate_give(self->gate);
    }
    else if (self->threads_count == 1) {
        host_round_t const round = {.task = call->task, .context = call->context, .tasks = call->tasks,
                                    .schedule = call->schedule};
        atomic_store_explicit(&self->dynamic_next, 0, memory_order_relaxed);
        host_run_share(&round, &self->dynamic_next, 0, 1, self->thread_domains[0]);
    }
    else if (call->schedule != uform_schedule_threads_k && call->tasks <= 1) {
        // At most one task: waking workers would only add latency.
        if (call->tasks == 1) call->task(call->context, 0, 0, self->thread_domains[0]);
    }
    else {
        host_round_t const round = {.task = call->task, .context = call->context, .tasks = call->tasks,
                                    .schedule = call->schedule};
        if (call->schedule == uform_schedule_dynamic_k)
            atomic_store_explicit(&self->dynamic_next, 0, memory_order_relaxed);
        unsigned generation;
        if (self->join == host_join_slots_k) {
            // Each worker's slot gets the call, then the round's number (release: the call is
            // visible to whoever sees the number). Only thread 0 reads `generation` in this mode.
            generation = atomic_load_explicit(&self->publish.generation, memory_order_relaxed) + 1;
            atomic_store_explicit(&self->publish.generation, generation, memory_order_relaxed);
            uform_pool_chain_t *pools = uform_current_pools;
            for (size_t thread = 1; thread < self->threads_count; ++thread) {
                host_thread_t *worker = self->workers[thread];
                worker->slot.round = round;
                worker->slot.pools = pools;
                atomic_store_explicit(&worker->slot.wake, generation, memory_order_release);
            }
            // One fence for all the slots, not a sequentially consistent store (a locked instruction
            // on x86) each: the stores come before the look at the parked count below, as a bell's
            // ringer must change the condition before it looks.
            atomic_thread_fence(memory_order_seq_cst);
        }
        else {
            // Rewriting an unchanged call would only steal the line back from every worker.
            host_round_t *published = &self->publish.round;
            if (published->task != round.task || published->context != round.context ||
                published->tasks != round.tasks || published->schedule != round.schedule)
                *published = round;
            if (self->publish.pools != uform_current_pools) self->publish.pools = uform_current_pools;
            self->finished_target += (unsigned)(self->threads_count - 1);
            generation = atomic_fetch_add_explicit(&self->publish.generation, 1u, memory_order_seq_cst) + 1;
        }
        uform_bell_ring_parked(&self->worker_bell, INT_MAX);
        host_run_share(&round, &self->dynamic_next, 0, self->threads_count, self->thread_domains[0]);
        host_join(self, generation);
    }
    uform_current_executor = outer;
}

static bool host_round_published(void *context) {
    host_wait_t const *wait = context;
    return atomic_load_explicit(wait->word, memory_order_seq_cst) != wait->value;
}

static void *host_worker_loop(void *argument) {
    host_thread_t *me = argument;
    host_executor_t *self = me->owner;
    uform_current_executor = &self->base; // workers only ever run this executor's callbacks
    bool const slots = self->join == host_join_slots_k;
    // Rounds are announced in the worker's own slot (SLOTS) or on the publish line; both start at
    // zero, before any worker exists.
    host_wait_t wait = {.self = self, .word = slots ? &me->slot.wake : &self->publish.generation, .value = 0};
    uform_spin_t spin = {.budget = UFORM_PARK_SPINS, .adaptive = true, .mood = &self->base.mood};
    for (;;) {
        spin.before_park = atomic_load_explicit(&uform_host_before_park, memory_order_relaxed);
        uform_bell_wait(&self->worker_bell, host_round_published, &wait, &spin);
        unsigned const now = atomic_load_explicit(wait.word, memory_order_acquire);
        wait.value = now;
        if (atomic_load_explicit(&self->stopping, memory_order_acquire)) break;
        uform_current_pools = slots ? me->slot.pools : self->publish.pools;
        host_run_share(slots ? &me->slot.round : &self->publish.round, &self->dynamic_next, me->thread,
                       self->threads_count, me->domain);
        uform_current_pools = NULL;
        if (self->join == host_join_shared_k)
            atomic_fetch_add_explicit(&self->publish.finished_count, 1u, memory_order_seq_cst);
        else atomic_store_explicit(&me->slot.done, now, memory_order_seq_cst);
        uform_bell_ring_parked(&self->join_bell, 1);
    }
    return NULL;
}


/* ---- Tickets and the deferred queue ---- */

static void host_finish_ticket(host_executor_t *self) { uform_bell_ring(&self->finished, INT_MAX); }

/** True once every ticket before `ticket` finished; tickets wrap, so compare by difference. */
static bool host_ticket_ready(void *context) {
    host_wait_t const *wait = context;
    return (int)(atomic_load_explicit(&wait->self->finished.word, memory_order_acquire) - wait->value) >= 0;
}

static void host_wait_for_ticket(host_executor_t *self, unsigned ticket) {
    host_wait_t wait = {.self = self, .value = ticket};
    uform_spin_t spin = {.budget = UFORM_PARK_SPINS};
    uform_bell_wait(&self->finished, host_ticket_ready, &wait, &spin);
}

static bool host_queue_ready(void *context) {
    host_executor_t *self = context;
    return uform_ring_count(&self->ring) || atomic_load_explicit(&self->stopping, memory_order_seq_cst);
}

static void *host_leader_loop(void *argument) {
    host_thread_t *me = argument;
    host_executor_t *self = me->owner;
    uform_spin_t spin = {.budget = 0}; // the leader parks at once: submissions are rarer than rounds
    for (;;) {
        uform_bell_wait(&self->leader_bell, host_queue_ready, self, &spin);
        if (!uform_ring_count(&self->ring)) break; // stopping, with the queue empty
        unsigned const head = atomic_load_explicit(&self->ring.head, memory_order_relaxed);
        deferred_slot_t slot = *(deferred_slot_t *)uform_ring_at(&self->ring, head);
        host_run_round(self, &slot.call);
        // The slot is free before the outcome says so: a caller who sees its outcome finish may
        // submit again at once. The ticket comes last, so a drain still finds the outcome final.
        atomic_store_explicit(&self->ring.head, head + 1, memory_order_release);
        uform_outcome_finish(slot.outcome, uform_status_ok_k, NULL);
        host_finish_ticket(self);
    }
    return NULL;
}

static uform_status_t host_call(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome) {
    host_executor_t *self = (host_executor_t *)executor;
    if (UFORM_UNLIKELY(!call->task))
        return uform_fail(uform_status_invalid_argument_k, "uform_executor_call: a host executor needs a task callback");
    if (outcome) {
        if (uform_ring_count(&self->ring) >= self->ring.capacity) return uform_ring_full(&self->ring);
        unsigned const tail = atomic_load_explicit(&self->ring.tail, memory_order_relaxed);
        *(deferred_slot_t *)uform_ring_at(&self->ring, tail) = (deferred_slot_t) {.call = *call, .outcome = outcome};
        atomic_fetch_add_explicit(&self->submitted, 1u, memory_order_relaxed);
        atomic_store_explicit(&self->ring.tail, tail + 1, memory_order_seq_cst);
        uform_bell_ring_parked(&self->leader_bell, 1);
        return uform_status_ok_k;
    }
    unsigned ticket = atomic_fetch_add_explicit(&self->submitted, 1u, memory_order_relaxed);
    if (atomic_load_explicit(&self->finished.word, memory_order_acquire) != ticket) host_wait_for_ticket(self, ticket);
    host_run_round(self, call);
    host_finish_ticket(self);
    return uform_status_ok_k;
}

static uform_status_t host_settle(uform_executor_t executor, char const *verb) {
    (void)verb;
    host_executor_t *self = (host_executor_t *)executor;
    host_wait_for_ticket(self, atomic_load_explicit(&self->submitted, memory_order_acquire));
    return uform_status_ok_k;
}

static uform_status_t host_apply_mood(uform_executor_t executor, uform_mood_t previous, uform_mood_t mood) {
    // Parked workers re-read the mood only when woken, so a switch to SPINNING rings them all,
    // those about to park included.
    if (previous != mood && mood == uform_mood_spinning_k) host_ring_workers((host_executor_t *)executor);
    return uform_status_ok_k;
}

static uform_status_t host_thread_placement(uform_executor_t executor, size_t thread, int32_t *core, int32_t *node) {
    host_executor_t *self = (host_executor_t *)executor;
    if (core) *core = self->thread_cores[thread];
    if (node) *node = self->thread_nodes[thread];
    return uform_status_ok_k;
}


/* ---- Lifetime ---- */

static void host_release(host_executor_t *self) {
    bool forked = self->base.fork_generation != uform_fork_generation();
    if (!forked) {
        // Wake everyone with `stopping` set; workers see a new generation, the leader an empty queue.
        atomic_store_explicit(&self->stopping, 1u, memory_order_seq_cst);
        unsigned const last = atomic_fetch_add_explicit(&self->publish.generation, 1u, memory_order_seq_cst) + 1;
        for (size_t thread = 1; self->workers && thread < self->threads_count; ++thread)
            if (self->workers[thread]) atomic_store_explicit(&self->workers[thread]->slot.wake, last, memory_order_seq_cst);
        host_ring_workers(self);
        uform_bell_ring(&self->leader_bell, INT_MAX);
    }
    // In a forked child the threads do not exist: joining them would be undefined, so only the
    // memory is released.
    for (size_t thread = 1; self->workers && thread < self->threads_count; ++thread) {
        host_thread_t *worker = self->workers[thread];
        if (!worker) continue;
        if (worker->joinable && !forked) pthread_join(worker->handle, NULL);
        uform_numa_free(worker, sizeof(*worker));
    }
    if (self->leader) {
        if (self->leader->joinable && !forked) pthread_join(self->leader->handle, NULL);
        uform_numa_free(self->leader, sizeof(*self->leader));
    }
    free(self->workers);
    uform_ring_free(&self->ring);
    free(self->thread_cores);
    free(self->thread_nodes);
    free(self->thread_domains);
    uform_placement_free(&self->placement);
    if (self->gate) pool_gate_release(self->gate);
    free(self);
}

size_t uform_host_parked_workers(uform_executor_t executor) {
    if (!executor || executor->backend->call != host_call) return 0;
    return atomic_load_explicit(&((host_executor_t *)executor)->worker_bell.sleepers, memory_order_seq_cst);
}

char const *uform_host_join_name(uform_executor_t executor) {
    if (!executor || executor->backend->call != host_call || ((host_executor_t *)executor)->pool) return NULL;
    static char const *const names[] = {"shared", "slots", "lines"};
    return names[((host_executor_t *)executor)->join];
}

static void host_free(uform_executor_t executor) { host_release((host_executor_t *)executor); }

/** RAM and pool executors alike (executor.c refuses thread placements of pool executors). */
static uform_backend_t const host_backend = {
    .call = host_call,
    .settle = host_settle,
    .apply_mood = host_apply_mood,
    .poll = NULL,
    .thread_placement = host_thread_placement,
    .free = host_free,
};


uform_status_t uform_start_pinned_thread(pthread_t *handle, int32_t core, void *(*loop)(void *), void *argument) {
    pthread_attr_t attributes;
    int error = pthread_attr_init(&attributes);
    if (!error && core >= 0) {
        cpu_set_t cores;
        CPU_ZERO(&cores);
        if (core >= CPU_SETSIZE) error = EINVAL;
        else CPU_SET((size_t)core, &cores), error = pthread_attr_setaffinity_np(&attributes, sizeof(cores), &cores);
    }
    if (!error) error = pthread_create(handle, &attributes, loop, argument);
    pthread_attr_destroy(&attributes);
    if (error) {
        if (core >= 0)
            return uform_fail(uform_status_system_error_k, "uform: the OS refused a thread pinned to core %d: %s",
                              core, strerror(error));
        return uform_fail(uform_status_system_error_k, "uform: the OS refused a thread: %s", strerror(error));
    }
    return uform_status_ok_k;
}

/** Spawns a thread on `core` (or unpinned for -1), its state on `node`. */
static uform_status_t host_spawn(host_executor_t *self, host_thread_t **slot, size_t thread, size_t domain,
                                 int32_t core, int32_t node, void *(*loop)(void *)) {
    host_thread_t *state = uform_numa_alloc(sizeof(host_thread_t), node);
    if (!state) return uform_fail(uform_status_out_of_memory_k, "uform: cannot allocate thread state on node %d", node);
    *state = (host_thread_t) {.owner = self, .thread = thread, .domain = domain};
    *slot = state;

    uform_status_t status = uform_start_pinned_thread(&state->handle, core, loop, state);
    if (status != uform_status_ok_k) return status;
    state->joinable = true;
    return uform_status_ok_k;
}

/** Allocates an executor over `placement`, which it takes: the executor's on success, freed on failure. */
static uform_status_t host_allocate(uform_placement_t *placement, size_t threads, size_t deferred_limit,
                                    uform_backend_t const *backend, uform_executor_kind_t kind, char const *verb,
                                    host_executor_t **out) {
    uform_status_t status = uform_ring_check_limit(deferred_limit, verb);
    host_executor_t *self = status == uform_status_ok_k ? aligned_alloc(128, (sizeof(host_executor_t) + 127) / 128 * 128)
                                                        : NULL;
    if (!self) {
        uform_placement_free(placement);
        if (status != uform_status_ok_k) return status;
        return uform_fail(uform_status_out_of_memory_k, "uform: cannot allocate an executor");
    }
    memset(self, 0, sizeof(*self));
    uform_executor_init(&self->base, backend, kind);
    atomic_init(&self->join_spins, UFORM_PARK_SPINS);
    self->placement = *placement;
    *placement = (uform_placement_t) {0};
    self->threads_count = threads;
    size_t const workers = threads - 1;
    self->join = workers <= atomic_load(&host_shared_join_workers) ? host_join_shared_k
                 : workers <= atomic_load(&host_slot_join_workers) ? host_join_slots_k
                                                                    : host_join_lines_k;
    status = uform_ring_init(&self->ring, deferred_limit, sizeof(deferred_slot_t), verb);
    self->workers = calloc(threads, sizeof(host_thread_t *));
    self->thread_cores = calloc(threads, sizeof(int32_t));
    self->thread_nodes = calloc(threads, sizeof(int32_t));
    self->thread_domains = calloc(threads, sizeof(size_t));
    if (status != uform_status_ok_k || !self->workers || !self->thread_cores || !self->thread_nodes || !self->thread_domains) {
        host_release(self);
        return uform_fail(uform_status_out_of_memory_k, "uform: cannot allocate an executor of %zu threads", threads);
    }
    uform_executor_description_t *description = &self->base.description;
    description->threads_count = threads;
    description->domains_count = self->placement.domains_count;
    description->cpu_class = self->placement.cpu_class;
    description->deferred_limit = self->ring.capacity;
    *out = self;
    return uform_status_ok_k;
}

/** Picks `threads` of the placement's cores, spreading them over domains in proportion to each
 *  domain's cores, and keeping each domain's threads contiguous so neighbouring tasks share a node. */
static void host_choose_cores(host_executor_t *self) {
    uform_placement_t const *placement = &self->placement;
    size_t threads = self->threads_count, total = placement->cores_count, assigned = 0;
    size_t first_core = 0;
    for (size_t domain = 0; domain < placement->domains_count; ++domain) {
        size_t domain_cores = 0;
        while (first_core + domain_cores < total && placement->core_domains[first_core + domain_cores] == domain)
            ++domain_cores;
        // Proportional share, the running total rounded to nearest with halves up, so a remainder goes
        // to the first domains (one thread over two nodes runs on the first, as the NULL executor's
        // caller usually does), and the last domain takes what is left.
        size_t share = domain + 1 == placement->domains_count
                           ? threads - assigned
                           : (threads * (first_core + domain_cores) + total / 2) / total - assigned;
        if (share > domain_cores) share = domain_cores;
        for (size_t index = 0; index < share && assigned < threads; ++index, ++assigned) {
            self->thread_cores[assigned] = placement->cores[first_core + index];
            self->thread_domains[assigned] = domain;
            self->thread_nodes[assigned] = placement->domain_nodes[domain];
        }
        first_core += domain_cores;
    }
    // Tests only (`uform_host_allow_oversubscription`): threads past the cores run unpinned.
    for (; assigned < threads; ++assigned) {
        self->thread_cores[assigned] = -1;
        self->thread_domains[assigned] = 0;
        self->thread_nodes[assigned] = placement->domain_nodes[0];
    }
}

uform_status_t uform_executor_for_ram(uform_ram_options_t const *ram, size_t threads, size_t deferred_limit,
                                      uform_executor_t *executor) {
    if (!executor) return uform_fail(uform_status_invalid_argument_k, "uform_executor_for_ram: executor is NULL");
    uform_placement_t placement;
    uform_status_t status = uform_placement_resolve(ram, &placement);
    if (status != uform_status_ok_k) return status;
    if (threads == 0) threads = uform_default_threads(placement.cores_count);
    if (threads > placement.cores_count && !atomic_load(&host_oversubscribe)) {
        size_t const cores = placement.cores_count;
        uform_placement_free(&placement);
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_for_ram: %zu threads asked, but the chosen domains carry only %zu cores "
                          "this process may run on; the engine pins one thread per core and never oversubscribes",
                          threads, cores);
    }
    host_executor_t *self;
    status = host_allocate(&placement, threads, deferred_limit, &host_backend, uform_executor_kind_ram_k,
                           "uform_executor_for_ram", &self);
    if (status != uform_status_ok_k) return status;
    host_choose_cores(self);
    for (size_t thread = 1; thread < threads && status == uform_status_ok_k; ++thread)
        status = host_spawn(self, &self->workers[thread], thread, self->thread_domains[thread],
                            self->thread_cores[thread], self->thread_nodes[thread], host_worker_loop);
    if (status == uform_status_ok_k)
        status = host_spawn(self, &self->leader, 0, self->thread_domains[0], self->thread_cores[0],
                            self->thread_nodes[0], host_leader_loop);
    if (status != uform_status_ok_k) {
        host_release(self);
        return status;
    }
    *executor = &self->base;
    return uform_status_ok_k;
}

uform_status_t uform_executor_on_pool(void *fu_pool, uform_ram_options_t const *ram, size_t deferred_limit,
                                      uform_executor_t *executor) {
    if (!executor) return uform_fail(uform_status_invalid_argument_k, "uform_executor_on_pool: executor is NULL");
    if (!fu_pool) return uform_fail(uform_status_invalid_argument_k, "uform_executor_on_pool: fu_pool is NULL");
    fu_abi_t fu;
    char const *missing = NULL;
    // Resolved in the whole process (the executable and every library loaded globally), never linked.
    if (!(*(void **)&fu.count_threads = dlsym(RTLD_DEFAULT, "fu_pool_count_threads"))) missing = "fu_pool_count_threads";
    else if (!(*(void **)&fu.for_threads = dlsym(RTLD_DEFAULT, "fu_pool_for_threads"))) missing = "fu_pool_for_threads";
    else if (!(*(void **)&fu.for_n = dlsym(RTLD_DEFAULT, "fu_pool_for_n"))) missing = "fu_pool_for_n";
    else if (!(*(void **)&fu.for_n_dynamic = dlsym(RTLD_DEFAULT, "fu_pool_for_n_dynamic"))) missing = "fu_pool_for_n_dynamic";
    if (missing)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_on_pool: ForkUnion is not loaded in this process (%s was not found); "
                          "load libfork_union with RTLD_GLOBAL or link it into the executable", missing);
    size_t threads = fu.count_threads(fu_pool);
    if (threads == 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_executor_on_pool: the pool reports zero threads; spawn it first");
    uform_placement_t placement;
    uform_status_t status = uform_placement_resolve(ram, &placement);
    if (status != uform_status_ok_k) return status;
    host_executor_t *self;
    status = host_allocate(&placement, threads, deferred_limit, &host_backend, uform_executor_kind_pool_k,
                           "uform_executor_on_pool", &self);
    if (status != uform_status_ok_k) return status;
    self->pool = fu_pool;
    self->base.pool = fu_pool;
    self->fu = fu;
    if (!(self->gate = pool_gate_acquire(fu_pool))) {
        host_release(self);
        return uform_fail(uform_status_out_of_memory_k, "uform_executor_on_pool: cannot allocate the pool's gate");
    }
    for (size_t thread = 0; thread < threads; ++thread) self->thread_cores[thread] = self->thread_nodes[thread] = -1;
    // The leader hands deferred calls to the pool; it is the pool's caller, so it stays unpinned.
    status = host_spawn(self, &self->leader, 0, 0, -1, self->placement.domain_nodes[0], host_leader_loop);
    if (status != uform_status_ok_k) {
        host_release(self);
        return status;
    }
    *executor = &self->base;
    return uform_status_ok_k;
}

