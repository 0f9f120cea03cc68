/**
 *  @file   test_forkjoin.c
 *  @brief  Fork-join rounds of RAM executors of 2 to 9 threads under every join (src/host.c's
 *          `host_join_t`: shared, slots, lines) on any machine: a test-only switch lets threads past
 *          the allowed cores run unpinned, so a 2-core machine races 8 threads. Thousands of rounds
 *          per executor, the call changing every round (task, context, schedule, task count), every
 *          task's run checked; deferred rounds (the leader as thread 0) between blocking ones; both
 *          moods; stopping right after construction; a fork; and which join each size gets.
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"

#include <sched.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TASKS 64
#define MAX_THREADS 9

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ROUNDS 500
#else
#define ROUNDS 1500
#endif

static size_t allowed_cores(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof(set), &set);
    return (size_t)CPU_COUNT(&set);
}

/** One call's record: which tasks ran, on which threads, with which round's context. */
typedef struct record_t {
    unsigned round;
    size_t threads;
    atomic_uint hits[MAX_TASKS];
    atomic_ullong sum;  // sum over runs of round * 1000 + task
    atomic_uint bad;    // a thread index out of range, or THREADS with task != thread
} record_t;

static void record_reset(record_t *record, unsigned round, size_t threads) {
    record->round = round;
    record->threads = threads;
    for (size_t task = 0; task < MAX_TASKS; ++task) atomic_init(&record->hits[task], 0u);
    atomic_init(&record->sum, 0ull);
    atomic_init(&record->bad, 0u);
}

static void run_indexed(void *context, size_t task, size_t thread, size_t domain) {
    (void)domain;
    record_t *record = context;
    if (thread >= record->threads || task >= MAX_TASKS) {
        atomic_fetch_add(&record->bad, 1u);
        return;
    }
    atomic_fetch_add(&record->hits[task], 1u);
    atomic_fetch_add(&record->sum, (unsigned long long)record->round * 1000ull + task);
}

static void run_per_thread(void *context, size_t task, size_t thread, size_t domain) {
    (void)domain;
    record_t *record = context;
    if (task != thread) atomic_fetch_add(&record->bad, 1u);
    run_indexed(context, task, thread, domain);
}

/** The call of round `round`: the schedule, task count, callback and context all change from one
 *  round to the next, so a worker that ran a stale copy of the call shows in the record. */
static uform_call_t round_call(unsigned round, record_t *record) {
    uform_schedule_t const schedule = (uform_schedule_t)(round % 3);
    size_t const tasks = (round * 7u) % (MAX_TASKS + 1);
    return (uform_call_t) {.schedule = schedule,
                           .tasks = tasks,
                           .task = schedule == uform_schedule_threads_k ? run_per_thread : run_indexed,
                           .context = record};
}

/** Checks a finished call's record: every task exactly once, the right sum, nothing out of range. */
static bool record_ok(record_t *record, uform_call_t const *call) {
    size_t const tasks = call->schedule == uform_schedule_threads_k ? record->threads : call->tasks;
    unsigned long long expected = 0;
    bool ok = atomic_load(&record->bad) == 0;
    for (size_t task = 0; task < MAX_TASKS; ++task) {
        unsigned const hits = atomic_load(&record->hits[task]);
        ok = ok && hits == (task < tasks ? 1u : 0u);
        if (task < tasks) expected += (unsigned long long)record->round * 1000ull + task;
    }
    return ok && atomic_load(&record->sum) == expected;
}

/** `rounds` rounds, mostly blocking, every 50th preceded by three deferred ones, each checked. */
static void race_rounds(uform_executor_t executor, size_t threads, unsigned rounds, unsigned first) {
    static record_t records[5]; // two for blocking rounds, alternating; three for deferred ones
    size_t wrong = 0;
    for (unsigned round = first; round < first + rounds; ++round) {
        if (round % 50 == 0) {
            uform_outcome_t outcomes[3];
            uform_call_t calls[3];
            for (size_t i = 0; i < 3; ++i) {
                record_reset(&records[2 + i], round + (unsigned)i, threads);
                calls[i] = round_call(round + (unsigned)i, &records[2 + i]);
                CHECK_STATUS(uform_executor_call(executor, &calls[i], &outcomes[i]), uform_status_ok_k);
            }
            // A blocking call waits for the deferred ones before it.
            record_t *record = &records[round & 1];
            record_reset(record, round, threads);
            uform_call_t call = round_call(round, record);
            CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
            for (size_t i = 0; i < 3; ++i) {
                CHECK(uform_outcome_poll(&outcomes[i]) == uform_status_ok_k);
                wrong += !record_ok(&records[2 + i], &calls[i]);
            }
            wrong += !record_ok(record, &call);
            continue;
        }
        record_t *record = &records[round & 1];
        record_reset(record, round, threads);
        uform_call_t call = round_call(round, record);
        CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
        wrong += !record_ok(record, &call);
    }
    if (wrong) fprintf(stderr, "%zu threads: %zu of %u rounds ran wrong\n", threads, wrong, rounds);
    CHECK(wrong == 0);
}

static void test_join(char const *join, size_t threads) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, threads, 0, &executor), uform_status_ok_k);
    char const *name = uform_host_join_name(executor);
    CHECK(name && !strcmp(name, join));
    // Threads past the allowed cores run unpinned; those within are pinned.
    size_t const cores = allowed_cores();
    for (size_t thread = 0; thread < threads; ++thread) {
        int32_t core = -2, node = -2;
        CHECK_STATUS(uform_executor_thread_placement(executor, thread, &core, &node), uform_status_ok_k);
        CHECK(thread < cores ? core >= 0 : core == -1);
    }
    race_rounds(executor, threads, ROUNDS, 0);
    // SPINNING workers never yield their cores, so where threads outnumber cores each round waits
    // for the scheduler to rotate them: a few rounds only.
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_spinning_k), uform_status_ok_k);
    race_rounds(executor, threads, threads > cores ? 20 : 500, 1);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    race_rounds(executor, threads, 200, 7);
    uform_executor_free(executor);
}

/** Stopping an executor whose workers may not have reached their first wait yet, or just ran a
 *  round: every worker must see the stop, whichever word it waits on. */
static void test_stop_storm(size_t threads) {
    static record_t record;
    for (unsigned iteration = 0; iteration < 40; ++iteration) {
        uform_executor_t executor;
        CHECK_STATUS(uform_executor_for_ram(NULL, threads, 0, &executor), uform_status_ok_k);
        for (unsigned round = 0; round < iteration % 3; ++round) {
            record_reset(&record, round, threads);
            uform_call_t call = round_call(2, &record); // THREADS: every worker runs
            CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
            CHECK(record_ok(&record, &call));
        }
        uform_executor_free(executor);
    }
}

/** A forked child finds the executor FORKED and frees it without waiting for threads it does not
 *  have; the parent's executor keeps running rounds. */
static void test_fork(size_t threads) {
    uform_executor_t executor;
    CHECK_STATUS(uform_executor_for_ram(NULL, threads, 0, &executor), uform_status_ok_k);
    race_rounds(executor, threads, 100, 0);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        static record_t record;
        record_reset(&record, 2, threads);
        uform_call_t call = round_call(2, &record);
        int failures = uform_executor_call(executor, &call, NULL) != uform_status_forked_k;
        failures += atomic_load(&record.hits[0]) != 0; // nothing ran
        uform_executor_free(executor);
        _exit(failures);
    }
    int wait_status = 0;
    CHECK(waitpid(child, &wait_status, 0) == child);
    CHECK(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
    race_rounds(executor, threads, 100, 100);
    uform_executor_free(executor);
}

int main(void) {
    size_t const cores = allowed_cores();
    printf("allowed cores: %zu; executors of up to %d threads\n", cores, MAX_THREADS);

    // Without the switch, more threads than cores is refused, as the header promises.
    uform_executor_t refused = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, cores + 1, 0, &refused), uform_status_invalid_argument_k);
    CHECK_MESSAGE("oversubscribes");
    CHECK(refused == NULL);
    uform_host_allow_oversubscription(true);

    // The default: SHARED for 2 threads, SLOTS for 3 to 8, LINES above.
    static size_t const default_counts[] = {1, 2, 3, 4, 8, 9};
    static char const *const default_joins[] = {"shared", "shared", "slots", "slots", "slots", "lines"};
    for (size_t i = 0; i < sizeof(default_counts) / sizeof(default_counts[0]); ++i) {
        uform_executor_t executor;
        CHECK_STATUS(uform_executor_for_ram(NULL, default_counts[i], 0, &executor), uform_status_ok_k);
        char const *name = uform_host_join_name(executor);
        CHECK(name && !strcmp(name, default_joins[i]));
        uform_executor_free(executor);
    }
    CHECK(uform_host_join_name(NULL) == NULL);

    // Every join at every size, whatever the default picks.
    // Every join at several sizes, whatever the default picks: the slots (the default from 3 to 8
    // threads) at each odd and even size, the others at the sizes where they meet it.
    static struct { size_t shared, slots; char const *name; size_t counts[5]; } const joins[] = {
        {64, 64, "shared", {2, 3, 8}}, {0, 64, "slots", {2, 3, 5, 7, 8}}, {0, 0, "lines", {2, 3, 8}}};
    for (size_t j = 0; j < sizeof(joins) / sizeof(joins[0]); ++j) {
        uform_host_join_limits(joins[j].shared, joins[j].slots);
        for (size_t i = 0; i < 5 && joins[j].counts[i]; ++i) {
            printf("join %s, %zu threads\n", joins[j].name, joins[j].counts[i]);
            fflush(stdout);
            test_join(joins[j].name, joins[j].counts[i]);
        }
        test_stop_storm(5);
    }
    uform_host_join_limits(UFORM_HOST_SHARED_WORKERS_DEFAULT, UFORM_HOST_SLOT_WORKERS_DEFAULT);
    test_join("lines", MAX_THREADS);
    test_fork(5); // slots

    uform_host_allow_oversubscription(false);
    CHECK_STATUS(uform_executor_for_ram(NULL, cores + 1, 0, &refused), uform_status_invalid_argument_k);
    CHECK_MESSAGE("oversubscribes");
    CHECK_DONE();
}
