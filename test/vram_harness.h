/**
 *  @file   vram_harness.h
 *  @brief  What the VRAM executor tests share (test_vram.c, test_vram_calls.c): the driver table,
 *          device-call plans and their callback, executors on given ordinals, device buffers.
 */
#ifndef UFORM_TEST_VRAM_HARNESS_H
#define UFORM_TEST_VRAM_HARNESS_H

#define _GNU_SOURCE
#include "check.h"
#include "cuda_driver.h"

#include <pthread.h>  // `pthread_create`
#include <signal.h>   // `kill`
#include <stdatomic.h>
#include <sys/wait.h> // `waitpid`
#include <unistd.h>   // `fork`
#if UFORM_WITH_CUDA

static uform_cuda_t const *cuda = NULL;
static size_t gpus = 0;

/** Loop counts, a tenth under compute-sanitizer, which makes every launch far slower. */
static inline size_t scaled(size_t count) { return getenv("UFORM_TEST_UNDER_SANITIZER") ? count / 10 : count; }


#define CHECK_CU(expression)                                                                       \
    do {                                                                                           \
        CUresult check_result_ = (expression);                                                     \
        if (check_result_ != CUDA_SUCCESS) {                                                       \
            fprintf(stderr, "%s:%d: %s returned CUresult %d\n", __FILE__, __LINE__, #expression,   \
                    (int)check_result_);                                                           \
            ++check_failures;                                                                      \
        }                                                                                          \
    } while (0)

/** What a device callback should launch, and what it saw, per device index. */
typedef struct plan_t {
    uform_kernel_t kernel;
    uint64_t buffers[8]; /**< Per device index; 0 launches on the slot's scratch. */
    uint64_t count;      /**< 0 takes the slot's scratch_bytes / 4. */
    double value, per_device;
    uform_status_t fail_with; /**< Returned instead of launching, when not OK. */
    uform_executor_t reenter; /**< Calls and drains this executor from inside, when set. */
    uform_status_t reentered_call, reentered_drain;
    // Observed.
    size_t visits;
    size_t indices[8];
    uint64_t scratch[8];
    int32_t ordinals[8];
    uform_gpu_class_t classes[8];
    void *streams[8];
    void *contexts[8];
    bool context_current[8];
} plan_t;

static inline uform_status_t plan_callback(void *context, uform_device_slot_t const *slot) {
    plan_t *plan = context;
    size_t const index = slot->device_index;
    if (plan->visits < 8) plan->indices[plan->visits] = index;
    ++plan->visits;
    if (index < 8) {
        plan->scratch[index] = slot->scratch;
        plan->ordinals[index] = slot->ordinal;
        plan->classes[index] = slot->gpu_class;
        plan->streams[index] = slot->stream;
        plan->contexts[index] = slot->cu_context;
        CUcontext current = NULL;
        cuda->CtxGetCurrent(&current);
        plan->context_current[index] = current == (CUcontext)slot->cu_context;
    }
    if (plan->reenter) {
        uform_call_t const call = {.device = plan_callback, .context = plan};
        plan->reentered_call = uform_executor_call(plan->reenter, &call, NULL);
        plan->reentered_drain = uform_executor_drain(plan->reenter, uform_mood_parked_k);
    }
    if (plan->fail_with != uform_status_ok_k) return plan->fail_with;
    uint64_t const buffer = index < 8 && plan->buffers[index] ? plan->buffers[index] : slot->scratch;
    uint64_t const count = plan->count ? plan->count : slot->scratch_bytes / sizeof(float);
    return uform_device_launch(slot, plan->kernel, buffer, count, plan->value + plan->per_device * (double)index);
}

static inline uform_call_t device_call(plan_t *plan, size_t scratch_bytes) {
    return (uform_call_t) {.residency = uform_residency_vram_k, .device = plan_callback, .context = plan,
                           .scratch_bytes = scratch_bytes};
}

static inline uform_executor_t open_on(int32_t const *ordinals, size_t count, size_t scratch_limit, size_t deferred_limit) {
    uform_vram_options_t vram = {.devices = ordinals, .devices_count = count};
    uform_executor_t executor = NULL;
    CHECK_STATUS(uform_executor_for_vram(&vram, NULL, NULL, scratch_limit, deferred_limit, &executor), uform_status_ok_k);
    return executor;
}

static inline CUcontext context_of(uform_executor_t executor, size_t index) {
    uform_vram_member_t const *members = NULL;
    size_t const count = uform_vram_members(executor, &members);
    return index < count ? (CUcontext)members[index].cu_context : NULL;
}

static inline void copy_back(CUcontext context, float *host, uint64_t device, size_t count) {
    CUcontext saved = NULL;
    CHECK_CU(cuda->CtxGetCurrent(&saved));
    CHECK_CU(cuda->CtxSetCurrent(context));
    CHECK_CU(cuda->MemcpyDtoH(host, (CUdeviceptr)device, count * sizeof(float)));
    CHECK_CU(cuda->CtxSetCurrent(saved));
}

static inline uint64_t allocate_on(CUcontext context, size_t bytes) {
    CUcontext saved = NULL;
    CUdeviceptr pointer = 0;
    CHECK_CU(cuda->CtxGetCurrent(&saved));
    CHECK_CU(cuda->CtxSetCurrent(context));
    CHECK_CU(cuda->MemAlloc(&pointer, bytes));
    CHECK_CU(cuda->CtxSetCurrent(saved));
    return pointer;
}

static inline void free_on(CUcontext context, uint64_t pointer) {
    CUcontext saved = NULL;
    CHECK_CU(cuda->CtxGetCurrent(&saved));
    CHECK_CU(cuda->CtxSetCurrent(context));
    CHECK_CU(cuda->MemFree((CUdeviceptr)pointer));
    CHECK_CU(cuda->CtxSetCurrent(saved));
}

static inline size_t count_not_equal(float const *values, size_t count, float expected) {
    size_t wrong = 0;
    for (size_t index = 0; index < count; ++index) wrong += values[index] != expected;
    return wrong;
}

/** Blocking fill on the scratch, then read it back; returns the number of wrong floats. */
static inline size_t fill_and_check(uform_executor_t executor, float value, size_t floats) {
    plan_t plan = {.kernel = uform_kernel_fill_f32_k, .value = value};
    uform_call_t call = device_call(&plan, floats * sizeof(float));
    uform_status_t status = uform_executor_call(executor, &call, NULL);
    if (status != uform_status_ok_k) {
        fprintf(stderr, "fill_and_check: %s: %s\n", uform_status_name(status), uform_error_message());
        return floats;
    }
    float *host = calloc(floats, sizeof(float));
    copy_back(context_of(executor, 0), host, plan.scratch[0], floats);
    size_t wrong = count_not_equal(host, floats, value);
    free(host);
    return wrong;
}

/** The device checks' start: every GPU counted, the driver loaded, device 0's primary context
 *  retained (returned in `*anchor`), so that the executors of each test do not recreate it (which
 *  costs most under compute-sanitizer). Returns the GPUs, 0 when there are none (`count` says so). */
static size_t vram_devices_begin(CUcontext *anchor) {
    gpus = 0;
    CHECK_FATAL(uform_gpu_devices(NULL, 0, &gpus) == uform_status_ok_k);
    if (!gpus) return 0;
    CHECK_FATAL(uform_cuda(&cuda) == uform_status_ok_k);
    *anchor = NULL;
    CHECK_CU(cuda->DevicePrimaryCtxRetain(anchor, 0));
    return gpus;
}

static void vram_devices_end(CUcontext anchor) {
    if (anchor) CHECK_CU(cuda->DevicePrimaryCtxRelease(0));
}

#endif // UFORM_WITH_CUDA

#endif // UFORM_TEST_VRAM_HARNESS_H
