/**
 *  @file   nccl.h
 *  @brief  NCCL as the engine loads it at run time: `libnccl.so.2` (or the path in the environment
 *          variable `UFORM_NCCL_LIBRARY`, such as a Python wheel's copy) opened with `dlopen` on first
 *          use, one table of the functions meshes call. Never linked, never needed at build time.
 *
 *  The types below restate the part of NCCL's C ABI that the engine passes across `dlopen`:
 *  opaque communicators, the 128-byte unique ID, result codes, data types, the sum operator and
 *  the 2.14 prefix of `ncclConfig_t`. They are frozen for the lifetime of `libnccl.so.2` (NCCL
 *  reads a config up to the `size` it is given and defaults every later field, by the `version`
 *  it is given). They are restated rather than taken from the toolkit's <nccl.h> because this
 *  header's own name shadows that one on the engine's include path, and so that the engine builds
 *  where the toolkit ships no NCCL header.
 *
 *  Multicast: before NCCL is loaded, `NCCL_NVLS_ENABLE` is forced to "0" in this process's
 *  environment unless the user opted in with `UFORM_ALLOW_MULTICAST=1`; even then the engine itself
 *  creates no multicast object, and only NCCL may, as the user's own `NCCL_NVLS_ENABLE` allows.
 *
 *  In a build without CUDA (`UFORM_WITH_CUDA` 0) `uform_nccl` always reports UNSUPPORTED.
 */
#ifndef UFORM_NCCL_H
#define UFORM_NCCL_H

#include "internal.h"

#include <limits.h> // `INT_MIN`

typedef struct uform_nccl_comm_s *uform_nccl_comm_t; /**< `ncclComm_t`. */

#define UFORM_NCCL_UNIQUE_ID_BYTES 128
typedef struct uform_nccl_unique_id_t {
    char internal[UFORM_NCCL_UNIQUE_ID_BYTES];
} uform_nccl_unique_id_t; /**< `ncclUniqueId`. */

typedef enum uform_nccl_result_t {
    uform_nccl_success_k = 0,
    uform_nccl_unhandled_cuda_error_k = 1,
    uform_nccl_system_error_k = 2,
    uform_nccl_internal_error_k = 3,
    uform_nccl_invalid_argument_k = 4,
    uform_nccl_invalid_usage_k = 5,
    uform_nccl_remote_error_k = 6,
    uform_nccl_in_progress_k = 7,
} uform_nccl_result_t; /**< `ncclResult_t`. */

typedef enum uform_nccl_dtype_t {
    uform_nccl_int32_k = 2,
    uform_nccl_float16_k = 6,
    uform_nccl_float32_k = 7,
    uform_nccl_float64_k = 8,
    uform_nccl_bfloat16_k = 9,
} uform_nccl_dtype_t; /**< `ncclDataType_t`, the values the engine uses. */

#define UFORM_NCCL_SUM 0 /**< `ncclSum`. */

/** @brief The prefix of `ncclConfig_t` that NCCL 2.14 introduced with non-blocking communicators. */
typedef struct uform_nccl_config_t {
    size_t size;          /**< sizeof this struct: NCCL reads no further. */
    unsigned int magic;   /**< 0xcafebeef. */
    unsigned int version; /**< NCCL_VERSION(2, 14, 0): later fields take NCCL's defaults. */
    int blocking;         /**< 0: non-blocking initialisation and calls, polled; 1: blocking. */
    int cga_cluster_size, min_ctas, max_ctas; /**< INT_MIN: NCCL's defaults. */
    char const *net_name;                     /**< NULL: NCCL's default. */
} uform_nccl_config_t;

#define UFORM_NCCL_CONFIG_NONBLOCKING                                                              \
    {sizeof(uform_nccl_config_t), 0xcafebeefu, 21400u, 0, INT_MIN, INT_MIN, INT_MIN, NULL}

/** The configuration of the communicators collectives run on: blocking, so that `ncclGroupEnd`
 *  returns once the work is enqueued instead of reporting `ncclInProgress` to be polled. */
#define UFORM_NCCL_CONFIG_BLOCKING                                                                 \
    {sizeof(uform_nccl_config_t), 0xcafebeefu, 21400u, 1, INT_MIN, INT_MIN, INT_MIN, NULL}

/** @brief The functions meshes call, resolved from `libnccl.so.2`. */
typedef struct uform_nccl_t {
    uform_nccl_result_t (*GetVersion)(int *version);
    uform_nccl_result_t (*GetUniqueId)(uform_nccl_unique_id_t *id);
    uform_nccl_result_t (*CommInitRankConfig)(uform_nccl_comm_t *comm, int ranks, uform_nccl_unique_id_t id,
                                              int rank, uform_nccl_config_t *config);
    uform_nccl_result_t (*CommGetAsyncError)(uform_nccl_comm_t comm, uform_nccl_result_t *error);
    uform_nccl_result_t (*CommAbort)(uform_nccl_comm_t comm);
    uform_nccl_result_t (*CommDestroy)(uform_nccl_comm_t comm);
    uform_nccl_result_t (*CommFinalize)(uform_nccl_comm_t comm);
    uform_nccl_result_t (*GroupStart)(void);
    uform_nccl_result_t (*GroupEnd)(void);
    /** `ncclCommSplit` (NCCL 2.18 and later; NULL before): the blocking child of each non-blocking
     *  communicator, so initialisation stays bounded by the timeout and collectives do not poll. */
    uform_nccl_result_t (*CommSplit)(uform_nccl_comm_t comm, int color, int key, uform_nccl_comm_t *child,
                                     uform_nccl_config_t *config);
    uform_nccl_result_t (*AllReduce)(void const *send, void *receive, size_t count, int dtype, int op,
                                     uform_nccl_comm_t comm, void *stream);
    char const *(*GetErrorString)(uform_nccl_result_t result);
    char const *(*GetLastError)(uform_nccl_comm_t comm); /**< NULL before NCCL 2.13. */
    int version;                                          /**< `ncclGetVersion`: 22809 for 2.28.9. */
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

#endif // UFORM_NCCL_H
