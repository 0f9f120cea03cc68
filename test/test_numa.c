/**
 *  @file   test_numa.c
 *  @brief  Memory domains, cores, placements, the 7/8 rule, affinity, node-local allocations and
 *          the NUMA node of PCI devices.
 *
 *  The expected topology is read here independently of the library, straight from sysfs and
 *  /proc/self/status: /sys/devices/system/node/node<N>/cpulist for each node's CPUs, `Mems_allowed_list`
 *  for the cpuset's memory nodes, `sched_getaffinity` for the calling thread's CPUs.
 */
#define _GNU_SOURCE 1
#include "check.h"
#include "internal.h"

#include <dirent.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CPUS 4096
#define MAX_NODES 1024

/* ---- Independent reading of the topology ---- */

/** @brief Parses a kernel list ("0-3,8,10-11\n") into `set`; returns 0 on a malformed list. */
static int parse_list(char const *text, unsigned char *set, size_t capacity) {
    memset(set, 0, capacity);
    char const *cursor = text;
    while (*cursor && *cursor != '\n') {
        char *end;
        long first = strtol(cursor, &end, 10), last = first;
        if (end == cursor) return 0;
        cursor = end;
        if (*cursor == '-') {
            last = strtol(cursor + 1, &end, 10);
            cursor = end;
        }
        for (long i = first; i <= last && i >= 0 && (size_t)i < capacity; ++i) set[i] = 1;
        if (*cursor == ',') ++cursor;
    }
    return 1;
}

static int read_text(char const *path, char *text, size_t capacity) {
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    size_t const length = fread(text, 1, capacity - 1, file);
    fclose(file);
    text[length] = '\0';
    return 1;
}

/** @brief CPUs of `node` per sysfs; 0 if the node does not exist. */
static int sysfs_node_cpus(int node, unsigned char *cpus) {
    char path[128], text[8192];
    snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
    if (!read_text(path, text, sizeof(text))) return 0;
    return parse_list(text, cpus, MAX_CPUS);
}

/** @brief The cpuset's memory nodes per /proc/self/status. */
static int status_mems_allowed(unsigned char *nodes) {
    char text[65536];
    CHECK_FATAL(read_text("/proc/self/status", text, sizeof(text)));
    char const *line = strstr(text, "Mems_allowed_list:");
    if (!line) return 0;
    line += strlen("Mems_allowed_list:");
    while (*line == ' ' || *line == '\t') ++line;
    return parse_list(line, nodes, MAX_NODES);
}

static void thread_affinity(unsigned char *cpus) {
    cpu_set_t *set = CPU_ALLOC(MAX_CPUS);
    size_t const size = CPU_ALLOC_SIZE(MAX_CPUS);
    CPU_ZERO_S(size, set);
    CHECK_FATAL(sched_getaffinity(0, size, set) == 0);
    for (int cpu = 0; cpu < MAX_CPUS; ++cpu) cpus[cpu] = CPU_ISSET_S(cpu, size, set) ? 1 : 0;
    CPU_FREE(set);
}

static int pin_to(int cpu) {
    cpu_set_t *set = CPU_ALLOC(MAX_CPUS);
    size_t const size = CPU_ALLOC_SIZE(MAX_CPUS);
    CPU_ZERO_S(size, set);
    CPU_SET_S(cpu, size, set);
    int const result = sched_setaffinity(0, size, set);
    CPU_FREE(set);
    return result;
}

/** @brief The expected domains: allowed nodes with at least one allowed core, ascending. */
typedef struct expected_t {
    size_t count;
    int nodes[MAX_NODES];
    unsigned cores[MAX_NODES];
    size_t all_cores;
} expected_t;

static expected_t expected_domains(void) {
    static unsigned char mems[MAX_NODES], affinity[MAX_CPUS], node_cpus[MAX_CPUS];
    expected_t expected = {0};
    thread_affinity(affinity);
    int const numa = numa_available() >= 0;
    if (!numa || !status_mems_allowed(mems)) { /* the library's documented fallback: one node 0 */
        memset(mems, 0, sizeof(mems));
        mems[0] = 1;
    }
    for (int node = 0; node < MAX_NODES; ++node) {
        if (!mems[node]) continue;
        if (numa) {
            if (!sysfs_node_cpus(node, node_cpus)) continue;
        }
        else
            memset(node_cpus, 1, sizeof(node_cpus));
        unsigned cores = 0;
        for (int cpu = 0; cpu < MAX_CPUS; ++cpu) cores += node_cpus[cpu] && affinity[cpu];
        if (!cores) continue;
        expected.nodes[expected.count] = node;
        expected.cores[expected.count] = cores;
        expected.all_cores += cores;
        ++expected.count;
    }
    return expected;
}

/** @brief Whether `cpu` belongs to `node` per sysfs (always, without NUMA). */
static int cpu_on_node(int cpu, int node) {
    static unsigned char cpus[MAX_CPUS];
    if (numa_available() < 0) return node == 0;
    return sysfs_node_cpus(node, cpus) && cpu >= 0 && cpu < MAX_CPUS && cpus[cpu];
}

/* ---- Listing ---- */

static void test_domains_listing(void) {
    expected_t const expected = expected_domains();
    CHECK_FATAL(expected.count >= 1);

    size_t count = 12345;
    CHECK_STATUS(uform_memory_domains(NULL, 0, &count), uform_status_ok_k);
    CHECK(count == expected.count);

    uform_memory_domain_t domains[64];
    CHECK_FATAL(count <= 64);
    CHECK_STATUS(uform_memory_domains(domains, 64, &count), uform_status_ok_k);
    CHECK(count == expected.count);
    size_t total_cores = 0;
    for (size_t i = 0; i < count && i < expected.count; ++i) {
        CHECK(domains[i].node == expected.nodes[i]);
        CHECK(domains[i].cores_count == expected.cores[i]);
        total_cores += domains[i].cores_count;
        if (i) CHECK(domains[i].node > domains[i - 1].node); /* ascending */
        if (numa_available() >= 0) CHECK(domains[i].memory_bytes == (uint64_t)numa_node_size64(domains[i].node, NULL));
        CHECK(domains[i].memory_bytes > 0);
    }
    CHECK(total_cores == expected.all_cores);

    /* The listing protocol: `count` required, NULL only with capacity 0, a small capacity fills a
       prefix and still reports the total. */
    CHECK_STATUS(uform_memory_domains(domains, 64, NULL), uform_status_invalid_argument_k);
    CHECK_MESSAGE("count");
    CHECK_STATUS(uform_memory_domains(NULL, 1, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("capacity 1");
    uform_memory_domain_t small[2];
    memset(small, 0xab, sizeof(small));
    count = 0;
    CHECK_STATUS(uform_memory_domains(small, 1, &count), uform_status_ok_k);
    CHECK(count == expected.count);
    CHECK(small[0].node == expected.nodes[0]);
    unsigned char untouched[sizeof(small[1])];
    memset(untouched, 0xab, sizeof(untouched));
    CHECK(memcmp(&small[1], untouched, sizeof(untouched)) == 0);
}

static void test_domain_cores(void) {
    static unsigned char affinity[MAX_CPUS], node_cpus[MAX_CPUS];
    thread_affinity(affinity);
    expected_t const expected = expected_domains();
    for (size_t i = 0; i < expected.count; ++i) {
        int const node = expected.nodes[i];
        size_t count = 0;
        CHECK_STATUS(uform_memory_domain_cores(node, NULL, 0, &count), uform_status_ok_k);
        CHECK(count == expected.cores[i]);
        int32_t cores[MAX_CPUS];
        CHECK_STATUS(uform_memory_domain_cores(node, cores, MAX_CPUS, &count), uform_status_ok_k);
        CHECK(count == expected.cores[i]);
        if (numa_available() >= 0) CHECK_FATAL(sysfs_node_cpus(node, node_cpus));
        for (size_t j = 0; j < count; ++j) {
            CHECK(cores[j] >= 0 && cores[j] < MAX_CPUS);
            CHECK(affinity[cores[j]]); /* a subset of the affinity */
            if (numa_available() >= 0) CHECK(node_cpus[cores[j]]);
            if (j) CHECK(cores[j] > cores[j - 1]);
        }
        /* A capacity of one writes one core and reports them all. */
        int32_t first[2] = {-5, -5};
        CHECK_STATUS(uform_memory_domain_cores(node, first, 1, &count), uform_status_ok_k);
        CHECK(count == expected.cores[i] && first[0] == cores[0] && first[1] == -5);
    }

    size_t count = 777;
    int32_t cores[4];
    CHECK_STATUS(uform_memory_domain_cores(9999, cores, 4, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("9999");
    CHECK(count == 777); /* untouched on failure */
    CHECK_STATUS(uform_memory_domain_cores(-1, cores, 4, &count), uform_status_invalid_argument_k);
    CHECK_MESSAGE("-1");
    CHECK_STATUS(uform_memory_domain_cores(expected.nodes[0], cores, 4, NULL), uform_status_invalid_argument_k);
    CHECK_STATUS(uform_memory_domain_cores(expected.nodes[0], NULL, 4, &count), uform_status_invalid_argument_k);
}

/* ---- Placements ---- */

/** @brief Checks a placement covers exactly the allowed cores of its domains, each once. */
static void check_placement_cores(uform_placement_t const *placement) {
    static unsigned char affinity[MAX_CPUS], seen[MAX_CPUS];
    thread_affinity(affinity);
    memset(seen, 0, sizeof(seen));
    size_t expected_cores = 0;
    for (size_t d = 0; d < placement->domains_count; ++d) {
        size_t count = 0;
        CHECK_STATUS(uform_memory_domain_cores(placement->domain_nodes[d], NULL, 0, &count), uform_status_ok_k);
        expected_cores += count;
    }
    CHECK(placement->cores_count == expected_cores);
    for (size_t i = 0; i < placement->cores_count; ++i) {
        int32_t const core = placement->cores[i];
        CHECK_FATAL(core >= 0 && core < MAX_CPUS);
        CHECK(affinity[core]);
        CHECK(!seen[core]);
        seen[core] = 1;
        CHECK_FATAL(placement->core_domains[i] < placement->domains_count);
        CHECK(cpu_on_node(core, placement->domain_nodes[placement->core_domains[i]]));
        if (i) CHECK(placement->core_domains[i] >= placement->core_domains[i - 1]); /* domain order */
    }
}

static void test_placement_derived(void) {
    expected_t const expected = expected_domains();
    uform_cpu_class_t detected;
    CHECK_OK(uform_cpu_detect(&detected, NULL));

    uform_placement_t placement;
    CHECK_STATUS(uform_placement_resolve(NULL, &placement), uform_status_ok_k);
    CHECK(placement.domains_count == expected.count);
    for (size_t i = 0; i < placement.domains_count && i < expected.count; ++i)
        CHECK(placement.domain_nodes[i] == expected.nodes[i]);
    CHECK(placement.cores_count == expected.all_cores); /* every allowed core */
    CHECK(placement.cpu_class == detected);
    check_placement_cores(&placement);
    uform_placement_free(&placement);
    CHECK(placement.cores == NULL && placement.cores_count == 0);
    uform_placement_free(&placement); /* a second free is a no-op */
    uform_placement_free(NULL);

    /* All-zero options derive exactly as NULL does; so does a pointer with a zero count. */
    uform_ram_options_t zero = {0};
    CHECK_STATUS(uform_placement_resolve(&zero, &placement), uform_status_ok_k);
    CHECK(placement.domains_count == expected.count && placement.cores_count == expected.all_cores);
    uform_placement_free(&placement);
    int32_t const ignored[] = {9999};
    uform_ram_options_t pointer_only = {.memory_domains = ignored, .memory_domains_count = 0};
    CHECK_STATUS(uform_placement_resolve(&pointer_only, &placement), uform_status_ok_k);
    CHECK(placement.domains_count == expected.count);
    uform_placement_free(&placement);

    /* Explicit nodes, in the caller's order (reversed here when there are several). */
    int32_t nodes[64];
    size_t const n = expected.count < 64 ? expected.count : 64;
    for (size_t i = 0; i < n; ++i) nodes[i] = expected.nodes[n - 1 - i];
    uform_ram_options_t explicit_nodes = {.memory_domains = nodes, .memory_domains_count = n};
    CHECK_STATUS(uform_placement_resolve(&explicit_nodes, &placement), uform_status_ok_k);
    CHECK(placement.domains_count == n);
    for (size_t i = 0; i < n && i < placement.domains_count; ++i) CHECK(placement.domain_nodes[i] == nodes[i]);
    check_placement_cores(&placement);
    uform_placement_free(&placement);

    /* A lower class is recorded as is. */
    uform_ram_options_t serial = {.cpu_class = uform_cpu_class_serial_k};
    CHECK_STATUS(uform_placement_resolve(&serial, &placement), uform_status_ok_k);
    CHECK(placement.cpu_class == uform_cpu_class_serial_k);
    uform_placement_free(&placement);
}

static void test_placement_invalid(void) {
    expected_t const expected = expected_domains();
    uform_placement_t placement, sentinel;
    memset(&sentinel, 0x5a, sizeof(sentinel));

#define CHECK_REFUSED(options, status, needle)                                                     \
    do {                                                                                           \
        placement = sentinel;                                                                      \
        CHECK_STATUS(uform_placement_resolve((options), &placement), (status));                    \
        CHECK_MESSAGE(needle);                                                                     \
        CHECK(memcmp(&placement, &sentinel, sizeof(placement)) == 0); /* untouched */              \
    } while (0)

    int32_t unknown[] = {9999};
    uform_ram_options_t options = {.memory_domains = unknown, .memory_domains_count = 1};
    CHECK_REFUSED(&options, uform_status_invalid_argument_k, "9999");
    CHECK_MESSAGE("allowed nodes"); /* and says what is allowed */

    int32_t negative[] = {-3};
    options = (uform_ram_options_t){.memory_domains = negative, .memory_domains_count = 1};
    CHECK_REFUSED(&options, uform_status_invalid_argument_k, "-3");

    int32_t duplicate[] = {expected.nodes[0], expected.nodes[0]};
    options = (uform_ram_options_t){.memory_domains = duplicate, .memory_domains_count = 2};
    CHECK_REFUSED(&options, uform_status_invalid_argument_k, "repeats");
    char node_text[32];
    snprintf(node_text, sizeof(node_text), "node %d", expected.nodes[0]);
    CHECK_MESSAGE(node_text);

    /* A bad entry after good ones is still found, and named by its index. */
    int32_t late[] = {expected.nodes[0], 4242};
    options = (uform_ram_options_t){.memory_domains = late, .memory_domains_count = 2};
    CHECK_REFUSED(&options, uform_status_invalid_argument_k, "memory_domains[1]");
    CHECK_MESSAGE("4242");

    options = (uform_ram_options_t){.memory_domains = NULL, .memory_domains_count = 3};
    CHECK_REFUSED(&options, uform_status_invalid_argument_k, "memory_domains is NULL");

    /* Classes: above the CPU is UNSUPPORTED, out of range INVALID_ARGUMENT. */
    uform_cpu_class_t detected;
    uint64_t features;
    CHECK_OK(uform_cpu_detect(&detected, &features));
    if ((uform_cpu_class_features(uform_cpu_class_intel_granite_k) & ~features) != 0) {
        options = (uform_ram_options_t){.cpu_class = uform_cpu_class_intel_granite_k};
        CHECK_REFUSED(&options, uform_status_unsupported_k, "intel_granite");
    }
    options = (uform_ram_options_t){.cpu_class = uform_cpu_class_wasm32_v128_k};
    CHECK_REFUSED(&options, uform_status_unsupported_k, "wasm32_v128");
    options = (uform_ram_options_t){.cpu_class = (uform_cpu_class_t)19};
    CHECK_REFUSED(&options, uform_status_invalid_argument_k, "19");

    CHECK_STATUS(uform_placement_resolve(NULL, NULL), uform_status_invalid_argument_k);
#undef CHECK_REFUSED
}

/* ---- The 7/8 rule ---- */

static void test_default_threads(void) {
    static size_t const cores[] = {0, 1, 2, 3, 7, 8, 9, 16, 32, 64, 128};
    static size_t const threads[] = {1, 1, 1, 2, 6, 7, 7, 14, 28, 56, 112};
    for (size_t i = 0; i < sizeof(cores) / sizeof(cores[0]); ++i) {
        if (uform_default_threads(cores[i]) != threads[i])
            fprintf(stderr, "uform_default_threads(%zu) = %zu, expected %zu\n", cores[i],
                    uform_default_threads(cores[i]), threads[i]);
        CHECK(uform_default_threads(cores[i]) == threads[i]);
    }
    CHECK(uform_default_threads(SIZE_MAX) == SIZE_MAX / 8 * 7 + 6); /* no overflow */
}

/* ---- Affinity ---- */

/** @brief With the calling thread pinned to `cpu`, everything shrinks to that one core. */
static void check_single_core(int cpu) {
    uform_memory_domain_t domains[64];
    size_t count = 0;
    CHECK_STATUS(uform_memory_domains(domains, 64, &count), uform_status_ok_k);
    CHECK(count == 1);
    if (count < 1) return;
    CHECK(domains[0].cores_count == 1);
    CHECK(cpu_on_node(cpu, domains[0].node));

    int32_t cores[8];
    CHECK_STATUS(uform_memory_domain_cores(domains[0].node, cores, 8, &count), uform_status_ok_k);
    CHECK(count == 1 && cores[0] == cpu);

    uform_placement_t placement;
    CHECK_STATUS(uform_placement_resolve(NULL, &placement), uform_status_ok_k);
    CHECK(placement.domains_count == 1 && placement.cores_count == 1);
    if (placement.cores_count == 1) CHECK(placement.cores[0] == cpu && placement.core_domains[0] == 0);
    uform_placement_free(&placement);
}

static int allowed_cpu(int last) {
    static unsigned char affinity[MAX_CPUS];
    thread_affinity(affinity);
    int found = -1;
    for (int cpu = 0; cpu < MAX_CPUS; ++cpu)
        if (affinity[cpu]) {
            found = cpu;
            if (!last) break;
        }
    return found;
}

static void test_affinity_process(void) {
    int const cpu = allowed_cpu(1);
    CHECK_FATAL(cpu >= 0);
    fflush(stdout), fflush(stderr);
    pid_t const child = fork();
    CHECK_FATAL(child >= 0);
    if (child == 0) {
        if (pin_to(cpu) != 0) _exit(3);
        check_single_core(cpu);
        _exit(check_failures ? 1 : 0);
    }
    int status = 0;
    CHECK_FATAL(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The parent's view is unchanged. */
    expected_t const expected = expected_domains();
    size_t count = 0;
    CHECK_STATUS(uform_memory_domains(NULL, 0, &count), uform_status_ok_k);
    CHECK(count == expected.count);
}

static void *pinned_thread(void *argument) {
    int const cpu = *(int const *)argument;
    if (pin_to(cpu) != 0) {
        fprintf(stderr, "could not pin a thread to CPU %d\n", cpu);
        ++check_failures;
        return NULL;
    }
    check_single_core(cpu);
    return NULL;
}

static void test_affinity_thread(void) {
    /* The calling thread's mask counts, not the process's: a thread pinned to one CPU sees one core
       while the main thread keeps seeing all of them. */
    int cpu = allowed_cpu(0);
    CHECK_FATAL(cpu >= 0);
    pthread_t thread;
    CHECK_FATAL(pthread_create(&thread, NULL, pinned_thread, &cpu) == 0);
    pthread_join(thread, NULL);
    uform_placement_t placement;
    CHECK_STATUS(uform_placement_resolve(NULL, &placement), uform_status_ok_k);
    CHECK(placement.cores_count == expected_domains().all_cores);
    uform_placement_free(&placement);
}

/* ---- Memory ---- */

static void test_numa_alloc(void) {
    long const page = sysconf(_SC_PAGESIZE);
    size_t const bytes = 1u << 20;
    expected_t const expected = expected_domains();
    for (size_t i = 0; i < expected.count; ++i) {
        int const node = expected.nodes[i];
        unsigned char *memory = uform_numa_alloc(bytes, node);
        CHECK_FATAL(memory != NULL);
        CHECK(((uintptr_t)memory % (uintptr_t)page) == 0);
        size_t nonzero = 0;
        for (size_t j = 0; j < bytes; ++j) nonzero += memory[j] != 0;
        CHECK(nonzero == 0);
        memset(memory, 0x11, bytes); /* touch every page: placement happens at first touch */
        if (numa_available() >= 0) {
            for (size_t offset = 0; offset < bytes; offset += (size_t)page * 64) {
                int actual = -1;
                CHECK(get_mempolicy(&actual, NULL, 0, memory + offset, MPOL_F_NODE | MPOL_F_ADDR) == 0);
                CHECK(actual == node);
            }
        }
        uform_numa_free(memory, bytes);
    }
    /* Unknown and negative nodes fall back to any node, still zeroed. */
    int32_t const fallbacks[] = {-1, 9999};
    for (size_t i = 0; i < 2; ++i) {
        unsigned char *memory = uform_numa_alloc(3 * (size_t)page + 5, fallbacks[i]);
        CHECK_FATAL(memory != NULL);
        CHECK(memory[0] == 0 && memory[3 * page + 4] == 0);
        memory[3 * page + 4] = 1;
        uform_numa_free(memory, 3 * (size_t)page + 5);
    }
    CHECK(uform_numa_alloc(0, 0) == NULL);
    uform_numa_free(NULL, 123); /* no-op */
}

/* ---- PCI ---- */

static void test_pci(void) {
    CHECK(uform_numa_node_of_pci(NULL) == -1);
    CHECK(uform_numa_node_of_pci("") == -1);
    CHECK(uform_numa_node_of_pci("garbage") == -1);
    CHECK(uform_numa_node_of_pci("0000:3b:00.0/../../..") == -1);
    CHECK(uform_numa_node_of_pci("0000:3b:00") == -1);
    CHECK(uform_numa_node_of_pci("0000:3b:00.9") == -1);
    CHECK(uform_numa_node_of_pci("ffff:ff:1f.7") == -1); /* well-formed, no such device */

    DIR *directory = opendir("/sys/bus/pci/devices");
    if (!directory) return;
    size_t checked = 0;
    struct dirent *entry;
    while ((entry = readdir(directory)) != NULL && checked < 64) {
        if (entry->d_name[0] == '.') continue;
        char path[512], text[32];
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", entry->d_name);
        if (!read_text(path, text, sizeof(text))) continue;
        long const node = strtol(text, NULL, 10);
        int32_t const expected = node < 0 ? -1 : (int32_t)node;
        if (strlen(entry->d_name) >= 32) continue;
        char upper[300], wide[320];
        snprintf(upper, sizeof(upper), "%s", entry->d_name);
        for (char *c = upper; *c; ++c)
            if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 'a' + 'A');
        snprintf(wide, sizeof(wide), "0000%s", upper); /* NVML's 8-digit domain */
        CHECK(uform_numa_node_of_pci(entry->d_name) == expected);
        CHECK(uform_numa_node_of_pci(upper) == expected);
        CHECK(uform_numa_node_of_pci(wide) == expected);
        ++checked;
    }
    closedir(directory);
    printf("checked %zu PCI devices\n", checked);
}

int main(void) {
    test_domains_listing();
    test_domain_cores();
    test_placement_derived();
    test_placement_invalid();
    test_default_threads();
    test_affinity_process();
    test_affinity_thread();
    test_numa_alloc();
    test_pci();
    expected_t const expected = expected_domains();
    printf("%zu memory domains, %zu allowed cores\n", expected.count, expected.all_cores);
    CHECK_DONE();
}
