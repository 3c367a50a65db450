/* AVX-512 VNNI kernels of the integer quant codecs (iquant.h).
 *
 * qk: per call, the largest |q_c| of each head; per tile (the blob stores
 * its largest scale and the reciprocal), the query of each head becomes a
 * 15-bit integer (q_c s_c / alpha) in two int8 halves, and the constant
 * sum_c q_c m_c of all heads in one pass; then per two
 * blocks of 16 tokens, one load per key word (16 tokens x cpw channels),
 * `8/bits` field extractions (code_field) that leave four channels of one
 * token in each 32-bit lane, and two vpdpbusd (high and low query half; one for 1- and
 * 2-bit keys, whose query is one byte) per step, block and head against the
 * four query bytes broadcast: the 16 lanes are the 16 tokens' scores, no
 * horizontal sums. Up to 4 heads share one pass.
 *
 * pv: per 32-token block, head and channel group, the weights p_t s_tg become
 * u8 (beta per block) and sum_t p_t m_tg accumulates in a vector; then per 16
 * channels, one load per word block, field extractions that leave four
 * tokens of one channel in each lane, and one vpdpbusd per step and head
 * against those four tokens' weights; the block's integer sums are scaled
 * into the f32 output once. Up to 8 heads share one pass over the codes.
 *
 * 3-bit codes are two planes (iquant.h): both kernels run the 2-bit plane's
 * words as 2-bit codes and the 1-bit plane's with each code shifted left by
 * two (weighted 4 inside the u8 operand), into the same accumulators.
 * Results equal the scalar reference up to the order of float sums (the
 * integer parts are exact). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx512/kv_avx512_util.h"
#include "kv/codec/iquant.h"

enum { QMAX = KVC_IQ_MAX_DIM + 64, PF = 2048, PF_PARAM = 512 /* tokens */ };

/* ---- qk ------------------------------------------------------------------------ */

/* Byte indices (vpermt2b over the two i16 vectors packssdw(v0, v1) and
 * packssdw(v2, v3) of a 64-channel unit) that put channel c's low byte (lo)
 * or high byte (hi) at byte c: channel c = 16 j + 4 L + m sits in i16 word
 * 8 L + m + 4 (j % 2) of source j / 2 (the packs interleave per 128-bit lane
 * L). */
static const int8_t idx_lo[64] = {
    0, 2, 4, 6, 16, 18, 20, 22, 32, 34, 36, 38, 48, 50, 52, 54,
    8, 10, 12, 14, 24, 26, 28, 30, 40, 42, 44, 46, 56, 58, 60, 62,
    64, 66, 68, 70, 80, 82, 84, 86, 96, 98, 100, 102, 112, 114, 116, 118,
    72, 74, 76, 78, 88, 90, 92, 94, 104, 106, 108, 110, 120, 122, 124, 126,
};
static const int8_t idx_hi[64] = {
    1, 3, 5, 7, 17, 19, 21, 23, 33, 35, 37, 39, 49, 51, 53, 55,
    9, 11, 13, 15, 25, 27, 29, 31, 41, 43, 45, 47, 57, 59, 61, 63,
    65, 67, 69, 71, 81, 83, 85, 87, 97, 99, 101, 103, 113, 115, 117, 119,
    73, 75, 77, 79, 89, 91, 93, 95, 105, 107, 109, 111, 121, 123, 125, 127,
};

/* The query of one head for one tile in two int8 halves, 64 channels (four
 * vectors) at a time: xq = q * QMAX / qmax (per call), scn = s / smax (per
 * tile), Q = round(xq * scn), the values of kvc_iq_query_ref (|Q| <= QMAX
 * without a clamp: both factors are at most 1 up to rounding). The four i32
 * vectors are narrowed to i16 with saturating packs (exact: |Q| <= 32512),
 * and two vpermt2b pick the bytes in channel order: lo = the low byte of Q,
 * hi = the high byte of Q + 128 (= floor((Q + 128) / 256), in [-127, 127]:
 * Q + 128 still fits i16), so lo = Q - 256 hi as in the reference. Per 64
 * channels and head: 4 products and 4 conversions on the FP port, 4 shuffles
 * and 2 adds elsewhere (a vpmovdb per 16 channels and half was two uops, and
 * an i32 shift each). Channels from dim up to the next multiple of 64 get
 * zero bytes (the 1-bit words read up to 32 channels past a multiple of 16).
 * ok = 0 (q or the scales unusable) gives a zero query, as the reference. */
static inline void query_tile(const float *xq, const __m512 *scn, int nv, int ok, __m512i ilo, __m512i ihi,
                              int wide, int8_t *hi, int8_t *lo) {
    const __m512i h128 = _mm512_set1_epi16(128);
    for (int u = 0; u < nv; u += 4) {
        __m512i v[4];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            v[j] = ok && u + j < nv ? _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xq + 16 * (u + j)), scn[u + j]))
                                    : _mm512_setzero_si512();
        __m512i a = _mm512_packs_epi32(v[0], v[1]), b = _mm512_packs_epi32(v[2], v[3]);
        _mm512_storeu_si512(lo + 16 * u, _mm512_permutex2var_epi8(a, ilo, b));
        if (wide) /* the narrow query's hi bytes are 0 and not read */
            _mm512_storeu_si512(hi + 16 * u, _mm512_permutex2var_epi8(_mm512_add_epi16(a, h128), ihi,
                                                                   _mm512_add_epi16(b, h128)));
    }
}

/* Four horizontal sums at once (lane i of the result: the sum of x[i]'s
 * lanes): two rounds of 128-bit shuffles and two in-lane permutes for the
 * four, where four _mm512_reduce_add_ps take about eight operations each. */
static inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 t0 = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 t1 = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t0, t1, 0x88), _mm512_shuffle_f32x4(t0, t1, 0xDD));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(2, 3, 0, 1)));
    u = _mm512_add_ps(u, _mm512_permute_ps(u, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), u));
}

/* The shift of the high plane's codes of 3-bit keys and values: weighted 4
 * inside the u8 operand of vpdpbusd, so both planes share one accumulator. */
enum { HI_SHIFT = 2 };

/* The GF(2) bit matrix (vgf2p8affineqb) that moves bits PB k .. PB k + PB - 1
 * of each byte to bits SH .. SH + PB - 1 and clears the others: byte 7 - i of
 * the matrix selects the input bits of output bit i. */
static inline __attribute__((always_inline)) uint64_t field_matrix(int k, const int PB, const int SH) {
    uint64_t a = 0;
    for (int b = 0; b < PB; b++) a |= (uint64_t)(1u << (PB * k + b)) << (8 * (7 - (SH + b)));
    return a;
}

/* Code vectors of PB bits from x (fields k of each byte), shifted left by SH
 * (HI_SHIFT for the high plane of 3-bit codes). A field in place is one AND;
 * any other is one affine transform of the bytes (GFNI) instead of a shift
 * and an AND: shifts of zmm run on one port of an Intel core, the affine
 * transform replaces two of the ports' uops by one. */
static inline __attribute__((always_inline)) __m512i code_field(__m512i x, int k, const int PB, const int SH) {
    if (PB * k == SH) return _mm512_and_si512(x, _mm512_set1_epi8((char)(((1 << PB) - 1) << SH)));
    return _mm512_gf2p8affine_epi64_epi8(x, _mm512_set1_epi64((long long)field_matrix(k, PB, SH)), 0);
}

/* The dot products of key words [w0, w1) of NB blocks (kw words a token),
 * one plane of PB-bit codes shifted by SH: word w's field k is the query's
 * four bytes (w - w0) * 8 / PB + k. WIDE: the 15-bit query (hi and lo
 * halves, two vpdpbusd per code vector and head); otherwise the one-byte
 * query of 1- and 2-bit keys (hi = 0, lo = Q: one vpdpbusd). */
static inline __attribute__((always_inline)) void qk_plane(const uint32_t *cw, int kw, int w0, int w1,
                                                           const int32_t (*qh)[QMAX / 4], const int32_t (*ql)[QMAX / 4],
                                                           __m512i (*ah)[4], __m512i (*al)[4], const int PB,
                                                           const int SH, const int WIDE, const int NH, const int NB) {
    const int nk = 8 / PB;
    for (int w = w0; w < w1; w++) {
        __m512i x[2];
        #pragma GCC unroll 2
        for (int i = 0; i < NB; i++) {
            const uint32_t *src = cw + ((size_t)i * kw + w) * KVC_IQ_KBLOCK;
            _mm_prefetch((const char *)src + PF, _MM_HINT_T0);
            x[i] = _mm512_load_si512(src);
        }
        #pragma GCC unroll 8
        for (int k = 0; k < nk; k++) {
            __m512i c[2];
            #pragma GCC unroll 2
            for (int i = 0; i < NB; i++) c[i] = code_field(x[i], k, PB, SH);
            const int j = (w - w0) * nk + k;
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                __m512i bl = _mm512_set1_epi32(ql[h][j]);
                #pragma GCC unroll 2
                for (int i = 0; i < NB; i++) al[i][h] = _mm512_dpbusd_epi32(al[i][h], c[i], bl);
                if (WIDE) {
                    __m512i bh = _mm512_set1_epi32(qh[h][j]);
                    #pragma GCC unroll 2
                    for (int i = 0; i < NB; i++) ah[i][h] = _mm512_dpbusd_epi32(ah[i][h], c[i], bh);
                }
            }
        }
    }
}

/* NB (1 or 2) blocks of 16 tokens from block b: each query broadcast serves
 * NB blocks. 3-bit keys: the 2-bit plane's words, then the 1-bit plane's
 * (iquant.h) with its codes weighted 4. */
static inline __attribute__((always_inline)) void qk_blocks(const kvc_iq_ktile *t, const int32_t (*qh)[QMAX / 4], const int32_t (*ql)[QMAX / 4],
                                                            const float *alpha, const float *cterm,
                                                            int b, int j0, int j1, float *s, int lds,
                                                            const int BITS, const int NH, const int NB) {
    const int kw = kvc_iq_kwords(BITS, t->dim), WIDE = kvc_iq_query_max(BITS) == KVC_IQ_QMAX_WIDE;
    __m512i ah[2][4], al[2][4];
    #pragma GCC unroll 2
    for (int i = 0; i < NB; i++)
        #pragma GCC unroll 4
        for (int h = 0; h < NH; h++) ah[i][h] = al[i][h] = _mm512_setzero_si512();
    const uint32_t *cw = t->codes + (size_t)b * kw * KVC_IQ_KBLOCK;
    if (BITS == 3) {
        const int kw2 = kvc_iq_plane_kwords(2, t->dim);
        qk_plane(cw, kw, 0, kw2, qh, ql, ah, al, 2, 0, WIDE, NH, NB);
        qk_plane(cw, kw, kw2, kw, qh, ql, ah, al, 1, HI_SHIFT, WIDE, NH, NB);
    } else {
        qk_plane(cw, kw, 0, kw, qh, ql, ah, al, BITS, 0, WIDE, NH, NB);
    }
    #pragma GCC unroll 2
    for (int i = 0; i < NB; i++) {
        int first = (b + i) * KVC_IQ_KBLOCK;
        __mmask16 m = kvc_lanes16_avx512(first, j0, j1);
        #pragma GCC unroll 4
        for (int h = 0; h < NH; h++) {
            __m512i dot = WIDE ? _mm512_add_epi32(_mm512_slli_epi32(ah[i][h], 8), al[i][h]) : al[i][h];
            __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(alpha[h]),
                                       _mm512_set1_ps(cterm[h]));
            /* lane l is token first + l, column first + l - j0 of s */
            _mm512_mask_storeu_ps(s + (size_t)h * lds + first - j0, m, f);
        }
    }
}

static inline __attribute__((always_inline)) void qk_block(const kvc_iq_ktile *t, const int32_t (*qh)[QMAX / 4], const int32_t (*ql)[QMAX / 4],
                                                           const float *alpha, const float *cterm,
                                                           int j0, int j1, float *s, int lds,
                                                           const int BITS, const int NH) {
    int b = j0 / KVC_IQ_KBLOCK, e = (j1 + KVC_IQ_KBLOCK - 1) / KVC_IQ_KBLOCK;
    for (; b + 2 <= e; b += 2) qk_blocks(t, qh, ql, alpha, cterm, b, j0, j1, s, lds, BITS, NH, 2);
    if (b < e) qk_blocks(t, qh, ql, alpha, cterm, b, j0, j1, s, lds, BITS, NH, 1);
}

static void qk_heads(const kvc_iq_ktile *t, const int32_t (*qh)[QMAX / 4], const int32_t (*ql)[QMAX / 4], const float *alpha,
                     const float *cterm, int j0, int j1, float *s, int lds, int nh) {
#define QK_NH(BITS)                                                                   \
    switch (nh) {                                                                     \
    case 1: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 1); break;            \
    case 2: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 2); break;            \
    case 3: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 3); break;            \
    default: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 4); break;           \
    }
    switch (t->bits) {
    case 1: QK_NH(1); break;
    case 2: QK_NH(2); break;
    case 3: QK_NH(3); break;
    default: QK_NH(4); break;
    }
#undef QK_NH
}

/* One tile's folded query for up to 4 heads. */
typedef struct qk_fold {
    int32_t qh[4][QMAX / 4], ql[4][QMAX / 4];
    float alpha[4], cterm[4];
} qk_fold;

/* The constant terms sum_c q_c m_c of NH heads in one pass over the mins,
 * the accumulators in registers (NH is a constant), one shared horizontal
 * sum. */
static inline __attribute__((always_inline)) void cterms(const float *q, int ldq, const __m512 *mn, int nv,
                                                         float *out, const int NH) {
    __m512 ct[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int v = 0; v < nv; v++)
        #pragma GCC unroll 4
        for (int h = 0; h < NH; h++)
            ct[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * ldq + 16 * v), mn[v], ct[h]);
    _mm_storeu_ps(out, hsum4(ct[0], ct[1], ct[2], ct[3]));
}

/* Fold the query of heads [0, nh) (q rows ldq apart; xq the rows scaled to
 * QMAX, qa = max|q| / QMAX, qok usable) into tile t. */
static void fold_tile(const kvc_iq_ktile *t, const float *q, int ldq, const float (*xq)[KVC_IQ_MAX_DIM],
                      const float *qa, const int *qok, int nh, __m512i ilo, __m512i ihi, qk_fold *f) {
    const int nv = t->dim / 16;
    /* the tile's largest scale and its reciprocal come from the blob */
    float smax = t->smax;
    int sok = smax > 0.0f && isfinite(smax);
    __m512 sc[KVC_IQ_MAX_DIM / 16], mn[KVC_IQ_MAX_DIM / 16], inv_s = _mm512_set1_ps(t->inv_smax);
    for (int v = 0; v < nv; v++) {
        sc[v] = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t->scales + 16 * v))),
                              inv_s); /* s / smax */
        mn[v] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(t->mins + 16 * v)));
    }
    switch (nh) {
    case 1: cterms(q, ldq, mn, nv, f->cterm, 1); break;
    case 2: cterms(q, ldq, mn, nv, f->cterm, 2); break;
    case 3: cterms(q, ldq, mn, nv, f->cterm, 3); break;
    default: cterms(q, ldq, mn, nv, f->cterm, 4); break;
    }
    for (int h = 0; h < nh; h++) {
        int ok = sok && qok[h];
        f->alpha[h] = ok ? qa[h] * smax : 0.0f;
        query_tile(xq[h], sc, nv, ok, ilo, ihi, kvc_iq_query_max(t->bits) == KVC_IQ_QMAX_WIDE, (int8_t *)f->qh[h],
                   (int8_t *)f->ql[h]);
    }
}

/* Tiles are software-pipelined: the next tile's query is folded before the
 * current tile's dot products are issued, so that the fold's chain (f16
 * loads of the next tile's parameters, products, conversions, the shared
 * horizontal sum) overlaps the vpdpbusd stream instead of stalling it. */
static void qk_avx512(const kvc_iq_ktile *tiles, int nt, const float *q, int ldq, int G, int j0, int j1,
                      float *s, int lds) {
    const int dim = tiles[0].dim, nv = dim / 16, group = tiles[0].n;
    /* the narrow query of 1- and 2-bit tiles (kvc_iq_query_max) makes every
     * hi byte 0 and lo = Q: one dot product per code vector (qk_blocks) */
    const float qlim = (float)kvc_iq_query_max(tiles[0].bits);
    qk_fold fold[2];
    float xq[4][KVC_IQ_MAX_DIM];
    const __m512i ilo = _mm512_loadu_si512(idx_lo), ihi = _mm512_loadu_si512(idx_hi);
    int first = j0 / group, last = (j1 - 1) / group; /* tiles with tokens in [j0, j1) */
    if (last >= nt) last = nt - 1;
    for (int h0 = 0; h0 < G; h0 += 4) {
        int nh = G - h0 < 4 ? G - h0 : 4, qok[4];
        float qa[4];
        const float *qg = q + (size_t)h0 * ldq;
        for (int h = 0; h < nh; h++) { /* per call: max |q|, the query scaled to QMAX */
            const float *qv = qg + (size_t)h * ldq;
            __m512 m = _mm512_setzero_ps();
            for (int i = 0; i < nv; i++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(qv + 16 * i)));
            float qmax = _mm512_reduce_max_ps(m);
            qok[h] = qmax > 0.0f && isfinite(qmax);
            __m512 qn = _mm512_set1_ps(qok[h] ? qlim / qmax : 0.0f);
            for (int i = 0; i < nv; i++) _mm512_storeu_ps(xq[h] + 16 * i, _mm512_mul_ps(_mm512_loadu_ps(qv + 16 * i), qn));
            qa[h] = qok[h] ? qmax * (1.0f / qlim) : 0.0f;
        }
        if (first > last) continue;
        fold_tile(&tiles[first], qg, ldq, (const float(*)[KVC_IQ_MAX_DIM])xq, qa, qok, nh, ilo, ihi, &fold[first & 1]);
        for (int i = first; i <= last; i++) {
            const kvc_iq_ktile *t = &tiles[i];
            int tb = i * group, a = j0 > tb ? j0 : tb, e = j1 < tb + t->n ? j1 : tb + t->n;
            /* the parameters of the tile after next: the codes' prefetch
             * (PF bytes ahead) reaches them only about one tile before
             * fold_tile reads them, and perf put most of the fold's samples
             * on that first load (4-bit keys: -5% of the step on a Zen 4) */
            if (i + 2 <= last)
                for (int o = 0; o < dim * 4; o += 64) _mm_prefetch((const char *)tiles[i + 2].mins + o, _MM_HINT_T0);
            if (i < last)
                fold_tile(&tiles[i + 1], qg, ldq, (const float(*)[KVC_IQ_MAX_DIM])xq, qa, qok, nh, ilo, ihi,
                          &fold[(i + 1) & 1]);
            const qk_fold *f = &fold[i & 1];
            qk_heads(t, (const int32_t(*)[QMAX / 4])f->qh, (const int32_t(*)[QMAX / 4])f->ql, f->alpha, f->cterm,
                     a - tb, e - tb, s + (size_t)h0 * lds + (a - j0), lds, nh);
        }
    }
}

/* ---- pv ------------------------------------------------------------------------ */

enum { PV_NH = 8, MAX_G = KVC_IQ_MAX_DIM / 16, MAX_PAIR = PV_NH * MAX_G };

/* Per (head, channel group) pair k = h * ng + g: a block's u8 weights and
 * betas (two of these: the next block's are prepared while the current
 * block's dot products run), and the running min terms. */
typedef struct pv_state {
    uint32_t wq[MAX_PAIR + 1][KVC_IQ_VBLOCK / 4]; /* u8 weights, four tokens per word (+1: pairs are written two at a time) */
    float beta[MAX_PAIR + 1];
    int ng;                       /* groups per value vector, so pv_block does not divide */
} pv_state;

/* Lane of pair k in the result of max16: the reduction tree leaves pair k
 * (k < 16) in lane 4 (k % 4) + k / 4. */
static inline int max16_lane(int k) { return 4 * (k % 4) + k / 4; }

/* The maxima of the lanes of x[0..n) (n <= 16; x[k] for k >= n is not read)
 * in one vector, lane max16_lane(k) for x[k], 0 in the other lanes: a tree of
 * 128-bit shuffles, in-lane unpacks and maxima, about 3 operations per
 * vector where one _mm512_reduce_max_ps each takes about eight. */
static inline __attribute__((always_inline)) __m512 max16(const __m512 *x, const int n) {
    const __m512 z = _mm512_setzero_ps();
    __m512 t[8], u[4], w[2] = {z, z}; /* n >= 1 sets w[0]; GCC cannot tell at -O1 */
    for (int i = 0; 2 * i < n; i++) { /* t[i]: x[2i] in 128-bit blocks 0-1, x[2i+1] in 2-3 */
        __m512 a = x[2 * i], b = 2 * i + 1 < n ? x[2 * i + 1] : z;
        t[i] = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int i = 0; 4 * i < n; i++) { /* u[i]: block j holds x[4i + j]'s four candidates */
        __m512 a = t[2 * i], b = 4 * i + 2 < n ? t[2 * i + 1] : z;
        u[i] = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
    }
    for (int i = 0; 8 * i < n; i++) { /* w[i]: block j = [x[8i+j], x[8i+4+j], same, same] */
        __m512 a = u[2 * i], b = 8 * i + 4 < n ? u[2 * i + 1] : z;
        w[i] = _mm512_max_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    __m512d a = _mm512_castps_pd(w[0]), b = n > 8 ? _mm512_castps_pd(w[1]) : _mm512_setzero_pd();
    return _mm512_max_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

/* The weights of NK <= 16 (head, group) pairs from pair k0 on (pair k = h *
 * ng + g): the products p_t s_tg, their running min terms, the maxima of all
 * NK pairs in one reduction tree and one vector division for the 255 / max
 * (the same IEEE quotients as the reference), and the u8 rounding of two
 * pairs at a time with saturating packs (exact: the rounded products lie in
 * 0..255) and one vpermd. NK is a constant of each instantiation, so the
 * products, the tree and the quotients stay in registers (with a run-time
 * count gcc kept all three in stack arrays: a store-to-load chain per tree
 * level, a third of kivi:bits=2's step in perf on a Zen 4). */
static inline __attribute__((always_inline)) void weights_pairs(const __m512 *p0, const __m512 *p1,
                                                                const __m512 (*sv)[2], const __m512 (*nv)[2],
                                                                int k0, int ng, pv_state *st, __m512 *mt,
                                                                const int NK) {
    const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 w[16][2], wm[16];
    int h = k0 / ng, g = k0 % ng; /* pair k0 + k is (h, g); stepped, not divided */
    #pragma GCC unroll 16
    for (int k = 0; k < NK; k++) {
        mt[k0 + k] = _mm512_fmadd_ps(p0[h], nv[g][0], _mm512_fmadd_ps(p1[h], nv[g][1], mt[k0 + k]));
        w[k][0] = _mm512_mul_ps(p0[h], sv[g][0]);
        w[k][1] = _mm512_mul_ps(p1[h], sv[g][1]);
        wm[k] = _mm512_max_ps(w[k][0], w[k][1]);
        if (++g == ng) g = 0, h++;
    }
    __m512 wmax = max16(wm, NK); /* lanes of no pair: 0 */
    /* usable maxima: > 0 and finite (NaN compares false) */
    __mmask16 ok = _mm512_cmp_ps_mask(wmax, _mm512_setzero_ps(), _CMP_GT_OQ) &
                   _mm512_cmp_ps_mask(wmax, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
    __m512 inv = _mm512_maskz_div_ps(ok, _mm512_set1_ps(255.0f), wmax);
    float beta[16];
    _mm512_storeu_ps(beta, _mm512_maskz_mul_ps(ok, wmax, _mm512_set1_ps(1.0f / 255.0f)));
    #pragma GCC unroll 8
    for (int k = 0; k < NK; k += 2) { /* 0 for an unusable block: zero weights */
        __m512 i0 = _mm512_permutexvar_ps(_mm512_set1_epi32(max16_lane(k)), inv);
        __m512i a = _mm512_packs_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(w[k][0], i0)),
                                       _mm512_cvtps_epi32(_mm512_mul_ps(w[k][1], i0)));
        __m512i b = _mm512_setzero_si512();
        if (k + 1 < NK) {
            __m512 i1 = _mm512_permutexvar_ps(_mm512_set1_epi32(max16_lane(k + 1)), inv);
            b = _mm512_packs_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(w[k + 1][0], i1)),
                                   _mm512_cvtps_epi32(_mm512_mul_ps(w[k + 1][1], i1)));
        }
        /* dword 4L + j: tokens 4L.. of vector j (pair k's two, then pair k + 1's) */
        _mm512_storeu_si512(st->wq[k0 + k], _mm512_permutexvar_epi32(tr, _mm512_packus_epi16(a, b)));
        st->beta[k0 + k] = beta[max16_lane(k)];
        st->beta[k0 + k + 1] = k + 1 < NK ? beta[max16_lane(k + 1)] : 0.0f;
    }
}

/* u8 weights of one 32-token block for heads [0, nh) and every channel group:
 * the f16 parameters of the block converted once per group, each head's
 * probabilities loaded once, then the pairs 16 at a time (weights_pairs). */
static void pv_weights(const kvc_iq_vblob *v, const float *p, int ldp, int nh, int blk, int j0,
                       int j1, int ng, pv_state *st, __m512 *mt) {
    __mmask16 m0 = kvc_lanes16_avx512(blk, j0, j1), m1 = kvc_lanes16_avx512(blk + 16, j0, j1);
    st->ng = ng;
    __m512 sv[MAX_G][2], nv[MAX_G][2], p0[PV_NH], p1[PV_NH];
    for (int g = 0; g < ng; g++) {
        const kvc_f16 *sc = v->scales + (size_t)g * v->npad + blk, *mn = v->mins + (size_t)g * v->npad + blk;
        if (blk + PF_PARAM < v->npad) { /* the parameter planes are streams of their own */
            _mm_prefetch((const char *)(sc + PF_PARAM), _MM_HINT_T0);
            _mm_prefetch((const char *)(mn + PF_PARAM), _MM_HINT_T0);
        }
        sv[g][0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sc));
        sv[g][1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + 16)));
        nv[g][0] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)mn));
        nv[g][1] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(mn + 16)));
    }
    for (int h = 0; h < nh; h++) {
        const float *ph = p + (size_t)h * ldp + blk - j0; /* lane l: token blk + l */
        p0[h] = _mm512_maskz_loadu_ps(m0, ph), p1[h] = _mm512_maskz_loadu_ps(m1, ph + 16);
    }
    const int npair = nh * ng;
    for (int k0 = 0; k0 < npair; k0 += 16) {
#define PAIRS(NK) weights_pairs(p0, p1, (const __m512(*)[2])sv, (const __m512(*)[2])nv, k0, ng, st, mt, NK)
        switch (npair - k0 < 16 ? npair - k0 : 16) {
        case 1: PAIRS(1); break;
        case 2: PAIRS(2); break;
        case 3: PAIRS(3); break;
        case 4: PAIRS(4); break;
        case 5: PAIRS(5); break;
        case 6: PAIRS(6); break;
        case 7: PAIRS(7); break;
        case 8: PAIRS(8); break;
        case 9: PAIRS(9); break;
        case 10: PAIRS(10); break;
        case 11: PAIRS(11); break;
        case 12: PAIRS(12); break;
        case 13: PAIRS(13); break;
        case 14: PAIRS(14); break;
        case 15: PAIRS(15); break;
        default: PAIRS(16); break;
        }
#undef PAIRS
    }
}

static inline __attribute__((always_inline)) void pv_block(const kvc_iq_vblob *v, const pv_state *st,
                                                           int blk, float *o, int ldo, const int BITS,
                                                           const int NH) {
    const int ng = st->ng;
    /* a block's BITS rows of words; 3 bits: two 2-bit rows, then the 1-bit
     * row, its codes weighted 4 (iquant.h) */
    const uint32_t *codes = v->codes + (size_t)(blk / KVC_IQ_VBLOCK) * BITS * v->dim;
    /* group by group (a group is a multiple of 16 channels): no division
     * per 16 channels (objdump showed one per step of this loop) */
    for (int c = 0, g = 0; c < v->dim; g++) {
        const int ce = v->dim - c > v->group ? c + v->group : v->dim;
        for (; c < ce; c += 16) {
            __m512i acc[PV_NH];
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) acc[h] = _mm512_setzero_si512();
            #pragma GCC unroll 4
            for (int wb = 0; wb < BITS; wb++) {
                const int PB = kvc_iq_vrow_bits(BITS, wb), nk = 8 / PB, wbase = kvc_iq_vrow_first_word(BITS, wb);
                const uint32_t *src = codes + (size_t)wb * v->dim + c;
                _mm_prefetch((const char *)src + PF, _MM_HINT_T0);
                __m512i x = _mm512_load_si512(src);
                #pragma GCC unroll 8
                for (int k = 0; k < nk; k++) {
                    __m512i cd = code_field(x, k, PB, BITS == 3 && PB == 1 ? HI_SHIFT : 0);
                    #pragma GCC unroll 8
                    for (int h = 0; h < NH; h++)
                        acc[h] = _mm512_dpbusd_epi32(acc[h], _mm512_set1_epi32((int)st->wq[h * ng + g][wbase + k]), cd);
                }
            }
            #pragma GCC unroll 8
            for (int h = 0; h < NH; h++) {
                float *oh = o + (size_t)h * ldo + c;
                _mm512_storeu_ps(oh, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h]), _mm512_set1_ps(st->beta[h * ng + g]),
                                                     _mm512_loadu_ps(oh)));
            }
        }
    }
}

static void pv_heads(const kvc_iq_vblob *v, const pv_state *st, int blk, float *o, int ldo, int nh) {
#define PV_NH_CASES(BITS)                                                  \
    switch (nh) {                                                          \
    case 1: pv_block(v, st, blk, o, ldo, BITS, 1); break;                  \
    case 2: pv_block(v, st, blk, o, ldo, BITS, 2); break;                  \
    case 3: pv_block(v, st, blk, o, ldo, BITS, 3); break;                  \
    case 4: pv_block(v, st, blk, o, ldo, BITS, 4); break;                  \
    default: pv_block(v, st, blk, o, ldo, BITS, 8); break;                 \
    }
    switch (v->bits) {
    case 1: PV_NH_CASES(1); break;
    case 2: PV_NH_CASES(2); break;
    case 3: PV_NH_CASES(3); break;
    default: PV_NH_CASES(4); break;
    }
#undef PV_NH_CASES
}

static void pv_avx512(const kvc_iq_vblob *v, const float *p, int ldp, int G, int j0, int j1, float *o,
                      int ldo) {
    int ng = (v->dim + v->group - 1) / v->group;
    pv_state st[2];
    __m512 mt[MAX_PAIR]; /* running sum_t p_t m_tg of each pair, per lane */
    for (int h0 = 0; h0 < G; h0 += PV_NH) {
        int nh = G - h0 < PV_NH ? G - h0 : PV_NH;
        /* heads 5..7 run as a group of 8 with zero weights for the missing ones */
        int nrun = nh <= 4 ? nh : PV_NH;
        /* only the pairs of missing heads need zero weights (the others are
         * written per block): no memset of the whole state per call */
        for (int i = 0; i < 2; i++) {
            memset(st[i].wq[nh * ng], 0, sizeof st[i].wq[0] * (size_t)((nrun - nh) * ng + 1));
            memset(st[i].beta + nh * ng, 0, sizeof st[i].beta[0] * (size_t)((nrun - nh) * ng + 1));
        }
        for (int k = 0; k < nh * ng; k++) mt[k] = _mm512_setzero_ps();
        float obuf[PV_NH * KVC_IQ_MAX_DIM];
        float *ob = o + (size_t)h0 * ldo;
        int ldb = ldo;
        if (nrun > nh) { /* missing heads write to scratch */
            for (int h = 0; h < nh; h++) memcpy(obuf + h * v->dim, ob + (size_t)h * ldo, (size_t)v->dim * 4);
            memset(obuf + nh * v->dim, 0, (size_t)(nrun - nh) * v->dim * 4);
            ob = obuf;
            ldb = v->dim;
        }
        /* software-pipelined: the next block's weights (a chain of products,
         * maxima, a division and the rounding) are prepared before the
         * current block's dot products are issued, so the two overlap */
        const float *pg = p + (size_t)h0 * ldp;
        int b0 = j0 - j0 % KVC_IQ_VBLOCK;
        pv_weights(v, pg, ldp, nh, b0, j0, j1, ng, &st[0], mt);
        for (int blk = b0, i = 0; blk < j1; blk += KVC_IQ_VBLOCK, i ^= 1) {
            if (blk + KVC_IQ_VBLOCK < j1) pv_weights(v, pg, ldp, nh, blk + KVC_IQ_VBLOCK, j0, j1, ng, &st[i ^ 1], mt);
            pv_heads(v, &st[i], blk, ob, ldb, nrun);
        }
        for (int h = 0; h < nh; h++) {
            float *oh = ob + (size_t)h * ldb;
            for (int g = 0; g < ng; g++) {
                __m512 m = _mm512_set1_ps(_mm512_reduce_add_ps(mt[h * ng + g]));
                int c1 = (g + 1) * v->group < v->dim ? (g + 1) * v->group : v->dim;
                for (int c = g * v->group; c < c1; c += 16)
                    _mm512_storeu_ps(oh + c, _mm512_add_ps(_mm512_loadu_ps(oh + c), m));
            }
        }
        if (ob == obuf)
            for (int h = 0; h < nh; h++) memcpy(o + (size_t)(h0 + h) * ldo, obuf + h * v->dim, (size_t)v->dim * 4);
    }
}

void kvc_iq_register_avx512(kvc_iq_kernels *k) {
    k->qk = qk_avx512;
    k->pv = pv_avx512;
}
