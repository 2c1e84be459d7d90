/* mha — the command-line tool: the book's demo, a traced forward pass,
 * PyTorch-identical init, running saved modules, and benchmarks.
 * The only code in the project that prints or exits. */
#include "cli.h"
#include "mha.h"
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static bool is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* ---- PyTorch-style tensor printing --------------------------------------- */

/* Prints data (ndim <= 4) as torch prints a float tensor with 4 decimals:
 * elements right-aligned to a common width, nested brackets, blank lines
 * between the blocks of 3-D and larger tensors. */
static void print_rec(FILE *f, const float *d, int ndim, const int64_t *shape, int width, int indent,
                      int depth) {
    fputc('[', f);
    if (ndim == 1) {
        for (int64_t i = 0; i < shape[0]; i++) {
            char buf[64];
            float v = d[i] == 0.0f ? 0.0f : d[i]; /* no "-0.0000" for exact zeros */
            snprintf(buf, sizeof buf, "%.4f", (double)v);
            fprintf(f, "%s%*s", i ? ", " : "", width, buf);
        }
        fputc(']', f);
        return;
    }
    int64_t inner = 1;
    for (int k = 1; k < ndim; k++) inner *= shape[k];
    for (int64_t i = 0; i < shape[0]; i++) {
        if (i) {
            /* torch: ',' + '\n' * (dim - 1) + ' ' * (indent + 1) */
            fputc(',', f);
            for (int k = 1; k < ndim; k++) fputc('\n', f);
            fprintf(f, "%*s", indent + depth + 1, "");
        }
        print_rec(f, d + i * inner, ndim - 1, shape + 1, width, indent, depth + 1);
    }
    fputc(']', f);
}

static void print_tensor(FILE *f, const char *prefix, const float *d, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int k = 0; k < ndim; k++) n *= shape[k];
    int width = 1;
    for (int64_t i = 0; i < n; i++) {
        char buf[64];
        float v = d[i] == 0.0f ? 0.0f : d[i];
        int len = snprintf(buf, sizeof buf, "%.4f", (double)v);
        if (len > width) width = len;
    }
    fputs(prefix, f);
    fputs("tensor(", f);
    print_rec(f, d, ndim, shape, width, (int)strlen(prefix) + 7, 0);
    fputs(")\n", f);
}

/* ---- the running example ------------------------------------------------- */

static const float book_inputs[6][3] = {
    {0.43f, 0.15f, 0.89f}, /* Your    */
    {0.55f, 0.87f, 0.66f}, /* journey */
    {0.57f, 0.85f, 0.64f}, /* starts  */
    {0.22f, 0.58f, 0.33f}, /* with    */
    {0.77f, 0.25f, 0.10f}, /* one     */
    {0.05f, 0.80f, 0.55f}, /* step    */
};
static const char *const book_tokens[6] = {"Your", "journey", "starts", "with", "one", "step"};

static mha_module *seeded(mha_kind kind, int64_t d_in, int64_t d_out, int64_t ctx, double dropout,
                          int64_t heads, uint64_t seed) {
    mha_config c;
    mha_config_init(&c, kind);
    c.d_in = d_in;
    c.d_out = d_out;
    c.context_length = ctx;
    c.dropout = dropout;
    c.num_heads = heads;
    mha_module *m = NULL;
    cli_check(mha_module_create_seeded(&c, seed, &m), mha_kind_name(kind));
    return m;
}

static void forward(mha_module *m, float *y, const float *x, int64_t B, int64_t T) {
    cli_check(mha_module_forward(m, y, x, B, T, NULL, NULL, 0), "forward");
}

static void heading(const char *s) { printf("\n== %s\n", s); }

/* Trace callback for the demo: keeps the masked softmax weights. */
static void grab_weights(void *user, const char *step, const char *expr, int ndim, const int64_t *shape,
                  const float *data) {
    (void)expr;
    (void)ndim;
    if (strcmp(step, "softmax") == 0) memcpy(user, data, (size_t)(shape[2] * shape[3]) * sizeof(float));
}

static int cmd_demo(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        if (is_help(argv[i])) {
            puts("usage: mha demo\n\n"
                 "Runs chapter 3's running example (\"Your journey starts with one step\") through\n"
                 "every rung: simplified self-attention, SelfAttention_v1/v2, the causal mask and\n"
                 "dropout, CausalAttention, MultiHeadAttentionWrapper and MultiHeadAttention,\n"
                 "seeded as in the book, printed to 4 decimals as PyTorch prints them.");
            return 0;
        }
        cli_die("demo: unexpected argument '%s' (see mha demo --help)", argv[i]);
    }
    const float *x = &book_inputs[0][0];
    float batch[2 * 6 * 3];
    memcpy(batch, x, sizeof book_inputs);
    memcpy(batch + 18, x, sizeof book_inputs);
    int64_t s63[2] = {6, 3}, s66[2] = {6, 6}, s6[1] = {6}, s3[1] = {3}, s62[2] = {6, 2}, s2[1] = {2};

    printf("mha %s: chapter 3 of \"Build a Large Language Model (From Scratch)\", computed in C\n",
           mha_version());
    heading("inputs: \"Your journey starts with one step\" (6 tokens, d_in = 3)");
    print_tensor(stdout, "inputs = ", x, 2, s63);

    heading("3.3 simplified self-attention (no trainable weights)");
    float w[36], ctx[18], tmp[6];
    cli_check(mha_simple_attention_forward(ctx, w, x, 6, 3), "simplified attention");
    for (int j = 0; j < 6; j++) {
        float dot = 0.0f;
        for (int d = 0; d < 3; d++) dot += book_inputs[1][d] * book_inputs[j][d];
        tmp[j] = dot;
    }
    print_tensor(stdout, "attention scores of query x2 = ", tmp, 1, s6);
    print_tensor(stdout, "attention weights of query x2 = ", w + 6, 1, s6);
    print_tensor(stdout, "context vector z2 = ", ctx + 3, 1, s3);
    print_tensor(stdout, "attn_weights = ", w, 2, s66);
    print_tensor(stdout, "all_context_vecs = ", ctx, 2, s63);

    heading("3.4.1 SelfAttention_v1(d_in=3, d_out=2), torch.manual_seed(123)");
    mha_module *m = seeded(MHA_SELF_ATTENTION_V1, 3, 2, 0, 0.0, 1, 123);
    mha_param wq;
    cli_check(mha_params_find(mha_module_params(m), "W_query", &wq), "W_query");
    for (int j = 0; j < 2; j++) {
        float dot = 0.0f;
        for (int d = 0; d < 3; d++) dot += book_inputs[1][d] * wq.data[d * 2 + j];
        tmp[j] = dot;
    }
    print_tensor(stdout, "query_2 = x_2 @ W_query = ", tmp, 1, s2);
    forward(m, ctx, x, 1, 6);
    print_tensor(stdout, "sa_v1(inputs) = ", ctx, 2, s62);
    mha_module_free(m);

    heading("3.4.2 SelfAttention_v2(d_in=3, d_out=2), torch.manual_seed(789)");
    m = seeded(MHA_SELF_ATTENTION_V2, 3, 2, 0, 0.0, 1, 789);
    forward(m, ctx, x, 1, 6);
    print_tensor(stdout, "sa_v2(inputs) = ", ctx, 2, s62);

    heading("3.5.1 the causal mask on sa_v2's attention weights");
    {
        /* A one-head MultiHeadAttention with sa_v2's query/key weights has
         * exactly CausalAttention's weights (scale 1/sqrt(2)); the traced
         * forward hands them over. */
        mha_module *one = seeded(MHA_MULTI_HEAD_ATTENTION, 3, 2, 6, 0.0, 1, 0);
        static const char *const names[2] = {"W_query.weight", "W_key.weight"};
        for (int k = 0; k < 2; k++) {
            mha_param src, dst;
            cli_check(mha_params_find(mha_module_params(m), names[k], &src), names[k]);
            cli_check(mha_params_find(mha_module_params(one), names[k], &dst), names[k]);
            memcpy(dst.data, src.data, src.numel * sizeof(float));
        }
        float masked[36];
        float y[12];
        cli_check(mha_module_forward_traced(one, y, x, 1, 6, NULL, grab_weights, masked), "masked weights");
        print_tensor(stdout, "masked_simple_norm = ", masked, 2, s66);
        mha_module_free(one);
    }
    mha_module_free(m);

    heading("3.5.2 dropout: torch.manual_seed(123); nn.Dropout(0.5)(torch.ones(6, 6))");
    {
        mha_generator *g = NULL;
        cli_check(mha_generator_create(123, &g), "generator");
        float ones[36];
        for (int i = 0; i < 36; i++) ones[i] = 1.0f;
        cli_check(mha_generator_dropout(g, ones, ones, 36, 0.5), "dropout");
        print_tensor(stdout, "", ones, 2, s66);
        mha_generator_free(g);
    }

    heading("3.5.3 CausalAttention(d_in=3, d_out=2, context_length=6, dropout=0.0), torch.manual_seed(123)");
    float y[2 * 6 * 4];
    int64_t s262[3] = {2, 6, 2}, s264[3] = {2, 6, 4};
    m = seeded(MHA_CAUSAL_ATTENTION, 3, 2, 6, 0.0, 1, 123);
    forward(m, y, batch, 2, 6);
    printf("context_vecs.shape: torch.Size([2, 6, 2])\n");
    print_tensor(stdout, "", y, 3, s262);
    mha_module_free(m);

    heading("3.6.1 MultiHeadAttentionWrapper(3, 2, 6, 0.0, num_heads=2), torch.manual_seed(123)");
    m = seeded(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 2, 6, 0.0, 2, 123);
    forward(m, y, batch, 2, 6);
    print_tensor(stdout, "", y, 3, s264);
    printf("context_vecs.shape: torch.Size([2, 6, 4])\n\n");
    printf("context_vecs[0] (6x4): head 1 | head 2\n");
    for (int t = 0; t < 6; t++) {
        printf("  %-8s", book_tokens[t]);
        for (int c = 0; c < 4; c++) printf("%s%8.4f", c == 2 ? "  |" : "", (double)y[t * 4 + c]);
        putchar('\n');
    }
    printf("  %-8s%8s%8s  |%8s%8s\n", "", "h1.d0", "h1.d1", "h2.d0", "h2.d1");
    mha_module_free(m);

    heading("3.6.2 MultiHeadAttention(3, 2, 6, 0.0, num_heads=2), torch.manual_seed(123)");
    m = seeded(MHA_MULTI_HEAD_ATTENTION, 3, 2, 6, 0.0, 2, 123);
    forward(m, y, batch, 2, 6);
    print_tensor(stdout, "", y, 3, s262);
    printf("context_vecs.shape: torch.Size([2, 6, 2])\n");
    mha_module_free(m);

    heading("GPT-2 size: MultiHeadAttention(768, 768, 1024, 0.0, num_heads=12)");
    m = seeded(MHA_MULTI_HEAD_ATTENTION, 768, 768, 1024, 0.0, 12, 123);
    long long n = (long long)mha_params_scalars(mha_module_params(m));
    printf("parameters: %lld,%03lld,%03lld\n", n / 1000000, n / 1000 % 1000, n % 1000);
    mha_module_free(m);
    return 0;
}


/* ---- shared module options ------------------------------------------------ */

/* ---- mha trace ------------------------------------------------------------- */

typedef struct {
    int64_t max_values;
    int n;
    float *weights; /* (H, T, T): the first sequence's softmax weights, for --svg */
} trace_state;

static void trace_step(void *user, const char *step, const char *expr, int ndim, const int64_t *shape,
                       const float *data) {
    trace_state *ts = user;
    int64_t n = 1;
    if (ts->weights && strcmp(step, "softmax") == 0 && ndim == 4) /* (B, H, T, T): keep b = 0 */
        memcpy(ts->weights, data, (size_t)(shape[1] * shape[2] * shape[3]) * sizeof(float));
    printf("\n[%d] %s: %s\n    shape (", ++ts->n, step, expr);
    for (int k = 0; k < ndim; k++) {
        printf("%s%lld", k ? ", " : "", (long long)shape[k]);
        n *= shape[k];
    }
    printf(")\n");
    if (n <= ts->max_values) {
        print_tensor(stdout, "", data, ndim, shape);
    } else {
        double lo = INFINITY, hi = -INFINITY, sum = 0.0;
        int64_t finite = 0;
        for (int64_t i = 0; i < n; i++) {
            const double v = data[i];
            if (!isfinite(v)) continue;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sum += v;
            finite++;
        }
        printf("    %lld values: min %.4f, max %.4f, mean %.4f", (long long)n, lo, hi,
               finite ? sum / (double)finite : 0.0);
        if (finite < n) printf(" over the %lld finite ones (%lld masked: -inf)", (long long)finite, (long long)(n - finite));
        printf("\n");
    }
}

static int cmd_trace(int argc, char **argv) {
    cli_module_opts o = {0};
    mha_config_init(&o.cfg, MHA_MULTI_HEAD_ATTENTION);
    o.cfg.d_in = 3;
    o.cfg.d_out = 2;
    o.cfg.num_heads = 2;
    o.seed = 123;
    int64_t B = 2, T = 6, max_values = 200;
    bool train = false, custom = false;
    const char *svg = NULL, *labels = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (is_help(a)) {
            puts("usage: mha trace [--batch B] [--tokens T] [--d-in N] [--d-out N] [--num-heads H]\n"
                 "                 [--context-length N] [--dropout P] [--qkv-bias] [--seed S]\n"
                 "                 [--train] [--max-values N] [--svg FILE [--labels \"W1 W2 ...\"]]\n\n"
                 "Follows one tensor through MultiHeadAttention's forward pass: project, view,\n"
                 "transpose, scores, mask, scale + softmax, dropout, context, transpose back,\n"
                 "concatenate, out_proj; each step with its shape and, when it has at most\n"
                 "--max-values elements (default 200), its values.\n\n"
                 "Defaults are the book's running example: b=2, T=6, d_in=3, d_out=2, 2 heads,\n"
                 "seed 123, the input \"Your journey starts with one step\" twice. With other\n"
                 "sizes the input is torch.rand(b, T, d_in) drawn right after the module's init\n"
                 "from the same seeded generator. context_length defaults to T. --train applies\n"
                 "dropout with PyTorch's mask, drawn after the input.\n\n"
                 "--svg FILE also draws each head's attention weights (after the causal mask and\n"
                 "the softmax, before dropout) for the batch's first sequence: one heat map per\n"
                 "head, labelled with the tokens (the book's words for its input; --labels gives\n"
                 "T words; otherwise positions), with a colour scale; a self-contained SVG file\n"
                 "for any browser. Up to 256 tokens.");
            return 0;
        }
        if (cli_parse_module_opt(&o, argc, argv, &i)) {
            custom |= strcmp(a, "--seed") != 0 && strcmp(a, "--dropout") != 0 && strcmp(a, "--qkv-bias") != 0;
            continue;
        }
        if (strcmp(a, "--batch") == 0) {
            B = cli_parse_int(a, v, 1, (int64_t)1 << 20), custom = true, i++;
        } else if (strcmp(a, "--tokens") == 0) {
            T = cli_parse_int(a, v, 1, (int64_t)1 << 20), custom = true, i++;
        } else if (strcmp(a, "--max-values") == 0) {
            max_values = cli_parse_int(a, v, 0, (int64_t)1 << 40), i++;
        } else if (strcmp(a, "--train") == 0) {
            train = true;
        } else if (strcmp(a, "--svg") == 0) {
            if (!v) cli_die("--svg needs a file name");
            svg = argv[++i];
        } else if (strcmp(a, "--labels") == 0) {
            if (!v) cli_die("--labels needs the tokens' words, e.g. \"Your journey starts\"");
            labels = argv[++i];
        } else {
            cli_die("trace: unknown option '%s' (see mha trace --help)", a);
        }
    }
    if (labels && !svg) cli_die("trace: --labels only applies with --svg");
    if (svg && T > 256) cli_die("trace: --svg draws up to 256 tokens, not %lld", (long long)T);
    if (svg && o.cfg.num_heads > 64) cli_die("trace: --svg draws up to 64 heads, not %lld", (long long)o.cfg.num_heads);
    if (!o.have_ctx) o.cfg.context_length = T;
    if (custom && o.cfg.d_in == 3 && T <= 6 && B <= 2 && !o.have_d_in) custom = T != 6 || B != 2;
    /* --svg's labels, checked before anything is printed */
    char **words = NULL, *labels_copy = NULL;
    if (svg) {
        words = cli_malloc((size_t)T * sizeof *words);
        if (labels) {
            size_t k = 0, len = strlen(labels);
            char *save = NULL;
            labels_copy = cli_malloc(len + 1);
            memcpy(labels_copy, labels, len + 1);
            for (char *w = strtok_r(labels_copy, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
                if (k == (size_t)T) cli_die("trace: --labels has more words than the %lld tokens", (long long)T);
                words[k++] = w;
            }
            if (k != (size_t)T) cli_die("trace: --labels has %zu words for %lld tokens", k, (long long)T);
        }
    }
    mha_module *m = NULL;
    mha_generator *g = NULL;
    cli_check(mha_module_create(&o.cfg, &m), "MultiHeadAttention");
    if (T > o.cfg.context_length)
        cli_die("%lld tokens exceed context_length %lld", (long long)T, (long long)o.cfg.context_length);
    cli_check(mha_generator_create(o.seed, &g), "generator");
    cli_check(mha_module_init(m, g), "init");
    if ((uint64_t)B * (uint64_t)T * (uint64_t)o.cfg.d_in > ((uint64_t)1 << 28))
        cli_die("trace: input of %lld x %lld x %lld is too large to trace", (long long)B, (long long)T,
            (long long)o.cfg.d_in);
    size_t nx = (size_t)(B * T * o.cfg.d_in);
    float *x = cli_malloc(nx * sizeof(float));
    const bool book = !custom && o.cfg.d_in == 3 && T == 6 && B == 2;
    if (book) {
        for (int64_t b = 0; b < B; b++) memcpy(x + b * 18, book_inputs, sizeof book_inputs);
    } else {
        mha_generator_uniform(g, x, nx, 0.0, 1.0);
    }
    if (svg) { /* a file that cannot be written fails before anything is printed */
        FILE *f = fopen(svg, "w");
        if (!f || fclose(f) != 0) {
            const int err = errno;
            free(x); /* freed first, so that a leak checker sees no leak at exit */
            free(words);
            free(labels_copy);
            mha_generator_free(g);
            mha_module_free(m);
            cli_die("%s: cannot write: %s", svg, strerror(err));
        }
    }
    printf("MultiHeadAttention(d_in=%lld, d_out=%lld, context_length=%lld, dropout=%g, num_heads=%lld, "
           "qkv_bias=%s), torch.manual_seed(%llu)\n",
           (long long)o.cfg.d_in, (long long)o.cfg.d_out, (long long)o.cfg.context_length, o.cfg.dropout,
           (long long)o.cfg.num_heads, o.cfg.qkv_bias ? "True" : "False", (unsigned long long)o.seed);
    printf("b=%lld, num_tokens=%lld, head_dim=%lld; input: %s; %s mode\n", (long long)B, (long long)T,
           (long long)(o.cfg.d_out / o.cfg.num_heads),
           book ? "the book's batch (\"Your journey starts with one step\" twice)" : "torch.rand(b, T, d_in)",
           train ? "training" : "eval");
    float *y = cli_malloc((size_t)(B * T * o.cfg.d_out) * sizeof(float));
    trace_state ts = {max_values, 0, NULL};
    if (svg) {
        for (int64_t t = 0; !labels && t < T; t++) {
            words[t] = cli_malloc(24);
            if (book) snprintf(words[t], 24, "%s", book_tokens[t]);
            else snprintf(words[t], 24, "%lld", (long long)t);
        }
        const size_t nw = (size_t)(o.cfg.num_heads * T * T);
        ts.weights = cli_malloc(nw * sizeof(float));
        memset(ts.weights, 0, nw * sizeof(float));
    }
    cli_check(mha_module_forward_traced(m, y, x, B, T, train ? g : NULL, trace_step, &ts), "trace");
    if (svg) {
        const int64_t H = o.cfg.num_heads;
        char(*names)[32] = cli_malloc((size_t)H * sizeof *names);
        const char **titles = cli_malloc((size_t)H * sizeof *titles);
        for (int64_t h = 0; h < H; h++) {
            snprintf(names[h], sizeof names[h], "head %lld", (long long)h);
            titles[h] = names[h];
        }
        char title[256];
        snprintf(title, sizeof title,
                 "MultiHeadAttention(d_in=%lld, d_out=%lld, num_heads=%lld), seed %llu: attention weights%s",
                 (long long)o.cfg.d_in, (long long)o.cfg.d_out, (long long)H, (unsigned long long)o.seed,
                 B > 1 ? " of the first sequence" : "");
        const svg_heatmap_opts so = {.map_titles = titles,
                                     .row_labels = (const char *const *)words,
                                     .col_labels = (const char *const *)words,
                                     .causal = 1,
                                     .note = "softmax(q k^T / sqrt(head_dim)) after the causal mask; "
                                             "rows: queries, columns: keys"};
        if (svg_heatmaps(svg, title, ts.weights, H, T, T, &so) != 0)
            cli_die("%s: cannot write: %s", svg, strerror(errno));
        printf("\nwrote %s: the attention weights of %lld head%s\n", svg, (long long)H, H > 1 ? "s" : "");
        for (int64_t t = 0; !labels && t < T; t++) free(words[t]);
        free(labels_copy);
        free(words);
        free(titles);
        free(names);
        free(ts.weights);
    }
    free(x);
    free(y);
    mha_generator_free(g);
    mha_module_free(m);
    return 0;
}

/* ---- mha init ---------------------------------------------------------------- */

static int cmd_init(int argc, char **argv) {
    if (argc > 2 && cli_is_gpt_name(argv[2])) return mha_cli_init_gpt(argc, argv);
    cli_module_opts o = {0};
    const char *out = NULL, *module = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a)) {
            puts("usage: mha init MODULE --d-in N --d-out N [--context-length N] [--dropout P]\n"
                 "                [--num-heads N] [--qkv-bias] --seed S -o FILE\n\n"
                 "Writes PyTorch's initial parameters of MODULE after torch.manual_seed(S), bit for\n"
                 "bit, as safetensors named as its state_dict() (mask buffers included), with the\n"
                 "constructor arguments in __metadata__.\n\n"
                 "MODULE: SelfAttention_v1, SelfAttention_v2, CausalAttention,\n"
                 "        MultiHeadAttentionWrapper, MultiHeadAttention\n"
                 "--context-length is required by CausalAttention, the wrapper and\n"
                 "MultiHeadAttention; --num-heads by the last two (default dropout 0.0).\n"
                 "mha init GPTModel|TransformerBlock --help: the chapter 4 models.");
            return 0;
        }
        if (cli_parse_module_opt(&o, argc, argv, &i)) continue;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (i + 1 >= argc) cli_die("%s needs a file name", a);
            out = argv[++i];
        } else if (a[0] == '-') {
            cli_die("init: unknown option '%s' (see mha init --help)", a);
        } else if (!module) {
            module = a;
        } else {
            cli_die("init: unexpected argument '%s'", a);
        }
    }
    if (!module) cli_die("init: missing MODULE (see mha init --help)");
    mha_kind kind;
    cli_check(mha_kind_from_name(module, &kind), "init");
    mha_config c = o.cfg;
    c.kind = kind;
    if (!o.have_d_in) cli_die("init: missing --d-in");
    if (!o.have_d_out) cli_die("init: missing --d-out");
    if (kind >= MHA_CAUSAL_ATTENTION && !o.have_ctx) cli_die("init: %s needs --context-length", module);
    if ((kind == MHA_MULTI_HEAD_ATTENTION || kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER) && !o.have_heads)
        cli_die("init: %s needs --num-heads", module);
    if (!o.have_heads) c.num_heads = 1;
    if (!o.have_seed) cli_die("init: missing --seed");
    if (!out) cli_die("init: missing -o FILE");
    mha_module *m = NULL;
    cli_check(mha_module_create_seeded(&c, o.seed, &m), module);
    cli_check(mha_module_save(m, out), out);
    mha_module_free(m);
    return 0;
}

/* ---- mha run, mha grad ------------------------------------------------------------ */

/* A tensor of IN as float32 with the given shape (ndim dims), or death
 * naming the problem. */
static float *read_tensor(const mha_st *st, const char *path, const char *name, int ndim,
                          const int64_t *shape, const char *dims) {
    mha_st_tensor t;
    if (mha_st_find(st, name, &t) != MHA_OK) cli_die("%s: no tensor '%s' in the input file", path, name);
    bool same = t.ndim == ndim;
    for (int k = 0; same && k < ndim; k++) same = t.shape[k] == shape[k];
    if (!same) {
        char want[96] = "", got[96] = "";
        for (int k = 0; k < ndim; k++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? ", " : "", (long long)shape[k]);
        for (int k = 0; k < t.ndim && k < MHA_ST_MAX_DIMS; k++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", k ? ", " : "", (long long)t.shape[k]);
        cli_die("%s: %s must have shape (%s) %s, got (%s)", path, name, want, dims, got);
    }
    float *d = cli_malloc((t.numel ? t.numel : 1) * sizeof(float));
    cli_check(mha_st_tensor_to_f32(&t, d, t.numel), path);
    return d;
}

static int cmd_run_or_grad(int argc, char **argv, bool grad) {
    const char *cmd = grad ? "grad" : "run";
    const char *weights = NULL, *in = NULL, *out = NULL;
    bool train = false, have_seed = false;
    uint64_t seed = 0;
    mha_dtype dtype = MHA_DTYPE_F32;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (is_help(a) && !grad) {
            puts("usage: mha run WEIGHTS -i INPUT -o OUTPUT [--train --seed S] [--dtype f32|bf16|f16]\n"
                 "               [--threads N]\n\n"
                 "Runs the module saved in WEIGHTS (safetensors: state_dict names, configuration\n"
                 "in __metadata__, as written by mha init or from PyTorch) on tensor 'x' of INPUT\n"
                 "((b, T, d_in); (T, d_in) for SelfAttention_v1/v2) and writes tensor 'y' to\n"
                 "OUTPUT. Eval mode by default; --train --seed S applies dropout exactly as\n"
                 "PyTorch does after torch.manual_seed(S) in training mode. A GPTModel file: 'idx'\n"
                 "in, 'logits' out; --dtype bf16 or f16 holds its weight matrices in 16 bits (see mha\n"
                 "generate --help), f32 (the default) computes what PyTorch does.");
            return 0;
        }
        if (is_help(a)) {
            puts("usage: mha grad WEIGHTS -i INPUT -o OUTPUT [--train --seed S] [--threads N]\n\n"
                 "Forward and backward of the module saved in WEIGHTS: INPUT holds 'x' (as for\n"
                 "mha run) and 'dy' (the gradient of the loss with respect to y, y's shape).\n"
                 "OUTPUT gets 'y', 'dx' and 'grad.<name>' for every parameter, named as in\n"
                 "state_dict() (grad.W_query.weight, grad.heads.1.W_key.weight,\n"
                 "grad.out_proj.bias), all F32: what PyTorch's autograd computes for\n"
                 "y.backward(dy). Eval mode by default; --train --seed S uses the dropout mask\n"
                 "PyTorch draws after torch.manual_seed(S) in training mode (as mha run --train).\n\n"
                 "A GPTModel file: INPUT holds 'idx' and 'targets' (I64 or I32, (b, T); targets\n"
                 "may hold -100, ignored); OUTPUT gets 'loss' (the mean cross-entropy,\n"
                 "F.cross_entropy(logits.flatten(0, 1), targets.flatten())), 'logits' and\n"
                 "'grad.<name>' of loss.backward() (a tied head's gradient is tok_emb's).\n"
                 "A TransformerBlock file: 'x' and 'dy' in, 'y', 'dx' and 'grad.<name>' out.");
            return 0;
        }
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-i") == 0 || strcmp(a, "--input") == 0) {
            if (!v) cli_die("%s needs a file name", a);
            in = argv[++i];
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (!v) cli_die("%s needs a file name", a);
            out = argv[++i];
        } else if (strcmp(a, "--train") == 0) {
            train = true;
        } else if (strcmp(a, "--seed") == 0) {
            seed = cli_parse_seed(a, v), have_seed = true, i++;
        } else if (strcmp(a, "--threads") == 0) {
            cli_check(mha_runtime_set_threads((int)cli_parse_int(a, v, 1, 1024)), "--threads"), i++;
        } else if (strcmp(a, "--dtype") == 0 && !grad) {
            dtype = cli_parse_dtype(a, v), i++;
        } else if (a[0] == '-') {
            cli_die("%s: unknown option '%s' (see mha %s --help)", cmd, a, cmd);
        } else if (!weights) {
            weights = a;
        } else {
            cli_die("%s: unexpected argument '%s'", cmd, a);
        }
    }
    if (!weights) cli_die("%s: missing WEIGHTS file (see mha %s --help)", cmd, cmd);
    if (!in) cli_die("%s: missing -i INPUT", cmd);
    if (!out) cli_die("%s: missing -o OUTPUT", cmd);
    if (train && !have_seed) cli_die("%s: --train needs --seed S (dropout draws from torch.manual_seed(S))", cmd);
    if (have_seed && !train) cli_die("%s: --seed only applies with --train", cmd);

    mha_module *m = NULL;
    {
        mha_st *wst = NULL;
        cli_check(mha_st_open(weights, &wst), weights);
        if (cli_st_is_gpt(wst)) {
            const int rc = grad ? mha_cli_grad_gpt(wst, weights, in, out, train, seed)
                                : mha_cli_run_gpt(wst, weights, in, out, train, seed, dtype);
            mha_st_free(wst);
            return rc;
        }
        if (dtype != MHA_DTYPE_F32) {
            mha_st_free(wst);
            cli_die("%s: --dtype %s applies to GPTModel and TransformerBlock files; modules run in f32", weights,
                    cli_dtype_name(dtype));
        }
        const mha_status s = mha_module_from_st(wst, &m);
        mha_st_free(wst);
        cli_check(s, weights);
    }
    const mha_config *c = mha_module_config_of(m);
    mha_st *st = NULL;
    cli_check(mha_st_read_file(in, &st), in);
    mha_st_tensor t;
    if (mha_st_find(st, "x", &t) != MHA_OK) cli_die("%s: no tensor 'x' in the input file", in);
    const bool batched = mha_config_is_batched(c);
    const int want = batched ? 3 : 2;
    if (t.ndim != want)
        cli_die("%s: x must have %d dimensions %s for %s, got %d", in, want,
            batched ? "(b, T, d_in)" : "(T, d_in)", mha_kind_name(c->kind), t.ndim);
    const int64_t B = batched ? t.shape[0] : 1, T = t.shape[want - 2], D = t.shape[want - 1];
    if (B == 0 || T == 0) cli_die("%s: x has an empty dimension (b = %lld, T = %lld)", in, (long long)B, (long long)T);
    if (D != c->d_in)
        cli_die("%s: x has width %lld but the module's d_in is %lld", in, (long long)D, (long long)c->d_in);
    const int64_t W = mha_config_output_width(c);
    if ((uint64_t)B * (uint64_t)T > (((uint64_t)1 << 62) / sizeof(float)) / (uint64_t)W)
        cli_die("%s: output of %lld x %lld x %lld is too large", in, (long long)B, (long long)T, (long long)W);
    int64_t xshape[3] = {B, T, D}, shape[3] = {B, T, W};
    float *x = read_tensor(st, in, "x", want, batched ? xshape : xshape + 1, "");
    float *dy = grad ? read_tensor(st, in, "dy", want, batched ? shape : shape + 1,
                                   batched ? "(b, T, width of y)" : "(T, width of y)")
                     : NULL;
    mha_st_free(st);

    size_t ny = (size_t)B * (size_t)T * (size_t)W;
    float *y = cli_malloc(ny * sizeof(float));
    mha_generator *g = NULL;
    if (train) cli_check(mha_generator_create(seed, &g), "generator");
    const mha_forward_opts o = {.training = train, .rng = MHA_DROPOUT_RNG_TORCH, .generator = g};
    const char *meta[2] = {"module", mha_kind_name(c->kind)};
    if (!grad) {
        cli_check(mha_module_forward_ex(m, y, x, B, T, &o, NULL, 0), "forward");
        mha_st_entry e = {"y", MHA_DTYPE_F32, want, batched ? shape : shape + 1, y};
        cli_check(mha_st_write_file(out, &e, 1, meta, 1), out);
    } else {
        mha_tape *tape = NULL;
        cli_check(mha_tape_create(&tape), "tape");
        cli_check(mha_module_forward_tape(m, y, x, B, T, &o, tape, NULL, 0), "forward");
        float *dx = cli_malloc((size_t)B * (size_t)T * (size_t)D * sizeof(float));
        cli_check(mha_params_zero_grad(mha_module_params(m)), "gradients");
        cli_check(mha_module_backward(m, tape, dx, x, dy, NULL, 0), "backward");
        mha_tape_free(tape);
        const size_t np = mha_params_count(mha_module_params(m));
        mha_st_entry *e = cli_malloc((np + 2) * sizeof *e);
        char **names = cli_malloc(np * sizeof *names);
        e[0] = (mha_st_entry){"y", MHA_DTYPE_F32, want, batched ? shape : shape + 1, y};
        e[1] = (mha_st_entry){"dx", MHA_DTYPE_F32, want, batched ? xshape : xshape + 1, dx};
        for (size_t i = 0; i < np; i++) {
            mha_param p;
            cli_check(mha_params_grad(mha_module_params(m), i, &p), "gradients");
            names[i] = cli_malloc(strlen(p.name) + 6);
            sprintf(names[i], "grad.%s", p.name);
            e[i + 2] = (mha_st_entry){names[i], MHA_DTYPE_F32, p.ndim, NULL, p.data};
            int64_t *sh = cli_malloc(2 * sizeof(int64_t));
            sh[0] = p.shape[0];
            sh[1] = p.shape[1];
            e[i + 2].shape = sh;
        }
        cli_check(mha_st_write_file(out, e, np + 2, meta, 1), out);
        for (size_t i = 0; i < np; i++) {
            free(names[i]);
            free((void *)e[i + 2].shape);
        }
        free(names);
        free(e);
        free(dx);
    }
    mha_generator_free(g);
    free(x);
    free(y);
    free(dy);
    mha_module_free(m);
    return 0;
}

/* ---- main ------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: mha COMMAND [OPTIONS]\n\n"
            "Causal multi-head attention from chapter 3 of \"Build a Large Language Model (From\n"
            "Scratch)\", exact to PyTorch.\n\n"
            "commands:\n"
            "  demo     the book's running example through every module, as the book prints it\n"
            "  trace    follow one tensor through MultiHeadAttention's forward pass (--svg: draw\n"
            "           each head's attention weights)\n"
            "  init     PyTorch's initial parameters for a seed, as safetensors\n"
            "  run      run a saved module on an input tensor\n"
            "  grad     forward and backward of a saved module: y, dx and every parameter's gradient\n"
            "  train    train an attention layer on a small task, with pictures of what it learned;\n"
            "           train GPTModel: chapter 5's pretraining on The Verdict, the book's log\n"
            "  generate continue a prompt with a GPTModel (the book's or Hugging Face GPT-2 weights)\n"
            "  convert  a GPTModel's weights to bf16 or f16 (or back to f32), for 16-bit inference\n"
            "  tokenize GPT-2's tokenizer: text to token ids (--decode: ids to text)\n"
            "  bench    time a module's forward pass (--backward: a training step; GPTModel: prefill\n"
            "           and decode)\n"
            "  help     this list; mha help COMMAND shows a command's options\n"
            "  version  the version, kernels, GEMM backend and threads (also mha --version)\n\n"
            "mha COMMAND --help shows a command's options. Bash completion: source\n"
            "share/bash-completion/completions/mha (installed) or scripts/mha-completion.bash.\n");
}

static int cmd_version(int argc, char **argv) {
    for (int i = 2; i < argc; i++) {
        if (is_help(argv[i])) {
            puts("usage: mha version (or mha --version)\n\n"
                 "Prints the version of mha (the library's mha_version(), the installed package's\n"
                 "version), the attention kernels in use (MHA_ISA caps them), the projection GEMM\n"
                 "backend and the number of threads.");
            return 0;
        }
        cli_die("version: unexpected argument '%s'", argv[i]);
    }
    printf("mha %s (kernels %s, projections %s, %d threads)\n", mha_version(), mha_runtime_isa(),
           mha_runtime_blas(), mha_runtime_threads());
    return 0;
}

static int cmd_run(int argc, char **argv) { return cmd_run_or_grad(argc, argv, false); }
static int cmd_bench(int argc, char **argv) {
    return argc > 2 && strcmp(argv[2], "GPTModel") == 0 ? mha_cli_bench_gpt(argc, argv) : mha_cli_bench(argc, argv);
}
static int cmd_grad(int argc, char **argv) { return cmd_run_or_grad(argc, argv, true); }

/* The commands with options; each takes the whole argv (argv[1] is its name). */
static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
} commands[] = {
    {"demo", cmd_demo}, {"trace", cmd_trace}, {"init", cmd_init},         {"run", cmd_run},
    {"grad", cmd_grad}, {"train", mha_cli_train}, {"bench", cmd_bench}, {"version", cmd_version},
    {"generate", mha_cli_generate}, {"tokenize", mha_cli_tokenize}, {"convert", mha_cli_convert},
};

static int (*find_command(const char *name))(int, char **) {
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
        if (strcmp(name, commands[k].name) == 0) return commands[k].fn;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) cli_die("no command given (try mha --help)");
    const char *cmd = argv[1];
    if (is_help(cmd) || (strcmp(cmd, "help") == 0 && (argc == 2 || is_help(argv[2])))) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "help") == 0) { /* mha help COMMAND is mha COMMAND --help */
        if (argc > 3) cli_die("help: one command at a time (mha help COMMAND)");
        int (*fn)(int, char **) = find_command(argv[2]);
        if (!fn) cli_die("help: unknown command '%s' (mha help lists them)", argv[2]);
        char help[] = "--help";
        char *args[] = {argv[0], argv[2], help, NULL};
        return fn(3, args);
    }
    if (strcmp(cmd, "--version") == 0) return cmd_version(2, argv);
    int (*fn)(int, char **) = find_command(cmd);
    if (!fn) cli_die("unknown command '%s' (try mha --help)", cmd);
    return fn(argc, argv);
}
