/* parse.c — the CLI's option parsers without the exit: each returns false
 * with a one-line message in err, which the cli_parse_* wrappers of cli.c
 * turn into the command's error and exit status 1. Kept apart from cli.c so
 * that fuzz/fuzz_cli_options.c can call them on arbitrary strings. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fail(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(char *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, CLI_ERR_CAP, fmt, ap);
    va_end(ap);
    return false;
}

bool cli_int_parse(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out, char *err) {
    if (!s) return fail(err, "%s needs a value", opt);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') return fail(err, "%s: '%s' is not an integer", opt, s);
    if (errno == ERANGE || v < lo || v > hi)
        return fail(err, "%s: %s is out of range [%lld, %lld]", opt, s, (long long)lo, (long long)hi);
    *out = v;
    return true;
}

bool cli_seed_parse(const char *opt, const char *s, uint64_t *out, char *err) {
    if (!s) return fail(err, "%s needs a value", opt);
    errno = 0;
    char *end = NULL;
    /* Like torch.manual_seed: [-2^63, 2^64), negatives taken mod 2^64. */
    if (s[0] == '-') {
        long long v = strtoll(s, &end, 10);
        if (end == s || *end != '\0' || errno == ERANGE) return fail(err, "%s: '%s' is not a valid seed", opt, s);
        *out = (uint64_t)v;
        return true;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) return fail(err, "%s: '%s' is not a valid seed", opt, s);
    *out = v;
    return true;
}

bool cli_prob_parse(const char *opt, const char *s, double *out, char *err) {
    if (!s) return fail(err, "%s needs a value", opt);
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0') return fail(err, "%s: '%s' is not a number", opt, s);
    if (!(v >= 0.0 && v < 1.0)) return fail(err, "%s: dropout must be in [0, 1), got %s", opt, s);
    *out = v;
    return true;
}

/* "15496,11,314" -> ids; strict: digits only, no empty items. Two passes:
 * the first only checks, so nothing is allocated when it fails. */
bool cli_ids_parse(const char *opt, const char *s, int32_t **ids_out, int64_t *n, char *err) {
    *ids_out = NULL;
    *n = 0;
    if (!s || !*s) return fail(err, "%s needs a comma-separated list of token ids", opt);
    int64_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = NULL;
    int64_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            ids = malloc((size_t)cap * sizeof(int32_t));
            if (!ids) return fail(err, "out of memory (%lld ids)", (long long)cap);
        }
        k = 0;
        const char *p = s;
        for (;;) {
            const char *q = p;
            int64_t v = 0;
            while (*q >= '0' && *q <= '9') {
                v = v * 10 + (*q - '0');
                if (v > INT32_MAX) return fail(err, "%s: id '%.*s' is too large", opt, (int)(q - p + 1), p);
                q++;
            }
            if (q == p || (*q && *q != ','))
                return fail(err, "%s: '%s' is not a comma-separated list of token ids (at character %lld)", opt,
                            s, (long long)(q - s + 1));
            if (pass) ids[k] = (int32_t)v;
            k++;
            if (!*q) break;
            p = q + 1;
        }
    }
    *ids_out = ids;
    *n = k;
    return true;
}

int cli_module_opt(cli_module_opts *o, int argc, char **argv, int *i, char *err) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const int64_t big = (int64_t)1 << 40;
    bool ok;
    if (strcmp(a, "--d-in") == 0) {
        ok = cli_int_parse(a, v, 1, big, &o->cfg.d_in, err), o->have_d_in = ok;
    } else if (strcmp(a, "--d-out") == 0) {
        ok = cli_int_parse(a, v, 1, big, &o->cfg.d_out, err), o->have_d_out = ok;
    } else if (strcmp(a, "--context-length") == 0) {
        ok = cli_int_parse(a, v, 1, big, &o->cfg.context_length, err), o->have_ctx = ok;
    } else if (strcmp(a, "--num-heads") == 0) {
        ok = cli_int_parse(a, v, 1, big, &o->cfg.num_heads, err), o->have_heads = ok;
    } else if (strcmp(a, "--dropout") == 0) {
        ok = cli_prob_parse(a, v, &o->cfg.dropout, err);
    } else if (strcmp(a, "--seed") == 0) {
        ok = cli_seed_parse(a, v, &o->seed, err), o->have_seed = ok;
    } else if (strcmp(a, "--qkv-bias") == 0) {
        o->cfg.qkv_bias = 1;
        return 1;
    } else {
        return 0;
    }
    if (!ok) return -1;
    (*i)++;
    return 1;
}
