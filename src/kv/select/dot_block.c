/* Channel-major unit keys (dot_block.h): the writer and the scalar
 * reference of the scoring kernel. */
#include "kv/select/dot_block.h"

void kvc_db_put(kvc_f16 *blocks, int dim, int u, const float *x) {
    kvc_f16 *b = blocks + (size_t)(u / KVC_DB_LANES) * dim * KVC_DB_LANES + u % KVC_DB_LANES;
    for (int c = 0; c < dim; c++) b[(size_t)c * KVC_DB_LANES] = kvc_f32_to_f16(x[c]);
}

static void score_ref(const kvc_f16 *blocks, int n, int dim, const float *q, int G, int ldq, float *out) {
    for (int u = 0; u < n; u++) {
        const kvc_f16 *b = blocks + (size_t)(u / KVC_DB_LANES) * dim * KVC_DB_LANES + u % KVC_DB_LANES;
        float best = 0.0f;
        for (int g = 0; g < G; g++) {
            float s = 0.0f;
            for (int c = 0; c < dim; c++) s += q[(size_t)g * ldq + c] * kvc_f16_to_f32(b[(size_t)c * KVC_DB_LANES]);
            if (g == 0 || s > best) best = s;
        }
        out[u] = best;
    }
}

const kvc_db_score_fn kvc_db_score_ref = score_ref;
kvc_db_score_fn kvc_db_score = score_ref;
