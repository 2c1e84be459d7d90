/* optim_driver.c — runs optimizer steps for tests/torch_optim_diff.py.
 *
 *   optim_driver MODULE GRADS OUT [STATE_IN|- [STATE_OUT]]
 *
 * MODULE: a module file (mha_module_load). GRADS: a safetensors file whose
 * __metadata__ holds the optimizer ("optimizer" = AdamW or SGD, the
 * hyper-parameters under the names of mha_optimizer_save, "variant",
 * "steps" = N, and optionally "lr.<s>": the learning rate set before step
 * s) and whose tensors "<s>.<param name>" are the gradients of step
 * s = 0..N-1. With STATE_IN the optimizer is loaded from it first (its
 * hyper-parameters replace those of GRADS). Writes the parameters after the
 * N steps to OUT (mha_module_save) and the optimizer to STATE_OUT.
 * Exits 1 with a line on stderr on any failure. */
#include "mha.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what, mha_status s) {
    fprintf(stderr, "optim_driver: %s: %s: %s\n", what, mha_status_name(s), mha_last_error());
    return 1;
}

static double meta_num(const mha_st *st, const char *key, double dflt) {
    const char *v = mha_st_metadata(st, key);
    return v ? strtod(v, NULL) : dflt;
}

static int meta_bool(const mha_st *st, const char *key) {
    const char *v = mha_st_metadata(st, key);
    return v && (!strcmp(v, "true") || !strcmp(v, "1"));
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: optim_driver MODULE GRADS OUT [STATE_IN|- [STATE_OUT]]\n");
        return 2;
    }
    mha_module *m = NULL;
    mha_st *g = NULL;
    mha_optimizer *o = NULL;
    int rc = 1;
    mha_status s = mha_module_load(argv[1], &m);
    if (s != MHA_OK) return die(argv[1], s);
    s = mha_st_read_file(argv[2], &g);
    if (s != MHA_OK) {
        rc = die(argv[2], s);
        goto out;
    }
    const char *opt = mha_st_metadata(g, "optimizer");
    const char *var = mha_st_metadata(g, "variant");
    const mha_optim_variant variant =
        var && !strcmp(var, "default") ? MHA_OPTIM_TORCH_DEFAULT : MHA_OPTIM_TORCH_AVX2;
    if (opt && !strcmp(opt, "AdamW")) {
        mha_adamw_config c;
        mha_adamw_config_init(&c);
        c.lr = meta_num(g, "lr", c.lr);
        c.beta1 = meta_num(g, "beta1", c.beta1);
        c.beta2 = meta_num(g, "beta2", c.beta2);
        c.eps = meta_num(g, "eps", c.eps);
        c.weight_decay = meta_num(g, "weight_decay", c.weight_decay);
        c.amsgrad = meta_bool(g, "amsgrad");
        c.variant = variant;
        s = mha_optimizer_create(mha_module_params(m), &(mha_optimizer_config){MHA_OPTIM_ADAMW, .adamw = c},
                                 &o);
    } else if (opt && !strcmp(opt, "SGD")) {
        mha_sgd_config c;
        mha_sgd_config_init(&c);
        c.lr = meta_num(g, "lr", c.lr);
        c.momentum = meta_num(g, "momentum", c.momentum);
        c.dampening = meta_num(g, "dampening", c.dampening);
        c.weight_decay = meta_num(g, "weight_decay", c.weight_decay);
        c.nesterov = meta_bool(g, "nesterov");
        c.variant = variant;
        s = mha_optimizer_create(mha_module_params(m), &(mha_optimizer_config){MHA_OPTIM_SGD, .sgd = c}, &o);
    } else {
        fprintf(stderr, "optim_driver: %s: no optimizer AdamW or SGD in __metadata__\n", argv[2]);
        goto out;
    }
    if (s != MHA_OK) {
        rc = die("create", s);
        goto out;
    }
    if (argc >= 5 && strcmp(argv[4], "-") != 0) {
        s = mha_optimizer_load(o, argv[4]);
        if (s != MHA_OK) {
            rc = die("load", s);
            goto out;
        }
    }
    const long steps = (long)meta_num(g, "steps", 0);
    const size_t np = mha_params_count(mha_module_params(m));
    for (long k = 0; k < steps; k++) {
        char key[256];
        snprintf(key, sizeof key, "lr.%ld", k);
        const char *lr = mha_st_metadata(g, key);
        if (lr && (s = mha_optimizer_set_lr(o, strtod(lr, NULL))) != MHA_OK) {
            rc = die("set_lr", s);
            goto out;
        }
        for (size_t i = 0; i < np; i++) {
            mha_param gp;
            mha_st_tensor t;
            s = mha_params_grad(mha_module_params(m), i, &gp);
            if (s != MHA_OK) {
                rc = die("grad", s);
                goto out;
            }
            snprintf(key, sizeof key, "%ld.%s", k, gp.name);
            s = mha_st_find(g, key, &t);
            if (s == MHA_OK && t.numel != gp.numel) s = MHA_ERR_SHAPE;
            if (s == MHA_OK) s = mha_st_tensor_to_f32(&t, gp.data, gp.numel);
            if (s != MHA_OK) {
                rc = die(key, s);
                goto out;
            }
        }
        s = mha_optimizer_step(o);
        if (s != MHA_OK) {
            rc = die("step", s);
            goto out;
        }
    }
    s = mha_module_save(m, argv[3]);
    if (s != MHA_OK) {
        rc = die(argv[3], s);
        goto out;
    }
    if (argc == 6 && (s = mha_optimizer_save(o, argv[5])) != MHA_OK) {
        rc = die(argv[5], s);
        goto out;
    }
    rc = 0;
out:
    mha_optimizer_free(o);
    mha_st_free(g);
    mha_module_free(m);
    return rc;
}
