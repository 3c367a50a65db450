/* Helpers and entry points shared by the AVX2 PackKV kernel files
 * (kv_packkv_avx2.c: the paper's layout; kv_packkv_grouped_avx2.c: the
 * grouped layout); included only by them, compiled with the AVX2 flags. */
#ifndef KVC_KERNELS_KV_PACKKV_AVX2_H
#define KVC_KERNELS_KV_PACKKV_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/avx2/kv_avx2_util.h" /* kvc_hsum256_ps, kvc_lanes8_avx2 */
#include "kv/codec/packkv.h"

/* 8 bf16 values as floats. */
static inline __m256 kvc_pk_bf16x8_avx2(const uint16_t *p) {
    __m256i x = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
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
    float r = kvc_hsum256_ps(acc);
    for (; c < dim; c++) r += q[c] * (float)m[c];
    return r;
}

static inline float kvc_pk_sum_f32_avx2(const float *x, int n) {
    __m256 acc = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= n; c += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + c));
    float r = kvc_hsum256_ps(acc);
    for (; c < n; c++) r += x[c];
    return r;
}

/* The weights p_t s_t of one head for the packs (of 8 nhalf tokens) over
 * [j0, j1), 0 outside it: wv[pk * nhalf + half] holds 8 tokens, wsum[pk] their
 * sum per pack; returns sum_t p_t m_t. ph[j - j0] is block token j's weight. */
static inline float kvc_pk_weights_avx2(const kvc_pk_block *b, const float *ph, int j0, int j1,
                                        int nhalf, __m256 *wv, float *wsum) {
    const int P = 8 * nhalf, p0 = j0 / P, p1 = (j1 + P - 1) / P;
    __m256 mt = _mm256_setzero_ps();
    ph -= j0; /* ph[j]: weight of block token j */
    for (int pk = p0; pk < p1; pk++) {
        __m256 ws = _mm256_setzero_ps();
        for (int half = 0; half < nhalf; half++) {
            int first = P * pk + 8 * half;
            __m256 pw = _mm256_maskload_ps(ph + first, kvc_lanes8_avx2(j0 - first, j1 - first));
            __m256 x = _mm256_mul_ps(pw, kvc_pk_bf16x8_avx2(b->scales + first));
            wv[pk * nhalf + half] = x;
            ws = _mm256_add_ps(ws, x);
            mt = _mm256_fmadd_ps(pw, _mm256_loadu_ps(b->mins + first), mt);
        }
        wsum[pk] = kvc_hsum256_ps(ws);
    }
    return kvc_hsum256_ps(mt);
}

/* Scores of the 8 tokens from block token `first` for one head, from the
 * residual dot products acc: s_t (acc + dmin) + m_t qsum, stored to srow[j -
 * j0] for the tokens inside [j0, j1). */
static inline void kvc_pk_store_scores8_avx2(const kvc_pk_block *b, __m256 acc, float dmin,
                                             float qsum, int first, int j0, int j1, float *srow) {
    __m256 sc = kvc_pk_bf16x8_avx2(b->scales + first);
    __m256 mn = _mm256_loadu_ps(b->mins + first);
    __m256 x = _mm256_add_ps(acc, _mm256_set1_ps(dmin));
    x = _mm256_fmadd_ps(mn, _mm256_set1_ps(qsum), _mm256_mul_ps(sc, x));
    float out[8];
    _mm256_storeu_ps(out, x);
    int lo = first > j0 ? first : j0, hi = first + 8 < j1 ? first + 8 : j1;
    for (int j = lo; j < hi; j++) srow[j - j0] = out[j - first];
}

void kvc_pk_grouped_init_avx2(void); /* the grouped kernels' tables; before the first call */
void kvc_pk_qk_grouped_avx2(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1,
                            float *s, int lds);
void kvc_pk_pv_grouped_avx2(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1,
                            float *o, int ldo);

#endif
