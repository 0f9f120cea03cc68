/**
 *  @file   test_mesh.c
 *  @brief  Meshes: every error path that needs no GPU, always; then, with GPUs, both shapes of a
 *          run (one process over every GPU, and one process per GPU, started by this test), a
 *          mismatched pair failing on both sides, and a peer dying between all-reduces. The same API
 *          on the fake driver and the fake NCCL: test_mesh_faults.c.
 *
 *      test_mesh                       the whole test (GPU parts skip with 77 without a GPU)
 *      test_mesh --child ROLE ...      one process of a multi-process shape (started by the test)

 */
#include "mesh_harness.h"

/* ---- Without a GPU ---- */

static void test_arguments(void) {
    uform_mesh_t mesh = (uform_mesh_t)(uintptr_t)0x1234, untouched = mesh;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, NULL, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("mesh is NULL");
    CHECK_STATUS(uform_mesh_bootstrap(NULL, NULL, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("VRAM executor");
    CHECK_MESSAGE("NULL (inline)");
    CHECK(mesh == untouched);
    uform_executor_t ram = NULL;
    CHECK_STATUS(uform_executor_for_ram(NULL, 1, 0, &ram), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_bootstrap(ram, NULL, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("RAM executor");
    uform_mesh_options_t alone = {.host_domain_count = 1};
    CHECK_STATUS(uform_mesh_bootstrap(ram, &alone, &mesh), uform_status_invalid_argument_k);
    CHECK(mesh == untouched);
    uform_executor_free(ram);

    // Options are checked before the executor, so these read the same on every machine.
    uform_mesh_options_t options = {.host_domain_index = 0, .host_domain_count = 2, .directory = NULL, .job = "j"};
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("directory is required");
    options.directory = "/tmp", options.job = "..";
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("job must not be '..'");
    options.job = "a/b";
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("[A-Za-z0-9._-]");
    options.job = "ok", options.host_domain_index = 2;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("host_domain_index 2 is not below host_domain_count 2");
    options.host_domain_index = 0, options.timeout_seconds = -1;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("timeout_seconds");
    // Counts above the documented maximum are refused at once (4,194,304 used to run past its
    // timeout with gigabytes resident).
    options.timeout_seconds = 1, options.host_domain_count = 4194304;
    CHECK_STATUS(uform_mesh_bootstrap(NULL, &options, &mesh), uform_status_invalid_argument_k);
    CHECK_MESSAGE("above the maximum of 65536 processes (UFORM_MESH_PROCESSES_MAX)");
    options.host_domain_count = 2;
    CHECK(mesh == untouched);

    // Describe zeroes its output on failure.
    uform_mesh_description_t description;
    memset(&description, 0xAB, sizeof description);
    CHECK_STATUS(uform_mesh_describe(NULL, &description), uform_status_invalid_argument_k);
    uform_mesh_description_t zero = {0};
    CHECK(memcmp(&description, &zero, sizeof zero) == 0);
    CHECK_STATUS(uform_mesh_describe(NULL, NULL), uform_status_invalid_argument_k);
    uform_mesh_free(NULL);

    // All-reduce on no mesh: refused, and an outcome handed in is finished with the same status.
    uint64_t buffers[1] = {0};
    CHECK_STATUS(uform_mesh_all_reduce(NULL, buffers, 1, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    uform_outcome_t outcome;
    memset(&outcome, 0, sizeof outcome);
    CHECK_STATUS(uform_mesh_all_reduce(NULL, buffers, 1, uform_dtype_f32_k, &outcome), uform_status_invalid_argument_k);
    void *host_buffers[1] = {&outcome};
    CHECK_STATUS(uform_mesh_all_reduce_host(NULL, host_buffers, 1, uform_dtype_f32_k, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("uform_mesh_all_reduce_host: mesh is NULL");
    CHECK_STATUS(uform_outcome_poll(&outcome), uform_status_invalid_argument_k);
    CHECK(strstr(outcome.message, "mesh is NULL") != NULL);
}

static void test_nccl_loader(void) {
    // Multicast stays off: whatever the environment said, loading NCCL forces NCCL_NVLS_ENABLE=0
    // unless the user opted in.
    char const *opted_in = getenv("UFORM_ALLOW_MULTICAST");
    bool opt_in = opted_in && strcmp(opted_in, "1") == 0;
    if (!opt_in) setenv("NCCL_NVLS_ENABLE", "1", 1);
    uform_nccl_t const *nccl = NULL;
    uform_status_t status = uform_nccl(&nccl);
    if (status == uform_status_ok_k) {
        CHECK(nccl && nccl->version >= 21400);
        printf("NCCL %d loaded\n", nccl ? nccl->version : 0);
    }
    else {
        CHECK(status == uform_status_unsupported_k);
        CHECK(strstr(uform_error_message(), "libnccl.so.2") || strstr(uform_error_message(), "without CUDA"));
        printf("NCCL unavailable: %s\n", uform_error_message());
    }
    if (!opt_in && UFORM_WITH_CUDA) {
        char const *value = getenv("NCCL_NVLS_ENABLE");
        CHECK(value && strcmp(value, "0") == 0);
    }
    // The restated configuration prefix keeps NCCL's layout: size, magic, version, blocking.
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_NONBLOCKING;
    CHECK(config.size == sizeof config && config.magic == 0xcafebeefu && config.version == 21400u && config.blocking == 0);
    CHECK(offsetof(uform_nccl_config_t, blocking) == 16 && sizeof(uform_nccl_unique_id_t) == 128);
}

#if UFORM_WITH_CUDA

static void test_one_process(size_t gpus) {
    int32_t ordinals[16];
    for (size_t i = 0; i < gpus; ++i) ordinals[i] = (int32_t)i;
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = gpus};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, 0, 0, &executor), uform_status_ok_k);
    if (!executor) return;
    uform_mesh_t mesh = NULL;
    uform_mesh_options_t options = {.timeout_seconds = 60};
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    if (!mesh) {
        uform_executor_free(executor);
        return;
    }
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_host_domain == gpus && description.gpus_per_colocated_domain == gpus);
    CHECK(description.gpus_per_multimem_domain == gpus && description.host_domain_index == 0);
    CHECK(description.first_gpu_index == 0 && description.multimem_tier == uform_multimem_tier_peer_read_k);
    CHECK(description.gpu_class == own_class_of(0));
    // A second mesh on the same executor is refused.
    uform_mesh_t second = NULL;
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &second), uform_status_invalid_argument_k);
    CHECK_MESSAGE("already carries a mesh");
    exercise(executor, mesh, "one process", (size_t)1 << 22); // 16 MiB of f32
    uform_mesh_free(mesh);
    // Freed: the executor takes a mesh again, with a given span.
    options.gpus_per_multimem_domain = 1;
    CHECK_STATUS(uform_mesh_bootstrap(executor, &options, &mesh), uform_status_ok_k);
    CHECK_STATUS(uform_mesh_describe(mesh, &description), uform_status_ok_k);
    CHECK(description.gpus_per_multimem_domain == 1);
    uform_mesh_free(mesh);
    uform_executor_free(executor);
}

/** Device call: device 0 sleeps `value` nanoseconds on its stream (the engine's sleep kernel). */
static void test_many_processes(size_t gpus) {
    char directory[] = "/tmp/uform-mesh-XXXXXX";
    CHECK_FATAL(mkdtemp(directory) != NULL);
    double start = now();
    CHECK(run_children("agree", gpus, directory, "agree", 0) == 0);
    printf("%zu processes over one GPU each: %.2f s including start-up\n", gpus, now() - start);
    CHECK(run_children("mismatch", 2, directory, "mismatch", 0) == 0);
    CHECK(run_children("death", 2, directory, "death", 1) == 0);
    if (!check_failures) remove_tree(directory);
}

/** The same API on the fake driver (test/gpu/fake_cuda.c): a run of one GPU needs no NCCL and its
 *  all-reduce is the identity; runs of two GPUs without NCCL fail with UNSUPPORTED everywhere. */

#endif // UFORM_WITH_CUDA

int main(int argc, char **argv) {
#if UFORM_WITH_CUDA
    int code = 0;
    if (mesh_child_begin(argc, argv, &code)) return code;
#else
    setvbuf(stdout, NULL, _IOLBF, 0);
#endif
    (void)argc, (void)argv;
    alarm(280);
    test_arguments();
    test_nccl_loader();
    if (uform_gpu_status() != uform_status_ok_k) {
        if (check_failures) CHECK_DONE();
        SKIP("no GPU: %s", uform_error_message());
    }
#if UFORM_WITH_CUDA
    size_t gpus = 0;
    CHECK_FATAL(uform_gpu_devices(NULL, 0, &gpus) == uform_status_ok_k);
    if (gpus > 16) gpus = 16;
    CHECK_FATAL(uform_cuda(&cuda) == uform_status_ok_k);
    char name[256] = "";
    CHECK_FATAL(uform_gpu_device_name(0, name, sizeof name) == uform_status_ok_k);
    if (strstr(name, "UForm Fake GPU")) {
        printf("the fake driver: test_mesh_faults runs the mesh on it (ctest test_mesh_fake)\n");
        CHECK_DONE();
    }
    test_one_process(gpus);
    if (uform_nccl(NULL) != uform_status_ok_k) {
        printf("NCCL is missing: the multi-process shapes need it: %s\n", uform_error_message());
        ++check_failures;
    }
    else if (gpus >= 2) test_many_processes(gpus);
    else printf("one GPU: the multi-process shapes need two or more; not run\n");
#endif
    CHECK_DONE();
}
