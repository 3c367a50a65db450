/* The "blocks" selector (MosaicKV §4.2 stage 2, §5.2): units are blocks of B
 * consecutive tokens of a chunk (B = 4, 8 or 16; the last block may be shorter);
 * each block is represented by the mean of its keys in the chunk's stored
 * space (rotated, channel-truncated), channel-compressed like the keys
 * themselves (the per-vector top groups of the packed codec, packed.h, kept).
 * A block's score for the G query heads of a group is the largest
 * q'_h · mean over the heads (a block one head needs is kept).
 *
 * Storage differs from the paper's: the sparsified means are kept dense,
 * channel-major in blocks of 16 (dot_block.h, zeros where elements were
 * dropped), not in the packed format. Scoring reads every block key at every
 * step; on the CPU a packed vector pays a bitmap walk and a permute per 8
 * channels before its FMAs, a dense block of 16 keys one FMA per channel and
 * head, and the index is a small part of the cache (one key per B tokens):
 * the dense form made the scoring about 3x faster for a few bytes per token
 * (docs/methods.md "mosaic", docs/benchmarks.md "Dense block keys"). The
 * scores are those of the packed form: the same values, summed in another
 * order. */
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
