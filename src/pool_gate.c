/**
 *  @file   pool_gate.c
 *  @brief  Borrowed ForkUnion pools taken in turn: one gate per pool, shared by every engine
 *          executor over it and by the pool's owner (`uform_pool_lock`), and the chain of pools a
 *          thread is inside, which turns waiting on oneself into CONTENDED.
 */
#include "internal.h"

#include <stdlib.h> // `calloc`

/**
 *  One per borrowed pool in use (by an executor or a `uform_pool_lock`), found by the pool's address
 *  in a list under the pools' global lock. `word` is a futex lock (0 free, 1 held, 2 held with
 *  waiters); `holder` names the thread holding it (the address of its `uform_pool_thread_token`),
 *  so a forked child can free gates its parent's other threads held.
 */
typedef struct pool_gate_t {
    void const *pool;
    size_t references;        /**< Executors over the pool and `uform_pool_lock` holders. */
    atomic_uint word;
    _Atomic(uintptr_t) holder; /**< 0 while free or while being taken. */
    uform_pool_chain_t link;   /**< The holder's chain entry while held through `uform_pool_lock`. */
    struct pool_gate_t *next;
} pool_gate_t;

static pool_gate_t *pool_gates = NULL;
static _Thread_local char uform_pool_thread_token;
_Thread_local uform_pool_chain_t *uform_current_pools = NULL;

bool uform_pool_inside(void const *pool) {
    for (uform_pool_chain_t const *entry = uform_current_pools; entry; entry = entry->outer)
        if (entry->pool == pool) return true;
    return false;
}

/** The gate of `pool` with one more reference, created if absent; NULL when out of memory. */
pool_gate_t *pool_gate_acquire(void const *pool) {
    uform_global_lock(uform_global_lock_pools_k);
    pool_gate_t *gate = pool_gates;
    while (gate && gate->pool != pool) gate = gate->next;
    if (!gate && (gate = calloc(1, sizeof(pool_gate_t)))) {
        gate->pool = pool;
        gate->next = pool_gates;
        pool_gates = gate;
    }
    if (gate) ++gate->references;
    uform_global_unlock(uform_global_lock_pools_k);
    return gate;
}

void pool_gate_release(pool_gate_t *gate) {
    uform_global_lock(uform_global_lock_pools_k);
    if (--gate->references == 0) {
        pool_gate_t **cursor = &pool_gates;
        while (*cursor != gate) cursor = &(*cursor)->next;
        *cursor = gate->next;
        free(gate);
    }
    uform_global_unlock(uform_global_lock_pools_k);
}

static bool pool_gate_try_take(pool_gate_t *gate) {
    unsigned expected = 0;
    if (!atomic_compare_exchange_strong_explicit(&gate->word, &expected, 1u, memory_order_acquire,
                                                 memory_order_relaxed))
        return false;
    atomic_store_explicit(&gate->holder, (uintptr_t)&uform_pool_thread_token, memory_order_relaxed);
    return true;
}

/** Waits for the gate: a short spin (another round usually ends soon), then parked. */
void pool_gate_take(pool_gate_t *gate) {
    for (unsigned spins = 0; spins < UFORM_PARK_SPINS; ++spins) {
        if (atomic_load_explicit(&gate->word, memory_order_relaxed) == 0 && pool_gate_try_take(gate)) return;
        uform_spin_pause();
    }
    while (atomic_exchange_explicit(&gate->word, 2u, memory_order_acquire) != 0)
        uform_futex_wait((uint32_t *)&gate->word, 2u, NULL);
    atomic_store_explicit(&gate->holder, (uintptr_t)&uform_pool_thread_token, memory_order_relaxed);
}

void pool_gate_give(pool_gate_t *gate) {
    atomic_store_explicit(&gate->holder, (uintptr_t)0, memory_order_relaxed);
    if (atomic_exchange_explicit(&gate->word, 0u, memory_order_release) == 2)
        uform_futex_wake((uint32_t *)&gate->word, 1);
}

void uform_pool_gates_after_fork(void) {
    // Only this thread survived the fork: gates held by any other are free in the child.
    for (pool_gate_t *gate = pool_gates; gate; gate = gate->next)
        if (atomic_load_explicit(&gate->holder, memory_order_relaxed) != (uintptr_t)&uform_pool_thread_token) {
            atomic_store_explicit(&gate->holder, (uintptr_t)0, memory_order_relaxed);
            atomic_store_explicit(&gate->word, 0u, memory_order_relaxed);
        }
}

static uform_status_t pool_lock(void *fu_pool, bool wait, char const *verb) {
    if (!fu_pool) return uform_fail(uform_status_invalid_argument_k, "%s: fu_pool is NULL", verb);
    if (uform_pool_inside(fu_pool))
        return uform_fail(uform_status_contended_k,
                          "%s: this thread already holds the pool, or runs one of its tasks; taking it again "
                          "would wait on itself",
                          verb);
    pool_gate_t *gate = pool_gate_acquire(fu_pool);
    if (!gate) return uform_fail(uform_status_out_of_memory_k, "%s: cannot allocate the pool's gate", verb);
    if (wait) pool_gate_take(gate);
    else if (!pool_gate_try_take(gate)) {
        pool_gate_release(gate);
        return uform_fail(uform_status_contended_k,
                          "%s: an engine call or another holder has the pool now; retry, or use uform_pool_lock "
                          "to wait for it",
                          verb);
    }
    gate->link = (uform_pool_chain_t) {.pool = fu_pool, .outer = uform_current_pools, .gate = gate};
    uform_current_pools = &gate->link;
    return uform_status_ok_k;
}

uform_status_t uform_pool_lock(void *fu_pool) { return pool_lock(fu_pool, true, "uform_pool_lock"); }

uform_status_t uform_pool_try_lock(void *fu_pool) { return pool_lock(fu_pool, false, "uform_pool_try_lock"); }

uform_status_t uform_pool_unlock(void *fu_pool) {
    if (!fu_pool) return uform_fail(uform_status_invalid_argument_k, "uform_pool_unlock: fu_pool is NULL");
    // This thread's innermost entry must be its lock of this pool: locks are released in reverse
    // order, and never from inside an engine call or task (whose entries would then dangle).
    uform_pool_chain_t *entry = uform_current_pools;
    if (!entry || entry->pool != fu_pool || !entry->gate)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_pool_unlock: this thread's innermost hold is not a uform_pool_lock of this pool "
                          "(never locked here, already unlocked, locked before another pool still held, or "
                          "called from inside a task)");
    pool_gate_t *gate = entry->gate;
    uform_current_pools = entry->outer;
    pool_gate_give(gate);
    pool_gate_release(gate);
    return uform_status_ok_k;
}
