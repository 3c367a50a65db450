/* Budgeted greedy top-k by histogram threshold (topk.h). NaN scores rank
 * below every number (as -inf would); a range that is not finite (an
 * infinite score) or empty falls back to sorting every unit. */
#define _GNU_SOURCE /* qsort_r */
#include "kv/select/topk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BINS = 4096 };

/* Descending score, NaN last, ties by index. */
static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *s = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = s[i], y = s[j];
    int xn = isnan(x), yn = isnan(y);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

static int reserve(kvc_topk_ws *ws, size_t n) {
    if (n <= ws->cap) return 1;
    uint16_t *b = realloc(ws->bin, n * sizeof *b);
    if (b) ws->bin = b;
    int32_t *o = realloc(ws->order, n * sizeof *o);
    if (o) ws->order = o;
    if (!b || !o) return 0;
    ws->cap = n;
    return 1;
}

/* Greedy over order[0..n) (already in score order): takes what fits. */
static void take_in_order(const int32_t *order, size_t n, const int32_t *len, int64_t *left, int min_len,
                          uint8_t *taken) {
    for (size_t i = 0; i < n && *left >= min_len; i++) {
        int32_t u = order[i];
        if (len[u] <= *left) {
            taken[u] = 1;
            *left -= len[u];
        }
    }
}

int64_t kvc_topk_greedy(kvc_topk_ws *ws, const float *score, const int32_t *len, size_t n, int64_t budget,
                        uint8_t *taken) {
    memset(taken, 0, n);
    if (n == 0 || budget <= 0) return 0;
    float lo = INFINITY, hi = -INFINITY;
    int64_t total = 0;
    int min_len = INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        float s = score[i];
        lo = s < lo ? s : lo; /* NaN compares false: left out of the range */
        hi = s > hi ? s : hi;
        total += len[i];
        min_len = len[i] < min_len ? len[i] : min_len;
    }
    if (total <= budget) {
        memset(taken, 1, n);
        return total;
    }
    if (!reserve(ws, n)) return -1;
    int64_t left = budget;
    if (!(isfinite(lo) && isfinite(hi) && hi > lo)) { /* no usable range: sort everything */
        for (size_t i = 0; i < n; i++) ws->order[i] = (int32_t)i;
        qsort_r(ws->order, n, sizeof *ws->order, cmp_desc, (void *)score);
        take_in_order(ws->order, n, len, &left, min_len, taken);
        return budget - left;
    }
    /* bins: monotone in the score, NaN in bin 0 with the lowest */
    int64_t tokens[BINS] = {0};
    int32_t count[BINS + 1] = {0};
    float scale = (float)(BINS - 1) / (hi - lo);
    for (size_t i = 0; i < n; i++) {
        float x = (score[i] - lo) * scale;
        int b = x >= 0.0f ? (x < (float)(BINS - 1) ? (int)x : BINS - 1) : 0;
        ws->bin[i] = (uint16_t)b;
        tokens[b] += len[i];
        count[b + 1]++;
    }
    /* bins above t fit the budget together */
    int t = BINS - 1;
    while (t > 0 && tokens[t] <= left) left -= tokens[t--];
    if (t == 0 && tokens[0] <= left) left -= tokens[0], t = -1;
    for (int b = 1; b <= BINS; b++) count[b] += count[b - 1]; /* count[b] = start of bin b */
    for (size_t i = 0; i < n; i++) {
        int b = ws->bin[i];
        if (b > t) taken[i] = 1;
        else ws->order[count[b]++] = (int32_t)i; /* count[b] ends as the end of bin b */
    }
    /* the bin where the budget runs out, then lower ones while a unit may fit */
    for (int b = t; b >= 0 && left >= min_len; b--) {
        int32_t begin = b ? count[b - 1] : 0, end = count[b];
        if (end - begin > 1) qsort_r(ws->order + begin, (size_t)(end - begin), sizeof *ws->order, cmp_desc,
                                     (void *)score);
        take_in_order(ws->order + begin, (size_t)(end - begin), len, &left, min_len, taken);
    }
    return budget - left;
}

void kvc_topk_ws_free(kvc_topk_ws *ws) {
    free(ws->bin);
    free(ws->order);
    *ws = (kvc_topk_ws){0};
}
