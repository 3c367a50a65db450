/* The quant codecs (quant.c): KIVI-style tiles of keys quantized per channel
 * and values quantized per token, with the tile format, math and kernel of
 * quant_pack.h. */
#ifndef KVC_KV_CODEC_QUANT_H
#define KVC_KV_CODEC_QUANT_H

#include <stdint.h>

#include "kv/codec/codec.h"
#include "kv/codec/quant_pack.h"
#include "kvcomp.h"

/* ---- the codecs (quant.c) -------------------------------------------------- */

/* Parameters of a quant codec instance (kvc_codec.cfg). */
typedef struct kvc_quant_cfg {
    int bits;  /* 1..4 */
    int group; /* 1..KVC_QUANT_MAX_N: tokens per K group, channels per V group */
    /* 3 bits: 1 = KVmix's codes (eq. 12: every eleventh value of a row
     * clamped to 0..3, as its 11-per-word packing stores them); 0 = plain
     * 3-bit codes wherever the layout allows it (the integer layouts, which
     * store 3 bits per code in two planes: iquant.h). quant_k / quant_v
     * always pack 11 per word, so they always clamp. */
    int kvmix3;
} kvc_quant_cfg;

/* "quant_k": keys, per channel, in tiles of `group` tokens (the last tile of a
 * chunk may be shorter). Blob: header, then per tile [dim] mins, [dim] scales,
 * [dim][words(group)] codes, the channel's tokens along each row.
 * "quant_v": values, per token, in groups of `group` channels. Blob: header,
 * then per channel group [n] mins, [n] scales, [n][words(channels)] codes.
 * Payload = code words (including a word's unused slots); meta = scales, mins
 * and the header. Not appendable: chunks are sealed once full. */
extern const kvc_codec_ops kvc_codec_quant_k, kvc_codec_quant_v;

/* Checks a cfg (bits 1..4, group 1..KVC_QUANT_MAX_N); KVC_ERR_ARG naming the field. */
kvc_status kvc_quant_cfg_check(const kvc_quant_cfg *cfg);

/* Exact bytes of a quant_k / quant_v blob of n tokens of dim floats. */
void kvc_quant_k_bytes(const kvc_quant_cfg *cfg, int dim, int n, uint64_t *payload, uint64_t *meta);
void kvc_quant_v_bytes(const kvc_quant_cfg *cfg, int dim, int n, uint64_t *payload, uint64_t *meta);

#endif
