/* elementwise_avx2.c — elementwise_body.h on AVX2/FMA (8 lanes): the avx2
 * entries of layernorm, bias_gelu, residual_add, their backwards, xent_row
 * and colsum. */
#define MHA_KSFX avx2
#include "simd_avx2.h"
#include "elementwise_body.h"
