/* attn_avx512.c — the fused attention forward and backward (attn_fwd_body.h,
 * attn_bwd_body.h, where the designs are described) on AVX-512 (F, BW, DQ,
 * VL): 16-lane zmm vectors, tile sizes in attn_tunables.h. The avx512
 * entries attn_fwd, attn_fwd_scratch, attn_bwd and attn_bwd_scratch
 * (kernels.h). tests/attn_gen16.c compiles the same bodies with the same
 * tunables on a portable 16-lane emulation of simd_avx512.h: that is how
 * machines without AVX-512 test these kernels. */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__FMA__)
#error "attn_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma"
#endif

#define ATTN_TUNE_AVX512
#define MHA_KSFX avx512

#include "simd_avx512.h"
#include "attn_tunables.h"
#include "attn_fwd_body.h"
#include "attn_bwd_body.h"
