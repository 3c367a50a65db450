/* AVX2 kernels for Q6_K weights: dot with a Q8_K-prepared activation. The
 * 6-bit values are assembled unsigned (q in [0, 63]) from ql and qh, multiplied
 * with maddubs, scaled per 16-element group with madd, and the -32 offset is
 * applied once per super-block as -32*sum(sc_g*bsum_g).
 * Reference: src/model/wt_q6_k.c. */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static inline __m256i group_scales(const int8_t *sc, int g) {
    return _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
}

static float dot_q6_k_q8_k_avx2(const void *row, const void *act, int64_t n) {
    const kvc_blk_q6_k *b = row;
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_k_d(act, n);
    const int16_t *bsum = kvc_act_q8_k_bsum(act, n);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    float acc = 0;
    for (int64_t i = 0; i < n / KVC_QKK; i++) {
        __m256i sumi = _mm256_setzero_si256();
        const int8_t *a = qa + i * KVC_QKK;
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));
            __m256i q[4];
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
            for (int k = 0; k < 4; k++) {
                __m256i p = _mm256_maddubs_epi16(
                    q[k], _mm256_loadu_si256((const __m256i *)(a + 128 * h + 32 * k)));
                sumi = _mm256_add_epi32(
                    sumi, _mm256_madd_epi16(p, group_scales(b[i].scales, 8 * h + 2 * k)));
            }
        }
        int32_t off = 0;
        for (int g = 0; g < 16; g++)
            off += b[i].scales[g] * bsum[i * 16 + g];
        int32_t total = kvc_hsum256_epi32(sumi) - 32 * off;
        acc += kvc_f16_load_avx2(&b[i].d) * da[i] * (float)total;
    }
    return acc;
}

void kvc_wt_register_q6_k_avx2(kvc_wtype *table) {
    table[KVC_WT_Q6_K].dot = dot_q6_k_q8_k_avx2;
}
