/* AVX2 kernels for Q4_1 weights (the default model's type): dot with a
 * Q8_0-prepared activation via maddubs (unsigned nibbles x signed int8) and a
 * per-block f32 scale; the offset term m_w*s_a accumulates separately.
 * Dequantise with FMA. Reference: src/model/wt_q4_1.c. */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static float dot_q4_1_q8_0_avx2(const void *row, const void *act, int64_t n) {
    const kvc_blk_q4_1 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float accm = 0;
    int64_t nb = n / KVC_QK, i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(kvc_nibbles_avx2(b[i].qs),
                                 _mm256_loadu_si256((const __m256i *)(q + i * 32))),
            ones);
        __m256i p1 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(kvc_nibbles_avx2(b[i + 1].qs),
                                 _mm256_loadu_si256((const __m256i *)(q + i * 32 + 32))),
            ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d) * da[i]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                               _mm256_set1_ps(kvc_f16_load_avx2(&b[i + 1].d) * da[i + 1]), acc1);
        accm += kvc_f16_load_avx2(&b[i].m) * sa[i] + kvc_f16_load_avx2(&b[i + 1].m) * sa[i + 1];
    }
    for (; i < nb; i++) {
        __m256i p0 = _mm256_madd_epi16(
            _mm256_maddubs_epi16(kvc_nibbles_avx2(b[i].qs),
                                 _mm256_loadu_si256((const __m256i *)(q + i * 32))),
            ones);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d) * da[i]), acc0);
        accm += kvc_f16_load_avx2(&b[i].m) * sa[i];
    }
    return kvc_hsum256_ps(_mm256_add_ps(acc0, acc1)) + accm;
}

static void dequant_q4_1_avx2(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_1 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m256i v = kvc_nibbles_avx2(b[i].qs);
        __m256 d = _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d)),
               m = _mm256_set1_ps(kvc_f16_load_avx2(&b[i].m));
        __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        float *o = y + i * KVC_QK;
        _mm256_storeu_ps(o, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), d, m));
        _mm256_storeu_ps(
            o + 8,
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), d, m));
        _mm256_storeu_ps(o + 16,
                         _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), d, m));
        _mm256_storeu_ps(
            o + 24,
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), d, m));
    }
}

void kvc_wt_register_q4_1_avx2(kvc_wtype *table) {
    table[KVC_WT_Q4_1].dot = dot_q4_1_q8_0_avx2;
    table[KVC_WT_Q4_1].dequant = dequant_q4_1_avx2;
}
