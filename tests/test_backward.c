/* test_backward.c — the modules' backward pass, independently of PyTorch
 * (tests/torch_grad_diff.py compares with autograd):
 *   - finite differences of an oracle forward written here in double (the
 *     book's formulas, Philox dropout replayed from its seed) against the
 *     library's gradients on the reference kernels, for every class and the
 *     simplified attention;
 *   - the forward that records a tape gives the plain forward's bits;
 *   - every kernel set the CPU has against the reference kernels;
 *   - gradients accumulate, zero_grad clears, failures change nothing;
 *   - 1, 2 and 3 threads give the same bits (with OpenMP). */
#include "generator/generator.h"
#include "kernels/philox.h"
#include "test_util.h"

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* ---- an oracle forward in double ---------------------------------------- */

typedef struct {
    mha_module *m;
    double *p[32]; /* parameter i's values, in double (perturbed by the FD) */
    size_t np;
    int philox;    /* dropout with the Philox mask below */
    uint64_t seed, offset;
} oracle;

static const double *param(const oracle *o, const char *name) {
    for (size_t i = 0; i < o->np; i++) {
        mha_param p;
        mha_params_get(mha_module_params(o->m), i, &p);
        if (strcmp(p.name, name) == 0) return o->p[i];
    }
    fprintf(stderr, "oracle: no parameter %s\n", name);
    exit(1);
}

/* One attention head over double q, k, v rows (stride ld), output rows
 * (stride ldo). */
static void head(const oracle *o, const double *q, const double *k, const double *v, int64_t ld,
                 double *out, int64_t ldo, int64_t T, int64_t HD, int causal, uint64_t stream) {
    const mha_config *c = mha_module_config_of(o->m);
    const double scale = 1.0 / sqrt((double)HD);
    const double p = c->dropout;
    const uint32_t thr = mha__philox_keep_threshold(p);
    const double ds = (double)mha__dropout_scale(p);
    double *w = malloc((size_t)T * sizeof *w);
    for (int64_t i = 0; i < T; i++) {
        const int64_t n = causal ? i + 1 : T;
        double mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double s = 0.0;
            for (int64_t d = 0; d < HD; d++) s += q[i * ld + d] * k[j * ld + d];
            w[j] = s * scale;
            if (w[j] > mx) mx = w[j];
        }
        for (int64_t j = 0; j < n; j++) sum += (w[j] = exp(w[j] - mx));
        for (int64_t j = 0; j < n; j++) {
            w[j] /= sum;
            if (o->philox && p > 0.0)
                w[j] = mha__philox_keep(o->seed, (o->offset << 32) + stream, (uint64_t)i,
                                        (uint64_t)j, thr) ? w[j] * ds : 0.0;
        }
        for (int64_t d = 0; d < HD; d++) {
            double acc = 0.0;
            for (int64_t j = 0; j < n; j++) acc += w[j] * v[j * ld + d];
            out[i * ldo + d] = acc;
        }
    }
    free(w);
}

/* y = module(x) in double; x (B, T, D_in) in double. */
static void oracle_forward(const oracle *o, const double *x, double *y, int64_t B, int64_t T) {
    const mha_config *c = mha_module_config_of(o->m);
    const int64_t Din = c->d_in, Dout = c->d_out;
    const int64_t H = c->kind >= MHA_MULTI_HEAD_ATTENTION_WRAPPER ? c->num_heads : 1;
    const int wrapper = c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER;
    const int causal = c->kind >= MHA_CAUSAL_ATTENTION;
    const int64_t blocks = wrapper ? H : 1, W = mha_config_output_width(c);
    const int64_t HD = c->kind == MHA_MULTI_HEAD_ATTENTION ? Dout / H : Dout;
    double *qkv = calloc((size_t)(T * 3 * Dout), sizeof(double));
    double *ctx = calloc((size_t)(T * W), sizeof(double));
    static const char *const role[3] = {"W_query", "W_key", "W_value"};
    for (int64_t b = 0; b < B; b++) {
        const double *xb = x + b * T * Din;
        for (int64_t blk = 0; blk < blocks; blk++) {
            for (int r = 0; r < 3; r++) {
                char name[96], pre[40] = "";
                if (wrapper) snprintf(pre, sizeof pre, "heads.%lld.", (long long)blk);
                const int v1 = c->kind == MHA_SELF_ATTENTION_V1;
                snprintf(name, sizeof name, "%s%s%s", pre, role[r], v1 ? "" : ".weight");
                const double *w = param(o, name), *bias = NULL;
                snprintf(name, sizeof name, "%s%s.bias", pre, role[r]);
                if (c->qkv_bias && !v1) bias = param(o, name);
                for (int64_t t = 0; t < T; t++)
                    for (int64_t e = 0; e < Dout; e++) {
                        double s = bias ? bias[e] : 0.0;
                        for (int64_t i = 0; i < Din; i++)
                            s += xb[t * Din + i] * (v1 ? w[i * Dout + e] : w[e * Din + i]);
                        qkv[t * 3 * Dout + r * Dout + e] = s;
                    }
            }
            const int64_t nh = wrapper ? 1 : H;
            for (int64_t h = 0; h < nh; h++) {
                const int64_t hh = wrapper ? blk : h;
                head(o, qkv + h * HD, qkv + Dout + h * HD, qkv + 2 * Dout + h * HD, 3 * Dout,
                     ctx + hh * HD, W, T, HD, causal, (uint64_t)(b * H + hh));
            }
        }
        double *yb = y + b * T * W;
        if (c->kind == MHA_MULTI_HEAD_ATTENTION) {
            const double *w = param(o, "out_proj.weight"), *bias = param(o, "out_proj.bias");
            for (int64_t t = 0; t < T; t++)
                for (int64_t e = 0; e < Dout; e++) {
                    double s = bias[e];
                    for (int64_t i = 0; i < Dout; i++) s += ctx[t * W + i] * w[e * Dout + i];
                    yb[t * W + e] = s;
                }
        } else {
            memcpy(yb, ctx, (size_t)(T * W) * sizeof(double));
        }
    }
    free(qkv);
    free(ctx);
}

static double loss(const oracle *o, const double *x, const float *r, int64_t B, int64_t T) {
    const int64_t n = B * T * mha_config_output_width(mha_module_config_of(o->m));
    double *y = malloc((size_t)n * sizeof *y), L = 0.0;
    oracle_forward(o, x, y, B, T);
    for (int64_t i = 0; i < n; i++) L += y[i] * (double)r[i];
    free(y);
    return L;
}

/* Central difference of L at v[i] (in place, restored). */
static double fd(const oracle *o, double *v, size_t i, const double *x, const float *r, int64_t B,
                 int64_t T) {
    const double h = 1e-5 * (fabs(v[i]) > 1.0 ? fabs(v[i]) : 1.0), v0 = v[i];
    v[i] = v0 + h;
    const double lp = loss(o, x, r, B, T);
    v[i] = v0 - h;
    const double lm = loss(o, x, r, B, T);
    v[i] = v0;
    return (lp - lm) / (2.0 * h);
}

static int close_to(double got, double want, double scale) {
    return fabs(got - want) <= 2e-4 * scale + 1e-4 * fabs(want);
}

/* Library gradients (reference kernels) vs finite differences of the oracle. */
static void check_fd(mha_config c, int64_t B, int64_t T, int philox) {
    const char *name = mha_kind_name(c.kind);
    mha_module *m = NULL;
    REQUIRE(mha_module_create_seeded(&c, 7, &m) == MHA_OK, "%s: %s", name, mha_last_error());
    const int64_t W = mha_config_output_width(&c), nx = B * T * c.d_in, ny = B * T * W;
    float *x = malloc((size_t)nx * sizeof *x), *r = malloc((size_t)ny * sizeof *r);
    float *y = malloc((size_t)ny * sizeof *y), *dx = malloc((size_t)nx * sizeof *dx);
    test_fill(x, (size_t)nx, 11);
    test_fill(r, (size_t)ny, 12);
    mha_forward_opts opts = {.training = philox, .rng = MHA_DROPOUT_RNG_PHILOX,
                             .philox_seed = 99, .philox_offset = 3};
    mha_tape *tape = NULL;
    REQUIRE(mha_tape_create(&tape) == MHA_OK, "tape");
    REQUIRE(mha_module_forward_tape(m, y, x, B, T, &opts, tape, NULL, 0) == MHA_OK, "%s forward: %s",
            name, mha_last_error());
    REQUIRE(mha_params_zero_grad(mha_module_params(m)) == MHA_OK, "zero_grad");
    REQUIRE(mha_module_backward(m, tape, dx, x, r, NULL, 0) == MHA_OK, "%s backward: %s", name,
            mha_last_error());

    oracle o = {.m = m, .np = mha_params_count(mha_module_params(m)), .philox = philox, .seed = 99,
                .offset = 3};
    for (size_t i = 0; i < o.np; i++) {
        mha_param p;
        mha_params_get(mha_module_params(m), i, &p);
        o.p[i] = malloc(p.numel * sizeof(double));
        for (size_t j = 0; j < p.numel; j++) o.p[i][j] = p.data[j];
    }
    double *xd = malloc((size_t)nx * sizeof *xd);
    for (int64_t i = 0; i < nx; i++) xd[i] = x[i];

    /* the oracle's y against the library's (sanity of the oracle itself) */
    double *yd = malloc((size_t)ny * sizeof *yd), ymax = 0.0, yerr = 0.0;
    oracle_forward(&o, xd, yd, B, T);
    for (int64_t i = 0; i < ny; i++) {
        ymax = fmax(ymax, fabs(yd[i]));
        yerr = fmax(yerr, fabs(yd[i] - (double)y[i]));
    }
    CHECK(yerr <= 1e-5 * fmax(ymax, 1.0), "%s: oracle forward differs from the library by %g", name, yerr);

    /* a few elements of every parameter, and of x */
    for (size_t i = 0; i < o.np; i++) {
        mha_param g;
        REQUIRE(mha_params_grad(mha_module_params(m), i, &g) == MHA_OK, "grad %zu", i);
        double gmax = 0.0;
        for (size_t j = 0; j < g.numel; j++) gmax = fmax(gmax, fabs((double)g.data[j]));
        for (size_t s = 0; s < 5 && s < g.numel; s++) {
            const size_t j = (s * 7919u) % g.numel;
            const double want = fd(&o, o.p[i], j, xd, r, B, T);
            CHECK(close_to(g.data[j], want, fmax(gmax, 1e-3)),
                  "%s B=%lld T=%lld%s: grad.%s[%zu] = %.9g, finite difference %.9g", name,
                  (long long)B, (long long)T, philox ? " philox" : "", g.name, j, (double)g.data[j], want);
        }
    }
    double dxmax = 0.0;
    for (int64_t i = 0; i < nx; i++) dxmax = fmax(dxmax, fabs((double)dx[i]));
    for (int64_t s = 0; s < 8 && s < nx; s++) {
        const size_t j = (size_t)(s * 104729) % (size_t)nx;
        const double want = fd(&o, xd, j, xd, r, B, T);
        CHECK(close_to(dx[j], want, fmax(dxmax, 1e-3)), "%s B=%lld T=%lld%s: dx[%zu] = %.9g, finite difference %.9g",
              name, (long long)B, (long long)T, philox ? " philox" : "", j, (double)dx[j], want);
    }
    for (size_t i = 0; i < o.np; i++) free(o.p[i]);
    free(xd);
    free(yd);
    free(x);
    free(r);
    free(y);
    free(dx);
    mha_tape_free(tape);
    mha_module_free(m);
}

static void check_simple_fd(void) {
    const int64_t T = 5, D = 3;
    float x[15], dc[15], dx[15];
    test_fill(x, 15, 3);
    test_fill(dc, 15, 4);
    REQUIRE(mha_simple_attention_backward(dx, x, dc, T, D) == MHA_OK, "%s", mha_last_error());
    for (int i = 0; i < 15; i++) {
        double L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            double xd[15];
            for (int k = 0; k < 15; k++) xd[k] = x[k];
            xd[i] += sgn ? -1e-5 : 1e-5;
            L[sgn] = 0.0;
            for (int64_t a = 0; a < T; a++) {
                double s[5], mx = -INFINITY, sum = 0.0;
                for (int64_t b = 0; b < T; b++) {
                    s[b] = 0.0;
                    for (int64_t d = 0; d < D; d++) s[b] += xd[a * D + d] * xd[b * D + d];
                    mx = fmax(mx, s[b]);
                }
                for (int64_t b = 0; b < T; b++) sum += (s[b] = exp(s[b] - mx));
                for (int64_t d = 0; d < D; d++) {
                    double c = 0.0;
                    for (int64_t b = 0; b < T; b++) c += s[b] / sum * xd[b * D + d];
                    L[sgn] += c * (double)dc[a * D + d];
                }
            }
        }
        const double want = (L[0] - L[1]) / 2e-5;
        CHECK(close_to(dx[i], want, 1.0), "simple attention dx[%d] = %.9g, finite difference %.9g", i,
              (double)dx[i], want);
    }
    CHECK(mha_simple_attention_backward(dx, x, dc, 0, D) == MHA_ERR_SHAPE, "T = 0");
    x[4] = NAN;
    CHECK(mha_simple_attention_backward(dx, x, dc, T, D) == MHA_ERR_NONFINITE, "NaN in x");
}

/* ---- the tape, errors, accumulation ------------------------------------- */

/* Batches the backward cuts into slices whose last one is shorter: with
 * fewer (batch, head) pairs it may cut its heads into more key chunks, so
 * its workspace can exceed the first slice's (MultiHeadAttention(8 heads),
 * B = 3, T = 600 once failed with "needs 991104 bytes of workspace, got
 * 971904"). Each batch's dx against its rows' backward one element at a
 * time. quick: the last two shapes only (a quarter of the work, which the
 * reference kernels' attention is: 30 of test_backward --quick's 34 s under
 * valgrind went to all four). */
static void check_short_last_slice(bool quick) {
    static const int64_t shapes[][3] = {{3, 600, 8}, {3, 600, 3}, {5, 300, 5}, {3, 520, 2}};
    for (size_t s = quick ? 2 : 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t B = shapes[s][0], T = shapes[s][1], H = shapes[s][2], D = 2 * H, n = B * T * D;
        const mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION, D, D, T, 0.0, H, 0);
        mha_module *m = NULL;
        REQUIRE(mha_module_create_seeded(&c, 3, &m) == MHA_OK, "%s", mha_last_error());
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        float *dy = malloc((size_t)n * sizeof *dy), *dx = malloc((size_t)n * sizeof *dx);
        float *dx1 = malloc((size_t)n * sizeof *dx1);
        REQUIRE(x && y && dy && dx && dx1, "out of memory");
        test_fill(x, (size_t)n, 21);
        test_fill(dy, (size_t)n, 22);
        mha_tape *tape = NULL;
        REQUIRE(mha_tape_create(&tape) == MHA_OK, "tape");
        const size_t ws_size = mha_module_backward_workspace_size(m, B, T);
        void *ws = malloc(ws_size);
        REQUIRE(ws_size > 0 && ws, "backward workspace of (%lld, %lld)", (long long)B, (long long)T);
        REQUIRE(mha_module_forward_tape(m, y, x, B, T, NULL, tape, NULL, 0) == MHA_OK, "%s",
                mha_last_error());
        CHECK(mha_module_backward(m, tape, dx, x, dy, ws, ws_size) == MHA_OK,
              "backward of (%lld, %lld) with %lld heads in its own workspace size: %s", (long long)B,
              (long long)T, (long long)H, mha_last_error());
        const int64_t row = T * D;
        for (int64_t b = 0; b < B; b++) {
            REQUIRE(mha_module_forward_tape(m, y, x + b * row, 1, T, NULL, tape, NULL, 0) == MHA_OK,
                    "%s", mha_last_error());
            REQUIRE(mha_module_backward(m, tape, dx1 + b * row, x + b * row, dy + b * row, NULL, 0) ==
                        MHA_OK,
                    "%s", mha_last_error());
        }
        double err = 0, scale = 0;
        for (int64_t i = 0; i < n; i++) {
            err = fmax(err, fabs((double)dx[i] - (double)dx1[i]));
            scale = fmax(scale, fabs((double)dx1[i]));
        }
        CHECK(scale > 0 && err <= 1e-5 * scale,
              "(%lld, %lld, %lld heads): dx differs from one element at a time by %g of %g",
              (long long)B, (long long)T, (long long)H, err, scale);
        mha_tape_free(tape);
        mha_module_free(m);
        free(ws);
        free(x), free(y), free(dy), free(dx), free(dx1);
    }
}

static void check_api(void) {
    const mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION, 8, 8, 16, 0.25, 2, 1);
    const int64_t B = 2, T = 9, n = B * T * 8;
    mha_module *m = NULL, *other = NULL;
    REQUIRE(mha_module_create_seeded(&c, 1, &m) == MHA_OK, "%s", mha_last_error());
    REQUIRE(mha_module_create_seeded(&c, 1, &other) == MHA_OK, "%s", mha_last_error());
    float x[144], y[144], y2[144], dy[144], dx[144], dx2[144];
    test_fill(x, (size_t)n, 5);
    test_fill(dy, (size_t)n, 6);
    mha_tape *tape = NULL;
    REQUIRE(mha_tape_create(&tape) == MHA_OK, "tape");
    CHECK(mha_tape_bytes(tape) == 0, "empty tape holds bytes");
    CHECK(mha_module_backward(m, tape, dx, x, dy, NULL, 0) == MHA_ERR_ARGUMENT,
          "backward of an empty tape");

    /* the taped forward's y is the plain forward's, bit for bit: eval,
     * PyTorch's mask, Philox */
    for (int mode = 0; mode < 3; mode++) {
        mha_generator *g1 = NULL, *g2 = NULL;
        mha_generator_create(77, &g1);
        mha_generator_create(77, &g2);
        mha_forward_opts o1 = {.training = mode > 0, .rng = mode == 2 ? MHA_DROPOUT_RNG_PHILOX
                                                                      : MHA_DROPOUT_RNG_TORCH,
                               .generator = g1, .philox_seed = 5};
        mha_forward_opts o2 = o1;
        o2.generator = g2;
        REQUIRE(mha_module_forward_ex(m, y, x, B, T, &o1, NULL, 0) == MHA_OK, "%s", mha_last_error());
        REQUIRE(mha_module_forward_tape(m, y2, x, B, T, &o2, tape, NULL, 0) == MHA_OK, "%s",
                mha_last_error());
        CHECK(memcmp(y, y2, sizeof(float) * (size_t)n) == 0, "taped forward differs, mode %d", mode);
        CHECK(mha_generator_random64(g1) == mha_generator_random64(g2), "taped forward drew differently, mode %d", mode);
        mha_generator_free(g1);
        mha_generator_free(g2);
    }
    CHECK(mha_tape_bytes(tape) > 0, "tape holds nothing");

    /* accumulation: two steps give twice one (exact: x + x); the backward
     * consumes the tape */
    mha_param g;
    const mha_forward_opts ph = {.training = 1, .rng = MHA_DROPOUT_RNG_PHILOX, .philox_seed = 5};
    REQUIRE(mha_params_zero_grad(mha_module_params(m)) == MHA_OK, "zero_grad");
    REQUIRE(mha_module_forward_tape(m, y, x, B, T, &ph, tape, NULL, 0) == MHA_OK, "%s", mha_last_error());
    REQUIRE(mha_module_backward(m, tape, dx, x, dy, NULL, 0) == MHA_OK, "%s", mha_last_error());
    CHECK(mha_module_backward(m, tape, dx, x, dy, NULL, 0) == MHA_ERR_ARGUMENT,
          "a consumed tape served a second backward");
    REQUIRE(mha_params_find_grad(mha_module_params(m), "W_value.weight", &g) == MHA_OK, "find_grad");
    float once[64];
    memcpy(once, g.data, sizeof once);
    REQUIRE(mha_module_forward_tape(m, y, x, B, T, &ph, tape, NULL, 0) == MHA_OK, "%s", mha_last_error());
    REQUIRE(mha_module_backward(m, tape, dx2, x, dy, NULL, 0) == MHA_OK, "%s", mha_last_error());
    int twice = 1;
    for (int i = 0; i < 64; i++) twice &= g.data[i] == 2.0f * once[i];
    CHECK(twice, "gradients do not accumulate");
    CHECK(memcmp(dx, dx2, sizeof(float) * (size_t)n) == 0, "dx is not overwritten ([out])");
    REQUIRE(mha_module_forward_tape(m, y, x, B, T, &ph, tape, NULL, 0) == MHA_OK, "%s", mha_last_error());
    CHECK(mha_module_backward(m, tape, NULL, x, dy, NULL, 0) == MHA_OK, "dx NULL: %s", mha_last_error());
    REQUIRE(mha_module_forward_tape(m, y, x, B, T, &ph, tape, NULL, 0) == MHA_OK, "%s", mha_last_error());

    /* failures change nothing */
    float before[64];
    memcpy(before, g.data, sizeof before);
    CHECK(mha_module_backward(other, tape, dx, x, dy, NULL, 0) == MHA_ERR_ARGUMENT,
          "another module's tape accepted");
    float bad[144];
    memcpy(bad, dy, sizeof bad);
    bad[17] = NAN;
    memcpy(dx2, dx, sizeof dx2);
    CHECK(mha_module_backward(m, tape, dx, x, bad, NULL, 0) == MHA_ERR_NONFINITE, "NaN in dy");
    CHECK(strstr(mha_last_error(), "NaN") != NULL, "detail: %s", mha_last_error());
    char small[64] __attribute__((aligned(64)));
    CHECK(mha_module_backward(m, tape, dx, x, dy, small, sizeof small) == MHA_ERR_WORKSPACE,
          "small workspace");
    CHECK(memcmp(before, g.data, sizeof before) == 0, "a failed backward changed a gradient");
    CHECK(memcmp(dx, dx2, sizeof dx2) == 0, "a failed backward changed dx");
    const size_t need = mha_module_backward_workspace_size(m, B, T);
    void *ws = aligned_alloc(64, (need + 63) / 64 * 64);
    CHECK(need > 0 && mha_module_backward(m, tape, dx2, x, dy, ws, need) == MHA_OK,
          "caller's workspace: %s", mha_last_error());
    free(ws);
    REQUIRE(mha_params_zero_grad(mha_module_params(m)) == MHA_OK, "zero_grad");
    int zero = 1;
    for (int i = 0; i < 64; i++) zero &= g.data[i] == 0.0f;
    CHECK(zero, "zero_grad left a value");
    CHECK(mha_params_find_grad(mha_module_params(m), "nope", &g) == MHA_ERR_MISSING, "unknown grad name");
    /* the guard is the parameter set's id, not the module's address or
     * configuration: a module of the same configuration created where a
     * freed one lay does not take its tape */
    REQUIRE(mha_module_forward_tape(other, y, x, B, T, &ph, tape, NULL, 0) == MHA_OK, "%s", mha_last_error());
    mha_module_free(other);
    REQUIRE(mha_module_create_seeded(&c, 1, &other) == MHA_OK, "%s", mha_last_error());
    CHECK(mha_module_backward(other, tape, dx, x, dy, NULL, 0) == MHA_ERR_ARGUMENT,
          "a freed module's tape accepted by a new one");
    mha_tape_free(tape);
    mha_module_free(m);
    mha_module_free(other);
}

/* ---- kernels and threads ------------------------------------------------ */

/* Gradients (all parameters, then dx) of MultiHeadAttention / the wrapper
 * at a shape that splits keys into chunks, for the active kernels. */
static float *all_grads(mha_kind kind, int mode, size_t *count) {
    const mha_config c = kind == MHA_MULTI_HEAD_ATTENTION
                             ? test_config(kind, 32, 32, 200, 0.2, 4, 1)
                             : test_config(kind, 16, 8, 200, 0.2, 2, 1);
    const int64_t B = 1, T = 197, W = mha_config_output_width(&c);
    mha_module *m = NULL;
    REQUIRE(mha_module_create_seeded(&c, 3, &m) == MHA_OK, "%s", mha_last_error());
    float *x = malloc(sizeof(float) * (size_t)(B * T * c.d_in)), *dy = malloc(sizeof(float) * (size_t)(B * T * W));
    float *y = malloc(sizeof(float) * (size_t)(B * T * W));
    test_fill(x, (size_t)(B * T * c.d_in), 8);
    test_fill(dy, (size_t)(B * T * W), 9);
    mha_generator *g = NULL;
    mha_generator_create(42, &g);
    const mha_forward_opts o = {.training = mode > 0,
                                .rng = mode == 2 ? MHA_DROPOUT_RNG_PHILOX : MHA_DROPOUT_RNG_TORCH,
                                .generator = g, .philox_seed = 17};
    mha_tape *tape = NULL;
    mha_tape_create(&tape);
    REQUIRE(mha_module_forward_tape(m, y, x, B, T, &o, tape, NULL, 0) == MHA_OK, "%s", mha_last_error());
    const size_t np = (size_t)mha_params_scalars(mha_module_params(m)), nx = (size_t)(B * T * c.d_in);
    float *out = malloc(sizeof(float) * (np + nx));
    REQUIRE(mha_params_zero_grad(mha_module_params(m)) == MHA_OK, "zero_grad");
    REQUIRE(mha_module_backward(m, tape, out + np, x, dy, NULL, 0) == MHA_OK, "%s", mha_last_error());
    size_t at = 0;
    for (size_t i = 0; i < mha_params_count(mha_module_params(m)); i++) {
        mha_param p;
        mha_params_grad(mha_module_params(m), i, &p);
        memcpy(out + at, p.data, p.numel * sizeof(float));
        at += p.numel;
    }
    *count = np + nx;
    mha_generator_free(g);
    mha_tape_free(tape);
    mha_module_free(m);
    free(x);
    free(dy);
    free(y);
    return out;
}

static void check_kernels_and_threads(void) {
    static const char *const isas[] = {"avx2", "avx512"};
    static const mha_kind kinds[] = {MHA_MULTI_HEAD_ATTENTION, MHA_MULTI_HEAD_ATTENTION_WRAPPER};
    for (int k = 0; k < 2; k++)
        for (int mode = 0; mode < 3; mode++) {
            size_t n, n2;
            REQUIRE(TEST_USE_ISA("ref"), "ref kernels");
            float *ref = all_grads(kinds[k], mode, &n);
            double mx = 0.0;
            for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs((double)ref[i]));
            for (int s = 0; s < 2; s++) {
                if (!TEST_USE_ISA(isas[s])) continue;
                float *got = all_grads(kinds[k], mode, &n2);
                double err = 0.0;
                for (size_t i = 0; i < n; i++) err = fmax(err, fabs((double)got[i] - (double)ref[i]));
                CHECK(err <= 1e-4 * mx, "%s %s mode %d: gradients differ from ref by %g (max %g)",
                      isas[s], mha_kind_name(kinds[k]), mode, err, mx);
#if defined(MHA_HAVE_OPENMP)
                for (int t = 1; t <= 3; t++) {
                    omp_set_num_threads(t);
                    float *again = all_grads(kinds[k], mode, &n2);
                    CHECK(memcmp(again, got, n * sizeof(float)) == 0,
                          "%s %s mode %d: %d threads give other bits", isas[s],
                          mha_kind_name(kinds[k]), mode, t);
                    free(again);
                }
                omp_set_num_threads(2);
#endif
                free(got);
            }
            free(ref);
        }
    REQUIRE(mha_runtime_set_isa("auto") == MHA_OK, "auto");
}

int main(int argc, char **argv) {
    /* --quick (scripts/valgrind.sh): without the 520-row finite differences,
     * most of the test's time in its double oracle, and with two of
     * check_short_last_slice's four shapes; every build's ctest runs all */
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    REQUIRE(argc == 1 || quick, "usage: test_backward [--quick]");
    REQUIRE(TEST_USE_ISA("ref"), "the reference kernels");
    check_fd(test_config(MHA_SELF_ATTENTION_V1, 3, 2, 0, 0.0, 1, 0), 1, 6, 0);
    check_fd(test_config(MHA_SELF_ATTENTION_V2, 4, 3, 0, 0.0, 1, 1), 1, 5, 0);
    check_fd(test_config(MHA_CAUSAL_ATTENTION, 5, 4, 8, 0.3, 1, 0), 2, 7, 0);
    check_fd(test_config(MHA_CAUSAL_ATTENTION, 5, 4, 8, 0.3, 1, 1), 2, 7, 1);
    check_fd(test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 2, 6, 0.5, 3, 1), 2, 6, 1);
    check_fd(test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 4, 1, 6, 0.0, 2, 0), 1, 6, 0);
    check_fd(test_config(MHA_MULTI_HEAD_ATTENTION, 6, 6, 10, 0.1, 3, 1), 2, 9, 1);
    check_fd(test_config(MHA_MULTI_HEAD_ATTENTION, 6, 6, 10, 0.0, 3, 0), 2, 9, 0);
    check_fd(test_config(MHA_MULTI_HEAD_ATTENTION, 4, 2, 4, 0.0, 2, 1), 3, 1, 0);
    /* 3 x 520 rows: the backward runs over two slices of the batch, the
     * second's Philox streams numbered from batch element 2 */
    if (!quick) check_fd(test_config(MHA_MULTI_HEAD_ATTENTION, 4, 4, 520, 0.3, 2, 1), 3, 520, 1);
    check_simple_fd();
    check_short_last_slice(quick);
    check_api();
    check_kernels_and_threads();
    return TEST_END("test_backward");
}
