/* Budgeted greedy top-k by histogram threshold (topk.h). NaN scores rank
 * below every number (as -inf would); a range that is not finite (an
 * infinite score) or empty falls back to sorting every unit.
 * kvc_topk_greedy_segs runs it over the candidates a sampled threshold keeps
 * (and, when a unit below the threshold may still fit, over those). */
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

/* ---- over segments, by a sampled threshold ---------------------------------- */

enum { SAMPLE = 1024, SAMPLE_BINS = 512 };

static int reserve_cand(kvc_topk_ws *ws, size_t n) {
    if (n <= ws->ccap) return 1;
    int32_t *a = realloc(ws->cidx, n * sizeof *a);
    if (a) ws->cidx = a;
    int32_t *b = realloc(ws->clen, n * sizeof *b);
    if (b) ws->clen = b;
    int32_t *c = realloc(ws->picked, n * sizeof *c);
    if (c) ws->picked = c;
    int32_t *d = realloc(ws->merge, n * sizeof *d);
    if (d) ws->merge = d;
    float *e = realloc(ws->cscore, n * sizeof *e);
    if (e) ws->cscore = e;
    uint8_t *f = realloc(ws->ctaken, n);
    if (f) ws->ctaken = f;
    if (!a || !b || !c || !d || !e || !f) return 0;
    ws->ccap = n;
    return 1;
}

static inline int32_t seg_len(const kvc_topk_seg *g, int32_t u) {
    return g->ends ? g->ends[u] - (u ? g->ends[u - 1] : 0) : g->len[u];
}

/* One segment's part of gather (below), specialized by the compiler for
 * each mode and length source (the arrays are restrict: stores to the
 * candidates cannot change the segment). */
static inline __attribute__((always_inline)) size_t gather_seg(const float *restrict sc, const int32_t *restrict ends,
                                                               const int32_t *restrict lens, int32_t n, int32_t idx,
                                                               const int mode, float t, int64_t max_len,
                                                               int32_t *restrict cidx, float *restrict cscore,
                                                               int32_t *restrict clen, size_t nc, int32_t *mr_io) {
    int32_t prev = 0, mr = *mr_io;
    for (int32_t u = 0; u < n; u++) {
        int32_t len;
        if (ends) {
            len = ends[u] - prev;
            prev = ends[u];
        } else {
            len = lens[u];
        }
        float x = sc[u];
        int in = mode == 0 ? 1 : mode == 1 ? x >= t : !(x >= t) && len <= max_len;
        /* written whatever `in` is, kept only if it is: no branch on the score */
        cidx[nc] = idx + u;
        cscore[nc] = x;
        clen[nc] = len;
        nc += (size_t)in;
        int32_t out = in ? INT32_MAX : len;
        mr = out < mr ? out : mr;
    }
    *mr_io = mr;
    return nc;
}

/* Copies the units of the list that `mode` accepts into the candidate
 * arrays: 0 every unit; 1 score >= t; 2 not score >= t (NaN included) and
 * length <= max_len. *min_rest: the shortest unit mode 1 left out. */
static size_t gather(kvc_topk_ws *ws, const kvc_topk_seg *seg, int n_seg, int mode, float t, int64_t max_len,
                     int32_t *min_rest) {
    size_t nc = 0;
    int32_t idx = 0, mr = INT32_MAX;
    int32_t *cidx = ws->cidx, *clen = ws->clen;
    float *cscore = ws->cscore;
    for (int k = 0; k < n_seg; k++) {
        const kvc_topk_seg *g = &seg[k];
        if (mode == 0)
            nc = g->ends ? gather_seg(g->score, g->ends, NULL, g->n, idx, 0, t, max_len, cidx, cscore, clen, nc, &mr)
                         : gather_seg(g->score, NULL, g->len, g->n, idx, 0, t, max_len, cidx, cscore, clen, nc, &mr);
        else if (mode == 1)
            nc = g->ends ? gather_seg(g->score, g->ends, NULL, g->n, idx, 1, t, max_len, cidx, cscore, clen, nc, &mr)
                         : gather_seg(g->score, NULL, g->len, g->n, idx, 1, t, max_len, cidx, cscore, clen, nc, &mr);
        else
            nc = g->ends ? gather_seg(g->score, g->ends, NULL, g->n, idx, 2, t, max_len, cidx, cscore, clen, nc, &mr)
                         : gather_seg(g->score, NULL, g->len, g->n, idx, 2, t, max_len, cidx, cscore, clen, nc, &mr);
        idx += g->n;
    }
    if (min_rest) *min_rest = mr;
    return nc;
}

/* The greedy rule over the gathered units: appends the list indices of those
 * taken to dst (increasing); *left drops by their tokens. */
static int greedy_gathered(kvc_topk_ws *ws, size_t nc, int64_t *left, int32_t *dst, size_t *n_dst) {
    int64_t got = kvc_topk_greedy(ws, ws->cscore, ws->clen, nc, *left, ws->ctaken);
    if (got < 0) return 0;
    *left -= got;
    size_t m = 0;
    for (size_t i = 0; i < nc; i++) {
        dst[m] = ws->cidx[i];
        m += ws->ctaken[i];
    }
    *n_dst = m;
    return 1;
}

/* T: the largest bin edge of the sample's scores with at least `want` sample
 * tokens at or above it; -inf when the sample holds fewer. */
static float sample_threshold(const kvc_topk_seg *seg, int n_seg, size_t n, int m, int64_t budget, int64_t total) {
    float s[SAMPLE];
    int32_t l[SAMPLE];
    int k = 0, si = 0;
    size_t base = 0;
    double st = 0;
    for (int j = 0; j < m; j++) { /* unit j * n / m, segments walked once */
        size_t i = (size_t)((double)j * (double)n / m);
        while (si < n_seg && i >= base + (size_t)seg[si].n) base += (size_t)seg[si++].n;
        if (si == n_seg) break;
        int32_t u = (int32_t)(i - base);
        s[k] = seg[si].score[u];
        l[k] = seg_len(&seg[si], u);
        st += l[k];
        k++;
    }
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < k; j++)
        if (isfinite(s[j])) {
            lo = s[j] < lo ? s[j] : lo;
            hi = s[j] > hi ? s[j] : hi;
        }
    if (!(hi > lo)) return -INFINITY;
    /* the budget's share of the sample's tokens, plus 4 standard deviations of
     * a binomial count of units and 4 units */
    double frac = (double)budget / (double)total, avg = st / k;
    double want = frac * st + 4.0 * sqrt(frac * st * avg) + 4.0 * avg;
    double tok[SAMPLE_BINS] = {0};
    float scale = (float)(SAMPLE_BINS - 1) / (hi - lo);
    for (int j = 0; j < k; j++) {
        if (!(s[j] >= lo)) continue; /* NaN, -inf */
        float x = (s[j] - lo) * scale;
        int b = x < (float)(SAMPLE_BINS - 1) ? (int)x : SAMPLE_BINS - 1;
        tok[b] += l[j];
    }
    double cum = 0;
    for (int b = SAMPLE_BINS - 1; b >= 0; b--) {
        cum += tok[b];
        if (cum >= want) return b ? lo + (float)b / scale : -INFINITY;
    }
    return -INFINITY;
}

int64_t kvc_topk_greedy_segs(kvc_topk_ws *ws, const kvc_topk_seg *seg, int n_seg, int64_t budget,
                             const int32_t **picked, size_t *n_picked) {
    *picked = ws->picked;
    *n_picked = 0;
    size_t n = 0;
    int64_t total = 0;
    for (int k = 0; k < n_seg; k++) {
        const kvc_topk_seg *g = &seg[k];
        n += (size_t)g->n;
        if (g->n > 0 && g->ends) total += g->ends[g->n - 1];
        else
            for (int32_t u = 0; u < g->n; u++) total += g->len[u];
    }
    if (n == 0 || budget <= 0) return 0;
    if (n > INT32_MAX || !reserve_cand(ws, n)) return -1;
    *picked = ws->picked;
    ws->calls++;
    ws->units += n;
    if (total <= budget) { /* everything fits */
        for (size_t i = 0; i < n; i++) ws->picked[i] = (int32_t)i;
        *n_picked = n;
        ws->candidates += n;
        return total;
    }
    int m = ws->sample > 0 ? ws->sample : SAMPLE;
    m = m < SAMPLE ? m : SAMPLE;
    float t = n > 2 * (size_t)m ? sample_threshold(seg, n_seg, n, m, budget, total) : -INFINITY;
    if (t == -INFINITY) ws->whole++;
    int64_t left = budget;
    int32_t min_rest = INT32_MAX;
    size_t nc = gather(ws, seg, n_seg, t == -INFINITY ? 0 : 1, t, 0, &min_rest);
    ws->candidates += nc;
    size_t np = 0;
    if (!greedy_gathered(ws, nc, &left, ws->picked, &np)) return -1;
    if (left >= min_rest) { /* some unit below T still fits: the rule goes on over those */
        ws->continued++;
        size_t n2 = gather(ws, seg, n_seg, 2, t, left, NULL), np2 = 0;
        if (!greedy_gathered(ws, n2, &left, ws->merge + np, &np2)) return -1;
        /* merge the two increasing lists: the first from ws->picked, the second
         * already behind np slots of ws->merge, which the merge fills from the front */
        size_t a = 0, b = np, o = 0, bend = np + np2;
        while (a < np && b < bend) ws->merge[o++] = ws->picked[a] < ws->merge[b] ? ws->picked[a++] : ws->merge[b++];
        while (a < np) ws->merge[o++] = ws->picked[a++];
        int32_t *x = ws->picked; /* the rest of the second list is in place */
        ws->picked = ws->merge;
        ws->merge = x;
        np = bend;
    }
    *picked = ws->picked;
    *n_picked = np;
    return budget - left;
}

void kvc_topk_ws_free(kvc_topk_ws *ws) {
    free(ws->bin);
    free(ws->order);
    free(ws->cidx);
    free(ws->clen);
    free(ws->picked);
    free(ws->merge);
    free(ws->cscore);
    free(ws->ctaken);
    *ws = (kvc_topk_ws){0};
}
