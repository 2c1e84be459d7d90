/* isa_variants.h — the test-only instantiations of the kernel bodies and of
 * simd_exp.h, compiled per ISA in the files named below. */
#ifndef MHA_TEST_ISA_VARIANTS_H
#define MHA_TEST_ISA_VARIANTS_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

/* MHA_TEST_EMULATIONS (1 unless the build says otherwise, tests/CMakeLists.txt):
 * 0 where the build leaves out *_gen16.c and attn_avx2w32.c (cmake
 * -DMHA_TEST_EMULATIONS=OFF, which scripts/test.sh passes only where the CPU
 * runs the AVX-512 kernels natively). A test that then finds AVX-512 kernels
 * compiled but not runnable fails with AVX512_UNTESTED: nothing would test
 * their body. */
#ifndef MHA_TEST_EMULATIONS
#define MHA_TEST_EMULATIONS 1
#endif
#define AVX512_UNTESTED                                                          \
    "this CPU cannot run the AVX-512 kernels and this build has no emulation of " \
    "them (-DMHA_TEST_EMULATIONS=OFF): their body goes untested"

/* attn_gen16.c: the AVX-512 kernels (attention forward and backward, the
 * packed GEMM) on the 16-lane emulation (simd_gen16.h): their contracts
 * and, if the emulation is right, their bits. attn_avx2w32.c: the same
 * tunables on simd_avx2.h; must match gen16's bits. */
mha__attn_fwd_scratch_kernel mha__attn_fwd_scratch_gen16, mha__attn_fwd_scratch_avx2w32;
mha__attn_fwd_kernel mha__attn_fwd_gen16, mha__attn_fwd_avx2w32;
mha__attn_bwd_scratch_kernel mha__attn_bwd_scratch_gen16, mha__attn_bwd_scratch_avx2w32;
mha__attn_bwd_kernel mha__attn_bwd_gen16, mha__attn_bwd_avx2w32;
mha__gemm_kernel mha__gemm_gen16, mha__gemm_avx2w32;

/* attn_panel.h's philox_rows (philox_words.h) on the 16-lane emulation, on
 * the AVX2 layer (attn_avx2w32.c) and on AVX-512 (vexp_avx512.c): w[i * VW +
 * l] = Philox4x32-10 word i of {j4, row0 + l, stream}, VW = 16, 8, 16. */
void mha__philox_words_gen16(uint32_t j4, uint32_t row0, uint64_t stream, uint64_t seed, uint32_t *w);
void mha__philox_words_avx2w32(uint32_t j4, uint32_t row0, uint64_t stream, uint64_t seed, uint32_t *w);
void mha__philox_words_avx512(uint32_t j4, uint32_t row0, uint64_t stream, uint64_t seed, uint32_t *w);

/* y[0..n) = vf_exp(x[0..n)), n a multiple of 16, on each layer:
 * attn_gen16.c, vexp_avx2.c, vexp_avx512.c. */
void vexp_array_gen16(const float *x, float *y, size_t n);
void vexp_array_avx2(const float *x, float *y, size_t n);
void vexp_array_avx512(const float *x, float *y, size_t n);
/* the same with vf_exp_nonpos (the attention kernels' softmax exp) */
void vexpn_array_gen16(const float *x, float *y, size_t n);
void vexpn_array_avx2(const float *x, float *y, size_t n);
void vexpn_array_avx512(const float *x, float *y, size_t n);

/* y[0..n) = vf_tanh(x[0..n)), n a multiple of 16: elementwise_gen16.c,
 * vexp_avx2.c, vexp_avx512.c. */
void vtanh_array_gen16(const float *x, float *y, size_t n);
void vtanh_array_avx2(const float *x, float *y, size_t n);
void vtanh_array_avx512(const float *x, float *y, size_t n);
/* y[0..n) = vd_exp_neg(x[0..n)), n a multiple of 8: elementwise_gen16.c,
 * vexp_avx2.c, vexp_avx512.c. */
void vdexp_array_gen16(const double *x, double *y, size_t n);
void vdexp_array_avx2(const double *x, double *y, size_t n);
void vdexp_array_avx512(const double *x, double *y, size_t n);
/* elementwise_gen16.c: elementwise_body.h on the emulated AVX-512 layer. */
mha__layernorm_kernel mha__layernorm_gen16;
mha__bias_gelu_kernel mha__bias_gelu_gen16;
mha__residual_add_kernel mha__residual_add_gen16;
mha__layernorm_backward_kernel mha__layernorm_backward_gen16;
mha__gelu_backward_kernel mha__gelu_backward_gen16;
mha__xent_row_kernel mha__xent_row_gen16;
mha__colsum_kernel mha__colsum_gen16;

/* mt_gen16.c: mt_body.h on the emulated AVX-512 layer. */
mha__mt_twist_kernel mha__mt_twist_gen16;
mha__mt_temper_kernel mha__mt_temper_gen16;
mha__mt_twist_temper_kernel mha__mt_twist_temper_gen16;
mha__keep_bits_mt_kernel mha__keep_bits_mt_gen16;

/* gemv_gen16.c: gemv_body.h on the emulated AVX-512 layer. */
mha__gemv_kernel mha__gemv_gen16;
mha__gemv_bf16_kernel mha__gemv_bf16_gen16;
mha__gemv_f16_kernel mha__gemv_f16_gen16;
mha__widen_bf16_kernel mha__widen_bf16_gen16;
mha__widen_f16_kernel mha__widen_f16_gen16;

#endif
