/**
 *  @file   test_vram_calls.c
 *  @brief  VRAM executors' calls with a GPU: deferred calls overlapping, CONTENDED, submission
 *          order, DEFERRED_FULL and the ring's progress, scratch growth, limits and release,
 *          callback failures, the watchdog seam, and the settle a verb attaches to a deferred call
 *          (`uform_vram_call_settling`: once, in order, before the outcome reads finished, its word
 *          final, never for a refused call, from many threads polling at once, and when the
 *          executor is freed). Without a GPU it skips (test_vram.c checks the arguments and the
 *          no-driver paths).
 *
 *  Environment: UFORM_TEST_UNDER_SANITIZER=1 skips an impossible allocation, which
 *  compute-sanitizer would count as an error.
 */
#include "vram_harness.h"

#if UFORM_WITH_CUDA

/* ---- Deferred calls ---- */

static void test_deferred_overlap(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    CHECK(fill_and_check(executor, 1.0f, 16) == 0); // loads the kernels first
    // A 2 s kernel: the checks below that it is still pending hold even when a loaded CI machine
    // (sanitizers, load average 10) keeps this thread off a core for a while; with 50 ms, a thread
    // held off for 40 ms saw the kernel finished.
    plan_t plan = {.kernel = uform_kernel_sleep_k, .value = 2e9};
    uform_call_t call = device_call(&plan, 0);
    uform_outcome_t outcome;
    double const start = uform_now_seconds();
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
    double const submitted = uform_now_seconds();
    // Returned before the 2 s kernel ended: its outcome is still pending (how long the submission
    // took is the launch benchmark's business, never a test's).
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_pending_k);
    uform_sleep_seconds(0.010); // host work overlapping the device's
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_pending_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, 0.001), uform_status_pending_k);
    CHECK(!outcome.finished);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    double const finished = uform_now_seconds();
    CHECK(outcome.finished && outcome.status == uform_status_ok_k && outcome.message[0] == '\0');
    CHECK(finished - start >= 1.95); // a lower bound: the wait waited for the kernel, whatever the load
    printf("deferred 2 s sleep: submit took %.1f us, the outcome finished after %.1f ms\n",
           (submitted - start) * 1e6, (finished - start) * 1e3);
    // Polling a finished outcome keeps answering its status.
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_ok_k);
    plan.value = 50e6;

    // A drain finishes what is outstanding.
    uform_outcome_t outcomes[3];
    for (size_t index = 0; index < 3; ++index)
        CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[index]), uform_status_ok_k);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    for (size_t index = 0; index < 3; ++index) CHECK(outcomes[index].finished && outcomes[index].status == uform_status_ok_k);
    uform_executor_free(executor);
}

typedef struct contention_t {
    uform_executor_t executor;
    atomic_int phase;
    uform_status_t call, release;
    double attempted_at;
} contention_t;

/** Holds the blocking call (inside its callback) until the contender has tried: a 200 ms kernel
 *  alone let a contender that a loaded machine kept off a core for 200 ms find the executor free. */
static uform_status_t slow_callback(void *context, uform_device_slot_t const *slot) {
    contention_t *contention = context;
    uform_status_t status = uform_device_launch(slot, uform_kernel_sleep_k, 0, 0, 200e6);
    atomic_store(&contention->phase, 1);
    double const give_up = uform_now_seconds() + 30; // a hang detector, not a timing
    while (atomic_load(&contention->phase) != 2 && uform_now_seconds() < give_up) uform_sleep_seconds(0.001);
    return status;
}

static void *contender(void *argument) {
    contention_t *contention = argument;
    while (atomic_load(&contention->phase) == 0) sched_yield();
    plan_t plan = {.kernel = uform_kernel_empty_k};
    uform_call_t call = device_call(&plan, 0);
    contention->call = uform_executor_call(contention->executor, &call, NULL);
    contention->release = uform_executor_scratch_release(contention->executor);
    contention->attempted_at = uform_now_seconds();
    atomic_store(&contention->phase, 2);
    return NULL;
}

static void test_contended(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    contention_t contention = {.executor = executor};
    pthread_t thread;
    CHECK_FATAL(pthread_create(&thread, NULL, contender, &contention) == 0);
    uform_call_t call = {.device = slow_callback, .context = &contention};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    double const returned = uform_now_seconds();
    pthread_join(thread, NULL);
    CHECK(contention.call == uform_status_contended_k);
    CHECK(contention.release == uform_status_contended_k);
    CHECK(contention.attempted_at < returned); // refused while the blocking call ran

    // Re-entry from inside a callback is CONTENDED rather than a deadlock.
    plan_t plan = {.kernel = uform_kernel_empty_k, .reenter = executor};
    uform_call_t reentering = device_call(&plan, 0);
    CHECK_STATUS(uform_executor_call(executor, &reentering, NULL), uform_status_ok_k);
    CHECK(plan.reentered_call == uform_status_contended_k);
    CHECK(plan.reentered_drain == uform_status_contended_k);
    uform_executor_free(executor);
}

/** 153 deferred calls that only give the right answer in submission order. */
static void test_order(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    size_t const floats = 4096;
    CUcontext context = context_of(executor, 0);
    uint64_t buffer = allocate_on(context, floats * sizeof(float));
    enum { calls = 153 };
    static uform_outcome_t outcomes[calls];
    static plan_t plans[calls];
    for (size_t index = 0; index < calls; ++index) {
        plan_t *plan = &plans[index];
        *plan = (plan_t) {.buffers = {buffer}, .count = floats};
        // 2 s: the last call is still queued behind it when checked below, even if a loaded CI machine
        // slows these 153 submissions down (with 20 ms, sanitizers and load could outlast it).
        if (index == 0) plan->kernel = uform_kernel_sleep_k, plan->value = 2e9, plan->count = 0, plan->buffers[0] = 0;
        else if (index == 1) plan->kernel = uform_kernel_fill_f32_k, plan->value = 1;
        else if (index < 52) plan->kernel = uform_kernel_add_f32_k, plan->value = 1;
        else if (index == 52) plan->kernel = uform_kernel_fill_f32_k, plan->value = -100;
        else plan->kernel = uform_kernel_add_f32_k, plan->value = 2;
        uform_call_t call = device_call(plan, 0);
        CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[index]), uform_status_ok_k);
    }
    CHECK_STATUS(uform_outcome_poll(&outcomes[calls - 1]), uform_status_pending_k); // behind the sleep
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    size_t unfinished = 0;
    for (size_t index = 0; index < calls; ++index)
        unfinished += !outcomes[index].finished || outcomes[index].status != uform_status_ok_k;
    CHECK(unfinished == 0);
    float *host = calloc(floats, sizeof(float));
    copy_back(context, host, buffer, floats);
    CHECK(count_not_equal(host, floats, 100.0f) == 0);
    free(host);
    free_on(context, buffer);
    uform_executor_free(executor);
}

static void test_deferred_full(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 4);
    if (!executor) return;
    CHECK(fill_and_check(executor, 1.0f, 16) == 0);
    // The first call sleeps 2 s, so all four are still tracked when the fifth comes, however long a
    // loaded CI machine keeps this thread waiting (with 30 ms each, 120 ms in all, it could not).
    plan_t first = {.kernel = uform_kernel_sleep_k, .value = 2e9};
    uform_call_t first_call = device_call(&first, 0);
    plan_t plan = {.kernel = uform_kernel_sleep_k, .value = 30e6};
    uform_call_t call = device_call(&plan, 0);
    uform_outcome_t outcomes[5];
    CHECK_STATUS(uform_executor_call(executor, &first_call, &outcomes[0]), uform_status_ok_k);
    for (size_t index = 1; index < 4; ++index)
        CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[index]), uform_status_ok_k);
    size_t const visits = plan.visits;
    CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[4]), uform_status_deferred_full_k);
    CHECK_MESSAGE("deferred_limit");
    CHECK(plan.visits == visits); // nothing ran
    CHECK(outcomes[4].finished && outcomes[4].status == uform_status_deferred_full_k);
    CHECK_STATUS(uform_outcome_wait(&outcomes[0], -1), uform_status_ok_k);
    CHECK_STATUS(uform_executor_call(executor, &call, &outcomes[4]), uform_status_ok_k);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    for (size_t index = 0; index < 5; ++index) CHECK(outcomes[index].finished && outcomes[index].status == uform_status_ok_k);
    uform_executor_free(executor);
}

/** Thousands of deferred calls through a small ring, reusing outcomes once they finished. */
static void test_ring_progress(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 16);
    if (!executor) return;
    plan_t plan = {.kernel = uform_kernel_empty_k};
    uform_call_t call = device_call(&plan, 0);
    uform_outcome_t outcomes[16];
    size_t failures = 0;
    double const start = uform_now_seconds();
    size_t const calls = scaled(5000);
    for (size_t index = 0; index < calls; ++index) {
        uform_outcome_t *outcome = &outcomes[index % 16];
        if (index >= 16 && uform_outcome_wait(outcome, -1) != uform_status_ok_k) ++failures;
        if (uform_executor_call(executor, &call, outcome) != uform_status_ok_k) ++failures;
    }
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    for (size_t index = 0; index < 16; ++index) failures += !outcomes[index].finished || outcomes[index].status != 0;
    CHECK(failures == 0);
    printf("%zu deferred empty kernels through a ring of 16: %.2f us per call\n", calls,
           (uform_now_seconds() - start) / (double)calls * 1e6);
    uform_executor_free(executor);
}

/* ---- Scratch ---- */

static void test_scratch(void) {
    int32_t const ordinals[] = {0};
    size_t const limit = 1 << 20;
    uform_executor_t executor = open_on(ordinals, 1, limit, 0);
    if (!executor) return;
    size_t bytes = 1;
    CHECK_STATUS(uform_executor_scratch_bytes(executor, 0, &bytes), uform_status_ok_k);
    CHECK(bytes == 0); // nothing allocated before a call asks
    CHECK_STATUS(uform_executor_scratch_bytes(executor, 1, &bytes), uform_status_invalid_argument_k);
    CHECK_MESSAGE("device_index 1");

    plan_t plan = {.kernel = uform_kernel_fill_f32_k, .value = 9};
    uform_call_t call = device_call(&plan, 2 * limit);
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_limit_exceeded_k);
    CHECK_MESSAGE("scratch_limit");
    CHECK(plan.visits == 0);
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_limit_exceeded_k);
    CHECK(outcome.finished && outcome.status == uform_status_limit_exceeded_k);

    // Still usable; scratch then stays one buffer over a thousand calls, blocking and deferred.
    CHECK(fill_and_check(executor, 5.0f, (limit / 2) / sizeof(float)) == 0);
    call.scratch_bytes = limit / 2;
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    uint64_t const first = plan.scratch[0];
    size_t held = 0;
    CHECK_STATUS(uform_executor_scratch_bytes(executor, 0, &held), uform_status_ok_k);
    CHECK(held >= limit / 2 && held <= limit);
    size_t moved = 0, grew = 0;
    uform_outcome_t outcomes[8];
    size_t const calls = scaled(1000);
    for (size_t index = 0; index < calls; ++index) {
        call.scratch_bytes = limit / 2 - (index % 7) * 1000; // varying, never above the first
        uform_outcome_t *deferred = index % 2 ? &outcomes[index % 8] : NULL;
        if (deferred && index >= 8) CHECK_OK(uform_outcome_wait(deferred, -1));
        CHECK_STATUS(uform_executor_call(executor, &call, deferred), uform_status_ok_k);
        moved += plan.scratch[0] != first;
        CHECK_STATUS(uform_executor_scratch_bytes(executor, 0, &bytes), uform_status_ok_k);
        grew += bytes != held;
    }
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(moved == 0 && grew == 0);
    printf("scratch: %zu bytes held, same buffer over %zu calls\n", held, calls);

    // Growing up to the limit is allowed and keeps the contents' invariant for the new size.
    CHECK(fill_and_check(executor, 6.0f, limit / sizeof(float)) == 0);
    CHECK_STATUS(uform_executor_scratch_bytes(executor, 0, &bytes), uform_status_ok_k);
    CHECK(bytes == limit);

    CHECK_STATUS(uform_executor_scratch_release(executor), uform_status_ok_k);
    CHECK_STATUS(uform_executor_scratch_bytes(executor, 0, &bytes), uform_status_ok_k);
    CHECK(bytes == 0);
    CHECK(fill_and_check(executor, 8.0f, 1000) == 0); // grows again on demand
    CHECK_STATUS(uform_executor_scratch_bytes(executor, 0, &bytes), uform_status_ok_k);
    CHECK(bytes >= 4000 && bytes < 8192);
    uform_executor_free(executor);

    if (getenv("UFORM_TEST_UNDER_SANITIZER")) return;
    // Without a limit, an impossible size is OUT_OF_MEMORY, and the executor stays usable.
    executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    call = device_call(&plan, (size_t)1 << 52);
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_out_of_memory_k);
    CHECK_MESSAGE("scratch");
    CHECK(fill_and_check(executor, 4.0f, 1000) == 0);
    uform_executor_free(executor);
}

/* ---- Failures inside calls ---- */

static void test_callback_failure(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    plan_t plan = {.kernel = uform_kernel_empty_k, .fail_with = uform_status_invalid_argument_k};
    uform_call_t call = device_call(&plan, 0);
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("device callback returned invalid_argument on device 0");
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_invalid_argument_k);
    CHECK(outcome.finished && outcome.status == uform_status_invalid_argument_k);

    plan = (plan_t) {.kernel = (uform_kernel_t)99};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("kernel 99");
    plan = (plan_t) {.kernel = uform_kernel_fill_f32_k, .count = 10};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_invalid_argument_k); // no scratch
    CHECK_MESSAGE("NULL");
    plan = (plan_t) {.kernel = uform_kernel_fill_f32_k, .value = 1e300};
    call.scratch_bytes = 64;
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("range of a float");
    plan = (plan_t) {.kernel = uform_kernel_sleep_k, .value = -1};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("nanoseconds");
    uform_device_slot_t const outside = {0};
    CHECK_STATUS(uform_device_launch(&outside, uform_kernel_empty_k, 0, 0, 0), uform_status_invalid_argument_k);
    CHECK_MESSAGE("inside a device callback");
    CHECK(fill_and_check(executor, 3.0f, 100) == 0); // still usable
    uform_executor_free(executor);
}

typedef struct watchdog_state_t {
    atomic_int calls;
    int fail_after;
} watchdog_state_t;

static uform_status_t test_watchdog_callback(void *context) {
    watchdog_state_t *state = context;
    if (atomic_fetch_add(&state->calls, 1) + 1 >= state->fail_after)
        return uform_fail(uform_status_timeout_k, "test watchdog gave up after %d checks", state->fail_after);
    return uform_status_ok_k;
}

static void test_watchdog(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    CHECK(fill_and_check(executor, 1.0f, 16) == 0);
    watchdog_state_t state = {.fail_after = 5};
    uform_vram_set_watchdog(executor, test_watchdog_callback, &state);
    // A 2 s kernel: the wait checks the watchdog about every millisecond, and its fifth check must
    // come before the kernel ends even when a loaded CI machine (sanitizers, load average 10) delays
    // each of this thread's naps by tens of milliseconds (300 ms left that too little room).
    plan_t plan = {.kernel = uform_kernel_sleep_k, .value = 2e9};
    uform_call_t call = device_call(&plan, 0);
    double const start = uform_now_seconds();
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_timeout_k);
    CHECK_MESSAGE("test watchdog gave up");
    double const blocking = uform_now_seconds() - start;
    CHECK(atomic_load(&state.calls) == 5); // the watchdog's fifth check ended the wait, not the kernel

    atomic_store(&state.calls, 0);
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(executor, &call, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_timeout_k);
    CHECK(strstr(outcome.message, "test watchdog gave up") != NULL);
    uform_vram_set_watchdog(executor, NULL, NULL);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    printf("watchdog: a blocking wait on a 2 s kernel ended after %.1f ms\n", blocking * 1e3);
    CHECK(fill_and_check(executor, 2.0f, 16) == 0);
    uform_executor_free(executor);
}

/* ---- Settles ---- */

typedef struct settle_probe_t {
    atomic_int runs;
    uform_status_t seen;           /**< The status the settle was handed. */
    uform_outcome_t const *own;    /**< Its call's outcome: not yet finished while it runs. */
    uform_outcome_t const *before; /**< An earlier call's: finished by then. */
    bool own_pending, before_finished;
    uform_status_t replace;        /**< When not OK: the settle's word, with "replaced by the settle". */
} settle_probe_t;

static void settle_probe(void *context, uform_status_t *status, char *message, size_t message_bytes) {
    settle_probe_t *probe = context;
    atomic_fetch_add(&probe->runs, 1);
    probe->seen = *status;
    probe->own_pending = !__atomic_load_n(&probe->own->finished, __ATOMIC_ACQUIRE);
    probe->before_finished = !probe->before || __atomic_load_n(&probe->before->finished, __ATOMIC_ACQUIRE);
    if (probe->replace != uform_status_ok_k) {
        *status = probe->replace;
        snprintf(message, message_bytes, "replaced by the settle (it saw %s)", uform_status_name(probe->seen));
    }
}

typedef struct poller_t {
    uform_outcome_t *outcome;
    atomic_int *go;
    uform_status_t status;
} poller_t;

static void *poll_until_finished(void *context) {
    poller_t *poller = context;
    while (!atomic_load(poller->go)) {}
    uform_status_t status;
    while ((status = uform_outcome_poll(poller->outcome)) == uform_status_pending_k) {}
    poller->status = status;
    return NULL;
}

static void test_settle(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 1u << 20, 0);
    if (!executor) return;
    CHECK(fill_and_check(executor, 1.0f, 16) == 0);
    plan_t sleepy = {.kernel = uform_kernel_sleep_k, .value = 50e6};
    uform_call_t sleeping = device_call(&sleepy, 0);

    // After an earlier deferred call, before its own outcome reads finished, once, with OK.
    uform_outcome_t earlier, outcome;
    settle_probe_t probe = {.own = &outcome, .before = &earlier};
    bool attached = false;
    CHECK_STATUS(uform_executor_call(executor, &sleeping, &earlier), uform_status_ok_k);
    CHECK_STATUS(uform_vram_call_settling(executor, &sleeping, &outcome, settle_probe, &probe, &attached), uform_status_ok_k);
    CHECK(attached);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(atomic_load(&probe.runs) == 1 && probe.seen == uform_status_ok_k && probe.own_pending && probe.before_finished);
    CHECK(earlier.finished && earlier.status == uform_status_ok_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_ok_k);
    CHECK(atomic_load(&probe.runs) == 1);

    // Its word is final: status and message.
    settle_probe_t replacing = {.own = &outcome, .replace = uform_status_corrupt_file_k};
    CHECK_STATUS(uform_vram_call_settling(executor, &sleeping, &outcome, settle_probe, &replacing, &attached), uform_status_ok_k);
    CHECK(attached);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(outcome.finished && outcome.status == uform_status_corrupt_file_k);
    printf("a settle replacing the status: %s, \"%s\"\n", uform_status_name(outcome.status), outcome.message);
    CHECK(!strcmp(outcome.message, "replaced by the settle (it saw ok)"));
    CHECK(atomic_load(&replacing.runs) == 1);

    // Never for a refused call (scratch above the limit) or a failing device part.
    settle_probe_t refused = {.own = &outcome};
    uform_call_t const greedy = device_call(&sleepy, 2u << 20);
    CHECK_STATUS(uform_vram_call_settling(executor, &greedy, &outcome, settle_probe, &refused, &attached),
                 uform_status_limit_exceeded_k);
    CHECK(!attached && outcome.finished && outcome.status == uform_status_limit_exceeded_k);
    plan_t failing = {.kernel = uform_kernel_fill_f32_k, .fail_with = uform_status_invalid_argument_k};
    uform_call_t const failing_call = device_call(&failing, 0);
    CHECK_STATUS(uform_vram_call_settling(executor, &failing_call, &outcome, settle_probe, &refused, &attached),
                 uform_status_invalid_argument_k);
    CHECK(!attached);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    CHECK(atomic_load(&refused.runs) == 0);
    // A later plain deferred call carries no settle.
    CHECK_STATUS(uform_executor_call(executor, &sleeping, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(atomic_load(&refused.runs) == 0 && atomic_load(&probe.runs) == 1);

    // Eight threads polling the same outcomes at once, repeated: each settle runs once.
    enum { POLLERS = 8, ROUNDS = 20 };
    size_t const rounds = scaled(ROUNDS) ? scaled(ROUNDS) : 2;
    int once = 1;
    sleepy.value = 2e6;
    for (size_t round = 0; round < rounds; ++round) {
        uform_outcome_t outcomes[2];
        settle_probe_t probes[2] = {{.own = &outcomes[0]}, {.own = &outcomes[1], .before = &outcomes[0]}};
        for (int c = 0; c < 2; ++c)
            CHECK_STATUS(uform_vram_call_settling(executor, &sleeping, &outcomes[c], settle_probe, &probes[c], &attached),
                         uform_status_ok_k);
        atomic_int go = 0;
        pthread_t threads[POLLERS];
        poller_t pollers[POLLERS];
        for (int t = 0; t < POLLERS; ++t) {
            pollers[t] = (poller_t){.outcome = &outcomes[t % 2], .go = &go};
            CHECK_FATAL(pthread_create(&threads[t], NULL, poll_until_finished, &pollers[t]) == 0);
        }
        atomic_store(&go, 1);
        for (int t = 0; t < POLLERS; ++t) {
            pthread_join(threads[t], NULL);
            once &= pollers[t].status == uform_status_ok_k;
        }
        once &= atomic_load(&probes[0].runs) == 1 && atomic_load(&probes[1].runs) == 1;
        once &= probes[0].own_pending && probes[1].own_pending && probes[1].before_finished;
    }
    printf("settles polled by %d threads, %zu rounds: each ran once, in order: %d\n", POLLERS, rounds, once);
    CHECK(once);

    // Freed with a call in flight: the free waits for it and the settle runs with OK.
    sleepy.value = 100e6;
    settle_probe_t last = {.own = &outcome};
    CHECK_STATUS(uform_vram_call_settling(executor, &sleeping, &outcome, settle_probe, &last, &attached), uform_status_ok_k);
    uform_executor_free(executor);
    CHECK(atomic_load(&last.runs) == 1 && last.seen == uform_status_ok_k && outcome.finished &&
          outcome.status == uform_status_ok_k);
}

#endif // UFORM_WITH_CUDA

int main(void) {
    size_t count = 0;
    CHECK_STATUS(uform_gpu_devices(NULL, 0, &count), uform_status_ok_k);
    if (count == 0) {
        CHECK_STATUS(uform_gpu_status(), uform_status_unsupported_k); // sets the reason SKIP prints
        if (check_failures) CHECK_DONE();
        SKIP("no GPU (%s): the device checks are skipped", uform_error_message());
    }
#if UFORM_WITH_CUDA
    CUcontext anchor = NULL;
    vram_devices_begin(&anchor);
    test_deferred_overlap();
    test_contended();
    test_order();
    test_deferred_full();
    test_ring_progress();
    test_scratch();
    test_callback_failure();
    test_watchdog();
    test_settle();
    vram_devices_end(anchor);
#endif
    CHECK_DONE();
}
