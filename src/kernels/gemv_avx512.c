/* gemv_avx512.c — gemv_body.h on AVX-512 (16 lanes): mha__gemv_avx512. */
#define MHA_KSFX avx512
#include "simd_avx512.h"
#include "gemv_body.h"
