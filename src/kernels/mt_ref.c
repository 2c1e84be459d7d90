/* mt_ref.c — the reference kernels of the generator's bulk paths (kernels.h:
 * mt_twist, mt_temper, mt_twist_temper, keep_bits_mt, dropout_apply); the
 * generator (generator.c) runs the active table's through its bulk draws,
 * mt_avx2.c has the AVX2 ones, with identical bits. */
#include "kernels.h"
#include "mt19937.h"

/* Regenerates all 624 words in place. Split into three loops instead of
 * using % so the index arithmetic stays out of the hot path; the result is
 * the textbook twist for k = 0..623. */
void mha__mt_twist_ref(uint32_t *st) {
    enum { N = MHA_MT_N, M = MHA_MT_M };
    int k = 0;
    for (; k < N - M; k++) st[k] = st[k + M] ^ mha__mt_mix(st[k], st[k + 1]);
    for (; k < N - 1; k++) st[k] = st[k + M - N] ^ mha__mt_mix(st[k], st[k + 1]);
    st[N - 1] = st[M - 1] ^ mha__mt_mix(st[N - 1], st[0]);
}

void mha__mt_temper_ref(const uint32_t *restrict src, uint32_t *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mha__mt_temper1(src[i]);
}

void mha__mt_twist_temper_ref(uint32_t *st, uint32_t *dst) {
    mha__mt_twist_ref(st);
    mha__mt_temper_ref(st, dst, MHA_MT_N);
}

void mha__keep_bits_mt_ref(const uint32_t *w, size_t n, uint64_t threshold, uint64_t *bits) {
    for (size_t k = 0; k * 64 < n; k++) {
        const size_t m = n - k * 64 < 64 ? n - k * 64 : 64;
        const uint32_t *r = w + k * 128;
        uint64_t b = 0;
        for (size_t i = 0; i < m; i++) {
            const uint64_t v = ((uint64_t)(mha__mt_temper1(r[2 * i]) & 0x1fffffu) << 32) |
                               mha__mt_temper1(r[2 * i + 1]);
            b |= (uint64_t)(v < threshold) << i;
        }
        bits[k] = b;
    }
}

void mha__dropout_apply_ref(float *out, const float *in, const uint64_t *bits, size_t n, float scale) {
    for (size_t j = 0; j < n; j++) {
        const float noise = ((bits[j >> 6] >> (j & 63)) & 1u) ? scale : 0.0f;
        out[j] = in[j] * noise;
    }
}
