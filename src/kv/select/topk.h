/* Budgeted top-k of scored units (the driver's selection, attend.c): units
 * are visited in descending score (ties: lower index first) and each is taken
 * if its length fits what is left of the token budget — the greedy rule every
 * selecting method shares (whole units; a long unit is skipped, shorter ones
 * after it may still fit).
 *
 * The scores are thresholded by a histogram instead of sorted: one pass finds
 * the score range, one bins the units (bins are monotone in the score) and
 * sums their tokens per bin; walking the bins from the top, every unit of the
 * bins whose tokens fit the budget together is taken without any ordering, and
 * only the units of the bin where the budget runs out (and of lower bins, while
 * some unit could still fit) are sorted. O(units + bins) for the common case,
 * against O(units) comparator calls for a quickselect. */
#ifndef KVC_KV_SELECT_TOPK_H
#define KVC_KV_SELECT_TOPK_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvc_topk_ws {
    uint16_t *bin;  /* [cap] bin of each unit */
    int32_t *order; /* [cap] units grouped by bin */
    size_t cap;
    /* kvc_topk_greedy_segs: the candidates (index, score, length, taken),
     * the picks, and a merge buffer; [ccap] each */
    int32_t *cidx, *clen, *picked, *merge;
    float *cscore;
    uint8_t *ctaken;
    size_t ccap;
    int sample;     /* units sampled for the threshold; 0: 1024 (tests set a few) */
    /* statistics of kvc_topk_greedy_segs since the workspace was created */
    uint64_t calls, units, candidates, continued, whole;
} kvc_topk_ws;

/* taken[i] = 1 for the units the greedy rule takes out of n with scores
 * score[i] and lengths len[i] >= 1 within budget tokens, 0 otherwise.
 * Returns the tokens taken, or -1 when scratch memory ran out (taken is then
 * undefined). */
int64_t kvc_topk_greedy(kvc_topk_ws *ws, const float *score, const int32_t *len, size_t n, int64_t budget,
                        uint8_t *taken);

/* A run of units (one chunk's): scores score[u], and either token ends
 * (unit u covers [ends[u-1] or 0, ends[u]), so its length is the difference)
 * or lengths len[u]; the other pointer NULL. */
typedef struct kvc_topk_seg {
    const float *score;
    const int32_t *ends, *len;
    int32_t n;
} kvc_topk_seg;

/* The same greedy rule over the units of seg[0..n_seg) as one list (segment
 * by segment: the list index breaks ties), without a pass that bins every
 * unit: a threshold T is read from an evenly spaced sample of the scores
 * (the sample's tokens above T a few standard deviations more than the
 * budget's share), one pass keeps the units with score >= T (the
 * candidates), and the rule runs over them with kvc_topk_greedy. Every
 * candidate ranks before every other unit, so the rule's walk over the whole
 * list takes exactly what it takes over the candidates, then continues over
 * the rest with what is left of the budget: that second walk is done only if
 * some other unit is short enough to fit (a unit longer than what is left
 * can never be taken), over those units only. So the result is the rule's
 * for any T; T only decides how much work it is. Small lists (up to 2 samples'
 * worth of units) go straight to kvc_topk_greedy.
 * *picked (workspace memory, valid until the next call) receives the list
 * indices of the taken units, increasing; *n_picked their count. Returns the
 * tokens taken, or -1 when scratch memory ran out. */
int64_t kvc_topk_greedy_segs(kvc_topk_ws *ws, const kvc_topk_seg *seg, int n_seg, int64_t budget,
                             const int32_t **picked, size_t *n_picked);

void kvc_topk_ws_free(kvc_topk_ws *ws);

#endif
