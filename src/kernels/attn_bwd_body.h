/* attn_bwd_body.h — the fused attention backward (FlashAttention-2's loop
 * order: key tiles outer), written once on a SIMD layer and compiled once
 * per ISA beside the forward (attn_avx2.c, attn_avx512.c, and the 16-lane
 * emulation tests/attn_gen16.c). The contract is mha__attn_bwd_args's in
 * kernels.h; the oracle is mha__attn_bwd_ref.
 *
 * The including file defines, then includes a layer (simd_*.h) and this:
 *   ATTN_NV, ATTN_QK_MR, ATTN_PV_MR, ATTN_CROWD   the panel geometry and
 *                    micro-kernel tiles, shared with the forward
 *                    (attn_panel.h, where they are described)
 *   ATTN_BWD_KB      keys per tile (a multiple of 4)
 *   ATTN_BWD_NP      panels per q-block
 *   ATTN_OP_MR       max keys per dK/dV register tile (<= 14)
 *   ATTN_OP_NV       max vectors of head dims per dK/dV register tile (<= 4)
 *   MHA_KSFX         the suffix of the exported names (kernels.h's
 *                    MHA__KNAME): mha__attn_bwd_<sfx>, mha__attn_bwd_scratch_<sfx>
 * Everything else here is static, so each instantiation is self-contained.
 *
 * Layout: as in the forward, the lanes are queries (a panel is PW
 * consecutive queries) for the products whose result has a query axis:
 *   S^T[j][0:PW]   = sum_d K[j][d] Q^T[d][0:PW]     (Q^T holds scale * Q)
 *   dP^T[j][0:PW]  = sum_d V[j][d] dO^T[d][0:PW]
 *   dQ^T[c][0:PW] += sum_j K[j][c] dS^T[j][0:PW]
 * which are attn_panel.h's qk_panel (twice) and pv_panel, unchanged. The
 * elementwise step is lane-wise (grad_panel):
 *   P = exp((S - mx) - log l), m = keep ? drop_scale : 0 (1 without
 *   dropout), PM = P m, dS = scale * P (m dP - delta)
 * ((mx, log l): the forward's row statistics; no horizontal reductions:
 * they and delta are one vector per panel). The two products that reduce
 * over queries, into the key tile's accumulators,
 *   dV[j][c] += sum_i PM^T[j][i] dO[i][c]
 *   dK[j][c] += sum_i dS^T[j][i] Q[i][c]
 * take the lanes along the head dims instead (op_group: broadcast PM^T or
 * dS^T, load OP_NV vectors of a dO or Q row; OP_MR keys x OP_NV vectors of
 * accumulators), over a whole q-block of rows at a time. So each q panel is
 * packed twice: transposed (Q^T scaled, dO^T) for the first two products,
 * and as rows padded to HDP = HD rounded up to VW (Q, dO) for the last two.
 * The first key tile packs every panel of the call into scratch, and the
 * later tiles read them there (T x 2 (HD + HDP) floats); dQ^T accumulates
 * there too, panel by panel (T x HD), and goes back to the dQ rows once.
 * (Packing each panel again per key tile, and adding each tile's dQ^T
 * into the strided dQ rows, took about an eighth of the time at (8, 1024)
 * on a Zen 5.) A call of one key tile, or one whose tiles' panels would not
 * line up (causal, k_begin not a multiple of PW), packs per tile and adds
 * each tile's dQ^T into the rows: the same values. K and V are read in
 * place through their strides (copied to contiguous scratch only where the
 * strides crowd a few cache sets).
 *
 * Loop nest per call (keys [k_begin, k_end)):
 *   for each key tile [t0, t1): boundaries at absolute multiples of KB
 *   (key indices), except those closer than KB/2 to k_begin or k_end, so
 *   that a range starting or ending between multiples (the attention
 *   layer cuts heads into chunks at multiples of 64) has no short tiles;
 *   a tile holds KB/2 .. 2 KB keys (fewer only if the range does);
 *   dK, dV: the tile's accumulators (scratch, up to 2 KB x HDP each)
 *     for each q-block of QB = NP*PW rows from t0 (causal) or 0 to T:
 *       for each panel: (first tile) pack Q^T, dO^T and the Q, dO rows, and
 *         the dQ rows transposed; S^T and dP^T for the keys the panel sees
 *         (causal: up to its last row; -inf masking only in key groups
 *         crossing the diagonal); PM^T, dS^T (grad_panel); dQ^T += the sum
 *         over the tile's keys of K dS^T;
 *       dV += PM^T dO, dK += dS^T Q over the q-block's rows (key groups
 *       skip the rows that precede their first key, and start from zero
 *       in the first q-block they see)
 *     write the tile's dK and dV rows.
 *   write the dQ rows back from dQ^T (8x8 transposes).
 *
 * Determinism: every value is one FMA chain in a fixed order (S and dP over
 * d; dQ^T over the tile's keys; dK, dV over rows in increasing order,
 * continued from one q-block to the next through the scratch), the same
 * whatever the lane, the q-block and panel positions or the vector width;
 * what a row cannot see contributes exact zeros (P = exp(-inf) = 0). So dK
 * and dV do not depend on how the caller splits the keys, and dQ depends
 * only on the key tiles (fixed by k_begin, k_end and KB): dq[i] += the
 * tile's sum, tile after tile in increasing key order. With the same
 * tunables every layer gives the same bits (the tests check simd_avx2.h
 * against the emulation of simd_avx512.h).
 *
 * Dropout: the keep decisions of (row i, key j) are the forward's:
 * BITMASK bits read key after key (attn_panel.h's keep_next) or PHILOX
 * recomputed (philox_masks: one vectorised Philox call per lane covers 4
 * keys). No GENERATOR mode (the backward never draws).
 *
 * The packing works on 256-bit vectors whatever the layer, as the forward's. */
#if !defined(ATTN_BWD_KB) || !defined(ATTN_BWD_NP) || !defined(ATTN_OP_MR) || \
    !defined(ATTN_OP_NV) || !defined(MHA_KSFX)
#error "define the ATTN_BWD_* tunables and names before including attn_bwd_body.h"
#endif

#include "attn_panel.h"

#include <assert.h>

enum {
    BKB = ATTN_BWD_KB,
    BKT = 2 * BKB, /* the most keys a tile holds (a merged edge piece) */
    BNP = ATTN_BWD_NP,
    BQB = BNP * PW, /* rows per q-block */
    OP_MR = ATTN_OP_MR,
    OP_NV = ATTN_OP_NV
};
_Static_assert(BKB % 4 == 0 && BKB >= 4, "ATTN_BWD_KB must be a positive multiple of 4");
_Static_assert(BNP >= 1, "ATTN_BWD_NP >= 1");
_Static_assert(BKB % PW == 0, "key tiles of whole panels (the panels kept across tiles line up)");
_Static_assert(OP_MR >= 1 && OP_MR <= 14 && OP_NV >= 1 && OP_NV <= 4,
               "ATTN_OP_MR in 1..14, ATTN_OP_NV in 1..4");

/* ---- scratch -------------------------------------------------------------- */

/* np: panels of T rows (ceil(T / PW)), the call's most */
typedef struct {
    float *qt, *dot; /* np x (HD, PW): the panels' Q^T (times scale) and dO^T */
    /* KT = 2 KB: the most keys a tile holds */
    float *st, *dpt; /* (KT, PW): the panel's S^T, dP^T */
    float *dqt;      /* np x (HD, PW): the panels' dQ^T */
    float *pm, *ds;  /* NP x (KT, PW): PM^T and dS^T of the q-block, panel by panel */
    float *qr, *dor; /* (np PW, HDP): the Q and dO rows, zero-padded */
    float *dk, *dv;  /* (KT, HDP): the key tile's accumulators */
    float *kp, *vp;  /* (KT, HD): K and V tiles copied when their strides crowd */
} bwd_bufs;

/* Lays the buffers out from base (64-byte aligned, each piece a multiple
 * of 16 floats) and returns the floats used; base NULL: only counts. */
static size_t bwd_layout(size_t np, size_t hd, size_t hdp, float *base, bwd_bufs *b) {
    const size_t kp = (size_t)BKT * PW, panels = np * hd * PW, rows = np * PW * hdp;
    /* the tile's buffers first, the call's (which grow with T) after them */
    const size_t sizes[13] = {kp,       kp,       BNP * kp, BNP * kp, BKT * hdp, BKT * hdp, BKT * hd,
                              BKT * hd, panels,   panels,   panels,   rows,      rows};
    float **slot[13] = {&b->st, &b->dpt, &b->pm, &b->ds,  &b->dk, &b->dv, &b->kp,
                        &b->vp, &b->qt,  &b->dot, &b->dqt, &b->qr, &b->dor};
    size_t off = 0;
    for (int i = 0; i < 13; i++) {
        if (base) *slot[i] = base + off;
        off += (sizes[i] + 15u) & ~(size_t)15u;
    }
    return off;
}

size_t MHA__KNAME(attn_bwd_scratch)(int64_t T, int64_t HD) {
    const size_t hd = HD > 0 ? (size_t)HD : 0u, t = T > 0 ? (size_t)T : 0u;
    const size_t np = (t + PW - 1) / PW > 0 ? (t + PW - 1) / PW : 1u;
    if (hd > SIZE_MAX / 64u / (BQB + BKT + PW) || np > SIZE_MAX / 64u / PW / (hd + VW)) return SIZE_MAX;
    const size_t hdp = (hd + VW - 1) / VW * VW;
    bwd_bufs b;
    return 16u + bwd_layout(np, hd, hdp, NULL, &b); /* 16: alignment slack */
}

/* ---- packing ---------------------------------------------------------------- */

/* The panel of rows p0 .. p0+nv-1 of X twice, from one read of the rows:
 * xt = its Q^T-style transpose times scale, xr = the rows, zero-padded to
 * HDP (attn_panel.h's pack_panel). */
static void pack_rows(const float *x, int64_t ld, int64_t p0, int nv, int64_t HD, int64_t HDP, float scale,
                      float *xt, float *xr) {
    pack_panel(x, ld, p0, nv, HD, scale, xt, xr, HDP);
}

/* How put_dq writes a panel's dQ^T into the rows: DQ_ADD dq[p0 + l][c] +=
 * dqt[c][l] (a tile's sum), DQ_SET dq[p0 + l][c] = dqt[c][l] (the dQ^T kept
 * across tiles), DQ_ZERO dq[p0 + l][c] = +0.0 + dqt[c][l] (DQ_ADD's bits on
 * rows of zeros, the rows not read). */
enum { DQ_ADD, DQ_SET, DQ_ZERO };

/* The panel's rows l < nv of dQ from dqt, as mode says. */
static void put_dq(const float *dqt, int64_t p0, int nv, int64_t HD, float *dq, int64_t lddq, int mode) {
    for (int l0 = 0; l0 < nv; l0 += 8) {
        const int nl = nv - l0 < 8 ? nv - l0 : 8;
        int64_t c = 0;
        for (; c + 8 <= HD; c += 8) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) r[i] = _mm256_load_ps(dqt + (c + i) * PW + l0);
            transpose8(r);
#pragma GCC unroll 8 /* constant indices, so that r stays in registers */
            for (int l = 0; l < 8; l++)
                if (l < nl) {
                    float *d = dq + (p0 + l0 + l) * lddq + c;
                    const __m256 base = mode == DQ_ADD ? _mm256_loadu_ps(d) : _mm256_setzero_ps();
                    _mm256_storeu_ps(d, mode == DQ_SET ? r[l] : _mm256_add_ps(base, r[l]));
                }
        }
        for (; c < HD; c++)
            for (int l = 0; l < nl; l++) {
                float *d = dq + (p0 + l0 + l) * lddq + c;
                const float x = dqt[c * PW + l0 + l];
                *d = mode == DQ_SET ? x : (mode == DQ_ADD ? *d : 0.0f) + x;
            }
    }
}

/* ---- the elementwise step ------------------------------------------------------ */

/* From the panel's S^T and dP^T (keys 0 .. n-1 of the tile starting at key
 * k0; lanes = rows p0 ..): PM^T = P m and dS^T = scale P (m dP - delta),
 * P = exp((S - mx) - log l); rows n .. kn-1 of both are zeroed (keys the
 * panel does not see). mx, logl, delta: PW lanes each, the padding lanes
 * +inf, 0 and 0 (P = 0 there). With the forward's mx and log l (the same
 * S; l >= 1) the exponent is at most 0, so vf_exp_nonpos: vf_exp's bits
 * for any exponent up to 88.37. */
/* One vector of grad_panel with dropout: offset o, keep mask mk. */
VINL void grad_step(const float *st, const float *dpt, int64_t o, vf mv, vf lv, vf dl, vm mk, vf dsc, vf sc,
                    float *pm, float *ds) {
    const vf p = vf_exp_nonpos(vf_sub(vf_sub(vf_load(st + o), mv), lv));
    const vf mdp = vf_keep(mk, vf_mul(vf_load(dpt + o), dsc));
    vf_store(pm + o, vf_keep(mk, vf_mul(p, dsc)));
    vf_store(ds + o, vf_mul(vf_mul(p, vf_sub(mdp, dl)), sc));
}

static void grad_panel(const keep_src *ks, const float *st, const float *dpt, int64_t n,
                       int64_t kn, int64_t k0, int64_t p0, int64_t row_max, const float *mx,
                       const float *logl, const float *delta, float drop_scale, float scale,
                       float *pm, float *ds) {
    vf mv[NV], lv[NV], dl[NV];
    const vf sc = vf_set1(scale);
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        mv[v] = vf_load(mx + VW * v);
        lv[v] = vf_load(logl + VW * v);
        dl[v] = vf_load(delta + VW * v);
    }
    if (ks->drop == MHA_DROP_NONE) {
        for (int64_t j = 0; j < n; j++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                const int64_t o = j * PW + VW * v;
                const vf p = vf_exp_nonpos(vf_sub(vf_sub(vf_load(st + o), mv[v]), lv[v]));
                vf_store(pm + o, p);
                vf_store(ds + o, vf_mul(vf_mul(p, vf_sub(vf_load(dpt + o), dl[v])), sc));
            }
    } else if (ks->drop == MHA_DROP_BITMASK) {
        const vf dsc = vf_set1(drop_scale);
        keep_iter it;
        keep_iter_init(&it, ks, p0, row_max, k0);
        for (int64_t j = 0; j < n; j++) {
            vm mk[NV];
            keep_next(&it, mk);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                grad_step(st, dpt, j * PW + VW * v, mv[v], lv[v], dl[v], mk[v], dsc, sc, pm, ds);
        }
    } else { /* PHILOX */
        const vf dsc = vf_set1(drop_scale);
        /* key quads at absolute multiples of 4 (Philox's unit) */
        for (int64_t jq = -(k0 & 3); jq < n; jq += 4) {
            vm mk[4][NV];
            philox_masks(ks, k0 + jq, p0, mk);
            for (int r = 0; r < 4; r++) {
                const int64_t j = jq + r;
                if (j < 0 || j >= n) continue;
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++)
                    grad_step(st, dpt, j * PW + VW * v, mv[v], lv[v], dl[v], mk[r][v], dsc, sc, pm, ds);
            }
        }
    }
    /* op_tile reads a key past n only in a key group that starts below
     * n (a group starting at n or later skips the panel's rows), so at
     * most OP_MR - 1 of them */
    const int64_t nz = (kn < n + OP_MR - 1 ? kn : n + OP_MR - 1) - n;
    if (nz > 0) {
        memset(pm + n * PW, 0, (size_t)(nz * PW) * sizeof(float));
        memset(ds + n * PW, 0, (size_t)(nz * PW) * sizeof(float));
    }
}

/* ---- dK, dV: lanes along the head dims ------------------------------------------ */

/* out[m][VW*u ..] = acc[m][VW*u ..] + sum_{l0 <= l < l1} a(m, l) * rows[l][VW*u ..]
 * for mr keys and nvd vectors of dims, where a(m, l) = a[(l / PW) * KT*PW +
 * m*PW + l % PW] (PM^T or dS^T of the q-block, panel by panel; a points at
 * the group's first key), rows: (QB, ldr) at the group's first dim, acc:
 * (mr, lda) or NULL (the sums start from +0.0: a zeroed acc's bits), out:
 * (mr, ldo) (acc itself, or the gradient's rows). */
VINL void op_group(const int mr, const int nvd, const float *a, const float *rows, int64_t ldr,
                   int64_t l0, int64_t l1, const float *acc, int64_t lda, float *out, int64_t ldo) {
    vf c[OP_MR][OP_NV];
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int u = 0; u < nvd; u++) c[m][u] = acc ? vf_load(acc + m * lda + VW * u) : vf_zero();
    for (int64_t p = l0 / PW; p * PW < l1; p++) {
        const float *ap = a + p * (BKT * PW) - p * PW;
        const int64_t lb = l0 > p * PW ? l0 : p * PW, le = l1 < (p + 1) * PW ? l1 : (p + 1) * PW;
        for (int64_t l = lb; l < le; l++) {
            vf b[OP_NV];
#pragma GCC unroll 4
            for (int u = 0; u < nvd; u++) b[u] = vf_load(rows + l * ldr + VW * u);
#pragma GCC unroll 14
            for (int m = 0; m < mr; m++) {
                const vf x = vf_bcast(ap + m * PW + l);
#pragma GCC unroll 4
                for (int u = 0; u < nvd; u++) c[m][u] = vf_fmadd(x, b[u], c[m][u]);
            }
        }
    }
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int u = 0; u < nvd; u++) vf_storeu(out + m * ldo + VW * u, c[m][u]);
}

/* acc (kn, HDP) += buf^T rows over the q-block's rows [0, nq) (buf: PM^T or
 * dS^T, NP x (KT, PW); rows: (QB, HDP)). Causal: a key group skips the rows
 * before its first key (their weights are exact zeros). A key group's
 * first q-block (causal: the one holding its first key as a row; else the
 * first) starts from +0.0 instead of reading acc, so acc needs no zeroing.
 * With out, the sums go to out (kn, HDP columns, stride ldo) instead of
 * acc: the tile's last q-block, which no key group skips, writes the
 * gradient's rows itself. */
static void op_tile(const float *buf, const float *rows, int64_t HDP, int64_t nq, int64_t kn,
                    bool causal, int64_t t0, int64_t qb, float *acc, float *out, int64_t ldo) {
    const split sp = split_of(kn, OP_MR);
    const int64_t nvec = HDP / VW;
    int64_t j = 0;
    for (int64_t g = 0; j < kn; g++) {
        const int mr = (int)(sp.base + (g < sp.rem));
        const int64_t l0 = causal && t0 + j > qb ? t0 + j - qb : 0;
        if (l0 < nq) {
            const bool fresh = causal ? t0 + j >= qb : qb == 0;
            for (int64_t u0 = 0; u0 < nvec; u0 += OP_NV) {
                const int nvd = (int)(nvec - u0 < OP_NV ? nvec - u0 : OP_NV);
                const float *a = buf + j * PW, *r = rows + VW * u0;
                float *cc = acc + j * HDP + VW * u0;
                const float *ci = fresh ? NULL : cc;
                float *oo = out ? out + j * ldo + VW * u0 : cc;
                const int64_t ld = out ? ldo : HDP;
/* a switch over nvd (1 .. OP_NV, compile-time in each case) */
#define OP_NV_CASE(M, N)                                                                        \
    case N:                                                                                     \
        if ((N) <= OP_NV) op_group(M, N, a, r, HDP, l0, nq, ci, HDP, oo, ld);                    \
        break;
#define OP_CALL(M)                                                                              \
    switch (nvd) {                                                                              \
        OP_NV_CASE(M, 4) OP_NV_CASE(M, 3) OP_NV_CASE(M, 2)                                      \
    default: op_group(M, 1, a, r, HDP, l0, nq, ci, HDP, oo, ld); break;                         \
    }
                MR_SWITCH(mr, OP_MR, OP_CALL)
#undef OP_CALL
#undef OP_NV_CASE
            }
        }
        j += mr;
    }
}

/* ---- the kernel ---------------------------------------------------------- */

/* Prefetches the Q, dO and dQ rows of the panel starting at row r: rows of
 * a packed qkv buffer are kilobytes apart (a page each), out of reach of
 * the hardware prefetchers, and each key tile reads them all again. Issued
 * one panel ahead, they arrive while the current panel computes. */
static void prefetch_panel(const mha__attn_bwd_args *a, int64_t r, int64_t HD, bool dq) {
    const int64_t e = r + PW < a->T ? r + PW : a->T;
    prefetch_rows(a->q, a->ldq, r, e, HD);
    prefetch_rows(a->dout, a->lddo, r, e, HD);
    if (dq) prefetch_rows(a->dq, a->lddq, r, e, HD);
}

/* The end of the key tile that starts at t0 in the range [kb, ke): the
 * next multiple of KB, skipped when within KB/2 of either end of the
 * range: tiles of KB/2 .. 2 KB keys at fixed positions. */
static int64_t bwd_tile_end(int64_t t0, int64_t kb, int64_t ke) {
    int64_t t1 = (t0 / BKB + 1) * BKB;
    if (t1 - kb < BKB / 2) t1 += BKB; /* (the first tile only) */
    if (ke - t1 < BKB / 2 || t1 > ke) t1 = ke;
    return t1;
}

void MHA__KNAME(attn_bwd)(const mha__attn_bwd_args *a, float *scratch) {
    const int64_t T = a->T, HD = a->HD;
    const int64_t kb = a->k_begin > 0 ? a->k_begin : 0, ke = a->k_end < T ? a->k_end : T;
    if (kb >= ke || HD <= 0) return;
    const int64_t HDP = (HD + VW - 1) / VW * VW;
    bwd_bufs B;
    bwd_layout((size_t)((T + PW - 1) / PW), (size_t)HD, (size_t)HDP,
               (float *)(void *)(((uintptr_t)scratch + 63u) & ~(uintptr_t)63u), &B);
    /* Rows from qlo on are the call's. keep: the call has more than one
     * key tile and every tile's panels line up with the first tile's
     * (those start at qlo, the later ones at multiples of KB), so the
     * first tile's packing and one dQ^T per panel serve them all;
     * otherwise each tile packs its own panels into slot 0 and adds its
     * dQ^T into the rows (for one tile, the cheaper: no dQ^T to fill from
     * the rows first). */
    const int64_t qlo = a->causal ? kb : 0;
    const bool keep = qlo % PW == 0 && bwd_tile_end(kb, kb, ke) < ke;
    /* whether the panels read dQ's rows: to start dQ^T from them (keep),
     * or to add a tile's sum to them (one add per tile; with dq_set the
     * first tile's is to +0.0, done in registers) */
    const bool read_dq = !a->dq_set || !keep;
    const bool pack_k = crowded(a->ldk, HD, BKB, ATTN_BWD_CROWD);
    const bool pack_v = crowded(a->ldv, HD, BKB, ATTN_BWD_CROWD);
    keep_src ks;
    keep_src_init(&ks, a->drop, a->keep, a->keep_ld, a->philox_seed, a->philox_stream, a->keep_threshold);
    const float dsc = a->drop == MHA_DROP_NONE ? 1.0f : a->drop_scale;

    for (int64_t t0 = kb; t0 < ke;) {
        const int64_t t1 = bwd_tile_end(t0, kb, ke), kn = t1 - t0;
        const float *kt = a->k + t0 * a->ldk, *vt = a->v + t0 * a->ldv;
        int64_t ldkt = a->ldk, ldvt = a->ldv;
        if (pack_k) {
            for (int64_t j = 0; j < kn; j++)
                memcpy(B.kp + j * HD, kt + j * a->ldk, (size_t)HD * sizeof(float));
            kt = B.kp;
            ldkt = HD;
        }
        if (pack_v) {
            for (int64_t j = 0; j < kn; j++)
                memcpy(B.vp + j * HD, vt + j * a->ldv, (size_t)HD * sizeof(float));
            vt = B.vp;
            ldvt = HD;
        }
        const bool pack = !keep || t0 == kb;
        if (t0 == kb) prefetch_panel(a, qlo, HD, read_dq);

        for (int64_t qb = a->causal ? t0 : 0; qb < T; qb += BQB) {
            const int64_t nq = T - qb < BQB ? T - qb : BQB;
            const int np = (int)((nq + PW - 1) / PW);
            for (int p = 0; p < np; p++) {
                const int64_t p0 = qb + p * PW;
                const int nv = (int)(T - p0 < PW ? T - p0 : PW);
                /* the next panel's rows (after the last: the next tile's first) */
                if (pack && p0 + PW < T)
                    prefetch_panel(a, p0 + PW, HD, read_dq);
                else if (!keep && t1 < ke)
                    prefetch_panel(a, a->causal ? t1 : 0, HD, read_dq);
                const int64_t plast = p0 + nv - 1;
                int64_t n = kn;
                if (a->causal && plast + 1 - t0 < n) n = plast + 1 - t0;
                assert(n >= 1); /* p0 >= t0: no causal row is fully masked */
                float *pm = B.pm + p * (BKT * PW), *ds = B.ds + p * (BKT * PW);
                _Alignas(64) float mx[PW], logl[PW], delta[PW];
                for (int l = 0; l < PW; l++) {
                    mx[l] = l < nv ? a->stats[2 * (p0 + l)] : INFINITY;
                    logl[l] = l < nv ? a->stats[2 * (p0 + l) + 1] : 0.0f;
                    delta[l] = l < nv ? a->delta[p0 + l] : 0.0f;
                }
                const int64_t slot = keep ? (p0 - qlo) / PW : 0, row = keep ? p0 - qlo : p * PW;
                float *qt = B.qt + slot * HD * PW, *dot = B.dot + slot * HD * PW, *dqt = B.dqt + slot * HD * PW;
                if (pack) {
                    pack_rows(a->q, a->ldq, p0, nv, HD, HDP, a->scale, qt, B.qr + row * HDP);
                    pack_rows(a->dout, a->lddo, p0, nv, HD, HDP, 1.0f, dot, B.dor + row * HDP);
                    /* dQ^T starts at the rows' values (x 1 is exact), or
                     * at zero (dq_set) */
                    if (keep && a->dq_set)
                        memset(dqt, 0, (size_t)(HD * PW) * sizeof(float));
                    else if (keep)
                        pack_qt(a->dq, a->lddq, p0, nv, HD, 1.0f, dqt);
                }
                qk_panel(kt, ldkt, qt, HD, n, a->causal, t0, p0, B.st, NULL);
                qk_panel(vt, ldvt, dot, HD, n, false, t0, p0, B.dpt, NULL);
                grad_panel(&ks, B.st, B.dpt, n, kn, t0, p0, plast, mx, logl, delta, dsc, a->scale,
                           pm, ds);
                /* the tile's sum from zero, added to dQ^T or to the rows: the
                 * same adds in the same order (dq_set's first tile: to +0.0) */
                pv_panel(kt, ldkt, ds, n, HD, dqt, keep ? PV_ADD : PV_SET);
                if (!keep) put_dq(dqt, p0, nv, HD, a->dq, a->lddq, a->dq_set && t0 == kb ? DQ_ZERO : DQ_ADD);
            }
            const int64_t qrow = keep ? qb - qlo : 0; /* the q-block's first row in B.qr, B.dor */
            /* the last q-block writes dK and dV's rows (whole vectors: HD = HDP) */
            const bool last = qb + nq == T && HD == HDP;
            op_tile(B.pm, B.dor + qrow * HDP, HDP, nq, kn, a->causal, t0, qb, B.dv,
                    last ? a->dv + t0 * a->lddv : NULL, a->lddv);
            op_tile(B.ds, B.qr + qrow * HDP, HDP, nq, kn, a->causal, t0, qb, B.dk,
                    last ? a->dk + t0 * a->lddk : NULL, a->lddk);
        }

        if (HD != HDP)
            for (int64_t j = 0; j < kn; j++) {
                memcpy(a->dk + (t0 + j) * a->lddk, B.dk + j * HDP, (size_t)HD * sizeof(float));
                memcpy(a->dv + (t0 + j) * a->lddv, B.dv + j * HDP, (size_t)HD * sizeof(float));
            }
        t0 = t1;
    }
    if (keep)
        for (int64_t p0 = qlo; p0 < T; p0 += PW)
            put_dq(B.dqt + (p0 - qlo) / PW * HD * PW, p0, (int)(T - p0 < PW ? T - p0 : PW), HD, a->dq, a->lddq,
                   DQ_SET);
}
