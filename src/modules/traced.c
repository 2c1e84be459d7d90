/* traced.c — the teaching paths: simplified self-attention (section 3.3)
 * and MultiHeadAttention's forward step by step, every intermediate tensor
 * materialised and handed to a callback, exactly in the book's order. */
#include "modules.h"

#include "common/common.h"
#include "generator/generator.h"

#include <math.h>
#include <string.h>

/* softmax over n floats in place: max, exp(x - max), divide by the sum. */
static void softmax_row(float *s, int64_t n) {
    float m = -INFINITY, sum = 0.0f;
    for (int64_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    for (int64_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - m);
        sum += s[j];
    }
    for (int64_t j = 0; j < n; j++) s[j] /= sum;
}

/* The book's `@` as plain loops, each sum in k's order from 0: for p < P,
 * out[p][i][j] = sum over k < K of a[p][i][k] * b_p(j, k), i < M, j < N; a
 * and out row-major, b_p(j, k) = b[p * N * K + j * bj + k * bk]: (bj, bk) =
 * (K, 1) reads b transposed (queries @ keys.T, x @ W.T), (1, N) as it is
 * (attn_weights @ values). */
static void matmul(float *out, const float *a, const float *b, int64_t P, int64_t M, int64_t N, int64_t K,
                   int64_t bj, int64_t bk) {
    for (int64_t p = 0; p < P; p++)
        for (int64_t i = 0; i < M; i++) {
            const float *ai = a + (p * M + i) * K;
            for (int64_t j = 0; j < N; j++) {
                const float *bp = b + p * N * K + j * bj;
                float acc = 0.0f;
                for (int64_t k = 0; k < K; k++) acc += ai[k] * bp[k * bk];
                out[(p * M + i) * N + j] = acc;
            }
        }
}

mha_status mha_simple_attention_forward(float *context, float *weights, const float *x, int64_t T,
                                        int64_t D) {
    if (!context || !x) return mha__fail(MHA_ERR_ARGUMENT, "context or x is NULL");
    int64_t n;
    if (T < 1 || D < 1) return mha__fail(MHA_ERR_SHAPE, "T (%lld) and D (%lld) must be positive", (long long)T, (long long)D);
    if (!mha__mul_i64(T, D, &n) || T > ((int64_t)1 << 28))
        return mha__fail(MHA_ERR_OVERFLOW, "T (%lld) x D (%lld) is too large", (long long)T, (long long)D);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return mha__fail(MHA_ERR_NONFINITE, "input x holds a non-finite value at %lld", (long long)i);
    float *row = mha__alloc((size_t)T * sizeof(float));
    if (!row) return mha__nomem("out of memory");
    for (int64_t i = 0; i < T; i++) { /* one row of the weights at a time */
        matmul(row, x + i * D, x, 1, 1, T, D, D, 1);
        softmax_row(row, T);
        if (weights) memcpy(weights + i * T, row, (size_t)T * sizeof(float));
        matmul(context + i * D, row, x, 1, 1, D, T, 1, D);
    }
    mha__free(row);
    return MHA_OK;
}

static void emit(mha_trace_fn fn, void *user, const char *step, const char *expr, int ndim,
                 int64_t s0, int64_t s1, int64_t s2, int64_t s3, const float *data) {
    const int64_t shape[4] = {s0, s1, s2, s3};
    if (fn) fn(user, step, expr, ndim, shape, data);
}

mha_status mha_module_forward_traced(mha_module *m, float *y, const float *x, int64_t B, int64_t T,
                                     mha_generator *dropout_rng, mha_trace_fn fn, void *user) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    if (!m || !y || !x) return mha__fail(MHA_ERR_ARGUMENT, "module, y or x is NULL");
    const mha_config *c = &m->cfg;
    if (c->kind != MHA_MULTI_HEAD_ATTENTION)
        return mha__fail(MHA_ERR_UNSUPPORTED, "the traced forward is MultiHeadAttention's only");
    mha_status st = mha__module_check_input(m, x, B, T);
    if (st != MHA_OK) return st;
    const int64_t H = m->H, HD = m->HD, Dout = c->d_out, Din = c->d_in;
    size_t tt, big, n_act, total;
    if (!mha__mul_size((size_t)(B * H), (size_t)T * (size_t)T, &tt) || tt > ((size_t)1 << 31))
        return mha__fail(MHA_ERR_OVERFLOW, "traced forward materialises (B, H, T, T); too large here");
    n_act = (size_t)(B * T * Dout);
    big = tt > n_act ? tt : n_act;
    (void)Din;
    /* qkv, q/k/v transposed (3 x act), scores (tt), ctx (b,h,t,hd), ctx2 */
    total = (size_t)(B * T) * (size_t)m->P + 3 * n_act + tt + 2 * n_act + big;
    float *buf = mha__alloc(total * sizeof(float));
    if (!buf) return mha__nomem("out of memory for the traced forward");
    float *qkv = buf, *qt = qkv + (size_t)(B * T) * (size_t)m->P, *kt = qt + n_act, *vt = kt + n_act;
    float *S = vt + n_act, *ctx = S + tt, *ctx2 = ctx + n_act, *tmp = ctx2 + n_act;

    emit(fn, user, "input", "x", 3, B, T, Din, 0, x);
    st = mha__module_project(m, qkv, x, B, T);
    if (st != MHA_OK) {
        mha__free(buf);
        return st;
    }
    /* Split the packed columns back into the book's three tensors. */
    static const char *const proj_expr[3] = {"queries = self.W_query(x)", "keys = self.W_key(x)",
                                             "values = self.W_value(x)"};
    static const char *const proj_step[3] = {"project queries", "project keys", "project values"};
    static const int book_order[3] = {1, 0, 2}; /* keys, queries, values, as the book's forward */
    for (int n = 0; n < 3; n++) {
        const int r = book_order[n];
        for (int64_t i = 0; i < B * T; i++)
            memcpy(tmp + i * Dout, qkv + i * m->P + r * Dout, (size_t)Dout * sizeof(float));
        emit(fn, user, proj_step[r], proj_expr[r], 3, B, T, Dout, 0, tmp);
        if (r == 1) emit(fn, user, "view", "keys.view(b, num_tokens, num_heads, head_dim)", 4, B, T, H, HD, tmp);
        float *dst = r == 0 ? qt : r == 1 ? kt : vt;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < T; t++)
                    memcpy(dst + ((b * H + h) * T + t) * HD, tmp + (b * T + t) * Dout + h * HD,
                           (size_t)HD * sizeof(float));
    }
    emit(fn, user, "transpose", "keys.transpose(1, 2)", 4, B, H, T, HD, kt);
    emit(fn, user, "transpose", "queries.transpose(1, 2)", 4, B, H, T, HD, qt);
    emit(fn, user, "transpose", "values.transpose(1, 2)", 4, B, H, T, HD, vt);

    matmul(S, qt, kt, B * H, T, T, HD, HD, 1);
    emit(fn, user, "scores", "attn_scores = queries @ keys.transpose(2, 3)", 4, B, H, T, T, S);
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = i + 1; j < T; j++) S[(bh * T + i) * T + j] = -INFINITY;
    emit(fn, user, "mask", "attn_scores.masked_fill_(mask_bool, -torch.inf)", 4, B, H, T, T, S);
    const float root = (float)sqrt((double)HD);
    for (size_t i = 0; i < tt; i++) S[i] /= root;
    for (int64_t r = 0; r < B * H * T; r++) softmax_row(S + r * T, T);
    emit(fn, user, "softmax", "attn_weights = torch.softmax(attn_scores / keys.shape[-1]**0.5, dim=-1)", 4, B, H, T, T, S);
    if (dropout_rng && c->dropout > 0.0) {
        const float scale = mha__dropout_scale(c->dropout);
        for (size_t i = 0; i < tt; i++)
            S[i] = mha__dropout_keep(dropout_rng, c->dropout) ? S[i] * scale : 0.0f;
        emit(fn, user, "dropout", "attn_weights = self.dropout(attn_weights)", 4, B, H, T, T, S);
    } else {
        emit(fn, user, "dropout", "attn_weights = self.dropout(attn_weights)  # identity in eval mode", 4, B, H, T, T, S);
    }
    matmul(ctx, S, vt, B * H, T, HD, T, 1, HD);
    emit(fn, user, "context", "attn_weights @ values", 4, B, H, T, HD, ctx);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                memcpy(ctx2 + ((b * T + t) * H + h) * HD, ctx + ((b * H + h) * T + t) * HD,
                       (size_t)HD * sizeof(float));
    emit(fn, user, "transpose back", "context_vec = (attn_weights @ values).transpose(1, 2)", 4, B, T, H, HD, ctx2);
    emit(fn, user, "concatenate", "context_vec.contiguous().view(b, num_tokens, self.d_out)", 3, B, T, Dout, 0, ctx2);
    matmul(y, ctx2, m->w_out, 1, B * T, Dout, Dout, Dout, 1);
    for (int64_t i = 0; i < B * T; i++)
        for (int64_t o = 0; o < Dout; o++) y[i * Dout + o] += m->b_out[o];
    emit(fn, user, "out_proj", "context_vec = self.out_proj(context_vec)", 3, B, T, Dout, 0, y);
    mha__free(buf);
    return MHA_OK;
}
