/* kernels.h — the kernel contract. Every kernel here has a portable
 * reference version (the oracle, plain C) and may have ISA-specific versions
 * with the identical contract, chosen once at run time (mha__isa()).
 * Kernels are single-threaded; callers split work across threads. */
#ifndef MHA_KERNELS_H
#define MHA_KERNELS_H

#include "mha.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- ISA selection ------------------------------------------------------ */

/* Ordered: a higher ISA includes the lower ones, so "AVX2 code may run"
 * is mha__isa() >= MHA_ISA_AVX2. */
typedef enum { MHA_ISA_REF = 0, MHA_ISA_AVX2 = 1, MHA_ISA_AVX512 = 2 } mha__isa_t;

/* Detected once (CPUID: AVX2 and FMA, AVX-512 F/BW/DQ/VL, and OS support
 * for ymm/zmm state); MHA_ISA=ref in the environment forces MHA_ISA_REF,
 * MHA_ISA=avx2 caps it at MHA_ISA_AVX2. Thread-safe. */
mha__isa_t mha__isa(void);
/* True when MHA_ISA=ref: every kernel, GEMM included, is the reference. */
bool mha__forced_ref(void);

/* ---- GEMM --------------------------------------------------------------- */

/* Row-major C (M, N) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T.
 * A is (M, K) (or (K, M) when trans_a), B is (K, N) (or (N, K) when
 * trans_b). beta == 0 means C is write-only (never read, NaN-safe).
 * mha__sgemm dispatches to CBLAS when built with it (and not forced to
 * ref), else to the builtin kernels. May use several threads itself: call
 * it outside OpenMP parallel regions. */
void mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc);
/* "openblas (Haswell)", "builtin" or "ref": what mha__sgemm runs on. */
const char *mha__blas_name(void);
/* C (M, N) = op(A) op(B) + bias, bias (N) broadcast over the rows (NULL:
 * none). The bias is written first and accumulated into, saving a pass. */
void mha__sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     const float *A, int64_t lda, const float *B, int64_t ldb,
                     const float *bias, float *C, int64_t ldc);
/* The portable reference (plain loops, single thread). */
void mha__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc);

/* ---- Attention core ----------------------------------------------------- */

typedef enum {
    MHA_DROP_NONE = 0,
    /* PyTorch-identical mask drawn from gen while the kernel runs: rows must
     * be processed in order, T draws-pairs per row (all columns, masked
     * ones included). Reference kernel only; serial by nature. */
    MHA_DROP_GENERATOR = 1,
    /* Precomputed keep bits: column j of row i (relative to this head's row
     * 0) is kept iff (keep[i * keep_ld + (j >> 6)] >> (j & 63)) & 1. */
    MHA_DROP_BITMASK = 2,
    /* Counter-based (Philox4x32-10) fast dropout, see philox.h: kept iff
     * mha__philox_keep(philox_seed, philox_stream, i, j, keep_threshold). */
    MHA_DROP_PHILOX = 3
} mha__drop_mode;

/* One head of scaled dot-product attention:
 *   S = scale * Q K^T (T, T); causal: S[i][j] = -inf for j > i;
 *   P = softmax(S) row-wise; dropout: P[i][j] *= keep_ij ? drop_scale : 0;
 *   O = P V.
 * Only rows [q_begin, q_end) of O (and lse) are computed and written; with
 * causal only keys [0, q_end) are read. Rows are strided: row i of Q is
 * q + i * ldq (HD contiguous floats), likewise K, V, O.
 * O may alias Q exactly (o == q, ldo == ldq): a kernel reads only Q rows
 * [q_begin, q_end) and reads each before it writes the same row of O.
 * MultiHeadAttention writes its context over Q this way, saving a buffer. */
typedef struct {
    float *o;           /* [out] (T, HD), row stride ldo */
    int64_t ldo;
    const float *q;     /* [in] (T, HD), row stride ldq */
    int64_t ldq;
    const float *k;     /* [in] (T, HD), row stride ldk */
    int64_t ldk;
    const float *v;     /* [in] (T, HD), row stride ldv */
    int64_t ldv;
    float *lse;         /* [out] (T) logsumexp of the scaled, masked scores
                           (before dropout), or NULL */
    int64_t T, HD;
    int64_t q_begin, q_end;
    float scale;
    bool causal;
    /* dropout */
    mha__drop_mode drop;
    float drop_scale;            /* f32(1 / f32(1 - p)) */
    double drop_p;               /* GENERATOR */
    mha_generator *gen;          /* GENERATOR */
    const uint64_t *keep;        /* BITMASK */
    int64_t keep_ld;             /* BITMASK: 64-bit words per row */
    uint64_t philox_seed;        /* PHILOX */
    uint64_t philox_stream;      /* PHILOX: e.g. b * H + h */
    uint32_t keep_threshold;     /* PHILOX */
} mha__attn_args;

/* Scratch floats one call needs (per thread), for any q range. */
size_t mha__attn_fwd_ref_scratch(int64_t T, int64_t HD);
/* Reference: one row at a time, scores materialised for that row only. */
void mha__attn_fwd_ref(const mha__attn_args *a, float *scratch);

#if defined(MHA_HAVE_AVX2_KERNELS)
size_t mha__attn_fwd_avx2_scratch(int64_t T, int64_t HD);
/* Fused flash-style kernel: online softmax over key tiles, tiles above the
 * diagonal skipped, only the diagonal tile masked. No GENERATOR mode. */
void mha__attn_fwd_avx2(const mha__attn_args *a, float *scratch);
#endif

#if defined(MHA_HAVE_AVX512_KERNELS)
size_t mha__attn_fwd_avx512_scratch(int64_t T, int64_t HD);
/* mha__attn_fwd_avx2's contract and design on AVX-512 (F/BW/DQ/VL): zmm
 * lanes, larger register tiles. No GENERATOR mode (delegated to the
 * reference). Call only when mha__isa() == MHA_ISA_AVX512. */
void mha__attn_fwd_avx512(const mha__attn_args *a, float *scratch);
#endif

#endif
