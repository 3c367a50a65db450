/* PackKV codecs "packkv_k" / "packkv_v" (PackKV, Jiang et al., "PackKV:
 * Reducing KV Cache Memory Footprint through LLM-Aware Lossy Compression";
 * docs/formats.md "packkv"): token-wise quantization with a relative scale,
 * then lossless bit-packing of the integer codes in packs of `pack` tokens of
 * one channel, in independent blocks of `block` tokens.
 *
 * Quantization of token t (vector x of dim floats): m_t = min x, scale
 * s_t = rel * (max x - m_t) rounded DOWN to bf16, code_tc = round((x_c - m_t) /
 * s_t) in 0..255, x_c ~ m_t + s_t code_tc. Rounding the scale down keeps the
 * error of every element within s_t / 2 <= rel/2 * range_t (plus the f32
 * rounding of the reconstruction), and the codes within 1.008 / rel <= 252 for
 * rel >= 1/250 (bf16 has 8 significant bits). A token whose range is 0 (or
 * whose rel * range underflows bf16's normal range, < 1.2e-38) gets s_t = 0:
 * every element decodes to m_t.
 *
 * Bit-packing: the codes of `pack` consecutive tokens (8 or 16) of channel c
 * form a pack; it stores its minimum code pmin (u8) and width w = ceil(log2(
 * max - pmin + 1)) (0..8, a nibble), then the residuals code - pmin in w bits
 * each, token 0 in the lowest bits, pack*w/8 bytes (byte aligned: pack is a
 * multiple of 8). The last pack of a ragged block is padded with residual-0
 * tokens (mins 0, scales 0).
 *
 * Grouped layout (cfg.group > 1, packs of 16 only): the packs of `group`
 * consecutive channels (4 for keys, 16 for values) form one unit with one
 * width, the largest of its items' widths (pmins stay per item). Residual i of
 * a unit sits in bits i*w .. i*w + w - 1, numbered so that every 64 residuals
 * (8w bytes, qword k from byte k*w) are the operand of one vpdpbusd: keys
 * token-major (i = 4t + c', c' the channel in the unit: dword t = 4 channels
 * of token t), values in runs of 4 tokens (i = 64 (t/4) + 4c' + t%4: dword c'
 * = 4 tokens of channel c'). A byte decoder (vpermb, vpmultishiftqb, a mask)
 * gives u8 codes that the integer kernels take without any float conversion,
 * one instruction per 64 codes, head and precision plane. The price is a few
 * percent more payload than per-item widths (docs/benchmarks.md "PackKV").
 *
 * Block (nb <= block tokens, np = ceil(nb/pack) packs per channel, npad =
 * np*pack, items = np*dim packs), byte offsets from its start:
 *   f32  mins[npad] | u16 scales[npad] (bf16) | u8 widths[(units+1)/2]
 *   (nibbles, unit u in the low nibble of byte u/2 when u is even; units =
 *   items / group) | u8 pmins[items] | residual bytes of the units in order.
 * Item order with group 1: keys pack-major (item = p*dim + c: the fused q.k
 * walks the channels of one pack with tokens in SIMD lanes); values
 * channel-major (item = c*np + p: the fused p.v walks the packs of one channel
 * with one accumulator per channel); kvc_pk_unit below for every group. Blocks are independent; the blob holds a table of
 * block offsets, so appending blocks never touches old ones.
 *
 * Channel centers (cfg.center = 1): an offset channel is one whose median
 * over the block's tokens exceeds KVC_PK_CENTER_RATIO times its spread (max -
 * min over the block) in magnitude: a near-constant that carries little
 * information but, in a token-wise range, sets every token's step (Qwen2's
 * key bias: token ranges of ~600 against ~1 of variation between tokens).
 * A block with offset channels stores u16 centers[dim] after the scales (the
 * f16 median for offset channels, 0 for the others) and the quantization
 * runs on x - center; a block without them stores none (a flag per block in
 * the blob). Other channels are not centered on purpose: a token-wise range
 * codes the token's extreme channels almost exactly, and those are the
 * outlier channels where queries are large too (centering every channel
 * halved SmolLM2's key error yet raised its KL by a third). The median, not
 * the mean: one outlier token must not move its channel's center. The stored
 * f16 value is what was subtracted, so x ~ m_t + s_t code_tc + center_c.
 *
 * Fused kernels (scalar reference here, SIMD in src/kernels/<isa>/
 * kv_packkv_<isa>.c), with code = pmin + r:
 *   q.k_t = s_t (sum_c q_c pmin_pc + sum_c q_c r_tc) + m_t sum_c q_c
 *   o_c  += sum_t (p_t s_t) r_tc + pmin_pc sum_t p_t s_t + sum_t p_t m_t
 * Residuals are unpacked in registers (tokens in lanes), never to memory.
 * The kernels compute on the centered values; the codec's qk / pv add the
 * centers' terms, q.center per block and center_c sum_t p_t, once per block. */
#ifndef KVC_KV_CODEC_PACKKV_H
#define KVC_KV_CODEC_PACKKV_H

#include <stdint.h>

#include "kv/codec/codec.h"

enum {
    KVC_PK_MAX_CODE = 255,
    KVC_PK_MAX_BLOCK = 1024, /* tokens per block */
    KVC_PK_MAX_DIM = 1024,   /* channels per vector */
    KVC_PK_OVERREAD = 64,    /* bytes the SIMD kernels may read past an item or unit */
    KVC_PK_KGROUP = 4,       /* key channels per unit in the grouped layout */
    KVC_PK_VGROUP = 16,      /* value channels per unit in the grouped layout */
};

#define KVC_PK_MIN_REL (1.0f / 250.0f)
#define KVC_PK_CENTER_RATIO 2.0f /* offset channel: |median| > this * (max - min) */

/* Parameters of one codec instance (kc->cfg / vc->cfg). */
typedef struct kvc_pk_cfg {
    float rel; /* scale = rel * token range; KVC_PK_MIN_REL .. 1 */
    int block; /* tokens per independent block, a multiple of pack */
    int pack;  /* tokens per pack: 8 or 16 */
    int center; /* 1: subtract the block medians of offset channels (f16) before quantizing */
    int group;  /* channels sharing one width: 1 (per pack and channel, the paper's), or the
                   grouped layout: KVC_PK_KGROUP for keys, KVC_PK_VGROUP for values; 0 counts as 1 */
} kvc_pk_cfg;

/* Validates a cfg; the message names the field and value. */
kvc_status kvc_pk_cfg_check(const kvc_pk_cfg *cfg, const char *who);

/* Quantizes one token: *mn, *scale (bf16 bits) and dim codes. */
void kvc_pk_quantize(const float *x, int dim, float rel, float *mn, uint16_t *scale, uint8_t *codes);

/* Width of a residual range 0..r (0 for r = 0). */
static inline int kvc_pk_width(unsigned r) { return r ? 32 - __builtin_clz(r) : 0; }

/* The centers of n tokens (rows ld apart) into centers[dim]: the f16 median
 * of each offset channel (|median| > KVC_PK_CENTER_RATIO * (max - min)), 0 for
 * the others; NaN counts as 0 and values beyond f16 clamp to +-65504.
 * Returns the number of nonzero centers. */
int kvc_pk_centers(const float *x, int n, int ld, int dim, uint16_t *centers);

/* Quantizes n tokens (rows ld apart) as a codec with these parameters does
 * one block: when cfg->center and the tokens have offset channels, centers
 * gets them (kvc_pk_centers) and the tokens are quantized minus them. mins[n],
 * scales[n] (either may be NULL) and codes (rows ldc apart) as
 * kvc_pk_quantize gives them. Returns 1 if the tokens were centered. */
int kvc_pk_quantize_block(const kvc_pk_cfg *cfg, const float *x, int n, int ld, int dim,
                          uint16_t *centers, float *mins, uint16_t *scales, uint8_t *codes, int ldc);

/* A view of one encoded block. */
typedef struct kvc_pk_block {
    const float *mins;      /* [npad] */
    const uint16_t *scales; /* [npad] bf16 */
    const uint16_t *centers; /* [dim] f16, or NULL when the block stores none */
    const uint8_t *widths;  /* [(items+1)/2] nibbles */
    const uint8_t *pmins;   /* [items] */
    const uint8_t *data;    /* residual bytes, item order */
    int n, np, dim, pack;
    int vmajor;             /* 0: keys (pack-major items), 1: values (channel-major) */
    int group;              /* items per unit (one width, interleaved residuals) */
} kvc_pk_block;

/* Units in the order of the residual bytes: keys pack-major (u = p * dim/group
 * + c/group), values channel-group-major (u = c/group * np + p). Item = the
 * unit's items in channel order: u * group + c % group (pmins are per item). */
static inline int kvc_pk_unit(const kvc_pk_block *b, int p, int c) {
    return b->vmajor ? c / b->group * b->np + p : p * (b->dim / b->group) + c / b->group;
}
static inline int kvc_pk_item(const kvc_pk_block *b, int p, int c) {
    return kvc_pk_unit(b, p, c) * b->group + c % b->group;
}
/* Number of the residual of token t (< pack) of a unit's k-th channel: keys
 * token-major (t * group + k); grouped values in runs of 4 tokens per channel
 * ((t/4) * 4 group + 4k + t%4); values with group 1: t. */
static inline int kvc_pk_rindex(int vmajor, int group, int t, int k) {
    return !vmajor ? t * group + k : group == 1 ? t : (t >> 2) * 4 * group + 4 * k + (t & 3);
}
/* Width of unit u (the item itself when group is 1). */
static inline int kvc_pk_unit_width(const kvc_pk_block *b, int u) {
    return (b->widths[u >> 1] >> ((u & 1) * 4)) & 15;
}
static inline int kvc_pk_item_width(const kvc_pk_block *b, int item) {
    return kvc_pk_unit_width(b, item / b->group);
}

/* Residual number i (kvc_pk_rindex) of a unit whose bytes start at src. */
static inline int kvc_pk_residual(const uint8_t *src, int w, int i) {
    int bit = i * w;
    unsigned two = src[bit >> 3] | (w && (bit & 7) + w > 8 ? (unsigned)src[(bit >> 3) + 1] << 8 : 0u);
    return (int)((two >> (bit & 7)) & ((1u << w) - 1));
}

/* Byte offset of unit u's residuals from b->data (sums the widths before it);
 * with group 1 a unit is an item. */
uint32_t kvc_pk_unit_offset(const kvc_pk_block *b, int u);

/* The fused kernels on one block, for block tokens j0 <= j < j1:
 * qk: s[h*lds + j - j0] = q_h . key_j, h < G, q rows ldq apart;
 * pv: o[h*ldo + c] += sum_j p[h*ldp + j - j0] * value_jc. */
typedef struct kvc_pk_kernels {
    void (*qk)(const kvc_pk_block *b, const float *q, int ldq, int G, int j0, int j1, float *s,
               int lds);
    void (*pv)(const kvc_pk_block *b, const float *p, int ldp, int G, int j0, int j1, float *o,
               int ldo);
} kvc_pk_kernels;

extern kvc_pk_kernels kvc_pk_k;          /* active */
extern const kvc_pk_kernels kvc_pk_ref;  /* scalar reference */

/* SIMD variants: each overwrites the entries it implements (codec_registry.c). */
void kvc_pk_register_avx2(kvc_pk_kernels *k);
void kvc_pk_register_avx512(kvc_pk_kernels *k);

/* Blocks of an encoded blob (tests, kernels' benchmarks). */
int kvc_pk_n_blocks(const void *blob);
kvc_pk_block kvc_pk_block_of(const void *blob, int i);

/* Codec tables. */
extern const kvc_codec_ops kvc_codec_packkv_k, kvc_codec_packkv_v;

#endif
