/* bench_attn_bound.c — MultiHeadAttention(768, 768, 1024, 0.1, 12) against
 * its bound, in one process: every round times the library's projection
 * GEMM (mha_sgemm) at 8192x2304x768, the shape whose rate
 * bench/compare_torch.py takes as the bound, then the module's forward and
 * forward + backward (dx and every gradient) at each shape, in eval mode,
 * in training mode with PyTorch's mask and with the Philox mask. Minimum
 * over the rounds of each; bound = the counted FLOPs (compare_torch.py's:
 * the forward's 4 projections and the causal half of QK^T and PV; forward
 * + backward adds dX and dW of the projections and 2.5x the core's
 * forward) at the sgemm's minimum time, over the probes and the (8, 1024)
 * QKV phase below, which is the same product. A round runs two probes,
 * back to back, as compare_torch.py times the sgemm (repeated calls): the
 * first one after the module's runs was often the slower (on a 2-core Zen
 * 5, the minima over 9 rounds of the first and the second probes read
 * 268-373 and 403-406 GFLOP/s in four runs, alike in others), and a round
 * with one probe, as until 2026-12-04, took its bound from the slower
 * rate in such runs: bound/mha up to 10% higher (above 1 in one run
 * with the modes taking turns).
 *
 * compare_torch.py measures the probes and mha in separate processes
 * minutes apart; on a VM whose other tenants take the cores for minutes at
 * a time the two minima can come from different loads (bound/mha of 0.5
 * or 2 in one run). Interleaved in one process, every round sees the
 * probe and the module under the same load, and the minima of many rounds
 * are the quiet moments of both. The three modes take turns at going
 * first within a shape (round r starts with mode r mod 3): the first
 * forward after the probe or another shape finds the shape's input and
 * weights out of the caches, the next ones find them in, and with a fixed
 * order the eval forward was always the first (at (1, 1024) on a 2-core
 * Zen 5: eval 19.5-19.8 ms against train's 18.5-19.7, now eval 17.2-18.2;
 * compare_torch.py's peers run repeatedly, their caches warm). So each
 * mode's minimum is its best, as the probe's is. Also printed per shape:
 * the three phases of the eval forward timed alone (QKV GEMM, attention
 * core, out_proj) as fractions of the sgemm rate, and PyTorch's mask drawn
 * alone.
 *
 * The training rows with PyTorch's mask do work the counted FLOPs leave
 * out: B*H*T^2 serial mt19937 draws of two words each, the library's own
 * bulk draw (mha__generator_keep_bits_prefix row after row, as the
 * attention layer draws it; the causal half's bits, every draw consumed).
 * On N threads that work adds at least draw / N to a step whose other
 * work takes the bound (the other threads can take the whole of the
 * computing meanwhile), and the draw itself when that is longer: the
 * training rows also print bound/mha against max(bound + draw / N, draw), the
 * draw timed on one thread in the same rounds (the backward replays the
 * bits: no draw). The Philox mask's work is inside the kernels and is not
 * timed apart.
 *
 * Usage: bench_attn_bound [--threads N] [--forward-only] [--shape B,T]... [rounds]
 *        (default 2 threads, 7 rounds, shapes (8, 1024), (1, 1024), (8, 256)) */
#define MHA_UNSTABLE /* mha_sgemm */
#include "attention/attention.h"
#include "generator/generator.h"
#include "mha.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fill(float *x, size_t n, uint64_t s) { /* xorshift, values in [-1, 1) */
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 40) * 0x1p-23 - 1.0);
    }
}

static void ok(mha_status st, const char *what) {
    if (st != MHA_OK) {
        fprintf(stderr, "%s: %s\n", what, mha_last_error());
        exit(1);
    }
}

static void keep_min(double *best, double t) {
    if (t < *best) *best = t;
}

enum { E = 768, H = 12, HD = 64, P = 3 * E, GM = 8192, MODES = 3 };
static const double cfg_dropout = 0.1;
static const char *const mode_name[MODES] = {"eval", "train", "philox"};

typedef struct {
    int64_t B, T;
    mha_module *m;
    mha_tape *tape;
    float *x, *y, *dx, *dy, *qkv;
    void *ws;
    size_t ws_size;
    uint64_t *bits; /* one head's mask, T rows of ceil(T/64) words */
    double fwd[MODES], step[MODES], qkv_gemm, core, out_proj, draw;
} shape;

/* PyTorch's mask for every head of c's shape, drawn as the attention
 * layer draws it (attention.c's draw_head) into one head's bits, on the
 * calling thread. */
static void draw_mask(shape *c, mha_generator *g, double p) {
    const int64_t T = c->T, ld = (T + 63) / 64;
    for (int64_t n = 0; n < c->B * H; n++)
        for (int64_t i = 0; i < T; i++)
            mha__generator_keep_bits_prefix(g, c->bits + i * ld, (size_t)T, (size_t)(i + 1), p);
}

/* The least time of work taking `bound` on `threads` threads plus a serial
 * draw of `draw` seconds (header). */
static double with_draw(double bound, double draw, int threads) {
    const double shared = bound + draw / threads, serial = draw;
    return shared > serial ? shared : serial;
}

int main(int argc, char **argv) {
    int rounds = 7, threads = 2;
    bool forward_only = false;
    shape sh[8];
    int ns = 0;
    for (int i = 1; i < argc; i++) {
        long long b, t;
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--forward-only") == 0) {
            forward_only = true;
        } else if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc && ns < 8 &&
                   sscanf(argv[i + 1], "%lld,%lld", &b, &t) == 2 && b > 0 && t > 0 && t <= 1024) {
            sh[ns].B = b, sh[ns].T = t, ns++;
            i++;
        } else {
            rounds = atoi(argv[i]);
        }
    }
    if (rounds < 1) rounds = 1;
    if (ns == 0) {
        const int64_t d[3][2] = {{8, 1024}, {1, 1024}, {8, 256}};
        for (; ns < 3; ns++) sh[ns].B = d[ns][0], sh[ns].T = d[ns][1];
    }
    ok(mha_runtime_set_threads(threads), "threads");
    float *ga = malloc(sizeof(float) * (size_t)GM * E), *gw = malloc(sizeof(float) * (size_t)P * E);
    float *gc = malloc(sizeof(float) * (size_t)GM * P);
    if (!ga || !gw || !gc) ok(MHA_ERR_NOMEM, "probe buffers");
    fill(ga, (size_t)GM * E, 1);
    fill(gw, (size_t)P * E, 2);
    mha_generator *gen = NULL;
    ok(mha_generator_create(5, &gen), "generator");
    for (int s = 0; s < ns; s++) {
        shape *c = &sh[s];
        mha_config cfg;
        mha_config_init(&cfg, MHA_MULTI_HEAD_ATTENTION);
        cfg.d_in = cfg.d_out = E;
        cfg.context_length = 1024;
        cfg.num_heads = H;
        cfg.dropout = cfg_dropout;
        ok(mha_module_create_seeded(&cfg, 123, &c->m), "module");
        ok(mha_tape_create(&c->tape), "tape");
        const size_t n = (size_t)(c->B * c->T) * E;
        c->x = malloc(sizeof(float) * n), c->y = malloc(sizeof(float) * n);
        c->dx = malloc(sizeof(float) * n), c->dy = malloc(sizeof(float) * n);
        c->qkv = malloc(sizeof(float) * (size_t)(c->B * c->T) * P);
        c->bits = malloc(sizeof(uint64_t) * (size_t)(c->T * ((c->T + 63) / 64)));
        if (!c->x || !c->y || !c->dx || !c->dy || !c->qkv || !c->bits) ok(MHA_ERR_NOMEM, "buffers");
        fill(c->x, n, 3 + (uint64_t)s);
        fill(c->dy, n, 7 + (uint64_t)s);
        fill(c->qkv, (size_t)(c->B * c->T) * P, 11 + (uint64_t)s);
        mha__attention_desc d;
        mha__attention_desc_init(&d, c->B, c->T, H, HD);
        d.causal = true;
        d.ld_qkv = P; /* the phase's layout (the workspace depends on it) */
        c->ws_size = mha__attention_workspace(&d);
        c->ws = malloc(c->ws_size);
        if (!c->ws) ok(MHA_ERR_NOMEM, "workspace");
        for (int k = 0; k < MODES; k++) c->fwd[k] = c->step[k] = INFINITY;
        c->qkv_gemm = c->core = c->out_proj = c->draw = INFINITY;
    }

    double probe = INFINITY;
    for (int r = 0; r < rounds; r++) {
        double t0;
        for (int i = 0; i < 2; i++) { /* the second right after the first */
            t0 = now_s();
            ok(mha_sgemm(0, 1, GM, P, E, 1.0f, ga, E, gw, E, 0.0f, gc, P), "sgemm");
            keep_min(&probe, now_s() - t0);
        }
        for (int s = 0; s < ns; s++) {
            shape *c = &sh[s];
            const int64_t B = c->B, T = c->T, rows = B * T;
            for (int kk = 0; kk < MODES; kk++) {
                const int k = (kk + r) % MODES; /* each mode first in a third of the rounds */
                mha_forward_opts o = {.training = k > 0,
                                      .rng = k == 2 ? MHA_DROPOUT_RNG_PHILOX : MHA_DROPOUT_RNG_TORCH,
                                      .generator = gen, .philox_seed = 5, .philox_offset = (uint64_t)r};
                t0 = now_s();
                ok(mha_module_forward_ex(c->m, c->y, c->x, B, T, &o, NULL, 0), "forward");
                keep_min(&c->fwd[k], now_s() - t0);
                if (forward_only) continue;
                ok(mha_params_zero_grad(mha_module_params(c->m)), "zero_grad");
                t0 = now_s();
                ok(mha_module_forward_tape(c->m, c->y, c->x, B, T, &o, c->tape, NULL, 0), "taped forward");
                ok(mha_module_backward(c->m, c->tape, c->dx, c->x, c->dy, NULL, 0), "backward");
                keep_min(&c->step[k], now_s() - t0);
            }
            /* the eval forward's phases alone */
            t0 = now_s();
            ok(mha_sgemm(0, 1, rows, P, E, 1.0f, c->x, E, gw, E, 0.0f, c->qkv, P), "qkv");
            keep_min(&c->qkv_gemm, now_s() - t0);
            mha__attention_desc d;
            mha__attention_desc_init(&d, B, T, H, HD);
            d.qkv = c->qkv;
            d.ld_qkv = P;
            d.k_base = E;
            d.v_base = 2 * E;
            d.head_stride = HD;
            d.o = c->qkv; /* over Q, as the module does */
            d.ldo = P;
            d.causal = true;
            t0 = now_s();
            ok(mha__attention_forward(&d, c->ws, c->ws_size), "attention");
            keep_min(&c->core, now_s() - t0);
            t0 = now_s();
            ok(mha_sgemm(0, 1, rows, E, E, 1.0f, c->qkv, P, gw, E, 0.0f, c->y, E), "out_proj");
            keep_min(&c->out_proj, now_s() - t0);
            /* PyTorch's mask alone, one thread */
            t0 = now_s();
            draw_mask(c, gen, cfg_dropout);
            keep_min(&c->draw, now_s() - t0);
        }
        fprintf(stderr, "round %d/%d done\n", r + 1, rounds);
    }
    /* a shape of GM rows ran the probe's very product as its QKV phase: a
     * faster moment of it is a better estimate of the sgemm's rate */
    for (int s = 0; s < ns; s++)
        if (sh[s].B * sh[s].T == GM) keep_min(&probe, sh[s].qkv_gemm);

    const double rate = 2.0 * GM * P * E / probe; /* FLOP/s */
    printf("%s, %d threads, min over %d rounds; sgemm 8192x2304x768 (mha_sgemm, the best of the probes"
           " and any 8192-row QKV phase): %.1f GFLOP/s\n",
           mha_version(), threads, rounds, rate * 1e-9);
    for (int s = 0; s < ns; s++) {
        const shape *c = &sh[s];
        const double rows = (double)(c->B * c->T), T = (double)c->T;
        const double proj = 8.0 * rows * E * E, core = 4.0 * (double)c->B * H * (T * (T + 1) / 2) * HD;
        const double fwd = proj + core, step = fwd + 2 * proj + 2.5 * core;
        printf("(%lld, %lld): bound forward %.1f ms, forward + backward %.1f ms\n", (long long)c->B,
               (long long)c->T, fwd / rate * 1e3, step / rate * 1e3);
        for (int k = 0; k < MODES; k++) {
            printf("  %-6s forward %8.1f ms  bound/mha %.3f", mode_name[k], c->fwd[k] * 1e3,
                   fwd / rate / c->fwd[k]);
            if (!forward_only)
                printf(" | forward + backward %8.1f ms  bound/mha %.3f", c->step[k] * 1e3,
                       step / rate / c->step[k]);
            printf("\n");
        }
        /* the training rows against the bound plus the draw (header) */
        const double fwd_d = with_draw(fwd / rate, c->draw, threads), step_d = with_draw(step / rate, c->draw, threads);
        printf("  train  with the mask's draw (%.1f ms on one thread) in the bound: forward %.1f ms,"
               " bound/mha %.3f", c->draw * 1e3, fwd_d * 1e3, fwd_d / c->fwd[1]);
        if (!forward_only) printf(" | forward + backward %.1f ms, bound/mha %.3f", step_d * 1e3, step_d / c->step[1]);
        printf("\n");
        printf("  eval phases alone, of the sgemm rate: QKV GEMM %.2f, attention core %.2f, out_proj %.2f;"
               " their sum %.1f ms\n",
               3.0 / 4.0 * proj / c->qkv_gemm / rate, core / c->core / rate,
               1.0 / 4.0 * proj / c->out_proj / rate, (c->qkv_gemm + c->core + c->out_proj) * 1e3);
    }
    for (int s = 0; s < ns; s++) {
        mha_module_free(sh[s].m);
        mha_tape_free(sh[s].tape);
        free(sh[s].x), free(sh[s].y), free(sh[s].dx), free(sh[s].dy), free(sh[s].qkv), free(sh[s].ws);
        free(sh[s].bits);
    }
    mha_generator_free(gen);
    free(ga), free(gw), free(gc);
    return 0;
}
