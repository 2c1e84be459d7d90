/* half.h — the two 16-bit float formats of inference weights, to and from
 * float32, one scalar at a time (the vector loads are the SIMD layers'
 * vf_load_bf16 / vf_load_f16):
 *   bfloat16: float32's top 16 bits (8 exponent bits, 7 mantissa bits);
 *   IEEE binary16 (F16): 5 exponent bits, 10 mantissa bits, max 65504.
 * Widening is exact (every 16-bit value is a float). Narrowing rounds to
 * nearest, ties to even, as torch's .to(torch.bfloat16) / .half() do
 * (c10's round_to_nearest_even and fp16_ieee_from_fp32_value): mha's
 * bf16 weights from an F32 file are the bits of torch's bf16 copy. */
#ifndef MHA_KERNELS_HALF_H
#define MHA_KERNELS_HALF_H

#include <stdint.h>
#include <string.h>

static inline float mha__f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t mha__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float mha__bf16_to_f32(uint16_t h) { return mha__f32_from_bits((uint32_t)h << 16); }

/* NaN gives torch's 0x7FC0 (any sign); otherwise nearest, ties to even
 * (a finite value near FLT_MAX may round to infinity, as in torch). */
static inline uint16_t mha__f32_to_bf16(float f) {
    const uint32_t u = mha__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Exact: subnormals, infinities and NaN payloads kept as c10's
 * fp16_ieee_to_fp32 keeps them. */
static inline float mha__f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        const float v = (float)man * 0x1p-24f; /* zero or subnormal; exact */
        return sign ? -v : v;
    }
    if (exp == 31) return mha__f32_from_bits(sign | 0x7f800000u | (man << 13));
    return mha__f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Nearest, ties to even; beyond 65520 infinity, NaN a quiet NaN. */
static inline uint16_t mha__f32_to_f16(float f) {
    const uint32_t u = mha__f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520: rounds past 65504 */
    if (a < 0x38800000u) {                                    /* below 2^-14: a subnormal half */
        /* the value in units of 2^-24, rounded to nearest even by the FPU's
         * own float addition: a + 0.5 (as a float, 2^-1 being the unit of
         * the sum's last place) leaves the rounded integer in the mantissa */
        const float r = mha__f32_from_bits(a) + 0.5f;
        return (uint16_t)(sign | (mha__f32_bits(r) - 0x3f000000u));
    }
    const uint32_t odd = (a >> 13) & 1u;
    return (uint16_t)(sign | ((a + 0xc8000fffu + odd) >> 13)); /* rebias 127 -> 15 and round */
}

#endif
