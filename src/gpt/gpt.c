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
#include "kernels/half.h"

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

/* Parameter scalars, or 0 on overflow: the matrices' (which_matrices) or
 * the vectors'. */
static size_t gpt_scalars(const mha_gpt_config *c, bool tied, bool which_matrices) {
    const double E = (double)c->emb_dim, V = (double)c->vocab_size, C = (double)c->context_length;
    const double mats = 12 * E * E, vecs = (c->qkv_bias ? 3 * E : 0) + E + 5 * E + 4 * E;
    double n = (which_matrices ? mats : vecs) * (double)c->n_layers;
    if (is_model(c)) n += which_matrices ? V * E + C * E + (tied ? 0 : V * E) : 2 * E;
    if (n > 4e12) return 0;
    return (size_t)n;
}

/* Parameter floats (an F32 model's), or 0 on overflow. */
static size_t gpt_floats(const mha_gpt_config *c, bool tied) {
    const size_t m = gpt_scalars(c, tied, true), v = gpt_scalars(c, tied, false);
    return m && v ? m + v : 0;
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

/* Where build() carves from: the F32 arena, and the 16-bit one. */
typedef struct {
    mha_gpt *m;
    float *at;
    uint16_t *ht;
} builder;

/* The next n-scalar matrix: from the 16-bit arena in a 16-bit model (*f
 * NULL), else from the F32 arena; its view for the forward (row length ld)
 * in *w. */
static void carve_matrix(builder *b, int64_t n, int64_t ld, float **f, mha__wmat *w) {
    if (b->m->wdtype != MHA_DTYPE_F32) {
        *f = NULL;
        *w = (mha__wmat){b->ht, ld, b->m->wdtype};
        b->ht += n;
    } else {
        *f = b->at;
        *w = (mha__wmat){b->at, ld, MHA_DTYPE_F32};
        b->at += n;
    }
}

static float *carve_vector(builder *b, int64_t n) {
    float *f = b->at;
    b->at += n;
    return f;
}

/* Names the next state_dict tensor, prefix + name, of shape (s0) or (s0,
 * s1), held at f (F32: also a parameter of the set) or else at h (16-bit). */
static void name_tensor(mha_gpt *m, const char *pre, const char *name, int ndim, int64_t s0, int64_t s1, float *f,
                        const void *h) {
    mha__gpt_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s%s", pre, name);
    t->ndim = ndim, t->s0 = s0, t->s1 = ndim == 2 ? s1 : 0;
    t->f = f;
    t->h = f ? NULL : (uint16_t *)h;
    if (f) mha__params_add(&m->params, pre, name, f, ndim, s0, s1);
}

/* Carves the arenas and names the tensors in state_dict order. */
static void build(mha_gpt *m) {
    const int64_t E = m->E, V = m->V, C = m->C;
    const size_t h = m->wdtype == MHA_DTYPE_F32 ? 4 : 2; /* a matrix element's bytes */
    builder bd = {m, m->params.arena, m->w16};
    mha__wmat tok = {0}, pos;
    if (is_model(&m->cfg)) {
        carve_matrix(&bd, V * E, E, &m->tok_emb, &tok);
        carve_matrix(&bd, C * E, E, &m->pos_emb, &pos);
        m->tok16 = m->tok_emb ? NULL : tok.p;
        m->pos16 = m->pos_emb ? NULL : pos.p;
        name_tensor(m, "", "tok_emb.weight", 2, V, E, m->tok_emb, tok.p);
        name_tensor(m, "", "pos_emb.weight", 2, C, E, m->pos_emb, pos.p);
    }
    static const char *const role[3] = {"W_query", "W_key", "W_value"};
    for (int64_t l = 0; l < m->L; l++) {
        mha__gpt_block *b = &m->blocks[l];
        char pre[48] = "", name[64];
        if (is_model(&m->cfg)) snprintf(pre, sizeof pre, "trf_blocks.%lld.", (long long)l);
        /* W_query, W_key, W_value: one (3E, E) matrix, their biases one (3E) vector */
        carve_matrix(&bd, 3 * E * E, E, &b->w_qkv, &b->qkv);
        if (m->cfg.qkv_bias) b->b_qkv = carve_vector(&bd, 3 * E);
        for (int r = 0; r < 3; r++) {
            const char *wr = (const char *)b->qkv.p + (size_t)(r * E * E) * h;
            snprintf(name, sizeof name, "att.%s.weight", role[r]);
            name_tensor(m, pre, name, 2, E, E, b->w_qkv ? b->w_qkv + r * E * E : NULL, wr);
            if (b->b_qkv) {
                snprintf(name, sizeof name, "att.%s.bias", role[r]);
                name_tensor(m, pre, name, 1, E, 0, b->b_qkv + r * E, NULL);
            }
        }
        carve_matrix(&bd, E * E, E, &b->w_out, &b->out);
        b->b_out = carve_vector(&bd, E);
        name_tensor(m, pre, "att.out_proj.weight", 2, E, E, b->w_out, b->out.p);
        name_tensor(m, pre, "att.out_proj.bias", 1, E, 0, b->b_out, NULL);
        carve_matrix(&bd, 4 * E * E, E, &b->w1, &b->ff1);
        b->b1 = carve_vector(&bd, 4 * E);
        carve_matrix(&bd, 4 * E * E, 4 * E, &b->w2, &b->ff2);
        b->b2 = carve_vector(&bd, E);
        name_tensor(m, pre, "ff.layers.0.weight", 2, 4 * E, E, b->w1, b->ff1.p);
        name_tensor(m, pre, "ff.layers.0.bias", 1, 4 * E, 0, b->b1, NULL);
        name_tensor(m, pre, "ff.layers.2.weight", 2, E, 4 * E, b->w2, b->ff2.p);
        name_tensor(m, pre, "ff.layers.2.bias", 1, E, 0, b->b2, NULL);
        b->ln1_s = carve_vector(&bd, E);
        b->ln1_b = carve_vector(&bd, E);
        b->ln2_s = carve_vector(&bd, E);
        b->ln2_b = carve_vector(&bd, E);
        name_tensor(m, pre, "norm1.scale", 1, E, 0, b->ln1_s, NULL);
        name_tensor(m, pre, "norm1.shift", 1, E, 0, b->ln1_b, NULL);
        name_tensor(m, pre, "norm2.scale", 1, E, 0, b->ln2_s, NULL);
        name_tensor(m, pre, "norm2.shift", 1, E, 0, b->ln2_b, NULL);
    }
    if (is_model(&m->cfg)) {
        m->lnf_s = carve_vector(&bd, E);
        m->lnf_b = carve_vector(&bd, E);
        name_tensor(m, "", "final_norm.scale", 1, E, 0, m->lnf_s, NULL);
        name_tensor(m, "", "final_norm.shift", 1, E, 0, m->lnf_b, NULL);
        if (m->tied) {
            m->head = m->tok_emb; /* listed, saved, but stepped and counted once */
            m->head_w = tok;
            mha__gpt_tensor *t = &m->tensors[m->n_tensors++];
            *t = m->tensors[0];
            snprintf(t->name, sizeof t->name, "out_head.weight");
            t->alias = true;
            if (m->tok_emb) mha__params_add_alias(&m->params, "out_head.weight", 0);
        } else {
            carve_matrix(&bd, V * E, E, &m->head, &m->head_w);
            name_tensor(m, "", "out_head.weight", 2, V, E, m->head, m->head_w.p);
        }
    }
}
static void ones_for_norms(mha_gpt *m) {
    for (int64_t l = 0; l < m->L; l++)
        for (int64_t i = 0; i < m->E; i++) m->blocks[l].ln1_s[i] = m->blocks[l].ln2_s[i] = 1.0f;
    if (m->lnf_s)
        for (int64_t i = 0; i < m->E; i++) m->lnf_s[i] = 1.0f;
}

mha_status mha_gpt_create_as(const mha_gpt_config *c, int tie_head, mha_dtype dtype, mha_gpt **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "output pointer is NULL");
    *out = NULL;
    mha_status st = mha_gpt_config_validate(c);
    if (st != MHA_OK) return st;
    if (dtype != MHA_DTYPE_F32 && dtype != MHA_DTYPE_BF16 && dtype != MHA_DTYPE_F16)
        return mha__fail(MHA_ERR_DTYPE, "a model's weights are f32, bf16 or f16, not %s",
                         mha_dtype_name(dtype) ? mha_dtype_name(dtype) : "that dtype");
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
    m->wdtype = dtype;
    const bool half = dtype != MHA_DTYPE_F32;
    const size_t n_tensors = (size_t)(m->L * 20 + 8);
    m->blocks = mha__calloc_n((size_t)m->L, sizeof *m->blocks);
    m->tensors = mha__calloc_n(n_tensors, sizeof *m->tensors);
    st = m->blocks && m->tensors ? MHA_OK
                                 : mha__nomem("out of memory creating a model of %lld blocks", (long long)m->L);
    if (st == MHA_OK && half) {
        m->w16_count = gpt_scalars(&m->cfg, m->tied, true);
        m->w16 = mha__alloc_n(m->w16_count, sizeof(uint16_t));
        if (!m->w16) st = mha__nomem("out of memory for %zu MiB of %s weights", m->w16_count * 2 >> 20, mha_dtype_name(dtype));
    }
    if (st == MHA_OK)
        st = mha__params_init(&m->params, gpt_kind_names[c->kind],
                              half ? gpt_scalars(&m->cfg, m->tied, false) : gpt_floats(&m->cfg, m->tied), n_tensors);
    if (st != MHA_OK) {
        mha_gpt_free(m);
        return st;
    }
    build(m);
    ones_for_norms(m);
    if (half) memset(m->w16, 0, m->w16_count * sizeof(uint16_t)); /* as the F32 arena: zeros */
    *out = m;
    return MHA_OK;
}

mha_status mha_gpt_create(const mha_gpt_config *c, int tie_head, mha_gpt **out) {
    return mha_gpt_create_as(c, tie_head, MHA_DTYPE_F32, out);
}

mha_status mha__gpt_narrow(const char *name, size_t i, float v, mha_dtype d, uint16_t *out) {
    *out = d == MHA_DTYPE_BF16 ? mha__f32_to_bf16(v) : mha__f32_to_f16(v);
    if ((*out & 0x7fffu) == (d == MHA_DTYPE_BF16 ? 0x7f80u : 0x7c00u))
        return mha__fail(MHA_ERR_NONFINITE, "tensor '%s' element %zu (%g) is beyond %s's range", name, i, (double)v,
                         d == MHA_DTYPE_BF16 ? "bf16" : "f16");
    return MHA_OK;
}

/* mha_gpt_init's matrices: an F32 model's drawn in place; a 16-bit
 * model's drawn into scratch (F32, the largest matrix's size), then
 * rounded into place as mha_gpt_convert rounds, so that no F32 copy of the
 * model is ever held. The draws come in state_dict order, so the matrix a
 * draw fills is the next matrix tensor. */
typedef struct {
    mha_gpt *m;
    float *scratch; /* NULL for an F32 model */
    size_t next;    /* the tensor to look for the next matrix from */
} drawer;

/* Where the generator writes the matrix whose F32 home is f. */
static float *draw_to(const drawer *d, float *f) { return d->scratch ? d->scratch : f; }

/* After a matrix's draw: a 16-bit model's n elements rounded into the next
 * matrix tensor. */
static mha_status draw_done(drawer *d, size_t n) {
    if (!d->scratch) return MHA_OK;
    const mha_gpt *m = d->m;
    while (d->next < m->n_tensors && (m->tensors[d->next].ndim != 2 || m->tensors[d->next].alias)) d->next++;
    if (d->next == m->n_tensors || (size_t)(m->tensors[d->next].s0 * m->tensors[d->next].s1) != n)
        return mha__fail(MHA_ERR_SHAPE, "mha_gpt_init: the draws and the model's matrices disagree");
    const mha__gpt_tensor *t = &m->tensors[d->next++];
    mha_status st = MHA_OK;
    for (size_t i = 0; i < n && st == MHA_OK; i++) st = mha__gpt_narrow(t->name, i, d->scratch[i], m->wdtype, &t->h[i]);
    return st;
}

/* nn.Linear(in, out)'s draw: W (F32 home f), then its bias (F32 in every
 * model; NULL: none). */
static mha_status draw_linear(drawer *d, mha_generator *g, float *f, float *bias, int64_t in, int64_t out) {
    const mha_status st = mha_generator_linear_init(g, draw_to(d, f), bias, in, out);
    return st == MHA_OK ? draw_done(d, (size_t)(in * out)) : st;
}

static mha_status draw_embedding(drawer *d, mha_generator *g, float *f, int64_t rows, int64_t cols) {
    const mha_status st = mha_generator_embedding_init(g, draw_to(d, f), rows, cols, -1);
    return st == MHA_OK ? draw_done(d, (size_t)(rows * cols)) : st;
}

/* Every parameter in PyTorch's construction order (mha_gpt_init). */
static mha_status draw_all(drawer *d, mha_generator *g) {
    mha_gpt *m = d->m;
    const int64_t E = m->E;
    mha_status st = MHA_OK;
    if (is_model(&m->cfg)) {
        if ((st = draw_embedding(d, g, m->tok_emb, m->V, E)) != MHA_OK) return st;
        if ((st = draw_embedding(d, g, m->pos_emb, m->C, E)) != MHA_OK) return st;
    }
    for (int64_t l = 0; l < m->L; l++) {
        mha__gpt_block *b = &m->blocks[l];
        for (int r = 0; r < 3; r++)
            if ((st = draw_linear(d, g, b->w_qkv ? b->w_qkv + r * E * E : NULL, b->b_qkv ? b->b_qkv + r * E : NULL, E,
                                  E)) != MHA_OK)
                return st;
        if ((st = draw_linear(d, g, b->w_out, b->b_out, E, E)) != MHA_OK) return st;
        if ((st = draw_linear(d, g, b->w1, b->b1, E, 4 * E)) != MHA_OK) return st;
        if ((st = draw_linear(d, g, b->w2, b->b2, 4 * E, E)) != MHA_OK) return st;
        memset(b->ln1_b, 0, (size_t)E * sizeof(float));
        memset(b->ln2_b, 0, (size_t)E * sizeof(float));
    }
    if (is_model(&m->cfg)) {
        memset(m->lnf_b, 0, (size_t)E * sizeof(float));
        if (!m->tied && (st = draw_linear(d, g, m->head, NULL, E, m->V)) != MHA_OK) return st;
    }
    return MHA_OK;
}

mha_status mha_gpt_init(mha_gpt *m, mha_generator *g) {
    if (!m || !g) return mha__fail(MHA_ERR_ARGUMENT, "model or generator is NULL");
    drawer d = {m, NULL, 0};
    if (m->wdtype != MHA_DTYPE_F32) {
        /* the largest matrix drawn: tok_emb or the head (V, E), pos_emb
         * (C, E), ff.layers.0/2 (4E, E) */
        int64_t most = 4 * m->E * m->E;
        if (is_model(&m->cfg)) {
            if (m->V * m->E > most) most = m->V * m->E;
            if (m->C * m->E > most) most = m->C * m->E;
        }
        d.scratch = mha__alloc_n((size_t)most, sizeof(float));
        if (!d.scratch)
            return mha__nomem("out of memory for %zu MiB drawing a %s model's matrices", (size_t)most * 4 >> 20,
                              mha_dtype_name(m->wdtype));
    }
    const mha_status st = draw_all(&d, g);
    mha__free(d.scratch);
    if (st != MHA_OK) return st;
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
    mha__params_free(&m->params);
    mha__free(m->w16);
    mha__free(m->tensors);
    mha__free(m->blocks);
    mha__free(m->ws);
    mha__free(m->kv);
    mha__free(m->kq);
    mha__free(m);
}

const mha_gpt_config *mha_gpt_config_of(const mha_gpt *m) { return m ? &m->cfg : NULL; }
int mha_gpt_head_tied(const mha_gpt *m) { return m && m->tied; }
mha_params *mha_gpt_params(mha_gpt *m) {
    if (m && m->wdtype != MHA_DTYPE_F32) {
        mha__fail(MHA_ERR_UNSUPPORTED, "a %s model's weights are not a parameter set (load it as f32 to train)",
                  mha_dtype_name(m->wdtype));
        return NULL;
    }
    return m ? &m->params : NULL;
}

mha_dtype mha_gpt_weights_dtype(const mha_gpt *m) { return m ? m->wdtype : MHA_DTYPE_F32; }

size_t mha_gpt_weights_bytes(const mha_gpt *m) {
    if (!m) return 0;
    return m->params.floats * sizeof(float) + m->w16_count * sizeof(uint16_t);
}

size_t mha_gpt_weights_count(const mha_gpt *m) { return m ? m->n_tensors : 0; }

mha_status mha_gpt_weight_get(const mha_gpt *m, size_t i, mha_gpt_weight *out) {
    if (!m || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_weight_get: NULL argument");
    if (i >= m->n_tensors)
        return mha__fail(MHA_ERR_ARGUMENT, "weight %zu of a model of %zu tensors", i, m->n_tensors);
    const mha__gpt_tensor *t = &m->tensors[i];
    *out = (mha_gpt_weight){t->name, t->f ? MHA_DTYPE_F32 : m->wdtype, t->ndim, {t->s0, t->s1},
                            (size_t)t->s0 * (size_t)(t->s1 ? t->s1 : 1), t->f ? (const void *)t->f : (const void *)t->h};
    return MHA_OK;
}

/* ---- forward ------------------------------------------------------------ */

mha_status mha__gpt_check_tokens(const mha_gpt *m, int64_t B, int64_t T) {
    if (B < 1 || T < 1)
        return mha__fail(MHA_ERR_SHAPE, "batch (%lld) and tokens (%lld) must be positive", (long long)B, (long long)T);
    if (T > m->C)
        return mha__fail(MHA_ERR_CONTEXT_LENGTH, "%lld tokens exceed context_length %lld", (long long)T, (long long)m->C);
    if (B > ((int64_t)1 << 30) / T) return mha__fail(MHA_ERR_OVERFLOW, "batch x tokens is too large");
    return MHA_OK;
}

mha_status mha__gpt_check_finite(const float *a, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return mha__fail(MHA_ERR_NONFINITE, "%s holds %s at element %lld", what, isnan(a[i]) ? "NaN" : "infinity",
                             (long long)i);
    return MHA_OK;
}

static mha_status check_ids(const mha_gpt *m, const int32_t *idx, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= m->V)
            return mha__fail(MHA_ERR_ARGUMENT, "token id %d at position %lld is outside the vocabulary [0, %lld)", idx[i],
                             (long long)i, (long long)m->V);
    return MHA_OK;
}

void mha__gpt_attention_desc(const mha_gpt *m, mha__attention_desc *d, int64_t B, int64_t T, bool drop,
                             mha_generator *gen) {
    mha__attention_desc_init(d, B, T, m->H, m->HD);
    d->head_stride = m->HD;
    d->causal = true;
    d->ld_qkv = 3 * m->E;
    d->q_base = 0;
    d->k_base = m->E;
    d->v_base = 2 * m->E;
    d->ldo = m->E;
    if (drop) {
        d->dropout = MHA_DROPOUT_TORCH;
        d->p = m->cfg.drop_rate;
        d->gen = gen;
    }
}

/* One forward's state: the rows computed and where the work goes. */
typedef struct {
    int64_t B, T;      /* rows = B * (T - t0): the rows computed */
    int64_t t0;        /* first position computed (cache: the cached length) */
    mha_generator *g;  /* training-mode masks, or NULL */
    double drop_rate;
    bool drop;         /* g and drop_rate > 0 */
    int64_t win0, wins; /* these B windows are [win0, win0 + B) of a batch of wins (0: B) */
    bool cache;        /* keys and values in m->kv (B == 1) */
    float *ctx;        /* (rows, E) a residual branch's product (scratch) */
    void *att_ws;
    size_t att_ws_size;
} pass;

/* Skips the draws of the batch's windows before p's (before) or after
 * them, `per` u53 (two outputs) per window: a dropout site draws for the
 * whole batch, in window order, whichever windows this pass computes. */
static void skip_windows(const pass *p, int64_t per, bool before) {
    if (!p->wins) return;
    const int64_t n = before ? p->win0 : p->wins - p->win0 - p->B;
    mha_generator_skip(p->g, 2 * (uint64_t)n * (uint64_t)per);
}

/* A dropout site's keep bits for p's rows (rows * E per window of T rows). */
static void draw_keep(const pass *p, uint64_t *keep, int64_t n) {
    skip_windows(p, n / p->B, true);
    mha__generator_keep_bits(p->g, keep, (size_t)n, p->drop_rate);
    skip_windows(p, n / p->B, false);
}

/* dst (rows, E) = src + drop(A W^T + bias), W (E, K): the residual add (and
 * the branch's dropout, its mask drawn first into keep, as PyTorch draws it
 * after the branch's Linear: nothing draws in between) as the GEMM's
 * epilogue, on each tile while it is in cache. dst == src: in place. */
static mha_status residual_linear(const mha_gpt *m, const pass *p, float *dst, const float *src, int64_t rows,
                                  int64_t K, const float *A, int64_t lda, const mha__wmat *W, const float *bias,
                                  uint64_t *keep) {
    const int64_t E = m->E;
    if (dst != src) memcpy(dst, src, (size_t)(rows * E) * sizeof(float));
    mha__gemm_epilogue e = {.kind = MHA_EPI_RESIDUAL, .bias = bias, .x = dst, .ldx = E};
    if (p->drop) {
        const double pd = m->cfg.drop_rate;
        draw_keep(p, keep, rows * E);
        e.keep = (mha__keep_view){.bits = keep, .bit0 = 0, .ld = E, .scale = mha__dropout_scale(pd)};
    }
    return mha__linear_w(rows, E, K, A, lda, W, NULL, p->ctx, E, &e);
}

/* The attention of block l over the model's cache (p->cache): the keys
 * and values at kv (head-major, see block_forward), the queries and their
 * context in kq, rows [p->t0, p->T). */
static void cache_desc(const mha_gpt *m, const pass *p, int64_t l, mha__attention_desc *d) {
    const int64_t HD = m->HD;
    d->qkv = m->kv + l * m->C * 2 * m->E;
    d->ld_qkv = 2 * HD;
    d->head_stride = m->C * 2 * HD;
    d->k_base = 0;
    d->v_base = HD;
    d->q_rows = m->kq;
    d->ld_q_rows = m->E;
    d->t_begin = p->t0;
    d->o = m->kq;
}

/* Block l from a->x to y (y == a->x without a tape):
 *   h1 = norm1(x); qkv = h1 W_qkv^T + b; o = attention(qkv);
 *   x1 = x + drop(o W_out^T + b_out); h2 = norm2(x1);
 *   y = x1 + drop(gelu(h2 W1^T + b1) W2^T + b2)
 * with the keys and values in the model's cache at their positions when p
 * feeds it. MHA_OK, or MHA_ERR_NOMEM from a GEMM (y and the cache rows
 * being written are then unspecified; kv_len is not advanced). */
static mha_status block_forward(mha_gpt *m, int64_t l, const mha__gpt_acts *a, float *y, const pass *p) {
    mha_status st;
    const mha__gpt_block *b = &m->blocks[l];
    const int64_t E = m->E, n = p->T - p->t0, rows = p->B * n;
    mha__layernorm_rows(a->h1, a->x, b->ln1_s, b->ln1_b, rows, E);
    if ((st = mha__linear_w(rows, 3 * E, E, a->h1, E, &b->qkv, b->b_qkv, a->qkv, 3 * E, NULL)) != MHA_OK) return st;
    mha__attention_desc d;
    mha__gpt_attention_desc(m, &d, p->B, p->T, p->drop, p->g);
    if (p->cache) {
        /* new rows' q into kq, k and v into the cache at their positions;
         * the context over the queries, row by row. The layer's cache is
         * head-major, (H, C, 2 HD): a head's keys and values, HD each, one
         * position after the other, so that a decode step streams each
         * head's from one place (position-major, a head's 256-byte key
         * and value rows lay 6 KiB apart: at 1000 cached positions perf put
         * about 80% of the decode attention's samples on their loads) */
        const int64_t HD = m->HD;
        float *kv = m->kv + l * m->C * 2 * E;
        for (int64_t r = 0; r < n; r++) {
            const float *row = a->qkv + r * 3 * E;
            memcpy(m->kq + (p->t0 + r) * E, row, (size_t)E * sizeof(float));
            for (int64_t h = 0; h < m->H; h++) {
                float *at = kv + (h * m->C + p->t0 + r) * 2 * HD;
                memcpy(at, row + E + h * HD, (size_t)HD * sizeof(float));
                memcpy(at + HD, row + 2 * E + h * HD, (size_t)HD * sizeof(float));
            }
        }
        cache_desc(m, p, l, &d);
    } else {
        d.qkv = a->qkv;
        d.o = a->o ? a->o : a->qkv; /* without a tape, over Q (kernels.h allows it) */
        d.ldo = a->o ? E : 3 * E;
        d.stats = a->stats;
        d.keep_bits = a->abits;
    }
    if (p->drop) skip_windows(p, m->H * p->T * p->T, true);
    if ((st = mha__attention_forward(&d, p->att_ws, p->att_ws_size)) != MHA_OK) return st;
    if (p->drop) skip_windows(p, m->H * p->T * p->T, false);
    const float *ctx = p->cache ? m->kq + p->t0 * E : d.o;
    if ((st = residual_linear(m, p, a->x1, a->x, rows, E, ctx, d.ldo, &b->out, b->b_out, a->kb1)) != MHA_OK)
        return st;
    mha__layernorm_rows(a->h2, a->x1, b->ln2_s, b->ln2_b, rows, E);
    const mha__gemm_epilogue gelu = {.kind = MHA_EPI_GELU, .bias = b->b1, .x = a->f, .ldx = 4 * E};
    if ((st = mha__linear_w(rows, 4 * E, E, a->h2, E, &b->ff1, NULL, a->g, 4 * E, &gelu)) != MHA_OK) return st;
    return residual_linear(m, p, y, a->x1, rows, 4 * E, a->g, 4 * E, &b->ff2, b->b2, a->kb2);
}

/* x (rows, E) = tok_emb[ids] + pos_emb[t0 + r % n], then drop_emb (its
 * keep bits drawn into keep). */
static void embed(const mha_gpt *m, const pass *p, float *x, const int32_t *ids, int64_t rows, int64_t n,
                  uint64_t *keep) {
    const int64_t E = m->E;
    if (m->wdtype != MHA_DTYPE_F32) { /* 16-bit: each row widened (exactly), then the same sum */
        const mha__kernels *k = mha__kernels_active();
        const mha__widen_bf16_fn widen = m->wdtype == MHA_DTYPE_BF16 ? k->widen_bf16 : k->widen_f16;
        for (int64_t r = 0; r < rows; r++) {
            float *xr = x + r * E, *pr = x + rows * E; /* the scratch row after x (plan_scratch) */
            widen(xr, m->tok16 + (int64_t)ids[r] * E, (size_t)E);
            widen(pr, m->pos16 + (p->t0 + r % n) * E, (size_t)E);
            for (int64_t e = 0; e < E; e++) xr[e] += pr[e];
        }
    } else {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t e = 0; e < E; e++)
                x[r * E + e] = m->tok_emb[(int64_t)ids[r] * E + e] + m->pos_emb[(p->t0 + r % n) * E + e];
    }
    if (p->drop) {
        draw_keep(p, keep, rows * E);
        mha__dropout_apply_n(x, x, keep, (size_t)(rows * E), mha__dropout_scale(m->cfg.drop_rate));
    }
}

/* The head on `rows` rows of x (after final_norm into h): logits (rows, V). */
static mha_status head_forward(mha_gpt *m, float *logits, float *h, const float *x, int64_t rows) {
    mha__layernorm_rows(h, x, m->lnf_s, m->lnf_b, rows, m->E);
    return mha__linear_w(rows, m->V, m->E, h, m->E, &m->head_w, NULL, logits, m->V, NULL);
}

/* ---- the tape's layout ------------------------------------------------------ */

mha_status mha_gpt_tape_create(mha_gpt_tape **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "output pointer is NULL");
    *out = mha__calloc(sizeof **out);
    return *out ? MHA_OK : mha__nomem("out of memory creating a tape");
}

void mha_gpt_tape_free(mha_gpt_tape *t) {
    if (!t) return;
    mha__free(t->buf);
    mha__free(t->blk);
    mha__free(t);
}

size_t mha_gpt_tape_bytes(const mha_gpt_tape *t) { return t ? t->cap : 0; }

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

static bool layout(mha_gpt_tape *t, const mha_gpt *m, carver *c, int64_t B, int64_t T, bool model, bool drop) {
    const size_t R = (size_t)B * (size_t)T, E = (size_t)m->E, f = sizeof(float), u = sizeof(uint64_t);
    const size_t kw = (R * E + 63) / 64; /* a residual's keep words */
    mha__attention_desc d;
    uint64_t given; /* the mask bits are the tape's: no room for them in the workspace */
    mha__gpt_attention_desc(m, &d, B, T, drop, NULL);
    if (drop) d.keep_bits = &given;
    const size_t att = mha__attention_workspace(&d), att_b = mha__attention_backward_workspace(&d);
    const size_t words = drop ? mha__attention_keep_words(&d) : 0;
    if (att == 0 || att_b == 0 || (drop && words == 0)) return false;
    for (int64_t l = 0; l < m->L; l++) {
        mha__gpt_acts *b = c->base ? &t->blk[l] : &(mha__gpt_acts){0};
        b->x = carve(c, R * E, f);
        b->h1 = carve(c, R * E, f);
        b->qkv = carve(c, R * 3 * E, f);
        b->o = carve(c, R * E, f);
        b->x1 = carve(c, R * E, f);
        b->h2 = carve(c, R * E, f);
        b->f = carve(c, R * 4 * E, f);
        b->g = carve(c, R * 4 * E, f);
        b->stats = carve(c, R * (size_t)m->H * 2, f);
        b->abits = drop ? carve(c, words, u) : NULL;
        b->kb1 = drop ? carve(c, kw, u) : NULL;
        b->kb2 = drop ? carve(c, kw, u) : NULL;
    }
    mha_gpt_tape tmp;
    mha_gpt_tape *o = c->base ? t : &tmp;
    o->idx = model ? carve(c, R, sizeof(int32_t)) : NULL;
    o->kb_emb = model && drop ? carve(c, kw, u) : NULL;
    o->out = carve(c, R * E, f);
    o->hf = model ? carve(c, R * E, f) : NULL;
    o->logits = model ? carve(c, R, (size_t)m->V * f) : NULL;
    o->t0 = carve(c, R * E, f);
    o->t1 = carve(c, R * E, f);
    o->t2 = carve(c, R * E, f);
    o->t3 = carve(c, R * E, f);
    o->t4 = carve(c, R * 4 * E, f);
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
        mha__gpt_acts *blk = mha__calloc((size_t)m->L * sizeof *blk);
        if (!blk) return mha__nomem("out of memory growing the tape");
        mha__free(t->blk);
        t->blk = blk;
        t->n_blk = (size_t)m->L;
    }
    if (t->cap < c.off) {
        void *buf = mha__alloc(c.off);
        if (!buf) return mha__nomem("out of memory growing the tape to %zu MiB", c.off >> 20);
        mha__free(t->buf);
        t->buf = buf;
        t->cap = c.off;
    }
    c = (carver){t->buf, 0, true};
    layout(t, m, &c, B, T, model, drop);
    t->m = m;
    t->id = m->params.id;
    t->model = model;
    t->B = B;
    t->T = T;
    t->drop = drop;
    return MHA_OK;
}

/* ---- the one forward ------------------------------------------------------ */

/* Scratch of a forward without a tape, in m->ws: the shared activations
 * (x1 == x, h1 == h2, kb1 == kb2, the context over Q), the residual
 * product, the attention's workspace and extra_floats floats after them
 * (*extra). */
static mha_status plan_scratch(mha_gpt *m, pass *p, mha__gpt_acts *a, size_t extra_floats, float **extra) {
    const int64_t E = m->E, rows = p->B * (p->T - p->t0);
    mha__attention_desc d;
    mha__gpt_attention_desc(m, &d, p->B, p->T, p->drop, p->g);
    if (p->cache) cache_desc(m, p, 0, &d); /* as block_forward's */
    const size_t att = mha__attention_workspace(&d);
    if (att == 0) return mha__fail(MHA_ERR_OVERFLOW, "attention workspace overflows");
    /* keep bits (as floats), h, qkv, the product, ff */
    const size_t keep_words = p->drop ? ((size_t)rows * (size_t)E + 63) / 64 : 0;
    const size_t fl = 2 * keep_words + (size_t)rows * (size_t)(E + 3 * E + E + 4 * E) + extra_floats;
    const size_t bytes = mha__align64(fl * sizeof(float)) + att;
    if (m->ws_size < bytes) {
        void *w = mha__alloc(bytes);
        if (!w) return mha__nomem("out of memory allocating %zu bytes of activations", bytes);
        mha__free(m->ws);
        m->ws = w;
        m->ws_size = bytes;
    }
    float *at = m->ws; /* 64-byte aligned: the keep words first */
    memset(a, 0, sizeof *a);
    a->kb1 = a->kb2 = keep_words ? (uint64_t *)(void *)at : NULL;
    at += 2 * keep_words;
    a->h1 = a->h2 = at, at += rows * E;
    a->qkv = at, at += rows * 3 * E;
    p->ctx = at, at += rows * E;
    a->g = at, at += rows * 4 * E;
    *extra = at;
    p->att_ws = (char *)m->ws + mha__align64(fl * sizeof(float));
    p->att_ws_size = att;
    return MHA_OK;
}

/* The blocks over the residual stream: without a tape in place over x,
 * with one from t->blk[0].x (x unused) to t->out. */
static mha_status run_blocks(mha_gpt *m, const pass *p, mha_gpt_tape *t, mha__gpt_acts *a, float *x) {
    for (int64_t l = 0; l < m->L; l++) {
        mha_status st;
        if (t) {
            st = block_forward(m, l, &t->blk[l], l + 1 < m->L ? t->blk[l + 1].x : t->out, p);
        } else {
            a->x = a->x1 = x;
            st = block_forward(m, l, a, x, p);
        }
        if (st != MHA_OK) return st;
    }
    return MHA_OK;
}

/* After a 16-bit model's forward over several rows: the GEMM tiles' widened
 * weights (up to 9 MiB a thread, common.h) handed back, not kept resident. */
static void release_widened(const mha_gpt *m, int64_t rows) {
    if (m->wdtype != MHA_DTYPE_F32 && rows > 1) mha__release_free_pages();
}

/* A tape is for a backward, which needs F32 weights. */
static mha_status trainable(const mha_gpt *m) {
    if (m->wdtype == MHA_DTYPE_F32) return MHA_OK;
    return mha__fail(MHA_ERR_UNSUPPORTED, "a %s model is for inference: load it as f32 to record a tape and train",
                     mha_dtype_name(m->wdtype));
}

/* A GPTModel forward over idx (B, T), the logits of every row or (last_only)
 * of each sequence's last; with a tape, everything the backward needs is
 * kept in it (logits NULL allowed: then only the tape's). */
static mha_status model_forward(mha_gpt *m, float *logits, const int32_t *idx, int64_t B, int64_t T, bool last_only,
                                mha_generator *g, mha_gpt_tape *t, int64_t win0, int64_t wins) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (t) t->m = NULL;
    if (!m || (!logits && !t) || !idx) return mha__fail(MHA_ERR_ARGUMENT, "model, logits or idx is NULL");
    if (!is_model(&m->cfg)) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock takes x, not token ids");
    mha_status st = mha__gpt_check_tokens(m, B, T);
    if (st == MHA_OK) st = check_ids(m, idx, B * T);
    if (st == MHA_OK && t) st = trainable(m);
    if (st != MHA_OK) return st;
    const int64_t E = m->E, rows = B * T;
    pass p = {.B = B, .T = T, .g = g, .drop = g && m->cfg.drop_rate > 0.0, .drop_rate = m->cfg.drop_rate,
              .win0 = win0, .wins = wins};
    mha__gpt_acts a;
    float *x, *h;
    uint64_t *kb;
    if (t) {
        if ((st = tape_reserve(t, m, B, T, true, p.drop)) != MHA_OK) return st;
        memcpy(t->idx, idx, (size_t)rows * sizeof(int32_t));
        p.ctx = t->t0, p.att_ws = t->att_ws, p.att_ws_size = t->att_ws_size;
        x = t->blk[0].x, kb = t->kb_emb, h = t->hf;
    } else {
        if ((st = plan_scratch(m, &p, &a, (size_t)((rows + 1) * E), &x)) != MHA_OK) return st; /* + embed's row */
        kb = a.kb1, h = a.h1;
    }
    embed(m, &p, x, idx, rows, T, kb);
    if ((st = run_blocks(m, &p, t, &a, x)) != MHA_OK) goto fail;
    if (t) {
        if ((st = head_forward(m, t->logits, h, t->out, rows)) != MHA_OK) goto fail;
        if (logits) memcpy(logits, t->logits, (size_t)rows * (size_t)m->V * sizeof(float));
        return MHA_OK;
    }
    if (last_only) {
        for (int64_t b = 0; b < B; b++) memmove(x + b * E, x + (b * T + T - 1) * E, (size_t)E * sizeof(float));
    }
    st = head_forward(m, logits, h, x, last_only ? B : rows);
    release_widened(m, rows);
    return st;
fail:
    if (t) t->m = NULL;
    return st;
}

/* The blocks alone over x (B, T, E) into y; with a tape, kept as above. */
static mha_status blocks_forward(mha_gpt *m, float *y, const float *x, int64_t B, int64_t T, mha_generator *g,
                                 mha_gpt_tape *t) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (t) t->m = NULL;
    if (!m || !y || !x) return mha__fail(MHA_ERR_ARGUMENT, "model, y or x is NULL");
    mha_status st = mha__gpt_check_tokens(m, B, T);
    const int64_t n = B * T * m->E;
    if (st == MHA_OK) st = mha__gpt_check_finite(x, n, "input x");
    if (st == MHA_OK && t) st = trainable(m);
    if (st != MHA_OK) return st;
    pass p = {.B = B, .T = T, .g = g, .drop = g && m->cfg.drop_rate > 0.0, .drop_rate = m->cfg.drop_rate};
    mha__gpt_acts a;
    float *unused;
    if (t) {
        if ((st = tape_reserve(t, m, B, T, false, p.drop)) != MHA_OK) return st;
        p.ctx = t->t0, p.att_ws = t->att_ws, p.att_ws_size = t->att_ws_size;
        memcpy(t->blk[0].x, x, (size_t)n * sizeof(float));
    } else {
        if ((st = plan_scratch(m, &p, &a, 0, &unused)) != MHA_OK) return st;
        if (y != x) memcpy(y, x, (size_t)n * sizeof(float));
    }
    if ((st = run_blocks(m, &p, t, &a, y)) != MHA_OK) {
        if (t) t->m = NULL;
        return st;
    }
    if (t) memcpy(y, t->out, (size_t)n * sizeof(float));
    release_widened(m, B * T);
    return MHA_OK;
}

mha_status mha_gpt_forward(mha_gpt *m, float *logits, const int32_t *idx, int64_t B, int64_t T, int last_only,
                           mha_generator *dropout_rng) {
    return model_forward(m, logits, idx, B, T, last_only != 0, dropout_rng, NULL, 0, 0);
}

mha_status mha_gpt_forward_tape(mha_gpt *m, float *logits, const int32_t *idx, int64_t B, int64_t T,
                                mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!tape) return mha__fail(MHA_ERR_ARGUMENT, "tape is NULL");
    return model_forward(m, logits, idx, B, T, false, dropout_rng, tape, 0, 0);
}

mha_status mha_gpt_dropout_draws(const mha_gpt *m, int64_t B, int64_t T, uint64_t *out) {
    if (!m || !out) return mha__fail(MHA_ERR_ARGUMENT, "model or out is NULL");
    *out = 0;
    if (B < 0 || T < 0) return mha__fail(MHA_ERR_SHAPE, "B (%lld) and T (%lld) must not be negative", (long long)B, (long long)T);
    if (m->cfg.drop_rate <= 0.0) return MHA_OK;
    /* per window: drop_emb (T E); per block the attention weights (H T T)
     * and two drop_shortcut (T E each); two outputs per element */
    const long double per = (long double)T * (long double)m->E * (long double)((is_model(&m->cfg) ? 1 : 0) + 2 * m->L) +
                            (long double)m->L * (long double)m->H * (long double)T * (long double)T;
    const long double n = 2.0L * per * (long double)B;
    if (n >= 18446744073709551616.0L) return mha__fail(MHA_ERR_OVERFLOW, "%lld windows' draws overflow 64 bits", (long long)B);
    *out = (uint64_t)n;
    return MHA_OK;
}

mha_status mha__gpt_forward_share(mha_gpt *m, float *logits, const int32_t *idx, int64_t n, int64_t T,
                                  int64_t first, int64_t batch, mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!tape) return mha__fail(MHA_ERR_ARGUMENT, "tape is NULL");
    return model_forward(m, logits, idx, n, T, false, dropout_rng, tape, first == 0 && batch == n ? 0 : first,
                         first == 0 && batch == n ? 0 : batch);
}

mha_status mha_gpt_blocks_forward(mha_gpt *m, float *y, const float *x, int64_t B, int64_t T,
                                  mha_generator *dropout_rng) {
    return blocks_forward(m, y, x, B, T, dropout_rng, NULL);
}

mha_status mha_gpt_blocks_forward_tape(mha_gpt *m, float *y, const float *x, int64_t B, int64_t T,
                                       mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!tape) return mha__fail(MHA_ERR_ARGUMENT, "tape is NULL");
    return blocks_forward(m, y, x, B, T, dropout_rng, tape);
}

/* ---- KV cache ------------------------------------------------------------ */

/* The cache's pages for positions up to `end` (and MHA_KV_AHEAD past it)
 * mapped ahead of their writes, one call per (layer, head) region: a
 * first write to a page costs a page fault, 16-18 us each on the project's
 * VMs, and a decode step writes 144 rows 512 bytes long into 18 new pages
 * on average, a 1000-token prefill into 18,000. The fresh cache of
 * GPT-2 124M on a 2-core Zen 5, 900 positions in all 144 regions: 209-243
 * ms of first writes, 114-140 populated first (the hypervisor's own
 * mapping still costs 6-7 us a page on the first write). */
#define MHA_KV_AHEAD 64
static void map_cache(mha_gpt *m, int64_t end) {
    if (end <= m->kv_mapped) return;
    const int64_t to = end + MHA_KV_AHEAD < m->C ? end + MHA_KV_AHEAD : m->C, row = 2 * m->HD;
    for (int64_t r = 0; r < m->L * m->H; r++)
        mha__populate(m->kv + (r * m->C + m->kv_mapped) * row, (size_t)((to - m->kv_mapped) * row) * sizeof(float));
    m->kv_mapped = to;
}

/* A feed's forward after its checks and allocations: the embedding, the
 * blocks, the last position's logits. */
typedef struct {
    mha_gpt *m;
    const pass *p;
    mha__gpt_acts *a;
    float *x, *logits;
    const int32_t *ids;
    int64_t n;
    mha_status st;
} feed_job;

static void feed_forward(void *arg) {
    feed_job *f = arg;
    mha_gpt *m = f->m;
    embed(m, f->p, f->x, f->ids, f->n, f->n, NULL);
    f->st = run_blocks(m, f->p, NULL, f->a, f->x);
    if (f->st == MHA_OK) f->st = head_forward(m, f->logits, f->a->h1, f->x + (f->n - 1) * m->E, 1);
}

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
        m->kv = mha__alloc_gradual(kvb); /* filled a token at a time */
        m->kq = mha__alloc((size_t)(m->C * E) * sizeof(float));
        if (!m->kv || !m->kq) {
            mha__free(m->kv);
            mha__free(m->kq);
            m->kv = m->kq = NULL;
            return mha__nomem("out of memory allocating the KV cache (%zu MiB)", kvb >> 20);
        }
    }
    const int64_t t0 = m->kv_len;
    map_cache(m, t0 + n);
    pass p = {.B = 1, .T = t0 + n, .t0 = t0, .cache = true};
    mha__gpt_acts a;
    float *x;
    if ((st = plan_scratch(m, &p, &a, (size_t)((n + 1) * E), &x)) != MHA_OK) return st; /* + embed's row */
    feed_job f = {m, &p, &a, x, logits, ids, n, MHA_OK};
    /* A decode step (one row: its products are GEMVs, its attention a
     * task per head, both team-aware; nothing else in it is parallel, and
     * a nested region would run on one thread) runs in one team, not in 61
     * regions (a GEMV's and an attention's): GPT-2 124M on a 2-core Zen 5,
     * 64 tokens after a 4-token prompt, 20 rounds alternated in one
     * process, three times: bf16 5.49, 5.45, 5.93 -> 5.29, 5.27, 5.84 best
     * ms/token, F32 9.38, 9.80, 9.39 -> 9.23, 9.66, 9.16. */
    if (n == 1) mha__team_serve(feed_forward, &f);
    else feed_forward(&f);
    st = f.st;
    release_widened(m, n);
    if (st != MHA_OK) return st;
    m->kv_len = t0 + n; /* only now: a failed feed leaves the cache as it was */
    return MHA_OK;
}
