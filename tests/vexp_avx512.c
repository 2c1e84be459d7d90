/* vexp_avx512.c — test-only: simd_exp.h's vf_exp (and vf_tanh, vd_exp_neg) on simd_avx512.h over an array,
 * and attn_panel.h's Philox words (declared in isa_variants.h; compiled with the kernel's ISA flags). */
#include "kernels/simd_avx512.h"

#define ATTN_TUNE_AVX512
#define MHA_KSFX avx512

#include "kernels/attn_tunables.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function" /* the panel's other helpers: the kernels' */
#include "kernels/attn_panel.h"
#pragma GCC diagnostic pop
#include "kernels/simd_exp.h"
#include "isa_variants.h"
#include "philox_words.h"

void vexp_array_avx512(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp(vf_loadu(x + i)));
}

void vexpn_array_avx512(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp_nonpos(vf_loadu(x + i)));
}

void vtanh_array_avx512(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_tanh(vf_loadu(x + i)));
}

void vdexp_array_avx512(const double *x, double *y, size_t n) {
    for (size_t i = 0; i < n; i += VDW) vd_storeu(y + i, vd_exp_neg(vd_loadu(x + i)));
}
