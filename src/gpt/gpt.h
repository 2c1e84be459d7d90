/* gpt.h — the chapter 4 model object, shared by the gpt files. */
#ifndef MHA_GPT_H
#define MHA_GPT_H

#include "mha.h"

#include "params/params.h"

#include <stdbool.h>

/* One TransformerBlock's parameters, pointing into the model's arena. The
 * attention's are laid out as MultiHeadAttention's (modules.h): W_qkv
 * (3E, E) = [W_query; W_key; W_value], b_qkv (3E) or NULL. */
typedef struct {
    float *w_qkv, *b_qkv; /* att */
    float *w_out, *b_out; /* att.out_proj (E, E), (E) */
    float *w1, *b1;       /* ff.layers.0 (4E, E), (4E) */
    float *w2, *b2;       /* ff.layers.2 (E, 4E), (E) */
    float *ln1_s, *ln1_b; /* norm1.scale, norm1.shift (E) */
    float *ln2_s, *ln2_b; /* norm2 */
} mha__gpt_block;

struct mha_gpt {
    mha_gpt_config cfg;
    int64_t E, H, HD, L, V, C;
    mha_params params;          /* every parameter; the views below point into its arena */
    float *tok_emb, *pos_emb;   /* (V, E), (C, E); GPTModel only */
    mha__gpt_block *blocks;     /* L */
    float *lnf_s, *lnf_b;       /* final_norm */
    float *head;                /* out_head.weight (V, E), or tok_emb when tied */
    bool tied;
    /* run-time state */
    void *ws;                   /* activations, grown on demand */
    size_t ws_size;
    float *kv;                  /* KV cache: L x (C, 2E) rows [k | v] (batch 1) */
    float *kq;                  /* cache queries / context rows (C, E) */
    int64_t kv_len;             /* positions cached */
};

#endif
