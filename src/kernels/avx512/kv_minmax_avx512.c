/* AVX-512 min/max block scoring (src/kv/select/minmax_block.h; scalar
 * reference in src/kv/select/minmax_block.c): one zmm lane per unit, 16 units
 * per block. Per channel the block's 16 max and 16 min values are widened by
 * VCVTPH2PS and multiplied into two accumulators per head (q⁺ against max,
 * q⁻ against min: independent FMA chains), heads in groups of up to 4 with the
 * group size a compile-time constant; the group's best head is kept per lane.
 * A block of 64 channels is 4 KiB, so a second head group rereads it from L1.
 * The head loops are unrolled by pragma: without it GCC kept the
 * accumulators on the stack (a store and a reload per FMA), 3.4x slower on
 * blocks in L2 (docs/benchmarks.md, "SentKV toward 5x"). */
#include <immintrin.h>

#include "kv/select/minmax_block.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { HG = 4 };

/* One channel's 16 max (*hi) and 16 min (*lo) values of a block: f16 widened
 * by VCVTPH2PS, or (q8) the codes widened (VPMOVZXBD, VCVTDQ2PS) and mapped
 * by one FMA with the channel's step and base, as the reference's fmaf. */
ALWAYS_INLINE void channel_rows(const void *b, int dim, int c, __m512 *hi, __m512 *lo, const int Q8) {
    if (Q8) {
        const float *base = (const float *)b, *step = base + dim;
        const uint8_t *row = (const uint8_t *)b + (size_t)dim * 2 * sizeof(float) + (size_t)c * 2 * KVC_MM_LANES;
        __m512 bs = _mm512_set1_ps(base[c]), st = _mm512_set1_ps(step[c]);
        *hi = _mm512_fmadd_ps(st, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)row))), bs);
        *lo = _mm512_fmadd_ps(st, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + KVC_MM_LANES)))), bs);
    } else {
        const kvc_f16 *row = (const kvc_f16 *)b + (size_t)c * 2 * KVC_MM_LANES;
        *hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)row));
        *lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + KVC_MM_LANES)));
    }
}

/* The best of heads [0, hg) of qpm over one block, merged into *best. */
ALWAYS_INLINE void block_heads(const void *b, int dim, const float *qpm, int hg, __m512 *best, int first, const int Q8) {
    __m512 ah[HG], al[HG];
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++) ah[h] = al[h] = _mm512_setzero_ps();
    for (int c = 0; c < dim; c++) {
        __m512 hi, lo;
        channel_rows(b, dim, c, &hi, &lo, Q8);
        #pragma GCC unroll 16
        for (int h = 0; h < hg; h++) {
            const float *qp = qpm + (size_t)h * 2 * dim;
            ah[h] = _mm512_fmadd_ps(_mm512_set1_ps(qp[c]), hi, ah[h]);
            al[h] = _mm512_fmadd_ps(_mm512_set1_ps(qp[dim + c]), lo, al[h]);
        }
    }
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++) {
        __m512 s = _mm512_add_ps(ah[h], al[h]);
        *best = first && h == 0 ? s : _mm512_max_ps(*best, s);
    }
}

/* The best of all G heads over one block, per lane. */
ALWAYS_INLINE __m512 block_best(const void *b, int dim, const float *qpm, int G, const int Q8) {
    __m512 best = _mm512_setzero_ps();
    for (int g0 = 0; g0 < G; g0 += HG) {
        const float *q = qpm + (size_t)g0 * 2 * dim;
        switch (G - g0 < HG ? G - g0 : HG) {
        case 1: block_heads(b, dim, q, 1, &best, g0 == 0, Q8); break;
        case 2: block_heads(b, dim, q, 2, &best, g0 == 0, Q8); break;
        case 3: block_heads(b, dim, q, 3, &best, g0 == 0, Q8); break;
        default: block_heads(b, dim, q, 4, &best, g0 == 0, Q8); break;
        }
    }
    return best;
}

static void minmax_score_avx512(const kvc_f16 *blocks, int n, int dim, const float *qpm, int G, float *out) {
    size_t bstride = (size_t)dim * 2 * KVC_MM_LANES;
    for (int u0 = 0; u0 < n; u0 += KVC_MM_LANES) {
        __m512 best = block_best(blocks + (size_t)(u0 / KVC_MM_LANES) * bstride, dim, qpm, G, 0);
        int m = n - u0 < KVC_MM_LANES ? n - u0 : KVC_MM_LANES;
        _mm512_mask_storeu_ps(out + u0, (__mmask16)((1u << m) - 1u), best);
    }
}

/* q8 blocks: whole blocks of 16 units (minmax_block.h). */
static void minmax_score_q8_avx512(const uint8_t *blocks, int nb, int dim, const float *qpm, int G, float *out) {
    size_t bs = kvc_mm_q8_bytes(dim);
    for (int k = 0; k < nb; k++)
        _mm512_storeu_ps(out + (size_t)k * KVC_MM_LANES, block_best(blocks + (size_t)k * bs, dim, qpm, G, 1));
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_minmax_register_avx512(kvc_minmax_kernels *k) {
    k->score = minmax_score_avx512;
    k->score_q8 = minmax_score_q8_avx512;
}
