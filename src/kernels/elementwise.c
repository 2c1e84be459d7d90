/* elementwise.c — chapter 4's elementwise layers: the reference kernels
 * (plain C, the oracles of elementwise_body.h's versions) and the row
 * drivers that run the active table's kernels on OpenMP threads.
 * Contracts: kernels.h. */
#include "common/common.h"
#include "kernels.h"

#include <math.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* Mean and variance in double (two passes), so the reference is the
 * accurate one the fast kernels are measured against. */
void mha__layernorm_moments_ref(const float *x, int64_t E, float *mean, float *rstd) {
    double m = 0.0, var = 0.0;
    for (int64_t i = 0; i < E; i++) m += (double)x[i];
    m /= (double)E;
    for (int64_t i = 0; i < E; i++) {
        const double d = (double)x[i] - m;
        var += d * d;
    }
    var /= (double)E;
    *mean = (float)m;
    *rstd = (float)(1.0 / sqrt(var + 1e-5));
}

void mha__layernorm_ref(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t E,
                        const float *scale, const float *shift) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        float mf, inv;
        mha__layernorm_moments_ref(xr, E, &mf, &inv);
        for (int64_t i = 0; i < E; i++) yr[i] = fmaf(scale[i], (xr[i] - mf) * inv, shift[i]);
    }
}

/* The book's GELU in float, as torch evaluates it op by op. */
void mha__bias_gelu_ref(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t n,
                        const float *bias) {
    const float c = sqrtf((float)(2.0 / 3.14159265358979323846)), k = 0.044715f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            const float v = bias ? x[r * ldx + i] + bias[i] : x[r * ldx + i];
            y[r * ldy + i] = 0.5f * v * (1.0f + tanhf(c * (v + k * v * v * v)));
        }
}

void mha__residual_add_ref(float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows, int64_t n,
                           const float *bias, const mha__keep_view *keep) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < n; i++) {
            float t = bias ? y[r * ldy + i] + bias[i] : y[r * ldy + i];
            if (keep) {
                const int64_t b = keep->bit0 + r * keep->ld + i;
                t *= ((keep->bits[b >> 6] >> (b & 63)) & 1u) ? keep->scale : 0.0f;
            }
            x[r * ldx + i] += t;
        }
}

/* ---- drivers --------------------------------------------------------------- */

/* Rows per task and elements per GELU task: fixed, so the split never
 * depends on the thread count (the kernels' results do not depend on it
 * either; fixed blocks keep it obvious). */
enum { LN_ROWS = 8, GELU_CHUNK = 1 << 14 };

void mha__layernorm_rows(float *y, const float *x, const float *scale, const float *shift,
                         int64_t rows, int64_t E) {
    const mha__kernels *k = mha__kernels_active();
    const int64_t nblk = (rows + LN_ROWS - 1) / LN_ROWS;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (nblk > 1 && (double)rows * (double)E > 1e5)
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t r0 = b * LN_ROWS, n = rows - r0 < LN_ROWS ? rows - r0 : LN_ROWS;
        k->layernorm(y + r0 * E, E, x + r0 * E, E, n, E, scale, shift);
    }
}

void mha__gelu_n(float *y, const float *x, size_t n) {
    const mha__kernels *k = mha__kernels_active();
    const int64_t nblk = (int64_t)((n + GELU_CHUNK - 1) / GELU_CHUNK);
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (nblk > 1)
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const size_t i = (size_t)b * GELU_CHUNK, m = n - i < GELU_CHUNK ? n - i : GELU_CHUNK;
        k->bias_gelu(y + i, 0, x + i, 0, 1, (int64_t)m, NULL);
    }
}

void mha__dropout_apply_n(float *out, const float *in, const uint64_t *bits, size_t n, float scale) {
    const mha__kernels *k = mha__kernels_active();
    const int64_t nblk = (int64_t)((n + GELU_CHUNK - 1) / GELU_CHUNK); /* whole words: 2^14 is 256 of them */
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (nblk > 1)
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const size_t i = (size_t)b * GELU_CHUNK, m = n - i < GELU_CHUNK ? n - i : GELU_CHUNK;
        k->dropout_apply(out + i, in + i, bits + i / 64, m, scale);
    }
}
