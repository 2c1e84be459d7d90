/* tok_driver — the tokenizer behind a pipe, for tests/tokenizer_npm_diff.js.
 *
 *   tok_driver DIR < requests > answers
 *
 * Loads DIR/encoder.json and DIR/vocab.bpe, then answers each request with
 * one line:
 *   "E <n>\n" + n bytes of text  ->  the ids, comma-separated ("" for none),
 *                                    after checking decode(encode(text)) ==
 *                                    text ("ROUNDTRIP <detail>" otherwise)
 *   "D <id>,<id>,...\n"          ->  the decoded bytes in hex
 *   "T <n>\n" + n bytes          ->  the pre-tokenizer's pieces, as byte
 *                                    lengths, comma-separated
 * and "ERR <status name> <detail>" for a request the library refuses. Exits 0
 * unless the files cannot be loaded or a request is malformed (status 2). */
#include "mha.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) return NULL;
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        unsigned char *b = realloc(buf, cap);
        if (!b) free(buf);
        buf = b;
    }
    *len = n;
    return buf;
}

static _Noreturn void bad(const char *what) {
    fprintf(stderr, "tok_driver: malformed request: %s\n", what);
    exit(2);
}

/* "<n>\n" at *p: n, with *p moved past the newline. */
static size_t read_count(const unsigned char **p, const unsigned char *end) {
    size_t n = 0;
    const unsigned char *q = *p;
    if (q >= end || *q < '0' || *q > '9') bad("count");
    while (q < end && *q >= '0' && *q <= '9') n = n * 10 + (size_t)(*q++ - '0');
    if (q >= end || *q != '\n') bad("count line");
    *p = q + 1;
    if ((size_t)(end - *p) < n) bad("text shorter than its count");
    return n;
}

static void err_line(mha_status st) {
    printf("ERR %s %s\n", mha_status_name(st), mha_last_error());
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tok_driver DIR < requests\n");
        return 2;
    }
    mha_tokenizer *tok = NULL;
    if (mha_tokenizer_load_dir(argv[1], &tok) != MHA_OK) {
        fprintf(stderr, "tok_driver: %s\n", mha_last_error());
        return 2;
    }
    size_t len = 0;
    unsigned char *in = read_all(stdin, &len);
    if (!in) bad("out of memory");
    const unsigned char *p = in, *end = in + len;
    size_t ids_cap = 1024, text_cap = 4096;
    int32_t *ids = malloc(ids_cap * sizeof *ids);
    char *text = malloc(text_cap);
    while (p < end) {
        unsigned char op = *p;
        if (p + 2 > end || p[1] != ' ') bad("operation");
        p += 2;
        if (op == 'E' || op == 'T') {
            size_t n = read_count(&p, end);
            const char *s = (const char *)p;
            p += n;
            if (op == 'T') {
                size_t at = 0;
                if (mha__utf8_check((const unsigned char *)s, n) < n) {
                    printf("ERR invalid UTF-8\n");
                    continue;
                }
                while (at < n) {
                    size_t m = mha__pretokenize_next((const unsigned char *)s + at, n - at);
                    printf(at ? ",%zu" : "%zu", m);
                    at += m;
                }
                putchar('\n');
                continue;
            }
            if (n > ids_cap) {
                ids_cap = n;
                ids = realloc(ids, ids_cap * sizeof *ids);
            }
            if (n + 1 > text_cap) {
                text_cap = n + 1;
                text = realloc(text, text_cap);
            }
            if (!ids || !text) bad("out of memory");
            size_t count = 0, back = 0;
            mha_status st = mha_tokenizer_encode(tok, s, n, ids, ids_cap, &count);
            if (st != MHA_OK) {
                err_line(st);
                continue;
            }
            st = mha_tokenizer_decode(tok, ids, count, text, text_cap, &back);
            if (st != MHA_OK) {
                printf("ROUNDTRIP decode failed: %s\n", mha_last_error());
                continue;
            }
            if (back != n || memcmp(text, s, n) != 0) {
                printf("ROUNDTRIP %zu bytes in, %zu out\n", n, back);
                continue;
            }
            for (size_t i = 0; i < count; i++) printf(i ? ",%d" : "%d", (int)ids[i]);
            putchar('\n');
        } else if (op == 'D') {
            size_t count = 0;
            while (p < end && *p != '\n') {
                if (count == ids_cap) {
                    ids_cap *= 2;
                    ids = realloc(ids, ids_cap * sizeof *ids);
                    if (!ids) bad("out of memory");
                }
                long v = 0;
                int neg = 0;
                if (*p == '-') {
                    neg = 1;
                    p++;
                }
                if (p >= end || *p < '0' || *p > '9') bad("id");
                while (p < end && *p >= '0' && *p <= '9' && v < 100000000) v = v * 10 + (*p++ - '0');
                ids[count++] = (int32_t)(neg ? -v : v);
                if (p < end && *p == ',') p++;
            }
            if (p >= end) bad("unterminated id list");
            p++;
            size_t need = 0;
            mha_status st = mha_tokenizer_decode(tok, ids, count, NULL, 0, &need);
            if (st != MHA_OK && st != MHA_ERR_WORKSPACE) {
                err_line(st);
                continue;
            }
            if (need + 1 > text_cap) {
                text_cap = need + 1;
                text = realloc(text, text_cap);
                if (!text) bad("out of memory");
            }
            st = mha_tokenizer_decode(tok, ids, count, text, text_cap, &need);
            if (st != MHA_OK) {
                err_line(st);
                continue;
            }
            for (size_t i = 0; i < need; i++) printf("%02x", (unsigned char)text[i]);
            putchar('\n');
        } else {
            bad("operation");
        }
    }
    free(ids);
    free(text);
    free(in);
    mha_tokenizer_free(tok);
    return 0;
}
