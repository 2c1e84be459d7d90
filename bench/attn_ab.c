/* attn_ab.c — builds of the fused attention kernels side by side in one
 * process: the A/B driver of bench/attn_ab.sh, which compiles
 * attn_fwd_body.h and attn_bwd_body.h once per variant (each with its own
 * MHA_KSFX, tunables or source tree) and generates attn_ab_vars.h naming
 * them. Between runs of one binary the shared VM moves by 3-5%, more than
 * most single changes to a kernel; here each round runs every variant's
 * sweep over the heads in turn, on one thread, and the minimum over the
 * rounds is kept, so the variants share the host's moments.
 *
 * The work: GPT-2 heads (HD = 64, H = 12 per batch element) read in place
 * from a packed (B, T, 3 * 768) qkv buffer as the attention layer reads
 * them, causal, no dropout; the backward writes dQ (dq_set), dK and dV
 * into a packed (B, T, 3 * 768) gradient, one call per head over all its
 * keys. Before timing, every variant's output is compared with the first
 * variant's, bit for bit (the tunables that may change bits are said in
 * attn_tunables.h).
 *
 * Usage (through attn_ab.sh): attn_ab T HEADS ROUNDS fwd|bwd [contig]
 *   contig: also time the backward with Q and dO as contiguous per-head
 *           copies (ld = HD) beside the packed rows. */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_ab_vars.h" /* #define ATTN_AB_VARS(X) X(name) X(name) ... */

#define DECLARE(n)                                                                                 \
    void mha__attn_fwd_##n(const mha__attn_args *, float *);                                     \
    size_t mha__attn_fwd_scratch_##n(int64_t, int64_t);                                          \
    void mha__attn_bwd_##n(const mha__attn_bwd_args *, float *);                                 \
    size_t mha__attn_bwd_scratch_##n(int64_t, int64_t);
ATTN_AB_VARS(DECLARE)

typedef struct {
    const char *name;
    void (*fwd)(const mha__attn_args *, float *);
    size_t (*fwd_scratch)(int64_t, int64_t);
    void (*bwd)(const mha__attn_bwd_args *, float *);
    size_t (*bwd_scratch)(int64_t, int64_t);
} variant;

#define ENTRY(n) {#n, mha__attn_fwd_##n, mha__attn_fwd_scratch_##n, mha__attn_bwd_##n, mha__attn_bwd_scratch_##n},
static const variant vs[] = {ATTN_AB_VARS(ENTRY)};
enum { NVAR = sizeof vs / sizeof vs[0], H = 12, HD = 64, D = H * HD, L = 3 * D };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n floats, uniform in [-s/2, s/2) (s = 0: zeros), 64-byte aligned */
static float *floats(size_t n, float s) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "attn_ab: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = s * ((float)rand() / (float)RAND_MAX - 0.5f);
    return p;
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[4], "fwd") && strcmp(argv[4], "bwd"))) {
        fprintf(stderr, "usage: attn_ab T HEADS ROUNDS fwd|bwd [contig]\n");
        return 2;
    }
    const int64_t T = atoll(argv[1]), NH = atoll(argv[2]);
    const int R = atoi(argv[3]);
    const bool fwd = !strcmp(argv[4], "fwd"), contig = argc > 5 && !strcmp(argv[5], "contig");
    if (T < 1 || T > 65536 || NH < 1 || NH > 4096 || R < 1) {
        fprintf(stderr, "attn_ab: T in [1, 65536], HEADS in [1, 4096], ROUNDS >= 1\n");
        return 2;
    }
    const int64_t B = (NH + H - 1) / H;
    const size_t nqkv = (size_t)(B * T * L), nrow = (size_t)(B * T * D);
    float *qkv = floats(nqkv, 2.0f), *o = floats(nrow, 0), *dout = floats(nrow, 1.0f);
    float *stats = floats((size_t)(NH * T * 2), 0), *delta = floats((size_t)(NH * T), 0);
    float *grad = floats(nqkv, 0), *ref = floats(fwd ? nrow : nqkv, 0);
    size_t ss = 0;
    for (int v = 0; v < NVAR; v++) {
        const size_t f = vs[v].fwd_scratch(T, HD), b = vs[v].bwd_scratch(T, HD);
        ss = f > ss ? f : ss;
        ss = b > ss ? b : ss;
    }
    float *scratch = floats(ss + 64, 0);
    mha__attn_args *fa = calloc((size_t)NH, sizeof *fa);
    mha__attn_bwd_args *ba = calloc((size_t)NH, sizeof *ba), *bc = calloc((size_t)NH, sizeof *bc);
    if (!fa || !ba || !bc) return 1;
    const mha__kernels *kref = mha__kernels_get(MHA_ISA_REF);
    if (!kref) return 1;
    const mha__dot_rows_fn dot_rows = kref->dot_rows;
    for (int64_t x = 0; x < NH; x++) {
        const int64_t b = x / H, h = x % H;
        const float *base = qkv + b * T * L;
        mha__attn_args *a = &fa[x];
        a->o = o + b * T * D + h * HD, a->ldo = D;
        a->q = base + h * HD, a->k = base + D + h * HD, a->v = base + 2 * D + h * HD;
        a->ldq = a->ldk = a->ldv = L;
        a->stats = stats + x * T * 2, a->T = T, a->HD = HD, a->q_begin = 0, a->q_end = T;
        a->scale = 0.125f, a->causal = true, a->drop = MHA_DROP_NONE, a->drop_scale = 1.0f;
        vs[0].fwd(a, scratch); /* O and the statistics the backward takes */
        const float *dor = dout + b * T * D + h * HD;
        dot_rows(delta + x * T, dor, D, a->o, D, T, HD); /* delta = rowsum(dO * O), as the layer */
        mha__attn_bwd_args *g = &ba[x];
        float *gb = grad + b * T * L;
        g->q = a->q, g->k = a->k, g->v = a->v, g->ldq = g->ldk = g->ldv = L;
        g->dout = dor, g->lddo = D, g->stats = a->stats, g->delta = delta + x * T;
        g->dq = gb + h * HD, g->dk = gb + D + h * HD, g->dv = gb + 2 * D + h * HD;
        g->lddq = g->lddk = g->lddv = L, g->dq_set = true;
        g->T = T, g->HD = HD, g->k_begin = 0, g->k_end = T, g->scale = 0.125f, g->causal = true;
        g->drop = MHA_DROP_NONE, g->drop_scale = 1.0f;
        bc[x] = *g;
        if (contig) {
            float *qc = floats((size_t)(T * HD), 0), *dc = floats((size_t)(T * HD), 0);
            for (int64_t i = 0; i < T; i++) {
                memcpy(qc + i * HD, g->q + i * L, HD * sizeof(float));
                memcpy(dc + i * HD, g->dout + i * D, HD * sizeof(float));
            }
            bc[x].q = qc, bc[x].ldq = HD, bc[x].dout = dc, bc[x].lddo = HD;
        }
    }

    /* the same bits as the first variant */
    int differ = 0;
    for (int v = 0; v < NVAR; v++) {
        float *out = fwd ? o : grad;
        const size_t n = fwd ? nrow : nqkv;
        memset(out, 0, n * sizeof(float));
        for (int64_t x = 0; x < NH; x++)
            if (fwd)
                vs[v].fwd(&fa[x], scratch);
            else
                vs[v].bwd(&ba[x], scratch);
        if (v == 0)
            memcpy(ref, out, n * sizeof(float));
        else if (memcmp(ref, out, n * sizeof(float))) {
            printf("%-12s %s: bits differ from %s\n", vs[v].name, fwd ? "forward" : "backward", vs[0].name);
            differ++;
        }
    }

    double best[NVAR], bestc[NVAR];
    for (int v = 0; v < NVAR; v++) best[v] = bestc[v] = 1e30;
    for (int r = 0; r < R; r++)
        for (int v = 0; v < NVAR; v++) {
            double t0 = now();
            for (int64_t x = 0; x < NH; x++)
                if (fwd)
                    vs[v].fwd(&fa[x], scratch);
                else
                    vs[v].bwd(&ba[x], scratch);
            double t = now() - t0;
            best[v] = t < best[v] ? t : best[v];
            if (contig && !fwd) {
                t0 = now();
                for (int64_t x = 0; x < NH; x++) vs[v].bwd(&bc[x], scratch);
                t = now() - t0;
                bestc[v] = t < bestc[v] ? t : bestc[v];
            }
        }
    /* forward: QK^T and PV over the causal half; backward 2.5x that */
    const double flops = 4.0 * (double)NH * ((double)T * (double)(T + 1) / 2.0) * HD * (fwd ? 1.0 : 2.5);
    printf("%s, T = %lld, %lld heads, one thread, min of %d rounds\n", fwd ? "forward" : "backward",
           (long long)T, (long long)NH, R);
    for (int v = 0; v < NVAR; v++) {
        printf("%-12s %9.3f ms %7.1f GFLOP/s  %.3f x %s", vs[v].name, best[v] * 1e3, flops / best[v] * 1e-9,
               best[0] / best[v], vs[0].name);
        if (contig && !fwd) printf("  | Q, dO contiguous: %9.3f ms, %.3f x packed", bestc[v] * 1e3, best[v] / bestc[v]);
        printf("\n");
    }
    return differ ? 1 : 0;
}
