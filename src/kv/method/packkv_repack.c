/* PackKV's encode-aware repacking (algorithms and their cost in
 * packkv_repack.h): identity, V-median order (counting sort, O(n d)) and the
 * greedy pack builder of Algorithm 1 (O(n^2 d)). */
#include "kv/method/packkv_repack.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/packkv.h"

/* Median (lower) of d codes by a histogram. */
static int median_code(const uint8_t *x, int d) {
    int hist[256] = {0};
    for (int i = 0; i < d; i++) hist[x[i]]++;
    int need = (d + 1) / 2, seen = 0;
    for (int v = 0; v < 256; v++)
        if ((seen += hist[v]) >= need) return v;
    return 255;
}

static kvc_status vmedian(const uint8_t *x, int n, int d, int vcol, int32_t *perm) {
    int count[257] = {0};
    uint8_t *key = malloc((size_t)n);
    if (!key) return kvc_fail(KVC_ERR_NOMEM, "packkv repack: %d keys", n);
    for (int t = 0; t < n; t++) count[(key[t] = (uint8_t)median_code(x + (size_t)t * d + vcol, d - vcol)) + 1]++;
    for (int v = 0; v < 256; v++) count[v + 1] += count[v];
    for (int t = 0; t < n; t++) perm[count[key[t]]++] = t;
    free(key);
    return KVC_OK;
}

/* Index of the remaining token nearest to the remaining tokens' centroid. */
static int seed(const uint8_t *x, int d, const int32_t *rem, int nrem, double *centroid) {
    memset(centroid, 0, sizeof *centroid * (size_t)d);
    for (int i = 0; i < nrem; i++)
        for (int k = 0; k < d; k++) centroid[k] += x[(size_t)rem[i] * d + k];
    for (int k = 0; k < d; k++) centroid[k] /= nrem;
    int best = 0;
    double bd = -1;
    for (int i = 0; i < nrem; i++) {
        double dist = 0;
        for (int k = 0; k < d; k++) {
            double e = x[(size_t)rem[i] * d + k] - centroid[k];
            dist += e * e;
        }
        if (bd < 0 || dist < bd) bd = dist, best = i;
    }
    return best;
}

static kvc_status greedy(const uint8_t *x, int n, int d, int pack, int32_t *perm) {
    int32_t *rem = malloc(sizeof *rem * (size_t)n);
    uint8_t *lo = malloc((size_t)d * 2);
    double *centroid = malloc(sizeof *centroid * (size_t)d);
    kvc_status st = rem && lo && centroid ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "packkv greedy repack (%d x %d)", n, d);
    uint8_t *hi = lo + d;
    int nrem = n, out = 0;
    for (int i = 0; st == KVC_OK && i < n; i++) rem[i] = i;
    while (st == KVC_OK && nrem > 0) {
        int s = seed(x, d, rem, nrem, centroid);
        int t = rem[s];
        rem[s] = rem[--nrem];
        perm[out++] = t;
        memcpy(lo, x + (size_t)t * d, (size_t)d);
        memcpy(hi, x + (size_t)t * d, (size_t)d);
        for (int size = 1; size < pack && nrem > 0; size++) {
            long best_bits = -1, best_grow = 0;
            int best = 0;
            for (int i = 0; i < nrem; i++) {
                const uint8_t *xi = x + (size_t)rem[i] * d;
                long bits = 0, grow = 0;
                for (int k = 0; k < d; k++) {
                    int l = xi[k] < lo[k] ? xi[k] : lo[k], h = xi[k] > hi[k] ? xi[k] : hi[k];
                    bits += kvc_pk_width((unsigned)(h - l)) - kvc_pk_width((unsigned)(hi[k] - lo[k]));
                    grow += (h - l) - (hi[k] - lo[k]);
                }
                if (best_bits < 0 || bits < best_bits || (bits == best_bits && grow < best_grow) ||
                    (bits == best_bits && grow == best_grow && rem[i] < rem[best]))
                    best_bits = bits, best_grow = grow, best = i;
            }
            t = rem[best];
            rem[best] = rem[--nrem];
            perm[out++] = t;
            for (int k = 0; k < d; k++) {
                uint8_t v = x[(size_t)t * d + k];
                lo[k] = v < lo[k] ? v : lo[k];
                hi[k] = v > hi[k] ? v : hi[k];
            }
        }
    }
    free(rem);
    free(lo);
    free(centroid);
    return st;
}

kvc_status kvc_pk_repack_perm(kvc_pk_repack how, const uint8_t *x, int n, int d, int vcol, int pack,
                              int32_t *perm) {
    KVC_CHECK(n >= 0 && n <= 65535 && d > 0 && d <= 65535 && vcol >= 0 && vcol < d && pack > 0,
              KVC_ERR_ARG, "packkv repack: n=%d d=%d vcol=%d pack=%d", n, d, vcol, pack);
    switch (how) {
    case KVC_PK_NONE:
        for (int i = 0; i < n; i++) perm[i] = i;
        return KVC_OK;
    case KVC_PK_VMEDIAN: return vmedian(x, n, d, vcol, perm);
    case KVC_PK_GREEDY: return greedy(x, n, d, pack, perm);
    }
    return kvc_fail(KVC_ERR_ARG, "packkv repack: unknown method %d", (int)how);
}
