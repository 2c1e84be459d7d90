/* gemv_body.h — y = W x (+ bias), the one-row GEMM of token-by-token
 * decoding, written once on a SIMD layer and compiled per ISA
 * (gemv_avx2.c, gemv_avx512.c) for the three weight formats: F32 (gemv),
 * bfloat16 (gemv_bf16) and F16 (gemv_f16), the 16-bit weights widened to
 * F32 as they are loaded (exact: kernels/half.h) and everything else in
 * F32. Also the 16-bit rows' widening (widen_bf16, widen_f16) that the
 * GEMM's tiles and the embeddings use. mha__gemv_ref and the others in
 * gemv_ref.c are the oracles. Contract: kernels.h.
 *
 * Decoding reads every weight once per token: the kernel streams W's rows
 * (row-major (N, K), the layout nn.Linear's weight already has) eight at a
 * time (N/8 rows apart) against x held in registers' reach, one vector
 * accumulator per row, so eight independent FMA chains keep the loads in
 * flight. Each y[n] is a
 * fixed sequence of operations (lane-wise FMAs in k order, then the lanes
 * summed in lane order, then the tail in k order, then the bias): it does
 * not depend on n's neighbours or on how the caller splits the rows.
 *
 * The including file includes a layer (simd_*.h) and defines MHA_KSFX, the
 * suffix of the functions' names (kernels.h's MHA__KNAME). */
#ifndef VW
#error "include a SIMD layer before gemv_body.h"
#endif
#ifndef MHA_KSFX
#error "define MHA_KSFX before including gemv_body.h"
#endif

#include "half.h"
#include "kernels.h"
#include "simd_lanes.h"

#include <stdint.h>

/* The weight formats; each entry below passes its own as a constant, and
 * the always-inline loads fold to the one it names. */
enum { W_F32, W_BF16, W_F16 };

VINL vf w_vec(const void *w, int64_t k, int fmt) {
    if (fmt == W_F32) return vf_loadu((const float *)w + k);
    if (fmt == W_BF16) return vf_load_bf16((const uint16_t *)w + k);
    return vf_load_f16((const uint16_t *)w + k);
}

VINL float w_one(const void *w, int64_t k, int fmt) {
    if (fmt == W_F32) return ((const float *)w)[k];
    if (fmt == W_BF16) return mha__bf16_to_f32(((const uint16_t *)w)[k]);
    return mha__f16_to_f32(((const uint16_t *)w)[k]);
}

VINL const void *w_row(const void *W, int64_t n, int64_t ldw, int fmt) {
    return fmt == W_F32 ? (const void *)((const float *)W + n * ldw) : (const void *)((const uint16_t *)W + n * ldw);
}

/* y[n] from its row's lanes' sum s (vf_sum_lanes): the tail in k order,
 * then the bias. */
VINL void finish_row(float s, const void *w, const float *x, int64_t kv, int64_t K, const float *bias, int64_t n,
                     float *y, int fmt) {
    for (int64_t k = kv; k < K; k++) s = __builtin_fmaf(w_one(w, k, fmt), x[k], s);
    y[n] = bias ? s + bias[n] : s;
}

/* No software prefetch: the caller (gemm_tiles.c's gemv_rows) hands each
 * thread long runs of rows, whose eight streams the hardware prefetchers
 * follow. The 16-bit weights used to come in 64-row blocks, one call each,
 * their 8-row streams prefetched 512 bytes ahead; as runs without the
 * prefetch, GPT-2 124M's bf16 decode on a 2-core Zen 5 took 6.21, 6.00 and
 * 5.57 mean ms/token against 6.35, 6.26 and 5.71 (3 runs of 10 alternated
 * rounds each in one process; minimums 5.65, 5.66, 5.14 against 6.17,
 * 5.91, 5.40). Prefetching F32 runs was slower too: their GEMVs alone took
 * 1.029 of a streaming read prefetched against 0.966 without (one run of a
 * build that chose the variant at run time). */
VINL void gemv_any(int64_t N, int64_t K, const float *x, const void *W, int64_t ldw, const float *bias, float *y,
                   int fmt) {
    const int64_t kv = K / VW * VW;
    /* Eight rows at once, h = N/8 apart (rows i, i + h, ..., i + 7h for i
     * < h): eight streams far apart keep more reads in flight than four
     * adjacent rows, which the prefetcher sees as one stream (one thread
     * of a 2-core Zen 3 read 64-row blocks of 768-float rows at 17.8 GB/s
     * as two fours 32 rows apart, at 25.4 as eight rows 8 apart: best of 8
     * passes over 480 MiB). The same sequence per row, so the same bits. */
    const int64_t h = N / 8;
    /* A step takes one 64-byte line from each row (a vector of F32 on
     * AVX-512, two of 16-bit weights; twice that on AVX2), its vectors
     * into the row's one accumulator in k order: the same sequence as a
     * vector per step. GPT-2 124M's bf16 GEMVs on a 2-core Zen 5 (in one
     * process, 20 alternated rounds, twice): 4-5% faster than half a line
     * per step. */
    const int64_t line = fmt == W_F32 ? 64 / 4 : 64 / 2, step = line >= VW ? line : VW, ks = K / step * step;
    for (int64_t i = 0; i < h; i++) {
        const void *w[8];
        for (int r = 0; r < 8; r++) w[r] = w_row(W, i + r * h, ldw, fmt);
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        vf a4 = vf_zero(), a5 = vf_zero(), a6 = vf_zero(), a7 = vf_zero();
#define GEMV_VEC8(k)                                         \
    do {                                                     \
        const vf xv = vf_loadu(x + (k));                     \
        a0 = vf_fmadd(w_vec(w[0], (k), fmt), xv, a0);        \
        a1 = vf_fmadd(w_vec(w[1], (k), fmt), xv, a1);        \
        a2 = vf_fmadd(w_vec(w[2], (k), fmt), xv, a2);        \
        a3 = vf_fmadd(w_vec(w[3], (k), fmt), xv, a3);        \
        a4 = vf_fmadd(w_vec(w[4], (k), fmt), xv, a4);        \
        a5 = vf_fmadd(w_vec(w[5], (k), fmt), xv, a5);        \
        a6 = vf_fmadd(w_vec(w[6], (k), fmt), xv, a6);        \
        a7 = vf_fmadd(w_vec(w[7], (k), fmt), xv, a7);        \
    } while (0)
        int64_t k = 0;
        for (; k < ks; k += step) {
#pragma GCC unroll 4
            for (int64_t j = 0; j < step; j += VW) GEMV_VEC8(k + j);
        }
        for (; k < kv; k += VW) GEMV_VEC8(k);
#undef GEMV_VEC8
        const vf acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
        float s[8];
        vf_sum_lanes8(acc, s);
        for (int r = 0; r < 8; r++) finish_row(s[r], w[r], x, kv, K, bias, i + r * h, y, fmt);
    }
    int64_t n = 8 * h;
    for (; n + 4 <= N; n += 4) {
        const void *w0 = w_row(W, n, ldw, fmt), *w1 = w_row(W, n + 1, ldw, fmt), *w2 = w_row(W, n + 2, ldw, fmt),
                   *w3 = w_row(W, n + 3, ldw, fmt);
        vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
        for (int64_t k = 0; k < kv; k += VW) {
            const vf xv = vf_loadu(x + k);
            a0 = vf_fmadd(w_vec(w0, k, fmt), xv, a0);
            a1 = vf_fmadd(w_vec(w1, k, fmt), xv, a1);
            a2 = vf_fmadd(w_vec(w2, k, fmt), xv, a2);
            a3 = vf_fmadd(w_vec(w3, k, fmt), xv, a3);
        }
        finish_row(vf_sum_lanes(a0), w0, x, kv, K, bias, n, y, fmt);
        finish_row(vf_sum_lanes(a1), w1, x, kv, K, bias, n + 1, y, fmt);
        finish_row(vf_sum_lanes(a2), w2, x, kv, K, bias, n + 2, y, fmt);
        finish_row(vf_sum_lanes(a3), w3, x, kv, K, bias, n + 3, y, fmt);
    }
    for (; n < N; n++) {
        const void *w0 = w_row(W, n, ldw, fmt);
        vf a0 = vf_zero();
        for (int64_t k = 0; k < kv; k += VW) a0 = vf_fmadd(w_vec(w0, k, fmt), vf_loadu(x + k), a0);
        finish_row(vf_sum_lanes(a0), w0, x, kv, K, bias, n, y, fmt);
    }
}

void MHA__KNAME(gemv)(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw, const float *bias,
                      float *y) {
    gemv_any(N, K, x, W, ldw, bias, y, W_F32);
}

void MHA__KNAME(gemv_bf16)(int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw, const float *bias,
                           float *y) {
    gemv_any(N, K, x, W, ldw, bias, y, W_BF16);
}

void MHA__KNAME(gemv_f16)(int64_t N, int64_t K, const float *x, const uint16_t *W, int64_t ldw, const float *bias,
                          float *y) {
    gemv_any(N, K, x, W, ldw, bias, y, W_F16);
}

VINL void widen_any(float *dst, const uint16_t *src, size_t n, int fmt) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) vf_storeu(dst + i, w_vec(src, (int64_t)i, fmt));
    for (; i < n; i++) dst[i] = w_one(src, (int64_t)i, fmt);
}

void MHA__KNAME(widen_bf16)(float *dst, const uint16_t *src, size_t n) { widen_any(dst, src, n, W_BF16); }
void MHA__KNAME(widen_f16)(float *dst, const uint16_t *src, size_t n) { widen_any(dst, src, n, W_F16); }
