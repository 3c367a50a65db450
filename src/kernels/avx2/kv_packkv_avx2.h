/* Helpers and entry points shared by the AVX2 PackKV kernel files
 * (kv_packkv_avx2.c: the paper's layout; kv_packkv_grouped_avx2.c: the
 * grouped layout); included only by them, compiled with the AVX2 flags. */
#ifndef KVC_KERNELS_KV_PACKKV_AVX2_H
#define KVC_KERNELS_KV_PACKKV_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "kv/codec/packkv.h"

/* 8 bf16 values as floats. */
static inline __m256 kvc_pk_bf16x8_avx2(const uint16_t *p) {
    __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
}

static inline float kvc_pk_hsum8_avx2(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* sum_c q_c m_c over dim channels. */
static inline float kvc_pk_dot_u8_avx2(const float *q, const uint8_t *m, int dim) {
    __m256 acc = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= dim; c += 8) {
        __m128i m8 = _mm_loadl_epi64((const __m128i *)(m + c));
        __m256 mv = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8));
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), mv, acc);
    }
    float r = kvc_pk_hsum8_avx2(acc);
    for (; c < dim; c++) r += q[c] * (float)m[c];
    return r;
}

static inline float kvc_pk_sum_f32_avx2(const float *x, int n) {
    __m256 acc = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= n; c += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + c));
    float r = kvc_pk_hsum8_avx2(acc);
    for (; c < n; c++) r += x[c];
    return r;
}

/* The weights p_t s_t of one head for the packs (of 8 nhalf tokens) over
 * [j0, j1), 0 outside it: wv[pk * nhalf + half] holds 8 tokens, wsum[pk] their
 * sum per pack; returns sum_t p_t m_t. ph[j - j0] is block token j's weight. */
float kvc_pk_weights_avx2(const kvc_pk_block *b, const float *ph, int j0, int j1, int nhalf,
                          __m256 *wv, float *wsum);

void kvc_pk_grouped_init_avx2(void); /* the grouped kernels' tables; before the first call */
void kvc_pk_qk_grouped_avx2(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1,
                            float *s, int lds);
void kvc_pk_pv_grouped_avx2(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1,
                            float *o, int ldo);

#endif
