/* The AVX-512 summing loop of `bench bw` (see src/eval/bw_kernels.h): four
 * independent 512-bit accumulators, so the loads and not the adds set the pace. */
#include <immintrin.h>

#include "eval/bw_kernels.h"

uint64_t kvc_bw_sum_avx512(const char *p, size_t n) {
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 256) {
        a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
        c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
        d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
    }
    a = _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d));
    uint64_t t[8]; /* not _mm512_reduce_add_epi64: its signed adds may overflow (UB) */
    _mm512_storeu_si512(t, a);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
