/* Structured channel pruning as a storage format (ThinK, the baseline of
 * the MUSTAFAR paper §2.1 and Table 1): each group of `group` consecutive tokens of
 * a chunk keeps the same `keep` channels, stored dense f16 [n][keep] with one
 * channel list per group. Encoding keeps the `keep` channels of largest L2
 * norm over the group's tokens (ties to the lower channel), so a method that zeroes the channels it
 * pruned by its own criterion gets exactly those channels (a kept channel that
 * is all zero may be swapped for another all-zero one: the same numbers).
 * qk / pv gather the query's (or scatter the output's) kept channels once per
 * call and run the dense f16 kernels on the narrow rows. */
#ifndef KVC_KV_CODEC_CHANPRUNE_H
#define KVC_KV_CODEC_CHANPRUNE_H

#include "kv/codec/codec.h"

typedef struct kvc_chanprune_cfg {
    int keep;  /* channels kept per group, 1..dim */
    int group; /* tokens sharing one channel choice, >= 1 */
} kvc_chanprune_cfg;

/* "chanprune_f16" */
extern const kvc_codec_ops kvc_codec_chanprune_f16;

#endif
