/* AVX2 kernels of PackKV's grouped layout (packkv.h, docs/formats.md). AVX2
 * has no byte permute across lanes nor per-byte shifts, so these are the
 * paper layout's float kernels (kv_packkv_avx2.c) with the residuals fetched
 * at the grouped layout's bit positions: 8 tokens of one channel in the 8
 * lanes, each 128-bit half loaded from its own base (so that vpshufb stays
 * inside 16 bytes), vpshufb by a table of the width and the channel's place
 * in its unit, vpsrlvd, a mask and a conversion, then one FMA per head.
 *
 * q.k, units of 16 tokens x 4 channels (residual 4t + c'): tokens 0-3 of
 * channel c' lie in the unit's first 2w bytes, tokens 4-7 in the next 2w, and
 * so on. p.v, units of 16 channels x 16 tokens in runs of 4 tokens (residual
 * 64 (t/4) + 4c' + t%4): tokens 4r .. 4r+3 of channel c' lie in run r's 8w
 * bytes from bit 4c'w. Results equal the scalar reference up to the order of
 * float sums, as the paper layout's AVX2 kernels do. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx2/kv_packkv_avx2.h"

/* [w][c'] vpshufb and shift tables of 4 tokens (one 128-bit half, repeated in
 * both halves): keys from bit (4t + c')w, values from bit (4c' + t)w. */
static uint8_t kshuf[9][4][32] __attribute__((aligned(32)));
static uint32_t kshift[9][4][8] __attribute__((aligned(32)));
static uint8_t vshuf[9][16][32] __attribute__((aligned(32)));
static uint32_t vshift[9][16][8] __attribute__((aligned(32)));

static void table_entry(uint8_t *shuf, uint32_t *shift, int w, int lane, int bit) {
    int byte = bit >> 3;
    for (int half = 0; half < 2; half++) {
        uint8_t *s = shuf + 16 * half + 4 * lane;
        memset(s, 0x80, 4);
        if (w) {
            s[0] = (uint8_t)byte;
            s[1] = byte + 1 < 16 ? (uint8_t)(byte + 1) : 0x80; /* w = 8: aligned, one byte */
        }
        shift[4 * half + lane] = (uint32_t)(bit & 7);
    }
}

void kvc_pk_grouped_init_avx2(void) {
    for (int w = 0; w <= 8; w++)
        for (int t = 0; t < 4; t++) {
            for (int c = 0; c < KVC_PK_KGROUP; c++)
                table_entry(kshuf[w][c], kshift[w][c], w, t, (4 * t + c) * w);
            for (int c = 0; c < KVC_PK_VGROUP; c++) /* relative to byte 4cw/8 */
                table_entry(vshuf[w][c], vshift[w][c], w, t, (4 * c * w & 7) + t * w);
        }
}

/* 8 residuals of width w as floats: lanes 0-3 from the 16 bytes at lo, lanes
 * 4-7 from those at hi, placed by the tables. */
static inline __attribute__((always_inline)) __m256 fetch8(const uint8_t *lo, const uint8_t *hi,
                                                           int w, const uint8_t *shuf,
                                                           const uint32_t *shift) {
    __m256i x = _mm256_loadu2_m128i((const __m128i *)hi, (const __m128i *)lo);
    x = _mm256_shuffle_epi8(x, _mm256_load_si256((const __m256i *)shuf));
    x = _mm256_srlv_epi32(x, _mm256_load_si256((const __m256i *)shift));
    x = _mm256_and_si256(x, _mm256_set1_epi32((1 << w) - 1));
    return _mm256_cvtepi32_ps(x);
}

/* ---- qk ------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void qkg_heads(const kvc_pk_block *b, const float *q,
                                                            int ldq, int j0, int j1, float *s,
                                                            int lds, const int NH) {
    const int dim = b->dim, ng = dim / KVC_PK_KGROUP, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    float qsum[4];
    #pragma GCC unroll 4
    for (int h = 0; h < NH; h++) qsum[h] = kvc_pk_sum_f32_avx2(q + (size_t)h * ldq, dim);
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0 * ng);
    for (int p = p0; p < p1; p++) {
        __m256 acc[4][2];
        #pragma GCC unroll 4
        for (int h = 0; h < NH; h++) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int g = 0; g < ng; g++) {
            int w = kvc_pk_unit_width(b, p * ng + g);
            for (int k = 0; k < KVC_PK_KGROUP; k++) {
                __m256 r0 = fetch8(src, src + 2 * w, w, kshuf[w][k], kshift[w][k]);
                __m256 r1 = fetch8(src + 4 * w, src + 6 * w, w, kshuf[w][k], kshift[w][k]);
                #pragma GCC unroll 4
                for (int h = 0; h < NH; h++) {
                    __m256 qc = _mm256_broadcast_ss(q + (size_t)h * ldq + KVC_PK_KGROUP * g + k);
                    acc[h][0] = _mm256_fmadd_ps(r0, qc, acc[h][0]);
                    acc[h][1] = _mm256_fmadd_ps(r1, qc, acc[h][1]);
                }
            }
            src += 8 * w;
        }
        #pragma GCC unroll 4
        for (int h = 0; h < NH; h++) {
            float dmin = kvc_pk_dot_u8_avx2(q + (size_t)h * ldq, b->pmins + (size_t)p * dim, dim);
            for (int half = 0; half < 2; half++) {
                int first = 16 * p + 8 * half;
                kvc_pk_store_scores8_avx2(b, acc[h][half], dmin, qsum[h], first, j0, j1,
                                          s + (size_t)h * lds);
            }
        }
    }
}

void kvc_pk_qk_grouped_avx2(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1,
                            float *s, int lds) {
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *qh = q + (size_t)h0 * ldq;
        float *sh = s + (size_t)h0 * lds;
        switch (G - h0 < 4 ? G - h0 : 4) {
        case 1: qkg_heads(b, qh, ldq, j0, j1, sh, lds, 1); break;
        case 2: qkg_heads(b, qh, ldq, j0, j1, sh, lds, 2); break;
        case 3: qkg_heads(b, qh, ldq, j0, j1, sh, lds, 3); break;
        default: qkg_heads(b, qh, ldq, j0, j1, sh, lds, 4); break;
        }
    }
}

/* ---- pv ------------------------------------------------------------------------ */

enum { MAXP = KVC_PK_MAX_BLOCK / 16 };

static inline __attribute__((always_inline)) void pvg_heads(const kvc_pk_block *b, const float *p,
                                                            int ldp, int j0, int j1, float *o,
                                                            int ldo, const int NH) {
    const int np = b->np, ncg = b->dim / KVC_PK_VGROUP, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    __m256 wv[4][2 * MAXP];
    float wsum[4][MAXP], mterm[4];
    #pragma GCC unroll 4
    for (int h = 0; h < NH; h++)
        mterm[h] = kvc_pk_weights_avx2(b, p + (size_t)h * ldp, j0, j1, 2, wv[h], wsum[h]);
    uint32_t off[MAXP + 1]; /* byte offsets of the units of one channel group */
    const uint8_t *src = b->data;
    for (int cg = 0; cg < ncg; cg++) {
        off[0] = 0;
        for (int pk = 0; pk < np; pk++)
            off[pk + 1] = off[pk] + 32u * (uint32_t)kvc_pk_unit_width(b, cg * np + pk);
        for (int k = 0; k < KVC_PK_VGROUP; k++) {
            const int c = KVC_PK_VGROUP * cg + k, at = 4 * k;
            __m256 acc[4];
            float pm[4];
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) acc[h] = _mm256_setzero_ps(), pm[h] = mterm[h];
            for (int pk = p0; pk < p1; pk++) {
                int u = cg * np + pk, w = kvc_pk_unit_width(b, u);
                const uint8_t *run = src + off[pk] + (at * w >> 3);
                __m256 r0 = fetch8(run, run + 8 * w, w, vshuf[w][k], vshift[w][k]);
                __m256 r1 = fetch8(run + 16 * w, run + 24 * w, w, vshuf[w][k], vshift[w][k]);
                float m = (float)b->pmins[u * KVC_PK_VGROUP + k];
                #pragma GCC unroll 4
                for (int h = 0; h < NH; h++) {
                    acc[h] = _mm256_fmadd_ps(r0, wv[h][2 * pk], acc[h]);
                    acc[h] = _mm256_fmadd_ps(r1, wv[h][2 * pk + 1], acc[h]);
                    pm[h] += m * wsum[h][pk];
                }
            }
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++)
                o[(size_t)h * ldo + c] += kvc_hsum256_ps(acc[h]) + pm[h];
        }
        src += off[np];
    }
}

void kvc_pk_pv_grouped_avx2(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1,
                            float *o, int ldo) {
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *ph = p + (size_t)h0 * ldp;
        float *oh = o + (size_t)h0 * ldo;
        switch (G - h0 < 4 ? G - h0 : 4) {
        case 1: pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 1); break;
        case 2: pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 2); break;
        case 3: pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 3); break;
        default: pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 4); break;
        }
    }
}
