/**
 *  @file   test_phase_barrier.c
 *  @brief  The forward passes' phase barrier (`uform_phase_barrier_wait`, src/kernels/phases.c):
 *          threads racing through thousands of phases, none leaving a phase before every thread
 *          finished it and none missing a wake-up; a thread that arrives long after the rest (so the
 *          others outlast their spin and sleep on the futex); and the spin's length as
 *          UFORM_PHASE_SPIN_US gives it. ctest runs it three times: as the environment leaves it,
 *          with UFORM_PHASE_SPIN_US=0 (every waiter sleeps at once: the futex path at every phase)
 *          and with an unreadable value (the default serves).
 */
#include "check.h"
#include "internal.h" // `uform_now_seconds`
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RACERS 8
#define PHASES 1500

typedef struct race_t {
    uform_phase_barrier_t barrier;
    atomic_size_t done[PHASES]; /* threads that finished each phase */
    atomic_size_t early;        /* threads that left a phase before every thread finished it */
    size_t threads;
    size_t late_every; /* thread 0 sleeps before every late_every-th phase (0: never) */
} race_t;

typedef struct racer_t {
    race_t *race;
    size_t index;
} racer_t;

static void *racer(void *opaque) {
    racer_t *self = (racer_t *)opaque;
    race_t *race = self->race;
    for (size_t phase = 0; phase < PHASES; ++phase) {
        if (self->index == 0 && race->late_every && phase % race->late_every == 0) {
            struct timespec nap = {0, 2 * 1000 * 1000}; /* 2 ms: past any spin the others keep */
            nanosleep(&nap, NULL);
        }
        atomic_fetch_add(&race->done[phase], 1);
        uform_phase_barrier_wait(&race->barrier, race->threads);
        if (atomic_load(&race->done[phase]) != race->threads) atomic_fetch_add(&race->early, 1);
    }
    return NULL;
}

static void run_race(size_t threads, size_t late_every) {
    race_t *race = (race_t *)calloc(1, sizeof *race);
    CHECK_FATAL(race);
    race->threads = threads, race->late_every = late_every;
    pthread_t handles[RACERS];
    racer_t racers[RACERS];
    for (size_t i = 0; i < threads; ++i) {
        racers[i] = (racer_t){race, i};
        CHECK_FATAL(pthread_create(&handles[i], NULL, racer, &racers[i]) == 0);
    }
    for (size_t i = 0; i < threads; ++i) pthread_join(handles[i], NULL);
    CHECK(atomic_load(&race->early) == 0);
    for (size_t phase = 0; phase < PHASES; ++phase) CHECK(atomic_load(&race->done[phase]) == threads);
    /* Reusable: all counters back at rest after the last phase. */
    CHECK(atomic_load(&race->barrier.arrived) == 0);
    CHECK(atomic_load(&race->barrier.sleepers) == 0);
    CHECK(atomic_load(&race->barrier.generation) == PHASES);
    free(race);
}

static void test_spin_setting(void) {
    char const *value = getenv("UFORM_PHASE_SPIN_US");
    double expected = 100e-6; /* the default */
    if (value && strcmp(value, "0") == 0) expected = 0;
    else if (value && *value && strcmp(value, "not-a-number") != 0) {
        fprintf(stderr, "test_phase_barrier: UFORM_PHASE_SPIN_US=%s is not one of this test's cases\n", value);
        return;
    }
    double spin = uform_phase_spin_seconds();
    CHECK(spin > expected - 1e-9 && spin < expected + 1e-9);
    CHECK(uform_phase_spin_seconds() == spin); /* read once */
}

int main(void) {
    test_spin_setting();
    /* One thread never waits; the count stays at rest. */
    uform_phase_barrier_t alone = {0};
    for (int i = 0; i < 10; ++i) uform_phase_barrier_wait(&alone, 1);
    CHECK(atomic_load(&alone.generation) == 0 && atomic_load(&alone.arrived) == 0);
    for (int round = 0; round < 3; ++round) {
        run_race(2, 0);
        run_race(RACERS, 0);
    }
    /* A late thread every 100 phases: the others spin out and sleep, and wake when it comes. */
    run_race(4, 100);
    return check_failures ? 1 : 0;
}
