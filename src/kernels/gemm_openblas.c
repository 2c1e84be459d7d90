/* gemm_openblas.c — the GEMM backend on OpenBLAS's cblas_sgemm, loaded at
 * first use with dlopen (-DMHA_BLAS=openblas, or auto without oneDNN). The
 * contract: gemm_backend.h. Compiled only in builds that use it
 * (CMakeLists.txt, which defines MHA_OPENBLAS_SONAME for this file). */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT */
#include "common/common.h"
#include "gemm_backend.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const bool mha__sgemm_backend_is_blas = true;

static void (*openblas_sgemm)(int, int, int, int, int, int, float, const float *, int, const float *,
                              int, float, float *, int);

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

void mha__backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K) {
    (void)M, (void)N, (void)K;
    snprintf(buf, cap, "OpenBLAS's buffer and a malloc arena, %zu bytes per calling thread",
             MHA_OPENBLAS_BUFFER_BYTES);
}

static size_t openblas_load_bytes;  /* what the last load could not reserve (0: none) */

size_t mha__backend_reserve(int callers) {
    if (!mha__sgemm_backend_ready()) return openblas_load_bytes;
    if (!openblas_sgemm) return 0; /* not loadable: the builtin kernel runs */
    int have = atomic_load(&openblas_buffers);
    if (callers <= have) return 0;
    const size_t bytes = (size_t)(callers - have) * MHA_OPENBLAS_BUFFER_BYTES;
    if (!mha__probe_address_space(bytes)) return bytes;
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
bool mha__backend_load(char *name, size_t cap) {
    openblas_load_bytes = (size_t)(openblas_server_threads() + 1) * MHA_OPENBLAS_BUFFER_BYTES;
    if (!mha__probe_address_space(openblas_load_bytes)) {
        snprintf(name, cap, "openblas (not loaded: out of memory)");
        return false;
    }
    void *h = dlopen(MHA_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        if (why && (strstr(why, "map segment") || strstr(why, "allocate memory"))) {
            snprintf(name, cap, "openblas (not loaded: out of memory)");
            return false; /* out of memory mapping it, not absent */
        }
    }
    if (h) {
        void *sgemm = dlsym(h, "cblas_sgemm");
        void (*set_threads)(int) = (void (*)(int))(uintptr_t)dlsym(h, "openblas_set_num_threads");
        char *(*corename)(void) = (char *(*)(void))(uintptr_t)dlsym(h, "openblas_get_corename");
        if (sgemm && set_threads) {
            set_threads(1); /* mha splits the work itself */
            openblas_sgemm = (void (*)(int, int, int, int, int, int, float, const float *, int,
                                       const float *, int, float, float *, int))(uintptr_t)sgemm;
            snprintf(name, cap, "openblas (%s)", corename ? corename() : "?");
            return true;
        }
        dlclose(h);
    }
    snprintf(name, cap, "builtin (%s not loadable)", MHA_OPENBLAS_SONAME);
    return true;
}

mha__backend_result mha__backend_call(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                      float alpha, const float *A, int64_t lda, const float *B,
                                      int64_t ldb, float beta, float *C, int64_t ldc) {
    if (!openblas_sgemm || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX ||
        ldb > INT32_MAX || ldc > INT32_MAX)
        return MHA_BACKEND_CANNOT;
    openblas_sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, (int)M, (int)N, (int)K, alpha, A,
                   (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return MHA_BACKEND_DONE;
}
