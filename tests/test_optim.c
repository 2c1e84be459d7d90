/* test_optim.c — the optimizer API: configuration defaults and validation,
 * the update's arithmetic on hand-checkable cases, refused non-finite
 * gradients (nothing changes), save/load round trips and exact resumption,
 * load errors on damaged files (the optimizer untouched), the thread count
 * and PyTorch's float32 step counter. Bitwise agreement with torch itself is
 * tests/torch_optim_diff.py's. */
#include "test_util.h"

#include <stdint.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/mha_test_optim_XXXXXX";

static const char *tmp_path(const char *name) {
    static char buf[8][256];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", tmpdir, name);
    return b;
}

static mha_module *new_module(int64_t d_in, int64_t d_out, uint64_t seed) {
    mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION, d_in, d_out, 4, 0.0, 2, 1);
    mha_module *m = NULL;
    REQUIRE(mha_module_create_seeded(&c, seed, &m) == MHA_OK, "module: %s", mha_last_error());
    return m;
}

/* Every gradient from seed (different per step: pass step into seed). */
static void set_grads(mha_module *m, unsigned seed) {
    for (size_t i = 0; i < mha_params_count(mha_module_params(m)); i++) {
        mha_param g;
        REQUIRE(mha_params_grad(mha_module_params(m), i, &g) == MHA_OK, "grad: %s", mha_last_error());
        test_fill(g.data, g.numel, seed * 131u + (unsigned)i);
    }
}

/* Bitwise equality of two modules' parameters. */
static int same_params(mha_module *ma, mha_module *mb) {
    const mha_params *a = mha_module_params(ma), *b = mha_module_params(mb);
    if (mha_params_count(a) != mha_params_count(b)) return 0;
    for (size_t i = 0; i < mha_params_count(a); i++) {
        mha_param pa, pb;
        if (mha_params_get(a, i, &pa) != MHA_OK || mha_params_get(b, i, &pb) != MHA_OK ||
            pa.numel != pb.numel || memcmp(pa.data, pb.data, pa.numel * sizeof(float)) != 0)
            return 0;
    }
    return 1;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(len > 0 ? (size_t)len : 1);
    *n = len > 0 && b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
    int same = x && y && na == nb && na > 0 && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static mha_optimizer *adamw(mha_module *m, double lr, int amsgrad) {
    mha_adamw_config c;
    mha_adamw_config_init(&c);
    c.lr = lr;
    c.amsgrad = amsgrad;
    mha_optimizer *o = NULL;
    REQUIRE(mha_optimizer_create(mha_module_params(m), ADAMW_CFG(c), &o) == MHA_OK, "adamw: %s",
            mha_last_error());
    return o;
}

static mha_optimizer *sgd(mha_module *m, double lr, double momentum, double dampening,
                          int nesterov, double wd) {
    mha_sgd_config c;
    mha_sgd_config_init(&c);
    c.lr = lr;
    c.momentum = momentum;
    c.dampening = dampening;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    mha_optimizer *o = NULL;
    REQUIRE(mha_optimizer_create(mha_module_params(m), SGD_CFG(c), &o) == MHA_OK, "sgd: %s",
            mha_last_error());
    return o;
}

/* ------------------------------------------------------------------------ */

static void test_config_defaults(void) {
    mha_adamw_config a;
    mha_adamw_config_init(&a);
    CHECK(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 &&
              a.weight_decay == 1e-2 && a.amsgrad == 0 && a.variant == MHA_OPTIM_TORCH_AVX2,
          "AdamW defaults");
    mha_sgd_config s;
    mha_sgd_config_init(&s);
    CHECK(isnan(s.lr) && s.momentum == 0 && s.dampening == 0 && s.weight_decay == 0 &&
              s.nesterov == 0 && s.variant == MHA_OPTIM_TORCH_AVX2,
          "SGD defaults");
    mha_adamw_config_init(NULL);
    mha_sgd_config_init(NULL);
}

typedef struct {
    const char *what; /* a word the detail must contain */
    double lr, b1, b2, eps, wd;
    int amsgrad, variant;
} adamw_case;

typedef struct {
    const char *what;
    double lr, mom, damp, wd;
    int nesterov, variant;
} sgd_case;

static void test_config_validation(void) {
    mha_module *m = new_module(3, 4, 1);
    const double inf = INFINITY, nan = NAN;
    const adamw_case bad_a[] = {
        {"lr", -1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 0},   {"lr", nan, 0.9, 0.999, 1e-8, 0.01, 0, 0},
        {"lr", inf, 0.9, 0.999, 1e-8, 0.01, 0, 0},     {"eps", 1e-3, 0.9, 0.999, -1e-8, 0.01, 0, 0},
        {"beta1", 1e-3, -0.1, 0.999, 1e-8, 0.01, 0, 0}, {"beta1", 1e-3, 1.0, 0.999, 1e-8, 0.01, 0, 0},
        {"beta2", 1e-3, 0.9, 1.0, 1e-8, 0.01, 0, 0},   {"beta2", 1e-3, 0.9, nan, 1e-8, 0.01, 0, 0},
        {"weight_decay", 1e-3, 0.9, 0.999, 1e-8, -0.01, 0, 0},
        {"amsgrad", 1e-3, 0.9, 0.999, 1e-8, 0.01, 2, 0},
        {"variant", 1e-3, 0.9, 0.999, 1e-8, 0.01, 0, 7},
    };
    for (size_t i = 0; i < sizeof bad_a / sizeof bad_a[0]; i++) {
        const adamw_case *t = &bad_a[i];
        mha_adamw_config c = {t->lr, t->b1, t->b2, t->eps, t->wd, t->amsgrad,
                              (mha_optim_variant)t->variant};
        mha_optimizer *o = (mha_optimizer *)&c; /* must be reset to NULL */
        mha_status s = mha_optimizer_create(mha_module_params(m), ADAMW_CFG(c), &o);
        CHECK(s == MHA_ERR_CONFIG && o == NULL, "AdamW case %zu (%s): %s", i, t->what,
              mha_status_name(s));
        CHECK(strstr(mha_last_error(), t->what) != NULL, "AdamW case %zu: detail '%s' names %s",
              i, mha_last_error(), t->what);
    }
    /* the edges PyTorch accepts */
    const adamw_case ok_a[] = {{"", 0, 0, 0, 0, 0, 0, 0}, {"", 1, 0.999999, 0.5, 1, 10, 1, 1}};
    for (size_t i = 0; i < sizeof ok_a / sizeof ok_a[0]; i++) {
        const adamw_case *t = &ok_a[i];
        mha_adamw_config c = {t->lr, t->b1, t->b2, t->eps, t->wd, t->amsgrad,
                              (mha_optim_variant)t->variant};
        mha_optimizer *o = NULL;
        CHECK(mha_optimizer_create(mha_module_params(m), ADAMW_CFG(c), &o) == MHA_OK, "AdamW edge %zu: %s", i,
              mha_last_error());
        mha_optimizer_free(o);
    }

    const sgd_case bad_s[] = {
        {"lr", nan, 0, 0, 0, 0, 0},        /* not set */
        {"lr", -0.1, 0, 0, 0, 0, 0},       {"lr", inf, 0, 0, 0, 0, 0},
        {"momentum", 0.1, -0.5, 0, 0, 0, 0}, {"momentum", 0.1, nan, 0, 0, 0, 0},
        {"weight_decay", 0.1, 0, 0, -1, 0, 0}, {"dampening", 0.1, 0.9, inf, 0, 0, 0},
        {"nesterov", 0.1, 0, 0, 0, 1, 0},  /* no momentum */
        {"nesterov", 0.1, 0.9, 0.1, 0, 1, 0}, /* dampening */
        {"nesterov", 0.1, 0.9, 0, 0, 2, 0}, {"variant", 0.1, 0, 0, 0, 0, -1},
    };
    for (size_t i = 0; i < sizeof bad_s / sizeof bad_s[0]; i++) {
        const sgd_case *t = &bad_s[i];
        mha_sgd_config c = {t->lr, t->mom, t->damp, t->wd, t->nesterov,
                            (mha_optim_variant)t->variant};
        mha_optimizer *o = (mha_optimizer *)&c;
        mha_status s = mha_optimizer_create(mha_module_params(m), SGD_CFG(c), &o);
        CHECK(s == MHA_ERR_CONFIG && o == NULL, "SGD case %zu (%s): %s", i, t->what,
              mha_status_name(s));
        CHECK(strstr(mha_last_error(), t->what) != NULL, "SGD case %zu: detail '%s' names %s", i,
              mha_last_error(), t->what);
    }
    /* PyTorch checks neither dampening's range nor momentum <= 1 */
    const sgd_case ok_s[] = {{"", 0, 0, 0, 0, 0, 0}, {"", 0.1, 1.5, -2, 0, 0, 0},
                             {"", 0.1, 0.9, 0, 0.1, 1, 1}};
    for (size_t i = 0; i < sizeof ok_s / sizeof ok_s[0]; i++) {
        const sgd_case *t = &ok_s[i];
        mha_sgd_config c = {t->lr, t->mom, t->damp, t->wd, t->nesterov,
                            (mha_optim_variant)t->variant};
        mha_optimizer *o = NULL;
        CHECK(mha_optimizer_create(mha_module_params(m), SGD_CFG(c), &o) == MHA_OK, "SGD edge %zu: %s", i,
              mha_last_error());
        mha_optimizer_free(o);
    }

    /* NULL arguments */
    mha_adamw_config ac;
    mha_adamw_config_init(&ac);
    mha_sgd_config sc;
    mha_sgd_config_init(&sc);
    sc.lr = 0.1;
    mha_optimizer *o = NULL;
    CHECK(mha_optimizer_create(NULL, ADAMW_CFG(ac), &o) == MHA_ERR_ARGUMENT && !o, "NULL module");
    CHECK(mha_optimizer_create(mha_module_params(m), NULL, &o) == MHA_ERR_ARGUMENT && !o, "NULL config");
    CHECK(mha_optimizer_create(mha_module_params(m), ADAMW_CFG(ac), NULL) == MHA_ERR_ARGUMENT, "NULL out");
    CHECK(mha_optimizer_create(NULL, SGD_CFG(sc), &o) == MHA_ERR_ARGUMENT && !o, "NULL module");
    CHECK(mha_optimizer_create(mha_module_params(m), NULL, &o) == MHA_ERR_ARGUMENT && !o, "NULL config");
    CHECK(mha_optimizer_create(mha_module_params(m), SGD_CFG(sc), NULL) == MHA_ERR_ARGUMENT, "NULL out");
    CHECK(mha_optimizer_step(NULL) == MHA_ERR_ARGUMENT, "step NULL");
    CHECK(mha_optimizer_step_count(NULL) == 0, "step_count NULL");
    CHECK(mha_optimizer_name(NULL) == NULL, "name NULL");
    CHECK(isnan(mha_optimizer_lr(NULL)), "lr NULL");
    CHECK(mha_optimizer_set_lr(NULL, 0.1) == MHA_ERR_ARGUMENT, "set_lr NULL");
    CHECK(mha_optimizer_save(NULL, tmp_path("x")) == MHA_ERR_ARGUMENT, "save NULL");
    CHECK(mha_optimizer_load(NULL, tmp_path("x")) == MHA_ERR_ARGUMENT, "load NULL");
    mha_optimizer_free(NULL);
    mha_module_free(m);
}

static void test_accessors(void) {
    mha_module *m = new_module(3, 4, 2);
    mha_optimizer *a = adamw(m, 2e-3, 1), *s = sgd(m, 0.5, 0.9, 0, 1, 0);
    CHECK(!strcmp(mha_optimizer_name(a), "AdamW") && !strcmp(mha_optimizer_name(s), "SGD"),
          "names");
    CHECK(mha_optimizer_lr(a) == 2e-3 && mha_optimizer_lr(s) == 0.5, "lr");
    CHECK(mha_optimizer_set_lr(a, 0.25) == MHA_OK && mha_optimizer_lr(a) == 0.25, "set_lr");
    CHECK(mha_optimizer_set_lr(a, -1) == MHA_ERR_CONFIG && mha_optimizer_lr(a) == 0.25,
          "set_lr negative refused, lr kept");
    CHECK(mha_optimizer_set_lr(s, NAN) == MHA_ERR_CONFIG && mha_optimizer_lr(s) == 0.5,
          "set_lr NaN refused");
    CHECK(mha_optimizer_set_lr(s, INFINITY) == MHA_ERR_CONFIG, "set_lr inf refused");
    CHECK(mha_optimizer_set_lr(s, 0) == MHA_OK && mha_optimizer_lr(s) == 0, "set_lr 0");
    mha_adamw_config ac;
    mha_sgd_config sc;
    CHECK(mha_optimizer_adamw_config(a, &ac) == MHA_OK && ac.lr == 0.25 && ac.amsgrad == 1,
          "adamw_config");
    CHECK(mha_optimizer_sgd_config(s, &sc) == MHA_OK && sc.lr == 0 && sc.nesterov == 1 &&
              sc.momentum == 0.9,
          "sgd_config");
    CHECK(mha_optimizer_adamw_config(s, &ac) == MHA_ERR_ARGUMENT, "adamw_config of SGD");
    CHECK(mha_optimizer_sgd_config(a, &sc) == MHA_ERR_ARGUMENT, "sgd_config of AdamW");
    CHECK(mha_optimizer_adamw_config(a, NULL) == MHA_ERR_ARGUMENT, "NULL out");
    CHECK(mha_optimizer_step_count(a) == 0, "fresh step count");
    mha_optimizer_free(a);
    mha_optimizer_free(s);
    mha_module_free(m);
}

/* The update on cases a hand can check. */
static void test_arithmetic(void) {
    mha_module *m = new_module(3, 4, 3);
    mha_module *m0 = new_module(3, 4, 3); /* the parameters before */
    const size_t np = mha_params_count(mha_module_params(m));

    /* plain SGD: p - lr * g, one rounding (the AVX2 variant's fused add_) */
    mha_optimizer *o = sgd(m, 0.1, 0, 0, 0, 0);
    set_grads(m, 1);
    REQUIRE(mha_optimizer_step(o) == MHA_OK, "sgd step: %s", mha_last_error());
    CHECK(mha_optimizer_step_count(o) == 1, "step count 1");
    int bad = 0;
    for (size_t i = 0; i < np; i++) {
        mha_param p, p0, g;
        mha_params_get(mha_module_params(m), i, &p);
        mha_params_get(mha_module_params(m0), i, &p0);
        mha_params_grad(mha_module_params(m), i, &g);
        for (size_t j = 0; j < p.numel; j++) bad += p.data[j] != fmaf(-0.1f, g.data[j], p0.data[j]);
    }
    CHECK(bad == 0, "SGD: %d values not fmaf(-lr, g, p)", bad);
    mha_optimizer_free(o);

    /* the DEFAULT variant rounds the product first */
    mha_module_free(m);
    m = new_module(3, 4, 3);
    mha_sgd_config sc;
    mha_sgd_config_init(&sc);
    sc.lr = 0.1;
    sc.variant = MHA_OPTIM_TORCH_DEFAULT;
    REQUIRE(mha_optimizer_create(mha_module_params(m), SGD_CFG(sc), &o) == MHA_OK, "sgd default");
    set_grads(m, 1);
    REQUIRE(mha_optimizer_step(o) == MHA_OK, "sgd step");
    bad = 0;
    for (size_t i = 0; i < np; i++) {
        mha_param p, p0, g;
        mha_params_get(mha_module_params(m), i, &p);
        mha_params_get(mha_module_params(m0), i, &p0);
        mha_params_grad(mha_module_params(m), i, &g);
        for (size_t j = 0; j < p.numel; j++) {
            volatile float prod = -0.1f * g.data[j];
            bad += p.data[j] != p0.data[j] + prod;
        }
    }
    CHECK(bad == 0, "SGD DEFAULT: %d values not p + (-lr * g)", bad);
    int differ = 0; /* the variants are not the same arithmetic */
    for (size_t i = 0; i < np; i++) {
        mha_param p0, g;
        mha_params_get(mha_module_params(m0), i, &p0);
        mha_params_grad(mha_module_params(m), i, &g);
        for (size_t j = 0; j < p0.numel; j++) {
            volatile float prod = -0.1f * g.data[j];
            differ += fmaf(-0.1f, g.data[j], p0.data[j]) != p0.data[j] + prod;
        }
    }
    CHECK(differ > 0, "no value tells the variants apart");
    mha_optimizer_free(o);

    /* AdamW's first step moves each value by lr * sign(g) (m / sqrt(v) is
     * g / |g| after the bias corrections), after the decay */
    mha_module_free(m);
    m = new_module(3, 4, 3);
    o = adamw(m, 1e-2, 0);
    set_grads(m, 2);
    REQUIRE(mha_optimizer_step(o) == MHA_OK, "adamw step");
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
        mha_param p, p0, g;
        mha_params_get(mha_module_params(m), i, &p);
        mha_params_get(mha_module_params(m0), i, &p0);
        mha_params_grad(mha_module_params(m), i, &g);
        for (size_t j = 0; j < p.numel; j++) {
            const double gj = g.data[j];
            const double want = (double)p0.data[j] * (1 - 1e-2 * 1e-2) -
                                1e-2 * gj / (fabs(gj) + 1e-8);
            const double e = fabs((double)p.data[j] - want);
            if (e > worst) worst = e;
        }
    }
    CHECK(worst < 1e-6, "AdamW first step: off by %g", worst);
    /* zero gradients: AdamW still decays the weights (PyTorch's zero_grad
     * keeps .grad, and a zero .grad is stepped) */
    mha_param p;
    mha_params_get(mha_module_params(m), 0, &p);
    const float before = p.data[0];
    REQUIRE(mha_params_zero_grad(mha_module_params(m)) == MHA_OK, "zero_grad");
    REQUIRE(mha_optimizer_step(o) == MHA_OK, "adamw step 2");
    CHECK(mha_optimizer_step_count(o) == 2, "step count 2");
    CHECK(p.data[0] != before, "weight decay with a zero gradient");
    mha_optimizer_free(o);
    mha_module_free(m);
    mha_module_free(m0);
}

/* A NaN or infinity in a gradient: refused, nothing changes, and the run
 * goes on as if that step had not been tried. */
static void test_nonfinite(void) {
    const float bads[2] = {NAN, INFINITY};
    for (int kind = 0; kind < 2; kind++)
        for (int b = 0; b < 2; b++) {
            mha_module *ma = new_module(5, 4, 4), *mb = new_module(5, 4, 4);
            mha_optimizer *oa = kind ? sgd(ma, 0.1, 0.9, 0.1, 0, 0.01) : adamw(ma, 1e-2, 1);
            mha_optimizer *ob = kind ? sgd(mb, 0.1, 0.9, 0.1, 0, 0.01) : adamw(mb, 1e-2, 1);
            set_grads(ma, 10);
            set_grads(mb, 10);
            CHECK(mha_optimizer_step(oa) == MHA_OK && mha_optimizer_step(ob) == MHA_OK, "step 1");
            REQUIRE(mha_optimizer_save(oa, tmp_path("nf_before")) == MHA_OK, "save");

            set_grads(ma, 11);
            mha_param g;
            mha_params_grad(mha_module_params(ma), 3, &g);
            g.data[g.numel - 1] = bads[b];
            mha_status s = mha_optimizer_step(oa);
            CHECK(s == MHA_ERR_NONFINITE, "non-finite gradient: %s", mha_status_name(s));
            CHECK(strstr(mha_last_error(), g.name) != NULL &&
                      strstr(mha_last_error(), b ? "infinity" : "NaN") != NULL,
                  "detail names it: %s", mha_last_error());
            CHECK(mha_optimizer_step_count(oa) == 1, "step count unchanged");
            CHECK(same_params(ma, mb), "parameters unchanged");
            REQUIRE(mha_optimizer_save(oa, tmp_path("nf_after")) == MHA_OK, "save");
            CHECK(same_file(tmp_path("nf_before"), tmp_path("nf_after")), "state unchanged");

            set_grads(ma, 12);
            set_grads(mb, 12);
            CHECK(mha_optimizer_step(oa) == MHA_OK && mha_optimizer_step(ob) == MHA_OK, "step 2");
            CHECK(same_params(ma, mb), "the run goes on as if the step had not been tried");
            mha_optimizer_free(oa);
            mha_optimizer_free(ob);
            mha_module_free(ma);
            mha_module_free(mb);
        }
}

/* Save after k steps, load into a fresh optimizer (created with other
 * hyper-parameters) over a module loaded from the saved parameters: the
 * two runs go on bit for bit alike. */
typedef mha_optimizer *(*make_fn)(mha_module *m, int variant);

static mha_optimizer *mk_adamw_ams(mha_module *m, int v) {
    mha_adamw_config c;
    mha_adamw_config_init(&c);
    c.lr = 3e-2;
    c.beta1 = 0.8;
    c.amsgrad = 1;
    c.weight_decay = 0.05;
    c.variant = (mha_optim_variant)v;
    mha_optimizer *o = NULL;
    REQUIRE(mha_optimizer_create(mha_module_params(m), ADAMW_CFG(c), &o) == MHA_OK, "create");
    return o;
}
static mha_optimizer *mk_adamw(mha_module *m, int v) {
    (void)v;
    return adamw(m, 1e-3, 0);
}
static mha_optimizer *mk_sgd_nesterov(mha_module *m, int v) {
    mha_sgd_config c;
    mha_sgd_config_init(&c);
    c.lr = 0.05;
    c.momentum = 0.9;
    c.nesterov = 1;
    c.weight_decay = 1e-3;
    c.variant = (mha_optim_variant)v;
    mha_optimizer *o = NULL;
    REQUIRE(mha_optimizer_create(mha_module_params(m), SGD_CFG(c), &o) == MHA_OK, "create");
    return o;
}
static mha_optimizer *mk_sgd_damp(mha_module *m, int v) {
    (void)v;
    return sgd(m, 0.1, 0.5, 0.3, 0, 0);
}
static mha_optimizer *mk_sgd_plain(mha_module *m, int v) {
    (void)v;
    return sgd(m, 0.2, 0, 0, 0, 0.1);
}

static void test_resume(void) {
    const struct {
        const char *name;
        make_fn make;
        int variant;
    } cases[] = {
        {"AdamW amsgrad", mk_adamw_ams, 0},  {"AdamW amsgrad DEFAULT", mk_adamw_ams, 1},
        {"AdamW", mk_adamw, 0},             {"SGD nesterov", mk_sgd_nesterov, 0},
        {"SGD nesterov DEFAULT", mk_sgd_nesterov, 1},
        {"SGD dampening", mk_sgd_damp, 0},  {"SGD momentum 0", mk_sgd_plain, 0},
    };
    const int at[] = {0, 1, 3};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t k = 0; k < sizeof at / sizeof at[0]; k++) {
            mha_module *ma = new_module(6, 4, 5);
            mha_optimizer *oa = cases[c].make(ma, cases[c].variant);
            mha_optimizer_set_lr(oa, mha_optimizer_lr(oa) * 0.5); /* a schedule's change */
            for (int s = 0; s < at[k]; s++) {
                set_grads(ma, 100u + (unsigned)s);
                REQUIRE(mha_optimizer_step(oa) == MHA_OK, "step");
            }
            REQUIRE(mha_module_save(ma, tmp_path("r_module")) == MHA_OK, "module save");
            REQUIRE(mha_optimizer_save(oa, tmp_path("r_state")) == MHA_OK, "save: %s",
                    mha_last_error());
            mha_module *mb = NULL;
            REQUIRE(mha_module_load(tmp_path("r_module"), &mb) == MHA_OK, "module load");
            /* other hyper-parameters, the other kind's flags: load replaces them */
            mha_optimizer *ob = mha_optimizer_name(oa)[0] == 'A'
                                    ? adamw(mb, 0.5, !strcmp(cases[c].name, "AdamW"))
                                    : sgd(mb, 0.7, strcmp(cases[c].name, "SGD momentum 0") ? 0 : 0.3,
                                          0, 0, 0);
            mha_status s = mha_optimizer_load(ob, tmp_path("r_state"));
            CHECK(s == MHA_OK, "%s at %d: load: %s", cases[c].name, at[k], mha_last_error());
            CHECK(mha_optimizer_step_count(ob) == at[k], "%s: step count restored",
                  cases[c].name);
            CHECK(mha_optimizer_lr(ob) == mha_optimizer_lr(oa), "%s: lr restored", cases[c].name);
            mha_adamw_config ca, cb;
            mha_sgd_config sa, sb;
            if (mha_optimizer_adamw_config(oa, &ca) == MHA_OK)
                CHECK(mha_optimizer_adamw_config(ob, &cb) == MHA_OK && !memcmp(&ca, &cb, sizeof ca),
                      "%s: AdamW config restored", cases[c].name);
            else
                CHECK(mha_optimizer_sgd_config(oa, &sa) == MHA_OK &&
                          mha_optimizer_sgd_config(ob, &sb) == MHA_OK && !memcmp(&sa, &sb, sizeof sa),
                      "%s: SGD config restored", cases[c].name);
            REQUIRE(mha_optimizer_save(ob, tmp_path("r_state2")) == MHA_OK, "save again");
            CHECK(same_file(tmp_path("r_state"), tmp_path("r_state2")),
                  "%s at %d: save(load(f)) == f", cases[c].name, at[k]);
            for (int s2 = at[k]; s2 < 6; s2++) {
                set_grads(ma, 100u + (unsigned)s2);
                set_grads(mb, 100u + (unsigned)s2);
                REQUIRE(mha_optimizer_step(oa) == MHA_OK && mha_optimizer_step(ob) == MHA_OK,
                        "steps");
            }
            CHECK(same_params(ma, mb), "%s saved at step %d: resumed run differs", cases[c].name,
                  at[k]);
            mha_optimizer_free(oa);
            mha_optimizer_free(ob);
            mha_module_free(ma);
            mha_module_free(mb);
        }
}

/* ---- damaged files ------------------------------------------------------ */

/* A copy of file src at dst with: the tensor `drop` left out, every
 * metadata key `key` set to `val` (NULL: removed), an extra tensor `add`
 * (a copy of the first), the first tensor as F64 (to_f64), transposed
 * (transpose), or element 0 of the tensor `poke` set to `pv`. */
typedef struct {
    const char *drop, *key, *val, *add, *poke;
    float pv;
    int to_f64, transpose;
} edit;

static void rewrite(const char *src, const char *dst, const edit *e) {
    mha_st *st = NULL;
    REQUIRE(mha_st_read_file(src, &st) == MHA_OK, "read %s", src);
    const size_t n = mha_st_count(st), nm = mha_st_metadata_count(st);
    mha_st_entry *ents = calloc(n + 1, sizeof *ents);
    int64_t(*shapes)[MHA_ST_MAX_DIMS] = calloc(n + 1, sizeof *shapes);
    void **bufs = calloc(n + 1, sizeof *bufs);
    const char **meta = calloc(2 * nm + 2, sizeof *meta);
    REQUIRE(ents && shapes && bufs && meta, "alloc");
    size_t ne = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        mha_st_tensor t;
        REQUIRE(mha_st_get(st, i, &t) == MHA_OK, "get");
        if (e->drop && !strcmp(t.name, e->drop)) continue;
        memcpy(shapes[ne], t.shape, sizeof t.shape);
        bufs[ne] = malloc(t.numel * 8 + 8);
        memcpy(bufs[ne], t.data, t.nbytes);
        ents[ne] = (mha_st_entry){t.name, t.dtype, t.ndim, shapes[ne], bufs[ne]};
        if (e->poke && !strcmp(t.name, e->poke)) ((float *)bufs[ne])[0] = e->pv;
        if (ne == 0 && e->to_f64) {
            double *d = bufs[ne];
            for (size_t j = t.numel; j-- > 0;) d[j] = (double)((const float *)t.data)[j];
            ents[ne].dtype = MHA_DTYPE_F64;
        }
        if (ne == 0 && e->transpose && t.ndim == 2) {
            shapes[ne][0] = t.shape[1];
            shapes[ne][1] = t.shape[0];
        }
        ne++;
    }
    if (e->add) {
        ents[ne] = ents[0];
        ents[ne].name = e->add;
        ne++;
    }
    int have = 0;
    for (size_t i = 0; i < nm; i++) {
        const char *kk, *vv;
        mha_st_metadata_get(st, i, &kk, &vv);
        if (e->key && !strcmp(kk, e->key)) {
            have = 1;
            if (!e->val) continue;
            vv = e->val;
        }
        meta[2 * k] = kk;
        meta[2 * k + 1] = vv;
        k++;
    }
    if (e->key && e->val && !have) {
        meta[2 * k] = e->key;
        meta[2 * k + 1] = e->val;
        k++;
    }
    REQUIRE(mha_st_write_file(dst, ents, ne, meta, k) == MHA_OK, "write: %s", mha_last_error());
    for (size_t i = 0; i < ne; i++)
        if (!(e->add && i == ne - 1)) free(bufs[i]);
    free(bufs);
    free(shapes);
    free(ents);
    free(meta);
    mha_st_free(st);
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(b, 1, n, f) == n, "write %s", path);
    fclose(f);
}

/* load(path) fails with `want`, its detail starting with the path and
 * containing `word`, and o is left as it was. */
static void expect_load_fail(mha_optimizer *o, const char *path_arg, mha_status want,
                             const char *word, const char *label) {
    char path[256];
    snprintf(path, sizeof path, "%s", path_arg);
    REQUIRE(mha_optimizer_save(o, tmp_path("lf_before")) == MHA_OK, "save");
    const int64_t step = mha_optimizer_step_count(o);
    const double lr = mha_optimizer_lr(o);
    mha_status s = mha_optimizer_load(o, path);
    const char *d = mha_last_error();
    CHECK(s == want, "%s: %s, want %s (%s)", label, mha_status_name(s), mha_status_name(want), d);
    CHECK(strncmp(d, path, strlen(path)) == 0 && strstr(d, word) != NULL,
          "%s: detail '%s' (want the path and '%s')", label, d, word);
    CHECK(mha_optimizer_step_count(o) == step && mha_optimizer_lr(o) == lr, "%s: untouched",
          label);
    REQUIRE(mha_optimizer_save(o, tmp_path("lf_after")) == MHA_OK, "save");
    CHECK(same_file(tmp_path("lf_before"), tmp_path("lf_after")), "%s: state untouched", label);
}

static void test_load_errors(void) {
    mha_module *m = new_module(6, 4, 6);
    mha_optimizer *a = adamw(m, 1e-2, 1), *s = sgd(m, 0.1, 0.9, 0, 0, 0);
    for (int k = 0; k < 2; k++) {
        set_grads(m, 200u + (unsigned)k);
        REQUIRE(mha_optimizer_step(a) == MHA_OK && mha_optimizer_step(s) == MHA_OK, "steps");
    }
    /* tmp_path's buffers are reused: the paths kept are copied */
    char fa[256], fs[256], bad[256], bad2[256];
    snprintf(fa, sizeof fa, "%s", tmp_path("e_adamw"));
    snprintf(fs, sizeof fs, "%s", tmp_path("e_sgd"));
    snprintf(bad, sizeof bad, "%s", tmp_path("e_bad"));
    snprintf(bad2, sizeof bad2, "%s", tmp_path("e_bad2"));
    REQUIRE(mha_optimizer_save(a, fa) == MHA_OK && mha_optimizer_save(s, fs) == MHA_OK, "save");
    /* the target: a fresh AdamW (its state differs from the file's) */
    mha_optimizer *o = adamw(m, 5e-3, 0);
    set_grads(m, 300);
    REQUIRE(mha_optimizer_step(o) == MHA_OK, "step");

    expect_load_fail(o, tmp_path("does_not_exist"), MHA_ERR_IO, "", "no such file");
    write_bytes(bad, "not a safetensors file", 22);
    expect_load_fail(o, bad, MHA_ERR_FORMAT, "", "garbage");
    write_bytes(bad, "", 0);
    expect_load_fail(o, bad, MHA_ERR_FORMAT, "", "empty file");
    REQUIRE(mha_module_save(m, tmp_path("e_module")) == MHA_OK, "module save");
    expect_load_fail(o, tmp_path("e_module"), MHA_ERR_FORMAT, "optimizer", "a module file");
    expect_load_fail(o, fs, MHA_ERR_FORMAT, "SGD", "an SGD state into AdamW");

    const struct {
        edit e;
        mha_status want;
        const char *word, *label;
    } cases[] = {
        {{.key = "beta1"}, MHA_ERR_FORMAT, "beta1", "no beta1"},
        {{.key = "beta1", .val = "1.5"}, MHA_ERR_FORMAT, "beta1", "beta1 1.5"},
        {{.key = "lr", .val = "-0.1"}, MHA_ERR_FORMAT, "lr", "negative lr"},
        {{.key = "lr", .val = "nan"}, MHA_ERR_FORMAT, "lr", "lr nan"},
        {{.key = "eps", .val = "1e-8x"}, MHA_ERR_FORMAT, "eps", "eps with garbage"},
        {{.key = "amsgrad", .val = "yes"}, MHA_ERR_FORMAT, "amsgrad", "amsgrad yes"},
        {{.key = "variant", .val = "avx512"}, MHA_ERR_FORMAT, "variant", "variant avx512"},
        {{.key = "step"}, MHA_ERR_FORMAT, "step", "no step"},
        {{.key = "step", .val = "-1"}, MHA_ERR_FORMAT, "step", "step -1"},
        {{.key = "step", .val = "1.5"}, MHA_ERR_FORMAT, "step", "step 1.5"},
        {{.key = "step", .val = ""}, MHA_ERR_FORMAT, "step", "step empty"},
        {{.key = "step", .val = "99999999999999999999"}, MHA_ERR_FORMAT, "step", "step huge"},
        {{.key = "optimizer"}, MHA_ERR_FORMAT, "optimizer", "no optimizer"},
        {{.key = "optimizer", .val = "Adam"}, MHA_ERR_FORMAT, "Adam", "optimizer Adam"},
        {{.key = "module", .val = "CausalAttention"}, MHA_ERR_FORMAT, "CausalAttention",
         "another module class"},
        {{.key = "module"}, MHA_ERR_FORMAT, "module", "no module"},
        {{.key = "num_params", .val = "7"}, MHA_ERR_SHAPE, "parameters", "num_params"},
        {{.key = "param_scalars", .val = "1"}, MHA_ERR_SHAPE, "parameters", "param_scalars"},
        {{.drop = "exp_avg_sq.W_key.bias"}, MHA_ERR_MISSING, "exp_avg_sq.W_key.bias",
         "a missing tensor"},
        {{.add = "exp_avg.W_extra.weight"}, MHA_ERR_MISSING, "exp_avg.W_extra.weight",
         "an unexpected tensor"},
        {{.add = "momentum_buffer.W_key.bias"}, MHA_ERR_MISSING, "momentum_buffer",
         "another optimizer's state tensor"},
        {{.add = "exp_avg"}, MHA_ERR_MISSING, "unexpected", "a name without a dot"},
        {{.transpose = 1}, MHA_ERR_SHAPE, "shape", "a transposed tensor"},
        {{.to_f64 = 1}, MHA_ERR_DTYPE, "F64", "an F64 tensor"},
        {{.poke = "exp_avg.out_proj.bias", .pv = NAN}, MHA_ERR_FORMAT, "exp_avg.out_proj.bias",
         "NaN in exp_avg"},
        {{.poke = "exp_avg.out_proj.bias", .pv = INFINITY}, MHA_ERR_FORMAT, "finite",
         "inf in exp_avg"},
        {{.poke = "exp_avg_sq.W_query.weight", .pv = -1.0f}, MHA_ERR_FORMAT, ">= 0",
         "negative exp_avg_sq"},
        {{.poke = "max_exp_avg_sq.W_query.weight", .pv = -1.0f}, MHA_ERR_FORMAT, ">= 0",
         "negative max_exp_avg_sq"},
        /* amsgrad false: max_exp_avg_sq has no place */
        {{.key = "amsgrad", .val = "false"}, MHA_ERR_MISSING, "max_exp_avg_sq", "amsgrad off"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rewrite(fa, bad, &cases[i].e);
        expect_load_fail(o, bad, cases[i].want, cases[i].word, cases[i].label);
    }
    /* the file from an AdamW with amsgrad loads when it is intact */
    CHECK(mha_optimizer_load(o, fa) == MHA_OK && mha_optimizer_step_count(o) == 2,
          "intact file: %s", mha_last_error());

    /* SGD: momentum buffers only from step 1; none with momentum 0 */
    mha_optimizer *s2 = sgd(m, 0.3, 0, 0, 0, 0);
    const edit step0 = {.key = "step", .val = "0"};
    rewrite(fs, bad, &step0);
    expect_load_fail(s2, bad, MHA_ERR_MISSING, "momentum_buffer", "buffers at step 0");
    const edit nomom = {.key = "momentum", .val = "0"};
    rewrite(fs, bad, &nomom);
    expect_load_fail(s2, bad, MHA_ERR_MISSING, "momentum_buffer", "buffers without momentum");
    const edit nobuf = {.drop = "momentum_buffer.W_value.weight"};
    rewrite(fs, bad, &nobuf);
    expect_load_fail(s2, bad, MHA_ERR_MISSING, "momentum_buffer.W_value.weight",
                     "a missing buffer");
    const edit nest = {.key = "nesterov", .val = "true"};
    rewrite(fs, bad, &nest); /* nesterov with momentum 0.9 and dampening 0 is valid */
    CHECK(mha_optimizer_load(s2, bad) == MHA_OK, "nesterov file: %s", mha_last_error());
    const edit damp = {.key = "dampening", .val = "0.5"};
    rewrite(bad, bad2, &damp);
    expect_load_fail(s2, bad2, MHA_ERR_FORMAT, "nesterov",
                     "nesterov with dampening");
    CHECK(mha_optimizer_load(s2, fs) == MHA_OK, "SGD file into SGD: %s", mha_last_error());

    /* another module's state */
    mha_module *other = new_module(5, 4, 6);
    mha_optimizer *oo = adamw(other, 1e-3, 1);
    expect_load_fail(oo, fa, MHA_ERR_SHAPE, "parameters", "another module's state");
    mha_optimizer_free(oo);
    mha_module_free(other);

    /* save into a missing directory: ERR_IO, nothing written */
    CHECK(mha_optimizer_save(a, "/nonexistent-mha-dir/x.safetensors") == MHA_ERR_IO,
          "save to a missing directory");
    mha_optimizer_free(s2);
    mha_optimizer_free(o);
    mha_optimizer_free(a);
    mha_optimizer_free(s);
    mha_module_free(m);
}

/* PyTorch's step is a float32 tensor: from 2^24 on, step_t += 1 changes
 * nothing, so the bias corrections stop changing. */
static mha_optimizer *adamw_slow(mha_module *m) {
    /* betas so close to 1 that beta^t still moves near t = 2^24 */
    mha_adamw_config c;
    mha_adamw_config_init(&c);
    c.beta1 = c.beta2 = 0.99999999;
    mha_optimizer *o = NULL;
    REQUIRE(mha_optimizer_create(mha_module_params(m), ADAMW_CFG(c), &o) == MHA_OK, "create");
    return o;
}

static void test_step_saturates(void) {
    /* The parameters start at zero, so that the step's update is all they
     * hold after it: a bias correction's change shows in their bits. */
    mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION, 3, 4, 4, 0.0, 2, 1);
    mha_module *m = NULL;
    REQUIRE(mha_module_create(&c, &m) == MHA_OK, "module");
    mha_optimizer *o = adamw_slow(m);
    set_grads(m, 400);
    REQUIRE(mha_optimizer_step(o) == MHA_OK, "step");
    REQUIRE(mha_optimizer_save(o, tmp_path("s_state")) == MHA_OK, "save");
    /* t = 2^24 for the first three; 16777100 is 116 steps short */
    const char *steps[4] = {"16777215", "16777300", "16777216", "16777100"};
    mha_module *mods[4];
    for (int k = 0; k < 4; k++) {
        const edit e = {.key = "step", .val = steps[k]};
        rewrite(tmp_path("s_state"), tmp_path("s_edit"), &e);
        REQUIRE(mha_module_create(&c, &mods[k]) == MHA_OK, "module");
        mha_optimizer *ok = adamw_slow(mods[k]);
        REQUIRE(mha_optimizer_load(ok, tmp_path("s_edit")) == MHA_OK, "load: %s",
                mha_last_error());
        CHECK(mha_optimizer_step_count(ok) == strtoll(steps[k], NULL, 10), "step restored");
        set_grads(mods[k], 401);
        REQUIRE(mha_optimizer_step(ok) == MHA_OK, "step");
        mha_optimizer_free(ok);
    }
    CHECK(same_params(mods[0], mods[1]) && same_params(mods[0], mods[2]),
          "bias corrections stop at step 2^24");
    CHECK(!same_params(mods[0], mods[3]), "the test cannot see the step");
    for (int k = 0; k < 4; k++) mha_module_free(mods[k]);
    mha_optimizer_free(o);
    mha_module_free(m);
}

/* The same bits with 1 and 2 threads (a module large enough to be split). */
static void test_threads(void) {
#if defined(MHA_HAVE_OPENMP)
    const int threads = mha_runtime_threads();
    mha_module *mods[2];
    for (int t = 0; t < 2; t++) {
        REQUIRE(mha_runtime_set_threads(t + 1) == MHA_OK, "threads");
        mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION, 160, 160, 4, 0.0, 4, 1);
        REQUIRE(mha_module_create_seeded(&c, 8, &mods[t]) == MHA_OK, "module");
        mha_optimizer *a = adamw(mods[t], 1e-2, 1), *s = sgd(mods[t], 0.01, 0.9, 0, 1, 0.01);
        for (int k = 0; k < 3; k++) {
            set_grads(mods[t], 500u + (unsigned)k);
            REQUIRE(mha_optimizer_step(a) == MHA_OK && mha_optimizer_step(s) == MHA_OK, "step");
        }
        mha_optimizer_free(a);
        mha_optimizer_free(s);
    }
    CHECK(same_params(mods[0], mods[1]), "1 and 2 threads differ");
    mha_module_free(mods[0]);
    mha_module_free(mods[1]);
    mha_runtime_set_threads(threads);
#endif
}

int main(void) {
    REQUIRE(mkdtemp(tmpdir) != NULL, "mkdtemp");
    test_config_defaults();
    test_config_validation();
    test_accessors();
    test_arithmetic();
    test_nonfinite();
    test_resume();
    test_load_errors();
    test_step_saturates();
    test_threads();
    /* clean up */
    const char *names[] = {"nf_before", "nf_after", "r_module", "r_state", "r_state2",
                           "lf_before", "lf_after", "e_adamw", "e_sgd", "e_bad", "e_bad2",
                           "e_module", "s_state", "s_edit"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    rmdir(tmpdir);
    return TEST_END("test_optim");
}
