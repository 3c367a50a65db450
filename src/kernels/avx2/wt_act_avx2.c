/* AVX2 activation preparation (Q8_0 and Q8_K blocks, layouts in wtype.h):
 * bit-identical to the references in src/model/wt_act.c (same max, same
 * 127/amax, cvtps2dq rounds to nearest even like lrintf). */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static inline float hmax256_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Quantise 32 floats with multiplier id; returns the int32 sum, writes 32 int8. */
static inline int32_t quant32(const float *x, __m256 id, int8_t *q) {
    __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    int32_t sum =
        kvc_hsum256_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    __m256i p01 = _mm256_packs_epi32(i0, i1), p23 = _mm256_packs_epi32(i2, i3);
    __m256i p = _mm256_packs_epi16(p01, p23); /* lane-interleaved: fix the dword order */
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p);
    return sum;
}

static inline float absmax(const float *x, int len) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < len; j += 8)
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    return hmax256_ps(m);
}

static void act_q8_0_avx2(const float *x, void *buf, int64_t n) {
    int8_t *q = buf;
    float *d = (float *)(q + n), *s = d + n / KVC_QK;
    for (int64_t b = 0; b < n / KVC_QK; b++) {
        float amax = absmax(x + b * KVC_QK, KVC_QK);
        d[b] = amax / 127.0f;
        __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        s[b] = d[b] * (float)quant32(x + b * KVC_QK, id, q + b * KVC_QK);
    }
}

static void act_q8_k_avx2(const float *x, void *buf, int64_t n) {
    int8_t *q = buf;
    float *d = (float *)(q + n);
    int16_t *bsum = (int16_t *)(d + n / KVC_QKK);
    for (int64_t b = 0; b < n / KVC_QKK; b++) {
        const float *xb = x + b * KVC_QKK;
        float amax = absmax(xb, KVC_QKK);
        d[b] = amax / 127.0f;
        __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int c = 0; c < 8; c++)
            quant32(xb + 32 * c, id, q + b * KVC_QKK + 32 * c);
        for (int g = 0; g < 16; g++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(q + b * KVC_QKK + 16 * g));
            __m256i w = _mm256_madd_epi16(_mm256_cvtepi8_epi16(v), _mm256_set1_epi16(1));
            bsum[b * 16 + g] = (int16_t)kvc_hsum256_epi32(w);
        }
    }
}

void kvc_wt_register_act_avx2(kvc_act_fn *q8_0, kvc_act_fn *q8_k) {
    *q8_0 = act_q8_0_avx2;
    *q8_k = act_q8_k_avx2;
}
