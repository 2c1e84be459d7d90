/* test_gemm.c — the GEMMs against the reference loops: every transpose
 * combination, alpha, beta (0 with NaN in C: never read), bias, strided
 * operands, odd sizes, k beyond one packed block.
 *   1. mha__sgemm and mha__sgemm_bias (the build's backend, split over
 *      threads; thread-count independence: test_threads);
 *   2. the builtin packed GEMM of every layer directly (gemm_body.h: AVX2,
 *      AVX-512 where the CPU has it, and the AVX-512 tunables on the 16-lane
 *      emulation and on AVX2 registers, which must agree bit for bit), so
 *      that builds on a BLAS test it too;
 *   3. the reference itself against the plain triple loop, bit for bit: its
 *      blocked loops keep each element's sum in order. */
#include "kernels/drivers.h"
#include "test_util.h"
#if defined(MHA_HAVE_AVX2_KERNELS)
#include "isa_variants.h"
#endif

#include <stdlib.h>
#include <string.h>

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* Under AddressSanitizer the largest problem has fewer rows (it was 80% of
 * the test's time there); N = 770 still crosses a packed column block. */
#if defined(__SANITIZE_ADDRESS__)
#define BIG_M 200
#else
#define BIG_M 1030
#endif
static const int64_t sizes[][3] = {{1, 1, 1},       {3, 5, 7},      {17, 33, 65},   {64, 48, 32},
                                   {100, 70, 300},  {257, 130, 64}, {513, 96, 40},  {BIG_M, 770, 33},
                                   {13, 37, 600},   {97, 800, 9},   {6, 16, 257}};
enum { NSIZES = sizeof sizes / sizeof *sizes };

typedef bool (*gemm_fn)(bool, bool, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);

typedef struct {
    int64_t M, N, K, lda, ldb, ldc;
    float *A, *B, *C, *R, *bias;
    size_t nc;
} problem;

static problem make(size_t s, int ta, int tb, int mode) {
    problem p;
    p.M = sizes[s][0], p.N = sizes[s][1], p.K = sizes[s][2];
    p.lda = (ta ? p.M : p.K) + 3, p.ldb = (tb ? p.K : p.N) + 5, p.ldc = p.N + 2;
    const size_t na = (size_t)((ta ? p.K : p.M) * p.lda), nb = (size_t)((tb ? p.N : p.K) * p.ldb);
    p.nc = (size_t)(p.M * p.ldc);
    p.A = malloc(na * 4), p.B = malloc(nb * 4), p.C = malloc(p.nc * 4), p.R = malloc(p.nc * 4);
    p.bias = malloc((size_t)p.N * 4);
    for (size_t i = 0; i < na; i++) p.A[i] = frand();
    for (size_t i = 0; i < nb; i++) p.B[i] = frand();
    for (size_t i = 0; i < p.nc; i++) p.C[i] = p.R[i] = mode == 0 ? NAN : frand(); /* beta 0 never reads C */
    for (int64_t j = 0; j < p.N; j++) p.bias[j] = frand();
    return p;
}

static void drop(problem *p) { free(p->A), free(p->B), free(p->C), free(p->R), free(p->bias); }

/* max |C - R| over C's elements (the padding between rows untouched) */
static float max_err(const problem *p) {
    float err = 0.0f;
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++) {
            const float d = fabsf(p->C[i * p->ldc + j] - p->R[i * p->ldc + j]);
            err = d == d ? fmaxf(err, d) : INFINITY; /* NaN: an error */
        }
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = p->N; j < p->ldc; j++)
            if (memcmp(&p->C[i * p->ldc + j], &p->R[i * p->ldc + j], 4)) return INFINITY;
    return err;
}

/* 1. the library's GEMM entry points */
static void check_entry_points(void) {
    for (size_t s = 0; s < NSIZES; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int mode = 0; mode < 3; mode++) { /* beta 0, beta 0.5, bias */
                    problem p = make(s, ta, tb, mode);
                    if (mode == 2) {
                        CHECK(mha__sgemm_bias(ta, tb, p.M, p.N, p.K, p.A, p.lda, p.B, p.ldb, p.bias, p.C, p.ldc) == MHA_OK, "sgemm_bias");
                        mha__gemm_ref(ta, tb, p.M, p.N, p.K, 1.0f, p.A, p.lda, p.B, p.ldb, 0.0f, p.R, p.ldc);
                        for (int64_t i = 0; i < p.M; i++)
                            for (int64_t j = 0; j < p.N; j++) p.R[i * p.ldc + j] += p.bias[j];
                    } else {
                        const float beta = mode == 0 ? 0.0f : 0.5f;
                        CHECK(mha__sgemm(ta, tb, p.M, p.N, p.K, 0.75f, p.A, p.lda, p.B, p.ldb, beta, p.C, p.ldc) == MHA_OK, "sgemm");
                        mha__gemm_ref(ta, tb, p.M, p.N, p.K, 0.75f, p.A, p.lda, p.B, p.ldb, beta, p.R, p.ldc);
                    }
                    const float err = max_err(&p);
                    CHECK(err <= 1e-5f * (float)p.K, "sgemm %lldx%lldx%lld ta=%d tb=%d mode=%d: max err %g",
                          (long long)p.M, (long long)p.N, (long long)p.K, ta, tb, mode, (double)err);
                    drop(&p);
                }
}

/* Every size x transpose x two modes: 0, alpha 1 and beta 0 (C NaN: never
 * read); 1, alpha 0.75 and beta 0.5. Each problem made, handed to fn with
 * its alpha and beta, dropped. Returns the count. */
typedef struct {
    float alpha, beta;
    int ta, tb, mode;
} variant;
typedef void (*problem_fn)(problem *p, const variant *v, const void *ctx);
static int for_each_problem(problem_fn fn, const void *ctx) {
    int count = 0;
    for (size_t s = 0; s < NSIZES; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int mode = 0; mode < 2; mode++) {
                    problem p = make(s, ta, tb, mode);
                    const variant v = {mode == 0 ? 1.0f : 0.75f, mode == 0 ? 0.0f : 0.5f, ta, tb, mode};
                    fn(&p, &v, ctx);
                    drop(&p);
                    count++;
                }
    return count;
}

#if defined(MHA_HAVE_AVX2_KERNELS)
/* 2. one packed GEMM against the reference; with `twin`, also bit for bit
 * against it (the same body and tunables on another layer). */
typedef struct {
    const char *name, *twin_name;
    gemm_fn f, twin;
} packed_case;

static void packed_one(problem *p, const variant *v, const void *ctx) {
    const packed_case *c = ctx;
    float *C0 = malloc(p->nc * 4);
    REQUIRE(C0 != NULL, "malloc");
    memcpy(C0, p->C, p->nc * 4);
    CHECK(c->f(v->ta, v->tb, p->M, p->N, p->K, v->alpha, p->A, p->lda, p->B, p->ldb, v->beta, p->C, p->ldc),
          "%s ran", c->name);
    mha__gemm_ref(v->ta, v->tb, p->M, p->N, p->K, v->alpha, p->A, p->lda, p->B, p->ldb, v->beta, p->R, p->ldc);
    const float err = max_err(p);
    CHECK(err <= 1e-5f * (float)p->K, "%s %lldx%lldx%lld ta=%d tb=%d mode=%d: max err %g", c->name,
          (long long)p->M, (long long)p->N, (long long)p->K, v->ta, v->tb, v->mode, (double)err);
    if (c->twin) {
        CHECK(c->twin(v->ta, v->tb, p->M, p->N, p->K, v->alpha, p->A, p->lda, p->B, p->ldb, v->beta, C0, p->ldc),
              "%s ran", c->twin_name);
        CHECK(memcmp(C0, p->C, p->nc * 4) == 0, "%s and %s differ at %lldx%lldx%lld ta=%d tb=%d mode=%d",
              c->name, c->twin_name, (long long)p->M, (long long)p->N, (long long)p->K, v->ta, v->tb, v->mode);
    }
    free(C0);
}

static void check_packed(const char *name, gemm_fn f, const char *twin_name, gemm_fn twin) {
    const packed_case c = {name, twin_name, f, twin};
    const int checked = for_each_problem(packed_one, &c);
    printf("test_gemm: packed GEMM %s: %d problems%s%s\n", name, checked, twin ? ", bit for bit with " : "",
           twin ? twin_name : "");
}
#endif

/* 3. the reference against the plain triple loop: the same bits */
static void reference_one(problem *p, const variant *v, const void *ctx) {
    (void)ctx;
    mha__gemm_ref(v->ta, v->tb, p->M, p->N, p->K, v->alpha, p->A, p->lda, p->B, p->ldb, v->beta, p->C, p->ldc);
    int64_t diff = 0;
    for (int64_t i = 0; i < p->M; i++)
        for (int64_t j = 0; j < p->N; j++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < p->K; k++)
                acc += (v->ta ? p->A[k * p->lda + i] : p->A[i * p->lda + k]) *
                       (v->tb ? p->B[j * p->ldb + k] : p->B[k * p->ldb + j]);
            float *r = &p->R[i * p->ldc + j];
            *r = v->beta == 0.0f ? v->alpha * acc : v->alpha * acc + v->beta * *r;
            diff += memcmp(r, &p->C[i * p->ldc + j], 4) != 0;
        }
    CHECK(diff == 0, "reference %lldx%lldx%lld ta=%d tb=%d mode=%d: %lld elements differ from the triple loop",
          (long long)p->M, (long long)p->N, (long long)p->K, v->ta, v->tb, v->mode, (long long)diff);
}

static void check_reference(void) { for_each_problem(reference_one, NULL); }

int main(void) {
    srand(1);
    check_reference();
    check_entry_points();
    printf("test_gemm: GEMM backend %s (thread-count independence: test_threads)\n", mha_runtime_blas());
#if defined(MHA_HAVE_AVX2_KERNELS)
    if (mha__cpu()->avx2) {
        check_packed("avx2", mha__gemm_avx2, NULL, NULL);
#if MHA_TEST_EMULATIONS
        check_packed("gen16 (AVX-512's body, emulated)", mha__gemm_gen16, "avx2w32", mha__gemm_avx2w32);
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
        if (mha__cpu()->avx512)
#if MHA_TEST_EMULATIONS
            check_packed("avx512", mha__gemm_avx512, "gen16", mha__gemm_gen16);
#else
            check_packed("avx512", mha__gemm_avx512, NULL, NULL);
        else
            CHECK(0, AVX512_UNTESTED);
#endif
#endif
    } else {
        printf("test_gemm: no AVX2 on this CPU: the packed GEMMs not run\n");
    }
#endif
    return TEST_END("test_gemm");
}
