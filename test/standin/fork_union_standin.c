/**
 *  @file   fork_union_standin.c
 *  @brief  A test stand-in for ForkUnion's C ABI, written for UForm's tests: a fixed pool of
 *          threads (the caller is thread 0) exporting the functions `uform_executor_on_pool`
 *          resolves at run time. It is not ForkUnion and shares none of its code.
 *
 *  Like ForkUnion, it takes one submitter at a time: a second `fu_pool_for_*` entering while a
 *  round is in flight (from another thread, or from one of the round's own tasks) is misuse that
 *  ForkUnion answers with a hang, a wrong result or a crash. The stand-in makes it certain: it
 *  prints what happened and aborts the process.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define STANDIN_API __attribute__((visibility("default")))

typedef void (*fu_for_threads_t)(void *context, size_t thread, size_t colocation);
typedef void (*fu_for_prongs_t)(void *context, size_t task, size_t thread, size_t colocation);

typedef struct standin_pool_t {
    size_t threads;
    pthread_t *handles;
    pthread_mutex_t mutex;
    pthread_cond_t wake, joined;
    unsigned long generation;
    size_t pending;
    bool stopping;
    // The job: either a broadcast or a prong loop over `n`, statically or dynamically.
    int kind; // 0 broadcast, 1 static, 2 dynamic
    size_t n;
    void *callback;
    void *context;
    atomic_size_t next;
    atomic_size_t dispatches; // counts every dispatch, so tests can prove the pool was used
    atomic_int submitting;    // 1 while a round is in flight: the one-submitter rule
} standin_pool_t;

typedef struct standin_worker_t {
    standin_pool_t *pool;
    size_t thread;
} standin_worker_t;

static void standin_run(standin_pool_t *pool, size_t thread) {
    switch (pool->kind) {
    case 0: ((fu_for_threads_t)pool->callback)(pool->context, thread, 0); break;
    case 1: {
        size_t base = pool->n / pool->threads, extra = pool->n % pool->threads;
        size_t begin = thread * base + (thread < extra ? thread : extra);
        size_t end = begin + base + (thread < extra ? 1 : 0);
        for (size_t task = begin; task < end; ++task) ((fu_for_prongs_t)pool->callback)(pool->context, task, thread, 0);
        break;
    }
    default:
        for (size_t task; (task = atomic_fetch_add(&pool->next, 1)) < pool->n;)
            ((fu_for_prongs_t)pool->callback)(pool->context, task, thread, 0);
    }
}

static void *standin_worker(void *argument) {
    standin_worker_t *worker = argument;
    standin_pool_t *pool = worker->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool->mutex);
    for (;;) {
        while (pool->generation == seen && !pool->stopping) pthread_cond_wait(&pool->wake, &pool->mutex);
        if (pool->stopping) break;
        seen = pool->generation;
        pthread_mutex_unlock(&pool->mutex);
        standin_run(pool, worker->thread);
        pthread_mutex_lock(&pool->mutex);
        if (--pool->pending == 0) pthread_cond_signal(&pool->joined);
    }
    pthread_mutex_unlock(&pool->mutex);
    free(worker);
    return NULL;
}

STANDIN_API void *fu_pool_new(char const *name) {
    (void)name;
    standin_pool_t *pool = calloc(1, sizeof(standin_pool_t));
    if (!pool) return NULL;
    pthread_mutex_init(&pool->mutex, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->joined, NULL);
    return pool;
}

STANDIN_API bool fu_pool_spawn(void *opaque, size_t threads, int exclusivity) {
    standin_pool_t *pool = opaque;
    (void)exclusivity;
    if (!threads || pool->threads) return false;
    pool->threads = threads;
    pool->handles = calloc(threads, sizeof(pthread_t));
    for (size_t thread = 1; thread < threads; ++thread) {
        standin_worker_t *worker = malloc(sizeof(standin_worker_t));
        *worker = (standin_worker_t) {.pool = pool, .thread = thread};
        pthread_create(&pool->handles[thread], NULL, standin_worker, worker);
    }
    return true;
}

STANDIN_API void fu_pool_delete(void *opaque) {
    standin_pool_t *pool = opaque;
    pthread_mutex_lock(&pool->mutex);
    pool->stopping = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    for (size_t thread = 1; thread < pool->threads; ++thread) pthread_join(pool->handles[thread], NULL);
    pthread_mutex_destroy(&pool->mutex);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->joined);
    free(pool->handles);
    free(pool);
}

STANDIN_API size_t fu_pool_count_threads(void *opaque) { return ((standin_pool_t *)opaque)->threads; }

STANDIN_API size_t fu_pool_dispatches(void *opaque) { return atomic_load(&((standin_pool_t *)opaque)->dispatches); }

static void standin_dispatch(standin_pool_t *pool, int kind, size_t n, void *callback, void *context) {
    if (atomic_exchange(&pool->submitting, 1)) {
        fprintf(stderr, "fork_union_standin: a second submitter entered pool %p while a round was in flight; "
                        "ForkUnion takes one submitter at a time\n", (void *)pool);
        abort();
    }
    pthread_mutex_lock(&pool->mutex);
    pool->kind = kind, pool->n = n, pool->callback = callback, pool->context = context;
    atomic_store(&pool->next, 0);
    atomic_fetch_add(&pool->dispatches, 1);
    pool->pending = pool->threads - 1;
    ++pool->generation;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->mutex);
    standin_run(pool, 0);
    pthread_mutex_lock(&pool->mutex);
    while (pool->pending) pthread_cond_wait(&pool->joined, &pool->mutex);
    pthread_mutex_unlock(&pool->mutex);
    atomic_store(&pool->submitting, 0);
}

STANDIN_API void fu_pool_for_threads(void *pool, fu_for_threads_t callback, void *context) {
    standin_dispatch(pool, 0, 0, (void *)callback, context);
}
STANDIN_API void fu_pool_for_n(void *pool, size_t n, fu_for_prongs_t callback, void *context) {
    standin_dispatch(pool, 1, n, (void *)callback, context);
}
STANDIN_API void fu_pool_for_n_dynamic(void *pool, size_t n, fu_for_prongs_t callback, void *context) {
    standin_dispatch(pool, 2, n, (void *)callback, context);
}
