/* Small AVX-512 helpers shared by the KV-cache kernel files of this directory
 * (kv_bitmap_avx512.c, kv_packed_avx512.c); included only by them, compiled
 * with the AVX-512 flags. */
#ifndef KVC_KERNELS_KV_AVX512_UTIL_H
#define KVC_KERNELS_KV_AVX512_UTIL_H

#include <immintrin.h>

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

#endif
