/* cpu.c — what the CPU can do (asked once) and how many threads compute
 * calls use. The kernels are chosen from these features in
 * kernels/dispatch.c. */
#include "common.h"

#include <pthread.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#endif

static mha__cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the ymm / zmm
     * and opmask state (XGETBV). */
    features.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    features.avx512 = features.avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
#endif
}

const mha__cpu_features *mha__cpu(void) {
    pthread_once(&features_once, detect);
    return &features;
}

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
