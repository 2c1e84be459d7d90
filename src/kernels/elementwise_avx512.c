/* elementwise_avx512.c — elementwise_body.h on AVX-512 (16 lanes): the
 * avx512 entries of layernorm, bias_gelu, residual_add, their backwards,
 * xent_row and colsum. */
#define MHA_KSFX avx512
#include "simd_avx512.h"
#include "elementwise_body.h"
