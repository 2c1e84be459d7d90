/* test_generator.c — the PyTorch-compatible generator against the seed-123
 * vectors of docs/torch-generator-vectors.txt (hard-coded below, bit for
 * bit, both kernel variants where they differ), plus draw counts, the
 * double-normal cache, seeding rules and argument errors. */
#include "test_util.h"
#include "generator/generator.h"
#include "isa_variants.h"
#include "kernels/mt19937.h"
#include "kernels/kernels.h"
#include "mha.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>



static uint32_t bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* One CHECK for a whole vector: every element's bits must match. */
static void check_bits(const char *what, const float *got, const uint32_t *want, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (bits(got[i]) != want[i]) {
            if (bad++ < 4)
                printf("  %s[%zu]: got 0x%08x (%.9g), want 0x%08x (%.9g)\n", what, i,
                       (unsigned)bits(got[i]), (double)got[i], (unsigned)want[i],
                       (double)from_bits(want[i]));
        }
    }
    CHECK(bad == 0, "%s: %zu of %zu elements differ", what, bad, n);
}

/* Seed 123's raw mt19937 stream (the first 10 words are the vectors file's;
 * longer prefixes come from a fresh generator, already checked above). */
static const uint32_t MT123[10] = {
    2991312382u, 3062119789u, 1228959102u, 1840268610u, 974319580u,
    2967327842u, 2367878886u, 3088727057u, 3090095699u, 2109339754u,
};

static mha_generator *fresh(uint64_t seed, mha_rng_variant v) {
    mha_generator *g = NULL;
    if (mha_generator_create(seed, &g) != MHA_OK) {
        printf("FAIL: mha_generator_create: %s\n", mha_last_error());
        t_fail++;
        return NULL;
    }
    mha_generator_set_variant(g, v);
    return g;
}

/* True when g has consumed exactly `draws` 32-bit words since being seeded
 * with `seed`: its next 3 words equal words draws..draws+2 of a fresh
 * stream. (Consumes from g.) */
static int consumed(mha_generator *g, uint64_t seed, size_t draws) {
    mha_generator *ref = fresh(seed, MHA_RNG_AVX2);
    if (ref == NULL) return 0;
    for (size_t i = 0; i < draws; i++) mha_generator_random(ref);
    int ok = 1;
    for (int i = 0; i < 3; i++) ok &= mha_generator_random(g) == mha_generator_random(ref);
    mha_generator_free(ref);
    return ok;
}

static const char *vname(mha_rng_variant v) { return v == MHA_RNG_AVX2 ? "AVX2" : "DEFAULT"; }

static void test_mt19937(void) {
    mha_generator *g = fresh(123, MHA_RNG_AVX2);
    for (int i = 0; i < 10; i++) {
        uint32_t r = mha_generator_random(g);
        CHECK(r == MT123[i], "mt19937 seed 123 output %d: got %u want %u", i, (unsigned)r,
              (unsigned)MT123[i]);
    }
    mha_generator_manual_seed(g, 123);
    uint64_t a = mha_generator_random64(g), b = mha_generator_random64(g);
    CHECK(a == UINT64_C(0xb24bcdfeb6843d6d), "random64[0] = 0x%016llx", (unsigned long long)a);
    CHECK(b == UINT64_C(0x49406d7e6db04542), "random64[1] = 0x%016llx", (unsigned long long)b);

    /* U53: first draw is the high word, 21 of its bits kept. */
    mha_generator_manual_seed(g, 123);
    double u = mha__generator_u53(g);
    double want = (double)(((UINT64_C(0xb24bcdfe) & 0x1fffff) << 32) | UINT64_C(0xb6843d6d)) *
                  0x1p-53;
    CHECK(u == want, "u53 seed 123: got %.17g want %.17g", u, want);

    /* Only the low 32 bits seed the engine: 2^32 + 123 == 123; -1 is
     * 2^64 - 1, i.e. 0xffffffff, the same as 2^32 - 1. */
    mha_generator *h = fresh(UINT64_C(0x100000000) + 123, MHA_RNG_AVX2);
    CHECK(mha_generator_random(h) == MT123[0], "seed 2^32+123 differs from seed 123");
    mha_generator_manual_seed(g, (uint64_t)-1);
    mha_generator_manual_seed(h, UINT64_C(0xffffffff));
    int same = 1;
    for (int i = 0; i < 700; i++) same &= mha_generator_random(g) == mha_generator_random(h);
    CHECK(same, "seed -1 and seed 0xffffffff streams differ");

    /* manual_seed restarts the stream, across a twist boundary too. */
    mha_generator_manual_seed(g, 123);
    for (int i = 0; i < 1300; i++) mha_generator_random(g);
    mha_generator_manual_seed(g, 123);
    CHECK(mha_generator_random(g) == MT123[0], "re-seeding does not restart the stream");
    mha_generator_free(h);
    mha_generator_free(g);
}

static void test_uniform(void) {
    /* torch.rand(3, 2): identical in both variants (fma(x, 1, 0) == x). */
    static const uint32_t rand32[6] = {0x3e979bfc, 0x3f043d6d, 0x3e80dafc,
                                       0x3f304542, 0x3d977ee0, 0x3f5dd462};
    for (int v = 0; v < 2; v++) {
        mha_generator *g = fresh(123, (mha_rng_variant)v);
        float x[6];
        mha_generator_uniform(g, x, 6, 0.0, 1.0);
        char what[64];
        snprintf(what, sizeof what, "rand(3,2) %s", vname((mha_rng_variant)v));
        check_bits(what, x, rand32, 6);
        CHECK(consumed(g, 123, 6), "rand(3,2) must draw 6 words");
        mha_generator_free(g);
    }
}

static void test_linear(void) {
    /* nn.Linear(3, 2, bias=False).weight: 3 of 6 differ between variants. */
    static const uint32_t avx2[6] = {0xbe711478, 0x3c9caaef, 0xbe92d05d,
                                     0x3e5ef3ba, 0xbefbdecd, 0x3ed8b0b2};
    static const uint32_t deflt[6] = {0xbe711478, 0x3c9caae0, 0xbe92d05d,
                                      0x3e5ef3bc, 0xbefbdecd, 0x3ed8b0b4};
    for (int v = 0; v < 2; v++) {
        mha_generator *g = fresh(123, (mha_rng_variant)v);
        float w[6];
        CHECK(mha_generator_linear_init(g, w, NULL, 3, 2) == MHA_OK, "linear_init(3,2)");
        char what[64];
        snprintf(what, sizeof what, "Linear(3,2,bias=False) %s", vname((mha_rng_variant)v));
        check_bits(what, w, v == 0 ? avx2 : deflt, 6);
        CHECK(consumed(g, 123, 6), "Linear(3,2,bias=False) must draw 6 words");
        mha_generator_free(g);
    }

    /* The kaiming bound for fan_in = 3, cast to float, is 0x3f13cd3a; more
     * generally f32(bound) == f32(1/sqrt(in)), so the weights equal
     * uniform_(-f32(1/sqrt(in)), f32(1/sqrt(in))) and the bias uses the same
     * bound. Checked through the public API for several fan-ins. */
    static const int64_t fan_ins[] = {1, 2, 3, 7, 64, 768, 1000, 3072};
    for (size_t k = 0; k < sizeof fan_ins / sizeof fan_ins[0]; k++) {
        const int64_t in = fan_ins[k], out = 5;
        const double bb = 1.0 / sqrt((double)in);
        const double fb = (double)(float)bb;
        if (in == 3) CHECK(bits((float)bb) == 0x3f13cd3au, "bound(3) bits");
        float w[5 * 3072], b[5], w2[5 * 3072], b2[5];
        const size_t nw = (size_t)(in * out);
        mha_generator *g = fresh(77, MHA_RNG_AVX2), *h = fresh(77, MHA_RNG_AVX2);
        CHECK(mha_generator_linear_init(g, w, b, in, out) == MHA_OK, "linear_init(%lld,5)",
              (long long)in);
        mha_generator_uniform(h, w2, nw, -fb, fb);
        mha_generator_uniform(h, b2, 5, -fb, fb);
        CHECK(memcmp(w, w2, nw * sizeof(float)) == 0 && memcmp(b, b2, sizeof b) == 0,
              "Linear(%lld,5) is not uniform_(+-f32(1/sqrt(in))) weights then bias",
              (long long)in);
        CHECK(consumed(g, 77, nw + 5), "Linear(%lld,5) must draw %zu words", (long long)in,
              nw + 5);
        mha_generator_free(g);
        mha_generator_free(h);
    }
}

static void test_normal_block(void) {
    static const uint32_t avx2[8] = {0x3eacbbc9, 0xbe360b3b, 0xbe9b67f8, 0xbf1687f2,
                                     0x3eb27c61, 0x3f290c1b, 0xbe60e8af, 0xbec2228c};
    static const uint32_t deflt[8] = {0x3eacbbc8, 0xbe360b3b, 0xbe9b67f6, 0xbf1687fc,
                                      0x3eb27c61, 0x3f290c1b, 0xbe60e8ac, 0xbec2228a};
    for (int v = 0; v < 2; v++) {
        mha_generator *g = fresh(123, (mha_rng_variant)v);
        float x[100];
        mha_generator_normal(g, x, 100, 0.0, 1.0);
        char what[64];
        snprintf(what, sizeof what, "randn(100)[:8] %s", vname((mha_rng_variant)v));
        check_bits(what, x, v == 0 ? avx2 : deflt, 8);
        /* 100 = 6 blocks + a tail of 4: 100 + 16 draws. */
        CHECK(consumed(g, 123, 116), "randn(100) must draw 116 words");
        mha_generator_free(g);
    }

    /* Draw counts of the block path: n + (n % 16 ? 16 : 0). */
    static const size_t sizes[] = {16, 17, 31, 32, 33, 1000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k], want = n + (n % 16 ? 16 : 0);
        float x[1000];
        mha_generator *g = fresh(5, MHA_RNG_AVX2);
        mha_generator_normal(g, x, n, 0.0, 1.0);
        CHECK(consumed(g, 5, want), "randn(%zu) must draw %zu words", n, want);
        mha_generator_free(g);
    }

    /* A block-path call scales in float: normal_(m, s) == m + s * randn
     * through one fma, so with s = 1, m = 0 it equals randn exactly, and
     * the first block's values do not depend on the tail. */
    float a[17], b[16];
    mha_generator *g = fresh(123, MHA_RNG_AVX2);
    mha_generator_normal(g, a, 17, 0.0, 1.0);
    mha_generator_manual_seed(g, 123);
    mha_generator_normal(g, b, 16, 0.0, 1.0);
    /* randn(17): element 0 comes from the first block, untouched by the
     * tail (which rewrites elements 1..16). */
    CHECK(bits(a[0]) == bits(b[0]), "randn(17)[0] must equal randn(16)[0]");
    mha_generator_free(g);

    /* Book: torch.manual_seed(123); nn.Embedding(6, 3).weight (4 decimals);
     * 18 elements: block path with a 2-element tail, 18 + 16 draws. */
    static const float book[18] = {0.3374f,  -0.1778f, -0.1690f, 0.9178f,  1.5810f,  1.3010f,
                                   1.2753f,  -0.2010f, -0.1606f, -0.4015f, 0.9666f,  -1.1481f,
                                   -1.1589f, 0.3255f,  -0.6315f, -2.8400f, -0.7849f, -1.4096f};
    for (int v = 0; v < 2; v++) {
        float w[18];
        g = fresh(123, (mha_rng_variant)v);
        CHECK(mha_generator_embedding_init(g, w, 6, 3, -1) == MHA_OK, "embedding_init(6,3)");
        int ok = 1;
        for (int i = 0; i < 18; i++) ok &= fabsf(w[i] - book[i]) <= 0.5e-4f;
        CHECK(ok, "Embedding(6,3) %s does not print as the book's values",
              vname((mha_rng_variant)v));
        CHECK(consumed(g, 123, 34), "Embedding(6,3) must draw 18 + 16 words");
        mha_generator_free(g);
    }
    /* padding_idx: the row is zeroed after drawing, draws unchanged. */
    float w0[400], w1[400];
    g = fresh(9, MHA_RNG_AVX2);
    CHECK(mha_generator_embedding_init(g, w0, 50, 8, -1) == MHA_OK, "embedding_init(50,8)");
    CHECK(consumed(g, 9, 400), "Embedding(50,8) must draw 400 words");
    mha_generator_manual_seed(g, 9);
    CHECK(mha_generator_embedding_init(g, w1, 50, 8, 7) == MHA_OK, "embedding_init pad 7");
    CHECK(consumed(g, 9, 400), "Embedding(50,8,padding_idx=7) must draw 400 words");
    int ok = 1;
    for (int i = 0; i < 400; i++)
        ok &= (i / 8 == 7) ? bits(w1[i]) == 0u : bits(w1[i]) == bits(w0[i]);
    CHECK(ok, "padding_idx row must be +0 and the other rows unchanged");
    mha_generator_free(g);
}

static void test_normal_scalar(void) {
    /* torch.randn(5): the scalar double path, the same in both variants;
     * 3 pairs = 12 words, one normal left in the cache. */
    static const uint32_t randn5[5] = {0xbde448df, 0x3df680d9, 0xbebd40bc, 0xbe763021,
                                       0xbf9934d1};
    const float cached = (float)0.20926935685808373;
    for (int v = 0; v < 2; v++) {
        mha_generator *g = fresh(123, (mha_rng_variant)v);
        float x[5], y[1];
        mha_generator_normal(g, x, 5, 0.0, 1.0);
        char what[64];
        snprintf(what, sizeof what, "randn(5) %s", vname((mha_rng_variant)v));
        check_bits(what, x, randn5, 5);
        /* randn(1) now takes the cached value and draws nothing. */
        mha_generator_normal(g, y, 1, 0.0, 1.0);
        CHECK(bits(y[0]) == bits(cached), "randn(1) after randn(5): got %.9g want %.9g",
              (double)y[0], (double)cached);
        CHECK(consumed(g, 123, 12), "randn(5) + randn(1) must draw 12 words");
        mha_generator_free(g);
    }

    /* The cache is scaled by the call that uses it: normal_(m, s) on the
     * cached value = f32(dn * s + m). */
    mha_generator *g = fresh(123, MHA_RNG_AVX2);
    float x[5], y[3];
    mha_generator_normal(g, x, 5, 0.0, 1.0);
    mha_generator_normal(g, y, 1, 0.5, 2.0);
    CHECK(bits(y[0]) == bits((float)(0.20926935685808373 * 2.0 + 0.5)),
          "cached normal must be scaled by the consuming call");

    /* randn(5) then randn(3): the 3 start with the cache (then one fresh
     * pair, 4 more words: 16 in all). */
    mha_generator_manual_seed(g, 123);
    mha_generator_normal(g, x, 5, 0.0, 1.0);
    mha_generator_normal(g, y, 3, 0.0, 1.0);
    CHECK(bits(y[0]) == bits(cached), "randn(3) after randn(5) must start with the cache");
    CHECK(consumed(g, 123, 16), "randn(5) + randn(3) must draw 16 words");

    /* The block path and the other distributions leave the cache alone. */
    float big[40], u[3], d[3] = {1, 1, 1};
    mha_generator_manual_seed(g, 123);
    mha_generator_normal(g, x, 5, 0.0, 1.0);
    mha_generator_normal(g, big, 40, 0.0, 1.0);
    mha_generator_uniform(g, u, 3, -1.0, 1.0);
    CHECK(mha_generator_dropout(g, d, d, 3, 0.5) == MHA_OK, "dropout 3");
    mha_generator_normal(g, y, 1, 0.0, 1.0);
    CHECK(bits(y[0]) == bits(cached), "cache must survive block normal/uniform/dropout");
    CHECK(consumed(g, 123, 12 + 40 + 16 + 3 + 6), "draws around a kept cache");

    /* manual_seed clears the cache: randn(1) then draws a pair (4 words). */
    mha_generator_manual_seed(g, 123);
    mha_generator_normal(g, x, 5, 0.0, 1.0);
    mha_generator_manual_seed(g, 123);
    mha_generator_normal(g, y, 1, 0.0, 1.0);
    CHECK(bits(y[0]) == randn5[0], "manual_seed must clear the cached normal");
    CHECK(consumed(g, 123, 4), "randn(1) must draw 4 words");

    /* Draws of the scalar path from a clean cache: 4 * ceil(n / 2). */
    for (size_t n = 1; n < 16; n++) {
        float z[15];
        mha_generator_manual_seed(g, 3);
        mha_generator_normal(g, z, n, 0.0, 1.0);
        CHECK(consumed(g, 3, 4 * ((n + 1) / 2)), "randn(%zu) must draw %zu words", n,
              4 * ((n + 1) / 2));
    }
    mha_generator_free(g);
}

static void test_dropout(void) {
    static const char *mask05[6] = {"110110", "000101", "111101",
                                    "011001", "010101", "011110"};
    static const char *mask01[6] = {"111111", "110111", "111111",
                                    "111111", "110111", "111111"};
    CHECK(bits(mha__dropout_scale(0.5)) == bits(2.0f), "dropout scale(0.5) must be 2");
    CHECK(bits(mha__dropout_scale(0.1)) == 0x3f8e38e4u, "dropout scale(0.1) bits 0x%08x",
          (unsigned)bits(mha__dropout_scale(0.1)));
    for (int c = 0; c < 2; c++) {
        const double p = c == 0 ? 0.5 : 0.1;
        const char **mask = c == 0 ? mask05 : mask01;
        const float kept = c == 0 ? 2.0f : from_bits(0x3f8e38e4u);
        for (int v = 0; v < 2; v++) {
            mha_generator *g = fresh(123, (mha_rng_variant)v);
            float in[36], out[36];
            for (int i = 0; i < 36; i++) in[i] = 1.0f;
            CHECK(mha_generator_dropout(g, out, in, 36, p) == MHA_OK, "dropout(%g)", p);
            int ok = 1;
            for (int i = 0; i < 36; i++) {
                float want = mask[i / 6][i % 6] == '1' ? kept : 0.0f;
                ok &= bits(out[i]) == bits(want);
            }
            CHECK(ok, "Dropout(%g)(ones(6,6)) %s mask differs from torch", p,
                  vname((mha_rng_variant)v));
            CHECK(consumed(g, 123, 72), "Dropout on 36 elements must draw 72 words");
            /* in == out gives the same result. */
            mha_generator_manual_seed(g, 123);
            CHECK(mha_generator_dropout(g, in, in, 36, p) == MHA_OK, "dropout in place");
            CHECK(memcmp(in, out, sizeof in) == 0, "in-place dropout differs");
            mha_generator_free(g);
        }
    }

    /* p == 0: a copy, no draws; p == 1: in * 0 (so -0 for negatives and NaN
     * for infinities), no draws; n == 0: nothing. */
    mha_generator *g = fresh(123, MHA_RNG_AVX2);
    const float in[4] = {1.5f, -2.0f, INFINITY, 0.0f};
    float out[4];
    CHECK(mha_generator_dropout(g, out, in, 4, 0.0) == MHA_OK, "dropout p=0");
    CHECK(memcmp(out, in, sizeof in) == 0, "dropout p=0 must copy");
    CHECK(mha_generator_dropout(g, out, in, 4, 1.0) == MHA_OK, "dropout p=1");
    CHECK(bits(out[0]) == 0u && bits(out[1]) == 0x80000000u && isnan(out[2]) &&
              bits(out[3]) == 0u,
          "dropout p=1 must write in * 0");
    CHECK(mha_generator_dropout(g, NULL, NULL, 0, 0.5) == MHA_OK, "dropout n=0");
    CHECK(consumed(g, 123, 0), "dropout p=0, p=1, n=0 must draw nothing");
    mha_generator_free(g);
}

static void test_errors(void) {
    mha_generator *g = fresh(1, MHA_RNG_AVX2);
    float x[4] = {0}, w[4];
    CHECK(mha_generator_create(1, NULL) == MHA_ERR_ARGUMENT, "create(NULL)");
    CHECK(mha_generator_dropout(g, x, x, 4, -0.1) == MHA_ERR_ARGUMENT, "dropout p<0");
    CHECK(strstr(mha_last_error(), "p (") != NULL, "dropout p detail: %s", mha_last_error());
    CHECK(mha_generator_dropout(g, x, x, 4, 1.5) == MHA_ERR_ARGUMENT, "dropout p>1");
    CHECK(mha_generator_dropout(g, x, x, 4, (double)NAN) == MHA_ERR_ARGUMENT, "dropout p=NaN");
    CHECK(mha_generator_dropout(g, NULL, x, 4, 0.5) == MHA_ERR_ARGUMENT, "dropout out NULL");
    CHECK(mha_generator_dropout(g, x, NULL, 4, 0.5) == MHA_ERR_ARGUMENT, "dropout in NULL");
    CHECK(mha_generator_dropout(NULL, x, x, 4, 0.5) == MHA_ERR_ARGUMENT, "dropout g NULL");
    CHECK(mha_generator_linear_init(g, w, NULL, 0, 2) == MHA_ERR_ARGUMENT, "linear in=0");
    CHECK(mha_generator_linear_init(g, w, NULL, 2, -1) == MHA_ERR_ARGUMENT, "linear out<0");
    CHECK(mha_generator_linear_init(g, NULL, NULL, 2, 2) == MHA_ERR_ARGUMENT, "linear w NULL");
    CHECK(mha_generator_linear_init(NULL, w, NULL, 2, 2) == MHA_ERR_ARGUMENT, "linear g NULL");
    CHECK(mha_generator_linear_init(g, w, NULL, INT64_MAX, 2) == MHA_ERR_OVERFLOW,
          "linear overflow");
    CHECK(mha_generator_embedding_init(g, w, -1, 2, -1) == MHA_ERR_ARGUMENT, "embedding num<0");
    CHECK(mha_generator_embedding_init(g, w, 2, 2, 2) == MHA_ERR_ARGUMENT,
          "embedding padding_idx >= num");
    CHECK(mha_generator_embedding_init(g, NULL, 2, 2, -1) == MHA_ERR_ARGUMENT,
          "embedding w NULL");
    CHECK(mha_generator_embedding_init(g, w, INT64_MAX, INT64_MAX, -1) == MHA_ERR_OVERFLOW,
          "embedding overflow");
    CHECK(consumed(g, 1, 0), "failed calls must draw nothing");
    /* NULL generators are harmless for the void functions. */
    mha_generator_uniform(NULL, x, 4, 0.0, 1.0);
    mha_generator_normal(NULL, x, 4, 0.0, 1.0);
    mha_generator_manual_seed(NULL, 1);
    mha_generator_set_variant(NULL, MHA_RNG_DEFAULT);
    mha_generator_free(NULL);
    mha_generator_free(g);
}

/* ------------------------------------------------------------------------ */
/* Bulk paths: mha__generator_random_bulk, mha__generator_keep_bits and the  */
/* chunked mha_generator_dropout against the scalar calls, under the ISA     */
/* that is current (main runs them with "auto" and again with "ref").        */
/* ------------------------------------------------------------------------ */

static const char *isa_name = "auto";

static uint64_t lcg_state = 0x9e3779b97f4a7c15u;
static uint64_t lcg(void) {
    lcg_state = lcg_state * 6364136223846793005u + 1442695040888963407u;
    return lcg_state >> 11; /* 53 bits */
}

/* The next k outputs of g and h agree (consumes from both). */
static int same_next(mha_generator *g, mha_generator *h, int k) {
    int ok = 1;
    for (int i = 0; i < k; i++) ok &= mha_generator_random(g) == mha_generator_random(h);
    return ok;
}

static void scalar_draws(mha_generator *g, uint32_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = mha_generator_random(g);
}

/* Seeds g and h alike, takes `pre` scalar draws from both, then n outputs
 * in bulk from g and n scalar draws from h: they must be equal and leave
 * both generators in the same state (the next 1300 outputs, crossing a
 * twist, agree). */
static void bulk_case(uint64_t seed, size_t pre, size_t n, uint32_t *a, uint32_t *b) {
    mha_generator *g = fresh(seed, MHA_RNG_AVX2), *h = fresh(seed, MHA_RNG_AVX2);
    if (g == NULL || h == NULL) return;
    for (size_t i = 0; i < pre; i++) {
        mha_generator_random(g);
        mha_generator_random(h);
    }
    mha__generator_random_bulk(g, a, n);
    scalar_draws(h, b, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i] && bad++ == 0) first = i;
    CHECK(bad == 0, "[%s] bulk(%zu) after %zu draws, seed %llu: %zu differ, first at %zu",
          isa_name, n, pre, (unsigned long long)seed, bad, first);
    CHECK(same_next(g, h, 1300), "[%s] state after bulk(%zu) after %zu draws differs",
          isa_name, n, pre);
    mha_generator_free(g);
    mha_generator_free(h);
}

static void test_random_bulk(void) {
    enum { MAXN = 100000 };
    uint32_t *a = malloc(MAXN * sizeof *a), *b = malloc(MAXN * sizeof *b);
    if (a == NULL || b == NULL) {
        CHECK(0, "out of memory");
        free(a);
        free(b);
        return;
    }
    static const size_t sizes[] = {0,    1,    2,    7,    8,    9,    16,   623,
                                   624,  625,  1247, 1248, 1249, 1872, 5000, MAXN};
    static const size_t pres[] = {0, 1, 2, 3, 227, 396, 622, 623, 624, 625, 1000, 1248};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof pres / sizeof pres[0]; j++)
            bulk_case(123 + j, pres[j], sizes[i], a, b);
    /* Random sizes and starting points. */
    for (int r = 0; r < 200; r++) {
        const size_t n = (size_t)(lcg() % (r < 150 ? 3000 : MAXN));
        const size_t pre = (size_t)(lcg() % 2000);
        bulk_case(lcg() & 0xffffffffu, pre, n, a, b);
    }
    /* NULL generator / n == 0: nothing happens. */
    mha__generator_random_bulk(NULL, a, 10);
    mha__generator_random_bulk(NULL, NULL, 0);

    /* A long sequence of mixed calls: bulk draws, raw and 64-bit draws,
     * uniform, both normal paths (the double cache must carry across),
     * dropout and keep bits. g uses the bulk paths, h only scalar calls. */
    mha_generator *g = fresh(2024, MHA_RNG_AVX2), *h = fresh(2024, MHA_RNG_AVX2);
    float fa[300], fb[300], in[300];
    uint64_t ka[8], kb[8];
    for (int i = 0; i < 300; i++) in[i] = (float)(i % 13) - 6.0f;
    int ok = 1;
    for (int step = 0; step < 3000 && g && h; step++) {
        const size_t n = (size_t)(lcg() % 300);
        switch (lcg() % 7) {
        case 0:
            mha__generator_random_bulk(g, a, n * 7);
            scalar_draws(h, b, n * 7);
            ok &= memcmp(a, b, n * 7 * sizeof *a) == 0;
            break;
        case 1:
            ok &= mha_generator_random64(g) == mha_generator_random64(h);
            break;
        case 2:
            mha_generator_uniform(g, fa, n, -1.0, 2.0);
            mha_generator_uniform(h, fb, n, -1.0, 2.0);
            ok &= memcmp(fa, fb, n * sizeof *fa) == 0;
            break;
        case 3: {
            const size_t m = n % 20; /* both the scalar (< 16) and block paths */
            mha_generator_normal(g, fa, m, 0.5, 2.0);
            mha_generator_normal(h, fb, m, 0.5, 2.0);
            ok &= memcmp(fa, fb, m * sizeof *fa) == 0;
            break;
        }
        case 4: {
            const double p = 0.25;
            const float scale = mha__dropout_scale(p);
            mha_generator_dropout(g, fa, in, n, p);
            for (size_t i = 0; i < n; i++)
                fb[i] = in[i] * (mha__dropout_keep(h, p) ? scale : 0.0f);
            ok &= memcmp(fa, fb, n * sizeof *fa) == 0;
            break;
        }
        case 5: {
            const size_t m = n % 500;
            mha__generator_keep_bits(g, ka, m > 300 ? 300 : m, 0.7);
            memset(kb, 0, sizeof kb);
            for (size_t i = 0; i < (m > 300 ? 300 : m); i++)
                kb[i >> 6] |= (uint64_t)mha__dropout_keep(h, 0.7) << (i & 63);
            ok &= memcmp(ka, kb, ((m > 300 ? 300 : m) + 63) / 64 * sizeof *ka) == 0;
            break;
        }
        default:
            ok &= mha_generator_random(g) == mha_generator_random(h);
            break;
        }
        if (!ok) {
            CHECK(0, "[%s] mixed sequence diverged at step %d", isa_name, step);
            break;
        }
    }
    if (ok && g && h) CHECK(same_next(g, h, 2000), "[%s] mixed sequence: final state", isa_name);
    mha_generator_free(g);
    mha_generator_free(h);
    free(a);
    free(b);
}

static const double KEEP_PS[] = {0.1, 0.5, 0.9, 1e-9, 0.999999, 0.3333333333333333,
                                 0.0, 1.0, 1e-300, 0.75};

static void test_keep_bits(void) {
    static const size_t sizes[] = {1,    2,    63,   64,   65,    127,   311,  312,
                                   313,  1000, 1023, 1024, 1025,  2047,  4097, 12345,
                                   65536 + 17, 100003};
    static const size_t pres[] = {0, 1, 623, 1000};
    enum { MAXN = 100003, MAXW = (MAXN + 63) / 64 + 1 };
    uint64_t *a = malloc(MAXW * sizeof *a), *b = malloc(MAXW * sizeof *b);
    if (a == NULL || b == NULL) {
        CHECK(0, "out of memory");
        free(a);
        free(b);
        return;
    }
    for (size_t pi = 0; pi < sizeof KEEP_PS / sizeof KEEP_PS[0]; pi++) {
        const double p = KEEP_PS[pi];
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const size_t n = sizes[si], pre = pres[(pi + si) % 4], words = (n + 63) / 64;
            mha_generator *g = fresh(7 + pi, MHA_RNG_AVX2), *h = fresh(7 + pi, MHA_RNG_AVX2);
            if (g == NULL || h == NULL) break;
            for (size_t i = 0; i < pre; i++) {
                mha_generator_random(g);
                mha_generator_random(h);
            }
            /* Pre-fill with ones: the padding bits must come back zero, and
             * the word after the last must not be touched. */
            memset(a, 0xff, MAXW * sizeof *a);
            memset(b, 0, MAXW * sizeof *b);
            mha__generator_keep_bits(g, a, n, p);
            size_t kept = 0;
            for (size_t i = 0; i < n; i++) {
                const bool k = mha__dropout_keep(h, p);
                kept += k;
                b[i >> 6] |= (uint64_t)k << (i & 63);
            }
            size_t bad = 0;
            for (size_t w = 0; w < words; w++) bad += a[w] != b[w];
            CHECK(bad == 0, "[%s] keep_bits p=%.17g n=%zu pre=%zu: %zu of %zu words differ",
                  isa_name, p, n, pre, bad, words);
            CHECK(a[words] == ~UINT64_C(0), "[%s] keep_bits p=%g n=%zu wrote past the end",
                  isa_name, p, n);
            CHECK(same_next(g, h, 1300), "[%s] state after keep_bits p=%g n=%zu pre=%zu",
                  isa_name, p, n, pre);
            /* The prefix form: the same generator state after, the words
             * up to keep (rounded up to 64) the full draw's, later words
             * zero, nothing past the end. */
            const size_t keeps[] = {0, 1, n / 2, n - 1, n};
            for (size_t ki = 0; ki < sizeof keeps / sizeof keeps[0]; ki++) {
                const size_t keep = keeps[ki], kw = (keep + 63) / 64 < words ? (keep + 63) / 64 : words;
                mha_generator *g2 = fresh(7 + pi, MHA_RNG_AVX2), *h2 = fresh(7 + pi, MHA_RNG_AVX2);
                if (g2 == NULL || h2 == NULL) {
                    mha_generator_free(g2);
                    mha_generator_free(h2);
                    break;
                }
                for (size_t i = 0; i < pre + 2 * n; i++) mha_generator_random(h2);
                for (size_t i = 0; i < pre; i++) mha_generator_random(g2);
                uint64_t *c = b + MAXW / 2; /* b's second half is unused below n <= MAXN/2 */
                if (words + 1 > MAXW / 2) c = a; /* large n: a is checked already, reuse it */
                memset(c, 0xff, (words + 1) * sizeof *c);
                mha__generator_keep_bits_prefix(g2, c, n, keep, p);
                size_t bad_p = 0;
                for (size_t w = 0; w < words; w++) bad_p += c[w] != (w < kw ? b[w] : 0);
                CHECK(bad_p == 0, "[%s] keep_bits_prefix p=%g n=%zu keep=%zu: %zu words differ", isa_name, p, n,
                      keep, bad_p);
                CHECK(c[words] == ~UINT64_C(0), "[%s] keep_bits_prefix n=%zu keep=%zu wrote past the end",
                      isa_name, n, keep);
                CHECK(same_next(g2, h2, 700), "[%s] state after keep_bits_prefix p=%g n=%zu keep=%zu", isa_name,
                      p, n, keep);
                mha_generator_free(g2);
                mha_generator_free(h2);
            }
            /* Sanity of the mask itself: about (1 - p) n kept. */
            if (n >= 10000) {
                const double rate = (double)kept / (double)n;
                CHECK(fabs(rate - (1.0 - p)) < 0.02, "[%s] keep rate %g for p=%g", isa_name,
                      rate, p);
            }
            mha_generator_free(g);
            mha_generator_free(h);
        }
    }
    mha__generator_keep_bits(NULL, a, 10, 0.5); /* harmless */
    free(a);
    free(b);
}

/* U53 < q as the scalar path computes it. */
static bool u53_less(uint64_t v, double q) { return (double)v * 0x1p-53 < q; }

/* The inverse of mt19937's tempering (each step is a bijection: an xor
 * with a shifted copy, undone by repeating it until the shifted-in bits
 * run out), so that a test can choose the outputs the keep bits see. */
static uint32_t untemper(uint32_t y) {
    uint32_t x = y;
    x ^= x >> 18; /* 18 >= 16: one repeat */
    uint32_t t = x;
    for (int r = 0; r < 3; r++) t = x ^ ((t << 15) & 0xefc60000u);
    x = t;
    t = x;
    for (int r = 0; r < 5; r++) t = x ^ ((t << 7) & 0x9d2c5680u);
    x = t;
    t = x;
    for (int r = 0; r < 3; r++) t = x ^ (t >> 11);
    return t;
}

/* The threshold against the double compare: every v within 3000 of T (and
 * the range ends), directly and through mha__keep_bits_from_words (on the
 * untempered words of these outputs) with junk in hi's top 11 bits (they
 * must be ignored). */
static int threshold_case(double q, uint32_t *raw, uint64_t *bits) {
    const uint64_t top = UINT64_C(1) << 53, T = mha__u53_threshold(q);
    if (T > top) return 0;
    const uint64_t lo = T > 3000 ? T - 3000 : 0, hi = top - T > 3000 ? T + 3000 : top;
    int ok = u53_less(0, q) == (0 < T) && u53_less(top - 1, q) == (top - 1 < T);
    size_t n = 0;
    for (uint64_t v = lo; v < hi; v++) {
        ok &= u53_less(v, q) == (v < T);
        raw[2 * n] = (uint32_t)(v >> 32) | ((uint32_t)lcg() << 21);
        raw[2 * n + 1] = (uint32_t)v;
        n++;
    }
    for (size_t i = 0; i < 2 * n; i++) {
        const uint32_t out = raw[i];
        raw[i] = untemper(out);
        ok &= mha__mt_temper1(raw[i]) == out;
    }
    memset(bits, 0xff, ((n + 63) / 64 + 1) * sizeof *bits);
    mha__keep_bits_from_words(raw, n, T, bits);
    for (size_t i = 0; i < n; i++) ok &= (int)((bits[i >> 6] >> (i & 63)) & 1u) == (lo + i < T);
    if (n % 64) ok &= (bits[n >> 6] >> (n & 63)) == 0u;
    ok &= bits[(n + 63) / 64] == ~UINT64_C(0);
    return ok;
}

static void test_threshold(void) {
    uint32_t *raw = malloc(2 * 6000 * sizeof *raw);
    uint64_t *bits = malloc(200 * sizeof *bits);
    if (raw == NULL || bits == NULL) {
        CHECK(0, "out of memory");
        free(raw);
        free(bits);
        return;
    }
    /* q = 1 - p for the dropout p's, special values, q * 2^53 integers
     * (v == Q must not be kept), half-integers, and random doubles. */
    for (size_t i = 0; i < sizeof KEEP_PS / sizeof KEEP_PS[0]; i++)
        CHECK(threshold_case(1.0 - KEEP_PS[i], raw, bits), "[%s] threshold q = 1 - %.17g",
              isa_name, KEEP_PS[i]);
    static const double special[] = {0.0, -0.0, 1.0, 0x1p-53, 0x1p-54, 0x1.8p-53, 3 * 0x1p-53,
                                     1.0 - 0x1p-53, 1.0 - 0x1p-52, 0.5, 1e-300, 4.9e-324,
                                     /* T a multiple of 2^32, or near one: the high words
                                      * differ across the range, equal within */
                                     5 * 0x1p-21, 5 * 0x1p-21 + 7 * 0x1p-53, 5 * 0x1p-21 - 7 * 0x1p-53,
                                     -1.0, 2.0, 1e300, (double)INFINITY, -(double)INFINITY,
                                     (double)NAN};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        CHECK(threshold_case(special[i], raw, bits), "[%s] threshold q = %.17g", isa_name,
              special[i]);
    CHECK(mha__u53_threshold((double)NAN) == 0 && mha__u53_threshold(0.0) == 0 &&
              mha__u53_threshold(1.0) == UINT64_C(1) << 53 &&
              mha__u53_threshold(0.5) == UINT64_C(1) << 52 &&
              mha__u53_threshold(0x1.8p-53) == 2,
          "threshold fixed points");
    int bad = 0;
    for (int r = 0; r < 300; r++) {
        double q;
        switch (r % 3) {
        case 0: q = (double)lcg() * 0x1p-53; break;                 /* Q an integer */
        case 1: q = ((double)lcg() + 0.5) * 0x1p-53; break;         /* Q + 1/2 */
        default: q = (double)(lcg() | 1) * 0x1p-53 * 0x1p-20; break; /* small q */
        }
        if (!threshold_case(q, raw, bits) && bad++ < 4)
            printf("  threshold q = %a fails\n", q);
    }
    CHECK(bad == 0, "[%s] %d random thresholds fail", isa_name, bad);
    free(raw);
    free(bits);
}

/* mha_generator_dropout (chunked, bulk) against the per-element scalar rule;
 * inputs with -0, infinities and NaN; in place too. */
static void test_dropout_bulk(void) {
    enum { N = 100000 };
    float *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out),
          *want = malloc(N * sizeof *want);
    if (in == NULL || out == NULL || want == NULL) {
        CHECK(0, "out of memory");
        free(in);
        free(out);
        free(want);
        return;
    }
    for (size_t i = 0; i < N; i++) in[i] = ((float)(i % 97) - 48.0f) / 8.0f;
    in[5] = -0.0f;
    in[7] = INFINITY;
    in[9] = -INFINITY;
    in[11] = NAN;
    static const size_t sizes[] = {1, 7, 8, 9, 63, 64, 65, 1023, 1024, 1025, 3000, 99999, N};
    static const double ps[] = {0.1, 0.5, 0.9, 1e-9, 0.999999, 0.3333333333333333};
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        const double p = ps[pi];
        const float scale = mha__dropout_scale(p);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const size_t n = sizes[si], pre = si % 3;
            mha_generator *g = fresh(31 + pi, MHA_RNG_AVX2), *h = fresh(31 + pi, MHA_RNG_AVX2);
            if (g == NULL || h == NULL) break;
            for (size_t i = 0; i < pre; i++) {
                mha_generator_random(g);
                mha_generator_random(h);
            }
            for (size_t i = 0; i < n; i++)
                want[i] = in[i] * (mha__dropout_keep(h, p) ? scale : 0.0f);
            int in_place = si % 2;
            float *dst = out;
            if (in_place) {
                memcpy(out, in, n * sizeof *out);
                CHECK(mha_generator_dropout(g, out, out, n, p) == MHA_OK, "dropout in place");
            } else {
                CHECK(mha_generator_dropout(g, dst, in, n, p) == MHA_OK, "dropout");
            }
            size_t bad = 0;
            for (size_t i = 0; i < n; i++) bad += bits(out[i]) != bits(want[i]);
            CHECK(bad == 0, "[%s] dropout p=%.17g n=%zu%s: %zu elements differ", isa_name, p,
                  n, in_place ? " in place" : "", bad);
            CHECK(same_next(g, h, 1300), "[%s] state after dropout p=%g n=%zu", isa_name, p,
                  n);
            mha_generator_free(g);
            mha_generator_free(h);
        }
    }
    free(in);
    free(out);
    free(want);
}

/* The AVX-512 twist and tempering (mt_body.h) on the 16-lane emulation
 * against the reference, word for word, from random states: where the CPU
 * has AVX-512 the bulk tests below also run the real ones. */
static void test_mt_gen16(void) {
#if !MHA_TEST_EMULATIONS
    /* built without it: only where the real AVX-512 kernels run */
    const mha__kernels *k5 = mha__kernels_get(MHA_ISA_AVX512);
    CHECK(k5 != NULL, AVX512_UNTESTED);
    return;
#else
    enum { N = 624 };
    uint32_t st_a[N], st_b[N], out_a[N], out_b[N];
    int bad = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++) st_a[i] = st_b[i] = (uint32_t)(lcg() >> 7);
        mha__mt_twist_gen16(st_a);
        mha__mt_twist_ref(st_b);
        bad += memcmp(st_a, st_b, sizeof st_a) != 0;
        mha__mt_twist_temper_gen16(st_a, out_a);
        mha__mt_twist_temper_ref(st_b, out_b);
        bad += memcmp(st_a, st_b, sizeof st_a) != 0 || memcmp(out_a, out_b, sizeof out_a) != 0;
        const size_t n = (size_t)(lcg() % N); /* every tail length */
        memset(out_a, 0, sizeof out_a);
        memset(out_b, 0, sizeof out_b);
        mha__mt_temper_gen16(st_a + (N - n), out_a, n);
        mha__mt_temper_ref(st_b + (N - n), out_b, n);
        bad += memcmp(out_a, out_b, sizeof out_a) != 0;
    }
    CHECK(bad == 0, "mt_body.h on the 16-lane emulation: %d of 60 results differ from mt_ref.c", bad);
    /* keep_bits_mt: random words, thresholds at random, at 0 and 2^53, and
     * at an element's own value (its high word equal: the low word decides),
     * every tail length */
    enum { E = 1000 };
    uint32_t w[2 * E];
    uint64_t ba[E / 64 + 2], bb[E / 64 + 2];
    bad = 0;
    for (int rep = 0; rep < 200; rep++) {
        for (int i = 0; i < 2 * E; i++) w[i] = (uint32_t)(lcg() >> 5);
        const size_t n = (size_t)(lcg() % E) + 1, at = (size_t)(lcg() % n);
        const uint64_t v = ((uint64_t)(mha__mt_temper1(w[2 * at]) & 0x1fffffu) << 32) |
                           mha__mt_temper1(w[2 * at + 1]);
        uint64_t T;
        switch (rep % 5) {
        case 0: T = 0; break;
        case 1: T = UINT64_C(1) << 53; break;
        case 2: T = (lcg() >> 3) & ((UINT64_C(1) << 53) - 1u); break;
        case 3: T = v; break;
        default: T = v + 1; break;
        }
        memset(ba, 0xa5, sizeof ba);
        memset(bb, 0xa5, sizeof bb);
        mha__keep_bits_mt_gen16(w, n, T, ba);
        mha__keep_bits_mt_ref(w, n, T, bb);
        bad += memcmp(ba, bb, sizeof ba) != 0;
    }
    CHECK(bad == 0, "keep_bits_mt on the 16-lane emulation: %d of 200 results differ from mt_ref.c", bad);
#endif
}

int main(void) {
    test_mt19937();
    test_mt_gen16();
    test_uniform();
    test_linear();
    test_normal_block();
    test_normal_scalar();
    test_dropout();
    test_errors();
    /* The bulk paths on every kernel set this CPU has, each named (the
     * scalar calls they are compared with do not depend on it). */
    static const char *isas[3] = {"avx512", "avx2", "ref"};
    for (int k = 0; k < 3; k++) {
        if (!TEST_USE_ISA(isas[k])) continue;
        isa_name = mha_runtime_isa();
        printf("bulk paths on ISA %s\n", isa_name);
        test_random_bulk();
        test_keep_bits();
        test_threshold();
        test_dropout_bulk();
        test_dropout();
    }
    mha_runtime_set_isa("auto");
    printf("test_generator: %d passed, %d failed\n", t_pass, t_fail);
    return t_fail == 0 ? 0 : 1;
}
