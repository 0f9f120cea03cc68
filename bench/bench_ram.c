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
 */
#define _GNU_SOURCE // `sched_setaffinity`, `CPU_SET`
#include <uform.h>

#include <errno.h>     // `errno`
#include <sched.h>     // `sched_getaffinity`, `sched_setaffinity`
#include <stdbool.h>   // `bool`
#include <stdint.h>    // `uint64_t`
#include <stdio.h>     // `printf`
#include <stdlib.h>    // `strtoull`
#include <string.h>    // `strcmp`, `memcpy`
#include <signal.h>    // `SIGKILL`
#include <sys/mman.h>  // `mmap`
#include <sys/prctl.h> // `PR_SET_PDEATHSIG`
#include <sys/wait.h>  // `waitpid`
#include <time.h>      // `clock_gettime`
#include <unistd.h>    // `fork`, `execv`, `pipe`
#include <pthread.h>   // `pthread_create`
#include <stdatomic.h> // `atomic_uint_fast64_t`

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "strict_number.h"

#define BENCH_BLOCK_FLOATS 16384 // 64 KiB: one task of the sum, a unit of the static split
#define BENCH_MAX_THREADS 4096

/* ---- Shared ---- */

typedef struct config_t {
    size_t rounds;          /**< Fork-join rounds per repetition. */
    size_t repetitions;     /**< Fork-join repetitions; the median is reported. */
    size_t bytes;           /**< Bytes of floats the sum reads. */
    size_t sum_repetitions; /**< Sum repetitions; the median is reported. */
    uform_mood_t mood;      /**< The UForm child's mood. */
} config_t;

static double process_cpu_seconds(void) {
    struct timespec time;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time);
    return (double)time.tv_sec + (double)time.tv_nsec * 1e-9;
}

static double now_seconds(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec + (double)time.tv_nsec * 1e-9;
}

static int compare_doubles(void const *a, void const *b) {
    double x = *(double const *)a, y = *(double const *)b;
    return (x > y) - (x < y);
}

static double median(double *values, size_t count) {
    qsort(values, count, sizeof *values, compare_doubles);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

typedef float f32x4_t __attribute__((vector_size(16)));

/** @brief The sum's kernel, shared by both systems: four independent vector accumulators. */
static float block_sum(float const *values, size_t count) {
    f32x4_t a = {0}, b = {0}, c = {0}, d = {0};
    size_t i = 0;
    for (; i + 16 <= count; i += 16) {
        f32x4_t va, vb, vc, vd;
        memcpy(&va, values + i, sizeof va);
        memcpy(&vb, values + i + 4, sizeof vb);
        memcpy(&vc, values + i + 8, sizeof vc);
        memcpy(&vd, values + i + 12, sizeof vd);
        a += va, b += vb, c += vc, d += vd;
    }
    f32x4_t s = (a + b) + (c + d);
    float total = (s[0] + s[1]) + (s[2] + s[3]);
    for (; i < count; ++i) total += values[i];
    return total;
}

static void block_fill(float *values, size_t count) {
    for (size_t i = 0; i < count; ++i) values[i] = 1.0f;
}

/** @brief The buffer: anonymous pages, untouched, so the first writer places them. */
static float *buffer_map(size_t bytes) {
    void *pointer = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return pointer == MAP_FAILED ? NULL : (float *)pointer;
}

/** @brief Per-thread partial sums, a cache line pair apart. */
typedef struct partial_t {
    _Alignas(128) double value;
} partial_t;

/* ---- UForm child ---- */

static void uform_empty(void *context, size_t task, size_t thread, size_t domain) {
    (void)context, (void)task, (void)thread, (void)domain;
}

typedef struct uform_sum_t {
    float *values;
    size_t floats;
    partial_t *partials;
} uform_sum_t;

static void uform_fill_block(void *context, size_t task, size_t thread, size_t domain) {
    (void)thread, (void)domain;
    uform_sum_t *sum = context;
    size_t begin = task * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
    if (end > sum->floats) end = sum->floats;
    block_fill(sum->values + begin, end - begin);
}

static void uform_sum_block(void *context, size_t task, size_t thread, size_t domain) {
    (void)domain;
    uform_sum_t *sum = context;
    size_t begin = task * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
    if (end > sum->floats) end = sum->floats;
    sum->partials[thread].value += block_sum(sum->values + begin, end - begin);
}

static int uform_fail_report(char const *what, uform_status_t status) {
    fprintf(stderr, "bench_ram: uform: %s: %s: %s\n", what, uform_status_name(status), uform_error_message());
    return 1;
}

static int child_uform(size_t threads, config_t const *config, double *round_ns, double *gbps, double *idle) {
    uform_executor_t executor = NULL;
    uform_status_t status = uform_executor_for_ram(NULL, threads, 0, &executor);
    if (status != uform_status_ok_k) return uform_fail_report("uform_executor_for_ram", status);

    uform_executor_description_t description;
    if ((status = uform_executor_describe(executor, &description)) != uform_status_ok_k ||
        description.threads_count != threads) {
        if (status == uform_status_ok_k)
            fprintf(stderr, "bench_ram: uform: asked for %zu threads, the executor has %zu\n", threads,
                    description.threads_count);
        else uform_fail_report("uform_executor_describe", status);
        uform_executor_free(executor);
        return 1;
    }

    // The caller is thread 0 of every blocking call; it sits on thread 0's core, as OpenMP's
    // OMP_PROC_BIND puts its primary thread on the first place.
    int32_t core = -1, node = -1;
    if ((status = uform_executor_thread_placement(executor, 0, &core, &node)) == uform_status_ok_k && core >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET((int)core, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            fprintf(stderr, "bench_ram: uform: could not pin the caller to core %d: %s\n", (int)core, strerror(errno));
    }
    else fprintf(stderr, "bench_ram: uform: thread 0's placement is unknown (%s): the caller stays unpinned\n",
                 uform_status_name(status));

    int code = 0;
    if ((status = uform_executor_drain(executor, config->mood)) != uform_status_ok_k) {
        code = uform_fail_report("uform_executor_drain", status);
        goto done;
    }

    // Fork-join rounds.
    uform_call_t round = {.schedule = uform_schedule_threads_k, .task = uform_empty};
    size_t warmup = config->rounds / 10 + 1;
    for (size_t i = 0; i < warmup; ++i)
        if ((status = uform_executor_call(executor, &round, NULL)) != uform_status_ok_k) {
            code = uform_fail_report("uform_executor_call", status);
            goto done;
        }
    double samples[64];
    size_t repetitions = config->repetitions < 64 ? config->repetitions : 64;
    for (size_t repetition = 0; repetition < repetitions; ++repetition) {
        double start = now_seconds();
        for (size_t i = 0; i < config->rounds; ++i)
            if ((status = uform_executor_call(executor, &round, NULL)) != uform_status_ok_k) {
                code = uform_fail_report("uform_executor_call", status);
                goto done;
            }
        samples[repetition] = (now_seconds() - start) * 1e9 / (double)config->rounds;
    }
    *round_ns = median(samples, repetitions);

    // The memory-bound sum.
    if (config->bytes) {
        uform_sum_t sum = {.floats = config->bytes / sizeof(float)};
        size_t blocks = (sum.floats + BENCH_BLOCK_FLOATS - 1) / BENCH_BLOCK_FLOATS;
        sum.values = buffer_map(sum.floats * sizeof(float));
        sum.partials = aligned_alloc(_Alignof(partial_t), threads * sizeof *sum.partials); // a multiple of it
        if (sum.partials) memset(sum.partials, 0, threads * sizeof *sum.partials);
        if (!sum.values || !sum.partials) {
            fprintf(stderr, "bench_ram: uform: cannot allocate %zu bytes\n", config->bytes);
            code = 1;
        }
        uform_call_t fill = {.schedule = uform_schedule_static_k, .tasks = blocks, .task = uform_fill_block, .context = &sum};
        uform_call_t read = {.schedule = uform_schedule_static_k, .tasks = blocks, .task = uform_sum_block, .context = &sum};
        if (!code && (status = uform_executor_call(executor, &fill, NULL)) != uform_status_ok_k)
            code = uform_fail_report("uform_executor_call (first touch)", status);
        size_t sum_repetitions = config->sum_repetitions < 64 ? config->sum_repetitions : 64;
        for (size_t repetition = 0; !code && repetition <= sum_repetitions; ++repetition) {
            for (size_t t = 0; t < threads; ++t) sum.partials[t].value = 0;
            double start = now_seconds();
            if ((status = uform_executor_call(executor, &read, NULL)) != uform_status_ok_k) {
                code = uform_fail_report("uform_executor_call (sum)", status);
                break;
            }
            double seconds = now_seconds() - start;
            double total = 0;
            for (size_t t = 0; t < threads; ++t) total += sum.partials[t].value;
            if (total != (double)sum.floats) {
                fprintf(stderr, "bench_ram: uform: the sum is %.1f, expected %zu\n", total, sum.floats);
                code = 1;
            }
            if (repetition) samples[repetition - 1] = (double)(sum.floats * sizeof(float)) / seconds * 1e-9;
        }
        if (!code) *gbps = median(samples, sum_repetitions);
        if (sum.values) munmap(sum.values, sum.floats * sizeof(float));
        free(sum.partials);
    }

    // What the idle executor burns in its mood: after a 50 ms settle (a PARKED worker spins a
    // little before it sleeps), cores of CPU time per second of wall time over 200 ms.
    nanosleep(&(struct timespec) {.tv_nsec = 50000000}, NULL);
    double const cpu_before = process_cpu_seconds(), wall_before = now_seconds();
    nanosleep(&(struct timespec) {.tv_nsec = 200000000}, NULL);
    *idle = (process_cpu_seconds() - cpu_before) / (now_seconds() - wall_before);

done:
    uform_executor_free(executor);
    return code;
}

/* ---- OpenMP child ---- */

/** @brief The region's body: nothing, behind a compiler barrier, since GCC deletes a parallel
 *  region whose body is literally empty (and with it the fork-join being measured). */
static inline void empty_body(void) { __asm__ __volatile__("" ::: "memory"); }

static int child_openmp(size_t threads, config_t const *config, double *round_ns, double *gbps) {
#if defined(_OPENMP)
    int team = (int)threads;
    omp_set_dynamic(0);
    omp_set_num_threads(team);

    size_t warmup = config->rounds / 10 + 1;
    for (size_t i = 0; i < warmup; ++i) {
#pragma omp parallel num_threads(team)
        { empty_body(); }
    }
    double samples[64];
    size_t repetitions = config->repetitions < 64 ? config->repetitions : 64;
    for (size_t repetition = 0; repetition < repetitions; ++repetition) {
        double start = now_seconds();
        for (size_t i = 0; i < config->rounds; ++i) {
#pragma omp parallel num_threads(team)
            { empty_body(); }
        }
        samples[repetition] = (now_seconds() - start) * 1e9 / (double)config->rounds;
    }
    *round_ns = median(samples, repetitions);

    if (config->bytes) {
        size_t floats = config->bytes / sizeof(float);
        long blocks = (long)((floats + BENCH_BLOCK_FLOATS - 1) / BENCH_BLOCK_FLOATS);
        float *values = buffer_map(floats * sizeof(float));
        if (!values) {
            fprintf(stderr, "bench_ram: openmp: cannot allocate %zu bytes\n", config->bytes);
            return 1;
        }
#pragma omp parallel for schedule(static) num_threads(team)
        for (long block = 0; block < blocks; ++block) {
            size_t begin = (size_t)block * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
            block_fill(values + begin, (end > floats ? floats : end) - begin);
        }
        size_t sum_repetitions = config->sum_repetitions < 64 ? config->sum_repetitions : 64;
        int code = 0;
        for (size_t repetition = 0; repetition <= sum_repetitions; ++repetition) {
            double total = 0;
            double start = now_seconds();
#pragma omp parallel for schedule(static) num_threads(team) reduction(+ : total)
            for (long block = 0; block < blocks; ++block) {
                size_t begin = (size_t)block * BENCH_BLOCK_FLOATS, end = begin + BENCH_BLOCK_FLOATS;
                total += block_sum(values + begin, (end > floats ? floats : end) - begin);
            }
            double seconds = now_seconds() - start;
            if (total != (double)floats) {
                fprintf(stderr, "bench_ram: openmp: the sum is %.1f, expected %zu\n", total, floats);
                code = 1;
                break;
            }
            if (repetition) samples[repetition - 1] = (double)(floats * sizeof(float)) / seconds * 1e-9;
        }
        if (!code) *gbps = median(samples, sum_repetitions);
        munmap(values, floats * sizeof(float));
        return code;
    }
    return 0;
#else
    (void)threads, (void)config, (void)round_ns, (void)gbps;
    fputs("bench_ram: built without OpenMP\n", stderr);
    return 1;
#endif
}

/* ---- Ping-pong child: the floor ---- */

/** @brief A cache line two pinned threads bounce: the first writes odd values, the second answers
 *  with the next even one. A round trip is the least a fork-join round over two cores can cost. */
typedef struct pingpong_t {
    _Alignas(128) atomic_uint_fast64_t value;
    _Alignas(128) atomic_uint ready; /**< Set once the answering thread runs on its core. */
    size_t rounds;
    int core;
} pingpong_t;

static bool pin_self(int core) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

static void *pingpong_answer(void *context) {
    pingpong_t *shared = context;
    pin_self(shared->core);
    atomic_store_explicit(&shared->ready, 1, memory_order_release);
    for (uint_fast64_t expected = 1; expected < 2 * shared->rounds; expected += 2) {
        while (atomic_load_explicit(&shared->value, memory_order_acquire) != expected) {}
        atomic_store_explicit(&shared->value, expected + 1, memory_order_release);
    }
    return NULL;
}

/** @brief Median nanoseconds per round trip between the first two allowed cores. */
static int child_pingpong(config_t const *config, double *round_ns) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) return 1;
    int cores[2], found = 0;
    for (int core = 0; core < CPU_SETSIZE && found < 2; ++core)
        if (CPU_ISSET(core, &allowed)) cores[found++] = core;
    double samples[64];
    size_t repetitions = config->repetitions < 64 ? config->repetitions : 64;
    for (size_t repetition = 0; repetition < repetitions; ++repetition) {
        pingpong_t shared = {.rounds = config->rounds, .core = cores[1]};
        atomic_init(&shared.value, 0);
        atomic_init(&shared.ready, 0);
        if (!pin_self(cores[0])) return 1;
        pthread_t answer;
        if (pthread_create(&answer, NULL, pingpong_answer, &shared) != 0) return 1;
        while (!atomic_load_explicit(&shared.ready, memory_order_acquire)) {}
        double start = now_seconds();
        for (uint_fast64_t next = 1; next < 2 * config->rounds; next += 2) {
            atomic_store_explicit(&shared.value, next, memory_order_release);
            while (atomic_load_explicit(&shared.value, memory_order_acquire) != next + 1) {}
        }
        samples[repetition] = (now_seconds() - start) * 1e9 / (double)config->rounds;
        pthread_join(answer, NULL);
    }
    *round_ns = median(samples, repetitions);
    return 0;
}

/* ---- Parent ---- */

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
                         "--mood", mood == uform_mood_spinning_k ? "spinning" : "parked", NULL};
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

static void usage(FILE *out) {
    fputs("usage: bench_ram [options]\n"
          "  --threads LIST          thread counts, as \"1-4,8\" (default: 1 to all allowed cores)\n"
          "  --rounds N              fork-join rounds per repetition (default 100000)\n"
          "  --repetitions N         fork-join repetitions, median taken (default 7, at most 64)\n"
          "  --bytes N[K|M|G]        bytes of floats the sum reads (default 256M; 0 skips the sum)\n"
          "  --sum-repetitions N     sum repetitions, median taken (default 10, at most 64)\n"
          "  --trials N              child processes per system and thread count, alternating the\n"
          "                          systems, median taken (default 1, at most 16)\n"
          "  --only uform|openmp     run one system only\n"
          "  --mood spinning|parked|both\n"
          "                          the executor's moods to measure (default both: SPINNING and the\n"
          "                          default PARKED, side by side)\n"
          "  --quick                 a smoke run: 2000 rounds, 3 repetitions, 16 MiB\n"
          "  --json                  print one JSON document instead of lines\n"
          "ratios are uform/openmp: below 1 is faster for fork-join, above 1 is faster for the sum\n"
          "counts are plain decimal numbers (no sign); anything else, or out of range, exits 2\n",
          out);
}

int main(int argc, char **argv) {
    config_t config = {.rounds = 100000, .repetitions = 7, .bytes = 256u << 20, .sum_repetitions = 10,
                       .mood = uform_mood_spinning_k};
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
        else if (!strcmp(option, "--rounds")) ok = strict_count(value, 1, (size_t)1 << 40, false, &config.rounds);
        else if (!strcmp(option, "--repetitions")) ok = strict_count(value, 1, 64, false, &config.repetitions);
        else if (!strcmp(option, "--bytes")) ok = strict_count(value, 0, (size_t)1 << 40, true, &config.bytes);
        else if (!strcmp(option, "--sum-repetitions")) ok = strict_count(value, 1, 64, false, &config.sum_repetitions);
        else if (!strcmp(option, "--trials")) ok = strict_count(value, 1, 16, false, &trials);
        else if (!strcmp(option, "--quick")) {
            takes_value = false;
            config.rounds = 2000, config.repetitions = 3, config.bytes = 16u << 20, config.sum_repetitions = 3;
        }
        else if (!strcmp(option, "--json")) takes_value = false, json = true;
        else if (!strcmp(option, "-h") || !strcmp(option, "--help")) {
            usage(stdout);
            return 0;
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
        return code;
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
               "THREADS schedule, %s, caller pinned to thread 0's core\n",
               config.rounds, config.repetitions, trials,
               measure_spinning && measure_parked ? "SPINNING and the default PARKED mood"
               : measure_spinning                 ? "SPINNING mood"
                                                  : "the default PARKED mood");
        printf("sum: %zu MiB of f32, static split of %d-float blocks, first touched in parallel, "
               "%zu repetitions (median)\n",
               config.bytes >> 20, BENCH_BLOCK_FLOATS, config.sum_repetitions);
        printf("openmp: OMP_PROC_BIND=%s OMP_PLACES=%s OMP_WAIT_POLICY=%s\n", omp_values[0], omp_values[1],
               omp_values[2]);
        printf("ratios are uform/openmp: below 1 is faster for fork-join, above 1 is faster for the sum\n");
        fflush(stdout);
    }

    // The floor: no fork-join round over two cores can beat one round trip between them.
    result_t floor = {0};
    if (cores >= 2) floor = run_child("pingpong", 2, &config, uform_mood_spinning_k, false);
    if (json) {
        printf("{\"trials\": %zu, \"uform_version\": ", trials);
        json_string(uform_version());
        printf(", \"cpu\": ");
        json_string(model);
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
                printf("\n");
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
        fflush(stdout);
    }
    if (json) printf("\n]}\n");
    else if (run_uform && run_openmp) {
        char const *separator = "worst fork-join ratio";
        for (size_t m = 0; m < 2; ++m)
            if (worst_round[m] > 0) printf("%s %.2f %s", separator, worst_round[m], mood_names[m]), separator = ",";
        printf(" (goal: at most 0.35)");
        if (config.bytes && worst_sum < 1e300) printf(", worst sum ratio %.2f (goal: at least 0.95)", worst_sum);
        printf("\n");
    }
    return code;
}

