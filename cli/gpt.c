/* gpt.c — the chapter 4 commands: mha init GPTModel|TransformerBlock,
 * mha run on their files, mha generate. */
#define MHA_UNSTABLE /* mha_sgemm, mha_gpt_tape_bytes: the training step's bound and memory */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool cli_is_gpt_name(const char *s) { return s && (!strcmp(s, "GPTModel") || !strcmp(s, "TransformerBlock")); }

bool cli_st_is_gpt(const mha_st *st) {
    mha_st_tensor t;
    return cli_is_gpt_name(mha_st_metadata(st, "module")) || mha_st_find(st, "wte.weight", &t) == MHA_OK ||
           mha_st_find(st, "transformer.wte.weight", &t) == MHA_OK;
}

static int parse_bool(const char *opt, const char *v) {
    if (!v) cli_die("%s needs true or false", opt);
    if (!strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "1")) return 1;
    if (!strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "0")) return 0;
    cli_die("%s: '%s' is not true or false", opt, v);
}

/* ---- mha init GPTModel | TransformerBlock -------------------------------- */

bool cli_parse_gpt_opt(mha_gpt_config *c, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const int64_t big = (int64_t)1 << 24;
    if (!strcmp(a, "--vocab-size"))
        c->vocab_size = cli_parse_int(a, v, 1, INT32_MAX);
    else if (!strcmp(a, "--context-length"))
        c->context_length = cli_parse_int(a, v, 1, big);
    else if (!strcmp(a, "--emb-dim"))
        c->emb_dim = cli_parse_int(a, v, 1, big);
    else if (!strcmp(a, "--n-heads"))
        c->n_heads = cli_parse_int(a, v, 1, big);
    else if (!strcmp(a, "--n-layers"))
        c->n_layers = cli_parse_int(a, v, 1, 4096);
    else if (!strcmp(a, "--drop-rate"))
        c->drop_rate = cli_parse_prob(a, v);
    else if (!strcmp(a, "--qkv-bias"))
        c->qkv_bias = parse_bool(a, v);
    else
        return false;
    (*i)++;
    return true;
}

/* --size: GPT-2's four configurations (emb_dim, n_heads, n_layers); vocab
 * and context stay GPT-2's. false when a is not --size. */
static bool parse_size(mha_gpt_config *c, int argc, char **argv, int *i) {
    if (strcmp(argv[*i], "--size")) return false;
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    static const struct {
        const char *name, *alias;
        int64_t E, H, L;
    } sizes[] = {{"124M", "small", 768, 12, 12}, {"medium", "355M", 1024, 16, 24},
                 {"large", "774M", 1280, 20, 36}, {"xl", "1558M", 1600, 25, 48}};
    if (!v) cli_die("--size needs 124M, medium, large or xl");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        if (!strcmp(v, sizes[k].name) || !strcmp(v, sizes[k].alias)) {
            c->emb_dim = sizes[k].E, c->n_heads = sizes[k].H, c->n_layers = sizes[k].L;
            (*i)++;
            return true;
        }
    cli_die("--size: '%s' is not 124M, medium, large or xl", v);
}

int mha_cli_init_gpt(int argc, char **argv) {
    mha_gpt_kind kind;
    cli_check(mha_gpt_kind_from_name(argv[2], &kind), "init");
    mha_gpt_config c;
    mha_gpt_config_init(&c, kind);
    const char *out = NULL;
    bool have_seed = false;
    uint64_t seed = 0;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: mha init GPTModel|TransformerBlock [--size 124M|medium|large|xl] [--vocab-size 50257]\n"
                 "                [--context-length 1024] [--emb-dim 768] [--n-heads 12] [--n-layers 12]\n"
                 "                [--drop-rate 0.1] [--qkv-bias false] --seed S -o FILE\n\n"
                 "Writes the book's GPTModel(cfg) (or TransformerBlock(cfg)) as PyTorch initialises it after\n"
                 "torch.manual_seed(S), bit for bit, under its state_dict() names (the att.mask buffers\n"
                 "left out), with the cfg keys in __metadata__. Defaults: GPT_CONFIG_124M; --size sets\n"
                 "emb_dim, n_heads and n_layers to GPT-2's 124M (768, 12, 12), medium (1024, 16, 24),\n"
                 "large (1280, 20, 36) or xl (1600, 25, 48), options after it changing them again.");
            return 0;
        } else if (cli_parse_gpt_opt(&c, argc, argv, &i) || parse_size(&c, argc, argv, &i)) { /* a cfg key */
        } else if (!strcmp(a, "--seed")) {
            seed = cli_parse_seed(a, v), have_seed = true, i++;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) cli_die("%s needs a file name", a);
            out = argv[++i];
        } else {
            cli_die("init: unknown option '%s' for %s (see mha init %s --help)", a, argv[2], argv[2]);
        }
    }
    if (kind == MHA_TRANSFORMER_BLOCK) c.n_layers = 1;
    if (!have_seed) cli_die("init: missing --seed");
    if (!out) cli_die("init: missing -o FILE");
    mha_gpt *m = NULL;
    cli_check(mha_gpt_create_seeded(&c, seed, &m), argv[2]);
    cli_check(mha_gpt_save(m, out), out);
    mha_gpt_free(m);
    return 0;
}

/* ---- mha run on a GPT file ------------------------------------------------ */

/* Token ids 'name' of IN (I64 or I32, (b, T)), checked before anything is
 * allocated: ids in [0, vocab_size) (-100 too for targets, as
 * cross_entropy's ignore_index), T <= context_length; with like (B, T) of
 * idx, that shape. */
static int32_t *read_ids(const mha_st *st, const char *in, const char *name, const mha_gpt_config *c,
                         const int64_t *like, int64_t *B_out, int64_t *T_out) {
    mha_st_tensor t;
    if (mha_st_find(st, name, &t) != MHA_OK) cli_die("%s: no tensor '%s' in the input file", in, name);
    if (t.ndim != 2) cli_die("%s: %s must have 2 dimensions (b, T), got %d", in, name, t.ndim);
    if (t.dtype != MHA_DTYPE_I64 && t.dtype != MHA_DTYPE_I32)
        cli_die("%s: %s must be I64 or I32, got %s", in, name, mha_dtype_name(t.dtype));
    const int64_t B = t.shape[0], T = t.shape[1], V = c->vocab_size;
    if (like && (B != like[0] || T != like[1]))
        cli_die("%s: %s has shape (%lld, %lld), idx (%lld, %lld)", in, name, (long long)B, (long long)T,
                (long long)like[0], (long long)like[1]);
    if (B == 0 || T == 0) cli_die("%s: %s has an empty dimension", in, name);
    if (T > c->context_length)
        cli_die("%s: %lld tokens exceed context_length %lld", in, (long long)T, (long long)c->context_length);
    if ((uint64_t)B * (uint64_t)T > ((uint64_t)1 << 40) / (uint64_t)V) cli_die("%s: logits would be too large", in);
    int32_t *idx = NULL;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < t.numel; i++) {
            int64_t v;
            if (t.dtype == MHA_DTYPE_I64) memcpy(&v, (const char *)t.data + 8 * i, 8);
            else {
                int32_t v32;
                memcpy(&v32, (const char *)t.data + 4 * i, 4);
                v = v32;
            }
            if (pass) idx[i] = (int32_t)v;
            else if ((v < 0 || v >= V) && !(like && v == -100))
                cli_die("%s: %s holds %lld at (%zu, %zu), outside the vocabulary [0, %lld)%s", in, name, (long long)v,
                        i / (size_t)T, i % (size_t)T, (long long)V, like ? " (and not -100)" : "");
        }
        if (!pass) idx = cli_malloc(t.numel * sizeof(int32_t));
    }
    *B_out = B;
    *T_out = T;
    return idx;
}

/* Activations 'name' of IN as float32, (b, T, emb_dim); with like (B, T),
 * that shape too. */
static float *read_x(const mha_st *st, const char *in, const char *name, const mha_gpt_config *c,
                     const int64_t *like, int64_t *B_out, int64_t *T_out) {
    mha_st_tensor t;
    if (mha_st_find(st, name, &t) != MHA_OK) cli_die("%s: no tensor '%s' in the input file", in, name);
    if (t.ndim != 3) cli_die("%s: %s must have 3 dimensions (b, T, emb_dim), got %d", in, name, t.ndim);
    const int64_t B = t.shape[0], T = t.shape[1];
    if (t.shape[2] != c->emb_dim)
        cli_die("%s: %s has width %lld but emb_dim is %lld", in, name, (long long)t.shape[2], (long long)c->emb_dim);
    if (like && (B != like[0] || T != like[1]))
        cli_die("%s: %s has shape (%lld, %lld, %lld), x (%lld, %lld, %lld)", in, name, (long long)B, (long long)T,
                (long long)c->emb_dim, (long long)like[0], (long long)like[1], (long long)c->emb_dim);
    if (B == 0 || T == 0) cli_die("%s: %s has an empty dimension", in, name);
    float *x = cli_malloc(t.numel * sizeof(float));
    cli_check(mha_st_tensor_to_f32(&t, x, t.numel), in);
    *B_out = B;
    *T_out = T;
    return x;
}

int mha_cli_run_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                    uint64_t seed, mha_dtype dtype) {
    mha_gpt *m = NULL;
    cli_check(mha_gpt_from_st_as(wst, dtype, &m), weights);
    const mha_gpt_config *c = mha_gpt_config_of(m);
    mha_st *st = NULL;
    cli_check(mha_st_read_file(in, &st), in);
    mha_generator *g = NULL;
    if (train) cli_check(mha_generator_create(seed, &g), "generator");
    const char *meta[2] = {"module", mha_gpt_kind_name(c->kind)};
    if (c->kind == MHA_GPT_MODEL) {
        int64_t B, T;
        int32_t *idx = read_ids(st, in, "idx", c, NULL, &B, &T);
        const int64_t V = c->vocab_size;
        float *logits = cli_malloc((size_t)(B * T * V) * sizeof(float));
        cli_check(mha_gpt_forward(m, logits, idx, B, T, 0, g), "forward");
        const int64_t shape[3] = {B, T, V};
        const mha_st_entry e = {"logits", MHA_DTYPE_F32, 3, shape, logits};
        cli_check(mha_st_write_file(out, &e, 1, meta, 1), out);
        free(idx);
        free(logits);
    } else {
        int64_t B, T;
        float *x = read_x(st, in, "x", c, NULL, &B, &T);
        cli_check(mha_gpt_blocks_forward(m, x, x, B, T, g), "forward");
        const int64_t shape[3] = {B, T, c->emb_dim};
        const mha_st_entry e = {"y", MHA_DTYPE_F32, 3, shape, x};
        cli_check(mha_st_write_file(out, &e, 1, meta, 1), out);
        free(x);
    }
    mha_st_free(st);
    mha_generator_free(g);
    mha_gpt_free(m);
    return 0;
}

/* ---- mha grad on a GPT file ------------------------------------------------ */

/* OUT: the leading entries e[0..n) then 'grad.<name>' of every parameter. */
static void write_with_grads(const char *out, mha_gpt *m, mha_st_entry *lead, size_t n, const char *const *meta) {
    const size_t np = mha_params_count(mha_gpt_params(m));
    mha_st_entry *e = cli_malloc((np + n) * sizeof *e);
    char **names = cli_malloc((np ? np : 1) * sizeof *names);
    int64_t(*shapes)[2] = cli_malloc((np ? np : 1) * sizeof *shapes);
    memcpy(e, lead, n * sizeof *e);
    for (size_t i = 0; i < np; i++) {
        mha_param p;
        cli_check(mha_params_grad(mha_gpt_params(m), i, &p), "gradients");
        names[i] = cli_malloc(strlen(p.name) + 6);
        sprintf(names[i], "grad.%s", p.name);
        shapes[i][0] = p.shape[0];
        shapes[i][1] = p.shape[1];
        e[n + i] = (mha_st_entry){names[i], MHA_DTYPE_F32, p.ndim, shapes[i], p.data};
    }
    cli_check(mha_st_write_file(out, e, np + n, meta, 1), out);
    for (size_t i = 0; i < np; i++) free(names[i]);
    free(names);
    free(shapes);
    free(e);
}

int mha_cli_grad_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                     uint64_t seed) {
    mha_gpt *m = NULL;
    cli_check(mha_gpt_from_st(wst, &m), weights);
    const mha_gpt_config *c = mha_gpt_config_of(m);
    mha_st *st = NULL;
    cli_check(mha_st_read_file(in, &st), in);
    mha_generator *g = NULL;
    if (train) cli_check(mha_generator_create(seed, &g), "generator");
    const char *meta[2] = {"module", mha_gpt_kind_name(c->kind)};
    mha_gpt_tape *tape = NULL;
    cli_check(mha_gpt_tape_create(&tape), "tape");
    cli_check(mha_params_zero_grad(mha_gpt_params(m)), "gradients");
    if (c->kind == MHA_GPT_MODEL) {
        int64_t B, T;
        int32_t *idx = read_ids(st, in, "idx", c, NULL, &B, &T);
        const int64_t like[2] = {B, T};
        int32_t *targets = read_ids(st, in, "targets", c, like, &B, &T);
        const int64_t V = c->vocab_size;
        float *logits = cli_malloc((size_t)(B * T * V) * sizeof(float)), loss;
        cli_check(mha_gpt_loss_backward(m, &loss, logits, idx, targets, B, T, g, tape), "grad");
        const int64_t shape[3] = {B, T, V};
        mha_st_entry lead[2] = {{"loss", MHA_DTYPE_F32, 0, shape, &loss},
                                {"logits", MHA_DTYPE_F32, 3, shape, logits}};
        write_with_grads(out, m, lead, 2, meta);
        free(idx);
        free(targets);
        free(logits);
    } else {
        int64_t B, T;
        float *x = read_x(st, in, "x", c, NULL, &B, &T);
        const int64_t like[2] = {B, T};
        float *dy = read_x(st, in, "dy", c, like, &B, &T);
        const size_t n = (size_t)(B * T * c->emb_dim);
        float *y = cli_malloc(n * sizeof(float)), *dx = cli_malloc(n * sizeof(float));
        cli_check(mha_gpt_blocks_forward_tape(m, y, x, B, T, g, tape), "forward");
        cli_check(mha_gpt_blocks_backward(m, tape, dx, dy), "backward");
        const int64_t shape[3] = {B, T, c->emb_dim};
        mha_st_entry lead[2] = {{"y", MHA_DTYPE_F32, 3, shape, y}, {"dx", MHA_DTYPE_F32, 3, shape, dx}};
        write_with_grads(out, m, lead, 2, meta);
        free(x);
        free(dy);
        free(y);
        free(dx);
    }
    mha_gpt_tape_free(tape);
    mha_st_free(st);
    mha_generator_free(g);
    mha_gpt_free(m);
    return 0;
}

/* ---- mha generate -------------------------------------------------------- */

/* Streaming output: each new token's text as it comes (a character cut
 * between tokens waits for its last bytes), or its id without a tokenizer. */
typedef struct {
    bool quiet;
    const mha_tokenizer *tok;
    char pending[64];
    size_t np;
    int64_t count;
} stream_state;

static void stream_bytes(stream_state *s, const char *b, size_t n, bool flush) {
    for (size_t i = 0; i < n; i++) {
        if (s->np == sizeof s->pending) { /* never with GPT-2's tokens: flush anyway */
            fwrite(s->pending, 1, s->np, stdout);
            s->np = 0;
        }
        s->pending[s->np++] = b[i];
        const size_t ok = mha_utf8_complete(s->pending, s->np);
        fwrite(s->pending, 1, ok, stdout);
        memmove(s->pending, s->pending + ok, s->np - ok);
        s->np -= ok;
    }
    if (flush) {
        fwrite(s->pending, 1, s->np, stdout);
        s->np = 0;
    }
    fflush(stdout);
}

static void stream_token(stream_state *s, int32_t id) {
    const char *b;
    size_t n;
    if (s->tok && mha_tokenizer_token(s->tok, id, &b, &n) == MHA_OK) {
        stream_bytes(s, b, n, false);
    } else {
        printf("%s%d", s->count ? "," : "", id);
        fflush(stdout);
    }
}

static void stream_id(void *user, int32_t id) {
    stream_state *s = user;
    if (!s->quiet) stream_token(s, id);
    s->count++;
}

/* ---- mha convert ------------------------------------------------------------ */

int mha_cli_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    mha_dtype dtype = MHA_DTYPE_F32;
    bool have_dtype = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: mha convert WEIGHTS -o OUTPUT --dtype bf16|f16|f32\n\n"
                 "Writes a GPTModel or TransformerBlock file (the book's names or Hugging Face GPT-2's)\n"
                 "under the book's names with its weight matrices (tok_emb, pos_emb, the attention and\n"
                 "feed-forward weights, out_head) as BF16 or F16 tensors, rounded to nearest even as\n"
                 "torch's .to(torch.bfloat16) / .half() round them; biases and LayerNorms stay F32.\n"
                 "generate, run and bench GPTModel --dtype bf16|f16 then read it without converting, and\n"
                 "torch's load_state_dict takes it. --dtype f32 widens a 16-bit file back (exactly). A\n"
                 "value beyond F16's range (65504) is an error. OUTPUT must not be WEIGHTS.");
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!v) cli_die("%s needs a file name", a);
            out = v, i++;
        } else if (!strcmp(a, "--dtype")) {
            dtype = cli_parse_dtype(a, v), have_dtype = true, i++;
        } else if (!strcmp(a, "--threads")) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else if (a[0] == '-') {
            cli_die("convert: unknown option '%s' (see mha convert --help)", a);
        } else if (!in) {
            in = a;
        } else {
            cli_die("convert: unexpected argument '%s'", a);
        }
    }
    if (!in) cli_die("convert: missing WEIGHTS file (see mha convert --help)");
    if (!out) cli_die("convert: missing -o OUTPUT");
    if (!have_dtype) cli_die("convert: give --dtype bf16, f16 or f32");
    struct stat si, so;
    if (stat(in, &si) == 0 && stat(out, &so) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino)
        cli_die("convert: OUTPUT is WEIGHTS itself (%s); write another file", out);
    mha_gpt *m = NULL;
    cli_check(mha_gpt_load_as(in, dtype, &m), in);
    cli_check(mha_gpt_save(m, out), out);
    mha_gpt_free(m);
    return 0;
}

int mha_cli_generate(int argc, char **argv) {
    const char *weights = NULL, *ids_s = NULL, *prompt = NULL, *vocab = NULL;
    mha_generate_opts o;
    mha_generate_opts_init(&o);
    bool json = false, have_seed = false;
    mha_dtype dtype = MHA_DTYPE_F32;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: mha generate WEIGHTS (--prompt TEXT | --ids 15496,11,314,716)\n"
                 "                    [--max-new-tokens N] [--no-kv-cache] [--temperature T --top-k K --seed S]\n"
                 "                    [--dtype f32|bf16|f16] [--json] [--threads N]\n\n"
                 "Continues the prompt with a GPTModel (a file of mha init GPTModel, or Hugging Face GPT-2\n"
                 "weights): greedy by default (the book's generate_text_simple), with a KV cache unless\n"
                 "--no-kv-cache (the same tokens); --temperature/--top-k sample as chapter 5's generate\n"
                 "after torch.manual_seed(S). Prints the ids as they come; --json ends with one line\n"
                 "{\"ids\": [...], \"text\": ..., \"tokens_per_s\": ...}.\n\n"
                 "--dtype bf16 or f16 holds the weight matrices in 16 bits (read from a 16-bit file as\n"
                 "they are, or rounded once from F32 at load): half the memory and about twice the decode\n"
                 "speed, with activations and sums in F32; f32 (the default) computes what PyTorch does.");
            return 0;
        } else if (!strcmp(a, "--ids")) {
            ids_s = v, i++;
            if (!v) cli_die("--ids needs a list");
        } else if (!strcmp(a, "--prompt")) {
            if (!v) cli_die("--prompt needs a text");
            prompt = v, i++;
        } else if (!strcmp(a, "--max-new-tokens")) {
            o.max_new_tokens = cli_parse_int(a, v, 0, 1 << 24), i++;
        } else if (!strcmp(a, "--no-kv-cache")) {
            o.use_cache = 0;
        } else if (!strcmp(a, "--temperature")) {
            char *end = NULL;
            o.temperature = v ? strtod(v, &end) : -1.0;
            if (!v || end == v || *end || !(o.temperature >= 0.0) || !isfinite(o.temperature))
                cli_die("%s: '%s' is not a temperature >= 0", a, v ? v : "");
            i++;
        } else if (!strcmp(a, "--top-k")) {
            o.top_k = cli_parse_int(a, v, 1, INT32_MAX), i++;
        } else if (!strcmp(a, "--seed")) {
            o.seed = cli_parse_seed(a, v), have_seed = true, i++;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--dtype")) {
            dtype = cli_parse_dtype(a, v), i++;
        } else if (!strcmp(a, "--vocab")) {
            if (!v) cli_die("--vocab needs a directory");
            vocab = v, i++;
        } else if (!strcmp(a, "--threads")) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else if (a[0] == '-') {
            cli_die("generate: unknown option '%s' (see mha generate --help)", a);
        } else if (!weights) {
            weights = a;
        } else {
            cli_die("generate: unexpected argument '%s'", a);
        }
    }
    if (!weights) cli_die("generate: missing WEIGHTS file (see mha generate --help)");
    if (!ids_s && !prompt) cli_die("generate: give --prompt TEXT or --ids LIST");
    if (ids_s && prompt) cli_die("generate: give --prompt or --ids, not both");
    if (have_seed && o.temperature == 0.0) cli_die("generate: --seed only applies with --temperature > 0");
    if (prompt && !*prompt) cli_die("generate: --prompt is empty");
    /* the tokenizer: required for --prompt; for --ids, text output when it loads */
    mha_tokenizer *tok = NULL;
    if (prompt || vocab) tok = cli_load_tokenizer(vocab);
    else tok = cli_try_tokenizer(NULL); /* --ids: ids are printed when there is none */
    int64_t n_prompt = 0;
    int32_t *ids = NULL;
    if (prompt) {
        size_t n = 0;
        const mha_status es = mha_tokenizer_encode(tok, prompt, strlen(prompt), NULL, 0, &n);
        if (es != MHA_OK && es != MHA_ERR_WORKSPACE) cli_check(es, "--prompt");
        ids = cli_malloc((n ? n : 1) * sizeof(int32_t));
        cli_check(mha_tokenizer_encode(tok, prompt, strlen(prompt), ids, n, &n), "--prompt");
        n_prompt = (int64_t)n;
    } else {
        ids = cli_parse_ids("--ids", ids_s, &n_prompt);
    }
    mha_gpt *m = NULL;
    cli_check(mha_gpt_load_as(weights, dtype, &m), weights);
    const mha_gpt_config *c = mha_gpt_config_of(m);
    if (c->kind != MHA_GPT_MODEL) cli_die("%s: a %s does not generate (a GPTModel does)", weights, mha_gpt_kind_name(c->kind));
    for (int64_t i = 0; i < n_prompt; i++)
        if (ids[i] >= c->vocab_size)
            cli_die("--ids: id %d is outside the vocabulary [0, %lld)", ids[i], (long long)c->vocab_size);
    int32_t *out = cli_malloc((size_t)(n_prompt + o.max_new_tokens) * sizeof(int32_t));
    int64_t n = 0;
    stream_state ss = {.quiet = json, .tok = tok, .count = 0};
    if (!json) /* the prompt, then each new token as it comes */
        for (int64_t i = 0; i < n_prompt; i++) stream_token(&ss, ids[i]);
    ss.count = 0;
    const double t0 = now_s();
    cli_check(mha_gpt_generate(m, out, &n, ids, n_prompt, &o, stream_id, &ss), "generate");
    const double dt = now_s() - t0;
    if (!json) {
        if (tok) stream_bytes(&ss, "", 0, true);
        printf("\n");
        fprintf(stderr, "%lld new tokens in %.2f s (%.1f tokens/s)\n", (long long)(n - n_prompt), dt,
                (double)(n - n_prompt) / dt);
    } else {
        printf("{\"ids\": [");
        for (int64_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", out[i]);
        printf("], \"text\": ");
        size_t len = 0;
        char *text = NULL;
        if (tok && mha_tokenizer_decode(tok, out, (size_t)n, NULL, 0, &len) == MHA_ERR_WORKSPACE) {
            text = cli_malloc(len + 1);
            if (mha_tokenizer_decode(tok, out, (size_t)n, text, len, &len) != MHA_OK) {
                free(text);
                text = NULL;
            }
        }
        if (text) {
            /* the string without its newline: the line goes on */
            FILE *mem = tmpfile();
            if (mem) {
                cli_put_json_text(mem, (const unsigned char *)text, len);
                const long sz = ftell(mem);
                rewind(mem);
                for (long i = 0; i + 1 < sz; i++) putchar(fgetc(mem));
                fclose(mem);
            }
            free(text);
        } else {
            printf("null");
        }
        printf(", \"tokens_per_s\": %.3f}\n", (double)(n - n_prompt) / dt);
    }
    mha_tokenizer_free(tok);
    free(ids);
    free(out);
    mha_gpt_free(m);
    return 0;
}

/* ---- mha bench GPTModel --------------------------------------------------- */

/* The weights one decode step reads, as the model holds them (F32 or 16
 * bits): every matrix and vector but the embeddings' lookups (one row of
 * pos_emb; of tok_emb too unless it is the tied head), cut into 16 KiB
 * chunks (a tensor's tail under a chunk left out: at most 16 KiB of each,
 * counted in the bytes, not in the time). */
#define READ_CHUNK 16384 /* bytes */
typedef struct {
    const char **chunk;
    size_t n;
    double bytes;   /* what a decode step reads: the chunks and the tails */
    int64_t params; /* the model's parameters, a tied head once */
} read_set;

static void read_set_init(read_set *s, const mha_gpt *m) {
    const size_t nw = mha_gpt_weights_count(m);
    const void *tok = NULL;
    s->bytes = 0.0, s->params = 0, s->chunk = NULL;
    for (int pass = 0; pass < 2; pass++) {
        s->n = 0;
        for (size_t i = 0; i < nw; i++) {
            mha_gpt_weight w;
            cli_check(mha_gpt_weight_get(m, i, &w), "weights");
            const size_t bytes = w.numel * mha_dtype_size(w.dtype);
            if (!strcmp(w.name, "tok_emb.weight")) tok = w.data;
            if (!pass && !(tok && w.data == tok && strcmp(w.name, "tok_emb.weight"))) s->params += (int64_t)w.numel;
            /* the head, tied or not, is listed as out_head.weight */
            if (!strcmp(w.name, "pos_emb.weight") || !strcmp(w.name, "tok_emb.weight")) continue;
            if (!pass) s->bytes += (double)bytes;
            for (size_t c = 0; c + READ_CHUNK <= bytes; c += READ_CHUNK) {
                if (pass) s->chunk[s->n] = (const char *)w.data + c;
                s->n++;
            }
        }
        if (!pass) s->chunk = cli_malloc((s->n ? s->n : 1) * sizeof *s->chunk);
    }
}

/* Integer lanes (any bits: 16-bit weights too, no float pitfalls), loads
 * that do not assume alignment. */
typedef uint32_t read_v8 __attribute__((vector_size(32), aligned(4)));

/* The sum of 8 chunks read at once: 8 streams far apart keep more reads in
 * flight than one (on a 2-core Zen 3, 37 GB/s against 28 for one stream
 * per thread), as the GEMV's 8 rows do. Built for AVX2 too, picked at load
 * (GCC splits the 8 lanes into two SSE registers without it: the adds
 * then fell behind memory, 21 GB/s where AVX2 read 30). */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
__attribute__((target_clones("avx2", "default")))
#endif
#endif
static uint32_t sum_chunks8(const char *const *chunk) {
    read_v8 a[8] = {{0}};
    for (size_t i = 0; i < READ_CHUNK / sizeof(read_v8); i++)
        for (int s = 0; s < 8; s++) a[s] += ((const read_v8 *)(const void *)chunk[s])[i];
    const read_v8 t = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

/* GB/s of one pass over the set with the library's threads (the sums kept,
 * so the loads stay): group g reads chunks g, g + n/8, ..., g + 7n/8, the
 * n % 8 left over in a last group of their own. What decoding, which reads
 * every one of these weights once per token, can hope for. */
static double read_pass_gbps(const read_set *s) {
    if (!s->n) return 0.0; /* no tensor of 16 KiB: nothing worth timing */
    volatile uint32_t sink = 0;
    const size_t stride = s->n / 8, groups = stride + (s->n % 8 ? 1 : 0);
    const double t0 = now_s();
    uint32_t total = 0;
#if defined(_OPENMP)
#pragma omp parallel for schedule(static) reduction(+ : total)
#endif
    for (size_t g = 0; g < groups; g++) {
        const char *c[8];
        for (int k = 0; k < 8; k++) {
            const size_t i = g < stride ? g + (size_t)k * stride : 8 * stride + (size_t)k;
            c[k] = s->chunk[i < s->n ? i : s->n - 1]; /* the last group's spare streams: the last chunk again */
        }
        total += sum_chunks8(c);
    }
    sink = total;
    (void)sink;
    const double t = now_s() - t0;
    return (double)s->n * READ_CHUNK / t * 1e-9;
}

/* The best and the worst of a few passes, folded into *best and *worst. */
static void read_probe(const read_set *s, int passes, double *best, double *worst) {
    for (int r = 0; r < passes; r++) {
        const double g = read_pass_gbps(s);
        if (g > *best) *best = g;
        if (g < *worst) *worst = g;
    }
}

/* ---- mha bench GPTModel --train-step ----------------------------------------- */

static int cmp_ms(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n sorted values. */
static double median_of(const double *v, int64_t n) { return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]); }

/* One GEMM of the training step: C (M, N) = op(A) op(B), as the forward
 * (x W^T) and the backward (dX = dY W, dW = dY^T X) call it. */
typedef struct {
    int64_t M, N, K;
    bool ta, tb;
    const char *what;
} step_gemm;

/* The step's GEMMs at R rows: per block the Q/K/V, out_proj, fc1 and fc2
 * projections, then the head, each forward, dX and dW. */
static int step_gemms(step_gemm *g, int64_t R, int64_t E, int64_t V) {
    const struct {
        int64_t in, out;
        const char *name;
    } lin[5] = {{E, 3 * E, "qkv"}, {E, E, "out_proj"}, {E, 4 * E, "fc1"}, {4 * E, E, "fc2"}, {E, V, "head"}};
    int n = 0;
    for (int i = 0; i < 5; i++) {
        g[n++] = (step_gemm){R, lin[i].out, lin[i].in, false, true, lin[i].name};   /* y = x W^T */
        g[n++] = (step_gemm){R, lin[i].in, lin[i].out, false, false, lin[i].name};  /* dx = dy W */
        g[n++] = (step_gemm){lin[i].out, lin[i].in, R, true, false, lin[i].name};   /* dW = dy^T x */
    }
    return n;
}

/* The sgemm timing between the steps: each of the step's GEMM shapes once
 * per round on operands of `most` floats each, the fastest call per shape
 * kept, so that the rate is measured under the same load as the steps (a
 * shared machine's speed swings within a minute). */
typedef struct {
    step_gemm g[15];
    int n;
    double t_min[15];
    size_t most;
} sgemm_probe;

static void probe_init(sgemm_probe *pr, int64_t R, int64_t E, int64_t V) {
    pr->n = step_gemms(pr->g, R, E, V);
    pr->most = 0;
    for (int i = 0; i < pr->n; i++) {
        const step_gemm *s = &pr->g[i];
        const size_t a = (size_t)(s->M * s->K), b = (size_t)(s->K * s->N), c = (size_t)(s->M * s->N);
        pr->most = a > pr->most ? a : pr->most, pr->most = b > pr->most ? b : pr->most;
        pr->most = c > pr->most ? c : pr->most;
        pr->t_min[i] = INFINITY;
    }
}

/* One round on buf (3 x most floats: A, B, C), which it overwrites: A and
 * B first get finite values (no denormals). */
static void probe_round(sgemm_probe *pr, float *buf) {
    float *A = buf, *B = buf + pr->most, *C = buf + 2 * pr->most;
    for (size_t i = 0; i < 2 * pr->most; i++) buf[i] = (float)(int)(i % 7) * 0.25f - 0.75f;
    for (int i = 0; i < pr->n; i++) {
        const step_gemm *s = &pr->g[i];
        const int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
        const double t0 = now_s();
        cli_check(mha_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N), "sgemm");
        const double t = now_s() - t0;
        if (t < pr->t_min[i]) pr->t_min[i] = t;
    }
}

/* The best GFLOP/s over the shapes, and which shape gave it. */
static double probe_best(const sgemm_probe *pr, char *shape, size_t shape_cap) {
    double best = 0.0;
    for (int i = 0; i < pr->n; i++) {
        const step_gemm *s = &pr->g[i];
        const double rate = 2.0 * (double)s->M * (double)s->N * (double)s->K / pr->t_min[i] * 1e-9;
        if (rate > best) {
            best = rate;
            snprintf(shape, shape_cap, "%lldx%lldx%lld%s%s (%s)", (long long)s->M, (long long)s->N, (long long)s->K,
                     s->ta ? " A^T" : "", s->tb ? " B^T" : "", s->what);
        }
    }
    return best;
}

/* The benchmarks' model: FILE (its matrices as dtype), or GPTModel(cfg)
 * drawn as torch.manual_seed(seed) (tie: out_head = tok_emb, the head not
 * drawn), its matrices held as dtype: a 16-bit model's drawn one at a time
 * in F32 and rounded, never the whole model in F32 (mha_gpt_init). */
static mha_gpt *bench_model(const char *weights, const mha_gpt_config *cfg, bool tie, uint64_t seed,
                            mha_dtype dtype) {
    mha_gpt *m = NULL;
    if (weights) {
        cli_check(mha_gpt_load_as(weights, dtype, &m), weights);
    } else {
        cli_check(mha_gpt_create_as(cfg, tie, dtype, &m), "GPTModel");
        mha_generator *g = NULL;
        cli_check(mha_generator_create(seed, &g), "generator");
        cli_check(mha_gpt_init(m, g), "GPTModel");
        mha_generator_free(g);
    }
    const mha_gpt_config *c = mha_gpt_config_of(m);
    if (c->kind != MHA_GPT_MODEL) cli_die("bench: %s holds a %s, not a GPTModel", weights, mha_gpt_kind_name(c->kind));
    return m;
}

/* One AdamW training step timed: zero_grad, the forward with a tape in
 * training mode (the config's dropout), the mean cross-entropy and the
 * backward (mha_gpt_loss_backward), AdamW's step. */
static int bench_train_step(int argc, char **argv) {
    const char *weights = NULL;
    int64_t B = 2, T = 256, rounds = 5;
    bool json = false, tie = false, cfg_opts = false;
    uint64_t seed = 123;
    mha_gpt_config cfg;
    mha_gpt_config_init(&cfg, MHA_GPT_MODEL);
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--train-step")) {
        } else if (!strcmp(a, "--batch")) {
            B = cli_parse_int(a, v, 1, 1 << 20), i++;
        } else if (!strcmp(a, "--tokens")) {
            T = cli_parse_int(a, v, 1, 1 << 24), i++;
        } else if (!strcmp(a, "--weights")) {
            if (!v) cli_die("--weights needs a file");
            weights = v, i++;
        } else if (!strcmp(a, "--seed")) {
            seed = cli_parse_seed(a, v), i++;
        } else if (!strcmp(a, "--tie-head")) {
            tie = true;
        } else if (!strcmp(a, "--rounds")) {
            rounds = cli_parse_int(a, v, 1, 1000), i++;
        } else if (!strcmp(a, "--threads")) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (cli_parse_gpt_opt(&cfg, argc, argv, &i) || parse_size(&cfg, argc, argv, &i)) {
            cfg_opts = true; /* a cfg key of init GPTModel */
        } else {
            cli_die("bench GPTModel --train-step: unknown option '%s' (see mha bench GPTModel --help)", a);
        }
    }
    if (weights && (cfg_opts || tie))
        cli_die("bench GPTModel --train-step: the model options change the seeded model, not --weights FILE");
    mha_gpt *m = bench_model(weights, &cfg, tie, seed, MHA_DTYPE_F32);
    const mha_gpt_config *c = mha_gpt_config_of(m);
    if (T > c->context_length)
        cli_die("--tokens %lld exceeds context_length %lld", (long long)T, (long long)c->context_length);
    const int64_t V = c->vocab_size, E = c->emb_dim, L = c->n_layers, R = B * T;
    if ((double)R * (double)V > (double)((int64_t)1 << 36)) cli_die("--batch x --tokens: the logits would be too large");
    mha_params *ps = mha_gpt_params(m);
    mha_optimizer_config oc;
    mha_optimizer_config_init(&oc, MHA_OPTIM_ADAMW);
    oc.adamw.lr = 4e-4;
    oc.adamw.weight_decay = 0.1;
    mha_optimizer *opt = NULL;
    cli_check(mha_optimizer_create(ps, &oc, &opt), "AdamW");
    mha_gpt_tape *tape = NULL;
    cli_check(mha_gpt_tape_create(&tape), "tape");
    mha_generator *g = NULL;
    cli_check(mha_generator_create(seed, &g), "generator");
    int32_t *idx = cli_malloc((size_t)R * sizeof(int32_t)), *tgt = cli_malloc((size_t)R * sizeof(int32_t));
    for (int64_t i = 0; i < R; i++) idx[i] = (int32_t)(mha_generator_random64(g) % (uint64_t)V);
    for (int64_t i = 0; i < R; i++) tgt[i] = (int32_t)(mha_generator_random64(g) % (uint64_t)V);
    mha_generator *drop = c->drop_rate > 0.0 ? g : NULL; /* training mode: dropout draws */
    double *ms = cli_malloc((size_t)rounds * 4 * sizeof(double));
    double *t_lb = ms + rounds, *t_opt = ms + 2 * rounds, *t_zero = ms + 3 * rounds;
    float first_loss = 0.0f, last_loss = 0.0f;
    const bool tty = isatty(STDERR_FILENO);
    /* The GEMM probe's operands: the gradient buffer, dead between AdamW's
     * step and the next zero_grad (no memory of its own at peak), or its
     * own where the gradients are fewer floats than it needs. */
    sgemm_probe probe;
    probe_init(&probe, R, E, V);
    size_t n_grad = 0;
    float *probe_buf = mha_params_grad_buffer(ps, &n_grad), *probe_own = NULL;
    if (!probe_buf) cli_check(MHA_ERR_NOMEM, "gradients");
    if (n_grad < 3 * probe.most) probe_buf = probe_own = cli_malloc(3 * probe.most * sizeof(float));
    for (int64_t r = -1; r < rounds; r++) { /* r = -1: warm-up (the tape and the state pages) */
        const double t0 = now_s();
        cli_check(mha_params_zero_grad(ps), "zero_grad");
        const double t1 = now_s();
        float loss;
        cli_check(mha_gpt_loss_backward(m, &loss, NULL, idx, tgt, B, T, drop, tape), "step");
        const double t2 = now_s();
        cli_check(mha_optimizer_step(opt), "AdamW");
        const double t3 = now_s();
        if (r < 0) first_loss = loss;
        last_loss = loss;
        if (r >= 0) ms[r] = (t3 - t0) * 1e3, t_zero[r] = (t1 - t0) * 1e3, t_lb[r] = (t2 - t1) * 1e3, t_opt[r] = (t3 - t2) * 1e3;
        if (tty && !json)
            fprintf(stderr, "\r%s %lld/%lld: %.0f ms (loss %.4f)   ", r < 0 ? "warm-up" : "step", (long long)(r < 0 ? 1 : r + 1),
                    (long long)(r < 0 ? 1 : rounds), (t3 - t0) * 1e3, (double)loss);
        probe_round(&probe, probe_buf); /* the gradients are zeroed at the next step's start */
    }
    free(probe_own);
    if (tty && !json) fprintf(stderr, "\n");
    const double peak = cli_peak_rss_mib(); /* before the GEMM timing's buffers */
    const double tape_mib = (double)mha_gpt_tape_bytes(tape) / 1048576.0;
    for (int k = 0; k < 4; k++) qsort(ms + k * rounds, (size_t)rounds, sizeof(double), cmp_ms);
    /* The work counted: 6 x (parameters, the head as its own V x E matrix
     * even when tied to tok_emb) x tokens, the forward's 2 and the
     * backward's 4 flops per weight and token; plus the attention core's
     * useful products over the causal half of the scores, forward (QK^T,
     * PV) and backward (dP, dV, dQ, dK): 3 x 4 x pairs x head_dim per head. */
    const bool tied = mha_gpt_head_tied(m) != 0;
    const double P = (double)mha_params_scalars(ps), P_head = P + (tied ? (double)V * (double)E : 0.0);
    const double pairs = (double)T * (double)(T + 1) / 2.0;
    const double attn_gflop = 12.0 * (double)B * (double)L * pairs * (double)E * 1e-9;
    const double gflop = 6.0 * P_head * (double)R * 1e-9 + attn_gflop;
    /* the GEMMs alone: the blocks' weights and the head, no embeddings */
    const double gemm_gflop = 6.0 * (double)R * ((double)L * 12.0 * (double)E * (double)E + (double)V * (double)E) * 1e-9;
    char shape[96] = "";
    const double sgemm = probe_best(&probe, shape, sizeof shape);
    const double bound_ms = gflop / sgemm * 1e3, mn = ms[0], med = median_of(ms, rounds);
    /* the bound of the work a GEMM does (tok_emb's share of 6 x P is a lookup) */
    const double gemm_bound_ms = (gemm_gflop + attn_gflop) / sgemm * 1e3;
    const double weights_mib = P * 4.0 / 1048576.0, base_mib = 4.0 * weights_mib + tape_mib;
    printf("GPTModel(vocab %lld, context %lld, emb %lld, heads %lld, layers %lld, drop_rate %g%s), %.1fM parameters, %s\n",
           (long long)V, (long long)c->context_length, (long long)E, (long long)c->n_heads, (long long)L, c->drop_rate,
           tied ? ", head tied" : "", P * 1e-6, weights ? weights : "seeded");
    printf("training step at batch %lld x %lld tokens (%s), AdamW lr 4e-4 wd 0.1; threads %d, kernels %s, "
           "projections %s\n", (long long)B, (long long)T, drop ? "training mode, dropout" : "no dropout",
           mha_runtime_threads(), mha_runtime_isa(), mha_runtime_blas());
    printf("step: min %.1f ms, median %.1f ms over %lld steps (1 warm-up); loss %.6f first, %.6f last\n", mn, med,
           (long long)rounds, (double)first_loss, (double)last_loss);
    printf("  zero_grad min %.1f ms, forward + cross-entropy + backward min %.1f ms, AdamW min %.1f ms\n", t_zero[0],
           t_lb[0], t_opt[0]);
    printf("work: %.1f GFLOP (6 x %.1fM x %lld tokens + attention %.2f; the GEMMs alone %.1f) -> %.1f GFLOP/s at the min\n",
           gflop, P_head * 1e-6, (long long)R, attn_gflop, gemm_gflop, gflop / mn * 1e3);
    printf("bound: %.1f ms at sgemm's best %.1f GFLOP/s (%s); fraction of the bound %.3f at the min, %.3f at the median\n",
           bound_ms, sgemm, shape, bound_ms / mn, bound_ms / med);
    printf("the GEMMs' and the attention's work alone at that rate: %.1f ms, fraction %.3f at the min\n", gemm_bound_ms,
           gemm_bound_ms / mn);
    printf("peak resident memory %.1f MiB (weights + gradients + AdamW's 2 states %.1f + tape %.1f = %.1f, ratio %.2f)\n",
           peak, 4.0 * weights_mib, tape_mib, base_mib, peak / base_mib);
    if (json)
        printf("{\"batch\":%lld,\"tokens\":%lld,\"threads\":%d,\"params\":%.0f,\"tied\":%s,\"drop_rate\":%g,"
               "\"min_ms\":%.3f,\"median_ms\":%.3f,\"zero_grad_min_ms\":%.3f,\"loss_backward_min_ms\":%.3f,"
               "\"adamw_min_ms\":%.3f,\"gflop\":%.6f,\"attention_gflop\":%.6f,\"gemm_gflop\":%.6f,\"gflops\":%.3f,"
               "\"peak_rss_mib\":%.1f,\"baseline_mib\":%.1f,\"sgemm_gflops\":%.3f,\"sgemm_shape\":\"%s\","
               "\"bound_ms\":%.3f,\"fraction_of_bound\":%.4f,\"gemm_bound_ms\":%.3f,\"fraction_of_gemm_bound\":%.4f,"
               "\"loss\":%.9g,\"last_loss\":%.9g,\"isa\":\"%s\",\"blas\":\"%s\"}\n",
               (long long)B, (long long)T, mha_runtime_threads(), P, tied ? "true" : "false", c->drop_rate, mn, med,
               t_zero[0], t_lb[0], t_opt[0], gflop, attn_gflop, gemm_gflop, gflop / mn * 1e3, peak, base_mib, sgemm, shape,
               bound_ms, bound_ms / mn, gemm_bound_ms, gemm_bound_ms / mn, (double)first_loss, (double)last_loss,
               mha_runtime_isa(), mha_runtime_blas());
    free(ms), free(idx), free(tgt);
    mha_generator_free(g);
    mha_gpt_tape_free(tape);
    mha_optimizer_free(opt);
    mha_gpt_free(m);
    return 0;
}

/* One decode timing: mha_gpt_generate (greedy, with the KV cache) after a
 * 4-token prompt, timed from its first new token (the prompt's step) to its
 * last: N single-token steps, each a cache feed and the pick of the next
 * id, as `mha generate` runs them; their seconds. */
typedef struct {
    double t_first;
    int64_t seen;
} decode_clock;

static void decode_tick(void *user, int32_t id) {
    (void)id;
    decode_clock *c = user;
    if (c->seen++ == 0) c->t_first = now_s();
}

static double time_decode(mha_gpt *m, int32_t *out, const int32_t prompt[4], int64_t N) {
    mha_generate_opts o;
    mha_generate_opts_init(&o);
    o.max_new_tokens = N + 1;
    o.eos_id = -1;
    decode_clock c = {0.0, 0};
    int64_t n_out = 0;
    cli_check(mha_gpt_generate(m, out, &n_out, prompt, 4, &o, decode_tick, &c), "decode");
    return now_s() - c.t_first;
}

int mha_cli_bench_gpt(int argc, char **argv) {
    bool step = false, help = false;
    for (int i = 3; i < argc; i++) {
        step = step || !strcmp(argv[i], "--train-step");
        help = help || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
    }
    if (step && !help) return bench_train_step(argc, argv);
    const char *weights = NULL;
    int64_t T = 1024, N = 64, rounds = 3;
    bool json = false, tie = false, cfg_opts = false;
    mha_dtype dtype = MHA_DTYPE_F32, against = MHA_DTYPE_F32;
    bool have_against = false;
    uint64_t seed = 123;
    mha_gpt_config cfg;
    mha_gpt_config_init(&cfg, MHA_GPT_MODEL);
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: mha bench GPTModel [--weights FILE | --size 124M|medium|large|xl, init GPTModel's\n"
                 "                          options, --tie-head, --seed 123] [--prompt-tokens T] [--decode N]\n"
                 "                          [--rounds R] [--dtype f32|bf16|f16] [--against f32|bf16|f16]\n"
                 "                          [--threads K] [--json]\n"
                 "       mha bench GPTModel --train-step [--batch 2] [--tokens 256] [--weights FILE |\n"
                 "                          --size, init GPTModel's options, --tie-head, --seed 123]\n"
                 "                          [--rounds 5] [--threads K] [--json]\n\n"
                 "Times a GPTModel at batch 1: FILE (the book's names or Hugging Face GPT-2's), or\n"
                 "GPTModel(cfg) drawn as torch.manual_seed(S), cfg GPT_CONFIG_124M changed by --size\n"
                 "(GPT-2 medium 1024/16/24, large 1280/20/36, xl 1600/25/48 as emb_dim/n_heads/n_layers)\n"
                 "and init GPTModel's options, in the order given; --tie-head: out_head = tok_emb.\n"
                 "Prefill: a T-token prompt (default 1024) in one forward up to the last position's\n"
                 "logits (filling the KV cache); decode: N single-token greedy steps with the KV cache\n"
                 "after a 4-token prompt (default 64). The best of R rounds (default 3). The decode's\n"
                 "bound: the weights one step reads (all but the embeddings' lookups; a tied head\n"
                 "counted) at the best of 2 streaming reads of them before the rounds and 2 after each\n"
                 "(threads as decoding's). --json ends with one line: prefill_tokens_per_s,\n"
                 "decode_tokens_per_s, decode_ms_per_token, stream_read_gbps (the best read),\n"
                 "stream_read_gbps_worst, read_mib (per token), weights_read_ms, decode_over_read,\n"
                 "peak_rss_mib, threads, dtype, ...\n"
                 "--dtype bf16|f16: the weight matrices held in 16 bits (FILE loaded as such; the seeded\n"
                 "model's drawn one at a time in F32 and rounded, as mha convert rounds them); the bound\n"
                 "is then the 16-bit bytes a step reads.\n"
                 "--against D: the same model also held as dtype D, its decode timed in every round beside\n"
                 "the first's, the order swapped each round, so that both see the host alike (its speed\n"
                 "moves by up to 2x from minute to minute on shared VMs): prints D's decode and the\n"
                 "speedup over it: the median of the rounds' ratios (each round's two decodes ran\n"
                 "back to back) and the ratio of the best rounds (JSON against_dtype,\n"
                 "against_decode_ms_per_token, speedup_over_against, speedup_over_against_best). Both\n"
                 "models are then resident: peak_rss_mib counts the two.\n\n"
                 "--train-step times R training steps (after one warm-up) on random tokens: zero_grad, the\n"
                 "forward with a tape in training mode (the model's drop_rate), the mean cross-entropy, the\n"
                 "backward and AdamW (lr 4e-4, weight decay 0.1). The model: FILE, or GPT_CONFIG_124M drawn\n"
                 "as torch.manual_seed(S); GPTModel(cfg) with init GPTModel's options changing cfg\n"
                 "(--context-length 256 for the book's chapter 5 model), --tie-head for out_head = tok_emb.\n"
                 "Counted work (gflop): 6 x parameters x tokens (2 flops per weight and token forward, 4\n"
                 "backward; a tied head counted twice, as tok_emb and as the head's GEMMs) + the attention\n"
                 "core's QK^T and PV forward and dP, dV, dQ, dK backward over the causal half of the\n"
                 "scores. The bound: gflop at the best sgemm rate of the step's GEMM shapes, each timed\n"
                 "once after every step (under the steps' load). Prints min and median step time, gflops,\n"
                 "bound_ms, fraction_of_bound (bound / min), peak_rss_mib, and gemm_bound_ms: only the\n"
                 "GEMMs' and the attention's work at that rate (tok_emb's 6 x V x E is a lookup, no GEMM);\n"
                 "--json ends with one line holding them.");
            return 0;
        } else if (!strcmp(a, "--weights")) {
            if (!v) cli_die("--weights needs a file");
            weights = v, i++;
        } else if (!strcmp(a, "--prompt-tokens")) {
            T = cli_parse_int(a, v, 1, 1 << 24), i++;
        } else if (!strcmp(a, "--decode")) {
            N = cli_parse_int(a, v, 1, 1 << 24), i++;
        } else if (!strcmp(a, "--rounds")) {
            rounds = cli_parse_int(a, v, 1, 1000), i++;
        } else if (!strcmp(a, "--threads")) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else if (!strcmp(a, "--seed")) {
            seed = cli_parse_seed(a, v), i++;
        } else if (!strcmp(a, "--tie-head")) {
            tie = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (cli_parse_gpt_opt(&cfg, argc, argv, &i) || parse_size(&cfg, argc, argv, &i)) {
            cfg_opts = true; /* a cfg key of init GPTModel */
        } else if (!strcmp(a, "--dtype")) {
            dtype = cli_parse_dtype(a, v), i++;
        } else if (!strcmp(a, "--against")) {
            against = cli_parse_dtype(a, v), have_against = true, i++;
        } else {
            cli_die("bench GPTModel: unknown option '%s' (see mha bench GPTModel --help)", a);
        }
    }
    if (weights && (cfg_opts || tie))
        cli_die("bench GPTModel: the model options change the seeded model, not --weights FILE");
    const double t_load = now_s();
    mha_gpt *m = bench_model(weights, &cfg, tie, seed, dtype);
    const double load_s = now_s() - t_load;
    mha_gpt *m2 = have_against ? bench_model(weights, &cfg, tie, seed, against) : NULL;
    const mha_gpt_config *c = mha_gpt_config_of(m);
    if (T > c->context_length) cli_die("--prompt-tokens %lld exceeds context_length %lld", (long long)T, (long long)c->context_length);
    if (4 + N > c->context_length) cli_die("--decode %lld: 4 + N exceeds context_length %lld", (long long)N, (long long)c->context_length);
    const int64_t V = c->vocab_size;
    int32_t *ids = cli_malloc((size_t)T * sizeof(int32_t));
    mha_generator *g = NULL;
    cli_check(mha_generator_create(1, &g), "generator");
    for (int64_t i = 0; i < T; i++) ids[i] = (int32_t)(mha_generator_random(g) % (uint32_t)V);
    mha_generator_free(g);
    float *logits = cli_malloc((size_t)V * sizeof(float));
    int32_t *dec = cli_malloc((size_t)(4 + N + 1) * sizeof(int32_t)), prompt4[4]; /* a decode's ids */
    for (int i = 0; i < 4; i++) prompt4[i] = ids[i % T];
    /* The read bound moves by up to 2x from run to run on shared VMs: its
     * best over reads spread through the run, beside the decode rounds. */
    read_set rs;
    read_set_init(&rs, m);
    double gbps = 0.0, gbps_worst = INFINITY;
    read_probe(&rs, 2, &gbps, &gbps_worst);
    double best_prefill = INFINITY, best_decode = INFINITY, best_against = INFINITY;
    double *pair = m2 ? cli_malloc((size_t)rounds * sizeof(double)) : NULL; /* each round's speedup */
    for (int64_t r = 0; r < rounds; r++) {
        cli_check(mha_gpt_cache_reset(m), "cache");
        double t0 = now_s();
        cli_check(mha_gpt_cache_feed(m, logits, ids, T), "prefill");
        const double tp = now_s() - t0;
        if (tp < best_prefill) best_prefill = tp;
        /* with --against, the other model's decode first in odd rounds */
        double tb = 0.0;
        if (m2 && r % 2) tb = time_decode(m2, dec, prompt4, N);
        const double td = time_decode(m, dec, prompt4, N);
        if (m2 && r % 2 == 0) tb = time_decode(m2, dec, prompt4, N);
        if (td < best_decode) best_decode = td;
        if (m2) {
            if (tb < best_against) best_against = tb;
            pair[r] = tb / td;
        }
        read_probe(&rs, 2, &gbps, &gbps_worst);
        if (!json && m2)
            fprintf(stderr, "round %lld/%lld: prefill %.3f s, decode %.3f s (%.2f ms/token), %s %.2f ms/token; reads so far "
                    "%.1f-%.1f GB/s\n", (long long)r + 1, (long long)rounds, tp, td, td * 1e3 / (double)N,
                    cli_dtype_name(against), tb * 1e3 / (double)N, gbps_worst, gbps);
        else if (!json)
            fprintf(stderr, "round %lld/%lld: prefill %.3f s, decode %.3f s (%.2f ms/token); reads so far %.1f-%.1f GB/s\n",
                    (long long)r + 1, (long long)rounds, tp, td, td * 1e3 / (double)N, gbps_worst, gbps);
    }
    const double E = (double)c->emb_dim, L = (double)c->n_layers, C = (double)c->context_length;
    const double weights_mib = (double)mha_gpt_weights_bytes(m) / 1048576.0;
    const double kv_mib = L * C * 2.0 * E * 4.0 / 1048576.0;
    const double act_mib = (double)T * (10.0 * E) * 4.0 / 1048576.0 + C * E * 4.0 / 1048576.0 + (double)V * 4.0 / 1048576.0;
    const double read_mib = rs.bytes / 1048576.0, bound_ms = gbps > 0.0 ? rs.bytes / (gbps * 1e9) * 1e3 : 0.0;
    const double decode_ms = best_decode * 1e3 / (double)N;
    free(rs.chunk);
    const double peak = cli_peak_rss_mib();
    char what[96];
    if (!weights)
        snprintf(what, sizeof what, "seeded (seed %llu)%s", (unsigned long long)seed,
                 cfg_opts ? "" : ", GPT_CONFIG_124M");
    printf("GPTModel(vocab %lld, context %lld, emb %lld, heads %lld, layers %lld%s%s), %.1fM parameters, %s\n",
           (long long)c->vocab_size, (long long)c->context_length, (long long)c->emb_dim, (long long)c->n_heads,
           (long long)c->n_layers, c->qkv_bias ? ", qkv_bias" : "", mha_gpt_head_tied(m) ? ", head tied" : "",
           (double)rs.params * 1e-6, weights ? weights : what);
    printf("threads %d, kernels %s, projections %s, weights %s; loaded in %.2f s\n", mha_runtime_threads(),
           mha_runtime_isa(), mha_runtime_blas(), cli_dtype_name(dtype), load_s);
    printf("prefill: %lld tokens in %.3f s = %.1f tokens/s (best of %lld)\n", (long long)T, best_prefill,
           (double)T / best_prefill, (long long)rounds);
    printf("decode: %lld tokens in %.3f s = %.2f tokens/s, %.2f ms/token (best of %lld)\n", (long long)N, best_decode,
           (double)N / best_decode, decode_ms, (long long)rounds);
    printf("streaming read of the %.1f MiB a decode step reads: best %.1f GB/s (worst %.1f, of %lld reads) -> "
           "%.2f ms; decode / that = %.2f\n", read_mib, gbps, gbps_worst, (long long)(2 + 2 * rounds), bound_ms,
           bound_ms > 0.0 ? decode_ms / bound_ms : 0.0);
    const double against_ms = best_against * 1e3 / (double)N;
    double pair_median = 0.0;
    if (m2) {
        qsort(pair, (size_t)rounds, sizeof(double), cmp_ms);
        pair_median = median_of(pair, rounds);
    }
    free(pair);
    if (m2)
        printf("decode as %s, rounds alternated with the above: %.2f ms/token (best of %lld); speedup of %s over %s "
               "%.2fx (the median of the rounds' ratios), %.2fx (of the best rounds)\n", cli_dtype_name(against), against_ms,
               (long long)rounds, cli_dtype_name(dtype), cli_dtype_name(against), pair_median, best_against / best_decode);
    printf("peak resident memory %.1f MiB (weights %.1f + KV cache %.1f + activations %.1f = %.1f, ratio %.2f)%s\n", peak,
           weights_mib, kv_mib, act_mib, weights_mib + kv_mib + act_mib, peak / (weights_mib + kv_mib + act_mib),
           m2 ? "; with the --against model resident too" : "");
    char against_json[192] = "";
    if (m2)
        snprintf(against_json, sizeof against_json,
                 ",\"against_dtype\":\"%s\",\"against_decode_ms_per_token\":%.6f,\"speedup_over_against\":%.4f,"
                 "\"speedup_over_against_best\":%.4f",
                 cli_dtype_name(against), against_ms, pair_median, best_against / best_decode);
    if (json)
        printf("{\"prefill_tokens\":%lld,\"prefill_tokens_per_s\":%.3f,\"decode_tokens\":%lld,\"decode_tokens_per_s\":%.3f,"
               "\"decode_ms_per_token\":%.6f,\"peak_rss_mib\":%.1f,\"weights_mib\":%.1f,\"kv_cache_mib\":%.1f,"
               "\"threads\":%d,\"isa\":\"%s\",\"blas\":\"%s\",\"load_s\":%.3f,\"params\":%lld,\"emb_dim\":%lld,"
               "\"n_layers\":%lld,\"tied\":%s,\"read_mib\":%.4f,\"stream_read_gbps\":%.4f,"
               "\"stream_read_gbps_worst\":%.4f,\"weights_read_ms\":%.6f,\"decode_over_read\":%.4f,\"dtype\":\"%s\"%s}\n",
               (long long)T, (double)T / best_prefill, (long long)N, (double)N / best_decode, decode_ms, peak,
               weights_mib, kv_mib, mha_runtime_threads(), mha_runtime_isa(), mha_runtime_blas(), load_s,
               (long long)rs.params, (long long)c->emb_dim, (long long)c->n_layers,
               mha_gpt_head_tied(m) ? "true" : "false", read_mib, gbps, gbps_worst, bound_ms,
               bound_ms > 0.0 ? decode_ms / bound_ms : 0.0, cli_dtype_name(dtype), against_json);
    free(ids);
    free(logits);
    free(dec);
    mha_gpt_free(m2);
    mha_gpt_free(m);
    return 0;
}
