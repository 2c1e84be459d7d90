/* test_tokenizer.c — GPT-2's tokenizer: known ids (from the npm package
 * gpt-3-encoder 1.1.4), round trips, the pre-tokenizer's pieces, buffers too
 * small, invalid UTF-8, decode errors, token bytes and streaming, and
 * gpt-3-encoder's comma-keyed ranks on small made-up vocabularies; then the
 * loader's refusals of damaged files. tests/tokenizer_npm_diff.js compares
 * with the package itself on a large corpus. */
#include "mha.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA MHA_SOURCE_DIR "/data/gpt2"

static mha_tokenizer *tok;

/* ---- helpers ----------------------------------------------------------- */

static size_t encode(const mha_tokenizer *t, const char *s, size_t len, int32_t *ids, size_t cap) {
    size_t n = 0;
    mha_status st = mha_tokenizer_encode(t, s, len, ids, cap, &n);
    CHECK(st == MHA_OK, "encode: %s", mha_last_error());
    return n;
}

static int same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", (int)ids[i]);
    fputc('\n', stderr);
}

static void expect_ids(const mha_tokenizer *t, const char *s, size_t len, const int32_t *want,
                       size_t nwant) {
    int32_t ids[64];
    size_t n = encode(t, s, len, ids, 64);
    CHECK(same_ids(ids, n, want, nwant), "ids of \"%s\"", s);
    if (!same_ids(ids, n, want, nwant)) {
        print_ids("got", ids, n);
        print_ids("want", want, nwant);
    }
}
#define EXPECT(s, ...)                                                        \
    do {                                                                      \
        static const int32_t w_[] = {__VA_ARGS__};                            \
        expect_ids(tok, s, sizeof(s) - 1, w_, sizeof w_ / sizeof w_[0]);      \
    } while (0)

static void roundtrip(const char *s, size_t len) {
    size_t n = 0;
    mha_status st = mha_tokenizer_encode(tok, s, len, NULL, 0, &n);
    CHECK(st == (len ? MHA_ERR_WORKSPACE : MHA_OK), "measure: %s", mha_last_error());
    CHECK(n <= len, "%zu ids for %zu bytes", n, len);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    char *back = malloc(len + 1);
    size_t m = 0, blen = 0;
    CHECK(mha_tokenizer_encode(tok, s, len, ids, n, &m) == MHA_OK && m == n, "encode");
    CHECK(mha_tokenizer_decode(tok, ids, n, back, len + 1, &blen) == MHA_OK, "decode: %s",
          mha_last_error());
    CHECK(blen == len && memcmp(back, s, len) == 0 && back[len] == '\0',
          "decode(encode(s)) != s for %zu bytes", len);
    free(ids);
    free(back);
}

/* The pre-tokenizer's pieces of s as byte lengths (from the package's
 * pattern run in node). */
static void expect_pieces(const char *s, const size_t *want, size_t nwant) {
    size_t len = strlen(s), at = 0, k = 0;
    int ok = 1;
    while (at < len) {
        size_t m = mha__pretokenize_next((const unsigned char *)s + at, len - at);
        if (k >= nwant || m != want[k]) ok = 0;
        k++;
        at += m;
    }
    CHECK(ok && k == nwant, "pieces of \"%s\"", s);
}
#define PIECES(s, ...)                                                        \
    do {                                                                      \
        static const size_t w_[] = {__VA_ARGS__};                             \
        expect_pieces(s, w_, sizeof w_ / sizeof w_[0]);                       \
    } while (0)

/* ---- GPT-2 ------------------------------------------------------------- */

static void test_known_ids(void) {
    EXPECT("Hello, I am", 15496, 11, 314, 716);
    EXPECT("Every effort moves you", 6109, 3626, 6100, 345);
    EXPECT("I'm", 40, 1101);
    EXPECT("IT'S fine", 2043, 6, 50, 3734); /* upper-case 'S is not a contraction */
    EXPECT("don't 're", 9099, 470, 705, 260);
    EXPECT("  hello", 220, 23748);
    EXPECT("\n\n", 628);
    EXPECT("x\n\n y", 87, 628, 331);
    EXPECT(" \t\n", 220, 197, 198);
    EXPECT("\xf0\x9f\xa4\x97", 8582, 97, 245); /* U+1F917 */
    EXPECT("<|endoftext|>", 27, 91, 437, 1659, 5239, 91, 29);
    EXPECT("1234567", 10163, 2231, 3134);
    EXPECT("\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e", 33768, 98, 17312, 105, 45739, 252);
    EXPECT("na\xc3\xafve caf\xc3\xa9", 2616, 38776, 40304);
    EXPECT("a\0b", 64, 188, 65); /* NUL is a character */
    int32_t none[1];
    CHECK(encode(tok, "", 0, none, 1) == 0, "empty text");
    CHECK(encode(tok, NULL, 0, NULL, 0) == 0, "NULL empty text");
}

static void test_pieces(void) {
    PIECES("Hello world", 5, 6);
    PIECES("a   b", 1, 2, 2);
    PIECES("x\n\ny", 1, 1, 1, 1);
    PIECES("x\n\n y", 1, 2, 2);
    PIECES("  ", 2);
    PIECES("it's 'S", 2, 2, 2, 1);
    PIECES("a\xe3\x80\x80" "b", 1, 3, 1);           /* U+3000 */
    PIECES("12ab!? \xc2\xa0" "c", 2, 2, 2, 1, 2, 1); /* U+00A0 */
    PIECES("\xc3\xa9 \xf0\x9f\x98\x80\xf0\x9f\x98\x80 x", 2, 9, 2);
    CHECK(mha__uc_class(0x85) == MHA__UC_OTHER, "U+0085 is not JavaScript white space");
    CHECK(mha__uc_class(0x1C) == MHA__UC_OTHER, "U+001C is not JavaScript white space");
    CHECK(mha__uc_class(0xFEFF) == MHA__UC_SPACE, "U+FEFF is JavaScript white space");
    CHECK(mha__uc_class(0x3000) == MHA__UC_SPACE, "U+3000");
    CHECK(mha__uc_class(0x10FFFF) == MHA__UC_OTHER, "U+10FFFF");
    CHECK(mha__uc_class(0x4E00) == MHA__UC_LETTER, "U+4E00");
    CHECK(mha__uc_class(0x0966) == MHA__UC_NUMBER, "Devanagari zero");
    CHECK(mha__uc_class(0x0301) == MHA__UC_OTHER, "a combining mark is neither L nor N");
}

static void test_roundtrips(void) {
    static const char *const texts[] = {
        "Hello, I am", "  leading and trailing  ", "\n\n\n", "tabs\tand\r\nCRLF",
        "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7", /* ZWJ family */
        "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d",
        "\xf4\x8f\xbf\xbf U+10FFFF", "\xef\xbb\xbf" "BOM",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) roundtrip(texts[i], strlen(texts[i]));
    roundtrip("a\0\0b\0", 5);
    /* Every byte value as text: each valid UTF-8 character once. */
    char all[2048];
    size_t n = 0;
    for (unsigned c = 1; c < 0x80; c++) all[n++] = (char)c;
    for (unsigned c = 0x80; c < 0x800; c += 7) {
        all[n++] = (char)(0xC0 | (c >> 6));
        all[n++] = (char)(0x80 | (c & 0x3F));
    }
    roundtrip(all, n);
    /* A chunk as long as the text: 200,000 letters, no space. */
    size_t big = 200000;
    char *s = malloc(big);
    for (size_t i = 0; i < big; i++) s[i] = (char)('a' + (i * 7 + i / 13) % 26);
    roundtrip(s, big);
    memset(s, 'a', big);
    roundtrip(s, big);
    memset(s, ' ', big);
    roundtrip(s, big);
    free(s);
}

static void test_buffers(void) {
    int32_t ids[4] = {-7, -7, -7, -7};
    size_t n = 99;
    CHECK(mha_tokenizer_encode(tok, "Hello, I am", 11, NULL, 0, &n) == MHA_ERR_WORKSPACE && n == 4,
          "cap 0 measures: n = %zu", n);
    CHECK(mha_tokenizer_encode(tok, "Hello, I am", 11, ids, 2, &n) == MHA_ERR_WORKSPACE && n == 4,
          "cap 2: n = %zu", n);
    CHECK(ids[0] == 15496 && ids[1] == 11 && ids[2] == -7, "the first cap ids are written");
    CHECK(strstr(mha_last_error(), "4 ids") != NULL, "detail: %s", mha_last_error());
    CHECK(mha_tokenizer_encode(tok, "Hi", 2, NULL, 3, &n) == MHA_ERR_ARGUMENT, "NULL ids, cap 3");
    CHECK(mha_tokenizer_encode(tok, NULL, 2, ids, 4, &n) == MHA_ERR_ARGUMENT && n == 0, "NULL text");
    CHECK(mha_tokenizer_encode(NULL, "Hi", 2, ids, 4, &n) == MHA_ERR_ARGUMENT, "NULL tokenizer");
    CHECK(mha_tokenizer_encode(tok, "Hi", 2, ids, 4, NULL) == MHA_ERR_ARGUMENT, "NULL n");

    const int32_t hello[4] = {15496, 11, 314, 716};
    char text[16];
    size_t len = 99;
    memset(text, 'x', sizeof text);
    CHECK(mha_tokenizer_decode(tok, hello, 4, NULL, 0, &len) == MHA_ERR_WORKSPACE && len == 11,
          "decode measures: %zu", len);
    CHECK(mha_tokenizer_decode(tok, hello, 4, text, 10, &len) == MHA_ERR_WORKSPACE && len == 11 &&
              text[0] == 'x', "cap 10: untouched");
    CHECK(mha_tokenizer_decode(tok, hello, 4, text, 11, &len) == MHA_OK && len == 11 &&
              memcmp(text, "Hello, I am", 11) == 0 && text[11] == 'x', "cap 11: no NUL");
    CHECK(mha_tokenizer_decode(tok, hello, 4, text, 12, &len) == MHA_OK && text[11] == '\0',
          "cap 12: NUL");
    CHECK(mha_tokenizer_decode(tok, NULL, 0, NULL, 0, &len) == MHA_OK && len == 0, "no ids");
}

static void test_invalid_utf8(void) {
    static const struct {
        const char *s;
        size_t len, at;
    } bad[] = {
        {"\xff", 1, 0},           {"ab\x80", 3, 2},          {"a\xc3", 2, 1},
        {"\xc0\xaf", 2, 0},       {"\xc1\xbf", 2, 0},        {"x\xe0\x80\x80", 4, 1},
        {"\xed\xa0\x80", 3, 0},   {"\xf4\x90\x80\x80", 4, 0}, {"\xf5\x80\x80\x80", 4, 0},
        {"ok \xe2\x82", 5, 3},    {"\xe2\x28\xa1", 3, 0},    {"\xf0\x9f\x98", 3, 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t ids[8] = {0};
        size_t n = 5;
        mha_status st = mha_tokenizer_encode(tok, bad[i].s, bad[i].len, ids, 8, &n);
        char want[32];
        snprintf(want, sizeof want, "at byte %zu ", bad[i].at);
        CHECK(st == MHA_ERR_ARGUMENT && n == 0 && strstr(mha_last_error(), want) != NULL,
              "invalid UTF-8 case %zu: %s", i, mha_last_error());
    }
}

static void test_decode_errors(void) {
    const int32_t ids[3] = {15496, 50257, 11};
    char text[64];
    size_t len = 7;
    CHECK(mha_tokenizer_decode(tok, ids, 3, text, sizeof text, &len) == MHA_ERR_ARGUMENT && len == 0,
          "id 50257");
    CHECK(strstr(mha_last_error(), "[1] = 50257") != NULL, "names the id: %s", mha_last_error());
    const int32_t neg[1] = {-1};
    CHECK(mha_tokenizer_decode(tok, neg, 1, text, sizeof text, &len) == MHA_ERR_ARGUMENT &&
              strstr(mha_last_error(), "-1") != NULL, "id -1: %s", mha_last_error());
    CHECK(mha_tokenizer_decode(tok, NULL, 2, text, sizeof text, &len) == MHA_ERR_ARGUMENT, "NULL ids");
    CHECK(mha_tokenizer_decode(tok, ids, 1, NULL, 5, &len) == MHA_ERR_ARGUMENT, "NULL text");
}

static void test_tokens(void) {
    CHECK(mha_tokenizer_vocab_size(tok) == 50257, "vocab size");
    CHECK(mha__tokenizer_merges(tok) == 50000, "merges: %zu", mha__tokenizer_merges(tok));
    CHECK(mha__tokenizer_pairs(tok) == 50011, "ranked pairs, with gpt-3-encoder's 11 comma-key "
          "extras: %zu", mha__tokenizer_pairs(tok));
    CHECK(mha_tokenizer_vocab_size(NULL) == 0, "vocab size of NULL");
    const char *b = NULL;
    size_t len = 0;
    CHECK(mha_tokenizer_token(tok, 15496, &b, &len) == MHA_OK && len == 5 && memcmp(b, "Hello", 5) == 0,
          "token 15496");
    CHECK(mha_tokenizer_token(tok, 220, &b, &len) == MHA_OK && len == 1 && b[0] == ' ', "token 220");
    CHECK(mha_tokenizer_token(tok, 188, &b, &len) == MHA_OK && len == 1 && b[0] == '\0', "token 188");
    CHECK(mha_tokenizer_token(tok, 50256, &b, &len) == MHA_OK && len == 13 &&
              memcmp(b, "<|endoftext|>", 13) == 0, "token 50256");
    CHECK(mha_tokenizer_token(tok, 50257, &b, &len) == MHA_ERR_ARGUMENT && b == NULL && len == 0,
          "token 50257");
    CHECK(mha_tokenizer_token(tok, -3, &b, &len) == MHA_ERR_ARGUMENT, "token -3");
    int32_t id = 0;
    CHECK(mha_tokenizer_find(tok, "<|endoftext|>", 13, &id) == MHA_OK && id == 50256, "find eot");
    CHECK(mha_tokenizer_find(tok, " the", 4, &id) == MHA_OK && id == 262, "find ' the'");
    CHECK(mha_tokenizer_find(tok, "", 0, &id) == MHA_ERR_MISSING && id == -1, "find ''");
    CHECK(mha_tokenizer_find(tok, "qzqzqzqz", 8, &id) == MHA_ERR_MISSING, "find a non-token");
}

static void test_streaming(void) {
    CHECK(mha_utf8_complete("", 0) == 0, "empty");
    CHECK(mha_utf8_complete("abc", 3) == 3, "ascii");
    CHECK(mha_utf8_complete("a\xf0\x9f", 3) == 1, "2 of 4 bytes");
    CHECK(mha_utf8_complete("a\xf0\x9f\xa4", 4) == 1, "3 of 4 bytes");
    CHECK(mha_utf8_complete("a\xf0\x9f\xa4\x97", 5) == 5, "4 of 4 bytes");
    CHECK(mha_utf8_complete("a\xc3", 2) == 1, "1 of 2 bytes");
    CHECK(mha_utf8_complete("\xe6\x97", 2) == 0, "2 of 3 bytes");
    CHECK(mha_utf8_complete("a\xff", 2) == 2, "0xff never completes");
    CHECK(mha_utf8_complete("a\xe0\x80", 3) == 3, "E0 80 never completes");
    CHECK(mha_utf8_complete("a\x80\x80", 3) == 3, "stray continuations");
    CHECK(mha_utf8_complete("\xf0\x9f\xa4\x97\x97", 5) == 5, "one continuation too many");

    /* Streaming a text token by token as mha.h describes: every piece
     * printed is whole characters, and the pieces make the text. */
    const char *text = "\xf0\x9f\xa4\x97 h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
                       "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9";
    size_t len = strlen(text);
    int32_t ids[64];
    size_t n = encode(tok, text, len, ids, 64);
    char out[256], pending[64];
    size_t olen = 0, plen = 0, pieces_ok = 1;
    for (size_t i = 0; i < n; i++) {
        const char *b;
        size_t bl;
        REQUIRE(mha_tokenizer_token(tok, ids[i], &b, &bl) == MHA_OK, "token");
        memcpy(pending + plen, b, bl);
        plen += bl;
        size_t k = mha_utf8_complete(pending, plen);
        if (mha__utf8_check((const unsigned char *)pending, k) != k) pieces_ok = 0;
        memcpy(out + olen, pending, k);
        olen += k;
        memmove(pending, pending + k, plen - k);
        plen -= k;
        if (plen > 3) pieces_ok = 0;
    }
    memcpy(out + olen, pending, plen);
    olen += plen;
    CHECK(pieces_ok, "every printed piece is valid UTF-8, at most 3 bytes wait");
    CHECK(olen == len && memcmp(out, text, len) == 0, "the pieces make the text");
}

/* ---- made-up vocabularies ------------------------------------------------ */

/* encoder.json with the 256 byte tokens (id = byte value) followed by extra
 * tokens of printable ASCII (written as themselves), in a malloc'd string. */
static char *make_encoder(const char *const *extra, size_t n_extra) {
    size_t cap = 8192, o = 0;
    char *j = malloc(cap);
    int cp_of[256], next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cp_of[b] = printable ? b : next++;
    }
    j[o++] = '{';
    for (int b = 0; b < 256 + (int)n_extra; b++) {
        if (b) j[o++] = ',';
        j[o++] = '"';
        if (b < 256) {
            int cp = cp_of[b];
            if (cp == '"' || cp == '\\') j[o++] = '\\';
            if (cp < 0x80) {
                j[o++] = (char)cp;
            } else {
                j[o++] = (char)(0xC0 | (cp >> 6));
                j[o++] = (char)(0x80 | (cp & 0x3F));
            }
        } else {
            for (const char *p = extra[b - 256]; *p; p++) {
                if (*p == '"' || *p == '\\') j[o++] = '\\';
                j[o++] = *p;
            }
        }
        o += (size_t)snprintf(j + o, cap - o, "\": %d", b);
    }
    j[o++] = '}';
    j[o] = '\0';
    return j;
}

static mha_tokenizer *made_up(const char *const *extra, size_t n_extra, const char *merges) {
    char *json = make_encoder(extra, n_extra);
    mha_tokenizer *t = NULL;
    mha_status st = mha_tokenizer_parse(json, strlen(json), merges, strlen(merges), &t);
    CHECK(st == MHA_OK, "made-up vocabulary: %s", mha_last_error());
    free(json);
    return t;
}

static void test_comma_keys(void) {
    /* gpt-3-encoder keys ranks by a + "," + b: the merge '" ,]' (key '",,]')
     * also ranks the pair ('",', ']'), which OpenAI's encoder.py would leave
     * unmerged. Ids from the package's own bpe() on these files. */
    static const char *const e1[] = {"\",", ",]", "\",]"};
    mha_tokenizer *t = made_up(e1, 3, "#version: 0.2\n\" ,\n, ]\n\" ,]\n");
    if (t) {
        static const int32_t w1[] = {258}, w2[] = {120, 258, 32, 258, 93};
        expect_ids(t, "\",]", 3, w1, 1);
        expect_ids(t, "x\",] \",]]", 9, w2, 5);
    }
    mha_tokenizer_free(t);

    /* Equal ranks: ('<,>', '<') (key '<,>,<', a comma key of line 5) and
     * ('<', '>,<') (line 5 itself) both rank 4 in "<,> < >,<"; the package
     * merges the rightmost kind: '<,>' '<>,<', not '<,><' '>,<'. */
    static const char *const e2[] = {",>", ",<", "<,>", ">,<", "<>,<", "<,><"};
    t = made_up(e2, 6, "#version: 0.2\n, >\n, <\n< ,>\n> ,<\n< >,<\n");
    if (t) {
        static const int32_t w1[] = {258, 260}, w2[] = {258, 260, 258, 260};
        expect_ids(t, "<,><>,<", 7, w1, 2);
        expect_ids(t, "<,><>,<<,><>,<", 14, w2, 4);
    }
    mha_tokenizer_free(t);

    /* A line listed twice keeps the later rank: "b c" at rank 2 loses to
     * "a b" at rank 1, so "abc" is "ab" "c". */
    static const char *const e3[] = {"ab", "bc"};
    t = made_up(e3, 2, "#version: 0.2\nb c\na b\nb c\n");
    if (t) {
        static const int32_t w[] = {256, 99};
        expect_ids(t, "abc", 3, w, 2);
        CHECK(mha_tokenizer_vocab_size(t) == 258, "made-up vocab size");
    }
    mha_tokenizer_free(t);
}

/* ---- damaged files ----------------------------------------------------- */

static void expect_refused(const char *json, size_t json_len, const char *bpe, size_t bpe_len,
                           const char *detail, const char *what) {
    mha_tokenizer *t = (mha_tokenizer *)&t; /* not NULL: must be cleared */
    mha_status st = mha_tokenizer_parse(json, json_len, bpe, bpe_len, &t);
    CHECK(st == MHA_ERR_FORMAT && t == NULL && strstr(mha_last_error(), detail) != NULL,
          "%s: status %s, detail \"%s\" (wanted \"%s\")", what, mha_status_name(st), mha_last_error(),
          detail);
    mha_tokenizer_free(st == MHA_OK ? t : NULL);
}

static void bad_json(const char *json, const char *detail) {
    static const char bpe[] = "#version: 0.2\n";
    expect_refused(json, strlen(json), bpe, sizeof bpe - 1, detail, "encoder.json");
}

static void bad_bpe(const char *bpe, size_t len, const char *detail) {
    static const char *const extra[] = {"ab", "a,"};
    char *json = make_encoder(extra, 2);
    expect_refused(json, strlen(json), bpe, len, detail, "vocab.bpe");
    free(json);
}
#define BAD_BPE(s, detail) bad_bpe(s, sizeof(s) - 1, detail)

/* The made-up encoder.json with its text after byte 1 replaced. */
static char *edit_json(const char *find, const char *replace) {
    char *j = make_encoder(NULL, 0);
    char *at = strstr(j, find);
    REQUIRE(at != NULL, "edit_json: %s", find);
    size_t fl = strlen(find), rl = strlen(replace), jl = strlen(j);
    char *out = malloc(jl - fl + rl + 1);
    size_t pre = (size_t)(at - j);
    memcpy(out, j, pre);
    memcpy(out + pre, replace, rl);
    memcpy(out + pre + rl, at + fl, jl - pre - fl + 1);
    free(j);
    return out;
}

static void bad_edit(const char *find, const char *replace, const char *detail) {
    char *j = edit_json(find, replace);
    bad_json(j, detail);
    free(j);
}

static void test_damaged(void) {
    bad_json("", "not valid JSON");
    bad_json("[1, 2]", "not a JSON object");
    bad_json("{\"a\": 0}", "1 tokens");
    bad_edit("\"a\": 97", "\"a\": \"97\"", "not a number");
    bad_edit("\"a\": 97", "\"a\": 97.5", "not an integer");
    bad_edit("\"a\": 97", "\"a\": -1", "not an integer");
    bad_edit("\"a\": 97", "\"a\": 256", "not an integer in [0, 256)");
    bad_edit("\"a\": 97", "\"a\": 98", "given to two tokens");
    bad_edit("\"a\": 97", "\"b\": 97", "listed twice");
    bad_edit("\"a\": 97", "\"\": 97", "empty");
    bad_edit("\"a\": 97", "\"\\u20ac\": 97", "U+20AC");
    bad_edit("\"a\": 97", "\"a \": 97", "U+0020"); /* a space is spelled "Ġ" */
    bad_edit("\"a\": 97", "\"ab\": 97", "no token for the byte 0x61");
    bad_edit("\"a\": 97", "\"a\\u0000x\": 97", "\\u0000");
    bad_edit("\"a\": 97", "\"a\xff\": 97", "invalid UTF-8");
    {
        char *j = make_encoder(NULL, 0);
        size_t len = strlen(j);
        char *junk = malloc(len + 3);
        memcpy(junk, j, len);
        memcpy(junk + len, " x", 3);
        bad_json(junk, "after the JSON object");
        free(junk);
        j[len / 2] = '\0'; /* a NUL in the middle */
        expect_refused(j, len, "#version\n", 9, "NUL byte", "NUL in encoder.json");
        free(j);
    }

    BAD_BPE("a b\n", "#version");
    BAD_BPE("#version: 0.2\na b", "no newline");
    BAD_BPE("#version: 0.2\r\na b\r\n", "carriage return");
    BAD_BPE("#version: 0.2\na b\n\n", "line 3: not a merge");
    BAD_BPE("#version: 0.2\nab\n", "line 2: not a merge");
    BAD_BPE("#version: 0.2\na b c\n", "line 2: not a merge");
    BAD_BPE("#version: 0.2\n a\n", "line 2: not a merge");
    BAD_BPE("#version: 0.2\na  b\n", "line 2: not a merge");
    BAD_BPE("#version: 0.2\na\tb\n", "not a merge");
    BAD_BPE("#version: 0.2\na b\nab q\n", "line 3: the merge of \"ab\" and \"q\" is not a token");
    BAD_BPE("#version: 0.2\na b\nzz b\n", "line 3: \"zz\" is not a token");
    BAD_BPE("#version: 0.2\na \xe2\x82\xac\n", "U+20AC");
    BAD_BPE("#version: 0.2\na \xff\n", "invalid UTF-8");
    BAD_BPE("#version: 0.2\na, b\n", "line 2: the merge of \"a,\" and \"b\"");
    {
        /* Line 6 "x,y z" has the key "x,y,z", which also reads as the pair
         * ("x", "y,z"): gpt-3-encoder would merge that into "xy,z". Without
         * such a token the loader refuses, naming the pair; with it, fine. */
        static const char bpe[] = "#version: 0.2\nx ,\nx, y\ny ,\ny, z\nx,y z\n";
        static const char *const extra[] = {"x,", "x,y", "y,", "y,z", "x,yz", "xy,z"};
        char *json = make_encoder(extra, 5);
        expect_refused(json, strlen(json), bpe, sizeof bpe - 1,
                       "line 6: gpt-3-encoder also ranks the pair \"x\" \"y,z\"", "comma key");
        free(json);
        mha_tokenizer_free(made_up(extra, 6, bpe));
    }
}

static void test_files(void) {
    mha_tokenizer *t = (mha_tokenizer *)&t;
    CHECK(mha_tokenizer_load_dir("/nonexistent-mha-dir", &t) == MHA_ERR_IO && t == NULL &&
              strstr(mha_last_error(), "/nonexistent-mha-dir/encoder.json") != NULL,
          "missing dir: %s", mha_last_error());
    CHECK(mha_tokenizer_load(NULL, "x", &t) == MHA_ERR_ARGUMENT, "NULL path");
    CHECK(mha_tokenizer_load_dir(DATA, NULL) == MHA_ERR_ARGUMENT, "NULL out");
    /* A damaged vocab.bpe beside the real encoder.json: the detail begins
     * with its path. */
    char path[] = "/tmp/mha_test_vocab_XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    static const char bpe[] = "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0 zzzzzz\n";
    REQUIRE(write(fd, bpe, sizeof bpe - 1) == (ssize_t)(sizeof bpe - 1), "write");
    close(fd);
    CHECK(mha_tokenizer_load(DATA "/encoder.json", path, &t) == MHA_ERR_FORMAT && t == NULL,
          "damaged vocab.bpe");
    CHECK(strncmp(mha_last_error(), path, strlen(path)) == 0 &&
              strstr(mha_last_error(), "line 3") != NULL, "detail: %s", mha_last_error());
    unlink(path);
}

int main(void) {
    mha_status st = mha_tokenizer_load_dir(DATA, &tok);
    REQUIRE(st == MHA_OK, "load %s: %s", DATA, mha_last_error());
    test_known_ids();
    test_pieces();
    test_roundtrips();
    test_buffers();
    test_invalid_utf8();
    test_decode_errors();
    test_tokens();
    test_streaming();
    test_comma_keys();
    test_damaged();
    test_files();
    mha_tokenizer_free(tok);
    mha_tokenizer_free(NULL);
    printf("%d passed, %d failed\n", t_pass, t_fail);
    return t_fail ? 1 : 0;
}
