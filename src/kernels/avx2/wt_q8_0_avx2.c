/* AVX2 kernels for Q8_0 weights (the default model's tied embedding / output
 * matrix): dot with a Q8_0-prepared activation. maddubs needs one unsigned
 * operand, so it multiplies |w| by a with w's sign moved onto a (sign_epi8);
 * |w| <= 128 and |a| <= 127 keep the pair sums inside int16.
 * Reference: src/model/wt_q8_0.c. */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static inline __m256i block_dot_i32(const int8_t *w, const int8_t *a) {
    __m256i wv = _mm256_loadu_si256((const __m256i *)w),
            av = _mm256_loadu_si256((const __m256i *)a);
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(av, wv));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

static float dot_q8_0_q8_0_avx2(const void *row, const void *act, int64_t n) {
    const kvc_blk_q8_0 *b = row;
    const int8_t *q = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t nb = n / KVC_QK, i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i p0 = block_dot_i32(b[i].qs, q + i * 32),
                p1 = block_dot_i32(b[i + 1].qs, q + i * 32 + 32);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d) * da[i]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                               _mm256_set1_ps(kvc_f16_load_avx2(&b[i + 1].d) * da[i + 1]), acc1);
    }
    for (; i < nb; i++) {
        __m256i p0 = block_dot_i32(b[i].qs, q + i * 32);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d) * da[i]), acc0);
    }
    return kvc_hsum256_ps(_mm256_add_ps(acc0, acc1));
}

static void dequant_q8_0_avx2(const void *x, float *y, int64_t n) {
    const kvc_blk_q8_0 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m256 d = _mm256_set1_ps(kvc_f16_load_avx2(&b[i].d));
        for (int j = 0; j < 32; j += 8) {
            __m128i v = _mm_loadl_epi64((const __m128i *)(b[i].qs + j));
            _mm256_storeu_ps(y + i * KVC_QK + j,
                             _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d));
        }
    }
}

void kvc_wt_register_q8_0_avx2(kvc_wtype *table) {
    table[KVC_WT_Q8_0].dot = dot_q8_0_q8_0_avx2;
    table[KVC_WT_Q8_0].dequant = dequant_q8_0_avx2;
}
