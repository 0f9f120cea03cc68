/**
 *  @file   vram_stub.c
 *  @brief  The VRAM executor's public functions in a build without CUDA: the arguments are checked as in a CUDA build, then UNSUPPORTED. CMake compiles this file instead of vram.c and its siblings.
 */
#define _GNU_SOURCE
#include "vram_private.h"

uform_status_t uform_executor_for_vram(uform_vram_options_t const *vram, uform_ram_options_t const *ram,
                                       void *const *streams, size_t scratch_limit, size_t deferred_limit,
                                       uform_executor_t *executor) {
    (void)scratch_limit;
    uform_status_t status = vram_check_arguments(vram, ram, streams, deferred_limit, executor);
    if (status != uform_status_ok_k) return status;
    return uform_fail(uform_status_unsupported_k, "uform_executor_for_vram: %s", UFORM_NO_GPU_REASON);
}

uform_status_t uform_device_launch(uform_device_slot_t const *slot, uform_kernel_t kernel, uint64_t buffer,
                                   uint64_t count, double value) {
    (void)buffer, (void)count, (void)value;
    uform_status_t status = vram_check_launch(slot, kernel);
    if (status != uform_status_ok_k) return status;
    return uform_fail(uform_status_unsupported_k, "uform_device_launch: %s", UFORM_NO_GPU_REASON);
}

uform_status_t uform_executor_scratch_bytes(uform_executor_t executor, size_t device_index, size_t *bytes) {
    (void)device_index;
    if (!bytes) return uform_fail(uform_status_invalid_argument_k, "uform_executor_scratch_bytes: bytes is NULL");
    uform_status_t const forked = executor ? uform_check_forked(executor, "uform_executor_scratch_bytes") : uform_status_ok_k;
    if (forked != uform_status_ok_k) return forked;
    return uform_fail(uform_status_unsupported_k,
                      "uform_executor_scratch_bytes: the %s executor holds no device memory; only VRAM executors do",
                      executor ? "RAM or pool" : "NULL");
}

uform_status_t uform_executor_scratch_release(uform_executor_t executor) {
    uform_status_t const forked = executor ? uform_check_forked(executor, "uform_executor_scratch_release") : uform_status_ok_k;
    if (forked != uform_status_ok_k) return forked;
    return uform_fail(uform_status_unsupported_k,
                      "uform_executor_scratch_release: the %s executor holds no device memory; only VRAM executors do",
                      executor ? "RAM or pool" : "NULL");
}

size_t uform_vram_members(uform_executor_t executor, uform_vram_member_t const **members) {
    (void)executor;
    if (members) *members = NULL;
    return 0;
}

void uform_vram_set_watchdog(uform_executor_t executor, uform_vram_watchdog_t watchdog, void *context) {
    (void)executor, (void)watchdog, (void)context;
}

uform_status_t uform_vram_check_fault(uform_executor_t executor, char const *verb) {
    (void)executor, (void)verb;
    return uform_status_ok_k;
}
