/* AVX-512 (VNNI) kernels for Q5_K weights: the scheme of wt_q5_k_avx512.c
 * (two sub-blocks per zmm, vpmaddubsw + vpdpwssd with int16 scales, mins via
 * the activation's 16-sums) with the fifth bit of each value taken from qh
 * by a per-half variable shift (bit 2c for the low nibbles of chunk c, 2c+1
 * for the high ones). Reference: src/model/wt_q5_k.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

/* words 0..7 = 6-bit scales, words 8..15 = 6-bit mins */
KVC_AINLINE __m256i unpack_scales_mins(const uint8_t *s) {
    uint8_t scm[16];
    kvc_q4k_unpack(s, scm);
    return _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)scm));
}

static float dot_q5_k_q8_k_avx512(const void *row, const void *act, int64_t n) {
    const kvc_blk_q5_k *b = row;
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    const __m512i m4 = _mm512_set1_epi8(0x0f), one = _mm512_set1_epi8(1);
    /* shift counts: low 256 bits (even sub-block) 0, high 256 bits (odd sub-block) 1 */
    const __m512i cnt0 = _mm512_setr_epi64(0, 0, 0, 0, 0x0001000100010001, 0x0001000100010001,
                                           0x0001000100010001, 0x0001000100010001);
    const __m512i sidx0 =
        _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x00010001, 0x00010001, 0x00010001, 0x00010001,
                          0x00010001, 0x00010001, 0x00010001, 0x00010001);
    const __m256i midx =
        _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        const __m256i scm = unpack_scales_mins(b[i].scales);
        const __m512i scm512 = _mm512_castsi256_si512(scm);
        const int8_t *a = qa + i * KVC_QKK;
        __m512i sum = _mm512_setzero_si512();
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b[i].qh));
        for (int h = 0; h < 2; h++) {
            __m512i z = _mm512_loadu_si512(b[i].qs + 64 * h);
            __m512i lo = _mm512_and_si512(z, m4),
                    hi = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
            __m512i x0 = _mm512_shuffle_i64x2(lo, hi, 0x44); /* sub-blocks 4h, 4h+1 */
            __m512i x1 = _mm512_shuffle_i64x2(lo, hi, 0xee); /* sub-blocks 4h+2, 4h+3 */
            __m512i h0 =
                _mm512_srlv_epi16(qh, _mm512_add_epi16(cnt0, _mm512_set1_epi16((short)(4 * h))));
            __m512i h1 = _mm512_srlv_epi16(
                qh, _mm512_add_epi16(cnt0, _mm512_set1_epi16((short)(4 * h + 2))));
            x0 = _mm512_or_si512(x0, _mm512_slli_epi16(_mm512_and_si512(h0, one), 4));
            x1 = _mm512_or_si512(x1, _mm512_slli_epi16(_mm512_and_si512(h1, one), 4));
            __m512i s0 = _mm512_permutexvar_epi16(
                _mm512_add_epi16(sidx0, _mm512_set1_epi16((short)(4 * h))), scm512);
            __m512i s1 = _mm512_permutexvar_epi16(
                _mm512_add_epi16(sidx0, _mm512_set1_epi16((short)(4 * h + 2))), scm512);
            sum = _mm512_dpwssd_epi32(
                sum, _mm512_maddubs_epi16(x0, _mm512_loadu_si512(a + 128 * h)), s0);
            sum = _mm512_dpwssd_epi32(
                sum, _mm512_maddubs_epi16(x1, _mm512_loadu_si512(a + 128 * h + 64)), s1);
        }
        __m256i mins = _mm256_permutexvar_epi16(midx, scm);
        __m256i mp = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(bsum + i * 16)), mins);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                              _mm512_set1_ps(kvc_f16_load_avx512(&b[i].d) * da[i]), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mp),
                               _mm256_set1_ps(kvc_f16_load_avx512(&b[i].dmin) * da[i]), accm);
    }
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(accm), _mm256_extractf128_ps(accm, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm512_reduce_add_ps(acc) - _mm_cvtss_f32(m);
}

void kvc_wt_register_q5_k_avx512(kvc_wtype *table) {
    table[KVC_WT_Q5_K].dot = dot_q5_k_q8_k_avx512;
}
