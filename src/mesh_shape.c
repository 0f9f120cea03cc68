/**
 *  @file   mesh_shape.c
 *  @brief  The mesh's shape from the processes' facts (mesh_shape.h): GPU counts and offsets, the
 *          multimem span, tier and class. Pure arithmetic over what the rendezvous exchanged.
 */
#include "mesh_shape.h"

#include <stdio.h>  // `snprintf`
#include <stdlib.h> // `calloc`
#include <string.h> // `memset`

uform_status_t uform_mesh_shape(uform_rendezvous_peer_t const *peers, size_t count, size_t index,
                                uform_rendezvous_t const *rendezvous, uform_mesh_description_t *description) {
    memset(description, 0, sizeof *description);
    if (!peers || index >= count)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_shape: process %zu of %zu", index, count);
    uform_mesh_description_t result = {0};
    result.host_domain_index = index;
    result.gpus_per_host_domain = peers[index].gpus;
    bool switch_reduced = true;
    for (size_t i = 0; i < count; ++i) {
        result.gpus_per_colocated_domain += peers[i].gpus;
        if (i < index) result.first_gpu_index += peers[i].gpus;
        switch_reduced = switch_reduced && peers[i].multicast_supported && peers[i].multicast_allowed;
    }
    if (peers[0].multimem_span) result.gpus_per_multimem_domain = peers[0].multimem_span;
    else {
        // Derived: the run's GPUs on each host, which must be the same number on every host.
        size_t *gpus = calloc(count, sizeof *gpus), *first = calloc(count, sizeof *first);
        if (!gpus || !first) {
            free(gpus), free(first);
            return uform_fail(uform_status_out_of_memory_k, "out of memory describing a mesh");
        }
        for (size_t i = count; i-- > 0;) gpus[peers[i].host] += peers[i].gpus, first[peers[i].host] = i;
        size_t const reference = gpus[peers[0].host];
        uform_status_t status = uform_status_ok_k;
        for (size_t i = 0; i < count && status == uform_status_ok_k; ++i) {
            size_t const h = peers[i].host;
            if (first[h] != i || gpus[h] == reference) continue;
            char a[160], b[160];
            uform_rendezvous_host_label(rendezvous, 0, a, sizeof a);
            uform_rendezvous_host_label(rendezvous, i, b, sizeof b);
            status = uform_fail(uform_status_config_mismatch_k,
                                "mesh hosts hold different numbers of the run's GPUs, so gpus_per_multimem_domain "
                                "cannot be derived: host %s (process 0) has %zu, host %s (process %zu) has %zu; set it "
                                "explicitly",
                                a, reference, b, i, gpus[h]);
        }
        free(gpus), free(first);
        if (status != uform_status_ok_k) return status;
        result.gpus_per_multimem_domain = reference;
    }
    result.multimem_tier = switch_reduced ? uform_multimem_tier_switch_reduced_k : uform_multimem_tier_peer_read_k;
    result.gpu_class = peers[0].gpu_class; // every process dispatches as it (agreement)
    *description = result;
    return uform_status_ok_k;
}

uform_status_t uform_mesh_shape_of_run(uform_rendezvous_t const *rendezvous, uform_mesh_description_t *description) {
    if (!description)
        return uform_fail(uform_status_invalid_argument_k, "uform_mesh_shape_of_run: description is NULL");
    memset(description, 0, sizeof *description);
    uform_rendezvous_peer_t *peers = NULL;
    size_t count = 0, index = 0;
    uform_status_t status = uform_rendezvous_peers(rendezvous, &peers, &count, &index);
    if (status == uform_status_ok_k) status = uform_mesh_shape(peers, count, index, rendezvous, description);
    free(peers);
    return status;
}

void uform_mesh_shape_alone(uform_rendezvous_facts_t const *local, uform_mesh_description_t *description) {
    uform_rendezvous_peer_t const self = {
        .gpus = local->gpus_count,
        .multimem_span = local->multimem_span,
        .multicast_supported = local->multicast_supported,
        .multicast_allowed = local->multicast_allowed,
        .gpu_class = local->gpu_class,
    };
    // One process, one host: nothing can disagree, so this cannot fail.
    if (uform_mesh_shape(&self, 1, 0, NULL, description) != uform_status_ok_k) uform_clear_error();
}
