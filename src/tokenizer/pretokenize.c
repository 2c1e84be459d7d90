/* pretokenize.c — UTF-8 checking and GPT-2's pre-tokenizer pattern, matched
 * by hand exactly as a backtracking engine (JavaScript's, in gpt-3-encoder)
 * evaluates it:
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * At each position the alternatives are tried in order and the first that
 * matches wins; every quantifier is greedy. Only \s+(?!\S) backtracks: its
 * run of white space gives back its last character when a non-space follows,
 * so that character can start the next chunk (" world"). The contractions
 * are lower-case ASCII only ("'S" is "'" then "S"), and the optional prefix
 * is U+0020 only. */
#include "tokenizer/tokenizer.h"

int mha__uc_class(uint32_t cp) {
    if (cp < 128) return mha__uc_ascii[cp];
    /* The last segment whose first code point is <= cp. */
    size_t lo = 0, hi = mha__uc_n_segments - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if ((mha__uc_segments[mid] >> 8) <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (int)(mha__uc_segments[lo] & 0xFFu);
}


/* The code point at s (valid UTF-8, at least one character); *n its bytes. */
static inline uint32_t decode(const unsigned char *s, size_t *n) {
    uint32_t c = s[0];
    if (c < 0x80) {
        *n = 1;
        return c;
    }
    if (c < 0xE0) {
        *n = 2;
        return ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    }
    if (c < 0xF0) {
        *n = 3;
        return ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    }
    *n = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

static inline int class_at(const unsigned char *s, size_t *n) {
    if (s[0] < 0x80) {
        *n = 1;
        return mha__uc_ascii[s[0]];
    }
    return mha__uc_class(decode(s, n));
}

/* Bytes from s[0] while the characters are of class k. */
static size_t run_of(const unsigned char *s, size_t len, int k) {
    size_t i = 0, n;
    while (i < len && class_at(s + i, &n) == k) i += n;
    return i;
}

size_t mha__pretokenize_next(const unsigned char *s, size_t len) {
    /* 's 't 're 've 'm 'll 'd */
    if (s[0] == '\'' && len >= 2) {
        unsigned char a = s[1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
        if (len >= 3) {
            unsigned char b = s[2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                return 3;
        }
    }
    size_t n0;
    int k0 = class_at(s, &n0);
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020, then
     * a run of one class. A space followed by white space (or nothing) is
     * left to the white-space alternatives. */
    if (s[0] == ' ' && len > 1) {
        size_t n1;
        int k1 = class_at(s + 1, &n1);
        if (k1 != MHA__UC_SPACE) return 1 + run_of(s + 1, len - 1, k1);
    }
    if (k0 != MHA__UC_SPACE) return run_of(s, len, k0);
    /* "\s+(?!\S)": the whole run of white space when the text ends there or
     * the run has one character only... */
    size_t i = 0, last = 0, n;
    while (i < len && class_at(s + i, &n) == MHA__UC_SPACE) {
        last = i;
        i += n;
    }
    if (i == len) return i;
    /* ...otherwise all of it but the last character, which the next chunk
     * begins with; a single white-space character before a non-space is
     * "\s+" (the last alternative). */
    return last > 0 ? last : i;
}
