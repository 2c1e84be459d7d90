/* gpt.c — chapter 4: the book's GPTModel and TransformerBlock on mha's
 * attention layer: configuration, parameters (named and drawn as PyTorch
 * does), the forward pass in eval and training mode, and the KV cache.
 *
 * One forward path serves all three uses. The residual stream x (rows, E)
 * goes through each block as
 *   h = norm1(x); qkv = h W_qkv^T + b; ctx = attention(q, k, v);
 *   x += drop(ctx W_out^T + b_out); h = norm2(x);
 *   x += drop(gelu(h W1^T + b1) W2^T + b2)
 * with the keys and values either in a per-call buffer (a plain forward) or
 * in the model's cache at their absolute positions (feeding a cache). The
 * attention layer computes only the query rows asked for, and a row's
 * result does not depend on which other rows are computed. */
#include "gpt.h"

#include "attention/attention.h"
#include "common/common.h"
#include "generator/generator.h"
#include "kernels/drivers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

#define MHA_GPT_MAX_DIM ((int64_t)1 << 24)

/* ---- elementwise layers -------------------------------------------------- */
/* The kernels (one body per ISA) and their row drivers are in kernels/
 * (elementwise_body.h, elementwise_ref.c, rows.c); the forward below fuses GELU and
 * the residual adds into the GEMMs' tiles (mha__sgemm_epilogue). */

mha_status mha_layernorm_forward(float *y, const float *x, const float *scale, const float *shift,
                                 int64_t rows, int64_t E) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!y || !x || !scale || !shift) return mha__fail(MHA_ERR_ARGUMENT, "layernorm: NULL argument");
    if (rows < 0 || E < 1) return mha__fail(MHA_ERR_SHAPE, "layernorm: rows %lld, E %lld", (long long)rows, (long long)E);
    mha__layernorm_rows(y, x, scale, shift, rows, E);
    return MHA_OK;
}

void mha_gelu_forward(float *y, const float *x, size_t n) { mha__gelu_n(y, x, n); }

/* ---- configuration --------------------------------------------------------- */

static const char *const gpt_kind_names[] = {[MHA_GPT_MODEL] = "GPTModel",
                                             [MHA_TRANSFORMER_BLOCK] = "TransformerBlock"};

const char *mha_gpt_kind_name(mha_gpt_kind k) {
    return k == MHA_GPT_MODEL || k == MHA_TRANSFORMER_BLOCK ? gpt_kind_names[k] : NULL;
}

mha_status mha_gpt_kind_from_name(const char *name, mha_gpt_kind *out) {
    if (!name || !out) return mha__fail(MHA_ERR_ARGUMENT, "name or output is NULL");
    for (int k = MHA_GPT_MODEL; k <= MHA_TRANSFORMER_BLOCK; k++)
        if (strcmp(name, gpt_kind_names[k]) == 0) {
            *out = (mha_gpt_kind)k;
            return MHA_OK;
        }
    return mha__fail(MHA_ERR_UNKNOWN_MODULE, "unknown module '%.80s' (expected GPTModel or TransformerBlock)", name);
}

void mha_gpt_config_init(mha_gpt_config *c, mha_gpt_kind kind) {
    if (!c) return;
    c->kind = kind;
    c->vocab_size = 50257;
    c->context_length = 1024;
    c->emb_dim = 768;
    c->n_heads = 12;
    c->n_layers = kind == MHA_TRANSFORMER_BLOCK ? 1 : 12;
    c->drop_rate = 0.1;
    c->qkv_bias = 0;
}

static bool is_model(const mha_gpt_config *c) { return c->kind == MHA_GPT_MODEL; }

/* Parameter floats, or 0 on overflow. */
static size_t gpt_floats(const mha_gpt_config *c, bool tied) {
    const double E = (double)c->emb_dim, V = (double)c->vocab_size, C = (double)c->context_length;
    double per = 3 * E * E + (c->qkv_bias ? 3 * E : 0) + E * E + E + 8 * E * E + 5 * E + 4 * E;
    double n = per * (double)c->n_layers;
    if (is_model(c)) n += V * E + C * E + 2 * E + (tied ? 0 : V * E);
    if (n > 4e12) return 0;
    return (size_t)n;
}

mha_status mha_gpt_config_validate(const mha_gpt_config *c) {
    if (!c) return mha__fail(MHA_ERR_ARGUMENT, "configuration is NULL");
    if (!mha_gpt_kind_name(c->kind)) return mha__fail(MHA_ERR_UNKNOWN_MODULE, "unknown GPT module kind %d", (int)c->kind);
#define POS(f)                                                                                          \
    if (c->f < 1 || c->f > MHA_GPT_MAX_DIM)                                                            \
        return mha__fail(c->f < 1 ? MHA_ERR_CONFIG : MHA_ERR_OVERFLOW, #f " must be in [1, %lld], got %lld", \
                         (long long)MHA_GPT_MAX_DIM, (long long)c->f);
    POS(emb_dim)
    POS(context_length)
    POS(n_heads)
    if (is_model(c)) {
        POS(vocab_size)
        POS(n_layers)
        if (c->vocab_size > INT32_MAX) return mha__fail(MHA_ERR_CONFIG, "vocab_size must fit token ids (int32)");
    }
#undef POS
    if (c->emb_dim % c->n_heads)
        return mha__fail(MHA_ERR_CONFIG, "emb_dim (%lld) must be divisible by n_heads (%lld)", (long long)c->emb_dim,
                         (long long)c->n_heads);
    if (!(c->drop_rate >= 0.0 && c->drop_rate < 1.0))
        return mha__fail(MHA_ERR_CONFIG, "drop_rate must be in [0, 1), got %g", c->drop_rate);
    if (c->qkv_bias != 0 && c->qkv_bias != 1) return mha__fail(MHA_ERR_CONFIG, "qkv_bias must be 0 or 1");
    if (gpt_floats(c, false) == 0) return mha__fail(MHA_ERR_OVERFLOW, "parameter count overflows");
    return MHA_OK;
}

/* ---- parameters --------------------------------------------------------- */

typedef struct {
    mha_gpt *m;
    char *at;
    size_t left;
} names_b;

static void add(names_b *nb, const char *pre, const char *name, float *data, int ndim, int64_t s0, int64_t s1) {
    mha_param *p = &nb->m->params[nb->m->n_params++];
    const int len = snprintf(nb->at, nb->left, "%s%s", pre, name);
    p->name = nb->at;
    nb->at += len + 1;
    nb->left -= (size_t)len + 1;
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = ndim == 2 ? s1 : 0;
    p->numel = (size_t)s0 * (size_t)(ndim == 2 ? s1 : 1);
    p->data = data;
}

/* Carves the arena in state_dict order and names the parameters. */
static void build(mha_gpt *m) {
    const int64_t E = m->E, V = m->V, C = m->C;
    float *at = m->arena;
    names_b nb = {m, m->names, (size_t)(m->L * 20 + 8) * 64u};
    if (is_model(&m->cfg)) {
        m->tok_emb = at, at += V * E;
        m->pos_emb = at, at += C * E;
        add(&nb, "", "tok_emb.weight", m->tok_emb, 2, V, E);
        add(&nb, "", "pos_emb.weight", m->pos_emb, 2, C, E);
    }
    static const char *const role[3] = {"W_query", "W_key", "W_value"};
    for (int64_t l = 0; l < m->L; l++) {
        mha__gpt_block *b = &m->blocks[l];
        char pre[48] = "", name[64];
        if (is_model(&m->cfg)) snprintf(pre, sizeof pre, "trf_blocks.%lld.", (long long)l);
        b->w_qkv = at, at += 3 * E * E;
        if (m->cfg.qkv_bias) b->b_qkv = at, at += 3 * E;
        for (int r = 0; r < 3; r++) {
            snprintf(name, sizeof name, "att.%s.weight", role[r]);
            add(&nb, pre, name, b->w_qkv + r * E * E, 2, E, E);
            if (b->b_qkv) {
                snprintf(name, sizeof name, "att.%s.bias", role[r]);
                add(&nb, pre, name, b->b_qkv + r * E, 1, E, 0);
            }
        }
        b->w_out = at, at += E * E;
        b->b_out = at, at += E;
        add(&nb, pre, "att.out_proj.weight", b->w_out, 2, E, E);
        add(&nb, pre, "att.out_proj.bias", b->b_out, 1, E, 0);
        b->w1 = at, at += 4 * E * E;
        b->b1 = at, at += 4 * E;
        b->w2 = at, at += 4 * E * E;
        b->b2 = at, at += E;
        add(&nb, pre, "ff.layers.0.weight", b->w1, 2, 4 * E, E);
        add(&nb, pre, "ff.layers.0.bias", b->b1, 1, 4 * E, 0);
        add(&nb, pre, "ff.layers.2.weight", b->w2, 2, E, 4 * E);
        add(&nb, pre, "ff.layers.2.bias", b->b2, 1, E, 0);
        b->ln1_s = at, at += E;
        b->ln1_b = at, at += E;
        b->ln2_s = at, at += E;
        b->ln2_b = at, at += E;
        add(&nb, pre, "norm1.scale", b->ln1_s, 1, E, 0);
        add(&nb, pre, "norm1.shift", b->ln1_b, 1, E, 0);
        add(&nb, pre, "norm2.scale", b->ln2_s, 1, E, 0);
        add(&nb, pre, "norm2.shift", b->ln2_b, 1, E, 0);
    }
    if (is_model(&m->cfg)) {
        m->lnf_s = at, at += E;
        m->lnf_b = at, at += E;
        add(&nb, "", "final_norm.scale", m->lnf_s, 1, E, 0);
        add(&nb, "", "final_norm.shift", m->lnf_b, 1, E, 0);
        if (m->tied) {
            m->head = m->tok_emb;
        } else {
            m->head = at, at += V * E;
        }
        add(&nb, "", "out_head.weight", m->head, 2, V, E);
    }
}

static void ones_for_norms(mha_gpt *m) {
    for (int64_t l = 0; l < m->L; l++)
        for (int64_t i = 0; i < m->E; i++) m->blocks[l].ln1_s[i] = m->blocks[l].ln2_s[i] = 1.0f;
    if (m->lnf_s)
        for (int64_t i = 0; i < m->E; i++) m->lnf_s[i] = 1.0f;
}

mha_status mha_gpt_create(const mha_gpt_config *c, int tie_head, mha_gpt **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "output pointer is NULL");
    *out = NULL;
    mha_status st = mha_gpt_config_validate(c);
    if (st != MHA_OK) return st;
    mha_gpt *m = mha__calloc(sizeof *m);
    if (!m) return mha__nomem("out of memory creating a model");
    m->cfg = *c;
    if (!is_model(c)) m->cfg.vocab_size = 0, m->cfg.n_layers = 1;
    m->E = c->emb_dim;
    m->H = c->n_heads;
    m->HD = c->emb_dim / c->n_heads;
    m->L = m->cfg.n_layers;
    m->V = m->cfg.vocab_size;
    m->C = c->context_length;
    m->tied = is_model(c) && tie_head;
    m->arena_floats = gpt_floats(&m->cfg, m->tied);
    const size_t max_params = (size_t)(m->L * 20 + 8);
    m->arena = mha__calloc(m->arena_floats * sizeof(float));
    m->blocks = mha__calloc((size_t)m->L * sizeof *m->blocks);
    m->params = mha__calloc(max_params * sizeof(mha_param));
    m->names = mha__calloc(max_params * 64u);
    if (!m->arena || !m->blocks || !m->params || !m->names) {
        const size_t n = m->arena_floats;
        mha_gpt_free(m);
        return mha__nomem("out of memory allocating %zu parameters (%zu MiB)", n,
                         n * sizeof(float) >> 20);
    }
    build(m);
    ones_for_norms(m);
    *out = m;
    return MHA_OK;
}

mha_status mha_gpt_init(mha_gpt *m, mha_generator *g) {
    if (!m || !g) return mha__fail(MHA_ERR_ARGUMENT, "model or generator is NULL");
    const int64_t E = m->E;
    mha_status st = MHA_OK;
    if (is_model(&m->cfg)) {
        if ((st = mha_generator_embedding_init(g, m->tok_emb, m->V, E, -1)) != MHA_OK) return st;
        if ((st = mha_generator_embedding_init(g, m->pos_emb, m->C, E, -1)) != MHA_OK) return st;
    }
    for (int64_t l = 0; l < m->L; l++) {
        mha__gpt_block *b = &m->blocks[l];
        for (int r = 0; r < 3; r++)
            if ((st = mha_generator_linear_init(g, b->w_qkv + r * E * E, b->b_qkv ? b->b_qkv + r * E : NULL, E, E)) != MHA_OK)
                return st;
        if ((st = mha_generator_linear_init(g, b->w_out, b->b_out, E, E)) != MHA_OK) return st;
        if ((st = mha_generator_linear_init(g, b->w1, b->b1, E, 4 * E)) != MHA_OK) return st;
        if ((st = mha_generator_linear_init(g, b->w2, b->b2, 4 * E, E)) != MHA_OK) return st;
        memset(b->ln1_b, 0, (size_t)E * sizeof(float));
        memset(b->ln2_b, 0, (size_t)E * sizeof(float));
    }
    if (is_model(&m->cfg)) {
        memset(m->lnf_b, 0, (size_t)E * sizeof(float));
        if (!m->tied && (st = mha_generator_linear_init(g, m->head, NULL, E, m->V)) != MHA_OK) return st;
    }
    ones_for_norms(m);
    m->kv_len = 0;
    return MHA_OK;
}

mha_status mha_gpt_create_seeded(const mha_gpt_config *c, uint64_t seed, mha_gpt **out) {
    mha_status st = mha_gpt_create(c, 0, out);
    if (st != MHA_OK) return st;
    mha_generator *g = NULL;
    st = mha_generator_create(seed, &g);
    if (st == MHA_OK) st = mha_gpt_init(*out, g);
    mha_generator_free(g);
    if (st != MHA_OK) {
        mha_gpt_free(*out);
        *out = NULL;
    }
    return st;
}

void mha_gpt_free(mha_gpt *m) {
    if (!m) return;
    mha__free(m->arena);
    mha__free(m->grad);
    mha__free(m->blocks);
    mha__free(m->params);
    mha__free(m->names);
    mha__free(m->ws);
    mha__free(m->kv);
    mha__free(m->kq);
    mha__free(m);
}

const mha_gpt_config *mha_gpt_get_config(const mha_gpt *m) { return m ? &m->cfg : NULL; }
int mha_gpt_head_tied(const mha_gpt *m) { return m && m->tied; }
size_t mha_gpt_num_params(const mha_gpt *m) { return m ? m->n_params : 0; }

mha_status mha_gpt_param(const mha_gpt *m, size_t i, mha_param *out) {
    if (!m || !out) return mha__fail(MHA_ERR_ARGUMENT, "model or output is NULL");
    if (i >= m->n_params)
        return mha__fail(MHA_ERR_ARGUMENT, "parameter index %zu out of range (%zu parameters)", i, m->n_params);
    *out = m->params[i];
    return MHA_OK;
}

mha_status mha_gpt_find_param(const mha_gpt *m, const char *name, mha_param *out) {
    if (!m || !name || !out) return mha__fail(MHA_ERR_ARGUMENT, "model, name or output is NULL");
    for (size_t i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, name) == 0) {
            *out = m->params[i];
            return MHA_OK;
        }
    return mha__fail(MHA_ERR_MISSING, "%s has no parameter '%.100s'", gpt_kind_names[m->cfg.kind], name);
}

int64_t mha_gpt_param_scalars(const mha_gpt *m) { return m ? (int64_t)m->arena_floats : 0; }

/* ---- forward ------------------------------------------------------------ */

/* Activation rows of a forward over `rows` rows: h (E), qkv (3E), ctx (E),
 * ff (4E). */
static mha_status grow_ws(mha_gpt *m, size_t bytes) {
    if (m->ws_size >= bytes) return MHA_OK;
    void *p = mha__alloc(bytes);
    if (!p) return mha__nomem("out of memory allocating %zu bytes of activations", bytes);
    mha__free(m->ws);
    m->ws = p;
    m->ws_size = bytes;
    return MHA_OK;
}

static void drop_inplace(mha_generator *g, float *x, size_t n, double p) {
    if (g && p > 0.0) mha_generator_dropout(g, x, x, n, p);
}

typedef struct {
    int64_t B, T;      /* rows = B * (T - t0): the rows computed */
    int64_t t0;        /* first position computed (cache: the cached length) */
    mha_generator *g;  /* training-mode masks, or NULL */
    bool cache;        /* keys and values in m->kv (B == 1) */
    float *h, *qkv, *ctx, *ff, *att_ws;
    uint64_t *keep;    /* training: a residual branch's keep bits (rows * E) */
    size_t att_ws_size;
} pass;

/* x (rows, E) += drop(A W^T + bias), W (E, K): the residual add (and the
 * branch's dropout, its mask drawn first, as PyTorch draws it after the
 * branch's Linear: nothing draws in between) as the GEMM's epilogue, on
 * each tile while it is in cache; p->ctx takes the product. */
static mha_status residual_linear(const mha_gpt *m, pass *p, float *x, int64_t rows, int64_t K,
                                  const float *A, int64_t lda, const float *W, const float *bias,
                                  double pdrop) {
    const int64_t E = m->E;
    mha__gemm_epilogue e = {.kind = MHA_EPI_RESIDUAL, .bias = bias, .x = x, .ldx = E};
    if (pdrop > 0.0) {
        mha__generator_keep_bits(p->g, p->keep, (size_t)(rows * E), pdrop);
        e.keep = (mha__keep_view){.bits = p->keep, .bit0 = 0, .ld = E, .scale = mha__dropout_scale(pdrop)};
    }
    return mha__sgemm_epilogue(rows, E, K, A, lda, W, K, p->ctx, E, &e);
}

/* MHA_OK, or MHA_ERR_NOMEM from a GEMM (x and the cache rows being written
 * are then unspecified; the caller's state, kv_len included, is not
 * advanced). */
static mha_status block_forward(mha_gpt *m, int64_t l, float *x, pass *p) {
    mha_status st;
    const mha__gpt_block *b = &m->blocks[l];
    const int64_t E = m->E, T = p->T, n = T - p->t0, rows = p->B * n;
    const double pdrop = p->g ? m->cfg.drop_rate : 0.0;
    mha__layernorm_rows(p->h, x, b->ln1_s, b->ln1_b, rows, E);

    mha__attention_desc d;
    memset(&d, 0, sizeof d);
    d.B = p->B;
    d.T = T;
    d.H = m->H;
    d.HD = m->HD;
    d.head_stride = m->HD;
    d.scale = (float)(1.0 / sqrt((double)m->HD));
    d.causal = true;
    if (pdrop > 0.0) {
        d.dropout = MHA_DROPOUT_TORCH;
        d.p = pdrop;
        d.gen = p->g;
    }
    if (p->cache) {
        /* new rows' q into kq, k and v into the cache at their positions */
        float *kv = m->kv + l * m->C * 2 * E;
        if ((st = mha__sgemm_bias(false, true, rows, 3 * E, E, p->h, E, b->w_qkv, E, b->b_qkv, p->qkv, 3 * E)) != MHA_OK) return st;
        for (int64_t r = 0; r < n; r++) {
            memcpy(m->kq + (p->t0 + r) * E, p->qkv + r * 3 * E, (size_t)E * sizeof(float));
            memcpy(kv + (p->t0 + r) * 2 * E, p->qkv + r * 3 * E + E, (size_t)(2 * E) * sizeof(float));
        }
        d.qkv = kv;
        d.ld_qkv = 2 * E;
        d.k_base = 0;
        d.v_base = E;
        d.q_rows = m->kq;
        d.ld_q_rows = E;
        d.t_begin = p->t0;
        d.o = m->kq; /* context over the queries, row by row */
        d.ldo = E;
        mha__attention_forward(&d, p->att_ws, p->att_ws_size);
        if ((st = residual_linear(m, p, x, rows, E, m->kq + p->t0 * E, E, b->w_out, b->b_out, pdrop)) != MHA_OK)
            return st;
    } else {
        if ((st = mha__sgemm_bias(false, true, rows, 3 * E, E, p->h, E, b->w_qkv, E, b->b_qkv, p->qkv, 3 * E)) != MHA_OK) return st;
        d.qkv = p->qkv;
        d.ld_qkv = 3 * E;
        d.q_base = 0;
        d.k_base = E;
        d.v_base = 2 * E;
        d.o = p->qkv; /* context over Q (kernels.h allows it) */
        d.ldo = 3 * E;
        mha__attention_forward(&d, p->att_ws, p->att_ws_size);
        if ((st = residual_linear(m, p, x, rows, E, p->qkv, 3 * E, b->w_out, b->b_out, pdrop)) != MHA_OK)
            return st;
    }

    mha__layernorm_rows(p->h, x, b->ln2_s, b->ln2_b, rows, E);
    const mha__gemm_epilogue gelu = {.kind = MHA_EPI_GELU, .bias = b->b1};
    if ((st = mha__sgemm_epilogue(rows, 4 * E, E, p->h, E, b->w1, E, p->ff, 4 * E, &gelu)) != MHA_OK)
        return st;
    return residual_linear(m, p, x, rows, 4 * E, p->ff, 4 * E, b->w2, b->b2, pdrop);
}

/* Sets up p's buffers in m->ws after x (rows, E) and head_rows * V logits
 * space is not needed here. */
static mha_status plan_pass(mha_gpt *m, pass *p, size_t extra_floats, float **extra) {
    const int64_t E = m->E, rows = p->B * (p->T - p->t0);
    mha__attention_desc d;
    memset(&d, 0, sizeof d);
    d.B = p->B;
    d.T = p->T;
    d.H = m->H;
    d.HD = m->HD;
    d.dropout = p->g && m->cfg.drop_rate > 0.0 ? MHA_DROPOUT_TORCH : MHA_DROPOUT_OFF;
    d.p = m->cfg.drop_rate;
    d.gen = p->g;
    const size_t att = mha__attention_workspace(&d);
    if (att == 0) return mha__fail(MHA_ERR_OVERFLOW, "attention workspace overflows");
    /* h, qkv, ctx, ff and (training) the keep bits, rounded up to floats */
    const size_t keep_words = p->g ? ((size_t)rows * (size_t)E + 63) / 64 : 0;
    const size_t fl = (size_t)rows * (size_t)(E + 3 * E + E + 4 * E) + 2 * keep_words;
    const size_t bytes = mha__align64((fl + extra_floats) * sizeof(float)) + att;
    mha_status st = grow_ws(m, bytes);
    if (st != MHA_OK) return st;
    float *at = m->ws; /* 64-byte aligned: the keep words first */
    p->keep = keep_words ? (uint64_t *)(void *)at : NULL;
    at += 2 * keep_words;
    p->h = at, at += rows * E;
    p->qkv = at, at += rows * 3 * E;
    p->ctx = at, at += rows * E;
    p->ff = at, at += rows * 4 * E;
    *extra = at;
    p->att_ws = (float *)(void *)((char *)m->ws + mha__align64((fl + extra_floats) * sizeof(float)));
    p->att_ws_size = att;
    return MHA_OK;
}

static mha_status check_ids(const mha_gpt *m, const int32_t *idx, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= m->V)
            return mha__fail(MHA_ERR_ARGUMENT, "token id %d at position %lld is outside the vocabulary [0, %lld)", idx[i],
                             (long long)i, (long long)m->V);
    return MHA_OK;
}

/* The head on `rows` rows of x (after final_norm into h): logits (rows, V). */
static mha_status head_forward(mha_gpt *m, float *logits, float *h, const float *x, int64_t rows) {
    mha__layernorm_rows(h, x, m->lnf_s, m->lnf_b, rows, m->E);
    return mha__sgemm(false, true, rows, m->V, m->E, 1.0f, h, m->E, m->head, m->E, 0.0f, logits, m->V);
}

mha_status mha_gpt_forward(mha_gpt *m, float *logits, const int32_t *idx, int64_t B, int64_t T, int last_only,
                           mha_generator *dropout_rng) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!m || !logits || !idx) return mha__fail(MHA_ERR_ARGUMENT, "model, logits or idx is NULL");
    if (!is_model(&m->cfg)) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock takes x, not token ids");
    if (B < 1 || T < 1) return mha__fail(MHA_ERR_SHAPE, "batch (%lld) and tokens (%lld) must be positive", (long long)B, (long long)T);
    if (T > m->C) return mha__fail(MHA_ERR_CONTEXT_LENGTH, "%lld tokens exceed context_length %lld", (long long)T, (long long)m->C);
    if (B > ((int64_t)1 << 30) / T) return mha__fail(MHA_ERR_OVERFLOW, "batch x tokens is too large");
    mha_status st = check_ids(m, idx, B * T);
    if (st != MHA_OK) return st;
    const int64_t E = m->E, rows = B * T;
    pass p = {.B = B, .T = T, .t0 = 0, .g = dropout_rng, .cache = false};
    float *x;
    if ((st = plan_pass(m, &p, (size_t)(rows * E), &x)) != MHA_OK) return st;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t e = 0; e < E; e++)
            x[r * E + e] = m->tok_emb[(int64_t)idx[r] * E + e] + m->pos_emb[(r % T) * E + e];
    drop_inplace(dropout_rng, x, (size_t)(rows * E), dropout_rng ? m->cfg.drop_rate : 0.0);
    for (int64_t l = 0; l < m->L; l++)
        if ((st = block_forward(m, l, x, &p)) != MHA_OK) return st;
    if (last_only) {
        for (int64_t b = 0; b < B; b++) memmove(x + b * E, x + (b * T + T - 1) * E, (size_t)E * sizeof(float));
        return head_forward(m, logits, p.h, x, B);
    }
    return head_forward(m, logits, p.h, x, rows);
}

mha_status mha_gpt_blocks_forward(mha_gpt *m, float *y, const float *x, int64_t B, int64_t T,
                                  mha_generator *dropout_rng) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!m || !y || !x) return mha__fail(MHA_ERR_ARGUMENT, "model, y or x is NULL");
    if (B < 1 || T < 1) return mha__fail(MHA_ERR_SHAPE, "batch (%lld) and tokens (%lld) must be positive", (long long)B, (long long)T);
    if (T > m->C) return mha__fail(MHA_ERR_CONTEXT_LENGTH, "%lld tokens exceed context_length %lld", (long long)T, (long long)m->C);
    if (B > ((int64_t)1 << 30) / T) return mha__fail(MHA_ERR_OVERFLOW, "batch x tokens is too large");
    const int64_t n = B * T * m->E;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return mha__fail(MHA_ERR_NONFINITE, "input x holds %s at element %lld", isnan(x[i]) ? "NaN" : "infinity", (long long)i);
    pass p = {.B = B, .T = T, .t0 = 0, .g = dropout_rng, .cache = false};
    float *unused;
    mha_status st = plan_pass(m, &p, 0, &unused);
    if (st != MHA_OK) return st;
    if (y != x) memcpy(y, x, (size_t)n * sizeof(float));
    for (int64_t l = 0; l < m->L; l++)
        if ((st = block_forward(m, l, y, &p)) != MHA_OK) return st;
    return MHA_OK;
}

/* ---- KV cache ------------------------------------------------------------ */

mha_status mha_gpt_cache_reset(mha_gpt *m) {
    if (!m) return mha__fail(MHA_ERR_ARGUMENT, "model is NULL");
    m->kv_len = 0;
    return MHA_OK;
}

int64_t mha_gpt_cache_length(const mha_gpt *m) { return m ? m->kv_len : 0; }

mha_status mha_gpt_cache_feed(mha_gpt *m, float *logits, const int32_t *ids, int64_t n) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!m || !logits || !ids) return mha__fail(MHA_ERR_ARGUMENT, "model, logits or ids is NULL");
    if (!is_model(&m->cfg)) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock has no token cache");
    if (n < 1) return mha__fail(MHA_ERR_SHAPE, "feed at least one token (got %lld)", (long long)n);
    if (n > m->C - m->kv_len)
        return mha__fail(MHA_ERR_CONTEXT_LENGTH, "%lld cached + %lld new tokens exceed context_length %lld",
                         (long long)m->kv_len, (long long)n, (long long)m->C);
    mha_status st = check_ids(m, ids, n);
    if (st != MHA_OK) return st;
    const int64_t E = m->E;
    if (!m->kv) {
        size_t kvb;
        if (!mha__mul_size((size_t)(m->L * m->C), (size_t)(2 * E) * sizeof(float), &kvb))
            return mha__fail(MHA_ERR_OVERFLOW, "KV cache size overflows");
        m->kv = mha__alloc(kvb);
        m->kq = mha__alloc((size_t)(m->C * E) * sizeof(float));
        if (!m->kv || !m->kq) {
            mha__free(m->kv);
            mha__free(m->kq);
            m->kv = m->kq = NULL;
            return mha__nomem("out of memory allocating the KV cache (%zu MiB)", kvb >> 20);
        }
    }
    const int64_t t0 = m->kv_len;
    pass p = {.B = 1, .T = t0 + n, .t0 = t0, .g = NULL, .cache = true};
    float *x;
    if ((st = plan_pass(m, &p, (size_t)(n * E), &x)) != MHA_OK) return st;
    for (int64_t r = 0; r < n; r++)
        for (int64_t e = 0; e < E; e++) x[r * E + e] = m->tok_emb[(int64_t)ids[r] * E + e] + m->pos_emb[(t0 + r) * E + e];
    for (int64_t l = 0; l < m->L; l++)
        if ((st = block_forward(m, l, x, &p)) != MHA_OK) return st;
    if ((st = head_forward(m, logits, p.h, x + (n - 1) * E, 1)) != MHA_OK) return st;
    m->kv_len = t0 + n; /* only now: a failed feed leaves the cache as it was */
    return MHA_OK;
}
