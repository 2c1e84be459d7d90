/* mt_avx2.c — AVX2 kernels of the generator's bulk paths (generator.c runs
 * them through the dispatch table; the reference versions, mt_ref.c, give
 * identical bits):
 *   - the mt19937 twist, 8 words at a time, in place;
 *   - the tempering of a run of state words;
 *   - U53 < q keep bits from pairs of raw outputs (integer compare);
 *   - applying keep bits to a float row (dropout's in * noise).
 * Only integer operations and one float multiply (IEEE, identical to the
 * scalar mulss) are used, so nothing here can round differently. */
#include "kernels.h"
#include "mt19937.h"

#include <immintrin.h>

enum { MT_N = MHA_MT_N, MT_M = MHA_MT_M, MT_D = MT_N - MT_M /* 227 */ };

/* mix(u, v) of 8 lanes: ((u & UPPER) | (v & LOWER)) >> 1, xor MATRIX where
 * v is odd. */
static inline __m256i mix8(__m256i u, __m256i v) {
    const __m256i upper = _mm256_set1_epi32((int)0x80000000u);
    const __m256i matrix = _mm256_set1_epi32((int)0x9908b0dfu);
    /* (u & upper) | (v & ~upper) */
    const __m256i y = _mm256_or_si256(_mm256_and_si256(u, upper), _mm256_andnot_si256(upper, v));
    /* all ones where v is odd: bit 0 moved to the sign, spread by srai */
    const __m256i odd = _mm256_srai_epi32(_mm256_slli_epi32(v, 31), 31);
    return _mm256_xor_si256(_mm256_srli_epi32(y, 1), _mm256_and_si256(odd, matrix));
}

static inline __m256i ld8(const uint32_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
static inline void st8(uint32_t *p, __m256i v) { _mm256_storeu_si256((__m256i *)p, v); }

/* The in-place twist, word for word the scalar one:
 *   k in [0, 227):   st[k] = st[k + 397] ^ mix(st[k], st[k + 1])  (all old)
 *   k in [227, 623): st[k] = st[k - 227] ^ mix(st[k], st[k + 1])  (st[k-227] new)
 *   k = 623:         st[623] = st[396] ^ mix(st[623], st[0])       (both new)
 * An 8-lane step at k reads st[k..k+8] and st[k+397..k+404] before writing
 * st[k..k+7]: st[k+8] is still old (written by the next step), and in the
 * first range k + 404 < 624 is never written before. In the second range
 * the lanes read st[k-227..k-220], all written by earlier steps because
 * 227 > 8. The words where a step would straddle a range boundary
 * (224..226, 619..622) and k = 623 are done one at a time. */
void mha__mt_twist_avx2(uint32_t *st) {
    int k = 0;
    for (; k + 8 <= MT_D; k += 8) st8(st + k, _mm256_xor_si256(ld8(st + k + MT_M), mix8(ld8(st + k), ld8(st + k + 1))));
    for (; k < MT_D; k++) st[k] = st[k + MT_M] ^ mha__mt_mix(st[k], st[k + 1]);
    for (; k + 8 <= MT_N - 1; k += 8) st8(st + k, _mm256_xor_si256(ld8(st + k - MT_D), mix8(ld8(st + k), ld8(st + k + 1))));
    for (; k < MT_N - 1; k++) st[k] = st[k - MT_D] ^ mha__mt_mix(st[k], st[k + 1]);
    st[MT_N - 1] = st[MT_M - 1] ^ mha__mt_mix(st[MT_N - 1], st[0]);
}

static inline __m256i temper8(__m256i y) {
    const __m256i b = _mm256_set1_epi32((int)0x9d2c5680u);
    const __m256i c = _mm256_set1_epi32((int)0xefc60000u);
    y = _mm256_xor_si256(y, _mm256_srli_epi32(y, 11));
    y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 7), b));
    y = _mm256_xor_si256(y, _mm256_and_si256(_mm256_slli_epi32(y, 15), c));
    return _mm256_xor_si256(y, _mm256_srli_epi32(y, 18));
}

void mha__mt_temper_avx2(const uint32_t *src, uint32_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = temper8(ld8(src + i)), b = temper8(ld8(src + i + 8));
        st8(dst + i, a);
        st8(dst + i + 8, b);
    }
    for (; i + 8 <= n; i += 8) st8(dst + i, temper8(ld8(src + i)));
    for (; i < n; i++) dst[i] = mha__mt_temper1(src[i]);
}

/* Twist, then temper all 624 words into dst: the common case of a bulk
 * draw, one pass over the state instead of two. Same order of writes to st
 * as mha__mt_twist_avx2; each tempered word is the final new value (a word
 * is written once per twist). */
void mha__mt_twist_temper_avx2(uint32_t *st, uint32_t *dst) {
    int k = 0;
    for (; k + 8 <= MT_D; k += 8) {
        const __m256i x = _mm256_xor_si256(ld8(st + k + MT_M), mix8(ld8(st + k), ld8(st + k + 1)));
        st8(st + k, x);
        st8(dst + k, temper8(x));
    }
    for (; k < MT_D; k++) {
        st[k] = st[k + MT_M] ^ mha__mt_mix(st[k], st[k + 1]);
        dst[k] = mha__mt_temper1(st[k]);
    }
    for (; k + 8 <= MT_N - 1; k += 8) {
        const __m256i x = _mm256_xor_si256(ld8(st + k - MT_D), mix8(ld8(st + k), ld8(st + k + 1)));
        st8(st + k, x);
        st8(dst + k, temper8(x));
    }
    for (; k < MT_N - 1; k++) {
        st[k] = st[k - MT_D] ^ mha__mt_mix(st[k], st[k + 1]);
        dst[k] = mha__mt_temper1(st[k]);
    }
    st[MT_N - 1] = st[MT_M - 1] ^ mha__mt_mix(st[MT_N - 1], st[0]);
    dst[MT_N - 1] = mha__mt_temper1(st[MT_N - 1]);
}

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
