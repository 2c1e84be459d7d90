/* cli.c — what every command shares: one-line errors and strict option
 * parsing. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors -------------------------------------------------------------- */

/* One line on stderr, exit status 1. */
_Noreturn void cli_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mha: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Dies with the library's detail for a failed status. */
void cli_check(mha_status st, const char *what) {
    if (st == MHA_OK) return;
    const char *detail = mha_last_error();
    /* The library's detail may already name the file. */
    if (detail && strncmp(detail, what, strlen(what)) == 0) cli_die("%s", detail);
    if (detail && *detail)
        cli_die("%s: %s", what, detail);
    cli_die("%s: %s", what, mha_status_string(st));
}

void *cli_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) cli_die("out of memory (%zu bytes)", n);
    return p;
}

/* ---- option parsing ------------------------------------------------------- */

int64_t cli_parse_int(const char *opt, const char *s, int64_t lo, int64_t hi) {
    if (!s) cli_die("%s needs a value", opt);
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0') cli_die("%s: '%s' is not an integer", opt, s);
    if (errno == ERANGE || v < lo || v > hi)
        cli_die("%s: %s is out of range [%lld, %lld]", opt, s, (long long)lo, (long long)hi);
    return v;
}

uint64_t cli_parse_seed(const char *opt, const char *s) {
    if (!s) cli_die("%s needs a value", opt);
    errno = 0;
    char *end = NULL;
    /* Like torch.manual_seed: [-2^63, 2^64), negatives taken mod 2^64. */
    if (s[0] == '-') {
        long long v = strtoll(s, &end, 10);
        if (end == s || *end != '\0' || errno == ERANGE) cli_die("%s: '%s' is not a valid seed", opt, s);
        return (uint64_t)v;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || errno == ERANGE) cli_die("%s: '%s' is not a valid seed", opt, s);
    return v;
}

double cli_parse_prob(const char *opt, const char *s) {
    if (!s) cli_die("%s needs a value", opt);
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || *end != '\0') cli_die("%s: '%s' is not a number", opt, s);
    if (!(v >= 0.0 && v < 1.0)) cli_die("%s: dropout must be in [0, 1), got %s", opt, s);
    return v;
}

