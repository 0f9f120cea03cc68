/**
 *  @file   vram_checks.c
 *  @brief  The VRAM executor's argument checks, in every build (vram.c says the order).
 */
#define _GNU_SOURCE
#include "vram_private.h"

uform_status_t uform_vram_devices_check(uform_vram_options_t const *vram, char const *verb, char const *field) {
    if (!vram) return uform_status_ok_k;
    if (vram->devices_count && !vram->devices)
        return uform_fail(uform_status_invalid_argument_k, "%s: %sdevices is NULL with a count of %zu", verb, field,
                          vram->devices_count);
    for (size_t index = 0; vram->devices && index < vram->devices_count; ++index) {
        if (vram->devices[index] < 0)
            return uform_fail(uform_status_invalid_argument_k,
                              "%s: %sdevices[%zu] is %d; ordinals are positions in uform_gpu_devices, from 0", verb,
                              field, index, (int)vram->devices[index]);
        for (size_t earlier = 0; earlier < index; ++earlier)
            if (vram->devices[earlier] == vram->devices[index])
                return uform_fail(uform_status_invalid_argument_k,
                                  "%s: ordinal %d is repeated, at %sdevices[%zu] and [%zu]; name each device once", verb,
                                  (int)vram->devices[index], field, earlier, index);
    }
    return uform_status_ok_k;
}

uform_status_t vram_check_arguments(uform_vram_options_t const *vram, uform_ram_options_t const *ram,
                                   void *const *streams, size_t deferred_limit, uform_executor_t *executor) {
    if (!executor) return uform_fail(uform_status_invalid_argument_k, "uform_executor_for_vram: executor is NULL");
    uform_status_t status = uform_vram_devices_check(vram, "uform_executor_for_vram", "vram->");
    if (status != uform_status_ok_k) return status;
    if (vram) {
        if ((unsigned)vram->gpu_class > uform_gpu_class_apple_metal10_k)
            return uform_fail(uform_status_invalid_argument_k,
                              "uform_executor_for_vram: vram->gpu_class %d is not a uform_gpu_class_t (0 to %d)",
                              (int)vram->gpu_class, (int)uform_gpu_class_apple_metal10_k);
    }
    if (streams)
        return uform_fail(uform_status_unsupported_k,
                          "uform_executor_for_vram: borrowed streams are not wired yet; pass streams as NULL and "
                          "the executor opens its own");
    status = uform_ring_check_limit(deferred_limit, "uform_executor_for_vram");
    if (status != uform_status_ok_k) return status;
    /* The decoders' RAM options too, before the driver: the same answer with and without GPUs. */
    uform_placement_t decoders;
    status = uform_placement_resolve(ram, &decoders);
    if (status == uform_status_ok_k) uform_placement_free(&decoders);
    return status;
}

uform_status_t vram_check_launch(uform_device_slot_t const *slot, uform_kernel_t kernel) {
    if (!slot) return uform_fail(uform_status_invalid_argument_k, "uform_device_launch: slot is NULL");
    if ((unsigned)kernel > uform_kernel_add_f32_k)
        return uform_fail(uform_status_invalid_argument_k,
                          "uform_device_launch: kernel %d is not a uform_kernel_t (0 to %d)", (int)kernel,
                          (int)uform_kernel_add_f32_k);
    return uform_status_ok_k;
}
