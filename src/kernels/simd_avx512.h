/* simd_avx512.h — the SIMD layer on AVX-512 (F, BW, DQ, VL): 16 float lanes
 * per vector, masks in k registers (__mmask16, one bit per lane).
 *
 * The names and their meaning are simd_avx2.h's (the list is there);
 * vf_load/vf_store need 64-byte alignment. The ops that are one intrinsic
 * on both x86 layers are in simd_x86.h; here are the types and the ops
 * that differ. tests/simd_gen16.h emulates
 * this file op for op in portable C, so that the kernel body compiled on
 * this layer is tested on machines without AVX-512: keep the two in step. */
#ifndef MHA_SIMD_AVX512_H
#define MHA_SIMD_AVX512_H

#include <immintrin.h>
#include <stdint.h>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__FMA__)
#error "simd_avx512.h needs -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma"
#endif

#define VW 16
#define VDW 8
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vm;
typedef __m512d vd;
typedef __m512i vl;

#define MM(op) _mm512_##op
#define MM_SI(op) _mm512_##op##_si512
#define MM_CMP_PS _mm512_cmp_ps_mask
#define MM_CASTPS_SI _mm512_castps_si512
#define MM_CASTSI_PS _mm512_castsi512_ps
#define MM_CASTPD_SI _mm512_castpd_si512
#define MM_CASTSI_PD _mm512_castsi512_pd
#include "simd_x86.h"

VINL vf vf_bcast(const float *p) { return _mm512_set1_ps(*p); }
VINL vf vf_select(vm m, vf a, vf b) { return _mm512_mask_mov_ps(b, m, a); }
VINL vf vf_keep(vm m, vf x) { return _mm512_maskz_mov_ps(m, x); }
VINL vf vf_zero_where(vm m, vf x) { return _mm512_maskz_mov_ps((__mmask16)~m, x); }
VINL int vm_any(vm m) { return m != 0; }
VINL vm vm_or(vm a, vm b) { return (vm)(a | b); }
/* m ? 0 : a * 2^floor(b), rounded once (vscalefps; simd_exp.h's exp uses
 * it where a layer has it: VF_HAS_SCALEF) */
#define VF_HAS_SCALEF 1
VINL vf vf_scalef_zero_where(vm m, vf a, vf b) { return _mm512_maskz_scalef_ps((__mmask16)~m, a, b); }

VINL vf vf_load_bf16(const uint16_t *p) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
VINL vf vf_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p)); }

VINL vd vd_load_f(const float *p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
VINL void vd_store_f(float *p, vd x) { _mm256_storeu_ps(p, _mm512_cvtpd_ps(x)); }
VINL vl vl_set1(int64_t x) { return _mm512_set1_epi64(x); }

VINL vi vi_iota(void) {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
VINL vm vi_lt(vi a, vi b) { return _mm512_cmplt_epi32_mask(a, b); }
VINL vm vu_lt(vi a, vi b) { return _mm512_cmplt_epu32_mask(a, b); }
VINL vm vi_test(vi a, vi bit) { return _mm512_test_epi32_mask(a, bit); }
VINL vm vi_eq(vi a, vi b) { return _mm512_cmpeq_epi32_mask(a, b); }
VINL unsigned vm_bits(vm m) { return (unsigned)m; }
VINL vi vi_evens(vi a, vi b) {
    const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_epi32(a, idx, b);
}
VINL vi vi_xor3(vi a, vi b, vi c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
VINL vi vi_xor_and(vi a, vi b, vi c) { return _mm512_ternarylogic_epi32(a, b, c, 0x78); }
#define vi_alignr(hi, lo, s) _mm512_alignr_epi32((hi), (lo), (s))
VINL vi vi_pair_evens(vi a, vi b) { /* b's even lanes copied up into a's odd ones */
    return _mm512_mask_shuffle_epi32(a, 0xAAAA, b, (_MM_PERM_ENUM)0xA0);
}

/* simd_lanes.h's vf_sum_lanes8, the same bits: the eight vectors
 * transposed into sixteen 8-lane columns (column j holds lane j of each),
 * then the columns added in order, eight chains in one register. */
#define VF_SUM_LANES8
VINL void vf_sum_lanes8(const vf a[8], float s[8]) {
    vf v[4], w[4];
    vf_transpose_quads8(a, v, w);
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    __m256 c[16]; /* c[j]: lane j of rows 0-7 */
    for (int e = 0; e < 4; e++) {
        const __m512 zl = _mm512_permutex2var_ps(v[e], lo, w[e]), zh = _mm512_permutex2var_ps(v[e], hi, w[e]);
        c[e] = _mm512_castps512_ps256(zl);
        c[4 + e] = _mm512_extractf32x8_ps(zl, 1);
        c[8 + e] = _mm512_castps512_ps256(zh);
        c[12 + e] = _mm512_extractf32x8_ps(zh, 1);
    }
    __m256 t = c[0];
    for (int j = 1; j < 16; j++) t = _mm256_add_ps(t, c[j]);
    _mm256_storeu_ps(s, t);
}

#endif
