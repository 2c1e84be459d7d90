/* attn_panel.h — what the fused attention bodies share (attn_fwd_body.h,
 * attn_bwd_body.h): the panel geometry, the register-tile micro-kernels,
 * the dropout keep masks, the Q packing and the cache-crowding test. One
 * translation unit includes a SIMD layer, attn_tunables.h, then one or both
 * bodies; each includes this once (the guard), so both bodies of a
 * translation unit run on the same panels and the same micro-kernels.
 * Everything here is static: each instantiation is self-contained.
 *
 * The including file defines (attn_tunables.h does):
 *   ATTN_NV          vectors per panel row: a panel is PW = VW * NV queries
 *   ATTN_QK_MR       max keys per QK register tile (<= 14)
 *   ATTN_PV_MR       max output dims per PV register tile (<= 14)
 *   ATTN_CROWD       lines of a K/V tile per cache set that trigger a copy
 *   ATTN_BWD_CROWD   the same for the backward's key tiles
 *
 * Layout: the vector lanes are queries. A "panel" is PW consecutive
 * queries; Q^T[d][0:PW] is a packed panel (pack_panel). The two products
 *   C[m][0:PW]  = sum_d A[m][d] * X^T[d][0:PW]    (qk_group: A = K rows)
 *   C[c][0:PW] += sum_j A[j][c] * Y^T[j][0:PW]    (pv_group: A = V rows)
 * are the same register tile "C[mr][PW] += a(mr scalars, broadcast from
 * rows of A read in place through their stride) x b(PW floats, packed)":
 * mr * NV vector accumulators, NV loads and mr broadcasts per mr * NV FMAs.
 * Each element is one FMA chain in a fixed order (d, or j, increasing),
 * the same whatever its lane, the tile height or the vector width. */
#ifndef MHA_ATTN_PANEL_H
#define MHA_ATTN_PANEL_H

#ifndef VW
#error "include a SIMD layer (simd_avx2.h, simd_avx512.h) before attn_panel.h"
#endif
#if !defined(ATTN_NV) || !defined(ATTN_QK_MR) || !defined(ATTN_PV_MR) || !defined(ATTN_CROWD) || \
    !defined(ATTN_BWD_CROWD)
#error "define the ATTN_* tunables (attn_tunables.h) before including attn_panel.h"
#endif
#if !defined(__AVX2__)
#error "attn_panel.h packs with AVX2"
#endif

#include "kernels.h"
#include "philox.h"
#include "simd_exp.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum {
    NV = ATTN_NV,
    PW = VW * NV, /* panel width: queries per panel */
    QK_MR = ATTN_QK_MR,
    PV_MR = ATTN_PV_MR
};
_Static_assert(NV >= 1 && NV <= 4, "1 <= NV <= 4");
_Static_assert(PW % 8 == 0, "the packing transposes 8 lanes at a time");
_Static_assert(QK_MR >= 1 && QK_MR <= 14 && PV_MR >= 1 && PV_MR <= 14, "MR in 1..14");


/* ---- micro-kernels ------------------------------------------------------ */

/* S^T rows for mr keys: st[m][0:PW] = sum_d k[m][d] qt[d][0:PW] (the scale
 * is in qt), -inf where key > query if mask (rel = key(m = 0) - query(lane
 * 0)); the lane-wise max is folded into mx[0..NV), held in registers over
 * the group (read and written through mx per key, it went to memory and
 * back: st's stores may alias it), or not taken with mx NULL (the
 * backward: it has the forward's; taking it cost the backward ~2%). */
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
    vf tm[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) tm[v] = mx ? mx[v] : ninf;
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            vf s = c[m][v];
            if (mask) /* key rel+m visible to lane l iff rel + m <= l */
                s = vf_select(vi_lt(lane, vi_set1(rel + m - VW * v)), ninf, s);
            vf_store(st + m * PW + VW * v, s);
            if (mx) tm[v] = vf_max(tm[v], s);
        }
    }
    if (mx)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) mx[v] = tm[v];
}

/* How pv_group writes its sum s over j (one FMA chain per element):
 * PV_ACC continues the chain from ot (ot = ot + v0 p0 + v1 p1 ..., each
 * step one rounding), PV_SET starts it at zero (ot = s, ot not read),
 * PV_ADD starts it at zero and adds it to ot at the end (ot = ot + s: the
 * backward's dQ, a key tile's sum added to the rows'). */
enum { PV_ACC, PV_SET, PV_ADD };

/* ot[m][0:PW] (op)= sum_{j < n} v[j][m] pt[j][0:PW] for mr output dims (v
 * points at V[k0] + c0, so the broadcasts read v + j*ldv + m); mode as
 * above. */
VINL void pv_group(const int mr, const float *v, int64_t ldv, const float *pt, int64_t n,
                   float *ot, const int mode) {
    vf c[PV_MR][NV];
#pragma GCC unroll 14
    for (int m = 0; m < mr; m++)
#pragma GCC unroll 4
        for (int u = 0; u < NV; u++) c[m][u] = mode == PV_ACC ? vf_load(ot + m * PW + VW * u) : vf_zero();
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
        for (int u = 0; u < NV; u++) {
            float *o = ot + m * PW + VW * u;
            vf_store(o, mode == PV_ADD ? vf_add(vf_load(o), c[m][u]) : c[m][u]);
        }
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
 * at key k0's row; mx: the panel's lane-wise max, or NULL (qk_group). */
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

/* O^T[0:HD][0:PW] (op)= sum_{j < n} V[k0 + j][:] P^T[j][0:PW], op: pv_group's
 * mode (PV_ACC: the forward's O^T; the backward's dQ^T of a key tile,
 * PV_ADD into the dQ^T kept across tiles, else PV_SET). */
static void pv_panel(const float *v, int64_t ldv, const float *pt, int64_t n, int64_t HD,
                     float *ot, const int mode) {
    const split sp = split_of(HD, PV_MR);
    int64_t c = 0;
    for (int64_t i = 0; c < HD; i++) {
        const int mr = (int)(sp.base + (i < sp.rem));
        const float *vc = v + c;
        float *oc = ot + c * PW;
#define PV_CALL(M) pv_group(M, vc, ldv, pt, n, oc, mode)
        MR_SWITCH(mr, PV_MR, PV_CALL)
#undef PV_CALL
        c += mr;
    }
}

/* ---- dropout masks --------------------------------------------------------- */

/* The key schedule of one seed: its words for the scalar rounds 0-2, and
 * each round's keys broadcast for the vector rounds 3-9 (the same for
 * every call under that seed, so a kernel call makes them once). */
typedef struct {
    uint32_t s0, s1;
    vi k0[10], k1[10];
} philox_keys;

VINL void philox_keys_of(uint64_t seed, philox_keys *pk) {
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    pk->s0 = k0, pk->s1 = k1;
    for (int r = 0; r < 10; r++) {
        pk->k0[r] = vi_set1((int32_t)k0), pk->k1[r] = vi_set1((int32_t)k1);
        k0 += MHA_PHILOX_W0, k1 += MHA_PHILOX_W1;
    }
}

/* Philox4x32-10 (mha__philox4x32_10, bit for bit) of the counters {j4,
 * row, stream lo, stream hi} under key = seed, for the VW rows of rv (one
 * per lane): w[0..3] its four words. Only the row differs between lanes,
 * so the products that do not depend on it (both of round 0, one of
 * rounds 1 and 2) are scalars. A lane's 32 x 32 -> 64-bit product is one
 * vu_mul_pairs, which multiplies the even lanes: the even rows ride in the
 * even lanes of one vector, the odd rows in those of another (the odd
 * lanes carry bits no product reads; the high half of a product is its
 * lane's hi_down), joined at the end: 108 vector ops per VW rows on
 * AVX-512 (vi_xor3 one vpternlogd) against 180 when each product made both
 * halves for one vector of counters (two vpmuludq, three shifts, two
 * blends). The attention layer's forward at (8, 1024) with Philox's mask
 * over the eval one, 2-core Zen 5, 5 alternated runs of the two builds:
 * 10.8-14.4 ms (median 12.9) -> 8.5-14.0 (median 9.7). The rounds' keys
 * broadcast once per kernel call (philox_keys) instead of twice a round,
 * and the two halves' chains side by side, rounds unrolled: 9.5-9.9 ->
 * 6.7-6.8 ms (3 alternated runs, the attention layer alone). */
VINL void philox_rows(vi rv, uint32_t j4, uint64_t stream, const philox_keys *pk, vi w[4]) {
    uint32_t k0 = pk->s0, k1 = pk->s1;
    /* round 0: c0 = row ^ a0, the other three words constants */
    const uint64_t P0 = (uint64_t)MHA_PHILOX_M0 * j4, P1 = (uint64_t)MHA_PHILOX_M1 * (uint32_t)stream;
    const uint32_t a0 = (uint32_t)(P1 >> 32) ^ k0, c1 = (uint32_t)P1;
    const uint32_t c2 = (uint32_t)(P0 >> 32) ^ (uint32_t)(stream >> 32) ^ k1, c3 = (uint32_t)P0;
    /* round 1: c0 and c1 constants, c2 and c3 from the lanes' product */
    k0 += MHA_PHILOX_W0, k1 += MHA_PHILOX_W1;
    const uint64_t Q1 = (uint64_t)MHA_PHILOX_M1 * c2;
    const uint32_t d0 = (uint32_t)(Q1 >> 32) ^ c1 ^ k0, d1 = (uint32_t)Q1, b2 = c3 ^ k1;
    /* round 2: c3 constant */
    k0 += MHA_PHILOX_W0, k1 += MHA_PHILOX_W1;
    const uint64_t R0 = (uint64_t)MHA_PHILOX_M0 * d0;
    const uint32_t e0 = d1 ^ k0, e2 = (uint32_t)(R0 >> 32) ^ k1, e3 = (uint32_t)R0;
    const vi M0 = vi_set1((int32_t)MHA_PHILOX_M0), M1 = vi_set1((int32_t)MHA_PHILOX_M1);
    vi x0[2], x1[2], x2[2], x3[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const vi row = h ? vi_hi_down(rv) : rv;
        vi p = vu_mul_pairs(vi_xor(row, vi_set1((int32_t)a0)), M0); /* round 1 */
        const vi r1c2 = vi_xor(vi_hi_down(p), vi_set1((int32_t)b2)), r1c3 = p;
        p = vu_mul_pairs(r1c2, M1); /* round 2 */
        x0[h] = vi_xor(vi_hi_down(p), vi_set1((int32_t)e0)), x1[h] = p;
        x2[h] = vi_xor(r1c3, vi_set1((int32_t)e2)), x3[h] = vi_set1((int32_t)e3);
    }
    /* rounds 3-9, the two halves' chains side by side */
#pragma GCC unroll 7
    for (int r = 3; r < 10; r++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const vi p0 = vu_mul_pairs(x0[h], M0), p1 = vu_mul_pairs(x2[h], M1);
            x0[h] = vi_xor3(vi_hi_down(p1), x1[h], pk->k0[r]);
            x1[h] = p1;
            x2[h] = vi_xor3(vi_hi_down(p0), x3[h], pk->k1[r]);
            x3[h] = p0;
        }
    w[0] = vi_pair_evens(x0[0], x0[1]);
    w[1] = vi_pair_evens(x1[0], x1[1]);
    w[2] = vi_pair_evens(x2[0], x2[1]);
    w[3] = vi_pair_evens(x3[0], x3[1]);
}

/* Where the keep decisions come from: the dropout fields of
 * mha__attn_args or mha__attn_bwd_args (BITMASK or PHILOX). */
typedef struct {
    mha__drop_mode drop;
    const uint64_t *keep; /* BITMASK */
    int64_t keep_ld;
    uint64_t philox_stream; /* PHILOX */
    uint32_t keep_threshold;
    philox_keys pk;
} keep_src;

VINL void keep_src_init(keep_src *ks, mha__drop_mode drop, const uint64_t *keep, int64_t keep_ld,
                        uint64_t philox_seed, uint64_t philox_stream, uint32_t keep_threshold) {
    ks->drop = drop;
    ks->keep = keep;
    ks->keep_ld = keep_ld;
    ks->philox_stream = philox_stream;
    ks->keep_threshold = keep_threshold;
    philox_keys_of(philox_seed, &ks->pk); /* set whatever the mode: the compiler cannot tell */
}

/* PHILOX keep masks (set lane = keep) for keys jabs .. jabs+3 (jabs % 4 ==
 * 0) and the PW queries p0 .. p0+PW-1 of a panel: mk[r][v] covers lanes
 * VW*v .. VW*v+VW-1. */
VINL void philox_masks(const keep_src *a, int64_t jabs, int64_t p0, vm mk[4][NV]) {
    const vi thr = vi_set1((int32_t)a->keep_threshold);
    const vi rows = vi_add(vi_set1((int32_t)(uint32_t)p0), vi_iota());
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) {
        vi w[4];
        philox_rows(vi_add(rows, vi_set1(VW * v)), (uint32_t)((uint64_t)jabs >> 2), a->philox_stream, &a->pk,
                    w);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) mk[r][v] = vu_lt(w[r], thr);
    }
}

/* BITMASK keep masks, key after key (keep_next), for the PW queries of a
 * panel (rows past row_max, padding lanes, reuse row_max): the words of a
 * run of 32 keys are read once, lane l of w[v] holding bits [32 (run & 1),
 * +32) of word run / 2 of row p0 + VW*v + l, so that key 32 run + b is
 * bit b, tested against a bit that moves up one place a key. Until
 * 2026-12-05 the masks came four keys at a time from a call that was not
 * inlined (a prologue, the masks through memory): with PyTorch's mask the
 * AVX-512 forward kernel ran 6.1-11.9% slower than without, 2.7-4.5% since
 * (T = 1024, one thread, 2-core Zen 5, 3 alternated runs); the backward
 * 3.2-6.3% -> 1.6-2.4%. */
typedef struct {
    const uint64_t *row[PW];
    int64_t key, run_end; /* the next key (absolute), the end of its run */
    vi w[NV], bit;
} keep_iter;

/* Starts at key `key`. */
VINL void keep_iter_init(keep_iter *it, const keep_src *a, int64_t p0, int64_t row_max, int64_t key) {
    for (int l = 0; l < PW; l++) it->row[l] = a->keep + (p0 + l <= row_max ? p0 + l : row_max) * a->keep_ld;
    it->key = key;
    it->run_end = key; /* the first keep_next reads the run */
    for (int v = 0; v < NV; v++) it->w[v] = vi_set1(0);
    it->bit = vi_set1(0);
}

/* m: the masks (set lane = keep) of the next key; moves to the one after. */
VINL void keep_next(keep_iter *it, vm m[NV]) {
    if (it->key == it->run_end) {
        _Alignas(64) int32_t t[PW];
        const int64_t run = it->key >> 5, wj = run >> 1;
        const int hs = (int)(run & 1) * 32;
        for (int l = 0; l < PW; l++) t[l] = (int32_t)(uint32_t)(it->row[l][wj] >> hs);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) it->w[v] = vi_loadu(t + VW * v);
        it->bit = vi_set1((int32_t)(1u << (it->key & 31)));
        it->run_end = run * 32 + 32;
    }
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) m[v] = vi_test(it->w[v], it->bit);
    it->bit = vi_add(it->bit, it->bit);
    it->key++;
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

/* The panel of rows p0 .. p0+nv-1 of X transposed: xt[d][l] = scale *
 * X[p0 + l][d] for l < nv, 0 for the padding lanes (the forward's and the
 * backward's Q^T: the scale folded into Q, one rounding, the same for every
 * row whatever its lane). Where xr is not NULL, from the same read of the
 * rows, also xr[l][0:HDP] = X[p0 + l][0:HD], zero-padded (rows l < nv only):
 * the backward's copy of Q and dO rows. Inlined into its two callers, so
 * that each is compiled for its own xr: the forward's pack_qt, and the
 * backward's pack_rows (attn_bwd_body.h). */
VINL void pack_panel(const float *x, int64_t ld, int64_t p0, int nv, int64_t HD, float scale, float *xt,
                     float *xr, int64_t HDP) {
    const __m256 sc = _mm256_set1_ps(scale);
    for (int l0 = 0; l0 < PW; l0 += 8) {
        if (l0 >= nv) { /* padding lanes only */
            for (int64_t d = 0; d < HD; d++) _mm256_store_ps(xt + d * PW + l0, _mm256_setzero_ps());
            continue;
        }
        int64_t d = 0;
        for (; d + 8 <= HD; d += 8) {
            __m256 r[8];
#pragma GCC unroll 8 /* constant indices, so that r stays in registers */
            for (int i = 0; i < 8; i++) {
                if (l0 + i < nv) {
                    const __m256 row = _mm256_loadu_ps(x + (p0 + l0 + i) * ld + d);
                    if (xr) _mm256_storeu_ps(xr + (l0 + i) * HDP + d, row);
                    r[i] = _mm256_mul_ps(row, sc);
                } else {
                    r[i] = _mm256_setzero_ps();
                }
            }
            transpose8(r);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++) _mm256_store_ps(xt + (d + i) * PW + l0, r[i]);
        }
        for (; d < HD; d++)
            for (int i = 0; i < 8; i++) {
                const float v = l0 + i < nv ? x[(p0 + l0 + i) * ld + d] : 0.0f;
                if (xr && l0 + i < nv) xr[(l0 + i) * HDP + d] = v;
                xt[d * PW + l0 + i] = scale * v;
            }
        if (xr)
            for (int i = 0; i < 8 && l0 + i < nv; i++)
                for (int64_t c = HD; c < HDP; c++) xr[(l0 + i) * HDP + c] = 0.0f;
    }
}

/* Q^T alone: qp[d][l] = scale * Q[p0 + l][d] (the forward's panel; with
 * scale 1, the backward's dQ^T from the dQ rows). */
static void pack_qt(const float *q, int64_t ldq, int64_t p0, int nv, int64_t HD, float scale, float *qp) {
    pack_panel(q, ldq, p0, nv, HD, scale, qp, NULL, 0);
}

/* Whether `rows` rows (a key tile) `ld` floats apart crowd a 64-set cache
 * with 64-byte lines (more than ATTN_CROWD of their lines in one set: 2^k-ish
 * strides, e.g. a packed qkv buffer with D_out = 1024 or 4096). Such tiles
 * are copied to contiguous scratch first; ordinary strides are read in
 * place. */
static bool crowded_scan(int64_t ld, int64_t HD, int64_t rows, unsigned limit) {
    unsigned cnt[64] = {0};
    const int64_t lines = (HD * 4 + 63) / 64 + 1; /* a row may straddle */
    for (int64_t j = 0; j < rows; j++) {
        const int64_t l0 = j * ld * 4 / 64;
        for (int64_t t = 0; t < lines && t < 64; t++)
            if (++cnt[(l0 + t) & 63] > limit) return true;
    }
    return false;
}

/* crowded_scan, memoised per thread (every call of a forward has the same
 * strides; the scan is ~1% of a short call). limit: ATTN_CROWD for the
 * forward's tiles, ATTN_BWD_CROWD for the backward's. */
static bool crowded(int64_t ld, int64_t HD, int64_t rows, unsigned limit) {
    static _Thread_local int64_t memo_ld = -1, memo_hd = -1, memo_rows = -1;
    static _Thread_local unsigned memo_limit;
    static _Thread_local bool memo;
    if (ld != memo_ld || HD != memo_hd || rows != memo_rows || limit != memo_limit) {
        memo = crowded_scan(ld, HD, rows, limit);
        memo_ld = ld;
        memo_hd = HD;
        memo_rows = rows;
        memo_limit = limit;
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

#endif
