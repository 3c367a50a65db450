/* Small AVX-512 helpers shared by the weight kernels in this directory. */
#ifndef KVC_KERNELS_WT_AVX512_UTIL_H
#define KVC_KERNELS_WT_AVX512_UTIL_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define KVC_AINLINE static inline __attribute__((always_inline))

KVC_AINLINE float kvc_f16_load_avx512(const uint16_t *p) {
    return _cvtsh_ss(*p);
}

/* Mask of the first k lanes (0 <= k <= 16). */
KVC_AINLINE __mmask16 kvc_mask16(int k) {
    return (__mmask16)((1u << k) - 1u);
}

/* Mask of the first k lanes (0 <= k <= 32). */
KVC_AINLINE __mmask32 kvc_mask32(int k) {
    return k >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << k) - 1u);
}

/* Mask of the first k bytes (0 <= k <= 64). */
KVC_AINLINE __mmask64 kvc_mask64(int k) {
    return k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << k) - 1);
}

/* The int8 activations of v (1..4) consecutive 32-value blocks at a, regrouped
 * for the nibble kernels (q4_0, q4_1): lo holds the first 16 bytes of each
 * block, hi the last 16 (the two nibble halves of a weight block); blocks past
 * v are zero. */
KVC_AINLINE void kvc_act_blocks4(const int8_t *a, int v, __m512i *lo, __m512i *hi) {
    __m512i z0, z1;
    if (v == 4) {
        z0 = _mm512_loadu_si512(a);
        z1 = _mm512_loadu_si512(a + 64);
    } else {
        z0 = _mm512_maskz_loadu_epi8(kvc_mask64(32 * v), a);
        z1 = _mm512_maskz_loadu_epi8(kvc_mask64(v > 2 ? 32 * v - 64 : 0), a + 64);
    }
    *lo = _mm512_shuffle_i64x2(z0, z1, 0x88);
    *hi = _mm512_shuffle_i64x2(z0, z1, 0xdd);
}

/* Prefetch [p, p + bytes) into the cache ahead of use: the next rows of a
 * streamed weight matrix (DRAM latency is longer than the out-of-order window). */
KVC_AINLINE void kvc_prefetch_rows(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64)
        _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

/* Bytes to prefetch ahead of the rows being computed, in whole groups of four
 * rows: about 4 KB, the data a kernel consumes in a few DRAM latencies.
 * Measured with bench/bench_matvec on the default model's weights (one
 * thread): 2 KB gives 23.5 GB/s, 4 KB 27 GB/s, 6 and 8 KB no better, none
 * 13-19 GB/s (see docs/benchmarks.md, "Weight matvec"). */
enum { KVC_PREFETCH_BYTES = 4096 };
KVC_AINLINE size_t kvc_prefetch_distance(size_t stride) {
    size_t groups = (KVC_PREFETCH_BYTES + 2 * stride) / (4 * stride);
    return (groups ? groups : 1) * 4 * stride;
}

#endif
