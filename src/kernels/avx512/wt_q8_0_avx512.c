/* AVX-512 (VNNI) kernels for Q8_0 weights (the default model's tied
 * embedding and output matrix): dot of rows with a Q8_0-prepared activation.
 * vpdpbusd wants unsigned x signed bytes, so weights are biased to w+128
 * (xor 0x80) and the bias is removed through the activation block sums:
 * sum((w+128)*a) - 128*sum(a). Two blocks per zmm (one per 256-bit half),
 * one convert-and-FMA per two blocks with the per-block scale d_w*d_a; the
 * f16 scales of 16 blocks (34 bytes apart) come from masked loads and word
 * permutes. dot_rows
 * runs four rows together. Reference: src/model/wt_q8_0.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

KVC_AINLINE __m512i load_qs2(const kvc_blk_q8_0 *b) {
    __m512i z = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs));
    return _mm512_inserti64x4(z, _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
}

/* The f16 scales of blocks b[0..gl) (word 17i of the group) in word i of the
 * result: eight masked loads and four permutes (cheaper than a gather). */
KVC_AINLINE __m256i load_d16(const kvc_blk_q8_0 *b, int gl) {
    const int16_t *p = (const int16_t *)b;
    const int nw = 17 * gl; /* words of the group that exist */
    __m512i z[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        int c = nw - 32 * k;
        z[k] = _mm512_maskz_loadu_epi16(kvc_mask32(c <= 0 ? 0 : c >= 32 ? 32 : c), p + 32 * k);
    }
    /* word index 17i modulo 64 (each permute reads a pair of registers) */
    const __m512i idx =
        _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255 - 192, 238 - 192,
                         221 - 192, 204 - 192, 187 - 128, 170 - 128, 153 - 128, 136 - 128, 119 - 64,
                         102 - 64, 85 - 64, 68 - 64, 51, 34, 17, 0);
    __m512i r0 = _mm512_permutex2var_epi16(z[0], idx, z[1]); /* words 0..3 */
    __m512i r1 = _mm512_permutex2var_epi16(z[2], idx, z[3]); /* words 4..7 */
    __m512i r2 = _mm512_permutex2var_epi16(z[4], idx, z[5]); /* words 8..11 */
    __m512i r3 = _mm512_permutex2var_epi16(z[6], idx, z[7]); /* words 12..15 */
    __m512i r = _mm512_mask_blend_epi16(0x00f0, r0, r1);
    r = _mm512_mask_blend_epi16(0x0f00, r, r2);
    return _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xf000, r, r3));
}

KVC_AINLINE void q8_0_rows(const uint8_t *w, size_t stride, const void *act, int64_t n, float *y,
                           const int R) {
    const int8_t *qa = kvc_act_q(act);
    const float *da = kvc_act_q8_0_d(act, n), *sa = kvc_act_q8_0_s(act, n);
    const int64_t nb = n / KVC_QK;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i sidx0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[4], accb[4], S[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = accb[r] = _mm512_setzero_ps();

    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gl = nb - g0 < 16 ? (int)(nb - g0) : 16;
        const __mmask16 gm = kvc_mask16(gl);
        const __m512 da16 = _mm512_maskz_loadu_ps(gm, da + g0),
                     sa16 = _mm512_maskz_loadu_ps(gm, sa + g0);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const kvc_blk_q8_0 *b = (const kvc_blk_q8_0 *)(w + (size_t)r * stride) + g0;
            __m512 d = _mm512_cvtph_ps(load_d16(b, gl));
            S[r] = _mm512_mul_ps(d, da16);
            accb[r] = _mm512_fmadd_ps(d, sa16, accb[r]);
        }
        int c = 0;
        for (; c + 2 <= gl; c += 2) {
            const __m512i a = _mm512_loadu_si512(qa + (g0 + c) * KVC_QK);
            const __m512i sidx = _mm512_add_epi32(sidx0, _mm512_set1_epi32(c));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const kvc_blk_q8_0 *b = (const kvc_blk_q8_0 *)(w + (size_t)r * stride) + g0 + c;
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                _mm512_xor_si512(load_qs2(b), bias), a);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(sidx, S[r]),
                                         acc[r]);
            }
        }
        if (c < gl) { /* one block left: the upper half stays zero (no bias) */
            const __m512i a = _mm512_zextsi256_si512(
                _mm256_loadu_si256((const __m256i *)(qa + (g0 + c) * KVC_QK)));
            const __m512i sidx = _mm512_set1_epi32(c);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const kvc_blk_q8_0 *b = (const kvc_blk_q8_0 *)(w + (size_t)r * stride) + g0 + c;
                __m512i wq = _mm512_zextsi256_si512(_mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i *)b->qs), _mm256_set1_epi8((char)0x80)));
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, a);
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(sidx, S[r]),
                                         acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        y[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accb[r], _mm512_set1_ps(-128.0f), acc[r]));
}

KVC_WT_DOT_ENTRY_POINTS_AVX512(dot_q8_0_q8_0_avx512, dot_rows_q8_0_q8_0_avx512, q8_0_rows)

/* ---- batches (kvc_matmul): four rows unpacked once, then two tokens at a time ---- */

/* Four rows prepared for all tokens: per (pair of blocks, row) the biased bytes
 * (w+128; zero past the row's last block), per (group of 16 blocks, row) d as
 * f32. Rows past the matrix are zero. */
typedef struct q8_0_unpacked {
    uint8_t (*qs)[4][64]; /* [pair][row] */
    float (*d)[4][16];    /* [group][row] */
} q8_0_unpacked;

static void q8_0_unpack4(const uint8_t *w, size_t stride, int rows, int64_t nb, q8_0_unpacked u) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gl = nb - g0 < 16 ? (int)(nb - g0) : 16;
        for (int r = 0; r < 4; r++) {
            __m512 d = _mm512_setzero_ps();
            if (r < rows)
                d = _mm512_cvtph_ps(
                    load_d16((const kvc_blk_q8_0 *)(w + (size_t)r * stride) + g0, gl));
            _mm512_storeu_ps(u.d[g0 / 16][r], d);
        }
        for (int c = 0; c < gl; c += 2) {
            for (int r = 0; r < 4; r++) {
                __m512i wq = _mm512_setzero_si512();
                if (r < rows) {
                    const kvc_blk_q8_0 *b = (const kvc_blk_q8_0 *)(w + (size_t)r * stride) + g0 + c;
                    wq = c + 2 <= gl ? _mm512_xor_si512(load_qs2(b), bias)
                                     : _mm512_zextsi256_si512(_mm256_xor_si256(
                                           _mm256_loadu_si256((const __m256i *)b->qs),
                                           _mm512_castsi512_si256(bias)));
                }
                _mm512_storeu_si512(u.qs[(g0 + c) / 2][r], wq);
            }
        }
    }
}

/* y[t*ldy + r] for r < rows (<= 4) and the tokens t0, t1 (t1 may repeat t0; then
 * only t0 is stored). The operations per (row, token) are those of q8_0_rows. */
static void q8_0_batch_tokens(q8_0_unpacked u, int rows, int64_t nb, int64_t n, const uint8_t *act0,
                              const uint8_t *act1, int store1, float *y0, float *y1) {
    const __m512i sidx0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const uint8_t *act[2] = {act0, act1};
    __m512 acc[4][2], accb[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        acc[r][0] = acc[r][1] = accb[r][0] = accb[r][1] = _mm512_setzero_ps();
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
                accb[r][k] = _mm512_fmadd_ps(_mm512_loadu_ps(u.d[g0 / 16][r]), sa16, accb[r][k]);
        }
        for (int c = 0; c < gl; c += 2) {
            const int pair = c + 2 <= gl;
            /* as q8_0_rows: a lone last block takes its scale in every lane */
            const __m512i sidx =
                pair ? _mm512_add_epi32(sidx0, _mm512_set1_epi32(c)) : _mm512_set1_epi32(c);
            __m512i a[2];
            __m512 da2[2];
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                const int8_t *q = kvc_act_q(act[k]) + (g0 + c) * KVC_QK;
                a[k] = pair ? _mm512_loadu_si512(q)
                            : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)q));
                da2[k] = _mm512_permutexvar_ps(sidx, da16[k]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m512i wq = _mm512_loadu_si512(u.qs[(g0 + c) / 2][r]);
                const __m512 d2 = _mm512_permutexvar_ps(sidx, _mm512_loadu_ps(u.d[g0 / 16][r]));
#pragma GCC unroll 2
                for (int k = 0; k < 2; k++) {
                    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wq, a[k]);
                    acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(d2, da2[k]),
                                                acc[r][k]);
                }
            }
        }
    }
    const __m512 m128 = _mm512_set1_ps(-128.0f);
    for (int r = 0; r < rows; r++) {
        y0[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accb[r][0], m128, acc[r][0]));
        if (store1) y1[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accb[r][1], m128, acc[r][1]));
    }
}

static void dot_batch_q8_0_q8_0_avx512(const void *w, size_t stride, int64_t nrows,
                                       const void *acts, size_t act_stride, int64_t m, int64_t n,
                                       float *y, int64_t ldy) {
    const int64_t nb = n / KVC_QK, npairs = (nb + 1) / 2, ngroups = (nb + 15) / 16;
    _Alignas(64) uint8_t qs[npairs][4][64];
    _Alignas(64) float d[ngroups][4][16];
    const q8_0_unpacked u = {qs, d};
    const uint8_t *a = acts;
    for (int64_t r0 = 0; r0 < nrows; r0 += 4) {
        const int rows = nrows - r0 < 4 ? (int)(nrows - r0) : 4;
        q8_0_unpack4((const uint8_t *)w + (size_t)r0 * stride, stride, rows, nb, u);
        for (int64_t t = 0; t < m; t += 2) {
            const int64_t t1 = t + 1 < m ? t + 1 : t;
            q8_0_batch_tokens(u, rows, nb, n, a + (size_t)t * act_stride,
                              a + (size_t)t1 * act_stride, t1 != t, y + t * ldy + r0,
                              y + t1 * ldy + r0);
        }
    }
}

static void dequant_q8_0_avx512(const void *x, float *y, int64_t n) {
    const kvc_blk_q8_0 *b = x;
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m512 d = _mm512_set1_ps(kvc_f16_load_avx512(&b[i].d));
        __m512i lo = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b[i].qs));
        __m512i hi = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 16)));
        _mm512_storeu_ps(y + i * KVC_QK, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        _mm512_storeu_ps(y + i * KVC_QK + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
    }
}

void kvc_wt_register_q8_0_avx512(kvc_wtype *table) {
    table[KVC_WT_Q8_0].dot = dot_q8_0_q8_0_avx512;
    table[KVC_WT_Q8_0].dot_rows = dot_rows_q8_0_q8_0_avx512;
    table[KVC_WT_Q8_0].dot_batch = dot_batch_q8_0_q8_0_avx512;
    table[KVC_WT_Q8_0].dequant = dequant_q8_0_avx512;
}
