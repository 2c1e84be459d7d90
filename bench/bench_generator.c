/* bench_generator.c — the generator's bulk paths against the scalar calls,
 * one thread: ns per 32-bit output for mt19937 draws, ns per element for
 * keep bits (2 outputs per element) and dropout on floats.
 *
 *   scalar     : mha_generator_random / mha__dropout_keep one call at a time
 *                (what the library did before the bulk paths)
 *   bulk ref   : mha__generator_random_bulk etc. forced to the scalar code
 *                (mha_runtime_set_isa("ref"))
 *   bulk auto  : the same on the best ISA (AVX2 where the CPU has it)
 *
 * Each figure is the minimum over the repetitions (the machine may be
 * shared: short runs, many of them, interleaved between the variants).
 * Usage: bench_generator [elements] [reps]   (default 1000000, 30) */
#define MHA_UNSTABLE /* mha_runtime_set_isa */
#include "generator/generator.h"
#include "mha.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile uint64_t sink;

enum { CHUNK = 8192 };

typedef enum { RAW_SCALAR, RAW_BULK_CHUNK, RAW_BULK_ONE } raw_mode;

/* n outputs; CHUNK-sized calls into an L1/L2 buffer (how keep_bits and
 * callers use it) or one call over the whole array (memory-bound). */
static double run_raw(mha_generator *g, uint32_t *buf, size_t n, raw_mode mode) {
    const double t0 = now_s();
    uint64_t x = 0;
    if (mode == RAW_SCALAR) {
        for (size_t i = 0; i < n; i += CHUNK) {
            const size_t m = n - i < CHUNK ? n - i : CHUNK;
            for (size_t j = 0; j < m; j++) buf[j] = mha_generator_random(g);
            x += buf[m - 1];
        }
    } else if (mode == RAW_BULK_CHUNK) {
        for (size_t i = 0; i < n; i += CHUNK) {
            const size_t m = n - i < CHUNK ? n - i : CHUNK;
            mha__generator_random_bulk(g, buf, m);
            x += buf[m - 1];
        }
    } else {
        mha__generator_random_bulk(g, buf, n);
        x += buf[n - 1];
    }
    sink += x;
    return now_s() - t0;
}

static double run_keep_scalar(mha_generator *g, uint64_t *bits, size_t n, double p) {
    const double t0 = now_s();
    memset(bits, 0, (n + 63) / 64 * sizeof *bits);
    for (size_t i = 0; i < n; i++)
        bits[i >> 6] |= (uint64_t)mha__dropout_keep(g, p) << (i & 63);
    sink += bits[0];
    return now_s() - t0;
}

static double run_keep_bulk(mha_generator *g, uint64_t *bits, size_t n, double p) {
    const double t0 = now_s();
    mha__generator_keep_bits(g, bits, n, p);
    sink += bits[0];
    return now_s() - t0;
}

/* The pre-bulk mha_generator_dropout loop, for reference. */
static double run_dropout_scalar(mha_generator *g, float *out, const float *in, size_t n,
                                 double p) {
    const double t0 = now_s();
    const double q = 1.0 - p;
    const float scale = mha__dropout_scale(p);
    for (size_t i = 0; i < n; i++) out[i] = in[i] * (mha__generator_u53(g) < q ? scale : 0.0f);
    sink += (uint64_t)out[0];
    return now_s() - t0;
}

static double run_dropout(mha_generator *g, float *out, const float *in, size_t n, double p) {
    const double t0 = now_s();
    mha_generator_dropout(g, out, in, n, p);
    sink += (uint64_t)out[0];
    return now_s() - t0;
}

static const char *isa_label(const char *isa) { return isa[0] == 'r' ? "bulk ref " : "bulk auto"; }

int main(int argc, char **argv) {
    const size_t n = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1000000u;
    const int reps = argc > 2 ? atoi(argv[2]) : 30;
    if (n == 0 || reps < 1) {
        fprintf(stderr, "usage: bench_generator [elements > 0] [reps > 0]\n");
        return 2;
    }
    uint32_t *raw = malloc(2 * n * sizeof *raw);
    uint64_t *bits = malloc((n + 63) / 64 * sizeof *bits);
    float *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
    mha_generator *g = NULL;
    if (!raw || !bits || !in || !out || mha_generator_create(123, &g) != MHA_OK) {
        fprintf(stderr, "bench_generator: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) in[i] = (float)(i % 97) * 0.125f - 6.0f;
    mha_runtime_set_isa("auto");
    printf("bench_generator: %zu elements (%zu raw outputs), min of %d runs, ISA auto = %s\n",
           n, 2 * n, reps, mha_runtime_isa());

    const size_t nr = 2 * n;
    const double p = 0.1;
    double best[12];
    for (int k = 0; k < 12; k++) best[k] = 1e30;
    const char *isas[2] = {"ref", "auto"};
    for (int r = 0; r < reps; r++) {
        double t;
        mha_runtime_set_isa("auto");
        if ((t = run_raw(g, raw, nr, RAW_SCALAR)) < best[0]) best[0] = t;
        if ((t = run_keep_scalar(g, bits, n, p)) < best[1]) best[1] = t;
        if ((t = run_dropout_scalar(g, out, in, n, p)) < best[2]) best[2] = t;
        for (int k = 0; k < 2; k++) {
            mha_runtime_set_isa(isas[k]);
            const int b = 3 + 4 * k;
            if ((t = run_raw(g, raw, nr, RAW_BULK_CHUNK)) < best[b]) best[b] = t;
            if ((t = run_raw(g, raw, nr, RAW_BULK_ONE)) < best[b + 1]) best[b + 1] = t;
            if ((t = run_keep_bulk(g, bits, n, p)) < best[b + 2]) best[b + 2] = t;
            if ((t = run_dropout(g, out, in, n, p)) < best[b + 3]) best[b + 3] = t;
        }
    }
    mha_runtime_set_isa("auto");
    const double ns_r = 1e9 / (double)nr, ns_e = 1e9 / (double)n;
    printf("raw outputs      scalar     %7.3f ns/output\n", best[0] * ns_r);
    for (int k = 0; k < 2; k++) {
        const int b = 3 + 4 * k;
        printf("raw outputs      %s  %7.3f ns/output (%d-output calls), %.3f (one call)\n",
               isa_label(isas[k]), best[b] * ns_r, CHUNK, best[b + 1] * ns_r);
    }
    printf("keep bits p=%.1f  scalar     %7.3f ns/element\n", p, best[1] * ns_e);
    for (int k = 0; k < 2; k++)
        printf("keep bits p=%.1f  %s  %7.3f ns/element\n", p, isa_label(isas[k]),
               best[3 + 4 * k + 2] * ns_e);
    printf("dropout   p=%.1f  scalar     %7.3f ns/element\n", p, best[2] * ns_e);
    for (int k = 0; k < 2; k++)
        printf("dropout   p=%.1f  %s  %7.3f ns/element\n", p, isa_label(isas[k]),
               best[3 + 4 * k + 3] * ns_e);
    mha_generator_free(g);
    free(raw);
    free(bits);
    free(in);
    free(out);
    return 0;
}
