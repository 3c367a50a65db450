/* Scalar reference of the min/max block scoring kernels (minmax_block.h),
 * the q8 block encoder, and the registration of the SIMD versions. */
#include "kv/select/minmax_block.h"

#include <math.h>

static void score_ref(const kvc_f16 *blocks, int n, int dim, const float *qpm, int G, float *out) {
    for (int u = 0; u < n; u++) {
        const kvc_f16 *b = blocks + (size_t)(u / KVC_MM_LANES) * dim * 2 * KVC_MM_LANES;
        int lane = u % KVC_MM_LANES;
        float best = 0.0f;
        for (int g = 0; g < G; g++) {
            const float *qp = qpm + (size_t)g * 2 * dim, *qm = qp + dim;
            float s = 0.0f;
            for (int c = 0; c < dim; c++) {
                const kvc_f16 *row = b + (size_t)c * 2 * KVC_MM_LANES;
                s += qp[c] * kvc_f16_to_f32(row[lane]) + qm[c] * kvc_f16_to_f32(row[KVC_MM_LANES + lane]);
            }
            if (g == 0 || s > best) best = s;
        }
        out[u] = best;
    }
}

enum { F16_MAX = 65504 };

static float clamp16(float f) { return f > F16_MAX ? F16_MAX : f < -F16_MAX ? -F16_MAX : f; }

void kvc_mm_q8_encode(const kvc_f16 *blk, int dim, uint8_t *out) {
    float *base = (float *)(void *)out, *step = base + dim;
    uint8_t *codes = out + (size_t)dim * 2 * sizeof(float);
    for (int c = 0; c < dim; c++) {
        const kvc_f16 *row = blk + (size_t)c * 2 * KVC_MM_LANES;
        float mx[KVC_MM_LANES], mn[KVC_MM_LANES], hi = -F16_MAX, lo = F16_MAX;
        for (int u = 0; u < KVC_MM_LANES; u++) {
            mx[u] = clamp16(kvc_f16_to_f32(row[u]));
            mn[u] = clamp16(kvc_f16_to_f32(row[KVC_MM_LANES + u]));
            if (mx[u] > hi) hi = mx[u];
            if (mn[u] < lo) lo = mn[u];
        }
        if (hi < lo) hi = lo; /* NaN-only channel: an empty grid at lo */
        float st = (hi - lo) / 255.0f;
        while (fmaf(st, 255.0f, lo) < hi) st = nextafterf(st, INFINITY); /* the grid reaches hi */
        uint8_t *cm = codes + (size_t)c * 2 * KVC_MM_LANES, *cn = cm + KVC_MM_LANES;
        for (int u = 0; u < KVC_MM_LANES; u++) {
            int a = 255, b = 0;
            if (st > 0.0f) {
                float ta = ceilf((mx[u] - lo) / st), tb = floorf((mn[u] - lo) / st);
                a = !(ta >= 0.0f) ? (ta < 0.0f ? 0 : 255) : ta > 255.0f ? 255 : (int)ta; /* NaN: 255 */
                b = !(tb <= 255.0f) ? (tb > 255.0f ? 255 : 0) : tb < 0.0f ? 0 : (int)tb; /* NaN: 0 */
                while (a < 255 && fmaf(st, (float)a, lo) < mx[u]) a++; /* outward: max up */
                while (a > 0 && fmaf(st, (float)(a - 1), lo) >= mx[u]) a--; /* but the smallest such */
                while (b > 0 && fmaf(st, (float)b, lo) > mn[u]) b--;   /* min down */
                while (b < 255 && fmaf(st, (float)(b + 1), lo) <= mn[u]) b++;
            }
            cm[u] = (uint8_t)a;
            cn[u] = (uint8_t)b;
        }
        base[c] = lo;
        step[c] = st;
    }
}

float kvc_mm_q8_value(const uint8_t *blk, int dim, int u, int c, int which) {
    const float *base = (const float *)(const void *)blk, *step = base + dim;
    const uint8_t *codes = blk + (size_t)dim * 2 * sizeof(float);
    return fmaf(step[c], (float)codes[(size_t)c * 2 * KVC_MM_LANES + (size_t)which * KVC_MM_LANES + u], base[c]);
}

static void score_q8_ref(const uint8_t *blocks, int nb, int dim, const float *qpm, int G, float *out) {
    size_t bs = kvc_mm_q8_bytes(dim);
    for (int u = 0; u < nb * KVC_MM_LANES; u++) {
        const uint8_t *b = blocks + (size_t)(u / KVC_MM_LANES) * bs;
        int lane = u % KVC_MM_LANES;
        float best = 0.0f;
        for (int g = 0; g < G; g++) {
            const float *qp = qpm + (size_t)g * 2 * dim, *qm = qp + dim;
            float s = 0.0f;
            for (int c = 0; c < dim; c++)
                s += qp[c] * kvc_mm_q8_value(b, dim, lane, c, 0) + qm[c] * kvc_mm_q8_value(b, dim, lane, c, 1);
            if (g == 0 || s > best) best = s;
        }
        out[u] = best;
    }
}

const kvc_minmax_kernels kvc_minmax_ref = {.score = score_ref, .score_q8 = score_q8_ref};
kvc_minmax_kernels kvc_minmax_k = {.score = score_ref, .score_q8 = score_q8_ref};
