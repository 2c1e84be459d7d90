/* elementwise_ref.c — chapter 4's elementwise layers and their backwards,
 * and chapter 5's cross-entropy row: the reference kernels (plain C, the
 * oracles of elementwise_body.h's versions), and the column sums of the
 * bias gradients. Contracts: kernels.h; the threaded drivers: rows.c. */
#include "kernels.h"

#include <math.h>

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

/* ---- backwards ------------------------------------------------------------- */

/* Per row, in double: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat *
 * xhat)), dxhat = dy * scale, with the mean and rstd of the forward
 * (mha__layernorm_moments_ref, rounded to float as there). */
void mha__layernorm_backward_ref(float *dx, float *dyxhat, const float *dy, const float *x, int64_t rows,
                                 int64_t E, const float *scale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * E, *gy = dy + r * E;
        float *sr = dyxhat + r * E, *gx = dx + r * E;
        float mf, inv;
        mha__layernorm_moments_ref(xr, E, &mf, &inv);
        double s1 = 0.0, s2 = 0.0;
        for (int64_t i = 0; i < E; i++) {
            const float xh = (xr[i] - mf) * inv;
            const double dxh = (double)gy[i] * (double)scale[i];
            s1 += dxh;
            s2 += dxh * (double)xh;
            sr[i] = gy[i] * xh;
        }
        s1 /= (double)E;
        s2 /= (double)E;
        for (int64_t i = 0; i < E; i++) {
            const double xh = (double)((xr[i] - mf) * inv), dxh = (double)gy[i] * (double)scale[i];
            gx[i] += (float)((double)inv * (dxh - s1 - xh * s2));
        }
    }
}

/* d *= gelu'(f), the exact derivative of the tanh form, in double:
 *   0.5 (1 + t) + 0.5 f (1 - t^2) c (1 + 3 k f^2), t = tanh(c (f + k f^3)). */
void mha__gelu_backward_ref(float *d, const float *f, int64_t n) {
    const double c = sqrt(2.0 / 3.14159265358979323846), k = 0.044715;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)f[i], t = tanh(c * (x + k * x * x * x));
        const double g = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * k * x * x);
        d[i] = (float)((double)d[i] * g);
    }
}

/* The row's steps in double with libm's exp and log (the accurate oracle);
 * e_j kept in dz as floats between the two passes, as the vector body
 * keeps them. */
double mha__xent_row_ref(float *dz, const float *z, int64_t V, int32_t y, double inv) {
    const double zy = y >= 0 ? (double)z[y] : 0.0; /* before dz (perhaps z) is written */
    double mx = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < V; j++) mx = (double)z[j] > mx ? (double)z[j] : mx;
    for (int64_t j = 0; j < V; j++) {
        const double e = exp((double)z[j] - mx);
        s += e;
        if (dz) dz[j] = (float)e;
    }
    if (dz) {
        const double k = y >= 0 ? inv / s : 0.0;
        for (int64_t j = 0; j < V; j++) dz[j] = (float)((double)dz[j] * k);
        if (y >= 0) dz[y] = (float)((exp(zy - mx) / s - 1.0) * inv);
    }
    return y >= 0 ? mx + log(s) - zy : 0.0;
}

/* Eight columns a step, a fixed-count inner loop that GCC's -O2 turns into
 * vector converts and adds (SSE2 here): each s[c] still adds its rows in
 * order, one rounding each, so the bits are the plain loop's (and the
 * vector bodies', elementwise_body.h). */
void mha__colsum_ref(double *s, const float *a, int64_t rows, int64_t n, int64_t lda) {
    for (int64_t r = 0; r < rows; r++) {
        const float *ar = a + r * lda;
        int64_t c = 0;
        for (; c + 8 <= n; c += 8)
            for (int k = 0; k < 8; k++) s[c + k] += (double)ar[c + k];
        for (; c < n; c++) s[c] += (double)ar[c];
    }
}

/* Eight rows side by side, each adding its row's products in order: the
 * bits of the plain loop, a row at a time, whose one chain of dependent
 * adds made it latency-bound. The unrolled k keeps the sums in registers
 * (four SSE2 pairs here). GPT-2's 64-dim heads, rows in L1, one Zen 5
 * core: 19 ns a row and head against the plain loop's 32. */
void mha__dot_rows_ref(float *out, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                       int64_t n) {
    int64_t r = 0;
    for (; r + 8 <= rows; r += 8) {
        double s[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
        for (int64_t i = 0; i < n; i++)
#pragma GCC unroll 8 /* s in registers */
            for (int k = 0; k < 8; k++) s[k] += (double)a[(r + k) * lda + i] * (double)b[(r + k) * ldb + i];
        for (int k = 0; k < 8; k++) out[r + k] = (float)s[k];
    }
    for (; r < rows; r++) {
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += (double)a[r * lda + i] * (double)b[r * ldb + i];
        out[r] = (float)s;
    }
}
