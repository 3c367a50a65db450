/* The AVX2 summing loop of `bench bw` (see src/eval/bw_kernels.h): four
 * independent 256-bit accumulators, so the loads and not the adds set the pace. */
#include <immintrin.h>

#include "eval/bw_kernels.h"

uint64_t kvc_bw_sum_avx2(const char *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 128) {
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, a);
    return t[0] + t[1] + t[2] + t[3];
}
