/* kernels.h — the kernel contract. Every kernel here has a portable
 * reference version (the oracle, plain C) and may have ISA-specific versions
 * with the identical contract; the dispatch table at the end of this file
 * holds the ones in use.
 * Kernels are single-threaded; callers split work across threads. */
#ifndef MHA_KERNELS_H
#define MHA_KERNELS_H

#include "common/common.h"
#include "mha.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- ISA ---------------------------------------------------------------- */

/* Ordered: a higher ISA includes the lower ones. */
typedef enum { MHA_ISA_REF = 0, MHA_ISA_AVX2 = 1, MHA_ISA_AVX512 = 2, MHA_ISA_COUNT = 3 } mha__isa_t;

/* ---- GEMM --------------------------------------------------------------- */

/* Row-major C (M, N) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T.
 * A is (M, K) (or (K, M) when trans_a), B is (K, N) (or (N, K) when
 * trans_b). beta == 0 means C is write-only (never read, NaN-safe).
 * mha__sgemm cuts C into tiles whose sizes depend on (M, N, K) only, never
 * on the thread count, and computes each tile with one single-threaded call
 * of the active table's gemm (the backend, or the reference loops), tiles
 * dealt to OpenMP threads: every element of C gets the same bits whatever
 * the thread count. Call it outside OpenMP parallel regions (inside one it
 * runs on the calling thread alone, with the same tiles). MHA_OK, or
 * MHA_ERR_NOMEM when the backend could not get its buffers (oneDNN says so;
 * OpenBLAS, which would retry forever, is probed first: gemm.c); C is then
 * unspecified. Never anything else. */
MHA_NODISCARD mha_status mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N,
                                    int64_t K, float alpha, const float *A, int64_t lda,
                                    const float *B, int64_t ldb, float beta, float *C,
                                    int64_t ldc);
/* C (M, N) = op(A) op(B) + bias, bias (N) broadcast over the rows (NULL:
 * none). The bias is written first and accumulated into, saving a pass. */
MHA_NODISCARD mha_status mha__sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N,
                                         int64_t K, const float *A, int64_t lda,
                                         const float *B, int64_t ldb, const float *bias,
                                         float *C, int64_t ldc);
/* The portable reference (plain loops in a fixed order, single thread). */
bool mha__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N,
                    int64_t K, float alpha, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float beta, float *C,
                    int64_t ldc);
/* The GEMM backend of this build on one thread: oneDNN, OpenBLAS (loaded at
 * first use) or the builtin kernel; the fast tables' gemm. false: out of
 * memory (the reference loops never fail). */
bool mha__sgemm_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float beta, float *C, int64_t ldc);
/* What mha__sgemm_backend runs, e.g. "onednn 2.6.3 (avx2)", "openblas
 * 0.3.21 (Haswell)", "builtin". Loads the backend if needed. */
const char *mha__sgemm_backend_name(void);
/* Called once by the dispatch before the backend's first use when the
 * kernels are capped at AVX2 (MHA_ISA=avx2): the backend then runs its
 * AVX2 code too where it can be told so (oneDNN). */
void mha__sgemm_backend_cap_avx2(void);

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
    float *stats;       /* [out] (T, 2) the same in two parts, for a backward:
                           (m, log l), m the row's maximum score, l the sum
                           of exp(score - m) (lse = m + log l); or NULL.
                           exp((s - m) - log l) keeps its precision where
                           exp(s - lse) loses a rounding of lse, which is
                           large when the scores are. */
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
 * reference). Call only where the CPU has AVX-512 (the dispatch table). */
void mha__attn_fwd_avx512(const mha__attn_args *a, float *scratch);
#endif

/* ---- Attention backward -------------------------------------------------
 * One head of the backward of mha__attn_args's attention, for the keys
 * [k_begin, k_end). With P[i][j] = exp((scale * q_i.k_j - m_i) - log l_i)
 * ((m_i, log l_i) the forward's stats) where row i
 * sees key j (causal: j <= i; else every j), 0 elsewhere, and
 * m_ij = keep_ij ? drop_scale : 0 (1 everywhere without dropout: MHA_DROP_NONE):
 *   dV[j]  = sum_i P[i][j] m_ij dO[i]                       (written)
 *   dS[i][j] = P[i][j] (m_ij dO[i].V[j] - delta[i])
 *   dK[j]  = scale * sum_i dS[i][j] q_i                    (written)
 *   dQ[i] += scale * sum_{j in [k_begin, k_end)} dS[i][j] k_j  (accumulated)
 * for every key j in [k_begin, k_end) and every row i in [0, T) (causal:
 * the rows i >= k_begin; dQ rows that see none of the keys are untouched).
 * delta[i] = sum_d dO[i][d] O[i][d] is the caller's (the attention layer
 * computes it once per head). The stats are the forward's (before dropout). The
 * keep decisions are the forward's: BITMASK (the saved bits) or PHILOX
 * (regenerated from seed and stream); no GENERATOR mode.
 * Order: a kernel adds into each dQ row in increasing key order (key tiles
 * at positions fixed by the key range: absolute multiples of the kernel's
 * tile, see attn_bwd_body.h), so dQ does not depend on how the caller splits
 * the keys beyond the split itself, which the caller fixes from the shape. */
typedef struct {
    const float *q, *k, *v;   /* [in] (T, HD) rows, strides ldq, ldk, ldv */
    int64_t ldq, ldk, ldv;
    const float *dout;        /* [in] (T, HD) dO, stride lddo */
    int64_t lddo;
    const float *stats;       /* [in] (T, 2) the forward's (m, log l) */
    const float *delta;       /* [in] (T) */
    float *dq;                /* [acc] (T, HD), stride lddq */
    int64_t lddq;
    float *dk, *dv;           /* [out] rows [k_begin, k_end), strides lddk, lddv */
    int64_t lddk, lddv;
    int64_t T, HD;
    int64_t k_begin, k_end;
    float scale;
    bool causal;
    mha__drop_mode drop;      /* NONE, BITMASK or PHILOX */
    float drop_scale;
    const uint64_t *keep;     /* BITMASK, as in mha__attn_args */
    int64_t keep_ld;
    uint64_t philox_seed;     /* PHILOX */
    uint64_t philox_stream;
    uint32_t keep_threshold;
} mha__attn_bwd_args;

/* Scratch floats one backward call needs (per thread), for any key range. */
size_t mha__attn_bwd_ref_scratch(int64_t T, int64_t HD);
/* Reference: plain loops through the weights, sums in double. */
void mha__attn_bwd_ref(const mha__attn_bwd_args *a, float *scratch);

#if defined(MHA_HAVE_AVX2_KERNELS)
size_t mha__attn_bwd_avx2_scratch(int64_t T, int64_t HD);
/* Fused FlashAttention-2-style kernel (attn_bwd_body.h): key tiles outer,
 * S and P recomputed per (key tile, query panel), no T x T buffer; the
 * scratch does not depend on T. BITMASK and PHILOX dropout. */
void mha__attn_bwd_avx2(const mha__attn_bwd_args *a, float *scratch);
#endif

#if defined(MHA_HAVE_AVX512_KERNELS)
size_t mha__attn_bwd_avx512_scratch(int64_t T, int64_t HD);
/* mha__attn_bwd_avx2's contract and design on AVX-512 (F/BW/DQ/VL). Call
 * only where the CPU has AVX-512 (the dispatch table). */
void mha__attn_bwd_avx512(const mha__attn_bwd_args *a, float *scratch);
#endif

/* ---- the builtin GEMM backend ---------------------------------------------
 * gemm_body.h's packed GEMM (Goto/BLIS loop nest on the attention's
 * register-tile micro-kernel), one thread, mha__gemm_fn's contract; false
 * only when its packing buffer (about 1 MB) cannot be allocated. The fast
 * tables' gemm in builds without a BLAS (-DMHA_BLAS=builtin). */
#if defined(MHA_HAVE_AVX2_KERNELS)
bool mha__gemm_packed_avx2(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           float alpha, const float *A, int64_t lda, const float *B,
                           int64_t ldb, float beta, float *C, int64_t ldc);
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
bool mha__gemm_packed_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             float alpha, const float *A, int64_t lda, const float *B,
                             int64_t ldb, float beta, float *C, int64_t ldc);
#endif

/* ---- GEMV ----------------------------------------------------------------
 * y[n] = sum_k W[n][k] x[k] (+ bias[n]) for n < N: the M = 1 GEMM of decoding
 * (x W^T with nn.Linear's (N, K) weight). Single-threaded; mha__sgemm splits
 * rows across threads (fixed blocks). Each y[n] is computed the same way
 * whatever N and the rows around it. */
typedef void (*mha__gemv_fn)(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                             const float *bias, float *y);
void mha__gemv_ref(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                   const float *bias, float *y);
#if defined(MHA_HAVE_AVX2_KERNELS)
void mha__gemv_avx2(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                    const float *bias, float *y);
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
void mha__gemv_avx512(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                      const float *bias, float *y);
#endif

/* ---- Elementwise (chapter 4) ---------------------------------------------
 * Row kernels on strided rows, single-threaded (callers split rows, or the
 * GEMM's tiles, across threads). Each output element is computed the same
 * way whatever the rows or columns around it: LayerNorm's from its row
 * alone, the others' from the element alone. The fast versions share one
 * body (elementwise_body.h); the reference versions are plain C
 * (elementwise.c). NaN and inf propagate as in the reference. */

/* LayerNorm over the last dimension: y = scale * (x - mean) / sqrt(var +
 * 1e-5) + shift per row of E, var biased. y may equal x (ldy == ldx). */
typedef void (*mha__layernorm_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
                                  int64_t E, const float *scale, const float *shift);
/* y = gelu(x + bias), the book's tanh form, over (rows, n); bias (n) or
 * NULL. y may equal x (ldy == ldx). */
typedef void (*mha__bias_gelu_fn)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,
                                  int64_t n, const float *bias);
/* Dropout keep bits over a (rows, n) block: element (i, j) is kept iff bit
 * bit0 + i * ld + j of bits is set (bit b: bits[b >> 6] >> (b & 63)); a
 * kept element is multiplied by scale, a dropped one by 0, as
 * mha_generator_dropout does. */
typedef struct {
    const uint64_t *bits;
    int64_t bit0, ld;
    float scale;
} mha__keep_view;
/* The residual add: x += drop(y + bias) over (rows, n); bias (n) or NULL
 * (then y as it is); keep NULL: no dropout. */
typedef void (*mha__residual_fn)(float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows,
                                 int64_t n, const float *bias, const mha__keep_view *keep);

#define MHA__ELEMENTWISE_DECL(sfx)                                                                 \
    void mha__layernorm_##sfx(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,    \
                              int64_t E, const float *scale, const float *shift);                   \
    void mha__bias_gelu_##sfx(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows,    \
                              int64_t n, const float *bias);                                        \
    void mha__residual_add_##sfx(float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows, \
                                 int64_t n, const float *bias, const mha__keep_view *keep);
MHA__ELEMENTWISE_DECL(ref)
/* A row's mean and 1/sqrt(biased variance + 1e-5), both summed in double
 * (the reference LayerNorm's; the GPT backward recomputes them with it). */
void mha__layernorm_moments_ref(const float *x, int64_t E, float *mean, float *rstd);
#if defined(MHA_HAVE_AVX2_KERNELS)
MHA__ELEMENTWISE_DECL(avx2)
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
MHA__ELEMENTWISE_DECL(avx512)
#endif

/* The row drivers on the active kernels, rows in fixed blocks dealt to
 * OpenMP threads (whatever the thread count, each row is one kernel call's
 * work on the same operands: the same bits). For mha_layernorm_forward,
 * mha_gelu_forward and the GPT forward. */
void mha__layernorm_rows(float *y, const float *x, const float *scale, const float *shift,
                         int64_t rows, int64_t E);
void mha__gelu_n(float *y, const float *x, size_t n);
/* out = in * (bit i ? scale : 0) over n elements (the dropout_apply kernel
 * in fixed chunks of whole bit words over threads). */
void mha__dropout_apply_n(float *out, const float *in, const uint64_t *bits, size_t n, float scale);

/* The GEMM of nn.Linear with an epilogue: C (M, N) = A (M, K) B^T (B (N,
 * K), row-major), then on each tile of C, right after the thread that
 * computed it (the tile still in its cache), by the active kernels:
 *   MHA_EPI_GELU:      C = gelu(C + bias)    (x non-NULL: x = C + bias too,
 *                      GELU's input for a backward; row stride ldx)
 *   MHA_EPI_RESIDUAL:  x += drop(C + bias)   (x (M, N), row stride ldx;
 *                      C keeps A B^T, scratch)
 * bias (N) or NULL. The keep bits of element (i, j) are bit i * keep.ld +
 * j + keep.bit0 (keep.bits NULL: no dropout). The tiles are mha__sgemm's
 * (the M == 1 GEMV's row blocks), so the result does not depend on the
 * thread count. The bias is added to the finished product (one rounding);
 * mha__sgemm_bias instead has the backend accumulate into it, which equals
 * this where the backend adds C to its product last (the reference loops;
 * a backend that splits K may differ in the last bit). */
typedef enum { MHA_EPI_GELU = 1, MHA_EPI_RESIDUAL = 2 } mha__epi_kind;
typedef struct {
    mha__epi_kind kind;
    const float *bias;
    float *x;             /* RESIDUAL; GELU: its input kept, or NULL */
    int64_t ldx;
    mha__keep_view keep;  /* RESIDUAL: dropout, or .bits NULL */
} mha__gemm_epilogue;
MHA_NODISCARD mha_status mha__sgemm_epilogue(int64_t M, int64_t N, int64_t K, const float *A,
                                             int64_t lda, const float *B, int64_t ldb, float *C,
                                             int64_t ldc, const mha__gemm_epilogue *epi);

/* ---- The dispatch table -------------------------------------------------
 * One table per ISA (BLIS's context pattern): the reference table holds the
 * portable kernels; each ISA's table starts as a copy of the one below it
 * and overrides what that ISA has (dispatch.c). Built once (pthread_once) from the CPU features detected
 * once in common/ and MHA_ISA read once; every caller then takes its kernels
 * from mha__kernels_active(). Nothing else tests the CPU or the ISA. */

/* One GEMM on one thread (mha__sgemm's contract, alpha/beta form); false
 * when the backend ran out of memory. */
typedef bool (*mha__gemm_fn)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                             float alpha, const float *A, int64_t lda, const float *B,
                             int64_t ldb, float beta, float *C, int64_t ldc);

typedef struct mha__kernels {
    mha__isa_t isa;
    const char *name; /* "ref", "avx2", "avx512": what mha_runtime_isa() says */
    /* attention forward (mha__attn_args) and its per-call scratch floats */
    void (*attn_fwd)(const mha__attn_args *a, float *scratch);
    size_t (*attn_fwd_scratch)(int64_t T, int64_t HD);
    /* attention backward (mha__attn_bwd_args) and its scratch floats */
    void (*attn_bwd)(const mha__attn_bwd_args *a, float *scratch);
    size_t (*attn_bwd_scratch)(int64_t T, int64_t HD);
    /* mt19937 bulk steps (generator.c): twist st[624]; temper n words;
     * twist then temper all 624 into dst */
    void (*mt_twist)(uint32_t *st);
    void (*mt_temper)(const uint32_t *src, uint32_t *dst, size_t n);
    void (*mt_twist_temper)(uint32_t *st, uint32_t *dst);
    /* dropout: keep bits from raw draws (mha__keep_bits_from_raw's
     * contract); out = in * (bit ? scale : 0) */
    void (*keep_bits_raw)(const uint32_t *raw, size_t n, uint64_t threshold, uint64_t *bits);
    void (*dropout_apply)(float *out, const float *in, const uint64_t *bits, size_t n,
                          float scale);
    /* the projection GEMM on one thread: the reference loops in the
     * reference table, the GEMM backend (gemm.c) in the others */
    mha__gemm_fn gemm;
    /* y = W x (+ bias) on one thread */
    mha__gemv_fn gemv;
    /* chapter 4's elementwise layers (above) */
    mha__layernorm_fn layernorm;
    mha__bias_gelu_fn bias_gelu;
    mha__residual_fn residual_add;
} mha__kernels;

/* The kernels in use (the best the CPU has, capped by MHA_ISA read once at
 * first use, or as mha_runtime_set_isa chose). Never NULL; thread-safe. */
const mha__kernels *mha__kernels_active(void);
/* The table of one ISA, or NULL when this build or this CPU lacks it: for
 * tests and benchmarks that compare kernels without switching the active
 * ones. */
const mha__kernels *mha__kernels_get(mha__isa_t isa);

#endif
