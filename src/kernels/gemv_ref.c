/* gemv_ref.c — the reference GEMV (the reference table's gemv kernel,
 * kernels.h): one fused multiply-add chain per output in k order, then the
 * bias. The oracle of gemv_body.h's versions. */
#include "kernels.h"

#include <math.h>

void mha__gemv_ref(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                   const float *bias, float *y) {
    for (int64_t n = 0; n < N; n++) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s = fmaf(W[n * ldw + k], x[k], s);
        y[n] = bias ? s + bias[n] : s;
    }
}
