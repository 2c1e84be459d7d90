/* isa_variants.h — the test-only instantiations of the kernel bodies and of
 * simd_exp.h, compiled per ISA in the files named below. */
#ifndef MHA_TEST_ISA_VARIANTS_H
#define MHA_TEST_ISA_VARIANTS_H

#include "kernels/kernels.h"

#include <stddef.h>

/* attn_gen16.c: the AVX-512 kernel on the 16-lane emulation (simd_gen16.h);
 * mha__attn_fwd_avx512's contract and, if the emulation is right, its bits. */
size_t mha__attn_fwd_gen16_scratch(int64_t T, int64_t HD);
void mha__attn_fwd_gen16(const mha__attn_args *a, float *scratch);
/* attn_avx2w32.c: the same tunables on simd_avx2.h; must match gen16's bits. */
size_t mha__attn_fwd_avx2w32_scratch(int64_t T, int64_t HD);
void mha__attn_fwd_avx2w32(const mha__attn_args *a, float *scratch);
/* The backward body (attn_bwd_body.h) in the same two files: gen16 is
 * mha__attn_bwd_avx512 on the emulation; avx2w32 must give gen16's bits. */
size_t mha__attn_bwd_gen16_scratch(int64_t T, int64_t HD);
void mha__attn_bwd_gen16(const mha__attn_bwd_args *a, float *scratch);
size_t mha__attn_bwd_avx2w32_scratch(int64_t T, int64_t HD);
void mha__attn_bwd_avx2w32(const mha__attn_bwd_args *a, float *scratch);
/* The builtin packed GEMM (gemm_body.h) in the same two files: gen16 is
 * mha__gemm_packed_avx512 on the emulation; avx2w32 must give its bits. */
bool mha__gemm_packed_gen16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B,
                            int64_t ldb, float beta, float *C, int64_t ldc);
bool mha__gemm_packed_avx2w32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B,
                              int64_t ldb, float beta, float *C, int64_t ldc);

/* y[0..n) = vf_exp(x[0..n)), n a multiple of 16, on each layer:
 * attn_gen16.c, vexp_avx2.c, vexp_avx512.c. */
void vexp_array_gen16(const float *x, float *y, size_t n);
void vexp_array_avx2(const float *x, float *y, size_t n);
void vexp_array_avx512(const float *x, float *y, size_t n);

/* y[0..n) = vf_tanh(x[0..n)), n a multiple of 16: elementwise_gen16.c,
 * vexp_avx2.c, vexp_avx512.c. */
void vtanh_array_gen16(const float *x, float *y, size_t n);
void vtanh_array_avx2(const float *x, float *y, size_t n);
void vtanh_array_avx512(const float *x, float *y, size_t n);
/* elementwise_gen16.c: elementwise_body.h on the emulated AVX-512 layer. */
MHA__ELEMENTWISE_DECL(gen16)

#endif
