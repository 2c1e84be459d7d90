/* bench_sgemm.c — sgemm throughput at the projection shapes of
 * MultiHeadAttention(768, 768, 1024, 0, 12) at b * T = 8192, for the bound
 * that bench/compare_torch.py prints:
 *   8192 x 2304 x 768  x @ W^T, W (2304, 768): the fused Q/K/V projection,
 *   8192 x 768 x 768   x @ W^T: out_proj,
 *   2048 x 2048 x 2048 square, no transposes.
 *
 * By default it times the library's projection GEMM entry mha__sgemm (the
 * backend mha_runtime_blas() names; it splits the rows over its OpenMP
 * threads itself). With --openblas it times cblas_sgemm of libopenblas.so.0
 * loaded here with dlopen, threaded by OpenBLAS itself; the kernels OpenBLAS
 * picks are its own choice or OPENBLAS_CORETYPE from the caller's
 * environment (this program never sets it).
 *
 * Each shape: 2 warm-up calls, then --repeat timed calls; prints min and
 * median ms and GFLOP/s (2 M N K / min).
 *
 * Usage: bench_sgemm [--openblas] [--threads N] [--repeat N] [--json]
 *   --threads N  mha_runtime_set_threads(N) (OpenMP), or
 *                openblas_set_num_threads(N) with --openblas (default 2)
 *   --json       one JSON line instead of the table:
 *                {"backend": ..., "corename": ..., "threads": ..., "mha_blas": ...,
 *                 "results": [{"m", "n", "k", "trans_b", "min_ms", "median_ms", "gflops"}]} */
#include "kernels/drivers.h"
#include "mha.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CBLAS enum values (cblas.h), so no BLAS header is needed. */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);

static struct {
    cblas_sgemm_fn sgemm;
    void (*set_threads)(int);
    char *(*corename)(void);
} ob;

typedef struct {
    int64_t m, n, k;
    bool trans_b;
} shape;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run(bool openblas, const shape *s, const float *A, const float *B, float *C) {
    const int64_t ldb = s->trans_b ? s->k : s->n;
    if (openblas)
        ob.sgemm(ROW_MAJOR, NO_TRANS, s->trans_b ? TRANS : NO_TRANS, (int)s->m, (int)s->n,
                 (int)s->k, 1.0f, A, (int)s->k, B, (int)ldb, 0.0f, C, (int)s->n);
    else if (mha__sgemm(false, s->trans_b, s->m, s->n, s->k, 1.0f, A, s->k, B, ldb, 0.0f, C, s->n) !=
             MHA_OK) {
        fprintf(stderr, "bench_sgemm: %s\n", mha_last_error());
        exit(1);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: bench_sgemm [--openblas] [--threads N] [--repeat N] [--json]\n");
    exit(2);
}

int main(int argc, char **argv) {
    bool openblas = false, json = false;
    int threads = 2, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--openblas"))
            openblas = true;
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            usage();
    }
    if (threads < 1 || reps < 1) usage();

    const char *backend, *corename = "";
    if (openblas) {
        /* Loaded before the library could load it (mha_runtime_blas() loads
         * the same libopenblas.so.0 and sets it to one thread): the library
         * is asked only after the timings below. */
        void *h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "bench_sgemm: cannot load libopenblas.so.0: %s\n", dlerror());
            return 1;
        }
        ob.sgemm = (cblas_sgemm_fn)(uintptr_t)dlsym(h, "cblas_sgemm");
        ob.set_threads = (void (*)(int))(uintptr_t)dlsym(h, "openblas_set_num_threads");
        ob.corename = (char *(*)(void))(uintptr_t)dlsym(h, "openblas_get_corename");
        if (!ob.sgemm || !ob.set_threads) {
            fprintf(stderr, "bench_sgemm: libopenblas.so.0 lacks cblas_sgemm or openblas_set_num_threads\n");
            return 1;
        }
        ob.set_threads(threads);
        backend = "openblas";
        corename = ob.corename ? ob.corename() : "?";
    } else {
        if (mha_runtime_set_threads(threads) != MHA_OK) usage();
        backend = "mha";
    }

    const shape shapes[] = {{8192, 2304, 768, true}, {8192, 768, 768, true}, {2048, 2048, 2048, false}};
    enum { NS = sizeof shapes / sizeof shapes[0] };
    double mins[NS], meds[NS];
    double *ts = malloc((size_t)reps * sizeof *ts);
    if (!ts) return 1;
    for (int si = 0; si < NS; si++) {
        const shape *s = &shapes[si];
        float *A = malloc((size_t)(s->m * s->k) * sizeof(float));
        float *B = malloc((size_t)(s->k * s->n) * sizeof(float));
        float *C = malloc((size_t)(s->m * s->n) * sizeof(float));
        if (!A || !B || !C) return 1;
        uint32_t x = 12345u + (uint32_t)si;
        for (int64_t i = 0; i < s->m * s->k; i++) A[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
        for (int64_t i = 0; i < s->k * s->n; i++) B[i] = (float)((x = x * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
        for (int r = 0; r < 2; r++) run(openblas, s, A, B, C);
        for (int r = 0; r < reps; r++) {
            const double t0 = now_s();
            run(openblas, s, A, B, C);
            ts[r] = (now_s() - t0) * 1e3;
        }
        qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
        mins[si] = ts[0];
        meds[si] = ts[reps / 2];
        free(A);
        free(B);
        free(C);
    }
    free(ts);

    /* After the timings: with --openblas this loads the library's backend
     * too, which may reconfigure the shared OpenBLAS. */
    const char *mha_blas = mha_runtime_blas();
    if (json) {
        printf("{\"backend\": \"%s\", \"corename\": \"%s\", \"threads\": %d, \"mha_blas\": \"%s\", \"results\": [",
               backend, corename, threads, mha_blas);
        for (int si = 0; si < NS; si++) {
            const shape *s = &shapes[si];
            printf("%s{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"trans_b\": %s, \"min_ms\": %.4f, "
                   "\"median_ms\": %.4f, \"gflops\": %.2f}",
                   si ? ", " : "", (long long)s->m, (long long)s->n, (long long)s->k,
                   s->trans_b ? "true" : "false", mins[si], meds[si],
                   2.0 * (double)s->m * (double)s->n * (double)s->k / (mins[si] * 1e6));
        }
        printf("]}\n");
    } else {
        if (openblas)
            printf("cblas_sgemm of libopenblas.so.0 (core %s), %d OpenBLAS threads; mha's backend: %s\n",
                   corename, threads, mha_blas);
        else
            printf("mha__sgemm on %s, %d threads\n", mha_blas, threads);
        printf("%-22s %10s %10s %10s\n", "M x N x K", "min ms", "median ms", "GFLOP/s");
        for (int si = 0; si < NS; si++) {
            const shape *s = &shapes[si];
            char name[64];
            snprintf(name, sizeof name, "%lldx%lldx%lld%s", (long long)s->m, (long long)s->n,
                     (long long)s->k, s->trans_b ? " (B^T)" : "");
            printf("%-22s %10.2f %10.2f %10.1f\n", name, mins[si], meds[si],
                   2.0 * (double)s->m * (double)s->n * (double)s->k / (mins[si] * 1e6));
        }
    }
    return 0;
}
