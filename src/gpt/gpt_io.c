/* gpt_io.c — GPTModel and TransformerBlock weights in safetensors: the
 * book's state_dict names (with the configuration in __metadata__) and
 * Hugging Face's GPT-2 names (configuration from the shapes). */
#include "gpt.h"

#include "common/common.h"
#include "generator/generator.h"
#include "kernels/half.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- save --------------------------------------------------------------- */

/* The parameters as one view: the file's tensors are the parameters'. */
static const char *const no_prefix[1] = {""};

mha_status mha_gpt_save(const mha_gpt *m, const char *path) {
    if (!m || !path) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_save: NULL argument");
    const mha_gpt_config *c = &m->cfg;
    char v[7][32];
    snprintf(v[0], 32, "%lld", (long long)c->vocab_size);
    snprintf(v[1], 32, "%lld", (long long)c->context_length);
    snprintf(v[2], 32, "%lld", (long long)c->emb_dim);
    snprintf(v[3], 32, "%lld", (long long)c->n_heads);
    snprintf(v[4], 32, "%lld", (long long)c->n_layers);
    mha__format_double(v[5], 32, c->drop_rate);
    snprintf(v[6], 32, "%s", c->qkv_bias ? "true" : "false");
    /* a tied head: out_head.weight is written too (the book's state_dict
     * keys, for torch), and "tie_head" makes mha_gpt_load tie it again */
    const char *meta[] = {"module", mha_gpt_kind_name(c->kind), "vocab_size", v[0], "context_length", v[1],
                          "emb_dim", v[2], "n_heads", v[3], "n_layers", v[4], "drop_rate", v[5],
                          "qkv_bias", v[6], "tie_head", "true"};
    const size_t n_meta = sizeof meta / sizeof meta[0] / 2 - (m->tied ? 0 : 1);
    if (m->wdtype != MHA_DTYPE_F32) { /* a 16-bit model: its matrices as they are held */
        mha_st_entry *e = mha__calloc_n(m->n_tensors, sizeof *e);
        int64_t(*shape)[2] = mha__calloc_n(m->n_tensors, sizeof *shape);
        mha_status s = e && shape ? MHA_OK : mha__nomem("out of memory saving %zu tensors", m->n_tensors);
        for (size_t i = 0; s == MHA_OK && i < m->n_tensors; i++) {
            const mha__gpt_tensor *t = &m->tensors[i];
            shape[i][0] = t->s0, shape[i][1] = t->s1;
            e[i] = (mha_st_entry){t->name, t->f ? MHA_DTYPE_F32 : m->wdtype, t->ndim, shape[i],
                                  t->f ? (const void *)t->f : (const void *)t->h};
        }
        if (s == MHA_OK) s = mha_st_write_file(path, e, m->n_tensors, meta, n_meta);
        mha__free(e);
        mha__free(shape);
        return s;
    }
    float *const base[1] = {m->params.arena};
    const mha__param_views views = {1, no_prefix, base, true};
    return mha__params_save(&m->params, &views, NULL, 0, meta, n_meta, path);
}

/* ---- load: shared ------------------------------------------------------- */

/* Where a tensor goes: F32 floats, or 16-bit elements of dtype (BF16 or
 * F16), rounded to nearest even from the file's value. */
typedef struct {
    float *f;
    uint16_t *h;
    mha_dtype dtype;
} dest;

static dest to_f32(float *f) { return (dest){f, NULL, MHA_DTYPE_F32}; }
static dest to_matrix(const mha__wmat *w) {
    return w->dtype == MHA_DTYPE_F32 ? to_f32((float *)w->p) : (dest){NULL, (uint16_t *)w->p, w->dtype};
}

/* The model's state_dict tensor i (mha__gpt_tensor), as a destination. */
static dest tensor_dest(const mha_gpt *m, size_t i) {
    const mha__gpt_tensor *t = &m->tensors[i];
    return t->f ? to_f32(t->f) : (dest){NULL, t->h, m->wdtype};
}

/* ERR_SHAPE unless t has shape (s0, s1) (s1 == 0: (s0)). */
static mha_status check_shape(const mha_st_tensor *t, int64_t s0, int64_t s1) {
    const int nd = s1 ? 2 : 1;
    if (t->ndim == nd && t->shape[0] == s0 && (nd == 1 || t->shape[1] == s1)) return MHA_OK;
    char got[64] = "";
    for (int d = 0; d < t->ndim && d < 4; d++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (nd == 2)
        return mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape (%s), expected (%lld, %lld)", t->name, got,
                         (long long)s0, (long long)s1);
    return mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape (%s), expected (%lld)", t->name, got, (long long)s0);
}

/* Elements [first, first + n) of t as F32 into buf, each finite. */
static mha_status read_part(const mha_st *st, const mha_st_tensor *t, size_t first, size_t n, float *buf) {
    mha_status s = mha_st_read_f32_part(st, t, first, buf, n);
    if (s != MHA_OK) {
        char d[200];
        snprintf(d, sizeof d, "%s", mha_last_error());
        return mha__fail(s, "tensor '%s': %s", t->name, d);
    }
    for (size_t i = 0; i < n; i++)
        if (!isfinite(buf[i]))
            return mha__fail(MHA_ERR_NONFINITE, "tensor '%s' holds %s at element %zu", t->name,
                             isnan(buf[i]) ? "NaN" : "infinity", first + i);
    return MHA_OK;
}

/* Reads t, of shape (s0, s1) (or (s0) when s1 == 0), into dst; or, with
 * transpose, a Conv1D weight of the file's shape (s1, s0) into dst's (s0,
 * s1). Checks the shape and finiteness; the detail names the tensor. F32
 * destinations read at once (tmp: s0 * s1 floats for a transpose); 16-bit
 * ones in pieces through tmp (at least PIECE floats), so that no F32 copy
 * of a large tensor is ever held. */
#define PIECE ((size_t)1 << 18)

static mha_status take(const mha_st *st, const mha_st_tensor *t, dest dst, int64_t s0, int64_t s1, bool transpose,
                       float *tmp) {
    mha_status s = check_shape(t, transpose ? s1 : s0, transpose ? s0 : s1);
    if (s != MHA_OK) return s;
    if (dst.f) {
        float *out = transpose ? tmp : dst.f;
        if ((s = read_part(st, t, 0, t->numel, out)) != MHA_OK) return s;
        if (transpose)
            for (int64_t i = 0; i < s0; i++)
                for (int64_t j = 0; j < s1; j++) dst.f[i * s1 + j] = tmp[j * s0 + i];
        return MHA_OK;
    }
    /* in pieces of whole file rows (row length: s0 transposed, else s1 or 1) */
    const size_t row = transpose ? (size_t)s0 : s1 ? (size_t)s1 : 1;
    const size_t rows_per = PIECE / row ? PIECE / row : 1;
    for (size_t r0 = 0; r0 * row < t->numel; r0 += rows_per) {
        const size_t n = (t->numel - r0 * row) < rows_per * row ? t->numel - r0 * row : rows_per * row;
        if ((s = read_part(st, t, r0 * row, n, tmp)) != MHA_OK) return s;
        for (size_t i = 0; i < n && s == MHA_OK; i++) {
            /* file element r0 * row + i: transposed, file (j, k) goes to dst (k, j) */
            const size_t fi = r0 * row + i;
            const size_t di = transpose ? (fi % row) * (size_t)s1 + fi / row : fi;
            s = mha__gpt_narrow(t->name, fi, tmp[i], dst.dtype, &dst.h[di]);
        }
        if (s != MHA_OK) return s;
    }
    return MHA_OK;
}

static mha_status need(const mha_st *st, const char *name, mha_st_tensor *t) {
    if (mha_st_find(st, name, t) == MHA_OK) return MHA_OK;
    return mha__fail(MHA_ERR_MISSING, "missing tensor '%s'", name);
}

/* ---- load: the book's names ---------------------------------------------- */

/* The book's cfg keys: integers > 0 (required: a TransformerBlock's
 * without vocab_size and n_layers), drop_rate and qkv_bias (optional: 0,
 * false), read by the metadata rule; a missing or bad one is ERR_CONFIG. */
static mha_status config_from_meta(const mha_st *st, mha_gpt_config *c) {
    static const char *const keys[5] = {"context_length", "emb_dim", "n_heads", "vocab_size", "n_layers"};
    int64_t *const dst[5] = {&c->context_length, &c->emb_dim, &c->n_heads, &c->vocab_size, &c->n_layers};
    mha_status s = MHA_OK;
    for (int k = 0; s == MHA_OK && k < (c->kind == MHA_GPT_MODEL ? 5 : 3); k++)
        s = mha_st_metadata_int(st, keys[k], 1, INT64_MAX, dst[k]);
    c->drop_rate = 0.0;
    c->qkv_bias = 0;
    if (s == MHA_OK && mha_st_metadata(st, "drop_rate"))
        s = mha_st_metadata_double(st, "drop_rate", &c->drop_rate);
    if (s == MHA_OK && mha_st_metadata(st, "qkv_bias")) s = mha_st_metadata_bool(st, "qkv_bias", &c->qkv_bias);
    return s == MHA_ERR_FORMAT || s == MHA_ERR_MISSING ? MHA_ERR_CONFIG : s;
}

/* A large model must first be plausible (mha__st_can_fill; for Hugging
 * Face files many tiny h.N.ln_1.weight tensors could ask for a huge one):
 * the file has to hold as many float values as its weight matrices. Small
 * models skip this, so their errors name the exact tensor. */
#define LOAD_SMALL_SCALARS ((uint64_t)1 << 20)

static mha_status precheck_size(const mha_st *st, const mha_gpt_config *c) {
    const uint64_t E = (uint64_t)c->emb_dim, L = c->kind == MHA_GPT_MODEL ? (uint64_t)c->n_layers : 1;
    uint64_t e2 = 0, total = 0, emb = 0;
    /* per block 12 E^2 (W_q, W_k, W_v, out_proj, the FeedForward's 4E x E
     * twice); a GPTModel adds tok_emb and pos_emb */
    bool ok = !__builtin_mul_overflow(E, E, &e2) && !__builtin_mul_overflow(e2, 12, &e2) &&
              !__builtin_mul_overflow(e2, L, &total);
    if (ok && c->kind == MHA_GPT_MODEL)
        ok = !__builtin_add_overflow((uint64_t)c->vocab_size, (uint64_t)c->context_length, &emb) &&
             !__builtin_mul_overflow(emb, E, &emb) && !__builtin_add_overflow(total, emb, &total);
    if (ok && total <= LOAD_SMALL_SCALARS) return MHA_OK;
    char what[96];
    snprintf(what, sizeof what, "%s(emb_dim=%lld, n_layers=%lld)", mha_gpt_kind_name(c->kind),
             (long long)c->emb_dim, (long long)L);
    return mha__st_can_fill(st, ok, total, 0, what);
}

/* Besides the parameters, a book file holds only the att.mask buffers. */
static mha_status att_mask(void *arg, const mha_st_tensor *t) {
    const mha_gpt *m = arg;
    const size_t n = strlen(t->name);
    if ((n >= 9 && strcmp(t->name + n - 9, ".att.mask") == 0) || strcmp(t->name, "att.mask") == 0)
        return MHA_OK;
    return mha__fail(MHA_ERR_MISSING, "unexpected tensor '%.100s' in a %s file", t->name, m->params.owner);
}

/* A 16-bit model's tensors from a book file: each by name, in pieces
 * (take); a tied head's out_head.weight must hold tok_emb.weight's values;
 * any other tensor but the masks ERR_MISSING, as mha__params_read. */
static mha_status read_book_16(mha_gpt *m, const mha_st *st) {
    float *tmp = mha__alloc_n(2 * PIECE, sizeof(float));
    if (!tmp) return mha__nomem("mha_gpt_load: out of memory");
    mha_status s = MHA_OK;
    mha_st_tensor t, tok;
    for (size_t i = 0; i < m->n_tensors && s == MHA_OK; i++) {
        const mha__gpt_tensor *g = &m->tensors[i];
        if ((s = need(st, g->name, &t)) != MHA_OK) break;
        if (!g->alias) {
            s = take(st, &t, tensor_dest(m, i), g->s0, g->s1, false, tmp);
            continue;
        }
        /* the tied head: the same shape and values as tok_emb.weight */
        if ((s = check_shape(&t, g->s0, g->s1)) != MHA_OK || (s = need(st, "tok_emb.weight", &tok)) != MHA_OK) break;
        for (size_t at = 0; at < t.numel && s == MHA_OK; at += PIECE) {
            const size_t n = t.numel - at < PIECE ? t.numel - at : PIECE;
            if ((s = read_part(st, &t, at, n, tmp)) == MHA_OK && (s = read_part(st, &tok, at, n, tmp + PIECE)) == MHA_OK &&
                memcmp(tmp, tmp + PIECE, n * sizeof(float)) != 0)
                s = mha__fail(MHA_ERR_FORMAT, "tie_head is true but out_head.weight is not tok_emb.weight");
        }
    }
    for (size_t i = 0; i < mha_st_count(st) && s == MHA_OK; i++) {
        mha_st_get(st, i, &t);
        bool known = false;
        for (size_t k = 0; k < m->n_tensors && !known; k++) known = !strcmp(t.name, m->tensors[k].name);
        if (!known) s = att_mask(m, &t);
    }
    mha__free(tmp);
    return s;
}

static mha_status from_book(const mha_st *st, mha_gpt_kind kind, mha_dtype dtype, mha_gpt **out) {
    mha_gpt_config c;
    mha_gpt_config_init(&c, kind);
    mha_status s = config_from_meta(st, &c);
    if (s != MHA_OK) return s;
    if ((s = mha_gpt_config_validate(&c)) != MHA_OK || (s = precheck_size(st, &c)) != MHA_OK) return s;
    int tied = 0;
    if (kind == MHA_GPT_MODEL && mha_st_metadata(st, "tie_head") &&
        (s = mha_st_metadata_bool(st, "tie_head", &tied)) != MHA_OK)
        return s;
    mha_gpt *m = NULL;
    if ((s = mha_gpt_create_as(&c, tied, dtype, &m)) != MHA_OK) return s;
    if (dtype != MHA_DTYPE_F32) {
        if ((s = read_book_16(m, st)) != MHA_OK) {
            mha_gpt_free(m);
            return s;
        }
        *out = m;
        return MHA_OK;
    }
    /* tied: the file's out_head.weight must be its tok_emb.weight. Both
     * names share one tensor, which the read below (in state_dict order,
     * the head last) leaves holding out_head.weight: compare it with
     * tok_emb.weight read aside. */
    float *head = NULL;
    mha_st_tensor th;
    const size_t ve = (size_t)(c.vocab_size * c.emb_dim);
    if (tied && mha_st_find(st, "tok_emb.weight", &th) == MHA_OK && th.numel == ve) {
        if (!(head = mha__alloc(ve * sizeof(float)))) s = mha__nomem("mha_gpt_load: out of memory");
        else s = mha_st_read_f32(st, &th, head, ve);
    }
    float *const base[1] = {m->params.arena};
    const mha__param_views views = {1, no_prefix, base, true};
    if (s == MHA_OK) s = mha__params_read(&m->params, &views, st, false, att_mask, m);
    if (s == MHA_OK && head && memcmp(head, m->tok_emb, ve * sizeof(float)) != 0)
        s = mha__fail(MHA_ERR_FORMAT, "tie_head is true but out_head.weight is not tok_emb.weight");
    mha__free(head);
    if (s != MHA_OK) {
        mha_gpt_free(m);
        return s;
    }
    *out = m;
    return MHA_OK;
}

/* ---- load: Hugging Face's names ------------------------------------------ */

static mha_status from_hf(const mha_st *st, const char *pre, mha_dtype dtype, mha_gpt **out) {
    char name[160];
    mha_st_tensor wte, wpe, t;
    mha_status s;
    snprintf(name, sizeof name, "%swte.weight", pre);
    if ((s = need(st, name, &wte)) != MHA_OK) return s;
    snprintf(name, sizeof name, "%swpe.weight", pre);
    if ((s = need(st, name, &wpe)) != MHA_OK) return s;
    if (wte.ndim != 2 || wpe.ndim != 2 || wte.shape[1] != wpe.shape[1])
        return mha__fail(MHA_ERR_SHAPE, "wte.weight and wpe.weight must be (vocab, E) and (context, E)");
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_GPT_MODEL);
    c.vocab_size = wte.shape[0];
    c.emb_dim = wte.shape[1];
    c.context_length = wpe.shape[0];
    c.qkv_bias = 1;
    c.drop_rate = 0.0;
    c.n_layers = 0;
    for (;;) {
        snprintf(name, sizeof name, "%sh.%lld.ln_1.weight", pre, (long long)c.n_layers);
        if (mha_st_find(st, name, &t) != MHA_OK) break;
        c.n_layers++;
    }
    if (c.n_layers == 0) return mha__fail(MHA_ERR_MISSING, "missing tensor '%sh.0.ln_1.weight'", pre);
    /* the head count is not in the shapes: metadata, else GPT-2's head size 64 */
    const char *key = mha_st_metadata(st, "n_heads") ? "n_heads"
                      : mha_st_metadata(st, "n_head") ? "n_head"
                                                       : NULL;
    if (key) {
        if ((s = mha_st_metadata_int(st, key, 1, INT64_MAX, &c.n_heads)) != MHA_OK) return MHA_ERR_CONFIG;
    } else if (c.emb_dim % 64 == 0) {
        c.n_heads = c.emb_dim / 64;
    } else {
        return mha__fail(MHA_ERR_CONFIG, "emb_dim %lld is not a multiple of GPT-2's head size 64: give n_heads in the metadata",
                         (long long)c.emb_dim);
    }
    if (mha_st_metadata(st, "drop_rate") && mha_st_metadata_double(st, "drop_rate", &c.drop_rate) != MHA_OK)
        return MHA_ERR_CONFIG;
    /* lm_head.weight: tied when absent or equal to wte */
    mha_st_tensor head;
    snprintf(name, sizeof name, "%slm_head.weight", pre);
    bool has_head = mha_st_find(st, name, &head) == MHA_OK;
    if (!has_head) {
        snprintf(name, sizeof name, "lm_head.weight");
        has_head = mha_st_find(st, name, &head) == MHA_OK;
    }
    /* (with the data on disk, a present head is loaded as its own tensor) */
    const bool tied = !has_head || (head.data && wte.data && head.dtype == wte.dtype &&
                                    head.nbytes == wte.nbytes && memcmp(head.data, wte.data, wte.nbytes) == 0);
    if ((s = mha_gpt_config_validate(&c)) != MHA_OK || (s = precheck_size(st, &c)) != MHA_OK) return s;
    mha_gpt *m = NULL;
    if ((s = mha_gpt_create_as(&c, tied, dtype, &m)) != MHA_OK) return s;
    const int64_t E = m->E;
    /* F32: a whole Conv1D weight to transpose; 16-bit: one piece */
    const size_t tmp_floats = dtype == MHA_DTYPE_F32 ? (size_t)(4 * E * E) : PIECE;
    float *tmp = mha__alloc_n(tmp_floats, sizeof(float));
    if (!tmp) {
        mha_gpt_free(m);
        return mha__nomem("out of memory");
    }
    s = take(st, &wte, tensor_dest(m, 0), m->V, E, false, tmp);
    if (s == MHA_OK) s = take(st, &wpe, tensor_dest(m, 1), m->C, E, false, tmp);
    if (s == MHA_OK && !tied) s = take(st, &head, to_matrix(&m->head_w), m->V, E, false, tmp);
    for (int64_t l = 0; l < m->L && s == MHA_OK; l++) {
        mha__gpt_block *b = &m->blocks[l];
        const struct {
            const char *suffix;
            dest dst;
            int64_t s0, s1;
            bool tr;
        } map[] = {
            {"ln_1.weight", to_f32(b->ln1_s), E, 0, false},
            {"ln_1.bias", to_f32(b->ln1_b), E, 0, false},
            {"attn.c_attn.weight", to_matrix(&b->qkv), 3 * E, E, true},
            {"attn.c_attn.bias", to_f32(b->b_qkv), 3 * E, 0, false},
            {"attn.c_proj.weight", to_matrix(&b->out), E, E, true},
            {"attn.c_proj.bias", to_f32(b->b_out), E, 0, false},
            {"ln_2.weight", to_f32(b->ln2_s), E, 0, false},
            {"ln_2.bias", to_f32(b->ln2_b), E, 0, false},
            {"mlp.c_fc.weight", to_matrix(&b->ff1), 4 * E, E, true},
            {"mlp.c_fc.bias", to_f32(b->b1), 4 * E, 0, false},
            {"mlp.c_proj.weight", to_matrix(&b->ff2), E, 4 * E, true},
            {"mlp.c_proj.bias", to_f32(b->b2), E, 0, false},
        };
        for (size_t k = 0; k < sizeof map / sizeof map[0] && s == MHA_OK; k++) {
            snprintf(name, sizeof name, "%sh.%lld.%s", pre, (long long)l, map[k].suffix);
            if ((s = need(st, name, &t)) == MHA_OK) s = take(st, &t, map[k].dst, map[k].s0, map[k].s1, map[k].tr, tmp);
        }
    }
    snprintf(name, sizeof name, "%sln_f.weight", pre);
    if (s == MHA_OK && (s = need(st, name, &t)) == MHA_OK) s = take(st, &t, to_f32(m->lnf_s), E, 0, false, tmp);
    snprintf(name, sizeof name, "%sln_f.bias", pre);
    if (s == MHA_OK && (s = need(st, name, &t)) == MHA_OK) s = take(st, &t, to_f32(m->lnf_b), E, 0, false, tmp);
    mha__free(tmp);
    /* nothing unexpected: the mask buffers h.N.attn.bias / masked_bias are ignored */
    const size_t pl = strlen(pre);
    for (size_t i = 0; i < mha_st_count(st) && s == MHA_OK; i++) {
        mha_st_get(st, i, &t);
        const char *nm = strncmp(t.name, pre, pl) == 0 ? t.name + pl : t.name;
        if (!strcmp(nm, "wte.weight") || !strcmp(nm, "wpe.weight") || !strcmp(nm, "ln_f.weight") ||
            !strcmp(nm, "ln_f.bias") || !strcmp(t.name, "lm_head.weight") || !strcmp(nm, "lm_head.weight"))
            continue;
        long long l = -1;
        int used = 0;
        if (sscanf(nm, "h.%lld.%n", &l, &used) == 1 && used > 0 && l >= 0 && l < m->L) {
            const char *rest = nm + used;
            static const char *const known[] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                                "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                                "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight",
                                                "mlp.c_proj.bias", "attn.bias", "attn.masked_bias"};
            bool ok = false;
            for (size_t k = 0; k < sizeof known / sizeof known[0]; k++) ok |= !strcmp(rest, known[k]);
            if (ok) continue;
        }
        s = mha__fail(MHA_ERR_MISSING, "unexpected tensor '%.100s' in a GPT-2 file", t.name);
    }
    if (s != MHA_OK) {
        mha_gpt_free(m);
        return s;
    }
    *out = m;
    return MHA_OK;
}

mha_status mha_gpt_from_st_as(const mha_st *st, mha_dtype dtype, mha_gpt **out) {
    if (!st || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_from_st: NULL argument");
    *out = NULL;
    mha_st_tensor t;
    if (mha_st_find(st, "wte.weight", &t) == MHA_OK) return from_hf(st, "", dtype, out);
    if (mha_st_find(st, "transformer.wte.weight", &t) == MHA_OK) return from_hf(st, "transformer.", dtype, out);
    const char *mod = mha_st_metadata(st, "module");
    if (!mod)
        return mha__fail(MHA_ERR_FORMAT, "neither a Hugging Face GPT-2 file (no wte.weight) nor a book file "
                                         "(no 'module' in __metadata__)");
    mha_gpt_kind kind;
    mha_status s = mha_gpt_kind_from_name(mod, &kind);
    if (s != MHA_OK) return s;
    return from_book(st, kind, dtype, out);
}

mha_status mha_gpt_from_st(const mha_st *st, mha_gpt **out) { return mha_gpt_from_st_as(st, MHA_DTYPE_F32, out); }

typedef struct {
    mha_dtype dtype;
    mha_gpt **out;
} load_args;

static mha_status load_into(const mha_st *st, void *arg) {
    const load_args *a = arg;
    return mha_gpt_from_st_as(st, a->dtype, a->out);
}

mha_status mha_gpt_load_as(const char *path, mha_dtype dtype, mha_gpt **out) {
    if (!path || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_load: NULL argument");
    load_args a = {dtype, out};
    return mha__st_load(path, load_into, &a); /* the weights read straight into place */
}

mha_status mha_gpt_load(const char *path, mha_gpt **out) { return mha_gpt_load_as(path, MHA_DTYPE_F32, out); }

mha_status mha_gpt_convert(const mha_gpt *src, mha_dtype dtype, mha_gpt **out) {
    if (!src || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_convert: NULL argument");
    *out = NULL;
    mha_gpt *m = NULL;
    mha_status s = mha_gpt_create_as(&src->cfg, src->tied, dtype, &m);
    if (s != MHA_OK) return s;
    const mha__kernels *k = mha__kernels_active();
    float piece[1024];
    for (size_t i = 0; i < m->n_tensors && s == MHA_OK; i++) {
        const mha__gpt_tensor *a = &src->tensors[i], *b = &m->tensors[i];
        const size_t n = (size_t)a->s0 * (size_t)(a->s1 ? a->s1 : 1);
        if (b->alias) continue;
        if (b->f) { /* a vector: F32 in every model */
            memcpy(b->f, a->f, n * sizeof(float));
            continue;
        }
        for (size_t at = 0; at < n && s == MHA_OK; at += 1024) {
            const size_t c = n - at < 1024 ? n - at : 1024;
            const float *v = a->f ? a->f + at : piece;
            if (!a->f) (src->wdtype == MHA_DTYPE_BF16 ? k->widen_bf16 : k->widen_f16)(piece, a->h + at, c);
            for (size_t j = 0; j < c && s == MHA_OK; j++) s = mha__gpt_narrow(b->name, at + j, v[j], dtype, &b->h[at + j]);
        }
    }
    if (s != MHA_OK) {
        mha_gpt_free(m);
        return s;
    }
    *out = m;
    return MHA_OK;
}

/* ---- generation ---------------------------------------------------------- */

void mha_generate_opts_init(mha_generate_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 10;
    o->use_cache = 1;
    o->eos_id = -1;
}

/* The first index of the largest of v[0..n) (torch.argmax's first maximum;
 * NaNs skipped unless v[0] is one, then 0): what `v[j] > best` from best =
 * v[0] gives, in two passes that vectorise, the maximum over 16 running
 * ones, then the first block holding it. A decode step's 50257 logits,
 * half of them written by the other core, took 39-68 us as that one loop
 * and 18-22 as this (2-core Zen 5, mha bench GPTModel --dtype bf16). */
static int64_t first_max(const float *v, int64_t n) {
    float best = v[0];
    if (!(best == best)) return 0;
    enum { L = 16 };
    float part[L];
    for (int i = 0; i < L; i++) part[i] = best;
    int64_t j = 0;
    for (; j + L <= n; j += L) {
        if (j + 256 < n) __builtin_prefetch(v + j + 256); /* lines still in the other core's cache */
        for (int i = 0; i < L; i++) part[i] = v[j + i] > part[i] ? v[j + i] : part[i];
    }
    for (; j < n; j++) best = v[j] > best ? v[j] : best;
    for (int i = 0; i < L; i++) best = part[i] > best ? part[i] : best;
    for (j = 0; j + L <= n; j += L) {
        int hit = 0;
        for (int i = 0; i < L; i++) hit |= v[j + i] == best;
        if (hit) break;
    }
    for (; j < n; j++)
        if (v[j] == best) return j;
    return 0; /* not reached: best is one of v */
}

/* The next id from the last position's logits (modified in place); tmp:
 * V floats of scratch for top-k, allocated by the caller with the logits so
 * that picking cannot fail (it once fell back to no top-k when it could not
 * allocate, and drew another token). */
static int32_t pick(float *logits, float *tmp, int64_t V, const mha_generate_opts *o,
                    mha_generator *g) {
    if (o->top_k > 0 && o->top_k < V) {
        /* the k-th largest value (torch.topk(...)[:, -1]): select by counting */
        float kth;
        {
            memcpy(tmp, logits, (size_t)V * sizeof(float));
            /* partial selection sort over the top k: k is small */
            for (int64_t i = 0; i < o->top_k; i++) {
                int64_t best = i;
                for (int64_t j = i + 1; j < V; j++)
                    if (tmp[j] > tmp[best]) best = j;
                const float t = tmp[i];
                tmp[i] = tmp[best];
                tmp[best] = t;
            }
            kth = tmp[o->top_k - 1];
        }
        for (int64_t j = 0; j < V; j++)
            if (logits[j] < kth) logits[j] = -INFINITY;
    }
    int64_t arg = 0;
    if (o->temperature > 0.0) {
        const float temp = (float)o->temperature;
        float mx = -INFINITY;
        for (int64_t j = 0; j < V; j++) {
            logits[j] = logits[j] / temp;
            if (logits[j] > mx) mx = logits[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < V; j++) sum += (double)(logits[j] = expf(logits[j] - mx));
        const float inv = 1.0f / (float)sum; /* torch: probs = e * (1 / sum) */
        /* torch.multinomial(probs, 1): q ~ Exponential(1) for every entry,
         * then argmax(probs / q) */
        float best = -INFINITY;
        for (int64_t j = 0; j < V; j++) {
            const double u = mha__generator_u53(g);
            const float q = (float)(-1.0 * log(1.0 - u));
            const float r = (logits[j] * inv) / q;
            if (r > best) best = r, arg = j;
        }
    } else {
        arg = first_max(logits, V);
    }
    return (int32_t)arg;
}

mha_status mha_gpt_generate(mha_gpt *m, int32_t *out, int64_t *n_out, const int32_t *prompt, int64_t n_prompt,
                            const mha_generate_opts *o, void (*on_token)(void *user, int32_t id), void *user) {
    if (!m || !out || !n_out || !prompt || !o) return mha__fail(MHA_ERR_ARGUMENT, "generate: NULL argument");
    if (m->cfg.kind != MHA_GPT_MODEL) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock does not generate");
    if (n_prompt < 1) return mha__fail(MHA_ERR_SHAPE, "the prompt needs at least one token");
    if (o->max_new_tokens < 0) return mha__fail(MHA_ERR_ARGUMENT, "max_new_tokens must be >= 0");
    if (!(o->temperature >= 0.0) || !isfinite(o->temperature))
        return mha__fail(MHA_ERR_ARGUMENT, "temperature must be >= 0, got %g", o->temperature);
    if (o->top_k < 0) return mha__fail(MHA_ERR_ARGUMENT, "top_k must be >= 0");
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->V)
            return mha__fail(MHA_ERR_ARGUMENT, "token id %d at position %lld is outside the vocabulary [0, %lld)",
                             prompt[i], (long long)i, (long long)m->V);
    const int64_t V = m->V, C = m->C;
    float *logits = mha__alloc_n((size_t)V, 2 * sizeof(float)); /* logits, then pick's scratch */
    mha_generator *g = NULL;
    mha_status s = logits ? MHA_OK : mha__nomem("out of memory for generation's logits");
    if (s == MHA_OK && o->temperature > 0.0) s = mha_generator_create(o->seed, &g);
    int64_t n = n_prompt;
    if (s == MHA_OK) memcpy(out, prompt, (size_t)n_prompt * sizeof(int32_t));
    bool fresh = true;
    for (int64_t i = 0; i < o->max_new_tokens && s == MHA_OK; i++) {
        const int64_t w0 = n > C ? n - C : 0; /* the cropped window */
        if (!o->use_cache) {
            s = mha_gpt_forward(m, logits, out + w0, 1, n - w0, 1, NULL);
        } else if (fresh || n > C) {
            mha_gpt_cache_reset(m);
            s = mha_gpt_cache_feed(m, logits, out + w0, n - w0);
            fresh = false;
        } else {
            s = mha_gpt_cache_feed(m, logits, out + n - 1, 1);
        }
        if (s != MHA_OK) break;
        const int32_t next = pick(logits, logits + V, V, o, g);
        if (next == o->eos_id) break;
        out[n++] = next;
        if (on_token) on_token(user, next);
    }
    *n_out = n;
    mha_generator_free(g);
    mha__free(logits);
    return s;
}
