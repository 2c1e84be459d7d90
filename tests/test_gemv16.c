/* test_gemv16.c — the 16-bit weights' kernels (kernels.h: gemv_bf16,
 * gemv_f16, widen_bf16, widen_f16) and conversions (kernels/half.h):
 *   half.h    f16 narrowing and widening against the compiler's _Float16
 *             (every 16-bit value; every 61st float32 bit pattern, every
 *             6101st in scripts/test.sh's secondary runs), bf16
 *             round to nearest even on ties, NaN and the largest values;
 *   kernels   for each table this CPU has (ref, avx2, avx512) and the
 *             AVX-512 body on the 16-lane emulation (gen16): the 16-bit
 *             GEMV equals, bit for bit, the same table's F32 GEMV on the
 *             widened weights (the contract: same sums, same order), the
 *             widening equals half.h's, every table is within 1e-5 of
 *             sum |w x| of the reference, and gen16 equals avx512 bit for
 *             bit where the CPU has it; shapes with tails (K % 16 != 0, N %
 *             4 != 0), a row stride above K, with and without bias. */
#include "isa_variants.h"
#include "kernels/half.h"
#include "kernels/kernels.h"
#include "test_util.h"

typedef struct {
    const char *name;
    mha__gemv_fn gemv;
    mha__gemv_bf16_fn gemv_bf16, gemv_f16;
    mha__widen_bf16_fn widen_bf16, widen_f16;
} kset;

static uint64_t rng = 88172645463325252ull;
static float urand(void) { /* xorshift64, in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-52 - 1.0);
}

static void test_half(void) {
    long bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 x;
        const uint16_t hh = (uint16_t)h;
        memcpy(&x, &hh, 2);
        const float a = (float)x, b = mha__f16_to_f32(hh);
        if (a == a && memcmp(&a, &b, 4) != 0) bad++;
        if (a == a && mha__f32_to_f16(b) != hh) bad++; /* round trip */
    }
    /* every 61st float32 bit pattern (70M, 5 s: _Float16's conversion is
     * libgcc's soft float); in the secondary runs every 6101st (the same
     * scalar code, under their flags: every exponent, both roundings) */
    const uint64_t step = test_secondary() ? 6101 : 61;
    for (uint64_t i = 0; i <= 0xffffffffu; i += step) {
        const float f = mha__f32_from_bits((uint32_t)i);
        const _Float16 h = (_Float16)f;
        uint16_t hb, m = mha__f32_to_f16(f);
        memcpy(&hb, &h, 2);
        if (f != f ? (m & 0x7c00u) != 0x7c00u || !(m & 0x3ffu) : hb != m) bad++;
    }
    CHECK(bad == 0, "%ld f16 conversions differ from _Float16's", bad);
    /* bf16: ties to even, NaN, overflow to infinity, exact round trips */
    CHECK(mha__f32_to_bf16(mha__f32_from_bits(0x3f808000u)) == 0x3f80u, "tie to even (down)");
    CHECK(mha__f32_to_bf16(mha__f32_from_bits(0x3f818000u)) == 0x3f82u, "tie to even (up)");
    CHECK(mha__f32_to_bf16(mha__f32_from_bits(0x3f808001u)) == 0x3f81u, "above the tie");
    CHECK(mha__f32_to_bf16(mha__f32_from_bits(0x7fc00001u)) == 0x7fc0u, "NaN");
    CHECK(mha__f32_to_bf16(mha__f32_from_bits(0x7f7fffffu)) == 0x7f80u, "FLT_MAX rounds to infinity");
    long rt = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if ((h & 0x7f80u) != 0x7f80u && mha__f32_to_bf16(mha__bf16_to_f32((uint16_t)h)) != h) rt++;
    CHECK(rt == 0, "%ld bf16 values do not round-trip", rt);
}

/* max |y - ref| / sum |w x| over the rows */
static double rel_err(const float *y, const float *ref, const float *w, const float *x, int64_t N, int64_t K,
                      int64_t ldw) {
    double worst = 0.0;
    for (int64_t n = 0; n < N; n++) {
        double mag = 1e-30;
        for (int64_t k = 0; k < K; k++) mag += fabs((double)w[n * ldw + k] * (double)x[k]);
        const double e = fabs((double)y[n] - (double)ref[n]) / mag;
        if (e > worst) worst = e;
    }
    return worst;
}

static void test_kernels(const kset *ks, int nk, const kset *avx512, const kset *gen16) {
    static const int64_t shapes[][3] = {{1, 1, 1}, {4, 16, 16}, {7, 33, 40}, {13, 100, 100}, {256, 768, 768},
                                        {5, 3072, 3072}, {9, 1, 5},
                                        /* a line's steps, then single vectors (gemv_body.h) */
                                        {16, 48, 50}, {9, 56, 56}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t N = shapes[s][0], K = shapes[s][1], ld = shapes[s][2] + (s % 2); /* strides above K too */
        uint16_t *wb = malloc(sizeof(uint16_t) * (size_t)(N * ld)), *wh = malloc(sizeof(uint16_t) * (size_t)(N * ld));
        float *wbf = malloc(sizeof(float) * (size_t)(N * ld)), *whf = malloc(sizeof(float) * (size_t)(N * ld));
        float *x = malloc(sizeof(float) * (size_t)K), *bias = malloc(sizeof(float) * (size_t)N);
        float *y = malloc(sizeof(float) * (size_t)N), *y2 = malloc(sizeof(float) * (size_t)N);
        float *ref = malloc(sizeof(float) * (size_t)N), *row = malloc(sizeof(float) * (size_t)(N * ld));
        for (int64_t i = 0; i < N * ld; i++) {
            const float v = urand() * 0.25f;
            wb[i] = mha__f32_to_bf16(v), wh[i] = mha__f32_to_f16(v);
            wbf[i] = mha__bf16_to_f32(wb[i]), whf[i] = mha__f16_to_f32(wh[i]);
        }
        for (int64_t k = 0; k < K; k++) x[k] = urand();
        for (int64_t n = 0; n < N; n++) bias[n] = urand();
        for (int fmt = 0; fmt < 2; fmt++) {
            const uint16_t *w16 = fmt ? wh : wb;
            const float *wf = fmt ? whf : wbf;
            for (int b = 0; b < 2; b++) {
                const float *bs = b ? bias : NULL;
                ks[0].gemv(N, K, x, wf, ld, bs, ref); /* the reference on the widened weights */
                for (int t = 0; t < nk; t++) {
                    const kset *k = &ks[t];
                    (fmt ? k->gemv_f16 : k->gemv_bf16)(N, K, x, w16, ld, bs, y);
                    k->gemv(N, K, x, wf, ld, bs, y2);
                    CHECK(!memcmp(y, y2, sizeof(float) * (size_t)N), "%s %s (%lld, %lld): not the F32 GEMV's bits",
                          k->name, fmt ? "f16" : "bf16", (long long)N, (long long)K);
                    const double e = rel_err(y, ref, wf, x, N, K, ld);
                    CHECK(e <= 1e-5, "%s %s (%lld, %lld): %.3g from the reference", k->name, fmt ? "f16" : "bf16",
                          (long long)N, (long long)K, e);
                    (fmt ? k->widen_f16 : k->widen_bf16)(row, w16, (size_t)(N * ld));
                    CHECK(!memcmp(row, wf, sizeof(float) * (size_t)(N * ld)), "%s widen %s", k->name,
                          fmt ? "f16" : "bf16");
                }
                if (avx512 && gen16) {
                    (fmt ? avx512->gemv_f16 : avx512->gemv_bf16)(N, K, x, w16, ld, bs, y);
                    (fmt ? gen16->gemv_f16 : gen16->gemv_bf16)(N, K, x, w16, ld, bs, y2);
                    CHECK(!memcmp(y, y2, sizeof(float) * (size_t)N), "gen16 is not avx512's bits");
                }
            }
        }
        free(wb), free(wh), free(wbf), free(whf), free(x), free(bias), free(y), free(y2), free(ref), free(row);
    }
}

int main(void) {
    test_half();
    kset ks[4];
    int nk = 0;
    const kset *avx512 = NULL;
    static const mha__isa_t isas[3] = {MHA_ISA_REF, MHA_ISA_AVX2, MHA_ISA_AVX512};
    static const char *const names[3] = {"ref", "avx2", "avx512"};
    for (int i = 0; i < 3; i++) {
        const mha__kernels *k = mha__kernels_get(isas[i]);
        if (!k) continue;
        ks[nk] = (kset){names[i], k->gemv, k->gemv_bf16, k->gemv_f16, k->widen_bf16, k->widen_f16};
        if (i == 2) avx512 = &ks[nk];
        nk++;
    }
#if MHA_TEST_EMULATIONS
    ks[nk] = (kset){"gen16", mha__gemv_gen16, mha__gemv_bf16_gen16, mha__gemv_f16_gen16, mha__widen_bf16_gen16,
                    mha__widen_f16_gen16};
    const kset *gen16 = &ks[nk++];
    if (!avx512) printf("no AVX-512 here: its body tested through the emulation (gen16) only\n");
#else
    const kset *gen16 = NULL; /* built without it: only where the real one runs */
    CHECK(avx512 != NULL, AVX512_UNTESTED);
#endif
    test_kernels(ks, nk, avx512, gen16);
    return TEST_END("test_gemv16");
}
