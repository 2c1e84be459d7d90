/* cli.c — what every command shares: one-line errors and strict option
 * parsing. */
#include "cli.h"
#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- errors -------------------------------------------------------------- */

/* The output directory this process created (cli_make_dir), or NULL. */
static const char *made_dir;

/* One line on stderr, exit status 1; the directory this process created
 * goes too while it is still empty (a refused command leaves nothing). */
_Noreturn void cli_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (cli_dist_size() > 1 && cli_dist_rank() > 0) fprintf(stderr, "mha: rank %d: error: ", cli_dist_rank());
    else fputs("mha: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (made_dir) (void)rmdir(made_dir); /* fails, harmlessly, once it holds a file */
    cli_dist_abort(1); /* under mpirun: the other ranks end too */
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

void cli_make_dir(const char *dir) {
    if (mkdir(dir, 0777) == 0) made_dir = dir;
    else if (errno != EEXIST) cli_die("%s: cannot create: %s", dir, strerror(errno));
}

void cli_lock_dir(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) cli_die("%s: cannot open: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK)
            cli_die("%s: another mha train is writing to this directory; let it finish (or stop it), or "
                    "choose another --out", dir);
        cli_die("%s: cannot lock: %s", dir, strerror(errno));
    }
    /* fd stays open: the lock lasts as long as the process (the kernel
     * drops it at exit, SIGKILL included) */
}

/* ---- option parsing ------------------------------------------------------- */
/* The parsing itself is in parse.c; these die with its message. */

int64_t cli_parse_int(const char *opt, const char *s, int64_t lo, int64_t hi) {
    char err[CLI_ERR_CAP];
    int64_t v = 0;
    if (!cli_int_parse(opt, s, lo, hi, &v, err)) cli_die("%s", err);
    return v;
}

uint64_t cli_parse_seed(const char *opt, const char *s) {
    char err[CLI_ERR_CAP];
    uint64_t v = 0;
    if (!cli_seed_parse(opt, s, &v, err)) cli_die("%s", err);
    return v;
}

mha_dtype cli_parse_dtype(const char *opt, const char *s) {
    if (s && !strcmp(s, "f32")) return MHA_DTYPE_F32;
    if (s && !strcmp(s, "bf16")) return MHA_DTYPE_BF16;
    if (s && !strcmp(s, "f16")) return MHA_DTYPE_F16;
    cli_die("%s: '%s' is not a weight dtype (f32, bf16 or f16)", opt, s ? s : "");
    return MHA_DTYPE_F32;
}

const char *cli_dtype_name(mha_dtype d) {
    return d == MHA_DTYPE_BF16 ? "bf16" : d == MHA_DTYPE_F16 ? "f16" : "f32";
}

double cli_parse_prob(const char *opt, const char *s) {
    char err[CLI_ERR_CAP];
    double v = 0.0;
    if (!cli_prob_parse(opt, s, &v, err)) cli_die("%s", err);
    return v;
}

int32_t *cli_parse_ids(const char *opt, const char *s, int64_t *n) {
    char err[CLI_ERR_CAP];
    int32_t *ids = NULL;
    if (!cli_ids_parse(opt, s, &ids, n, err)) cli_die("%s", err);
    return ids;
}

bool cli_parse_module_opt(cli_module_opts *o, int argc, char **argv, int *i) {
    char err[CLI_ERR_CAP];
    int r = cli_module_opt(o, argc, argv, i, err);
    if (r < 0) cli_die("%s", err);
    return r > 0;
}
