/* AVX2 kernels of the PackKV codecs (packkv.h), packs of 8 and 16 tokens, in
 * the paper's layout; grouped blocks go to kv_packkv_grouped_avx2.c.
 *
 * Unpacking 8 residuals of w bits (w bytes) into the 8 lanes of a register:
 * one 16-byte load broadcast to both 128-bit lanes, vpshufb with the width's
 * table (lane t gets bytes floor(t*w/8) and the next), vpsrlvd by (t*w) mod 8
 * and a mask of w bits. A pack of 16 is two such halves, the second starting
 * at byte w (token 8 begins at bit 8w). The residuals stay in registers.
 *
 * qk (key blocks, pack-major): per pack, tokens in lanes, one unpack and one
 * FMA per head and half per channel, up to 4 heads per unpack; scale, min
 * and sum_c q_c pmin_c once per pack. pv (value blocks, channel-major): per
 * channel, the packs of the range times the precomputed weights p_t s_t, one
 * accumulator per head and half, one horizontal sum per channel and block,
 * up to 4 heads per unpack. Results equal the scalar reference up to the
 * order of float sums. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx2/kv_packkv_avx2.h"

static uint8_t shuf8[9][32] __attribute__((aligned(32)));
static uint32_t shift8[9][8] __attribute__((aligned(32)));

static void build_tables(void) {
    for (int w = 0; w <= 8; w++)
        for (int t = 0; t < 8; t++) {
            int byte = t * w / 8, at = 16 * (t / 4) + 4 * (t % 4);
            memset(&shuf8[w][at], 0x80, 4);
            if (w) {
                shuf8[w][at] = (uint8_t)byte;
                shuf8[w][at + 1] = (uint8_t)(byte + 1);
            }
            shift8[w][t] = (uint32_t)(t * w % 8);
        }
}

/* The 8 residuals at src (width w) as floats. */
static inline __attribute__((always_inline)) __m256 unpack8(const uint8_t *src, int w) {
    __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)src));
    x = _mm256_shuffle_epi8(x, _mm256_load_si256((const __m256i *)shuf8[w]));
    x = _mm256_srlv_epi32(x, _mm256_load_si256((const __m256i *)shift8[w]));
    x = _mm256_and_si256(x, _mm256_set1_epi32((1 << w) - 1));
    return _mm256_cvtepi32_ps(x);
}

static inline int width_of(const kvc_pk_block *b, int item) {
    return (b->widths[item >> 1] >> ((item & 1) * 4)) & 15;
}

/* ---- qk ------------------------------------------------------------------------ */

/* One pack (8 or 16 tokens = NHALF halves) of NH heads. */
static inline __attribute__((always_inline)) void qk_heads(const kvc_pk_block *b, const float *q,
                                                           int ldq, int j0, int j1, float *s,
                                                           int lds, const int NH, const int NHALF) {
    const int dim = b->dim, P = 8 * NHALF, p0 = j0 / P, p1 = (j1 + P - 1) / P;
    float qsum[4];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; h++) qsum[h] = kvc_pk_sum_f32_avx2(q + (size_t)h * ldq, dim);
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0 * dim);
    for (int p = p0; p < p1; p++) {
        const int item0 = p * dim;
        __m256 acc[4][2];
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int c = 0; c < dim; c++) {
            int w = width_of(b, item0 + c);
            __m256 r0 = unpack8(src, w), r1 = NHALF == 2 ? unpack8(src + w, w) : r0;
            src += NHALF * w;
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) {
                __m256 qc = _mm256_broadcast_ss(q + (size_t)h * ldq + c);
                acc[h][0] = _mm256_fmadd_ps(r0, qc, acc[h][0]);
                if (NHALF == 2) acc[h][1] = _mm256_fmadd_ps(r1, qc, acc[h][1]);
            }
        }
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            float dmin = kvc_pk_dot_u8_avx2(q + (size_t)h * ldq, b->pmins + item0, dim);
            #pragma GCC unroll 2
            for (int half = 0; half < NHALF; half++) {
                int first = P * p + 8 * half;
                kvc_pk_store_scores8_avx2(b, acc[h][half], dmin, qsum[h], first, j0, j1,
                                          s + (size_t)h * lds);
            }
        }
    }
}

static void qk_avx2(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1, float *s,
                    int lds) {
    if (b->group != 1) {
        kvc_pk_qk_grouped_avx2(b, q, ldq, G, j0, j1, s, lds);
        return;
    }
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *qh = q + (size_t)h0 * ldq;
        float *sh = s + (size_t)h0 * lds;
        int nh = G - h0 < 4 ? G - h0 : 4;
        if (b->pack == 16) {
            switch (nh) {
            case 1: qk_heads(b, qh, ldq, j0, j1, sh, lds, 1, 2); break;
            case 2: qk_heads(b, qh, ldq, j0, j1, sh, lds, 2, 2); break;
            case 3: qk_heads(b, qh, ldq, j0, j1, sh, lds, 3, 2); break;
            default: qk_heads(b, qh, ldq, j0, j1, sh, lds, 4, 2); break;
            }
        } else {
            switch (nh) {
            case 1: qk_heads(b, qh, ldq, j0, j1, sh, lds, 1, 1); break;
            case 2: qk_heads(b, qh, ldq, j0, j1, sh, lds, 2, 1); break;
            case 3: qk_heads(b, qh, ldq, j0, j1, sh, lds, 3, 1); break;
            default: qk_heads(b, qh, ldq, j0, j1, sh, lds, 4, 1); break;
            }
        }
    }
}

/* ---- pv ------------------------------------------------------------------------ */

enum { MAXH = KVC_PK_MAX_BLOCK / 8 };

static inline __attribute__((always_inline)) void pv_heads(const kvc_pk_block *b, const float *p,
                                                           int ldp, int j0, int j1, float *o,
                                                           int ldo, const int NH, const int NHALF) {
    const int dim = b->dim, np = b->np, P = 8 * NHALF, p0 = j0 / P, p1 = (j1 + P - 1) / P;
    __m256 wv[4][MAXH];
    float wsum[4][MAXH], mterm[4];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; h++)
        mterm[h] = kvc_pk_weights_avx2(b, p + (size_t)h * ldp, j0, j1, NHALF, wv[h], wsum[h]);
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0);
    for (int c = 0; c < dim; c++) {
        __m256 acc[4];
        float pm[4];
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) acc[h] = _mm256_setzero_ps(), pm[h] = mterm[h];
        for (int pk = p0; pk < p1; pk++) {
            int item = c * np + pk, w = width_of(b, item);
            __m256 r0 = unpack8(src, w), r1 = NHALF == 2 ? unpack8(src + w, w) : r0;
            float m = (float)b->pmins[item];
            src += NHALF * w;
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) {
                acc[h] = _mm256_fmadd_ps(r0, wv[h][pk * NHALF], acc[h]);
                if (NHALF == 2) acc[h] = _mm256_fmadd_ps(r1, wv[h][pk * NHALF + 1], acc[h]);
                pm[h] += m * wsum[h][pk];
            }
        }
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) o[(size_t)h * ldo + c] += kvc_hsum256_ps(acc[h]) + pm[h];
        if ((p1 != np || p0 != 0) && c + 1 < dim) /* skip to pack p0 of the next channel */
            for (int i = c * np + p1; i < (c + 1) * np + p0; i++) src += NHALF * width_of(b, i);
    }
}

static void pv_avx2(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1, float *o,
                    int ldo) {
    if (b->group != 1) {
        kvc_pk_pv_grouped_avx2(b, p, ldp, G, j0, j1, o, ldo);
        return;
    }
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *ph = p + (size_t)h0 * ldp;
        float *oh = o + (size_t)h0 * ldo;
        int nh = G - h0 < 4 ? G - h0 : 4;
        if (b->pack == 16) {
            switch (nh) {
            case 1: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 1, 2); break;
            case 2: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 2, 2); break;
            case 3: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 3, 2); break;
            default: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 4, 2); break;
            }
        } else {
            switch (nh) {
            case 1: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 1, 1); break;
            case 2: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 2, 1); break;
            case 3: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 3, 1); break;
            default: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 4, 1); break;
            }
        }
    }
}

void kvc_pk_register_avx2(kvc_pk_kernels *k) {
    build_tables();
    kvc_pk_grouped_init_avx2();
    k->qk = qk_avx2;
    k->pv = pv_avx2;
}
