/* drivers.h — the threaded drivers on the active table's kernels (kernels.h):
 * the GEMM tiler and its epilogues (gemm_tiles.c), the row drivers and the
 * column sums (rows.c). Each cuts its work into blocks whose sizes depend on
 * the shape only, never on the thread count, and computes each block with
 * one kernel call, blocks dealt to OpenMP threads: every output element gets
 * the same bits whatever the thread count. Call them outside OpenMP
 * parallel regions (inside one they run on the calling thread alone, with
 * the same blocks). */
#ifndef MHA_DRIVERS_H
#define MHA_DRIVERS_H

#include "kernels.h"

/* ---- GEMM (gemm_tiles.c) --------------------------------------------------
 * Row-major C (M, N) = alpha * op(A) op(B) + beta * C, the gemm kernel's
 * contract. C is cut into tiles whose sizes depend on (M, N, K) only, each
 * computed by one call of the active table's gemm (the backend, or the
 * reference loops); M == 1 with op(B) = B^T runs the gemv kernel on fixed
 * blocks of rows instead. MHA_OK, or MHA_ERR_NOMEM when the backend could
 * not get its buffers (oneDNN says so; OpenBLAS, which would retry forever,
 * is probed first: gemm_openblas.c); C is then unspecified. Never anything
 * else. */
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

/* A weight matrix (N, K), row-major with row stride ld, as a model holds
 * it: F32 (MHA_DTYPE_F32), or bfloat16 / F16 (MHA_DTYPE_BF16,
 * MHA_DTYPE_F16: uint16_t elements, kernels/half.h) for inference. */
typedef struct {
    const void *p;
    int64_t ld;
    mha_dtype dtype;
} mha__wmat;

/* nn.Linear on any weight format: C (M, N) = A (M, K) W^T + bias (NULL:
 * none), then epi (NULL: none; with one, the bias is epi's and `bias`
 * must be NULL). F32: exactly mha__sgemm_bias (no epi) or
 * mha__sgemm_epilogue. 16-bit: the same tiles, each tile's rows of W
 * widened to F32 (exactly) before the tile's F32 product; M == 1 runs the
 * gemv_bf16 / gemv_f16 kernels on the GEMV's row blocks. The bits do not
 * depend on the thread count. MHA_OK or MHA_ERR_NOMEM, as mha__sgemm. */
MHA_NODISCARD mha_status mha__linear_w(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                       const mha__wmat *W, const float *bias, float *C, int64_t ldc,
                                       const mha__gemm_epilogue *epi);

/* ---- Rows (rows.c) --------------------------------------------------------
 * Contiguous rows (row stride E, or n for the flat ones), in fixed blocks. */

/* y (rows, E) = LayerNorm(x): mha_layernorm_forward and the GPT forward. */
void mha__layernorm_rows(float *y, const float *x, const float *scale, const float *shift,
                         int64_t rows, int64_t E);
/* y[i] = gelu(x[i]), i < n: mha_gelu_forward. */
void mha__gelu_n(float *y, const float *x, size_t n);
/* out[i] = in[i] * (bit i ? scale : 0), i < n (the dropout_apply kernel on
 * blocks of whole bit words): the GPT's dropout and its backward. */
void mha__dropout_apply_n(float *out, const float *in, const uint64_t *bits, size_t n, float scale);

/* LayerNorm's backward over rows of E: dx += the pull-back of dy (the
 * layernorm_backward kernel), g_scale += colsum(dy * xhat), g_shift +=
 * colsum(dy); scratch (rows, E) holds dy * xhat. */
void mha__layernorm_backward_rows(float *dx, const float *dy, const float *x, const float *scale,
                                  float *g_scale, float *g_shift, float *scratch, int64_t rows,
                                  int64_t E);
/* d[i] *= gelu'(f[i]), i < n (the gelu_backward kernel). */
void mha__gelu_backward_n(float *d, const float *f, int64_t n);

/* acc[c] += the sum over rows r, in order, of a[r * lda + c], c < n, summed
 * in double and rounded once (the colsum kernel on blocks of columns): a
 * bias's gradient. */
void mha__colsum_acc(float *acc, const float *a, int64_t rows, int64_t n, int64_t lda);
/* s[c] += the same sums, kept in double, so that a sum taken over several
 * slices of rows rounds once, at the end: mha__colsum_flush(acc, s, n) adds
 * s into acc (acc[c] += (float)s[c]) and zeroes s for the next sum. */
void mha__colsum_f64(double *s, const float *a, int64_t rows, int64_t n, int64_t lda);
void mha__colsum_flush(float *acc, double *s, int64_t n);

#endif
