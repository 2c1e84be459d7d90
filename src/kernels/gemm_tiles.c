/* gemm_tiles.c — the threaded GEMM driver (drivers.h): mha__sgemm and its
 * bias and epilogue forms.
 *
 * Determinism by design: mha__sgemm cuts C into tiles whose sizes are a
 * function of (M, N, K) alone (plan_tiles), computes each tile with one
 * single-threaded call of the active table's gemm kernel (the backend, the
 * builtin packed GEMM, or the reference loops), and deals the tiles to
 * OpenMP threads, each its share of them first, a band of C's rows
 * (mha__parallel_units: the attention after a QKV GEMM and the out_proj
 * after the attention find their rows in the cache of the core that wrote
 * them). An element of C is therefore computed by the same call on
 * the same operands whatever the thread count, and OpenBLAS's or oneDNN's
 * own threading (whose splits depend on the thread count) never runs. */
#include "common/common.h"
#include "drivers.h"
#include "gemm_backend.h"

#include <stdio.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* ---- tiles ------------------------------------------------------------------- */

/* Tile targets (measured on the project machines; see bench/bench_sgemm):
 * large enough that the backend's packing of A and B is a few percent of a
 * tile's work, small enough for a few tiles per thread on big GEMMs. On a
 * 2-core Zen 3 with oneDNN, 512 x 768 tiles ran 135-153 GFLOP/s at the
 * projection shapes against 139-151 for one multi-threaded dnnl_sgemm call;
 * 256 x 768, 384 x 384 and 768 x 768 were within a few percent. */
#ifndef MHA_GEMM_TILE_M
#define MHA_GEMM_TILE_M 512
#endif
#ifndef MHA_GEMM_TILE_N
#define MHA_GEMM_TILE_N 768
#endif

typedef struct {
    int64_t mb, nb;   /* tile size (the last row/column of tiles may be smaller) */
    int64_t nm, nn;   /* tiles down and across */
} tile_plan;

/* n cut into `parts` near-equal parts, rounded up to 16. */
static void cut_parts(int64_t n, int64_t parts, int64_t *size, int64_t *count) {
    int64_t s = (n + parts - 1) / parts;
    s = (s + 15) / 16 * 16;
    *size = s;
    *count = (n + s - 1) / s;
}

/* n cut into ceil(n / target) near-equal parts, rounded up to 16. */
static void cut(int64_t n, int64_t target, int64_t *size, int64_t *count) {
    cut_parts(n, (n + target - 1) / target, size, count);
}

/* A function of the shape only: never of the thread count. Smaller GEMMs
 * get smaller tiles (down to 64 x 128) so that they still split into at
 * least 4, and large ones into at least 12 (more tiles cost packing; fewer
 * leave cores idle: the tiles are equal, so a count that 2, 3 and 4
 * threads do not divide, like the 5 of a 2304 x 768 weight gradient,
 * left one of 2 cores idle for a sixth of the product). A weight gradient
 * (trans_a: C = A^T B, K the batch's rows) keeps N whole (up to 768) and
 * cuts M into just enough parts, at least 64 rows each: oneDNN ran a 2304
 * x 768 x 8192 one at 0.87-0.89 of the forward's rate in 256 x 384 tiles
 * (2-core Zen 5); one thread ran 128 x 768 tiles of it at 187.5 GFLOP/s,
 * 64 x 768 at 180.1, 256 x 384 at 177.0, 256 x 192 at 170.2. Halving a
 * 512-row target cut that 2304 into 18 tiles of 128, which 4 threads take
 * 5, 5, 4, 4; 12 of 192 divide evenly and ran 1.8-2.2% faster on 2 threads
 * (one program alternating the two, 2 runs; the same bits from oneDNN). */
static tile_plan plan_tiles(bool trans_a, int64_t M, int64_t N, int64_t K) {
    tile_plan p;
    int64_t tm = MHA_GEMM_TILE_M, tn = MHA_GEMM_TILE_N;
    const double work = (double)M * (double)N * (double)K;
    if (work < 2e6) { /* one call: not worth splitting */
        p.mb = M, p.nb = N, p.nm = 1, p.nn = 1;
        return p;
    }
    const int64_t want = work >= 1e8 ? 12 : 4;
    if (trans_a) {
        /* A weight gradient: N cut at tn, M into just enough parts for
         * `want` tiles (or more, of at most tm rows), each at least 64. */
        cut(N, tn, &p.nb, &p.nn);
        int64_t parts = (M + tm - 1) / tm;
        const int64_t need = (want + p.nn - 1) / p.nn;
        if (parts < need) parts = need;
        if ((M + parts - 1) / parts >= 64) {
            cut_parts(M, parts, &p.mb, &p.nm);
            if (p.nm * p.nn >= want) return p;
        }
    }
    for (;;) {
        cut(M, tm, &p.mb, &p.nm);
        cut(N, tn, &p.nb, &p.nn);
        if (p.nm * p.nn >= want || (tm <= 64 && tn <= 128)) break;
        if (tm > 64 && (trans_a || tm >= tn || tn <= 128)) tm /= 2;
        else tn /= 2;
    }
    return p;
}

typedef struct {
    const mha__kernels *k;
    mha__gemm_fn gemm; /* k's gemm, or its gemm_small for a small product */
    bool trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B, *bias;
    int64_t lda, ldb, ldc;
    float *C;
    tile_plan p;
    const mha__gemm_epilogue *epi; /* or NULL */
    const uint16_t *W16;           /* B^T as 16-bit weights (B NULL), or NULL */
    mha__widen_bf16_fn widen;      /* W16's widening kernel */
} gemm_job;

/* The epilogue on the block at rows [r0, r0 + m), columns [c0, c0 + n) of
 * C, just computed. */
static void epilogue(const mha__kernels *k, const mha__gemm_epilogue *e, int64_t r0, int64_t c0,
                     int64_t m, int64_t n, float *c, int64_t ldc) {
    const float *bias = e->bias ? e->bias + c0 : NULL;
    if (e->kind == MHA_EPI_GELU && e->x) { /* GELU's input kept for a backward */
        float *f = e->x + r0 * e->ldx + c0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t q = 0; q < n; q++) f[i * e->ldx + q] = bias ? c[i * ldc + q] + bias[q] : c[i * ldc + q];
        k->bias_gelu(c, ldc, f, e->ldx, m, n, NULL);
        return;
    }
    if (e->kind == MHA_EPI_GELU) {
        k->bias_gelu(c, ldc, c, ldc, m, n, bias);
        return;
    }
    mha__keep_view kv = e->keep;
    kv.bit0 += r0 * kv.ld + c0;
    k->residual_add(e->x + r0 * e->ldx + c0, e->ldx, c, ldc, m, n, bias, kv.bits ? &kv : NULL);
}

/* An operand whose rows are a multiple of 4 KiB apart maps every row to the
 * same L1 set: the backend's packing, which walks down the rows, then ran
 * at half speed on the feed-forward's weight gradient (df^T h2, df's rows
 * 3072 floats long: 31 against 61 GFLOP/s for the Q/K/V one) and 20%
 * slower on its input gradients (df W1, dz W2) on a 2-core Zen 3. Such a
 * tile's transposed A or plain B is first copied to rows 16 floats longer
 * than the tile's. A plain A and a transposed B are left as they are: B^T
 * ran at full speed, and on a 2-core Zen 5 (oneDNN's AVX-512 sgemm, 2
 * threads) the copied plain A took GPT-2's fc2 forward (h W2^T, 1024 x
 * 768 x 3072) from 419 down to 305 GFLOP/s and df W1 from 494 to 472,
 * where the Zen 3 had gained 6% on a like shape (512 x 768 x 3072, 48 ->
 * 45 ms); the copied A^T still gains there (df^T x: 450-461 -> 490 GFLOP/s).
 * The backend packs its operands before it computes, so the product is the
 * same bits either way (checked on mha grad's gradients). NULL (ld
 * unchanged) when no copy is needed; false when it could not be allocated. */
#define MHA_GEMM_ALIAS_FLOATS 1024

static bool unalias(const float **x, int64_t *ld, int64_t rows, int64_t cols, float **copy) {
    *copy = NULL;
    if (*ld % MHA_GEMM_ALIAS_FLOATS != 0 || rows < 16 || cols < 16) return true;
    const int64_t ld2 = cols + 16;
    *copy = mha__alloc((size_t)(rows * ld2) * sizeof(float));
    if (!*copy) return false;
    for (int64_t r = 0; r < rows; r++) memcpy(*copy + r * ld2, *x + r * *ld, (size_t)cols * sizeof(float));
    *x = *copy;
    *ld = ld2;
    return true;
}

/* Tile t: rows [r0, r1), columns [c0, c1) of C = alpha op(A) op(B) + beta C
 * (+ bias: written into C first, then accumulated into with beta = 1). */
static bool run_tile(const gemm_job *j, int64_t t) {
    const int64_t r0 = (t / j->p.nn) * j->p.mb, c0 = (t % j->p.nn) * j->p.nb;
    const int64_t m = j->M - r0 < j->p.mb ? j->M - r0 : j->p.mb;
    const int64_t n = j->N - c0 < j->p.nb ? j->N - c0 : j->p.nb;
    const float *a = j->trans_a ? j->A + r0 : j->A + r0 * j->lda;
    const float *b = j->W16 ? NULL : j->trans_b ? j->B + c0 * j->ldb : j->B + c0;
    float *c = j->C + r0 * j->ldc + c0;
    float beta = j->beta;
    if (j->bias) {
        for (int64_t i = 0; i < m; i++) memcpy(c + i * j->ldc, j->bias + c0, (size_t)n * sizeof(float));
        beta = 1.0f;
    }
    if (j->K > 0) {
        int64_t lda = j->lda, ldb = j->ldb;
        float *ca = NULL, *cb = NULL;
        bool ok = (!j->trans_a || unalias(&a, &lda, j->K, m, &ca)) &&
                  (j->trans_b || unalias(&b, &ldb, j->K, n, &cb));
        if (ok && j->W16) {
            /* 16-bit W: the tile's rows of W widened into one buffer (up to
             * 768 x K floats, 9 MiB at K = 3072), then the F32 tile's very
             * call: a backend's bits may depend on the product's N (OpenBLAS
             * under OPENBLAS_CORETYPE=Haswell gave other bits for 128-row
             * chunks), so the widened tile is never cut */
            ok = (cb = mha__alloc_n((size_t)n, (size_t)j->K * sizeof(float))) != NULL;
            for (int64_t r = 0; ok && r < n; r++)
                j->widen(cb + r * j->K, j->W16 + (c0 + r) * j->ldb, (size_t)j->K);
            ok = ok && j->gemm(false, true, m, n, j->K, j->alpha, a, lda, cb, j->K, beta, c, j->ldc);
        } else {
            ok = ok && j->gemm(j->trans_a, j->trans_b, m, n, j->K, j->alpha, a, lda, b, ldb, beta, c, j->ldc);
        }
        mha__free(ca);
        mha__free(cb);
        if (!ok) return false;
    } else {
        for (int64_t i = 0; i < m; i++) /* K == 0: C = beta C, as BLAS defines it */
            for (int64_t q = 0; q < n; q++) {
                float *e = &c[i * j->ldc + q];
                *e = beta == 0.0f ? 0.0f : beta * *e;
            }
    }
    if (j->epi) epilogue(j->k, j->epi, r0, c0, m, n, c, j->ldc);
    return true;
}

/* ---- one row: GEMV --------------------------------------------------------- */

/* The unit of the split between threads: rows of W (a fixed split,
 * whatever the thread count). The last pieces taken are a unit or two, so
 * the unit bounds how long one thread waits for the other at the end: 64
 * rows of F32 ff2 (3072 columns) are 786 KB, some 30 us of one core's
 * reading. A trace of GPT-2 124M's decode (2-core Zen 5) had each thread
 * wait 5.7-6.9 us a call after its last piece with 64 (F32; bf16 3.5-5.5),
 * 2.9-4.6 with 16 (bf16 2.5-5.4); `mha bench GPTModel --dtype bf16 --against
 * f32 --rounds 4`, builds alternated three times: F32 8.57-9.05 -> 8.12-8.19
 * ms/token, bf16 4.65-5.23 -> 4.59-4.76. */
#define MHA_GEMV_ROWS 16

/* Blocks [b0, b0 + nb) of C (1, N) = A (1, K) B^T + bias, B (N, K) (or
 * 16-bit W16), in one kernel call, then through the epilogue, if any (which
 * adds the bias itself). One call: its eight streams lie an eighth of the
 * piece apart and run on for the whole piece, which the hardware
 * prefetchers follow (kernels/gemv_body.h). GPT-2 124M's decode on a 2-core
 * Zen 5: F32 as runs 11.2 against 12.4 ms/token as one call per 64-row
 * block (4 pairs of builds alternated, host reading at 33-44 GB/s); bf16 in
 * gemv_body.h. */
static void gemv_part(const mha__kernels *k, int64_t b0, int64_t nb, int64_t N, int64_t K, const float *A,
                      const float *B, const uint16_t *W16, mha_dtype w16, int64_t ldb, const float *bias, float *C,
                      const mha__gemm_epilogue *epi) {
    const int64_t n0 = b0 * MHA_GEMV_ROWS, n1 = (b0 + nb) * MHA_GEMV_ROWS < N ? (b0 + nb) * MHA_GEMV_ROWS : N;
    const int64_t n = n1 - n0;
    if (n <= 0) return;
    const float *bs = bias ? bias + n0 : NULL;
    if (!W16) k->gemv(n, K, A, B + n0 * ldb, ldb, bs, C + n0);
    else if (w16 == MHA_DTYPE_BF16) k->gemv_bf16(n, K, A, W16 + n0 * ldb, ldb, bs, C + n0);
    else k->gemv_f16(n, K, A, W16 + n0 * ldb, ldb, bs, C + n0);
    if (epi) epilogue(k, epi, 0, n0, 1, n, C + n0, n);
}

#if defined(MHA_HAVE_OPENMP)
/* A thread's share of a GEMV's blocks, [lo, hi) in one word (lo in the low
 * half), on a line of its own: its owner takes pieces from the front, a
 * thread whose own share ran out takes halves from the back. */
typedef struct {
    _Alignas(64) uint64_t w;
} gemv_share;

#define GEMV_SHARES 64 /* a GEMV runs on at most this many threads */

/* Takes a piece of s into [*b0, *b0 + *nb): the owner's first piece is
 * three quarters of its share, its later ones a quarter of what is left;
 * a thief takes the back half. false when s is empty. */
static bool gemv_take(gemv_share *s, bool owner, bool first, int64_t *b0, int64_t *nb) {
    uint64_t w = __atomic_load_n(&s->w, __ATOMIC_ACQUIRE);
    for (;;) {
        const int64_t lo = (int64_t)(w & 0xffffffffu), hi = (int64_t)(w >> 32), rem = hi - lo;
        if (rem <= 0) return false;
        const int64_t c = !owner ? (rem + 1) / 2 : first ? rem - rem / 4 : (rem + 3) / 4;
        const uint64_t nw = owner ? (uint64_t)(lo + c) | ((uint64_t)hi << 32)
                                  : (uint64_t)lo | ((uint64_t)(hi - c) << 32);
        if (__atomic_compare_exchange_n(&s->w, &w, nw, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            *b0 = owner ? lo : hi - c;
            *nb = c;
            return true;
        }
    }
}
#endif

/* C (1, N) = A (1, K) B^T + bias with B (N, K): every weight read once, in
 * blocks of MHA_GEMV_ROWS rows. Each thread starts on one contiguous run of
 * whole blocks (the runs differ by a block at most) and, done with it, helps
 * a slower one from the back of its run: the two vCPUs of the project
 * machines ran the same rows at speeds up to 50% apart, either one the
 * slower, and under a static split the faster one waited (perf on bf16
 * decode: the worker thread spun in libgomp for 15% of the samples, 6% with
 * the help; alternated in one process, decode's mean ms/token went 6.76 ->
 * 6.51 for bf16 and 11.90 -> 11.34 for F32, 20-40 rounds). A row's value does
 * not depend on the split (the kernel's contract), so the bits do not depend
 * on the thread count or on who took which rows. */
#if defined(MHA_HAVE_OPENMP)
typedef struct {
    const mha__kernels *k;
    int64_t N, K, ldb;
    const float *A, *B, *bias;
    const uint16_t *W16;
    mha_dtype w16;
    float *C;
    const mha__gemm_epilogue *epi;
    gemv_share *sh;
    int ns; /* shares: the threads asked for */
} gemv_job;

/* Thread t: its own share (t < ns), then the others' backs; a share whose
 * thread the team lacks is left to the others. */
static void gemv_thread(void *arg, int t, int nt) {
    (void)nt;
    const gemv_job *j = arg;
    int64_t b0, nb;
    if (t < j->ns)
        for (bool first = true; gemv_take(&j->sh[t], true, first, &b0, &nb); first = false)
            gemv_part(j->k, b0, nb, j->N, j->K, j->A, j->B, j->W16, j->w16, j->ldb, j->bias, j->C, j->epi);
    for (int o = t < j->ns ? 1 : 0; o < j->ns; o++)
        while (gemv_take(&j->sh[(t + o) % j->ns], false, false, &b0, &nb))
            gemv_part(j->k, b0, nb, j->N, j->K, j->A, j->B, j->W16, j->w16, j->ldb, j->bias, j->C, j->epi);
}
#endif

/* Inside a decode step's team (mha__team_serve) the threads are handed
 * the job; elsewhere a region of its own. */
static void gemv_rows(const mha__kernels *k, int64_t N, int64_t K, const float *A, const float *B,
                      const uint16_t *W16, mha_dtype w16, int64_t ldb, const float *bias, float *C,
                      const mha__gemm_epilogue *epi) {
    const int64_t nblk = (N + MHA_GEMV_ROWS - 1) / MHA_GEMV_ROWS;
#if defined(MHA_HAVE_OPENMP)
    const int nt = omp_get_max_threads() < GEMV_SHARES ? omp_get_max_threads() : GEMV_SHARES;
    if (nblk > 1 && (double)N * (double)K > 1e5 && nt > 1 && nblk <= INT32_MAX) {
        gemv_share sh[GEMV_SHARES];
        for (int t = 0; t < nt; t++)
            sh[t].w = (uint64_t)(nblk * t / nt) | ((uint64_t)(nblk * (t + 1) / nt) << 32);
        gemv_job j = {k, N, K, ldb, A, B, bias, W16, w16, C, epi, sh, nt};
        if (mha__team_run(gemv_thread, &j)) return;
        if (!omp_in_parallel()) {
#pragma omp parallel num_threads(nt)
            gemv_thread(&j, omp_get_thread_num(), nt);
            return;
        }
    }
#endif
    gemv_part(k, 0, nblk, N, K, A, B, W16, w16, ldb, bias, C, epi);
}

/* MHA_ERR_NOMEM for an M x N x K product, set on the calling thread (the
 * detail is per thread): what names the memory that was not there. */
static mha_status gemm_nomem(const char *what, int64_t M, int64_t N, int64_t K) {
    return mha__fail(MHA_ERR_NOMEM,
                     "out of memory in the GEMM backend (%s) on a %lld x %lld x %lld product "
                     "(%s)",
                     mha__sgemm_backend_name(), (long long)M, (long long)N, (long long)K, what);
}

/* A backend call failed (on_backend), or the table's own GEMM (a small
 * product in a build with a BLAS, or a build without one): its buffer. */
static mha_status gemm_status(bool failed, bool on_backend, int64_t M, int64_t N, int64_t K) {
    if (!failed) return MHA_OK;
    char what[96];
    if (on_backend || !mha__sgemm_backend_is_blas) {
        mha__backend_buffers(what, sizeof what, M, N, K);
        return gemm_nomem(what, M, N, K);
    }
    return mha__fail(MHA_ERR_NOMEM,
                     "out of memory in the builtin GEMM (%s) on a %lld x %lld x %lld product (%zu bytes of "
                     "its packing buffer)",
                     mha__kernels_active()->name, (long long)M, (long long)N, (long long)K,
                     mha__alloc_failed_bytes());
}

/* The backend was not called: the address space it would need is not there. */
static mha_status reserve_status(size_t bytes, int64_t M, int64_t N, int64_t K) {
    char what[96];
    snprintf(what, sizeof what, "could not reserve the %zu bytes it needs first", bytes);
    return gemm_nomem(what, M, N, K);
}

#if defined(MHA_HAVE_OPENMP)
/* mha__parallel_units' unit: tile u. The backend must not start threads of
 * its own: oneDNN reads this thread's OpenMP setting (which lives and dies
 * with the parallel region's implicit task). */
static bool tile_unit(void *job, int64_t u, int t) {
    (void)t;
    omp_set_num_threads(1);
    return run_tile(job, u);
}
#endif

/* B^T may instead be 16-bit weights W16 (trans_b, B NULL, w16 their
 * dtype): widened per tile (or in the GEMV kernel). */
static mha_status sgemm_tiled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B,
                              const uint16_t *W16, mha_dtype w16, int64_t ldb, float beta, float *C,
                              int64_t ldc, const float *bias, const mha__gemm_epilogue *epi) {
    if (M <= 0 || N <= 0) return MHA_OK;
    if (M == 1 && !trans_a && trans_b && alpha == 1.0f && (beta == 0.0f || bias) && K > 0) {
        gemv_rows(mha__kernels_active(), N, K, A, B, W16, w16, ldb, bias, C, epi);
        return MHA_OK;
    }
    const mha__kernels *k = mha__kernels_active();
    const bool small = (double)M * (double)N * (double)K <= MHA_GEMM_SMALL;
    gemm_job j = {k, small ? k->gemm_small : k->gemm, trans_a, trans_b, M, N, K, alpha, beta, A, B, bias,
                  lda, ldb, ldc, C, plan_tiles(trans_a, M, N, K > 0 ? K : 1), epi, W16, NULL};
    if (W16) j.widen = w16 == MHA_DTYPE_BF16 ? j.k->widen_bf16 : j.k->widen_f16;
    const int64_t ntiles = j.p.nm * j.p.nn;
    bool failed = false; /* a backend call ran out of memory: C is then unspecified */
    const bool on_backend = j.gemm == mha__sgemm_backend && K > 0;
#if defined(MHA_HAVE_OPENMP)
    if (ntiles > 1 && !omp_in_parallel()) {
        const int nt = omp_get_max_threads() < ntiles ? omp_get_max_threads() : (int)ntiles;
        const size_t short_of = on_backend ? mha__backend_reserve(nt) : 0;
        if (short_of) return reserve_status(short_of, M, N, K);
        /* tiles in row-major order: a thread's share is a band of rows */
        failed = !mha__parallel_units(ntiles, nt, tile_unit, &j);
        return gemm_status(failed, on_backend, M, N, K);
    }
    if (!omp_in_parallel()) {
        const size_t short_of = on_backend ? mha__backend_reserve(1) : 0;
        if (short_of) return reserve_status(short_of, M, N, K);
        /* One tile on the calling thread: a one-thread team so that the
         * backend's thread setting can be changed without touching the
         * caller's. */
#pragma omp parallel num_threads(1) reduction(|| : failed)
        {
            omp_set_num_threads(1);
            for (int64_t t = 0; t < ntiles && !failed; t++) failed = !run_tile(&j, t);
        }
        return gemm_status(failed, on_backend, M, N, K);
    }
#endif
    const size_t short_of = on_backend ? mha__backend_reserve(1) : 0;
    if (short_of) return reserve_status(short_of, M, N, K);
    for (int64_t t = 0; t < ntiles && !failed; t++) failed = !run_tile(&j, t);
    return gemm_status(failed, on_backend, M, N, K);
}

mha_status mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float beta, float *C, int64_t ldc) {
    return sgemm_tiled(trans_a, trans_b, M, N, K, alpha, A, lda, B, NULL, MHA_DTYPE_F32, ldb, beta, C, ldc, NULL, NULL);
}

mha_status mha__sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t lda, const float *B, int64_t ldb,
                           const float *bias, float *C, int64_t ldc) {
    return sgemm_tiled(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, NULL, MHA_DTYPE_F32, ldb, 0.0f, C, ldc, bias, NULL);
}

mha_status mha__sgemm_epilogue(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                               const float *B, int64_t ldb, float *C, int64_t ldc,
                               const mha__gemm_epilogue *epi) {
    return sgemm_tiled(false, true, M, N, K, 1.0f, A, lda, B, NULL, MHA_DTYPE_F32, ldb, 0.0f, C, ldc, NULL, epi);
}

mha_status mha__linear_w(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const mha__wmat *W,
                         const float *bias, float *C, int64_t ldc, const mha__gemm_epilogue *epi) {
    if (W->dtype == MHA_DTYPE_F32) {
        if (epi) return mha__sgemm_epilogue(M, N, K, A, lda, W->p, W->ld, C, ldc, epi);
        return mha__sgemm_bias(false, true, M, N, K, A, lda, W->p, W->ld, bias, C, ldc);
    }
    return sgemm_tiled(false, true, M, N, K, 1.0f, A, lda, NULL, W->p, W->dtype, W->ld, 0.0f, C, ldc,
                       epi ? NULL : bias, epi);
}

/* The Unstable entry (mha.h) over mha__sgemm, for benchmarks that time the
 * GEMM the library runs: its sizes checked, since a caller's are not. */
mha_status mha_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                     int64_t ldc) {
    if (!A || !B || !C) return mha__fail(MHA_ERR_ARGUMENT, "mha_sgemm: NULL matrix");
    if (M < 0 || N < 0 || K < 0) return mha__fail(MHA_ERR_ARGUMENT, "mha_sgemm: negative size");
    const int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
    if (lda < (a_cols > 1 ? a_cols : 1) || ldb < (b_cols > 1 ? b_cols : 1) || ldc < (N > 1 ? N : 1))
        return mha__fail(MHA_ERR_ARGUMENT, "mha_sgemm: a leading dimension is below its row's length");
    const mha_status st = mha__threads_ready(); /* before the tiles' parallel region */
    if (st != MHA_OK) return st;
    return mha__sgemm(trans_a != 0, trans_b != 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
