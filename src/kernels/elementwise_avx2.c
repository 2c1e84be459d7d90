/* elementwise_avx2.c — elementwise_body.h on AVX2/FMA (8 lanes). Exports
 * mha__layernorm_avx2, mha__bias_gelu_avx2, mha__residual_add_avx2. */
#define LAYERNORM mha__layernorm_avx2
#define BIAS_GELU mha__bias_gelu_avx2
#define RESIDUAL_ADD mha__residual_add_avx2
#include "simd_avx2.h"
#include "kernels.h"
#include "elementwise_body.h"
