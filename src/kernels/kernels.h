/* kernels.h — the kernel contract and the dispatch table.
 *
 * A kernel is single-threaded: it computes what its arguments name on the
 * calling thread, allocates nothing (the packed GEMMs excepted: their one
 * buffer) and never looks at the thread count. Every kernel has a portable
 * reference version, mha__<kernel>_ref (the oracle, plain C), and may have
 * per-ISA versions mha__<kernel>_avx2, mha__<kernel>_avx512 with the
 * identical contract. MHA__KERNEL_LIST below names them all, once: it
 * declares them, the table's fields, and fills the tables (dispatch.c).
 * The threaded drivers that split work over OpenMP threads (the GEMM tiler,
 * the row drivers, the column sums) are drivers.h's. Where each kernel lives:
 * docs/architecture.md. */
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

/* ---- GEMM (kernel "gemm") ------------------------------------------------
 * One GEMM on one thread: row-major C (M, N) = alpha * op(A) op(B) + beta *
 * C, op(X) = X or X^T. A is (M, K) (or (K, M) when trans_a), B is (K, N)
 * (or (N, K) when trans_b). beta == 0 means C is write-only (never read,
 * NaN-safe). false: out of memory (C then unspecified).
 *   ref:           plain loops in a fixed order (gemm_ref.c); never fails.
 *   avx2, avx512:  the builtin packed GEMM (gemm_body.h, Goto/BLIS's loop
 *                  nest on the attention's micro-kernel; false only when
 *                  its buffer of about 1 MB cannot be allocated). Builds
 *                  with a BLAS put the backend (gemm_backend.h) in their
 *                  place when the tables are built. */

/* ---- Attention core (kernels "attn_fwd", "attn_bwd") --------------------- */

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
 * MultiHeadAttention writes its context over Q this way, saving a buffer.
 *   ref:           one row at a time, that row's scores materialised, sums
 *                  in double (attn_ref.c).
 *   avx2, avx512:  fused flash-style kernel (attn_fwd_body.h): online
 *                  softmax over key tiles, tiles above the diagonal skipped,
 *                  only the diagonal tile masked; GENERATOR mode delegated
 *                  to the reference. */
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

/* One head of the backward of mha__attn_args's attention, for the keys
 * [k_begin, k_end). With P[i][j] = exp((scale * q_i.k_j - m_i) - log l_i)
 * ((m_i, log l_i) the forward's stats) where row i
 * sees key j (causal: j <= i; else every j), 0 elsewhere, and
 * m_ij = keep_ij ? drop_scale : 0 (1 everywhere without dropout: MHA_DROP_NONE):
 *   dV[j]  = sum_i P[i][j] m_ij dO[i]                       (written)
 *   dS[i][j] = P[i][j] (m_ij dO[i].V[j] - delta[i])
 *   dK[j]  = scale * sum_i dS[i][j] q_i                    (written)
 *   dQ[i] += scale * sum_{j in [k_begin, k_end)} dS[i][j] k_j  (accumulated;
 *            dq_set: written, as if dQ[i] held +0.0: the same bits, dQ not read)
 * for every key j in [k_begin, k_end) and every row i in [0, T) (causal:
 * the rows i >= k_begin; dQ rows that see none of the keys are untouched).
 * delta[i] = sum_d dO[i][d] O[i][d] is the caller's (the attention layer
 * computes it once per head). The stats are the forward's (before dropout). The
 * keep decisions are the forward's: BITMASK (the saved bits) or PHILOX
 * (regenerated from seed and stream); no GENERATOR mode.
 * Order: a kernel adds into each dQ row in increasing key order (key tiles
 * at positions fixed by the key range: absolute multiples of the kernel's
 * tile, see attn_bwd_body.h), so dQ does not depend on how the caller splits
 * the keys beyond the split itself, which the caller fixes from the shape.
 *   ref:           plain loops through the weights, sums in double.
 *   avx2, avx512:  fused FlashAttention-2-style kernel (attn_bwd_body.h):
 *                  key tiles outer, S and P recomputed per (key tile, query
 *                  panel), no T x T buffer; the scratch does not grow with T. */
typedef struct {
    const float *q, *k, *v;   /* [in] (T, HD) rows, strides ldq, ldk, ldv */
    int64_t ldq, ldk, ldv;
    const float *dout;        /* [in] (T, HD) dO, stride lddo */
    int64_t lddo;
    const float *stats;       /* [in] (T, 2) the forward's (m, log l) */
    const float *delta;       /* [in] (T) */
    float *dq;                /* [acc] (T, HD), stride lddq; [out] with dq_set */
    int64_t lddq;
    bool dq_set;              /* write dQ's rows instead of adding to them */
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

/* "attn_fwd_scratch", "attn_bwd_scratch": the scratch floats one call of
 * the same table's kernel needs (per thread), for any row or key range. */

/* ---- GEMV (kernel "gemv") ------------------------------------------------
 * y[n] = sum_k W[n][k] x[k] (+ bias[n]) for n < N: the M = 1 GEMM of decoding
 * (x W^T with nn.Linear's (N, K) weight). Each y[n] is computed the same way
 * whatever N and the rows around it (the drivers split rows in fixed
 * blocks). ref: gemv_ref.c; avx2, avx512: gemv_body.h.
 * "gemv_bf16", "gemv_f16": the same with W's (N, K) elements bfloat16 or
 *     IEEE binary16 (kernels/half.h), each widened exactly to F32 as it is
 *     loaded: the same sums in the same order as "gemv" on the widened W.
 * "widen_bf16", "widen_f16": dst[i] = src[i] as F32, i < n (exact). */

/* ---- Elementwise (chapter 4) ---------------------------------------------
 * Row kernels on rows of a strided (rows, n) block. Each output element is
 * computed the same way whatever the rows or columns around it: LayerNorm's
 * (and its backward's) from its row alone, the others' from the element
 * alone. The fast versions share one body (elementwise_body.h); the
 * reference versions are plain C (elementwise_ref.c). NaN and inf propagate
 * as in the reference (the backwards' exceptions said there).
 *
 * "layernorm": y = scale * (x - mean) / sqrt(var + 1e-5) + shift per row of
 *     E, var biased. y may equal x (ldy == ldx).
 * "bias_gelu": y = gelu(x + bias), the book's tanh form, over (rows, n);
 *     bias (n) or NULL. y may equal x (ldy == ldx).
 * "residual_add": x += drop(y + bias) over (rows, n); bias (n) or NULL (then
 *     y as it is); keep NULL: no dropout.
 * "layernorm_backward": over rows of E (contiguous), with xhat = (x - mean)
 *     * rstd, the row's moments as the same table's "layernorm" rounds them,
 *     and dxhat = dy * scale:
 *       dx    += rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))  [acc]
 *       dyxhat = dy * xhat   [out] (its column sums: the scale's gradient)
 *     ref: sums in double; the vector body: in float.
 * "gelu_backward": d[i] *= gelu'(f[i]), the exact derivative of the tanh form.
 *     ref: in double with libm's tanh; the vector body: in float (see there).
 * "xent_row": one row of F.cross_entropy, for V classes with logits z and
 *     target y (y < 0: ignored): returns the row's loss in double,
 *     log(sum_j exp(z_j - mx)) + mx - z_y (0 when ignored), mx the largest
 *     logit (NaN logits skipped in the max, but they make the sum NaN);
 *     dz (or NULL: the loss only) gets the gradient of inv * loss, inv *
 *     (softmax(z) - onehot(y)) (all 0 when ignored). dz may be z (in
 *     place). Every exp and the sum in double, the gradient rounded once.
 *     ref: libm's exp, the sum in order; the vector body: simd_exp.h's
 *     vd_exp_neg (about 1 ULP), the sum in lanes, so the bits differ from
 *     the reference's in the last places of a double.
 * "colsum": s[c] += the sum over rows r = 0, 1, ..., in that order, of
 *     a[r * lda + c] in double, for c < n: a bias's gradient (its rows in
 *     order, so the bits do not depend on how the caller splits columns).
 *     Every version adds the same widened floats in the same order: the
 *     same bits.
 * "dot_rows": out[r] = the sum over i = 0, 1, ..., n - 1, in that order, of
 *     a[r * lda + i] * b[r * ldb + i] in double, rounded once to float, for
 *     r < rows: the attention backward's delta = rowsum(dO * O) of a head's
 *     rows. (A product of two floats is exact in double, so a fused
 *     multiply-add gives the same bits.) */

/* Dropout keep bits over a (rows, n) block: element (i, j) is kept iff bit
 * bit0 + i * ld + j of bits is set (bit b: bits[b >> 6] >> (b & 63)); a
 * kept element is multiplied by scale, a dropped one by 0, as
 * mha_generator_dropout does. */
typedef struct {
    const uint64_t *bits;
    int64_t bit0, ld;
    float scale;
} mha__keep_view;

/* A row's mean and 1/sqrt(biased variance + 1e-5), both summed in double
 * (the reference LayerNorm's and its backward's). */
void mha__layernorm_moments_ref(const float *x, int64_t E, float *mean, float *rstd);

/* ---- The generator's bulk steps (mt_ref.c; mt_body.h, mt_avx2.c) ---------
 * "mt_twist": regenerates the mt19937 state st[624] in place (any
 *     alignment; the vector versions run fastest on a 64-byte aligned st);
 * "mt_temper": dst[i] = temper(src[i]), i < n;
 * "mt_twist_temper": twist, then temper all 624 words into dst;
 * "keep_bits_mt": U53 < q keep bits from 2n untempered words w (the
 *     state words the generator hands out, before tempering): element i
 *     is v_i = ((temper(w[2i]) & 0x1FFFFF) << 32) | temper(w[2i + 1]);
 *     bit i of the words = v_i < threshold; writes (n + 63) / 64 words,
 *     zero above n. threshold <= 2^53 (generator.h's mha__u53_threshold);
 * "dropout_apply": out[j] = in[j] * (bit j ? scale : 0).
 * Integer operations and one IEEE multiply: every version gives the same
 * bits. */

/* nn.Dropout's CPU keep decision, bernoulli_(1 - p) on doubles, from one
 * mha_generator_random64 output r (two draws, the first the high word):
 * U53 = (r's low 53 bits) * 2^-53, exactly; kept iff U53 < 1 - p. */
static inline double mha__u53_of(uint64_t r) {
    return (double)(r & ((UINT64_C(1) << 53) - 1u)) * 0x1p-53;
}
static inline bool mha__dropout_keep_of(uint64_t r, double p) { return mha__u53_of(r) < 1.0 - p; }

/* ---- AdamW's update (kernel "adamw") --------------------------------------
 * torch 1.13's _single_tensor_adamw on n elements, each rounded to float32
 * after every op as its in-place tensor ops round (train/optim.c derives
 * the constants and says why):
 *   p = p * decay;  m = madd(omb1, g, m * beta1);  v = madd(omb2 * g, g, v * beta2)
 *   (amsgrad: vmax = max(vmax, v), v = vmax)
 *   p = p + (neg_step_size * m) / (sqrt(v) / bc2_sqrt + eps)
 * madd(a, x, b) = fmaf(a, x, b) when fused (PyTorch's AVX2 kernels), else
 * b + a * x rounded twice (its DEFAULT ones). Every op is an IEEE
 * single-precision one (sqrt and the division correctly rounded), so every
 * version gives the same bits. g finite (the caller checks). vmax: NULL
 * without amsgrad.
 *   ref:           the scalar loop (optim_ref.c);
 *   avx2, avx512:  the same ops on vectors (optim_body.h). */
typedef struct {
    float decay, beta1, omb1, beta2, omb2, bc2_sqrt, eps, neg_step_size;
    bool amsgrad, fused;
} mha__adamw_args;

/* ---- The list ------------------------------------------------------------
 * X(name, return type, (parameters), avx2, avx512): a kernel of the table.
 * avx2 / avx512 is Y where that ISA has its own version, N where its table
 * inherits the one below (the reference, or AVX2's). The declarations, the
 * table's fields and their filling (dispatch.c) all come from here: adding
 * a kernel is a line here plus its implementations. */
#define MHA__KERNEL_LIST(X)                                                                        \
    X(attn_fwd, void, (const mha__attn_args *a, float *scratch), Y, Y)                             \
    X(attn_fwd_scratch, size_t, (int64_t T, int64_t HD), Y, Y)                                     \
    X(attn_bwd, void, (const mha__attn_bwd_args *a, float *scratch), Y, Y)                         \
    X(attn_bwd_scratch, size_t, (int64_t T, int64_t HD), Y, Y)                                     \
    X(gemm, bool,                                                                                  \
      (bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,   \
       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc),               \
      Y, Y)                                                                                        \
    X(gemv, void,                                                                                  \
      (int64_t N, int64_t K, const float *x, const float *W, int64_t ldw, const float *bias,       \
       float *y),                                                                                  \
      Y, Y)                                                                                        \
    X(gemv_bf16, void,                                                                             \
      (int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw, const float *bias,    \
       float *y),                                                                                  \
      Y, Y)                                                                                        \
    X(gemv_f16, void,                                                                              \
      (int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw, const float *bias,    \
       float *y),                                                                                  \
      Y, Y)                                                                                        \
    X(widen_bf16, void, (float *dst, const uint16_t *src, size_t n), Y, Y)                         \
    X(widen_f16, void, (float *dst, const uint16_t *src, size_t n), Y, Y)                          \
    X(layernorm, void,                                                                             \
      (float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t E,                \
       const float *scale, const float *shift),                                                    \
      Y, Y)                                                                                        \
    X(bias_gelu, void,                                                                             \
      (float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t n,                \
       const float *bias),                                                                         \
      Y, Y)                                                                                        \
    X(residual_add, void,                                                                          \
      (float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows, int64_t n,                \
       const float *bias, const mha__keep_view *keep),                                             \
      Y, Y)                                                                                        \
    X(layernorm_backward, void,                                                                    \
      (float *dx, float *dyxhat, const float *dy, const float *x, int64_t rows, int64_t E,         \
       const float *scale),                                                                        \
      Y, Y)                                                                                        \
    X(gelu_backward, void, (float *d, const float *f, int64_t n), Y, Y)                            \
    X(xent_row, double, (float *dz, const float *z, int64_t V, int32_t y, double inv), Y, Y)        \
    X(colsum, void, (double *s, const float *a, int64_t rows, int64_t n, int64_t lda), Y, Y)       \
    X(dot_rows, void,                                                                              \
      (float *out, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,         \
       int64_t n),                                                                                 \
      N, N)                                                                                        \
    X(mt_twist, void, (uint32_t *st), Y, Y)                                                        \
    X(mt_temper, void, (const uint32_t *src, uint32_t *dst, size_t n), Y, Y)                       \
    X(mt_twist_temper, void, (uint32_t *st, uint32_t *dst), Y, Y)                                  \
    X(keep_bits_mt, void, (const uint32_t *w, size_t n, uint64_t threshold, uint64_t *bits),       \
      Y, Y)                                                                                        \
    X(dropout_apply, void, (float *out, const float *in, const uint64_t *bits, size_t n,           \
                            float scale),                                                          \
      Y, N)                                                                                        \
    X(adamw, void, (const mha__adamw_args *k, float *p, const float *g, float *m, float *v,        \
                    float *vmax, size_t n),                                                        \
      Y, Y)

#define MHA__IF_Y(...) __VA_ARGS__
#define MHA__IF_N(...)

/* mha__<name>_kernel, the function type (declares implementations:
 * `mha__layernorm_kernel mha__layernorm_gen16;`), and mha__<name>_fn, a
 * pointer to one. */
#define MHA__KERNEL_TYPES(name, ret, params, avx2, avx512) \
    typedef ret mha__##name##_kernel params;               \
    typedef mha__##name##_kernel *mha__##name##_fn;
MHA__KERNEL_LIST(MHA__KERNEL_TYPES)
#undef MHA__KERNEL_TYPES

#define MHA__DECLARE_REF(name, ret, params, avx2, avx512) mha__##name##_kernel mha__##name##_ref;
#define MHA__DECLARE_AVX2(name, ret, params, avx2, avx512) \
    MHA__IF_##avx2(mha__##name##_kernel mha__##name##_avx2;)
#define MHA__DECLARE_AVX512(name, ret, params, avx2, avx512) \
    MHA__IF_##avx512(mha__##name##_kernel mha__##name##_avx512;)
MHA__KERNEL_LIST(MHA__DECLARE_REF)
#if defined(MHA_HAVE_AVX2_KERNELS)
MHA__KERNEL_LIST(MHA__DECLARE_AVX2)
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
MHA__KERNEL_LIST(MHA__DECLARE_AVX512)
#endif

/* A kernel body written once (elementwise_body.h, attn_fwd_body.h, ...)
 * names what it defines MHA__KNAME(kernel): mha__<kernel>_<MHA_KSFX>, the
 * including file defining MHA_KSFX (avx2, avx512; gen16 and avx2w32 in the
 * tests). */
#define MHA__KCAT_(name, sfx) mha__##name##_##sfx
#define MHA__KCAT(name, sfx) MHA__KCAT_(name, sfx)
#define MHA__KNAME(name) MHA__KCAT(name, MHA_KSFX)

/* ---- The dispatch table -------------------------------------------------
 * One table per ISA (BLIS's context pattern): the reference table holds the
 * portable kernels; each ISA's table starts as a copy of the one below it
 * and overrides what that ISA has (dispatch.c). Built once (pthread_once)
 * from the CPU features detected once in common/ and MHA_ISA read once;
 * every caller then takes its kernels from mha__kernels_active(). Nothing
 * else tests the CPU or the ISA. */
typedef struct mha__kernels {
    mha__isa_t isa;
    const char *name; /* "ref", "avx2", "avx512": what mha_runtime_isa() says */
#define MHA__KERNEL_FIELD(name, ret, params, avx2, avx512) mha__##name##_fn name;
    MHA__KERNEL_LIST(MHA__KERNEL_FIELD)
#undef MHA__KERNEL_FIELD
    /* The GEMM of products of at most MHA_GEMM_SMALL multiply-adds: the
     * table's own (the ISA's builtin packed GEMM, the reference loops),
     * also where `gemm` is a BLAS backend, whose first call sets itself up
     * (oneDNN 2.6: about 50 ms of code generation) for products this small
     * it would not repay. The drivers choose by the shape alone. */
    mha__gemm_fn gemm_small;
} mha__kernels;

/* 2^24 multiply-adds: 256 x 256 x 256, about 0.2 ms on one core. */
#define MHA_GEMM_SMALL ((double)(1 << 24))

/* The kernels in use (the best the CPU has, capped by MHA_ISA read once at
 * first use, or as mha_runtime_set_isa chose). Never NULL; thread-safe. */
const mha__kernels *mha__kernels_active(void);
/* The table of one ISA, or NULL when this build or this CPU lacks it: for
 * tests and benchmarks that compare kernels without switching the active
 * ones. */
const mha__kernels *mha__kernels_get(mha__isa_t isa);

#endif
