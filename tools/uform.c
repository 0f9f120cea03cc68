/**
 *  @file   uform.c
 *  @brief  The `uform` command-line program: `uform info [--json]`, `uform bench [...]`,
 *          `uform --help`, `uform --version`.
 *
 *  `info` reports what the engine sees on this machine through the public ABI only: the library
 *  version, the CPU class and its features, the memory domains with their cores, the GPUs (or why
 *  there are none), and the executor a default `uform_executor_for_ram(NULL, 0, 0, ...)` builds.
 *  A section that fails prints its status name and message in place; the program then exits 1.
 *
 *  `bench` runs the CPU benchmark `bench_ram` (fork-join rounds and a memory-bound sum, against
 *  OpenMP), a separate program so that neither this one nor the library links libgomp.
 */
#include <uform.h>

#include <errno.h>    // `errno`
#include <fcntl.h>    // `fcntl`, `open`
#include <limits.h>   // `PATH_MAX`
#include <stdbool.h>  // `bool`
#include <stdint.h>   // `uint64_t`
#include <stdio.h>    // `printf`
#include <stdlib.h>   // `calloc`
#include <string.h>   // `strcmp`
#include <unistd.h>   // `execv`, `readlink`, `access`

/* ---- Output ---- */

/** @brief Writes `text` as a JSON string literal: quotes, escapes, and U+FFFD for bytes that are
 *  not well-formed UTF-8, so the document always parses. */
static void json_string(FILE *out, char const *text) {
    unsigned char const *bytes = (unsigned char const *)(text ? text : "");
    fputc('"', out);
    while (*bytes) {
        unsigned char byte = *bytes;
        if (byte == '"' || byte == '\\') fprintf(out, "\\%c", byte), ++bytes;
        else if (byte == '\n') fputs("\\n", out), ++bytes;
        else if (byte == '\r') fputs("\\r", out), ++bytes;
        else if (byte == '\t') fputs("\\t", out), ++bytes;
        else if (byte < 0x20 || byte == 0x7F) fprintf(out, "\\u%04x", byte), ++bytes;
        else if (byte < 0x80) fputc(byte, out), ++bytes;
        else {
            // A multi-byte sequence: its length from the lead byte, then continuation bytes, then
            // the rules against overlong forms, surrogates and code points past U+10FFFF.
            size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
            bool valid = length != 0 && byte >= 0xC2 && byte <= 0xF4;
            for (size_t i = 1; valid && i < length; ++i) valid = (bytes[i] & 0xC0) == 0x80;
            if (valid && length == 3)
                valid = !(byte == 0xE0 && bytes[1] < 0xA0) && !(byte == 0xED && bytes[1] >= 0xA0);
            if (valid && length == 4)
                valid = !(byte == 0xF0 && bytes[1] < 0x90) && !(byte == 0xF4 && bytes[1] >= 0x90);
            if (valid) fwrite(bytes, 1, length, out), bytes += length;
            else fputs("\\ufffd", out), ++bytes;
        }
    }
    fputc('"', out);
}

/** @brief Prints a status as JSON: `{"status": "unsupported", "message": "..."}`. */
static void json_error(FILE *out, uform_status_t status, char const *message) {
    fputs("{\"status\": ", out);
    json_string(out, uform_status_name(status));
    fputs(", \"message\": ", out);
    json_string(out, message);
    fputc('}', out);
}

/** @brief Prints a sorted list of cores compactly: "0-15,32-47". */
static void print_core_ranges(FILE *out, int32_t const *cores, size_t count) {
    for (size_t i = 0; i < count;) {
        size_t j = i;
        while (j + 1 < count && cores[j + 1] == cores[j] + 1) ++j;
        fprintf(out, "%s%d", i ? "," : "", (int)cores[i]);
        if (j > i) fprintf(out, "-%d", (int)cores[j]);
        i = j + 1;
    }
}

/** @brief "s" unless `count` is one: "1 core", "2 cores". */
static char const *plural(size_t count) { return count == 1 ? "" : "s"; }

static void print_bytes(FILE *out, uint64_t bytes) {
    double value = (double)bytes;
    char const *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) value /= 1024.0, ++unit;
    fprintf(out, unit ? "%.1f %s" : "%.0f %s", value, units[unit]);
}

/* ---- Gathering ---- */

/** @brief A failed section: its status and a copy of the message. */
typedef struct failure_t {
    uform_status_t status;
    char message[512];
} failure_t;

static void failure_record(failure_t *failure, uform_status_t status) {
    failure->status = status;
    snprintf(failure->message, sizeof failure->message, "%s", uform_error_message());
}

typedef struct domain_info_t {
    uform_memory_domain_t domain;
    int32_t *cores;
    size_t cores_count;
    failure_t failure; /**< OK unless listing this domain's cores failed. */
} domain_info_t;

typedef struct gpu_info_t {
    uform_gpu_device_t device;
    char name[256];
    failure_t failure; /**< OK unless the name query failed. */
} gpu_info_t;

/** @brief Everything `uform info` reports; each section carries its own failure. */
typedef struct info_t {
    char const *version;

    uform_cpu_class_t cpu_class;
    uint64_t cpu_features;
    failure_t cpu_failure;

    domain_info_t *domains;
    size_t domains_count;
    size_t cores_total;
    failure_t domains_failure;

    gpu_info_t *gpus;
    size_t gpus_count;
    failure_t gpus_failure;        /**< The listing itself failed. */
    failure_t gpus_absent_reason;  /**< Why there are none: `uform_gpu_status`'s answer. */

    uform_executor_description_t executor;
    failure_t executor_failure;
    size_t default_threads;        /**< From the executor, or computed when it could not be built. */
} info_t;

static bool failed(failure_t const *failure) { return failure->status != uform_status_ok_k; }

static void info_gather(info_t *info) {
    memset(info, 0, sizeof *info);
    info->version = uform_version();

    uform_status_t status = uform_cpu_detect(&info->cpu_class, &info->cpu_features);
    if (status != uform_status_ok_k) failure_record(&info->cpu_failure, status);

    // Domains: size, then fill; the set may shrink between the calls, so trust the smaller.
    size_t count = 0;
    status = uform_memory_domains(NULL, 0, &count);
    if (status == uform_status_ok_k && count) {
        uform_memory_domain_t *domains = calloc(count, sizeof *domains);
        info->domains = calloc(count, sizeof *info->domains);
        size_t capacity = count;
        if (!domains || !info->domains) {
            info->domains_failure.status = uform_status_out_of_memory_k;
            snprintf(info->domains_failure.message, sizeof info->domains_failure.message,
                     "could not allocate %zu memory domains", count);
        }
        else if ((status = uform_memory_domains(domains, capacity, &count)) == uform_status_ok_k) {
            info->domains_count = count < capacity ? count : capacity;
            for (size_t i = 0; i < info->domains_count; ++i) {
                domain_info_t *domain = &info->domains[i];
                domain->domain = domains[i];
                size_t cores = 0;
                status = uform_memory_domain_cores(domains[i].node, NULL, 0, &cores);
                if (status == uform_status_ok_k && cores) {
                    domain->cores = calloc(cores, sizeof *domain->cores);
                    if (!domain->cores) {
                        domain->failure.status = uform_status_out_of_memory_k;
                        snprintf(domain->failure.message, sizeof domain->failure.message,
                                 "could not allocate %zu cores", cores);
                        continue;
                    }
                    size_t cores_capacity = cores;
                    status = uform_memory_domain_cores(domains[i].node, domain->cores, cores_capacity, &cores);
                    if (cores > cores_capacity) cores = cores_capacity;
                }
                if (status != uform_status_ok_k) failure_record(&domain->failure, status);
                else domain->cores_count = cores, info->cores_total += cores;
            }
        }
        free(domains);
    }
    if (status != uform_status_ok_k && !failed(&info->domains_failure) && !info->domains_count)
        failure_record(&info->domains_failure, status);

    // GPUs: no device is not an error, but `uform_gpu_status` says why.
    count = 0;
    status = uform_gpu_devices(NULL, 0, &count);
    if (status == uform_status_ok_k && count) {
        uform_gpu_device_t *devices = calloc(count, sizeof *devices);
        info->gpus = calloc(count, sizeof *info->gpus);
        size_t capacity = count;
        if (!devices || !info->gpus) {
            info->gpus_failure.status = uform_status_out_of_memory_k;
            snprintf(info->gpus_failure.message, sizeof info->gpus_failure.message,
                     "could not allocate %zu GPU devices", count);
        }
        else if ((status = uform_gpu_devices(devices, capacity, &count)) == uform_status_ok_k) {
            info->gpus_count = count < capacity ? count : capacity;
            for (size_t i = 0; i < info->gpus_count; ++i) {
                info->gpus[i].device = devices[i];
                uform_status_t name_status = uform_gpu_device_name(i, info->gpus[i].name, sizeof info->gpus[i].name);
                if (name_status != uform_status_ok_k) failure_record(&info->gpus[i].failure, name_status);
            }
        }
        free(devices);
    }
    if (status != uform_status_ok_k && !failed(&info->gpus_failure)) failure_record(&info->gpus_failure, status);
    if (!info->gpus_count && !failed(&info->gpus_failure)) {
        uform_status_t reason = uform_gpu_status();
        if (reason != uform_status_ok_k) failure_record(&info->gpus_absent_reason, reason);
    }

    // The default executor: its description is the truth about the 7/8 rule on this machine.
    uform_executor_t executor = NULL;
    status = uform_executor_for_ram(NULL, 0, 0, &executor);
    if (status == uform_status_ok_k) {
        status = uform_executor_describe(executor, &info->executor);
        uform_executor_free(executor);
    }
    if (status == uform_status_ok_k) info->default_threads = info->executor.threads_count;
    else {
        failure_record(&info->executor_failure, status);
        info->default_threads = uform_default_threads(info->cores_total);
    }
}

static void info_free(info_t *info) {
    for (size_t i = 0; i < info->domains_count; ++i) free(info->domains[i].cores);
    free(info->domains);
    free(info->gpus);
}

/** @brief True when any section failed: the exit status is 1 then. */
static bool info_failed(info_t const *info) {
    bool any = failed(&info->cpu_failure) || failed(&info->domains_failure) ||
               failed(&info->gpus_failure) || failed(&info->executor_failure);
    for (size_t i = 0; i < info->domains_count; ++i) any = any || failed(&info->domains[i].failure);
    for (size_t i = 0; i < info->gpus_count; ++i) any = any || failed(&info->gpus[i].failure);
    return any;
}

static char const *executor_kind_name(uform_executor_kind_t kind) {
    switch (kind) {
    case uform_executor_kind_inline_k: return "inline";
    case uform_executor_kind_ram_k: return "ram";
    case uform_executor_kind_pool_k: return "pool";
    case uform_executor_kind_vram_k: return "vram";
    default: return "invalid";
    }
}

static char const *mood_name(uform_mood_t mood) {
    switch (mood) {
    case uform_mood_parked_k: return "parked";
    case uform_mood_spinning_k: return "spinning";
    default: return "invalid";
    }
}

/* ---- Printing ---- */

static void info_print_text(info_t const *info, FILE *out) {
    fprintf(out, "uform %s\n", info->version);

    if (failed(&info->cpu_failure))
        fprintf(out, "cpu: error: %s: %s\n", uform_status_name(info->cpu_failure.status), info->cpu_failure.message);
    else {
        fprintf(out, "cpu: %s\n", uform_cpu_class_name(info->cpu_class));
        fputs("  class: a tier of instruction sets, not a vendor or a model: the highest class whose features\n"
              "         this CPU has (an AMD EPYC with AVX2 and no AVX-512 reports intel_haswell)\n",
              out);
        fputs("  features:", out);
        if (!info->cpu_features) fputs(" none", out);
        for (unsigned bit = 0; bit < 64; ++bit)
            if (info->cpu_features & (1ull << bit)) fprintf(out, " %s", uform_cpu_feature_name(1ull << bit));
        fputc('\n', out);
    }

    if (failed(&info->domains_failure))
        fprintf(out, "memory domains: error: %s: %s\n", uform_status_name(info->domains_failure.status),
                info->domains_failure.message);
    else {
        fprintf(out, "memory domains: %zu, %zu core%s\n", info->domains_count, info->cores_total,
                plural(info->cores_total));
        for (size_t i = 0; i < info->domains_count; ++i) {
            domain_info_t const *domain = &info->domains[i];
            fprintf(out, "  node %d: ", (int)domain->domain.node);
            print_bytes(out, domain->domain.memory_bytes);
            if (failed(&domain->failure))
                fprintf(out, ", cores: error: %s: %s\n", uform_status_name(domain->failure.status),
                        domain->failure.message);
            else {
                fprintf(out, ", %zu core%s: ", domain->cores_count, plural(domain->cores_count));
                print_core_ranges(out, domain->cores, domain->cores_count);
                fputc('\n', out);
            }
        }
    }

    if (failed(&info->gpus_failure))
        fprintf(out, "gpus: error: %s: %s\n", uform_status_name(info->gpus_failure.status), info->gpus_failure.message);
    else if (!info->gpus_count)
        fprintf(out, "gpus: none (%s)\n",
                failed(&info->gpus_absent_reason) ? info->gpus_absent_reason.message : "no device listed");
    else {
        fprintf(out, "gpus: %zu\n", info->gpus_count);
        for (size_t i = 0; i < info->gpus_count; ++i) {
            gpu_info_t const *gpu = &info->gpus[i];
            fprintf(out, "  %zu: ", i);
            if (failed(&gpu->failure)) fprintf(out, "(name: %s: %s)", uform_status_name(gpu->failure.status), gpu->failure.message);
            else fputs(gpu->name, out);
            fprintf(out, ", %s #%u, %s, %u compute units, ", uform_gpu_vendor_name(gpu->device.vendor),
                    (unsigned)gpu->device.vendor_ordinal, uform_gpu_class_name(gpu->device.gpu_class),
                    (unsigned)gpu->device.compute_units);
            print_bytes(out, gpu->device.memory_bytes);
            fputc('\n', out);
        }
    }

    if (failed(&info->executor_failure))
        fprintf(out, "default threads: %zu (computed: 7/8 of %zu core%s; the executor failed: %s: %s)\n",
                info->default_threads, info->cores_total, plural(info->cores_total),
                uform_status_name(info->executor_failure.status),
                info->executor_failure.message);
    else
        fprintf(out, "default threads: %zu (7/8 of %zu core%s, on %zu domain%s, dispatching as %s)\n",
                info->default_threads, info->cores_total, plural(info->cores_total), info->executor.domains_count,
                plural(info->executor.domains_count), uform_cpu_class_name(info->executor.cpu_class));
}

static void info_print_json(info_t const *info, FILE *out) {
    fputs("{\n  \"version\": ", out);
    json_string(out, info->version);

    fputs(",\n  \"cpu\": ", out);
    if (failed(&info->cpu_failure)) {
        fputs("{\"error\": ", out);
        json_error(out, info->cpu_failure.status, info->cpu_failure.message);
        fputc('}', out);
    }
    else {
        fputs("{\"class\": ", out);
        json_string(out, uform_cpu_class_name(info->cpu_class));
        fprintf(out, ", \"class_value\": %d, \"class_is_tier\": true, \"features\": [", (int)info->cpu_class);
        bool first = true;
        for (unsigned bit = 0; bit < 64; ++bit)
            if (info->cpu_features & (1ull << bit)) {
                if (!first) fputs(", ", out);
                json_string(out, uform_cpu_feature_name(1ull << bit));
                first = false;
            }
        fputs("]}", out);
    }

    fputs(",\n  \"memory_domains\": ", out);
    if (failed(&info->domains_failure)) {
        fputs("{\"error\": ", out);
        json_error(out, info->domains_failure.status, info->domains_failure.message);
        fputc('}', out);
    }
    else {
        fputc('[', out);
        for (size_t i = 0; i < info->domains_count; ++i) {
            domain_info_t const *domain = &info->domains[i];
            fprintf(out, "%s\n    {\"node\": %d, \"memory_bytes\": %llu, ", i ? "," : "", (int)domain->domain.node,
                    (unsigned long long)domain->domain.memory_bytes);
            if (failed(&domain->failure)) {
                fputs("\"error\": ", out);
                json_error(out, domain->failure.status, domain->failure.message);
            }
            else {
                fputs("\"cores\": [", out);
                for (size_t j = 0; j < domain->cores_count; ++j)
                    fprintf(out, "%s%d", j ? ", " : "", (int)domain->cores[j]);
                fputc(']', out);
            }
            fputc('}', out);
        }
        fputs(info->domains_count ? "\n  ]" : "]", out);
    }
    fprintf(out, ",\n  \"cores\": %zu", info->cores_total);

    fputs(",\n  \"gpus\": {", out);
    if (failed(&info->gpus_failure)) {
        fputs("\"error\": ", out);
        json_error(out, info->gpus_failure.status, info->gpus_failure.message);
    }
    else {
        fputs("\"devices\": [", out);
        for (size_t i = 0; i < info->gpus_count; ++i) {
            gpu_info_t const *gpu = &info->gpus[i];
            fprintf(out, "%s\n    {\"ordinal\": %zu, \"name\": ", i ? "," : "", i);
            if (failed(&gpu->failure)) {
                fputs("null, \"name_error\": ", out);
                json_error(out, gpu->failure.status, gpu->failure.message);
            }
            else json_string(out, gpu->name);
            fputs(", \"vendor\": ", out);
            json_string(out, uform_gpu_vendor_name(gpu->device.vendor));
            fprintf(out, ", \"vendor_ordinal\": %u, \"class\": ", (unsigned)gpu->device.vendor_ordinal);
            json_string(out, uform_gpu_class_name(gpu->device.gpu_class));
            fprintf(out, ", \"compute_units\": %u, \"memory_bytes\": %llu}", (unsigned)gpu->device.compute_units,
                    (unsigned long long)gpu->device.memory_bytes);
        }
        fputs(info->gpus_count ? "\n  ]" : "]", out);
        if (failed(&info->gpus_absent_reason)) {
            fputs(", \"absent\": ", out);
            json_error(out, info->gpus_absent_reason.status, info->gpus_absent_reason.message);
        }
    }
    fputc('}', out);

    fprintf(out, ",\n  \"default_threads\": %zu", info->default_threads);
    fputs(",\n  \"default_executor\": ", out);
    if (failed(&info->executor_failure)) {
        fputs("{\"error\": ", out);
        json_error(out, info->executor_failure.status, info->executor_failure.message);
        fputc('}', out);
    }
    else {
        fputs("{\"kind\": ", out);
        json_string(out, executor_kind_name(info->executor.kind));
        fprintf(out, ", \"threads\": %zu, \"domains\": %zu, \"cpu_class\": ", info->executor.threads_count,
                info->executor.domains_count);
        json_string(out, uform_cpu_class_name(info->executor.cpu_class));
        fputs(", \"mood\": ", out);
        json_string(out, mood_name(info->executor.mood));
        fprintf(out, ", \"deferred_limit\": %zu}", info->executor.deferred_limit);
    }
    fputs("\n}\n", out);
}

/* ---- Commands ---- */

/** @brief Flushes standard output and returns `code`, or 1 after saying why where writing it failed
 *  (a full disk, a closed descriptor): output lost is no success. */
static int finish_stdout(char const *program, int code) {
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return code;
    fprintf(stderr, "%s: could not write standard output: %s\n", program, strerror(errno ? errno : EIO));
    return 1;
}

static void usage(FILE *out) {
    fputs("usage: uform <command> [options]\n"
          "\n"
          "commands:\n"
          "  info [--json]   the library version, CPU class and features, memory domains and their\n"
          "                  cores, GPU devices, and the default executor's thread count\n"
          "  bench [...]     the CPU benchmark: fork-join rounds and a memory-bound sum, the engine's\n"
          "                  RAM executor against OpenMP (`uform bench --help` for its options)\n"
          "  encode [...]    texts or images (--image FILE...) to embeddings: --model DIR\n"
          "                  [--format jsonl|npy|f32] [TEXT...]\n"
          "                  (`uform encode --help` for its options)\n"
          "\n"
          "options:\n"
          "  -h, --help      this text\n"
          "  -V, --version   the library version\n"
          "\n"
          "CPU classes are tiers of instruction sets, not vendors: `uform info` names the highest\n"
          "class whose features this CPU has.\n"
          "\n"
          "exit status: 0 on success, 1 when the engine reports an error, 2 on a usage error\n",
          out);
}

static int command_info(int argc, char **argv) {
    bool json = false;
    for (int i = 0; i < argc; ++i) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs("usage: uform info [--json]\n", stdout);
            return finish_stdout("uform info", 0);
        }
        else {
            fprintf(stderr, "uform info: unknown option '%s'\n", argv[i]);
            fputs("usage: uform info [--json]\n", stderr);
            return 2;
        }
    }
    info_t info;
    info_gather(&info);
    if (json) info_print_json(&info, stdout);
    else info_print_text(&info, stdout);
    int code = info_failed(&info) ? 1 : 0;
    info_free(&info);
    return finish_stdout("uform info", code);
}

/** @brief Runs `bench_ram`, found next to this program: `bench/bench_ram` in a build tree,
 *  `../libexec/uform/bench_ram` in an install, or wherever `UFORM_BENCH_RAM` points. */
static int command_bench(int argc, char **argv) {
    char candidates[3][PATH_MAX + 64];
    size_t candidates_count = 0;
    char const *override = getenv("UFORM_BENCH_RAM");
    if (override && *override) snprintf(candidates[candidates_count++], sizeof candidates[0], "%s", override);
    else {
        char self[PATH_MAX];
        ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
        if (length <= 0) {
            fprintf(stderr, "uform bench: cannot find this program's path: %s\n", strerror(errno));
            return 1;
        }
        self[length] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        snprintf(candidates[candidates_count++], sizeof candidates[0], "%s/bench/bench_ram", self);
        snprintf(candidates[candidates_count++], sizeof candidates[0], "%s/../libexec/uform/bench_ram", self);
    }
    for (size_t i = 0; i < candidates_count; ++i) {
        if (access(candidates[i], X_OK) != 0) continue;
        char **arguments = calloc((size_t)argc + 2, sizeof *arguments);
        if (!arguments) {
            fputs("uform bench: out of memory\n", stderr);
            return 1;
        }
        arguments[0] = candidates[i];
        for (int j = 0; j < argc; ++j) arguments[j + 1] = argv[j];
        fflush(stdout);
        execv(candidates[i], arguments);
        fprintf(stderr, "uform bench: cannot run %s: %s\n", candidates[i], strerror(errno));
        free(arguments);
        return 1;
    }
    fputs("uform bench: the benchmark program bench_ram is missing; looked for:\n", stderr);
    for (size_t i = 0; i < candidates_count; ++i) fprintf(stderr, "  %s\n", candidates[i]);
    fputs("build it with the tests (BUILD_TESTING=ON, the default) or set UFORM_BENCH_RAM\n", stderr);
    return 1;
}

/** @brief `uform encode ...` (tools/encode.c). */
int uform_command_encode(int argc, char **argv);

/** @brief Holds the numbers of the standard streams the caller closed (`uform info >&-`) with
 *  /dev/null opened the wrong way round, so they still fail as closed ones do ("Bad file
 *  descriptor"), but a file some library opens later cannot take their number and receive the
 *  output or give the input: the CUDA driver keeps /dev/nvidiactl open, and as descriptor 1 it got
 *  the `info` text (EINVAL) in place of the closed standard output's error. */
static void hold_closed_standard_streams(void) {
    for (int fd = 0; fd <= 2; ++fd) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        int const held = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY); /* the lowest free number: fd */
        if (held >= 0 && held != fd) dup2(held, fd), close(held);
    }
}

int main(int argc, char **argv) {
    hold_closed_standard_streams();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    char const *command = argv[1];
    if (!strcmp(command, "-h") || !strcmp(command, "--help") || !strcmp(command, "help")) {
        usage(stdout);
        return finish_stdout("uform", 0);
    }
    if (!strcmp(command, "-V") || !strcmp(command, "--version")) {
        printf("uform %s\n", uform_version());
        return finish_stdout("uform", 0);
    }
    if (!strcmp(command, "info")) return command_info(argc - 2, argv + 2);
    if (!strcmp(command, "bench")) return command_bench(argc - 2, argv + 2);
    if (!strcmp(command, "encode")) return uform_command_encode(argc - 2, argv + 2);
    fprintf(stderr, "uform: unknown command '%s'\n\n", command);
    usage(stderr);
    return 2;
}

