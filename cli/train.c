/* train.c — `mha train`: a small task in which attention has to learn a
 * relationship between positions, trained with mha's backward and AdamW.
 *
 * The task ("copy the token LAG places back"): sequences of T random tokens
 * from a vocabulary of V; token v enters as emb[v] + pos[t], emb a fixed
 * random (V, E) table drawn from the seed, pos the fixed sinusoidal
 * encoding of the original Transformer. A MultiHeadAttention(E, E, T, p, H)
 * layer, the only thing trained, maps them to y; the read-out is tied to
 * the embeddings: logits[t][v] = y[t] . emb[v]. The loss is the
 * cross-entropy of predicting token t - LAG at every position t >= LAG.
 * The target is a deterministic function of the input, so the loss floor
 * is 0; guessing gives ln V. To get there a head must learn to put its
 * weight on key t - LAG from query t (a relative position, expressible
 * through the sinusoids), and the value and output projections must carry
 * the token's identity through.
 *
 * Files in --out DIR: model.safetensors (the module: `mha run` takes it),
 * optimizer.safetensors (AdamW's state), train.safetensors (the loss curve
 * and the task's settings), loss.svg and attention.svg. --resume continues
 * from them exactly: step s's batch is drawn from a generator seeded with
 * (seed, s), so a resumed run sees the batches an uninterrupted one would. */
#include "cli.h"
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int64_t steps, lag, batch, tokens, vocab, emb, heads, every;
    double lr, wd, dropout;
    uint64_t seed;
} task_cfg;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the data ------------------------------------------------------------ */

typedef struct {
    const task_cfg *c;
    float *emb; /* (V, E) */
    float *pos; /* (T, E) */
    mha_generator *g;
} task;

static void task_init(task *k, const task_cfg *c) {
    k->c = c;
    const int64_t V = c->vocab, E = c->emb, T = c->tokens;
    k->emb = cli_malloc((size_t)(V * E) * sizeof(float));
    k->pos = cli_malloc((size_t)(T * E) * sizeof(float));
    cli_check(mha_generator_create(c->seed ^ 0x5eedULL, &k->g), "generator");
    mha_generator_normal(k->g, k->emb, (size_t)(V * E), 0.0, 1.0);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < E; i++) {
            const double f = pow(10000.0, -(double)(i / 2 * 2) / (double)E);
            k->pos[t * E + i] = (float)(i % 2 ? cos((double)t * f) : sin((double)t * f));
        }
}

/* The batch of step s (or of the held-out set: s < 0): tokens and x. */
static void task_batch(task *k, int64_t s, int32_t *tok, float *x) {
    const task_cfg *c = k->c;
    const int64_t E = c->emb, n = c->batch * c->tokens;
    mha_generator_manual_seed(k->g, c->seed * 1000003u + (uint64_t)s);
    for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)(mha_generator_random(k->g) % (uint32_t)c->vocab);
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < E; e++) x[i * E + e] = k->emb[tok[i] * E + e] + k->pos[(i % c->tokens) * E + e];
}

/* Cross-entropy of the tied read-out at positions t >= lag; dy (if not
 * NULL) gets d loss / d y. Returns the mean loss; *acc the accuracy. */
static double task_loss(const task *k, const float *y, const int32_t *tok, float *dy, double *acc) {
    const task_cfg *c = k->c;
    const int64_t E = c->emb, V = c->vocab, T = c->tokens;
    const double n = (double)(c->batch * (T - c->lag));
    double loss = 0.0, right = 0.0;
    double *p = cli_malloc((size_t)V * sizeof(double));
    if (dy) memset(dy, 0, (size_t)(c->batch * T * E) * sizeof(float));
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t t = c->lag; t < T; t++) {
            const float *yr = y + (b * T + t) * E;
            const int32_t target = tok[b * T + t - c->lag];
            double mx = -INFINITY, sum = 0.0;
            int64_t arg = 0;
            for (int64_t v = 0; v < V; v++) {
                double s = 0.0;
                for (int64_t e = 0; e < E; e++) s += (double)yr[e] * (double)k->emb[v * E + e];
                p[v] = s;
                if (s > mx) mx = s, arg = v;
            }
            for (int64_t v = 0; v < V; v++) sum += (p[v] = exp(p[v] - mx));
            loss += log(sum) - (p[target] > 0 ? log(p[target]) : (double)-INFINITY);
            right += arg == target;
            if (dy) {
                float *d = dy + (b * T + t) * E;
                for (int64_t v = 0; v < V; v++) {
                    const double gv = (p[v] / sum - (v == target)) / n;
                    for (int64_t e = 0; e < E; e++) d[e] += (float)(gv * (double)k->emb[v * E + e]);
                }
            }
        }
    free(p);
    *acc = right / n;
    return loss / n;
}

/* ---- files --------------------------------------------------------------- */

static char *path_in(const char *dir, const char *name) {
    char *p = cli_malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

#define CFG_KEYS(X) \
    X(lag) X(batch) X(tokens) X(vocab) X(emb) X(heads)

static void save_state(const char *dir, const task_cfg *c, const float *losses, int64_t step) {
    char v[16][32];
    const char *meta[32];
    int n = 0;
#define PUT(key, fmt, val) (snprintf(v[n / 2], sizeof v[0], fmt, val), meta[n] = key, meta[n + 1] = v[n / 2], n += 2)
    PUT("task", "%s", "copy the token lag places back");
    PUT("step", "%lld", (long long)step);
    PUT("seed", "%llu", (unsigned long long)c->seed);
#define PUT_CFG(f) PUT(#f, "%lld", (long long)c->f);
    CFG_KEYS(PUT_CFG)
#undef PUT_CFG
    PUT("lr", "%.17g", c->lr);
    PUT("weight_decay", "%.17g", c->wd);
    PUT("dropout", "%.17g", c->dropout);
#undef PUT
    const int64_t shape[1] = {step};
    const mha_st_entry e = {"loss", MHA_DTYPE_F32, 1, shape, losses};
    char *p = path_in(dir, "train.safetensors");
    cli_check(mha_st_write_file(p, &e, 1, meta, (size_t)n / 2), p);
    free(p);
}

/* Reads train.safetensors: the task settings must match c (those given on
 * the command line); returns the step reached and, when losses is not NULL,
 * fills it. A problem frees what it read before it dies, so a refused resume
 * leaves nothing behind (check with losses == NULL before allocating). */
static int64_t load_state(const char *dir, const task_cfg *c, float *losses) {
    char *p = path_in(dir, "train.safetensors"), msg[600] = "";
    mha_st *st = NULL;
    if (mha_st_read_file(p, &st) != MHA_OK) {
        snprintf(msg, sizeof msg, "%s", mha_last_error());
        free(p);
        cli_die("%s", msg);
    }
    int64_t step = -1, v = 0;
    if (mha_st_metadata_int(st, "step", 0, INT64_MAX, &step) != MHA_OK)
        snprintf(msg, sizeof msg, "%s: no step count in the metadata (not a checkpoint of mha train)", p);
    else if (step > c->steps)
        snprintf(msg, sizeof msg, "%s: the run is at step %lld, past --steps %lld", p, (long long)step,
                 (long long)c->steps);
    /* the seed is a uint64 (beyond int64): its canonical decimal text is compared */
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
    const char *s = mha_st_metadata(st, "seed");
    if (!*msg && (!s || strcmp(s, seed) != 0))
        snprintf(msg, sizeof msg, "%s: written with another --seed", p);
#define CHECK_CFG(f)                                                                                       \
    if (!*msg && (mha_st_metadata_int(st, #f, INT64_MIN, INT64_MAX, &v) != MHA_OK || v != c->f))         \
        snprintf(msg, sizeof msg, "%s: written with --%s %s, not %lld", p, #f,                            \
                 mha_st_metadata(st, #f) ? mha_st_metadata(st, #f) : "?", (long long)c->f);
    CFG_KEYS(CHECK_CFG)
#undef CHECK_CFG
    mha_st_tensor t;
    if (!*msg && (mha_st_find(st, "loss", &t) != MHA_OK || t.ndim != 1 || t.shape[0] != step))
        snprintf(msg, sizeof msg, "%s: no loss curve of %lld steps", p, (long long)step);
    if (!*msg && losses && mha_st_tensor_to_f32(&t, losses, (size_t)step) != MHA_OK)
        snprintf(msg, sizeof msg, "%s: %s", p, mha_last_error());
    mha_st_free(st);
    free(p);
    if (*msg) cli_die("%s", msg);
    return step;
}

static void checkpoint(const char *dir, const task_cfg *c, mha_module *m, mha_optimizer *opt,
                       const float *losses, int64_t step) {
    char *p = path_in(dir, "model.safetensors");
    cli_check(mha_module_save(m, p), p);
    free(p);
    p = path_in(dir, "optimizer.safetensors");
    cli_check(mha_optimizer_save(opt, p), p);
    free(p);
    save_state(dir, c, losses, step); /* last: a checkpoint is complete once it is written */
}

/* ---- pictures ------------------------------------------------------------ */

typedef struct {
    float *w; /* (B, H, T, T) weights, copied */
    size_t n;
} grab;

static void grab_softmax(void *user, const char *step, const char *expr, int ndim, const int64_t *shape,
                         const float *data) {
    (void)expr;
    grab *g = user;
    if (strcmp(step, "softmax") != 0 || ndim != 4) return;
    g->n = (size_t)(shape[0] * shape[1] * shape[2] * shape[3]);
    g->w = cli_malloc(g->n * sizeof(float));
    memcpy(g->w, data, g->n * sizeof(float));
}

static void pictures(const char *dir, const task_cfg *c, task *k, mha_module *m, const float *losses,
                     int64_t steps) {
    char title[160], *p = path_in(dir, "loss.svg");
    snprintf(title, sizeof title, "mha train: copy the token %lld places back (V = %lld): loss per step",
             (long long)c->lag, (long long)c->vocab);
    char chance[64];
    snprintf(chance, sizeof chance, "guessing: ln %lld = %.2f (floor: 0)", (long long)c->vocab, log((double)c->vocab));
    if (svg_line_chart(p, title, "step", "cross-entropy (nats)", losses, steps, 1, 1, log((double)c->vocab),
                       chance) != 0)
        cli_die("%s: cannot write: %s", p, strerror(errno));
    free(p);

    /* every head's weights on one held-out sequence, eval mode */
    const int64_t T = c->tokens, E = c->emb, H = c->heads;
    int32_t *tok = cli_malloc((size_t)(c->batch * T) * sizeof(int32_t));
    float *x = cli_malloc((size_t)(c->batch * T * E) * sizeof(float)), *y = cli_malloc((size_t)(T * E) * sizeof(float));
    task_batch(k, -1, tok, x);
    grab g = {0};
    cli_check(mha_module_forward_traced(m, y, x, 1, T, NULL, grab_softmax, &g), "forward");
    if (!g.w) cli_die("the traced forward gave no attention weights");
    const char **titles = cli_malloc((size_t)H * sizeof(char *)), **rows = cli_malloc((size_t)T * sizeof(char *));
    char(*tbuf)[32] = cli_malloc((size_t)(H + T) * 32);
    for (int64_t h = 0; h < H; h++) {
        snprintf(tbuf[h], 32, "head %lld", (long long)h);
        titles[h] = tbuf[h];
    }
    for (int64_t t = 0; t < T; t++) {
        snprintf(tbuf[H + t], 32, "%lld: %d", (long long)t, tok[t]);
        rows[t] = tbuf[H + t];
    }
    snprintf(title, sizeof title, "attention weights of each head on one sequence (the target of query t is key t - %lld)",
             (long long)c->lag);
    p = path_in(dir, "attention.svg");
    const svg_heatmap_opts so = {.map_titles = titles, .row_labels = rows, .causal = 1,
                                 .note = "rows: queries (position: token), columns: keys; darker = more weight"};
    if (svg_heatmaps(p, title, g.w, H, T, T, &so) != 0) cli_die("%s: cannot write: %s", p, strerror(errno));
    free(p);
    free(g.w);
    free(tbuf);
    free(titles);
    free(rows);
    free(tok);
    free(x);
    free(y);
}

/* ---- the command --------------------------------------------------------- */

static void usage(void) {
    puts("usage: mha train [--steps N] [--lag K] [--batch B] [--tokens T] [--vocab V]\n"
         "                 [--emb-dim E] [--num-heads H] [--lr LR] [--weight-decay WD]\n"
         "                 [--dropout P] [--seed S] [--out DIR] [--resume]\n"
         "                 [--checkpoint-every N] [--threads N]\n\n"
         "Trains a MultiHeadAttention(E, E, T, P, H) layer, with mha's backward pass and\n"
         "AdamW, on a task only attention can solve: in sequences of T random tokens (of V),\n"
         "predict at every position t >= K the token at t - K. Tokens enter as fixed random\n"
         "embeddings plus sinusoidal positions; the read-out is tied to the embeddings.\n"
         "The loss floor is 0 (the answer is in the input); guessing gives ln V.\n\n"
         "Defaults: 1500 steps, K = 3, B = 32, T = 24, V = 16, E = 32, H = 4, lr 3e-3,\n"
         "weight decay 0.01, dropout 0, seed 123, DIR = mha-train. Prints a progress line\n"
         "(step, loss, accuracy, speed); writes DIR/model.safetensors (for mha run),\n"
         "DIR/optimizer.safetensors and DIR/train.safetensors (checkpoints, every N steps,\n"
         "default 500, and at the end), DIR/loss.svg (the loss curve) and DIR/attention.svg\n"
         "(each head's weights on one held-out sequence). --resume continues the run in DIR\n"
         "(same settings) to --steps, exactly as if it had not stopped.");
}

int mha_cli_train(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[2], "GPTModel") == 0) return mha_cli_train_gpt(argc, argv);
    task_cfg c = {.steps = 1500, .lag = 3, .batch = 32, .tokens = 24, .vocab = 16, .emb = 32, .heads = 4,
                  .every = 500, .lr = 3e-3, .wd = 0.01, .dropout = 0.0, .seed = 123};
    const char *dir = "mha-train";
    bool resume = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int64_t big = (int64_t)1 << 20;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage();
            return 0;
        } else if (strcmp(a, "--steps") == 0) {
            c.steps = cli_parse_int(a, v, 1, (int64_t)1 << 30), i++;
        } else if (strcmp(a, "--lag") == 0) {
            c.lag = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--batch") == 0) {
            c.batch = cli_parse_int(a, v, 1, big), i++;
        } else if (strcmp(a, "--tokens") == 0) {
            c.tokens = cli_parse_int(a, v, 2, 4096), i++;
        } else if (strcmp(a, "--vocab") == 0) {
            c.vocab = cli_parse_int(a, v, 2, big), i++;
        } else if (strcmp(a, "--emb-dim") == 0) {
            c.emb = cli_parse_int(a, v, 2, 4096), i++;
        } else if (strcmp(a, "--num-heads") == 0) {
            c.heads = cli_parse_int(a, v, 1, 4096), i++;
        } else if (strcmp(a, "--checkpoint-every") == 0) {
            c.every = cli_parse_int(a, v, 1, (int64_t)1 << 30), i++;
        } else if (strcmp(a, "--lr") == 0 || strcmp(a, "--weight-decay") == 0) {
            char *end = NULL;
            const double d = v ? strtod(v, &end) : (double)NAN;
            if (!v || end == v || *end || !(d >= 0.0) || !isfinite(d)) cli_die("%s: '%s' is not a non-negative number", a, v ? v : "");
            *(strcmp(a, "--lr") == 0 ? &c.lr : &c.wd) = d, i++;
        } else if (strcmp(a, "--dropout") == 0) {
            c.dropout = cli_parse_prob(a, v), i++;
        } else if (strcmp(a, "--seed") == 0) {
            c.seed = cli_parse_seed(a, v), i++;
        } else if (strcmp(a, "--out") == 0) {
            if (!v) cli_die("--out needs a directory");
            dir = argv[++i];
        } else if (strcmp(a, "--resume") == 0) {
            resume = true;
        } else if (strcmp(a, "--threads") == 0) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else {
            cli_die("train: unknown option '%s' (see mha train --help)", a);
        }
    }
    if (c.lag >= c.tokens) cli_die("train: --lag (%lld) must be below --tokens (%lld)", (long long)c.lag, (long long)c.tokens);
    if (c.emb % c.heads) cli_die("train: --emb-dim (%lld) must be divisible by --num-heads (%lld)", (long long)c.emb, (long long)c.heads);
    cli_make_dir(dir);
    cli_lock_dir(dir);

    if (resume) (void)load_state(dir, &c, NULL); /* refused before anything is allocated */
    task k;
    task_init(&k, &c);
    float *losses = cli_malloc((size_t)c.steps * sizeof(float));
    mha_module *m = NULL;
    int64_t step = 0;
    mha_config mc;
    mha_config_init(&mc, MHA_MULTI_HEAD_ATTENTION);
    mc.d_in = mc.d_out = c.emb;
    mc.context_length = c.tokens;
    mc.dropout = c.dropout;
    mc.num_heads = c.heads;
    mha_optimizer_config oc;
    mha_optimizer_config_init(&oc, MHA_OPTIM_ADAMW);
    oc.adamw.lr = c.lr;
    oc.adamw.weight_decay = c.wd;
    mha_optimizer *opt = NULL;
    if (resume) {
        step = load_state(dir, &c, losses);
        char *p = path_in(dir, "model.safetensors");
        cli_check(mha_module_load(p, &m), p);
        free(p);
        const mha_config *got = mha_module_config_of(m);
        if (got->kind != MHA_MULTI_HEAD_ATTENTION || got->d_in != c.emb || got->num_heads != c.heads ||
            got->context_length != c.tokens || got->dropout != c.dropout)
            cli_die("%s/model.safetensors: not the module of these settings", dir);
        cli_check(mha_optimizer_create(mha_module_params(m), &oc, &opt), "optimizer");
        p = path_in(dir, "optimizer.safetensors");
        cli_check(mha_optimizer_load(opt, p), p);
        free(p);
        if (mha_optimizer_step_count(opt) != step)
            cli_die("%s: the optimizer took %lld steps, the loss curve %lld", dir,
                    (long long)mha_optimizer_step_count(opt), (long long)step);
        printf("resuming at step %lld of %lld from %s\n", (long long)step, (long long)c.steps, dir);
    } else {
        cli_check(mha_module_create_seeded(&mc, c.seed, &m), "module");
        cli_check(mha_optimizer_create(mha_module_params(m), &oc, &opt), "optimizer");
    }

    const int64_t T = c.tokens, E = c.emb, n = c.batch * T;
    int32_t *tok = cli_malloc((size_t)n * sizeof(int32_t));
    float *x = cli_malloc((size_t)(n * E) * sizeof(float)), *y = cli_malloc((size_t)(n * E) * sizeof(float));
    float *dy = cli_malloc((size_t)(n * E) * sizeof(float));
    mha_tape *tape = NULL;
    cli_check(mha_tape_create(&tape), "tape");
    const bool tty = isatty(STDOUT_FILENO);
    printf("task: copy the token %lld places back; V = %lld, T = %lld, batch %lld; "
           "MultiHeadAttention(%lld, %lld, %lld, %g, %lld): %lld parameters\n"
           "loss floor 0, guessing ln %lld = %.3f; AdamW lr %g, weight decay %g; threads %d, kernels %s\n",
           (long long)c.lag, (long long)c.vocab, (long long)T, (long long)c.batch, (long long)E, (long long)E,
           (long long)T, c.dropout, (long long)c.heads, (long long)mha_params_scalars(mha_module_params(m)),
           (long long)c.vocab, log((double)c.vocab), c.lr, c.wd, mha_runtime_threads(), mha_runtime_isa());
    double t0 = now_s(), last = t0, acc = 0.0;
    int64_t first = step;
    for (; step < c.steps; step++) {
        task_batch(&k, step, tok, x);
        const mha_forward_opts o = {.training = 1, .rng = MHA_DROPOUT_RNG_PHILOX, .philox_seed = c.seed,
                                    .philox_offset = (uint64_t)step};
        cli_check(mha_module_forward_tape(m, y, x, c.batch, T, &o, tape, NULL, 0), "forward");
        const double loss = task_loss(&k, y, tok, dy, &acc);
        losses[step] = (float)loss;
        if (!isfinite(loss)) cli_die("step %lld: the loss is %g (try a smaller --lr)", (long long)step + 1, loss);
        cli_check(mha_params_zero_grad(mha_module_params(m)), "gradients");
        cli_check(mha_module_backward(m, tape, NULL, x, dy, NULL, 0), "backward");
        cli_check(mha_optimizer_step(opt), "optimizer");
        const double t = now_s();
        const bool report = tty ? (t - last > 0.1 || step + 1 == c.steps) : ((step + 1) % 100 == 0 || step + 1 == c.steps);
        if (report) {
            last = t;
            printf("%sstep %6lld/%lld  loss %.4f  accuracy %5.1f%%  %.0f steps/s (%.0f tokens/s)%s",
                   tty ? "\r" : "", (long long)step + 1, (long long)c.steps, loss, 100.0 * acc,
                   (double)(step + 1 - first) / (t - t0), (double)((step + 1 - first) * n) / (t - t0), tty ? "" : "\n");
            fflush(stdout);
        }
        if ((step + 1) % c.every == 0 || step + 1 == c.steps) checkpoint(dir, &c, m, opt, losses, step + 1);
    }
    if (tty) putchar('\n');

    /* held-out batch, eval mode */
    task_batch(&k, -1, tok, x);
    cli_check(mha_module_forward(m, y, x, c.batch, T, NULL, NULL, 0), "forward");
    const double held = task_loss(&k, y, tok, NULL, &acc);
    printf("held-out batch (eval mode): loss %.4f, accuracy %.1f%% (floor 0, guessing %.3f)\n", held, 100.0 * acc,
           log((double)c.vocab));
    pictures(dir, &c, &k, m, losses, c.steps);
    printf("wrote %s/model.safetensors, optimizer.safetensors, train.safetensors, loss.svg, attention.svg\n", dir);

    mha_tape_free(tape);
    mha_optimizer_free(opt);
    mha_module_free(m);
    mha_generator_free(k.g);
    free(k.emb);
    free(k.pos);
    free(losses);
    free(tok);
    free(x);
    free(y);
    free(dy);
    return 0;
}
