/* gemm_builtin.c — no GEMM backend (-DMHA_BLAS=builtin, or auto without
 * oneDNN and OpenBLAS): each fast table keeps its builtin packed GEMM
 * (gemm_body.h), the reference table its loops. What gemm_backend.h asks
 * of a backend, for the name and the error details. Compiled only in builds
 * without a BLAS (CMakeLists.txt). */
#include "common/common.h"
#include "gemm_backend.h"

#include <stdio.h>

const bool mha__sgemm_backend_is_blas = false;

void mha__sgemm_backend_cap_avx2(void) {}

void mha__backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K; /* the packed GEMM's one buffer (gemm_body.h) */
    snprintf(buf, cap, "%zu bytes of its packing buffer", mha__alloc_failed_bytes());
}
size_t mha__backend_reserve(int callers) { (void)callers; return 0; }

bool mha__backend_load(char *name, size_t cap) {
    snprintf(name, cap, "builtin");
    return true;
}

mha__backend_result mha__backend_call(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                      float alpha, const float *A, int64_t lda, const float *B,
                                      int64_t ldb, float beta, float *C, int64_t ldc) {
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return MHA_BACKEND_CANNOT;
}
