/* test_util.h — a minimal check harness: CHECK counts, never aborts;
 * TEST_END prints "N passed, M failed" and returns the exit status. */
#ifndef MHA_TEST_UTIL_H
#define MHA_TEST_UTIL_H

#include <math.h>
#include <stdio.h>

static int t_pass, t_fail;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            t_pass++;                                                     \
        } else {                                                          \
            t_fail++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

#define TEST_END(name)                                                    \
    (printf("%s: %d passed, %d failed\n", name, t_pass, t_fail), t_fail ? 1 : 0)

#endif
