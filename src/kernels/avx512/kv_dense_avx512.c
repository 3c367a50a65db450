/* AVX-512 kernels of the dense codecs f32 / f16 / bf16 (codec/dense.h; the
 * scalar references are in src/kv/codec/dense.c). qk: blocks of 4 tokens × 4
 * query heads in 16 accumulators over the head dimension, reduced by a
 * shuffle tree so each 128-bit lane ends with 4 scores of one head; pv: 4
 * chunks of 16 output channels × up to 4 heads in registers, one pass of the
 * value rows per block. f16 is widened with VCVTPH2PS (F16C / AVX-512F), bf16
 * by a 16-bit shift. Any d (masked tails), any G, any n. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kv/codec/dense.h"

typedef enum { T_F32, T_F16, T_BF16 } elem_t;

/* Software prefetch distance in bytes: 6x faster than none at 64K tokens, and
 * 8 KiB ~10% faster than 4 KiB from DRAM on one core (docs/benchmarks.md). */
enum { PF_AHEAD = 8192 };

/* A range of at least this many bytes is a stream and prefetches past its end
 * (the next tile of a chunk follows); a shorter one (a selected unit of a few
 * tokens) prefetches only inside itself: the rows after it are usually not
 * selected, and the driver prefetches the next ranges it will read. */
enum { PF_STREAM = 2 * PF_AHEAD };

/* 16 elements (mask for a partial chunk) widened to f32. */
static inline __m512 load16(elem_t t, const void *p, __mmask16 m) {
    switch (t) {
    case T_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    case T_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    default: return _mm512_maskz_loadu_ps(m, p);
    }
}

static inline size_t esize(elem_t t) { return t == T_F32 ? 4 : 2; }

static inline __mmask16 tail_mask(int left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

/* Lanes g*4 + t of the result = total of acc[t][g] (see the layout note above). */
static inline __m512 reduce16(__m512 a[16]) {
    __m512 r[8], y[4];
    #pragma GCC unroll 16
    for (int m = 0; m < 8; m++)
        r[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * m], a[2 * m + 1], 0xEE));
    #pragma GCC unroll 16
    for (int j = 0; j < 4; j++)
        y[j] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * j], r[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(r[2 * j], r[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    __m512 u = _mm512_add_ps(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
    __m512 w = _mm512_add_ps(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(u, w, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u, w, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* Scores of heads g0 .. g0+GB-1 (GB = 3 or 4, a compile-time constant after
 * inlining; ng <= GB of them real) for all n tokens. */
static inline __attribute__((always_inline)) void qk_heads(elem_t t, const char *xb, size_t row, int n, int d,
                                                           const float *q, int g0, int ng, int ldq, float *s,
                                                           int lds, const int GB) {
    int i = 0, stream = (size_t)n * row >= PF_STREAM;
    for (; i + 4 <= n; i += 4) {
        /* software prefetch PF_AHEAD bytes ahead: the rows stream from memory */
        if (g0 == 0 && (stream || (size_t)(i + 4) * row + PF_AHEAD <= (size_t)n * row))
            for (size_t b = 0; b < 4 * row; b += 64) _mm_prefetch(xb + (size_t)i * row + PF_AHEAD + b, _MM_HINT_T0);
        __m512 acc[16];
        #pragma GCC unroll 16
        for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
        for (int j = 0; j < d; j += 16) {
            __mmask16 m = tail_mask(d - j);
            __m512 kv[4], qv[4];
            #pragma GCC unroll 16
            for (int tt = 0; tt < 4; tt++) kv[tt] = load16(t, xb + (size_t)(i + tt) * row + (size_t)j * esize(t), m);
            #pragma GCC unroll 16
            for (int g = 0; g < GB; g++)
                qv[g] = g < ng ? _mm512_maskz_loadu_ps(m, q + (size_t)(g0 + g) * ldq + j) : _mm512_setzero_ps();
            #pragma GCC unroll 16
            for (int tt = 0; tt < 4; tt++)
                #pragma GCC unroll 16
                for (int g = 0; g < GB; g++) acc[tt * 4 + g] = _mm512_fmadd_ps(kv[tt], qv[g], acc[tt * 4 + g]);
        }
        float r[16];
        _mm512_storeu_ps(r, reduce16(acc));
        #pragma GCC unroll 16
        for (int g = 0; g < ng; g++) memcpy(s + (size_t)(g0 + g) * lds + i, r + 4 * g, 16);
    }
    for (; i < n; i++) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int j = 0; j < d; j += 16) {
            __mmask16 m = tail_mask(d - j);
            __m512 kv = load16(t, xb + (size_t)i * row + (size_t)j * esize(t), m);
            #pragma GCC unroll 16
            for (int g = 0; g < ng; g++)
                acc[g] = _mm512_fmadd_ps(kv, _mm512_maskz_loadu_ps(m, q + (size_t)(g0 + g) * ldq + j), acc[g]);
        }
        #pragma GCC unroll 16
        for (int g = 0; g < ng; g++) s[(size_t)(g0 + g) * lds + i] = _mm512_reduce_add_ps(acc[g]);
    }
}

/* Heads in blocks of 4 (4 tokens x 4 heads in registers), or of 3 when G is a
 * multiple of 3 and not of 4 (GQA groups of 3: no idle fourth head). */
static inline void qk_dense(elem_t t, const void *x, int n, int d, const float *q, int G, int ldq,
                            float *s, int lds) {
    const char *xb = x;
    size_t row = (size_t)d * esize(t);
    if (G % 4 != 0 && G % 3 == 0) {
        for (int g0 = 0; g0 < G; g0 += 3) qk_heads(t, xb, row, n, d, q, g0, 3, ldq, s, lds, 3);
        return;
    }
    for (int g0 = 0; g0 < G; g0 += 4) qk_heads(t, xb, row, n, d, q, g0, G - g0 < 4 ? G - g0 : 4, ldq, s, lds, 4);
}

static inline void pv_dense(elem_t t, const void *x, int n, int d, const float *p, int G, int ldp,
                            float *o, int ldo) {
    const char *xb = x;
    size_t row = (size_t)d * esize(t);
    int stream = (size_t)n * row >= PF_STREAM;
    for (int j0 = 0; j0 < d; j0 += 64) {
        int nc = (d - j0 + 15) / 16;
        if (nc > 4) nc = 4;
        __mmask16 mk[4];
        #pragma GCC unroll 16
        for (int c = 0; c < 4; c++) mk[c] = c < nc ? tail_mask(d - j0 - 16 * c) : 0;
        for (int g0 = 0; g0 < G; g0 += 4) {
            int ng = G - g0 < 4 ? G - g0 : 4;
            __m512 acc[4][4];
            #pragma GCC unroll 16
            for (int g = 0; g < 4; g++)
                #pragma GCC unroll 16
                for (int c = 0; c < 4; c++)
                    acc[g][c] = g < ng && c < nc ? _mm512_maskz_loadu_ps(mk[c], o + (size_t)(g0 + g) * ldo + j0 + 16 * c)
                                                 : _mm512_setzero_ps();
            for (int i = 0; i < n; i++) {
                const char *xr = xb + (size_t)i * row + (size_t)j0 * esize(t);
                if (j0 == 0 && g0 == 0 && (stream || (size_t)(i + 1) * row + PF_AHEAD <= (size_t)n * row))
                    for (size_t b = 0; b < row; b += 64) _mm_prefetch(xr + PF_AHEAD + b, _MM_HINT_T0);
                __m512 v[4];
                #pragma GCC unroll 16
                for (int c = 0; c < 4; c++) v[c] = c < nc ? load16(t, xr + (size_t)16 * c * esize(t), mk[c]) : _mm512_setzero_ps();
                #pragma GCC unroll 16
                for (int g = 0; g < ng; g++) {
                    __m512 pb = _mm512_set1_ps(p[(size_t)(g0 + g) * ldp + i]);
                    #pragma GCC unroll 16
                    for (int c = 0; c < nc; c++) acc[g][c] = _mm512_fmadd_ps(pb, v[c], acc[g][c]);
                }
            }
            #pragma GCC unroll 16
            for (int g = 0; g < ng; g++)
                #pragma GCC unroll 16
                for (int c = 0; c < nc; c++)
                    _mm512_mask_storeu_ps(o + (size_t)(g0 + g) * ldo + j0 + 16 * c, mk[c], acc[g][c]);
        }
    }
}

static void kvc_qk_dense_f32_avx512(const void *x, int n, int d, const float *q, int G, int ldq, float *s, int lds) {
    qk_dense(T_F32, x, n, d, q, G, ldq, s, lds);
}
static void kvc_qk_dense_f16_avx512(const void *x, int n, int d, const float *q, int G, int ldq, float *s, int lds) {
    qk_dense(T_F16, x, n, d, q, G, ldq, s, lds);
}
static void kvc_qk_dense_bf16_avx512(const void *x, int n, int d, const float *q, int G, int ldq, float *s, int lds) {
    qk_dense(T_BF16, x, n, d, q, G, ldq, s, lds);
}
static void kvc_pv_dense_f32_avx512(const void *x, int n, int d, const float *p, int G, int ldp, float *o, int ldo) {
    pv_dense(T_F32, x, n, d, p, G, ldp, o, ldo);
}
static void kvc_pv_dense_f16_avx512(const void *x, int n, int d, const float *p, int G, int ldp, float *o, int ldo) {
    pv_dense(T_F16, x, n, d, p, G, ldp, o, ldo);
}
static void kvc_pv_dense_bf16_avx512(const void *x, int n, int d, const float *p, int G, int ldp, float *o, int ldo) {
    pv_dense(T_BF16, x, n, d, p, G, ldp, o, ldo);
}

static inline void cvt_dense(elem_t t, const void *x, size_t n, float *y) {
    const char *xb = x;
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, load16(t, xb + i * esize(t), m));
    }
}
static void kvc_cvt_dense_f16_avx512(const void *x, size_t n, float *y) { cvt_dense(T_F16, x, n, y); }
static void kvc_cvt_dense_bf16_avx512(const void *x, size_t n, float *y) { cvt_dense(T_BF16, x, n, y); }

/* f32 -> f16 with vcvtps2ph (round to nearest even, as kvc_f32_to_f16); NaNs
 * become the reference's quiet NaN (sign | 0x7e00) whatever their payload. */
static void kvc_put_dense_f16_avx512(const float *x, size_t n, void *y) {
    uint16_t *o = y;
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        __m256i qn = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)),
                                     _mm256_set1_epi16(0x7e00));
        h = _mm256_mask_mov_epi16(h, nan, qn);
        _mm256_mask_storeu_epi16(o + i, m, h);
    }
}

/* Registers this file's kernels over the table's (kvc_codecs_init). */
void kvc_dense_register_avx512(kvc_dense_kernels *k) {
    k->qk[KVC_DENSE_F32] = kvc_qk_dense_f32_avx512;
    k->qk[KVC_DENSE_F16] = kvc_qk_dense_f16_avx512;
    k->qk[KVC_DENSE_BF16] = kvc_qk_dense_bf16_avx512;
    k->pv[KVC_DENSE_F32] = kvc_pv_dense_f32_avx512;
    k->pv[KVC_DENSE_F16] = kvc_pv_dense_f16_avx512;
    k->pv[KVC_DENSE_BF16] = kvc_pv_dense_bf16_avx512;
    k->cvt[KVC_DENSE_F16] = kvc_cvt_dense_f16_avx512;
    k->cvt[KVC_DENSE_BF16] = kvc_cvt_dense_bf16_avx512;
    k->put[KVC_DENSE_F16] = kvc_put_dense_f16_avx512;
}
