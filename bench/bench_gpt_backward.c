/* bench_gpt_backward.c — one training step of a GPTModel on the public API:
 * mha_gpt_loss_backward (the taped forward, the cross-entropy, the backward
 * into the gradients) at a GPT_CONFIG_124M-like shape with fewer layers,
 * dropout on. Prints the median and the minimum over the repetitions (the
 * machine may be shared) and the loss of the first step, which must not
 * change between builds of the same bits.
 *
 *   bench_gpt_backward [layers] [batch] [tokens] [reps] [vocab]
 * (default 2 2 256 7 50257; a small vocabulary leaves the blocks' time). */
#include "mha.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int die(const char *what) {
    fprintf(stderr, "bench_gpt_backward: %s: %s\n", what, mha_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const int64_t L = argc > 1 ? atoll(argv[1]) : 2, B = argc > 2 ? atoll(argv[2]) : 2;
    const int64_t T = argc > 3 ? atoll(argv[3]) : 256;
    const int reps = argc > 4 ? atoi(argv[4]) : 7;
    const int64_t V = argc > 5 ? atoll(argv[5]) : 50257;
    if (L < 1 || B < 1 || T < 1 || reps < 1 || reps > 100 || V < 1) {
        fprintf(stderr, "usage: bench_gpt_backward [layers] [batch] [tokens] [reps <= 100] [vocab]\n");
        return 2;
    }
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_GPT_MODEL);
    c.n_layers = L;
    c.vocab_size = V;
    c.context_length = T > 256 ? T : 256;
    mha_gpt *m = NULL;
    mha_gpt_tape *tape = NULL;
    mha_generator *g = NULL;
    if (mha_gpt_create_seeded(&c, 123, &m) != MHA_OK) return die("create");
    if (mha_gpt_tape_create(&tape) != MHA_OK || mha_generator_create(7, &g) != MHA_OK) return die("tape");
    int32_t *idx = malloc((size_t)(B * T) * sizeof *idx), *tgt = malloc((size_t)(B * T) * sizeof *tgt);
    if (!idx || !tgt) return 1;
    for (int64_t i = 0; i < B * T; i++) {
        idx[i] = (int32_t)((i * 7919 + 13) % c.vocab_size);
        tgt[i] = (int32_t)((i * 104729 + 7) % c.vocab_size);
    }
    double ms[100], first_loss = 0.0;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        float loss;
        if (mha_params_zero_grad(mha_gpt_params(m)) != MHA_OK) return die("zero_grad");
        mha_generator_manual_seed(g, 7);
        const double t0 = now_ms();
        const mha_status st = mha_gpt_loss_backward(m, &loss, NULL, idx, tgt, B, T, g, tape);
        if (st != MHA_OK) return die("loss_backward");
        if (r >= 0) ms[r] = now_ms() - t0;
        else first_loss = (double)loss;
    }
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
    printf("GPTModel 124M-like, %lld layers, vocab %lld, batch %lld x %lld tokens, %d threads, kernels %s: "
           "loss_backward median %.1f ms, min %.1f ms (loss %.9g)\n",
           (long long)L, (long long)V, (long long)B, (long long)T, mha_runtime_threads(), mha_runtime_isa(),
           ms[reps / 2], ms[0], first_loss);
    free(idx), free(tgt);
    mha_generator_free(g);
    mha_gpt_tape_free(tape);
    mha_gpt_free(m);
    return 0;
}
