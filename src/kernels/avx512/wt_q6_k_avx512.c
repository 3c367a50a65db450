/* AVX-512 (VNNI) kernels for Q6_K weights: dot with a Q8_K-prepared
 * activation. Per half super-block (128 elements): the 64 ql bytes in one zmm
 * give elements 0..63 from their low nibbles and 64..127 from their high
 * nibbles, in activation order; the 2-bit high parts come from the 32 qh
 * bytes broadcast to both halves with per-half variable shifts. Values stay
 * unsigned (q in [0, 63]) for vpmaddubsw, vpdpwssd applies the int8 group
 * scales, and the -32 offset is removed once per super-block as
 * 32*sum(sc_g*bsum_g). Reference: src/model/wt_q6_k.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

static float dot_q6_k_q8_k_avx512(const void *row, const void *act, int64_t n) {
    const kvc_blk_q6_k *b = row;
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    /* shift counts for the high bits: [0 | 2] for the low nibbles, [4 | 6] for the high ones */
    const __m512i cnt_lo = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002, 0x0002000200020002,
                                             0x0002000200020002, 0x0002000200020002);
    const __m512i cnt_hi = _mm512_add_epi16(cnt_lo, _mm512_set1_epi16(4));
    /* group-scale index: 8 words per group, four groups per zmm */
    const __m512i gidx0 =
        _mm512_setr_epi64(0, 0, 0x0001000100010001, 0x0001000100010001, 0x0002000200020002,
                          0x0002000200020002, 0x0003000300030003, 0x0003000300030003);
    float acc = 0;
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[i].scales));
        const __m512i sc512 = _mm512_castsi256_si512(sc);
        const int8_t *a = qa + i * KVC_QKK;
        __m512i sum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            __m512i l = _mm512_loadu_si512(b[i].ql + 64 * h);
            __m512i qh =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h)));
            __m512i x0 = _mm512_or_si512(
                _mm512_and_si512(l, m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, cnt_lo), m2), 4));
            __m512i x1 = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, cnt_hi), m2), 4));
            __m512i s0 = _mm512_permutexvar_epi16(
                _mm512_add_epi16(gidx0, _mm512_set1_epi16((short)(8 * h))), sc512);
            __m512i s1 = _mm512_permutexvar_epi16(
                _mm512_add_epi16(gidx0, _mm512_set1_epi16((short)(8 * h + 4))), sc512);
            sum = _mm512_dpwssd_epi32(
                sum, _mm512_maddubs_epi16(x0, _mm512_loadu_si512(a + 128 * h)), s0);
            sum = _mm512_dpwssd_epi32(
                sum, _mm512_maddubs_epi16(x1, _mm512_loadu_si512(a + 128 * h + 64)), s1);
        }
        __m256i off = _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)(bsum + i * 16)));
        sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(_mm512_zextsi256_si512(off), 5));
        acc += kvc_f16_load_avx512(&b[i].d) * da[i] * (float)_mm512_reduce_add_epi32(sum);
    }
    return acc;
}

void kvc_wt_register_q6_k_avx512(kvc_wtype *table) {
    table[KVC_WT_Q6_K].dot = dot_q6_k_q8_k_avx512;
}
