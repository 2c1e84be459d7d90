/* params.c — the parameter set (params.h) and its public accessors. */
#include "params.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Ids are never reused, so a tape cannot be taken for another set's even
 * when that set sits at a freed one's address. */
static atomic_uint_fast64_t next_id = 1;

mha_status mha__params_init(mha_params *ps, const char *owner, size_t floats, size_t cap) {
    memset(ps, 0, sizeof *ps);
    ps->owner = owner;
    ps->floats = floats;
    ps->cap = cap;
    ps->names_cap = cap * (MHA_PARAM_NAME_MAX + 1);
    ps->arena = mha__calloc_n(floats ? floats : 1, sizeof(float));
    ps->p = mha__calloc_n(cap ? cap : 1, sizeof *ps->p);
    ps->alias = mha__calloc_n(cap ? cap : 1, sizeof *ps->alias);
    ps->names = mha__calloc_n(ps->names_cap ? ps->names_cap : 1, 1);
    if (!ps->arena || !ps->p || !ps->alias || !ps->names) {
        mha__params_free(ps);
        return mha__nomem("out of memory allocating %zu parameters (%zu MiB)", floats,
                          floats * sizeof(float) >> 20);
    }
    ps->id = atomic_fetch_add(&next_id, 1);
    return MHA_OK;
}

void mha__params_free(mha_params *ps) {
    mha__free(ps->arena);
    mha__free(ps->grad);
    mha__free(ps->p);
    mha__free(ps->alias);
    mha__free(ps->names);
    memset(ps, 0, sizeof *ps);
}

/* The next entry, named prefix + name. */
static mha_param *next(mha_params *ps, const char *prefix, const char *name) {
    mha_param *p = &ps->p[ps->n++];
    char *at = ps->names + ps->names_used;
    const int len = snprintf(at, MHA_PARAM_NAME_MAX + 1, "%s%s", prefix, name);
    p->name = at;
    ps->names_used += (size_t)len + 1;
    return p;
}

void mha__params_add(mha_params *ps, const char *prefix, const char *name, float *data, int ndim,
                     int64_t s0, int64_t s1) {
    mha_param *p = next(ps, prefix, name);
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = ndim == 2 ? s1 : 0;
    p->numel = (size_t)s0 * (size_t)(ndim == 2 ? s1 : 1);
    p->data = data;
}

void mha__params_add_alias(mha_params *ps, const char *name, size_t of) {
    const mha_param src = ps->p[of];
    ps->alias[ps->n] = true;
    mha_param *p = next(ps, "", name);
    const char *nm = p->name;
    *p = src;
    p->name = nm;
}

float *mha__params_grad(mha_params *ps) {
    if (!ps->grad) {
        ps->grad = mha__calloc_n(ps->floats ? ps->floats : 1, sizeof(float));
        if (!ps->grad)
            mha__nomem("out of memory allocating gradients (%zu MiB)", ps->floats * sizeof(float) >> 20);
    }
    return ps->grad;
}

mha_status mha__params_check_tape(const mha_params *ps, uint64_t id) {
    if (id == 0) return mha__fail(MHA_ERR_ARGUMENT, "the tape holds no forward (record one first)");
    if (id != ps->id)
        return mha__fail(MHA_ERR_ARGUMENT, "the tape was recorded by another %s or with other parameters",
                         ps->owner);
    return MHA_OK;
}

mha_status mha__params_check_finite(const mha_params *ps) {
    for (size_t i = 0; i < ps->n; i++) {
        const mha_param *p = &ps->p[i];
        for (size_t j = 0; j < p->numel; j++)
            if (!isfinite(p->data[j]))
                return mha__fail(MHA_ERR_NONFINITE, "parameter '%s' holds %s at element %zu", p->name,
                                 isnan(p->data[j]) ? "NaN" : "infinity", j);
    }
    return MHA_OK;
}

/* ---- public ------------------------------------------------------------- */

size_t mha_params_count(const mha_params *ps) { return ps ? ps->n : 0; }

int64_t mha_params_scalars(const mha_params *ps) { return ps ? (int64_t)ps->floats : 0; }

mha_status mha_params_get(const mha_params *ps, size_t i, mha_param *out) {
    if (!ps || !out) return mha__fail(MHA_ERR_ARGUMENT, "parameter set or output is NULL");
    if (i >= ps->n)
        return mha__fail(MHA_ERR_ARGUMENT, "parameter index %zu out of range (%zu parameters)", i, ps->n);
    *out = ps->p[i];
    return MHA_OK;
}

/* The index of parameter `name`, or ERR_MISSING. */
static mha_status find(const mha_params *ps, const char *name, size_t *i) {
    if (!ps || !name) return mha__fail(MHA_ERR_ARGUMENT, "parameter set or name is NULL");
    for (*i = 0; *i < ps->n; ++*i)
        if (strcmp(ps->p[*i].name, name) == 0) return MHA_OK;
    return mha__fail(MHA_ERR_MISSING, "%s has no parameter '%.100s'", ps->owner, name);
}

mha_status mha_params_find(const mha_params *ps, const char *name, mha_param *out) {
    size_t i;
    mha_status st = find(ps, name, &i);
    return st != MHA_OK ? st : mha_params_get(ps, i, out);
}

mha_status mha_params_grad(mha_params *ps, size_t i, mha_param *out) {
    mha_status st = mha_params_get(ps, i, out);
    if (st != MHA_OK) return st;
    if (!mha__params_grad(ps)) return MHA_ERR_NOMEM;
    out->data = mha__grad_of(ps, out->data);
    return MHA_OK;
}

mha_status mha_params_find_grad(mha_params *ps, const char *name, mha_param *out) {
    size_t i;
    mha_status st = find(ps, name, &i);
    return st != MHA_OK ? st : mha_params_grad(ps, i, out);
}

mha_status mha_params_zero_grad(mha_params *ps) {
    if (!ps) return mha__fail(MHA_ERR_ARGUMENT, "parameter set is NULL");
    if (!mha__params_grad(ps)) return MHA_ERR_NOMEM;
    memset(ps->grad, 0, ps->floats * sizeof(float));
    return MHA_OK;
}

float *mha_params_grad_buffer(mha_params *ps, size_t *n) {
    if (n) *n = ps ? ps->floats : 0;
    if (!ps) {
        mha__fail(MHA_ERR_ARGUMENT, "parameter set is NULL");
        return NULL;
    }
    return mha__params_grad(ps);
}
