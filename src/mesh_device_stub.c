/**
 *  @file   mesh_device_stub.c
 *  @brief  The mesh's device side in a build without CUDA (CMake compiles this file instead of
 *          mesh_device.c): no events, nothing to stage. Such a build has no VRAM executor, so no mesh
 *          ever reaches these.
 */
#include "mesh_private.h"

void mesh_event_create(uform_mesh_t mesh, size_t d) { (void)mesh, (void)d; }

bool mesh_events_pending(uform_mesh_t mesh) {
    (void)mesh;
    return false;
}

void mesh_events_destroy(uform_mesh_t mesh) { (void)mesh; }

void mesh_events_record(uform_mesh_t mesh) { (void)mesh; }

uform_status_t mesh_stage_in(reduce_context_t const *reduce, uform_device_slot_t const *slot) {
    (void)reduce, (void)slot;
    return uform_status_ok_k;
}

uform_status_t mesh_stage_out(reduce_context_t *reduce) {
    (void)reduce;
    return uform_status_ok_k;
}
