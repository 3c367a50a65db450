/* The KV cache as the forward pass sees it (docs/design.md §2, §4): three calls per
 * layer — prefill a chunk of prompt, append one token, attend one query — and
 * nothing about methods. The forward pass never branches on the method.
 *
 * Layouts (f32, post-RoPE, row-major):
 *   q   [n][n_heads][head_dim]      k, v [n][n_kv_heads][head_dim]
 *   out [n][n_heads][head_dim]
 * Query head h uses KV head h / (n_heads / n_kv_heads) (grouped-query attention).
 * Scores are scaled by 1/sqrt(head_dim) inside the cache. */
#ifndef KVC_KV_CACHE_H
#define KVC_KV_CACHE_H

#include "kvcomp.h"

struct kvc_pool;

typedef struct kvc_cache kvc_cache;

typedef struct kvc_cache_shape {
    int n_layers, n_heads, n_kv_heads, head_dim;
    int max_tokens; /* capacity in tokens per layer */
} kvc_cache_shape;

/* Builds a cache for `spec` ("full:f32", "kivi:bits=2", ...). Bad specs are
 * KVC_ERR_ARG with a message that lists the valid names or keys. The pool
 * (may be NULL) is borrowed for parallel attention. */
kvc_status kvc_cache_create(const kvc_cache_shape *shape, const char *spec, struct kvc_pool *pool,
                            kvc_cache **out);
void kvc_cache_free(kvc_cache *c);
void kvc_cache_reset(kvc_cache *c);

/* A chunk of n prompt tokens of one layer: out[i] is attention of q[i] over the
 * layer's cached past plus tokens 0..i of this chunk (the chunk part dense and
 * exact), then the chunk's K/V are handed to the method (which may compress
 * them, and may observe q). With an empty cache this is plain causal prefill. */
kvc_status kvc_cache_prefill(kvc_cache *c, int layer, int n, const float *q, const float *k,
                             const float *v, float *out);

/* Decode: append one token's k, v [n_kv_heads][head_dim] to a layer ... */
kvc_status kvc_cache_append(kvc_cache *c, int layer, const float *k, const float *v);
/* ... then attention of q [n_heads][head_dim] over everything the layer holds. */
kvc_status kvc_cache_attend(kvc_cache *c, int layer, const float *q, float *out);

/* Optional, for methods that look at the text (SentKV splits sentences at
 * punctuation): the forward pass reports the token ids of the next n positions
 * before running them. `text` (set once, may be NULL) returns a token's bytes
 * like kvc_token_piece. Methods that need tokens fail without them. */
typedef int (*kvc_token_text_fn)(void *ctx, int32_t token, char *buf, int cap);
void kvc_cache_set_token_text(kvc_cache *c, kvc_token_text_fn text, void *ctx);
void kvc_cache_observe_tokens(kvc_cache *c, const int32_t *tokens, int n);

/* Tokens seen by a layer (including evicted ones: the position count). */
int kvc_cache_tokens(const kvc_cache *c, int layer);

void kvc_cache_stats_get(const kvc_cache *c, kvc_cache_stats *out);

/* Score / top-k / attention time of the decode attend calls so far
 * (kvc_attend_ws_times of the cache's driver workspace). */
struct kvc_attend_times;
void kvc_cache_attend_times(const kvc_cache *c, struct kvc_attend_times *out);

#endif
