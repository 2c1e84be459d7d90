/* optim_body.h — AdamW's elementwise update on a SIMD layer, compiled per
 * ISA (optim_avx2.c, optim_avx512.c); its oracle is optim_ref.c. Contract:
 * kernels.h. Each lane runs the reference's ops in the reference's order,
 * each an IEEE single-precision op (the fused multiply-add where the
 * reference calls fmaf), so the bits are the reference's; the tail runs
 * the same ops one element at a time (fmaf is the FMA instruction here).
 * The update reads four arrays and writes three: memory-bound, so it is
 * one pass.
 *
 * The including file includes a layer (simd_*.h) and defines MHA_KSFX. */
#ifndef VW
#error "include a SIMD layer before optim_body.h"
#endif
#ifndef MHA_KSFX
#error "define MHA_KSFX before including optim_body.h"
#endif

#include "kernels.h"

#include <math.h>

VINL vf adamw_madd(bool fused, vf a, vf x, vf b) { return fused ? vf_fmadd(a, x, b) : vf_add(b, vf_mul(a, x)); }

/* fused and amsgrad as constants in each copy, so the loop has no branch */
VINL void adamw_vec(const mha__adamw_args *k, bool fused, bool amsgrad, float *p, const float *g, float *m, float *v,
                    float *vmax, size_t n) {
    const vf decay = vf_set1(k->decay), beta1 = vf_set1(k->beta1), omb1 = vf_set1(k->omb1);
    const vf beta2 = vf_set1(k->beta2), omb2 = vf_set1(k->omb2), bc2 = vf_set1(k->bc2_sqrt);
    const vf eps = vf_set1(k->eps), nss = vf_set1(k->neg_step_size);
    size_t j = 0;
    for (; j + VW <= n; j += VW) {
        const vf gj = vf_loadu(g + j);
        const vf pj = vf_mul(vf_loadu(p + j), decay);
        const vf mj = adamw_madd(fused, omb1, gj, vf_mul(vf_loadu(m + j), beta1));
        vf vj = adamw_madd(fused, vf_mul(omb2, gj), gj, vf_mul(vf_loadu(v + j), beta2));
        vf_storeu(m + j, mj);
        vf_storeu(v + j, vj);
        if (amsgrad) {
            vj = vf_max(vf_loadu(vmax + j), vj); /* vmax > v ? vmax : v, as the reference */
            vf_storeu(vmax + j, vj);
        }
        const vf denom = vf_add(vf_div(vf_sqrt(vj), bc2), eps);
        vf_storeu(p + j, vf_add(pj, vf_div(vf_mul(nss, mj), denom)));
    }
    for (; j < n; j++) {
        const float gj = g[j];
        const float pj = p[j] * k->decay;
        const float mj = fused ? fmaf(k->omb1, gj, m[j] * k->beta1) : m[j] * k->beta1 + k->omb1 * gj;
        float vj = fused ? fmaf(k->omb2 * gj, gj, v[j] * k->beta2) : v[j] * k->beta2 + (k->omb2 * gj) * gj;
        m[j] = mj;
        v[j] = vj;
        if (amsgrad) {
            if (vmax[j] > vj) vj = vmax[j];
            vmax[j] = vj;
        }
        const float denom = sqrtf(vj) / k->bc2_sqrt + k->eps;
        p[j] = pj + (k->neg_step_size * mj) / denom;
    }
}

void MHA__KNAME(adamw)(const mha__adamw_args *k, float *p, const float *g, float *m, float *v, float *vmax,
                       size_t n) {
    if (k->fused && !k->amsgrad) adamw_vec(k, true, false, p, g, m, v, vmax, n);
    else if (k->fused) adamw_vec(k, true, true, p, g, m, v, vmax, n);
    else if (!k->amsgrad) adamw_vec(k, false, false, p, g, m, v, vmax, n);
    else adamw_vec(k, false, true, p, g, m, v, vmax, n);
}
