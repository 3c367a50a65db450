/* Method `quest` (Quest: Query-Aware Sparsity for Efficient Long-Context LLM
 * Inference, Tang et al., ICML 2024; the baseline of MosaicKV): the whole
 * cache stays, dense f16, in pages of `page` tokens; per page and channel the
 * key max and min form the page index (select/minmax.h: f16 rounded outward,
 * counted as index bytes). At each decode step the driver scores every page
 * by the bound sum_i max(q_i max_i, q_i min_i) (the largest over the query
 * heads of the KV group) and attends the best pages within the budget, plus
 * the current page, which is the hot window: only whole pages before the one
 * holding the newest token leave it. The first `dense` layers are attended in
 * full (the paper keeps its first two layers dense; their chunks have no index).
 *
 * Budget: a fraction of the context (<= 1) or a token count (> 1) of the
 * tokens attended in a layer, the current page included. Prefill is dense
 * (the paper applies Quest to decode only). */
#include <stddef.h>
#include <stdlib.h>

#include "base/status.h"
#include "kv/method/budget.h"
#include "kv/method/method.h"
#include "kv/method/unit_chunks.h"

typedef struct quest_cfg {
    float budget; /* fraction of the context (<= 1) or tokens (> 1) attended per step */
    int page;     /* tokens per page */
    int dense;    /* first layers attended in full */
    int block;    /* tokens per chunk (a multiple of page) */
} quest_cfg;

static const kvc_param quest_params[] = {
    {.key = "budget", .type = KVC_PARAM_FLOAT, .offset = offsetof(quest_cfg, budget), .def = "0.1",
     .min = 0, .max = 1e9, .help = "tokens attended per step: a fraction of the context (<= 1) or a count (> 1)"},
    {.key = "page", .type = KVC_PARAM_INT, .offset = offsetof(quest_cfg, page), .def = "16",
     .min = 1, .max = 4096, .help = "tokens per page (the unit of selection)"},
    {.key = "dense", .type = KVC_PARAM_INT, .offset = offsetof(quest_cfg, dense), .def = "2",
     .min = 0, .max = 1 << 16, .help = "the first layers are attended in full"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(quest_cfg, block), .def = "4096",
     .min = 1, .max = 1 << 20, .help = "tokens per chunk (a multiple of page)"},
};

static kvc_status quest_check(const void *cfgp) {
    const quest_cfg *c = cfgp;
    KVC_CHECK(c->block % c->page == 0, KVC_ERR_ARG, "quest: block=%d is not a multiple of page=%d", c->block,
              c->page);
    return KVC_OK;
}

/* The cfg is the whole per-cache state: parsed once, read-only. */
static kvc_status quest_create(const kvc_method_env *env, void **state) {
    *state = (void *)env->cfg;
    return KVC_OK;
}

static int selective(const quest_cfg *c, const kvc_stream *s) { return s->layer >= c->dense; }

/* Selected layers keep the current page hot: whole pages before it leave. */
static int quest_hot_leave(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const quest_cfg *c = state;
    int n = s->hot->n;
    if (!selective(c, s)) return n;
    return n > 0 ? (n - 1) / c->page * c->page : 0;
}

static kvc_status quest_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                    const float *v, int n, int64_t pos0, kvc_chunk **out) {
    (void)sstate;
    const quest_cfg *c = state;
    *out = NULL;
    if (!selective(c, s)) return kvc_unit_chunks_append(s, c->block, KVC_UNITS_PLAIN, 0, k, v, pos0, &n, 1);
    KVC_CHECK(n % c->page == 0, KVC_ERR_INTERNAL, "quest: %d leaving tokens are not whole pages of %d", n,
              c->page);
    int np = n / c->page;
    int *len = malloc((size_t)(np ? np : 1) * sizeof *len);
    if (!len) return kvc_fail(KVC_ERR_NOMEM, "quest pages (%d)", np);
    for (int i = 0; i < np; i++) len[i] = c->page;
    kvc_status st = kvc_unit_chunks_append(s, c->block, KVC_UNITS_INDEXED, 0, k, v, pos0, len, np);
    free(len);
    return st;
}

static kvc_select_plan quest_select(void *state, kvc_stream *s, void *sstate) {
    (void)sstate;
    const quest_cfg *c = state;
    if (!selective(c, s)) return (kvc_select_plan){.budget = -1, .reuse = 0};
    int64_t b = kvc_budget_tokens(c->budget, s->n_pos) - s->hot->n;
    return (kvc_select_plan){.budget = b > 0 ? b : 0, .reuse = 0};
}

const kvc_method kvc_method_quest = {
    .name = "quest",
    .summary = "query-aware page selection: per-page key min/max bounds, top pages within a token budget",
    .paper = "Quest (Tang et al., ICML 2024; baseline of MosaicKV)",
    .flags = KVC_METHOD_BASE,
    .params = quest_params,
    .n_params = (int)(sizeof quest_params / sizeof quest_params[0]),
    .positional = 0,
    .cfg_size = sizeof(quest_cfg),
    .check = quest_check,
    .ops = {
        .create = quest_create,
        .hot_leave = quest_hot_leave,
        .build_chunk = quest_build_chunk,
        .select = quest_select,
    },
};
