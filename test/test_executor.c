/**
 *  @file   test_executor.c
 *  @brief  RAM executors' calls: schedules, contention, ordering, deferred limits, drain, moods,
 *          pinning and re-entry, in every join mode at every thread count. Misuse (bad input, the
 *          NULL executor, forks, outcome timeouts) and the poll-with-deadline wait:
 *          test_executor_misuse.c.
 */
#include "executor_harness.h"

/* ---- Schedules ---- */

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

    /* The spread over domains: in proportion to their cores, the running total rounded to nearest with
     * halves to the earlier domain, each domain's threads contiguous; a thread's node is its core's,
     * per sysfs (node<N>/cpu<C>). Only a machine of several nodes tells much: test/numa's guest. */
    uform_memory_domain_t domains[64];
    size_t domains_count = 0, total = 0;
    CHECK_OK(uform_memory_domains(domains, 64, &domains_count));
    if (domains_count > 64) domains_count = 64;
    for (size_t d = 0; d < domains_count; ++d) total += domains[d].cores_count;
    size_t assigned = 0, cumulative = 0;
    for (size_t d = 0; d < domains_count && total; ++d) {
        cumulative += domains[d].cores_count;
        size_t share = d + 1 == domains_count ? threads - assigned : (threads * cumulative + total / 2) / total - assigned;
        if (share > domains[d].cores_count) share = domains[d].cores_count;
        for (size_t i = 0; i < share && assigned < threads; ++i, ++assigned) {
            int32_t core = -1, node = -1;
            CHECK_OK(uform_executor_thread_placement(executor, assigned, &core, &node));
            CHECK(node == domains[d].node);
            char path[96];
            snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpu%d", (int)node, (int)core);
            if (access("/sys/devices/system/node", F_OK) == 0) CHECK(access(path, F_OK) == 0);
        }
    }
    CHECK(assigned == threads);
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

/* A callback waiting on its executor's own pending calls: its own call's outcome and one queued
 * behind it, neither of which can finish before it returns. CONTENDED at once, whatever the
 * timeout; a poll still says PENDING; both finish once the callback returns. */
typedef struct self_wait_t {
    uform_outcome_t first, second;
    atomic_int second_queued, second_ran;
    uform_status_t own_forever, own_timed, later_forever, later_timed, later_poll;
    char message[256];
} self_wait_t;

static void wait_on_self(void *context, size_t task, size_t thread, size_t domain) {
    self_wait_t *wait = context;
    (void)task, (void)domain;
    if (thread != 0) return;
    while (!atomic_load(&wait->second_queued)) sched_yield();
    wait->own_forever = uform_outcome_wait(&wait->first, -1);
    wait->own_timed = uform_outcome_wait(&wait->first, 0.01);
    wait->later_forever = uform_outcome_wait(&wait->second, -1);
    snprintf(wait->message, sizeof(wait->message), "%s", uform_error_message());
    wait->later_timed = uform_outcome_wait(&wait->second, 5.0);
    wait->later_poll = uform_outcome_poll(&wait->second);
}

static void count_later(void *context, size_t task, size_t thread, size_t domain) {
    (void)task, (void)thread, (void)domain;
    atomic_fetch_add(&((self_wait_t *)context)->second_ran, 1);
}

static void test_wait_on_self(uform_executor_t executor) {
    static self_wait_t wait;
    memset(&wait, 0, sizeof wait);
    uform_call_t waiting = {.schedule = uform_schedule_threads_k, .task = wait_on_self, .context = &wait};
    uform_call_t later = {.tasks = 1, .task = count_later, .context = &wait};
    CHECK_STATUS(uform_executor_call(executor, &waiting, &wait.first), uform_status_ok_k);
    CHECK_STATUS(uform_executor_call(executor, &later, &wait.second), uform_status_ok_k);
    atomic_store(&wait.second_queued, 1);
    CHECK_STATUS(uform_outcome_wait(&wait.first, -1), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&wait.second, -1), uform_status_ok_k);
    CHECK(wait.own_forever == uform_status_contended_k && wait.own_timed == uform_status_contended_k);
    CHECK(wait.later_forever == uform_status_contended_k && wait.later_timed == uform_status_contended_k);
    CHECK(wait.later_poll == uform_status_pending_k && atomic_load(&wait.second_ran) == 1);
    CHECK(strstr(wait.message, "uform_outcome_wait: called from inside a callback of the executor that runs this call") != NULL);
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

int main(void) {
    size_t cores = allowed_cores();
    size_t threads = cores < 4 ? cores : 4;
    printf("allowed cores: %zu, testing with up to %zu threads\n", cores, threads);

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
            test_wait_on_self(executor);
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
    test_adaptive_spin();
    if (cores >= 2) test_drain_wakes_parking_worker();
    else printf("the drain's wake-up test needs two cores, this process has one\n");
    CHECK_DONE();
}
