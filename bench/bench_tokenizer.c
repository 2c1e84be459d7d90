/* bench_tokenizer.c — GPT-2's tokenizer: load time, encode and decode
 * throughput, one thread.
 *
 *   bench_tokenizer [--reps N] [FILE...]
 *
 * Encodes the files (default: the repository's README.md, the docs and
 * some of its C sources: English and C) as one text, and
 * prints MB/s for encode and decode, the minimum time over the repetitions
 * (the machine may be shared). Files that are not valid UTF-8 are refused
 * by the encoder and reported. */
#include "mha.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MHA_SOURCE_DIR
#define MHA_SOURCE_DIR "."
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int append_file(const char *path, char **buf, size_t *len, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    for (;;) {
        if (*cap - *len < 65536) {
            *cap = *cap * 2 + 65536;
            *buf = realloc(*buf, *cap);
            if (!*buf) exit(1);
        }
        size_t got = fread(*buf + *len, 1, *cap - *len, f);
        *len += got;
        if (got == 0) break;
    }
    fclose(f);
    return 1;
}

int main(int argc, char **argv) {
    int reps = 5;
    char *text = NULL;
    size_t len = 0, cap = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
            if (reps < 1) reps = 1;
        } else if (append_file(argv[i], &text, &len, &cap)) {
            files++;
        } else {
            fprintf(stderr, "bench_tokenizer: cannot read %s\n", argv[i]);
            return 1;
        }
    }
    if (files == 0) {
        static const char *const defaults[] = {
            "README.md", "docs/performance.md", "docs/torch-generator.md", "docs/dropout.md",
            "docs/book-reference.md", "tests/README.md", "include/mha.h",
            "src/modules/modules.c", "src/modules/backward.c", "src/io/safetensors.c",
            "src/train/optim.c", "src/generator/generator.c", "src/kernels/attn_fwd_body.h",
            "src/tokenizer/bpe.c", "cli/mha.c", "cli/bench.c", "cli/train.c",
        };
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", MHA_SOURCE_DIR, defaults[i]);
            files += (size_t)append_file(path, &text, &len, &cap);
        }
    }

    double t0 = now_s();
    mha_tokenizer *tok = NULL;
    if (mha_tokenizer_load_dir(MHA_SOURCE_DIR "/data/gpt2", &tok) != MHA_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", mha_last_error());
        return 1;
    }
    double load_ms = (now_s() - t0) * 1e3;

    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    char *back = malloc(len + 1);
    size_t n = 0, blen = 0;
    double enc = 1e30, dec = 1e30;
    for (int r = 0; r < reps; r++) {
        t0 = now_s();
        if (mha_tokenizer_encode(tok, text, len, ids, len, &n) != MHA_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", mha_last_error());
            return 1;
        }
        double t1 = now_s();
        if (mha_tokenizer_decode(tok, ids, n, back, len + 1, &blen) != MHA_OK) return 1;
        double t2 = now_s();
        if (t1 - t0 < enc) enc = t1 - t0;
        if (t2 - t1 < dec) dec = t2 - t1;
    }
    int same = blen == len && memcmp(back, text, len) == 0;
    printf("text: %zu files, %zu bytes, %zu tokens (%.2f bytes/token)\n", files, len, n,
           n ? (double)len / (double)n : 0.0);
    printf("load: %.1f ms (encoder.json + vocab.bpe, %d tokens)\n", load_ms,
           (int)mha_tokenizer_vocab_size(tok));
    printf("encode: %.1f ms, %.2f MB/s, %.0f tokens/s (min of %d)\n", enc * 1e3,
           (double)len / enc / 1e6, (double)n / enc, reps);
    printf("decode: %.2f ms, %.0f MB/s; round trip %s\n", dec * 1e3, (double)len / dec / 1e6,
           same ? "exact" : "DIFFERS");
    free(ids);
    free(back);
    free(text);
    mha_tokenizer_free(tok);
    return same ? 0 : 1;
}
