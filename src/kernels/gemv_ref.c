/* gemv_ref.c — the reference GEMV (the reference table's gemv kernels,
 * kernels.h) for F32, bfloat16 and F16 weights: one fused multiply-add
 * chain per output in k order, then the bias; and the 16-bit rows'
 * widening. The oracles of gemv_body.h's versions. */
#include "half.h"
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

/* The 16-bit forms: each weight widened (exactly) as it is used, then the F32 chain. */
static void gemv16(int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw, const float *bias,
                   float *y, float (*widen)(uint16_t)) {
    for (int64_t n = 0; n < N; n++) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s = fmaf(widen(W[n * ldw + k]), x[k], s);
        y[n] = bias ? s + bias[n] : s;
    }
}

void mha__gemv_bf16_ref(int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw,
                        const float *bias, float *y) {
    gemv16(N, K, x, W, ldw, bias, y, mha__bf16_to_f32);
}

void mha__gemv_f16_ref(int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw,
                       const float *bias, float *y) {
    gemv16(N, K, x, W, ldw, bias, y, mha__f16_to_f32);
}

void mha__widen_bf16_ref(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mha__bf16_to_f32(src[i]);
}

void mha__widen_f16_ref(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = mha__f16_to_f32(src[i]);
}
