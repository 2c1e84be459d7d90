/* gpt_backward.c — the backward of chapter 4's GPTModel / TransformerBlock
 * over the tape its forward (gpt.c) recorded.
 *
 * Per block, over R = B*T rows of width E (gpt.c's forward):
 *   h1 = norm1(x);  qkv = h1 W_qkv^T + b_qkv;  o = attention(qkv)
 *   x1 = x + n1 * (o W_out^T + b_out)            (n1: drop_shortcut's mask)
 *   h2 = norm2(x1); f = h2 W1^T + b1;  g = gelu(f)
 *   y  = x1 + n2 * (g W2^T + b2)
 * backward, from dy:
 *   dz = n2 dy;  gW2 += dz^T g;  gb2 += colsum(dz);  df = (dz W2) gelu'(f)
 *   gW1 += df^T h2;  gb1 += colsum(df);  dx1 = dy + norm2'(df W1)
 *   da = n1 dx1; gW_out += da^T o; gb_out += colsum(da); do = da W_out
 *   dqkv = attention backward (the fused flash backward of the attention
 *   layer, as MultiHeadAttention's module backward runs it)
 *   gW_qkv += dqkv^T h1; gb_qkv += colsum(dqkv); dx = dx1 + norm1'(dqkv W_qkv)
 * and around the blocks: embeddings (tok + pos, drop_emb), final_norm and
 * the head (no bias; with a tied head the weight is tok_emb's, so both
 * gradients land in one buffer). The masks n are the keep bits the forward
 * drew. Every GEMM goes through mha__sgemm (tiles fixed by the shape),
 * column sums run rows in order and the embedding scatter-add splits
 * columns, never rows, over threads: the gradients do not depend on the
 * thread count. */
#include "gpt.h"

#include "attention/attention.h"
#include "common/common.h"
#include "generator/generator.h"
#include "kernels/drivers.h"

#include <math.h>
#include <string.h>

/* The gradient of parameter data p (a pointer into the arena). */
static float *G(mha_gpt *m, const float *p) { return mha__grad_of(&m->params, p); }

/* ---- backward ----------------------------------------------------------------- */

/* a * the keep bits' mask, in y; without dropout a itself (no copy) */
static const float *masked(const mha_gpt *m, const mha_gpt_tape *t, float *y, const float *a, const uint64_t *bits,
                           int64_t n) {
    if (!t->drop) return a;
    mha__dropout_apply_n(y, a, bits, (size_t)n, mha__dropout_scale(m->cfg.drop_rate));
    return y;
}

/* A failing call (MHA_ERR_NOMEM from a GEMM) ends the backward; gradients
 * are then partly accumulated, so the caller consumes the tape (mha.h). */
#define TRY(call)                                                                                  \
    do {                                                                                           \
        const mha_status try_st_ = (call);                                                         \
        if (try_st_ != MHA_OK) return try_st_;                                                     \
    } while (0)

/* dx (R, E): the gradient at the last block's output in, the first
 * block's input's out. Scratch: t0 (dz, da with dropout), t1 (dh, do), t2 (LayerNorm),
 * t4 (df, dqkv). */
static mha_status blocks_backward(mha_gpt *m, mha_gpt_tape *t, float *dx) {
    const int64_t E = m->E, R = t->B * t->T;
    float *dh = t->t1, *lns = t->t2, *df = t->t4;
    for (int64_t l = m->L - 1; l >= 0; l--) {
        const mha__gpt_block *b = &m->blocks[l];
        const mha__gpt_acts *tb = &t->blk[l];
        /* feed-forward */
        const float *dz = masked(m, t, t->t0, dx, tb->kb2, R * E); /* read before dx changes */
        TRY(mha__sgemm(true, false, E, 4 * E, R, 1.0f, dz, E, tb->g, 4 * E, 1.0f, G(m, b->w2), 4 * E));
        mha__colsum_acc(G(m, b->b2), dz, R, E, E);
        TRY(mha__sgemm(false, false, R, 4 * E, E, 1.0f, dz, E, b->w2, 4 * E, 0.0f, df, 4 * E));
        mha__gelu_backward_n(df, tb->f, R * 4 * E);
        TRY(mha__sgemm(true, false, 4 * E, E, R, 1.0f, df, 4 * E, tb->h2, E, 1.0f, G(m, b->w1), E));
        mha__colsum_acc(G(m, b->b1), df, R, 4 * E, 4 * E);
        TRY(mha__sgemm(false, false, R, E, 4 * E, 1.0f, df, 4 * E, b->w1, E, 0.0f, dh, E));
        mha__layernorm_backward_rows(dx, dh, tb->x1, b->ln2_s, G(m, b->ln2_s), G(m, b->ln2_b), lns, R, E);
        /* attention */
        dz = masked(m, t, t->t0, dx, tb->kb1, R * E);
        TRY(mha__sgemm(true, false, E, E, R, 1.0f, dz, E, tb->o, E, 1.0f, G(m, b->w_out), E));
        mha__colsum_acc(G(m, b->b_out), dz, R, E, E);
        TRY(mha__sgemm(false, false, R, E, E, 1.0f, dz, E, b->w_out, E, 0.0f, dh, E));
        mha__attention_desc d;
        mha__gpt_attention_desc(m, &d, t->B, t->T, t->drop, NULL);
        d.qkv = tb->qkv;
        d.o = tb->o;
        d.stats = tb->stats;
        d.keep_bits = tb->abits;
        float *dqkv = df;
        TRY(mha__attention_backward(&d, dh, E, dqkv, t->att_ws, t->att_ws_size));
        TRY(mha__sgemm(true, false, 3 * E, E, R, 1.0f, dqkv, 3 * E, tb->h1, E, 1.0f, G(m, b->w_qkv), E));
        if (b->b_qkv) mha__colsum_acc(G(m, b->b_qkv), dqkv, R, 3 * E, 3 * E);
        TRY(mha__sgemm(false, false, R, E, 3 * E, 1.0f, dqkv, 3 * E, b->w_qkv, E, 0.0f, dh, E));
        mha__layernorm_backward_rows(dx, dh, tb->x, b->ln1_s, G(m, b->ln1_s), G(m, b->ln1_b), lns, R, E);
    }
    return MHA_OK;
}

static mha_status check_tape(const mha_gpt *m, const mha_gpt_tape *t, bool model) {
    mha_status st = mha__params_check_tape(&m->params, t->m ? t->id : 0);
    if (st != MHA_OK) return st;
    if (model && !t->model)
        return mha__fail(MHA_ERR_ARGUMENT, "the tape holds a blocks-only forward (mha_gpt_blocks_forward_tape)");
    if (!model && t->model)
        return mha__fail(MHA_ERR_ARGUMENT, "the tape holds a GPTModel forward (mha_gpt_forward_tape)");
    /* the attention backward's scratch is per thread: sized at the forward */
    mha__attention_desc d;
    mha__gpt_attention_desc(m, &d, t->B, t->T, false, NULL);
    const size_t need = mha__attention_backward_workspace(&d);
    if (need == 0 || need > t->att_ws_size)
        return mha__fail(MHA_ERR_WORKSPACE, "the thread count grew since the forward was recorded (its scratch "
                                            "holds %zu bytes, the backward needs %zu): record it again",
                         t->att_ws_size, need);
    return MHA_OK;
}

mha_status mha__gpt_model_backward(mha_gpt *m, mha_gpt_tape *t, const float *dlogits) {
    if (!mha__params_grad(&m->params)) return MHA_ERR_NOMEM;
    const int64_t E = m->E, V = m->V, R = t->B * t->T, T = t->T;
    float *dx = t->t3;
    /* head and final_norm */
    TRY(mha__sgemm(false, false, R, E, V, 1.0f, dlogits, V, m->head, E, 0.0f, t->t1, E));
    TRY(mha__sgemm(true, false, V, E, R, 1.0f, dlogits, V, t->hf, E, 1.0f, G(m, m->head), E));
    memset(dx, 0, (size_t)(R * E) * sizeof(float));
    mha__layernorm_backward_rows(dx, t->t1, t->out, m->lnf_s, G(m, m->lnf_s), G(m, m->lnf_b), t->t2, R, E);
    mha_status st = blocks_backward(m, t, dx);
    if (st != MHA_OK) return st;
    /* drop_emb, then the embeddings: columns over threads, rows in order */
    masked(m, t, dx, dx, t->kb_emb, R * E);
    float *gtok = G(m, m->tok_emb), *gpos = G(m, m->pos_emb);
    const int32_t *idx = t->idx;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if ((double)R * (double)E > 1e5)
#endif
    for (int64_t e0 = 0; e0 < E; e0 += 16) {
        const int64_t e1 = e0 + 16 < E ? e0 + 16 : E;
        for (int64_t r = 0; r < R; r++)
            for (int64_t e = e0; e < e1; e++) {
                gtok[(int64_t)idx[r] * E + e] += dx[r * E + e];
                gpos[(r % T) * E + e] += dx[r * E + e];
            }
    }
    return MHA_OK;
}

mha_status mha_gpt_backward(mha_gpt *m, mha_gpt_tape *tape, const float *dlogits) {
    if (!m || !tape || !dlogits) return mha__fail(MHA_ERR_ARGUMENT, "model, tape or dlogits is NULL");
    mha_status st = check_tape(m, tape, true);
    if (st == MHA_OK) st = mha__gpt_check_finite(dlogits, tape->B * tape->T * m->V, "dlogits");
    if (st != MHA_OK) return st;
    st = mha__gpt_model_backward(m, tape, dlogits);
    tape->m = NULL; /* consumed, also when a GEMM failed part-way */
    return st;
}

mha_status mha_gpt_blocks_backward(mha_gpt *m, mha_gpt_tape *tape, float *dx, const float *dy) {
    if (!m || !tape || !dy) return mha__fail(MHA_ERR_ARGUMENT, "model, tape or dy is NULL");
    mha_status st = check_tape(m, tape, false);
    const int64_t n = tape->B * tape->T * m->E;
    if (st == MHA_OK) st = mha__gpt_check_finite(dy, n, "dy");
    if (st != MHA_OK) return st;
    if (!mha__params_grad(&m->params)) return MHA_ERR_NOMEM;
    float *g = tape->t3;
    memcpy(g, dy, (size_t)n * sizeof(float));
    st = blocks_backward(m, tape, g);
    tape->m = NULL; /* consumed, also when a GEMM failed part-way */
    if (st != MHA_OK) return st;
    if (dx) memcpy(dx, g, (size_t)n * sizeof(float));
    return MHA_OK;
}

