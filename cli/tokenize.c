/* tokenize.c — mha tokenize: GPT-2's tokenizer on the command line (text to
 * ids and back), and where the CLI finds the tokenizer's files. */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "cli.h"
#include "mha.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef MHA_SOURCE_DATA_DIR
#define MHA_SOURCE_DATA_DIR ""
#endif
#ifndef MHA_INSTALL_DATA_DIR
#define MHA_INSTALL_DATA_DIR ""
#endif

/* ---- finding encoder.json and vocab.bpe ----------------------------------- */

static bool has_files(const char *dir) {
    size_t n = strlen(dir) + 16;
    char *p = cli_malloc(n);
    snprintf(p, n, "%s/encoder.json", dir);
    bool ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

static mha_tokenizer *load_from(const char *dir, const char *how) {
    mha_tokenizer *t = NULL;
    if (mha_tokenizer_load_dir(dir, &t) != MHA_OK) cli_die("%s: %s", how, mha_last_error());
    return t;
}

mha_tokenizer *cli_try_tokenizer(const char *vocab_dir) {
    const char *env = getenv("MHA_TOKENIZER_DIR");
    const char *dirs[4] = {vocab_dir, env && *env ? env : NULL, MHA_SOURCE_DATA_DIR, MHA_INSTALL_DATA_DIR};
    for (int i = 0; i < 4; i++) {
        mha_tokenizer *t = NULL;
        if (dirs[i] && *dirs[i] && has_files(dirs[i]) && mha_tokenizer_load_dir(dirs[i], &t) == MHA_OK) return t;
        if (dirs[i] && *dirs[i] && i < 2) return NULL; /* a directory the user named: no fallback */
    }
    return NULL;
}

mha_tokenizer *cli_load_tokenizer(const char *vocab_dir) {
    if (vocab_dir) return load_from(vocab_dir, "--vocab");
    const char *env = getenv("MHA_TOKENIZER_DIR");
    if (env && *env) return load_from(env, "MHA_TOKENIZER_DIR");
    const char *dirs[2] = {MHA_SOURCE_DATA_DIR, MHA_INSTALL_DATA_DIR};
    for (int i = 0; i < 2; i++)
        if (*dirs[i] && has_files(dirs[i])) return load_from(dirs[i], dirs[i]);
    cli_die("GPT-2's tokenizer files (encoder.json, vocab.bpe) not found: tried --vocab (not "
            "given), $MHA_TOKENIZER_DIR (not set), %s, %s",
            *dirs[0] ? dirs[0] : "(no source tree)", *dirs[1] ? dirs[1] : "(no install prefix)");
}

/* ---- input ------------------------------------------------------------------ */

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = cli_malloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, stdin);
        if (n < cap) break;
        cap *= 2;
        char *b = realloc(buf, cap);
        if (!b) cli_die("out of memory reading standard input (%zu bytes)", cap);
        buf = b;
    }
    if (ferror(stdin)) cli_die("tokenize: cannot read standard input");
    *len = n;
    return buf;
}

/* Up to 24 bytes of s for an error message: printable ASCII, else \xNN. */
static const char *shown(char *buf, size_t cap, const char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 6 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i == 24) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7F) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = '\0';
    return buf;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* "15496,11,314,716": ids separated by commas, blanks allowed around each
 * and around the whole, optionally in [ ] (mha tokenize --json's output).
 * Every item decimal digits only and < vocab; "" is no ids. */
static int32_t *parse_ids(const char *s, size_t len, int32_t vocab, size_t *n) {
    size_t a = 0, b = len;
    while (a < b && blank(s[a])) a++;
    while (b > a && blank(s[b - 1])) b--;
    if (a < b && s[a] == '[') {
        if (s[b - 1] != ']') cli_die("--decode: '[' without a closing ']'");
        a++;
        b--;
        while (a < b && blank(s[a])) a++;
        while (b > a && blank(s[b - 1])) b--;
    }
    *n = 0;
    if (a == b) return cli_malloc(sizeof(int32_t));
    size_t items = 1;
    for (size_t i = a; i < b; i++) items += s[i] == ',';
    int32_t *ids = cli_malloc(items * sizeof *ids);
    char sb[128];
    for (size_t k = 0, i = a; k < items; k++) {
        size_t e = i;
        while (e < b && s[e] != ',') e++;
        size_t x = i, y = e;
        while (x < y && blank(s[x])) x++;
        while (y > x && blank(s[y - 1])) y--;
        if (x == y) cli_die("--decode: item %zu of %zu is empty", k + 1, items);
        int64_t v = 0;
        for (size_t j = x; j < y; j++) {
            if (s[j] < '0' || s[j] > '9')
                cli_die("--decode: item %zu ('%s') is not a token id (digits only)", k + 1,
                        shown(sb, sizeof sb, s + x, y - x));
            if (v < 1000000000) v = v * 10 + (s[j] - '0');
        }
        if (v >= vocab)
            cli_die("--decode: item %zu ('%s') is out of range [0, %d]", k + 1,
                    shown(sb, sizeof sb, s + x, y - x), (int)vocab - 1);
        ids[k] = (int32_t)v;
        i = e + 1;
    }
    *n = items;
    return ids;
}

/* ---- output ----------------------------------------------------------------- */

/* How put_cp writes a code point: as JSON string content, as UTF-8, or as
 * UTF-8 with newlines as spaces (the book's compact sample print). */
enum { PUT_JSON, PUT_PLAIN, PUT_NL_SPACE };

static void put_cp(FILE *f, uint32_t cp, int mode) {
    char u[4];
    if (mode == PUT_NL_SPACE && cp == '\n') cp = ' ';
    if (mode == PUT_JSON && (cp < 0x20 || cp == '"' || cp == '\\')) {
        if (cp == '"') fputs("\\\"", f);
        else if (cp == '\\') fputs("\\\\", f);
        else if (cp == '\n') fputs("\\n", f);
        else if (cp == '\r') fputs("\\r", f);
        else if (cp == '\t') fputs("\\t", f);
        else if (cp == '\b') fputs("\\b", f);
        else if (cp == '\f') fputs("\\f", f);
        else fprintf(f, "\\u%04x", (unsigned)cp);
        return;
    }
    if (cp < 0x80) fputc((int)cp, f);
    else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        fwrite(u, 1, 2, f);
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        fwrite(u, 1, 3, f);
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        fwrite(u, 1, 4, f);
    }
}

/* The bytes read as the WHATWG Encoding standard's UTF-8 decoder reads them
 * (JavaScript's TextDecoder, which gpt-3-encoder's decode() uses, and
 * Python's bytes.decode(errors="replace"), tiktoken's): each maximal
 * ill-formed subsequence becomes one U+FFFD. */
static void put_decoded(FILE *f, const unsigned char *s, size_t len, int mode) {
    uint32_t cp = 0;
    unsigned needed = 0, seen = 0, lower = 0x80, upper = 0xBF;
    for (size_t i = 0; i < len; i++) {
        unsigned b = s[i];
        if (needed == 0) {
            if (b < 0x80) {
                put_cp(f, b, mode);
            } else if (b >= 0xC2 && b <= 0xDF) {
                needed = 1;
                cp = b & 0x1F;
            } else if (b >= 0xE0 && b <= 0xEF) {
                if (b == 0xE0) lower = 0xA0;
                if (b == 0xED) upper = 0x9F;
                needed = 2;
                cp = b & 0xF;
            } else if (b >= 0xF0 && b <= 0xF4) {
                if (b == 0xF0) lower = 0x90;
                if (b == 0xF4) upper = 0x8F;
                needed = 3;
                cp = b & 0x7;
            } else {
                put_cp(f, 0xFFFD, mode);
            }
            continue;
        }
        if (b < lower || b > upper) {
            cp = 0;
            needed = seen = 0;
            lower = 0x80;
            upper = 0xBF;
            put_cp(f, 0xFFFD, mode);
            i--; /* the byte starts afresh */
            continue;
        }
        lower = 0x80;
        upper = 0xBF;
        cp = (cp << 6) | (b & 0x3F);
        if (++seen == needed) {
            put_cp(f, cp, mode);
            cp = 0;
            needed = seen = 0;
        }
    }
    if (needed) put_cp(f, 0xFFFD, mode);
}

void cli_put_json_text(FILE *f, const unsigned char *s, size_t len) {
    cli_put_json_string(f, s, len);
    fputc('\n', f);
}

void cli_put_json_string(FILE *f, const unsigned char *s, size_t len) {
    fputc('"', f);
    put_decoded(f, s, len, PUT_JSON);
    fputc('"', f);
}

void cli_put_text(FILE *f, const unsigned char *s, size_t len, bool newline_as_space) {
    put_decoded(f, s, len, newline_as_space ? PUT_NL_SPACE : PUT_PLAIN);
}

/* ---- the command -------------------------------------------------------------- */

static const char tokenize_usage[] =
    "usage: mha tokenize [--vocab DIR] [--json] TEXT|-\n"
    "       mha tokenize --decode [--vocab DIR] [--json] [-n] IDS|-\n\n"
    "GPT-2's tokenizer (byte-level BPE; the ids of the npm package gpt-3-encoder).\n"
    "TEXT (UTF-8) becomes its token ids, printed comma-separated on one line\n"
    "(\"Hello, I am\" -> 15496,11,314,716); with --decode, IDS (\"15496,11\", blanks\n"
    "allowed around items, or a JSON array) becomes the text: its bytes exactly,\n"
    "then a newline unless -n. '-' reads TEXT or IDS from standard input, every\n"
    "byte of it (a final newline is text too); use -- before a TEXT that begins\n"
    "with '-'.\n\n"
    "  --vocab DIR  encoder.json and vocab.bpe from DIR; otherwise from\n"
    "               $MHA_TOKENIZER_DIR, else the source tree's data/gpt2, else\n"
    "               the install prefix's share/mha/gpt2\n"
    "  --json       ids as a JSON array; decoded text as a JSON string (bytes that\n"
    "               are not UTF-8 become U+FFFD, as gpt-3-encoder's decode() does)\n"
    "  --decode     ids to text\n"
    "  -n           no newline after the decoded text\n";

int mha_cli_tokenize(int argc, char **argv) {
    const char *vocab = NULL, *input = NULL;
    bool json = false, decode = false, newline = true, options = true;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (options && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            fputs(tokenize_usage, stdout);
            return 0;
        }
        if (options && strcmp(a, "--") == 0) {
            options = false;
        } else if (options && strcmp(a, "--vocab") == 0) {
            if (i + 1 >= argc) cli_die("--vocab needs a directory");
            vocab = argv[++i];
        } else if (options && strcmp(a, "--json") == 0) {
            json = true;
        } else if (options && strcmp(a, "--decode") == 0) {
            decode = true;
        } else if (options && strcmp(a, "-n") == 0) {
            newline = false;
        } else if (options && a[0] == '-' && a[1] != '\0') {
            cli_die("tokenize: unknown option '%s' (see mha tokenize --help)", a);
        } else {
            if (input) cli_die("tokenize: more than one %s given (quote it, or use -)",
                               decode ? "id list" : "text");
            input = a;
        }
    }
    if (!input) cli_die("tokenize: no %s given (see mha tokenize --help)", decode ? "ids" : "text");
    if (!newline && !decode) cli_die("tokenize: -n goes with --decode");

    size_t len;
    char *owned = NULL;
    const char *data = input;
    if (strcmp(input, "-") == 0) {
        owned = read_stdin(&len);
        data = owned;
    } else {
        len = strlen(input);
    }
    mha_tokenizer *tok = cli_load_tokenizer(vocab);

    if (decode) {
        size_t n, need = 0;
        int32_t *ids = parse_ids(data, len, mha_tokenizer_vocab_size(tok), &n);
        mha_status st = mha_tokenizer_decode(tok, ids, n, NULL, 0, &need);
        if (st != MHA_OK && st != MHA_ERR_WORKSPACE) cli_check(st, "tokenize --decode");
        char *text = cli_malloc(need + 1);
        cli_check(mha_tokenizer_decode(tok, ids, n, text, need + 1, &need), "tokenize --decode");
        if (json) {
            cli_put_json_text(stdout, (const unsigned char *)text, need);
        } else {
            fwrite(text, 1, need, stdout);
            if (newline) fputc('\n', stdout);
        }
        free(text);
        free(ids);
    } else {
        /* At most one id per byte. */
        int32_t *ids = cli_malloc((len ? len : 1) * sizeof *ids);
        size_t n = 0;
        mha_status st = mha_tokenizer_encode(tok, data, len, ids, len, &n);
        if (st != MHA_OK) {
            const char *d = mha_last_error();
            cli_die("tokenize: %s", strncmp(d, "encode: ", 8) == 0 ? d + 8 : d);
        }
        if (json) fputc('[', stdout);
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", (int)ids[i]);
        fputs(json ? "]\n" : "\n", stdout);
        free(ids);
    }
    mha_tokenizer_free(tok);
    free(owned);
    if (fflush(stdout) != 0 || ferror(stdout)) cli_die("tokenize: cannot write standard output");
    return 0;
}
