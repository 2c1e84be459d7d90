/* gpt_io.c — GPTModel and TransformerBlock weights in safetensors: the
 * book's state_dict names (with the configuration in __metadata__) and
 * Hugging Face's GPT-2 names (configuration from the shapes). */
#include "gpt.h"

#include "common/common.h"
#include "generator/generator.h"

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
    float *const base[1] = {m->params.arena};
    const mha__param_views views = {1, no_prefix, base, true};
    return mha__params_save(&m->params, &views, NULL, 0, meta, n_meta, path);
}

/* ---- load: shared ------------------------------------------------------- */

/* Converts t (shape rows x cols, or cols when rows == 0) into dst, or
 * transposed ((cols, rows) into dst (rows... ) when transpose. Checks the
 * shape and finiteness; the detail names the tensor. */
static mha_status take(const mha_st *st, const mha_st_tensor *t, float *dst, int64_t s0, int64_t s1, bool transpose,
                       float *tmp) {
    const int nd = s1 ? 2 : 1;
    const int64_t f0 = transpose ? s1 : s0, f1 = transpose ? s0 : s1; /* the file's shape */
    if (t->ndim != nd || t->shape[0] != f0 || (nd == 2 && t->shape[1] != f1)) {
        char got[64] = "";
        for (int d = 0; d < t->ndim && d < 4; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (nd == 2)
            return mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape (%s), expected (%lld, %lld)", t->name, got,
                             (long long)f0, (long long)f1);
        return mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape (%s), expected (%lld)", t->name, got, (long long)f0);
    }
    float *out = transpose ? tmp : dst;
    mha_status s = mha_st_read_f32(st, t, out, t->numel);
    if (s != MHA_OK) {
        char d[200];
        snprintf(d, sizeof d, "%s", mha_last_error());
        return mha__fail(s, "tensor '%s': %s", t->name, d);
    }
    for (size_t i = 0; i < t->numel; i++)
        if (!isfinite(out[i]))
            return mha__fail(MHA_ERR_NONFINITE, "tensor '%s' holds %s at element %zu", t->name,
                             isnan(out[i]) ? "NaN" : "infinity", i);
    if (transpose)
        for (int64_t i = 0; i < s0; i++)
            for (int64_t j = 0; j < s1; j++) dst[i * s1 + j] = tmp[j * s0 + i];
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

static mha_status from_book(const mha_st *st, mha_gpt_kind kind, mha_gpt **out) {
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
    if ((s = mha_gpt_create(&c, tied, &m)) != MHA_OK) return s;
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

static mha_status from_hf(const mha_st *st, const char *pre, mha_gpt **out) {
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
    if ((s = mha_gpt_create(&c, tied, &m)) != MHA_OK) return s;
    const int64_t E = m->E;
    float *tmp = mha__alloc((size_t)(4 * E * E) * sizeof(float));
    if (!tmp) {
        mha_gpt_free(m);
        return mha__nomem("out of memory");
    }
    s = take(st, &wte, m->tok_emb, m->V, E, false, NULL);
    if (s == MHA_OK) s = take(st, &wpe, m->pos_emb, m->C, E, false, NULL);
    if (s == MHA_OK && !tied) s = take(st, &head, m->head, m->V, E, false, NULL);
    for (int64_t l = 0; l < m->L && s == MHA_OK; l++) {
        mha__gpt_block *b = &m->blocks[l];
        const struct {
            const char *suffix;
            float *dst;
            int64_t s0, s1;
            bool tr;
        } map[] = {
            {"ln_1.weight", b->ln1_s, E, 0, false},        {"ln_1.bias", b->ln1_b, E, 0, false},
            {"attn.c_attn.weight", b->w_qkv, 3 * E, E, true}, {"attn.c_attn.bias", b->b_qkv, 3 * E, 0, false},
            {"attn.c_proj.weight", b->w_out, E, E, true},  {"attn.c_proj.bias", b->b_out, E, 0, false},
            {"ln_2.weight", b->ln2_s, E, 0, false},        {"ln_2.bias", b->ln2_b, E, 0, false},
            {"mlp.c_fc.weight", b->w1, 4 * E, E, true},    {"mlp.c_fc.bias", b->b1, 4 * E, 0, false},
            {"mlp.c_proj.weight", b->w2, E, 4 * E, true},  {"mlp.c_proj.bias", b->b2, E, 0, false},
        };
        for (size_t k = 0; k < sizeof map / sizeof map[0] && s == MHA_OK; k++) {
            snprintf(name, sizeof name, "%sh.%lld.%s", pre, (long long)l, map[k].suffix);
            if ((s = need(st, name, &t)) == MHA_OK) s = take(st, &t, map[k].dst, map[k].s0, map[k].s1, map[k].tr, tmp);
        }
    }
    snprintf(name, sizeof name, "%sln_f.weight", pre);
    if (s == MHA_OK && (s = need(st, name, &t)) == MHA_OK) s = take(st, &t, m->lnf_s, E, 0, false, NULL);
    snprintf(name, sizeof name, "%sln_f.bias", pre);
    if (s == MHA_OK && (s = need(st, name, &t)) == MHA_OK) s = take(st, &t, m->lnf_b, E, 0, false, NULL);
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

mha_status mha_gpt_from_st(const mha_st *st, mha_gpt **out) {
    if (!st || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_from_st: NULL argument");
    *out = NULL;
    mha_st_tensor t;
    if (mha_st_find(st, "wte.weight", &t) == MHA_OK) return from_hf(st, "", out);
    if (mha_st_find(st, "transformer.wte.weight", &t) == MHA_OK) return from_hf(st, "transformer.", out);
    const char *mod = mha_st_metadata(st, "module");
    if (!mod)
        return mha__fail(MHA_ERR_FORMAT, "neither a Hugging Face GPT-2 file (no wte.weight) nor a book file "
                                         "(no 'module' in __metadata__)");
    mha_gpt_kind kind;
    mha_status s = mha_gpt_kind_from_name(mod, &kind);
    if (s != MHA_OK) return s;
    return from_book(st, kind, out);
}

static mha_status load_into(const mha_st *st, void *out) { return mha_gpt_from_st(st, out); }

mha_status mha_gpt_load(const char *path, mha_gpt **out) {
    if (!path || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_gpt_load: NULL argument");
    return mha__st_load(path, load_into, out); /* the weights read straight into place */
}

/* ---- generation ---------------------------------------------------------- */

void mha_generate_opts_init(mha_generate_opts *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 10;
    o->use_cache = 1;
    o->eos_id = -1;
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
        float best = logits[0];
        for (int64_t j = 1; j < V; j++)
            if (logits[j] > best) best = logits[j], arg = j;
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
