/**
 *  @file   rendezvous_harness.h
 *  @brief  What the rendezvous tests share (test_rendezvous.c, test_rendezvous_hostile.c): each test
 *          forks 2 to 16 children over a fresh temporary directory; each child joins with invented
 *          GPU facts and reports its status, message and description through a pipe.
 */
#ifndef UFORM_TEST_RENDEZVOUS_HARNESS_H
#define UFORM_TEST_RENDEZVOUS_HARNESS_H

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

static inline double now(void) { return uform_now_seconds(); }

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

static inline spec_t defaults(size_t index, size_t count, size_t gpus) {
    spec_t spec = {.index = index, .count = count, .gpus = gpus, .gpu_class = uform_gpu_class_nvidia_hopper_k,
                   .floor = uform_gpu_class_nvidia_hopper_k, .timeout = 5.0};
    return spec;
}

static char const *kill_stage, *kill_name, *pause_stage;
static double pause_seconds;
static inline void kill_hook(char const *stage, char const *name) {
    if (kill_stage && strcmp(stage, kill_stage) == 0 && strcmp(name, kill_name) == 0) raise(SIGKILL);
    if (pause_stage && strcmp(stage, pause_stage) == 0) {
        pause_stage = NULL;
        uform_sleep_seconds(pause_seconds > 0 ? pause_seconds : 0.3);
    }
}

/** Children stay alive, as mesh processes do through NCCL's start, until the parent has every
 *  report: they read this pipe until the parent closes it. */
static int release_fd = -1;

static inline void child(char const *job, spec_t const *spec, int fd) {
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
static inline double run_group(char const *job, spec_t const *specs, size_t count, result_t *results) {
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

static inline bool contains(result_t const *result, char const *needle) { return strstr(result->message, needle) != NULL; }

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

static inline void plant(char const *job, char const *name, char const *text, mode_t mode) {
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

static inline int remove_entry(char const *path, struct stat const *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* ---- Tests ---- */

/** Runs one test and says how long it took (where the time of a slow run went, when CI is red). */
#define RUN(test)                                                                                   \
    do {                                                                                            \
        double const began_ = now();                                                                \
        test();                                                                                     \
        printf("%s: %.2f s\n", #test, now() - began_);                                              \
    } while (0)

/** What every rendezvous test program does first: a hang detector inside ctest's 600 s
 *  (test/CMakeLists.txt; under ThreadSanitizer on a loaded 2-core machine a suite takes minutes,
 *  its 10,000 planted files alone took 28 s plain), a fresh temporary root, the host's name. */
static void rendezvous_begin(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    alarm(590);
    snprintf(root, sizeof root, "/tmp/uform-rendezvous-XXXXXX");
    CHECK_FATAL(mkdtemp(root) != NULL);
    gethostname(host, sizeof host - 1);
}

/** The root removed unless a check failed (kept for a look). */
static void rendezvous_end(void) {
    if (!check_failures) nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif // UFORM_TEST_RENDEZVOUS_HARNESS_H
