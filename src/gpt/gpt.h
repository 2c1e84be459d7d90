/* gpt.h — the chapter 4 model object and its tape, shared by the gpt files:
 * gpt.c (parameters, the one forward, the KV cache, the tape's layout),
 * gpt_backward.c (the backward over a tape), loss.c (cross-entropy). */
#ifndef MHA_GPT_H
#define MHA_GPT_H

#include "mha.h"

#include "attention/attention.h"
#include "kernels/drivers.h"
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
    /* the four matrices as the forward reads them: the F32 ones above, or
     * (a 16-bit model, whose float pointers above are then NULL) their
     * bfloat16 / F16 copies */
    mha__wmat qkv, out, ff1, ff2;
} mha__gpt_block;

/* One state_dict tensor wherever the model holds it: what the 16-bit
 * loader and saver walk (an F32 model's are its parameters). */
typedef struct {
    char name[MHA_PARAM_NAME_MAX + 1];
    int ndim;
    int64_t s0, s1;   /* s1 0 for a vector */
    float *f;         /* F32 data, or NULL */
    uint16_t *h;      /* 16-bit data (the model's wdtype), or NULL */
    bool alias;       /* the tied out_head.weight: tok_emb's data */
} mha__gpt_tensor;

struct mha_gpt {
    mha_gpt_config cfg;
    int64_t E, H, HD, L, V, C;
    mha_params params;          /* every parameter; the views below point into its arena */
    float *tok_emb, *pos_emb;   /* (V, E), (C, E); GPTModel only */
    mha__gpt_block *blocks;     /* L */
    float *lnf_s, *lnf_b;       /* final_norm */
    float *head;                /* out_head.weight (V, E), or tok_emb when tied */
    bool tied;
    /* Inference in 16 bits (mha_gpt_load_as): every matrix (the embeddings,
     * the blocks' four, the head) bfloat16 or F16 in w16, the vectors
     * (biases, LayerNorms) F32 in params; the float pointers of the
     * matrices NULL. The forward reads the matrices through these: */
    mha_dtype wdtype;           /* MHA_DTYPE_F32, BF16 or F16 */
    uint16_t *w16;              /* the 16-bit matrices, state_dict order */
    size_t w16_count;
    const uint16_t *tok16, *pos16; /* 16-bit tok_emb, pos_emb */
    mha__wmat head_w;           /* out_head (tok_emb's when tied) */
    mha__gpt_tensor *tensors;   /* every state_dict tensor, in order */
    size_t n_tensors;
    /* run-time state */
    void *ws;                   /* activations, grown on demand */
    size_t ws_size;
    float *kv;                  /* KV cache: L x H x (C, 2 HD) rows [k | v] (batch 1) */
    float *kq;                  /* cache queries / context rows (C, E) */
    int64_t kv_len;             /* positions cached */
    int64_t kv_mapped;          /* positions whose cache pages were populated */
};

/* One block's activations. With a tape they are the tape's, each block its
 * own, kept for the backward; without one they are a pass's scratch,
 * shared by the blocks: x1 == x (the residual stream, updated in place),
 * h1 == h2, o and f NULL (the context written over Q, GELU's input not
 * kept), stats and abits NULL (the attention keeps nothing), kb1 == kb2. */
typedef struct {
    float *x;        /* (R, E) the block's input: norm1's */
    float *h1;       /* (R, E) norm1's output */
    float *qkv;      /* (R, 3E) */
    float *o;        /* (R, E) the attention's output, or NULL: over Q */
    float *x1;       /* (R, E) after the attention's residual: norm2's input */
    float *h2;       /* (R, E) norm2's output */
    float *f;        /* (R, 4E) ff.layers.0's output, GELU's input, or NULL */
    float *g;        /* (R, 4E) GELU's output */
    float *stats;    /* (B, H, T, 2) the attention rows' statistics, or NULL */
    uint64_t *abits; /* the attention's dropout mask (training), or NULL */
    uint64_t *kb1, *kb2; /* drop_shortcut's keep bits, (R E) bits each (training) */
} mha__gpt_acts;

struct mha_gpt_tape {
    const mha_gpt *m;   /* the model that recorded it; NULL: empty */
    uint64_t id;        /* its parameter set's (the guard against reuse) */
    bool model;         /* recorded by mha_gpt_forward_tape (else blocks only) */
    int64_t B, T;
    bool drop;          /* training mode with drop_rate > 0 */
    int32_t *idx;       /* (R) GPTModel */
    uint64_t *kb_emb;   /* drop_emb's keep bits (GPTModel, training) */
    float *out;         /* (R, E) after the last block (final_norm's input) */
    float *hf;          /* (R, E) final_norm's output (GPTModel) */
    float *logits;      /* (R, V) (GPTModel) */
    mha__gpt_acts *blk; /* L */
    size_t n_blk;
    /* scratch: forward and backward */
    float *t0, *t1, *t2, *t3; /* (R, E) each */
    float *t4;          /* (R, 4E) */
    void *att_ws;
    size_t att_ws_size;
    void *buf;          /* one allocation holding all of the above */
    size_t cap;
};

/* The attention layer's description for the blocks' forward and backward
 * over (B, T): heads of the packed qkv rows [q | k | v] (ld 3E), output
 * rows of E; with drop, PyTorch's dropout (gen: the forward's draws, NULL
 * in the backward). The buffers are the caller's to set. */
void mha__gpt_attention_desc(const mha_gpt *m, mha__attention_desc *d, int64_t B, int64_t T, bool drop,
                             mha_generator *gen);

/* v rounded to d's 16 bits (nearest even: torch's .to(torch.bfloat16) /
 * .half()) into *out; ERR_NONFINITE, naming tensor `name` and element i,
 * when it is beyond the format's range. */
mha_status mha__gpt_narrow(const char *name, size_t i, float v, mha_dtype d, uint16_t *out);

/* The checks every entry makes: B and T positive, T within the context,
 * B * T bounded. */
mha_status mha__gpt_check_tokens(const mha_gpt *m, int64_t B, int64_t T);
/* The GPTModel backward over a checked tape from dlogits (R, V), which may
 * be the tape's own logits buffer (the loss writes its gradient there). */
/* mha_gpt_forward_tape of windows [first, first + n) of a batch of `batch`
 * windows: every dropout site draws for the whole batch, these windows'
 * masks used (mha_gpt_loss_backward_share); logits [out] (n, T, V) or NULL. */
mha_status mha__gpt_forward_share(mha_gpt *m, float *logits, const int32_t *idx, int64_t n, int64_t T,
                                  int64_t first, int64_t batch, mha_generator *dropout_rng, mha_gpt_tape *tape);
mha_status mha__gpt_model_backward(mha_gpt *m, mha_gpt_tape *t, const float *dlogits);
/* MHA_ERR_NONFINITE naming what and the first bad element. */
mha_status mha__gpt_check_finite(const float *a, int64_t n, const char *what);

#endif
