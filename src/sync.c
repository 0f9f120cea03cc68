/**
 *  @file   sync.c
 *  @brief  Fork tracking, futexes and the monotonic clock.
 */
#include "internal.h"

#include <linux/futex.h> // `FUTEX_WAIT_PRIVATE`
#include <pthread.h>     // `pthread_atfork`
#include <sys/syscall.h> // `SYS_futex`
#include <unistd.h>      // `syscall`

static atomic_uint_fast64_t uform_forks = 0;
static pthread_once_t uform_fork_once = PTHREAD_ONCE_INIT;

static void uform_on_fork_child(void) { atomic_fetch_add_explicit(&uform_forks, 1, memory_order_relaxed); }
static void uform_register_fork_handler(void) { pthread_atfork(NULL, NULL, uform_on_fork_child); }

uint64_t uform_fork_generation(void) {
    pthread_once(&uform_fork_once, uform_register_fork_handler);
    return atomic_load_explicit(&uform_forks, memory_order_relaxed);
}

void uform_futex_wait(uint32_t *address, uint32_t expected, struct timespec const *timeout) {
    // A relative timeout; EINTR, EAGAIN and ETIMEDOUT all return to the caller's loop.
    syscall(SYS_futex, address, FUTEX_WAIT_PRIVATE, expected, timeout, NULL, 0);
}

void uform_futex_wake(uint32_t *address, int count) {
    syscall(SYS_futex, address, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

void uform_sleep_seconds(double seconds) {
    if (!(seconds > 0)) return;
    struct timespec pause = {.tv_sec = (time_t)seconds, .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&pause, &pause) != 0) {}
}

double uform_now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}
