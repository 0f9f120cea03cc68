/**
 *  @file   mesh_shape.h
 *  @brief  The mesh's shape (`uform_mesh_description_t`) derived from the processes' facts: the
 *          rendezvous only exchanges those facts (rendezvous.h), the arithmetic is the mesh's.
 */
#ifndef UFORM_MESH_SHAPE_H
#define UFORM_MESH_SHAPE_H

#include "rendezvous.h"

/**
 *  @brief Derives the description from every process's facts (index order) for process `index`: its
 *  GPUs, the GPUs of lower indices (`first_gpu_index`), the run's GPUs, the multimem span (process
 *  0's request, else the run's GPUs on one host, which must be equal on every host), the tier
 *  (switch-reduced only when every process supports and allows multicast) and the class (process
 *  0's, the one every process dispatches as). Deterministic over the facts, so every process fails
 *  or succeeds alike. CONFIG_MISMATCH when hosts hold different numbers of the run's GPUs and no
 *  span was given (`rendezvous`, may be NULL, names the hosts); OUT_OF_MEMORY. `*description` is
 *  zeroed on failure.
 */
uform_status_t uform_mesh_shape(uform_rendezvous_peer_t const *peers, size_t count, size_t index,
                                uform_rendezvous_t const *rendezvous, uform_mesh_description_t *description);

/** @brief The shape of a joined run: `uform_mesh_shape` over `uform_rendezvous_peers`. */
uform_status_t uform_mesh_shape_of_run(uform_rendezvous_t const *rendezvous, uform_mesh_description_t *description);

/** @brief The shape of a run of this process alone: `uform_mesh_shape` over its own facts. */
void uform_mesh_shape_alone(uform_rendezvous_facts_t const *local, uform_mesh_description_t *description);

#endif // UFORM_MESH_SHAPE_H
