/* test_attn_bwd.c — the fused attention backward kernels against the
 * reference (mha__attn_bwd_ref, sums in double) and against each other.
 *
 * Kernels under test (where compiled and supported by this CPU):
 * mha__attn_bwd_avx2 and mha__attn_bwd_avx512 from the dispatch tables, and
 * two test-only instantiations of the same body (isa_variants.h): gen16,
 * the AVX-512 kernel on a portable emulation of its SIMD layer, and
 * avx2w32, the AVX-512 tunables on the AVX2 layer. gen16 (and avx512 where
 * it runs) must reproduce avx2w32's bits exactly: that is how the AVX-512
 * kernel is tested on CPUs without AVX-512. (gen16, slow, runs every other
 * case of sections 1 and 2 and two of section 3.)
 *
 *  1. vs reference: T = 1 .. 300 (tile multiples and not) and 700 (several
 *     key tiles), HD = 1, 3, 5, 8, 16, 17, 64, 80, causal and not, dropout
 *     NONE / BITMASK / PHILOX, key ranges [k_begin, k_end) anywhere (whole,
 *     aligned, odd, across tiles, one key), dQ accumulated onto zero or onto
 *     random values, or written (dq_set, onto NaN rows: the bits of the run
 *     from zero, rows outside untouched); the row statistics (m, log l) from the forward
 *     reference, delta = rowsum(dO * O). Tolerance: dQ (its increment), dK
 *     and dV within TOL * max|gradient| (all three). Also: dK and dV rows
 *     outside the key range, dQ rows before k_begin (causal) and the
 *     padding columns are never written.
 *  2. Row layouts: GPT-2's packed qkv (ld = 2304, HD = 64, head 5 of 12),
 *     the wrapper's (head_stride 3*HD), a 2^k-ish stride whose key tiles
 *     the kernel copies (ld = 1024), against the reference.
 *  3. Determinism: a repeated call gives the same bits; the same head laid
 *     out with other row strides gives the same bits; dK and dV do not
 *     depend on how the keys are split into calls, and neither does dQ
 *     when the splits fall on tile boundaries that a single call keeps
 *     (multiples of KEY_TILE at least KEY_TILE/2 from both ends); causal:
 *     rows before k_begin (Q, dO, stats, delta) and keys outside the range
 *     (K, V) are never read (poisoned with NaN).
 * Exits non-zero on any failure. */
#include "test_util.h"
#include "kernels/kernels.h"
#include "kernels/philox.h"
#if defined(MHA_HAVE_AVX2_KERNELS)
#include "isa_variants.h"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5
/* A multiple of every kernel's key tile (ATTN_BWD_KB, attn_tunables.h): a
 * kernel's tile boundaries are the multiples of its tile except those
 * closer than half a tile to the ends of the key range, so splitting the
 * keys at multiples of KEY_TILE at least KEY_TILE/2 from 0 and T leaves
 * dQ's bits alone. */
#define KEY_TILE 256
#define SENTINEL 12345.0f

typedef struct {
    const char *name;
    void (*fn)(const mha__attn_bwd_args *, float *);
    size_t (*scratch)(int64_t, int64_t);
    double worst; /* max error / max|gradient| seen */
    int twin;     /* index in kern[] of a kernel whose bits this one must give, or -1 */
    int every;    /* runs on every case (1) or every other one (2: the slow emulation) */
} bwd_kernel;
enum { MAX_KERN = 4 };
static bwd_kernel kern[MAX_KERN];
static int n_kern;


/* ---- one head --------------------------------------------------------------
 * Q, K, V rows in a buffer of row stride ld at column offsets qo, ko, vo
 * (HD floats each); dO (T, HD + 1); the forward reference's row statistics
 * (m, log l); delta;
 * keep bits. The gradients go to (T, ldg) buffers. */
typedef struct {
    int64_t T, HD, ld, qo, ko, vo;
    float *x; /* (T, ld) */
    float *dout;
    int64_t lddo;
    float *stats, *delta; /* (T, 2), (T) */
    uint64_t *keep;
    int64_t keep_ld;
    bool causal;
    mha__drop_mode drop;
    float drop_scale;
    uint32_t threshold;
} head;

static void head_fill(head *h, int64_t T, int64_t HD, int64_t ld, int64_t qo, int64_t ko,
                      int64_t vo, bool causal, mha__drop_mode drop, double p, float qmul) {
    memset(h, 0, sizeof *h);
    h->T = T;
    h->HD = HD;
    h->ld = ld;
    h->qo = qo;
    h->ko = ko;
    h->vo = vo;
    h->causal = causal;
    h->drop = drop;
    h->drop_scale = drop == MHA_DROP_NONE ? 1.0f : 1.0f / (float)(1.0 - p);
    h->threshold = mha__philox_keep_threshold(p);
    h->x = malloc(sizeof(float) * (size_t)(T * ld));
    for (int64_t i = 0; i < T * ld; i++) h->x[i] = rng_uniform();
    for (int64_t t = 0; t < T; t++)
        for (int64_t d = 0; d < HD; d++) h->x[t * ld + qo + d] *= qmul;
    h->lddo = HD + 1;
    h->dout = malloc(sizeof(float) * (size_t)(T * h->lddo));
    for (int64_t i = 0; i < T * h->lddo; i++) h->dout[i] = rng_uniform();
    h->keep_ld = (T + 63) / 64;
    h->keep = malloc(sizeof(uint64_t) * (size_t)(T * h->keep_ld));
    for (int64_t i = 0; i < T * h->keep_ld; i++) h->keep[i] = rng_u64() | rng_u64(); /* ~3/4 */
    h->stats = malloc(sizeof(float) * (size_t)(2 * T));
    h->delta = malloc(sizeof(float) * (size_t)T);

    /* the forward (reference) for the stats and O; delta = rowsum(dO * O) */
    float *o = malloc(sizeof(float) * (size_t)(T * HD));
    float *scr = malloc(sizeof(float) * mha__attn_fwd_scratch_ref(T, HD));
    mha__attn_args f;
    memset(&f, 0, sizeof f);
    f.o = o;
    f.ldo = HD;
    f.q = h->x + qo;
    f.k = h->x + ko;
    f.v = h->x + vo;
    f.ldq = f.ldk = f.ldv = ld;
    f.stats = h->stats;
    f.T = T;
    f.HD = HD;
    f.q_begin = 0;
    f.q_end = T;
    f.scale = (float)(1.0 / sqrt((double)HD));
    f.causal = causal;
    f.drop = drop;
    f.drop_scale = h->drop_scale;
    f.keep = h->keep;
    f.keep_ld = h->keep_ld;
    f.philox_seed = 0x0123456789abcdefull;
    f.philox_stream = 0x77ull << 32 | 5u;
    f.keep_threshold = h->threshold;
    mha__attn_fwd_ref(&f, scr);
    for (int64_t t = 0; t < T; t++) {
        float s = 0.0f;
        for (int64_t d = 0; d < HD; d++) s = fmaf(h->dout[t * h->lddo + d], o[t * HD + d], s);
        h->delta[t] = s;
    }
    free(o);
    free(scr);
}

static void head_free(head *h) {
    free(h->x);
    free(h->dout);
    free(h->stats);
    free(h->delta);
    free(h->keep);
}

/* The gradients of one call: dq, dk, dv each (T, ldg). */
typedef struct {
    float *dq, *dk, *dv;
    int64_t ldg;
} grads;

static void grads_alloc(grads *g, int64_t T, int64_t HD) {
    g->ldg = HD + 2;
    const size_t n = (size_t)(T * g->ldg);
    g->dq = malloc(sizeof(float) * n);
    g->dk = malloc(sizeof(float) * n);
    g->dv = malloc(sizeof(float) * n);
}

/* dq = dq0 (or SENTINEL in its padding columns), dk = dv = SENTINEL. */
static void grads_init(grads *g, int64_t T, const float *dq0) {
    const size_t n = (size_t)(T * g->ldg);
    for (size_t i = 0; i < n; i++) {
        g->dq[i] = dq0 ? dq0[i] : SENTINEL;
        g->dk[i] = g->dv[i] = SENTINEL;
    }
}

static void grads_free(grads *g) {
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

static mha__attn_bwd_args bwd_args(const head *h, const grads *g, int64_t kb, int64_t ke) {
    mha__attn_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = h->x + h->qo;
    a.k = h->x + h->ko;
    a.v = h->x + h->vo;
    a.ldq = a.ldk = a.ldv = h->ld;
    a.dout = h->dout;
    a.lddo = h->lddo;
    a.stats = h->stats;
    a.delta = h->delta;
    a.dq = g->dq;
    a.dk = g->dk;
    a.dv = g->dv;
    a.lddq = a.lddk = a.lddv = g->ldg;
    a.T = h->T;
    a.HD = h->HD;
    a.k_begin = kb;
    a.k_end = ke;
    a.scale = (float)(1.0 / sqrt((double)h->HD));
    a.causal = h->causal;
    a.drop = h->drop;
    a.drop_scale = h->drop_scale;
    a.keep = h->keep;
    a.keep_ld = h->keep_ld;
    a.philox_seed = 0x0123456789abcdefull;
    a.philox_stream = 0x77ull << 32 | 5u;
    a.keep_threshold = h->threshold;
    return a;
}

/* Runs fn in exactly its scratch, for the fast kernels deliberately
 * misaligned by one float (the reference keeps doubles there: aligned),
 * and full of NaN: a kernel that reads scratch it has not written shows. */
static void run(void (*fn)(const mha__attn_bwd_args *, float *), size_t (*sfn)(int64_t, int64_t),
                const mha__attn_bwd_args *a) {
    const size_t sn = sfn(a->T, a->HD);
    float *sb = malloc(sizeof(float) * (sn + 1));
    memset(sb, 0xff, sizeof(float) * (sn + 1));
    fn(a, fn == mha__attn_bwd_ref ? sb : sb + 1);
    free(sb);
}

static const char *drop_name(mha__drop_mode d) {
    return d == MHA_DROP_NONE ? "none" : d == MHA_DROP_BITMASK ? "bitmask" : "philox";
}

/* max |x - y| over the HD columns of rows [r0, r1) of two (T, ld) buffers
 * (NaN counts as infinite), and max |y - base| (base NULL: 0). */
static void diff_rows(const float *x, const float *y, const float *base, int64_t ld, int64_t HD,
                      int64_t r0, int64_t r1, double *md, double *my) {
    for (int64_t i = r0; i < r1; i++)
        for (int64_t d = 0; d < HD; d++) {
            const double e = fabs((double)x[i * ld + d] - (double)y[i * ld + d]);
            if (!(e <= *md)) *md = isnan(e) ? (double)INFINITY : e;
            const double v = fabs((double)y[i * ld + d] - (base ? (double)base[i * ld + d] : 0.0));
            if (v > *my) *my = v;
        }
}

/* Values of g other than dq rows [q0, T) and dk/dv rows [kb, ke), HD
 * columns, that differ from their initial value. */
static int outside_written(const grads *g, const float *dq0, int64_t T, int64_t HD, int64_t q0,
                           int64_t kb, int64_t ke) {
    int n = 0;
    for (int64_t i = 0; i < T; i++)
        for (int64_t d = 0; d < g->ldg; d++) {
            const size_t o = (size_t)(i * g->ldg + d);
            const bool col = d < HD;
            const float q0v = dq0 ? dq0[o] : SENTINEL;
            if (!(col && i >= q0) && memcmp(&g->dq[o], &q0v, sizeof(float)) != 0) n++;
            if (!(col && i >= kb && i < ke) && g->dk[o] != SENTINEL) n++;
            if (!(col && i >= kb && i < ke) && g->dv[o] != SENTINEL) n++;
        }
    return n;
}

/* Rows of x and y whose bits differ: dq from row q0 on, dk and dv all. */
static int bits_differ(const grads *x, const grads *y, int64_t T, int64_t HD, int64_t q0) {
    int n = 0;
    for (int64_t i = 0; i < T; i++) {
        const size_t o = (size_t)(i * x->ldg), s = sizeof(float) * (size_t)HD;
        n += i >= q0 && memcmp(x->dq + o, y->dq + o, s) != 0;
        n += memcmp(x->dk + o, y->dk + o, s) != 0;
        n += memcmp(x->dv + o, y->dv + o, s) != 0;
    }
    return n;
}

/* dq_set: fn on keys [kb, ke) of h with dQ's rows full of NaN gives the
 * bits of its run from zero (from0) in the rows it writes, and leaves the
 * others as they were (NaN: a row read would show). */
static void check_dq_set(void (*fn)(const mha__attn_bwd_args *, float *), size_t (*sfn)(int64_t, int64_t),
                         const char *name, const head *h, int64_t kb, int64_t ke, const grads *from0,
                         const char *what) {
    const int64_t T = h->T, HD = h->HD;
    grads g;
    grads_alloc(&g, T, HD);
    float *nan0 = malloc(sizeof(float) * (size_t)(T * g.ldg));
    for (int64_t i = 0; i < T * g.ldg; i++) nan0[i] = NAN;
    grads_init(&g, T, nan0);
    mha__attn_bwd_args a = bwd_args(h, &g, kb, ke);
    a.dq_set = true;
    run(fn, sfn, &a);
    const int64_t q0 = h->causal ? kb : 0; /* the dq rows written */
    const int nd = bits_differ(&g, from0, T, HD, q0);
    CHECK(nd == 0, "%s dq_set: %s: %d rows not the bits of the run from zero", name, what, nd);
    const int ow = outside_written(&g, nan0, T, HD, q0, kb, ke);
    CHECK(ow == 0, "%s dq_set: %s: %d values outside the ranges written", name, what, ow);
    free(nan0);
    grads_free(&g);
}

/* ---- 1, 2. against the reference ------------------------------------------ */

/* Every kernel on keys [kb, ke) of head h, against the reference; dq
 * starts at zero or (dq_random) at random values. */
static void check_head(const head *h, int64_t kb, int64_t ke, bool dq_random, const char *layout) {
    const int64_t T = h->T, HD = h->HD;
    grads ref, out[MAX_KERN];
    grads_alloc(&ref, T, HD);
    float *dq0 = malloc(sizeof(float) * (size_t)(T * ref.ldg));
    for (int64_t i = 0; i < T * ref.ldg; i++) dq0[i] = dq_random ? rng_uniform() : 0.0f;
    grads_init(&ref, T, dq0);
    mha__attn_bwd_args a = bwd_args(h, &ref, kb, ke);
    run(mha__attn_bwd_ref, mha__attn_bwd_scratch_ref, &a);

    const int64_t q0 = h->causal ? kb : 0; /* the dq rows that may change */
    double gmax = 0.0, unused = 0.0;
    diff_rows(ref.dq, ref.dq, dq0, ref.ldg, HD, q0, T, &unused, &gmax);
    diff_rows(ref.dk, ref.dk, NULL, ref.ldg, HD, kb, ke, &unused, &gmax);
    diff_rows(ref.dv, ref.dv, NULL, ref.ldg, HD, kb, ke, &unused, &gmax);
    const double den = gmax > 0.0 ? gmax : 1.0;

    static int case_no;
    case_no++;
    char what[200];
    snprintf(what, sizeof what, "T=%lld HD=%lld %s %s drop=%s keys [%lld,%lld) dq0=%s",
             (long long)T, (long long)HD, layout, h->causal ? "causal" : "full",
             drop_name(h->drop), (long long)kb, (long long)ke, dq_random ? "random" : "0");
    for (int k = 0; k < n_kern; k++) {
        bwd_kernel *f = &kern[k];
        grads *g = &out[k];
        grads_alloc(g, T, HD);
        if (case_no % f->every) continue;
        grads_init(g, T, dq0);
        a = bwd_args(h, g, kb, ke);
        run(f->fn, f->scratch, &a);
        double e[3] = {0, 0, 0}, my = 0.0;
        diff_rows(g->dq, ref.dq, NULL, g->ldg, HD, q0, T, &e[0], &my);
        diff_rows(g->dk, ref.dk, NULL, g->ldg, HD, kb, ke, &e[1], &my);
        diff_rows(g->dv, ref.dv, NULL, g->ldg, HD, kb, ke, &e[2], &my);
        const double w = fmax(e[0], fmax(e[1], e[2])) / den;
        if (!(w <= f->worst)) f->worst = w;
        CHECK(w <= TOL, "%s vs ref: %s: |ddq| %.3g |ddk| %.3g |ddv| %.3g (max|grad| %.3g)",
              f->name, what, e[0], e[1], e[2], gmax);
        const int ow = outside_written(g, dq0, T, HD, q0, kb, ke);
        CHECK(ow == 0, "%s: %s: %d values outside the ranges written", f->name, what, ow);
        if (f->twin >= 0) {
            const int nd = bits_differ(g, &out[f->twin], T, HD, 0);
            CHECK(nd == 0, "%s vs %s: %s: %d rows not bit-identical", f->name,
                  kern[f->twin].name, what, nd);
        }
        if (!dq_random) check_dq_set(f->fn, f->scratch, f->name, h, kb, ke, g, what);
    }
    if (!dq_random) check_dq_set(mha__attn_bwd_ref, mha__attn_bwd_scratch_ref, "ref", h, kb, ke, &ref, what);
    for (int k = 0; k < n_kern; k++) grads_free(&out[k]);
    grads_free(&ref);
    free(dq0);
}

/* One head in its own (T, 3*HD + pad) buffer: [q | k | v | pad]. */
static void check_case(int64_t T, int64_t HD, int64_t pad, bool causal, mha__drop_mode drop,
                       double p, int64_t kb, int64_t ke, float qmul, bool dq_random) {
    head h;
    head_fill(&h, T, HD, 3 * HD + pad, 0, HD, 2 * HD, causal, drop, p, qmul);
    check_head(&h, kb, ke, dq_random, "packed");
    head_free(&h);
}

/* ---- 3. determinism ---------------------------------------------------------- */

/* Runs f on keys [kb, ke) of h into g (initialised: dq = dq0). */
static void run_into(const bwd_kernel *f, const head *h, grads *g, const float *dq0, int64_t kb,
                     int64_t ke) {
    grads_init(g, h->T, dq0);
    mha__attn_bwd_args a = bwd_args(h, g, kb, ke);
    run(f->fn, f->scratch, &a);
}

static void check_determinism(const bwd_kernel *f, int64_t T, int64_t HD, bool causal,
                              mha__drop_mode drop) {
    head h;
    head_fill(&h, T, HD, 3 * HD + 1, 0, HD, 2 * HD, causal, drop, 0.2, 2.0f);
    char what[120];
    snprintf(what, sizeof what, "T=%lld HD=%lld %s drop=%s", (long long)T, (long long)HD,
             causal ? "causal" : "full", drop_name(drop));
    grads g1, g2;
    grads_alloc(&g1, T, HD);
    grads_alloc(&g2, T, HD);
    float *dq0 = malloc(sizeof(float) * (size_t)(T * g1.ldg));
    for (int64_t i = 0; i < T * g1.ldg; i++) dq0[i] = rng_uniform();

    /* repeat */
    run_into(f, &h, &g1, dq0, 0, T);
    run_into(f, &h, &g2, dq0, 0, T);
    CHECK(bits_differ(&g1, &g2, T, HD, 0) == 0, "%s: %s: a repeated call differs", f->name, what);

    /* other row strides: the same head in a wider buffer (ld + 37, other
     * offsets) and in a 2^k-ish stride whose tiles the kernel copies */
    static const int64_t extra[2] = {37, 0};
    for (int s = 0; s < 2; s++) {
        head h2 = h;
        h2.ld = extra[s] ? h.ld + extra[s] : 1024;
        if (h2.ld < 3 * HD + 3) continue;
        h2.qo = 2 * HD + 3;
        h2.ko = 1;
        h2.vo = HD + 2;
        h2.x = malloc(sizeof(float) * (size_t)(T * h2.ld));
        for (int64_t t = 0; t < T; t++) {
            memcpy(h2.x + t * h2.ld + h2.qo, h.x + t * h.ld + h.qo, sizeof(float) * (size_t)HD);
            memcpy(h2.x + t * h2.ld + h2.ko, h.x + t * h.ld + h.ko, sizeof(float) * (size_t)HD);
            memcpy(h2.x + t * h2.ld + h2.vo, h.x + t * h.ld + h.vo, sizeof(float) * (size_t)HD);
        }
        run_into(f, &h2, &g2, dq0, 0, T);
        CHECK(bits_differ(&g1, &g2, T, HD, 0) == 0, "%s: %s: row stride %lld gives other bits",
              f->name, what, (long long)h2.ld);
        free(h2.x);
    }

    /* keys split into calls: dK, dV always the same bits; dQ too when the
     * splits fall on key tiles */
    static const int64_t splits[][3] = {{37, 100, 101},
                                        {1, 2, 64},
                                        {KEY_TILE, 2 * KEY_TILE, 2 * KEY_TILE},
                                        {KEY_TILE, KEY_TILE, KEY_TILE},
                                        {5, 200, 263},
                                        {255, 257, 511}};
    for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
        grads_init(&g2, T, dq0);
        int64_t k0 = 0;
        for (int c = 0; c <= 3; c++) {
            int64_t k1 = c < 3 ? splits[s][c] : T;
            if (k1 > T) k1 = T;
            if (k1 < k0) k1 = k0;
            mha__attn_bwd_args a = bwd_args(&h, &g2, k0, k1);
            run(f->fn, f->scratch, &a);
            k0 = k1;
        }
        bool tiles = true;
        for (int c = 0; c < 3; c++) {
            const int64_t b = splits[s][c] < T ? splits[s][c] : T;
            if (b < T && (b % KEY_TILE || b < KEY_TILE / 2 || T - b < KEY_TILE / 2)) tiles = false;
        }
        int nkv = 0, nq = 0;
        for (int64_t i = 0; i < T; i++) {
            const size_t o = (size_t)(i * g1.ldg), sz = sizeof(float) * (size_t)HD;
            nkv += memcmp(g1.dk + o, g2.dk + o, sz) != 0;
            nkv += memcmp(g1.dv + o, g2.dv + o, sz) != 0;
            nq += memcmp(g1.dq + o, g2.dq + o, sz) != 0;
        }
        CHECK(nkv == 0, "%s: %s: keys split at %lld, %lld, %lld: %d dK/dV rows differ", f->name,
              what, (long long)splits[s][0], (long long)splits[s][1], (long long)splits[s][2],
              nkv);
        if (tiles)
            CHECK(nq == 0, "%s: %s: keys split at tiles %lld, %lld: %d dQ rows differ", f->name,
                  what, (long long)splits[s][0], (long long)splits[s][1], nq);
    }

    /* unread data (causal): Q, dO, stats, delta rows before k_begin; K, V rows
     * outside [k_begin, k_end) (non-causal: only K, V) */
    {
        const int64_t kb = T / 3, ke = T - T / 4;
        if (kb < ke) {
            grads g3;
            grads_alloc(&g3, T, HD);
            run_into(f, &h, &g3, dq0, kb, ke);
            head hp = h;
            hp.x = malloc(sizeof(float) * (size_t)(T * h.ld));
            hp.dout = malloc(sizeof(float) * (size_t)(T * h.lddo));
            hp.stats = malloc(sizeof(float) * (size_t)(2 * T));
            hp.delta = malloc(sizeof(float) * (size_t)T);
            memcpy(hp.x, h.x, sizeof(float) * (size_t)(T * h.ld));
            memcpy(hp.dout, h.dout, sizeof(float) * (size_t)(T * h.lddo));
            memcpy(hp.stats, h.stats, sizeof(float) * (size_t)(2 * T));
            memcpy(hp.delta, h.delta, sizeof(float) * (size_t)T);
            for (int64_t t = 0; t < T; t++) {
                if (t < kb || t >= ke)
                    for (int64_t d = 0; d < HD; d++)
                        hp.x[t * h.ld + h.ko + d] = hp.x[t * h.ld + h.vo + d] = NAN;
                if (causal && t < kb) {
                    for (int64_t d = 0; d < HD; d++) {
                        hp.x[t * h.ld + h.qo + d] = NAN;
                        hp.dout[t * h.lddo + d] = NAN;
                    }
                    hp.stats[2 * t] = hp.stats[2 * t + 1] = hp.delta[t] = NAN;
                }
            }
            run_into(f, &hp, &g2, dq0, kb, ke);
            CHECK(bits_differ(&g3, &g2, T, HD, 0) == 0,
                  "%s: %s: keys [%lld,%lld): data outside the range was read", f->name, what,
                  (long long)kb, (long long)ke);
            free(hp.x);
            free(hp.dout);
            free(hp.stats);
            free(hp.delta);
            grads_free(&g3);
        }
    }
    free(dq0);
    grads_free(&g1);
    grads_free(&g2);
    head_free(&h);
}

int main(void) {
    rng_state = 0x2545F4914F6CDD1Dull; /* this test's stream */
    int w32 = -1; /* the AVX-512 tunables on AVX2: gen16's and avx512's twin */
    const mha__kernels *k_avx2 = mha__kernels_get(MHA_ISA_AVX2);
    const mha__kernels *k_avx512 = mha__kernels_get(MHA_ISA_AVX512);
    (void)k_avx512;
#if defined(MHA_HAVE_AVX2_KERNELS)
    if (k_avx2) {
        kern[n_kern++] =
            (bwd_kernel){"avx2", k_avx2->attn_bwd, k_avx2->attn_bwd_scratch, 0, -1, 1};
#if MHA_TEST_EMULATIONS
        w32 = n_kern++;
        kern[w32] = (bwd_kernel){"avx2w32", mha__attn_bwd_avx2w32, mha__attn_bwd_scratch_avx2w32,
                                 0, -1, 1};
        /* the emulation is slow (under ASan above all): every other case
         * of sections 1 and 2, and all of section 3 */
        kern[n_kern++] = (bwd_kernel){"gen16", mha__attn_bwd_gen16, mha__attn_bwd_scratch_gen16, 0,
                                      w32, 2};
#endif
    }
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
    if (k_avx512)
        kern[n_kern++] = (bwd_kernel){"avx512", k_avx512->attn_bwd, k_avx512->attn_bwd_scratch, 0,
                                      w32, 1};
    else if (MHA_TEST_EMULATIONS)
        printf("AVX-512 kernel compiled, but this CPU lacks AVX-512 F/BW/DQ/VL: tested through "
               "its emulation (gen16) only\n");
    else
        CHECK(0, AVX512_UNTESTED);
#endif
    (void)w32;
    if (n_kern == 0) TEST_SKIP("test_attn_bwd", "no fused backward kernel on this CPU or build");
    if (!k_avx2 || k_avx2->attn_bwd == mha__attn_bwd_ref)
        TEST_SKIP("test_attn_bwd", "the AVX2 table has no fused backward");

    /* 1. shapes x causal, dropout cycling, key ranges cycling */
    static const int64_t Ts[] = {1, 2, 5, 16, 17, 63, 64, 65, 100, 129, 200, 300};
    static const int64_t HDs[] = {1, 3, 8, 17, 64, 80};
    const int nT = (int)(sizeof Ts / sizeof Ts[0]), nH = (int)(sizeof HDs / sizeof HDs[0]);
    int n = 0;
    for (int ti = 0; ti < nT; ti++)
        for (int hi = 0; hi < nH; hi++)
            for (int c = 0; c < 2; c++, n++) {
                const int64_t T = Ts[ti], HD = HDs[hi];
                /* time (under ASan too): a third of the largest shapes */
                if (T * T * HD > 100 * 100 * 64 && (ti + hi + c) % 3) continue;
                const mha__drop_mode dm = (mha__drop_mode)(n % 3 == 0 ? MHA_DROP_NONE
                                                           : n % 3 == 1 ? MHA_DROP_BITMASK
                                                                        : MHA_DROP_PHILOX);
                int64_t kb = 0, ke = T;
                switch (n % 4) {
                case 1: kb = (int64_t)(rng_u64() % (uint64_t)T); break;
                case 2: ke = 1 + (int64_t)(rng_u64() % (uint64_t)T); break;
                case 3:
                    kb = (int64_t)(rng_u64() % (uint64_t)T);
                    ke = kb + 1 + (int64_t)(rng_u64() % (uint64_t)(T - kb));
                    break;
                default: break;
                }
                const float qmul = n % 5 == 0 ? 4.0f : 1.0f; /* sharper softmax */
                check_case(T, HD, n % 3, c == 1, dm, n % 2 ? 0.1 : 0.5, kb, ke, qmul, n % 2 == 1);
            }
    /* key ranges: aligned, one key, the last key, odd ends */
    static const int64_t ranges[][2] = {{0, 1},    {199, 200}, {3, 70}, {64, 128}, {60, 200},
                                        {1, 199},  {128, 200}, {0, 64}, {63, 65},  {100, 101}};
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (int c = 0; c < 2; c++)
            check_case(200, r % 2 ? 17 : 8, 1, c == 1, (mha__drop_mode)(r % 3 == 0 ? 0 : r % 3 + 1),
                       0.25, ranges[r][0], ranges[r][1], 2.0f, true);
    /* several key tiles, ranges across their boundaries */
    /* (the longest tiles: [129, 639) is one 510-key tile at KB = 256, and
     * [65, 319) one of 254 keys at KB = 128) */
    static const int64_t long_ranges[][2] = {{0, 700},   {250, 520}, {256, 512}, {1, 699},
                                             {511, 513}, {129, 639}, {65, 319}};
    for (size_t r = 0; r < sizeof long_ranges / sizeof long_ranges[0]; r++)
        for (int c = 0; c < 2; c++)
            check_case(700, r % 2 ? 3 : 8, 2, c == 1, (mha__drop_mode)(r % 3 == 0 ? 0 : r % 3 + 1),
                       0.25, long_ranges[r][0], long_ranges[r][1], 1.0f, r % 2 == 0);

    /* 2. row layouts */
    for (int c = 0; c < 2; c++) {
        head h;
        /* GPT-2 small (MultiHeadAttention): ld = 3 * 768, head 5 of 12 */
        head_fill(&h, 130, 64, 2304, 5 * 64, 768 + 5 * 64, 1536 + 5 * 64, c == 1, MHA_DROP_PHILOX,
                  0.1, 1.0f);
        check_head(&h, 0, 130, true, "gpt2 ld=2304");
        check_head(&h, 64, 130, false, "gpt2 ld=2304");
        head_free(&h);
        /* the wrapper: head 2 of 4 at 3*HD*2, HD = 16 */
        head_fill(&h, 77, 16, 4 * 48, 2 * 48, 2 * 48 + 16, 2 * 48 + 32, c == 1, MHA_DROP_BITMASK,
                  0.3, 1.0f);
        check_head(&h, 0, 77, false, "wrapper ld=192");
        head_free(&h);
        /* a crowding stride: the kernel copies the key tiles */
        head_fill(&h, 150, 64, 1024, 0, 64, 128, c == 1, MHA_DROP_NONE, 0.0, 2.0f);
        check_head(&h, 0, 150, false, "ld=1024");
        check_head(&h, 10, 140, true, "ld=1024");
        head_free(&h);
    }

    /* 3. determinism */
    for (int k = 0; k < n_kern; k++) {
        check_determinism(&kern[k], 420, kern[k].every > 1 ? 5 : 24, true, MHA_DROP_NONE);
        check_determinism(&kern[k], 131, 3, true, MHA_DROP_BITMASK);
        if (kern[k].every > 1) continue; /* the slow emulation: its twin has the rest */
        check_determinism(&kern[k], 530, 3, false, MHA_DROP_BITMASK);
        check_determinism(&kern[k], 100, 64, true, MHA_DROP_PHILOX);
        check_determinism(&kern[k], 150, 17, false, MHA_DROP_PHILOX);
    }

    for (int k = 0; k < n_kern; k++)
        printf("max error of %s / max|gradient| = %.3g (tolerance %.1g)\n", kern[k].name,
               kern[k].worst, TOL);
    return TEST_END("test_attn_bwd");
}
