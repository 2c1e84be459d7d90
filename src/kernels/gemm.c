/* gemm.c — the projection GEMMs.
 *
 * Backends: OpenBLAS (loaded at first use, see load_openblas) or the
 * portable builtin kernel; MHA_ISA=ref forces the reference loops.
 * Threads: one OpenMP team splits C's rows; every thread calls the backend
 * single-threaded. OpenBLAS's own thread pool is never woken, so its threads
 * and OpenMP's never compete for the cores, and each element of C is
 * computed by the same single-threaded code whatever the thread count. */
#include "common/common.h"
#include "kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- OpenBLAS, loaded at first use --------------------------------------- */

/* CBLAS's ABI constants. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);

static struct {
    cblas_sgemm_fn sgemm;
    char name[64];
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

#if defined(MHA_HAVE_OPENBLAS)
/* OpenBLAS picks its kernels in a constructor when it is loaded, from the
 * CPU model. OpenBLAS 0.3.21 (Debian 12) does not know recent or
 * virtualised CPUs (e.g. a Xeon reporting the generic name "Intel(R) Xeon(R)
 * Processor") and falls back to its SSE3 "Prescott" kernels, 3-5x slower.
 * Loading it ourselves lets us choose by CPU features first; a user's
 * OPENBLAS_CORETYPE always wins. */
static void choose_coretype(void) {
    if (getenv("OPENBLAS_CORETYPE")) return;
#if defined(__x86_64__)
    __builtin_cpu_init();
    const char *core = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        core = "SKYLAKEX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        core = "HASWELL";
    if (core) setenv("OPENBLAS_CORETYPE", core, 0);
#endif
}

static void load_openblas(void) {
    choose_coretype();
    /* mha calls OpenBLAS single-threaded from its own OpenMP team. Left to
     * itself OpenBLAS starts a worker per core at load, and those spin
     * (sched_yield) for ~0.1 s after every multi-threaded call and after
     * start-up, stealing the cores from OpenMP: 1024x768x768 took 16 ms
     * instead of 6 in a fresh process. A user's setting still wins. */
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    void *h = dlopen(MHA_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    cblas_sgemm_fn sgemm = (cblas_sgemm_fn)(uintptr_t)dlsym(h, "cblas_sgemm");
    void (*set_threads)(int) = (void (*)(int))(uintptr_t)dlsym(h, "openblas_set_num_threads");
    char *(*corename)(void) = (char *(*)(void))(uintptr_t)dlsym(h, "openblas_get_corename");
    if (!sgemm || !set_threads) {
        dlclose(h);
        return;
    }
    set_threads(1); /* we split the work ourselves (also if already loaded) */
    snprintf(blas.name, sizeof blas.name, "openblas (%s)", corename ? corename() : "?");
    blas.sgemm = sgemm;
}
#endif

static void load_blas(void) {
#if defined(MHA_HAVE_OPENBLAS)
    load_openblas();
#endif
    if (!blas.sgemm) snprintf(blas.name, sizeof blas.name, "builtin");
}

const char *mha__blas_name(void) {
    if (mha__forced_ref()) return "ref";
    pthread_once(&blas_once, load_blas);
    return blas.name;
}

/* One single-threaded GEMM on the chosen backend. */
static void sgemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                         float *C, int64_t ldc) {
    if (blas.sgemm && M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX &&
        ldb <= INT32_MAX && ldc <= INT32_MAX) {
        blas.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M, (int)N, (int)K, alpha, A,
                   (int)lda, B, (int)ldb, beta, C, (int)ldc);
        return;
    }
    sgemm_builtin(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Rows [r0, r1) of C = op(A) op(B) + bias (or, without bias, the plain
 * alpha/beta form). The bias is written into C first and accumulated into
 * with beta = 1: one pass over C fewer than adding it afterwards. */
static void sgemm_rows(bool trans_a, bool trans_b, int64_t r0, int64_t r1, int64_t N, int64_t K,
                       float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc, const float *bias) {
    const float *a = trans_a ? A + r0 : A + r0 * lda;
    float *c = C + r0 * ldc;
    if (bias) {
        for (int64_t i = 0; i < r1 - r0; i++) memcpy(c + i * ldc, bias, (size_t)N * sizeof(float));
        beta = 1.0f;
    }
    sgemm_serial(trans_a, trans_b, r1 - r0, N, K, alpha, a, lda, B, ldb, beta, c, ldc);
}

static void sgemm_dispatch(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                           const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                           float *C, int64_t ldc, const float *bias) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || mha__forced_ref()) {
        if (K > 0) mha__sgemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, bias ? 0.0f : beta, C, ldc);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                float *c = &C[i * ldc + j];
                if (K <= 0) *c = beta == 0.0f ? 0.0f : beta * *c; /* as BLAS defines it */
                if (bias) *c += bias[j];
            }
        return;
    }
    pthread_once(&blas_once, load_blas);
    int nt = 1;
#if defined(MHA_HAVE_OPENMP)
    /* Worth splitting only when each thread gets a few MFLOP. */
    if ((double)M * (double)N * (double)K >= 4e6 && !omp_in_parallel()) nt = omp_get_max_threads();
#endif
    if (nt > M / 16) nt = (int)(M / 16 > 0 ? M / 16 : 1);
    if (nt <= 1) {
        sgemm_rows(trans_a, trans_b, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
        return;
    }
    /* Rows of C in nt blocks of a multiple of 16 rows. */
    const int64_t step = ((M + nt - 1) / nt + 15) / 16 * 16;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static, 1) num_threads(nt)
#endif
    for (int t = 0; t < nt; t++) {
        const int64_t r0 = t * step, r1 = r0 + step < M ? r0 + step : M;
        if (r0 < r1) sgemm_rows(trans_a, trans_b, r0, r1, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
    }
}

void mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                float alpha, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc) {
    sgemm_dispatch(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL);
}

void mha__sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A,
                     int64_t lda, const float *B, int64_t ldb, const float *bias, float *C,
                     int64_t ldc) {
    sgemm_dispatch(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, bias);
}
