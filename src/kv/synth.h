/* Filling a cache without the model, for `kvcomp bench attn` (synthetic or
 * dumped K/V at up to 1M tokens) and for tests. Tokens go through the method
 * exactly as in prefill (hot window, on_append with q = NULL, hot_leave,
 * build_chunk) but in large blocks and without computing attention, so a 1M
 * token layer fills in seconds. */
#ifndef KVC_KV_SYNTH_H
#define KVC_KV_SYNTH_H

#include <stdint.h>

#include "kv/cache.h"

/* Appends n tokens to `layer`: k, v [n][n_kv_heads][head_dim] f32. Runs the
 * method's on_append / hot_leave / build_chunk per block of up to 4096 tokens.
 * KVC_ERR_RANGE past max_tokens. */
kvc_status kvc_cache_load(kvc_cache *c, int layer, int64_t n, const float *k, const float *v);

/* Appends n synthetic tokens to `layer`, generated from seed: keys and values
 * roughly like a real model's post-RoPE K/V (per-channel scales with a few
 * outlier channels in K, Gaussian V), deterministic for a seed. */
kvc_status kvc_cache_load_random(kvc_cache *c, int layer, int64_t n, uint64_t seed);

/* The generator itself: fills k, v [n][n_kv][dim] (either may be NULL) for
 * tokens [t0, t0+n) of the synthetic sequence of `seed`. */
void kvc_synth_kv(int n_kv, int dim, int64_t t0, int64_t n, uint64_t seed, float *k, float *v);

#endif
