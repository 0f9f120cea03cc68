/**
 *  @file   sync.c
 *  @brief  Fork tracking, the global locks and their fork handlers, futexes and the monotonic clock.
 */
#include "internal.h"

#include <linux/futex.h> // `FUTEX_WAIT_PRIVATE`
#include <pthread.h>     // `pthread_atfork`
#include <sys/syscall.h> // `SYS_futex`
#include <unistd.h>      // `syscall`

static atomic_uint_fast64_t uform_forks = 0;
static pthread_once_t uform_fork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t uform_global_locks[uform_global_locks_count_k];

/* `fork()` takes every global lock first (in one order: they never nest, so no thread holds one
 * while waiting for another), so no other thread is inside one at the fork; both processes then
 * release them. The child reinitialises its copies rather than unlocking, as POSIX asks. */
static void uform_on_fork_prepare(void) {
    for (size_t lock = 0; lock < uform_global_locks_count_k; ++lock) pthread_mutex_lock(&uform_global_locks[lock]);
}
static void uform_on_fork_parent(void) {
    for (size_t lock = uform_global_locks_count_k; lock-- > 0;) pthread_mutex_unlock(&uform_global_locks[lock]);
}
static void uform_on_fork_child(void) {
    for (size_t lock = 0; lock < uform_global_locks_count_k; ++lock) pthread_mutex_init(&uform_global_locks[lock], NULL);
    atomic_fetch_add_explicit(&uform_forks, 1, memory_order_relaxed);
    uform_pool_gates_after_fork();
}
static void uform_register_fork_handler(void) {
    for (size_t lock = 0; lock < uform_global_locks_count_k; ++lock) pthread_mutex_init(&uform_global_locks[lock], NULL);
    pthread_atfork(uform_on_fork_prepare, uform_on_fork_parent, uform_on_fork_child);
}

uint64_t uform_fork_generation(void) {
    pthread_once(&uform_fork_once, uform_register_fork_handler);
    return atomic_load_explicit(&uform_forks, memory_order_relaxed);
}

void uform_global_lock(uform_global_lock_t lock) {
    pthread_once(&uform_fork_once, uform_register_fork_handler);
    pthread_mutex_lock(&uform_global_locks[lock]);
}

void uform_global_unlock(uform_global_lock_t lock) { pthread_mutex_unlock(&uform_global_locks[lock]); }

void uform_futex_wait(uint32_t *address, uint32_t expected, struct timespec const *timeout) {
    // A relative timeout; EINTR, EAGAIN and ETIMEDOUT all return to the caller's loop.
    syscall(SYS_futex, address, FUTEX_WAIT_PRIVATE, expected, timeout, NULL, 0);
}

void uform_futex_wake(uint32_t *address, int count) {
    syscall(SYS_futex, address, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

void uform_sleep_seconds(double seconds) {
    if (!(seconds > 0)) return;
    // Slices of at most a day, so the conversion to `time_t` never overflows; infinity sleeps forever.
    for (double left = seconds; left > 0; left -= 86400.0) {
        double const slice = left < 86400.0 ? left : 86400.0;
        struct timespec pause = {.tv_sec = (time_t)slice, .tv_nsec = (long)((slice - (double)(time_t)slice) * 1e9)};
        while (nanosleep(&pause, &pause) != 0) {}
    }
}

double uform_now_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec * 1e-9;
}
