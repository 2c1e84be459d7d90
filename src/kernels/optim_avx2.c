/* optim_avx2.c — optim_body.h on AVX2/FMA (8 lanes): the avx2 entry of
 * adamw. */
#define MHA_KSFX avx2
#include "simd_avx2.h"
#include "optim_body.h"
