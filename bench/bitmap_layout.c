/* Layout experiment for docs/formats.md "Bitmap tiles": q·k over MUSTAFAR
 * bitmap tiles on the CPU, token-major tiles (kvcomp's layout: one tile = 64
 * channels of one token, no offsets) against the paper's K layout (one tile =
 * 64 tokens of one channel, a u32 offset per tile, Appendix C / Figure 9a),
 * and a dense f16 q·k for scale. One KV head, G = 3 query heads, D = 64.
 *
 * Build and run (not part of the CMake build; a measurement, not a test):
 *   gcc -O2 -std=gnu11 -march=native -Iinclude -Isrc bench/bitmap_layout.c \
 *       src/kv/codec/bitmap.c src/kv/codec/prune.c src/base/cpu.c \
 *       src/base/status.c src/kernels/avx512/kv_bitmap_avx512.c \
 *       src/kernels/avx2/kv_bitmap_avx2.c -lm -lpthread -o /tmp/bitmap_layout
 *   /tmp/bitmap_layout [tokens] */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/codec/bitmap.h"
#include "kv/codec/prune.h"

#define D 64
#define G 3

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: the machine is shared */
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rs = 88172645463325252ull;
static float gauss(void) {
    float s = 0;
    for (int i = 0; i < 4; i++) {
        rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
        s += (float)(rs >> 40) / 16777216.0f - 0.5f;
    }
    return s;
}

/* Paper layout: per group of 64 tokens, per channel c a tile: bitmap over the
 * 64 tokens, values packed in token order, u32 offset of the tile's first value. */
typedef struct {
    int n, groups;
    uint64_t *bits;   /* [groups][D] */
    uint32_t *off;    /* [groups][D] */
    kvc_f16 *vals;
} chanmajor;

static void qk_chanmajor_avx512(const chanmajor *cm, const float *q, float *s, int lds) {
    for (int gi = 0; gi < cm->groups; gi++) {
        __m512 acc[G][4];
        for (int h = 0; h < G; h++)
            for (int r = 0; r < 4; r++) acc[h][r] = _mm512_setzero_ps();
        for (int c = 0; c < D; c++) {
            uint64_t m = cm->bits[gi * D + c];
            const kvc_f16 *p = cm->vals + cm->off[gi * D + c];
            _mm_prefetch((const char *)(p + 2048), _MM_HINT_T0);
            __m512 f[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) { /* same expand primitive as the kvcomp kernel */
                __mmask16 mr = (__mmask16)(m >> (16 * r));
                f[r] = _mm512_cvtph_ps(_mm256_maskz_expand_epi16(mr, _mm256_loadu_si256((const __m256i *)p)));
                p += __builtin_popcount((unsigned)mr);
            }
            for (int h = 0; h < G; h++) {
                __m512 qb = _mm512_set1_ps(q[h * D + c]);
                for (int r = 0; r < 4; r++) acc[h][r] = _mm512_fmadd_ps(f[r], qb, acc[h][r]);
            }
        }
        for (int h = 0; h < G; h++)
            for (int r = 0; r < 4; r++) _mm512_storeu_ps(s + (size_t)h * lds + gi * 64 + r * 16, acc[h][r]);
    }
}

/* The same with two 512-bit expand-loads per tile (the paper's tile = 64 values). */
static void qk_chanmajor_zmm_avx512(const chanmajor *cm, const float *q, float *s, int lds) {
    for (int gi = 0; gi < cm->groups; gi++) {
        __m512 acc[G][4];
        for (int h = 0; h < G; h++)
            for (int r = 0; r < 4; r++) acc[h][r] = _mm512_setzero_ps();
        for (int c = 0; c < D; c++) {
            uint64_t m = cm->bits[gi * D + c];
            const kvc_f16 *p = cm->vals + cm->off[gi * D + c];
            __mmask32 lo = (__mmask32)m, hi = (__mmask32)(m >> 32);
            __m512i a = _mm512_maskz_expandloadu_epi16(lo, p);
            __m512i b = _mm512_maskz_expandloadu_epi16(hi, p + __builtin_popcount(lo));
            __m512 f[4] = {_mm512_cvtph_ps(_mm512_castsi512_si256(a)),
                           _mm512_cvtph_ps(_mm512_extracti64x4_epi64(a, 1)),
                           _mm512_cvtph_ps(_mm512_castsi512_si256(b)),
                           _mm512_cvtph_ps(_mm512_extracti64x4_epi64(b, 1))};
            for (int h = 0; h < G; h++) {
                __m512 qb = _mm512_set1_ps(q[h * D + c]);
                for (int r = 0; r < 4; r++) acc[h][r] = _mm512_fmadd_ps(f[r], qb, acc[h][r]);
            }
        }
        for (int h = 0; h < G; h++)
            for (int r = 0; r < 4; r++) _mm512_storeu_ps(s + (size_t)h * lds + gi * 64 + r * 16, acc[h][r]);
    }
}

/* Dense f16 rows, four tokens reduced together (same scheme as the bitmap kernel). */
static void qk_dense_f16_avx512(const kvc_f16 *x, int n, const float *q, float *s, int lds) {
    for (int i = 0; i < n; i += 4) {
        __m512 acc[4][G];
        for (int j = 0; j < 4; j++) {
            const kvc_f16 *row = x + (size_t)(i + j) * D;
            __m512 f[4];
            for (int r = 0; r < 4; r++) f[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 16 * r)));
            for (int h = 0; h < G; h++) {
                __m512 a = _mm512_mul_ps(f[0], _mm512_loadu_ps(q + h * D));
                __m512 b = _mm512_mul_ps(f[1], _mm512_loadu_ps(q + h * D + 16));
                a = _mm512_fmadd_ps(f[2], _mm512_loadu_ps(q + h * D + 32), a);
                b = _mm512_fmadd_ps(f[3], _mm512_loadu_ps(q + h * D + 48), b);
                acc[j][h] = _mm512_add_ps(a, b);
            }
        }
        for (int h = 0; h < G; h++)
            for (int j = 0; j < 4; j++) s[(size_t)h * lds + i + j] = _mm512_reduce_add_ps(acc[j][h]);
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 65536;
    n = (n + 63) / 64 * 64;
    float *k = malloc(sizeof(float) * (size_t)n * D), q[G * D];
    for (size_t i = 0; i < (size_t)n * D; i++) k[i] = gauss() * ((i % D) % 11 == 0 ? 6.0f : 1.0f);
    for (int i = 0; i < G * D; i++) q[i] = gauss();
    kvc_f16 *dense = malloc(sizeof(kvc_f16) * (size_t)n * D);
    for (size_t i = 0; i < (size_t)n * D; i++) dense[i] = kvc_f32_to_f16(k[i]);
    float *s = malloc(sizeof(float) * (size_t)G * n), *s2 = malloc(sizeof(float) * (size_t)G * n);
    int reps = (int)(5e7 / ((double)n * D)) + 1;
    for (int r = 0; r < reps; r++) qk_dense_f16_avx512(dense, n, q, s, n); /* warm-up */
    double t0, t_dense = 1e30, t_tok, t_ch;
    /* min over trials: the machine is shared, the fastest trial is the least disturbed */
#define TIME(best, call)                                                                           \
    best = 1e30;                                                                                   \
    for (int trial = 0; trial < 9; trial++) {                                                      \
        t0 = now();                                                                                \
        for (int r = 0; r < reps; r++) call;                                                       \
        double t_ = (now() - t0) / reps;                                                           \
        if (t_ < best) best = t_;                                                                  \
    }
    TIME(t_dense, qk_dense_f16_avx512(dense, n, q, s, n));
    printf("tokens %d, D %d, G %d, reps %d\n", n, D, G, reps);
    printf("dense f16            %7.2f ns/token  %6.1f B/token\n", t_dense / n * 1e9, 2.0 * D);
    const double sps[] = {0.5, 0.7};
    for (int si = 0; si < 2; si++) {
        int keep = kvc_prune_keep_count(sps[si], D);
        uint64_t *bits = malloc(8 * (size_t)n);
        kvc_f16 *vals = malloc(2 * (size_t)n * keep + KVC_BITMAP_PAD);
        uint64_t m;
        for (int i = 0; i < n; i++) {
            kvc_prune_topk(k + (size_t)i * D, D, keep, &m);
            kvc_bitmap_pack(k + (size_t)i * D, &m, D, 0, bits + i, vals + (size_t)i * keep);
        }
        /* channel-major copy of the same pruned tokens */
        chanmajor cm = {n, n / 64, malloc(8 * (size_t)n), malloc(4 * (size_t)n), malloc(2 * (size_t)n * keep + 64)};
        uint32_t w = 0;
        for (int gi = 0; gi < n / 64; gi++)
            for (int c = 0; c < D; c++) {
                uint64_t b = 0;
                cm.off[gi * D + c] = w;
                for (int t = 0; t < 64; t++) {
                    int tok = gi * 64 + t;
                    if (bits[tok] >> c & 1) {
                        b |= 1ull << t;
                        int r = __builtin_popcountll(bits[tok] & ((1ull << c) - 1));
                        cm.vals[w++] = vals[(size_t)tok * keep + r];
                    }
                }
                cm.bits[gi * D + c] = b;
            }
        kvc_bitmap_view v = {bits, vals, D, keep, 0};
        TIME(t_tok, kvc_qk_bitmap_avx512(&v, n, q, G, D, s, n));
        TIME(t_ch, qk_chanmajor_avx512(&cm, q, s2, n));
        double t_ch2;
        TIME(t_ch2, qk_chanmajor_zmm_avx512(&cm, q, s2, n));
        if (t_ch2 < t_ch) t_ch = t_ch2; /* the better of the two expand forms */
        double maxd = 0;
        for (size_t i = 0; i < (size_t)G * n; i++) {
            double e = s[i] - s2[i];
            if (e < 0) e = -e;
            if (e > maxd) maxd = e;
        }
        printf("s=%.1f keep %2d: token-major %6.2f ns/token (%.1f B/token, %.0f%% of dense)  "
               "channel-major %6.2f ns/token (%.1f B/token, %.0f%% of dense)  max|diff| %.2g\n",
               sps[si], keep, t_tok / n * 1e9, 8.0 + 2.0 * keep, 100 * t_tok / t_dense,
               t_ch / n * 1e9, 8.0 + 4.0 + 2.0 * keep, 100 * t_ch / t_dense, maxd);
        /* pruning + compression cost: the bitmap_f16 codec's encode (top-k + pack) */
        kvc_bitmap_cfg bc = {keep};
        kvc_codec codec = {.ops = &kvc_codec_bitmap_f16, .dim = D, .cfg = &bc};
        int ne = n < 16384 ? n : 16384;
        double t_enc = 1e30;
        for (int trial = 0; trial < 5; trial++) {
            void *blob;
            t0 = now();
            codec.ops->encode(&codec, k, ne, D, &blob);
            double t_ = now() - t0;
            codec.ops->free(&codec, blob);
            if (t_ < t_enc) t_enc = t_;
        }
        printf("      prune+compress (bitmap_f16 encode): %.1f ns per %d-element vector\n", t_enc / ne * 1e9, D);
        free(bits), free(vals), free(cm.bits), free(cm.off), free(cm.vals);
    }
    free(k), free(dense), free(s), free(s2);
    return 0;
}
