/* gen_dump.c — drives mha_generator from a little command language and prints
 * every result as bit patterns, so tests/torch_generator_diff.py can compare
 * it with PyTorch bit for bit.
 *
 * Usage: gen_dump [COMMAND ARGS...]...   (no arguments: commands from stdin)
 * Commands are whitespace-separated tokens; each output command prints one
 * line of space-separated hex words (floats as 8 hex digits of their bits):
 *
 *   seed S               torch.manual_seed(S); S may be negative or >= 2^63
 *   variant avx2|default kernel variant for uniform/normal (no output)
 *   random N             N raw 32-bit draws (8 hex digits each)
 *   random64 N           N random64() values (16 hex digits each)
 *   int64 N              N torch.empty((), dtype=torch.int64).random_()
 *   randperm N S         torch.randperm(N, generator=Generator().manual_seed(S))
 *                        (16 hex digits each; S from the stream: the next
 *                        int64 draw when S is "draw", as a RandomSampler)
 *   state                torch.get_rng_state(): the 5056 bytes in hex
 *   setstate HEX         torch.set_rng_state(bytes of HEX) (no output)
 *   uniform N FROM TO    torch.empty(N).uniform_(FROM, TO)
 *   normal N MEAN STD    torch.empty(N).normal_(MEAN, STD)
 *   randn N              torch.randn(N)
 *   dropout N P          nn.Dropout(P)(torch.ones(N)), training mode
 *   dropout_ramp N P     the same on x[i] = ((i % 97) - 48) / 8
 *   linear IN OUT BIAS   nn.Linear(IN, OUT, bias=BIAS): weight line, then a
 *                        bias line when BIAS is 1
 *   embedding NUM DIM P  nn.Embedding(NUM, DIM, padding_idx=P), P < 0: None
 *
 * A malformed command prints a message on stderr and exits with status 2. */
#include "mha.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- token input: argv, or stdin split on whitespace ---- */

typedef struct {
    char **argv;
    int argc, pos; /* argv mode when argv != NULL */
    char buf[16384]; /* a setstate token is 10,112 hex digits */
} tokens;

static const char *next_token(tokens *t) {
    if (t->argv) return t->pos < t->argc ? t->argv[t->pos++] : NULL;
    return scanf("%16383s", t->buf) == 1 ? t->buf : NULL;
}

static void die(const char *what, const char *tok) {
    fprintf(stderr, "gen_dump: %s%s%s\n", what, tok ? ": " : "", tok ? tok : "");
    exit(2);
}

static const char *need(tokens *t, const char *what) {
    const char *s = next_token(t);
    if (s == NULL) die("missing argument", what);
    return s;
}

static int64_t arg_i64(tokens *t, const char *what) {
    const char *s = need(t, what);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s) die("bad integer", s);
    return (int64_t)v;
}

static size_t arg_size(tokens *t, const char *what) {
    int64_t v = arg_i64(t, what);
    if (v < 0) die("negative size", what);
    return (size_t)v;
}

static double arg_double(tokens *t, const char *what) {
    const char *s = need(t, what);
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s) die("bad number", s);
    return v;
}

/* Python ints in [-2^63, 2^64): negatives as two's complement, like
 * torch.manual_seed. */
static uint64_t arg_seed(tokens *t) {
    const char *s = need(t, "seed");
    char *end;
    errno = 0;
    uint64_t v = s[0] == '-' ? (uint64_t)strtoll(s, &end, 10) : (uint64_t)strtoull(s, &end, 10);
    if (errno || *end || end == s) die("bad seed", s);
    return v;
}

/* ---- output ---- */

static void print_floats(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        printf(i ? " %08" PRIx32 : "%08" PRIx32, b);
    }
    putchar('\n');
}

static float *alloc_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (p == NULL) die("out of memory", NULL);
    return p;
}

static void check(mha_status st) {
    if (st != MHA_OK) die(mha_status_name(st), mha_last_error());
}

int main(int argc, char **argv) {
    tokens t = {argc > 1 ? argv + 1 : NULL, argc - 1, 0, {0}};
    mha_generator *g;
    check(mha_generator_create(0, &g));

    const char *tok;
    while ((tok = next_token(&t)) != NULL) {
        /* Copy: in stdin mode the token buffer is reused for the arguments. */
        char cmd[32];
        snprintf(cmd, sizeof cmd, "%s", tok);
        if (strcmp(cmd, "seed") == 0) {
            mha_generator_manual_seed(g, arg_seed(&t));
        } else if (strcmp(cmd, "variant") == 0) {
            const char *v = need(&t, "variant");
            if (strcmp(v, "avx2") == 0)
                mha_generator_set_variant(g, MHA_RNG_AVX2);
            else if (strcmp(v, "default") == 0)
                mha_generator_set_variant(g, MHA_RNG_DEFAULT);
            else
                die("unknown variant", v);
        } else if (strcmp(cmd, "random") == 0) {
            size_t n = arg_size(&t, "N");
            for (size_t i = 0; i < n; i++)
                printf(i ? " %08" PRIx32 : "%08" PRIx32, mha_generator_random(g));
            putchar('\n');
        } else if (strcmp(cmd, "random64") == 0) {
            size_t n = arg_size(&t, "N");
            for (size_t i = 0; i < n; i++)
                printf(i ? " %016" PRIx64 : "%016" PRIx64, mha_generator_random64(g));
            putchar('\n');
        } else if (strcmp(cmd, "state") == 0) {
            uint8_t b[MHA_GENERATOR_STATE_BYTES];
            if (mha_generator_get_state(g, b, sizeof b) != MHA_OK) {
                fprintf(stderr, "gen_dump: state: %s\n", mha_last_error());
                return 2;
            }
            for (size_t i = 0; i < sizeof b; i++) printf("%02x", b[i]);
            putchar('\n');
        } else if (strcmp(cmd, "setstate") == 0) {
            const char *hex = next_token(&t);
            uint8_t b[MHA_GENERATOR_STATE_BYTES];
            size_t n = 0;
            for (; hex && hex[2 * n] && hex[2 * n + 1] && n < sizeof b; n++) {
                unsigned v;
                if (sscanf(hex + 2 * n, "%2x", &v) != 1) break;
                b[n] = (uint8_t)v;
            }
            if (mha_generator_set_state(g, b, n) != MHA_OK) {
                fprintf(stderr, "gen_dump: setstate: %s\n", mha_last_error());
                return 2;
            }
        } else if (strcmp(cmd, "int64") == 0) {
            size_t n = arg_size(&t, "N");
            for (size_t i = 0; i < n; i++)
                printf(i ? " %016" PRIx64 : "%016" PRIx64, (uint64_t)mha_generator_int64(g));
            putchar('\n');
        } else if (strcmp(cmd, "randperm") == 0) {
            size_t n = arg_size(&t, "N");
            const char *sv = next_token(&t);
            if (sv == NULL) {
                fprintf(stderr, "gen_dump: randperm needs S\n");
                return 2;
            }
            uint64_t s = strcmp(sv, "draw") == 0 ? (uint64_t)mha_generator_int64(g)
                                                 : strtoull(sv, NULL, 10);
            mha_generator *pg = NULL;
            int64_t *r = malloc((n ? n : 1) * sizeof *r);
            if (r == NULL || mha_generator_create(s, &pg) != MHA_OK ||
                mha_generator_randperm(pg, r, (int64_t)n) != MHA_OK) {
                fprintf(stderr, "gen_dump: randperm: %s\n", mha_last_error());
                return 2;
            }
            for (size_t i = 0; i < n; i++) printf(i ? " %016" PRIx64 : "%016" PRIx64, (uint64_t)r[i]);
            putchar('\n');
            free(r);
            mha_generator_free(pg);
        } else if (strcmp(cmd, "uniform") == 0 || strcmp(cmd, "normal") == 0 ||
                   strcmp(cmd, "randn") == 0) {
            size_t n = arg_size(&t, "N");
            double a = 0.0, b = 1.0;
            if (strcmp(cmd, "randn") != 0) {
                a = arg_double(&t, "a");
                b = arg_double(&t, "b");
            }
            float *x = alloc_floats(n);
            if (cmd[0] == 'u')
                mha_generator_uniform(g, x, n, a, b);
            else
                mha_generator_normal(g, x, n, a, b);
            print_floats(x, n);
            free(x);
        } else if (strcmp(cmd, "dropout") == 0 || strcmp(cmd, "dropout_ramp") == 0) {
            size_t n = arg_size(&t, "N");
            double p = arg_double(&t, "p");
            float *x = alloc_floats(n);
            for (size_t i = 0; i < n; i++)
                x[i] = cmd[7] == '\0' ? 1.0f : (float)((int)(i % 97) - 48) * 0.125f;
            check(mha_generator_dropout(g, x, x, n, p)); /* in place, as allowed */
            print_floats(x, n);
            free(x);
        } else if (strcmp(cmd, "linear") == 0) {
            int64_t in = arg_i64(&t, "IN"), out = arg_i64(&t, "OUT");
            int64_t has_bias = arg_i64(&t, "BIAS");
            if (in < 1 || out < 1) die("linear sizes must be positive", NULL);
            float *w = alloc_floats((size_t)(in * out));
            float *bias = has_bias ? alloc_floats((size_t)out) : NULL;
            check(mha_generator_linear_init(g, w, bias, in, out));
            print_floats(w, (size_t)(in * out));
            if (bias) print_floats(bias, (size_t)out);
            free(w);
            free(bias);
        } else if (strcmp(cmd, "embedding") == 0) {
            int64_t num = arg_i64(&t, "NUM"), dim = arg_i64(&t, "DIM");
            int64_t pad = arg_i64(&t, "PAD");
            if (num < 0 || dim < 0) die("embedding sizes must be >= 0", NULL);
            float *w = alloc_floats((size_t)(num * dim));
            check(mha_generator_embedding_init(g, w, num, dim, pad));
            print_floats(w, (size_t)(num * dim));
            free(w);
        } else {
            die("unknown command", cmd);
        }
    }
    mha_generator_free(g);
    return fflush(stdout) == 0 ? 0 : 1;
}
