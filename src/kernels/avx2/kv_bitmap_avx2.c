/* AVX2 kernels for bitmap tiles (MUSTAFAR §3, Appendix C). AVX2 has no expand
 * instruction, so each byte of a tile's bitmap (8 channels, a "piece") selects
 * a PSHUFB pattern from a 256-entry table that spreads the piece's packed
 * 16-bit values to their channels (zeros elsewhere): f16 then widens with
 * VCVTPH2PS, bf16 needs nothing (its pattern puts each value in the high half
 * of its 32-bit lane). Tokens go in blocks of 48: for each tile of a block the
 * pieces' value and pattern offsets are first decoded 4 tokens at a time with
 * vector popcounts and prefix sums into a small L1 index, then the compute
 * loops load them as integers (the per-piece scalar shifts and masks this
 * replaced cost ~170 instructions per token and KV head; now 95-116). Heads go
 * in blocks of up to 3 with compile-time shapes so the accumulators stay in
 * registers: q·k 4 tokens x 3 heads, p·v 3 pieces x 3 heads. The 16-byte
 * loads may run past the last value: buffers carry KVC_BITMAP_PAD readable
 * bytes. Scalar reference: src/kv/codec/bitmap.c. */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/prune.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { BLK = 48 }; /* tokens per decoded block (a multiple of 4): its piece index stays in L1 */

/* Spread patterns per mask byte b (8 channels): f16 puts the next popcount(b)
 * packed halves at their channels (zeros elsewhere) for VCVTPH2PS; bf16 puts
 * them in the high half of each channel's 32-bit lane, so one 256-bit PSHUFB of
 * the values broadcast to both lanes yields the 8 floats with no widening. */
static _Alignas(16) uint8_t f16_lut[256][16];
static _Alignas(32) uint8_t bf16_lut[256][32];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void) {
    memset(f16_lut, 0x80, sizeof f16_lut);
    memset(bf16_lut, 0x80, sizeof bf16_lut);
    for (int b = 0; b < 256; b++)
        for (int j = 0, src = 0; j < 8; j++)
            if (b >> j & 1) {
                f16_lut[b][2 * j] = bf16_lut[b][4 * j + 2] = (uint8_t)(2 * src);
                f16_lut[b][2 * j + 1] = bf16_lut[b][4 * j + 3] = (uint8_t)(2 * src + 1);
                src++;
            }
}

/* Where each 8-channel piece of a block's tokens (one tile) finds its values
 * and its spread pattern, as byte offsets, [token][piece]. Decoding them for
 * 4 tokens at once with vector byte popcounts and prefix sums, then loading
 * them as plain integers, replaced per-piece shifts and masks of the 64-bit
 * masks that made the kernels instruction-bound (~170 instructions per token
 * and KV head for 24 FMAs; docs/benchmarks.md, MUSTAFAR on AVX2). */
typedef struct piece_index {
    _Alignas(32) int32_t val[BLK * 8]; /* from the block's first value */
    _Alignas(32) int32_t pat[BLK * 8]; /* into the pattern table */
    int32_t base[BLK];                 /* token's first value of this tile, in values */
} piece_index;

/* The offsets of 4 tokens' pieces from their masks m4 and value bases b4. */
ALWAYS_INLINE void decode4(__m256i m, const int32_t *b4, int32_t *val, int32_t *pat, const int BF) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i pc4 = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4, 0, 1, 1, 2, 1,
                                         2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    __m256i pc = _mm256_add_epi8(_mm256_shuffle_epi8(pc4, _mm256_and_si256(m, nib)),
                                 _mm256_shuffle_epi8(pc4, _mm256_and_si256(_mm256_srli_epi16(m, 4), nib)));
    __m256i e = _mm256_slli_epi64(pc, 8); /* exclusive prefix sums within each token's 8 bytes */
    e = _mm256_add_epi8(e, _mm256_slli_epi64(e, 8));
    e = _mm256_add_epi8(e, _mm256_slli_epi64(e, 16));
    e = _mm256_add_epi8(e, _mm256_slli_epi64(e, 32));
    _Alignas(32) uint8_t mb[32], eb[32];
    _mm256_store_si256((__m256i *)mb, m);
    _mm256_store_si256((__m256i *)eb, e);
    #pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
        __m256i o = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(eb + 8 * u)));
        o = _mm256_add_epi32(o, _mm256_set1_epi32(b4[u]));
        _mm256_store_si256((__m256i *)(val + 8 * u), _mm256_add_epi32(o, o)); /* values are 2 bytes */
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(mb + 8 * u)));
        _mm256_store_si256((__m256i *)(pat + 8 * u), _mm256_slli_epi32(b, BF ? 5 : 4));
    }
}

/* Tile t of tokens [b0, b0+nb) into ix; ix->base holds the tokens' value
 * bases for tile t on entry (relative to token b0's values) and, when
 * another tile follows, for t+1 on return. */
ALWAYS_INLINE void decode_block(const kvc_bitmap_view *v, int nt, size_t b0, int nb, int t,
                                piece_index *ix, const int BF) {
    const uint64_t *bits = v->bits + b0 * nt + t;
    for (int g = 0; g < nb; g += 4) {
        __m256i m;
        if (nt == 1 && g + 4 <= nb) {
            m = _mm256_loadu_si256((const __m256i *)(bits + g));
        } else {
            uint64_t m4[4] = {0, 0, 0, 0};
            for (int u = 0; u < 4 && g + u < nb; u++) m4[u] = bits[(size_t)(g + u) * nt];
            m = _mm256_setr_epi64x((long long)m4[0], (long long)m4[1], (long long)m4[2],
                                   (long long)m4[3]);
        }
        decode4(m, ix->base + g, ix->val + 8 * g, ix->pat + 8 * g, BF);
    }
    if (t + 1 < nt) /* d <= 64 (one tile): no next tile, nothing to advance */
        for (int u = 0; u < nb; u++) ix->base[u] += __builtin_popcountll(bits[(size_t)u * nt]);
}

/* Starts the block of tokens [b0, b0+BLK) of n: its token count, its first
 * value (*vals) and the tokens' value bases for tile 0. */
ALWAYS_INLINE int block_start(const kvc_bitmap_view *v, size_t b0, int n, piece_index *ix,
                              const char **vals) {
    for (int u = 0; u < BLK; u++) ix->base[u] = u * v->keep; /* all: decode4 reads 4 at a time */
    *vals = (const char *)(v->vals + b0 * v->keep);
    return n - b0 < BLK ? (int)(n - b0) : BLK;
}

/* One piece as 8 floats: its values at byte offset vo of vals under the
 * pattern at byte offset po. */
ALWAYS_INLINE __m256 expand8(const char *vals, int32_t vo, int32_t po, const int BF) {
    if (BF) {
        __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(vals + vo)));
        return _mm256_castsi256_ps(
            _mm256_shuffle_epi8(x, _mm256_load_si256((const __m256i *)((const char *)bf16_lut + po))));
    }
    __m128i x = _mm_loadu_si128((const __m128i *)(vals + vo));
    return _mm256_cvtph_ps(
        _mm_shuffle_epi8(x, _mm_load_si128((const __m128i *)((const char *)f16_lut + po))));
}

/* 8 query floats for the T tokens of a piece. With bf16 values the query
 * stays in registers across the tokens: 12 accumulators, 3 query vectors and
 * the piece fill the 16 YMM registers, and the load is asm so that GCC does
 * not hoist all 24 of a tile's query loads out of the token loop and spill
 * them (plain loads became memory operands of the FMAs: 3 of a piece's 5
 * 256-bit loads per token, and Zen 3 loads two per cycle; q·k 15% faster in
 * the cache). f16 needs a register more for VCVTPH2PS and was 2% slower so. */
ALWAYS_INLINE __m256 load_query(const float *q, const int BF) {
    if (!BF) return _mm256_load_ps(q);
    __m256 x;
    __asm__ volatile("vmovaps %1, %0" : "=x"(x) : "m"(*(const __m256 *)q));
    return x;
}

/* Tile t's scores of H heads (<= 3) for T (4, 2 or 1) tokens whose piece
 * offsets are vo/po [T][8], into s[h*ld] (added to what earlier tiles
 * stored when t > 0). qt is tile t of the query, [h][64]: one base address
 * and constant offsets (24 row pointers were spilled to the stack). 4 tokens
 * x 3 heads give 12 chains of dependent FMAs, enough to cover the FMA
 * latency (2 tokens, 6 chains, were latency-bound; 3 tokens measured 6%
 * slower with f16 values, the same with bf16). */
ALWAYS_INLINE void qk_tokens(const char *vals, const int32_t *vo, const int32_t *po,
                             const float *qt, int t, float *s, int ld, const int H,
                             const int T, const int BF) {
    __m256 acc[4][3];
    #pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        #pragma GCC unroll 8
        for (int h = 0; h < H; h++) acc[u][h] = _mm256_setzero_ps();
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m256 qv[3];
        #pragma GCC unroll 8
        for (int h = 0; h < H; h++) qv[h] = load_query(qt + h * 64 + 8 * j, BF);
        #pragma GCC unroll 8
        for (int u = 0; u < T; u++) {
            __m256 f = expand8(vals, vo[8 * u + j], po[8 * u + j], BF);
            #pragma GCC unroll 8
            for (int h = 0; h < H; h++) acc[u][h] = _mm256_fmadd_ps(f, qv[h], acc[u][h]);
        }
    }
    #pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
        float *d = s + (size_t)h * ld;
        if (T == 4) {
            __m128 x = kvc_reduce4_avx2(acc[0][h], acc[1][h], acc[2][h], acc[3][h]);
            if (t) x = _mm_add_ps(x, _mm_loadu_ps(d));
            _mm_storeu_ps(d, x);
        } else if (T == 2) {
            __m256 hh = _mm256_hadd_ps(acc[0][h], acc[1][h]);
            __m128 x = _mm_add_ps(_mm256_castps256_ps128(hh), _mm256_extractf128_ps(hh, 1));
            x = _mm_hadd_ps(x, x); /* the two tokens' sums in lanes 0, 1 */
            if (t) x = _mm_add_ps(x, _mm_loadl_pi(_mm_setzero_ps(), (const __m64 *)d));
            _mm_storel_pi((__m64 *)d, x);
        } else {
            float x = kvc_hsum256_ps(acc[0][h]);
            d[0] = t ? d[0] + x : x;
        }
    }
}

ALWAYS_INLINE void qk_heads(const kvc_bitmap_view *k, const float *qt, int n, float *s,
                            int ld, const int H, const int BF) {
    int nt = kvc_bitmap_tiles(k->d);
    piece_index ix;
    for (size_t b0 = 0; b0 < (size_t)n; b0 += BLK) {
        const char *vals;
        int nb = block_start(k, b0, n, &ix, &vals);
        for (int t = 0; t < nt; t++) {
            decode_block(k, nt, b0, nb, t, &ix, BF);
            const float *qtt = qt + t * H * 64;
            int u = 0;
            for (; u + 4 <= nb; u += 4)
                qk_tokens(vals, ix.val + 8 * u, ix.pat + 8 * u, qtt, t, s + b0 + u, ld, H, 4, BF);
            if (u + 2 <= nb) {
                qk_tokens(vals, ix.val + 8 * u, ix.pat + 8 * u, qtt, t, s + b0 + u, ld, H, 2, BF);
                u += 2;
            }
            if (u < nb)
                qk_tokens(vals, ix.val + 8 * u, ix.pat + 8 * u, qtt, t, s + b0 + u, ld, H, 1, BF);
        }
    }
}

/* A block of H heads with the value type a compile-time constant. */
ALWAYS_INLINE void qk_block(const kvc_bitmap_view *k, const float *qt, int n, float *sc,
                            int ld, const int H) {
    if (k->bf16)
        qk_heads(k, qt, n, sc, ld, H, 1);
    else
        qk_heads(k, qt, n, sc, ld, H, 0);
}

void kvc_qk_bitmap_avx2(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                        float *scores, int ld) {
    pthread_once(&lut_once, lut_init);
    int d = k->d, nt = kvc_bitmap_tiles(d);
    _Alignas(32) float qt[3 * KVC_BITMAP_MAX_D]; /* [tile][head][64], zero past d */
    for (int h0 = 0; h0 < g;) {
        int gb = kvc_head_block_avx2(g - h0);
        for (int t = 0; t < nt; t++)
            for (int h = 0; h < gb; h++) {
                float *r = qt + ((size_t)t * gb + h) * 64;
                int w = d - t * 64 < 64 ? d - t * 64 : 64;
                memcpy(r, q + (size_t)(h0 + h) * ldq + t * 64, (size_t)w * sizeof(float));
                memset(r + w, 0, (size_t)(64 - w) * sizeof(float));
            }
        float *sc = scores + (size_t)h0 * ld;
        if (gb == 3)
            qk_block(k, qt, n, sc, ld, 3);
        else if (gb == 2)
            qk_block(k, qt, n, sc, ld, 2);
        else
            qk_block(k, qt, n, sc, ld, 1);
        h0 += gb;
    }
}

/* Pieces [j0, j0+C) of one decoded tile of nb tokens into H heads' partial
 * sums part[h*ldp + 8j] (H <= 3, C <= 3): C x H accumulators and H broadcast
 * weights per token stay in registers (4 pieces x 3 heads spilled them), and
 * 9 accumulators cover the FMA latency (6 did not). */
ALWAYS_INLINE void pv_pieces(const char *vals, const piece_index *ix, int nb, int j0,
                             const float *p, int ld, float *part, int ldp, const int H,
                             const int C, const int BF) {
    __m256 acc[3][3];
    #pragma GCC unroll 8
    for (int h = 0; h < H; h++)
        #pragma GCC unroll 8
        for (int c = 0; c < C; c++) acc[h][c] = _mm256_load_ps(part + h * ldp + 8 * (j0 + c));
    for (int u = 0; u < nb; u++) {
        __m256 w[3];
        #pragma GCC unroll 8
        for (int h = 0; h < H; h++) w[h] = _mm256_broadcast_ss(p + (size_t)h * ld + u);
        #pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            __m256 f = expand8(vals, ix->val[8 * u + j0 + c], ix->pat[8 * u + j0 + c], BF);
            #pragma GCC unroll 8
            for (int h = 0; h < H; h++) acc[h][c] = _mm256_fmadd_ps(w[h], f, acc[h][c]);
        }
    }
    #pragma GCC unroll 8
    for (int h = 0; h < H; h++)
        #pragma GCC unroll 8
        for (int c = 0; c < C; c++) _mm256_store_ps(part + h * ldp + 8 * (j0 + c), acc[h][c]);
}

ALWAYS_INLINE void pv_heads(const kvc_bitmap_view *v, int n, const float *p, int ld, float *out,
                            int ldo, const int H, const int BF) {
    int d = v->d, nt = kvc_bitmap_tiles(d), ldp = nt * 64;
    _Alignas(32) float part[3 * KVC_BITMAP_MAX_D];
    memset(part, 0, sizeof(float) * (size_t)H * ldp);
    piece_index ix;
    for (size_t b0 = 0; b0 < (size_t)n; b0 += BLK) {
        const char *vals;
        int nb = block_start(v, b0, n, &ix, &vals);
        for (int t = 0; t < nt; t++) {
            decode_block(v, nt, b0, nb, t, &ix, BF);
            int w = d - t * 64 < 64 ? d - t * 64 : 64;
            for (int j0 = 0; j0 < 8 && 8 * j0 < w; j0 += 3) /* pieces past d hold zeros */
                if (j0 < 6)
                    pv_pieces(vals, &ix, nb, j0, p + b0, ld, part + t * 64, ldp, H, 3, BF);
                else
                    pv_pieces(vals, &ix, nb, j0, p + b0, ld, part + t * 64, ldp, H, 2, BF);
        }
    }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < d; c++) out[(size_t)h * ldo + c] += part[h * ldp + c];
}

/* A block of H heads with the value type a compile-time constant. */
ALWAYS_INLINE void pv_block(const kvc_bitmap_view *v, int n, const float *p, int ld, float *out,
                            int ldo, const int H) {
    if (v->bf16)
        pv_heads(v, n, p, ld, out, ldo, H, 1);
    else
        pv_heads(v, n, p, ld, out, ldo, H, 0);
}

void kvc_pv_bitmap_avx2(const kvc_bitmap_view *v, int n, const float *p, int g, int ld,
                        float *out, int ldo) {
    pthread_once(&lut_once, lut_init);
    for (int h0 = 0; h0 < g;) {
        int gb = kvc_head_block_avx2(g - h0);
        const float *ph = p + (size_t)h0 * ld;
        float *oh = out + (size_t)h0 * ldo;
        if (gb == 3)
            pv_block(v, n, ph, ld, oh, ldo, 3);
        else if (gb == 2)
            pv_block(v, n, ph, ld, oh, ldo, 2);
        else
            pv_block(v, n, ph, ld, oh, ldo, 1);
        h0 += gb;
    }
}

/* Top-k pruning mask (kvc_prune_topk, src/kv/codec/prune.c) without a sort, as
 * the AVX-512 variant: the keep-th largest |score| bit pattern is found from
 * the top bit down, one bit per round of vector compare-and-count (|x| bit
 * patterns and the candidates are below 2^31, so the signed compare orders
 * them; lanes past d hold -1, below every candidate), then the values above it
 * and the lowest-index ties fill the mask. Same result as the reference. */
void kvc_prune_topk_avx2(const float *score, int d, int keep, uint64_t *mask) {
    int nw = (d + 63) / 64, nv = (d + 7) / 8;
    for (int w = 0; w < nw; w++) mask[w] = 0;
    if (keep <= 0) return;
    __m256i a[KVC_BITMAP_MAX_D / 8];
    const __m256i absm = _mm256_set1_epi32(0x7fffffff);
    for (int j = 0; j < nv; j++) {
        int left = d - 8 * j;
        if (left >= 8) {
            a[j] = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(score + 8 * j)), absm);
        } else {
            int32_t buf[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
            for (int c = 0; c < left; c++) {
                memcpy(&buf[c], score + 8 * j + c, 4);
                buf[c] &= 0x7fffffff;
            }
            a[j] = _mm256_loadu_si256((const __m256i *)buf);
        }
    }
    uint32_t T = 0;
    for (int b = 30; b >= 0; b--) {
        uint32_t c = T | 1u << b;
        __m256i cv = _mm256_set1_epi32((int)c), below = _mm256_setzero_si256();
        for (int j = 0; j < nv; j++) below = _mm256_sub_epi32(below, _mm256_cmpgt_epi32(cv, a[j]));
        if (8 * nv - kvc_hsum256_epi32(below) >= keep) T = c; /* at least keep values >= c */
    }
    const __m256i t = _mm256_set1_epi32((int)T);
    uint64_t gt[KVC_BITMAP_MAX_D / 64] = {0}, eq[KVC_BITMAP_MAX_D / 64] = {0};
    int n_gt = 0;
    for (int j = 0; j < nv; j++) {
        uint64_t g = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a[j], t)));
        uint64_t e = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a[j], t)));
        gt[j >> 3] |= g << (8 * (j & 7));
        eq[j >> 3] |= e << (8 * (j & 7));
        n_gt += __builtin_popcountll(g);
    }
    kvc_prune_mask_from_threshold(gt, eq, n_gt, keep, nw, mask);
}

void kvc_prune_register_avx2(kvc_prune_topk_fn *k) { *k = kvc_prune_topk_avx2; }

void kvc_bitmap_register_avx2(kvc_bitmap_kernels *k) {
    k->qk = kvc_qk_bitmap_avx2;
    k->pv = kvc_pv_bitmap_avx2;
}
