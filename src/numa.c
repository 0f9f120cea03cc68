/**
 *  @file   numa.c
 *  @brief  Memory domains: the NUMA nodes the process may allocate on, the cores of each it may run
 *          on, placements of RAM options onto those cores, node-local allocations, and the node of
 *          a PCI device.
 *
 *  Two kinds of facts, kept apart:
 *  - the machine's topology (which nodes exist, which CPUs each carries, how much memory): fixed for
 *    the life of the process, read once through libnuma and cached;
 *  - what this process may use (its cpuset's `mems` and the calling thread's affinity): changeable at
 *    any time (`taskset`, `sched_setaffinity`, cgroup moves), so read afresh on every call.
 *
 *  libnuma prints to stderr (`numa_warn`, `numa_error`) and even exits (bitmask allocation failure) on
 *  some paths; we stay off those: nodes are checked against the topology before libnuma is asked
 *  about them, the allowed memory nodes are read with `get_mempolicy(MPOL_F_MEMS_ALLOWED)` (what
 *  `numa_get_mems_allowed` does, minus its allocate-or-exit and print-on-error), and allocations bind
 *  with `mbind` directly (what `numa_alloc_onnode` does, minus its printing).
 */
#define _GNU_SOURCE 1 /* `sched_getaffinity`, `cpu_set_t` (gnu17 alone does not expose them) */
#include "internal.h"

#include <errno.h>    // `errno`
#include <fcntl.h>    // `open`
#include <numa.h>     // `numa_available`, `numa_node_to_cpus`, `numa_node_size64`
#include <numaif.h>   // `get_mempolicy`, `mbind`, `MPOL_*`
#include <pthread.h>  // `pthread_once`
#include <sched.h>    // `sched_getaffinity`
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `malloc`, `calloc`, `free`
#include <string.h>   // `memset`, `strerror`
#include <sys/mman.h> // `mmap`, `munmap`
#include <unistd.h>   // `sysconf`, `read`, `close`

#define UFORM_WORD_BITS (sizeof(unsigned long) * 8)

static size_t uform_words_for(size_t bits) { return (bits + UFORM_WORD_BITS - 1) / UFORM_WORD_BITS; }

static int uform_bit(unsigned long const *words, size_t words_count, size_t bit) {
    size_t const word = bit / UFORM_WORD_BITS;
    return word < words_count && ((words[word] >> (bit % UFORM_WORD_BITS)) & 1ul);
}

/* ---- Topology (cached) ---- */

typedef struct uform_topology_t {
    uform_status_t status;    /**< OK, or why the snapshot could not be built (then nothing else is set). */
    int numa;                 /**< libnuma works here; otherwise one node 0 carries every CPU. */
    size_t nodes_count;       /**< Highest configured node ID + 1. */
    size_t node_words;        /**< Words of a node mask as `get_mempolicy` and `mbind` take it. */
    size_t cpu_words;         /**< Words of a CPU mask as `sched_getaffinity` takes it. */
    unsigned long *exists;    /**< [node_words] configured nodes (IDs may be sparse). */
    unsigned long *node_cpus; /**< [nodes_count * cpu_words] CPUs of each node. */
    uint64_t *node_bytes;     /**< [nodes_count] memory of each node. */
} uform_topology_t;

static uform_topology_t uform_topology;
static pthread_once_t uform_topology_once = PTHREAD_ONCE_INIT;

/** @brief The kernel rejects affinity buffers shorter than its CPU mask (EINVAL); find its size. */
static size_t uform_probe_cpu_words(size_t bits) {
    if (bits < 1024) bits = 1024;
    for (; bits <= (1u << 22); bits *= 2) {
        size_t const words = uform_words_for(bits);
        unsigned long *mask = calloc(words, sizeof(unsigned long));
        if (!mask) return 0;
        int const result = sched_getaffinity(0, words * sizeof(unsigned long), (cpu_set_t *)mask);
        int const error = errno;
        free(mask);
        if (result == 0 || error != EINVAL) return words; /* other errors surface on the real read */
    }
    return uform_words_for(bits / 2);
}

static void uform_topology_init(void) {
    uform_topology_t t = {.status = uform_status_ok_k};
    t.numa = numa_available() >= 0;
    size_t const numa_cpu_bits = t.numa && numa_num_possible_cpus() > 0 ? (size_t)numa_num_possible_cpus() : 0;
    t.cpu_words = uform_probe_cpu_words(numa_cpu_bits);
    if (!t.cpu_words) goto out_of_memory;

    if (t.numa) {
        int const max_node = numa_max_node();
        t.nodes_count = max_node >= 0 ? (size_t)max_node + 1 : 1;
        size_t node_bits = numa_num_possible_nodes() > 0 ? (size_t)numa_num_possible_nodes() : 0;
        if (node_bits < t.nodes_count) node_bits = t.nodes_count;
        t.node_words = uform_words_for(node_bits);
    }
    else
        t.nodes_count = 1, t.node_words = 1;

    t.exists = calloc(t.node_words, sizeof(unsigned long));
    t.node_cpus = calloc(t.nodes_count * t.cpu_words, sizeof(unsigned long));
    t.node_bytes = calloc(t.nodes_count, sizeof(uint64_t));
    if (!t.exists || !t.node_cpus || !t.node_bytes) goto out_of_memory;

    if (!t.numa) {
        /* One node 0 carrying every CPU: intersecting with the affinity then yields the allowed CPUs. */
        t.exists[0] = 1;
        memset(t.node_cpus, 0xff, t.cpu_words * sizeof(unsigned long));
        long const pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        t.node_bytes[0] = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
        uform_topology = t;
        return;
    }

    /* `numa_node_to_cpus` wants exactly libnuma's CPU mask width (it compares sizes against its
       cache), which may exceed ours; read into a buffer of its width and keep what fits ours. */
    size_t const numa_words = uform_words_for(numa_cpu_bits ? numa_cpu_bits : 1);
    unsigned long *buffer = calloc(numa_words, sizeof(unsigned long));
    if (!buffer) goto out_of_memory;
    for (size_t node = 0; node < t.nodes_count; ++node) {
        /* Node IDs may be sparse; asking libnuma about a missing one makes it warn on stderr. */
        int const exists = numa_nodes_ptr ? numa_bitmask_isbitset(numa_nodes_ptr, (unsigned)node) : node == 0;
        if (!exists) continue;
        t.exists[node / UFORM_WORD_BITS] |= 1ul << (node % UFORM_WORD_BITS);
        struct bitmask cpus = {.size = numa_cpu_bits, .maskp = buffer};
        /* On failure libnuma fills the mask with ones ("assume one node"); a node whose CPUs cannot
           be read carries none as far as we are concerned. */
        if (numa_cpu_bits && numa_node_to_cpus((int)node, &cpus) == 0)
            for (size_t word = 0; word < numa_words && word < t.cpu_words; ++word)
                t.node_cpus[node * t.cpu_words + word] = buffer[word];
        long long const bytes = numa_node_size64((int)node, NULL);
        t.node_bytes[node] = bytes > 0 ? (uint64_t)bytes : 0;
    }
    free(buffer);
    uform_topology = t;
    return;

out_of_memory:
    free(t.exists), free(t.node_cpus), free(t.node_bytes);
    uform_topology = (uform_topology_t){.status = uform_status_out_of_memory_k};
}

static uform_topology_t const *uform_topology_get(void) {
    pthread_once(&uform_topology_once, uform_topology_init);
    return &uform_topology;
}

/* ---- Views (per call) ---- */

/** @brief What the process may use right now: its cpuset's memory nodes and the calling thread's
 *  affinity (which the kernel already intersects with the cpuset's CPUs). */
typedef struct uform_view_t {
    uform_topology_t const *topology;
    unsigned long *mems;     /**< [node_words] */
    unsigned long *affinity; /**< [cpu_words] */
} uform_view_t;

static void uform_view_close(uform_view_t *view) {
    free(view->mems), free(view->affinity);
    view->mems = view->affinity = NULL;
}

static uform_status_t uform_view_open(uform_view_t *view) {
    memset(view, 0, sizeof(*view));
    uform_topology_t const *t = view->topology = uform_topology_get();
    if (t->status != uform_status_ok_k)
        return uform_fail(t->status, "out of memory while reading the NUMA topology");
    view->mems = calloc(t->node_words, sizeof(unsigned long));
    view->affinity = calloc(t->cpu_words, sizeof(unsigned long));
    if (!view->mems || !view->affinity) {
        uform_view_close(view);
        return uform_fail(uform_status_out_of_memory_k, "out of memory for the NUMA node and CPU masks");
    }
    if (sched_getaffinity(0, t->cpu_words * sizeof(unsigned long), (cpu_set_t *)view->affinity) != 0) {
        int const error = errno;
        uform_view_close(view);
        return uform_fail(uform_status_system_error_k, "sched_getaffinity failed: %s", strerror(error));
    }
    if (!t->numa) {
        view->mems[0] = 1;
        return uform_status_ok_k;
    }
    /* The kernel's ABI takes "bits + 1" as `maxnode` (it copies `maxnode - 1` bits). */
    if (get_mempolicy(NULL, view->mems, t->node_words * UFORM_WORD_BITS + 1, NULL, MPOL_F_MEMS_ALLOWED) != 0) {
        int const error = errno;
        uform_view_close(view);
        return uform_fail(uform_status_system_error_k, "get_mempolicy(MPOL_F_MEMS_ALLOWED) failed: %s",
                          strerror(error));
    }
    return uform_status_ok_k;
}

/** @brief Whether `node` exists on this machine. */
static int uform_view_exists(uform_view_t const *view, int64_t node) {
    uform_topology_t const *t = view->topology;
    return node >= 0 && (uint64_t)node < t->nodes_count && uform_bit(t->exists, t->node_words, (size_t)node);
}

/** @brief Whether the process may allocate on `node` (it exists and is in the cpuset's `mems`). */
static int uform_view_mems_allowed(uform_view_t const *view, int64_t node) {
    return uform_view_exists(view, node) && uform_bit(view->mems, view->topology->node_words, (size_t)node);
}

/** @brief The CPUs of an existing `node`. */
static unsigned long const *uform_view_node_cpus(uform_view_t const *view, size_t node) {
    return view->topology->node_cpus + node * view->topology->cpu_words;
}

/** @brief Cores of an existing `node` the calling thread may run on. */
static size_t uform_view_cores_count(uform_view_t const *view, size_t node) {
    unsigned long const *cpus = uform_view_node_cpus(view, node);
    size_t count = 0;
    for (size_t word = 0; word < view->topology->cpu_words; ++word)
        count += (size_t)__builtin_popcountl(cpus[word] & view->affinity[word]);
    return count;
}

/** @brief Whether `node` is a memory domain: allowed memory and at least one allowed core. */
static int uform_view_is_domain(uform_view_t const *view, int64_t node) {
    return uform_view_mems_allowed(view, node) && uform_view_cores_count(view, (size_t)node) > 0;
}

/** @brief Writes the members of a set as ranges, "0-3,6", or "none"; truncates with "...". */
static char const *uform_format_set(char *buffer, size_t capacity, size_t bits_count,
                                    int (*member)(void const *context, size_t bit), void const *context) {
    size_t length = 0;
    buffer[0] = '\0';
    for (size_t bit = 0; bit < bits_count; ++bit) {
        if (!member(context, bit)) continue;
        size_t last = bit;
        while (last + 1 < bits_count && member(context, last + 1)) ++last;
        int const written = last == bit ? snprintf(buffer + length, capacity - length, "%s%zu", length ? "," : "", bit)
                                        : snprintf(buffer + length, capacity - length, "%s%zu-%zu", length ? "," : "", bit, last);
        if (written < 0 || (size_t)written >= capacity - length) {
            if (capacity >= 4) memcpy(buffer + capacity - 4, "...", 4);
            return buffer;
        }
        length += (size_t)written;
        bit = last;
    }
    if (!length) snprintf(buffer, capacity, "none");
    return buffer;
}

static int uform_domain_member(void const *context, size_t node) {
    return uform_view_is_domain((uform_view_t const *)context, (int64_t)node);
}

static int uform_mems_member(void const *context, size_t node) {
    return uform_view_mems_allowed((uform_view_t const *)context, (int64_t)node);
}

static int uform_affinity_member(void const *context, size_t cpu) {
    uform_view_t const *view = (uform_view_t const *)context;
    return uform_bit(view->affinity, view->topology->cpu_words, cpu);
}

/** @brief "0,1": the memory domains, the node set every message names as allowed. */
static char const *uform_format_domains(uform_view_t const *view, char *buffer, size_t capacity) {
    return uform_format_set(buffer, capacity, view->topology->nodes_count, uform_domain_member, view);
}

/* ---- Listing ---- */

uform_status_t uform_memory_domains(uform_memory_domain_t *domains, size_t capacity, size_t *count) {
    if (!count) return uform_fail(uform_status_invalid_argument_k, "count is NULL: the listing needs it for the total");
    if (!domains && capacity)
        return uform_fail(uform_status_invalid_argument_k,
                          "domains is NULL with capacity %zu: pass a buffer, or capacity 0 to query the count",
                          capacity);
    uform_view_t view;
    uform_status_t const status = uform_view_open(&view);
    if (status != uform_status_ok_k) return status;
    size_t total = 0;
    for (size_t node = 0; node < view.topology->nodes_count; ++node) {
        if (!uform_view_mems_allowed(&view, (int64_t)node)) continue;
        size_t const cores = uform_view_cores_count(&view, node);
        if (!cores) continue; /* memory-only nodes (CXL, HBM) and nodes outside the affinity */
        if (total < capacity)
            domains[total] = (uform_memory_domain_t){
                .node = (int32_t)node, .cores_count = (uint32_t)cores, .memory_bytes = view.topology->node_bytes[node]};
        ++total;
    }
    uform_view_close(&view);
    *count = total;
    return uform_status_ok_k;
}

uform_status_t uform_memory_domain_cores(int32_t node, int32_t *cores, size_t capacity, size_t *count) {
    if (!count) return uform_fail(uform_status_invalid_argument_k, "count is NULL: the listing needs it for the total");
    if (!cores && capacity)
        return uform_fail(uform_status_invalid_argument_k,
                          "cores is NULL with capacity %zu: pass a buffer, or capacity 0 to query the count",
                          capacity);
    uform_view_t view;
    uform_status_t status = uform_view_open(&view);
    if (status != uform_status_ok_k) return status;
    char allowed[160];
    if (!uform_view_exists(&view, node))
        status = uform_fail(uform_status_invalid_argument_k,
                            "NUMA node %d does not exist on this machine; nodes the process may allocate on: %s",
                            (int)node, uform_format_set(allowed, sizeof(allowed), view.topology->nodes_count,
                                                        uform_mems_member, &view));
    else if (!uform_view_mems_allowed(&view, node))
        status = uform_fail(uform_status_invalid_argument_k,
                            "NUMA node %d is outside the process's cpuset (mems_allowed); nodes the process may "
                            "allocate on: %s",
                            (int)node, uform_format_set(allowed, sizeof(allowed), view.topology->nodes_count,
                                                        uform_mems_member, &view));
    else {
        /* A node the process may allocate on but not run on (memory-only, or outside the affinity)
           lists zero cores: it exists and is usable for memory, so it is not an invalid argument. */
        unsigned long const *cpus = uform_view_node_cpus(&view, (size_t)node);
        size_t total = 0;
        for (size_t cpu = 0; cpu < view.topology->cpu_words * UFORM_WORD_BITS; ++cpu) {
            if (!uform_bit(cpus, view.topology->cpu_words, cpu) || !uform_bit(view.affinity, view.topology->cpu_words, cpu))
                continue;
            if (total < capacity) cores[total] = (int32_t)cpu;
            ++total;
        }
        *count = total;
    }
    uform_view_close(&view);
    return status;
}

/* ---- Placements ---- */

uform_status_t uform_placement_resolve(uform_ram_options_t const *ram, uform_placement_t *placement) {
    if (!placement) return uform_fail(uform_status_invalid_argument_k, "placement is NULL");
    int32_t const *requested = ram ? ram->memory_domains : NULL;
    size_t const requested_count = ram ? ram->memory_domains_count : 0;

    uform_placement_t result = {0};
    uform_view_t view;
    uform_status_t status = uform_view_open(&view);
    if (status != uform_status_ok_k) return status;
    char allowed[160], affinity[160];
    uform_format_domains(&view, allowed, sizeof(allowed));

    /* NULL with a count is malformed. A pointer with a zero count derives, like all-zero options:
       the header documents the count as "zero derives", and the count is what says how many entries
       the pointer holds, so a pointer to zero entries names nothing and is ignored. */
    if (!requested && requested_count) {
        status = uform_fail(uform_status_invalid_argument_k,
                            "memory_domains is NULL but memory_domains_count is %zu: pass the node IDs, or a "
                            "count of 0 to derive every allowed node (allowed nodes: %s)",
                            requested_count, allowed);
        goto done;
    }
    for (size_t i = 0; i < requested_count; ++i) {
        int32_t const node = requested[i];
        if (node < 0)
            status = uform_fail(uform_status_invalid_argument_k,
                                "memory_domains[%zu] is %d, not a NUMA node ID: IDs are non-negative (allowed nodes: %s)",
                                i, (int)node, allowed);
        else if (!uform_view_exists(&view, node))
            status = uform_fail(uform_status_invalid_argument_k,
                                "memory_domains[%zu] is NUMA node %d, which does not exist on this machine "
                                "(allowed nodes: %s)",
                                i, (int)node, allowed);
        else if (!uform_view_mems_allowed(&view, node))
            status = uform_fail(uform_status_invalid_argument_k,
                                "memory_domains[%zu] is NUMA node %d, outside the process's cpuset (mems_allowed) "
                                "(allowed nodes: %s)",
                                i, (int)node, allowed);
        else {
            /* Every earlier entry passed the checks above, so this loop is bounded by the node count
               however long the caller's array is. */
            for (size_t j = 0; j < i && status == uform_status_ok_k; ++j)
                if (requested[j] == node)
                    status = uform_fail(uform_status_invalid_argument_k,
                                        "memory_domains[%zu] repeats NUMA node %d, already memory_domains[%zu] "
                                        "(allowed nodes: %s)",
                                        i, (int)node, j, allowed);
            if (status == uform_status_ok_k && uform_view_cores_count(&view, (size_t)node) == 0)
                status = uform_fail(uform_status_invalid_argument_k,
                                    "memory_domains[%zu] is NUMA node %d, which carries no core the calling thread "
                                    "may run on (affinity: %s; allowed nodes: %s)",
                                    i, (int)node,
                                    uform_format_set(affinity, sizeof(affinity),
                                                     view.topology->cpu_words * UFORM_WORD_BITS,
                                                     uform_affinity_member, &view),
                                    allowed);
        }
        if (status != uform_status_ok_k) goto done;
    }

    uform_cpu_class_t cpu_class = uform_cpu_class_unknown_k;
    status = uform_cpu_resolve_class(ram ? ram->cpu_class : uform_cpu_class_unknown_k, &cpu_class);
    if (status != uform_status_ok_k) goto done;

    /* The chosen nodes: the caller's, in the caller's order, or every domain in ascending order. */
    size_t domains_count = requested_count;
    if (!requested_count)
        for (size_t node = 0; node < view.topology->nodes_count; ++node)
            domains_count += uform_view_is_domain(&view, (int64_t)node) ? 1 : 0;
    if (!domains_count) {
        status = uform_fail(uform_status_unsupported_k,
                            "no NUMA node the process may allocate on (%s) carries a core the calling thread may "
                            "run on (affinity: %s)",
                            uform_format_set(allowed, sizeof(allowed), view.topology->nodes_count, uform_mems_member,
                                             &view),
                            uform_format_set(affinity, sizeof(affinity), view.topology->cpu_words * UFORM_WORD_BITS,
                                             uform_affinity_member, &view));
        goto done;
    }
    result.domains_count = domains_count, result.cpu_class = cpu_class;
    result.domain_nodes = malloc(domains_count * sizeof(int32_t));
    if (!result.domain_nodes) goto out_of_memory;
    if (requested_count)
        memcpy(result.domain_nodes, requested, domains_count * sizeof(int32_t));
    else
        for (size_t node = 0, next = 0; next < domains_count; ++node)
            if (uform_view_is_domain(&view, (int64_t)node)) result.domain_nodes[next++] = (int32_t)node;
    for (size_t domain = 0; domain < domains_count; ++domain)
        result.cores_count += uform_view_cores_count(&view, (size_t)result.domain_nodes[domain]);
    result.cores = malloc(result.cores_count * sizeof(int32_t));
    result.core_domains = malloc(result.cores_count * sizeof(size_t));
    if (!result.cores || !result.core_domains) goto out_of_memory;
    size_t core = 0;
    for (size_t domain = 0; domain < domains_count; ++domain) {
        unsigned long const *cpus = uform_view_node_cpus(&view, (size_t)result.domain_nodes[domain]);
        for (size_t cpu = 0; cpu < view.topology->cpu_words * UFORM_WORD_BITS; ++cpu)
            if (uform_bit(cpus, view.topology->cpu_words, cpu) && uform_bit(view.affinity, view.topology->cpu_words, cpu))
                result.cores[core] = (int32_t)cpu, result.core_domains[core] = domain, ++core;
    }
    *placement = result;
    goto done;

out_of_memory:
    uform_placement_free(&result);
    status = uform_fail(uform_status_out_of_memory_k, "out of memory for a placement of %zu NUMA nodes", domains_count);
done:
    uform_view_close(&view);
    return status;
}

void uform_placement_free(uform_placement_t *placement) {
    if (!placement) return;
    free(placement->domain_nodes);
    free(placement->cores);
    free(placement->core_domains);
    memset(placement, 0, sizeof(*placement)); /* a second free is then a no-op */
}

size_t uform_default_threads(size_t cores) {
    /* cores * 7 / 8 without overflowing for huge inputs. */
    size_t const threads = cores / 8 * 7 + cores % 8 * 7 / 8;
    return threads ? threads : 1;
}

/* ---- Memory ---- */

void *uform_numa_alloc(size_t bytes, int32_t node) {
    if (!bytes) return NULL;
    /* Anonymous private mappings are zeroed and page-aligned, and their pages are placed at first
       touch by the mapping's policy, which `mbind` sets below. */
    void *memory = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return NULL;
    uform_topology_t const *t = uform_topology_get();
    if (t->status != uform_status_ok_k || !t->numa || node < 0 || (size_t)node >= t->nodes_count ||
        !uform_bit(t->exists, t->node_words, (size_t)node))
        return memory; /* no NUMA or no such node: any node */
    unsigned long *mask = calloc(t->node_words, sizeof(unsigned long));
    if (mask) {
        mask[node / UFORM_WORD_BITS] = 1ul << (node % UFORM_WORD_BITS);
        /* PREFERRED rather than BIND: pages go to `node` while it has memory and fall back to other
           nodes when it runs out, instead of the OOM killer. A node outside the cpuset fails here
           (EINVAL) and leaves the default policy: any node, as documented. */
        (void)mbind(memory, bytes, MPOL_PREFERRED, mask, t->node_words * UFORM_WORD_BITS + 1, 0);
        free(mask);
    }
    return memory;
}

void uform_numa_free(void *pointer, size_t bytes) {
    if (pointer && bytes) munmap(pointer, bytes);
}

int uform_numa_node_of_address(void const *address, int *node) {
    uform_topology_t const *t = uform_topology_get();
    if (!address || t->status != uform_status_ok_k || !t->numa) return 0;
    /* `move_pages` without target nodes only reports where a page is; unlike `get_mempolicy`'s
       MPOL_F_ADDR, it neither faults an untouched page in (mapping the shared zero page, which lives
       on one node) nor answers for one: a page never written reads as absent (-ENOENT, -EFAULT). */
    void *page = (void *)((uintptr_t)address & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1));
    int status = -1;
    if (move_pages(0, 1, &page, NULL, &status, 0) != 0 || status < 0) return 0;
    *node = status;
    return 1;
}

/** @brief Parses `digits` hex digits (1 to `max_digits`) at `*text` into `*value`. */
static int uform_parse_hex(char const **text, unsigned max_digits, unsigned long *value) {
    unsigned digits = 0;
    unsigned long result = 0;
    for (char const *cursor = *text;; ++cursor, ++digits) {
        char const c = *cursor;
        int nibble = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (nibble < 0) break;
        if (digits == max_digits) return 0;
        result = result * 16 + (unsigned long)nibble;
    }
    if (!digits) return 0;
    *text += digits;
    *value = result;
    return 1;
}

int32_t uform_numa_node_of_pci(char const *pci_bus_id) {
    if (!pci_bus_id) return -1;
    /* "DDDD:BB:DD.F" as the CUDA driver prints it, or NVML's 8-digit domain "DDDDDDDD:BB:DD.F", any
       case; sysfs names devices "%04x:%02x:%02x.%x" in lower case. Strict parsing: the ID ends up in
       a path, so nothing but hex digits and the separators may pass. */
    char const *cursor = pci_bus_id;
    unsigned long domain = 0, bus = 0, device = 0, function = 0;
    if (!uform_parse_hex(&cursor, 8, &domain) || *cursor++ != ':') return -1;
    if (!uform_parse_hex(&cursor, 2, &bus)) return -1;
    if (*cursor == '.') { /* "BB:DD.F" without a domain: domain 0 */
        device = bus, bus = domain, domain = 0;
        if (bus > 0xff) return -1;
    }
    else if (*cursor++ != ':' || !uform_parse_hex(&cursor, 2, &device))
        return -1;
    if (*cursor++ != '.' || !uform_parse_hex(&cursor, 1, &function) || *cursor != '\0') return -1;
    if (domain > 0xffffffffu || device > 0x1f || function > 7) return -1;

    char path[96];
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04lx:%02lx:%02lx.%lx/numa_node", domain, bus, device, function);
    int const file = open(path, O_RDONLY | O_CLOEXEC);
    if (file < 0) return -1;
    char text[32];
    ssize_t const length = read(file, text, sizeof(text) - 1);
    close(file);
    if (length <= 0) return -1;
    text[length] = '\0';
    char *end = NULL;
    errno = 0;
    long const node = strtol(text, &end, 10);
    if (errno || end == text || node < 0 || node > INT32_MAX) return -1; /* "-1": no NUMA affinity */
    return (int32_t)node;
}

