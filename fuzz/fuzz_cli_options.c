/* fuzz_cli_options.c — libFuzzer target for the CLI's option parsing: the
 * cores of cli/parse.c, which return an error instead of exiting.
 *
 * The input is an argv vector, its strings separated by NUL bytes (at most
 * 64). Every string goes through every parser (integers in two ranges,
 * seeds, dropout probabilities, id lists): a success must be in range and
 * survive printing and re-parsing unchanged; a failure must leave a
 * non-empty message. Then the vector is walked as a module command's
 * options (--d-in 3 --num-heads 2 --ids 1,2 ...) with the module's class
 * picked by the first string's length, and a complete configuration goes to
 * mha_config_validate. A broken invariant abort()s. */
#include "cli.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ARGS 64

static void must_fail(const char *err) {
    if (err[0] == '\0' || memchr(err, '\0', CLI_ERR_CAP) == NULL) abort();
}

static void each_parser(const char *s) {
    char err[CLI_ERR_CAP], buf[64];
    int64_t v = 0, w = 0;
    err[0] = '\0';
    if (cli_int_parse("--n", s, 1, (int64_t)1 << 40, &v, err)) {
        if (v < 1 || v > ((int64_t)1 << 40)) abort();
    } else {
        must_fail(err);
    }
    err[0] = '\0';
    if (cli_int_parse("--n", s, INT64_MIN, INT64_MAX, &v, err)) {
        snprintf(buf, sizeof buf, "%lld", (long long)v);
        if (!cli_int_parse("--n", buf, INT64_MIN, INT64_MAX, &w, err) || w != v) abort();
    } else {
        must_fail(err);
    }
    uint64_t seed = 0, seed2 = 0;
    err[0] = '\0';
    if (cli_seed_parse("--seed", s, &seed, err)) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)seed);
        if (!cli_seed_parse("--seed", buf, &seed2, err) || seed2 != seed) abort();
    } else {
        must_fail(err);
    }
    double p = -1.0, p2 = -1.0;
    err[0] = '\0';
    if (cli_prob_parse("--dropout", s, &p, err)) {
        if (!(p >= 0.0 && p < 1.0)) abort();
        snprintf(buf, sizeof buf, "%.17g", p);
        if (!cli_prob_parse("--dropout", buf, &p2, err) || p2 != p) abort();
    } else {
        must_fail(err);
    }
    int32_t *ids = NULL;
    int64_t n = -1;
    err[0] = '\0';
    if (cli_ids_parse("--ids", s, &ids, &n, err)) {
        /* as many ids as items, each >= 0; printed back they parse the same */
        int64_t items = 1;
        for (const char *q = s; *q; q++) items += *q == ',';
        if (!ids || n != items) abort();
        char *again = malloc((size_t)n * 12 + 1);
        if (!again) abort();
        size_t k = 0;
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0) abort();
            k += (size_t)sprintf(again + k, "%s%d", i ? "," : "", ids[i]);
        }
        int32_t *ids2 = NULL;
        int64_t n2 = 0;
        if (!cli_ids_parse("--ids", again, &ids2, &n2, err) || n2 != n ||
            memcmp(ids, ids2, (size_t)n * sizeof *ids) != 0)
            abort();
        free(ids2);
        free(again);
        free(ids);
    } else {
        if (ids != NULL || n != 0) abort();
        must_fail(err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a NUL-terminated copy, split at its NULs */
    char *buf = malloc(size + 1);
    if (!buf) abort();
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    for (size_t at = 0; at <= size && argc < MAX_ARGS; at += strlen(buf + at) + 1)
        argv[argc++] = buf + at;
    argv[argc] = NULL;

    for (int i = 0; i < argc; i++) each_parser(argv[i]);

    cli_module_opts o;
    memset(&o, 0, sizeof o);
    const mha_kind kinds[] = {MHA_SELF_ATTENTION_V1, MHA_SELF_ATTENTION_V2, MHA_CAUSAL_ATTENTION,
                              MHA_MULTI_HEAD_ATTENTION_WRAPPER, MHA_MULTI_HEAD_ATTENTION};
    mha_config_init(&o.cfg, kinds[strlen(argv[0]) % 5]);
    bool ok = true;
    char err[CLI_ERR_CAP];
    for (int i = 1; i < argc; i++) {
        err[0] = '\0';
        const int before = i;
        const int r = cli_module_opt(&o, argc, argv, &i, err);
        if (r < 0) {
            must_fail(err);
            ok = false;
            i = before;
        } else if (r == 0 && strcmp(argv[i], "--ids") == 0) {
            int32_t *ids = NULL;
            int64_t n = 0;
            if (cli_ids_parse(argv[i], i + 1 < argc ? argv[i + 1] : NULL, &ids, &n, err)) {
                free(ids);
                i++;
            } else {
                must_fail(err);
                ok = false;
            }
        } else if (r > 0 && i != before && i != before + 1) {
            abort(); /* an option consumes itself and at most its value */
        }
    }
    if (ok && o.have_d_in && o.have_d_out) {
        if (o.cfg.d_in < 1 || o.cfg.d_out < 1) abort();
        (void)mha_config_validate(&o.cfg);
    }
    free(buf);
    return 0;
}
