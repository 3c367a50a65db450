/* Asymmetric min/scale low-bit quantization (KIVI; KVmix paper "Asymmetric
 * Low-Bit Quantization", eq. 12), implemented in quant_pack.c: the math, the
 * bit packing and the fused dequantise-and-multiply kernel shared by the quant
 * codecs (quant.h), the bitmap+quant codec, the kivi and kvmix methods and the
 * SIMD kernels in src/kernels/<isa>/kv_quant_*.c.
 *
 * A quantized *tile* is `rows` rows of `n` values. Each row has its own min and
 * scale (f16) and its values packed into 32-bit words:
 *   bits 1, 2, 4: 32/bits values per word, value i of the word at bit i*bits;
 *   bits 3:       11 values per word: ten 3-bit values at bits 0..29 and an
 *                 eleventh of 2 bits at bits 30..31, its code clamped to [0,3].
 * A row of n values takes ceil(n / values_per_word) words; unused slots are 0.
 * Keys are tiles with rows = channels and n = tokens of one group (quantized
 * per channel, grouped along tokens); values are tiles with rows = tokens and
 * n = channels of one group (quantized per token, grouped along channels).
 *
 * Encoding rounds the min *down* and the scale *up* to f16, so every value of
 * the row lies in [min, min + qmax*scale] and the error of a code that is not
 * clamped is at most scale/2 (plus f32 rounding). A row whose max equals its
 * min gets scale 0 and codes 0. Values beyond the f16 range (|x| > 65504) are
 * clipped to it. NaN encodes as code 0. */
#ifndef KVC_KV_CODEC_QUANT_PACK_H
#define KVC_KV_CODEC_QUANT_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "base/f16.h"

#define KVC_QUANT_MAX_N 128 /* values per row a tile may hold (group size limit) */

/* Values per 32-bit word: 32, 16, 11, 8 for bits 1, 2, 3, 4; 0 for other bits. */
static inline int kvc_quant_vpw(int bits) {
    return bits == 1 ? 32 : bits == 2 ? 16 : bits == 3 ? 11 : bits == 4 ? 8 : 0;
}

/* Words for a row of n values. */
static inline int kvc_quant_words(int bits, int n) {
    int v = kvc_quant_vpw(bits);
    return v ? (n + v - 1) / v : 0;
}

/* Largest code of value i of a row (3 bits: 3 for the eleventh slot of a word). */
static inline int kvc_quant_qmax(int bits, int i) {
    if (bits == 3) return i % 11 == 10 ? 3 : 7;
    return (1 << bits) - 1;
}

/* A read-only view of one tile. Row r: mins[r], scales[r], words[r*wpr .. +wpr)
 * with wpr = kvc_quant_words(bits, n). */
typedef struct kvc_qtile {
    const kvc_f16 *mins;     /* [rows] */
    const kvc_f16 *scales;   /* [rows] */
    const uint32_t *words;   /* [rows][wpr] */
    int rows, n, bits;
} kvc_qtile;

/* Packs n codes (each already within its slot's qmax) into kvc_quant_words(bits, n) words. */
void kvc_quant_pack(int bits, const uint8_t *codes, int n, uint32_t *words);
/* Unpacks n codes. */
void kvc_quant_unpack(int bits, const uint32_t *words, int n, uint8_t *codes);

/* f16 rounding toward -inf / +inf (finite inputs; clamped to +-65504). */
kvc_f16 kvc_f16_round_down(float x);
kvc_f16 kvc_f16_round_up(float x);

/* The f16 min and scale of a row from its smallest and largest values (NaN
 * skipped; mn > mx: no value, all NaN), as the encoder below computes them;
 * and the code of one value x of that row (minf, scalef: the f16 min and scale
 * as floats; qm: kvc_quant_qmax of its slot). The integer layouts (iquant.c)
 * encode through these two, so their codes equal the quant codecs'. */
void kvc_quant_params(float mn, float mx, int bits, kvc_f16 *min_out, kvc_f16 *scale_out);
static inline int kvc_quant_code(float x, float minf, float scalef, int qm) {
    if (!(scalef > 0.0f)) return 0;
    float v = (x - minf) / scalef;
    if (!(v > 0.0f)) return 0; /* also NaN */
    if (v >= (float)qm) return qm;
    int c = (int)(v + 0.5f);
    return c > qm ? qm : c;
}

/* Encodes `rows` rows of n values into a tile's arrays. Value i of row r is
 * x[r*row_stride + i*val_stride] (strides in floats, so keys given as
 * [token][channel] are encoded per channel with row_stride 1, val_stride D).
 * bits in 1..4, 1 <= n <= KVC_QUANT_MAX_N (checked by callers). */
void kvc_quant_encode(const float *x, ptrdiff_t row_stride, ptrdiff_t val_stride, int rows, int n,
                      int bits, kvc_f16 *mins, kvc_f16 *scales, uint32_t *words);

/* Decodes a tile to dense out[r*ldo + i] (reference and tests only: the attention
 * kernels never materialise a dense copy). */
void kvc_quant_decode(const kvc_qtile *t, float *out, ptrdiff_t ldo);

/* The fused kernel, for both qk and pv: for each of nw weight vectors w_h,
 *   out[h*ldo + i] += sum_r w[h*ldw + r] * (code[r][i] * scale[r] + min[r])   (i < n)
 * Keys: w = query heads over channels, out = scores over the group's tokens.
 * Values: w = probabilities over the tile's tokens, out = output channels of
 * the group. Codes are unpacked in registers; nothing dense is written. */
typedef void (*kvc_quant_wsum_fn)(const kvc_qtile *t, const float *w, ptrdiff_t ldw, int nw,
                                  float *out, ptrdiff_t ldo);

void kvc_quant_wsum_scalar(const kvc_qtile *t, const float *w, ptrdiff_t ldw, int nw, float *out,
                           ptrdiff_t ldo);
/* SIMD kernels (src/kernels/<isa>/kv_quant_<isa>.c): each sets *f to its
 * kernel; kvc_codecs_init calls them for the active ISA. */
void kvc_quant_register_avx2(kvc_quant_wsum_fn *f);
void kvc_quant_register_avx512(kvc_quant_wsum_fn *f);

/* The active kernel (kvc_quant_wsum_scalar until kvc_codecs_init runs). */
extern kvc_quant_wsum_fn kvc_quant_wsum_k;

#endif
