/* cpu.c — CPU-feature detection (once) and the runtime settings: which
 * kernels, which BLAS, how many threads. */
#include "common.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

static int detect_avx2(void) {
#if defined(MHA_HAVE_AVX2_KERNELS) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    /* __builtin_cpu_supports checks the OS saves ymm state (XGETBV) too. */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int detect_avx512(void) {
#if defined(MHA_HAVE_AVX512_KERNELS) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    /* Checks the OS saves the opmask and zmm state (XGETBV) too. */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* -1: follow the environment; 0: auto; 1: reference; 2: at most AVX2. */
static int isa_override = -1;

static int isa_setting(void) {
    int o = __atomic_load_n(&isa_override, __ATOMIC_ACQUIRE);
    if (o >= 0) return o;
    const char *env = getenv("MHA_ISA");
    if (env && strcmp(env, "ref") == 0) return 1;
    if (env && strcmp(env, "avx2") == 0) return 2;
    return 0;
}

bool mha__forced_ref(void) { return isa_setting() == 1; }

static mha__isa_t detect(void) {
    const int s = isa_setting();
    if (s == 1) return MHA_ISA_REF;
    if (s != 2 && detect_avx512() && detect_avx2()) return MHA_ISA_AVX512;
    return detect_avx2() ? MHA_ISA_AVX2 : MHA_ISA_REF;
}

static int cached_isa = -1;

mha__isa_t mha__isa(void) {
    /* Racing first calls compute the same value; the store is atomic. */
    int v = __atomic_load_n(&cached_isa, __ATOMIC_ACQUIRE);
    if (v < 0) {
        v = (int)detect();
        __atomic_store_n(&cached_isa, v, __ATOMIC_RELEASE);
    }
    return (mha__isa_t)v;
}

mha_status mha_runtime_set_isa(const char *name) {
    if (!name) return mha__fail(MHA_ERR_ARGUMENT, "ISA name is NULL");
    if (strcmp(name, "ref") == 0)
        __atomic_store_n(&isa_override, 1, __ATOMIC_RELEASE);
    else if (strcmp(name, "auto") == 0)
        __atomic_store_n(&isa_override, 0, __ATOMIC_RELEASE);
    else if (strcmp(name, "avx2") == 0)
        __atomic_store_n(&isa_override, 2, __ATOMIC_RELEASE);
    else
        return mha__fail(MHA_ERR_ARGUMENT, "unknown ISA '%.40s' (expected ref, avx2 or auto)",
                         name);
    __atomic_store_n(&cached_isa, (int)detect(), __ATOMIC_RELEASE);
    return MHA_OK;
}

const char *mha_runtime_isa(void) {
    switch (mha__isa()) {
    case MHA_ISA_AVX512: return "avx512";
    case MHA_ISA_AVX2: return "avx2";
    default: return "ref";
    }
}

const char *mha_runtime_blas(void) { return mha__blas_name(); }

int mha_runtime_threads(void) {
#if defined(MHA_HAVE_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

mha_status mha_runtime_set_threads(int n) {
    if (n < 1) return mha__fail(MHA_ERR_ARGUMENT, "thread count (%d) must be >= 1", n);
#if defined(MHA_HAVE_OPENMP)
    omp_set_num_threads(n);
#endif
    return MHA_OK;
}
