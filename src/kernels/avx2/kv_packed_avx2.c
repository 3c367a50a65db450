/* AVX2 kernels of the packed two-D format (src/kv/codec/packed.h). AVX2 has
 * no expand instruction: a vector is walked in pieces of 8 channels, the
 * piece's 8-bit channel mask (group bits spread by PDEP, or by shifts and
 * masks where PDEP is microcoded: base/bits.h) indexes a table of
 * VPERMPS indices that moves the piece's packed values (8 f16 loaded and
 * widened by VCVTPH2PS) to their channels, and a lane mask zeroes the rest.
 * Same loop structure as the AVX-512 kernels (kv_packed_avx512.c: bodies for
 * constant head counts and group sizes); reading 16 bytes at the piece's
 * first value relies on the blob's KVC_PACKED_PAD. Vectors that keep few of
 * their channels take the q·k of kv_packed_lanes_avx2.c instead, which pays
 * per kept value (kvc_packed_lanes_fit).
 * Scalar reference: src/kv/codec/packed.c. */
#include <immintrin.h>
#include <string.h>

#include "base/bits.h"
#include "base/cpu.h"
#include "kernels/avx2/kv_avx2_util.h"
#include "kernels/avx2/kv_packed_lanes_avx2.h"
#include "kv/codec/packed.h"
#include "kv/codec/packed_dispatch.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum { PV_TOKENS = 256 };

/* expand_tab[m]: for a piece with channel mask m, the VPERMPS index of each
 * lane (the rank of the lane's bit among the set bits of m) and the lane mask
 * that zeroes the lanes outside m, in one 64-byte line; filled once by the
 * register function. */
static struct {
    int32_t idx[8];
    int32_t keep[8];
} expand_tab[256] __attribute__((aligned(64)));

static void fill_expand_tab(void) {
    for (int m = 0; m < 256; m++) {
        int rank = 0;
        for (int lane = 0; lane < 8; lane++) {
            int on = m >> lane & 1;
            expand_tab[m].idx[lane] = on ? rank++ : 0;
            expand_tab[m].keep[lane] = on ? -1 : 0;
        }
    }
}

/* PDEP or its shift-and-mask equivalent (kvc_cpu_fast_pdep, set at
 * registration): a predictable branch per call against a PDEP of hundreds of
 * cycles on AMD Zen 1 and 2. */
static int fast_pdep;

ALWAYS_INLINE uint64_t spread2(uint32_t x) {
    return fast_pdep ? _pdep_u64(x, 0x5555555555555555ull) : kvc_spread2_u32(x);
}
ALWAYS_INLINE uint64_t spread4(uint16_t x) {
    return fast_pdep ? _pdep_u64(x, 0x1111111111111111ull) : kvc_spread4_u16(x);
}

/* The 8-channel mask of piece r: its 8 / g group bits, each spread over its g
 * channels. g is a compile-time constant after inlining (a run-time g cost
 * an integer division per piece). */
ALWAYS_INLINE unsigned piece_mask(const uint32_t *bits, const int g, int r) {
    const int gpp = 8 / g;
    const int pos = r * gpp;
    unsigned gb = (bits[pos >> 5] >> (pos & 31)) & ((1u << gpp) - 1);
    if (g == 1) return gb;
    if (g == 2) return (unsigned)spread2(gb) * 3u;
    return (unsigned)spread4((uint16_t)gb) * 15u;
}

/* The 8 channels of a piece with channel mask m whose packed values start at p. */
ALWAYS_INLINE __m256 expand_at(const kvc_f16 *p, unsigned m) {
    __m256 x = kvc_load_f16x8(p);
    __m256 y = _mm256_permutevar8x32_ps(x, _mm256_load_si256((const __m256i *)expand_tab[m].idx));
    return _mm256_and_ps(y, _mm256_load_ps((const float *)expand_tab[m].keep));
}

ALWAYS_INLINE __m256 expand_piece(const kvc_f16 **p, unsigned m) {
    __m256 x = expand_at(*p, m);
    *p += __builtin_popcount(m);
    return x;
}

/* The channel masks of pieces r0 .. r0+7 (those below np), byte k for piece
 * r0+k, from the token's group bits at once: 64 / g group bits, spread over
 * their g channels each. r0 is a multiple of 8, so the bits start at a
 * 64-bit (g = 1), 32-bit (g = 2) or 16-bit (g = 4) boundary. */
ALWAYS_INLINE uint64_t pieces_mask(const uint32_t *bits, int nw, const int g, int r0, int np) {
    const int pos = r0 * (8 / g), w0 = pos >> 5;
    uint64_t gb = bits[w0] >> (pos & 31), m;
    if (g == 1) m = w0 + 1 < nw ? gb | (uint64_t)bits[w0 + 1] << 32 : gb;
    else if (g == 2) m = spread2((uint32_t)gb) * 3u;
    else m = spread4((uint16_t)gb) * 15u;
    return np - r0 >= 8 ? m : m & ((1ull << 8 * (np - r0)) - 1);
}

/* The output's channels of piece r (8, or the last 4: d is a multiple of 4)
 * with plain loads and stores: masked stores are microcoded on AMD Zen. */
ALWAYS_INLINE __m256 load_piece(const float *o, int d, int r) {
    if (8 * r + 8 <= d) return _mm256_loadu_ps(o + 8 * r);
    return _mm256_insertf128_ps(_mm256_setzero_ps(), _mm_loadu_ps(o + 8 * r), 0);
}
ALWAYS_INLINE void store_piece(float *o, int d, int r, __m256 x) {
    if (8 * r + 8 <= d) _mm256_storeu_ps(o + 8 * r, x);
    else _mm_storeu_ps(o + 8 * r, _mm256_castps256_ps128(x));
}

/* The query's channels of piece r: 8, or the last 4 (d is a multiple of 4)
 * with zeros above; plain loads, which the FMAs take as memory operands. */
ALWAYS_INLINE __m256 query_piece(const float *q, int d, int r) {
    if (8 * r + 8 <= d) return _mm256_loadu_ps(q + 8 * r);
    return _mm256_insertf128_ps(_mm256_setzero_ps(), _mm_loadu_ps(q + 8 * r), 0);
}

/* Heads [0, G) and group size g compile-time constants after inlining, so that
 * the accumulators stay in registers. Every piece is expanded (an empty one
 * gives zeros): the per-vector masks are not predictable, and a branch on
 * them cost more than the work; where each piece's values start comes from
 * the token's masks at once (kvc_piece_offsets). */
ALWAYS_INLINE void qk_heads(const kvc_packed_view *k, int n, const float *q, const int G, int ldq,
                            float *s, int lds, const int g) {
    const int d = k->d, np = (d + 7) / 8, nw = k->nw, nv = k->nv;
    for (int t = 0; t < n; t++) {
        const uint32_t *bits = k->bits + (size_t)t * nw;
        const kvc_f16 *vp = k->vals + (size_t)t * nv;
        __m256 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) acc[h] = _mm256_setzero_ps();
        for (int r0 = 0; r0 < np; r0 += 8) {
            const uint64_t m = pieces_mask(bits, nw, g, r0, np), off = kvc_piece_offsets(m);
            const int pieces = np - r0 < 8 ? np - r0 : 8;
            for (int j = 0; j < pieces; j++) {
                __m256 f = expand_at(vp + (off >> 8 * j & 0xff), (unsigned)(m >> 8 * j) & 0xff);
                #pragma GCC unroll 8
                for (int h = 0; h < G; h++)
                    acc[h] = _mm256_fmadd_ps(f, query_piece(q + (size_t)h * ldq, d, r0 + j), acc[h]);
            }
            vp += __builtin_popcountll(m);
        }
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) s[(size_t)h * lds + t] = kvc_hsum256_ps(acc[h]);
    }
}

/* Heads [0, G) over tokens [0, n), n <= PV_TOKENS; G and g constant after
 * inlining. */
ALWAYS_INLINE void pv_heads(const kvc_packed_view *v, int n, const float *p, const int G, int ldp,
                            float *o, int ldo, const int g) {
    const int d = v->d, np = (d + 7) / 8, nw = v->nw, nv = v->nv;
    int off[PV_TOKENS];
    memset(off, 0, (size_t)n * sizeof *off);
    for (int r = 0; r < np; r++) {
        __m256 acc[8];
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) acc[h] = load_piece(o + (size_t)h * ldo, d, r);
        for (int t = 0; t < n; t++) {
            unsigned m = piece_mask(v->bits + (size_t)t * nw, g, r);
            if (!m) continue;
            const kvc_f16 *vp = v->vals + (size_t)t * nv + off[t];
            __m256 f = expand_piece(&vp, m);
            off[t] += __builtin_popcount(m);
            #pragma GCC unroll 8
            for (int h = 0; h < G; h++)
                acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(p[(size_t)h * ldp + t]), f, acc[h]);
        }
        #pragma GCC unroll 8
        for (int h = 0; h < G; h++) store_piece(o + (size_t)h * ldo, d, r, acc[h]);
    }
}

KVC_PACKED_ENTRY_POINTS(qk_avx2, pv_avx2)

/* Vectors that keep few values take the q·k that pays per value. */
static void qk_any_avx2(const kvc_packed_view *k, int n, const float *q, int G, int ldq, float *s, int lds) {
    if (kvc_packed_lanes_fit(k, G)) kvc_packed_qk_lanes_avx2(k, n, q, G, ldq, s, lds);
    else qk_avx2(k, n, q, G, ldq, s, lds);
}

void kvc_packed_register_avx2(kvc_packed_kernels *k) {
    fill_expand_tab();
    fast_pdep = kvc_cpu_fast_pdep();
    k->qk = qk_any_avx2;
    k->pv = pv_avx2;
}
