/* json_check.c — is a text well-formed JSON? Allocates nothing.
 *
 * cJSON returns NULL both for text it rejects and when one of its own
 * allocations fails, and its allocator is the process's (cJSON_InitHooks is
 * the user's business, not the library's). After a failed parse this check
 * tells the two apart: text that passes it is text cJSON 1.7 parses (it is
 * stricter than cJSON: RFC 8259 exactly, plus cJSON's own limits), so the
 * failure was a lack of memory. A false "malformed" is possible only for
 * text outside RFC 8259 that cJSON happens to accept, never a false "out of
 * memory" for text cJSON rejects. */
#include "common.h"

enum {
    MAX_DEPTH = 999, /* cJSON refuses nesting at its CJSON_NESTING_LIMIT (1000) */
    MAX_NUMBER = 63, /* cJSON 1.7.15 reads a number through a 64-byte buffer */
};

typedef struct {
    const unsigned char *s;
    size_t len, i;
} json_cursor;

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
        unsigned char ch = c->s[c->i++];
        if (ch == '"') return true;
        if (ch < 0x20) return false;
        if (ch != '\\') continue;
        if (c->i >= c->len) return false;
        ch = c->s[c->i++];
        if (ch != 'u') {
            if (!(ch == '"' || ch == '\\' || ch == '/' || ch == 'b' || ch == 'f' || ch == 'n' ||
                  ch == 'r' || ch == 't'))
                return false;
            continue;
        }
        unsigned u;
        if (!hex4(c, &u) || (u >= 0xDC00 && u <= 0xDFFF)) return false;
        if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate needs its low half */
            if (c->len - c->i < 2 || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u') return false;
            c->i += 2;
            if (!hex4(c, &u) || u < 0xDC00 || u > 0xDFFF) return false;
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
    size_t start = c->i;
    if (c->s[c->i] == '-') c->i++;
    if (c->i < c->len && c->s[c->i] == '0') c->i++;
    else if (!digits(c)) return false;
    if (c->i < c->len && c->s[c->i] == '.') {
        c->i++;
        if (!digits(c)) return false;
    }
    if (c->i < c->len && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
        c->i++;
        if (c->i < c->len && (c->s[c->i] == '+' || c->s[c->i] == '-')) c->i++;
        if (!digits(c)) return false;
    }
    return c->i - start <= MAX_NUMBER;
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
    if (depth >= MAX_DEPTH) return false;
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

bool mha__json_wellformed(const unsigned char *s, size_t len) {
    json_cursor c = {s, len, 0};
    if (!value(&c, 0)) return false;
    skip_ws(&c);
    return c.i == len;
}
