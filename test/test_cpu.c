/**
 *  @file   test_cpu.c
 *  @brief  CPU classes: detection against /proc/cpuinfo, the header's tables, names, resolution.
 *
 *  The expected features and class are derived here from the kernel's own report (/proc/cpuinfo lists
 *  a flag only when the CPU has it AND the kernel enabled its state) and from a copy of the header's
 *  tables written in cpuinfo's spelling, so neither the library's detection nor its table is trusted.
 */
#define _GNU_SOURCE 1
#include "check.h"
#include "internal.h"

#include <pthread.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define CLASSES 19

/* ---- /proc/cpuinfo ---- */

static char cpuinfo_flags[16384];

/** @brief Loads the first line of /proc/cpuinfo starting with `key` (its value part). */
static int load_cpuinfo(char const *key) {
    FILE *file = fopen("/proc/cpuinfo", "r");
    if (!file) return 0;
    char line[16384];
    int found = 0;
    while (!found && fgets(line, sizeof(line), file)) {
        if (strncmp(line, key, strlen(key)) != 0) continue;
        char const *colon = strchr(line, ':');
        if (!colon) continue;
        snprintf(cpuinfo_flags, sizeof(cpuinfo_flags), " %s", colon + 1);
        for (char *c = cpuinfo_flags; *c; ++c)
            if (*c == '\n' || *c == '\t') *c = ' ';
        strcat(cpuinfo_flags, " ");
        found = 1;
    }
    fclose(file);
    return found;
}

/** @brief Whether the loaded line lists `flag` as a whole word. */
static int has_flag(char const *flag) {
    char needle[64];
    snprintf(needle, sizeof(needle), " %s ", flag);
    return strstr(cpuinfo_flags, needle) != NULL;
}

/* ---- The header's tables, in cpuinfo's spelling ---- */

typedef struct feature_flag_t {
    uint64_t bit;
    char const *flags[2]; /* every listed flag must be present; NULL-terminated */
} feature_flag_t;

#define FEATURE(name) ((uint64_t)uform_cpu_feature_##name##_k)

#if defined(__x86_64__) || defined(__i386__)
static feature_flag_t const x86_flags[] = {
    {FEATURE(avx), {"avx"}},
    {FEATURE(avx2), {"avx2"}},
    {FEATURE(fma), {"fma"}},
    {FEATURE(f16c), {"f16c"}},
    {FEATURE(bmi1), {"bmi1"}},
    {FEATURE(bmi2), {"bmi2"}},
    {FEATURE(avxvnni), {"avx_vnni"}},
    {FEATURE(avx512f), {"avx512f"}},
    {FEATURE(avx512cd), {"avx512cd"}},
    {FEATURE(avx512bw), {"avx512bw"}},
    {FEATURE(avx512dq), {"avx512dq"}},
    {FEATURE(avx512vl), {"avx512vl"}},
    {FEATURE(avx512vnni), {"avx512_vnni"}},
    {FEATURE(avx512vpopcntdq), {"avx512_vpopcntdq"}},
    {FEATURE(avx512vbmi), {"avx512vbmi"}},
    {FEATURE(avx512vbmi2), {"avx512_vbmi2"}},
    {FEATURE(avx512bitalg), {"avx512_bitalg"}},
    {FEATURE(avx512ifma), {"avx512ifma"}},
    {FEATURE(avx512bf16), {"avx512_bf16"}},
    {FEATURE(avx512fp16), {"avx512_fp16"}},
    {FEATURE(amxtile), {"amx_tile"}},
    {FEATURE(amxbf16), {"amx_bf16"}},
    {FEATURE(amxint8), {"amx_int8"}},
    {FEATURE(amxfp16), {"amx_fp16"}},
    /* avx10_2 has no cpuinfo flag (the kernel does not print the AVX10 version): handled apart. */
};
#endif

#if defined(__aarch64__)
static feature_flag_t const arm_flags[] = {
    {FEATURE(neon), {"asimd"}},   {FEATURE(dotprod), {"asimddp"}}, {FEATURE(bf16), {"bf16"}},
    {FEATURE(fhm), {"asimdfhm"}}, {FEATURE(i8mm), {"i8mm"}},       {FEATURE(sve), {"sve"}},
    {FEATURE(sve2), {"sve2"}},    {FEATURE(sme), {"sme"}},         {FEATURE(fp8dot), {"f8dp2", "f8dp4"}},
};
#endif

/* Each class as its own additions over the class it builds on, straight from the header's tables. */
typedef struct class_row_t {
    uform_cpu_class_t cpu_class;
    uform_cpu_class_t base; /* serial for the first tier of an architecture */
    uint64_t adds;
} class_row_t;

static class_row_t const class_rows[] = {
    {uform_cpu_class_intel_haswell_k, uform_cpu_class_serial_k,
     FEATURE(avx) | FEATURE(avx2) | FEATURE(fma) | FEATURE(f16c) | FEATURE(bmi1) | FEATURE(bmi2)},
    {uform_cpu_class_intel_sierra_k, uform_cpu_class_intel_haswell_k, FEATURE(avxvnni)},
    {uform_cpu_class_intel_skylake_k, uform_cpu_class_intel_haswell_k,
     FEATURE(avx512f) | FEATURE(avx512cd) | FEATURE(avx512bw) | FEATURE(avx512dq) | FEATURE(avx512vl)},
    {uform_cpu_class_intel_icelake_k, uform_cpu_class_intel_skylake_k,
     FEATURE(avx512vnni) | FEATURE(avx512vpopcntdq) | FEATURE(avx512vbmi) | FEATURE(avx512vbmi2) |
         FEATURE(avx512bitalg) | FEATURE(avx512ifma)},
    {uform_cpu_class_amd_genoa_k, uform_cpu_class_intel_icelake_k, FEATURE(avx512bf16)},
    {uform_cpu_class_intel_sapphire_k, uform_cpu_class_amd_genoa_k,
     FEATURE(avx512fp16) | FEATURE(amxtile) | FEATURE(amxbf16) | FEATURE(amxint8)},
    {uform_cpu_class_intel_granite_k, uform_cpu_class_intel_sapphire_k, FEATURE(amxfp16)},
    {uform_cpu_class_intel_diamond_k, uform_cpu_class_intel_granite_k, FEATURE(avx10_2)},
    {uform_cpu_class_aws_g2_k, uform_cpu_class_serial_k, FEATURE(neon)},
    {uform_cpu_class_apple_m2_k, uform_cpu_class_aws_g2_k,
     FEATURE(dotprod) | FEATURE(bf16) | FEATURE(fhm) | FEATURE(i8mm)},
    {uform_cpu_class_apple_m4_k, uform_cpu_class_apple_m2_k, FEATURE(sme)},
    {uform_cpu_class_aws_g5_k, uform_cpu_class_apple_m2_k, FEATURE(sve) | FEATURE(sve2)},
    {uform_cpu_class_nvidia_vera_k, uform_cpu_class_aws_g5_k, FEATURE(fp8dot)},
    {uform_cpu_class_alibaba_c930_k, uform_cpu_class_serial_k, FEATURE(rvv)},
};

/** @brief The header's cumulative feature set of a class, from `class_rows`; 0 for the rest. */
static uint64_t expected_class_features(uform_cpu_class_t cpu_class) {
    for (size_t i = 0; i < sizeof(class_rows) / sizeof(class_rows[0]); ++i)
        if (class_rows[i].cpu_class == cpu_class) return class_rows[i].adds | expected_class_features(class_rows[i].base);
    return 0;
}

static int is_native_class(uform_cpu_class_t cpu_class) {
#if defined(__x86_64__) || defined(__i386__)
    return cpu_class >= uform_cpu_class_intel_haswell_k && cpu_class <= uform_cpu_class_intel_diamond_k;
#elif defined(__aarch64__)
    return cpu_class >= uform_cpu_class_aws_g2_k && cpu_class <= uform_cpu_class_nvidia_vera_k;
#elif defined(__riscv)
    return cpu_class == uform_cpu_class_alibaba_c930_k;
#else
    (void)cpu_class;
    return 0;
#endif
}

/* ---- Expected features from the kernel's report ---- */

#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
static uint64_t flags_to_features(feature_flag_t const *table, size_t count) {
    uint64_t features = 0;
    for (size_t i = 0; i < count; ++i) {
        int present = 1;
        for (size_t j = 0; j < 2 && table[i].flags[j]; ++j) present = present && has_flag(table[i].flags[j]);
        if (present) features |= table[i].bit;
    }
    return features;
}
#endif

static uint64_t expected_features(void) {
#if defined(__x86_64__) || defined(__i386__)
    CHECK_FATAL(load_cpuinfo("flags"));
    uint64_t features = flags_to_features(x86_flags, sizeof(x86_flags) / sizeof(x86_flags[0]));
    /* AVX10.2: the kernel prints no version flag, so read CPUID leaves 7.1 (EDX bit 19: AVX10) and
       0x24 (EBX[7:0]: version) here, gated by the kernel's word on 512-bit state (avx512f listed). */
    unsigned eax, ebx, ecx, edx;
    if (has_flag("avx512f") && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && eax >= 1 &&
        __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (edx & (1u << 19)) &&
        __get_cpuid_count(0x24, 0, &eax, &ebx, &ecx, &edx) && (ebx & 0xff) >= 2)
        features |= FEATURE(avx10_2);
    return features;
#elif defined(__aarch64__)
    CHECK_FATAL(load_cpuinfo("Features"));
    return flags_to_features(arm_flags, sizeof(arm_flags) / sizeof(arm_flags[0]));
#elif defined(__riscv)
    /* "isa : rv64imafdcv_zicsr...": single-letter extensions sit between "rv64" and the first '_'. */
    CHECK_FATAL(load_cpuinfo("isa"));
    char const *letters = strstr(cpuinfo_flags, "rv");
    if (!letters) return 0;
    for (letters += 4; *letters && *letters != '_' && *letters != ' '; ++letters)
        if (*letters == 'v') return FEATURE(rvv);
    return 0;
#else
    return 0;
#endif
}

/* ---- Tests ---- */

static void test_detection(void) {
    uform_cpu_class_t detected = uform_cpu_class_unknown_k;
    uint64_t features = 0;
    CHECK_STATUS(uform_cpu_detect(&detected, &features), uform_status_ok_k);
    CHECK_STATUS(uform_cpu_detect(NULL, NULL), uform_status_ok_k);

    uint64_t const expected = expected_features();
    for (int bit = 0; bit < 64; ++bit) {
        uint64_t const feature = 1ull << bit;
        if ((features & feature) != (expected & feature)) {
            fprintf(stderr, "feature %s: detected %d, /proc/cpuinfo says %d\n", uform_cpu_feature_name(feature),
                    (features & feature) != 0, (expected & feature) != 0);
            ++check_failures;
        }
    }
    CHECK(features == expected);

    /* The highest-numbered class of this architecture whose (header) features are all listed. */
    uform_cpu_class_t expected_class = uform_cpu_class_serial_k;
    for (int c = 0; c < CLASSES; ++c) {
        uint64_t const needed = expected_class_features((uform_cpu_class_t)c);
        if (is_native_class((uform_cpu_class_t)c) && needed && (needed & ~expected) == 0)
            expected_class = (uform_cpu_class_t)c;
    }
    if (detected != expected_class)
        fprintf(stderr, "detected %s, /proc/cpuinfo implies %s\n", uform_cpu_class_name(detected),
                uform_cpu_class_name(expected_class));
    CHECK(detected == expected_class);
    printf("detected %s from %d features\n", uform_cpu_class_name(detected), __builtin_popcountll(features));

#if defined(__x86_64__) || defined(__i386__)
    /* This repository's build machine: AVX-512 with AMX and no AMX-FP16 is Sapphire Rapids class. The
       check follows from the flags, so it holds wherever those flags are listed. */
    if (has_flag("amx_int8") && has_flag("avx512_fp16") && has_flag("avx512_bf16") && has_flag("avx512_vbmi2") &&
        !has_flag("amx_fp16"))
        CHECK(detected == uform_cpu_class_intel_sapphire_k);
#endif
}

static void *detect_from_thread(void *argument) {
    uform_cpu_class_t *result = argument;
    CHECK_OK(uform_cpu_detect(result, NULL));
    return NULL;
}

static void test_detection_threads(void) {
    /* The first detection races from several threads: all must see the same, finished answer. */
    pthread_t threads[4];
    uform_cpu_class_t results[4];
    for (int i = 0; i < 4; ++i) CHECK_FATAL(pthread_create(&threads[i], NULL, detect_from_thread, &results[i]) == 0);
    for (int i = 0; i < 4; ++i) pthread_join(threads[i], NULL);
    uform_cpu_class_t detected;
    CHECK_OK(uform_cpu_detect(&detected, NULL));
    for (int i = 0; i < 4; ++i) CHECK(results[i] == detected);
}

static void test_tables(void) {
    /* The library's table is the header's, bit for bit. */
    for (int c = -1; c <= CLASSES; ++c) {
        uint64_t const actual = uform_cpu_class_features((uform_cpu_class_t)c);
        uint64_t const expected = expected_class_features((uform_cpu_class_t)c);
        if (actual != expected) {
            fprintf(stderr, "class %d (%s): features %#llx, header says %#llx\n", c, uform_cpu_class_name((uform_cpu_class_t)c),
                    (unsigned long long)actual, (unsigned long long)expected);
            ++check_failures;
        }
    }
    CHECK(uform_cpu_class_features(uform_cpu_class_unknown_k) == 0);
    CHECK(uform_cpu_class_features(uform_cpu_class_serial_k) == 0);
    CHECK(uform_cpu_class_features(uform_cpu_class_wasm32_v128_k) == 0);
    CHECK(uform_cpu_class_features(uform_cpu_class_monoversioned_k) == 0);
    CHECK(uform_cpu_class_features((uform_cpu_class_t)1000) == 0);

    /* Strict supersets along every chain of the tables. */
    static uform_cpu_class_t const chains[][8] = {
        {uform_cpu_class_intel_haswell_k, uform_cpu_class_intel_sierra_k},
        {uform_cpu_class_intel_haswell_k, uform_cpu_class_intel_skylake_k, uform_cpu_class_intel_icelake_k,
         uform_cpu_class_amd_genoa_k, uform_cpu_class_intel_sapphire_k, uform_cpu_class_intel_granite_k,
         uform_cpu_class_intel_diamond_k},
        {uform_cpu_class_aws_g2_k, uform_cpu_class_apple_m2_k, uform_cpu_class_apple_m4_k},
        {uform_cpu_class_aws_g2_k, uform_cpu_class_apple_m2_k, uform_cpu_class_aws_g5_k, uform_cpu_class_nvidia_vera_k},
    };
    for (size_t chain = 0; chain < sizeof(chains) / sizeof(chains[0]); ++chain)
        for (size_t i = 1; i < 8 && chains[chain][i]; ++i) {
            uint64_t const lower = uform_cpu_class_features(chains[chain][i - 1]);
            uint64_t const upper = uform_cpu_class_features(chains[chain][i]);
            CHECK(lower != 0 && (lower & ~upper) == 0 && lower != upper);
        }
    /* Sierra and Skylake are siblings, not a chain: neither contains the other. */
    uint64_t const sierra = uform_cpu_class_features(uform_cpu_class_intel_sierra_k);
    uint64_t const skylake = uform_cpu_class_features(uform_cpu_class_intel_skylake_k);
    CHECK((sierra & ~skylake) != 0 && (skylake & ~sierra) != 0);
}

static void test_names(void) {
    static char const *const names[CLASSES] = {
        "unknown",       "serial",        "intel_haswell",  "intel_sierra",  "intel_skylake",
        "intel_icelake", "amd_genoa",     "intel_sapphire", "intel_granite", "intel_diamond",
        "aws_g2",        "apple_m2",      "apple_m4",       "aws_g5",        "nvidia_vera",
        "alibaba_c930",  "wasm32_v128",   "wasm64_extended", "monoversioned",
    };
    for (int c = 0; c < CLASSES; ++c) CHECK(strcmp(uform_cpu_class_name((uform_cpu_class_t)c), names[c]) == 0);
    CHECK(strcmp(uform_cpu_class_name((uform_cpu_class_t)CLASSES), "invalid") == 0);
    CHECK(strcmp(uform_cpu_class_name((uform_cpu_class_t)-1), "invalid") == 0);
    CHECK(strcmp(uform_cpu_class_name((uform_cpu_class_t)1000), "invalid") == 0);

    /* Every feature bit of every class has a distinct lower-case name; other inputs are "invalid". */
    uint64_t all = 0;
    for (int c = 0; c < CLASSES; ++c) all |= uform_cpu_class_features((uform_cpu_class_t)c);
    CHECK(__builtin_popcountll(all) == 35);
    for (int bit = 0; bit < 64; ++bit) {
        char const *name = uform_cpu_feature_name(1ull << bit);
        CHECK(name != NULL);
        if (!((all >> bit) & 1)) {
            CHECK(strcmp(name, "invalid") == 0);
            continue;
        }
        CHECK(strcmp(name, "invalid") != 0 && name[0] != '\0');
        for (char const *c = name; *c; ++c) CHECK((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_');
        for (int other = 0; other < bit; ++other)
            if ((all >> other) & 1) CHECK(strcmp(name, uform_cpu_feature_name(1ull << other)) != 0);
    }
    CHECK(strcmp(uform_cpu_feature_name(FEATURE(avx512bf16)), "avx512bf16") == 0);
    CHECK(strcmp(uform_cpu_feature_name(FEATURE(amxfp16)), "amxfp16") == 0);
    CHECK(strcmp(uform_cpu_feature_name(FEATURE(avx10_2)), "avx10_2") == 0);
    CHECK(strcmp(uform_cpu_feature_name(FEATURE(neon)), "neon") == 0);
    CHECK(strcmp(uform_cpu_feature_name(FEATURE(rvv)), "rvv") == 0);
    CHECK(strcmp(uform_cpu_feature_name(0), "invalid") == 0);
    CHECK(strcmp(uform_cpu_feature_name(FEATURE(avx) | FEATURE(avx2)), "invalid") == 0);
}

static void test_resolution(void) {
    uform_cpu_class_t detected;
    uint64_t features;
    CHECK_OK(uform_cpu_detect(&detected, &features));

    uform_cpu_class_t resolved = (uform_cpu_class_t)-7;
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_unknown_k, &resolved), uform_status_ok_k);
    CHECK(resolved == detected);

    size_t accepted = 0, refused = 0;
    for (int c = uform_cpu_class_serial_k; c < CLASSES; ++c) {
        uform_cpu_class_t const requested = (uform_cpu_class_t)c;
        uint64_t const needed = expected_class_features(requested);
        int const runnable = requested == uform_cpu_class_serial_k || (is_native_class(requested) && (needed & ~features) == 0);
        resolved = (uform_cpu_class_t)-7;
        uform_status_t const status = uform_cpu_resolve_class(requested, &resolved);
        if (runnable) {
            /* Below or equal to the CPU: accepted and recorded as is. */
            CHECK_STATUS(status, uform_status_ok_k);
            CHECK(resolved == requested);
            ++accepted;
            continue;
        }
        CHECK_STATUS(status, uform_status_unsupported_k);
        CHECK(resolved == (uform_cpu_class_t)-7); /* untouched on failure */
        CHECK_MESSAGE(uform_cpu_class_name(requested));
        CHECK_MESSAGE(uform_cpu_class_name(detected));
        for (uint64_t missing = needed & ~features; missing; missing &= missing - 1)
            CHECK_MESSAGE(uform_cpu_feature_name(missing & (~missing + 1)));
        ++refused;
    }
    CHECK(accepted + refused == CLASSES - 1);
    CHECK(accepted >= 1); /* SERIAL at least */

    /* Every class up to the detected one along its chain is accepted. */
    for (int c = uform_cpu_class_serial_k; c <= (int)detected; ++c) {
        uint64_t const needed = uform_cpu_class_features((uform_cpu_class_t)c);
        if ((needed & ~uform_cpu_class_features(detected)) == 0 && (c == uform_cpu_class_serial_k || is_native_class((uform_cpu_class_t)c)))
            CHECK_STATUS(uform_cpu_resolve_class((uform_cpu_class_t)c, &resolved), uform_status_ok_k);
    }

#if defined(__x86_64__) || defined(__i386__)
    if (detected == uform_cpu_class_intel_sapphire_k) {
        CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_intel_granite_k, &resolved), uform_status_unsupported_k);
        CHECK_MESSAGE("intel_granite");
        CHECK_MESSAGE("amxfp16");
        CHECK_MESSAGE("detected intel_sapphire");
        CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_intel_diamond_k, &resolved), uform_status_unsupported_k);
        CHECK_MESSAGE("amxfp16");
        CHECK_MESSAGE("avx10_2");
        CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_intel_haswell_k, &resolved), uform_status_ok_k);
        CHECK(resolved == uform_cpu_class_intel_haswell_k);
    }
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_aws_g2_k, &resolved), uform_status_unsupported_k);
    CHECK_MESSAGE("neon");
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_nvidia_vera_k, &resolved), uform_status_unsupported_k);
    CHECK_MESSAGE("fp8dot");
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_alibaba_c930_k, &resolved), uform_status_unsupported_k);
    CHECK_MESSAGE("rvv");
#endif
    /* Never native: the WASM classes and MONOVERSIONED. */
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_wasm32_v128_k, &resolved), uform_status_unsupported_k);
    CHECK_MESSAGE("wasm32_v128");
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_wasm64_extended_k, &resolved), uform_status_unsupported_k);
    CHECK_MESSAGE("wasm64_extended");
    CHECK_STATUS(uform_cpu_resolve_class(uform_cpu_class_monoversioned_k, &resolved), uform_status_unsupported_k);
    CHECK_MESSAGE("monoversioned");

    /* Out of range: INVALID_ARGUMENT naming the value. */
    resolved = (uform_cpu_class_t)-7;
    CHECK_STATUS(uform_cpu_resolve_class((uform_cpu_class_t)CLASSES, &resolved), uform_status_invalid_argument_k);
    CHECK_MESSAGE("19");
    CHECK_STATUS(uform_cpu_resolve_class((uform_cpu_class_t)-1, &resolved), uform_status_invalid_argument_k);
    CHECK_MESSAGE("-1");
    CHECK_STATUS(uform_cpu_resolve_class((uform_cpu_class_t)0x7fffffff, &resolved), uform_status_invalid_argument_k);
    CHECK(resolved == (uform_cpu_class_t)-7);
}

int main(void) {
    test_detection_threads();
    test_detection();
    test_tables();
    test_names();
    test_resolution();
    CHECK_DONE();
}
