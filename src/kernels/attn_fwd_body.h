/* attn_fwd_body.h — the fused causal attention forward, written once on a
 * SIMD layer and compiled once per ISA (attn_avx2.c, attn_avx512.c, and the
 * 16-lane emulation tests/attn_gen16.c). The contract is
 * kernels.h's attn_fwd; the oracle is mha__attn_fwd_ref.
 *
 * The including file defines, then includes a layer (simd_*.h) and this:
 *   ATTN_NV, ATTN_QK_MR, ATTN_PV_MR, ATTN_CROWD   the panel geometry and
 *                    micro-kernel tiles, shared with the backward
 *                    (attn_panel.h, where they are described)
 *   ATTN_NP          panels per q-block
 *   ATTN_KB          keys per tile (a multiple of 4)
 *   MHA_KSFX         the suffix of the exported names (kernels.h's
 *                    MHA__KNAME): mha__attn_fwd_<sfx>, mha__attn_fwd_scratch_<sfx>
 * Everything else here is static, so each instantiation is self-contained.
 * The micro-kernels, the keep masks, the Q packing and the crowding test
 * are attn_panel.h's (shared with attn_bwd_body.h).
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
#if !defined(ATTN_NP) || !defined(ATTN_KB) || !defined(MHA_KSFX)
#error "define the ATTN_* tunables and names before including attn_fwd_body.h"
#endif

#include "attn_panel.h"

#include <assert.h>

enum {
    NP = ATTN_NP,
    QB = NP * PW, /* queries per q-block */
    KB = ATTN_KB
};
_Static_assert(KB % 4 == 0 && KB >= 4, "KB must be a positive multiple of 4");
_Static_assert(NP >= 1, "NP >= 1");

size_t MHA__KNAME(attn_fwd_scratch)(int64_t T, int64_t HD) {
    const size_t hd = HD > 0 ? (size_t)HD : 0u;
    const size_t t = T > 0 ? (size_t)T : 0u;
    if (hd > SIZE_MAX / 8u / QB || t > SIZE_MAX / 8u) return SIZE_MAX;
    /* 16: alignment slack; Q^T and O^T (NP panels each); S^T; m and l;
     * the packed K and V tiles (VW floats apart). */
    const size_t own = 16u + 2u * (size_t)QB * hd + (size_t)KB * PW + 2u * (size_t)QB +
                       2u * (size_t)KB * (hd + VW);
    /* GENERATOR mode runs the reference kernel in the same scratch. */
    const size_t ref = mha__attn_fwd_scratch_ref(T, HD);
    return own > ref ? own : ref;
}

/* ---- online softmax on one panel ------------------------------------------ */

/* m, l: the panel's running max and sum (PW floats each); st: S^T (n rows of
 * PW), overwritten by P^T = exp(S^T - m) (times the keep mask); ot: O^T (HD
 * rows of PW), rescaled when some lane's max grew. */
static void softmax_panel(const keep_src *a, float *st, int64_t n, int64_t k0, int64_t p0,
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
            al[v] = vf_exp_nonpos(vf_sub(vf_load(mrow + VW * v), ms[v]));
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
                const vf p = vf_exp_nonpos(vf_sub(vf_load(r), ms[v]));
                s[v] = vf_add(s[v], p);
                vf_store(r, p);
            }
        }
    } else if (a->drop == MHA_DROP_BITMASK) {
        keep_iter it;
        keep_iter_init(&it, a, p0, row_max, k0);
        for (int64_t j = 0; j < n; j++) {
            vm mk[NV];
            keep_next(&it, mk);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                float *r = st + j * PW + VW * v;
                const vf p = vf_exp_nonpos(vf_sub(vf_load(r), ms[v]));
                s[v] = vf_add(s[v], p);
                vf_store(r, vf_keep(mk[v], p));
            }
        }
    } else { /* PHILOX */
        for (int64_t j = 0; j < n; j += 4) {
            vm mk[4][NV];
            philox_masks(a, k0 + j, p0, mk);
            const int nr = (int)(n - j < 4 ? n - j : 4);
            for (int q = 0; q < nr; q++)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) {
                    float *r = st + (j + q) * PW + VW * v;
                    const vf p = vf_exp_nonpos(vf_sub(vf_load(r), ms[v]));
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

/* Rows p0 .. p0+nv-1 of O from the panel's O^T: O[l][c] = O^T[c][l] * inv[l]. */
static void unpack_o(const float *op, const float *inv, int64_t p0, int nv, int64_t HD, float *o,
                     int64_t ldo) {
    for (int l0 = 0; l0 < nv; l0 += 8) {
        const __m256 iv = _mm256_loadu_ps(inv + l0);
        const int nl = nv - l0 < 8 ? nv - l0 : 8;
        int64_t c = 0;
        for (; c + 8 <= HD; c += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                r[i] = _mm256_mul_ps(_mm256_load_ps(op + (c + i) * PW + l0), iv);
            transpose8(r);
#pragma GCC unroll 8 /* constant indices, so that r stays in registers */
            for (int l = 0; l < 8; l++)
                if (l < nl) _mm256_storeu_ps(o + (p0 + l0 + l) * ldo + c, r[l]);
        }
        for (; c < HD; c++)
            for (int l = 0; l < nl; l++)
                o[(p0 + l0 + l) * ldo + c] = op[c * PW + l0 + l] * inv[l0 + l];
    }
}

/* ---- one query row (a decode step) --------------------------------------- */

/* Rows fewer than ROW_PATH: each through row_fwd, whose lanes are keys (QK)
 * and output dims (PV) instead of a panel's PW queries, of which such a
 * call would use 1 to 3. A decode step's QK and PV ran HD x NV vector FMAs
 * per key each (128 on AVX-512, 31 of its 32 lanes idle); row_fwd runs
 * HD / 8 FMAs and 8x8 transposes per key for QK and HD / VW FMAs for PV.
 * The same values in the same order as the panel's lane (below), so the
 * same bits: test_attn_kernels' row chunks of 1 and 3 compare both paths
 * bit for bit. At long contexts the cache's keys and values come from
 * memory (the weights streamed since evicted them): PV takes four of O's
 * vectors per pass over the tile, so that each key's V row is read once
 * and in order, not once per vector; a full group of 8 keys issues its 8
 * K loads together. GPT-2 124M's decode after a 600-token prompt on a
 * 2-core Zen 5 (in one process, 6 rounds of 64 steps): F32 12.77 -> 11.35
 * mean ms/token, bf16 8.17 -> 7.12; after 900, 14.45 -> 13.30 and 9.83 ->
 * 8.58; after 4, alike (9.98/9.92, 5.62/5.64). */
#define ROW_PATH 4

/* Query row i without dropout: per key tile [k0, k0+KB) at the panel's
 * boundaries, s_j = the FMA chain over d of K[j][d] (scale q[d]) (8 keys at
 * once: 8x8 transposes of K, 256-bit as the Q packing); the tile's max
 * folded in key order with vf_max's rule (a > b ? a : b); the rescale by
 * exp(m_old - m_new) only when the max changed (the panel's rescale of an
 * unchanged lane multiplies by exp(0) = 1); p_j = exp(s_j - m) summed in key
 * order; O[c] = the FMA chain over keys of V[j][c] p_j. scratch: O (HD),
 * qt (HD), the tile's s and p (KB + 8), 64-byte aligned. */
static void row_fwd(const mha__attn_args *a, int64_t i, float *scratch) {
    const int64_t HD = a->HD, kend = a->causal ? i + 1 : a->T;
    const int64_t hd64 = (HD + 15) / 16 * 16;
    float *o = scratch, *qt = o + hd64, *sp = qt + hd64;
    const float *q = a->q + i * a->ldq;
    for (int64_t d = 0; d < HD; d++) {
        qt[d] = a->scale * q[d];
        o[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int64_t d8 = HD / 8 * 8, c_v = HD / VW * VW;
    for (int64_t k0 = 0; k0 < kend; k0 += KB) {
        const int64_t kn = kend - k0 < KB ? kend - k0 : KB;
        /* S for 8 keys at a time */
        for (int64_t j0 = 0; j0 < kn; j0 += 8) {
            const int nk = (int)(kn - j0 < 8 ? kn - j0 : 8);
            const float *kr = a->k + (k0 + j0) * a->ldk;
            __m256 acc = _mm256_setzero_ps();
            for (int64_t d = 0; d < d8; d += 8) {
                __m256 r[8];
                if (nk == 8) { /* all eight loads issued at once */
#pragma GCC unroll 8
                    for (int t = 0; t < 8; t++) r[t] = _mm256_loadu_ps(kr + t * a->ldk + d);
                } else {
                    for (int t = 0; t < 8; t++) r[t] = t < nk ? _mm256_loadu_ps(kr + t * a->ldk + d) : _mm256_setzero_ps();
                }
                transpose8(r); /* r[t]: K[j0 .. j0+7][d + t] */
                for (int t = 0; t < 8; t++) acc = _mm256_fmadd_ps(r[t], _mm256_set1_ps(qt[d + t]), acc);
            }
            float s8[8];
            _mm256_storeu_ps(s8, acc);
            for (int t = 0; t < nk; t++) {
                for (int64_t d = d8; d < HD; d++) s8[t] = __builtin_fmaf(kr[t * a->ldk + d], qt[d], s8[t]);
                sp[j0 + t] = s8[t];
            }
        }
        float tm = -INFINITY;
        for (int64_t j = 0; j < kn; j++) tm = tm > sp[j] ? tm : sp[j];
        const float mn = m > tm ? m : tm, ms = mn == -INFINITY ? 0.0f : mn;
        if (!(mn == m)) { /* changed (vf_neq_u: NaN counts) */
            float al[VW];
            vf_storeu(al, vf_exp_nonpos(vf_set1(m - ms)));
            l *= al[0];
            for (int64_t c = 0; c < HD; c++) o[c] *= al[0];
        }
        const vf msv = vf_set1(ms);
        int64_t j = 0;
        for (; j + VW <= kn; j += VW) vf_storeu(sp + j, vf_exp_nonpos(vf_sub(vf_loadu(sp + j), msv)));
        if (j < kn) {
            float t[VW];
            for (int u = 0; u < VW; u++) t[u] = j + u < kn ? sp[j + u] : -INFINITY; /* exp: 0 */
            vf_storeu(t, vf_exp_nonpos(vf_sub(vf_loadu(t), msv)));
            for (int u = 0; j + u < kn; u++) sp[j + u] = t[u];
        }
        float sum = 0.0f;
        for (j = 0; j < kn; j++) sum += sp[j];
        l += sum;
        m = mn;
        const float *vr = a->v + k0 * a->ldv;
        /* O's vectors four at a time, each a chain over the keys in order
         * (the same bits), so that a key's V row is read in one pass */
        int64_t c = 0;
        for (; c + 4 * VW <= c_v; c += 4 * VW) {
            vf a0 = vf_loadu(o + c), a1 = vf_loadu(o + c + VW), a2 = vf_loadu(o + c + 2 * VW),
               a3 = vf_loadu(o + c + 3 * VW);
            for (j = 0; j < kn; j++) {
                const float *vj = vr + j * a->ldv + c;
                const vf pj = vf_set1(sp[j]);
                a0 = vf_fmadd(vf_loadu(vj), pj, a0);
                a1 = vf_fmadd(vf_loadu(vj + VW), pj, a1);
                a2 = vf_fmadd(vf_loadu(vj + 2 * VW), pj, a2);
                a3 = vf_fmadd(vf_loadu(vj + 3 * VW), pj, a3);
            }
            vf_storeu(o + c, a0);
            vf_storeu(o + c + VW, a1);
            vf_storeu(o + c + 2 * VW, a2);
            vf_storeu(o + c + 3 * VW, a3);
        }
        for (; c < c_v; c += VW) {
            vf acc = vf_loadu(o + c);
            for (j = 0; j < kn; j++) acc = vf_fmadd(vf_loadu(vr + j * a->ldv + c), vf_set1(sp[j]), acc);
            vf_storeu(o + c, acc);
        }
        for (c = c_v; c < HD; c++)
            for (j = 0; j < kn; j++) o[c] = __builtin_fmaf(vr[j * a->ldv + c], sp[j], o[c]);
    }
    const bool ok = l > 0.0f && m > -INFINITY;
    const float inv = ok ? 1.0f / l : NAN;
    if (a->lse) a->lse[i] = ok ? m + logf(l) : -INFINITY;
    if (a->stats) {
        a->stats[2 * i] = ok ? m : -INFINITY;
        a->stats[2 * i + 1] = ok ? logf(l) : 0.0f;
    }
    float *out = a->o + i * a->ldo;
    for (int64_t c = 0; c < HD; c++) out[c] = o[c] * inv;
}

/* ---- the kernel ---------------------------------------------------------- */

void MHA__KNAME(attn_fwd)(const mha__attn_args *a, float *scratch) {
    if (a->drop == MHA_DROP_GENERATOR) {
        mha__attn_fwd_ref(a, scratch);
        return;
    }
    const int64_t T = a->T, HD = a->HD > 0 ? a->HD : 0;
    const int64_t qe = a->q_end < T ? a->q_end : T;
    if (a->q_begin >= qe) return;
    const float ds = a->drop == MHA_DROP_NONE ? 1.0f : a->drop_scale;
    if (a->drop == MHA_DROP_NONE && qe - a->q_begin < ROW_PATH) {
        float *al = (float *)(void *)(((uintptr_t)scratch + 63u) & ~(uintptr_t)63u);
        for (int64_t i = a->q_begin; i < qe; i++) row_fwd(a, i, al);
        return;
    }

    float *base = (float *)(void *)(((uintptr_t)scratch + 63u) & ~(uintptr_t)63u);
    float *qt = base;               /* NP panels x (HD, PW): Q^T */
    float *ot = qt + NP * HD * PW;  /* NP panels x (HD, PW): O^T, unnormalised */
    float *st = ot + NP * HD * PW;  /* (KB, PW): S^T, then P^T */
    float *mrow = st + KB * PW;     /* (QB) running max */
    float *lrow = mrow + QB;        /* (QB) running sum */
    const int64_t ldp = HD;         /* row stride of the packed K and V tiles */
    float *kp = lrow + QB;          /* (KB, HD): K rows k0 .. k0+kn-1 */
    float *vp = kp + KB * ldp + VW; /* (KB, HD): V rows */

    const bool pack_k = crowded(a->ldk, HD, KB, ATTN_CROWD);
    const bool pack_v = crowded(a->ldv, HD, KB, ATTN_CROWD);
    keep_src ks;
    keep_src_init(&ks, a->drop, a->keep, a->keep_ld, a->philox_seed, a->philox_stream, a->keep_threshold);

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
                /* every query of the panel precedes k0; never the first tile:
                 * each row sees key 0, so no causal row is fully masked */
                assert(n >= 1 || k0 > 0);
                if (n <= 0) continue;
                vf tm[NV];
                for (int v = 0; v < NV; v++) tm[v] = vf_set1(-INFINITY);
                qk_panel(kt, ldkt, qt + p * HD * PW, HD, n, a->causal, k0, p0, st, tm);
                softmax_panel(&ks, st, n, k0, p0, plast, tm, mrow + p * PW, lrow + p * PW,
                              ot + p * HD * PW, HD);
                pv_panel(vt, ldvt, st, n, HD, ot + p * HD * PW, PV_ACC);
            }
        }

        /* O = O^T * (drop_scale / l), lse = m + log l, stats = (m, log l) */
        for (int p = 0; p < np; p++) {
            const int64_t p0 = qb + p * PW;
            const int nv = (int)(qe - p0 < PW ? qe - p0 : PW);
            /* m == -inf: every score of the row is -inf (each row has a
             * key, so they overflowed): softmax is 0/0, NaN in PyTorch, and
             * here: O^T holds zeros, times NaN. inv = ds / l eight lanes at
             * a time (the same rounding as one at a time). */
            float inv[PW];
            for (int l = 0; l < PW; l += 8) {
                const __m256 m = _mm256_loadu_ps(mrow + p * PW + l), s = _mm256_loadu_ps(lrow + p * PW + l);
                const __m256 ok = _mm256_and_ps(_mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GT_OQ),
                                                _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_GT_OQ));
                _mm256_storeu_ps(inv + l, _mm256_blendv_ps(_mm256_set1_ps(NAN),
                                                           _mm256_div_ps(_mm256_set1_ps(ds), s), ok));
            }
            if (a->lse || a->stats)
                for (int l = 0; l < nv; l++) {
                    const float m = mrow[p * PW + l], s = lrow[p * PW + l];
                    const bool ok = s > 0.0f && m > -INFINITY;
                    if (a->lse) a->lse[p0 + l] = ok ? m + logf(s) : -INFINITY;
                    if (a->stats) {
                        a->stats[2 * (p0 + l)] = ok ? m : -INFINITY;
                        a->stats[2 * (p0 + l) + 1] = ok ? logf(s) : 0.0f;
                    }
                }
            unpack_o(ot + p * HD * PW, inv, p0, nv, HD, a->o, a->ldo);
        }
    }
}
