/* The part the AVX-512 Q4_K, Q5_K and Q6_K kernels share: a super-block of
 * 256 weights unpacked into the form the integer dot consumes, and the
 * per-token arithmetic over such super-blocks. Unpacked, a super-block is four
 * zmm of weight bytes (unsigned, x[k] meeting activation bytes 64k..64k+63),
 * four zmm of int16 scales (one per byte pair, the vpdpwssd operand), the 16
 * int16 of the correction term (q4_k/q5_k: the sub-block mins, each twice;
 * q6_k: the group scales, for the -32 offset) and the two f32 scales.
 *
 * A dot unpacks each super-block in registers and uses it once; a batch
 * (kvc_matmul's dot_batch) unpacks a row once into memory and runs every
 * token of a block over it, four tokens at a time so the weight loads are
 * shared. Both go through kq_token_step, so every (row, token) result is the
 * same sequence of float operations: bit-identical. */
#ifndef KVC_KERNELS_WT_KQUANT_AVX512_H
#define KVC_KERNELS_WT_KQUANT_AVX512_H

#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

typedef enum kq_kind { KQ_MINS, KQ_OFFSET32 } kq_kind; /* q4_k/q5_k | q6_k */

typedef struct kq_sb {
    __m512i x[4], s[4];
    __m256i corr;
    float d, dmin;
} kq_sb;

/* Per token: the float accumulators of one row. */
typedef struct kq_acc {
    __m512 acc;
    __m256 accm;
    float accs;
} kq_acc;

KVC_AINLINE kq_acc kq_acc_zero(void) {
    return (kq_acc){_mm512_setzero_ps(), _mm256_setzero_ps(), 0.0f};
}

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

/* One super-block of one token: a = its 256 activation bytes, bsum its 16 group
 * sums, da its scale. The integer sums are exact (any order); the float
 * operations are the contract shared by dot and batch. */
KVC_AINLINE void kq_token_step(kq_kind kind, const kq_sb *u, const int8_t *a,
                               const int16_t *bsum, float da, kq_acc *acc) {
    __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        sum = _mm512_dpwssd_epi32(sum, _mm512_maddubs_epi16(u->x[k], _mm512_loadu_si512(a + 64 * k)),
                                  u->s[k]);
    const __m256i mp = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsum), u->corr);
    if (kind == KQ_MINS) {
        acc->acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(u->d * da), acc->acc);
        acc->accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mp), _mm256_set1_ps(u->dmin * da), acc->accm);
    } else {
        sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(_mm512_zextsi256_si512(mp), 5));
        acc->accs += u->d * da * (float)_mm512_reduce_add_epi32(sum);
    }
}

KVC_AINLINE float kq_finish(kq_kind kind, const kq_acc *acc) {
    if (kind != KQ_MINS) return acc->accs;
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(acc->accm), _mm256_extractf128_ps(acc->accm, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc->acc) - _mm_cvtss_f32(m);
}

/* Unpacks super-block i of the row at w (a kvc_blk_q4_k/q5_k/q6_k array). */
typedef void (*kq_unpack_fn)(const void *row, int64_t i, kq_sb *u);

/* The dot of one row with one Q8_K activation. */
KVC_AINLINE float kq_dot(kq_kind kind, kq_unpack_fn unpack, const void *row, const void *act,
                         int64_t n) {
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    kq_acc acc = kq_acc_zero();
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        kq_sb u;
        unpack(row, i, &u);
        kq_token_step(kind, &u, qa + i * KVC_QKK, bsum + i * 16, da[i], &acc);
    }
    return kq_finish(kind, &acc);
}

/* T (1..4, a constant) tokens over one unpacked row u[0..nsb): y[t*ldy] for t < T. */
KVC_AINLINE void kq_tokens(kq_kind kind, const kq_sb *u, int64_t nsb, const uint8_t *acts,
                           size_t act_stride, int64_t n, float *y, int64_t ldy, const int T) {
    kq_acc acc[4];
    const int8_t *qa[4];
    const float *da[4];
    const int16_t *bsum[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const void *act = acts + (size_t)t * act_stride;
        acc[t] = kq_acc_zero();
        qa[t] = kvc_act_q(act), da[t] = kvc_act_q8_k_d(act, n), bsum[t] = kvc_act_q8_k_bsum(act, n);
    }
    for (int64_t i = 0; i < nsb; i++) {
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            kq_token_step(kind, &u[i], qa[t] + i * KVC_QKK, bsum[t] + i * 16, da[t][i], &acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y[t * ldy] = kq_finish(kind, &acc[t]);
}

/* Tokens per block: their activations (about 1.1 bytes per column each) stay in
 * L2 while every row of the task runs over them; a row is unpacked once per block. */
enum { KQ_TOKEN_BLOCK = 32 };

/* kvc_matmul's dot_batch: y[t*ldy + r] = dot(row r, activation t). */
KVC_AINLINE void kq_batch(kq_kind kind, kq_unpack_fn unpack, const void *w, size_t stride,
                          int64_t nrows, const void *acts, size_t act_stride, int64_t m, int64_t n,
                          float *y, int64_t ldy) {
    const int64_t nsb = n / KVC_QKK;
    kq_sb u[nsb];
    for (int64_t t0 = 0; t0 < m; t0 += KQ_TOKEN_BLOCK) {
        const int64_t t1 = m - t0 < KQ_TOKEN_BLOCK ? m : t0 + KQ_TOKEN_BLOCK;
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)r * stride;
            for (int64_t i = 0; i < nsb; i++)
                unpack(row, i, &u[i]);
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4)
                kq_tokens(kind, u, nsb, (const uint8_t *)acts + (size_t)t * act_stride, act_stride,
                          n, y + t * ldy + r, ldy, 4);
            for (; t < t1; t++)
                kq_tokens(kind, u, nsb, (const uint8_t *)acts + (size_t)t * act_stride, act_stride,
                          n, y + t * ldy + r, ldy, 1);
        }
    }
}

#endif
