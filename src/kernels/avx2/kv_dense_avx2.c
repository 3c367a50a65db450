/* AVX2 kernels of the dense codecs f32 / f16 / bf16 (codec/dense.h; scalar
 * references in src/kv/codec/dense.c). qk: 4 tokens × 2 query heads in 8
 * accumulators over the head dimension, reduced with two levels of hadd;
 * pv: 4 chunks of 8 output channels × 2 heads in registers. f16 is widened
 * with F16C (VCVTPH2PS), bf16 by a 16-bit shift. Tails of d are handled by a
 * zero-padded copy of the partial chunk; any G, any n. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "base/f16.h"
#include "kv/codec/dense.h"

typedef enum { T_F32, T_F16, T_BF16 } elem_t;

enum { PF_AHEAD = 4096 }; /* software prefetch distance in bytes: the rows stream from memory */
/* A range of at least PF_STREAM bytes prefetches past its end (the next tile
 * follows); a shorter one (a selected unit) only inside itself (see the
 * AVX-512 file). */
enum { PF_STREAM = 4 * PF_AHEAD };

static inline size_t esize(elem_t t) { return t == T_F32 ? 4 : 2; }

/* 8 elements widened to f32; `left` < 8 reads only that many (rest zero). */
static inline __m256 load8(elem_t t, const void *p, int left) {
    if (left < 8) {
        uint8_t buf[32] = {0};
        memcpy(buf, p, (size_t)left * esize(t));
        return load8(t, buf, 8);
    }
    switch (t) {
    case T_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case T_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    default: return _mm256_loadu_ps(p);
    }
}

static inline __m256 loadq(const float *q, int left) {
    if (left >= 8) return _mm256_loadu_ps(q);
    float buf[8] = {0};
    memcpy(buf, q, (size_t)left * 4);
    return _mm256_loadu_ps(buf);
}

/* Sums of a[0..3] (each 8 lanes) as one 4-lane vector. */
static inline __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

static inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

static inline void qk_dense(elem_t t, const void *x, int n, int d, const float *q, int G, int ldq,
                            float *s, int lds) {
    const char *xb = x;
    size_t row = (size_t)d * esize(t);
    int stream = (size_t)n * row >= PF_STREAM;
    for (int g0 = 0; g0 < G; g0 += 2) {
        int ng = G - g0 < 2 ? G - g0 : 2;
        const float *q0 = q + (size_t)g0 * ldq, *q1 = q + (size_t)(g0 + ng - 1) * ldq;
        int i = 0;
        for (; i + 4 <= n; i += 4) {
            if (g0 == 0 && (stream || (size_t)(i + 4) * row + PF_AHEAD <= (size_t)n * row))
                for (size_t b = 0; b < 4 * row; b += 64) _mm_prefetch(xb + (size_t)i * row + PF_AHEAD + b, _MM_HINT_T0);
            __m256 a[2][4];
            #pragma GCC unroll 16
            for (int g = 0; g < 2; g++)
                #pragma GCC unroll 16
                for (int k = 0; k < 4; k++) a[g][k] = _mm256_setzero_ps();
            for (int j = 0; j < d; j += 8) {
                int left = d - j;
                __m256 qa = loadq(q0 + j, left), qb = loadq(q1 + j, left);
                #pragma GCC unroll 16
                for (int k = 0; k < 4; k++) {
                    __m256 kv = load8(t, xb + (size_t)(i + k) * row + (size_t)j * esize(t), left);
                    a[0][k] = _mm256_fmadd_ps(kv, qa, a[0][k]);
                    a[1][k] = _mm256_fmadd_ps(kv, qb, a[1][k]);
                }
            }
            _mm_storeu_ps(s + (size_t)g0 * lds + i, reduce4(a[0][0], a[0][1], a[0][2], a[0][3]));
            if (ng == 2) _mm_storeu_ps(s + (size_t)(g0 + 1) * lds + i, reduce4(a[1][0], a[1][1], a[1][2], a[1][3]));
        }
        for (; i < n; i++) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            for (int j = 0; j < d; j += 8) {
                int left = d - j;
                __m256 kv = load8(t, xb + (size_t)i * row + (size_t)j * esize(t), left);
                a0 = _mm256_fmadd_ps(kv, loadq(q0 + j, left), a0);
                a1 = _mm256_fmadd_ps(kv, loadq(q1 + j, left), a1);
            }
            s[(size_t)g0 * lds + i] = hsum8(a0);
            if (ng == 2) s[(size_t)(g0 + 1) * lds + i] = hsum8(a1);
        }
    }
}

static inline void pv_dense(elem_t t, const void *x, int n, int d, const float *p, int G, int ldp,
                            float *o, int ldo) {
    const char *xb = x;
    size_t row = (size_t)d * esize(t);
    int stream = (size_t)n * row >= PF_STREAM;
    for (int j0 = 0; j0 < d; j0 += 32) {
        int w = d - j0 < 32 ? d - j0 : 32;
        int nc = (w + 7) / 8;
        for (int g0 = 0; g0 < G; g0 += 2) {
            int ng = G - g0 < 2 ? G - g0 : 2;
            float tmp[2][32] = {{0}};
            #pragma GCC unroll 16
            for (int g = 0; g < ng; g++) memcpy(tmp[g], o + (size_t)(g0 + g) * ldo + j0, (size_t)w * 4);
            __m256 acc[2][4];
            #pragma GCC unroll 16
            for (int g = 0; g < 2; g++)
                #pragma GCC unroll 16
                for (int c = 0; c < 4; c++) acc[g][c] = _mm256_loadu_ps(tmp[g] + 8 * c);
            const float *p0 = p + (size_t)g0 * ldp, *p1 = p + (size_t)(g0 + ng - 1) * ldp;
            for (int i = 0; i < n; i++) {
                const char *xr = xb + (size_t)i * row + (size_t)j0 * esize(t);
                if (j0 == 0 && g0 == 0 && (stream || (size_t)(i + 1) * row + PF_AHEAD <= (size_t)n * row))
                    for (size_t b = 0; b < row; b += 64) _mm_prefetch(xr + PF_AHEAD + b, _MM_HINT_T0);
                __m256 b0 = _mm256_broadcast_ss(p0 + i), b1 = _mm256_broadcast_ss(p1 + i);
                #pragma GCC unroll 16
                for (int c = 0; c < nc; c++) {
                    __m256 v = load8(t, xr + (size_t)8 * c * esize(t), w - 8 * c);
                    acc[0][c] = _mm256_fmadd_ps(b0, v, acc[0][c]);
                    acc[1][c] = _mm256_fmadd_ps(b1, v, acc[1][c]);
                }
            }
            #pragma GCC unroll 16
            for (int g = 0; g < 2; g++)
                #pragma GCC unroll 16
                for (int c = 0; c < 4; c++) _mm256_storeu_ps(tmp[g] + 8 * c, acc[g][c]);
            #pragma GCC unroll 16
            for (int g = 0; g < ng; g++) memcpy(o + (size_t)(g0 + g) * ldo + j0, tmp[g], (size_t)w * 4);
        }
    }
}

static void kvc_qk_dense_f32_avx2(const void *x, int n, int d, const float *q, int G, int ldq, float *s, int lds) {
    qk_dense(T_F32, x, n, d, q, G, ldq, s, lds);
}
static void kvc_qk_dense_f16_avx2(const void *x, int n, int d, const float *q, int G, int ldq, float *s, int lds) {
    qk_dense(T_F16, x, n, d, q, G, ldq, s, lds);
}
static void kvc_qk_dense_bf16_avx2(const void *x, int n, int d, const float *q, int G, int ldq, float *s, int lds) {
    qk_dense(T_BF16, x, n, d, q, G, ldq, s, lds);
}
static void kvc_pv_dense_f32_avx2(const void *x, int n, int d, const float *p, int G, int ldp, float *o, int ldo) {
    pv_dense(T_F32, x, n, d, p, G, ldp, o, ldo);
}
static void kvc_pv_dense_f16_avx2(const void *x, int n, int d, const float *p, int G, int ldp, float *o, int ldo) {
    pv_dense(T_F16, x, n, d, p, G, ldp, o, ldo);
}
static void kvc_pv_dense_bf16_avx2(const void *x, int n, int d, const float *p, int G, int ldp, float *o, int ldo) {
    pv_dense(T_BF16, x, n, d, p, G, ldp, o, ldo);
}

static inline void cvt_dense(elem_t t, const void *x, size_t n, float *y) {
    const char *xb = x;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load8(t, xb + i * esize(t), 8));
    if (i < n) {
        float buf[8];
        _mm256_storeu_ps(buf, load8(t, xb + i * esize(t), (int)(n - i)));
        memcpy(y + i, buf, (n - i) * 4);
    }
}
static void kvc_cvt_dense_f16_avx2(const void *x, size_t n, float *y) { cvt_dense(T_F16, x, n, y); }
static void kvc_cvt_dense_bf16_avx2(const void *x, size_t n, float *y) { cvt_dense(T_BF16, x, n, y); }

/* f32 -> f16 with F16C (round to nearest even, as kvc_f32_to_f16); NaNs
 * become the reference's quiet NaN (sign | 0x7e00) whatever their payload. */
static void kvc_put_dense_f16_avx2(const float *x, size_t n, void *y) {
    uint16_t *o = y;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 un = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        __m128i nan = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(un)),
                                      _mm256_extracti128_si256(_mm256_castps_si256(un), 1));
        __m128i qn = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)), _mm_set1_epi16(0x7e00));
        _mm_storeu_si128((__m128i *)(o + i), _mm_blendv_epi8(h, qn, nan));
    }
    for (; i < n; i++) o[i] = kvc_f32_to_f16(x[i]);
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_dense_register_avx2(kvc_dense_kernels *k) {
    k->qk[KVC_DENSE_F32] = kvc_qk_dense_f32_avx2;
    k->qk[KVC_DENSE_F16] = kvc_qk_dense_f16_avx2;
    k->qk[KVC_DENSE_BF16] = kvc_qk_dense_bf16_avx2;
    k->pv[KVC_DENSE_F32] = kvc_pv_dense_f32_avx2;
    k->pv[KVC_DENSE_F16] = kvc_pv_dense_f16_avx2;
    k->pv[KVC_DENSE_BF16] = kvc_pv_dense_bf16_avx2;
    k->cvt[KVC_DENSE_F16] = kvc_cvt_dense_f16_avx2;
    k->cvt[KVC_DENSE_BF16] = kvc_cvt_dense_bf16_avx2;
    k->put[KVC_DENSE_F16] = kvc_put_dense_f16_avx2;
}
