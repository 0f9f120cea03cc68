/**
 *  @file   mesh.c
 *  @brief  Meshes: bootstrap (rendezvous, then NCCL), describe and freeing here; the design of
 *          the whole below. The other files, by concern: mesh_comms.c (NCCL statuses, aborts, the
 *          guard thread, settling), mesh_reduce.c (the all-reduce as an executor call and the
 *          watchdog that turns a lost peer into PEER_LOST), mesh_device.c (events and host staging;
 *          mesh_device_stub.c without CUDA), mesh_shape.c (the description from the facts).
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
 *    touches the file system. The description follows from every process's facts (mesh_shape.c).
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
 *    mesh_guard in mesh_comms.c) aborts the communicators once it has run past the timeout, which releases it: the
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
 *  - One mesh per executor: the watchdog slot is the executor's, and the mesh binds itself to the
 *    executor through the executor's own attachment (executor.c `uform_executor_attach`): no list.
 *
 *  Free: waits for the executor's calls (the watchdog bounds that), removes the watchdog, finalises
 *  the blocking children in one group (the guard bounds it) and destroys them, then the
 *  non-blocking parents in another (polled), aborting instead whatever fails to finalise or
 *  outlasts the timeout; stops the guard thread, destroys the events. In a forked child only host
 *  memory is released.
 */
#include "mesh_private.h"

#include <stdio.h>    // `snprintf`
#include <stdlib.h>   // `calloc`, `getenv`
#include <string.h>   // `memset`, `strcmp`
#include <time.h>     // `CLOCK_MONOTONIC`

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

/** Keeps the first failure of a device's NCCL call (in progress is no failure), with its device. */
static void mesh_group_note(init_context_t *group, size_t d, uform_nccl_result_t result) {
    if (result != uform_nccl_success_k && result != uform_nccl_in_progress_k && group->result == uform_nccl_success_k)
        group->result = result, group->failed_device = d;
}

/** The NCCL group a device call spans: the first device opens it; the last closes it (its failure
 *  noted like any device's). */
static void mesh_group_enter(init_context_t *group, size_t d) {
    if (d == 0) group->mesh->nccl->GroupStart(), group->group_open = true;
}

static void mesh_group_leave(init_context_t *group, size_t d) {
    if (d + 1 < group->mesh->devices_count) return;
    uform_nccl_result_t end = group->mesh->nccl->GroupEnd();
    group->group_open = false;
    mesh_group_note(group, d, end);
}

/** Device call: one rank per device inside one group, with the device's context current. */
static uform_status_t mesh_init_device(void *context, uform_device_slot_t const *slot) {
    init_context_t *init = context;
    uform_mesh_t mesh = init->mesh;
    size_t d = slot->device_index;
    mesh_group_enter(init, d);
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_NONBLOCKING;
    mesh_group_note(init, d,
                    mesh->nccl->CommInitRankConfig(&mesh->parents[d], (int)mesh->description.gpus_per_colocated_domain,
                                                   init->id, (int)(mesh->description.first_gpu_index + d), &config));
    mesh_event_create(mesh, d);
    mesh_group_leave(init, d);
    return uform_status_ok_k; // failures are read from `init` once every device was visited
}

/** Device call: each rank's blocking child (color 0, the same rank), inside one group with the
 *  device's context current. The group is the non-blocking parents': it returns at once, and the
 *  parents report the split in progress until every child is up; only then does NCCL set `comms`. */
static uform_status_t mesh_split_device(void *context, uform_device_slot_t const *slot) {
    init_context_t *split = context;
    uform_mesh_t mesh = split->mesh;
    size_t d = slot->device_index;
    mesh_group_enter(split, d);
    uform_nccl_config_t config = UFORM_NCCL_CONFIG_BLOCKING;
    mesh_group_note(split, d,
                    mesh->nccl->CommSplit(mesh->parents[d], 0, (int)(mesh->description.first_gpu_index + d),
                                          &mesh->comms[d], &config));
    mesh_group_leave(split, d);
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
        return uform_nccl_fail(mesh_nccl_status(split.result), split.result, mesh->parents[split.failed_device],
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
            return uform_nccl_fail(mesh_nccl_status(result), result, NULL, "ncclGetUniqueId");
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
        status = uform_nccl_fail(mesh_nccl_status(init.result), init.result, mesh->parents[init.failed_device],
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
    if (!forked && mesh->events) mesh_events_destroy(mesh);
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
    /* An executor inherited across fork(), of any kind: FORKED, as every use of one is. */
    uform_status_t const forked = executor ? uform_check_forked(executor, "uform_mesh_bootstrap") : uform_status_ok_k;
    if (forked != uform_status_ok_k) return forked;
    uform_vram_member_t const *members = NULL;
    size_t devices = uform_vram_members(executor, &members);
    if (devices == 0) {
        uform_executor_description_t description = {0};
        if (executor && uform_executor_describe(executor, &description) != uform_status_ok_k)
            description.kind = uform_executor_kind_inline_k;
        char const *kinds[] = {"NULL (inline)", "RAM", "pool", "VRAM"};
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_mesh_bootstrap: the executor must be a VRAM executor (uform_executor_for_vram), "
                          "whose devices are this process's members; this one is a %s executor",
                          executor ? kinds[description.kind & 3] : kinds[0]);
    }

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
        if (status == uform_status_ok_k) status = uform_mesh_shape_of_run(rendezvous, &created->description);
    }
    else uform_mesh_shape_alone(&facts, &created->description);
    created->timings.rendezvous_seconds = uform_now_seconds() - start;
    /* A poisoned executor: DEVICE_FAULT, as every later use of it is, published to the peers like
     * any failure (NCCL's start on its streams would find it too, but a run of one GPU starts none). */
    if (status == uform_status_ok_k) status = uform_vram_check_fault(executor, "uform_mesh_bootstrap");
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
            uform_nccl_fail(mesh_nccl_status(result), result, NULL, "%s", blocking_stage);
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

