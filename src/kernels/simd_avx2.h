/* simd_avx2.h — the SIMD layer on AVX2/FMA: 8 float lanes per vector.
 *
 * simd_avx512.h and tests/simd_gen16.h define the same names for other
 * widths; a kernel body (attn_fwd_body.h, simd_exp.h) written on them is
 * compiled once per layer. One translation unit includes one layer. The
 * ops that are one intrinsic on both x86 layers are in simd_x86.h; this
 * file has the types and the ops that differ (masks are vectors here).
 *
 *   vf, vi, vm      float vector, 32-bit int vector, lane mask (here a vf
 *                   whose lanes are all ones or all zeros, as cmp_ps gives)
 *   VW              lanes per vector
 *   vf_load/store   aligned to the vector's size (32 bytes here); _u: unaligned
 *   vf_set1/zero/bcast, add/sub/mul/div/min/max, fmadd (a*b+c, fused),
 *   fnmadd (c-a*b, fused)
 *   vf_lt, vf_eq    ordered compares (false on NaN); vf_neq_u: unordered
 *   vf_select(m,a,b) m ? a : b;  vf_keep(m,x) m ? x : 0;
 *   vf_zero_where(m,x) m ? 0 : x;  vm_any(m): some lane set;  vm_or
 *   vi_set1/iota (0, 1, .., VW-1)/loadu/storeu/add/and/or/xor/shl, shru
 *   and sar (logical and arithmetic right shifts), vf_as_vi/vi_as_vf
 *   (bit casts), vi_lt (signed), vu_lt (unsigned), vi_xor3(a, b, c),
 *   vu_mul_pairs(a, b): lanes 2i and 2i+1 the low and high 32 bits of
 *   a[2i] * b[2i] unsigned (the odd lanes of a and b not read),
 *   vi_hi_down(a): lane 2i = a[2i+1], lane 2i+1 = 0, vi_pair_evens(a, b):
 *   lane 2i = a[2i], lane 2i+1 = b[2i],
 *   vi_test(a, bit): lanes where a & bit != 0 (bit: one bit set per lane),
 *   vi_eq(a, b): lanes where a == b; vm_bits(m): lane i of m as bit i;
 *   vi_evens(a, b): the even lanes of a, then those of b (a0 a2 .. b0 b2 ..).
 *   vi_xor_and(a, b, c): a ^ (b & c),
 *   vi_alignr(hi, lo, s): lanes s .. s+VW-1 of lo's lanes followed by hi's
 *   (0 <= s < VW, a constant: a macro, as the immediate needs).
 *   vf_load_bf16/f16(p): VW 16-bit floats (kernels/half.h) at p, widened
 *   exactly (unaligned).
 *   vd, vl          double vector and 64-bit int vector, VDW = VW / 2 lanes:
 *   vd_load_f(p)    VDW floats at p widened exactly (unaligned);
 *   vd_store_f(p,x) x rounded to float (to nearest) into VDW floats at p;
 *   vd_loadu/storeu (doubles, unaligned), vd_set1, vd_add/sub/mul/max/min,
 *   vd_fmadd, vd_fnmadd (as vf's), vd_as_vl/vl_as_vd (bit casts), vl_set1,
 *   vl_add, vl_shl (64-bit lanes).
 * Every op is lane-wise; the max and min keep the x86 operand order
 * (max(a, b) = a > b ? a : b, so NaN in a gives b). */
#ifndef MHA_SIMD_AVX2_H
#define MHA_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd_avx2.h needs -mavx2 -mfma -mf16c"
#endif

#define VW 8
#define VDW 4
typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vm;
typedef __m256d vd;
typedef __m256i vl;

#define MM(op) _mm256_##op
#define MM_SI(op) _mm256_##op##_si256
#define MM_CMP_PS _mm256_cmp_ps
#define MM_CASTPS_SI _mm256_castps_si256
#define MM_CASTSI_PS _mm256_castsi256_ps
#define MM_CASTPD_SI _mm256_castpd_si256
#define MM_CASTSI_PD _mm256_castsi256_pd
#include "simd_x86.h"

VINL vf vf_bcast(const float *p) { return _mm256_broadcast_ss(p); }
VINL vf vf_select(vm m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); }
VINL vf vf_keep(vm m, vf x) { return _mm256_and_ps(x, m); }
VINL vf vf_zero_where(vm m, vf x) { return _mm256_andnot_ps(m, x); }
VINL int vm_any(vm m) { return _mm256_movemask_ps(m); }
VINL vm vm_or(vm a, vm b) { return _mm256_or_ps(a, b); }

VINL vf vf_load_bf16(const uint16_t *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
VINL vf vf_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p)); }

VINL vd vd_load_f(const float *p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
VINL void vd_store_f(float *p, vd x) { _mm_storeu_ps(p, _mm256_cvtpd_ps(x)); }
VINL vl vl_set1(int64_t x) { return _mm256_set1_epi64x(x); }

VINL vi vi_iota(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
VINL vm vi_lt(vi a, vi b) { return _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, a)); }
VINL vm vu_lt(vi a, vi b) { /* flip the sign bits: unsigned order as signed */
    const __m256i sign = _mm256_set1_epi32(INT32_MIN);
    return _mm256_castsi256_ps(
        _mm256_cmpgt_epi32(_mm256_xor_si256(b, sign), _mm256_xor_si256(a, sign)));
}
VINL vm vi_test(vi a, vi bit) {
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(a, bit), bit));
}
VINL vm vi_eq(vi a, vi b) { return _mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)); }
VINL unsigned vm_bits(vm m) { return (unsigned)_mm256_movemask_ps(m); }
VINL vi vi_evens(vi a, vi b) { /* a0 a2 b0 b2 | a4 a6 b4 b6, then the middle quads swapped */
    const __m256 e = _mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0x88);
    return _mm256_permute4x64_epi64(_mm256_castps_si256(e), 0xD8);
}
VINL vi vi_xor3(vi a, vi b, vi c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
VINL vi vi_xor_and(vi a, vi b, vi c) { return _mm256_xor_si256(a, _mm256_and_si256(b, c)); }
VINL vi vi_pair_evens(vi a, vi b) { return _mm256_blend_epi32(a, _mm256_slli_epi64(b, 32), 0xAA); }
/* The middle halves (lo's upper 128 bits, hi's lower), then a byte shift
 * within each 128-bit lane from the pair that holds lanes s .. s+3 there. */
#define vi_alignr(hi, lo, s)                                                                              \
    ((s) < 4 ? _mm256_alignr_epi8(_mm256_permute2x128_si256((lo), (hi), 0x21), (lo), ((s) * 4) & 15)      \
             : _mm256_alignr_epi8((hi), _mm256_permute2x128_si256((lo), (hi), 0x21), (((s) - 4) * 4) & 15))

/* simd_lanes.h's vf_sum_lanes8, the same bits: the eight vectors
 * transposed into eight columns (column j holds lane j of each), then the
 * columns added in order, eight chains in one register. */
#define VF_SUM_LANES8
VINL void vf_sum_lanes8(const vf a[8], float s[8]) {
    vf v[4], w[4];
    vf_transpose_quads8(a, v, w);
    __m256 c[8]; /* c[j]: lane j of rows 0-7 */
    for (int e = 0; e < 4; e++) {
        c[e] = _mm256_permute2f128_ps(v[e], w[e], 0x20);
        c[4 + e] = _mm256_permute2f128_ps(v[e], w[e], 0x31);
    }
    __m256 t = c[0];
    for (int j = 1; j < 8; j++) t = _mm256_add_ps(t, c[j]);
    _mm256_storeu_ps(s, t);
}

#endif
