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

/* Appends "heads.N.mask" (N from the parameter name's prefix of length pl). */
static mha_status add_head_mask(mha_st_entry *ents, size_t *ne, char **names, size_t *nmask,
                                size_t n_masks, const char *pname, size_t pl,
                                const int64_t *mshape, const float *mask) {
    if (*nmask == n_masks)
        return mha__fail(MHA_ERR_ARGUMENT, "module has more heads than num_heads");
    char *nm = mha__alloc(pl + 5);
    if (!nm) return mha__nomem("out of memory");
    memcpy(nm, pname, pl);
    memcpy(nm + pl, "mask", 5);
    names[(*nmask)++] = nm;
    ents[(*ne)++] = (mha_st_entry){nm, MHA_DTYPE_F32, 2, mshape, mask};
    return MHA_OK;
}

mha_status mha_module_save(const mha_module *m, const char *path) {
    if (!m || !path) return mha__fail(MHA_ERR_ARGUMENT, "mha_module_save: NULL argument");
    const mha_config *c = mha_module_config_of(m);
    const char *cls = mha_kind_name(c->kind);
    if (!cls) return mha__fail(MHA_ERR_UNKNOWN_MODULE, "unknown module kind %d", (int)c->kind);
    size_t np = mha_module_num_params(m);
    bool masked = has_mask(c->kind);

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

    /* the mask, shared by every "mask" entry */
    float *mask = NULL;
    int64_t mshape[2] = {c->context_length, c->context_length};
    size_t ctx = 0, mask_n = 0, n_masks = 0;
    if (masked) {
        if (c->context_length <= 0 || (uint64_t)c->context_length > SIZE_MAX ||
            !mha__mul_size((size_t)c->context_length, (size_t)c->context_length, &mask_n) ||
            mask_n > SIZE_MAX / sizeof(float))
            return mha__fail(MHA_ERR_OVERFLOW, "mask of context_length %" PRId64
                             " is too large", c->context_length);
        ctx = (size_t)c->context_length;
        n_masks = c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER ? (size_t)c->num_heads : 1;
    }

    size_t cap;
    if (!mha__add_size(np, n_masks, &cap) || cap > SIZE_MAX / sizeof(mha_st_entry))
        return mha__fail(MHA_ERR_OVERFLOW, "too many tensors");
    mha_st_entry *ents = mha__calloc_n(cap ? cap : 1, sizeof *ents);
    char **mask_names = mha__calloc_n(n_masks ? n_masks : 1, sizeof *mask_names);
    mha_param *params = mha__calloc_n(np ? np : 1, sizeof *params);
    mha_status s = MHA_OK;
    if (!ents || !mask_names || !params) {
        s = mha__nomem("out of memory saving the module");
        goto out;
    }
    if (masked) {
        mask = mha__alloc(mask_n * sizeof *mask);
        if (!mask) {
            s = mha__nomem("out of memory for the %zu x %zu mask", ctx, ctx);
            goto out;
        }
        for (size_t i = 0; i < ctx; i++)
            for (size_t j = 0; j < ctx; j++) mask[i * ctx + j] = j > i ? 1.0f : 0.0f;
    }
    size_t ne = 0, nmask = 0;
    if (masked && c->kind != MHA_MULTI_HEAD_ATTENTION_WRAPPER)
        ents[ne++] = (mha_st_entry){"mask", MHA_DTYPE_F32, 2, mshape, mask};
    for (size_t i = 0; i < np; i++) {
        s = mha_module_param(m, i, &params[i]);
        if (s != MHA_OK) goto out;
        const mha_param *p = &params[i];
        if (c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER) {
            /* heads.N.mask right before the first parameter of head N */
            size_t pl = head_prefix_len(p->name);
            bool first = pl > 0 && (i == 0 || !(head_prefix_len(params[i - 1].name) == pl &&
                                                 strncmp(params[i - 1].name, p->name, pl) == 0));
            if (first) {
                s = add_head_mask(ents, &ne, mask_names, &nmask, n_masks, p->name, pl, mshape,
                                  mask);
                if (s != MHA_OK) goto out;
            }
        }
        ents[ne++] = (mha_st_entry){p->name, MHA_DTYPE_F32, p->ndim, p->shape, p->data};
    }
    s = mha_st_write_file(path, ents, ne, meta, nm);

out:
    for (size_t i = 0; mask_names && i < n_masks; i++) mha__free(mask_names[i]);
    mha__free(mask_names);
    mha__free(params);
    mha__free(ents);
    mha__free(mask);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Load                                                                       */
/* ------------------------------------------------------------------------ */

/* A strictly decimal integer > 0: digits only (a leading '-' is read so the
 * detail can say the value must be positive). */
static mha_status meta_int(const mha_st *st, const char *key, int64_t *out) {
    const char *v = mha_st_metadata(st, key);
    if (!v) return mha__fail(MHA_ERR_CONFIG, "__metadata__ has no '%s'", key);
    const char *p = v;
    bool neg = *p == '-';
    if (neg) p++;
    if (*p == '\0')
        return mha__fail(MHA_ERR_CONFIG, "__metadata__ '%s' = '%s' is not an integer", key, v);
    int64_t x = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return mha__fail(MHA_ERR_CONFIG, "__metadata__ '%s' = '%s' is not an integer",
                             key, v);
        if (!mha__mul_i64(x, 10, &x) || __builtin_add_overflow(x, (int64_t)(*p - '0'), &x))
            return mha__fail(MHA_ERR_CONFIG, "__metadata__ '%s' = '%s' is out of range",
                             key, v);
    }
    if (neg || x == 0)
        return mha__fail(MHA_ERR_CONFIG, "__metadata__ '%s' = '%s' must be > 0", key, v);
    *out = x;
    return MHA_OK;
}

static mha_status meta_dropout(const mha_st *st, double *out) {
    const char *v = mha_st_metadata(st, "dropout");
    if (!v) {
        *out = 0.0;
        return MHA_OK;
    }
    double d = 0.0;
    const bool ok = mha__parse_double(v, &d);
    if (!ok)
        return mha__fail(MHA_ERR_CONFIG, "__metadata__ 'dropout' = '%s' is not a finite "
                         "number", v);
    *out = d;
    return MHA_OK;
}

static mha_status meta_bool(const mha_st *st, const char *key, int *out) {
    const char *v = mha_st_metadata(st, key);
    if (!v) {
        *out = 0;
        return MHA_OK;
    }
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *out = 0;
    else
        return mha__fail(MHA_ERR_CONFIG, "__metadata__ '%s' = '%s' is not a boolean", key, v);
    return MHA_OK;
}

static mha_status config_from_meta(const mha_st *st, mha_config *c) {
    const char *cls = mha_st_metadata(st, "module");
    if (!cls)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no 'module' (not a module file)");
    mha_kind kind;
    mha_status s = mha_kind_from_name(cls, &kind);
    if (s != MHA_OK) return mha__fail(s, "unknown module '%s'", cls);
    mha_config_init(c, kind);
    s = meta_int(st, "d_in", &c->d_in);
    if (s == MHA_OK) s = meta_int(st, "d_out", &c->d_out);
    if (s != MHA_OK) return s;
    if (kind != MHA_SELF_ATTENTION_V1) {
        s = meta_bool(st, "qkv_bias", &c->qkv_bias);
        if (s != MHA_OK) return s;
    }
    if (kind == MHA_SELF_ATTENTION_V1 || kind == MHA_SELF_ATTENTION_V2) return MHA_OK;
    s = meta_int(st, "context_length", &c->context_length);
    if (s == MHA_OK) s = meta_dropout(st, &c->dropout);
    if (s == MHA_OK && kind != MHA_CAUSAL_ATTENTION)
        s = meta_int(st, "num_heads", &c->num_heads);
    return s;
}

static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = 0;
    int w = snprintf(buf, cap, "(");
    k = w > 0 ? (size_t)w : 0;
    for (int d = 0; d < ndim && k < cap; d++) {
        w = snprintf(buf + k, cap - k, "%s%" PRId64, d ? ", " : "", shape[d]);
        if (w < 0) break;
        k += (size_t)w;
    }
    if (k < cap) snprintf(buf + k, cap - k, ")");
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

/* The loader creates the module (allocating its parameters) before it can
 * name the tensors it needs. A few bytes of metadata could ask for a huge
 * module, so a large one must first be plausible: the file has to hold at
 * least as many float tensors and float bytes (at 2 bytes a value, F16) as
 * the module has parameters and parameter values. Small modules skip this,
 * so their errors name the exact tensor. */
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
    uint64_t have_bytes = 0, have_tensors = 0;
    for (size_t i = 0; i < mha_st_count(st); i++) {
        mha_st_tensor t;
        if (mha_st_get(st, i, &t) != MHA_OK) continue;
        if (t.dtype == MHA_DTYPE_F32 || t.dtype == MHA_DTYPE_F16 ||
            t.dtype == MHA_DTYPE_BF16 || t.dtype == MHA_DTYPE_F64) {
            have_bytes += t.nbytes; /* sums to at most the file size */
            have_tensors++;
        }
    }
    if (!ok || total > have_bytes / 2 || nparams > have_tensors)
        return mha__fail(MHA_ERR_MISSING,
                         "%s(d_in=%" PRId64 ", d_out=%" PRId64 ") needs %s%" PRIu64
                         " parameter values in %" PRIu64 " tensors; the file holds %" PRIu64
                         " float tensors of %" PRIu64 " bytes",
                         mha_kind_name(c->kind), c->d_in, c->d_out, ok ? "" : "over ",
                         ok ? total : UINT64_MAX, nparams, have_tensors, have_bytes);
    return MHA_OK;
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

    size_t n = mha_st_count(st), matched = 0;
    char want[160], got[160];
    for (size_t i = 0; i < n && s == MHA_OK; i++) {
        mha_st_tensor t;
        s = mha_st_get(st, i, &t);
        if (s != MHA_OK) break;
        mha_param p;
        if (mha_module_find_param(m, t.name, &p) == MHA_OK) {
            if (t.dtype != MHA_DTYPE_F32 && t.dtype != MHA_DTYPE_F16 &&
                t.dtype != MHA_DTYPE_BF16 && t.dtype != MHA_DTYPE_F64) {
                s = mha__fail(MHA_ERR_DTYPE, "tensor '%s' has dtype %s; expected F32, F16, "
                              "BF16 or F64", t.name, mha_dtype_name(t.dtype));
                break;
            }
            bool same = t.ndim == p.ndim;
            for (int d = 0; same && d < p.ndim; d++) same = t.shape[d] == p.shape[d];
            if (!same) {
                shape_str(got, sizeof got, t.ndim, t.shape);
                shape_str(want, sizeof want, p.ndim, p.shape);
                s = mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape %s, expected %s", t.name,
                              got, want);
                break;
            }
            s = mha_st_read_f32(st, &t, p.data, p.numel);
            matched++;
        } else if (is_mask_name(&c, t.name)) {
            int64_t ms[2] = {c.context_length, c.context_length};
            if (t.ndim != 2 || t.shape[0] != ms[0] || t.shape[1] != ms[1]) {
                shape_str(got, sizeof got, t.ndim, t.shape);
                shape_str(want, sizeof want, 2, ms);
                s = mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape %s, expected %s", t.name,
                              got, want);
            }
        } else {
            s = mha__fail(MHA_ERR_MISSING, "unexpected tensor '%s'", t.name);
        }
    }
    size_t np = mha_module_num_params(m);
    if (s == MHA_OK && matched != np) {
        for (size_t i = 0; i < np; i++) {
            mha_param p;
            s = mha_module_param(m, i, &p);
            if (s != MHA_OK) break;
            mha_st_tensor t;
            if (mha_st_find(st, p.name, &t) != MHA_OK) {
                s = mha__fail(MHA_ERR_MISSING, "missing tensor '%s'", p.name);
                break;
            }
        }
        if (s == MHA_OK) s = mha__fail(MHA_ERR_MISSING, "parameters missing");
    }
    if (s == MHA_OK) s = mha_module_check_finite(m);
    if (s != MHA_OK) {
        mha_module_free(m);
        return s;
    }
    *out = m;
    return MHA_OK;
}

mha_status mha_module_load(const char *path, mha_module **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_module_load: out is NULL");
    *out = NULL;
    mha_st *st = NULL;
    mha_status s = mha_st_open(path, &st);
    if (s != MHA_OK) return s;
    s = mha_module_from_st(st, out);
    mha_st_free(st);
    if (s != MHA_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "%s", mha_last_error());
        return mha__fail(s, "%s: %s", path, detail);
    }
    return MHA_OK;
}
