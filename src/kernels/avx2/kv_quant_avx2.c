/* AVX2 fused dequantise-and-multiply for the quant codec (quant.h,
 * kvc_quant_wsum): 16 values of a row per pass in two 8-lane slices, up to
 * four weight vectors at a time. A slice's 8 codes come from at most two
 * consecutive words for every bit width (3-bit packs 11 per word): a masked
 * load of those words, a lane permute, a variable shift, a mask, a convert.
 * The weights times the rows' scales (and times the mins) are formed 8 rows
 * at a time before the row loop. */
#include <immintrin.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/codec/quant_pack.h"

typedef struct slice {
    __m256i idx, shift, load; /* word index relative to base, bit offset, load mask */
    int lanes;                /* lanes holding values (< n), 0..8 */
    int base;
} slice;

static slice make_slice(int bits, int n, int j0) {
    slice s;
    int vpw = kvc_quant_vpw(bits);
    int32_t idx[8], sh[8], ld[8];
    s.base = j0 / vpw;
    int last = j0;
    for (int l = 0; l < 8; l++) {
        int v = j0 + l;
        if (v < n) last = v;
        idx[l] = v / vpw - s.base;
        sh[l] = (v % vpw) * bits;
        if (idx[l] > 7) idx[l] = 7, sh[l] = 0;
    }
    int words = last / vpw - s.base + 1;
    for (int l = 0; l < 8; l++) ld[l] = l < words ? -1 : 0;
    s.idx = _mm256_loadu_si256((const __m256i *)idx);
    s.shift = _mm256_loadu_si256((const __m256i *)sh);
    s.load = _mm256_loadu_si256((const __m256i *)ld);
    int cnt = n > j0 ? n - j0 : 0;
    s.lanes = cnt >= 8 ? 8 : cnt;
    return s;
}

static inline __m256 unpack(const uint32_t *row, const slice *s, __m256i mask) {
    __m256i w = _mm256_maskload_epi32((const int *)(row + s->base), s->load);
    __m256i c = _mm256_permutevar8x32_epi32(w, s->idx);
    c = _mm256_and_si256(_mm256_srlv_epi32(c, s->shift), mask);
    return _mm256_cvtepi32_ps(c);
}

static inline void add_out(float *o, __m256 v, int lanes) {
    if (lanes == 8) {
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), v));
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    for (int l = 0; l < lanes; l++) o[l] += tmp[l];
}

enum { ROWS = 64 }; /* rows whose weights are prepared at once */
enum { PF_AHEAD = 2048 }; /* software prefetch distance in bytes */

/* NH weight vectors (1..4) over all rows for values j0..j0+15. The per-row
 * weights w*scale and the sums of w*min are formed 8 rows at a time first. */
static inline __attribute__((always_inline)) void block(const kvc_qtile *t, const float *w,
                                                        ptrdiff_t ldw, float *out, ptrdiff_t ldo,
                                                        int j0, const int NH) {
    int wpr = kvc_quant_words(t->bits, t->n);
    __m256i mask = _mm256_set1_epi32((1 << t->bits) - 1);
    slice s0 = make_slice(t->bits, t->n, j0), s1 = make_slice(t->bits, t->n, j0 + 8);
    int two = s1.lanes != 0;
    __m256 a0[4], a1[4], msv[4];
    float ms[4] = {0, 0, 0, 0};
    float ws[4][ROWS];
    /* unrolled over NH (a constant): the accumulators must live in registers */
    #pragma GCC unroll 4
    for (int h = 0; h < NH; h++) a0[h] = a1[h] = msv[h] = _mm256_setzero_ps();
    for (int r0 = 0; r0 < t->rows; r0 += ROWS) {
        int nr = t->rows - r0 < ROWS ? t->rows - r0 : ROWS, i = 0;
        for (; i + 8 <= nr; i += 8) {
            __m256 sc = kvc_load_f16x8(t->scales + r0 + i);
            __m256 mn = kvc_load_f16x8(t->mins + r0 + i);
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                __m256 wv = _mm256_loadu_ps(w + h * ldw + r0 + i);
                _mm256_storeu_ps(ws[h] + i, _mm256_mul_ps(wv, sc));
                msv[h] = _mm256_fmadd_ps(wv, mn, msv[h]);
            }
        }
        for (; i < nr; i++) {
            float sc = _cvtsh_ss(t->scales[r0 + i]), mn = _cvtsh_ss(t->mins[r0 + i]);
            for (int h = 0; h < NH; h++) {
                float wr = w[h * ldw + r0 + i];
                ws[h][i] = wr * sc;
                ms[h] += wr * mn;
            }
        }
        const uint32_t *row = t->words + (size_t)r0 * wpr;
        for (int r = 0; r < nr; r++, row += wpr) {
            _mm_prefetch((const char *)row + PF_AHEAD, _MM_HINT_T0); /* see the AVX-512 kernel */
            __m256 c0 = unpack(row, &s0, mask);
            __m256 c1 = two ? unpack(row, &s1, mask) : _mm256_setzero_ps();
            #pragma GCC unroll 4
            for (int h = 0; h < NH; h++) {
                __m256 wr = _mm256_set1_ps(ws[h][r]);
                a0[h] = _mm256_fmadd_ps(wr, c0, a0[h]);
                a1[h] = _mm256_fmadd_ps(wr, c1, a1[h]);
            }
        }
    }
    /* unrolled too: one access with a variable index would keep a0 / a1 in
     * memory, and gcc then stored all six accumulators every row */
    #pragma GCC unroll 4
    for (int h = 0; h < NH; h++) {
        float *o = out + h * ldo + j0;
        float tmp[8];
        _mm256_storeu_ps(tmp, msv[h]);
        float msum = ms[h];
        for (int l = 0; l < 8; l++) msum += tmp[l];
        __m256 m = _mm256_set1_ps(msum);
        add_out(o, _mm256_add_ps(a0[h], m), s0.lanes);
        if (two) add_out(o + 8, _mm256_add_ps(a1[h], m), s1.lanes);
    }
}

static void quant_wsum_avx2(const kvc_qtile *t, const float *w, ptrdiff_t ldw, int nw, float *out,
                         ptrdiff_t ldo) {
    for (int j0 = 0; j0 < t->n; j0 += 16) {
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
void kvc_quant_register_avx2(kvc_quant_wsum_fn *f) { *f = quant_wsum_avx2; }
