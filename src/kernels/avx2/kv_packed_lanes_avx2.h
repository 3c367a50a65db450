/* The packed format's AVX2 q·k with the query heads in the lanes
 * (kv_packed_lanes_avx2.c), for the vectors that keep few values; the
 * expanding kernel of kv_packed_avx2.c takes the others. */
#ifndef KVC_KERNELS_KV_PACKED_LANES_AVX2_H
#define KVC_KERNELS_KV_PACKED_LANES_AVX2_H

#include "kv/codec/packed.h"

/* Whether kvc_packed_qk_lanes_avx2 takes this view and head count: at most 8
 * heads, at most 64 element groups (one 64-bit bitmap word per token), and
 * at most a third of the channels kept in groups of 1, half in groups of 2 or
 * 4 (one bitmap step per group): above that, walking the kept values costs
 * more than expanding every piece (docs/benchmarks.md, "Packed q·k with the
 * heads in the lanes"). */
static inline int kvc_packed_lanes_fit(const kvc_packed_view *k, int G) {
    return G <= 8 && k->d / k->group <= 64 && (k->group > 1 ? 2 : 3) * k->nv <= k->d;
}

/* s[h*lds + t] = q_h · k_t for t < n, h < G (kvc_packed_lanes_fit holds). */
void kvc_packed_qk_lanes_avx2(const kvc_packed_view *k, int n, const float *q, int G, int ldq, float *s,
                              int lds);

#endif
