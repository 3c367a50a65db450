/* Min/max key bounds of token units: the selection index of Quest (pages of a
 * fixed length) and SentKV (sentences of any length). Per unit and channel the
 * index keeps the largest and the smallest key element; for a query q
 *
 *     bound(q, unit) = sum_i max(q_i * max_i, q_i * min_i)
 *
 * is an upper bound of q·k for every key k of the unit (each term bounds
 * q_i * k_i because k_i lies in [min_i, max_i]). The bounds are stored in f16
 * rounded outward (max up, min down), so the stored interval still contains
 * every key element and the bound stays an upper bound; this halves the index
 * against f32 (2 * dim * 2 bytes per unit).
 *
 * A KV stream serves the G query heads of its group; the unit's score is the
 * largest of the G per-head bounds (a unit is needed if any head of the group
 * may attend to it strongly, and each head's bound still bounds its scores),
 * or, with KVC_MM_HEADS_SUM, their sum, which bounds the sum of the G heads'
 * scores. The sum costs one head's arithmetic whatever G is: per channel
 * sum_g max(q_gi max_i, q_gi min_i) = (sum_g q⁺_gi) max_i + (sum_g q⁻_gi) min_i,
 * so the G split queries fold into one before the kernel runs.
 *
 * Scoring is one kernel call over all units of the index and all G heads:
 * with q⁺ = max(q, 0) and q⁻ = min(q, 0) the bound is q⁺·max + q⁻·min, taken
 * over blocks of 16 units stored channel-major (minmax_block.h).
 *
 * Units are appended in token order (consecutive ranges from token 0 of the
 * chunk): chunks that grow by appending (quest pages, sentkv sentences) extend
 * their index the same way. */
#ifndef KVC_KV_SELECT_MINMAX_H
#define KVC_KV_SELECT_MINMAX_H

#include "kv/select/selector.h"

typedef struct kvc_minmax kvc_minmax;

/* An empty index over rows of dim elements (f16 blocks). */
kvc_status kvc_minmax_create(int dim, kvc_minmax **out);

/* Flags of kvc_minmax_create_fmt. KVC_MM_Q8 stores full blocks of 16 units
 * in 8 bits (minmax_block.h, "q8": per block and channel a grid over the
 * block's range, codes rounded outward, so the bound still holds; 40 · dim
 * bytes per 16 units against 64 · dim), the open last block in f16.
 * KVC_MM_HEADS_SUM scores a unit by the sum of the G heads' bounds instead
 * of their largest. */
enum { KVC_MM_Q8 = 1, KVC_MM_HEADS_SUM = 2, KVC_MM_FLAGS = 3 };

/* The same with flags (KVC_MM_*). */
kvc_status kvc_minmax_create_fmt(int dim, int flags, kvc_minmax **out);
int kvc_minmax_flags(const kvc_minmax *x);
int kvc_minmax_is_q8(const kvc_minmax *x);

/* The interval [*mn, *mx] the index holds for channel c of unit u (it
 * contains every key element of the unit's channel c). */
void kvc_minmax_unit_range(const kvc_minmax *x, int u, int c, float *mx, float *mn);

/* Appends one unit of n >= 1 keys k [n][ld], covering the n tokens after the
 * previous unit. */
kvc_status kvc_minmax_add(kvc_minmax *x, const float *k, int n, int ld);

/* Tokens covered by the units so far. */
int kvc_minmax_tokens(const kvc_minmax *x);

/* Per-head bounds of unit u for q [G][ldq]: out[g]. */
void kvc_minmax_bounds(const kvc_minmax *x, int u, const float *q, int G, int ldq, float *out);

/* The selector ("minmax"); its index is a kvc_minmax. */
extern const kvc_selector_ops kvc_selector_minmax;

#endif
