/* test_generator.c — the PyTorch-compatible generator against the seed-123
 * vectors of docs/torch-generator-vectors.txt (hard-coded below, bit for
 * bit, both kernel variants where they differ), plus draw counts, the
 * double-normal cache, seeding rules and argument errors. */
#include "generator/generator.h"
#include "mha.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int passed, failed;

#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (cond) {                                              \
            passed++;                                            \
        } else {                                                 \
            failed++;                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);          \
            printf(__VA_ARGS__);                                 \
            putchar('\n');                                       \
        }                                                        \
    } while (0)

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
        failed++;
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

int main(void) {
    test_mt19937();
    test_uniform();
    test_linear();
    test_normal_block();
    test_normal_scalar();
    test_dropout();
    test_errors();
    printf("test_generator: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
