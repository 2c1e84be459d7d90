/* test_nomem.c — allocation failure is a status, everywhere.
 *
 * The injection loop of SQLite's and libuv's test suites: for N = 1, 2, ...
 * the library's Nth allocation from the start of an operation fails
 * (mha__alloc_fail_after, an internal hook of libmha.a; a GEMM backend call
 * counts as one allocation, and cJSON's allocations are routed through the
 * same count by this program's cJSON hooks), until the operation succeeds
 * without the failure having fired. Every failing N must return
 * MHA_ERR_NOMEM with "out of memory" and a size in the detail; the same
 * call again, without injection, must then succeed and give the bits an
 * uninjected run gives (the objects stay usable); and nothing may leak,
 * which the sanitizer build (LeakSanitizer) checks at exit.
 *
 * Operations: generator create; module create / create_seeded / init of
 * every class; forward (eval, training with PyTorch's mask, Philox), the
 * traced forward; save, load, safetensors from memory, from a file and
 * opened; tape forward + backward; AdamW and SGD create / step / save /
 * load; GPT create, forward (eval, training), KV-cache and full-forward
 * generation, save and load (the book's names and Hugging Face's);
 * tokenizer parse, encode, decode; the simplified attention. */
#include "common/common.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <unistd.h>

/* ---- cJSON through the injection count ------------------------------------ */

static void *cjson_malloc(size_t n) { return mha__alloc_inject() ? NULL : malloc(n); }

/* ---- the loop ----------------------------------------------------------------- */

typedef struct op op;
struct op {
    const char *name;
    void (*setup)(op *);    /* uninjected: what the call needs */
    mha_status (*run)(op *); /* the injected call; must free what it made when failing */
    void (*keep)(op *);     /* after a success: record its result in out (for compare) */
    void (*teardown)(op *); /* frees what setup and a successful run made */
    void *state;
    unsigned char *out;     /* the result bytes of a success */
    size_t out_len;
};

static char tmpdir[64];

static void path_in_tmp(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void set_out(op *o, const void *p, size_t n) {
    free(o->out);
    o->out = malloc(n ? n : 1);
    REQUIRE(o->out != NULL, "malloc");
    memcpy(o->out, p, n);
    o->out_len = n;
}

static bool detail_ok(void) {
    const char *d = mha_last_error();
    return strstr(d, "out of memory") && (strstr(d, "bytes") || strstr(d, "cJSON"));
}

static long total_points;

/* Runs op uninjected once (the reference result), then the loop. */
static void inject_loop(op *o) {
    if (o->setup) o->setup(o);
    mha_status st = o->run(o);
    REQUIRE(st == MHA_OK, "%s uninjected: %s", o->name, mha_last_error());
    o->keep(o);
    unsigned char *ref = o->out;
    size_t ref_len = o->out_len;
    o->out = NULL;
    o->teardown(o);

    long n = 1, swallowed = 0;
    for (;; n++) {
        if (o->setup) o->setup(o);
        mha__alloc_fail_after(n);
        st = o->run(o);
        const long fired = mha__alloc_failures_injected();
        mha__alloc_fail_after(0);
        if (st == MHA_OK) {
            o->keep(o);
            CHECK(o->out_len == ref_len && memcmp(o->out, ref, ref_len) == 0,
                  "%s: N = %ld: result differs from the uninjected run", o->name, n);
            o->teardown(o);
            if (!fired) break;
            swallowed++; /* a failure the library got around: fine if the bits agree */
            continue;
        }
        CHECK(fired == 1, "%s: N = %ld: failed (%s) without the injected failure", o->name, n,
              mha_last_error());
        CHECK(st == MHA_ERR_NOMEM && detail_ok(), "%s: N = %ld: %s: \"%s\"", o->name, n,
              mha_status_name(st), mha_last_error());
        /* the objects are usable: the same call, uninjected */
        st = o->run(o);
        CHECK(st == MHA_OK, "%s: N = %ld: the call after the failure: %s", o->name, n,
              mha_last_error());
        if (st == MHA_OK) {
            o->keep(o);
            CHECK(o->out_len == ref_len && memcmp(o->out, ref, ref_len) == 0,
                  "%s: N = %ld: after the failure the result differs", o->name, n);
        }
        o->teardown(o);
        if (n > 200000) {
            CHECK(0, "%s: no success after %ld injected failures", o->name, n);
            break;
        }
    }
    printf("%-40s %6ld injection points%s\n", o->name, n - 1,
           swallowed ? " (some failures worked around)" : "");
    total_points += n - 1;
    free(ref);
    free(o->out);
    o->out = NULL;
}

/* ---- modules ------------------------------------------------------------------ */

typedef struct {
    mha_config cfg;
    mha_module *m;
    mha_generator *g;
    mha_tape *tape;
    mha_optimizer *opt;
    mha_st *st;
    int mode; /* per operation */
    int64_t B, T;
    float *x, *y, *dy, *dx;
    char path[128];
} mod_state;

static mha_config config_of(mha_kind k) {
    switch (k) {
    case MHA_SELF_ATTENTION_V1: return test_config(k, 5, 4, 0, 0.0, 1, 0);
    case MHA_SELF_ATTENTION_V2: return test_config(k, 5, 4, 0, 0.0, 1, 1);
    case MHA_CAUSAL_ATTENTION: return test_config(k, 5, 4, 8, 0.25, 1, 1);
    case MHA_MULTI_HEAD_ATTENTION_WRAPPER: return test_config(k, 5, 4, 8, 0.25, 2, 0);
    default: return test_config(MHA_MULTI_HEAD_ATTENTION, 6, 8, 8, 0.25, 2, 1);
    }
}

static void keep_params(op *o) {
    mod_state *s = o->state;
    const int64_t n = mha_params_scalars(mha_module_params(s->m));
    float *buf = malloc((size_t)n * sizeof(float) + 1);
    size_t at = 0;
    for (size_t i = 0; i < mha_params_count(mha_module_params(s->m)); i++) {
        mha_param p;
        REQUIRE(mha_params_get(mha_module_params(s->m), i, &p) == MHA_OK, "param");
        memcpy(buf + at, p.data, (size_t)p.numel * sizeof(float));
        at += (size_t)p.numel;
    }
    set_out(o, buf, at * sizeof(float));
    free(buf);
}

static void free_mod_state(mod_state *s) {
    mha_optimizer_free(s->opt);
    mha_module_free(s->m);
    mha_generator_free(s->g);
    mha_tape_free(s->tape);
    mha_st_free(s->st);
    free(s->x), free(s->y), free(s->dy), free(s->dx);
    s->opt = NULL, s->m = NULL, s->g = NULL, s->tape = NULL, s->st = NULL;
    s->x = s->y = s->dy = s->dx = NULL;
}
static void teardown_mod(op *o) { free_mod_state(o->state); }

/* create (mode 0), create_seeded (1), create then init from a generator (2) */
static mha_status run_create(op *o) {
    mod_state *s = o->state;
    mha_status st;
    if (s->mode == 1) return mha_module_create_seeded(&s->cfg, 123, &s->m);
    st = mha_module_create(&s->cfg, &s->m);
    if (st != MHA_OK || s->mode == 0) return st;
    mha_generator *g = NULL;
    if ((st = mha_generator_create(7, &g)) == MHA_OK) st = mha_module_init(s->m, g);
    mha_generator_free(g);
    if (st != MHA_OK) {
        mha_module_free(s->m);
        s->m = NULL;
    }
    return st;
}

static void setup_module(op *o) {
    mod_state *s = o->state;
    REQUIRE(mha_module_create_seeded(&s->cfg, 123, &s->m) == MHA_OK, "create: %s", mha_last_error());
    REQUIRE(mha_generator_create(99, &s->g) == MHA_OK, "generator");
    REQUIRE(mha_tape_create(&s->tape) == MHA_OK, "tape");
    const int64_t W = mha_config_output_width(&s->cfg);
    s->B = mha_config_is_batched(&s->cfg) ? 2 : 1;
    s->T = mha_config_is_batched(&s->cfg) ? 7 : 5;
    const size_t nx = (size_t)(s->B * s->T * s->cfg.d_in), ny = (size_t)(s->B * s->T * W);
    s->x = malloc(nx * sizeof(float));
    s->dx = calloc(nx, sizeof(float));
    s->y = calloc(ny, sizeof(float));
    s->dy = malloc(ny * sizeof(float));
    test_fill(s->x, nx, 1);
    test_fill(s->dy, ny, 2);
}

static size_t y_len(const mod_state *s) {
    return (size_t)(s->B * s->T * mha_config_output_width(&s->cfg)) * sizeof(float);
}
static void keep_y(op *o) {
    mod_state *s = o->state;
    set_out(o, s->y, y_len(s));
}

/* forward: eval (0), PyTorch's mask (1), Philox (2), traced (3) */
static mha_status run_forward(op *o) {
    mod_state *s = o->state;
    mha_generator_manual_seed(s->g, 5);
    if (s->mode == 3) return mha_module_forward_traced(s->m, s->y, s->x, s->B, s->T, NULL, NULL, NULL);
    mha_forward_opts fo = {.training = s->mode > 0,
                           .rng = s->mode == 2 ? MHA_DROPOUT_RNG_PHILOX : MHA_DROPOUT_RNG_TORCH,
                           .generator = s->g,
                           .philox_seed = 11,
                           .philox_offset = 3};
    return mha_module_forward_ex(s->m, s->y, s->x, s->B, s->T, s->mode ? &fo : NULL, NULL, 0);
}

/* what a training step does: zero_grad, forward_tape, backward (the mode's
 * mask as above); the result: y, dx and every gradient */
static mha_status run_backward(op *o) {
    mod_state *s = o->state;
    mha_generator_manual_seed(s->g, 5);
    mha_forward_opts fo = {.training = s->mode > 0,
                           .rng = s->mode == 2 ? MHA_DROPOUT_RNG_PHILOX : MHA_DROPOUT_RNG_TORCH,
                           .generator = s->g,
                           .philox_seed = 11,
                           .philox_offset = 3};
    mha_status st = mha_params_zero_grad(mha_module_params(s->m));
    if (st == MHA_OK)
        st = mha_module_forward_tape(s->m, s->y, s->x, s->B, s->T, &fo, s->tape, NULL, 0);
    if (st == MHA_OK) st = mha_module_backward(s->m, s->tape, s->dx, s->x, s->dy, NULL, 0);
    return st;
}
static void keep_grads(op *o) {
    mod_state *s = o->state;
    const size_t nx = (size_t)(s->B * s->T * s->cfg.d_in) * sizeof(float), ny = y_len(s);
    const size_t ng = (size_t)mha_params_scalars(mha_module_params(s->m)) * sizeof(float);
    unsigned char *buf = malloc(nx + ny + ng);
    memcpy(buf, s->y, ny);
    memcpy(buf + ny, s->dx, nx);
    size_t at = nx + ny;
    for (size_t i = 0; i < mha_params_count(mha_module_params(s->m)); i++) {
        mha_param p;
        REQUIRE(mha_params_grad(mha_module_params(s->m), i, &p) == MHA_OK, "grad");
        memcpy(buf + at, p.data, (size_t)p.numel * sizeof(float));
        at += (size_t)p.numel * sizeof(float);
    }
    set_out(o, buf, at);
    free(buf);
}

/* save (the file's bytes are the result) */
static mha_status run_save(op *o) {
    mod_state *s = o->state;
    path_in_tmp(s->path, sizeof s->path, "m.safetensors");
    return mha_module_save(s->m, s->path);
}
static void keep_file(op *o) {
    mod_state *s = o->state;
    FILE *f = fopen(s->path, "rb");
    REQUIRE(f != NULL, "open %s", s->path);
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    set_out(o, buf, n);
}

/* load: mha_module_load (0), mha_st_read_file + from_st (1), mha_st_parse
 * of the bytes + from_st (2), mha_st_open + read_f32 of every tensor (3) */
static void setup_load(op *o) {
    mod_state *s = o->state;
    mha_module *m = NULL;
    REQUIRE(mha_module_create_seeded(&s->cfg, 123, &m) == MHA_OK, "create");
    path_in_tmp(s->path, sizeof s->path, "load.safetensors");
    REQUIRE(mha_module_save(m, s->path) == MHA_OK, "save: %s", mha_last_error());
    mha_module_free(m);
}
static mha_status run_load(op *o) {
    mod_state *s = o->state;
    mha_status st;
    mha_st *f = NULL;
    switch (s->mode) {
    case 0: return mha_module_load(s->path, &s->m);
    case 1: st = mha_st_read_file(s->path, &f); break;
    case 2: {
        FILE *fp = fopen(s->path, "rb");
        unsigned char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        st = mha_st_parse(buf, n, &f);
        break;
    }
    default: {
        st = mha_st_open(s->path, &f);
        float tmp[4096];
        for (size_t i = 0; st == MHA_OK && i < mha_st_count(f); i++) {
            mha_st_tensor t;
            st = mha_st_get(f, i, &t);
            if (st == MHA_OK) st = mha_st_read_f32(f, &t, tmp, t.numel);
        }
        break;
    }
    }
    if (st == MHA_OK) st = mha_module_from_st(f, &s->m);
    mha_st_free(f);
    return st;
}

/* optimizers: AdamW (mode 0) or SGD with momentum (1): create, two steps,
 * save, load into a second optimizer, a third step there */
static mha_status make_opt(mod_state *s, mha_optimizer **o) {
    if (s->mode == 0) {
        mha_adamw_config c;
        mha_adamw_config_init(&c);
        c.amsgrad = 1;
        return mha_optimizer_create(mha_module_params(s->m), ADAMW_CFG(c), o);
    }
    mha_sgd_config c;
    mha_sgd_config_init(&c);
    c.lr = 0.1;
    c.momentum = 0.9;
    return mha_optimizer_create(mha_module_params(s->m), SGD_CFG(c), o);
}
static void setup_opt(op *o) {
    mod_state *s = o->state;
    setup_module(o);
    for (size_t i = 0; i < mha_params_count(mha_module_params(s->m)); i++) {
        mha_param p;
        REQUIRE(mha_params_grad(mha_module_params(s->m), i, &p) == MHA_OK, "grad");
        test_fill(p.data, (size_t)p.numel, 40 + (unsigned)i);
    }
    path_in_tmp(s->path, sizeof s->path, "opt.safetensors");
}
static mha_status run_opt(op *o) {
    mod_state *s = o->state;
    /* parameters back to the seeded ones, so that a rerun starts alike */
    mha_module *fresh = NULL;
    mha_status st = mha_module_create_seeded(&s->cfg, 123, &fresh);
    if (st != MHA_OK) return st;
    for (size_t i = 0; i < mha_params_count(mha_module_params(s->m)); i++) {
        mha_param a, b;
        mha_params_get(mha_module_params(s->m), i, &a);
        mha_params_get(mha_module_params(fresh), i, &b);
        memcpy(a.data, b.data, (size_t)a.numel * sizeof(float));
    }
    mha_module_free(fresh);
    mha_optimizer *o1 = NULL, *o2 = NULL;
    st = make_opt(s, &o1);
    if (st == MHA_OK) st = mha_optimizer_step(o1);
    if (st == MHA_OK) st = mha_optimizer_step(o1);
    if (st == MHA_OK) st = mha_optimizer_save(o1, s->path);
    if (st == MHA_OK) st = make_opt(s, &o2);
    if (st == MHA_OK) st = mha_optimizer_load(o2, s->path);
    if (st == MHA_OK) st = mha_optimizer_step(o2);
    mha_optimizer_free(o1);
    mha_optimizer_free(o2);
    return st;
}

/* ---- GPT ------------------------------------------------------------------------ */

typedef struct {
    mha_gpt_config cfg;
    mha_gpt *m;
    mha_generator *g;
    int mode;
    int32_t ids[12];
    float *logits;
    mha_gpt_tape *tape;
    float loss;
    int32_t gen[32];
    int64_t n_gen;
    float *init; /* training: the parameters to start each run from */
    char path[128];
} gpt_state;

static void gpt_cfg(gpt_state *s, mha_gpt_kind kind) {
    mha_gpt_config_init(&s->cfg, kind);
    s->cfg.vocab_size = 37;
    s->cfg.context_length = 12;
    s->cfg.emb_dim = 16;
    s->cfg.n_heads = 2;
    s->cfg.n_layers = 2;
    s->cfg.drop_rate = 0.1;
    s->cfg.qkv_bias = 1;
}

static void teardown_gpt(op *o) {
    gpt_state *s = o->state;
    mha_gpt_free(s->m);
    mha_generator_free(s->g);
    mha_gpt_tape_free(s->tape);
    free(s->logits);
    free(s->init);
    s->m = NULL, s->g = NULL, s->logits = NULL, s->init = NULL, s->tape = NULL;
}

/* The result: head_len bytes of head, then every parameter's floats (or,
 * grads, every gradient's) in order. */
static void keep_gpt_set(op *o, bool grads, const void *head, size_t head_len) {
    gpt_state *s = o->state;
    mha_params *ps = mha_gpt_params(s->m);
    unsigned char *buf = malloc((size_t)mha_params_scalars(ps) * 4 * 2 + 64);
    memcpy(buf, head, head_len);
    size_t at = head_len;
    for (size_t i = 0; i < mha_params_count(ps); i++) {
        mha_param p;
        REQUIRE((grads ? mha_params_grad(ps, i, &p) : mha_params_get(ps, i, &p)) == MHA_OK, "param");
        memcpy(buf + at, p.data, (size_t)p.numel * 4);
        at += (size_t)p.numel * 4;
    }
    set_out(o, buf, at);
    free(buf);
}
static void keep_gpt_params(op *o) { keep_gpt_set(o, false, "", 0); }

/* The result: every state_dict tensor's bytes as the model holds them
 * (a 16-bit model's too, which has no parameter set). */
static void keep_gpt_weights(op *o) {
    gpt_state *s = o->state;
    size_t n = 0;
    for (size_t i = 0; i < mha_gpt_weights_count(s->m); i++) {
        mha_gpt_weight w;
        REQUIRE(mha_gpt_weight_get(s->m, i, &w) == MHA_OK, "weight");
        n += w.numel * mha_dtype_size(w.dtype);
    }
    unsigned char *buf = malloc(n + 1);
    size_t at = 0;
    for (size_t i = 0; i < mha_gpt_weights_count(s->m); i++) {
        mha_gpt_weight w;
        REQUIRE(mha_gpt_weight_get(s->m, i, &w) == MHA_OK, "weight");
        memcpy(buf + at, w.data, w.numel * mha_dtype_size(w.dtype));
        at += w.numel * mha_dtype_size(w.dtype);
    }
    set_out(o, buf, at);
    free(buf);
}

/* create (0: zero, 1: seeded, 2: create + init, 3: tied head, 4: bf16,
 * create_as + init) */
static mha_status run_gpt_create(op *o) {
    gpt_state *s = o->state;
    if (s->mode == 1) return mha_gpt_create_seeded(&s->cfg, 123, &s->m);
    mha_status st = s->mode == 4 ? mha_gpt_create_as(&s->cfg, 0, MHA_DTYPE_BF16, &s->m)
                                 : mha_gpt_create(&s->cfg, s->mode == 3, &s->m);
    if (st != MHA_OK || (s->mode != 2 && s->mode != 4)) return st;
    mha_generator *g = NULL;
    if ((st = mha_generator_create(7, &g)) == MHA_OK) st = mha_gpt_init(s->m, g);
    mha_generator_free(g);
    if (st != MHA_OK) {
        mha_gpt_free(s->m);
        s->m = NULL;
    }
    return st;
}

static void setup_gpt(op *o) {
    gpt_state *s = o->state;
    REQUIRE(mha_gpt_create_seeded(&s->cfg, 123, &s->m) == MHA_OK, "gpt: %s", mha_last_error());
    REQUIRE(mha_generator_create(3, &s->g) == MHA_OK, "generator");
    for (int i = 0; i < 12; i++) s->ids[i] = (int32_t)((i * 7 + 3) % 37);
    s->logits = calloc(2 * 12 * 37, sizeof(float));
}

/* forward over (2, 6): eval (0), training (1); blocks only (2) */
static mha_status run_gpt_forward(op *o) {
    gpt_state *s = o->state;
    mha_generator_manual_seed(s->g, 9);
    if (s->mode == 2) {
        for (int i = 0; i < 2 * 6 * 16; i++) s->logits[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
        return mha_gpt_blocks_forward(s->m, s->logits, s->logits, 2, 6, NULL);
    }
    return mha_gpt_forward(s->m, s->logits, s->ids, 2, 6, 0, s->mode ? s->g : NULL);
}
static void keep_logits(op *o) {
    gpt_state *s = o->state;
    set_out(o, s->logits, 2 * 12 * 37 * sizeof(float));
}

/* the tape entries over (2, 6) in training mode: forward_tape +
 * cross_entropy + backward (0), the blocks' tape and backward (1); the
 * result is the loss and every gradient */
static mha_status run_gpt_tape(op *o) {
    gpt_state *s = o->state;
    enum { R = 12, V = 37, E = 16 };
    mha_generator_manual_seed(s->g, 9);
    mha_status st = mha_params_zero_grad(mha_gpt_params(s->m));
    if (st == MHA_OK && !s->tape) st = mha_gpt_tape_create(&s->tape);
    if (st != MHA_OK) return st;
    int32_t tgt[R];
    for (int i = 0; i < R; i++) tgt[i] = (int32_t)((i * 5 + 1) % V);
    float d[R * V], y[R * E];
    if (s->mode == 0) {
        if ((st = mha_gpt_forward_tape(s->m, s->logits, s->ids, 2, 6, s->g, s->tape)) != MHA_OK) return st;
        if ((st = mha_cross_entropy(&s->loss, d, s->logits, tgt, R, V)) != MHA_OK) return st;
        return mha_gpt_backward(s->m, s->tape, d);
    }
    for (int i = 0; i < R * E; i++) s->logits[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    if ((st = mha_gpt_blocks_forward_tape(s->m, y, s->logits, 2, 6, s->g, s->tape)) != MHA_OK) return st;
    for (int i = 0; i < R * E; i++) d[i] = (float)((i * 11) % 29) / 14.0f - 1.0f;
    return mha_gpt_blocks_backward(s->m, s->tape, s->logits, d);
}
static void keep_gpt_grads(op *o) {
    gpt_state *s = o->state;
    keep_gpt_set(o, true, &s->loss, sizeof s->loss);
}

/* generation: KV cache greedy (0), cache sampled top-k (1), full forward (2) */
static mha_status run_gpt_generate(op *o) {
    gpt_state *s = o->state;
    mha_generate_opts go;
    mha_generate_opts_init(&go);
    go.max_new_tokens = 6;
    go.use_cache = s->mode != 2;
    if (s->mode == 1) {
        go.temperature = 0.8;
        go.top_k = 5;
        go.seed = 17;
    }
    memset(s->gen, 0, sizeof s->gen);
    mha_status st = mha_gpt_cache_reset(s->m);
    if (st == MHA_OK) st = mha_gpt_generate(s->m, s->gen, &s->n_gen, s->ids, 4, &go, NULL, NULL);
    return st;
}
static void keep_gen(op *o) {
    gpt_state *s = o->state;
    set_out(o, s->gen, sizeof s->gen);
}

/* load: the book's names (mha_gpt_save's file) (0), Hugging Face's (1) */
typedef struct {
    mha_st_entry e[64];
    int64_t shape[64][2];
    char name[64][48];
    float *data[64];
    size_t n;
} hf_file;

static void hf_add(hf_file *f, const char *name, int64_t d0, int64_t d1) {
    const size_t i = f->n++, numel = (size_t)d0 * (size_t)(d1 > 0 ? d1 : 1);
    snprintf(f->name[i], sizeof f->name[i], "%s", name);
    f->shape[i][0] = d0, f->shape[i][1] = d1;
    f->data[i] = malloc(numel * sizeof(float));
    test_fill(f->data[i], numel, (unsigned)i + 1);
    f->e[i] = (mha_st_entry){f->name[i], MHA_DTYPE_F32, d1 > 0 ? 2 : 1, f->shape[i], f->data[i]};
}

/* GPT-2's names, Conv1D (in, out) weights, random values of the right shapes */
static void write_hf(const char *path) {
    const int64_t E = 16, V = 37, C = 12;
    static const struct { const char *name; int d0, d1; } layer[] = {
        {"ln_1.weight", 1, 0}, {"ln_1.bias", 1, 0}, {"attn.c_attn.weight", 1, 3},
        {"attn.c_attn.bias", 3, 0}, {"attn.c_proj.weight", 1, 1}, {"attn.c_proj.bias", 1, 0},
        {"ln_2.weight", 1, 0}, {"ln_2.bias", 1, 0}, {"mlp.c_fc.weight", 1, 4},
        {"mlp.c_fc.bias", 4, 0}, {"mlp.c_proj.weight", 4, 1}, {"mlp.c_proj.bias", 1, 0}};
    hf_file *f = calloc(1, sizeof *f);
    hf_add(f, "wte.weight", V, E);
    hf_add(f, "wpe.weight", C, E);
    for (int l = 0; l < 2; l++)
        for (size_t k = 0; k < sizeof layer / sizeof layer[0]; k++) {
            char nm[48];
            snprintf(nm, sizeof nm, "h.%d.%s", l, layer[k].name);
            hf_add(f, nm, layer[k].d0 * E, layer[k].d1 * E);
        }
    hf_add(f, "ln_f.weight", E, 0);
    hf_add(f, "ln_f.bias", E, 0);
    static const char *const meta[] = {"n_heads", "2"}; /* 16 is no multiple of GPT-2's 64 */
    REQUIRE(mha_st_write_file(path, f->e, f->n, meta, 1) == MHA_OK, "hf: %s", mha_last_error());
    for (size_t i = 0; i < f->n; i++) free(f->data[i]);
    free(f);
}
static void setup_gpt_load(op *o) {
    gpt_state *s = o->state;
    path_in_tmp(s->path, sizeof s->path, s->mode ? "hf.safetensors" : "gpt.safetensors");
    if (s->mode) {
        write_hf(s->path);
        return;
    }
    mha_gpt *m = NULL;
    REQUIRE(mha_gpt_create_seeded(&s->cfg, 5, &m) == MHA_OK, "gpt");
    REQUIRE(mha_gpt_save(m, s->path) == MHA_OK, "save: %s", mha_last_error());
    mha_gpt_free(m);
}
static mha_status run_gpt_load(op *o) {
    gpt_state *s = o->state;
    return mha_gpt_load(s->path, &s->m);
}
static mha_status run_gpt_save(op *o) {
    gpt_state *s = o->state;
    path_in_tmp(s->path, sizeof s->path, "gsave.safetensors");
    return mha_gpt_save(s->m, s->path);
}
static void keep_gpt_file(op *o) {
    gpt_state *s = o->state;
    FILE *f = fopen(s->path, "rb");
    REQUIRE(f != NULL, "open");
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    set_out(o, buf, n);
}

/* ---- tokenizer, generator, simplified attention ---------------------------------- */

typedef struct {
    char *json, *bpe;
    mha_tokenizer *t;
    int mode;
    int32_t ids[64];
    size_t n;
    char text[128];
} tok_state;

/* encoder.json: the 256 byte tokens (GPT-2's byte characters: printable
 * bytes as themselves, the others from U+0100 on) then "ab", "abc" */
static void setup_tok(op *o) {
    tok_state *s = o->state;
    size_t cap = 8192, at = 0;
    s->json = malloc(cap);
    int next = 256;
    at += (size_t)snprintf(s->json + at, cap - at, "{");
    for (int b = 0; b < 256; b++) {
        const int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const int cp = printable ? b : next++;
        char ch[4];
        if (cp == '"' || cp == '\\') ch[0] = '\\', ch[1] = (char)cp, ch[2] = 0;
        else if (cp < 0x80) ch[0] = (char)cp, ch[1] = 0;
        else ch[0] = (char)(0xC0 | (cp >> 6)), ch[1] = (char)(0x80 | (cp & 0x3F)), ch[2] = 0;
        at += (size_t)snprintf(s->json + at, cap - at, "%s\"%s\": %d", b ? ", " : "", ch, b);
    }
    at += (size_t)snprintf(s->json + at, cap - at, ", \"ab\": 256, \"abc\": 257}");
    s->bpe = strdup("#version: 0.2\na b\nab c\n");
    if (s->mode > 0)
        REQUIRE(mha_tokenizer_parse(s->json, strlen(s->json), s->bpe, strlen(s->bpe), &s->t) == MHA_OK,
                "tokenizer: %s", mha_last_error());
}
static void teardown_tok(op *o) {
    tok_state *s = o->state;
    mha_tokenizer_free(s->t);
    free(s->json), free(s->bpe);
    s->t = NULL, s->json = s->bpe = NULL;
}
static const char tok_text[] = "abc abcab, ab! \xc3\xa9t\xc3\xa9 abcabcabc   x";
static mha_status run_tok(op *o) {
    tok_state *s = o->state;
    memset(s->ids, 0, sizeof s->ids);
    memset(s->text, 0, sizeof s->text);
    if (s->mode == 0)
        return mha_tokenizer_parse(s->json, strlen(s->json), s->bpe, strlen(s->bpe), &s->t);
    mha_status st = mha_tokenizer_encode(s->t, tok_text, sizeof tok_text - 1, s->ids, 64, &s->n);
    if (st == MHA_OK && s->mode == 2)
        st = mha_tokenizer_decode(s->t, s->ids, s->n, s->text, sizeof s->text, &s->n);
    return st;
}
static void keep_tok(op *o) {
    tok_state *s = o->state;
    if (s->mode == 0) {
        size_t n = 0;
        REQUIRE(mha_tokenizer_encode(s->t, tok_text, sizeof tok_text - 1, s->ids, 64, &n) == MHA_OK, "encode");
    }
    /* ids, n and text, which lie in this order */
    set_out(o, s->ids, offsetof(tok_state, text) + sizeof s->text - offsetof(tok_state, ids));
}

typedef struct {
    mha_generator *g;
    float out[64];
    int mode;
} misc_state;
static mha_status run_misc(op *o) {
    misc_state *s = o->state;
    float x[5 * 6], dc[5 * 6];
    test_fill(x, 30, 8);
    test_fill(dc, 30, 9);
    switch (s->mode) {
    case 0: {
        mha_status st = mha_generator_create(123, &s->g);
        if (st == MHA_OK) mha_generator_normal(s->g, s->out, 64, 0.0, 1.0);
        return st;
    }
    case 1: return mha_simple_attention_forward(s->out, s->out + 30, x, 5, 6);
    default: return mha_simple_attention_backward(s->out, x, dc, 5, 6);
    }
}
static void keep_misc(op *o) {
    misc_state *s = o->state;
    set_out(o, s->out, sizeof s->out);
}
static void teardown_misc(op *o) {
    misc_state *s = o->state;
    mha_generator_free(s->g);
    s->g = NULL;
}

/* training: the taped forward and loss_backward in training mode, then an
 * optimizer over the model's parameter set (0: AdamW, untied head; 1: SGD
 * with momentum, tied head): create, step, save, load into a second, step */
static void setup_gpt_train(op *o) {
    gpt_state *s = o->state;
    setup_gpt(o);
    if (s->mode == 1) {
        mha_gpt_free(s->m);
        REQUIRE(mha_gpt_create(&s->cfg, 1, &s->m) == MHA_OK && mha_gpt_init(s->m, s->g) == MHA_OK, "tied");
    }
    const mha_params *ps = mha_gpt_params(s->m);
    s->init = malloc((size_t)mha_params_scalars(ps) * 2 * sizeof(float));
    size_t at = 0;
    for (size_t i = 0; i < mha_params_count(ps); i++) {
        mha_param p;
        REQUIRE(mha_params_get(ps, i, &p) == MHA_OK, "param");
        memcpy(s->init + at, p.data, p.numel * sizeof(float));
        at += p.numel;
    }
    path_in_tmp(s->path, sizeof s->path, "gpt_opt.safetensors");
}
static mha_status run_gpt_train(op *o) {
    gpt_state *s = o->state;
    mha_params *ps = mha_gpt_params(s->m);
    size_t at = 0;
    for (size_t i = 0; i < mha_params_count(ps); i++) { /* every run starts alike */
        mha_param p;
        mha_params_get(ps, i, &p);
        memcpy(p.data, s->init + at, p.numel * sizeof(float));
        at += p.numel;
    }
    int32_t tgt[12];
    for (int i = 0; i < 12; i++) tgt[i] = s->ids[(i + 1) % 12];
    mha_generator_manual_seed(s->g, 9);
    mha_gpt_tape *tape = NULL;
    float loss = 0.0f;
    mha_status st = mha_params_zero_grad(ps);
    if (st == MHA_OK) st = mha_gpt_tape_create(&tape);
    if (st == MHA_OK) st = mha_gpt_loss_backward(s->m, &loss, NULL, s->ids, tgt, 2, 6, s->g, tape);
    mha_gpt_tape_free(tape);
    mha_optimizer_config c;
    mha_optimizer_config_init(&c, s->mode ? MHA_OPTIM_SGD : MHA_OPTIM_ADAMW);
    c.sgd.lr = 0.1;
    c.sgd.momentum = 0.9;
    mha_optimizer *o1 = NULL, *o2 = NULL;
    if (st == MHA_OK) st = mha_optimizer_create(ps, &c, &o1);
    if (st == MHA_OK) st = mha_optimizer_step(o1);
    if (st == MHA_OK) st = mha_optimizer_save(o1, s->path);
    if (st == MHA_OK) st = mha_optimizer_create(ps, &c, &o2);
    if (st == MHA_OK) st = mha_optimizer_load(o2, s->path);
    if (st == MHA_OK) st = mha_optimizer_step(o2);
    mha_optimizer_free(o1);
    mha_optimizer_free(o2);
    return st;
}

/* ---- main ----------------------------------------------------------------------- */

int main(void) {
    cJSON_Hooks hooks = {cjson_malloc, free}; /* this program's process, this program's hooks */
    cJSON_InitHooks(&hooks);
    /* The saves fsync their files: in memory (tmpfs) where there is one,
     * the test is about allocations, not disks */
    snprintf(tmpdir, sizeof tmpdir, "/dev/shm/mha_nomem_XXXXXX");
    if (mkdtemp(tmpdir) == NULL) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/mha_nomem_XXXXXX");
        REQUIRE(mkdtemp(tmpdir) != NULL, "mkdtemp");
    }
    /* two threads: the GEMM's tiles go to a team, whose failures must come back */
    (void)mha_runtime_set_threads(2);

    static const char *const fwd_names[] = {"eval", "torch mask", "philox", "traced"};
    for (int k = MHA_SELF_ATTENTION_V1; k <= MHA_MULTI_HEAD_ATTENTION; k++) {
        char name[96];
        mod_state s = {.cfg = config_of((mha_kind)k)};
        const char *kn = mha_kind_name((mha_kind)k);
        for (int mode = 0; mode < 3; mode++) {
            s.mode = mode;
            snprintf(name, sizeof name, "%s create%s", kn, mode == 1 ? "_seeded" : mode == 2 ? " + init" : "");
            op o = {name, NULL, run_create, keep_params, teardown_mod, &s, NULL, 0};
            inject_loop(&o);
        }
        const int batched = mha_config_is_batched(&s.cfg);
        for (int mode = 0; mode < 4; mode++) {
            if ((mode == 1 || mode == 2) && !batched) continue;
            if (mode == 3 && k != MHA_MULTI_HEAD_ATTENTION) continue;
            s.mode = mode;
            snprintf(name, sizeof name, "%s forward (%s)", kn, fwd_names[mode]);
            op o = {name, setup_module, run_forward, keep_y, teardown_mod, &s, NULL, 0};
            inject_loop(&o);
        }
        for (int mode = 0; mode < 3; mode++) {
            if (mode > 0 && !batched) continue;
            s.mode = mode;
            snprintf(name, sizeof name, "%s tape + backward (%s)", kn, fwd_names[mode]);
            op o = {name, setup_module, run_backward, keep_grads, teardown_mod, &s, NULL, 0};
            inject_loop(&o);
        }
        {
            snprintf(name, sizeof name, "%s save", kn);
            op o = {name, setup_module, run_save, keep_file, teardown_mod, &s, NULL, 0};
            inject_loop(&o);
        }
        static const char *const load_names[] = {"mha_module_load", "read_file + from_st",
                                                 "st_parse + from_st", "st_open + read_f32 + from_st"};
        for (int mode = 0; mode < 4; mode++) {
            s.mode = mode;
            snprintf(name, sizeof name, "%s %s", kn, load_names[mode]);
            op o = {name, setup_load, run_load, keep_params, teardown_mod, &s, NULL, 0};
            inject_loop(&o);
        }
        if (k == MHA_MULTI_HEAD_ATTENTION || k == MHA_SELF_ATTENTION_V1)
            for (int mode = 0; mode < 2; mode++) {
                s.mode = mode;
                snprintf(name, sizeof name, "%s %s create/step/save/load/step", kn, mode ? "SGD" : "AdamW");
                op o = {name, setup_opt, run_opt, keep_params, teardown_mod, &s, NULL, 0};
                inject_loop(&o);
            }
    }

    {
        gpt_state s = {0};
        static const char *const cn[] = {"GPTModel create", "GPTModel create_seeded", "GPTModel create + init",
                                         "GPTModel create (tied head)", "GPTModel create_as bf16 + init"};
        for (int mode = 0; mode < 5; mode++) {
            gpt_cfg(&s, MHA_GPT_MODEL);
            s.mode = mode;
            op o = {cn[mode], NULL, run_gpt_create, mode == 4 ? keep_gpt_weights : keep_gpt_params, teardown_gpt,
                    &s, NULL, 0};
            inject_loop(&o);
        }
        static const char *const fn[] = {"GPTModel forward (eval)", "GPTModel forward (training)",
                                         "GPTModel blocks forward"};
        for (int mode = 0; mode < 3; mode++) {
            s.mode = mode;
            op o = {fn[mode], setup_gpt, run_gpt_forward, keep_logits, teardown_gpt, &s, NULL, 0};
            inject_loop(&o);
        }
        static const char *const gn[] = {"GPTModel generate (cache, greedy)", "GPTModel generate (cache, top-k)",
                                         "GPTModel generate (no cache)"};
        for (int mode = 0; mode < 3; mode++) {
            s.mode = mode;
            op o = {gn[mode], setup_gpt, run_gpt_generate, keep_gen, teardown_gpt, &s, NULL, 0};
            inject_loop(&o);
        }
        static const char *const tpn[] = {"GPTModel forward_tape + backward", "GPTModel blocks tape + backward"};
        for (int mode = 0; mode < 2; mode++) {
            s.mode = mode;
            op o = {tpn[mode], setup_gpt, run_gpt_tape, keep_gpt_grads, teardown_gpt, &s, NULL, 0};
            inject_loop(&o);
        }
        {
            op o = {"GPTModel save", setup_gpt, run_gpt_save, keep_gpt_file, teardown_gpt, &s, NULL, 0};
            inject_loop(&o);
        }
        static const char *const ln[] = {"GPTModel load (book names)", "GPTModel load (Hugging Face names)"};
        for (int mode = 0; mode < 2; mode++) {
            s.mode = mode;
            op o = {ln[mode], setup_gpt_load, run_gpt_load, keep_gpt_params, teardown_gpt, &s, NULL, 0};
            inject_loop(&o);
        }
        static const char *const trn[] = {"GPTModel loss_backward + AdamW",
                                          "GPTModel tied: loss_backward + SGD"};
        s.cfg.n_layers = 1; /* each step saves and loads every tensor: one block has them all */
        for (int mode = 0; mode < 2; mode++) {
            s.mode = mode;
            op o = {trn[mode], setup_gpt_train, run_gpt_train, keep_gpt_params, teardown_gpt, &s, NULL, 0};
            inject_loop(&o);
        }
        gpt_cfg(&s, MHA_TRANSFORMER_BLOCK);
        s.mode = 1;
        op o = {"TransformerBlock create_seeded", NULL, run_gpt_create, keep_gpt_params, teardown_gpt, &s, NULL, 0};
        inject_loop(&o);
    }

    {
        tok_state s = {0};
        static const char *const tn[] = {"tokenizer parse", "tokenizer encode", "tokenizer encode + decode"};
        for (int mode = 0; mode < 3; mode++) {
            s.mode = mode;
            op o = {tn[mode], setup_tok, run_tok, keep_tok, teardown_tok, &s, NULL, 0};
            inject_loop(&o);
        }
    }
    {
        misc_state s = {0};
        static const char *const mn[] = {"generator create", "simple attention forward",
                                         "simple attention backward"};
        for (int mode = 0; mode < 3; mode++) {
            s.mode = mode;
            op o = {mn[mode], NULL, run_misc, keep_misc, teardown_misc, &s, NULL, 0};
            inject_loop(&o);
        }
    }

    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    printf("%ld injection points in all\n", total_points);
    return TEST_END("test_nomem");
}
