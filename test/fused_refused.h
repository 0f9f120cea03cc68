/**
 *  @file   fused_refused.h
 *  @brief  For the CPU towers' tests run again with UFORM_GEMM_FUSED=refuse (ctest's `*_fused_refused`):
 *          every fused product (oneDNN post-ops, AMX classes) refused, so the passes' fallbacks from
 *          their fused layouts run. Where the class fuses nothing, such a run would only repeat the
 *          plain one: it is skipped.
 */
#ifndef UFORM_TEST_FUSED_REFUSED_H
#define UFORM_TEST_FUSED_REFUSED_H

#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/** 1 (after saying so) when this run is a refused one on a class that fuses nothing: skip it. */
static inline int skip_refused_run(void) {
    char const *fused = getenv("UFORM_GEMM_FUSED");
    uform_cpu_class_t cpu_class;
    if (!fused || strcmp(fused, "refuse") != 0 || uform_cpu_detect(&cpu_class, NULL) != uform_status_ok_k) return 0;
    if (uform_gemm_for(cpu_class).fused) return 0;
    printf("SKIP: UFORM_GEMM_FUSED=refuse, but class %s fuses no products\n", uform_cpu_class_name(cpu_class));
    return 1;
}

#endif // UFORM_TEST_FUSED_REFUSED_H
