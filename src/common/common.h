/* common.h — internal helpers shared by every layer: error detail, checked
 * size arithmetic, aligned allocation. Not part of the public API. */
#ifndef MHA_COMMON_H
#define MHA_COMMON_H

#include "mha.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MHA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MHA_NODISCARD __attribute__((warn_unused_result))
#else
#define MHA_PRINTF(a, b)
#define MHA_NODISCARD
#endif

/* Records a detail for mha_last_error() and returns s, so that failing
 * paths read: return mha__fail(MHA_ERR_SHAPE, "T (%lld) ...", ...); */
mha_status mha__fail(mha_status s, const char *fmt, ...) MHA_PRINTF(2, 3);
void mha__clear_error(void);

/* Checked arithmetic on sizes: false on overflow (result then unspecified). */
static inline bool mha__mul_size(size_t a, size_t b, size_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool mha__add_size(size_t a, size_t b, size_t *r) {
    return !__builtin_add_overflow(a, b, r);
}
static inline bool mha__mul_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}

/* 64-byte aligned allocation; mha__free accepts NULL. The only way the
 * library allocates (never malloc/calloc/realloc/strdup directly): a
 * failure records its size for mha__nomem and the test hook below can
 * inject one. _n: n elements of size bytes, overflow checked.
 * On Linux a block of 4 MiB or more is advised into transparent huge pages
 * (madvise MADV_HUGEPAGE: a page fault per 2 MiB, not per 4 KiB; where the
 * system leaves huge pages to madvise), so a page it touches makes 2 MiB
 * resident: mha__alloc_gradual is for a large block filled a little at a
 * time and perhaps never whole (the KV cache), which keeps small pages. */
void *mha__alloc(size_t bytes);
void *mha__alloc_gradual(size_t bytes);
/* Maps the pages of [p, p + bytes) (Linux: madvise MADV_POPULATE_WRITE,
 * one call for what would be a page fault per 4 KiB page when first
 * written; the contents are unchanged). Advice only: where the kernel
 * lacks it (before 5.14) or refuses, nothing happens. */
void mha__populate(void *p, size_t bytes);
void *mha__calloc(size_t bytes);
void *mha__alloc_n(size_t n, size_t size);
void *mha__calloc_n(size_t n, size_t size);
char *mha__strdup(const char *s);
void mha__free(void *p);
/* Hands the allocator's free pages back to the system (glibc: malloc_trim,
 * every thread's arena; elsewhere nothing). For transient buffers freed
 * after a call: glibc keeps a freed block that it would have mapped on its
 * own once one was freed (its mmap threshold rises to that size), so a
 * 16-bit prefill's widened tiles (up to 9 MiB a thread) stayed resident. */
void mha__release_free_pages(void);
/* A scratch buffer *buf of *cap bytes grown (its contents dropped) to at
 * least need bytes; on failure (ERR_NOMEM naming what) it is unchanged. */
mha_status mha__grow(void **buf, size_t *cap, size_t need, const char *what);

/* MHA_ERR_NOMEM with a detail "<fmt...> (could not allocate N bytes)",
 * N being the size of this thread's last failed allocation. */
mha_status mha__nomem(const char *fmt, ...) MHA_PRINTF(1, 2);
size_t mha__alloc_failed_bytes(void);

/* Test hook (tests/test_nomem.c): the nth allocation from now (n >= 1)
 * fails, once; 0 disarms. mha__alloc_inject consumes one count (for
 * allocators outside the library that a test routes through the hook, e.g.
 * cJSON's); mha__alloc_failures_injected tells whether the failure fired. */
void mha__alloc_fail_after(long n);
bool mha__alloc_inject(void);
long mha__alloc_failures_injected(void);

/* CPU features, detected once (thread-safe) including the OS's support for
 * the register state (XGETBV). The only place that asks the CPU. */
typedef struct {
    bool avx2;   /* AVX2 and FMA */
    bool avx512; /* AVX-512 F, BW, DQ and VL (and AVX2/FMA) */
} mha__cpu_features;
const mha__cpu_features *mha__cpu(void);

/* "%.17g" of x (which reads back exactly) in the C locale, whatever
 * LC_NUMERIC the program has set. */
void mha__format_double(char *buf, size_t cap, double x);
/* A finite double in plain decimal notation ("0.1", "-2", "1e-08"; no
 * '+' first, no spaces, hex, inf or nan), read in the C locale. false
 * otherwise. */
bool mha__parse_double(const char *s, double *out);

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. The offset of the first byte that does not start a valid
 * sequence, or len when all of s is valid. */
size_t mha__utf8_check(const unsigned char *s, size_t len);

/* MHA_OK when the threads of the next parallel region can be started (or
 * already run); MHA_ERR_NOMEM when their stacks do not fit (threads.c).
 * Called by every compute entry point before its first parallel region. */
mha_status mha__threads_ready(void);
/* The threads of the next parallel region (omp_get_max_threads; 1 without
 * OpenMP), and the calling thread's number in its region (0 outside one). */
int mha__max_threads(void);
int mha__thread_num(void);
/* One look of a spin-wait on a word another thread will set: a pause, and
 * after 2^14 looks (n counts them; start it at 0) a yield of the CPU
 * between looks, for a host running more threads than CPUs and valgrind's
 * one-at-a-time scheduler. */
void mha__spin_pause(unsigned *n);

/* fn(arg, u, t) for every unit u in [0, n), on up to nt threads (t the
 * thread's number, below nt), in a parallel region of its own (or on the
 * calling thread alone: nt < 2, n < 2, without OpenMP or inside a parallel
 * region). Thread t first takes the units of its share, [n t / nt, n (t +
 * 1) / nt), in order; a thread whose share is done takes units from the
 * back of the others'. So with threads that keep pace each runs the units
 * a static schedule gives it, the same share of rows for the GEMM that
 * writes a buffer and for the attention that reads it next, which then
 * finds its rows in its own core's cache; a thread held up (by another
 * tenant of the host) is relieved as with a dynamic schedule. Once a call
 * returns false no unit not yet started is run, and the result is false;
 * true when all returned true. On the 2-core Xeon, attention after the
 * QKV GEMM at (8, 256): 5.6-6.2 ms with both dynamic, 4.3 with shares
 * (docs/performance.md). */
typedef bool mha__unit_fn(void *arg, int64_t u, int t);
bool mha__parallel_units(int64_t n, int nt, mha__unit_fn *fn, void *arg);

/* A team for a run of short parallel steps (a decode step's 49 GEMVs and
 * 12 attentions, each a few to a hundred microseconds): mha__team_serve
 * runs body(arg) on the calling thread while the other threads of one
 * OpenMP region wait for work, and inside body mha__team_run hands a step
 * to all of them: a cache line each way instead of a region's fork and
 * join (3-4 us on the project's 2-vCPU VMs). Without OpenMP, with one
 * thread or inside a parallel region, body(arg) runs alone. The waiting
 * threads spin (yielding after a while): body should be all steps and
 * little else. */
typedef void mha__team_fn(void *arg, int t, int nt);
void mha__team_serve(void (*body)(void *arg), void *arg);
/* fn(arg, t, nt) on each thread t < nt of the team serving the calling
 * thread (t = 0 on the caller), back when all are done: true. false, with
 * nothing run, where no team serves it (the caller then runs its own way). */
bool mha__team_run(mha__team_fn *fn, void *arg);

/* The one validation of every JSON text mha parses, before cJSON does
 * (json_check.c): s[0, len) must be one JSON value between white space,
 * RFC 8259 exactly (no raw control characters in strings, no lone
 * surrogates), within cJSON's limits (nesting below 1000, numbers of at
 * most 63 characters), with no "\u0000", and as the caller's rules ask.
 * ERR_FORMAT naming `what` and the byte otherwise. Text that passes is text
 * cJSON parses to the same data: a cJSON failure after it is ERR_NOMEM. */
typedef struct {
    const char *what;   /* names the text in the detail: "header", "encoder.json" */
    bool object;        /* the value must be an object */
    bool integers_only; /* numbers only as -?(0|[1-9][0-9]*) */
} mha__json_rules;
mha_status mha__json_check(const unsigned char *s, size_t len, const mha__json_rules *r);

/* Round up to a multiple of 64 (bytes), for carving workspaces. */
static inline size_t mha__align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

#endif
