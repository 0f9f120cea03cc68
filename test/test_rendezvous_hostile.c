/**
 *  @file   test_rendezvous_hostile.c
 *  @brief  The mesh's directory exchange against what it must refuse: hostile and forged files
 *          written by hand beside real processes, disputes over an index, rescans before a peer is
 *          declared gone, limits, the strict modes, and lookups by name.
 */
#include "rendezvous_harness.h"

/** Plants a hostile `process-2`, then runs processes 0 and 1 of three: both must fail with
 *  CORRUPT_FILE naming it (process 0 after letting late arrivals in for 2 s; process 1 hears it
 *  from process 0), well before their 10 s timeout. */
static void hostile_case(char const *job, char const *name, char const *why) {
    spec_t specs[2] = {defaults(0, 3, 1), defaults(1, 3, 1)};
    specs[0].timeout = specs[1].timeout = 10;
    result_t results[2];
    run_group(job, specs, 2, results);
    char file[64];
    snprintf(file, sizeof file, "%s/%s'", job, name);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT(&results[i], uform_status_corrupt_file_k, file, why);
        CHECK(results[i].join_seconds < 6.0);
    }
}

static void test_hostile(void) {
    plant("hostile-garbage", "process-2", "\x7f" "ELF garbage\n\n\n", 0600);
    hostile_case("hostile-garbage", "process-2", "garbage");
    plant("hostile-truncated", "process-2", "uform-mesh 1 facts 0123456789abcdef\ntoken 1\nindex 2\n", 0600);
    hostile_case("hostile-truncated", "process-2", "truncated");
    plant("hostile-no-newline", "process-2", "uform-mesh 1 facts 0123456789abcdef\nend", 0600);
    hostile_case("hostile-no-newline", "process-2", "truncated");
    char *huge = malloc(UFORM_RENDEZVOUS_FILE_LIMIT + 100);
    memset(huge, 'x', UFORM_RENDEZVOUS_FILE_LIMIT + 99), huge[UFORM_RENDEZVOUS_FILE_LIMIT + 99] = '\0';
    plant("hostile-huge", "process-2", huge, 0600);
    free(huge);
    hostile_case("hostile-huge", "process-2", "oversized");
    plant("hostile-mode", "process-2", "uform-mesh 1 facts 0123456789abcdef\nend\n", 0666);
    hostile_case("hostile-mode", "process-2", "writable by group or others");
    char path[512], target[512];
    plant("hostile-symlink", "elsewhere", "uform-mesh 1 facts 0123456789abcdef\nend\n", 0600);
    snprintf(path, sizeof path, "%s/hostile-symlink/process-2", root);
    snprintf(target, sizeof target, "%s/hostile-symlink/elsewhere", root);
    CHECK_FATAL(symlink(target, path) == 0);
    hostile_case("hostile-symlink", "process-2", "symbolic link");
    plant("hostile-fifo", "unused", "", 0600);
    snprintf(path, sizeof path, "%s/hostile-fifo/process-2", root);
    CHECK_FATAL(mkfifo(path, 0600) == 0);
    hostile_case("hostile-fifo", "process-2", "not a regular file");
    // Another format version under a foreign nonce is an earlier run's: ignored.
    plant("hostile-old-format", "process-2", "uform-mesh 0 facts 0123456789abcdef\nwhatever\n", 0600);
    spec_t specs[2] = {defaults(0, 2, 1), defaults(1, 2, 1)};
    result_t results[2];
    run_group("hostile-old-format", specs, 2, results);
    for (size_t i = 0; i < 2; ++i) EXPECT(&results[i], uform_status_ok_k, NULL);
    // A garbage `run` stops a process that reads it before process 0 replaced it.
    plant("hostile-run", "run", "not a mesh file\n", 0600);
    specs[0] = defaults(1, 2, 1);
    run_group("hostile-run", specs, 1, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "hostile-run/run'", "garbage");
    // An acknowledgement that is a symbolic link: never followed, never removed.
    plant("hostile-ack", "run",
          "uform-mesh 1 run 00000000000000aa\ntoken 00000000000000bb\ncount 2\nhost elsewhere\nboot_id -\n"
          "pid_namespace 0\npid 1\npid_start 0\nstarted 0\nend\n",
          0600);
    snprintf(path, sizeof path, "%s/hostile-ack/ack-1", root);
    snprintf(target, sizeof target, "%s/hostile-ack/run", root);
    CHECK_FATAL(symlink(target, path) == 0);
    run_group("hostile-ack", specs, 1, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "hostile-ack/ack-1'", "symbolic link");
    // A `run` lacking a key names that key (it used to blame 'pid_start').
    plant("hostile-run-key", "run",
          "uform-mesh 1 run 00000000000000aa\ntoken 00000000000000bb\ncount 2\nhost elsewhere\nboot_id -\n"
          "pid_namespace 0\npid 1\npid_start 0\nend\n",
          0600);
    run_group("hostile-run-key", specs, 1, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "hostile-run-key/run'", "lacks key 'started'");
    CHECK(!contains(&results[0], "pid_start"));
}


/* ---- A hostile second process, writing the files by hand ---- */

static void job_path(char const *job, char const *name, char *path, size_t capacity) {
    int length = snprintf(path, capacity, "%s/%s/%s", root, job, name);
    CHECK_FATAL(length > 0 && (size_t)length < capacity);
}

/** Waits up to 10 s for a file of the job to exist. */
static bool wait_for(char const *job, char const *name) {
    char path[512];
    job_path(job, name, path, sizeof path);
    for (double start = now(); now() - start < 10; uform_sleep_seconds(0.001))
        if (access(path, F_OK) == 0) return true;
    return false;
}

/** The nonce the job's `run` holds, or 0. */
static uint64_t run_nonce(char const *job) {
    char path[512], text[256] = "";
    job_path(job, "run", path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    text[got > 0 ? got : 0] = '\0';
    unsigned long long nonce = 0;
    return sscanf(text, "uform-mesh 1 run %llx", &nonce) == 1 ? (uint64_t)nonce : 0;
}

/** Writes a file as the engine does: a temporary, then a rename; mode 0600. */
static void put(char const *job, char const *name, char const *text) {
    char path[512], temporary[600];
    job_path(job, name, path, sizeof path);
    snprintf(temporary, sizeof temporary, "%s.hostile", path);
    int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return;
    ssize_t written = write(fd, text, strlen(text));
    close(fd);
    if (written == (ssize_t)strlen(text)) rename(temporary, path);
}

/** Facts of the calling process, as the engine writes them, claiming `gpus` GPUs. */
static void facts_of_this_process(char *text, size_t capacity, uint64_t nonce, uint64_t token, size_t index,
                                  size_t count, uint64_t gpus) {
    rv_identity_t identity;
    rv_read_identity(&identity);
    char state;
    uint64_t start = 0;
    rv_read_proc_stat(getpid(), &state, &start);
    snprintf(text, capacity,
             "uform-mesh 1 facts %016" PRIx64 "\ntoken %016" PRIx64 "\nindex %zu\ncount %zu\ngpus %" PRIu64 "\n"
             "gpu_class 3\ngpu_class_pinned 0\ngpu_floor 3\nmultimem_span 0\nmulticast_supported 0\n"
             "multicast_allowed 0\nhost %s\nboot_id %s\npid_namespace %" PRIu64 "\npid %d\npid_start %" PRIu64 "\n"
             "started 0\nend\n",
             nonce, token, index, count, gpus, identity.host, identity.boot_id[0] ? identity.boot_id : "-",
             identity.pid_namespace, (int)getpid(), start);
}

/** Joins as process 1 of 2 by hand, waits for the acknowledgement, then replaces its facts with a
 *  failure record carrying a forged message (escape bytes and quotes) and exits at once. */
static void fail_after_acknowledged(char const *job) {
    if (!wait_for(job, "run")) return;
    uint64_t nonce = run_nonce(job);
    char text[1024];
    facts_of_this_process(text, sizeof text, nonce, 0x5eed, 1, 2, 1);
    put(job, "process-1", text);
    if (!wait_for(job, "ack-1")) return;
    snprintf(text, sizeof text,
             "uform-mesh 1 failed %016" PRIx64 "\nindex 1\ntoken %016x\nstatus 14\npid %d\nhost forger\n"
             "message INJECTED TEXT \x1b[31m \"and quotes\"\nend\n",
             nonce, 0x5eed, (int)getpid());
    put(job, "process-1", text);
}

static void test_rescan_before_gone(void) {
    // Process 0 reads the peer's facts (the set is complete), then pauses before checking that its
    // peers still run; meanwhile the peer publishes a failure and exits. Process 0 must report that
    // failure, quoted as the peer's text, not "wrote its facts and is gone".
    spec_t specs[1] = {defaults(0, 2, 1)};
    specs[0].pause_stage = "liveness";
    specs[0].skip_blob = true;
    result_t results[1];
    hostile = fail_after_acknowledged;
    run_group("rescan", specs, 1, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "process 1 (host \"forger\", pid ",
           ") failed with corrupt_file: \"INJECTED TEXT \\x1b[31m \\\"and quotes\\\"\"");
    CHECK(!contains(&results[0], "is gone"));
    CHECK(!contains(&results[0], "\x1b"));
}

/** Writes a second `run` with a new nonce and a token of its own once process 1 is acknowledged. */
static void rewrite_run(char const *job) {
    if (!wait_for(job, "ack-1")) return;
    char text[512];
    snprintf(text, sizeof text,
             "uform-mesh 1 run 00000000feedf00d\ntoken 000000000000abcd\ncount 3\nhost forger\nboot_id -\n"
             "pid_namespace 0\npid %d\npid_start 0\nstarted 0\nend\n",
             (int)getpid());
    put(job, "run", text);
}

/** Claims process 1 of 2 with 2^30 GPUs under the run's nonce. */
static void claim_a_billion_gpus(char const *job) {
    if (!wait_for(job, "run")) return;
    char text[1024];
    facts_of_this_process(text, sizeof text, run_nonce(job), 0xb111, 1, 2, (uint64_t)1 << 30);
    put(job, "process-1", text);
    uform_sleep_seconds(1); // alive while it is read
}

static void test_forgeries(void) {
    // A rewritten `run` (new nonce) is noticed at once by process 0 (a second claimant of index 0)
    // and by the acknowledged process 1, not after the timeout.
    spec_t specs[2] = {defaults(0, 3, 1), defaults(1, 3, 1)};
    specs[0].timeout = specs[1].timeout = 10;
    result_t results[2];
    hostile = rewrite_run;
    run_group("forged-run", specs, 2, results);
    char forger[32];
    snprintf(forger, sizeof forger, "pid %d", (int)results[0].pid);
    EXPECT(&results[0], uform_status_corrupt_file_k, "process index 0 is claimed by two processes", forger, "forger");
    CHECK(results[0].join_seconds < 5);
    EXPECT(&results[1], uform_status_corrupt_file_k, "forged-run/");
    CHECK(contains(&results[1], "rewritten under another nonce") || contains(&results[1], "claimed by two processes"));
    CHECK(results[1].join_seconds < 5);
    // A claim of 2^30 GPUs is refused when read, long before NCCL.
    spec_t zero[1] = {defaults(0, 2, 1)};
    hostile = claim_a_billion_gpus;
    run_group("forged-gpus", zero, 1, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "forged-gpus/process-1'", "claims 1073741824 GPUs",
           "1 to 1024");
}

/** Plants `process-2` as the facts of the calling (live) process under an earlier run's nonce. */
static void plant_live_claim(char const *job) {
    char text[1024];
    facts_of_this_process(text, sizeof text, 0x0ddba11, 0x11fe, 2, 3, 1);
    plant(job, "process-2", text, 0600);
}

static void test_disputes(void) {
    // Two processes claim index 0 (and index 3 never comes, so nobody can finish first): every
    // process fails at once naming both claimants, not only the claimants.
    spec_t specs[4] = {defaults(0, 4, 1), defaults(0, 4, 1), defaults(1, 4, 1), defaults(2, 4, 1)};
    for (size_t i = 0; i < 4; ++i) specs[i].timeout = 10;
    result_t results[4];
    run_group("dispute-zero", specs, 4, results);
    char first[32], second[32];
    snprintf(first, sizeof first, "pid %d ", (int)results[0].pid);
    snprintf(second, sizeof second, "pid %d ", (int)results[1].pid);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT(&results[i], uform_status_corrupt_file_k, "process index 0 is claimed by two processes", first, second);
        CHECK(results[i].join_seconds < 5); // far below the 10 s timeout
    }
    printf("two claimants of index 0: every process failed within %.2f, %.2f, %.2f and %.2f s (timeout 10 s)\n",
           results[0].join_seconds, results[1].join_seconds, results[2].join_seconds, results[3].join_seconds);
    // A stale `process-2` whose PID is alive (this test's own): every process fails naming both.
    plant_live_claim("dispute-stale");
    for (size_t i = 0; i < 3; ++i) specs[i] = defaults(i, 3, 1), specs[i].timeout = 10;
    run_group("dispute-stale", specs, 3, results);
    snprintf(first, sizeof first, "pid %d ", (int)getpid());
    snprintf(second, sizeof second, "pid %d ", (int)results[2].pid);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT(&results[i], uform_status_corrupt_file_k, "process index 2 is claimed by two processes", first, second);
        CHECK(results[i].join_seconds < 5);
    }
    // The dispute is removed by its writer: a later run of the job is not troubled by it.
    char path[512];
    job_path("dispute-stale", "dispute", path, sizeof path);
    CHECK(access(path, F_OK) != 0);
}

static void test_limits(void) {
    // Counts above the documented maximum are refused at once.
    uform_mesh_options_t options = {.host_domain_index = 0, .host_domain_count = 4194304, .directory = root,
                                    .job = "limits", .timeout_seconds = 1};
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    CHECK_MESSAGE("above the maximum of 65536 processes");
    options.host_domain_count = (size_t)1 << 40;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    options.host_domain_count = UFORM_MESH_PROCESSES_MAX;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_ok_k);
    // At the maximum, with a 1 s timeout, process 0 alone and another process alone each fail by
    // the deadline (not seconds after it: it took 7.35 s when a poll cost grew with the count), with
    // little memory. The bound leaves room for a loaded CI machine, not for a poll per peer.
    spec_t specs[1] = {defaults(0, UFORM_MESH_PROCESSES_MAX, 1)};
    specs[0].timeout = 1;
    result_t results[1];
    run_group("limits", specs, 1, results);
    EXPECT(&results[0], uform_status_timeout_k, "processes 1-65535 of 65536 did not write their facts within 1 s");
    CHECK(results[0].join_seconds < 1 + SLACK_SECONDS / 2);
    CHECK(results[0].max_resident_kib < 256 * 1024);
    printf("65536 processes, process 0 alone: TIMEOUT after %.3f s (timeout 1 s), %ld KiB resident at most\n",
           results[0].join_seconds, results[0].max_resident_kib);
    specs[0] = defaults(4464, UFORM_MESH_PROCESSES_MAX, 1), specs[0].timeout = 1;
    run_group("limits-other", specs, 1, results);
    EXPECT(&results[0], uform_status_timeout_k, "of 65536 was not acknowledged by process 0 within 1 s");
    CHECK(results[0].join_seconds < 1 + SLACK_SECONDS / 2);
}

/** Joins as process 1 of 2 in this process with a short timeout; returns the status. */
static uform_status_t join_here(char const *directory, char const *job, double timeout) {
    uform_mesh_options_t options = {.host_domain_index = 1, .host_domain_count = 2, .directory = directory,
                                    .job = job, .timeout_seconds = timeout};
    uform_rendezvous_facts_t facts = {.gpus_count = 1, .gpu_class = uform_gpu_class_nvidia_hopper_k,
                                      .gpu_floor = uform_gpu_class_nvidia_hopper_k};
    uform_rendezvous_t *rv = NULL;
    uform_status_t status = uform_rendezvous_join(&options, &facts, &rv);
    uform_rendezvous_leave(rv, false);
    return status;
}

static void test_strict_modes(void) {
    char path[512], target[512];
    // A job directory that is a symbolic link: refused, saying so (it used to say "is not a directory").
    snprintf(target, sizeof target, "%s/strict-real", root);
    CHECK_FATAL(mkdir(target, 0700) == 0);
    snprintf(path, sizeof path, "%s/strict-link", root);
    CHECK_FATAL(symlink(target, path) == 0);
    CHECK_STATUS(join_here(root, "strict-link", 0.2), uform_status_corrupt_file_k);
    CHECK_MESSAGE("mesh job directory");
    CHECK_MESSAGE("strict-link' is a symbolic link");
    // Writable by others: refused, with the mode.
    snprintf(path, sizeof path, "%s/strict-open", root);
    CHECK_FATAL(mkdir(path, 0700) == 0 && chmod(path, 0777) == 0);
    CHECK_STATUS(join_here(root, "strict-open", 0.2), uform_status_corrupt_file_k);
    CHECK_MESSAGE("is writable by group or others (mode 0777)");
    // A symbolic link of this user in `directory` is followed; the job then times out as usual.
    snprintf(path, sizeof path, "%s/own-link", root);
    CHECK_FATAL(symlink(target, path) == 0);
    CHECK_STATUS(join_here(path, "strict-follow", 0.2), uform_status_timeout_k);
    if (geteuid() != 0) {
        // Not root: a directory of root's stands for another user's.
        CHECK_STATUS(join_here("/", "usr", 0.2), uform_status_corrupt_file_k);
        CHECK_MESSAGE("usr' is owned by uid 0, not by this process's effective user");
        printf("strict modes: not root, so files of another user could not be planted; those checks run as root\n");
        return;
    }
    // Owned by another user (uid 65534): refused.
    snprintf(path, sizeof path, "%s/strict-other", root);
    CHECK_FATAL(mkdir(path, 0700) == 0 && chown(path, 65534, 65534) == 0);
    CHECK_STATUS(join_here(root, "strict-other", 0.2), uform_status_corrupt_file_k);
    CHECK_MESSAGE("strict-other' is owned by uid 65534, not by this process's effective user (uid 0)");
    // A symbolic link in `directory` planted by another user: never followed.
    snprintf(path, sizeof path, "%s/planted-link", root);
    CHECK_FATAL(symlink(target, path) == 0 && lchown(path, 65534, 65534) == 0);
    CHECK_STATUS(join_here(path, "strict-planted", 0.2), uform_status_corrupt_file_k);
    CHECK_MESSAGE("'planted-link' is a symbolic link owned by uid 65534");
    // Files of another user inside the job directory are never deleted, truncated or replaced.
    static char big[100 * 1024];
    memset(big, 'x', sizeof big - 1), big[sizeof big - 1] = '\0';
    plant("strict-files", "process-1", big, 0600);
    plant("strict-files", "ack-1", "someone else's\n", 0600);
    job_path("strict-files", "process-1", path, sizeof path);
    job_path("strict-files", "ack-1", target, sizeof target);
    CHECK_FATAL(chown(path, 65534, 65534) == 0 && chown(target, 65534, 65534) == 0);
    spec_t specs[2] = {defaults(0, 2, 1), defaults(1, 2, 1)};
    specs[0].timeout = specs[1].timeout = 1;
    result_t results[2];
    run_group("strict-files", specs, 2, results);
    EXPECT(&results[1], uform_status_corrupt_file_k, "strict-files/process-1'", "owned by uid 65534");
    CHECK(results[0].status != uform_status_ok_k);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == (off_t)sizeof big - 1 && st.st_uid == 65534);
    CHECK(stat(target, &st) == 0 && st.st_size == 15 && st.st_uid == 65534);
    // Process 0 meets another user's `ack-1`: it refuses to replace it.
    unlink(path);
    // Both fail at once here (CORRUPT_FILE), so a long timeout costs nothing; 1 s let a process 0
    // that a loaded machine kept waiting time out before process 1's facts came.
    specs[0].timeout = specs[1].timeout = 10;
    specs[1].delay = 0.3; // after process 0 replaced the first run's `run`
    run_group("strict-files", specs, 2, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "strict-files/ack-1'", "uid 65534");
    EXPECT(&results[1], uform_status_corrupt_file_k, "strict-files/ack-1'", "owned by uid 65534");
    CHECK(stat(target, &st) == 0 && st.st_size == 15 && st.st_uid == 65534);
}

static void test_lookups_by_name(void) {
    // 10,000 garbage files claiming indices beyond the count are never read, so they neither slow
    // nor fail a run (each poll used to list and parse them all).
    char path[512], name[64];
    plant("many-stale", "unused", "", 0600);
    for (size_t i = 2; i < 10002; ++i) {
        snprintf(name, sizeof name, "process-%zu", i);
        job_path("many-stale", name, path, sizeof path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        CHECK_FATAL(fd >= 0 && write(fd, "garbage\n", 8) == 8);
        close(fd);
    }
    // Temporaries of a killed writer of this boot are removed; one of a live writer is kept.
    rv_identity_t identity;
    rv_read_identity(&identity);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char dead_temporary[160], live_temporary[160];
    snprintf(dead_temporary, sizeof dead_temporary, ".tmp.process-1.%.8s-%" PRIx64 ".%d.0123456789abcdef",
             identity.boot_id, identity.pid_namespace, (int)dead);
    snprintf(live_temporary, sizeof live_temporary, ".tmp.process-1.%.8s-%" PRIx64 ".%d.0123456789abcdef",
             identity.boot_id, identity.pid_namespace, (int)getpid());
    plant("many-stale", dead_temporary, "half", 0600);
    plant("many-stale", live_temporary, "half", 0600);
    spec_t specs[2] = {defaults(0, 2, 1), defaults(1, 2, 1)};
    specs[0].remove_files = specs[1].remove_files = true;
    result_t results[2];
    run_group("many-stale", specs, 2, results);
    for (size_t i = 0; i < 2; ++i) EXPECT(&results[i], uform_status_ok_k, NULL);
    printf("two processes beside 10,000 stale files: joined in %.1f and %.1f ms\n", results[0].join_seconds * 1e3,
           results[1].join_seconds * 1e3);
    job_path("many-stale", dead_temporary, path, sizeof path);
    CHECK(access(path, F_OK) != 0);
    job_path("many-stale", live_temporary, path, sizeof path);
    CHECK(access(path, F_OK) == 0);
    // Each process removed what it wrote once every peer had read it.
    char const *written[] = {"run", "complete", "process-0", "process-1", "ack-1", "blob-nccl-id", "dispute"};
    for (size_t i = 0; i < sizeof written / sizeof written[0]; ++i) {
        job_path("many-stale", written[i], path, sizeof path);
        if (access(path, F_OK) == 0) fprintf(stderr, "left behind: %s\n", written[i]);
        CHECK(access(path, F_OK) != 0);
    }
}

int main(void) {
    rendezvous_begin();
    double start = now();
    RUN(test_hostile);
    RUN(test_rescan_before_gone);
    RUN(test_forgeries);
    RUN(test_disputes);
    RUN(test_limits);
    RUN(test_strict_modes);
    RUN(test_lookups_by_name);
    printf("all hostile rendezvous tests took %.2f s\n", now() - start);
    rendezvous_end();
    CHECK_DONE();
}
