/* simd_x86.h — the ops of the SIMD layer that are the same intrinsic on
 * AVX2 and AVX-512 but for its width, written once. Included by
 * simd_avx2.h and simd_avx512.h (the API is listed in simd_avx2.h) after
 * they define:
 *   VW, vf, vi, vm       the width and the vector and mask types
 *   MM(op)               the intrinsic prefix: _mm256_op / _mm512_op
 *   MM_SI(op)            whole-register integer ops: _mm256_op_si256 / ..512
 *   MM_CMP_PS            the float compare: to a vector (AVX2) or a k mask
 *   MM_CASTPS_SI, MM_CASTSI_PS   bit casts between vf and vi
 *   vd, vl, VDW          the double and 64-bit int vectors, their lanes
 *   MM_CASTPD_SI, MM_CASTSI_PD   bit casts between vd and vl */
#ifndef MHA_SIMD_X86_H
#define MHA_SIMD_X86_H

#include <immintrin.h>
#include <stdint.h>

#define VINL __attribute__((always_inline)) static inline

VINL vf vf_load(const float *p) { return MM(load_ps)(p); }
VINL vf vf_loadu(const float *p) { return MM(loadu_ps)(p); }
VINL void vf_store(float *p, vf x) { MM(store_ps)(p, x); }
VINL void vf_storeu(float *p, vf x) { MM(storeu_ps)(p, x); }
VINL vf vf_set1(float x) { return MM(set1_ps)(x); }
VINL vf vf_zero(void) { return MM(setzero_ps)(); }
VINL vf vf_add(vf a, vf b) { return MM(add_ps)(a, b); }
VINL vf vf_sub(vf a, vf b) { return MM(sub_ps)(a, b); }
VINL vf vf_mul(vf a, vf b) { return MM(mul_ps)(a, b); }
VINL vf vf_div(vf a, vf b) { return MM(div_ps)(a, b); }
VINL vf vf_sqrt(vf a) { return MM(sqrt_ps)(a); } /* correctly rounded, as sqrtf */
VINL vf vf_fmadd(vf a, vf b, vf c) { return MM(fmadd_ps)(a, b, c); }
VINL vf vf_fnmadd(vf a, vf b, vf c) { return MM(fnmadd_ps)(a, b, c); }
VINL vf vf_max(vf a, vf b) { return MM(max_ps)(a, b); }
VINL vf vf_min(vf a, vf b) { return MM(min_ps)(a, b); }
VINL vm vf_lt(vf a, vf b) { return MM_CMP_PS(a, b, _CMP_LT_OQ); }
VINL vm vf_eq(vf a, vf b) { return MM_CMP_PS(a, b, _CMP_EQ_OQ); }
VINL vm vf_neq_u(vf a, vf b) { return MM_CMP_PS(a, b, _CMP_NEQ_UQ); }

VINL vi vi_set1(int32_t x) { return MM(set1_epi32)(x); }
VINL vi vi_loadu(const int32_t *p) { return MM_SI(loadu)((const void *)p); }
VINL vi vi_add(vi a, vi b) { return MM(add_epi32)(a, b); }
VINL vi vi_and(vi a, vi b) { return MM_SI(and)(a, b); }
VINL vi vi_xor(vi a, vi b) { return MM_SI(xor)(a, b); }
VINL vi vi_shl(vi a, int n) { return MM(slli_epi32)(a, (unsigned)n); }
VINL vi vi_or(vi a, vi b) { return MM_SI(or)(a, b); }
VINL vi vi_shru(vi a, int n) { return MM(srli_epi32)(a, (unsigned)n); }
VINL vi vi_sar(vi a, int n) { return MM(srai_epi32)(a, (unsigned)n); }
VINL void vi_storeu(int32_t *p, vi x) { MM_SI(storeu)((void *)p, x); }
VINL vi vu_mul_pairs(vi a, vi b) { return MM(mul_epu32)(a, b); }
VINL vi vi_hi_down(vi a) { return MM(srli_epi64)(a, 32); }
VINL vi vf_as_vi(vf x) { return MM_CASTPS_SI(x); }
VINL vf vi_as_vf(vi x) { return MM_CASTSI_PS(x); }

VINL vd vd_loadu(const double *p) { return MM(loadu_pd)(p); }
VINL void vd_storeu(double *p, vd x) { MM(storeu_pd)(p, x); }
VINL vd vd_set1(double x) { return MM(set1_pd)(x); }
VINL vd vd_add(vd a, vd b) { return MM(add_pd)(a, b); }
VINL vd vd_sub(vd a, vd b) { return MM(sub_pd)(a, b); }
VINL vd vd_mul(vd a, vd b) { return MM(mul_pd)(a, b); }
VINL vd vd_max(vd a, vd b) { return MM(max_pd)(a, b); }
VINL vd vd_min(vd a, vd b) { return MM(min_pd)(a, b); }
VINL vd vd_fmadd(vd a, vd b, vd c) { return MM(fmadd_pd)(a, b, c); }
VINL vd vd_fnmadd(vd a, vd b, vd c) { return MM(fnmadd_pd)(a, b, c); }
VINL vl vd_as_vl(vd x) { return MM_CASTPD_SI(x); }
VINL vd vl_as_vd(vl x) { return MM_CASTSI_PD(x); }
VINL vl vl_add(vl a, vl b) { return MM(add_epi64)(a, b); }
VINL vl vl_shl(vl a, int n) { return MM(slli_epi64)(a, (unsigned)n); }

/* The first two stages of vf_sum_lanes8's transpose (each layer adds the
 * last): rows 0-3 into v[e], rows 4-7 into w[e], whose 128-bit lane q holds
 * the four rows' lane 4q + e. */
VINL void vf_transpose_quads8(const vf a[8], vf v[4], vf w[4]) {
    vd u[8]; /* rows 2p and 2p + 1 interleaved: u[2p] their lanes 4q + {0, 1}, u[2p + 1] 4q + {2, 3} */
    for (int p = 0; p < 4; p++) {
        u[2 * p] = MM(castps_pd)(MM(unpacklo_ps)(a[2 * p], a[2 * p + 1]));
        u[2 * p + 1] = MM(castps_pd)(MM(unpackhi_ps)(a[2 * p], a[2 * p + 1]));
    }
    for (int h = 0; h < 2; h++) {
        vf *o = h ? w : v;
        const vd *x = u + 4 * h;
        o[0] = MM(castpd_ps)(MM(unpacklo_pd)(x[0], x[2]));
        o[1] = MM(castpd_ps)(MM(unpackhi_pd)(x[0], x[2]));
        o[2] = MM(castpd_ps)(MM(unpacklo_pd)(x[1], x[3]));
        o[3] = MM(castpd_ps)(MM(unpackhi_pd)(x[1], x[3]));
    }
}

#endif
