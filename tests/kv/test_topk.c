/* The driver's budgeted top-k (src/kv/select/topk.c) against the greedy rule
 * it implements, written plainly: every unit sorted by score (descending, NaN
 * last, ties by index), each taken if its length fits what is left. Cases:
 * equal lengths (quest pages) and mixed lengths (sentences, so a long unit is
 * skipped and shorter ones after it still fit), many ties (scores on a coarse
 * grid), a score range narrower than the bins, NaN and infinite scores, all
 * scores equal, budgets of 0, 1, exact fits and more than the total; and the
 * same over segments with a sampled threshold (kvc_topk_greedy_segs). */
#define _GNU_SOURCE /* qsort_r */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "kv/select/topk.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) { return (uint32_t)(kvc_rng_next(&rng) >> 32); }

static int cmp_ref(const void *a, const void *b, void *ctx) {
    const float *s = ctx;
    int i = *(const int *)a, j = *(const int *)b;
    int xn = isnan(s[i]), yn = isnan(s[j]);
    if (xn != yn) return xn ? 1 : -1;
    if (!xn && s[i] != s[j]) return s[i] > s[j] ? -1 : 1;
    return (i > j) - (i < j);
}

static int64_t greedy_ref(const float *score, const int32_t *len, int n, int64_t budget, uint8_t *taken) {
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_ref, (void *)score);
    memset(taken, 0, (size_t)n);
    int64_t left = budget;
    for (int i = 0; i < n; i++)
        if (len[order[i]] <= left) {
            taken[order[i]] = 1;
            left -= len[order[i]];
        }
    free(order);
    return budget > 0 ? budget - left : 0;
}

enum { S_RANDOM, S_TIES, S_NARROW, S_NAN, S_INF, S_EQUAL };

/* n units of lengths 1..maxlen and scores of the given kind (S_EQUAL + 1:
 * scores rising with the index), drawn in one fixed order. */
static void fill_units(float *s, int32_t *len, int n, int maxlen, int kind) {
    for (int i = 0; i < n; i++) {
        len[i] = 1 + (int32_t)(rnd() % (uint32_t)maxlen);
        float x = (float)rnd() / 65536.0f - 30000.0f;
        if (kind == S_TIES) x = (float)(rnd() % 7);
        if (kind == S_NARROW) x = 1.0f + (float)(rnd() % 5) * 1e-7f;
        if (kind == S_NAN && rnd() % 5 == 0) x = NAN;
        if (kind == S_INF && rnd() % 50 == 0) x = rnd() % 2 ? INFINITY : -INFINITY;
        if (kind == S_EQUAL) x = 2.5f;
        if (kind == S_EQUAL + 1) x = (float)i * 0.01f;
        s[i] = x;
    }
}

static void run_case(int n, int maxlen, int kind, int64_t budget) {
    float *s = malloc(sizeof(float) * (size_t)n);
    int32_t *len = malloc(sizeof(int32_t) * (size_t)n);
    uint8_t *a = malloc((size_t)n), *b = malloc((size_t)n);
    fill_units(s, len, n, maxlen, kind);
    kvc_topk_ws ws = {0};
    int64_t ta = greedy_ref(s, len, n, budget, a);
    int64_t tb = kvc_topk_greedy(&ws, s, len, (size_t)n, budget, b);
    assert_int_equal(tb, ta);
    for (int i = 0; i < n; i++)
        if (a[i] != b[i]) fail_msg("n %d kind %d budget %lld: unit %d ref %d got %d", n, kind, (long long)budget, i, a[i], b[i]);
    kvc_topk_ws_free(&ws);
    free(s); free(len); free(a); free(b);
}

static void test_greedy_rule(void **state) {
    (void)state;
    const int ns[] = {1, 2, 17, 300, 5000, 20000};
    for (int ni = 0; ni < 6; ni++)
        for (int kind = S_RANDOM; kind <= S_EQUAL; kind++)
            for (int maxlen = 1; maxlen <= 40; maxlen += 13) {
                int n = ns[ni];
                int64_t total = (int64_t)n * (maxlen + 1) / 2;
                const int64_t budgets[] = {0, 1, total / 10, total / 3, total - 1, total * 2};
                for (int bi = 0; bi < 6; bi++) run_case(n, maxlen, kind, budgets[bi]);
            }
}

/* kvc_topk_greedy_segs (the sampled threshold) against the same rule over
 * the concatenated list: segments of ragged counts (empty ones too) giving
 * ends or lengths, every kind of scores above plus scores rising with the
 * index, budgets from 0 to more than the total, and samples of 8, 64 and the
 * default 1024 units, so thresholds land too high (the rule goes on below
 * them), too low, or on ties. */
static void run_segs(int n, int maxlen, int kind, int64_t budget, int sample, uint64_t *cont, uint64_t *thresh) {
    float *s = malloc(sizeof(float) * (size_t)(n ? n : 1));
    int32_t *len = malloc(sizeof(int32_t) * (size_t)(n ? n : 1)), *ends = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    uint8_t *a = malloc((size_t)(n ? n : 1));
    fill_units(s, len, n, maxlen, kind);
    kvc_topk_seg seg[64];
    int ns = 0;
    for (int i = 0; i < n || ns == 0;) { /* segments of 0..n/3 units, alternately ends and lengths */
        int m = (int)(rnd() % (uint32_t)(n / 3 + 2));
        if (m > n - i) m = n - i;
        if (ns == 63) m = n - i;
        int32_t e = 0;
        for (int u = 0; u < m; u++) ends[i + u] = e += len[i + u];
        seg[ns] = (kvc_topk_seg){.score = s + i, .ends = ns % 2 ? ends + i : NULL, .len = ns % 2 ? NULL : len + i,
                                 .n = m};
        ns++;
        i += m;
        if (i >= n && ns > 0) break;
    }
    kvc_topk_ws ws = {.sample = sample};
    int64_t ta = greedy_ref(s, len, n, budget, a);
    const int32_t *pick;
    size_t np;
    int64_t tb = kvc_topk_greedy_segs(&ws, seg, ns, budget, &pick, &np);
    assert_int_equal(tb, ta);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        int got = k < np && pick[k] == i;
        if (got) k++;
        if (got != a[i])
            fail_msg("n %d kind %d budget %lld sample %d: unit %d ref %d got %d", n, kind, (long long)budget, sample,
                     i, a[i], got);
    }
    assert_int_equal(k, np); /* increasing, nothing else */
    *cont += ws.continued;
    *thresh += ws.calls - ws.whole;
    kvc_topk_ws_free(&ws);
    free(s); free(len); free(ends); free(a);
}

static void test_segments(void **state) {
    (void)state;
    const int ns[] = {0, 1, 17, 300, 5000, 30000};
    const int samples[] = {8, 64, 0};
    uint64_t cont = 0, thresh = 0;
    for (int ni = 0; ni < 6; ni++)
        for (int kind = S_RANDOM; kind <= S_EQUAL + 1; kind++)
            for (int maxlen = 1; maxlen <= 40; maxlen += 13)
                for (int si = 0; si < 3; si++) {
                    int n = ns[ni];
                    int64_t total = (int64_t)n * (maxlen + 1) / 2;
                    const int64_t budgets[] = {0, 1, total / 10, total / 3, total - 1, total * 2, 37};
                    for (int bi = 0; bi < 7; bi++) run_segs(n, maxlen, kind, budgets[bi], samples[si], &cont, &thresh);
                }
    assert_true(thresh > 0); /* the sampled threshold was used */
    assert_true(cont > 0);   /* and the rule went on below it */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_rule),
        cmocka_unit_test(test_segments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
