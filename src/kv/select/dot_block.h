/* Unit keys stored channel-major in blocks of 16 units, and their scoring
 * kernel: the storage of the "blocks" selector (blocks.h), whose block keys
 * (one mean key per token block) are scored against the query heads of a
 * group at every step.
 *
 *     block b: [dim][16] f16, unit u at block u / 16, lane u % 16
 *
 * (32 bytes per channel: half a cache line). A block is scored for all heads
 * in one pass with vertical arithmetic only, one SIMD lane per unit:
 * acc_g += q_g[c] · key[c][lanes] per channel and head, no horizontal sums
 * and no per-unit work beyond the FMAs — the same shape as the min/max bound
 * blocks (minmax_block.h), with one row per channel instead of two.
 *
 * Lanes past the last unit of the last block are zero and never reported.
 * Scalar reference in dot_block.c; the AVX2 version in
 * src/kernels/avx2/kv_dotblock_avx2.c (machines with AVX-512 run it too). */
#ifndef KVC_KV_SELECT_DOT_BLOCK_H
#define KVC_KV_SELECT_DOT_BLOCK_H

#include <stddef.h>

#include "base/f16.h"
#include "kvcomp.h"

enum { KVC_DB_LANES = 16 };

/* f16 elements of the blocks holding n units of dim channels. */
static inline size_t kvc_db_elems(int n, int dim) {
    return (size_t)((n + KVC_DB_LANES - 1) / KVC_DB_LANES) * dim * KVC_DB_LANES;
}

/* Writes key x (dim floats) as unit u, rounded to f16. */
void kvc_db_put(kvc_f16 *blocks, int dim, int u, const float *x);

/* out[u] = max over g < G of sum_c q[g*ldq + c] · key_u[c] for the n units
 * of blocks; G >= 1, dim >= 1. */
typedef void (*kvc_db_score_fn)(const kvc_f16 *blocks, int n, int dim, const float *q, int G, int ldq,
                                float *out);

extern kvc_db_score_fn kvc_db_score;           /* active (kvc_codecs_init registers SIMD) */
extern const kvc_db_score_fn kvc_db_score_ref; /* scalar reference */
void kvc_db_register_avx2(kvc_db_score_fn *f);

#endif
