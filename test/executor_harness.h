/**
 *  @file   executor_harness.h
 *  @brief  What the RAM executor tests share (test_executor.c, test_executor_misuse.c): the allowed
 *          cores, and three callbacks with their state: visits, the contention storm's, and ordered
 *          records.
 */
#ifndef UFORM_TEST_EXECUTOR_HARNESS_H
#define UFORM_TEST_EXECUTOR_HARNESS_H

#define _GNU_SOURCE
#include "check.h"
#include "internal.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline size_t allowed_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof(set), &set);
    return (size_t)CPU_COUNT(&set);
}


/** A schedule's visits: how often each task ran, and on which thread. */
typedef struct visits_t {
    atomic_uint *counts;     // per task
    atomic_uint *threads;    // per task: thread that ran it + 1
    size_t threads_count;
    atomic_uint bad_thread;  // thread index out of range
} visits_t;

static inline void visit(void *context, size_t task, size_t thread, size_t domain) {
    visits_t *visits = context;
    (void)domain;
    atomic_fetch_add(&visits->counts[task], 1);
    atomic_store(&visits->threads[task], (unsigned)thread + 1);
    if (thread >= visits->threads_count) atomic_fetch_add(&visits->bad_thread, 1);
}

/** Calls that count, on thread 0, how many of them were ever inside the executor at once. */
typedef struct storm_t {
    uform_executor_t executor;
    atomic_int inside;
    atomic_int overlaps;
    atomic_size_t work_done;
    atomic_size_t ok_calls;
    atomic_size_t contended_calls;
    atomic_size_t other_statuses;
    atomic_int go;
} storm_t;

static inline void storm_task(void *context, size_t task, size_t thread, size_t domain) {
    storm_t *storm = context;
    (void)task, (void)domain;
    // Thread 0 of each call brackets the call: if two calls were ever inside at once, the counter
    // would read above one.
    if (thread == 0) {
        if (atomic_fetch_add(&storm->inside, 1) != 0) atomic_fetch_add(&storm->overlaps, 1);
    }
    atomic_fetch_add(&storm->work_done, 1);
    if (thread == 0) atomic_fetch_sub(&storm->inside, 1);
}

/** Callbacks that record the order they ran in (holding, when asked, until released). */
typedef struct sequence_t {
    size_t *record;
    atomic_size_t next;
    atomic_int release; // callbacks with `hold` wait for it
} sequence_t;

typedef struct sequenced_t {
    sequence_t *sequence;
    size_t id;
    int hold;
} sequenced_t;

static inline void record_sequence(void *context, size_t task, size_t thread, size_t domain) {
    sequenced_t *item = context;
    (void)task, (void)thread, (void)domain;
    while (item->hold && !atomic_load(&item->sequence->release)) sched_yield();
    size_t position = atomic_fetch_add(&item->sequence->next, 1);
    item->sequence->record[position] = item->id;
}

#endif // UFORM_TEST_EXECUTOR_HARNESS_H
