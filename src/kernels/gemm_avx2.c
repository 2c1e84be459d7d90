/* gemm_avx2.c — the builtin packed GEMM (gemm_body.h) on AVX2/FMA, on the
 * attention's micro-kernel with its AVX2 tiles (attn_tunables.h): the avx2
 * gemm entry (kernels.h), which a build with a BLAS replaces by the
 * backend. */
#define ATTN_TUNE_AVX2
#define MHA_KSFX avx2

#include "simd_avx2.h"
#include "attn_tunables.h"
/* attn_panel.h's attention-only helpers are not called here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "gemm_body.h"
