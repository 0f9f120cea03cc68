/**
 *  @file   nccl_abi_check.c
 *  @brief  Checks nccl_abi.h, the engine's restatement of NCCL's ABI, against the toolkit's own
 *          <nccl.h> at compile time, in CUDA builds where that header is found (the engine never
 *          needs it otherwise). A value or layout that drifts fails the build. Emits no code.
 */
#include "nccl_abi.h"

#if UFORM_WITH_CUDA && defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#include <stddef.h> // `offsetof`

#define UFORM_SAME(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #ours " != " #theirs)

UFORM_SAME(sizeof(uform_nccl_comm_t), sizeof(ncclComm_t));
UFORM_SAME(UFORM_NCCL_UNIQUE_ID_BYTES, NCCL_UNIQUE_ID_BYTES);
UFORM_SAME(sizeof(uform_nccl_unique_id_t), sizeof(ncclUniqueId));

UFORM_SAME(uform_nccl_success_k, ncclSuccess);
UFORM_SAME(uform_nccl_unhandled_cuda_error_k, ncclUnhandledCudaError);
UFORM_SAME(uform_nccl_system_error_k, ncclSystemError);
UFORM_SAME(uform_nccl_internal_error_k, ncclInternalError);
UFORM_SAME(uform_nccl_invalid_argument_k, ncclInvalidArgument);
UFORM_SAME(uform_nccl_invalid_usage_k, ncclInvalidUsage);
UFORM_SAME(uform_nccl_remote_error_k, ncclRemoteError);
UFORM_SAME(uform_nccl_in_progress_k, ncclInProgress);

UFORM_SAME(uform_nccl_int32_k, ncclInt32);
UFORM_SAME(uform_nccl_float16_k, ncclFloat16);
UFORM_SAME(uform_nccl_float32_k, ncclFloat32);
UFORM_SAME(uform_nccl_float64_k, ncclFloat64);
UFORM_SAME(uform_nccl_bfloat16_k, ncclBfloat16);
UFORM_SAME(uform_nccl_sum_k, ncclSum);

// The 2.14 prefix of `ncclConfig_t`: every field at NCCL's offset, with NCCL's size.
#define UFORM_SAME_FIELD(ours, theirs)                                                                               \
    UFORM_SAME(offsetof(uform_nccl_config_t, ours), offsetof(ncclConfig_t, theirs));                                 \
    UFORM_SAME(sizeof(((uform_nccl_config_t *)0)->ours), sizeof(((ncclConfig_t *)0)->theirs))
UFORM_SAME_FIELD(size, size);
UFORM_SAME_FIELD(magic, magic);
UFORM_SAME_FIELD(version, version);
UFORM_SAME_FIELD(blocking, blocking);
UFORM_SAME_FIELD(cga_cluster_size, cgaClusterSize);
UFORM_SAME_FIELD(min_ctas, minCTAs);
UFORM_SAME_FIELD(max_ctas, maxCTAs);
UFORM_SAME_FIELD(net_name, netName);
_Static_assert(sizeof(uform_nccl_config_t) <= sizeof(ncclConfig_t), "the prefix outgrew ncclConfig_t");
UFORM_SAME(UFORM_NCCL_CONFIG_MAGIC, 0xcafebeef);
UFORM_SAME(UFORM_NCCL_CONFIG_VERSION, NCCL_VERSION(2, 14, 0));
UFORM_SAME(INT_MIN, NCCL_CONFIG_UNDEF_INT);
#endif
#endif

typedef int uform_nccl_abi_check_t; // keeps the translation unit non-empty where nothing is checked
