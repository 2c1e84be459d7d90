/* status.c — status names and texts (from the X-macro list in mha.h) and the
 * per-thread detail of the last failure. */
#include "common.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

static _Thread_local char last_error[512];

const char *mha_version(void) { return MHA_VERSION_STRING; }

const char *mha_status_name(mha_status s) {
    switch (s) {
#define MHA_X_(name, value, text) \
    case MHA_##name:              \
        return "MHA_" #name;
        MHA_STATUS_LIST(MHA_X_)
#undef MHA_X_
    }
    return "MHA_UNKNOWN_STATUS";
}

const char *mha_status_string(mha_status s) {
    switch (s) {
#define MHA_X_(name, value, text) \
    case MHA_##name:              \
        return text;
        MHA_STATUS_LIST(MHA_X_)
#undef MHA_X_
    }
    return "unknown status";
}

const char *mha_last_error(void) { return last_error; }

void mha__clear_error(void) { last_error[0] = '\0'; }

mha_status mha__fail(mha_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- allocation ------------------------------------------------------------
 *
 * Every allocation of the library comes here, so that a failure is one
 * status (MHA_ERR_NOMEM, whose detail names the size: mha__nomem) and so
 * that the tests can make the Nth allocation fail (mha__alloc_fail_after)
 * to walk every failure path. The hook is internal (hidden in libmha.so);
 * the tests link libmha.a. */

static atomic_long fail_countdown; /* > 0: the allocation that takes it to 0 fails */
static atomic_long fail_fired;      /* injected failures since the hook was armed */
static _Thread_local size_t failed_bytes;

void mha__alloc_fail_after(long n) {
    fail_fired = 0;
    fail_countdown = n > 0 ? n : 0;
}

long mha__alloc_failures_injected(void) { return fail_fired; }

bool mha__alloc_inject(void) {
    long c = fail_countdown;
    while (c > 0) {
        if (atomic_compare_exchange_weak(&fail_countdown, &c, c - 1)) {
            if (c != 1) return false;
            fail_fired++;
            return true;
        }
    }
    return false;
}

static void *alloc_failed(size_t bytes) {
    failed_bytes = bytes;
    return NULL;
}

static void *alloc_pages(size_t bytes, bool huge) {
    if (mha__alloc_inject()) return alloc_failed(bytes);
    size_t rounded = mha__align64(bytes ? bytes : 64);
    if (rounded < bytes) return alloc_failed(bytes); /* SIZE_MAX-ish requests */
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded) != 0) return alloc_failed(bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* The 2 MiB pages inside the block: one page fault per 2 MiB instead
     * of 512. Advice only: nothing changes where the system has
     * transparent huge pages off (or always on); a refusal is ignored. */
    enum { HUGE_PAGE = 2 << 20 };
    if (huge && rounded >= 2 * (size_t)HUGE_PAGE) {
        const uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        const uintptr_t e = ((uintptr_t)p + rounded) & ~(uintptr_t)(HUGE_PAGE - 1);
        if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
    }
#else
    (void)huge;
#endif
    return p;
}

void *mha__alloc(size_t bytes) { return alloc_pages(bytes, true); }

void *mha__alloc_gradual(size_t bytes) { return alloc_pages(bytes, false); }

void mha__populate(void *p, size_t bytes) {
#if defined(__linux__)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif
    const long ps = sysconf(_SC_PAGESIZE);
    if (!p || !bytes || ps <= 0) return;
    const uintptr_t page = (uintptr_t)ps, a = (uintptr_t)p & ~(page - 1);
    const uintptr_t e = ((uintptr_t)p + bytes + page - 1) & ~(page - 1);
    (void)madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)bytes;
#endif
}

void *mha__calloc(size_t bytes) {
    void *p = mha__alloc(bytes);
    if (p) {
        unsigned char *c = p;
        memset(c, 0, bytes);
    }
    return p;
}

void *mha__alloc_n(size_t n, size_t size) {
    size_t bytes;
    if (!mha__mul_size(n, size, &bytes)) return alloc_failed(SIZE_MAX);
    return mha__alloc(bytes);
}

void *mha__calloc_n(size_t n, size_t size) {
    size_t bytes;
    if (!mha__mul_size(n, size, &bytes)) return alloc_failed(SIZE_MAX);
    return mha__calloc(bytes);
}

char *mha__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = mha__alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void mha__free(void *p) { free(p); }

void mha__release_free_pages(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

mha_status mha__grow(void **buf, size_t *cap, size_t need, const char *what) {
    if (*cap >= need) return MHA_OK;
    void *p = mha__alloc(need);
    if (!p) return mha__nomem("out of memory growing %s to %zu bytes", what, need);
    mha__free(*buf);
    *buf = p;
    *cap = need;
    return MHA_OK;
}

size_t mha__alloc_failed_bytes(void) { return failed_bytes; }

mha_status mha__nomem(const char *fmt, ...) {
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (failed_bytes == SIZE_MAX)
        return mha__fail(MHA_ERR_NOMEM, "%s (the size overflows)", what);
    char size[32];
    snprintf(size, sizeof size, "%zu bytes", failed_bytes);
    if (strstr(what, size)) return mha__fail(MHA_ERR_NOMEM, "%s", what); /* said already */
    return mha__fail(MHA_ERR_NOMEM, "%s (could not allocate %s)", what, size);
}
