/* AVX2 row-block matrix product (src/kv/xform/rowmat.h): columns in blocks
 * of 16 (two ymm, widened from 16 halves by F16C; a ragged last block goes
 * through a zero-padded copy of the row and of the result), rows in groups of
 * up to 4, so that the 8 accumulators, two row registers and a broadcast fit
 * the 16 ymm registers. */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/xform/rowmat.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Rows [0, HG) (compile-time constant after inlining), columns [j0, j0 + w),
 * w <= 16: full blocks load M directly, a ragged one through a padded row. */
ALWAYS_INLINE void block(const float *x, const int HG, int ldx, const kvc_f16 *m, int k, int ldm, int j0,
                         int w, float *y, int ldy) {
    __m256 a[4][2];
    #pragma GCC unroll 4
    for (int h = 0; h < HG; h++) a[h][0] = a[h][1] = _mm256_setzero_ps();
    kvc_f16 pad[16] = {0};
    for (int i = 0; i < k; i++) {
        const kvc_f16 *row = m + (size_t)i * ldm + j0;
        if (w < 16) {
            memcpy(pad, row, (size_t)w * sizeof *pad);
            row = pad;
        }
        __m256 r0 = kvc_load_f16x8(row), r1 = kvc_load_f16x8(row + 8);
        #pragma GCC unroll 4
        for (int h = 0; h < HG; h++) {
            __m256 b = _mm256_broadcast_ss(x + (size_t)h * ldx + i);
            a[h][0] = _mm256_fmadd_ps(b, r0, a[h][0]);
            a[h][1] = _mm256_fmadd_ps(b, r1, a[h][1]);
        }
    }
    #pragma GCC unroll 4
    for (int h = 0; h < HG; h++) {
        float out[16];
        _mm256_storeu_ps(out, a[h][0]);
        _mm256_storeu_ps(out + 8, a[h][1]);
        memcpy(y + (size_t)h * ldy + j0, out, (size_t)w * sizeof *out);
    }
}

static void rowmat_avx2(const float *x, int G, int ldx, const kvc_f16 *m, int k, int cols, int ldm,
                        float *y, int ldy) {
    for (int j0 = 0; j0 < cols; j0 += 16) {
        int w = cols - j0 < 16 ? cols - j0 : 16;
        for (int g0 = 0; g0 < G; g0 += 4) {
            const float *xg = x + (size_t)g0 * ldx;
            float *yg = y + (size_t)g0 * ldy;
            switch (G - g0 < 4 ? G - g0 : 4) {
            case 1: block(xg, 1, ldx, m, k, ldm, j0, w, yg, ldy); break;
            case 2: block(xg, 2, ldx, m, k, ldm, j0, w, yg, ldy); break;
            case 3: block(xg, 3, ldx, m, k, ldm, j0, w, yg, ldy); break;
            default: block(xg, 4, ldx, m, k, ldm, j0, w, yg, ldy); break;
            }
        }
    }
}

/* Registers this file's kernel (kvc_codecs_init). */
void kvc_rowmat_register_avx2(kvc_rowmat_fn *f) { *f = rowmat_avx2; }
