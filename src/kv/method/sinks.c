/* Modifier `sinks` (docs/methods.md "sinks"): the first `n` tokens of every
 * stream are attention sinks kept dense and exact for the life of the cache,
 * whatever the base method compresses, prunes or evicts. StreamingLLM (Xiao
 * et al., ICLR 2024) showed that the first tokens draw a large share of the
 * attention of every later query; quantizing them costs more than their
 * bytes are worth.
 *
 * The mechanism is the cache's (cache.c push_tokens, stream.c
 * kvc_stream_sink_push): the sink tokens go to a chunk of their own at the
 * head of the stream (KVC_CHUNK_SINK | KVC_CHUNK_ALWAYS, the hot window's
 * dense type, in the stream's space under `+rot`) and never reach any layer's
 * hooks, so the base method needs no code for them: it simply starts at
 * position n. h2o leaves sink chunks out of its candidates and its compaction. */
#include <stddef.h>

#include "kv/method/method.h"

typedef struct sinks_cfg {
    int n;
} sinks_cfg;

static const kvc_param sinks_params[] = {
    {.key = "n", .type = KVC_PARAM_INT, .offset = offsetof(sinks_cfg, n), .def = "4", .min = 0,
     .max = 1 << 20, .help = "the first tokens of each stream, kept dense and exact forever"},
};

/* The cfg is the whole per-cache state: it is parsed once and read-only. */
static kvc_status sinks_create(const kvc_method_env *env, void **state) {
    *state = (void *)env->cfg;
    return KVC_OK;
}

static int sinks_tokens(void *state) { return ((const sinks_cfg *)state)->n; }

const kvc_method kvc_method_sinks = {
    .name = "sinks",
    .summary = "the first n tokens (attention sinks) kept dense and exact, never compressed or evicted",
    .paper = "StreamingLLM (Xiao et al., ICLR 2024): attention sinks",
    .flags = KVC_METHOD_MODIFIER,
    .params = sinks_params,
    .n_params = (int)(sizeof sinks_params / sizeof sinks_params[0]),
    .positional = 0,
    .cfg_size = sizeof(sinks_cfg),
    .ops = {
        .create = sinks_create,
        .sink_tokens = sinks_tokens,
    },
};
