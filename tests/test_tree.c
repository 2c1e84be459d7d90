/* test_tree.c — what data-parallel training stands on:
 *  1. mha_tree_sum: the sum of its fixed tree (written out here from its
 *     definition), bit for bit, for 1 to 24 leaves shared among every
 *     number of parts from 1 to the leaves; the parts run one after the
 *     other, highest first, passing nodes through a mailbox, as processes
 *     would; a node sent is one that part received; bad arguments refused.
 *  2. mha_gpt_loss_backward_share: over the whole batch it is
 *     mha_gpt_loss_backward (gradients, loss and the generator's end state,
 *     bit for bit); window by window it draws the whole batch's masks (the
 *     generator ends where the batch's forward leaves it, each window's
 *     loss is the batch forward's rows' loss) and the windows' gradients
 *     add up to the batch's; bad shares refused. */
#include "test_util.h"

/* ---- 1. the tree ----------------------------------------------------------- */

enum { N = 37, MAX_LEAVES = 24 };
static float leaves_v[MAX_LEAVES][N];

/* The definition: node (i, s). */
static void ref_node(int64_t i, int64_t s, int64_t L, float *out) {
    if (s == 1) {
        memcpy(out, leaves_v[i], sizeof leaves_v[i]);
        return;
    }
    ref_node(i, s / 2, L, out);
    if (i + s / 2 >= L) return;
    float r[N];
    ref_node(i + s / 2, s / 2, L, r);
    for (int k = 0; k < N; k++) out[k] = out[k] + r[k];
}

typedef struct {
    int64_t first, count;
    int from, to;
    float v[N];
    int used;
} msg;

typedef struct {
    msg box[4 * MAX_LEAVES];
    int n_box;
    int part;
    int64_t next_leaf, leaves_seen;
    float leafbuf[N];
    int bad;
} mailbox;

static mha_status leaf_cb(void *user, int64_t i, const float **v) {
    mailbox *mb = user;
    if (i != mb->next_leaf) mb->bad++; /* leaves in increasing order */
    mb->next_leaf = i + 1;
    mb->leaves_seen++;
    /* the leaf in a buffer reused by the next call, as a gradient buffer */
    memcpy(mb->leafbuf, leaves_v[i], sizeof mb->leafbuf);
    *v = mb->leafbuf;
    return MHA_OK;
}

static mha_status send_cb(void *user, int to, int64_t first, int64_t count, const float *v) {
    mailbox *mb = user;
    if (to >= mb->part) mb->bad++; /* only to lower parts */
    msg *m = &mb->box[mb->n_box++];
    *m = (msg){.first = first, .count = count, .from = mb->part, .to = to};
    memcpy(m->v, v, sizeof m->v);
    return MHA_OK;
}

static mha_status recv_cb(void *user, int from, int64_t first, int64_t count, float *v) {
    mailbox *mb = user;
    if (from <= mb->part) mb->bad++; /* only from higher parts */
    for (int k = 0; k < mb->n_box; k++) {
        msg *m = &mb->box[k];
        if (!m->used && m->first == first && m->from == from && m->to == mb->part) {
            if (m->count != count) mb->bad++;
            memcpy(v, m->v, sizeof m->v);
            m->used = 1;
            return MHA_OK;
        }
    }
    mb->bad++;
    return MHA_ERR_ARGUMENT; /* a receive nothing was sent for: the order would deadlock */
}

static mha_status flush_cb(void *user) {
    (void)user;
    return MHA_OK;
}

static void test_tree(void) {
    uint32_t s = 12345;
    for (int i = 0; i < MAX_LEAVES; i++)
        for (int k = 0; k < N; k++) {
            s = s * 1664525u + 1013904223u;
            /* magnitudes over 2^12: the order of the adds shows in the bits */
            leaves_v[i][k] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (float)(1 << ((s >> 3) % 13));
        }
    int mismatches = 0, bad = 0, order_matters = 0;
    static mailbox mb;
    for (int64_t L = 1; L <= MAX_LEAVES; L++) {
        float want[N], fold[N];
        int64_t S = 1;
        while (S < L) S *= 2;
        ref_node(0, S, L, want);
        memcpy(fold, leaves_v[0], sizeof fold);
        for (int64_t i = 1; i < L; i++)
            for (int k = 0; k < N; k++) fold[k] += leaves_v[i][k];
        order_matters += memcmp(fold, want, sizeof want) != 0;
        for (int P = 1; P <= L; P++) {
            memset(&mb, 0, sizeof mb);
            float out[N];
            for (int p = P - 1; p >= 0; p--) {
                mb.part = p;
                mb.next_leaf = (int64_t)p * L / P;
                const mha_tree_io io = {&mb, leaf_cb, send_cb, recv_cb, flush_cb};
                mha_tree *tr = NULL;
                mha_status st = mha_tree_create(N, &tr);
                if (st == MHA_OK) st = mha_tree_sum(tr, p == 0 ? out : NULL, L, p, P, &io);
                if (st == MHA_OK && p == 0 && L > 2) { /* again on the same tree: its kept buffers */
                    float again[N];
                    mb.next_leaf = 0;
                    memcpy(again, out, sizeof again);
                    st = mha_tree_sum(tr, out, L, 0, 1, &io);
                    if (memcmp(again, out, sizeof again) != 0 && P == 1) bad++;
                    mb.next_leaf = (int64_t)L / P; /* as the first sum left it */
                    mb.leaves_seen -= L;
                }
                mha_tree_free(tr);
                if (st != MHA_OK) {
                    bad++;
                    fprintf(stderr, "L %lld P %d part %d: %s\n", (long long)L, P, p, mha_last_error());
                }
                if (mb.next_leaf != (int64_t)(p + 1) * L / P) bad++; /* every leaf of its own */
            }
            for (int k = 0; k < mb.n_box; k++) bad += !mb.box[k].used; /* every node sent was received */
            bad += mb.bad;
            bad += mb.leaves_seen != L;
            if (memcmp(out, want, sizeof want) != 0) {
                mismatches++;
                fprintf(stderr, "tree sum of %lld leaves over %d parts differs from the tree's definition\n",
                        (long long)L, P);
            }
        }
    }
    CHECK(mismatches == 0, "%d sums differ", mismatches);
    CHECK(bad == 0, "%d protocol errors", bad);
    CHECK(order_matters > 0, "no leaf count where the tree's order differs from a left fold: the test shows nothing");

    /* bad arguments */
    float out[N];
    mailbox m2 = {0};
    const mha_tree_io io = {&m2, leaf_cb, send_cb, recv_cb, NULL};
    const mha_tree_io no_send = {&m2, leaf_cb, NULL, NULL, NULL};
    mha_tree *tr = NULL;
    REQUIRE(mha_tree_create(N, &tr) == MHA_OK, "tree");
    CHECK(mha_tree_sum(tr, out, 0, 0, 1, &io) == MHA_ERR_ARGUMENT, "no leaves");
    CHECK(mha_tree_sum(tr, out, 3, 0, 4, &io) == MHA_ERR_ARGUMENT, "more parts than leaves");
    CHECK(mha_tree_sum(tr, out, 3, 3, 3, &io) == MHA_ERR_ARGUMENT, "part out of range");
    CHECK(mha_tree_sum(tr, out, 3, 0, 2, &no_send) == MHA_ERR_ARGUMENT, "two parts without send/recv");
    CHECK(mha_tree_sum(tr, NULL, 3, 0, 1, &io) == MHA_ERR_ARGUMENT, "part 0 without out");
    CHECK(mha_tree_sum(tr, out, 3, 0, 1, NULL) == MHA_ERR_ARGUMENT, "no io");
    CHECK(mha_tree_sum(NULL, out, 3, 0, 1, &io) == MHA_ERR_ARGUMENT, "no tree");
    m2.next_leaf = 0;
    CHECK(mha_tree_sum(tr, out, 3, 0, 1, &no_send) == MHA_OK, "one part: %s", mha_last_error());
    mha_tree_free(tr);
}

/* ---- 2. a share of a batch -------------------------------------------------- */

enum { B = 3, T = 6, V = 29 };

static mha_gpt *new_gpt(double drop) {
    mha_gpt_config c;
    mha_gpt_config_init(&c, MHA_GPT_MODEL);
    c.vocab_size = V;
    c.context_length = 8;
    c.emb_dim = 16;
    c.n_heads = 2;
    c.n_layers = 2;
    c.drop_rate = drop;
    mha_gpt *m = NULL;
    REQUIRE(mha_gpt_create(&c, 0, &m) == MHA_OK, "create: %s", mha_last_error());
    mha_generator *g = NULL;
    REQUIRE(mha_generator_create(5, &g) == MHA_OK, "generator");
    REQUIRE(mha_gpt_init(m, g) == MHA_OK, "init: %s", mha_last_error());
    mha_generator_free(g);
    return m;
}

static void test_share(void) {
    mha_gpt *m = new_gpt(0.3);
    mha_params *ps = mha_gpt_params(m);
    size_t n = 0;
    float *grad = mha_params_grad_buffer(ps, &n);
    REQUIRE(grad != NULL && n > 0, "gradient buffer: %s", mha_last_error());
    float *full = malloc(n * sizeof *full), *sum = calloc(n, sizeof *sum);
    REQUIRE(full && sum, "memory");
    int32_t idx[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) idx[i] = (i * 11 + 2) % V, tgt[i] = (i * 7 + 5) % V;
    mha_gpt_tape *tape = NULL;
    REQUIRE(mha_gpt_tape_create(&tape) == MHA_OK, "tape");
    mha_generator *g = NULL, *g_full = NULL;
    REQUIRE(mha_generator_create(99, &g) == MHA_OK && mha_generator_create(99, &g_full) == MHA_OK, "generators");
    uint8_t start[MHA_GENERATOR_STATE_BYTES], end_full[MHA_GENERATOR_STATE_BYTES], end[MHA_GENERATOR_STATE_BYTES];
    mha_generator_get_state(g, start, sizeof start);

    /* the batch at once */
    float loss = 0.0f, logits[B * T * V];
    mha_params_zero_grad(ps);
    CHECK(mha_gpt_loss_backward(m, &loss, logits, idx, tgt, B, T, g_full, tape) == MHA_OK, "batch: %s", mha_last_error());
    memcpy(full, grad, n * sizeof *full);
    mha_generator_get_state(g_full, end_full, sizeof end_full);

    /* the draws it took: mha_gpt_dropout_draws, skipped from the start */
    uint64_t draws = 0;
    CHECK(mha_gpt_dropout_draws(m, B, T, &draws) == MHA_OK && draws > 0, "draws: %s", mha_last_error());
    mha_generator_skip(g, draws);
    mha_generator_get_state(g, end, sizeof end);
    CHECK(memcmp(end, end_full, sizeof end) == 0, "skipping mha_gpt_dropout_draws (%llu) ends elsewhere",
          (unsigned long long)draws);
    mha_generator_set_state(g, start, sizeof start);

    /* the whole batch as one share: the same bits */
    double s_all = 0.0;
    mha_params_zero_grad(ps);
    const mha_batch_share all = {.batch = B, .first = 0, .targets = 0};
    CHECK(mha_gpt_loss_backward_share(m, &s_all, idx, tgt, B, T, &all, g, tape) == MHA_OK, "share: %s", mha_last_error());
    CHECK(memcmp(full, grad, n * sizeof *full) == 0, "the whole batch as a share: other gradients");
    CHECK((float)(s_all * (1.0 / (B * T))) == loss, "loss %.9g, share %.9g", (double)loss, s_all / (B * T));
    mha_generator_get_state(g, end, sizeof end);
    CHECK(memcmp(end, end_full, sizeof end) == 0, "the generator ends elsewhere");

    /* window by window: the batch's masks, its rows' losses, its gradient */
    double rows_loss[B];
    for (int w = 0; w < B; w++) { /* each window's rows' loss from the batch forward's logits */
        rows_loss[w] = 0.0;
        for (int t = 0; t < T; t++) {
            const float *z = logits + (w * T + t) * V;
            double mx = -INFINITY, se = 0.0;
            for (int j = 0; j < V; j++) mx = (double)z[j] > mx ? (double)z[j] : mx;
            for (int j = 0; j < V; j++) se += exp((double)z[j] - mx);
            rows_loss[w] += mx + log(se) - (double)z[tgt[w * T + t]];
        }
    }
    double total = 0.0;
    for (int w = 0; w < B; w++) {
        mha_generator_set_state(g, start, sizeof start);
        mha_params_zero_grad(ps);
        double s_w = 0.0;
        const mha_batch_share one = {.batch = B, .first = w, .targets = B * T};
        CHECK(mha_gpt_loss_backward_share(m, &s_w, idx + w * T, tgt + w * T, 1, T, &one, g, tape) == MHA_OK,
              "window %d: %s", w, mha_last_error());
        mha_generator_get_state(g, end, sizeof end);
        CHECK(memcmp(end, end_full, sizeof end) == 0, "window %d: the generator ends elsewhere", w);
        CHECK(fabs(s_w - rows_loss[w]) <= 1e-5 * fabs(rows_loss[w]), "window %d: loss %.9g, the batch's rows %.9g", w,
              s_w, rows_loss[w]);
        for (size_t k = 0; k < n; k++) sum[k] += grad[k];
        total += s_w;
    }
    CHECK(fabs(total / (B * T) - (double)loss) <= 1e-6, "windows' mean loss %.9g, batch %.9g", total / (B * T), (double)loss);
    double worst = 0.0, scale = 0.0;
    for (size_t k = 0; k < n; k++) {
        worst = fmax(worst, fabs((double)sum[k] - (double)full[k]));
        scale = fmax(scale, fabs((double)full[k]));
    }
    CHECK(worst <= 1e-5 * scale, "windows' gradients add to within %.3g of the batch's (max %.3g)", worst, scale);

    /* with the masks of another window the loss moves: the check above can fail */
    mha_generator_set_state(g, start, sizeof start);
    double s_wrong = 0.0;
    const mha_batch_share other = {.batch = B, .first = 2, .targets = 0};
    CHECK(mha_gpt_loss_backward_share(m, &s_wrong, idx, tgt, 1, T, &other, g, tape) == MHA_OK, "other masks");
    CHECK(fabs(s_wrong - rows_loss[0]) > 1e-3 * fabs(rows_loss[0]), "window 0 with window 2's masks: the same loss");

    /* bad shares */
    double d;
    const mha_batch_share past = {.batch = B, .first = 2, .targets = 0}, few = {.batch = B, .first = 0, .targets = 3};
    CHECK(mha_gpt_loss_backward_share(m, &d, idx, tgt, 2, T, &past, g, tape) == MHA_ERR_SHAPE, "past the batch");
    CHECK(mha_gpt_loss_backward_share(m, &d, idx, tgt, 1, T, &few, g, tape) == MHA_ERR_ARGUMENT, "targets too few");
    CHECK(mha_gpt_loss_backward_share(m, &d, idx, tgt, 1, T, NULL, g, tape) == MHA_ERR_ARGUMENT, "no share");

    mha_gpt_tape_free(tape);
    mha_generator_free(g);
    mha_generator_free(g_full);
    mha_gpt_free(m);
    free(full);
    free(sum);
}

int main(void) {
    test_tree();
    test_share();
    return TEST_END("test_tree");
}
