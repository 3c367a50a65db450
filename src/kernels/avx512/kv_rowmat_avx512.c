/* AVX-512 row-block matrix product (src/kv/xform/rowmat.h): columns in
 * blocks of 32 (two zmm, each widened from 16 halves, the last one masked),
 * rows in groups of up to 8, so that the 16 accumulators stay in registers
 * while M's rows stream past; each x element is a broadcast operand of the
 * fused multiply-add. */
#include <immintrin.h>

#include "kv/xform/rowmat.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Rows [0, HG) (a compile-time constant after inlining), columns [j0, j0+32). */
ALWAYS_INLINE void block(const float *x, const int HG, int ldx, const kvc_f16 *m, int k, int ldm, int j0,
                         __mmask16 m0, __mmask16 m1, float *y, int ldy) {
    __m512 a[8][2];
    #pragma GCC unroll 8
    for (int h = 0; h < HG; h++) a[h][0] = a[h][1] = _mm512_setzero_ps();
    for (int i = 0; i < k; i++) {
        const kvc_f16 *row = m + (size_t)i * ldm + j0;
        __m512 r0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, row));
        __m512 r1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, row + 16));
        #pragma GCC unroll 8
        for (int h = 0; h < HG; h++) {
            __m512 b = _mm512_set1_ps(x[(size_t)h * ldx + i]);
            a[h][0] = _mm512_fmadd_ps(b, r0, a[h][0]);
            a[h][1] = _mm512_fmadd_ps(b, r1, a[h][1]);
        }
    }
    #pragma GCC unroll 8
    for (int h = 0; h < HG; h++) {
        _mm512_mask_storeu_ps(y + (size_t)h * ldy + j0, m0, a[h][0]);
        _mm512_mask_storeu_ps(y + (size_t)h * ldy + j0 + 16, m1, a[h][1]);
    }
}

static void rowmat_avx512(const float *x, int G, int ldx, const kvc_f16 *m, int k, int cols, int ldm,
                          float *y, int ldy) {
    for (int j0 = 0; j0 < cols; j0 += 32) {
        int w = cols - j0 < 32 ? cols - j0 : 32;
        __mmask16 m0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
        __mmask16 m1 = (__mmask16)(w > 16 ? (w >= 32 ? 0xffff : (1u << (w - 16)) - 1) : 0);
        for (int g0 = 0; g0 < G; g0 += 8) {
            const float *xg = x + (size_t)g0 * ldx;
            float *yg = y + (size_t)g0 * ldy;
            switch (G - g0 < 8 ? G - g0 : 8) {
            case 1: block(xg, 1, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            case 2: block(xg, 2, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            case 3: block(xg, 3, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            case 4: block(xg, 4, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            case 5: block(xg, 5, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            case 6: block(xg, 6, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            case 7: block(xg, 7, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            default: block(xg, 8, ldx, m, k, ldm, j0, m0, m1, yg, ldy); break;
            }
        }
    }
}

/* Registers this file's kernel (kvc_codecs_init). */
void kvc_rowmat_register_avx512(kvc_rowmat_fn *f) { *f = rowmat_avx512; }
