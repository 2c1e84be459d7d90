/* gemm_body.h — the builtin packed GEMM (the fast tables' gemm kernel in
 * builds without a BLAS), written once on a SIMD layer and compiled once per
 * ISA (gemm_avx2.c, gemm_avx512.c, and the 16-lane emulation
 * tests/attn_gen16.c). Contract: kernels.h's gemm (one thread, row-major
 * C = alpha op(A) op(B) + beta C, false only when its buffer cannot be
 * allocated); the oracle is mha__gemm_ref.
 *
 * Goto/BLIS's loop nest: op(B) is packed KC x NC at a time into panels of
 * NR = PW columns, op(A) MC x KC at a time into panels of MR rows, and the
 * register tile C[MR][NR] += a(MR scalars, broadcast) x b(NR floats) runs
 * over KC: that is attn_panel.h's pv_group (the attention's P V product,
 * the same shape of work), not a second micro-kernel. With the attention's
 * tunables that is 6 x 16 (12 ymm accumulators) on AVX2 and 12 x 32 (24 zmm)
 * on AVX-512. The B micro-panel (KC x NR) stays in L1 while the MC / MR A
 * panels of the block stream past it from L2.
 *
 * Packing transposes with 8x8 blocks (attn_panel.h's transpose8) where the
 * operand is contiguous along k (A not transposed, B transposed: x W^T, the
 * projections), and copies rows where it is contiguous along the panel
 * (A^T, B: the backward's products). Edge panels are zero-padded; edge
 * register tiles are computed whole and only their valid part written.
 *
 * Determinism: C[i][j] = alpha * t_0 + beta * C, then += alpha * t_b for the
 * KC blocks b = 1, 2, ... in order, each t_b one FMA chain over its k in
 * increasing order, whatever i, j, the tile's position or the caller's
 * split: a function of (K, KC) only.
 *
 * The including file has included a SIMD layer and attn_tunables.h, and
 * defines MHA_KSFX, the suffix of the exported name (mha__gemm_<sfx>). */
#ifndef MHA_KSFX
#error "define MHA_KSFX before including gemm_body.h"
#endif

#include "attn_panel.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifndef MHA_GEMM_KC
#define MHA_GEMM_KC 256 /* k per packed block: a B micro-panel of KC x NR in L1 */
#endif
#ifndef MHA_GEMM_MC_TILES
#define MHA_GEMM_MC_TILES 16 /* register tiles per packed A block (MC x KC in L2) */
#endif
#ifndef MHA_GEMM_NC
#define MHA_GEMM_NC 768 /* columns of op(B) per packed block (L3) */
#endif
enum {
    G_MR = PV_MR, /* rows of op(A) per register tile */
    G_NR = PW,    /* columns of op(B) per register tile */
    G_KC = MHA_GEMM_KC,
    G_MC = MHA_GEMM_MC_TILES * G_MR,
    G_NC = MHA_GEMM_NC
};
_Static_assert(G_NR % VW == 0, "NR is whole vectors");

/* The first w (1..8) lanes of v to p: one store for whole vectors (AMD's
 * masked stores are slow), through a bounce buffer of fixed size else. */
VINL void gemm_store_part(float *p, __m256 v, int w) {
    if (w == 8) {
        _mm256_storeu_ps(p, v);
    } else {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(p, t, (size_t)w * sizeof(float));
    }
}

/* out[p * W + i] = X[i][p] (rows of X ld apart, contiguous along p) for
 * i < n, 0 for n <= i < W; p < k. Inlined, so that W (the tile's MR or NR)
 * is a constant. */
VINL void gemm_pack_t(const float *x, int64_t ld, int n, const int W, int64_t k, float *out) {
    for (int i0 = 0; i0 < W; i0 += 8) {
        const int w = W - i0 < 8 ? W - i0 : 8;
        int64_t p = 0;
        for (; p + 8 <= k; p += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i0 + i < n ? _mm256_loadu_ps(x + (i0 + i) * ld + p) : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < 8; i++) gemm_store_part(out + (p + i) * W + i0, r[i], w);
        }
        for (; p < k; p++)
            for (int i = 0; i < w; i++) out[p * W + i0 + i] = i0 + i < n ? x[(i0 + i) * ld + p] : 0.0f;
    }
}

/* out[p * W + i] = X[p][i] (rows of X ld apart, contiguous along i) for
 * i < n, 0 for n <= i < W; p < k. */
VINL void gemm_pack_n(const float *x, int64_t ld, int n, const int W, int64_t k, float *out) {
    for (int64_t p = 0; p < k; p++) {
        memcpy(out + p * W, x + p * ld, (size_t)n * sizeof(float));
        for (int i = n; i < W; i++) out[p * W + i] = 0.0f;
    }
}

/* A panel of n (<= W) rows of op(A) or columns of op(B), k in [p0, p0 + kc),
 * starting at row / column idx of op(X), into out[p * W + i]: k_contig
 * says whether X stores that operand contiguous along k (A as is, B
 * transposed) or along the panel (A transposed, B as is). */
VINL void gemm_pack(const float *x, int64_t ld, bool k_contig, int64_t idx, int64_t p0, int n,
                    const int W, int64_t kc, float *out) {
    if (k_contig) gemm_pack_t(x + idx * ld + p0, ld, n, W, kc, out);
    else gemm_pack_n(x + p0 * ld + idx, ld, n, W, kc, out);
}

/* C[r][c] (r < m, c < n of the register tile t[MR][NR]) = alpha t + beta C
 * on the first KC block (beta == 0: C not read), C + alpha t after. */
static void gemm_store(const float *t, int m, int n, float alpha, float beta, bool first,
                       float *c, int64_t ldc) {
    const vf va = vf_set1(alpha), vb = vf_set1(beta);
    for (int r = 0; r < m; r++) {
        float *cr = c + r * ldc;
        const float *tr = t + r * G_NR;
        int j = 0;
        if (n == G_NR)
            for (; j < G_NR; j += VW) {
                const vf x = vf_mul(va, vf_load(tr + j));
                vf_storeu(cr + j, !first      ? vf_add(vf_loadu(cr + j), x)
                                  : beta == 0.0f ? x
                                                 : vf_fmadd(vb, vf_loadu(cr + j), x));
            }
        for (; j < n; j++) {
            const float x = alpha * tr[j];
            cr[j] = !first ? cr[j] + x : beta == 0.0f ? x : __builtin_fmaf(beta, cr[j], x);
        }
    }
}

bool MHA__KNAME(gemm)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                      int64_t ldc) {
    if (M <= 0 || N <= 0) return true;
    if (K <= 0) { /* C = beta C, as BLAS defines it */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return true;
    }
    const int64_t nc_max = N < G_NC ? (N + G_NR - 1) / G_NR * G_NR : G_NC;
    const int64_t kc_max = K < G_KC ? K : G_KC;
    /* A block, B block, the register tile, each rounded up to 16 floats,
     * and 16 floats to align the first to 64 bytes */
    const size_t na = (size_t)(G_MC * kc_max), nb = (size_t)(nc_max * kc_max);
    float *buf = mha__alloc((na + nb + (size_t)(G_MR * G_NR) + 48u) * sizeof(float));
    if (!buf) return false;
    float *pa = (float *)(void *)(((uintptr_t)buf + 63u) & ~(uintptr_t)63u);
    float *pb = pa + (na + 15u) / 16u * 16u;
    float *tile = pb + (nb + 15u) / 16u * 16u;

    for (int64_t j0 = 0; j0 < N; j0 += G_NC) {
        const int64_t nc = N - j0 < G_NC ? N - j0 : G_NC;
        for (int64_t p0 = 0; p0 < K; p0 += G_KC) {
            const int64_t kc = K - p0 < G_KC ? K - p0 : G_KC;
            for (int64_t jr = 0; jr < nc; jr += G_NR) {
                const int nr = (int)(nc - jr < G_NR ? nc - jr : G_NR);
                gemm_pack(B, ldb, trans_b, j0 + jr, p0, nr, G_NR, kc, pb + jr * kc);
            }
            for (int64_t i0 = 0; i0 < M; i0 += G_MC) {
                const int64_t mc = M - i0 < G_MC ? M - i0 : G_MC;
                for (int64_t ir = 0; ir < mc; ir += G_MR) {
                    const int mr = (int)(mc - ir < G_MR ? mc - ir : G_MR);
                    gemm_pack(A, lda, !trans_a, i0 + ir, p0, mr, G_MR, kc, pa + ir * kc);
                }
                for (int64_t jr = 0; jr < nc; jr += G_NR) {
                    const int nr = (int)(nc - jr < G_NR ? nc - jr : G_NR);
                    for (int64_t ir = 0; ir < mc; ir += G_MR) {
                        const int mr = (int)(mc - ir < G_MR ? mc - ir : G_MR);
                        float *c = C + (i0 + ir) * ldc + j0 + jr;
                        /* C's rows are read at the end (all but the first
                         * KC block): fetched now, they arrive while the
                         * tile computes (a C block outgrows L2) */
                        if (p0 > 0 || beta != 0.0f)
                            for (int r = 0; r < mr; r++) {
                                _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);
                                _mm_prefetch((const char *)(c + r * ldc + nr - 1), _MM_HINT_T0);
                            }
                        pv_group(G_MR, pa + ir * kc, G_MR, pb + jr * kc, kc, tile, PV_SET);
                        gemm_store(tile, mr, nr, alpha, beta, p0 == 0, c, ldc);
                    }
                }
            }
        }
    }
    mha__free(buf);
    return true;
}
