/* gemm_backend.c — what the three backend files share (gemm_backend.h): the
 * backend loaded once, its name, and the one-thread call with its fallback
 * to the reference loops. No backend definitions reach this file. */
#include "common/common.h"
#include "gemm_backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

static char backend_name[96];
/* Loaded once, under a lock rather than pthread_once, because a load that
 * fails for lack of memory (OpenBLAS) is tried again at the next call. */
static pthread_mutex_t backend_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool backend_loaded;

bool mha__probe_address_space(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    munmap(p, bytes);
    return true;
}

bool mha__sgemm_backend_ready(void) {
    if (!atomic_load(&backend_loaded)) {
        pthread_mutex_lock(&backend_lock);
        if (!atomic_load(&backend_loaded) && mha__backend_load(backend_name, sizeof backend_name))
            atomic_store(&backend_loaded, true);
        pthread_mutex_unlock(&backend_lock);
    }
    return atomic_load(&backend_loaded);
}

const char *mha__sgemm_backend_name(void) {
    mha__sgemm_backend_ready();
    return backend_name;
}

bool mha__sgemm_backend(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                        float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
                        float beta, float *C, int64_t ldc) {
    if (!mha__sgemm_backend_ready()) return false; /* no room to load it */
    /* The backend allocates on every call: for the test hook (common.h) a
     * call is one allocation, so that the tests walk this failure too. */
    if (mha__alloc_inject()) return false;
    switch (mha__backend_call(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) {
    case MHA_BACKEND_DONE: return true;
    case MHA_BACKEND_NOMEM: return false;
    case MHA_BACKEND_CANNOT: break;
    }
    return mha__gemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
