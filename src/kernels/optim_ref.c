/* optim_ref.c — AdamW's elementwise update, the reference kernel (plain C,
 * the oracle of optim_body.h's vector versions). Contract: kernels.h; the
 * optimizer around it (constants, chunks over threads): train/optim.c. */
#include "kernels.h"

#include <math.h>

/* b + a * x rounded as PyTorch's kernel of the variant rounds it (the file
 * is built with -ffp-contract=off: the fusion is the explicit fmaf). */
static inline float madd(bool fused, float a, float x, float b) { return fused ? fmaf(a, x, b) : b + a * x; }

void mha__adamw_ref(const mha__adamw_args *k, float *p, const float *g, float *m, float *v, float *vmax,
                    size_t n) {
    const bool fused = k->fused;
    for (size_t j = 0; j < n; j++) {
        const float gj = g[j];
        const float pj = p[j] * k->decay;
        const float mj = madd(fused, k->omb1, gj, m[j] * k->beta1);
        float vj = madd(fused, k->omb2 * gj, gj, v[j] * k->beta2);
        m[j] = mj;
        v[j] = vj;
        if (k->amsgrad) {
            /* torch.maximum; both finite here */
            if (vmax[j] > vj) vj = vmax[j];
            vmax[j] = vj;
        }
        const float denom = sqrtf(vj) / k->bc2_sqrt + k->eps;
        p[j] = pj + (k->neg_step_size * mj) / denom;
    }
}
