/* gemv_avx2.c — gemv_body.h on AVX2/FMA (8 lanes). Exports mha__gemv_avx2. */
#define GEMV mha__gemv_avx2
#include "simd_avx2.h"
#include "kernels.h"
#include "gemv_body.h"
