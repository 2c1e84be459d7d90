/* mt19937.h — the scalar steps of mt19937 that the generator's engine
 * (generator.c) and the bulk kernels (mt_ref.c, mt_body.h, mt_avx2.c) share. */
#ifndef MHA_MT19937_H
#define MHA_MT19937_H

#include <stdint.h>

enum { MHA_MT_N = 624, MHA_MT_M = 397 };

/* The twist's step: the upper bit of u, the lower 31 of v, shifted, and
 * xor the matrix where v is odd. */
static inline uint32_t mha__mt_mix(uint32_t u, uint32_t v) {
    uint32_t y = (u & 0x80000000u) | (v & 0x7fffffffu);
    return (y >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

static inline uint32_t mha__mt_temper1(uint32_t y) {
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

#endif
