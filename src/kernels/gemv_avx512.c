/* gemv_avx512.c — gemv_body.h on AVX-512 (16 lanes). Exports mha__gemv_avx512. */
#define GEMV mha__gemv_avx512
#include "simd_avx512.h"
#include "kernels.h"
#include "gemv_body.h"
