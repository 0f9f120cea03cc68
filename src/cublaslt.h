/**
 *  @file   cublaslt.h
 *  @brief  cuBLASLt as the engine loads it at run time: `libcublasLt.so.13`, else `.12`, opened with
 *          `dlopen` the first time a VRAM model asks, never linked. Internal only.
 *
 *  The few types and constants used here are declared below with the values of NVIDIA's
 *  `cublasLt.h` (a stable ABI since CUDA 11), so the build needs no cuBLAS headers. Without the
 *  library `uform_cublaslt` reports UNSUPPORTED with the reason, and VRAM models refuse to open;
 *  everything else keeps working.
 *
 *  Search order: `$UFORM_CUBLASLT` (a full path), `libcublasLt.so.13`, `libcublasLt.so.12`, then
 *  the same names under `$CUDA_HOME/lib64` and `/usr/local/cuda/lib64`.
 *
 *  @code{.c}
 *  uform_cublaslt_t const *lt;
 *  if (uform_cublaslt(&lt) != uform_status_ok_k) return uform_status_unsupported_k; // message set
 *  @endcode
 */
#ifndef UFORM_CUBLASLT_H
#define UFORM_CUBLASLT_H

#include "internal.h"

#include <stdint.h>

typedef int uform_lt_status_t;         /**< cublasStatus_t: 0 is success. */
typedef void *uform_lt_handle_t;       /**< cublasLtHandle_t */
typedef void *uform_lt_desc_t;         /**< cublasLtMatmulDesc_t */
typedef void *uform_lt_layout_t;       /**< cublasLtMatrixLayout_t */
typedef void *uform_lt_preference_t;   /**< cublasLtMatmulPreference_t */
typedef struct uform_lt_algo_t { uint64_t data[8]; } uform_lt_algo_t; /**< cublasLtMatmulAlgo_t */
typedef struct uform_lt_heuristic_t {  /**< cublasLtMatmulHeuristicResult_t */
    uform_lt_algo_t algo;
    size_t workspace_size;
    uform_lt_status_t state;
    float waves_count;
    int reserved[4];
} uform_lt_heuristic_t;

enum {
    uform_lt_r_32f_k = 0,             /**< CUDA_R_32F */
    uform_lt_r_16f_k = 2,             /**< CUDA_R_16F */
    uform_lt_r_16bf_k = 14,           /**< CUDA_R_16BF */
    uform_lt_compute_32f_k = 68,      /**< CUBLAS_COMPUTE_32F */
    uform_lt_op_n_k = 0,              /**< CUBLAS_OP_N */
    uform_lt_op_t_k = 1,              /**< CUBLAS_OP_T */
    uform_lt_desc_transa_k = 3,       /**< CUBLASLT_MATMUL_DESC_TRANSA */
    uform_lt_desc_transb_k = 4,       /**< CUBLASLT_MATMUL_DESC_TRANSB */
    uform_lt_desc_epilogue_k = 7,     /**< CUBLASLT_MATMUL_DESC_EPILOGUE */
    uform_lt_desc_bias_pointer_k = 8, /**< CUBLASLT_MATMUL_DESC_BIAS_POINTER */
    uform_lt_epilogue_default_k = 1,  /**< CUBLASLT_EPILOGUE_DEFAULT */
    uform_lt_epilogue_bias_k = 4,     /**< CUBLASLT_EPILOGUE_BIAS */
    uform_lt_epilogue_gelu_bias_k = 36, /**< CUBLASLT_EPILOGUE_GELU_BIAS (tanh approximation) */
    uform_lt_pref_max_workspace_k = 1,  /**< CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES */
};

/** @brief The functions used, resolved with `dlsym`. Immutable once loaded. */
typedef struct uform_cublaslt_t {
    uform_lt_status_t (*Create)(uform_lt_handle_t *handle);
    uform_lt_status_t (*Destroy)(uform_lt_handle_t handle);
    size_t (*GetVersion)(void);
    uform_lt_status_t (*MatmulDescCreate)(uform_lt_desc_t *desc, int compute_type, int scale_type);
    uform_lt_status_t (*MatmulDescDestroy)(uform_lt_desc_t desc);
    uform_lt_status_t (*MatmulDescSetAttribute)(uform_lt_desc_t desc, int attribute, void const *value, size_t size);
    uform_lt_status_t (*MatrixLayoutCreate)(uform_lt_layout_t *layout, int type, uint64_t rows, uint64_t cols, int64_t ld);
    uform_lt_status_t (*MatrixLayoutDestroy)(uform_lt_layout_t layout);
    uform_lt_status_t (*MatmulPreferenceCreate)(uform_lt_preference_t *preference);
    uform_lt_status_t (*MatmulPreferenceDestroy)(uform_lt_preference_t preference);
    uform_lt_status_t (*MatmulPreferenceSetAttribute)(uform_lt_preference_t preference, int attribute, void const *value,
                                                      size_t size);
    uform_lt_status_t (*MatmulAlgoGetHeuristic)(uform_lt_handle_t handle, uform_lt_desc_t desc, uform_lt_layout_t a,
                                                uform_lt_layout_t b, uform_lt_layout_t c, uform_lt_layout_t d,
                                                uform_lt_preference_t preference, int requested,
                                                uform_lt_heuristic_t *results, int *returned);
    uform_lt_status_t (*Matmul)(uform_lt_handle_t handle, uform_lt_desc_t desc, void const *alpha, void const *a,
                                uform_lt_layout_t a_layout, void const *b, uform_lt_layout_t b_layout, void const *beta,
                                void const *c, uform_lt_layout_t c_layout, void *d, uform_lt_layout_t d_layout,
                                uform_lt_algo_t const *algo, void *workspace, size_t workspace_bytes, void *stream);
    char path[256]; /**< What was opened. */
} uform_cublaslt_t;

/** @brief The loaded library; UNSUPPORTED with the reason (every name tried) as the thread's message. */
uform_status_t uform_cublaslt(uform_cublaslt_t const **library);

#endif // UFORM_CUBLASLT_H
