/* test_elementwise.c — chapter 4's elementwise kernels (kernels.h,
 * elementwise_body.h) against the reference entries, by name:
 *   1. vf_tanh (GELU's tanh, simd_exp.h) against double tanh in ULP, on
 *      each layer (AVX2, the 16-lane emulation of AVX-512, AVX-512 where the
 *      CPU has it), the layers' bits equal, and its special values;
 *   2. LayerNorm, bias + GELU and the residual add with dropout of every
 *      fast kernel set (avx2, gen16 = the AVX-512 body on the emulation,
 *      avx512 where the CPU has it) against the reference table's: row
 *      lengths 1, 7, 15, 17, 768, 769, strided rows, in place, NaN and inf
 *      inputs, tails computed as the vector body computes them, the
 *      residual add bit for bit (the same three IEEE operations);
 *   3. the backwards of LayerNorm and GELU of every fast kernel set against
 *      the reference's (in double) within the tolerances stated there, the
 *      same row lengths, tails as the vector body computes them, GELU's
 *      lane-wise bits equal across the layers;
 *   4. mha__sgemm_epilogue (the GEMM's tiles, then the kernels per tile)
 *      equals the GEMM followed by the kernels over the whole result, for
 *      tiled shapes and the one-row GEMV, in every kernel set;
 *   5. vd_exp_neg (the cross-entropy's double exp, simd_exp.h) against expl
 *      in ULP of double on [-750, 0] on each layer, the layers' bits equal,
 *      its special values;
 *   6. the cross-entropy row of every fast kernel set against the
 *      reference's: the loss within 1e-12, the gradient within 1 ULP of
 *      float, row lengths around the vector widths and GPT-2's 50257,
 *      ignored rows, the loss alone, in place, NaN, -inf and logits 700
 *      to 800 below the largest; the emulation's bits the AVX-512 kernel's;
 *   7. the reference's dot_rows and every table's colsum (and the
 *      emulation's) against the plain loops, bit for bit.
 * The thread-count independence of the drivers and of the GPT forward is
 * tests/test_threads.c's. */
#include "kernels/drivers.h"
#include "isa_variants.h"
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    mha__layernorm_fn layernorm;
    mha__bias_gelu_fn bias_gelu;
    mha__residual_add_fn residual_add;
    mha__layernorm_backward_fn layernorm_backward;
    mha__gelu_backward_fn gelu_backward;
    mha__xent_row_fn xent_row;
} kset;

/* The elementwise entries of a table. */
static kset kset_of(const char *name, const mha__kernels *k) {
    return (kset){name, k->layernorm, k->bias_gelu, k->residual_add, k->layernorm_backward, k->gelu_backward,
                  k->xent_row};
}

static const float NAN_F = NAN, INF_F = INFINITY;

/* Same bits, or both NaN. */
static bool same(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

static float *falloc(size_t n) {
    float *p = malloc(n * sizeof(float) + 64);
    REQUIRE(p != NULL, "alloc");
    return p;
}

/* ---- 1. vf_tanh ------------------------------------------------------------ */
#if defined(MHA_HAVE_AVX2_KERNELS)
typedef void (*varray_fn)(const float *x, float *y, size_t n);

static void test_vtanh(const char *name, varray_fn f, varray_fn other, uint32_t step) {
    enum { CH = 4096 };
    static float x[CH], y[CH], y2[CH];
    double worst = 0.0;
    float worst_x = 0.0f;
    size_t count = 0, mismatches = 0;
    /* every step-th positive float up to 12 (tanh is 1 in float beyond
     * ~9), and their negatives: all magnitudes from the subnormals up */
    const float hi = 12.0f;
    uint32_t bend;
    memcpy(&bend, &hi, 4);
    for (uint32_t b = 1; b <= bend;) {
        size_t n = 0;
        for (; n + 1 < CH && b <= bend; n += 2, b += step) {
            memcpy(&x[n], &b, 4);
            x[n + 1] = -x[n];
        }
        const size_t n16 = (n + 15) & ~(size_t)15;
        for (size_t i = n; i < n16; i++) x[i] = 0.0f;
        f(x, y, n16);
        if (other) {
            other(x, y2, n16);
            for (size_t i = 0; i < n; i++) mismatches += !same(y[i], y2[i]);
        }
        for (size_t i = 0; i < n; i++) {
            const double u = test_ulp_error(y[i], tanh((double)x[i]));
            if (u > worst) worst = u, worst_x = x[i];
        }
        count += n;
    }
    printf("vtanh %s: max error %.3f ULP at x = %.9g over %zu points in [-12, 12]\n", name, worst,
           (double)worst_x, count);
    CHECK(worst <= 4.0, "vtanh %s max error %.3f ULP > 4", name, worst);
    if (other) CHECK(mismatches == 0, "vtanh %s: %zu results differ from the AVX2 layer's", name, mismatches);

    float sx[16] = {0.0f, -0.0f, INF_F, -INF_F, NAN_F, 1e30f, -1e30f, 88.0f, -100.0f, FLT_MIN, -0x1p-140f};
    float sy[16];
    f(sx, sy, 16);
    CHECK(sy[0] == 0.0f && !signbit(sy[0]) && sy[1] == 0.0f && signbit(sy[1]), "vtanh(+-0) = %g, %g",
          (double)sy[0], (double)sy[1]);
    CHECK(sy[2] == 1.0f && sy[3] == -1.0f, "vtanh(+-inf) = %g, %g", (double)sy[2], (double)sy[3]);
    CHECK(isnan(sy[4]), "vtanh(nan) = %g", (double)sy[4]);
    CHECK(sy[5] == 1.0f && sy[6] == -1.0f && sy[7] == 1.0f && sy[8] == -1.0f, "vtanh(large) not +-1");
    CHECK(sy[9] == FLT_MIN && sy[10] == -0x1p-140f, "vtanh(tiny) = %g, %g", (double)sy[9], (double)sy[10]);
}
#endif

/* ---- 2. the kernels against the reference -------------------------------- */

static const int64_t LENS[] = {1, 7, 15, 17, 768, 769};
enum { NLENS = 6, ROWS = 5 };

static void fill_row(float *x, int64_t n, float offset, float spread) {
    for (int64_t i = 0; i < n; i++) x[i] = offset + spread * rng_uniform();
}

static void test_layernorm(const kset *k, const kset *ref) {
    for (int li = 0; li < NLENS; li++) {
        const int64_t E = LENS[li], ldx = E + 3, ldy = E + 5;
        float *x = falloc((size_t)(ROWS * ldx)), *y = falloc((size_t)(ROWS * ldy)),
              *yr = falloc((size_t)(ROWS * ldy)), *xi = falloc((size_t)(ROWS * ldx));
        float *scale = falloc((size_t)E), *shift = falloc((size_t)E);
        fill_row(scale, E, 1.0f, 0.5f);
        fill_row(shift, E, 0.0f, 0.5f);
        /* rows: centred, offset by 50 (the mean's rounding matters), tiny
         * spread (var near eps), a NaN, an inf */
        const float offs[ROWS] = {0.0f, 50.0f, -3.0f, 1.0f, 0.0f}, spr[ROWS] = {2.0f, 1.0f, 1e-3f, 1.0f, 1.0f};
        for (int r = 0; r < ROWS; r++) fill_row(x + r * ldx, E, offs[r], spr[r]);
        x[3 * ldx + E / 2] = NAN_F;
        x[4 * ldx + E - 1] = INF_F;
        ref->layernorm(yr, ldy, x, ldx, ROWS, E, scale, shift);
        k->layernorm(y, ldy, x, ldx, ROWS, E, scale, shift);
        double worst = 0.0;
        int bad_special = 0;
        for (int r = 0; r < ROWS; r++)
            for (int64_t i = 0; i < E; i++) {
                const float a = y[r * ldy + i], b = yr[r * ldy + i];
                if (r >= 3 && E > 1) {
                    bad_special += !(isnan(a) && isnan(b)); /* the whole row NaN */
                    continue;
                }
                if (r >= 3) { /* E == 1: the row is its NaN/inf only: NaN */
                    bad_special += isnan(b) != isnan(a);
                    continue;
                }
                const double err = fabs((double)a - (double)b) / (1.0 + fabs((double)b));
                if (err > worst || isnan(err)) worst = isnan(err) ? (double)INFINITY : err;
            }
        CHECK(worst <= 2e-6, "[%s] layernorm E %lld: max relative error %.3g vs ref", k->name, (long long)E, worst);
        CHECK(bad_special == 0, "[%s] layernorm E %lld: %d NaN/inf rows differ from ref", k->name, (long long)E,
              bad_special);
        /* in place, and one row at a time: the same bits */
        memcpy(xi, x, (size_t)(ROWS * ldx) * sizeof(float));
        k->layernorm(xi, ldx, xi, ldx, ROWS, E, scale, shift);
        int diff = 0;
        for (int r = 0; r < ROWS; r++) {
            k->layernorm(yr + r * ldy, ldy, x + r * ldx, ldx, 1, E, scale, shift);
            for (int64_t i = 0; i < E; i++)
                diff += !same(xi[r * ldx + i], y[r * ldy + i]) + !same(yr[r * ldy + i], y[r * ldy + i]);
        }
        CHECK(diff == 0, "[%s] layernorm E %lld: in place or row by row differs (%d)", k->name, (long long)E, diff);
        free(x), free(y), free(yr), free(xi), free(scale), free(shift);
    }
}

/* gelu values to test: random in [-8, 8] with the specials at the start */
static void fill_gelu(float *x, int64_t n) {
    static const float sp[] = {NAN, INFINITY, -INFINITY, 1e20f, -1e20f, 1e-30f, -0.0f, 0.0f, -3.0f, 40.0f, -12.0f};
    for (int64_t i = 0; i < n; i++) x[i] = i < 11 ? sp[i] : 8.0f * rng_uniform();
}

static void test_gelu(const kset *k, const kset *ref, const kset *twin) {
    for (int li = 0; li < NLENS; li++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const int64_t n = LENS[li], ldx = n + 2, ldy = n + 9;
            float *x = falloc((size_t)(ROWS * ldx)), *y = falloc((size_t)(ROWS * ldy)), *yr = falloc((size_t)(ROWS * ldy)),
                  *yt = falloc((size_t)(ROWS * ldy)), *bias = falloc((size_t)n);
            fill_gelu(x, ROWS * ldx);
            fill_row(bias, n, 0.0f, 0.5f);
            const float *b = with_bias ? bias : NULL;
            ref->bias_gelu(yr, ldy, x, ldx, ROWS, n, b);
            k->bias_gelu(y, ldy, x, ldx, ROWS, n, b);
            int bad = 0;
            double worst = 0.0;
            for (int r = 0; r < ROWS; r++)
                for (int64_t i = 0; i < n; i++) {
                    const float v = b ? x[r * ldx + i] + b[i] : x[r * ldx + i];
                    const float got = y[r * ldy + i], want = yr[r * ldy + i];
                    if (!isfinite(want) || !isfinite(got)) {
                        bad += !same(got, want);
                        continue;
                    }
                    /* tanh's few ULP, scaled by 0.5 |v|, plus the roundings */
                    const double tol = 3e-7 * fabs((double)v) + 3e-7 * fabs((double)want) + 1e-37;
                    const double err = fabs((double)got - (double)want);
                    if (err > tol) bad++;
                    if (err / tol > worst) worst = err / tol;
                }
            CHECK(bad == 0, "[%s] gelu n %lld bias %d: %d values off the reference (worst %.2f x tolerance)", k->name,
                  (long long)n, with_bias, bad, worst);
            /* element by element (every one a tail) and in place: the same bits;
             * the twin layer (same operations lane by lane): the same bits */
            memcpy(yt, x, (size_t)(ROWS * ldx) * sizeof(float));
            k->bias_gelu(yt, ldx, yt, ldx, ROWS, n, b);
            int diff = 0;
            for (int r = 0; r < ROWS; r++)
                for (int64_t i = 0; i < n; i++) {
                    float one;
                    k->bias_gelu(&one, 1, x + r * ldx + i, 1, 1, 1, b ? b + i : NULL);
                    diff += !same(one, y[r * ldy + i]) + !same(yt[r * ldx + i], y[r * ldy + i]);
                }
            if (twin) {
                twin->bias_gelu(yt, ldy, x, ldx, ROWS, n, b);
                for (int r = 0; r < ROWS; r++)
                    for (int64_t i = 0; i < n; i++) diff += !same(yt[r * ldy + i], y[r * ldy + i]);
            }
            CHECK(diff == 0, "[%s] gelu n %lld: tails, in place or the %s layer differ (%d)", k->name, (long long)n,
                  twin ? twin->name : "-", diff);
            free(x), free(y), free(yr), free(yt), free(bias);
        }
}

static void test_residual(const kset *k, const kset *ref) {
    for (int li = 0; li < NLENS; li++)
        for (int mode = 0; mode < 4; mode++) { /* bit 0: bias; bit 1: dropout */
            const int64_t n = LENS[li], ldx = n + 1, ldy = n + 4, kld = n + 3;
            float *x = falloc((size_t)(ROWS * ldx)), *xr = falloc((size_t)(ROWS * ldx)), *y = falloc((size_t)(ROWS * ldy)),
                  *bias = falloc((size_t)n);
            const size_t nbits = (size_t)(5 + ROWS * kld);
            uint64_t *bits = calloc((nbits + 63) / 64, sizeof(uint64_t));
            REQUIRE(bits != NULL, "alloc");
            for (size_t w = 0; w < (nbits + 63) / 64; w++) bits[w] = rng_u64();
            fill_row(x, ROWS * ldx, 0.0f, 3.0f);
            fill_row(y, ROWS * ldy, 0.0f, 3.0f);
            fill_row(bias, n, 0.0f, 1.0f);
            y[0] = NAN_F;
            if (n > 2) y[ldy + 2] = -INF_F, x[2] = -0.0f, y[2] = -0.0f;
            memcpy(xr, x, (size_t)(ROWS * ldx) * sizeof(float));
            const mha__keep_view kv = {bits, 5, kld, 1.0f / 0.9f};
            const float *b = mode & 1 ? bias : NULL;
            const mha__keep_view *keep = mode & 2 ? &kv : NULL;
            ref->residual_add(xr, ldx, y, ldy, ROWS, n, b, keep);
            k->residual_add(x, ldx, y, ldy, ROWS, n, b, keep);
            int diff = 0;
            for (int r = 0; r < ROWS; r++)
                for (int64_t i = 0; i < n; i++) diff += !same(x[r * ldx + i], xr[r * ldx + i]);
            CHECK(diff == 0, "[%s] residual n %lld bias %d dropout %d: %d values differ from the reference", k->name,
                  (long long)n, mode & 1, mode >> 1, diff);
            free(x), free(xr), free(y), free(bias), free(bits);
        }
}

/* ---- 3. the backwards ----------------------------------------------------- */

/* LayerNorm's backward: dx (accumulated into random values) and dy * xhat
 * against the reference's. The fast body takes the moments and sums in
 * float, the reference in double: xhat may differ by what the forward's
 * test allows (2e-6 of 1 + |xhat|), and each value's error is measured
 * against the size of what it is made of: |dx0| + rstd (|dxhat| + mean
 * |dxhat| + (1 + |xhat|) mean |dxhat xhat|) for dx, |dy| (1 + |xhat|) for
 * dy * xhat; at most 2e-6 of it. */
static void test_layernorm_backward(const kset *k, const kset *ref) {
    double worst_all = 0.0, worst_s_all = 0.0;
    for (int li = 0; li < NLENS; li++) {
        const int64_t E = LENS[li], n = ROWS * E;
        float *x = falloc((size_t)n), *dy = falloc((size_t)n), *dx = falloc((size_t)n), *dxr = falloc((size_t)n);
        float *s = falloc((size_t)n), *sr = falloc((size_t)n), *scale = falloc((size_t)E);
        fill_row(scale, E, 1.0f, 0.5f);
        const float offs[ROWS] = {0.0f, 50.0f, -3.0f, 1.0f, 0.0f}, spr[ROWS] = {2.0f, 1.0f, 1e-3f, 1.0f, 10.0f};
        for (int r = 0; r < ROWS; r++) fill_row(x + r * E, E, offs[r], spr[r]);
        fill_row(dy, n, 0.0f, 1.0f);
        fill_row(dx, n, 0.0f, 0.1f);
        memcpy(dxr, dx, (size_t)n * sizeof(float));
        ref->layernorm_backward(dxr, sr, dy, x, ROWS, E, scale);
        k->layernorm_backward(dx, s, dy, x, ROWS, E, scale);
        double worst = 0.0, worst_s = 0.0;
        for (int r = 0; r < ROWS; r++) {
            float mf, rf;
            mha__layernorm_moments_ref(x + r * E, E, &mf, &rf);
            const double mean = (double)mf, rstd = (double)rf;
            double m1 = 0.0, m2 = 0.0;
            for (int64_t i = 0; i < E; i++) {
                const double xh = ((double)x[r * E + i] - mean) * rstd, d = (double)dy[r * E + i] * (double)scale[i];
                m1 += fabs(d) / (double)E;
                m2 += fabs(d * xh) / (double)E;
            }
            for (int64_t i = 0; i < E; i++) {
                const int64_t j = r * E + i;
                const double xh = ((double)x[j] - mean) * rstd, d = (double)dy[j] * (double)scale[i];
                const double size = fabs((double)dxr[j]) + rstd * (fabs(d) + m1 + (1.0 + fabs(xh)) * m2);
                const double e = fabs((double)dx[j] - (double)dxr[j]) / size;
                const double es = fabs((double)s[j] - (double)sr[j]) / (fabs((double)dy[j]) * (1.0 + fabs(xh)));
                if (!(e <= worst)) worst = isnan(e) ? (double)INFINITY : e;
                if (!(es <= worst_s)) worst_s = isnan(es) ? (double)INFINITY : es;
            }
        }
        worst_all = worst > worst_all ? worst : worst_all;
        worst_s_all = worst_s > worst_s_all ? worst_s : worst_s_all;
        CHECK(worst <= 2e-6, "[%s] layernorm backward E %lld: dx error %.3g of its size", k->name, (long long)E, worst);
        CHECK(worst_s <= 2e-6, "[%s] layernorm backward E %lld: dy * xhat error %.3g", k->name, (long long)E, worst_s);
        /* one row at a time: the same bits */
        int diff = 0;
        memcpy(dxr, dx, (size_t)n * sizeof(float));
        k->layernorm_backward(dxr, sr, dy, x, ROWS, E, scale);
        for (int r = 0; r < ROWS; r++) k->layernorm_backward(dx + r * E, s + r * E, dy + r * E, x + r * E, 1, E, scale);
        for (int64_t j = 0; j < n; j++) diff += !same(dx[j], dxr[j]) + !same(s[j], sr[j]);
        CHECK(diff == 0, "[%s] layernorm backward E %lld: row by row differs (%d)", k->name, (long long)E, diff);
        free(x), free(dy), free(dx), free(dxr), free(s), free(sr), free(scale);
    }
    printf("layernorm backward %s: max error %.3g (dx), %.3g (dy * xhat) of the sizes\n", k->name, worst_all,
           worst_s_all);
}

/* GELU's backward d *= gelu'(f): against the reference's double, the error
 * of gelu' at most 4e-7 (relative to 1, the size of its terms: it
 * crosses zero near f = -0.75) plus 2e-7 of gelu' itself, times |d|. The
 * specials: NaN stays NaN, large |f| gives 1 and 0 (inf: see
 * elementwise_body.h). Tails and the twin layer: the same bits. */
static void test_gelu_backward(const kset *k, const kset *ref, const kset *twin) {
    double worst_all = 0.0;
    for (int li = 0; li < NLENS; li++) {
        const int64_t n = ROWS * LENS[li];
        float *f = falloc((size_t)n), *d = falloc((size_t)n), *dr = falloc((size_t)n), *dt = falloc((size_t)n);
        fill_gelu(f, n);
        f[1] = 1e30f, f[2] = -1e30f; /* for the specials' inf */
        fill_row(d, n, 0.0f, 2.0f);
        memcpy(dr, d, (size_t)n * sizeof(float));
        memcpy(dt, d, (size_t)n * sizeof(float));
        ref->gelu_backward(dr, f, n);
        k->gelu_backward(d, f, n);
        int bad = 0;
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(f[i])) {
                bad += !isnan(d[i]);
                continue;
            }
            const double g = dt[i] != 0.0f ? (double)dr[i] / (double)dt[i] : 0.0;
            const double tol = (4e-7 + 2e-7 * fabs(g)) * fabs((double)dt[i]) + 1e-37;
            const double err = fabs((double)d[i] - (double)dr[i]);
            if (!(err <= tol)) bad++;
            if (err / tol > worst) worst = err / tol;
        }
        worst_all = worst > worst_all ? worst : worst_all;
        CHECK(bad == 0, "[%s] gelu backward n %lld: %d values off the reference (worst %.2f x tolerance)", k->name,
              (long long)n, bad, worst);
        int diff = 0;
        for (int64_t i = 0; i < n; i++) { /* element by element: every one a tail */
            float one = dt[i];
            k->gelu_backward(&one, f + i, 1);
            diff += !same(one, d[i]);
        }
        if (twin) {
            twin->gelu_backward(dt, f, n);
            for (int64_t i = 0; i < n; i++) diff += !same(dt[i], d[i]);
        }
        CHECK(diff == 0, "[%s] gelu backward n %lld: tails or the %s layer differ (%d)", k->name, (long long)n,
              twin ? twin->name : "-", diff);
        free(f), free(d), free(dr), free(dt);
    }
    printf("gelu backward %s: max error %.2f x the tolerance\n", k->name, worst_all);
}

/* ---- 4. the GEMM's epilogue ------------------------------------------------ */

static void test_epilogue(const char *isa, int64_t M, int64_t N, int64_t K, bool drop) {
    const mha__kernels *k = mha__kernels_active();
    float *A = falloc((size_t)(M * K)), *W = falloc((size_t)(N * K)), *bias = falloc((size_t)N);
    float *c1 = falloc((size_t)(M * N)), *c2 = falloc((size_t)(M * N)), *x1 = falloc((size_t)(M * N)),
          *x2 = falloc((size_t)(M * N));
    uint64_t *bits = calloc((size_t)(M * N + 127) / 64, sizeof(uint64_t));
    REQUIRE(bits != NULL, "alloc");
    for (int64_t w = 0; w < (M * N + 127) / 64; w++) bits[w] = rng_u64();
    fill_row(A, M * K, 0.0f, 1.0f);
    fill_row(W, N * K, 0.0f, 0.2f);
    fill_row(bias, N, 0.0f, 1.0f);
    fill_row(x1, M * N, 0.0f, 1.0f);
    memcpy(x2, x1, (size_t)(M * N) * sizeof(float));
    /* GELU: tiles through the kernel = the GEMM, then the kernel on all of C */
    const mha__gemm_epilogue g = {.kind = MHA_EPI_GELU, .bias = bias};
    CHECK(mha__sgemm_epilogue(M, N, K, A, K, W, K, c1, N, &g) == MHA_OK, "sgemm_epilogue");
    CHECK(mha__sgemm(false, true, M, N, K, 1.0f, A, K, W, K, 0.0f, c2, N) == MHA_OK, "sgemm");
    k->bias_gelu(c2, N, c2, N, M, N, bias);
    CHECK(memcmp(c1, c2, (size_t)(M * N) * sizeof(float)) == 0, "[%s] GEMM %lldx%lldx%lld + gelu epilogue differs",
          isa, (long long)M, (long long)N, (long long)K);
    /* residual: x1 += drop(A W^T + bias) through the tiles */
    mha__gemm_epilogue e = {.kind = MHA_EPI_RESIDUAL, .bias = bias, .x = x1, .ldx = N};
    const mha__keep_view kv = {bits, 3, N, 1.25f};
    if (drop) e.keep = kv;
    CHECK(mha__sgemm_epilogue(M, N, K, A, K, W, K, c1, N, &e) == MHA_OK, "sgemm_epilogue");
    CHECK(mha__sgemm(false, true, M, N, K, 1.0f, A, K, W, K, 0.0f, c2, N) == MHA_OK, "sgemm");
    k->residual_add(x2, N, c2, N, M, N, bias, drop ? &kv : NULL);
    CHECK(memcmp(x1, x2, (size_t)(M * N) * sizeof(float)) == 0,
          "[%s] GEMM %lldx%lldx%lld + residual epilogue (dropout %d) differs", isa, (long long)M, (long long)N,
          (long long)K, drop);
    free(A), free(W), free(bias), free(c1), free(c2), free(x1), free(x2), free(bits);
}

/* ---- 5. vd_exp_neg ---------------------------------------------------------- */
typedef void (*vdarray_fn)(const double *x, double *y, size_t n);

/* |got - want| in ULP of double at want (want > 0 normal or subnormal). */
static double dulp_error(double got, long double want) {
    if (want == 0.0L) return got == 0.0 ? 0.0 : (double)INFINITY;
    const double w = (double)want;
    const double ulp = nextafter(w, INFINITY) - w;
    return (double)(fabsl((long double)got - want) / (long double)ulp);
}

static void test_vdexp(const char *name, vdarray_fn f, vdarray_fn other) {
    enum { CH = 4096 };
    static double x[CH], y[CH], y2[CH];
    double worst = 0.0, worst_x = 0.0;
    size_t count = 0, mismatches = 0;
    /* 2^20 points: evenly over [-750, 0] with a random jitter, then the
     * magnitudes below 1 down to 1e-300 on a log scale */
    const size_t total = (size_t)1 << 20;
    for (size_t done = 0; done < total; done += CH) {
        for (size_t i = 0; i < CH; i++) {
            const size_t g = done + i;
            const double u = ((double)rng_uniform() + 1.0) * 0.5; /* [0, 1) */
            x[i] = g < total / 2 ? -750.0 * ((double)g + u) / (double)(total / 2)
                                 : -pow(10.0, -300.0 * ((double)(g - total / 2) + u) / (double)(total / 2));
        }
        f(x, y, CH);
        if (other) {
            other(x, y2, CH);
            mismatches += (size_t)(memcmp(y, y2, sizeof y) != 0);
        }
        for (size_t i = 0; i < CH; i++) {
            const long double want = expl((long double)x[i]);
            if (want < (long double)DBL_MIN) { /* subnormal results: within one subnormal step */
                const double err = fabs((double)((long double)y[i] - want)) / 0x1p-1074;
                if (err > 1.0 && err > worst) worst = err, worst_x = x[i];
                continue;
            }
            const double e = dulp_error(y[i], want);
            if (e > worst) worst = e, worst_x = x[i];
        }
        count += CH;
    }
    printf("vd_exp_neg %s: max error %.3f ULP (double) at x = %.17g over %zu points in [-750, 0]\n", name, worst,
           worst_x, count);
    CHECK(worst <= 1.0, "vd_exp_neg %s max error %.3f ULP > 1 at x = %.17g", name, worst, worst_x);
    if (other) CHECK(mismatches == 0, "vd_exp_neg %s: %zu blocks differ from the AVX2 layer's", name, mismatches);

    double sx[8] = {0.0, -0.0, -INFINITY, NAN, -746.0, -1e300, -0x1p-1074, 5.0};
    double sy[8];
    f(sx, sy, 8);
    CHECK(sy[0] == 1.0 && sy[1] == 1.0, "vd_exp_neg(+-0) = %g, %g", sy[0], sy[1]);
    CHECK(sy[2] == 0.0 && sy[4] == 0.0 && sy[5] == 0.0, "vd_exp_neg(-inf, -746, -1e300) = %g, %g, %g", sy[2],
          sy[4], sy[5]);
    CHECK(isnan(sy[3]), "vd_exp_neg(nan) = %g", sy[3]);
    CHECK(sy[6] == 1.0, "vd_exp_neg(-tiny) = %.17g", sy[6]);
    CHECK(sy[7] == 1.0, "vd_exp_neg(5) = %g: outside the domain, clamped to 0", sy[7]);
}

/* ---- 6. the cross-entropy row --------------------------------------------- */

static void xent_case(const kset *k, const kset *ref, const kset *twin, int64_t V, int32_t y, int kind) {
    float *z = falloc((size_t)V), *d = falloc((size_t)V), *dr = falloc((size_t)V), *d2 = falloc((size_t)V);
    for (int64_t j = 0; j < V; j++) z[j] = 4.0f * rng_uniform();
    if (kind == 1) z[V / 2] = NAN_F; /* NaN: loss and dz NaN */
    if (kind == 2)                   /* -inf: exp 0 (the target's: loss inf) */
        for (int64_t j = 0; j < V; j += 3) z[j] = -INF_F;
    if (kind == 3) /* the others 700 to 800 below the largest: exp near and under DBL_MIN */
        for (int64_t j = 0; j < V; j++) z[j] = j == (y >= 0 ? y : 0) ? 0.0f : -750.0f + 50.0f * rng_uniform();
    const double inv = 1.0 / 3.0;
    const double lr = ref->xent_row(dr, z, V, y, inv);
    const double l = k->xent_row(d, z, V, y, inv);
    const double l0 = k->xent_row(NULL, z, V, y, inv);
    memcpy(d2, z, (size_t)V * sizeof(float));
    const double li = k->xent_row(d2, d2, V, y, inv); /* in place */
    char what[96];
    snprintf(what, sizeof what, "xent_row %s V %lld y %d case %d", k->name, (long long)V, (int)y, kind);
    const bool nan_row = kind == 1;
    if (nan_row) {
        CHECK(isnan(l) && isnan(lr), "%s: loss %g (reference %g), want NaN", what, l, lr);
    } else if (y < 0) {
        CHECK(l == 0.0 && lr == 0.0, "%s: an ignored row's loss %g", what, l);
    } else {
        CHECK((isnan(l) && isnan(lr)) || l == lr || fabs(l - lr) <= 1e-12 * (1.0 + fabs(lr)),
              "%s: loss %.17g, reference %.17g", what, l, lr);
    }
    CHECK(same((float)l, (float)l0) && same((float)l, (float)li) && (isnan(l) || (l == l0 && l == li)),
          "%s: the loss alone or in place differs (%.17g %.17g %.17g)", what, l, l0, li);
    double worst = 0.0;
    size_t bad = 0;
    for (int64_t j = 0; j < V; j++) {
        if (!same(d[j], d2[j])) bad++;
        if (nan_row || y < 0) {
            if (!same(d[j], dr[j]) && !(d[j] == 0.0f && dr[j] == 0.0f)) bad++;
            continue;
        }
        const double u = test_ulp_error(d[j], (double)dr[j]);
        if (u > worst) worst = u;
    }
    CHECK(bad == 0, "%s: %zu gradients differ in place or from the reference's NaN / 0", what, bad);
    CHECK(worst <= 1.0, "%s: gradient %.2f ULP from the reference's", what, worst);
    if (twin) { /* the same body on another layer: the same bits */
        const double lt = twin->xent_row(d2, z, V, y, inv);
        size_t differ = 0;
        for (int64_t j = 0; j < V; j++) differ += !same(d[j], d2[j]); /* NaN's payload aside */
        CHECK(same((float)l, (float)lt) && (isnan(l) || l == lt) && differ == 0, "%s: differs from %s's bits",
              what, twin->name);
    }
    free(z), free(d), free(dr), free(d2);
}

static void test_xent(const kset *k, const kset *ref, const kset *twin) {
    static const int64_t lens[] = {1, 7, 8, 15, 16, 17, 33, 769, 50257};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        const int64_t V = lens[i];
        for (int kind = 0; kind < 4; kind++) {
            xent_case(k, ref, twin, V, (int32_t)(V - 1), kind); /* the target in the tail */
            xent_case(k, ref, twin, V, (int32_t)(V / 3), kind);
            if (kind == 0) xent_case(k, ref, twin, V, -1, kind); /* ignored */
        }
    }
}

/* dot_rows against the plain loop, one row at a time, bit for bit: rows
 * below, at and past the kernel's groups of eight, head dims with a tail,
 * strides apart; values of mixed signs and magnitudes, and products that
 * cancel, so that summing in another order (or in float) would show. */
static void test_dot_rows(const mha__kernels *k) {
    static const int64_t nrows[] = {0, 1, 7, 8, 9, 16, 21}, ns[] = {0, 1, 5, 64, 67};
    enum { LDA = 80, LDB = 75, MAXR = 21 };
    float a[MAXR * LDA], b[MAXR * LDB], out[MAXR + 1];
    fill_row(a, MAXR * LDA, 0.0f, 3.0f);
    fill_row(b, MAXR * LDB, 0.5f, 2.0f);
    for (int i = 0; i < MAXR * LDA; i += 7) a[i] *= 1e4f;
    for (int r = 0; r < MAXR; r += 2) { /* 1e30 - 1e30 first: summed from the end, the rest is lost */
        a[r * LDA] = 1e15f, b[r * LDB] = 1e15f;
        a[r * LDA + 1] = -1e15f, b[r * LDB + 1] = 1e15f;
    }
    for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t rows = nrows[ri], n = ns[ni];
            out[rows] = 42.0f; /* past the last row: untouched */
            k->dot_rows(out, a, LDA, b, LDB, rows, n);
            for (int64_t r = 0; r < rows; r++) {
                double s = 0.0;
                for (int64_t i = 0; i < n; i++) s += (double)a[r * LDA + i] * (double)b[r * LDB + i];
                CHECK(memcmp(&out[r], &(float){(float)s}, sizeof(float)) == 0,
                      "dot_rows: rows %lld n %lld: row %lld %.9g, the plain loop's %.9g", (long long)rows,
                      (long long)n, (long long)r, (double)out[r], s);
            }
            CHECK(out[rows] == 42.0f, "dot_rows: rows %lld n %lld wrote past its rows", (long long)rows,
                  (long long)n);
        }
}

/* colsum against the plain loop, a column at a time, bit for bit: row
 * counts below, at and past the kernel's groups of four, column counts
 * around the vector widths (the scalar tail), strided rows, sums already
 * in s; values of mixed magnitudes, and rows that cancel, so that adding
 * in another order (rows paired, or in float) would show. */
static void test_colsum(const char *name, mha__colsum_fn colsum) {
    static const int64_t nrows[] = {0, 1, 3, 4, 5, 8, 13}, ns[] = {1, 7, 8, 15, 16, 17, 33, 37};
    enum { LDA = 41, MAXR = 13, MAXN = 37 };
    float a[MAXR * LDA];
    double s[MAXN + 1], want[MAXN];
    fill_row(a, MAXR * LDA, 0.0f, 3.0f);
    for (int i = 0; i < MAXR * LDA; i += 5) a[i] *= 1e9f;
    for (int c = 0; c < LDA; c += 3) { /* 1e30 + 1 - 1e30: paired otherwise, the 1 survives */
        a[c] = 1e30f, a[LDA + c] = 1.0f, a[2 * LDA + c] = -1e30f;
        a[5 * LDA + c] = 3e20f, a[6 * LDA + c] = -3e20f;
    }
    for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t rows = nrows[ri], n = ns[ni];
            for (int64_t c = 0; c < n; c++) s[c] = want[c] = 0.25 * (double)c - 1.0;
            s[n] = 42.0; /* past the last column: untouched */
            for (int64_t c = 0; c < n; c++)
                for (int64_t r = 0; r < rows; r++) want[c] += (double)a[r * LDA + c];
            colsum(s, a, rows, n, LDA);
            for (int64_t c = 0; c < n; c++)
                CHECK(memcmp(&s[c], &want[c], sizeof(double)) == 0,
                      "colsum %s: rows %lld n %lld: column %lld %.17g, the plain loop's %.17g", name,
                      (long long)rows, (long long)n, (long long)c, s[c], want[c]);
            CHECK(s[n] == 42.0, "colsum %s: rows %lld n %lld wrote past its columns", name, (long long)rows,
                  (long long)n);
        }
}

int main(void) {
    const mha__kernels *kref = mha__kernels_get(MHA_ISA_REF);
    REQUIRE(kref != NULL, "reference table");
    const kset ref = kset_of("ref", kref);
    test_dot_rows(kref);
    test_colsum("ref", kref->colsum);
#if MHA_TEST_EMULATIONS
    test_colsum("gen16", mha__colsum_gen16);
#endif
    if (mha__kernels_get(MHA_ISA_AVX2)) test_colsum("avx2", mha__kernels_get(MHA_ISA_AVX2)->colsum);
    if (mha__kernels_get(MHA_ISA_AVX512)) test_colsum("avx512", mha__kernels_get(MHA_ISA_AVX512)->colsum);
    kset fast[3];
    int n_fast = 0;
    const mha__kernels *k2 = mha__kernels_get(MHA_ISA_AVX2), *k5 = mha__kernels_get(MHA_ISA_AVX512);
#if MHA_TEST_EMULATIONS
    /* The AVX-512 body on its emulation: portable, tested wherever the
     * build has it. Its elementwise kernels are lane-wise, so they equal
     * AVX2's bits. */
    const kset gen16 = {"gen16", mha__layernorm_gen16, mha__bias_gelu_gen16, mha__residual_add_gen16,
                        mha__layernorm_backward_gen16, mha__gelu_backward_gen16, mha__xent_row_gen16};
    fast[n_fast++] = gen16;
#else
    /* Built without it (MHA_TEST_EMULATIONS=0): only where the real one runs */
    REQUIRE(k5 != NULL, AVX512_UNTESTED);
#endif
    const kset *twin_of_gen16 = NULL;
    kset avx2;
    if (k2) {
        avx2 = kset_of("avx2", k2);
        fast[n_fast++] = avx2;
        twin_of_gen16 = MHA_TEST_EMULATIONS ? &fast[n_fast - 1] : NULL;
    } else {
        printf("no AVX2 kernels here: the reference and the emulated AVX-512 body only\n");
    }
    if (k5)
        fast[n_fast++] = kset_of("avx512", k5);
    else
        printf("no AVX-512 here: its body tested through the emulation (gen16) only\n");

#if defined(MHA_HAVE_AVX2_KERNELS)
    if (k2) {
        test_vtanh("avx2", vtanh_array_avx2, NULL, 37);
#if MHA_TEST_EMULATIONS
        test_vtanh("gen16", vtanh_array_gen16, vtanh_array_avx2, 151); /* emulated: slow */
#if defined(MHA_HAVE_AVX512_KERNELS)
        if (k5) test_vtanh("avx512", vtanh_array_avx512, vtanh_array_gen16, 151);
#endif
#elif defined(MHA_HAVE_AVX512_KERNELS)
        if (k5) test_vtanh("avx512", vtanh_array_avx512, vtanh_array_avx2, 151); /* lane-wise: AVX2's bits */
#endif
    }
#endif
    for (int i = 0; i < n_fast; i++) {
        test_layernorm(&fast[i], &ref);
        test_gelu(&fast[i], &ref, i == 0 ? twin_of_gen16 : NULL);
        test_residual(&fast[i], &ref);
        test_layernorm_backward(&fast[i], &ref);
        test_gelu_backward(&fast[i], &ref, i == 0 ? twin_of_gen16 : NULL);
        test_xent(&fast[i], &ref, NULL);
    }
#if defined(MHA_HAVE_AVX2_KERNELS)
    if (k2) {
        test_vdexp("avx2", vdexp_array_avx2, NULL);
#if MHA_TEST_EMULATIONS
        test_vdexp("gen16", vdexp_array_gen16, NULL);
#if defined(MHA_HAVE_AVX512_KERNELS)
        if (k5) test_vdexp("avx512", vdexp_array_avx512, vdexp_array_gen16);
#endif
#elif defined(MHA_HAVE_AVX512_KERNELS)
        if (k5) test_vdexp("avx512", vdexp_array_avx512, NULL);
#endif
    }
#elif MHA_TEST_EMULATIONS
    test_vdexp("gen16", vdexp_array_gen16, NULL);
#endif
#if MHA_TEST_EMULATIONS
    if (k5) { /* the real AVX-512 kernels give the emulation's bits */
        test_gelu(&fast[n_fast - 1], &ref, &fast[0]);
        float x[3 * 769], y1[3 * 769], y2[3 * 769], s[769], t[769];
        fill_row(x, 3 * 769, 2.0f, 3.0f);
        fill_row(s, 769, 1.0f, 0.3f);
        fill_row(t, 769, 0.0f, 0.3f);
        fast[n_fast - 1].layernorm(y1, 769, x, 769, 3, 769, s, t);
        gen16.layernorm(y2, 769, x, 769, 3, 769, s, t);
        CHECK(memcmp(y1, y2, sizeof y1) == 0, "avx512 layernorm differs from its emulation");
        test_gelu_backward(&fast[n_fast - 1], &ref, &fast[0]);
        float d1[3 * 769], d2[3 * 769], g1[3 * 769], g2[3 * 769];
        fill_row(d1, 3 * 769, 0.0f, 1.0f);
        memcpy(d2, d1, sizeof d1);
        fast[n_fast - 1].layernorm_backward(d1, g1, y1, x, 3, 769, s);
        gen16.layernorm_backward(d2, g2, y1, x, 3, 769, s);
        CHECK(memcmp(d1, d2, sizeof d1) == 0 && memcmp(g1, g2, sizeof g1) == 0,
              "avx512 layernorm backward differs from its emulation");
        test_xent(&fast[n_fast - 1], &ref, &fast[0]);
    }
#else
    if (k5 && k2) { /* GELU and its backward are lane-wise: AVX-512 gives AVX2's bits */
        test_gelu(&fast[n_fast - 1], &ref, &fast[0]);
        test_gelu_backward(&fast[n_fast - 1], &ref, &fast[0]);
    }
#endif

    const char *const isas[] = {"ref", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        if (!TEST_USE_ISA(isas[i])) continue;
        test_epilogue(isas[i], 300, 770, 64, false);
        test_epilogue(isas[i], 300, 770, 64, true);
        test_epilogue(isas[i], 1, 1000, 96, true);
        test_epilogue(isas[i], 1, 1000, 96, false);
        test_epilogue(isas[i], 37, 19, 5, true);
    }
    mha_runtime_set_isa("auto");
    return TEST_END("test_elementwise");
}
