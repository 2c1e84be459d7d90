/* rows.c — the row drivers and the column sums (drivers.h): the active
 * table's elementwise kernels on fixed blocks of rows (or of elements, or of
 * columns) dealt to OpenMP threads. A block is one kernel call on the same
 * operands whatever the thread count, so the bits are too. */
#include "drivers.h"

/* Rows per LayerNorm task, elements per GELU task: fixed, so the split
 * never depends on the thread count (the kernels' results do not depend on
 * it either; fixed blocks keep it obvious). A column sum's task is a
 * thread's share of the columns (cols_per_task), at most SUM_COLS: each
 * column's sum is its rows in order whatever the split, and a row's share
 * is one run of memory. In blocks of 64 columns (256 bytes of each row,
 * the next row 9 KB on), a (8192, 2304) gradient's sum ran at 6.3 GB/s on
 * the 2-core Xeon (11.9 ms); in halves, 14.2 (5.3 ms). */
enum { LN_ROWS = 8, GELU_CHUNK = 1 << 14, SUM_COLS = 2048 };

/* What a driver runs on the block [i0, i0 + n) of its rows, elements or
 * columns. */
typedef struct {
    const mha__kernels *k;
    float *out, *out2;
    const float *in, *in2, *w, *w2;
    int64_t E, ld;
    double *s;
    const uint64_t *bits; /* dropout: the keep bits and the kept elements' factor */
    float scale;
} job;
typedef void block_fn(const job *j, int64_t i0, int64_t n);

/* Block b of for_blocks. */
static void run_block(const job *j, block_fn *body, int64_t count, int64_t block, int64_t b) {
    const int64_t i0 = b * block;
    body(j, i0, count - i0 < block ? count - i0 : block);
}

/* body on [0, count) in blocks of `block`, the blocks dealt to threads when
 * par (the caller's: enough work to be worth a parallel region). Otherwise
 * no region at all: libgomp's if(false) region still costs 1.25 us (2-core
 * Zen 5), which a decode step's 25 one-row LayerNorms (0.13 us of work
 * each) paid. */
static void for_blocks(const job *j, block_fn *body, int64_t count, int64_t block, bool par) {
    const int64_t nblk = (count + block - 1) / block;
#if defined(MHA_HAVE_OPENMP)
    if (nblk > 1 && par) {
#pragma omp parallel for schedule(static)
        for (int64_t b = 0; b < nblk; b++) run_block(j, body, count, block, b);
        return;
    }
#else
    (void)par;
#endif
    for (int64_t b = 0; b < nblk; b++) run_block(j, body, count, block, b);
}

static void layernorm_block(const job *j, int64_t r0, int64_t n) {
    j->k->layernorm(j->out + r0 * j->E, j->E, j->in + r0 * j->E, j->E, n, j->E, j->w, j->w2);
}

void mha__layernorm_rows(float *y, const float *x, const float *scale, const float *shift,
                         int64_t rows, int64_t E) {
    const job j = {.k = mha__kernels_active(), .out = y, .in = x, .w = scale, .w2 = shift, .E = E};
    for_blocks(&j, layernorm_block, rows, LN_ROWS, (double)rows * (double)E > 1e5);
}

static void gelu_block(const job *j, int64_t i, int64_t n) {
    j->k->bias_gelu(j->out + i, 0, j->in + i, 0, 1, n, NULL);
}

void mha__gelu_n(float *y, const float *x, size_t n) {
    const job j = {.k = mha__kernels_active(), .out = y, .in = x};
    for_blocks(&j, gelu_block, (int64_t)n, GELU_CHUNK, true);
}

static void dropout_block(const job *j, int64_t i, int64_t n) { /* i: a multiple of 64 */
    j->k->dropout_apply(j->out + i, j->in + i, j->bits + i / 64, (size_t)n, j->scale);
}

void mha__dropout_apply_n(float *out, const float *in, const uint64_t *bits, size_t n, float scale) {
    const job j = {.k = mha__kernels_active(), .out = out, .in = in, .bits = bits, .scale = scale};
    for_blocks(&j, dropout_block, (int64_t)n, GELU_CHUNK, true);
}

static void layernorm_backward_block(const job *j, int64_t r0, int64_t n) {
    const int64_t o = r0 * j->E;
    j->k->layernorm_backward(j->out + o, j->out2 + o, j->in + o, j->in2 + o, n, j->E, j->w);
}

void mha__layernorm_backward_rows(float *dx, const float *dy, const float *x, const float *scale,
                                  float *g_scale, float *g_shift, float *scratch, int64_t rows,
                                  int64_t E) {
    const job j = {.k = mha__kernels_active(), .out = dx, .out2 = scratch, .in = dy, .in2 = x, .w = scale,
                   .E = E};
    for_blocks(&j, layernorm_backward_block, rows, LN_ROWS, (double)rows * (double)E > 1e5);
    mha__colsum_acc(g_scale, scratch, rows, E, E);
    mha__colsum_acc(g_shift, dy, rows, E, E);
}

static void gelu_backward_block(const job *j, int64_t i, int64_t n) {
    j->k->gelu_backward(j->out + i, j->in + i, n);
}

void mha__gelu_backward_n(float *d, const float *f, int64_t n) {
    const job j = {.k = mha__kernels_active(), .out = d, .in = f};
    for_blocks(&j, gelu_backward_block, n, GELU_CHUNK, n > 100000);
}

/* Columns per column-sum task: n split evenly over the threads, in
 * multiples of 16, between 64 and SUM_COLS. */
static int64_t cols_per_task(int64_t n) {
    const int64_t nt = mha__max_threads();
    int64_t c = (n + nt - 1) / nt;
    c = (c + 15) / 16 * 16;
    return c < 64 ? 64 : c > SUM_COLS ? SUM_COLS : c;
}

/* Columns over threads, never rows: each column's sum is one kernel call's,
 * its rows in order. */
static void colsum_block(const job *j, int64_t c0, int64_t n) {
    j->k->colsum(j->s + c0, j->in + c0, j->E, n, j->ld);
}

void mha__colsum_f64(double *s, const float *a, int64_t rows, int64_t n, int64_t lda) {
    const job j = {.k = mha__kernels_active(), .in = a, .E = rows, .ld = lda, .s = s};
    for_blocks(&j, colsum_block, n, cols_per_task(n), rows * n > (1 << 20));
}

/* The block's sums in double, then rounded once into acc. */
static void colsum_acc_block(const job *j, int64_t c0, int64_t n) {
    double s[SUM_COLS] = {0};
    j->k->colsum(s, j->in + c0, j->E, n, j->ld);
    for (int64_t c = 0; c < n; c++) j->out[c0 + c] += (float)s[c];
}

void mha__colsum_acc(float *acc, const float *a, int64_t rows, int64_t n, int64_t lda) {
    const job j = {.k = mha__kernels_active(), .out = acc, .in = a, .E = rows, .ld = lda};
    for_blocks(&j, colsum_acc_block, n, cols_per_task(n), rows * n > (1 << 20));
}

void mha__colsum_flush(float *acc, double *s, int64_t n) {
    for (int64_t c = 0; c < n; c++) {
        acc[c] += (float)s[c];
        s[c] = 0.0;
    }
}
