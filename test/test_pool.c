/**
 *  @file   test_pool.c
 *  @brief  Pool executors over a ForkUnion stand-in loaded at run time: UNSUPPORTED before it is
 *          in the process, then every schedule, deferred order, re-entry and contention through it.
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef void *(*pool_new_t)(char const *);
typedef bool (*pool_spawn_t)(void *, size_t, int);
typedef void (*pool_delete_t)(void *);
typedef size_t (*pool_dispatches_t)(void *);

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
    CHECK_FATAL(pool_new && pool_spawn && pool_delete && pool_dispatches);

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

        uform_executor_free(executor);
        free(tally);
        pool_delete(pool);
    }
    dlclose(library);
    CHECK_DONE();
}
