/**
 *  @file   internal.h
 *  @brief  What the engine's source files share and users never see: errors, fork tracking,
 *          futexes, the executor's common header and backend table, placements, and the seams
 *          between the VRAM executor and meshes.
 */
#ifndef UFORM_INTERNAL_H
#define UFORM_INTERNAL_H

#include <uform.h>
#include "uform_testing.h" // `uform_kernel_t`: the library defines the test kernels

#include <stdarg.h>    // `va_list`
#include <stdatomic.h> // `atomic_uint`
#include <stdbool.h>   // `bool`
#include <pthread.h>   // `pthread_t`
#include <sched.h>     // `sched_yield`
#include <time.h>      // `struct timespec`

#define UFORM_CACHE_LINE 64
#define UFORM_ALIGNED _Alignas(128) // two lines: adjacent-line prefetchers pair them on x86

#if defined(__GNUC__)
#define UFORM_LIKELY(x) __builtin_expect(!!(x), 1)
#define UFORM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define UFORM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define UFORM_LIKELY(x) (x)
#define UFORM_UNLIKELY(x) (x)
#define UFORM_PRINTF(a, b)
#endif

/* ---- Errors (errors.c) ---- */

/** @brief Records a formatted message as this thread's `uform_error_message` and returns `status`. */
uform_status_t uform_fail(uform_status_t status, char const *format, ...) UFORM_PRINTF(2, 3);
uform_status_t uform_fail_v(uform_status_t status, char const *format, va_list arguments);

/** @brief Empties this thread's message, so a callback that fails without setting one is told apart. */
void uform_clear_error(void);

/**
 *  @brief A failure set aside while other calls run (and may rewrite the thread's message), then
 *  reported again: `uform_failure_save` after the failing call, `uform_failure_raise` to return it.
 */
typedef struct uform_failure_t {
    uform_status_t status; /**< OK when nothing was saved. */
    char message[512];
} uform_failure_t;
void uform_failure_save(uform_failure_t *failure, uform_status_t status);
uform_status_t uform_failure_raise(uform_failure_t const *failure);


/* ---- A model's files (files.c) ---- */

struct stat;

/**
 *  @brief Opens `path` for reading when it is a regular file, without blocking on a FIFO or a
 *  device: its descriptor (close-on-exec) and its `fstat` in `info`; else -1 with SYSTEM_ERROR
 *  recorded, naming the path and what it is (a directory, a FIFO, ...). With `missing` not NULL, a
 *  path that does not exist gives -1 with `*missing` set and nothing recorded.
 */
int uform_open_regular_file(char const *path, struct stat *info, int *missing);

/**
 *  @brief Reads a whole regular file of at most `max_bytes` (`too_large` past that, naming the path
 *  and both sizes) into `*text`, NUL-terminated (free it), its size in `*length`. Refuses what
 *  `uform_open_regular_file` refuses; with `missing` not NULL an absent file is OK with `*missing`
 *  set and `*text` NULL.
 */
uform_status_t uform_read_regular_file(char const *path, size_t max_bytes, uform_status_t too_large, char **text,
                                       size_t *length, int *missing);

/* ---- Fork tracking and waiting (sync.c) ---- */

/** @brief Incremented in every child process after `fork()`; executors, meshes and outcomes record
 *  the value at creation and refuse work when it changed. */
uint64_t uform_fork_generation(void);

/**
 *  @brief The engine's process-wide locks. `fork()` takes every one of them before it forks and
 *  releases them in both processes after (through `pthread_atfork`), so a child never inherits a
 *  lock held by a thread that does not exist there. They never nest: hold one at a time.
 */
typedef enum uform_global_lock_t {
    uform_global_lock_pools_k,  /**< The table of pool gates (host.c). */
    uform_global_lock_arenas_k, /**< The pool of activation arenas (kernels/arena.c). */
    uform_global_lock_matmul_k, /**< The cache of matmul primitives (kernels/gemm.c). */
    uform_global_locks_count_k,
} uform_global_lock_t;
void uform_global_lock(uform_global_lock_t lock);
void uform_global_unlock(uform_global_lock_t lock);

/** @brief Called by the fork handler in the child, with every global lock released: frees the pool
 *  gates that threads of the parent held (host.c). */
void uform_pool_gates_after_fork(void);

/** @brief Blocks while `*address == expected`, up to `timeout` (NULL: forever). Spurious returns
 *  are possible; callers loop. Used directly only by locks; waits go through bells (below). */
void uform_futex_wait(uint32_t *address, uint32_t expected, struct timespec const *timeout);
void uform_futex_wake(uint32_t *address, int count);

/** @brief Seconds on the monotonic clock. */
double uform_now_seconds(void);

/** @brief Sleeps `seconds` (resuming after signals), for polling loops and tests. */
void uform_sleep_seconds(double seconds);

/** @brief A `pause`-class hint for spin loops. */
static inline void uform_spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}


/* ---- Completion and waiting (completion.c): the one layer every executor kind uses ---- */

/** The largest `deferred_limit` accepted by any executor: ring slots are preallocated. */
#define UFORM_DEFERRED_LIMIT_MAX ((size_t)1 << 20)

/**
 *  @brief The deferred ring: up to `capacity` calls in slots of `slot_bytes`, filled by the one gate
 *  holder at `tail` and consumed in order at `head` (by a leader thread, or by pollers under a lock).
 *  Both 32-bit counters only grow (wrapping), so `tail - head` is the number of calls tracked. The
 *  slots are a power of two in number (`mask` + 1, at least `capacity`), so a counter maps to the
 *  same slot on both sides of its wrap: with `index % capacity` a capacity that does not divide 2^32
 *  would map 2^32 - 1 and 0 to one slot and overwrite a queued call.
 */
typedef struct uform_ring_t {
    UFORM_ALIGNED atomic_uint tail; /**< Slots published by the submitter. */
    UFORM_ALIGNED atomic_uint head; /**< Slots consumed. */
    unsigned char *slots;
    size_t slot_bytes;
    uint32_t capacity; /**< The most calls tracked at once: the executor's `deferred_limit`. */
    uint32_t mask;     /**< Slots minus one: a power of two at least `capacity`, minus one. */
} uform_ring_t;

/** @brief Checks `deferred_limit` (0: the default; above the maximum: INVALID_ARGUMENT naming
 *  `verb`) and preallocates the slots (OUT_OF_MEMORY). */
uform_status_t uform_ring_init(uform_ring_t *ring, size_t deferred_limit, size_t slot_bytes, char const *verb);
/** @brief The limit check alone, for constructors that validate before they allocate. */
uform_status_t uform_ring_check_limit(size_t deferred_limit, char const *verb);

/** @brief The device list of VRAM options, judged without a driver: a NULL list with a count, a
 *  negative or a repeated ordinal are INVALID_ARGUMENT, named as `verb: FIELDdevices...` (FIELD
 *  "vram->" or "vram."); NULL options are OK. Executors and models share it (vram_checks.c). */
uform_status_t uform_vram_devices_check(uform_vram_options_t const *vram, char const *verb, char const *field);
void uform_ring_free(uform_ring_t *ring);
/** @brief DEFERRED_FULL with the one message every executor gives when its ring is full. */
uform_status_t uform_ring_full(uform_ring_t const *ring);
static inline unsigned uform_ring_count(uform_ring_t const *ring) {
    return atomic_load_explicit(&ring->tail, memory_order_acquire) -
           atomic_load_explicit(&ring->head, memory_order_acquire);
}
static inline void *uform_ring_at(uform_ring_t const *ring, unsigned index) {
    return ring->slots + (size_t)(index & ring->mask) * ring->slot_bytes;
}

/** @brief Marks an outcome as pending and owned by `executor`, before it is queued. Its `reserved`
 *  words: [0] the executor, [1] the backend's (VRAM: the call's sequence), [2] a failure the call's
 *  own tasks recorded (`uform_outcome_record_failure`; zero for none), [3] the fork generation at
 *  submission. */
void uform_outcome_begin(uform_outcome_t *outcome, uform_executor_t executor);

/** @brief The one outcome finisher: copies `message` (may be NULL for ""), stores the status,
 *  publishes `finished` and, when `wake`, wakes the threads parked on it (`uform_outcome_park`).
 *  Outcomes nobody can park on (VRAM: `uform_outcome_wait` polls the devices) skip the system call. */
void uform_outcome_settle(uform_outcome_t *outcome, uform_status_t status, char const *message, bool wake);
/** @brief For an engine verb's host tasks, which return nothing: records that the deferred call
 *  failed with `status` and `message`, reported when its executor finishes the outcome (which would
 *  otherwise read OK). Call it from the call's tasks while they run (the round's join orders it
 *  before the finish); the first recorded failure stays. OK records nothing. */
void uform_outcome_record_failure(uform_outcome_t *outcome, uform_status_t status, char const *message);
/** @brief `uform_outcome_settle` with the wake-up: what every host path uses. */
void uform_outcome_finish(uform_outcome_t *outcome, uform_status_t status, char const *message);
/** @brief A call refused before it reached an executor: finishes `outcome` (may be NULL) at once with
 *  `status` and the thread's message (empty for OK), as `uform_executor_call` finishes the outcome of
 *  a call it refuses, so an outcome handed to a failing call never stays pending; returns `status`. */
uform_status_t uform_outcome_refuse(uform_outcome_t *outcome, uform_status_t status);

/** @brief A verb's refusal by the executor (CONTENDED, DEFERRED_FULL) named after the verb the user
 *  called rather than `uform_executor_call`, in the thread's message and in `outcome`'s; any other
 *  status is returned as it is. */
uform_status_t uform_verb_refusal(uform_outcome_t *outcome, uform_status_t status, char const *verb);

/** @brief Parks the calling thread on the outcome's `finished` word while it is zero, up to
 *  `timeout` (NULL: forever); spurious returns are possible, callers loop. */
void uform_outcome_park(uform_outcome_t *outcome, struct timespec const *timeout);

/**
 *  @brief A bell: a word that sleepers park on and that every wake-up meant for them changes, plus
 *  a count of who is parked. A sleeper reads the word before its last look at its condition, so a
 *  ring after that look makes the futex return at once: no wake-up is lost. A ringer changes the
 *  condition (with sequential consistency) before it rings.
 */
typedef struct uform_bell_t {
    atomic_uint word;
    atomic_uint sleepers;
} uform_bell_t;

_Static_assert(sizeof(atomic_uint) == sizeof(uint32_t), "futexes wait on 32-bit words");

/** @brief Changes the word and wakes up to `count` sleepers (the system call only when some are
 *  parked). For counters that are themselves the condition (tickets), and for stop and mood. */
static inline void uform_bell_ring(uform_bell_t *bell, int count) {
    atomic_fetch_add_explicit(&bell->word, 1u, memory_order_seq_cst);
    if (atomic_load_explicit(&bell->sleepers, memory_order_seq_cst)) uform_futex_wake((uint32_t *)&bell->word, count);
}

/** @brief Rings only when someone is parked: the hot path of a round or a submission, which then
 *  touches the bell's line only when it has to. Safe because a sleeper counts itself in before its
 *  last look at the condition, which the ringer changed before looking at the count. */
static inline void uform_bell_ring_parked(uform_bell_t *bell, int count) {
    if (atomic_load_explicit(&bell->sleepers, memory_order_seq_cst)) {
        atomic_fetch_add_explicit(&bell->word, 1u, memory_order_seq_cst);
        uform_futex_wake((uint32_t *)&bell->word, count);
    }
}

/** @brief The first spin of a waiting thread, and the most an adaptive spin grows to. */
#define UFORM_PARK_SPINS 1024u
#define UFORM_PARK_SPINS_MAX (UFORM_PARK_SPINS * 32u)

/**
 *  @brief The spin's clock: `pause` takes from about 10 to 140 cycles depending on the CPU, so a
 *  count alone spins from 4 to 60 us. A wait that outlasts UFORM_SPIN_CLOCK_AT pauses reads the
 *  clock once, and then spins at least UFORM_SPIN_MIN_SECONDS before it parks, and yields its core
 *  (PARKED) only past that: on a CPU with a short `pause`, back-to-back rounds a few microseconds
 *  apart would otherwise park, or make system calls, between every two rounds.
 */
#define UFORM_SPIN_CLOCK_AT 256u
#define UFORM_SPIN_MIN_SECONDS 50e-6

/** @brief How a thread waits on a bell: spin `budget` pauses (forever while `*mood` is SPINNING),
 *  then park; an `adaptive` budget follows `uform_adapt_spins` after every sleep. */
typedef struct uform_spin_t {
    unsigned budget;
    bool adaptive;
    atomic_uint const *mood;   /**< The executor's mood, or NULL: never spin without end. */
    void (*before_park)(void); /**< Tests: called between deciding to park and sleeping; NULL. */
} uform_spin_t;

/** @brief The next spin of a thread that just slept `parked_seconds` after spinning `spins`
 *  pauses: four times longer (up to UFORM_PARK_SPINS_MAX) after a sleep under a millisecond, the
 *  first again after one of 50 ms or more, else unchanged. completion.c says why. */
unsigned uform_adapt_spins(unsigned spins, double parked_seconds);

/** @brief One step of an idle spin: a pause; past the first UFORM_PARK_SPINS pauses and the
 *  first UFORM_SPIN_MIN_SECONDS since `started` (0: the clock was not read) of a PARKED thread, a
 *  yield every 64 steps, so that where threads outnumber cores the spin does not keep the thread it
 *  waits for off the core. */
static inline void uform_spin_step(uform_spin_t const *spin, unsigned spins, double started) {
    if (spins >= UFORM_PARK_SPINS && (spins & 63u) == 0 && started > 0 &&
        (!spin->mood || atomic_load_explicit(spin->mood, memory_order_relaxed) != uform_mood_spinning_k) &&
        uform_now_seconds() - started >= UFORM_SPIN_MIN_SECONDS)
        sched_yield();
    else uform_spin_pause();
}

/** @brief Parks once on `bell` unless `ready(context)` turned true meanwhile; the caller loops. */
void uform_bell_park(uform_bell_t *bell, bool (*ready)(void *), void *context, uform_spin_t *spin);

/**
 *  @brief The one spin-then-park wait: returns once `ready(context)` is true, spinning first and
 *  parking on `bell` after. Inline, so each caller's `ready` is inlined into its spin.
 */
static inline void uform_bell_wait(uform_bell_t *bell, bool (*ready)(void *), void *context, uform_spin_t *spin) {
    unsigned spins = 0;
    double started = 0; // read once a wait outlasts UFORM_SPIN_CLOCK_AT pauses
    while (!ready(context)) {
        if (UFORM_UNLIKELY(spins == UFORM_SPIN_CLOCK_AT)) started = uform_now_seconds();
        bool more = spins < spin->budget ||
                    (spin->mood && atomic_load_explicit(spin->mood, memory_order_relaxed) == uform_mood_spinning_k);
        // Past the count, on until the minimum time, looking at the clock every 16 pauses.
        if (!more && started > 0) more = (spins & 15u) != 0 || uform_now_seconds() - started < UFORM_SPIN_MIN_SECONDS;
        if (more) {
            uform_spin_step(spin, spins++, started);
            continue;
        }
        uform_bell_park(bell, ready, context, spin);
        spins = 0, started = 0;
    }
}

/** @brief How `uform_poll_until` waits between looks: spin `spin_seconds` first (`pauses` pauses,
 *  at least one, between two looks; forever while `*mood` is SPINNING), then sleep from `nap_min`
 *  seconds, each sleep `growth` times the last, up to `nap_max`. */
typedef struct uform_poll_backoff_t {
    double spin_seconds, nap_min, nap_max, growth;
    unsigned pauses;
    atomic_uint const *mood; /**< An executor's mood, or NULL: never spin without end. */
} uform_poll_backoff_t;

/** @brief One look of `uform_poll_until`: OK or a failure ends the wait, PENDING looks again. A look
 *  that saw progress (not yet the end) sets `*progress`: the next sleep starts from `nap_min` again. */
typedef uform_status_t (*uform_poll_look_t)(void *context, bool *progress);

/**
 *  @brief The one poll-with-deadline wait, for conditions no bell word announces (the CUDA driver's
 *  events and streams, NCCL's asynchronous errors, other processes' files): calls `look` until it
 *  returns anything but PENDING and returns that; returns PENDING, setting no message, once `seconds`
 *  (negative: never) passed since the first look. `look` runs its own periodic checks (a watchdog,
 *  the peers' files) by the clock.
 */
uform_status_t uform_poll_until(uform_poll_look_t look, void *context, double seconds,
                                uform_poll_backoff_t const *backoff);


/* ---- CPU classes (cpu.c) ---- */

/** @brief Resolves a requested class: UNKNOWN becomes the detected one; a class the CPU cannot run
 *  is UNSUPPORTED naming the missing features; out-of-range is INVALID_ARGUMENT. */
uform_status_t uform_cpu_resolve_class(uform_cpu_class_t requested, uform_cpu_class_t *resolved);


/* ---- Placements (numa.c) ---- */

/** @brief Allowed cores of the chosen domains, in domain order then core order. */
typedef struct uform_placement_t {
    size_t domains_count;       /**< Chosen NUMA nodes. */
    int32_t *domain_nodes;      /**< [domains_count] node IDs. */
    size_t cores_count;         /**< Allowed cores over all chosen nodes. */
    int32_t *cores;             /**< [cores_count] logical CPU IDs. */
    size_t *core_domains;       /**< [cores_count] index into `domain_nodes` of each core's node. */
    uform_cpu_class_t cpu_class;/**< The resolved class. */
} uform_placement_t;

/** @brief Resolves RAM options into allowed cores (honouring affinity and cpuset) and a class.
 *  Validates the node list (unknown, disallowed, duplicate, coreless) and the class. On failure
 *  nothing is allocated. */
uform_status_t uform_placement_resolve(uform_ram_options_t const *ram, uform_placement_t *placement);
void uform_placement_free(uform_placement_t *placement);

/** @brief Allocates zeroed memory on a NUMA node (falls back to any node), aligned to a page;
 *  released with `uform_numa_free` and the same size. */
void *uform_numa_alloc(size_t bytes, int32_t node);
void uform_numa_free(void *pointer, size_t bytes);
/** @brief The NUMA node holding the page at `address`, into `*node`; 0 when there is none to read: no
 *  NUMA here, or a page never written (nothing is faulted in to answer). */
int uform_numa_node_of_address(void const *address, int *node);

/** @brief The NUMA node nearest a PCI device ("0000:3b:00.0"), or -1 if unknown. */
int32_t uform_numa_node_of_pci(char const *pci_bus_id);


/* ---- Executors (executor.c) ---- */

typedef struct uform_backend_t uform_backend_t;

/** @brief The header every executor starts with; each backend embeds it as its first member. */
struct uform_executor_s {
    UFORM_ALIGNED atomic_uint gate;           /**< 0 free, 1 held by a call: the CONTENDED check. */
    UFORM_ALIGNED uform_backend_t const *backend;
    void const *pool;                         /**< The borrowed ForkUnion pool; NULL unless a pool executor. */
    atomic_uint mood;                         /**< `uform_mood_t` idle workers adopt; set by drains. */
    uint64_t fork_generation;                 /**< `uform_fork_generation()` at construction. */
    _Atomic(void *) attachment;               /**< The one handle bound to this executor (a mesh), or NULL:
                                                   `uform_executor_attach`. */
    uform_executor_description_t description; /**< Filled by the backend at construction; its `mood`
                                                   is unused, `mood` above is the live one. */
};

/**
 *  @brief The registry of handles bound to executors, kept in the executors themselves: binds `owner`
 *  (a mesh) to `executor` when none is bound yet, returning true; false when another one is. The
 *  binding lives until `uform_executor_detach`, which the owner calls before the executor is freed
 *  (the lifetime rule), so no list, lock or lookup outlives either handle, and a forked child's
 *  copy is consistent without a fork handler.
 */
bool uform_executor_attach(uform_executor_t executor, void *owner);
/** @brief Unbinds `owner` from `executor` (a no-op when another handle, or none, is bound). */
void uform_executor_detach(uform_executor_t executor, void *owner);

/** @brief What each executor kind implements. `executor.c` validates arguments, checks forks and
 *  re-entry, takes the gate and checks residency before calling `call`, and drains and frees through
 *  `settle`; backends do the rest with completion.c's ring, finisher and waits. */
struct uform_backend_t {
    /** Runs or queues a validated call; the gate is held for the duration. */
    uform_status_t (*call)(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome);
    /** Waits until every call accepted before it finished (drains and frees, gate not held). */
    uform_status_t (*settle)(uform_executor_t executor, char const *verb);
    /** Applies a mood a drain just stored in `mood` (wakes parked workers into SPINNING, drains
     *  helper executors); NULL where the stored mood is all there is. */
    uform_status_t (*apply_mood)(uform_executor_t executor, uform_mood_t previous, uform_mood_t mood);
    /** Brings a lazily finished outcome up to date, waiting up to `timeout_seconds` (negative:
     *  forever); NULL where outcomes are finished eagerly by the executor's threads. */
    uform_status_t (*poll)(uform_executor_t executor, uform_outcome_t *outcome, double timeout_seconds);
    /** Where host thread `thread` is pinned; NULL where threads are not the engine's. */
    uform_status_t (*thread_placement)(uform_executor_t executor, size_t thread, int32_t *core, int32_t *node);
    /** Releases everything and frees the object; `settle` already ran unless forked. */
    void (*free)(uform_executor_t executor);
};

/** @brief The executor whose callback this thread is running, or NULL: calls into it from here
 *  return CONTENDED instead of deadlocking. Set by every backend around user callbacks. */
extern _Thread_local uform_executor_t uform_current_executor;

/** @brief Fills the common header; call first in every constructor. */
void uform_executor_init(uform_executor_t executor, uform_backend_t const *backend, uform_executor_kind_t kind);

/** @brief FORKED naming `verb` when the executor was created before a fork; else OK. */
uform_status_t uform_check_forked(uform_executor_t executor, char const *verb);

/** @brief Takes the executor's gate for one call (or a call-like operation such as a scratch
 *  release): FORKED after a fork, CONTENDED from inside the executor's own callback or while
 *  another call holds it. Released with `uform_gate_leave`. */
uform_status_t uform_gate_enter(uform_executor_t executor, char const *verb);
static inline void uform_gate_leave(uform_executor_t executor) {
    atomic_store_explicit(&executor->gate, 0u, memory_order_release);
}

/**
 *  @brief The ForkUnion pools a thread is inside, innermost first: pools whose gate it holds (an
 *  engine round it submits, or `uform_pool_lock`) and pools whose round it runs a task of, and
 *  rounds of RAM executors carry their thread 0's list to their workers. A call or drain on an
 *  executor over a pool in this list, or `uform_pool_lock` of one, would wait for itself: CONTENDED.
 */
typedef struct uform_pool_chain_t {
    void const *pool;
    struct uform_pool_chain_t *outer;
    struct pool_gate_t *gate; /**< The gate a `uform_pool_lock` holds; NULL for rounds and tasks. */
} uform_pool_chain_t;
extern _Thread_local uform_pool_chain_t *uform_current_pools;

/** @brief True when `pool` is in this thread's `uform_current_pools`. */
bool uform_pool_inside(void const *pool);

/** @brief The gate of a borrowed pool (pool_gate.c): found by the pool's address, one per pool. */
typedef struct pool_gate_t pool_gate_t;
/** @brief The gate of `pool` with one more reference, created if absent; NULL when out of memory. */
pool_gate_t *pool_gate_acquire(void const *pool);
void pool_gate_release(pool_gate_t *gate);
/** @brief Waits for the gate (a short spin, then parked) and holds it; `pool_gate_give` releases. */
void pool_gate_take(pool_gate_t *gate);
void pool_gate_give(pool_gate_t *gate);


/** @brief Workers of RAM executors parked right now (tests: the moods and the drain's wake-up). */
size_t uform_host_parked_workers(uform_executor_t executor);

/** @brief Tests only: called by a RAM executor's worker after it decided to park and before it
 *  sleeps, the window a wake-up could be lost in. NULL (the default) calls nothing. */
extern void (*_Atomic uform_host_before_park)(void);

/** @brief Starts a thread pinned to `core` (unpinned for -1) before it runs, so its stack is first
 *  touched on the core's node. A pin the OS refuses is SYSTEM_ERROR naming the core. */
uform_status_t uform_start_pinned_thread(pthread_t *handle, int32_t core, void *(*loop)(void *), void *argument);

/** @brief How RAM executors made from now on wake and join their workers (host.c's `host_join_t`
 *  says why): up to `shared_workers` workers share the publish line (SHARED), up to `slot_workers`
 *  each have a slot line of their own (SLOTS), more wake on the publish line and answer on their own
 *  lines (LINES). Defaults 1 and 7; tests change them to run every join on few cores, and bench_ram's
 *  `--join` to compare them on one host. */
void uform_host_join_limits(size_t shared_workers, size_t slot_workers);
#define UFORM_HOST_SHARED_WORKERS_DEFAULT 1u
#define UFORM_HOST_SLOT_WORKERS_DEFAULT 7u

/** @brief Tests: how a RAM executor's rounds wake and join ("shared", "slots", "lines"); NULL for
 *  anything else. */
char const *uform_host_join_name(uform_executor_t executor);

/** @brief Tests only: lets `uform_executor_for_ram` take more threads than the allowed cores, the
 *  extra ones unpinned, so that executors of many threads run on a 2-core machine. Off by default. */
void uform_host_allow_oversubscription(bool allow);

/** @brief Runs a host call inline on this thread as thread 0 of a one-thread executor. */
void uform_run_inline(uform_call_t const *call);


/* ---- VRAM seams (vram.c, used by mesh.c) ---- */

/** @brief One device of a VRAM executor, as a mesh needs it. */
typedef struct uform_vram_member_t {
    uform_gpu_ordinal_t ordinal; /**< UForm ordinal. */
    int cu_device;               /**< `CUdevice`. */
    void *cu_context;            /**< Retained primary `CUcontext`. */
    void *stream;                /**< The executor's `CUstream`. */
    uform_gpu_class_t own_class; /**< The device's own class. */
    uform_gpu_class_t gpu_class; /**< The class it dispatches as (pinned or own). */
    bool multicast_supported;    /**< CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, by query only. */
} uform_vram_member_t;

/** @brief The devices of a VRAM executor; returns zero for any other executor. */
size_t uform_vram_members(uform_executor_t executor, uform_vram_member_t const **members);

/** @brief DEVICE_FAULT with the fault's message under `verb` when a VRAM executor is poisoned; OK
 *  when it is not, and for any other executor. */
uform_status_t uform_vram_check_fault(uform_executor_t executor, char const *verb);

/** @brief Called periodically (about every millisecond) while the executor waits on its streams;
 *  a status other than OK aborts the wait with that status and message (the watchdog is expected to
 *  have made the streams finish, e.g. by aborting NCCL communicators). NULL removes it. */
typedef uform_status_t (*uform_vram_watchdog_t)(void *context);
void uform_vram_set_watchdog(uform_executor_t executor, uform_vram_watchdog_t watchdog, void *context);

/** @brief What a deferred VRAM call runs as it settles: once the devices finished it (`status` OK) or
 *  when it is finished otherwise (a fault, the executor freed or forked: that status and message),
 *  exactly once, under the executor's lock, on whichever thread brings the executor up to date (a
 *  poll, a wait, a drain, a later call, the executor's free), after every earlier deferred call
 *  settled and before the call's outcome reads finished. It may change `status` and `message` (a
 *  NUL-terminated string of at most `message_bytes` bytes) and must not call into the executor. */
typedef void (*uform_vram_settle_t)(void *context, uform_status_t *status, char *message, size_t message_bytes);

/** @brief `uform_executor_call` of a deferred call (`outcome` non-NULL) on a VRAM executor with
 *  `settle` attached to it. `*attached` is true when the call was queued (OK): then `settle` runs
 *  exactly once; otherwise (a refusal, or a device part that failed) it never runs. The verbs use it
 *  to write their rows and free their jobs when the call finishes, so a deferred encode returns as
 *  soon as its work is enqueued. */
uform_status_t uform_vram_call_settling(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome,
                                        uform_vram_settle_t settle, void *context, bool *attached);

/** @brief The RAM executor of a VRAM executor's host decoder threads, NULL for any other executor.
 *  For host-only work that must overlap the devices: a blocking call on the VRAM executor itself
 *  returns only once every earlier device call finished. CUDA builds only (vram.c). */
uform_executor_t uform_vram_decoders(uform_executor_t executor);


#endif // UFORM_INTERNAL_H
