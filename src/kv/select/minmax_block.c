/* Scalar reference of the min/max block scoring kernel (minmax_block.h) and
 * the registration of its SIMD versions. */
#include "kv/select/minmax_block.h"

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

const kvc_minmax_kernels kvc_minmax_ref = {.score = score_ref};
kvc_minmax_kernels kvc_minmax_k = {.score = score_ref};
