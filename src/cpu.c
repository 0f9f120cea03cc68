/**
 *  @file   cpu.c
 *  @brief  CPU classes: detecting the features the CPU reports AND the OS enables, naming classes
 *          and features, and resolving a requested class against the detected one.
 *
 *  A feature counts only when both halves agree: on x86 the CPUID bit and the XCR0 state bits the
 *  kernel turned on (YMM for AVX-class, opmask+ZMM for AVX-512-class, XTILECFG+XTILEDATA for AMX);
 *  on Arm and RISC-V the kernel's hwcaps, which already fold in what the kernel supports.
 */
#include "internal.h"

#include <pthread.h> // `pthread_once`
#include <stdio.h>   // `snprintf`
#include <string.h>  // `strlen`

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h> // `__get_cpuid_count`
#endif
#if defined(__linux__)
#include <sys/auxv.h>    // `getauxval`
#include <sys/syscall.h> // `SYS_arch_prctl`
#include <unistd.h>      // `syscall`
#endif

/* ---- Tables ---- */

#define UFORM_CPU_CLASSES 19 /* `uform_cpu_class_unknown_k` .. `uform_cpu_class_monoversioned_k` */

#define F(name) ((uint64_t)uform_cpu_feature_##name##_k)

/* The header's tables, cumulative: each class carries every bit of the class it builds on. */
#define X86_HASWELL (F(avx) | F(avx2) | F(fma) | F(f16c) | F(bmi1) | F(bmi2))
#define X86_SIERRA (X86_HASWELL | F(avxvnni))
#define X86_SKYLAKE (X86_HASWELL | F(avx512f) | F(avx512cd) | F(avx512bw) | F(avx512dq) | F(avx512vl))
#define X86_ICELAKE                                                                                \
    (X86_SKYLAKE | F(avx512vnni) | F(avx512vpopcntdq) | F(avx512vbmi) | F(avx512vbmi2) |          \
     F(avx512bitalg) | F(avx512ifma))
#define X86_GENOA (X86_ICELAKE | F(avx512bf16))
#define X86_SAPPHIRE (X86_GENOA | F(avx512fp16) | F(amxtile) | F(amxbf16) | F(amxint8))
#define X86_GRANITE (X86_SAPPHIRE | F(amxfp16))
#define X86_DIAMOND (X86_GRANITE | F(avx10_2))
#define ARM_G2 (F(neon))
#define ARM_M2 (ARM_G2 | F(dotprod) | F(bf16) | F(fhm) | F(i8mm))
#define ARM_M4 (ARM_M2 | F(sme))
#define ARM_G5 (ARM_M2 | F(sve) | F(sve2))
#define ARM_VERA (ARM_G5 | F(fp8dot))
#define RISCV_C930 (F(rvv))

static uint64_t const uform_cpu_class_table[UFORM_CPU_CLASSES] = {
    [uform_cpu_class_intel_haswell_k] = X86_HASWELL,   [uform_cpu_class_intel_sierra_k] = X86_SIERRA,
    [uform_cpu_class_intel_skylake_k] = X86_SKYLAKE,   [uform_cpu_class_intel_icelake_k] = X86_ICELAKE,
    [uform_cpu_class_amd_genoa_k] = X86_GENOA,         [uform_cpu_class_intel_sapphire_k] = X86_SAPPHIRE,
    [uform_cpu_class_intel_granite_k] = X86_GRANITE,   [uform_cpu_class_intel_diamond_k] = X86_DIAMOND,
    [uform_cpu_class_aws_g2_k] = ARM_G2,               [uform_cpu_class_apple_m2_k] = ARM_M2,
    [uform_cpu_class_apple_m4_k] = ARM_M4,             [uform_cpu_class_aws_g5_k] = ARM_G5,
    [uform_cpu_class_nvidia_vera_k] = ARM_VERA,        [uform_cpu_class_alibaba_c930_k] = RISCV_C930,
    /* SERIAL needs nothing; UNKNOWN, the WASM classes and MONOVERSIONED are not feature tiers of a
       native build, so they carry no bits and resolution rejects them by number, not by bits. */
};

static char const *const uform_cpu_class_names[UFORM_CPU_CLASSES] = {
    "unknown",        "serial",        "intel_haswell", "intel_sierra", "intel_skylake",
    "intel_icelake",  "amd_genoa",     "intel_sapphire", "intel_granite", "intel_diamond",
    "aws_g2",         "apple_m2",      "apple_m4",      "aws_g5",       "nvidia_vera",
    "alibaba_c930",   "wasm32_v128",   "wasm64_extended", "monoversioned",
};

/* Indexed by bit position; NULL marks positions no feature uses. */
static char const *const uform_cpu_feature_names[64] = {
    [0] = "avx",
    [1] = "avx2",
    [2] = "fma",
    [3] = "f16c",
    [4] = "bmi1",
    [5] = "bmi2",
    [6] = "avxvnni",
    [7] = "avx512f",
    [8] = "avx512cd",
    [9] = "avx512bw",
    [10] = "avx512dq",
    [11] = "avx512vl",
    [12] = "avx512vnni",
    [13] = "avx512vpopcntdq",
    [14] = "avx512vbmi",
    [15] = "avx512vbmi2",
    [16] = "avx512bitalg",
    [17] = "avx512ifma",
    [18] = "avx512bf16",
    [19] = "avx512fp16",
    [20] = "amxtile",
    [21] = "amxbf16",
    [22] = "amxint8",
    [23] = "amxfp16",
    [24] = "avx10_2",
    [32] = "neon",
    [33] = "dotprod",
    [34] = "bf16",
    [35] = "fhm",
    [36] = "i8mm",
    [37] = "sve",
    [38] = "sve2",
    [39] = "sme",
    [40] = "fp8dot",
    [48] = "rvv",
};

typedef enum uform_cpu_arch_t {
    uform_cpu_arch_none_k = 0, /* WASM and MONOVERSIONED: never native here */
    uform_cpu_arch_x86_k,
    uform_cpu_arch_arm_k,
    uform_cpu_arch_riscv_k,
} uform_cpu_arch_t;

static uform_cpu_arch_t uform_cpu_class_arch(uform_cpu_class_t cpu_class) {
    if (cpu_class >= uform_cpu_class_intel_haswell_k && cpu_class <= uform_cpu_class_intel_diamond_k)
        return uform_cpu_arch_x86_k;
    if (cpu_class >= uform_cpu_class_aws_g2_k && cpu_class <= uform_cpu_class_nvidia_vera_k)
        return uform_cpu_arch_arm_k;
    if (cpu_class == uform_cpu_class_alibaba_c930_k) return uform_cpu_arch_riscv_k;
    return uform_cpu_arch_none_k;
}

static char const *uform_cpu_arch_name(uform_cpu_arch_t arch) {
    switch (arch) {
    case uform_cpu_arch_x86_k: return "x86";
    case uform_cpu_arch_arm_k: return "Arm";
    case uform_cpu_arch_riscv_k: return "RISC-V";
    default: return "unknown";
    }
}

#if defined(__x86_64__) || defined(__i386__)
#define UFORM_CPU_NATIVE_ARCH uform_cpu_arch_x86_k
#elif defined(__aarch64__)
#define UFORM_CPU_NATIVE_ARCH uform_cpu_arch_arm_k
#elif defined(__riscv)
#define UFORM_CPU_NATIVE_ARCH uform_cpu_arch_riscv_k
#else
#define UFORM_CPU_NATIVE_ARCH uform_cpu_arch_none_k
#endif

/* ---- Detection ---- */

#if defined(__x86_64__) || defined(__i386__)

/* XCR0 state components (Intel SDM vol. 1, 13.1). */
#define UFORM_XCR0_YMM ((1ull << 1) | (1ull << 2))                 /* SSE + AVX (upper YMM) */
#define UFORM_XCR0_ZMM ((1ull << 5) | (1ull << 6) | (1ull << 7))   /* opmask, ZMM_Hi256, Hi16_ZMM */
#define UFORM_XCR0_AMX ((1ull << 17) | (1ull << 18))               /* XTILECFG, XTILEDATA */
#define UFORM_XFEATURE_XTILEDATA 18
#define UFORM_ARCH_GET_XCOMP_SUPP 0x1021 /* <asm/prctl.h>, Linux 5.16+; spelled out for old headers */

static uint64_t uform_xgetbv0(void) {
    uint32_t low, high;
    __asm__ __volatile__("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return ((uint64_t)high << 32) | low;
}

/* Whether the kernel can hand AMX tile data to a process. XCR0 bit 18 is set by kernels that
   support AMX, but Linux guards it with XFD until a process asks (`ARCH_REQ_XCOMP_PERM`); we only
   ask whether the kernel supports the component, never request the permission: that is up to the
   code that actually runs tiles. Kernels older than 5.16 lack the query (EINVAL) and also never set
   XCR0 bit 18, so XCR0 alone is the answer there. */
static int uform_kernel_supports_xtiledata(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    unsigned long supported = 0;
    if (syscall(SYS_arch_prctl, UFORM_ARCH_GET_XCOMP_SUPP, &supported) == 0)
        return (supported >> UFORM_XFEATURE_XTILEDATA) & 1ul;
#endif
    return 1;
}

static uint64_t uform_cpu_detect_x86(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(1, 0, &eax, &ebx, &ecx, &edx)) return 0;
    unsigned const leaf1_ecx = ecx;

    /* Without OSXSAVE the OS manages no extended state and `xgetbv` itself would fault. */
    uint64_t const xcr0 = (leaf1_ecx & (1u << 27)) ? uform_xgetbv0() : 0;
    int const ymm = (xcr0 & UFORM_XCR0_YMM) == UFORM_XCR0_YMM;
    int const zmm = ymm && (xcr0 & UFORM_XCR0_ZMM) == UFORM_XCR0_ZMM;
    int const amx = (xcr0 & UFORM_XCR0_AMX) == UFORM_XCR0_AMX && uform_kernel_supports_xtiledata();

    uint64_t features = 0;
#define UFORM_SET(condition, name) (features |= (condition) ? F(name) : 0)
    /* VEX-encoded FMA and F16C use YMM state, so they need it enabled like AVX does. */
    UFORM_SET(ymm && (leaf1_ecx & (1u << 28)), avx);
    UFORM_SET(ymm && (leaf1_ecx & (1u << 12)), fma);
    UFORM_SET(ymm && (leaf1_ecx & (1u << 29)), f16c);

    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return features;
    unsigned const max_subleaf = eax, l7_ebx = ebx, l7_ecx = ecx, l7_edx = edx;
    /* BMI1 and BMI2 are general-purpose-register instructions: no OS state involved. */
    UFORM_SET(l7_ebx & (1u << 3), bmi1);
    UFORM_SET(l7_ebx & (1u << 8), bmi2);
    UFORM_SET(ymm && (l7_ebx & (1u << 5)), avx2);
    UFORM_SET(zmm && (l7_ebx & (1u << 16)), avx512f);
    UFORM_SET(zmm && (l7_ebx & (1u << 17)), avx512dq);
    UFORM_SET(zmm && (l7_ebx & (1u << 21)), avx512ifma);
    UFORM_SET(zmm && (l7_ebx & (1u << 28)), avx512cd);
    UFORM_SET(zmm && (l7_ebx & (1u << 30)), avx512bw);
    UFORM_SET(zmm && (l7_ebx & (1u << 31)), avx512vl);
    UFORM_SET(zmm && (l7_ecx & (1u << 1)), avx512vbmi);
    UFORM_SET(zmm && (l7_ecx & (1u << 6)), avx512vbmi2);
    UFORM_SET(zmm && (l7_ecx & (1u << 11)), avx512vnni);
    UFORM_SET(zmm && (l7_ecx & (1u << 12)), avx512bitalg);
    UFORM_SET(zmm && (l7_ecx & (1u << 14)), avx512vpopcntdq);
    UFORM_SET(amx && (l7_edx & (1u << 22)), amxbf16);
    UFORM_SET(zmm && (l7_edx & (1u << 23)), avx512fp16);
    UFORM_SET(amx && (l7_edx & (1u << 24)), amxtile);
    UFORM_SET(amx && (l7_edx & (1u << 25)), amxint8);

    if (max_subleaf < 1 || !__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return features;
    unsigned const l71_eax = eax, l71_edx = edx;
    UFORM_SET(ymm && (l71_eax & (1u << 4)), avxvnni);
    UFORM_SET(zmm && (l71_eax & (1u << 5)), avx512bf16);
    UFORM_SET(amx && (l71_eax & (1u << 21)), amxfp16);

    /* AVX10: presence in leaf 7.1 EDX bit 19, the converged version in leaf 0x24 EBX[7:0]. AVX10.2
       mandates 512-bit vectors, so it needs the ZMM state like AVX-512 does. */
    if (zmm && (l71_edx & (1u << 19)) && __get_cpuid_count(0x24, 0, &eax, &ebx, &ecx, &edx))
        UFORM_SET((ebx & 0xffu) >= 2, avx10_2);
#undef UFORM_SET
    return features;
}

#endif // x86

#if defined(__aarch64__) && defined(__linux__)

/* <asm/hwcap.h> values, spelled out so that older kernel headers still compile this. */
#define UFORM_HWCAP_ASIMD (1ul << 1)
#define UFORM_HWCAP_ASIMDDP (1ul << 20)
#define UFORM_HWCAP_SVE (1ul << 22)
#define UFORM_HWCAP_ASIMDFHM (1ul << 23)
#define UFORM_HWCAP2_SVE2 (1ul << 1)
#define UFORM_HWCAP2_I8MM (1ul << 13)
#define UFORM_HWCAP2_BF16 (1ul << 14)
#define UFORM_HWCAP2_SME (1ul << 23)
#define UFORM_HWCAP2_F8DP4 (1ul << 53)
#define UFORM_HWCAP2_F8DP2 (1ul << 54)

static uint64_t uform_cpu_detect_arm(void) {
    /* Linux sets a hwcap only when the CPU has the feature AND the kernel enabled it for EL0
       (SVE and SME need the kernel to manage their state), so hwcaps are the whole answer. */
    unsigned long const hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    uint64_t features = 0;
    if (hwcap & UFORM_HWCAP_ASIMD) features |= F(neon);
    if (hwcap & UFORM_HWCAP_ASIMDDP) features |= F(dotprod);
    if (hwcap2 & UFORM_HWCAP2_BF16) features |= F(bf16);
    if (hwcap & UFORM_HWCAP_ASIMDFHM) features |= F(fhm);
    if (hwcap2 & UFORM_HWCAP2_I8MM) features |= F(i8mm);
    if (hwcap & UFORM_HWCAP_SVE) features |= F(sve);
    if (hwcap2 & UFORM_HWCAP2_SVE2) features |= F(sve2);
    if (hwcap2 & UFORM_HWCAP2_SME) features |= F(sme);
    /* The header's FP8DOT means both FEAT_FP8DOT2 and FEAT_FP8DOT4. */
    if ((hwcap2 & UFORM_HWCAP2_F8DP2) && (hwcap2 & UFORM_HWCAP2_F8DP4)) features |= F(fp8dot);
    return features;
}

#endif // Arm Linux

#if defined(__riscv) && defined(__linux__)

static uint64_t uform_cpu_detect_riscv(void) {
    /* The single-letter ISA bits of AT_HWCAP: 'V' is set only for ratified RVV 1.0 and only when the
       kernel enabled the vector state for user space. */
    unsigned long const hwcap = getauxval(AT_HWCAP);
    return (hwcap & (1ul << ('V' - 'A'))) ? F(rvv) : 0;
}

#endif // RISC-V Linux

static uform_cpu_class_t uform_cpu_detected_class = uform_cpu_class_serial_k;
static uint64_t uform_cpu_detected_features = 0;
static pthread_once_t uform_cpu_detect_once = PTHREAD_ONCE_INIT;

static void uform_cpu_detect_init(void) {
    uint64_t features = 0;
#if defined(__x86_64__) || defined(__i386__)
    features = uform_cpu_detect_x86();
#elif defined(__aarch64__) && defined(__linux__)
    features = uform_cpu_detect_arm();
#elif defined(__aarch64__)
    features = F(neon); /* ASIMD is part of every AArch64 profile a general-purpose OS runs on */
#elif defined(__riscv) && defined(__linux__)
    features = uform_cpu_detect_riscv();
#endif
    /* The highest-numbered class of this architecture whose features are all present. Classes of
       other architectures can never match (their bits are never set here), but the architecture
       check keeps bit-less classes (WASM, MONOVERSIONED) from matching vacuously. */
    uform_cpu_class_t best = uform_cpu_class_serial_k;
    for (int cpu_class = uform_cpu_class_intel_haswell_k; cpu_class < UFORM_CPU_CLASSES; ++cpu_class) {
        if (uform_cpu_class_arch((uform_cpu_class_t)cpu_class) != UFORM_CPU_NATIVE_ARCH) continue;
        uint64_t const needed = uform_cpu_class_table[cpu_class];
        if (needed && (needed & ~features) == 0) best = (uform_cpu_class_t)cpu_class;
    }
    uform_cpu_detected_features = features;
    uform_cpu_detected_class = best;
}

uform_status_t uform_cpu_detect(uform_cpu_class_t *cpu_class, uint64_t *features) {
    /* `pthread_once` publishes the two statics with the needed ordering: every caller after the
       first returns after the initialiser finished. */
    pthread_once(&uform_cpu_detect_once, uform_cpu_detect_init);
    if (cpu_class) *cpu_class = uform_cpu_detected_class;
    if (features) *features = uform_cpu_detected_features;
    return uform_status_ok_k;
}

/* ---- Names and resolution ---- */

uint64_t uform_cpu_class_features(uform_cpu_class_t cpu_class) {
    if ((unsigned)cpu_class >= UFORM_CPU_CLASSES) return 0;
    return uform_cpu_class_table[cpu_class];
}

char const *uform_cpu_class_name(uform_cpu_class_t cpu_class) {
    if ((unsigned)cpu_class >= UFORM_CPU_CLASSES) return "invalid";
    return uform_cpu_class_names[cpu_class];
}

char const *uform_cpu_feature_name(uint64_t feature) {
    if (feature == 0 || (feature & (feature - 1)) != 0) return "invalid"; /* zero or several bits */
    char const *name = uform_cpu_feature_names[__builtin_ctzll(feature)];
    return name ? name : "invalid"; /* a single bit no feature uses */
}

uform_status_t uform_cpu_resolve_class(uform_cpu_class_t requested, uform_cpu_class_t *resolved) {
    uform_cpu_class_t detected_class;
    uint64_t detected_features;
    uform_status_t const detected = uform_cpu_detect(&detected_class, &detected_features);
    if (detected != uform_status_ok_k) return detected;

    /* Compare as unsigned: a negative enum value read through `int` must not index the tables. */
    if ((unsigned)requested >= UFORM_CPU_CLASSES)
        return uform_fail(uform_status_invalid_argument_k,
                          "cpu_class %d is out of range: expected 0 (unknown, derives the CPU's own) to %d",
                          (int)requested, UFORM_CPU_CLASSES - 1);
    if (requested == uform_cpu_class_unknown_k) {
        if (resolved) *resolved = detected_class;
        return uform_status_ok_k;
    }
    if (requested == uform_cpu_class_serial_k) { /* the portable floor runs everywhere */
        if (resolved) *resolved = requested;
        return uform_status_ok_k;
    }

    uform_cpu_arch_t const arch = uform_cpu_class_arch(requested);
    if (arch == uform_cpu_arch_none_k)
        return uform_fail(uform_status_unsupported_k,
                          "cpu_class %s is never run by this native multiversioned build; detected %s",
                          uform_cpu_class_names[requested], uform_cpu_class_names[detected_class]);

    uint64_t const missing = uform_cpu_class_table[requested] & ~detected_features;
    if (missing) {
        /* "needs a, b and c, which ..." with every missing feature named, in bit order. */
        char list[384];
        size_t length = 0, left = (size_t)__builtin_popcountll(missing);
        list[0] = '\0';
        for (uint64_t rest = missing; rest; rest &= rest - 1, --left) {
            char const *separator = length == 0 ? "" : left == 1 ? " and " : ", ";
            int written = snprintf(list + length, sizeof(list) - length, "%s%s", separator,
                                   uform_cpu_feature_name(rest & (~rest + 1)));
            if (written < 0 || (size_t)written >= sizeof(list) - length) break; /* truncated: enough said */
            length += (size_t)written;
        }
        char architecture[64] = "";
        if (arch != UFORM_CPU_NATIVE_ARCH)
            snprintf(architecture, sizeof(architecture), " (a class for %s; this CPU is %s)",
                     uform_cpu_arch_name(arch), uform_cpu_arch_name(UFORM_CPU_NATIVE_ARCH));
        return uform_fail(uform_status_unsupported_k,
                          "cpu_class %s%s needs %s, which this CPU or its OS does not enable; detected %s",
                          uform_cpu_class_names[requested], architecture, list,
                          uform_cpu_class_names[detected_class]);
    }
    if (resolved) *resolved = requested;
    return uform_status_ok_k;
}

