/* Method `full` (DESIGN.md §5): the dense baselines — f32 (the exact
 * reference every quality number is measured against), f16 and bf16. Tokens
 * leave the hot window in blocks of `block` tokens and are stored densely in
 * the chosen type; no selection, no eviction. */
#include <stddef.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/method/method.h"

typedef struct full_cfg {
    int dtype; /* kvc_dense_type: 0 f32, 1 f16, 2 bf16 */
    int block; /* tokens per sealed chunk */
} full_cfg;

static const kvc_param full_params[] = {
    {.key = "dtype", .type = KVC_PARAM_ENUM, .offset = offsetof(full_cfg, dtype), .def = "f32",
     .choices = "f32|f16|bf16", .help = "element type of the stored keys and values"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(full_cfg, block), .def = "1024",
     .min = 16, .max = 65536, .help = "tokens per chunk (hot window holds fewer than this)"},
};

static int full_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const full_cfg *cfg = state;
    int n = s->hot->n;
    return n >= cfg->block ? n - n % cfg->block : 0;
}

static kvc_status full_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                   const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const full_cfg *cfg = state;
    kvc_codec c = {.ops = kvc_codec_dense((kvc_dense_type)cfg->dtype), .dim = s->dim, .cfg = NULL};
    return kvc_chunk_encode(&c, &c, k, v, n, s->dim, pos0, NULL, NULL, out);
}

/* The cfg is the whole per-cache state: it is parsed once and read-only. */
static kvc_status full_create(const kvc_method_env *env, void **state) {
    *state = (void *)env->cfg;
    return KVC_OK;
}

const kvc_method kvc_method_full = {
    .name = "full",
    .summary = "dense keys and values: f32 (exact reference), f16 or bf16",
    .paper = "",
    .flags = KVC_METHOD_BASE,
    .params = full_params,
    .n_params = (int)(sizeof full_params / sizeof full_params[0]),
    .positional = 0,
    .cfg_size = sizeof(full_cfg),
    .ops = {
        .create = full_create,
        .hot_leave = full_hot_leave,
        .build_chunk = full_build_chunk,
    },
};
