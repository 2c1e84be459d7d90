/* backward.c — training for the book's modules: the forward that records a
 * tape, and the backward that replays it into gradients.
 *
 * The chain, for a row block of x (B*T rows):
 *   qkv = x W_qkv^T + b_qkv            (x @ W for v1)
 *   ctx = attention(qkv)               (per head; dropout on the weights)
 *   y   = ctx W_out^T + b_out          (MultiHeadAttention; else y = ctx)
 * backward:
 *   dctx = dy W_out;  gW_out += dy^T ctx;  gb_out += colsum(dy)
 *   dqkv = attention backward(qkv, ctx, stats, mask, dctx)
 *   gW_qkv += dqkv^T x;  gb_qkv += colsum(dqkv);  dx = dqkv W_qkv
 * Every GEMM goes through mha__sgemm (tiles fixed by the shape) and every
 * column sum runs rows in order, so gradients do not depend on the thread
 * count. */
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

struct mha_tape {
    uint64_t id;         /* the parameter set it was recorded for; 0: empty */
    int64_t B, T;
    mha_forward_opts opts; /* training, rng, Philox seed and offset */
    float *qkv;          /* (B*T, P) */
    float *ctx;          /* (B*T, W) the attention's output */
    float *stats;        /* (B*H*T, 2) the attention rows' (m, log l) */
    uint64_t *bits;      /* TORCH mask, or NULL */
    void *buf;           /* one allocation holding the above */
    size_t cap, used;
};

mha_status mha_tape_create(mha_tape **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "output pointer is NULL");
    *out = mha__calloc(sizeof **out);
    return *out ? MHA_OK : mha__nomem("out of memory creating a tape");
}

void mha_tape_free(mha_tape *t) {
    if (!t) return;
    mha__free(t->buf);
    mha__free(t);
}

size_t mha_tape_bytes(const mha_tape *t) { return t ? t->cap : 0; }

/* Carves the tape for (B, T) under desc d; false on overflow or no memory
 * (the failure recorded). */
static mha_status tape_reserve(mha_tape *t, const mha_module *m, const mha__attention_desc *d) {
    const size_t rows = (size_t)d->B * (size_t)d->T;
    size_t qkv, ctx, lse, bits = 0, total;
    if (!mha__mul_size(rows, (size_t)m->P * sizeof(float), &qkv) ||
        !mha__mul_size(rows, (size_t)m->W * sizeof(float), &ctx) ||
        !mha__mul_size(rows, (size_t)m->H * 2 * sizeof(float), &lse))
        return mha__fail(MHA_ERR_OVERFLOW, "tape size overflows");
    if (d->dropout == MHA_DROPOUT_TORCH) {
        const size_t words = mha__attention_keep_words(d);
        if (words == 0 || !mha__mul_size(words, sizeof(uint64_t), &bits))
            return mha__fail(MHA_ERR_OVERFLOW, "dropout mask size overflows");
    }
    const size_t o_ctx = mha__align64(qkv), o_lse = o_ctx + mha__align64(ctx);
    const size_t o_bits = o_lse + mha__align64(lse);
    if (o_lse < o_ctx || o_bits < o_lse || !mha__add_size(o_bits, bits, &total))
        return mha__fail(MHA_ERR_OVERFLOW, "tape size overflows");
    mha_status st = mha__grow(&t->buf, &t->cap, total, "the tape");
    if (st != MHA_OK) return st;
    char *b = t->buf;
    t->qkv = (float *)(void *)b;
    t->ctx = (float *)(void *)(b + o_ctx);
    t->stats = (float *)(void *)(b + o_lse);
    t->bits = bits ? (uint64_t *)(void *)(b + o_bits) : NULL;
    t->used = total;
    return MHA_OK;
}

mha_status mha_module_forward_tape(mha_module *m, float *y, const float *x, int64_t B, int64_t T,
                                   const mha_forward_opts *opts, mha_tape *tape, void *workspace,
                                   size_t workspace_size) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!tape) return mha__fail(MHA_ERR_ARGUMENT, "tape is NULL");
    tape->id = 0;
    mha_status st = mha__module_check_forward(m, y, x, B, T, opts);
    if (st != MHA_OK) return st;
    mha__attention_desc d;
    mha__module_attention_desc(m, &d, B, T, opts);
    if ((st = tape_reserve(tape, m, &d)) != MHA_OK) return st;
    d.keep_bits = tape->bits;
    const size_t need = mha__attention_workspace(&d);
    if (need == 0) return mha__fail(MHA_ERR_OVERFLOW, "attention workspace size overflows");
    if ((st = mha__module_workspace(m, need, &workspace, &workspace_size, "forward")) != MHA_OK)
        return st;

    if ((st = mha__module_project(m, tape->qkv, x, B, T)) != MHA_OK) return st;
    d.qkv = tape->qkv;
    d.o = tape->ctx;
    d.ldo = m->W;
    d.stats = tape->stats;
    if ((st = mha__attention_forward(&d, workspace, workspace_size)) != MHA_OK) return st;

    const int64_t rows = B * T;
    if (m->cfg.kind == MHA_MULTI_HEAD_ATTENTION) {
        if ((st = mha__module_out_proj(m, y, tape->ctx, m->W, rows)) != MHA_OK) return st;
    } else
        memcpy(y, tape->ctx, (size_t)rows * (size_t)m->W * sizeof(float));

    tape->id = m->params.id;
    tape->B = B;
    tape->T = T;
    if (opts) tape->opts = *opts;
    else memset(&tape->opts, 0, sizeof tape->opts);
    tape->opts.lse = NULL;
    tape->opts.generator = NULL; /* the mask is in the bits */
    return MHA_OK;
}

/* ---- backward ----------------------------------------------------------- */

/* Rows of dy W_out per step of MultiHeadAttention's out_proj backward. */
#define MHA_DCTX_ROWS 64
/* The attention and projection backward run over slices of the batch of
 * about this many rows, so dQ/dK/dV exist for one slice at a time, never for
 * the whole batch (at (8, 1024, 768): 18 MiB instead of 72). A function of
 * the shape only, like every split here. */
#define MHA_BWD_SLICE_ROWS 1024

static int64_t slice_batch(int64_t B, int64_t T) {
    const int64_t nb = (MHA_BWD_SLICE_ROWS + T - 1) / T;
    return nb < 1 ? 1 : nb > B ? B : nb;
}

typedef struct {
    int64_t nb;   /* batch elements per slice */
    size_t dqkv;  /* (nb*T, P) floats */
    size_t sums;  /* P doubles: a bias gradient's column sums */
    size_t dctx;  /* MHA: delta (B*H*T) + per-thread rows of dctx */
    size_t attn;  /* the attention backward of one slice */
    size_t total;
} bwd_layout;

/* Workspace: [dqkv of a slice] [column sums] [MHA: delta + dctx rows]
 * [attention backward of a slice]. */
static bool plan_backward(const mha_module *m, const mha__attention_desc *d, bwd_layout *L) {
    mha__attention_desc s = *d;
    L->nb = s.B = slice_batch(d->B, d->T);
    const size_t rows = (size_t)d->B * (size_t)d->T, srows = (size_t)s.B * (size_t)d->T;
    size_t dqkv, dctx = 0, attn = mha__attention_backward_workspace(&s);
    if (d->B % L->nb) { /* the last slice is shorter: it may cut its heads into more chunks */
        s.B = d->B % L->nb;
        const size_t last = mha__attention_backward_workspace(&s);
        attn = last == 0 ? 0 : last > attn ? last : attn;
    }
    if (attn == 0 || !mha__mul_size(srows, (size_t)m->P * sizeof(float), &dqkv)) return false;
    if (m->cfg.kind == MHA_MULTI_HEAD_ATTENTION) {
        size_t delta, blocks;
        if (!mha__mul_size(rows, (size_t)m->H * sizeof(float), &delta) ||
            !mha__mul_size((size_t)mha_runtime_threads() * MHA_DCTX_ROWS,
                           (size_t)m->W * sizeof(float), &blocks) ||
            !mha__add_size(mha__align64(delta), blocks, &dctx))
            return false;
    }
    L->dqkv = 0;
    L->sums = mha__align64(dqkv);
    L->dctx = L->sums + mha__align64((size_t)m->P * sizeof(double));
    L->attn = L->dctx + mha__align64(dctx);
    return L->sums >= dqkv && L->attn >= L->dctx && mha__add_size(L->attn, attn, &L->total);
}

size_t mha_module_backward_workspace_size(const mha_module *m, int64_t B, int64_t T) {
    if (!m || B < 1 || T < 1 || B > ((int64_t)1 << 40) / T) return 0;
    const mha_forward_opts o = {.training = 1, .rng = MHA_DROPOUT_RNG_PHILOX};
    mha__attention_desc d;
    mha__module_attention_desc(m, &d, B, T, &o);
    bwd_layout L;
    return plan_backward(m, &d, &L) ? L.total : 0;
}

/* The attention's backward for batch elements [b0, b0 + nb) of d: its rows
 * of dqkv (nb*T, P) from its rows of dctx. */
static mha_status attention_slice(const mha__attention_desc *d, int64_t b0, int64_t nb,
                                  const float *dctx, int64_t ld_dctx, float *dqkv, void *ws,
                                  size_t ws_size) {
    const int64_t T = d->T, H = d->H;
    mha__attention_desc s = *d;
    s.B = nb;
    s.b_begin = d->b_begin + b0;
    s.qkv = d->qkv + b0 * T * d->ld_qkv;
    s.o = d->o + b0 * T * d->ldo;
    s.stats = d->stats + b0 * H * T * 2;
    if (d->keep_bits) s.keep_bits = d->keep_bits + (size_t)(b0 * H * T) * (size_t)((T + 63) / 64);
    if (d->delta) s.delta = d->delta + b0 * H * T;
    return mha__attention_backward(&s, dctx + b0 * T * ld_dctx, ld_dctx, dqkv, ws, ws_size);
}

/* A GEMM of the backward ran out of memory after the gradients or the tape
 * had been written to: both are unspecified now, so the tape is consumed
 * (mha.h: zero the gradients and record the forward again). */
static mha_status backward_failed(mha_tape *tape, mha_status st) {
    tape->id = 0;
    return st;
}

mha_status mha_module_backward(mha_module *m, mha_tape *tape, float *dx, const float *x,
                               const float *dy, void *workspace, size_t workspace_size) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!m || !tape || !x || !dy) return mha__fail(MHA_ERR_ARGUMENT, "module, tape, x or dy is NULL");
    mha_status st = mha__params_check_tape(&m->params, tape->id);
    if (st != MHA_OK) return st;
    const mha_config *c = &m->cfg;
    const int64_t B = tape->B, T = tape->T, rows = B * T, Din = c->d_in, W = m->W, P = m->P;
    const int64_t ny = rows * W;
    const int64_t i = mha__module_first_nonfinite(dy, ny);
    if (i < ny)
        return mha__fail(MHA_ERR_NONFINITE, "dy holds %s at (%lld, %lld, %lld)",
                         isnan(dy[i]) ? "NaN" : "infinity", (long long)(i / (T * W)),
                         (long long)(i / W % T), (long long)(i % W));
    mha__attention_desc d;
    mha__module_attention_desc(m, &d, B, T, &tape->opts);
    d.keep_bits = tape->bits;
    bwd_layout L;
    if (!plan_backward(m, &d, &L))
        return mha__fail(MHA_ERR_OVERFLOW, "backward workspace for batch %lld x %lld tokens overflows",
                         (long long)B, (long long)T);
    st = mha__module_workspace(m, L.total, &workspace, &workspace_size, "backward");
    if (st != MHA_OK) return st;
    const mha_params *ps = &m->params;
    if (!mha__params_grad(&m->params)) return MHA_ERR_NOMEM;
    float *const gw_qkv = mha__grad_of(ps, m->w_qkv), *const gb_qkv = mha__grad_of(ps, m->b_qkv);
    char *ws = workspace;
    float *dqkv = (float *)(void *)(ws + L.dqkv);
    double *sums = (double *)(void *)(ws + L.sums);
    memset(sums, 0, (size_t)P * sizeof(double));

    /* out_proj: the weight's gradient from the saved output, then dctx =
     * dy W_out written over that output, a block of rows at a time, each
     * block's delta = rowsum(dctx * ctx) per head taken before. */
    const float *dctx = dy;
    if (c->kind == MHA_MULTI_HEAD_ATTENTION) {
        float *gw_out = mha__grad_of(ps, m->w_out), *gb_out = mha__grad_of(ps, m->b_out);
        float *delta = (float *)(void *)(ws + L.dctx);
        float *blocks = (float *)(void *)(ws + L.dctx + mha__align64((size_t)(rows * m->H) * sizeof(float)));
        if ((st = mha__sgemm(true, false, W, W, rows, 1.0f, dy, W, tape->ctx, W, 1.0f, gw_out, W)) !=
            MHA_OK)
            return backward_failed(tape, st);
        mha__colsum_acc(gb_out, dy, rows, W, W);
        bool failed = false;
        char failure[512]; /* the failing thread's detail (details are per thread) */
        const int64_t nblk = (rows + MHA_DCTX_ROWS - 1) / MHA_DCTX_ROWS, H = m->H, HD = m->HD;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) reduction(|| : failed)
#endif
        for (int64_t blk = 0; blk < nblk; blk++) {
            if (failed) continue;
            int tid = 0;
#if defined(MHA_HAVE_OPENMP)
            tid = omp_get_thread_num();
#endif
            const int64_t r0 = blk * MHA_DCTX_ROWS;
            const int64_t n = rows - r0 < MHA_DCTX_ROWS ? rows - r0 : MHA_DCTX_ROWS;
            float *dc = blocks + (size_t)tid * MHA_DCTX_ROWS * (size_t)W;
            if (mha__sgemm(false, false, n, W, W, 1.0f, dy + r0 * W, W, m->w_out, W, 0.0f, dc, W) !=
                MHA_OK) {
                failed = true;
#if defined(MHA_HAVE_OPENMP)
#pragma omp critical /* unnamed: a named one is an exported symbol */
#endif
                snprintf(failure, sizeof failure, "%s", mha_last_error());
                continue;
            }
            float *o = tape->ctx + r0 * W;
            mha__attention_delta_rows(delta, T, H, HD, r0, n, dc, W, o, W);
            memcpy(o, dc, (size_t)(n * W) * sizeof(float));
        }
        if (failed)
            return backward_failed(tape, mha__fail(MHA_ERR_NOMEM, "%s", failure));
        dctx = tape->ctx;
        d.delta = delta;
    }

    /* attention, then the projections, a slice of the batch at a time */
    d.qkv = tape->qkv;
    d.o = tape->ctx;
    d.ldo = W;
    d.lse = NULL;
    d.stats = tape->stats;
    const int64_t Dout = c->d_out;
    for (int64_t b0 = 0; b0 < B; b0 += L.nb) {
        const int64_t nb = B - b0 < L.nb ? B - b0 : L.nb, r0 = b0 * T, n = nb * T;
        st = attention_slice(&d, b0, nb, dctx, W, dqkv, ws + L.attn, workspace_size - L.attn);
        if (st != MHA_OK) return backward_failed(tape, st);
        const float *xs = x + r0 * Din;
        float *dxs = dx ? dx + r0 * Din : NULL;
        if (c->kind == MHA_SELF_ATTENTION_V1) {
            /* q = x @ W_query with W (D_in, D_out), likewise k, v */
            for (int r = 0; r < 3; r++) {
                const float *w = m->w_qkv + r * Din * Dout;
                st = mha__sgemm(true, false, Din, Dout, n, 1.0f, xs, Din, dqkv + r * Dout, P, 1.0f,
                                gw_qkv + r * Din * Dout, Dout);
                if (st == MHA_OK && dxs)
                    st = mha__sgemm(false, true, n, Din, Dout, 1.0f, dqkv + r * Dout, P, w, Dout,
                                    r ? 1.0f : 0.0f, dxs, Din);
                if (st != MHA_OK) return backward_failed(tape, st);
            }
            continue;
        }
        if ((st = mha__sgemm(true, false, P, Din, n, 1.0f, dqkv, P, xs, Din, 1.0f, gw_qkv, Din)) !=
            MHA_OK)
            return backward_failed(tape, st);
        if (gb_qkv) mha__colsum_f64(sums, dqkv, n, P, P);
        if (dxs &&
            (st = mha__sgemm(false, false, n, Din, P, 1.0f, dqkv, P, m->w_qkv, Din, 0.0f, dxs, Din)) !=
                MHA_OK)
            return backward_failed(tape, st);
    }
    if (gb_qkv) mha__colsum_flush(gb_qkv, sums, P);
    tape->id = 0; /* consumed */
    return MHA_OK;
}

/* ---- simplified self-attention (section 3.3) ---------------------------- */

/* context = A x with A = softmax(x x^T); with dA = dC x^T and
 * dS = A * (dA - rowsum(dA * A)):  dx = A^T dC + dS x + dS^T x. Plain
 * loops in double, like its forward. */
mha_status mha_simple_attention_backward(float *dx, const float *x, const float *dcontext,
                                         int64_t T, int64_t D) {
    if (!dx || !x || !dcontext) return mha__fail(MHA_ERR_ARGUMENT, "dx, x or dcontext is NULL");
    if (T < 1 || D < 1)
        return mha__fail(MHA_ERR_SHAPE, "T (%lld) and D (%lld) must be positive", (long long)T,
                         (long long)D);
    size_t n, bytes;
    if (T > ((int64_t)1 << 24) || D > ((int64_t)1 << 24) ||
        !mha__mul_size((size_t)T, (size_t)T, &n) || !mha__mul_size(n, 2 * sizeof(double), &bytes) ||
        !mha__mul_size((size_t)T, (size_t)D, &n))
        return mha__fail(MHA_ERR_OVERFLOW, "T (%lld) x D (%lld) is too large", (long long)T,
                         (long long)D);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]) || !isfinite(dcontext[i]))
            return mha__fail(MHA_ERR_NONFINITE, "%s holds a non-finite value at element %zu",
                             isfinite(x[i]) ? "dcontext" : "x", i);
    double *A = mha__alloc(bytes), *dS = A + (size_t)T * (size_t)T;
    if (!A) return mha__nomem("out of memory (%zu bytes)", bytes);
    for (int64_t i = 0; i < T; i++) {
        double *a = A + i * T, mx = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < T; j++) {
            double s = 0.0;
            for (int64_t k = 0; k < D; k++) s += (double)x[i * D + k] * (double)x[j * D + k];
            a[j] = s;
            if (s > mx) mx = s;
        }
        for (int64_t j = 0; j < T; j++) sum += (a[j] = exp(a[j] - mx));
        double dot = 0.0;
        for (int64_t j = 0; j < T; j++) {
            a[j] /= sum;
            double da = 0.0;
            for (int64_t k = 0; k < D; k++) da += (double)dcontext[i * D + k] * (double)x[j * D + k];
            dS[i * T + j] = da;
            dot += da * a[j];
        }
        for (int64_t j = 0; j < T; j++) dS[i * T + j] = a[j] * (dS[i * T + j] - dot);
    }
    for (int64_t i = 0; i < T; i++)
        for (int64_t k = 0; k < D; k++) {
            double s = 0.0;
            for (int64_t j = 0; j < T; j++)
                s += A[j * T + i] * (double)dcontext[j * D + k] +
                     (dS[i * T + j] + dS[j * T + i]) * (double)x[j * D + k];
            dx[i * D + k] = (float)s;
        }
    mha__free(A);
    return MHA_OK;
}
