/* AVX2 kernels for bitmap tiles (MUSTAFAR §3, Appendix C). AVX2 has no expand
 * instruction, so each byte of a tile's bitmap (8 channels) selects a PSHUFB
 * pattern from a 256-entry table that spreads the next popcount(byte) packed
 * f16 values to their channels (zeros elsewhere); VCVTPH2PS widens them to 8
 * f32. The 16-byte loads may run past the last value: buffers carry
 * KVC_BITMAP_PAD readable bytes. Scalar reference: src/kv/codec/bitmap.c. */
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#include "kv/codec/bitmap.h"

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

/* 8 channels of a tile under mask byte b: returns them as f32, advances *pp. */
ALWAYS_INLINE __m256 expand8(const kvc_f16 **pp, unsigned b) {
    __m128i raw = _mm_loadu_si128((const __m128i *)*pp);
    __m128i x = _mm_shuffle_epi8(raw, _mm_load_si128((const __m128i *)spread_lut[b]));
    *pp += __builtin_popcount(b);
    return _mm256_cvtph_ps(x);
}

ALWAYS_INLINE float hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

ALWAYS_INLINE void qk_heads(const kvc_bitmap_view *k, const float *const *qs, const int G,
                            int n, float *scores, int ld) {
    int nt = kvc_bitmap_tiles(k->d);
    for (int i = 0; i < n; i++) {
        size_t tok = (size_t)i;
        const uint64_t *bits = k->bits + tok * nt;
        const kvc_f16 *vp = k->vals + tok * (size_t)k->keep;
        _mm_prefetch((const char *)(vp + 16 * (size_t)k->keep), _MM_HINT_T0);
        _mm_prefetch((const char *)(vp + 16 * (size_t)k->keep) + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(bits + 16 * nt), _MM_HINT_T0);
        __m256 acc[4];
        for (int h = 0; h < G; h++) acc[h] = _mm256_setzero_ps();
        for (int t = 0; t < nt; t++) {
            uint64_t m = bits[t];
            for (int j = 0; j < 8; j++) {
                unsigned b = (unsigned)(m >> (8 * j)) & 0xff;
                __m256 f = expand8(&vp, b);
                for (int h = 0; h < G; h++)
                    acc[h] = _mm256_fmadd_ps(f, _mm256_loadu_ps(qs[h] + t * 64 + 8 * j), acc[h]);
            }
        }
        for (int h = 0; h < G; h++) scores[(size_t)h * ld + i] = hsum8(acc[h]);
    }
}

void kvc_qk_bitmap_f16_avx2(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                            float *scores, int ld) {
    pthread_once(&lut_once, lut_init);
    int d = k->d, nt = kvc_bitmap_tiles(d);
    _Alignas(32) float rows[4 * KVC_BITMAP_MAX_D];
    for (int h0 = 0; h0 < g; h0 += 4) {
        int gb = g - h0 < 4 ? g - h0 : 4;
        const float *qs[4];
        for (int h = 0; h < gb; h++) {
            const float *qh = q + (size_t)(h0 + h) * ldq;
            if (d & 63) {
                float *r = rows + (size_t)h * nt * 64;
                memcpy(r, qh, (size_t)d * sizeof(float));
                memset(r + d, 0, (size_t)(nt * 64 - d) * sizeof(float));
                qs[h] = r;
            } else {
                qs[h] = qh;
            }
        }
        float *sc = scores + (size_t)h0 * ld;
        switch (gb) {
        case 1: qk_heads(k, qs, 1, n, sc, ld); break;
        case 2: qk_heads(k, qs, 2, n, sc, ld); break;
        case 3: qk_heads(k, qs, 3, n, sc, ld); break;
        default: qk_heads(k, qs, 4, n, sc, ld); break;
        }
    }
}

/* Tile column t of n tokens into G heads' 64 outputs; 8 ymm per head of
 * accumulators, so heads go in pairs (16 accumulators). */
ALWAYS_INLINE void pv_tile(const kvc_bitmap_view *v, int t, const float *p, const int G, int ld,
                           int n, float *out /* [G][64] */) {
    int nt = kvc_bitmap_tiles(v->d);
    __m256 acc[2][8];
    for (int h = 0; h < G; h++)
        for (int r = 0; r < 8; r++) acc[h][r] = _mm256_setzero_ps();
    for (int i = 0; i < n; i++) {
        size_t tok = (size_t)i;
        const uint64_t *bits = v->bits + tok * nt;
        const kvc_f16 *vp = v->vals + tok * (size_t)v->keep;
        _mm_prefetch((const char *)(vp + 16 * (size_t)v->keep), _MM_HINT_T0);
        _mm_prefetch((const char *)(vp + 16 * (size_t)v->keep) + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(bits + 16 * nt), _MM_HINT_T0);
        for (int u = 0; u < t; u++) vp += __builtin_popcountll(bits[u]);
        uint64_t m = bits[t];
        __m256 w[2];
        for (int h = 0; h < G; h++) w[h] = _mm256_set1_ps(p[(size_t)h * ld + i]);
        for (int j = 0; j < 8; j++) {
            unsigned b = (unsigned)(m >> (8 * j)) & 0xff;
            __m256 f = expand8(&vp, b);
            for (int h = 0; h < G; h++) acc[h][j] = _mm256_fmadd_ps(w[h], f, acc[h][j]);
        }
    }
    for (int h = 0; h < G; h++)
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(out + h * 64 + r * 8, acc[h][r]);
}

void kvc_pv_bitmap_f16_avx2(const kvc_bitmap_view *v, int n, const float *p, int g, int ld,
                            float *out, int ldo) {
    pthread_once(&lut_once, lut_init);
    int d = v->d, nt = kvc_bitmap_tiles(d);
    _Alignas(32) float part[2][64];
    for (int h0 = 0; h0 < g; h0 += 2) {
        int gb = g - h0 < 2 ? g - h0 : 2;
        const float *ph = p + (size_t)h0 * ld;
        for (int t = 0; t < nt; t++) {
            if (gb == 1) pv_tile(v, t, ph, 1, ld, n, &part[0][0]);
            else pv_tile(v, t, ph, 2, ld, n, &part[0][0]);
            int w = d - t * 64 < 64 ? d - t * 64 : 64;
            for (int h = 0; h < gb; h++) {
                float *o = out + (size_t)(h0 + h) * ldo + t * 64;
                for (int c = 0; c < w; c++) o[c] += part[h][c];
            }
        }
    }
}

void kvc_bitmap_register_avx2(kvc_bitmap_kernels *k) {
    k->qk = kvc_qk_bitmap_f16_avx2;
    k->pv = kvc_pv_bitmap_f16_avx2;
}
