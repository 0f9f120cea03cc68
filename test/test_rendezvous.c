/**
 *  @file   test_rendezvous.c
 *  @brief  The mesh's directory exchange across real processes, without GPUs: each test forks 2 to
 *          16 children over a fresh temporary directory; each child joins with invented GPU facts
 *          and reports its status, message and description through a pipe.
 */
#define _GNU_SOURCE // `nftw`
#include "check.h"
#include "mesh_shape.h"
#include "rendezvous_private.h"

#include <sys/resource.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 16

static char root[256];    // the temporary directory every test works under
static char host[128];    // this machine's host name, as messages name it

static double now(void) { return uform_now_seconds(); }

/** How late a process may finish past what it waits for (a deadline, or nothing) before a test calls
 *  it wrong. Bounds here tell "failed at its deadline" or "at once" from "waited a timeout it should
 *  not have" (or hung), never how fast: CI runs these children under sanitizers on a loaded 2-core
 *  machine (load average 10 and more), where a process can wait seconds for a core. */
#define SLACK_SECONDS 5.0

/** What one child does. */
typedef struct spec_t {
    size_t index, count;
    size_t gpus;
    uform_gpu_class_t gpu_class, floor;
    bool pinned;
    size_t span;
    bool multicast_supported, multicast_allowed;
    uint32_t format_version;
    double timeout, delay;
    char const *kill_stage, *kill_name; // SIGKILL itself at this hook point
    char const *fake_host;              // simulate another host
    bool skip_blob;
    bool remove_files;                  // leave with its files removed, after the parent's release
    char const *pause_stage;            // pause the first time this hook point is reached
    double pause_seconds;               // how long (0: 0.3 s)
} spec_t;

/** What one child reports. */
typedef struct result_t {
    int reported; // 0 when the child died without reporting
    uform_status_t status;
    char message[512];
    uform_mesh_description_t description;
    double join_seconds, blob_seconds;
    unsigned blob_sum;
    pid_t pid;
    long max_resident_kib;
} result_t;

static spec_t defaults(size_t index, size_t count, size_t gpus) {
    spec_t spec = {.index = index, .count = count, .gpus = gpus, .gpu_class = uform_gpu_class_nvidia_hopper_k,
                   .floor = uform_gpu_class_nvidia_hopper_k, .timeout = 5.0};
    return spec;
}

static char const *kill_stage, *kill_name, *pause_stage;
static double pause_seconds;
static void kill_hook(char const *stage, char const *name) {
    if (kill_stage && strcmp(stage, kill_stage) == 0 && strcmp(name, kill_name) == 0) raise(SIGKILL);
    if (pause_stage && strcmp(stage, pause_stage) == 0) {
        pause_stage = NULL;
        uform_sleep_seconds(pause_seconds > 0 ? pause_seconds : 0.3);
    }
}

/** Children stay alive, as mesh processes do through NCCL's start, until the parent has every
 *  report: they read this pipe until the parent closes it. */
static int release_fd = -1;

static void child(char const *job, spec_t const *spec, int fd) {
    alarm(30);
    if (spec->delay > 0) {
        struct timespec pause = {.tv_sec = (time_t)spec->delay,
                                 .tv_nsec = (long)((spec->delay - floor(spec->delay)) * 1e9)};
        nanosleep(&pause, NULL);
    }
    if (spec->kill_stage && strcmp(spec->kill_stage, "start") == 0) raise(SIGKILL);
    if (spec->kill_stage || spec->pause_stage) {
        kill_stage = spec->kill_stage, kill_name = spec->kill_name, pause_stage = spec->pause_stage;
        pause_seconds = spec->pause_seconds;
        uform_rendezvous_test_hook = kill_hook;
    }
    uform_mesh_options_t options = {.host_domain_index = spec->index, .host_domain_count = spec->count,
                                    .gpus_per_multimem_domain = spec->span, .directory = root, .job = job,
                                    .timeout_seconds = spec->timeout};
    uform_rendezvous_facts_t facts = {.gpus_count = spec->gpus, .gpu_class = spec->gpu_class,
                                      .gpu_class_pinned = spec->pinned, .gpu_floor = spec->floor,
                                      .multimem_span = spec->span, .multicast_supported = spec->multicast_supported,
                                      .multicast_allowed = spec->multicast_allowed,
                                      .format_version = spec->format_version};
    if (spec->fake_host) snprintf(facts.host, sizeof facts.host, "%s", spec->fake_host);
    result_t result = {.reported = 1, .pid = getpid()};
    uform_rendezvous_t *rv = NULL;
    double start = now();
    result.status = uform_rendezvous_join(&options, &facts, &rv);
    result.join_seconds = now() - start;
    if (result.status == uform_status_ok_k) result.status = uform_mesh_shape_of_run(rv, &result.description);
    if (result.status == uform_status_ok_k && !spec->skip_blob) {
        unsigned char blob[128];
        for (size_t i = 0; i < sizeof blob; ++i) blob[i] = spec->index == 0 ? (unsigned char)(i * 7 + 3) : 0;
        start = now();
        result.status = uform_rendezvous_share_blob(rv, "nccl-id", blob, sizeof blob);
        result.blob_seconds = now() - start;
        for (size_t i = 0; i < sizeof blob; ++i) result.blob_sum = result.blob_sum * 31 + blob[i];
    }
    if (result.status != uform_status_ok_k) snprintf(result.message, sizeof result.message, "%s", uform_error_message());
    if (!spec->remove_files) uform_rendezvous_leave(rv, false);
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) == 0) result.max_resident_kib = usage.ru_maxrss;
    ssize_t written = write(fd, &result, sizeof result);
    close(fd);
    char byte;
    while (read(release_fd, &byte, 1) < 0 && errno == EINTR) {}
    if (spec->remove_files) uform_rendezvous_leave(rv, true); // every peer read everything by now
    exit(written == (ssize_t)sizeof result ? 0 : 3);
}

/** A hostile second process, run (when set) beside the children of the next `run_group`. */
static void (*hostile)(char const *job) = NULL;

/** Runs one child per spec at once and collects every report (a killed child reports nothing). */
static double run_group(char const *job, spec_t const *specs, size_t count, result_t *results) {
    int fds[MAX_CHILDREN], release[2];
    CHECK_FATAL(pipe(release) == 0);
    release_fd = release[0];
    double start = now();
    pid_t hostile_pid = -1;
    if (hostile) {
        fflush(NULL);
        hostile_pid = fork();
        CHECK_FATAL(hostile_pid >= 0);
        if (hostile_pid == 0) {
            alarm(30);
            hostile(job);
            _exit(0);
        }
        hostile = NULL;
    }
    for (size_t i = 0; i < count; ++i) {
        int pipe_fds[2];
        CHECK_FATAL(pipe(pipe_fds) == 0);
        fflush(NULL);
        pid_t pid = fork();
        CHECK_FATAL(pid >= 0);
        if (pid == 0) {
            for (size_t j = 0; j < i; ++j) close(fds[j]);
            close(pipe_fds[0]);
            close(release[1]);
            child(job, &specs[i], pipe_fds[1]);
        }
        close(pipe_fds[1]);
        fds[i] = pipe_fds[0];
        memset(&results[i], 0, sizeof results[i]);
        results[i].pid = pid;
    }
    for (size_t i = 0; i < count; ++i) {
        result_t report;
        size_t got = 0;
        while (got < sizeof report) {
            ssize_t n = read(fds[i], (char *)&report + got, sizeof report - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
        close(fds[i]);
        if (got == sizeof report) results[i] = report;
    }
    double wall = now() - start;
    close(release[0]);
    close(release[1]);
    for (size_t i = 0; i < count; ++i) {
        int wait_status = 0;
        waitpid(results[i].pid, &wait_status, 0);
        if (results[i].reported) CHECK(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0);
    }
    if (hostile_pid > 0) waitpid(hostile_pid, NULL, 0);
    return wall;
}

static bool contains(result_t const *result, char const *needle) { return strstr(result->message, needle) != NULL; }

#define EXPECT(result, expected_status, ...)                                                                    \
    do {                                                                                                         \
        result_t const *r_ = (result);                                                                           \
        if (!r_->reported || r_->status != (expected_status)) {                                                  \
            fprintf(stderr, "%s:%d: pid %d reported=%d status %s, expected %s: %s\n", __FILE__, __LINE__,        \
                    (int)r_->pid, r_->reported, uform_status_name(r_->status), uform_status_name(expected_status), \
                    r_->message);                                                                                \
            ++check_failures;                                                                                    \
        }                                                                                                        \
        if (getenv("UFORM_TEST_VERBOSE") && r_->message[0]) printf("  %s: %s\n", uform_status_name(r_->status), r_->message); \
        char const *needles_[] = {__VA_ARGS__};                                                                  \
        for (size_t n_ = 0; n_ < sizeof needles_ / sizeof needles_[0]; ++n_)                                     \
            if (needles_[n_] && !contains(r_, needles_[n_])) {                                                   \
                fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, r_->message,         \
                        needles_[n_]);                                                                           \
                ++check_failures;                                                                                \
            }                                                                                                    \
    } while (0)

static void plant(char const *job, char const *name, char const *text, mode_t mode) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, job);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/%s/%s", root, job, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    CHECK_FATAL(fd >= 0);
    CHECK_FATAL(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    fchmod(fd, mode);
    close(fd);
}

static int remove_entry(char const *path, struct stat const *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* ---- Tests ---- */

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

/** Runs one test and says how long it took (where the time of a slow run went, when CI is red). */
#define RUN(test)                                                                                   \
    do {                                                                                            \
        double const began_ = now();                                                                \
        test();                                                                                     \
        printf("%s: %.2f s\n", #test, now() - began_);                                              \
    } while (0)

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    // A hang detector inside ctest's 600 s (test/CMakeLists.txt): under ThreadSanitizer on a loaded
    // 2-core machine this suite takes minutes (its 10,000 planted files alone took 28 s plain).
    alarm(590);
    snprintf(root, sizeof root, "/tmp/uform-rendezvous-XXXXXX");
    CHECK_FATAL(mkdtemp(root) != NULL);
    gethostname(host, sizeof host - 1);
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
    RUN(test_hostile);
    RUN(test_rescan_before_gone);
    RUN(test_forgeries);
    RUN(test_disputes);
    RUN(test_limits);
    RUN(test_strict_modes);
    RUN(test_lookups_by_name);
    printf("all rendezvous tests took %.2f s\n", now() - start);
    if (!check_failures) nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS); // kept for a look on failure
    CHECK_DONE();
}
