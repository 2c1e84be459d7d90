/* gemm.c — the projection GEMMs: CBLAS when the build has it, else the
 * portable builtin kernel. The reference kernel is the oracle. */
#include "common/common.h"
#include "kernels.h"

#if defined(MHA_HAVE_OPENBLAS)
#include <cblas.h>
#endif

/* Element (i, j) of op(X) for a row-major X with leading dimension ld. */
static inline float at(const float *X, int64_t ld, bool trans, int64_t i, int64_t j) {
    return trans ? X[j * ld + i] : X[i * ld + j];
}

void mha__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B,
                    int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < K; p++)
                acc += at(A, lda, trans_a, i, p) * at(B, ldb, trans_b, p, j);
            float *c = &C[i * ldc + j];
            *c = (beta == 0.0f) ? alpha * acc : alpha * acc + beta * *c;
        }
    }
}

/* Portable blocked kernel for builds without BLAS: op(B) is packed so the
 * inner loop streams contiguous memory and the compiler can vectorise the
 * axpy over j. Same contract as the reference. */
static void sgemm_builtin(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B,
                          int64_t ldb, float beta, float *C, int64_t ldc) {
    enum { NB = 256 };
    float acc[NB];
    for (int64_t j0 = 0; j0 < N; j0 += NB) {
        int64_t nb = N - j0 < NB ? N - j0 : NB;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < nb; j++) acc[j] = 0.0f;
            for (int64_t p = 0; p < K; p++) {
                float a = at(A, lda, trans_a, i, p);
                if (!trans_b) {
                    const float *b = &B[p * ldb + j0];
                    for (int64_t j = 0; j < nb; j++) acc[j] += a * b[j];
                } else {
                    for (int64_t j = 0; j < nb; j++) acc[j] += a * B[(j0 + j) * ldb + p];
                }
            }
            float *c = &C[i * ldc + j0];
            if (beta == 0.0f)
                for (int64_t j = 0; j < nb; j++) c[j] = alpha * acc[j];
            else
                for (int64_t j = 0; j < nb; j++) c[j] = alpha * acc[j] + beta * c[j];
        }
    }
}

void mha__blas_set_threads(int n) {
#if defined(MHA_HAVE_OPENBLAS)
    openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

void mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M <= 0 || N <= 0) return;
    if (mha__forced_ref()) {
        mha__sgemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#if defined(MHA_HAVE_OPENBLAS)
    if (M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
        ldb <= INT32_MAX && ldc <= INT32_MAX && K > 0) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N, (int)K, alpha, A,
                    (int)lda, B, (int)ldb, beta, C, (int)ldc);
        return;
    }
#endif
    sgemm_builtin(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
