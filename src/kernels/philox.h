/* philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11; the Random123 generator) and the counter-based dropout
 * decision built on it. Header-only, portable C99; used by the reference
 * attention kernel and (vectorised, bit-identical: attn_panel.h's
 * philox_rows) by the fused kernels.
 *
 * Dropout decision for element (row, col) of one head's (T, T) weights:
 *   w[0..3] = philox4x32_10(ctr = {col >> 2, row, stream lo, stream hi},
 *                           key = {seed lo, seed hi})
 *   keep    = w[col & 3] < threshold
 * so one Philox call decides 4 consecutive columns of a row. row and col
 * must be < 2^32 (only their low 32 bits enter the counter); stream is any
 * 64-bit value (e.g. b * H + h), seed any 64-bit value. */
#ifndef MHA_PHILOX_H
#define MHA_PHILOX_H

#include <stdbool.h>
#include <stdint.h>

#define MHA_PHILOX_M0 0xD2511F53u
#define MHA_PHILOX_M1 0xCD9E8D57u
#define MHA_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define MHA_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* out = Philox4x32 with 10 rounds of ctr under key (Random123's
 * philox4x32_10). out may not alias ctr. */
static inline void mha__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                      uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += MHA_PHILOX_W0;
            k1 += MHA_PHILOX_W1;
        }
        const uint64_t p0 = (uint64_t)MHA_PHILOX_M0 * c0;
        const uint64_t p1 = (uint64_t)MHA_PHILOX_M1 * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The keep threshold for drop probability p: floor((1 - p) * 2^32), clamped
 * to [0, 0xFFFFFFFF] (p <= 0 gives 0xFFFFFFFF, p >= 1 or NaN gives 0 = drop
 * all). A word w keeps its element iff w < threshold, so the keep
 * probability is threshold / 2^32 (for p == 0 use no dropout at all: the
 * clamped threshold would still drop with probability 2^-32). */
static inline uint32_t mha__philox_keep_threshold(double p) {
    if (!(p < 1.0)) return 0u; /* p >= 1 or NaN */
    if (p <= 0.0) return 0xFFFFFFFFu;
    const double t = (1.0 - p) * 4294967296.0;
    if (t >= 4294967295.0) return 0xFFFFFFFFu;
    return (uint32_t)t; /* truncation = floor for t >= 0 */
}

/* Whether element (row, col) survives dropout; row, col < 2^32. */
static inline bool mha__philox_keep(uint64_t seed, uint64_t stream, uint64_t row,
                                    uint64_t col, uint32_t threshold) {
    const uint32_t ctr[4] = {(uint32_t)(col >> 2), (uint32_t)row, (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    mha__philox4x32_10(ctr, key, w);
    return w[col & 3u] < threshold;
}

#endif
