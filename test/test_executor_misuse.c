/**
 *  @file   test_executor_misuse.c
 *  @brief  What embedders get wrong, and the waits' edges: forks (also under churn), outcome
 *          timeouts of every kind, every bad input of the executor ABI, refused pins, the NULL
 *          (inline) executor, and completion.c's poll-with-deadline wait.
 */
#include "executor_harness.h"

/* ---- Forks ---- */

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
        size_t scratch = 0;
        failures += uform_executor_scratch_bytes(executor, 0, &scratch) != uform_status_forked_k;
        failures += strstr(uform_error_message(), "uform_executor_scratch_bytes") == NULL;
        failures += uform_executor_scratch_release(executor) != uform_status_forked_k;
        failures += strstr(uform_error_message(), "uform_executor_scratch_release") == NULL;
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
    CHECK_MESSAGE("uform_outcome_poll: outcome is NULL");
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
    test_null_executor();
    test_bad_input();
    test_refused_pin();
    test_poll_until();
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
    CHECK_DONE();
}
