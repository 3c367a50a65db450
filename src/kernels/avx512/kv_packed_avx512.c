/* AVX-512 kernels of the packed two-D format (src/kv/codec/packed.h; MosaicKV
 * §5.3 "packed vector product"): a vector is walked in pieces of 16 channels;
 * the piece's group bits become a 16-bit channel mask (PDEP spreads a group
 * bit over its 1, 2 or 4 channels), and VPEXPANDW (AVX512-VBMI2) places the
 * piece's packed f16 values at their channels, widened to f32 by VCVTPH2PS.
 * The vector is never unpacked to memory. q·k runs token by token with the G
 * heads' partial sums in registers (heads in groups of up to 8, the group size
 * a compile-time constant), four heads reduced together; p·v runs piece by piece over the tokens
 * with the G heads' 16 output channels of the piece in registers. Reading a
 * full 32-byte load at the piece's first value relies on the blob's
 * KVC_PACKED_PAD readable bytes. Scalar reference: src/kv/codec/packed.c. */
#include <immintrin.h>
#include <string.h>

#include "kv/codec/packed.h"
#include "kernels/avx512/kv_avx512_util.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { PV_TOKENS = 256 };

/* The 16-channel mask of piece r (channels 16r .. 16r+15) for group size g. */
ALWAYS_INLINE unsigned piece_mask(const uint32_t *bits, int g, int r) {
    int gpp = 16 / g, pos = r * gpp;
    unsigned gb = (bits[pos >> 5] >> (pos & 31)) & ((1u << gpp) - 1);
    if (g == 1) return gb;
    if (g == 2) return _pdep_u32(gb, 0x5555u) * 3u;
    return _pdep_u32(gb, 0x1111u) * 15u;
}

/* The piece's 16 values as f32 (zeros outside the mask); advances *p. The
 * empty asm keeps the load a plain load: folded into VPEXPANDW's memory form
 * the expand was several times slower (perf, AMD EPYC of docs/benchmarks.md). */
ALWAYS_INLINE __m512 expand_piece(const kvc_f16 **p, unsigned m) {
    __m256i raw = _mm256_loadu_si256((const __m256i *)*p);
    __asm__("" : "+v"(raw));
    __m256i x = _mm256_maskz_expand_epi16((__mmask16)m, raw);
    *p += __builtin_popcount(m);
    return _mm512_cvtph_ps(x);
}

/* Heads [0, G) with G a compile-time constant after inlining, so that the
 * accumulators stay in registers. */
ALWAYS_INLINE void qk_heads(const kvc_packed_view *k, int n, const float *q, const int G, int ldq,
                            float *s, int lds) {
    int d = k->d, g = k->group, np = (d + 15) / 16;
    for (int t = 0; t < n; t++) {
        const uint32_t *bits = k->bits + (size_t)t * k->nw;
        const kvc_f16 *vp = k->vals + (size_t)t * k->nv;
        /* the two streams (bitmaps, values) run ahead of the hardware
         * prefetcher, within the range only: past its end lie tokens that a
         * selecting method skipped (the driver prefetches the next range) */
        if (t + 8 < n) {
            _mm_prefetch((const char *)(vp + 8 * (size_t)k->nv), _MM_HINT_T0);
            _mm_prefetch((const char *)(vp + 8 * (size_t)k->nv) + 64, _MM_HINT_T0);
        }
        if (t + 16 < n) _mm_prefetch((const char *)(bits + 16 * (size_t)k->nw), _MM_HINT_T0);
        __m512 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) acc[h] = _mm512_setzero_ps();
        for (int r = 0; r < np; r++) {
            unsigned m = piece_mask(bits, g, r);
            if (!m) continue;
            int c0 = 16 * r, w = d - c0 < 16 ? d - c0 : 16;
            __mmask16 lanes = (__mmask16)((1u << w) - 1);
            __m512 f = expand_piece(&vp, m);
            #pragma GCC unroll 8
            for (int h = 0; h < G; h++)
                acc[h] = _mm512_fmadd_ps(f, _mm512_maskz_loadu_ps(lanes, q + (size_t)h * ldq + c0), acc[h]);
        }
#pragma GCC unroll 2
        for (int h0 = 0; h0 < G; h0 += 4) { /* four heads reduced together */
            __m512 z = _mm512_setzero_ps();
            float r4[4];
            _mm_storeu_ps(r4, kvc_reduce4_avx512(acc[h0], h0 + 1 < G ? acc[h0 + 1] : z, h0 + 2 < G ? acc[h0 + 2] : z,
                                      h0 + 3 < G ? acc[h0 + 3] : z));
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++)
                if (h0 + i < G) s[(size_t)(h0 + i) * lds + t] = r4[i];
        }
    }
}

/* Heads [0, G) over tokens [0, n), n <= PV_TOKENS; G constant after inlining. */
ALWAYS_INLINE void pv_heads(const kvc_packed_view *v, int n, const float *p, const int G, int ldp,
                            float *o, int ldo) {
    int d = v->d, g = v->group, np = (d + 15) / 16;
    int off[PV_TOKENS];
    memset(off, 0, (size_t)n * sizeof *off);
    for (int r = 0; r < np; r++) {
        int c0 = 16 * r, w = d - c0 < 16 ? d - c0 : 16;
        __mmask16 lanes = (__mmask16)((1u << w) - 1);
        __m512 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) acc[h] = _mm512_maskz_loadu_ps(lanes, o + (size_t)h * ldo + c0);
        for (int t = 0; t < n; t++) {
            if (r == 0) { /* first pass over the tokens: fetch ahead, within the range */
                if (t + 8 < n) {
                    _mm_prefetch((const char *)(v->vals + (size_t)(t + 8) * v->nv), _MM_HINT_T0);
                    _mm_prefetch((const char *)(v->vals + (size_t)(t + 8) * v->nv) + 64, _MM_HINT_T0);
                }
                if (t + 16 < n) _mm_prefetch((const char *)(v->bits + (size_t)(t + 16) * v->nw), _MM_HINT_T0);
            }
            unsigned m = piece_mask(v->bits + (size_t)t * v->nw, g, r);
            if (!m) continue;
            const kvc_f16 *vp = v->vals + (size_t)t * v->nv + off[t];
            __m512 f = expand_piece(&vp, m);
            off[t] += __builtin_popcount(m);
            #pragma GCC unroll 8
            for (int h = 0; h < G; h++)
                acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)h * ldp + t]), f, acc[h]);
        }
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) _mm512_mask_storeu_ps(o + (size_t)h * ldo + c0, lanes, acc[h]);
    }
}

/* Dispatches heads in groups of up to 8 to the constant-G bodies. */
#define BY_HEADS(body, ...)                                                                        \
    switch (gb) {                                                                                  \
    case 1: body(__VA_ARGS__, 1); break;                                                           \
    case 2: body(__VA_ARGS__, 2); break;                                                           \
    case 3: body(__VA_ARGS__, 3); break;                                                           \
    case 4: body(__VA_ARGS__, 4); break;                                                           \
    case 5: body(__VA_ARGS__, 5); break;                                                           \
    case 6: body(__VA_ARGS__, 6); break;                                                           \
    case 7: body(__VA_ARGS__, 7); break;                                                           \
    default: body(__VA_ARGS__, 8); break;                                                          \
    }

#define QK_CALL(k, n, q, ldq, s, lds, G) qk_heads(k, n, q, G, ldq, s, lds)
#define PV_CALL(v, n, p, ldp, o, ldo, G) pv_heads(v, n, p, G, ldp, o, ldo)

static void qk_avx512(const kvc_packed_view *k, int n, const float *q, int G, int ldq, float *s,
                      int lds) {
    for (int h0 = 0; h0 < G; h0 += 8) {
        int gb = G - h0 < 8 ? G - h0 : 8;
        BY_HEADS(QK_CALL, k, n, q + (size_t)h0 * ldq, ldq, s + (size_t)h0 * lds, lds)
    }
}

static void pv_avx512(const kvc_packed_view *v, int n, const float *p, int G, int ldp, float *o,
                      int ldo) {
    for (int t0 = 0; t0 < n; t0 += PV_TOKENS) {
        kvc_packed_view w = *v;
        w.bits += (size_t)t0 * v->nw;
        w.vals += (size_t)t0 * v->nv;
        int nt = n - t0 < PV_TOKENS ? n - t0 : PV_TOKENS;
        for (int h0 = 0; h0 < G; h0 += 8) {
            int gb = G - h0 < 8 ? G - h0 : 8;
            BY_HEADS(PV_CALL, &w, nt, p + t0 + (size_t)h0 * ldp, ldp, o + (size_t)h0 * ldo, ldo)
        }
    }
}

void kvc_packed_register_avx512(kvc_packed_kernels *k) {
    k->qk = qk_avx512;
    k->pv = pv_avx512;
}
