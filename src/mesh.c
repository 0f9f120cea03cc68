/**
 *  @file   mesh.c
 *  @brief  Meshes: bootstrap (rendezvous, then NCCL), describe, all-reduce as an executor call,
 *          the watchdog that turns a lost peer into PEER_LOST, and freeing.
 *
 *  Decisions (uform.h states the contract; this is how it is kept):
 *
 *  Bootstrap
 *  - Checked first, touching nothing: the output pointer, the options (rendezvous.c's
 *    `uform_rendezvous_check_options`: index below count, directory and job with peers, the job's
 *    spelling, the timeout), then the executor (a VRAM executor that carries no other mesh, not
 *    created before a fork). A NULL, RAM or pool executor is INVALID_ARGUMENT.
 *  - This process's facts come from the executor's members: its GPU count; its class as pinned
 *    when any device dispatches as another class than its own (a pin at a device's own class looks
 *    like no pin, and is treated as none), else the highest class all its devices run (their meet);
 *    multicast support when every device reports the attribute; the opt-in when this process has
 *    `UFORM_ALLOW_MULTICAST=1`.
 *  - With peers the processes meet through the directory (rendezvous.h); without them nothing
 *    touches the file system. The description follows (rendezvous.c `uform_rendezvous_describe`).
 *  - A run of one GPU needs no NCCL and creates no communicator: its all-reduce is the identity.
 *    Every other run loads NCCL (UNSUPPORTED without it, after the rendezvous, so that peers hear
 *    of it at once through the failure record instead of waiting out their timeout). Process 0
 *    draws the unique ID and shares it as the blob "nccl-id"; every process then starts one rank
 *    per GPU (rank = first_gpu_index + device index) in one NCCL group, as a device call on the
 *    executor (each device's context current), non-blocking, and polls every communicator until
 *    none is in progress. The wait is bounded by the mesh's timeout, watches the peers' files every
 *    20 ms (a peer that failed or died ends it), and on expiry aborts every communicator and fails
 *    with TIMEOUT naming the stage and the ranks still in progress. Then (NCCL 2.18 and later)
 *    each rank splits a blocking child off its communicator (`ncclCommSplit`, color 0, the same
 *    rank, `blocking` 1), again in one group as a device call: the group is the non-blocking
 *    parents', so it returns at once and the split is polled on the parents under the rest of the
 *    timeout (at least 1 s) like the initialisation (unless `UFORM_MESH_BLOCKING=0`, which keeps
 *    collectives on the parents, polled, and starts no guard). Collectives run on the children: a
 *    non-blocking communicator reports every `ncclGroupEnd` as in progress and finishes the enqueue
 *    on a thread of its own, which cost tens of microseconds per call (1 and 4 MiB all-reduces at
 *    0.3-0.8x NCCL's blocking communicators on 2 x H200). Before 2.18 collectives stay on the
 *    non-blocking communicators, polled. Any failure after the rendezvous is published to the peers. Once NCCL is up, every process has read every file, so
 *    each removes its own files (process 0 also `run` and the blob).
 *
 *  All-reduce
 *  - Refused before the executor is touched, the outcome (if any) finished with the same status:
 *    a NULL mesh, `buffers` NULL with a non-zero count or holding a zero pointer, an unknown dtype
 *    (INVALID_ARGUMENT); a mesh created before a fork (FORKED); a mesh whose communicators were
 *    aborted (PEER_LOST, with the first failure's message). A zero count is a call that does nothing
 *    and is OK, ordered like any other.
 *  - Otherwise it is one call on the executor, blocking or deferred, with CONTENDED and ordering as
 *    for every call. Each device's callback notes where its collective goes (its buffer or scratch,
 *    its stream) and stages a host buffer in on its own stream; the last device's callback takes
 *    the mesh's mutex, opens one NCCL group, enqueues every device's in-place `ncclAllReduce` (sum)
 *    on its communicator and the executor's stream, closes the group, records one event per device
 *    (the watchdog's "is a collective pending") and releases the mutex before it returns. Nothing is
 *    held from one callback to the next, so a call the executor stops part-way (a context that
 *    cannot be made current, a failed copy) enqueued no collective and leaves the mesh usable.
 *    On blocking communicators `ncclGroupEnd` returns once the work is enqueued (NCCL connects
 *    peers lazily on a first collective, inside it); a lost peer can keep it from returning, where
 *    neither the caller nor the executor's watchdog can act, so the mesh's guard thread (see
 *    mesh_guard) aborts the communicators once it has run past the timeout, which releases it: the
 *    call fails with PEER_LOST. On non-blocking communicators (NCCL before 2.18), should
 *    `ncclGroupEnd` report work still in progress, the callback polls the communicators until it
 *    is enqueued, bounded like everything by the timeout.
 *  - The watchdog (installed on the executor for the mesh's lifetime, run while it waits on its
 *    streams) polls `ncclCommGetAsyncError` on every communicator; an error (a remote peer gone,
 *    NCCL's own timeout) or a collective pending for longer than the mesh's timeout since the
 *    watchdog first saw it pending aborts every communicator and fails the wait with PEER_LOST.
 *    The mesh stays aborted: later all-reduces fail at once; free it and bootstrap again. Work
 *    queued ahead of a collective counts towards its time: raise `timeout_seconds` for kernels
 *    running longer than it.
 *  - One mesh per executor: the watchdog slot is the executor's.
 *
 *  Free: waits for the executor's calls (the watchdog bounds that), removes the watchdog, finalises
 *  the blocking children in one group (the guard bounds it) and destroys them, then the
 *  non-blocking parents in another (polled), aborting instead whatever fails to finalise or
 *  outlasts the timeout; stops the guard thread, destroys the events. In a forked child only host
 *  memory is released.
 */
#include "cuda_driver.h"
#include "nccl_loader.h"
#include "rendezvous.h"

#include <pthread.h>  // `pthread_mutex_t`
#include <stdatomic.h>
#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `calloc`, `getenv`
#include <string.h>   // `memset`, `strerror`
#include <time.h>     // `clock_gettime`

/** Where one device's collective goes: its buffer (or scratch), stream and context. */
typedef struct reduce_staging_t {
    uint64_t buffer;
    void *stream;
    void *cu_context;
} reduce_staging_t;

struct uform_mesh_s {
    uform_executor_t executor;
    uint64_t fork_generation;
    uform_mesh_description_t description;
    size_t devices_count;
    uform_vram_member_t const *members; /**< The executor's, valid for its lifetime. */
    double timeout;
    uform_nccl_t const *nccl;  /**< NULL for a run of one GPU. */
    uform_nccl_comm_t *comms;  /**< [devices_count] what collectives run on: the blocking children of
                                    `parents`, or (NCCL before 2.18) the parents themselves; NULL entries
                                    once aborted. */
    uform_nccl_comm_t *parents; /**< [devices_count] the non-blocking communicators NCCL started with;
                                     NULL entries once released or moved to `comms`. */
    bool blocking;             /**< `comms` are blocking: `guard` bounds the calls that may block. */
    bool split_wanted;         /**< `UFORM_MESH_BLOCKING` is not "0": split blocking children off. */
    void **events;             /**< [devices_count] `CUevent`s recorded after each collective. */
    reduce_staging_t *staging; /**< [devices_count] where the running all-reduce goes on each device;
                                    calls on one executor never overlap. */
    bool events_recorded;
    pthread_mutex_t lock;      /**< Guards `comms`, `events` and the fields below. */
    atomic_bool aborted;
    char abort_message[400];
    double pending_since;      /**< When the watchdog first saw a collective pending; 0 if none. */
    uform_mesh_timings_t timings;
    struct {                   /**< Bounds a blocking NCCL call from another thread (see mesh_guard). */
        pthread_t thread;
        bool running;          /**< The thread was started (and is joined at release). */
        pthread_mutex_t lock;  /**< Guards the fields below; held while the guard aborts. */
        pthread_cond_t wake;   /**< Signalled to stop the thread. */
        bool stop, active, fired;
        double started;        /**< When the guarded call began. */
        char const *stage;     /**< What the guarded call is, for the message. */
        char message[400];     /**< Why the guard aborted the communicators. */
    } guard;
};

/* ---- Helpers ---- */

static uform_status_t nccl_status(uform_nccl_result_t result) {
    switch (result) {
    case uform_nccl_remote_error_k: return uform_status_peer_lost_k;
    case uform_nccl_invalid_argument_k:
    case uform_nccl_invalid_usage_k: return uform_status_invalid_argument_k;
    default: return uform_status_system_error_k;
    }
}

/** Aborts `comms` (any may be NULL) and forgets them. */
static void mesh_abort_each(uform_mesh_t mesh, uform_nccl_comm_t *comms) {
    for (size_t d = 0; comms && d < mesh->devices_count; ++d)
        if (comms[d]) {
            mesh->nccl->CommAbort(comms[d]);
            comms[d] = NULL;
        }
}

/**
 *  Aborts every communicator (the mutex held) and remembers why, once. The order matters:
 *  - Once the split is done (`blocking`), the children go first. A lost peer leaves a collective's
 *    kernel spinning on its flags until its communicator's abort flag is set, and `ncclCommAbort`
 *    ends by freeing the communicator's device memory, which waits for the device (`cuMemUnmap`,
 *    `cudaFree`): aborting a parent while its child's kernel spins never returns (the killed-peer
 *    hang on 2 x H200). Aborting the child sets its flag, the kernel quits, and the parents follow.
 *  - Before that (a failed start, a split still in progress) the parents go first: their abort also
 *    stops the split, after which no child appears any more.
 */
static void mesh_abort(uform_mesh_t mesh, char const *why) {
    if (!atomic_load(&mesh->aborted)) snprintf(mesh->abort_message, sizeof mesh->abort_message, "%s", why);
    if (mesh->blocking) mesh_abort_each(mesh, mesh->comms);
    mesh_abort_each(mesh, mesh->parents);
    mesh_abort_each(mesh, mesh->comms);
    atomic_store(&mesh->aborted, true);
}

/* ---- The guard: a blocking call bounded from another thread ---- */

/**
 *  Blocking communicators can block inside `ncclGroupEnd` (or `ncclCommFinalize`) when a peer is
 *  lost, where neither the executor's watchdog (it runs during stream waits) nor this thread can act.
 *  The guard thread, started with the blocking communicators, wakes every `timeout / 20` (1 to 50 ms);
 *  a guarded call running past the mesh's timeout makes it abort the communicators collectives run
 *  on (`ncclCommAbort` is documented as safe from another thread and makes the blocked call return),
 *  holding the guard's lock so that the blocked thread, once out of NCCL, sees it in `mesh_guard_end`.
 *  Between calls it only sleeps: the hot path takes an uncontended mutex twice, no system call.
 */
static void *mesh_guard(void *context) {
    uform_mesh_t mesh = context;
    double period = mesh->timeout / 20;
    period = period < 1e-3 ? 1e-3 : period > 50e-3 ? 50e-3 : period;
    pthread_mutex_lock(&mesh->guard.lock);
    while (!mesh->guard.stop) {
        if (mesh->guard.active && !mesh->guard.fired && uform_now_seconds() - mesh->guard.started >= mesh->timeout) {
            mesh->guard.fired = true;
            snprintf(mesh->guard.message, sizeof mesh->guard.message,
                     "%s did not return within %g s: a peer is gone or stalled; communicators aborted",
                     mesh->guard.stage, mesh->timeout);
            // The guarded thread holds the mesh's mutex and is inside NCCL: `comms` cannot change.
            for (size_t d = 0; d < mesh->devices_count; ++d)
                if (mesh->comms[d]) mesh->nccl->CommAbort(mesh->comms[d]);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        long nanoseconds = until.tv_nsec + (long)(period * 1e9);
        until.tv_sec += nanoseconds / 1000000000L, until.tv_nsec = nanoseconds % 1000000000L;
        pthread_cond_timedwait(&mesh->guard.wake, &mesh->guard.lock, &until);
    }
    pthread_mutex_unlock(&mesh->guard.lock);
    return NULL;
}

/** Starts the guard thread (with blocking communicators only). */
static uform_status_t mesh_guard_start(uform_mesh_t mesh) {
    int error = pthread_create(&mesh->guard.thread, NULL, mesh_guard, mesh);
    if (error != 0)
        return uform_fail(uform_status_system_error_k, "starting the mesh's guard thread failed (%s)", strerror(error));
    mesh->guard.running = true;
    return uform_status_ok_k;
}

static void mesh_guard_stop(uform_mesh_t mesh) {
    if (!mesh->guard.running) return;
    pthread_mutex_lock(&mesh->guard.lock);
    mesh->guard.stop = true;
    pthread_cond_signal(&mesh->guard.wake);
    pthread_mutex_unlock(&mesh->guard.lock);
    pthread_join(mesh->guard.thread, NULL);
    mesh->guard.running = false;
}

/** Marks the start of a call that may block (the mesh's mutex held). */
static void mesh_guard_begin(uform_mesh_t mesh, char const *stage) {
    if (!mesh->guard.running) return;
    pthread_mutex_lock(&mesh->guard.lock);
    mesh->guard.active = true;
    mesh->guard.started = uform_now_seconds();
    mesh->guard.stage = stage;
    pthread_mutex_unlock(&mesh->guard.lock);
}

/** Ends a guarded call (the mesh's mutex held). When the guard aborted the communicators meanwhile,
 *  forgets them, copies why into `message` and returns true: the caller aborts the rest. */
static bool mesh_guard_end(uform_mesh_t mesh, char *message, size_t capacity) {
    if (!mesh->guard.running) return false;
    pthread_mutex_lock(&mesh->guard.lock);
    mesh->guard.active = false;
    bool fired = mesh->guard.fired;
    if (fired) snprintf(message, capacity, "%s", mesh->guard.message);
    pthread_mutex_unlock(&mesh->guard.lock);
    if (fired)
        for (size_t d = 0; d < mesh->devices_count; ++d) mesh->comms[d] = NULL; // aborted by the guard
    return fired;
}

/** What `mesh_settle` polls: the communicators, and (every 20 ms) the peers' files. */
typedef struct settle_context_t {
    uform_mesh_t mesh;
    uform_nccl_comm_t const *comms;
    char const *stage;
    uform_rendezvous_t *rendezvous;
    double next_watch;
    char stalled[160]; /**< The device indices still in progress at the last look, as text. */
} settle_context_t;

/** One look: OK once no communicator is in progress, PENDING while one is, else the first error
 *  (a communicator's, or the peers' files'). */
static uform_status_t mesh_settle_look(void *context) {
    settle_context_t *settle = context;
    uform_mesh_t mesh = settle->mesh;
    bool busy = false;
    size_t used = 0;
    settle->stalled[0] = '\0';
    for (size_t d = 0; d < mesh->devices_count; ++d) {
        if (!settle->comms[d]) continue;
        uform_nccl_result_t error = uform_nccl_success_k;
        uform_nccl_result_t result = mesh->nccl->CommGetAsyncError(settle->comms[d], &error);
        if (result == uform_nccl_success_k && error == uform_nccl_in_progress_k) {
            busy = true;
            if (used + 24 < sizeof settle->stalled)
                used += (size_t)snprintf(settle->stalled + used, sizeof settle->stalled - used, "%s%zu",
                                         used ? ", " : "", mesh->description.first_gpu_index + d);
            continue;
        }
        if (result != uform_nccl_success_k) error = result;
        if (error != uform_nccl_success_k)
            return uform_nccl_fail(nccl_status(error), error, settle->comms[d], "%s: rank %zu", settle->stage,
                                   mesh->description.first_gpu_index + d);
    }
    if (!busy) return uform_status_ok_k;
    double const now = uform_now_seconds();
    if (settle->rendezvous && now >= settle->next_watch) {
        settle->next_watch = now + 0.02;
        uform_status_t status = uform_rendezvous_watch(settle->rendezvous);
        if (status != uform_status_ok_k) {
            char message[512];
            snprintf(message, sizeof message, "%s", uform_error_message());
            return uform_fail(status, "%s stopped: %s", settle->stage, message);
        }
    }
    return uform_status_pending_k;
}

/**
 *  Polls every communicator until none reports work in progress: OK, or the first error, or TIMEOUT
 *  after `seconds` naming the device indices still in progress. `rendezvous` (may be NULL) is watched
 *  every 20 ms. NCCL signals nothing a thread could park on (`ncclCommGetAsyncError` is the only way
 *  to learn that a non-blocking call finished), so this is `uform_poll_until`, not a bell: it spins
 *  for the first 200 us (NCCL usually finishes enqueueing within microseconds, and a sleep that short
 *  overshoots by tens of them, which doubled the cost of a 1 MiB all-reduce), then sleeps from 20 us,
 *  doubling up to 2 ms, for the long stalls of initialisation.
 */
static uform_status_t mesh_settle(uform_mesh_t mesh, uform_nccl_comm_t const *comms, double seconds, char const *stage,
                                  uform_rendezvous_t *rendezvous) {
    static uform_poll_backoff_t const backoff = {.spin_seconds = 200e-6, .nap_min = 20e-6, .nap_max = 2e-3, .growth = 2};
    settle_context_t settle = {.mesh = mesh, .comms = comms, .stage = stage, .rendezvous = rendezvous,
                               .next_watch = uform_now_seconds() + 0.02};
    uform_status_t status = uform_poll_until(mesh_settle_look, &settle, seconds, &backoff);
    if (status != uform_status_pending_k) return status;
    // This process's ranks wait on others: name them as waiting, not as stalled.
    return uform_fail(uform_status_timeout_k,
                      "%s did not finish within %g s; this process's ranks %s (of %zu in the run) are still "
                      "waiting, so a rank of another process never joined or stalled",
                      stage, seconds, settle.stalled, mesh->description.gpus_per_colocated_domain);
}

/* ---- The watchdog ---- */

static uform_status_t mesh_watchdog(void *context) {
    uform_mesh_t mesh = context;
    if (pthread_mutex_trylock(&mesh->lock) != 0) return uform_status_ok_k; // a call is enqueueing: later
    uform_status_t status = uform_status_ok_k;
    if (!atomic_load(&mesh->aborted) && mesh->comms) {
        for (size_t d = 0; d < mesh->devices_count && status == uform_status_ok_k; ++d) {
            uform_nccl_result_t error = uform_nccl_success_k;
            uform_nccl_result_t result = mesh->nccl->CommGetAsyncError(mesh->comms[d], &error);
            if (result != uform_nccl_success_k) error = result;
            if (error != uform_nccl_success_k && error != uform_nccl_in_progress_k)
                status = uform_nccl_fail(uform_status_peer_lost_k, error, mesh->comms[d],
                                         "mesh all-reduce failed on rank %zu; communicators aborted",
                                         mesh->description.first_gpu_index + d);
        }
#if UFORM_WITH_CUDA
        uform_cuda_t const *cuda = NULL;
        bool pending = false;
        if (status == uform_status_ok_k && mesh->events_recorded && uform_cuda(&cuda) == uform_status_ok_k) {
            uform_cuda_context_t context;
            uform_cuda_context_enter(cuda, &context);
            for (size_t d = 0; d < mesh->devices_count && !pending; ++d)
                pending = uform_cuda_context_use(cuda, &context, (CUcontext)mesh->members[d].cu_context) == CUDA_SUCCESS &&
                          cuda->EventQuery((CUevent)mesh->events[d]) == CUDA_ERROR_NOT_READY;
            uform_cuda_context_leave(cuda, &context);
        }
        double now = uform_now_seconds();
        if (!pending) mesh->pending_since = 0;
        else if (!mesh->pending_since) mesh->pending_since = now;
        else if (now - mesh->pending_since > mesh->timeout)
            status = uform_fail(uform_status_peer_lost_k,
                                "mesh all-reduce did not finish within %g s: a peer is gone or stalled; "
                                "communicators aborted",
                                mesh->timeout);
#endif
        if (status != uform_status_ok_k) mesh_abort(mesh, uform_error_message());
    }
    pthread_mutex_unlock(&mesh->lock);
    return status;
}

/* ---- Bootstrap ---- */

typedef struct init_context_t {
    uform_mesh_t mesh;
    uform_nccl_unique_id_t id;
    uform_nccl_result_t result;
    size_t failed_device;
    bool group_open; /**< The first device opened the group and the last has not closed it (yet). */
} init_context_t;

/** Closes a group that a device call stopped part-way left open on this thread. */
static void mesh_close_group(uform_mesh_t mesh, init_context_t *context) {
    if (context->group_open) mesh->nccl->GroupEnd(), context->group_open = false;
}

/** Device call: one rank per device inside one group, with the device's context current. */
static uform_status_t mesh_init_device(void *context, uform_device_slot_t const *slot) {
    init_context_t *init = context;
    uform_mesh_t mesh = init->mesh;
    size_t d = slot->device_index;
    if (d == 0) mesh->nccl->GroupStart(), init->group_open = true;
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_NONBLOCKING;
    uform_nccl_result_t result =
        mesh->nccl->CommInitRankConfig(&mesh->parents[d], (int)mesh->description.gpus_per_colocated_domain, init->id,
                                       (int)(mesh->description.first_gpu_index + d), &config);
    if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k && init->result == uform_nccl_success_k)
        init->result = result, init->failed_device = d;
#if UFORM_WITH_CUDA
    uform_cuda_t const *cuda = NULL;
    if (uform_cuda(&cuda) == uform_status_ok_k) {
        CUevent event = NULL;
        if (cuda->EventCreate(&event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) mesh->events[d] = event;
    }
#endif
    if (d + 1 == mesh->devices_count) {
        uform_nccl_result_t end = mesh->nccl->GroupEnd();
        init->group_open = false;
        if (end != uform_nccl_success_k && end != uform_nccl_in_progress_k && init->result == uform_nccl_success_k)
            init->result = end, init->failed_device = d;
    }
    return uform_status_ok_k; // failures are read from `init` once every device was visited
}

/** Device call: each rank's blocking child (color 0, the same rank), inside one group with the
 *  device's context current. The group is the non-blocking parents': it returns at once, and the
 *  parents report the split in progress until every child is up; only then does NCCL set `comms`. */
static uform_status_t mesh_split_device(void *context, uform_device_slot_t const *slot) {
    init_context_t *split = context;
    uform_mesh_t mesh = split->mesh;
    size_t d = slot->device_index;
    if (d == 0) mesh->nccl->GroupStart(), split->group_open = true;
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_BLOCKING;
    uform_nccl_result_t result = mesh->nccl->CommSplit(mesh->parents[d], 0, (int)(mesh->description.first_gpu_index + d),
                                                       &mesh->comms[d], &config);
    if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k && split->result == uform_nccl_success_k)
        split->result = result, split->failed_device = d;
    if (d + 1 == mesh->devices_count) {
        uform_nccl_result_t end = mesh->nccl->GroupEnd();
        split->group_open = false;
        if (end != uform_nccl_success_k && end != uform_nccl_in_progress_k && split->result == uform_nccl_success_k)
            split->result = end, split->failed_device = d;
    }
    return uform_status_ok_k;
}

/** Splits the blocking children off the started parents, bounded by the rest of the timeout. */
static uform_status_t mesh_split(uform_mesh_t mesh, uform_rendezvous_t *rendezvous, double seconds) {
    init_context_t split = {.mesh = mesh};
    uform_call_t call = {.residency = uform_residency_vram_k, .device = mesh_split_device, .context = &split};
    uform_status_t status = uform_executor_call(mesh->executor, &call, NULL);
    mesh_close_group(mesh, &split);
    if (status != uform_status_ok_k) return status;
    char stage[200];
    snprintf(stage, sizeof stage, "NCCL split into blocking communicators (ncclCommSplit of %zu ranks, %zu in this process)",
             mesh->description.gpus_per_colocated_domain, mesh->devices_count);
    if (split.result != uform_nccl_success_k)
        return uform_nccl_fail(nccl_status(split.result), split.result, mesh->parents[split.failed_device],
                               "%s: rank %zu", stage, mesh->description.first_gpu_index + split.failed_device);
    status = mesh_settle(mesh, mesh->parents, seconds, stage, rendezvous);
    if (status != uform_status_ok_k) return status;
    for (size_t d = 0; d < mesh->devices_count; ++d)
        if (!mesh->comms[d])
            return uform_fail(uform_status_system_error_k, "%s: NCCL reported success but gave rank %zu no communicator",
                              stage, mesh->description.first_gpu_index + d);
    mesh->blocking = true;
    return mesh_guard_start(mesh);
}

/** Starts NCCL: the unique ID through the directory, one rank per GPU, polled to the end, then the
 *  blocking children collectives run on. */
static uform_status_t mesh_start_nccl(uform_mesh_t mesh, uform_rendezvous_t *rendezvous) {
    uform_status_t status = uform_nccl(&mesh->nccl);
    if (status != uform_status_ok_k) return status;
    mesh->comms = calloc(mesh->devices_count, sizeof *mesh->comms);
    mesh->parents = calloc(mesh->devices_count, sizeof *mesh->parents);
    mesh->events = calloc(mesh->devices_count, sizeof *mesh->events);
    mesh->staging = calloc(mesh->devices_count, sizeof *mesh->staging);
    if (!mesh->comms || !mesh->parents || !mesh->events || !mesh->staging)
        return uform_fail(uform_status_out_of_memory_k, "out of memory starting NCCL");
    if (mesh->description.gpus_per_colocated_domain > (size_t)INT32_MAX)
        return uform_fail(uform_status_invalid_argument_k, "a mesh of %zu GPUs is more than NCCL numbers",
                          mesh->description.gpus_per_colocated_domain);
    init_context_t init = {.mesh = mesh};
    double start = uform_now_seconds();
    if (mesh->description.host_domain_index == 0) {
        uform_nccl_result_t result = mesh->nccl->GetUniqueId(&init.id);
        if (result != uform_nccl_success_k)
            return uform_nccl_fail(nccl_status(result), result, NULL, "ncclGetUniqueId");
    }
    if (rendezvous) {
        status = uform_rendezvous_share_blob(rendezvous, "nccl-id", init.id.internal, sizeof init.id.internal);
        if (status != uform_status_ok_k) return status;
    }
    mesh->timings.blob_seconds = uform_now_seconds() - start;
    start = uform_now_seconds();
    uform_call_t call = {.residency = uform_residency_vram_k, .device = mesh_init_device, .context = &init};
    status = uform_executor_call(mesh->executor, &call, NULL);
    mesh_close_group(mesh, &init);
    if (status != uform_status_ok_k) return status;
    char stage[200];
    snprintf(stage, sizeof stage, "NCCL initialisation (ncclCommInitRankConfig of %zu ranks, %zu in this process)",
             mesh->description.gpus_per_colocated_domain, mesh->devices_count);
    if (init.result != uform_nccl_success_k)
        status = uform_nccl_fail(nccl_status(init.result), init.result, mesh->parents[init.failed_device],
                                 "%s: rank %zu", stage, mesh->description.first_gpu_index + init.failed_device);
    else status = mesh_settle(mesh, mesh->parents, mesh->timeout, stage, rendezvous);
    // Collectives run on blocking communicators (a non-blocking one reports every group as in
    // progress, to be polled: tens of microseconds per call); NCCL before 2.18 cannot split, and its
    // collectives stay on the non-blocking ones, as with `UFORM_MESH_BLOCKING=0`.
    if (status == uform_status_ok_k && mesh->nccl->CommSplit && mesh->split_wanted) {
        double left = mesh->timeout - (uform_now_seconds() - start);
        status = mesh_split(mesh, rendezvous, left > 1 ? left : 1);
    }
    else if (status == uform_status_ok_k)
        for (size_t d = 0; d < mesh->devices_count; ++d) mesh->comms[d] = mesh->parents[d], mesh->parents[d] = NULL;
    mesh->timings.nccl_seconds = uform_now_seconds() - start;
    if (status != uform_status_ok_k) {
        char message[512];
        snprintf(message, sizeof message, "%s; communicators aborted", uform_error_message());
        pthread_mutex_lock(&mesh->lock);
        mesh_abort(mesh, message);
        pthread_mutex_unlock(&mesh->lock);
        return uform_fail(status, "%s", message);
    }
    return uform_status_ok_k;
}

static void mesh_release(uform_mesh_t mesh, bool forked) {
#if UFORM_WITH_CUDA
    uform_cuda_t const *cuda = NULL;
    if (!forked && mesh->events && uform_cuda(&cuda) == uform_status_ok_k) {
        uform_cuda_context_t context;
        uform_cuda_context_enter(cuda, &context);
        for (size_t d = 0; d < mesh->devices_count; ++d) {
            if (!mesh->events[d]) continue;
            (void)uform_cuda_context_use(cuda, &context, (CUcontext)mesh->members[d].cu_context);
            cuda->EventDestroy((CUevent)mesh->events[d]);
        }
        uform_cuda_context_leave(cuda, &context);
    }
#else
    (void)forked;
#endif
    if (!forked) { // a forked child has no guard thread, and its locks may be held by threads it lacks
        mesh_guard_stop(mesh);
        pthread_mutex_destroy(&mesh->guard.lock);
        pthread_cond_destroy(&mesh->guard.wake);
        pthread_mutex_destroy(&mesh->lock);
    }
    free(mesh->parents);
    free(mesh->comms);
    free(mesh->events);
    free(mesh->staging);
    free(mesh);
}

uform_status_t uform_mesh_bootstrap(uform_executor_t executor, uform_mesh_options_t const *options, uform_mesh_t *mesh) {
    if (!mesh) return uform_fail(uform_status_invalid_argument_k, "uform_mesh_bootstrap: mesh is NULL");
    uform_status_t status = uform_rendezvous_check_options(options);
    if (status != uform_status_ok_k) return status;
    char const *blocking = getenv("UFORM_MESH_BLOCKING");
    if (blocking && *blocking && strcmp(blocking, "0") != 0 && strcmp(blocking, "1") != 0)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_bootstrap: UFORM_MESH_BLOCKING is \"%.40s\"; use 1 (collectives on blocking NCCL "
                          "communicators, the default) or 0 (on the non-blocking ones NCCL starts with)",
                          blocking);
    bool const split_wanted = !blocking || strcmp(blocking, "0") != 0; // read once, before anything sets the environment
    uform_mesh_options_t const alone = {0};
    if (!options) options = &alone;
    uform_vram_member_t const *members = NULL;
    size_t devices = uform_vram_members(executor, &members);
    if (devices == 0) {
        uform_executor_description_t description = {0};
        if (executor && uform_executor_describe(executor, &description) != uform_status_ok_k)
            description.kind = uform_executor_kind_inline_k; // forked: the message below still names the misuse
        char const *kinds[] = {"NULL (inline)", "RAM", "pool", "VRAM"};
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_bootstrap: the executor must be a VRAM executor (uform_executor_for_vram), "
                          "whose devices are this process's members; this one is a %s executor",
                          executor ? kinds[description.kind & 3] : kinds[0]);
    }
    if (executor->fork_generation != uform_fork_generation())
        return uform_fail(uform_status_forked_k,
                          "uform_mesh_bootstrap: the executor was created before a fork(); create one in this process");

    // This process's facts.
    uform_rendezvous_facts_t facts = {.gpus_count = devices, .multimem_span = options->gpus_per_multimem_domain};
    char const *allow = getenv("UFORM_ALLOW_MULTICAST");
    facts.multicast_allowed = allow && strcmp(allow, "1") == 0;
    facts.multicast_supported = true;
    facts.gpu_floor = members[0].own_class;
    for (size_t d = 0; d < devices; ++d) {
        facts.multicast_supported = facts.multicast_supported && members[d].multicast_supported;
        if (members[d].gpu_class != members[d].own_class) facts.gpu_class_pinned = true;
        if (d) facts.gpu_floor = uform_gpu_class_common(facts.gpu_floor, members[d].own_class);
    }
    if (facts.gpu_floor == uform_gpu_class_unknown_k)
        return uform_fail(uform_status_config_mismatch_k,
                          "uform_mesh_bootstrap: the executor's GPUs have no class in common (%s and others)",
                          uform_gpu_class_name(members[0].own_class));
    facts.gpu_class = facts.gpu_class_pinned ? members[0].gpu_class : facts.gpu_floor;

    uform_mesh_t created = calloc(1, sizeof *created);
    if (!created) return uform_fail(uform_status_out_of_memory_k, "uform_mesh_bootstrap: out of memory");
    pthread_mutex_init(&created->lock, NULL);
    pthread_mutex_init(&created->guard.lock, NULL);
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_cond_init(&created->guard.wake, &monotonic);
    pthread_condattr_destroy(&monotonic);
    created->executor = executor;
    created->fork_generation = uform_fork_generation();
    created->devices_count = devices;
    created->members = members;
    created->timeout = options->timeout_seconds > 0 ? options->timeout_seconds : 120.0;
    created->split_wanted = split_wanted;
    if (!uform_executor_attach(executor, created)) { // one mesh per executor
        mesh_release(created, false);
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_bootstrap: this executor already carries a mesh; free that one first");
    }

    uform_rendezvous_t *rendezvous = NULL;
    double start = uform_now_seconds();
    if (options->host_domain_count > 1) {
        status = uform_rendezvous_join(options, &facts, &rendezvous);
        if (status == uform_status_ok_k) status = uform_rendezvous_describe(rendezvous, &created->description);
    }
    else uform_rendezvous_describe_alone(&facts, &created->description);
    created->timings.rendezvous_seconds = uform_now_seconds() - start;
    if (status == uform_status_ok_k && created->description.gpus_per_colocated_domain > 1)
        status = mesh_start_nccl(created, rendezvous);
    if (status != uform_status_ok_k) {
        char message[512];
        snprintf(message, sizeof message, "%s", uform_error_message());
        uform_rendezvous_publish_failure(rendezvous, status, message);
        uform_rendezvous_leave(rendezvous, false);
        uform_executor_detach(executor, created);
        mesh_release(created, false);
        return uform_fail(status, "%s", message);
    }
    uform_rendezvous_leave(rendezvous, true); // NCCL is up: every peer read every file
    if (created->comms) uform_vram_set_watchdog(executor, mesh_watchdog, created);
    *mesh = created;
    return uform_status_ok_k;
}

uform_status_t uform_mesh_describe(uform_mesh_t mesh, uform_mesh_description_t *description) {
    if (description) memset(description, 0, sizeof *description);
    if (!mesh || !description)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_describe: %s is NULL", mesh ? "description" : "mesh");
    if (mesh->fork_generation != uform_fork_generation())
        return uform_fail(uform_status_forked_k, "uform_mesh_describe: the mesh was created before a fork(); only "
                                                 "uform_mesh_free may be called on it");
    *description = mesh->description;
    return uform_status_ok_k;
}

void uform_mesh_free(uform_mesh_t mesh) {
    if (!mesh) return;
    uform_executor_detach(mesh->executor, mesh);
    bool forked = mesh->fork_generation != uform_fork_generation();
    if (forked) {
        mesh_release(mesh, true);
        return;
    }
    // The watchdog bounds a stuck collective; a failed drain (a poisoned executor) leaves nothing
    // queued that the aborts and releases below could race with, so freeing goes on regardless.
    if (uform_executor_drain(mesh->executor, uform_mood_parked_k) != uform_status_ok_k) uform_clear_error();
    uform_vram_set_watchdog(mesh->executor, NULL, NULL);
    pthread_mutex_lock(&mesh->lock);
    if (mesh->comms && !atomic_load(&mesh->aborted)) {
        // The blocking children first (ncclGroupEnd returns once they are finalised; the guard
        // bounds it), then the non-blocking parents, polled: each group holds one kind only.
        char message[400];
        static char const blocking_stage[] = "NCCL finalisation of the blocking communicators (ncclCommFinalize)";
        mesh_guard_begin(mesh, blocking_stage);
        mesh->nccl->GroupStart();
        for (size_t d = 0; d < mesh->devices_count; ++d) mesh->nccl->CommFinalize(mesh->comms[d]);
        uform_nccl_result_t result = mesh->nccl->GroupEnd();
        if (mesh_guard_end(mesh, message, sizeof message)) mesh_abort(mesh, message);
        else if (result == uform_nccl_in_progress_k &&
                 mesh_settle(mesh, mesh->comms, mesh->timeout, "NCCL finalisation (ncclCommFinalize)", NULL) !=
                     uform_status_ok_k)
            mesh_abort(mesh, uform_error_message());
        else if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k) {
            uform_nccl_fail(nccl_status(result), result, NULL, "%s", blocking_stage);
            mesh_abort(mesh, uform_error_message());
        }
        for (size_t d = 0; d < mesh->devices_count; ++d)
            if (mesh->comms[d]) mesh->nccl->CommDestroy(mesh->comms[d]), mesh->comms[d] = NULL;
        bool parents = false;
        for (size_t d = 0; d < mesh->devices_count; ++d) parents = parents || mesh->parents[d];
        if (parents) {
            mesh->nccl->GroupStart();
            for (size_t d = 0; d < mesh->devices_count; ++d) mesh->nccl->CommFinalize(mesh->parents[d]);
            mesh->nccl->GroupEnd();
            if (mesh_settle(mesh, mesh->parents, mesh->timeout, "NCCL finalisation (ncclCommFinalize)", NULL) !=
                uform_status_ok_k)
                mesh_abort(mesh, uform_error_message());
            for (size_t d = 0; d < mesh->devices_count; ++d)
                if (mesh->parents[d]) mesh->nccl->CommDestroy(mesh->parents[d]), mesh->parents[d] = NULL;
        }
    }
    pthread_mutex_unlock(&mesh->lock);
    mesh_release(mesh, false);
}

/* ---- All-reduce ---- */

typedef struct reduce_context_t {
    uform_mesh_t mesh;
    uint64_t const *buffers;     /**< Device buffers, or NULL when `host_buffers` are given. */
    void *const *host_buffers;   /**< Host buffers staged through each device's scratch. */
    size_t count;
    size_t bytes;                /**< `count` elements in bytes. */
    uform_nccl_dtype_t dtype;
} reduce_context_t;

#if UFORM_WITH_CUDA
/** Copies each host buffer back from its device's scratch, on that device's stream, after the
 *  collective was enqueued there. Pageable host memory makes these copies synchronous. */
static uform_status_t mesh_stage_out(reduce_context_t *reduce) {
    uform_cuda_t const *cuda = NULL;
    uform_status_t status = uform_cuda(&cuda);
    reduce_staging_t const *staging = reduce->mesh->staging;
    if (status != uform_status_ok_k) return status;
    uform_cuda_context_t context;
    uform_cuda_context_enter(cuda, &context);
    for (size_t d = 0; status == uform_status_ok_k && d < reduce->mesh->devices_count; ++d) {
        CUresult result = uform_cuda_context_use(cuda, &context, (CUcontext)staging[d].cu_context);
        if (result == CUDA_SUCCESS)
            result = cuda->MemcpyDtoHAsync(reduce->host_buffers[d], (CUdeviceptr)staging[d].buffer, reduce->bytes,
                                           (CUstream)staging[d].stream);
        if (result != CUDA_SUCCESS)
            status = uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k
                                                                       : uform_status_system_error_k,
                                     result, "mesh all-reduce: copying %zu bytes back to host buffer %zu", reduce->bytes,
                                     d);
    }
    uform_cuda_context_leave(cuda, &context);
    return status;
}
#endif

/** Records one event per device after the collective just enqueued (the mutex held). */
static void mesh_record_events(uform_mesh_t mesh) {
#if UFORM_WITH_CUDA
    uform_cuda_t const *cuda = NULL;
    if (uform_cuda(&cuda) != uform_status_ok_k) return;
    bool recorded = true;
    uform_cuda_context_t context;
    uform_cuda_context_enter(cuda, &context);
    for (size_t d = 0; d < mesh->devices_count; ++d)
        recorded = recorded && mesh->events[d] &&
                   uform_cuda_context_use(cuda, &context, (CUcontext)mesh->members[d].cu_context) == CUDA_SUCCESS &&
                   cuda->EventRecord((CUevent)mesh->events[d], (CUstream)mesh->members[d].stream) == CUDA_SUCCESS;
    uform_cuda_context_leave(cuda, &context);
    mesh->events_recorded = recorded;
#else
    (void)mesh;
#endif
}

/** Enqueues every device's collective in one NCCL group, the mutex held (so the watchdog cannot
 *  abort the communicators between the group's start and end), and releases it before returning. */
static uform_status_t mesh_enqueue(uform_mesh_t mesh, reduce_context_t const *reduce) {
    pthread_mutex_lock(&mesh->lock);
    // A communicator that already reports an error (a lost peer) takes no more work.
    for (size_t d = 0; d < mesh->devices_count && !atomic_load(&mesh->aborted); ++d) {
        uform_nccl_result_t error = uform_nccl_success_k;
        uform_nccl_result_t result = mesh->nccl->CommGetAsyncError(mesh->comms[d], &error);
        if (result != uform_nccl_success_k) error = result;
        if (error != uform_nccl_success_k && error != uform_nccl_in_progress_k) {
            uform_nccl_fail(uform_status_peer_lost_k, error, mesh->comms[d],
                            "mesh all-reduce: rank %zu failed; communicators aborted",
                            mesh->description.first_gpu_index + d);
            mesh_abort(mesh, uform_error_message());
        }
    }
    if (atomic_load(&mesh->aborted)) {
        pthread_mutex_unlock(&mesh->lock);
        return uform_fail(uform_status_peer_lost_k, "mesh all-reduce: the communicators were aborted: %s",
                          mesh->abort_message);
    }
    uform_status_t status = uform_status_ok_k;
    static char const stage[] = "mesh all-reduce (ncclGroupEnd)";
    mesh_guard_begin(mesh, stage); // blocking communicators: bounded from the guard thread
    mesh->nccl->GroupStart();
    for (size_t d = 0; d < mesh->devices_count && status == uform_status_ok_k; ++d) {
        void *buffer = (void *)(uintptr_t)mesh->staging[d].buffer;
        uform_nccl_result_t result = mesh->nccl->AllReduce(buffer, buffer, reduce->count, reduce->dtype, uform_nccl_sum_k,
                                                           mesh->comms[d], mesh->staging[d].stream);
        if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k)
            status = uform_nccl_fail(nccl_status(result), result, mesh->comms[d], "ncclAllReduce of %zu elements on rank %zu",
                                     reduce->count, mesh->description.first_gpu_index + d);
    }
    // NCCL drops a group that recorded an error; otherwise an error or a stall here leaves the
    // communicators in an unknown state, so they are aborted.
    uform_nccl_result_t result = mesh->nccl->GroupEnd();
    char fired[400];
    if (mesh_guard_end(mesh, fired, sizeof fired)) {
        mesh_abort(mesh, fired);
        pthread_mutex_unlock(&mesh->lock);
        return uform_fail(uform_status_peer_lost_k, "%s", fired);
    }
    if (status == uform_status_ok_k) {
        if (result == uform_nccl_in_progress_k) // non-blocking communicators (NCCL before 2.18)
            status = mesh_settle(mesh, mesh->comms, mesh->timeout, stage, NULL);
        else if (result != uform_nccl_success_k)
            status = uform_nccl_fail(nccl_status(result), result, NULL, "mesh all-reduce (ncclGroupEnd)");
        if (status != uform_status_ok_k) {
            char message[512];
            snprintf(message, sizeof message, "%s; communicators aborted", uform_error_message());
            mesh_abort(mesh, message);
            status = uform_fail(status == uform_status_timeout_k ? uform_status_peer_lost_k : status, "%s", message);
        }
    }
    if (status == uform_status_ok_k) mesh_record_events(mesh);
    pthread_mutex_unlock(&mesh->lock);
    return status;
}

/**
 *  Device call. Every device but the last only notes where its collective goes (and stages a host
 *  buffer in, on its own stream); the last enqueues all of them in one NCCL group. Nothing is held
 *  from one callback to the next: a call the executor stops part-way (a device's context that cannot
 *  be made current, a failed copy) has enqueued no collective, holds no lock, leaves no NCCL group
 *  open, and the mesh stays usable.
 */
static uform_status_t mesh_reduce_device(void *context, uform_device_slot_t const *slot) {
    reduce_context_t *reduce = context;
    uform_mesh_t mesh = reduce->mesh;
    size_t d = slot->device_index;
    if (!mesh->comms || reduce->count == 0) return uform_status_ok_k; // one GPU, or nothing to do
    if (atomic_load(&mesh->aborted))
        return uform_fail(uform_status_peer_lost_k, "mesh all-reduce: the communicators were aborted: %s",
                          mesh->abort_message);
    mesh->staging[d] = (reduce_staging_t) {reduce->buffers ? reduce->buffers[d] : slot->scratch, slot->stream,
                                           slot->cu_context};
#if UFORM_WITH_CUDA
    if (reduce->host_buffers) { // this device's context is current: the copy lands before the collective
        uform_cuda_t const *cuda = NULL;
        uform_status_t status = uform_cuda(&cuda);
        CUresult result = status == uform_status_ok_k
                              ? cuda->MemcpyHtoDAsync((CUdeviceptr)slot->scratch, reduce->host_buffers[d], reduce->bytes,
                                                      (CUstream)slot->stream)
                              : CUDA_SUCCESS;
        if (status != uform_status_ok_k) return status;
        if (result != CUDA_SUCCESS)
            return uform_cuda_fail(uform_cuda_error_is_fault(result) ? uform_status_device_fault_k
                                                                     : uform_status_system_error_k,
                                   result, "mesh all-reduce: copying %zu bytes in from host buffer %zu", reduce->bytes, d);
    }
#endif
    if (d + 1 < mesh->devices_count) return uform_status_ok_k;
    uform_status_t status = mesh_enqueue(mesh, reduce);
#if UFORM_WITH_CUDA
    if (status == uform_status_ok_k && reduce->host_buffers) status = mesh_stage_out(reduce);
#endif
    return status;
}

/** Refuses an all-reduce before the executor is involved, finishing its outcome alike. */
static uform_status_t refuse(uform_outcome_t *outcome, uform_status_t status) {
    if (outcome) {
        uform_outcome_begin(outcome, NULL);
        uform_outcome_finish(outcome, status, uform_error_message());
    }
    return status;
}

/** Both all-reduce entries: device buffers, or host buffers staged through each device's scratch. */
static uform_status_t mesh_all_reduce(uform_mesh_t mesh, uint64_t const *buffers, void *const *host_buffers,
                                      size_t count, uform_dtype_t dtype, uform_outcome_t *outcome, char const *verb) {
    if (!mesh) return refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: mesh is NULL", verb));
    static uform_nccl_dtype_t const nccl_types[] = {
        [uform_dtype_f32_k] = uform_nccl_float32_k, [uform_dtype_bf16_k] = uform_nccl_bfloat16_k,
        [uform_dtype_f16_k] = uform_nccl_float16_k, [uform_dtype_f64_k] = uform_nccl_float64_k,
        [uform_dtype_i32_k] = uform_nccl_int32_k,
    };
    static size_t const element_bytes[] = {
        [uform_dtype_f32_k] = 4, [uform_dtype_bf16_k] = 2, [uform_dtype_f16_k] = 2,
        [uform_dtype_f64_k] = 8, [uform_dtype_i32_k] = 4,
    };
    if ((unsigned)dtype >= sizeof nccl_types / sizeof nccl_types[0])
        return refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: dtype %d is not a uform_dtype_t (0 to %zu)",
                                          verb, (int)dtype, sizeof nccl_types / sizeof nccl_types[0] - 1));
    bool const host = host_buffers != NULL;
    if (count && !buffers && !host_buffers)
        return refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: buffers is NULL for %zu elements", verb,
                                          count));
    for (size_t d = 0; count && d < mesh->devices_count; ++d)
        if (host ? !host_buffers[d] : !buffers[d])
            return refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                              "%s: buffers[%zu] is %s; pass one %s per device of the executor (%zu)",
                                              verb, d, host ? "NULL" : "0", host ? "host buffer" : "CUdeviceptr",
                                              mesh->devices_count));
    if (count > SIZE_MAX / element_bytes[dtype])
        return refuse(outcome, uform_fail(uform_status_invalid_argument_k, "%s: %zu elements overflow a size_t of bytes",
                                          verb, count));
    if (mesh->fork_generation != uform_fork_generation())
        return refuse(outcome, uform_fail(uform_status_forked_k,
                                          "%s: the mesh was created before a fork(); only uform_mesh_free may be called "
                                          "on it",
                                          verb));
    if (atomic_load(&mesh->aborted))
        return refuse(outcome, uform_fail(uform_status_peer_lost_k,
                                          "%s: the mesh's communicators were aborted after: %s; free it and bootstrap "
                                          "again",
                                          verb, mesh->abort_message));
    // Device callbacks run inside `uform_executor_call`, deferred calls too: the context lives here.
    reduce_context_t reduce = {.mesh = mesh, .buffers = host ? NULL : buffers, .host_buffers = host ? host_buffers : NULL,
                               .count = count, .bytes = count * element_bytes[dtype], .dtype = nccl_types[dtype]};
    uform_call_t call = {.residency = uform_residency_vram_k, .device = mesh_reduce_device, .context = &reduce};
    if (host && count && mesh->comms) call.scratch_bytes = reduce.bytes;
    return uform_executor_call(mesh->executor, &call, outcome);
}

uform_status_t uform_mesh_all_reduce(uform_mesh_t mesh, uint64_t const *buffers, size_t count, uform_dtype_t dtype,
                                     uform_outcome_t *outcome) {
    return mesh_all_reduce(mesh, buffers, NULL, count, dtype, outcome, "uform_mesh_all_reduce");
}

uform_status_t uform_mesh_all_reduce_host(uform_mesh_t mesh, void *const *buffers, size_t count, uform_dtype_t dtype,
                                          uform_outcome_t *outcome) {
    if (count && !buffers)
        return refuse(outcome, uform_fail(uform_status_invalid_argument_k,
                                          "uform_mesh_all_reduce_host: buffers is NULL for %zu elements", count));
    return mesh_all_reduce(mesh, NULL, buffers, count, dtype, outcome, "uform_mesh_all_reduce_host");
}

/* ---- Seams for tests and benchmarks ---- */

void uform_mesh_timings(uform_mesh_t mesh, uform_mesh_timings_t *timings) {
    if (timings) *timings = mesh ? mesh->timings : (uform_mesh_timings_t){0};
}

size_t uform_mesh_comms(uform_mesh_t mesh, uform_nccl_comm_t const **comms) {
    if (comms) *comms = mesh ? mesh->comms : NULL;
    return mesh && mesh->comms ? mesh->devices_count : 0;
}
