/* The part the AVX-512 Q4_K, Q5_K and Q6_K kernels share.
 *
 * The arithmetic contract (what makes a batch bit-identical to the dot): per
 * row and token, over the super-blocks in order, with exact integer sums
 *   isum = sum over groups of scale_g * (q_g . a_g)   (q unsigned as stored)
 *   csum = q4_k/q5_k: sum of min_j * (activation sum of sub-block j)
 *          q6_k:      sum of scale_g * (activation sum of group g)
 * the float accumulation is, with single-rounding FMAs,
 *   q4_k/q5_k: acc = fma(isum, d*da, acc); accm = fma(csum, dmin*da, accm); result acc - accm
 *   q6_k:      acc = fma(isum - 32*csum, d*da, acc); result acc.
 * Integers are exact in any order, so dot and batch may compute them differently.
 *
 * The dot (decode, memory-bound) unpacks a super-block into registers (kq_sb:
 * four zmm of weight bytes in activation order, four zmm of int16 scales per
 * byte pair for vpmaddubsw + vpdpwssd, the 16 int16 of the correction term)
 * and reduces the integer lanes once per super-block.
 *
 * The batch (kvc_matmul's prefill products, compute-bound) puts one row in
 * each of the 16 lanes: a tile of 16 rows is transposed once into dwords
 * (lane r of word d = elements 4d..4d+3 of row r), so one vpdpbusd with the
 * activation's 4 bytes broadcast does 64 multiply-adds, the group scales are
 * one vpmulld per group for 16 rows, and the float work above is one vector
 * operation for 16 rows instead of a broadcast and a reduction per row; two
 * tokens share each weight load. (As the repacked GEMM of llama.cpp does.) */
#ifndef KVC_KERNELS_WT_KQUANT_AVX512_H
#define KVC_KERNELS_WT_KQUANT_AVX512_H

#include <stdlib.h>
#include <string.h>

#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

typedef enum kq_kind { KQ_MINS, KQ_OFFSET32 } kq_kind; /* q4_k/q5_k | q6_k */

typedef struct kq_sb {
    __m512i x[4], s[4];
    __m256i corr;
    float d, dmin;
} kq_sb;

/* q4_k / q5_k: words 0..7 = 6-bit scales, words 8..15 = 6-bit mins */
KVC_AINLINE __m256i kq_scales_mins(const uint8_t *s) {
    uint8_t scm[16];
    kvc_q4k_unpack(s, scm);
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)scm));
}

/* q4_k / q5_k: scales of sub-blocks (j, j+1) for the byte pairs of x (8 words each), and
 * the mins each twice (the order of the activation's 16-element sums). */
KVC_AINLINE __m512i kq_scale_pairs(__m256i scm, int j) {
    const __m512i sidx0 =
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001, 0x00010001,
                          0x00010001, 0x00010001, 0x00010001, 0x00010001);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(sidx0, _mm512_set1_epi16((short)j)),
                                    _mm512_castsi256_si512(scm));
}
KVC_AINLINE __m256i kq_mins_twice(__m256i scm) {
    const __m256i midx =
        _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    return _mm256_permutexvar_epi16(midx, scm);
}

/* q4_k: 128 nibble bytes; low/high nibbles regrouped with 128-bit lane shuffles so
 * each zmm holds two consecutive sub-blocks (64 elements). */
KVC_AINLINE void kq_unpack_q4_k(const kvc_blk_q4_k *b, kq_sb *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m256i scm = kq_scales_mins(b->scales);
    for (int h = 0; h < 2; h++) {
        __m512i z = _mm512_loadu_si512(b->qs + 64 * h);
        __m512i lo = _mm512_and_si512(z, m4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        u->x[2 * h] = _mm512_shuffle_i64x2(lo, hi, 0x44);     /* sub-blocks 4h, 4h+1 */
        u->x[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, 0xee); /* sub-blocks 4h+2, 4h+3 */
        u->s[2 * h] = kq_scale_pairs(scm, 4 * h);
        u->s[2 * h + 1] = kq_scale_pairs(scm, 4 * h + 2);
    }
    u->corr = kq_mins_twice(scm);
    u->d = kvc_f16_load_avx512(&b->d);
    u->dmin = kvc_f16_load_avx512(&b->dmin);
}

/* q5_k: as q4_k plus the fifth bit of each element from qh (bit 2c of qh[l] for
 * element 64c+l, bit 2c+1 for 64c+32+l), shifted per 256-bit half. */
KVC_AINLINE void kq_unpack_q5_k(const kvc_blk_q5_k *b, kq_sb *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    /* shift counts: low 256 bits (even sub-block) 0, high 256 bits (odd sub-block) 1 */
    const __m512i cnt0 = _mm512_setr_epi64(0, 0, 0, 0, 0x0001000100010001, 0x0001000100010001,
                                           0x0001000100010001, 0x0001000100010001);
    const __m256i scm = kq_scales_mins(b->scales);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
    for (int h = 0; h < 2; h++) {
        __m512i z = _mm512_loadu_si512(b->qs + 64 * h);
        __m512i lo = _mm512_and_si512(z, m4), hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
        __m512i x0 = _mm512_shuffle_i64x2(lo, hi, 0x44);
        __m512i x1 = _mm512_shuffle_i64x2(lo, hi, 0xee);
        __m512i h0 = _mm512_srlv_epi16(qh, _mm512_add_epi16(cnt0, _mm512_set1_epi16((short)(4 * h))));
        __m512i h1 =
            _mm512_srlv_epi16(qh, _mm512_add_epi16(cnt0, _mm512_set1_epi16((short)(4 * h + 2))));
        u->x[2 * h] = _mm512_or_si512(x0, _mm512_slli_epi16(_mm512_and_si512(h0, one), 4));
        u->x[2 * h + 1] = _mm512_or_si512(x1, _mm512_slli_epi16(_mm512_and_si512(h1, one), 4));
        u->s[2 * h] = kq_scale_pairs(scm, 4 * h);
        u->s[2 * h + 1] = kq_scale_pairs(scm, 4 * h + 2);
    }
    u->corr = kq_mins_twice(scm);
    u->d = kvc_f16_load_avx512(&b->d);
    u->dmin = kvc_f16_load_avx512(&b->dmin);
}

/* q6_k, per half super-block (128 elements): the 64 ql bytes give elements 0..63
 * from their low nibbles and 64..127 from their high nibbles, in activation order;
 * the 2-bit high parts come from the 32 qh bytes broadcast to both halves with
 * per-half variable shifts. Values stay unsigned (q in [0, 63]); the -32 offset is
 * removed once per super-block as 32*sum(sc_g*bsum_g). */
KVC_AINLINE void kq_unpack_q6_k(const kvc_blk_q6_k *b, kq_sb *u) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    /* shift counts for the high bits: [0 | 2] for the low nibbles, [4 | 6] for the high ones */
    const __m512i cnt_lo = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002, 0x0002000200020002,
                                             0x0002000200020002, 0x0002000200020002);
    const __m512i cnt_hi = _mm512_add_epi16(cnt_lo, _mm512_set1_epi16(4));
    /* group-scale index: 8 words per group, four groups per zmm */
    const __m512i gidx0 =
        _mm512_setr_epi64(0, 0, 0x0001000100010001, 0x0001000100010001, 0x0002000200020002,
                          0x0002000200020002, 0x0003000300030003, 0x0003000300030003);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i sc512 = _mm512_castsi256_si512(sc);
    for (int h = 0; h < 2; h++) {
        __m512i l = _mm512_loadu_si512(b->ql + 64 * h);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        u->x[2 * h] = _mm512_or_si512(
            _mm512_and_si512(l, m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, cnt_lo), m2), 4));
        u->x[2 * h + 1] = _mm512_or_si512(
            _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
            _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, cnt_hi), m2), 4));
        u->s[2 * h] = _mm512_permutexvar_epi16(
            _mm512_add_epi16(gidx0, _mm512_set1_epi16((short)(8 * h))), sc512);
        u->s[2 * h + 1] = _mm512_permutexvar_epi16(
            _mm512_add_epi16(gidx0, _mm512_set1_epi16((short)(8 * h + 4))), sc512);
    }
    u->corr = sc;
    u->d = kvc_f16_load_avx512(&b->d);
    u->dmin = 0.0f;
}

/* The exact integer parts of one super-block of one token (a: its 256 activation
 * bytes, bsum: its 16 group sums). */
KVC_AINLINE void kq_int_sums(const kq_sb *u, const int8_t *a, const int16_t *bsum, int32_t *isum,
                             int32_t *csum) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(u->x[k], _mm512_loadu_si512(a + 64 * k)),
                                  u->s[k]);
    const __m256i c = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsum), u->corr);
    /* both horizontal sums at once: [s01 s23 c01 c23 | s45 s67 c45 c67] -> [S C S C] */
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
    const __m256i h = _mm256_hadd_epi32(s8, c);
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    q = _mm_hadd_epi32(q, q);
    *isum = _mm_cvtsi128_si32(q);
    *csum = _mm_extract_epi32(q, 1);
}

KVC_AINLINE float kq_fma(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

/* Unpacks super-block i of the row at w (a kvc_blk_q4_k/q5_k/q6_k array). */
typedef void (*kq_unpack_fn)(const void *row, int64_t i, kq_sb *u);

/* The dot of one row with one Q8_K activation. */
KVC_AINLINE float kq_dot(kq_kind kind, kq_unpack_fn unpack, const void *row, const void *act,
                         int64_t n) {
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    float acc = 0, accm = 0;
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        kq_sb u;
        unpack(row, i, &u);
        int32_t isum, csum;
        kq_int_sums(&u, qa + i * KVC_QKK, bsum + i * 16, &isum, &csum);
        if (kind == KQ_MINS) {
            acc = kq_fma((float)isum, u.d * da[i], acc);
            accm = kq_fma((float)csum, u.dmin * da[i], accm);
        } else {
            acc = kq_fma((float)(isum - 32 * csum), u.d * da[i], acc);
        }
    }
    return kind == KQ_MINS ? acc - accm : acc;
}

/* ---- batches: tiles of 16 rows, one row per lane ---- */

/* One super-block of a 16-row tile. w[d][r]: bytes 4d..4d+3 of row r (activation order);
 * sc[g][r]: the scale of group g (q4_k/q5_k: 8 sub-blocks of 32, q6_k: 16 groups of 16);
 * cp[p][r]: the int16 pair that multiplies bsum[2p], bsum[2p+1] (q4_k/q5_k: min p twice,
 * q6_k: scales 2p, 2p+1). Rows past the matrix are zero. */
typedef struct kq_tile_sb {
    uint32_t w[64][16];
    int32_t sc[16][16];
    int32_t cp[8][16];
    float d[16], dmin[16];
} kq_tile_sb;

/* Row r of the tile from super-block u (unpacked) and its block's scale bytes. */
KVC_AINLINE void kq_tile_put(kq_kind kind, const kq_sb *u, const uint8_t *scales, int r,
                             kq_tile_sb *t) {
    uint32_t dw[64];
    for (int k = 0; k < 4; k++)
        _mm512_storeu_si512(dw + 16 * k, u->x[k]);
    for (int d = 0; d < 64; d++)
        t->w[d][r] = dw[d];
    if (kind == KQ_MINS) {
        uint8_t scm[16];
        kvc_q4k_unpack(scales, scm);
        for (int j = 0; j < 8; j++) {
            t->sc[j][r] = scm[j];
            t->cp[j][r] = scm[8 + j] | scm[8 + j] << 16;
        }
    } else {
        const int8_t *sc = (const int8_t *)scales;
        for (int g = 0; g < 16; g++)
            t->sc[g][r] = sc[g];
        for (int p = 0; p < 8; p++)
            t->cp[p][r] = (int32_t)((uint16_t)sc[2 * p] | (uint32_t)(uint16_t)sc[2 * p + 1] << 16);
    }
    t->d[r] = u->d;
    t->dmin[r] = u->dmin;
}

KVC_AINLINE __m512i kq_bcast4(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* T (1 or 2, a constant) tokens over a tile of nsb super-blocks: y_t[r] for r < rows. */
KVC_AINLINE void kq_tile_tokens(kq_kind kind, const kq_tile_sb *tile, int64_t nsb,
                                const uint8_t *const *act, int64_t n, float *const *y, int rows,
                                const int T) {
    const int groups = kind == KQ_MINS ? 8 : 16, gdw = 64 / groups;
    __m512 acc[2], accm[2];
    const int8_t *qa[2];
    const float *da[2];
    const int16_t *bsum[2];
#pragma GCC unroll 2
    for (int t = 0; t < T; t++) {
        acc[t] = accm[t] = _mm512_setzero_ps();
        qa[t] = kvc_act_q(act[t]), da[t] = kvc_act_q8_k_d(act[t], n);
        bsum[t] = kvc_act_q8_k_bsum(act[t], n);
    }
    for (int64_t i = 0; i < nsb; i++) {
        const kq_tile_sb *u = &tile[i];
        __m512i isum[2], csum[2];
#pragma GCC unroll 2
        for (int t = 0; t < T; t++)
            isum[t] = csum[t] = _mm512_setzero_si512();
        for (int g = 0; g < groups; g++) {
            __m512i s[2];
#pragma GCC unroll 2
            for (int t = 0; t < T; t++)
                s[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < gdw; k++) {
                const int d = g * gdw + k;
                const __m512i wv = _mm512_load_si512(u->w[d]);
#pragma GCC unroll 2
                for (int t = 0; t < T; t++)
                    s[t] = _mm512_dpbusd_epi32(s[t], wv, kq_bcast4(qa[t] + i * KVC_QKK + 4 * d));
            }
            const __m512i scv = _mm512_load_si512(u->sc[g]);
#pragma GCC unroll 2
            for (int t = 0; t < T; t++)
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(s[t], scv));
        }
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m512i cpv = _mm512_load_si512(u->cp[p]);
#pragma GCC unroll 2
            for (int t = 0; t < T; t++)
                csum[t] = _mm512_dpwssd_epi32(csum[t], cpv, kq_bcast4(bsum[t] + i * 16 + 2 * p));
        }
        const __m512 dv = _mm512_load_ps(u->d);
#pragma GCC unroll 2
        for (int t = 0; t < T; t++) {
            const __m512 dat = _mm512_set1_ps(da[t][i]);
            if (kind == KQ_MINS) {
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dv, dat), acc[t]);
                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(csum[t]),
                                          _mm512_mul_ps(_mm512_load_ps(u->dmin), dat), accm[t]);
            } else {
                const __m512i tot = _mm512_sub_epi32(isum[t], _mm512_slli_epi32(csum[t], 5));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(dv, dat), acc[t]);
            }
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < T; t++)
        _mm512_mask_storeu_ps(y[t], kvc_mask16(rows),
                              kind == KQ_MINS ? _mm512_sub_ps(acc[t], accm[t]) : acc[t]);
}

enum { KQ_TILE_MIN_TOKENS = 6 };

/* kvc_matmul's dot_batch: y[t*ldy + r] = dot(row r, activation t). Each tile of 16
 * rows is transposed once and every token runs over it, two at a time. */
KVC_AINLINE void kq_batch(kq_kind kind, kq_unpack_fn unpack, size_t block_bytes,
                          size_t scales_offset, const void *w, size_t stride, int64_t nrows,
                          const void *acts, size_t act_stride, int64_t m, int64_t n, float *y,
                          int64_t ldy) {
    const int64_t nsb = n / KVC_QKK;
    /* a few tokens do not pay for the transposition (bench_matvec -p, q4_k 1536 x 1536,
     * tiles against dots: m = 4 46-50 against 44-55 GOP/s, m = 8 81 against 38-55):
     * below KQ_TILE_MIN_TOKENS the dot, which gives the same bits */
    kq_tile_sb *tile = m < KQ_TILE_MIN_TOKENS ? NULL : aligned_alloc(64, sizeof(kq_tile_sb) * (size_t)nsb);
    if (!tile) { /* few tokens, or no memory for the tile */
        for (int64_t t = 0; t < m; t++)
            for (int64_t r = 0; r < nrows; r++)
                y[t * ldy + r] = kq_dot(kind, unpack, (const uint8_t *)w + (size_t)r * stride,
                                        (const uint8_t *)acts + (size_t)t * act_stride, n);
        return;
    }
    for (int64_t r0 = 0; r0 < nrows; r0 += 16) {
        const int rows = nrows - r0 < 16 ? (int)(nrows - r0) : 16;
        memset(tile, 0, sizeof(kq_tile_sb) * (size_t)nsb);
        for (int r = 0; r < rows; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)(r0 + r) * stride;
            for (int64_t i = 0; i < nsb; i++) {
                kq_sb u;
                unpack(row, i, &u);
                kq_tile_put(kind, &u, row + (size_t)i * block_bytes + scales_offset, r, &tile[i]);
            }
        }
        const uint8_t *a = acts;
        for (int64_t t = 0; t < m; t += 2) {
            if (t + 1 < m) {
                const uint8_t *act[2] = {a + (size_t)t * act_stride, a + (size_t)(t + 1) * act_stride};
                float *yy[2] = {y + t * ldy + r0, y + (t + 1) * ldy + r0};
                kq_tile_tokens(kind, tile, nsb, act, n, yy, rows, 2);
            } else {
                const uint8_t *act[1] = {a + (size_t)t * act_stride};
                float *yy[1] = {y + t * ldy + r0};
                kq_tile_tokens(kind, tile, nsb, act, n, yy, rows, 1);
            }
        }
    }
    free(tile);
}

#endif
