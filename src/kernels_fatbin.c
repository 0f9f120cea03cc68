/**
 *  @file   kernels_fatbin.c
 *  @brief  The engine's kernels (src/kernels.cu, compiled by nvcc into one fatbin at build time)
 *          embedded into the library by the assembler's `.incbin`: `uform_kernels_fatbin` (64-byte
 *          aligned, read-only) and `uform_kernels_fatbin_size`, which `cuModuleLoadData` receives.
 *          CUDA builds only; cmake/cuda.cmake passes the fatbin's path as UFORM_KERNELS_FATBIN and
 *          rebuilds this file whenever the fatbin changes.
 */
#include "cuda_driver.h"

#ifndef UFORM_KERNELS_FATBIN
#error "UFORM_KERNELS_FATBIN (the fatbin's path) is set by cmake/cuda.cmake"
#endif

// Both symbols are hidden, like every internal symbol of the library; the size is the assembler's
// difference of two labels in one section, so it is a constant at link time.
__asm__(".pushsection .rodata.uform_kernels_fatbin,\"a\",@progbits\n"
        ".balign 64\n"
        ".globl uform_kernels_fatbin\n"
        ".hidden uform_kernels_fatbin\n"
        ".type uform_kernels_fatbin, @object\n"
        "uform_kernels_fatbin:\n"
        ".incbin \"" UFORM_KERNELS_FATBIN "\"\n"
        "uform_kernels_fatbin_end:\n"
        ".size uform_kernels_fatbin, uform_kernels_fatbin_end - uform_kernels_fatbin\n"
        ".balign 8\n"
        ".globl uform_kernels_fatbin_size\n"
        ".hidden uform_kernels_fatbin_size\n"
        ".type uform_kernels_fatbin_size, @object\n"
        "uform_kernels_fatbin_size:\n"
        ".quad uform_kernels_fatbin_end - uform_kernels_fatbin\n"
        ".size uform_kernels_fatbin_size, 8\n"
        ".popsection\n");
