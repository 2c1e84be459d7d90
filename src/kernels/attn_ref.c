/* attn_ref.c — the reference attention kernels, forward and backward (the
 * reference table's attn_fwd and attn_bwd, kernels.h): the oracles the fast
 * kernels are tested against. One query row at a time; that row's scores
 * are materialised (T floats), sums are taken in double. */
#include "kernels.h"
#include "philox.h"

#include <assert.h>
#include <math.h>

size_t mha__attn_fwd_scratch_ref(int64_t T, int64_t HD) {
    /* scores (T floats) + accumulator (HD doubles) */
    return (size_t)T + 2u * (size_t)HD + 16u;
}

/* Whether column j of row i survives dropout (not GENERATOR mode). */
static bool keep_ij(const mha__attn_args *a, int64_t i, int64_t j) {
    switch (a->drop) {
    case MHA_DROP_BITMASK:
        return (a->keep[i * a->keep_ld + (j >> 6)] >> (j & 63)) & 1u;
    case MHA_DROP_PHILOX:
        return mha__philox_keep(a->philox_seed, a->philox_stream, (uint64_t)i, (uint64_t)j,
                                a->keep_threshold);
    default:
        return true;
    }
}

void mha__attn_fwd_ref(const mha__attn_args *a, float *scratch) {
    const int64_t T = a->T, HD = a->HD;
    float *s = scratch;
    double *acc = (double *)(void *)(scratch + ((size_t)T + 1u) / 2u * 2u);

    for (int64_t i = a->q_begin; i < a->q_end; i++) {
        const float *q = a->q + i * a->ldq;
        const int64_t n = a->causal ? i + 1 : T; /* visible keys */
        assert(n >= 1); /* a causal row always sees itself: never fully masked */

        double m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            const float *k = a->k + j * a->ldk;
            double dot = 0.0;
            for (int64_t d = 0; d < HD; d++) dot += (double)q[d] * (double)k[d];
            s[j] = (float)(dot * (double)a->scale);
            if ((double)s[j] > m) m = (double)s[j];
        }
        double sum = 0.0;
        for (int64_t j = 0; j < n; j++) sum += exp((double)s[j] - m);
        if (a->lse) a->lse[i] = (float)(m + log(sum));
        if (a->stats) {
            a->stats[2 * i] = (float)m; /* a float's value: exact */
            a->stats[2 * i + 1] = (float)log(sum);
        }

        /* softmax, then dropout on the weights (every column drawn in
         * GENERATOR mode, masked ones included, as PyTorch does). */
        for (int64_t j = 0; j < T; j++) {
            float w = j < n ? (float)(exp((double)s[j] - m) / sum) : 0.0f;
            bool keep = true;
            if (a->drop == MHA_DROP_GENERATOR)
                keep = mha__dropout_keep_of(mha_generator_random64(a->gen), a->drop_p);
            else if (a->drop != MHA_DROP_NONE)
                keep = keep_ij(a, i, j);
            /* a dropped weight is w * 0, as PyTorch's mask multiplies: a
             * NaN weight (overflowed scores) stays NaN */
            if (a->drop != MHA_DROP_NONE) w = keep ? w * a->drop_scale : w * 0.0f;
            if (j < n) s[j] = w;
        }

        for (int64_t d = 0; d < HD; d++) acc[d] = 0.0;
        for (int64_t j = 0; j < n; j++) {
            const float *v = a->v + j * a->ldv;
            const double w = s[j];
            for (int64_t d = 0; d < HD; d++) acc[d] += w * (double)v[d];
        }
        float *o = a->o + i * a->ldo;
        for (int64_t d = 0; d < HD; d++) o[d] = (float)acc[d];
    }
}

/* ---- backward ----------------------------------------------------------- */

size_t mha__attn_bwd_scratch_ref(int64_t T, int64_t HD) {
    /* dK and dV accumulators for up to T keys, dQ for one row: doubles */
    return 2u * (2u * (size_t)T * (size_t)HD + (size_t)HD) + 16u;
}

static bool bwd_keep(const mha__attn_bwd_args *a, int64_t i, int64_t j) {
    if (a->drop == MHA_DROP_BITMASK) return (a->keep[i * a->keep_ld + (j >> 6)] >> (j & 63)) & 1u;
    return mha__philox_keep(a->philox_seed, a->philox_stream, (uint64_t)i, (uint64_t)j,
                            a->keep_threshold);
}

void mha__attn_bwd_ref(const mha__attn_bwd_args *a, float *scratch) {
    const int64_t HD = a->HD, k0 = a->k_begin, nk = a->k_end - a->k_begin;
    if (nk <= 0) return;
    double *dk = (double *)(void *)scratch, *dv = dk + nk * HD, *dq = dv + nk * HD;
    for (int64_t n = 0; n < 2 * nk * HD; n++) dk[n] = 0.0;

    for (int64_t i = a->causal ? k0 : 0; i < a->T; i++) {
        const float *q = a->q + i * a->ldq, *go = a->dout + i * a->lddo;
        const int64_t j_end = a->causal && i + 1 < a->k_end ? i + 1 : a->k_end;
        assert(j_end > k0); /* causal rows start at k0: each sees a key of the range */
        for (int64_t d = 0; d < HD; d++) dq[d] = 0.0;
        for (int64_t j = k0; j < j_end; j++) {
            const float *k = a->k + j * a->ldk, *v = a->v + j * a->ldv;
            double s = 0.0, dp = 0.0;
            for (int64_t d = 0; d < HD; d++) {
                s += (double)q[d] * (double)k[d];
                dp += (double)go[d] * (double)v[d];
            }
            /* the forward's weight: the score rounded to float as there */
            const double p = exp(((double)(float)(s * (double)a->scale) - (double)a->stats[2 * i]) -
                                 (double)a->stats[2 * i + 1]);
            double m = 1.0;
            if (a->drop != MHA_DROP_NONE) m = bwd_keep(a, i, j) ? (double)a->drop_scale : 0.0;
            const double ds = p * (m * dp - (double)a->delta[i]);
            double *dkj = dk + (j - k0) * HD, *dvj = dv + (j - k0) * HD;
            for (int64_t d = 0; d < HD; d++) {
                dvj[d] += p * m * (double)go[d];
                dkj[d] += ds * (double)q[d];
                dq[d] += ds * (double)k[d];
            }
        }
        float *dqi = a->dq + i * a->lddq;
        if (j_end > k0)
            for (int64_t d = 0; d < HD; d++)
                dqi[d] = (a->dq_set ? 0.0f : dqi[d]) + (float)(dq[d] * (double)a->scale);
    }
    for (int64_t j = 0; j < nk; j++) {
        float *dkj = a->dk + (k0 + j) * a->lddk, *dvj = a->dv + (k0 + j) * a->lddv;
        for (int64_t d = 0; d < HD; d++) {
            dkj[d] = (float)(dk[j * HD + d] * (double)a->scale);
            dvj[d] = (float)dv[j * HD + d];
        }
    }
}
