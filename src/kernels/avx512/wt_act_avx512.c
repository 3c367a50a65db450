/* AVX-512 activation preparation (Q8_0 and Q8_K blocks, layouts in wtype.h):
 * bit-identical to the references in src/model/wt_act.c (same max, same
 * 127/amax, cvtps2dq rounds to nearest even like lrintf). */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

/* Quantise 16 floats with multiplier id to 16 int8; returns the int8 values
 * widened to int32. Widening the stored (saturated) bytes rather than keeping
 * the cvtps2dq result keeps the sums in range whatever the input: a NaN or Inf
 * activation converts to INT_MIN, and adding those overflowed a signed int. */
KVC_AINLINE __m512i quant16(const float *x, __m512 id, int8_t *q) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
    __m128i b = _mm512_cvtsepi32_epi8(v);
    _mm_storeu_si128((__m128i *)q, b);
    return _mm512_cvtepi8_epi32(b);
}

KVC_AINLINE float absmax(const float *x, int len) {
    __m512 m = _mm512_setzero_ps();
    for (int j = 0; j < len; j += 16)
        m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + j)));
    return _mm512_reduce_max_ps(m);
}

static void act_q8_0_avx512(const float *x, void *buf, int64_t n) {
    int8_t *q = buf;
    float *d = (float *)(q + n), *s = d + n / KVC_QK;
    for (int64_t b = 0; b < n / KVC_QK; b++) {
        const float *xb = x + b * KVC_QK;
        float amax = absmax(xb, KVC_QK);
        d[b] = amax / 127.0f;
        __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        __m512i v = _mm512_add_epi32(quant16(xb, id, q + b * KVC_QK),
                                     quant16(xb + 16, id, q + b * KVC_QK + 16));
        s[b] = d[b] * (float)_mm512_reduce_add_epi32(v);
    }
}

static void act_q8_k_avx512(const float *x, void *buf, int64_t n) {
    int8_t *q = buf;
    float *d = (float *)(q + n);
    int16_t *bsum = (int16_t *)(d + n / KVC_QKK);
    for (int64_t b = 0; b < n / KVC_QKK; b++) {
        const float *xb = x + b * KVC_QKK;
        float amax = absmax(xb, KVC_QKK);
        d[b] = amax / 127.0f;
        __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        for (int g = 0; g < 16; g++)
            bsum[b * 16 + g] = (int16_t)_mm512_reduce_add_epi32(
                quant16(xb + 16 * g, id, q + b * KVC_QKK + 16 * g));
    }
}

void kvc_wt_register_act_avx512(kvc_act_fn *q8_0, kvc_act_fn *q8_k) {
    *q8_0 = act_q8_0_avx512;
    *q8_k = act_q8_k_avx512;
}
