/* AVX2 kernels for Q4_0 weights: dot with a Q8_0-prepared activation via
 * maddubs of the unsigned nibbles (q, not q-8) with the int8 activation, the
 * -8*sum(a) offset applied through the activation's block sum s_a.
 * Reference: src/model/wt_q4_0.c. */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static float dot_q4_0_q8_0_avx2(const void *row, const void *act, int64_t n) {
    const kvc_blk_q4_0 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float acco = 0;
    int64_t nb = n / KVC_QK, i = 0;
    for (; i + 2 <= nb; i += 2) {
        float d0 = kvc_f16_load_avx2(&b[i].d), d1 = kvc_f16_load_avx2(&b[i + 1].d);
        __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(kvc_nibbles_avx2(b[i].qs),
                                 _mm256_loadu_si256((const __m256i *)(q + i * 32))),
            ones);
        __m256i p1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(kvc_nibbles_avx2(b[i + 1].qs),
                                 _mm256_loadu_si256((const __m256i *)(q + i * 32 + 32))),
            ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d0 * da[i]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(d1 * da[i + 1]), acc1);
        acco += d0 * sa[i] + d1 * sa[i + 1];
    }
    for (; i < nb; i++) {
        float d0 = kvc_f16_load_avx2(&b[i].d);
        __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(kvc_nibbles_avx2(b[i].qs),
                                 _mm256_loadu_si256((const __m256i *)(q + i * 32))),
            ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(d0 * da[i]), acc0);
        acco += d0 * sa[i];
    }
    return kvc_hsum256_ps(_mm256_add_ps(acc0, acc1)) - 8.0f * acco;
}

static void dequant_q4_0_avx2(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_0 *b = x;
    const __m256i eight = _mm256_set1_epi8(8);
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m256i v = _mm256_sub_epi8(kvc_nibbles_avx2(b[i].qs), eight);
        kvc_store_scaled_i8x32_avx2(v, _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d)),
                                    y + i * KVC_QK);
    }
}

void kvc_wt_register_q4_0_avx2(kvc_wtype *table) {
    table[KVC_WT_Q4_0].dot = dot_q4_0_q8_0_avx2;
    table[KVC_WT_Q4_0].dequant = dequant_q4_0_avx2;
}
