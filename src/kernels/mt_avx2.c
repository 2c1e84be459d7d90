/* mt_avx2.c — AVX2 kernels of the generator's bulk paths (generator.c runs
 * them through the dispatch table; the reference versions, mt_ref.c, give
 * identical bits):
 *   - the mt19937 twist and tempering, and dropout's keep bits from
 *     untempered words: mt_body.h on the AVX2 layer (8 words at a time;
 *     mt_avx512.c compiles the same body 16 at a time);
 *   - applying keep bits to a float row (dropout's in * noise).
 * Only integer operations and one float multiply (IEEE, identical to the
 * scalar mulss) are used, so nothing here can round differently. The
 * dropout serves the AVX-512 table too. */
#include "simd_avx2.h"

#define MHA_KSFX avx2
#define MT_TWIST_LOADS 1 /* vi_alignr is two ops here, one a cross-lane permute */
#include "mt_body.h"

/* out[i] = in[i] * (keep_i ? scale : 0.0f). The noise vector is scale
 * AND-ed with the lane mask (+0.0f where dropped), then one IEEE multiply:
 * the same float as the scalar expression, NaN and -0 included. */
void mha__dropout_apply_avx2(float *out, const float *in, const uint64_t *bits, size_t n,
                             float scale) {
    const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 sc = _mm256_set1_ps(scale);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const int byte = (int)((bits[i >> 6] >> (i & 63)) & 0xffu);
        const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), sel), sel);
        const __m256 noise = _mm256_and_ps(_mm256_castsi256_ps(m), sc);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(in + i), noise));
    }
    for (; i < n; i++) {
        const float noise = ((bits[i >> 6] >> (i & 63)) & 1u) ? scale : 0.0f;
        out[i] = in[i] * noise;
    }
}
