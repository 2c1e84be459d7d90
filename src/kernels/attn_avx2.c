/* attn_avx2.c — the fused attention forward and backward (attn_fwd_body.h,
 * attn_bwd_body.h, where the designs are described) on AVX2/FMA: 8-lane ymm
 * vectors, tile sizes in attn_tunables.h. The avx2 entries attn_fwd,
 * attn_fwd_scratch, attn_bwd and attn_bwd_scratch (kernels.h). */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "attn_avx2.c must be compiled with -mavx2 -mfma"
#endif

#define ATTN_TUNE_AVX2
#define MHA_KSFX avx2

#include "simd_avx2.h"
#include "attn_tunables.h"
#include "attn_fwd_body.h"
#include "attn_bwd_body.h"
