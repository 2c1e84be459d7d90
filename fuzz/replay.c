/* replay.c — runs the fuzz target over files, for ctest and for debugging
 * without libFuzzer: fuzz_replay DIR_OR_FILE... Prints how many inputs ran;
 * exits non-zero only when an input cannot be read (a crash aborts). */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPLAY_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define REPLAY_ASAN 1
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n == cap) {
            unsigned char *b = realloc(buf, cap * 2);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f) || !buf;
    fclose(f);
    if (err) {
        free(buf);
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    /* an exact-size copy, so ASan sees reads past the end */
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Returns the number of inputs run, -1 on a read error. */
static long run_path(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fprintf(stderr, "cannot stat %s\n", path);
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) return run_file(path);
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "cannot open directory %s\n", path);
        return -1;
    }
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (nn == cap) {
            cap = cap ? cap * 2 : 64;
            char **nb = realloc(names, cap * sizeof *names);
            if (!nb) break;
            names = nb;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[nn] = malloc(len);
        if (!names[nn]) break;
        snprintf(names[nn], len, "%s/%s", path, e->d_name);
        nn++;
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp); /* a stable order for reproducibility */
    long total = 0;
    int bad = 0;
    for (size_t i = 0; i < nn; i++) {
        long r = run_path(names[i]);
        if (r < 0) bad = 1;
        else total += r;
        free(names[i]);
    }
    free(names);
    return bad ? -1 : total;
}

int main(int argc, char **argv) {
#ifndef REPLAY_ASAN
    /* As libFuzzer's malloc limit does: a loader that allocates what a few
     * bytes ask for instead of what the file holds fails here (ERR_NOMEM,
     * which the targets reject) rather than passing on overcommitted
     * memory. (ASan reserves terabytes of address space: not there.) */
    const struct rlimit lim = {(rlim_t)4 << 30, (rlim_t)4 << 30};
    if (setrlimit(RLIMIT_AS, &lim) != 0) perror("setrlimit");
#endif
    long total = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        long r = run_path(argv[i]);
        if (r < 0) bad = 1;
        else total += r;
    }
    printf("replayed %ld inputs\n", total);
    if (argc < 2) fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return bad || argc < 2 ? 1 : 0;
}
