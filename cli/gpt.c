/* gpt.c — the chapter 4 commands: mha init GPTModel|TransformerBlock,
 * mha run on their files, mha generate. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        const int64_t big = (int64_t)1 << 24;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: mha init GPTModel|TransformerBlock [--vocab-size 50257] [--context-length 1024]\n"
                 "                [--emb-dim 768] [--n-heads 12] [--n-layers 12] [--drop-rate 0.1]\n"
                 "                [--qkv-bias false] --seed S -o FILE\n\n"
                 "Writes the book's GPTModel(cfg) (or TransformerBlock(cfg)) as PyTorch initialises it after\n"
                 "torch.manual_seed(S), bit for bit, under its state_dict() names (the att.mask buffers\n"
                 "left out), with the cfg keys in __metadata__. Defaults: GPT_CONFIG_124M.");
            return 0;
        } else if (!strcmp(a, "--vocab-size")) {
            c.vocab_size = cli_parse_int(a, v, 1, INT32_MAX), i++;
        } else if (!strcmp(a, "--context-length")) {
            c.context_length = cli_parse_int(a, v, 1, big), i++;
        } else if (!strcmp(a, "--emb-dim")) {
            c.emb_dim = cli_parse_int(a, v, 1, big), i++;
        } else if (!strcmp(a, "--n-heads")) {
            c.n_heads = cli_parse_int(a, v, 1, big), i++;
        } else if (!strcmp(a, "--n-layers")) {
            c.n_layers = cli_parse_int(a, v, 1, 4096), i++;
        } else if (!strcmp(a, "--drop-rate")) {
            c.drop_rate = cli_parse_prob(a, v), i++;
        } else if (!strcmp(a, "--qkv-bias")) {
            c.qkv_bias = parse_bool(a, v), i++;
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

int mha_cli_run_gpt(const mha_st *wst, const char *weights, const char *in, const char *out, bool train,
                    uint64_t seed) {
    mha_gpt *m = NULL;
    cli_check(mha_gpt_from_st(wst, &m), weights);
    const mha_gpt_config *c = mha_gpt_get_config(m);
    mha_st *st = NULL;
    cli_check(mha_st_read_file(in, &st), in);
    mha_generator *g = NULL;
    if (train) cli_check(mha_generator_create(seed, &g), "generator");
    const char *meta[2] = {"module", mha_gpt_kind_name(c->kind)};
    mha_st_tensor t;
    if (c->kind == MHA_GPT_MODEL) {
        if (mha_st_find(st, "idx", &t) != MHA_OK) cli_die("%s: no tensor 'idx' in the input file", in);
        if (t.ndim != 2) cli_die("%s: idx must have 2 dimensions (b, T), got %d", in, t.ndim);
        if (t.dtype != MHA_DTYPE_I64 && t.dtype != MHA_DTYPE_I32)
            cli_die("%s: idx must be I64 or I32, got %s", in, mha_dtype_name(t.dtype));
        const int64_t B = t.shape[0], T = t.shape[1], V = c->vocab_size;
        if (B == 0 || T == 0) cli_die("%s: idx has an empty dimension", in);
        if (T > c->context_length)
            cli_die("%s: %lld tokens exceed context_length %lld", in, (long long)T, (long long)c->context_length);
        if ((uint64_t)B * (uint64_t)T > ((uint64_t)1 << 40) / (uint64_t)V) cli_die("%s: logits would be too large", in);
        int32_t *idx = cli_malloc(t.numel * sizeof(int32_t));
        for (size_t i = 0; i < t.numel; i++) {
            int64_t v;
            if (t.dtype == MHA_DTYPE_I64) memcpy(&v, (const char *)t.data + 8 * i, 8);
            else {
                int32_t v32;
                memcpy(&v32, (const char *)t.data + 4 * i, 4);
                v = v32;
            }
            if (v < 0 || v >= V)
                cli_die("%s: idx holds %lld at (%zu, %zu), outside the vocabulary [0, %lld)", in, (long long)v,
                        i / (size_t)T, i % (size_t)T, (long long)V);
            idx[i] = (int32_t)v;
        }
        float *logits = cli_malloc((size_t)(B * T * V) * sizeof(float));
        cli_check(mha_gpt_forward(m, logits, idx, B, T, 0, g), "forward");
        const int64_t shape[3] = {B, T, V};
        const mha_st_entry e = {"logits", MHA_DTYPE_F32, 3, shape, logits};
        cli_check(mha_st_write_file(out, &e, 1, meta, 1), out);
        free(idx);
        free(logits);
    } else {
        if (mha_st_find(st, "x", &t) != MHA_OK) cli_die("%s: no tensor 'x' in the input file", in);
        if (t.ndim != 3) cli_die("%s: x must have 3 dimensions (b, T, emb_dim), got %d", in, t.ndim);
        const int64_t B = t.shape[0], T = t.shape[1];
        if (t.shape[2] != c->emb_dim)
            cli_die("%s: x has width %lld but emb_dim is %lld", in, (long long)t.shape[2], (long long)c->emb_dim);
        if (B == 0 || T == 0) cli_die("%s: x has an empty dimension", in);
        float *x = cli_malloc(t.numel * sizeof(float));
        cli_check(mha_st_tensor_to_f32(&t, x, t.numel), in);
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

/* ---- mha generate -------------------------------------------------------- */

/* "15496,11,314" -> ids; strict: digits only, no empty items. */
int32_t *cli_parse_ids(const char *opt, const char *s, int64_t *n) {
    if (!s || !*s) cli_die("%s needs a comma-separated list of token ids", opt);
    int64_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = cli_malloc((size_t)cap * sizeof(int32_t));
    int64_t k = 0;
    const char *p = s;
    for (;;) {
        const char *q = p;
        int64_t v = 0;
        while (*q >= '0' && *q <= '9') {
            v = v * 10 + (*q - '0');
            if (v > INT32_MAX) cli_die("%s: id '%.*s' is too large", opt, (int)(q - p + 1), p);
            q++;
        }
        if (q == p || (*q && *q != ','))
            cli_die("%s: '%s' is not a comma-separated list of token ids (at character %lld)", opt, s,
                    (long long)(q - s + 1));
        ids[k++] = (int32_t)v;
        if (!*q) break;
        p = q + 1;
    }
    *n = k;
    return ids;
}

typedef struct {
    bool quiet;
    int64_t count;
} stream_state;

static void stream_id(void *user, int32_t id) {
    stream_state *s = user;
    if (!s->quiet) {
        printf("%s%d", s->count ? "," : "", id);
        fflush(stdout);
    }
    s->count++;
}

int mha_cli_generate(int argc, char **argv) {
    const char *weights = NULL, *ids_s = NULL, *prompt = NULL;
    mha_generate_opts o;
    mha_generate_opts_init(&o);
    bool json = false, have_seed = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: mha generate WEIGHTS (--prompt TEXT | --ids 15496,11,314,716)\n"
                 "                    [--max-new-tokens N] [--no-kv-cache] [--temperature T --top-k K --seed S]\n"
                 "                    [--json] [--threads N]\n\n"
                 "Continues the prompt with a GPTModel (a file of mha init GPTModel, or Hugging Face GPT-2\n"
                 "weights): greedy by default (the book's generate_text_simple), with a KV cache unless\n"
                 "--no-kv-cache (the same tokens); --temperature/--top-k sample as chapter 5's generate\n"
                 "after torch.manual_seed(S). Prints the ids as they come; --json ends with one line\n"
                 "{\"ids\": [...], \"text\": ..., \"tokens_per_s\": ...}.");
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
    if (prompt) cli_die("generate: --prompt needs the tokenizer, which this build lacks; use --ids");
    int64_t n_prompt = 0;
    int32_t *ids = cli_parse_ids("--ids", ids_s, &n_prompt);
    mha_gpt *m = NULL;
    cli_check(mha_gpt_load(weights, &m), weights);
    const mha_gpt_config *c = mha_gpt_get_config(m);
    if (c->kind != MHA_GPT_MODEL) cli_die("%s: a %s does not generate (a GPTModel does)", weights, mha_gpt_kind_name(c->kind));
    for (int64_t i = 0; i < n_prompt; i++)
        if (ids[i] >= c->vocab_size)
            cli_die("--ids: id %d is outside the vocabulary [0, %lld)", ids[i], (long long)c->vocab_size);
    int32_t *out = cli_malloc((size_t)(n_prompt + o.max_new_tokens) * sizeof(int32_t));
    int64_t n = 0;
    stream_state ss = {.quiet = json, .count = 0};
    const double t0 = now_s();
    cli_check(mha_gpt_generate(m, out, &n, ids, n_prompt, &o, stream_id, &ss), "generate");
    const double dt = now_s() - t0;
    if (!json) {
        printf("\n");
        fprintf(stderr, "%lld new tokens in %.2f s (%.1f tokens/s)\n", (long long)(n - n_prompt), dt,
                (double)(n - n_prompt) / dt);
    } else {
        printf("{\"ids\": [");
        for (int64_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", out[i]);
        printf("], \"text\": null, \"tokens_per_s\": %.3f}\n", (double)(n - n_prompt) / dt);
    }
    free(ids);
    free(out);
    mha_gpt_free(m);
    return 0;
}
