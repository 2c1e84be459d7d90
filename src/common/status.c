/* status.c — status names and texts (from the X-macro list in mha.h) and the
 * per-thread detail of the last failure. */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void *mha__alloc(size_t bytes) {
    if (bytes == 0) bytes = 64;
    void *p = NULL;
    if (posix_memalign(&p, 64, mha__align64(bytes)) != 0) return NULL;
    return p;
}

void *mha__calloc(size_t bytes) {
    void *p = mha__alloc(bytes);
    if (p) {
        unsigned char *c = p;
        memset(c, 0, bytes);
    }
    return p;
}

void mha__free(void *p) { free(p); }
