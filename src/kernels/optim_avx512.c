/* optim_avx512.c — optim_body.h on AVX-512 (16 lanes): the avx512 entry of
 * adamw. */
#define MHA_KSFX avx512
#include "simd_avx512.h"
#include "optim_body.h"
