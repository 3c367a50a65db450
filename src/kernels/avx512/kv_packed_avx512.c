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
#include "kv/codec/packed_dispatch.h"
#include "kernels/avx512/kv_avx512_util.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { PV_TOKENS = 256 };

/* The 16-channel mask of piece r (channels 16r .. 16r+15): the piece's
 * 16 / g group bits, each spread over its g channels. g is a compile-time
 * constant after inlining (a run-time g cost an integer division per token). */
ALWAYS_INLINE unsigned piece_mask(const uint32_t *bits, const int g, int r) {
    const int gpp = 16 / g;
    const int pos = r * gpp;
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

/* Query channels c0 .. c0+15 of head h: a plain load for a whole piece, a
 * masked one for the last piece of a head dim that is not a multiple of 16. */
ALWAYS_INLINE __m512 load_q(const float *q, int ldq, int h, int c0, __mmask16 lanes) {
    return lanes == 0xffff ? _mm512_loadu_ps(q + (size_t)h * ldq + c0)
                           : _mm512_maskz_loadu_ps(lanes, q + (size_t)h * ldq + c0);
}

/* The lanes of piece r that are channels of a d-channel vector. */
ALWAYS_INLINE __mmask16 piece_lanes(int d, int r) {
    int w = d - 16 * r;
    return (__mmask16)(w >= 16 ? 0xffff : w <= 0 ? 0 : (1u << w) - 1);
}

/* The 32-channel mask of word r (channels 32r .. 32r+31) for q·k: one
 * VPEXPANDW of a whole zmm per 32 channels halves the per-piece work (mask,
 * popcount, expand) against pieces of 16. */
ALWAYS_INLINE uint32_t word_mask(const uint32_t *bits, const int g, int r) {
    if (g == 1) return bits[r];
    const int gpw = 32 / g, pos = r * gpw;
    uint32_t gb = (bits[pos >> 5] >> (pos & 31)) & ((1u << gpw) - 1);
    if (g == 2) return _pdep_u32(gb, 0x55555555u) * 3u;
    return _pdep_u32(gb, 0x11111111u) * 15u;
}

/* Heads [0, G) and group size g compile-time constants after inlining, so that
 * the accumulators stay in registers and the masks need no division. A word
 * of 32 channels is expanded at once; its upper 16 channels are skipped when
 * they lie past d (d is a multiple of 4, so only the last word can be short). */
ALWAYS_INLINE void qk_heads(const kvc_packed_view *k, int n, const float *q, const int G, int ldq,
                            float *s, int lds, const int g) {
    const int d = k->d, nwd = (d + 31) / 32, nw = k->nw, nv = k->nv;
    const __mmask16 last_lo = piece_lanes(d, 2 * (nwd - 1)), last_hi = piece_lanes(d, 2 * nwd - 1);
    for (int t = 0; t < n; t++) {
        const uint32_t *bits = k->bits + (size_t)t * nw;
        const kvc_f16 *vp = k->vals + (size_t)t * nv;
        /* the two streams (bitmaps, values) run ahead of the hardware
         * prefetcher, within the range only: past its end lie tokens that a
         * selecting method skipped (the driver prefetches the next range) */
        if (t + 8 < n) {
            _mm_prefetch((const char *)(vp + 8 * (size_t)nv), _MM_HINT_T0);
            _mm_prefetch((const char *)(vp + 8 * (size_t)nv) + 64, _MM_HINT_T0);
        }
        if (t + 16 < n) _mm_prefetch((const char *)(bits + 16 * (size_t)nw), _MM_HINT_T0);
        __m512 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) acc[h] = _mm512_setzero_ps();
        for (int r = 0; r < nwd; r++) {
            uint32_t m = word_mask(bits, g, r);
            if (!m) continue;
            __m512i raw = _mm512_loadu_si512((const void *)vp);
            __asm__("" : "+v"(raw)); /* a plain load, as in expand_piece */
            vp += __builtin_popcount(m);
            __m512i x = _mm512_maskz_expand_epi16((__mmask32)m, raw);
            const int c0 = 32 * r;
            const __mmask16 lo = r + 1 < nwd ? 0xffff : last_lo, hi = r + 1 < nwd ? 0xffff : last_hi;
            __m512 f = _mm512_cvtph_ps(_mm512_castsi512_si256(x));
            #pragma GCC unroll 8
            for (int h = 0; h < G; h++) acc[h] = _mm512_fmadd_ps(f, load_q(q, ldq, h, c0, lo), acc[h]);
            if (hi) {
                f = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(x, 1));
                #pragma GCC unroll 8
                for (int h = 0; h < G; h++) acc[h] = _mm512_fmadd_ps(f, load_q(q, ldq, h, c0 + 16, hi), acc[h]);
            }
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

/* Heads [0, G) over tokens [0, n), n <= PV_TOKENS; G and g constant after
 * inlining. */
ALWAYS_INLINE void pv_heads(const kvc_packed_view *v, int n, const float *p, const int G, int ldp,
                            float *o, int ldo, const int g) {
    const int d = v->d, np = (d + 15) / 16, nw = v->nw, nv = v->nv;
    int off[PV_TOKENS];
    memset(off, 0, (size_t)n * sizeof *off);
    for (int r = 0; r < np; r++) {
        const int c0 = 16 * r;
        const __mmask16 lanes = piece_lanes(d, r);
        __m512 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) acc[h] = _mm512_maskz_loadu_ps(lanes, o + (size_t)h * ldo + c0);
        for (int t = 0; t < n; t++) {
            if (r == 0) { /* first pass over the tokens: fetch ahead, within the range */
                if (t + 8 < n) {
                    _mm_prefetch((const char *)(v->vals + (size_t)(t + 8) * nv), _MM_HINT_T0);
                    _mm_prefetch((const char *)(v->vals + (size_t)(t + 8) * nv) + 64, _MM_HINT_T0);
                }
                if (t + 16 < n) _mm_prefetch((const char *)(v->bits + (size_t)(t + 16) * nw), _MM_HINT_T0);
            }
            unsigned m = piece_mask(v->bits + (size_t)t * nw, g, r);
            if (!m) continue;
            const kvc_f16 *vp = v->vals + (size_t)t * nv + off[t];
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

KVC_PACKED_ENTRY_POINTS(qk_avx512, pv_avx512)

void kvc_packed_register_avx512(kvc_packed_kernels *k) {
    k->qk = qk_avx512;
    k->pv = pv_avx512;
}
