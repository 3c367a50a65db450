/* MosaicKV's per-segment compression strategy (MosaicKV §4.3, §5.2, §5.5;
 * docs/methods.md "mosaic"): from a finished segment's keys and values and
 * their accumulated second moments, the rotation (with channel truncation),
 * the per-vector retention rate and element group size of K and of V, and the
 * token block size of the stage-2 selector; then the segment's chunk in the
 * packed two-D format with its block index. The same strategy compresses the
 * next segment's tokens temporarily while that segment is open (§5.4). */
#ifndef KVC_KV_METHOD_MOSAIC_STRATEGY_H
#define KVC_KV_METHOD_MOSAIC_STRATEGY_H

#include "kv/codec/packed.h"
#include "kv/xform/rotation.h"

/* The method's knobs that shape a strategy. */
typedef struct kvc_mosaic_opts {
    float keep;    /* fraction of head_dim elements kept per vector (the middle candidate) */
    float trunc;   /* fraction of rotated channels truncated */
    float loss;    /* loss threshold of the rate / group choice */
    float var;     /* intra-block key variance threshold of the block choice */
    int group;     /* 0: chosen by loss; else fixed 1, 2 or 4 */
    int block;     /* 0: chosen by variance; else fixed 4, 8 or 16 */
    int rotate;    /* 0: no rotation (channels ordered by energy) */
    int pervector; /* 0: one channel set per segment (uniform top-r, stored dense) */
    int dynamic;   /* 0: fixed rate = keep, group 1 (or fixed), block 8 (or fixed) */
} kvc_mosaic_opts;

typedef struct kvc_mosaic_strategy {
    kvc_xform *xf;             /* one reference */
    kvc_packed_cfg kcfg, vcfg; /* per-vector selection of K and V (pervector) */
    int block;                 /* tokens per stage-2 block */
    int dense;                 /* 1: K and V stored dense f16 in the truncated space */
} kvc_mosaic_strategy;

/* Builds the strategy of n tokens k, v [n][ld] (head_dim d) whose second
 * moments are ck, cv. */
kvc_status kvc_mosaic_strategy_make(const kvc_mosaic_opts *o, int d, const kvc_cov *ck,
                                    const kvc_cov *cv, const float *k, const float *v, int n,
                                    int ld, kvc_mosaic_strategy *out);
void kvc_mosaic_strategy_clear(kvc_mosaic_strategy *s);
/* A second reference to the same strategy (the transform is shared). */
kvc_mosaic_strategy kvc_mosaic_strategy_share(const kvc_mosaic_strategy *s);

/* The chunk of n tokens k, v [n][ld] (original space) under strategy s:
 * rotated, truncated, packed, with its block index. */
kvc_status kvc_mosaic_encode(const kvc_mosaic_strategy *s, const float *k, const float *v, int n,
                             int ld, int64_t pos0, kvc_chunk **out);

/* Relative compression loss of one vector x (head_dim floats) under s: the
 * fraction of its energy that rotation, truncation and per-vector selection
 * drop (which = 0 key, 1 value). */
double kvc_mosaic_vector_loss(const kvc_mosaic_strategy *s, int which, const float *x);

#endif
