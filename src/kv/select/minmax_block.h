/* The storage of the min/max bound index (minmax.h) and its scoring kernel.
 *
 * Units are stored in blocks of KVC_MM_LANES (16) units, channel-major inside
 * a block: for channel c, the 16 units' max then the 16 units' min, in f16
 * (64 bytes, one cache line per channel):
 *
 *     block b: [dim][2][16] f16, unit u at block u / 16, lane u % 16.
 *
 * A block is scored for all query heads of a group in one pass with vertical
 * arithmetic only (one SIMD lane per unit, no horizontal sums): per channel
 * and head, acc += q⁺[c] · max[c][lanes] + q⁻[c] · min[c][lanes], where
 * q⁺ = max(q, 0) and q⁻ = min(q, 0), so acc = sum_c max(q_c max_c, q_c min_c).
 * The bound arrays stream from memory once per step (2 · dim · 2 bytes per
 * unit), all heads of the group served by that one read.
 *
 * Lanes past the last unit of the last block are zero and never reported.
 * Scalar reference in minmax_block.c; AVX2 / AVX-512 versions in
 * src/kernels/<isa>/kv_minmax_<isa>.c, registered by kvc_codecs_init. */
#ifndef KVC_KV_SELECT_MINMAX_BLOCK_H
#define KVC_KV_SELECT_MINMAX_BLOCK_H

#include "base/f16.h"
#include "kvcomp.h"

enum { KVC_MM_LANES = 16 };

/* out[u] = max over g < G of sum_c (qpm[g][0][c] · max_c(u) + qpm[g][1][c] · min_c(u))
 * for the n units of blocks (ceil(n / 16) blocks of dim channels); qpm is
 * [G][2][dim]: per head q⁺ then q⁻. G >= 1, dim >= 1. */
typedef void (*kvc_minmax_score_fn)(const kvc_f16 *blocks, int n, int dim, const float *qpm, int G,
                                    float *out);

typedef struct kvc_minmax_kernels {
    kvc_minmax_score_fn score;
} kvc_minmax_kernels;

extern kvc_minmax_kernels kvc_minmax_k;
extern const kvc_minmax_kernels kvc_minmax_ref;



void kvc_minmax_register_avx2(kvc_minmax_kernels *k);
void kvc_minmax_register_avx512(kvc_minmax_kernels *k);

#endif
