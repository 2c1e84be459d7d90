/* module_io.c — a module's state_dict to and from safetensors.
 *
 * Uses only the public module API. The file holds what PyTorch's
 * state_dict() holds, named and ordered the same way: the parameters, and
 * the causal mask buffer (context_length, context_length) =
 * triu(ones, diagonal=1) for the classes that register one. PyTorch saves a
 * module's own buffers before its children's tensors, so the mask comes
 * first: "mask", "W_query.weight", ... for CausalAttention and
 * MultiHeadAttention; "heads.N.mask" before head N's parameters for the
 * wrapper. __metadata__ holds "module" (the class name) and the
 * constructor's arguments as strings.
 */
#include "common/common.h"
#include "modules/modules.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Save                                                                       */
/* ------------------------------------------------------------------------ */

static bool has_mask(mha_kind k) {
    return k == MHA_CAUSAL_ATTENTION || k == MHA_MULTI_HEAD_ATTENTION ||
           k == MHA_MULTI_HEAD_ATTENTION_WRAPPER;
}

/* Length of "heads.N." at the start of name, 0 if it is not there. */
static size_t head_prefix_len(const char *name) {
    if (strncmp(name, "heads.", 6) != 0) return 0;
    size_t i = 6;
    while (name[i] >= '0' && name[i] <= '9') i++;
    if (i == 6 || name[i] != '.') return 0;
    return i + 1;
}

mha_status mha_module_save(const mha_module *m, const char *path) {
    if (!m || !path) return mha__fail(MHA_ERR_ARGUMENT, "mha_module_save: NULL argument");
    const mha_config *c = &m->cfg;
    const char *cls = mha_kind_name(c->kind);

    /* metadata: "module" then the constructor's arguments */
    char v_din[24], v_dout[24], v_ctx[24], v_drop[32], v_heads[24];
    snprintf(v_din, sizeof v_din, "%" PRId64, c->d_in);
    snprintf(v_dout, sizeof v_dout, "%" PRId64, c->d_out);
    snprintf(v_ctx, sizeof v_ctx, "%" PRId64, c->context_length);
    mha__format_double(v_drop, sizeof v_drop, c->dropout);
    snprintf(v_heads, sizeof v_heads, "%" PRId64, c->num_heads);
    const char *v_bias = c->qkv_bias ? "true" : "false";
    const char *meta[14];
    size_t nm = 0;
#define META(k, v) (meta[2 * nm] = (k), meta[2 * nm + 1] = (v), nm++)
    META("module", cls);
    META("d_in", v_din);
    META("d_out", v_dout);
    switch (c->kind) {
    case MHA_SELF_ATTENTION_V1: break;
    case MHA_SELF_ATTENTION_V2: META("qkv_bias", v_bias); break;
    case MHA_CAUSAL_ATTENTION:
        META("context_length", v_ctx);
        META("dropout", v_drop);
        META("qkv_bias", v_bias);
        break;
    default:
        META("context_length", v_ctx);
        META("dropout", v_drop);
        META("num_heads", v_heads);
        META("qkv_bias", v_bias);
        break;
    }
#undef META

    /* the mask, one buffer for every "mask" entry: the module's, or each
     * head's before the head's parameters */
    const bool wrapper = c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER;
    const size_t n_masks = !has_mask(c->kind) ? 0 : wrapper ? (size_t)m->H : 1;
    const size_t ctx = (size_t)c->context_length, per_head = m->params.n / (n_masks ? n_masks : 1);
    const int64_t mshape[2] = {c->context_length, c->context_length};
    float *mask = n_masks ? mha__alloc_n(ctx * ctx, sizeof *mask) : NULL;
    mha__st_extra *extra = mha__calloc_n(n_masks ? n_masks : 1, sizeof *extra);
    char(*names)[32] = mha__calloc_n(n_masks ? n_masks : 1, sizeof *names);
    mha_status s = MHA_OK;
    if ((n_masks && !mask) || !extra || !names) {
        s = mha__nomem("out of memory for the %zu x %zu mask", ctx, ctx);
    } else {
        for (size_t i = 0; i < ctx * ctx; i++) mask[i] = i % ctx > i / ctx ? 1.0f : 0.0f;
        for (size_t h = 0; h < n_masks; h++) {
            if (wrapper) snprintf(names[h], sizeof names[h], "heads.%zu.mask", h);
            else snprintf(names[h], sizeof names[h], "mask");
            extra[h] = (mha__st_extra){names[h], 2, mshape, mask, h * per_head};
        }
        float *const base[1] = {m->params.arena};
        static const char *const no_prefix[1] = {""};
        const mha__param_views views = {1, no_prefix, base, true};
        s = mha__params_save(&m->params, &views, extra, n_masks, meta, nm, path);
    }
    mha__free(names);
    mha__free(extra);
    mha__free(mask);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Load                                                                       */
/* ------------------------------------------------------------------------ */

/* The constructor's arguments: integers > 0 (required), dropout and
 * qkv_bias (optional: 0, false), read by the metadata rule; a missing or bad
 * one is ERR_CONFIG. */
static mha_status config_from_meta(const mha_st *st, mha_config *c) {
    const char *cls = mha_st_metadata(st, "module");
    if (!cls)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no 'module' (not a module file)");
    mha_kind kind;
    mha_status s = mha_kind_from_name(cls, &kind);
    if (s != MHA_OK) return mha__fail(s, "unknown module '%s'", cls);
    mha_config_init(c, kind);
    s = mha_st_metadata_int(st, "d_in", 1, INT64_MAX, &c->d_in);
    if (s == MHA_OK) s = mha_st_metadata_int(st, "d_out", 1, INT64_MAX, &c->d_out);
    if (s == MHA_OK && kind != MHA_SELF_ATTENTION_V1 && mha_st_metadata(st, "qkv_bias"))
        s = mha_st_metadata_bool(st, "qkv_bias", &c->qkv_bias);
    if (s == MHA_OK && kind >= MHA_CAUSAL_ATTENTION) {
        s = mha_st_metadata_int(st, "context_length", 1, INT64_MAX, &c->context_length);
        if (s == MHA_OK && mha_st_metadata(st, "dropout"))
            s = mha_st_metadata_double(st, "dropout", &c->dropout);
        if (s == MHA_OK && kind != MHA_CAUSAL_ATTENTION)
            s = mha_st_metadata_int(st, "num_heads", 1, INT64_MAX, &c->num_heads);
    }
    return s == MHA_ERR_FORMAT || s == MHA_ERR_MISSING ? MHA_ERR_CONFIG : s;
}

/* "mask" for CausalAttention/MultiHeadAttention, "heads.N.mask" with
 * 0 <= N < num_heads (canonical decimal) for the wrapper. */
static bool is_mask_name(const mha_config *c, const char *name) {
    if (c->kind == MHA_CAUSAL_ATTENTION || c->kind == MHA_MULTI_HEAD_ATTENTION)
        return strcmp(name, "mask") == 0;
    if (c->kind != MHA_MULTI_HEAD_ATTENTION_WRAPPER) return false;
    size_t pl = head_prefix_len(name);
    if (pl == 0 || strcmp(name + pl, "mask") != 0) return false;
    const char *digits = name + 6;
    size_t nd = pl - 7;
    if (nd > 1 && digits[0] == '0') return false;
    if (nd > 18) return false;
    int64_t h = 0;
    for (size_t i = 0; i < nd; i++) h = h * 10 + (digits[i] - '0');
    return h < c->num_heads;
}

/* A large module must first be plausible (mha__st_can_fill): the file has
 * to hold as many float tensors and values as the module's parameters.
 * Small modules skip this, so their errors name the exact tensor. */
#define LOAD_SMALL_SCALARS ((uint64_t)1 << 20)
#define LOAD_SMALL_PARAMS ((uint64_t)4096)

static mha_status precheck_size(const mha_st *st, const mha_config *c) {
    const uint64_t din = (uint64_t)c->d_in, dout = (uint64_t)c->d_out;
    const uint64_t b = (c->kind != MHA_SELF_ATTENTION_V1 && c->qkv_bias) ? 1 : 0;
    uint64_t heads = 1, per = 0, nparams = 3 * (1 + b), total = 0, w, proj;
    /* one Linear(d_in, d_out): d_in * d_out + b * d_out values */
    bool ok = !__builtin_mul_overflow(din, dout, &w) && !__builtin_add_overflow(w, b * dout, &proj) &&
              !__builtin_mul_overflow(proj, 3, &per);
    if (ok && c->kind == MHA_MULTI_HEAD_ATTENTION) { /* + out_proj, always with bias */
        ok = !__builtin_mul_overflow(dout, dout, &w) && !__builtin_add_overflow(w, dout, &w) &&
             !__builtin_add_overflow(per, w, &per);
        nparams += 2;
    }
    if (c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER) heads = (uint64_t)c->num_heads;
    ok = ok && !__builtin_mul_overflow(per, heads, &total) &&
         !__builtin_mul_overflow(nparams, heads, &nparams);
    if (ok && total <= LOAD_SMALL_SCALARS && nparams <= LOAD_SMALL_PARAMS) return MHA_OK;
    char what[96];
    snprintf(what, sizeof what, "%s(d_in=%" PRId64 ", d_out=%" PRId64 ")", mha_kind_name(c->kind), c->d_in,
             c->d_out);
    return mha__st_can_fill(st, ok, total, nparams, what);
}

/* A tensor other than a parameter: a mask buffer of shape (L, L), or ERR_MISSING. */
static mha_status mask_buffer(void *arg, const mha_st_tensor *t) {
    const mha_config *c = arg;
    if (!is_mask_name(c, t->name)) return mha__fail(MHA_ERR_MISSING, "unexpected tensor '%s'", t->name);
    const int64_t ms[2] = {c->context_length, c->context_length};
    if (t->ndim == 2 && t->shape[0] == ms[0] && t->shape[1] == ms[1]) return MHA_OK;
    char want[64], got[160];
    mha__shape_str(got, sizeof got, t->ndim, t->shape);
    mha__shape_str(want, sizeof want, 2, ms);
    return mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape %s, expected %s", t->name, got, want);
}

mha_status mha_module_from_st(const mha_st *st, mha_module **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_module_from_st: out is NULL");
    *out = NULL;
    if (!st) return mha__fail(MHA_ERR_ARGUMENT, "mha_module_from_st: st is NULL");
    mha_config c;
    mha_status s = config_from_meta(st, &c);
    if (s != MHA_OK) return s;
    s = mha_config_validate(&c);
    if (s == MHA_OK) s = precheck_size(st, &c);
    if (s != MHA_OK) return s;
    mha_module *m = NULL;
    s = mha_module_create(&c, &m);
    if (s != MHA_OK) return s;
    float *const base[1] = {m->params.arena};
    static const char *const no_prefix[1] = {""};
    const mha__param_views views = {1, no_prefix, base, true};
    s = mha__params_read(&m->params, &views, st, false, mask_buffer, &c);
    if (s != MHA_OK) {
        mha_module_free(m);
        return s;
    }
    *out = m;
    return MHA_OK;
}

static mha_status load_into(const mha_st *st, void *out) { return mha_module_from_st(st, out); }

mha_status mha_module_load(const char *path, mha_module **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_module_load: out is NULL");
    *out = NULL;
    return mha__st_load(path, load_into, out);
}
