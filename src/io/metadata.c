/* metadata.c — __metadata__ values as integers, floats and booleans: the one
 * reader every file kind uses (modules, GPT, optimizer state, `mha train`'s
 * state), so a value means the same in all of them. The rule, also in
 * docs/file-formats.md: a value is the whole string, with no space, tab or
 * '+' before it (nor anything after);
 *   integer  '-'? then "0" or [1-9][0-9]* ("-0" and leading zeros refused),
 *            within the caller's [min, max];
 *   float    decimal or exponent notation that strtod reads whole in the C
 *            locale ("0.1", "-2", "1e-08", ".5"), finite: no hex, inf, nan;
 *   boolean  true/false, True/False (Python's str()) or 1/0.
 * What mha writes (%lld, %.17g, "true"/"false") reads back exactly. */
#include "common/common.h"

#include <inttypes.h>
#include <string.h>

/* The value of key, or NULL with ERR_MISSING recorded. */
static const char *value(const mha_st *st, const char *key, mha_status *s) {
    const char *v = st && key ? mha_st_metadata(st, key) : NULL;
    if (!st || !key) *s = mha__fail(MHA_ERR_ARGUMENT, "metadata: st or key is NULL");
    else if (!v) *s = mha__fail(MHA_ERR_MISSING, "__metadata__ has no '%s'", key);
    else *s = MHA_OK;
    return v;
}

mha_status mha_st_metadata_int(const mha_st *st, const char *key, int64_t min, int64_t max, int64_t *out) {
    mha_status s;
    const char *v = value(st, key, &s);
    if (!v) return s;
    const bool neg = v[0] == '-';
    const char *p = v + neg;
    bool ok = *p >= '0' && *p <= '9' && !(p[0] == '0' && (p[1] != '\0' || neg));
    int64_t x = 0; /* accumulated negative, so that INT64_MIN fits */
    bool range = true;
    for (; ok && *p; p++) {
        ok = *p >= '0' && *p <= '9';
        range = range && ok && !__builtin_mul_overflow(x, 10, &x) && !__builtin_sub_overflow(x, *p - '0', &x);
    }
    if (ok && range && !neg) range = !__builtin_mul_overflow(x, -1, &x);
    if (!ok)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ '%s' = '%.60s' is not a decimal integer (digits, an "
                         "optional '-', no leading zeros or spaces)", key, v);
    if (!range || x < min || x > max)
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ '%s' = '%.60s' is out of range [%" PRId64 ", %" PRId64
                         "]", key, v, min, max);
    *out = x;
    return MHA_OK;
}

mha_status mha_st_metadata_double(const mha_st *st, const char *key, double *out) {
    mha_status s;
    const char *v = value(st, key, &s);
    if (!v) return s;
    if (!mha__parse_double(v, out))
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ '%s' = '%.60s' is not a finite number in decimal "
                         "notation", key, v);
    return MHA_OK;
}

mha_status mha_st_metadata_bool(const mha_st *st, const char *key, int *out) {
    mha_status s;
    const char *v = value(st, key, &s);
    if (!v) return s;
    static const char *const spelling[6] = {"false", "False", "0", "true", "True", "1"};
    for (int i = 0; i < 6; i++)
        if (strcmp(v, spelling[i]) == 0) {
            *out = i >= 3;
            return MHA_OK;
        }
    return mha__fail(MHA_ERR_FORMAT,
                     "__metadata__ '%s' = '%.60s' is not a boolean (true, false, True, False, 1 or 0)", key, v);
}
