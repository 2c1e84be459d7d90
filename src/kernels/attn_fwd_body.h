/* attn_fwd_body.h — the fused causal attention forward, written once on a
 * SIMD layer and compiled once per ISA (attn_avx2.c, attn_avx512.c, and the
 * 16-lane emulation tests/attn_gen16.c). The contract is
 * mha__attn_fwd_avx2's in kernels.h; the oracle is mha__attn_fwd_ref.
 *
 * The including file defines, then includes a layer (simd_*.h) and this:
 *   ATTN_NV          vectors per panel row: a panel is PW = VW * NV queries
 *   ATTN_NP          panels per q-block
 *   ATTN_KB          keys per tile (a multiple of 4)
 *   ATTN_QK_MR       max keys per QK register tile (<= 14)
 *   ATTN_PV_MR       max output dims per PV register tile (<= 14)
 *   ATTN_CROWD       lines of a K/V tile per cache set that trigger a copy
 *   ATTN_FWD, ATTN_FWD_SCRATCH   the names of the two exported functions
 * Everything else here is static, so each instantiation is self-contained.
 *
 * Layout: the kernel works on the TRANSPOSED score tile. The vector lanes
 * are queries: a "panel" is PW consecutive queries, so that
 *   S^T[j][0:PW] = sum_d K[j][d] * Q^T[d][0:PW]      (Q^T holds scale * Q)
 *   O^T[c][0:PW] += sum_j V[j][c] * P^T[j][0:PW]
 * are both the same register-tile product "C[mr][PW] += a(mr scalars,
 * broadcast from K or V rows) x b(PW floats, packed)": mr * NV vector
 * accumulators, NV loads and mr broadcasts per mr * NV FMAs (qk_group,
 * pv_group). The key groups (QK) and output-dim groups (PV) are balanced
 * (split_of: HD = 64 with at most 12 per tile runs as 11/11/11/11/10/10),
 * so no tiny tail tiles; any HD >= 1 works. Only Q is packed (per panel,
 * Q^T[d][PW], 8x8 transposes); K and V are read in place through their row
 * strides unless those strides would crowd a few cache sets (2^k-ish byte
 * strides), in which case each key tile is first copied to contiguous
 * scratch. So the scratch does not grow with T. The softmax is purely
 * vertical: the row max (taken in the QK epilogue), the exp pass, the sum
 * and the rescale of O are lane-wise vector operations, with no
 * horizontal reductions.
 *
 * Loop nest per call:
 *   for each q-block of QB = NP*PW queries starting at q_begin:
 *     pack Q^T for its panels, O^T = 0, m = -inf, l = 0
 *     for each key tile [k0, k0+KB), k0 = 0, KB, 2KB, ... (absolute
 *     boundaries, never relative to q_begin), up to the block's last
 *     query (causal) or T:
 *       for each panel: S^T = QK tile (key groups past the panel's last
 *         query are never computed; -inf masking only in groups that
 *         cross the diagonal), online softmax on the L1-resident S^T
 *         (one exp pass storing and summing; O and l rescaled only when
 *         the max of some lane changed), O^T += P^T V.
 *     O = O^T * (drop_scale / l) (once, 8x8 transposes back to rows),
 *     lse = m + log l.
 * Measured on the project VM (AVX2, 1 thread, T = 1024, HD = 64): QK and
 * PV ~40% each, softmax ~10%, Q/O packing ~8% (first touch of the rows).
 *
 * Determinism: every lane (query row) sees the same sequence of operations
 * whatever q_begin/q_end and the lane position: per-element FMA chains in
 * fixed order (dot products in d order, O accumulated over keys in
 * order), key tiles at absolute boundaries, keys that a row cannot see
 * contribute exact zeros (exp(-inf) = 0, max with -inf, rescale by
 * exp(0) = 1). So results do not depend on how callers split the rows.
 * (The grouping of keys in QK or of dims in PV does not enter any single
 * value, nor does the vector width: with the same tunables every layer
 * gives the same bits, which the tests check between simd_avx2.h and the
 * emulation of simd_avx512.h. KB does enter: the rescaling follows the
 * key tiles.)
 *
 * Dropout: the keep decision of (row i, key j) is applied to P^T after the
 * sum l was taken (l is the softmax denominator before dropout); O is
 * multiplied by drop_scale / l at the end. PHILOX runs VW query lanes at
 * once (one Philox call per lane covers 4 keys, exactly mha__philox_keep).
 * GENERATOR mode is delegated to the reference kernel (serial by nature).
 *
 * The Q/O packing works on 256-bit vectors whatever the layer (AVX-512
 * implies AVX2): 8x8 transposes, independent of VW. */
#ifndef VW
#error "include a SIMD layer (simd_avx2.h, simd_avx512.h) before attn_fwd_body.h"
#endif
#if !defined(ATTN_NV) || !defined(ATTN_NP) || !defined(ATTN_KB) || !defined(ATTN_QK_MR) || \
    !defined(ATTN_PV_MR) || !defined(ATTN_CROWD) || !defined(ATTN_FWD) ||                  \
    !defined(ATTN_FWD_SCRATCH)
#error "define the ATTN_* tunables and names before including attn_fwd_body.h"
#endif
#if !defined(__AVX2__)
#error "attn_fwd_body.h packs with AVX2"
#endif

#include "kernels.h"
#include "philox.h"
#include "simd_exp.h"

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

enum {
    NV = ATTN_NV,
    PW = VW * NV, /* panel width: queries per panel */
    NP = ATTN_NP,
    QB = NP * PW,
    KB = ATTN_KB,
    QK_MR = ATTN_QK_MR,
    PV_MR = ATTN_PV_MR
};
_Static_assert(KB % 4 == 0 && KB >= 4, "KB must be a positive multiple of 4");
_Static_assert(NP >= 1 && NV >= 1 && NV <= 4, "1 <= NV <= 4, NP >= 1");
_Static_assert(PW % 8 == 0, "the packing transposes 8 lanes at a time");
_Static_assert(QK_MR >= 1 && QK_MR <= 14 && PV_MR >= 1 && PV_MR <= 14, "MR in 1..14");

size_t ATTN_FWD_SCRATCH(int64_t T, int64_t HD) {
    const size_t hd = HD > 0 ? (size_t)HD : 0u;
    const size_t t = T > 0 ? (size_t)T : 0u;
    if (hd > SIZE_MAX / 8u / QB || t > SIZE_MAX / 8u) return SIZE_MAX;
    /* 16: alignment slack; Q^T and O^T (NP panels each); S^T; m and l;
     * the packed K and V tiles (VW floats apart). */
    const size_t own = 16u + 2u * (size_t)QB * hd + (size_t)KB * PW + 2u * (size_t)QB +
                       2u * (size_t)KB * (hd + VW);
    /* GENERATOR mode runs the reference kernel in the same scratch. */
    const size_t ref = mha__attn_fwd_ref_scratch(T, HD);
    return own > ref ? own : ref;
}

/* ---- micro-kernels ------------------------------------------------------ */

/* S^T rows for mr keys: st[m][0:PW] = sum_d k[m][d] qt[d][0:PW] (the scale
 * is in qt), -inf where key > query if mask (rel = key(m = 0) - query(lane
 * 0)); the lane-wise max is folded into mx[0..NV). */
VINL void qk_group(const int mr, const float *k, int64_t ldk, const float *qt, int64_t HD,
                   bool mask, int rel, float *st, vf mx[NV]) {
    vf c[QK_MR][NV];
    const float *kr[QK_MR];
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++) {
        kr[m] = k + m * ldk;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[m][v] = vf_zero();
    }
    for (int64_t d = 0; d < HD; d++) {
        vf b[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = vf_load(qt + d * PW + VW * v);
#pragma GCC unroll 14
        for (int m = 0; m < mr; m++) {
            const vf a = vf_bcast(kr[m] + d);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[m][v] = vf_fmadd(a, b[v], c[m][v]);
        }
    }
    const vf ninf = vf_set1(-INFINITY);
    const vi lane = vi_iota();
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            vf s = c[m][v];
            if (mask) /* key rel+m visible to lane l iff rel + m <= l */
                s = vf_select(vi_lt(lane, vi_set1(rel + m - VW * v)), ninf, s);
            vf_store(st + m * PW + VW * v, s);
            mx[v] = vf_max(mx[v], s);
        }
    }
}

/* ot[m][0:PW] += sum_{j < n} v[j][m] pt[j][0:PW] for mr output dims (v
 * points at V[k0] + c0, so the broadcasts read v + j*ldv + m). */
VINL void pv_group(const int mr, const float *v, int64_t ldv, const float *pt, int64_t n,
                   float *ot) {
    vf c[PV_MR][NV];
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) c[m][u] = vf_load(ot + m * PW + VW * u);
    for (int64_t j = 0; j < n; j++) {
        vf b[NV];
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) b[u] = vf_load(pt + j * PW + VW * u);
        const float *vr = v + j * ldv;
#pragma GCC unroll 14
        for (int m = 0; m < mr; m++) {
            const vf a = vf_bcast(vr + m);
#pragma GCC unroll 4
            for (int u = 0; u < NV; u++) c[m][u] = vf_fmadd(a, b[u], c[m][u]);
        }
    }
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) vf_store(ot + m * PW + VW * u, c[m][u]);
}

/* A switch over the tile heights 1..14 with compile-time mr; cases above
 * MAXMR compile to nothing (split_of never produces them). */
#define MR_CASE(k, MAXMR, CALL)                                                                 \
    case k:                                                                                     \
        if ((k) <= (MAXMR)) CALL(k);                                                            \
        break;
#define MR_SWITCH(mr, MAXMR, CALL)                                                              \
    switch (mr) {                                                                               \
        MR_CASE(14, MAXMR, CALL) MR_CASE(13, MAXMR, CALL) MR_CASE(12, MAXMR, CALL)              \
        MR_CASE(11, MAXMR, CALL) MR_CASE(10, MAXMR, CALL) MR_CASE(9, MAXMR, CALL)               \
        MR_CASE(8, MAXMR, CALL) MR_CASE(7, MAXMR, CALL) MR_CASE(6, MAXMR, CALL)                 \
        MR_CASE(5, MAXMR, CALL) MR_CASE(4, MAXMR, CALL) MR_CASE(3, MAXMR, CALL)                 \
        MR_CASE(2, MAXMR, CALL)                                                                 \
    default: CALL(1); break;                                                                    \
    }

/* Splits n into ceil(n / mrmax) balanced groups: the first rem groups have
 * base + 1 elements, the others base. */
typedef struct {
    int64_t base, rem;
} split;
VINL split split_of(int64_t n, int mrmax) {
    const int64_t ng = (n + mrmax - 1) / mrmax;
    split s = {n / ng, n % ng};
    return s;
}

/* S^T for keys [k0, k0+n) of the panel whose lane 0 is query p0; k points
 * at key k0's row. */
static void qk_panel(const float *k, int64_t ldk, const float *qt, int64_t HD, int64_t n,
                     bool causal, int64_t k0, int64_t p0, float *st, vf mx[NV]) {
    const split sp = split_of(n, QK_MR);
    int64_t g = 0;
    for (int64_t i = 0; g < n; i++) {
        const int mr = (int)(sp.base + (i < sp.rem));
        const int64_t key = k0 + g;
        const bool mask = causal && key + mr - 1 > p0;
        /* with mask, -mr < key - p0 < PW (n stops at the panel's last query) */
        const int rel = mask ? (int)(key - p0) : 0;
        const float *kg = k + g * ldk;
        float *sg = st + g * PW;
#define QK_CALL(M) qk_group(M, kg, ldk, qt, HD, mask, rel, sg, mx)
        MR_SWITCH(mr, QK_MR, QK_CALL)
#undef QK_CALL
        g += mr;
    }
}

/* O^T[0:HD][0:PW] += sum_{j < n} V[k0 + j][:] P^T[j][0:PW]. */
static void pv_panel(const float *v, int64_t ldv, const float *pt, int64_t n, int64_t HD,
                     float *ot) {
    const split sp = split_of(HD, PV_MR);
    int64_t c = 0;
    for (int64_t i = 0; c < HD; i++) {
        const int mr = (int)(sp.base + (i < sp.rem));
        const float *vc = v + c;
        float *oc = ot + c * PW;
#define PV_CALL(M) pv_group(M, vc, ldv, pt, n, oc)
        MR_SWITCH(mr, PV_MR, PV_CALL)
#undef PV_CALL
        c += mr;
    }
}

/* ---- dropout masks --------------------------------------------------------- */

/* Philox4x32-10 on VW counters at once (one per lane); bit-identical to
 * mha__philox4x32_10. */
VINL void philox_lanes(vi c0, vi c1, vi c2, vi c3, uint32_t key0, uint32_t key1, vi w[4]) {
    const vi M0 = vi_set1((int32_t)MHA_PHILOX_M0);
    const vi M1 = vi_set1((int32_t)MHA_PHILOX_M1);
    for (int r = 0; r < 10; r++) {
        const vi K0 = vi_set1((int32_t)(key0 + (uint32_t)r * MHA_PHILOX_W0));
        const vi K1 = vi_set1((int32_t)(key1 + (uint32_t)r * MHA_PHILOX_W1));
        vi hi0, lo0, hi1, lo1;
        vu_mulhilo(c0, M0, &hi0, &lo0);
        vu_mulhilo(c2, M1, &hi1, &lo1);
        c0 = vi_xor(vi_xor(hi1, c1), K0);
        c1 = lo1;
        c2 = vi_xor(vi_xor(hi0, c3), K1);
        c3 = lo0;
    }
    w[0] = c0;
    w[1] = c1;
    w[2] = c2;
    w[3] = c3;
}

/* Keep masks (set lane = keep) for keys jabs .. jabs+3 (jabs % 4 == 0) and
 * the PW queries p0 .. p0+PW-1 of a panel: mk[r][v] covers lanes VW*v ..
 * VW*v+VW-1. Rows past row_max (padding lanes) reuse row_max. */
static void keep_masks(const mha__attn_args *a, int64_t jabs, int64_t p0, int64_t row_max,
                       vm mk[4][NV]) {
    if (a->drop == MHA_DROP_PHILOX) {
        const vi cj = vi_set1((int32_t)(uint32_t)((uint64_t)jabs >> 2));
        const vi s0 = vi_set1((int32_t)(uint32_t)a->philox_stream);
        const vi s1 = vi_set1((int32_t)(uint32_t)(a->philox_stream >> 32));
        const vi thr = vi_set1((int32_t)a->keep_threshold);
        const vi rows = vi_add(vi_set1((int32_t)(uint32_t)p0), vi_iota());
        for (int v = 0; v < NV; v++) {
            const vi rv = vi_add(rows, vi_set1(VW * v));
            vi w[4];
            philox_lanes(cj, rv, s0, s1, (uint32_t)a->philox_seed,
                         (uint32_t)(a->philox_seed >> 32), w);
            for (int r = 0; r < 4; r++) mk[r][v] = vu_lt(w[r], thr);
        }
    } else { /* BITMASK */
        int32_t nib[PW];
        const int64_t wj = jabs >> 6;
        const int sh = (int)(jabs & 63);
        for (int l = 0; l < PW; l++) {
            const int64_t i = p0 + l <= row_max ? p0 + l : row_max;
            nib[l] = (int32_t)((a->keep[i * a->keep_ld + wj] >> sh) & 15u);
        }
        for (int v = 0; v < NV; v++) {
            const vi nv = vi_loadu(nib + VW * v);
            for (int r = 0; r < 4; r++) mk[r][v] = vi_test(nv, vi_set1(1 << r));
        }
    }
}

/* ---- online softmax on one panel ------------------------------------------ */

/* m, l: the panel's running max and sum (PW floats each); st: S^T (n rows of
 * PW), overwritten by P^T = exp(S^T - m) (times the keep mask); ot: O^T (HD
 * rows of PW), rescaled when some lane's max grew. */
static void softmax_panel(const mha__attn_args *a, float *st, int64_t n, int64_t k0, int64_t p0,
                          int64_t row_max, const vf tm[NV], float *mrow, float *lrow, float *ot,
                          int64_t HD) {
    const vf ninf = vf_set1(-INFINITY);
    const vf zero = vf_zero();
    vf mn[NV], ms[NV], l[NV], s[NV];
    int changed = 0;
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        const vf mo = vf_load(mrow + VW * v);
        mn[v] = vf_max(mo, tm[v]);
        /* A row whose max is still -inf uses 0, so that exp(-inf - 0) = 0 (no NaN). */
        ms[v] = vf_select(vf_eq(mn[v], ninf), zero, mn[v]);
        l[v] = vf_load(lrow + VW * v);
        s[v] = zero;
        changed |= vm_any(vf_neq_u(mn[v], mo));
    }
    if (changed) { /* lanes whose max did not change get exp(0) = 1 exactly */
        vf al[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            al[v] = vf_exp(vf_sub(vf_load(mrow + VW * v), ms[v]));
            l[v] = vf_mul(l[v], al[v]);
        }
        for (int64_t c = 0; c < HD; c++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                float *p = ot + c * PW + VW * v;
                vf_store(p, vf_mul(vf_load(p), al[v]));
            }
    }
    if (a->drop == MHA_DROP_NONE) {
        for (int64_t j = 0; j < n; j++) {
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                float *r = st + j * PW + VW * v;
                const vf p = vf_exp(vf_sub(vf_load(r), ms[v]));
                s[v] = vf_add(s[v], p);
                vf_store(r, p);
            }
        }
    } else {
        for (int64_t j = 0; j < n; j += 4) {
            vm mk[4][NV];
            keep_masks(a, k0 + j, p0, row_max, mk);
            const int nr = (int)(n - j < 4 ? n - j : 4);
            for (int q = 0; q < nr; q++)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) {
                    float *r = st + (j + q) * PW + VW * v;
                    const vf p = vf_exp(vf_sub(vf_load(r), ms[v]));
                    s[v] = vf_add(s[v], p);
                    vf_store(r, vf_keep(mk[q][v], p));
                }
        }
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        vf_store(lrow + VW * v, vf_add(l[v], s[v]));
        vf_store(mrow + VW * v, mn[v]);
    }
}

/* ---- packing (256-bit whatever the layer) ---------------------------------- */

/* In-place transpose of the 8x8 block r[0..7]. */
VINL void transpose8(__m256 r[8]) {
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
        if (l0 >= nv) { /* padding lanes only */
            for (int64_t d = 0; d < HD; d++) _mm256_store_ps(qp + d * PW + l0, _mm256_setzero_ps());
            continue;
        }
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
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_mul_ps(_mm256_load_ps(op + (c + i) * PW + l0), iv);
            transpose8(r);
            for (int l = 0; l < nl; l++) _mm256_storeu_ps(o + (p0 + l0 + l) * ldo + c, r[l]);
        }
        for (; c < HD; c++)
            for (int l = 0; l < nl; l++)
                o[(p0 + l0 + l) * ldo + c] = op[c * PW + l0 + l] * inv[l0 + l];
    }
}

/* Whether KB rows `ld` floats apart crowd a 64-set cache with 64-byte lines
 * (more than ATTN_CROWD of their lines in one set: 2^k-ish strides, e.g. a
 * packed qkv buffer with D_out = 1024 or 4096). Such tiles are copied to
 * contiguous scratch first; ordinary strides are read in place. */
static bool crowded_scan(int64_t ld, int64_t HD) {
    unsigned cnt[64] = {0};
    const int64_t lines = (HD * 4 + 63) / 64 + 1; /* a row may straddle */
    for (int64_t j = 0; j < KB; j++) {
        const int64_t l0 = j * ld * 4 / 64;
        for (int64_t t = 0; t < lines && t < 64; t++)
            if (++cnt[(l0 + t) & 63] > ATTN_CROWD) return true;
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

void ATTN_FWD(const mha__attn_args *a, float *scratch) {
    if (a->drop == MHA_DROP_GENERATOR) {
        mha__attn_fwd_ref(a, scratch);
        return;
    }
    const int64_t T = a->T, HD = a->HD > 0 ? a->HD : 0;
    const int64_t qe = a->q_end < T ? a->q_end : T;
    if (a->q_begin >= qe) return;
    const float ds = a->drop == MHA_DROP_NONE ? 1.0f : a->drop_scale;

    float *base = (float *)(void *)(((uintptr_t)scratch + 63u) & ~(uintptr_t)63u);
    float *qt = base;               /* NP panels x (HD, PW): Q^T */
    float *ot = qt + NP * HD * PW;  /* NP panels x (HD, PW): O^T, unnormalised */
    float *st = ot + NP * HD * PW;  /* (KB, PW): S^T, then P^T */
    float *mrow = st + KB * PW;     /* (QB) running max */
    float *lrow = mrow + QB;        /* (QB) running sum */
    const int64_t ldp = HD;         /* row stride of the packed K and V tiles */
    float *kp = lrow + QB;          /* (KB, HD): K rows k0 .. k0+kn-1 */
    float *vp = kp + KB * ldp + VW; /* (KB, HD): V rows */

    const bool pack_k = crowded(a->ldk, HD), pack_v = crowded(a->ldv, HD);

    for (int64_t qb = a->q_begin; qb < qe; qb += QB) {
        const int64_t nq = qe - qb < QB ? qe - qb : QB;
        const int np = (int)((nq + PW - 1) / PW);
        const int64_t kend = a->causal ? qb + nq : T;
        prefetch_rows(a->q, a->ldq, qb, qb + nq, HD);
        /* pack Q^T (all of the block's Q rows are read here, before any O
         * row is written: O may alias Q), clear O^T and the softmax state */
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
                vf tm[NV];
                for (int v = 0; v < NV; v++) tm[v] = vf_set1(-INFINITY);
                qk_panel(kt, ldkt, qt + p * HD * PW, HD, n, a->causal, k0, p0, st, tm);
                softmax_panel(a, st, n, k0, p0, plast, tm, mrow + p * PW, lrow + p * PW,
                              ot + p * HD * PW, HD);
                pv_panel(vt, ldvt, st, n, HD, ot + p * HD * PW);
            }
        }

        /* O = O^T * (drop_scale / l), lse = m + log l, stats = (m, log l) */
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
                if (a->stats && l < nv) {
                    a->stats[2 * (p0 + l)] = ok ? m : -INFINITY;
                    a->stats[2 * (p0 + l) + 1] = ok ? logf(s) : 0.0f;
                }
            }
            unpack_o(ot + p * HD * PW, inv, p0, nv, HD, a->o, a->ldo);
        }
    }
}
