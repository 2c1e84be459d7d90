/* generator.h — internal entry points of the PyTorch-compatible generator. */
#ifndef MHA_GENERATOR_H
#define MHA_GENERATOR_H

#include "kernels/kernels.h"
#include "mha.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* U53 as PyTorch's bernoulli_/normal double path: two 32-bit draws, the
 * first is the high word; ((hi & 0x1FFFFF) << 32 | lo) * 2^-53. */
double mha__generator_u53(mha_generator *g);

/* One dropout keep decision, exactly nn.Dropout's CPU bernoulli_(1 - p):
 * U53() < 1 - p. */
static inline bool mha__dropout_keep(mha_generator *g, double p) {
    return mha__dropout_keep_of(mha_generator_random64(g), p);
}

/* The value kept elements are multiplied by: f32(1.0f / f32(1 - p)). */
float mha__dropout_scale(double p);

/* ---- Bulk paths (bit-identical to the scalar calls above) --------------
 * Each runs the active dispatch table's kernels (kernels/kernels.h: mt_*,
 * keep_bits_mt, dropout_apply); all give the same bits and leave the
 * generator in the same state. */

/* out[0..n) = n successive mha_generator_random(g) outputs; afterwards g is
 * exactly where those n calls would leave it (left/next included, so the
 * first draw after seeding twists as usual). */
void mha__generator_random_bulk(mha_generator *g, uint32_t *out, size_t n);

/* For i < n: bit (i & 63) of bits[i >> 6] = what the i-th of n successive
 * mha__dropout_keep(g, p) calls would return (2n outputs consumed, in
 * order). Bits of the last word at positions >= n are zero; bits must hold
 * (n + 63) / 64 words. Any p (NaN: nothing kept, as U53 < NaN is false). */
void mha__generator_keep_bits(mha_generator *g, uint64_t *bits, size_t n, double p);

/* The same draws (2n outputs consumed), but only the bits of whole words
 * up to position keep (<= n) computed, the later words zero: the generator
 * is left where mha__generator_keep_bits(g, bits, n, p) leaves it, and
 * bits [0, min(n, keep rounded up to 64)) are its, while the draws after
 * them are only stepped over (mt19937's twist, without tempering or
 * compares). A causal attention row's keys past its query are masked
 * before dropout, so their bits are never read. */
void mha__generator_keep_bits_prefix(mha_generator *g, uint64_t *bits, size_t n, size_t keep, double p);

/* The integer form of U53 < q: the T in [0, 2^53] with
 * v * 2^-53 < q  <=>  v < T  for every integer v in [0, 2^53). */
uint64_t mha__u53_threshold(double q);

/* The compare step of mha__generator_keep_bits on 2n untempered state
 * words (two per element, as the generator hands them out before
 * tempering): the active table's keep_bits_mt (its contract in
 * kernels/kernels.h). */
void mha__keep_bits_from_words(const uint32_t *w, size_t n, uint64_t threshold, uint64_t *bits);

#endif
