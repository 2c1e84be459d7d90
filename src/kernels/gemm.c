/* gemm.c — the projection GEMMs.
 *
 * Backends (chosen at build time, -DMHA_BLAS): oneDNN's dnnl_sgemm (linked;
 * the default), OpenBLAS (loaded at first use, see load_openblas) or the
 * portable builtin kernel. The reference table (MHA_ISA=ref) runs the
 * reference loops instead.
 *
 * Determinism by design: mha__sgemm cuts C into tiles whose sizes are a
 * function of (M, N, K) alone (tile_plan), computes each tile with one
 * single-threaded backend call, and deals the tiles to OpenMP threads. An
 * element of C is therefore computed by the same call on the same operands
 * whatever the thread count, and OpenBLAS's or oneDNN's own threading (whose
 * splits depend on the thread count) never runs. The library sets no
 * environment variable: a user's OPENBLAS_CORETYPE or ONEDNN_MAX_CPU_ISA is
 * the backend's business. */
#include "common/common.h"
#include "kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#if defined(MHA_HAVE_ONEDNN)
#include <dnnl.h>
#endif
#if defined(MHA_HAVE_OPENBLAS)
#include <dlfcn.h>
#endif
#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* Element (i, j) of op(X) for a row-major X with leading dimension ld. */
static inline float at(const float *X, int64_t ld, bool trans, int64_t i, int64_t j) {
    return trans ? X[j * ld + i] : X[i * ld + j];
}

void mha__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B,
                    int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int64_t p = 0; p < K; p++)
                acc += at(A, lda, trans_a, i, p) * at(B, ldb, trans_b, p, j);
            float *c = &C[i * ldc + j];
            *c = (beta == 0.0f) ? alpha * acc : alpha * acc + beta * *c;
        }
    }
}

/* Portable blocked kernel for builds without BLAS: the inner loop is an
 * axpy over a block of C's row that the compiler vectorises. */
static void sgemm_builtin(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                          float alpha, const float *A, int64_t lda, const float *B,
                          int64_t ldb, float beta, float *C, int64_t ldc) {
    enum { NB = 256 };
    float acc[NB];
    for (int64_t j0 = 0; j0 < N; j0 += NB) {
        int64_t nb = N - j0 < NB ? N - j0 : NB;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < nb; j++) acc[j] = 0.0f;
            for (int64_t p = 0; p < K; p++) {
                float a = at(A, lda, trans_a, i, p);
                if (!trans_b) {
                    const float *b = &B[p * ldb + j0];
                    for (int64_t j = 0; j < nb; j++) acc[j] += a * b[j];
                } else {
                    for (int64_t j = 0; j < nb; j++) acc[j] += a * B[(j0 + j) * ldb + p];
                }
            }
            float *c = &C[i * ldc + j0];
            if (beta == 0.0f)
                for (int64_t j = 0; j < nb; j++) c[j] = alpha * acc[j];
            else
                for (int64_t j = 0; j < nb; j++) c[j] = alpha * acc[j] + beta * c[j];
        }
    }
}

/* ---- the backend ----------------------------------------------------------- */

static struct {
    char name[96];
#if defined(MHA_HAVE_OPENBLAS)
    void (*sgemm)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                  float, float *, int);
#endif
} backend;
static pthread_once_t backend_once = PTHREAD_ONCE_INIT;

#if defined(MHA_HAVE_ONEDNN)
void mha__sgemm_backend_cap_avx2(void) {
    /* Effective only before oneDNN's first use (the dispatch calls this
     * before any GEMM); a user's ONEDNN_MAX_CPU_ISA may cap it further.
     * mha_runtime_blas() reports the ISA oneDNN then runs. */
    (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
}

static const char *onednn_isa(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse4.1";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_amx";
    default: return "other";
    }
}

static void load_backend(void) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(backend.name, sizeof backend.name, "onednn %d.%d.%d (%s)", v->major, v->minor,
             v->patch, onednn_isa(dnnl_get_effective_cpu_isa()));
}

static bool call_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc) {
    return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                      beta, C, ldc) == dnnl_success;
}

#elif defined(MHA_HAVE_OPENBLAS)
/* OpenBLAS is loaded on first use rather than linked, so that a program
 * that never computes does not start its thread pool. It picks its kernels
 * itself (OPENBLAS_CORETYPE, when the user sets it, decides); mha calls it
 * single-threaded from its own threads. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

void mha__sgemm_backend_cap_avx2(void) {} /* OpenBLAS takes no such order */

static void load_backend(void) {
    void *h = dlopen(MHA_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h) {
        void *sgemm = dlsym(h, "cblas_sgemm");
        void (*set_threads)(int) = (void (*)(int))(uintptr_t)dlsym(h, "openblas_set_num_threads");
        char *(*corename)(void) = (char *(*)(void))(uintptr_t)dlsym(h, "openblas_get_corename");
        if (sgemm && set_threads) {
            set_threads(1); /* mha splits the work itself */
            backend.sgemm = (void (*)(int, int, int, int, int, int, float, const float *, int,
                                      const float *, int, float, float *, int))(uintptr_t)sgemm;
            snprintf(backend.name, sizeof backend.name, "openblas (%s)",
                     corename ? corename() : "?");
            return;
        }
        dlclose(h);
    }
    snprintf(backend.name, sizeof backend.name, "builtin (%s not loadable)",
             MHA_OPENBLAS_SONAME);
}

static bool call_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc) {
    if (!backend.sgemm || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX)
        return false;
    backend.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                  trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M, (int)N, (int)K, alpha, A,
                  (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return true;
}

#else
void mha__sgemm_backend_cap_avx2(void) {}

static void load_backend(void) { snprintf(backend.name, sizeof backend.name, "builtin"); }

static bool call_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                         float beta, float *C, int64_t ldc) {
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return false;
}
#endif

const char *mha__sgemm_backend_name(void) {
    pthread_once(&backend_once, load_backend);
    return backend.name;
}

void mha__sgemm_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float beta, float *C, int64_t ldc) {
    pthread_once(&backend_once, load_backend);
    if (!call_backend(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        sgemm_builtin(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- tiles ------------------------------------------------------------------- */

/* Tile targets (measured on the project machines; see bench/bench_sgemm):
 * large enough that the backend's packing of A and B is a few percent of a
 * tile's work, small enough for a few tiles per thread on big GEMMs. On a
 * 2-core Zen 3 with oneDNN, 512 x 768 tiles ran 135-153 GFLOP/s at the
 * projection shapes against 139-151 for one multi-threaded dnnl_sgemm call;
 * 256 x 768, 384 x 384 and 768 x 768 were within a few percent. */
#ifndef MHA_GEMM_TILE_M
#define MHA_GEMM_TILE_M 512
#endif
#ifndef MHA_GEMM_TILE_N
#define MHA_GEMM_TILE_N 768
#endif

typedef struct {
    int64_t mb, nb;   /* tile size (the last row/column of tiles may be smaller) */
    int64_t nm, nn;   /* tiles down and across */
} tile_plan;

/* n cut into ceil(n / target) near-equal parts, rounded up to 16. */
static void cut(int64_t n, int64_t target, int64_t *size, int64_t *count) {
    const int64_t parts = (n + target - 1) / target;
    int64_t s = (n + parts - 1) / parts;
    s = (s + 15) / 16 * 16;
    *size = s;
    *count = (n + s - 1) / s;
}

/* A function of the shape only: never of the thread count. Smaller GEMMs
 * get smaller tiles (down to 64 x 128) so that they still split into at
 * least 4 (more tiles cost packing; fewer leave cores idle). */
static tile_plan plan_tiles(int64_t M, int64_t N, int64_t K) {
    tile_plan p;
    int64_t tm = MHA_GEMM_TILE_M, tn = MHA_GEMM_TILE_N;
    if ((double)M * (double)N * (double)K < 2e6) { /* one call: not worth splitting */
        p.mb = M, p.nb = N, p.nm = 1, p.nn = 1;
        return p;
    }
    for (;;) {
        cut(M, tm, &p.mb, &p.nm);
        cut(N, tn, &p.nb, &p.nn);
        if (p.nm * p.nn >= 4 || (tm <= 64 && tn <= 128)) break;
        if (tm > 64 && (tm >= tn || tn <= 128)) tm /= 2;
        else tn /= 2;
    }
    return p;
}

typedef struct {
    const mha__kernels *k;
    bool trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B, *bias;
    int64_t lda, ldb, ldc;
    float *C;
    tile_plan p;
    const mha__gemm_epilogue *epi; /* or NULL */
} gemm_job;

/* The epilogue on the block at rows [r0, r0 + m), columns [c0, c0 + n) of
 * C, just computed. */
static void epilogue(const mha__kernels *k, const mha__gemm_epilogue *e, int64_t r0, int64_t c0,
                     int64_t m, int64_t n, float *c, int64_t ldc) {
    const float *bias = e->bias ? e->bias + c0 : NULL;
    if (e->kind == MHA_EPI_GELU) {
        k->bias_gelu(c, ldc, c, ldc, m, n, bias);
        return;
    }
    mha__keep_view kv = e->keep;
    kv.bit0 += r0 * kv.ld + c0;
    k->residual_add(e->x + r0 * e->ldx + c0, e->ldx, c, ldc, m, n, bias, kv.bits ? &kv : NULL);
}

/* Tile t: rows [r0, r1), columns [c0, c1) of C = alpha op(A) op(B) + beta C
 * (+ bias: written into C first, then accumulated into with beta = 1). */
static void run_tile(const gemm_job *j, int64_t t) {
    const int64_t r0 = (t / j->p.nn) * j->p.mb, c0 = (t % j->p.nn) * j->p.nb;
    const int64_t m = j->M - r0 < j->p.mb ? j->M - r0 : j->p.mb;
    const int64_t n = j->N - c0 < j->p.nb ? j->N - c0 : j->p.nb;
    const float *a = j->trans_a ? j->A + r0 : j->A + r0 * j->lda;
    const float *b = j->trans_b ? j->B + c0 * j->ldb : j->B + c0;
    float *c = j->C + r0 * j->ldc + c0;
    float beta = j->beta;
    if (j->bias) {
        for (int64_t i = 0; i < m; i++) memcpy(c + i * j->ldc, j->bias + c0, (size_t)n * sizeof(float));
        beta = 1.0f;
    }
    if (j->K > 0) {
        j->k->gemm(j->trans_a, j->trans_b, m, n, j->K, j->alpha, a, j->lda, b, j->ldb, beta, c,
                   j->ldc);
    } else {
        for (int64_t i = 0; i < m; i++) /* K == 0: C = beta C, as BLAS defines it */
            for (int64_t q = 0; q < n; q++) {
                float *e = &c[i * j->ldc + q];
                *e = beta == 0.0f ? 0.0f : beta * *e;
            }
    }
    if (j->epi) epilogue(j->k, j->epi, r0, c0, m, n, c, j->ldc);
}

/* ---- one row: GEMV --------------------------------------------------------- */

void mha__gemv_ref(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                   const float *bias, float *y) {
    for (int64_t n = 0; n < N; n++) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s = fmaf(W[n * ldw + k], x[k], s);
        y[n] = bias ? s + bias[n] : s;
    }
}

/* Rows of W per task: a fixed split, whatever the thread count. */
#define MHA_GEMV_ROWS 256

/* C (1, N) = A (1, K) B^T + bias with B (N, K): every weight read once, rows
 * of B in fixed blocks dealt to threads (each block then through the
 * epilogue, if any, which adds the bias itself). */
static void gemv_rows(const mha__kernels *k, int64_t N, int64_t K, const float *A, const float *B,
                      int64_t ldb, const float *bias, float *C, const mha__gemm_epilogue *epi) {
    const int64_t nblk = (N + MHA_GEMV_ROWS - 1) / MHA_GEMV_ROWS;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (nblk > 1 && (double)N * (double)K > 1e5 && !omp_in_parallel())
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t n0 = b * MHA_GEMV_ROWS, n = N - n0 < MHA_GEMV_ROWS ? N - n0 : MHA_GEMV_ROWS;
        k->gemv(n, K, A, B + n0 * ldb, ldb, bias ? bias + n0 : NULL, C + n0);
        if (epi) epilogue(k, epi, 0, n0, 1, n, C + n0, n);
    }
}

static void sgemm_tiled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                        const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                        float *C, int64_t ldc, const float *bias, const mha__gemm_epilogue *epi) {
    if (M <= 0 || N <= 0) return;
    if (M == 1 && !trans_a && trans_b && alpha == 1.0f && (beta == 0.0f || bias) && K > 0) {
        gemv_rows(mha__kernels_active(), N, K, A, B, ldb, bias, C, epi);
        return;
    }
    gemm_job j = {mha__kernels_active(), trans_a, trans_b, M, N, K, alpha, beta, A, B, bias,
                  lda, ldb, ldc, C, plan_tiles(M, N, K > 0 ? K : 1), epi};
    const int64_t ntiles = j.p.nm * j.p.nn;
#if defined(MHA_HAVE_OPENMP)
    if (ntiles > 1 && !omp_in_parallel()) {
        const int nt = omp_get_max_threads() < ntiles ? omp_get_max_threads() : (int)ntiles;
#pragma omp parallel num_threads(nt)
        {
            /* The backend must not start threads of its own: oneDNN reads
             * this thread's OpenMP setting (the setting lives and dies with
             * this parallel region's implicit task). */
            omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < ntiles; t++) run_tile(&j, t);
        }
        return;
    }
    if (!omp_in_parallel()) {
        /* One tile on the calling thread: a one-thread team so that the
         * backend's thread setting can be changed without touching the
         * caller's. */
#pragma omp parallel num_threads(1)
        {
            omp_set_num_threads(1);
            for (int64_t t = 0; t < ntiles; t++) run_tile(&j, t);
        }
        return;
    }
#endif
    for (int64_t t = 0; t < ntiles; t++) run_tile(&j, t);
}

void mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc) {
    sgemm_tiled(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

void mha__sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t lda, const float *B, int64_t ldb, const float *bias, float *C,
                     int64_t ldc) {
    sgemm_tiled(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, bias, NULL);
}

void mha__sgemm_epilogue(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float *C, int64_t ldc,
                         const mha__gemm_epilogue *epi) {
    sgemm_tiled(false, true, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, NULL, epi);
}
