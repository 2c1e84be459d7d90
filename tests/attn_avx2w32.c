/* attn_avx2w32.c — test-only: the fused attention bodies (forward and
 * backward) with the AVX-512 kernels' tunables (32-query panels, 128-key
 * tiles forward and 256-key backward, 12-high register tiles) on the AVX2
 * layer (simd_avx2.h, 4 ymm per panel row). Every op is lane-wise, so this must give the bits of
 * attn_gen16.c (the emulated AVX-512 layer): real hardware intrinsics
 * checking the emulation's float semantics (FMA, max/min, compares, exp).
 * Slow (the tiles spill), correct. */
#include "kernels/simd_avx2.h"

#define ATTN_TUNE_AVX512
#define MHA_KSFX avx2w32

#include "kernels/attn_tunables.h"
#include "kernels/attn_fwd_body.h"
#include "kernels/attn_bwd_body.h"
#include "kernels/gemm_body.h"
#include "isa_variants.h"
#include "philox_words.h"
