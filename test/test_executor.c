/**
 *  @file   test_executor.c
 *  @brief  RAM and NULL executors: calls, schedules, contention, ordering, deferred limits, drain,
 *          moods, pinning, re-entry, forks and every bad input of the executor ABI.
 */
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

static size_t allowed_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof(set), &set);
    return (size_t)CPU_COUNT(&set);
}

/* ---- Schedules ---- */

typedef struct visits_t {
    atomic_uint *counts;     // per task
    atomic_uint *threads;    // per task: thread that ran it + 1
    size_t threads_count;
    atomic_uint bad_thread;  // thread index out of range
} visits_t;

static void visit(void *context, size_t task, size_t thread, size_t domain) {
    visits_t *visits = context;
    (void)domain;
    atomic_fetch_add(&visits->counts[task], 1);
    atomic_store(&visits->threads[task], (unsigned)thread + 1);
    if (thread >= visits->threads_count) atomic_fetch_add(&visits->bad_thread, 1);
}

static void test_schedules(uform_executor_t executor, size_t threads) {
    size_t const sizes[] = {0, 1, 2, 3, 7, 64, 1000, 100003};
    for (size_t size_index = 0; size_index < sizeof(sizes) / sizeof(sizes[0]); ++size_index) {
        size_t tasks = sizes[size_index];
        for (int schedule = uform_schedule_static_k; schedule <= uform_schedule_threads_k; ++schedule) {
            size_t expected_tasks = schedule == uform_schedule_threads_k ? threads : tasks;
            visits_t visits = {.counts = calloc(expected_tasks + 1, sizeof(atomic_uint)),
                               .threads = calloc(expected_tasks + 1, sizeof(atomic_uint)),
                               .threads_count = threads};
            uform_call_t call = {.schedule = (uform_schedule_t)schedule, .tasks = tasks, .task = visit, .context = &visits};
            CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
            size_t wrong = 0;
            for (size_t task = 0; task < expected_tasks; ++task) wrong += atomic_load(&visits.counts[task]) != 1;
            CHECK(wrong == 0);
            CHECK(atomic_load(&visits.bad_thread) == 0);
            if (schedule == uform_schedule_threads_k)
                for (size_t task = 0; task < expected_tasks; ++task) CHECK(atomic_load(&visits.threads[task]) == task + 1);
            if (schedule == uform_schedule_static_k && tasks >= threads) {
                // Static: contiguous ranges in thread order, sizes differing by at most one.
                size_t base = tasks / threads, extra = tasks % threads, task = 0;
                for (size_t thread = 0; thread < threads; ++thread)
                    for (size_t count = 0; count < base + (thread < extra); ++count, ++task)
                        if (atomic_load(&visits.threads[task]) != thread + 1) ++wrong;
                CHECK(wrong == 0);
            }
            free(visits.counts);
            free(visits.threads);
        }
    }
}


/* ---- Contention storm ---- */

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

static void storm_task(void *context, size_t task, size_t thread, size_t domain) {
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

static void *storm_thread(void *argument) {
    storm_t *storm = argument;
    while (!atomic_load(&storm->go)) sched_yield();
    for (int call_index = 0; call_index < 10000; ++call_index) {
        uform_call_t call = {.schedule = uform_schedule_threads_k, .task = storm_task, .context = storm};
        uform_status_t status = uform_executor_call(storm->executor, &call, NULL);
        if (status == uform_status_ok_k) atomic_fetch_add(&storm->ok_calls, 1);
        else if (status == uform_status_contended_k) atomic_fetch_add(&storm->contended_calls, 1);
        else atomic_fetch_add(&storm->other_statuses, 1);
    }
    return NULL;
}

static void test_contention_storm(size_t threads) {
    for (int repetition = 0; repetition < 3; ++repetition) {
        storm_t storm = {0};
        CHECK_STATUS(uform_executor_for_ram(NULL, threads, 0, &storm.executor), uform_status_ok_k);
        pthread_t racers[8];
        for (int index = 0; index < 8; ++index) pthread_create(&racers[index], NULL, storm_thread, &storm);
        atomic_store(&storm.go, 1);
        for (int index = 0; index < 8; ++index) pthread_join(racers[index], NULL);
        printf("contention storm, %zu threads: %zu OK, %zu CONTENDED\n", threads, atomic_load(&storm.ok_calls),
               atomic_load(&storm.contended_calls));
        CHECK(atomic_load(&storm.overlaps) == 0);
        CHECK(atomic_load(&storm.other_statuses) == 0);
        CHECK(atomic_load(&storm.ok_calls) + atomic_load(&storm.contended_calls) == 80000);
        CHECK(atomic_load(&storm.ok_calls) > 0);
        // Every OK call ran its callback once per thread; CONTENDED ones ran nothing.
        CHECK(atomic_load(&storm.work_done) == atomic_load(&storm.ok_calls) * threads);
        uform_executor_free(storm.executor);
    }
}


/* ---- Ordering, limits and drain ---- */

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

static void record_sequence(void *context, size_t task, size_t thread, size_t domain) {
    sequenced_t *item = context;
    (void)task, (void)thread, (void)domain;
    while (item->hold && !atomic_load(&item->sequence->release)) sched_yield();
    size_t position = atomic_fetch_add(&item->sequence->next, 1);
    item->sequence->record[position] = item->id;
}

static void test_submission_order(uform_executor_t executor) {
    enum { calls_count = 1000 };
    sequence_t sequence = {.record = calloc(calls_count + 1, sizeof(size_t))};
    sequenced_t *items = calloc(calls_count, sizeof(sequenced_t));
    uform_outcome_t *outcomes = calloc(calls_count, sizeof(uform_outcome_t));
    for (size_t index = 0; index < calls_count; ++index) {
        items[index] = (sequenced_t) {.sequence = &sequence, .id = index};
        // Alternate schedules; every third call is blocking, which must wait for the deferred ones.
        uform_call_t call = {.schedule = uform_schedule_static_k, .tasks = 1, .task = record_sequence, .context = &items[index]};
        CHECK_STATUS(uform_executor_call(executor, &call, index % 3 == 2 ? NULL : &outcomes[index]), uform_status_ok_k);
    }
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(atomic_load(&sequence.next) == calls_count);
    size_t out_of_order = 0;
    for (size_t index = 0; index < calls_count; ++index) out_of_order += sequence.record[index] != index;
    CHECK(out_of_order == 0);
    size_t unfinished = 0;
    for (size_t index = 0; index < calls_count; ++index)
        if (index % 3 != 2) unfinished += uform_outcome_poll(&outcomes[index]) != uform_status_ok_k;
    CHECK(unfinished == 0);
    free(sequence.record);
    free(items);
    free(outcomes);
}

static void test_deferred_limit(void) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 4, &executor), uform_status_ok_k);
    uform_executor_description_t description;
    CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
    CHECK(description.deferred_limit == 4);

    sequence_t sequence = {.record = calloc(8, sizeof(size_t))};
    sequenced_t items[6];
    uform_outcome_t outcomes[6];
    for (size_t index = 0; index < 6; ++index) items[index] = (sequenced_t) {.sequence = &sequence, .id = index, .hold = 1};
    // Four deferred calls fill the limit (the first one runs and holds), the fifth is refused.
    for (size_t index = 0; index < 4; ++index) {
        uform_call_t call = {.tasks = 1, .task = record_sequence, .context = &items[index]};
        CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[index]), uform_status_ok_k);
    }
    CHECK_STATUS(uform_outcome_poll(&outcomes[0]), uform_status_pending_k);
    CHECK_STATUS(uform_outcome_wait(&outcomes[0], 0.01), uform_status_pending_k);
    uform_call_t fifth = {.tasks = 1, .task = record_sequence, .context = &items[4]};
    CHECK_STATUS(uform_executor_call(executor, &fifth, &outcomes[4]), uform_status_deferred_full_k);
    CHECK_MESSAGE("deferred_limit");
    // The refused call's outcome is finished with the same status, and nothing of it ran.
    CHECK_STATUS(uform_outcome_poll(&outcomes[4]), uform_status_deferred_full_k);
    CHECK(strstr(outcomes[4].message, "deferred_limit") != NULL);
    atomic_store(&sequence.release, 1);
    CHECK_STATUS(uform_outcome_wait(&outcomes[3], -1), uform_status_ok_k);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(atomic_load(&sequence.next) == 4);
    // After the drain the slots are free again.
    for (size_t index = 0; index < 4; ++index) {
        uform_call_t call = {.tasks = 1, .task = record_sequence, .context = &items[index]};
        CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[index]), uform_status_ok_k);
    }
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(atomic_load(&sequence.next) == 8);
    uform_executor_free(executor);
    free(sequence.record);
}

typedef struct slow_t {
    atomic_int finished;
    double seconds;
    atomic_int *gate; // when set, each task first waits (up to 30 s) for it to open
} slow_t;

static void slow_task(void *context, size_t task, size_t thread, size_t domain) {
    slow_t *slow = context;
    (void)task, (void)thread, (void)domain;
    if (slow->gate) {
        double const give_up = uform_now_seconds() + 30; // a hang detector, not a timing
        while (!atomic_load(slow->gate) && uform_now_seconds() < give_up) uform_sleep_seconds(0.001);
    }
    uform_sleep_seconds(slow->seconds);
    atomic_fetch_add(&slow->finished, 1);
}

static void test_drain_waits(uform_executor_t executor) {
    // The tasks wait for a gate opened after the check that the calls returned before their work: with
    // 10 ms tasks alone, a loaded CI machine that kept this thread off a core for 10 ms after the
    // fifth call saw every task finished.
    atomic_int gate = 0;
    slow_t slow = {.seconds = 0.01, .gate = &gate};
    uform_outcome_t outcomes[5];
    for (int index = 0; index < 5; ++index) {
        uform_call_t call = {.tasks = 1, .task = slow_task, .context = &slow};
        CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[index]), uform_status_ok_k);
    }
    CHECK(atomic_load(&slow.finished) == 0); // deferred: returned before the work
    atomic_store(&gate, 1);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(atomic_load(&slow.finished) == 5);
    for (int index = 0; index < 5; ++index) CHECK(__atomic_load_n(&outcomes[index].finished, __ATOMIC_ACQUIRE) == 1);
}

/** A drain on another thread returns only after a blocking call that started before it finished. */
typedef struct drain_race_t {
    uform_executor_t executor;
    slow_t slow;
    atomic_int started;
    int finished_seen_by_drain;
} drain_race_t;

static void started_then_slow(void *context, size_t task, size_t thread, size_t domain) {
    drain_race_t *race = context;
    atomic_store(&race->started, 1);
    slow_task(&race->slow, task, thread, domain);
}

static void *drain_thread(void *argument) {
    drain_race_t *race = argument;
    while (!atomic_load(&race->started)) sched_yield();
    CHECK_OK(uform_executor_drain(race->executor, uform_mood_parked_k));
    race->finished_seen_by_drain = atomic_load(&race->slow.finished);
    return NULL;
}

static void test_drain_waits_for_blocking(uform_executor_t executor) {
    drain_race_t race = {.executor = executor, .slow = {.seconds = 0.05}};
    pthread_t drainer;
    pthread_create(&drainer, NULL, drain_thread, &race);
    uform_call_t call = {.tasks = 1, .task = started_then_slow, .context = &race};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    pthread_join(drainer, NULL);
    CHECK(race.finished_seen_by_drain == 1);
}


/* ---- Moods ---- */

/** Waits until `executor` has `parked` parked workers, up to 30 s (a hang detector, not a timing:
 *  a woken or idle worker gets there in microseconds on any machine that runs at all). */
static bool await_parked(uform_executor_t executor, size_t parked) {
    double const give_up = uform_now_seconds() + 30;
    while (uform_host_parked_workers(executor) != parked)
        if (uform_now_seconds() > give_up) return false;
        else uform_sleep_seconds(0.001);
    return true;
}

/** What the moods promise, by what the workers do rather than by the CPU they burn (figures for
 *  that are bench_ram's "idle" lines): PARKED workers go to sleep once idle; SPINNING ones wake up
 *  and never sleep; back to PARKED, they sleep again. */
static void test_moods(size_t threads) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, threads, 0, &executor), uform_status_ok_k);
    uform_executor_description_t description;
    CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
    CHECK(description.mood == uform_mood_parked_k);

    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = storm_task, .context = &(storm_t) {0}};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(await_parked(executor, threads - 1));

    CHECK_STATUS(uform_executor_drain(executor, uform_mood_spinning_k), uform_status_ok_k);
    CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
    CHECK(description.mood == uform_mood_spinning_k);
    CHECK(await_parked(executor, 0));
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    uform_sleep_seconds(0.05); // far past the PARKED spin: a SPINNING worker still must not sleep
    CHECK(uform_host_parked_workers(executor) == 0);

    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(await_parked(executor, threads - 1));
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k); // parked workers wake
    CHECK(atomic_load(&((storm_t *)call.context)->work_done) == 3 * threads);
    uform_executor_free(executor);
}

/** The PARKED spin adapts: a sleep cut short by the next round within a millisecond makes the
 *  next spin four times longer, up to 32 times the first; a long sleep (an idle executor) restores
 *  the first; anything between keeps it. Back-to-back rounds on every core otherwise stayed in a
 *  regime where each round woke sleeping threads (host.c says why); bench_ram measures it. */
static void test_adaptive_spin(void) {
    CHECK(uform_adapt_spins(1024, 0.0001) == 4096);
    CHECK(uform_adapt_spins(4096, 0.0009) == 16384);
    CHECK(uform_adapt_spins(16384, 0.0001) == 32768);
    CHECK(uform_adapt_spins(32768, 0.0001) == 32768); // the ceiling
    CHECK(uform_adapt_spins(32768, 0.01) == 32768);   // neither short nor long: kept
    CHECK(uform_adapt_spins(32768, 0.05) == 1024);    // idle long enough: back to the first
    CHECK(uform_adapt_spins(4096, 3600.0) == 1024);
}

/** A drain into SPINNING meeting a worker between its decision to park and its sleep (held there
 *  by a test hook): the worker must not sleep through it. It slept on the round counter, which a
 *  drain does not change, until the next call; it now sleeps on a bell the drain rings. */
static atomic_int park_hook_armed, park_hook_inside, park_hook_release;

static void park_hook(void) {
    if (!atomic_exchange(&park_hook_armed, 0)) return;
    atomic_store(&park_hook_inside, 1);
    double const give_up = uform_now_seconds() + 30;
    while (!atomic_load(&park_hook_release) && uform_now_seconds() < give_up) sched_yield();
}

static void test_drain_wakes_parking_worker(void) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, 2, 0, &executor), uform_status_ok_k);
    atomic_store(&park_hook_inside, 0), atomic_store(&park_hook_release, 0);
    atomic_store(&uform_host_before_park, park_hook);
    atomic_store(&park_hook_armed, 1);
    storm_t storm = {0};
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = storm_task, .context = &storm};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    double const give_up = uform_now_seconds() + 30;
    while (!atomic_load(&park_hook_inside) && uform_now_seconds() < give_up) uform_sleep_seconds(0.001);
    CHECK(atomic_load(&park_hook_inside));
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_spinning_k), uform_status_ok_k);
    atomic_store(&park_hook_release, 1); // now the worker goes on to its sleep
    CHECK(await_parked(executor, 0));
    uform_sleep_seconds(0.05);
    CHECK(uform_host_parked_workers(executor) == 0);
    atomic_store(&uform_host_before_park, NULL);
    uform_executor_free(executor);
}


/* ---- Pinning ---- */

typedef struct pins_t {
    int cpus[256];
    int affinity_single[256];
} pins_t;

static void record_cpu(void *context, size_t task, size_t thread, size_t domain) {
    pins_t *pins = context;
    (void)task, (void)domain;
    cpu_set_t set;
    CPU_ZERO(&set);
    pthread_getaffinity_np(pthread_self(), sizeof(set), &set);
    pins->affinity_single[thread] = CPU_COUNT(&set) == 1;
    pins->cpus[thread] = sched_getcpu();
}

static void test_pinning(size_t threads) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, threads, 0, &executor), uform_status_ok_k);
    pins_t pins;
    memset(&pins, -1, sizeof(pins));
    // Deferred, so thread 0 is the executor's own pinned leader rather than this thread.
    uform_outcome_t outcome;
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = record_cpu, .context = &pins};
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof(allowed), &allowed);
    for (size_t thread = 0; thread < threads; ++thread) {
        int32_t core = -2, node = -2;
        CHECK_STATUS(uform_executor_thread_placement(executor, thread, &core, &node), uform_status_ok_k);
        CHECK(core >= 0 && CPU_ISSET((size_t)core, &allowed));
        CHECK(node >= 0);
        CHECK(pins.affinity_single[thread] == 1);
        CHECK(pins.cpus[thread] == core);
        for (size_t other = 0; other < thread; ++other) {
            int32_t other_core;
            CHECK_OK(uform_executor_thread_placement(executor, other, &other_core, NULL));
            CHECK(other_core != core);
        }
    }
    CHECK_STATUS(uform_executor_thread_placement(executor, threads, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("out of range");
    uform_executor_free(executor);
}


/* ---- Traps for embedders ---- */

typedef struct reentry_t {
    uform_executor_t executor;
    uform_status_t call_status;
    uform_status_t drain_status;
    char message[256];
} reentry_t;

static void reenter(void *context, size_t task, size_t thread, size_t domain) {
    reentry_t *reentry = context;
    (void)task, (void)domain;
    if (thread != 0) return;
    uform_call_t inner = {.tasks = 1, .task = visit, .context = NULL};
    reentry->call_status = uform_executor_call(reentry->executor, &inner, NULL);
    snprintf(reentry->message, sizeof(reentry->message), "%s", uform_error_message());
    reentry->drain_status = uform_executor_drain(reentry->executor, uform_mood_parked_k);
}

static void test_reentry(uform_executor_t executor) {
    reentry_t reentry = {.executor = executor};
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = reenter, .context = &reentry};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK(reentry.call_status == uform_status_contended_k);
    CHECK(reentry.drain_status == uform_status_contended_k);
    CHECK(strstr(reentry.message, "inside a callback") != NULL);
    // The deferred path: the callback runs on the leader, which is also inside the executor.
    reentry = (reentry_t) {.executor = executor};
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(reentry.call_status == uform_status_contended_k);
    CHECK(reentry.drain_status == uform_status_contended_k);
}

static void test_fork(void) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, &executor), uform_status_ok_k);
    uform_call_t call = {.schedule = uform_schedule_threads_k, .task = storm_task, .context = &(storm_t) {0}};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        // The child: every use is refused with FORKED, promptly, and free only releases memory.
        int failures = 0;
        failures += uform_executor_call(executor, &call, NULL) != uform_status_forked_k;
        failures += strstr(uform_error_message(), "fork") == NULL;
        uform_outcome_t outcome;
        failures += uform_executor_call(executor, &call, &outcome) != uform_status_forked_k;
        failures += uform_outcome_poll(&outcome) != uform_status_forked_k;
        failures += uform_executor_drain(executor, uform_mood_parked_k) != uform_status_forked_k;
        uform_executor_description_t description;
        failures += uform_executor_describe(executor, &description) != uform_status_forked_k;
        uform_executor_free(executor);
        // A fresh executor in the child works (ThreadSanitizer cannot follow threads spawned after a
        // multi-threaded fork, so that half runs only in the other builds).
#if !defined(__SANITIZE_THREAD__)
        uform_executor_t fresh;
        failures += uform_executor_for_ram(NULL, 1, 0, &fresh) != uform_status_ok_k;
        failures += uform_executor_call(fresh, &call, NULL) != uform_status_ok_k;
        uform_executor_free(fresh);
#endif
        _exit(failures);
    }
    int wait_status = 0;
    CHECK(waitpid(child, &wait_status, 0) == child);
    CHECK(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
    // The parent's executor is untouched.
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    uform_executor_free(executor);
}


/** Forks while other threads are inside every global lock's users (executors made and freed, pool
 *  gates taken): the child must be able to free and make executors and take pools, never hang.
 *  A pending outcome and the executor's placements are FORKED there. */
typedef struct churn_t {
    atomic_int stop;
    atomic_size_t loops;
} churn_t;

static void *churn_thread(void *argument) {
    churn_t *churn = argument;
    static int fake_pool;
    while (!atomic_load(&churn->stop)) {
        uform_executor_t executor;
        if (uform_executor_for_ram(NULL, 1, 2, &executor) == uform_status_ok_k) uform_executor_free(executor);
        if (uform_pool_lock(&fake_pool) == uform_status_ok_k) CHECK_OK(uform_pool_unlock(&fake_pool));
        atomic_fetch_add(&churn->loops, 1);
    }
    return NULL;
}

/** Waits for `child` up to 60 s, then kills it: a hung child is a failure, not a hung suite. */
static bool child_succeeded(pid_t child) {
    double const give_up = uform_now_seconds() + 60;
    int wait_status = 0;
    for (;;) {
        pid_t done = waitpid(child, &wait_status, WNOHANG);
        if (done == child) return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
        if (uform_now_seconds() > give_up) {
            fprintf(stderr, "fork: the child %d hung; killing it\n", (int)child);
            kill(child, SIGKILL);
            waitpid(child, &wait_status, 0);
            return false;
        }
        uform_sleep_seconds(0.002);
    }
}

__attribute__((unused)) static void test_fork_under_churn(void) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &executor), uform_status_ok_k);
    sequence_t sequence = {.record = calloc(4, sizeof(size_t))};
    sequenced_t held = {.sequence = &sequence, .id = 0, .hold = 1};
    uform_call_t call = {.tasks = 1, .task = record_sequence, .context = &held};
    uform_outcome_t pending;
    CHECK_STATUS(uform_executor_call(executor, &call, &pending), uform_status_ok_k); // held until released

    churn_t churn = {0};
    pthread_t churner;
    pthread_create(&churner, NULL, churn_thread, &churn);
    int forks = 0, hung_or_failed = 0;
    for (int fork_index = 0; fork_index < 40; ++fork_index) {
        size_t const loops = atomic_load(&churn.loops);
        while (atomic_load(&churn.loops) < loops + 3) sched_yield(); // the churn is running
        fflush(NULL);
        pid_t child = fork();
        if (child == 0) {
            int failures = 0;
            static int fake_pool;
            failures += uform_pool_lock(&fake_pool) != uform_status_ok_k;
            failures += uform_pool_unlock(&fake_pool) != uform_status_ok_k;
            // The outcome pending at the fork never finishes here: FORKED, at once, even waiting forever.
            failures += uform_outcome_wait(&pending, -1) != uform_status_forked_k;
            failures += strstr(uform_error_message(), "forked") == NULL;
            failures += uform_outcome_poll(&pending) != uform_status_forked_k;
            int32_t core = -7;
            failures += uform_executor_thread_placement(executor, 0, &core, NULL) != uform_status_forked_k;
            failures += core != -7;
            uform_executor_free(executor);
#if !defined(__SANITIZE_THREAD__)
            uform_executor_t fresh;
            failures += uform_executor_for_ram(NULL, 1, 0, &fresh) != uform_status_ok_k;
            uform_executor_free(fresh);
#endif
            _exit(failures);
        }
        ++forks;
        hung_or_failed += !child_succeeded(child);
    }
    atomic_store(&churn.stop, 1);
    pthread_join(churner, NULL);
    CHECK(forks == 40);
    CHECK(hung_or_failed == 0);
    // In the parent the call was untouched: still pending, then it runs.
    CHECK_STATUS(uform_outcome_poll(&pending), uform_status_pending_k);
    atomic_store(&sequence.release, 1);
    CHECK_STATUS(uform_outcome_wait(&pending, -1), uform_status_ok_k);
    uform_executor_free(executor);
    free(sequence.record);
}

/** Timeouts of every kind on a pending outcome: huge and infinite ones wait (parked) until the call
 *  finishes, zero of either sign and tiny ones return PENDING at once, NaN is INVALID_ARGUMENT. The
 *  conversion of a huge timeout used to overflow (undefined; UBSan fails the test on it). */
typedef struct release_later_t {
    sequence_t *sequence;
    double seconds;
} release_later_t;

static void *release_later(void *argument) {
    release_later_t *later = argument;
    uform_sleep_seconds(later->seconds);
    atomic_store(&later->sequence->release, 1);
    return NULL;
}

static void test_outcome_timeouts(void) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &executor), uform_status_ok_k);
    double const forever[] = {1e30, (double)INFINITY, 9.3e18, DBL_MAX, -1.0, -(double)INFINITY, -1e30};
    for (size_t index = 0; index < sizeof(forever) / sizeof(forever[0]); ++index) {
        sequence_t sequence = {.record = calloc(2, sizeof(size_t))};
        sequenced_t held = {.sequence = &sequence, .hold = 1};
        uform_call_t call = {.tasks = 1, .task = record_sequence, .context = &held};
        uform_outcome_t outcome;
        CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
        // Still pending at once: none of these is a poll.
        CHECK_STATUS(uform_outcome_wait(&outcome, 0.0), uform_status_pending_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, -0.0), uform_status_pending_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, 1e-9), uform_status_pending_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, (double)NAN), uform_status_invalid_argument_k);
        CHECK_MESSAGE("NaN");
        release_later_t later = {.sequence = &sequence, .seconds = 0.02};
        pthread_t releaser;
        pthread_create(&releaser, NULL, release_later, &later);
        CHECK_STATUS(uform_outcome_wait(&outcome, forever[index]), uform_status_ok_k);
        CHECK(atomic_load(&sequence.next) == 1);
        pthread_join(releaser, NULL);
        free(sequence.record);
    }
    uform_executor_free(executor);
}


/* ---- Bad input ---- */

static void test_bad_input(void) {
    uform_executor_t executor = (uform_executor_t)(uintptr_t)0x1; // must stay untouched on failure
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("executor is NULL");

    int32_t unknown_node[] = {9999};
    uform_ram_options_t unknown = {.memory_domains = unknown_node, .memory_domains_count = 1};
    CHECK_STATUS(uform_executor_for_ram(&unknown, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("9999");
    int32_t negative_node[] = {-1};
    uform_ram_options_t negative = {.memory_domains = negative_node, .memory_domains_count = 1};
    CHECK_STATUS(uform_executor_for_ram(&negative, 0, 0, &executor), uform_status_invalid_argument_k);
    uform_ram_options_t null_with_count = {.memory_domains = NULL, .memory_domains_count = 2};
    CHECK_STATUS(uform_executor_for_ram(&null_with_count, 0, 0, &executor), uform_status_invalid_argument_k);
    int32_t duplicate_nodes[] = {0, 0};
    uform_ram_options_t duplicate = {.memory_domains = duplicate_nodes, .memory_domains_count = 2};
    CHECK_STATUS(uform_executor_for_ram(&duplicate, 0, 0, &executor), uform_status_invalid_argument_k);

    uform_ram_options_t above = {.cpu_class = uform_cpu_class_wasm64_extended_k};
    CHECK_STATUS(uform_executor_for_ram(&above, 0, 0, &executor), uform_status_unsupported_k);
    uform_ram_options_t out_of_range = {.cpu_class = (uform_cpu_class_t)99};
    CHECK_STATUS(uform_executor_for_ram(&out_of_range, 0, 0, &executor), uform_status_invalid_argument_k);

    size_t cores = allowed_cores();
    CHECK_STATUS(uform_executor_for_ram(NULL, cores + 1, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("oversubscribes");
    char carry[64];
    snprintf(carry, sizeof(carry), "carry only %zu cores", cores);
    CHECK_MESSAGE(carry);
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, (size_t)1 << 40, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("deferred_limit");
    CHECK(executor == (uform_executor_t)(uintptr_t)0x1);

    CHECK_STATUS(uform_executor_on_pool(NULL, NULL, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("fu_pool is NULL");
    CHECK_STATUS(uform_executor_on_pool((void *)&executor, NULL, 0, NULL), uform_status_invalid_argument_k);

    // Calls: NULL call, enums out of range, no callback, device parts where there are no devices.
    CHECK_STATUS(uform_executor_call(NULL, NULL, NULL), uform_status_invalid_argument_k);
    uform_call_t no_callback = {.tasks = 1};
    CHECK_STATUS(uform_executor_call(NULL, &no_callback, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("neither");
    uform_call_t bad_schedule = {.schedule = (uform_schedule_t)7, .task = visit};
    CHECK_STATUS(uform_executor_call(NULL, &bad_schedule, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("schedule 7");
    uform_call_t bad_residency = {.residency = (uform_residency_t)-1, .task = visit};
    CHECK_STATUS(uform_executor_call(NULL, &bad_residency, NULL), uform_status_invalid_argument_k);
    uform_call_t device_call = {.device = (uform_device_callback_t)(uintptr_t)visit};
    CHECK_STATUS(uform_executor_call(NULL, &device_call, NULL), uform_status_unsupported_k);

    uform_executor_t ram;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram), uform_status_ok_k);
    CHECK_STATUS(uform_executor_call(ram, &device_call, NULL), uform_status_residency_mismatch_k);
    uform_call_t vram_call = {.residency = uform_residency_vram_k, .tasks = 1, .task = visit};
    CHECK_STATUS(uform_executor_call(ram, &vram_call, NULL), uform_status_residency_mismatch_k);
    CHECK_MESSAGE("VRAM-resident");
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(ram, &vram_call, &outcome), uform_status_residency_mismatch_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_residency_mismatch_k);
    CHECK_STATUS(uform_executor_drain(ram, (uform_mood_t)5), uform_status_invalid_argument_k);
    CHECK_MESSAGE("mood 5");
    CHECK_STATUS(uform_executor_describe(ram, NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_outcome_poll(NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_executor_thread_placement(NULL, 0, NULL, NULL), uform_status_unsupported_k);
    uform_executor_free(ram);  // from here `ram` is gone: passing it anywhere is undefined
    uform_executor_free(NULL); // a no-op
}

static void *noop_thread(void *argument) { return argument; }

static void test_refused_pin(void) {
    // The same path every executor thread starts through: a core the OS refuses is SYSTEM_ERROR
    // naming the core, never a silently unpinned thread. A core past every configured CPU is one
    // the kernel refuses whatever the cpuset; a core past CPU_SETSIZE is refused before asking.
    int32_t const missing = (int32_t)sysconf(_SC_NPROCESSORS_CONF);
    pthread_t handle;
    CHECK_STATUS(uform_start_pinned_thread(&handle, missing, noop_thread, NULL), uform_status_system_error_k);
    char expected[64];
    snprintf(expected, sizeof(expected), "core %d", missing);
    CHECK_MESSAGE(expected);
    CHECK_STATUS(uform_start_pinned_thread(&handle, 1 << 20, noop_thread, NULL), uform_status_system_error_k);
    CHECK_MESSAGE("refused");
    // An allowed core starts fine.
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof(allowed), &allowed);
    int32_t inside = -1;
    for (int32_t core = 0; core < 1024 && inside < 0; ++core)
        if (CPU_ISSET((size_t)core, &allowed)) inside = core;
    CHECK_STATUS(uform_start_pinned_thread(&handle, inside, noop_thread, NULL), uform_status_ok_k);
    pthread_join(handle, NULL);
}

/* ---- NULL executor ---- */

typedef struct inline_probe_t {
    pthread_t caller;
    int on_caller;
    size_t calls;
} inline_probe_t;

static void inline_probe(void *context, size_t task, size_t thread, size_t domain) {
    inline_probe_t *probe = context;
    probe->on_caller += pthread_equal(pthread_self(), probe->caller) != 0;
    probe->calls += task == probe->calls && thread == 0 && domain == 0;
}

static void test_null_executor(void) {
    inline_probe_t probe = {.caller = pthread_self()};
    uform_call_t call = {.residency = uform_residency_vram_k, .tasks = 100, .task = inline_probe, .context = &probe};
    CHECK_STATUS(uform_executor_call(NULL, &call, NULL), uform_status_ok_k); // accepts every residency
    CHECK(probe.on_caller == 100 && probe.calls == 100);
    uform_outcome_t outcome;
    call.residency = uform_residency_ram_k;
    CHECK_STATUS(uform_executor_call(NULL, &call, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_ok_k); // finished before returning
    CHECK(probe.on_caller == 200);
    CHECK_STATUS(uform_executor_drain(NULL, uform_mood_spinning_k), uform_status_ok_k);
    uform_executor_description_t description;
    CHECK_STATUS(uform_executor_describe(NULL, &description), uform_status_ok_k);
    CHECK(description.kind == uform_executor_kind_inline_k && description.threads_count == 1);
}


/** Executors made and freed back to back, idle or with a deferred call in flight: a wake-up lost
 *  between a thread's last look and its sleep would hang a free here. */
static void test_lifecycle_storm(size_t threads) {
    storm_t storm = {0};
    size_t completed = 0;
    for (int round = 0; round < 400; ++round) {
        uform_executor_t executor;
        CHECK_STATUS(uform_executor_for_ram(NULL, 1 + (size_t)round % threads, 4, &executor), uform_status_ok_k);
        uform_outcome_t outcome;
        uform_call_t call = {.schedule = uform_schedule_threads_k, .task = storm_task, .context = &storm};
        if (round % 3 == 1) CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
        if (round % 3 == 2) CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
        if (round % 5 == 0) CHECK_STATUS(uform_executor_drain(executor, uform_mood_spinning_k), uform_status_ok_k);
        uform_executor_free(executor);
        if (round % 3 == 1) completed += uform_outcome_poll(&outcome) == uform_status_ok_k; // free drained it
    }
    CHECK(completed == 133);
}

/** What `poll_look` returns: PENDING `pending` times, then `final`; counts its calls. */
typedef struct poll_probe_t {
    unsigned pending, calls;
    uform_status_t final;
} poll_probe_t;

static uform_status_t poll_look(void *context, bool *progress) {
    (void)progress;
    poll_probe_t *probe = context;
    ++probe->calls;
    if (probe->pending) {
        --probe->pending;
        return uform_status_pending_k;
    }
    return probe->final == uform_status_ok_k ? uform_status_ok_k : uform_fail(probe->final, "poll probe failed");
}

/** completion.c's poll-with-deadline wait: the look's own status once it is not PENDING, after as
 *  many looks as it took; PENDING with no message once the deadline passed (a look comes first). */
static void test_poll_until(void) {
    uform_poll_backoff_t const backoff = {.spin_seconds = 1e-4, .nap_min = 1e-5, .nap_max = 1e-3, .growth = 2};
    poll_probe_t probe = {.pending = 50, .final = uform_status_ok_k};
    CHECK_STATUS(uform_poll_until(poll_look, &probe, -1, &backoff), uform_status_ok_k);
    CHECK(probe.calls == 51);
    probe = (poll_probe_t) {.pending = 3, .final = uform_status_peer_lost_k};
    CHECK_STATUS(uform_poll_until(poll_look, &probe, 60, &backoff), uform_status_peer_lost_k);
    CHECK_MESSAGE("poll probe failed");
    CHECK(probe.calls == 4);
    uform_clear_error();
    probe = (poll_probe_t) {.pending = UINT32_MAX, .final = uform_status_ok_k};
    CHECK_STATUS(uform_poll_until(poll_look, &probe, 0.02, &backoff), uform_status_pending_k);
    CHECK(probe.calls >= 1);
    CHECK(uform_error_message()[0] == '\0');
    probe = (poll_probe_t) {.pending = UINT32_MAX, .final = uform_status_ok_k};
    CHECK_STATUS(uform_poll_until(poll_look, &probe, 0, &backoff), uform_status_pending_k);
    CHECK(probe.calls == 1); // a zero timeout looks once
}

int main(void) {
    size_t cores = allowed_cores();
    size_t threads = cores < 4 ? cores : 4;
    printf("allowed cores: %zu, testing with up to %zu threads\n", cores, threads);

    test_null_executor();
    test_bad_input();
    test_refused_pin();
    test_poll_until();

    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, 0, 0, &executor), uform_status_ok_k);
    uform_executor_description_t description;
    CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
    CHECK(description.kind == uform_executor_kind_ram_k);
    CHECK(description.threads_count == uform_default_threads(cores)); // the 7/8 rule
    CHECK(description.deferred_limit == UFORM_DEFERRED_LIMIT_DEFAULT);
    uform_cpu_class_t detected;
    CHECK_OK(uform_cpu_detect(&detected, NULL));
    CHECK(description.cpu_class == detected);
    uform_executor_free(executor);

    // Every way a round can wake and join its workers (host.c picks by worker count), each run on
    // whatever cores this machine has by moving the limits (test_forkjoin runs more threads).
    static struct { size_t shared, slots; char const *name; } const modes[] = {
        {UFORM_HOST_SHARED_WORKERS_DEFAULT, UFORM_HOST_SLOT_WORKERS_DEFAULT, "default"},
        {64, 64, "shared"}, {0, 64, "slots"}, {0, 0, "lines"}};
    for (size_t mode = 0; mode < sizeof(modes) / sizeof(modes[0]); ++mode) {
        uform_host_join_limits(modes[mode].shared, modes[mode].slots);
        printf("join mode: %s\n", modes[mode].name);
        for (size_t count = 1; count <= threads; ++count) {
            CHECK_STATUS(uform_executor_for_ram(NULL, count, 0, &executor), uform_status_ok_k);
            test_schedules(executor, count);
            test_submission_order(executor);
            test_drain_waits(executor);
            test_drain_waits_for_blocking(executor);
            test_reentry(executor);
            CHECK_STATUS(uform_executor_drain(executor, uform_mood_spinning_k), uform_status_ok_k);
            test_schedules(executor, count);
            test_submission_order(executor);
            uform_executor_free(executor);
            test_pinning(count);
        }
        test_lifecycle_storm(threads);
        test_contention_storm(threads);
        test_moods(threads);
    }
    uform_host_join_limits(UFORM_HOST_SHARED_WORKERS_DEFAULT, UFORM_HOST_SLOT_WORKERS_DEFAULT);
    test_deferred_limit();
    test_fork();
#if defined(__SANITIZE_ADDRESS__)
    // GCC 12's AddressSanitizer allocator takes no lock around fork(): a child can hang in its
    // malloc when another thread was allocating at the fork, whatever the engine does (seen here).
    printf("fork under churn: not run under AddressSanitizer (its allocator is not fork-safe); the "
           "plain and ThreadSanitizer builds run it\n");
#else
    test_fork_under_churn();
#endif
    test_outcome_timeouts();
    test_adaptive_spin();
    if (cores >= 2) test_drain_wakes_parking_worker();
    else printf("the drain's wake-up test needs two cores, this process has one\n");
    CHECK_DONE();
}
