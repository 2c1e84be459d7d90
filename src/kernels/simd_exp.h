/* simd_exp.h — expf on a SIMD layer (include simd_avx2.h, simd_avx512.h or
 * tests/simd_gen16.h first), max error ~1 ULP. Written once, so every
 * layer returns the same bits lane for lane.
 *
 * exp(x) = 2^n * exp(r), n = round(x * log2 e), r = x - n ln2 with a
 * two-constant Cody-Waite split of ln2 (ln2_hi has 9 trailing zero bits, so
 * x - n*ln2_hi is exact), |r| <= ln2/2 + tiny, and
 *   exp(r) ~ 1 + r + r^2 (c2 + c3 r + c4 r^2 + c5 r^3 + c6 r^4),
 * a degree-6 polynomial whose c2..c6 were fitted to minimise the maximum
 * relative error on [-ln2/2, ln2/2] (Lawson iteration; 3.7e-9 with the
 * coefficients rounded to float, far below the evaluation error).
 * The rounding to n uses the 1.5*2^23 shifter (one FMA); 2^n is built by
 * shifting n into the exponent field (on AVX-512, applied by vscalefps).
 *
 * Range: x < -87.3 (including -inf) -> exactly 0 (the result would be
 * subnormal or within 2% of FLT_MIN; flushing keeps everything normal);
 * x > 88.37 (including +inf) is clamped to 88.37 (result ~2.4e38, never
 * inf: n stays <= 127, so 2^n is a normal float); NaN -> NaN. The softmax
 * only evaluates x <= 0.
 * Measured max error on [-87, 0] against double exp: see
 * tests/test_attn_kernels.c (about 1 ULP).
 * No bit tricks of the Schraudolph kind: every step is an ordinary float op.
 * vf_expm1 and vf_tanh (GELU's) are built on the same reduction. */
#ifndef MHA_SIMD_EXP_H
#define MHA_SIMD_EXP_H

#ifndef VW
#error "include a SIMD layer (simd_avx2.h, simd_avx512.h) before simd_exp.h"
#endif

/* The shared reduction, on an x already clamped to [-87.3, 88.37] (or
 * NaN): the return value exp(r) - 1, *n = n and *z = 1.5*2^23 + n (whose
 * low bits hold n) with exp(x) = 2^n exp(r). */
VINL vf vf_exp_poly(vf x, vf *n, vf *z) {
    const vf log2e = vf_set1(0x1.715476p+0f);
    const vf shifter = vf_set1(0x1.8p23f);
    const vf ln2_hi = vf_set1(0x1.62e400p-1f);
    const vf ln2_lo = vf_set1(0x1.7f7d1cp-20f);
    const vf c2 = vf_set1(0x1.fffffcp-2f);
    const vf c3 = vf_set1(0x1.555492p-3f);
    const vf c4 = vf_set1(0x1.5558f2p-5f);
    const vf c5 = vf_set1(0x1.123a0ep-7f);
    const vf c6 = vf_set1(0x1.6a2454p-10f);

    *z = vf_fmadd(x, log2e, shifter); /* 1.5*2^23 + n */
    *n = vf_sub(*z, shifter);
    vf r = vf_fnmadd(*n, ln2_hi, x); /* exact */
    r = vf_fnmadd(*n, ln2_lo, r);
    const vf r2 = vf_mul(r, r);
    vf p = vf_fmadd(c6, r, c5);
    p = vf_fmadd(p, r, c4);
    p = vf_fmadd(p, r, c3);
    p = vf_fmadd(p, r, c2);
    return vf_fmadd(p, r2, r); /* exp(r) - 1 */
}

/* 2^n from z: the low bits of z hold n (two's complement); n in [-126, 127]. */
VINL vf vf_exp_pow2(vf z) { return vi_as_vf(vi_add(vi_shl(vf_as_vi(z), 23), vi_set1(0x3F800000))); }

/* *p2n = 2^n (a normal float), the return value exp(r) - 1. */
VINL vf vf_exp_reduce(vf x, vf *p2n) {
    vf n, z;
    const vf p = vf_exp_poly(x, &n, &z);
    *p2n = vf_exp_pow2(z);
    return p;
}

/* exp(x) for x <= 88.37 or NaN, vf_exp without its upper clamp (the
 * attention's softmax calls it directly: its s - max is never above 0).
 * On a layer with vscalefps (VF_HAS_SCALEF) exp(r) 2^n is one instruction
 * instead of building 2^n and multiplying: both round the same exact
 * product once, so every layer gives the same bits (test_attn_kernels
 * compares vf_exp on AVX-512 and on the emulation with AVX2's, and this
 * with vf_exp). 3 of the 19 vector operations of the attention forward's
 * exp pass; on a 2-core Intel Xeon with AVX-512 bench_attn_core (8, 1024)
 * ran 61.3-61.8 ms against 62.4-63.6. */
VINL vf vf_exp_nonpos(vf x) {
    const vm under = vf_lt(x, vf_set1(-87.3f)); /* false for NaN */
    vf n, z;
    const vf p = vf_add(vf_exp_poly(x, &n, &z), vf_set1(1.0f)); /* exp(r) */
#ifdef VF_HAS_SCALEF
    (void)z;
    return vf_scalef_zero_where(under, p, n);
#else
    (void)n;
    return vf_zero_where(under, vf_mul(p, vf_exp_pow2(z)));
#endif
}

VINL vf vf_exp(vf x) { return vf_exp_nonpos(vf_min(vf_set1(88.37f), x)); /* NaN stays NaN */ }

/* expm1(x) = exp(x) - 1 without the cancellation near 0: 2^n (exp(r) - 1)
 * + (2^n - 1) in one FMA, where 2^n - 1 is exact for the n that matter
 * (|n| <= 24) and exp(r) - 1 is the reduction's own polynomial. Below
 * -87.3 the result is -1 (exactly what exp(x) - 1 rounds to); above 88.37
 * it is clamped like vf_exp's; NaN -> NaN. A few ULP (tests/test_elementwise.c
 * measures it through vf_tanh). */
VINL vf vf_expm1(vf x) {
    x = vf_max(vf_set1(-87.3f), x); /* NaN stays NaN (max keeps b when unordered) */
    x = vf_min(vf_set1(88.37f), x);
    vf s;
    const vf p = vf_exp_reduce(x, &s);
    return vf_fmadd(s, p, vf_sub(s, vf_set1(1.0f)));
}

/* tanh(u) = sign(u) * -e / (e + 2), e = expm1(-2|u|) in (-1, 0]: no
 * cancellation anywhere (e + 2 is in (1, 2]), so the relative error is
 * expm1's plus two roundings, a few ULP, down to the smallest |u| (where e
 * = -2|u| exactly and the quotient is |u|). |u| above ~9 gives exactly 1;
 * +-inf gives +-1; NaN gives NaN; -0 gives -0 (the sign is copied as a bit). */
VINL vf vf_tanh(vf u) {
    const vi sign = vi_and(vf_as_vi(u), vi_set1(INT32_MIN));
    const vf a = vi_as_vf(vi_xor(vf_as_vi(u), sign)); /* |u| */
    const vf e = vf_expm1(vf_mul(a, vf_set1(-2.0f)));
    const vf t = vf_div(vf_sub(vf_zero(), e), vf_add(e, vf_set1(2.0f)));
    return vi_as_vf(vi_xor(vf_as_vi(t), sign));
}

/* exp(x) in double for x <= 0 (the cross-entropy's exp(z - max z)), max
 * error about 1 ULP of double: the same reduction in double, n = round(x
 * log2 e) by the 1.5*2^52 shifter, r = x - n ln2 with fdlibm's split of ln2
 * (ln2_hi has 32 trailing zero bits: n ln2_hi is exact), and exp(r) = 1 + r
 * + r^2 (1/2! + r/3! + ... + r^11/13!), Taylor to degree 13 (truncation
 * below 5e-18 on |r| <= 0.347). The result is (1 + p) 2^(n+54) 2^-54: the
 * first factor is a normal double for every n >= -1076, the second product
 * rounds once, into the subnormals where exp(x) lies there.
 * Range: x is clamped to [-746, 0] first, so x < -746 (including -inf)
 * gives exactly 0, as exp rounds there, and x > 0 gives 1 (outside the
 * domain); NaN -> NaN (the clamps keep their second operand). */
VINL vd vd_exp_neg(vd x) {
    const vd log2e = vd_set1(0x1.71547652b82fep+0);
    const vd shifter = vd_set1(0x1.8p52);
    const vd ln2_hi = vd_set1(0x1.62e42feep-1);
    const vd ln2_lo = vd_set1(0x1.a39ef35793c76p-33);
    x = vd_max(vd_set1(-746.0), x);
    x = vd_min(vd_set1(0.0), x);
    const vd t = vd_fmadd(x, log2e, shifter); /* 1.5*2^52 + n */
    const vd n = vd_sub(t, shifter);
    vd r = vd_fnmadd(n, ln2_hi, x); /* exact */
    r = vd_fnmadd(n, ln2_lo, r);
    vd p = vd_set1(1.0 / 6227020800.0); /* 1/13! */
    static const double inv_fact[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                                      1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                                      1.0 / 24.0,        1.0 / 6.0,        0.5}; /* 1/12! .. 1/2! */
    for (int i = 0; i < 11; i++) p = vd_fmadd(p, r, vd_set1(inv_fact[i]));
    p = vd_fmadd(p, vd_mul(r, r), r); /* exp(r) - 1 */
    /* 2^(n+54): the low bits of t hold n (two's complement), n in [-1076, 0] */
    const vd s = vl_as_vd(vl_shl(vl_add(vd_as_vl(t), vl_set1(1023 + 54)), 52));
    return vd_mul(vd_fmadd(p, s, s), vd_set1(0x1p-54));
}

#endif
