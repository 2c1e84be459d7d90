/* attn_avx2.c — the fused causal attention forward (attn_fwd_body.h, where
 * the design is described) on AVX2/FMA: 8-lane ymm vectors, tile sizes in
 * attn_tunables.h. Exports mha__attn_fwd_avx2 and
 * mha__attn_fwd_avx2_scratch (kernels.h). */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "attn_avx2.c must be compiled with -mavx2 -mfma"
#endif

#define ATTN_TUNE_AVX2
#define ATTN_FWD mha__attn_fwd_avx2
#define ATTN_FWD_SCRATCH mha__attn_fwd_avx2_scratch

#include "simd_avx2.h"
#include "attn_tunables.h"
#include "attn_fwd_body.h"
