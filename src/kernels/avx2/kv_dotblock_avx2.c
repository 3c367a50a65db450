/* AVX2 scoring of channel-major unit keys (src/kv/select/dot_block.h; scalar
 * reference in src/kv/select/dot_block.c): a block's 16 units are two ymm
 * halves; per channel both halves are widened by VCVTPH2PS and multiplied
 * into two accumulators per head, heads up to 4 at a time (8 accumulators,
 * 2 data registers and a broadcast of the 16); the best head is kept per
 * lane. Head loops are unrolled by pragma so the accumulators stay in
 * registers. */
#include <immintrin.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/select/dot_block.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { HG = 4 };

/* Heads [0, hg) of q (hg a compile-time constant after inlining) over one
 * block, merged into best[0..1] (set by the first head when first). */
ALWAYS_INLINE void block_heads(const kvc_f16 *b, int dim, const float *q, int ldq, const int hg, __m256 best[2],
                               int first) {
    __m256 a[HG][2];
    #pragma GCC unroll 4
    for (int h = 0; h < hg; h++) a[h][0] = a[h][1] = _mm256_setzero_ps();
    for (int c = 0; c < dim; c++) {
        const kvc_f16 *row = b + (size_t)c * KVC_DB_LANES;
        __m256 r0 = kvc_load_f16x8(row), r1 = kvc_load_f16x8(row + 8);
        #pragma GCC unroll 4
        for (int h = 0; h < hg; h++) {
            __m256 x = _mm256_broadcast_ss(q + (size_t)h * ldq + c);
            a[h][0] = _mm256_fmadd_ps(x, r0, a[h][0]);
            a[h][1] = _mm256_fmadd_ps(x, r1, a[h][1]);
        }
    }
    #pragma GCC unroll 4
    for (int h = 0; h < hg; h++) {
        if (first && h == 0) {
            best[0] = a[h][0];
            best[1] = a[h][1];
        } else {
            best[0] = _mm256_max_ps(best[0], a[h][0]);
            best[1] = _mm256_max_ps(best[1], a[h][1]);
        }
    }
}

static void score_avx2(const kvc_f16 *blocks, int n, int dim, const float *q, int G, int ldq, float *out) {
    size_t bstride = (size_t)dim * KVC_DB_LANES;
    for (int u0 = 0; u0 < n; u0 += KVC_DB_LANES) {
        const kvc_f16 *b = blocks + (size_t)(u0 / KVC_DB_LANES) * bstride;
        __m256 best[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int g0 = 0; g0 < G; g0 += HG) {
            const float *qg = q + (size_t)g0 * ldq;
            switch (G - g0 < HG ? G - g0 : HG) {
            case 1: block_heads(b, dim, qg, ldq, 1, best, g0 == 0); break;
            case 2: block_heads(b, dim, qg, ldq, 2, best, g0 == 0); break;
            case 3: block_heads(b, dim, qg, ldq, 3, best, g0 == 0); break;
            default: block_heads(b, dim, qg, ldq, 4, best, g0 == 0); break;
            }
        }
        kvc_store16_avx2(out + u0, best[0], best[1], n - u0);
    }
}

/* Registers this file's kernel (kvc_codecs_init). */
void kvc_db_register_avx2(kvc_db_score_fn *f) { *f = score_avx2; }
