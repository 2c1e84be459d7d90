/* dispatch.c — the one place that decides which kernels run.
 *
 * One table per ISA (kernels.h, mha__kernels), BLIS's context pattern: the
 * reference table is filled with the portable kernels, the AVX2 table is a
 * copy of it with AVX2's kernels written over, the AVX-512 table a copy of
 * the AVX2 one with AVX-512's written over (an entry an ISA does not have
 * is inherited from the one below), all from kernels.h's one list. The
 * tables are built once, on first use, from the CPU features (common/cpu.c)
 * and MHA_ISA, which is read only then; pthread_once makes racing first uses
 * safe. Afterwards every caller reads the active table through one atomic
 * pointer, which mha_runtime_set_isa may swap. */
#include "common/common.h"
#include "gemm_backend.h"
#include "kernels.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static mha__kernels tables[MHA_ISA_COUNT];
static bool have[MHA_ISA_COUNT];         /* built and runnable on this CPU */
static const mha__kernels *active;       /* atomic */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const isa_names[MHA_ISA_COUNT] = {"ref", "avx2", "avx512"};

/* The filling, from kernels.h's list: every entry of the reference table,
 * then the entries an ISA has (Y in its column) over the copy it starts as. */
#define SET_REF(name, ret, params, avx2, avx512) k->name = mha__##name##_ref;
#define SET_AVX2(name, ret, params, avx2, avx512) MHA__IF_##avx2(k->name = mha__##name##_avx2;)
#define SET_AVX512(name, ret, params, avx2, avx512) MHA__IF_##avx512(k->name = mha__##name##_avx512;)

static void fill(mha__kernels *k, mha__isa_t isa) {
    k->isa = isa;
    k->name = isa_names[isa];
    switch (isa) {
    case MHA_ISA_REF: MHA__KERNEL_LIST(SET_REF) break;
#if defined(MHA_HAVE_AVX2_KERNELS)
    case MHA_ISA_AVX2: MHA__KERNEL_LIST(SET_AVX2) break;
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
    case MHA_ISA_AVX512: MHA__KERNEL_LIST(SET_AVX512) break;
#endif
    default: break;
    }
    /* The fast tables' GEMM: the BLAS backend of this build, where it has
     * one, instead of the ISA's builtin packed GEMM, which small products
     * keep. */
    k->gemm_small = k->gemm;
    if (isa != MHA_ISA_REF && mha__sgemm_backend_is_blas) k->gemm = mha__sgemm_backend;
}

/* MHA_ISA: "ref", "avx2", "avx512" or "auto" (unset or anything else: the
 * best the CPU has). A cap, never a promise: "avx512" on an AVX2 CPU gives
 * AVX2. */
static mha__isa_t env_cap(void) {
    const char *e = getenv("MHA_ISA");
    for (int i = 0; e && i < MHA_ISA_COUNT; i++)
        if (strcmp(e, isa_names[i]) == 0) return (mha__isa_t)i;
    return MHA_ISA_AVX512;
}

static const mha__kernels *best_up_to(mha__isa_t cap) {
    for (int i = (int)cap; i > 0; i--)
        if (have[i]) return &tables[i];
    return &tables[MHA_ISA_REF];
}

static void build(void) {
    const mha__cpu_features *cpu = mha__cpu();
    fill(&tables[MHA_ISA_REF], MHA_ISA_REF);
    have[MHA_ISA_REF] = true;
#if defined(MHA_HAVE_AVX2_KERNELS)
    tables[MHA_ISA_AVX2] = tables[MHA_ISA_REF];
    fill(&tables[MHA_ISA_AVX2], MHA_ISA_AVX2);
    have[MHA_ISA_AVX2] = cpu->avx2;
#endif
#if defined(MHA_HAVE_AVX512_KERNELS)
    tables[MHA_ISA_AVX512] = tables[MHA_ISA_AVX2];
    fill(&tables[MHA_ISA_AVX512], MHA_ISA_AVX512);
    have[MHA_ISA_AVX512] = cpu->avx512 && have[MHA_ISA_AVX2];
#endif
    (void)cpu;
    const mha__kernels *k = best_up_to(env_cap());
    /* Capped below the CPU's best: the GEMM backend too, where it can be
     * told so before its first use. */
    if (k->isa == MHA_ISA_AVX2 && have[MHA_ISA_AVX512]) mha__sgemm_backend_cap_avx2();
    __atomic_store_n(&active, k, __ATOMIC_RELEASE);
}

const mha__kernels *mha__kernels_active(void) {
    pthread_once(&once, build);
    return __atomic_load_n(&active, __ATOMIC_ACQUIRE);
}

const mha__kernels *mha__kernels_get(mha__isa_t isa) {
    pthread_once(&once, build);
    return (int)isa >= 0 && isa < MHA_ISA_COUNT && have[isa] ? &tables[isa] : NULL;
}

const char *mha_runtime_isa(void) { return mha__kernels_active()->name; }

mha_status mha_runtime_set_isa(const char *name) {
    if (!name) return mha__fail(MHA_ERR_ARGUMENT, "ISA name is NULL");
    pthread_once(&once, build);
    const mha__kernels *k = NULL;
    if (strcmp(name, "auto") == 0) {
        k = best_up_to(MHA_ISA_AVX512);
    } else {
        int i = 0;
        while (i < MHA_ISA_COUNT && strcmp(name, isa_names[i]) != 0) i++;
        if (i == MHA_ISA_COUNT)
            return mha__fail(MHA_ERR_ARGUMENT,
                             "unknown ISA '%.40s' (expected ref, avx2, avx512 or auto)", name);
        if (!have[i])
            return mha__fail(MHA_ERR_UNSUPPORTED, "ISA '%s' is not available: %s", name,
                             i == MHA_ISA_AVX512 && !mha__cpu()->avx512 ? "this CPU lacks AVX-512"
                             : !mha__cpu()->avx2 ? "this CPU lacks AVX2/FMA"
                                                 : "this build has no kernels for it");
        k = &tables[i];
    }
    __atomic_store_n(&active, k, __ATOMIC_RELEASE);
    return MHA_OK;
}

const char *mha_runtime_blas(void) {
    const mha__kernels *k = mha__kernels_active();
    if (k->gemm == mha__gemm_ref) return "ref";
    if (k->gemm != mha__sgemm_backend) return k->isa == MHA_ISA_AVX512 ? "builtin (avx512)" : "builtin (avx2)";
    return mha__sgemm_backend_name();
}
