/* gemv_body.h — y = W x (+ bias), the one-row GEMM of token-by-token
 * decoding, written once on a SIMD layer and compiled per ISA
 * (gemv_avx2.c, gemv_avx512.c); mha__gemv_ref (gemv_ref.c) is its oracle.
 * Contract: kernels.h (mha__gemv_fn).
 *
 * Decoding reads every weight once per token: the kernel streams W's rows
 * (row-major (N, K), the layout nn.Linear's weight already has) four at a
 * time against x held in registers' reach, one vector accumulator per row,
 * so four independent FMA chains keep the loads in flight. Each y[n] is a
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

void MHA__KNAME(gemv)(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw, const float *bias,
                      float *y) {
    const int64_t kv = K / VW * VW;
    int64_t n = 0;
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
        float s[4] = {vf_sum_lanes(a0), vf_sum_lanes(a1), vf_sum_lanes(a2), vf_sum_lanes(a3)};
        const float *w[4] = {w0, w1, w2, w3};
        for (int r = 0; r < 4; r++) {
            for (int64_t k = kv; k < K; k++) s[r] = __builtin_fmaf(w[r][k], x[k], s[r]);
            y[n + r] = bias ? s[r] + bias[n + r] : s[r];
        }
    }
    for (; n < N; n++) {
        const float *w0 = W + n * ldw;
        vf a0 = vf_zero();
        for (int64_t k = 0; k < kv; k += VW) a0 = vf_fmadd(vf_loadu(w0 + k), vf_loadu(x + k), a0);
        float s = vf_sum_lanes(a0);
        for (int64_t k = kv; k < K; k++) s = __builtin_fmaf(w0[k], x[k], s);
        y[n] = bias ? s + bias[n] : s;
    }
}
