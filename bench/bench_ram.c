/**
 *  @file   bench_ram.c
 *  @brief  The CPU benchmark: UForm's RAM executor against OpenMP (libgomp), side by side.
 *
 *  Two measurements at every thread count from 1 to the process's allowed cores:
 *
 *  - fork-join: one round is every thread running an empty callback while the caller waits for
 *    them; median nanoseconds per round over many rounds and several repetitions. UForm runs a
 *    blocking `uform_executor_call` with the THREADS schedule on a RAM executor, once drained into
 *    the SPINNING mood and once in its default PARKED mood; OpenMP runs an empty
 *    `#pragma omp parallel` region. After the rounds, each UForm child also reports the cores its
 *    idle executor burns over 200 ms in that mood ("idle").
 *  - sum: a memory-bound sum over a buffer of floats (256 MiB by default), first touched in parallel
 *    by the same scheduler and the same static split so its pages are local to the threads that
 *    read them; median GB/s. Both systems run the very same block kernel.
 *
 *  Before them, the floor: one round trip of a cache line between the first two allowed cores, the
 *  least any fork-join round over two cores can cost.
 *
 *  Each system runs in a child process of its own (this program re-executed with `--child`), so
 *  OpenMP's threads and the engine's never coexist; `--trials N` runs N children per system and
 *  thread count, alternating the systems, and takes the median. The parent prints one line per
 *  measurement and the ratio uform/OpenMP: below 1 is faster for fork-join, above 1 for the sum.
 *
 *  OpenMP's environment defaults, applied only where the variable is unset: OMP_PROC_BIND=close,
 *  OMP_PLACES=cores (threads pinned like the engine's, one per core, the caller on the first) and
 *  OMP_WAIT_POLICY=active (idle threads spin, like the engine's SPINNING mood).
 *
 *  Children die with the parent (PR_SET_PDEATHSIG): killing the benchmark never leaves one spinning.
 *  Standard output that cannot be written (a full disk, a closed descriptor) stops the benchmark at
 *  its next line with exit 1.
 *
 *  This file is the parent (options, child processes, the report); the children are in
 *  bench_ram_uform.c, bench_ram_openmp.c and bench_ram_floor.c, their shared parts in bench_ram.h.
 */
#define _GNU_SOURCE // `sched_getaffinity`, `CPU_COUNT`
#include "bench_ram.h"

#include <errno.h>     // `errno`
#include <sched.h>     // `sched_getaffinity`
#include <signal.h>    // `SIGKILL`
#include <stdio.h>     // `printf`
#include <sys/prctl.h> // `PR_SET_PDEATHSIG`
#include <sys/wait.h>  // `waitpid`
#include <unistd.h>    // `fork`, `execv`, `pipe`

#include "strict_number.h"

static char const *const omp_defaults[][2] = {
    {"OMP_PROC_BIND", "close"},
    {"OMP_PLACES", "cores"},
    {"OMP_WAIT_POLICY", "active"},
};

typedef struct result_t {
    bool ok;
    double round_ns;
    double gbps;
    double idle; /**< Cores the idle executor burns (UForm only). */
} result_t;

/** @brief Runs one system at one thread count in a child process and reads its one-line answer. */
static result_t run_child(char const *system, size_t threads, config_t const *config, uform_mood_t mood, bool sum) {
    result_t result = {0};
    int pipe_ends[2];
    if (pipe(pipe_ends) != 0) {
        fprintf(stderr, "bench_ram: pipe: %s\n", strerror(errno));
        return result;
    }
    char threads_text[32], rounds_text[32], repetitions_text[32], bytes_text[32], sums_text[32];
    snprintf(threads_text, sizeof threads_text, "%zu", threads);
    snprintf(rounds_text, sizeof rounds_text, "%zu", config->rounds);
    snprintf(repetitions_text, sizeof repetitions_text, "%zu", config->repetitions);
    snprintf(bytes_text, sizeof bytes_text, "%zu", sum ? config->bytes : 0);
    snprintf(sums_text, sizeof sums_text, "%zu", config->sum_repetitions);
    char *arguments[] = {"bench_ram", "--child", (char *)system, "--threads", threads_text,
                         "--rounds", rounds_text, "--repetitions", repetitions_text,
                         "--bytes", bytes_text, "--sum-repetitions", sums_text,
                         "--mood", mood == uform_mood_spinning_k ? "spinning" : "parked",
                         "--join", (char *)config->join, NULL};
    fflush(stdout);
    fflush(stderr);
    pid_t const parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "bench_ram: fork: %s\n", strerror(errno));
        close(pipe_ends[0]), close(pipe_ends[1]);
        return result;
    }
    if (child == 0) {
        // Die with the parent: a killed benchmark must not leave a child spinning a core. The
        // parent may have died before the request took effect, which getppid() then shows.
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
        close(pipe_ends[0]);
        if (dup2(pipe_ends[1], STDOUT_FILENO) < 0) _exit(127);
        close(pipe_ends[1]);
        if (!strcmp(system, "openmp")) {
            for (size_t i = 0; i < sizeof omp_defaults / sizeof omp_defaults[0]; ++i)
                setenv(omp_defaults[i][0], omp_defaults[i][1], 0);
            setenv("OMP_NUM_THREADS", threads_text, 1);
        }
        execv("/proc/self/exe", arguments);
        _exit(127);
    }
    close(pipe_ends[1]);
    char answer[256];
    size_t length = 0;
    for (;;) {
        ssize_t got = read(pipe_ends[0], answer + length, sizeof answer - 1 - length);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        length += (size_t)got;
        if (length == sizeof answer - 1) break;
    }
    answer[length] = '\0';
    close(pipe_ends[0]);
    int wait_status = 0;
    while (waitpid(child, &wait_status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0 &&
        sscanf(answer, "round_ns=%lf gbps=%lf idle=%lf", &result.round_ns, &result.gbps, &result.idle) == 3)
        result.ok = true;
    else if (WIFSIGNALED(wait_status))
        fprintf(stderr, "bench_ram: the %s child at %zu threads died of signal %d\n", system, threads,
                WTERMSIG(wait_status));
    return result;
}

/** @brief Cores this process may run on that also belong to a memory domain it may allocate on:
 *  the most threads `uform_executor_for_ram` accepts. */
static size_t allowed_cores(void) {
    size_t count = 0, total = 0;
    uform_memory_domain_t domains[256];
    if (uform_memory_domains(domains, 256, &count) == uform_status_ok_k) {
        for (size_t i = 0; i < count && i < 256; ++i) total += domains[i].cores_count;
        if (total) return total;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return (size_t)CPU_COUNT(&set);
    return 1;
}

/** @brief Prints a JSON string literal; bytes outside printable ASCII are escaped or replaced. */
static void json_string(char const *text) {
    putchar('"');
    for (unsigned char const *byte = (unsigned char const *)text; *byte; ++byte) {
        if (*byte == '"' || *byte == '\\') printf("\\%c", *byte);
        else if (*byte < 0x20 || *byte >= 0x7F) printf("\\u%04x", *byte < 0x7F ? *byte : 0xFFFD);
        else putchar(*byte);
    }
    putchar('"');
}

static void cpu_model(char *model, size_t capacity) {
    snprintf(model, capacity, "unknown CPU");
    FILE *file = fopen("/proc/cpuinfo", "r");
    if (!file) return;
    char line[512];
    while (fgets(line, sizeof line, file)) {
        char *colon = strchr(line, ':');
        if (colon && !strncmp(line, "model name", 10)) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(model, capacity, "%s", colon);
            break;
        }
    }
    fclose(file);
}

/** @brief Parses "1-4,8,16" into ascending, unique thread counts; 0 for anything malformed. */
static size_t parse_threads(char const *text, size_t *counts, size_t capacity) {
    static bool seen[BENCH_MAX_THREADS + 1];
    memset(seen, 0, sizeof seen);
    char item[64];
    for (char const *cursor = text;;) {
        size_t const length = strcspn(cursor, ",");
        if (!length || length >= sizeof item) return 0;
        memcpy(item, cursor, length);
        item[length] = '\0';
        char *dash = strchr(item, '-');
        if (dash) *dash = '\0';
        size_t first = 0, last = 0;
        if (!strict_count(item, 1, BENCH_MAX_THREADS, false, &first)) return 0;
        if (!dash) last = first;
        else if (!strict_count(dash + 1, first, BENCH_MAX_THREADS, false, &last)) return 0;
        for (size_t value = first; value <= last; ++value) seen[value] = true;
        cursor += length;
        if (!*cursor) break;
        ++cursor; // past the comma; an empty item after it is refused above
    }
    size_t count = 0;
    for (size_t value = 1; value <= BENCH_MAX_THREADS && count < capacity; ++value)
        if (seen[value]) counts[count++] = value;
    return count;
}

/** @brief Flushes standard output; false, after saying why, where writing it failed (a full disk, a
 *  closed descriptor): the benchmark stops rather than measure for no reader. */
static bool stdout_flushed(void) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return true;
    fprintf(stderr, "bench_ram: could not write standard output: %s\n", strerror(errno ? errno : EIO));
    return false;
}

static void usage(FILE *out) {
    fputs("usage: uform bench [options]   (or bench_ram [options])\n"
          "  --threads LIST          thread counts, as \"1-4,8\" (default: 1 to all allowed cores)\n"
          "  --rounds N              fork-join rounds per repetition (default 100000)\n"
          "  --repetitions N         fork-join repetitions, median taken (default 7, at most 64)\n"
          "  --bytes N[K|M|G]        bytes of floats the sum reads (default 256M; 0 skips the sum, else 4 or more)\n"
          "  --sum-repetitions N     sum repetitions, median taken (default 10, at most 64)\n"
          "  --trials N              child processes per system and thread count, alternating the\n"
          "                          systems, median taken (default 1, at most 16)\n"
          "  --only uform|openmp     run one system only\n"
          "  --mood spinning|parked|both\n"
          "                          the executor's moods to measure (default both: SPINNING and the\n"
          "                          default PARKED, side by side)\n"
          "  --join NAME             how the engine's rounds wake and join workers: default (the\n"
          "                          engine's choice by thread count), legacy (its choice before the\n"
          "                          slots), or one join at every count: shared, slots, lines\n"
          "  --quick                 a smoke run: 2000 rounds, 3 repetitions, 16 MiB\n"
          "  --json                  print one JSON document instead of lines\n"
          "ratios are uform/openmp: below 1 is faster for fork-join, above 1 is faster for the sum\n"
          "counts are plain decimal numbers (no sign); anything else, or out of range, exits 2\n",
          out);
}

int main(int argc, char **argv) {
    config_t config = {.rounds = 100000, .repetitions = 7, .bytes = 256u << 20, .sum_repetitions = 10,
                       .mood = uform_mood_spinning_k, .join = "default"};
    char const *child = NULL, *only = NULL, *threads_text = NULL, *mood_text = "both";
    bool json = false;
    size_t trials = 1;
    for (int i = 1; i < argc; ++i) {
        char const *option = argv[i];
        char const *value = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = true, ok = true;
        if (!strcmp(option, "--child")) child = value;
        else if (!strcmp(option, "--only")) only = value;
        else if (!strcmp(option, "--threads")) threads_text = value;
        else if (!strcmp(option, "--mood"))
            ok = value && (!strcmp(value, "spinning") || !strcmp(value, "parked") || !strcmp(value, "both")),
            mood_text = value;
        else if (!strcmp(option, "--join")) ok = bench_join_known(value), config.join = value;
        else if (!strcmp(option, "--rounds")) ok = strict_count(value, 1, (size_t)1 << 40, false, &config.rounds);
        else if (!strcmp(option, "--repetitions")) ok = strict_count(value, 1, 64, false, &config.repetitions);
        else if (!strcmp(option, "--bytes")) /* 0 skips the sum; else at least one float */
            ok = strict_count(value, 0, (size_t)1 << 40, true, &config.bytes) &&
                 (config.bytes == 0 || config.bytes >= sizeof(float));
        else if (!strcmp(option, "--sum-repetitions")) ok = strict_count(value, 1, 64, false, &config.sum_repetitions);
        else if (!strcmp(option, "--trials")) ok = strict_count(value, 1, 16, false, &trials);
        else if (!strcmp(option, "--quick")) {
            takes_value = false;
            config.rounds = 2000, config.repetitions = 3, config.bytes = 16u << 20, config.sum_repetitions = 3;
        }
        else if (!strcmp(option, "--json")) takes_value = false, json = true;
        else if (!strcmp(option, "-h") || !strcmp(option, "--help")) {
            usage(stdout);
            return stdout_flushed() ? 0 : 1;
        }
        else {
            fprintf(stderr, "bench_ram: unknown option '%s'\n", option);
            usage(stderr);
            return 2;
        }
        if (takes_value && (!value || !ok)) {
            fprintf(stderr, "bench_ram: bad or missing value for %s: '%s'\n", option, value ? value : "");
            usage(stderr);
            return 2;
        }
        i += takes_value;
    }
    if (only && strcmp(only, "uform") && strcmp(only, "openmp")) {
        fprintf(stderr, "bench_ram: --only takes uform or openmp, not '%s'\n", only);
        return 2;
    }

    bool const measure_spinning = strcmp(mood_text, "parked") != 0, measure_parked = strcmp(mood_text, "spinning") != 0;
    if (child) {
        size_t threads = 0;
        if (!strict_count(threads_text, 1, BENCH_MAX_THREADS, false, &threads) || !strcmp(mood_text, "both")) {
            fputs("bench_ram: --child needs --threads N and --mood spinning or parked\n", stderr);
            return 2;
        }
        config.mood = measure_spinning ? uform_mood_spinning_k : uform_mood_parked_k;
        double round_ns = 0, gbps = 0, idle = 0;
        int code;
        if (!strcmp(child, "uform")) code = child_uform(threads, &config, &round_ns, &gbps, &idle);
        else if (!strcmp(child, "openmp")) code = child_openmp(threads, &config, &round_ns, &gbps);
        else if (!strcmp(child, "pingpong")) code = child_pingpong(&config, &round_ns);
        else {
            fprintf(stderr, "bench_ram: --child takes uform, openmp or pingpong, not '%s'\n", child);
            return 2;
        }
        if (!code) printf("round_ns=%.3f gbps=%.6f idle=%.4f\n", round_ns, gbps, idle);
        return stdout_flushed() ? code : 1;
    }

    size_t cores = allowed_cores();
    static size_t counts[BENCH_MAX_THREADS];
    size_t counts_count = 0;
    if (threads_text) {
        counts_count = parse_threads(threads_text, counts, BENCH_MAX_THREADS);
        if (!counts_count) {
            fprintf(stderr, "bench_ram: --threads takes a list like \"1-4,8\", not '%s'\n", threads_text);
            return 2;
        }
    }
    else
        for (size_t t = 1; t <= cores && t <= BENCH_MAX_THREADS; ++t) counts[counts_count++] = t;

    char model[256];
    cpu_model(model, sizeof model);
    // What the OpenMP children run with: the caller's own values where set, else the defaults.
    char const *omp_values[3] = {omp_defaults[0][1], omp_defaults[1][1], omp_defaults[2][1]};
    for (size_t i = 0; i < 3; ++i)
        if (getenv(omp_defaults[i][0])) omp_values[i] = getenv(omp_defaults[i][0]);
    bool run_uform = !only || !strcmp(only, "uform"), run_openmp = !only || !strcmp(only, "openmp");
    if (!json) {
        printf("bench_ram: uform %s vs OpenMP (libgomp) on %s, %zu allowed cores\n", uform_version(), model, cores);
        printf("fork-join: %zu rounds x %zu repetitions (median) x %zu trials (median); uform: blocking call, "
               "THREADS schedule, %s, caller pinned to thread 0's core, join %s\n",
               config.rounds, config.repetitions, trials,
               measure_spinning && measure_parked ? "SPINNING and the default PARKED mood"
               : measure_spinning                 ? "SPINNING mood"
                                                  : "the default PARKED mood",
               config.join);
        printf("sum: %zu MiB of f32, static split of %d-float blocks, first touched in parallel, "
               "%zu repetitions (median)\n",
               config.bytes >> 20, BENCH_BLOCK_FLOATS, config.sum_repetitions);
        printf("openmp: OMP_PROC_BIND=%s OMP_PLACES=%s OMP_WAIT_POLICY=%s\n", omp_values[0], omp_values[1],
               omp_values[2]);
        printf("ratios are uform/openmp: below 1 is faster for fork-join, above 1 is faster for the sum\n");
        if (!stdout_flushed()) return 1;
    }

    // The floor: no fork-join round over two cores can beat one round trip between them.
    result_t floor = {0};
    if (cores >= 2) floor = run_child("pingpong", 2, &config, uform_mood_spinning_k, false);
    if (json) {
        printf("{\"trials\": %zu, \"uform_version\": ", trials);
        json_string(uform_version());
        printf(", \"cpu\": ");
        json_string(model);
        printf(", \"join\": ");
        json_string(config.join);
        printf(", \"allowed_cores\": %zu, \"rounds\": %zu, \"repetitions\": %zu, \"sum_bytes\": %zu, "
               "\"sum_repetitions\": %zu, \"openmp_env\": {\"OMP_PROC_BIND\": ",
               cores, config.rounds, config.repetitions, config.bytes, config.sum_repetitions);
        json_string(omp_values[0]);
        printf(", \"OMP_PLACES\": ");
        json_string(omp_values[1]);
        printf(", \"OMP_WAIT_POLICY\": ");
        json_string(omp_values[2]);
        printf("}, \"pingpong_round_trip_ns\": ");
        floor.ok ? printf("%.1f", floor.round_ns) : printf("null");
        printf(", \"results\": [");
    }
    else if (floor.ok)
        printf("floor: one round trip of a cache line between the first two allowed cores: %.0f ns\n", floor.round_ns);

    int code = 0;
    double worst_round[2] = {0, 0}, worst_sum = 1e300;
    uform_mood_t const moods[2] = {uform_mood_spinning_k, uform_mood_parked_k};
    bool const measure[2] = {run_uform && measure_spinning, run_uform && measure_parked};
    char const *const mood_names[2] = {"spinning", "parked"};
    for (size_t i = 0; i < counts_count; ++i) {
        size_t threads = counts[i];
        result_t u[2] = {{0}, {0}}, o = {0};
        // Trials alternate the systems, so a burst of load elsewhere on the machine tends to hit
        // all rather than one; each figure is the median over its trials. The sum is read by the
        // first UForm child only: the mood does not matter to a memory-bound pass.
        double u_rounds[2][16], u_gbps[16], u_idle[2][16], o_rounds[16], o_gbps[16];
        u[0].ok = measure[0], u[1].ok = measure[1], o.ok = run_openmp;
        for (size_t trial = 0; trial < trials; ++trial) {
            bool sum_taken = false;
            for (size_t m = 0; m < 2; ++m) {
                if (!measure[m]) continue;
                result_t r = run_child("uform", threads, &config, moods[m], !sum_taken);
                u[m].ok = u[m].ok && r.ok, u_rounds[m][trial] = r.round_ns, u_idle[m][trial] = r.idle;
                if (!sum_taken) u_gbps[trial] = r.gbps, sum_taken = true;
            }
            if (run_openmp) {
                result_t r = run_child("openmp", threads, &config, uform_mood_spinning_k, true);
                o.ok = o.ok && r.ok, o_rounds[trial] = r.round_ns, o_gbps[trial] = r.gbps;
            }
        }
        for (size_t m = 0; m < 2; ++m)
            if (u[m].ok) u[m].round_ns = median(u_rounds[m], trials), u[m].idle = median(u_idle[m], trials);
        double const gbps = (measure[0] && u[0].ok) || (!measure[0] && u[1].ok) ? median(u_gbps, trials) : 0;
        if (o.ok) o.round_ns = median(o_rounds, trials), o.gbps = median(o_gbps, trials);
        bool any_uform_ok = false;
        for (size_t m = 0; m < 2; ++m) {
            if (measure[m] && !u[m].ok) code = 1;
            any_uform_ok = any_uform_ok || (measure[m] && u[m].ok);
        }
        if (run_openmp && !o.ok) code = 1;
        if (json) {
            printf("%s\n  {\"threads\": %zu", i ? "," : "", threads);
            for (size_t m = 0; m < 2; ++m) {
                if (!measure[m] || !u[m].ok) continue;
                printf(", \"uform_%s_round_ns\": %.1f, \"uform_%s_idle_cores\": %.3f", mood_names[m], u[m].round_ns,
                       mood_names[m], u[m].idle);
                if (o.ok) printf(", \"%s_round_ratio\": %.3f", mood_names[m], u[m].round_ns / o.round_ns);
            }
            if (any_uform_ok && config.bytes) printf(", \"uform_sum_gbps\": %.3f", gbps);
            if (o.ok) printf(", \"openmp_round_ns\": %.1f, \"openmp_sum_gbps\": %.3f", o.round_ns, o.gbps);
            if (any_uform_ok && o.ok && config.bytes) printf(", \"sum_ratio\": %.3f", gbps / o.gbps);
            printf("}");
        }
        else {
            printf("fork-join threads=%zu:", threads);
            char const *separator = " uform";
            for (size_t m = 0; m < 2; ++m) {
                if (!measure[m]) continue;
                u[m].ok ? printf("%s %.0f ns %s", separator, u[m].round_ns, mood_names[m])
                        : printf("%s failed %s", separator, mood_names[m]);
                separator = ",";
            }
            if (run_openmp) o.ok ? printf("%sopenmp %.0f ns", run_uform ? ", " : " ", o.round_ns)
                                 : printf("%sopenmp failed", run_uform ? ", " : " ");
            separator = ", ratio";
            for (size_t m = 0; m < 2; ++m)
                if (measure[m] && u[m].ok && o.ok) {
                    printf("%s %.2f %s", separator, u[m].round_ns / o.round_ns, mood_names[m]);
                    separator = ",";
                }
            printf("\n");
            if (run_uform) {
                printf("idle threads=%zu: uform", threads);
                separator = "";
                for (size_t m = 0; m < 2; ++m)
                    if (measure[m] && u[m].ok) printf("%s %.2f cores %s", separator, u[m].idle, mood_names[m]), separator = ",";
                printf("%s\n", *separator ? "" : " failed"); /* no run measured: no figure */
            }
            if (config.bytes) {
                printf("sum threads=%zu:", threads);
                if (run_uform) any_uform_ok ? printf(" uform %.2f GB/s", gbps) : printf(" uform failed");
                if (run_openmp) o.ok ? printf("%s openmp %.2f GB/s", run_uform ? "," : "", o.gbps)
                                     : printf("%s openmp failed", run_uform ? "," : "");
                if (any_uform_ok && o.ok) printf(", ratio %.2f", gbps / o.gbps);
                printf("\n");
            }
        }
        for (size_t m = 0; m < 2; ++m)
            if (measure[m] && u[m].ok && o.ok && u[m].round_ns / o.round_ns > worst_round[m])
                worst_round[m] = u[m].round_ns / o.round_ns;
        if (any_uform_ok && o.ok && config.bytes && gbps / o.gbps < worst_sum) worst_sum = gbps / o.gbps;
        if (!stdout_flushed()) return 1;
    }
    if (json) printf("\n]}\n");
    else if (run_uform && run_openmp) {
        char const *separator = "worst fork-join ratio";
        for (size_t m = 0; m < 2; ++m)
            if (worst_round[m] > 0) printf("%s %.2f %s", separator, worst_round[m], mood_names[m]), separator = ",";
        if (*separator == ',') printf(" (goal: at most 0.35)");
        else printf("%s failed", separator); /* no ratio: every run failed */
        if (config.bytes && worst_sum < 1e300) printf(", worst sum ratio %.2f (goal: at least 0.95)", worst_sum);
        printf("\n");
    }
    return stdout_flushed() ? code : 1;
}
