/* test_attn_kernels.c — the attention kernels against their oracles.
 *
 *  1. Philox4x32-10 known-answer vectors (Random123) and mha__philox_keep.
 *  2. The expf of simd_exp.h on each SIMD layer (AVX2, the 16-lane
 *     emulation of AVX-512, AVX-512 where the CPU has it): max ULP error
 *     against double exp over a dense sweep of [-87, 0] and a few points up
 *     to 88; the layers agree bit for bit.
 *  3. mha__attn_fwd_ref against a naive double-precision oracle (in this
 *     file), and each fast kernel against mha__attn_fwd_ref: the library's
 *     mha__attn_fwd_avx2 and mha__attn_fwd_avx512 (where compiled and
 *     supported by the CPU), and two test-only instantiations of the same
 *     body (isa_variants.h): gen16, the AVX-512 kernel on a portable
 *     emulation of its SIMD layer, and avx2w32, the AVX-512 tunables on the
 *     AVX2 layer. gen16 must reproduce avx2w32's bits (and avx512's where it
 *     runs) exactly: that is how the AVX-512 kernel is tested on CPUs without
 *     AVX-512. Over many shapes (T = 1 .. 1024, HD = 1 .. 128), causal and
 *     not, strided rows (a packed (T, 3*HD + pad) qkv buffer), sub-ranges
 *     [q_begin, q_end), lse, BITMASK and PHILOX dropout. Tolerance:
 *       max|o_fast - o_ref| <= 1e-5 * max(1, max|o_ref|), |lse diff| <= 1e-5.
 *  4. Determinism (each fast kernel): splitting the rows into chunks gives
 *     bit-identical results; rows outside the range are not written; with
 *     causal, keys at or after q_end are not read; O written over Q
 *     (o == q, ldo == ldq) gives the same bits as a separate O.
 *  5. The attention layer (attention.c) over each fast kernel table: a
 *     forward over a packed QKV buffer at T >= 512, where the layer copies
 *     each head's K and V rows to contiguous scratch first, gives the bits
 *     of the same heads read in place from a head-major (KV-cache) layout,
 *     causal and not, with and without Philox dropout, at 1 and 3 threads:
 *     copies with whole heads a thread, copies with the threads sharing a
 *     head's blocks, and (3 threads, few blocks a thread) no copies.
 * Exits non-zero on any failure. */
#include "test_util.h"
#include "attention/attention.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"
#if defined(MHA_HAVE_AVX2_KERNELS)
#include "isa_variants.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double worst_ref, worst_lse_ref;

/* The fast kernels under test (those compiled and supported by this CPU). */
typedef struct {
    const char *name;
    void (*fn)(const mha__attn_args *, float *);
    size_t (*scratch)(int64_t, int64_t);
    double worst, worst_lse; /* max |o - o_ref| / max(1, max|o_ref|), |lse diff| */
    int twin; /* index in fast[] of a kernel whose bits this one must give, or -1 */
} fast_kernel;
enum { MAX_FAST = 4 };
static fast_kernel fast[MAX_FAST];
static int n_fast;



/* ---- 1. Philox ---------------------------------------------------------- */
static void test_philox(void) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {
        {0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        mha__philox4x32_10(ctr[t], key[t], out);
        CHECK(memcmp(out, want[t], sizeof out) == 0,
              "philox KAT %d: got %08x %08x %08x %08x", t, out[0], out[1], out[2], out[3]);
    }
    /* keep(): the (col & 3)-th word of the counter {col>>2, row, stream} */
    int bad = 0;
    for (int t = 0; t < 1000; t++) {
        const uint64_t seed = rng_u64(), stream = rng_u64();
        const uint64_t row = rng_u64() & 0xffffffffu, col = rng_u64() & 0xffffffffu;
        const uint32_t thr = (uint32_t)rng_u64();
        const uint32_t c[4] = {(uint32_t)(col >> 2), (uint32_t)row, (uint32_t)stream,
                               (uint32_t)(stream >> 32)};
        const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        uint32_t w[4];
        mha__philox4x32_10(c, k, w);
        if (mha__philox_keep(seed, stream, row, col, thr) != (w[col & 3] < thr)) bad++;
    }
    CHECK(bad == 0, "philox_keep disagrees with its definition %d times", bad);
    CHECK(mha__philox_keep_threshold(0.0) == 0xffffffffu, "threshold(0)");
    CHECK(mha__philox_keep_threshold(0.5) == 0x80000000u, "threshold(0.5) = %08x",
          mha__philox_keep_threshold(0.5));
    CHECK(mha__philox_keep_threshold(0.25) == 0xC0000000u, "threshold(0.25)");
    CHECK(mha__philox_keep_threshold(1.0) == 0u, "threshold(1)");
    CHECK(mha__philox_keep_threshold(NAN) == 0u, "threshold(nan)");
    /* keep rate */
    const uint32_t thr = mha__philox_keep_threshold(0.3);
    int kept = 0;
    const int n = 200000;
    for (int j = 0; j < n; j++) kept += mha__philox_keep(42, 7, (uint64_t)(j / 1000), (uint64_t)(j % 1000), thr);
    const double rate = (double)kept / n;
    CHECK(fabs(rate - 0.7) < 0.005, "philox keep rate %.4f, want 0.7", rate);
}

/* ---- 2. vector expf ----------------------------------------------------- */
#if defined(MHA_HAVE_AVX2_KERNELS)
/* y[0..n) = exp(x[0..n)), n a multiple of 16 (isa_variants.h). */
typedef void (*vexp_fn)(const float *x, float *y, size_t n);

/* vexp_array: vf_exp on a layer; other: vf_exp on AVX2 (its bits must be
 * the same) or NULL; nonpos: vf_exp_nonpos on the same layer as vexp_array,
 * which must give vf_exp's bits for every x <= 88.37 and NaN. */
static void test_vexp(const char *name, vexp_fn vexp_array, vexp_fn other, vexp_fn nonpos) {
    enum { CH = 4096 };
    static float x[CH], y[CH], y2[CH];
    size_t mismatches = 0, nonpos_mismatches = 0;
    double worst = 0.0;
    float worst_x = 0.0f;
    size_t count = 0;
    /* every 13th float in [-87, 0] (all float bit patterns from -0 down);
     * every 403rd under AddressSanitizer, where the sweep would take most
     * of the test's time (the other builds take the dense one) */
#if defined(__SANITIZE_ADDRESS__)
    const uint32_t stride = 403u;
#else
    const uint32_t stride = 13u;
#endif
    const float lo = -87.0f;
    uint32_t bend;
    memcpy(&bend, &lo, 4);
    uint32_t b = 0x80000000u;
    while (b <= bend) {
        size_t n = 0;
        for (; n < CH && b <= bend; n++, b += stride) memcpy(&x[n], &b, 4);
        size_t n8 = (n + 15) & ~(size_t)15;
        for (size_t i = n; i < n8; i++) x[i] = 0.0f;
        vexp_array(x, y, n8);
        if (other) {
            other(x, y2, n8);
            for (size_t i = 0; i < n; i++) mismatches += memcmp(&y[i], &y2[i], 4) != 0;
        }
        nonpos(x, y2, n8);
        for (size_t i = 0; i < n; i++) nonpos_mismatches += memcmp(&y[i], &y2[i], 4) != 0;
        for (size_t i = 0; i < n; i++) {
            const double u = test_ulp_error(y[i], exp((double)x[i]));
            if (u > worst) {
                worst = u;
                worst_x = x[i];
            }
        }
        count += n;
    }
    printf("vexp %s: max error %.3f ULP at x = %.9g over %zu points in [-87, 0]\n", name, worst,
           (double)worst_x, count);
    CHECK(worst <= 1.1, "vexp %s max error %.3f ULP > 1.1", name, worst);
    if (other)
        CHECK(mismatches == 0, "vexp %s: %zu results differ from the AVX2 version", name,
              mismatches);
    CHECK(nonpos_mismatches == 0, "vexp %s: vf_exp_nonpos differs from vf_exp in %zu of [-87, 0]",
          name, nonpos_mismatches);

    /* positive values, specials */
    float px[16] = {0.0f, 1e-8f, 0.5f, 1.0f, 2.5f, 10.0f, 30.0f, 50.0f,
                    70.0f, 80.0f, 85.0f, 87.0f, 88.0f, 0.3465f, -0.3466f, 88.3f};
    float py[16];
    vexp_array(px, py, 16);
    float npy[16];
    nonpos(px, npy, 16);
    CHECK(memcmp(py, npy, sizeof py) == 0, "vexp %s: vf_exp_nonpos differs from vf_exp in [0, 88.3]",
          name);
    double wp = 0.0;
    for (int i = 0; i < 16; i++) {
        const double u = test_ulp_error(py[i], exp((double)px[i]));
        if (u > wp) wp = u;
    }
    printf("vexp %s: max error %.3f ULP on 16 points in [-0.35, 88.3]\n", name, wp);
    CHECK(wp <= 1.1, "vexp %s positive max error %.3f ULP", name, wp);

    float sx[16] = {-INFINITY, -1000.0f, -88.0f, -87.5f, 0.0f, -0.0f, NAN, INFINITY,
                    -87.3f, -87.29f, -87.2f, -87.1f, -87.05f, -87.0f, -86.9f, -1e-30f};
    float sy[16], nsy[16];
    vexp_array(sx, sy, 16);
    nonpos(sx, nsy, 16);
    for (int i = 0; i < 16; i++) /* not +inf, which only vf_exp clamps */
        CHECK(i == 7 || (isnan(sx[i]) ? isnan(nsy[i]) : memcmp(&sy[i], &nsy[i], 4) == 0),
              "vexp %s: vf_exp_nonpos(%g) = %g, vf_exp %g", name, (double)sx[i], (double)nsy[i],
              (double)sy[i]);
    CHECK(sy[0] == 0.0f && sy[1] == 0.0f && sy[2] == 0.0f && sy[3] == 0.0f,
          "vexp: x < -87.3 must give exactly 0 (%g %g %g %g)", (double)sy[0], (double)sy[1],
          (double)sy[2], (double)sy[3]);
    CHECK(sy[4] == 1.0f && sy[5] == 1.0f, "vexp(0) = %.9g", (double)sy[4]);
    CHECK(isnan(sy[6]), "vexp(nan) = %g", (double)sy[6]);
    CHECK(isfinite(sy[7]) && sy[7] > 1e38f, "vexp(inf) = %g (clamped)", (double)sy[7]);
}
#endif

/* ---- 3. attention -------------------------------------------------------- */

/* A head in a packed qkv buffer: row t = [q (HD) | k (HD) | v (HD) | pad]. */
typedef struct {
    int64_t T, HD, ld;
    float *qkv;
    float *o, *lse; /* o: (T, ldo) */
    int64_t ldo;
    uint64_t *keep; /* BITMASK: (T, keep_ld) */
    int64_t keep_ld;
} head;

static void head_init(head *h, int64_t T, int64_t HD, int64_t pad, float qmul) {
    h->T = T;
    h->HD = HD;
    h->ld = 3 * HD + pad;
    h->qkv = malloc(sizeof(float) * (size_t)(T * h->ld));
    for (int64_t i = 0; i < T * h->ld; i++) h->qkv[i] = rng_uniform();
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < HD; d++) h->qkv[t * h->ld + d] *= qmul;
    h->ldo = HD + 3;
    h->o = malloc(sizeof(float) * (size_t)(T * h->ldo));
    h->lse = malloc(sizeof(float) * (size_t)T);
    h->keep_ld = (T + 63) / 64;
    h->keep = malloc(sizeof(uint64_t) * (size_t)(T * h->keep_ld));
    for (int64_t i = 0; i < T * h->keep_ld; i++) {
        /* keep probability ~0.75 */
        h->keep[i] = rng_u64() | rng_u64();
    }
}

static void head_free(head *h) {
    free(h->qkv);
    free(h->o);
    free(h->lse);
    free(h->keep);
}

static mha__attn_args head_args(const head *h, float *o, float *lse, bool causal,
                                mha__drop_mode drop, double p) {
    mha__attn_args a;
    memset(&a, 0, sizeof a);
    a.o = o;
    a.ldo = h->ldo;
    a.q = h->qkv;
    a.ldq = h->ld;
    a.k = h->qkv + h->HD;
    a.ldk = h->ld;
    a.v = h->qkv + 2 * h->HD;
    a.ldv = h->ld;
    a.lse = lse;
    a.T = h->T;
    a.HD = h->HD;
    a.q_begin = 0;
    a.q_end = h->T;
    a.scale = (float)(1.0 / sqrt((double)(h->HD > 0 ? h->HD : 1)));
    a.causal = causal;
    a.drop = drop;
    a.drop_p = p;
    a.drop_scale = drop == MHA_DROP_NONE ? 1.0f : 1.0f / (float)(1.0 - p);
    a.keep = h->keep;
    a.keep_ld = h->keep_ld;
    a.philox_seed = 0x1234567890abcdefull;
    a.philox_stream = 0xfedcba987ull;
    a.keep_threshold = mha__philox_keep_threshold(p);
    return a;
}

/* Naive double-precision oracle, rows [q_begin, q_end). */
static void attn_naive(const mha__attn_args *a) {
    const int64_t T = a->T, HD = a->HD;
    double *s = malloc(sizeof(double) * (size_t)(T > 0 ? T : 1));
    double *acc = malloc(sizeof(double) * (size_t)(HD > 0 ? HD : 1));
    for (int64_t i = a->q_begin; i < a->q_end; i++) {
        const int64_t n = a->causal ? i + 1 : T;
        double m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            double dot = 0.0;
            for (int64_t d = 0; d < HD; d++)
                dot += (double)a->q[i * a->ldq + d] * (double)a->k[j * a->ldk + d];
            s[j] = dot * (double)a->scale;
            if (s[j] > m) m = s[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) sum += exp(s[j] - m);
        if (a->lse) a->lse[i] = (float)(m + log(sum));
        for (int64_t d = 0; d < HD; d++) acc[d] = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double w = exp(s[j] - m) / sum;
            if (a->drop == MHA_DROP_BITMASK)
                w = ((a->keep[i * a->keep_ld + (j >> 6)] >> (j & 63)) & 1u) ? w * (double)a->drop_scale : 0.0;
            else if (a->drop == MHA_DROP_PHILOX)
                w = mha__philox_keep(a->philox_seed, a->philox_stream, (uint64_t)i, (uint64_t)j,
                                     a->keep_threshold)
                        ? w * (double)a->drop_scale
                        : 0.0;
            for (int64_t d = 0; d < HD; d++) acc[d] += w * (double)a->v[j * a->ldv + d];
        }
        for (int64_t d = 0; d < HD; d++) a->o[i * a->ldo + d] = (float)acc[d];
    }
    free(s);
    free(acc);
}

/* Max |x - y| over rows [r0, r1), and max |y| (y = oracle). */
static void compare_rows(const float *x, const float *y, int64_t ld, int64_t HD, int64_t r0,
                         int64_t r1, double *maxdiff, double *maxref) {
    double md = 0.0, mr = 0.0;
    for (int64_t i = r0; i < r1; i++)
        for (int64_t d = 0; d < HD; d++) {
            const double a = x[i * ld + d], b = y[i * ld + d];
            const double e = fabs(a - b);
            if (!(e <= md)) md = e; /* NaN propagates as failure */
            if (fabs(b) > mr) mr = fabs(b);
        }
    *maxdiff = md;
    *maxref = mr;
}

static double lse_diff(const float *x, const float *y, int64_t r0, int64_t r1) {
    double md = 0.0;
    for (int64_t i = r0; i < r1; i++) {
        const double e = (isinf(x[i]) && x[i] == y[i]) ? 0.0 : fabs((double)x[i] - (double)y[i]);
        if (!(e <= md)) md = e;
    }
    return md;
}

static const char *drop_name(mha__drop_mode d) {
    return d == MHA_DROP_NONE ? "none" : d == MHA_DROP_BITMASK ? "bitmask" : "philox";
}

/* Runs ref (and naive, and every fast kernel) on rows [qb, qe) of one head
 * and compares. */
static void check_case(int64_t T, int64_t HD, int64_t pad, bool causal, mha__drop_mode drop,
                       double p, int64_t qb, int64_t qe, float qmul, bool use_naive) {
    head h;
    head_init(&h, T, HD, pad, qmul);
    const size_t on = (size_t)(T * h.ldo);
    float *o_ref = malloc(sizeof(float) * on), *o_nai = malloc(sizeof(float) * on);
    float *l_ref = malloc(sizeof(float) * (size_t)T), *l_nai = malloc(sizeof(float) * (size_t)T);
    /* every fast kernel's output, kept for the twin comparison */
    float *o_all = malloc(sizeof(float) * on * MAX_FAST);
    float *l_all = malloc(sizeof(float) * (size_t)T * MAX_FAST);
    for (size_t i = 0; i < on; i++) o_ref[i] = o_nai[i] = 12345.0f;
    for (int64_t i = 0; i < T; i++) l_ref[i] = l_nai[i] = 12345.0f;

    mha__attn_args a = head_args(&h, o_ref, l_ref, causal, drop, p);
    a.q_begin = qb;
    a.q_end = qe;
    float *scr = malloc(sizeof(float) * mha__attn_fwd_scratch_ref(T, HD));
    mha__attn_fwd_ref(&a, scr);
    free(scr);

    char what[160];
    snprintf(what, sizeof what, "T=%lld HD=%lld ld=%lld %s drop=%s rows [%lld,%lld)", (long long)T,
             (long long)HD, (long long)h.ld, causal ? "causal" : "full", drop_name(drop),
             (long long)qb, (long long)qe);
    double md, mr;
    if (use_naive) {
        a.o = o_nai;
        a.lse = l_nai;
        attn_naive(&a);
        compare_rows(o_ref, o_nai, h.ldo, HD, qb, qe, &md, &mr);
        const double ld = lse_diff(l_ref, l_nai, qb, qe);
        if (md > worst_ref) worst_ref = md;
        if (ld > worst_lse_ref) worst_lse_ref = ld;
        CHECK(md <= 1e-5 * fmax(1.0, mr) && ld <= 1e-5, "ref vs naive: %s: max|do| %.3g lse %.3g",
              what, md, ld);
    }
    for (int kf = 0; kf < n_fast; kf++) {
        fast_kernel *f = &fast[kf];
        float *o_fast = o_all + on * (size_t)kf, *l_fast = l_all + (size_t)T * (size_t)kf;
        for (size_t i = 0; i < on; i++) o_fast[i] = 12345.0f;
        for (int64_t i = 0; i < T; i++) l_fast[i] = 12345.0f;
        a.o = o_fast;
        a.lse = l_fast;
        /* exact scratch size, deliberately misaligned by one float */
        const size_t sn = f->scratch(T, HD);
        float *sb = malloc(sizeof(float) * (sn + 1));
        f->fn(&a, sb + 1);
        free(sb);
        compare_rows(o_fast, o_ref, h.ldo, HD, qb, qe, &md, &mr);
        const double ld = lse_diff(l_fast, l_ref, qb, qe);
        if (md / fmax(1.0, mr) > f->worst) f->worst = md / fmax(1.0, mr);
        if (ld > f->worst_lse) f->worst_lse = ld;
        CHECK(md <= 1e-5 * fmax(1.0, mr) && ld <= 1e-5,
              "%s vs ref: %s: max|do| %.3g (max|o| %.3g) lse %.3g", f->name, what, md, mr, ld);
        /* rows outside the range untouched */
        int touched = 0;
        for (int64_t i = 0; i < T; i++) {
            if (i >= qb && i < qe) continue;
            for (int64_t d = 0; d < h.ldo; d++) touched += o_fast[i * h.ldo + d] != 12345.0f;
            touched += l_fast[i] != 12345.0f;
        }
        for (int64_t i = qb; i < qe; i++)
            for (int64_t d = HD; d < h.ldo; d++) touched += o_fast[i * h.ldo + d] != 12345.0f;
        CHECK(touched == 0, "%s: %s: %d values outside the range written", f->name, what,
              touched);
        if (f->twin >= 0) { /* the same bits as its twin, lse included */
            const float *o_twin = o_all + on * (size_t)f->twin;
            const float *l_twin = l_all + (size_t)T * (size_t)f->twin;
            int diff = 0;
            for (int64_t i = qb; i < qe; i++) {
                diff += memcmp(o_fast + i * h.ldo, o_twin + i * h.ldo,
                               sizeof(float) * (size_t)HD) != 0;
                diff += memcmp(l_fast + i, l_twin + i, sizeof(float)) != 0;
            }
            CHECK(diff == 0, "%s vs %s: %s: %d rows not bit-identical", f->name,
                  fast[f->twin].name, what, diff);
        }
    }
    free(o_ref);
    free(o_nai);
    free(l_ref);
    free(l_nai);
    free(o_all);
    free(l_all);
    head_free(&h);
}

/* GENERATOR mode is delegated to the reference kernel: same draws, same
 * result, in the fast kernel's own scratch. */
static void check_generator(const fast_kernel *f, int64_t T, int64_t HD, bool causal) {
    head h;
    head_init(&h, T, HD, 2, 1.0f);
    const size_t on = (size_t)(T * h.ldo);
    float *o1 = malloc(sizeof(float) * on), *o2 = malloc(sizeof(float) * on);
    float *scr = malloc(sizeof(float) * f->scratch(T, HD));
    mha_generator *g1 = NULL, *g2 = NULL;
    const bool ok = mha_generator_create(123, &g1) == MHA_OK && mha_generator_create(123, &g2) == MHA_OK;
    CHECK(ok, "generator create");
    if (ok) {
        mha__attn_args a = head_args(&h, o1, NULL, causal, MHA_DROP_GENERATOR, 0.25);
        a.gen = g1;
        mha__attn_fwd_ref(&a, scr);
        a.o = o2;
        a.gen = g2;
        f->fn(&a, scr);
        int diff = 0;
        for (int64_t i = 0; i < T; i++)
            diff += memcmp(o1 + i * h.ldo, o2 + i * h.ldo, sizeof(float) * (size_t)HD) != 0;
        CHECK(diff == 0, "%s: GENERATOR delegation T=%lld HD=%lld: %d rows differ", f->name,
              (long long)T, (long long)HD, diff);
    }
    mha_generator_free(g1);
    mha_generator_free(g2);
    free(o1);
    free(o2);
    free(scr);
    head_free(&h);
}

/* The same rows computed in one call and in chunks of `chunk` rows (and
 * random chunks) must be bit-identical; with causal, K/V rows >= q_end of a
 * chunk must not be read (they are poisoned with NaN in a copy). */
static void check_determinism(const fast_kernel *f, int64_t T, int64_t HD, bool causal,
                              mha__drop_mode drop) {
    head h;
    head_init(&h, T, HD, 5, 2.0f);
    const size_t on = (size_t)(T * h.ldo);
    float *o1 = malloc(sizeof(float) * on), *o2 = malloc(sizeof(float) * on);
    float *l1 = malloc(sizeof(float) * (size_t)T), *l2 = malloc(sizeof(float) * (size_t)T);
    float *scr = malloc(sizeof(float) * f->scratch(T, HD));
    float *poison = malloc(sizeof(float) * (size_t)(T * h.ld));
    mha__attn_args a = head_args(&h, o1, l1, causal, drop, 0.2);
    f->fn(&a, scr);

    static const int64_t chunks[] = {1, 3, 16, 17, 33, 48, 100, 0};
    for (int c = 0; chunks[c] >= 0; c++) {
        memset(o2, 0, sizeof(float) * on);
        memset(l2, 0, sizeof(float) * (size_t)T);
        int64_t r = 0;
        while (r < T) {
            int64_t n = chunks[c] > 0 ? chunks[c] : 1 + (int64_t)(rng_u64() % 70);
            if (n > T - r) n = T - r;
            mha__attn_args b = a;
            b.o = o2;
            b.lse = l2;
            b.q_begin = r;
            b.q_end = r + n;
            if (causal) { /* keys >= q_end must not be read */
                memcpy(poison, h.qkv, sizeof(float) * (size_t)(T * h.ld));
                for (int64_t t = r + n; t < T; t++)
                    for (int64_t d = h.HD; d < 3 * h.HD; d++) poison[t * h.ld + d] = NAN;
                b.k = poison + h.HD;
                b.v = poison + 2 * h.HD;
            }
            f->fn(&b, scr);
            r += n;
        }
        int diff = 0;
        for (int64_t i = 0; i < T; i++) {
            diff += memcmp(o1 + i * h.ldo, o2 + i * h.ldo, sizeof(float) * (size_t)HD) != 0;
            diff += memcmp(l1 + i, l2 + i, sizeof(float)) != 0;
        }
        CHECK(diff == 0, "%s: determinism T=%lld HD=%lld %s drop=%s chunk %lld: %d rows differ",
              f->name, (long long)T, (long long)HD, causal ? "causal" : "full", drop_name(drop),
              (long long)chunks[c], diff);
        if (chunks[c] == 0) break;
    }
    free(o1);
    free(o2);
    free(l1);
    free(l2);
    free(scr);
    free(poison);
    head_free(&h);
}

/* O written over Q (o == q, ldo == ldq), in chunks of `chunk` rows, gives
 * the bits of a separate O (and leaves the K, V columns alone). */
static void check_alias(const fast_kernel *f, int64_t T, int64_t HD, bool causal,
                        mha__drop_mode drop, int64_t chunk) {
    head h;
    head_init(&h, T, HD, 3, 1.0f);
    const size_t on = (size_t)(T * h.ldo), nq = (size_t)(T * h.ld);
    float *o1 = malloc(sizeof(float) * on), *qkv = malloc(sizeof(float) * nq);
    float *scr = malloc(sizeof(float) * f->scratch(T, HD));
    mha__attn_args a = head_args(&h, o1, NULL, causal, drop, 0.3);
    f->fn(&a, scr);
    memcpy(qkv, h.qkv, sizeof(float) * nq);
    for (int64_t r = 0; r < T; r += chunk) {
        mha__attn_args b = a;
        b.q = qkv;
        b.k = qkv + HD;
        b.v = qkv + 2 * HD;
        b.o = qkv;
        b.ldo = h.ld;
        b.q_begin = r;
        b.q_end = r + chunk < T ? r + chunk : T;
        f->fn(&b, scr);
    }
    int diff = 0;
    for (int64_t i = 0; i < T; i++) {
        diff += memcmp(o1 + i * h.ldo, qkv + i * h.ld, sizeof(float) * (size_t)HD) != 0;
        diff += memcmp(h.qkv + i * h.ld + HD, qkv + i * h.ld + HD,
                       sizeof(float) * (size_t)(h.ld - HD)) != 0;
    }
    CHECK(diff == 0, "%s: O over Q T=%lld HD=%lld %s drop=%s chunk %lld: %d rows differ", f->name,
          (long long)T, (long long)HD, causal ? "causal" : "full", drop_name(drop),
          (long long)chunk, diff);
    free(o1);
    free(qkv);
    free(scr);
    head_free(&h);
}

/* Section 5: B = 1 (the head-major layout is the KV cache's, one
 * sequence), H heads of (T, HD) from a packed (T, 3 H HD + 5) buffer, and
 * the same heads with keys and values head-major, (H, T, 2 HD), queries
 * through q_rows. */
static void check_layer_packing(const mha__kernels *k, const char *name, int64_t T, int64_t H,
                                int64_t HD, bool causal, bool philox) {
    const int64_t E = H * HD, ld = 3 * E + 5;
    float *qkv = malloc(sizeof(float) * (size_t)(T * ld)), *kv = malloc(sizeof(float) * (size_t)(H * T * 2 * HD));
    float *o[2][2], *lse[2][2];
    REQUIRE(qkv && kv, "alloc");
    test_fill(qkv, (size_t)(T * ld), 21);
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++) {
            memcpy(kv + (h * T + t) * 2 * HD, qkv + t * ld + E + h * HD, sizeof(float) * (size_t)HD);
            memcpy(kv + (h * T + t) * 2 * HD + HD, qkv + t * ld + 2 * E + h * HD, sizeof(float) * (size_t)HD);
        }
    for (int th = 0; th < 2; th++) {
        REQUIRE(mha_runtime_set_threads(th ? 3 : 1) == MHA_OK, "threads");
        for (int lay = 0; lay < 2; lay++) {
            mha__attention_desc d;
            mha__attention_desc_init(&d, 1, T, H, HD);
            d.kernels = k;
            d.causal = causal;
            if (philox) {
                d.dropout = MHA_DROPOUT_PHILOX;
                d.p = 0.1;
                d.philox_seed = 77;
                d.philox_offset = 2;
            }
            if (lay == 0) { /* the packed buffer: the layer copies the heads */
                d.qkv = qkv;
                d.ld_qkv = ld;
                d.k_base = E;
                d.v_base = 2 * E;
                d.head_stride = HD;
            } else { /* head-major keys and values, read in place */
                d.qkv = kv;
                d.ld_qkv = 2 * HD;
                d.head_stride = T * 2 * HD;
                d.v_base = HD;
                d.q_rows = qkv;
                d.ld_q_rows = ld;
            }
            o[th][lay] = malloc(sizeof(float) * (size_t)(T * E));
            lse[th][lay] = malloc(sizeof(float) * (size_t)(H * T));
            REQUIRE(o[th][lay] && lse[th][lay], "alloc");
            d.o = o[th][lay];
            d.ldo = E;
            d.lse = lse[th][lay];
            const size_t ws_size = mha__attention_workspace(&d);
            void *ws = malloc(ws_size);
            REQUIRE(ws_size > 0 && ws, "workspace");
            REQUIRE(mha__attention_forward(&d, ws, ws_size) == MHA_OK, "layer: %s", mha_last_error());
            free(ws);
        }
    }
    for (int th = 0; th < 2; th++)
        for (int lay = 0; lay < 2; lay++) {
            if (th == 0 && lay == 0) continue;
            CHECK(memcmp(o[0][0], o[th][lay], sizeof(float) * (size_t)(T * E)) == 0 &&
                      memcmp(lse[0][0], lse[th][lay], sizeof(float) * (size_t)(H * T)) == 0,
                  "[%s] layer T %lld H %lld HD %lld %s%s: %s on %d thread(s) gives packed heads' bits on 1",
                  name, (long long)T, (long long)H, (long long)HD, causal ? "causal" : "full",
                  philox ? ", philox" : "", lay ? "head-major in place" : "packed heads", th ? 3 : 1);
        }
    for (int th = 0; th < 2; th++)
        for (int lay = 0; lay < 2; lay++) free(o[th][lay]), free(lse[th][lay]);
    free(qkv), free(kv);
}

/* A layer's Philox words (philox_words.h: the fused kernels' philox_rows,
 * which computes rounds 0-2 partly in scalars and the lanes' products on
 * even lanes) against mha__philox4x32_10 on random counters and keys, the
 * row lanes wrapping at 2^32 included. */
typedef void philox_words_fn(uint32_t j4, uint32_t row0, uint64_t stream, uint64_t seed, uint32_t *w);
static void test_philox_words(const char *name, philox_words_fn *words, int vw) {
    int bad = 0;
    for (int t = 0; t < 4000; t++) {
        const uint64_t seed = t < 4 ? (t & 1 ? ~0ull : 0) : rng_u64();
        const uint64_t stream = t < 4 ? (t & 2 ? ~0ull : 0) : rng_u64();
        const uint32_t j4 = (uint32_t)rng_u64();
        const uint32_t row0 = t % 7 == 0 ? 0xfffffff8u + (uint32_t)(t % 5) : (uint32_t)rng_u64();
        uint32_t w[4 * 16];
        words(j4, row0, stream, seed, w);
        const uint32_t k[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
        for (int l = 0; l < vw; l++) {
            const uint32_t c[4] = {j4, row0 + (uint32_t)l, (uint32_t)stream, (uint32_t)(stream >> 32)};
            uint32_t want[4];
            mha__philox4x32_10(c, k, want);
            for (int i = 0; i < 4; i++) bad += w[i * vw + l] != want[i];
        }
    }
    CHECK(bad == 0, "%s: %d Philox words differ from mha__philox4x32_10", name, bad);
}

int main(void) {
    bool avx2 = false, avx512 = false;
    int gen16 = -1; /* index of the emulated AVX-512 kernel in fast[] */
    /* The CPU's kernel sets, from the dispatch (which asks the CPU once),
     * each named: the test never switches the active ones. */
    const mha__kernels *k_avx2 = mha__kernels_get(MHA_ISA_AVX2);
    const mha__kernels *k_avx512 = mha__kernels_get(MHA_ISA_AVX512);
    avx2 = k_avx2 != NULL;
    avx512 = k_avx512 != NULL;
#if defined(MHA_HAVE_AVX2_KERNELS)
    if (avx2) {
        fast[n_fast++] = (fast_kernel){"avx2", k_avx2->attn_fwd, k_avx2->attn_fwd_scratch, 0, 0, -1};
#if MHA_TEST_EMULATIONS
        /* the AVX-512 tunables on the AVX2 layer, then on the emulated
         * AVX-512 layer: lane-wise ops, so the same bits */
        const int w32 = n_fast++;
        fast[w32] = (fast_kernel){"avx2w32", mha__attn_fwd_avx2w32,
                                  mha__attn_fwd_scratch_avx2w32, 0, 0, -1};
        gen16 = n_fast++;
        fast[gen16] = (fast_kernel){"gen16", mha__attn_fwd_gen16, mha__attn_fwd_scratch_gen16, 0,
                                    0, w32};
#endif
    }
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
    if (avx512) /* the real thing: must give the emulation's bits */
        fast[n_fast++] = (fast_kernel){"avx512", k_avx512->attn_fwd, k_avx512->attn_fwd_scratch,
                                       0, 0, gen16};
    else if (MHA_TEST_EMULATIONS)
        printf("AVX-512 kernel compiled, but this CPU lacks AVX-512 F/BW/DQ/VL: tested through "
               "its emulation (gen16) only\n");
    else
        CHECK(0, AVX512_UNTESTED);
#else
    printf("AVX-512 kernel not compiled: not tested\n");
#endif
    if (!avx2) printf("AVX2/FMA kernels not available: testing the reference only\n");

    test_philox();
#if defined(MHA_HAVE_AVX2_KERNELS)
    if (avx2) {
        test_vexp("avx2", vexp_array_avx2, NULL, vexpn_array_avx2);
#if MHA_TEST_EMULATIONS
        test_vexp("gen16", vexp_array_gen16, vexp_array_avx2, vexpn_array_gen16);
        test_philox_words("gen16", mha__philox_words_gen16, 16);
        test_philox_words("avx2w32", mha__philox_words_avx2w32, 8);
#endif
    }
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
    if (avx512) {
        test_vexp("avx512", vexp_array_avx512, vexp_array_avx2, vexpn_array_avx512);
        test_philox_words("avx512", mha__philox_words_avx512, 16);
    }
#endif
    (void)avx512;
    (void)gen16;

    /* Under AddressSanitizer the long rows (T = 1024, where the naive
     * double oracle costs the most) are left to the other builds: the
     * sub-ranges below still reach the last rows of a T = 1024 head, and
     * the tiles' loops are the same from T = 200 on. */
#if defined(__SANITIZE_ADDRESS__)
    const int64_t t_max = 300;
    printf("sanitizer build: full heads of T > %lld are left to the other builds\n",
           (long long)t_max);
#else
    const int64_t t_max = 1024;
#endif
    static const int64_t Ts[] = {1, 2, 5, 7, 63, 64, 65, 127, 200, 1024};
    static const int64_t HDs[] = {1, 2, 3, 7, 8, 15, 16, 17, 64, 65, 128};
    const int nT = (int)(sizeof Ts / sizeof Ts[0]), nH = (int)(sizeof HDs / sizeof HDs[0]);

    /* every shape, full range, causal and not, with lse */
    for (int ti = 0; ti < nT; ti++)
        for (int hi = 0; hi < nH; hi++)
            for (int c = 0; c < 2; c++) {
                const int64_t T = Ts[ti], HD = HDs[hi];
                if (T > t_max) continue;
                const bool big = T * T * HD > 200 * 200 * 128;
                const float qmul = (ti + hi) % 3 == 0 ? 4.0f : 1.0f; /* sharper softmax */
                check_case(T, HD, (ti + hi) % 4, c == 1, MHA_DROP_NONE, 0.0, 0, T, qmul,
                           !big || c == 1);
            }
    /* sub-ranges */
    static const int64_t ranges[][3] = {{200, 0, 1},    {200, 199, 200}, {200, 17, 101},
                                        {200, 64, 128}, {65, 1, 64},     {1024, 500, 531},
                                        {1024, 1000, 1024}, {127, 30, 31}, {7, 2, 5}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (int c = 0; c < 2; c++)
            for (int hi = 0; hi < 3; hi++) {
                static const int64_t hds[3] = {2, 64, 17};
                check_case(ranges[r][0], hds[hi], 1, c == 1, MHA_DROP_NONE, 0.0, ranges[r][1],
                           ranges[r][2], 2.0f, true);
            }
    /* 2^k-ish row strides (ld = 1024 or 3072 floats): the kernel copies
     * such K/V tiles to contiguous scratch first */
    for (int c = 0; c < 2; c++) {
        check_case(300, 64, 1024 - 3 * 64, c == 1, MHA_DROP_NONE, 0.0, 0, 300, 2.0f, true);
        check_case(130, 17, 1024 - 3 * 17, c == 1, MHA_DROP_NONE, 0.0, 0, 130, 1.0f, true);
        check_case(200, 128, 3072 - 3 * 128, c == 1, MHA_DROP_PHILOX, 0.1, 50, 190, 1.0f, true);
    }
    /* dropout */
    static const int64_t dT[] = {1, 5, 63, 64, 65, 200, 1024};
    static const int64_t dHD[] = {2, 7, 16, 64, 65};
    for (int ti = 0; ti < 7; ti++)
        for (int hi = 0; hi < 5; hi++)
            for (int c = 0; c < 2; c++)
                for (int m = 0; m < 2; m++) {
                    const int64_t T = dT[ti], HD = dHD[hi];
                    if ((T == 1024 && HD != 64) || T > t_max) continue;
                    const mha__drop_mode dm = m == 0 ? MHA_DROP_BITMASK : MHA_DROP_PHILOX;
                    const double p = (ti + hi) % 2 ? 0.1 : 0.5;
                    int64_t qb = 0, qe = T;
                    if ((ti + hi + c) % 3 == 2 && T > 4) {
                        qb = T / 3;
                        qe = T - T / 4;
                    }
                    check_case(T, HD, 3, c == 1, dm, p, qb, qe, 1.0f, T <= 200);
                }
    for (int kf = 0; kf < n_fast; kf++) {
        const fast_kernel *f = &fast[kf];
        check_determinism(f, 1, 3, true, MHA_DROP_NONE);
        check_determinism(f, 70, 2, true, MHA_DROP_NONE);
        check_determinism(f, 200, 64, true, MHA_DROP_NONE);
        check_determinism(f, 200, 17, false, MHA_DROP_NONE);
        check_determinism(f, 257, 65, true, MHA_DROP_PHILOX);
        check_determinism(f, 130, 16, true, MHA_DROP_BITMASK);
        check_determinism(f, 300, 64, false, MHA_DROP_PHILOX);
        check_generator(f, 70, 5, true);
        check_generator(f, 33, 64, false);
        check_alias(f, 200, 64, true, MHA_DROP_NONE, 64);
        check_alias(f, 130, 3, true, MHA_DROP_PHILOX, 17);
        check_alias(f, 100, 65, false, MHA_DROP_BITMASK, 100);
        check_alias(f, 77, 1, false, MHA_DROP_NONE, 5);
    }
    /* the layer's packed heads (section 5), ragged last blocks; at 1
     * thread every case copies (13 and 25 heads: whole heads; 3 and 2:
     * shared blocks); at 3 threads 25 heads copy whole heads, 3 heads of
     * 18 blocks share them, 13 and 2 heads of 9 blocks read in place */
    const mha__kernels *tables[2] = {k_avx2, k_avx512};
    static const char *const tnames[2] = {"avx2", "avx512"};
    for (int t = 0; t < 2; t++) {
        if (!tables[t]) continue;
        check_layer_packing(tables[t], tnames[t], 517, 13, 16, true, false);
        check_layer_packing(tables[t], tnames[t], 520, 25, 8, false, false);
        check_layer_packing(tables[t], tnames[t], 1100, 3, 64, true, true);
        check_layer_packing(tables[t], tnames[t], 515, 2, 17, false, false);
    }
    for (int kf = 0; kf < n_fast; kf++)
        printf("max |o_%s - o_ref| / max(1, max|o_ref|) = %.3g, max |lse diff| = %.3g\n",
               fast[kf].name, fast[kf].worst, fast[kf].worst_lse);
    printf("max |o_ref - o_naive| = %.3g, max |lse diff| = %.3g\n", worst_ref, worst_lse_ref);
    printf("%d passed, %d failed\n", t_pass, t_fail);
    return t_fail == 0 ? 0 : 1;
}
