/* gemm_onednn.c — the GEMM backend on oneDNN's dnnl_sgemm (linked; the
 * default with OpenMP, -DMHA_BLAS=onednn). The contract: gemm_backend.h.
 * Compiled only in builds that use it (CMakeLists.txt). */
#include "common/common.h"
#include "gemm_backend.h"

#include <dnnl.h>
#include <stdatomic.h>
#include <stdio.h>
#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

const bool mha__sgemm_backend_is_blas = true;

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
void mha__backend_buffers(char *buf, size_t cap, int64_t M, int64_t N, int64_t K) {
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

size_t mha__backend_reserve(int callers) {
    (void)callers;
    if (atomic_load(&onednn_set_up)) return 0;
    if (!mha__probe_address_space(MHA_ONEDNN_SETUP_BYTES) || !onednn_warm_up())
        return MHA_ONEDNN_SETUP_BYTES;
    atomic_store(&onednn_set_up, true);
    return 0;
}

bool mha__backend_load(char *name, size_t cap) {
    const dnnl_version_t *v = dnnl_version();
    snprintf(name, cap, "onednn %d.%d.%d (%s)", v->major, v->minor, v->patch,
             onednn_isa(dnnl_get_effective_cpu_isa()));
    return true;
}

mha__backend_result mha__backend_call(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                      float alpha, const float *A, int64_t lda, const float *B,
                                      int64_t ldb, float beta, float *C, int64_t ldc) {
    /* dnnl_sgemm allocates its packing buffers per call and says so when it
     * cannot (dnnl_out_of_memory); that is the caller's MHA_ERR_NOMEM. */
    switch (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                       beta, C, ldc)) {
    case dnnl_success: return MHA_BACKEND_DONE;
    case dnnl_out_of_memory: return MHA_BACKEND_NOMEM;
    default: return MHA_BACKEND_CANNOT;
    }
}
