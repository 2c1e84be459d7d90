/* tree.c — a sum of vectors in one fixed binary tree over its leaves
 * (mha_tree_sum): the same bits however the leaves are shared out.
 *
 * The tree over L leaves: node (i, s), s a power of two and i a multiple
 * of s, covers leaves [i, min(i + s, L)); node (i, 1) is leaf i; node
 * (i, 2s) is node (i, s) + node (i + s, s), elementwise in float, left
 * operand first, or node (i, s) alone when i + s >= L. The sum is node
 * (0, S), S the least power of two >= L. It depends on L alone.
 *
 * Parts: part p holds leaves [lo(p), lo(p + 1)), lo(p) = floor(p L / P),
 * and computes every node whose first leaf it holds. A right child whose
 * first leaf is another part's is received from that part; a part sends
 * its "top" nodes, those whose parent's first leaf lies in a lower part,
 * in increasing order. A part only ever waits on higher parts, and sends
 * do not wait (io->send may return before the receiver has the data; the
 * buffer stays unchanged until io->flush), so the highest part never waits
 * and no cycle of waits exists.
 *
 * Memory: one buffer of n floats per level of the recursion still holding
 * a left operand (at most log2 L + 1), one per top node sent (until the
 * flush), one per node received; the leaves themselves are the caller's. */
#include "mha.h"

#include "common/common.h"

#include <stdbool.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

enum { TREE_CHUNK = 1 << 16, TREE_MAX_BUFS = 192 };

typedef struct {
    float *p;
    int buf; /* the pool buffer holding it, or -1: the caller's leaf (valid until the next leaf call) */
} val;

struct mha_tree {
    size_t n;
    int64_t L;
    int part, parts;
    const mha_tree_io *io;
    float *pool[TREE_MAX_BUFS]; /* kept from sum to sum: no page faults after the first */
    bool busy[TREE_MAX_BUFS];
    int n_pool;
    int64_t last_leaf; /* this part's last leaf */
};
typedef struct mha_tree tree;

static int64_t lo_of(const tree *t, int p) { return (int64_t)(((unsigned __int128)p * (uint64_t)t->L) / (uint64_t)t->parts); }

static int owner_of(const tree *t, int64_t i) {
    return (int)((((unsigned __int128)(uint64_t)(i + 1) * (uint64_t)t->parts) - 1) / (uint64_t)t->L);
}

static mha_status take_buf(tree *t, int *out) {
    for (int k = 0; k < t->n_pool; k++)
        if (!t->busy[k]) {
            t->busy[k] = true;
            *out = k;
            return MHA_OK;
        }
    if (t->n_pool == TREE_MAX_BUFS) return mha__fail(MHA_ERR_OVERFLOW, "tree sum: more than %d buffers", TREE_MAX_BUFS);
    size_t bytes;
    if (!mha__mul_size(t->n ? t->n : 1, sizeof(float), &bytes)) return mha__fail(MHA_ERR_OVERFLOW, "tree sum: size overflows");
    float *b = mha__alloc(bytes);
    if (!b) return mha__nomem("out of memory allocating a tree sum's buffer (%zu MiB)", bytes >> 20);
    t->pool[t->n_pool] = b;
    t->busy[t->n_pool] = true;
    *out = t->n_pool++;
    return MHA_OK;
}

static void drop(tree *t, val *v) {
    if (v->buf >= 0) t->busy[v->buf] = false;
    v->buf = -1;
    v->p = NULL;
}

/* dst = a + b, elementwise (dst may be a or b). */
static void add(tree *t, float *dst, const float *a, const float *b) {
    const int64_t n = (int64_t)t->n, nch = (n + TREE_CHUNK - 1) / TREE_CHUNK;
    const int nt = mha__max_threads();
    (void)nt;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (nch > 4)
#endif
    for (int64_t c = 0; c < nch; c++) {
        const int64_t e = (c + 1) * TREE_CHUNK < n ? (c + 1) * TREE_CHUNK : n;
        for (int64_t k = c * TREE_CHUNK; k < e; k++) dst[k] = a[k] + b[k];
    }
}

static void copy(tree *t, float *dst, const float *src) {
    if (dst != src) memcpy(dst, src, t->n * sizeof(float));
}

/* Moves a caller's leaf into a buffer of the pool. */
static mha_status own(tree *t, val *v) {
    if (v->buf >= 0) return MHA_OK;
    int k;
    mha_status st = take_buf(t, &k);
    if (st != MHA_OK) return st;
    copy(t, t->pool[k], v->p);
    v->p = t->pool[k];
    v->buf = k;
    return MHA_OK;
}

/* Node (i, s), i this part's: into *v, or written into dst when dst is
 * given (then *v points at dst, unowned). */
static mha_status node(tree *t, int64_t i, int64_t s, float *dst, val *v) {
    mha_status st;
    if (s == 1) {
        const float *p = NULL;
        if ((st = t->io->leaf(t->io->user, i, &p)) != MHA_OK) return st;
        if (!p) return mha__fail(MHA_ERR_ARGUMENT, "tree sum: leaf %lld gave no vector", (long long)i);
        *v = (val){(float *)p, -1};
        if (dst) {
            copy(t, dst, p);
            *v = (val){dst, -1};
        }
        return MHA_OK;
    }
    const int64_t h = s / 2;
    if (i + h >= t->L) return node(t, i, h, dst, v);
    val left, right;
    if ((st = node(t, i, h, NULL, &left)) != MHA_OK) return st;
    if ((st = own(t, &left)) != MHA_OK) { /* the right child's leaves come next */
        drop(t, &left);
        return st;
    }
    const int from = owner_of(t, i + h);
    if (from == t->part) {
        st = node(t, i + h, h, NULL, &right);
    } else {
        int k;
        st = take_buf(t, &k);
        if (st == MHA_OK) {
            right = (val){t->pool[k], k};
            st = t->io->recv(t->io->user, from, i + h, i + 2 * h < t->L ? h : t->L - i - h, right.p);
            if (st != MHA_OK) drop(t, &right);
        }
    }
    if (st != MHA_OK) {
        drop(t, &left);
        return st;
    }
    float *out = dst ? dst : left.p;
    add(t, out, left.p, right.p);
    drop(t, &right);
    if (dst) {
        drop(t, &left);
        *v = (val){dst, -1};
    } else {
        *v = left;
    }
    return MHA_OK;
}

mha_status mha_tree_create(size_t n, mha_tree **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "tree: out is NULL");
    *out = mha__alloc(sizeof **out);
    if (!*out) return mha__nomem("out of memory allocating a tree sum");
    memset(*out, 0, sizeof **out);
    (*out)->n = n;
    return MHA_OK;
}

void mha_tree_free(mha_tree *t) {
    if (!t) return;
    for (int k = 0; k < t->n_pool; k++) mha__free(t->pool[k]);
    mha__free(t);
}

mha_status mha_tree_sum(mha_tree *t, float *out, int64_t leaves, int part, int parts, const mha_tree_io *io) {
    if (!t) return mha__fail(MHA_ERR_ARGUMENT, "tree sum: the tree is NULL");
    if (!io || !io->leaf) return mha__fail(MHA_ERR_ARGUMENT, "tree sum: io or its leaf callback is NULL");
    if (leaves < 1 || parts < 1 || parts > leaves || part < 0 || part >= parts)
        return mha__fail(MHA_ERR_ARGUMENT, "tree sum: part %d of %d over %lld leaves (1 <= parts <= leaves)", part, parts,
                         (long long)leaves);
    if (parts > 1 && (!io->send || !io->recv))
        return mha__fail(MHA_ERR_ARGUMENT, "tree sum: %d parts need the send and recv callbacks", parts);
    if (part == 0 && !out) return mha__fail(MHA_ERR_ARGUMENT, "tree sum: out is NULL");
    t->L = leaves, t->part = part, t->parts = parts, t->io = io;
    for (int k = 0; k < t->n_pool; k++) t->busy[k] = false;
    const int64_t a = lo_of(t, part), b = lo_of(t, part + 1);
    t->last_leaf = b - 1;
    mha_status st = MHA_OK;
    if (part == 0) {
        int64_t S = 1;
        while (S < leaves) S *= 2;
        val v;
        st = node(t, 0, S, out, &v);
    } else {
        /* the top nodes: (j, s) with s = j's lowest set bit (a right
         * child), its parent (j - s, 2s) starting below a; from j = a,
         * each the next one's start: they tile [a, b) */
        for (int64_t j = a; j < b && st == MHA_OK;) {
            const int64_t s = j & -j;
            val v;
            if ((st = node(t, j, s, NULL, &v)) != MHA_OK) break;
            const int64_t end = j + s < leaves ? j + s : leaves;
            if (end <= t->last_leaf && (st = own(t, &v)) != MHA_OK) break; /* more of our leaves follow */
            st = io->send(io->user, owner_of(t, j - s), j, end - j, v.p);
            j = end;
        }
    }
    if (io->flush) {
        const mha_status fs = io->flush(io->user);
        if (st == MHA_OK) st = fs;
    }
    for (int k = 0; k < t->n_pool; k++) t->busy[k] = false;
    return st;
}
