/* AVX-512 (VNNI) kernels for Q5_0 weights: the scheme of wt_q4_0_avx512.c
 * (four blocks per zmm, two vpdpbusd of the unsigned values with the int8
 * activation, one FMA per four blocks, the -16 offset as -16*d_w*s_a once per
 * 16 blocks) with the fifth bits added from each block's qh through byte
 * masks. dot_rows runs four rows together; dot_batch (kvc_matmul) unpacks four
 * rows once and runs the tokens over them two at a time with the operations of
 * the rows kernel, so every result is bit-identical to it.
 * Reference: src/model/wt_q5_0.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

/* The values (0..31) of blocks b[0..v) (v = 1..4), one block per 128-bit lane:
 * lo = elements 0..15, hi = elements 16..31 of each block; lanes past v zero. */
KVC_AINLINE void load_q5_blocks(const kvc_blk_q5_0 *b, int v, __m512i *lo, __m512i *hi) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), bit5 = _mm512_set1_epi8(0x10);
    __m512i z = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)b[0].qs));
    if (v > 1) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[1].qs), 1);
    if (v > 2) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[2].qs), 2);
    if (v > 3) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[3].qs), 3);
    uint64_t klo = 0, khi = 0;
    for (int k = 0; k < v; k++) {
        uint32_t qh;
        memcpy(&qh, b[k].qh, 4);
        klo |= (uint64_t)(qh & 0xffff) << (16 * k);
        khi |= (uint64_t)(qh >> 16) << (16 * k);
    }
    __m512i l = _mm512_and_si512(z, m4), h = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    *lo = _mm512_mask_add_epi8(l, klo, l, bit5);
    *hi = _mm512_mask_add_epi8(h, khi, h, bit5);
}

/* The f16 scales of blocks b[0..gl) (word 11i of the group) as f32 in lane i, zero
 * in lanes >= gl: six masked loads, three two-register permutes (index 11i mod 64
 * for every pair) and two blends, cheaper than a gather. */
KVC_AINLINE __m512 load_d16(const kvc_blk_q5_0 *b, int gl) {
    const int16_t *p = (const int16_t *)b;
    const int nw = 11 * gl;
    __m512i z[6];
#pragma GCC unroll 6
    for (int k = 0; k < 6; k++) {
        int c = nw - 32 * k;
        z[k] = _mm512_maskz_loadu_epi16(kvc_mask32(c <= 0 ? 0 : c >= 32 ? 32 : c), p + 32 * k);
    }
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 37, 26,
                                         15, 4, 57, 46, 35, 24, 13, 2, 55, 44, 33, 22, 11, 0);
    __m512i r01 = _mm512_permutex2var_epi16(z[0], idx, z[1]); /* blocks 0..5 */
    __m512i r23 = _mm512_permutex2var_epi16(z[2], idx, z[3]); /* blocks 6..11 */
    __m512i r45 = _mm512_permutex2var_epi16(z[4], idx, z[5]); /* blocks 12..15 */
    __m512i r = _mm512_mask_blend_epi16(0x0fc0, r01, r23);
    r = _mm512_mask_blend_epi16(0xf000, r, r45);
    return _mm512_maskz_mov_ps(kvc_mask16(gl), _mm512_cvtph_ps(_mm512_castsi512_si256(r)));
}

KVC_AINLINE void q5_0_rows(const uint8_t *w, size_t stride, const void *act, int64_t n, float *y,
                           const int R) {
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    const int64_t nb = n / KVC_QK;
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
            __m512 d = load_d16((const kvc_blk_q5_0 *)(w + (size_t)r * stride) + g0, gl);
            S[r] = _mm512_mul_ps(d, da16);
            accm[r] = _mm512_fmadd_ps(d, sa16, accm[r]);
        }
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            __m512i alo, ahi;
            kvc_act_blocks4(qa + (g0 + c) * KVC_QK, v, &alo, &ahi);
            const __m512i sidx = _mm512_add_epi32(sidx0, _mm512_set1_epi32(c));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                __m512i lo, hi;
                load_q5_blocks((const kvc_blk_q5_0 *)(w + (size_t)r * stride) + g0 + c, v, &lo, &hi);
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo);
                p = _mm512_dpbusd_epi32(p, hi, ahi);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(sidx, S[r]),
                                         acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        y[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accm[r], _mm512_set1_ps(-16.0f), acc[r]));
}

KVC_WT_DOT_ENTRY_POINTS_AVX512(dot_q5_0_q8_0_avx512, dot_rows_q5_0_q8_0_avx512, q5_0_rows)

/* ---- batches (kvc_matmul): four rows unpacked once, then two tokens at a time ---- */

/* Per (chunk of 4 blocks, row) the values as bytes (elements 0..15 and 16..31 of
 * each block), per (group of 16 blocks, row) the scales as f32. Rows past the
 * matrix are zero. */
typedef struct q5_0_unpacked {
    uint8_t (*val)[4][2][64]; /* [chunk][row][lo, hi] */
    float (*d)[4][16];        /* [group][row] */
} q5_0_unpacked;

static void q5_0_unpack4(const uint8_t *w, size_t stride, int rows, int64_t nb, q5_0_unpacked u) {
    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gl = nb - g0 < 16 ? (int)(nb - g0) : 16;
        for (int r = 0; r < 4; r++)
            _mm512_storeu_ps(u.d[g0 / 16][r],
                             r < rows ? load_d16((const kvc_blk_q5_0 *)(w + (size_t)r * stride) + g0, gl)
                                      : _mm512_setzero_ps());
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            for (int r = 0; r < 4; r++) {
                __m512i lo = _mm512_setzero_si512(), hi = lo;
                if (r < rows)
                    load_q5_blocks((const kvc_blk_q5_0 *)(w + (size_t)r * stride) + g0 + c, v, &lo,
                                   &hi);
                _mm512_storeu_si512(u.val[(g0 + c) / 4][r][0], lo);
                _mm512_storeu_si512(u.val[(g0 + c) / 4][r][1], hi);
            }
        }
    }
}

/* y[r] for r < rows (<= 4) and the tokens t0, t1 (t1 may repeat t0; then only t0
 * is stored). Per (row, token) the float operations of q5_0_rows. */
static void q5_0_batch_tokens(q5_0_unpacked u, int rows, int64_t nb, int64_t n, const uint8_t *act0,
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
                accm[r][k] = _mm512_fmadd_ps(_mm512_loadu_ps(u.d[g0 / 16][r]), sa16, accm[r][k]);
        }
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            const __m512i sidx = _mm512_add_epi32(sidx0, _mm512_set1_epi32(c));
            __m512i alo[2], ahi[2];
            __m512 da4[2];
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                kvc_act_blocks4(kvc_act_q(act[k]) + (g0 + c) * KVC_QK, v, &alo[k], &ahi[k]);
                da4[k] = _mm512_permutexvar_ps(sidx, da16[k]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const uint8_t(*val)[64] = u.val[(g0 + c) / 4][r];
                const __m512i lo = _mm512_loadu_si512(val[0]), hi = _mm512_loadu_si512(val[1]);
                const __m512 d4 = _mm512_permutexvar_ps(sidx, _mm512_loadu_ps(u.d[g0 / 16][r]));
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
    const __m512 m16 = _mm512_set1_ps(-16.0f);
    for (int r = 0; r < rows; r++) {
        y0[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accm[r][0], m16, acc[r][0]));
        if (store1) y1[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accm[r][1], m16, acc[r][1]));
    }
}

static void dot_batch_q5_0_q8_0_avx512(const void *w, size_t stride, int64_t nrows,
                                       const void *acts, size_t act_stride, int64_t m, int64_t n,
                                       float *y, int64_t ldy) {
    const int64_t nb = n / KVC_QK, nchunks = (nb + 3) / 4, ngroups = (nb + 15) / 16;
    _Alignas(64) uint8_t val[nchunks][4][2][64];
    _Alignas(64) float d[ngroups][4][16];
    const q5_0_unpacked u = {val, d};
    const uint8_t *a = acts;
    for (int64_t r0 = 0; r0 < nrows; r0 += 4) {
        const int rows = nrows - r0 < 4 ? (int)(nrows - r0) : 4;
        q5_0_unpack4((const uint8_t *)w + (size_t)r0 * stride, stride, rows, nb, u);
        for (int64_t t = 0; t < m; t += 2) {
            const int64_t t1 = t + 1 < m ? t + 1 : t;
            q5_0_batch_tokens(u, rows, nb, n, a + (size_t)t * act_stride,
                              a + (size_t)t1 * act_stride, t1 != t, y + t * ldy + r0,
                              y + t1 * ldy + r0);
        }
    }
}

static void dequant_q5_0_avx512(const void *x, float *y, int64_t n) {
    const kvc_blk_q5_0 *b = x;
    const __m512i sixteen = _mm512_set1_epi32(16);
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m512i lo, hi;
        load_q5_blocks(&b[i], 1, &lo, &hi);
        __m512 d = _mm512_set1_ps(kvc_f16_load_avx512(&b[i].d));
        __m512i vlo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(lo)), sixteen);
        __m512i vhi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(hi)), sixteen);
        _mm512_storeu_ps(y + i * KVC_QK, _mm512_mul_ps(_mm512_cvtepi32_ps(vlo), d));
        _mm512_storeu_ps(y + i * KVC_QK + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(vhi), d));
    }
}

void kvc_wt_register_q5_0_avx512(kvc_wtype *table) {
    table[KVC_WT_Q5_0].dot = dot_q5_0_q8_0_avx512;
    table[KVC_WT_Q5_0].dot_rows = dot_rows_q5_0_q8_0_avx512;
    table[KVC_WT_Q5_0].dot_batch = dot_batch_q5_0_q8_0_avx512;
    table[KVC_WT_Q5_0].dequant = dequant_q5_0_avx512;
}
