/* AVX2 q·k of the packed format (src/kv/codec/packed.h) that pays per kept
 * value, not per piece of 8 channels: the query is transposed once per call
 * so that row c holds channel c of every head (4 lanes for up to 4 heads, 8
 * for up to 8), and a token's score vector (one lane per head) is the sum
 * over its kept values v_j at channels c_j of v_j · row(c_j). The bitmap is
 * walked with TZCNT/BLSR; with 4-lane rows two values share one FMA (rows of
 * two channels in the halves of a YMM), with 8-lane rows each value takes
 * one. The expanding kernel (kv_packed_avx2.c) costs the same whatever the
 * vector keeps; this one costs in proportion to the kept values, and wins
 * when they are few (kvc_packed_lanes_fit; measured in docs/benchmarks.md,
 * "Packed q·k with the heads in the lanes").
 *
 * Values are read 8 at a time; the lanes past the token's last value are
 * zeroed, and their channel index (TZCNT of an exhausted word: group 64)
 * points at zeroed rows, so they add nothing. Reading 16 bytes at a token's
 * last values relies on the blob's KVC_PACKED_PAD.
 * Scalar reference: src/kv/codec/packed.c. */
#include <immintrin.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kernels/avx2/kv_packed_lanes_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Rows of the transposed query: the d <= 64·g channels of a view that fits,
 * and rows 64·g .. 64·g + g - 1, the channels of group 64. */
enum { QT_ROWS = 64 * 4 + 4 };

/* 8 channels c0.. of 4 heads (r[h]) as 8 rows of 4 lanes at qt + 4·c0. */
ALWAYS_INLINE void transpose4x8(const __m256 r[4], float *qt) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
    _mm256_store_ps(qt, _mm256_permute2f128_ps(u0, u1, 0x20));
    _mm256_store_ps(qt + 8, _mm256_permute2f128_ps(u2, u3, 0x20));
    _mm256_store_ps(qt + 16, _mm256_permute2f128_ps(u0, u1, 0x31));
    _mm256_store_ps(qt + 24, _mm256_permute2f128_ps(u2, u3, 0x31));
}

/* 8 channels c0.. of 8 heads (r[h]) as 8 rows of 8 lanes at qt + 8·c0. */
ALWAYS_INLINE void transpose8x8(const __m256 r[8], float *qt) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        __m256 lo0 = t[4 * i], hi0 = t[4 * i + 1], lo1 = t[4 * i + 2], hi1 = t[4 * i + 3];
        u[4 * i] = _mm256_shuffle_ps(lo0, lo1, 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(lo0, lo1, 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(hi0, hi1, 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(hi0, hi1, 0xee);
    }
    for (int i = 0; i < 4; i++) {
        _mm256_store_ps(qt + 8 * i, _mm256_permute2f128_ps(u[i], u[4 + i], 0x20));
        _mm256_store_ps(qt + 8 * (4 + i), _mm256_permute2f128_ps(u[i], u[4 + i], 0x31));
    }
}

/* The query of heads h < G as rows of L lanes (zeros in lanes >= G), and the
 * rows of group 64 zeroed. */
static void transpose_query(const float *q, int G, int ldq, int d, int g, const int L, float *qt) {
    int c0 = 0;
    for (; c0 + 8 <= d; c0 += 8) {
        __m256 r[8];
        for (int h = 0; h < L; h++) r[h] = h < G ? _mm256_loadu_ps(q + (size_t)h * ldq + c0) : _mm256_setzero_ps();
        if (L == 4) transpose4x8(r, qt + 4 * c0);
        else transpose8x8(r, qt + 8 * c0);
    }
    for (; c0 < d; c0++)
        for (int h = 0; h < L; h++) qt[L * c0 + h] = h < G ? q[(size_t)h * ldq + c0] : 0.0f;
    for (int i = 0; i < L * g; i++) qt[L * 64 * g + i] = 0.0f;
}

/* The token's bitmap in one word (nw <= 2 words of 32 bits). */
ALWAYS_INLINE uint64_t token_bits(const uint32_t *b, int nw) {
    return nw > 1 ? b[0] | (uint64_t)b[1] << 32 : b[0];
}

/* The lowest kept group of w, removed from w; 64 once w is empty. */
ALWAYS_INLINE int next_group(uint64_t *w) {
    int i = (int)_tzcnt_u64(*w);
    *w = _blsr_u64(*w);
    return i;
}

/* Rows a and b (4 lanes each) in the halves of one YMM. */
ALWAYS_INLINE __m256 row_pair(const float *qt, int a, int b) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_load_ps(qt + 4 * a)), _mm_load_ps(qt + 4 * b), 1);
}

/* The lanes of a token's last chunk of 8 values that hold its values. */
static inline __m256 tail_lanes(int nv) {
    return _mm256_castsi256_ps(kvc_lanes8_avx2(0, nv % 8 ? nv % 8 : 8));
}

/* Values j .. j+7 of a token (nv values at vp) widened, the lanes past its
 * last value zeroed. */
ALWAYS_INLINE __m256 token_chunk(const kvc_f16 *vp, int j, int nv, __m256 tail) {
    __m256 x = kvc_load_f16x8(vp + j);
    return j + 8 > nv ? _mm256_and_ps(x, tail) : x;
}

/* Up to 4 heads, rows of 4 lanes: two values per FMA, pairs (2i, 2i+1) of the
 * 8 values moved into the two halves by VPERMPS. g a compile-time constant. */
ALWAYS_INLINE void qk_rows4(const kvc_packed_view *k, int n, const float *qt, int G, float *s, int lds,
                            const int g) {
    const int nv = k->nv, nw = k->nw;
    const __m256i i0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), i1 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
    const __m256i i2 = _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), i3 = _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7);
    const __m256 tail = tail_lanes(nv);
    for (int t = 0; t < n; t++) {
        uint64_t w = token_bits(k->bits + (size_t)t * nw, nw);
        const kvc_f16 *vp = k->vals + (size_t)t * nv;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int j = 0; j < nv; j += 8) {
            __m256 x = token_chunk(vp, j, nv, tail);
            if (g == 1) {
                int c0 = next_group(&w), c1 = next_group(&w), c2 = next_group(&w), c3 = next_group(&w);
                a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i0), row_pair(qt, c0, c1), a0);
                a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i1), row_pair(qt, c2, c3), a1);
                if (j + 4 >= nv) break; /* the last chunk's second half is empty */
                int c4 = next_group(&w), c5 = next_group(&w), c6 = next_group(&w), c7 = next_group(&w);
                a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i2), row_pair(qt, c4, c5), a0);
                a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i3), row_pair(qt, c6, c7), a1);
            } else if (g == 2) { /* a group's two rows are one YMM */
                int b0 = next_group(&w), b1 = next_group(&w), b2 = next_group(&w), b3 = next_group(&w);
                a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i0), _mm256_load_ps(qt + 8 * b0), a0);
                a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i1), _mm256_load_ps(qt + 8 * b1), a1);
                if (j + 4 >= nv) break;
                a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i2), _mm256_load_ps(qt + 8 * b2), a0);
                a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i3), _mm256_load_ps(qt + 8 * b3), a1);
            } else { /* g == 4: a group's four rows are two YMM */
                int b0 = next_group(&w), b1 = next_group(&w);
                a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i0), _mm256_load_ps(qt + 16 * b0), a0);
                a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i1), _mm256_load_ps(qt + 16 * b0 + 8), a1);
                if (j + 4 >= nv) break;
                a0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i2), _mm256_load_ps(qt + 16 * b1), a0);
                a1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, i3), _mm256_load_ps(qt + 16 * b1 + 8), a1);
            }
        }
        __m256 a = _mm256_add_ps(a0, a1);
        float r[4];
        _mm_storeu_ps(r, _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1)));
        for (int h = 0; h < G; h++) s[(size_t)h * lds + t] = r[h];
    }
}

/* 5 to 8 heads, rows of 8 lanes: one FMA per value, value i of the 8
 * broadcast by VPERMPS. g a compile-time constant. */
ALWAYS_INLINE void qk_rows8(const kvc_packed_view *k, int n, const float *qt, int G, float *s, int lds,
                            const int g) {
    const int nv = k->nv, nw = k->nw;
    const __m256 tail = tail_lanes(nv);
    for (int t = 0; t < n; t++) {
        uint64_t w = token_bits(k->bits + (size_t)t * nw, nw);
        const kvc_f16 *vp = k->vals + (size_t)t * nv;
        __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int j = 0; j < nv; j += 8) {
            __m256 x = token_chunk(vp, j, nv, tail);
            #pragma GCC unroll 8
            for (int i = 0; i < 8; i += g) {
                if (i == 4 && j + 4 >= nv) break; /* the last chunk's second half is empty */
                const float *row = qt + 8 * g * next_group(&w);
                #pragma GCC unroll 4
                for (int e = 0; e < g; e++)
                    a[(i + e) & 1] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(x, _mm256_set1_epi32(i + e)),
                                                     _mm256_load_ps(row + 8 * e), a[(i + e) & 1]);
            }
        }
        float r[8];
        _mm256_storeu_ps(r, _mm256_add_ps(a[0], a[1]));
        for (int h = 0; h < G; h++) s[(size_t)h * lds + t] = r[h];
    }
}

void kvc_packed_qk_lanes_avx2(const kvc_packed_view *k, int n, const float *q, int G, int ldq, float *s,
                              int lds) {
    float qt[8 * QT_ROWS] __attribute__((aligned(32)));
    const int g = k->group;
    if (G <= 4) {
        transpose_query(q, G, ldq, k->d, g, 4, qt);
        if (g == 1) qk_rows4(k, n, qt, G, s, lds, 1);
        else if (g == 2) qk_rows4(k, n, qt, G, s, lds, 2);
        else qk_rows4(k, n, qt, G, s, lds, 4);
    } else {
        transpose_query(q, G, ldq, k->d, g, 8, qt);
        if (g == 1) qk_rows8(k, n, qt, G, s, lds, 1);
        else if (g == 2) qk_rows8(k, n, qt, G, s, lds, 2);
        else qk_rows8(k, n, qt, G, s, lds, 4);
    }
}
