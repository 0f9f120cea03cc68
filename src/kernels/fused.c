/**
 *  @file   fused.c
 *  @brief  The fused kernels compiled once per CPU class (see kernels.h), and the dispatch table.
 */
#include "kernels/kernels.h"

#include <math.h>   // `sqrtf`
#include <string.h> // `memcpy`

#define KERNEL(name) name##_serial
#define KERNEL_NAME "serial"
#define KERNEL_TARGET
#include "kernels/fused.inc"
#undef KERNEL
#undef KERNEL_NAME
#undef KERNEL_TARGET

#if defined(__x86_64__) && defined(__GNUC__)
#define UFORM_KERNELS_X86 1

// GCC's target attribute can ask for 512-bit vectors; clang's has no such option (its
// -mprefer-vector-width is a command-line flag only), so it gets the plain ISA list.
#if defined(__clang__)
#define UFORM_PREFER_512 ""
#else
#define UFORM_PREFER_512 ",prefer-vector-width=512"
#endif

#define KERNEL(name) name##_haswell
#define KERNEL_NAME "haswell"
#define KERNEL_TARGET __attribute__((target("avx2,fma,f16c")))
#include "kernels/fused.inc"
#undef KERNEL
#undef KERNEL_NAME
#undef KERNEL_TARGET

#define KERNEL(name) name##_skylake
#define KERNEL_NAME "skylake"
#define KERNEL_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl" UFORM_PREFER_512)))
#include "kernels/fused.inc"
#undef KERNEL
#undef KERNEL_NAME
#undef KERNEL_TARGET

#define KERNEL(name) name##_genoa
#define KERNEL_NAME "genoa"
#define KERNEL_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16" UFORM_PREFER_512)))
#include "kernels/fused.inc"
#undef KERNEL
#undef KERNEL_NAME
#undef KERNEL_TARGET
#endif

uform_kernels_t const *uform_kernels_for(uform_cpu_class_t cpu_class) {
#if defined(UFORM_KERNELS_X86)
    switch (cpu_class) {
    case uform_cpu_class_intel_haswell_k:
    case uform_cpu_class_intel_sierra_k: return &kernels_haswell;
    case uform_cpu_class_intel_skylake_k:
    case uform_cpu_class_intel_icelake_k: return &kernels_skylake;
    case uform_cpu_class_amd_genoa_k:
    case uform_cpu_class_intel_sapphire_k:
    case uform_cpu_class_intel_granite_k:
    case uform_cpu_class_intel_diamond_k: return &kernels_genoa;
    default: return &kernels_serial;
    }
#else
    (void)cpu_class;
    return &kernels_serial;
#endif
}

int uform_kernels_native_bf16(uform_cpu_class_t cpu_class) {
    return cpu_class == uform_cpu_class_amd_genoa_k || cpu_class == uform_cpu_class_intel_sapphire_k ||
           cpu_class == uform_cpu_class_intel_granite_k || cpu_class == uform_cpu_class_intel_diamond_k;
}

int uform_kernels_avx512(uform_cpu_class_t cpu_class) {
    return cpu_class == uform_cpu_class_intel_skylake_k || cpu_class == uform_cpu_class_intel_icelake_k ||
           uform_kernels_native_bf16(cpu_class);
}

int uform_kernels_amx_bf16(uform_cpu_class_t cpu_class) {
    return cpu_class == uform_cpu_class_intel_sapphire_k || cpu_class == uform_cpu_class_intel_granite_k ||
           cpu_class == uform_cpu_class_intel_diamond_k;
}
