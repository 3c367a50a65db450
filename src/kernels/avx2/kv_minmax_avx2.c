/* AVX2 min/max block scoring (src/kv/select/minmax_block.h; scalar reference
 * in src/kv/select/minmax_block.c): a block's 16 units are two ymm halves. Per
 * channel the halves' max and min values are widened by VCVTPH2PS and
 * multiplied into four accumulators per head (q⁺ against max, q⁻ against min,
 * per half), heads in pairs (8 accumulators, 4 data and 2 broadcast
 * registers of the 16); the best head is kept per lane. The head loops are
 * unrolled by pragma so the accumulators stay in registers. */
#include <immintrin.h>

#include "kv/select/minmax_block.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { HG = 2 };

static inline __m256 widen(const kvc_f16 *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

/* The best of heads [0, hg) of qpm over one block, merged into best[0..1]. */
ALWAYS_INLINE void block_heads(const kvc_f16 *b, int dim, const float *qpm, int hg, __m256 *best, int first) {
    __m256 a[HG][4];
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++)
        #pragma GCC unroll 16
        for (int k = 0; k < 4; k++) a[h][k] = _mm256_setzero_ps();
    for (int c = 0; c < dim; c++) {
        const kvc_f16 *row = b + (size_t)c * 2 * KVC_MM_LANES;
        __m256 hi0 = widen(row), hi1 = widen(row + 8);
        __m256 lo0 = widen(row + KVC_MM_LANES), lo1 = widen(row + KVC_MM_LANES + 8);
        #pragma GCC unroll 16
        for (int h = 0; h < hg; h++) {
            const float *qp = qpm + (size_t)h * 2 * dim;
            __m256 p = _mm256_broadcast_ss(qp + c), m = _mm256_broadcast_ss(qp + dim + c);
            a[h][0] = _mm256_fmadd_ps(p, hi0, a[h][0]);
            a[h][1] = _mm256_fmadd_ps(p, hi1, a[h][1]);
            a[h][2] = _mm256_fmadd_ps(m, lo0, a[h][2]);
            a[h][3] = _mm256_fmadd_ps(m, lo1, a[h][3]);
        }
    }
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++) {
        __m256 s0 = _mm256_add_ps(a[h][0], a[h][2]), s1 = _mm256_add_ps(a[h][1], a[h][3]);
        if (first && h == 0) {
            best[0] = s0;
            best[1] = s1;
        } else {
            best[0] = _mm256_max_ps(best[0], s0);
            best[1] = _mm256_max_ps(best[1], s1);
        }
    }
}

static void minmax_score_avx2(const kvc_f16 *blocks, int n, int dim, const float *qpm, int G, float *out) {
    size_t bstride = (size_t)dim * 2 * KVC_MM_LANES;
    for (int u0 = 0; u0 < n; u0 += KVC_MM_LANES) {
        const kvc_f16 *b = blocks + (size_t)(u0 / KVC_MM_LANES) * bstride;
        __m256 best[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int g0 = 0; g0 < G; g0 += HG) {
            const float *q = qpm + (size_t)g0 * 2 * dim;
            if (G - g0 >= 2) block_heads(b, dim, q, 2, best, g0 == 0);
            else block_heads(b, dim, q, 1, best, g0 == 0);
        }
        int m = n - u0 < KVC_MM_LANES ? n - u0 : KVC_MM_LANES;
        if (m == KVC_MM_LANES) {
            _mm256_storeu_ps(out + u0, best[0]);
            _mm256_storeu_ps(out + u0 + 8, best[1]);
        } else {
            float tmp[KVC_MM_LANES];
            _mm256_storeu_ps(tmp, best[0]);
            _mm256_storeu_ps(tmp + 8, best[1]);
            for (int i = 0; i < m; i++) out[u0 + i] = tmp[i];
        }
    }
}

/* 8 codes widened to f32 and mapped by one FMA to step · code + base. */
static inline __m256 q8_values(const uint8_t *p, __m256 st, __m256 bs) {
    __m128i c = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_fmadd_ps(st, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)), bs);
}

/* q8 blocks: as block_heads, the values from codes (minmax_block.h). */
ALWAYS_INLINE void block_heads_q8(const uint8_t *b, int dim, const float *qpm, int hg, __m256 *best, int first) {
    const float *base = (const float *)(const void *)b, *step = base + dim;
    const uint8_t *codes = b + (size_t)dim * 2 * sizeof(float);
    __m256 a[HG][4];
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++)
        #pragma GCC unroll 16
        for (int k = 0; k < 4; k++) a[h][k] = _mm256_setzero_ps();
    for (int c = 0; c < dim; c++) {
        const uint8_t *row = codes + (size_t)c * 2 * KVC_MM_LANES;
        __m256 bs = _mm256_broadcast_ss(base + c), st = _mm256_broadcast_ss(step + c);
        __m256 hi0 = q8_values(row, st, bs), hi1 = q8_values(row + 8, st, bs);
        __m256 lo0 = q8_values(row + KVC_MM_LANES, st, bs), lo1 = q8_values(row + KVC_MM_LANES + 8, st, bs);
        #pragma GCC unroll 16
        for (int h = 0; h < hg; h++) {
            const float *qp = qpm + (size_t)h * 2 * dim;
            __m256 p = _mm256_broadcast_ss(qp + c), m = _mm256_broadcast_ss(qp + dim + c);
            a[h][0] = _mm256_fmadd_ps(p, hi0, a[h][0]);
            a[h][1] = _mm256_fmadd_ps(p, hi1, a[h][1]);
            a[h][2] = _mm256_fmadd_ps(m, lo0, a[h][2]);
            a[h][3] = _mm256_fmadd_ps(m, lo1, a[h][3]);
        }
    }
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++) {
        __m256 s0 = _mm256_add_ps(a[h][0], a[h][2]), s1 = _mm256_add_ps(a[h][1], a[h][3]);
        if (first && h == 0) {
            best[0] = s0;
            best[1] = s1;
        } else {
            best[0] = _mm256_max_ps(best[0], s0);
            best[1] = _mm256_max_ps(best[1], s1);
        }
    }
}

static void minmax_score_q8_avx2(const uint8_t *blocks, int nb, int dim, const float *qpm, int G, float *out) {
    size_t bsz = kvc_mm_q8_bytes(dim);
    for (int k = 0; k < nb; k++) {
        const uint8_t *b = blocks + (size_t)k * bsz;
        __m256 best[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int g0 = 0; g0 < G; g0 += HG) {
            const float *q = qpm + (size_t)g0 * 2 * dim;
            if (G - g0 >= 2) block_heads_q8(b, dim, q, 2, best, g0 == 0);
            else block_heads_q8(b, dim, q, 1, best, g0 == 0);
        }
        _mm256_storeu_ps(out + (size_t)k * KVC_MM_LANES, best[0]);
        _mm256_storeu_ps(out + (size_t)k * KVC_MM_LANES + 8, best[1]);
    }
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_minmax_register_avx2(kvc_minmax_kernels *k) {
    k->score = minmax_score_avx2;
    k->score_q8 = minmax_score_q8_avx2;
}
