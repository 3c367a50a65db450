/* Small AVX2 helpers shared by the KV-cache kernel files of this directory
 * (dense, bitmap, packed, integer-quantized and PackKV attention, min/max and
 * block-key scoring, the row-block maps); included only by them, compiled
 * with the AVX2 flags. */
#ifndef KVC_KERNELS_KV_AVX2_UTIL_H
#define KVC_KERNELS_KV_AVX2_UTIL_H

#include <immintrin.h>
#include <stdint.h>

#include "base/f16.h"
#include "kernels/avx2/wt_avx2_util.h" /* kvc_hsum256_ps, the sum of 8 lanes */

/* 8 halves at p widened to f32 (F16C). */
static inline __m256 kvc_load_f16x8(const kvc_f16 *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* The first m (<= 16) of the 16 lanes lo, hi to out: the scores of a block
 * of 16 units whose last block may be partial (min/max bounds, block keys). */
static inline void kvc_store16_avx2(float *out, __m256 lo, __m256 hi, int m) {
    if (m >= 16) {
        _mm256_storeu_ps(out, lo);
        _mm256_storeu_ps(out + 8, hi);
        return;
    }
    float tmp[16];
    _mm256_storeu_ps(tmp, lo);
    _mm256_storeu_ps(tmp + 8, hi);
    for (int i = 0; i < m; i++) out[i] = tmp[i];
}

/* All ones in lanes l with lo <= l < hi, zeros elsewhere (ragged ends of a
 * block of 8 tokens or values). */
static inline __m256i kvc_lanes8_avx2(int lo, int hi) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(lo - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), idx));
}

/* The sums of a0..a3 (8 lanes each) as one 4-lane vector: 4 tokens' scores. */
static inline __m128 kvc_reduce4_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Query heads per block when `left` remain: 3 where possible (its
 * accumulators fill the 16 YMM registers), never more than remain, and 2 + 2
 * rather than 3 + 1 for 4. */
static inline int kvc_head_block_avx2(int left) { return left == 4 ? 2 : left < 3 ? left : 3; }

/* Byte j of the result = the number of set bits in bytes 0..j-1 of m (byte
 * 0 = 0): where the kept values of each 8-channel piece of a sparse vector
 * start. Computed from the mask at once (byte popcounts, then a multiply for
 * the prefix sums), so the pieces' loads do not wait on each other as a
 * pointer advanced piece by piece made them. */
static inline uint64_t kvc_piece_offsets(uint64_t m) {
    uint64_t x = m - ((m >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (x * 0x0101010101010101ull) << 8; /* bytes <= 56 before the shift: no carries */
}

#endif
