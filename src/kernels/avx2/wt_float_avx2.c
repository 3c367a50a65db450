/* AVX2+FMA+F16C dot kernels for the float weight types F32, F16 and BF16
 * against an f32 activation; references in src/model/wt_float.c. */
#include "kernels/avx2/wt_avx2_util.h"
#include "model/wt_kernels.h"

static float dot_f32_f32_avx2(const void *row, const void *act, int64_t n) {
    const float *w = row, *a = act;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(a + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(a + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(a + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(a + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(a + i), s0);
    float s = kvc_hsum256_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += w[i] * a[i];
    return s;
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static float dot_f16_f32_avx2(const void *row, const void *act, int64_t n) {
    const uint16_t *w = row;
    const float *a = act;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_f16x8(w + i), _mm256_loadu_ps(a + i), s0);
        s1 = _mm256_fmadd_ps(load_f16x8(w + i + 8), _mm256_loadu_ps(a + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_f16x8(w + i + 16), _mm256_loadu_ps(a + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_f16x8(w + i + 24), _mm256_loadu_ps(a + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_f16x8(w + i), _mm256_loadu_ps(a + i), s0);
    float s = kvc_hsum256_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += kvc_f16_to_f32(w[i]) * a[i];
    return s;
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static float dot_bf16_f32_avx2(const void *row, const void *act, int64_t n) {
    const uint16_t *w = row;
    const float *a = act;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(a + i), s0);
        s1 = _mm256_fmadd_ps(load_bf16x8(w + i + 8), _mm256_loadu_ps(a + i + 8), s1);
        s2 = _mm256_fmadd_ps(load_bf16x8(w + i + 16), _mm256_loadu_ps(a + i + 16), s2);
        s3 = _mm256_fmadd_ps(load_bf16x8(w + i + 24), _mm256_loadu_ps(a + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(a + i), s0);
    float s = kvc_hsum256_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++)
        s += kvc_bf16_to_f32(w[i]) * a[i];
    return s;
}

static void dequant_f16_avx2(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, load_f16x8(h + i));
    for (; i < n; i++)
        y[i] = kvc_f16_to_f32(h[i]);
}

static void dequant_bf16_avx2(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, load_bf16x8(h + i));
    for (; i < n; i++)
        y[i] = kvc_bf16_to_f32(h[i]);
}

void kvc_wt_register_float_avx2(kvc_wtype *table) {
    table[KVC_WT_F32].dot = dot_f32_f32_avx2;
    table[KVC_WT_F16].dot = dot_f16_f32_avx2;
    table[KVC_WT_F16].dequant = dequant_f16_avx2;
    table[KVC_WT_BF16].dot = dot_bf16_f32_avx2;
    table[KVC_WT_BF16].dequant = dequant_bf16_avx2;
}
