/* AVX2 min/max block scoring (src/kv/select/minmax_block.h; scalar reference
 * in src/kv/select/minmax_block.c): a block's 16 units are two ymm halves. Per
 * channel the halves' max and min values are widened by VCVTPH2PS and
 * multiplied into four accumulators per head (q⁺ against max, q⁻ against min,
 * per half), heads in pairs (8 accumulators, 4 data and 2 broadcast
 * registers of the 16); the best head is kept per lane. The head loops are
 * unrolled by pragma so the accumulators stay in registers.
 *
 * The blocks stream from memory, and a block is one pass per head pair over
 * its channels: the hardware prefetcher alone leaves the first pass waiting
 * for the lines. So the block PF_BLOCKS ahead is prefetched a line at a time,
 * spread evenly over all the passes of this block, which keeps a few misses in
 * flight while the arithmetic runs (blocks from memory: 0.7-0.8x the time
 * per block; docs/benchmarks.md, "Prefetch that keeps pace"). */
#include <immintrin.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/select/minmax_block.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { HG = 2, PF_BLOCKS = 2 };

/* The prefetch of the block ahead, spread over this block's passes: one line
 * every `every` channel steps (a countdown: the loop is already at the
 * front end's limit in the CPU cache, a per-step address computation cost
 * 20% there). Past `end` nothing is asked for. */
typedef struct {
    const char *line, *end;
    int every, left;
} spread_pf;

/* Channel steps per prefetched line for blocks of `bytes` scored in
 * ceil(G / HG) passes over dim channels (once per call: it is the same for
 * every block); >= 1, so at most the block's lines are asked for. */
static int spread_every(size_t bytes, int G, int dim) {
    size_t lines = (bytes + 63) / 64, steps = (size_t)((G + HG - 1) / HG) * dim;
    return (int)((steps + lines - 1) / lines);
}

ALWAYS_INLINE void spread_step(spread_pf *s) {
    if (--s->left == 0) {
        s->left = s->every;
        if (s->line < s->end) _mm_prefetch(s->line, _MM_HINT_T0);
        s->line += 64;
    }
}

/* 8 codes widened to f32 and mapped by one FMA to step · code + base. */
static inline __m256 q8_values(const uint8_t *p, __m256 st, __m256 bs) {
    __m128i c = _mm_loadl_epi64((const __m128i *)p);
    return _mm256_fmadd_ps(st, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c)), bs);
}

/* One channel's max values (r[0], r[1]: units 0-7, 8-15) and min values
 * (r[2], r[3]) of a block, from f16 or (q8) from codes (minmax_block.h). */
ALWAYS_INLINE void channel_rows(const void *b, int dim, int c, __m256 r[4], const int Q8) {
    if (Q8) {
        const float *base = (const float *)b, *step = base + dim;
        const uint8_t *row = (const uint8_t *)b + (size_t)dim * 2 * sizeof(float) + (size_t)c * 2 * KVC_MM_LANES;
        __m256 bs = _mm256_broadcast_ss(base + c), st = _mm256_broadcast_ss(step + c);
        r[0] = q8_values(row, st, bs), r[1] = q8_values(row + 8, st, bs);
        r[2] = q8_values(row + KVC_MM_LANES, st, bs), r[3] = q8_values(row + KVC_MM_LANES + 8, st, bs);
    } else {
        const kvc_f16 *row = (const kvc_f16 *)b + (size_t)c * 2 * KVC_MM_LANES;
        r[0] = kvc_load_f16x8(row), r[1] = kvc_load_f16x8(row + 8);
        r[2] = kvc_load_f16x8(row + KVC_MM_LANES);
        r[3] = kvc_load_f16x8(row + KVC_MM_LANES + 8);
    }
}

/* The best of heads [0, hg) of qpm over one block, merged into best[0..1]. */
ALWAYS_INLINE void block_heads(const void *b, int dim, const float *qpm, int hg, __m256 *best, int first,
                               spread_pf *pf, const int Q8, const int PF) {
    __m256 a[HG][4];
    const float *qp[HG], *qm[HG];
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++) qp[h] = qpm + (size_t)h * 2 * dim, qm[h] = qp[h] + dim;
    #pragma GCC unroll 16
    for (int h = 0; h < hg; h++)
        #pragma GCC unroll 16
        for (int k = 0; k < 4; k++) a[h][k] = _mm256_setzero_ps();
    for (int c = 0; c < dim; c++) {
        __m256 r[4];
        channel_rows(b, dim, c, r, Q8);
        if (PF) spread_step(pf);
        #pragma GCC unroll 16
        for (int h = 0; h < hg; h++) {
            __m256 p = _mm256_broadcast_ss(qp[h] + c), m = _mm256_broadcast_ss(qm[h] + c);
            a[h][0] = _mm256_fmadd_ps(p, r[0], a[h][0]);
            a[h][1] = _mm256_fmadd_ps(p, r[1], a[h][1]);
            a[h][2] = _mm256_fmadd_ps(m, r[2], a[h][2]);
            a[h][3] = _mm256_fmadd_ps(m, r[3], a[h][3]);
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

/* The best of all G heads over one block, per lane, into best[0..1]; with
 * PF, prefetching the block ahead as pf says. */
ALWAYS_INLINE void block_best_pf(const void *b, int dim, const float *qpm, int G, __m256 best[2], spread_pf *pf,
                                 const int Q8, const int PF) {
    best[0] = best[1] = _mm256_setzero_ps();
    for (int g0 = 0; g0 < G; g0 += HG) {
        const float *q = qpm + (size_t)g0 * 2 * dim;
        if (G - g0 >= 2) block_heads(b, dim, q, 2, best, g0 == 0, pf, Q8, PF);
        else block_heads(b, dim, q, 1, best, g0 == 0, pf, Q8, PF);
    }
}

/* The same, prefetching the block of `bytes` at `ahead` (NULL: none), a line
 * every `every` channel steps (spread_every). */
ALWAYS_INLINE void block_best(const void *b, size_t bytes, const void *ahead, int every, int dim, const float *qpm,
                              int G, __m256 best[2], const int Q8) {
    if (ahead) {
        spread_pf pf = {(const char *)ahead, (const char *)ahead + bytes, every, every};
        block_best_pf(b, dim, qpm, G, best, &pf, Q8, 1);
    } else {
        block_best_pf(b, dim, qpm, G, best, NULL, Q8, 0);
    }
}

static void minmax_score_avx2(const kvc_f16 *blocks, int n, int dim, const float *qpm, int G, float *out) {
    size_t bstride = (size_t)dim * 2 * KVC_MM_LANES;
    int every = spread_every(bstride * sizeof(kvc_f16), G, dim);
    for (int u0 = 0; u0 < n; u0 += KVC_MM_LANES) {
        __m256 best[2];
        const kvc_f16 *b = blocks + (size_t)(u0 / KVC_MM_LANES) * bstride;
        const kvc_f16 *ahead = u0 + PF_BLOCKS * KVC_MM_LANES < n ? b + PF_BLOCKS * bstride : NULL;
        block_best(b, bstride * sizeof *b, ahead, every, dim, qpm, G, best, 0);
        kvc_store16_avx2(out + u0, best[0], best[1], n - u0);
    }
}

/* q8 blocks: whole blocks of 16 units (minmax_block.h). */
static void minmax_score_q8_avx2(const uint8_t *blocks, int nb, int dim, const float *qpm, int G, float *out) {
    size_t bsz = kvc_mm_q8_bytes(dim);
    int every = spread_every(bsz, G, dim);
    for (int k = 0; k < nb; k++) {
        __m256 best[2];
        const uint8_t *b = blocks + (size_t)k * bsz;
        block_best(b, bsz, k + PF_BLOCKS < nb ? b + PF_BLOCKS * bsz : NULL, every, dim, qpm, G, best, 1);
        _mm256_storeu_ps(out + (size_t)k * KVC_MM_LANES, best[0]);
        _mm256_storeu_ps(out + (size_t)k * KVC_MM_LANES + 8, best[1]);
    }
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_minmax_register_avx2(kvc_minmax_kernels *k) {
    k->score = minmax_score_avx2;
    k->score_q8 = minmax_score_q8_avx2;
}
