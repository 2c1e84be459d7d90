/* simd_lanes.h — a vector's lanes (float or double) summed in lane order,
 * on any SIMD layer (include simd_avx2.h, simd_avx512.h or
 * tests/simd_gen16.h first): the one fixed order the kernel bodies'
 * horizontal sums share, so that a sum does not depend on how a compiler
 * would pair the lanes. */
#ifndef MHA_SIMD_LANES_H
#define MHA_SIMD_LANES_H

#ifndef VW
#error "include a SIMD layer before simd_lanes.h"
#endif

static inline float vf_sum_lanes(vf acc) {
    float t[VW];
    vf_storeu(t, acc);
    float s = t[0];
    for (int i = 1; i < VW; i++) s += t[i];
    return s;
}

/* s[r] = vf_sum_lanes(a[r]) for eight vectors, the same bits: eight
 * independent chains of adds side by side, lane j of every vector added
 * before lane j + 1 of any (a layer may define VF_SUM_LANES8 with a
 * transpose and vector adds instead). */
#ifndef VF_SUM_LANES8
static inline void vf_sum_lanes8(const vf a[8], float s[8]) {
    float t[8][VW];
    for (int r = 0; r < 8; r++) vf_storeu(t[r], a[r]);
    for (int r = 0; r < 8; r++) s[r] = t[r][0];
    for (int i = 1; i < VW; i++)
        for (int r = 0; r < 8; r++) s[r] += t[r][i];
}
#endif

static inline double vd_sum_lanes(vd acc) {
    double t[VDW];
    vd_storeu(t, acc);
    double s = t[0];
    for (int i = 1; i < VDW; i++) s += t[i];
    return s;
}

#endif
