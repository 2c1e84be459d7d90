/* test_gemm.c — mha__sgemm and mha__sgemm_bias (CBLAS or builtin, split
 * over threads) against the reference loops: every transpose combination,
 * beta, bias, strided operands, odd sizes. */
#include "kernels/kernels.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

int main(void) {
    srand(1);
    static const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 48, 32}, {100, 70, 300}, {257, 130, 64}, {513, 96, 40}, {1030, 770, 33}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int mode = 0; mode < 3; mode++) { /* beta 0, beta 0.5, bias */
                    const int64_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2];
                    const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
                    const size_t na = (size_t)((ta ? K : M) * lda), nb = (size_t)((tb ? N : K) * ldb), nc = (size_t)(M * ldc);
                    float *A = malloc(na * 4), *Bm = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4), *bias = malloc((size_t)N * 4);
                    for (size_t i = 0; i < na; i++) A[i] = frand();
                    for (size_t i = 0; i < nb; i++) Bm[i] = frand();
                    for (size_t i = 0; i < nc; i++) C[i] = R[i] = mode == 0 ? NAN : frand(); /* beta 0 never reads C */
                    for (int64_t j = 0; j < N; j++) bias[j] = frand();
                    if (mode == 2) {
                        CHECK(mha__sgemm_bias(ta, tb, M, N, K, A, lda, Bm, ldb, bias, C, ldc) == MHA_OK, "sgemm_bias");
                        mha__sgemm_ref(ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, 0.0f, R, ldc);
                        for (int64_t i = 0; i < M; i++)
                            for (int64_t j = 0; j < N; j++) R[i * ldc + j] += bias[j];
                    } else {
                        const float beta = mode == 0 ? 0.0f : 0.5f;
                        CHECK(mha__sgemm(ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, beta, C, ldc) == MHA_OK, "sgemm");
                        mha__sgemm_ref(ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, beta, R, ldc);
                    }
                    float err = 0.0f;
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t j = 0; j < N; j++) err = fmaxf(err, fabsf(C[i * ldc + j] - R[i * ldc + j]));
                    CHECK(err <= 1e-5f * (float)K, "%lldx%lldx%lld ta=%d tb=%d mode=%d: max err %g", (long long)M,
                          (long long)N, (long long)K, ta, tb, mode, (double)err);
                    free(A), free(Bm), free(C), free(R), free(bias);
                }
    printf("test_gemm: GEMM backend %s (thread-count independence: test_threads)\n", mha_runtime_blas());
    return TEST_END("test_gemm");
}
