/* gpt_train_driver.c — a few training steps of a GPT for
 * tests/torch_gpt_grad_diff.py.
 *
 *   gpt_train_driver WEIGHTS DATA OUT
 *
 * WEIGHTS: a GPTModel file (mha_gpt_load). DATA: a safetensors file with
 * 'idx' and 'targets' (I64, (b, T)) and __metadata__ "steps", "lr",
 * "weight_decay", "optimizer" (AdamW or SGD) and optionally "seed" (training
 * mode: dropout drawn from one generator seeded once, as
 * torch.manual_seed(seed) before the loop). Each step: zero_grad, forward,
 * the mean cross-entropy, backward, optimizer step. Writes 'loss' (steps)
 * and the parameters after the steps, under their names, to OUT. Exits 1
 * with a line on stderr on any failure. */
#include "mha.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what) {
    fprintf(stderr, "gpt_train_driver: %s: %s\n", what, mha_last_error());
    return 1;
}

static int32_t *ids(const mha_st *st, const char *name, int64_t *B, int64_t *T) {
    mha_st_tensor t;
    if (mha_st_find(st, name, &t) != MHA_OK || t.dtype != MHA_DTYPE_I64 || t.ndim != 2) return NULL;
    int32_t *v = malloc(t.numel * sizeof *v);
    for (size_t i = 0; v && i < t.numel; i++) {
        int64_t x;
        memcpy(&x, (const char *)t.data + 8 * i, 8);
        v[i] = (int32_t)x;
    }
    *B = t.shape[0];
    *T = t.shape[1];
    return v;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: gpt_train_driver WEIGHTS DATA OUT\n");
        return 2;
    }
    mha_gpt *m = NULL;
    mha_st *d = NULL;
    if (mha_gpt_load(argv[1], &m) != MHA_OK) return die(argv[1]);
    if (mha_st_read_file(argv[2], &d) != MHA_OK) return die(argv[2]);
    int64_t B, T, B2, T2;
    int32_t *idx = ids(d, "idx", &B, &T), *tgt = ids(d, "targets", &B2, &T2);
    const char *steps_s = mha_st_metadata(d, "steps"), *lr_s = mha_st_metadata(d, "lr");
    const char *wd_s = mha_st_metadata(d, "weight_decay"), *opt_s = mha_st_metadata(d, "optimizer");
    const char *seed_s = mha_st_metadata(d, "seed");
    if (!idx || !tgt || B != B2 || T != T2 || !steps_s || !lr_s || !wd_s || !opt_s) {
        fprintf(stderr, "gpt_train_driver: %s: needs idx, targets (I64, same shape) and the metadata\n", argv[2]);
        return 1;
    }
    const int steps = atoi(steps_s);
    mha_optimizer *o = NULL;
    mha_optimizer_config c;
    mha_optimizer_config_init(&c, strcmp(opt_s, "AdamW") ? MHA_OPTIM_SGD : MHA_OPTIM_ADAMW);
    c.adamw.lr = c.sgd.lr = strtod(lr_s, NULL);
    c.adamw.weight_decay = c.sgd.weight_decay = strtod(wd_s, NULL);
    if (mha_optimizer_create(mha_gpt_params(m), &c, &o) != MHA_OK) return die("optimizer");
    mha_generator *g = NULL;
    if (seed_s && mha_generator_create(strtoull(seed_s, NULL, 10), &g) != MHA_OK) return die("generator");
    mha_gpt_tape *tape = NULL;
    if (mha_gpt_tape_create(&tape) != MHA_OK) return die("tape");
    float *loss = calloc((size_t)steps + 1, sizeof *loss);
    for (int i = 0; i < steps; i++) {
        if (mha_params_zero_grad(mha_gpt_params(m)) != MHA_OK) return die("zero_grad");
        if (mha_gpt_loss_backward(m, &loss[i], NULL, idx, tgt, B, T, g, tape) != MHA_OK) return die("loss_backward");
        if (mha_optimizer_step(o) != MHA_OK) return die("step");
    }
    const size_t np = mha_params_count(mha_gpt_params(m));
    mha_st_entry *e = calloc(np + 1, sizeof *e);
    int64_t(*shapes)[2] = calloc(np + 1, sizeof *shapes);
    shapes[np][0] = steps;
    e[0] = (mha_st_entry){"loss", MHA_DTYPE_F32, 1, shapes[np], loss};
    for (size_t i = 0; i < np; i++) {
        mha_param p;
        mha_params_get(mha_gpt_params(m), i, &p);
        shapes[i][0] = p.shape[0];
        shapes[i][1] = p.shape[1];
        e[i + 1] = (mha_st_entry){p.name, MHA_DTYPE_F32, p.ndim, shapes[i], p.data};
    }
    if (mha_st_write_file(argv[3], e, np + 1, NULL, 0) != MHA_OK) return die(argv[3]);
    free(e);
    free(shapes);
    free(loss);
    free(idx);
    free(tgt);
    mha_gpt_tape_free(tape);
    mha_generator_free(g);
    mha_optimizer_free(o);
    mha_st_free(d);
    mha_gpt_free(m);
    return 0;
}
