/* Method `full` (docs/design.md §5): the dense baselines — f32 (the exact
 * reference every quality number is measured against), f16 and bf16. Every
 * token leaves the hot window at once and is appended to the stream's last
 * dense chunk (up to `block` tokens per chunk), so what is stored is exactly
 * the chosen type; no selection, no eviction. */
#include <stddef.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/method/method.h"

typedef struct full_cfg {
    int dtype; /* kvc_dense_type: 0 f32, 1 f16, 2 bf16 */
    int block; /* tokens per chunk */
} full_cfg;

static const kvc_param full_params[] = {
    {.key = "dtype", .type = KVC_PARAM_ENUM, .offset = offsetof(full_cfg, dtype), .def = "f32",
     .choices = "f32|f16|bf16", .help = "element type of the stored keys and values"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(full_cfg, block), .def = "4096",
     .min = 16, .max = 1 << 20, .help = "tokens per chunk (chunks are filled by appending)"},
};

static int full_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)state;
    (void)sstate;
    return s->hot->n;
}

static kvc_status full_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                   const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const full_cfg *cfg = state;
    kvc_codec c = {.ops = kvc_codec_dense((kvc_dense_type)cfg->dtype), .dim = s->dim, .cfg = NULL};
    *out = NULL;
    int done = 0;
    while (done < n) {
        kvc_chunk *last = s->n_chunks ? s->chunks[s->n_chunks - 1] : NULL;
        if (last && last->kc.ops == c.ops && !last->pos && !last->dead && last->n < cfg->block &&
            last->pos0 + last->n == pos0 + done) {
            int take = cfg->block - last->n < n - done ? cfg->block - last->n : n - done;
            size_t off = (size_t)done * s->dim;
            KVC_TRY(c.ops->append(&last->kc, last->kb, k + off, take, s->dim));
            kvc_status st = c.ops->append(&last->vc, last->vb, v + off, take, s->dim);
            if (st != KVC_OK) {
                kvc_dense_truncate(last->kb, last->n);
                return st;
            }
            last->n += take;
            done += take;
            if (last->n == cfg->block) { /* full: give back the spare capacity */
                kvc_dense_trim(&last->kc, last->kb);
                kvc_dense_trim(&last->vc, last->vb);
            }
            continue;
        }
        kvc_chunk *ch = NULL;
        KVC_TRY(kvc_chunk_encode(&c, &c, NULL, NULL, 0, s->dim, pos0 + done, NULL, NULL, &ch));
        kvc_status st = kvc_stream_insert(s, s->n_chunks, ch);
        if (st != KVC_OK) {
            kvc_chunk_free(ch);
            return st;
        }
    }
    return KVC_OK;
}

static int full_hot_type(void *state) { return ((const full_cfg *)state)->dtype; }

/* The cfg is the whole per-cache state: it is parsed once and read-only. */
static kvc_status full_create(const kvc_method_env *env, void **state) {
    *state = (void *)env->cfg;
    return KVC_OK;
}

static const char *const full_stacks[] = {"rot", NULL};

const kvc_method kvc_method_full = {
    .name = "full",
    .summary = "dense keys and values: f32 (exact reference), f16 or bf16",
    .paper = "",
    .flags = KVC_METHOD_BASE,
    .params = full_params,
    .n_params = (int)(sizeof full_params / sizeof full_params[0]),
    .positional = 0,
    .cfg_size = sizeof(full_cfg),
    .stacks_with = full_stacks,
    .ops = {
        .create = full_create,
        .hot_type = full_hot_type,
        .hot_leave = full_hot_leave,
        .build_chunk = full_build_chunk,
    },
};
