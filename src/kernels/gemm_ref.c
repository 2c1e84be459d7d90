/* gemm_ref.c — the reference GEMM (the reference table's gemm kernel,
 * kernels.h): plain loops in a fixed order, one thread, never failing. The
 * oracle of the packed builtin GEMM (gemm_body.h) and of the backends. */
#include "kernels.h"

/* Element (i, j) of op(X) for a row-major X with leading dimension ld. */
static inline float at(const float *X, int64_t ld, bool trans, int64_t i, int64_t j) {
    return trans ? X[j * ld + i] : X[i * ld + j];
}

/* The reference: element (i, j) of C is alpha times the sum over p = 0, 1,
 * ..., K-1, in that order, of op(A)[i][p] * op(B)[p][j], each product and
 * sum rounded to float, plus beta * C[i][j] unless beta is 0 (then C is not
 * read). Blocked so that the sums of several elements run side by side,
 * each still one element's sum in order: the bits are those of the plain
 * triple loop (tests/test_gemm.c checks them against one). It is also what
 * a backend call that cannot take its arguments falls back to. */
static inline void ref_store(float *c, float acc, float alpha, float beta) {
    *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

/* op(B) = B^T, B's rows contiguous along p: MR x NR sums in registers over
 * MR rows of op(A) and NR rows of B (mr, nr: compile-time in the main case) */
static inline void ref_block_bt(int64_t mr, int64_t nr, bool trans_a, int64_t i0, int64_t j0,
                                int64_t K, float alpha, const float *A, int64_t lda,
                                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    enum { MR = 2, NR = 4 };
    float acc[MR][NR] = {{0.0f}};
    for (int64_t p = 0; p < K; p++)
        for (int64_t r = 0; r < mr; r++) {
            const float a = at(A, lda, trans_a, i0 + r, p);
            for (int64_t c = 0; c < nr; c++) acc[r][c] += a * B[(j0 + c) * ldb + p];
        }
    for (int64_t r = 0; r < mr; r++)
        for (int64_t c = 0; c < nr; c++) ref_store(&C[(i0 + r) * ldc + j0 + c], acc[r][c], alpha, beta);
}

bool mha__gemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                  int64_t ldc) {
    if (trans_b) {
        for (int64_t i = 0; i < M; i += 2)
            for (int64_t j = 0; j < N; j += 4) {
                if (i + 2 <= M && j + 4 <= N)
                    ref_block_bt(2, 4, trans_a, i, j, K, alpha, A, lda, B, ldb, beta, C, ldc);
                else
                    ref_block_bt(M - i < 2 ? M - i : 2, N - j < 4 ? N - j : 4, trans_a, i, j, K,
                                 alpha, A, lda, B, ldb, beta, C, ldc);
            }
        return true;
    }
    /* op(B) = B, its rows along j: NB sums of one row of C, an axpy per p
     * that the compiler vectorises (a lane per element) */
    enum { NB = 256 };
    float acc[NB];
    for (int64_t j0 = 0; j0 < N; j0 += NB) {
        const int64_t nb = N - j0 < NB ? N - j0 : NB;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < nb; j++) acc[j] = 0.0f;
            for (int64_t p = 0; p < K; p++) {
                const float a = at(A, lda, trans_a, i, p);
                const float *b = &B[p * ldb + j0];
                for (int64_t j = 0; j < nb; j++) acc[j] += a * b[j];
            }
            for (int64_t j = 0; j < nb; j++) ref_store(&C[i * ldc + j0 + j], acc[j], alpha, beta);
        }
    }
    return true;
}
