/* Small AVX-512 helpers shared by the KV-cache kernel files of this directory
 * (kv_bitmap_avx512.c, kv_packed_avx512.c, kv_packkv*_avx512.c,
 * kv_iquant_avx512.c); included only by them, compiled with the AVX-512 flags. */
#ifndef KVC_KERNELS_KV_AVX512_UTIL_H
#define KVC_KERNELS_KV_AVX512_UTIL_H

#include <immintrin.h>
#include <stdint.h>

/* [sum(a0), sum(a1), sum(a2), sum(a3)] */
static inline __attribute__((always_inline)) __m128 kvc_reduce4_avx512(__m512 a0, __m512 a1,
                                                                       __m512 a2, __m512 a3) {
    __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512d x = _mm512_castps_pd(s01), y = _mm512_castps_pd(s23);
    __m512 s = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* 16 bf16 values as floats. */
static inline __m512 kvc_bf16x16_avx512(const uint16_t *p) {
    __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

/* Lanes of tokens first + l inside [lo, hi). */
static inline __mmask16 kvc_lanes16_avx512(int first, int lo, int hi) {
    int a = lo - first, b = hi - first;
    if (a < 0) a = 0;
    if (b > 16) b = 16;
    if (b <= a) return 0;
    return (__mmask16)(((1u << (b - a)) - 1) << a);
}

/* The sum of x[0 .. n). */
static inline float kvc_sum_f32_avx512(const float *x, int n) {
    __m512 acc = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= n; c += 16)
        acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + c));
    if (c < n)
        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps((__mmask16)((1u << (n - c)) - 1), x + c));
    return _mm512_reduce_add_ps(acc);
}

#endif
