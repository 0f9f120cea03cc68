/**
 *  @file   mesh_comms.c
 *  @brief  A mesh's NCCL communicators: statuses, aborting them, the guard thread that bounds a
 *          blocking NCCL call, and settling non-blocking ones (mesh.c describes the design).
 */
#include "mesh_private.h"

#include <stdio.h>    // `snprintf`
#include <string.h>   // `strerror`
#include <time.h>     // `clock_gettime`

/* ---- Helpers ---- */

uform_status_t mesh_nccl_status(uform_nccl_result_t result) {
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
void mesh_abort(uform_mesh_t mesh, char const *why) {
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
uform_status_t mesh_guard_start(uform_mesh_t mesh) {
    int error = pthread_create(&mesh->guard.thread, NULL, mesh_guard, mesh);
    if (error != 0)
        return uform_fail(uform_status_system_error_k, "starting the mesh's guard thread failed (%s)", strerror(error));
    mesh->guard.running = true;
    return uform_status_ok_k;
}

void mesh_guard_stop(uform_mesh_t mesh) {
    if (!mesh->guard.running) return;
    pthread_mutex_lock(&mesh->guard.lock);
    mesh->guard.stop = true;
    pthread_cond_signal(&mesh->guard.wake);
    pthread_mutex_unlock(&mesh->guard.lock);
    pthread_join(mesh->guard.thread, NULL);
    mesh->guard.running = false;
}

/** Marks the start of a call that may block (the mesh's mutex held). */
void mesh_guard_begin(uform_mesh_t mesh, char const *stage) {
    if (!mesh->guard.running) return;
    pthread_mutex_lock(&mesh->guard.lock);
    mesh->guard.active = true;
    mesh->guard.started = uform_now_seconds();
    mesh->guard.stage = stage;
    pthread_mutex_unlock(&mesh->guard.lock);
}

/** Ends a guarded call (the mesh's mutex held). When the guard aborted the communicators meanwhile,
 *  forgets them, copies why into `message` and returns true: the caller aborts the rest. */
bool mesh_guard_end(uform_mesh_t mesh, char *message, size_t capacity) {
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
static uform_status_t mesh_settle_look(void *context, bool *progress) {
    (void)progress;
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
            return uform_nccl_fail(mesh_nccl_status(error), error, settle->comms[d], "%s: rank %zu", settle->stage,
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
uform_status_t mesh_settle(uform_mesh_t mesh, uform_nccl_comm_t const *comms, double seconds, char const *stage,
                                  uform_rendezvous_t *rendezvous) {
    static uform_poll_backoff_t const backoff = {.spin_seconds = 200e-6, .nap_min = 20e-6, .nap_max = 2e-3, .growth = 2, .pauses = 32};
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

