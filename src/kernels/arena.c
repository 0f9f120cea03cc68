/**
 *  @file   arena.c
 *  @brief  A process-wide pool of activation arenas, so that the forward passes' per-call buffers
 *          (activations, per-thread scratch) are not mapped, faulted in and unmapped on every call.
 *
 *  Without it, every encoding call mapped its activations and one scratch block per thread and
 *  unmapped them after: a page fault per 4 KiB touched, and per unmapping a TLB shoot-down sent to
 *  every core the process runs on (all of them, on a SPINNING executor). Arenas are taken on the
 *  submitting thread before a call (so a failure is still reported before anything runs) and given
 *  back by the call's last thread; a given-back arena keeps its pages (and the NUMA node they were
 *  placed on) for the next call. The pool holds at most `UFORM_ARENA_POOL_BYTES` bytes: past that,
 *  the oldest arenas are unmapped, so what an idle process retains is bounded; and at most
 *  `UFORM_ARENA_POOL_ALIKE` arenas that would serve the same calls (a burst of 60 deferred calls
 *  took 60 arenas, all of which stayed pooled: 400 MB for MiniLM's batches of 8).
 *
 *  Calls that grow (a server meeting ever longer texts, ever larger batches) would otherwise leave
 *  one arena per size they passed through, up to that bound: a new arena is mapped a size class up
 *  (sizes step by a quarter of a power of two, so a growing walk maps a few arenas per doubling, and
 *  only the pages a call touches are ever faulted in), and the pooled arenas of its node it
 *  supersedes (those it would serve: at least a quarter of its size, and smaller) are unmapped.
 *  `uform_arena_trim` unmaps every pooled arena: freeing the last open model calls it.
 */
#include "kernels/kernels.h"

#include <string.h> // `memcpy`

#include "internal.h" // `uform_numa_alloc`, `uform_global_lock` (taken around fork like every global lock)


#define UFORM_ARENA_POOL_ENTRIES 256
#define UFORM_ARENA_POOL_BYTES ((size_t)1 << 30)
/** Arenas of one node within a factor of four of each other kept at once: as many calls of a size as
 *  run at once in practice (a few executors, two batches in flight); more are unmapped when given back. */
#define UFORM_ARENA_POOL_ALIKE 4

typedef struct arena_entry_t {
    void *data;
    size_t bytes;
    int32_t node;
} arena_entry_t;

static arena_entry_t arena_entries[UFORM_ARENA_POOL_ENTRIES]; /* oldest first */
static size_t arena_count, arena_bytes;

static size_t page_round(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

/** The size a new arena of at least `bytes` (page-rounded) is mapped at: up to 4 pages exactly, else
 *  the next of 4/4, 5/4, 6/4 and 7/4 of a power of two pages: less than a quarter more than asked. */
static size_t size_class(size_t bytes) {
    size_t const pages = bytes / 4096;
    if (pages <= 4) return bytes;
    size_t power = (size_t)1 << (63 - __builtin_clzll((unsigned long long)pages)), quarter = power / 4;
    size_t const classed = power + (pages - power + quarter - 1) / quarter * quarter;
    return classed <= SIZE_MAX / 4096 ? classed * 4096 : bytes;
}

void *uform_arena_take(size_t bytes, int32_t node, size_t *granted) {
    *granted = 0;
    if (!bytes) return NULL;
    bytes = page_round(bytes);
    uform_global_lock(uform_global_lock_arenas_k);
    /* The smallest pooled arena of this node that fits, unless it is more than four times too big. */
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < arena_count; ++i)
        if (arena_entries[i].node == node && arena_entries[i].bytes >= bytes && arena_entries[i].bytes / 4 <= bytes &&
            (best == SIZE_MAX || arena_entries[i].bytes < arena_entries[best].bytes))
            best = i;
    if (best != SIZE_MAX) {
        arena_entry_t taken = arena_entries[best];
        for (size_t i = best + 1; i < arena_count; ++i) arena_entries[i - 1] = arena_entries[i];
        --arena_count, arena_bytes -= taken.bytes;
        uform_global_unlock(uform_global_lock_arenas_k);
        *granted = taken.bytes;
        return taken.data;
    }
    /* A miss: map a size class up, and unmap the pooled arenas of this node the new one supersedes. */
    bytes = size_class(bytes);
    arena_entry_t superseded[UFORM_ARENA_POOL_ENTRIES];
    size_t superseded_count = 0, kept = 0;
    for (size_t i = 0; i < arena_count; ++i) {
        arena_entry_t const entry = arena_entries[i];
        if (entry.node == node && entry.bytes < bytes && entry.bytes >= bytes / 4)
            superseded[superseded_count++] = entry, arena_bytes -= entry.bytes;
        else arena_entries[kept++] = entry;
    }
    arena_count = kept;
    uform_global_unlock(uform_global_lock_arenas_k);
    for (size_t i = 0; i < superseded_count; ++i) uform_numa_free(superseded[i].data, superseded[i].bytes);
    void *data = uform_numa_alloc(bytes, node);
    if (data) *granted = bytes;
    return data;
}

void uform_arena_give(void *data, size_t bytes, int32_t node) {
    if (!data || !bytes) return;
    arena_entry_t evicted[UFORM_ARENA_POOL_ENTRIES];
    size_t evicted_count = 0;
    int pooled = 0;
    uform_global_lock(uform_global_lock_arenas_k);
    /* Arenas that would serve each other's calls (within a factor of four, one node): a burst of
     * deferred calls takes one each, and all would otherwise stay pooled, up to the byte bound. */
    size_t alike = 0;
    for (size_t i = 0; i < arena_count; ++i)
        alike += arena_entries[i].node == node && arena_entries[i].bytes / 4 <= bytes && bytes / 4 <= arena_entries[i].bytes;
    if (bytes <= UFORM_ARENA_POOL_BYTES && alike < UFORM_ARENA_POOL_ALIKE) {
        while (arena_count && (arena_count == UFORM_ARENA_POOL_ENTRIES || arena_bytes + bytes > UFORM_ARENA_POOL_BYTES)) {
            evicted[evicted_count++] = arena_entries[0];
            arena_bytes -= arena_entries[0].bytes;
            for (size_t i = 1; i < arena_count; ++i) arena_entries[i - 1] = arena_entries[i];
            --arena_count;
        }
        arena_entries[arena_count++] = (arena_entry_t){.data = data, .bytes = bytes, .node = node};
        arena_bytes += bytes;
        pooled = 1;
    }
    uform_global_unlock(uform_global_lock_arenas_k);
    for (size_t i = 0; i < evicted_count; ++i) uform_numa_free(evicted[i].data, evicted[i].bytes);
    if (!pooled) uform_numa_free(data, bytes);
}

size_t uform_arena_pooled_bytes(void) {
    uform_global_lock(uform_global_lock_arenas_k);
    size_t bytes = arena_bytes;
    uform_global_unlock(uform_global_lock_arenas_k);
    return bytes;
}

void uform_arena_trim(void) {
    arena_entry_t pooled[UFORM_ARENA_POOL_ENTRIES];
    uform_global_lock(uform_global_lock_arenas_k);
    size_t const count = arena_count;
    memcpy(pooled, arena_entries, count * sizeof(arena_entry_t));
    arena_count = 0, arena_bytes = 0;
    uform_global_unlock(uform_global_lock_arenas_k);
    for (size_t i = 0; i < count; ++i) uform_numa_free(pooled[i].data, pooled[i].bytes);
}
