/* attn_avx2.c — fused causal attention forward for AVX2/FMA (the contract is
 * mha__attn_fwd_avx2 in kernels.h; the oracle is mha__attn_fwd_ref).
 *
 * Layout: the kernel works on the TRANSPOSED score tile. A "panel" is 16
 * consecutive queries; the vector lanes are queries, so that
 *   S^T[j][0:16] = sum_d K[j][d] * Q^T[d][0:16]      (Q^T holds scale * Q)
 *   O^T[c][0:16] += sum_j V[j][c] * P^T[j][0:16]
 * are both the same register-tile product "C[6][16] += a(6 scalars,
 * broadcast from K or V rows) x b(16 floats, packed)": 12 ymm accumulators,
 * 2 loads and 6 broadcasts per 12 FMAs (qk_group, pv_group). Only Q is
 * packed (per 16-query panel, Q^T[d][16], 8x8 transposes); K and V are
 * read in place through their row strides unless those strides would crowd
 * a few cache sets (2^k-ish byte strides), in which case each key tile is
 * first copied to contiguous scratch. So the scratch does not grow with T.
 * The softmax is purely vertical: the row max (taken in the QK epilogue),
 * the exp pass, the sum and the rescale of O are lane-wise vector
 * operations, with no horizontal reductions.
 *
 * Loop nest per call:
 *   for each q-block of QB = NP*16 queries starting at q_begin:
 *     pack Q^T for its panels, O^T = 0, m = -inf, l = 0
 *     for each key tile [k0, k0+KB), k0 = 0, KB, 2KB, ... (absolute
 *     boundaries, never relative to q_begin), up to the block's last
 *     query (causal) or T:
 *       for each panel: S^T = QK tile (6-key groups past the panel's last
 *         query are never computed; -inf masking only in groups that
 *         cross the diagonal), online softmax on the L1-resident S^T
 *         (one exp pass storing and summing; O and l rescaled only when
 *         the max of some lane changed), O^T += P^T V.
 *     O = O^T * (1/l) (once, 8x8 transposes back to rows), lse = m + log l.
 * Measured on the project VM (1 thread, T = 1024, HD = 64): QK and PV
 * ~40% each, softmax ~10%, Q/O packing ~8% (first touch of the rows).
 *
 * Determinism: every lane (query row) sees the same sequence of operations
 * whatever q_begin/q_end and the lane position: per-element FMA chains in
 * fixed order, key tiles at absolute boundaries, keys that a row cannot
 * see contribute exact zeros (exp(-inf) = 0, max with -inf, rescale by
 * exp(0) = 1). So results do not depend on how callers split the rows.
 *
 * Dropout: the keep decision of (row i, key j) is applied to P^T after the
 * sum l was taken (l is the softmax denominator before dropout); O is
 * multiplied by drop_scale / l at the end. PHILOX runs 8 query lanes at
 * once (one Philox call per lane covers 4 keys, exactly mha__philox_keep).
 * GENERATOR mode is delegated to the reference kernel (serial by nature). */
#include "kernels.h"
#include "philox.h"
#include "vexp_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "attn_avx2.c must be compiled with -mavx2 -mfma"
#endif

/* Tunables (measured best on the project machine; see bench_attn_core). */
#ifndef MHA_ATTN_AVX2_NP
#define MHA_ATTN_AVX2_NP 4 /* panels of 16 queries per q-block */
#endif
#ifndef MHA_ATTN_AVX2_KB
#define MHA_ATTN_AVX2_KB 64 /* keys per tile (a multiple of 4) */
#endif

enum {
    PW = 16, /* panel width: queries per panel (2 ymm) */
    NP = MHA_ATTN_AVX2_NP,
    QB = NP * PW,
    KB = MHA_ATTN_AVX2_KB
};
_Static_assert(KB % 4 == 0 && KB >= 4, "KB must be a positive multiple of 4");
_Static_assert(NP >= 1, "NP >= 1");

#define AINL __attribute__((always_inline)) static inline

size_t mha__attn_fwd_avx2_scratch(int64_t T, int64_t HD) {
    const size_t hd = HD > 0 ? (size_t)HD : 0u;
    const size_t t = T > 0 ? (size_t)T : 0u;
    if (hd > SIZE_MAX / 8u / QB || t > SIZE_MAX / 8u) return SIZE_MAX;
    /* 16: alignment slack; Q^T and O^T (NP panels each); S^T; m and l;
     * the packed K and V tiles. */
    const size_t own = 16u + 2u * (size_t)QB * hd + (size_t)KB * PW + 2u * (size_t)QB +
                       2u * (size_t)KB * (hd + 8u);
    /* GENERATOR mode runs the reference kernel in the same scratch. */
    const size_t ref = mha__attn_fwd_ref_scratch(T, HD);
    return own > ref ? own : ref;
}

/* ---- micro-kernels ------------------------------------------------------ */

/* S^T rows for mr (<= 6) keys: st[m][0:16] = sum_d k[m][d] qt[d][0:16] (the
 * scale is in qt), -inf where key > query if mask (rel = key(m = 0) -
 * query(lane 0)); the lane-wise max is folded into *mx0, *mx1. */
AINL void qk_group(const int mr, const float *k, int64_t ldk, const float *qt, int64_t HD,
                   bool mask, float rel, float *st, __m256 *mx0, __m256 *mx1) {
    __m256 c0[6], c1[6];
    const float *kr[6];
#pragma GCC unroll 6
    for (int m = 0; m < mr; m++) {
        kr[m] = k + m * ldk;
        c0[m] = _mm256_setzero_ps();
        c1[m] = _mm256_setzero_ps();
    }
    for (int64_t d = 0; d < HD; d++) {
        const __m256 b0 = _mm256_load_ps(qt + d * PW);
        const __m256 b1 = _mm256_load_ps(qt + d * PW + 8);
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++) {
            const __m256 a = _mm256_broadcast_ss(kr[m] + d);
            c0[m] = _mm256_fmadd_ps(a, b0, c0[m]);
            c1[m] = _mm256_fmadd_ps(a, b1, c1[m]);
        }
    }
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256 lane0 = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 lane1 = _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
    __m256 m0 = *mx0, m1 = *mx1;
#pragma GCC unroll 6
    for (int m = 0; m < mr; m++) {
        __m256 s0 = c0[m], s1 = c1[m];
        if (mask) { /* key rel+m visible to lane iff rel + m <= lane */
            const __m256 key = _mm256_set1_ps(rel + (float)m);
            s0 = _mm256_blendv_ps(s0, ninf, _mm256_cmp_ps(lane0, key, _CMP_LT_OQ));
            s1 = _mm256_blendv_ps(s1, ninf, _mm256_cmp_ps(lane1, key, _CMP_LT_OQ));
        }
        _mm256_store_ps(st + m * PW, s0);
        _mm256_store_ps(st + m * PW + 8, s1);
        m0 = _mm256_max_ps(m0, s0);
        m1 = _mm256_max_ps(m1, s1);
    }
    *mx0 = m0;
    *mx1 = m1;
}

/* ot[m][0:16] += sum_{j < n} v[j][m] pt[j][0:16] for mr (<= 6) output dims
 * (v points at V[k0] + c0, so the broadcasts read v + j*ldv + m). */
AINL void pv_group(const int mr, const float *v, int64_t ldv, const float *pt, int64_t n,
                   float *ot) {
    __m256 c0[6], c1[6];
#pragma GCC unroll 6
    for (int m = 0; m < mr; m++) {
        c0[m] = _mm256_load_ps(ot + m * PW);
        c1[m] = _mm256_load_ps(ot + m * PW + 8);
    }
    for (int64_t j = 0; j < n; j++) {
        const __m256 b0 = _mm256_load_ps(pt + j * PW);
        const __m256 b1 = _mm256_load_ps(pt + j * PW + 8);
        const float *vr = v + j * ldv;
#pragma GCC unroll 6
        for (int m = 0; m < mr; m++) {
            const __m256 a = _mm256_broadcast_ss(vr + m);
            c0[m] = _mm256_fmadd_ps(a, b0, c0[m]);
            c1[m] = _mm256_fmadd_ps(a, b1, c1[m]);
        }
    }
#pragma GCC unroll 6
    for (int m = 0; m < mr; m++) {
        _mm256_store_ps(ot + m * PW, c0[m]);
        _mm256_store_ps(ot + m * PW + 8, c1[m]);
    }
}

/* S^T for keys [k0, k0+n) of the panel whose lane 0 is query p0; k points
 * at key k0's row. */
static void qk_panel(const float *k, int64_t ldk, const float *qt, int64_t HD, int64_t n,
                     bool causal, int64_t k0, int64_t p0, float *st, __m256 *mx0, __m256 *mx1) {
    for (int64_t g = 0; g < n; g += 6) {
        const int mr = (int)(n - g < 6 ? n - g : 6);
        const int64_t key = k0 + g;
        const bool mask = causal && key + mr - 1 > p0;
        const float rel = mask ? (float)(key - p0) : 0.0f;
        const float *kg = k + g * ldk;
        float *sg = st + g * PW;
        switch (mr) {
        case 6: qk_group(6, kg, ldk, qt, HD, mask, rel, sg, mx0, mx1); break;
        case 5: qk_group(5, kg, ldk, qt, HD, mask, rel, sg, mx0, mx1); break;
        case 4: qk_group(4, kg, ldk, qt, HD, mask, rel, sg, mx0, mx1); break;
        case 3: qk_group(3, kg, ldk, qt, HD, mask, rel, sg, mx0, mx1); break;
        case 2: qk_group(2, kg, ldk, qt, HD, mask, rel, sg, mx0, mx1); break;
        default: qk_group(1, kg, ldk, qt, HD, mask, rel, sg, mx0, mx1); break;
        }
    }
}

/* O^T[0:HD][0:16] += sum_{j < n} V[k0 + j][:] P^T[j][0:16]. */
static void pv_panel(const float *v, int64_t ldv, const float *pt, int64_t n, int64_t HD,
                     float *ot) {
    for (int64_t c = 0; c < HD; c += 6) {
        const int mr = (int)(HD - c < 6 ? HD - c : 6);
        const float *vc = v + c;
        float *oc = ot + c * PW;
        switch (mr) {
        case 6: pv_group(6, vc, ldv, pt, n, oc); break;
        case 5: pv_group(5, vc, ldv, pt, n, oc); break;
        case 4: pv_group(4, vc, ldv, pt, n, oc); break;
        case 3: pv_group(3, vc, ldv, pt, n, oc); break;
        case 2: pv_group(2, vc, ldv, pt, n, oc); break;
        default: pv_group(1, vc, ldv, pt, n, oc); break;
        }
    }
}

/* ---- dropout masks --------------------------------------------------------- */

/* (hi, lo) of a * b per 32-bit lane. */
AINL void mulhilo8(__m256i a, __m256i b, __m256i *hi, __m256i *lo) {
    const __m256i pe = _mm256_mul_epu32(a, b);                         /* lanes 0,2,4,6 */
    const __m256i po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b); /* lanes 1,3,5,7 */
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
    *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
}

/* Philox4x32-10 on 8 counters at once (one per lane); bit-identical to
 * mha__philox4x32_10. */
AINL void philox8(__m256i c0, __m256i c1, __m256i c2, __m256i c3, uint32_t key0,
                  uint32_t key1, __m256i w[4]) {
    const __m256i M0 = _mm256_set1_epi32((int)MHA_PHILOX_M0);
    const __m256i M1 = _mm256_set1_epi32((int)MHA_PHILOX_M1);
    for (int r = 0; r < 10; r++) {
        const __m256i K0 = _mm256_set1_epi32((int)(key0 + (uint32_t)r * MHA_PHILOX_W0));
        const __m256i K1 = _mm256_set1_epi32((int)(key1 + (uint32_t)r * MHA_PHILOX_W1));
        __m256i hi0, lo0, hi1, lo1;
        mulhilo8(c0, M0, &hi0, &lo0);
        mulhilo8(c2, M1, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), K0);
        c1 = lo1;
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), K1);
        c3 = lo0;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* Keep masks (all-ones lanes = keep) for keys jabs .. jabs+3 (jabs % 4 == 0)
 * and the 16 queries p0 .. p0+15 of a panel: mk[r][0] lanes 0-7, mk[r][1]
 * lanes 8-15. Rows past row_max (padding lanes) reuse row_max. */
static void keep_masks(const mha__attn_args *a, int64_t jabs, int64_t p0, int64_t row_max,
                       __m256 mk[4][2]) {
    if (a->drop == MHA_DROP_PHILOX) {
        const __m256i cj = _mm256_set1_epi32((int)(uint32_t)((uint64_t)jabs >> 2));
        const __m256i s0 = _mm256_set1_epi32((int)(uint32_t)a->philox_stream);
        const __m256i s1 = _mm256_set1_epi32((int)(uint32_t)(a->philox_stream >> 32));
        const __m256i sign = _mm256_set1_epi32(INT32_MIN);
        const __m256i thr = _mm256_xor_si256(_mm256_set1_epi32((int)a->keep_threshold), sign);
        for (int h = 0; h < 2; h++) {
            const __m256i rows = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)p0),
                                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            const __m256i rh = _mm256_add_epi32(rows, _mm256_set1_epi32(8 * h));
            __m256i w[4];
            philox8(cj, rh, s0, s1, (uint32_t)a->philox_seed, (uint32_t)(a->philox_seed >> 32), w);
            for (int r = 0; r < 4; r++) /* w < thr, unsigned */
                mk[r][h] = _mm256_castsi256_ps(
                    _mm256_cmpgt_epi32(thr, _mm256_xor_si256(w[r], sign)));
        }
    } else { /* BITMASK */
        int32_t nib[16];
        const int64_t wj = jabs >> 6;
        const int sh = (int)(jabs & 63);
        for (int l = 0; l < 16; l++) {
            const int64_t i = p0 + l <= row_max ? p0 + l : row_max;
            nib[l] = (int32_t)((a->keep[i * a->keep_ld + wj] >> sh) & 15u);
        }
        const __m256i n0 = _mm256_loadu_si256((const __m256i *)(const void *)nib);
        const __m256i n1 = _mm256_loadu_si256((const __m256i *)(const void *)(nib + 8));
        for (int r = 0; r < 4; r++) {
            const __m256i bit = _mm256_set1_epi32(1 << r);
            mk[r][0] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(n0, bit), bit));
            mk[r][1] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(n1, bit), bit));
        }
    }
}

/* ---- online softmax on one panel ------------------------------------------ */

/* m, l: the panel's running max and sum (16 floats each); st: S^T (n rows of
 * 16), overwritten by P^T = exp(S^T - m) (times the keep mask); ot: O^T (HD
 * rows of 16), rescaled when some lane's max grew. */
static void softmax_panel(const mha__attn_args *a, float *st, int64_t n, int64_t k0, int64_t p0,
                          int64_t row_max, __m256 tm0, __m256 tm1, float *mrow, float *lrow,
                          float *ot, int64_t HD) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256 zero = _mm256_setzero_ps();
    const __m256 mo0 = _mm256_load_ps(mrow), mo1 = _mm256_load_ps(mrow + 8);
    const __m256 mn0 = _mm256_max_ps(mo0, tm0), mn1 = _mm256_max_ps(mo1, tm1);
    /* A row whose max is still -inf uses 0, so that exp(-inf - 0) = 0 (no NaN). */
    const __m256 ms0 = _mm256_blendv_ps(mn0, zero, _mm256_cmp_ps(mn0, ninf, _CMP_EQ_OQ));
    const __m256 ms1 = _mm256_blendv_ps(mn1, zero, _mm256_cmp_ps(mn1, ninf, _CMP_EQ_OQ));
    __m256 l0 = _mm256_load_ps(lrow), l1 = _mm256_load_ps(lrow + 8);
    const int changed = _mm256_movemask_ps(_mm256_cmp_ps(mn0, mo0, _CMP_NEQ_UQ)) |
                        _mm256_movemask_ps(_mm256_cmp_ps(mn1, mo1, _CMP_NEQ_UQ));
    if (changed) { /* lanes whose max did not change get exp(0) = 1 exactly */
        const __m256 al0 = mha__vexpf_avx2(_mm256_sub_ps(mo0, ms0));
        const __m256 al1 = mha__vexpf_avx2(_mm256_sub_ps(mo1, ms1));
        l0 = _mm256_mul_ps(l0, al0);
        l1 = _mm256_mul_ps(l1, al1);
        for (int64_t c = 0; c < HD; c++) {
            _mm256_store_ps(ot + c * PW, _mm256_mul_ps(_mm256_load_ps(ot + c * PW), al0));
            _mm256_store_ps(ot + c * PW + 8, _mm256_mul_ps(_mm256_load_ps(ot + c * PW + 8), al1));
        }
    }
    __m256 s0 = zero, s1 = zero;
    if (a->drop == MHA_DROP_NONE) {
        for (int64_t j = 0; j < n; j++) {
            float *r = st + j * PW;
            const __m256 p0v = mha__vexpf_avx2(_mm256_sub_ps(_mm256_load_ps(r), ms0));
            const __m256 p1v = mha__vexpf_avx2(_mm256_sub_ps(_mm256_load_ps(r + 8), ms1));
            s0 = _mm256_add_ps(s0, p0v);
            s1 = _mm256_add_ps(s1, p1v);
            _mm256_store_ps(r, p0v);
            _mm256_store_ps(r + 8, p1v);
        }
    } else {
        for (int64_t j = 0; j < n; j += 4) {
            __m256 mk[4][2];
            keep_masks(a, k0 + j, p0, row_max, mk);
            const int nr = (int)(n - j < 4 ? n - j : 4);
            for (int q = 0; q < nr; q++) {
                float *r = st + (j + q) * PW;
                const __m256 p0v = mha__vexpf_avx2(_mm256_sub_ps(_mm256_load_ps(r), ms0));
                const __m256 p1v = mha__vexpf_avx2(_mm256_sub_ps(_mm256_load_ps(r + 8), ms1));
                s0 = _mm256_add_ps(s0, p0v);
                s1 = _mm256_add_ps(s1, p1v);
                _mm256_store_ps(r, _mm256_and_ps(p0v, mk[q][0]));
                _mm256_store_ps(r + 8, _mm256_and_ps(p1v, mk[q][1]));
            }
        }
    }
    _mm256_store_ps(lrow, _mm256_add_ps(l0, s0));
    _mm256_store_ps(lrow + 8, _mm256_add_ps(l1, s1));
    _mm256_store_ps(mrow, mn0);
    _mm256_store_ps(mrow + 8, mn1);
}

/* ---- packing --------------------------------------------------------------- */

/* In-place transpose of the 8x8 block r[0..7]. */
AINL void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* Q^T panel: qp[d][l] = scale * Q[p0 + l][d] for l < nv, 0 for the padding
 * lanes. (The scale is folded into Q: one rounding, the same for every
 * row whatever its lane.) */
static void pack_qt(const float *q, int64_t ldq, int64_t p0, int nv, int64_t HD, float scale,
                    float *qp) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int l0 = 0; l0 < PW; l0 += 8) {
        int64_t d = 0;
        for (; d + 8 <= HD; d += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = l0 + i < nv ? _mm256_mul_ps(_mm256_loadu_ps(q + (p0 + l0 + i) * ldq + d), sc)
                                   : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < 8; i++) _mm256_store_ps(qp + (d + i) * PW + l0, r[i]);
        }
        for (; d < HD; d++)
            for (int i = 0; i < 8; i++)
                qp[d * PW + l0 + i] = l0 + i < nv ? scale * q[(p0 + l0 + i) * ldq + d] : 0.0f;
    }
}

/* Rows p0 .. p0+nv-1 of O from the panel's O^T: O[l][c] = O^T[c][l] * inv[l]. */
static void unpack_o(const float *op, const float *inv, int64_t p0, int nv, int64_t HD, float *o,
                     int64_t ldo) {
    for (int l0 = 0; l0 < nv; l0 += 8) {
        const __m256 iv = _mm256_loadu_ps(inv + l0);
        const int nl = nv - l0 < 8 ? nv - l0 : 8;
        int64_t c = 0;
        for (; c + 8 <= HD; c += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_mul_ps(_mm256_load_ps(op + (c + i) * PW + l0), iv);
            transpose8(r);
            for (int l = 0; l < nl; l++) _mm256_storeu_ps(o + (p0 + l0 + l) * ldo + c, r[l]);
        }
        for (; c < HD; c++)
            for (int l = 0; l < nl; l++) o[(p0 + l0 + l) * ldo + c] = op[c * PW + l0 + l] * inv[l0 + l];
    }
}

/* Whether KB rows `ld` floats apart crowd a 64-set cache with 64-byte lines
 * (more than 16 of their lines in one set: 2^k-ish strides, e.g. a packed
 * qkv buffer with D_out = 1024 or 4096). Such tiles are copied to
 * contiguous scratch first; ordinary strides are read in place. */
static bool crowded_scan(int64_t ld, int64_t HD) {
    unsigned cnt[64] = {0};
    const int64_t lines = (HD * 4 + 63) / 64 + 1; /* a row may straddle */
    for (int64_t j = 0; j < KB; j++) {
        const int64_t l0 = j * ld * 4 / 64;
        for (int64_t t = 0; t < lines && t < 64; t++)
            if (++cnt[(l0 + t) & 63] > 16) return true;
    }
    return false;
}

/* crowded_scan, memoised per thread (every call of a forward has the same
 * strides; the scan is ~1% of a short call). */
static bool crowded(int64_t ld, int64_t HD) {
    static _Thread_local int64_t memo_ld = -1, memo_hd = -1;
    static _Thread_local bool memo;
    if (ld != memo_ld || HD != memo_hd) {
        memo = crowded_scan(ld, HD);
        memo_ld = ld;
        memo_hd = HD;
    }
    return memo;
}

/* Prefetches rows [r0, r1) (n floats each) of a strided matrix. Rows of a
 * packed qkv buffer are kilobytes apart, out of reach of the hardware
 * stream prefetchers; issuing all of a q-block's Q rows at once lets the
 * misses overlap (measured 1.5-4x faster Q packing from cold memory). */
static void prefetch_rows(const float *x, int64_t ld, int64_t r0, int64_t r1, int64_t n) {
    if (n <= 0) return;
    for (int64_t r = r0; r < r1; r++) {
        const char *p = (const char *)(const void *)(x + r * ld);
        const char *e = (const char *)(const void *)(x + r * ld + n - 1);
        for (; p <= e; p += 64) _mm_prefetch(p, _MM_HINT_T0);
        _mm_prefetch(e, _MM_HINT_T0);
    }
}

/* ---- the kernel ---------------------------------------------------------- */

void mha__attn_fwd_avx2(const mha__attn_args *a, float *scratch) {
    if (a->drop == MHA_DROP_GENERATOR) {
        mha__attn_fwd_ref(a, scratch);
        return;
    }
    const int64_t T = a->T, HD = a->HD > 0 ? a->HD : 0;
    const int64_t qe = a->q_end < T ? a->q_end : T;
    if (a->q_begin >= qe) return;
    const float ds = a->drop == MHA_DROP_NONE ? 1.0f : a->drop_scale;

    float *base = (float *)(void *)(((uintptr_t)scratch + 63u) & ~(uintptr_t)63u);
    float *qt = base;               /* NP panels x (HD, 16): Q^T */
    float *ot = qt + NP * HD * PW;  /* NP panels x (HD, 16): O^T, unnormalised */
    float *st = ot + NP * HD * PW;  /* (KB, 16): S^T, then P^T */
    float *mrow = st + KB * PW;     /* (QB) running max */
    float *lrow = mrow + QB;        /* (QB) running sum */
    const int64_t ldp = HD;         /* row stride of the packed K and V tiles */
    float *kp = lrow + QB;          /* (KB, HD): K rows k0 .. k0+kn-1 */
    float *vp = kp + KB * ldp + 8;  /* (KB, HD): V rows */

    const bool pack_k = crowded(a->ldk, HD), pack_v = crowded(a->ldv, HD);

    for (int64_t qb = a->q_begin; qb < qe; qb += QB) {
        const int64_t nq = qe - qb < QB ? qe - qb : QB;
        const int np = (int)((nq + PW - 1) / PW);
        const int64_t kend = a->causal ? qb + nq : T;
        prefetch_rows(a->q, a->ldq, qb, qb + nq, HD);
        /* pack Q^T, clear O^T and the softmax state */
        for (int p = 0; p < np; p++) {
            const int64_t p0 = qb + p * PW;
            const int nv = (int)(qe - p0 < PW ? qe - p0 : PW);
            pack_qt(a->q, a->ldq, p0, nv, HD, a->scale, qt + p * HD * PW);
        }
        memset(ot, 0, (size_t)np * (size_t)HD * PW * sizeof(float));
        for (int l = 0; l < QB; l++) {
            mrow[l] = -INFINITY;
            lrow[l] = 0.0f;
        }

        for (int64_t k0 = 0; k0 < kend; k0 += KB) {
            const int64_t kn = kend - k0 < KB ? kend - k0 : KB;
            const float *kt = a->k + k0 * a->ldk, *vt = a->v + k0 * a->ldv;
            int64_t ldkt = a->ldk, ldvt = a->ldv;
            if (pack_k) {
                for (int64_t j = 0; j < kn; j++)
                    memcpy(kp + j * ldp, kt + j * a->ldk, (size_t)HD * sizeof(float));
                kt = kp;
                ldkt = ldp;
            }
            if (pack_v) {
                for (int64_t j = 0; j < kn; j++)
                    memcpy(vp + j * ldp, vt + j * a->ldv, (size_t)HD * sizeof(float));
                vt = vp;
                ldvt = ldp;
            }
            for (int p = 0; p < np; p++) {
                const int64_t p0 = qb + p * PW;
                const int64_t plast = (qe - p0 < PW ? qe : p0 + PW) - 1;
                int64_t n = kn;
                if (a->causal && plast + 1 - k0 < n) n = plast + 1 - k0;
                if (n <= 0) continue; /* every query of the panel precedes k0 */
                __m256 tm0 = _mm256_set1_ps(-INFINITY), tm1 = tm0;
                qk_panel(kt, ldkt, qt + p * HD * PW, HD, n, a->causal, k0, p0, st, &tm0, &tm1);
                softmax_panel(a, st, n, k0, p0, plast, tm0, tm1, mrow + p * PW, lrow + p * PW,
                              ot + p * HD * PW, HD);
                pv_panel(vt, ldvt, st, n, HD, ot + p * HD * PW);
            }
        }

        /* O = O^T * (drop_scale / l), lse = m + log l */
        for (int p = 0; p < np; p++) {
            const int64_t p0 = qb + p * PW;
            const int nv = (int)(qe - p0 < PW ? qe - p0 : PW);
            float inv[PW];
            for (int l = 0; l < PW; l++) {
                const float m = mrow[p * PW + l], s = lrow[p * PW + l];
                /* s == 0: no visible key (cannot happen with causal) */
                const bool ok = s > 0.0f && m > -INFINITY;
                inv[l] = ok ? ds / s : 0.0f;
                if (a->lse && l < nv) a->lse[p0 + l] = ok ? m + logf(s) : -INFINITY;
            }
            unpack_o(ot + p * HD * PW, inv, p0, nv, HD, a->o, a->ldo);
        }
    }
}
