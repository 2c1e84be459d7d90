/* test_gemv.c — the one-row GEMV of decoding (kernels.h "gemv",
 * gemv_body.h) of every fast kernel set (avx2, gen16 = the AVX-512 body on
 * the emulation, avx512 where the CPU has it) against the reference's:
 *   1. within a bound of K float roundings of sum |w x| per row, for row
 *      counts around the body's groups (1..17, 63, 64, 65, 200) and row
 *      lengths 1, 7, 8, 9, 31, 771, strided rows (ldw > K), with and without
 *      bias;
 *   2. each y[n] bit for bit what the same kernel gives on row n alone
 *      (N = 1) and on the rows from n on: the contract the drivers rely on
 *      when they split the rows, and what makes the threads' splits
 *      invisible;
 *   3. gen16's bits equal avx512's where the CPU has AVX-512. */
#include "isa_variants.h"
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void check_kernel(const char *name, mha__gemv_fn f, mha__gemv_fn other) {
    static const int64_t Ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 15, 16, 17, 63, 64, 65, 200};
    static const int64_t Ks[] = {1, 7, 8, 9, 24, 31, 56, 771};
    for (size_t a = 0; a < sizeof Ns / sizeof Ns[0]; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++)
            for (int with_bias = 0; with_bias < 2; with_bias++) {
                const int64_t N = Ns[a], K = Ks[b], ldw = K + (b % 2 ? 5 : 0);
                float *W = malloc((size_t)(N * ldw) * sizeof(float)), *x = malloc((size_t)K * sizeof(float));
                float *bias = malloc((size_t)N * sizeof(float)), *y = malloc((size_t)N * sizeof(float));
                float *yr = malloc((size_t)N * sizeof(float)), *y1 = malloc((size_t)N * sizeof(float));
                REQUIRE(W && x && bias && y && yr && y1, "alloc");
                for (int64_t i = 0; i < N * ldw; i++) W[i] = frand();
                for (int64_t i = 0; i < K; i++) x[i] = frand();
                for (int64_t i = 0; i < N; i++) bias[i] = frand();
                const float *bv = with_bias ? bias : NULL;
                f(N, K, x, W, ldw, bv, y);
                mha__gemv_ref(N, K, x, W, ldw, bv, yr);
                int bad = 0, split = 0;
                for (int64_t n = 0; n < N; n++) {
                    double mag = with_bias ? fabs(bias[n]) : 0.0;
                    for (int64_t k = 0; k < K; k++) mag += fabs((double)W[n * ldw + k] * (double)x[k]);
                    if (!(fabs((double)y[n] - (double)yr[n]) <= (double)(K + 2) * (double)FLT_EPSILON * mag + 1e-30)) bad++;
                    float one;
                    f(1, K, x, W + n * ldw, ldw, bv ? bv + n : NULL, &one);
                    if (memcmp(&one, &y[n], sizeof one)) split++;
                }
                for (int64_t n0 = 1; n0 < N && n0 < 9; n0++) { /* the rows from n0 on */
                    f(N - n0, K, x, W + n0 * ldw, ldw, bv ? bv + n0 : NULL, y1);
                    if (memcmp(y1, y + n0, (size_t)(N - n0) * sizeof(float))) split++;
                }
                CHECK(bad == 0, "%s: N %lld K %lld bias %d: %d rows off the reference", name, (long long)N,
                      (long long)K, with_bias, bad);
                CHECK(split == 0, "%s: N %lld K %lld bias %d: %d rows change with the rows around them", name,
                      (long long)N, (long long)K, with_bias, split);
                if (other) {
                    other(N, K, x, W, ldw, bv, y1);
                    CHECK(!memcmp(y1, y, (size_t)N * sizeof(float)), "%s: N %lld K %lld: the other layer's bits differ",
                          name, (long long)N, (long long)K);
                }
                free(W), free(x), free(bias), free(y), free(yr), free(y1);
            }
}

int main(void) {
    const mha__kernels *k2 = mha__kernels_get(MHA_ISA_AVX2), *k5 = mha__kernels_get(MHA_ISA_AVX512);
    if (k2) check_kernel("avx2", k2->gemv, NULL);
#if MHA_TEST_EMULATIONS
    check_kernel("gen16", mha__gemv_gen16, k5 ? k5->gemv : NULL);
#else
    CHECK(k5 != NULL, AVX512_UNTESTED);
#endif
    if (k5) check_kernel("avx512", k5->gemv, NULL);
    printf("kernels tested: %s%s%s\n", k2 ? "avx2, " : "", k5 ? "avx512, " : "",
           MHA_TEST_EMULATIONS ? "gen16" : "(no gen16 in this build)");
    return TEST_END("test_gemv");
}
