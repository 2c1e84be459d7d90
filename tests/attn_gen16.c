/* attn_gen16.c — test-only: the fused attention body (attn_fwd_body.h) with
 * the AVX-512 kernel's tunables (attn_tunables.h) on the portable 16-lane
 * emulation of its SIMD layer (simd_gen16.h). Its results must equal
 * mha__attn_fwd_avx512's bit for bit, so test_attn_kernels runs every check
 * on it where the CPU lacks AVX-512. The Q/O packing of the body is 256-bit
 * AVX2 code shared with the real kernel, hence -mavx2 -mfma on this file
 * (tests/CMakeLists.txt); the test calls it only on AVX2/FMA CPUs. */
#include "simd_gen16.h"

#define ATTN_TUNE_AVX512
#define ATTN_FWD mha__attn_fwd_gen16
#define ATTN_FWD_SCRATCH mha__attn_fwd_gen16_scratch

#include "kernels/attn_tunables.h"
#include "kernels/attn_fwd_body.h"
#include "isa_variants.h"

void vexp_array_gen16(const float *x, float *y, size_t n) {
    for (size_t i = 0; i < n; i += VW) vf_storeu(y + i, vf_exp(vf_loadu(x + i)));
}
