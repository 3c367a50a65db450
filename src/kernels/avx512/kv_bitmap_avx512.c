/* AVX-512 kernels for bitmap tiles (MUSTAFAR §3 "load as compressed, compute as
 * dense", Appendix C): each 64-channel tile is expanded from its packed 16-bit
 * values with VPEXPANDW (AVX512-VBMI2) under the tile's bitmap, widened to f32
 * and used as a dense 64-wide vector. f16 values widen with VCVTPH2PS (two
 * uops, and the upper halves must first be extracted); bf16 values widen in
 * place with one shift (even channels) or one AND (odd channels), so their
 * four vectors hold the tile's channels in the order even 0-30, odd 1-31,
 * even 32-62, odd 33-63, and the query (q·k) and the outputs (p·v) are put in
 * that order once per call instead. q·k: one token at a time against all g
 * query heads of the GQA group (the tile is read once per group), one FMA
 * chain per head, four tokens x up to four heads reduced by one transpose-
 * and-add tree. p·v: tile-outer so the g×64 output accumulators stay in
 * registers while the tokens stream by. Scalar reference: src/kv/codec/bitmap.c. */
#include <immintrin.h>
#include <string.h>

#include "kv/codec/bitmap.h"
#include "kernels/avx512/kv_avx512_util.h"
#include "kv/codec/prune.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Prefetch distance in tokens for the two streams (bits, vals), one prefetch
 * round per 4 tokens. On the Sapphire Rapids class VM of 2026-11-26 the
 * distance made no difference (0 to 1024 tokens); on the Xeon VM of
 * 2026-12-07 (night) 48-96 tokens ahead ran a few per cent faster than 192
 * and 768 slower (docs/benchmarks.md, MUSTAFAR, "bf16 values"). */
enum { PF_TOK = 96 };

/* Prefetches the bits and values of tokens [i + PF_TOK, i + PF_TOK + 4):
 * 4 * keep * 2 bytes of values (3 lines cover up to 192 bytes, keep <= 24;
 * wider tokens issue one line per 64 bytes) and 4 * nt * 8 bytes of bits. */
ALWAYS_INLINE void prefetch4(const kvc_bitmap_view *v, int nt, size_t i) {
    const char *vp = (const char *)(v->vals + (i + PF_TOK) * (size_t)v->keep);
    const char *bp = (const char *)(v->bits + (i + PF_TOK) * (size_t)nt);
    size_t vb = (size_t)8 * v->keep, bb = (size_t)32 * nt;
    for (size_t o = 0; o < vb; o += 64) _mm_prefetch(vp + o, _MM_HINT_T0);
    for (size_t o = 0; o < bb; o += 64) _mm_prefetch(bp + o, _MM_HINT_T0);
}

/* The 64 values of one tile as 4 x 16 f32 (pruned channels are 0). `p` points at
 * the tile's first packed value; returns the pointer past its last one.
 * Two 512-bit VPEXPANDW (expand-loads of 32 values each): on the Sapphire
 * Rapids class Xeon (2026-11-26) a 512-bit expand costs about as much as a
 * 256-bit one, so two of them beat four (the 256-bit form was chosen on AMD
 * Zen 5, docs/formats.md). f16 (BF = 0): the halves widened with VCVTPH2PS,
 * channel order. bf16 (BF = 1): a bf16 in the upper half of a 32-bit lane is
 * that f32, so the even channels are the lanes shifted up and the odd ones
 * the lanes with the lower half cleared (the order of the file comment). */
ALWAYS_INLINE const uint16_t *expand_tile(const uint16_t *p, const uint64_t *bits, __m512 f[4],
                                          const int BF) {
    /* the masks straight from memory (KMOVD k, m32 is a load; from a general
     * register it would take the vector shuffle port the expands need) */
    __mmask32 m0 = _load_mask32((__mmask32 *)bits), m1 = _load_mask32((__mmask32 *)bits + 1);
    uint64_t m = *bits;
    __m512i x0 = _mm512_maskz_expandloadu_epi16(m0, p);
    p += __builtin_popcount((unsigned)m);
    __m512i x1 = _mm512_maskz_expandloadu_epi16(m1, p);
    p += __builtin_popcount((unsigned)(m >> 32));
    if (BF) {
        const __m512i upper = _mm512_set1_epi32((int)0xffff0000u);
        f[0] = _mm512_castsi512_ps(_mm512_slli_epi32(x0, 16));
        f[1] = _mm512_castsi512_ps(_mm512_and_si512(x0, upper));
        f[2] = _mm512_castsi512_ps(_mm512_slli_epi32(x1, 16));
        f[3] = _mm512_castsi512_ps(_mm512_and_si512(x1, upper));
    } else {
        f[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(x0));
        f[1] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x0, 1));
        f[2] = _mm512_cvtph_ps(_mm512_castsi512_si256(x1));
        f[3] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x1, 1));
    }
    return p;
}

/* Query row q (d channels) as nt tiles of 64 floats, zero-padded past d, in
 * the lane order of BF (the file comment): per tile four masked loads and,
 * for bf16, four permutes. It runs once per call, and the driver calls per
 * tile of at most 256 tokens, so it must stay small against them. */
static void order_query(const float *q, int d, int BF, float *r) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    int nt = kvc_bitmap_tiles(d);
    for (int t = 0; t < nt; t++) {
        __m512 x[4];
        for (int j = 0; j < 4; j++) {
            __mmask16 m = kvc_lanes16_avx512(t * 64 + 16 * j, 0, d);
            x[j] = _mm512_maskz_loadu_ps(m, q + t * 64 + 16 * j);
        }
        float *o = r + t * 64;
        if (BF) {
            _mm512_storeu_ps(o, _mm512_permutex2var_ps(x[0], even, x[1]));
            _mm512_storeu_ps(o + 16, _mm512_permutex2var_ps(x[0], odd, x[1]));
            _mm512_storeu_ps(o + 32, _mm512_permutex2var_ps(x[2], even, x[3]));
            _mm512_storeu_ps(o + 48, _mm512_permutex2var_ps(x[2], odd, x[3]));
        } else {
            for (int j = 0; j < 4; j++) _mm512_storeu_ps(o + 16 * j, x[j]);
        }
    }
}

/* acc[h] += the lanes whose sum is q_h . K[tok] (G heads), one FMA chain per
 * head: no separate multiplies and adds. */
ALWAYS_INLINE void token_dot(const kvc_bitmap_view *k, int nt, size_t tok,
                             const float *const *qs, const int G, __m512 *acc, const int BF) {
    const uint64_t *bits = k->bits + tok * nt;
    const uint16_t *vp = k->vals + tok * (size_t)k->keep;
    for (int t = 0; t < nt; t++) {
        __m512 f[4];
        vp = expand_tile(vp, bits + t, f, BF);
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            const float *qt = qs[h] + t * 64;
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[h] = _mm512_fmadd_ps(f[r], _mm512_loadu_ps(qt + 16 * r), acc[h]);
        }
    }
}

/* One step of the reduction tree below: the lanes `sel` of x and y are
 * paired with the other lanes by `idx` (a shuffle) and a blend, so each step
 * costs one shuffle, one blend and one add instead of two shuffles and an add. */
ALWAYS_INLINE __m512 fold(__m512 x, __m512 y, __mmask16 sel, __m512i idx) {
    return _mm512_add_ps(_mm512_mask_blend_ps(sel, x, y), _mm512_permutex2var_ps(x, idx, y));
}

/* Lane j of the result = sum of a[j]'s 16 lanes (a transpose-and-add tree:
 * 15 folds for 16 vectors). */
ALWAYS_INLINE __m512 reduce16(const __m512 a[16]) {
    /* per fold, the lanes of x (i < 16) and y (16 + i) that x's kept lanes pair with */
    const __m512i i256 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i i128 = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
    const __m512i i64 = _mm512_setr_epi32(2, 3, 16, 17, 6, 7, 20, 21, 10, 11, 24, 25, 14, 15, 28, 29);
    const __m512i i32 = _mm512_setr_epi32(1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30);
    __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) b[j] = fold(a[j], a[j + 8], 0xFF00, i256);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) c[j] = fold(b[j], b[j + 4], 0xF0F0, i128);
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) d[j] = fold(c[j], c[j + 2], 0xCCCC, i64);
    return fold(d[0], d[1], 0xAAAA, i32);
}

/* The same sums for 12 vectors (G = 3: 4 tokens x 3 heads), lane j = sum of
 * a[j] for j < 12 (lanes 12-15 undefined). reduce16 on 12 live vectors would
 * spend a quarter of its folds on zeros; here the vectors pair as a[j] with
 * a[j+6], then b[j] with b[j+3], the odd one out folds with itself, and one
 * permute puts the 12 sums in order: 11 folds and a permute instead of 15
 * folds. Before the permute, the lanes 4k, 4k+2, 4k+1 hold the sums of
 * a[3k], a[3k+1], a[3k+2]. */
ALWAYS_INLINE __m512 reduce12(const __m512 a[12]) {
    const __m512i i256 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i i128 = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
    const __m512i i64 = _mm512_setr_epi32(2, 3, 16, 17, 6, 7, 20, 21, 10, 11, 24, 25, 14, 15, 28, 29);
    const __m512i i32 = _mm512_setr_epi32(1, 16, 3, 18, 5, 20, 7, 22, 9, 24, 11, 26, 13, 28, 15, 30);
    const __m512i order = _mm512_setr_epi32(0, 2, 1, 4, 6, 5, 8, 10, 9, 12, 14, 13, 3, 7, 11, 15);
    __m512 b[6], c[3];
#pragma GCC unroll 6
    for (int j = 0; j < 6; j++) b[j] = fold(a[j], a[j + 6], 0xFF00, i256);
#pragma GCC unroll 3
    for (int j = 0; j < 3; j++) c[j] = fold(b[j], b[j + 3], 0xF0F0, i128);
    __m512 d0 = fold(c[0], c[1], 0xCCCC, i64);
    __m512 d1 = _mm512_add_ps(c[2], _mm512_permutexvar_ps(i64, c[2])); /* fold(c2, c2) */
    return _mm512_permutexvar_ps(order, fold(d0, d1, 0xAAAA, i32));
}

/* Heads [0, G) with G a compile-time constant after inlining. qs: per head a
 * pointer to nt*64 floats in the lane order of BF (the tail tile zero-padded).
 * Four tokens at a time: 4 x G accumulators, reduced together by one tree
 * (lane h*4 + token). */
ALWAYS_INLINE void qk_heads(const kvc_bitmap_view *k, const float *const *qs, const int G, int n,
                            float *scores, int ld, const int BF) {
    int nt = kvc_bitmap_tiles(k->d);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        prefetch4(k, nt, (size_t)i);
        __m512 a[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int tt = 0; tt < 4; tt++) {
            __m512 acc[4];
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) acc[h] = _mm512_setzero_ps();
            token_dot(k, nt, (size_t)(i + tt), qs, G, acc, BF);
#pragma GCC unroll 4
            for (int h = 0; h < G; h++) a[h * 4 + tt] = acc[h];
        }
        _Alignas(64) float r[16];
        _mm512_store_ps(r, G == 3 ? reduce12(a) : reduce16(a));
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) memcpy(scores + (size_t)h * ld + i, r + 4 * h, 16);
    }
    for (; i < n; i++) {
        __m512 a0[4];
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) a0[h] = _mm512_setzero_ps();
        token_dot(k, nt, (size_t)i, qs, G, a0, BF);
        for (int h = 0; h < G; h++) scores[(size_t)h * ld + i] = _mm512_reduce_add_ps(a0[h]);
    }
}

/* One block of gb <= 4 heads, G and BF compile-time after the switches. */
ALWAYS_INLINE void qk_block(const kvc_bitmap_view *k, const float *const *qs, int gb, int n,
                            float *sc, int ld, const int BF) {
    switch (gb) {
    case 1: qk_heads(k, qs, 1, n, sc, ld, BF); break;
    case 2: qk_heads(k, qs, 2, n, sc, ld, BF); break;
    case 3: qk_heads(k, qs, 3, n, sc, ld, BF); break;
    default: qk_heads(k, qs, 4, n, sc, ld, BF); break;
    }
}

/* Heads in the next q·k block when rem are left: up to 4, but 5 and 6 go as
 * 3 + 2 and 3 + 3 (every block reads the keys once either way; three heads
 * fill the 12-vector tree, where 4 + 1 or 4 + 2 would leave a 16-vector tree
 * three quarters or half empty). */
static int qk_block_heads(int rem) { return rem == 5 || rem == 6 ? 3 : rem < 4 ? rem : 4; }

void kvc_qk_bitmap_avx512(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                          float *scores, int ld) {
    int d = k->d, nt = kvc_bitmap_tiles(d);
    /* f16 full tiles read q in place; a ragged d or bf16's lane order reads a copy */
    _Alignas(64) float rows[4 * KVC_BITMAP_MAX_D];
    for (int h0 = 0, gb; h0 < g; h0 += gb) {
        gb = qk_block_heads(g - h0);
        const float *qs[4];
        for (int h = 0; h < gb; h++) {
            const float *qh = q + (size_t)(h0 + h) * ldq;
            if ((d & 63) || k->bf16) {
                float *r = rows + (size_t)h * nt * 64;
                order_query(qh, d, k->bf16, r);
                qs[h] = r;
            } else {
                qs[h] = qh;
            }
        }
        float *sc = scores + (size_t)h0 * ld;
        if (k->bf16)
            qk_block(k, qs, gb, n, sc, ld, 1);
        else
            qk_block(k, qs, gb, n, sc, ld, 0);
    }
}

/* 32 outputs in channel order from bf16's lane order: the even and the odd
 * channels of one half tile interleaved. */
ALWAYS_INLINE void store_interleaved(float *out, __m512 even, __m512 odd) {
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    _mm512_storeu_ps(out, _mm512_permutex2var_ps(even, lo, odd));
    _mm512_storeu_ps(out + 16, _mm512_permutex2var_ps(even, hi, odd));
}

/* One tile column `t` of all n tokens into G heads' 64 outputs (G*4
 * accumulators stay in registers while the tokens stream by), channel order. */
ALWAYS_INLINE void pv_tile(const kvc_bitmap_view *v, int t, const float *p, const int G, int ld,
                           int n, float *out /* [G][64] */, const int BF) {
    int nt = kvc_bitmap_tiles(v->d);
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int h = 0; h < G; h++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[h][r] = _mm512_setzero_ps();
    for (int i = 0; i < n; i++) {
        if (t == 0 && (i & 3) == 0) prefetch4(v, nt, (size_t)i);
        const uint64_t *bits = v->bits + (size_t)i * nt;
        const uint16_t *vp = v->vals + (size_t)i * v->keep;
        for (int u = 0; u < t; u++) vp += __builtin_popcountll(bits[u]);
        __m512 f[4];
        expand_tile(vp, bits + t, f, BF);
#pragma GCC unroll 4
        for (int h = 0; h < G; h++) {
            __m512 w = _mm512_set1_ps(p[(size_t)h * ld + i]);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[h][r] = _mm512_fmadd_ps(w, f[r], acc[h][r]);
        }
    }
#pragma GCC unroll 4
    for (int h = 0; h < G; h++) {
        if (BF) {
            store_interleaved(out + h * 64, acc[h][0], acc[h][1]);
            store_interleaved(out + h * 64 + 32, acc[h][2], acc[h][3]);
        } else {
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) _mm512_storeu_ps(out + h * 64 + r * 16, acc[h][r]);
        }
    }
}

ALWAYS_INLINE void pv_block(const kvc_bitmap_view *v, int t, const float *ph, int gb, int ld,
                            int n, float *part, const int BF) {
    switch (gb) {
    case 1: pv_tile(v, t, ph, 1, ld, n, part, BF); break;
    case 2: pv_tile(v, t, ph, 2, ld, n, part, BF); break;
    case 3: pv_tile(v, t, ph, 3, ld, n, part, BF); break;
    default: pv_tile(v, t, ph, 4, ld, n, part, BF); break;
    }
}

/* o[c] += part[c] for the tile's first min(w, 64) channels (masked past d). */
ALWAYS_INLINE void add_tile(float *o, const float *part, int w) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __mmask16 m = kvc_lanes16_avx512(16 * j, 0, w);
        __m512 x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + 16 * j), _mm512_loadu_ps(part + 16 * j));
        _mm512_mask_storeu_ps(o + 16 * j, m, x);
    }
}

void kvc_pv_bitmap_avx512(const kvc_bitmap_view *v, int n, const float *p, int g, int ld,
                          float *out, int ldo) {
    int d = v->d, nt = kvc_bitmap_tiles(d);
    _Alignas(64) float part[4][64];
    for (int h0 = 0; h0 < g; h0 += 4) {
        int gb = g - h0 < 4 ? g - h0 : 4;
        const float *ph = p + (size_t)h0 * ld;
        for (int t = 0; t < nt; t++) {
            if (v->bf16)
                pv_block(v, t, ph, gb, ld, n, &part[0][0], 1);
            else
                pv_block(v, t, ph, gb, ld, n, &part[0][0], 0);
            for (int h = 0; h < gb; h++) add_tile(out + (size_t)(h0 + h) * ldo + t * 64, part[h], d - t * 64);
        }
    }
}

/* Top-k pruning mask (kvc_prune_topk, src/kv/codec/prune.c) without a sort: the
 * keep-th largest |score| bit pattern is found from the top bit down, two
 * bits per round of vector compare-and-count, then the values above it and the
 * lowest-index ties fill the mask. Same result as the reference. */
void kvc_prune_topk_avx512(const float *score, int d, int keep, uint64_t *mask) {
    int nw = (d + 63) / 64, nv = (d + 15) / 16;
    for (int w = 0; w < nw; w++) mask[w] = 0;
    if (keep <= 0) return;
    __m512i a[KVC_BITMAP_MAX_D / 16];
    __mmask16 valid[KVC_BITMAP_MAX_D / 16];
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    for (int j = 0; j < nv; j++) {
        int left = d - 16 * j;
        valid[j] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        a[j] = _mm512_and_si512(_mm512_maskz_loadu_epi32(valid[j], score + 16 * j), absm);
    }
    /* two bits per round: the three candidates are counted in parallel, so
     * the dependent chain is 16 rounds long instead of 31 (no branches) */
    uint32_t T = 0;
    for (int b = 30; b >= 0; b -= 2) {
        uint32_t lo = b > 0 ? 1u << (b - 1) : 0, hi = 1u << b;
        uint32_t c1 = T | lo, c2 = T | hi, c3 = T | hi | lo;
        __m512i v1 = _mm512_set1_epi32((int)c1), v2 = _mm512_set1_epi32((int)c2), v3 = _mm512_set1_epi32((int)c3);
        int n1 = 0, n2 = 0, n3 = 0;
        for (int j = 0; j < nv; j++) {
            n1 += __builtin_popcount(_mm512_mask_cmpge_epu32_mask(valid[j], a[j], v1));
            n2 += __builtin_popcount(_mm512_mask_cmpge_epu32_mask(valid[j], a[j], v2));
            n3 += __builtin_popcount(_mm512_mask_cmpge_epu32_mask(valid[j], a[j], v3));
        }
        /* counts fall as the candidate rises: take the largest one still >= keep */
        T = n3 >= keep ? c3 : n2 >= keep ? c2 : n1 >= keep ? c1 : T;
    }
    __m512i t = _mm512_set1_epi32((int)T);
    uint64_t gt[KVC_BITMAP_MAX_D / 64] = {0}, eq[KVC_BITMAP_MAX_D / 64] = {0};
    int n_gt = 0;
    for (int j = 0; j < nv; j++) {
        uint64_t g = _mm512_mask_cmpgt_epu32_mask(valid[j], a[j], t);
        uint64_t e = _mm512_mask_cmpeq_epu32_mask(valid[j], a[j], t);
        gt[j >> 2] |= g << (16 * (j & 3));
        eq[j >> 2] |= e << (16 * (j & 3));
        n_gt += __builtin_popcountll(g);
    }
    kvc_prune_mask_from_threshold(gt, eq, n_gt, keep, nw, mask);
}

/* 16 floats to bf16 exactly as kvc_f32_to_bf16: round to nearest even on the
 * bit pattern, a NaN kept quiet with its top payload bits. */
static __m256i narrow_bf16(__m512 v) {
    __m512i x = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

/* kvc_bitmap_pack: the kept values of 16 channels at a time compressed
 * (VCOMPRESSPS) and narrowed: to f16 with VCVTPS2PH (round to nearest even,
 * as kvc_f32_to_f16; a NaN keeps its payload's top bits instead of becoming
 * the reference's canonical quiet NaN), to bf16 as the reference does. */
void kvc_bitmap_pack_avx512(const float *x, const uint64_t *mask, int d, int bf16, uint64_t *bits,
                            uint16_t *vals) {
    int nt = kvc_bitmap_tiles(d), nv = (d + 15) / 16;
    for (int t = 0; t < nt; t++) {
        uint64_t m = mask[t];
        if (t == nt - 1 && (d & 63)) m &= (1ull << (d & 63)) - 1;
        bits[t] = m;
    }
    for (int j = 0; j < nv; j++) {
        int left = d - 16 * j;
        __mmask16 valid = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __mmask16 m = (__mmask16)(bits[j >> 2] >> (16 * (j & 3))) & valid;
        if (!m) continue;
        __m512 v = _mm512_maskz_compress_ps(m, _mm512_maskz_loadu_ps(valid, x + 16 * j));
        __m256i h = bf16 ? narrow_bf16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        int c = __builtin_popcount(m);
        _mm256_mask_storeu_epi16(vals, (__mmask16)((1u << c) - 1), h);
        vals += c;
    }
}

void kvc_bitmap_register_avx512(kvc_bitmap_kernels *k) {
    k->qk = kvc_qk_bitmap_avx512;
    k->pv = kvc_pv_bitmap_avx512;
    k->pack = kvc_bitmap_pack_avx512;
}

void kvc_prune_register_avx512(kvc_prune_topk_fn *k) { *k = kvc_prune_topk_avx512; }
