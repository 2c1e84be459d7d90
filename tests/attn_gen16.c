/* attn_gen16.c — test-only: the fused attention bodies (attn_fwd_body.h,
 * attn_bwd_body.h) with the AVX-512 kernels' tunables (attn_tunables.h) on
 * the portable 16-lane emulation of their SIMD layer (simd_gen16.h). Their
 * results must equal mha__attn_fwd_avx512's and mha__attn_bwd_avx512's bit
 * for bit, so test_attn_kernels and test_attn_bwd run every check on them
 * where the CPU lacks AVX-512. The packing of the bodies is 256-bit AVX2
 * code shared with the real kernels, hence -mavx2 -mfma on this file
 * (tests/CMakeLists.txt); the tests call it only on AVX2/FMA CPUs. */
#include "simd_gen16.h"

#define ATTN_TUNE_AVX512
#define MHA_KSFX gen16

#include "kernels/attn_tunables.h"
#include "kernels/attn_fwd_body.h"
#include "kernels/attn_bwd_body.h"
#include "kernels/gemm_body.h"
#include "isa_variants.h"
#include "philox_words.h"

void vexp_array_gen16(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp(vf_loadu(x + i)));
}

void vexpn_array_gen16(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp_nonpos(vf_loadu(x + i)));
}
