/**
 *  @file   cublaslt.c
 *  @brief  Loads cuBLASLt at run time (see cublaslt.h): once per process, under a `pthread_once`.
 */
#define _GNU_SOURCE
#include "cublaslt.h"

#include <dlfcn.h>   // `dlopen`, `dlsym`
#include <pthread.h> // `pthread_once`
#include <stdio.h>   // `snprintf`
#include <stdlib.h>  // `getenv`
#include <string.h>  // `strlen`

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static uform_cublaslt_t lt_table;
static int lt_loaded = 0;
static char lt_reason[1024];

static int lt_resolve(void *library, void **slot, char const *name) {
    *slot = dlsym(library, name);
    if (*slot) return 1;
    snprintf(lt_reason, sizeof lt_reason, "cuBLASLt at %s lacks %s", lt_table.path, name);
    return 0;
}

static void lt_load(void) {
    char const *names[] = {"libcublasLt.so.13", "libcublasLt.so.12"};
    char candidates[8][256];
    size_t count = 0;
    char const *forced = getenv("UFORM_CUBLASLT");
    if (forced && *forced) snprintf(candidates[count++], 256, "%s", forced);
    for (size_t i = 0; i < 2; ++i) snprintf(candidates[count++], 256, "%s", names[i]);
    char const *home = getenv("CUDA_HOME");
    for (size_t i = 0; i < 2; ++i) {
        if (home && *home && strlen(home) < 200) snprintf(candidates[count++], 256, "%s/lib64/%s", home, names[i]);
        snprintf(candidates[count++], 256, "/usr/local/cuda/lib64/%s", names[i]);
    }
    void *library = NULL;
    for (size_t i = 0; i < count && !library; ++i) {
        library = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (library) snprintf(lt_table.path, sizeof lt_table.path, "%s", candidates[i]);
    }
    if (!library) {
        snprintf(lt_reason, sizeof lt_reason,
                 "cuBLASLt is not installed: none of $UFORM_CUBLASLT, libcublasLt.so.13, libcublasLt.so.12 "
                 "(also under $CUDA_HOME/lib64 and /usr/local/cuda/lib64) could be opened; VRAM models need it");
        return;
    }
#define LT(field, name) lt_resolve(library, (void **)&lt_table.field, name)
    if (!LT(Create, "cublasLtCreate") || !LT(Destroy, "cublasLtDestroy") || !LT(GetVersion, "cublasLtGetVersion") ||
        !LT(MatmulDescCreate, "cublasLtMatmulDescCreate") || !LT(MatmulDescDestroy, "cublasLtMatmulDescDestroy") ||
        !LT(MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute") ||
        !LT(MatrixLayoutCreate, "cublasLtMatrixLayoutCreate") || !LT(MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy") ||
        !LT(MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate") ||
        !LT(MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy") ||
        !LT(MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute") ||
        !LT(MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic") || !LT(Matmul, "cublasLtMatmul")) {
        dlclose(library);
        return;
    }
#undef LT
    lt_loaded = 1; /* the library stays open for the process's life, like the driver */
}

uform_status_t uform_cublaslt(uform_cublaslt_t const **library) {
    if (library) *library = NULL;
    if (getenv("UFORM_NO_CUBLASLT"))
        return uform_fail(uform_status_unsupported_k,
                          "cuBLASLt is disabled by UFORM_NO_CUBLASLT; VRAM models need it");
    pthread_once(&lt_once, lt_load);
    if (!lt_loaded) return uform_fail(uform_status_unsupported_k, "%s", lt_reason);
    if (library) *library = &lt_table;
    return uform_status_ok_k;
}
