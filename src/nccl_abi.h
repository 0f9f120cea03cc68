/**
 *  @file   nccl_abi.h
 *  @brief  The one restatement of the part of NCCL's C ABI that crosses `dlopen`: opaque
 *          communicators, the 128-byte unique ID, result codes, data types, the reduction operator,
 *          the 2.14 prefix of `ncclConfig_t`, and the signature of every function the engine calls.
 *
 *  Shared by the loader (nccl.c, nccl_loader.h), the mesh (mesh.c) and the fake NCCL of the tests
 *  (test/gpu/fake_nccl.c, which defines `struct uform_nccl_comm_s` and implements the signatures
 *  below), so none of them restates it again. Self-contained: it includes no engine header.
 *
 *  The values are frozen for the lifetime of `libnccl.so.2` (NCCL reads a config up to the `size` it
 *  is given and defaults every later field, by the `version` it is given). The engine never includes
 *  the toolkit's <nccl.h> for them, so it builds where the toolkit ships none; where it does ship one,
 *  nccl_abi_check.c checks every value and layout here against it with `_Static_assert`s.
 */
#ifndef UFORM_NCCL_ABI_H
#define UFORM_NCCL_ABI_H

#include <limits.h> // `INT_MIN`
#include <stddef.h> // `size_t`

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

typedef enum uform_nccl_op_t {
    uform_nccl_sum_k = 0,
} uform_nccl_op_t; /**< `ncclRedOp_t`, the operator the engine uses. */

/** @brief The prefix of `ncclConfig_t` that NCCL 2.14 introduced with non-blocking communicators. */
typedef struct uform_nccl_config_t {
    size_t size;          /**< sizeof this struct: NCCL reads no further. */
    unsigned int magic;   /**< 0xcafebeef. */
    unsigned int version; /**< NCCL_VERSION(2, 14, 0): later fields take NCCL's defaults. */
    int blocking;         /**< 0: non-blocking initialisation and calls, polled; 1: blocking. */
    int cga_cluster_size, min_ctas, max_ctas; /**< INT_MIN: NCCL's defaults. */
    char const *net_name;                     /**< NULL: NCCL's default. */
} uform_nccl_config_t;

#define UFORM_NCCL_CONFIG_MAGIC 0xcafebeefu
#define UFORM_NCCL_CONFIG_VERSION 21400u

#define UFORM_NCCL_CONFIG_NONBLOCKING                                                              \
    {sizeof(uform_nccl_config_t), UFORM_NCCL_CONFIG_MAGIC, UFORM_NCCL_CONFIG_VERSION, 0, INT_MIN, INT_MIN, INT_MIN, NULL}

/** The configuration of the communicators collectives run on: blocking, so that `ncclGroupEnd`
 *  returns once the work is enqueued instead of reporting `ncclInProgress` to be polled. */
#define UFORM_NCCL_CONFIG_BLOCKING                                                                 \
    {sizeof(uform_nccl_config_t), UFORM_NCCL_CONFIG_MAGIC, UFORM_NCCL_CONFIG_VERSION, 1, INT_MIN, INT_MIN, INT_MIN, NULL}

/* The signatures of the functions the engine resolves, as function types: the loader's table holds
 * pointers to them and the fake NCCL declares its definitions with them. */
typedef uform_nccl_result_t uform_nccl_get_version_fn(int *version);
typedef uform_nccl_result_t uform_nccl_get_unique_id_fn(uform_nccl_unique_id_t *id);
typedef uform_nccl_result_t uform_nccl_comm_init_rank_config_fn(uform_nccl_comm_t *comm, int ranks,
                                                                 uform_nccl_unique_id_t id, int rank,
                                                                 uform_nccl_config_t *config);
typedef uform_nccl_result_t uform_nccl_comm_get_async_error_fn(uform_nccl_comm_t comm, uform_nccl_result_t *error);
typedef uform_nccl_result_t uform_nccl_comm_fn(uform_nccl_comm_t comm); /**< Abort, Destroy, Finalize. */
typedef uform_nccl_result_t uform_nccl_group_fn(void);                  /**< GroupStart, GroupEnd. */
typedef uform_nccl_result_t uform_nccl_comm_split_fn(uform_nccl_comm_t comm, int color, int key,
                                                      uform_nccl_comm_t *child, uform_nccl_config_t *config);
typedef uform_nccl_result_t uform_nccl_all_reduce_fn(void const *send, void *receive, size_t count,
                                                      uform_nccl_dtype_t dtype, uform_nccl_op_t op,
                                                      uform_nccl_comm_t comm, void *stream);
typedef char const *uform_nccl_get_error_string_fn(uform_nccl_result_t result);
typedef char const *uform_nccl_get_last_error_fn(uform_nccl_comm_t comm);

#endif // UFORM_NCCL_ABI_H
