/**
 *  @file   mesh_private.h
 *  @brief  A mesh's representation, shared by the files that implement it (mesh.c describes the
 *          design): mesh.c (bootstrap, describe, free), mesh_comms.c (NCCL statuses, aborting, the
 *          guard thread, settling non-blocking communicators), mesh_reduce.c (the watchdog and the
 *          all-reduce), mesh_device.c (events and host staging; mesh_device_stub.c without CUDA) and
 *          mesh_shape.c (the description from every process's facts).
 */
#ifndef UFORM_MESH_PRIVATE_H
#define UFORM_MESH_PRIVATE_H

#include "cuda_driver.h"
#include "mesh_shape.h"
#include "nccl_loader.h"

#include <pthread.h>  // `pthread_mutex_t`
#include <stdatomic.h>

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

typedef struct reduce_context_t {
    uform_mesh_t mesh;
    uint64_t const *buffers;     /**< Device buffers, or NULL when `host_buffers` are given. */
    void *const *host_buffers;   /**< Host buffers staged through each device's scratch. */
    size_t count;
    size_t bytes;                /**< `count` elements in bytes. */
    uform_nccl_dtype_t dtype;
} reduce_context_t;

/* ---- mesh_comms.c ---- */

/** The status an NCCL result maps to: PEER_LOST for a remote error, INVALID_ARGUMENT for misuse,
 *  else SYSTEM_ERROR. */
uform_status_t mesh_nccl_status(uform_nccl_result_t result);
/** Aborts every communicator (the mutex held) and remembers why, once; mesh_comms.c says in which order. */
void mesh_abort(uform_mesh_t mesh, char const *why);
/** Starts the guard thread (with blocking communicators only). */
uform_status_t mesh_guard_start(uform_mesh_t mesh);
void mesh_guard_stop(uform_mesh_t mesh);
/** Marks the start of a call that may block (the mesh's mutex held). */
void mesh_guard_begin(uform_mesh_t mesh, char const *stage);
/** Ends a guarded call (the mesh's mutex held); true when the guard aborted the communicators meanwhile,
 *  with why in `message`. */
bool mesh_guard_end(uform_mesh_t mesh, char *message, size_t capacity);
/** Polls `comms` until none is in progress: OK, the first error, or TIMEOUT after `seconds`;
 *  `rendezvous` (may be NULL) is watched every 20 ms. */
uform_status_t mesh_settle(uform_mesh_t mesh, uform_nccl_comm_t const *comms, double seconds, char const *stage,
                           uform_rendezvous_t *rendezvous);

/* ---- mesh_reduce.c ---- */

/** The executor's watchdog for the mesh's lifetime: aborts on an asynchronous NCCL error or a
 *  collective pending past the timeout (PEER_LOST). */
uform_status_t mesh_watchdog(void *context);

/* ---- mesh_device.c (mesh_device_stub.c without CUDA) ---- */

/** Creates device `d`'s event (its context current); leaves it NULL on failure. */
void mesh_event_create(uform_mesh_t mesh, size_t d);
/** Whether the collective recorded last is still pending on any device. */
bool mesh_events_pending(uform_mesh_t mesh);
/** Records one event per device after the collective just enqueued (the mutex held). */
void mesh_events_record(uform_mesh_t mesh);
/** Destroys the events, each in its device's context. */
void mesh_events_destroy(uform_mesh_t mesh);
/** Copies device `slot`'s host buffer into its scratch on its stream (its context current). */
uform_status_t mesh_stage_in(reduce_context_t const *reduce, uform_device_slot_t const *slot);
/** Copies each host buffer back from its device's scratch, on that device's stream, after the
 *  collective was enqueued there. */
uform_status_t mesh_stage_out(reduce_context_t *reduce);

#endif // UFORM_MESH_PRIVATE_H
