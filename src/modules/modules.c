/* modules.c — the book's five attention modules: configuration, parameters
 * (named as PyTorch's state_dict, initialised in PyTorch's construction
 * order) and the forward pass over the shared attention layer. */
#include "modules.h"

#include "attention/attention.h"
#include "common/common.h"
#include "kernels/drivers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* ---- configuration ---------------------------------------------------- */

static const char *const kind_names[] = {
    [MHA_SELF_ATTENTION_V1] = "SelfAttention_v1",
    [MHA_SELF_ATTENTION_V2] = "SelfAttention_v2",
    [MHA_CAUSAL_ATTENTION] = "CausalAttention",
    [MHA_MULTI_HEAD_ATTENTION_WRAPPER] = "MultiHeadAttentionWrapper",
    [MHA_MULTI_HEAD_ATTENTION] = "MultiHeadAttention",
};

static bool kind_valid(mha_kind k) {
    return k >= MHA_SELF_ATTENTION_V1 && k <= MHA_MULTI_HEAD_ATTENTION;
}

const char *mha_kind_name(mha_kind kind) { return kind_valid(kind) ? kind_names[kind] : NULL; }

mha_status mha_kind_from_name(const char *name, mha_kind *out) {
    if (!name || !out) return mha__fail(MHA_ERR_ARGUMENT, "module name is NULL");
    for (int k = MHA_SELF_ATTENTION_V1; k <= MHA_MULTI_HEAD_ATTENTION; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (mha_kind)k;
            return MHA_OK;
        }
    return mha__fail(MHA_ERR_UNKNOWN_MODULE,
                     "unknown module '%.80s' (expected SelfAttention_v1, SelfAttention_v2, "
                     "CausalAttention, MultiHeadAttentionWrapper or MultiHeadAttention)",
                     name);
}

void mha_config_init(mha_config *c, mha_kind kind) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->num_heads = 1;
}

int mha_config_is_batched(const mha_config *c) {
    return c && c->kind >= MHA_CAUSAL_ATTENTION && kind_valid(c->kind);
}

static bool has_heads(mha_kind k) {
    return k == MHA_MULTI_HEAD_ATTENTION_WRAPPER || k == MHA_MULTI_HEAD_ATTENTION;
}

int64_t mha_config_output_width(const mha_config *c) {
    if (!c) return 0;
    return c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER ? c->num_heads * c->d_out : c->d_out;
}

/* Sizes are capped well below anything that could overflow later products
 * of two of them with a token count. */
#define MHA_MAX_DIM ((int64_t)1 << 24)

/* Number of parameter floats, or 0 on overflow. */
static size_t param_floats(const mha_config *c) {
    const int64_t W = mha_config_output_width(c);
    int64_t n, t;
    if (!mha__mul_i64(3 * W, c->d_in, &n)) return 0;
    if (c->qkv_bias && c->kind != MHA_SELF_ATTENTION_V1 && __builtin_add_overflow(n, 3 * W, &n))
        return 0;
    if (c->kind == MHA_MULTI_HEAD_ATTENTION &&
        (!mha__mul_i64(c->d_out, c->d_out + 1, &t) || __builtin_add_overflow(n, t, &n)))
        return 0;
    size_t bytes;
    if (n <= 0 || !mha__mul_size((size_t)n, sizeof(float), &bytes)) return 0;
    return (size_t)n;
}

/* ERR_CONFIG when a size is below 1, ERR_OVERFLOW above MHA_MAX_DIM. */
static mha_status check_dim(const char *name, int64_t v) {
    if (v < 1) return mha__fail(MHA_ERR_CONFIG, "%s must be positive, got %lld", name, (long long)v);
    if (v > MHA_MAX_DIM)
        return mha__fail(MHA_ERR_OVERFLOW, "%s (%lld) must be at most %lld", name, (long long)v,
                         (long long)MHA_MAX_DIM);
    return MHA_OK;
}

mha_status mha_config_validate(const mha_config *c) {
    if (!c) return mha__fail(MHA_ERR_ARGUMENT, "configuration is NULL");
    if (!kind_valid(c->kind))
        return mha__fail(MHA_ERR_UNKNOWN_MODULE, "unknown module kind %d", (int)c->kind);
    mha_status st = check_dim("d_in", c->d_in);
    if (st == MHA_OK) st = check_dim("d_out", c->d_out);
    if (st == MHA_OK && c->kind >= MHA_CAUSAL_ATTENTION) st = check_dim("context_length", c->context_length);
    if (st == MHA_OK && has_heads(c->kind)) st = check_dim("num_heads", c->num_heads);
    if (st != MHA_OK) return st;
    if (c->kind != MHA_SELF_ATTENTION_V1 && c->qkv_bias != 0 && c->qkv_bias != 1)
        return mha__fail(MHA_ERR_CONFIG, "qkv_bias must be 0 or 1, got %d", c->qkv_bias);
    if (c->kind >= MHA_CAUSAL_ATTENTION && !(c->dropout >= 0.0 && c->dropout < 1.0))
        return mha__fail(MHA_ERR_CONFIG, "dropout must be in [0, 1), got %g", c->dropout);
    if (has_heads(c->kind)) {
        if (c->kind == MHA_MULTI_HEAD_ATTENTION && c->d_out % c->num_heads != 0)
            return mha__fail(MHA_ERR_CONFIG, "d_out (%lld) must be divisible by num_heads (%lld)",
                             (long long)c->d_out, (long long)c->num_heads);
        if (c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER && c->num_heads * c->d_out > MHA_MAX_DIM)
            return mha__fail(MHA_ERR_OVERFLOW, "num_heads * d_out (%lld) must be at most %lld",
                             (long long)(c->num_heads * c->d_out), (long long)MHA_MAX_DIM);
    }
    if (param_floats(c) == 0)
        return mha__fail(MHA_ERR_OVERFLOW, "parameter count overflows for d_in=%lld d_out=%lld",
                         (long long)c->d_in, (long long)c->d_out);
    return MHA_OK;
}

/* ---- parameters --------------------------------------------------------- */

/* A normalised copy of the configuration: fields the class does not take
 * get their defaults, so two configs of the same module compare equal. */
static mha_config normalise(const mha_config *c) {
    mha_config n = *c;
    if (c->kind < MHA_CAUSAL_ATTENTION) {
        n.context_length = 0;
        n.dropout = 0.0;
    }
    if (!has_heads(c->kind)) n.num_heads = 1;
    if (c->kind == MHA_SELF_ATTENTION_V1) n.qkv_bias = 0;
    return n;
}

/* Registers the parameters in state_dict order, views into the arena
 * (layout described in modules.h). */
static void build_params(mha_module *m) {
    const mha_config *c = &m->cfg;
    const int64_t Din = c->d_in, Dout = c->d_out;
    mha_params *ps = &m->params;
    static const char *const role[3] = {"W_query", "W_key", "W_value"};
    char prefix[40] = "", name[40];

    if (c->kind == MHA_SELF_ATTENTION_V1) {
        for (int r = 0; r < 3; r++) mha__params_add(ps, "", role[r], m->w_qkv + r * Din * Dout, 2, Din, Dout);
        return;
    }
    /* v2, Causal, MHA: one set of q/k/v (H = 1 block); wrapper: per head.
     * For MHA the blocks are full width (W == D_out). */
    const int64_t blocks = c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER ? m->H : 1;
    for (int64_t h = 0; h < blocks; h++) {
        if (c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER)
            snprintf(prefix, sizeof prefix, "heads.%lld.", (long long)h);
        for (int r = 0; r < 3; r++) {
            const int64_t row = (h * 3 + r) * Dout;
            snprintf(name, sizeof name, "%s.weight", role[r]);
            mha__params_add(ps, prefix, name, m->w_qkv + row * Din, 2, Dout, Din);
            if (m->b_qkv) {
                snprintf(name, sizeof name, "%s.bias", role[r]);
                mha__params_add(ps, prefix, name, m->b_qkv + row, 1, Dout, 0);
            }
        }
    }
    if (c->kind == MHA_MULTI_HEAD_ATTENTION) {
        mha__params_add(ps, "", "out_proj.weight", m->w_out, 2, Dout, Dout);
        mha__params_add(ps, "", "out_proj.bias", m->b_out, 1, Dout, 0);
    }
}

mha_status mha_module_create(const mha_config *cfg, mha_module **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "output pointer is NULL");
    *out = NULL;
    mha_status st = mha_config_validate(cfg);
    if (st != MHA_OK) return st;

    mha_module *m = mha__calloc(sizeof *m);
    if (!m) return mha__nomem("out of memory creating module");
    m->cfg = normalise(cfg);
    const mha_config *c = &m->cfg;
    m->H = has_heads(c->kind) ? c->num_heads : 1;
    m->HD = c->kind == MHA_MULTI_HEAD_ATTENTION ? c->d_out / c->num_heads : c->d_out;
    m->W = m->H * m->HD;
    m->P = 3 * m->W;
    st = mha__params_init(&m->params, kind_names[c->kind], param_floats(c), (size_t)(m->H * 3 * 2 + 2));
    if (st != MHA_OK) {
        mha__free(m);
        return st;
    }
    float *at = m->params.arena;
    m->w_qkv = at;
    at += m->P * c->d_in;
    if (c->qkv_bias && c->kind != MHA_SELF_ATTENTION_V1) {
        m->b_qkv = at;
        at += m->P;
    }
    if (c->kind == MHA_MULTI_HEAD_ATTENTION) {
        m->w_out = at;
        at += c->d_out * c->d_out;
        m->b_out = at;
    }
    build_params(m);
    *out = m;
    return MHA_OK;
}

mha_status mha_module_init(mha_module *m, mha_generator *g) {
    if (!m || !g) return mha__fail(MHA_ERR_ARGUMENT, "module or generator is NULL");
    const mha_config *c = &m->cfg;
    if (c->kind == MHA_SELF_ATTENTION_V1) {
        /* nn.Parameter(torch.rand(d_in, d_out)) for query, key, value. */
        mha_generator_uniform(g, m->w_qkv, (size_t)m->P * (size_t)c->d_in, 0.0, 1.0);
        return MHA_OK;
    }
    /* Each nn.Linear draws its weight then its bias, in __init__ order; the
     * params are registered in exactly that order. */
    const mha_params *ps = &m->params;
    for (size_t i = 0; i < ps->n; i++) {
        const mha_param *p = &ps->p[i];
        if (p->ndim != 2) continue;
        const mha_param *bias = (i + 1 < ps->n && ps->p[i + 1].ndim == 1) ? &ps->p[i + 1] : NULL;
        mha_status st = mha_generator_linear_init(g, p->data, bias ? bias->data : NULL,
                                                  p->shape[1], p->shape[0]);
        if (st != MHA_OK) return st;
    }
    return MHA_OK;
}

mha_status mha_module_create_seeded(const mha_config *cfg, uint64_t seed, mha_module **out) {
    mha_status st = mha_module_create(cfg, out);
    if (st != MHA_OK) return st;
    mha_generator *g = NULL;
    st = mha_generator_create(seed, &g);
    if (st == MHA_OK) st = mha_module_init(*out, g);
    mha_generator_free(g);
    if (st != MHA_OK) {
        mha_module_free(*out);
        *out = NULL;
    }
    return st;
}

void mha_module_free(mha_module *m) {
    if (!m) return;
    mha__params_free(&m->params);
    mha__free(m->ws);
    mha__free(m);
}

const mha_config *mha_module_config_of(const mha_module *m) { return m ? &m->cfg : NULL; }

mha_params *mha_module_params(mha_module *m) { return m ? &m->params : NULL; }

mha_status mha_module_check_finite(const mha_module *m) {
    if (!m) return mha__fail(MHA_ERR_ARGUMENT, "module is NULL");
    return mha__params_check_finite(&m->params);
}

/* ---- forward ------------------------------------------------------------ */

void mha__module_qkv_layout(const mha_module *m, int64_t *q_base, int64_t *k_base,
                            int64_t *v_base, int64_t *head_stride) {
    if (m->cfg.kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER) {
        /* per head [q | k | v], each D_out wide */
        *q_base = 0;
        *k_base = m->HD;
        *v_base = 2 * m->HD;
        *head_stride = 3 * m->HD;
    } else {
        /* [q (all heads) | k | v], head h at h * HD inside each */
        *q_base = 0;
        *k_base = m->W;
        *v_base = 2 * m->W;
        *head_stride = m->HD;
    }
}

/* Floats per block of the non-finite scan. */
#define MHA_SCAN_BLOCK 65536

/* Whether some float of x[0, n) has all exponent bits set (infinity or
 * NaN), without a branch: in groups of 16, a loop the compiler vectorises
 * at -O2 (a plain loop over n it leaves scalar). */
static bool any_nonfinite(const float *x, int64_t n) {
    const uint32_t *u = (const uint32_t *)(const void *)x;
    uint32_t any = 0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int i = 0; i < 16; i++) any |= (u[j + i] & 0x7f800000u) == 0x7f800000u;
    for (; j < n; j++) any |= (u[j] & 0x7f800000u) == 0x7f800000u;
    return any != 0;
}

int64_t mha__module_first_nonfinite(const float *x, int64_t n) {
    const int64_t nblk = (n + MHA_SCAN_BLOCK - 1) / MHA_SCAN_BLOCK;
    int64_t first = n;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(mha__max_threads()) reduction(min : first) \
    if (nblk > 1)
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t j0 = b * MHA_SCAN_BLOCK, nb = n - j0 < MHA_SCAN_BLOCK ? n - j0 : MHA_SCAN_BLOCK;
        if (!any_nonfinite(x + j0, nb)) continue;
        for (int64_t j = j0; j < j0 + nb; j++)
            if (!isfinite(x[j])) {
                if (j < first) first = j;
                break;
            }
    }
    return first;
}

mha_status mha__module_check_input(const mha_module *m, const float *x, int64_t B, int64_t T) {
    const mha_config *c = &m->cfg;
    if (B < 1 || T < 1)
        return mha__fail(MHA_ERR_SHAPE, "batch (%lld) and tokens (%lld) must be positive",
                         (long long)B, (long long)T);
    if (!mha_config_is_batched(c) && B != 1)
        return mha__fail(MHA_ERR_SHAPE, "%s takes one sequence (T, d_in); got a batch of %lld",
                         kind_names[c->kind], (long long)B);
    if (mha_config_is_batched(c) && T > c->context_length)
        return mha__fail(MHA_ERR_CONTEXT_LENGTH, "%lld tokens exceed context_length %lld",
                         (long long)T, (long long)c->context_length);
    int64_t rows, n, p;
    if (!mha__mul_i64(B, T, &rows) || !mha__mul_i64(rows, c->d_in, &n) ||
        !mha__mul_i64(rows, 4 * m->P, &p) || rows > ((int64_t)1 << 40))
        return mha__fail(MHA_ERR_OVERFLOW, "batch (%lld) x tokens (%lld) is too large", (long long)B,
                         (long long)T);
    const int64_t i = mha__module_first_nonfinite(x, n);
    if (i < n)
        return mha__fail(MHA_ERR_NONFINITE, "input x holds %s at (%lld, %lld, %lld)",
                         isnan(x[i]) ? "NaN" : "infinity", (long long)(i / (T * c->d_in)),
                         (long long)(i / c->d_in % T), (long long)(i % c->d_in));
    return MHA_OK;
}

mha_status mha__module_project(const mha_module *m, float *qkv, const float *x, int64_t B,
                               int64_t T) {
    const mha_config *c = &m->cfg;
    const int64_t rows = B * T, Din = c->d_in, Dout = c->d_out;
    if (c->kind == MHA_SELF_ATTENTION_V1) {
        /* x @ W_query etc.: W is (D_in, D_out) */
        for (int r = 0; r < 3; r++) {
            mha_status st = mha__sgemm(false, false, rows, Dout, Din, 1.0f, x, Din,
                                       m->w_qkv + r * Din * Dout, Dout, 0.0f, qkv + r * Dout, m->P);
            if (st != MHA_OK) return st;
        }
        return MHA_OK;
    }
    /* One GEMM over the stacked weights: (rows, D_in) x (P, D_in)^T + b. */
    return mha__sgemm_bias(false, true, rows, m->P, Din, x, Din, m->w_qkv, Din, m->b_qkv, qkv, m->P);
}

/* Workspace layout: [qkv (B*T, P)] [attention]. MultiHeadAttention's
 * context (before out_proj) overwrites Q inside qkv: each head's rows of Q
 * are read before the same rows of its context are written (kernels.h). */
typedef struct {
    size_t qkv, attn, total;
} ws_layout;

void mha__module_attention_desc(const mha_module *m, mha__attention_desc *d, int64_t B,
                                int64_t T, const mha_forward_opts *o) {
    const mha_config *c = &m->cfg;
    mha__attention_desc_init(d, B, T, m->H, m->HD);
    d->ld_qkv = m->P;
    mha__module_qkv_layout(m, &d->q_base, &d->k_base, &d->v_base, &d->head_stride);
    d->ldo = m->W;
    d->causal = c->kind >= MHA_CAUSAL_ATTENTION;
    if (o && o->training && c->kind >= MHA_CAUSAL_ATTENTION && c->dropout > 0.0) {
        d->p = c->dropout;
        if (o->rng == MHA_DROPOUT_RNG_PHILOX) {
            d->dropout = MHA_DROPOUT_PHILOX;
            d->philox_seed = o->philox_seed;
            d->philox_offset = o->philox_offset;
        } else {
            d->dropout = MHA_DROPOUT_TORCH;
            d->gen = o->generator;
            d->heads_outer = c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER;
        }
    }
    if (o) d->lse = o->lse;
}

static bool plan_workspace(const mha_module *m, int64_t B, int64_t T, const mha_forward_opts *o,
                           ws_layout *L) {
    mha__attention_desc d;
    mha__module_attention_desc(m, &d, B, T, o);
    size_t rows = (size_t)B * (size_t)T, qkv, attn = mha__attention_workspace(&d);
    if (attn == 0 || !mha__mul_size(rows, (size_t)m->P * sizeof(float), &qkv)) return false;
    L->qkv = 0;
    L->attn = mha__align64(qkv);
    return mha__add_size(L->attn, attn, &L->total);
}

size_t mha_module_workspace_size(const mha_module *m, int64_t B, int64_t T, int training) {
    if (!m || B < 1 || T < 1) return 0;
    ws_layout L;
    const mha_forward_opts o = {.training = training, .rng = MHA_DROPOUT_RNG_TORCH};
    if (!plan_workspace(m, B, T, &o, &L)) return 0;
    return L.total;
}

mha_status mha_module_forward(mha_module *m, float *y, const float *x, int64_t B, int64_t T,
                              mha_generator *dropout_rng, void *workspace, size_t workspace_size) {
    const mha_forward_opts o = {.training = dropout_rng != NULL, .rng = MHA_DROPOUT_RNG_TORCH,
                                .generator = dropout_rng};
    return mha_module_forward_ex(m, y, x, B, T, &o, workspace, workspace_size);
}

mha_status mha__module_check_forward(const mha_module *m, const float *y, const float *x,
                                    int64_t B, int64_t T, const mha_forward_opts *opts) {
    if (!m || !y || !x) return mha__fail(MHA_ERR_ARGUMENT, "module, y or x is NULL");
    mha_status st = mha__module_check_input(m, x, B, T);
    if (st != MHA_OK) return st;
    if (opts && opts->training && opts->rng == MHA_DROPOUT_RNG_TORCH && !opts->generator &&
        m->cfg.kind >= MHA_CAUSAL_ATTENTION && m->cfg.dropout > 0.0)
        return mha__fail(MHA_ERR_ARGUMENT, "training with PyTorch's dropout mask needs a generator");
    if (opts && opts->rng != MHA_DROPOUT_RNG_TORCH && opts->rng != MHA_DROPOUT_RNG_PHILOX)
        return mha__fail(MHA_ERR_ARGUMENT, "unknown dropout generator %d", (int)opts->rng);
    return MHA_OK;
}

mha_status mha__module_workspace(mha_module *m, size_t need, void **workspace,
                                 size_t *workspace_size, const char *what) {
    if (*workspace) {
        if (*workspace_size < need)
            return mha__fail(MHA_ERR_WORKSPACE, "%s needs %zu bytes of workspace, got %zu", what,
                             need, *workspace_size);
        return MHA_OK;
    }
    mha_status st = mha__grow(&m->ws, &m->ws_size, need, "the workspace");
    if (st != MHA_OK) return st;
    *workspace = m->ws;
    *workspace_size = m->ws_size;
    return MHA_OK;
}

mha_status mha__module_out_proj(const mha_module *m, float *y, const float *ctx, int64_t ld_ctx,
                                int64_t rows) {
    const int64_t Dout = m->cfg.d_out;
    return mha__sgemm_bias(false, true, rows, Dout, Dout, ctx, ld_ctx, m->w_out, Dout, m->b_out, y, Dout);
}

mha_status mha_module_forward_ex(mha_module *m, float *y, const float *x, int64_t B, int64_t T,
                                 const mha_forward_opts *opts, void *workspace,
                                 size_t workspace_size) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    mha_status st = mha__module_check_forward(m, y, x, B, T, opts);
    if (st != MHA_OK) return st;
    ws_layout L;
    if (!plan_workspace(m, B, T, opts, &L))
        return mha__fail(MHA_ERR_OVERFLOW, "workspace size for batch %lld x %lld tokens overflows",
                         (long long)B, (long long)T);
    st = mha__module_workspace(m, L.total, &workspace, &workspace_size, "forward");
    if (st != MHA_OK) return st;
    char *ws = workspace;
    float *qkv = (float *)(void *)(ws + L.qkv);
    const bool mha = m->cfg.kind == MHA_MULTI_HEAD_ATTENTION;

    st = mha__module_project(m, qkv, x, B, T);
    if (st != MHA_OK) return st;

    mha__attention_desc d;
    mha__module_attention_desc(m, &d, B, T, opts);
    d.qkv = qkv;
    if (mha) { /* context over Q: head h at column h * HD, row stride P */
        d.o = qkv;
        d.ldo = m->P;
    } else { /* straight into y: head h at column h * HD, row stride W */
        d.o = y;
    }
    st = mha__attention_forward(&d, ws + L.attn, workspace_size - L.attn);
    if (st != MHA_OK) return st;

    return mha ? mha__module_out_proj(m, y, qkv, m->P, B * T) : MHA_OK;
}
