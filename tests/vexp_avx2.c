/* vexp_avx2.c — test-only: simd_exp.h's vf_exp (and vf_tanh, vd_exp_neg) on simd_avx2.h over an array
 * (declared in isa_variants.h; compiled with the kernel's ISA flags). */
#include "kernels/simd_avx2.h"
#include "kernels/simd_exp.h"
#include "isa_variants.h"

void vexp_array_avx2(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp(vf_loadu(x + i)));
}

void vexpn_array_avx2(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp_nonpos(vf_loadu(x + i)));
}

void vtanh_array_avx2(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_tanh(vf_loadu(x + i)));
}

void vdexp_array_avx2(const double *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i += VDW) vd_storeu(y + i, vd_exp_neg(vd_loadu(x + i)));
}
