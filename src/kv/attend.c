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
 * Phases 1 and 2 run in parallel on the pool; phase 3 on the caller. */
#include "kv/attend.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kvcomp/progress.h" /* kvc_now_s */
#include "base/threadpool.h"
#include "kv/select/topk.h"
#include "kv/softmax.h"

enum { TILE = 256, MAX_THREADS = 256, SERIAL_TOKENS = 8192 };
/* Scoring tasks: about total units / (SCORE_TASKS_PER_THREAD * threads) units
 * each (dynamic hand-out evens out a thread slowed by a neighbour), within
 * [SCORE_TASK_MIN, SCORE_TASK_MAX] (a 16-unit min/max block of 64 channels is
 * 0.2-0.7 µs, so a task of 1024 units is 13-45 µs against ~0.1 µs to hand it
 * out). */
enum { SCORE_TASKS_PER_THREAD = 8, SCORE_TASK_MIN = 1024, SCORE_TASK_MAX = 16384 };

typedef struct item {
    int ci;        /* chunk index, -1 = hot window */
    int group;     /* transform group index, -1 = none */
    int r0, nr;    /* ranges[r0 .. r0+nr) of the request */
    int n;         /* tokens */
    int64_t off;   /* token offset in the request (for the raw scores) */
} item;

typedef struct group {
    const kvc_xform *xf;
    int q_off;     /* offset of q' [G][dim_k] in req_state.qt */
} group;

typedef struct sel_cache {
    uint64_t version;
    int n;
    int32_t *ci;
    kvc_range *r;
} sel_cache;

/* A selectable chunk of a request: its units' scores at uscore + off. */
typedef struct useg {
    int ci, n;
    size_t off;
} useg;

typedef struct req_state {
    float *qs;                     /* [G][d] scaled query */
    float *qt; size_t qt_cap;      /* q' of every transform group */
    group *groups; int n_groups, cap_groups;
    item *items; int n_items, cap_items;
    kvc_range *ranges; int n_ranges, cap_ranges;
    int64_t n_tokens;
    int part0, n_parts;            /* parts [part0, part0 + n_parts) of the task list */
    float *sraw; size_t sraw_cap;  /* [G][n_tokens] raw scores when want_attn */
    int *chunk_group; int cap_cg;  /* transform group of each chunk, -1 = none */
    /* selection scratch */
    int reuse_hit;                 /* the previous selection stands: nothing scored */
    atomic_int pending;            /* score pieces of this request not finished yet */
    useg *useg; int n_useg, cap_useg;
    size_t nu;                     /* units of all selectable chunks */
    float *uscore; int32_t *ulen; size_t ucap; /* scores; lengths of selectors without ends */
    kvc_topk_seg *tseg; int cap_tseg;
    kvc_topk_ws topk;
    double t_topk;                 /* this call's top-k time */
    kvc_status st;
} req_state;

typedef struct part {
    int req, item0, item1;
} part;

/* Scoring work: a piece is units [u0, u1) of one selectable chunk of a
 * request; a task is a run of pieces [p0, p1). */
typedef struct score_piece {
    int req, seg, u0, u1;
} score_piece;

typedef struct score_task {
    int p0, p1;
    double t; /* thread time */
} score_task;

typedef struct thread_ws {
    float *s, *acc, *gacc, *tmp; /* scores [G][TILE]; accumulators */
    size_t cap_s, cap_acc, cap_g;
} thread_ws;

struct kvc_attend_ws {
    req_state *reqs; int cap_reqs;
    part *parts; int cap_parts;
    score_piece *pieces; int cap_pieces;
    score_task *stasks; int cap_stasks;
    float *pacc; size_t cap_pacc; /* per part: m[G], l[G], o[G][d] */
    thread_ws th[MAX_THREADS];
    int n_th;
    kvc_attend_times times;
};

void kvc_attend_ws_times(const kvc_attend_ws *ws, kvc_attend_times *out) {
    *out = ws->times;
    for (int i = 0; i < ws->cap_reqs; i++) {
        const kvc_topk_ws *t = &ws->reqs[i].topk;
        out->topk_calls += t->calls;
        out->topk_units += t->units;
        out->topk_candidates += t->candidates;
        out->topk_continued += t->continued;
        out->topk_whole += t->whole;
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

/* Grows *p (elements of size es) to hold at least n; *cap in elements. */
static int grow(void *pp, size_t *cap, size_t n, size_t es) {
    void **p = pp;
    if (n <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *q = realloc(*p, c * es);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}
static int grow_int(void *pp, int *cap, size_t n, size_t es) {
    size_t c = (size_t)*cap;
    int ok = grow(pp, &c, n, es);
    *cap = (int)c;
    return ok;
}

/* ---- phase 1: plan ------------------------------------------------------------ */

static kvc_chunk *chunk_at(const kvc_stream *s, int ci) { return ci < 0 ? s->hot : s->chunks[ci]; }

static int add_range(req_state *r, kvc_range x) {
    if (!grow_int(&r->ranges, &r->cap_ranges, (size_t)r->n_ranges + 1, sizeof(kvc_range))) return 0;
    r->ranges[r->n_ranges++] = x;
    return 1;
}

static int new_item(req_state *r, int ci, int grp) {
    if (!grow_int(&r->items, &r->cap_items, (size_t)r->n_items + 1, sizeof(item))) return 0;
    item *it = &r->items[r->n_items++];
    *it = (item){.ci = ci, .group = grp, .r0 = r->n_ranges, .nr = 0, .n = 0, .off = r->n_tokens};
    return 1;
}

/* Cuts the sorted ranges rs[0..n) of chunk ci into items of <= tile tokens. */
static int add_ranges(req_state *r, int ci, int grp, const kvc_range *rs, int n, int tile) {
    int open = 0;
    for (int i = 0; i < n; i++) {
        int b = rs[i].begin, e = rs[i].end;
        while (b < e) {
            if (!open) {
                if (!new_item(r, ci, grp)) return 0;
                open = 1;
            }
            item *it = &r->items[r->n_items - 1];
            int room = tile - it->n;
            /* a full chunk is cut at multiples of the tile from its start */
            int take = e - b < room ? e - b : room;
            if (!add_range(r, (kvc_range){b, b + take})) return 0;
            it->nr++;
            it->n += take;
            r->n_tokens += take;
            b += take;
            if (it->n == tile) open = 0;
        }
    }
    return 1;
}

static int tile_for(const kvc_chunk *c) {
    int g = c->kc.ops->granule > c->vc.ops->granule ? c->kc.ops->granule : c->vc.ops->granule;
    if (g < 1) g = 1;
    return g >= TILE ? g : TILE - TILE % g;
}

typedef struct unit_ref {
    int32_t ci;
    kvc_range r;
} unit_ref;

/* Whether the previous step's selection stands (plan.reuse and the stream unchanged). */
static int reuse_hit(const kvc_attend_req *rq) {
    const kvc_stream *s = rq->s;
    const sel_cache *sc = s->sel_cache;
    return rq->plan.reuse && sc && sc->version == s->version;
}

/* Selection: returns the chosen units of selectable chunks sorted by (chunk,
 * begin), from the scores plan_prep's segments received (uscore). */
static kvc_status select_units(kvc_attend_req *rq, req_state *r, unit_ref **out, int *n_out) {
    kvc_stream *s = rq->s;
    sel_cache *sc = s->sel_cache;
    *out = NULL;
    *n_out = 0;
    if (r->reuse_hit) {
        unit_ref *u = malloc((size_t)(sc->n ? sc->n : 1) * sizeof *u);
        if (!u) return kvc_fail(KVC_ERR_NOMEM, "selection reuse");
        for (int i = 0; i < sc->n; i++) u[i] = (unit_ref){sc->ci[i], sc->r[i]};
        *out = u;
        *n_out = sc->n;
        return KVC_OK;
    }
    double t1 = kvc_now_s();
    if (!grow_int(&r->tseg, &r->cap_tseg, (size_t)(r->n_useg ? r->n_useg : 1), sizeof(kvc_topk_seg)))
        return kvc_fail(KVC_ERR_NOMEM, "selectable chunks");
    for (int gi = 0; gi < r->n_useg; gi++) { /* one segment per selectable chunk, in chunk order */
        const useg *g = &r->useg[gi];
        const kvc_chunk *c = s->chunks[g->ci];
        const int32_t *ends = c->sel.ops->ends ? c->sel.ops->ends(c->sel.index) : NULL;
        if (!ends) /* lengths one call per unit */
            for (int u = 0; u < g->n; u++) {
                kvc_range x = c->sel.ops->unit(c->sel.index, u);
                r->ulen[g->off + u] = x.end - x.begin;
            }
        r->tseg[gi] = (kvc_topk_seg){.score = r->uscore + g->off, .ends = ends, .len = ends ? NULL : r->ulen + g->off,
                                     .n = g->n};
    }
    const int32_t *pick;
    size_t n_pick;
    if (kvc_topk_greedy_segs(&r->topk, r->tseg, r->n_useg, rq->plan.budget, &pick, &n_pick) < 0)
        return kvc_fail(KVC_ERR_NOMEM, "unit selection (%zu units)", r->nu);
    int n = (int)n_pick;
    unit_ref *u = malloc((size_t)(n ? n : 1) * sizeof *u);
    if (!u) return kvc_fail(KVC_ERR_NOMEM, "selected units (%d)", n);
    int gi = 0; /* list index -> (segment, unit), the picks increasing */
    for (int i = 0; i < n; i++) {
        while ((size_t)pick[i] >= r->useg[gi].off + (size_t)r->useg[gi].n) gi++;
        const useg *g = &r->useg[gi];
        const kvc_chunk *c = s->chunks[g->ci];
        int k = pick[i] - (int32_t)g->off;
        const int32_t *ends = r->tseg[gi].ends;
        u[i] = (unit_ref){g->ci, ends ? (kvc_range){k ? ends[k - 1] : 0, ends[k]} : c->sel.ops->unit(c->sel.index, k)};
    }
    if (rq->plan.reuse) { /* remember for the next step: one block, freed with free() */
        free(s->sel_cache);
        sc = malloc(sizeof *sc + (size_t)n * (sizeof(int32_t) + sizeof(kvc_range)));
        s->sel_cache = sc;
        if (sc) {
            sc->r = (kvc_range *)(sc + 1);
            sc->ci = (int32_t *)(sc->r + n);
            for (int i = 0; i < n; i++) sc->ci[i] = u[i].ci, sc->r[i] = u[i].r;
            sc->n = n;
            sc->version = s->version;
        }
    }
    *out = u;
    *n_out = n;
    r->t_topk = kvc_now_s() - t1;
    return KVC_OK;
}

typedef struct plan_ctx {
    kvc_attend_req *reqs;
    kvc_attend_ws *ws;
    const kvc_attend_opts *o;
} plan_ctx;

/* Planning, first round: the scaled query, the transform groups (q' per
 * group) and, when units are to be scored, the selectable chunks as segments
 * of the score array. */
static kvc_status plan_prep(kvc_attend_req *rq, req_state *r, const kvc_attend_opts *o) {
    kvc_stream *s = rq->s;
    int G = o->G, d = s->dim;
    r->n_groups = r->n_items = r->n_ranges = 0;
    r->n_tokens = 0;
    r->t_topk = 0.0;
    r->n_useg = 0;
    r->nu = 0;
    r->reuse_hit = 0;
    float *qs = realloc(r->qs, (size_t)G * d * sizeof *qs);
    if (!qs) return kvc_fail(KVC_ERR_NOMEM, "scaled query");
    r->qs = qs;
    float scale = 1.0f / sqrtf((float)d);
    for (int i = 0; i < G * d; i++) qs[i] = rq->q[i] * scale;

    /* transform groups: runs of consecutive chunks with the same xf */
    if (!grow_int(&r->chunk_group, &r->cap_cg, (size_t)(s->n_chunks ? s->n_chunks : 1), sizeof(int)))
        return kvc_fail(KVC_ERR_NOMEM, "chunk groups");
    int *chunk_group = r->chunk_group;
    size_t qoff = 0;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        const kvc_xform *xf = s->chunks[ci]->xf;
        if (!xf) {
            chunk_group[ci] = -1;
            continue;
        }
        if (ci > 0 && s->chunks[ci - 1]->xf == xf) {
            chunk_group[ci] = chunk_group[ci - 1];
            continue;
        }
        if (!grow_int(&r->groups, &r->cap_groups, (size_t)r->n_groups + 1, sizeof(group)) ||
            !grow(&r->qt, &r->qt_cap, qoff + (size_t)G * xf->dim_k, sizeof(float)))
            return kvc_fail(KVC_ERR_NOMEM, "transform groups");
        r->groups[r->n_groups] = (group){.xf = xf, .q_off = (int)qoff};
        xf->ops->prepare_q(xf, qs, G, d, r->qt + qoff, xf->dim_k);
        qoff += (size_t)G * xf->dim_k;
        chunk_group[ci] = r->n_groups++;
    }
    if (rq->plan.budget < 0) return KVC_OK;
    if (reuse_hit(rq)) {
        r->reuse_hit = 1;
        return KVC_OK;
    }
    size_t nu = 0;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        if (!c->sel.ops || (c->flags & KVC_CHUNK_ALWAYS)) continue;
        int n = c->sel.ops->n_units(c->sel.index);
        if (n <= 0) continue;
        if (!grow_int(&r->useg, &r->cap_useg, (size_t)r->n_useg + 1, sizeof(useg)))
            return kvc_fail(KVC_ERR_NOMEM, "selectable chunks");
        r->useg[r->n_useg++] = (useg){.ci = ci, .n = n, .off = nu};
        nu += (size_t)n;
    }
    if (nu > r->ucap) {
        size_t cap = nu;
        free(r->uscore); free(r->ulen);
        r->uscore = malloc(cap * sizeof *r->uscore);
        r->ulen = malloc(cap * sizeof *r->ulen);
        r->ucap = r->uscore && r->ulen ? cap : 0;
        if (!r->ucap) return kvc_fail(KVC_ERR_NOMEM, "unit arrays (%zu units)", nu);
    }
    r->nu = nu;
    return KVC_OK;
}

/* Planning, last round: the selection from the scores, then the work items. */
static kvc_status plan_finish(kvc_attend_req *rq, int idx, req_state *r, const kvc_attend_opts *o) {
    kvc_stream *s = rq->s;
    const int *chunk_group = r->chunk_group;
    unit_ref *sel = NULL;
    int n_sel = 0;
    kvc_status st = KVC_OK;
    if (rq->plan.budget >= 0) st = select_units(rq, r, &sel, &n_sel);
    if (st == KVC_OK && o->on_select && rq->plan.budget >= 0 && n_sel > 0) {
        int32_t *ci = malloc((size_t)n_sel * sizeof *ci);
        kvc_range *ur = malloc((size_t)n_sel * sizeof *ur);
        if (ci && ur) {
            for (int i = 0; i < n_sel; i++) ci[i] = sel[i].ci, ur[i] = sel[i].r;
            o->on_select(o->cb_ctx, idx, n_sel, ci, ur);
        }
        free(ci);
        free(ur);
    }

    /* work items, chunk order (transform groups stay contiguous), hot window last */
    int si = 0;
    kvc_range *tmp = NULL;
    int tmp_cap = 0;
    for (int ci = 0; ci < s->n_chunks && st == KVC_OK; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        if (c->n == 0) continue;
        int tile = tile_for(c);
        int selectable = rq->plan.budget >= 0 && c->sel.ops && !(c->flags & KVC_CHUNK_ALWAYS);
        int ok;
        if (!selectable) {
            kvc_range all = {0, c->n};
            ok = add_ranges(r, ci, chunk_group[ci], &all, 1, tile);
        } else {
            int n = 0;
            while (si < n_sel && sel[si].ci < ci) si++;
            while (si + n < n_sel && sel[si + n].ci == ci) n++;
            if (n > tmp_cap) {
                kvc_range *t = realloc(tmp, (size_t)n * sizeof *t);
                if (!t) { st = kvc_fail(KVC_ERR_NOMEM, "ranges"); break; }
                tmp = t;
                tmp_cap = n;
            }
            int m = 0; /* merge adjacent units */
            for (int i = 0; i < n; i++) {
                kvc_range u = sel[si + i].r;
                if (m > 0 && tmp[m - 1].end == u.begin) tmp[m - 1].end = u.end;
                else tmp[m++] = u;
            }
            ok = add_ranges(r, ci, chunk_group[ci], tmp, m, tile);
            si += n;
        }
        if (!ok) st = kvc_fail(KVC_ERR_NOMEM, "work items");
    }
    if (st == KVC_OK && s->hot->n > 0) {
        kvc_range all = {0, s->hot->n};
        if (!add_ranges(r, -1, -1, &all, 1, TILE)) st = kvc_fail(KVC_ERR_NOMEM, "work items");
    }
    free(tmp);
    free(sel);
    if (st == KVC_OK && rq->want_attn &&
        !grow(&r->sraw, &r->sraw_cap, (size_t)o->G * (size_t)(r->n_tokens ? r->n_tokens : 1), sizeof(float)))
        st = kvc_fail(KVC_ERR_NOMEM, "attention weights (%lld tokens)", (long long)r->n_tokens);
    return st;
}

static void prep_task(void *ctx, int task, int thread) {
    (void)thread;
    plan_ctx *pc = ctx;
    req_state *r = &pc->ws->reqs[task];
    r->st = plan_prep(&pc->reqs[task], r, pc->o);
}

static void finish_task(void *ctx, int task, int thread) {
    (void)thread;
    plan_ctx *pc = ctx;
    req_state *r = &pc->ws->reqs[task];
    if (r->st == KVC_OK) r->st = plan_finish(&pc->reqs[task], task, r, pc->o);
    pc->reqs[task].n_read = r->n_tokens;
}

/* Without selection the planning is one cheap round per request. */
static void plan_task(void *ctx, int task, int thread) {
    prep_task(ctx, task, thread);
    finish_task(ctx, task, thread);
}

/* Scores the units of one task's pieces (the query as its chunk's codecs see it). */
static void score_task_run(void *ctx, int task, int thread) {
    (void)thread;
    plan_ctx *pc = ctx;
    kvc_attend_ws *ws = pc->ws;
    score_task *t = &ws->stasks[task];
    int G = pc->o->G;
    double t0 = kvc_now_s();
    for (int p = t->p0; p < t->p1; p++) {
        const score_piece *pc_ = &ws->pieces[p];
        req_state *r = &ws->reqs[pc_->req];
        const useg *g = &r->useg[pc_->seg];
        const kvc_chunk *c = pc->reqs[pc_->req].s->chunks[g->ci];
        int grp = r->chunk_group[g->ci];
        const float *q = grp >= 0 ? r->qt + r->groups[grp].q_off : r->qs;
        int ldq = grp >= 0 ? r->groups[grp].xf->dim_k : pc->reqs[pc_->req].s->dim;
        float *out = r->uscore + g->off + pc_->u0;
        if (pc_->u0 == 0 && pc_->u1 == g->n) c->sel.ops->score(c->sel.index, q, G, ldq, out);
        else c->sel.ops->score_range(c->sel.index, q, G, ldq, pc_->u0, pc_->u1, out);
        atomic_fetch_sub_explicit(&r->pending, 1, memory_order_release); /* the scores are written */
    }
    t->t = kvc_now_s() - t0;
}

/* The selection's task list: score tasks [0, n_score), then request
 * t - n_score's top-k and work items, once its pieces are all scored: they
 * were handed out before this task (in order), so they run on other threads
 * and will finish. */
typedef struct select_ctx {
    plan_ctx pc;
    int n_score;
} select_ctx;

static void select_task(void *ctx, int task, int thread) {
    select_ctx *sc = ctx;
    if (task < sc->n_score) {
        score_task_run(&sc->pc, task, thread);
        return;
    }
    req_state *r = &sc->pc.ws->reqs[task - sc->n_score];
    for (int spins = 0; atomic_load_explicit(&r->pending, memory_order_acquire) > 0; spins++) {
        if (spins < 4096) __builtin_ia32_pause();
        else sched_yield(); /* the thread scoring it was descheduled */
    }
    finish_task(&sc->pc, task - sc->n_score, thread);
}

/* The scoring of every request's segments cut into tasks of about equal unit
 * counts: pieces of at most `size` units (a chunk is cut only if its selector
 * scores ranges), runs of pieces of at least `size` units per task. */
static kvc_status plan_score_tasks(kvc_attend_ws *ws, kvc_attend_req *reqs, int n_req, int n_threads,
                                   int forced, int *n_tasks) {
    size_t total = 0;
    for (int i = 0; i < n_req; i++) {
        total += ws->reqs[i].st == KVC_OK ? ws->reqs[i].nu : 0;
        atomic_store_explicit(&ws->reqs[i].pending, 0, memory_order_relaxed);
    }
    *n_tasks = 0;
    if (total == 0) return KVC_OK;
    size_t size = total / ((size_t)SCORE_TASKS_PER_THREAD * (size_t)n_threads);
    size = size < SCORE_TASK_MIN ? SCORE_TASK_MIN : size > SCORE_TASK_MAX ? SCORE_TASK_MAX : size;
    if (forced > 0) size = (size_t)forced + KVC_SCORE_ALIGN - 1;
    size -= size % KVC_SCORE_ALIGN;
    int np = 0, nt = 0;
    size_t acc = 0;
    for (int i = 0; i < n_req; i++) {
        req_state *r = &ws->reqs[i];
        if (r->st != KVC_OK) continue;
        for (int gi = 0; gi < r->n_useg; gi++) {
            const useg *g = &r->useg[gi];
            const kvc_chunk *c = reqs[i].s->chunks[g->ci];
            int step = c->sel.ops->score_range && (size_t)g->n > size ? (int)size : g->n;
            for (int u0 = 0; u0 < g->n; u0 += step) {
                int u1 = g->n - u0 > step ? u0 + step : g->n;
                if (!grow_int(&ws->pieces, &ws->cap_pieces, (size_t)np + 1, sizeof(score_piece)) ||
                    !grow_int(&ws->stasks, &ws->cap_stasks, (size_t)nt + 1, sizeof(score_task)))
                    return kvc_fail(KVC_ERR_NOMEM, "scoring tasks");
                if (acc == 0) ws->stasks[nt++] = (score_task){.p0 = np, .p1 = np};
                ws->pieces[np++] = (score_piece){.req = i, .seg = gi, .u0 = u0, .u1 = u1};
                atomic_fetch_add_explicit(&r->pending, 1, memory_order_relaxed);
                ws->stasks[nt - 1].p1 = np;
                acc += (size_t)(u1 - u0);
                if (acc >= size) acc = 0;
            }
        }
    }
    *n_tasks = nt;
    return KVC_OK;
}

/* ---- phase 2: attend ------------------------------------------------------------ */

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

/* One item: qk, mask, online softmax update of acc (dimension dim), pv. */
static void run_item(const kvc_chunk *c, const item *it, const kvc_range *rs, const float *q,
                     int ldq, int G, float *acc, int dim, float *s, float *sraw, int64_t nraw) {
    int n = it->n;
    const kvc_range *r = rs + it->r0;
    kvc_codec_qk_ranges(&c->kc, c->kb, q, G, ldq, r, it->nr, s, TILE);
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
    if (any) kvc_codec_pv_ranges(&c->vc, c->vb, s, G, TILE, r, it->nr, acc + 2 * G, dim);
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
    for (int i = pt->item0; i < pt->item1; i++) {
        const item *it = &r->items[i];
        if (it->group != grp) {
            if (grp >= 0) { /* close the previous transform group */
                r->groups[grp].xf->ops->finish_out(r->groups[grp].xf, gacc + 2 * G, G, dv, t->tmp, d);
                acc_merge(pacc, G, d, gacc, gacc + G, t->tmp, d);
            }
            grp = it->group;
            if (grp >= 0) {
                dv = r->groups[grp].xf->dim_v;
                acc_init(gacc, G, dv);
            }
        }
        const kvc_chunk *c = chunk_at(st, it->ci);
        if (i + 1 < pt->item1 && r->items[i + 1].nr > 1) { /* scattered ranges: load the next item early */
            const item *nx = &r->items[i + 1];
            const kvc_chunk *nc = chunk_at(st, nx->ci);
            kvc_codec_prefetch_ranges(&nc->kc, nc->kb, r->ranges + nx->r0, nx->nr);
            kvc_codec_prefetch_ranges(&nc->vc, nc->vb, r->ranges + nx->r0, nx->nr);
        }
        if (grp >= 0)
            run_item(c, it, r->ranges, r->qt + r->groups[grp].q_off, r->groups[grp].xf->dim_k, G,
                     gacc, dv, t->s, sraw, r->n_tokens);
        else
            run_item(c, it, r->ranges, r->qs, d, G, pacc, d, t->s, sraw, r->n_tokens);
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

    /* planning is cheap unless units are scored: fork only for selection */
    int any_select = 0;
    for (int i = 0; i < n_req; i++) any_select |= reqs[i].plan.budget >= 0;
    plan_ctx pc = {.reqs = reqs, .ws = ws, .o = o};
    if (!any_select) {
        kvc_pool_run(NULL, n_req, plan_task, &pc);
    } else {
        kvc_pool_run(n_req > 1 ? pool : NULL, n_req, prep_task, &pc);
        int n_tasks = 0;
        KVC_TRY(plan_score_tasks(ws, reqs, n_req, n_threads, o->score_units, &n_tasks));
        double t0 = kvc_now_s();
        select_ctx sc = {.pc = pc, .n_score = n_tasks};
        kvc_pool_run(pool, n_tasks + n_req, select_task, &sc);
        for (int t = 0; t < n_tasks; t++) ws->times.score_s += ws->stasks[t].t;
        t_select = kvc_now_s() - t0;
        ws->times.select_wall_s += t_select;
    }
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
