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
 * the result does not depend on how many. AdamW's per-element ops are the
 * kernel table's adamw (kernels/optim_ref.c, and optim_body.h on vectors:
 * the same IEEE ops, the same bits); SGD's are below. */
#include "kernels/kernels.h"
#include "params/params.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

typedef mha_optim_kind opt_kind;
#define OPT_ADAMW MHA_OPTIM_ADAMW
#define OPT_SGD MHA_OPTIM_SGD

static const char *const kind_names[2] = {"AdamW", "SGD"};

/* State tensors, in file order per parameter: "<state>.<parameter>". */
static const char *const adamw_state_names[3] = {"exp_avg.", "exp_avg_sq.", "max_exp_avg_sq."};
static const char *const sgd_state_names[1] = {"momentum_buffer."};
#define MAX_STATES 3

/* Elements per parallel task. */
#define CHUNK 16384

/* PyTorch's step tensor is float32: step_t += 1 stops changing at 2^24. */
#define TORCH_STEP_MAX ((int64_t)1 << 24)

struct mha_optimizer {
    mha_params *ps;            /* what it updates (its owner outlives the optimizer) */
    opt_kind kind;
    mha_adamw_config adamw;
    mha_sgd_config sgd;
    int64_t step;
    size_t n_params;           /* model.parameters(): the set's, a tied head once */
    float *state[MAX_STATES];  /* laid out as the arena. AdamW: exp_avg, exp_avg_sq,
                                  max_exp_avg_sq; SGD: momentum_buffer (momentum != 0) */
    size_t n_chunks;           /* of the arena, CHUNK floats each */
    size_t *bad;               /* per chunk: first non-finite gradient, or SIZE_MAX */
};

/* The parameters that file and step hold (not a tied head's second name). */
static bool stepped(const mha_optimizer *o, size_t i) { return !o->ps->alias[i]; }

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
    mha__free(o->bad);
    mha__free(o);
}

void mha_optimizer_config_init(mha_optimizer_config *c, mha_optim_kind kind) {
    if (!c) return;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    mha_adamw_config_init(&c->adamw);
    mha_sgd_config_init(&c->sgd);
}

mha_status mha_optimizer_create(mha_params *ps, const mha_optimizer_config *c, mha_optimizer **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_create: out is NULL");
    *out = NULL;
    if (!ps || !c) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_create: NULL argument");
    if (c->kind != OPT_ADAMW && c->kind != OPT_SGD)
        return mha__fail(MHA_ERR_CONFIG, "unknown optimizer kind %d", (int)c->kind);
    mha_status s = c->kind == OPT_ADAMW ? adamw_validate(&c->adamw) : sgd_validate(&c->sgd);
    if (s != MHA_OK) return s;
    mha_optimizer *o = mha__calloc_n(1, sizeof *o);
    if (!o) return mha__nomem("out of memory creating the optimizer");
    o->ps = ps;
    o->kind = c->kind;
    o->adamw = c->adamw;
    o->sgd = c->sgd;
    for (size_t i = 0; i < ps->n; i++) o->n_params += stepped(o, i);
    o->n_chunks = (ps->floats + CHUNK - 1) / CHUNK;
    o->bad = mha__calloc_n(o->n_chunks ? o->n_chunks : 1, sizeof *o->bad);
    s = o->bad ? alloc_states(o->state, n_state_arrays(o->kind, &o->adamw, &o->sgd), ps->floats)
               : mha__nomem("out of memory creating the optimizer");
    if (s != MHA_OK) {
        mha_optimizer_free(o);
        return s;
    }
    *out = o;
    return MHA_OK;
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
    float wd, mom, omd, neg_lr;
    bool has_wd, has_mom, nesterov, first, fused;
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

/* f(o, k, at, n, c) over the arena in chunks of CHUNK floats (chunk c
 * from float at, n of them), on OpenMP threads when it is large: every
 * update is elementwise, so the result does not depend on the split. */
typedef void (*chunk_fn)(mha_optimizer *o, const void *k, size_t at, size_t n, size_t c);

static void for_chunks(mha_optimizer *o, chunk_fn f, const void *k) {
    const int nt = mha__max_threads();
    const int64_t nch = (int64_t)o->n_chunks;
    const size_t floats = o->ps->floats;
    (void)nt;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (floats >= 4 * CHUNK)
#endif
    for (int64_t c = 0; c < nch; c++) {
        const size_t at = (size_t)c * CHUNK;
        f(o, k, at, floats - at < CHUNK ? floats - at : CHUNK, (size_t)c);
    }
}

/* A float's exponent bits all set: infinity or NaN. The chunk is first
 * scanned without a branch (a loop the compiler vectorises: the scan reads
 * every gradient each step), and searched only when it holds one. */
static void nonfinite_chunk(mha_optimizer *o, const void *k, size_t at, size_t n, size_t c) {
    (void)k;
    const uint32_t *g = (const uint32_t *)(const void *)(o->ps->grad + at);
    uint32_t any = 0;
    for (size_t j = 0; j < n; j++) any |= (g[j] & 0x7f800000u) == 0x7f800000u;
    o->bad[c] = SIZE_MAX;
    for (size_t j = 0; any && j < n; j++)
        if ((g[j] & 0x7f800000u) == 0x7f800000u) {
            o->bad[c] = j;
            break;
        }
}

/* ERR_NONFINITE naming the first non-finite gradient element in parameter
 * order (the scan is parallel; naming it, on failure only, is not). */
static mha_status check_gradients(mha_optimizer *o) {
    for_chunks(o, nonfinite_chunk, NULL);
    size_t c = 0;
    while (c < o->n_chunks && o->bad[c] == SIZE_MAX) c++;
    if (c == o->n_chunks) return MHA_OK;
    const mha_params *ps = o->ps;
    for (size_t i = 0; i < ps->n; i++) {
        const float *g = mha__grad_of(ps, ps->p[i].data);
        for (size_t j = 0; stepped(o, i) && j < ps->p[i].numel; j++)
            if (!isfinite(g[j]))
                return mha__fail(MHA_ERR_NONFINITE,
                                 "gradient of '%s' holds %s at element %zu; nothing was updated", ps->p[i].name,
                                 isnan(g[j]) ? "NaN" : "infinity", j);
    }
    return mha__fail(MHA_ERR_NONFINITE, "a gradient holds NaN or infinity; nothing was updated");
}

/* The per-element update is the table's adamw kernel (kernels.h: the
 * same bits on every ISA). */
static void adamw_chunk(mha_optimizer *o, const void *kv, size_t at, size_t n, size_t c) {
    (void)c;
    const mha__adamw_args *k = kv;
    float *p = o->ps->arena + at, *vmax = k->amsgrad ? o->state[2] + at : NULL;
    mha__kernels_active()->adamw(k, p, o->ps->grad + at, o->state[0] + at, o->state[1] + at, vmax, n);
}

static void adamw_step(mha_optimizer *o) {
    const mha_adamw_config *c = &o->adamw;
    const int64_t t = o->step + 1 < TORCH_STEP_MAX ? o->step + 1 : TORCH_STEP_MAX;
    const double bc1 = 1.0 - pow(c->beta1, (double)t);
    const double bc2 = 1.0 - pow(c->beta2, (double)t);
    const double step_size = c->lr / bc1;
    const mha__adamw_args k = {
        .decay = (float)(1.0 - c->lr * c->weight_decay),
        .beta1 = (float)c->beta1,
        .omb1 = (float)(1.0 - c->beta1),
        .beta2 = (float)c->beta2,
        .omb2 = (float)(1.0 - c->beta2),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = (float)c->eps,
        .neg_step_size = (float)(-step_size),
        .amsgrad = c->amsgrad != 0,
        .fused = c->variant == MHA_OPTIM_TORCH_AVX2,
    };
    for_chunks(o, adamw_chunk, &k);
}

static void sgd_chunk(mha_optimizer *o, const void *kv, size_t at, size_t n, size_t c) {
    (void)c;
    const sgd_k *k = kv;
    float *p = o->ps->arena + at, *buf = k->has_mom ? o->state[0] + at : NULL;
    const float *g = o->ps->grad + at;
    if (k->fused) sgd_range(true, k, p, g, buf, n);
    else sgd_range(false, k, p, g, buf, n);
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
        .fused = c->variant == MHA_OPTIM_TORCH_AVX2,
    };
    for_chunks(o, sgd_chunk, &k);
}

mha_status mha_optimizer_step(mha_optimizer *o) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!o) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_step: optimizer is NULL");
    if (!mha__params_grad(o->ps)) return MHA_ERR_NOMEM;
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

/* The state tensors of ns arrays as views of the set (not a tied head's
 * second name). */
static mha__param_views state_views(const mha_optimizer *o, int ns, float *const *state) {
    const char *const *names = o->kind == OPT_ADAMW ? adamw_state_names : sgd_state_names;
    return (mha__param_views){(size_t)ns, names, state, false};
}

/* The hyper-parameters a file holds, in file order: the floats, the flag,
 * the variant, pointing into a and s. */
typedef struct {
    int n;
    const char *const *keys;
    double *v[5];
    const char *flag;
    int *flag_v;
    mha_optim_variant *variant;
} hyper_list;

static hyper_list hypers(opt_kind kind, mha_adamw_config *a, mha_sgd_config *s) {
    static const char *const a_keys[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    static const char *const s_keys[4] = {"lr", "momentum", "dampening", "weight_decay"};
    if (kind == OPT_ADAMW)
        return (hyper_list){5, a_keys, {&a->lr, &a->beta1, &a->beta2, &a->eps, &a->weight_decay}, "amsgrad",
                            &a->amsgrad, &a->variant};
    return (hyper_list){4, s_keys, {&s->lr, &s->momentum, &s->dampening, &s->weight_decay}, "nesterov",
                        &s->nesterov, &s->variant};
}

mha_status mha_optimizer_save(const mha_optimizer *o, const char *path) {
    if (!o || !path) return mha__fail(MHA_ERR_ARGUMENT, "mha_optimizer_save: NULL argument");
    const int ns = n_state_tensors(o->kind, &o->adamw, &o->sgd, o->step);
    mha_adamw_config a = o->adamw;
    mha_sgd_config sc = o->sgd;
    const hyper_list h = hypers(o->kind, &a, &sc);
    char num[5][32], v_step[24], v_np[24], v_sc[24];
    const char *meta[26];
    size_t nm = 0;
#define META(k, v) (meta[2 * nm] = (k), meta[2 * nm + 1] = (v), nm++)
    META("optimizer", kind_names[o->kind]);
    for (int k = 0; k < h.n; k++) {
        mha__format_double(num[k], sizeof num[k], *h.v[k]);
        META(h.keys[k], num[k]);
    }
    META(h.flag, *h.flag_v ? "true" : "false");
    META("variant", variant_name(*h.variant));
    snprintf(v_step, sizeof v_step, "%" PRId64, o->step);
    snprintf(v_np, sizeof v_np, "%zu", o->n_params);
    snprintf(v_sc, sizeof v_sc, "%zu", o->ps->floats);
    META("step", v_step);
    META("module", o->ps->owner);
    META("num_params", v_np);
    META("param_scalars", v_sc);
#undef META
    const mha__param_views views = state_views(o, ns, o->state);
    return mha__params_save(o->ps, &views, NULL, 0, meta, nm, path);
}

/* ------------------------------------------------------------------------ */
/* Load                                                                       */
/* ------------------------------------------------------------------------ */

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

/* The hyper-parameters, step and counts of a file meant for o, read by the
 * metadata rule; a missing or bad one is ERR_FORMAT. */
static mha_status read_meta(const mha_optimizer *o, const mha_st *st, mha_adamw_config *a,
                            mha_sgd_config *sc, int64_t *step) {
    const char *opt = mha_st_metadata(st, "optimizer");
    if (!opt)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no 'optimizer' (not an optimizer "
                         "state file)");
    if (strcmp(opt, kind_names[o->kind]) != 0)
        return mha__fail(MHA_ERR_FORMAT, "the file holds a '%.40s' state; this optimizer is %s",
                         opt, kind_names[o->kind]);
    mha_adamw_config_init(a);
    mha_sgd_config_init(sc);
    const hyper_list h = hypers(o->kind, a, sc);
    mha_status s = MHA_OK;
    for (int k = 0; s == MHA_OK && k < h.n; k++) s = mha_st_metadata_double(st, h.keys[k], h.v[k]);
    if (s == MHA_OK) s = mha_st_metadata_bool(st, h.flag, h.flag_v);
    if (s == MHA_OK) s = meta_variant(st, h.variant);
    if (s == MHA_OK && (o->kind == OPT_ADAMW ? adamw_validate(a) : sgd_validate(sc)) != MHA_OK)
        s = invalid_hyper();
    if (s == MHA_OK) s = mha_st_metadata_int(st, "step", 0, INT64_MAX, step);
    if (s != MHA_OK) return s == MHA_ERR_MISSING ? MHA_ERR_FORMAT : s;

    /* the module this state belongs to */
    const char *cls = mha_st_metadata(st, "module");
    const char *mine = o->ps->owner;
    if (!cls) return mha__fail(MHA_ERR_FORMAT, "__metadata__ has no 'module'");
    if (strcmp(cls, mine) != 0)
        return mha__fail(MHA_ERR_FORMAT, "the state is for a %.60s; this optimizer's module is "
                         "a %s", cls, mine);
    int64_t np, sc_n;
    s = mha_st_metadata_int(st, "num_params", 0, INT64_MAX, &np);
    if (s == MHA_OK) s = mha_st_metadata_int(st, "param_scalars", 0, INT64_MAX, &sc_n);
    if (s != MHA_OK) return s == MHA_ERR_MISSING ? MHA_ERR_FORMAT : s;
    if ((uint64_t)np != o->n_params || (uint64_t)sc_n != o->ps->floats)
        return mha__fail(MHA_ERR_SHAPE, "the state is for %" PRId64 " parameters of %" PRId64
                         " values; this optimizer's module has %zu of %zu", np, sc_n,
                         o->n_params, o->ps->floats);
    return MHA_OK;
}

static mha_status load_st(const mha_st *st, void *arg) {
    mha_optimizer *o = arg;
    mha_adamw_config a = o->adamw;
    mha_sgd_config sc = o->sgd;
    int64_t step = 0;
    mha_status s = read_meta(o, st, &a, &sc, &step);
    if (s != MHA_OK) return s;
    const int ns = n_state_tensors(o->kind, &a, &sc, step);
    float *fresh[MAX_STATES];
    s = alloc_states(fresh, n_state_arrays(o->kind, &a, &sc), o->ps->floats);
    if (s != MHA_OK) return s;
    const mha__param_views views = state_views(o, ns, fresh);
    s = mha__params_read(o->ps, &views, st, true, NULL, NULL);
    if (s == MHA_ERR_NONFINITE) s = MHA_ERR_FORMAT; /* the detail names the tensor */
    /* exp_avg_sq and max_exp_avg_sq are sums of squares */
    const mha_params *ps = o->ps;
    for (int k = 1; s == MHA_OK && o->kind == OPT_ADAMW && k < ns; k++)
        for (size_t i = 0; s == MHA_OK && i < ps->n; i++) {
            const float *v = fresh[k] + (ps->p[i].data - ps->arena);
            for (size_t j = 0; s == MHA_OK && stepped(o, i) && j < ps->p[i].numel; j++)
                if (v[j] < 0.0f)
                    s = mha__fail(MHA_ERR_FORMAT,
                                  "tensor '%s%s' holds %g at element %zu (must be finite and >= 0)",
                                  adamw_state_names[k], ps->p[i].name, (double)v[j], j);
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
    return mha__st_load(path, load_st, o);
}
