/* Bitmap tiles with KIVI-quantized kept values: MUSTAFAR joint application
 * with KIVI (the MUSTAFAR paper §4.2.2: "we first prune each token's KV cache before
 * quantization is performed"). The token-major bitmaps of bitmap.h select the
 * kept channels; the kept values are stored as 1/2/4-bit codes with f16 min
 * and scale, grouped the way KIVI groups them:
 *   keys   ("bitmap_quant_k"): per channel over a group of `group` tokens
 *          (min/scale from the kept values of that channel in the group);
 *   values ("bitmap_quant_v"): per token over groups of `group` consecutive
 *          kept values (in channel order).
 * Codes are packed per token with kvc_quant_pack (quant.h), so a token's codes
 * start at t * words_per_token. The paper ran this composition as simulated
 * quantization ("the current Mustafar kernel does not support low-bit
 * precision"); here it is a real codec with scalar qk / pv. */
#ifndef KVC_KV_CODEC_BITMAP_QUANT_H
#define KVC_KV_CODEC_BITMAP_QUANT_H

#include "kv/codec/codec.h"

typedef struct kvc_bitmap_quant_cfg {
    int keep;  /* kept values per vector, 0..dim */
    int bits;  /* 1, 2 or 4 */
    int group; /* K: tokens per min/scale group; V: kept values per group (1..128) */
} kvc_bitmap_quant_cfg;

extern const kvc_codec_ops kvc_codec_bitmap_quant_k, kvc_codec_bitmap_quant_v;

/* KVC_ERR_ARG naming the field when bits is not 1, 2 or 4 or group is out of range. */
kvc_status kvc_bitmap_quant_cfg_check(const kvc_bitmap_quant_cfg *cfg, int dim);

#endif
