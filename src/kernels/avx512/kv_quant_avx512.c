/* AVX-512 fused dequantise-and-multiply for the quant codec (quant.h,
 * kvc_quant_wsum): 32 values of a row per pass in two 16-lane slices, up to
 * four weight vectors at a time. A row's code words (at most 16) arrive with
 * one masked load; each slice then takes a lane permute to bring each lane its
 * word, a variable shift and a mask, then a convert: the same unpack for
 * every bit width, including 3-bit's 11 values per word. The weights times
 * the rows' scales, and the weights times the mins, are formed 16 rows at a
 * time with vector f16 conversions before the row loop. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>

#include "kv/codec/quant_pack.h"

typedef struct slice {
    __m512i idx, shift; /* word index in the row, bit offset */
    __mmask16 lanes;    /* lanes holding values (< n) */
} slice;

/* Word index and bit offset of value v of a row, per bit width, for v up to
 * KVC_QUANT_MAX_N + 15 (a slice's lanes past n read word 15, shift 0): filled
 * once, so a slice is two loads instead of 16 divisions per call (one call per
 * 32-token key tile made the divisions a fifth of the key kernel's time). */
enum { TAB = KVC_QUANT_MAX_N + 16 };
static int32_t tab_idx[5][TAB], tab_sh[5][TAB];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void fill_tables(void) {
    for (int bits = 1; bits <= 4; bits++) {
        int vpw = kvc_quant_vpw(bits);
        for (int v = 0; v < TAB; v++) {
            int idx = v / vpw, sh = (v % vpw) * bits;
            tab_idx[bits][v] = idx > 15 ? 15 : idx;
            tab_sh[bits][v] = idx > 15 ? 0 : sh;
        }
    }
}

static inline slice make_slice(int bits, int n, int j0) {
    slice s;
    s.idx = _mm512_loadu_si512(tab_idx[bits] + j0);
    s.shift = _mm512_loadu_si512(tab_sh[bits] + j0);
    int cnt = n > j0 ? n - j0 : 0;
    s.lanes = (__mmask16)(cnt >= 16 ? 0xffff : (1u << cnt) - 1);
    return s;
}

static inline __m512 unpack(__m512i w, const slice *s, __m512i mask) {
    __m512i c = _mm512_permutexvar_epi32(s->idx, w);
    c = _mm512_and_si512(_mm512_srlv_epi32(c, s->shift), mask);
    return _mm512_cvtepi32_ps(c);
}

enum { ROWS = 64 }; /* rows whose weights are prepared at once */
enum { PF_AHEAD = 2048 }; /* software prefetch distance in bytes (1-4 KiB measured alike) */

/* NH weight vectors (1..4) over all rows for values j0..j0+31. A row's words
 * (at most 16: n <= 128 values) come in with one masked load. The per-row
 * weights w*scale and the sum of w*min are computed 16 rows at a time first. */
static inline __attribute__((always_inline)) void block(const kvc_qtile *t, const float *w,
                                                        ptrdiff_t ldw, float *out, ptrdiff_t ldo,
                                                        int j0, const int NH) {
    int wpr = kvc_quant_words(t->bits, t->n);
    __mmask16 load = (__mmask16)((1u << wpr) - 1);
    __m512i mask = _mm512_set1_epi32((1 << t->bits) - 1);
    slice s0 = make_slice(t->bits, t->n, j0), s1 = make_slice(t->bits, t->n, j0 + 16);
    int two = s1.lanes != 0;
    __m512 a0[4], a1[4], msv[4];
    float ws[4][ROWS];
    /* unrolled over NH (a constant): the accumulators must live in registers */
    #pragma GCC unroll 4
    for (int h = 0; h < NH; h++) a0[h] = a1[h] = msv[h] = _mm512_setzero_ps();
    for (int r0 = 0; r0 < t->rows; r0 += ROWS) {
        int nr = t->rows - r0 < ROWS ? t->rows - r0 : ROWS;
        for (int i = 0; i < nr; i += 16) {
            int cnt = nr - i < 16 ? nr - i : 16;
            __mmask16 m = (__mmask16)(cnt == 16 ? 0xffff : (1u << cnt) - 1);
            _mm_prefetch((const char *)(t->scales + r0 + i) + PF_AHEAD, _MM_HINT_T0);
            _mm_prefetch((const char *)(t->mins + r0 + i) + PF_AHEAD, _MM_HINT_T0);
            __m512 sc = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, t->scales + r0 + i));
            __m512 mn = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, t->mins + r0 + i));
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                __m512 wv = _mm512_maskz_loadu_ps(m, w + h * ldw + r0 + i);
                _mm512_storeu_ps(ws[h] + i, _mm512_mul_ps(wv, sc));
                msv[h] = _mm512_fmadd_ps(wv, mn, msv[h]);
            }
        }
        const uint32_t *row = t->words + (size_t)r0 * wpr;
        for (int r = 0; r < nr; r++, row += wpr) {
            /* the rows (and the next tile's) stream from memory in short runs that
             * the hardware prefetcher does not pick up in time */
            _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0);
            __m512i wd = _mm512_maskz_loadu_epi32(load, row);
            __m512 c0 = unpack(wd, &s0, mask);
            __m512 c1 = two ? unpack(wd, &s1, mask) : _mm512_setzero_ps();
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                __m512 wr = _mm512_set1_ps(ws[h][r]);
                a0[h] = _mm512_fmadd_ps(wr, c0, a0[h]);
                a1[h] = _mm512_fmadd_ps(wr, c1, a1[h]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int h = 0; h < NH; h++) {
        float *o = out + h * ldo + j0;
        __m512 m = _mm512_set1_ps(_mm512_reduce_add_ps(msv[h]));
        __m512 o0 = _mm512_maskz_loadu_ps(s0.lanes, o);
        _mm512_mask_storeu_ps(o, s0.lanes, _mm512_add_ps(o0, _mm512_add_ps(a0[h], m)));
        if (two) {
            __m512 o1 = _mm512_maskz_loadu_ps(s1.lanes, o + 16);
            _mm512_mask_storeu_ps(o + 16, s1.lanes, _mm512_add_ps(o1, _mm512_add_ps(a1[h], m)));
        }
    }
}

static void quant_wsum_avx512(const kvc_qtile *t, const float *w, ptrdiff_t ldw, int nw, float *out,
                           ptrdiff_t ldo) {
    pthread_once(&tab_once, fill_tables);
    for (int j0 = 0; j0 < t->n; j0 += 32) {
        int h = 0;
        for (; h + 4 <= nw; h += 4) block(t, w + h * ldw, ldw, out + h * ldo, ldo, j0, 4);
        switch (nw - h) {
        case 3: block(t, w + h * ldw, ldw, out + h * ldo, ldo, j0, 3); break;
        case 2: block(t, w + h * ldw, ldw, out + h * ldo, ldo, j0, 2); break;
        case 1: block(t, w + h * ldw, ldw, out + h * ldo, ldo, j0, 1); break;
        default: break;
        }
    }
}

/* Registers this file's kernel (kvc_codecs_init). */
void kvc_quant_register_avx512(kvc_quant_wsum_fn *f) { *f = quant_wsum_avx512; }
