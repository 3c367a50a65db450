/* Integer-kernel layouts of the KIVI / KVmix quantization ("iq_k", "iq_v"):
 * the same asymmetric min/scale codes as quant.h (same encoder, same f16
 * parameters, same bytes within padding), arranged so that attention runs on
 * integer dot products (AVX-512 VNNI vpdpbusd; AVX2 vpmaddubsw + vpmaddwd)
 * instead of unpacking every code to f32.
 *
 * Keys, per channel c in tiles of `group` tokens (scale s_c, min m_c):
 *   q.k_t = sum_c q_c (s_c code_tc + m_c) = alpha * sum_c qi_c code_tc + sum_c q_c m_c
 * with qi = round(q_c s_c / alpha) a 15-bit integer query per tile and head,
 * alpha = (max_c |q_c| / 32512) * (max_c s_c): the bound of |q_c s_c| from the
 * query's largest element (once per call and head) and the tile's largest
 * scale (stored with the blob at encode, shared by the heads), so a tile costs
 * no reductions beyond the constant term. qi is split in two int8 halves
 * qi = 256 hi + lo (hi in [-127, 127], lo the low byte, in [-128, 127]) that
 * take one vpdpbusd each: an int8 query alone (alpha = max/127) lost too much
 * on the keys' outlier channels, whose scale is ~16x the others'
 * (docs/benchmarks.md). Code layout of a tile: blocks of 16 tokens; in a
 * block, word w of token t (lane t of a 512-bit register) holds channels
 * [w*cpw, (w+1)*cpw) with cpw = 32/bits: byte b, bit field k (bits*k ..) is
 * channel w*cpw + 4k + b. So (word >> bits*k) & mask is four channels of one
 * token per 32-bit lane, one vpdpbusd against the query bytes 4k..4k+3 of the
 * word: no horizontal sums, tokens stay in lanes. After the tiles the blob
 * holds two floats per tile, its largest scale and the reciprocal (written
 * at encode), so that folding the query into a tile needs no reduction and
 * no division.
 *
 * Values, per token t in groups of `group` channels g (scale s_tg, min m_tg):
 *   o_c += sum_t p_t (s_tg code_tc + m_tg) = beta * sum_t wq_t code_tc + sum_t p_t m_tg
 * with wq = round(p_t s_tg / beta) in 0..255 per block of 32 tokens, head and
 * channel group, beta = max_t p_t s_tg / 255. Code layout: word blocks of
 * tpw = 32/bits tokens; in a block, word c (lane c) holds channel c of the
 * block's tokens: byte b, bit field k is token 4k + b. (word >> bits*k) & mask
 * is four tokens of one channel per lane, one vpdpbusd against the four
 * weights (u8) of those tokens.
 *
 * Precision: the query rounding is at most half of alpha per channel, i.e.
 * 1/65024 of max|q| * max s (the exact max_c |q_c s_c| is smaller by at most
 * the ratio of the tile's largest scale to the scale of q's largest channel), the weights' at most 1/510 of the block's largest
 * p_t s_tg per token (KL against the float kernels in docs/benchmarks.md). bits 1-4 (3: two planes, below); `group` a multiple of 16;
 * head dim a multiple of 16 up to 256 (other configurations use quant_k / quant_v). */
#ifndef KVC_KV_CODEC_IQUANT_H
#define KVC_KV_CODEC_IQUANT_H

#include <stdint.h>

#include "base/f16.h"
#include "kv/codec/quant.h"

enum {
    KVC_IQ_MAX_DIM = 256, /* head dims the integer layouts take */
    KVC_IQ_KBLOCK = 16, /* tokens per key code block (lanes of a 512-bit register) */
    KVC_IQ_VBLOCK = 32, /* tokens per value weight block (one beta per head and group) */
};

/* A key tile: n tokens (<= group) of dim channels. */
typedef struct kvc_iq_ktile {
    const kvc_f16 *mins, *scales; /* [dim] */
    const uint32_t *codes;        /* [ceil(n/16)][words][16], words = kvc_iq_kwords */
    int n, dim, bits;
    float smax, inv_smax; /* kvc_iq_tile_smax(scales, dim) and 1 / smax, stored at encode */
} kvc_iq_ktile;

/* The values of one chunk: n tokens, dim channels in groups of `group`. */
typedef struct kvc_iq_vblob {
    const kvc_f16 *mins, *scales; /* [n_groups][npad], npad = n rounded up to 32 */
    const uint32_t *codes;        /* [ceil(n/tpw)][dim] */
    int n, npad, dim, group, bits;
} kvc_iq_vblob;

/* 3-bit codes are two planes in the 2- and 1-bit layouts: code = lo + 4 hi,
 * lo = code & 3 in 2-bit words, hi = code >> 2 in 1-bit words, so the
 * kernels' shift-and-mask extraction stays bytewise (3 does not divide 8).
 * Keys: a token's 2-bit words, then its 1-bit words. Values: per block of 32
 * tokens, the rows of the 2-bit plane (tokens 0-15, 16-31), then the row of
 * the 1-bit plane (tokens 0-31). Other widths have one plane. */
static inline int kvc_iq_lo_bits(int bits) { return bits == 3 ? 2 : bits; }

/* Channels per key word, key words per token (dim padded with zero codes;
 * 3 bits: both planes' words). */
static inline int kvc_iq_cpw(int bits) { return 32 / bits; }
static inline int kvc_iq_plane_kwords(int bits, int dim) { return (dim + 32 / bits - 1) / (32 / bits); }
static inline int kvc_iq_kwords(int bits, int dim) {
    return bits == 3 ? kvc_iq_plane_kwords(2, dim) + kvc_iq_plane_kwords(1, dim) : kvc_iq_plane_kwords(bits, dim);
}

/* Field of channel c in a key word of `bits` bits: word c / cpw, byte b, bit
 * field k (see the layout above). */
static inline int kvc_iq_kfield(const kvc_iq_ktile *t, int tok, int w, int c, int bits) {
    int r = c % kvc_iq_cpw(bits), k = r / 4, b = r % 4;
    uint32_t word = t->codes[((size_t)(tok / KVC_IQ_KBLOCK) * kvc_iq_kwords(t->bits, t->dim) + w) *
                                 KVC_IQ_KBLOCK + tok % KVC_IQ_KBLOCK];
    return (int)((word >> (8 * b + bits * k)) & ((1u << bits) - 1));
}

/* Code of key token t (in the tile), channel c; of value token t, channel c. */
static inline int kvc_iq_kcode(const kvc_iq_ktile *t, int tok, int c) {
    if (t->bits != 3) return kvc_iq_kfield(t, tok, c / kvc_iq_cpw(t->bits), c, t->bits);
    int lo = kvc_iq_kfield(t, tok, c / 16, c, 2);
    int hi = kvc_iq_kfield(t, tok, kvc_iq_plane_kwords(2, t->dim) + c / 32, c, 1);
    return lo + 4 * hi;
}

/* The word row of value token t in a plane of `bits` bits (row 0 of a
 * 3-bit block is its 2-bit plane's first) and the field's shift. */
static inline size_t kvc_iq_vrow(int bits, int tok, int plane_bits, int first_row) {
    return (size_t)(tok / KVC_IQ_VBLOCK) * bits + first_row + (size_t)(tok % KVC_IQ_VBLOCK) / (32 / plane_bits);
}
static inline int kvc_iq_vshift(int tok, int plane_bits) {
    int r = tok % (32 / plane_bits);
    return 8 * (r % 4) + plane_bits * (r / 4);
}
/* Row wb (0 <= wb < bits) of a 32-token value block, as the kernels walk
 * it: the bits of its codes (3 bits: two 2-bit rows, then the 1-bit row)
 * and the first of the block's eight weight words (four tokens each) its
 * fields take, in order. */
static inline int kvc_iq_vrow_bits(int bits, int wb) { return bits == 3 ? (wb < 2 ? 2 : 1) : bits; }
static inline int kvc_iq_vrow_first_word(int bits, int wb) {
    return bits == 3 && wb == 2 ? 0 : wb * (8 / kvc_iq_vrow_bits(bits, wb));
}
static inline int kvc_iq_vcode(const kvc_iq_vblob *v, int tok, int c) {
    int lb = kvc_iq_lo_bits(v->bits);
    uint32_t lw = v->codes[kvc_iq_vrow(v->bits, tok, lb, 0) * v->dim + c];
    int code = (int)((lw >> kvc_iq_vshift(tok, lb)) & ((1u << lb) - 1));
    if (v->bits == 3) {
        uint32_t hw = v->codes[kvc_iq_vrow(3, tok, 1, 2) * v->dim + c];
        code += 4 * (int)((hw >> kvc_iq_vshift(tok, 1)) & 1u);
    }
    return code;
}

/* The kernels (one table; scalar references below, SIMD variants registered by
 * kvc_codecs_init from src/kernels/<isa>/kv_iquant_<isa>.c).
 *
 * qk: s[h*lds + j - j0] = q_h . key_j for tokens j0 <= j < j1 of the tile,
 *     h < G, q rows of dim floats (ldq apart).
 * pv: o[h*ldo + c] += sum_j p[h*ldp + j - j0] * value_jc for tokens j0..j1 of
 *     the blob, c < dim. Weight blocks are the blob's aligned 32-token blocks. */
typedef struct kvc_iq_kernels {
    /* tiles t[0..nt): consecutive tiles of one blob, t[i] holding tokens
     * [i*group, i*group + t[i].n) of the run (all but the last full); j0 < j1
     * count from the first tile's first token. */
    void (*qk)(const kvc_iq_ktile *t, int nt, const float *q, int ldq, int G, int j0, int j1, float *s,
               int lds);
    void (*pv)(const kvc_iq_vblob *v, const float *p, int ldp, int G, int j0, int j1, float *o,
               int ldo);
} kvc_iq_kernels;

extern kvc_iq_kernels kvc_iq_k;           /* active */
extern const kvc_iq_kernels kvc_iq_ref;   /* scalar reference */

/* SIMD variants: each overwrites the entries it implements (codec_registry.c). */
void kvc_iq_register_avx2(kvc_iq_kernels *k);
void kvc_iq_register_avx512(kvc_iq_kernels *k);

/* The integer query of one head for one tile, given qmax = max_c |q_c| of
 * the head (kvc_iq_qmax) and QMAX = kvc_iq_query_max(bits): smax = max_c s_c,
 * Q_c = round((q_c (QMAX / qmax)) (s_c (1 / smax))) (|Q_c| <= QMAX: both
 * factors are at most 1 up to rounding), hi[c] = floor((Q_c + 128) / 256),
 * lo[c] = Q_c - 256 hi[c] for c < dim (0 beyond, up to a multiple of 32);
 * returns alpha = (qmax * (1 / QMAX)) * smax (0, with zero halves, when q or
 * the scales are all zero or not finite). The SIMD kernels compute the same
 * values: the same float operations in the same order, one rounding.
 *
 * The query's precision follows the codes' (docs/design-kv.md "Integer
 * KIVI / KVmix codecs"): 15 bits (two int8 halves, two dot products per
 * code) for 3- and 4-bit keys, one byte (|Q| <= 127, hi = 0: one dot product) for
 * 1- and 2-bit keys, whose codes round far more coarsely (a 2-bit code to
 * 1/6 of its channel's range, the query to 1/254 of its largest element).
 * 3-bit keys keep 15 bits: with one byte, test_iquant measured score errors
 * of 6% of sum_c |q_c k_c| at head dim 16. All tiles of one kernel call have
 * the same bits. */
enum {
    KVC_IQ_QMAX_WIDE = 32512, /* 127 * 256 */
    KVC_IQ_QMAX_NARROW = 127,
};
static inline int kvc_iq_query_max(int bits) { return bits <= 2 ? KVC_IQ_QMAX_NARROW : KVC_IQ_QMAX_WIDE; }
float kvc_iq_qmax(const float *q, int dim);
/* max_c s_c of a key tile's scales (the loop of kvc_iq_query_ref), what the encoder stores
 * per tile beside 1 / smax so that the kernels need no reduction per tile. */
float kvc_iq_tile_smax(const kvc_f16 *scales, int dim);
float kvc_iq_query_ref(const float *q, float qmax, const kvc_f16 *scales, int dim, int bits, int8_t *hi,
                       int8_t *lo);

/* Views of an iq_k blob's tile t and of an iq_v blob (kernels' tests). */
kvc_iq_ktile kvc_iq_ktile_of(const void *blob, int t);
kvc_iq_vblob kvc_iq_vblob_of(const void *blob);

/* Codec tables. */
extern const kvc_codec_ops kvc_codec_iq_k, kvc_codec_iq_v;

/* 1 when the integer layouts support this configuration (bits 1-4, group a
 * multiple of 16, dim a multiple of 16 up to KVC_IQ_MAX_DIM). */
int kvc_iq_supports(const kvc_quant_cfg *cfg, int dim);

/* The K and V codecs a quantizing method should use for cfg at dim: iq_k /
 * iq_v when supported, else quant_k / quant_v. */
void kvc_quant_codecs(const kvc_quant_cfg *cfg, int dim, kvc_codec *k, kvc_codec *v);

#endif
