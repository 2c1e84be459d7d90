/* bench_train_phases.c — where one GPTModel training step's time goes:
 * mha_gpt_forward_tape, the cross-entropy over the tape's logits, the
 * backward (mha__gpt_model_backward), AdamW's step and zero_grad timed
 * apart, next to the sum of the step's GEMMs timed alone at their shapes
 * (mha__sgemm, each call as the forward and backward make it): the rest is
 * what is not a GEMM (attention core, LayerNorm, GELU, dropout masks,
 * cross-entropy, embeddings, AdamW).
 *
 *   bench_train_phases [layers 12] [batch 2] [tokens 256] [reps 3] [vocab 50257] [drop 0.1]
 * The minimum over reps of each phase (after a warm-up step). */
#include "gpt/gpt.h"
#include "kernels/drivers.h"
#include "mha.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int die(const char *what) {
    fprintf(stderr, "bench_train_phases: %s: %s\n", what, mha_last_error());
    return 1;
}

/* min over reps of one sgemm call, ms */
static double time_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float beta, const float *A,
                        const float *B, float *C, int reps) {
    double best = 1e30;
    for (int r = -1; r < reps; r++) {
        const double t0 = now_ms();
        if (mha__sgemm(ta, tb, M, N, K, 1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, N) != MHA_OK) return -1.0;
        const double t = now_ms() - t0;
        if (r >= 0 && t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const int64_t L = argc > 1 ? atoll(argv[1]) : 12, B = argc > 2 ? atoll(argv[2]) : 2;
    const int64_t T = argc > 3 ? atoll(argv[3]) : 256;
    const int reps = argc > 4 ? atoi(argv[4]) : 3;
    const int64_t V = argc > 5 ? atoll(argv[5]) : 50257;
    const double drop = argc > 6 ? atof(argv[6]) : 0.1;
    if (L < 1 || B < 1 || T < 1 || reps < 1 || V < 1) {
        fprintf(stderr, "usage: bench_train_phases [layers] [batch] [tokens] [reps] [vocab] [drop]\n");
        return 2;
    }
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_GPT_MODEL);
    c.n_layers = L, c.vocab_size = V, c.context_length = T > 256 ? T : 256, c.drop_rate = drop;
    mha_gpt *m = NULL;
    mha_gpt_tape *tape = NULL;
    mha_generator *g = NULL;
    if (mha_gpt_create_seeded(&c, 123, &m) != MHA_OK) return die("create");
    if (mha_gpt_tape_create(&tape) != MHA_OK || mha_generator_create(7, &g) != MHA_OK) return die("tape");
    mha_optimizer_config oc;
    mha_optimizer_config_init(&oc, MHA_OPTIM_ADAMW);
    oc.adamw.lr = 4e-4, oc.adamw.weight_decay = 0.1;
    mha_optimizer *opt = NULL;
    if (mha_optimizer_create(mha_gpt_params(m), &oc, &opt) != MHA_OK) return die("AdamW");
    const int64_t R = B * T, E = c.emb_dim;
    int32_t *idx = malloc((size_t)R * sizeof *idx), *tgt = malloc((size_t)R * sizeof *tgt);
    if (!idx || !tgt) return 1;
    for (int64_t i = 0; i < R; i++) {
        idx[i] = (int32_t)((i * 7919 + 13) % V);
        tgt[i] = (int32_t)((i * 104729 + 7) % V);
    }
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    float loss0 = 0.0f;
    for (int r = -1; r < reps; r++) {
        float loss;
        double t[6];
        t[0] = now_ms();
        if (mha_params_zero_grad(mha_gpt_params(m)) != MHA_OK) return die("zero_grad");
        t[1] = now_ms();
        if (mha_gpt_forward_tape(m, NULL, idx, B, T, drop > 0 ? g : NULL, tape) != MHA_OK) return die("forward");
        t[2] = now_ms();
        if (mha_cross_entropy(&loss, tape->logits, tape->logits, tgt, R, V) != MHA_OK) return die("loss");
        t[3] = now_ms();
        if (mha__gpt_model_backward(m, tape, tape->logits) != MHA_OK) return die("backward");
        tape->m = NULL;
        t[4] = now_ms();
        if (mha_optimizer_step(opt) != MHA_OK) return die("step");
        t[5] = now_ms();
        if (r < 0) loss0 = loss;
        for (int k = 0; k < 5 && r >= 0; k++)
            if (t[k + 1] - t[k] < best[k]) best[k] = t[k + 1] - t[k];
    }
    /* the step's GEMMs alone */
    const int64_t most = (V * E > R * V ? V * E : R * V) > R * 4 * E ? (V * E > R * V ? V * E : R * V) : R * 4 * E;
    float *A = calloc((size_t)most, sizeof(float)), *Bm = calloc((size_t)most, sizeof(float));
    float *C = calloc((size_t)most, sizeof(float));
    if (!A || !Bm || !C) return 1;
    mha_generator_uniform(g, A, (size_t)most, -1.0, 1.0);
    mha_generator_uniform(g, Bm, (size_t)most, -1.0, 1.0);
    const int64_t lin[5][2] = {{E, 3 * E}, {E, E}, {E, 4 * E}, {4 * E, E}, {E, V}}; /* in, out */
    double fwd = 0, bwd = 0, head = 0, flop = 0;
    for (int i = 0; i < 5; i++) {
        const int64_t in = lin[i][0], out = lin[i][1];
        const double f = time_gemm(false, true, R, out, in, 0.0f, A, Bm, C, reps);
        const double dx = time_gemm(false, false, R, in, out, 0.0f, A, Bm, C, reps);
        const double dw = time_gemm(true, false, out, in, R, 1.0f, A, Bm, C, reps);
        if (f < 0 || dx < 0 || dw < 0) return die("sgemm");
        const double n = i < 4 ? (double)L : 1.0;
        fwd += n * f, bwd += n * (dx + dw), flop += n * 6.0 * (double)R * (double)in * (double)out;
        if (i == 4) head = f + dx + dw;
        printf("  %-8s x%-2d forward %7.2f ms  dx %7.2f ms  dW %7.2f ms  (%.1f, %.1f, %.1f GFLOP/s)\n",
               i == 0 ? "qkv" : i == 1 ? "out_proj" : i == 2 ? "fc1" : i == 3 ? "fc2" : "head", (int)n, f, dx, dw,
               2.0 * (double)R * (double)in * (double)out / f * 1e-6, 2.0 * (double)R * (double)in * (double)out / dx * 1e-6,
               2.0 * (double)R * (double)in * (double)out / dw * 1e-6);
    }
    const double step = best[0] + best[1] + best[2] + best[3] + best[4];
    printf("GPTModel %lld layers, vocab %lld, %lld x %lld tokens, drop %g, %d threads, %s / %s (loss %.9g):\n",
           (long long)L, (long long)V, (long long)B, (long long)T, drop, mha_runtime_threads(), mha_runtime_isa(),
           mha_runtime_blas(), (double)loss0);
    printf("  zero_grad %8.1f ms\n  forward   %8.1f ms (its GEMMs alone %.1f)\n  cross-ent %8.1f ms\n"
           "  backward  %8.1f ms (its GEMMs alone %.1f)\n  AdamW     %8.1f ms\n  sum       %8.1f ms; GEMMs %.1f ms "
           "(%.1f GFLOP at %.1f GFLOP/s; the head's %.1f ms); the rest %.1f ms\n",
           best[0], best[1], fwd, best[2], best[3], bwd, best[4], step, fwd + bwd, flop * 1e-9,
           flop / (fwd + bwd) * 1e-6, head, step - fwd - bwd);
    free(A), free(Bm), free(C), free(idx), free(tgt);
    mha_optimizer_free(opt);
    mha_generator_free(g);
    mha_gpt_tape_free(tape);
    mha_gpt_free(m);
    return 0;
}
