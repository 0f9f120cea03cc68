/**
 *  @file   vram_private.h
 *  @brief  What the VRAM executor's files share: its state, its constants, and the functions one
 *          file defines for another. vram.c says what the executor promises and how it is kept.
 *
 *  Files: vram.c (calls and scratch: the backend), vram_queue.c (completion: the ring of deferred
 *  outcomes, marks, faults, waits and the watchdog), vram_create.c (contexts, construction and
 *  release), vram_launch.c (the engine's test kernels), vram_checks.c (argument checks, every
 *  build) and vram_stub.c (the public functions of a build without CUDA).
 */
#ifndef UFORM_VRAM_PRIVATE_H
#define UFORM_VRAM_PRIVATE_H

#include "cuda_driver.h"

#include <pthread.h> // `pthread_mutex_t`

/** Argument checks shared by the CUDA build and the stub (vram_checks.c), the decoders' RAM options
 *  included: all before the driver is looked for. */
uform_status_t vram_check_arguments(uform_vram_options_t const *vram, uform_ram_options_t const *ram,
                                    void *const *streams, size_t deferred_limit, uform_executor_t *executor);
uform_status_t vram_check_launch(uform_device_slot_t const *slot, uform_kernel_t kernel);

#if UFORM_WITH_CUDA

/** Mark slots per executor: sets of one event per device recorded after a known sequence. */
#define UFORM_VRAM_MARKS 8
/** Seconds a wait spins before it starts sleeping, and the longest sleep between polls. */
#define UFORM_VRAM_SPIN_SECONDS 100e-6
#define UFORM_VRAM_NAP_MIN_SECONDS 20e-6
#define UFORM_VRAM_NAP_MAX_SECONDS 500e-6
#define UFORM_VRAM_WATCHDOG_SECONDS 1e-3

enum { vram_kernels_count_k = uform_kernel_add_f32_k + 1 };

typedef struct vram_executor_s vram_executor_t;

typedef struct vram_device_t {
    vram_executor_t *owner;
    size_t index;             /**< Position among the executor's devices. */
    uform_gpu_ordinal_t ordinal; /**< UForm ordinal. */
    CUdevice device;
    CUcontext context;        /**< Retained primary context; NULL until retained. */
    CUstream stream;
    CUdeviceptr scratch;      /**< Touched only by the gate holder (calls, scratch release) and free. */
    atomic_size_t scratch_capacity; /**< Read from any thread by `uform_executor_scratch_bytes`. */
    CUmodule module;          /**< Loaded by the first launch, under the gate. */
    CUfunction functions[vram_kernels_count_k];
    CUevent marks[UFORM_VRAM_MARKS];
    uform_gpu_class_t gpu_class;
} vram_device_t;

typedef enum vram_mark_state_t {
    vram_mark_free_k = 0,
    vram_mark_recording_k = 1, /**< Reserved by the submitter, events being recorded. */
    vram_mark_pending_k = 2,   /**< Recorded after `mark_sequences[k]`, not yet seen complete. */
} vram_mark_state_t;

typedef struct vram_entry_t {
    uform_outcome_t *outcome;
    uint64_t sequence;
    uform_vram_settle_t settle; /**< Runs as the call settles, before `outcome` reads finished; or NULL. */
    void *settle_context;
} vram_entry_t;

struct vram_executor_s {
    struct uform_executor_s base;
    uform_cuda_t const *cuda;
    uform_executor_t decoders;
    size_t devices_count;
    vram_device_t *devices;
    uform_vram_member_t *members;
    size_t scratch_limit;
    uint64_t mark_interval;

    // Owned by the gate holder.
    uint64_t submitted; /**< Sequence of the latest call taken. */
    uint64_t last_mark; /**< Sequence when a mark was last tried. */

    // Shared between the gate holder and pollers: written under `lock`, some read without it.
    pthread_mutex_t lock;
    _Atomic uint64_t enqueued;  /**< Every call up to this one has enqueued its work. */
    _Atomic uint64_t completed; /**< Every call up to this one has finished on the devices. */
    uform_ring_t ring; /**< `vram_entry_t`s: `tail` grows only under the gate (and `lock`), `head` under
                          `lock`, so a submitter may count it unlocked. */
    vram_mark_state_t mark_states[UFORM_VRAM_MARKS];
    uint64_t mark_sequences[UFORM_VRAM_MARKS];
    atomic_bool faulted;
    char fault[400]; /**< Written once, under `lock`, before `faulted` is set. */

    pthread_mutex_t watchdog_lock; /**< Held while the watchdog runs or is replaced. */
    uform_vram_watchdog_t watchdog;
    void *watchdog_context;
};

extern uform_backend_t const vram_backend;

/** The device whose callback this thread runs, so `uform_device_launch` finds its kernels. */
extern _Thread_local vram_device_t *vram_active_device;

/** The executor behind `executor`, or NULL for any other kind. */
static inline vram_executor_t *vram_cast(uform_executor_t executor) {
    return executor && executor->backend == &vram_backend ? (vram_executor_t *)executor : NULL;
}

/* vram_create.c */
void vram_release(vram_executor_t *self);

/* vram_queue.c: every function named `_locked` runs under `lock` */
void vram_finish_all_locked(vram_executor_t *self, uform_status_t status, char const *message);
void vram_poison(vram_executor_t *self, size_t device_index, CUresult result, char const *where);
uform_status_t vram_fault_status(vram_executor_t *self, char const *verb);
uform_status_t vram_fail(vram_executor_t *self, size_t device_index, CUresult result, char const *where,
                         char const *verb, uform_status_t otherwise, char const *format, ...) UFORM_PRINTF(7, 8);
uform_status_t vram_progress_locked(vram_executor_t *self, uint64_t target, uform_cuda_context_t *context);
uform_status_t vram_wait_in(vram_executor_t *self, uint64_t target, double timeout_seconds, uform_cuda_context_t *context,
                            char const *verb);
uform_status_t vram_wait(vram_executor_t *self, uint64_t target, double timeout_seconds, char const *verb);
size_t vram_reserve_mark(vram_executor_t *self, uint64_t sequence);
void vram_publish_locked(vram_executor_t *self, uint64_t sequence, size_t mark, bool mark_recorded);
uform_status_t vram_settle(uform_executor_t executor, char const *verb);
uform_status_t vram_poll(uform_executor_t executor, uform_outcome_t *outcome, double timeout_seconds);

/* vram.c */
uform_status_t vram_call(uform_executor_t executor, uform_call_t const *call, uform_outcome_t *outcome);
uform_status_t vram_apply_mood(uform_executor_t executor, uform_mood_t previous, uform_mood_t mood);
uform_status_t vram_thread_placement(uform_executor_t executor, size_t thread, int32_t *core, int32_t *node);
void vram_free(uform_executor_t executor);

#endif // UFORM_WITH_CUDA
#endif // UFORM_VRAM_PRIVATE_H
