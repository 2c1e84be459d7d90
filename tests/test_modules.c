/* test_modules.c — the module API: configuration errors, forward errors
 * (with y untouched), parameter names, workspace handling, the traced forward
 * against the forward, and thread-count independence. */
#include "mha.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static void expect_config_error(mha_config c, mha_status want, const char *keyword) {
    mha_module *m = (mha_module *)1;
    mha_status st = mha_module_create(&c, &m);
    CHECK(st == want, "config error: got %s, want %s (%s)", mha_status_name(st), mha_status_name(want),
          mha_last_error());
    CHECK(m == NULL, "module pointer cleared on failure");
    CHECK(strstr(mha_last_error(), keyword) != NULL, "detail '%s' names '%s'", mha_last_error(), keyword);
}

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

static void trace_nop(void *u, const char *s, const char *e, int nd, const int64_t *sh, const float *d) {
    (void)s, (void)e, (void)nd, (void)sh, (void)d;
    ++*(int *)u;
}

int main(void) {
    /* status table */
    CHECK(strcmp(mha_status_name(MHA_ERR_SHAPE), "MHA_ERR_SHAPE") == 0, "name");
    CHECK(strcmp(mha_status_name((mha_status)-999), "MHA_UNKNOWN_STATUS") == 0, "unknown name");
    CHECK(mha_status_string(MHA_OK)[0] != '\0', "string");
    CHECK(strcmp(mha_version(), MHA_VERSION_STRING) == 0, "version");

    /* kind names */
    for (int k = MHA_SELF_ATTENTION_V1; k <= MHA_MULTI_HEAD_ATTENTION; k++) {
        mha_kind back;
        CHECK(mha_kind_from_name(mha_kind_name((mha_kind)k), &back) == MHA_OK && back == (mha_kind)k, "kind %d", k);
    }
    mha_kind kk;
    CHECK(mha_kind_from_name("MultiheadAttention", &kk) == MHA_ERR_UNKNOWN_MODULE, "unknown class");

    /* configuration errors */
    const mha_kind MHA = MHA_MULTI_HEAD_ATTENTION;
    expect_config_error(test_config(MHA, 3, 5, 6, 0, 2, 0), MHA_ERR_CONFIG, "divisible by num_heads");
    expect_config_error(test_config(MHA, 0, 4, 6, 0, 2, 0), MHA_ERR_CONFIG, "d_in");
    expect_config_error(test_config(MHA, 3, -4, 6, 0, 2, 0), MHA_ERR_CONFIG, "d_out");
    expect_config_error(test_config(MHA, 3, 4, 0, 0, 2, 0), MHA_ERR_CONFIG, "context_length");
    expect_config_error(test_config(MHA, 3, 4, 6, 1.0, 2, 0), MHA_ERR_CONFIG, "dropout");
    expect_config_error(test_config(MHA, 3, 4, 6, -0.1, 2, 0), MHA_ERR_CONFIG, "dropout");
    expect_config_error(test_config(MHA, 3, 4, 6, NAN, 2, 0), MHA_ERR_CONFIG, "dropout");
    expect_config_error(test_config(MHA, 3, 4, 6, 0, 0, 0), MHA_ERR_CONFIG, "num_heads");
    expect_config_error(test_config(MHA, 3, 4, 6, 0, 2, 2), MHA_ERR_CONFIG, "qkv_bias");
    expect_config_error(test_config(MHA, (int64_t)1 << 40, 4, 6, 0, 2, 0), MHA_ERR_OVERFLOW, "d_in");
    expect_config_error(test_config(MHA, 3, 4, (int64_t)1 << 50, 0, 2, 0), MHA_ERR_OVERFLOW, "context_length");
    expect_config_error(test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 1 << 20, 6, 0, 1 << 20, 0), MHA_ERR_OVERFLOW, "num_heads");
    expect_config_error(test_config((mha_kind)99, 3, 4, 6, 0, 2, 0), MHA_ERR_UNKNOWN_MODULE, "kind");
    expect_config_error(test_config(MHA_CAUSAL_ATTENTION, 3, 4, -1, 0, 1, 0), MHA_ERR_CONFIG, "context_length");
    CHECK(mha_module_create(NULL, NULL) == MHA_ERR_ARGUMENT, "NULL out");

    /* parameter names, shapes and state_dict order */
    mha_module *m = NULL;
    mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 2, 6, 0, 2, 1);
    REQUIRE(mha_module_create_seeded(&c, 1, &m) == MHA_OK, "wrapper");
    static const char *const wnames[] = {"heads.0.W_query.weight", "heads.0.W_query.bias", "heads.0.W_key.weight",
                                         "heads.0.W_key.bias", "heads.0.W_value.weight", "heads.0.W_value.bias",
                                         "heads.1.W_query.weight", "heads.1.W_query.bias", "heads.1.W_key.weight",
                                         "heads.1.W_key.bias", "heads.1.W_value.weight", "heads.1.W_value.bias"};
    const mha_params *ps = mha_module_params(m);
    CHECK(mha_params_count(ps) == 12, "12 params, got %zu", mha_params_count(ps));
    for (size_t i = 0; i < 12 && i < mha_params_count(ps); i++) {
        mha_param p;
        mha_params_get(ps, i, &p);
        CHECK(strcmp(p.name, wnames[i]) == 0, "param %zu is %s, want %s", i, p.name, wnames[i]);
        CHECK(p.ndim == (i % 2 ? 1 : 2) && p.shape[0] == 2 && (p.ndim == 1 || p.shape[1] == 3), "shape of %s", p.name);
    }
    mha_param p;
    CHECK(mha_params_find(ps, "out_proj.weight", &p) == MHA_ERR_MISSING, "no out_proj in the wrapper");
    CHECK(mha_params_get(ps, 12, &p) == MHA_ERR_ARGUMENT, "index out of range");
    mha_module_free(m);
    mha_module_free(NULL);

    /* forward errors leave y untouched */
    c = test_config(MHA, 4, 6, 8, 0.1, 3, 0);
    REQUIRE(mha_module_create_seeded(&c, 7, &m) == MHA_OK, "mha");
    float x[2 * 9 * 4], y[2 * 9 * 6], y2[2 * 9 * 6];
    test_fill(x, sizeof x / sizeof *x, 1);
    for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = 42.0f;
    CHECK(mha_module_forward(m, y, x, 0, 5, NULL, NULL, 0) == MHA_ERR_SHAPE, "B = 0");
    CHECK(mha_module_forward(m, y, x, 2, 0, NULL, NULL, 0) == MHA_ERR_SHAPE, "T = 0");
    CHECK(mha_module_forward(m, y, x, 2, 9, NULL, NULL, 0) == MHA_ERR_CONTEXT_LENGTH, "T > context_length");
    CHECK(strstr(mha_last_error(), "context_length 8") != NULL, "detail: %s", mha_last_error());
    CHECK(mha_module_forward(m, y, x, (int64_t)1 << 40, 8, NULL, NULL, 0) == MHA_ERR_OVERFLOW, "huge batch");
    CHECK(mha_module_forward(m, NULL, x, 2, 8, NULL, NULL, 0) == MHA_ERR_ARGUMENT, "NULL y");
    x[5] = NAN;
    CHECK(mha_module_forward(m, y, x, 2, 8, NULL, NULL, 0) == MHA_ERR_NONFINITE, "NaN input");
    x[5] = INFINITY;
    CHECK(mha_module_forward(m, y, x, 2, 8, NULL, NULL, 0) == MHA_ERR_NONFINITE, "inf input");
    x[5] = 0.25f;
    char small[64];
    CHECK(mha_module_forward(m, y, x, 2, 8, NULL, small, sizeof small) == MHA_ERR_WORKSPACE, "workspace too small");
    int untouched = 1;
    for (size_t i = 0; i < sizeof y / sizeof *y; i++) untouched &= y[i] == 42.0f;
    CHECK(untouched, "y untouched by failed calls");

    /* caller workspace == module workspace; eval is deterministic */
    size_t wsz = mha_module_workspace_size(m, 2, 8, 0);
    CHECK(wsz > 0, "workspace size");
    void *ws = aligned_alloc(64, (wsz + 63) / 64 * 64);
    CHECK(mha_module_forward(m, y, x, 2, 8, NULL, ws, wsz) == MHA_OK, "forward with workspace");
    CHECK(mha_module_forward(m, y2, x, 2, 8, NULL, NULL, 0) == MHA_OK, "forward");
    CHECK(memcmp(y, y2, 2 * 8 * 6 * sizeof(float)) == 0, "same result with either workspace");
    free(ws);

    /* traced forward == forward, in eval and in training mode */
    int steps = 0;
    CHECK(mha_module_forward_traced(m, y2, x, 2, 8, NULL, trace_nop, &steps) == MHA_OK, "traced");
    CHECK(steps >= 14, "traced steps %d", steps);
    CHECK(max_abs_diff(y, y2, 2 * 8 * 6) < 1e-5f, "traced vs forward %g", (double)max_abs_diff(y, y2, 96));
    mha_generator *g1 = NULL, *g2 = NULL;
    REQUIRE(mha_generator_create(99, &g1) == MHA_OK, "generator_create");
    REQUIRE(mha_generator_create(99, &g2) == MHA_OK, "generator_create");
    CHECK(mha_module_forward(m, y, x, 2, 8, g1, NULL, 0) == MHA_OK, "train forward");
    CHECK(mha_module_forward_traced(m, y2, x, 2, 8, g2, NULL, NULL) == MHA_OK, "train traced");
    CHECK(max_abs_diff(y, y2, 96) < 1e-5f, "train traced vs forward %g", (double)max_abs_diff(y, y2, 96));
    CHECK(mha_generator_random(g1) == mha_generator_random(g2), "both consumed the same draws");
    mha_generator_free(g1);
    mha_generator_free(g2);
    mha_module_free(m);

    /* v1/v2 take one sequence */
    c = test_config(MHA_SELF_ATTENTION_V2, 4, 3, 0, 0, 1, 1);
    REQUIRE(mha_module_create_seeded(&c, 3, &m) == MHA_OK, "v2");
    CHECK(mha_module_forward(m, y, x, 2, 4, NULL, NULL, 0) == MHA_ERR_SHAPE, "v2 batch of 2");
    CHECK(mha_module_forward(m, y, x, 1, 17, NULL, NULL, 0) == MHA_OK, "v2 has no context_length");
    CHECK(mha_module_forward_traced(m, y, x, 1, 4, NULL, NULL, NULL) == MHA_ERR_UNSUPPORTED, "traced is MHA only");
    mha_module_free(m);

    /* non-finite weights are reported */
    c = test_config(MHA_CAUSAL_ATTENTION, 3, 2, 4, 0, 1, 0);
    REQUIRE(mha_module_create(&c, &m) == MHA_OK, "causal");
    CHECK(mha_module_check_finite(m) == MHA_OK, "zeros are finite");
    REQUIRE(mha_params_find(mha_module_params(m), "W_key.weight", &p) == MHA_OK, "find_param");
    p.data[1] = NAN;
    CHECK(mha_module_check_finite(m) == MHA_ERR_NONFINITE && strstr(mha_last_error(), "W_key.weight"), "NaN weight named");
    mha_module_free(m);

    /* (thread-count independence: tests/test_threads.c) */
    c = test_config(MHA, 64, 128, 200, 0.2, 2, 1);
    REQUIRE(mha_module_create_seeded(&c, 5, &m) == MHA_OK, "mha 64");
    const int64_t B = 3, T = 157;
    float *bx = malloc(sizeof(float) * (size_t)(B * T * 64)), *b1 = malloc(sizeof(float) * (size_t)(B * T * 128)),
          *b2 = malloc(sizeof(float) * (size_t)(B * T * 128));
    test_fill(bx, (size_t)(B * T * 64), 3);
    CHECK(mha_runtime_set_threads(0) == MHA_ERR_ARGUMENT, "0 threads");

    /* Philox fast dropout: deterministic per (seed, offset), a fresh mask
     * per offset; lse saved for backward; every kernel set this CPU has,
     * each named, against the reference kernels. */
    {
        const size_t ny = (size_t)(B * T * 128);
        float *lse1 = malloc(sizeof(float) * (size_t)(B * 2 * T)), *lse2 = malloc(sizeof(float) * (size_t)(B * 2 * T));
        mha_forward_opts o = {.training = 1, .rng = MHA_DROPOUT_RNG_PHILOX, .philox_seed = 77, .philox_offset = 3,
                              .lse = lse1};
        REQUIRE(TEST_USE_ISA("ref") && strcmp(mha_runtime_blas(), "ref") == 0, "ref in use");
        REQUIRE(mha_module_forward_ex(m, b1, bx, B, T, &o, NULL, 0) == MHA_OK, "philox reference");
        static const char *const fast[] = {"avx2", "avx512"};
        for (int k = 0; k < 2; k++) {
            if (!TEST_USE_ISA(fast[k])) continue;
            o.lse = lse2;
            REQUIRE(mha_module_forward_ex(m, b2, bx, B, T, &o, NULL, 0) == MHA_OK, "philox %s", fast[k]);
            float ymax = 0.0f, lmax = 0.0f;
            for (size_t i = 0; i < ny; i++) ymax = fmaxf(ymax, fabsf(b1[i]));
            for (int64_t i = 0; i < B * 2 * T; i++) lmax = fmaxf(lmax, fabsf(lse1[i] - lse2[i]));
            CHECK(max_abs_diff(b1, b2, ny) <= 1e-5f * fmaxf(1.0f, ymax), "philox %s vs ref %g", fast[k],
                  (double)max_abs_diff(b1, b2, ny));
            CHECK(lmax <= 1e-5f, "lse %s vs ref %g", fast[k], (double)lmax);
        }
        CHECK(mha_runtime_set_isa("auto") == MHA_OK, "set auto");
        o.lse = lse2;
        REQUIRE(mha_module_forward_ex(m, b1, bx, B, T, &o, NULL, 0) == MHA_OK, "philox offset 3");
        o.philox_offset = 4;
        o.lse = NULL;
        REQUIRE(mha_module_forward_ex(m, b2, bx, B, T, &o, NULL, 0) == MHA_OK, "philox offset 4");
        CHECK(memcmp(b1, b2, sizeof(float) * ny) != 0, "a new offset gives a new mask");
        o.rng = MHA_DROPOUT_RNG_TORCH;
        CHECK(mha_module_forward_ex(m, b2, bx, B, T, &o, NULL, 0) == MHA_ERR_ARGUMENT, "torch mask without generator");
        CHECK(mha_runtime_set_isa("avx1024") == MHA_ERR_ARGUMENT, "unknown isa");
        CHECK(mha_runtime_set_isa(NULL) == MHA_ERR_ARGUMENT, "NULL isa");
        /* every name mha_runtime_isa returns is accepted */
        CHECK(mha_runtime_set_isa(mha_runtime_isa()) == MHA_OK, "set_isa(runtime_isa())");
        free(lse1), free(lse2);
    }
    free(bx), free(b1), free(b2);
    mha_module_free(m);
    return TEST_END("test_modules");
}
