/* AVX2 kernels for bitmap tiles (MUSTAFAR §3, Appendix C). AVX2 has no expand
 * instruction, so each byte of a tile's bitmap (8 channels) selects a PSHUFB
 * pattern from a 256-entry table that spreads the next popcount(byte) packed
 * 16-bit values to their channels (zeros elsewhere); VCVTPH2PS widens f16
 * values to 8 f32, a zero-extension and a shift bf16 values. Where each
 * chunk's values start comes from the mask at once (kvc_piece_offsets), not
 * from a pointer advanced chunk by chunk. As in the dense
 * AVX2 kernels, heads go in blocks of up to 3 with compile-time block shapes so
 * the accumulators stay in registers: q·k 4 tokens x 3 heads, p·v half a tile
 * (4 chunks) x 3 heads. The 16-byte loads may run past the last value: buffers
 * carry KVC_BITMAP_PAD readable bytes. Scalar reference: src/kv/codec/bitmap.c. */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "kernels/avx2/kv_avx2_util.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/prune.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

static _Alignas(16) uint8_t spread_lut[256][16];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void lut_init(void) {
    for (int b = 0; b < 256; b++) {
        int src = 0;
        for (int j = 0; j < 8; j++) {
            if (b >> j & 1) {
                spread_lut[b][2 * j] = (uint8_t)(2 * src);
                spread_lut[b][2 * j + 1] = (uint8_t)(2 * src + 1);
                src++;
            } else {
                spread_lut[b][2 * j] = spread_lut[b][2 * j + 1] = 0x80;
            }
        }
    }
}

/* 8 channels of a tile under mask byte b, from the packed values at p (bf16
 * when BF, else f16), as f32. */
ALWAYS_INLINE __m256 expand8(const uint16_t *p, unsigned b, const int BF) {
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    __m128i x = _mm_shuffle_epi8(raw, _mm_load_si128((const __m128i *)spread_lut[b]));
    if (BF) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16));
    return _mm256_cvtph_ps(x);
}

/* Values of token i's tile t: its row, past the values of its earlier tiles
 * (p·v, which goes tile by tile over all tokens). */
ALWAYS_INLINE const uint16_t *tile_vals(const kvc_bitmap_view *v, int nt, size_t i, int t) {
    const uint16_t *vp = v->vals + i * (size_t)v->keep;
    for (int u = 0; u < t; u++)
        vp += __builtin_popcountll(v->bits[i * nt + u]);
    return vp;
}

ALWAYS_INLINE void prefetch_token(const kvc_bitmap_view *v, int nt, size_t i) {
    const uint16_t *vp = v->vals + (i + 16) * (size_t)v->keep;
    _mm_prefetch((const char *)vp, _MM_HINT_T0);
    _mm_prefetch((const char *)vp + 64, _MM_HINT_T0);
    _mm_prefetch((const char *)(v->bits + (i + 16) * nt), _MM_HINT_T0);
}

/* Scores of H heads (a compile-time constant, <= 3) for tokens [i, i+T), T = 4 or 1
 * (compile-time): T x H accumulators in registers, each expanded chunk used by
 * all H heads. qs[h] are 64-float-padded query rows. */
ALWAYS_INLINE void qk_tokens(const kvc_bitmap_view *k, int nt, const float *const *qs, size_t i,
                             float *scores, int ld, const int H, const int T, const int BF) {
    __m256 acc[4][3];
    #pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        #pragma GCC unroll 8
        for (int h = 0; h < H; h++)
            acc[u][h] = _mm256_setzero_ps();
    const uint16_t *vp[4]; /* each token's values of tile t, advanced tile by tile */
    #pragma GCC unroll 8
    for (int u = 0; u < T; u++)
        vp[u] = k->vals + (i + u) * (size_t)k->keep;
    for (int t = 0; t < nt; t++) {
        uint64_t m[4], off[4];
        #pragma GCC unroll 8
        for (int u = 0; u < T; u++) {
            m[u] = k->bits[(i + u) * nt + t];
            off[u] = kvc_piece_offsets(m[u]);
        }
        #pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            #pragma GCC unroll 8
            for (int u = 0; u < T; u++) {
                __m256 f =
                    expand8(vp[u] + (off[u] >> 8 * j & 0xff), (unsigned)(m[u] >> 8 * j) & 0xff, BF);
                #pragma GCC unroll 8
                for (int h = 0; h < H; h++)
                    acc[u][h] =
                        _mm256_fmadd_ps(f, _mm256_loadu_ps(qs[h] + t * 64 + 8 * j), acc[u][h]);
            }
        #pragma GCC unroll 8
        for (int u = 0; u < T; u++)
            vp[u] += __builtin_popcountll(m[u]);
    }
    #pragma GCC unroll 8
    for (int h = 0; h < H; h++) {
        if (T == 4)
            _mm_storeu_ps(scores + (size_t)h * ld + i,
                          kvc_reduce4_avx2(acc[0][h], acc[1][h], acc[2][h], acc[3][h]));
        else
            scores[(size_t)h * ld + i] = kvc_hsum256_ps(acc[0][h]);
    }
}

ALWAYS_INLINE void qk_heads(const kvc_bitmap_view *k, const float *const *qs, int n, float *scores,
                            int ld, const int H, const int BF) {
    int nt = kvc_bitmap_tiles(k->d);
    size_t i = 0;
    for (; i + 4 <= (size_t)n; i += 4) {
        #pragma GCC unroll 8
        for (int u = 0; u < 4; u++)
            prefetch_token(k, nt, i + u);
        qk_tokens(k, nt, qs, i, scores, ld, H, 4, BF);
    }
    for (; i < (size_t)n; i++)
        qk_tokens(k, nt, qs, i, scores, ld, H, 1, BF);
}

/* A block of H heads with the value type a compile-time constant. */
ALWAYS_INLINE void qk_block(const kvc_bitmap_view *k, const float *const *qs, int n, float *sc,
                            int ld, const int H) {
    if (k->bf16)
        qk_heads(k, qs, n, sc, ld, H, 1);
    else
        qk_heads(k, qs, n, sc, ld, H, 0);
}

void kvc_qk_bitmap_avx2(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                        float *scores, int ld) {
    pthread_once(&lut_once, lut_init);
    int d = k->d, nt = kvc_bitmap_tiles(d);
    _Alignas(32) float rows[3 * KVC_BITMAP_MAX_D];
    for (int h0 = 0; h0 < g;) {
        int gb = kvc_head_block_avx2(g - h0);
        const float *qs[3];
        for (int h = 0; h < gb; h++) {
            const float *qh = q + (size_t)(h0 + h) * ldq;
            if (d & 63) { /* the last tile's padding channels meet zeros */
                float *r = rows + (size_t)h * nt * 64;
                memcpy(r, qh, (size_t)d * sizeof(float));
                memset(r + d, 0, (size_t)(nt * 64 - d) * sizeof(float));
                qs[h] = r;
            } else {
                qs[h] = qh;
            }
        }
        float *sc = scores + (size_t)h0 * ld;
        if (gb == 3)
            qk_block(k, qs, n, sc, ld, 3);
        else if (gb == 2)
            qk_block(k, qs, n, sc, ld, 2);
        else
            qk_block(k, qs, n, sc, ld, 1);
        h0 += gb;
    }
}

/* Chunks [j0, j0+4) of tile t (32 channels) of n tokens into H heads' outputs
 * (H <= 3, compile-time): 4 x H accumulators, H weights and the expanded chunk
 * fill the 16 registers. out[h*64 + 8c] receives the sums (overwritten). */
ALWAYS_INLINE void pv_half(const kvc_bitmap_view *v, int nt, int t, int j0, const float *p, int ld,
                           int n, float *out, const int H, const int BF) {
    __m256 acc[3][4];
    #pragma GCC unroll 8
    for (int h = 0; h < H; h++)
        #pragma GCC unroll 8
        for (int c = 0; c < 4; c++)
            acc[h][c] = _mm256_setzero_ps();
    for (size_t i = 0; i < (size_t)n; i++) {
        if (j0 == 0) prefetch_token(v, nt, i);
        uint64_t m = v->bits[i * nt + t], off = kvc_piece_offsets(m);
        const uint16_t *vp = tile_vals(v, nt, i, t);
        #pragma GCC unroll 8
        for (int c = 0; c < 4; c++) {
            int j = j0 + c;
            __m256 f = expand8(vp + (off >> 8 * j & 0xff), (unsigned)(m >> 8 * j) & 0xff, BF);
/* the weight is broadcast from memory at each use: held in registers for
 * the 4 chunks, 3 heads' weights made the accumulators spill */
            #pragma GCC unroll 8
            for (int h = 0; h < H; h++)
                acc[h][c] =
                    _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)h * ld + i), f, acc[h][c]);
        }
    }
    #pragma GCC unroll 8
    for (int h = 0; h < H; h++)
        #pragma GCC unroll 8
        for (int c = 0; c < 4; c++)
            _mm256_storeu_ps(out + h * 64 + 8 * (j0 + c), acc[h][c]);
}

ALWAYS_INLINE void pv_heads(const kvc_bitmap_view *v, int n, const float *p, int ld, float *out,
                            int ldo, const int H, const int BF) {
    int d = v->d, nt = kvc_bitmap_tiles(d);
    _Alignas(32) float part[3 * 64];
    for (int t = 0; t < nt; t++) {
        int w = d - t * 64 < 64 ? d - t * 64 : 64;
        pv_half(v, nt, t, 0, p, ld, n, part, H, BF);
        if (w > 32) pv_half(v, nt, t, 4, p, ld, n, part, H, BF);
        for (int h = 0; h < H; h++) {
            float *o = out + (size_t)h * ldo + t * 64;
            for (int c = 0; c < w; c++)
                o[c] += part[h * 64 + c];
        }
    }
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
