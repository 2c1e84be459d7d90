/* optim.c — torch.optim.AdamW and torch.optim.SGD, bit for bit torch 1.13.1
 * on the CPU.
 *
 * PyTorch's default path on the CPU is the for-loop implementation
 * (_single_tensor_adamw / _single_tensor_sgd): one in-place tensor op after
 * another, each rounding to float32. Python's scalars are doubles and enter
 * each op as float32 (a wrapped scalar tensor, or alpha/value cast with
 * Scalar::to<float>). Per element that is, for AdamW at step t:
 *
 *   param.mul_(1 - lr * wd)                 p = p * f(1 - lr*wd)
 *   exp_avg.mul_(b1).add_(g, alpha=1 - b1)  m = m * f(b1);  m = m + f(1-b1) * g
 *   exp_avg_sq.mul_(b2)
 *     .addcmul_(g, g, value=1 - b2)         v = v * f(b2);  v = v + (f(1-b2) * g) * g
 *   torch.maximum(vmax, v, out=vmax)        (amsgrad; v below is then vmax)
 *   denom = (v.sqrt() / bc2_sqrt).add_(eps) d = sqrt(v) / f(bc2_sqrt) + f(eps)
 *   param.addcdiv_(m, denom, value=-ss)     p = p + (f(-ss) * m) / d
 *
 * with bc1 = 1 - b1**t, bc2 = 1 - b2**t, ss = lr / bc1, bc2_sqrt =
 * math.sqrt(bc2) in double (CPython's ** is libm's pow, as here), and f()
 * rounding to float32. t is PyTorch's float32 step tensor, so it stops at
 * 2^24. The last "x + a * y" of add_ and addcmul_ is where PyTorch's CPU
 * kernels differ: the AVX2 ones (Vectorized fmadd, and GCC contracting the
 * scalar tails) round once, fmaf; the DEFAULT ones round the product and
 * the sum (mha_optim_variant). Verified against torch element for element
 * in tests/torch_optim_diff.py. This file is built with -ffp-contract=off:
 * every fusion is an explicit fmaf.
 *
 * SGD (_single_tensor_sgd), with the same f():
 *   d_p = d_p.add(param, alpha=wd)          d = d + f(wd) * p      (wd != 0)
 *   buf = clone(d_p) at its first step, else
 *   buf.mul_(mom).add_(d_p, alpha=1 - damp) b = b * f(mom); b = b + f(1-damp) * d
 *   d_p = d_p.add(buf, alpha=mom) (nesterov) or buf   (both when mom != 0)
 *   param.add_(d_p, alpha=-lr)              p = p + f(-lr) * d
 *
 * The update is elementwise: chunks of parameters run on OpenMP threads and
 * the result does not depend on how many. */
#include "common/common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

typedef enum { OPT_ADAMW = 0, OPT_SGD = 1 } opt_kind;

static const char *const kind_names[2] = {"AdamW", "SGD"};

/* State tensors, in file order per parameter. */
static const char *const adamw_state_names[3] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
static const char *const sgd_state_names[1] = {"momentum_buffer"};
#define MAX_STATES 3

/* Elements per parallel task. */
#define CHUNK 16384

/* PyTorch's step tensor is float32: step_t += 1 stops changing at 2^24. */
#define TORCH_STEP_MAX ((int64_t)1 << 24)

typedef struct {
    size_t param;
    size_t begin, end;
} chunk;

struct mha_optimizer {
    mha_module *m;             /* what it updates: a module, */
    mha_gpt *gpt;              /* or a GPTModel / TransformerBlock */
    opt_kind kind;
    mha_adamw_config adamw;
    mha_sgd_config sgd;
    int64_t step;
    size_t n_params, scalars;
    size_t *off;               /* parameter i's offset in the state arrays */
    float *state[MAX_STATES];  /* AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq;
                                  SGD: momentum_buffer (when momentum != 0) */
    chunk *chunks;
    size_t n_chunks;
    float **p, **g;            /* per step: the parameters' data and gradients */
    size_t *bad;               /* per chunk: first non-finite gradient, or SIZE_MAX */
};

/* The parameters it updates: a module's, or a GPT's as model.parameters()
 * lists them (a tied head, the last of mha_gpt_param's list, is tok_emb's
 * tensor and counted once). */
static size_t target_num_params(const mha_module *m, const mha_gpt *g) {
    if (m) return mha_module_num_params(m);
    return mha_gpt_num_params(g) - (mha_gpt_head_tied(g) ? 1 : 0);
}

static mha_status opt_param(const mha_optimizer *o, size_t i, mha_param *p) {
    return o->m ? mha_module_param(o->m, i, p) : mha_gpt_param(o->gpt, i, p);
}

static mha_status opt_grad(mha_optimizer *o, size_t i, mha_param *g) {
    return o->m ? mha_module_grad(o->m, i, g) : mha_gpt_grad(o->gpt, i, g);
}

static bool opt_has_param(const mha_optimizer *o, const char *name) {
    for (size_t i = 0; i < o->n_params; i++) {
        mha_param p;
        if (opt_param(o, i, &p) == MHA_OK && strcmp(p.name, name) == 0) return true;
    }
    return false;
}

/* The class name saved as "module". */
static const char *opt_class(const mha_optimizer *o) {
    const char *c = o->m ? mha_kind_name(mha_module_config(o->m)->kind)
                         : mha_gpt_kind_name(mha_gpt_get_config(o->gpt)->kind);
    return c ? c : "";
}

/* ------------------------------------------------------------------------ */
/* Configurations                                                             */
/* ------------------------------------------------------------------------ */

void mha_adamw_config_init(mha_adamw_config *c) {
    if (!c) return;
    c->lr = 1e-3;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    c->weight_decay = 1e-2;
    c->amsgrad = 0;
    c->variant = MHA_OPTIM_TORCH_AVX2;
}

void mha_sgd_config_init(mha_sgd_config *c) {
    if (!c) return;
    c->lr = NAN;
    c->momentum = 0.0;
    c->dampening = 0.0;
    c->weight_decay = 0.0;
    c->nesterov = 0;
    c->variant = MHA_OPTIM_TORCH_AVX2;
}

/* x finite and >= 0 (NaN fails, as PyTorch's `not 0.0 <= x`). */
static mha_status check_nonneg(const char *opt, const char *field, double x) {
    if (!isfinite(x) || !(x >= 0.0))
        return mha__fail(MHA_ERR_CONFIG, "%s: %s (%g) must be finite and >= 0", opt, field, x);
    return MHA_OK;
}

static mha_status check_flag(const char *opt, const char *field, int x) {
    if (x != 0 && x != 1) return mha__fail(MHA_ERR_CONFIG, "%s: %s (%d) must be 0 or 1", opt, field, x);
    return MHA_OK;
}

static mha_status check_variant(const char *opt, mha_optim_variant v) {
    if (v != MHA_OPTIM_TORCH_AVX2 && v != MHA_OPTIM_TORCH_DEFAULT)
        return mha__fail(MHA_ERR_CONFIG, "%s: unknown variant %d", opt, (int)v);
    return MHA_OK;
}

static mha_status adamw_validate(const mha_adamw_config *c) {
    mha_status s = check_nonneg("AdamW", "lr", c->lr);
    if (s == MHA_OK) s = check_nonneg("AdamW", "eps", c->eps);
    if (s != MHA_OK) return s;
    if (!(c->beta1 >= 0.0 && c->beta1 < 1.0))
        return mha__fail(MHA_ERR_CONFIG, "AdamW: beta1 (%g) must be in [0, 1)", c->beta1);
    if (!(c->beta2 >= 0.0 && c->beta2 < 1.0))
        return mha__fail(MHA_ERR_CONFIG, "AdamW: beta2 (%g) must be in [0, 1)", c->beta2);
    s = check_nonneg("AdamW", "weight_decay", c->weight_decay);
    if (s == MHA_OK) s = check_flag("AdamW", "amsgrad", c->amsgrad);
    if (s == MHA_OK) s = check_variant("AdamW", c->variant);
    return s;
}

static mha_status sgd_validate(const mha_sgd_config *c) {
    if (isnan(c->lr))
        return mha__fail(MHA_ERR_CONFIG, "SGD: lr is not set (NaN); SGD has no default "
                         "learning rate");
    mha_status s = check_nonneg("SGD", "lr", c->lr);
    if (s == MHA_OK) s = check_nonneg("SGD", "momentum", c->momentum);
    if (s == MHA_OK) s = check_nonneg("SGD", "weight_decay", c->weight_decay);
    if (s != MHA_OK) return s;
    if (!isfinite(c->dampening))
        return mha__fail(MHA_ERR_CONFIG, "SGD: dampening (%g) must be finite", c->dampening);
    s = check_flag("SGD", "nesterov", c->nesterov);
    if (s == MHA_OK && c->nesterov && (c->momentum <= 0.0 || c->dampening != 0.0))
        return mha__fail(MHA_ERR_CONFIG, "SGD: nesterov needs momentum > 0 (%g) and dampening "
                         "0 (%g)", c->momentum, c->dampening);
    if (s == MHA_OK) s = check_variant("SGD", c->variant);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Creation                                                                   */
/* ------------------------------------------------------------------------ */

/* State arrays the configuration keeps (allocated), and state tensors a
 * saved file holds at step `step` (SGD's momentum buffers exist from the
 * first step on). */
static int n_state_arrays(opt_kind k, const mha_adamw_config *a, const mha_sgd_config *s) {
    if (k == OPT_ADAMW) return a->amsgrad ? 3 : 2;
    return s->momentum != 0.0 ? 1 : 0;
}

static int n_state_tensors(opt_kind k, const mha_adamw_config *a, const mha_sgd_config *s,
                           int64_t step) {
    if (k == OPT_SGD && step == 0) return 0;
    return n_state_arrays(k, a, s);
}

static const char *state_name(opt_kind k, int i) {
    return k == OPT_ADAMW ? adamw_state_names[i] : sgd_state_names[i];
}

static void free_states(float *st[MAX_STATES]) {
    for (int i = 0; i < MAX_STATES; i++) {
        mha__free(st[i]);
        st[i] = NULL;
    }
}

/* n zeroed state arrays of `scalars` floats each. */
static mha_status alloc_states(float *st[MAX_STATES], int n, size_t scalars) {
    for (int i = 0; i < MAX_STATES; i++) st[i] = NULL;
    size_t bytes;
    if (!mha__mul_size(scalars, sizeof(float), &bytes))
        return mha__fail(MHA_ERR_OVERFLOW, "optimizer state of %zu floats is too large", scalars);
    for (int i = 0; i < n; i++) {
        st[i] = mha__calloc(bytes);
        if (!st[i]) {
            free_states(st);
            return mha__nomem("out of memory for the optimizer state (%zu floats)",
                             scalars);
        }
    }
    return MHA_OK;
}

void mha_optimizer_free(mha_optimizer *o) {
    if (!o) return;
    free_states(o->state);
    mha__free(o->off);
    mha__free(o->chunks);
    mha__free(o->p);
    mha__free(o->g);
    mha__free(o->bad);
    mha__free(o);
}

static mha_status create(mha_module *m, mha_gpt *gpt, opt_kind kind, const mha_adamw_config *a,
                         const mha_sgd_config *sc, mha_optimizer **out) {
    const size_t np = target_num_params(m, gpt);
    mha_optimizer *o = mha__calloc_n(1, sizeof *o);
    if (!o) return mha__nomem("out of memory creating the optimizer");
    o->m = m;
    o->gpt = gpt;
    o->kind = kind;
    if (a) o->adamw = *a;
    if (sc) o->sgd = *sc;
    o->n_params = np;
    const size_t cap = np ? np : 1;
    o->off = mha__calloc_n(cap, sizeof *o->off);
    o->p = mha__calloc_n(cap, sizeof *o->p);
    o->g = mha__calloc_n(cap, sizeof *o->g);
    mha_status s = MHA_OK;
    if (!o->off || !o->p || !o->g) {
        s = mha__nomem("out of memory creating the optimizer");
        goto fail;
    }
    /* offsets and the chunk count */
    size_t total = 0, nch = 0;
    for (size_t i = 0; i < np; i++) {
        mha_param p;
        s = opt_param(o, i, &p);
        if (s != MHA_OK) goto fail;
        o->off[i] = total;
        if (!mha__add_size(total, p.numel, &total)) {
            s = mha__fail(MHA_ERR_OVERFLOW, "module too large for an optimizer");
            goto fail;
        }
        nch += (p.numel + CHUNK - 1) / CHUNK;
    }
    o->scalars = total;
    o->n_chunks = nch;
    o->chunks = mha__calloc_n(nch ? nch : 1, sizeof *o->chunks);
    o->bad = mha__calloc_n(nch ? nch : 1, sizeof *o->bad);
    if (!o->chunks || !o->bad) {
        s = mha__nomem("out of memory creating the optimizer");
        goto fail;
    }
    nch = 0;
    for (size_t i = 0; i < np; i++) {
        mha_param p;
        s = opt_param(o, i, &p);
        if (s != MHA_OK) goto fail;
        for (size_t b = 0; b < p.numel; b += CHUNK)
            o->chunks[nch++] = (chunk){i, b, p.numel - b < CHUNK ? p.numel : b + CHUNK};
    }
    s = alloc_states(o->state, n_state_arrays(kind, &o->adamw, &o->sgd), total);
    if (s != MHA_OK) goto fail;
    *out = o;
    return MHA_OK;
fail:
    mha_optimizer_free(o);
    return s;
}

/* The public constructors' shared checks: fn names the entry point in the
 * error messages; exactly one of m, g and one of ac, sc is meant to be set. */
static mha_status create_checked(const char *fn, mha_module *m, mha_gpt *g, opt_kind kind,
                                 const mha_adamw_config *ac, const mha_sgd_config *sc,
                                 mha_optimizer **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if ((!m && !g) || (!ac && !sc)) return mha__fail(MHA_ERR_ARGUMENT, "%s: NULL argument", fn);
    mha_status s = kind == OPT_ADAMW ? adamw_validate(ac) : sgd_validate(sc);
    if (s != MHA_OK) return s;
    return create(m, g, kind, ac, sc, out);
}

mha_status mha_optimizer_create_adamw(mha_module *m, const mha_adamw_config *c,
                                      mha_optimizer **out) {
    return create_checked("mha_optimizer_create_adamw", m, NULL, OPT_ADAMW, c, NULL, out);
}

mha_status mha_optimizer_create_adamw_gpt(mha_gpt *m, const mha_adamw_config *c, mha_optimizer **out) {
    return create_checked("mha_optimizer_create_adamw_gpt", NULL, m, OPT_ADAMW, c, NULL, out);
}

mha_status mha_optimizer_create_sgd(mha_module *m, const mha_sgd_config *c,
                                    mha_optimizer **out) {
    return create_checked("mha_optimizer_create_sgd", m, NULL, OPT_SGD, NULL, c, out);
}

mha_status mha_optimizer_create_sgd_gpt(mha_gpt *m, const mha_sgd_config *c, mha_optimizer **out) {
    return create_checked("mha_optimizer_create_sgd_gpt", NULL, m, OPT_SGD, NULL, c, out);
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                  */
/* ------------------------------------------------------------------------ */

int64_t mha_optimizer_step_count(const mha_optimizer *o) { return o ? o->step : 0; }

const char *mha_optimizer_name(const mha_optimizer *o) { return o ? kind_names[o->kind] : NULL; }

double mha_optimizer_lr(const mha_optimizer *o) {
    if (!o) return NAN;
    return o->kind == OPT_ADAMW ? o->adamw.lr : o->sgd.lr;
}

mha_status mha_optimizer_set_lr(mha_optimizer *o, double lr) {
    if (!o) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_set_lr: optimizer is NULL");
    mha_status s = check_nonneg(kind_names[o->kind], "lr", lr);
    if (s != MHA_OK) return s;
    if (o->kind == OPT_ADAMW) o->adamw.lr = lr;
    else o->sgd.lr = lr;
    return MHA_OK;
}

mha_status mha_optimizer_adamw_config(const mha_optimizer *o, mha_adamw_config *out) {
    if (!o || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_adamw_config: NULL argument");
    if (o->kind != OPT_ADAMW)
        return mha__fail(MHA_ERR_ARGUMENT, "the optimizer is %s, not AdamW", kind_names[o->kind]);
    *out = o->adamw;
    return MHA_OK;
}

mha_status mha_optimizer_sgd_config(const mha_optimizer *o, mha_sgd_config *out) {
    if (!o || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_sgd_config: NULL argument");
    if (o->kind != OPT_SGD)
        return mha__fail(MHA_ERR_ARGUMENT, "the optimizer is %s, not SGD", kind_names[o->kind]);
    *out = o->sgd;
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Step                                                                       */
/* ------------------------------------------------------------------------ */

/* b + a * x rounded as PyTorch's kernel of the variant rounds it. */
static inline float madd(bool fused, float a, float x, float b) {
    return fused ? fmaf(a, x, b) : b + a * x;
}

typedef struct {
    float decay, beta1, omb1, beta2, omb2, bc2_sqrt, eps, neg_step_size;
    bool amsgrad;
} adamw_k;

static inline void adamw_range(bool fused, const adamw_k *k, float *restrict p,
                               const float *restrict g, float *restrict m, float *restrict v,
                               float *restrict vmax, size_t n) {
    for (size_t j = 0; j < n; j++) {
        const float gj = g[j];
        const float pj = p[j] * k->decay;
        const float mj = madd(fused, k->omb1, gj, m[j] * k->beta1);
        float vj = madd(fused, k->omb2 * gj, gj, v[j] * k->beta2);
        m[j] = mj;
        v[j] = vj;
        if (k->amsgrad) {
            /* torch.maximum; both finite here */
            if (vmax[j] > vj) vj = vmax[j];
            vmax[j] = vj;
        }
        const float denom = sqrtf(vj) / k->bc2_sqrt + k->eps;
        p[j] = pj + (k->neg_step_size * mj) / denom;
    }
}

typedef struct {
    float wd, mom, omd, neg_lr;
    bool has_wd, has_mom, nesterov, first;
} sgd_k;

static inline void sgd_range(bool fused, const sgd_k *k, float *restrict p,
                             const float *restrict g, float *restrict buf, size_t n) {
    for (size_t j = 0; j < n; j++) {
        float d = g[j];
        if (k->has_wd) d = madd(fused, k->wd, p[j], d);
        if (k->has_mom) {
            const float b = k->first ? d : madd(fused, k->omd, d, buf[j] * k->mom);
            buf[j] = b;
            d = k->nesterov ? madd(fused, k->mom, b, d) : b;
        }
        p[j] = madd(fused, k->neg_lr, d, p[j]);
    }
}

/* The first non-finite gradient element (parallel over chunks, reported in
 * parameter order). */
static mha_status check_gradients(mha_optimizer *o) {
    const int nt = mha__max_threads();
    const int64_t nch = (int64_t)o->n_chunks;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (o->scalars >= 4 * CHUNK)
#endif
    for (int64_t c = 0; c < nch; c++) {
        const chunk *ch = &o->chunks[c];
        const float *g = o->g[ch->param];
        size_t bad = SIZE_MAX;
        for (size_t j = ch->begin; j < ch->end; j++)
            if (!isfinite(g[j])) {
                bad = j;
                break;
            }
        o->bad[c] = bad;
    }
    (void)nt;
    for (size_t c = 0; c < o->n_chunks; c++)
        if (o->bad[c] != SIZE_MAX) {
            mha_param p;
            opt_param(o, o->chunks[c].param, &p);
            const float x = o->g[o->chunks[c].param][o->bad[c]];
            return mha__fail(MHA_ERR_NONFINITE, "gradient of '%s' holds %s at element %zu; "
                             "nothing was updated", p.name, isnan(x) ? "NaN" : "infinity",
                             o->bad[c]);
        }
    return MHA_OK;
}

static void adamw_step(mha_optimizer *o) {
    const mha_adamw_config *c = &o->adamw;
    const int64_t t = o->step + 1 < TORCH_STEP_MAX ? o->step + 1 : TORCH_STEP_MAX;
    const double bc1 = 1.0 - pow(c->beta1, (double)t);
    const double bc2 = 1.0 - pow(c->beta2, (double)t);
    const double step_size = c->lr / bc1;
    const adamw_k k = {
        .decay = (float)(1.0 - c->lr * c->weight_decay),
        .beta1 = (float)c->beta1,
        .omb1 = (float)(1.0 - c->beta1),
        .beta2 = (float)c->beta2,
        .omb2 = (float)(1.0 - c->beta2),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = (float)c->eps,
        .neg_step_size = (float)(-step_size),
        .amsgrad = c->amsgrad != 0,
    };
    const bool fused = c->variant == MHA_OPTIM_TORCH_AVX2;
    const int64_t nch = (int64_t)o->n_chunks;
    const int nt = mha__max_threads();
    (void)nt;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (o->scalars >= 4 * CHUNK)
#endif
    for (int64_t ci = 0; ci < nch; ci++) {
        const chunk *ch = &o->chunks[ci];
        const size_t at = o->off[ch->param] + ch->begin, n = ch->end - ch->begin;
        float *p = o->p[ch->param] + ch->begin;
        const float *g = o->g[ch->param] + ch->begin;
        float *vmax = k.amsgrad ? o->state[2] + at : NULL;
        if (fused) adamw_range(true, &k, p, g, o->state[0] + at, o->state[1] + at, vmax, n);
        else adamw_range(false, &k, p, g, o->state[0] + at, o->state[1] + at, vmax, n);
    }
}

static void sgd_step(mha_optimizer *o) {
    const mha_sgd_config *c = &o->sgd;
    const sgd_k k = {
        .wd = (float)c->weight_decay,
        .mom = (float)c->momentum,
        .omd = (float)(1.0 - c->dampening),
        .neg_lr = (float)(-c->lr),
        .has_wd = c->weight_decay != 0.0,
        .has_mom = c->momentum != 0.0,
        .nesterov = c->nesterov != 0,
        .first = o->step == 0,
    };
    const bool fused = c->variant == MHA_OPTIM_TORCH_AVX2;
    const int64_t nch = (int64_t)o->n_chunks;
    const int nt = mha__max_threads();
    (void)nt;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (o->scalars >= 4 * CHUNK)
#endif
    for (int64_t ci = 0; ci < nch; ci++) {
        const chunk *ch = &o->chunks[ci];
        const size_t at = o->off[ch->param] + ch->begin, n = ch->end - ch->begin;
        float *p = o->p[ch->param] + ch->begin;
        const float *g = o->g[ch->param] + ch->begin;
        float *buf = k.has_mom ? o->state[0] + at : NULL;
        if (fused) sgd_range(true, &k, p, g, buf, n);
        else sgd_range(false, &k, p, g, buf, n);
    }
}

mha_status mha_optimizer_step(mha_optimizer *o) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!o) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_step: optimizer is NULL");
    for (size_t i = 0; i < o->n_params; i++) {
        mha_param p, g;
        mha_status s = opt_param(o, i, &p);
        if (s == MHA_OK) s = opt_grad(o, i, &g);
        if (s != MHA_OK) return s;
        o->p[i] = p.data;
        o->g[i] = g.data;
    }
    mha_status s = check_gradients(o);
    if (s != MHA_OK) return s;
    if (o->kind == OPT_ADAMW) adamw_step(o);
    else sgd_step(o);
    if (o->step < INT64_MAX) o->step++;
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Save                                                                       */
/* ------------------------------------------------------------------------ */

static const char *variant_name(mha_optim_variant v) {
    return v == MHA_OPTIM_TORCH_DEFAULT ? "default" : "avx2";
}

/* "<state>.<param>" */
static char *join_name(const char *state, const char *param) {
    const size_t a = strlen(state), b = strlen(param);
    char *s = mha__alloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, state, a);
    s[a] = '.';
    memcpy(s + a + 1, param, b + 1);
    return s;
}

mha_status mha_optimizer_save(const mha_optimizer *o, const char *path) {
    if (!o || !path) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_save: NULL argument");
    const int ns = n_state_tensors(o->kind, &o->adamw, &o->sgd, o->step);
    char v_lr[32], v_a[32], v_b[32], v_c[32], v_wd[32], v_step[24], v_np[24], v_sc[24];
    const char *meta[26];
    size_t nm = 0;
#define META(k, v) (meta[2 * nm] = (k), meta[2 * nm + 1] = (v), nm++)
    META("optimizer", kind_names[o->kind]);
    if (o->kind == OPT_ADAMW) {
        const mha_adamw_config *c = &o->adamw;
        mha__format_double(v_lr, sizeof v_lr, c->lr);
        mha__format_double(v_a, sizeof v_a, c->beta1);
        mha__format_double(v_b, sizeof v_b, c->beta2);
        mha__format_double(v_c, sizeof v_c, c->eps);
        mha__format_double(v_wd, sizeof v_wd, c->weight_decay);
        META("lr", v_lr);
        META("beta1", v_a);
        META("beta2", v_b);
        META("eps", v_c);
        META("weight_decay", v_wd);
        META("amsgrad", c->amsgrad ? "true" : "false");
        META("variant", variant_name(c->variant));
    } else {
        const mha_sgd_config *c = &o->sgd;
        mha__format_double(v_lr, sizeof v_lr, c->lr);
        mha__format_double(v_a, sizeof v_a, c->momentum);
        mha__format_double(v_b, sizeof v_b, c->dampening);
        mha__format_double(v_wd, sizeof v_wd, c->weight_decay);
        META("lr", v_lr);
        META("momentum", v_a);
        META("dampening", v_b);
        META("weight_decay", v_wd);
        META("nesterov", c->nesterov ? "true" : "false");
        META("variant", variant_name(c->variant));
    }
    snprintf(v_step, sizeof v_step, "%" PRId64, o->step);
    snprintf(v_np, sizeof v_np, "%zu", o->n_params);
    snprintf(v_sc, sizeof v_sc, "%zu", o->scalars);
    META("step", v_step);
    META("module", opt_class(o));
    META("num_params", v_np);
    META("param_scalars", v_sc);
#undef META

    size_t ne = 0, cap = o->n_params * (size_t)ns;
    mha_st_entry *ents = mha__calloc_n(cap ? cap : 1, sizeof *ents);
    char **names = mha__calloc_n(cap ? cap : 1, sizeof *names);
    mha_param *params = mha__calloc_n(o->n_params ? o->n_params : 1, sizeof *params);
    mha_status s = MHA_OK;
    if (!ents || !names || !params) {
        s = mha__nomem("out of memory saving the optimizer");
        goto out;
    }
    for (size_t i = 0; i < o->n_params && s == MHA_OK; i++) {
        s = opt_param(o, i, &params[i]);
        for (int k = 0; k < ns && s == MHA_OK; k++) {
            names[ne] = join_name(state_name(o->kind, k), params[i].name);
            if (!names[ne]) {
                s = mha__nomem("out of memory saving the optimizer");
                break;
            }
            ents[ne] = (mha_st_entry){names[ne], MHA_DTYPE_F32, params[i].ndim, params[i].shape,
                                      o->state[k] + o->off[i]};
            ne++;
        }
    }
    if (s == MHA_OK) s = mha_st_write_file(path, ents, ne, meta, nm);
out:
    for (size_t i = 0; names && i < ne; i++) mha__free(names[i]);
    mha__free(names);
    mha__free(ents);
    mha__free(params);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Load                                                                       */
/* ------------------------------------------------------------------------ */

static mha_status meta_double(const mha_st *st, const char *key, double *out) {
    const char *v = mha_st_metadata(st, key);
    if (!v) return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no '%s'", key);
    if (!mha__parse_double(v, out))
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ '%s' = '%.60s' is not a finite number",
                         key, v);
    return MHA_OK;
}

static mha_status meta_flag(const mha_st *st, const char *key, int *out) {
    const char *v = mha_st_metadata(st, key);
    if (!v) return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no '%s'", key);
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) *out = 1;
    else if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) *out = 0;
    else
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ '%s' = '%.60s' is not a boolean", key, v);
    return MHA_OK;
}

/* Strictly decimal digits, within int64 / size_t. */
static mha_status meta_count(const mha_st *st, const char *key, uint64_t max, uint64_t *out) {
    const char *v = mha_st_metadata(st, key);
    if (!v) return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no '%s'", key);
    uint64_t x = 0;
    bool ok = v[0] != '\0';
    for (const char *p = v; ok && *p; p++) {
        ok = *p >= '0' && *p <= '9' && !__builtin_mul_overflow(x, 10, &x) &&
             !__builtin_add_overflow(x, (uint64_t)(*p - '0'), &x) && x <= max;
    }
    if (!ok)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ '%s' = '%.60s' is not a decimal integer "
                         "in [0, %" PRIu64 "]", key, v, max);
    *out = x;
    return MHA_OK;
}

static mha_status meta_variant(const mha_st *st, mha_optim_variant *out) {
    const char *v = mha_st_metadata(st, "variant");
    if (!v || !strcmp(v, "avx2")) *out = MHA_OPTIM_TORCH_AVX2;
    else if (!strcmp(v, "default")) *out = MHA_OPTIM_TORCH_DEFAULT;
    else
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ 'variant' = '%.60s' is not avx2 or "
                         "default", v);
    return MHA_OK;
}

/* ERR_FORMAT, the validation's detail kept (copied: mha__fail's format
 * must not read the buffer it writes). */
static mha_status invalid_hyper(void) {
    char detail[300];
    snprintf(detail, sizeof detail, "%s", mha_last_error());
    return mha__fail(MHA_ERR_FORMAT, "invalid hyper-parameters: %s", detail);
}

/* The hyper-parameters and step of a file meant for o. */
static mha_status read_meta(const mha_optimizer *o, const mha_st *st, mha_adamw_config *a,
                            mha_sgd_config *sc, int64_t *step) {
    const char *opt = mha_st_metadata(st, "optimizer");
    if (!opt)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no 'optimizer' (not an optimizer "
                         "state file)");
    if (strcmp(opt, kind_names[o->kind]) != 0)
        return mha__fail(MHA_ERR_FORMAT, "the file holds a '%.40s' state; this optimizer is %s",
                         opt, kind_names[o->kind]);
    mha_status s;
    if (o->kind == OPT_ADAMW) {
        mha_adamw_config_init(a);
        s = meta_double(st, "lr", &a->lr);
        if (s == MHA_OK) s = meta_double(st, "beta1", &a->beta1);
        if (s == MHA_OK) s = meta_double(st, "beta2", &a->beta2);
        if (s == MHA_OK) s = meta_double(st, "eps", &a->eps);
        if (s == MHA_OK) s = meta_double(st, "weight_decay", &a->weight_decay);
        if (s == MHA_OK) s = meta_flag(st, "amsgrad", &a->amsgrad);
        if (s == MHA_OK) s = meta_variant(st, &a->variant);
        if (s == MHA_OK && adamw_validate(a) != MHA_OK) s = invalid_hyper();
    } else {
        mha_sgd_config_init(sc);
        s = meta_double(st, "lr", &sc->lr);
        if (s == MHA_OK) s = meta_double(st, "momentum", &sc->momentum);
        if (s == MHA_OK) s = meta_double(st, "dampening", &sc->dampening);
        if (s == MHA_OK) s = meta_double(st, "weight_decay", &sc->weight_decay);
        if (s == MHA_OK) s = meta_flag(st, "nesterov", &sc->nesterov);
        if (s == MHA_OK) s = meta_variant(st, &sc->variant);
        if (s == MHA_OK && sgd_validate(sc) != MHA_OK) s = invalid_hyper();
    }
    uint64_t u;
    if (s == MHA_OK) s = meta_count(st, "step", (uint64_t)INT64_MAX, &u);
    if (s != MHA_OK) return s;
    *step = (int64_t)u;

    /* the module this state belongs to */
    const char *cls = mha_st_metadata(st, "module");
    const char *mine = opt_class(o);
    if (!cls) return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no 'module'");
    if (strcmp(cls, mine) != 0)
        return mha__fail(MHA_ERR_FORMAT, "the state is for a %.60s; this optimizer's module is "
                         "a %s", cls, mine);
    uint64_t np, sc_n;
    s = meta_count(st, "num_params", SIZE_MAX, &np);
    if (s == MHA_OK) s = meta_count(st, "param_scalars", SIZE_MAX, &sc_n);
    if (s != MHA_OK) return s;
    if (np != o->n_params || sc_n != o->scalars)
        return mha__fail(MHA_ERR_SHAPE, "the state is for %" PRIu64 " parameters of %" PRIu64
                         " values; this optimizer's module has %zu of %zu", np, sc_n,
                         o->n_params, o->scalars);
    return MHA_OK;
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

/* Copies state tensor `k` of parameter p from the file into dst. */
static mha_status read_state(opt_kind kind, int k, const mha_st *st, const mha_param *p,
                             float *dst) {
    char *name = join_name(state_name(kind, k), p->name);
    if (!name) return mha__nomem("out of memory loading the optimizer");
    mha_st_tensor t;
    mha_status s = MHA_OK;
    char want[64], got[64 * 2];
    if (mha_st_find(st, name, &t) != MHA_OK) {
        s = mha__fail(MHA_ERR_MISSING, "missing tensor '%s'", name);
    } else if (t.dtype != MHA_DTYPE_F32) {
        s = mha__fail(MHA_ERR_DTYPE, "tensor '%s' has dtype %s; optimizer state is F32", name,
                      mha_dtype_name(t.dtype));
    } else {
        bool same = t.ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t.shape[d] == p->shape[d];
        if (!same) {
            shape_str(got, sizeof got, t.ndim, t.shape);
            shape_str(want, sizeof want, p->ndim, p->shape);
            s = mha__fail(MHA_ERR_SHAPE, "tensor '%s' has shape %s, expected %s", name, got,
                          want);
        }
    }
    if (s == MHA_OK) s = mha_st_tensor_to_f32(&t, dst, p->numel);
    /* exp_avg_sq and max_exp_avg_sq are sums of squares */
    const bool nonneg = kind == OPT_ADAMW && k >= 1;
    for (size_t j = 0; s == MHA_OK && j < p->numel; j++)
        if (!isfinite(dst[j]) || (nonneg && dst[j] < 0.0f))
            s = mha__fail(MHA_ERR_FORMAT, "tensor '%s' holds %g at element %zu%s", name,
                          (double)dst[j], j, nonneg ? " (must be finite and >= 0)" : " (must be finite)");
    mha__free(name);
    return s;
}

static mha_status load_st(mha_optimizer *o, const mha_st *st) {
    mha_adamw_config a = o->adamw;
    mha_sgd_config sc = o->sgd;
    int64_t step = 0;
    mha_status s = read_meta(o, st, &a, &sc, &step);
    if (s != MHA_OK) return s;
    const int ns = n_state_tensors(o->kind, &a, &sc, step);
    float *fresh[MAX_STATES];
    s = alloc_states(fresh, n_state_arrays(o->kind, &a, &sc), o->scalars);
    if (s != MHA_OK) return s;
    for (size_t i = 0; i < o->n_params && s == MHA_OK; i++) {
        mha_param p;
        s = opt_param(o, i, &p);
        for (int k = 0; k < ns && s == MHA_OK; k++)
            s = read_state(o->kind, k, st, &p, fresh[k] + o->off[i]);
    }
    /* every tensor was one of those: anything more has no place */
    if (s == MHA_OK && mha_st_count(st) != o->n_params * (size_t)ns) {
        for (size_t i = 0; i < mha_st_count(st) && s == MHA_OK; i++) {
            mha_st_tensor t;
            s = mha_st_get(st, i, &t);
            if (s != MHA_OK) break;
            const char *dot = strchr(t.name, '.');
            int k = -1;
            for (int j = 0; dot && j < ns; j++)
                if (strlen(state_name(o->kind, j)) == (size_t)(dot - t.name) &&
                    !strncmp(t.name, state_name(o->kind, j), (size_t)(dot - t.name)))
                    k = j;
            if (k < 0 || !opt_has_param(o, dot + 1))
                s = mha__fail(MHA_ERR_MISSING, "unexpected tensor '%s'", t.name);
        }
        if (s == MHA_OK) s = mha__fail(MHA_ERR_MISSING, "unexpected tensors");
    }
    if (s != MHA_OK) {
        free_states(fresh);
        return s;
    }
    free_states(o->state);
    memcpy(o->state, fresh, sizeof fresh);
    o->adamw = a;
    o->sgd = sc;
    o->step = step;
    return MHA_OK;
}

mha_status mha_optimizer_load(mha_optimizer *o, const char *path) {
    if (!o || !path) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_load: NULL argument");
    mha_st *st = NULL;
    mha_status s = mha_st_read_file(path, &st);
    if (s == MHA_OK) {
        s = load_st(o, st);
        mha_st_free(st);
    }
    if (s != MHA_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "%s", mha_last_error());
        return mha__fail(s, "%s: %s", path, detail);
    }
    return MHA_OK;
}
