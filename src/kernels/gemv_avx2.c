/* gemv_avx2.c — gemv_body.h on AVX2/FMA (8 lanes): mha__gemv_avx2. */
#define MHA_KSFX avx2
#include "simd_avx2.h"
#include "gemv_body.h"
