/* elementwise_avx512.c — elementwise_body.h on AVX-512 (16 lanes). Exports
 * mha__layernorm_avx512, mha__bias_gelu_avx512, mha__residual_add_avx512. */
#define LAYERNORM mha__layernorm_avx512
#define BIAS_GELU mha__bias_gelu_avx512
#define RESIDUAL_ADD mha__residual_add_avx512
#include "simd_avx512.h"
#include "kernels.h"
#include "elementwise_body.h"
