/* The decode attention driver (docs/design.md §4 "Driver", docs/design-kv.md).
 *
 * For each request (one stream = one KV head, its G query heads together):
 *   1. plan: scale q by 1/sqrt(d); prepare_q once per transform group; if the
 *      method gave a budget, score the units of every selectable chunk, keep
 *      the best within the budget (or reuse the previous selection); cut the
 *      attended ranges into tiles of <= TILE tokens (work items). With
 *      selection this runs in two rounds on the pool: the queries per
 *      request; then the scoring of all requests' units as tasks of about
 *      equal unit counts (a KV head's units are most of the planning's work,
 *      and heads are often fewer than or not a multiple of the threads: 3
 *      heads on 2 threads left one thread scoring two), followed in the same
 *      task list by one task per request for its top-k and work items, which
 *      starts as soon as that request's units are scored (the pool hands out
 *      tasks in order: a request's top-k runs while other threads still
 *      score later requests);
 *   2. attend: the items are split into parts (flash-decoding when streams are
 *      fewer than threads); a part runs qk, an online softmax and pv per item,
 *      with a separate accumulator per transform group that is mapped back by
 *      finish_out once when the group ends;
 *   3. merge: the parts' (max, sum, output) are combined in a fixed order, and
 *      if asked the attention weights are reported per item.
 * Phases 1 and 2 run in parallel on the pool; phase 3 on the caller. Phase 1
 * is attend_plan.c; the state they share is attend_internal.h. */
#include "kv/attend.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "kv/attend_internal.h"
#include "kv/near.h"
#include "kv/softmax.h"
#include "kvcomp/progress.h" /* kvc_now_s */

void kvc_attend_ws_times(const kvc_attend_ws *ws, kvc_attend_times *out) {
    *out = ws->times;
    for (int i = 0; i < ws->cap_reqs; i++) {
        const kvc_topk_ws *t = &ws->reqs[i].topk;
        out->topk_calls += t->calls;
        out->topk_units += t->units;
        out->topk_candidates += t->candidates;
        out->topk_continued += t->continued;
        out->topk_whole += t->whole;
        out->near_copied += (uint64_t)ws->reqs[i].near_copied;
    }
}

kvc_status kvc_attend_ws_create(kvc_attend_ws **out) {
    *out = calloc(1, sizeof **out);
    return *out ? KVC_OK : kvc_fail(KVC_ERR_NOMEM, "attention workspace");
}

static void req_state_free(req_state *r) {
    free(r->qs); free(r->qt); free(r->groups); free(r->items); free(r->ranges); free(r->sraw);
    free(r->chunk_group); free(r->useg);
    free(r->uscore); free(r->ulen); free(r->tseg);
    kvc_topk_ws_free(&r->topk);
}

void kvc_attend_ws_free(kvc_attend_ws *ws) {
    if (!ws) return;
    for (int i = 0; i < ws->cap_reqs; i++) req_state_free(&ws->reqs[i]);
    free(ws->reqs);
    free(ws->parts);
    free(ws->pieces);
    free(ws->stasks);
    free(ws->pacc);
    for (int i = 0; i < MAX_THREADS; i++) {
        free(ws->th[i].s); free(ws->th[i].acc); free(ws->th[i].gacc); free(ws->th[i].tmp);
    }
    free(ws);
}

uint64_t kvc_attend_ws_bytes(const kvc_attend_ws *ws) {
    if (!ws) return 0;
    uint64_t b = sizeof *ws + (uint64_t)ws->cap_parts * sizeof(part) + ws->cap_pacc * 4 +
                 (uint64_t)ws->cap_pieces * sizeof(score_piece) + (uint64_t)ws->cap_stasks * sizeof(score_task);
    for (int i = 0; i < ws->cap_reqs; i++) {
        const req_state *r = &ws->reqs[i];
        b += sizeof *r + r->qt_cap * 4 + (uint64_t)r->cap_items * sizeof(item) +
             (uint64_t)r->cap_ranges * sizeof(kvc_range) + r->sraw_cap * 4 +
             r->ucap * (4 + 4) + r->topk.cap * (2 + 4) + r->topk.ccap * (4 * 5 + 1) +
             (uint64_t)r->cap_tseg * sizeof(kvc_topk_seg) +
             (uint64_t)r->cap_groups * sizeof(group) + (uint64_t)r->cap_cg * sizeof(int) +
             (uint64_t)r->cap_useg * sizeof(useg);
    }
    for (int i = 0; i < MAX_THREADS; i++)
        b += (ws->th[i].cap_s * 2 + ws->th[i].cap_acc * 2 + ws->th[i].cap_g) * 4;
    return b;
}

/* ---- phase 2: attend ------------------------------------------------------------ */

static const kvc_chunk *chunk_at(const kvc_stream *s, int ci) {
    return ci == KVC_NEAR_CI ? kvc_near_chunk(s->near) : ci < 0 ? s->hot : s->chunks[ci];
}

typedef struct run_ctx {
    kvc_attend_req *reqs;
    kvc_attend_ws *ws;
    const kvc_attend_opts *o;
    int dmax;
} run_ctx;

static int thread_ws_reserve(thread_ws *t, int G, int d, int dv_max) {
    size_t ns = (size_t)G * TILE * 2, na = (size_t)G * (2 + d), ng = (size_t)G * (2 + dv_max);
    if (ns > t->cap_s) {
        free(t->s);
        t->s = aligned_alloc(64, ((ns * 4 + 63) / 64) * 64);
        t->cap_s = t->s ? ns : 0;
    }
    if (na > t->cap_acc) {
        free(t->acc);
        free(t->tmp);
        t->acc = malloc(na * 4);
        t->tmp = malloc(na * 4);
        t->cap_acc = t->acc && t->tmp ? na : 0;
    }
    if (ng > t->cap_g) {
        free(t->gacc);
        t->gacc = malloc(ng * 4);
        t->cap_g = t->gacc ? ng : 0;
    }
    return t->cap_s >= ns && t->cap_acc >= na && t->cap_g >= ng;
}

/* acc layout: m[G], l[G], o[G][dim] */
static void acc_init(float *acc, int G, int dim) {
    for (int g = 0; g < G; g++) acc[g] = -INFINITY, acc[G + g] = 0.0f;
    memset(acc + 2 * G, 0, (size_t)G * dim * sizeof(float));
}

/* Merges partial (m2, l2, o2 [G][ld2]) into acc. */
static void acc_merge(float *acc, int G, int dim, const float *m2, const float *l2, const float *o2,
                      int ld2) {
    for (int g = 0; g < G; g++) {
        if (l2[g] == 0.0f && m2[g] == -INFINITY) continue;
        float m1 = acc[g], m = m1 > m2[g] ? m1 : m2[g];
        float a = m1 == -INFINITY ? 0.0f : expf(m1 - m), b = expf(m2[g] - m);
        float *o = acc + 2 * G + (size_t)g * dim;
        const float *p = o2 + (size_t)g * ld2;
        for (int j = 0; j < dim; j++) o[j] = o[j] * a + p[j] * b;
        acc[G + g] = acc[G + g] * a + l2[g] * b;
        acc[g] = m;
    }
}

/* Scattered ranges (selected units of a few tokens each) defeat the hardware
 * prefetcher. A part's scattered items use their ranges in a fixed order:
 * an item's K ranges (qk), then its V ranges (pv), then the next item's. The
 * prefetch cursor walks that order PF_AHEAD tokens ahead of the kernels, and
 * the kernels take a scattered range a few tokens at a time (the codec's
 * `piece`: 4 for the dense formats), the cursor moving on by as many tokens
 * before each piece: the loads stay in flight at a steady distance and are
 * asked for a few lines at a time between the kernels' work, not a whole
 * sentence's in one burst that fills the miss buffers (docs/benchmarks.md,
 * "Prefetch that keeps pace" and "SentKV: heads summed, prefetch in
 * pieces"). Items of one contiguous range stream, and the kernels prefetch
 * them. */
enum { PF_AHEAD = 224 };

typedef struct pf_cursor {
    const kvc_stream *st;
    const req_state *r;
    int item, end; /* the item the cursor is in, the part's end */
    int step;      /* within the item: K ranges 0..nr-1, then V ranges nr..2nr-1 */
    int tok;       /* tokens of the range at step already prefetched */
} pf_cursor;

/* The near buffer's ranges (kv/near.h) lie almost end to end: they stream. */
static int item_scattered(const item *it) { return it->nr > 1 && it->ci != KVC_NEAR_CI; }

/* Prefetches the next n tokens at the cursor and moves it on by them
 * (nothing once it has passed the part's last scattered item). */
static void pf_advance(pf_cursor *pc, int n) {
    while (n > 0 && pc->item < pc->end) {
        const item *it = &pc->r->items[pc->item];
        if (!item_scattered(it) || pc->step >= 2 * it->nr) {
            pc->item++, pc->step = 0, pc->tok = 0;
            continue;
        }
        const kvc_chunk *c = chunk_at(pc->st, it->ci);
        int v = pc->step >= it->nr;
        const kvc_range *rg = pc->r->ranges + it->r0 + pc->step - (v ? it->nr : 0);
        int left = rg->end - rg->begin - pc->tok, m = left < n ? left : n;
        kvc_range piece = {rg->begin + pc->tok, rg->begin + pc->tok + m};
        kvc_codec_prefetch_ranges(v ? &c->vc : &c->kc, v ? c->vb : c->kb, &piece, 1);
        pc->tok += m;
        n -= m;
        if (m == left) pc->step++, pc->tok = 0;
    }
}

static void pf_start(pf_cursor *pc, const kvc_stream *st, const req_state *r, int item0, int item1) {
    *pc = (pf_cursor){st, r, item0, item1, 0, 0};
    pf_advance(pc, PF_AHEAD);
}

/* Tokens per kernel call for an item's ranges: the codec's piece for
 * scattered ones (kvc_codec_ops.piece), else whole ranges. */
static int piece_len(const kvc_codec *c, const item *it) {
    return item_scattered(it) && c->ops->piece > 0 ? c->ops->piece : INT32_MAX;
}

/* The piece of range r from token b on, at most len tokens (empty at its end). */
static kvc_range next_piece(const kvc_range *r, int b, int len) {
    return (kvc_range){b, r->end - b > len ? b + len : r->end};
}

/* s[g*TILE + j] = q_g · k_j over the item's ranges, a piece at a time; the
 * cursor moves on by each piece of a scattered item. */
static void item_qk(const kvc_chunk *c, const item *it, const kvc_range *r, const float *q, int ldq, int G,
                    float *s, pf_cursor *pc) {
    int len = piece_len(&c->kc, it), nr = it->nr;
    for (int i = 0; i < nr; i++)
        for (kvc_range piece = next_piece(r + i, r[i].begin, len); piece.begin < r[i].end;
             s += piece.end - piece.begin, piece = next_piece(r + i, piece.end, len)) {
            if (item_scattered(it)) pf_advance(pc, piece.end - piece.begin);
            kvc_codec_qk_ranges(&c->kc, c->kb, q, G, ldq, &piece, 1, s, TILE);
        }
}

/* o += p · v over the item's ranges, the same way as item_qk. */
static void item_pv(const kvc_chunk *c, const item *it, const kvc_range *r, const float *p, int G, float *o,
                    int ldo, pf_cursor *pc) {
    int len = piece_len(&c->vc, it), nr = it->nr;
    for (int i = 0; i < nr; i++)
        for (kvc_range piece = next_piece(r + i, r[i].begin, len); piece.begin < r[i].end;
             p += piece.end - piece.begin, piece = next_piece(r + i, piece.end, len)) {
            if (item_scattered(it)) pf_advance(pc, piece.end - piece.begin);
            kvc_codec_pv_ranges(&c->vc, c->vb, p, G, TILE, &piece, 1, o, ldo);
        }
}

/* A near buffer item's rows (kv/near.h): the newly selected units' rows
 * copied in now, so that qk and pv read them from the CPU's cache; the
 * sources of the next TILE rows' copies asked for meanwhile. */
static void near_fill_item(kvc_near *nb, const kvc_range *r, int nr) {
    kvc_near_prefetch(nb, (kvc_range){r[nr - 1].end, r[nr - 1].end + TILE});
    for (int i = 0; i < nr; i++) kvc_near_fill(nb, r[i]);
}

/* One item: qk, mask, online softmax update of acc (dimension dim), pv. nb:
 * the near buffer when the item is one of its (else NULL). */
static void run_item(const kvc_chunk *c, kvc_near *nb, const item *it, const kvc_range *rs, const float *q,
                     int ldq, int G, float *acc, int dim, float *s, float *sraw, int64_t nraw, pf_cursor *pc) {
    int n = it->n;
    const kvc_range *r = rs + it->r0;
    if (nb) near_fill_item(nb, r, it->nr);
    item_qk(c, it, r, q, ldq, G, s, pc);
    if (c->dead) {
        int j = 0;
        for (int i = 0; i < it->nr; i++)
            for (int t = r[i].begin; t < r[i].end; t++, j++)
                if (kvc_chunk_is_dead(c, t))
                    for (int g = 0; g < G; g++) s[(size_t)g * TILE + j] = -INFINITY;
    }
    if (sraw)
        for (int g = 0; g < G; g++) memcpy(sraw + (size_t)g * nraw + it->off, s + (size_t)g * TILE, (size_t)n * 4);
    int any = 0;
    for (int g = 0; g < G; g++) {
        float *sg = s + (size_t)g * TILE;
        float mt = kvc_softmax_k.max(sg, n);
        if (mt == -INFINITY) { /* all masked: zero probabilities */
            memset(sg, 0, (size_t)n * 4);
            continue;
        }
        any = 1;
        float m = acc[g] > mt ? acc[g] : mt;
        if (m > acc[g]) {
            float a = acc[g] == -INFINITY ? 0.0f : expf(acc[g] - m);
            float *o = acc + 2 * G + (size_t)g * dim;
            for (int j = 0; j < dim; j++) o[j] *= a;
            acc[G + g] *= a;
            acc[g] = m;
        }
        acc[G + g] += kvc_softmax_k.exp_sum(sg, n, m);
    }
    if (any) item_pv(c, it, r, s, G, acc + 2 * G, dim, pc);
    else if (item_scattered(it)) /* no pv: the cursor still passes the V ranges, to stay ahead */
        pf_advance(pc, n);
}

static void run_part(void *ctx, int task, int thread) {
    run_ctx *rc = ctx;
    kvc_attend_ws *ws = rc->ws;
    const part *pt = &ws->parts[task];
    kvc_attend_req *rq = &rc->reqs[pt->req];
    req_state *r = &ws->reqs[pt->req];
    kvc_stream *st = rq->s;
    int G = rc->o->G, d = st->dim;
    thread_ws *t = &ws->th[thread];
    float *pacc = ws->pacc + (size_t)task * G * (2 + rc->dmax);
    acc_init(pacc, G, d);
    int grp = -1;
    float *gacc = t->gacc;
    int dv = 0;
    float *sraw = rq->want_attn ? r->sraw : NULL;
    pf_cursor pc;
    pf_start(&pc, st, r, pt->item0, pt->item1);
    for (int i = pt->item0; i < pt->item1; i++) {
        const item *it = &r->items[i];
        if (it->group != grp) {
            if (grp >= 0) { /* close the previous transform group */
                r->groups[grp].xf->ops->finish_out(r->groups[grp].xf, gacc + 2 * G, G, dv, t->tmp, d);
                acc_merge(pacc, G, d, gacc, gacc + G, t->tmp, d);
            }
            grp = it->group;
            if (grp >= 0) {
                kvc_xform_prefetch(r->groups[grp].xf, 1); /* used when the group closes */
                dv = r->groups[grp].xf->dim_v;
                acc_init(gacc, G, dv);
            }
        }
        const kvc_chunk *c = chunk_at(st, it->ci);
        kvc_near *nb = it->ci == KVC_NEAR_CI ? st->near : NULL;
        if (grp >= 0)
            run_item(c, nb, it, r->ranges, r->qt + r->groups[grp].q_off, r->groups[grp].xf->dim_k, G,
                     gacc, dv, t->s, sraw, r->n_tokens, &pc);
        else
            run_item(c, nb, it, r->ranges, r->qs, d, G, pacc, d, t->s, sraw, r->n_tokens, &pc);
    }
    if (grp >= 0) {
        r->groups[grp].xf->ops->finish_out(r->groups[grp].xf, gacc + 2 * G, G, dv, t->tmp, d);
        acc_merge(pacc, G, d, gacc, gacc + G, t->tmp, d);
    }
}

/* ---- driver ------------------------------------------------------------------- */

/* Parts per request: enough tasks to balance the threads, none smaller than min_tokens. */
static int parts_for(int64_t tokens, int n_items, int n_req, int n_threads, int min_tokens) {
    if (n_threads <= 1 || n_req >= 2 * n_threads) return 1;
    int target = (4 * n_threads + n_req - 1) / n_req;
    int p = target;
    while (p < 4 * target && (p * n_req) % n_threads) p++;
    if ((p * n_req) % n_threads) p = target;
    int64_t cap = tokens / (min_tokens > 0 ? min_tokens : 1);
    if (p > cap) p = (int)cap;
    if (p > n_items) p = n_items;
    return p < 1 ? 1 : p;
}

kvc_status kvc_attend(kvc_attend_req *reqs, int n_req, const kvc_attend_opts *o,
                      struct kvc_pool *pool, kvc_attend_ws *ws) {
    KVC_CHECK(n_req >= 0 && o->G >= 1, KVC_ERR_ARG, "attend: %d requests, G %d", n_req, o->G);
    if (n_req == 0) return KVC_OK;
    if (n_req > ws->cap_reqs) {
        req_state *nr = realloc(ws->reqs, (size_t)n_req * sizeof *nr);
        if (!nr) return kvc_fail(KVC_ERR_NOMEM, "attend requests (%d)", n_req);
        memset(nr + ws->cap_reqs, 0, (size_t)(n_req - ws->cap_reqs) * sizeof *nr);
        ws->reqs = nr;
        ws->cap_reqs = n_req;
    }
    int G = o->G;
    double t_call = kvc_now_s(), t_select = 0.0; /* wall time of the selection rounds */
    int n_threads = pool ? kvc_pool_threads(pool) : 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;

    KVC_TRY(kvc_attend_plan(reqs, n_req, o, pool, n_threads, ws, &t_select));
    int dmax = 0, dv_max = 1, n_parts = 0;
    for (int i = 0; i < n_req; i++) {
        req_state *r = &ws->reqs[i];
        KVC_TRY(r->st);
        ws->times.topk_s += r->t_topk;
        int d = reqs[i].s->dim;
        if (d > dmax) dmax = d;
        for (int g = 0; g < r->n_groups; g++)
            if (r->groups[g].xf->dim_v > dv_max) dv_max = r->groups[g].xf->dim_v;
        int p = o->split > 0 ? o->split : parts_for(r->n_tokens, r->n_items, n_req, n_threads,
                                                    o->min_split_tokens > 0 ? o->min_split_tokens : 2048);
        if (p > r->n_items) p = r->n_items;
        if (p < 1) p = 1;
        r->part0 = n_parts;
        r->n_parts = p;
        n_parts += p;
    }
    if (!grow_int(&ws->parts, &ws->cap_parts, (size_t)n_parts, sizeof(part)) ||
        !grow(&ws->pacc, &ws->cap_pacc, (size_t)n_parts * G * (2 + dmax), sizeof(float)))
        return kvc_fail(KVC_ERR_NOMEM, "attention parts (%d)", n_parts);
    for (int t = 0; t < n_threads; t++)
        if (!thread_ws_reserve(&ws->th[t], G, dmax, dv_max > dmax ? dv_max : dmax))
            return kvc_fail(KVC_ERR_NOMEM, "attention thread scratch");
    for (int i = 0; i < n_req; i++) { /* parts: about equal token counts, whole items */
        req_state *r = &ws->reqs[i];
        int it = 0;
        int64_t acc = 0;
        for (int p = 0; p < r->n_parts; p++) {
            int64_t goal = r->n_tokens * (p + 1) / r->n_parts;
            int start = it, max_end = r->n_items - (r->n_parts - 1 - p);
            while (it < max_end && (it == start || acc < goal)) acc += r->items[it++].n;
            if (p == r->n_parts - 1) it = r->n_items;
            ws->parts[r->part0 + p] = (part){.req = i, .item0 = start, .item1 = it};
        }
    }
    /* a short context is not worth a fork-join (decode runs this per layer) */
    int64_t total = 0;
    for (int i = 0; i < n_req; i++) total += ws->reqs[i].n_tokens;
    int fork = n_parts > 1 && (o->split > 0 || total >= SERIAL_TOKENS);
    run_ctx rc = {.reqs = reqs, .ws = ws, .o = o, .dmax = dmax};
    kvc_pool_run(fork ? pool : NULL, n_parts, run_part, &rc);

    /* phase 3: merge parts in order; attention weights */
    for (int i = 0; i < n_req; i++) {
        req_state *r = &ws->reqs[i];
        int d = reqs[i].s->dim;
        float *acc = ws->th[0].acc;
        acc_init(acc, G, d);
        for (int p = 0; p < r->n_parts; p++) {
            const float *pa = ws->pacc + (size_t)(r->part0 + p) * G * (2 + dmax);
            acc_merge(acc, G, d, pa, pa + G, pa + 2 * G, d);
        }
        for (int g = 0; g < G; g++) {
            float l = acc[G + g];
            float inv = l > 0.0f ? 1.0f / l : 0.0f;
            for (int j = 0; j < d; j++) reqs[i].out[(size_t)g * d + j] = acc[2 * G + (size_t)g * d + j] * inv;
        }
        if (reqs[i].want_attn && o->on_attn && r->n_tokens > 0) {
            /* p_token = sum_g exp(s_g - m_g) / l_g, written over the first row */
            float *sr = r->sraw;
            for (int64_t j = 0; j < r->n_tokens; j++) {
                float sum = 0.0f;
                for (int g = 0; g < G; g++) {
                    float l = acc[G + g];
                    if (l > 0.0f) sum += expf(sr[(size_t)g * r->n_tokens + j] - acc[g]) / l;
                }
                sr[j] = sum;
            }
            for (int k = 0; k < r->n_items; k++) {
                const item *it = &r->items[k];
                o->on_attn(o->cb_ctx, i, it->ci, r->ranges + it->r0, it->nr, sr + it->off);
            }
        }
    }
    /* the rest of the call: query maps, planning, qk / softmax / pv, merge */
    ws->times.attn_s += kvc_now_s() - t_call - t_select;
    ws->times.calls++;
    return KVC_OK;
}
