/* The min/max bound index (minmax.h): per unit the channel-wise key max and
 * min in f16 rounded outward, stored in blocks of 16 units (minmax_block.h),
 * the unit ends in one array, and the bound sum_i max(q_i max_i, q_i min_i)
 * of every unit for all heads of the group in one kernel call.
 *
 * In the q8 format only the open (last, not yet full) block is kept in f16;
 * when its 16th unit arrives it is requantized into an 8-bit block (codes on
 * a per-channel grid over the block's range, rounded outward again) and the
 * f16 block is cleared for the next 16 units. */
#include "kv/select/minmax.h"

#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"
#include "kv/select/minmax_block.h"

enum { MINMAX_MAX_DIM = 1024, QPM_STACK = 8192 };

struct kvc_minmax {
    int dim;
    int n, cap;        /* units; cap is a multiple of KVC_MM_LANES */
    int32_t *end;      /* [cap] token end of unit u (begin = end[u-1] or 0) */
    kvc_f16 *mm;       /* [cap / 16][dim][2][16]: per block and channel, 16 max then 16 min;
                        * q8: the open block only ([1][dim][2][16]) */
    int flags;         /* KVC_MM_*; with KVC_MM_Q8 full blocks live in qb (minmax_block.h, q8 layout) */
    int nq, qcap;      /* q8: full blocks stored, room (blocks) */
    uint8_t *qb;       /* q8: [qcap] blocks of kvc_mm_q8_bytes(dim) */
};

kvc_status kvc_minmax_create_fmt(int dim, int flags, kvc_minmax **out) {
    *out = NULL;
    KVC_CHECK(dim >= 1 && dim <= MINMAX_MAX_DIM, KVC_ERR_ARG, "minmax index: dim %d outside [1, %d]", dim,
              MINMAX_MAX_DIM);
    KVC_CHECK((flags & ~KVC_MM_FLAGS) == 0, KVC_ERR_ARG, "minmax index: flags %#x", (unsigned)flags);
    kvc_minmax *x = calloc(1, sizeof *x);
    if (!x) return kvc_fail(KVC_ERR_NOMEM, "minmax index");
    x->dim = dim;
    x->flags = flags;
    *out = x;
    return KVC_OK;
}

kvc_status kvc_minmax_create(int dim, kvc_minmax **out) { return kvc_minmax_create_fmt(dim, 0, out); }

int kvc_minmax_flags(const kvc_minmax *x) { return x->flags; }

int kvc_minmax_is_q8(const kvc_minmax *x) { return (x->flags & KVC_MM_Q8) != 0; }

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

static size_t block_elems(int dim) { return (size_t)dim * 2 * KVC_MM_LANES; }

/* The f16 of channel c of unit u (in an f16 block): its max (which 0) or min (which 1). */
static kvc_f16 *cell(const kvc_minmax *x, int u, int c, int which) {
    size_t blk = kvc_minmax_is_q8(x) ? 0 : (size_t)(u / KVC_MM_LANES);
    return x->mm + blk * block_elems(x->dim) + (size_t)c * 2 * KVC_MM_LANES + (size_t)which * KVC_MM_LANES +
           u % KVC_MM_LANES;
}

/* Room for one more unit: whole blocks, zeroed (unused lanes score 0); q8:
 * the open f16 block once, and one more q8 block for when it fills. */
static kvc_status reserve_unit(kvc_minmax *x) {
    if (kvc_minmax_is_q8(x) && x->n / KVC_MM_LANES >= x->qcap) {
        int qcap = x->qcap ? x->qcap * 2 : 4;
        uint8_t *qb = realloc(x->qb, (size_t)qcap * kvc_mm_q8_bytes(x->dim));
        if (!qb) return kvc_fail(KVC_ERR_NOMEM, "minmax index (%d blocks)", qcap);
        x->qb = qb;
        x->qcap = qcap;
    }
    if (x->n < x->cap) return KVC_OK;
    int cap = x->cap ? x->cap * 2 : 4 * KVC_MM_LANES;
    int32_t *e = realloc(x->end, (size_t)cap * sizeof *e);
    if (!e) return kvc_fail(KVC_ERR_NOMEM, "minmax index (%d units)", cap);
    x->end = e;
    if (kvc_minmax_is_q8(x)) {
        if (!x->mm) {
            x->mm = calloc(block_elems(x->dim), sizeof *x->mm);
            if (!x->mm) return kvc_fail(KVC_ERR_NOMEM, "minmax index (open block)");
        }
        x->cap = cap;
        return KVC_OK;
    }
    size_t old = (size_t)x->cap / KVC_MM_LANES * block_elems(x->dim);
    size_t all = (size_t)cap / KVC_MM_LANES * block_elems(x->dim);
    kvc_f16 *m = realloc(x->mm, all * sizeof *m);
    if (!m) return kvc_fail(KVC_ERR_NOMEM, "minmax index (%d units)", cap);
    memset(m + old, 0, (all - old) * sizeof *m);
    x->mm = m;
    x->cap = cap;
    return KVC_OK;
}

kvc_status kvc_minmax_add(kvc_minmax *x, const float *k, int n, int ld) {
    KVC_CHECK(n >= 1, KVC_ERR_ARG, "minmax index: unit of %d tokens", n);
    int prev = kvc_minmax_tokens(x);
    KVC_CHECK(prev <= INT32_MAX - n, KVC_ERR_RANGE, "minmax index: %d + %d tokens", prev, n);
    KVC_CHECK(x->n < INT32_MAX / 2, KVC_ERR_RANGE, "minmax index: %d units", x->n);
    KVC_TRY(reserve_unit(x));
    for (int i = 0; i < x->dim; i++) {
        float hi = k[i], lo = k[i];
        for (int t = 1; t < n; t++) {
            float e = k[(size_t)t * ld + i];
            if (e > hi) hi = e;
            if (e < lo) lo = e;
        }
        *cell(x, x->n, i, 0) = f16_outward(hi, 1);
        *cell(x, x->n, i, 1) = f16_outward(lo, 0);
    }
    x->end[x->n++] = prev + n;
    if (kvc_minmax_is_q8(x) && x->n % KVC_MM_LANES == 0) { /* the open block is full: to 8 bits, and cleared */
        kvc_mm_q8_encode(x->mm, x->dim, x->qb + (size_t)x->nq++ * kvc_mm_q8_bytes(x->dim));
        memset(x->mm, 0, block_elems(x->dim) * sizeof *x->mm);
    }
    return KVC_OK;
}

/* The max (which 0) or min (which 1) of channel c of unit u as the index holds it. */
static float stored(const kvc_minmax *x, int u, int c, int which) {
    if (kvc_minmax_is_q8(x) && u / KVC_MM_LANES < x->nq)
        return kvc_mm_q8_value(x->qb + (size_t)(u / KVC_MM_LANES) * kvc_mm_q8_bytes(x->dim), x->dim,
                               u % KVC_MM_LANES, c, which);
    return kvc_f16_to_f32(*cell(x, u, c, which));
}

void kvc_minmax_bounds(const kvc_minmax *x, int u, const float *q, int G, int ldq, float *out) {
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * ldq;
        float s = 0.0f;
        for (int i = 0; i < x->dim; i++) {
            float a = qg[i] * stored(x, u, i, 0), c = qg[i] * stored(x, u, i, 1);
            s += a > c ? a : c;
        }
        out[g] = s;
    }
}

void kvc_minmax_unit_range(const kvc_minmax *x, int u, int c, float *mx, float *mn) {
    *mx = stored(x, u, c, 0);
    *mn = stored(x, u, c, 1);
}

static int mm_n_units(const void *index) { return ((const kvc_minmax *)index)->n; }

static kvc_range mm_unit(const void *index, int u) {
    const kvc_minmax *x = index;
    return (kvc_range){u ? x->end[u - 1] : 0, x->end[u]};
}

static const int32_t *mm_ends(const void *index) { return ((const kvc_minmax *)index)->end; }

/* Per unit, the best head's bound one head at a time (no memory for the
 * split query of all heads). */
static void score_per_head(const kvc_minmax *x, const float *q, int G, int ldq, int u0, int u1, float *scores) {
    float b;
    for (int u = u0; u < u1; u++)
        for (int g = 0; g < G; g++) {
            kvc_minmax_bounds(x, u, q + (size_t)g * ldq, 1, ldq, &b);
            if (g == 0 || b > scores[u - u0]) scores[u - u0] = b;
        }
}

/* qpm [heads][q⁺ | q⁻] from q [G][ldq]: one row per head, or with the heads
 * summed one row of sum_g q⁺_g and sum_g q⁻_g (minmax.h). */
static void split_query(const float *q, int G, int ldq, int d, int summed, float *qpm) {
    memset(qpm, 0, (size_t)(summed ? 1 : G) * 2 * d * sizeof *qpm);
    for (int g = 0; g < G; g++) {
        float *row = qpm + (summed ? 0 : (size_t)g * 2 * d);
        for (int i = 0; i < d; i++) {
            float v = q[(size_t)g * ldq + i];
            row[i] += v > 0.0f ? v : 0.0f;
            row[d + i] += v < 0.0f ? v : 0.0f;
        }
    }
}

/* The split query and one call of the block kernel over units [u0, u1) (u0
 * a multiple of 16: a block boundary). */
static void mm_score_range(const void *index, const float *q, int G, int ldq, int u0, int u1, float *scores) {
    const kvc_minmax *x = index;
    int d = x->dim;
    if (G < 1 || u1 <= u0) return;
    int summed = (x->flags & KVC_MM_HEADS_SUM) != 0;
    int rows = summed ? 1 : G; /* 2 · d <= QPM_STACK: summed queries never allocate */
    float stack[QPM_STACK];
    size_t need = (size_t)rows * 2 * d;
    float *qpm = need <= QPM_STACK ? stack : malloc(need * sizeof *qpm);
    if (!qpm) {
        score_per_head(x, q, G, ldq, u0, u1, scores);
        return;
    }
    split_query(q, G, ldq, d, summed, qpm);
    if (kvc_minmax_is_q8(x)) { /* full blocks in 8 bits, then the open f16 block */
        int full = x->nq * KVC_MM_LANES;
        if (u0 < full) {
            int e = u1 < full ? u1 : full; /* a multiple of 16 */
            kvc_minmax_k.score_q8(x->qb + (size_t)(u0 / KVC_MM_LANES) * kvc_mm_q8_bytes(d), (e - u0) / KVC_MM_LANES,
                                  d, qpm, rows, scores);
        }
        if (u1 > full) {
            int b = u0 > full ? u0 : full; /* the open block starts at full */
            kvc_minmax_k.score(x->mm + (size_t)(b - full) / KVC_MM_LANES * block_elems(d), u1 - b, d, qpm, rows,
                               scores + (b - u0));
        }
    } else {
        kvc_minmax_k.score(x->mm + (size_t)(u0 / KVC_MM_LANES) * block_elems(d), u1 - u0, d, qpm, rows, scores);
    }
    if (qpm != stack) free(qpm);
}

static void mm_score(const void *index, const float *q, int G, int ldq, float *scores) {
    mm_score_range(index, q, G, ldq, 0, ((const kvc_minmax *)index)->n, scores);
}

static uint64_t mm_bytes(const void *index) {
    const kvc_minmax *x = index;
    uint64_t blocks = ((uint64_t)x->n + KVC_MM_LANES - 1) / KVC_MM_LANES;
    if (kvc_minmax_is_q8(x)) /* the q8 blocks held and the open f16 block */
        return sizeof *x + (uint64_t)x->n * sizeof(int32_t) + (uint64_t)x->nq * kvc_mm_q8_bytes(x->dim) +
               (x->mm ? block_elems(x->dim) * sizeof(kvc_f16) : 0);
    return sizeof *x + (uint64_t)x->n * sizeof(int32_t) + blocks * block_elems(x->dim) * sizeof(kvc_f16);
}

static void mm_free(void *index) {
    kvc_minmax *x = index;
    if (!x) return;
    free(x->end);
    free(x->mm);
    free(x->qb);
    free(x);
}

const kvc_selector_ops kvc_selector_minmax = {
    .name = "minmax",
    .n_units = mm_n_units,
    .unit = mm_unit,
    .ends = mm_ends,
    .score = mm_score,
    .score_range = mm_score_range,
    .bytes = mm_bytes,
    .free = mm_free,
};
