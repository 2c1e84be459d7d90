/* safetensors.c — reading and writing the safetensors format, validated in
 * full.
 *
 * File layout: u64 little-endian N, N bytes of UTF-8 JSON (an object, padded
 * at the end with spaces), then the data section. The JSON maps tensor names
 * to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
 * the data section) and may hold "__metadata__": {string: string}.
 *
 * Everything in a file is untrusted. The reader checks, in this order:
 *   1. the length prefix (file >= 8 bytes, 0 < N <= 100 MB, N <= size - 8);
 *   2. the header bytes: '{' first, '}' last once trailing spaces are
 *      stripped, valid UTF-8 (no overlongs, surrogates, > U+10FFFF, NUL),
 *      and strict JSON (mha__json_check: RFC 8259, no "\u0000", numbers
 *      only as plain integers), which cJSON then parses;
 *   3. the JSON itself (cJSON), which must be one object with unique keys;
 *   4. each entry: exactly the three keys, a known dtype, at most
 *      MHA_ST_MAX_DIMS non-negative integer dims below 2^53 whose product
 *      (and byte size) does not overflow, and offsets [begin, end] with
 *      begin <= end <= data size and end - begin == numel * dtype size;
 *   5. the byte ranges, sorted: no overlap, no gap, no trailing byte.
 * All size arithmetic is checked. Numbers in the header are accepted only
 * below 2^53, where a double (cJSON's representation) holds them exactly.
 */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "common/common.h"
#include "kernels/half.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define ST_MAX_HEADER ((uint64_t)100000000) /* as the reference implementation */
#define ST_MAX_EXACT ((uint64_t)1 << 53)     /* integers below are exact doubles */

/* ------------------------------------------------------------------------ */
/* dtypes                                                                     */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [MHA_DTYPE_BOOL] = {"BOOL", 1},       [MHA_DTYPE_U8] = {"U8", 1},
    [MHA_DTYPE_I8] = {"I8", 1},           [MHA_DTYPE_I16] = {"I16", 2},
    [MHA_DTYPE_U16] = {"U16", 2},         [MHA_DTYPE_F16] = {"F16", 2},
    [MHA_DTYPE_BF16] = {"BF16", 2},       [MHA_DTYPE_I32] = {"I32", 4},
    [MHA_DTYPE_U32] = {"U32", 4},         [MHA_DTYPE_F32] = {"F32", 4},
    [MHA_DTYPE_F64] = {"F64", 8},         [MHA_DTYPE_I64] = {"I64", 8},
    [MHA_DTYPE_U64] = {"U64", 8},         [MHA_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [MHA_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
};
#define N_DTYPES (sizeof dtype_table / sizeof dtype_table[0])

static bool dtype_known(mha_dtype d) {
    return (unsigned)d < N_DTYPES && dtype_table[d].name != NULL;
}

const char *mha_dtype_name(mha_dtype d) {
    return dtype_known(d) ? dtype_table[d].name : NULL;
}

size_t mha_dtype_size(mha_dtype d) {
    return dtype_known(d) ? dtype_table[d].size : 0;
}

static bool dtype_from_name(const char *s, mha_dtype *out) {
    for (size_t i = 0; i < N_DTYPES; i++) {
        if (dtype_table[i].name && strcmp(dtype_table[i].name, s) == 0) {
            *out = (mha_dtype)i;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* The parsed file                                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *name;
    mha_dtype dtype;
    int ndim;
    int64_t shape[MHA_ST_MAX_DIMS];
    size_t numel;
    size_t begin, end; /* relative to the data section */
    size_t order;      /* position in the header, to break ties */
} st_entry;

struct mha_st {
    unsigned char *buf; /* the whole file, or its header only (fd >= 0) */
    size_t len;         /* the file's length */
    int fd;             /* mha_st_open: the open file (data read on demand); else -1 */
    size_t data_start;  /* 8 + header length */
    st_entry *entries;  /* sorted by (begin, end, order) */
    size_t n;
    st_entry **by_name; /* sorted by name, for lookup */
    char **meta_keys;   /* header order */
    char **meta_values;
    size_t n_meta;
};

void mha_st_free(mha_st *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) mha__free(st->entries[i].name);
    for (size_t i = 0; i < st->n_meta; i++) {
        mha__free(st->meta_keys[i]);
        mha__free(st->meta_values[i]);
    }
    mha__free(st->entries);
    mha__free(st->by_name);
    mha__free(st->meta_keys);
    mha__free(st->meta_values);
    mha__free(st->buf);
    if (st->fd >= 0) close(st->fd);
    mha__free(st);
}

/* ------------------------------------------------------------------------ */
/* Header checks before JSON parsing                                          */
/* ------------------------------------------------------------------------ */

/* Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF; NUL is rejected as well. Returns the offset of the first bad
 * byte, or len when all is well. */
static size_t utf8_check(const unsigned char *s, size_t len) {
    const unsigned char *nul = memchr(s, 0, len);
    const size_t n = nul ? (size_t)(nul - s) : len;
    return mha__utf8_check(s, n); /* the NUL's offset when the bytes before it are valid */
}

/* ------------------------------------------------------------------------ */
/* Header semantics                                                           */
/* ------------------------------------------------------------------------ */

/* A JSON number that must be an integer in [0, 2^53). what/index/name are
 * for the detail. */
static mha_status get_uint(const cJSON *v, const char *name, const char *what,
                           size_t index, uint64_t *out) {
    if (!cJSON_IsNumber(v))
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': %s[%zu] is not a number",
                         name, what, index);
    double d = v->valuedouble;
    if (!(d >= 0.0) || signbit(d))
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': %s[%zu] is negative", name,
                         what, index);
    if (!(d < (double)ST_MAX_EXACT))
        return mha__fail(MHA_ERR_FORMAT,
                         "tensor '%s': %s[%zu] is not exactly representable "
                         "(must be below 2^53)", name, what, index);
    if (d != floor(d)) /* unreachable after mha__json_check; kept for safety */
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': %s[%zu] is not an integer",
                         name, what, index);
    *out = (uint64_t)d;
    return MHA_OK;
}

static mha_status parse_entry(const cJSON *item, size_t data_size, st_entry *e) {
    const char *name = item->string;
    if (!cJSON_IsObject(item))
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': entry is not an object", name);
    const cJSON *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *c = item->child; c; c = c->next) {
        const cJSON **slot;
        if (strcmp(c->string, "dtype") == 0) slot = &dtype;
        else if (strcmp(c->string, "shape") == 0) slot = &shape;
        else if (strcmp(c->string, "data_offsets") == 0) slot = &offs;
        else
            return mha__fail(MHA_ERR_FORMAT, "tensor '%s': unexpected key '%s'", name,
                             c->string);
        if (*slot)
            return mha__fail(MHA_ERR_FORMAT, "tensor '%s': duplicate key '%s'", name,
                             c->string);
        *slot = c;
    }
    if (!dtype) return mha__fail(MHA_ERR_FORMAT, "tensor '%s': no dtype", name);
    if (!shape) return mha__fail(MHA_ERR_FORMAT, "tensor '%s': no shape", name);
    if (!offs) return mha__fail(MHA_ERR_FORMAT, "tensor '%s': no data_offsets", name);

    if (!cJSON_IsString(dtype))
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': dtype is not a string", name);
    if (!dtype_from_name(dtype->valuestring, &e->dtype))
        return mha__fail(MHA_ERR_DTYPE, "tensor '%s': unknown dtype '%s'", name,
                         dtype->valuestring);

    if (!cJSON_IsArray(shape))
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': shape is not an array", name);
    int nd = 0;
    size_t numel = 1;
    for (const cJSON *c = shape->child; c; c = c->next) {
        if (nd == MHA_ST_MAX_DIMS)
            return mha__fail(MHA_ERR_FORMAT, "tensor '%s': more than %d dims", name,
                             MHA_ST_MAX_DIMS);
        uint64_t dim;
        mha_status s = get_uint(c, name, "shape", (size_t)nd, &dim);
        if (s != MHA_OK) return s;
        e->shape[nd++] = (int64_t)dim;
        if (dim > SIZE_MAX || !mha__mul_size(numel, (size_t)dim, &numel))
            return mha__fail(MHA_ERR_FORMAT, "tensor '%s': element count overflows",
                             name);
    }
    e->ndim = nd;
    e->numel = numel;
    size_t nbytes;
    if (!mha__mul_size(numel, dtype_table[e->dtype].size, &nbytes))
        return mha__fail(MHA_ERR_FORMAT, "tensor '%s': byte size overflows", name);

    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return mha__fail(MHA_ERR_FORMAT,
                         "tensor '%s': data_offsets is not an array of two integers",
                         name);
    uint64_t b, en;
    mha_status s = get_uint(offs->child, name, "data_offsets", 0, &b);
    if (s == MHA_OK) s = get_uint(offs->child->next, name, "data_offsets", 1, &en);
    if (s != MHA_OK) return s;
    if (b > en)
        return mha__fail(MHA_ERR_FORMAT,
                         "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64
                         "] has begin > end", name, b, en);
    if (en > data_size)
        return mha__fail(MHA_ERR_FORMAT,
                         "tensor '%s': data_offsets end %" PRIu64
                         " is beyond the data section (%zu bytes)", name, en, data_size);
    e->begin = (size_t)b;
    e->end = (size_t)en;
    if (e->end - e->begin != nbytes)
        return mha__fail(MHA_ERR_FORMAT,
                         "tensor '%s': data_offsets span %zu bytes, but shape and "
                         "dtype %s need %zu", name, e->end - e->begin,
                         dtype_table[e->dtype].name, nbytes);
    return MHA_OK;
}

static int cmp_range(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : (x->order > y->order);
}

static int cmp_entry_name(const void *a, const void *b) {
    const st_entry *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int cmp_str(const void *a, const void *b) {
    const char *const *x = a, *const *y = b;
    return strcmp(*x, *y);
}

static mha_status parse_metadata(mha_st *st, const cJSON *meta) {
    if (!cJSON_IsObject(meta))
        return mha__fail(MHA_ERR_FORMAT, "__metadata__ is not an object");
    size_t n = 0;
    for (const cJSON *c = meta->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return mha__fail(MHA_ERR_FORMAT, "__metadata__ value of '%s' is not a string",
                             c->string);
        n++;
    }
    if (n == 0) return MHA_OK;
    st->meta_keys = mha__calloc_n(n, sizeof *st->meta_keys);
    st->meta_values = mha__calloc_n(n, sizeof *st->meta_values);
    if (!st->meta_keys || !st->meta_values)
        return mha__nomem("out of memory reading __metadata__");
    for (const cJSON *c = meta->child; c; c = c->next) {
        char *k = mha__strdup(c->string), *v = mha__strdup(c->valuestring);
        if (!k || !v) {
            mha__free(k);
            mha__free(v);
            return mha__nomem("out of memory reading __metadata__");
        }
        st->meta_keys[st->n_meta] = k;
        st->meta_values[st->n_meta] = v;
        st->n_meta++;
    }
    /* duplicates: sort a copy of the key pointers */
    char **keys = mha__alloc(n * sizeof *keys);
    if (!keys) return mha__nomem("out of memory reading __metadata__");
    memcpy(keys, st->meta_keys, n * sizeof *keys);
    qsort(keys, n, sizeof *keys, cmp_str);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            mha_status s = mha__fail(MHA_ERR_FORMAT, "__metadata__: duplicate key '%s'",
                                     keys[i]);
            mha__free(keys);
            return s;
        }
    }
    mha__free(keys);
    return MHA_OK;
}

static mha_status parse_json(mha_st *st, const cJSON *root, size_t data_size) {
    if (!cJSON_IsObject(root))
        return mha__fail(MHA_ERR_FORMAT, "header is not a JSON object");
    size_t n = 0;
    const cJSON *meta = NULL;
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcmp(c->string, "__metadata__") == 0) {
            if (meta) return mha__fail(MHA_ERR_FORMAT, "duplicate key '__metadata__'");
            meta = c;
        } else {
            if (c->string[0] == '\0')
                return mha__fail(MHA_ERR_FORMAT, "empty tensor name");
            n++;
        }
    }
    if (meta) {
        mha_status s = parse_metadata(st, meta);
        if (s != MHA_OK) return s;
    }
    if (n == 0) {
        if (data_size != 0)
            return mha__fail(MHA_ERR_FORMAT,
                             "%zu trailing bytes after the header of a file without "
                             "tensors", data_size);
        return MHA_OK;
    }
    st->entries = mha__calloc_n(n, sizeof *st->entries);
    st->by_name = mha__alloc(n * sizeof *st->by_name);
    if (!st->entries || !st->by_name)
        return mha__nomem("out of memory reading %zu tensor entries", n);
    for (const cJSON *c = root->child; c; c = c->next) {
        if (c == meta) continue;
        st_entry *e = &st->entries[st->n];
        mha_status s = parse_entry(c, data_size, e);
        if (s != MHA_OK) return s;
        e->order = st->n;
        e->name = mha__strdup(c->string);
        if (!e->name) return mha__nomem("out of memory");
        st->n++;
    }
    /* file order and coverage */
    qsort(st->entries, n, sizeof *st->entries, cmp_range);
    /* unique names */
    for (size_t i = 0; i < n; i++) st->by_name[i] = &st->entries[i];
    qsort(st->by_name, n, sizeof *st->by_name, cmp_entry_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(st->by_name[i - 1]->name, st->by_name[i]->name) == 0)
            return mha__fail(MHA_ERR_FORMAT, "duplicate tensor name '%s'",
                             st->by_name[i]->name);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const st_entry *e = &st->entries[i];
        if (e->begin < pos)
            return mha__fail(MHA_ERR_FORMAT,
                             "tensor '%s': bytes [%zu, %zu) overlap the previous tensor "
                             "'%s'", e->name, e->begin, e->end, st->entries[i - 1].name);
        if (e->begin > pos)
            return mha__fail(MHA_ERR_FORMAT,
                             "gap of %zu bytes in the data section before tensor '%s'",
                             e->begin - pos, e->name);
        pos = e->end;
    }
    if (pos != data_size)
        return mha__fail(MHA_ERR_FORMAT,
                         "%zu trailing bytes after the last tensor in the data section",
                         data_size - pos);
    return MHA_OK;
}

/* Takes ownership of buf (malloc'd) in every case. buf holds the first
 * `have` bytes of a file of len bytes: all of them, or (mha_st_open) at least
 * the length prefix and the header; fd is then the open file (else -1),
 * also owned. */
static mha_status parse_owned(unsigned char *buf, size_t len, size_t have, int fd, mha_st **out) {
    *out = NULL;
    if (len < 8 || have < 8) {
        mha__free(buf);
        if (fd >= 0) close(fd);
        return mha__fail(MHA_ERR_FORMAT, "file of %zu bytes is shorter than the 8-byte "
                         "header length", len);
    }
    uint64_t hlen64 = 0;
    for (int i = 7; i >= 0; i--) hlen64 = (hlen64 << 8) | buf[i];
    mha_status s = MHA_OK;
    if (hlen64 == 0)
        s = mha__fail(MHA_ERR_FORMAT, "header length is 0");
    else if (hlen64 > ST_MAX_HEADER)
        s = mha__fail(MHA_ERR_FORMAT, "header length %" PRIu64 " exceeds the limit of %"
                      PRIu64 " bytes", hlen64, ST_MAX_HEADER);
    else if (hlen64 > len - 8)
        s = mha__fail(MHA_ERR_FORMAT, "header length %" PRIu64 " exceeds the %zu bytes "
                      "after the length prefix", hlen64, len - 8);
    else if (hlen64 > have - 8)
        s = mha__fail(MHA_ERR_ARGUMENT, "the header was not read in full");
    if (s != MHA_OK) {
        mha__free(buf);
        if (fd >= 0) close(fd);
        return s;
    }
    size_t hlen = (size_t)hlen64;
    const unsigned char *h = buf + 8;

    mha_st *st = mha__calloc_n(1, sizeof *st);
    if (!st) {
        mha__free(buf);
        if (fd >= 0) close(fd);
        return mha__nomem("out of memory");
    }
    st->fd = fd;
    st->buf = buf;
    st->len = len;
    st->data_start = 8 + hlen;

    size_t bad = utf8_check(h, hlen);
    size_t jlen = hlen;
    char *json = NULL;
    cJSON *root = NULL;
    if (bad != hlen) {
        s = h[bad] == 0 ? mha__fail(MHA_ERR_FORMAT, "header has a NUL byte at %zu", bad)
                        : mha__fail(MHA_ERR_FORMAT, "header is not valid UTF-8 (byte %zu)",
                                    bad);
        goto done;
    }
    while (jlen > 0 && h[jlen - 1] == ' ') jlen--; /* padding */
    if (jlen == 0 || h[0] != '{') {
        s = mha__fail(MHA_ERR_FORMAT, "header does not start with '{'");
        goto done;
    }
    if (h[jlen - 1] != '}') {
        s = mha__fail(MHA_ERR_FORMAT,
                      "header does not end with '}' (only spaces may pad it)");
        goto done;
    }
    /* every number in a valid header is a shape dim or an offset */
    s = mha__json_check(h, jlen, &(mha__json_rules){.what = "header", .object = true, .integers_only = true});
    if (s != MHA_OK) goto done;
    json = mha__alloc(jlen + 1);
    if (!json) {
        s = mha__nomem("out of memory copying the header");
        goto done;
    }
    memcpy(json, h, jlen);
    json[jlen] = '\0';
    root = cJSON_ParseWithOpts(json, NULL, 1);
    if (!root) { /* the text is valid (mha__json_check): one of cJSON's allocations failed */
        s = mha__fail(MHA_ERR_NOMEM,
                      "out of memory parsing the %zu-byte header (an allocation by cJSON failed)", jlen);
        goto done;
    }
    s = parse_json(st, root, len - st->data_start);

done:
    cJSON_Delete(root);
    mha__free(json);
    if (s != MHA_OK) {
        mha_st_free(st);
        return s;
    }
    *out = st;
    return MHA_OK;
}

mha_status mha_st_parse(const void *buf, size_t len, mha_st **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_parse: out is NULL");
    *out = NULL;
    if (!buf && len > 0) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_parse: buf is NULL");
    unsigned char *copy = mha__alloc(len ? len : 1);
    if (!copy) return mha__nomem("out of memory copying %zu bytes", len);
    if (len) memcpy(copy, buf, len);
    return parse_owned(copy, len, len, -1, out);
}

/* Opens a regular file for reading (a FIFO or device is refused, never
 * waited on); *size its length. */
static mha_status open_regular(const char *path, int *fd_out, size_t *size) {
    /* O_NONBLOCK: opening a FIFO must not hang; cleared once the file is
     * known to be a regular one */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return mha__fail(MHA_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return mha__fail(MHA_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    int fl = fcntl(fd, F_GETFL);
    if (!S_ISREG(sb.st_mode) || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        close(fd);
        return mha__fail(MHA_ERR_IO, "'%s' is not a regular file", path);
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > SIZE_MAX - 1) {
        close(fd);
        return mha__fail(MHA_ERR_IO, "'%s' is too large", path);
    }
    *fd_out = fd;
    *size = (size_t)sb.st_size;
    return MHA_OK;
}

/* pread of n bytes at off, all of them (ERR_IO otherwise). */
static mha_status read_at(int fd, void *dst, size_t n, size_t off) {
    unsigned char *p = dst;
    while (n > 0) {
        const ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return mha__fail(MHA_ERR_IO, "%s", got < 0 ? strerror(errno) : "the file is shorter than its header says");
        p += got, off += (size_t)got, n -= (size_t)got;
    }
    return MHA_OK;
}

mha_status mha_st_open(const char *path, mha_st **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_open: out is NULL");
    *out = NULL;
    if (!path) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_open: path is NULL");
    int fd;
    size_t size;
    mha_status s = open_regular(path, &fd, &size);
    if (s != MHA_OK) return s;
    /* the length prefix, then as much of the header as it announces (within
     * the limits the parser enforces) */
    unsigned char pre[8] = {0};
    const size_t n8 = size < 8 ? size : 8;
    if ((s = read_at(fd, pre, n8, 0)) != MHA_OK) {
        close(fd);
        return mha__fail(MHA_ERR_IO, "cannot read '%s'", path);
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | pre[i];
    size_t have = n8;
    if (size >= 8 && hlen > 0 && hlen <= ST_MAX_HEADER && hlen <= size - 8) have = 8 + (size_t)hlen;
    unsigned char *buf = mha__alloc(have);
    if (!buf) {
        close(fd);
        return mha__nomem("out of memory reading the header of '%s'", path);
    }
    memcpy(buf, pre, n8);
    if (have > 8 && (s = read_at(fd, buf + 8, have - 8, 8)) != MHA_OK) {
        mha__free(buf);
        close(fd);
        return mha__fail(MHA_ERR_IO, "cannot read '%s'", path);
    }
    s = parse_owned(buf, size, have, fd, out);
    if (s != MHA_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "%s", mha_last_error());
        return mha__fail(s, "%s: %s", path, detail);
    }
    return MHA_OK;
}

mha_status mha_st_read_file(const char *path, mha_st **out) {
    if (!out) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_read_file: out is NULL");
    *out = NULL;
    if (!path) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_read_file: path is NULL");
    int fd;
    size_t size;
    mha_status os = open_regular(path, &fd, &size);
    if (os != MHA_OK) return os;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return mha__fail(MHA_ERR_IO, "cannot open '%s': %s", path, strerror(e));
    }
    unsigned char *buf = mha__alloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return mha__nomem("out of memory reading '%s' (%zu bytes)", path,
                         size);
    }
    size_t got = size ? fread(buf, 1, size, f) : 0;
    int err = ferror(f);
    /* the file must not have grown or shrunk under us */
    int extra = (got == size) ? fgetc(f) : EOF;
    fclose(f);
    if (err || got != size || extra != EOF) {
        mha__free(buf);
        return mha__fail(MHA_ERR_IO, "cannot read '%s'%s", path,
                         err ? ": read error" : ": size changed while reading");
    }
    mha_status s = parse_owned(buf, size, size, -1, out);
    if (s != MHA_OK) {
        char detail[400];
        snprintf(detail, sizeof detail, "%s", mha_last_error());
        return mha__fail(s, "%s: %s", path, detail);
    }
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Access                                                                     */
/* ------------------------------------------------------------------------ */

size_t mha_st_count(const mha_st *st) { return st ? st->n : 0; }

static void fill_tensor(const mha_st *st, const st_entry *e, mha_st_tensor *out) {
    out->name = e->name;
    out->dtype = e->dtype;
    out->ndim = e->ndim;
    memset(out->shape, 0, sizeof out->shape);
    for (int d = 0; d < e->ndim; d++) out->shape[d] = e->shape[d];
    out->numel = e->numel;
    out->data = st->fd >= 0 ? NULL : st->buf + st->data_start + e->begin;
    out->nbytes = e->end - e->begin;
}

mha_status mha_st_get(const mha_st *st, size_t i, mha_st_tensor *out) {
    if (!st || !out) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_get: NULL argument");
    if (i >= st->n)
        return mha__fail(MHA_ERR_ARGUMENT, "tensor index %zu out of range (%zu tensors)",
                         i, st->n);
    fill_tensor(st, &st->entries[i], out);
    return MHA_OK;
}

static int cmp_find(const void *key, const void *elem) {
    const st_entry *const *e = elem;
    return strcmp(key, (*e)->name);
}

mha_status mha_st_find(const mha_st *st, const char *name, mha_st_tensor *out) {
    if (!st || !name || !out)
        return mha__fail(MHA_ERR_ARGUMENT, "mha_st_find: NULL argument");
    st_entry **hit = st->n ? bsearch(name, st->by_name, st->n, sizeof *st->by_name,
                                     cmp_find)
                           : NULL;
    if (!hit) return mha__fail(MHA_ERR_MISSING, "no tensor named '%s'", name);
    fill_tensor(st, *hit, out);
    return MHA_OK;
}

const char *mha_st_metadata(const mha_st *st, const char *key) {
    if (!st || !key) return NULL;
    for (size_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

size_t mha_st_metadata_count(const mha_st *st) { return st ? st->n_meta : 0; }

mha_status mha_st_metadata_get(const mha_st *st, size_t i, const char **key,
                               const char **value) {
    if (!st) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_metadata_get: st is NULL");
    if (i >= st->n_meta)
        return mha__fail(MHA_ERR_ARGUMENT,
                         "metadata index %zu out of range (%zu entries)", i, st->n_meta);
    if (key) *key = st->meta_keys[i];
    if (value) *value = st->meta_values[i];
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Conversion                                                                 */
/* ------------------------------------------------------------------------ */

/* The bit casts and the exact binary16 widening are kernels/half.h's
 * (shared with the 16-bit weights' kernels). */
/* n elements of a float dtype (element size es) at p, to float32. */
static void convert(mha_dtype dtype, size_t es, const unsigned char *p, float *out, size_t n) {
    for (size_t i = 0; i < n; i++, p += es) {
        switch (dtype) {
        case MHA_DTYPE_F32:
            out[i] = mha__f32_from_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                   (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
            break;
        case MHA_DTYPE_F64: {
            uint64_t u = 0;
            for (int k = 7; k >= 0; k--) u = (u << 8) | p[k];
            double d;
            memcpy(&d, &u, sizeof d);
            out[i] = (float)d; /* round to nearest; out of range -> inf, as torch */
            break;
        }
        case MHA_DTYPE_F16:
            out[i] = mha__f16_to_f32((uint16_t)(p[0] | p[1] << 8));
            break;
        default: /* BF16 */
            out[i] = mha__f32_from_bits(((uint32_t)p[0] | (uint32_t)p[1] << 8) << 16);
            break;
        }
    }
}

/* The element size of a dtype mha converts to float32, or 0 (detail set). */
static size_t float_dtype_size(const mha_st_tensor *t) {
    switch (t->dtype) {
    case MHA_DTYPE_F32: return 4;
    case MHA_DTYPE_F64: return 8;
    case MHA_DTYPE_F16:
    case MHA_DTYPE_BF16: return 2;
    default:
        mha__fail(MHA_ERR_DTYPE, "tensor '%s': cannot convert dtype %s to F32", t->name ? t->name : "",
                  mha_dtype_name(t->dtype) ? mha_dtype_name(t->dtype) : "?");
        return 0;
    }
}

mha_status mha_st_read_f32(const mha_st *st, const mha_st_tensor *t, float *out, size_t n) {
    if (!st || !t || (!out && n > 0)) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_read_f32: NULL argument");
    if (st->fd < 0) return mha_st_tensor_to_f32(t, out, n);
    if (n != t->numel)
        return mha__fail(MHA_ERR_ARGUMENT, "tensor '%s' has %zu elements, output holds %zu", t->name, t->numel, n);
    return mha_st_read_f32_part(st, t, 0, out, n);
}

mha_status mha_st_read_f32_part(const mha_st *st, const mha_st_tensor *t, size_t first, float *out, size_t n) {
    if (!st || !t || (!out && n > 0)) return mha__fail(MHA_ERR_ARGUMENT, "mha_st_read_f32_part: NULL argument");
    if (first > t->numel || n > t->numel - first)
        return mha__fail(MHA_ERR_ARGUMENT, "tensor '%s' has %zu elements: [%zu, %zu + %zu) is outside it", t->name,
                         t->numel, first, first, n);
    const size_t es = float_dtype_size(t);
    if (es == 0) return MHA_ERR_DTYPE;
    if (st->fd < 0) {
        if (!t->data || t->nbytes != t->numel * es)
            return mha__fail(MHA_ERR_ARGUMENT, "tensor '%s' is not one of this file's", t->name);
        convert(t->dtype, es, (const unsigned char *)t->data + first * es, out, n);
        return MHA_OK;
    }
    const st_entry *e = NULL;
    for (size_t i = 0; i < st->n && !e; i++)
        if (!strcmp(st->entries[i].name, t->name)) e = &st->entries[i];
    if (!e || e->end - e->begin != t->nbytes || t->nbytes != t->numel * es)
        return mha__fail(MHA_ERR_ARGUMENT, "tensor '%s' is not one of this file's", t->name);
    /* F32 (little-endian hosts) straight into out; others through a bounded buffer */
    const size_t off = st->data_start + e->begin + first * es;
    if (t->dtype == MHA_DTYPE_F32 && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__) {
        mha_status s = read_at(st->fd, out, n * es, off);
        return s == MHA_OK ? MHA_OK : mha__fail(s, "tensor '%s': %s", t->name, "cannot read its data");
    }
    const size_t chunk = (size_t)1 << 20; /* elements */
    unsigned char *tmp = mha__alloc((n < chunk ? n : chunk) * es + 1);
    if (!tmp) return mha__nomem("out of memory reading tensor '%s'", t->name);
    for (size_t i = 0; i < n; i += chunk) {
        const size_t m = n - i < chunk ? n - i : chunk;
        if (read_at(st->fd, tmp, m * es, off + i * es) != MHA_OK) {
            mha__free(tmp);
            return mha__fail(MHA_ERR_IO, "tensor '%s': cannot read its data", t->name);
        }
        convert(t->dtype, es, tmp, out + i, m);
    }
    mha__free(tmp);
    return MHA_OK;
}

mha_status mha_st_tensor_to_f32(const mha_st_tensor *t, float *out, size_t n) {
    if (!t || (!out && n > 0))
        return mha__fail(MHA_ERR_ARGUMENT, "mha_st_tensor_to_f32: NULL argument");
    if (n != t->numel)
        return mha__fail(MHA_ERR_ARGUMENT,
                         "tensor '%s' has %zu elements, output holds %zu",
                         t->name ? t->name : "", t->numel, n);
    const size_t es = float_dtype_size(t);
    if (es == 0) return MHA_ERR_DTYPE;
    size_t need;
    if (!mha__mul_size(n, es, &need) || need != t->nbytes || (!t->data && n > 0))
        return mha__fail(MHA_ERR_ARGUMENT, "tensor '%s': %zu bytes do not hold %zu %s",
                         t->name ? t->name : "", t->nbytes, n, mha_dtype_name(t->dtype));
    convert(t->dtype, es, t->data, out, n);
    return MHA_OK;
}

/* ------------------------------------------------------------------------ */
/* Writer                                                                     */
/* ------------------------------------------------------------------------ */

/* cJSON allocates through the process's malloc (or the hooks the user's
 * program gave it) and does not say what size failed. */
static mha_status cjson_nomem(const char *doing) {
    return mha__fail(MHA_ERR_NOMEM,
                     "out of memory %s the header (an allocation by cJSON failed; its size is "
                     "cJSON's to know)", doing);
}

static mha_status add_uint(cJSON *arr, uint64_t v) {
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    cJSON *it = cJSON_CreateRaw(num); /* exact digits, never "1e+15" */
    if (!it || !cJSON_AddItemToArray(arr, it)) {
        cJSON_Delete(it);
        return cjson_nomem("building");
    }
    return MHA_OK;
}

static mha_status add_obj(cJSON *obj, const char *key, cJSON *item) {
    if (!item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return cjson_nomem("building");
    }
    return MHA_OK;
}

static bool valid_utf8_str(const char *s) {
    size_t n = strlen(s);
    return utf8_check((const unsigned char *)s, n) == n;
}

static mha_status write_all(int fd, const void *p, size_t n, const char *tmp) {
    const unsigned char *c = p;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t w = write(fd, c, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            return mha__fail(MHA_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
        }
        if (w == 0) return mha__fail(MHA_ERR_IO, "cannot write '%s'", tmp);
        c += (size_t)w;
        n -= (size_t)w;
    }
    return MHA_OK;
}

/* ERR_ARGUMENT naming the first duplicate among n strings (what: "tensor
 * name", "metadata key"); sorts a copy of the pointers, O(n log n). */
static mha_status check_unique(const char *const *strs, size_t stride, size_t n,
                               const char *what) {
    if (n < 2) return MHA_OK;
    const char **v = mha__alloc(n * sizeof *v);
    if (!v) return mha__nomem("out of memory");
    for (size_t i = 0; i < n; i++) v[i] = strs[i * stride];
    qsort(v, n, sizeof *v, cmp_str);
    mha_status s = MHA_OK;
    for (size_t i = 1; i < n && s == MHA_OK; i++)
        if (strcmp(v[i - 1], v[i]) == 0) s = mha__fail(MHA_ERR_ARGUMENT, "duplicate %s '%s'", what, v[i]);
    mha__free(v);
    return s;
}

/* Checks the arguments and builds the JSON header; sizes[i] gets each
 * tensor's byte count. */
static mha_status build_header(const mha_st_entry *t, size_t n, const char *const *meta,
                               size_t n_meta, size_t *sizes, char **json_out) {
    *json_out = NULL;
    mha_status s = MHA_OK;
    cJSON *root = cJSON_CreateObject();
    if (!root) return cjson_nomem("building");

    if (n_meta > 0) {
        cJSON *m = cJSON_CreateObject();
        s = add_obj(root, "__metadata__", m);
        for (size_t i = 0; s == MHA_OK && i < n_meta; i++) {
            const char *k = meta[2 * i], *v = meta[2 * i + 1];
            if (!k || !v) {
                s = mha__fail(MHA_ERR_ARGUMENT, "metadata entry %zu has a NULL %s", i,
                              k ? "value" : "key");
                break;
            }
            if (!valid_utf8_str(k) || !valid_utf8_str(v)) {
                s = mha__fail(MHA_ERR_ARGUMENT, "metadata entry '%s' is not valid UTF-8",
                              valid_utf8_str(k) ? k : "?");
                break;
            }
            s = add_obj(m, k, cJSON_CreateString(v));
        }
        if (s == MHA_OK) s = check_unique(meta, 2, n_meta, "metadata key");
    }

    /* names first: non-empty, UTF-8, not reserved, unique */
    for (size_t i = 0; s == MHA_OK && i < n; i++) {
        const char *nm = t[i].name;
        if (!nm || !nm[0])
            s = mha__fail(MHA_ERR_ARGUMENT, "tensor %zu has no name", i);
        else if (strcmp(nm, "__metadata__") == 0 || !valid_utf8_str(nm))
            s = mha__fail(MHA_ERR_ARGUMENT, "tensor %zu: invalid name", i);
    }
    if (s == MHA_OK && n > 1) {
        const char **names = mha__alloc(n * sizeof *names);
        if (!names) {
            s = mha__nomem("out of memory");
        } else {
            for (size_t i = 0; i < n; i++) names[i] = t[i].name;
            s = check_unique(names, 1, n, "tensor name");
            mha__free(names);
        }
    }

    uint64_t off = 0;
    for (size_t i = 0; s == MHA_OK && i < n; i++) {
        const mha_st_entry *e = &t[i];
        if (!dtype_known(e->dtype)) {
            s = mha__fail(MHA_ERR_DTYPE, "tensor '%s': unknown dtype %d", e->name,
                          (int)e->dtype);
            break;
        }
        if (e->ndim < 0 || e->ndim > MHA_ST_MAX_DIMS || (e->ndim > 0 && !e->shape)) {
            s = mha__fail(MHA_ERR_ARGUMENT, "tensor '%s': ndim %d not in [0, %d]%s",
                          e->name, e->ndim, MHA_ST_MAX_DIMS,
                          (e->ndim > 0 && !e->shape) ? " or shape NULL" : "");
            break;
        }
        size_t numel = 1;
        for (int d = 0; d < e->ndim && s == MHA_OK; d++) {
            if (e->shape[d] < 0)
                s = mha__fail(MHA_ERR_ARGUMENT, "tensor '%s': shape[%d] = %" PRId64
                              " is negative", e->name, d, e->shape[d]);
            else if ((uint64_t)e->shape[d] >= ST_MAX_EXACT ||
                     (uint64_t)e->shape[d] > SIZE_MAX ||
                     !mha__mul_size(numel, (size_t)e->shape[d], &numel))
                s = mha__fail(MHA_ERR_OVERFLOW, "tensor '%s': shape too large", e->name);
        }
        if (s != MHA_OK) break;
        size_t nb;
        uint64_t end;
        if (!mha__mul_size(numel, dtype_table[e->dtype].size, &nb) ||
            __builtin_add_overflow(off, (uint64_t)nb, &end) || end >= ST_MAX_EXACT ||
            end > SIZE_MAX) {
            s = mha__fail(MHA_ERR_OVERFLOW, "tensor '%s': data size overflows", e->name);
            break;
        }
        if (nb > 0 && !e->data) {
            s = mha__fail(MHA_ERR_ARGUMENT, "tensor '%s': data is NULL", e->name);
            break;
        }
        sizes[i] = nb;
        cJSON *obj = cJSON_CreateObject();
        s = add_obj(root, e->name, obj);
        if (s != MHA_OK) break;
        s = add_obj(obj, "dtype", cJSON_CreateString(dtype_table[e->dtype].name));
        cJSON *shape = NULL, *offs = NULL;
        if (s == MHA_OK) {
            shape = cJSON_CreateArray();
            s = add_obj(obj, "shape", shape);
        }
        for (int d = 0; s == MHA_OK && d < e->ndim; d++)
            s = add_uint(shape, (uint64_t)e->shape[d]);
        if (s == MHA_OK) {
            offs = cJSON_CreateArray();
            s = add_obj(obj, "data_offsets", offs);
        }
        if (s == MHA_OK) s = add_uint(offs, off);
        if (s == MHA_OK) s = add_uint(offs, end);
        off = end;
    }
    if (s == MHA_OK) {
        *json_out = cJSON_PrintUnformatted(root);
        if (!*json_out) s = cjson_nomem("printing");
    }
    cJSON_Delete(root);
    return s;
}

mha_status mha_st_write_file(const char *path, const mha_st_entry *tensors, size_t n,
                             const char *const *meta, size_t n_meta) {
    if (!path || !path[0])
        return mha__fail(MHA_ERR_ARGUMENT, "mha_st_write_file: no path");
    if (n > 0 && !tensors)
        return mha__fail(MHA_ERR_ARGUMENT, "mha_st_write_file: tensors is NULL");
    if (n_meta > 0 && !meta)
        return mha__fail(MHA_ERR_ARGUMENT, "mha_st_write_file: meta is NULL");
    if (n > SIZE_MAX / sizeof(size_t) || n_meta > SIZE_MAX / 2)
        return mha__fail(MHA_ERR_OVERFLOW, "mha_st_write_file: too many entries");

    size_t *sizes = mha__alloc((n ? n : 1) * sizeof *sizes);
    if (!sizes) return mha__nomem("out of memory");
    char *json = NULL;
    mha_status s = build_header(tensors, n, meta, n_meta, sizes, &json);
    if (s != MHA_OK) {
        mha__free(sizes);
        return s;
    }
    size_t jlen = strlen(json);
    size_t hlen = (jlen + 7u) & ~(size_t)7u;
    if (hlen < jlen || hlen > ST_MAX_HEADER) {
        mha__free(sizes);
        cJSON_free(json);
        return mha__fail(MHA_ERR_OVERFLOW, "header of %zu bytes exceeds the limit", jlen);
    }
    unsigned char *head = mha__alloc(8 + hlen);
    if (!head) {
        mha__free(sizes);
        cJSON_free(json);
        return mha__nomem("out of memory");
    }
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(head + 8, json, jlen);
    memset(head + 8 + jlen, ' ', hlen - jlen);
    cJSON_free(json);

    /* temp file beside the target, then rename: a failure never leaves a
     * partial file at path */
    static atomic_uint counter;
    size_t plen = strlen(path);
    char *tmp = mha__alloc(plen + 64);
    int fd = -1;
    if (!tmp) {
        s = mha__nomem("out of memory");
        goto out;
    }
    for (int attempt = 0; attempt < 100; attempt++) {
        snprintf(tmp, plen + 64, "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&counter, 1u));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) break;
    }
    if (fd < 0) {
        s = mha__fail(MHA_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        goto out;
    }
    s = write_all(fd, head, 8 + hlen, tmp);
    for (size_t i = 0; s == MHA_OK && i < n; i++)
        if (sizes[i]) s = write_all(fd, tensors[i].data, sizes[i], tmp);
    if (s == MHA_OK && fsync(fd) != 0)
        s = mha__fail(MHA_ERR_IO, "cannot sync '%s': %s", tmp, strerror(errno));
    if (close(fd) != 0 && s == MHA_OK)
        s = mha__fail(MHA_ERR_IO, "cannot close '%s': %s", tmp, strerror(errno));
    fd = -1;
    if (s == MHA_OK && rename(tmp, path) != 0)
        s = mha__fail(MHA_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path,
                      strerror(errno));
    if (s != MHA_OK) unlink(tmp);

out:
    mha__free(tmp);
    mha__free(head);
    mha__free(sizes);
    return s;
}
