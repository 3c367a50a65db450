/* Scalar reference of the row-block matrix product (rowmat.h) and the
 * active kernel (SIMD versions registered by kvc_codecs_init). */
#include "kv/xform/rowmat.h"

static void rowmat_scalar(const float *x, int G, int ldx, const kvc_f16 *m, int k, int cols, int ldm,
                          float *y, int ldy) {
    for (int g = 0; g < G; g++)
        for (int j = 0; j < cols; j++) {
            float s = 0.0f;
            for (int i = 0; i < k; i++) s += x[(size_t)g * ldx + i] * kvc_f16_to_f32(m[(size_t)i * ldm + j]);
            y[(size_t)g * ldy + j] = s;
        }
}

const kvc_rowmat_fn kvc_rowmat_ref = rowmat_scalar;
kvc_rowmat_fn kvc_rowmat = rowmat_scalar;
