/**
 *  @file   nccl_loader.h
 *  @brief  NCCL as the engine loads it at run time: `libnccl.so.2` (or the path in the environment
 *          variable `UFORM_NCCL_LIBRARY`, such as a Python wheel's copy) opened with `dlopen` on first
 *          use, one table of the functions meshes call. Never linked, never needed at build time.
 *
 *  The ABI types and signatures it uses are restated once, in nccl_abi.h (shared with the tests'
 *  fake NCCL and checked against the toolkit's <nccl.h> by nccl_abi_check.c where it exists).
 *
 *  Multicast: before NCCL is loaded, `NCCL_NVLS_ENABLE` is forced to "0" in this process's
 *  environment unless the user opted in with `UFORM_ALLOW_MULTICAST=1`; even then the engine itself
 *  creates no multicast object, and only NCCL may, as the user's own `NCCL_NVLS_ENABLE` allows.
 *
 *  In a build without CUDA (`UFORM_WITH_CUDA` 0) `uform_nccl` always reports UNSUPPORTED.
 */
#ifndef UFORM_NCCL_LOADER_H
#define UFORM_NCCL_LOADER_H

#include "internal.h"

#include "nccl_abi.h"

/** @brief The functions meshes call, resolved from `libnccl.so.2`. */
typedef struct uform_nccl_t {
    uform_nccl_get_version_fn *GetVersion;
    uform_nccl_get_unique_id_fn *GetUniqueId;
    uform_nccl_comm_init_rank_config_fn *CommInitRankConfig;
    uform_nccl_comm_get_async_error_fn *CommGetAsyncError;
    uform_nccl_comm_fn *CommAbort;
    uform_nccl_comm_fn *CommDestroy;
    uform_nccl_comm_fn *CommFinalize;
    uform_nccl_group_fn *GroupStart;
    uform_nccl_group_fn *GroupEnd;
    /** `ncclCommSplit` (NCCL 2.18 and later; NULL before): the blocking child of each non-blocking
     *  communicator, so initialisation stays bounded by the timeout and collectives do not poll. */
    uform_nccl_comm_split_fn *CommSplit;
    uform_nccl_all_reduce_fn *AllReduce;
    uform_nccl_get_error_string_fn *GetErrorString;
    uform_nccl_get_last_error_fn *GetLastError; /**< NULL before NCCL 2.13. */
    int version;                                /**< `ncclGetVersion`: 22809 for 2.28.9. */
} uform_nccl_t;

/** @brief The loaded NCCL. UNSUPPORTED, with the reason as the thread's message, in a build without
 *  CUDA, without `libnccl.so.2` on the loader's path (or at `UFORM_NCCL_LIBRARY`), before NCCL 2.14 (no non-blocking
 *  communicators), or with a library missing a function. Loaded once per process. */
uform_status_t uform_nccl(uform_nccl_t const **nccl);

/** @brief Records "<formatted context>: NCCL <name> (<NCCL's sentence>; <last error>)" as the
 *  thread's message and returns `status`. `comm` may be NULL. */
uform_status_t uform_nccl_fail(uform_status_t status, uform_nccl_result_t result, uform_nccl_comm_t comm,
                               char const *format, ...) UFORM_PRINTF(4, 5);

/* ---- Mesh seams (mesh.c), for tests and benchmarks ---- */

/** @brief Where a mesh's bootstrap spent its time. */
typedef struct uform_mesh_timings_t {
    double rendezvous_seconds; /**< Joining through the directory and describing (zero without peers). */
    double blob_seconds;       /**< Drawing NCCL's unique ID and passing it through the directory. */
    double nccl_seconds;       /**< NCCL's own initialisation of every rank of this process. */
} uform_mesh_timings_t;

void uform_mesh_timings(uform_mesh_t mesh, uform_mesh_timings_t *timings);

/** @brief The communicators the mesh's collectives run on, one per device of its executor (none for
 *  a run of one GPU): the blocking children split from the non-blocking ones NCCL was started
 *  with (with NCCL 2.18 and later; before it, those non-blocking ones). Benchmarks call NCCL directly
 *  on them. Valid until the mesh is freed or aborted. */
size_t uform_mesh_comms(uform_mesh_t mesh, uform_nccl_comm_t const **comms);

#endif // UFORM_NCCL_LOADER_H
