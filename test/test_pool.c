/**
 *  @file   test_pool.c
 *  @brief  Pool executors over a ForkUnion stand-in loaded at run time: UNSUPPORTED before it is
 *          in the process, then every schedule, deferred order, re-entry and contention through it,
 *          and the one-submitter rule: two executors over one pool, tasks calling into the pool
 *          again (directly or through a RAM executor), and the owner taking the pool in turn. The
 *          stand-in aborts on a second submitter, as ForkUnion would misbehave on one.
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdbool.h>

typedef void *(*pool_new_t)(char const *);
typedef bool (*pool_spawn_t)(void *, size_t, int);
typedef void (*pool_delete_t)(void *);
typedef size_t (*pool_dispatches_t)(void *);
typedef void (*fu_for_prongs_t)(void *context, size_t task, size_t thread, size_t colocation);
typedef void (*pool_for_n_t)(void *, size_t, fu_for_prongs_t, void *);

typedef struct tally_t {
    atomic_uint counts[4096];
    atomic_uint bad_thread;
    size_t threads;
    uform_executor_t executor;
    atomic_int reentry_contended;
    size_t order[64];
    atomic_size_t order_next;
} tally_t;

static void count_task(void *context, size_t task, size_t thread, size_t domain) {
    tally_t *tally = context;
    (void)domain;
    atomic_fetch_add(&tally->counts[task], 1);
    if (thread >= tally->threads) atomic_fetch_add(&tally->bad_thread, 1);
}

static void reenter_task(void *context, size_t task, size_t thread, size_t domain) {
    tally_t *tally = context;
    (void)task, (void)thread, (void)domain;
    uform_call_t inner = {.tasks = 1, .task = count_task, .context = tally};
    if (uform_executor_call(tally->executor, &inner, NULL) == uform_status_contended_k)
        atomic_fetch_add(&tally->reentry_contended, 1);
}

typedef struct ordered_t {
    tally_t *tally;
    size_t id;
} ordered_t;

static void order_task(void *context, size_t task, size_t thread, size_t domain) {
    ordered_t *item = context;
    (void)task, (void)thread, (void)domain;
    item->tally->order[atomic_fetch_add(&item->tally->order_next, 1)] = item->id;
}

/* ---- One submitter at a time ---- */

typedef struct shared_pool_t {
    void *pool;
    uform_executor_t executors[2];
    pool_for_n_t for_n;
    atomic_size_t work[2];
    atomic_size_t owner_work;
    atomic_size_t statuses[16];
    atomic_int go;
    size_t calls;
    size_t threads;
} shared_pool_t;

typedef struct shared_worker_t {
    shared_pool_t *shared;
    size_t index;
} shared_worker_t;

static void shared_count(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)thread, (void)domain;
    atomic_fetch_add((atomic_size_t *)context, 1);
}

/** One thread per executor, blocking and deferred calls mixed; the stand-in aborts if two ever
 *  submit to the pool at once. */
static void *shared_caller(void *argument) {
    shared_worker_t *worker = argument;
    shared_pool_t *shared = worker->shared;
    while (!atomic_load(&shared->go)) sched_yield();
    uform_outcome_t outcomes[8];
    for (size_t index = 0; index < shared->calls; ++index) {
        uform_call_t call = {.schedule = (uform_schedule_t)(index % 3), .tasks = 5, .task = shared_count,
                             .context = &shared->work[worker->index]};
        uform_status_t status = uform_executor_call(shared->executors[worker->index], &call,
                                                    index % 2 ? &outcomes[index % 8] : NULL);
        atomic_fetch_add(&shared->statuses[status], 1);
        if (index % 8 == 7) CHECK_OK(uform_executor_drain(shared->executors[worker->index], uform_mood_parked_k));
    }
    CHECK_OK(uform_executor_drain(shared->executors[worker->index], uform_mood_parked_k));
    return NULL;
}

/** The owner: takes the pool in turn with the engine and submits to it directly. */
static void *shared_owner(void *argument) {
    shared_pool_t *shared = argument;
    while (!atomic_load(&shared->go)) sched_yield();
    for (size_t index = 0; index < shared->calls; ++index) {
        uform_status_t status = index % 4 == 3 ? uform_pool_try_lock(shared->pool) : uform_pool_lock(shared->pool);
        if (status == uform_status_contended_k) continue; // the try-lock found it taken
        atomic_fetch_add(&shared->statuses[status], 1);
        if (status != uform_status_ok_k) continue;
        shared->for_n(shared->pool, 5, (fu_for_prongs_t)shared_count, &shared->owner_work);
        atomic_fetch_add(&shared->statuses[uform_pool_unlock(shared->pool)], 1);
    }
    return NULL;
}

static void test_shared_pool(void *pool, size_t threads, pool_for_n_t for_n) {
    shared_pool_t shared = {.pool = pool, .for_n = for_n, .calls = 600, .threads = threads};
    for (size_t index = 0; index < 2; ++index)
        CHECK_STATUS(uform_executor_on_pool(pool, NULL, 4, &shared.executors[index]), uform_status_ok_k);
    pthread_t callers[2], owner;
    shared_worker_t workers[2] = {{&shared, 0}, {&shared, 1}};
    for (size_t index = 0; index < 2; ++index) pthread_create(&callers[index], NULL, shared_caller, &workers[index]);
    pthread_create(&owner, NULL, shared_owner, &shared);
    atomic_store(&shared.go, 1);
    for (size_t index = 0; index < 2; ++index) pthread_join(callers[index], NULL);
    pthread_join(owner, NULL);
    // Every call ran in full (five tasks, or a task per thread), none was refused: the executors
    // and the owner took the pool in turn.
    size_t const per_call[3] = {5, 5, threads};
    size_t expected = 0;
    for (size_t index = 0; index < shared.calls; ++index) expected += per_call[index % 3];
    for (size_t index = 0; index < 2; ++index) CHECK(atomic_load(&shared.work[index]) == expected);
    CHECK(atomic_load(&shared.statuses[uform_status_ok_k]) >= 2 * shared.calls);
    size_t others = 0;
    for (size_t status = 1; status < 16; ++status) others += atomic_load(&shared.statuses[status]);
    CHECK(others == 0);
    CHECK(atomic_load(&shared.owner_work) % 5 == 0 && atomic_load(&shared.owner_work) >= 5 * (shared.calls * 3 / 4));
    for (size_t index = 0; index < 2; ++index) uform_executor_free(shared.executors[index]);
}

typedef struct nested_t {
    uform_executor_t other;     // a second executor over the same pool
    uform_executor_t ram;       // a RAM executor the task goes through
    void *pool;
    size_t threads;
    atomic_size_t contended;    // calls and drains refused as they must be
    atomic_size_t wrong;        // anything else
    atomic_size_t ran;
    uform_outcome_t deferred[2]; // a deferred call from thread 0 of each outer round: queued, not refused
    atomic_size_t deferred_count;
} nested_t;

static void nested_record(nested_t *nested, uform_status_t status, char const *needle) {
    if (status == uform_status_contended_k && strstr(uform_error_message(), needle)) atomic_fetch_add(&nested->contended, 1);
    else {
        fprintf(stderr, "nested: %s: %s\n", uform_status_name(status), uform_error_message());
        atomic_fetch_add(&nested->wrong, 1);
    }
}

/** Runs on a RAM executor's thread, inside a pool task: the pool is still this call's. */
static void nested_through_ram(void *context, size_t task, size_t thread, size_t domain) {
    nested_t *nested = context;
    (void)task, (void)thread, (void)domain;
    uform_call_t inner = {.tasks = 1, .task = shared_count, .context = &nested->ran};
    nested_record(nested, uform_executor_call(nested->other, &inner, NULL), "pool");
}

/** A pool task calling another executor over the same pool: blocking, deferred, drain, lock. */
static void nested_task(void *context, size_t task, size_t thread, size_t domain) {
    nested_t *nested = context;
    (void)task, (void)domain;
    uform_call_t inner = {.tasks = 1, .task = shared_count, .context = &nested->ran};
    nested_record(nested, uform_executor_call(nested->other, &inner, NULL), "pool");
    nested_record(nested, uform_executor_drain(nested->other, uform_mood_parked_k), "pool");
    nested_record(nested, uform_pool_lock(nested->pool), "already holds the pool");
    nested_record(nested, uform_pool_try_lock(nested->pool), "already holds the pool");
    if (thread == 0) { // a deferred call waits for nothing here: it is queued, and runs once the pool is free
        size_t const index = atomic_fetch_add(&nested->deferred_count, 1);
        if (uform_executor_call(nested->other, &inner, &nested->deferred[index]) != uform_status_ok_k)
            atomic_fetch_add(&nested->wrong, 1);
        // ... and waiting for it from inside the pool would wait on itself: CONTENDED, still pending.
        nested_record(nested, uform_outcome_wait(&nested->deferred[index], -1), "holds the executor's ForkUnion pool");
        nested_record(nested, uform_outcome_wait(&nested->deferred[index], 0.01), "holds the executor's ForkUnion pool");
        if (uform_outcome_poll(&nested->deferred[index]) != uform_status_pending_k) atomic_fetch_add(&nested->wrong, 1);
    }
    // The last pool thread (a pool worker unless the pool has one thread) goes through a RAM
    // executor, whose threads inherit the pool from it.
    if (thread + 1 != nested->threads) return;
    uform_call_t through = {.schedule = uform_schedule_threads_k, .task = nested_through_ram, .context = nested};
    if (uform_executor_call(nested->ram, &through, NULL) != uform_status_ok_k) atomic_fetch_add(&nested->wrong, 1);
}

static void test_nested_pool(uform_executor_t executor, void *pool, size_t threads) {
    nested_t nested = {.pool = pool, .threads = threads};
    CHECK_STATUS(uform_executor_on_pool(pool, NULL, 0, &nested.other), uform_status_ok_k);
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &nested.ram), uform_status_ok_k);
    size_t ram_threads = 1;
    uform_executor_t wider;
    if (uform_executor_for_ram(NULL, 2, 0, &wider) == uform_status_ok_k) { // two cores: through a worker too
        uform_executor_free(nested.ram);
        nested.ram = wider, ram_threads = 2;
    }
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = nested_task, .context = &nested};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    uform_outcome_t outcome; // the same from the leader of a deferred call
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(atomic_load(&nested.wrong) == 0);
    CHECK(atomic_load(&nested.contended) == 2 * (threads * 4 + ram_threads + 2));
    CHECK(atomic_load(&nested.deferred_count) == 2);
    for (size_t index = 0; index < 2; ++index) CHECK_STATUS(uform_outcome_wait(&nested.deferred[index], -1), uform_status_ok_k);
    CHECK(atomic_load(&nested.ran) == 2);
    // Outside the pool's tasks the second executor works.
    uform_call_t inner = {.tasks = 1, .task = shared_count, .context = &nested.ran};
    CHECK_STATUS(uform_executor_call(nested.other, &inner, NULL), uform_status_ok_k);
    CHECK(atomic_load(&nested.ran) == 3);
    uform_executor_free(nested.ram);
    uform_executor_free(nested.other);
}

typedef struct holder_t {
    void *pool;
    uform_status_t try_status, unlock_status;
    char message[256];
} holder_t;

static void *try_from_another_thread(void *argument) {
    holder_t *holder = argument;
    holder->try_status = uform_pool_try_lock(holder->pool);
    snprintf(holder->message, sizeof holder->message, "%s", uform_error_message());
    holder->unlock_status = uform_pool_unlock(holder->pool);
    return NULL;
}

/** The owner holds the pool: the engine's rounds wait for it, its own submissions are safe. */
static void test_owner_lock(uform_executor_t executor, void *pool, pool_for_n_t for_n) {
    CHECK_STATUS(uform_pool_lock(NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("fu_pool is NULL");
    CHECK_STATUS(uform_pool_unlock(pool), uform_status_invalid_argument_k);
    CHECK_MESSAGE("innermost hold");

    CHECK_STATUS(uform_pool_lock(pool), uform_status_ok_k);
    atomic_size_t ran = 0, owner_ran = 0;
    uform_call_t call = {.tasks = 3, .task = shared_count, .context = &ran};
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k); // queued
    // The leader cannot submit while the owner holds the pool: a wait from here says so at once,
    // whatever its timeout, and the outcome stays pending.
    CHECK_STATUS(uform_outcome_wait(&outcome, 0.05), uform_status_contended_k);
    CHECK_MESSAGE("uform_outcome_wait: this thread holds the executor's ForkUnion pool");
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_contended_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, 0), uform_status_pending_k);
    CHECK(atomic_load(&ran) == 0);
    for_n(pool, 7, (fu_for_prongs_t)shared_count, &owner_ran); // the owner's own round, in turn
    CHECK(atomic_load(&owner_ran) == 7);
    // Waiting for the pool from the thread holding it would wait on itself.
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_contended_k);
    CHECK_MESSAGE("holds the executor's ForkUnion pool");
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_contended_k);
    CHECK_STATUS(uform_pool_lock(pool), uform_status_contended_k);
    CHECK_MESSAGE("already holds the pool");
    holder_t holder = {.pool = pool};
    pthread_t other;
    pthread_create(&other, NULL, try_from_another_thread, &holder);
    pthread_join(other, NULL);
    CHECK(holder.try_status == uform_status_contended_k && strstr(holder.message, "has the pool now"));
    CHECK(holder.unlock_status == uform_status_invalid_argument_k);
    CHECK_STATUS(uform_pool_unlock(pool), uform_status_ok_k);
    CHECK_STATUS(uform_pool_unlock(pool), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(atomic_load(&ran) == 3);
    // Try-lock succeeds once the pool is free.
    CHECK_STATUS(uform_pool_try_lock(pool), uform_status_ok_k);
    CHECK_STATUS(uform_pool_unlock(pool), uform_status_ok_k);
    // A pool no executor uses yet can be held too, and released.
    int other_pool = 0;
    CHECK_STATUS(uform_pool_lock(&other_pool), uform_status_ok_k);
    CHECK_STATUS(uform_pool_lock(pool), uform_status_ok_k);
    CHECK_STATUS(uform_pool_unlock(&other_pool), uform_status_invalid_argument_k); // not the innermost
    CHECK_STATUS(uform_pool_unlock(pool), uform_status_ok_k);
    CHECK_STATUS(uform_pool_unlock(&other_pool), uform_status_ok_k);
}

int main(void) {
    int dummy_pool = 0;
    uform_executor_t executor;
    // No ForkUnion in the process yet: UNSUPPORTED, saying so, and the pool is never touched.
    CHECK_STATUS(uform_executor_on_pool(&dummy_pool, NULL, 0, &executor), uform_status_unsupported_k);
    CHECK_MESSAGE("ForkUnion is not loaded");

    void *library = dlopen(UFORM_FU_STANDIN_PATH, RTLD_NOW | RTLD_GLOBAL);
    CHECK_FATAL(library != NULL);
    pool_new_t pool_new = (pool_new_t)dlsym(library, "fu_pool_new");
    pool_spawn_t pool_spawn = (pool_spawn_t)dlsym(library, "fu_pool_spawn");
    pool_delete_t pool_delete = (pool_delete_t)dlsym(library, "fu_pool_delete");
    pool_dispatches_t pool_dispatches = (pool_dispatches_t)dlsym(library, "fu_pool_dispatches");
    pool_for_n_t pool_for_n = (pool_for_n_t)dlsym(library, "fu_pool_for_n");
    CHECK_FATAL(pool_new && pool_spawn && pool_delete && pool_dispatches && pool_for_n);

    void *unspawned = pool_new("unspawned");
    CHECK_STATUS(uform_executor_on_pool(unspawned, NULL, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("zero threads");
    pool_delete(unspawned);

    for (size_t threads = 1; threads <= 4; ++threads) {
        void *pool = pool_new("test");
        CHECK_FATAL(pool_spawn(pool, threads, 0));
        uform_ram_options_t above = {.cpu_class = uform_cpu_class_aws_g5_k};
        CHECK_STATUS(uform_executor_on_pool(pool, &above, 0, &executor), uform_status_unsupported_k);
        CHECK_STATUS(uform_executor_on_pool(pool, NULL, 0, &executor), uform_status_ok_k);
        uform_executor_description_t description;
        CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
        CHECK(description.kind == uform_executor_kind_pool_k);
        CHECK(description.threads_count == threads);
        CHECK_STATUS(uform_executor_thread_placement(executor, 0, NULL, NULL), uform_status_unsupported_k);

        tally_t *tally = calloc(1, sizeof(tally_t));
        tally->threads = threads;
        tally->executor = executor;
        size_t dispatches_before = pool_dispatches(pool);
        for (int schedule = uform_schedule_static_k; schedule <= uform_schedule_threads_k; ++schedule) {
            memset(tally->counts, 0, sizeof(tally->counts));
            uform_call_t call = {.schedule = (uform_schedule_t)schedule, .tasks = 4096, .task = count_task, .context = tally};
            CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
            size_t expected = schedule == uform_schedule_threads_k ? threads : 4096, wrong = 0;
            for (size_t task = 0; task < expected; ++task) wrong += atomic_load(&tally->counts[task]) != 1;
            CHECK(wrong == 0);
        }
        CHECK(atomic_load(&tally->bad_thread) == 0);
        CHECK(pool_dispatches(pool) == dispatches_before + 3); // the pool's threads did the work

        // Deferred calls go through the executor's leader, in submission order.
        ordered_t items[64];
        uform_outcome_t outcomes[64];
        for (size_t index = 0; index < 64; ++index) {
            items[index] = (ordered_t) {.tally = tally, .id = index};
            uform_call_t call = {.tasks = 1, .task = order_task, .context = &items[index]};
            CHECK_STATUS(uform_executor_call(executor, &call, index % 4 == 3 ? NULL : &outcomes[index]), uform_status_ok_k);
        }
        CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
        size_t misordered = 0;
        for (size_t index = 0; index < 64; ++index) misordered += tally->order[index] != index;
        CHECK(misordered == 0 && atomic_load(&tally->order_next) == 64);

        // A callback on a pool thread calling back into the executor gets CONTENDED, never a deadlock.
        uform_call_t reentry = {.schedule = uform_schedule_threads_k, .task = reenter_task, .context = tally};
        CHECK_STATUS(uform_executor_call(executor, &reentry, NULL), uform_status_ok_k);
        CHECK(atomic_load(&tally->reentry_contended) == (int)threads);

        test_nested_pool(executor, pool, threads);
        test_owner_lock(executor, pool, pool_for_n);
        test_shared_pool(pool, threads, pool_for_n);

        uform_executor_free(executor);
        free(tally);
        pool_delete(pool);
    }
    dlclose(library);
    CHECK_DONE();
}
