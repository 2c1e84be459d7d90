/* mt_body.h — the mt19937 twist and tempering of the generator's bulk
 * paths, written once on a SIMD layer and compiled once per ISA (mt_avx2.c,
 * mt_avx512.c, and the 16-lane emulation tests/mt_gen16.c). The contracts
 * are kernels.h's mt_twist, mt_temper, mt_twist_temper and keep_bits_mt;
 * the oracle is mt_ref.c. Integer operations only, so every layer gives the
 * scalar bits.
 *
 * The including file defines MHA_KSFX and includes a layer (simd_*.h). */
#if !defined(VW) || !defined(MHA_KSFX)
#error "include a SIMD layer and define MHA_KSFX before mt_body.h"
#endif

#include "kernels.h"
#include "mt19937.h"

enum { MT_N = MHA_MT_N, MT_M = MHA_MT_M, MT_D = MT_N - MT_M /* 227 */ };

/* mix(u, v) lane-wise: ((u & UPPER) | (v & LOWER)) >> 1, xor MATRIX where
 * v is odd (bit 0 moved to the sign and spread by an arithmetic shift). */
VINL vi mt_mix_v(vi u, vi v) {
    const vi y = vi_or(vi_and(u, vi_set1(INT32_MIN)), vi_and(v, vi_set1(INT32_MAX)));
    const vi odd = vi_sar(vi_shl(v, 31), 31);
    return vi_xor(vi_shru(y, 1), vi_and(odd, vi_set1((int32_t)0x9908b0dfu)));
}

VINL vi mt_temper_v(vi y) {
    y = vi_xor(y, vi_shru(y, 11));
    y = vi_xor(y, vi_and(vi_shl(y, 7), vi_set1((int32_t)0x9d2c5680u)));
    y = vi_xor(y, vi_and(vi_shl(y, 15), vi_set1((int32_t)0xefc60000u)));
    return vi_xor(y, vi_shru(y, 18));
}

VINL vi mt_ld(const uint32_t *p) { return vi_loadu((const int32_t *)(const void *)p); }
VINL void mt_st(uint32_t *p, vi x) { vi_storeu((int32_t *)(void *)p, x); }

/* The in-place twist, word for word the scalar one, VW words a step:
 *   k in [0, 227):   st[k] = st[k + 397] ^ mix(st[k], st[k + 1])  (all old)
 *   k in [227, 623): st[k] = st[k - 227] ^ mix(st[k], st[k + 1])  (st[k-227] new)
 *   k = 623:         st[623] = st[396] ^ mix(st[623], st[0])       (both new)
 * A step at k reads st[k .. k+VW] and st[k+397 .. k+396+VW] before writing
 * st[k .. k+VW-1]: st[k+VW] is still old (the next step writes it), and in
 * the first range k + 396 + VW < 624 is never written before. In the
 * second range it reads st[k-227 ..], all written by earlier steps because
 * 227 > VW. The words where a step would straddle a range boundary and k =
 * 623 are done one at a time. With DST, each new word is also tempered
 * into dst[k] (a word is written once per twist, so that is its final
 * value). */
VINL void mt_twist_into(uint32_t *st, uint32_t *dst) {
    int k = 0;
    for (; k + VW <= MT_D; k += VW) {
        const vi x = vi_xor(mt_ld(st + k + MT_M), mt_mix_v(mt_ld(st + k), mt_ld(st + k + 1)));
        mt_st(st + k, x);
        if (dst) mt_st(dst + k, mt_temper_v(x));
    }
    for (; k < MT_D; k++) {
        st[k] = st[k + MT_M] ^ mha__mt_mix(st[k], st[k + 1]);
        if (dst) dst[k] = mha__mt_temper1(st[k]);
    }
    for (; k + VW <= MT_N - 1; k += VW) {
        const vi x = vi_xor(mt_ld(st + k - MT_D), mt_mix_v(mt_ld(st + k), mt_ld(st + k + 1)));
        mt_st(st + k, x);
        if (dst) mt_st(dst + k, mt_temper_v(x));
    }
    for (; k < MT_N - 1; k++) {
        st[k] = st[k - MT_D] ^ mha__mt_mix(st[k], st[k + 1]);
        if (dst) dst[k] = mha__mt_temper1(st[k]);
    }
    st[MT_N - 1] = st[MT_M - 1] ^ mha__mt_mix(st[MT_N - 1], st[0]);
    if (dst) dst[MT_N - 1] = mha__mt_temper1(st[MT_N - 1]);
}

void MHA__KNAME(mt_twist)(uint32_t *st) { mt_twist_into(st, NULL); }

void MHA__KNAME(mt_twist_temper)(uint32_t *st, uint32_t *dst) { mt_twist_into(st, dst); }

void MHA__KNAME(mt_temper)(const uint32_t *src, uint32_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        const vi a = mt_temper_v(mt_ld(src + i)), b = mt_temper_v(mt_ld(src + i + VW));
        mt_st(dst + i, a);
        mt_st(dst + i + VW, b);
    }
    for (; i + VW <= n; i += VW) mt_st(dst + i, mt_temper_v(mt_ld(src + i)));
    for (; i < n; i++) dst[i] = mha__mt_temper1(src[i]);
}

/* Dropout's keep bits from untempered words (kernels.h's keep_bits_mt).
 * v < T splits on the high word: with h = temper(w[2i]) & 0x1FFFFF and
 * T = (Th << 32) | Tl (Th <= 2^21), v < T iff h < Th, or h == Th and
 * temper(w[2i + 1]) < Tl. So only the high words are tempered, VW of them
 * gathered from two vectors (vi_evens), and the compare is 32-bit; the low
 * word decides only where h == Th (a 2^-21 chance per element), element by
 * element. The tempering of the low words, half the work, is skipped. */
void MHA__KNAME(keep_bits_mt)(const uint32_t *w, size_t n, uint64_t threshold, uint64_t *bits) {
    const uint32_t th = (uint32_t)(threshold >> 32), tl = (uint32_t)threshold;
    const vi thv = vi_set1((int32_t)th), m21 = vi_set1(0x1fffff);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t b = 0;
        for (int j = 0; j < 64; j += VW) {
            const uint32_t *p = w + 2 * (i + (size_t)j);
            const vi h = vi_and(mt_temper_v(vi_evens(mt_ld(p), mt_ld(p + VW))), m21);
            uint64_t kb = vm_bits(vi_lt(h, thv)); /* both in [0, 2^21]: signed is fine */
            if (vm_any(vi_eq(h, thv)))
                for (int t = 0; t < VW; t++)
                    if ((mha__mt_temper1(p[2 * t]) & 0x1fffffu) == th && mha__mt_temper1(p[2 * t + 1]) < tl)
                        kb |= 1u << t;
            b |= kb << j;
        }
        bits[i / 64] = b;
    }
    if (i < n) mha__keep_bits_mt_ref(w + 2 * i, n - i, threshold, bits + i / 64);
}
