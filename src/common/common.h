/* common.h — internal helpers shared by every layer: error detail, checked
 * size arithmetic, aligned allocation. Not part of the public API. */
#ifndef MHA_COMMON_H
#define MHA_COMMON_H

#include "mha.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MHA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MHA_PRINTF(a, b)
#endif

/* Records a detail for mha_last_error() and returns s, so that failing
 * paths read: return mha__fail(MHA_ERR_SHAPE, "T (%lld) ...", ...); */
mha_status mha__fail(mha_status s, const char *fmt, ...) MHA_PRINTF(2, 3);
void mha__clear_error(void);

/* Checked arithmetic on sizes: false on overflow (result then unspecified). */
static inline bool mha__mul_size(size_t a, size_t b, size_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool mha__add_size(size_t a, size_t b, size_t *r) {
    return !__builtin_add_overflow(a, b, r);
}
static inline bool mha__mul_i64(int64_t a, int64_t b, int64_t *r) {
    return !__builtin_mul_overflow(a, b, r);
}

/* 64-byte aligned allocation; mha__free accepts NULL. */
void *mha__alloc(size_t bytes);
void *mha__calloc(size_t bytes);
void mha__free(void *p);

/* CPU features, detected once (thread-safe) including the OS's support for
 * the register state (XGETBV). The only place that asks the CPU. */
typedef struct {
    bool avx2;   /* AVX2 and FMA */
    bool avx512; /* AVX-512 F, BW, DQ and VL (and AVX2/FMA) */
} mha__cpu_features;
const mha__cpu_features *mha__cpu(void);

/* "%.17g" of x (which reads back exactly) in the C locale, whatever
 * LC_NUMERIC the program has set. */
void mha__format_double(char *buf, size_t cap, double x);
/* A finite double in plain decimal notation ("0.1", "-2", "1e-08"; no
 * spaces, hex, inf or nan), read in the C locale. false otherwise. */
bool mha__parse_double(const char *s, double *out);

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. The offset of the first byte that does not start a valid
 * sequence, or len when all of s is valid. */
size_t mha__utf8_check(const unsigned char *s, size_t len);

/* Round up to a multiple of 64 (bytes), for carving workspaces. */
static inline size_t mha__align64(size_t n) { return (n + 63u) & ~(size_t)63u; }

#endif
