/* Per-token top-k pruning masks for MUSTAFAR (paper §2): magnitude and
 * output-aware scores, exactly `keep` elements per vector, deterministic ties.
 *
 * Selection works on 64-bit keys (|x| bit pattern << 32 | ~index): every key is
 * distinct, larger means "keep first", and the k-th largest key found by
 * quickselect is the threshold. Integer keys give a total order (NaN included)
 * so the mask never depends on floating-point comparison quirks. */
#include "kv/codec/prune.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "base/f16.h"

int kvc_prune_keep_count(double sparsity, int d) {
    if (!(sparsity > 0.0)) return d; /* also NaN */
    if (sparsity >= 1.0) return 0;
    /* (1 - s) * d with a tolerance for the binary representation of s */
    double x = (1.0 - sparsity) * (double)d;
    int k = (int)floor(x + 0.5 + 1e-9);
    if (k < 0) k = 0;
    if (k > d) k = d;
    return k;
}

static inline uint64_t key_of(float v, int i) {
    uint32_t a = kvc_f32_bits(v) & 0x7fffffffu;
    return ((uint64_t)a << 32) | (uint32_t)~(uint32_t)i;
}

/* k-th largest (k >= 1) of a[0..n) by Hoare-style quickselect; reorders a. */
static uint64_t kth_largest(uint64_t *a, int n, int k) {
    int lo = 0, hi = n - 1, want = k - 1; /* index in descending order */
    while (lo < hi) {
        /* median of three as pivot keeps sorted inputs linear */
        int mid = lo + (hi - lo) / 2;
        uint64_t x = a[lo], y = a[mid], z = a[hi];
        uint64_t piv = (x > y) ? ((y > z) ? y : (x > z ? z : x)) : ((x > z) ? x : (y > z ? z : y));
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                uint64_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

void kvc_prune_topk_scalar(const float *score, int d, int keep, uint64_t *mask) {
    assert(d >= 0 && d <= KVC_PRUNE_MAX_D && keep >= 0 && keep <= d);
    int nw = (d + 63) / 64;
    memset(mask, 0, (size_t)nw * sizeof(uint64_t));
    if (keep == 0) return;
    if (keep == d) {
        for (int c = 0; c < d; c++) mask[c >> 6] |= 1ull << (c & 63);
        return;
    }
    uint64_t keys[KVC_PRUNE_MAX_D];
    for (int c = 0; c < d; c++) keys[c] = key_of(score[c], c);
    uint64_t thr = kth_largest(keys, d, keep);
    for (int c = 0; c < d; c++)
        if (key_of(score[c], c) >= thr) mask[c >> 6] |= 1ull << (c & 63);
}

void kvc_prune_outaware_score(const float *k, const float *qsum, int d, float *score) {
    for (int c = 0; c < d; c++) score[c] = fabsf(k[c]) * qsum[c];
}

void kvc_prune_accumulate_absq(const float *q, int g, int d, float *acc) {
    for (int h = 0; h < g; h++)
        for (int c = 0; c < d; c++) acc[c] += fabsf(q[(size_t)h * d + c]);
}

kvc_prune_topk_fn kvc_prune_topk_k = kvc_prune_topk_scalar;

void kvc_prune_topk(const float *score, int d, int keep, uint64_t *mask) {
    kvc_prune_topk_k(score, d, keep, mask);
}
