/* threads.c — how many threads compute calls use, and room for OpenMP's
 * threads before a parallel region.
 *
 * libgomp cannot fail cleanly: when it cannot create a thread (under an
 * address-space limit, the thread's stack cannot be mapped) it prints
 * "libgomp: Thread creation failed" and exits the process (GCC 12's
 * gomp_fatal), and under a tight limit glibc can even abort while it does.
 * Its threads, once started, are kept for later regions of the same calling
 * thread (a pool per thread that opens regions). So before the first
 * computation of a calling thread on more threads than any before, the
 * compute entry points map (PROT_NONE, untouched) the stacks those threads
 * will take and unmap them again; when that fails they return
 * MHA_ERR_NOMEM, naming the bytes and the thread count, instead of calling
 * into OpenMP; when it works they start the threads at once, with an empty
 * region, before their own allocations can take the room. A guard, not a
 * guarantee: another thread of the process can take the room between the
 * probe and the start (mha.h). */
#define _GNU_SOURCE 1 /* pthread_getattr_default_np */
#include "common.h"

#include <sched.h>

#if defined(MHA_HAVE_OPENMP)
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

static _Thread_local int threads_ready = 1; /* the largest team this thread has started */

/* OMP_STACKSIZE as libgomp reads it ("512K", "4 M", a bare number is KiB),
 * else glibc's default thread stack size (from RLIMIT_STACK). */
static size_t thread_stack_bytes(void) {
    const char *e = getenv("OMP_STACKSIZE");
    if (e && *e) {
        char *end = NULL;
        unsigned long long v = strtoull(e, &end, 10);
        while (end && *end == ' ') end++;
        unsigned shift = 10;
        if (end && *end) {
            switch (*end | 0x20) {
            case 'b': shift = 0; break;
            case 'k': shift = 10; break;
            case 'm': shift = 20; break;
            case 'g': shift = 30; break;
            default: break;
            }
        }
        if (v > 0 && v < (1ull << 40) >> shift) return (size_t)(v << shift);
    }
    size_t bytes = 0;
    pthread_attr_t a;
    if (pthread_getattr_default_np(&a) == 0) {
        (void)pthread_attr_getstacksize(&a, &bytes);
        pthread_attr_destroy(&a);
    }
    return bytes ? bytes : (size_t)8 << 20;
}

mha_status mha__threads_ready(void) {
    if (omp_in_parallel()) return MHA_OK;
    const int n = omp_get_max_threads();
    if (n <= threads_ready) return MHA_OK;
    const size_t per = thread_stack_bytes() + 4096; /* and its guard page */
    size_t bytes;
    if (!mha__mul_size((size_t)(n - 1), per, &bytes))
        return mha__fail(MHA_ERR_NOMEM, "out of memory: %d threads' stacks overflow", n);
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return mha__fail(MHA_ERR_NOMEM,
                         "out of memory for the stacks of %d threads (%zu bytes; fewer threads "
                         "need less)", n, bytes);
    munmap(p, bytes);
    int started = 0;
#pragma omp parallel num_threads(n) reduction(+ : started)
    started += 1;
    threads_ready = started; /* fewer when OpenMP gave fewer (a thread limit) */
    return MHA_OK;
}
#else
mha_status mha__threads_ready(void) { return MHA_OK; }
#endif

#if defined(MHA_HAVE_OPENMP)
/* The serving region's mailbox: the caller publishes a step by bumping
 * gen (release) after fn and arg; each helper, having seen the bump
 * (acquire), runs it and counts itself done (release), which the caller
 * waits for (acquire). The lines apart: the helpers poll gen while the
 * caller's writes to done would otherwise bounce it. */
typedef struct {
    _Alignas(64) unsigned gen;
    mha__team_fn *fn;
    void *arg;
    int nt;
    bool quit;
    _Alignas(64) int done;
} team;

static _Thread_local team *serving; /* the team the calling thread leads */

static void helper(team *tm, int t) {
    unsigned seen = 0;
    for (;;) {
        unsigned g, n = 0;
        while ((g = __atomic_load_n(&tm->gen, __ATOMIC_ACQUIRE)) == seen) mha__spin_pause(&n);
        seen = g;
        if (tm->quit) return;
        tm->fn(tm->arg, t, tm->nt);
        __atomic_fetch_add(&tm->done, 1, __ATOMIC_RELEASE);
    }
}

void mha__team_serve(void (*body)(void *arg), void *arg) {
    if (serving || omp_in_parallel() || omp_get_max_threads() < 2) {
        body(arg);
        return;
    }
    team tm = {0};
#pragma omp parallel num_threads(omp_get_max_threads())
    {
        const int t = omp_get_thread_num();
        if (t == 0) {
            tm.nt = omp_get_num_threads(); /* fewer where OpenMP gave fewer */
            serving = &tm;
            body(arg);
            serving = NULL;
            tm.quit = true;
            __atomic_fetch_add(&tm.gen, 1, __ATOMIC_RELEASE);
        } else {
            helper(&tm, t);
        }
    }
}

bool mha__team_run(mha__team_fn *fn, void *arg) {
    team *tm = serving;
    if (!tm) return false;
    tm->fn = fn;
    tm->arg = arg;
    __atomic_store_n(&tm->done, 0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&tm->gen, 1, __ATOMIC_RELEASE);
    fn(arg, 0, tm->nt);
    unsigned n = 0;
    while (__atomic_load_n(&tm->done, __ATOMIC_ACQUIRE) < tm->nt - 1) mha__spin_pause(&n);
    return true;
}
#else
void mha__team_serve(void (*body)(void *arg), void *arg) { body(arg); }
bool mha__team_run(mha__team_fn *fn, void *arg) {
    (void)fn;
    (void)arg;
    return false;
}
#endif

#if defined(MHA_HAVE_OPENMP)
/* mha__parallel_units' shares: [lo, hi) of the units in one word, lo in the
 * low 32 bits, each word on its own line; the owner takes unit lo (the word
 * then says lo + 1), a thief unit hi - 1 (the word then says hi - 1), each
 * by one compare-and-swap of the word, so a unit is taken once. Units are
 * dealt in groups of g (2^32 units would not fit a word: g is 1 but for
 * impossibly large n). More threads than shares share shares. */
enum { SHARES = 64 };
typedef struct {
    _Alignas(64) uint64_t w;
} share;

static bool take(share *s, bool own, uint64_t *unit) {
    uint64_t w = __atomic_load_n(&s->w, __ATOMIC_RELAXED);
    for (;;) {
        const uint64_t lo = w & 0xffffffffu, hi = w >> 32;
        if (lo >= hi) return false;
        const uint64_t nw = own ? w + 1 : w - ((uint64_t)1 << 32);
        if (__atomic_compare_exchange_n(&s->w, &w, nw, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            *unit = own ? lo : hi - 1;
            return true;
        }
    }
}
#endif

bool mha__parallel_units(int64_t n, int nt, mha__unit_fn *fn, void *arg) {
    if (n <= 0) return true;
#if defined(MHA_HAVE_OPENMP)
    if (nt > 1 && n > 1 && !omp_in_parallel()) {
        const int ns = nt < SHARES ? nt : SHARES;
        const uint64_t g = (uint64_t)n / 0xffffffffu + 1, groups = ((uint64_t)n + g - 1) / g;
        share sh[SHARES];
        for (int i = 0; i < ns; i++) {
            const uint64_t lo = groups * (uint64_t)i / (uint64_t)ns, hi = groups * (uint64_t)(i + 1) / (uint64_t)ns;
            sh[i].w = lo | hi << 32;
        }
        bool failed = false;
#pragma omp parallel num_threads(nt)
        {
            const int t = omp_get_thread_num(), own = t % ns;
            uint64_t grp;
            for (int k = 0; k < ns && !__atomic_load_n(&failed, __ATOMIC_RELAXED);) {
                if (!take(&sh[(own + k) % ns], k == 0, &grp)) {
                    k++; /* this share is done: the next one's back */
                    continue;
                }
                const int64_t u1 = (int64_t)((grp + 1) * g < (uint64_t)n ? (grp + 1) * g : (uint64_t)n);
                for (int64_t u = (int64_t)(grp * g); u < u1; u++)
                    if (__atomic_load_n(&failed, __ATOMIC_RELAXED) || !fn(arg, u, t)) {
                        __atomic_store_n(&failed, true, __ATOMIC_RELAXED);
                        break;
                    }
            }
        }
        return !failed;
    }
#else
    (void)nt;
#endif
    for (int64_t u = 0; u < n; u++)
        if (!fn(arg, u, 0)) return false;
    return true;
}

void mha__spin_pause(unsigned *n) {
    if (++*n < (1u << 14)) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else {
        sched_yield();
    }
}

int mha__max_threads(void) {
#if defined(MHA_HAVE_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int mha__thread_num(void) {
#if defined(MHA_HAVE_OPENMP)
    return omp_get_thread_num();
#else
    return 0;
#endif
}

int mha_runtime_threads(void) { return mha__max_threads(); }

mha_status mha_runtime_set_threads(int n) {
    if (n < 1) return mha__fail(MHA_ERR_ARGUMENT, "thread count (%d) must be >= 1", n);
#if defined(MHA_HAVE_OPENMP)
    omp_set_num_threads(n);
#endif
    return MHA_OK;
}
