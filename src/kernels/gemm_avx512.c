/* gemm_avx512.c — the builtin packed GEMM (gemm_body.h) on AVX-512, on the
 * attention's micro-kernel with its AVX-512 tiles (attn_tunables.h): the
 * avx512 gemm entry (kernels.h), which a build with a BLAS replaces by the
 * backend. tests/attn_gen16.c compiles it on the 16-lane emulation. */
#define ATTN_TUNE_AVX512
#define MHA_KSFX avx512

#include "simd_avx512.h"
#include "attn_tunables.h"
/* attn_panel.h's attention-only helpers are not called here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "gemm_body.h"
