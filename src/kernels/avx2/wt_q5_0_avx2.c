/* AVX2 kernels for Q5_0 weights: the scheme of wt_q4_0_avx2.c (maddubs of the
 * unsigned values, q not q-16, with the int8 activation; the -16*sum(a) offset
 * through the activation's block sum s_a) with the fifth bits spread from qh
 * to bytes by a shuffle and compare. Reference: src/model/wt_q5_0.c. */
#include <string.h>

#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

/* The 32 values (0..31) of a block in element order. */
static inline __m256i q5_0_values_avx2(const kvc_blk_q5_0 *b) {
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    /* byte j of the result is byte j/8 of qh, then keep bit j%8 */
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    __m256i bit = _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
    return _mm256_or_si256(kvc_nibbles_avx2(b->qs), _mm256_and_si256(bit, _mm256_set1_epi8(0x10)));
}

static float dot_q5_0_q8_0_avx2(const void *row, const void *act, int64_t n) {
    const kvc_blk_q5_0 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    float acco = 0;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        float d = kvc_f16_load_avx2(&b[i].d);
        __m256i p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(q5_0_values_avx2(&b[i]),
                                 _mm256_loadu_si256((const __m256i *)(q + i * KVC_QK))),
            ones);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(d * da[i]), acc);
        acco += d * sa[i];
    }
    return kvc_hsum256_ps(acc) - 16.0f * acco;
}

static void dequant_q5_0_avx2(const void *x, float *y, int64_t n) {
    const kvc_blk_q5_0 *b = x;
    const __m256i sixteen = _mm256_set1_epi8(16);
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m256i v = _mm256_sub_epi8(q5_0_values_avx2(&b[i]), sixteen);
        kvc_store_scaled_i8x32_avx2(v, _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d)),
                                    y + i * KVC_QK);
    }
}

void kvc_wt_register_q5_0_avx2(kvc_wtype *table) {
    table[KVC_WT_Q5_0].dot = dot_q5_0_q8_0_avx2;
    table[KVC_WT_Q5_0].dequant = dequant_q5_0_avx2;
}
