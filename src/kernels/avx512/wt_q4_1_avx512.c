/* AVX-512 (VNNI) kernels for Q4_1 weights, the default model's type: dot of
 * rows with a Q8_0-prepared activation. Four blocks per step: their 16-byte
 * nibble arrays fill one zmm (one block per 128-bit lane); low and high
 * nibbles meet the activation bytes of elements 0..15 and 16..31 of each
 * block (regrouped once per step with two 128-bit lane shuffles) in two vpdpbusd,
 * so every 128-bit lane holds one block's integer partial sums; one
 * convert-and-FMA applies the per-block scale d_w*d_a. Scales and offsets of
 * 16 blocks come from masked loads and three dword permutes (a gather was
 * measured twice as slow overall); the offset term m_w*s_a is one FMA per 16
 * blocks. dot_rows runs four rows together so the
 * activation work is shared. Reference: src/model/wt_q4_1.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

/* qs of blocks b[0..3] in the four 128-bit lanes */
KVC_AINLINE __m512i load_qs4(const kvc_blk_q4_1 *b) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b[0].qs));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[1].qs), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[2].qs), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[3].qs), 3);
}

/* the first v (1..3) blocks; the other lanes zero */
KVC_AINLINE __m512i load_qs_partial(const kvc_blk_q4_1 *b, int v) {
    __m512i z = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)b[0].qs));
    if (v > 1) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[1].qs), 1);
    if (v > 2) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[2].qs), 2);
    return z;
}

/* The (d, m) dwords of blocks b[0..gl) (dword 5i of the group) in lane i, and
 * zero in lanes >= gl (their scales multiply zero sums and must be finite):
 * up to five masked loads and three permutes (cheaper than a gather). */
KVC_AINLINE __m512i load_dm16(const kvc_blk_q4_1 *b, int gl) {
    const int32_t *p = (const int32_t *)b;
    const int nd = 5 * gl; /* dwords of the group that exist */
    const __m512i idx =
        _mm512_setr_epi32(0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 60, 65, 70, 75);
    if (gl <= 3) /* short tail group: one load */
        return _mm512_maskz_permutexvar_epi32(kvc_mask16(gl), idx,
                                              _mm512_maskz_loadu_epi32(kvc_mask16(nd), p));
    __m512i z[5];
#pragma GCC unroll 5
    for (int k = 0; k < 5; k++) {
        int c = nd - 16 * k;
        z[k] = _mm512_maskz_loadu_epi32(kvc_mask16(c <= 0 ? 0 : c >= 16 ? 16 : c), p + 16 * k);
    }
    __m512i r01 = _mm512_permutex2var_epi32(z[0], idx, z[1]); /* lanes 0..6 */
    __m512i r23 = _mm512_permutex2var_epi32(z[2], idx, z[3]); /* lanes 7..12 (index mod 32) */
    __m512i r4 = _mm512_permutexvar_epi32(idx, z[4]);         /* lanes 13..15 (index mod 16) */
    return _mm512_mask_blend_epi32(0xe000, _mm512_mask_blend_epi32(0x1f80, r01, r23), r4);
}

KVC_AINLINE void q4_1_rows(const uint8_t *w, size_t stride, const void *act, int64_t n, float *y,
                           const int R) {
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    const int64_t nb = n / KVC_QK;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i sidx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[4], accm[4], S[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = accm[r] = _mm512_setzero_ps();

    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gl = nb - g0 < 16 ? (int)(nb - g0) : 16;
        const __mmask16 gm = kvc_mask16(gl);
        const __m512 da16 = _mm512_maskz_loadu_ps(gm, da + g0),
                     sa16 = _mm512_maskz_loadu_ps(gm, sa + g0);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const kvc_blk_q4_1 *b = (const kvc_blk_q4_1 *)(w + (size_t)r * stride) + g0;
            __m512i dm = load_dm16(b, gl);
            __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
            __m512 m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
            S[r] = _mm512_mul_ps(d, da16);
            accm[r] = _mm512_fmadd_ps(m, sa16, accm[r]);
        }
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            const int8_t *a = qa + (g0 + c) * KVC_QK;
            __m512i alo, ahi;
            kvc_act_blocks4(a, v, &alo, &ahi);
            const __m512i sidx = _mm512_add_epi32(sidx0, _mm512_set1_epi32(c));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const kvc_blk_q4_1 *b = (const kvc_blk_q4_1 *)(w + (size_t)r * stride) + g0 + c;
                __m512i wq = v == 4 ? load_qs4(b) : load_qs_partial(b, v);
                __m512i lo = _mm512_and_si512(wq, m4),
                        hi = _mm512_and_si512(_mm512_srli_epi16(wq, 4), m4);
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo);
                p = _mm512_dpbusd_epi32(p, hi, ahi);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(sidx, S[r]),
                                         acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], accm[r]));
}

KVC_WT_DOT_ENTRY_POINTS_AVX512(dot_q4_1_q8_0_avx512, dot_rows_q4_1_q8_0_avx512, q4_1_rows)

/* ---- batches (kvc_matmul): four rows unpacked once, then two tokens at a time ---- */

/* Four rows of weights unpacked for all tokens: per (chunk of 4 blocks, row) the
 * low and high nibbles as bytes, per (group of 16 blocks, row) d and m as f32.
 * Rows past the matrix are zero. */
typedef struct q4_1_unpacked {
    uint8_t (*nib)[4][2][64]; /* [chunk][row][lo, hi] */
    float (*dm)[4][2][16];    /* [group][row][d, m] */
} q4_1_unpacked;

static void q4_1_unpack4(const uint8_t *w, size_t stride, int rows, int64_t nb, q4_1_unpacked u) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gl = nb - g0 < 16 ? (int)(nb - g0) : 16;
        for (int r = 0; r < 4; r++) {
            __m512 d = _mm512_setzero_ps(), m = d;
            if (r < rows) {
                __m512i dm = load_dm16((const kvc_blk_q4_1 *)(w + (size_t)r * stride) + g0, gl);
                d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
                m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
            }
            _mm512_storeu_ps(u.dm[g0 / 16][r][0], d);
            _mm512_storeu_ps(u.dm[g0 / 16][r][1], m);
        }
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            for (int r = 0; r < 4; r++) {
                __m512i wq = _mm512_setzero_si512();
                if (r < rows) {
                    const kvc_blk_q4_1 *b = (const kvc_blk_q4_1 *)(w + (size_t)r * stride) + g0 + c;
                    wq = v == 4 ? load_qs4(b) : load_qs_partial(b, v);
                }
                uint8_t(*dst)[64] = u.nib[(g0 + c) / 4][r];
                _mm512_storeu_si512(dst[0], _mm512_and_si512(wq, m4));
                _mm512_storeu_si512(dst[1], _mm512_and_si512(_mm512_srli_epi16(wq, 4), m4));
            }
        }
    }
}

/* y[t*ldy + r] for r < rows (<= 4) and the tokens t0, t1 (t1 may repeat t0; then
 * only t0 is stored). The operations per (row, token) are those of q4_1_rows. */
static void q4_1_batch_tokens(q4_1_unpacked u, int rows, int64_t nb, int64_t n, const uint8_t *act0,
                              const uint8_t *act1, int store1, float *y0, float *y1) {
    const __m512i sidx0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const uint8_t *act[2] = {act0, act1};
    __m512 acc[4][2], accm[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        acc[r][0] = acc[r][1] = accm[r][0] = accm[r][1] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gl = nb - g0 < 16 ? (int)(nb - g0) : 16;
        const __mmask16 gm = kvc_mask16(gl);
        __m512 da16[2];
#pragma GCC unroll 2
        for (int k = 0; k < 2; k++) {
            da16[k] = _mm512_maskz_loadu_ps(gm, kvc_act_q8_0_d(act[k], n) + g0);
            __m512 sa16 = _mm512_maskz_loadu_ps(gm, kvc_act_q8_0_s(act[k], n) + g0);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                accm[r][k] =
                    _mm512_fmadd_ps(_mm512_loadu_ps(u.dm[g0 / 16][r][1]), sa16, accm[r][k]);
        }
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            const __m512i sidx = _mm512_add_epi32(sidx0, _mm512_set1_epi32(c));
            __m512i alo[2], ahi[2];
            __m512 da4[2];
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                const int8_t *a = kvc_act_q(act[k]) + (g0 + c) * KVC_QK;
                kvc_act_blocks4(a, v, &alo[k], &ahi[k]);
                da4[k] = _mm512_permutexvar_ps(sidx, da16[k]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const uint8_t(*nib)[64] = u.nib[(g0 + c) / 4][r];
                const __m512i lo = _mm512_loadu_si512(nib[0]), hi = _mm512_loadu_si512(nib[1]);
                const __m512 d4 = _mm512_permutexvar_ps(sidx, _mm512_loadu_ps(u.dm[g0 / 16][r][0]));
#pragma GCC unroll 2
                for (int k = 0; k < 2; k++) {
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo[k]);
                    p = _mm512_dpbusd_epi32(p, hi, ahi[k]);
                    acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(d4, da4[k]),
                                                acc[r][k]);
                }
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        y0[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], accm[r][0]));
        if (store1) y1[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][1], accm[r][1]));
    }
}

static void dot_batch_q4_1_q8_0_avx512(const void *w, size_t stride, int64_t nrows,
                                       const void *acts, size_t act_stride, int64_t m, int64_t n,
                                       float *y, int64_t ldy) {
    const int64_t nb = n / KVC_QK, nchunks = (nb + 3) / 4, ngroups = (nb + 15) / 16;
    _Alignas(64) uint8_t nib[nchunks][4][2][64];
    _Alignas(64) float dm[ngroups][4][2][16];
    const q4_1_unpacked u = {nib, dm};
    const uint8_t *a = acts;
    for (int64_t r0 = 0; r0 < nrows; r0 += 4) {
        const int rows = nrows - r0 < 4 ? (int)(nrows - r0) : 4;
        q4_1_unpack4((const uint8_t *)w + (size_t)r0 * stride, stride, rows, nb, u);
        for (int64_t t = 0; t < m; t += 2) {
            const int64_t t1 = t + 1 < m ? t + 1 : t;
            q4_1_batch_tokens(u, rows, nb, n, a + (size_t)t * act_stride,
                              a + (size_t)t1 * act_stride, t1 != t, y + t * ldy + r0,
                              y + t1 * ldy + r0);
        }
    }
}

static void dequant_q4_1_avx512(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_1 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(0x0f)));
        __m512i hi =
            _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
        __m512 d = _mm512_set1_ps(kvc_f16_load_avx512(&b[i].d)),
               m = _mm512_set1_ps(kvc_f16_load_avx512(&b[i].m));
        _mm512_storeu_ps(y + i * KVC_QK, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), d, m));
        _mm512_storeu_ps(y + i * KVC_QK + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), d, m));
    }
}

void kvc_wt_register_q4_1_avx512(kvc_wtype *table) {
    table[KVC_WT_Q4_1].dot = dot_q4_1_q8_0_avx512;
    table[KVC_WT_Q4_1].dot_rows = dot_rows_q4_1_q8_0_avx512;
    table[KVC_WT_Q4_1].dot_batch = dot_batch_q4_1_q8_0_avx512;
    table[KVC_WT_Q4_1].dequant = dequant_q4_1_avx512;
}
