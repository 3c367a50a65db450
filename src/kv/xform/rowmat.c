/* Scalar reference of the row-block matrix product (rowmat.h) and the
 * registration of its SIMD versions. */
#include "kv/xform/rowmat.h"

static void rowmat_scalar(const float *x, int G, int ldx, const float *m, int k, int cols, int ldm, float *y,
                          int ldy) {
    for (int g = 0; g < G; g++)
        for (int j = 0; j < cols; j++) {
            float s = 0.0f;
            for (int i = 0; i < k; i++) s += x[(size_t)g * ldx + i] * m[(size_t)i * ldm + j];
            y[(size_t)g * ldy + j] = s;
        }
}

const kvc_rowmat_fn kvc_rowmat_ref = rowmat_scalar;
kvc_rowmat_fn kvc_rowmat = rowmat_scalar;

void kvc_rowmat_init(kvc_isa isa) {
    kvc_rowmat = rowmat_scalar;
    if (isa >= KVC_ISA_AVX2) kvc_rowmat = kvc_rowmat_avx2;
    if (isa >= KVC_ISA_AVX512) kvc_rowmat = kvc_rowmat_avx512;
}
