/* AVX2 kernels of the dense codecs f32 / f16 / bf16 (codec/dense.h; scalar
 * references in src/kv/codec/dense.c). Each key or value row is loaded and
 * widened once per block of up to 3 query heads (GQA groups of 3 and 6 in
 * one or two passes), with the block size a compile-time constant so that all
 * accumulators stay in the 16 YMM registers (a runtime-shaped loop spilled
 * them to the stack and ran at a third of the bandwidth). qk: 4 tokens × up
 * to 3 heads, reduced with two levels of hadd; pv: 4 chunks of 8 output
 * channels (one f16 cache line) × up to 3 heads. f16 is widened with F16C
 * (VCVTPH2PS), bf16 by a 16-bit shift. A d that is not a multiple of 8 ends
 * with one zero-padded chunk; any G, any n. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "base/f16.h"
#include "kernels/avx2/kv_avx2_util.h"
#include "kv/codec/dense.h"

typedef enum { T_F32, T_F16, T_BF16 } elem_t;

enum { PF_AHEAD = 4096 }; /* software prefetch distance in bytes: the rows stream from memory */
/* A range of at least PF_STREAM bytes prefetches past its end (the next tile
 * follows); a shorter one (a selected unit) only inside itself (see the
 * AVX-512 file). */
enum { PF_STREAM = 4 * PF_AHEAD };

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline size_t esize(elem_t t) { return t == T_F32 ? 4 : 2; }

/* 8 whole elements widened to f32. */
ALWAYS_INLINE __m256 load8(elem_t t, const void *p) {
    switch (t) {
    case T_F16: return kvc_load_f16x8((const kvc_f16 *)p);
    case T_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    default: return _mm256_loadu_ps(p);
    }
}

/* The first `left` (< 8) elements widened, the rest zero. */
static inline __m256 load8_part(elem_t t, const void *p, int left) {
    uint8_t buf[32] = {0};
    memcpy(buf, p, (size_t)left * esize(t));
    return load8(t, buf);
}

static inline __m256 loadq_part(const float *q, int left) {
    float buf[8] = {0};
    memcpy(buf, q, (size_t)left * 4);
    return _mm256_loadu_ps(buf);
}

static inline float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    return _mm_cvtss_f32(s);
}

/* Scores of heads q[0..H-1] (H a compile-time constant after inlining) for
 * all n rows; `pf` says whether this pass prefetches (the first one). */
ALWAYS_INLINE void qk_heads(elem_t t, const char *xb, size_t row, int n, int d, const float *q, int ldq,
                            float *s, int lds, int pf, const int H) {
    const int d8 = d & ~7, tail = d - d8, stream = (size_t)n * row >= PF_STREAM;
    const size_t es = esize(t);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const char *x0 = xb + (size_t)i * row;
        if (pf && (stream || (size_t)(i + 4) * row + PF_AHEAD <= (size_t)n * row))
            for (size_t b = 0; b < 4 * row; b += 64) _mm_prefetch(x0 + PF_AHEAD + b, _MM_HINT_T0);
        __m256 a[4][3];
        #pragma GCC unroll 16
        for (int k = 0; k < 4; k++)
            #pragma GCC unroll 16
            for (int g = 0; g < H; g++) a[k][g] = _mm256_setzero_ps();
        for (int j = 0; j < d8; j += 8) {
            #pragma GCC unroll 16
            for (int k = 0; k < 4; k++) {
                __m256 kv = load8(t, x0 + (size_t)k * row + (size_t)j * es);
                #pragma GCC unroll 16
                for (int g = 0; g < H; g++) a[k][g] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + (size_t)g * ldq + j), a[k][g]);
            }
        }
        if (tail) {
            #pragma GCC unroll 16
            for (int k = 0; k < 4; k++) {
                __m256 kv = load8_part(t, x0 + (size_t)k * row + (size_t)d8 * es, tail);
                #pragma GCC unroll 16
                for (int g = 0; g < H; g++) a[k][g] = _mm256_fmadd_ps(kv, loadq_part(q + (size_t)g * ldq + d8, tail), a[k][g]);
            }
        }
        #pragma GCC unroll 16
        for (int g = 0; g < H; g++) _mm_storeu_ps(s + (size_t)g * lds + i, kvc_reduce4_avx2(a[0][g], a[1][g], a[2][g], a[3][g]));
    }
    for (; i < n; i++) {
        const char *xr = xb + (size_t)i * row;
        __m256 a[3];
        #pragma GCC unroll 16
        for (int g = 0; g < H; g++) a[g] = _mm256_setzero_ps();
        for (int j = 0; j < d8; j += 8) {
            __m256 kv = load8(t, xr + (size_t)j * es);
            #pragma GCC unroll 16
            for (int g = 0; g < H; g++) a[g] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + (size_t)g * ldq + j), a[g]);
        }
        if (tail) {
            __m256 kv = load8_part(t, xr + (size_t)d8 * es, tail);
            #pragma GCC unroll 16
            for (int g = 0; g < H; g++) a[g] = _mm256_fmadd_ps(kv, loadq_part(q + (size_t)g * ldq + d8, tail), a[g]);
        }
        #pragma GCC unroll 16
        for (int g = 0; g < H; g++) s[(size_t)g * lds + i] = hsum8(a[g]);
    }
}

ALWAYS_INLINE void qk_dense(elem_t t, const void *x, int n, int d, const float *q, int G, int ldq, float *s,
                            int lds) {
    size_t row = (size_t)d * esize(t);
    for (int g0 = 0; g0 < G;) {
        int h = kvc_head_block_avx2(G - g0);
        const float *qg = q + (size_t)g0 * ldq;
        float *sg = s + (size_t)g0 * lds;
        if (h == 3) qk_heads(t, x, row, n, d, qg, ldq, sg, lds, g0 == 0, 3);
        else if (h == 2) qk_heads(t, x, row, n, d, qg, ldq, sg, lds, g0 == 0, 2);
        else qk_heads(t, x, row, n, d, qg, ldq, sg, lds, g0 == 0, 1);
        g0 += h;
    }
}

/* o[g][j0 .. j0+8C) += sum_i p[g][i] x[i][j0 ..] for H heads (H, C compile-time
 * constants; the chunks are whole, 8 elements each). */
ALWAYS_INLINE void pv_block(elem_t t, const char *xb, size_t row, int n, int j0, const float *p, int ldp,
                            float *o, int ldo, int pf, const int H, const int C) {
    const int stream = (size_t)n * row >= PF_STREAM;
    const size_t es = esize(t);
    __m256 acc[3][4];
    #pragma GCC unroll 16
    for (int g = 0; g < H; g++)
        #pragma GCC unroll 16
        for (int c = 0; c < C; c++) acc[g][c] = _mm256_loadu_ps(o + (size_t)g * ldo + j0 + 8 * c);
    for (int i = 0; i < n; i++) {
        const char *xr = xb + (size_t)i * row + (size_t)j0 * es;
        if (pf && (stream || (size_t)(i + 1) * row + PF_AHEAD <= (size_t)n * row))
            for (size_t b = 0; b < row; b += 64) _mm_prefetch(xb + (size_t)i * row + PF_AHEAD + b, _MM_HINT_T0);
        __m256 pb[3];
        #pragma GCC unroll 16
        for (int g = 0; g < H; g++) pb[g] = _mm256_broadcast_ss(p + (size_t)g * ldp + i);
        #pragma GCC unroll 16
        for (int c = 0; c < C; c++) {
            __m256 v = load8(t, xr + (size_t)8 * c * es);
            #pragma GCC unroll 16
            for (int g = 0; g < H; g++) acc[g][c] = _mm256_fmadd_ps(pb[g], v, acc[g][c]);
        }
    }
    #pragma GCC unroll 16
    for (int g = 0; g < H; g++)
        #pragma GCC unroll 16
        for (int c = 0; c < C; c++) _mm256_storeu_ps(o + (size_t)g * ldo + j0 + 8 * c, acc[g][c]);
}

/* The same for the last `w` (< 8) channels from j0, through a padded row copy. */
static void pv_part(elem_t t, const char *xb, size_t row, int n, int j0, int w, const float *p, int ldp,
                    float *o, int ldo, int H) {
    for (int g = 0; g < H; g++) {
        __m256 acc = loadq_part(o + (size_t)g * ldo + j0, w);
        for (int i = 0; i < n; i++)
            acc = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)g * ldp + i),
                                  load8_part(t, xb + (size_t)i * row + (size_t)j0 * esize(t), w), acc);
        float buf[8];
        _mm256_storeu_ps(buf, acc);
        memcpy(o + (size_t)g * ldo + j0, buf, (size_t)w * 4);
    }
}

/* Whole chunks of channels j0 .. j0+8C for one block of H heads: C picked at
 * run time (the last block of a row may be shorter than 4 chunks). */
ALWAYS_INLINE void pv_chunks(elem_t t, const char *xb, size_t row, int n, int j0, int C, const float *p, int ldp,
                             float *o, int ldo, int pf, const int H) {
    switch (C) {
    case 4: pv_block(t, xb, row, n, j0, p, ldp, o, ldo, pf, H, 4); break;
    case 3: pv_block(t, xb, row, n, j0, p, ldp, o, ldo, pf, H, 3); break;
    case 2: pv_block(t, xb, row, n, j0, p, ldp, o, ldo, pf, H, 2); break;
    default: pv_block(t, xb, row, n, j0, p, ldp, o, ldo, pf, H, 1); break;
    }
}

ALWAYS_INLINE void pv_dense(elem_t t, const void *x, int n, int d, const float *p, int G, int ldp, float *o,
                            int ldo) {
    size_t row = (size_t)d * esize(t);
    const int d8 = d & ~7;
    for (int j0 = 0; j0 < d8; j0 += 32) {
        int C = (d8 - j0) / 8 < 4 ? (d8 - j0) / 8 : 4;
        for (int g0 = 0; g0 < G;) {
            int h = kvc_head_block_avx2(G - g0), pf = j0 == 0 && g0 == 0;
            const float *pg = p + (size_t)g0 * ldp;
            float *og = o + (size_t)g0 * ldo;
            if (h == 3) pv_chunks(t, x, row, n, j0, C, pg, ldp, og, ldo, pf, 3);
            else if (h == 2) pv_chunks(t, x, row, n, j0, C, pg, ldp, og, ldo, pf, 2);
            else pv_chunks(t, x, row, n, j0, C, pg, ldp, og, ldo, pf, 1);
            g0 += h;
        }
    }
    if (d8 < d) pv_part(t, x, row, n, d8, d - d8, p, ldp, o, ldo, G);
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
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load8(t, xb + i * esize(t)));
    if (i < n) {
        float buf[8];
        _mm256_storeu_ps(buf, load8_part(t, xb + i * esize(t), (int)(n - i)));
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
