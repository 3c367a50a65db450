/* AVX2 softmax kernels of the attention driver (src/kv/softmax.h; scalar
 * references in src/kv/softmax.c): row max, and exp(s - m) in place with the
 * sum. exp is the Cephes expf scheme (see the AVX-512 file), 2^n built in the
 * exponent bits; below -87.3 (and -inf) the result is 0. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kv/softmax.h"

static float kvc_softmax_max_avx2(const float *s, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + i));
    float buf[8];
    _mm256_storeu_ps(buf, m);
    float r = -INFINITY;
    for (int k = 0; k < 8; k++) r = buf[k] > r ? buf[k] : r;
    for (; i < n; i++) r = s[i] > r ? s[i] : r;
    return r;
}

static inline __m256 exp_neg(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static float kvc_softmax_exp_sum_avx2(float *s, int n, float m) {
    __m256 mv = _mm256_set1_ps(m), sum = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
        _mm256_storeu_ps(s + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (i < n) {
        float buf[8];
        for (int k = 0; k < 8; k++) buf[k] = i + k < n ? s[i + k] : -INFINITY;
        __m256 e = exp_neg(_mm256_sub_ps(_mm256_loadu_ps(buf), mv));
        _mm256_storeu_ps(buf, e);
        memcpy(s + i, buf, (size_t)(n - i) * 4);
        sum = _mm256_add_ps(sum, e);
    }
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    t = _mm_hadd_ps(t, t);
    t = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(t);
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_softmax_register_avx2(kvc_softmax_kernels *k) {
    k->max = kvc_softmax_max_avx2;
    k->exp_sum = kvc_softmax_exp_sum_avx2;
}
