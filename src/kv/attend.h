/* The attention driver (docs/design.md §4, "Driver"): decode attention of the G
 * query heads of each KV head over one stream's chunks — selection, then qk
 * and pv per tile with an online softmax, transform groups with their own
 * partial accumulators, flash-decoding splits along tokens merged at the end.
 * Used by cache.c for decode and by the benchmark; knows nothing of methods
 * beyond the selection plan and the attention-weights callback. */
#ifndef KVC_KV_ATTEND_H
#define KVC_KV_ATTEND_H

#include "kv/method/method.h"

struct kvc_pool;

/* Per-stream request of one attend call. */
typedef struct kvc_attend_req {
    kvc_stream *s;
    const float *q;           /* [G][dim], unscaled */
    float *out;               /* [G][dim] */
    kvc_select_plan plan;     /* budget < 0: everything */
    int want_attn;            /* keep probabilities for on_attn */
    int64_t n_read;           /* out: tokens attended (selected units, unselectable chunks, hot window) */
} kvc_attend_req;

/* Reusable scratch of the driver (grows on demand). */
typedef struct kvc_attend_ws kvc_attend_ws;
kvc_status kvc_attend_ws_create(kvc_attend_ws **out);
void kvc_attend_ws_free(kvc_attend_ws *ws);
uint64_t kvc_attend_ws_bytes(const kvc_attend_ws *ws);

/* Where the time of the attend calls on a workspace went, summed since it was
 * created: scoring the selectable units (the selectors' score ops) and
 * choosing the top units within the budget (histogram threshold, greedy
 * fill), both as thread time summed over the tasks; the wall time of the
 * whole selection (scoring, then top-k and work items per request: the
 * tasks between the query maps and the attention);
 * and the rest of the calls' wall time (query maps, planning without
 * selection, qk, softmax, pv, merge), i.e. the calls' wall time less the
 * selection's. With one thread score + top-k is about the selection's wall. */
typedef struct kvc_attend_times {
    double score_s, topk_s, attn_s;
    double select_wall_s;
    int64_t calls;
    /* top-k (kv/select/topk.h kvc_topk_greedy_segs): selections, units
     * ranked, candidates at or above the sampled threshold (or all units when
     * no threshold was taken), selections that went on below the threshold,
     * selections without a threshold */
    uint64_t topk_calls, topk_units, topk_candidates, topk_continued, topk_whole;
    /* tokens copied into the streams' near buffers (kv/near.h) */
    uint64_t near_copied;
} kvc_attend_times;
void kvc_attend_ws_times(const kvc_attend_ws *ws, kvc_attend_times *out);

/* Callback after the merge when want_attn: see kvc_method_ops.on_attn. */
typedef void (*kvc_attn_cb)(void *ctx, int req, int ci, const kvc_range *r, int nr,
                            const float *p);
/* Callback with the selected units of request `req` (may be NULL). */
typedef void (*kvc_select_cb)(void *ctx, int req, int n_units, const int32_t *chunk_idx,
                              const kvc_range *units);

typedef struct kvc_attend_opts {
    int G;                    /* query heads per KV head */
    int split;                /* 0: automatic; >= 1: parts per stream (tests force splits) */
    int min_split_tokens;     /* automatic split only above this many tokens per part; 0: 2048 */
    int score_units;          /* 0: automatic; >= 1: units per scoring task (rounded up to
                               * KVC_SCORE_ALIGN; tests force many small tasks) */
    kvc_attn_cb on_attn;
    kvc_select_cb on_select;
    void *cb_ctx;
} kvc_attend_opts;

/* Runs n_req independent stream attentions in parallel on pool (may be NULL). */
kvc_status kvc_attend(kvc_attend_req *reqs, int n_req, const kvc_attend_opts *opts,
                      struct kvc_pool *pool, kvc_attend_ws *ws);

/* Plain reference: decodes every live token (kvc_chunk_decode) and does a
 * two-pass softmax in double precision, no selection. q and out are in the
 * model's space, as for kvc_attend: a stream kept in a transformed space
 * (s->xf, e.g. +rot) has q mapped into it and out mapped back. For tests. */
kvc_status kvc_attend_reference(const kvc_stream *s, const float *q, int G, float *out);

#endif
