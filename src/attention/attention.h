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
    float *stats;        /* (B, H, T, 2) (m, log l) per row (kernels.h), or NULL;
                            the backward's input */
    float scale;
    bool causal;
    mha__dropout_kind dropout;
    double p;
    mha_generator *gen;  /* TORCH */
    bool heads_outer;    /* TORCH draw order: (H, B, T, T) (wrapper) instead of (B, H, T, T) */
    uint64_t philox_seed;
    uint64_t philox_offset; /* stream of head (b, h) = (offset << 32) + (b_begin + b)*H + h */
    /* The desc's batch element 0 is element b_begin of the batch the Philox
     * streams were numbered for (a backward run over a batch slice). */
    int64_t b_begin;
    const mha__kernels *kernels; /* NULL: the active table; else these (tests, benchmarks) */
    /* TORCH: where the mask bits live, B*H*T*ceil(T/64) words (keep_words),
     * head (b, h) at (b*H + h)*T*ceil(T/64). NULL: the forward draws them into
     * its workspace (or, with the reference kernels, while it computes).
     * Given: the forward draws into it (whatever the kernels) and the
     * backward replays it. */
    uint64_t *keep_bits;
    /* Backward: delta = rowsum(dO * O) per row, (B, H, T), when the caller
     * has it (then o is not read: dO may have been written over it); NULL:
     * the backward computes it from o. */
    const float *delta;
    /* Forward, for a KV cache: Q rows from q_rows instead of qkv (row t of
     * batch b at q_rows + (b*T + t)*ld_q_rows, head h at column h*HD), and
     * only the query rows [t_begin, T) computed (keys [0, T) as usual). A
     * row's result does not depend on t_begin (the kernels' rows are
     * independent), so feeding tokens through a cache gives the same bits as
     * one forward over the whole sequence. */
    const float *q_rows;
    int64_t ld_q_rows;
    int64_t t_begin;
} mha__attention_desc;

/* A description of B x H heads of (T, HD) with nothing else set: the
 * scale PyTorch's 1 / sqrt(head_dim) (multiplying by the float reciprocal
 * differs from its division by at most one rounding of the scores), no
 * mask, no dropout, no buffers (the caller sets the layout and buffers). */
void mha__attention_desc_init(mha__attention_desc *d, int64_t B, int64_t T, int64_t H, int64_t HD);

/* Workspace bytes mha__attention_forward needs for d's shape and layout
 * (with a packed QKV buffer's strides and T >= 512, each thread's copy of
 * a head's K and V rows: attention.c); 0 on overflow. */
size_t mha__attention_workspace(const mha__attention_desc *d);
/* ERR_WORKSPACE when ws_size is too small. */
mha_status mha__attention_forward(const mha__attention_desc *d, void *ws, size_t ws_size);

/* The backward's delta = rowsum(dO * O) per head (the kernel "dot_rows":
 * in double over the head's HD columns, rounded once) of the n rows r0 ..
 * r0 + n - 1 of a (B * T)-row batch, every head: delta[(b * H + h) * T + t]
 * for row b * T + t. dout and o point at row r0 (strides ld_dout, ldo),
 * head h at column h * HD. One thread: for a caller that splits rows. */
void mha__attention_delta_rows(float *delta, int64_t T, int64_t H, int64_t HD, int64_t r0, int64_t n,
                               const float *dout, int64_t ld_dout, const float *o, int64_t ldo);

/* 64-bit words of TORCH mask bits for every head; 0 on overflow. */
size_t mha__attention_keep_words(const mha__attention_desc *d);

/* The backward of mha__attention_forward with the same desc (d->o: the
 * forward's output O; d->stats: its row statistics, required; TORCH: d->keep_bits,
 * required). dout (B*T rows, stride ld_dout, head h at column h*HD, as o)
 * is dO. Writes dqkv, laid out as qkv (stride ld_qkv): its Q, K and V
 * columns of every head (other columns untouched).
 * Work is split into (batch, head, key chunk) tasks, the chunks fixed by the
 * shape; each chunk's dQ is summed in chunk order, so the result does not
 * depend on the thread count. */
size_t mha__attention_backward_workspace(const mha__attention_desc *d);
mha_status mha__attention_backward(const mha__attention_desc *d, const float *dout,
                                   int64_t ld_dout, float *dqkv, void *ws, size_t ws_size);

#endif
