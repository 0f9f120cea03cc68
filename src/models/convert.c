/**
 *  @file   convert.c
 *  @brief  f32, bf16 and f16 conversions with round-to-nearest-even, done in integers so the result
 *          does not depend on the FPU's rounding mode or on F16C being present.
 */
#include "models/convert.h"

#include <string.h> // `memcpy`

#if defined(__x86_64__)
#include <cpuid.h>     // `__get_cpuid`
#include <immintrin.h> // `_mm256_cvtps_ph`
#endif

static uint32_t uform_f32_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    return bits;
}

static float uform_f32_from_bits(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

uint16_t uform_f32_to_bf16(float value) {
    uint32_t const bits = uform_f32_bits(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u); /* NaN, quieted */
    uint32_t const rounding = 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16); /* overflow carries into the exponent: infinity */
}

uint16_t uform_f32_to_f16(float value) {
    uint32_t const bits = uform_f32_bits(value);
    uint16_t const sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t const magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu)); /* NaN */
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (magnitude < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        if (magnitude <= 0x33000000u) return sign;                    /* <= 2^-25: ties to zero (even) */
        uint32_t const exponent = magnitude >> 23;                    /* 102 .. 112 */
        uint32_t const mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        uint32_t const shift = 126u - exponent;                       /* 14 .. 24 */
        uint32_t quotient = mantissa >> shift;
        uint32_t const remainder = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (remainder > half || (remainder == half && (quotient & 1u))) ++quotient;
        return (uint16_t)(sign | quotient); /* 0x400 here is the smallest normal, correctly encoded */
    }
    uint32_t quotient = (magnitude - (112u << 23)) >> 13;
    uint32_t const remainder = magnitude & 0x1fffu;
    if (remainder > 0x1000u || (remainder == 0x1000u && (quotient & 1u))) ++quotient;
    return (uint16_t)(sign | quotient);
}

float uform_bf16_to_f32(uint16_t bits) { return uform_f32_from_bits((uint32_t)bits << 16); }

float uform_f16_to_f32(uint16_t bits) {
    uint32_t const sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t const exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
    if (exponent == 0x1fu) return uform_f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
    if (exponent) return uform_f32_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    if (!mantissa) return uform_f32_from_bits(sign);
    /* Subnormal: normalise the mantissa. */
    uint32_t shift = 0, m = mantissa;
    while (!(m & 0x400u)) m <<= 1, ++shift;
    return uform_f32_from_bits(sign | ((113u - shift) << 23) | ((m & 0x3ffu) << 13));
}

static float uform_load(uint8_t const *source, uform_dtype_t dtype, size_t i) {
    if (dtype == uform_dtype_f32_k) {
        uint32_t bits = (uint32_t)source[4 * i] | (uint32_t)source[4 * i + 1] << 8 | (uint32_t)source[4 * i + 2] << 16 |
                        (uint32_t)source[4 * i + 3] << 24;
        return uform_f32_from_bits(bits);
    }
    uint16_t const bits = (uint16_t)(source[2 * i] | source[2 * i + 1] << 8);
    return dtype == uform_dtype_bf16_k ? uform_bf16_to_f32(bits) : uform_f16_to_f32(bits);
}

#if defined(__x86_64__)
/** @brief F16C and AVX, with the OS saving YMM state. Asked per call (a few hundred cycles, once per
 *  tensor): no cache, so no shared state; `__builtin_cpu_supports` does not know "f16c" in clang 14. */
static int uform_has_f16c(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
    unsigned const osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((ecx & (osxsave | avx | f16c)) != (osxsave | avx | f16c)) return 0;
    unsigned low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    (void)high;
    return (low & 6u) == 6u; /* XMM and YMM state */
}

/* F16C rounds to nearest even as the scalar path does, and quiets NaNs the same way (it keeps the top
   payload bits), so results are bit-identical; it only makes f16 loading several times faster. */
__attribute__((target("avx,f16c"))) static size_t uform_f32_to_f16_f16c(uint16_t *target, uint8_t const *source,
                                                                       size_t count) {
    size_t i = 0;
    for (; i + 8 <= count; i += 8) {
        __m256 const values = _mm256_loadu_ps((float const *)(void const *)(source + 4 * i));
        _mm_storeu_si128((__m128i *)(void *)(target + i), _mm256_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT));
    }
    return i;
}
#endif

float uform_element(void const *source, uform_dtype_t dtype, size_t i) { return uform_load((uint8_t const *)source, dtype, i); }

/* Vectorised (GCC 12 vectorises at -O3 only; CMake's release builds are -O2): a model's weights are
 * scanned once at open, at memory speed (MiniLM's 90 MB: 19 ms at -O2, in the noise at -O3). */
#if defined(__GNUC__) && !defined(__clang__)
#define UFORM_VECTORISED __attribute__((optimize("O3")))
#else
#define UFORM_VECTORISED
#endif
UFORM_VECTORISED size_t uform_first_nonfinite(void const *data, uform_dtype_t dtype, size_t count) {
    /* Blocks whose flags OR together (a loop the compiler vectorises), then the one that holds it. */
    size_t const block = 4096;
    if (dtype == uform_dtype_f32_k) {
        uint32_t const *words = (uint32_t const *)data, all = 0x7f800000u;
        for (size_t start = 0; start < count; start += block) {
            size_t const end = count - start < block ? count : start + block;
            unsigned found = 0;
            for (size_t i = start; i < end; ++i) found |= (words[i] & all) == all;
            if (found)
                for (size_t i = start; i < end; ++i)
                    if ((words[i] & all) == all) return i;
        }
        return count;
    }
    uint16_t const *halves = (uint16_t const *)data;
    uint16_t const all = dtype == uform_dtype_bf16_k ? 0x7f80u : 0x7c00u;
    for (size_t start = 0; start < count; start += block) {
        size_t const end = count - start < block ? count : start + block;
        unsigned found = 0;
        for (size_t i = start; i < end; ++i) found |= (halves[i] & all) == all;
        if (found)
            for (size_t i = start; i < end; ++i)
                if ((halves[i] & all) == all) return i;
    }
    return count;
}

void uform_convert(void *target, uform_dtype_t target_dtype, void const *source, uform_dtype_t source_dtype, size_t count) {
    uint8_t const *bytes = (uint8_t const *)source;
    if (target_dtype == source_dtype) {
        memcpy(target, source, count * uform_dtype_bytes(source_dtype)); /* little-endian hosts only (x86, Arm) */
        return;
    }
#if defined(__x86_64__)
    if (source_dtype == uform_dtype_f32_k && target_dtype == uform_dtype_f16_k && uform_has_f16c()) {
        size_t const done = uform_f32_to_f16_f16c((uint16_t *)target, bytes, count);
        target = (uint16_t *)target + done, bytes += 4 * done, count -= done;
    }
#endif
    for (size_t i = 0; i < count; ++i) {
        float const value = uform_load(bytes, source_dtype, i);
        switch (target_dtype) {
        case uform_dtype_f32_k: ((float *)target)[i] = value; break;
        case uform_dtype_bf16_k: ((uint16_t *)target)[i] = uform_f32_to_bf16(value); break;
        case uform_dtype_f16_k: ((uint16_t *)target)[i] = uform_f32_to_f16(value); break;
        default: return;
        }
    }
}
