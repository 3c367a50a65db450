/* The cache's internals (cache.c), shared with synth.c and the tests: the
 * stream grid, the parsed spec with one method state per layer of the stack,
 * which layer makes each decision, and the driver's workspaces. */
#ifndef KVC_KV_CACHE_IMPL_H
#define KVC_KV_CACHE_IMPL_H

#include "kv/attend.h"
#include "kv/cache.h"
#include "kv/method/method.h"
#include "kv/prefill.h"
#include "kv/select/usage.h"

struct kvc_cache {
    kvc_cache_shape shape;
    int G;                        /* query heads per KV head */
    kvc_spec spec;
    void *mstate[KVC_MAX_STACK];  /* per-cache state of each method layer */
    int mstate_created[KVC_MAX_STACK];
    int i_hot_leave, i_build, i_select; /* layer deciding, -1: none */
    int want_attn, any_on_append;
    int n_streams;
    kvc_stream **streams;         /* [n_layers][n_kv_heads] */
    struct kvc_pool *pool;        /* borrowed */
    kvc_attend_ws *ws;
    kvc_prefill_ws **pws;         /* one per pool thread */
    int n_pws;
    kvc_attend_req *reqs;         /* [n_kv_heads] */
    kvc_status *hook_st;          /* [n_kv_heads] per-task status */
    kvc_token_text_fn token_text;
    void *token_text_ctx;
    int64_t tokens_seen;          /* positions reported by kvc_cache_observe_tokens */
    kvc_sel_usage *usage;         /* [n_streams] decode read / reuse statistics */
    int sinks;                    /* first positions kept in each stream's sink chunk */
    int any_xf;                   /* some stream lives in a transformed space (kvc_stream.xf) */
    float *qmap;                  /* [n_heads][head_dim] decode queries in their streams' spaces */
};

static inline kvc_stream *kvc_cache_stream(kvc_cache *c, int layer, int head) {
    return c->streams[layer * c->shape.n_kv_heads + head];
}

/* Appends n tokens k, v [n][n_kv][d] with optional queries q [n][n_heads][d]
 * (handed to the methods' on_append), without attention. */
kvc_status kvc_cache_append_n(kvc_cache *c, int layer, int n, const float *k, const float *v,
                              const float *q);

/* kvc_cache_attend with a forced split (parts per stream; 0: automatic). */
kvc_status kvc_cache_attend_opts(kvc_cache *c, int layer, const float *q, float *out, int split);

#endif
