/* generator.c — PyTorch 1.13.1's CPU generator, bit for bit.
 *
 * The spec is docs/torch-generator.md (section numbers below refer to it):
 *   1. mt19937 seeded from the low 32 bits of the seed, plus the cached
 *      double normal of at::normal_distribution<double>;
 *   2. float uniform_ (one 32-bit draw per element);
 *   3. nn.Linear's kaiming_uniform_ init;
 *   4. normal_: the n >= 16 block path (normal_fill, Box-Muller on 16 floats
 *      at a time, AVX2 or DEFAULT kernel) and the n < 16 scalar double path;
 *   5. dropout = bernoulli_(1 - p) on 53-bit doubles;
 *   6. nn.Embedding's init.
 * Bulk paths (same bits, same generator state as the scalar calls): raw
 * draws n at a time (mha__generator_random_bulk) and dropout keep bits
 * (mha__generator_keep_bits), on the active dispatch table's kernels
 * (kernels/mt_ref.c, kernels/mt_body.h, kernels/mt_avx2.c); mha_generator_dropout runs on
 * them.
 *
 * Exactness rules: the library is compiled with -ffp-contract=off, so every
 * a*b+c below is rounded twice unless written as fmaf(a, b, c), which is how
 * GCC fused torch's AVX2 kernels. Float math stays in float (SSE on x86-64,
 * FLT_EVAL_METHOD == 0); the Cephes constants are given as bit patterns so
 * no decimal literal can round differently.
 *
 * The generator is a plain object: there is no global state in this file. */
#include "generator/generator.h"

#include "common/common.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/mt19937.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The object and mt19937 (section 1)                                        */
/* ------------------------------------------------------------------------ */

enum { MT_N = MHA_MT_N };

/* c10::pi<double>; M_PI is not guaranteed by ISO C. */
static const double PI = 3.14159265358979323846;

struct mha_generator {
    _Alignas(64) uint32_t state[MT_N]; /* the twist reads and writes it in whole vectors */
    int left; /* draws left before the next twist, as at::mt19937 counts */
    int next; /* index of the next state word to temper */
    /* at::normal_distribution<double> produces two normals per pair of
     * uniforms and parks the second (r * sin(theta), not yet scaled by
     * std/mean) here for the next scalar-path element. */
    bool has_dn;
    double dn;
    mha_rng_variant variant;
    uint64_t initial_seed; /* torch.initial_seed(): the seed as given */
};

mha_status mha_generator_create(uint64_t seed, mha_generator **out) {
    if (out == NULL) return mha__fail(MHA_ERR_ARGUMENT, "mha_generator_create: out is NULL");
    *out = NULL;
    mha_generator *g = mha__alloc(sizeof *g);
    if (g == NULL)
        return mha__nomem("mha_generator_create: out of memory");
    g->variant = MHA_RNG_AVX2;
    mha_generator_manual_seed(g, seed);
    *out = g;
    return MHA_OK;
}

void mha_generator_free(mha_generator *g) { mha__free(g); }

void mha_generator_manual_seed(mha_generator *g, uint64_t seed) {
    if (g == NULL) return;
    /* at::mt19937's constructor takes the seed as uint64 but init_genrand
     * uses only its low 32 bits: seeds 5 and 2^32 + 5 are the same stream. */
    g->initial_seed = seed;
    g->state[0] = (uint32_t)(seed & 0xffffffffu);
    for (uint32_t j = 1; j < MT_N; j++) {
        uint32_t prev = g->state[j - 1];
        g->state[j] = 1812433253u * (prev ^ (prev >> 30)) + j;
    }
    /* left == 1: the first draw after seeding twists the whole state. */
    g->left = 1;
    g->next = 0;
    /* CPUGeneratorImpl::set_current_seed also forgets the cached normal. */
    g->has_dn = false;
    g->dn = 0.0;
}

void mha_generator_set_variant(mha_generator *g, mha_rng_variant v) {
    if (g == NULL) return;
    g->variant = (v == MHA_RNG_DEFAULT) ? MHA_RNG_DEFAULT : MHA_RNG_AVX2;
}

/* The engine itself, for internal callers that already checked g. */
static inline uint32_t mt_next(mha_generator *g) {
    if (--g->left == 0) {
        mha__mt_twist_ref(g->state);
        g->left = MT_N;
        g->next = 0;
    }
    return mha__mt_temper1(g->state[g->next++]);
}

uint32_t mha_generator_random(mha_generator *g) { return g ? mt_next(g) : 0u; }

uint64_t mha_generator_random64(mha_generator *g) {
    if (g == NULL) return 0u;
    /* Two separate statements: the first draw is the high word
     * (detail::make64BitsFrom32Bits(hi, lo)). */
    uint64_t hi = mt_next(g);
    uint64_t lo = mt_next(g);
    return (hi << 32) | lo;
}

/* ------------------------------------------------------------------------ */
/* Bulk draws                                                                */
/* ------------------------------------------------------------------------ */

/* n outputs, with mt_next's bookkeeping n at a time. Between twists the
 * words still to be handed out are state[next .. next + left - 2] (left -
 * 1 of them; none right after seeding, when left == 1). A twist followed
 * by m <= 624 draws leaves next = m and left = 624 - (m - 1), exactly as m
 * calls of mt_next do (the first sets left = 624 and takes word 0, each
 * later one takes a word and decrements left); m == 624 gives left == 1,
 * so the next draw of either kind twists. Dropout's keep bits
 * (mha__generator_keep_bits) keep the same books over untempered words. */
void mha__generator_random_bulk(mha_generator *g, uint32_t *out, size_t n) {
    if (g == NULL || n == 0) return;
    const mha__kernels *k = mha__kernels_active();
    size_t take = (size_t)(g->left - 1);
    if (take > n) take = n;
    k->mt_temper(g->state + g->next, out, take);
    g->next += (int)take;
    g->left -= (int)take;
    out += take;
    n -= take;
    while (n > 0) {
        const size_t m = n < MT_N ? n : MT_N;
        if (m == MT_N) {
            k->mt_twist_temper(g->state, out);
        } else {
            k->mt_twist(g->state);
            k->mt_temper(g->state, out, m);
        }
        g->next = (int)m;
        g->left = MT_N + 1 - (int)m;
        out += m;
        n -= m;
    }
}


/* random_bulk's bookkeeping without the tempering: n outputs consumed,
 * none produced. Whole blocks cost one twist each. */
void mha_generator_skip(mha_generator *g, uint64_t n) {
    if (g == NULL || n == 0) return;
    const mha__kernels *k = mha__kernels_active();
    uint64_t take = (uint64_t)(g->left - 1);
    if (take > n) take = n;
    g->next += (int)take;
    g->left -= (int)take;
    n -= take;
    while (n > 0) {
        const uint64_t m = n < MT_N ? n : MT_N;
        k->mt_twist(g->state);
        g->next = (int)m;
        g->left = MT_N + 1 - (int)m;
        n -= m;
    }
}

/* Exactness of the integer keep test (mha__dropout_keep is U53() < q with
 * q = 1 - p in double):
 *  1. U53 = v * 2^-53 with v = ((hi & 0x1FFFFF) << 32) | lo, an integer in
 *     [0, 2^53). v converts to double exactly (53 bits) and the scaling by
 *     2^-53 is exact (v >= 1 gives >= 2^-53, far above the subnormals), so
 *     U53 is the real number v / 2^53.
 *  2. Q = q * 2^53 is exact too: a power-of-two scaling only moves the
 *     exponent (a subnormal q gains no bits it lacks); it can only overflow
 *     for q > 2^970, where Q = +inf still compares right. Multiplying both
 *     sides by 2^53 > 0: v / 2^53 < q  <=>  v < Q, as real numbers.
 *  3. For an integer v and a real Q: v < Q <=> v < ceil(Q). If v < Q then
 *     v < Q <= ceil(Q). If v < ceil(Q) then v <= ceil(Q) - 1 < Q (ceil(Q) -
 *     1 < Q by the definition of ceil). This covers both an integer Q (then
 *     ceil(Q) = Q: v < Q exactly, v = Q is not kept) and a non-integer one
 *     (v <= floor(Q) kept). ceil of a double is exact.
 *  4. Clamping: v only ranges over [0, 2^53), so T = 0 for Q <= 0 (nothing
 *     kept; also NaN, where U53 < NaN is false) and T = 2^53 for Q >= 2^53
 *     (everything kept); in between ceil(Q) <= 2^53 converts exactly.
 * tests/test_generator.c checks this exhaustively around T for many q. */
uint64_t mha__u53_threshold(double q) {
    const double Q = q * 0x1p53;
    if (!(Q > 0.0)) return 0u;
    if (Q >= 0x1p53) return UINT64_C(1) << 53;
    return (uint64_t)ceil(Q);
}

void mha__keep_bits_from_words(const uint32_t *w, size_t n, uint64_t threshold, uint64_t *bits) {
    mha__kernels_active()->keep_bits_mt(w, n, threshold, bits);
}

/* Keep bits read the state words where they lie: a run of elements whose
 * 2 words each are all among the words the state still has to hand out
 * goes to the kernel in place, in whole words of bits (a multiple of 64
 * elements, or the call's last elements); only the 64 elements across a
 * twist (their words partly before it, partly after) are copied, into a
 * 128-word buffer, first the old block's remaining words, then, after the
 * twist, the new block's first ones. The same words in the same order as
 * mha__generator_random_bulk hands out (untempered), without copying the
 * others. A causal 1024 x 1024 head's mask as the attention layer draws
 * it (2-core Zen 5, min of 20, builds alternated 10 times): 0.254-0.265
 * ms -> 0.248-0.266 while the host ran fast, 0.364-0.373 -> 0.326-0.335
 * while it ran slow (the twists alone 0.155-0.186 in both), against
 * copying every word through a 19.5 KiB buffer first. */
void mha__generator_keep_bits(mha_generator *g, uint64_t *bits, size_t n, double p) {
    if (g == NULL || n == 0) return;
    const mha__kernels *k = mha__kernels_active();
    const uint64_t threshold = mha__u53_threshold(1.0 - p);
    for (size_t e = 0; e < n;) {
        const size_t avail = (size_t)(g->left - 1), rest = n - e; /* words, elements */
        size_t c = rest <= avail / 2 ? rest : avail / 2 / 64 * 64;
        if (c > 0) {
            k->keep_bits_mt(g->state + g->next, c, threshold, bits + e / 64);
            g->next += (int)(2 * c);
            g->left -= (int)(2 * c);
            e += c;
            continue;
        }
        /* Across the twist: m elements, 2m words, the first `old` of them
         * (fewer than 2m) what the state still has. */
        uint32_t w[128];
        const size_t m = rest < 64 ? rest : 64, old = avail;
        memcpy(w, g->state + g->next, old * sizeof *w);
        k->mt_twist(g->state);
        memcpy(w + old, g->state, (2 * m - old) * sizeof *w);
        g->next = (int)(2 * m - old);
        g->left = MT_N + 1 - g->next;
        k->keep_bits_mt(w, m, threshold, bits + e / 64);
        e += m;
    }
}

void mha__generator_keep_bits_prefix(mha_generator *g, uint64_t *bits, size_t n, size_t keep, double p) {
    if (g == NULL || n == 0) return;
    keep = (keep + 63) / 64 * 64; /* whole words: the fast kernels' (a word's tail is scalar) */
    if (keep > n) keep = n;
    mha__generator_keep_bits(g, bits, keep, p);
    const size_t w0 = (keep + 63) / 64, w1 = (n + 63) / 64;
    if (w1 > w0) memset(bits + w0, 0, (w1 - w0) * sizeof *bits);
    mha_generator_skip(g, 2 * (uint64_t)(n - keep));
}

/* uniform_real_distribution<double>(0, 1) on random64(): the low 53 bits,
 * scaled exactly into [0, 1 - 2^-53]. */
/* torch.empty((), dtype=torch.int64).random_(): uniform_int_distribution
 * <int64_t> takes random64() modulo 2^63 (the int64 range's non-negative
 * half). What a DataLoader iterator draws for its _base_seed, and a
 * shuffling RandomSampler for the seed of its permutation. */
int64_t mha_generator_int64(mha_generator *g) {
    return g ? (int64_t)(mha_generator_random64(g) & 0x7fffffffffffffffULL) : 0;
}

/* torch.randperm(n, generator=g) on the CPU, for n below 2^32 / 20 (the
 * range torch keeps the old algorithm for): r[i] = i, then for i in
 * [0, n - 1) swap r[i] with r[i + random() % (n - i)]. */
mha_status mha_generator_randperm(mha_generator *g, int64_t *out, int64_t n) {
    if (g == NULL || (out == NULL && n > 0) || n < 0 || n >= (int64_t)(UINT32_MAX / 20u))
        return mha__fail(MHA_ERR_ARGUMENT, "randperm: need a generator, an output and 0 <= n < %" PRId64
                         " (got n = %" PRId64 ")", (int64_t)(UINT32_MAX / 20u), n);
    for (int64_t i = 0; i < n; i++) out[i] = i;
    for (int64_t i = 0; i + 1 < n; i++) {
        const int64_t z = (int64_t)(mt_next(g) % (uint64_t)(n - i));
        const int64_t t = out[i];
        out[i] = out[z + i];
        out[z + i] = t;
    }
    return MHA_OK;
}

/* torch 1.13's CPUGeneratorImplState, little-endian: the legacy
 * THGeneratorState {u64 the_initial_seed; i32 left; i32 seeded; u64 next;
 * u64 state[624]; f64 normal_x, normal_y, normal_rho; i32 normal_is_valid}
 * (5048 bytes with its padding), then f32 next_float_normal_sample and
 * bool is_next_float_normal_sample_valid, padded to 5056. The cached double
 * normal travels in normal_y. */
enum { ST_LEFT = 8, ST_SEEDED = 12, ST_NEXT = 16, ST_STATE = 24, ST_NORMAL_Y = ST_STATE + 8 * MT_N + 8,
       ST_NORMAL_VALID = ST_STATE + 8 * MT_N + 24, ST_FLOAT_VALID = 5052 };

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

mha_status mha_generator_get_state(const mha_generator *g, uint8_t *out, size_t n) {
    if (g == NULL || out == NULL || n != MHA_GENERATOR_STATE_BYTES)
        return mha__fail(MHA_ERR_ARGUMENT, "mha_generator_get_state: need a generator and %d bytes (got %zu)",
                         MHA_GENERATOR_STATE_BYTES, n);
    memset(out, 0, n);
    put_le(out, g->initial_seed, 8);
    put_le(out + ST_LEFT, (uint32_t)g->left, 4);
    put_le(out + ST_SEEDED, 1, 4);
    put_le(out + ST_NEXT, (uint64_t)g->next, 8);
    for (int i = 0; i < MT_N; i++) put_le(out + ST_STATE + 8 * i, g->state[i], 8);
    if (g->has_dn) {
        uint64_t bits;
        memcpy(&bits, &g->dn, 8);
        put_le(out + ST_NORMAL_Y, bits, 8);
        put_le(out + ST_NORMAL_VALID, 1, 4);
    }
    return MHA_OK;
}

mha_status mha_generator_set_state(mha_generator *g, const uint8_t *in, size_t n) {
    if (g == NULL || in == NULL || n != MHA_GENERATOR_STATE_BYTES)
        return mha__fail(MHA_ERR_ARGUMENT, "mha_generator_set_state: need a generator and %d bytes (got %zu)",
                         MHA_GENERATOR_STATE_BYTES, n);
    const int64_t left = (int32_t)get_le(in + ST_LEFT, 4);
    const uint64_t next = get_le(in + ST_NEXT, 8);
    /* the draws before the next twist read state[next .. next + left - 2] */
    if (left < 1 || left > MT_N || next > MT_N || (left > 1 && next + (uint64_t)left - 1 > MT_N))
        return mha__fail(MHA_ERR_FORMAT, "generator state: left %lld and next %llu are not an mt19937 position",
                         (long long)left, (unsigned long long)next);
    for (int i = 0; i < MT_N; i++)
        if (get_le(in + ST_STATE + 8 * i, 8) >> 32)
            return mha__fail(MHA_ERR_FORMAT, "generator state: word %d does not fit 32 bits", i);
    if (in[ST_FLOAT_VALID])
        return mha__fail(MHA_ERR_UNSUPPORTED, "generator state: a cached float normal (no CPU kernel of "
                                              "torch 1.13 that mha follows leaves one)");
    g->initial_seed = get_le(in, 8);
    g->left = (int)left;
    g->next = (int)next;
    for (int i = 0; i < MT_N; i++) g->state[i] = (uint32_t)get_le(in + ST_STATE + 8 * i, 8);
    g->has_dn = get_le(in + ST_NORMAL_VALID, 4) != 0;
    const uint64_t bits = g->has_dn ? get_le(in + ST_NORMAL_Y, 8) : 0;
    memcpy(&g->dn, &bits, 8);
    return MHA_OK;
}

double mha__generator_u53(mha_generator *g) { return mha__u53_of(mha_generator_random64(g)); }

/* uniform_real_distribution<float>(0, 1) on one 32-bit draw: the low 24 bits,
 * exactly, in [0, 1 - 2^-24]. fma(x, 1, 0) == x, so this is also what the
 * AVX2 normal_fill stores before Box-Muller. */
static inline float u24(mha_generator *g) {
    return (float)(mt_next(g) & 0xffffffu) * 0x1p-24f;
}

/* ------------------------------------------------------------------------ */
/* Uniform (section 2)                                                       */
/* ------------------------------------------------------------------------ */

void mha_generator_uniform(mha_generator *g, float *out, size_t n, double from, double to) {
    if (g == NULL || out == NULL) return;
    /* Both bounds are cast to float first; the width is a float
     * subtraction, not the float of a double subtraction. */
    const float lo = (float)from;
    const float w = (float)to - lo;
    if (g->variant == MHA_RNG_DEFAULT) {
        for (size_t i = 0; i < n; i++) {
            float x = u24(g);
            float xw = x * w; /* rounded on its own: no FMA in this kernel */
            out[i] = xw + lo;
        }
    } else {
        /* GCC contracted x * (to - from) + from in the AVX2 build. */
        for (size_t i = 0; i < n; i++) out[i] = fmaf(u24(g), w, lo);
    }
}

/* ------------------------------------------------------------------------ */
/* Normal, block path (section 4a)                                           */
/* ------------------------------------------------------------------------ */

/* avx_mathfun's Cephes constants (log256_ps / sincos256_ps), as bits. */
static const uint32_t LOG_P_BITS[9] = {
    0x3d9021bbu, 0xbdebd1b8u, 0x3def251au, 0xbdfe5d4fu, 0x3e11e9bfu,
    0xbe2aae50u, 0x3e4cceacu, 0xbe7ffffcu, 0x3eaaaaaau,
};
static const uint32_t LOG_Q1_BITS = 0xb95e8083u; /* -2.12194440e-4 */
static const uint32_t LOG_Q2_BITS = 0x3f318000u; /* 0.693359375 */
static const uint32_t SQRTHF_BITS = 0x3f3504f3u; /* sqrt(0.5) */
static const uint32_t MIN_NORM_BITS = 0x00800000u; /* 2^-126 */
static const uint32_t TWO_PI_BITS = 0x40c90fdbu;
static const uint32_t FOPI_BITS = 0x3fa2f983u; /* 4 / pi */
static const uint32_t MDP1_BITS = 0xbf490000u; /* -DP1: pi/4 split in three parts */
static const uint32_t MDP2_BITS = 0xb97da000u;
static const uint32_t MDP3_BITS = 0xb3222169u;
static const uint32_t COS_C0_BITS = 0x37ccf5ceu;
static const uint32_t COS_C1_BITS = 0xbab6061au;
static const uint32_t COS_C2_BITS = 0x3d2aaaa5u;
static const uint32_t SIN_S0_BITS = 0xb94ca1f9u;
static const uint32_t SIN_S1_BITS = 0x3c08839eu;
static const uint32_t SIN_S2_BITS = 0xbe2aaaa3u;

/* One lane of avx_mathfun's log256_ps as GCC compiled it into torch's AVX2
 * kernel (the fusions follow the disassembly of libtorch_cpu.so). */
static float cephes_logf(float x) {
    if (!(x > 0.0f)) return NAN; /* the kernel ORs in an all-ones mask */
    const float min_norm = mha__f32_from_bits(MIN_NORM_BITS);
    if (x < min_norm) x = min_norm; /* cut off denormals */
    const uint32_t b = mha__f32_bits(x);
    float e = (float)((int32_t)(b >> 23) - 127) + 1.0f;
    float m = mha__f32_from_bits((b & 0x807fffffu) | 0x3f000000u); /* in [0.5, 1) */
    if (m < mha__f32_from_bits(SQRTHF_BITS)) {
        e -= 1.0f;
        m = (m - 1.0f) + m; /* 2m - 1, exact */
    } else {
        m = m - 1.0f;
    }
    const float t = e * mha__f32_from_bits(LOG_Q1_BITS);
    float y = mha__f32_from_bits(LOG_P_BITS[0]);
    for (int k = 1; k < 9; k++) y = fmaf(y, m, mha__f32_from_bits(LOG_P_BITS[k]));
    const float z = m * m;
    y = m * y;
    y = fmaf(y, z, t);
    y = fmaf(-z, 0.5f, y);
    m = m + y;
    return fmaf(e, mha__f32_from_bits(LOG_Q2_BITS), m);
}

/* One lane of sincos256_ps for x >= 0 (theta = 2 pi u2 never is negative,
 * so the input sign handling of the original is left out). */
static void cephes_sincosf(float x, float *s_out, float *c_out) {
    int32_t j = (int32_t)(x * mha__f32_from_bits(FOPI_BITS)); /* cvttps: truncation */
    j = (j + 1) & ~1;
    const float y = (float)j;
    /* Extended-precision range reduction x - y * pi/4 in three fused steps. */
    x = fmaf(y, mha__f32_from_bits(MDP1_BITS), x);
    x = fmaf(y, mha__f32_from_bits(MDP2_BITS), x);
    x = fmaf(y, mha__f32_from_bits(MDP3_BITS), x);
    const float z = x * x;

    float c = fmaf(mha__f32_from_bits(COS_C0_BITS), z, mha__f32_from_bits(COS_C1_BITS));
    c = fmaf(c, z, mha__f32_from_bits(COS_C2_BITS));
    c = z * c;
    const float half_z = z * 0.5f;
    c = fmaf(c, z, -half_z);
    c = c + 1.0f;

    float s = fmaf(z, mha__f32_from_bits(SIN_S0_BITS), mha__f32_from_bits(SIN_S1_BITS));
    s = fmaf(s, z, mha__f32_from_bits(SIN_S2_BITS));
    s = z * s;
    s = fmaf(s, x, x);

    /* Octant j: polynomials swap when bit 1 is set; signs from bits 2. */
    float sin_v = (j & 2) == 0 ? s : c;
    float cos_v = (j & 2) == 0 ? c : s;
    if (j & 4) sin_v = -sin_v;
    if (((j - 2) & 4) == 0) cos_v = -cos_v;
    *s_out = sin_v;
    *c_out = cos_v;
}

/* normal_fill_16_AVX2: Box-Muller on d[0..7] (u1 = 1 - d) and d[8..15]. */
static void fill16_avx2(float *d, float mean, float std) {
    const float two_pi = mha__f32_from_bits(TWO_PI_BITS);
    for (int k = 0; k < 8; k++) {
        const float u1 = 1.0f - d[k]; /* exact, in (0, 1] */
        const float u2 = d[k + 8];
        const float radius = sqrtf(-2.0f * cephes_logf(u1));
        const float theta = two_pi * u2;
        float sin_t, cos_t;
        cephes_sincosf(theta, &sin_t, &cos_t);
        const float n1 = radius * cos_t;
        const float n2 = radius * sin_t;
        d[k] = fmaf(n1, std, mean); /* _mm256_fmadd_ps */
        d[k + 8] = fmaf(n2, std, mean);
    }
}

/* The generic normal_fill_16 (ATEN_CPU_CAPABILITY=default): glibc's float
 * logf/cosf/sinf, theta computed in double, every operation rounded. */
static void fill16_default(float *d, float mean, float std) {
    const double two_pi = 2.0 * PI;
    for (int k = 0; k < 8; k++) {
        const float u1 = 1.0f - d[k];
        const float u2 = d[k + 8];
        const float radius = sqrtf(-2.0f * logf(u1));
        const float theta = (float)(two_pi * (double)u2);
        const float c = radius * cosf(theta);
        const float s = radius * sinf(theta);
        const float cs = c * std;
        const float ss = s * std;
        d[k] = cs + mean;
        d[k + 8] = ss + mean;
    }
}

/* normal_fill: all n uniforms first, Box-Muller per block of 16, then, if n
 * is not a multiple of 16, 16 fresh uniforms over the LAST 16 slots and one
 * more block there (overwriting part of the previous block's output). Draws
 * n + (n % 16 ? 16 : 0). Requires n >= 16. */
static void normal_block(mha_generator *g, float *out, size_t n, float mean, float std) {
    void (*fill16)(float *, float, float) =
        g->variant == MHA_RNG_DEFAULT ? fill16_default : fill16_avx2;
    for (size_t i = 0; i < n; i++) out[i] = u24(g);
    for (size_t i = 0; i + 16 <= n; i += 16) fill16(out + i, mean, std);
    if (n % 16 != 0) {
        float *tail = out + (n - 16);
        for (int j = 0; j < 16; j++) tail[j] = u24(g);
        fill16(tail, mean, std);
    }
}

/* ------------------------------------------------------------------------ */
/* Normal, scalar double path (section 4b)                                   */
/* ------------------------------------------------------------------------ */

/* at::normal_distribution<double>: one standard normal, using the cached
 * second value of the previous pair when there is one. */
static double normal_double(mha_generator *g) {
    if (g->has_dn) {
        g->has_dn = false;
        return g->dn;
    }
    const double u1 = mha__generator_u53(g);
    const double u2 = mha__generator_u53(g);
    const double r = sqrt(-2.0 * log(1.0 - u2));
    const double theta = 2.0 * PI * u1;
    g->dn = r * sin(theta);
    g->has_dn = true;
    return r * cos(theta);
}

void mha_generator_normal(mha_generator *g, float *out, size_t n, double mean, double std) {
    if (g == NULL || out == NULL) return;
    if (n >= 16) {
        /* The block path takes mean and std as float. */
        normal_block(g, out, n, (float)mean, (float)std);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        /* ret * stdv + mean in double, then the cast; whether torch's build
         * fuses it does not change the float (checked against torch). */
        const double v = normal_double(g) * std;
        out[i] = (float)(v + mean);
    }
}

/* ------------------------------------------------------------------------ */
/* Dropout (section 5)                                                       */
/* ------------------------------------------------------------------------ */

float mha__dropout_scale(double p) {
    /* noise.div_(1 - p): the divisor becomes a float, the quotient is a
     * float division of 1. */
    const float q = (float)(1.0 - p);
    return 1.0f / q;
}

mha_status mha_generator_dropout(mha_generator *g, float *out, const float *in, size_t n,
                                 double p) {
    if (g == NULL) return mha__fail(MHA_ERR_ARGUMENT, "mha_generator_dropout: generator is NULL");
    if (!(p >= 0.0 && p <= 1.0)) /* also rejects NaN */
        return mha__fail(MHA_ERR_ARGUMENT,
                         "mha_generator_dropout: p (%g) must be in [0, 1]", p);
    if (n == 0) return MHA_OK;
    if (out == NULL || in == NULL)
        return mha__fail(MHA_ERR_ARGUMENT, "mha_generator_dropout: %s is NULL with n = %zu",
                         out == NULL ? "out" : "in", n);
    if (p == 0.0) {
        /* F.dropout returns its input untouched and draws nothing. */
        if (out != in) memmove(out, in, n * sizeof *out);
        return MHA_OK;
    }
    if (p == 1.0) {
        /* input * 0, no draws: keeps -0 for negative inputs and NaN for
         * non-finite ones, as PyTorch does. */
        for (size_t i = 0; i < n; i++) out[i] = in[i] * 0.0f;
        return MHA_OK;
    }
    /* bernoulli_(1 - p): keep_i = U53() < 1 - p, drawn in chunks as keep
     * bits (mha__generator_keep_bits, the same draws in the same order),
     * then out[i] = in[i] * noise_i element by element, so in == out works. */
    enum { KEEP_CHUNK = 4 * MT_N }; /* elements: whole words of bits (a multiple of 64) */
    const float scale = mha__dropout_scale(p);
    const mha__kernels *k = mha__kernels_active();
    uint64_t kb[KEEP_CHUNK / 64];
    for (size_t i = 0; i < n; i += KEEP_CHUNK) {
        const size_t m = n - i < KEEP_CHUNK ? n - i : KEEP_CHUNK;
        mha__generator_keep_bits(g, kb, m, p);
        k->dropout_apply(out + i, in + i, kb, m, scale);
    }
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Module initialisers (sections 3 and 6)                                    */
/* ------------------------------------------------------------------------ */

/* rows * cols as a size_t, or an error status with a detail. */
static mha_status checked_numel(const char *fn, int64_t rows, int64_t cols, size_t *numel) {
    int64_t n;
    if (!mha__mul_i64(rows, cols, &n) || (uint64_t)n > SIZE_MAX / sizeof(float))
        return mha__fail(MHA_ERR_OVERFLOW, "%s: %lld x %lld elements overflow", fn,
                         (long long)rows, (long long)cols);
    *numel = (size_t)n;
    return MHA_OK;
}

mha_status mha_generator_linear_init(mha_generator *g, float *weight, float *bias,
                                     int64_t in_features, int64_t out_features) {
    static const char fn[] = "mha_generator_linear_init";
    if (g == NULL) return mha__fail(MHA_ERR_ARGUMENT, "%s: generator is NULL", fn);
    if (weight == NULL) return mha__fail(MHA_ERR_ARGUMENT, "%s: weight is NULL", fn);
    if (in_features < 1 || out_features < 1)
        return mha__fail(MHA_ERR_ARGUMENT,
                         "%s: in_features (%lld) and out_features (%lld) must be positive", fn,
                         (long long)in_features, (long long)out_features);
    size_t numel = 0;
    mha_status st = checked_numel(fn, out_features, in_features, &numel);
    if (st != MHA_OK) return st;

    /* kaiming_uniform_(a = sqrt(5), mode = fan_in, leaky_relu), in double
     * with Python's evaluation order: a ** 2 is 5.000000000000001. */
    const double fan_in = (double)in_features;
    const double a = sqrt(5.0);
    const double gain = sqrt(2.0 / (1.0 + a * a));
    const double bound = sqrt(3.0) * (gain / sqrt(fan_in));
    mha_generator_uniform(g, weight, numel, -bound, bound);
    if (bias != NULL) {
        const double bias_bound = 1.0 / sqrt(fan_in);
        mha_generator_uniform(g, bias, (size_t)out_features, -bias_bound, bias_bound);
    }
    return MHA_OK;
}

mha_status mha_generator_embedding_init(mha_generator *g, float *weight, int64_t num,
                                        int64_t dim, int64_t padding_idx) {
    static const char fn[] = "mha_generator_embedding_init";
    if (g == NULL) return mha__fail(MHA_ERR_ARGUMENT, "%s: generator is NULL", fn);
    if (num < 0 || dim < 0)
        return mha__fail(MHA_ERR_ARGUMENT, "%s: num (%lld) and dim (%lld) must be >= 0", fn,
                         (long long)num, (long long)dim);
    if (padding_idx >= num)
        return mha__fail(MHA_ERR_ARGUMENT, "%s: padding_idx (%lld) must be < num (%lld)", fn,
                         (long long)padding_idx, (long long)num);
    size_t numel = 0;
    mha_status st = checked_numel(fn, num, dim, &numel);
    if (st != MHA_OK) return st;
    if (numel == 0) return MHA_OK; /* normal_ on an empty tensor draws nothing */
    if (weight == NULL) return mha__fail(MHA_ERR_ARGUMENT, "%s: weight is NULL", fn);

    mha_generator_normal(g, weight, numel, 0.0, 1.0);
    /* _fill_padding_idx_with_zero: after the draws, which still count. */
    if (padding_idx >= 0) {
        float *row = weight + (size_t)padding_idx * (size_t)dim;
        for (int64_t j = 0; j < dim; j++) row[j] = 0.0f;
    }
    return MHA_OK;
}
