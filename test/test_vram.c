/**
 *  @file   test_vram.c
 *  @brief  VRAM executors: argument checks and the no-driver paths everywhere; with a GPU, streams,
 *          contexts, blocking calls, host decoders, classes, ordinals and derived devices, two
 *          devices, and a trapping kernel (in a child process, since a sticky error breaks the
 *          device's primary context for the whole process). Deferred calls, scratch, callback
 *          failures and the watchdog: test_vram_calls.c.
 *
 *  Environment: UFORM_TEST_UNDER_SANITIZER=1 skips the part that makes the driver fail on purpose
 *  (the trap), which compute-sanitizer would count as an error.
 */
#include "vram_harness.h"
#include "fault_harness.h"

static void test_arguments(void) {
    uform_executor_t const sentinel = (uform_executor_t)(uintptr_t)0x1234;
    uform_executor_t executor = sentinel;
    int32_t const repeated[] = {0, 1, 0}, negative[] = {-1}, one[] = {0};
    CHECK_STATUS(uform_executor_for_vram(NULL, NULL, NULL, 0, 0, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("executor is NULL");
    uform_vram_options_t vram = {.devices = NULL, .devices_count = 2};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("vram->devices is NULL");
    vram = (uform_vram_options_t) {.devices = repeated, .devices_count = 3};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("ordinal 0 is repeated");
    vram = (uform_vram_options_t) {.devices = negative, .devices_count = 1};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("is -1");
    vram = (uform_vram_options_t) {.devices = one, .devices_count = 1, .gpu_class = (uform_gpu_class_t)99};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("gpu_class 99");
    // Borrowed streams are refused before the hardware is looked at, so the message is the same
    // with and without a GPU.
    void *streams[1] = {(void *)(uintptr_t)0x99};
    CHECK_STATUS(uform_executor_for_vram(NULL, NULL, streams, 0, 0, &executor), uform_status_unsupported_k);
    CHECK_MESSAGE("borrowed streams are not wired yet");
    CHECK_STATUS(uform_executor_for_vram(NULL, NULL, NULL, 0, ((size_t)1 << 20) + 1, &executor),
                 uform_status_invalid_argument_k);
    CHECK_MESSAGE("deferred_limit 1048577");
    // The decoders' RAM options, too, are checked before the driver is looked for.
    uform_ram_options_t bad_class = {.cpu_class = (uform_cpu_class_t)55};
    CHECK_STATUS(uform_executor_for_vram(NULL, &bad_class, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("cpu_class 55 is out of range");
    int32_t const absent_node[] = {4095};
    uform_ram_options_t bad_node = {.memory_domains = absent_node, .memory_domains_count = 1};
    CHECK_STATUS(uform_executor_for_vram(NULL, &bad_node, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("NUMA node 4095");
    CHECK(executor == sentinel); // untouched by every failure

    size_t bytes = 77;
    CHECK_STATUS(uform_executor_scratch_bytes(NULL, 0, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("bytes is NULL");
    CHECK_STATUS(uform_executor_scratch_bytes(NULL, 0, &bytes), uform_status_unsupported_k);
    CHECK_MESSAGE("NULL executor holds no device memory");
    CHECK_STATUS(uform_executor_scratch_release(NULL), uform_status_unsupported_k);
    CHECK_MESSAGE("NULL executor");
    CHECK(bytes == 77);

    uform_executor_t ram = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram), uform_status_ok_k);
    if (ram) {
        CHECK_STATUS(uform_executor_scratch_bytes(ram, 0, &bytes), uform_status_unsupported_k);
        CHECK_MESSAGE("RAM or pool executor holds no device memory");
        CHECK_STATUS(uform_executor_scratch_release(ram), uform_status_unsupported_k);
        uform_vram_member_t const *members = (uform_vram_member_t const *)(uintptr_t)1;
        CHECK(uform_vram_members(ram, &members) == 0);
        CHECK(members == NULL);
        uform_vram_set_watchdog(ram, NULL, NULL); // a no-op on other executors
        uform_executor_free(ram);
    }
    CHECK(uform_vram_members(NULL, NULL) == 0);

    CHECK_STATUS(uform_device_launch(NULL, uform_kernel_empty_k, 0, 0, 0), uform_status_invalid_argument_k);
    CHECK_MESSAGE("slot is NULL");
    uform_device_slot_t const fake = {0};
    CHECK_STATUS(uform_device_launch(&fake, (uform_kernel_t)99, 0, 0, 0), uform_status_invalid_argument_k);
    CHECK_MESSAGE("kernel 99");
    // Outside a device callback: INVALID_ARGUMENT with CUDA, UNSUPPORTED without.
    uform_status_t status = uform_device_launch(&fake, uform_kernel_empty_k, 0, 0, 0);
    CHECK(UFORM_WITH_CUDA ? status == uform_status_invalid_argument_k : status == uform_status_unsupported_k);
    CHECK(strlen(uform_error_message()) > 10);
}

/** With no GPU the executor is refused with the same reason `uform_gpu_status` gives. */
static void test_without_gpu(void) {
    CHECK_STATUS(uform_gpu_status(), uform_status_unsupported_k);
    char reason[512];
    snprintf(reason, sizeof(reason), "%s", uform_error_message());
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(NULL, NULL, NULL, 0, 0, &executor), uform_status_unsupported_k);
    CHECK(executor == NULL);
    CHECK_MESSAGE("uform_executor_for_vram");
    CHECK_MESSAGE(reason);
    printf("%s\n", uform_error_message());
    int32_t const ordinals[] = {0};
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = 1};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 1 << 20, 8, &executor), uform_status_unsupported_k);
    CHECK_MESSAGE(reason);
}


#if UFORM_WITH_CUDA

/* ---- Contexts and streams ---- */

/** An executor on device 1 only leaves device 0 without a context, and releases device 1's. */
static void test_no_stray_context(void) {
    unsigned flags = 0;
    int active0 = -1, active1 = -1;
    CHECK_CU(cuda->DevicePrimaryCtxGetState(0, &flags, &active0));
    CHECK_CU(cuda->DevicePrimaryCtxGetState(1, &flags, &active1));
    if (active0 || active1) {
        printf("a primary context is already active (%d, %d): stray-context check skipped\n", active0, active1);
        return;
    }
    int32_t const ordinals[] = {1};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    CHECK(fill_and_check(executor, 2.0f, 1024) == 0);
    CHECK_CU(cuda->DevicePrimaryCtxGetState(0, &flags, &active0));
    CHECK_CU(cuda->DevicePrimaryCtxGetState(1, &flags, &active1));
    CHECK(active0 == 0); // nothing on the device not named
    CHECK(active1 == 1);
    CUcontext current = (CUcontext)(uintptr_t)1;
    CHECK_CU(cuda->CtxGetCurrent(&current));
    CHECK(current == NULL); // nothing left current on this thread
    uform_executor_free(executor);
    CHECK_CU(cuda->DevicePrimaryCtxGetState(1, &flags, &active1));
    CHECK(active1 == 0); // released
    printf("no stray context: device 0 inactive while an executor drove device 1\n");
}

static void test_basics(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    uform_executor_description_t description;
    CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
    uform_gpu_device_t device;
    size_t count = 0;
    CHECK_OK(uform_gpu_devices(&device, 1, &count));
    CHECK(description.kind == uform_executor_kind_vram_k);
    CHECK(description.devices_count == 1);
    CHECK(description.gpu_class == device.gpu_class);
    /* Decoders: 7/8 of the cores of the nodes nearest the device (all allowed nodes when unknown). */
    size_t nodes = 0, allowed = 0;
    CHECK_OK(uform_memory_domains(NULL, 0, &nodes));
    uform_memory_domain_t domains[64];
    CHECK_OK(uform_memory_domains(domains, 64, &nodes));
    for (size_t i = 0; i < nodes && i < 64; ++i) allowed += domains[i].cores_count;
    CHECK(description.threads_count >= 1 && description.threads_count <= uform_default_threads(allowed));
    if (nodes == 1) CHECK(description.threads_count == uform_default_threads(allowed));
    CHECK(description.domains_count >= 1);
    CHECK(description.deferred_limit == UFORM_DEFERRED_LIMIT_DEFAULT);
    CHECK(description.scratch_limit == 0);
    CHECK(description.mood == uform_mood_parked_k);
    int32_t core = -2, node = -2;
    CHECK_STATUS(uform_executor_thread_placement(executor, 0, &core, &node), uform_status_ok_k);
    CHECK_STATUS(uform_executor_thread_placement(executor, description.threads_count, &core, &node),
                 uform_status_invalid_argument_k);
    uform_vram_member_t const *members = NULL;
    CHECK(uform_vram_members(executor, &members) == 1);
    CHECK(members[0].ordinal == 0 && members[0].cu_device == 0);
    CHECK(members[0].stream != NULL && members[0].cu_context != NULL);
    CHECK(members[0].gpu_class == device.gpu_class && members[0].own_class == device.gpu_class);
    printf("executor on GPU 0: %zu decoder threads on %zu node(s), thread 0 on core %d node %d, class %s, "
           "multicast %s\n",
           description.threads_count, description.domains_count, (int)core, (int)node,
           uform_gpu_class_name(description.gpu_class), members[0].multicast_supported ? "supported" : "absent");

    // Blocking fill and add, read back; the callback sees the stream, context and class.
    plan_t plan = {.kernel = uform_kernel_fill_f32_k, .value = 3.5};
    uform_call_t call = device_call(&plan, 1000 * sizeof(float));
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK(plan.visits == 1 && plan.indices[0] == 0 && plan.ordinals[0] == 0);
    CHECK(plan.streams[0] == members[0].stream && plan.contexts[0] == members[0].cu_context);
    CHECK(plan.context_current[0]);
    CHECK(plan.classes[0] == device.gpu_class);
    CHECK(plan.scratch[0] != 0);
    float host[1000];
    copy_back(members[0].cu_context, host, plan.scratch[0], 1000);
    CHECK(count_not_equal(host, 1000, 3.5f) == 0);
    plan.kernel = uform_kernel_add_f32_k, plan.value = 1.25;
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    copy_back(members[0].cu_context, host, plan.scratch[0], 1000);
    CHECK(count_not_equal(host, 1000, 4.75f) == 0);
    // The caller's (absent) context is restored after every call.
    CUcontext current = (CUcontext)(uintptr_t)1;
    CHECK_CU(cuda->CtxGetCurrent(&current));
    CHECK(current == NULL);

    // Residency: a RAM-resident call is refused, ANY and VRAM run.
    call.residency = uform_residency_ram_k;
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_residency_mismatch_k);
    call.residency = uform_residency_any_k;
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);

    // Moods: SPINNING is recorded and calls still complete.
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_spinning_k), uform_status_ok_k);
    CHECK_STATUS(uform_executor_describe(executor, &description), uform_status_ok_k);
    CHECK(description.mood == uform_mood_spinning_k);
    CHECK(fill_and_check(executor, -1.0f, 4096) == 0);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    uform_executor_free(executor);
}

/* ---- Host decoders ---- */

typedef struct host_count_t {
    atomic_size_t tasks;
    atomic_size_t bad_threads;
    size_t threads;
} host_count_t;

static void count_task(void *context, size_t task, size_t thread, size_t domain) {
    host_count_t *counter = context;
    (void)task, (void)domain;
    atomic_fetch_add(&counter->tasks, 1);
    if (thread >= counter->threads) atomic_fetch_add(&counter->bad_threads, 1);
}

typedef struct both_t {
    host_count_t host; /**< First: the task callback gets the same pointer. */
    plan_t plan;
} both_t;

static void both_task(void *context, size_t task, size_t thread, size_t domain) {
    count_task(&((both_t *)context)->host, task, thread, domain);
}

static uform_status_t both_device(void *context, uform_device_slot_t const *slot) {
    both_t *both = context;
    // The host part ran to completion before the device part.
    if (atomic_load(&both->host.tasks) != 100) return uform_fail(uform_status_invalid_argument_k, "host part unfinished");
    return plan_callback(&both->plan, slot);
}

static void test_host_part(void) {
    int32_t const ordinals[] = {0};
    uform_executor_t executor = open_on(ordinals, 1, 0, 0);
    if (!executor) return;
    uform_executor_description_t description;
    CHECK_OK(uform_executor_describe(executor, &description));
    both_t both = {.host.threads = description.threads_count, .plan = {.kernel = uform_kernel_fill_f32_k, .value = 7}};
    uform_call_t call = {.schedule = uform_schedule_dynamic_k, .tasks = 100, .task = both_task,
                         .device = both_device, .context = &both, .scratch_bytes = 256 * sizeof(float)};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK(atomic_load(&both.host.tasks) == 100);
    CHECK(atomic_load(&both.host.bad_threads) == 0);
    CHECK(both.plan.visits == 1);
    float host[256];
    copy_back(context_of(executor, 0), host, both.plan.scratch[0], 256);
    CHECK(count_not_equal(host, 256, 7.0f) == 0);

    // Host-only calls, blocking and deferred.
    host_count_t counter = {.threads = description.threads_count};
    uform_call_t host_only = {.schedule = uform_schedule_threads_k, .task = count_task, .context = &counter};
    CHECK_STATUS(uform_executor_call(executor, &host_only, NULL), uform_status_ok_k);
    CHECK(atomic_load(&counter.tasks) == description.threads_count);
    uform_outcome_t outcome;
    CHECK_STATUS(uform_executor_call(executor, &host_only, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, -1), uform_status_ok_k);
    CHECK(atomic_load(&counter.tasks) == 2 * description.threads_count);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    uform_executor_free(executor);
}

/* ---- Classes, ordinals, derived devices ---- */

static void test_classes_and_ordinals(void) {
    uform_gpu_device_t device;
    size_t count = 0;
    CHECK_OK(uform_gpu_devices(&device, 1, &count));
    int32_t const zero[] = {0};
    uform_executor_t executor = NULL;
    uform_vram_options_t vram = {.devices = zero, .devices_count = 1, .gpu_class = uform_gpu_class_nvidia_ampere_k};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (executor) {
        uform_executor_description_t description;
        CHECK_OK(uform_executor_describe(executor, &description));
        CHECK(description.gpu_class == uform_gpu_class_nvidia_ampere_k);
        plan_t plan = {.kernel = uform_kernel_empty_k};
        uform_call_t call = device_call(&plan, 0);
        CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
        CHECK(plan.classes[0] == uform_gpu_class_nvidia_ampere_k);
        uform_vram_member_t const *members;
        uform_vram_members(executor, &members);
        CHECK(members[0].own_class == device.gpu_class && members[0].gpu_class == uform_gpu_class_nvidia_ampere_k);
        uform_executor_free(executor);
    }
    vram.gpu_class = device.gpu_class;
    executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    uform_executor_free(executor);
    for (int candidate = uform_gpu_class_nvidia_ampere_k; candidate <= uform_gpu_class_apple_metal10_k; ++candidate) {
        if (uform_gpu_class_runs(device.gpu_class, (uform_gpu_class_t)candidate)) continue;
        vram.gpu_class = (uform_gpu_class_t)candidate;
        executor = NULL;
        CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_unsupported_k);
        CHECK_MESSAGE(uform_gpu_class_name((uform_gpu_class_t)candidate));
        CHECK(executor == NULL);
    }
    int32_t const beyond[] = {(int32_t)gpus};
    vram = (uform_vram_options_t) {.devices = beyond, .devices_count = 1};
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    CHECK_MESSAGE("out of range");

    // An explicit RAM placement for the decoders: the first allowed node, one class down or equal.
    uform_memory_domain_t domain;
    size_t domains = 0;
    CHECK_OK(uform_memory_domains(&domain, 1, &domains));
    if (domains) {
        uform_ram_options_t ram = {.memory_domains = &domain.node, .memory_domains_count = 1};
        vram = (uform_vram_options_t) {.devices = zero, .devices_count = 1};
        executor = NULL;
        CHECK_STATUS(uform_executor_for_vram(&vram, &ram, NULL, 0, 0, &executor), uform_status_ok_k);
        int32_t node = -2;
        if (executor) CHECK_STATUS(uform_executor_thread_placement(executor, 0, NULL, &node), uform_status_ok_k);
        CHECK(node == domain.node);
        uform_executor_free(executor);
        int32_t const unknown_node[] = {4095};
        ram.memory_domains = unknown_node;
        CHECK_STATUS(uform_executor_for_vram(&vram, &ram, NULL, 0, 0, &executor), uform_status_invalid_argument_k);
    }
}

static void test_derived(void) {
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(NULL, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (!executor) return;
    uform_vram_member_t const *members;
    CHECK(uform_vram_members(executor, &members) == 1);
    bool used_nvml = false;
    size_t const picked = uform_cuda_pick_free_device(&used_nvml);
    printf("one free device: ordinal %d (NVML %s)\n", (int)members[0].ordinal, used_nvml ? "used" : "absent");
    CHECK(members[0].ordinal >= 0 && (size_t)members[0].ordinal < gpus);
    CHECK(fill_and_check(executor, 2.5f, 100) == 0);
    if (gpus >= 2 && used_nvml) {
        // This process now runs on that device, so the other one is the free one.
        size_t const next = uform_cuda_pick_free_device(NULL);
        printf("with an executor on %d, one free device is %zu (first pick %zu)\n", (int)members[0].ordinal, next, picked);
        CHECK(next != (size_t)members[0].ordinal);
    }
    uform_executor_free(executor);
}

/* ---- Two devices ---- */

static void test_two_devices(void) {
    int32_t const ordinals[] = {1, 0}; // reversed: device order is the caller's
    uform_executor_t executor = open_on(ordinals, 2, 0, 0);
    if (!executor) return;
    uform_vram_member_t const *members;
    CHECK(uform_vram_members(executor, &members) == 2);
    CHECK(members[0].ordinal == 1 && members[1].ordinal == 0);
    CHECK(members[0].stream != members[1].stream && members[0].cu_context != members[1].cu_context);
    plan_t plan = {.kernel = uform_kernel_fill_f32_k, .value = 10, .per_device = 1};
    uform_call_t call = device_call(&plan, 4096 * sizeof(float));
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK(plan.visits == 2 && plan.indices[0] == 0 && plan.indices[1] == 1);
    CHECK(plan.ordinals[0] == 1 && plan.ordinals[1] == 0);
    CHECK(plan.context_current[0] && plan.context_current[1]);
    float host[4096];
    for (size_t index = 0; index < 2; ++index) {
        copy_back(members[index].cu_context, host, plan.scratch[index], 4096);
        CHECK(count_not_equal(host, 4096, 10.0f + (float)index) == 0);
    }
    // Deferred work on both, a sleep on each, then a drain.
    plan_t sleepy = {.kernel = uform_kernel_sleep_k, .value = 20e6};
    uform_call_t sleeping = device_call(&sleepy, 0);
    uform_outcome_t outcomes[4];
    for (size_t index = 0; index < 4; ++index)
        CHECK_STATUS(uform_executor_call(executor, &sleeping, &outcomes[index]), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcomes[1], -1), uform_status_ok_k);
    CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
    for (size_t index = 0; index < 4; ++index) CHECK(outcomes[index].finished && outcomes[index].status == 0);
    uform_executor_description_t description;
    CHECK_OK(uform_executor_describe(executor, &description));
    CHECK(description.devices_count == 2);
    printf("two devices: work ran on both, %zu decoder threads\n", description.threads_count);
    uform_executor_free(executor);
}

/* ---- Faults, in a child process ---- */

static int trap_child(void) {
    int32_t const zero[] = {0}, one[] = {1};
    uform_executor_t first = open_on(zero, 1, 0, 0), second = open_on(zero, 1, 0, 0);
    uform_executor_t other = gpus >= 2 ? open_on(one, 1, 0, 0) : NULL;
    uform_executor_t ram = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram), uform_status_ok_k);
    CHECK_FATAL(first && second && ram);
    CHECK(fill_and_check(second, 1.0f, 256) == 0);

    plan_t trap = {.kernel = uform_kernel_trap_k};
    uform_call_t call = device_call(&trap, 0);
    uform_outcome_t outcome;
    double const start = uform_now_seconds();
    CHECK_STATUS(uform_executor_call(first, &call, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_executor_drain(first, uform_mood_parked_k), uform_status_device_fault_k);
    CHECK_MESSAGE("CUDA_ERROR");
    CHECK_MESSAGE("poisoned");
    printf("drain after a trap: %s\n", uform_error_message());
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_device_fault_k);
    CHECK(outcome.finished && outcome.status == uform_status_device_fault_k);
    CHECK(strstr(outcome.message, "CUDA_ERROR") != NULL);
    // Dead from now on, at once.
    plan_t fill = {.kernel = uform_kernel_fill_f32_k, .value = 1};
    uform_call_t filling = device_call(&fill, 1024);
    CHECK_STATUS(uform_executor_call(first, &filling, NULL), uform_status_device_fault_k);
    CHECK(fill.visits == 0);
    CHECK_STATUS(uform_executor_call(first, &filling, &outcome), uform_status_device_fault_k);
    CHECK(outcome.finished && outcome.status == uform_status_device_fault_k);
    CHECK_STATUS(uform_executor_scratch_release(first), uform_status_device_fault_k);
    CHECK_STATUS(uform_executor_drain(first, uform_mood_parked_k), uform_status_device_fault_k);
    // The other executor on the same device shares the broken primary context.
    CHECK_STATUS(uform_executor_call(second, &filling, NULL), uform_status_device_fault_k);
    CHECK_MESSAGE("CUDA_ERROR");
    CHECK_STATUS(uform_executor_call(second, &filling, NULL), uform_status_device_fault_k);
    // Another device: the engine isolates the fault to this executor, but the CUDA driver may
    // take the whole process's device state down with a trap (seen on H200s with driver 580: the
    // other GPU's next allocation failed with CUDA_ERROR_LAUNCH_FAILED). Either way the other
    // executor answers with right values or a clear DEVICE_FAULT, never garbage or a hang. The
    // fake driver (test/gpu/fake_cuda.c) keeps a fault in its own context, as the CUDA
    // documentation describes, so there exactly OK is expected; a real driver may do either.
    bool const fake_driver = getenv("FAKE_CUDA_DEVICES") != NULL;
    if (other) {
        plan_t probe = {.kernel = uform_kernel_fill_f32_k, .value = 4};
        uform_call_t probing = device_call(&probe, 1024);
        uform_status_t const other_status = uform_executor_call(other, &probing, NULL);
        if (fake_driver) CHECK(other_status == uform_status_ok_k);
        else CHECK(other_status == uform_status_ok_k || other_status == uform_status_device_fault_k);
        if (other_status == uform_status_ok_k) {
            CHECK(fill_and_check(other, 4.0f, 1024) == 0);
            CHECK_STATUS(uform_executor_call(other, &call, NULL), uform_status_device_fault_k); // a blocking trap
            CHECK_MESSAGE("CUDA_ERROR");
            printf("trap: the other device kept working\n");
        }
        else {
            CHECK_MESSAGE("CUDA_ERROR");
            printf("trap: the driver failed the other device too: %s\n", uform_error_message());
        }
    }
    host_count_t counter = {.threads = 1};
    uform_call_t host = {.schedule = uform_schedule_static_k, .tasks = 10, .task = count_task, .context = &counter};
    CHECK_STATUS(uform_executor_call(ram, &host, NULL), uform_status_ok_k);
    CHECK(atomic_load(&counter.tasks) == 10);
    uform_executor_free(first);
    uform_executor_free(second);
    uform_executor_free(other);
    uform_executor_free(ram);
    printf("trap: reported, executors freed, %.1f ms in all\n", (uform_now_seconds() - start) * 1e3);

    // Every executor on the device is gone, so the primary context was discarded: a new one may work.
    // A real driver may also refuse it (seen on H200s): then the refusal is a clear DEVICE_FAULT.
    // The fake driver discards a context with its last user, so there a new one must work.
    uform_vram_options_t again = {.devices = zero, .devices_count = 1};
    uform_executor_t fresh = NULL;
    uform_status_t const fresh_status = uform_executor_for_vram(&again, NULL, NULL, 0, 0, &fresh);
    if (fake_driver) CHECK(fresh_status == uform_status_ok_k && fresh != NULL);
    else CHECK(fresh_status == uform_status_ok_k || fresh_status == uform_status_device_fault_k);
    if (fresh) {
        size_t const wrong = fill_and_check(fresh, 5.0f, 256);
        printf("after freeing every executor on device 0, a new one %s\n", wrong ? "still fails" : "works again");
        uform_executor_free(fresh);
    }
    else
        printf("after freeing every executor on device 0, the driver refuses a new one: %s\n", uform_error_message());
    return check_failures ? 1 : 0;
}

static void test_trap(char const *self) { fault_run_child(self, "--trap-child", NULL, 120, "trap"); }

#endif // UFORM_WITH_CUDA

int main(int argc, char **argv) {
#if UFORM_WITH_CUDA
    if (argc > 1 && !strcmp(argv[1], "--trap-child")) {
        CHECK_OK(uform_gpu_devices(NULL, 0, &gpus));
        CHECK_FATAL(uform_cuda(&cuda) == uform_status_ok_k && gpus);
        return trap_child();
    }
#else
    (void)argc;
#endif
    test_arguments();
    size_t count = 0;
    CHECK_STATUS(uform_gpu_devices(NULL, 0, &count), uform_status_ok_k);
    if (count == 0) {
        test_without_gpu();
        if (check_failures) CHECK_DONE();
        CHECK_STATUS(uform_gpu_status(), uform_status_unsupported_k); // sets the reason SKIP prints
        if (check_failures) CHECK_DONE();
        SKIP("no GPU (%s): the argument and no-driver paths passed, the device checks are skipped",
             uform_error_message());
    }
#if UFORM_WITH_CUDA
    gpus = count;
    CHECK_FATAL(uform_cuda(&cuda) == uform_status_ok_k);
    if (gpus >= 2) test_no_stray_context();
    test_derived();
    CUcontext anchor = NULL;
    vram_devices_begin(&anchor);
    test_basics();
    test_host_part();
    test_classes_and_ordinals();
    if (gpus >= 2) test_two_devices();
    else printf("one GPU: the two-device and stray-context checks are skipped\n");
    vram_devices_end(anchor);
    test_trap(argv[0]);
#else
    (void)argv;
#endif
    CHECK_DONE();
}
