/* gemv_gen16.c — test-only: gemv_body.h on the portable 16-lane emulation
 * of the AVX-512 layer (simd_gen16.h), i.e. what mha__gemv_avx512 and its
 * bf16 / f16 forms compute, bit for bit, so that test_gemv and test_gemv16
 * test the AVX-512 body on CPUs without AVX-512. Plain C: no ISA flags needed. */
#include "simd_gen16.h"

#define MHA_KSFX gen16
#include "kernels/gemv_body.h"
#include "isa_variants.h"
