/* fuzz_safetensors.c — libFuzzer target for the safetensors reader and the
 * module loader. Built with the ordinary compiler too, where fuzz/replay.c
 * drives it over the corpus under ctest.
 *
 * Every input is parsed; a file that parses is walked completely (tensors,
 * find by name, metadata), its float tensors are converted, and it is handed
 * to mha_module_from_st. Nothing may crash, leak or read out of bounds. */
#include "mha.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mha_st *st = NULL;
    if (mha_st_parse(data, size, &st) != MHA_OK) return 0;
    volatile unsigned sink = 0;
    size_t n = mha_st_count(st);
    for (size_t i = 0; i < n; i++) {
        mha_st_tensor t, u;
        if (mha_st_get(st, i, &t) != MHA_OK) abort();
        if (mha_st_find(st, t.name, &u) != MHA_OK || u.data != t.data ||
            u.nbytes != t.nbytes)
            abort();
        if (mha_dtype_name(t.dtype) == NULL) abort();
        if (t.nbytes != t.numel * mha_dtype_size(t.dtype)) abort();
        const unsigned char *p = t.data;
        for (size_t k = 0; k < t.nbytes; k++) sink += p[k]; /* every byte readable */
        if (t.dtype == MHA_DTYPE_F32 || t.dtype == MHA_DTYPE_F16 ||
            t.dtype == MHA_DTYPE_BF16 || t.dtype == MHA_DTYPE_F64) {
            if (t.numel > ((size_t)1 << 24)) continue;
            float *f = malloc(t.numel ? t.numel * sizeof(float) : 1);
            if (!f) continue;
            if (mha_st_tensor_to_f32(&t, f, t.numel) != MHA_OK) abort();
            for (size_t k = 0; k < t.numel; k++) sink += f[k] != f[k];
            free(f);
        }
    }
    size_t nm = mha_st_metadata_count(st);
    for (size_t i = 0; i < nm; i++) {
        const char *k = NULL, *v = NULL;
        if (mha_st_metadata_get(st, i, &k, &v) != MHA_OK) abort();
        const char *w = mha_st_metadata(st, k);
        if (!w || strcmp(w, v) != 0) abort();
    }
    mha_module *m = NULL;
    if (mha_module_from_st(st, &m) == MHA_OK) {
        if (mha_module_check_finite(m) != MHA_OK) abort();
        mha_module_free(m);
    } else if (m != NULL) {
        abort();
    }
    mha_st_free(st);
    (void)sink;
    return 0;
}
