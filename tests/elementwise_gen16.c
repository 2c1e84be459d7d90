/* elementwise_gen16.c — test-only: elementwise_body.h on the portable
 * 16-lane emulation of the AVX-512 layer (simd_gen16.h), i.e. what
 * mha__layernorm_avx512, mha__bias_gelu_avx512, mha__residual_add_avx512,
 * the backwards mha__layernorm_backward_avx512, mha__gelu_backward_avx512
 * the cross-entropy row mha__xent_row_avx512 and the column sums
 * mha__colsum_avx512 compute, bit for bit, so
 * that test_elementwise tests the AVX-512 body on CPUs without AVX-512 (and
 * checks it against the real kernels where the CPU has them). Plain C: no
 * ISA flags needed. */
#include "simd_gen16.h"

#define MHA_KSFX gen16
#include "kernels/elementwise_body.h"
#include "isa_variants.h"

void vtanh_array_gen16(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_tanh(vf_loadu(x + i)));
}

void vdexp_array_gen16(const double *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i += VDW) vd_storeu(y + i, vd_exp_neg(vd_loadu(x + i)));
}
