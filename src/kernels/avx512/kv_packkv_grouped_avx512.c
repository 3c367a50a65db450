/* AVX-512 kernels of PackKV's grouped layout (packkv.h, docs/formats.md):
 * every 64 residuals of a unit decode to u8 codes in one vpermb (qword k <-
 * the w bytes from k*w), one vpmultishiftqb (byte i <- bits i*w..) and a
 * mask, which are the operand of vpdpbusd as they are; no float conversion.
 *
 * q.k (units of 16 tokens x 4 channels, dword t = token t): the query of each
 * head is rounded to 15 bits (qs = max |q_c| / 16383) and split into two s8
 * planes, kept per thread for the next blocks of the same decode step; the
 * four channels' pmins are added to the codes, and two vpdpbusd per head take
 * the unit. The rounding moves a score by at most qs/2 sum_c code_tc s_t (the
 * tests' bound). (An int8 query, one vpdpbusd per head, moved attention
 * outputs by 0.2% on the tests' data: too far from the decoded cache's
 * attention.)
 *
 * p.v (units of 16 channels x 16 tokens as 4 runs of 4 tokens, dword c' =
 * channel c'): the weights p_t s_t of each head become 15-bit integers (beta
 * = the block's largest / 16383) in two s8 planes; per run, the codes (pmins
 * added) take two vpdpbusd per head against the 4 tokens' weight bytes;
 * |p.v - ref| <= beta/2 sum_t code_tc on top of f32 sums.
 *
 * vpdpbusd is written out in asm (dpbusd_bcst): GCC wrapped the intrinsic in
 * two register moves per use in these unrolled loops and did not fold the
 * broadcast of the query / weight bytes into it. Up to 8 heads (q.k) / 4 heads
 * (p.v) share one decode. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512/kv_avx512_util.h"
#include "kernels/avx512/kv_packkv_avx512.h"

static uint8_t gperm[9][64] __attribute__((aligned(64)));  /* qword k <- bytes k*w .. k*w+7 */
static uint8_t gshift[9][64] __attribute__((aligned(64))); /* byte i of a qword <- bits i*w.. */
static uint8_t gmask[9][64] __attribute__((aligned(64)));
static uint8_t rep4[64] __attribute__((aligned(64))); /* byte i <- byte i/4 */

void kvc_pk_grouped_init_avx512(void) {
    for (int w = 0; w <= 8; w++)
        for (int k = 0; k < 64; k++) {
            gperm[w][k] = (uint8_t)(k / 8 * w + k % 8);
            gshift[w][k] = (uint8_t)(k % 8 * w);
            gmask[w][k] = (uint8_t)((1u << w) - 1);
            rep4[k] = (uint8_t)(k / 4);
        }
}

/* ---- qk, grouped keys ---------------------------------------------------------- */

/* 16 integers W of |W| <= 16383 as W = 128 hi + lo, lo in 0..127 and hi in
 * -128..127 (both valid s8 operands of vpdpbusd): the bytes of the lanes in k
 * to lo[] and hi[]. */
static inline void store_planes(__m512i w, __mmask16 k, uint8_t *lo, uint8_t *hi) {
    _mm_mask_storeu_epi8(lo, k, _mm512_cvtepi32_epi8(_mm512_and_si512(w, _mm512_set1_epi32(127))));
    _mm_mask_storeu_epi8(hi, k, _mm512_cvtepi32_epi8(_mm512_srai_epi32(w, 7)));
}

/* q (dim floats, dim a multiple of 4) as 15-bit integers Q_c = round(q_c /
 * qs), qs = max |q_c| / 16383, split Q = 128 hi + lo with lo in 0..127 and hi
 * in -128..127 (both valid s8 operands of vpdpbusd), four channels per dword
 * of lo / hi; returns qs (0 for a zero or non-finite query). */
static float fixed_query(const float *q, int dim, int32_t *lo, int32_t *hi) {
    __m512 mx = _mm512_setzero_ps();
    for (int c = 0; c < dim; c += 16) {
        __mmask16 k = dim - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dim - c)) - 1);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_maskz_loadu_ps(k, q + c)));
    }
    float m = _mm512_reduce_max_ps(mx);
    if (!(m > 0.0f) || !isfinite(m)) {
        memset(lo, 0, (size_t)dim);
        memset(hi, 0, (size_t)dim);
        return 0.0f;
    }
    __m512 inv = _mm512_set1_ps(16383.0f / m);
    for (int c = 0; c < dim; c += 16) {
        __mmask16 k = dim - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (dim - c)) - 1);
        __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, q + c), inv));
        store_planes(qi, k, (uint8_t *)lo + c, (uint8_t *)hi + c);
    }
    return m / 16383.0f;
}

/* acc += the u8 bytes of a times the s8 bytes of the dword at b broadcast to
 * every lane. Written out because GCC wraps the intrinsic in two register
 * moves per use in these unrolled loops and does not fold the broadcast. */
static inline __attribute__((always_inline)) __m512i dpbusd_bcst(__m512i acc, __m512i a,
                                                                 const void *b) {
    __asm__("vpdpbusd %[b]%{1to16%}, %[a], %[acc]"
            : [acc] "+v"(acc)
            : [a] "v"(a), [b] "m"(*(const int32_t *)b));
    return acc;
}

/* The 64 residuals of width w at src (8w bytes) as bytes, in their order. */
static inline __attribute__((always_inline)) __m512i residuals64(const uint8_t *src, int w) {
    __m512i x = _mm512_permutexvar_epi8(_mm512_load_si512(gperm[w]), _mm512_loadu_si512(src));
    x = _mm512_multishift_epi64_epi8(_mm512_load_si512(gshift[w]), x);
    return _mm512_and_si512(x, _mm512_load_si512(gmask[w]));
}

/* The u8 codes (pmin + residual) of one grouped key unit of width w at src:
 * dword t = token t, byte c' = channel c' of the unit; pmin4 = the four pmins. */
static inline __attribute__((always_inline)) __m512i unit_codes(const uint8_t *src, int w,
                                                                uint32_t pmin4) {
    return _mm512_add_epi8(residuals64(src, w), _mm512_set1_epi32((int)pmin4));
}

/* The fixed-point query of up to 8 heads, as qkg_heads uses it. A decode step
 * calls the kernel once per block of 64 keys with the same query; the last
 * one is kept per thread and reused while the query's bits are the same
 * (a comparison is a quarter of the rounding's cost). */
enum { QMEMO_DIM = 256 };
typedef struct fixed_q {
    int32_t lo[8][KVC_PK_MAX_DIM / KVC_PK_KGROUP], hi[8][KVC_PK_MAX_DIM / KVC_PK_KGROUP];
    float qs[8], qsum[8];
} fixed_q;

static __thread struct {
    int nh, dim;           /* 0: empty */
    float q[8][QMEMO_DIM]; /* the query the planes were made from */
    fixed_q f;
} qmemo;

static const fixed_q *prepare_query(const float *q, int ldq, int nh, int dim, fixed_q *scratch) {
    int memo = dim <= QMEMO_DIM, same = memo && qmemo.nh == nh && qmemo.dim == dim;
    for (int h = 0; h < nh && same; h++)
        same = memcmp(qmemo.q[h], q + (size_t)h * ldq, sizeof(float) * (size_t)dim) == 0;
    if (same) return &qmemo.f;
    fixed_q *f = memo ? &qmemo.f : scratch;
    for (int h = 0; h < nh; h++) {
        const float *qh = q + (size_t)h * ldq;
        f->qs[h] = fixed_query(qh, dim, f->lo[h], f->hi[h]);
        f->qsum[h] = kvc_sum_f32_avx512(qh, dim);
        if (memo) memcpy(qmemo.q[h], qh, sizeof(float) * (size_t)dim);
    }
    if (memo) qmemo.nh = nh, qmemo.dim = dim;
    return f;
}

static inline __attribute__((always_inline)) void qkg_heads(const kvc_pk_block *b, const float *q,
                                                            int ldq, int j0, int j1, float *s,
                                                            int lds, const int NH) {
    const int dim = b->dim, ng = dim / KVC_PK_KGROUP, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    fixed_q scratch;
    const fixed_q *fq = prepare_query(q, ldq, NH, dim, &scratch);
    const uint8_t *src = b->data + kvc_pk_unit_offset(b, p0 * ng);
    for (int p = p0; p < p1; p++) {
        __m512i acc[8], ach[8];
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++)
            acc[h] = ach[h] = _mm512_setzero_si512();
        const uint8_t *pm = b->pmins + (size_t)p * dim;
        uint64_t wbuf = 0; /* the next units' width nibbles, refilled 8 bytes at a time */
        int left = 0;
        for (int g = 0, u = p * ng; g < ng; g++, u++) {
            if (!left) { /* the 8 bytes may reach into the pmins: the blob follows */
                memcpy(&wbuf, b->widths + (u >> 1), 8);
                wbuf >>= (u & 1) * 4;
                left = 16 - (u & 1);
            }
            int w = (int)(wbuf & 15);
            wbuf >>= 4, left--;
            uint32_t pmin4;
            memcpy(&pmin4, pm + KVC_PK_KGROUP * g, 4);
            __m512i x = unit_codes(src, w, pmin4);
            src += 8 * w;
#pragma GCC unroll 8
            for (int h = 0; h < NH; h++) {
                acc[h] = dpbusd_bcst(acc[h], x, &fq->lo[h][g]);
                ach[h] = dpbusd_bcst(ach[h], x, &fq->hi[h][g]);
            }
        }
        __m512 sc = kvc_bf16x16_avx512(b->scales + 16 * p), mn = _mm512_loadu_ps(b->mins + 16 * p);
        __mmask16 k = kvc_lanes16_avx512(16 * p, j0, j1);
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            /* 128 hi + lo in f32: the i32 sum could overflow for dims near 1024 */
            __m512 dot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ach[h]), _mm512_set1_ps(128.0f),
                                         _mm512_cvtepi32_ps(acc[h]));
            __m512 x = _mm512_mul_ps(dot, _mm512_set1_ps(fq->qs[h]));
            x = _mm512_fmadd_ps(mn, _mm512_set1_ps(fq->qsum[h]), _mm512_mul_ps(sc, x));
            _mm512_mask_storeu_ps(s + (size_t)h * lds + 16 * p - j0, k, x);
        }
    }
}

void kvc_pk_qk_grouped_avx512(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1,
                              float *s, int lds) {
    for (int h0 = 0; h0 < G; h0 += 8) {
        const float *qh = q + (size_t)h0 * ldq;
        float *sh = s + (size_t)h0 * lds;
        switch (G - h0 < 8 ? G - h0 : 8) {
        case 1:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 1);
            break;
        case 2:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 2);
            break;
        case 3:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 3);
            break;
        case 4:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 4);
            break;
        case 5:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 5);
            break;
        case 6:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 6);
            break;
        case 7:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 7);
            break;
        default:
            qkg_heads(b, qh, ldq, j0, j1, sh, lds, 8);
            break;
        }
    }
}

/* ---- pv, grouped values ------------------------------------------------------- */

/* The weights p_t s_t of one head for the tokens of packs p0 .. p1-1 (0 outside
 * [j0, j1)) as 15-bit integers W_t = round(p_t s_t / beta), beta = max |p_t s_t|
 * / 16383, split W = 128 hi + lo into s8 planes lo[] / hi[] (token order from
 * pack p0); returns beta (0 when every weight is 0 or one is not finite) and
 * *mterm = sum_t p_t m_t. ph[j - j0] is the weight of block token j. */
static float fixed_weights(const kvc_pk_block *b, const float *ph, int j0, int j1, uint8_t *lo,
                           uint8_t *hi, float *mterm) {
    const int p0 = j0 / 16, p1 = (j1 + 15) / 16;
    __m512 wv[KVC_PK_MAX_BLOCK / 16], mx = _mm512_setzero_ps(), mt = _mm512_setzero_ps();
    for (int pk = p0; pk < p1; pk++) {
        __mmask16 k = kvc_lanes16_avx512(16 * pk, j0, j1);
        __m512 pw = _mm512_maskz_loadu_ps(k, ph + 16 * pk - j0);
        wv[pk] = _mm512_mul_ps(pw, kvc_bf16x16_avx512(b->scales + 16 * pk));
        mx = _mm512_max_ps(mx, _mm512_abs_ps(wv[pk]));
        mt = _mm512_fmadd_ps(pw, _mm512_loadu_ps(b->mins + 16 * pk), mt);
    }
    *mterm = _mm512_reduce_add_ps(mt);
    float wmax = _mm512_reduce_max_ps(mx);
    float inv = wmax > 0.0f && wmax <= 3.0e38f ? 16383.0f / wmax : 0.0f;
    for (int pk = p0; pk < p1; pk++) {
        __m512i wi = _mm512_cvtps_epi32(_mm512_mul_ps(wv[pk], _mm512_set1_ps(inv)));
        store_planes(wi, 0xFFFF, lo + 16 * (pk - p0), hi + 16 * (pk - p0));
    }
    return inv > 0.0f ? wmax / 16383.0f : 0.0f;
}

/* Units of 16 channels x 16 tokens, channel-group-major; each is 4 runs of 4
 * tokens (64 residuals, dword c' = channel c'), two vpdpbusd per run and head
 * against the 4 tokens' weight bytes. */
static inline __attribute__((always_inline)) void pvg_heads(const kvc_pk_block *b, const float *p,
                                                            int ldp, int j0, int j1, float *o,
                                                            int ldo, const int NH) {
    const int np = b->np, ncg = b->dim / KVC_PK_VGROUP, p0 = j0 / 16, p1 = (j1 + 15) / 16;
    uint8_t wlo[4][KVC_PK_MAX_BLOCK] __attribute__((aligned(64))),
        whi[4][KVC_PK_MAX_BLOCK] __attribute__((aligned(64)));
    float beta[4], mterm[4];
#pragma GCC unroll 4
    for (int h = 0; h < NH; h++)
        beta[h] = fixed_weights(b, p + (size_t)h * ldp, j0, j1, wlo[h], whi[h], &mterm[h]);
    const uint8_t *src = b->data;
    for (int cg = 0, u = 0; cg < ncg; cg++) {
        __m512i acl[4], ach[4];
#pragma GCC unroll 4
        for (int h = 0; h < NH; h++)
            acl[h] = ach[h] = _mm512_setzero_si512();
        for (int pk = 0; pk < np; pk++, u++) {
            int w = kvc_pk_unit_width(b, u);
            if (pk < p0 || pk >= p1) { /* outside the range: skip its bytes */
                src += 32 * w;
                continue;
            }
            __m512i pmins = _mm512_permutexvar_epi8(
                _mm512_load_si512(rep4),
                _mm512_castsi128_si512(
                    _mm_loadu_si128((const __m128i *)(b->pmins + (size_t)u * KVC_PK_VGROUP))));
            const int t0 = 16 * (pk - p0);
#pragma GCC unroll 4
            for (int run = 0; run < 4; run++) {
                __m512i x = _mm512_add_epi8(residuals64(src + run * 8 * w, w), pmins);
#pragma GCC unroll 4
                for (int h = 0; h < NH; h++) {
                    acl[h] = dpbusd_bcst(acl[h], x, wlo[h] + t0 + 4 * run);
                    ach[h] = dpbusd_bcst(ach[h], x, whi[h] + t0 + 4 * run);
                }
            }
            src += 32 * w;
        }
#pragma GCC unroll 4
        for (int h = 0; h < NH; h++) {
            float *oh = o + (size_t)h * ldo + KVC_PK_VGROUP * cg;
            __m512 dot = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ach[h]), _mm512_set1_ps(128.0f),
                                         _mm512_cvtepi32_ps(acl[h]));
            __m512 sum = _mm512_fmadd_ps(dot, _mm512_set1_ps(beta[h]), _mm512_set1_ps(mterm[h]));
            _mm512_storeu_ps(oh, _mm512_add_ps(_mm512_loadu_ps(oh), sum));
        }
    }
}

void kvc_pk_pv_grouped_avx512(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1,
                              float *o, int ldo) {
    for (int h0 = 0; h0 < G; h0 += 4) {
        const float *ph = p + (size_t)h0 * ldp;
        float *oh = o + (size_t)h0 * ldo;
        switch (G - h0 < 4 ? G - h0 : 4) {
        case 1:
            pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 1);
            break;
        case 2:
            pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 2);
            break;
        case 3:
            pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 3);
            break;
        default:
            pvg_heads(b, ph, ldp, j0, j1, oh, ldo, 4);
            break;
        }
    }
}
