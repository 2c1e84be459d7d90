/* simd_gen16.h — a portable 16-lane emulation of src/kernels/simd_avx512.h
 * (GCC vector extensions, one C expression per lane), test-only.
 *
 * Same names and meaning (listed in simd_avx2.h); every op does lane for
 * lane what the AVX-512 intrinsic in simd_avx512.h does, including the
 * corners: the mask is a 16-bit lane mask like __mmask16; vf_max(a, b) is
 * a > b ? a : b and vf_min(a, b) a < b ? a : b (vmaxps/vminps: the second
 * operand when unordered or equal); compares are ordered except vf_neq_u;
 * vf_fmadd is one fused multiply-add per lane (fmaf, a single rounding,
 * never mul then add); vf_load/vf_store dereference a 64-byte vector type,
 * so a misaligned pointer is as wrong here as for vmovaps (UBSan reports
 * it); the int vector is unsigned so that adds and shifts wrap as the
 * hardware's do. So the kernel body compiled on this layer must give the
 * bits the AVX-512 kernel gives: tests/test_attn_kernels.c relies on it to
 * test that kernel on machines without AVX-512. */
#ifndef MHA_SIMD_GEN16_H
#define MHA_SIMD_GEN16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/half.h"

/* 64-byte vectors are passed and returned by value only between these
 * always-inline functions, never across an ABI boundary: GCC's note that
 * their ABI differs without -mavx512f does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

#define VW 16
#define VINL __attribute__((always_inline)) static inline

#define VDW 8
typedef float vf __attribute__((vector_size(64)));
typedef uint32_t vi __attribute__((vector_size(64)));
typedef uint16_t vm;
typedef double vd __attribute__((vector_size(64)));
typedef uint64_t vl __attribute__((vector_size(64)));

VINL vf vf_load(const float *p) { return *(const vf *)(const void *)p; }
VINL vf vf_loadu(const float *p) {
    vf x;
    memcpy(&x, p, sizeof x);
    return x;
}
/* vpmovzxwd + vpslld 16, and vcvtph2ps: exact, lane for lane */
VINL vf vf_load_bf16(const uint16_t *p) {
    vf x;
    for (int i = 0; i < VW; i++) x[i] = mha__bf16_to_f32(p[i]);
    return x;
}
VINL vf vf_load_f16(const uint16_t *p) {
    vf x;
    for (int i = 0; i < VW; i++) x[i] = mha__f16_to_f32(p[i]);
    return x;
}
VINL void vf_store(float *p, vf x) { *(vf *)(void *)p = x; }
VINL void vf_storeu(float *p, vf x) { memcpy(p, &x, sizeof x); }
VINL vf vf_set1(float x) {
    vf r;
    for (int i = 0; i < VW; i++) r[i] = x;
    return r;
}
VINL vf vf_zero(void) { return vf_set1(0.0f); }
VINL vf vf_bcast(const float *p) { return vf_set1(*p); }
VINL vf vf_add(vf a, vf b) { return a + b; }
VINL vf vf_sub(vf a, vf b) { return a - b; }
VINL vf vf_mul(vf a, vf b) { return a * b; }
VINL vf vf_div(vf a, vf b) { return a / b; }
VINL vf vf_fmadd(vf a, vf b, vf c) {
    vf r;
    for (int i = 0; i < VW; i++) r[i] = fmaf(a[i], b[i], c[i]);
    return r;
}
VINL vf vf_fnmadd(vf a, vf b, vf c) { /* -(a*b) + c, one rounding */
    vf r;
    for (int i = 0; i < VW; i++) r[i] = fmaf(-a[i], b[i], c[i]);
    return r;
}
VINL vf vf_max(vf a, vf b) {
    vf r;
    for (int i = 0; i < VW; i++) r[i] = a[i] > b[i] ? a[i] : b[i];
    return r;
}
VINL vf vf_min(vf a, vf b) {
    vf r;
    for (int i = 0; i < VW; i++) r[i] = a[i] < b[i] ? a[i] : b[i];
    return r;
}

/* Lane i of a mask is bit i. */
#define GEN16_MASK(expr)                                                                        \
    vm m_ = 0;                                                                                  \
    for (int i = 0; i < VW; i++)                                                                \
        if (expr) m_ = (vm)(m_ | (1u << i));                                                    \
    return m_
VINL vm vf_lt(vf a, vf b) { GEN16_MASK(a[i] < b[i]); }
VINL vm vf_eq(vf a, vf b) { GEN16_MASK(a[i] == b[i]); }
VINL vm vf_neq_u(vf a, vf b) { GEN16_MASK(!(a[i] == b[i])); }
VINL vm vi_lt(vi a, vi b) { GEN16_MASK((int32_t)a[i] < (int32_t)b[i]); }
VINL vm vu_lt(vi a, vi b) { GEN16_MASK(a[i] < b[i]); }
VINL vm vi_test(vi a, vi bit) { GEN16_MASK((a[i] & bit[i]) != 0); }
VINL vm vi_eq(vi a, vi b) { GEN16_MASK(a[i] == b[i]); }
#undef GEN16_MASK

VINL vf vf_select(vm m, vf a, vf b) {
    vf r;
    for (int i = 0; i < VW; i++) r[i] = (m >> i) & 1u ? a[i] : b[i];
    return r;
}
VINL vf vf_keep(vm m, vf x) { return vf_select(m, x, vf_zero()); }
VINL vf vf_zero_where(vm m, vf x) { return vf_select(m, vf_zero(), x); }
VINL int vm_any(vm m) { return m != 0; }
VINL vm vm_or(vm a, vm b) { return (vm)(a | b); }
/* vscalefps (Intel SDM's table of special cases): a NaN a gives a quieted,
 * else a NaN b gives b quieted; b = +inf scales to +-inf (0 * 2^inf: NaN),
 * b = -inf to +-0 (inf * 2^-inf: NaN); otherwise a * 2^floor(b) rounded
 * once, as ldexpf does (floor(b) clamped where the result is 0 or inf
 * either way). */
#define VF_HAS_SCALEF 1
VINL vf vf_scalef_zero_where(vm m, vf a, vf b) {
    vf r;
    for (int i = 0; i < VW; i++) {
        const float x = a[i], y = b[i];
        float v;
        if (isnan(x)) v = x + 0.0f; /* quieted */
        else if (isnan(y)) v = y + 0.0f;
        else if (isinf(y) && y > 0) v = x == 0.0f ? NAN : copysignf(INFINITY, x);
        else if (isinf(y)) v = isinf(x) ? NAN : copysignf(0.0f, x);
        else {
            const float f = floorf(y);
            v = ldexpf(x, f > 400.0f ? 400 : f < -400.0f ? -400 : (int)f);
        }
        r[i] = (m >> i) & 1u ? 0.0f : v;
    }
    return r;
}
VINL unsigned vm_bits(vm m) { return m; }

VINL vi vi_set1(int32_t x) {
    vi r;
    for (int i = 0; i < VW; i++) r[i] = (uint32_t)x;
    return r;
}
VINL vi vi_iota(void) {
    vi r;
    for (int i = 0; i < VW; i++) r[i] = (uint32_t)i;
    return r;
}
VINL vi vi_loadu(const int32_t *p) {
    vi x;
    memcpy(&x, p, sizeof x);
    return x;
}
VINL vi vi_add(vi a, vi b) { return a + b; }
VINL vi vi_and(vi a, vi b) { return a & b; }
VINL vi vi_xor(vi a, vi b) { return a ^ b; }
VINL vi vi_shl(vi a, int n) { return a << (uint32_t)n; } /* 0 <= n < 32 */
VINL vi vi_or(vi a, vi b) { return a | b; }
VINL vi vi_shru(vi a, int n) { return a >> (uint32_t)n; } /* lanes are uint32_t */
VINL vi vi_sar(vi a, int n) {
    vi r;
    for (int i = 0; i < VW; i++) r[i] = (uint32_t)((int32_t)a[i] >> n);
    return r;
}
VINL void vi_storeu(int32_t *p, vi x) { memcpy(p, &x, sizeof x); }
VINL vi vi_evens(vi a, vi b) {
    vi r;
    for (int i = 0; i < VW / 2; i++) {
        r[i] = a[2 * i];
        r[VW / 2 + i] = b[2 * i];
    }
    return r;
}
VINL vi vf_as_vi(vf x) { return (vi)x; }
VINL vf vi_as_vf(vi x) { return (vf)x; }
VINL vi vi_xor3(vi a, vi b, vi c) { return a ^ b ^ c; }
VINL vi vi_xor_and(vi a, vi b, vi c) { return a ^ (b & c); } /* vpternlogd 0x78 */
VINL vi vi_alignr(vi hi, vi lo, int s) { /* valignd */
    vi r;
    for (int i = 0; i < VW; i++) r[i] = i + s < VW ? lo[i + s] : hi[i + s - VW];
    return r;
}
VINL vi vu_mul_pairs(vi a, vi b) { /* vpmuludq */
    vi r;
    for (int i = 0; i < VW; i += 2) {
        const uint64_t p = (uint64_t)a[i] * b[i];
        r[i] = (uint32_t)p;
        r[i + 1] = (uint32_t)(p >> 32);
    }
    return r;
}
VINL vi vi_hi_down(vi a) { /* vpsrlq 32 */
    vi r;
    for (int i = 0; i < VW; i += 2) {
        r[i] = a[i + 1];
        r[i + 1] = 0;
    }
    return r;
}
VINL vi vi_pair_evens(vi a, vi b) {
    vi r = a;
    for (int i = 0; i < VW; i += 2) r[i + 1] = b[i];
    return r;
}

/* The double lanes: vcvtps2pd / vcvtpd2ps (to nearest), vmaxpd / vminpd
 * with the float ones' operand order, one fma per lane. */
VINL vd vd_load_f(const float *p) {
    vd x;
    for (int i = 0; i < VDW; i++) x[i] = (double)p[i];
    return x;
}
VINL void vd_store_f(float *p, vd x) {
    for (int i = 0; i < VDW; i++) p[i] = (float)x[i];
}
VINL vd vd_loadu(const double *p) {
    vd x;
    memcpy(&x, p, sizeof x);
    return x;
}
VINL void vd_storeu(double *p, vd x) { memcpy(p, &x, sizeof x); }
VINL vd vd_set1(double x) {
    vd r;
    for (int i = 0; i < VDW; i++) r[i] = x;
    return r;
}
VINL vd vd_add(vd a, vd b) { return a + b; }
VINL vd vd_sub(vd a, vd b) { return a - b; }
VINL vd vd_mul(vd a, vd b) { return a * b; }
VINL vd vd_max(vd a, vd b) {
    vd r;
    for (int i = 0; i < VDW; i++) r[i] = a[i] > b[i] ? a[i] : b[i];
    return r;
}
VINL vd vd_min(vd a, vd b) {
    vd r;
    for (int i = 0; i < VDW; i++) r[i] = a[i] < b[i] ? a[i] : b[i];
    return r;
}
VINL vd vd_fmadd(vd a, vd b, vd c) {
    vd r;
    for (int i = 0; i < VDW; i++) r[i] = fma(a[i], b[i], c[i]);
    return r;
}
VINL vd vd_fnmadd(vd a, vd b, vd c) {
    vd r;
    for (int i = 0; i < VDW; i++) r[i] = fma(-a[i], b[i], c[i]);
    return r;
}
VINL vl vd_as_vl(vd x) { return (vl)x; }
VINL vd vl_as_vd(vl x) { return (vd)x; }
VINL vl vl_set1(int64_t x) {
    vl r;
    for (int i = 0; i < VDW; i++) r[i] = (uint64_t)x;
    return r;
}
VINL vl vl_add(vl a, vl b) { return a + b; }
VINL vl vl_shl(vl a, int n) { return a << (uint64_t)n; } /* 0 <= n < 64 */

#endif
