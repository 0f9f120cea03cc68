/**
 *  @file   bench_ram_floor.c
 *  @brief  bench_ram's ping-pong child: the floor, one round trip of a cache line between the first
 *          two allowed cores. See bench_ram.c for the whole benchmark.
 */
#define _GNU_SOURCE // `sched_getaffinity`, `pthread_setaffinity_np`, `CPU_SET`
#include "bench_ram.h"

#include <pthread.h>   // `pthread_create`
#include <sched.h>     // `sched_getaffinity`
#include <stdatomic.h> // `atomic_uint_fast64_t`
#include <stdint.h>    // `uint_fast64_t`

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
int child_pingpong(config_t const *config, double *round_ns) {
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
