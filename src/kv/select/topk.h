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
} kvc_topk_ws;

/* taken[i] = 1 for the units the greedy rule takes out of n with scores
 * score[i] and lengths len[i] >= 1 within budget tokens, 0 otherwise.
 * Returns the tokens taken, or -1 when scratch memory ran out (taken is then
 * undefined). */
int64_t kvc_topk_greedy(kvc_topk_ws *ws, const float *score, const int32_t *len, size_t n, int64_t budget,
                        uint8_t *taken);

void kvc_topk_ws_free(kvc_topk_ws *ws);

#endif
