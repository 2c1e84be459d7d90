/* cpu.c — what the CPU can do (asked once). The kernels are chosen from
 * these features in kernels/dispatch.c. */
#include "common.h"

#include <pthread.h>

static mha__cpu_features features;
static pthread_once_t features_once = PTHREAD_ONCE_INIT;

static void detect(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* __builtin_cpu_supports also checks that the OS saves the ymm / zmm
     * and opmask state (XGETBV). */
    features.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c"); /* every AVX2 CPU has it: the F16 weights' loads */
    features.avx512 = features.avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
#endif
}

const mha__cpu_features *mha__cpu(void) {
    pthread_once(&features_once, detect);
    return &features;
}
