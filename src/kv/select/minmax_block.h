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
 *
 * The q8 block (full blocks of a q8 index, minmax.h): per channel c a grid
 * base_c + step_c · code over the block's range (base = the smallest min of
 * its 16 units, base + 255 · step >= the largest max), each unit's max coded
 * up (the smallest code whose value is >= the f16 max) and its min down, so
 * [min value, max value] still contains every key element of the unit:
 *
 *     block: [dim] f32 base, [dim] f32 step, [dim][2][16] u8 codes (16 max
 *     codes then 16 min codes per channel), kvc_mm_q8_bytes(dim) = 40 · dim.
 *
 * The value of a code is fmaf(step, code, base) everywhere (encoder check,
 * reference, SIMD kernels with FMA), so the outward rounding holds for the
 * values the kernels compute. Keys beyond f16's finite range (which f16 K/V
 * cannot hold either) are clamped to ±65504 in q8 blocks.
 * Scalar reference in minmax_block.c; AVX2 / AVX-512 versions in
 * src/kernels/<isa>/kv_minmax_<isa>.c, registered by kvc_codecs_init. */
#ifndef KVC_KV_SELECT_MINMAX_BLOCK_H
#define KVC_KV_SELECT_MINMAX_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "base/f16.h"
#include "kvcomp.h"

enum { KVC_MM_LANES = 16 };

/* out[u] = max over g < G of sum_c (qpm[g][0][c] · max_c(u) + qpm[g][1][c] · min_c(u))
 * for the n units of blocks (ceil(n / 16) blocks of dim channels); qpm is
 * [G][2][dim]: per head q⁺ then q⁻. G >= 1, dim >= 1. */
typedef void (*kvc_minmax_score_fn)(const kvc_f16 *blocks, int n, int dim, const float *qpm, int G,
                                    float *out);

/* The same over nb full q8 blocks: out[16 · nb]. */
typedef void (*kvc_minmax_score_q8_fn)(const uint8_t *blocks, int nb, int dim, const float *qpm, int G,
                                       float *out);

typedef struct kvc_minmax_kernels {
    kvc_minmax_score_fn score;
    kvc_minmax_score_q8_fn score_q8;
} kvc_minmax_kernels;

static inline size_t kvc_mm_q8_bytes(int dim) { return (size_t)dim * (2 * sizeof(float) + 2 * KVC_MM_LANES); }

/* A full f16 block (all 16 lanes units) to a q8 block. */
void kvc_mm_q8_encode(const kvc_f16 *f16_block, int dim, uint8_t *q8_block);

/* The max (which 0) or min (which 1) of lane u, channel c of a q8 block. */
float kvc_mm_q8_value(const uint8_t *q8_block, int dim, int u, int c, int which);

extern kvc_minmax_kernels kvc_minmax_k;
extern const kvc_minmax_kernels kvc_minmax_ref;



void kvc_minmax_register_avx2(kvc_minmax_kernels *k);
void kvc_minmax_register_avx512(kvc_minmax_kernels *k);

#endif
