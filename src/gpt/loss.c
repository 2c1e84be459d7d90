/* loss.c — the mean cross-entropy (F.cross_entropy, ignore_index -100)
 * and the GPT training step it ends: forward with a tape, the loss and its
 * gradient over the tape's logits, the backward (gpt_backward.c). */
#include "gpt.h"

#include "common/common.h"
#include "kernels/kernels.h"

#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* ---- cross-entropy ------------------------------------------------------------- */

#define MHA_IGNORE_INDEX (-100)

/* The number of counted targets, or an error naming the bad one. */
static mha_status count_targets(const int32_t *targets, int64_t N, int64_t V, int64_t *count) {
    int64_t n = 0;
    for (int64_t r = 0; r < N; r++) {
        if (targets[r] == MHA_IGNORE_INDEX) continue;
        if (targets[r] < 0 || targets[r] >= V)
            return mha__fail(MHA_ERR_ARGUMENT, "target %d at position %lld is outside [0, %lld) (and not -100)", targets[r],
                             (long long)r, (long long)V);
        n++;
    }
    if (n == 0) return mha__fail(MHA_ERR_ARGUMENT, "every target is -100 (ignored): the mean loss is undefined");
    *count = n;
    return MHA_OK;
}

/* *sum = the rows' losses added in row order (double); dlogits (or NULL)
 * their gradient scaled by inv, 1 / the mean's divisor. Targets checked.
 * Each row is one call of the active table's xent_row kernel. */
static mha_status cross_entropy_sum(double *sum_out, float *dlogits, const float *logits, const int32_t *targets,
                                    int64_t N, int64_t V, double inv) {
    double *row = mha__alloc((size_t)N * sizeof(double));
    if (!row) return mha__nomem("out of memory allocating the loss of %lld rows", (long long)N);
    const mha__kernels *k = mha__kernels_active();
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if ((double)N * (double)V > 1e5)
#endif
    for (int64_t r = 0; r < N; r++) {
        const int32_t y = targets[r] == MHA_IGNORE_INDEX ? -1 : targets[r];
        row[r] = k->xent_row(dlogits ? dlogits + r * V : NULL, logits + r * V, V, y, inv);
    }
    double sum = 0.0;
    for (int64_t r = 0; r < N; r++) sum += row[r];
    mha__free(row);
    *sum_out = sum;
    return MHA_OK;
}

mha_status mha_cross_entropy(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t N,
                             int64_t V) {
    if (!loss || !logits || !targets) return mha__fail(MHA_ERR_ARGUMENT, "loss, logits or targets is NULL");
    if (N < 1 || V < 1) return mha__fail(MHA_ERR_SHAPE, "rows (%lld) and classes (%lld) must be positive", (long long)N, (long long)V);
    int64_t count = 0;
    mha_status st = count_targets(targets, N, V, &count);
    if (st != MHA_OK) return st;
    const double inv = 1.0 / (double)count;
    double sum = 0.0;
    if ((st = cross_entropy_sum(&sum, dlogits, logits, targets, N, V, inv)) != MHA_OK) return st;
    *loss = (float)(sum * inv);
    return MHA_OK;
}

/* The training step's rows: the forward of windows [first, first + n) of
 * a batch of `batch` (dropout drawn for the whole batch), the rows'
 * cross-entropies added into *sum, the gradient of the mean over total
 * targets (0: the rows' own count, returned in *total_out) through the
 * backward. The tape is consumed. */
static mha_status loss_rows(mha_gpt *m, double *sum, int64_t *total_out, float *logits, const int32_t *idx,
                            const int32_t *targets, int64_t n, int64_t T, int64_t first, int64_t batch, int64_t total,
                            mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (m->cfg.kind != MHA_GPT_MODEL) return mha__fail(MHA_ERR_UNSUPPORTED, "a TransformerBlock has no logits");
    int64_t count;
    mha_status st = mha__gpt_check_tokens(m, n, T);
    if (st == MHA_OK) st = count_targets(targets, n * T, m->V, &count); /* before any draw */
    if (st != MHA_OK) return st;
    if (!total) total = count;
    if (total < count)
        return mha__fail(MHA_ERR_ARGUMENT, "the mean's %lld targets are fewer than these windows' %lld", (long long)total,
                         (long long)count);
    if ((st = mha__gpt_forward_share(m, logits, idx, n, T, first, batch, dropout_rng, tape)) != MHA_OK) return st;
    if ((st = cross_entropy_sum(sum, tape->logits, tape->logits, targets, n * T, m->V, 1.0 / (double)total)) != MHA_OK) {
        tape->m = NULL;
        return st;
    }
    st = mha__gpt_model_backward(m, tape, tape->logits);
    tape->m = NULL; /* consumed (the logits are now their gradient) */
    *total_out = total;
    return st;
}

mha_status mha_gpt_loss_backward_share(mha_gpt *m, double *loss_sum, const int32_t *idx, const int32_t *targets,
                                       int64_t n, int64_t T, const mha_batch_share *share, mha_generator *dropout_rng,
                                       mha_gpt_tape *tape) {
    if (!m || !loss_sum || !targets || !share) return mha__fail(MHA_ERR_ARGUMENT, "model, loss_sum, targets or share is NULL");
    if (share->batch < 1 || share->first < 0 || n < 0 || share->first > share->batch - n)
        return mha__fail(MHA_ERR_SHAPE, "windows [%lld, %lld) are not inside a batch of %lld", (long long)share->first,
                         (long long)(share->first + n), (long long)share->batch);
    if (T < 0 || (double)share->batch * (double)T > (double)INT64_MAX / 2)
        return mha__fail(MHA_ERR_OVERFLOW, "a batch of %lld windows of %lld tokens overflows", (long long)share->batch,
                         (long long)T);
    int64_t total;
    return loss_rows(m, loss_sum, &total, NULL, idx, targets, n, T, share->first, share->batch,
                     share->targets ? share->targets : share->batch * T, dropout_rng, tape);
}

mha_status mha_gpt_loss_backward(mha_gpt *m, float *loss, float *logits, const int32_t *idx, const int32_t *targets,
                                 int64_t B, int64_t T, mha_generator *dropout_rng, mha_gpt_tape *tape) {
    if (!m || !loss || !targets) return mha__fail(MHA_ERR_ARGUMENT, "model, loss or targets is NULL");
    double sum = 0.0;
    int64_t count = 0;
    const mha_status st = loss_rows(m, &sum, &count, logits, idx, targets, B, T, 0, B, 0, dropout_rng, tape);
    if (st == MHA_OK) *loss = (float)(sum * (1.0 / (double)count));
    return st;
}
