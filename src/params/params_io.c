/* params_io.c — a parameter set's tensors to and from safetensors: what
 * the module, GPT and optimizer files write and read the same way. */
#include "params.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void mha__shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
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

static bool float_dtype(mha_dtype d) {
    return d == MHA_DTYPE_F32 || d == MHA_DTYPE_F16 || d == MHA_DTYPE_BF16 || d == MHA_DTYPE_F64;
}

static bool in_file(const mha_params *ps, const mha__param_views *v, size_t i) {
    return v->with_aliases || !ps->alias[i];
}

mha_status mha__params_save(const mha_params *ps, const mha__param_views *v, const mha__st_extra *extra,
                            size_t n_extra, const char *const *meta, size_t n_meta, const char *path) {
    size_t n = n_extra, bytes = 1;
    for (size_t i = 0; i < ps->n; i++)
        for (size_t k = 0; in_file(ps, v, i) && k < v->n; k++) {
            n++;
            bytes += strlen(v->prefix[k]) + strlen(ps->p[i].name) + 1;
        }
    mha_st_entry *e = mha__calloc_n(n ? n : 1, sizeof *e);
    char *names = mha__alloc(bytes), *at = names;
    mha_status s = MHA_OK;
    if (!e || !names) s = mha__nomem("out of memory saving %zu tensors", n);
    size_t ne = 0, x = 0;
    for (size_t i = 0; s == MHA_OK && i <= ps->n; i++) {
        for (; x < n_extra && (extra[x].before <= i || i == ps->n); x++)
            e[ne++] = (mha_st_entry){extra[x].name, MHA_DTYPE_F32, extra[x].ndim, extra[x].shape,
                                     extra[x].data};
        for (size_t k = 0; i < ps->n && in_file(ps, v, i) && k < v->n; k++) {
            const mha_param *p = &ps->p[i];
            const int len = sprintf(at, "%s%s", v->prefix[k], p->name);
            e[ne++] = (mha_st_entry){at, MHA_DTYPE_F32, p->ndim, p->shape,
                                     v->base[k] + (p->data - ps->arena)};
            at += len + 1;
        }
    }
    if (s == MHA_OK) s = mha_st_write_file(path, e, ne, meta, n_meta);
    mha__free(names);
    mha__free(e);
    return s;
}

/* The view k and parameter i a file tensor name stands for; false if none. */
static bool locate(const mha_params *ps, const mha__param_views *v, const char *name, size_t *k, size_t *i) {
    for (*k = 0; *k < v->n; ++*k) {
        const size_t pl = strlen(v->prefix[*k]);
        if (strncmp(name, v->prefix[*k], pl) != 0) continue;
        for (*i = 0; *i < ps->n; ++*i)
            if (in_file(ps, v, *i) && strcmp(name + pl, ps->p[*i].name) == 0) return true;
    }
    return false;
}

/* Tensor t into dst as parameter p's view. */
static mha_status read_one(const mha_st *st, const mha_st_tensor *t, const mha_param *p, float *dst,
                           bool f32_only) {
    if (f32_only ? t->dtype != MHA_DTYPE_F32 : !float_dtype(t->dtype))
        return mha__fail(MHA_ERR_DTYPE, "tensor '%s' has dtype %s; expected %s", t->name,
                         mha_dtype_name(t->dtype), f32_only ? "F32" : "F32, F16, BF16 or F64");
    bool same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
    if (!same) {
        char want[64], got[160];
        mha__shape_str(got, sizeof got, t->ndim, t->shape);
        mha__shape_str(want, sizeof want, p->ndim, p->shape);
        return mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape %s, expected %s", t->name, got, want);
    }
    mha_status s = mha_st_read_f32(st, t, dst, p->numel);
    for (size_t j = 0; s == MHA_OK && j < p->numel; j++)
        if (!isfinite(dst[j]))
            s = mha__fail(MHA_ERR_NONFINITE, "tensor '%s' holds %s at element %zu (values must be finite)",
                          t->name, isnan(dst[j]) ? "NaN" : "infinity", j);
    return s;
}

mha_status mha__params_read(const mha_params *ps, const mha__param_views *v, const mha_st *st, bool f32_only,
                            mha_status (*other)(void *arg, const mha_st_tensor *t), void *arg) {
    size_t want = 0, got = 0;
    for (size_t i = 0; i < ps->n; i++) want += in_file(ps, v, i) ? v->n : 0;
    mha_status s = MHA_OK;
    for (size_t j = 0; s == MHA_OK && j < mha_st_count(st); j++) {
        mha_st_tensor t;
        size_t k, i;
        if ((s = mha_st_get(st, j, &t)) != MHA_OK) break;
        if (locate(ps, v, t.name, &k, &i)) {
            s = read_one(st, &t, &ps->p[i], v->base[k] + (ps->p[i].data - ps->arena), f32_only);
            got++;
        } else {
            s = other ? other(arg, &t) : mha__fail(MHA_ERR_MISSING, "unexpected tensor '%s'", t.name);
        }
    }
    /* every tensor was read once (names are unique): a shortfall is a missing one */
    for (size_t i = 0; s == MHA_OK && got < want && i < ps->n; i++)
        for (size_t k = 0; s == MHA_OK && in_file(ps, v, i) && k < v->n; k++) {
            char name[160];
            mha_st_tensor t;
            snprintf(name, sizeof name, "%s%s", v->prefix[k], ps->p[i].name);
            if (mha_st_find(st, name, &t) != MHA_OK)
                s = mha__fail(MHA_ERR_MISSING, "missing tensor '%s'", name);
        }
    return s;
}

mha_status mha__st_can_fill(const mha_st *st, bool counted, uint64_t values, uint64_t tensors, const char *what) {
    uint64_t bytes = 0, n = 0;
    for (size_t i = 0; i < mha_st_count(st); i++) {
        mha_st_tensor t;
        if (mha_st_get(st, i, &t) != MHA_OK || !float_dtype(t.dtype)) continue;
        bytes += t.nbytes; /* sums to at most the file size */
        n++;
    }
    if (counted && values <= bytes / 2 && tensors <= n) return MHA_OK;
    return mha__fail(MHA_ERR_MISSING,
                     "%s needs %s%" PRIu64 " parameter values in %" PRIu64 " tensors; the file holds %" PRIu64
                     " float tensors of %" PRIu64 " bytes",
                     what, counted ? "" : "over ", counted ? values : UINT64_MAX, tensors, n, bytes);
}

mha_status mha__st_load(const char *path, mha_status (*load)(const mha_st *st, void *arg), void *arg) {
    if (!path) return mha__fail(MHA_ERR_ARGUMENT, "path is NULL");
    mha_st *st = NULL;
    mha_status s = mha_st_open(path, &st);
    if (s == MHA_OK) {
        s = load(st, arg);
        mha_st_free(st);
    }
    const size_t pl = strlen(path);
    const char *d = mha_last_error();
    if (s != MHA_OK && !(strncmp(d, path, pl) == 0 && d[pl] == ':')) { /* the path once */
        char detail[400];
        snprintf(detail, sizeof detail, "%s", d);
        return mha__fail(s, "%s: %s", path, detail);
    }
    return s;
}
