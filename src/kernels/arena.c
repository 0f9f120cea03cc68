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
 *  the oldest arenas are unmapped, so what an idle process retains is bounded.
 */
#include "kernels/kernels.h"

#include "internal.h" // `uform_numa_alloc`, `uform_global_lock` (taken around fork like every global lock)


#define UFORM_ARENA_POOL_ENTRIES 256
#define UFORM_ARENA_POOL_BYTES ((size_t)1 << 30)

typedef struct arena_entry_t {
    void *data;
    size_t bytes;
    int32_t node;
} arena_entry_t;

static arena_entry_t arena_entries[UFORM_ARENA_POOL_ENTRIES]; /* oldest first */
static size_t arena_count, arena_bytes;

static size_t page_round(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }

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
    uform_global_unlock(uform_global_lock_arenas_k);
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
    if (bytes <= UFORM_ARENA_POOL_BYTES) {
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
