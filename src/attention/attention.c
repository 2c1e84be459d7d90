/* attention.c — runs one attention kernel per (batch, head, query block),
 * in parallel: head by head, the costliest (last) query blocks of a head
 * first (with PyTorch's mask, the first head's in row order, as its rows
 * are drawn), each thread first taking its share of the heads, the band of
 * the batch whose QKV rows its share of the GEMM's tiles wrote
 * (mha__parallel_units). The backward's (batch, head, key chunk) tasks are
 * dealt the same way. At T >= 512 over a packed QKV buffer, each thread
 * first copies the head's keys and values to contiguous scratch
 * (fwd_packs_heads). The result of every row is computed by one kernel
 * call with key tiles at fixed positions, so it does not depend on the
 * number of threads. */
#include "attention.h"

#include "common/common.h"
#include "generator/generator.h"
#include "kernels/philox.h"

#include <math.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* Below this many multiply-adds a parallel region costs more than it saves
 * (and on a loaded machine a descheduled thread stalls the whole team): the
 * same tasks then run on the calling thread. */
#define MHA_PAR_MIN_WORK 2e6

static bool worth_threads(const mha__attention_desc *d) {
    /* A decode step's rows (through q_rows) cost few multiply-adds but
     * read every head's cached keys and values from memory (the weights
     * streamed since evicted them): on the 2-core Zen 5, 64 steps after a
     * 4-token prompt spent 29 us a layer on the calling thread, 24 on two. */
    if (d->q_rows && d->B * d->H > 1) return true;
    return (double)d->B * (double)d->H * (double)d->T * (double)d->T * (double)d->HD > MHA_PAR_MIN_WORK;
}

/* Query rows per task: small enough to balance 2+ threads, large enough to
 * amortise packing K. */
#define MHA_QBLOCK 64

static const mha__kernels *kernels_of(const mha__attention_desc *d) {
    return d->kernels ? d->kernels : mha__kernels_active();
}

static size_t kernel_scratch_floats(const mha__attention_desc *d) {
    return kernels_of(d)->attn_fwd_scratch(d->T, d->HD);
}

/* A fused (flash) kernel is in use: every table's but the reference's. */
static bool fused(const mha__attention_desc *d) { return kernels_of(d)->isa != MHA_ISA_REF; }

/* The PyTorch mask is drawn serially; the fast path draws it into bits
 * first (B*H*T*ceil(T/64) words, training mode only), the reference path
 * draws while it computes, row by row. */
static bool torch_mask_as_bits(const mha__attention_desc *d) {
    return d->dropout == MHA_DROPOUT_TORCH && (fused(d) || d->keep_bits);
}

/* Query blocks per head in the forward: those from t_begin's on. */
static int64_t fwd_blocks_per_head(const mha__attention_desc *d) {
    return (d->T + MHA_QBLOCK - 1) / MHA_QBLOCK - d->t_begin / MHA_QBLOCK;
}

/* Whether the forward copies each head's K and V rows into the thread's
 * scratch, (T, HD) each, contiguous, before its query blocks read them:
 * with the fused kernels, when its rows lie further apart than one K and
 * one V row (a packed QKV buffer's heads; the KV cache's are head-major
 * already) and a head has at least MHA_PACK_MIN_BLOCKS query blocks. Each
 * block reads all the keys before its last query, tile by tile, once per
 * panel. In place, GPT-2's rows lie 9 KiB apart (144 cache lines), so a
 * key tile's rows fall in a quarter of the L1's sets and a head's keys
 * and values in a quarter of the L2's: at T = 1024 they no longer fit,
 * and come from L3 again for every block. The copy is made once per (thread,
 * head) and grows with the blocks (a block needs the rows before its
 * end); the kernel reads the same values, so the bits do not change.
 * Measured on a 2-core Intel Xeon (AVX-512, 2 MiB L2; bench_attn_core, 2
 * threads, GPT-2 heads, the copies counted, with whole heads a thread,
 * below): AVX-512 kernels (8, 1024) 80.6-81.0 -> 63.2-63.9 ms, (1, 1024)
 * 8.1-8.3 -> 7.0-7.3, (8, 512) 22.8-23.0 -> 18.4-18.5; AVX2 kernels
 * (which copy crowded key tiles themselves) 100.9 -> 90.2-90.8 at
 * (8, 1024), 25.3-25.6 -> 25.3-25.6 at (8, 512). Below 8 blocks a head's
 * rows fit the L2 in place and the copy cost more than it saved: (8, 256)
 * AVX2 6.4-7.2 -> 7.6-10.3 ms, AVX-512 5.2-6.6 -> 5.6-7.4. */
#define MHA_PACK_MIN_BLOCKS 8
/* A thread takes whole heads when there are at least this many per thread
 * (the last heads then keep the threads about equally busy); otherwise
 * the threads share each head's blocks, and the copy must serve a thread
 * at least MHA_PACK_MIN_REUSE of them on average: with many threads a
 * head's blocks scatter, and each thread would copy the rows for one or
 * two blocks. */
#define MHA_HEADS_PER_THREAD 8
#define MHA_PACK_MIN_REUSE 4

static bool fwd_whole_heads(const mha__attention_desc *d) {
    return d->B * d->H >= MHA_HEADS_PER_THREAD * (int64_t)mha__max_threads();
}

static bool fwd_packs_heads(const mha__attention_desc *d) {
    const int64_t nqb = fwd_blocks_per_head(d);
    return fused(d) && d->ld_qkv > 2 * d->HD && nqb >= MHA_PACK_MIN_BLOCKS &&
           (fwd_whole_heads(d) || nqb >= MHA_PACK_MIN_REUSE * (int64_t)mha__max_threads());
}

/* A thread's scratch in the forward: the kernel's, then, with
 * fwd_packs_heads, the head whose rows it holds and how many, then its
 * K and V rows. */
typedef struct {
    int64_t head, rows;
} packed_head;

static size_t fwd_scratch_bytes(const mha__attention_desc *d, size_t *kernel_bytes) {
    const size_t kb = mha__align64(kernel_scratch_floats(d) * sizeof(float));
    *kernel_bytes = kb;
    if (!fwd_packs_heads(d)) return kb;
    size_t rows;
    if (!mha__mul_size((size_t)d->T, (size_t)d->HD, &rows) || !mha__mul_size(rows, 2 * sizeof(float), &rows) ||
        !mha__add_size(rows, 64, &rows) || !mha__add_size(kb, rows, &rows))
        return 0;
    return mha__align64(rows);
}

/* 64-bit words of mask bits for all heads; 0 on overflow. */
size_t mha__attention_keep_words(const mha__attention_desc *d) {
    size_t n;
    if (!mha__mul_size((size_t)d->B, (size_t)d->H, &n) || !mha__mul_size(n, (size_t)d->T, &n) ||
        !mha__mul_size(n, ((size_t)d->T + 63u) / 64u, &n))
        return 0;
    return n;
}

void mha__attention_desc_init(mha__attention_desc *d, int64_t B, int64_t T, int64_t H, int64_t HD) {
    memset(d, 0, sizeof *d);
    d->B = B;
    d->T = T;
    d->H = H;
    d->HD = HD;
    d->scale = (float)(1.0 / sqrt((double)HD));
}

size_t mha__attention_workspace(const mha__attention_desc *d) {
    size_t kb, per = fwd_scratch_bytes(d, &kb), total;
    if (per == 0 || !mha__mul_size(per, (size_t)mha__max_threads(), &total)) return 0;
    if (torch_mask_as_bits(d) && !d->keep_bits) {
        size_t bits, words = mha__attention_keep_words(d);
        if (words == 0 || !mha__mul_size(words, sizeof(uint64_t), &bits) ||
            !mha__add_size(total, mha__align64(bits), &total))
            return 0;
    }
    return total;
}

static void fill_head(const mha__attention_desc *d, mha__attn_args *a, int64_t b, int64_t h) {
    const int64_t T = d->T;
    const float *base = d->qkv + b * T * d->ld_qkv + h * d->head_stride;
    a->q = base + d->q_base;
    a->k = base + d->k_base;
    a->v = base + d->v_base;
    a->ldq = a->ldk = a->ldv = d->ld_qkv;
    if (d->q_rows) {
        a->q = d->q_rows + b * T * d->ld_q_rows + h * d->HD;
        a->ldq = d->ld_q_rows;
    }
    a->o = d->o + b * T * d->ldo + h * d->HD;
    a->ldo = d->ldo;
    a->lse = d->lse ? d->lse + (b * d->H + h) * T : NULL;
    a->stats = d->stats ? d->stats + (b * d->H + h) * T * 2 : NULL;
    a->T = T;
    a->HD = d->HD;
    a->scale = d->scale;
    a->causal = d->causal;
    a->drop_p = d->p;
    a->drop_scale = d->dropout != MHA_DROPOUT_OFF ? mha__dropout_scale(d->p) : 1.0f;
    a->philox_seed = d->philox_seed;
    a->philox_stream = (d->philox_offset << 32) + (uint64_t)((d->b_begin + b) * d->H + h);
    a->keep_threshold = d->dropout == MHA_DROPOUT_PHILOX ? mha__philox_keep_threshold(d->p) : 0;
}

/* Head number n in PyTorch's draw order -> (b, h). */
static void draw_order_head(const mha__attention_desc *d, int64_t n, int64_t *b, int64_t *h) {
    if (d->heads_outer) { /* wrapper: head after head, each (B, T, T) */
        *h = n / d->B;
        *b = n % d->B;
    } else { /* (B, H, T, T) */
        *b = n / d->H;
        *h = n % d->H;
    }
}

/* PyTorch's mask, drawn into bits one head at a time, in draw order: with
 * several threads the last one draws the whole mask before it computes
 * anything (fwd_unit), and any thread that needs rows not drawn yet draws
 * up to them; the other threads keep computing rows already drawn. The
 * draws are serial, the rest is not. The drawer publishes each row as it
 * is drawn, so a task waits only for the rows it reads: the first head's
 * blocks go in row order, and the other threads start on its first rows
 * while its last ones are drawn (with whole heads at a time, at (1, 1024)
 * on a 2-core Zen 5 the second thread waited out the first head's 0.15 ms
 * draw, which nothing else could run before). */
typedef struct {
    const mha__attention_desc *d;
    uint64_t *bits;
    int64_t rows; /* rows drawn so far, head after head in draw order
                     (head n's row i is row n*T + i); atomic */
#if defined(MHA_HAVE_OPENMP)
    omp_lock_t lock; /* held by the drawing thread */
#endif
} mask_drawer;

static void draw_head(mask_drawer *md, int64_t n) {
    const mha__attention_desc *d = md->d;
    const int64_t T = d->T, ld = (T + 63) / 64;
    int64_t b, h;
    draw_order_head(d, n, &b, &h);
    uint64_t *head = md->bits + ((b * d->H + h) * T) * ld;
    /* causal: row i's keys past i are masked before the dropout, so only
     * the words of its first i + 1 bits are computed, the draws of all T
     * consumed: a 1024 x 1024 head's mask in 0.38 ms instead of 0.52
     * (2-core Zen 5, AVX-512; AVX2 0.83 of the time), 0.26 since the keep
     * bits temper only the words they read (keep_bits_mt), 0.16-0.18
     * since the twist runs in whole vectors (mt_body.h): the serial part
     * of a training forward with PyTorch's mask */
    for (int64_t i = 0; i < T; i++) {
        mha__generator_keep_bits_prefix(d->gen, head + i * ld, (size_t)T, d->causal ? (size_t)(i + 1) : (size_t)T,
                                        d->p);
        __atomic_store_n(&md->rows, n * T + i + 1, __ATOMIC_RELEASE);
    }
}

/* Returns once rows [0, need) (in draw order) are drawn: by the calling
 * thread, whole heads under the lock, or, while another thread holds it,
 * by that one. */
static void ensure_rows(mask_drawer *md, int64_t need) {
#if defined(MHA_HAVE_OPENMP)
    unsigned spins = 0;
#endif
    while (__atomic_load_n(&md->rows, __ATOMIC_ACQUIRE) < need) {
#if defined(MHA_HAVE_OPENMP)
        if (!omp_test_lock(&md->lock)) {
            mha__spin_pause(&spins);
            continue;
        }
#endif
        for (int64_t r; (r = __atomic_load_n(&md->rows, __ATOMIC_ACQUIRE)) < need;) draw_head(md, r / md->d->T);
#if defined(MHA_HAVE_OPENMP)
        omp_unset_lock(&md->lock);
#endif
    }
}

/* The forward's tasks: (head, query block) pairs, a head's blocks
 * together. */
typedef struct {
    const mha__attention_desc *d;
    mask_drawer *md;
    const mha__kernels *k;
    char *scratch;
    size_t per;               /* a thread's scratch bytes */
    size_t kernel_bytes;      /* of which the kernel's; the packed head after them */
    bool pack;                /* fwd_packs_heads */
    int64_t nqb0, nqb, ntasks; /* the first query block, blocks per head, tasks */
    int nt;                    /* threads the scratch has room for */
    int64_t chunk;             /* tasks a thread takes at a time: 1, or a head's */
    int64_t next;              /* the next unit not taken (a team's) */
} fwd_tasks;

static void fwd_task(const fwd_tasks *ft, int64_t task, int tid) {
    const mha__attention_desc *d = ft->d;
    mask_drawer *md = ft->md;
    const int64_t T = d->T, H = d->H, nqb = ft->nqb, keep_ld = (T + 63) / 64;
    const int64_t n = task / nqb, k = task % nqb; /* head n's k-th task */
    int64_t qb, b, h;
    if (md->bits) {
        /* Heads in draw order so that drawing overlaps computing; within
         * a head, the costliest (last) query blocks first, but for the
         * first head, whose rows are being drawn. */
        qb = n == 0 ? k : nqb - 1 - k;
        draw_order_head(d, n, &b, &h);
    } else {
        /* Head by head, so a head's K and V stay in cache across its
         * query blocks; within a head the costliest (last) blocks
         * first, so the cheap ones even out the threads at the end. */
        qb = nqb - 1 - k;
        b = n / H;
        h = n % H;
    }
    mha__attn_args a = {0};
    fill_head(d, &a, b, h);
    a.q_begin = (qb + ft->nqb0) * MHA_QBLOCK;
    a.q_end = a.q_begin + MHA_QBLOCK < T ? a.q_begin + MHA_QBLOCK : T;
    if (a.q_begin < d->t_begin) a.q_begin = d->t_begin;
    if (md->bits) {
        ensure_rows(md, n * T + a.q_end);
        a.drop = MHA_DROP_BITMASK;
        a.keep = md->bits + ((b * H + h) * T) * keep_ld;
        a.keep_ld = keep_ld;
    } else if (d->dropout == MHA_DROPOUT_PHILOX) {
        a.drop = MHA_DROP_PHILOX;
    }
    char *own = ft->scratch + ft->per * (size_t)tid;
    if (ft->pack) {
        packed_head *ph = (packed_head *)(void *)(own + ft->kernel_bytes);
        float *kp = (float *)(void *)(own + ft->kernel_bytes + 64), *vp = kp + T * d->HD;
        const int64_t head = b * H + h, need = d->causal ? a.q_end : T;
        if (ph->head != head) {
            ph->head = head;
            ph->rows = 0;
        }
        for (int64_t r = ph->rows; r < need; r++) {
            memcpy(kp + r * d->HD, a.k + r * a.ldk, (size_t)d->HD * sizeof(float));
            memcpy(vp + r * d->HD, a.v + r * a.ldv, (size_t)d->HD * sizeof(float));
        }
        if (need > ph->rows) ph->rows = need;
        a.k = kp;
        a.v = vp;
        a.ldk = a.ldv = d->HD;
    }
    ft->k->attn_fwd(&a, (float *)(void *)own);
}

/* A unit of the forward: chunk u of the tasks. */
static bool fwd_unit(void *arg, int64_t u, int t) {
    const fwd_tasks *ft = arg;
    /* With PyTorch's mask the last thread first draws all of it, while
     * the others compute the heads drawn and then take over the end of its
     * share, so none waits on a head drawn on demand. Until
     * 2026-12-05 a thread drew up to its share's first head and then one
     * head ahead of its tasks, and a head's first task waited for the next
     * head's draw: the attention layer's forward with the mask took
     * 1.84-2.71 ms over eval at (1, 1024), 1.43-2.17 since (2-core Zen 5,
     * 4 alternated runs each; the draw alone 2.0 ms on one thread). */
    if (ft->md->bits && ft->nt > 1 && t == ft->nt - 1) ensure_rows(ft->md, ft->d->B * ft->d->H * ft->d->T);
    for (int64_t task = u * ft->chunk; task < (u + 1) * ft->chunk && task < ft->ntasks; task++) fwd_task(ft, task, t);
    return true;
}

/* A team thread's share: the next unit not taken, until none is left (as
 * schedule(dynamic)); a thread past the scratch's room takes none. */
static void fwd_team(void *arg, int t, int nt) {
    (void)nt;
    fwd_tasks *ft = arg;
    if (t >= ft->nt) return;
    const int64_t units = (ft->ntasks + ft->chunk - 1) / ft->chunk;
    for (int64_t u; (u = __atomic_fetch_add(&ft->next, 1, __ATOMIC_RELAXED)) < units;) fwd_unit(ft, u, t);
}

mha_status mha__attention_forward(const mha__attention_desc *d, void *ws, size_t ws_size) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    const size_t need = mha__attention_workspace(d);
    if (need == 0) return mha__fail(MHA_ERR_OVERFLOW, "attention workspace size overflows");
    if (ws_size < need)
        return mha__fail(MHA_ERR_WORKSPACE, "attention needs %zu bytes of workspace, got %zu",
                         need, ws_size);
    const int nt = mha__max_threads();
    const bool par = worth_threads(d);
    size_t kernel_bytes;
    const size_t per = fwd_scratch_bytes(d, &kernel_bytes);
    char *scratch = ws;
    const int64_t T = d->T, B = d->B, H = d->H;

    if (d->dropout == MHA_DROPOUT_TORCH && !torch_mask_as_bits(d)) {
        /* Reference path: draw while computing, heads in PyTorch's order. */
        for (int64_t n = 0; n < B * H; n++) {
            int64_t b, h;
            draw_order_head(d, n, &b, &h);
            mha__attn_args a = {0};
            fill_head(d, &a, b, h);
            a.drop = MHA_DROP_GENERATOR;
            a.gen = d->gen;
            a.q_begin = 0;
            a.q_end = T;
            mha__attn_fwd_ref(&a, (float *)(void *)scratch);
        }
        return MHA_OK;
    }

    mask_drawer md;
    memset(&md, 0, sizeof md);
    md.d = d;
    if (torch_mask_as_bits(d)) {
        md.bits = d->keep_bits ? d->keep_bits : (uint64_t *)(void *)(scratch + per * (size_t)nt);
#if defined(MHA_HAVE_OPENMP)
        omp_init_lock(&md.lock);
#endif
    }

    const int64_t nqb0 = d->t_begin / MHA_QBLOCK; /* blocks below t_begin: none */
    const int64_t nqb = fwd_blocks_per_head(d);
    const bool pack = fwd_packs_heads(d);
    if (pack)
        for (int t = 0; t < nt; t++) {
            packed_head *ph = (packed_head *)(void *)(scratch + per * (size_t)t + kernel_bytes);
            ph->head = -1;
            ph->rows = 0;
        }
    /* With packed heads and enough of them for the threads to end
     * together (a head's blocks take alike), a thread takes whole heads:
     * each head is copied once, not once per thread, and stays in one
     * core's cache. (8, 1024) on the 2-core Xeon: 67.3 -> 63.2-63.9 ms,
     * AVX2 kernels 97 -> 90. */
    const int64_t chunk = pack && fwd_whole_heads(d) ? nqb : 1;
    fwd_tasks ft = {d, &md, kernels_of(d), scratch, per, kernel_bytes, pack, nqb0, nqb, B * H * nqb, nt, chunk, 0};
    if (par && mha__team_run(fwd_team, &ft)) {
        /* done by the decode step's team */
    } else {
        /* Each thread its share of the batch, as the QKV GEMM's rows (a
         * thread done with its share takes from the end of another's).
         * With PyTorch's mask the last thread draws it first (fwd_unit)
         * while the others compute the heads drawn. With a thread's share
         * and a draw up to it, at (8, 1024) and (8, 256) on the 2-core
         * Xeon the training forward took 196.5-196.8 and 37.0-38.1 ms,
         * against 197.9-198.3 and 38.6-38.7 with the next task to
         * whichever thread was free; (1, 1024) alike. */
        mha__parallel_units((ft.ntasks + ft.chunk - 1) / ft.chunk, par ? nt : 1, fwd_unit, &ft);
    }
#if defined(MHA_HAVE_OPENMP)
    if (md.bits) omp_destroy_lock(&md.lock);
#endif
    return MHA_OK;
}

/* ---- backward ----------------------------------------------------------- */

/* Keys per chunk are multiples of this (the kernels' key tiles stay whole). */
#define MHA_KCHUNK_ALIGN 64
/* Enough (batch, head, chunk) tasks to keep a few threads busy: heads are
 * cut into key chunks until there are about this many tasks. A function of
 * the shape only, as the chunks fix the order of dQ's sums. A chunk is not
 * free: it packs its rows' Q and dO again and leaves a partial dQ to add,
 * which cost 5-14% of the backward at 12 heads (B = 1 or 2, T = 256 to
 * 1024) when the count was 32. So a head is cut only below 12 (batch, head)
 * pairs; docs/performance.md has the figures. */
#ifndef MHA_BWD_MIN_TASKS
#define MHA_BWD_MIN_TASKS 12
#endif

static int64_t bwd_chunks(const mha__attention_desc *d) {
    const int64_t bh = d->B * d->H, max_c = (d->T + MHA_KCHUNK_ALIGN - 1) / MHA_KCHUNK_ALIGN;
    int64_t c = (MHA_BWD_MIN_TASKS + bh - 1) / bh;
    return c < 1 ? 1 : c > max_c ? max_c : c;
}

/* Keys [*k0, *k1) of chunk c of n. Causal: the early keys are seen by more
 * rows, so the chunks hold about equal numbers of (row, key) pairs. */
static void chunk_keys(const mha__attention_desc *d, int64_t c, int64_t n, int64_t *k0,
                       int64_t *k1) {
    const int64_t T = d->T, A = MHA_KCHUNK_ALIGN;
    int64_t bounds[2];
    for (int e = 0; e < 2; e++) {
        const int64_t cc = c + e;
        int64_t k;
        if (cc <= 0) {
            k = 0;
        } else if (cc >= n) {
            k = T;
        } else {
            if (!d->causal) k = T * cc / n;
            else /* pairs left of k: T^2/2 - (T-k)^2/2 = cc/n of T^2/2 */
                k = T - (int64_t)((double)T * sqrt(1.0 - (double)cc / (double)n));
            k = (k + A / 2) / A * A;
        }
        bounds[e] = k > T ? T : k;
    }
    *k0 = bounds[0];
    *k1 = bounds[1] < bounds[0] ? bounds[0] : bounds[1];
}

static size_t bwd_scratch_floats(const mha__attention_desc *d) {
    return kernels_of(d)->attn_bwd_scratch(d->T, d->HD);
}

typedef struct {
    size_t per, scratch, delta, partial, total;
} bwd_layout;

static bool bwd_plan(const mha__attention_desc *d, bwd_layout *L) {
    const size_t B = (size_t)d->B, H = (size_t)d->H, T = (size_t)d->T, HD = (size_t)d->HD;
    const size_t chunks = (size_t)bwd_chunks(d);
    size_t all, bht, part;
    L->per = mha__align64(bwd_scratch_floats(d) * sizeof(float));
    if (!mha__mul_size(L->per, (size_t)mha__max_threads(), &all)) return false;
    if (!mha__mul_size(B * H, T, &bht) || !mha__mul_size(bht, sizeof(float), &L->delta)) return false;
    /* dQ of chunks 1.. (chunk 0 writes into dqkv directly) */
    if (!mha__mul_size(bht, HD, &part) || !mha__mul_size(part, chunks - 1, &part) ||
        !mha__mul_size(part, sizeof(float), &part))
        return false;
    L->scratch = 0;
    L->delta = mha__align64(all);
    if (!mha__add_size(L->delta, mha__align64(bht * sizeof(float)), &L->partial)) return false;
    return mha__add_size(L->partial, part, &L->total);
}

size_t mha__attention_backward_workspace(const mha__attention_desc *d) {
    bwd_layout L;
    return bwd_plan(d, &L) ? L.total : 0;
}

/* y[0, n) += x[0, n), in groups of 8 (a loop the compiler vectorises at
 * -O2; a plain loop over n it leaves scalar). Each element is one add, so
 * the grouping does not change a bit. */
static void add_row(float *restrict y, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) y[i + j] += x[i + j];
    for (; i < n; i++) y[i] += x[i];
}

/* The backward's tasks: (batch, head, key chunk) in that order, so that a
 * thread's share of them is a band of the batch (mha__parallel_units). */
typedef struct {
    const mha__attention_desc *d;
    const float *dout;
    int64_t ld_dout;
    float *dqkv;
    char *base;
    const bwd_layout *L;
    const float *delta;
    float *partial;
    int64_t nc;
    const mha__kernels *k;
} bwd_tasks;

static bool bwd_unit(void *arg, int64_t task, int tid) {
    const bwd_tasks *bt = arg;
    const mha__attention_desc *d = bt->d;
    const int64_t T = d->T, H = d->H, HD = d->HD, BH = d->B * H, nc = bt->nc, keep_ld = (T + 63) / 64;
    const int64_t bh = task / nc, c = task % nc, b = bh / H, h = bh % H;
    mha__attn_args f = {0};
    fill_head(d, &f, b, h);
    mha__attn_bwd_args a = {0};
    const int64_t off = b * T * d->ld_qkv + h * d->head_stride;
    a.q = f.q;
    a.k = f.k;
    a.v = f.v;
    a.ldq = a.ldk = a.ldv = d->ld_qkv;
    a.dout = bt->dout + b * T * bt->ld_dout + h * HD;
    a.lddo = bt->ld_dout;
    a.stats = d->stats + bh * T * 2;
    a.delta = bt->delta + bh * T;
    if (c == 0) {
        a.dq = bt->dqkv + off + d->q_base;
        a.lddq = d->ld_qkv;
    } else {
        a.dq = bt->partial + ((c - 1) * BH + bh) * T * HD;
        a.lddq = HD;
    }
    a.dq_set = true; /* each chunk's dQ from zero, not read */
    a.dk = bt->dqkv + off + d->k_base;
    a.dv = bt->dqkv + off + d->v_base;
    a.lddk = a.lddv = d->ld_qkv;
    a.T = T;
    a.HD = HD;
    chunk_keys(d, c, nc, &a.k_begin, &a.k_end);
    a.scale = d->scale;
    a.causal = d->causal;
    a.drop_scale = f.drop_scale;
    if (d->dropout == MHA_DROPOUT_TORCH) {
        a.drop = MHA_DROP_BITMASK;
        a.keep = d->keep_bits + bh * T * keep_ld;
        a.keep_ld = keep_ld;
    } else if (d->dropout == MHA_DROPOUT_PHILOX) {
        a.drop = MHA_DROP_PHILOX;
        a.philox_seed = f.philox_seed;
        a.philox_stream = f.philox_stream;
        a.keep_threshold = f.keep_threshold;
    }
    bt->k->attn_bwd(&a, (float *)(void *)(bt->base + bt->L->scratch + bt->L->per * (size_t)tid));
    return true;
}

/* Rows a band: every head of a band's rows before the next band's, so the
 * rows, read once from memory, stay in L1 across their heads. The delta
 * of GPT-2's 96 heads at (8, 1024) from memory (dO and O 25 MB each), one
 * Zen 5 core: 11.4-12.1 ms as the plain loop, head after head and row
 * after row; 6.2-6.5 head after head with the kernel's eight rows side by
 * side; 3.0-3.1 in bands of 8 rows, 4.3-4.5 in bands of 64. */
#define MHA_DELTA_BAND 8
/* Rows a thread takes at a time in the backward's delta. */
#define MHA_DELTA_ROWS 256

void mha__attention_delta_rows(float *delta, int64_t T, int64_t H, int64_t HD, int64_t r0, int64_t n,
                               const float *dout, int64_t ld_dout, const float *o, int64_t ldo) {
    const mha__kernels *k = mha__kernels_active();
    for (int64_t r = 0; r < n;) { /* a band of one batch element's rows at a time */
        const int64_t b = (r0 + r) / T, t = (r0 + r) % T;
        int64_t m = n - r < T - t ? n - r : T - t;
        if (m > MHA_DELTA_BAND) m = MHA_DELTA_BAND;
        for (int64_t h = 0; h < H; h++)
            k->dot_rows(delta + (b * H + h) * T + t, dout + r * ld_dout + h * HD, ld_dout, o + r * ldo + h * HD, ldo,
                        m, HD);
        r += m;
    }
}

mha_status mha__attention_backward(const mha__attention_desc *d, const float *dout,
                                   int64_t ld_dout, float *dqkv, void *ws, size_t ws_size) {
    const mha_status threads_st = mha__threads_ready(); /* before any parallel region */
    if (threads_st != MHA_OK) return threads_st;
    bwd_layout L;
    if (!bwd_plan(d, &L)) return mha__fail(MHA_ERR_OVERFLOW, "attention backward workspace overflows");
    if (ws_size < L.total)
        return mha__fail(MHA_ERR_WORKSPACE, "attention backward needs %zu bytes of workspace, got %zu",
                         L.total, ws_size);
    if (!d->stats)
        return mha__fail(MHA_ERR_ARGUMENT, "attention backward needs the forward's row statistics");
    if (d->dropout == MHA_DROPOUT_TORCH && !d->keep_bits)
        return mha__fail(MHA_ERR_ARGUMENT, "attention backward needs the forward's dropout mask");
    const int nt = mha__max_threads();
    const bool par = worth_threads(d);
    char *base = ws;
    float *delta_ws = (float *)(void *)(base + L.delta);
    const float *delta = d->delta ? d->delta : delta_ws;
    float *partial = (float *)(void *)(base + L.partial);
    const int64_t B = d->B, T = d->T, H = d->H, HD = d->HD, BH = B * H;
    const int64_t nc = bwd_chunks(d);
    const mha__kernels *k = kernels_of(d);

    /* delta = rowsum(dO * O) per head, unless given: the threads take
     * blocks of MHA_DELTA_ROWS rows, every head of them */
    if (!d->delta) {
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
#endif
        for (int64_t r0 = 0; r0 < B * T; r0 += MHA_DELTA_ROWS) {
            const int64_t n = B * T - r0 < MHA_DELTA_ROWS ? B * T - r0 : MHA_DELTA_ROWS;
            mha__attention_delta_rows(delta_ws, T, H, HD, r0, n, dout + r0 * ld_dout, ld_dout, d->o + r0 * d->ldo,
                                      d->ldo);
        }
    }

    const bwd_tasks bt = {d, dout, ld_dout, dqkv, base, &L, delta, partial, nc, k};
    mha__parallel_units(BH * nc, par ? nt : 1, bwd_unit, (void *)&bt);

    /* dQ = chunk 0's rows (written in place) + the other chunks' rows, in
     * chunk order. A chunk writes only the rows that see its keys (causal:
     * from its first key on; none if it has no key), and a row no chunk
     * wrote is zero. The bits are those of summing every chunk's rows from
     * zero, the unwritten ones as zeros: adding +0.0 to a sum that starts
     * at +0.0 changes no bit (such a sum is never -0.0). One chunk, keys
     * [0, T), writes every row. */
    if (nc > 1) {
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(nt) if (par)
#endif
        for (int64_t bh = 0; bh < BH; bh++) {
            const int64_t b = bh / H, h = bh % H;
            float *dq = dqkv + b * T * d->ld_qkv + h * d->head_stride + d->q_base;
            for (int64_t c = 0; c < nc; c++) {
                int64_t k0, k1;
                chunk_keys(d, c, nc, &k0, &k1);
                const int64_t lo = k0 >= k1 ? T : d->causal ? k0 : 0; /* its first row */
                if (c == 0) {
                    for (int64_t t = 0; t < lo; t++) memset(dq + t * d->ld_qkv, 0, (size_t)HD * sizeof(float));
                    continue;
                }
                const float *part = partial + ((c - 1) * BH + bh) * T * HD;
                for (int64_t t = lo; t < T; t++) add_row(dq + t * d->ld_qkv, part + t * HD, HD);
            }
        }
    }
    return MHA_OK;
}
