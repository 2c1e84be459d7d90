/* train_gpt.c — `mha train GPTModel`: chapter 5's pretraining, the book's
 * train_model_simple on a text, draw for draw.
 *
 * The book's procedure (../shared/docs/book-reference.md, "Chapter 5"):
 * the text split by characters at int(train_ratio * len), each part
 * tokenised on its own and cut into GPTDatasetV1 windows (max_length =
 * stride = the context length); torch.manual_seed(seed), then GPTModel(cfg)
 * drawn from that generator, AdamW, and the epochs: every pass over a
 * DataLoader draws what torch 1.13's draws from the global generator (the
 * iterator's _base_seed, one int64 random_(); a shuffling RandomSampler's
 * seed, another, at its first batch, then randperm(n) on a generator seeded
 * with it), the passes evaluate_model makes included; dropout draws its
 * masks in between, in the forward's order.
 *
 * Files in --out DIR: model.safetensors (the book's names), optimizer.
 * safetensors, train.safetensors (the run's settings and position: the
 * generator's state in torch's bytes, the epoch's permutation, the log and
 * the samples), log.json and loss.svg. A checkpoint is a set of files,
 * made crash-safe by a commit marker: every file is first written whole
 * beside its final name (NAME.next, each itself through a temporary file
 * and a rename), then DIR/checkpoint.commit is written, then the files are
 * renamed into place and the marker removed. Whoever finds the marker
 * (the next --resume) finishes the renames; whoever finds .next files
 * without it removes them: a crash at any point leaves either the previous
 * checkpoint or the new one, whole. */
#include "cli.h"
#include "dist.h"
#include "svg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef MHA_SOURCE_TEXT
#define MHA_SOURCE_TEXT ""
#endif
#ifndef MHA_INSTALL_TEXT
#define MHA_INSTALL_TEXT ""
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- options --------------------------------------------------------------- */

/* The settings that decide a run's bits, recorded in train.safetensors and
 * compared on --resume. X(name, option, kind): kind i (int64), d (double),
 * s (string), u (the seed). */
#define RUN_KEYS(X)                                                                                     \
    X(train_ratio, "--train-ratio", d)                                                                  \
    X(context, "--context-length", i)                                                                   \
    X(batch, "--batch", i)                                                                              \
    X(lr, "--lr", d)                                                                                    \
    X(weight_decay, "--weight-decay", d)                                                                \
    X(eval_freq, "--eval-freq", i)                                                                      \
    X(eval_iter, "--eval-iter", i)                                                                      \
    X(seed, "--seed", u)                                                                                \
    X(start_context, "--start-context", s)                                                              \
    X(sample_tokens, "--sample-tokens", i)

typedef struct {
    double train_ratio, lr, weight_decay;
    int64_t context, batch, eval_freq, eval_iter, sample_tokens;
    uint64_t seed;
    const char *start_context;
    int64_t accum;      /* batches per optimizer step (--accum) */
    bool allreduce;     /* --reduce allreduce: MPI's sum, not the fixed tree */
    /* not part of the bits */
    const char *text, *weights, *out, *vocab;
    int64_t epochs, save_every;
    bool resume, json, given_accum, given_reduce;
    /* which were given on the command line */
    bool given_train_ratio, given_context, given_batch, given_lr, given_weight_decay, given_eval_freq,
        given_eval_iter, given_seed, given_start_context, given_sample_tokens, given_text, given_cfg,
        given_weights;
    mha_gpt_config cfg; /* init GPTModel's options (context_length: --context-length) */
    char *owned[4];     /* the strings --resume read from train.safetensors, freed at the end */
    int n_owned;
} opts;

/* A copy of v that o owns (freed by opts_free). */
static const char *opts_own(opts *o, const char *v) {
    if (o->n_owned == (int)(sizeof o->owned / sizeof o->owned[0])) cli_die("internal: too many resumed strings");
    const size_t n = strlen(v) + 1;
    char *c = cli_malloc(n);
    memcpy(c, v, n);
    return o->owned[o->n_owned++] = c;
}

static void opts_free(opts *o) {
    for (int i = 0; i < o->n_owned; i++) free(o->owned[i]);
    o->n_owned = 0;
}

static void usage(void) {
    puts("usage: mha train GPTModel [--text FILE] [--weights FILE] [--out DIR] [--resume]\n"
         "           [--epochs 10] [--batch 2] [--lr 4e-4] [--weight-decay 0.1] [--train-ratio 0.90]\n"
         "           [--eval-freq 5] [--eval-iter 5] [--seed 123] [--start-context TEXT]\n"
         "           [--sample-tokens 50] [--save-every N] [--threads N] [--json] [--vocab DIR]\n"
         "           [--accum 1] [--reduce tree|allreduce]\n"
         "           [init GPTModel's options: --context-length 256 --vocab-size 50257 --emb-dim 768\n"
         "            --n-heads 12 --n-layers 12 --drop-rate 0.1 --qkv-bias false]\n\n"
         "Chapter 5's pretraining: the book's train_model_simple on TEXT (default the repository's\n"
         "data/the-verdict.txt), with the book's settings as defaults, drawing what PyTorch 1.13\n"
         "draws: torch.manual_seed(SEED), GPTModel(cfg) (GPT_CONFIG_124M with context_length 256),\n"
         "AdamW, the DataLoaders' seeds and permutations and the dropout masks, so the log is the\n"
         "book's: 'Ep 1 (Step 000000): Train loss 9.781, Val loss 9.933' ... The text is split at\n"
         "int(train_ratio * characters); windows of context_length tokens, stride the same; training\n"
         "batches shuffled (drop_last), validation in order. Every --eval-freq steps the mean loss\n"
         "of the first --eval-iter batches of each loader is logged; after each epoch a greedy\n"
         "sample of --sample-tokens tokens from --start-context (default \"Every effort moves you\")\n"
         "is printed with newlines as spaces.\n\n"
         "--weights FILE starts from FILE (a model.safetensors of mha, or GPT-2's Hugging Face\n"
         "weights; a tied head trains tied); the configuration is FILE's, --context-length at most\n"
         "its context. Files in --out DIR (default mha-train-gpt): model.safetensors (for mha\n"
         "generate, mha run and Python's mha.load), optimizer.safetensors, train.safetensors (the\n"
         "run's state), log.json (the --json object) and loss.svg (the book's Figure 5.12), written\n"
         "after every epoch and every --save-every N steps, crash-safe. --resume continues the run\n"
         "in DIR to --epochs (the total) with the same bits as a run that never stopped; options\n"
         "not given are the run's, options given must be. --json: the last line of stdout is\n"
         "{\"log\": [{\"epoch\", \"step\", \"train_loss\", \"val_loss\", \"tokens_seen\"}...], \"samples\",\n"
         "\"train_s\" (this run's wall time), \"tokens_per_s\" (training tokens / train_s),\n"
         "\"step_ms_median\", \"peak_rss_mib\", \"ranks\"}.\n\n"
         "--accum K: one AdamW step per K batches (the last of an epoch may have fewer), the mean\n"
         "loss over all their windows; eval, samples and --save-every count steps.\n"
         "Under mpirun (mpirun -np N mha train GPTModel ...; as root add --allow-run-as-root) the N\n"
         "processes share each batch's windows, --batch staying the whole batch: each window's\n"
         "gradient is summed in one fixed tree (mha_tree_sum), so losses, weights and checkpoints\n"
         "have the same bits for any N and without mpirun. --reduce allreduce sums each process's\n"
         "windows with MPI_Allreduce instead (less memory, bits that depend on N). --threads is per\n"
         "process; rank 0 prints and writes the files (docs/distributed.md).");
}

static double parse_double(const char *opt, const char *v, double lo, double hi, bool open_lo, bool open_hi) {
    char *end = NULL;
    errno = 0;
    const double d = v ? strtod(v, &end) : (double)NAN;
    const bool ok = v && end != v && !*end && errno == 0 && isfinite(d) && (open_lo ? d > lo : d >= lo) &&
                    (open_hi ? d < hi : d <= hi);
    if (!ok)
        cli_die("%s: '%s' is not a number in %c%g, %g%c", opt, v ? v : "", open_lo ? '(' : '[', lo, hi,
                open_hi ? ')' : ']');
    return d;
}

static void parse_opts(opts *o, int argc, char **argv) {
    *o = (opts){.train_ratio = 0.90, .lr = 4e-4, .weight_decay = 0.1, .context = 256, .batch = 2,
                .eval_freq = 5, .eval_iter = 5, .sample_tokens = 50, .seed = 123,
                .start_context = "Every effort moves you", .out = "mha-train-gpt", .epochs = 10, .accum = 1};
    mha_gpt_config_init(&o->cfg, MHA_GPT_MODEL);
    o->cfg.context_length = 256;
    const int64_t big = (int64_t)1 << 40;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        } else if (cli_parse_gpt_opt(&o->cfg, argc, argv, &i)) {
            if (!strcmp(a, "--context-length"))
                o->context = o->cfg.context_length, o->given_context = true;
            else
                o->given_cfg = true;
        } else if (!strcmp(a, "--text") || !strcmp(a, "--weights") || !strcmp(a, "--out") ||
                   !strcmp(a, "--vocab") || !strcmp(a, "--start-context")) {
            if (!v) cli_die("%s needs a value", a);
            i++;
            if (!strcmp(a, "--text")) o->text = v, o->given_text = true;
            else if (!strcmp(a, "--weights")) o->weights = v, o->given_weights = true;
            else if (!strcmp(a, "--out")) o->out = v;
            else if (!strcmp(a, "--vocab")) o->vocab = v;
            else o->start_context = v, o->given_start_context = true;
        } else if (!strcmp(a, "--train-ratio")) {
            o->train_ratio = parse_double(a, v, 0.0, 1.0, true, true), o->given_train_ratio = true, i++;
        } else if (!strcmp(a, "--lr")) {
            o->lr = parse_double(a, v, 0.0, 1e30, false, false), o->given_lr = true, i++;
        } else if (!strcmp(a, "--weight-decay")) {
            o->weight_decay = parse_double(a, v, 0.0, 1e30, false, false), o->given_weight_decay = true, i++;
        } else if (!strcmp(a, "--batch")) {
            o->batch = cli_parse_int(a, v, 1, 1 << 20), o->given_batch = true, i++;
        } else if (!strcmp(a, "--epochs")) {
            o->epochs = cli_parse_int(a, v, 1, 1 << 30), i++;
        } else if (!strcmp(a, "--eval-freq")) {
            o->eval_freq = cli_parse_int(a, v, 1, big), o->given_eval_freq = true, i++;
        } else if (!strcmp(a, "--eval-iter")) {
            o->eval_iter = cli_parse_int(a, v, 1, big), o->given_eval_iter = true, i++;
        } else if (!strcmp(a, "--sample-tokens")) {
            o->sample_tokens = cli_parse_int(a, v, 0, 1 << 20), o->given_sample_tokens = true, i++;
        } else if (!strcmp(a, "--save-every")) {
            o->save_every = cli_parse_int(a, v, 1, big), i++;
        } else if (!strcmp(a, "--seed")) {
            o->seed = cli_parse_seed(a, v), o->given_seed = true, i++;
        } else if (!strcmp(a, "--threads")) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else if (!strcmp(a, "--accum")) {
            o->accum = cli_parse_int(a, v, 1, 1 << 20), o->given_accum = true, i++;
        } else if (!strcmp(a, "--reduce")) {
            if (!v || (strcmp(v, "tree") != 0 && strcmp(v, "allreduce") != 0))
                cli_die("--reduce: '%s' is not tree or allreduce", v ? v : "");
            o->allreduce = !strcmp(v, "allreduce"), o->given_reduce = true, i++;
        } else if (!strcmp(a, "--resume")) {
            o->resume = true;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            cli_die("train GPTModel: unknown option '%s' (see mha train GPTModel --help)", a);
        }
    }
    if (o->given_weights && o->given_cfg)
        cli_die("--weights: the configuration is the file's; only --context-length may be given with it");
}

/* ---- files ----------------------------------------------------------------- */

static char *path_in(const char *dir, const char *name) {
    const size_t n = strlen(dir) + strlen(name) + 2;
    char *p = cli_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) cli_die("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = cli_malloc(cap + 1);
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)1 << 31)) cli_die("%s: larger than 2 GiB", path);
            cap *= 2;
            char *nb = realloc(b, cap + 1);
            if (!nb) cli_die("%s: out of memory", path);
            b = nb;
        }
        const size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) cli_die("%s: read error", path);
    b[n] = 0;
    *len = n;
    return b;
}

static void fsync_dir(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* A text file written whole or not at all: path.tmp, fsync, rename. */
typedef void (*text_writer)(FILE *f, const void *user);
static void write_text_atomic(const char *path, text_writer w, const void *user) {
    const size_t n = strlen(path) + 8;
    char *tmp = cli_malloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) cli_die("%s: cannot write: %s", tmp, strerror(errno));
    w(f, user);
    const bool bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        cli_die("%s: cannot write: %s", tmp, strerror(errno));
    }
    if (rename(tmp, path) != 0) cli_die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
    free(tmp);
}

static const char *const CKPT_FILES[] = {"model.safetensors", "optimizer.safetensors", "train.safetensors",
                                         "log.json", "loss.svg"};
enum { N_CKPT = sizeof CKPT_FILES / sizeof CKPT_FILES[0] };

/* Finishes or forgets an interrupted checkpoint (see the top). */
static void recover(const char *dir) {
    char *commit = path_in(dir, "checkpoint.commit");
    const bool committed = exists(commit);
    for (int k = 0; k < N_CKPT; k++) {
        char *fin = path_in(dir, CKPT_FILES[k]);
        const size_t n = strlen(fin) + 8;
        char *next = cli_malloc(n);
        snprintf(next, n, "%s.next", fin);
        if (exists(next)) {
            if (committed ? rename(next, fin) != 0 : unlink(next) != 0)
                cli_die("%s: cannot %s: %s", next, committed ? "rename" : "remove", strerror(errno));
        }
        free(next);
        free(fin);
    }
    /* the temporary files of writes cut short: NAME.next.tmp.* (the
     * library's) and NAME.next.tmp / checkpoint.commit.tmp (this file's) */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        bool ours = strncmp(e->d_name, "checkpoint.commit.tmp", 21) == 0;
        for (int k = 0; k < N_CKPT && !ours; k++) {
            const size_t n = strlen(CKPT_FILES[k]);
            ours = strncmp(e->d_name, CKPT_FILES[k], n) == 0 && strncmp(e->d_name + n, ".next.tmp", 9) == 0;
        }
        if (ours) {
            char *p = path_in(dir, e->d_name);
            (void)unlink(p);
            free(p);
        }
    }
    if (d) closedir(d);
    fsync_dir(dir);
    if (committed && unlink(commit) != 0) cli_die("%s: cannot remove: %s", commit, strerror(errno));
    free(commit);
}

/* ---- the data: the book's GPTDatasetV1 ------------------------------------ */

typedef struct {
    int32_t *ids;
    int64_t n_ids, n_windows, L; /* window i: ids[i L .. i L + L] -> ids[i L + 1 .. i L + L + 1] */
} dataset;

/* tokenizer.encode(text, allowed_special={"<|endoftext|>"}): the marker is id
 * 50256, the text between markers GPT-2's BPE. */
static int32_t *encode(const mha_tokenizer *tk, const char *s, size_t len, int64_t *n_out, const char *what) {
    static const char EOT[] = "<|endoftext|>";
    const size_t eot = sizeof EOT - 1;
    int32_t *ids = cli_malloc((len + 1) * sizeof(int32_t));
    size_t n = 0, i = 0;
    while (i <= len) {
        const char *hit = NULL;
        for (size_t j = i; j + eot <= len && !hit; j++)
            if (s[j] == '<' && memcmp(s + j, EOT, eot) == 0) hit = s + j;
        const size_t end = hit ? (size_t)(hit - s) : len;
        size_t got = 0;
        cli_check(mha_tokenizer_encode(tk, s + i, end - i, ids + n, len + 1 - n, &got), what);
        n += got;
        if (!hit) break;
        ids[n++] = 50256;
        i = end + eot;
    }
    *n_out = (int64_t)n;
    return ids;
}

static void dataset_init(dataset *d, int32_t *ids, int64_t n, int64_t L) {
    d->ids = ids;
    d->n_ids = n;
    d->L = L;
    /* range(0, len - max_length, stride) with stride = max_length */
    d->n_windows = n > L ? (n - L + L - 1) / L : 0;
}

static void fill_batch(const dataset *d, const int64_t *win, int64_t b, int32_t *x, int32_t *y) {
    for (int64_t k = 0; k < b; k++) {
        memcpy(x + k * d->L, d->ids + win[k] * d->L, (size_t)d->L * sizeof(int32_t));
        memcpy(y + k * d->L, d->ids + win[k] * d->L + 1, (size_t)d->L * sizeof(int32_t));
    }
}

/* ---- the run's state ------------------------------------------------------- */

typedef struct {
    int64_t epoch, step; /* the record's epoch (1-based) and global_step */
    double train, val;
    int64_t tokens;
} log_row;

typedef struct {
    int64_t epoch;       /* the epoch in progress (0-based) */
    int64_t batch;       /* its next batch (0: the epoch's loader pass has not begun) */
    int64_t global_step; /* -1 before the first step */
    int64_t tokens_seen;
    int64_t *perm;       /* the epoch's permutation of the training windows */
    int64_t n_perm;
    log_row *log;
    int64_t n_log, cap_log;
    char **samples; /* as printed: newlines as spaces, NUL-terminated bytes */
    size_t *sample_len;
    int64_t n_samples;
} run_state;

static void log_push(run_state *s, log_row r) {
    if (s->n_log == s->cap_log) {
        s->cap_log = s->cap_log ? 2 * s->cap_log : 64;
        s->log = realloc(s->log, (size_t)s->cap_log * sizeof *s->log);
        if (!s->log) cli_die("out of memory");
    }
    s->log[s->n_log++] = r;
}

static void sample_push(run_state *s, const char *b, size_t len) {
    s->samples = realloc(s->samples, (size_t)(s->n_samples + 1) * sizeof *s->samples);
    s->sample_len = realloc(s->sample_len, (size_t)(s->n_samples + 1) * sizeof *s->sample_len);
    if (!s->samples || !s->sample_len) cli_die("out of memory");
    char *c = cli_malloc(len + 1);
    memcpy(c, b, len);
    c[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (c[i] == '\n') c[i] = ' ';
    s->samples[s->n_samples] = c;
    s->sample_len[s->n_samples++] = len;
}

/* What this process measured (not saved: a resumed run times itself). */
typedef struct {
    double t0, train_s;
    double *step_ms;
    int64_t n_steps, cap_steps, tokens;
} timing;

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_ms(const timing *t) {
    if (t->n_steps == 0) return NAN;
    double *c = cli_malloc((size_t)t->n_steps * sizeof(double));
    memcpy(c, t->step_ms, (size_t)t->n_steps * sizeof(double));
    qsort(c, (size_t)t->n_steps, sizeof(double), cmp_double);
    const double m = t->n_steps % 2 ? c[t->n_steps / 2] : 0.5 * (c[t->n_steps / 2 - 1] + c[t->n_steps / 2]);
    free(c);
    return m;
}

static void put_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.17g", v);
    else fputs("null", f); /* JSON has no NaN */
}

typedef struct {
    const run_state *s;
    const timing *t;
} json_src;

static void write_json(FILE *f, const void *user) {
    const json_src *j = user;
    fputs("{\"log\": [", f);
    for (int64_t i = 0; i < j->s->n_log; i++) {
        const log_row *r = &j->s->log[i];
        fprintf(f, "%s{\"epoch\": %lld, \"step\": %lld, \"train_loss\": ", i ? ", " : "", (long long)r->epoch,
                (long long)r->step);
        put_num(f, r->train);
        fputs(", \"val_loss\": ", f);
        put_num(f, r->val);
        fprintf(f, ", \"tokens_seen\": %lld}", (long long)r->tokens);
    }
    fputs("], \"samples\": [", f);
    for (int64_t i = 0; i < j->s->n_samples; i++) {
        if (i) fputs(", ", f);
        cli_put_json_string(f, (const unsigned char *)j->s->samples[i], j->s->sample_len[i]);
    }
    fputs("], \"train_s\": ", f);
    put_num(f, j->t->train_s);
    fputs(", \"tokens_per_s\": ", f);
    put_num(f, j->t->train_s > 0 ? (double)j->t->tokens / j->t->train_s : (double)NAN);
    fputs(", \"step_ms_median\": ", f);
    put_num(f, median_ms(j->t));
    fputs(", \"peak_rss_mib\": ", f);
    put_num(f, cli_peak_rss_mib());
    fprintf(f, ", \"ranks\": %d}\n", cli_dist_size());
}

/* ---- the training state file ----------------------------------------------- */

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

typedef struct {
    const opts *o;
    const run_state *s;
    const mha_generator *g;
    uint64_t text_hash;
    int64_t text_bytes, n_train_windows;
} state_src;

static void save_state(const char *path, const state_src *x) {
    const opts *o = x->o;
    const run_state *s = x->s;
    char vals[32][40];
    const char *meta[64];
    size_t nm = 0;
    int k = 0;
#define META_i(key, v) (snprintf(vals[k], 40, "%lld", (long long)(v)), meta[nm++] = key, meta[nm++] = vals[k++])
#define META_d(key, v) (snprintf(vals[k], 40, "%.17g", (double)(v)), meta[nm++] = key, meta[nm++] = vals[k++])
#define META_u(key, v) (snprintf(vals[k], 40, "%llu", (unsigned long long)(v)), meta[nm++] = key, meta[nm++] = vals[k++])
#define META_s(key, v) (meta[nm++] = key, meta[nm++] = (v))
#define PUT(name, opt, kind) META_##kind(#name, o->name);
    meta[nm++] = "format";
    meta[nm++] = "mha train GPTModel";
    RUN_KEYS(PUT)
#undef PUT
    META_i("pos_epoch", s->epoch);
    META_i("pos_batch", s->batch);
    META_i("global_step", s->global_step);
    META_i("tokens_seen", s->tokens_seen);
    META_i("accum", o->accum);
    META_s("reduce", o->allreduce ? "allreduce" : "tree");
    META_i("text_bytes", x->text_bytes);
    snprintf(vals[k], 40, "%016llx", (unsigned long long)x->text_hash);
    META_s("text_fnv1a", vals[k++]);
    META_s("text", o->text);
    META_s("weights", o->weights ? o->weights : "");
    uint8_t gs[MHA_GENERATOR_STATE_BYTES];
    cli_check(mha_generator_get_state(x->g, gs, sizeof gs), "generator");
    const int64_t n_log = s->n_log, n_perm = x->n_train_windows, n_gs = (int64_t)sizeof gs;
    int64_t *li = cli_malloc((size_t)(3 * n_log + 1) * sizeof(int64_t));
    double *ld = cli_malloc((size_t)(2 * n_log + 1) * sizeof(double));
    for (int64_t i = 0; i < n_log; i++) {
        li[3 * i] = s->log[i].epoch, li[3 * i + 1] = s->log[i].step, li[3 * i + 2] = s->log[i].tokens;
        ld[2 * i] = s->log[i].train, ld[2 * i + 1] = s->log[i].val;
    }
    const int64_t sh_li[2] = {n_log, 3}, sh_ld[2] = {n_log, 2};
    mha_st_entry *e = cli_malloc((size_t)(4 + s->n_samples) * sizeof *e);
    int64_t *sh_s = cli_malloc((size_t)(s->n_samples + 1) * sizeof(int64_t));
    char(*names)[32] = cli_malloc((size_t)(s->n_samples + 1) * 32);
    size_t ne = 0;
    e[ne++] = (mha_st_entry){"generator", MHA_DTYPE_U8, 1, &n_gs, gs};
    e[ne++] = (mha_st_entry){"permutation", MHA_DTYPE_I64, 1, &n_perm, s->perm};
    e[ne++] = (mha_st_entry){"log.epoch_step_tokens", MHA_DTYPE_I64, 2, sh_li, li};
    e[ne++] = (mha_st_entry){"log.train_val", MHA_DTYPE_F64, 2, sh_ld, ld};
    for (int64_t i = 0; i < s->n_samples; i++) {
        snprintf(names[i], 32, "sample.%lld", (long long)i);
        sh_s[i] = (int64_t)s->sample_len[i];
        e[ne++] = (mha_st_entry){names[i], MHA_DTYPE_U8, 1, &sh_s[i], s->samples[i]};
    }
    cli_check(mha_st_write_file(path, e, ne, meta, nm / 2), path);
    free(e);
    free(sh_s);
    free(names);
    free(li);
    free(ld);
}

/* Reads train.safetensors into o (the settings not given; those given must
 * agree) and s; the generator state into gs. Dies naming what differs. */
static void load_state(const char *path, opts *o, run_state *s, uint8_t *gs, uint64_t *text_hash,
                       int64_t *text_bytes) {
    mha_st *st = NULL;
    cli_check(mha_st_read_file(path, &st), path);
    const char *fmt = mha_st_metadata(st, "format");
    if (!fmt || strcmp(fmt, "mha train GPTModel") != 0)
        cli_die("%s: not the state of mha train GPTModel", path);
    char want[64];
#define GET_i(name, opt)                                                                                   \
    {                                                                                                      \
        int64_t v;                                                                                         \
        if (mha_st_metadata_int(st, #name, INT64_MIN, INT64_MAX, &v) != MHA_OK) cli_die("%s: %s", path, mha_last_error()); \
        if (o->given_##name && v != o->name)                                                               \
            cli_die("%s: the run in this directory has %s %lld, not %lld", path, opt, (long long)v, (long long)o->name); \
        o->name = v;                                                                                       \
    }
#define GET_d(name, opt)                                                                                   \
    {                                                                                                      \
        double v;                                                                                          \
        if (mha_st_metadata_double(st, #name, &v) != MHA_OK) cli_die("%s: %s", path, mha_last_error());   \
        if (o->given_##name && v != o->name)                                                               \
            cli_die("%s: the run in this directory has %s %.17g, not %.17g", path, opt, v, o->name);      \
        o->name = v;                                                                                       \
    }
#define GET_u(name, opt)                                                                                   \
    {                                                                                                      \
        const char *v = mha_st_metadata(st, #name);                                                        \
        snprintf(want, sizeof want, "%llu", (unsigned long long)o->name);                                  \
        if (!v) cli_die("%s: no %s", path, #name);                                                         \
        if (o->given_##name && strcmp(v, want) != 0)                                                       \
            cli_die("%s: the run in this directory has %s %s, not %s", path, opt, v, want);               \
        o->name = strtoull(v, NULL, 10);                                                                   \
    }
#define GET_s(name, opt)                                                                                   \
    {                                                                                                      \
        const char *v = mha_st_metadata(st, #name);                                                        \
        if (!v) cli_die("%s: no %s", path, #name);                                                         \
        if (o->given_##name && strcmp(v, o->name) != 0)                                                    \
            cli_die("%s: the run in this directory has %s \"%s\", not \"%s\"", path, opt, v, o->name);    \
        o->name = opts_own(o, v);                                                                          \
    }
#define GET(name, opt, kind) GET_##kind(name, opt)
    RUN_KEYS(GET)
#undef GET
    const char *text = mha_st_metadata(st, "text"), *w = mha_st_metadata(st, "weights"),
               *th = mha_st_metadata(st, "text_fnv1a");
    if (!text || !w || !th) cli_die("%s: incomplete metadata", path);
    if (!o->given_text) o->text = opts_own(o, text);
    if (o->given_weights && strcmp(w, o->weights) != 0)
        cli_die("%s: the run in this directory started from --weights '%s', not '%s'", path, w, o->weights);
    o->weights = *w ? opts_own(o, w) : NULL;
    *text_hash = strtoull(th, NULL, 16);
    int64_t v;
#define INT_KEY(key, dst, lo)                                                                               \
    if (mha_st_metadata_int(st, key, lo, INT64_MAX, &v) != MHA_OK) cli_die("%s: %s", path, mha_last_error()); \
    dst = v;
    INT_KEY("text_bytes", *text_bytes, 0)
    INT_KEY("pos_epoch", s->epoch, 0)
    INT_KEY("pos_batch", s->batch, 0)
    INT_KEY("global_step", s->global_step, -1)
    INT_KEY("tokens_seen", s->tokens_seen, 0)
#undef INT_KEY
    /* a run from before --accum and --reduce: one step per batch, the
     * whole batch's gradient at once, which is --reduce allreduce alone */
    int64_t accum = 1;
    if (mha_st_metadata(st, "accum") && mha_st_metadata_int(st, "accum", 1, 1 << 20, &accum) != MHA_OK)
        cli_die("%s: %s", path, mha_last_error());
    if (o->given_accum && accum != o->accum)
        cli_die("%s: the run in this directory has --accum %lld, not %lld", path, (long long)accum, (long long)o->accum);
    o->accum = accum;
    const char *red = mha_st_metadata(st, "reduce");
    const bool allreduce = red ? !strcmp(red, "allreduce") : true;
    if (red && !allreduce && strcmp(red, "tree") != 0) cli_die("%s: reduce '%s' is not tree or allreduce", path, red);
    if (o->given_reduce && allreduce != o->allreduce)
        cli_die("%s: the run in this directory has --reduce %s, not %s", path, allreduce ? "allreduce" : "tree",
                o->allreduce ? "allreduce" : "tree");
    o->allreduce = allreduce;
    mha_st_tensor t;
    if (mha_st_find(st, "generator", &t) != MHA_OK || t.dtype != MHA_DTYPE_U8 || t.ndim != 1 ||
        t.shape[0] != MHA_GENERATOR_STATE_BYTES)
        cli_die("%s: no generator state of %d bytes", path, MHA_GENERATOR_STATE_BYTES);
    memcpy(gs, t.data, MHA_GENERATOR_STATE_BYTES);
    if (mha_st_find(st, "permutation", &t) != MHA_OK || t.dtype != MHA_DTYPE_I64 || t.ndim != 1)
        cli_die("%s: no permutation", path);
    s->perm = cli_malloc((size_t)(t.shape[0] + 1) * sizeof(int64_t));
    memcpy(s->perm, t.data, (size_t)t.shape[0] * sizeof(int64_t));
    const int64_t n_perm = t.shape[0];
    mha_st_tensor ti, td;
    if (mha_st_find(st, "log.epoch_step_tokens", &ti) != MHA_OK || mha_st_find(st, "log.train_val", &td) != MHA_OK ||
        ti.dtype != MHA_DTYPE_I64 || td.dtype != MHA_DTYPE_F64 || ti.ndim != 2 || td.ndim != 2 ||
        ti.shape[1] != 3 || td.shape[1] != 2 || ti.shape[0] != td.shape[0])
        cli_die("%s: no log", path);
    const int64_t *li = ti.data;
    const double *ld = td.data;
    for (int64_t i = 0; i < ti.shape[0]; i++)
        log_push(s, (log_row){li[3 * i], li[3 * i + 1], ld[2 * i], ld[2 * i + 1], li[3 * i + 2]});
    for (int64_t i = 0;; i++) {
        char name[32];
        snprintf(name, sizeof name, "sample.%lld", (long long)i);
        if (mha_st_find(st, name, &t) != MHA_OK) break;
        if (t.dtype != MHA_DTYPE_U8 || t.ndim != 1) cli_die("%s: %s is not text", path, name);
        sample_push(s, t.data, (size_t)t.shape[0]);
    }
    s->n_perm = n_perm;
    mha_st_free(st);
}

/* ---- evaluation and samples -------------------------------------------------- */

typedef struct {
    mha_gpt *m;
    mha_generator *g;
    const dataset *train, *val;
    int64_t B, T, V;
    int32_t *x, *y;
    float *logits;
    int64_t *perm_scratch;
} ctx;

/* calc_loss_loader(loader, model, num_batches=eval_iter) in eval mode: one
 * pass over the loader (its draws), the mean of the first batches' mean
 * cross-entropies, summed in double as Python's floats. */
static double loader_loss(ctx *c, const dataset *d, bool shuffle, int64_t eval_iter) {
    const int64_t n_batches = shuffle ? d->n_windows / c->B : (d->n_windows + c->B - 1) / c->B;
    if (n_batches == 0) return NAN; /* len(data_loader) == 0: no pass, no draws */
    (void)mha_generator_int64(c->g); /* the iterator's _base_seed */
    int64_t *order = c->perm_scratch;
    if (shuffle) {
        mha_generator *pg = NULL;
        cli_check(mha_generator_create((uint64_t)mha_generator_int64(c->g), &pg), "generator");
        cli_check(mha_generator_randperm(pg, order, d->n_windows), "randperm");
        mha_generator_free(pg);
    } else {
        for (int64_t i = 0; i < d->n_windows; i++) order[i] = i;
    }
    const int64_t nb = eval_iter < n_batches ? eval_iter : n_batches;
    /* batch b on rank b mod N; each batch's loss the same on any rank,
     * gathered (the others' zeros) and added in batch order */
    double *each = calloc((size_t)nb, sizeof(double));
    if (!each) cli_die("out of memory");
    for (int64_t b = cli_dist_rank(); b < nb; b += cli_dist_size()) {
        const int64_t rows = b * c->B + c->B <= d->n_windows ? c->B : d->n_windows - b * c->B;
        fill_batch(d, order + b * c->B, rows, c->x, c->y);
        cli_check(mha_gpt_forward(c->m, c->logits, c->x, rows, c->T, 0, NULL), "forward");
        float loss = 0.0f;
        cli_check(mha_cross_entropy(&loss, NULL, c->logits, c->y, rows * c->T, c->V), "loss");
        each[b] = (double)loss;
    }
    cli_dist_gather_sum(each, (size_t)nb);
    double total = 0.0;
    for (int64_t b = 0; b < nb; b++) total += each[b];
    free(each);
    return total / (double)nb;
}

/* generate_and_print_sample: greedy, the context cropped to pos_emb's rows. */
static void sample(ctx *c, const mha_tokenizer *tk, const char *start, int64_t n_new, run_state *s) {
    int64_t n_prompt = 0;
    int32_t *prompt = encode(tk, start, strlen(start), &n_prompt, "--start-context");
    if (n_prompt == 0) cli_die("--start-context: the text has no tokens");
    int32_t *out = cli_malloc((size_t)(n_prompt + n_new) * sizeof(int32_t));
    mha_generate_opts go;
    mha_generate_opts_init(&go);
    go.max_new_tokens = n_new;
    go.temperature = 0.0;
    int64_t n_out = 0;
    cli_check(mha_gpt_generate(c->m, out, &n_out, prompt, n_prompt, &go, NULL, NULL), "sample");
    size_t len = 0;
    const mha_status st = mha_tokenizer_decode(tk, out, (size_t)n_out, NULL, 0, &len);
    if (st != MHA_ERR_WORKSPACE) cli_check(st, "sample");
    char *text = cli_malloc(len + 1);
    cli_check(mha_tokenizer_decode(tk, out, (size_t)n_out, text, len + 1, &len), "sample");
    sample_push(s, text, len);
    free(text);
    free(out);
    free(prompt);
}

/* ---- one optimizer step's gradient -------------------------------------------- */

/* The step's windows: k batches of B from batch b0 of the epoch's order,
 * leaf i = batch i / B, window i % B (the loader's order). With the tree
 * (the default) each window's gradient is one leaf of mha_tree_sum, on the
 * rank that holds it, so the sum's bits do not depend on the ranks; with
 * --reduce allreduce each rank's windows of a batch are one forward and
 * the ranks' sums MPI's. Every window's dropout masks are the whole
 * batch's forward's (mha_gpt_loss_backward_share), batch j's forward
 * starting j * draws after the step's start; every rank leaves the
 * generator where the k forwards leave it. */
typedef struct {
    ctx *c;
    mha_params *ps;
    mha_gpt_tape *tape;
    const int64_t *perm;
    int64_t b0, k;
    uint8_t start[MHA_GENERATOR_STATE_BYTES];
    uint64_t draws;    /* one batch's forward */
    int64_t batch_set; /* the batch the generator stands at the start of (-1: none) */
    double *leaf_loss; /* (k B) each leaf's cross-entropy sum; 0 where another rank's */
    float *grad;
    bool allreduce;
    mha_status fail;   /* this rank's first failure in a leaf */
    mha_tree *tree;    /* the sum's buffers, from step to step */
} step_ctx;

/* The generator at the start of batch j's forward. */
static void seek_batch(step_ctx *sc, int64_t j) {
    if (sc->batch_set == j) return;
    cli_check(mha_generator_set_state(sc->c->g, sc->start, sizeof sc->start), "generator");
    for (int64_t i = 0; i < j; i++) mha_generator_skip(sc->c->g, sc->draws);
    sc->batch_set = j;
}

static mha_status step_leaf(void *user, int64_t i, const float **v) {
    step_ctx *sc = user;
    ctx *c = sc->c;
    const int64_t j = i / c->B, w = i % c->B;
    seek_batch(sc, j);
    fill_batch(c->train, sc->perm + (sc->b0 + j) * c->B + w, 1, c->x, c->y);
    mha_status st = mha_params_zero_grad(sc->ps);
    const mha_batch_share sh = {.batch = c->B, .first = w, .targets = sc->k * c->B * c->T};
    if (st == MHA_OK) st = mha_gpt_loss_backward_share(c->m, &sc->leaf_loss[i], c->x, c->y, 1, c->T, &sh, c->g, sc->tape);
    sc->batch_set = st == MHA_OK ? j + 1 : -1; /* the forward drew batch j's draws */
    /* a failure is kept, not returned: the tree goes on, so that no other
     * rank waits for this one's nodes; the ranks agree on it after */
    if (st != MHA_OK && sc->fail == MHA_OK) sc->fail = st;
    *v = sc->grad;
    return MHA_OK;
}

/* Every rank's first failure: this rank's own, or the worst code of any. */
static mha_status agree(mha_status st) {
    const int worst = cli_dist_max(st == MHA_OK ? 0 : -(int)st);
    return st != MHA_OK ? st : (mha_status)-worst;
}

/* Runs the step's forwards and backwards and leaves the summed gradient
 * in every rank's gradients; the mean loss in *loss. */
static mha_status step_gradient(step_ctx *sc, float *loss) {
    ctx *c = sc->c;
    const int64_t B = c->B, L = sc->k * B;
    const int rank = cli_dist_rank(), ranks = cli_dist_size();
    size_t n = 0;
    sc->grad = mha_params_grad_buffer(sc->ps, &n);
    if (!sc->grad) return MHA_ERR_NOMEM;
    cli_check(mha_generator_get_state(c->g, sc->start, sizeof sc->start), "generator");
    cli_check(mha_gpt_dropout_draws(c->m, B, c->T, &sc->draws), "dropout draws");
    sc->batch_set = 0;
    sc->fail = MHA_OK;
    memset(sc->leaf_loss, 0, (size_t)L * sizeof(double));
    mha_status st = MHA_OK;
    if (!sc->allreduce) {
        mha_tree_io io;
        cli_dist_tree_io(&io, n, step_leaf, sc);
        if (!sc->tree) cli_check(mha_tree_create(n, &sc->tree), "gradient sum");
        st = mha_tree_sum(sc->tree, sc->grad, L, rank, ranks, &io);
        cli_check(st, "gradient sum"); /* its own buffers: dies (and ends the job) */
        if ((st = agree(sc->fail)) != MHA_OK) return st;
        cli_dist_bcast(sc->grad, n, 0);
    } else {
        /* this rank's windows [lo, hi) of each batch, one share a batch */
        const int64_t lo = (int64_t)rank * B / ranks, hi = (int64_t)(rank + 1) * B / ranks;
        st = mha_params_zero_grad(sc->ps);
        for (int64_t j = 0; j < sc->k && st == MHA_OK && hi > lo; j++) {
            seek_batch(sc, j);
            fill_batch(c->train, sc->perm + (sc->b0 + j) * B + lo, hi - lo, c->x, c->y);
            const mha_batch_share sh = {.batch = B, .first = lo, .targets = sc->k * B * c->T};
            st = mha_gpt_loss_backward_share(c->m, &sc->leaf_loss[j * B + lo], c->x, c->y, hi - lo, c->T, &sh, c->g,
                                             sc->tape);
            sc->batch_set = j + 1;
        }
        if ((st = agree(st)) != MHA_OK) return st;
        cli_dist_allreduce(sc->grad, n);
    }
    seek_batch(sc, sc->k); /* every rank: past the step's k forwards */
    cli_dist_gather_sum(sc->leaf_loss, (size_t)L);
    double sum = 0.0;
    for (int64_t i = 0; i < L; i++) sum += sc->leaf_loss[i];
    *loss = (float)(sum / (double)(L * c->T));
    return MHA_OK;
}

/* ---- checkpoints ----------------------------------------------------------- */

typedef struct {
    const char *dir;
    const opts *o;
    mha_gpt *m;
    mha_optimizer *opt;
    state_src st;
    timing *t;
} ckpt;

static void write_loss_svg(const char *path, const run_state *s, int64_t epochs) {
    const int64_t n = s->n_log;
    double *ep = cli_malloc((size_t)(n + 1) * sizeof(double)), *tr = cli_malloc((size_t)(n + 1) * sizeof(double)),
           *va = cli_malloc((size_t)(n + 1) * sizeof(double)), *tk = cli_malloc((size_t)(n + 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        /* the book: epochs_seen = torch.linspace(0, num_epochs, len(train_losses)) */
        ep[i] = n > 1 ? (double)epochs * (double)i / (double)(n - 1) : 0.0;
        tr[i] = s->log[i].train;
        va[i] = s->log[i].val;
        tk[i] = (double)s->log[i].tokens;
    }
    if (n > 0 && svg_loss_epochs(path, NULL, ep, tr, va, tk, n) != 0)
        cli_die("%s: cannot write: %s", path, strerror(errno));
    free(ep);
    free(tr);
    free(va);
    free(tk);
}

static char *next_of(const char *dir, const char *name) {
    char *fin = path_in(dir, name);
    const size_t n = strlen(fin) + 8;
    char *p = cli_malloc(n);
    snprintf(p, n, "%s.next", fin);
    free(fin);
    return p;
}

static void write_commit(FILE *f, const void *user) {
    const run_state *s = user;
    fprintf(f, "epoch %lld batch %lld step %lld\n", (long long)s->epoch, (long long)s->batch,
            (long long)s->global_step);
}

static void checkpoint(ckpt *k) {
    char *p = next_of(k->dir, "model.safetensors");
    cli_check(mha_gpt_save(k->m, p), p);
    free(p);
    p = next_of(k->dir, "optimizer.safetensors");
    cli_check(mha_optimizer_save(k->opt, p), p);
    free(p);
    p = next_of(k->dir, "train.safetensors");
    save_state(p, &k->st);
    free(p);
    p = next_of(k->dir, "log.json");
    const json_src js = {k->st.s, k->t};
    write_text_atomic(p, write_json, &js);
    free(p);
    const bool svg = k->st.s->n_log > 0;
    if (svg) {
        p = next_of(k->dir, "loss.svg");
        write_loss_svg(p, k->st.s, k->o->epochs);
        free(p);
    }
    fsync_dir(k->dir);
    /* the set is whole: commit, then move it into place */
    p = path_in(k->dir, "checkpoint.commit");
    write_text_atomic(p, write_commit, k->st.s);
    fsync_dir(k->dir);
    free(p);
    recover(k->dir);
}

/* ---- the command ------------------------------------------------------------- */

static const char *default_text(void) {
    const char *c[2] = {MHA_SOURCE_TEXT, MHA_INSTALL_TEXT};
    for (int i = 0; i < 2; i++)
        if (*c[i] && exists(c[i])) return c[i];
    cli_die("--text: no FILE given and the-verdict.txt is in neither %s nor %s", *c[0] ? c[0] : "(no source tree)",
            *c[1] ? c[1] : "(no install prefix)");
}

/* Tokens of one part of the text, cut into windows; dies when there is not
 * one window (the book checks this as well), or not one training batch. */
static void make_part(dataset *d, const mha_tokenizer *tk, const char *s, size_t len, int64_t L, int64_t B,
                      const char *what, const char *path, bool drop_last) {
    int64_t n = 0;
    int32_t *ids = encode(tk, s, len, &n, path);
    dataset_init(d, ids, n, L);
    if (d->n_windows == 0)
        cli_die("%s: the %s text has %lld tokens; one window of --context-length %lld needs %lld", path, what,
                (long long)n, (long long)L, (long long)L + 1);
    if (drop_last && d->n_windows < B)
        cli_die("%s: the %s text makes %lld windows of %lld tokens, fewer than one --batch of %lld", path, what,
                (long long)d->n_windows, (long long)L, (long long)B);
}

static void fmt_time(char *b, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) snprintf(b, n, "?");
    else if (s < 60) snprintf(b, n, "%.0f s", s);
    else if (s < 3600) snprintf(b, n, "%d min %02d s", (int)s / 60, (int)s % 60);
    else snprintf(b, n, "%d h %02d min", (int)s / 3600, (int)s / 60 % 60);
}

int mha_cli_train_gpt(int argc, char **argv) {
    cli_dist_init(&argc, &argv); /* under mpirun: this rank joins the job */
    const bool lead = cli_dist_rank() == 0; /* prints and writes the files */
    opts o;
    parse_opts(&o, argc, argv);
    const char *dir = o.out;
    if (o.batch < cli_dist_size())
        cli_die("--batch %lld is smaller than the %d processes mpirun started: each needs a window of every batch",
                (long long)o.batch, cli_dist_size());
    if (lead && !o.resume) cli_make_dir(dir);
    char *commit = path_in(dir, "checkpoint.commit"), *state_path = path_in(dir, "train.safetensors");
    run_state s = {.global_step = -1};
    uint8_t gstate[MHA_GENERATOR_STATE_BYTES];
    uint64_t want_hash = 0;
    int64_t want_bytes = -1;
    if (o.resume) {
        if (!exists(state_path) && !exists(commit)) cli_die("--resume: %s holds no run of mha train GPTModel", dir);
        if (lead) cli_lock_dir(dir);
        if (lead) recover(dir);
        (void)cli_dist_max(0); /* the others read what rank 0 recovered */
        load_state(state_path, &o, &s, gstate, &want_hash, &want_bytes);
    } else {
        if (lead) cli_lock_dir(dir);
        for (int k = 0; k < N_CKPT; k++) {
            char *p = path_in(dir, CKPT_FILES[k]);
            if (exists(p) && k < 3)
                cli_die("%s: a run is there (%s); --resume continues it, or choose another --out", dir,
                        CKPT_FILES[k]);
            free(p);
        }
        if (lead) recover(dir); /* .next files of a run that never committed */
    }
    if (!o.text) o.text = default_text();

    /* torch.manual_seed(seed); model = GPTModel(cfg) */
    mha_generator *g = NULL;
    cli_check(mha_generator_create(o.seed, &g), "generator");
    mha_gpt *m = NULL;
    char *model_path = path_in(dir, "model.safetensors");
    if (o.resume) {
        cli_check(mha_gpt_load(model_path, &m), model_path);
        if (o.given_cfg) {
            const mha_gpt_config *h = mha_gpt_config_of(m);
            if (h->vocab_size != o.cfg.vocab_size || h->emb_dim != o.cfg.emb_dim || h->n_heads != o.cfg.n_heads ||
                h->n_layers != o.cfg.n_layers || h->drop_rate != o.cfg.drop_rate || h->qkv_bias != o.cfg.qkv_bias)
                cli_die("%s: the run in this directory has another configuration (vocab_size %lld, emb_dim %lld, "
                        "n_heads %lld, n_layers %lld, drop_rate %g, qkv_bias %d)",
                        model_path, (long long)h->vocab_size, (long long)h->emb_dim, (long long)h->n_heads,
                        (long long)h->n_layers, h->drop_rate, h->qkv_bias);
        }
        cli_check(mha_generator_set_state(g, gstate, sizeof gstate), state_path);
    } else if (o.weights) {
        cli_check(mha_gpt_load(o.weights, &m), o.weights);
        /* the book builds GPTModel(cfg) before it loads weights into it:
         * those draws, from an untied model of the file's configuration */
        mha_gpt_config c = *mha_gpt_config_of(m);
        mha_gpt *scratch = NULL;
        cli_check(mha_gpt_create(&c, 0, &scratch), "model");
        cli_check(mha_gpt_init(scratch, g), "model");
        mha_gpt_free(scratch);
    } else {
        o.cfg.context_length = o.context;
        cli_check(mha_gpt_config_validate(&o.cfg), "configuration");
        cli_check(mha_gpt_create(&o.cfg, 0, &m), "model");
        cli_check(mha_gpt_init(m, g), "model");
    }
    const mha_gpt_config *mc = mha_gpt_config_of(m);
    if (o.weights && !o.resume && !o.given_context) o.context = mc->context_length; /* the file's windows */
    if (mc->kind != MHA_GPT_MODEL) cli_die("%s: a %s, not a GPTModel", o.weights ? o.weights : model_path,
                                           mha_gpt_kind_name(mc->kind));
    if (o.context > mc->context_length)
        cli_die("--context-length %lld is above the model's context: pos_emb has %lld rows", (long long)o.context,
                (long long)mc->context_length);

    /* the text, split by characters as the book */
    size_t len = 0;
    char *text = read_all(o.text, &len);
    if (len == 0) cli_die("%s: the file is empty", o.text);
    if (o.resume && ((int64_t)len != want_bytes || fnv1a(text, len) != want_hash))
        cli_die("%s: not the text the run in %s was trained on", o.text, dir);
    int64_t chars = 0;
    for (size_t i = 0; i < len; i++) chars += ((unsigned char)text[i] & 0xC0) != 0x80;
    const int64_t split = (int64_t)(o.train_ratio * (double)chars);
    size_t cut = 0; /* the byte where character number split begins */
    for (int64_t c = 0; cut < len; cut++)
        if (((unsigned char)text[cut] & 0xC0) != 0x80 && c++ == split) break;
    mha_tokenizer *tk = cli_load_tokenizer(o.vocab);
    if (mc->vocab_size < mha_tokenizer_vocab_size(tk))
        cli_die("the model's vocab_size %lld is below the tokenizer's %d", (long long)mc->vocab_size,
                (int)mha_tokenizer_vocab_size(tk));
    dataset train, val;
    make_part(&train, tk, text, cut, o.context, o.batch, "training", o.text, true);
    make_part(&val, tk, text + cut, len - cut, o.context, o.batch, "validation", o.text, false);

    mha_params *ps = mha_gpt_params(m);
    mha_optimizer_config oc;
    mha_optimizer_config_init(&oc, MHA_OPTIM_ADAMW);
    oc.adamw.lr = o.lr;
    oc.adamw.weight_decay = o.weight_decay;
    mha_optimizer *opt = NULL;
    cli_check(mha_optimizer_create(ps, &oc, &opt), "optimizer");
    if (o.resume) {
        char *p = path_in(dir, "optimizer.safetensors");
        cli_check(mha_optimizer_load(opt, p), p);
        if (mha_optimizer_step_count(opt) != s.global_step + 1)
            cli_die("%s: the optimizer took %lld steps, the run %lld", p, (long long)mha_optimizer_step_count(opt),
                    (long long)s.global_step + 1);
        free(p);
    }
    const int64_t B = o.batch, T = o.context, V = mc->vocab_size;
    const int64_t n_batches = train.n_windows / B; /* drop_last */
    if (!o.resume) s.perm = cli_malloc((size_t)train.n_windows * sizeof(int64_t));
    else if (s.n_perm != train.n_windows)
        cli_die("%s: the permutation has %lld windows, the text %lld", state_path, (long long)s.n_perm,
                (long long)train.n_windows);
    if (s.epoch >= o.epochs)
        fprintf(stderr, "mha: the run in %s has done %lld epochs; --epochs %lld adds none\n", dir,
                (long long)s.epoch, (long long)o.epochs);
    const int64_t most = train.n_windows > val.n_windows ? train.n_windows : val.n_windows;
    ctx c = {.m = m, .g = g, .train = &train, .val = &val, .B = B, .T = T, .V = V,
             .x = cli_malloc((size_t)(B * T) * sizeof(int32_t)), .y = cli_malloc((size_t)(B * T) * sizeof(int32_t)),
             .logits = cli_malloc((size_t)(B * T) * (size_t)V * sizeof(float)),
             .perm_scratch = cli_malloc((size_t)most * sizeof(int64_t))};
    mha_gpt_tape *tape = NULL;
    cli_check(mha_gpt_tape_create(&tape), "tape");
    step_ctx sc = {.c = &c, .ps = ps, .tape = tape, .allreduce = o.allreduce,
                   .leaf_loss = cli_malloc((size_t)(o.accum * B) * sizeof(double))};
    timing tm = {.t0 = now_s()};
    tm.cap_steps = (o.epochs - s.epoch) * n_batches + 1;
    tm.step_ms = cli_malloc((size_t)tm.cap_steps * sizeof(double));
    ckpt k = {.dir = dir, .o = &o, .m = m, .opt = opt, .t = &tm,
              .st = {.o = &o, .s = &s, .g = g, .text_hash = fnv1a(text, len), .text_bytes = (int64_t)len,
                     .n_train_windows = train.n_windows}};
    int64_t last_saved = s.global_step;
    const bool tty = lead && isatty(STDOUT_FILENO) && !cli_dist_launched(); /* mpirun's pty is no terminal's */
    if (lead && isatty(STDERR_FILENO))
        fprintf(stderr, "GPTModel: %lld parameters (V %lld, C %lld, E %lld, %lld heads, %lld layers, drop %g%s); "
                        "%s: train %lld tokens (%lld batches of %lld x %lld), val %lld tokens; %d process%s x %d threads, "
                        "kernels %s%s\n",
                (long long)mha_params_scalars(ps), (long long)V, (long long)mc->context_length, (long long)mc->emb_dim,
                (long long)mc->n_heads, (long long)mc->n_layers, mc->drop_rate, mha_gpt_head_tied(m) ? ", tied head" : "",
                o.text, (long long)(n_batches * B * T), (long long)n_batches, (long long)B, (long long)T,
                (long long)(val.n_windows * T), cli_dist_size(), cli_dist_size() > 1 ? "es" : "", mha_runtime_threads(),
                mha_runtime_isa(),
                o.resume ? "; resuming" : "");

    for (; s.epoch < o.epochs; s.epoch++) {
        if (s.batch == 0) {
            /* for input_batch, target_batch in train_loader: */
            (void)mha_generator_int64(g); /* _base_seed */
            mha_generator *pg = NULL;
            cli_check(mha_generator_create((uint64_t)mha_generator_int64(g), &pg), "generator");
            cli_check(mha_generator_randperm(pg, s.perm, train.n_windows), "randperm");
            mha_generator_free(pg);
        }
        while (s.batch < n_batches) {
            const double t_step = now_s();
            const int64_t kk = o.accum < n_batches - s.batch ? o.accum : n_batches - s.batch; /* batches this step */
            sc.perm = s.perm, sc.b0 = s.batch, sc.k = kk;
            float loss = 0.0f;
            const mha_status st = step_gradient(&sc, &loss);
            const mha_status so = st == MHA_OK && isfinite(loss) ? mha_optimizer_step(opt) : st;
            if (st == MHA_ERR_NONFINITE || so == MHA_ERR_NONFINITE || (st == MHA_OK && !isfinite(loss))) {
                char kept[96];
                if (last_saved >= 0 || exists(model_path))
                    snprintf(kept, sizeof kept, "%s keeps the checkpoint of step %lld", dir, (long long)last_saved);
                else
                    snprintf(kept, sizeof kept, "no checkpoint was written");
                cli_die("step %lld: the training loss is %s; stopped (%s)", (long long)s.global_step + 1,
                        isfinite(loss) ? "not finite in the backward" : (isnan(loss) ? "nan" : "inf"), kept);
            }
            cli_check(st, "training step");
            cli_check(so, "optimizer");
            s.tokens_seen += kk * B * T;
            tm.tokens += kk * B * T;
            s.global_step++;
            tm.step_ms[tm.n_steps++] = 1e3 * (now_s() - t_step);
            if (s.global_step % o.eval_freq == 0) {
                /* evaluate_model: eval mode, the first eval_iter batches of each loader */
                const double tl = loader_loss(&c, &train, true, o.eval_iter);
                const double vl = loader_loss(&c, &val, false, o.eval_iter);
                log_push(&s, (log_row){s.epoch + 1, s.global_step, tl, vl, s.tokens_seen});
                if (lead)
                    printf("%sEp %lld (Step %06lld): Train loss %.3f, Val loss %.3f\n", tty ? "\r\033[K" : "",
                           (long long)s.epoch + 1, (long long)s.global_step, tl, vl);
            }
            if (tty) {
                const double el = now_s() - tm.t0;
                const int64_t left = ((o.epochs - s.epoch) * n_batches - s.batch - kk) / o.accum;
                char eta[32];
                fmt_time(eta, sizeof eta, el / (double)tm.n_steps * (double)left);
                printf("\r\033[Kepoch %lld/%lld  step %lld  loss %.3f  %.0f tokens/s  %s left", (long long)s.epoch + 1,
                       (long long)o.epochs, (long long)s.global_step, (double)loss, (double)tm.tokens / el, eta);
            }
            fflush(stdout);
            s.batch += kk; /* the position to resume from */
            if (o.save_every && (s.global_step + 1) % o.save_every == 0 && s.batch < n_batches) {
                tm.train_s = now_s() - tm.t0;
                if (lead) checkpoint(&k);
                last_saved = s.global_step;
            }
        }
        if (o.sample_tokens > 0 && lead) {
            sample(&c, tk, o.start_context, o.sample_tokens, &s);
            if (tty) printf("\r\033[K");
            cli_put_text(stdout, (const unsigned char *)s.samples[s.n_samples - 1], s.sample_len[s.n_samples - 1], true);
            putchar('\n');
            fflush(stdout);
        }
        s.batch = 0;
        s.epoch++;
        tm.train_s = now_s() - tm.t0;
        if (lead) checkpoint(&k);
        last_saved = s.global_step;
        s.epoch--;
    }
    if (tty) printf("\r\033[K");
    tm.train_s = now_s() - tm.t0;
    if (o.json && lead) {
        const json_src js = {&s, &tm};
        write_json(stdout, &js);
    }
    fflush(stdout);
    cli_dist_finalize();

    mha_gpt_tape_free(tape);
    mha_optimizer_free(opt);
    mha_gpt_free(m);
    mha_generator_free(g);
    mha_tokenizer_free(tk);
    free(c.x);
    free(c.y);
    free(c.logits);
    free(c.perm_scratch);
    free(sc.leaf_loss);
    mha_tree_free(sc.tree);
    free(s.perm);
    free(tm.step_ms);
    for (int64_t i = 0; i < s.n_samples; i++) free(s.samples[i]);
    free(s.samples);
    free(s.sample_len);
    free(s.log);
    free(train.ids);
    free(val.ids);
    free(text);
    free(model_path);
    free(commit);
    free(state_path);
    opts_free(&o);
    return 0;
}
