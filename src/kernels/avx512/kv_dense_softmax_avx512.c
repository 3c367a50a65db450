/* AVX-512 softmax kernels of the attention driver (src/kv/softmax.h; scalar
 * references in src/kv/softmax.c): row max, and exp(s - m) in place with the
 * sum. exp is the Cephes expf scheme — n = round(x·log2 e), r = x − n·ln 2 in
 * two parts, degree-6 polynomial, scaled by 2^n with VSCALEFPS — within 2 ulp
 * of expf for x in [-87, 0]; below -87.3 (and -inf) the result is 0. */
#include <immintrin.h>
#include <math.h>

#include "kv/softmax.h"

static inline __mmask16 tail_mask(int left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

static float kvc_softmax_max_avx512(const float *s, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail_mask(n - i), s + i));
    return _mm512_reduce_max_ps(m);
}

static inline __m512 exp_neg(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f);
    __mmask16 tiny = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ); /* also true for -inf; NaN stays NaN below */
    x = _mm512_max_ps(x, lo);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps(~tiny, _mm512_scalef_ps(p, n));
}

static float kvc_softmax_exp_sum_avx512(float *s, int n, float m) {
    __m512 mv = _mm512_set1_ps(m), sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 e = exp_neg(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), mv));
        _mm512_mask_storeu_ps(s + i, k, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
    }
    return _mm512_reduce_add_ps(sum);
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_softmax_register_avx512(kvc_softmax_kernels *k) {
    k->max = kvc_softmax_max_avx512;
    k->exp_sum = kvc_softmax_exp_sum_avx512;
}
