/* vexp_avx2.h — 8-wide expf for AVX2/FMA, max error ~1 ULP.
 *
 * exp(x) = 2^n * exp(r), n = round(x * log2 e), r = x - n ln2 with a
 * two-constant Cody-Waite split of ln2 (ln2_hi has 9 trailing zero bits, so
 * x - n*ln2_hi is exact), |r| <= ln2/2 + tiny, and
 *   exp(r) ~ 1 + r + r^2 (c2 + c3 r + c4 r^2 + c5 r^3 + c6 r^4),
 * a degree-6 polynomial whose c2..c6 were fitted to minimise the maximum
 * relative error on [-ln2/2, ln2/2] (Lawson iteration; 3.7e-9 with the
 * coefficients rounded to float, far below the evaluation error).
 * The rounding to n uses the 1.5*2^23 shifter (one FMA); 2^n is built by
 * shifting n into the exponent field.
 *
 * Range: x < -87.3 (including -inf) -> exactly 0 (the result would be
 * subnormal or within 2% of FLT_MIN; flushing keeps everything normal);
 * x > 88.37 (including +inf) is clamped to 88.37 (result ~2.4e38, never
 * inf: n stays <= 127, so 2^n is a normal float); NaN -> NaN. The softmax
 * only evaluates x <= 0.
 * Measured max error on [-87, 0] against double exp: see
 * tests/test_attn_kernels.c (about 1 ULP).
 *
 * The function carries target("avx2,fma") so that it can also be called
 * from a function with that attribute in a file built without -mavx2 (the
 * tests); callers must have checked that the CPU has AVX2 and FMA. No bit
 * tricks of the Schraudolph kind: every step is an ordinary float op. */
#ifndef MHA_VEXP_AVX2_H
#define MHA_VEXP_AVX2_H

#include <immintrin.h>

__attribute__((target("avx2,fma"), always_inline)) static inline __m256
mha__vexpf_avx2(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.37f);
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 log2e = _mm256_set1_ps(0x1.715476p+0f);
    const __m256 shifter = _mm256_set1_ps(0x1.8p23f);
    const __m256 ln2_hi = _mm256_set1_ps(0x1.62e400p-1f);
    const __m256 ln2_lo = _mm256_set1_ps(0x1.7f7d1cp-20f);
    const __m256 c2 = _mm256_set1_ps(0x1.fffffcp-2f);
    const __m256 c3 = _mm256_set1_ps(0x1.555492p-3f);
    const __m256 c4 = _mm256_set1_ps(0x1.5558f2p-5f);
    const __m256 c5 = _mm256_set1_ps(0x1.123a0ep-7f);
    const __m256 c6 = _mm256_set1_ps(0x1.6a2454p-10f);

    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ); /* false for NaN */
    x = _mm256_min_ps(hi, x);                              /* NaN stays NaN */
    const __m256 z = _mm256_fmadd_ps(x, log2e, shifter);   /* 1.5*2^23 + n */
    const __m256 n = _mm256_sub_ps(z, shifter);
    __m256 r = _mm256_fnmadd_ps(n, ln2_hi, x); /* exact */
    r = _mm256_fnmadd_ps(n, ln2_lo, r);
    const __m256 r2 = _mm256_mul_ps(r, r);
    __m256 p = _mm256_fmadd_ps(c6, r, c5);
    p = _mm256_fmadd_ps(p, r, c4);
    p = _mm256_fmadd_ps(p, r, c3);
    p = _mm256_fmadd_ps(p, r, c2);
    p = _mm256_fmadd_ps(p, r2, r);                 /* exp(r) - 1 */
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));    /* exp(r) */
    /* 2^n: the low bits of z hold n (two's complement); n in [-126, 127]. */
    const __m256i e = _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(z), 23),
                                       _mm256_set1_epi32(0x3F800000));
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, p);
}

#endif
