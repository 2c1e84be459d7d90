/* fuzz_gpt_names.c — libFuzzer target for loading a chapter 4 model from a
 * safetensors buffer (mha_gpt_from_st): the book's names (GPTModel,
 * TransformerBlock, ... with the configuration in __metadata__) and Hugging
 * Face's GPT-2 names (with or without the "transformer." prefix, a tied or
 * separate lm_head, Conv1D weights transposed), shape checks, dtype
 * conversion and the mask buffers that are skipped. The seeds
 * (fuzz/make_corpus.py) are tiny models, so a run stays fast. A model that
 * loads must be complete: its configuration consistent and its parameters
 * finite. */
#include "mha.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mha_st *st = NULL;
    if (mha_st_parse(data, size, &st) != MHA_OK) return 0;
    mha_gpt *m = NULL;
    const mha_status s = mha_gpt_from_st(st, &m);
    if (s == MHA_ERR_NOMEM) abort(); /* tiny inputs: nothing large to allocate */
    if (s == MHA_OK) {
        const mha_gpt_config *c = mha_gpt_config_of(m);
        if (!c || c->emb_dim < 1 || c->n_heads < 1 || c->emb_dim % c->n_heads) abort();
        size_t n = mha_params_count(mha_gpt_params(m));
        for (size_t i = 0; i < n; i++) {
            mha_param p;
            if (mha_params_get(mha_gpt_params(m), i, &p) != MHA_OK) abort();
            for (size_t k = 0; k < p.numel; k++)
                if (!isfinite(p.data[k])) abort();
        }
        mha_gpt_free(m);
    } else if (m != NULL) {
        abort();
    }
    mha_st_free(st);
    return 0;
}
