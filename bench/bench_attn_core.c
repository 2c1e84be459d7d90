/* bench_attn_core.c — the attention core alone: every fused kernel this CPU
 * runs (mha__attn_fwd_avx2 and, on AVX-512 CPUs, mha__attn_fwd_avx512;
 * MHA_ISA=avx2 leaves out the latter), or the reference with MHA_ISA=ref,
 * GPT-2-small heads: H = 12, HD = 64, packed (B, T, 3*H*HD) qkv input,
 * (B, T, H*HD) output. The kernels' timed runs are interleaved (run r of
 * each kernel, then run r + 1 of each), so that load from other tenants of
 * the machine hits them alike.
 *
 * The work is split exactly as the modules split it: through the attention
 * layer (mha__attention_forward, src/attention/attention.c), each kernel
 * named explicitly (its dispatch table), so this measures what a forward
 * runs.
 * Prints min and median time over repeated runs and GFLOP/s with
 * flops = 4 * B * H * (T (T + 1) / 2) * HD (the causal half); checks each
 * kernel's result once against the reference kernel on the first and last
 * head.
 *
 * --backward: also times the backward through the layer
 * (mha__attention_backward: delta, the fused backward kernel per (batch,
 * head, key chunk), the sum of the chunks' dQ) right after each forward
 * run, and prints it beside the forward: ms, GFLOP/s with flops = 2.5 x
 * the forward's (five matmuls instead of two; the recomputation of S is
 * counted), and the ratio backward / forward of the minimum times. Its
 * result is checked once against mha__attn_bwd_ref on the first and last
 * head.
 *
 * --sgemm: also times, interleaved with the kernels' runs, the library's
 * projection GEMM (mha_sgemm) at 8192x2304x768, the shape whose rate
 * bench/compare_torch.py takes as the bound, and prints the core's rate
 * as a fraction c of it, with what c allows MultiHeadAttention(768, 12)
 * at that shape when its projections run at the sgemm rate and nothing
 * else costs: bound/mha <= 1 / ((1 - f) + f / c), f the core's share of
 * the module's FLOPs (forward; with --backward also forward + backward,
 * the core's backward counted as 2.5x its forward, the projections' as
 * 2x theirs: dX and dW).
 *
 * Usage: bench_attn_core [--backward] [--sgemm] [--shape B,T]... [reps]   (default 9 reps;
 *        shapes (1, 1024), (8, 256), (8, 1024); H = 12, HD = 64)
 * Environment: MHA_BENCH_IDLE_WAIT = seconds the whole program may spend
 *              waiting for idle CPUs before timed runs (default 60; 0 = off;
 *              the VM is shared, other tenants' jobs take cores),
 *              MHA_ISA=ref to time the reference kernel. */
#define MHA_UNSTABLE /* mha_sgemm */
#include "attention/attention.h"
#include "kernels/kernels.h"
#include "mha.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    int64_t B, T, H, HD;
} shape;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fraction of time all CPUs were idle over `secs` (from /proc/stat); -1 if
 * unavailable. */
static double idle_fraction(double secs) {
    unsigned long long v0[10] = {0}, v1[10] = {0};
    for (int pass = 0; pass < 2; pass++) {
        FILE *f = fopen("/proc/stat", "r");
        if (!f) return -1.0;
        unsigned long long *v = pass ? v1 : v0;
        const int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                             &v[3], &v[4], &v[5], &v[6], &v[7]);
        fclose(f);
        if (n < 5) return -1.0;
        if (!pass) {
            struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    unsigned long long tot = 0, idle = (v1[3] - v0[3]) + (v1[4] - v0[4]);
    for (int i = 0; i < 8; i++) tot += v1[i] - v0[i];
    return tot ? (double)idle / (double)tot : -1.0;
}

/* The machine is shared: before a timed run, wait (at most max_s seconds in
 * all) until the CPUs are >= 90% idle over 0.25 s. Returns whether it was. */
static double idle_budget_s = 60.0;
static bool wait_idle(void) {
    while (idle_budget_s > 0.0) {
        const double f = idle_fraction(0.25);
        idle_budget_s -= 0.25;
        if (f < 0.0 || f >= 0.9) return true;
    }
    return false;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static mha__attn_args head_args(const shape *s, const float *qkv, float *out, float *lse,
                                int64_t b, int64_t h) {
    const int64_t D = s->H * s->HD, ld = 3 * D;
    mha__attn_args a;
    memset(&a, 0, sizeof a);
    a.q = qkv + b * s->T * ld + h * s->HD;
    a.k = a.q + D;
    a.v = a.q + 2 * D;
    a.ldq = a.ldk = a.ldv = ld;
    a.o = out + b * s->T * D + h * s->HD;
    a.ldo = D;
    a.lse = lse ? lse + (b * s->H + h) * s->T : NULL;
    a.T = s->T;
    a.HD = s->HD;
    a.q_begin = 0;
    a.q_end = s->T;
    a.scale = (float)(1.0 / sqrt((double)s->HD));
    a.causal = true;
    a.drop = MHA_DROP_NONE;
    a.drop_scale = 1.0f;
    return a;
}

static void set_threads(int nthreads) {
#ifdef _OPENMP
    omp_set_num_threads(nthreads);
#else
    (void)nthreads;
#endif
}

/* The layer's description of the (B, T, 3*D) qkv -> (B, T, D) attention. */
static mha__attention_desc desc_of(const shape *s, const float *qkv, float *out, float *lse,
                                   float *stats, const mha__kernels *k) {
    const int64_t D = s->H * s->HD;
    mha__attention_desc d;
    memset(&d, 0, sizeof d);
    d.B = s->B;
    d.T = s->T;
    d.H = s->H;
    d.HD = s->HD;
    d.qkv = qkv;
    d.ld_qkv = 3 * D;
    d.q_base = 0;
    d.k_base = D;
    d.v_base = 2 * D;
    d.head_stride = s->HD;
    d.o = out;
    d.ldo = D;
    d.lse = lse;
    d.stats = stats;
    d.scale = (float)(1.0 / sqrt((double)s->HD));
    d.causal = true;
    d.kernels = k;
    return d;
}

/* One forward over all heads with nthreads threads, through the layer. */
static void run_core(const shape *s, const float *qkv, float *out, float *lse, float *stats,
                     const mha__kernels *k, void *ws, size_t ws_size, int nthreads) {
    const mha__attention_desc d = desc_of(s, qkv, out, lse, stats, k);
    set_threads(nthreads);
    if (mha__attention_forward(&d, ws, ws_size) != MHA_OK) {
        fprintf(stderr, "attention: %s\n", mha_last_error());
        exit(1);
    }
}

/* One backward over all heads (of the forward that wrote out and stats). */
static void run_bwd(const shape *s, const float *qkv, float *out, float *stats,
                    const float *dout, float *dqkv, const mha__kernels *k, void *ws,
                    size_t ws_size, int nthreads) {
    const mha__attention_desc d = desc_of(s, qkv, out, NULL, stats, k);
    set_threads(nthreads);
    if (mha__attention_backward(&d, dout, s->H * s->HD, dqkv, ws, ws_size) != MHA_OK) {
        fprintf(stderr, "attention backward: %s\n", mha_last_error());
        exit(1);
    }
}

static size_t bwd_workspace(const shape *s, const mha__kernels *k, int nthreads) {
    float dummy = 0.0f;
    const mha__attention_desc d = desc_of(s, &dummy, &dummy, &dummy, &dummy, k);
    set_threads(nthreads);
    return mha__attention_backward_workspace(&d);
}

/* The layer's backward (dqkv, after run_bwd) against mha__attn_bwd_ref on
 * the first and last head; prints and returns whether within tolerance:
 * max error <= 1e-4 * max|gradient|. */
static bool check_bwd(const shape *s, const float *qkv, const float *out, const float *stats,
                      const float *dout, const float *dqkv, const char *name) {
    const int64_t T = s->T, HD = s->HD, D = s->H * HD, ld = 3 * D;
    float *g = malloc(sizeof(float) * (size_t)(3 * T * HD)); /* dq, dk, dv: (T, HD) each */
    float *delta = malloc(sizeof(float) * (size_t)T);
    float *scr = malloc(sizeof(float) * mha__attn_bwd_scratch_ref(T, HD));
    double err = 0.0, gmax = 0.0;
    const int64_t heads[2][2] = {{0, 0}, {s->B - 1, s->H - 1}};
    for (int hk = 0; hk < 2; hk++) {
        const int64_t b = heads[hk][0], h = heads[hk][1];
        /* as the layer computes it */
        mha__dot_rows_ref(delta, dout + b * T * D + h * HD, D, out + b * T * D + h * HD, D, T, HD);
        memset(g, 0, sizeof(float) * (size_t)(3 * T * HD));
        mha__attn_bwd_args a;
        memset(&a, 0, sizeof a);
        a.q = qkv + b * T * ld + h * HD;
        a.k = a.q + D;
        a.v = a.q + 2 * D;
        a.ldq = a.ldk = a.ldv = ld;
        a.dout = dout + b * T * D + h * HD;
        a.lddo = D;
        a.stats = stats + (b * s->H + h) * T * 2;
        a.delta = delta;
        a.dq = g;
        a.dk = g + T * HD;
        a.dv = g + 2 * T * HD;
        a.lddq = a.lddk = a.lddv = HD;
        a.T = T;
        a.HD = HD;
        a.k_begin = 0;
        a.k_end = T;
        a.scale = (float)(1.0 / sqrt((double)HD));
        a.causal = true;
        a.drop = MHA_DROP_NONE;
        a.drop_scale = 1.0f;
        mha__attn_bwd_ref(&a, scr);
        for (int part = 0; part < 3; part++) /* q, k, v columns of dqkv */
            for (int64_t t = 0; t < T; t++)
                for (int64_t x = 0; x < HD; x++) {
                    const double want = g[(part * T + t) * HD + x];
                    const double got = dqkv[(b * T + t) * ld + part * D + h * HD + x];
                    if (!(fabs(got - want) <= err)) err = fabs(got - want);
                    if (fabs(want) > gmax) gmax = fabs(want);
                }
    }
    const bool ok = err <= 1e-4 * gmax;
    printf("B=%lld T=%lld H=%lld HD=%lld %-6s: backward check vs reference (2 heads): max|dg| "
           "%.3g, max|g| %.3g %s\n",
           (long long)s->B, (long long)T, (long long)s->H, (long long)HD, name, err, gmax,
           ok ? "OK" : "FAILED");
    free(g);
    free(delta);
    free(scr);
    return ok;
}

static size_t workspace(const shape *s, const mha__kernels *k, int nthreads) {
    mha__attention_desc d;
    memset(&d, 0, sizeof d);
    d.B = s->B, d.T = s->T, d.H = s->H, d.HD = s->HD, d.causal = true, d.kernels = k;
    d.ld_qkv = 3 * s->H * s->HD; /* the layout the runs use (the workspace depends on it) */
#ifdef _OPENMP
    omp_set_num_threads(nthreads);
#else
    (void)nthreads;
#endif
    return mha__attention_workspace(&d);
}

int main(int argc, char **argv) {
    int reps = 9;
    bool backward = false, with_sgemm = false;
    shape chosen[8];
    int nchosen = 0;
    for (int i = 1; i < argc; i++) {
        long long b, t;
        if (strcmp(argv[i], "--backward") == 0) {
            backward = true;
        } else if (strcmp(argv[i], "--sgemm") == 0) {
            with_sgemm = true;
        } else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc && nchosen < 8 &&
                   sscanf(argv[i + 1], "%lld,%lld", &b, &t) == 2 && b > 0 && t > 0) {
            chosen[nchosen++] = (shape){b, t, 12, 64};
            i++;
        } else {
            reps = atoi(argv[i]);
        }
    }
    if (reps < 1) reps = 1;
    const char *e = getenv("MHA_BENCH_IDLE_WAIT");
    if (e) idle_budget_s = atof(e);

    const mha__kernels *ks[3];
    int nk = 0;
    /* every fused kernel set this CPU runs, as far as MHA_ISA allows */
    const mha__isa_t cap = mha__kernels_active()->isa;
    for (int i = MHA_ISA_AVX2; i <= (int)cap; i++)
        if (mha__kernels_get((mha__isa_t)i)) ks[nk++] = mha__kernels_get((mha__isa_t)i);
    if (nk == 0) ks[nk++] = mha__kernels_get(MHA_ISA_REF);
    static const shape defaults[] = {{1, 1024, 12, 64}, {8, 256, 12, 64}, {8, 1024, 12, 64}};
    const shape *shapes = nchosen ? chosen : defaults;
    const size_t nshapes = nchosen ? (size_t)nchosen : sizeof defaults / sizeof defaults[0];
    static const int threads[] = {1, 2};
    printf("attention core, causal%s, kernels:", backward ? ", forward and backward" : "");
    for (int k = 0; k < nk; k++) printf(" %s", ks[k]->name);
    printf(", %d reps\n", reps);
    int failures = 0;
    /* the bound's GEMM: x (8192, 768) W^T, W (2304, 768) */
    enum { GM = 8192, GN = 2304, GK = 768 };
    float *ga = NULL, *gw = NULL, *gc = NULL;
    if (with_sgemm) {
        ga = malloc(sizeof(float) * (size_t)GM * GK);
        gw = malloc(sizeof(float) * (size_t)GN * GK);
        gc = malloc(sizeof(float) * (size_t)GM * GN);
        if (!ga || !gw || !gc) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < (size_t)GM * GK; i++) ga[i] = (float)(i % 13) * 0.01f - 0.06f;
        for (size_t i = 0; i < (size_t)GN * GK; i++) gw[i] = (float)(i % 7) * 0.01f - 0.03f;
    }

    for (size_t si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        const int64_t D = s->H * s->HD;
        const size_t nqkv = (size_t)(s->B * s->T * 3 * D), nout = (size_t)(s->B * s->T * D);
        float *qkv = malloc(sizeof(float) * nqkv), *out = malloc(sizeof(float) * nout);
        float *lse = malloc(sizeof(float) * (size_t)(s->B * s->H * s->T));
        float *stats = malloc(sizeof(float) * (size_t)(2 * s->B * s->H * s->T));
        uint64_t st = 0x12345678u + si;
        for (size_t i = 0; i < nqkv; i++) { /* xorshift, values in [-1, 1) */
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            qkv[i] = (float)((double)(st >> 40) * 0x1p-23 - 1.0);
        }
        memset(out, 0, sizeof(float) * nout);
        const double flops = 4.0 * (double)(s->B * s->H) * ((double)s->T * (double)(s->T + 1) / 2.0) *
                             (double)s->HD;
        void *ws[3], *bws[3] = {NULL, NULL, NULL};
        size_t ws_size[3], bws_size[3] = {0, 0, 0};
        for (int k = 0; k < nk; k++) {
            ws_size[k] = workspace(s, ks[k], 2);
            ws[k] = malloc(ws_size[k]);
            if (backward) {
                bws_size[k] = bwd_workspace(s, ks[k], 2);
                bws[k] = malloc(bws_size[k]);
            }
        }
        float *dout = NULL, *dqkv = NULL;
        if (backward) {
            dout = malloc(sizeof(float) * nout);
            dqkv = malloc(sizeof(float) * nqkv);
            for (size_t i = 0; i < nout; i++) {
                st ^= st << 13;
                st ^= st >> 7;
                st ^= st << 17;
                dout[i] = (float)((double)(st >> 40) * 0x1p-23 - 1.0);
            }
            memset(dqkv, 0, sizeof(float) * nqkv);
        }

        /* correctness, once per kernel: first and last head against the reference */
        for (int k = 0; k < nk; k++) {
            run_core(s, qkv, out, lse, stats, ks[k], ws[k], ws_size[k], 2);
            float *ref = malloc(sizeof(float) * (size_t)(s->T * D));
            float *rl = malloc(sizeof(float) * (size_t)s->T);
            float *rs = malloc(sizeof(float) * mha__attn_fwd_scratch_ref(s->T, s->HD));
            double md = 0.0, mo = 0.0, ml = 0.0;
            const int64_t heads[2][2] = {{0, 0}, {s->B - 1, s->H - 1}};
            for (int hk = 0; hk < 2; hk++) {
                const int64_t b = heads[hk][0], h = heads[hk][1];
                mha__attn_args a = head_args(s, qkv, out, NULL, b, h);
                a.o = ref + h * s->HD; /* (T, D) buffer for one batch entry */
                a.lse = rl;
                mha__attn_fwd_ref(&a, rs);
                for (int64_t t = 0; t < s->T; t++) {
                    for (int64_t d = 0; d < s->HD; d++) {
                        const double x = out[(b * s->T + t) * D + h * s->HD + d];
                        const double y = ref[t * D + h * s->HD + d];
                        if (!(fabs(x - y) <= md)) md = fabs(x - y);
                        if (fabs(y) > mo) mo = fabs(y);
                    }
                    const double dl = fabs((double)lse[(b * s->H + h) * s->T + t] - (double)rl[t]);
                    if (!(dl <= ml)) ml = dl;
                }
            }
            const int ok = md <= 1e-5 * fmax(1.0, mo) && ml <= 1e-5;
            failures += !ok;
            printf("B=%lld T=%lld H=%lld HD=%lld %-6s: check vs reference (2 heads): max|do| %.3g, "
                   "max|dlse| %.3g %s\n",
                   (long long)s->B, (long long)s->T, (long long)s->H, (long long)s->HD, ks[k]->name,
                   md, ml, ok ? "OK" : "FAILED");
            free(ref);
            free(rl);
            free(rs);
            if (backward) {
                run_bwd(s, qkv, out, stats, dout, dqkv, ks[k], bws[k], bws_size[k], 2);
                failures += !check_bwd(s, qkv, out, stats, dout, dqkv, ks[k]->name);
            }
        }

        for (size_t ti = 0; ti < sizeof threads / sizeof threads[0]; ti++) {
            const int nt = threads[ti];
            double *times = malloc(sizeof(double) * (size_t)(reps * nk));
            double *btimes = malloc(sizeof(double) * (size_t)(reps * nk));
            double gbest = INFINITY;
            int gated[3] = {0, 0, 0};
            for (int k = 0; k < nk; k++) { /* warm-up */
                run_core(s, qkv, out, lse, stats, ks[k], ws[k], ws_size[k], nt);
                if (backward)
                    run_bwd(s, qkv, out, stats, dout, dqkv, ks[k], bws[k], bws_size[k], nt);
            }
            for (int r = 0; r < reps; r++) {
                if (with_sgemm) {
                    set_threads(nt);
                    const double g0 = now_s();
                    if (mha_sgemm(0, 1, GM, GN, GK, 1.0f, ga, GK, gw, GK, 0.0f, gc, GN) != MHA_OK) {
                        fprintf(stderr, "sgemm: %s\n", mha_last_error());
                        return 1;
                    }
                    const double g = now_s() - g0;
                    if (g < gbest) gbest = g;
                }
                for (int k = 0; k < nk; k++) {
                    gated[k] += wait_idle();
                    const double t0 = now_s();
                    run_core(s, qkv, out, lse, stats, ks[k], ws[k], ws_size[k], nt);
                    const double t1 = now_s();
                    times[k * reps + r] = t1 - t0;
                    if (backward) {
                        run_bwd(s, qkv, out, stats, dout, dqkv, ks[k], bws[k], bws_size[k], nt);
                        btimes[k * reps + r] = now_s() - t1;
                    }
                }
            }
            const double grate = 2.0 * GM * GN * GK / gbest; /* FLOP/s */
            const double pflops = 8.0 * (double)(s->B * s->T) * (double)D * (double)D;
            if (with_sgemm)
                printf("B=%lld T=%4lld threads %d sgemm 8192x2304x768 (mha_sgemm): min %.3f ms %.1f "
                       "GFLOP/s\n",
                       (long long)s->B, (long long)s->T, nt, 1e3 * gbest, grate * 1e-9);
            for (int k = 0; k < nk; k++) {
                double *tk = times + k * reps;
                qsort(tk, (size_t)reps, sizeof(double), cmp_double);
                const double tmin = tk[0], tmed = tk[reps / 2];
                printf("B=%lld T=%4lld H=%lld HD=%lld threads %d %-6s: min %8.3f ms %6.1f GFLOP/s | "
                       "median %8.3f ms %6.1f GFLOP/s | %d/%d runs after an idle check\n",
                       (long long)s->B, (long long)s->T, (long long)s->H, (long long)s->HD, nt,
                       ks[k]->name, 1e3 * tmin, flops / tmin * 1e-9, 1e3 * tmed,
                       flops / tmed * 1e-9, gated[k], reps);
                if (with_sgemm) {
                    const double c = flops / tmin / grate, f = flops / (flops + pflops);
                    printf("B=%lld T=%4lld threads %d %-6s: core at %.2f of the sgemm rate; "
                           "forward bound/mha at most %.3f (core %.1f%% of the FLOPs)\n",
                           (long long)s->B, (long long)s->T, nt, ks[k]->name, c,
                           1.0 / ((1.0 - f) + f / c), 100.0 * f);
                }
                if (backward) {
                    double *bk = btimes + k * reps;
                    qsort(bk, (size_t)reps, sizeof(double), cmp_double);
                    const double bmin = bk[0], bmed = bk[reps / 2], bfl = 2.5 * flops;
                    printf("B=%lld T=%4lld H=%lld HD=%lld threads %d %-6s: backward min %8.3f ms "
                           "%6.1f GFLOP/s | median %8.3f ms %6.1f GFLOP/s | backward/forward "
                           "%.2f (min), %.2f (median)\n",
                           (long long)s->B, (long long)s->T, (long long)s->H, (long long)s->HD, nt,
                           ks[k]->name, 1e3 * bmin, bfl / bmin * 1e-9, 1e3 * bmed,
                           bfl / bmed * 1e-9, bmin / tmin, bmed / tmed);
                    if (with_sgemm) {
                        /* forward + backward: core 3.5x, projections 3x their forward FLOPs */
                        const double cf = flops + bfl, pf = 3.0 * pflops, f = cf / (cf + pf);
                        const double c = cf / (tmin + bmin) / grate;
                        printf("B=%lld T=%4lld threads %d %-6s: core forward + backward at %.2f of the "
                               "sgemm rate; forward + backward bound/mha at most %.3f (core %.1f%% "
                               "of the FLOPs)\n",
                               (long long)s->B, (long long)s->T, nt, ks[k]->name, c,
                               1.0 / ((1.0 - f) + f / c), 100.0 * f);
                    }
                }
            }
            fflush(stdout);
            free(times);
            free(btimes);
        }
        for (int k = 0; k < nk; k++) {
            free(ws[k]);
            free(bws[k]);
        }
        free(dout);
        free(dqkv);
        free(qkv);
        free(out);
        free(lse);
        free(stats);
    }
    free(ga);
    free(gw);
    free(gc);
    return failures ? 1 : 0;
}
