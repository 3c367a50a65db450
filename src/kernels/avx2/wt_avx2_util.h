/* Small AVX2 helpers shared by the weight kernels in this directory (and,
 * through kv_avx2_util.h, by the KV-cache kernels). */
#ifndef KVC_KERNELS_WT_AVX2_UTIL_H
#define KVC_KERNELS_WT_AVX2_UTIL_H

#include <immintrin.h>
#include <stdint.h>

static inline float kvc_hsum256_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int32_t kvc_hsum256_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline float kvc_f16_load_avx2(const uint16_t *p) {
    return _cvtsh_ss(*p);
}

/* 16 nibbles of 16 bytes -> 32 bytes: low nibbles then high nibbles (q4_0/q4_1 order) */
static inline __m256i kvc_nibbles_avx2(const uint8_t *qs) {
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* o[0..32) = d * the 32 signed bytes of v (the dequantisation of the offset types). */
static inline void kvc_store_scaled_i8x32_avx2(__m256i v, __m256 d, float *o) {
    __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
    _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
    _mm256_storeu_ps(o + 8, _mm256_mul_ps(
                                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    _mm256_storeu_ps(o + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
    _mm256_storeu_ps(o + 24, _mm256_mul_ps(
                                 _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
}

#endif
