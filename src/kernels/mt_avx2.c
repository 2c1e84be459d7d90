/* mt_avx2.c — AVX2 kernels of the generator's bulk paths (generator.c runs
 * them through the dispatch table; the reference versions, mt_ref.c, give
 * identical bits):
 *   - the mt19937 twist and tempering: mt_body.h on the AVX2 layer (8
 *     words at a time; mt_avx512.c compiles the same body 16 at a time);
 *   - U53 < q keep bits from pairs of raw outputs (integer compare);
 *   - applying keep bits to a float row (dropout's in * noise).
 * Only integer operations and one float multiply (IEEE, identical to the
 * scalar mulss) are used, so nothing here can round differently. The keep
 * bits and the dropout serve the AVX-512 table too. */
#include "simd_avx2.h"

#define MHA_KSFX avx2
#include "mt_body.h"

static inline __m256i ld8(const uint32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* raw holds 2n outputs, (hi, lo) per element. Per 64-bit lane the
 * little-endian load has hi in the low half and lo in the high half;
 * shuffle_epi32 with _MM_SHUFFLE(2, 3, 0, 1) swaps the halves, the mask
 * keeps hi's low 21 bits, so the lane is the 53-bit integer v of
 * U53 = v * 2^-53. keep = v < T (T in [0, 2^53], see mha__u53_threshold):
 * v - T lies in [-2^53, 2^53) and cannot overflow an int64, so its sign
 * bit, which movemask_pd collects, is exactly v < T. (A subtraction instead
 * of cmpgt_epi64 keeps the shuffle port free on Intel cores.) */
static inline unsigned keep4(const uint32_t *r, __m256i t, __m256i m53) {
    const __m256i x = _mm256_shuffle_epi32(ld8(r), _MM_SHUFFLE(2, 3, 0, 1));
    const __m256i d = _mm256_sub_epi64(_mm256_and_si256(x, m53), t);
    return (unsigned)_mm256_movemask_pd(_mm256_castsi256_pd(d));
}

void mha__keep_bits_raw_avx2(const uint32_t *raw, size_t n, uint64_t threshold,
                             uint64_t *bits) {
    const __m256i t = _mm256_set1_epi64x((long long)threshold);
    const __m256i m53 = _mm256_set1_epi64x((long long)((UINT64_C(1) << 53) - 1u));
    size_t w = 0;
    for (; (w + 1) * 64 <= n; w++) {
        const uint32_t *r = raw + w * 128;
        uint64_t b = 0;
        for (int j = 0; j < 16; j += 4) {
            const unsigned m = keep4(r + 8 * j, t, m53) | keep4(r + 8 * j + 8, t, m53) << 4 |
                               keep4(r + 8 * j + 16, t, m53) << 8 |
                               keep4(r + 8 * j + 24, t, m53) << 12;
            b |= (uint64_t)m << (4 * j);
        }
        bits[w] = b;
    }
    if (n > w * 64) mha__keep_bits_raw_ref(raw + w * 128, n - w * 64, threshold, bits + w);
}

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
