/**
 *  @file   test_ring.c
 *  @brief  The deferred ring (`uform_ring_t`, src/completion.c) across its 32-bit counters' wrap.
 *          Every executor queues its deferred calls there: the submitter writes the slot at `tail`,
 *          the consumer reads the one at `head`, both counters only grow and wrap after 2^32 calls
 *          (half a day of a server's deferred calls at 100,000 a second). For every capacity, full
 *          or not a power of two (`deferred_limit` 3 used to map 2^32 - 1 and 0 to one slot, so the
 *          call queued after the wrap overwrote the one before it: one call lost, another run
 *          twice), the counters start just below the wrap and a first-in first-out queue of unique
 *          values is driven across it at every fill level: each value comes out once, in order.
 */
#include "check.h"
#include "internal.h"

#include <stdint.h>
#include <string.h>

/** Pushes and pops `rounds` values through `ring`, its counters starting `before` below the wrap,
 *  keeping between 1 and the capacity queued (the level cycles), and checks each value read back. */
static void cross_wrap(uint32_t capacity, uint32_t before, size_t rounds) {
    uform_ring_t ring;
    CHECK_OK(uform_ring_init(&ring, capacity, sizeof(uint64_t), "test_ring"));
    CHECK(ring.capacity == capacity);
    CHECK((ring.mask & (ring.mask + 1)) == 0 && ring.mask + 1 >= capacity); // slots: a power of two
    uint32_t const start = (uint32_t)(0u - before);
    atomic_store(&ring.tail, start);
    atomic_store(&ring.head, start);
    uint64_t pushed = 0, popped = 0;
    uint32_t level = 1;
    for (size_t round = 0; round < rounds; ++round) {
        /* Fill to `level`, then drain to one queued (or none), as a leader consumes behind a submitter. */
        while (uform_ring_count(&ring) < level) {
            CHECK(uform_ring_count(&ring) < ring.capacity);
            unsigned const tail = atomic_load(&ring.tail);
            uint64_t const value = 1000003u * ++pushed;
            memcpy(uform_ring_at(&ring, tail), &value, sizeof value);
            atomic_store(&ring.tail, tail + 1);
        }
        CHECK(uform_ring_count(&ring) == level);
        while (uform_ring_count(&ring) > (round & 1u)) {
            unsigned const head = atomic_load(&ring.head);
            uint64_t value;
            memcpy(&value, uform_ring_at(&ring, head), sizeof value);
            CHECK(value == 1000003u * ++popped); // in order, none overwritten
            atomic_store(&ring.head, head + 1);
        }
        level = level % capacity + 1;
    }
    CHECK(popped + uform_ring_count(&ring) == pushed);
    CHECK(atomic_load(&ring.tail) - start == pushed);
    CHECK(pushed > before); // the counters did wrap
    uform_ring_free(&ring);
}

static void test_capacities_across_the_wrap(void) {
    uint32_t const capacities[] = {1, 2, 3, 5, 7, 12, 1000, 1023, 1024, 1025};
    for (size_t i = 0; i < sizeof capacities / sizeof capacities[0]; ++i) {
        uint32_t const c = capacities[i];
        for (uint32_t before = 1; before <= 2 * c + 3; before += c > 16 ? c / 7 + 1 : 1)
            cross_wrap(c, before, 4 * (size_t)c + 64);
    }
}

static void test_default_and_maximum(void) {
    uform_ring_t ring;
    CHECK_OK(uform_ring_init(&ring, 0, 8, "test_ring"));
    CHECK(ring.capacity == UFORM_DEFERRED_LIMIT_DEFAULT && ring.mask + 1 == UFORM_DEFERRED_LIMIT_DEFAULT);
    uform_ring_free(&ring);
    CHECK_OK(uform_ring_init(&ring, UFORM_DEFERRED_LIMIT_MAX, 8, "test_ring"));
    CHECK(ring.mask + 1 == UFORM_DEFERRED_LIMIT_MAX);
    uform_ring_free(&ring);
    CHECK_OK(uform_ring_init(&ring, UFORM_DEFERRED_LIMIT_MAX / 2 + 1, 8, "test_ring"));
    CHECK(ring.mask + 1 == UFORM_DEFERRED_LIMIT_MAX);
    uform_ring_free(&ring);
    CHECK(uform_ring_init(&ring, UFORM_DEFERRED_LIMIT_MAX + 1, 8, "test_ring") == uform_status_invalid_argument_k);
    CHECK_MESSAGE("test_ring: deferred_limit 1048577 is above the maximum of 1048576");
}

int main(void) {
    test_capacities_across_the_wrap();
    test_default_and_maximum();
    CHECK_DONE();
}
