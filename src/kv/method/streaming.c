/* Method `streaming` (StreamingLLM: Efficient Streaming Language Models with
 * Attention Sinks, Xiao et al., ICLR 2024; a static baseline of
 * SentKVCompress): the first `sinks` tokens (the attention sinks) and the most
 * recent tokens stay, everything between is evicted. The cache holds
 * ceil(budget · seen) tokens (or `budget` tokens when above 1): the sinks plus
 * a recent window of the rest.
 *
 * Storage is dense f16 in chunks of `block` tokens sealed from the hot window
 * (which is part of the recent window). Eviction runs before every append
 * (step), after every prefill chunk (on_append) and before every decode
 * attention (on_query): tokens that fell out of the window are masked
 * (kvc_chunk_kill) and chunks with no live token left are removed, which
 * frees their memory; at most one chunk at the window's edge and the sinks'
 * chunk hold dead tokens. Positions are never re-used, so an evicted token
 * never returns (as in the paper's rolling cache; we keep the original
 * positions, i.e. no re-positioning of RoPE inside the cache). */
#include <stddef.h>

#include "base/status.h"
#include "kv/method/budget.h"
#include "kv/method/method.h"
#include "kv/method/unit_chunks.h"

typedef struct streaming_cfg {
    float budget; /* tokens kept: fraction of the tokens seen (<= 1) or a count (> 1) */
    int sinks;    /* first tokens always kept */
    int block;    /* tokens per sealed chunk */
} streaming_cfg;

static const kvc_param streaming_params[] = {
    {.key = "budget", .type = KVC_PARAM_FLOAT, .offset = offsetof(streaming_cfg, budget), .def = "0.2",
     .min = 0, .max = 1e9, .help = "tokens kept (sinks + recent): a fraction of the tokens seen (<= 1) or a count (> 1)"},
    {.key = "sinks", .type = KVC_PARAM_INT, .offset = offsetof(streaming_cfg, sinks), .def = "4",
     .min = 0, .max = 1 << 20, .help = "the first tokens (attention sinks) are always kept"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(streaming_cfg, block), .def = "16",
     .min = 1, .max = 65536, .help = "tokens per sealed chunk"},
};

static kvc_status streaming_create(const kvc_method_env *env, void **state) {
    *state = (void *)env->cfg;
    return KVC_OK;
}

/* Masks sealed tokens between the sinks and the recent window; drops chunks
 * left without live tokens. */
static kvc_status evict(const streaming_cfg *c, kvc_stream *s) {
    int64_t keep = kvc_budget_tokens(c->budget, s->n_pos);
    int64_t recent = keep > c->sinks ? keep - c->sinks : 0;
    int64_t from = s->n_pos - recent; /* window: [from, n_pos) */
    int changed = 0;
    for (int ci = s->n_chunks - 1; ci >= 0; ci--) {
        kvc_chunk *ch = s->chunks[ci];
        int64_t p0 = ch->pos0, p1 = ch->pos0 + ch->n;
        if (p1 <= c->sinks || p0 >= from) continue;
        for (int i = 0; i < ch->n; i++) {
            int64_t p = p0 + i;
            if (p >= c->sinks && p < from && !kvc_chunk_is_dead(ch, i)) {
                KVC_TRY(kvc_chunk_kill(ch, i));
                changed = 1;
            }
        }
        if (ch->n_dead == ch->n) KVC_TRY(kvc_stream_replace(s, ci, 1, NULL, 0));
    }
    if (changed) s->version++;
    return KVC_OK;
}

static kvc_status streaming_step(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    return evict(state, s);
}

static kvc_status streaming_on_append(void *state, kvc_stream *s, void *sstate, int n, const float *k,
                                      const float *v, const float *q) {
    (void)sstate, (void)n, (void)k, (void)v;
    return q ? evict(state, s) : KVC_OK; /* prefill: the next chunk sees only the window */
}

static kvc_status streaming_on_query(void *state, kvc_stream *s, void *sstate, const float *q) {
    (void)sstate, (void)q;
    return evict(state, s);
}

static int streaming_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const streaming_cfg *c = state;
    return s->hot->n - s->hot->n % c->block;
}

static kvc_status streaming_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                        const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const streaming_cfg *c = state;
    *out = NULL;
    for (int i = 0; i < n; i += c->block) { /* n is whole blocks: a chunk each, so eviction frees them */
        size_t off = (size_t)i * s->dim;
        KVC_TRY(kvc_unit_chunks_append(s, c->block, 0, 0, k + off, v + off, pos0 + i, &c->block, 1));
    }
    return KVC_OK;
}

const kvc_method kvc_method_streaming = {
    .name = "streaming",
    .summary = "attention sinks + a recent window within a budget (StreamingLLM); evicts the rest",
    .paper = "StreamingLLM (Xiao et al., ICLR 2024; baseline of SentKVCompress)",
    .flags = KVC_METHOD_BASE,
    .params = streaming_params,
    .n_params = (int)(sizeof streaming_params / sizeof streaming_params[0]),
    .positional = 0,
    .cfg_size = sizeof(streaming_cfg),
    .ops = {
        .create = streaming_create,
        .step = streaming_step,
        .on_append = streaming_on_append,
        .on_query = streaming_on_query,
        .hot_leave = streaming_hot_leave,
        .build_chunk = streaming_build_chunk,
    },
};
