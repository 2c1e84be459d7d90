/* mt_body.h — the mt19937 twist and tempering of the generator's bulk
 * paths, written once on a SIMD layer and compiled once per ISA (mt_avx2.c,
 * mt_avx512.c, and the 16-lane emulation tests/mt_gen16.c). The contracts
 * are kernels.h's mt_twist, mt_temper, mt_twist_temper and keep_bits_mt;
 * the oracle is mt_ref.c. Integer operations only, so every layer gives the
 * scalar bits.
 *
 * The including file defines MHA_KSFX (and MT_TWIST_LOADS 1 where its
 * layer's vi_alignr is dear: the twist then loads instead) and includes a
 * layer (simd_*.h). */
#if !defined(VW) || !defined(MHA_KSFX)
#error "include a SIMD layer and define MHA_KSFX before mt_body.h"
#endif

#include "kernels.h"
#include "mt19937.h"

enum { MT_N = MHA_MT_N, MT_M = MHA_MT_M };

/* mix(u, v) lane-wise: ((u & UPPER) | (v & LOWER)) >> 1, xor MATRIX where
 * v is odd (bit 0 moved to the sign and spread by an arithmetic shift). */
VINL vi mt_mix_v(vi u, vi v) {
    const vi y = vi_or(vi_and(u, vi_set1(INT32_MIN)), vi_and(v, vi_set1(INT32_MAX)));
    const vi odd = vi_sar(vi_shl(v, 31), 31);
    return vi_xor(vi_shru(y, 1), vi_and(odd, vi_set1((int32_t)0x9908b0dfu)));
}

VINL vi mt_temper_v(vi y) {
    y = vi_xor(y, vi_shru(y, 11));
    y = vi_xor_and(y, vi_shl(y, 7), vi_set1((int32_t)0x9d2c5680u));
    y = vi_xor_and(y, vi_shl(y, 15), vi_set1((int32_t)0xefc60000u));
    return vi_xor(y, vi_shru(y, 18));
}

VINL vi mt_ld(const uint32_t *p) { return vi_loadu((const int32_t *)(const void *)p); }
VINL void mt_st(uint32_t *p, vi x) { vi_storeu((int32_t *)(void *)p, x); }

/* The in-place twist, word for word the scalar one:
 *   k in [0, 227):   st[k] = st[k + 397] ^ mix(st[k], st[k + 1])  (all old)
 *   k in [227, 623): st[k] = st[k - 227] ^ mix(st[k], st[k + 1])  (st[k-227] new)
 *   k = 623:         st[623] = st[396] ^ mix(st[623], st[0])       (both new)
 * as one rule on the state's NV vectors S[0 .. NV) (624 = 39 * 16 = 78 * 8),
 * all of them read and written whole at their own places: vector i is
 *   S[i] = alignr(S[(i+QM+1) % NV], S[(i+QM) % NV], RM)
 *          ^ mix(S[i], alignr(S[(i+1) % NV], S[i], 1))
 * with 397 = QM * VW + RM, read from the array as it stands: an index past
 * i is still old, a wrapped one (below i) already new, which is what the
 * three ranges ask (the vector holding k = 227 takes its first RM' = 227 %
 * VW lanes from the old S[NV-1] and the rest from the new S[0]; k = 623
 * takes the new st[0]). Each vector is loaded once (the next one and the
 * high one carried to the next step), so no load straddles two stores or
 * two cache lines: a twist of a 64-byte aligned state on a 2-core Zen 5
 * took 32 ns against 48-55 as 16-word steps at k (loads at k + 1 and k +
 * 397, stores at 227 + 16j, and 4 words one at a time), and 40 ns as
 * MT_TWIST_LOADS's loads below. With DST each new word is also tempered
 * into dst[k] (a word is written once per twist, so that is its final
 * value). */
enum { MT_NV = MT_N / VW, MT_QM = MT_M / VW, MT_RM = MT_M % VW };
_Static_assert(MT_N % VW == 0, "the state is whole vectors");

/* Vector i of the new state from S[i] (cur), the words k + 1 .. (a) and
 * the words k + 397 .. (b), mod 624; with DST also tempered into dst. */
VINL void mt_twist_put(uint32_t *st, uint32_t *dst, int i, vi cur, vi a, vi b) {
    const vi x = vi_xor(b, mt_mix_v(cur, a));
    mt_st(st + i * VW, x);
    if (dst) mt_st(dst + i * VW, mt_temper_v(x));
}

#if defined(MT_TWIST_LOADS) && MT_TWIST_LOADS
/* Where the layer's lane shift across two vectors is dear (AVX2's
 * vi_alignr: a cross-lane permute and a byte shift), a and b are loaded
 * where they lie, unaligned, and only the two vectors whose words wrap
 * past 623 are shifted: b of the vector holding k = 227 (its first RM'
 * lanes the old st[621 ..], the rest the new st[0 ..]) and a of the last
 * (the new st[0]). The stores stay whole vectors at their places, so each
 * load finds old words where the rule reads old ones and new where it
 * reads new, as above. A twist on a 2-core Zen 5 with AVX2: 81-83 ns with
 * the shifts, 63 ns so. */
VINL void mt_twist_into(uint32_t *st, uint32_t *dst) {
    int i = 0;
#pragma GCC unroll 40
    for (; i + MT_QM + 1 < MT_NV; i++)
        mt_twist_put(st, dst, i, mt_ld(st + i * VW), mt_ld(st + i * VW + 1), mt_ld(st + i * VW + MT_M));
    mt_twist_put(st, dst, i, mt_ld(st + i * VW), mt_ld(st + i * VW + 1),
                 vi_alignr(mt_ld(st), mt_ld(st + (MT_NV - 1) * VW), MT_RM));
#pragma GCC unroll 60
    for (i++; i + 1 < MT_NV; i++)
        mt_twist_put(st, dst, i, mt_ld(st + i * VW), mt_ld(st + i * VW + 1), mt_ld(st + i * VW + MT_M - MT_N));
    const vi cur = mt_ld(st + i * VW);
    mt_twist_put(st, dst, i, cur, vi_alignr(mt_ld(st), cur, 1), mt_ld(st + i * VW + MT_M - MT_N));
}
#else
/* Vector i from cur = S[i], nxt = the next one, lo and hi the pair RM
 * splits (lo carried from the previous step as its hi). */
VINL void mt_twist_step(uint32_t *st, uint32_t *dst, int i, vi *cur, vi nxt, vi *lo, vi hi) {
    mt_twist_put(st, dst, i, *cur, vi_alignr(nxt, *cur, 1), vi_alignr(hi, *lo, MT_RM));
    *cur = nxt;
    *lo = hi;
}

/* The rule's three index ranges as loops of their own, unrolled (whole on
 * AVX-512): 3205 twists on a Zen 5 core took 0.082 ms, against 0.103 as
 * rolled loops and 0.114 as one loop with the wrap's selects. */
VINL void mt_twist_into(uint32_t *st, uint32_t *dst) {
    vi cur = mt_ld(st), lo = mt_ld(st + MT_QM * VW);
    int i = 0;
#pragma GCC unroll 40
    for (; i + MT_QM + 1 < MT_NV; i++)
        mt_twist_step(st, dst, i, &cur, mt_ld(st + (i + 1) * VW), &lo, mt_ld(st + (i + MT_QM + 1) * VW));
#pragma GCC unroll 40
    for (; i + 1 < MT_NV; i++)
        mt_twist_step(st, dst, i, &cur, mt_ld(st + (i + 1) * VW), &lo, mt_ld(st + (i + MT_QM + 1 - MT_NV) * VW));
    mt_twist_step(st, dst, i, &cur, mt_ld(st), &lo, mt_ld(st + MT_QM * VW));
}
#endif

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
 * element. The tempering of the low words, half the work, is skipped.
 * A word's 64 compares first, then one test for a tie among them: 0.074 ->
 * 0.054 ms for 2^19 elements on a Zen 5 core, with the tempering's
 * and-xors one op each (vi_xor_and), against a test per vector. */
void MHA__KNAME(keep_bits_mt)(const uint32_t *w, size_t n, uint64_t threshold, uint64_t *bits) {
    const uint32_t th = (uint32_t)(threshold >> 32), tl = (uint32_t)threshold;
    const vi thv = vi_set1((int32_t)th), m21 = vi_set1(0x1fffff);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const uint32_t *p = w + 2 * i;
        uint64_t b = 0;
        int tie = 0;
#pragma GCC unroll 8
        for (int j = 0; j < 64; j += VW) {
            const vi h = vi_and(mt_temper_v(vi_evens(mt_ld(p + 2 * j), mt_ld(p + 2 * j + VW))), m21);
            b |= (uint64_t)vm_bits(vi_lt(h, thv)) << j; /* both in [0, 2^21]: signed is fine */
            tie |= vm_any(vi_eq(h, thv));
        }
        if (tie)
            for (int t = 0; t < 64; t++)
                if ((mha__mt_temper1(p[2 * t]) & 0x1fffffu) == th && mha__mt_temper1(p[2 * t + 1]) < tl)
                    b |= UINT64_C(1) << t;
        bits[i / 64] = b;
    }
    if (i < n) mha__keep_bits_mt_ref(w + 2 * i, n - i, threshold, bits + i / 64);
}
