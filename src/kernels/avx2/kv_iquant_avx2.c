/* AVX2 kernels of the integer quant codecs (iquant.h): the AVX-512 kernels'
 * structure (kv_iquant_avx512.c) on 8 lanes, with vpmaddubsw (u8 x s8 pairs
 * into i16) summed over a word's 8/bits shift-and-mask steps in i16 and one
 * vpmaddwd per word instead of vpdpbusd (for the key's two query halves, the
 * high one's against 256s: both land in one i32 accumulator; 1- and 2-bit
 * keys have the one-byte query and take only the low half). 3-bit codes are
 * a 2-bit plane and a 1-bit plane (iquant.h) whose sums are weighted 1 and 4
 * by vpmaddwd. The i16 sums stay far from saturation: at most 8/bits x 2 x
 * 255 x (2^bits - 1) <= 15300 for the u8 weights, 8/bits x 2 x 127 x
 * (2^bits - 1) <= 7620 for the query halves (per plane of a 3-bit code). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/codec/iquant.h"

enum { QMAX = KVC_IQ_MAX_DIM + 64, PF = 2048, PF_PARAM = 512 /* tokens */ };

/* Query heads per pass of the key kernel: up to 6 share one extraction of
 * each code word (6 accumulators, up to 4 code vectors and the sums of the
 * head in progress fit the 16 YMM registers); more heads take balanced
 * passes (G 7: 4 + 3, G 8: 4 + 4). */
enum { QK_MAXH = 6 };

static inline int lanes8(int first, int lo, int hi, int *a, int *b) {
    *a = lo - first < 0 ? 0 : lo - first;
    *b = hi - first > 8 ? 8 : hi - first;
    return *b > *a;
}

static inline float hmax(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* i32 lanes: saturating narrowing of 8 i32 to 8 unsigned bytes. */
static inline uint64_t pack_u8(__m256i v) {
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    w = _mm_packus_epi16(w, w);
    return (uint64_t)_mm_cvtsi128_si64(w);
}

/* ---- qk ------------------------------------------------------------------------ */

/* The query of one head for one tile in two int8 halves (bytes beyond dim
 * are zeroed once by the caller): Q = round(xq * scn) with xq = q * QMAX /
 * qmax (per call) and scn = s / smax (per tile), the values of
 * kvc_iq_query_ref (|Q| <= QMAX without a clamp); ok = 0 gives a zero query.
 * narrow: QMAX = KVC_IQ_QMAX_NARROW, so hi = 0 and lo = Q with no split
 * (hi is then not written: the narrow key loop does not read it).
 * Returns the constant term sum_c q_c m_c. */
static float query_tile(const float *q, const float *xq, const float *scn, const kvc_f16 *mins, int dim, int ok,
                        int narrow, int8_t *hi, int8_t *lo) {
    __m256 ct = _mm256_setzero_ps();
    const __m256i half = _mm256_set1_epi16(128), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int c = 0; c < dim; c += 16) { /* dim is a multiple of 16 (iquant.h) */
        ct = _mm256_fmadd_ps(_mm256_loadu_ps(q + c), kvc_load_f16x8(mins + c), ct);
        ct = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8), kvc_load_f16x8(mins + c + 8), ct);
        __m256i b = _mm256_setzero_si256();
        if (ok) {
            __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xq + c), _mm256_loadu_ps(scn + c)));
            __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xq + c + 8), _mm256_loadu_ps(scn + c + 8)));
            /* |Q| <= 32512: the narrowing to i16 is exact, and Q + 128 does
             * not overflow, so the split runs on 16 channels per operation.
             * |h| <= 127, l in [-128, 127]: the byte packs do not saturate.
             * Per 128-bit lane the dwords are then h(0-3) h(8-11) l(0-3)
             * l(8-11), and h(4-7) h(12-15) l(4-7) l(12-15): `order` puts the
             * 16 hi bytes, then the 16 lo bytes, in channel order. */
            __m256i w = _mm256_packs_epi32(v0, v1);
            __m256i h = narrow ? _mm256_setzero_si256() : _mm256_srai_epi16(_mm256_add_epi16(w, half), 8);
            __m256i l = narrow ? w : _mm256_sub_epi16(w, _mm256_slli_epi16(h, 8));
            b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(h, l), order);
        }
        if (!narrow) _mm_storeu_si128((__m128i *)(hi + c), _mm256_castsi256_si128(b)); /* else unread */
        _mm_storeu_si128((__m128i *)(lo + c), _mm256_extracti128_si256(b, 1));
    }
    return kvc_hsum256_ps(ct);
}

/* One code word x (8 tokens' word of WB-bit fields) into the NH heads'
 * accumulators; qb indexes the query's 4-byte groups of the word's first
 * channels; weight: 1, or 4 for the high plane of 3-bit codes (the wide
 * query's high half weighs 256 times that). */
static inline __attribute__((always_inline)) void qk_word(__m256i x, const int32_t (*qh)[QMAX / 4],
                                                          const int32_t (*ql)[QMAX / 4], int qb,
                                                          __m256i *acc, const int WB, const int NH,
                                                          const int wide, const int weight) {
    const int nk = 8 / WB, keep = nk <= 4;
    const __m256i mask = _mm256_set1_epi8((char)((1 << WB) - 1)), wl = _mm256_set1_epi16((short)weight),
                  wh = _mm256_set1_epi16((short)(256 * weight));
    __m256i cc[4];
    #pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        if (keep && k < nk) cc[k] = _mm256_and_si256(_mm256_srli_epi32(x, WB * k), mask);
    #pragma GCC unroll 8
    for (int h = 0; h < NH; h++) {
        __m256i sh = _mm256_setzero_si256(), sl = _mm256_setzero_si256();
        #pragma GCC unroll 8
        for (int k = 0; k < nk; k++) {
            __m256i c = keep ? cc[k] : _mm256_and_si256(_mm256_srli_epi32(x, WB * k), mask);
            if (wide) sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(c, _mm256_set1_epi32(qh[h][qb + k])));
            sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(c, _mm256_set1_epi32(ql[h][qb + k])));
        }
        __m256i d = _mm256_madd_epi16(sl, wl);
        if (wide) d = _mm256_add_epi32(d, _mm256_madd_epi16(sh, wh));
        acc[h] = _mm256_add_epi32(acc[h], d);
    }
}

/* Scores of NH heads (compile-time, as BITS) for tokens j0..j1 of a tile.
 * Registers: one i32 accumulator per head (the hi half's i16 pair sums
 * weighted 256 by vpmaddwd, the lo half's 1), the word's nk code vectors
 * when they fit (bits 2 and 4; 1-bit codes are re-extracted per head), and
 * the two i16 sums of the head in progress: at most 14 of the 16 YMM
 * registers for 6 heads, where keeping hi and lo apart for all heads at once
 * spilled.
 * 1- and 2-bit tiles have the narrow query (kvc_iq_query_max): hi is zero,
 * so only the lo half's dot products are taken, half the vpmaddubsw. */
static inline __attribute__((always_inline)) void qk_block(const kvc_iq_ktile *t, const int32_t (*qh)[QMAX / 4], const int32_t (*ql)[QMAX / 4],
                                                           const float *alpha, const float *cterm,
                                                           int j0, int j1, float *s, int lds,
                                                           const int BITS, const int NH) {
    /* 3 bits: the 2-bit plane's words, then the 1-bit plane's (iquant.h) */
    const int LB = kvc_iq_lo_bits(BITS), kw = kvc_iq_kwords(BITS, t->dim), kwl = kvc_iq_plane_kwords(LB, t->dim),
              wide = kvc_iq_query_max(BITS) == KVC_IQ_QMAX_WIDE; /* a constant: BITS is */
    for (int first = j0 - j0 % 8; first < j1; first += 8) {
        int b = first / KVC_IQ_KBLOCK, half = (first % KVC_IQ_KBLOCK) / 8;
        __m256i acc[QK_MAXH];
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) acc[h] = _mm256_setzero_si256();
        const uint32_t *cw = t->codes + (size_t)b * kw * KVC_IQ_KBLOCK + half * 8;
        for (int w = 0; w < kw; w++) {
            _mm_prefetch((const char *)(cw + w * 16) + PF, _MM_HINT_T0);
            __m256i x = _mm256_loadu_si256((const __m256i *)(cw + w * 16));
            if (BITS != 3 || w < kwl) qk_word(x, qh, ql, w * (8 / LB), acc, LB, NH, wide, 1);
            else qk_word(x, qh, ql, (w - kwl) * 8, acc, 1, NH, wide, 4);
        }
        int a, e;
        lanes8(first, j0, j1, &a, &e);
        /* a masked store is microcoded on AMD Zen (perf put a fifth of this
         * kernel's samples behind it): only the ragged ends take it */
        const int whole = a == 0 && e == 8;
        const __m256i m = whole ? _mm256_setzero_si256() : kvc_lanes8_avx2(a, e);
        #pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            __m256 f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h]), _mm256_set1_ps(alpha[h]),
                                       _mm256_set1_ps(cterm[h]));
            if (whole) _mm256_storeu_ps(s + (size_t)h * lds + first - j0, f);
            else _mm256_maskstore_ps(s + (size_t)h * lds + first - j0, m, f);
        }
    }
}

static void qk_heads(const kvc_iq_ktile *t, const int32_t (*qh)[QMAX / 4], const int32_t (*ql)[QMAX / 4], const float *alpha,
                     const float *cterm, int j0, int j1, float *s, int lds, int nh) {
#define QK_NH(BITS)                                                                   \
    switch (nh) {                                                                     \
    case 1: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 1); break;            \
    case 2: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 2); break;            \
    case 3: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 3); break;            \
    case 4: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 4); break;            \
    case 5: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 5); break;            \
    default: qk_block(t, qh, ql, alpha, cterm, j0, j1, s, lds, BITS, 6); break;           \
    }
    switch (t->bits) {
    case 1: QK_NH(1); break;
    case 2: QK_NH(2); break;
    case 3: QK_NH(3); break;
    default: QK_NH(4); break;
    }
#undef QK_NH
}

static void qk_avx2(const kvc_iq_ktile *tiles, int nt, const float *q, int ldq, int G, int j0, int j1,
                    float *s, int lds) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const int dim = tiles[0].dim, group = tiles[0].n;
    int32_t qh[QK_MAXH][QMAX / 4], ql[QK_MAXH][QMAX / 4];
    float xq[QK_MAXH][KVC_IQ_MAX_DIM], scn[KVC_IQ_MAX_DIM];
    const int bits = tiles[0].bits, narrow = kvc_iq_query_max(bits) == KVC_IQ_QMAX_NARROW;
    const float qlim = (float)kvc_iq_query_max(bits);
    const int wbits = bits == 3 ? 1 : bits; /* the plane with the widest words */
    int width = kvc_iq_plane_kwords(wbits, dim) * kvc_iq_cpw(wbits); /* query bytes the words read */
    for (int h = 0; h < QK_MAXH && width > dim; h++) { /* beyond dim (1-bit words of 32 channels): zero */
        memset((int8_t *)qh[h] + dim, 0, (size_t)(width - dim));
        memset((int8_t *)ql[h] + dim, 0, (size_t)(width - dim));
    }
    const int passes = (G + QK_MAXH - 1) / QK_MAXH, step = (G + passes - 1) / passes;
    for (int h0 = 0; h0 < G; h0 += step) {
        int nh = G - h0 < step ? G - h0 : step, qok[QK_MAXH];
        float qa[QK_MAXH];
        for (int h = 0; h < nh; h++) { /* per call: max |q|, the query scaled to QMAX */
            const float *qv = q + (size_t)(h0 + h) * ldq;
            __m256 m = _mm256_setzero_ps();
            for (int c = 0; c < dim; c += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(qv + c)));
            float qmax = hmax(m);
            qok[h] = qmax > 0.0f && isfinite(qmax);
            __m256 qn = _mm256_set1_ps(qok[h] ? qlim / qmax : 0.0f);
            for (int c = 0; c < dim; c += 8) _mm256_storeu_ps(xq[h] + c, _mm256_mul_ps(_mm256_loadu_ps(qv + c), qn));
            qa[h] = qok[h] ? qmax * (1.0f / qlim) : 0.0f;
        }
        for (int i = 0; i < nt; i++) {
            const kvc_iq_ktile *t = &tiles[i];
            int tb = i * group, a = j0 > tb ? j0 : tb, e = j1 < tb + t->n ? j1 : tb + t->n;
            if (a >= e) continue;
            float smax = t->smax; /* stored per tile with its reciprocal */
            int sok = smax > 0.0f && isfinite(smax);
            __m256 inv_s = _mm256_set1_ps(t->inv_smax);
            for (int c = 0; c < dim; c += 8) _mm256_storeu_ps(scn + c, _mm256_mul_ps(kvc_load_f16x8(t->scales + c), inv_s));
            float alpha[QK_MAXH], cterm[QK_MAXH];
            for (int h = 0; h < nh; h++) {
                int ok = sok && qok[h];
                alpha[h] = ok ? qa[h] * smax : 0.0f;
                cterm[h] = query_tile(q + (size_t)(h0 + h) * ldq, xq[h], scn, t->mins, dim, ok, narrow, (int8_t *)qh[h],
                                      (int8_t *)ql[h]);
            }
            qk_heads(t, (const int32_t(*)[QMAX / 4])qh, (const int32_t(*)[QMAX / 4])ql, alpha, cterm,
                     a - tb, e - tb, s + (size_t)h0 * lds + (a - j0), lds, nh);
        }
    }
}

/* ---- pv ------------------------------------------------------------------------ */

enum { PV_NH = 4, MAX_G = KVC_IQ_MAX_DIM / 16 };

typedef struct pv_state {
    uint32_t wq[PV_NH][MAX_G][KVC_IQ_VBLOCK / 4];
    float beta[PV_NH][MAX_G];
    float mt[PV_NH][MAX_G][8];
} pv_state;

static void pv_weights(const kvc_iq_vblob *v, const float *p, int ldp, int nh, int blk, int j0,
                       int j1, int ng, pv_state *st) {
    __m256i m[4];
    const int whole = blk >= j0 && blk + 32 <= j1; /* plain loads: -3% in the CPU cache */
    for (int i = 0; i < 4; i++) {
        int a, e;
        m[i] = lanes8(blk + 8 * i, j0, j1, &a, &e) ? kvc_lanes8_avx2(a, e) : _mm256_setzero_si256();
    }
    for (int g = 0; g < ng; g++) {
        const kvc_f16 *sc = v->scales + (size_t)g * v->npad + blk, *mn = v->mins + (size_t)g * v->npad + blk;
        if (blk + PF_PARAM < v->npad) { /* the parameter planes are streams of their own */
            _mm_prefetch((const char *)(sc + PF_PARAM), _MM_HINT_T0);
            _mm_prefetch((const char *)(mn + PF_PARAM), _MM_HINT_T0);
        }
        for (int h = 0; h < nh; h++) {
            const float *ph = p + (size_t)h * ldp + blk - j0;
            __m256 w[4], wm = _mm256_setzero_ps(), mt = _mm256_loadu_ps(st->mt[h][g]);
            for (int i = 0; i < 4; i++) {
                __m256 pi = whole ? _mm256_loadu_ps(ph + 8 * i) : _mm256_maskload_ps(ph + 8 * i, m[i]);
                mt = _mm256_fmadd_ps(pi, kvc_load_f16x8(mn + 8 * i), mt);
                w[i] = _mm256_mul_ps(pi, kvc_load_f16x8(sc + 8 * i));
                wm = _mm256_max_ps(wm, w[i]);
            }
            _mm256_storeu_ps(st->mt[h][g], mt);
            float wmax = hmax(wm);
            if (!(wmax > 0.0f) || !isfinite(wmax)) {
                memset(st->wq[h][g], 0, sizeof st->wq[h][g]);
                st->beta[h][g] = 0.0f;
                continue;
            }
            __m256 inv = _mm256_set1_ps(255.0f / wmax);
            for (int i = 0; i < 4; i++) {
                uint64_t b = pack_u8(_mm256_cvtps_epi32(_mm256_mul_ps(w[i], inv)));
                memcpy((uint8_t *)st->wq[h][g] + 8 * i, &b, 8);
            }
            st->beta[h][g] = wmax * (1.0f / 255.0f);
        }
    }
}

static inline __attribute__((always_inline)) void pv_block(const kvc_iq_vblob *v, const pv_state *st,
                                                           int blk, float *o, int ldo, const int BITS,
                                                           const int NH) {
    /* a block's BITS rows of words; 3 bits: two 2-bit rows, then the 1-bit
     * row weighted 4 (iquant.h) */
    const __m256i ones = _mm256_set1_epi16(1), fours = _mm256_set1_epi16(4);
    const uint32_t *codes = v->codes + (size_t)(blk / KVC_IQ_VBLOCK) * BITS * v->dim;
    /* group by group (a group is a multiple of 16 channels): no division per
     * 8 channels (objdump showed one per step of this loop) */
    for (int c = 0, g = 0; c < v->dim; g++) {
        const int ce = v->dim - c > v->group ? c + v->group : v->dim;
        for (; c < ce; c += 8) {
            /* the weights are loop-invariant here, and gcc hoisted all
             * BITS x nk x NH of their broadcasts into registers it then
             * spilled; hidden behind this barrier, each use broadcasts from
             * L1 */
            const pv_state *sw = st;
            __asm__("" : "+r"(sw));
            __m256i acc[PV_NH];
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) acc[h] = _mm256_setzero_si256();
            #pragma GCC unroll 4
            for (int wb = 0; wb < BITS; wb++) {
                const int WB = kvc_iq_vrow_bits(BITS, wb), nk = 8 / WB, wbase = kvc_iq_vrow_first_word(BITS, wb);
                const __m256i mask = _mm256_set1_epi8((char)((1 << WB) - 1));
                const uint32_t *src = codes + (size_t)wb * v->dim + c;
                _mm_prefetch((const char *)src + PF, _MM_HINT_T0);
                __m256i x = _mm256_loadu_si256((const __m256i *)src);
                __m256i s16[PV_NH];
                #pragma GCC unroll 4
                for (int h = 0; h < NH; h++) s16[h] = _mm256_setzero_si256();
                #pragma GCC unroll 8
                for (int k = 0; k < nk; k++) {
                    __m256i cd = _mm256_and_si256(_mm256_srli_epi32(x, WB * k), mask);
                    #pragma GCC unroll 4
                    for (int h = 0; h < NH; h++) {
                        __m256i wk = _mm256_set1_epi32((int)sw->wq[h][g][wbase + k]);
                        s16[h] = _mm256_add_epi16(s16[h], _mm256_maddubs_epi16(wk, cd));
                    }
                }
                #pragma GCC unroll 4
                for (int h = 0; h < NH; h++)
                    acc[h] = _mm256_add_epi32(acc[h], _mm256_madd_epi16(s16[h], BITS == 3 && wb == 2 ? fours : ones));
            }
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                float *oh = o + (size_t)h * ldo + c;
                __m256 w = _mm256_cvtepi32_ps(acc[h]);
                _mm256_storeu_ps(oh, _mm256_fmadd_ps(w, _mm256_set1_ps(st->beta[h][g]),
                                                     _mm256_loadu_ps(oh)));
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
    default: pv_block(v, st, blk, o, ldo, BITS, 4); break;                 \
    }
    switch (v->bits) {
    case 1: PV_NH_CASES(1); break;
    case 2: PV_NH_CASES(2); break;
    case 3: PV_NH_CASES(3); break;
    default: PV_NH_CASES(4); break;
    }
#undef PV_NH_CASES
}

static void pv_avx2(const kvc_iq_vblob *v, const float *p, int ldp, int G, int j0, int j1, float *o,
                    int ldo) {
    int ng = (v->dim + v->group - 1) / v->group;
    pv_state st;
    for (int h0 = 0; h0 < G; h0 += PV_NH) {
        int nh = G - h0 < PV_NH ? G - h0 : PV_NH;
        for (int h = 0; h < nh; h++) /* the groups in use only: all of st.mt is 2 KiB per call */
            memset(st.mt[h], 0, sizeof st.mt[h][0] * (size_t)ng);
        float *ob = o + (size_t)h0 * ldo;
        for (int blk = j0 - j0 % KVC_IQ_VBLOCK; blk < j1; blk += KVC_IQ_VBLOCK) {
            pv_weights(v, p + (size_t)h0 * ldp, ldp, nh, blk, j0, j1, ng, &st);
            pv_heads(v, &st, blk, ob, ldo, nh);
        }
        for (int h = 0; h < nh; h++)
            for (int g = 0; g < ng; g++) {
                __m256 m = _mm256_set1_ps(kvc_hsum256_ps(_mm256_loadu_ps(st.mt[h][g])));
                int c1 = (g + 1) * v->group < v->dim ? (g + 1) * v->group : v->dim;
                for (int c = g * v->group; c < c1; c += 8)
                    _mm256_storeu_ps(ob + (size_t)h * ldo + c,
                                     _mm256_add_ps(_mm256_loadu_ps(ob + (size_t)h * ldo + c), m));
            }
    }
}

void kvc_iq_register_avx2(kvc_iq_kernels *k) {
    k->qk = qk_avx2;
    k->pv = pv_avx2;
}
