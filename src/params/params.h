/* params.h — a parameter set: the named tensors of a module or a model
 * (PyTorch's state_dict()), views into one arena of floats, with one
 * gradient arena laid out as it. The five modules, the GPT and the
 * optimizers share it (llm.c's params_memory / grads_memory). */
#ifndef MHA_PARAMS_H
#define MHA_PARAMS_H

#include "mha.h"

#include "common/common.h"

#include <stdbool.h>

struct mha_params {
    uint64_t id;          /* unique for the process's life (never 0): what a tape records */
    const char *owner;    /* the owner's class name: an optimizer file's "module" */
    float *arena;         /* every parameter's floats, in the owner's layout */
    size_t floats;        /* the arena's size: the scalars, each counted once */
    float *grad;          /* the gradients, laid out as arena (NULL until first needed) */
    mha_param *p;         /* state_dict() order */
    bool *alias;          /* p[i]'s data is an earlier parameter's (a tied head) */
    size_t n, cap;
    char *names;          /* the names, packed */
    size_t names_used, names_cap;
};

/* The longest name (prefix + name) a set takes. */
#define MHA_PARAM_NAME_MAX 63

/* An empty set of `floats` zeroed floats with room for cap parameters, and a
 * fresh id. On failure (ERR_NOMEM recorded) ps holds nothing to free. */
mha_status mha__params_init(mha_params *ps, const char *owner, size_t floats, size_t cap);
/* Frees what the set holds (ps itself is its owner's); a zeroed set is fine. */
void mha__params_free(mha_params *ps);

/* Registers the next parameter, prefix + name, a view of ndim 1 (s0) or 2
 * (s0, s1) at data inside the arena. */
void mha__params_add(mha_params *ps, const char *prefix, const char *name, float *data, int ndim,
                     int64_t s0, int64_t s1);
/* Registers name as another name of parameter `of` (same data and shape):
 * listed where state_dict() lists it, saved under it, but updated and
 * counted once (a GPT's tied out_head.weight is tok_emb.weight). */
void mha__params_add_alias(mha_params *ps, const char *name, size_t of);

/* The gradient arena, allocated zeroed on first use; NULL (ERR_NOMEM
 * recorded) when it cannot be. */
float *mha__params_grad(mha_params *ps);
/* The gradient of parameter data p (a pointer into the arena; NULL gives
 * NULL), once mha__params_grad has succeeded. */
static inline float *mha__grad_of(const mha_params *ps, const float *p) {
    return p ? ps->grad + (p - ps->arena) : NULL;
}

/* The guard of a tape recorded for set ps: id is what the tape recorded
 * (ps->id at the forward, 0 when it holds none). ERR_ARGUMENT naming which
 * when it holds no forward or another set's. */
mha_status mha__params_check_tape(const mha_params *ps, uint64_t id);

/* ERR_NONFINITE naming the parameter and element when one holds NaN or
 * infinity. */
mha_status mha__params_check_finite(const mha_params *ps);

/* ---- files (params_io.c) ------------------------------------------------ */

/* What a set's file holds besides its tensors: a tensor of another kind
 * (a module's mask buffer), written before parameter `before`. */
typedef struct {
    const char *name;
    int ndim;
    const int64_t *shape;
    const float *data;
    size_t before;
} mha__st_extra;

/* Views of a set's floats that a file holds: for each parameter in order
 * (aliases too when with_aliases), for each view v, the tensor
 * prefix[v] + name whose data is base[v] at the parameter's offset in the
 * arena (the parameters themselves: one view, prefix "", base the arena;
 * an optimizer's state: a view per state array). */
typedef struct {
    size_t n;
    const char *const *prefix;
    float *const *base;
    bool with_aliases;
} mha__param_views;

/* Writes the views (F32) and extra tensors to path with meta (n_meta
 * pairs) as __metadata__ (mha_st_write_file). */
mha_status mha__params_save(const mha_params *ps, const mha__param_views *v, const mha__st_extra *extra,
                            size_t n_extra, const char *const *meta, size_t n_meta, const char *path);

/* Reads every view's tensors from st into place, in file order: each of
 * the right shape (ERR_SHAPE), F32 or when !f32_only any float dtype
 * (ERR_DTYPE), finite (ERR_NONFINITE); a tensor that is none of them goes
 * to other (arg; NULL: ERR_MISSING "unexpected tensor"), which accepts it
 * (MHA_OK) or fails; then ERR_MISSING for the first view's tensor the file
 * lacks. On failure what was read is unspecified. */
mha_status mha__params_read(const mha_params *ps, const mha__param_views *v, const mha_st *st, bool f32_only,
                            mha_status (*other)(void *arg, const mha_st_tensor *t), void *arg);

/* A loader creates the set (allocating it) before it can read the tensors
 * into it, and a few bytes of metadata could ask for a huge one: MHA_OK
 * when st holds at least `tensors` float tensors and 2 bytes (F16) per
 * value of `values`, else ERR_MISSING naming what ("MultiHeadAttention(d_in
 * =..., ...)") and the file's counts; counted false: the counts overflowed. */
mha_status mha__st_can_fill(const mha_st *st, bool counted, uint64_t values, uint64_t tensors, const char *what);

/* Opens path (its header; data read on demand) and hands it to load(st,
 * arg); a failure's detail begins with the path. */
mha_status mha__st_load(const char *path, mha_status (*load)(const mha_st *st, void *arg), void *arg);

/* "(2, 3)": a shape for a detail. */
void mha__shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);

#endif
