/* test_api_tour.c — every public function of mha.h called at least once, on
 * tiny shapes, each result checked for its plain meaning (the other tests
 * check the numbers). It exists for scripts/valgrind.sh: one short program
 * under memcheck reaches the whole public API (success paths and a few
 * error paths), so a leak or an uninitialised read anywhere behind mha.h
 * fails the suite. Adding a function to mha.h means calling it here:
 * scripts/valgrind.sh checks with nm that this program references every
 * MHA_API symbol of libmha.so. */
#include "test_util.h"

#include <unistd.h>

#define OK(call) CHECK((call) == MHA_OK, "%s", mha_last_error())

static char dir[64];
static char path_buf[4][128];
static const char *tmp(int slot, const char *name) {
    snprintf(path_buf[slot], sizeof path_buf[slot], "%s/%s", dir, name);
    return path_buf[slot];
}

/* Sums of what the library hands out, printed at the end: printing
 * branches on every bit, so memcheck reports a value that was never
 * written. */
static int trace_steps;
static double trace_sum;
static void on_trace(void *user, const char *step, const char *expr, int ndim,
                     const int64_t *shape, const float *data) {
    (void)user, (void)step, (void)expr;
    size_t n = 1;
    for (int k = 0; k < ndim; k++) n *= (size_t)shape[k];
    for (size_t i = 0; i < n; i++) trace_sum += (double)data[i];
    trace_steps++;
}

static int streamed;
static void on_token(void *user, int32_t id) {
    (void)user;
    streamed += id >= 0;
}

static void tour_status_runtime(void) {
    CHECK(strcmp(mha_version(), MHA_VERSION_STRING) == 0, "version %s", mha_version());
    CHECK(strcmp(mha_status_name(MHA_ERR_SHAPE), "MHA_ERR_SHAPE") == 0, "status name");
    CHECK(strlen(mha_status_string(MHA_ERR_SHAPE)) > 0, "status string");
    CHECK(mha_runtime_set_threads(0) == MHA_ERR_ARGUMENT, "0 threads refused");
    CHECK(strlen(mha_last_error()) > 0, "last error after a failure");
    OK(mha_runtime_set_threads(1));
    CHECK(mha_runtime_threads() >= 1, "threads");
    OK(mha_runtime_set_isa(mha_runtime_isa()));
    CHECK(strlen(mha_runtime_blas()) > 0, "blas");
    /* the projection GEMM (Unstable): (1 2; 3 4) (1 0; 0 1)^T, then a refused leading dimension */
    const float ga[4] = {1, 2, 3, 4}, gb[4] = {1, 0, 0, 1};
    float gc[4] = {0};
    OK(mha_sgemm(0, 1, 2, 2, 2, 1.0f, ga, 2, gb, 2, 0.0f, gc, 2));
    CHECK(gc[0] == 1 && gc[1] == 2 && gc[2] == 3 && gc[3] == 4, "mha_sgemm");
    CHECK(mha_sgemm(0, 0, 2, 2, 2, 1.0f, ga, 1, gb, 2, 0.0f, gc, 2) == MHA_ERR_ARGUMENT, "mha_sgemm lda");
    CHECK(strcmp(mha_dtype_name(MHA_DTYPE_F32), "F32") == 0 && mha_dtype_size(MHA_DTYPE_BF16) == 2,
          "dtypes");
}

static void tour_generator(void) {
    mha_generator *g = NULL;
    OK(mha_generator_create(123, &g));
    mha_generator_manual_seed(g, 5);
    mha_generator_set_variant(g, MHA_RNG_DEFAULT);
    (void)mha_generator_random(g);
    (void)mha_generator_random64(g);
    float a[20], b[20], w[6], bias[2], emb[12];
    mha_generator_uniform(g, a, 20, -1.0, 1.0);
    mha_generator_normal(g, b, 3, 0.0, 1.0);
    mha_generator_normal(g, b, 20, 0.0, 1.0);
    OK(mha_generator_dropout(g, a, b, 20, 0.5));
    OK(mha_generator_linear_init(g, w, bias, 3, 2));
    OK(mha_generator_embedding_init(g, emb, 4, 3, 1));
    CHECK(emb[3] == 0.0f && emb[4] == 0.0f && emb[5] == 0.0f, "padding row zeroed");
    /* torch's state bytes: a copy continues the stream, cached normal included */
    static uint8_t state[MHA_GENERATOR_STATE_BYTES];
    mha_generator *h = NULL;
    OK(mha_generator_create(9, &h));
    OK(mha_generator_get_state(g, state, sizeof state));
    OK(mha_generator_set_state(h, state, sizeof state));
    mha_generator_normal(g, a, 1, 0.0, 1.0);
    mha_generator_normal(h, b, 1, 0.0, 1.0);
    CHECK(a[0] == b[0], "the copy draws the same");
    CHECK(mha_generator_set_state(h, state, 100) == MHA_ERR_ARGUMENT, "short state refused");
    /* a DataLoader's draws: _base_seed, the sampler's seed, its randperm */
    CHECK(mha_generator_int64(g) >= 0, "int64 random_() is non-negative");
    int64_t perm[5], seen = 0;
    OK(mha_generator_randperm(h, perm, 5));
    for (int i = 0; i < 5; i++) seen |= perm[i] >= 0 && perm[i] < 5 ? (int64_t)1 << perm[i] : 0;
    CHECK(seen == 31, "randperm is a permutation");
    CHECK(mha_generator_randperm(h, perm, -1) == MHA_ERR_ARGUMENT, "randperm n < 0 refused");
    mha_generator_skip(h, 1000); /* where 1000 draws leave it */
    mha_generator_free(h);
    mha_generator_free(g);

    float x[12], ctx[12], wts[16], dx[12];
    test_fill(x, 12, 1);
    OK(mha_simple_attention_forward(ctx, wts, x, 4, 3));
    OK(mha_simple_attention_backward(dx, x, ctx, 4, 3));
    float y[12], sc[3] = {1, 2, 3}, sh[3] = {0, 0, 1};
    OK(mha_layernorm_forward(y, x, sc, sh, 4, 3));
    mha_gelu_forward(y, x, 12);
}

/* A module through forward (every flavour), backward, an optimizer, save and
 * load, and safetensors. */
static void tour_module(void) {
    mha_kind kind;
    OK(mha_kind_from_name(mha_kind_name(MHA_MULTI_HEAD_ATTENTION), &kind));
    mha_config c = test_config(kind, 3, 4, 6, 0.25, 2, 1);
    OK(mha_config_validate(&c));
    CHECK(mha_config_is_batched(&c) == 1 && mha_config_output_width(&c) == 4, "config");
    mha_module *m = NULL, *z = NULL;
    OK(mha_module_create_seeded(&c, 123, &m));
    OK(mha_module_create(&c, &z));
    mha_generator *g = NULL;
    OK(mha_generator_create(7, &g));
    OK(mha_module_init(z, g));
    CHECK(mha_module_config_of(m)->num_heads == 2, "module config");
    mha_param p;
    CHECK(mha_params_count(mha_module_params(m)) == 8, "params %zu", mha_params_count(mha_module_params(m)));
    OK(mha_params_get(mha_module_params(m), 0, &p));
    OK(mha_params_find(mha_module_params(m), "out_proj.bias", &p));
    CHECK(mha_params_scalars(mha_module_params(m)) == 3 * (12 + 4) + 16 + 4, "scalars");
    OK(mha_module_check_finite(m));

    enum { B = 2, T = 5 };
    float x[B * T * 3], y[B * T * 4], dy[B * T * 4], dx[B * T * 3], lse[B * 2 * T];
    test_fill(x, B * T * 3, 2);
    test_fill(dy, B * T * 4, 3);
    const size_t ws = mha_module_workspace_size(m, B, T, 1);
    void *work = aligned_alloc(64, (ws + 63) / 64 * 64);
    OK(mha_module_forward(m, y, x, B, T, NULL, NULL, 0));
    OK(mha_module_forward(m, y, x, B, T, g, work, ws));
    mha_forward_opts o = {.training = 1, .rng = MHA_DROPOUT_RNG_PHILOX, .philox_seed = 9, .lse = lse};
    OK(mha_module_forward_ex(m, y, x, B, T, &o, NULL, 0));
    OK(mha_module_forward_traced(m, y, x, B, T, NULL, on_trace, NULL));
    CHECK(trace_steps > 5, "trace steps %d", trace_steps);
    for (int i = 0; i < B * T * 4; i++) trace_sum += (double)y[i];

    mha_tape *tape = NULL;
    OK(mha_tape_create(&tape));
    o = (mha_forward_opts){.training = 1, .rng = MHA_DROPOUT_RNG_TORCH, .generator = g};
    OK(mha_module_forward_tape(m, y, x, B, T, &o, tape, NULL, 0));
    CHECK(mha_tape_bytes(tape) > 0, "tape bytes");
    const size_t bws = mha_module_backward_workspace_size(m, B, T);
    void *bwork = aligned_alloc(64, (bws + 63) / 64 * 64);
    OK(mha_module_backward(m, tape, dx, x, dy, bwork, bws));
    OK(mha_params_grad(mha_module_params(m), 0, &p));
    OK(mha_params_find_grad(mha_module_params(m), "W_key.weight", &p));
    CHECK(p.data[0] != 0.0f, "a gradient");
    {
        /* the gradients are one buffer laid out as the parameters */
        size_t ng = 0;
        const float *gb = mha_params_grad_buffer(mha_module_params(m), &ng);
        mha_param w, w0;
        OK(mha_params_find(mha_module_params(m), "W_key.weight", &w));
        OK(mha_params_get(mha_module_params(m), 0, &w0));
        CHECK(gb && ng == (size_t)mha_params_scalars(mha_module_params(m)) && p.data - gb == w.data - w0.data,
              "gradient buffer");
    }

    mha_adamw_config ac;
    mha_adamw_config_init(&ac);
    ac.amsgrad = 1;
    mha_optimizer *opt = NULL;
    OK(mha_optimizer_create(mha_module_params(m), ADAMW_CFG(ac), &opt));
    OK(mha_optimizer_step(opt));
    OK(mha_optimizer_set_lr(opt, mha_optimizer_lr(opt) / 2));
    OK(mha_optimizer_adamw_config(opt, &ac));
    CHECK(strcmp(mha_optimizer_name(opt), "AdamW") == 0 && mha_optimizer_step_count(opt) == 1,
          "optimizer");
    OK(mha_optimizer_save(opt, tmp(0, "adamw.safetensors")));
    OK(mha_optimizer_load(opt, tmp(0, "adamw.safetensors")));
    mha_optimizer_free(opt);
    mha_optimizer_config oc;
    mha_optimizer_config_init(&oc, MHA_OPTIM_SGD);
    oc.sgd.lr = 0.1;
    oc.sgd.momentum = 0.9;
    OK(mha_optimizer_create(mha_module_params(m), &oc, &opt));
    mha_sgd_config sc;
    OK(mha_params_zero_grad(mha_module_params(m)));
    OK(mha_optimizer_step(opt));
    OK(mha_optimizer_sgd_config(opt, &sc));
    OK(mha_optimizer_save(opt, tmp(0, "sgd.safetensors")));
    CHECK(mha_optimizer_load(opt, tmp(0, "adamw.safetensors")) == MHA_ERR_FORMAT, "wrong optimizer");
    mha_optimizer_free(opt);

    /* safetensors: the module's file through every reader */
    OK(mha_module_save(m, tmp(0, "m.safetensors")));
    mha_module *l = NULL;
    OK(mha_module_load(tmp(0, "m.safetensors"), &l));
    mha_module_free(l);
    mha_st *st = NULL, *so = NULL;
    OK(mha_st_read_file(tmp(0, "m.safetensors"), &st));
    OK(mha_module_from_st(st, &l));
    CHECK(mha_st_count(st) == 9 && mha_st_metadata_count(st) >= 7, "st counts");
    CHECK(strcmp(mha_st_metadata(st, "module"), "MultiHeadAttention") == 0, "st metadata");
    {
        int64_t din = 0;
        double drop = -1.0;
        int bias = -1;
        OK(mha_st_metadata_int(st, "d_in", 1, 1 << 24, &din));
        OK(mha_st_metadata_double(st, "dropout", &drop));
        OK(mha_st_metadata_bool(st, "qkv_bias", &bias));
        CHECK(din == 3 && drop >= 0.0 && (bias == 0 || bias == 1), "typed metadata");
    }
    const char *key, *value;
    OK(mha_st_metadata_get(st, 0, &key, &value));
    mha_st_tensor t;
    float buf[36];
    OK(mha_st_get(st, 1, &t));
    OK(mha_st_find(st, "W_query.weight", &t));
    OK(mha_st_tensor_to_f32(&t, buf, t.numel));
    OK(mha_st_open(tmp(0, "m.safetensors"), &so));
    OK(mha_st_find(so, "W_query.weight", &t));
    OK(mha_st_read_f32(so, &t, buf, t.numel));
    OK(mha_st_read_f32_part(so, &t, 1, buf, 2));
    const int64_t shape[2] = {2, 3};
    const mha_st_entry e = {"x", MHA_DTYPE_F32, 2, shape, x};
    const char *const meta[2] = {"k", "v"};
    OK(mha_st_write_file(tmp(0, "x.safetensors"), &e, 1, meta, 1));
    mha_st_free(st);
    mha_st_free(so);
    FILE *f = fopen(tmp(0, "x.safetensors"), "rb");
    REQUIRE(f != NULL, "cannot reopen %s", tmp(0, "x.safetensors"));
    char raw[256];
    const size_t nraw = fread(raw, 1, sizeof raw, f);
    fclose(f);
    OK(mha_st_parse(raw, nraw, &st));
    mha_st_free(st);
    CHECK(mha_st_parse(raw, nraw - 1, &st) == MHA_ERR_FORMAT && st == NULL, "truncated refused");

    free(work);
    free(bwork);
    mha_tape_free(tape);
    mha_module_free(l);
    mha_module_free(z);
    mha_module_free(m);
    mha_generator_free(g);
}

/* mha_tree_sum's leaf: the one vector, user's */
static mha_status tour_leaf(void *user, int64_t i, const float **v) {
    (void)i;
    *v = user;
    return MHA_OK;
}

static void tour_gpt(void) {
    mha_gpt_kind kind;
    OK(mha_gpt_kind_from_name(mha_gpt_kind_name(MHA_GPT_MODEL), &kind));
    mha_gpt_config c;
    mha_gpt_config_init(&c, kind);
    c.vocab_size = 16, c.context_length = 8, c.emb_dim = 8, c.n_heads = 2, c.n_layers = 1;
    OK(mha_gpt_config_validate(&c));
    mha_gpt *m = NULL, *tied = NULL, *l = NULL;
    OK(mha_gpt_create_seeded(&c, 123, &m));
    OK(mha_gpt_create(&c, 1, &tied));
    mha_generator *g = NULL;
    OK(mha_generator_create(3, &g));
    OK(mha_gpt_init(tied, g));
    CHECK(mha_gpt_head_tied(tied) == 1 && mha_gpt_config_of(tied)->n_layers == 1, "tied");
    mha_param p;
    OK(mha_params_get(mha_gpt_params(m), mha_params_count(mha_gpt_params(m)) - 1, &p));
    OK(mha_params_find(mha_gpt_params(m), "tok_emb.weight", &p));
    CHECK(mha_params_scalars(mha_gpt_params(m)) > mha_params_scalars(mha_gpt_params(tied)), "scalars");

    const int32_t ids[6] = {1, 5, 9, 2, 15, 0};
    float logits[2 * 3 * 16], h[2 * 3 * 8];
    OK(mha_gpt_forward(m, logits, ids, 2, 3, 0, NULL));
    OK(mha_gpt_forward(m, logits, ids, 2, 3, 1, g));
    test_fill(h, 2 * 3 * 8, 4);
    OK(mha_gpt_blocks_forward(m, h, h, 2, 3, g));
    OK(mha_gpt_cache_reset(m));
    OK(mha_gpt_cache_feed(m, logits, ids, 4));
    OK(mha_gpt_cache_feed(m, logits, ids + 4, 1));
    CHECK(mha_gpt_cache_length(m) == 5, "cache length");

    mha_generate_opts o;
    mha_generate_opts_init(&o);
    o.max_new_tokens = 6; /* passes context_length: the window slides */
    int32_t out[16];
    int64_t n = 0;
    OK(mha_gpt_generate(m, out, &n, ids, 3, &o, on_token, NULL));
    o.temperature = 0.8, o.top_k = 4, o.use_cache = 0, o.seed = 11;
    OK(mha_gpt_generate(m, out, &n, ids, 3, &o, NULL, NULL));
    CHECK(n == 9 && streamed == 6, "generated %lld, streamed %d", (long long)n, streamed);

    OK(mha_gpt_save(m, tmp(0, "gpt.safetensors")));
    OK(mha_gpt_load(tmp(0, "gpt.safetensors"), &l));
    mha_gpt_free(l);

    /* 16-bit weights: load, convert, save, read back, forward */
    OK(mha_gpt_load_as(tmp(0, "gpt.safetensors"), MHA_DTYPE_BF16, &l));
    CHECK(mha_gpt_weights_dtype(l) == MHA_DTYPE_BF16, "bf16 model");
    CHECK(mha_gpt_weights_bytes(l) < mha_gpt_weights_bytes(m), "bf16 bytes");
    mha_gpt_weight w;
    OK(mha_gpt_weight_get(l, 0, &w));
    CHECK(mha_gpt_weights_count(l) > 1 && w.dtype == MHA_DTYPE_BF16 && !strcmp(w.name, "tok_emb.weight"), "weight 0");
    OK(mha_gpt_forward(l, logits, ids, 2, 3, 0, NULL));
    CHECK(mha_gpt_params(l) == NULL, "a bf16 model has no parameter set");
    {
        mha_gpt_tape *t16 = NULL;
        OK(mha_gpt_tape_create(&t16));
        CHECK(mha_gpt_forward_tape(l, logits, ids, 2, 3, NULL, t16) == MHA_ERR_UNSUPPORTED, "bf16 records no tape");
        mha_gpt_tape_free(t16);
    }
    OK(mha_gpt_save(l, tmp(0, "gpt16.safetensors")));
    mha_gpt_free(l);
    OK(mha_gpt_convert(m, MHA_DTYPE_F16, &l));
    mha_gpt_free(l);
    {
        mha_st *s16 = NULL;
        OK(mha_st_open(tmp(0, "gpt16.safetensors"), &s16));
        OK(mha_gpt_from_st_as(s16, MHA_DTYPE_BF16, &l));
        mha_st_free(s16);
        mha_gpt_free(l);
    }

    /* 16-bit models drawn directly (GPTModel untied and tied, and a
     * TransformerBlock): the bits of the F32 draw converted, the generator
     * left where the F32 draw leaves it */
    for (int v = 0; v < 6; v++) {
        const mha_dtype dt = v % 2 ? MHA_DTYPE_F16 : MHA_DTYPE_BF16;
        const int tie = v / 2 == 1;
        mha_gpt_config cc = c;
        if (v / 2 == 2) mha_gpt_config_init(&cc, MHA_TRANSFORMER_BLOCK), cc.emb_dim = 8, cc.n_heads = 2;
        mha_gpt *f = NULL, *conv = NULL, *drawn = NULL;
        mha_generator *g1 = NULL, *g2 = NULL;
        OK(mha_gpt_create(&cc, tie, &f));
        OK(mha_gpt_create_as(&cc, tie, dt, &drawn));
        OK(mha_generator_create(5, &g1));
        OK(mha_generator_create(5, &g2));
        OK(mha_gpt_init(f, g1));
        OK(mha_gpt_init(drawn, g2));
        OK(mha_gpt_convert(f, dt, &conv));
        CHECK(mha_gpt_weights_count(conv) == mha_gpt_weights_count(drawn) && mha_gpt_weights_dtype(drawn) == dt,
              "drawn 16-bit model %d: its tensors", v);
        for (size_t i = 0; i < mha_gpt_weights_count(conv); i++) {
            mha_gpt_weight a, b;
            OK(mha_gpt_weight_get(conv, i, &a));
            OK(mha_gpt_weight_get(drawn, i, &b));
            CHECK(!strcmp(a.name, b.name) && a.dtype == b.dtype && a.numel == b.numel &&
                      !memcmp(a.data, b.data, a.numel * mha_dtype_size(a.dtype)),
                  "drawn 16-bit model %d: tensor %s differs from the F32 draw converted", v, a.name);
        }
        CHECK(mha_generator_random64(g1) == mha_generator_random64(g2), "drawn 16-bit model %d: the generator", v);
        mha_generator_free(g1);
        mha_generator_free(g2);
        mha_gpt_free(f);
        mha_gpt_free(conv);
        mha_gpt_free(drawn);
    }
    CHECK(mha_gpt_create_as(&c, 0, MHA_DTYPE_I32, &l) == MHA_ERR_DTYPE && l == NULL, "an I32 model");

    /* training: taped forwards, backward, cross-entropy, optimizers */
    mha_gpt_tape *tape = NULL;
    OK(mha_gpt_tape_create(&tape));
    OK(mha_params_zero_grad(mha_gpt_params(tied)));
    const int32_t targets[6] = {5, 9, 2, 15, 0, -100};
    float loss = 0.0f, dlogits[2 * 3 * 16];
    OK(mha_gpt_forward_tape(tied, logits, ids, 2, 3, g, tape));
    CHECK(mha_gpt_tape_bytes(tape) > 0, "tape bytes");
    OK(mha_cross_entropy(&loss, dlogits, logits, targets, 6, 16));
    OK(mha_gpt_backward(tied, tape, dlogits));
    OK(mha_gpt_loss_backward(tied, &loss, NULL, ids, targets, 2, 3, NULL, tape));
    CHECK(loss > 0.0f, "loss %g", (double)loss);
    /* data parallel: the second window of the batch alone, summed in the
     * fixed tree (one part, one leaf: the gradient buffer itself) */
    double loss_sum = 0.0;
    uint64_t draws = 1;
    OK(mha_gpt_dropout_draws(tied, 2, 3, &draws));
    CHECK(draws % 2 == 0, "two outputs a mask element (%llu)", (unsigned long long)draws);
    const mha_batch_share second = {.batch = 2, .first = 1, .targets = 5};
    OK(mha_gpt_loss_backward_share(tied, &loss_sum, ids + 3, targets + 3, 1, 3, &second, NULL, tape));
    size_t n_grad = 0;
    float *grad_buf = mha_params_grad_buffer(mha_gpt_params(tied), &n_grad);
    const mha_tree_io tio = {.user = grad_buf, .leaf = tour_leaf};
    mha_tree *tree = NULL;
    OK(mha_tree_create(n_grad, &tree));
    OK(mha_tree_sum(tree, grad_buf, 1, 0, 1, &tio));
    mha_tree_free(tree);
    OK(mha_params_grad(mha_gpt_params(tied), 0, &p));
    OK(mha_params_find_grad(mha_gpt_params(tied), "out_head.weight", &p));
    mha_adamw_config gac;
    mha_adamw_config_init(&gac);
    mha_optimizer *gopt = NULL;
    OK(mha_optimizer_create(mha_gpt_params(tied), ADAMW_CFG(gac), &gopt));
    OK(mha_optimizer_step(gopt));
    mha_optimizer_free(gopt);
    mha_sgd_config gsc;
    mha_sgd_config_init(&gsc);
    gsc.lr = 0.01;
    OK(mha_optimizer_create(mha_gpt_params(tied), SGD_CFG(gsc), &gopt));
    OK(mha_optimizer_step(gopt));
    mha_optimizer_free(gopt);
    float dh[2 * 3 * 8];
    test_fill(h, 2 * 3 * 8, 5);
    test_fill(dh, 2 * 3 * 8, 6);
    OK(mha_gpt_blocks_forward_tape(tied, h, h, 2, 3, NULL, tape));
    OK(mha_gpt_blocks_backward(tied, tape, dh, dh));
    mha_gpt_tape_free(tape);

    mha_st *st = NULL;
    OK(mha_st_read_file(tmp(0, "gpt.safetensors"), &st));
    OK(mha_gpt_from_st(st, &l));
    mha_st_free(st);
    mha_gpt_free(l);
    mha_gpt_free(tied);
    mha_gpt_free(m);
    mha_generator_free(g);
}

static void tour_tokenizer(void) {
    mha_tokenizer *t = NULL;
    /* the error paths of the two other loaders (each reads the whole
     * vocabulary: one successful load keeps this program short) */
    CHECK(mha_tokenizer_load(tmp(0, "none.json"), tmp(1, "none.bpe"), &t) == MHA_ERR_IO && !t,
          "missing files");
    CHECK(mha_tokenizer_parse("{}", 2, "#version: 0.2\n", 14, &t) == MHA_ERR_FORMAT && !t,
          "empty vocabulary");
    OK(mha_tokenizer_load_dir(MHA_SOURCE_DIR "/data/gpt2", &t));
    if (!t) return;
    CHECK(mha_tokenizer_vocab_size(t) == 50257, "vocab size");
    const char text[] = "Hello, world! \xF0\x9F\xA4\x97";
    int32_t ids[32];
    size_t n = 0, len = 0;
    OK(mha_tokenizer_encode(t, text, sizeof text - 1, ids, 32, &n));
    char back[64];
    OK(mha_tokenizer_decode(t, ids, n, back, sizeof back, &len));
    CHECK(len == sizeof text - 1 && memcmp(back, text, len) == 0, "round trip");
    const char *bytes;
    OK(mha_tokenizer_token(t, ids[0], &bytes, &len));
    int32_t id = 0;
    OK(mha_tokenizer_find(t, "<|endoftext|>", 13, &id));
    CHECK(id == 50256, "endoftext %d", id);
    CHECK(mha_utf8_complete(text, sizeof text - 2) == sizeof text - 5, "cut emoji");
    mha_tokenizer_free(t);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/mha_tour_XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
    tour_status_runtime();
    tour_generator();
    tour_module();
    tour_gpt();
    tour_tokenizer();
    const char *files[] = {"adamw.safetensors", "sgd.safetensors", "m.safetensors",
                           "x.safetensors", "gpt.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) remove(tmp(0, files[i]));
    rmdir(dir);
    printf("trace checksum %g\n", trace_sum);
    return TEST_END("test_api_tour");
}
