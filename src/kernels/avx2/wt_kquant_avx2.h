/* The part the AVX2 Q4_K, Q5_K and Q6_K kernels share (the AVX2 counterpart of
 * avx512/wt_kquant_avx512.h): a super-block of 256 weights unpacked into eight
 * ymm of unsigned weight bytes (x[k] meeting activation bytes 32k..32k+31),
 * eight ymm of int16 scales (the vpmaddwd operand of x[k]'s byte pairs), the
 * 16 int16 of the correction term (q4_k/q5_k: the sub-block mins, each twice;
 * q6_k: the group scales, for the -32 offset) and the two f32 scales.
 * A dot unpacks each super-block in registers and uses it once; a batch
 * (kvc_matmul's dot_batch) unpacks a row once into memory and runs the tokens
 * of a block over it four at a time. Both go through kq2_token_step, so every
 * (row, token) result is the same sequence of float operations. */
#ifndef KVC_KERNELS_WT_KQUANT_AVX2_H
#define KVC_KERNELS_WT_KQUANT_AVX2_H

#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

#ifndef KVC_AINLINE
#define KVC_AINLINE static inline __attribute__((always_inline))
#endif

typedef enum kq2_kind { KQ2_MINS, KQ2_OFFSET32 } kq2_kind; /* q4_k/q5_k | q6_k */

typedef struct kq2_sb {
    __m256i x[8], s[8];
    __m256i corr;
    float d, dmin;
} kq2_sb;

/* Per token: the scaled dot products and (q4_k / q5_k) the scaled min
 * corrections, 8 lanes each, summed across lanes only at the end: a
 * horizontal sum per super-block and a scalar accumulator kept in memory
 * were a fifth of the work. */
typedef struct kq2_acc {
    __m256 acc, accm;
} kq2_acc;

/* q4_k / q5_k: scales (words 0..7 as set1 vectors of x[2c], x[2c+1]) and mins
 * twice, built in registers: filled through memory, 16 two-byte stores read
 * back as one vector stalled on store forwarding in every super-block. */
KVC_AINLINE void kq2_scales_mins(const uint8_t *packed, kq2_sb *u) {
    uint32_t w[4];
    kvc_q4k_words(packed, w);
    const __m128i scm = _mm_setr_epi32((int)w[0], (int)w[1], (int)w[2], (int)w[3]);
    /* the scales as int16, in both lanes */
    const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
    for (int k = 0; k < 8; k++) /* shuffle control: bytes 2k, 2k+1 (scale k) in every word */
        u->s[k] = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((short)((2 * k + 1) << 8 | 2 * k)));
    const __m128i twice = _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    u->corr = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(scm, twice));
}

/* q4_k: chunk c of 32 bytes holds elements 64c..64c+31 (low nibbles) and 64c+32.. (high). */
KVC_AINLINE void kq2_unpack_q4_k(const kvc_blk_q4_k *b, kq2_sb *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int c = 0; c < 4; c++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        u->x[2 * c] = _mm256_and_si256(raw, m4);
        u->x[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    }
    kq2_scales_mins(b->scales, u);
    u->d = kvc_f16_load_avx2(&b->d);
    u->dmin = kvc_f16_load_avx2(&b->dmin);
}

/* q5_k: as q4_k plus the fifth bit, bit 2c of qh[l] for element 64c+l and 2c+1 for 64c+32+l. */
KVC_AINLINE void kq2_unpack_q5_k(const kvc_blk_q5_k *b, kq2_sb *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    for (int c = 0; c < 4; c++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
        __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
        qh = _mm256_srli_epi16(qh, 2);
        u->x[2 * c] = _mm256_or_si256(_mm256_and_si256(raw, m4), h0);
        u->x[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), h1);
    }
    kq2_scales_mins(b->scales, u);
    u->d = kvc_f16_load_avx2(&b->d);
    u->dmin = kvc_f16_load_avx2(&b->dmin);
}

/* q6_k: unsigned values (q in [0, 63]) from ql and qh; per 32 bytes two 16-element groups,
 * so the scale vector holds sc[g] in its low and sc[g+1] in its high 128 bits. */
KVC_AINLINE void kq2_unpack_q6_k(const kvc_blk_q6_k *b, kq2_sb *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        __m256i *q = u->x + 4 * h;
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                               _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
        q[1] = _mm256_or_si256(
            _mm256_and_si256(l1, m4),
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
        q[2] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
        q[3] = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
    }
    /* Scales as int16 in registers, as for q4_k: x[4h+k] meets sc[8h+2k] in its low and sc[8h+2k+1]
     * in its high 128 bits, picked from a half of the 16 that both lanes hold. */
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
    for (int h = 0; h < 2; h++) {
        const __m256i half =
            _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
        for (int k = 0; k < 4; k++) {
            const short lo = (short)((4 * k + 1) << 8 | 4 * k), hi = (short)(lo + 0x0202);
            const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
            u->s[4 * h + k] = _mm256_shuffle_epi8(half, pick);
        }
    }
    u->corr = _mm256_cvtepi8_epi16(sc8);
    u->d = kvc_f16_load_avx2(&b->d);
    u->dmin = 0.0f;
}

/* One super-block of one token (a: 256 activation bytes, bsum: 16 group sums, da: scale). */
KVC_AINLINE void kq2_token_step(kq2_kind kind, const kq2_sb *u, const int8_t *a,
                                 const int16_t *bsum, float da, kq2_acc *acc) {
    __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        __m256i p = _mm256_maddubs_epi16(u->x[k], _mm256_loadu_si256((const __m256i *)(a + 32 * k)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, u->s[k]));
    }
    const __m256i corr = _mm256_madd_epi16(u->corr, _mm256_loadu_si256((const __m256i *)bsum));
    if (kind == KQ2_MINS) {
        acc->acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(u->d * da), acc->acc);
        acc->accm =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), _mm256_set1_ps(u->dmin * da), acc->accm);
    } else { /* q6_k: the -32 offset of every value, exactly, in the integers */
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
        acc->acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(u->d * da), acc->acc);
    }
}

KVC_AINLINE float kq2_finish(kq2_kind kind, const kq2_acc *acc) {
    return kind == KQ2_MINS ? kvc_hsum256_ps(acc->acc) - kvc_hsum256_ps(acc->accm)
                            : kvc_hsum256_ps(acc->acc);
}

typedef void (*kq2_unpack_fn)(const void *row, int64_t i, kq2_sb *u);

KVC_AINLINE float kq2_dot(kq2_kind kind, kq2_unpack_fn unpack, const void *row, const void *act,
                           int64_t n) {
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    kq2_acc acc = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        kq2_sb u;
        unpack(row, i, &u);
        kq2_token_step(kind, &u, qa + i * KVC_QKK, bsum + i * 16, da[i], &acc);
    }
    return kq2_finish(kind, &acc);
}

/* T (1..4, a constant) tokens over one unpacked row u[0..nsb): y[t*ldy] for t < T. */
KVC_AINLINE void kq2_tokens(kq2_kind kind, const kq2_sb *u, int64_t nsb, const uint8_t *acts,
                             size_t act_stride, int64_t n, float *y, int64_t ldy, const int T) {
    kq2_acc acc[4];
    const int8_t *qa[4];
    const float *da[4];
    const int16_t *bsum[4];
#pragma GCC unroll 4
    for (int t = 0; t < T; t++) {
        const void *act = acts + (size_t)t * act_stride;
        acc[t] = (kq2_acc){_mm256_setzero_ps(), _mm256_setzero_ps()};
        qa[t] = kvc_act_q(act), da[t] = kvc_act_q8_k_d(act, n), bsum[t] = kvc_act_q8_k_bsum(act, n);
    }
    for (int64_t i = 0; i < nsb; i++) {
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            kq2_token_step(kind, &u[i], qa[t] + i * KVC_QKK, bsum[t] + i * 16, da[t][i], &acc[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; t++)
        y[t * ldy] = kq2_finish(kind, &acc[t]);
}

enum { KQ2_TOKEN_BLOCK = 32 }; /* as KQ_TOKEN_BLOCK: the block's activations stay in L2 */

KVC_AINLINE void kq2_batch(kq2_kind kind, kq2_unpack_fn unpack, const void *w, size_t stride,
                            int64_t nrows, const void *acts, size_t act_stride, int64_t m,
                            int64_t n, float *y, int64_t ldy) {
    const int64_t nsb = n / KVC_QKK;
    kq2_sb u[nsb];
    for (int64_t t0 = 0; t0 < m; t0 += KQ2_TOKEN_BLOCK) {
        const int64_t t1 = m - t0 < KQ2_TOKEN_BLOCK ? m : t0 + KQ2_TOKEN_BLOCK;
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)r * stride;
            for (int64_t i = 0; i < nsb; i++)
                unpack(row, i, &u[i]);
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4)
                kq2_tokens(kind, u, nsb, (const uint8_t *)acts + (size_t)t * act_stride,
                           act_stride, n, y + t * ldy + r, ldy, 4);
            for (; t < t1; t++)
                kq2_tokens(kind, u, nsb, (const uint8_t *)acts + (size_t)t * act_stride,
                           act_stride, n, y + t * ldy + r, ldy, 1);
        }
    }
}

#endif
