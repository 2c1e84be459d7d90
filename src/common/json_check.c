/* json_check.c — the one validation every JSON text passes before cJSON
 * parses it (safetensors headers, encoder.json). Allocates nothing.
 *
 * cJSON is lenient where JSON is not: it takes any byte <= 0x20 for white
 * space, raw control characters inside strings, numbers such as "01" or
 * "1." (and cuts numbers over 63 characters short), and decodes "\u0000"
 * into a string that C then cuts short (two keys could collapse into one).
 * This check is RFC 8259 exactly, plus cJSON's own limits and the rules a
 * caller asks for, so that text that passes is text cJSON parses to the
 * same data: when cJSON then fails, one of its allocations did. */
#include "common.h"

#include <stdio.h>

enum {
    MAX_DEPTH = 999, /* cJSON refuses nesting at its CJSON_NESTING_LIMIT (1000) */
    MAX_NUMBER = 63, /* cJSON 1.7.15 reads a number through a 64-byte buffer */
};

typedef struct {
    const unsigned char *s;
    size_t len, i;
    bool integers_only;
    char why[64]; /* the first failure, "" for a plain syntax error */
    size_t at;
} json_cursor;

/* Records the first failure (at byte at) and returns false. */
static bool fail(json_cursor *c, size_t at, const char *why) {
    if (c->at == SIZE_MAX) {
        c->at = at;
        snprintf(c->why, sizeof c->why, "%s", why);
    }
    return false;
}

static void skip_ws(json_cursor *c) {
    while (c->i < c->len && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                             c->s[c->i] == '\r'))
        c->i++;
}

static bool hex4(json_cursor *c, unsigned *out) {
    if (c->len - c->i < 4) return false;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char h = c->s[c->i + (size_t)k];
        unsigned d = (h >= '0' && h <= '9') ? h - (unsigned)'0'
                     : (h >= 'a' && h <= 'f') ? h - (unsigned)'a' + 10u
                     : (h >= 'A' && h <= 'F') ? h - (unsigned)'A' + 10u
                                              : 16u;
        if (d == 16u) return false;
        v = v * 16u + d;
    }
    c->i += 4;
    *out = v;
    return true;
}

static bool string(json_cursor *c) {
    c->i++; /* the opening quote */
    while (c->i < c->len) {
        const size_t at = c->i;
        unsigned char ch = c->s[c->i++];
        if (ch == '"') return true;
        if (ch < 0x20) {
            char why[64];
            snprintf(why, sizeof why, "raw control character 0x%02x in a string", ch);
            return fail(c, at, why);
        }
        if (ch != '\\') continue;
        if (c->i >= c->len) return false;
        ch = c->s[c->i++];
        if (ch != 'u') {
            if (!(ch == '"' || ch == '\\' || ch == '/' || ch == 'b' || ch == 'f' || ch == 'n' ||
                  ch == 'r' || ch == 't'))
                return fail(c, at, "a bad escape");
            continue;
        }
        unsigned u;
        if (!hex4(c, &u)) return fail(c, at, "a bad \\u escape");
        if (u == 0) return fail(c, at, "\\u0000 in a string");
        if (u >= 0xDC00 && u <= 0xDFFF) return fail(c, at, "a lone surrogate escape");
        if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate needs its low half */
            if (c->len - c->i < 2 || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u')
                return fail(c, at, "a lone surrogate escape");
            c->i += 2;
            if (!hex4(c, &u) || u < 0xDC00 || u > 0xDFFF) return fail(c, at, "a lone surrogate escape");
        }
    }
    return false;
}

static bool digits(json_cursor *c) {
    size_t start = c->i;
    while (c->i < c->len && c->s[c->i] >= '0' && c->s[c->i] <= '9') c->i++;
    return c->i > start;
}

static bool number(json_cursor *c) {
    const size_t start = c->i;
    if (c->s[c->i] == '-') c->i++;
    if (c->i < c->len && c->s[c->i] == '0') c->i++;
    else if (!digits(c)) return false;
    const size_t whole = c->i;
    if (c->i < c->len && c->s[c->i] == '.') {
        c->i++;
        if (!digits(c)) return false;
    }
    if (c->i < c->len && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->len && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (!digits(c)) return false;
    }
    if (c->integers_only && c->i != whole) return fail(c, start, "a number that is not an integer");
    return c->i - start <= MAX_NUMBER || fail(c, start, "a number longer than 63 characters");
}

static bool literal(json_cursor *c, const char *word, size_t n) {
    if (c->len - c->i < n) return false;
    for (size_t k = 0; k < n; k++)
        if (c->s[c->i + k] != (unsigned char)word[k]) return false;
    c->i += n;
    return true;
}

static bool value(json_cursor *c, int depth) {
    skip_ws(c);
    if (c->i >= c->len) return false;
    const unsigned char ch = c->s[c->i];
    if (ch == '"') return string(c);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return number(c);
    if (ch == 't') return literal(c, "true", 4);
    if (ch == 'f') return literal(c, "false", 5);
    if (ch == 'n') return literal(c, "null", 4);
    if (ch != '[' && ch != '{') return false;
    if (depth >= MAX_DEPTH) return fail(c, c->i, "nesting deeper than 999");
    const bool object = ch == '{';
    const unsigned char close = object ? '}' : ']';
    c->i++;
    skip_ws(c);
    if (c->i < c->len && c->s[c->i] == close) {
        c->i++;
        return true;
    }
    for (;;) {
        if (object) {
            skip_ws(c);
            if (c->i >= c->len || c->s[c->i] != '"' || !string(c)) return false;
            skip_ws(c);
            if (c->i >= c->len || c->s[c->i] != ':') return false;
            c->i++;
        }
        if (!value(c, depth + 1)) return false;
        skip_ws(c);
        if (c->i >= c->len) return false;
        if (c->s[c->i] == close) {
            c->i++;
            return true;
        }
        if (c->s[c->i] != ',') return false;
        c->i++;
    }
}

mha_status mha__json_check(const unsigned char *s, size_t len, const mha__json_rules *r) {
    json_cursor c = {.s = s, .len = len, .integers_only = r->integers_only, .at = SIZE_MAX};
    skip_ws(&c);
    const size_t start = c.i;
    if (!value(&c, 0)) {
        const size_t at = c.at == SIZE_MAX ? (c.i < len ? c.i : len) : c.at;
        return mha__fail(MHA_ERR_FORMAT, "%s: not valid JSON (%s at byte %zu)", r->what,
                         c.why[0] && c.at != SIZE_MAX ? c.why : "a syntax error", at);
    }
    if (r->object && s[start] != '{') return mha__fail(MHA_ERR_FORMAT, "%s: not a JSON object", r->what);
    skip_ws(&c);
    if (c.i != len)
        return mha__fail(MHA_ERR_FORMAT, "%s: unexpected text after the JSON %s at byte %zu", r->what,
                         r->object ? "object" : "value", c.i);
    return MHA_OK;
}
