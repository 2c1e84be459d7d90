/* modules.h — the module object, shared by the module files. */
#ifndef MHA_MODULES_H
#define MHA_MODULES_H

#include "mha.h"

#include "attention/attention.h"
#include "params/params.h"

struct mha_module {
    mha_config cfg;
    int64_t H;     /* heads: num_heads for the wrapper and MultiHeadAttention, else 1 */
    int64_t HD;    /* head dim */
    int64_t W;     /* width of Q (and K, V, the context): H * HD */
    int64_t P;     /* row width of the packed projection output: 3 * W */
    mha_params params; /* every parameter, its arena in the layout below */
    /* Stacked projection weights, rows in the order of the qkv columns:
     *   v1:           W_query, W_key, W_value, each (D_in, D_out) as PyTorch
     *   v2, Causal:   [q; k; v] each (D_out, D_in)   -> (3*D_out, D_in)
     *   wrapper:      per head [q; k; v]              -> (3*H*D_out, D_in)
     *   MHA:          [q; k; v] each (D_out, D_in)    -> (3*D_out, D_in)  */
    float *w_qkv;
    float *b_qkv;  /* (P) in the same order, or NULL without qkv_bias */
    float *w_out;  /* MHA: out_proj.weight (D_out, D_out) */
    float *b_out;  /* MHA: out_proj.bias (D_out) */
    void *ws;      /* module-owned workspace (grown on demand) */
    size_t ws_size;
};

/* Column offsets of head h's q, k and v inside a packed qkv row, and the
 * stride between heads. */
void mha__module_qkv_layout(const mha_module *m, int64_t *q_base, int64_t *k_base,
                            int64_t *v_base, int64_t *head_stride);

/* The index of the first non-finite value of x[0, n), or n: a vectorised
 * scan over blocks on the runtime's threads (inputs are read on every
 * call; a serial scalar scan was ~0.5% of a forward). */
int64_t mha__module_first_nonfinite(const float *x, int64_t n);

/* Shape/finiteness checks shared by forward and traced forward. */
mha_status mha__module_check_input(const mha_module *m, const float *x, int64_t B, int64_t T);

/* qkv (B*T, P) = x W_qkv^T + b_qkv (x @ W for v1). MHA_ERR_NOMEM when the
 * GEMM backend runs out of memory. */
MHA_NODISCARD mha_status mha__module_project(const mha_module *m, float *qkv, const float *x,
                                             int64_t B, int64_t T);

/* The attention layer's description for a forward of (B, T) under opts
 * (NULL: eval); the buffers (qkv, o, lse, keep_bits) are the caller's to set. */
void mha__module_attention_desc(const mha_module *m, mha__attention_desc *d, int64_t B,
                                int64_t T, const mha_forward_opts *o);

/* The argument checks of every forward (NULLs, shapes, finiteness, opts). */
mha_status mha__module_check_forward(const mha_module *m, const float *y, const float *x,
                                    int64_t B, int64_t T, const mha_forward_opts *opts);

/* *workspace (*workspace_size bytes) when given, checked against need
 * (ERR_WORKSPACE, naming what); else the module's own, grown to need. */
mha_status mha__module_workspace(mha_module *m, size_t need, void **workspace,
                                 size_t *workspace_size, const char *what);

/* MultiHeadAttention's out_proj: y (rows, D_out) = ctx W_out^T + b_out
 * (MHA_ERR_NOMEM as above). */
MHA_NODISCARD mha_status mha__module_out_proj(const mha_module *m, float *y, const float *ctx,
                                              int64_t ld_ctx, int64_t rows);

#endif
