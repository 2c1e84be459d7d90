/* fuzz_metadata.c — libFuzzer target for the configurations read from a
 * safetensors file's __metadata__: the chapter 3 module's (module, d_in,
 * d_out, context_length, num_heads, dropout, qkv_bias) and the chapter 4
 * model's (module, vocab_size, context_length, emb_dim, n_heads, n_layers,
 * drop_rate, qkv_bias), and under them the one metadata reader every file
 * kind uses (mha_st_metadata_int / _double / _bool), on every value: what
 * it accepts as an integer prints back as the same text (one spelling per
 * number), a float is finite and starts with a digit, '-' or '.', a flag
 * is one of its six spellings, and what it refuses is ERR_FORMAT.
 *
 * The input is "key=value" lines (no '=': the key with an empty value),
 * written as a well-formed file's __metadata__ (JSON-escaped, no tensors),
 * so every input reaches the configuration code instead of the parser.
 * Both loaders must fail cleanly (the file has no tensors) without
 * allocating a model the file cannot fill (seed_huge_gpt.txt asked the GPT
 * loader for 48 GiB before it checked the file's size; replay.c limits the
 * address space so that the ordinary build sees this too). */
#include "mha.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* s[0..n) as a JSON string at out (room for 6 n + 2 bytes); returns the end */
static char *put_json(char *out, const uint8_t *s, size_t n) {
    *out++ = '"';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"' || s[i] == '\\') *out++ = '\\', *out++ = (char)s[i];
        else if (s[i] < 0x20) out += sprintf(out, "\\u%04x", s[i]);
        else *out++ = (char)s[i];
    }
    *out++ = '"';
    return out;
}

/* The reader's invariants on value v of key k. */
static void check_reader(const mha_st *st, const char *k, const char *v) {
    int64_t i;
    double d;
    int b;
    char back[32];
    mha_status s = mha_st_metadata_int(st, k, INT64_MIN, INT64_MAX, &i);
    if (s == MHA_OK) {
        snprintf(back, sizeof back, "%" PRId64, i);
        if (strcmp(back, v) != 0) abort();
    } else if (s != MHA_ERR_FORMAT) {
        abort();
    }
    s = mha_st_metadata_double(st, k, &d);
    if (s == MHA_OK ? !isfinite(d) || !(v[0] == '-' || v[0] == '.' || (v[0] >= '0' && v[0] <= '9'))
                    : s != MHA_ERR_FORMAT)
        abort();
    s = mha_st_metadata_bool(st, k, &b);
    if (s == MHA_OK ? strcmp(v, b ? "true" : "false") && strcmp(v, b ? "True" : "False") &&
                          strcmp(v, b ? "1" : "0")
                    : s != MHA_ERR_FORMAT)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const size_t cap = 8 + 32 + 6 * size + 4 * (size + 1) + 8;
    uint8_t *file = malloc(cap);
    if (!file) abort();
    char *h = (char *)file + 8, *p = h;
    p += sprintf(p, "{\"__metadata__\":{");
    size_t at = 0;
    int items = 0;
    while (at < size) {
        const uint8_t *line = data + at;
        const uint8_t *nl = memchr(line, '\n', size - at);
        const size_t len = nl ? (size_t)(nl - line) : size - at;
        at += len + 1;
        const uint8_t *eq = memchr(line, '=', len);
        const size_t kl = eq ? (size_t)(eq - line) : len;
        if (items++) *p++ = ',';
        p = put_json(p, line, kl);
        *p++ = ':';
        p = eq ? put_json(p, eq + 1, len - kl - 1) : put_json(p, NULL, 0);
    }
    p += sprintf(p, "}}");
    while ((p - h) % 8) *p++ = ' ';
    const uint64_t hl = (uint64_t)(p - h);
    for (int i = 0; i < 8; i++) file[i] = (uint8_t)(hl >> (8 * i));

    mha_st *st = NULL;
    if (mha_st_parse(file, 8 + hl, &st) == MHA_OK) {
        for (size_t i = 0; i < mha_st_metadata_count(st); i++) {
            const char *k, *v;
            if (mha_st_metadata_get(st, i, &k, &v) != MHA_OK) abort();
            check_reader(st, k, v);
        }
        /* no tensors: an error, never ERR_NOMEM (nothing the file cannot
         * fill may be allocated) */
        mha_module *m = NULL;
        mha_status s = mha_module_from_st(st, &m);
        if (s == MHA_OK || s == MHA_ERR_NOMEM || m != NULL) abort();
        mha_gpt *g = NULL;
        s = mha_gpt_from_st(st, &g);
        if (s == MHA_OK || s == MHA_ERR_NOMEM || g != NULL) abort();
        mha_st_free(st);
    }
    free(file);
    return 0;
}
