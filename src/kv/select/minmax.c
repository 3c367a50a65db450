/* The min/max bound index (minmax.h): per unit the channel-wise key max and
 * min in f16 rounded outward, the unit boundaries, and the bound
 * sum_i max(q_i max_i, q_i min_i) per query head. Scoring widens one unit's
 * two rows with the dense f16 kernel and takes the per-channel products. */
#include "kv/select/minmax.h"

#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"
#include "kv/codec/dense.h"

enum { MINMAX_MAX_DIM = 1024 };

struct kvc_minmax {
    int dim;
    int n, cap;        /* units */
    int32_t *end;      /* [cap] token end of unit u (begin = end[u-1] or 0) */
    kvc_f16 *mm;       /* [cap][2][dim]: max row, then min row */
};

kvc_status kvc_minmax_create(int dim, kvc_minmax **out) {
    *out = NULL;
    KVC_CHECK(dim >= 1 && dim <= MINMAX_MAX_DIM, KVC_ERR_ARG, "minmax index: dim %d outside [1, %d]", dim,
              MINMAX_MAX_DIM);
    kvc_minmax *x = calloc(1, sizeof *x);
    if (!x) return kvc_fail(KVC_ERR_NOMEM, "minmax index");
    x->dim = dim;
    *out = x;
    return KVC_OK;
}

int kvc_minmax_tokens(const kvc_minmax *x) { return x->n ? x->end[x->n - 1] : 0; }

/* The nearest f16 at or above (up) / at or below (!up) f. */
static kvc_f16 f16_outward(float f, int up) {
    kvc_f16 h = kvc_f32_to_f16(f);
    float back = kvc_f16_to_f32(h);
    if (up ? back >= f : back <= f) return h;
    if (!up) return (kvc_f16)(f16_outward(-f, 1) ^ 0x8000u);
    if ((h & 0x7fffu) == 0) return 1;          /* ±0 -> smallest positive subnormal */
    return (kvc_f16)(h & 0x8000u ? h - 1 : h + 1); /* toward +inf */
}

kvc_status kvc_minmax_add(kvc_minmax *x, const float *k, int n, int ld) {
    KVC_CHECK(n >= 1, KVC_ERR_ARG, "minmax index: unit of %d tokens", n);
    int prev = kvc_minmax_tokens(x);
    KVC_CHECK(prev <= INT32_MAX - n, KVC_ERR_RANGE, "minmax index: %d + %d tokens", prev, n);
    if (x->n == x->cap) {
        int cap = x->cap ? x->cap * 2 : 16;
        int32_t *e = realloc(x->end, (size_t)cap * sizeof *e);
        if (!e) return kvc_fail(KVC_ERR_NOMEM, "minmax index (%d units)", cap);
        x->end = e;
        kvc_f16 *m = realloc(x->mm, (size_t)cap * 2 * x->dim * sizeof *m);
        if (!m) return kvc_fail(KVC_ERR_NOMEM, "minmax index (%d units)", cap);
        x->mm = m;
        x->cap = cap;
    }
    int d = x->dim;
    kvc_f16 *mx = x->mm + (size_t)x->n * 2 * d, *mn = mx + d;
    for (int i = 0; i < d; i++) {
        float hi = k[i], lo = k[i];
        for (int t = 1; t < n; t++) {
            float e = k[(size_t)t * ld + i];
            if (e > hi) hi = e;
            if (e < lo) lo = e;
        }
        mx[i] = f16_outward(hi, 1);
        mn[i] = f16_outward(lo, 0);
    }
    x->end[x->n++] = prev + n;
    return KVC_OK;
}

/* b[g] = sum_i max(q_i hi_i, q_i lo_i) for the G rows of q. */
static void bounds_f32(const float *hi, const float *lo, int d, const float *q, int G, int ldq, float *b) {
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * ldq;
        float s = 0.0f;
        for (int i = 0; i < d; i++) {
            float a = qg[i] * hi[i], c = qg[i] * lo[i];
            s += a > c ? a : c;
        }
        b[g] = s;
    }
}

void kvc_minmax_bounds(const kvc_minmax *x, int u, const float *q, int G, int ldq, float *out) {
    float w[2 * MINMAX_MAX_DIM];
    int d = x->dim;
    kvc_dense_k.cvt[KVC_DENSE_F16](x->mm + (size_t)u * 2 * d, (size_t)2 * d, w);
    bounds_f32(w, w + d, d, q, G, ldq, out);
}

static int mm_n_units(const void *index) { return ((const kvc_minmax *)index)->n; }

static kvc_range mm_unit(const void *index, int u) {
    const kvc_minmax *x = index;
    return (kvc_range){u ? x->end[u - 1] : 0, x->end[u]};
}

/* Scalar path (no memory for the split query): per unit, per head. */
static void score_scalar(const kvc_minmax *x, const float *q, int G, int ldq, float *scores) {
    float w[2 * MINMAX_MAX_DIM];
    int d = x->dim;
    for (int u = 0; u < x->n; u++) {
        kvc_dense_k.cvt[KVC_DENSE_F16](x->mm + (size_t)u * 2 * d, (size_t)2 * d, w);
        float best = 0.0f;
        for (int g = 0; g < G; g++) {
            float b;
            bounds_f32(w, w + d, d, q + (size_t)g * ldq, 1, ldq, &b);
            if (g == 0 || b > best) best = b;
        }
        scores[u] = best;
    }
}

/* sum_i max(q_i max_i, q_i min_i) = q⁺·max + q⁻·min with q⁺ = max(q, 0) and
 * q⁻ = min(q, 0): one dot product of the split query [q⁺ | q⁻] with the unit's
 * row [max | min], i.e. the dense f16 qk kernel over the index rows, all heads
 * at once. The per-unit score is the largest head's. */
enum { SCORE_BLOCK = 256 };

static void mm_score(const void *index, const float *q, int G, int ldq, float *scores) {
    const kvc_minmax *x = index;
    int d = x->dim, d2 = 2 * x->dim;
    float *qs = malloc((size_t)G * d2 * sizeof *qs + (size_t)G * SCORE_BLOCK * sizeof(float));
    if (!qs) {
        score_scalar(x, q, G, ldq, scores);
        return;
    }
    float *s = qs + (size_t)G * d2;
    for (int g = 0; g < G; g++)
        for (int i = 0; i < d; i++) {
            float v = q[(size_t)g * ldq + i];
            qs[(size_t)g * d2 + i] = v > 0.0f ? v : 0.0f;
            qs[(size_t)g * d2 + d + i] = v < 0.0f ? v : 0.0f;
        }
    for (int u0 = 0; u0 < x->n; u0 += SCORE_BLOCK) {
        int n = x->n - u0 < SCORE_BLOCK ? x->n - u0 : SCORE_BLOCK;
        kvc_dense_k.qk[KVC_DENSE_F16](x->mm + (size_t)u0 * d2, n, d2, qs, G, d2, s, SCORE_BLOCK);
        for (int j = 0; j < n; j++) {
            float best = s[j];
            for (int g = 1; g < G; g++)
                if (s[(size_t)g * SCORE_BLOCK + j] > best) best = s[(size_t)g * SCORE_BLOCK + j];
            scores[u0 + j] = best;
        }
    }
    free(qs);
}

static uint64_t mm_bytes(const void *index) {
    const kvc_minmax *x = index;
    return sizeof *x + (uint64_t)x->n * (sizeof(int32_t) + 2 * (uint64_t)x->dim * sizeof(kvc_f16));
}

static void mm_free(void *index) {
    kvc_minmax *x = index;
    if (!x) return;
    free(x->end);
    free(x->mm);
    free(x);
}

const kvc_selector_ops kvc_selector_minmax = {
    .name = "minmax",
    .n_units = mm_n_units,
    .unit = mm_unit,
    .score = mm_score,
    .bytes = mm_bytes,
    .free = mm_free,
};
