/* elementwise_body.h — chapter 4's elementwise layers (LayerNorm over rows,
 * bias + GELU, residual add with dropout), the backwards of LayerNorm and
 * GELU, the cross-entropy row and the column sums, written once on a SIMD
 * layer and compiled per ISA (elementwise_avx2.c, elementwise_avx512.c;
 * the tests also compile it on the 16-lane emulation). Their oracles are
 * the reference entries in elementwise_ref.c. Contracts: kernels.h.
 *
 * Every output element is a fixed sequence of operations that depends only
 * on its row (LayerNorm) or on itself (the others): not on the rows around
 * it, nor on where a caller cuts the rows or columns. The last partial
 * vector of a row goes through the same vector code on a zero-padded copy,
 * so a column's bits do not depend on whether it falls in a tail either.
 *
 * The including file includes a layer (simd_*.h) and defines MHA_KSFX, the
 * suffix of the functions' names (kernels.h's MHA__KNAME). */
#ifndef VW
#error "include a SIMD layer before elementwise_body.h"
#endif
#ifndef MHA_KSFX
#error "define MHA_KSFX before including elementwise_body.h"
#endif

#include "kernels.h"

#include "simd_exp.h"
#include "simd_lanes.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The first n (< VW) floats at p, zeros after them; and the way back. */
VINL vf ew_load_part(const float *p, int64_t n) {
    float t[VW] = {0};
    memcpy(t, p, (size_t)n * sizeof(float));
    return vf_loadu(t);
}
VINL void ew_store_part(float *p, vf v, int64_t n) {
    float t[VW];
    vf_storeu(t, v);
    memcpy(p, t, (size_t)n * sizeof(float));
}

/* ---- LayerNorm ------------------------------------------------------------
 * Corrected two-pass moments in float, per row: the mean m0 from a plain
 * sum, then d = x - m0 summed both plain (the mean's own rounding error, E
 * times) and squared; mean = m0 + sum(d)/E, var = sum(d^2)/E - (sum(d)/E)^2
 * (biased). Sums: two vector accumulators over pairs of vectors, a last
 * single vector into the first, the two added, lanes in order, the scalar
 * tail in order. 1/sqrt(var + eps) in double. The backward recomputes them
 * with the same function: its xhat is the forward's, bit for bit. */
VINL void ew_moments(const float *xr, int64_t E, float *mean, float *rstd) {
    const int64_t ev = E / VW * VW;
    const float rE = 1.0f / (float)E;
    vf s0 = vf_zero(), s1 = vf_zero();
    int64_t k = 0;
    for (; k + 2 * VW <= ev; k += 2 * VW) {
        s0 = vf_add(s0, vf_loadu(xr + k));
        s1 = vf_add(s1, vf_loadu(xr + k + VW));
    }
    if (k < ev) s0 = vf_add(s0, vf_loadu(xr + k));
    float sum = vf_sum_lanes(vf_add(s0, s1));
    for (k = ev; k < E; k++) sum += xr[k];
    const float m0 = sum * rE;

    const vf mv0 = vf_set1(m0);
    vf d0 = vf_zero(), d1 = vf_zero(), q0 = vf_zero(), q1 = vf_zero();
    for (k = 0; k + 2 * VW <= ev; k += 2 * VW) {
        const vf a = vf_sub(vf_loadu(xr + k), mv0), b = vf_sub(vf_loadu(xr + k + VW), mv0);
        d0 = vf_add(d0, a);
        d1 = vf_add(d1, b);
        q0 = vf_fmadd(a, a, q0);
        q1 = vf_fmadd(b, b, q1);
    }
    if (k < ev) {
        const vf a = vf_sub(vf_loadu(xr + k), mv0);
        d0 = vf_add(d0, a);
        q0 = vf_fmadd(a, a, q0);
    }
    float sd = vf_sum_lanes(vf_add(d0, d1)), sq = vf_sum_lanes(vf_add(q0, q1));
    for (k = ev; k < E; k++) {
        const float a = xr[k] - m0;
        sd += a;
        sq = __builtin_fmaf(a, a, sq);
    }
    const float dm = sd * rE;
    float var = __builtin_fmaf(-dm, dm, sq * rE);
    if (!(var > 0.0f)) var = var == var ? 0.0f : var; /* rounding below 0; NaN stays */
    *mean = m0 + dm;
    *rstd = (float)(1.0 / sqrt((double)var + 1e-5));
}

void MHA__KNAME(layernorm)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t E,
                          const float *scale, const float *shift) {
    const int64_t ev = E / VW * VW;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        float mean, inv;
        ew_moments(xr, E, &mean, &inv);
        const vf mv = vf_set1(mean), iv = vf_set1(inv);
        for (int64_t k = 0; k < ev; k += VW) {
            const vf n = vf_mul(vf_sub(vf_loadu(xr + k), mv), iv);
            vf_storeu(yr + k, vf_fmadd(vf_loadu(scale + k), n, vf_loadu(shift + k)));
        }
        if (ev < E) {
            const int64_t t = E - ev;
            const vf n = vf_mul(vf_sub(ew_load_part(xr + ev, t), mv), iv);
            ew_store_part(yr + ev,
                          vf_fmadd(ew_load_part(scale + ev, t), n, ew_load_part(shift + ev, t)), t);
        }
    }
}

/* ---- bias + GELU ----------------------------------------------------------
 * The reference's operations in its order: 0.5 x (1 + tanh(c (x + k x x x)))
 * with ((k x) x) x, c = f32(sqrt(2/pi)); tanh is simd_exp.h's vf_tanh. */
VINL vf ew_gelu(vf x) {
    const vf c = vf_set1(0x1.988452p-1f); /* sqrtf((float)(2 / pi)) */
    vf k = vf_mul(vf_set1(0.044715f), x);
    k = vf_mul(vf_mul(k, x), x);
    const vf t = vf_tanh(vf_mul(c, vf_add(x, k)));
    return vf_mul(vf_mul(vf_set1(0.5f), x), vf_add(vf_set1(1.0f), t));
}

void MHA__KNAME(bias_gelu)(float *y, int64_t ldy, const float *x, int64_t ldx, int64_t rows, int64_t n,
                          const float *bias) {
    const int64_t nv = n / VW * VW;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * ldx;
        float *yr = y + r * ldy;
        for (int64_t k = 0; k < nv; k += VW) {
            vf v = vf_loadu(xr + k);
            if (bias) v = vf_add(v, vf_loadu(bias + k));
            vf_storeu(yr + k, ew_gelu(v));
        }
        if (nv < n) {
            vf v = ew_load_part(xr + nv, n - nv);
            if (bias) v = vf_add(v, ew_load_part(bias + nv, n - nv));
            ew_store_part(yr + nv, ew_gelu(v), n - nv);
        }
    }
}

/* ---- residual add with dropout ------------------------------------------- */

/* The n (<= VW <= 32) keep bits from bit b on, as the low bits of a word. */
static inline uint32_t ew_bits(const uint64_t *w, int64_t b, int64_t n) {
    const int64_t o = b & 63;
    uint64_t v = w[b >> 6] >> o;
    if (o + n > 64) v |= w[(b >> 6) + 1] << (64 - o);
    return (uint32_t)v;
}

/* x + (y + bias) * (kept ? scale : 0), the keep bits' lane mask from sel
 * (lane i: 1 << i). keep NULL: x + (y + bias). */
VINL vf ew_residual(vf xv, vf yv, const float *bias, int64_t k, int64_t part,
                    const mha__keep_view *keep, int64_t b0, vi sel) {
    if (bias) yv = vf_add(yv, part < VW ? ew_load_part(bias + k, part) : vf_loadu(bias + k));
    if (keep) {
        const vm m = vi_test(vi_set1((int32_t)ew_bits(keep->bits, b0 + k, part)), sel);
        yv = vf_mul(yv, vf_keep(m, vf_set1(keep->scale)));
    }
    return vf_add(xv, yv);
}

void MHA__KNAME(residual_add)(float *x, int64_t ldx, const float *y, int64_t ldy, int64_t rows, int64_t n,
                             const float *bias, const mha__keep_view *keep) {
    static const int32_t lane_bit[32] = {
        1 << 0,  1 << 1,  1 << 2,  1 << 3,  1 << 4,  1 << 5,  1 << 6,  1 << 7,
        1 << 8,  1 << 9,  1 << 10, 1 << 11, 1 << 12, 1 << 13, 1 << 14, 1 << 15,
        1 << 16, 1 << 17, 1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 23,
        1 << 24, 1 << 25, 1 << 26, 1 << 27, 1 << 28, 1 << 29, 1 << 30, INT32_MIN};
    const vi sel = vi_loadu(lane_bit);
    const int64_t nv = n / VW * VW;
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * ldx;
        const float *yr = y + r * ldy;
        const int64_t b0 = keep ? keep->bit0 + r * keep->ld : 0;
        for (int64_t k = 0; k < nv; k += VW)
            vf_storeu(xr + k, ew_residual(vf_loadu(xr + k), vf_loadu(yr + k), bias, k, VW, keep, b0, sel));
        if (nv < n)
            ew_store_part(xr + nv,
                          ew_residual(ew_load_part(xr + nv, n - nv), ew_load_part(yr + nv, n - nv),
                                      bias, nv, n - nv, keep, b0, sel),
                          n - nv);
    }
}

/* ---- LayerNorm backward ---------------------------------------------------
 * Per row: the forward's moments (ew_moments) and its xhat = (x - mean) *
 * rstd; pass 1 sums dxhat = dy * scale and dxhat * xhat in float (two
 * vector accumulators each over pairs of vectors, a last single vector and
 * the zero-padded partial one into the first, lanes in order) and writes
 * dyxhat = dy * xhat; pass 2: dx += rstd * ((dxhat - m1) - xhat * m2), m1
 * and m2 the two sums over E. The padding of the partial vector (dy = 0)
 * adds exact zeros. */
VINL void ew_lnb_sums(vf x, vf dy, vf scale, vf mv, vf iv, vf *s1, vf *s2, vf *dyxh) {
    const vf xh = vf_mul(vf_sub(x, mv), iv), dxh = vf_mul(dy, scale);
    *s1 = vf_add(*s1, dxh);
    *s2 = vf_fmadd(dxh, xh, *s2);
    *dyxh = vf_mul(dy, xh);
}

VINL vf ew_lnb_dx(vf dx, vf x, vf dy, vf scale, vf mv, vf iv, vf m1, vf m2) {
    const vf xh = vf_mul(vf_sub(x, mv), iv);
    return vf_fmadd(iv, vf_fnmadd(xh, m2, vf_sub(vf_mul(dy, scale), m1)), dx);
}

void MHA__KNAME(layernorm_backward)(float *dx, float *dyxhat, const float *dy, const float *x, int64_t rows,
                                   int64_t E, const float *scale) {
    const int64_t ev = E / VW * VW, t = E - ev;
    const float rE = 1.0f / (float)E;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * E, *gy = dy + r * E;
        float *sr = dyxhat + r * E, *gx = dx + r * E;
        float mean, inv;
        ew_moments(xr, E, &mean, &inv);
        const vf mv = vf_set1(mean), iv = vf_set1(inv);
        vf a0 = vf_zero(), a1 = vf_zero(), b0 = vf_zero(), b1 = vf_zero(), p, q;
        int64_t k = 0;
        for (; k + 2 * VW <= ev; k += 2 * VW) {
            ew_lnb_sums(vf_loadu(xr + k), vf_loadu(gy + k), vf_loadu(scale + k), mv, iv, &a0, &b0, &p);
            ew_lnb_sums(vf_loadu(xr + k + VW), vf_loadu(gy + k + VW), vf_loadu(scale + k + VW), mv, iv, &a1,
                        &b1, &q);
            vf_storeu(sr + k, p);
            vf_storeu(sr + k + VW, q);
        }
        if (k < ev) {
            ew_lnb_sums(vf_loadu(xr + k), vf_loadu(gy + k), vf_loadu(scale + k), mv, iv, &a0, &b0, &p);
            vf_storeu(sr + k, p);
        }
        if (t) {
            ew_lnb_sums(ew_load_part(xr + ev, t), ew_load_part(gy + ev, t), ew_load_part(scale + ev, t), mv,
                        iv, &a0, &b0, &p);
            ew_store_part(sr + ev, p, t);
        }
        const vf m1 = vf_set1(vf_sum_lanes(vf_add(a0, a1)) * rE);
        const vf m2 = vf_set1(vf_sum_lanes(vf_add(b0, b1)) * rE);
        for (k = 0; k < ev; k += VW) {
            const vf xv = vf_loadu(xr + k), g = vf_loadu(gy + k), s = vf_loadu(scale + k);
            vf_storeu(gx + k, ew_lnb_dx(vf_loadu(gx + k), xv, g, s, mv, iv, m1, m2));
        }
        if (t) {
            const vf d = ew_lnb_dx(ew_load_part(gx + ev, t), ew_load_part(xr + ev, t),
                                   ew_load_part(gy + ev, t), ew_load_part(scale + ev, t), mv, iv, m1, m2);
            ew_store_part(gx + ev, d, t);
        }
    }
}

/* ---- GELU backward --------------------------------------------------------
 * gelu'(x) = (1 + tanh u) / 2 + x / 2 (1 - tanh^2 u) u', u = c (x + k x^3),
 * u' = c (1 + 3 k x^2). With e = exp(-2u) and s = 1 / (1 + e) = (1 + tanh
 * u) / 2, 1 - s = e s and 1 - tanh^2 u = 4 s (1 - s), so
 *   gelu'(x) = s (1 + 2 x u' e s),
 * in which nothing cancels but the final 1 + (...) where gelu' itself
 * crosses zero (1 + tanh u, formed directly, would lose the digits of
 * gelu' for negative x). x is clamped to [-9, 9] first: gelu' is 1 in
 * float above 9 and below 3e-27 in magnitude under -9, and e s neither
 * overflows nor goes subnormal inside. So +-inf gives 1 and nearly 0 where
 * the reference gives NaN; NaN stays NaN. */
VINL vf ew_gelu_grad(vf x) {
    const vf c = vf_set1(0x1.988452p-1f), k = vf_set1(0.044715f), one = vf_set1(1.0f);
    x = vf_min(vf_set1(9.0f), vf_max(vf_set1(-9.0f), x)); /* NaN stays NaN */
    const vf kx2 = vf_mul(vf_mul(k, x), x);
    const vf u = vf_mul(c, vf_fmadd(kx2, x, x));
    const vf e = vf_exp(vf_mul(vf_set1(-2.0f), u));
    const vf s = vf_div(one, vf_add(one, e));
    const vf du = vf_mul(c, vf_fmadd(vf_set1(3.0f), kx2, one));
    return vf_mul(s, vf_fmadd(vf_mul(vf_add(x, x), du), vf_mul(e, s), one));
}

void MHA__KNAME(gelu_backward)(float *d, const float *f, int64_t n) {
    const int64_t nv = n / VW * VW;
    for (int64_t k = 0; k < nv; k += VW)
        vf_storeu(d + k, vf_mul(vf_loadu(d + k), ew_gelu_grad(vf_loadu(f + k))));
    if (nv < n) {
        const vf g = ew_gelu_grad(ew_load_part(f + nv, n - nv));
        ew_store_part(d + nv, vf_mul(ew_load_part(d + nv, n - nv), g), n - nv);
    }
}

/* ---- cross-entropy over one row -------------------------------------------
 * The reference's steps (elementwise_ref.c), on vectors: mx the largest
 * logit (vf_max skips NaN as the reference's compare does), e_j = exp(z_j
 * - mx) in double (vd_exp_neg, about 1 ULP where the reference calls libm),
 * kept in dz as floats and summed in double in two accumulators (the even
 * and odd halves of each VW block; lanes in order at the end), then dz_j =
 * (float)(dz_j * k), k = inv / s (one double product, one rounding, as
 * there), and dz_y from exp(z_y - mx) / s - 1. A row's tail is padded with
 * -inf (exp gives 0, the sum is unchanged) through the same vector code. */
VINL void ew_xent_block(vd *acc0, vd *acc1, float *e, const float *z, vd mx) {
    const vd e0 = vd_exp_neg(vd_sub(vd_load_f(z), mx));
    const vd e1 = vd_exp_neg(vd_sub(vd_load_f(z + VDW), mx));
    *acc0 = vd_add(*acc0, e0);
    *acc1 = vd_add(*acc1, e1);
    if (e) {
        vd_store_f(e, e0);
        vd_store_f(e + VDW, e1);
    }
}

double MHA__KNAME(xent_row)(float *dz, const float *z, int64_t V, int32_t y, double inv) {
    const int64_t nv = V / VW * VW, t = V - nv;
    float zt[VW], et[VW];
    if (t) {
        for (int i = 0; i < VW; i++) zt[i] = i < t ? z[nv + i] : -INFINITY;
    }
    const double zy = y >= 0 ? (double)z[y] : 0.0; /* before dz (perhaps z) is written */
    vf m0 = vf_set1(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 2 * VW <= nv; j += 2 * VW) {
        m0 = vf_max(vf_loadu(z + j), m0);
        m1 = vf_max(vf_loadu(z + j + VW), m1);
    }
    if (j < nv) m0 = vf_max(vf_loadu(z + j), m0);
    if (t) m1 = vf_max(vf_loadu(zt), m1);
    float mt[VW];
    vf_storeu(mt, vf_max(m0, m1));
    float mf = mt[0];
    for (int i = 1; i < VW; i++) mf = mt[i] > mf ? mt[i] : mf;
    const double mx = (double)mf;

    const vd mxv = vd_set1(mx);
    vd acc0 = vd_set1(0.0), acc1 = acc0;
    for (j = 0; j < nv; j += VW) ew_xent_block(&acc0, &acc1, dz ? dz + j : NULL, z + j, mxv);
    if (t) {
        ew_xent_block(&acc0, &acc1, et, zt, mxv);
        if (dz) memcpy(dz + nv, et, (size_t)t * sizeof(float));
    }
    const double s = vd_sum_lanes(vd_add(acc0, acc1));
    if (dz) {
        const double k = y >= 0 ? inv / s : 0.0;
        const vd kv = vd_set1(k);
        for (j = 0; j < nv; j += VDW) vd_store_f(dz + j, vd_mul(vd_load_f(dz + j), kv));
        for (; j < V; j++) dz[j] = (float)((double)dz[j] * k);
        if (y >= 0) {
            double ey[VDW];
            vd_storeu(ey, vd_exp_neg(vd_set1(zy - mx)));
            dz[y] = (float)((ey[0] / s - 1.0) * inv);
        }
    }
    return y >= 0 ? mx + log(s) - zy : 0.0;
}

/* ---- column sums (a bias's gradient) ----------------------------------------
 * The reference's sums, VDW columns a vector: four rows per pass over s,
 * each s[c] loaded once, then its four rows added one at a time in order
 * (each add one IEEE double add of an exactly widened float, as there), so
 * the bits are the plain loop's whatever the vector width. The columns past
 * the last whole vector go the reference's way. The reference, SSE2 pairs
 * with s stored back every row, summed GPT-2's (8192, 768) out_proj
 * gradient at 3.8 G elements/s on two Zen 5 cores, data in L3. */
void MHA__KNAME(colsum)(double *s, const float *a, int64_t rows, int64_t n, int64_t lda) {
    const int64_t nv = n / VDW * VDW;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *a0 = a + r * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
        for (int64_t c = 0; c < nv; c += VDW) {
            vd x = vd_add(vd_loadu(s + c), vd_load_f(a0 + c));
            x = vd_add(x, vd_load_f(a1 + c));
            x = vd_add(x, vd_load_f(a2 + c));
            vd_storeu(s + c, vd_add(x, vd_load_f(a3 + c)));
        }
        for (int64_t c = nv; c < n; c++)
            s[c] = (((s[c] + (double)a0[c]) + (double)a1[c]) + (double)a2[c]) + (double)a3[c];
    }
    for (; r < rows; r++) {
        const float *ar = a + r * lda;
        for (int64_t c = 0; c < nv; c += VDW) vd_storeu(s + c, vd_add(vd_loadu(s + c), vd_load_f(ar + c)));
        for (int64_t c = nv; c < n; c++) s[c] += (double)ar[c];
    }
}
