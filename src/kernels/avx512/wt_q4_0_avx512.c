/* AVX-512 (VNNI) kernels for Q4_0 weights: the scheme of wt_q4_0_avx512.c
 * (four blocks per zmm, two vpdpbusd of the unsigned nibbles with the int8
 * activation, one FMA per four blocks) with the -8 offset applied as
 * -8*d_w*s_a, one FMA per 16 blocks. The f16 scales of 16 blocks (18 bytes
 * apart) come from masked loads and word permutes. Reference: src/model/wt_q4_0.c. */
#include "kernels/avx512/wt_avx512_util.h"
#include "model/wt_kernels.h"

/* qs of blocks b[0..3] in the four 128-bit lanes */
KVC_AINLINE __m512i load_qs4(const kvc_blk_q4_0 *b) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b[0].qs));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[1].qs), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[2].qs), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[3].qs), 3);
}

/* the first v (1..3) blocks; the other lanes zero */
KVC_AINLINE __m512i load_qs_partial(const kvc_blk_q4_0 *b, int v) {
    __m512i z = _mm512_zextsi128_si512(_mm_loadu_si128((const __m128i *)b[0].qs));
    if (v > 1) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[1].qs), 1);
    if (v > 2) z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)b[2].qs), 2);
    return z;
}

/* The f16 scales of blocks b[0..gl) (word 9i of the group) in word i of the
 * result: five masked loads and three permutes (cheaper than a gather). */
KVC_AINLINE __m256i load_d16(const kvc_blk_q4_0 *b, int gl) {
    const int16_t *p = (const int16_t *)b;
    const int nw = 9 * gl; /* words of the group that exist */
    __m512i z[5];
#pragma GCC unroll 5
    for (int k = 0; k < 5; k++) {
        int c = nw - 32 * k;
        z[k] = _mm512_maskz_loadu_epi16(kvc_mask32(c <= 0 ? 0 : c >= 32 ? 32 : c), p + 32 * k);
    }
    /* word index 9i modulo the table size (64 words for two registers, 32 for one) */
    const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 135 - 128,
                                         126 - 64, 117 - 64, 108 - 64, 99 - 64, 90 - 64, 81 - 64,
                                         72 - 64, 63, 54, 45, 36, 27, 18, 9, 0);
    __m512i r01 = _mm512_permutex2var_epi16(z[0], idx, z[1]); /* words 0..7 */
    __m512i r23 = _mm512_permutex2var_epi16(z[2], idx, z[3]); /* words 8..14 */
    __m512i r4 = _mm512_permutexvar_epi16(idx, z[4]);         /* word 15 */
    __m512i r = _mm512_mask_blend_epi16(0x7f00, r01, r23);
    return _mm512_castsi512_si256(_mm512_mask_blend_epi16(0x8000, r, r4));
}

KVC_AINLINE void q4_0_rows(const uint8_t *w, size_t stride, const void *act, int64_t n, float *y,
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
            const kvc_blk_q4_0 *b = (const kvc_blk_q4_0 *)(w + (size_t)r * stride) + g0;
            __m512 d = _mm512_cvtph_ps(load_d16(b, gl));
            S[r] = _mm512_mul_ps(d, da16);
            accm[r] = _mm512_fmadd_ps(d, sa16, accm[r]);
        }
        for (int c = 0; c < gl; c += 4) {
            const int v = gl - c < 4 ? gl - c : 4;
            const int8_t *a = qa + (g0 + c) * KVC_QK;
            __m512i alo, ahi;
            kvc_act_blocks4(a, v, &alo, &ahi);
            const __m512i sidx = _mm512_add_epi32(sidx0, _mm512_set1_epi32(c));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const kvc_blk_q4_0 *b = (const kvc_blk_q4_0 *)(w + (size_t)r * stride) + g0 + c;
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
        y[r] = _mm512_reduce_add_ps(_mm512_fmadd_ps(accm[r], _mm512_set1_ps(-8.0f), acc[r]));
}

KVC_WT_DOT_ENTRY_POINTS_AVX512(dot_q4_0_q8_0_avx512, dot_rows_q4_0_q8_0_avx512, q4_0_rows)

static void dequant_q4_0_avx512(const void *x, float *y, int64_t n) {
    const kvc_blk_q4_0 *b = x;
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t i = 0; i < n / KVC_QK; i++) {
        __m128i raw = _mm_loadu_si128((const __m128i *)b[i].qs);
        __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(raw, _mm_set1_epi8(0x0f)));
        __m512i hi =
            _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f)));
        __m512 d = _mm512_set1_ps(kvc_f16_load_avx512(&b[i].d));
        _mm512_storeu_ps(y + i * KVC_QK,
                         _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), d));
        _mm512_storeu_ps(y + i * KVC_QK + 16,
                         _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), d));
    }
}

void kvc_wt_register_q4_0_avx512(kvc_wtype *table) {
    table[KVC_WT_Q4_0].dot = dot_q4_0_q8_0_avx512;
    table[KVC_WT_Q4_0].dot_rows = dot_rows_q4_0_q8_0_avx512;
    table[KVC_WT_Q4_0].dequant = dequant_q4_0_avx512;
}
