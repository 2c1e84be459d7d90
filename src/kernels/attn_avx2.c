/* attn_avx2.c — the fused attention forward and backward (attn_fwd_body.h,
 * attn_bwd_body.h, where the designs are described), and the builtin GEMM
 * backend on their micro-kernel (gemm_body.h), on AVX2/FMA: 8-lane ymm
 * vectors, tile sizes in attn_tunables.h. Exports mha__attn_fwd_avx2,
 * mha__attn_bwd_avx2, their _scratch functions and mha__gemm_packed_avx2
 * (kernels.h). */
#if !defined(__AVX2__) || !defined(__FMA__)
#error "attn_avx2.c must be compiled with -mavx2 -mfma"
#endif

#define ATTN_TUNE_AVX2
#define ATTN_FWD mha__attn_fwd_avx2
#define ATTN_FWD_SCRATCH mha__attn_fwd_avx2_scratch
#define ATTN_BWD mha__attn_bwd_avx2
#define ATTN_BWD_SCRATCH mha__attn_bwd_avx2_scratch
#define GEMM_PACKED mha__gemm_packed_avx2

#include "simd_avx2.h"
#include "attn_tunables.h"
#include "attn_fwd_body.h"
#include "attn_bwd_body.h"
#include "gemm_body.h"
