/* mt_avx512.c — the mt19937 twist and tempering and dropout's keep bits of
 * the generator's bulk paths on AVX-512, 16 words at a time: mt_body.h, the
 * AVX2 kernels' source, on the AVX-512 layer. Identical bits to mt_ref.c. */
#include "simd_avx512.h"

#define MHA_KSFX avx512
#include "mt_body.h"
