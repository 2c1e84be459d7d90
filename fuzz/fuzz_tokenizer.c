/* fuzz_tokenizer.c — libFuzzer target for GPT-2's BPE tokenizer (the
 * vocabulary of data/gpt2, loaded once). The first byte chooses:
 *   even   encode the remaining bytes: invalid UTF-8 (by this file's own
 *          strict check) must be ERR_ARGUMENT and nothing else; valid text
 *          must encode to in-range ids, at most one per byte, and decode
 *          back to exactly the same bytes;
 *   odd    decode ids read from the remaining bytes (bit 1 set: raw int32,
 *          else 16-bit values - 4, around the vocabulary's end): an id out
 *          of range must be ERR_ARGUMENT, otherwise the text must be the
 *          tokens' bytes in order, and (when valid UTF-8) re-encoding it
 *          must decode to the same text.
 * A broken invariant abort()s. */
#include "mha.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef MHA_FUZZ_VOCAB_DIR
#define MHA_FUZZ_VOCAB_DIR "data/gpt2"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const mha_tokenizer *tokenizer(void) {
    static mha_tokenizer *t;
    if (!t && mha_tokenizer_load_dir(MHA_FUZZ_VOCAB_DIR, &t) != MHA_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", mha_last_error());
        abort();
    }
    return t;
}

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, <= U+10FFFF.
 * Written independently of src/common/utf8.c, so the two are compared. */
static bool utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) k = 1, cp = c & 0x1F, min = 0x80;
        else if ((c & 0xF0) == 0xE0) k = 2, cp = c & 0x0F, min = 0x800;
        else if ((c & 0xF8) == 0xF0) k = 3, cp = c & 0x07, min = 0x10000;
        else return false;
        if (n - i <= k) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k + 1;
    }
    return true;
}

/* decode(ids) must be the tokens' bytes one after the other; returns the
 * text (malloc'd, *len bytes) or NULL when an id is out of range. */
static char *decode_checked(const mha_tokenizer *t, const int32_t *ids, size_t n, size_t *len) {
    const int32_t V = mha_tokenizer_vocab_size(t);
    bool in_range = true;
    size_t want = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V) {
            in_range = false;
            continue;
        }
        const char *b = NULL;
        size_t bl = 0;
        if (mha_tokenizer_token(t, ids[i], &b, &bl) != MHA_OK || bl == 0) abort();
        want += bl;
    }
    size_t need = 12345;
    mha_status s = mha_tokenizer_decode(t, ids, n, NULL, 0, &need);
    if (!in_range) {
        if (s != MHA_ERR_ARGUMENT) abort();
        return NULL;
    }
    if (s != (want ? MHA_ERR_WORKSPACE : MHA_OK) || need != want) abort();
    char *text = malloc(want + 1);
    if (!text) abort();
    if (mha_tokenizer_decode(t, ids, n, text, want + 1, &need) != MHA_OK || need != want ||
        text[want] != '\0')
        abort();
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *b = NULL;
        size_t bl = 0;
        if (mha_tokenizer_token(t, ids[i], &b, &bl) != MHA_OK || memcmp(text + at, b, bl) != 0) abort();
        at += bl;
    }
    *len = want;
    return text;
}

/* encode(s) for valid UTF-8 s: in-range ids, decode(encode(s)) == s. */
static void roundtrip(const mha_tokenizer *t, const uint8_t *s, size_t len) {
    size_t n = 12345;
    mha_status st = mha_tokenizer_encode(t, (const char *)s, len, NULL, 0, &n);
    if (st != (len ? MHA_ERR_WORKSPACE : MHA_OK) || n > len || (len && n == 0)) abort();
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) abort();
    size_t m = 0;
    if (mha_tokenizer_encode(t, (const char *)s, len, ids, n, &m) != MHA_OK || m != n) abort();
    size_t back_len = 0;
    char *back = decode_checked(t, ids, n, &back_len);
    if (!back || back_len != len || memcmp(back, s, len) != 0) abort();
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const mha_tokenizer *t = tokenizer();
    const uint8_t mode = data[0];
    data++, size--;
    if ((mode & 1) == 0) {
        if (utf8_valid(data, size)) {
            roundtrip(t, data, size);
        } else {
            size_t n = 12345;
            int32_t ids[4];
            if (mha_tokenizer_encode(t, (const char *)data, size, ids, 4, &n) != MHA_ERR_ARGUMENT || n != 0)
                abort();
        }
        return 0;
    }
    const bool raw = mode & 2;
    const size_t w = raw ? 4 : 2, n = size / w;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) abort();
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = data + i * w;
        if (raw) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            memcpy(&ids[i], &u, sizeof u);
        } else {
            ids[i] = (int32_t)(p[0] | p[1] << 8) - 4;
        }
    }
    size_t len = 0;
    char *text = decode_checked(t, ids, n, &len);
    if (text && utf8_valid((const uint8_t *)text, len)) roundtrip(t, (const uint8_t *)text, len);
    free(text);
    free(ids);
    return 0;
}
