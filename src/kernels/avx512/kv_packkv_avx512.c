/* AVX-512 kernels of the PackKV codecs (packkv.h) in the paper's layout, packs
 * of 16 tokens; blocks in the grouped layout go to kv_packkv_grouped_avx512.c.
 *
 * Unpacking one pack (16 residuals of w bits, 2w bytes) into the 16 lanes of
 * a register: one 16-byte load broadcast to the four 128-bit lanes, vpshufb
 * with the width's table (lane t gets bytes floor(t*w/8) and the next),
 * vpsrlvd by (t*w) mod 8 and a mask of w bits. The residual bytes never go
 * back to memory.
 *
 * qk (key blocks, pack-major), float: per pack, tokens in lanes; per channel
 * one unpack, one cvt and one FMA per head against the broadcast q_c; the
 * pack's sum_c q_c pmin_c and the per-token scale and min are applied once
 * per pack. (An int16 query with one vpdpwssd per two channels and head, the
 * two channels unpacked into the halves of each lane, was slower on the
 * development machine: 2.33 against 2.06 ns per pack and channel,
 * docs/benchmarks.md "PackKV".)
 *
 * pv (value blocks, channel-major), integer: the weights p_t s_t of each head
 * become int16, wi_t = round(p_t s_t / beta), beta = the block's max / 32767;
 * per channel and pack, the codes pmin + r of the 16 tokens are unpacked into
 * 16-bit lanes of a 256-bit register (vpshufb, vpsrlvw, mask, add), one
 * vpdpwssd per head against the weights; eight channels' sums are reduced
 * together and o_c += beta acc_c + sum_t p_t m_t. Exact for blocks of <= 256
 * tokens; longer blocks take the float path.
 *
 * Rounding (the bound the tests check): |p.v - ref| <= beta/2 sum_t code_tc,
 * on top of f32 sums. Packs of 8 tokens run the AVX2 kernels (registered
 * before these). Up to 8 heads (qk) / 4 heads (pv) share one unpack. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512/kv_avx512_util.h"
#include "kernels/avx512/kv_packkv_avx512.h"
#include "kv/codec/packkv.h"

static uint8_t shuf16[9][64] __attribute__((aligned(64)));
static uint32_t shift16[9][16] __attribute__((aligned(64)));
static uint32_t mask16[9][16] __attribute__((aligned(64)));
static uint8_t shuf_w[9][32] __attribute__((aligned(32)));  /* 16 tokens in 16-bit lanes */
static uint16_t shift_w[9][16] __attribute__((aligned(32)));
static uint16_t mask_w[9][16] __attribute__((aligned(32)));
static kvc_pk_kernels narrow; /* the kernels for packs of 8 */

enum { IBLOCK = 256 }; /* longest blocks with exact int32 sums in p.v */

static void build_tables(void) {
    for (int w = 0; w <= 8; w++)
        for (int t = 0; t < 16; t++) {
            int byte = t * w / 8, at = 16 * (t / 4) + 4 * (t % 4);
            memset(&shuf16[w][at], 0x80, 4);
            if (w) {
                shuf16[w][at] = (uint8_t)byte;
                shuf16[w][at + 1] = byte + 1 < 16 ? (uint8_t)(byte + 1) : 0x80;
            }
            shift16[w][t] = (uint32_t)(t * w % 8);
            mask16[w][t] = (1u << w) - 1;
            int wat = 16 * (t / 8) + 2 * (t % 8); /* 16-bit lane t: 128-bit lane t/8 */
            shuf_w[w][wat] = w ? (uint8_t)byte : 0x80;
            shuf_w[w][wat + 1] = w && byte + 1 < 16 ? (uint8_t)(byte + 1) : 0x80;
            shift_w[w][t] = (uint16_t)(t * w % 8);
            mask_w[w][t] = (uint16_t)((1u << w) - 1);
        }
}

/* The 16 residuals of the pack at src (width w) as integers. */
static inline __attribute__((always_inline)) __m512i unpack16i(const uint8_t *src, int w) {
    __m512i x = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)src));
    x = _mm512_shuffle_epi8(x, _mm512_load_si512(shuf16[w]));
    x = _mm512_srlv_epi32(x, _mm512_load_si512(shift16[w]));
    return _mm512_and_si512(x, _mm512_load_si512(mask16[w]));
}

static inline __attribute__((always_inline)) __m512 unpack16(const uint8_t *src, int w) {
    return _mm512_cvtepi32_ps(unpack16i(src, w));
}

/* The pack's codes pmin + residual as floats. */
static inline __attribute__((always_inline)) __m512 unpack16_plus(const uint8_t *src, int w, int pmin) {
    return _mm512_cvtepi32_ps(_mm512_add_epi32(unpack16i(src, w), _mm512_set1_epi32(pmin)));
}

/* sum_c q_c pmin_c over dim channels. */
static inline float dot_u8(const float *q, const uint8_t *m, int dim) {
    __m512 acc = _mm512_setzero_ps();
    int c = 0;
    for (; c + 16 <= dim; c += 16) {
        __m512 mv = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(m + c))));
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), mv, acc);
    }
    if (c < dim) {
        __mmask16 k = (__mmask16)((1u << (dim - c)) - 1);
        __m512 mv = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, m + c)));
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, q + c), mv, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

/* ---- qk ------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) void qk_heads(const kvc_pk_block *b, const float *q,
                                                           int ldq, int j0, int j1, float *s,
                                                           int lds, const int NH) {
    const int dim = b->dim, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    float qsum[8];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; h++)
        qsum[h] = kvc_sum_f32_avx512(q + (size_t)h * ldq, dim);
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0 * dim);
    for (int p = p0; p < p1; p++) {
        const int item0 = p * dim;
        __m512 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) acc[h] = _mm512_setzero_ps();
        for (int c = 0; c < dim; c++) {
            int item = item0 + c, w = (b->widths[item >> 1] >> ((item & 1) * 4)) & 15;
            __m512 r = unpack16(src, w);
            src += 2 * w;
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++)
                acc[h] = _mm512_fmadd_ps(r, _mm512_set1_ps(q[(size_t)h * ldq + c]), acc[h]);
        }
        __m512 sc = kvc_bf16x16_avx512(b->scales + 16 * p), mn = _mm512_loadu_ps(b->mins + 16 * p);
        __mmask16 k = kvc_lanes16_avx512(16 * p, j0, j1);
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            float dmin = dot_u8(q + (size_t)h * ldq, b->pmins + item0, dim);
            __m512 x = _mm512_add_ps(acc[h], _mm512_set1_ps(dmin));
            x = _mm512_fmadd_ps(mn, _mm512_set1_ps(qsum[h]), _mm512_mul_ps(sc, x));
            _mm512_mask_storeu_ps(s + (size_t)h * lds + 16 * p - j0, k, x);
        }
    }
}

static void qk_avx512(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1, float *s,
                      int lds) {
    if (b->pack != 16) {
        narrow.qk(b, q, ldq, G, j0, j1, s, lds);
        return;
    }
    if (b->group != 1) {
        kvc_pk_qk_grouped_avx512(b, q, ldq, G, j0, j1, s, lds);
        return;
    }
    for (int h0 = 0; h0 < G; h0 += 8) {
        const float *qh = q + (size_t)h0 * ldq;
        float *sh = s + (size_t)h0 * lds;
        switch (G - h0 < 8 ? G - h0 : 8) {
        case 1: qk_heads(b, qh, ldq, j0, j1, sh, lds, 1); break;
        case 2: qk_heads(b, qh, ldq, j0, j1, sh, lds, 2); break;
        case 3: qk_heads(b, qh, ldq, j0, j1, sh, lds, 3); break;
        case 4: qk_heads(b, qh, ldq, j0, j1, sh, lds, 4); break;
        case 5: qk_heads(b, qh, ldq, j0, j1, sh, lds, 5); break;
        case 6: qk_heads(b, qh, ldq, j0, j1, sh, lds, 6); break;
        case 7: qk_heads(b, qh, ldq, j0, j1, sh, lds, 7); break;
        default: qk_heads(b, qh, ldq, j0, j1, sh, lds, 8); break;
        }
    }
}

/* ---- pv ------------------------------------------------------------------------ */

enum { MAXP = KVC_PK_MAX_BLOCK / 16 };

/* Bytes of the items [from, to) of a block. */
static inline uint32_t items_bytes(const kvc_pk_block *b, int from, int to) {
    uint32_t n = 0;
    for (int i = from; i < to; i++) n += (uint32_t)((b->widths[i >> 1] >> ((i & 1) * 4)) & 15);
    return 2 * n;
}

/* r[c] = the sum of the 16 lanes of v[c], c < 16 (a transpose-and-add tree:
 * about 3 operations per vector instead of a horizontal sum each). */
static inline __m512 sum16x16(const __m512 *v) {
    __m512 w[8], x[4];
    for (int k = 0; k < 8; k++)
        w[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]),
                             _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
    for (int k = 0; k < 4; k++)
        x[k] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * k], w[2 * k + 1], 0xEE));
    __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88), _mm512_shuffle_f32x4(x[0], x[1], 0xDD));
    __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(x[2], x[3], 0x88), _mm512_shuffle_f32x4(x[2], x[3], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
}

static inline __attribute__((always_inline)) void pv_heads(const kvc_pk_block *b, const float *p,
                                                           int ldp, int j0, int j1, float *o,
                                                           int ldo, const int NH) {
    const int dim = b->dim, np = b->np, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    __m512 wv[4][MAXP], red[4][16];
    float mterm[4];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        const float *ph = p + (size_t)h * ldp - j0;
        __m512 mt = _mm512_setzero_ps();
        for (int pk = p0; pk < p1; pk++) {
            __mmask16 k = kvc_lanes16_avx512(16 * pk, j0, j1);
            __m512 pw = _mm512_maskz_loadu_ps(k, ph + 16 * pk);
            wv[h][pk] = _mm512_mul_ps(pw, kvc_bf16x16_avx512(b->scales + 16 * pk));
            mt = _mm512_fmadd_ps(pw, _mm512_loadu_ps(b->mins + 16 * pk), mt);
        }
        mterm[h] = _mm512_reduce_add_ps(mt);
    }
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0);
    for (int c = 0; c < dim; c++) {
        __m512 acc[4];
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) acc[h] = _mm512_setzero_ps();
        for (int pk = p0; pk < p1; pk++) {
            int item = c * np + pk, w = (b->widths[item >> 1] >> ((item & 1) * 4)) & 15;
            __m512 r = unpack16_plus(src, w, b->pmins[item]); /* the codes pmin + r */
            src += 2 * w;
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) acc[h] = _mm512_fmadd_ps(r, wv[h][pk], acc[h]);
        }
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) red[h][c & 15] = acc[h];
        if ((c & 15) == 15 || c + 1 == dim) { /* the sums of channels c0 .. c */
            int c0 = c & ~15, n = c + 1 - c0;
            __mmask16 k = (__mmask16)((1u << n) - 1);
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) {
                for (int i = n; i < 16; i++) red[h][i] = _mm512_setzero_ps();
                float *oh = o + (size_t)h * ldo + c0;
                __m512 sum = _mm512_add_ps(sum16x16(red[h]), _mm512_set1_ps(mterm[h]));
                _mm512_mask_storeu_ps(oh, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, oh), sum));
            }
        }
        if ((p1 != np || p0 != 0) && c + 1 < dim) /* skip to pack p0 of the next channel */
            src += items_bytes(b, c * np + p1, (c + 1) * np + p0);
    }
}

/* r[c] = the sum of the 8 lanes of v[c], c < 8. */
static inline __m256i sum8x8(const __m256i *v) {
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b2 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    a = _mm256_hadd_epi32(a, b2); /* lanes: 0..3 low half of v0..v3, then high */
    c = _mm256_hadd_epi32(c, d);
    __m256i lo = _mm256_permute2x128_si256(a, c, 0x20), hi = _mm256_permute2x128_si256(a, c, 0x31);
    return _mm256_add_epi32(lo, hi);
}

static inline __attribute__((always_inline)) void pv_int_heads(const kvc_pk_block *b, const float *p,
                                                               int ldp, int j0, int j1, float *o,
                                                               int ldo, const int NH) {
    const int dim = b->dim, np = b->np, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    __m256i wi[4][IBLOCK / 16], red[4][8];
    float mterm[4], beta[4];
    #pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        const float *ph = p + (size_t)h * ldp - j0;
        __m512 mt = _mm512_setzero_ps(), mx = _mm512_setzero_ps();
        __m512 wv[IBLOCK / 16];
        for (int pk = p0; pk < p1; pk++) {
            __mmask16 k = kvc_lanes16_avx512(16 * pk, j0, j1);
            __m512 pw = _mm512_maskz_loadu_ps(k, ph + 16 * pk);
            wv[pk] = _mm512_mul_ps(pw, kvc_bf16x16_avx512(b->scales + 16 * pk));
            mx = _mm512_max_ps(mx, wv[pk]);
            mt = _mm512_fmadd_ps(pw, _mm512_loadu_ps(b->mins + 16 * pk), mt);
        }
        mterm[h] = _mm512_reduce_add_ps(mt);
        float wmax = _mm512_reduce_max_ps(mx);
        float inv = wmax > 0.0f && wmax <= 3.0e38f ? 32767.0f / wmax : 0.0f;
        beta[h] = inv > 0.0f ? wmax / 32767.0f : 0.0f;
        for (int pk = p0; pk < p1; pk++)
            wi[h][pk] = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(wv[pk], _mm512_set1_ps(inv))));
    }
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0);
    for (int c = 0; c < dim; c++) {
        __m256i acc[4];
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) acc[h] = _mm256_setzero_si256();
        for (int pk = p0; pk < p1; pk++) {
            int item = c * np + pk, w = kvc_pk_item_width(b, item);
            __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)src));
            x = _mm256_shuffle_epi8(x, _mm256_load_si256((const __m256i *)shuf_w[w]));
            x = _mm256_srlv_epi16(x, _mm256_load_si256((const __m256i *)shift_w[w]));
            x = _mm256_and_si256(x, _mm256_load_si256((const __m256i *)mask_w[w]));
            x = _mm256_add_epi16(x, _mm256_set1_epi16((short)b->pmins[item])); /* codes pmin + r */
            src += 2 * w;
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) acc[h] = _mm256_dpwssd_epi32(acc[h], x, wi[h][pk]);
        }
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) red[h][c & 7] = acc[h];
        if ((c & 7) == 7 || c + 1 == dim) { /* the sums of channels c0 .. c */
            int c0 = c & ~7, n = c + 1 - c0;
            __mmask8 k = (__mmask8)((1u << n) - 1);
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) {
                for (int i = n; i < 8; i++) red[h][i] = _mm256_setzero_si256();
                float *oh = o + (size_t)h * ldo + c0;
                __m256 sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8x8(red[h])), _mm256_set1_ps(beta[h]),
                                             _mm256_set1_ps(mterm[h]));
                _mm256_mask_storeu_ps(oh, k, _mm256_add_ps(_mm256_maskz_loadu_ps(k, oh), sum));
            }
        }
        if ((p1 != np || p0 != 0) && c + 1 < dim) /* skip to pack p0 of the next channel */
            src += items_bytes(b, c * np + p1, (c + 1) * np + p0);
    }
}

static void pv_avx512(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1, float *o,
                      int ldo) {
    if (b->pack != 16) {
        narrow.pv(b, p, ldp, G, j0, j1, o, ldo);
        return;
    }
    if (b->group != 1) {
        kvc_pk_pv_grouped_avx512(b, p, ldp, G, j0, j1, o, ldo);
        return;
    }
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *ph = p + (size_t)h0 * ldp;
        float *oh = o + (size_t)h0 * ldo;
        if (b->np * 16 <= IBLOCK) {
            switch (G - h0 < 4 ? G - h0 : 4) {
            case 1: pv_int_heads(b, ph, ldp, j0, j1, oh, ldo, 1); break;
            case 2: pv_int_heads(b, ph, ldp, j0, j1, oh, ldo, 2); break;
            case 3: pv_int_heads(b, ph, ldp, j0, j1, oh, ldo, 3); break;
            default: pv_int_heads(b, ph, ldp, j0, j1, oh, ldo, 4); break;
            }
            continue;
        }
        switch (G - h0 < 4 ? G - h0 : 4) {
        case 1: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 1); break;
        case 2: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 2); break;
        case 3: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 3); break;
        default: pv_heads(b, ph, ldp, j0, j1, oh, ldo, 4); break;
        }
    }
}

void kvc_pk_register_avx512(kvc_pk_kernels *k) {
    build_tables();
    kvc_pk_grouped_init_avx512();
    narrow = *k;
    k->qk = qk_avx512;
    k->pv = pv_avx512;
}
