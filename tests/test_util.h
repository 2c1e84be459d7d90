/* test_util.h — a minimal check harness: CHECK counts, never aborts;
 * REQUIRE stops the program when a precondition fails (nothing after it may
 * use what it checked); TEST_SKIP ends a program that cannot test anything
 * here with status 77, which ctest reports as skipped (SKIP_RETURN_CODE);
 * TEST_END prints "N passed, M failed" and returns the exit status. */
#ifndef MHA_TEST_UTIL_H
#define MHA_TEST_UTIL_H

#include "mha.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_pass, t_fail;

/* The one optimizer configuration holding an AdamW or SGD configuration c,
 * for mha_optimizer_create. */
#define ADAMW_CFG(c) (&(mha_optimizer_config){.kind = MHA_OPTIM_ADAMW, .adamw = (c)})
#define SGD_CFG(c) (&(mha_optimizer_config){.kind = MHA_OPTIM_SGD, .sgd = (c)})

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            t_pass++;                                                     \
        } else {                                                          \
            t_fail++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

#define REQUIRE(cond, ...)                                                \
    do {                                                                  \
        const int require_ok_ = (cond) ? 1 : 0; /* evaluated once */      \
        CHECK(require_ok_, __VA_ARGS__);                                  \
        if (!require_ok_) {                                               \
            printf("%d passed, %d failed (stopped: a precondition failed)\n", t_pass, t_fail); \
            exit(1);                                                      \
        }                                                                 \
    } while (0)

#define TEST_SKIP(name, why)                                              \
    do {                                                                  \
        printf("%s: skipped: %s\n", name, why);                           \
        exit(77);                                                         \
    } while (0)

/* Makes the kernels of ISA `isa` ("ref", "avx2", "avx512") the active ones
 * and returns true; returns false (saying so) where this CPU or build lacks
 * them; any other failure stops the program. */
#define TEST_USE_ISA(isa)                                                 \
    test_use_isa_(isa, __FILE__, __LINE__)
static inline int test_use_isa_(const char *isa, const char *file, int line) {
    const mha_status st = mha_runtime_set_isa(isa);
    if (st == MHA_ERR_UNSUPPORTED) {
        printf("no %s kernels here: %s\n", isa, mha_last_error());
        return 0;
    }
    if (st != MHA_OK || strcmp(mha_runtime_isa(), isa) != 0) {
        fprintf(stderr, "FAIL %s:%d: mha_runtime_set_isa(%s): %s\n", file, line, isa, mha_last_error());
        exit(1);
    }
    return 1;
}

/* True in scripts/test.sh's runs after the release one (MHA_TEST_SECONDARY=1:
 * the forced kernels, OpenBLAS, no-OpenMP and sanitizer runs), as st.py's
 * secondary(): a test that takes it checks the same code paths on fewer
 * cases there (it says which), the release run checking all of them. */
static inline int test_secondary(void) {
    const char *e = getenv("MHA_TEST_SECONDARY");
    return e && strcmp(e, "1") == 0;
}

/* A module configuration in one call: the book's constructor arguments. */
static inline mha_config test_config(mha_kind kind, int64_t d_in, int64_t d_out, int64_t ctx,
                                     double dropout, int64_t heads, int qkv_bias) {
    mha_config c;
    mha_config_init(&c, kind);
    c.d_in = d_in;
    c.d_out = d_out;
    c.context_length = ctx;
    c.dropout = dropout;
    c.num_heads = heads;
    c.qkv_bias = qkv_bias;
    return c;
}

/* x[0..n) uniform in [-1, 1], reproducible from seed (rand()). */
static inline void test_fill(float *x, size_t n, unsigned seed) {
    srand(seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
}

/* Deterministic random numbers (splitmix64) for the kernel tests: one
 * stream per program, seeded with rng_state's initial value. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float rng_uniform(void) { /* [-1, 1) */
    return (float)((double)(rng_u64() >> 40) * 0x1p-23 - 1.0);
}

/* |got - want| in units in the last place of want as a float (the
 * subnormals' spacing below FLT_MIN); 0 == 0 exactly or infinitely wrong. */
static inline double test_ulp_error(float got, double want) {
    if (want == 0.0) return got == 0.0f ? 0.0 : (double)INFINITY;
    int e;
    frexp(want, &e);
    double ulp = ldexp(1.0, e - 24);
    if (ulp < 0x1p-149) ulp = 0x1p-149;
    return fabs((double)got - want) / ulp;
}

#define TEST_END(name)                                                    \
    (printf("%s: %d passed, %d failed\n", name, t_pass, t_fail), t_fail ? 1 : 0)

#endif
