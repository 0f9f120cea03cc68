/**
 *  @file   test_rendezvous.c
 *  @brief  The mesh's directory exchange across real processes, without GPUs: options, runs that
 *          agree (2 to 16 processes, classes, tiers, hosts), mismatches, missing, killed,
 *          duplicate and stale processes. Hostile files: test_rendezvous_hostile.c.
 */
#include "rendezvous_harness.h"

static void test_options(void) {
    uform_mesh_options_t options = {.host_domain_index = 0, .host_domain_count = 2, .directory = root, .job = "ok-job_1.2"};
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_ok_k);
    CHECK_STATUS(uform_rendezvous_check_options(NULL), uform_status_ok_k);
    char const *bad_jobs[] = {"", ".", "..", "a/b", "a b", "../x", "ümlaut", NULL};
    for (size_t i = 0; bad_jobs[i]; ++i) {
        options.job = bad_jobs[i];
        CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
        CHECK_MESSAGE("job");
    }
    char long_job[130];
    memset(long_job, 'j', 129), long_job[129] = '\0';
    options.job = long_job;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    CHECK_MESSAGE("129");
    long_job[128] = '\0';
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_ok_k);
    options.job = NULL;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    options.job = "j", options.directory = NULL;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    CHECK_MESSAGE("directory");
    options.directory = root, options.host_domain_index = 2;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    CHECK_MESSAGE("host_domain_index 2");
    options.host_domain_index = 0, options.timeout_seconds = -1;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    options.timeout_seconds = NAN;
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    options.timeout_seconds = INFINITY; // a bounded join: infinity is refused, and said to be
    CHECK_STATUS(uform_rendezvous_check_options(&options), uform_status_invalid_argument_k);
    CHECK_MESSAGE("timeout_seconds must be zero (120 s) or a finite positive number of seconds, not inf");
    // No peers: no directory needed.
    uform_mesh_options_t alone = {.host_domain_count = 1};
    CHECK_STATUS(uform_rendezvous_check_options(&alone), uform_status_ok_k);
    alone.host_domain_index = 1;
    CHECK_STATUS(uform_rendezvous_check_options(&alone), uform_status_invalid_argument_k);
    // A rendezvous needs two processes and GPU facts.
    uform_rendezvous_facts_t facts = {.gpus_count = 1, .gpu_class = uform_gpu_class_nvidia_hopper_k,
                                      .gpu_floor = uform_gpu_class_nvidia_hopper_k};
    uform_rendezvous_t *rv = NULL;
    CHECK_STATUS(uform_rendezvous_join(&alone, &facts, &rv), uform_status_invalid_argument_k);
    options.timeout_seconds = 1, options.job = "j";
    facts.gpus_count = 0;
    CHECK_STATUS(uform_rendezvous_join(&options, &facts, &rv), uform_status_invalid_argument_k);
    CHECK(rv == NULL);
}

static void test_alone(void) {
    // A run of one process describes itself.
    uform_rendezvous_facts_t alone = {.gpus_count = 3, .gpu_class = uform_gpu_class_nvidia_ampere_k,
                                      .gpu_class_pinned = true, .gpu_floor = uform_gpu_class_nvidia_hopper_k,
                                      .multicast_supported = true, .multicast_allowed = true};
    uform_mesh_description_t description;
    uform_mesh_shape_alone(&alone, &description);
    CHECK(description.gpus_per_host_domain == 3 && description.gpus_per_colocated_domain == 3);
    CHECK(description.gpus_per_multimem_domain == 3 && description.first_gpu_index == 0);
    CHECK(description.gpu_class == uform_gpu_class_nvidia_ampere_k);
    CHECK(description.multimem_tier == uform_multimem_tier_switch_reduced_k);
    alone.multicast_allowed = false, alone.multimem_span = 8;
    uform_mesh_shape_alone(&alone, &description);
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k);
    CHECK(description.gpus_per_multimem_domain == 8);
}

/** The mesh's shape over facts alone (mesh_shape.c), no files: offsets, span, tier, class, and the
 *  hosts that disagree on their GPU counts. */
static void test_shape(void) {
    uform_rendezvous_peer_t peers[4] = {
        {.gpus = 2, .host = 0, .multicast_supported = true, .multicast_allowed = true,
         .gpu_class = uform_gpu_class_nvidia_hopper_k},
        {.gpus = 2, .host = 0, .multicast_supported = true, .multicast_allowed = true},
        {.gpus = 1, .host = 1, .multicast_supported = true, .multicast_allowed = true},
        {.gpus = 3, .host = 1, .multicast_supported = true, .multicast_allowed = true},
    };
    uform_mesh_description_t description;
    CHECK_STATUS(uform_mesh_shape(peers, 4, 2, NULL, &description), uform_status_ok_k);
    CHECK(description.host_domain_index == 2 && description.gpus_per_host_domain == 1);
    CHECK(description.first_gpu_index == 4 && description.gpus_per_colocated_domain == 8);
    CHECK(description.gpus_per_multimem_domain == 4); // derived: 4 GPUs on each host
    CHECK(description.multimem_tier == uform_multimem_tier_switch_reduced_k);
    CHECK(description.gpu_class == uform_gpu_class_nvidia_hopper_k); // process 0's
    peers[3].multicast_allowed = false;
    peers[3].gpus = 2; // host 1 now holds 3, host 0 4: no span can be derived
    CHECK_STATUS(uform_mesh_shape(peers, 4, 3, NULL, &description), uform_status_config_mismatch_k);
    CHECK_MESSAGE("cannot be derived");
    CHECK_MESSAGE("(process 0) has 4");
    CHECK_MESSAGE("(process 2) has 3");
    CHECK(description.gpus_per_colocated_domain == 0); // zeroed on failure
    peers[0].multimem_span = 2; // a given span needs no agreement
    CHECK_STATUS(uform_mesh_shape(peers, 4, 3, NULL, &description), uform_status_ok_k);
    CHECK(description.gpus_per_multimem_domain == 2 && description.first_gpu_index == 5);
    CHECK(description.multimem_tier == uform_multimem_tier_peer_read_k);
    CHECK_STATUS(uform_mesh_shape(peers, 4, 4, NULL, &description), uform_status_invalid_argument_k);
}

static void test_two_agree(void) {
    spec_t specs[2] = {defaults(0, 2, 2), defaults(1, 2, 1)};
    specs[0].timeout = specs[1].timeout = 30;
    result_t results[2];
    double wall = run_group("two", specs, 2, results);
    EXPECT(&results[0], uform_status_ok_k, NULL);
    EXPECT(&results[1], uform_status_ok_k, NULL);
    uform_mesh_description_t const *d0 = &results[0].description, *d1 = &results[1].description;
    CHECK(d0->host_domain_index == 0 && d0->first_gpu_index == 0 && d0->gpus_per_host_domain == 2);
    CHECK(d1->host_domain_index == 1 && d1->first_gpu_index == 2 && d1->gpus_per_host_domain == 1);
    CHECK(d0->gpus_per_colocated_domain == 3 && d1->gpus_per_colocated_domain == 3);
    CHECK(d0->gpus_per_multimem_domain == 3 && d1->gpus_per_multimem_domain == 3); // one host: its GPUs
    CHECK(d0->multimem_tier == uform_multimem_tier_peer_read_k && d1->gpu_class == uform_gpu_class_nvidia_hopper_k);
    CHECK(results[0].blob_sum == results[1].blob_sum && results[0].blob_sum != 0);
    double slowest = fmax(results[0].join_seconds + results[0].blob_seconds,
                          results[1].join_seconds + results[1].blob_seconds);
    printf("bootstrap of two processes: join+blob %.1f ms (slowest process), %.1f ms wall with fork\n",
           slowest * 1e3, wall * 1e3);
    // Joined by the exchange, not by a deadline: well inside the 30 s timeout. A bound of 1 s was a
    // speed check, which a loaded CI machine (sanitizers, load average 10) can fail; speed is bench/'s.
    CHECK(slowest < SLACK_SECONDS);
    // The files are owner-only and no temporary is left.
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/two/process-0", root);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    snprintf(path, sizeof path, "%s/two", root);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
}

static void test_sixteen(void) {
    spec_t specs[16];
    result_t results[16];
    size_t total = 0;
    for (size_t i = 0; i < 16; ++i) specs[i] = defaults(i, 16, i % 3 + 1), total += i % 3 + 1;
    double wall = run_group("sixteen", specs, 16, results);
    size_t first = 0;
    double slowest = 0;
    for (size_t i = 0; i < 16; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.first_gpu_index == first);
        CHECK(results[i].description.gpus_per_colocated_domain == total);
        CHECK(results[i].description.gpus_per_host_domain == i % 3 + 1);
        CHECK(results[i].blob_sum == results[0].blob_sum);
        first += i % 3 + 1;
        slowest = fmax(slowest, results[i].join_seconds);
    }
    printf("bootstrap of sixteen processes: %.1f ms slowest join, %.1f ms wall\n", slowest * 1e3, wall * 1e3);
}

static void test_classes_and_tiers(void) {
    // Describe and dispatch agree: a mesh runs one GPU class, the one every process's executor
    // dispatches as. Processes whose GPUs differ (Blackwell RTX and Hopper, unpinned) dispatch as
    // different classes: CONFIG_MISMATCH on every process, suggesting the class they share.
    spec_t specs[3] = {defaults(0, 3, 1), defaults(1, 3, 1), defaults(2, 3, 1)};
    specs[1].gpu_class = specs[1].floor = uform_gpu_class_nvidia_blackwellrtx_k;
    result_t results[3];
    run_group("meet", specs, 3, results);
    bool suggested = false;
    for (size_t i = 0; i < 3; ++i) {
        EXPECT(&results[i], uform_status_config_mismatch_k, "dispatch as different GPU classes", "nvidia_hopper",
               "nvidia_blackwellrtx");
        suggested = suggested || contains(&results[i], "such as nvidia_ada"); // relayed copies are cut short
    }
    CHECK(suggested);
    // One process pinning Ampere while the others dispatch as Hopper: refused on every process
    // (before, the others described Ampere while their executors dispatched as Hopper).
    specs[0].pinned = true, specs[0].gpu_class = uform_gpu_class_nvidia_ampere_k;
    specs[1] = defaults(1, 3, 1);
    run_group("pin-one", specs, 3, results);
    for (size_t i = 0; i < 3; ++i)
        EXPECT(&results[i], uform_status_config_mismatch_k, "dispatch as different GPU classes",
               "nvidia_ampere (pinned) vs nvidia_hopper (its GPUs' own)");
    // Every process pinning Ampere: the run describes Ampere, as every executor dispatches.
    for (size_t i = 0; i < 3; ++i) specs[i].pinned = true, specs[i].gpu_class = uform_gpu_class_nvidia_ampere_k;
    run_group("pin", specs, 3, results);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.gpu_class == uform_gpu_class_nvidia_ampere_k);
    }
    // Ampere GPUs unpinned beside Hopper GPUs pinned to Ampere: one class, accepted.
    specs[1].pinned = false, specs[1].floor = uform_gpu_class_nvidia_ampere_k;
    run_group("pin-matches-own", specs, 3, results);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.gpu_class == uform_gpu_class_nvidia_ampere_k);
    }
    // Multicast counts only when every process supports it and every one opted in.
    for (size_t i = 0; i < 3; ++i) specs[i] = defaults(i, 3, 1), specs[i].multicast_supported = specs[i].multicast_allowed = true;
    run_group("multicast", specs, 3, results);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.multimem_tier == uform_multimem_tier_switch_reduced_k);
    }
    specs[2].multicast_supported = false;
    run_group("multicast-partial", specs, 3, results);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.multimem_tier == uform_multimem_tier_peer_read_k);
    }
}

static void test_hosts(void) {
    // Two simulated hosts of two processes each, 4 GPUs per host: the derived span is 4.
    spec_t specs[4];
    result_t results[4];
    char const *hosts[4] = {"alpha", "alpha", "beta", "beta"};
    size_t gpus[4] = {1, 3, 2, 2};
    for (size_t i = 0; i < 4; ++i) specs[i] = defaults(i, 4, gpus[i]), specs[i].fake_host = hosts[i];
    run_group("hosts", specs, 4, results);
    size_t first = 0;
    for (size_t i = 0; i < 4; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.gpus_per_multimem_domain == 4);
        CHECK(results[i].description.first_gpu_index == first);
        CHECK(results[i].description.gpus_per_colocated_domain == 8);
        first += gpus[i];
    }
    // Uneven hosts cannot derive one span: every process fails alike...
    specs[3].gpus = 1;
    run_group("hosts-uneven", specs, 4, results);
    for (size_t i = 0; i < 4; ++i) EXPECT(&results[i], uform_status_config_mismatch_k, "gpus_per_multimem_domain", "alpha", "beta");
    // ...unless the span is given.
    for (size_t i = 0; i < 4; ++i) specs[i].span = 2;
    run_group("hosts-given", specs, 4, results);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.gpus_per_multimem_domain == 2);
    }
}

/** Runs two processes where the second differs by `change`; both must fail naming the field. */
static void mismatch_case(char const *job, spec_t second, char const *a, char const *b, char const *c) {
    spec_t specs[2] = {defaults(0, 2, 1), second};
    specs[1].index = 1;
    result_t results[2];
    run_group(job, specs, 2, results);
    for (size_t i = 0; i < 2; ++i) EXPECT(&results[i], uform_status_config_mismatch_k, a, b, c);
}

static void test_mismatches(void) {
    spec_t second = defaults(1, 3, 1); // believes in three processes
    mismatch_case("mismatch-count", second, "host_domain_count", "2 vs 3", "processes 0 and 1");
    second = defaults(1, 2, 1), second.span = 4;
    mismatch_case("mismatch-span", second, "gpus_per_multimem_domain", "0 vs 4", "processes 0 and 1");
    second = defaults(1, 2, 1), second.multicast_allowed = true;
    mismatch_case("mismatch-multicast", second, "UFORM_ALLOW_MULTICAST", "0 and 1", NULL);
    // Pinned classes that differ.
    spec_t first = defaults(0, 2, 1);
    first.pinned = true, first.gpu_class = uform_gpu_class_nvidia_ampere_k;
    second = defaults(1, 2, 1), second.pinned = true, second.gpu_class = uform_gpu_class_nvidia_ada_k;
    spec_t specs[2] = {first, second};
    result_t results[2];
    run_group("mismatch-pins", specs, 2, results);
    for (size_t i = 0; i < 2; ++i)
        EXPECT(&results[i], uform_status_config_mismatch_k, "pin different GPU classes", "nvidia_ampere vs nvidia_ada");
    // A pin the other process's GPUs cannot run.
    specs[0] = defaults(0, 2, 1), specs[0].pinned = true;
    specs[1] = defaults(1, 2, 1), specs[1].gpu_class = specs[1].floor = uform_gpu_class_nvidia_ampere_k;
    run_group("mismatch-pin-unrunnable", specs, 2, results);
    for (size_t i = 0; i < 2; ++i)
        EXPECT(&results[i], uform_status_config_mismatch_k, "process 0 pins GPU class nvidia_hopper",
               "process 1 (nvidia_ampere) cannot run");
    // Derived classes with nothing in common.
    specs[0] = defaults(0, 2, 1);
    specs[1] = defaults(1, 2, 1), specs[1].gpu_class = specs[1].floor = uform_gpu_class_amd_cdna3_k;
    run_group("mismatch-vendors", specs, 2, results);
    for (size_t i = 0; i < 2; ++i)
        EXPECT(&results[i], uform_status_config_mismatch_k, "no GPU class in common", "nvidia_hopper", "amd_cdna3");
    // A process writing another format version: the others refuse its file.
    // Process 1 (which cannot read version-1 files) waits out its timeout and then replaces its
    // facts with a failure record; 1 s let a slow process 0 (a loaded CI machine) meet that record
    // instead of the version-2 facts, so process 1 waits 4 s and process 0 up to 10 s.
    specs[0] = defaults(0, 2, 1), specs[0].timeout = 10;
    specs[1] = defaults(1, 2, 1), specs[1].timeout = 4, specs[1].format_version = 2;
    run_group("mismatch-format", specs, 2, results);
    EXPECT(&results[0], uform_status_corrupt_file_k, "process-1", "format version 2", "version 1");
    CHECK(results[1].status != uform_status_ok_k);
}

static void test_missing(void) {
    // Process 2 never comes: both others fail at the deadline naming it.
    spec_t specs[2] = {defaults(0, 3, 1), defaults(1, 3, 1)};
    specs[0].timeout = specs[1].timeout = 0.5;
    result_t results[2];
    double wall = run_group("missing", specs, 2, results);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT(&results[i], uform_status_timeout_k, "process 2 of 3 did not write its facts", "within 0.5 s");
        CHECK(results[i].join_seconds >= 0.49 && results[i].join_seconds < 0.5 + SLACK_SECONDS);
    }
    printf("missing peer: failed after %.2f s and %.2f s (timeout 0.5 s, wall %.2f s)\n", results[0].join_seconds,
           results[1].join_seconds, wall);
    // Killed before it wrote anything.
    spec_t three[3] = {defaults(0, 3, 1), defaults(1, 3, 1), defaults(2, 3, 1)};
    result_t results3[3];
    for (size_t i = 0; i < 3; ++i) three[i].timeout = 0.5;
    three[2].kill_stage = "start";
    run_group("killed-before", three, 3, results3);
    CHECK(!results3[2].reported);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT(&results3[i], uform_status_timeout_k, "process 2 of 3 did not write its facts");
        CHECK(results3[i].join_seconds < 0.5 + SLACK_SECONDS);
    }
}

static void test_killed(void) {
    char pid_text[256], host_text[160];
    // Killed while writing: its temporary is written and synced, the rename never happens.
    spec_t specs[3] = {defaults(0, 3, 1), defaults(1, 3, 1), defaults(2, 3, 1)};
    result_t results[3];
    for (size_t i = 0; i < 3; ++i) specs[i].timeout = 0.5;
    specs[1].kill_stage = "temporary-written", specs[1].kill_name = "process-1";
    run_group("killed-during", specs, 3, results);
    CHECK(!results[1].reported);
    EXPECT(&results[0], uform_status_timeout_k, "process 1 of 3 did not write its facts");
    EXPECT(&results[2], uform_status_timeout_k, "process 1 of 3 did not write its facts");
    CHECK(results[0].join_seconds < 0.5 + SLACK_SECONDS && results[2].join_seconds < 0.5 + SLACK_SECONDS);
    // Its leftover temporary does not trouble a later run of the same job.
    for (size_t i = 0; i < 3; ++i) specs[i] = defaults(i, 3, 1);
    run_group("killed-during", specs, 3, results);
    for (size_t i = 0; i < 3; ++i) EXPECT(&results[i], uform_status_ok_k, NULL);

    // Killed after its facts are in place: survivors on this host fail at once, naming it. The
    // timeout is long (30 s) so that failing well before it shows the liveness check, not the
    // deadline, even on a loaded machine (with 5 s and a 2 s bound it failed under load).
    // Process 0 pauses 1 s before its last liveness check: process 1 raises SIGKILL right after its
    // rename, but a loaded machine (CI, ASan's slow exit) could otherwise let process 0 read the
    // facts and find the process still running in that window, and then the run completes, which
    // is right for a peer that dies after the check (NCCL finds that one) but not what this case tests.
    for (size_t i = 0; i < 3; ++i) specs[i] = defaults(i, 3, 1), specs[i].timeout = 30;
    specs[1].kill_stage = "renamed", specs[1].kill_name = "process-1";
    specs[0].pause_stage = "liveness", specs[0].pause_seconds = 1.0;
    run_group("killed-after", specs, 3, results);
    CHECK(!results[1].reported);
    snprintf(pid_text, sizeof pid_text, "pid %d)", (int)results[1].pid);
    snprintf(host_text, sizeof host_text, "host \"%s\",", host);
    for (size_t i = 0; i < 3; i += 2) {
        EXPECT(&results[i], uform_status_timeout_k, "process 1 of 3", pid_text, host_text);
        CHECK(results[i].join_seconds < 15.0); // half the timeout: found gone, not timed out
    }
    printf("peer killed after writing: survivors failed after %.3f s and %.3f s (timeout 30 s)\n",
           results[0].join_seconds, results[2].join_seconds);

    // Process 0 killed after writing `run`: nobody can be acknowledged; they fail by the deadline
    // naming the writer of `run`. The timeout (2 s) leaves the others time to read that `run` on a
    // loaded machine: with 0.5 s, one that had not read it yet would fail for another reason.
    for (size_t i = 0; i < 3; ++i) specs[i] = defaults(i, 3, 1), specs[i].timeout = 2;
    specs[0].kill_stage = "renamed", specs[0].kill_name = "run";
    run_group("killed-zero", specs, 3, results);
    CHECK(!results[0].reported);
    snprintf(pid_text, sizeof pid_text, "pid %d on host \"%s\", which is gone", (int)results[0].pid, host);
    for (size_t i = 1; i < 3; ++i) {
        EXPECT(&results[i], uform_status_timeout_k, "not acknowledged by process 0", pid_text);
        CHECK(results[i].join_seconds < 2 + SLACK_SECONDS);
    }
}

static void test_duplicates(void) {
    // Two live processes claim index 1 (index 2 never comes, so nobody can finish first).
    spec_t specs[3] = {defaults(0, 3, 1), defaults(1, 3, 1), defaults(1, 3, 1)};
    result_t results[3];
    // The timeout is long (30 s) so that failing well before it shows the dispute was seen, not the
    // deadline, even on a loaded machine (with 2 s and a 1 s bound, process 0 could time out first).
    for (size_t i = 0; i < 3; ++i) specs[i].timeout = 30;
    run_group("duplicates", specs, 3, results);
    char first[32], second[32];
    snprintf(first, sizeof first, "pid %d ", (int)results[1].pid);
    snprintf(second, sizeof second, "pid %d ", (int)results[2].pid);
    for (size_t i = 1; i < 3; ++i) {
        EXPECT(&results[i], uform_status_corrupt_file_k, "process index 1 is claimed by two processes", first, second);
        CHECK(results[i].join_seconds < SLACK_SECONDS); // at once, not at the 30 s timeout
    }
    EXPECT(&results[0], uform_status_corrupt_file_k, "process index 1 is claimed by two processes");
}

static void test_stale(void) {
    // A finished run of three leaves its files behind.
    spec_t specs[3] = {defaults(0, 3, 4), defaults(1, 3, 4), defaults(2, 3, 4)};
    result_t results[3];
    run_group("stale", specs, 3, results);
    for (size_t i = 0; i < 3; ++i) EXPECT(&results[i], uform_status_ok_k, NULL);
    // A new run of two, whose process 1 starts first and reads the old `run`: it must neither join
    // the old run nor fail on it, and the old process-2 must not count.
    // Process 0 starts 1 s late (0.3 s let a process 1 that itself started late on a loaded machine
    // wait less than the bound below).
    specs[0] = defaults(0, 2, 1), specs[0].delay = 1.0;
    specs[1] = defaults(1, 2, 2);
    run_group("stale", specs, 2, results);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT(&results[i], uform_status_ok_k, NULL);
        CHECK(results[i].description.gpus_per_colocated_domain == 3);
    }
    CHECK(results[1].description.first_gpu_index == 1);
    CHECK(results[1].join_seconds >= 0.25); // it waited for the new process 0
    // Only process 1 restarts: the old run's files do not satisfy it; it fails by the deadline
    // saying the `run` it found is an earlier run's.
    specs[0] = defaults(1, 2, 1), specs[0].timeout = 0.5;
    run_group("stale", specs, 1, results);
    EXPECT(&results[0], uform_status_timeout_k, "not acknowledged by process 0", "is gone", "earlier run");
}

int main(void) {
    rendezvous_begin();
    double start = now();
    RUN(test_options);
    RUN(test_alone);
    RUN(test_shape);
    RUN(test_two_agree);
    RUN(test_sixteen);
    RUN(test_classes_and_tiers);
    RUN(test_hosts);
    RUN(test_mismatches);
    RUN(test_missing);
    RUN(test_killed);
    RUN(test_duplicates);
    RUN(test_stale);
    printf("all rendezvous tests took %.2f s\n", now() - start);
    rendezvous_end();
    CHECK_DONE();
}
