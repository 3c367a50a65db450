/* AVX2 kernels for Q5_K weights: as Q4_K (wt_q4_k_avx2.c) with the fifth bit
 * of each value taken from qh (bit 2c for the low nibbles of chunk c, 2c+1
 * for the high ones) and or-ed in as 16. Reference: src/model/wt_q5_k.c. */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static float dot_q5_k_q8_k_avx2(const void *row, const void *act, int64_t n) {
    const kvc_blk_q5_k *b = row;
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        uint8_t scm[16];
        kvc_q4k_unpack(b[i].scales, scm);
        const uint8_t *sc = scm, *m = scm + 8;
        __m256i sumi = _mm256_setzero_si256();
        __m256i qh = _mm256_loadu_si256((const __m256i *)b[i].qh);
        const int8_t *a = qa + i * KVC_QKK;
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
            __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(qh, one), 4);
            __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4);
            qh = _mm256_srli_epi16(qh, 2);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(raw, m4), h0);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), h1);
            __m256i p0 =
                _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(a + 64 * c)));
            __m256i p1 =
                _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 64 * c + 32)));
            p0 = _mm256_madd_epi16(p0, _mm256_set1_epi16((short)sc[2 * c]));
            p1 = _mm256_madd_epi16(p1, _mm256_set1_epi16((short)sc[2 * c + 1]));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
        }
        int32_t summ = 0;
        const int16_t *bs = bsum + i * 16;
        for (int j = 0; j < 8; j++)
            summ += m[j] * (bs[2 * j] + bs[2 * j + 1]);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi),
                              _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d) * da[i]), acc);
        accm += kvc_f16_load_avx2(&b[i].dmin) * da[i] * (float)summ;
    }
    return kvc_hsum256_ps(acc) - accm;
}

void kvc_wt_register_q5_k_avx2(kvc_wtype *table) {
    table[KVC_WT_Q5_K].dot = dot_q5_k_q8_k_avx2;
}
