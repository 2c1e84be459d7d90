/* gemv_body.h — y = W x (+ bias), the one-row GEMM of token-by-token
 * decoding, written once on a SIMD layer and compiled per ISA
 * (gemv_avx2.c, gemv_avx512.c); mha__gemv_ref (gemv_ref.c) is its oracle.
 * Contract: kernels.h (mha__gemv_fn).
 *
 * Decoding reads every weight once per token: the kernel streams W's rows
 * (row-major (N, K), the layout nn.Linear's weight already has) eight at a
 * time (two fours, far apart) against x held in registers' reach, one
 * vector accumulator per row, so eight independent FMA chains keep the
 * loads in flight. Each y[n] is a
 * fixed sequence of operations (lane-wise FMAs in k order, then the lanes
 * summed in lane order, then the tail in k order, then the bias): it does
 * not depend on n's neighbours or on how the caller splits the rows.
 *
 * The including file includes a layer (simd_*.h) and defines MHA_KSFX, the
 * suffix of the function's name (kernels.h's MHA__KNAME). */
#ifndef VW
#error "include a SIMD layer before gemv_body.h"
#endif
#ifndef MHA_KSFX
#error "define MHA_KSFX before including gemv_body.h"
#endif

#include "kernels.h"
#include "simd_lanes.h"

#include <stdint.h>

/* y[n] from its row's accumulator: the lanes summed in lane order, the
 * tail in k order, then the bias. */
static inline void finish_row(vf a, const float *w, const float *x, int64_t kv, int64_t K, const float *bias,
                              int64_t n, float *y) {
    float s = vf_sum_lanes(a);
    for (int64_t k = kv; k < K; k++) s = __builtin_fmaf(w[k], x[k], s);
    y[n] = bias ? s + bias[n] : s;
}

void MHA__KNAME(gemv)(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw, const float *bias,
                      float *y) {
    const int64_t kv = K / VW * VW;
    /* Rows [0, h) in fours, each four beside the four h rows further on:
     * eight streams far apart keep more reads in flight than four adjacent
     * rows, which the prefetcher sees as one stream (a 2-core Zen 3 read
     * 768-float rows four at a time at 24 GB/s, two such fours 32 rows
     * apart at 29: best of 8 passes each). The same sequence per row, so the
     * same bits. */
    const int64_t h = N / 8 * 4;
    for (int64_t n = 0; n < h; n += 4) {
        const float *w[8];
        for (int r = 0; r < 4; r++) w[r] = W + (n + r) * ldw, w[4 + r] = W + (h + n + r) * ldw;
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        vf a4 = vf_zero(), a5 = vf_zero(), a6 = vf_zero(), a7 = vf_zero();
        for (int64_t k = 0; k < kv; k += VW) {
            const vf xv = vf_loadu(x + k);
            a0 = vf_fmadd(vf_loadu(w[0] + k), xv, a0);
            a1 = vf_fmadd(vf_loadu(w[1] + k), xv, a1);
            a2 = vf_fmadd(vf_loadu(w[2] + k), xv, a2);
            a3 = vf_fmadd(vf_loadu(w[3] + k), xv, a3);
            a4 = vf_fmadd(vf_loadu(w[4] + k), xv, a4);
            a5 = vf_fmadd(vf_loadu(w[5] + k), xv, a5);
            a6 = vf_fmadd(vf_loadu(w[6] + k), xv, a6);
            a7 = vf_fmadd(vf_loadu(w[7] + k), xv, a7);
        }
        const vf acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
        for (int r = 0; r < 8; r++) finish_row(acc[r], w[r], x, kv, K, bias, (r < 4 ? n : h + n) + r % 4, y);
    }
    int64_t n = 2 * h;
    for (; n + 4 <= N; n += 4) {
        const float *w0 = W + n * ldw, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        for (int64_t k = 0; k < kv; k += VW) {
            const vf xv = vf_loadu(x + k);
            a0 = vf_fmadd(vf_loadu(w0 + k), xv, a0);
            a1 = vf_fmadd(vf_loadu(w1 + k), xv, a1);
            a2 = vf_fmadd(vf_loadu(w2 + k), xv, a2);
            a3 = vf_fmadd(vf_loadu(w3 + k), xv, a3);
        }
        finish_row(a0, w0, x, kv, K, bias, n, y);
        finish_row(a1, w1, x, kv, K, bias, n + 1, y);
        finish_row(a2, w2, x, kv, K, bias, n + 2, y);
        finish_row(a3, w3, x, kv, K, bias, n + 3, y);
    }
    for (; n < N; n++) {
        const float *w0 = W + n * ldw;
        vf a0 = vf_zero();
        for (int64_t k = 0; k < kv; k += VW) a0 = vf_fmadd(vf_loadu(w0 + k), vf_loadu(x + k), a0);
        finish_row(a0, w0, x, kv, K, bias, n, y);
    }
}
