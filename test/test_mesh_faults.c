/**
 *  @file   test_mesh_faults.c
 *  @brief  Meshes on the fake driver (test/gpu/fake_cuda.c) and the fake NCCL (test/gpu/fake_nccl.c):
 *          a run of one GPU, runs without NCCL failing everywhere, and NCCL's start polled, timed out
 *          and hung, a lost peer, a remote error and a stalled or blocked collective aborting the
 *          communicators, each in a process of its own. Skips (77) without the fake driver: ctest's
 *          test_mesh_fake runs it there.
 *
 *      test_mesh_faults                   the whole test
 *      test_mesh_faults --child ROLE ...  one process of a shape (started by the test)
 */
#include "mesh_harness.h"
#include "uform_testing.h" // `uform_device_launch`, `uform_kernel_trap_k`

#if UFORM_WITH_CUDA

static uform_status_t sleep_device(void *context, uform_device_slot_t const *slot) {
    if (slot->device_index != 0) return uform_status_ok_k;
    return uform_device_launch(slot, uform_kernel_sleep_k, 0, 0, *(double const *)context);
}

/**
 *  Roles on the fake driver with the fake NCCL (test/gpu/fake_nccl.c), which sums in place across
 *  the ranks of this process: the NCCL paths of a mesh without a GPU.
 */
/** Checks that the mesh's collectives run on blocking communicators split off the non-blocking
 *  ones (the fake records each communicator's config), each having enqueued at least `collectives`;
 *  with `UFORM_MESH_BLOCKING=0`, on the non-blocking ones NCCL started with. */
static void check_blocking_children(uform_mesh_t mesh, size_t devices, long collectives) {
    void *library = dlopen(UFORM_FAKE_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
    int (*describe)(uform_nccl_comm_t, int *, int *, long *) =
        library ? (int (*)(uform_nccl_comm_t, int *, int *, long *))dlsym(library, "fake_nccl_describe") : NULL;
    CHECK_FATAL(describe != NULL);
    uform_nccl_comm_t const *comms = NULL;
    CHECK(uform_mesh_comms(mesh, &comms) == devices);
    for (size_t d = 0; comms && d < devices; ++d) {
        int blocking = -1, child = -1;
        long enqueued = -1;
        CHECK(describe(comms[d], &blocking, &child, &enqueued) == 0);
        char const *wanted = getenv("UFORM_MESH_BLOCKING");
        if (wanted && strcmp(wanted, "0") == 0) CHECK(blocking == 0 && child == 0);
        else CHECK(blocking == 1 && child == 1);
        CHECK(enqueued >= collectives);
        if (enqueued < collectives) fprintf(stderr, "rank %zu enqueued %ld collectives\n", d, enqueued);
    }
    if (library) dlclose(library);
}

static int fake_nccl_child(char const *role, uform_executor_t executor, uform_mesh_options_t *options) {
    uform_mesh_t mesh = NULL;
    double start = now();
    if (strcmp(role, "fake-nccl-single") == 0) {
        // Two GPUs, no peers: initialisation polled to the end, then the whole all-reduce suite, on
        // the blocking children split off the non-blocking communicators NCCL started with.
        options->host_domain_count = 0, options->directory = NULL;
        char const *wanted = getenv("UFORM_MESH_BLOCKING");
        char kept[8];
        snprintf(kept, sizeof kept, "%s", wanted ? wanted : "");
        setenv("UFORM_MESH_BLOCKING", "yes", 1);
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_invalid_argument_k);
        CHECK_MESSAGE("UFORM_MESH_BLOCKING is \"yes\"; use 1 (collectives on blocking NCCL communicators, the "
                      "default) or 0");
        CHECK(mesh == NULL);
        if (wanted) setenv("UFORM_MESH_BLOCKING", kept, 1);
        else unsetenv("UFORM_MESH_BLOCKING");
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        if (mesh) check_blocking_children(mesh, 2, 0);
        if (mesh) exercise(executor, mesh, "fake NCCL, one process", 4096);
        if (mesh) check_blocking_children(mesh, 2, 7); // every non-empty all-reduce of `exercise`
    }
    else if (strcmp(role, "fake-nccl-split-hang") == 0) {
        // NCCL starts, but the split into blocking communicators never completes: bounded too.
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_timeout_k);
        CHECK_MESSAGE("NCCL split into blocking communicators (ncclCommSplit of 2 ranks, 2 in this process) did not "
                      "finish within 1 s; this process's ranks 0, 1 (of 2 in the run) are still waiting");
        CHECK_MESSAGE("communicators aborted");
        double elapsed = now() - start;
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_timeout_k), elapsed, uform_error_message());
        CHECK(mesh == NULL);
    }
    else if (strcmp(role, "fake-nccl-blocked") == 0) {
        // A peer is lost: the blocking ncclGroupEnd of the second all-reduce never returns by itself.
        // The guard thread aborts the communicators at the timeout, which releases it: PEER_LOST,
        // blocking or deferred, and the mesh stays aborted; freeing it returns at once.
        alarm(30);
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        check_blocking_children(mesh, 2, 1);
        start = now();
        uform_outcome_t outcome;
        uform_status_t status = uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, &outcome);
        CHECK(status == uform_status_peer_lost_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, 10), uform_status_peer_lost_k);
        double elapsed = now() - start;
        CHECK_MESSAGE("mesh all-reduce (ncclGroupEnd) did not return within 1 s: a peer is gone or stalled; "
                      "communicators aborted");
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_peer_lost_k), elapsed,
               uform_error_message());
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        CHECK_MESSAGE("did not return within 1 s");
        buffers_free(&buffers);
    }
    else if (strcmp(role, "fake-nccl-stalled") == 0) {
        // A peer was SIGKILLed between all-reduces (test_mesh's "death" case on the fake): the next
        // ncclGroupEnd returns, but its kernels spin on the dead peer until their communicators are
        // aborted, and no communicator reports an error. The executor's wait runs the watchdog,
        // which aborts at the timeout: PEER_LOST, blocking or deferred, within the timeout. Aborting
        // must start with the blocking children the kernels run on: an NCCL abort frees device
        // memory, which waits for the device, so aborting a parent first waited forever for the
        // child's spinning kernel (the hang on 2 x H200; here: 10 s and "fake_nccl: misuse").
        alarm(60);
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        fill_t fill = {.buffers = &buffers};
        uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};
        CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k); // GPU g holds g + 1
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        CHECK(check_f32(&buffers, 3.0f));
        check_blocking_children(mesh, 2, 1);
        bool deferred = getenv("FAKE_TEST_DEFERRED") != NULL;
        start = now();
        uform_outcome_t outcome;
        uform_status_t status = uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k,
                                                      deferred ? &outcome : NULL);
        if (deferred) { // enqueued: the wait on its outcome fails
            CHECK_STATUS(status, uform_status_ok_k);
            status = uform_outcome_wait(&outcome, 30);
        }
        double elapsed = now() - start;
        CHECK_STATUS(status, uform_status_peer_lost_k);
        CHECK_MESSAGE("mesh all-reduce did not finish within 1 s: a peer is gone or stalled; communicators aborted");
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s%s: %s after %.2f s: %s\n", role, deferred ? " (deferred)" : "", uform_status_name(status), elapsed,
               uform_error_message());
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        CHECK_MESSAGE("aborted");
        // The aborted kernels quit: the executor drains, and freeing returns at once.
        CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
        double freeing = now();
        uform_mesh_free(mesh);
        mesh = NULL;
        CHECK(now() - freeing < 10);
        buffers_free(&buffers);
    }
    else if (strcmp(role, "fake-nccl-pair") == 0) {
        // Two processes: the unique ID through the directory, then every file removed.
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        uform_mesh_description_t description;
        CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
        CHECK(description.gpus_per_colocated_domain == 2 && description.first_gpu_index == options->host_domain_index);
    }
    else if (strcmp(role, "fake-nccl-init-hang") == 0) {
        // NCCL never finishes starting: bounded by the timeout, naming the stage and the ranks.
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_timeout_k);
        CHECK_MESSAGE("NCCL initialisation (ncclCommInitRankConfig of 2 ranks, 2 in this process) did not finish "
                      "within 1 s; this process's ranks 0, 1 (of 2 in the run) are still waiting, so a rank of "
                      "another process never joined or stalled");
        CHECK_MESSAGE("communicators aborted");
        double elapsed = now() - start;
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_timeout_k), elapsed, uform_error_message());
        CHECK(mesh == NULL);
    }
    else if (strcmp(role, "fake-nccl-early-exit") == 0) {
        // The executor stops an all-reduce after device 0 (device 1's context cannot be made
        // current). The mesh used to keep its mutex and an open NCCL group from device 0's callback,
        // so the next all-reduce or uform_mesh_free deadlocked; now nothing is held across callbacks:
        // the failed call enqueued nothing, the next one sums, and free returns.
        alarm(30);
        options->host_domain_count = 0, options->directory = NULL;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        void (*refuse_context)(int, int) = driver ? (void (*)(int, int))dlsym(driver, "fake_cuda_refuse_context") : NULL;
        CHECK_FATAL(refuse_context != NULL);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        fill_t fill = {.buffers = &buffers};
        uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};
        CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k); // GPU g holds g + 1
        refuse_context(1, 1);
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL),
                     uform_status_system_error_k);
        CHECK_MESSAGE("cannot make device 1's context current");
        uform_outcome_t outcome;
        refuse_context(1, 1);
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, &outcome),
                     uform_status_system_error_k);
        CHECK_STATUS(uform_outcome_wait(&outcome, 10), uform_status_system_error_k);
        CHECK(check_f32_per_device(&buffers, 1.0f, 2.0f)); // nothing was reduced
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        CHECK(check_f32(&buffers, 3.0f));
        buffers_free(&buffers);
        double freeing = now();
        uform_mesh_free(mesh);
        mesh = NULL;
        CHECK(now() - freeing < 10);
        printf("%s: a call stopped after device 0 left the mesh usable; free took %.3f s\n", role, now() - freeing);
    }
    else if (strcmp(role, "fake-nccl-remote-error") == 0) {
        // A communicator reports a lost peer after one collective: the watchdog (during any wait
        // on the executor) or the next all-reduce aborts the communicators, PEER_LOST from then on.
        options->host_domain_count = 0, options->directory = NULL;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        uform_status_t first = uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL);
        CHECK(first == uform_status_ok_k || first == uform_status_peer_lost_k);
        if (first == uform_status_ok_k) {
            // A 500 ms wait, so the watchdog runs (about every millisecond of a wait) and aborts:
            // PEER_LOST. Only a wait that lasts lets it run: a loaded CI machine that keeps this
            // thread off a core until the sleep ended (seen under AddressSanitizer with a 50 ms
            // sleep) finds the call finished, OK, with nothing checked; then the next all-reduce
            // must find the error instead.
            double nanoseconds = 500e6;
            uform_call_t call = {.residency = uform_residency_vram_k, .device = sleep_device, .context = &nanoseconds};
            uform_status_t const slept = uform_executor_call(executor, &call, NULL);
            CHECK(slept == uform_status_peer_lost_k || slept == uform_status_ok_k);
            if (slept == uform_status_ok_k) {
                printf("%s: the watchdog did not run during the sleep; the next all-reduce checks\n", role);
                CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL),
                             uform_status_peer_lost_k);
            }
        }
        CHECK_MESSAGE("ncclRemoteError");
        CHECK_MESSAGE("communicators aborted");
        printf("%s: %s\n", role, uform_error_message());
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        CHECK_MESSAGE("aborted");
        uform_outcome_t outcome;
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, &outcome),
                     uform_status_peer_lost_k);
        CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_peer_lost_k);
        buffers_free(&buffers);
    }
    else if (strcmp(role, "fake-nccl-timeout") == 0) {
        // A collective queued behind 8 s of other work outlasts a 1 s timeout: the watchdog aborts.
        // The work outlasts the bound below too (3 s did not leave a loaded machine that much room).
        options->host_domain_count = 0, options->directory = NULL, options->timeout_seconds = 1;
        CHECK_STATUS(uform_mesh_bootstrap(executor, options, &mesh), uform_status_ok_k);
        buffers_t buffers;
        CHECK_FATAL(buffers_alloc(executor, 256, sizeof(float), &buffers));
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_ok_k);
        double nanoseconds = 8e9;
        uform_outcome_t slept;
        uform_call_t call = {.residency = uform_residency_vram_k, .device = sleep_device, .context = &nanoseconds};
        CHECK_STATUS(uform_executor_call(executor, &call, &slept), uform_status_ok_k);
        start = now();
        CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, 256, uform_dtype_f32_k, NULL), uform_status_peer_lost_k);
        double elapsed = now() - start;
        CHECK_MESSAGE("did not finish within 1 s");
        CHECK(elapsed >= 0.9 && elapsed < 1 + SLACK_SECONDS);
        printf("%s: %s after %.2f s: %s\n", role, uform_status_name(uform_status_peer_lost_k), elapsed, uform_error_message());
        CHECK(uform_outcome_wait(&slept, 30) != uform_status_pending_k);
        // The sleep outlasts the abort: the executor drains it here, so freeing the mesh below (which
        // drains the executor first) returns at once.
        CHECK_STATUS(uform_executor_drain(executor, uform_mood_parked_k), uform_status_ok_k);
        buffers_free(&buffers);
    }
    start = now();
    uform_mesh_free(mesh);
    CHECK(now() - start < 5);
    uform_executor_free(executor);
    return check_failures ? 1 : 0;
}

/** A device callback that launches a trap: a deliberate device fault. */
static uform_status_t trap_callback(void *context, uform_device_slot_t const *slot) {
    (void)context;
    return uform_device_launch(slot, uform_kernel_trap_k, slot->scratch, 0, 0);
}

static void test_fake_driver(void) {
    int32_t ordinal = 0;
    uform_vram_options_t vram = {.devices = &ordinal, .devices_count = 1};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (!executor) return;
    uform_mesh_t mesh = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &mesh), uform_status_ok_k);
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_host_domain == 1 && description.gpus_per_colocated_domain == 1);
    CHECK(description.gpus_per_multimem_domain == 1 && description.first_gpu_index == 0);
    CHECK(description.host_domain_index == 0 && description.gpu_class == uform_gpu_class_nvidia_hopper_k);
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k);
    uform_mesh_t second = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &second), uform_status_invalid_argument_k);
    CHECK_MESSAGE("already carries a mesh");
    CHECK(second == NULL);
    // The binding is the executor's own: another executor on the same device carries a mesh of its
    // own meanwhile, and freeing that one leaves the first bound.
    uform_executor_t other = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &other), uform_status_ok_k);
    uform_mesh_t other_mesh = NULL;
    if (other) CHECK_STATUS(uform_mesh_bootstrap(other, NULL, &other_mesh), uform_status_ok_k);
    uform_mesh_free(other_mesh);
    uform_executor_free(other);
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &second), uform_status_invalid_argument_k);
    CHECK_MESSAGE("already carries a mesh");

    size_t const count = 4096;
    buffers_t buffers;
    CHECK_FATAL(buffers_alloc(executor, count, sizeof(float), &buffers));
    fill_t fill = {.buffers = &buffers};
    uform_call_t call = {.residency = uform_residency_vram_k, .device = fill_device, .context = &fill};
    CHECK_STATUS(uform_executor_call(executor, &call, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_f32_k, NULL), uform_status_ok_k);
    uform_outcome_t outcome;
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, uform_dtype_bf16_k, &outcome), uform_status_ok_k);
    CHECK_STATUS(uform_outcome_wait(&outcome, 10), uform_status_ok_k);
    CHECK(check_f32(&buffers, 1.0f)); // a sum over one GPU
    CHECK_STATUS(uform_mesh_all_reduce(mesh, NULL, 0, uform_dtype_f32_k, NULL), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, NULL, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_mesh_all_reduce(mesh, buffers.pointers, count, (uform_dtype_t)-1, &outcome),
                 uform_status_invalid_argument_k);
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_invalid_argument_k);
    uint64_t holes[1] = {0};
    CHECK_STATUS(uform_mesh_all_reduce(mesh, holes, count, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    uform_mesh_free(mesh);

    // Opting in to multicast is not enough: the fake devices report no multicast support.
    setenv("UFORM_ALLOW_MULTICAST", "1", 1);
    uform_mesh_options_t options = {.gpus_per_multimem_domain = 4};
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k && description.gpus_per_multimem_domain == 4);
    unsetenv("UFORM_ALLOW_MULTICAST");
    uform_mesh_free(mesh);
    buffers_free(&buffers);
    uform_executor_free(executor);

    // An executor poisoned by a device fault (a trap; the fake driver's context goes with its last
    // executor): DEVICE_FAULT naming the fault, as every later use of it, though one GPU starts no NCCL.
    executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    uform_call_t trap = {.residency = uform_residency_vram_k, .device = trap_callback};
    CHECK_STATUS(uform_executor_call(executor, &trap, NULL), uform_status_device_fault_k);
    mesh = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, NULL, &mesh), uform_status_device_fault_k);
    CHECK_MESSAGE("uform_mesh_bootstrap: device 0 (ordinal 0) faulted");
    CHECK_MESSAGE("the executor is poisoned");
    CHECK(mesh == NULL);
    uform_executor_free(executor);

    // Two GPUs without NCCL, in one process and in two.
    char directory[] = "/tmp/uform-mesh-fake-XXXXXX";
    CHECK_FATAL(mkdtemp(directory) != NULL);
    CHECK(run_children("no-nccl-two-gpus", 1, directory, "single", 0) == 0);
    CHECK(run_children("no-nccl", 2, directory, "pair", 0) == 0);

#ifdef UFORM_FAKE_NCCL_PATH
    // The NCCL paths on the fake NCCL, one child each, so each loads it afresh with its settings.
    setenv("UFORM_NCCL_LIBRARY", UFORM_FAKE_NCCL_PATH, 1);
    setenv("FAKE_NCCL_DIR", directory, 1);
    CHECK(run_children("fake-nccl-single", 1, directory, "fake-single", 0) == 0);
    setenv("UFORM_MESH_BLOCKING", "0", 1); // collectives on the non-blocking communicators
    CHECK(run_children("fake-nccl-single", 1, directory, "fake-single-nonblocking", 0) == 0);
    setenv("FAKE_NCCL_STALL_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-stalled", 1, directory, "fake-stalled-nonblocking", 0) == 0);
    unsetenv("FAKE_NCCL_STALL_AFTER");
    unsetenv("UFORM_MESH_BLOCKING");
    setenv("FAKE_NCCL_SPLIT_HANG", "1", 1);
    CHECK(run_children("fake-nccl-split-hang", 1, directory, "fake-split-hang", 0) == 0);
    unsetenv("FAKE_NCCL_SPLIT_HANG");
    setenv("FAKE_NCCL_BLOCK_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-blocked", 1, directory, "fake-blocked", 0) == 0);
    unsetenv("FAKE_NCCL_BLOCK_AFTER");
    setenv("FAKE_NCCL_STALL_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-stalled", 1, directory, "fake-stalled", 0) == 0);
    setenv("FAKE_TEST_DEFERRED", "1", 1);
    CHECK(run_children("fake-nccl-stalled", 1, directory, "fake-stalled-deferred", 0) == 0);
    unsetenv("FAKE_TEST_DEFERRED");
    unsetenv("FAKE_NCCL_STALL_AFTER");
    CHECK(run_children("fake-nccl-pair", 2, directory, "fake-pair", 0) == 0);
    char leftover[512];
    snprintf(leftover, sizeof leftover, "%s/fake-pair/run", directory);
    CHECK(access(leftover, F_OK) != 0); // NCCL up, so every process removed its files
    snprintf(leftover, sizeof leftover, "%s/fake-pair/process-1", directory);
    CHECK(access(leftover, F_OK) != 0);
    setenv("FAKE_NCCL_INIT_HANG", "1", 1);
    CHECK(run_children("fake-nccl-init-hang", 1, directory, "fake-hang", 0) == 0);
    unsetenv("FAKE_NCCL_INIT_HANG");
    CHECK(run_children("fake-nccl-early-exit", 1, directory, "fake-early-exit", 0) == 0);
    setenv("FAKE_NCCL_REMOTE_ERROR_AFTER", "1", 1);
    CHECK(run_children("fake-nccl-remote-error", 1, directory, "fake-remote", 0) == 0);
    unsetenv("FAKE_NCCL_REMOTE_ERROR_AFTER");
    setenv("FAKE_NCCL_SYNC", "0", 1);
    CHECK(run_children("fake-nccl-timeout", 1, directory, "fake-timeout", 0) == 0);
    unsetenv("FAKE_NCCL_SYNC");
    unsetenv("UFORM_NCCL_LIBRARY");
    unsetenv("FAKE_NCCL_DIR");
#endif
    if (!check_failures) remove_tree(directory);
}

#endif // UFORM_WITH_CUDA

int main(int argc, char **argv) {
#if UFORM_WITH_CUDA
    mesh_fake_nccl_child = fake_nccl_child;
    int code = 0;
    if (mesh_child_begin(argc, argv, &code)) return code;
#endif
    (void)argc, (void)argv;
    alarm(280);
    if (uform_gpu_status() != uform_status_ok_k) SKIP("no GPU: %s", uform_error_message());
#if UFORM_WITH_CUDA
    CHECK_FATAL(uform_cuda(&cuda) == uform_status_ok_k);
    char name[256] = "";
    CHECK_FATAL(uform_gpu_device_name(0, name, sizeof name) == uform_status_ok_k);
    if (!strstr(name, "UForm Fake GPU")) SKIP("GPU 0 is '%s', not the fake driver's: test_mesh runs real GPUs", name);
    test_fake_driver();
#endif
    CHECK_DONE();
}
