/* attention.h — multi-head causal attention over a packed QKV buffer: the
 * layer the modules call. Takes the kernel from the dispatch table, splits the
 * work over threads and draws dropout masks. */
#ifndef MHA_ATTENTION_H
#define MHA_ATTENTION_H

#include "kernels/kernels.h"

/* Dropout flavours at this layer. */
typedef enum {
    MHA_DROPOUT_OFF = 0,   /* eval mode, or p == 0 */
    MHA_DROPOUT_TORCH = 1, /* PyTorch-identical mask from a mha_generator */
    MHA_DROPOUT_PHILOX = 2 /* counter-based fast dropout */
} mha__dropout_kind;

/* Head h of batch b reads, for row t:
 *   q = qkv + (b*T + t)*ld_qkv + q_base + h*head_stride  (HD floats)
 *   k, v likewise with k_base, v_base,
 * and writes o + (b*T + t)*ldo + h*HD. */
typedef struct {
    int64_t B, T, H, HD;
    const float *qkv;
    int64_t ld_qkv, q_base, k_base, v_base, head_stride;
    float *o;
    int64_t ldo;
    float *lse;          /* (B, H, T) or NULL */
    float scale;
    bool causal;
    mha__dropout_kind dropout;
    double p;
    mha_generator *gen;  /* TORCH */
    bool heads_outer;    /* TORCH draw order: (H, B, T, T) (wrapper) instead of (B, H, T, T) */
    uint64_t philox_seed;
    uint64_t philox_offset; /* stream of head (b, h) = (offset << 32) + b*H + h */
    const mha__kernels *kernels; /* NULL: the active table; else these (tests, benchmarks) */
} mha__attention_desc;

/* Workspace bytes mha__attention_forward needs; 0 on overflow. */
size_t mha__attention_workspace(const mha__attention_desc *d);
/* ERR_WORKSPACE when ws_size is too small. */
mha_status mha__attention_forward(const mha__attention_desc *d, void *ws, size_t ws_size);

#endif
