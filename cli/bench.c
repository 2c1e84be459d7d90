/* bench.c — `mha bench`: times a module's forward pass (warm-up, repeated
 * runs, median and minimum), reports useful GFLOP/s, the kernels and BLAS in
 * use, peak memory, and checks the result once against the reference
 * kernels. */
#define MHA_UNSTABLE /* mha_runtime_set_isa, the tapes' sizes */
#include "cli.h"
#include "mha.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* VmHWM, the high-water mark of this program's own address space, which
 * exec starts afresh. getrusage's ru_maxrss is the process's across exec:
 * started from a Python process holding 2 GiB, `mha bench GPTModel` on a
 * 24.7 MiB model reported the parent's 2079.8 MiB. ru_maxrss only where
 * /proc/self/status or its VmHWM line is missing. */
double cli_peak_rss_mib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        char line[256];
        long long kib = -1;
        bool at_start = true; /* fgets may return a long line in pieces */
        while (fgets(line, sizeof line, f)) {
            if (at_start && sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
            at_start = strchr(line, '\n') != NULL;
        }
        fclose(f);
        if (kib >= 0) return (double)kib / 1024.0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    puts("usage: mha bench [MODULE] [--batch B] [--tokens T] [--d-in N] [--d-out N]\n"
         "                 [--num-heads H] [--context-length N] [--threads N] [--train]\n"
         "                 [--dropout P] [--philox] [--qkv-bias] [--repeat N] [--warmup N]\n"
         "                 [--backward] [--no-check] [--json]\n\n"
         "Times MODULE's forward pass (default MultiHeadAttention, b=8, T=1024, d_in = d_out\n"
         "= 768, 12 heads, context_length = T): warm-up runs, then --repeat timed runs (default\n"
         "10); prints median and minimum milliseconds, useful GFLOP/s (the projections plus\n"
         "the causal half of QK^T and PV), threads, kernels, BLAS and peak resident memory,\n"
         "then checks one batch element against the reference kernels (--no-check skips it).\n"
         "--train runs training mode with dropout (default 0.1 when --train): PyTorch's mask\n"
         "by default, the counter-based fast dropout with --philox. --backward times a\n"
         "training step, forward (recording what the backward needs) and backward (dx and\n"
         "every parameter's gradient); the figures are then the whole step's, plus the\n"
         "backward's own (backward_min_ms). --json prints one JSON object on the last line.");
}

int mha_cli_bench(int argc, char **argv) {
    mha_config c;
    mha_config_init(&c, MHA_MULTI_HEAD_ATTENTION);
    c.d_in = c.d_out = 768;
    c.num_heads = 12;
    int64_t B = 8, T = 1024, ctx = 0, repeat = 10, warmup = 2;
    int threads = 0;
    bool train = false, philox = false, json = false, do_check = true, have_dropout = false;
    bool backward = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int64_t big = (int64_t)1 << 24;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage();
            return 0;
        } else if (strcmp(a, "--batch") == 0) {
            B = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--tokens") == 0) {
            T = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--d-in") == 0) {
            c.d_in = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--d-out") == 0) {
            c.d_out = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--num-heads") == 0) {
            c.num_heads = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--context-length") == 0) {
            ctx = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--threads") == 0) {
            threads = (int)cli_parse_int(a, v, 1, 1024), i++;
        } else if (strcmp(a, "--repeat") == 0) {
            repeat = cli_parse_int(a, v, 1, 100000), i++;
        } else if (strcmp(a, "--warmup") == 0) {
            warmup = cli_parse_int(a, v, 0, 100000), i++;
        } else if (strcmp(a, "--dropout") == 0) {
            c.dropout = cli_parse_prob(a, v);
            have_dropout = true, i++;
        } else if (strcmp(a, "--train") == 0) {
            train = true;
        } else if (strcmp(a, "--backward") == 0) {
            backward = true;
        } else if (strcmp(a, "--philox") == 0) {
            philox = true;
        } else if (strcmp(a, "--qkv-bias") == 0) {
            c.qkv_bias = 1;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--no-check") == 0) {
            do_check = false;
        } else if (a[0] != '-' && i == 2) {
            mha_kind kind;
            if (mha_kind_from_name(a, &kind) != MHA_OK) cli_die("bench: %s", mha_last_error());
            c.kind = kind;
        } else {
            cli_die("bench: unknown option '%s' (see mha bench --help)", a);
        }
    }
    if (train && !have_dropout) c.dropout = 0.1;
    c.context_length = ctx ? ctx : T;
    if (c.kind == MHA_CAUSAL_ATTENTION || c.kind < MHA_CAUSAL_ATTENTION) c.num_heads = 1;
    if (c.kind < MHA_CAUSAL_ATTENTION && B != 1) B = 1; /* v1/v2 take one sequence */
    if (threads && mha_runtime_set_threads(threads) != MHA_OK) cli_die("--threads: %s", mha_last_error());

    mha_module *m = NULL;
    if (mha_module_create_seeded(&c, 123, &m) != MHA_OK) cli_die("bench: %s", mha_last_error());
    const int64_t W = mha_config_output_width(&c);
    const size_t nx = (size_t)(B * T * c.d_in), ny = (size_t)(B * T * W);
    float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
    if (!x || !y) cli_die("out of memory for the input and output");
    mha_generator *g = NULL;
    if (mha_generator_create(7, &g) != MHA_OK) cli_die("bench: %s", mha_last_error());
    mha_generator_uniform(g, x, nx, -1.0, 1.0);

    /* Useful flops: Q, K, V projections, out_proj (MultiHeadAttention),
     * and QK^T + PV over the visible (causal) half of the scores. */
    const bool causal = c.kind >= MHA_CAUSAL_ATTENTION;
    const int64_t H = (c.kind == MHA_MULTI_HEAD_ATTENTION || c.kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER) ? c.num_heads : 1;
    const int64_t HD = c.kind == MHA_MULTI_HEAD_ATTENTION ? c.d_out / c.num_heads : c.d_out;
    const double rows = (double)B * (double)T;
    double flops = 2.0 * rows * (double)c.d_in * 3.0 * (double)W;
    if (c.kind == MHA_MULTI_HEAD_ATTENTION) flops += 2.0 * rows * (double)c.d_out * (double)c.d_out;
    const double pairs = causal ? (double)T * (double)(T + 1) / 2.0 : (double)T * (double)T;
    double attn_flops = 4.0 * (double)B * (double)H * pairs * (double)HD;
    flops += attn_flops;
    /* Backward: every GEMM twice (the weight's gradient and the input's),
     * the attention core 2.5x (QK^T and dO V^T recomputed or new, then dV,
     * dK, dQ: five products for the forward's two). */
    if (backward) {
        flops = 3.0 * (flops - attn_flops) + 3.5 * attn_flops;
        attn_flops *= 3.5;
    }

    mha_forward_opts o = {.training = train, .rng = philox ? MHA_DROPOUT_RNG_PHILOX : MHA_DROPOUT_RNG_TORCH,
                          .philox_seed = 1234};
    const bool tty = isatty(STDERR_FILENO);
    double *ms = malloc((size_t)repeat * sizeof(double)), *bms = malloc((size_t)repeat * sizeof(double));
    if (!ms || !bms) cli_die("out of memory");
    float *dy = NULL, *dx = NULL;
    mha_tape *tape = NULL;
    if (backward) {
        dy = malloc(ny * sizeof(float));
        dx = malloc(nx * sizeof(float));
        if (!dy || !dx || mha_tape_create(&tape) != MHA_OK) cli_die("out of memory");
        mha_generator_uniform(g, dy, ny, -1.0, 1.0);
        if (mha_params_zero_grad(mha_module_params(m)) != MHA_OK) cli_die("gradients: %s", mha_last_error());
    }
    for (int64_t r = -warmup; r < repeat; r++) {
        mha_generator_manual_seed(g, 123);
        o.generator = g;
        o.philox_offset = (uint64_t)(r + warmup);
        double t0 = now_ms();
        if (!backward && mha_module_forward_ex(m, y, x, B, T, &o, NULL, 0) != MHA_OK)
            cli_die("forward: %s", mha_last_error());
        if (backward && mha_module_forward_tape(m, y, x, B, T, &o, tape, NULL, 0) != MHA_OK)
            cli_die("forward: %s", mha_last_error());
        double t1 = now_ms();
        if (backward && mha_module_backward(m, tape, dx, x, dy, NULL, 0) != MHA_OK)
            cli_die("backward: %s", mha_last_error());
        double t = now_ms() - t0;
        if (r >= 0) {
            ms[r] = t;
            bms[r] = now_ms() - t1;
        }
        if (tty && (t > 200.0 || r == repeat - 1))
            fprintf(stderr, "\r%s %lld/%lld (%.1f ms)   %s", r < 0 ? "warm-up" : "run", (long long)(r < 0 ? r + warmup + 1 : r + 1),
                    (long long)(r < 0 ? warmup : repeat), t, r == repeat - 1 ? "\n" : "");
    }
    const double peak = cli_peak_rss_mib();
    qsort(ms, (size_t)repeat, sizeof(double), cmp_double);
    qsort(bms, (size_t)repeat, sizeof(double), cmp_double);
    const double bmed = repeat % 2 ? bms[repeat / 2] : 0.5 * (bms[repeat / 2 - 1] + bms[repeat / 2]);
    const double med = repeat % 2 ? ms[repeat / 2] : 0.5 * (ms[repeat / 2 - 1] + ms[repeat / 2]);
    const double mn = ms[0];
    /* The memory a forward pass cannot do without: weights, input, output
     * and the Q, K, V activations. */
    const double weights = (double)mha_params_scalars(mha_module_params(m));
    double base_floats = weights + (double)nx + (double)ny + rows * 3.0 * (double)W;
    /* a training step also needs: gradients, dx, dy and the row statistics */
    if (backward)
        base_floats += weights + (double)nx + (double)ny + 2.0 * rows * (double)H;
    const double base_mib = base_floats * 4.0 / (1024.0 * 1024.0);
    const char *isa = mha_runtime_isa(), *blas = mha_runtime_blas();
    const int nthreads = mha_runtime_threads();

    /* Check batch element 0 against the reference kernels. In training
     * mode it sees the same mask: the same Philox streams, or PyTorch's
     * stream restarted, whose first H*T*T draws belong to batch element 0
     * (b is the outermost axis of the draws; not for the wrapper, which
     * draws head after head). */
    double max_err = -1.0, max_ref = 0.0;
    const bool heads_outer_draws = c.kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER && c.num_heads > 1;
    if (do_check && !(train && !philox && c.dropout > 0.0 && B > 1 && heads_outer_draws)) {
        if (tty) fprintf(stderr, "checking against the reference kernels...\n");
        const int64_t n = backward ? T * c.d_in : T * W; /* dx or y of element 0 */
        float *yr = malloc((size_t)(T * W) * sizeof(float)), *dxr = malloc((size_t)(T * c.d_in) * sizeof(float));
        if (!yr || !dxr) cli_die("out of memory");
        const char *prev = mha_runtime_isa(); /* restored after the check */
        mha_runtime_set_isa("ref");
        mha_generator_manual_seed(g, 123);
        o.philox_offset = (uint64_t)(repeat - 1 + warmup);
        if (!backward && mha_module_forward_ex(m, yr, x, 1, T, &o, NULL, 0) != MHA_OK)
            cli_die("reference: %s", mha_last_error());
        if (backward && (mha_module_forward_tape(m, yr, x, 1, T, &o, tape, NULL, 0) != MHA_OK ||
                         mha_module_backward(m, tape, dxr, x, dy, NULL, 0) != MHA_OK))
            cli_die("reference: %s", mha_last_error());
        if (mha_runtime_set_isa(prev) != MHA_OK) cli_die("%s", mha_last_error());
        const float *got = backward ? dx : y, *want = backward ? dxr : yr;
        max_err = 0.0;
        for (int64_t i = 0; i < n; i++) {
            max_err = fmax(max_err, fabs((double)want[i] - (double)got[i]));
            max_ref = fmax(max_ref, fabs((double)want[i]));
        }
        free(yr);
        free(dxr);
    }

    if (c.kind < MHA_CAUSAL_ATTENTION)
        printf("%s(d_in=%lld, d_out=%lld%s), eval mode\n", mha_kind_name(c.kind), (long long)c.d_in,
               (long long)c.d_out, c.qkv_bias && c.kind == MHA_SELF_ATTENTION_V2 ? ", qkv_bias=True" : "");
    else
        printf("%s(d_in=%lld, d_out=%lld, context_length=%lld, dropout=%g%s%s), %s mode%s\n", mha_kind_name(c.kind),
               (long long)c.d_in, (long long)c.d_out, (long long)c.context_length, c.dropout,
               c.kind == MHA_CAUSAL_ATTENTION ? "" : (H == 1 ? ", num_heads=1" : ""), c.qkv_bias ? ", qkv_bias=True" : "",
               train ? "training" : "eval",
               train && c.dropout > 0 ? (philox ? " (Philox dropout)" : " (PyTorch dropout mask)") : "");
    if (c.kind != MHA_CAUSAL_ATTENTION && H > 1) printf("num_heads=%lld, head_dim=%lld\n", (long long)H, (long long)HD);
    printf("x: (%lld, %lld, %lld) -> y: (%lld, %lld, %lld)\n", (long long)B, (long long)T, (long long)c.d_in,
           (long long)B, (long long)T, (long long)W);
    printf("threads %d, kernels %s, projections %s\n", nthreads, isa, blas);
    printf("time%s: median %.2f ms, min %.2f ms over %lld runs (%lld warm-up)\n",
           backward ? " of a step (forward + backward)" : "", med, mn, (long long)repeat, (long long)warmup);
    if (backward) printf("backward alone: median %.2f ms, min %.2f ms\n", bmed, bms[0]);
    printf("useful work: %.3f GFLOP (attention core %.3f, causal half) -> %.1f GFLOP/s at the minimum, %.1f at the median\n",
           flops * 1e-9, attn_flops * 1e-9, flops / (mn * 1e6), flops / (med * 1e6));
    printf("peak resident memory: %.1f MiB (weights + x + y + Q/K/V = %.1f MiB, ratio %.2f)\n", peak, base_mib,
           peak / base_mib);
    if (max_err >= 0.0)
        printf("check vs reference kernels (batch element 0): max |diff| %.3g (max |%s| %.3g, relative %.3g)\n",
               max_err, backward ? "dx" : "y", max_ref, max_err / fmax(max_ref, 1e-30));
    else
        printf("check vs reference kernels: skipped\n");
    if (json)
        printf("{\"module\":\"%s\",\"batch\":%lld,\"tokens\":%lld,\"d_in\":%lld,\"d_out\":%lld,\"num_heads\":%lld,"
               "\"train\":%s,\"dropout\":%g,\"philox\":%s,\"threads\":%d,\"isa\":\"%s\",\"blas\":\"%s\","
               "\"median_ms\":%.3f,\"min_ms\":%.3f,\"gflop\":%.4f,\"gflops_at_min\":%.2f,\"peak_rss_mib\":%.1f,"
               "\"baseline_mib\":%.1f,\"max_abs_err\":%.3g,\"backward\":%s,\"backward_min_ms\":%.3f,"
               "\"backward_median_ms\":%.3f}\n",
               mha_kind_name(c.kind), (long long)B, (long long)T, (long long)c.d_in, (long long)c.d_out, (long long)H,
               train ? "true" : "false", c.dropout, philox ? "true" : "false", nthreads, isa, blas, med, mn, flops * 1e-9,
               flops / (mn * 1e6), peak, base_mib, max_err, backward ? "true" : "false",
               backward ? bms[0] : 0.0, backward ? bmed : 0.0);
    free(ms);
    free(bms);
    free(dx);
    free(dy);
    mha_tape_free(tape);
    free(x);
    free(y);
    mha_generator_free(g);
    mha_module_free(m);
    return 0;
}
