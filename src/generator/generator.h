/* generator.h — internal entry points of the PyTorch-compatible generator. */
#ifndef MHA_GENERATOR_H
#define MHA_GENERATOR_H

#include "mha.h"

#include <stdbool.h>

/* U53 as PyTorch's bernoulli_/normal double path: two 32-bit draws, the
 * first is the high word; ((hi & 0x1FFFFF) << 32 | lo) * 2^-53. */
double mha__generator_u53(mha_generator *g);

/* One dropout keep decision, exactly nn.Dropout's CPU bernoulli_(1 - p):
 * U53() < 1 - p. */
static inline bool mha__dropout_keep(mha_generator *g, double p) {
    return mha__generator_u53(g) < 1.0 - p;
}

/* The value kept elements are multiplied by: f32(1.0f / f32(1 - p)). */
float mha__dropout_scale(double p);

#endif
