/* The "blocks" selector (MosaicKV §4.2 stage 2, §5.2): units are blocks of B
 * consecutive tokens of a chunk (B = 4, 8 or 16; the last block may be shorter);
 * each block is represented by the mean of its keys in the chunk's stored
 * space (rotated, channel-truncated), channel-compressed like the keys
 * themselves (packed_f16, packed.h). A block's score for the G query heads of
 * a group is the largest q'_h · mean over the heads (a block one head needs
 * is kept), computed by the packed q·k kernel on the packed block keys. */
#ifndef KVC_KV_SELECT_BLOCKS_H
#define KVC_KV_SELECT_BLOCKS_H

#include "kv/codec/packed.h"
#include "kv/select/selector.h"

/* Builds the index of n keys kt [n][ld] (dim floats each, already in the
 * chunk's stored space) with blocks of B tokens, the block keys packed with
 * cfg. Names the bad field (B outside [1, 64], cfg, n). */
kvc_status kvc_blocks_create(const float *kt, int n, int ld, int dim, int B,
                             const kvc_packed_cfg *cfg, kvc_select_index *out);

extern const kvc_selector_ops kvc_selector_blocks;

#endif
