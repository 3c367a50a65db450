/* Encode-aware repacking of PackKV (PackKV §III-B3, Algorithm 1): a
 * permutation of the n tokens of one block that makes the packs (runs of
 * `pack` consecutive tokens after permuting) cheaper to bit-pack. Attention in
 * decode is invariant to a permutation applied to K and V alike, so the method
 * permutes both with the one returned here and records it in the chunk's
 * positions.
 *
 * x is the token's joint code vector [n][d] (its K codes then its V codes,
 * d = dim_k + dim_v; V's from column vcol). perm[i] = index of the token
 * placed at position i.
 *   NONE    identity;
 *   VMEDIAN tokens sorted (stably) by the median of their V codes;
 *   GREEDY  Algorithm 1: each pack is seeded with the remaining token nearest
 *           (L2) to the remaining tokens' centroid, then grown by the token of
 *           least marginal cost, cost = the pack's total residual bits
 *           sum_d ceil(log2(range_d + 1)); ties go to the smaller growth of
 *           sum_d range_d, then to the lower index. O(n^2 d). */
#ifndef KVC_KV_METHOD_PACKKV_REPACK_H
#define KVC_KV_METHOD_PACKKV_REPACK_H

#include <stdint.h>

#include "kvcomp.h"

typedef enum kvc_pk_repack { KVC_PK_NONE, KVC_PK_VMEDIAN, KVC_PK_GREEDY } kvc_pk_repack;

/* n <= 65535 tokens, d <= 65535; scratch is allocated (KVC_ERR_NOMEM). */
kvc_status kvc_pk_repack_perm(kvc_pk_repack how, const uint8_t *x, int n, int d, int vcol, int pack,
                              int32_t *perm);

#endif
