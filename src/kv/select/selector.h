/* Selectors: token-selection indexes over units of a chunk (docs/design.md §4,
 * "Selector"). A unit is a range of tokens inside one chunk: a Quest page, a
 * MosaicKV block, a SentKV sentence (variable length), a single heavy hitter.
 * A selector instance is attached to a chunk when the method builds it; the
 * driver asks every selectable chunk of a stream to score its units for the
 * current query, keeps the top units across all chunks within the method's
 * token budget, and attends only those (unselectable chunks — the hot window,
 * chunks without a selector — are always attended and not counted).
 *
 * Units never span chunks. A method whose units are longer than its natural
 * block (sentences) makes chunk boundaries fall on unit boundaries: it decides
 * when tokens leave the hot window, so it can seal whole sentences.
 * Scores see the query as the chunk's codecs see it: scaled by 1/sqrt(head_dim)
 * and mapped by the chunk's transform (so MosaicKV's rotated block means work). */
#ifndef KVC_KV_SELECTOR_H
#define KVC_KV_SELECTOR_H

#include <stdint.h>

#include "kv/codec/codec.h"

/* score_range's ranges start at multiples of this many units. */
enum { KVC_SCORE_ALIGN = 16 };

typedef struct kvc_selector_ops {
    const char *name; /* "pages", "blocks", "sentences", ... */

    /* Number of units and the token range of unit u (sorted, disjoint). */
    int (*n_units)(const void *index);
    kvc_range (*unit)(const void *index, int u);
    /* Optional: the units' token ends as one array (unit u is [ends[u-1] or 0,
     * ends[u])), so the driver reads the lengths without a call per unit. */
    const int32_t *(*ends)(const void *index);

    /* One score per unit for the G queries q [G][ldq] (the selector chooses
     * how to combine the heads of the group, e.g. max or sum of per-head
     * upper bounds): scores[u], u < n_units. Higher = more important. */
    void (*score)(const void *index, const float *q, int G, int ldq, float *scores);
    /* Optional: the same for units [u0, u1) only, into scores[0 .. u1 - u0),
     * with u0 a multiple of KVC_SCORE_ALIGN and u1 one too or n_units; the
     * driver cuts a large index into such ranges to spread the scoring of all
     * streams over the threads evenly. Gives the same scores as score. */
    void (*score_range)(const void *index, const float *q, int G, int ldq, int u0, int u1, float *scores);

    /* Bytes of the index (counted as index_bytes in the stats). */
    uint64_t (*bytes)(const void *index);

    void (*free)(void *index);
} kvc_selector_ops;

/* A selector index attached to a chunk. */
typedef struct kvc_select_index {
    const kvc_selector_ops *ops;
    void *index;
} kvc_select_index;

#endif
