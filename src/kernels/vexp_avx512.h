/* vexp_avx512.h — 16-wide expf for AVX-512F, max error ~1 ULP.
 *
 * The same algorithm, constants and operation sequence as vexp_avx2.h (see
 * there), on zmm registers: n = round(x log2 e) with the 1.5*2^23 shifter,
 * a two-constant Cody-Waite reduction r = x - n ln2 (exact first step),
 * exp(r) ~ 1 + r + r^2 (c2 + c3 r + c4 r^2 + c5 r^3 + c6 r^4) (minimax
 * coefficients), times 2^n built by shifting n into the exponent field. So
 * it returns exactly the values of mha__vexpf_avx2, lane for lane.
 *
 * Range: x < -87.3 (including -inf) -> exactly 0; x > 88.37 (including
 * +inf) is clamped to 88.37 (~2.4e38, never inf); NaN -> NaN. Measured max
 * error: tests/test_attn_kernels.c (about 1 ULP on [-87, 0]).
 *
 * The function carries target("avx512f") so that it can be called from a
 * function with that attribute in a file built without -mavx512f (the
 * tests); callers must have checked that the CPU (and OS) support AVX-512F.
 * No bit tricks of the Schraudolph kind: every step is an ordinary float op. */
#ifndef MHA_VEXP_AVX512_H
#define MHA_VEXP_AVX512_H

#include <immintrin.h>

__attribute__((target("avx512f"), always_inline)) static inline __m512
mha__vexpf_avx512(__m512 x) {
    const __m512 hi = _mm512_set1_ps(88.37f);
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __m512 log2e = _mm512_set1_ps(0x1.715476p+0f);
    const __m512 shifter = _mm512_set1_ps(0x1.8p23f);
    const __m512 ln2_hi = _mm512_set1_ps(0x1.62e400p-1f);
    const __m512 ln2_lo = _mm512_set1_ps(0x1.7f7d1cp-20f);
    const __m512 c2 = _mm512_set1_ps(0x1.fffffcp-2f);
    const __m512 c3 = _mm512_set1_ps(0x1.555492p-3f);
    const __m512 c4 = _mm512_set1_ps(0x1.5558f2p-5f);
    const __m512 c5 = _mm512_set1_ps(0x1.123a0ep-7f);
    const __m512 c6 = _mm512_set1_ps(0x1.6a2454p-10f);

    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ); /* false for NaN */
    x = _mm512_min_ps(hi, x);                                      /* NaN stays NaN */
    const __m512 z = _mm512_fmadd_ps(x, log2e, shifter);           /* 1.5*2^23 + n */
    const __m512 n = _mm512_sub_ps(z, shifter);
    __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x); /* exact */
    r = _mm512_fnmadd_ps(n, ln2_lo, r);
    const __m512 r2 = _mm512_mul_ps(r, r);
    __m512 p = _mm512_fmadd_ps(c6, r, c5);
    p = _mm512_fmadd_ps(p, r, c4);
    p = _mm512_fmadd_ps(p, r, c3);
    p = _mm512_fmadd_ps(p, r, c2);
    p = _mm512_fmadd_ps(p, r2, r);              /* exp(r) - 1 */
    p = _mm512_add_ps(p, _mm512_set1_ps(1.0f)); /* exp(r) */
    /* 2^n: the low bits of z hold n (two's complement); n in [-126, 127]. */
    const __m512i e = _mm512_add_epi32(_mm512_slli_epi32(_mm512_castps_si512(z), 23),
                                       _mm512_set1_epi32(0x3F800000));
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps((__mmask16)~under, p);
}

#endif
