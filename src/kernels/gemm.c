/* gemm.c — the projection GEMMs.
 *
 * Backends (chosen at build time, -DMHA_BLAS): oneDNN's dnnl_sgemm (linked;
 * the default), OpenBLAS (loaded at first use, see load_openblas) or the
 * portable builtin kernel. The reference table (MHA_ISA=ref) runs the
 * reference loops instead.
 *
 * Determinism by design: mha__sgemm cuts C into tiles whose sizes are a
 * function of (M, N, K) alone (tile_plan), computes each tile with one
 * single-threaded backend call, and deals the tiles to OpenMP threads. An
 * element of C is therefore computed by the same call on the same operands
 * whatever the thread count, and OpenBLAS's or oneDNN's own threading (whose
 * splits depend on the thread count) never runs. The library sets no
 * environment variable: a user's OPENBLAS_CORETYPE or ONEDNN_MAX_CPU_ISA is
 * the backend's business. */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#include "common/common.h"
#include "kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#if defined(MHA_HAVE_ONEDNN)
#include <dnnl.h>
#endif
#if defined(MHA_HAVE_OPENBLAS)
#include <dlfcn.h>
#include <sched.h>
#endif
#include <stdatomic.h>
#include <sys/mman.h>
#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

/* Element (i, j) of op(X) for a row-major X with leading dimension ld. */
static inline float at(const float *X, int64_t ld, bool trans, int64_t i, int64_t j) {
    return trans ? X[j * ld + i] : X[i * ld + j];
}

/* The reference: element (i, j) of C is alpha times the sum over p = 0, 1,
 * ..., K-1, in that order, of op(A)[i][p] * op(B)[p][j], each product and
 * sum rounded to float, plus beta * C[i][j] unless beta is 0 (then C is not
 * read). Blocked so that the sums of several elements run side by side,
 * each still one element's sum in order: the bits are those of the plain
 * triple loop (tests/test_gemm.c checks them against one). It is also the
 * builtin backend's kernel where the packed one does not run. */
static inline void ref_store(float *c, float acc, float alpha, float beta) {
    *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

/* op(B) = B^T, B's rows contiguous along p: MR x NR sums in registers over
 * MR rows of op(A) and NR rows of B (mr, nr: compile-time in the main case) */
static inline void ref_block_bt(int64_t mr, int64_t nr, bool trans_a, int64_t i0, int64_t j0,
                                int64_t K, float alpha, const float *A, int64_t lda,
                                const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    enum { MR = 2, NR = 4 };
    float acc[MR][NR] = {{0.0f}};
    for (int64_t p = 0; p < K; p++)
        for (int64_t r = 0; r < mr; r++) {
            const float a = at(A, lda, trans_a, i0 + r, p);
            for (int64_t c = 0; c < nr; c++) acc[r][c] += a * B[(j0 + c) * ldb + p];
        }
    for (int64_t r = 0; r < mr; r++)
        for (int64_t c = 0; c < nr; c++) ref_store(&C[(i0 + r) * ldc + j0 + c], acc[r][c], alpha, beta);
}

bool mha__sgemm_ref(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, int64_t lda, const float *B,
                    int64_t ldb, float beta, float *C, int64_t ldc) {
    if (trans_b) {
        for (int64_t i = 0; i < M; i += 2)
            for (int64_t j = 0; j < N; j += 4) {
                if (i + 2 <= M && j + 4 <= N)
                    ref_block_bt(2, 4, trans_a, i, j, K, alpha, A, lda, B, ldb, beta, C, ldc);
                else
                    ref_block_bt(M - i < 2 ? M - i : 2, N - j < 4 ? N - j : 4, trans_a, i, j, K,
                                 alpha, A, lda, B, ldb, beta, C, ldc);
            }
        return true;
    }
    /* op(B) = B, its rows along j: NB sums of one row of C, an axpy per p
     * that the compiler vectorises (a lane per element) */
    enum { NB = 256 };
    float acc[NB];
    for (int64_t j0 = 0; j0 < N; j0 += NB) {
        const int64_t nb = N - j0 < NB ? N - j0 : NB;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < nb; j++) acc[j] = 0.0f;
            for (int64_t p = 0; p < K; p++) {
                const float a = at(A, lda, trans_a, i, p);
                const float *b = &B[p * ldb + j0];
                for (int64_t j = 0; j < nb; j++) acc[j] += a * b[j];
            }
            for (int64_t j = 0; j < nb; j++) ref_store(&C[i * ldc + j0 + j], acc[j], alpha, beta);
        }
    }
    return true;
}

/* ---- the backend ----------------------------------------------------------- */

static struct {
    char name[96];
#if defined(MHA_HAVE_OPENBLAS)
    void (*sgemm)(int, int, int, int, int, int, float, const float *, int, const float *, int,
                  float, float *, int);
#endif
} backend;
/* Loaded once, under a lock rather than pthread_once, because a load that
 * fails for lack of memory (OpenBLAS) is tried again at the next call. */
static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool backend_loaded;

/* Whether `bytes` of address space can be mapped now: mapped PROT_NONE
 * (nothing touched, nothing committed) and unmapped again. For backends
 * that cannot fail cleanly themselves (below). */
static inline bool probe_address_space(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    munmap(p, bytes);
    return true;
}

/* What one backend call did: computed the tile, failed for lack of memory
 * (C untouched or partly written: the caller fails the whole GEMM), or
 * cannot take these arguments (the builtin kernel then runs). */
typedef enum { BACKEND_DONE, BACKEND_NOMEM, BACKEND_CANNOT } backend_result;

#if defined(MHA_HAVE_ONEDNN)
void mha__sgemm_backend_cap_avx2(void) {
    /* Effective only before oneDNN's first use (the dispatch calls this
     * before any GEMM); a user's ONEDNN_MAX_CPU_ISA may cap it further.
     * mha_runtime_blas() reports the ISA oneDNN then runs. */
    (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
}

static const char *onednn_isa(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse4.1";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_amx";
    default: return "other";
    }
}

/* oneDNN sizes its packing buffers itself and does not say; they hold
 * (blocks of) A and B, so the product's operands are the estimate. */
static void backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K) {
    snprintf(buf, cap, "about %.0f bytes of oneDNN's packing buffers",
             ((double)M * (double)K + (double)K * (double)N) * (double)sizeof(float));
}
/* oneDNN reports a failed allocation inside a call (dnnl_out_of_memory),
 * but not in its one-time set-up at the first call (JIT-generated kernels,
 * Debian 12's 2.6.3): under an address-space limit that leaves it a few
 * MiB too few, it crashes there (SIGSEGV in __itt_pt_write, seen under
 * ulimit -v 46000..50000 with a tiny module). So before the first call mha
 * maps MHA_ONEDNN_SETUP_BYTES (PROT_NONE, untouched) and unmaps it again:
 * when that fails, the GEMM fails with MHA_ERR_NOMEM instead. A guard, not
 * a guarantee (mha.h). */
#define MHA_ONEDNN_SETUP_BYTES ((size_t)8 << 20)
static atomic_bool onednn_set_up;

/* oneDNN also sets up lazily per kind of product (transposes, beta): a
 * set-up that cannot allocate throws a C++ exception through glibc's
 * pthread_once, whose unwinding then needs to dlopen libgcc_s and, under
 * an address-space limit, aborts the process ("libgcc_s.so.1 must be
 * installed for unwinding to work", seen in mha grad under ulimit -v 196608
 * when the backward's first A^T B ran in two threads at once). So the first
 * GEMM also runs every kind once, small and on the calling thread, while
 * the probe's room is there: the later set-ups are done by then. */
#define MHA_ONEDNN_WARM 128
static bool onednn_warm_up(void) {
    static float a[MHA_ONEDNN_WARM * MHA_ONEDNN_WARM], b[MHA_ONEDNN_WARM * MHA_ONEDNN_WARM],
        c[MHA_ONEDNN_WARM * MHA_ONEDNN_WARM];
    const dnnl_dim_t n = MHA_ONEDNN_WARM;
    bool ok = true;
    /* in a one-thread team, as the tiles call it: oneDNN's own threads
     * (their stacks) are what the room would otherwise go to */
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel num_threads(1)
#endif
    {
#if defined(MHA_HAVE_OPENMP)
        omp_set_num_threads(1);
#endif
        for (int kind = 0; kind < 8 && ok; kind++)
            ok = dnnl_sgemm(kind & 1 ? 'T' : 'N', kind & 2 ? 'T' : 'N', n, n, n, 1.0f, a, n, b, n,
                            kind & 4 ? 1.0f : 0.0f, c, n) == dnnl_success;
    }
    return ok;
}

static size_t backend_reserve(int callers) {
    (void)callers;
    if (atomic_load(&onednn_set_up)) return 0;
    if (!probe_address_space(MHA_ONEDNN_SETUP_BYTES) || !onednn_warm_up())
        return MHA_ONEDNN_SETUP_BYTES;
    atomic_store(&onednn_set_up, true);
    return 0;
}

static bool load_backend(void) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(backend.name, sizeof backend.name, "onednn %d.%d.%d (%s)", v->major, v->minor,
             v->patch, onednn_isa(dnnl_get_effective_cpu_isa()));
    return true;
}

static backend_result call_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                   float alpha, const float *A, int64_t lda, const float *B,
                                   int64_t ldb, float beta, float *C, int64_t ldc) {
    /* dnnl_sgemm allocates its packing buffers per call and says so when it
     * cannot (dnnl_out_of_memory); that is the caller's MHA_ERR_NOMEM. */
    switch (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                       beta, C, ldc)) {
    case dnnl_success: return BACKEND_DONE;
    case dnnl_out_of_memory: return BACKEND_NOMEM;
    default: return BACKEND_CANNOT;
    }
}

#elif defined(MHA_HAVE_OPENBLAS)
/* OpenBLAS is loaded on first use rather than linked, so that a program
 * that never computes does not start its thread pool. It picks its kernels
 * itself (OPENBLAS_CORETYPE, when the user sets it, decides); mha calls it
 * single-threaded from its own threads. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

void mha__sgemm_backend_cap_avx2(void) {} /* OpenBLAS takes no such order */

/* OpenBLAS cannot fail: its buffer allocator (blas_memory_alloc, 0.3.21 as
 * Debian 12 ships it) retries a failed allocation forever (both threads of
 * the issue's `mha run` sat there under ulimit -v 200000). Every call of
 * cblas_sgemm takes one buffer from a pool and gives it back; a buffer is
 * allocated the first time more calls run at once than the pool holds, and
 * stays allocated (gdb: malloc(BUFFER_SIZE + 4096) = 134221824 bytes in
 * blas_memory_alloc; strace: three such mappings for `mha run --threads 2`
 * on 2 CPUs). Worse, Debian's default libopenblas.so.0 (the pthreads build)
 * starts a server thread per CPU but one when it is loaded, and each takes a
 * buffer as it starts: under a limit one of them spins there, and exit()
 * then waits for it forever (OpenBLAS's destructor joins its threads), even
 * after mha has reported the error. So before loading OpenBLAS mha probes
 * room for those threads' buffers (and loads it at a later call when there
 * is none), and before a GEMM on `callers` threads, when more run at once
 * than ever before, it maps (PROT_NONE, nothing touched) that many more
 * buffers and unmaps them again: if a probe fails, the GEMM fails with
 * MHA_ERR_NOMEM instead of spinning in OpenBLAS. The limit of this: another
 * thread of the process could take the space between the probe and
 * OpenBLAS's own allocation, and other users of OpenBLAS in the process take
 * buffers mha does not count (mha.h). A thread's first malloc of that size
 * also makes glibc reserve a malloc arena for the thread (2 x HEAP_MAX_SIZE
 * = 128 MiB of address space while it aligns it; a worker hung there in
 * _int_new_arena under ulimit -v 580000), so each thread counts both. */
#define MHA_OPENBLAS_BUFFER_BYTES (((size_t)128u << 20) + 4096u + ((size_t)128u << 20))
static atomic_int openblas_buffers; /* buffers mha's calls have made OpenBLAS allocate */

static void backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K;
    snprintf(buf, cap, "OpenBLAS's buffer and a malloc arena, %zu bytes per calling thread",
             MHA_OPENBLAS_BUFFER_BYTES);
}

static bool load_backend(void);
static size_t openblas_load_bytes;  /* what the last load could not reserve (0: none) */

static size_t backend_reserve(int callers) {
    mha__sgemm_backend_name(); /* loads it */
    if (!atomic_load(&backend_loaded)) return openblas_load_bytes;
    if (!backend.sgemm) return 0; /* not loadable: the builtin kernel runs */
    int have = atomic_load(&openblas_buffers);
    if (callers <= have) return 0;
    const size_t bytes = (size_t)(callers - have) * MHA_OPENBLAS_BUFFER_BYTES;
    if (!probe_address_space(bytes)) return bytes;
    while (have < callers && !atomic_compare_exchange_weak(&openblas_buffers, &have, callers)) {
    }
    return 0;
}

/* The threads OpenBLAS starts when loaded: its blas_get_cpu_number()
 * (OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS, OMP_NUM_THREADS, else the CPUs
 * this process may run on), less the caller's. */
static int openblas_server_threads(void) {
    static const char *const vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                       "OMP_NUM_THREADS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *e = getenv(vars[i]);
        const int n = e ? atoi(e) : 0;
        if (n > 0) return n - 1;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set) - 1;
    return 0;
}

/* false: no room for OpenBLAS's start (its threads' buffers, or its code):
 * tried again at the next call. */
static bool load_backend(void) {
    openblas_load_bytes = (size_t)(openblas_server_threads() + 1) * MHA_OPENBLAS_BUFFER_BYTES;
    if (!probe_address_space(openblas_load_bytes)) return false;
    void *h = dlopen(MHA_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        if (why && (strstr(why, "map segment") || strstr(why, "allocate memory")))
            return false; /* out of memory mapping it, not absent */
    }
    if (h) {
        void *sgemm = dlsym(h, "cblas_sgemm");
        void (*set_threads)(int) = (void (*)(int))(uintptr_t)dlsym(h, "openblas_set_num_threads");
        char *(*corename)(void) = (char *(*)(void))(uintptr_t)dlsym(h, "openblas_get_corename");
        if (sgemm && set_threads) {
            set_threads(1); /* mha splits the work itself */
            backend.sgemm = (void (*)(int, int, int, int, int, int, float, const float *, int,
                                      const float *, int, float, float *, int))(uintptr_t)sgemm;
            snprintf(backend.name, sizeof backend.name, "openblas (%s)",
                     corename ? corename() : "?");
            return true;
        }
        dlclose(h);
    }
    snprintf(backend.name, sizeof backend.name, "builtin (%s not loadable)",
             MHA_OPENBLAS_SONAME);
    return true;
}

static backend_result call_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                   float alpha, const float *A, int64_t lda, const float *B,
                                   int64_t ldb, float beta, float *C, int64_t ldc) {
    if (!backend.sgemm || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX)
        return BACKEND_CANNOT;
    backend.sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                  trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M, (int)N, (int)K, alpha, A,
                  (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return BACKEND_DONE;
}

#else
void mha__sgemm_backend_cap_avx2(void) {}

static void backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K; /* the builtin kernel allocates nothing: the test hook */
    snprintf(buf, cap, "0 bytes: an injected failure");
}
static size_t backend_reserve(int callers) { (void)callers; return 0; }

static bool load_backend(void) {
    snprintf(backend.name, sizeof backend.name, "builtin");
    return true;
}

static backend_result call_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                   float alpha, const float *A, int64_t lda, const float *B,
                                   int64_t ldb, float beta, float *C, int64_t ldc) {
    (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda;
    (void)B, (void)ldb, (void)beta, (void)C, (void)ldc;
    return BACKEND_CANNOT;
}
#endif

const char *mha__sgemm_backend_name(void) {
    if (!atomic_load(&backend_loaded)) {
        pthread_mutex_lock(&backend_lock);
        if (!atomic_load(&backend_loaded)) {
            if (load_backend()) atomic_store(&backend_loaded, true);
            else snprintf(backend.name, sizeof backend.name, "openblas (not loaded: out of memory)");
        }
        pthread_mutex_unlock(&backend_lock);
    }
    return backend.name;
}

bool mha__sgemm_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float beta, float *C, int64_t ldc) {
    mha__sgemm_backend_name(); /* loads it */
    if (!atomic_load(&backend_loaded)) return false; /* no room to load it */
    /* The backend allocates on every call: for the test hook (common.h) a
     * call is one allocation, so that the tests walk this failure too. */
    if (mha__alloc_inject()) return false;
    switch (call_backend(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) {
    case BACKEND_DONE: return true;
    case BACKEND_NOMEM: return false;
    case BACKEND_CANNOT: break;
    }
    return mha__sgemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

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

/* n cut into ceil(n / target) near-equal parts, rounded up to 16. */
static void cut(int64_t n, int64_t target, int64_t *size, int64_t *count) {
    const int64_t parts = (n + target - 1) / target;
    int64_t s = (n + parts - 1) / parts;
    s = (s + 15) / 16 * 16;
    *size = s;
    *count = (n + s - 1) / s;
}

/* A function of the shape only: never of the thread count. Smaller GEMMs
 * get smaller tiles (down to 64 x 128) so that they still split into at
 * least 4, and large ones into at least 12 (more tiles cost packing; fewer
 * leave cores idle: the tiles are equal, so a count that 2, 3 and 4
 * threads do not divide, like the 5 of a 2304 x 768 weight gradient,
 * left one of 2 cores idle for a sixth of the product). */
static tile_plan plan_tiles(int64_t M, int64_t N, int64_t K) {
    tile_plan p;
    int64_t tm = MHA_GEMM_TILE_M, tn = MHA_GEMM_TILE_N;
    const double work = (double)M * (double)N * (double)K;
    if (work < 2e6) { /* one call: not worth splitting */
        p.mb = M, p.nb = N, p.nm = 1, p.nn = 1;
        return p;
    }
    const int64_t want = work >= 1e8 ? 12 : 4;
    for (;;) {
        cut(M, tm, &p.mb, &p.nm);
        cut(N, tn, &p.nb, &p.nn);
        if (p.nm * p.nn >= want || (tm <= 64 && tn <= 128)) break;
        if (tm > 64 && (tm >= tn || tn <= 128)) tm /= 2;
        else tn /= 2;
    }
    return p;
}

typedef struct {
    const mha__kernels *k;
    bool trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A, *B, *bias;
    int64_t lda, ldb, ldc;
    float *C;
    tile_plan p;
    const mha__gemm_epilogue *epi; /* or NULL */
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

/* Tile t: rows [r0, r1), columns [c0, c1) of C = alpha op(A) op(B) + beta C
 * (+ bias: written into C first, then accumulated into with beta = 1). */
static bool run_tile(const gemm_job *j, int64_t t) {
    const int64_t r0 = (t / j->p.nn) * j->p.mb, c0 = (t % j->p.nn) * j->p.nb;
    const int64_t m = j->M - r0 < j->p.mb ? j->M - r0 : j->p.mb;
    const int64_t n = j->N - c0 < j->p.nb ? j->N - c0 : j->p.nb;
    const float *a = j->trans_a ? j->A + r0 : j->A + r0 * j->lda;
    const float *b = j->trans_b ? j->B + c0 * j->ldb : j->B + c0;
    float *c = j->C + r0 * j->ldc + c0;
    float beta = j->beta;
    if (j->bias) {
        for (int64_t i = 0; i < m; i++) memcpy(c + i * j->ldc, j->bias + c0, (size_t)n * sizeof(float));
        beta = 1.0f;
    }
    if (j->K > 0) {
        if (!j->k->gemm(j->trans_a, j->trans_b, m, n, j->K, j->alpha, a, j->lda, b, j->ldb, beta,
                        c, j->ldc))
            return false;
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

void mha__gemv_ref(int64_t N, int64_t K, const float *x, const float *W, int64_t ldw,
                   const float *bias, float *y) {
    for (int64_t n = 0; n < N; n++) {
        float s = 0.0f;
        for (int64_t k = 0; k < K; k++) s = fmaf(W[n * ldw + k], x[k], s);
        y[n] = bias ? s + bias[n] : s;
    }
}

/* Rows of W per task: a fixed split, whatever the thread count. */
#define MHA_GEMV_ROWS 256

/* C (1, N) = A (1, K) B^T + bias with B (N, K): every weight read once, rows
 * of B in fixed blocks dealt to threads (each block then through the
 * epilogue, if any, which adds the bias itself). */
static void gemv_rows(const mha__kernels *k, int64_t N, int64_t K, const float *A, const float *B,
                      int64_t ldb, const float *bias, float *C, const mha__gemm_epilogue *epi) {
    const int64_t nblk = (N + MHA_GEMV_ROWS - 1) / MHA_GEMV_ROWS;
#if defined(MHA_HAVE_OPENMP)
#pragma omp parallel for schedule(static) if (nblk > 1 && (double)N * (double)K > 1e5 && !omp_in_parallel())
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t n0 = b * MHA_GEMV_ROWS, n = N - n0 < MHA_GEMV_ROWS ? N - n0 : MHA_GEMV_ROWS;
        k->gemv(n, K, A, B + n0 * ldb, ldb, bias ? bias + n0 : NULL, C + n0);
        if (epi) epilogue(k, epi, 0, n0, 1, n, C + n0, n);
    }
}

/* MHA_ERR_NOMEM for an M x N x K product, set on the calling thread (the
 * detail is per thread): what names the memory that was not there. */
static mha_status gemm_nomem(const char *what, int64_t M, int64_t N, int64_t K) {
    return mha__fail(MHA_ERR_NOMEM,
                     "out of memory in the GEMM backend (%s) on a %lld x %lld x %lld product "
                     "(%s)",
                     mha__sgemm_backend_name(), (long long)M, (long long)N, (long long)K, what);
}

/* A backend call failed. */
static mha_status gemm_status(bool failed, int64_t M, int64_t N, int64_t K) {
    if (!failed) return MHA_OK;
    char what[96];
    backend_buffers(what, sizeof what, M, N, K);
    return gemm_nomem(what, M, N, K);
}

/* The backend was not called: the address space it would need is not there. */
static mha_status reserve_status(size_t bytes, int64_t M, int64_t N, int64_t K) {
    char what[96];
    snprintf(what, sizeof what, "could not reserve the %zu bytes it needs first", bytes);
    return gemm_nomem(what, M, N, K);
}

static mha_status sgemm_tiled(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                              float alpha, const float *A, int64_t lda, const float *B,
                              int64_t ldb, float beta, float *C, int64_t ldc, const float *bias,
                              const mha__gemm_epilogue *epi) {
    if (M <= 0 || N <= 0) return MHA_OK;
    if (M == 1 && !trans_a && trans_b && alpha == 1.0f && (beta == 0.0f || bias) && K > 0) {
        gemv_rows(mha__kernels_active(), N, K, A, B, ldb, bias, C, epi);
        return MHA_OK;
    }
    gemm_job j = {mha__kernels_active(), trans_a, trans_b, M, N, K, alpha, beta, A, B, bias,
                  lda, ldb, ldc, C, plan_tiles(M, N, K > 0 ? K : 1), epi};
    const int64_t ntiles = j.p.nm * j.p.nn;
    bool failed = false; /* a backend call ran out of memory: C is then unspecified */
    const bool on_backend = j.k->gemm == mha__sgemm_backend && K > 0;
#if defined(MHA_HAVE_OPENMP)
    if (ntiles > 1 && !omp_in_parallel()) {
        const int nt = omp_get_max_threads() < ntiles ? omp_get_max_threads() : (int)ntiles;
        const size_t short_of = on_backend ? backend_reserve(nt) : 0;
        if (short_of) return reserve_status(short_of, M, N, K);
#pragma omp parallel num_threads(nt) reduction(|| : failed)
        {
            /* The backend must not start threads of its own: oneDNN reads
             * this thread's OpenMP setting (the setting lives and dies with
             * this parallel region's implicit task). */
            omp_set_num_threads(1);
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < ntiles; t++)
                if (!failed && !run_tile(&j, t)) failed = true;
        }
        return gemm_status(failed, M, N, K);
    }
    if (!omp_in_parallel()) {
        const size_t short_of = on_backend ? backend_reserve(1) : 0;
        if (short_of) return reserve_status(short_of, M, N, K);
        /* One tile on the calling thread: a one-thread team so that the
         * backend's thread setting can be changed without touching the
         * caller's. */
#pragma omp parallel num_threads(1) reduction(|| : failed)
        {
            omp_set_num_threads(1);
            for (int64_t t = 0; t < ntiles && !failed; t++) failed = !run_tile(&j, t);
        }
        return gemm_status(failed, M, N, K);
    }
#endif
    const size_t short_of = on_backend ? backend_reserve(1) : 0;
    if (short_of) return reserve_status(short_of, M, N, K);
    for (int64_t t = 0; t < ntiles && !failed; t++) failed = !run_tile(&j, t);
    return gemm_status(failed, M, N, K);
}

mha_status mha__sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float beta, float *C, int64_t ldc) {
    return sgemm_tiled(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL);
}

mha_status mha__sgemm_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t lda, const float *B, int64_t ldb,
                           const float *bias, float *C, int64_t ldc) {
    return sgemm_tiled(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, bias, NULL);
}

mha_status mha__sgemm_epilogue(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                               const float *B, int64_t ldb, float *C, int64_t ldc,
                               const mha__gemm_epilogue *epi) {
    return sgemm_tiled(false, true, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, NULL, epi);
}
