/* mt_gen16.c — test-only: mt_body.h (the mt19937 twist and tempering) on
 * the portable 16-lane emulation of the AVX-512 layer (simd_gen16.h), what
 * mha__mt_*_avx512 compute, so that test_generator checks the AVX-512 body
 * against the reference on CPUs without AVX-512. Plain C. */
#include "simd_gen16.h"

#define MHA_KSFX gen16
#include "kernels/mt_body.h"
#include "isa_variants.h"
