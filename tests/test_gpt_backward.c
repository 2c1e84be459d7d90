/* test_gpt_backward.c — the chapter 4 training API: the tape changes no
 * bits of the forward, mha_gpt_loss_backward's loss equals a cross-entropy
 * computed here in double from the logits, its gradients and
 * mha_gpt_backward's (from dlogits computed here) agree with a central
 * difference of the loss along a random direction, gradients accumulate
 * and zero, a tied head's gradient is tok_emb's buffer, cross-entropy's
 * values and -100, the tape's guards (consumed, another model's, the wrong
 * kind) and argument errors with nothing changed, the optimizers over a
 * GPT (a tied head once; save and load). Agreement with torch autograd is
 * tests/torch_gpt_grad_diff.py's. */
#include "test_util.h"

#include <unistd.h>

static mha_gpt *new_gpt(int tied, double drop, int qkv_bias) {
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_GPT_MODEL);
    c.vocab_size = 23;
    c.context_length = 8;
    c.emb_dim = 12;
    c.n_heads = 3;
    c.n_layers = 2;
    c.drop_rate = drop;
    c.qkv_bias = qkv_bias;
    mha_gpt *m = NULL;
    REQUIRE(mha_gpt_create(&c, tied, &m) == MHA_OK, "create: %s", mha_last_error());
    mha_generator *g = NULL;
    REQUIRE(mha_generator_create(7, &g) == MHA_OK, "generator");
    REQUIRE(mha_gpt_init(m, g) == MHA_OK, "init: %s", mha_last_error());
    mha_generator_free(g);
    return m;
}

/* A copy of every gradient (numel floats each, parameter order). */
static float *grads_copy(mha_gpt *m, size_t *n) {
    size_t total = 0;
    for (size_t i = 0; i < mha_params_count(mha_gpt_params(m)); i++) {
        mha_param g;
        REQUIRE(mha_params_grad(mha_gpt_params(m), i, &g) == MHA_OK, "grad");
        total += g.numel;
    }
    float *c = malloc(total * sizeof *c), *at = c;
    for (size_t i = 0; i < mha_params_count(mha_gpt_params(m)); i++) {
        mha_param g;
        mha_params_grad(mha_gpt_params(m), i, &g);
        memcpy(at, g.data, g.numel * sizeof *at);
        at += g.numel;
    }
    *n = total;
    return c;
}

/* The mean cross-entropy of logits (N, V) in double; dl (N, V) its
 * gradient, -100 targets ignored. */
static double ce_double(const float *logits, const int32_t *y, int N, int V, float *dl) {
    int count = 0;
    for (int r = 0; r < N; r++) count += y[r] != -100;
    double sum = 0.0;
    for (int r = 0; r < N; r++) {
        const float *z = logits + r * V;
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) mx = fmax(mx, (double)z[j]);
        for (int j = 0; j < V; j++) s += exp((double)z[j] - mx);
        for (int j = 0; dl && j < V; j++)
            dl[r * V + j] = y[r] == -100 ? 0.0f : (float)((exp((double)z[j] - mx) / s - (j == y[r])) / count);
        if (y[r] != -100) sum += mx + log(s) - (double)z[y[r]];
    }
    return sum / count;
}

/* The eval-mode loss after moving every parameter by eps * dir. */
static double loss_at(mha_gpt *m, const float *dir, double eps, const int32_t *idx, const int32_t *tgt, int B, int T,
                      int V) {
    mha_params *ps = mha_gpt_params(m);
    size_t at = 0;
    float *keep = malloc((size_t)mha_params_scalars(ps) * sizeof *keep), *logits = malloc((size_t)(B * T * V) * sizeof *logits);
    for (size_t i = 0; i < mha_params_count(ps); i++) {
        mha_param p;
        mha_params_get(ps, i, &p);
        if (i + 1 == mha_params_count(ps) && mha_gpt_head_tied(m)) break; /* tok_emb's */
        for (size_t k = 0; k < p.numel; k++, at++) {
            keep[at] = p.data[k];
            p.data[k] = (float)((double)p.data[k] + eps * (double)dir[at]);
        }
    }
    REQUIRE(mha_gpt_forward(m, logits, idx, B, T, 0, NULL) == MHA_OK, "forward: %s", mha_last_error());
    const double l = ce_double(logits, tgt, B * T, V, NULL);
    at = 0;
    for (size_t i = 0; i < mha_params_count(ps); i++) {
        mha_param p;
        mha_params_get(ps, i, &p);
        if (i + 1 == mha_params_count(ps) && mha_gpt_head_tied(m)) break;
        for (size_t k = 0; k < p.numel; k++, at++) p.data[k] = keep[at];
    }
    free(keep);
    free(logits);
    return l;
}

/* <gradient, dir> against the central difference of the loss along dir. */
static void check_directional(mha_gpt *m, const float *grads, const int32_t *idx, const int32_t *tgt, int B, int T,
                              int V, const char *what) {
    mha_params *ps = mha_gpt_params(m);
    const size_t n = (size_t)mha_params_scalars(ps);
    float *dir = malloc(n * sizeof *dir);
    test_fill(dir, n, 99);
    double dot = 0.0;
    size_t at = 0, g_at = 0;
    for (size_t i = 0; i < mha_params_count(ps); i++) {
        mha_param p;
        mha_params_get(ps, i, &p);
        if (i + 1 == mha_params_count(ps) && mha_gpt_head_tied(m)) break;
        for (size_t k = 0; k < p.numel; k++) dot += (double)grads[g_at + k] * (double)dir[at + k];
        at += p.numel, g_at += p.numel;
    }
    const double eps = 1e-3;
    const double fd = (loss_at(m, dir, eps, idx, tgt, B, T, V) - loss_at(m, dir, -eps, idx, tgt, B, T, V)) / (2 * eps);
    CHECK(fabs(fd - dot) <= 2e-2 * fabs(fd) + 2e-3, "%s: <grad, dir> %.6g, central difference %.6g", what, dot, fd);
    free(dir);
}

int main(void) {
    enum { B = 2, T = 5, V = 23 };
    int32_t idx[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) idx[i] = (i * 7 + 3) % V, tgt[i] = (i * 5 + 1) % V;
    tgt[3] = -100;
    mha_gpt_tape *tape = NULL, *tape2 = NULL;
    REQUIRE(mha_gpt_tape_create(&tape) == MHA_OK && mha_gpt_tape_create(&tape2) == MHA_OK, "tape");
    float logits[B * T * V], ref[B * T * V], dl[B * T * V], loss = 0.0f, loss2 = 0.0f;

    for (int tied = 0; tied <= 1; tied++) {
        mha_gpt *m = new_gpt(tied, 0.2, tied);
        /* the tape changes no bits of the forward, masks and all */
        mha_generator *g1 = NULL, *g2 = NULL;
        mha_generator_create(11, &g1);
        mha_generator_create(11, &g2);
        CHECK(mha_gpt_forward(m, ref, idx, B, T, 0, g1) == MHA_OK, "forward: %s", mha_last_error());
        CHECK(mha_gpt_forward_tape(m, logits, idx, B, T, g2, tape) == MHA_OK, "forward_tape: %s", mha_last_error());
        CHECK(memcmp(ref, logits, sizeof ref) == 0, "taped logits differ from mha_gpt_forward's (tied %d)", tied);
        CHECK(mha_generator_random(g1) == mha_generator_random(g2), "the two forwards drew differently");
        CHECK(mha_gpt_tape_bytes(tape) > 0, "tape empty");

        /* the loss against one computed here, the gradients (eval mode, so
         * that the loss is a function of the parameters alone) against a
         * central difference; mha_gpt_backward from dlogits computed here */
        CHECK(mha_cross_entropy(&loss, dl, logits, tgt, B * T, V) == MHA_OK, "ce: %s", mha_last_error());
        CHECK(fabs((double)loss - ce_double(logits, tgt, B * T, V, NULL)) < 1e-5, "cross-entropy %.9g", (double)loss);
        mha_generator_manual_seed(g1, 11);
        CHECK(mha_params_zero_grad(mha_gpt_params(m)) == MHA_OK, "zero_grad");
        CHECK(mha_gpt_loss_backward(m, &loss2, NULL, idx, tgt, B, T, g1, tape) == MHA_OK, "loss_backward: %s",
              mha_last_error());
        CHECK(fabs((double)loss2 - ce_double(logits, tgt, B * T, V, NULL)) < 1e-5, "loss_backward's loss %.9g",
              (double)loss2);
        CHECK(mha_gpt_backward(m, tape, dl) == MHA_ERR_ARGUMENT, "a consumed tape was replayed");
        size_t n;
        float *a = grads_copy(m, &n);
        mha_params_zero_grad(mha_gpt_params(m));
        CHECK(mha_gpt_loss_backward(m, &loss2, NULL, idx, tgt, B, T, NULL, tape) == MHA_OK, "eval loss_backward");
        float *b = grads_copy(m, &n);
        check_directional(m, b, idx, tgt, B, T, V, tied ? "loss_backward (tied)" : "loss_backward");
        CHECK(mha_gpt_forward_tape(m, logits, idx, B, T, NULL, tape) == MHA_OK, "eval forward_tape");
        ce_double(logits, tgt, B * T, V, dl);
        mha_params_zero_grad(mha_gpt_params(m));
        CHECK(mha_gpt_backward(m, tape, dl) == MHA_OK, "backward: %s", mha_last_error());
        free(b);
        b = grads_copy(m, &n);
        check_directional(m, b, idx, tgt, B, T, V, tied ? "backward (tied)" : "backward");
        mha_params_zero_grad(mha_gpt_params(m));
        mha_generator_manual_seed(g1, 11);
        CHECK(mha_gpt_loss_backward(m, &loss2, NULL, idx, tgt, B, T, g1, tape) == MHA_OK, "loss_backward");
        /* accumulation: a second step adds the same again */
        mha_generator_manual_seed(g1, 11);
        CHECK(mha_gpt_loss_backward(m, &loss2, NULL, idx, tgt, B, T, g1, tape) == MHA_OK, "again");
        float *c = grads_copy(m, &n);
        /* (the GEMMs accumulate with beta = 1: 2a up to their rounding) */
        double top = 0.0, err = 0.0;
        for (size_t i = 0; i < n; i++) {
            top = fmax(top, fabs((double)a[i]));
            err = fmax(err, fabs((double)c[i] - 2.0 * (double)a[i]));
        }
        CHECK(top > 0.0 && err <= 1e-6 * top, "gradients did not accumulate: %g of %g", err, top);
        mha_param gt, gh;
        CHECK(mha_params_find_grad(mha_gpt_params(m), "tok_emb.weight", &gt) == MHA_OK &&
                  mha_params_find_grad(mha_gpt_params(m), "out_head.weight", &gh) == MHA_OK,
              "find_grad");
        CHECK((gt.data == gh.data) == (tied == 1), "a tied head's gradient is tok_emb's buffer (tied %d)", tied);
        CHECK(mha_params_find_grad(mha_gpt_params(m), "nope", &gt) == MHA_ERR_MISSING,
              "find_grad of an unknown name");
        mha_params_zero_grad(mha_gpt_params(m));
        free(c);
        c = grads_copy(m, &n);
        int zero = 1;
        for (size_t i = 0; i < n; i++) zero &= c[i] == 0.0f;
        CHECK(zero, "zero_grad left something");

        /* errors change nothing */
        float before = c[0];
        const int32_t bad_ids[B * T] = {V};
        CHECK(mha_gpt_forward_tape(m, logits, bad_ids, B, T, NULL, tape) == MHA_ERR_ARGUMENT, "id out of range");
        CHECK(mha_gpt_backward(m, tape, dl) == MHA_ERR_ARGUMENT, "a failed forward left a tape");
        int32_t bad_t[B * T];
        memcpy(bad_t, tgt, sizeof bad_t);
        bad_t[4] = V;
        CHECK(mha_gpt_loss_backward(m, &loss, NULL, idx, bad_t, B, T, NULL, tape) == MHA_ERR_ARGUMENT, "target");
        CHECK(strstr(mha_last_error(), "position 4") != NULL, "detail: %s", mha_last_error());
        CHECK(mha_gpt_loss_backward(m, &loss, NULL, idx, tgt, B, 9, NULL, tape) == MHA_ERR_CONTEXT_LENGTH, "T > C");
        mha_gpt_forward_tape(m, logits, idx, B, T, NULL, tape);
        dl[7] = NAN;
        CHECK(mha_gpt_backward(m, tape, dl) == MHA_ERR_NONFINITE, "NaN dlogits");
        mha_gpt *other = new_gpt(tied, 0.2, tied);
        CHECK(mha_gpt_backward(other, tape, ref) == MHA_ERR_ARGUMENT, "another model's tape");
        CHECK(mha_gpt_blocks_backward(m, tape, NULL, ref) == MHA_ERR_ARGUMENT, "a GPTModel tape as blocks");
        free(c);
        c = grads_copy(m, &n);
        CHECK(c[0] == before && c[n - 1] == 0.0f, "a failed call changed gradients");
        CHECK(mha_gpt_backward(m, tape, ref) == MHA_OK, "the tape survives failed backwards: %s", mha_last_error());

        /* the optimizers over a GPT: every parameter once; save and load */
        mha_adamw_config ac;
        mha_adamw_config_init(&ac);
        mha_optimizer *o = NULL, *o2 = NULL;
        CHECK(mha_optimizer_create(mha_gpt_params(m), ADAMW_CFG(ac), &o) == MHA_OK, "adamw: %s",
              mha_last_error());
        mha_param head, tok;
        mha_params_find(mha_gpt_params(m), "out_head.weight", &head);
        mha_params_find(mha_gpt_params(m), "tok_emb.weight", &tok);
        const float h0 = head.data[5], t0 = tok.data[5];
        mha_param gk;
        mha_params_find_grad(mha_gpt_params(m), "tok_emb.weight", &gk);
        gk.data[5] = 1.0f;
        CHECK(mha_optimizer_step(o) == MHA_OK, "step: %s", mha_last_error());
        /* AdamW's first step moves an element by lr (weight decay aside): once, also when tied */
        CHECK(fabsf(tok.data[5] - (t0 * (1.0f - 1e-5f) - 1e-3f)) < 1e-6f, "tok_emb moved %g", (double)(tok.data[5] - t0));
        CHECK(!tied || head.data[5] == tok.data[5], "tied head");
        CHECK(tied || head.data[5] != h0, "untied head not stepped");
        char dir[] = "/tmp/mha_test_gpt_backward_XXXXXX", path[128];
        REQUIRE(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(path, sizeof path, "%s/opt.safetensors", dir);
        CHECK(mha_optimizer_save(o, path) == MHA_OK, "save: %s", mha_last_error());
        CHECK(mha_optimizer_create(mha_gpt_params(m), ADAMW_CFG(ac), &o2) == MHA_OK, "adamw 2");
        CHECK(mha_optimizer_load(o2, path) == MHA_OK, "load: %s", mha_last_error());
        CHECK(mha_optimizer_step_count(o2) == 1, "step count");
        mha_st *st = NULL;
        CHECK(mha_st_read_file(path, &st) == MHA_OK, "read");
        const char *mod = st ? mha_st_metadata(st, "module") : NULL;
        CHECK(mod && !strcmp(mod, "GPTModel"), "module %s", mod ? mod : "(none)");
        mha_st_tensor t;
        CHECK(st && (mha_st_find(st, "exp_avg.out_head.weight", &t) == MHA_OK) == !tied,
              "a tied head has no state of its own (tied %d)", tied);
        mha_st_free(st);
        mha_optimizer *os = NULL;
        mha_sgd_config sc;
        mha_sgd_config_init(&sc);
        CHECK(mha_optimizer_create(mha_gpt_params(m), SGD_CFG(sc), &os) == MHA_ERR_CONFIG, "SGD without lr");
        unlink(path);
        rmdir(dir);
        mha_optimizer_free(o);
        mha_optimizer_free(o2);
        mha_gpt_free(other);
        mha_generator_free(g1);
        mha_generator_free(g2);
        free(a);
        free(b);
        free(c);
        mha_gpt_free(m);
    }

    /* cross-entropy by hand: two rows, one ignored */
    const float z[6] = {1.0f, 2.0f, 3.0f, 0.5f, 0.5f, 0.5f};
    const int32_t y[2] = {2, -100};
    float d[6];
    CHECK(mha_cross_entropy(&loss, d, z, y, 2, 3) == MHA_OK, "ce");
    const double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
    CHECK(fabs((double)loss - (lse - 3.0)) < 1e-6, "loss %.9g", (double)loss);
    CHECK(fabs((double)d[2] - (exp(3.0 - lse) - 1.0)) < 1e-6 && fabs((double)d[0] - exp(1.0 - lse)) < 1e-6, "dlogits");
    CHECK(d[3] == 0.0f && d[4] == 0.0f && d[5] == 0.0f, "an ignored row has no gradient");
    const int32_t none[2] = {-100, -100}, out[2] = {0, 3};
    CHECK(mha_cross_entropy(&loss, d, z, none, 2, 3) == MHA_ERR_ARGUMENT, "all ignored");
    CHECK(mha_cross_entropy(&loss, d, z, out, 2, 3) == MHA_ERR_ARGUMENT, "target 3 of 3");

    /* a TransformerBlock: blocks only */
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_TRANSFORMER_BLOCK);
    c.context_length = 8;
    c.emb_dim = 8;
    c.n_heads = 2;
    mha_gpt *tb = NULL;
    REQUIRE(mha_gpt_create_seeded(&c, 3, &tb) == MHA_OK, "block");
    float x[2 * 3 * 8], yv[2 * 3 * 8], yr[2 * 3 * 8], dx[2 * 3 * 8];
    test_fill(x, 48, 5);
    CHECK(mha_gpt_blocks_forward(tb, yr, x, 2, 3, NULL) == MHA_OK, "blocks forward");
    CHECK(mha_gpt_blocks_forward_tape(tb, yv, x, 2, 3, NULL, tape2) == MHA_OK, "blocks tape");
    CHECK(memcmp(yr, yv, sizeof yr) == 0, "taped y differs");
    CHECK(mha_gpt_backward(tb, tape2, yv) == MHA_ERR_ARGUMENT, "a blocks tape as a GPTModel's");
    CHECK(mha_gpt_loss_backward(tb, &loss, NULL, idx, tgt, 1, 2, NULL, tape2) == MHA_ERR_UNSUPPORTED, "block loss");
    CHECK(mha_gpt_blocks_forward_tape(tb, yv, x, 2, 3, NULL, tape2) == MHA_OK, "blocks tape again");
    CHECK(mha_gpt_blocks_backward(tb, tape2, dx, yv) == MHA_OK, "blocks backward: %s", mha_last_error());
    mha_gpt_free(tb);
    mha_gpt_tape_free(tape);
    mha_gpt_tape_free(tape2);
    return TEST_END("test_gpt_backward");
}
