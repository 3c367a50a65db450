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

/* The two decode entry points of a row kernel `rows(w, stride, act, n, y, R)`
 * that computes R (1 or 4, a compile-time constant after inlining) rows:
 * `dot` (one row) and `dot_rows` (four rows at a time, the rest one by one),
 * with a software prefetch a fixed distance ahead, also past this call's rows
 * (the next task's; prefetches never fault). A macro rather than a function
 * taking `rows` as a pointer, so that every type's kernel is inlined with its
 * constant R exactly as when each file spelled the loop out. */
#define KVC_WT_DOT_ENTRY_POINTS_AVX512(dot_fn, dot_rows_fn, rows)                                  \
    static float dot_fn(const void *row, const void *act, int64_t n) {                             \
        float y;                                                                                   \
        rows(row, 0, act, n, &y, 1);                                                               \
        return y;                                                                                  \
    }                                                                                              \
    static void dot_rows_fn(const void *w, size_t stride, int64_t nrows, const void *act,          \
                            int64_t n, float *y) {                                                 \
        const uint8_t *p = w;                                                                      \
        int64_t r = 0;                                                                             \
        const size_t ahead = kvc_prefetch_distance(stride);                                        \
        if (nrows >= 4) kvc_prefetch_rows(p + 4 * stride, ahead);                                  \
        for (; r + 4 <= nrows; r += 4) {                                                           \
            kvc_prefetch_rows(p + (size_t)(r + 4) * stride + ahead, 4 * stride);                   \
            rows(p + (size_t)r * stride, stride, act, n, y + r, 4);                                \
        }                                                                                          \
        for (; r < nrows; r++) rows(p + (size_t)r * stride, stride, act, n, y + r, 1);             \
    }

#endif
