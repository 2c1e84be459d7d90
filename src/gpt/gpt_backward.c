/* gpt_backward.c — training for chapter 4: the GPTModel / TransformerBlock
 * forward that records a tape, the backward that replays it into
 * gradients, and the cross-entropy loss.
 *
 * Per block, over R = B*T rows of width E (the forward of gpt.c):
 *   h1 = norm1(x);  qkv = h1 W_qkv^T + b_qkv;  o = attention(qkv)
 *   x1 = x + n1 * (o W_out^T + b_out)            (n1: drop_shortcut's noise)
 *   h2 = norm2(x1); f = h2 W1^T + b1;  g = gelu(f)
 *   y  = x1 + n2 * (g W2^T + b2)
 * backward, from dy:
 *   dz = n2 dy;  gW2 += dz^T g;  gb2 += colsum(dz);  df = (dz W2) gelu'(f)
 *   gW1 += df^T h2;  gb1 += colsum(df);  dx1 = dy + norm2'(df W1)
 *   da = n1 dx1; gW_out += da^T o; gb_out += colsum(da); do = da W_out
 *   dqkv = attention backward (the fused flash backward of the attention
 *   layer, as MultiHeadAttention's module backward runs it)
 *   gW_qkv += dqkv^T h1; gb_qkv += colsum(dqkv); dx = dx1 + norm1'(dqkv W_qkv)
 * and around the blocks: embeddings (tok + pos, drop_emb), final_norm and
 * the head (no bias; with a tied head the weight is tok_emb's, so both
 * gradients land in one buffer).
 *
 * The forward here is gpt.c's written out with the tape's buffers: the same
 * kernels (LayerNorm, mha__sgemm_bias, the attention layer, GELU, the
 * residual GEMM epilogue) in the same order with the same dropout draws, so
 * its logits are mha_gpt_forward's bit for bit (torch_gpt_grad_diff checks
 * it against mha run); where gpt.c fuses GELU into a GEMM's epilogue, this
 * one keeps GELU's input for the backward and applies the same operations. Every GEMM goes through
 * mha__sgemm (tiles fixed by the shape), column sums run rows in order and
 * the embedding scatter-add splits columns, never rows, over threads: the
 * gradients do not depend on the thread count. */
#include "gpt.h"

#include "attention/attention.h"
#include "common/common.h"
#include "generator/generator.h"
#include "kernels/drivers.h"

#include <math.h>
#include <string.h>

/* What one block's forward keeps. */
typedef struct {
    float *x;     /* (R, E) the block's input: norm1's */
    float *h1;    /* (R, E) norm1's output */
    float *qkv;   /* (R, 3E) */
    float *o;     /* (R, E) the attention's output (before out_proj) */
    float *x1;    /* (R, E) after the attention's residual: norm2's input */
    float *h2;    /* (R, E) norm2's output */
    float *f;     /* (R, 4E) ff.layers.0's output, GELU's input */
    float *g;     /* (R, 4E) GELU's output */
    float *n1;    /* (R, E) drop_shortcut's noise (0 or 1/(1-p)), training only */
    float *n2;
    float *stats; /* (B, H, T, 2) the attention rows' statistics */
    uint64_t *bits; /* the attention's dropout mask, training only */
} tape_block;

struct mha_gpt_tape {
    const mha_gpt *m;   /* the model that recorded it; NULL: empty */
    mha_gpt_config cfg; /* its configuration then (a guard against reuse) */
    bool model;         /* recorded by mha_gpt_forward_tape (else blocks only) */
    int64_t B, T;
    bool drop;          /* training mode with drop_rate > 0 */
    int32_t *idx;       /* (R) GPTModel */
    float *n_emb;       /* (R, E) drop_emb's noise, training only */
    float *out;         /* (R, E) after the last block (final_norm's input) */
    float *hf;          /* (R, E) final_norm's output (GPTModel) */
    float *logits;      /* (R, V) (GPTModel) */
    tape_block *blk;    /* L */
    size_t n_blk;
    /* scratch: forward and backward */
    float *t0, *t1, *t2, *t3; /* (R, E) each */
    float *t4;          /* (R, 4E) */
    uint64_t *kb;       /* drop_shortcut's keep bits as drawn (training only) */
    void *att_ws;
    size_t att_ws_size;
    void *buf;          /* one allocation holding all of the above */
    size_t cap;
};

mha_status mha_gpt_tape_create(mha_gpt_tape **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "output pointer is NULL");
    *out = mha__calloc(sizeof **out);
    return *out ? MHA_OK : mha__fail(MHA_ERR_NOMEM, "out of memory creating a tape");
}

void mha_gpt_tape_free(mha_gpt_tape *t) {
    if (!t) return;
    mha__free(t->buf);
    mha__free(t->blk);
    mha__free(t);
}

size_t mha_gpt_tape_bytes(const mha_gpt_tape *t) { return t ? t->cap : 0; }

/* ---- gradients ------------------------------------------------------------ */

static float *grad_arena(mha_gpt *m) {
    if (!m->grad) {
        m->grad = mha__calloc(m->arena_floats * sizeof(float));
        if (!m->grad)
            mha__fail(MHA_ERR_NOMEM, "out of memory allocating gradients (%zu MiB)",
                      m->arena_floats * sizeof(float) >> 20);
    }
    return m->grad;
}

/* The gradient of parameter data p (a pointer into the arena). */
static float *G(mha_gpt *m, const float *p) { return p ? m->grad + (p - m->arena) : NULL; }

mha_status mha_gpt_grad(mha_gpt *m, size_t i, mha_param *out) {
    mha_status st = mha_gpt_param(m, i, out);
    if (st != MHA_OK) return st;
    if (!grad_arena(m)) return MHA_ERR_NOMEM;
    out->data = G(m, out->data);
    return MHA_OK;
}

mha_status mha_gpt_find_grad(mha_gpt *m, const char *name, mha_param *out) {
    mha_status st = mha_gpt_find_param(m, name, out);
    if (st != MHA_OK) return st;
    if (!grad_arena(m)) return MHA_ERR_NOMEM;
    out->data = G(m, out->data);
    return MHA_OK;
}

mha_status mha_gpt_zero_grad(mha_gpt *m) {
    if (!m) return mha__fail(MHA_ERR_ARGUMENT, "model is NULL");
    if (!grad_arena(m)) return MHA_ERR_NOMEM;
    memset(m->grad, 0, m->arena_floats * sizeof(float));
    return MHA_OK;
}

/* ---- the tape's layout ------------------------------------------------------ */

/* Carves 64-byte aligned arrays from base (NULL: only counts). */
typedef struct {
    char *base;
    size_t off;
    bool ok;
} carver;

static void *carve(carver *c, size_t n, size_t elem) {
    size_t bytes, end;
    if (!c->ok || !mha__mul_size(n, elem, &bytes) || !mha__add_size(c->off, bytes, &end) ||
        mha__align64(end) < end) {
        c->ok = false;
        return NULL;
    }
    void *p = c->base ? c->base + c->off : NULL;
    c->off = mha__align64(end);
    return p;
}

/* The attention layer's description for block forwards of (B, T); the
 * buffers are the caller's to set. As gpt.c's block_forward sets it. */
static void block_desc(const mha_gpt *m, mha__attention_desc *d, int64_t B, int64_t T, mha_generator *g) {
    memset(d, 0, sizeof *d);
    d->B = B;
    d->T = T;
    d->H = m->H;
    d->HD = m->HD;
    d->head_stride = m->HD;
    d->scale = (float)(1.0 / sqrt((double)m->HD));
    d->causal = true;
    d->ld_qkv = 3 * m->E;
    d->q_base = 0;
    d->k_base = m->E;
    d->v_base = 2 * m->E;
    d->ldo = m->E;
    if (g && m->cfg.drop_rate > 0.0) {
        d->dropout = MHA_DROPOUT_TORCH;
        d->p = m->cfg.drop_rate;
        d->gen = g;
    }
}

static bool layout(mha_gpt_tape *t, const mha_gpt *m, carver *c, int64_t B, int64_t T, bool model, bool drop) {
    const size_t R = (size_t)B * (size_t)T, E = (size_t)m->E, f = sizeof(float);
    mha__attention_desc d;
    uint64_t given; /* the mask bits are the tape's: no room for them in the workspace */
    block_desc(m, &d, B, T, NULL);
    if (drop) {
        d.dropout = MHA_DROPOUT_TORCH;
        d.p = m->cfg.drop_rate;
        d.keep_bits = &given;
    }
    const size_t att = mha__attention_workspace(&d), att_b = mha__attention_backward_workspace(&d);
    const size_t words = drop ? mha__attention_keep_words(&d) : 0;
    if (att == 0 || att_b == 0 || (drop && words == 0)) return false;
    for (int64_t l = 0; l < m->L; l++) {
        tape_block *b = c->base ? &t->blk[l] : &(tape_block){0};
        b->x = carve(c, R * E, f);
        b->h1 = carve(c, R * E, f);
        b->qkv = carve(c, R * 3 * E, f);
        b->o = carve(c, R * E, f);
        b->x1 = carve(c, R * E, f);
        b->h2 = carve(c, R * E, f);
        b->f = carve(c, R * 4 * E, f);
        b->g = carve(c, R * 4 * E, f);
        b->n1 = drop ? carve(c, R * E, f) : NULL;
        b->n2 = drop ? carve(c, R * E, f) : NULL;
        b->stats = carve(c, R * (size_t)m->H * 2, f);
        b->bits = drop ? carve(c, words, sizeof(uint64_t)) : NULL;
    }
    mha_gpt_tape tmp;
    mha_gpt_tape *o = c->base ? t : &tmp;
    o->idx = model ? carve(c, R, sizeof(int32_t)) : NULL;
    o->n_emb = model && drop ? carve(c, R * E, f) : NULL;
    o->out = carve(c, R * E, f);
    o->hf = model ? carve(c, R * E, f) : NULL;
    o->logits = model ? carve(c, R, (size_t)m->V * f) : NULL;
    o->t0 = carve(c, R * E, f);
    o->t1 = carve(c, R * E, f);
    o->t2 = carve(c, R * E, f);
    o->t3 = carve(c, R * E, f);
    o->t4 = carve(c, R * 4 * E, f);
    o->kb = drop ? carve(c, (R * E + 63) / 64, sizeof(uint64_t)) : NULL;
    o->att_ws_size = att > att_b ? att : att_b;
    o->att_ws = carve(c, o->att_ws_size, 1);
    return c->ok;
}

/* Grows and carves the tape for (B, T); the failure recorded. */
static mha_status tape_reserve(mha_gpt_tape *t, const mha_gpt *m, int64_t B, int64_t T, bool model, bool drop) {
    carver c = {NULL, 0, true};
    if (!layout(t, m, &c, B, T, model, drop))
        return mha__fail(MHA_ERR_OVERFLOW, "tape for batch %lld x %lld tokens overflows", (long long)B, (long long)T);
    if (t->n_blk < (size_t)m->L) {
        tape_block *blk = mha__calloc((size_t)m->L * sizeof *blk);
        if (!blk) return mha__fail(MHA_ERR_NOMEM, "out of memory growing the tape");
        mha__free(t->blk);
        t->blk = blk;
        t->n_blk = (size_t)m->L;
    }
    if (t->cap < c.off) {
        void *buf = mha__alloc(c.off);
        if (!buf) return mha__fail(MHA_ERR_NOMEM, "out of memory growing the tape to %zu MiB", c.off >> 20);
        mha__free(t->buf);
        t->buf = buf;
        t->cap = c.off;
    }
    c = (carver){t->buf, 0, true};
    layout(t, m, &c, B, T, model, drop);
    return MHA_OK;
}

/* ---- forward ----------------------------------------------------------------- */

/* noise[i] = keep_i / (1 - p) or 0, drawn as nn.Dropout(p) draws its mask:
 * dropout of ones gives PyTorch's noise tensor itself, and x * noise is
 * what dropout computes. */
static void draw_noise(mha_generator *g, float *noise, size_t n, double p) {
    for (size_t i = 0; i < n; i++) noise[i] = 1.0f;
    mha_generator_dropout(g, noise, noise, n, p);
}

/* y = x + drop(A W^T + bias), W (E, K), as gpt.c's residual_linear computes
 * it (the same GEMM epilogue on the same tiles, the mask drawn the same
 * way), x kept: y is a copy of x that the epilogue adds into. noise gets
 * the mask as drop_shortcut's factors (0 or 1/(1-p)) for the backward. */
static mha_status residual_linear(mha_gpt_tape *t, const mha_gpt *m, mha_generator *g, float *y,
                                  const float *x, int64_t K, const float *A, const float *W,
                                  const float *bias, float *noise) {
    const int64_t E = m->E, R = t->B * t->T, n = R * E;
    memcpy(y, x, (size_t)n * sizeof(float));
    mha__gemm_epilogue e = {.kind = MHA_EPI_RESIDUAL, .bias = bias, .x = y, .ldx = E};
    if (t->drop) {
        const double p = m->cfg.drop_rate;
        const float scale = mha__dropout_scale(p);
        mha__generator_keep_bits(g, t->kb, (size_t)n, p);
        e.keep = (mha__keep_view){.bits = t->kb, .bit0 = 0, .ld = E, .scale = scale};
        for (int64_t i = 0; i < n; i++) noise[i] = (t->kb[i >> 6] >> (i & 63)) & 1 ? scale : 0.0f;
    }
    return mha__sgemm_epilogue(R, E, K, A, K, W, K, t->t0, E, &e);
}

/* a (rows, n) += bias, row by row */
static void add_bias(float *a, const float *bias, int64_t rows, int64_t n) {
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (rows * n > 100000)
#endif
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) a[r * n + j] += bias[j];
}

/* The blocks over t->blk[0].x, leaving the result in t->out. */
static mha_status blocks_forward(mha_gpt *m, mha_gpt_tape *t, mha_generator *g) {
    const int64_t E = m->E, R = t->B * t->T;
    for (int64_t l = 0; l < m->L; l++) {
        const mha__gpt_block *b = &m->blocks[l];
        tape_block *tb = &t->blk[l];
        float *y = l + 1 < m->L ? t->blk[l + 1].x : t->out;
        mha_status st;
        mha_layernorm_forward(tb->h1, tb->x, b->ln1_s, b->ln1_b, R, E);
        if ((st = mha__sgemm_bias(false, true, R, 3 * E, E, tb->h1, E, b->w_qkv, E, b->b_qkv, tb->qkv,
                                  3 * E)) != MHA_OK)
            return st;
        mha__attention_desc d;
        block_desc(m, &d, t->B, t->T, t->drop ? g : NULL);
        d.qkv = tb->qkv;
        d.o = tb->o;
        d.stats = tb->stats;
        d.keep_bits = tb->bits;
        if ((st = mha__attention_forward(&d, t->att_ws, t->att_ws_size)) != MHA_OK) return st;
        if ((st = residual_linear(t, m, g, tb->x1, tb->x, E, tb->o, b->w_out, b->b_out, tb->n1)) != MHA_OK)
            return st;
        mha_layernorm_forward(tb->h2, tb->x1, b->ln2_s, b->ln2_b, R, E);
        /* gpt.c's GELU epilogue computes gelu(A W1^T + b1) on the product's
         * tiles; here the sum is kept (f, the backward's input) and GELU
         * runs on it, the same operations in the same order */
        if ((st = mha__sgemm(false, true, R, 4 * E, E, 1.0f, tb->h2, E, b->w1, E, 0.0f, tb->f, 4 * E)) !=
            MHA_OK)
            return st;
        add_bias(tb->f, b->b1, R, 4 * E);
        mha_gelu_forward(tb->g, tb->f, (size_t)(R * 4 * E));
        if ((st = residual_linear(t, m, g, y, tb->x1, 4 * E, tb->g, b->w2, b->b2, tb->n2)) != MHA_OK)
            return st;
    }
    return MHA_OK;
}

static mha_status check_tokens(const mha_gpt *m, int64_t B, int64_t T) {
    if (B < 1 || T < 1)
        return mha__fail(MHA_ERR_SHAPE, "batch (%lld) and tokens (%lld) must be positive", (long long)B, (long long)T);
    if (T > m->C) return mha__fail(MHA_ERR_CONTEXT_LENGTH, "%lld tokens exceed context_length %lld", (long long)T, (long long)m->C);
    if (B > ((int64_t)1 << 30) / T) return mha__fail(MHA_ERR_OVERFLOW, "batch x tokens is too large");
    return MHA_OK;
}

static void record(mha_gpt_tape *t, const mha_gpt *m, bool model, int64_t B, int64_t T, bool drop) {
    t->m = m;
    t->cfg = m->cfg;
    t->model = model;
    t->B = B;
    t->T = T;
    t->drop = drop;
}

mha_status mha_gpt_forward_tape(mha_gpt *m, float *logits, const int32_t *idx, int64_t B, int64_t T,
                                mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!tape) return mha__fail(MHA_ERR_ARGUMENT, "tape is NULL");
    tape->m = NULL;
    if (!m || !idx) return mha__fail(MHA_ERR_ARGUMENT, "model or idx is NULL");
    if (m->cfg.kind != MHA_GPT_MODEL) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock takes x, not token ids");
    mha_status st = check_tokens(m, B, T);
    if (st != MHA_OK) return st;
    const int64_t E = m->E, R = B * T, V = m->V;
    for (int64_t i = 0; i < R; i++)
        if (idx[i] < 0 || idx[i] >= V)
            return mha__fail(MHA_ERR_ARGUMENT, "token id %d at position %lld is outside the vocabulary [0, %lld)", idx[i],
                             (long long)i, (long long)V);
    const bool drop = dropout_rng && m->cfg.drop_rate > 0.0;
    if ((st = tape_reserve(tape, m, B, T, true, drop)) != MHA_OK) return st;
    record(tape, m, true, B, T, drop);
    memcpy(tape->idx, idx, (size_t)R * sizeof(int32_t));
    float *x = tape->blk[0].x;
    for (int64_t r = 0; r < R; r++)
        for (int64_t e = 0; e < E; e++) x[r * E + e] = m->tok_emb[(int64_t)idx[r] * E + e] + m->pos_emb[(r % T) * E + e];
    if (drop) {
        draw_noise(dropout_rng, tape->n_emb, (size_t)(R * E), m->cfg.drop_rate);
        for (int64_t i = 0; i < R * E; i++) x[i] *= tape->n_emb[i];
    }
    if ((st = blocks_forward(m, tape, dropout_rng)) != MHA_OK) {
        tape->m = NULL;
        return st;
    }
    mha_layernorm_forward(tape->hf, tape->out, m->lnf_s, m->lnf_b, R, E);
    if ((st = mha__sgemm(false, true, R, V, E, 1.0f, tape->hf, E, m->head, E, 0.0f, tape->logits, V)) !=
        MHA_OK) {
        tape->m = NULL;
        return st;
    }
    if (logits) memcpy(logits, tape->logits, (size_t)R * (size_t)V * sizeof(float));
    return MHA_OK;
}

mha_status mha_gpt_blocks_forward_tape(mha_gpt *m, float *y, const float *x, int64_t B, int64_t T,
                                       mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!tape) return mha__fail(MHA_ERR_ARGUMENT, "tape is NULL");
    tape->m = NULL;
    if (!m || !y || !x) return mha__fail(MHA_ERR_ARGUMENT, "model, y or x is NULL");
    mha_status st = check_tokens(m, B, T);
    if (st != MHA_OK) return st;
    const int64_t n = B * T * m->E;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return mha__fail(MHA_ERR_NONFINITE, "input x holds %s at element %lld", isnan(x[i]) ? "NaN" : "infinity", (long long)i);
    const bool drop = dropout_rng && m->cfg.drop_rate > 0.0;
    if ((st = tape_reserve(tape, m, B, T, false, drop)) != MHA_OK) return st;
    record(tape, m, false, B, T, drop);
    memcpy(tape->blk[0].x, x, (size_t)n * sizeof(float));
    if ((st = blocks_forward(m, tape, dropout_rng)) != MHA_OK) {
        tape->m = NULL;
        return st;
    }
    memcpy(y, tape->out, (size_t)n * sizeof(float));
    return MHA_OK;
}

/* ---- backward ----------------------------------------------------------------- */

/* y = a * noise (noise NULL: a copy) */
static void mask(float *y, const float *a, const float *noise, int64_t n) {
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (n > 100000)
#endif
    for (int64_t i = 0; i < n; i++) y[i] = noise ? a[i] * noise[i] : a[i];
}

/* A failing call (MHA_ERR_NOMEM from a GEMM) ends the backward; gradients
 * are then partly accumulated, so the caller consumes the tape (mha.h). */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        const mha_status try_st_ = (call);                                                         \
        if (try_st_ != MHA_OK) return try_st_;                                                     \
    } while (0)

/* dx (R, E): the gradient at the last block's output in, the first
 * block's input's out. Scratch: t0 (dz, da), t1 (dh, do), t2 (LayerNorm),
 * t4 (df, dqkv). */
static mha_status blocks_backward(mha_gpt *m, mha_gpt_tape *t, float *dx) {
    const int64_t E = m->E, R = t->B * t->T;
    float *dz = t->t0, *dh = t->t1, *lns = t->t2, *df = t->t4;
    for (int64_t l = m->L - 1; l >= 0; l--) {
        const mha__gpt_block *b = &m->blocks[l];
        const tape_block *tb = &t->blk[l];
        /* feed-forward */
        mask(dz, dx, tb->n2, R * E);
        TRY(mha__sgemm(true, false, E, 4 * E, R, 1.0f, dz, E, tb->g, 4 * E, 1.0f, G(m, b->w2), 4 * E));
        mha__colsum_acc(G(m, b->b2), dz, R, E, E);
        TRY(mha__sgemm(false, false, R, 4 * E, E, 1.0f, dz, E, b->w2, 4 * E, 0.0f, df, 4 * E));
        mha__gelu_backward_n(df, tb->f, R * 4 * E);
        TRY(mha__sgemm(true, false, 4 * E, E, R, 1.0f, df, 4 * E, tb->h2, E, 1.0f, G(m, b->w1), E));
        mha__colsum_acc(G(m, b->b1), df, R, 4 * E, 4 * E);
        TRY(mha__sgemm(false, false, R, E, 4 * E, 1.0f, df, 4 * E, b->w1, E, 0.0f, dh, E));
        mha__layernorm_backward_rows(dx, dh, tb->x1, b->ln2_s, G(m, b->ln2_s), G(m, b->ln2_b), lns, R, E);
        /* attention */
        mask(dz, dx, tb->n1, R * E);
        TRY(mha__sgemm(true, false, E, E, R, 1.0f, dz, E, tb->o, E, 1.0f, G(m, b->w_out), E));
        mha__colsum_acc(G(m, b->b_out), dz, R, E, E);
        TRY(mha__sgemm(false, false, R, E, E, 1.0f, dz, E, b->w_out, E, 0.0f, dh, E));
        mha__attention_desc d;
        block_desc(m, &d, t->B, t->T, NULL);
        if (t->drop) {
            d.dropout = MHA_DROPOUT_TORCH;
            d.p = m->cfg.drop_rate;
        }
        d.qkv = tb->qkv;
        d.o = tb->o;
        d.stats = tb->stats;
        d.keep_bits = tb->bits;
        float *dqkv = df;
        TRY(mha__attention_backward(&d, dh, E, dqkv, t->att_ws, t->att_ws_size));
        TRY(mha__sgemm(true, false, 3 * E, E, R, 1.0f, dqkv, 3 * E, tb->h1, E, 1.0f, G(m, b->w_qkv), E));
        if (b->b_qkv) mha__colsum_acc(G(m, b->b_qkv), dqkv, R, 3 * E, 3 * E);
        TRY(mha__sgemm(false, false, R, E, 3 * E, 1.0f, dqkv, 3 * E, b->w_qkv, E, 0.0f, dh, E));
        mha__layernorm_backward_rows(dx, dh, tb->x, b->ln1_s, G(m, b->ln1_s), G(m, b->ln1_b), lns, R, E);
    }
    return MHA_OK;
}

/* Field by field: the struct has padding, which memcmp would read (and
 * valgrind flags: a config copied from the caller's leaves it undefined). */
static bool same_config(const mha_gpt_config *a, const mha_gpt_config *b) {
    return a->kind == b->kind && a->vocab_size == b->vocab_size &&
           a->context_length == b->context_length && a->emb_dim == b->emb_dim &&
           a->n_heads == b->n_heads && a->n_layers == b->n_layers &&
           a->drop_rate == b->drop_rate && a->qkv_bias == b->qkv_bias;
}

static mha_status check_tape(const mha_gpt *m, const mha_gpt_tape *t, bool model) {
    if (!t->m) return mha__fail(MHA_ERR_ARGUMENT, "the tape holds no forward (record one first)");
    if (t->m != m || !same_config(&t->cfg, &m->cfg))
        return mha__fail(MHA_ERR_ARGUMENT, "the tape was recorded by another model");
    if (model && !t->model)
        return mha__fail(MHA_ERR_ARGUMENT, "the tape holds a blocks-only forward (mha_gpt_blocks_forward_tape)");
    if (!model && t->model)
        return mha__fail(MHA_ERR_ARGUMENT, "the tape holds a GPTModel forward (mha_gpt_forward_tape)");
    /* the attention backward's scratch is per thread: sized at the forward */
    mha__attention_desc d;
    block_desc(m, &d, t->B, t->T, NULL);
    const size_t need = mha__attention_backward_workspace(&d);
    if (need == 0 || need > t->att_ws_size)
        return mha__fail(MHA_ERR_WORKSPACE, "the thread count grew since the forward was recorded (its scratch "
                                            "holds %zu bytes, the backward needs %zu): record it again",
                         t->att_ws_size, need);
    return MHA_OK;
}

static mha_status check_finite(const float *a, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return mha__fail(MHA_ERR_NONFINITE, "%s holds %s at element %lld", what, isnan(a[i]) ? "NaN" : "infinity",
                             (long long)i);
    return MHA_OK;
}

/* The GPTModel backward from dlogits (R, V), which may be the tape's own
 * logits buffer (written over by the loss). */
static mha_status model_backward(mha_gpt *m, mha_gpt_tape *t, const float *dlogits) {
    const int64_t E = m->E, V = m->V, R = t->B * t->T, T = t->T;
    float *dx = t->t3;
    /* head and final_norm */
    TRY(mha__sgemm(false, false, R, E, V, 1.0f, dlogits, V, m->head, E, 0.0f, t->t1, E));
    TRY(mha__sgemm(true, false, V, E, R, 1.0f, dlogits, V, t->hf, E, 1.0f, G(m, m->head), E));
    memset(dx, 0, (size_t)(R * E) * sizeof(float));
    mha__layernorm_backward_rows(dx, t->t1, t->out, m->lnf_s, G(m, m->lnf_s), G(m, m->lnf_b), t->t2, R, E);
    mha_status st = blocks_backward(m, t, dx);
    if (st != MHA_OK) return st;
    /* drop_emb, then the embeddings: columns over threads, rows in order */
    if (t->n_emb) mask(dx, dx, t->n_emb, R * E);
    float *gtok = G(m, m->tok_emb), *gpos = G(m, m->pos_emb);
    const int32_t *idx = t->idx;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if ((double)R * (double)E > 1e5)
#endif
    for (int64_t e0 = 0; e0 < E; e0 += 16) {
        const int64_t e1 = e0 + 16 < E ? e0 + 16 : E;
        for (int64_t r = 0; r < R; r++)
            for (int64_t e = e0; e < e1; e++) {
                gtok[(int64_t)idx[r] * E + e] += dx[r * E + e];
                gpos[(r % T) * E + e] += dx[r * E + e];
            }
    }
    return MHA_OK;
}

mha_status mha_gpt_backward(mha_gpt *m, mha_gpt_tape *tape, const float *dlogits) {
    if (!m || !tape || !dlogits) return mha__fail(MHA_ERR_ARGUMENT, "model, tape or dlogits is NULL");
    mha_status st = check_tape(m, tape, true);
    if (st == MHA_OK) st = check_finite(dlogits, tape->B * tape->T * m->V, "dlogits");
    if (st != MHA_OK) return st;
    if (!grad_arena(m)) return MHA_ERR_NOMEM;
    st = model_backward(m, tape, dlogits);
    tape->m = NULL; /* consumed, also when a GEMM failed part-way */
    return st;
    return MHA_OK;
}

mha_status mha_gpt_blocks_backward(mha_gpt *m, mha_gpt_tape *tape, float *dx, const float *dy) {
    if (!m || !tape || !dy) return mha__fail(MHA_ERR_ARGUMENT, "model, tape or dy is NULL");
    mha_status st = check_tape(m, tape, false);
    const int64_t n = tape->B * tape->T * m->E;
    if (st == MHA_OK) st = check_finite(dy, n, "dy");
    if (st != MHA_OK) return st;
    if (!grad_arena(m)) return MHA_ERR_NOMEM;
    float *g = tape->t3;
    memcpy(g, dy, (size_t)n * sizeof(float));
    st = blocks_backward(m, tape, g);
    tape->m = NULL; /* consumed, also when a GEMM failed part-way */
    if (st != MHA_OK) return st;
    if (dx) memcpy(dx, g, (size_t)n * sizeof(float));
    return MHA_OK;
}

/* ---- cross-entropy ------------------------------------------------------------- */

#define MHA_IGNORE_INDEX (-100)

/* The number of counted targets, or an error naming the bad one. */
static mha_status count_targets(const int32_t *targets, int64_t N, int64_t V, int64_t *count) {
    int64_t n = 0;
    for (int64_t r = 0; r < N; r++) {
        if (targets[r] == MHA_IGNORE_INDEX) continue;
        if (targets[r] < 0 || targets[r] >= V)
            return mha__fail(MHA_ERR_ARGUMENT, "target %d at position %lld is outside [0, %lld) (and not -100)", targets[r],
                             (long long)r, (long long)V);
        n++;
    }
    if (n == 0) return mha__fail(MHA_ERR_ARGUMENT, "every target is -100 (ignored): the mean loss is undefined");
    *count = n;
    return MHA_OK;
}

mha_status mha_cross_entropy(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t N,
                             int64_t V) {
    if (!loss || !logits || !targets) return mha__fail(MHA_ERR_ARGUMENT, "loss, logits or targets is NULL");
    if (N < 1 || V < 1) return mha__fail(MHA_ERR_SHAPE, "rows (%lld) and classes (%lld) must be positive", (long long)N, (long long)V);
    int64_t count = 0;
    mha_status st = count_targets(targets, N, V, &count);
    if (st != MHA_OK) return st;
    double *row = mha__alloc((size_t)N * sizeof(double));
    if (!row) return mha__fail(MHA_ERR_NOMEM, "out of memory");
    const double inv = 1.0 / (double)count;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if ((double)N * (double)V > 1e5)
#endif
    for (int64_t r = 0; r < N; r++) {
        const float *z = logits + r * V;
        float *dz = dlogits ? dlogits + r * V : NULL;
        const int32_t y = targets[r];
        const bool ignored = y == MHA_IGNORE_INDEX;
        const double zy = ignored ? 0.0 : (double)z[y];
        double mx = -INFINITY, s = 0.0;
        for (int64_t j = 0; j < V; j++) mx = (double)z[j] > mx ? (double)z[j] : mx;
        /* exp(z - max) once per logit: summed, and kept in dz (over z when
         * they alias: z[y] is read before) for the softmax */
        for (int64_t j = 0; j < V; j++) {
            const double e = exp((double)z[j] - mx);
            s += e;
            if (dz) dz[j] = (float)e;
        }
        row[r] = ignored ? 0.0 : mx + log(s) - zy;
        if (dz) {
            const double k = ignored ? 0.0 : inv / s;
            for (int64_t j = 0; j < V; j++) dz[j] = (float)((double)dz[j] * k);
            if (!ignored) dz[y] = (float)((exp(zy - mx) / s - 1.0) * inv);
        }
    }
    double sum = 0.0;
    for (int64_t r = 0; r < N; r++) sum += row[r];
    mha__free(row);
    *loss = (float)(sum * inv);
    return MHA_OK;
}

mha_status mha_gpt_loss_backward(mha_gpt *m, float *loss, float *logits, const int32_t *idx, const int32_t *targets,
                                 int64_t B, int64_t T, mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!m || !loss || !targets) return mha__fail(MHA_ERR_ARGUMENT, "model, loss or targets is NULL");
    if (m->cfg.kind != MHA_GPT_MODEL) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock has no logits");
    int64_t count;
    mha_status st = check_tokens(m, B, T);
    if (st == MHA_OK) st = count_targets(targets, B * T, m->V, &count); /* before any draw */
    if (st != MHA_OK) return st;
    st = mha_gpt_forward_tape(m, logits, idx, B, T, dropout_rng, tape);
    if (st != MHA_OK) return st;
    if ((st = mha_cross_entropy(loss, tape->logits, tape->logits, targets, B * T, m->V)) != MHA_OK) {
        tape->m = NULL;
        return st;
    }
    if (!grad_arena(m)) {
        tape->m = NULL;
        return MHA_ERR_NOMEM;
    }
    st = model_backward(m, tape, tape->logits);
    tape->m = NULL; /* consumed (the logits are now their gradient) */
    return st;
}
