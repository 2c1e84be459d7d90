/* test_safetensors.c — the safetensors reader's validation rules, the
 * writer, dtype conversion, and module save/load. */
#include "test_util.h"
#include "mha.h"

#include <dirent.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>



/* ------------------------------------------------------------------------ */
/* Building files in memory                                                  */
/* ------------------------------------------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t n;
} buf_t;

/* 8-byte prefix hlen_field, then hdr[0..hlen), then data. */
static buf_t mk_raw(uint64_t hlen_field, const char *hdr, size_t hlen, const void *data,
                    size_t dlen) {
    buf_t b;
    b.n = 8 + hlen + dlen;
    b.p = malloc(b.n);
    for (int i = 0; i < 8; i++) b.p[i] = (unsigned char)(hlen_field >> (8 * i));
    if (hlen) memcpy(b.p + 8, hdr, hlen);
    if (dlen) memcpy(b.p + 8 + hlen, data, dlen);
    return b;
}

static buf_t mk(const char *hdr, const void *data, size_t dlen) {
    return mk_raw(strlen(hdr), hdr, strlen(hdr), data, dlen);
}

static const unsigned char zeros[256];

/* Parses b (and frees it); checks the status and that a failure has a
 * detail. Returns the st on success when keep is set. */
static mha_st *expect_buf(buf_t b, mha_status want, const char *label, int keep) {
    mha_st *st = (mha_st *)1;
    mha_status s = mha_st_parse(b.p, b.n, &st);
    free(b.p);
    CHECK(s == want, "%s: got %s (%s), want %s", label, mha_status_name(s),
          mha_last_error(), mha_status_name(want));
    if (s != MHA_OK) {
        CHECK(st == NULL, "%s: out not NULL on failure", label);
        CHECK(mha_last_error()[0] != '\0', "%s: empty error detail", label);
    }
    if (s == MHA_OK && !keep) {
        mha_st_free(st);
        st = NULL;
    }
    return s == MHA_OK ? st : NULL;
}

#define BAD(hdr, dlen, want) expect_buf(mk(hdr, zeros, dlen), want, hdr, 0)
#define GOOD(hdr, dlen) expect_buf(mk(hdr, zeros, dlen), MHA_OK, hdr, 0)

#define A8 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_prefix(void) {
    mha_st *st = (mha_st *)1;
    CHECK(mha_st_parse(zeros, 0, &st) == MHA_ERR_FORMAT && st == NULL, "empty file");
    CHECK(mha_st_parse(zeros, 7, &st) == MHA_ERR_FORMAT, "7-byte file");
    CHECK(strstr(mha_last_error(), "8") != NULL, "detail: %s", mha_last_error());
    expect_buf(mk_raw(0, "", 0, NULL, 0), MHA_ERR_FORMAT, "header length 0", 0);
    expect_buf(mk_raw(0, "{}", 2, NULL, 0), MHA_ERR_FORMAT, "header length 0 + bytes", 0);
    expect_buf(mk_raw(100000001, "{}", 2, NULL, 0), MHA_ERR_FORMAT, "header > 100 MB", 0);
    expect_buf(mk_raw(UINT64_MAX, "{}", 2, NULL, 0), MHA_ERR_FORMAT, "header 2^64-1", 0);
    expect_buf(mk_raw(3, "{}", 2, NULL, 0), MHA_ERR_FORMAT, "header beyond file", 0);
    expect_buf(mk_raw(2, "{}", 2, NULL, 0), MHA_OK, "{} ok", 0);
    expect_buf(mk_raw(8, "{}      ", 8, NULL, 0), MHA_OK, "{} padded", 0);
    CHECK(mha_st_parse(NULL, 0, NULL) == MHA_ERR_ARGUMENT, "NULL out");
    CHECK(mha_st_parse(NULL, 5, &st) == MHA_ERR_ARGUMENT, "NULL buf");
}

static void test_utf8(void) {
    static const struct {
        const char *s;
        size_t n;
        const char *what;
    } bad[] = {
        {"\xC0\xAF", 2, "overlong 2-byte"},
        {"\xC1\xBF", 2, "overlong C1"},
        {"\xE0\x80\xAF", 3, "overlong 3-byte"},
        {"\xF0\x80\x80\xAF", 4, "overlong 4-byte"},
        {"\xED\xA0\x80", 3, "high surrogate"},
        {"\xED\xBF\xBF", 3, "low surrogate"},
        {"\xF4\x90\x80\x80", 4, "above U+10FFFF"},
        {"\xF5\x80\x80\x80", 4, "F5 lead"},
        {"\xFF", 1, "FF"},
        {"\x80", 1, "lone continuation"},
        {"\xE2\x82", 2, "truncated 3-byte"},
        {"\xE2\x28\xA1", 3, "bad continuation"},
        {"\x00", 1, "NUL byte"},
    };
    char hdr[128];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *pre = "{\"__metadata__\":{\"k\":\"";
        size_t pl = strlen(pre);
        memcpy(hdr, pre, pl);
        memcpy(hdr + pl, bad[i].s, bad[i].n);
        memcpy(hdr + pl + bad[i].n, "\"}}", 3);
        size_t hl = pl + bad[i].n + 3;
        expect_buf(mk_raw(hl, hdr, hl, NULL, 0), MHA_ERR_FORMAT, bad[i].what, 0);
    }
    /* valid multi-byte text is kept */
    mha_st *st = expect_buf(mk("{\"__metadata__\":{\"k\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"
                               "\xF4\x8F\xBF\xBF\"}}", NULL, 0),
                            MHA_OK, "valid UTF-8", 1);
    if (st) {
        const char *v = mha_st_metadata(st, "k");
        CHECK(v && strcmp(v, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF") == 0,
              "utf-8 value kept");
        mha_st_free(st);
    }
    /* \u escapes decode */
    st = expect_buf(mk("{\"__metadata__\":{\"k\":\"\\u00e9\\ud83d\\ude00\"}}", NULL, 0), MHA_OK,
                    "\\u escapes", 1);
    if (st) {
        const char *v = mha_st_metadata(st, "k");
        CHECK(v && strcmp(v, "\xC3\xA9\xF0\x9F\x98\x80") == 0, "\\u decoded");
        mha_st_free(st);
    }
}

static void test_json_shape(void) {
    BAD(" {" A8 "}", 8, MHA_ERR_FORMAT);
    BAD("[]", 0, MHA_ERR_FORMAT);
    BAD("\"x\"", 0, MHA_ERR_FORMAT);
    BAD("{" A8 "}\t", 8, MHA_ERR_FORMAT);
    BAD("{" A8 "}\n", 8, MHA_ERR_FORMAT);
    BAD("{" A8 "} x", 8, MHA_ERR_FORMAT);
    BAD("{" A8 "}}", 8, MHA_ERR_FORMAT);
    BAD("{" A8 "}{}", 8, MHA_ERR_FORMAT);
    BAD("{" A8, 8, MHA_ERR_FORMAT);
    BAD("{\"a\":}", 0, MHA_ERR_FORMAT);
    BAD("{\"a\" 1}", 0, MHA_ERR_FORMAT);
    BAD("{" A8 ",}", 8, MHA_ERR_FORMAT);
    GOOD("{" A8 "}   ", 8);
    GOOD("{ \n\t\r" A8 " \n}", 8); /* JSON white space inside is fine */
    /* cJSON's leniencies, rejected */
    BAD("{\x01" A8 "}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\x01\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\\x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[+2],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,000000000000000000000008]}}",
        8, MHA_ERR_FORMAT);
    /* nesting far beyond cJSON's limit fails cleanly */
    {
        size_t depth = 5000;
        char *h = malloc(2 * depth + 16);
        size_t k = 0;
        memcpy(h, "{\"a\":", 5);
        k = 5;
        for (size_t i = 0; i < depth; i++) h[k++] = '[';
        for (size_t i = 0; i < depth; i++) h[k++] = ']';
        h[k++] = '}';
        h[k] = '\0';
        expect_buf(mk(h, NULL, 0), MHA_ERR_FORMAT, "deep nesting", 0);
        free(h);
    }
}

static void test_keys(void) {
    BAD("{" A8 "," A8 "}", 8, MHA_ERR_FORMAT); /* duplicate tensor */
    CHECK(strstr(mha_last_error(), "duplicate tensor name 'a'") != NULL, "detail: %s",
          mha_last_error());
    /* the same name, spelt with an escape */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
        MHA_ERR_FORMAT);
    CHECK(strstr(mha_last_error(), "duplicate") != NULL, "detail: %s", mha_last_error());
    BAD("{\"__metadata__\":{},\"__metadata__\":{}}", 0, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        8, MHA_ERR_FORMAT);
    BAD("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":[]}", 0, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":\"x\"}", 0, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":{\"k\":1}}", 0, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":{\"k\":{}}}", 0, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":{\"k\":null}}", 0, MHA_ERR_FORMAT);
    GOOD("{\"__metadata__\":{}}", 0);
    GOOD("{\"__metadata__\":{\"\":\"\"}}", 0);
}

static void test_entries(void) {
    BAD("{\"a\":1}", 0, MHA_ERR_FORMAT);
    BAD("{\"a\":[]}", 0, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_DTYPE);
    BAD("{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_DTYPE);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,8]}}", 8,
        MHA_ERR_FORMAT);
    /* 9 dims > MHA_ST_MAX_DIMS; 8 is fine */
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
        MHA_ERR_FORMAT);
    GOOD("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1);
    /* 2^53 is not exactly representable as a header number; 2^53 - 1 is */
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,9007199254740992],\"data_offsets\":[0,0]}}", 0,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,9007199254740993],\"data_offsets\":[0,0]}}", 0,
        MHA_ERR_FORMAT);
    GOOD("{\"a\":{\"dtype\":\"U8\",\"shape\":[0,9007199254740991],\"data_offsets\":[0,0]}}", 0);
    /* element count overflow: (2^53-1)^2 */
    BAD("{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740991,9007199254740991],"
        "\"data_offsets\":[0,0]}}", 0, MHA_ERR_FORMAT);
    /* byte size overflow: numel fits, x8 does not */
    BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[4194304,4194304,4194304],"
        "\"data_offsets\":[0,0]}}", 0, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{}}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[\"0\",8]}}", 8,
        MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,7]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    /* scalar: shape [] has one element */
    GOOD("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,0]}}", 0, MHA_ERR_FORMAT);
    /* every dtype has its size */
    static const char *names[] = {"BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32",
                                  "U32", "F32", "F64", "I64", "U64", "F8_E4M3", "F8_E5M2"};
    static const size_t sizes[] = {1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8, 1, 1};
    for (int i = 0; i < 15; i++) {
        char h[160];
        snprintf(h, sizeof h,
                 "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%zu]}}", names[i],
                 3 * sizes[i]);
        mha_st *st = expect_buf(mk(h, zeros, 3 * sizes[i]), MHA_OK, h, 1);
        if (st) {
            mha_st_tensor t;
            CHECK(mha_st_get(st, 0, &t) == MHA_OK && t.dtype == (mha_dtype)i &&
                      t.nbytes == 3 * sizes[i] && t.numel == 3,
                  "dtype %s", names[i]);
            mha_st_free(st);
        }
        CHECK(mha_dtype_name((mha_dtype)i) && strcmp(mha_dtype_name((mha_dtype)i), names[i]) == 0,
              "mha_dtype_name(%d)", i);
        CHECK(mha_dtype_size((mha_dtype)i) == sizes[i], "mha_dtype_size(%d)", i);
    }
    CHECK(mha_dtype_name((mha_dtype)99) == NULL && mha_dtype_size((mha_dtype)99) == 0,
          "unknown dtype");
    CHECK(mha_dtype_name((mha_dtype)-1) == NULL, "negative dtype");
}

static void test_layout(void) {
    /* overlap */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, MHA_ERR_FORMAT);
    /* gap between, gap at the start */
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, MHA_ERR_FORMAT);
    BAD("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, MHA_ERR_FORMAT);
    /* trailing bytes, also after a header with no tensors */
    BAD("{" A8 "}", 9, MHA_ERR_FORMAT);
    BAD("{}", 1, MHA_ERR_FORMAT);
    BAD("{\"__metadata__\":{}}", 4, MHA_ERR_FORMAT);
    /* zero-size tensors anywhere, even sharing an offset */
    GOOD("{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]}}", 0);
    GOOD("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}," A8
         ",\"y\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 8);
    BAD("{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[9,9]}," A8 "}", 8,
        MHA_ERR_FORMAT);

    /* file order = offset order, whatever the header order */
    float vals[5] = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f};
    const char *h =
        "{\"__metadata__\":{\"format\":\"pt\",\"b\":\"x\"},"
        "\"second\":{\"dtype\":\"F32\",\"shape\":[1,3],\"data_offsets\":[8,20]},"
        "\"empty\":{\"dtype\":\"I64\",\"shape\":[2,0],\"data_offsets\":[20,20]},"
        "\"first\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    mha_st *st = expect_buf(mk(h, vals, sizeof vals), MHA_OK, "ordered", 1);
    if (!st) return;
    CHECK(mha_st_count(st) == 3, "count");
    mha_st_tensor t;
    const char *order[3] = {"first", "second", "empty"};
    for (size_t i = 0; i < 3; i++)
        CHECK(mha_st_get(st, i, &t) == MHA_OK && strcmp(t.name, order[i]) == 0,
              "order %zu", i);
    CHECK(mha_st_get(st, 3, &t) == MHA_ERR_ARGUMENT, "get out of range");
    CHECK(mha_st_find(st, "second", &t) == MHA_OK && t.ndim == 2 && t.shape[0] == 1 &&
              t.shape[1] == 3 && t.numel == 3 && t.nbytes == 12 &&
              memcmp(t.data, vals + 2, 12) == 0 && t.dtype == MHA_DTYPE_F32,
          "find second");
    CHECK(mha_st_find(st, "empty", &t) == MHA_OK && t.numel == 0 && t.nbytes == 0 &&
              t.shape[0] == 2 && t.shape[1] == 0 && t.dtype == MHA_DTYPE_I64,
          "find empty");
    CHECK(mha_st_find(st, "nope", &t) == MHA_ERR_MISSING, "find missing");
    CHECK(mha_st_find(st, "__metadata__", &t) == MHA_ERR_MISSING, "find __metadata__");
    float f[3];
    CHECK(mha_st_find(st, "second", &t) == MHA_OK && mha_st_tensor_to_f32(&t, f, 3) == MHA_OK &&
              f[0] == 3.25f && f[1] == 4.0f && f[2] == 5.0f,
          "second values");
    CHECK(mha_st_tensor_to_f32(&t, f, 2) == MHA_ERR_ARGUMENT, "n mismatch");
    CHECK(mha_st_find(st, "empty", &t) == MHA_OK && mha_st_tensor_to_f32(&t, f, 0) == MHA_ERR_DTYPE,
          "I64 not convertible");
    CHECK(mha_st_metadata_count(st) == 2, "metadata count");
    const char *k, *v;
    CHECK(mha_st_metadata_get(st, 0, &k, &v) == MHA_OK && !strcmp(k, "format") && !strcmp(v, "pt"),
          "metadata 0");
    CHECK(mha_st_metadata_get(st, 1, &k, &v) == MHA_OK && !strcmp(k, "b") && !strcmp(v, "x"),
          "metadata 1");
    CHECK(mha_st_metadata_get(st, 2, &k, &v) == MHA_ERR_ARGUMENT, "metadata out of range");
    CHECK(mha_st_metadata(st, "b") && !strcmp(mha_st_metadata(st, "b"), "x"), "metadata b");
    CHECK(mha_st_metadata(st, "c") == NULL, "metadata absent");
    mha_st_free(st);
    mha_st_free(NULL);
    CHECK(mha_st_count(NULL) == 0 && mha_st_metadata_count(NULL) == 0, "NULL st");
}

/* ------------------------------------------------------------------------ */
/* Conversion                                                                 */
/* ------------------------------------------------------------------------ */

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_convert(void) {
    static const struct {
        uint16_t h;
        uint32_t f;
    } f16[] = {
        {0x0000, 0x00000000}, {0x8000, 0x80000000}, {0x3C00, 0x3F800000},
        {0xC000, 0xC0000000}, {0x7BFF, 0x477FE000}, /* 65504 */
        {0x0001, 0x33800000},                       /* 2^-24 */
        {0x8001, 0xB3800000}, {0x03FF, 0x387FC000}, /* largest subnormal */
        {0x0200, 0x38000000},                       /* 2^-15 */
        {0x0400, 0x38800000},                       /* 2^-14, smallest normal */
        {0x3555, 0x3EAAA000}, {0x7C00, 0x7F800000}, {0xFC00, 0xFF800000},
        {0x7E00, 0x7FC00000}, {0xFE00, 0xFFC00000}, {0x7C01, 0x7F802000}, /* NaN payload */
    };
    size_t n = sizeof f16 / sizeof f16[0];
    unsigned char raw[64];
    for (size_t i = 0; i < n; i++) {
        raw[2 * i] = (unsigned char)(f16[i].h & 0xff);
        raw[2 * i + 1] = (unsigned char)(f16[i].h >> 8);
    }
    mha_st_tensor t = {"h", MHA_DTYPE_F16, 1, {(int64_t)n}, n, raw, 2 * n};
    float out[32];
    CHECK(mha_st_tensor_to_f32(&t, out, n) == MHA_OK, "f16 convert");
    for (size_t i = 0; i < n; i++)
        CHECK(bits(out[i]) == f16[i].f, "f16 0x%04x -> 0x%08x, want 0x%08x", f16[i].h,
              bits(out[i]), f16[i].f);

    static const uint16_t bf[] = {0x3F80, 0x4049, 0xC2F7, 0x7F80, 0xFF80, 0x7FC0, 0x0001,
                                  0x8000};
    n = sizeof bf / sizeof bf[0];
    for (size_t i = 0; i < n; i++) {
        raw[2 * i] = (unsigned char)(bf[i] & 0xff);
        raw[2 * i + 1] = (unsigned char)(bf[i] >> 8);
    }
    t = (mha_st_tensor){"b", MHA_DTYPE_BF16, 1, {(int64_t)n}, n, raw, 2 * n};
    CHECK(mha_st_tensor_to_f32(&t, out, n) == MHA_OK, "bf16 convert");
    for (size_t i = 0; i < n; i++)
        CHECK(bits(out[i]) == (uint32_t)bf[i] << 16, "bf16 0x%04x", bf[i]);
    CHECK(out[0] == 1.0f && out[1] == 3.140625f, "bf16 values");

    static const double d[] = {0.1, -1.0 / 3.0, 1e300, -1e300, 1e-50, 65504.0, 0.0, -0.0};
    n = sizeof d / sizeof d[0];
    for (size_t i = 0; i < n; i++) {
        uint64_t u;
        memcpy(&u, &d[i], 8);
        for (int k = 0; k < 8; k++) raw[8 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    t = (mha_st_tensor){"d", MHA_DTYPE_F64, 1, {(int64_t)n}, n, raw, 8 * n};
    CHECK(mha_st_tensor_to_f32(&t, out, n) == MHA_OK, "f64 convert");
    for (size_t i = 0; i < n; i++)
        CHECK(bits(out[i]) == bits((float)d[i]), "f64 %g", d[i]);
    CHECK(isinf(out[2]) && out[2] > 0 && isinf(out[3]) && out[3] < 0, "f64 overflow -> inf");

    /* F32 is copied bit for bit, from unaligned memory */
    static const uint32_t f32[] = {0x3F800000, 0x7FC00001, 0x00000001, 0xFF800000};
    for (size_t i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            raw[1 + 4 * i + (size_t)k] = (unsigned char)(f32[i] >> (8 * k));
    t = (mha_st_tensor){"f", MHA_DTYPE_F32, 1, {4}, 4, raw + 1, 16};
    CHECK(mha_st_tensor_to_f32(&t, out, 4) == MHA_OK, "f32 convert");
    for (size_t i = 0; i < 4; i++) CHECK(bits(out[i]) == f32[i], "f32 bits %zu", i);

    t = (mha_st_tensor){"i", MHA_DTYPE_I32, 1, {4}, 4, raw, 16};
    CHECK(mha_st_tensor_to_f32(&t, out, 4) == MHA_ERR_DTYPE, "I32 rejected");
    t = (mha_st_tensor){"f", MHA_DTYPE_F32, 1, {4}, 4, raw, 15};
    CHECK(mha_st_tensor_to_f32(&t, out, 4) == MHA_ERR_ARGUMENT, "nbytes mismatch");
    CHECK(mha_st_tensor_to_f32(NULL, out, 4) == MHA_ERR_ARGUMENT, "NULL tensor");
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                     */
/* ------------------------------------------------------------------------ */

static char tmpdir[64];

static void path_in(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

/* Files in tmpdir (to spot leftover temporaries). */
static int count_files(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void test_writer(void) {
    char path[256];
    path_in(path, sizeof path, "w.safetensors");
    float a[6] = {1, 2, 3, 4, 5, 6};
    double b[2] = {0.5, -0.25};
    uint16_t h[3] = {0x3C00, 0x0001, 0x7C00};
    unsigned char u8[1] = {7};
    int64_t sa[2] = {2, 3}, sb[1] = {2}, sh[1] = {3}, sz[2] = {0, 5};
    mha_st_entry ents[] = {
        {"zeta.weight", MHA_DTYPE_F32, 2, sa, a},
        {"alpha", MHA_DTYPE_F64, 1, sb, b},
        {"empty", MHA_DTYPE_F32, 2, sz, NULL},
        {"half", MHA_DTYPE_F16, 1, sh, h},
        {"scalar", MHA_DTYPE_U8, 0, NULL, u8},
        {"\xC3\xA9t\xC3\xA9 \"quoted\\\"", MHA_DTYPE_U8, 0, NULL, u8},
    };
    const char *meta[] = {"module", "Test", "note", "line\nbreak \"q\" \xE2\x82\xAC"};
    mha_status s = mha_st_write_file(path, ents, 6, meta, 2);
    CHECK(s == MHA_OK, "write: %s %s", mha_status_name(s), mha_last_error());
    size_t n = 0;
    unsigned char *raw = slurp(path, &n);
    CHECK(raw != NULL, "written file exists");
    if (!raw) return;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | raw[i];
    CHECK(hl % 8 == 0 && hl + 8 <= n, "header length %llu multiple of 8", (unsigned long long)hl);
    CHECK(memcmp(raw + 8, "{\"__metadata__\":{\"module\":\"Test\"", 32) == 0,
          "metadata first: %.40s", raw + 8);
    size_t dlen = 24 + 16 + 0 + 6 + 1 + 1;
    CHECK(n == 8 + hl + dlen, "file size %zu", n);
    CHECK(n >= dlen && memcmp(raw + 8 + hl, a, 24) == 0 && memcmp(raw + 8 + hl + 24, b, 16) == 0 &&
              memcmp(raw + 8 + hl + 40, h, 6) == 0 && raw[8 + hl + 46] == 7,
          "data packed in order");
    mha_st *st = NULL;
    s = mha_st_parse(raw, n, &st);
    free(raw);
    CHECK(s == MHA_OK, "reparse: %s", mha_last_error());
    if (!st) return;
    CHECK(mha_st_count(st) == 6, "count");
    for (size_t i = 0; i < 6; i++) {
        mha_st_tensor t;
        CHECK(mha_st_get(st, i, &t) == MHA_OK && strcmp(t.name, ents[i].name) == 0 &&
                  t.dtype == ents[i].dtype && t.ndim == ents[i].ndim,
              "tensor %zu", i);
        for (int d = 0; d < t.ndim; d++) CHECK(t.shape[d] == ents[i].shape[d], "shape");
        if (t.nbytes) CHECK(memcmp(t.data, ents[i].data, t.nbytes) == 0, "data %zu", i);
    }
    CHECK(mha_st_metadata_count(st) == 2 && !strcmp(mha_st_metadata(st, "module"), "Test") &&
              !strcmp(mha_st_metadata(st, "note"), meta[3]),
          "metadata round trip");
    mha_st_free(st);
    /* same through the file reader */
    REQUIRE(mha_st_read_file(path, &st) == MHA_OK && mha_st_count(st) == 6, "read_file");
    mha_st_free(st);
    CHECK(count_files() == 1, "no temporary left (%d files)", count_files());

    /* argument checks; a failure leaves the existing file untouched */
    size_t before_n = 0;
    unsigned char *before = slurp(path, &before_n);
    int64_t neg[1] = {-1}, big[2] = {INT64_MAX, 2}, e53[1] = {(int64_t)1 << 53};
    struct {
        mha_st_entry e;
        mha_status want;
        const char *what;
    } bad[] = {
        {{"x", (mha_dtype)42, 1, sb, b}, MHA_ERR_DTYPE, "unknown dtype"},
        {{"x", MHA_DTYPE_F32, 9, sa, a}, MHA_ERR_ARGUMENT, "ndim 9"},
        {{"x", MHA_DTYPE_F32, -1, sa, a}, MHA_ERR_ARGUMENT, "ndim -1"},
        {{"x", MHA_DTYPE_F32, 1, NULL, a}, MHA_ERR_ARGUMENT, "shape NULL"},
        {{"x", MHA_DTYPE_F32, 1, neg, a}, MHA_ERR_ARGUMENT, "negative dim"},
        {{"x", MHA_DTYPE_F32, 2, big, a}, MHA_ERR_OVERFLOW, "overflow"},
        {{"x", MHA_DTYPE_U8, 1, e53, a}, MHA_ERR_OVERFLOW, "2^53 dim"},
        {{"x", MHA_DTYPE_F32, 1, sb, NULL}, MHA_ERR_ARGUMENT, "NULL data"},
        {{"", MHA_DTYPE_F32, 1, sb, a}, MHA_ERR_ARGUMENT, "empty name"},
        {{NULL, MHA_DTYPE_F32, 1, sb, a}, MHA_ERR_ARGUMENT, "NULL name"},
        {{"__metadata__", MHA_DTYPE_F32, 1, sb, a}, MHA_ERR_ARGUMENT, "reserved name"},
        {{"\xC0\xAF", MHA_DTYPE_F32, 1, sb, a}, MHA_ERR_ARGUMENT, "non-UTF-8 name"},
        {{"alpha", MHA_DTYPE_F32, 1, sb, a}, MHA_ERR_ARGUMENT, "duplicate name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mha_st_entry two[2] = {ents[1], bad[i].e};
        s = mha_st_write_file(path, two, 2, NULL, 0);
        CHECK(s == bad[i].want && mha_last_error()[0], "writer %s: %s", bad[i].what,
              mha_status_name(s));
    }
    const char *dup_meta[] = {"k", "1", "k", "2"};
    CHECK(mha_st_write_file(path, ents, 1, dup_meta, 2) == MHA_ERR_ARGUMENT, "dup meta");
    const char *null_meta[] = {"k", NULL};
    CHECK(mha_st_write_file(path, ents, 1, null_meta, 1) == MHA_ERR_ARGUMENT, "NULL meta value");
    CHECK(mha_st_write_file(path, NULL, 1, NULL, 0) == MHA_ERR_ARGUMENT, "NULL tensors");
    CHECK(mha_st_write_file(NULL, ents, 1, NULL, 0) == MHA_ERR_ARGUMENT, "NULL path");
    size_t after_n = 0;
    unsigned char *after = slurp(path, &after_n);
    CHECK(before && after && before_n == after_n && memcmp(before, after, after_n) == 0,
          "failed writes left the file alone");
    free(before);
    free(after);
    CHECK(count_files() == 1, "no temporary left after failures");

    /* I/O errors */
    char nodir[256];
    path_in(nodir, sizeof nodir, "no/such/dir.safetensors");
    CHECK(mha_st_write_file(nodir, ents, 1, NULL, 0) == MHA_ERR_IO, "write into missing dir");
    CHECK(mha_st_write_file(tmpdir, ents, 1, NULL, 0) == MHA_ERR_IO, "write over a directory");
    CHECK(count_files() == 1, "no temporary left after I/O errors");
    CHECK(mha_st_read_file(nodir, &st) == MHA_ERR_IO && st == NULL, "read missing file");
    CHECK(mha_st_read_file(tmpdir, &st) == MHA_ERR_IO, "read a directory");
    CHECK(mha_st_read_file("/dev/null", &st) == MHA_ERR_IO, "read a device");
    char fifo[256];
    path_in(fifo, sizeof fifo, "fifo");
    if (mkfifo(fifo, 0600) == 0) {
        CHECK(mha_st_read_file(fifo, &st) == MHA_ERR_IO, "read a FIFO (without hanging)");
        unlink(fifo);
    }

    /* empty file: no tensors, no metadata */
    CHECK(mha_st_write_file(path, NULL, 0, NULL, 0) == MHA_OK, "write empty");
    raw = slurp(path, &n);
    CHECK(raw && n == 16 && memcmp(raw + 8, "{}      ", 8) == 0, "empty file bytes");
    free(raw);
    REQUIRE(mha_st_read_file(path, &st) == MHA_OK && mha_st_count(st) == 0, "read empty");
    mha_st_free(st);
    unlink(path);
}

/* ------------------------------------------------------------------------ */
/* Modules                                                                    */
/* ------------------------------------------------------------------------ */

static int same_params(mha_module *ma, mha_module *mb) {
    const mha_params *a = mha_module_params(ma), *b = mha_module_params(mb);
    size_t n = mha_params_count(a);
    if (n != mha_params_count(b)) return 0;
    for (size_t i = 0; i < n; i++) {
        mha_param p, q;
        if (mha_params_get(a, i, &p) != MHA_OK || mha_params_get(b, i, &q) != MHA_OK) return 0;
        if (strcmp(p.name, q.name) || p.numel != q.numel ||
            memcmp(p.data, q.data, p.numel * sizeof(float)))
            return 0;
    }
    return 1;
}

static void test_module_roundtrip(void) {
    struct {
        mha_config c;
        const char *names; /* expected file order, space separated */
    } cases[] = {
        {test_config(MHA_SELF_ATTENTION_V1, 3, 2, 0, 0, 1, 0), "W_query W_key W_value"},
        {test_config(MHA_SELF_ATTENTION_V2, 3, 2, 0, 0, 1, 1),
         "W_query.weight W_query.bias W_key.weight W_key.bias W_value.weight W_value.bias"},
        {test_config(MHA_SELF_ATTENTION_V2, 4, 3, 0, 0, 1, 0),
         "W_query.weight W_key.weight W_value.weight"},
        {test_config(MHA_CAUSAL_ATTENTION, 3, 2, 6, 0.1, 1, 0),
         "mask W_query.weight W_key.weight W_value.weight"},
        {test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 2, 6, 0.0, 2, 1),
         "heads.0.mask heads.0.W_query.weight heads.0.W_query.bias heads.0.W_key.weight "
         "heads.0.W_key.bias heads.0.W_value.weight heads.0.W_value.bias "
         "heads.1.mask heads.1.W_query.weight heads.1.W_query.bias heads.1.W_key.weight "
         "heads.1.W_key.bias heads.1.W_value.weight heads.1.W_value.bias"},
        {test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 2, 4, 0.5, 11, 0), NULL},
        {test_config(MHA_MULTI_HEAD_ATTENTION, 4, 4, 5, 0.25, 2, 0),
         "mask W_query.weight W_key.weight W_value.weight out_proj.weight out_proj.bias"},
        {test_config(MHA_MULTI_HEAD_ATTENTION, 512, 512, 64, 0.1, 8, 1), /* > 2^20 values */
         "mask W_query.weight W_query.bias W_key.weight W_key.bias W_value.weight W_value.bias "
         "out_proj.weight out_proj.bias"},
        {test_config(MHA_MULTI_HEAD_ATTENTION, 6, 6, 3, 1.0 / 3.0, 3, 1),
         "mask W_query.weight W_query.bias W_key.weight W_key.bias W_value.weight W_value.bias "
         "out_proj.weight out_proj.bias"},
    };
    char path[256];
    path_in(path, sizeof path, "m.safetensors");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const mha_config *c = &cases[ci].c;
        mha_module *m = NULL, *r = NULL;
        mha_status s = mha_module_create_seeded(c, 1000 + ci, &m);
        CHECK(s == MHA_OK, "case %zu create: %s", ci, mha_last_error());
        if (s != MHA_OK) continue;
        s = mha_module_save(m, path);
        CHECK(s == MHA_OK, "case %zu save: %s", ci, mha_last_error());
        s = mha_module_load(path, &r);
        CHECK(s == MHA_OK, "case %zu load: %s", ci, mha_last_error());
        if (r) {
            CHECK(same_params(m, r), "case %zu params bit for bit", ci);
            const mha_config *a = mha_module_config_of(m), *b = mha_module_config_of(r);
            int same = a->kind == b->kind && a->d_in == b->d_in && a->d_out == b->d_out;
            if (c->kind != MHA_SELF_ATTENTION_V1) same = same && a->qkv_bias == b->qkv_bias;
            if (mha_config_is_batched(c))
                same = same && a->context_length == b->context_length &&
                       a->dropout == b->dropout;
            if (c->kind == MHA_MULTI_HEAD_ATTENTION ||
                c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER)
                same = same && a->num_heads == b->num_heads;
            CHECK(same, "case %zu config equal", ci);
        }
        mha_st *st = NULL;
        REQUIRE(mha_st_read_file(path, &st) == MHA_OK, "case %zu reread", ci);
        if (st) {
            CHECK(!strcmp(mha_st_metadata(st, "module"), mha_kind_name(c->kind)),
                  "case %zu module name", ci);
            if (cases[ci].names) {
                char list[1024] = "";
                for (size_t i = 0; i < mha_st_count(st); i++) {
                    mha_st_tensor t;
                    mha_st_get(st, i, &t);
                    if (i) strcat(list, " ");
                    strcat(list, t.name);
                }
                CHECK(!strcmp(list, cases[ci].names), "case %zu order: %s", ci, list);
            } else {
                CHECK(mha_st_count(st) == 11 * 4, "case %zu count", ci);
                mha_st_tensor t;
                CHECK(mha_st_get(st, 10 * 4, &t) == MHA_OK && !strcmp(t.name, "heads.10.mask"),
                      "11 heads: heads.10.mask at 40");
            }
            mha_st_tensor t;
            const char *mn = c->kind == MHA_MULTI_HEAD_ATTENTION_WRAPPER ? "heads.0.mask" : "mask";
            if (mha_config_is_batched(c)) {
                CHECK(mha_st_find(st, mn, &t) == MHA_OK && t.dtype == MHA_DTYPE_F32 &&
                          t.ndim == 2 && t.shape[0] == c->context_length &&
                          t.shape[1] == c->context_length,
                      "case %zu mask", ci);
                size_t L = (size_t)c->context_length;
                float *mk_ = malloc(L * L * sizeof(float));
                int ok = mha_st_tensor_to_f32(&t, mk_, L * L) == MHA_OK;
                for (size_t i = 0; ok && i < L; i++)
                    for (size_t j = 0; j < L; j++)
                        ok = ok && mk_[i * L + j] == (j > i ? 1.0f : 0.0f);
                CHECK(ok, "case %zu mask = triu(ones, 1)", ci);
                free(mk_);
            } else {
                CHECK(mha_st_find(st, "mask", &t) == MHA_ERR_MISSING, "case %zu no mask", ci);
            }
            /* bool written as true/false, dropout as %.17g */
            const char *qb = mha_st_metadata(st, "qkv_bias");
            if (c->kind != MHA_SELF_ATTENTION_V1)
                CHECK(qb && !strcmp(qb, c->qkv_bias ? "true" : "false"), "case %zu qkv_bias", ci);
            mha_st_free(st);
        }
        mha_module_free(m);
        mha_module_free(r);
    }
    unlink(path);
    CHECK(count_files() == 0, "module files cleaned");
}

/* A MultiHeadAttention(4, 4, 3, 0.0, 2) file from entries, with edits. */
typedef struct {
    const char *meta[16];
    size_t n_meta;
    mha_st_entry e[12];
    size_t n;
} mfile;

static float W[64], B[4], M[9];
static int64_t s44[2] = {4, 4}, s4[1] = {4}, s33[2] = {3, 3};

static void mfile_init(mfile *f) {
    memset(f, 0, sizeof *f);
    static const char *meta[] = {"module", "MultiHeadAttention", "d_in", "4", "d_out", "4",
                                 "context_length", "3", "dropout", "0.0", "num_heads", "2",
                                 "qkv_bias", "False"};
    memcpy(f->meta, meta, sizeof meta);
    f->n_meta = 7;
    const char *names[] = {"W_query.weight", "W_key.weight", "W_value.weight",
                           "out_proj.weight"};
    for (int i = 0; i < 4; i++) f->e[i] = (mha_st_entry){names[i], MHA_DTYPE_F32, 2, s44, W};
    f->e[4] = (mha_st_entry){"out_proj.bias", MHA_DTYPE_F32, 1, s4, B};
    f->e[5] = (mha_st_entry){"mask", MHA_DTYPE_F32, 2, s33, M};
    f->n = 6;
}

static void set_meta(mfile *f, const char *k, const char *v) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], k)) {
            f->meta[2 * i + 1] = v;
            return;
        }
    f->meta[2 * f->n_meta] = k;
    f->meta[2 * f->n_meta + 1] = v;
    f->n_meta++;
}

static void drop_meta(mfile *f, const char *k) {
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta[2 * i], k)) {
            memmove(&f->meta[2 * i], &f->meta[2 * i + 2], (f->n_meta - i - 1) * 2 * sizeof(char *));
            f->n_meta--;
            return;
        }
}

static void drop_tensor(mfile *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) {
            memmove(&f->e[i], &f->e[i + 1], (f->n - i - 1) * sizeof f->e[0]);
            f->n--;
            return;
        }
}

static mha_st_entry *tensor(mfile *f, const char *name) {
    for (size_t i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return &f->e[i];
    return NULL;
}

static mha_status load_mfile(const mfile *f, mha_module **m) {
    char path[256];
    path_in(path, sizeof path, "e.safetensors");
    *m = NULL;
    mha_status s = mha_st_write_file(path, f->e, f->n, f->meta, f->n_meta);
    if (s != MHA_OK) {
        printf("  (writing the test file failed: %s)\n", mha_last_error());
        return MHA_ERR_ARGUMENT;
    }
    s = mha_module_load(path, m);
    unlink(path);
    return s;
}

/* Loads f and checks the status, that a failure leaves no module and has a
 * detail, and (when substr is not NULL) that the detail contains substr. */
static void expect_load(const mfile *f, mha_status want, const char *substr, int line) {
    mha_module *m = NULL;
    mha_status s = load_mfile(f, &m);
    int ok = s == want && (s != MHA_OK ? m == NULL : m != NULL) &&
             (s == MHA_OK || mha_last_error()[0] != '\0') &&
             (substr == NULL || strstr(mha_last_error(), substr) != NULL);
    CHECK(ok, "line %d: load got %s (%s), want %s%s%s", line, mha_status_name(s),
          mha_last_error(), mha_status_name(want), substr ? " with " : "",
          substr ? substr : "");
    mha_module_free(m);
}
#define EXPECT_LOAD(f, want, substr) expect_load(&(f), want, substr, __LINE__)

static void test_module_errors(void) {
    for (int i = 0; i < 64; i++) W[i] = (float)i / 64.0f - 0.5f;
    for (int i = 0; i < 4; i++) B[i] = (float)i * 0.125f;
    mfile f;

    mfile_init(&f);
    EXPECT_LOAD(f, MHA_OK, NULL);
    {
        mha_module *m = NULL;
        if (load_mfile(&f, &m) == MHA_OK) {
            mha_param p;
            CHECK(mha_params_find(mha_module_params(m), "out_proj.bias", &p) == MHA_OK && p.numel == 4 &&
                      memcmp(p.data, B, sizeof B) == 0,
                  "values loaded");
            CHECK(mha_params_find(mha_module_params(m), "W_key.weight", &p) == MHA_OK &&
                      memcmp(p.data, W, 16 * sizeof(float)) == 0,
                  "weight loaded");
        }
        mha_module_free(m);
    }

    /* masks are optional and may have any dtype */
    mfile_init(&f);
    drop_tensor(&f, "mask");
    EXPECT_LOAD(f, MHA_OK, NULL);
    mfile_init(&f);
    tensor(&f, "mask")->dtype = MHA_DTYPE_U8;
    EXPECT_LOAD(f, MHA_OK, NULL);
    mfile_init(&f);
    tensor(&f, "mask")->shape = s44;
    tensor(&f, "mask")->data = W;
    EXPECT_LOAD(f, MHA_ERR_SHAPE, "'mask'");

    /* F16 / BF16 / F64 parameters are converted */
    uint16_t h16[16];
    for (int i = 0; i < 16; i++) h16[i] = (uint16_t)(0x3C00 + i); /* 1 + i/1024 */
    double d64[4] = {0.5, 0.25, -1.0, 2.0};
    mfile_init(&f);
    tensor(&f, "W_query.weight")->dtype = MHA_DTYPE_F16;
    tensor(&f, "W_query.weight")->data = h16;
    tensor(&f, "W_key.weight")->dtype = MHA_DTYPE_BF16;
    tensor(&f, "W_key.weight")->data = h16;
    tensor(&f, "out_proj.bias")->dtype = MHA_DTYPE_F64;
    tensor(&f, "out_proj.bias")->data = d64;
    {
        mha_module *m = NULL;
        mha_status s = load_mfile(&f, &m);
        CHECK(s == MHA_OK, "mixed dtypes: %s", mha_last_error());
        if (m) {
            mha_param p;
            REQUIRE(mha_params_find(mha_module_params(m), "W_query.weight", &p) == MHA_OK, "find_param");
            CHECK(p.data[0] == 1.0f && p.data[15] == 1.0f + 15.0f / 1024.0f, "F16 weights");
            REQUIRE(mha_params_find(mha_module_params(m), "W_key.weight", &p) == MHA_OK, "find_param");
            CHECK(bits(p.data[3]) == (uint32_t)0x3C03 << 16, "BF16 weights");
            REQUIRE(mha_params_find(mha_module_params(m), "out_proj.bias", &p) == MHA_OK, "find_param");
            CHECK(p.data[0] == 0.5f && p.data[2] == -1.0f, "F64 bias");
        }
        mha_module_free(m);
    }
    mfile_init(&f);
    tensor(&f, "W_value.weight")->dtype = MHA_DTYPE_I32;
    EXPECT_LOAD(f, MHA_ERR_DTYPE, "W_value.weight");

    /* missing, wrong shape, unexpected */
    mfile_init(&f);
    drop_tensor(&f, "out_proj.bias");
    EXPECT_LOAD(f, MHA_ERR_MISSING, "'out_proj.bias'");
    mfile_init(&f);
    drop_tensor(&f, "W_query.weight");
    EXPECT_LOAD(f, MHA_ERR_MISSING, "'W_query.weight'");
    int64_t s43[2] = {4, 3}, s16[1] = {16};
    mfile_init(&f);
    tensor(&f, "W_key.weight")->shape = s43;
    EXPECT_LOAD(f, MHA_ERR_SHAPE, "tensor 'W_key.weight' has shape (4, 3), expected (4, 4)");
    mfile_init(&f);
    tensor(&f, "W_key.weight")->ndim = 1;
    tensor(&f, "W_key.weight")->shape = s16;
    EXPECT_LOAD(f, MHA_ERR_SHAPE, "has shape (16), expected (4, 4)");
    mfile_init(&f);
    f.e[f.n++] = (mha_st_entry){"foo", MHA_DTYPE_F32, 1, s4, B};
    EXPECT_LOAD(f, MHA_ERR_MISSING, "unexpected tensor 'foo'");
    mfile_init(&f);
    f.e[f.n++] = (mha_st_entry){"W_query.bias", MHA_DTYPE_F32, 1, s4, B}; /* qkv_bias False */
    EXPECT_LOAD(f, MHA_ERR_MISSING, "unexpected tensor 'W_query.bias'");
    mfile_init(&f);
    f.e[f.n++] = (mha_st_entry){"heads.0.mask", MHA_DTYPE_F32, 2, s33, M};
    EXPECT_LOAD(f, MHA_ERR_MISSING, "unexpected tensor 'heads.0.mask'");

    /* NaN / inf weights */
    mfile_init(&f);
    W[5] = NAN;
    EXPECT_LOAD(f, MHA_ERR_NONFINITE, NULL);
    W[5] = INFINITY;
    EXPECT_LOAD(f, MHA_ERR_NONFINITE, NULL);
    W[5] = 0.0f;
    mfile_init(&f);
    tensor(&f, "out_proj.bias")->dtype = MHA_DTYPE_F64; /* 1e300 -> inf */
    double huge[4] = {1e300, 0, 0, 0};
    tensor(&f, "out_proj.bias")->data = huge;
    EXPECT_LOAD(f, MHA_ERR_NONFINITE, NULL);

    /* metadata */
    mfile_init(&f);
    drop_meta(&f, "module");
    EXPECT_LOAD(f, MHA_ERR_FORMAT, "module");
    mfile_init(&f);
    set_meta(&f, "module", "GPTModel");
    EXPECT_LOAD(f, MHA_ERR_UNKNOWN_MODULE, "GPTModel");
    mfile_init(&f);
    set_meta(&f, "module", "multiheadattention");
    EXPECT_LOAD(f, MHA_ERR_UNKNOWN_MODULE, NULL);
    static const char *bad_ints[] = {"", "4x", " 4", "4 ", "+4", "-4", "0", "4.0", "0x4", "1e1",
                                     "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++) {
        mfile_init(&f);
        set_meta(&f, "d_in", bad_ints[i]);
        EXPECT_LOAD(f, MHA_ERR_CONFIG, "d_in");
    }
    mfile_init(&f);
    drop_meta(&f, "d_in");
    EXPECT_LOAD(f, MHA_ERR_CONFIG, "d_in");
    mfile_init(&f);
    drop_meta(&f, "num_heads");
    EXPECT_LOAD(f, MHA_ERR_CONFIG, "num_heads");
    mfile_init(&f);
    set_meta(&f, "context_length", "2");
    EXPECT_LOAD(f, MHA_ERR_SHAPE, "'mask'"); /* the mask no longer fits */
    mfile_init(&f);
    set_meta(&f, "num_heads", "3"); /* 4 % 3 != 0 */
    EXPECT_LOAD(f, MHA_ERR_CONFIG, NULL);
    static const char *bad_drop[] = {"", "nan", "inf", "-inf", "0x1p-2", " 0.1", "0.1 ", "0.1x",
                                     "1e999", "."};
    for (size_t i = 0; i < sizeof bad_drop / sizeof bad_drop[0]; i++) {
        mfile_init(&f);
        set_meta(&f, "dropout", bad_drop[i]);
        EXPECT_LOAD(f, MHA_ERR_CONFIG, "dropout");
    }
    mfile_init(&f);
    set_meta(&f, "dropout", "1.5");
    EXPECT_LOAD(f, MHA_ERR_CONFIG, NULL);
    mfile_init(&f);
    set_meta(&f, "dropout", "-0.1");
    EXPECT_LOAD(f, MHA_ERR_CONFIG, NULL);
    mfile_init(&f);
    set_meta(&f, "dropout", "1e-1");
    EXPECT_LOAD(f, MHA_OK, NULL);
    mfile_init(&f);
    drop_meta(&f, "dropout");
    drop_meta(&f, "qkv_bias");
    set_meta(&f, "extra", "ignored");
    EXPECT_LOAD(f, MHA_OK, NULL);
    static const char *bools[] = {"true", "True", "1", "false", "False", "0"};
    for (int i = 0; i < 6; i++) {
        mfile_init(&f);
        set_meta(&f, "qkv_bias", bools[i]);
        EXPECT_LOAD(f, i < 3 ? MHA_ERR_MISSING : MHA_OK, i < 3 ? "W_query.bias" : NULL);
    }
    static const char *bad_bools[] = {"yes", "TRUE", "", "2", "true "};
    for (int i = 0; i < 5; i++) {
        mfile_init(&f);
        set_meta(&f, "qkv_bias", bad_bools[i]);
        EXPECT_LOAD(f, MHA_ERR_CONFIG, "qkv_bias");
    }
    /* a huge module asked for by a tiny file fails before allocating */
    mfile_init(&f);
    set_meta(&f, "d_in", "16000000");
    set_meta(&f, "d_out", "16000000");
    set_meta(&f, "num_heads", "1");
    EXPECT_LOAD(f, MHA_ERR_MISSING, "parameter values");
    mfile_init(&f);
    set_meta(&f, "module", "MultiHeadAttentionWrapper");
    set_meta(&f, "d_in", "1");
    set_meta(&f, "d_out", "1");
    set_meta(&f, "num_heads", "16000000");
    EXPECT_LOAD(f, MHA_ERR_MISSING, "parameter values");
    /* a file that is no module at all */
    {
        mha_module *m = (mha_module *)1;
        char path[256];
        path_in(path, sizeof path, "x.safetensors");
        CHECK(mha_module_load(path, &m) == MHA_ERR_IO && m == NULL, "load missing file");
        CHECK(mha_module_from_st(NULL, &m) == MHA_ERR_ARGUMENT, "from_st NULL");
    }

    /* wrapper masks: heads.N.mask for N < num_heads only */
    {
        mha_config c = test_config(MHA_MULTI_HEAD_ATTENTION_WRAPPER, 3, 2, 4, 0.0, 2, 0);
        mha_module *m = NULL;
        if (mha_module_create_seeded(&c, 7, &m) == MHA_OK) {
            char path[256];
            path_in(path, sizeof path, "wrap.safetensors");
            mha_module_save(m, path);
            mha_st *st = NULL;
            mha_st_read_file(path, &st);
            unlink(path);
            mfile g;
            memset(&g, 0, sizeof g);
            for (size_t i = 0; st && i < mha_st_metadata_count(st); i++)
                mha_st_metadata_get(st, i, &g.meta[2 * i], &g.meta[2 * i + 1]);
            g.n_meta = mha_st_metadata_count(st);
            float mdata[16] = {0};
            int64_t s4x4[2] = {4, 4};
            int64_t shp[8][2];
            for (size_t i = 0; st && i < mha_st_count(st) && i < 8; i++) {
                mha_st_tensor t;
                mha_st_get(st, i, &t);
                if (!strcmp(t.name, "heads.1.mask")) continue; /* masks are optional */
                shp[g.n][0] = t.shape[0];
                shp[g.n][1] = t.shape[1];
                g.e[g.n] = (mha_st_entry){t.name, t.dtype, t.ndim, shp[g.n], t.data};
                g.n++;
            }
            CHECK(g.n == 7, "wrapper file has 8 tensors");
            EXPECT_LOAD(g, MHA_OK, NULL);
            static const char *bad_masks[] = {"heads.2.mask", "heads.01.mask", "heads..mask",
                                              "heads.1.mask.x", "mask"};
            for (int i = 0; i < 5; i++) {
                g.e[g.n] = (mha_st_entry){bad_masks[i], MHA_DTYPE_F32, 2, s4x4, mdata};
                g.n++;
                EXPECT_LOAD(g, MHA_ERR_MISSING, bad_masks[i]);
                g.n--;
            }
            mha_st_free(st);
        }
        mha_module_free(m);
    }
}

/* A file written by PyTorch (fuzz/make_corpus.py): torch.manual_seed(123);
 * MultiHeadAttention(3, 2, 6, 0.0, num_heads=2). Its state_dict must load
 * and equal mha_module_create_seeded(cfg, 123). */
static void test_torch_file(void) {
    static const struct {
        const char *file;
        mha_config c;
    } files[] = {
        {"valid_torch_mha.safetensors",
         {MHA_MULTI_HEAD_ATTENTION, 3, 2, 6, 0.0, 2, 0}},
        {"valid_torch_causal.safetensors", {MHA_CAUSAL_ATTENTION, 3, 2, 6, 0.0, 1, 0}},
    };
    for (size_t i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/fuzz/corpus/safetensors/%s", MHA_SOURCE_DIR,
                 files[i].file);
        mha_module *m = NULL, *ref = NULL;
        mha_status s = mha_module_load(path, &m);
        CHECK(s == MHA_OK, "torch file %s: %s", files[i].file, mha_last_error());
        if (s == MHA_OK && mha_module_create_seeded(&files[i].c, 123, &ref) == MHA_OK)
            CHECK(same_params(m, ref), "torch file %s equals create_seeded(123)", files[i].file);
        mha_module_free(m);
        mha_module_free(ref);
    }
}

/* Every corpus file is what its name says: valid_* parses (valid_torch_*
 * also loads as a module), invalid_* is rejected, module_* parses but is
 * refused by the module loader with the expected status. */
static void test_corpus(void) {
    static const struct {
        const char *name;
        mha_status want;
    } module_files[] = {
        {"module_missing_tensor", MHA_ERR_MISSING}, {"module_bad_d_in", MHA_ERR_CONFIG},
        {"module_bad_heads", MHA_ERR_CONFIG},       {"module_unknown_class", MHA_ERR_UNKNOWN_MODULE},
        {"module_nan_weight", MHA_ERR_NONFINITE},   {"module_wrong_shape", MHA_ERR_SHAPE},
        {"module_extra_tensor", MHA_ERR_MISSING},   {"module_huge_request", MHA_ERR_MISSING},
    };
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fuzz/corpus/safetensors", MHA_SOURCE_DIR);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "open corpus %s", dir);
    if (!d) return;
    int n = 0, n_module = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *f = e->d_name;
        if (f[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, f);
        mha_st *st = NULL;
        mha_status s = mha_st_read_file(path, &st);
        n++;
        /* mha_st_open (header only, data on demand) agrees: same status,
         * and every float tensor reads to the same values */
        {
            mha_st *lz = NULL;
            const mha_status ls = mha_st_open(path, &lz);
            CHECK(ls == s, "%s: mha_st_open gives %s, mha_st_read_file %s", f, mha_status_name(ls),
                  mha_status_name(s));
            for (size_t i = 0; st && lz && i < mha_st_count(st); i++) {
                mha_st_tensor a, b;
                mha_st_get(st, i, &a);
                mha_st_get(lz, i, &b);
                CHECK(b.data == NULL && !strcmp(a.name, b.name) && a.numel == b.numel, "%s: tensor %zu", f, i);
                if (a.dtype != MHA_DTYPE_F32 && a.dtype != MHA_DTYPE_F16 && a.dtype != MHA_DTYPE_BF16 &&
                    a.dtype != MHA_DTYPE_F64)
                    continue;
                float *x = malloc(a.numel * sizeof(float) + 4), *y = malloc(a.numel * sizeof(float) + 4);
                CHECK(mha_st_tensor_to_f32(&a, x, a.numel) == MHA_OK, "%s: %s", f, a.name);
                CHECK(mha_st_read_f32(lz, &b, y, b.numel) == MHA_OK, "%s: lazy %s: %s", f, b.name, mha_last_error());
                CHECK(memcmp(x, y, a.numel * sizeof(float)) == 0, "%s: lazy %s differs", f, a.name);
                if (b.numel) CHECK(mha_st_tensor_to_f32(&b, y, b.numel) == MHA_ERR_ARGUMENT, "%s: data not in memory", f);
                free(x);
                free(y);
            }
            mha_st_free(lz);
        }
        if (!strncmp(f, "invalid_", 8)) {
            mha_status want = strstr(f, "unknown_dtype") ? MHA_ERR_DTYPE : MHA_ERR_FORMAT;
            CHECK(s == want && mha_last_error()[0], "%s: %s", f, mha_status_name(s));
        } else if (!strncmp(f, "valid_", 6) || !strncmp(f, "module_", 7)) {
            CHECK(s == MHA_OK, "%s: %s", f, mha_last_error());
            mha_module *m = NULL;
            mha_status ms = st ? mha_module_from_st(st, &m) : MHA_ERR_ARGUMENT;
            if (!strncmp(f, "valid_torch_", 12)) {
                CHECK(ms == MHA_OK, "%s as module: %s", f, mha_last_error());
            } else if (!strncmp(f, "module_", 7)) {
                n_module++;
                int found = 0;
                for (size_t i = 0; i < sizeof module_files / sizeof module_files[0]; i++) {
                    size_t l = strlen(module_files[i].name);
                    if (!strncmp(f, module_files[i].name, l) && f[l] == '.') {
                        found = 1;
                        CHECK(ms == module_files[i].want && m == NULL, "%s: %s (%s)", f,
                              mha_status_name(ms), mha_last_error());
                    }
                }
                CHECK(found, "%s: no expectation", f);
            }
            mha_module_free(m);
        }
        /* other names: crashers kept for the replay, no expectation */
        mha_st_free(st);
    }
    closedir(d);
    CHECK(n >= 30 && n_module == 8, "corpus has %d files, %d module_*", n, n_module);
}

/* dropout is written and parsed with '.', whatever LC_NUMERIC says (runs
 * only where a comma locale is installed). */
static void test_locale(void) {
    static const char *locs[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
    const char *got = NULL;
    for (size_t i = 0; i < 4 && !got; i++) got = setlocale(LC_NUMERIC, locs[i]);
    if (!got) {
        printf("(no comma locale installed; locale test skipped)\n");
        return;
    }
    mha_config c = test_config(MHA_CAUSAL_ATTENTION, 3, 2, 4, 0.25, 1, 0);
    mha_module *m = NULL, *r = NULL;
    char path[256];
    path_in(path, sizeof path, "loc.safetensors");
    REQUIRE(mha_module_create_seeded(&c, 1, &m) == MHA_OK && mha_module_save(m, path) == MHA_OK &&
              mha_module_load(path, &r) == MHA_OK && mha_module_config_of(r)->dropout == 0.25,
          "dropout round trip under %s: %s", got, mha_last_error());
    mha_st *st = NULL;
    if (mha_st_read_file(path, &st) == MHA_OK)
        CHECK(!strcmp(mha_st_metadata(st, "dropout"), "0.25"), "dropout written with '.'");
    mha_st_free(st);
    mha_module_free(m);
    mha_module_free(r);
    unlink(path);
    setlocale(LC_NUMERIC, "C");
}

/* ------------------------------------------------------------------------ */
/* The metadata rule (docs/file-formats.md)                                   */
/* ------------------------------------------------------------------------ */

/* A file whose __metadata__ holds "k": value (JSON-escaped by the caller). */
static mha_st *meta_file(const char *value) {
    char hdr[256];
    snprintf(hdr, sizeof hdr, "{\"__metadata__\":{\"k\":\"%s\"}}", value);
    return expect_buf(mk(hdr, NULL, 0), MHA_OK, hdr, 1);
}

/* Reading "k" = value as kind 'i', 'd' or 'b' gives want (and *got). */
static void expect_meta(char kind, const char *value, mha_status want, double got) {
    mha_st *st = meta_file(value);
    if (!st) return;
    int64_t i = -7;
    double d = -7.0;
    int b = -7;
    mha_status s = kind == 'i'   ? mha_st_metadata_int(st, "k", -1000, 1000, &i)
                   : kind == 'd' ? mha_st_metadata_double(st, "k", &d)
                                 : mha_st_metadata_bool(st, "k", &b);
    const double v = kind == 'i' ? (double)i : kind == 'd' ? d : (double)b;
    CHECK(s == want, "%c '%s': %s (%s), want %s", kind, value, mha_status_name(s), mha_last_error(),
          mha_status_name(want));
    if (want == MHA_OK) CHECK(v == got, "%c '%s' read as %g, want %g", kind, value, v, got);
    else
        CHECK(v == -7.0 && strstr(mha_last_error(), "'k'") != NULL,
              "%c '%s': out written or the key not named: %s", kind, value, mha_last_error());
    mha_st_free(st);
}

static void test_metadata_rule(void) {
    static const struct {
        const char *v;
        double want;
    } ints[] = {{"12", 12}, {"0", 0}, {"-7", -7}, {"1000", 1000}, {"-1000", -1000}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        expect_meta('i', ints[i].v, MHA_OK, ints[i].want);
    static const char *const bad_ints[] = {"\\t12", "\\n12", " 12", "12 ", "+12", "012", "00", "-0", "-",
                                           "", "1e3", "12.0", "0x10", "1001", "-1001",
                                           "99999999999999999999", "-99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++)
        expect_meta('i', bad_ints[i], MHA_ERR_FORMAT, 0);
    static const struct {
        const char *v;
        double want;
    } dbls[] = {{"0.1", 0.1}, {"-2", -2}, {"1e-08", 1e-08}, {"1e3", 1e3}, {".5", 0.5}, {"0", 0},
                {"0.10000000000000001", 0.1}, {"1E+2", 100}};
    for (size_t i = 0; i < sizeof dbls / sizeof dbls[0]; i++)
        expect_meta('d', dbls[i].v, MHA_OK, dbls[i].want);
    static const char *const bad_dbls[] = {"", "nan", "NaN", "inf", "-inf", "0x1p3", "+0.5", " 0.5", "\\t0.5",
                                           "0.5 ", "1e999", ".", "1e", "0.5x", "--1"};
    for (size_t i = 0; i < sizeof bad_dbls / sizeof bad_dbls[0]; i++)
        expect_meta('d', bad_dbls[i], MHA_ERR_FORMAT, 0);
    static const char *const bools[6] = {"true", "True", "1", "false", "False", "0"};
    for (int i = 0; i < 6; i++) expect_meta('b', bools[i], MHA_OK, i < 3);
    static const char *const bad_bools[] = {"", "TRUE", "yes", "2", " true", "true ", "+1", "01"};
    for (size_t i = 0; i < sizeof bad_bools / sizeof bad_bools[0]; i++)
        expect_meta('b', bad_bools[i], MHA_ERR_FORMAT, 0);
    /* a missing key, and NULLs */
    mha_st *st = meta_file("1");
    int64_t x;
    if (st) {
        CHECK(mha_st_metadata_int(st, "nope", 0, 1, &x) == MHA_ERR_MISSING &&
                  strstr(mha_last_error(), "'nope'"), "missing key: %s", mha_last_error());
        CHECK(mha_st_metadata_int(st, NULL, 0, 1, &x) == MHA_ERR_ARGUMENT, "NULL key");
    }
    CHECK(mha_st_metadata_int(NULL, "k", 0, 1, &x) == MHA_ERR_ARGUMENT, "NULL st");
    mha_st_free(st);
    /* the GPT loader reads by the same rule (it once took "\t4" through strtoll) */
    static const char *const emb[3] = {"4", "\\t4", "04"};
    for (int i = 0; i < 3; i++) {
        char hdr[256];
        snprintf(hdr, sizeof hdr,
                 "{\"__metadata__\":{\"module\":\"TransformerBlock\",\"context_length\":\"3\","
                 "\"emb_dim\":\"%s\",\"n_heads\":\"2\"}}", emb[i]);
        mha_st *g = expect_buf(mk(hdr, NULL, 0), MHA_OK, hdr, 1);
        mha_gpt *m = NULL;
        const mha_status s = g ? mha_gpt_from_st(g, &m) : MHA_OK;
        const int want = i == 0 ? s == MHA_ERR_MISSING
                                : s == MHA_ERR_CONFIG && strstr(mha_last_error(), "emb_dim") != NULL;
        CHECK(want, "GPT emb_dim '%s': %s (%s)", emb[i], mha_status_name(s), mha_last_error());
        mha_st_free(g);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mha_st_test_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    test_prefix();
    test_utf8();
    test_json_shape();
    test_keys();
    test_entries();
    test_layout();
    test_convert();
    test_writer();
    test_module_roundtrip();
    test_module_errors();
    test_torch_file();
    test_corpus();
    test_locale();
    test_metadata_rule();
    rmdir(tmpdir);
    printf("%d passed, %d failed\n", t_pass, t_fail);
    return t_fail ? 1 : 0;
}
