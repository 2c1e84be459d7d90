/* test_threads.c — mha__parallel_units runs every unit once, its threads
 * taking over a held-up thread's share; and results do not depend on the
 * thread count: the
 * projection GEMM (tiled by shape, tests/test_gemm.c checks its values) and
 * its one-row GEMV (decode's), the module forward in eval mode, with
 * PyTorch's dropout mask and with the Philox mask, for MultiHeadAttention
 * and the wrapper; chapter 4's LayerNorm and GELU and a GPTModel's forward
 * (eval, training, the KV cache), whose GELU and residual adds run in the
 * GEMM's tiles: bit for bit with 1, 2, 3 and 4 threads, under every kernel
 * set this CPU has (each named).
 * Without OpenMP there is nothing to compare: the program reports a skip
 * (exit status 77). */
#include "common/common.h"
#include "kernels/drivers.h"
#include "test_util.h"

#include "mha.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static const int THREADS[] = {1, 2, 3, 4};
enum { NTHREADS = 4 };

static void gemm_case(const char *isa, int64_t M, int64_t N, int64_t K, bool tb, bool bias) {
    const int64_t lda = K, ldb = tb ? K : N;
    float *A = malloc(sizeof(float) * (size_t)(M * K)), *W = malloc(sizeof(float) * (size_t)(N * K)),
          *bv = malloc(sizeof(float) * (size_t)N), *c[NTHREADS];
    REQUIRE(A && W && bv, "alloc");
    test_fill(A, (size_t)(M * K), 1);
    test_fill(W, (size_t)(N * K), 2);
    test_fill(bv, (size_t)N, 3);
    for (int t = 0; t < NTHREADS; t++) {
        c[t] = malloc(sizeof(float) * (size_t)(M * N));
        REQUIRE(c[t] && mha_runtime_set_threads(THREADS[t]) == MHA_OK, "threads");
        const mha_status st = bias ? mha__sgemm_bias(false, tb, M, N, K, A, lda, W, ldb, bv, c[t], N)
                                   : mha__sgemm(false, tb, M, N, K, 0.5f, A, lda, W, ldb, 0.0f, c[t], N);
        CHECK(st == MHA_OK, "sgemm: %s", mha_last_error());
    }
    for (int t = 1; t < NTHREADS; t++)
        CHECK(memcmp(c[0], c[t], sizeof(float) * (size_t)(M * N)) == 0,
              "[%s, %s] GEMM %lldx%lldx%lld: 1 vs %d threads bitwise", isa, mha_runtime_blas(),
              (long long)M, (long long)N, (long long)K, THREADS[t]);
    for (int t = 0; t < NTHREADS; t++) free(c[t]);
    free(A), free(W), free(bv);
}

/* mode 0: eval, 1: PyTorch's mask (generator), 2: Philox mask (+ lse). */
static void module_case(const char *isa, mha_kind kind, int64_t d_in, int64_t d_out, int64_t H,
                        int64_t B, int64_t T, int mode) {
    mha_config c = test_config(kind, d_in, d_out, T, mode ? 0.2 : 0.0, H, 1);
    mha_module *m = NULL;
    REQUIRE(mha_module_create_seeded(&c, 7, &m) == MHA_OK, "create: %s", mha_last_error());
    const int64_t w = mha_config_output_width(&c);
    const size_t nx = (size_t)(B * T * d_in), ny = (size_t)(B * T * w), nl = (size_t)(B * H * T);
    float *x = malloc(sizeof(float) * nx), *y[NTHREADS], *lse[NTHREADS];
    REQUIRE(x != NULL, "alloc");
    test_fill(x, nx, 4);
    for (int t = 0; t < NTHREADS; t++) {
        y[t] = malloc(sizeof(float) * ny);
        lse[t] = malloc(sizeof(float) * nl);
        REQUIRE(y[t] && lse[t] && mha_runtime_set_threads(THREADS[t]) == MHA_OK, "threads");
        mha_status st;
        if (mode == 2) {
            mha_forward_opts o = {.training = 1, .rng = MHA_DROPOUT_RNG_PHILOX, .philox_seed = 9,
                                  .philox_offset = 1, .lse = kind == MHA_MULTI_HEAD_ATTENTION ? lse[t] : NULL};
            st = mha_module_forward_ex(m, y[t], x, B, T, &o, NULL, 0);
        } else {
            mha_generator *g = NULL;
            REQUIRE(mha_generator_create(11, &g) == MHA_OK, "generator");
            st = mha_module_forward(m, y[t], x, B, T, mode ? g : NULL, NULL, 0);
            mha_generator_free(g);
        }
        REQUIRE(st == MHA_OK, "forward: %s", mha_last_error());
    }
    static const char *const modes[] = {"eval", "torch mask", "philox"};
    for (int t = 1; t < NTHREADS; t++) {
        CHECK(memcmp(y[0], y[t], sizeof(float) * ny) == 0, "[%s] %s (%lld, %lld) %s: 1 vs %d threads bitwise",
              isa, mha_kind_name(kind), (long long)B, (long long)T, modes[mode], THREADS[t]);
        if (mode == 2 && kind == MHA_MULTI_HEAD_ATTENTION)
            CHECK(memcmp(lse[0], lse[t], sizeof(float) * nl) == 0, "[%s] lse: 1 vs %d threads bitwise",
                  isa, THREADS[t]);
    }
    for (int t = 0; t < NTHREADS; t++) free(y[t]), free(lse[t]);
    free(x);
    mha_module_free(m);
}

/* LayerNorm and GELU over many rows (the drivers' row blocks on threads). */
static void elementwise_case(const char *isa) {
    const int64_t rows = 300, E = 769;
    const size_t n = (size_t)(rows * E);
    float *x = malloc(sizeof(float) * n), *s = malloc(sizeof(float) * (size_t)E), *b = malloc(sizeof(float) * (size_t)E),
          *y[NTHREADS], *g[NTHREADS];
    REQUIRE(x && s && b, "alloc");
    test_fill(x, n, 5);
    test_fill(s, (size_t)E, 6);
    test_fill(b, (size_t)E, 7);
    for (int t = 0; t < NTHREADS; t++) {
        y[t] = malloc(sizeof(float) * n);
        g[t] = malloc(sizeof(float) * n);
        REQUIRE(y[t] && g[t] && mha_runtime_set_threads(THREADS[t]) == MHA_OK, "threads");
        REQUIRE(mha_layernorm_forward(y[t], x, s, b, rows, E) == MHA_OK, "layernorm: %s", mha_last_error());
        mha_gelu_forward(g[t], x, n - 5); /* a ragged last chunk */
    }
    for (int t = 1; t < NTHREADS; t++) {
        CHECK(memcmp(y[0], y[t], sizeof(float) * n) == 0, "[%s] layernorm: 1 vs %d threads bitwise", isa, THREADS[t]);
        CHECK(memcmp(g[0], g[t], sizeof(float) * (n - 5)) == 0, "[%s] gelu: 1 vs %d threads bitwise", isa, THREADS[t]);
    }
    for (int t = 0; t < NTHREADS; t++) free(y[t]), free(g[t]);
    free(x), free(s), free(b);
}

/* A small GPTModel: logits of every position in eval and training mode,
 * and the logits of a KV-cache prefill then one decoded token. */
static void gpt_case(const char *isa, int64_t T) {
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_GPT_MODEL);
    c.vocab_size = 300, c.context_length = 160, c.emb_dim = 96, c.n_heads = 4, c.n_layers = 2, c.qkv_bias = 1;
    mha_gpt *m = NULL;
    REQUIRE(mha_gpt_create_seeded(&c, 3, &m) == MHA_OK, "gpt: %s", mha_last_error());
    const int64_t B = 2, V = c.vocab_size;
    int32_t ids[2 * 160];
    for (int64_t i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    const size_t nl = (size_t)(B * T * V);
    float *lg[NTHREADS][3];
    for (int t = 0; t < NTHREADS; t++) {
        REQUIRE(mha_runtime_set_threads(THREADS[t]) == MHA_OK, "threads");
        for (int mode = 0; mode < 3; mode++) {
            lg[t][mode] = malloc(sizeof(float) * nl);
            REQUIRE(lg[t][mode] != NULL, "alloc");
        }
        mha_generator *g = NULL;
        REQUIRE(mha_generator_create(11, &g) == MHA_OK, "generator");
        REQUIRE(mha_gpt_forward(m, lg[t][0], ids, B, T, 0, NULL) == MHA_OK, "eval: %s", mha_last_error());
        REQUIRE(mha_gpt_forward(m, lg[t][1], ids, B, T, 0, g) == MHA_OK, "train: %s", mha_last_error());
        mha_generator_free(g);
        REQUIRE(mha_gpt_cache_reset(m) == MHA_OK && mha_gpt_cache_feed(m, lg[t][2], ids, T) == MHA_OK &&
                    mha_gpt_cache_feed(m, lg[t][2] + V, ids + T, 1) == MHA_OK,
                "cache: %s", mha_last_error());
    }
    static const char *const modes[] = {"eval", "training", "KV cache"};
    for (int t = 1; t < NTHREADS; t++)
        for (int mode = 0; mode < 3; mode++)
            CHECK(memcmp(lg[0][mode], lg[t][mode], sizeof(float) * (mode == 2 ? (size_t)(2 * V) : nl)) == 0,
                  "[%s] GPTModel T %lld %s logits: 1 vs %d threads bitwise", isa, (long long)T, modes[mode], THREADS[t]);
    for (int t = 0; t < NTHREADS; t++)
        for (int mode = 0; mode < 3; mode++) free(lg[t][mode]);
    mha_gpt_free(m);
}

/* ---- mha__parallel_units ------------------------------------------------- */

typedef struct {
    int64_t n;
    int nt;
    int *runs;      /* per unit: how many times it ran */
    int *thread;    /* per unit: the thread that ran it */
    int64_t fail_at; /* the unit that returns false, or -1 */
    int64_t hold;   /* the unit that waits until another thread took one of its share, or -1 */
    int64_t share0; /* the end of thread 0's share */
    int stolen;     /* a unit of thread 0's share ran on another thread */
    int bad_t;      /* a call with t outside [0, nt) */
} units_probe;

static bool probe_unit(void *arg, int64_t u, int t) {
    units_probe *p = arg;
    if (t < 0 || t >= p->nt) __atomic_store_n(&p->bad_t, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&p->runs[u], 1, __ATOMIC_RELAXED);
    p->thread[u] = t;
    if (t != 0 && u < p->share0) __atomic_store_n(&p->stolen, 1, __ATOMIC_RELEASE);
    if (u == p->hold) /* up to 10 s: long enough for a loaded host to run the others */
        for (int i = 0; i < 10000 && !__atomic_load_n(&p->stolen, __ATOMIC_ACQUIRE); i++)
            nanosleep(&(struct timespec){0, 1000000}, NULL);
    return u != p->fail_at;
}

static void units_case(int64_t n, int nt, int64_t fail_at, int64_t hold) {
    units_probe p = {n, nt, calloc((size_t)n + 1, sizeof(int)), calloc((size_t)n + 1, sizeof(int)),
                     fail_at, hold, nt > 0 ? n / nt : n, 0, 0};
    REQUIRE(p.runs && p.thread, "alloc");
    const bool ok = mha__parallel_units(n, nt, probe_unit, &p);
    int64_t twice = 0, never = 0;
    for (int64_t u = 0; u < n; u++) {
        twice += p.runs[u] > 1;
        never += p.runs[u] == 0;
    }
    CHECK(!p.bad_t, "parallel_units(%lld, %d): a thread number outside [0, %d)", (long long)n, nt, nt);
    CHECK(twice == 0, "parallel_units(%lld, %d): %lld units ran more than once", (long long)n, nt,
          (long long)twice);
    if (fail_at < 0) {
        CHECK(ok && never == 0, "parallel_units(%lld, %d): %s, %lld units never ran", (long long)n, nt,
              ok ? "true" : "false", (long long)never);
    } else {
        CHECK(!ok && p.runs[fail_at] == 1, "parallel_units(%lld, %d): unit %lld returned false, the call %s",
              (long long)n, nt, (long long)fail_at, ok ? "true" : "false");
    }
    if (hold >= 0)
        CHECK(p.stolen, "parallel_units(%lld, %d): thread 0 held up in unit %lld, no other thread took its share",
              (long long)n, nt, (long long)hold);
    free(p.runs);
    free(p.thread);
}

static void units_cases(void) {
    const int nts[] = {1, 2, 3, 4, 70}; /* 70: more threads than shares */
    const int64_t ns[] = {0, 1, 2, 7, 100, 1001};
    for (size_t i = 0; i < sizeof nts / sizeof nts[0]; i++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) units_case(ns[j], nts[i], -1, -1);
    units_case(100, 3, 5, -1);   /* a failure stops the units not yet started */
    units_case(1000, 2, 999, -1);
    units_case(40, 2, -1, 0);    /* thread 0 held up in its first unit: thread 1 takes its share's back */
    units_case(90, 3, -1, 0);
}

int main(void) {
    REQUIRE(mha_runtime_set_threads(3) == MHA_OK, "set 3 threads");
    if (mha_runtime_threads() != 3) TEST_SKIP("test_threads", "built without OpenMP: one thread only");
    units_cases();
    const char *const isas[] = {"ref", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (!TEST_USE_ISA(isas[k])) continue;
        const bool ref = k == 0; /* the reference loops are slow: smaller shapes */
        printf("test_threads: %s kernels, GEMM %s\n", isas[k], mha_runtime_blas());
        gemm_case(isas[k], ref ? 300 : 1500, ref ? 200 : 900, ref ? 64 : 256, true, true);
        gemm_case(isas[k], ref ? 170 : 700, ref ? 130 : 770, ref ? 40 : 128, false, false);
        /* one row (decode's GEMV, its threads taking each other's rows):
         * 66 blocks of 64 rows, the last partial; 4 blocks for 3 and 4
         * threads */
        gemm_case(isas[k], 1, 4173, 768, true, true);
        gemm_case(isas[k], 1, 200, 768, true, true);
        for (int mode = 0; mode < 3; mode++) {
            module_case(isas[k], MHA_MULTI_HEAD_ATTENTION, 64, 128, 2, 3, ref ? 70 : 157, mode);
            module_case(isas[k], MHA_MULTI_HEAD_ATTENTION_WRAPPER, 24, 16, 3, 2, ref ? 40 : 131, mode);
        }
        elementwise_case(isas[k]);
        gpt_case(isas[k], ref ? 40 : 150);
    }
    mha_runtime_set_isa("auto");
    return TEST_END("test_threads");
}
