/* Method `think` (ThinK: thinner key cache by query-driven pruning, Xu et al.
 * 2025; the structured baseline of the MUSTAFAR paper §2.1, Tables 1 and 4): every
 * block of keys leaving the local dense window keeps only round((1-ratio)·D)
 * channels, the same for all its tokens, chosen by ThinK's query-driven score
 *   score_j = || Q_obs[:, j] · K_block[:, j]ᵀ ||_F = ||Q_obs[:, j]||₂ · ||K_block[:, j]||₂
 * where Q_obs stacks the last `obs` queries (all G heads of the KV group; the
 * observation window, 32 in ThinK) seen when the block leaves. Values stay
 * dense f16 (ThinK prunes keys only, as MUSTAFAR compares it). Sealed keys use
 * the chanprune_f16 codec (codec/chanprune.c).
 *
 * ThinK prunes the prompt's keys once after prefill with the prompt's last
 * queries; with chunked prefill and decode here the same criterion is applied
 * per block as it leaves the window, with the queries of the window that just
 * observed it — the most recent `obs` queries. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/chanprune.h"
#include "kv/codec/dense.h"
#include "kv/method/method.h"
#include "kv/codec/prune.h"

typedef struct think_cfg {
    float ratio; /* fraction of key channels pruned */
    int window;  /* dense local window */
    int block;   /* tokens per sealed chunk */
    int obs;     /* observation window of queries */
} think_cfg;

static const kvc_param think_params[] = {
    {.key = "ratio", .type = KVC_PARAM_FLOAT, .offset = offsetof(think_cfg, ratio), .def = "0.5",
     .min = 0, .max = 0.99, .help = "fraction of key channels pruned per block (ThinK's lambda)"},
    {.key = "window", .type = KVC_PARAM_INT, .offset = offsetof(think_cfg, window), .def = "32",
     .min = 0, .max = 65536, .help = "newest tokens kept dense"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(think_cfg, block), .def = "64",
     .min = 1, .max = 65536, .help = "tokens per sealed chunk (one channel choice per block)"},
    {.key = "obs", .type = KVC_PARAM_INT, .offset = offsetof(think_cfg, obs), .def = "32",
     .min = 1, .max = 4096, .help = "observation window: the latest queries that score the channels"},
};

typedef struct think_state {
    think_cfg cfg;
    int dim, G, keep;
    kvc_chanprune_cfg cp;
} think_state;

/* Ring of the last `obs` queries, each stored as sum over the G heads of q². */
typedef struct think_stream {
    float *ring; /* [obs][dim] */
    int n, next;
    float *scratch; /* masked keys of one block */
    int scratch_n;
} think_stream;

static kvc_status think_create(const kvc_method_env *env, void **state) {
    think_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "think state");
    st->cfg = *(const think_cfg *)env->cfg;
    st->dim = env->head_dim;
    st->G = env->n_heads / env->n_kv_heads;
    if (st->dim > KVC_PRUNE_MAX_D) {
        free(st);
        return kvc_fail(KVC_ERR_UNSUPPORTED, "think: head_dim %d above %d", env->head_dim, KVC_PRUNE_MAX_D);
    }
    st->keep = kvc_prune_keep_count(st->cfg.ratio, st->dim);
    if (st->keep < 1) st->keep = 1;
    st->cp.keep = st->keep;
    st->cp.group = st->cfg.block;
    *state = st;
    return KVC_OK;
}

static void think_destroy(void *state) { free(state); }

static kvc_status think_stream_init(void *state, kvc_stream *s, void **sstate) {
    const think_state *st = state;
    think_stream *ts = calloc(1, sizeof *ts);
    if (ts) ts->ring = calloc((size_t)st->cfg.obs * st->dim, sizeof(float));
    if (!ts || !ts->ring) {
        free(ts);
        return kvc_fail(KVC_ERR_NOMEM, "think observation window (%d x %d)", st->cfg.obs, st->dim);
    }
    *sstate = ts;
    return KVC_OK;
}

static void think_stream_free(void *state, kvc_stream *s, void *sstate) {
    think_stream *ts = sstate;
    if (!ts) return;
    free(ts->ring);
    free(ts->scratch);
    free(ts);
}

static void observe(const think_state *st, think_stream *ts, const float *q /* [G][dim] */) {
    int d = st->dim;
    float *row = ts->ring + (size_t)ts->next * d;
    memset(row, 0, (size_t)d * sizeof(float));
    for (int g = 0; g < st->G; g++)
        for (int c = 0; c < d; c++) row[c] += q[(size_t)g * d + c] * q[(size_t)g * d + c];
    ts->next = (ts->next + 1) % st->cfg.obs;
    if (ts->n < st->cfg.obs) ts->n++;
}

static kvc_status think_on_append(void *state, kvc_stream *s, void *sstate, int n, const float *k,
                                  const float *v, const float *q) {
    const think_state *st = state;
    if (!q) return KVC_OK;
    int first = n > st->cfg.obs ? n - st->cfg.obs : 0; /* only the last obs matter */
    for (int i = first; i < n; i++) observe(st, sstate, q + (size_t)i * st->G * st->dim);
    return KVC_OK;
}

static kvc_status think_on_query(void *state, kvc_stream *s, void *sstate, const float *q) {
    observe(state, sstate, q);
    return KVC_OK;
}

static int think_hot_leave(void *state, kvc_stream *s, void *sstate) {
    const think_state *st = state;
    int over = s->hot->n - st->cfg.window;
    return over >= st->cfg.block ? over - over % st->cfg.block : 0;
}

/* Per block of `block` tokens: ThinK's channel scores, the pruned channels
 * zeroed, then the chanprune codec (group = block) keeps the surviving ones. */
static kvc_status think_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                    const float *v, int n, int64_t pos0, kvc_chunk **out) {
    const think_state *st = state;
    think_stream *ts = sstate;
    int d = st->dim, B = st->cfg.block;
    if (ts->scratch_n < n) {
        float *sc = realloc(ts->scratch, (size_t)n * d * sizeof *sc);
        if (!sc) return kvc_fail(KVC_ERR_NOMEM, "think key scratch (%d tokens)", n);
        ts->scratch = sc;
        ts->scratch_n = n;
    }
    double qn[KVC_PRUNE_MAX_D] = {0};
    for (int r = 0; r < ts->n; r++)
        for (int c = 0; c < d; c++) qn[c] += ts->ring[(size_t)r * d + c];
    for (int b0 = 0; b0 < n; b0 += B) {
        int nb = n - b0 < B ? n - b0 : B;
        float score[KVC_PRUNE_MAX_D];
        uint64_t mask[KVC_PRUNE_MAX_D / 64];
        for (int c = 0; c < d; c++) {
            double kn = 0;
            for (int i = 0; i < nb; i++) kn += (double)k[(size_t)(b0 + i) * d + c] * k[(size_t)(b0 + i) * d + c];
            score[c] = (float)(sqrt(qn[c]) * sqrt(kn));
        }
        kvc_prune_topk(score, d, st->keep, mask);
        for (int i = 0; i < nb; i++)
            for (int c = 0; c < d; c++)
                ts->scratch[(size_t)(b0 + i) * d + c] = (mask[c >> 6] >> (c & 63) & 1) ? k[(size_t)(b0 + i) * d + c] : 0.0f;
    }
    kvc_codec kc = {.ops = &kvc_codec_chanprune_f16, .dim = d, .cfg = &st->cp};
    kvc_codec vc = {.ops = &kvc_codec_f16, .dim = d, .cfg = NULL};
    kvc_status st_enc = kvc_chunk_encode(&kc, &vc, ts->scratch, v, n, d, pos0, NULL, NULL, out);
    if (ts->scratch_n > B) { /* sized by a prefill chunk: decode builds one block at a time */
        free(ts->scratch);
        ts->scratch = NULL;
        ts->scratch_n = 0;
    }
    return st_enc;
}

static uint64_t think_buffer_bytes(const void *state, const kvc_stream *s, const void *sstate) {
    const think_state *st = state;
    const think_stream *ts = sstate;
    return sizeof *ts + ((uint64_t)st->cfg.obs + ts->scratch_n) * st->dim * sizeof(float);
}

static const char *const think_stacks[] = {"rot", "sinks", NULL};

const kvc_method kvc_method_think = {
    .name = "think",
    .summary = "ThinK: query-driven structured pruning of key channels per block; values dense f16",
    .paper = "ThinK (Xu et al., ICLR 2025; baseline of MUSTAFAR and MosaicKV)",
    .flags = KVC_METHOD_BASE,
    .params = think_params,
    .n_params = (int)(sizeof think_params / sizeof think_params[0]),
    .positional = 0,
    .cfg_size = sizeof(think_cfg),
    .stacks_with = think_stacks,
    .ops = {
        .create = think_create,
        .destroy = think_destroy,
        .stream_init = think_stream_init,
        .stream_free = think_stream_free,
        .on_append = think_on_append,
        .hot_leave = think_hot_leave,
        .build_chunk = think_build_chunk,
        .on_query = think_on_query,
        .buffer_bytes = think_buffer_bytes,
    },
};
