/* numtext.c — doubles to and from text in the C locale, for the metadata of
 * the files the library writes: '.' is the decimal point whatever
 * LC_NUMERIC the program has set (the C locale is made current on this
 * thread for the call). */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "common.h"

#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    locale_t c, old;
} c_numeric;

static c_numeric c_numeric_begin(void) {
    c_numeric l = {(locale_t)0, (locale_t)0};
    l.c = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
    if (l.c) l.old = uselocale(l.c);
    return l;
}

static void c_numeric_end(c_numeric l) {
    if (!l.c) return;
    uselocale(l.old);
    freelocale(l.c);
}

void mha__format_double(char *buf, size_t cap, double x) {
    c_numeric loc = c_numeric_begin();
    snprintf(buf, cap, "%.17g", x);
    c_numeric_end(loc);
}

bool mha__parse_double(const char *s, double *out) {
    /* plain decimal notation only: no '+' first, no spaces, hex, inf or nan */
    bool ok = s && s[0] != '\0' && s[0] != '+';
    for (const char *p = s; ok && *p; p++)
        ok = (*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' ||
             *p == '-';
    if (!ok) return false;
    char *end = NULL;
    c_numeric loc = c_numeric_begin();
    double d = strtod(s, &end);
    c_numeric_end(loc);
    if (end == s || *end != '\0' || !isfinite(d)) return false;
    *out = d;
    return true;
}
