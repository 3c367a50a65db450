/* Phase 1 of the decode attention driver (attend.c has the overview): per
 * request, the scaled query and the queries of its transform groups; with a
 * selection budget the scoring of every selectable unit (tasks of about equal
 * unit counts over the pool) and the top-k, or the previous step's selection
 * when it stands; then the attended ranges cut into work items of <= TILE
 * tokens. */
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "kv/attend_internal.h"
#include "kv/near.h"
#include "kvcomp/progress.h" /* kvc_now_s */


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

/* The query of every transform group in the group's stored space. The maps
 * (a segment's rotation: 12 KiB at 64 x 48 floats) sit apart in memory and
 * each is read once per step, so the one PF_GROUPS ahead is asked for while
 * the current one is applied. */
enum { PF_GROUPS = 2 };

static void map_queries(req_state *r, const float *qs, int G, int d) {
    for (int g = 0; g < r->n_groups && g < PF_GROUPS; g++) kvc_xform_prefetch(r->groups[g].xf, 0);
    for (int g = 0; g < r->n_groups; g++) {
        const kvc_xform *xf = r->groups[g].xf;
        if (g + PF_GROUPS < r->n_groups) kvc_xform_prefetch(r->groups[g + PF_GROUPS].xf, 0);
        xf->ops->prepare_q(xf, qs, G, d, r->qt + r->groups[g].q_off, xf->dim_k);
    }
}

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
        qoff += (size_t)G * xf->dim_k;
        chunk_group[ci] = r->n_groups++;
    }
    map_queries(r, qs, G, d);
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

/* The selected ranges of chunk ci (its units from sel[*si..], merged where
 * adjacent) as work items; *si moves past them. */
static int add_selected(req_state *r, int ci, int grp, const unit_ref *sel, int n_sel, int *si, int tile,
                        kvc_range **tmp, int *tmp_cap) {
    int n = 0;
    while (*si < n_sel && sel[*si].ci < ci) (*si)++;
    while (*si + n < n_sel && sel[*si + n].ci == ci) n++;
    if (n > *tmp_cap) {
        kvc_range *t = realloc(*tmp, (size_t)n * sizeof *t);
        if (!t) return 0;
        *tmp = t;
        *tmp_cap = n;
    }
    int m = 0; /* merge adjacent units */
    for (int i = 0; i < n; i++) {
        kvc_range u = sel[*si + i].r;
        if (m > 0 && (*tmp)[m - 1].end == u.begin) (*tmp)[m - 1].end = u.end;
        else (*tmp)[m++] = u;
    }
    *si += n;
    return add_ranges(r, ci, grp, *tmp, m, tile);
}

/* Whether the near buffer takes chunk ci's selected units (a selectable
 * chunk the buffer can hold, outside any transform group). */
static int near_takes(const kvc_stream *s, const int *chunk_group, int ci) {
    const kvc_chunk *c = s->chunks[ci];
    return c->sel.ops && !(c->flags & KVC_CHUNK_ALWAYS) && chunk_group[ci] < 0 && kvc_near_eligible(c, s->dim);
}

/* Whether this step attends the selected units of dense f16 chunks from the
 * stream's near buffer: the method asks for it, no attention weights are
 * reported per chunk range, and the chunks it takes come in position order
 * (the buffer knows units by position). */
static int use_near(const kvc_attend_req *rq, const int *chunk_group) {
    const kvc_stream *s = rq->s;
    if (rq->plan.budget < 0 || !rq->plan.near || rq->want_attn) return 0;
    int64_t end = INT64_MIN;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        if (!near_takes(s, chunk_group, ci)) continue;
        if (s->chunks[ci]->pos0 < end) return 0;
        end = s->chunks[ci]->pos0 + s->chunks[ci]->n;
    }
    return 1;
}

/* The selected units of the chunks the near buffer takes, gathered into it
 * and attended from there (as chunk KVC_NEAR_CI). */
static kvc_status add_near(kvc_attend_req *rq, req_state *r, const unit_ref *sel, int n_sel,
                           const int *chunk_group) {
    kvc_stream *s = rq->s;
    kvc_near_unit *nu = malloc((size_t)(n_sel ? n_sel : 1) * sizeof *nu);
    if (!nu) return kvc_fail(KVC_ERR_NOMEM, "near buffer units (%d)", n_sel);
    int n = 0;
    for (int i = 0; i < n_sel; i++)
        if (near_takes(s, chunk_group, sel[i].ci)) nu[n++] = (kvc_near_unit){s->chunks[sel[i].ci], sel[i].r};
    const kvc_range *ranges;
    int nr = 0;
    int64_t copied = 0;
    kvc_status st = kvc_near_update(&s->near, s->dim, nu, n, &ranges, &nr, &copied);
    free(nu);
    if (st == KVC_OK && nr > 0 && !add_ranges(r, KVC_NEAR_CI, -1, ranges, nr, TILE))
        st = kvc_fail(KVC_ERR_NOMEM, "work items");
    r->near_copied += copied;
    return st;
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
    int near = st == KVC_OK && use_near(rq, chunk_group); /* its items first */
    if (near) st = add_near(rq, r, sel, n_sel, chunk_group);

    /* work items, chunk order (transform groups stay contiguous), hot window last */
    int si = 0;
    kvc_range *tmp = NULL;
    int tmp_cap = 0;
    for (int ci = 0; ci < s->n_chunks && st == KVC_OK; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        if (c->n == 0 || (near && near_takes(s, chunk_group, ci))) continue; /* its units are in the buffer */
        int tile = tile_for(c);
        int selectable = rq->plan.budget >= 0 && c->sel.ops && !(c->flags & KVC_CHUNK_ALWAYS);
        kvc_range all = {0, c->n};
        int ok = selectable ? add_selected(r, ci, chunk_group[ci], sel, n_sel, &si, tile, &tmp, &tmp_cap)
                            : add_ranges(r, ci, chunk_group[ci], &all, 1, tile);
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

/* Phase 1 for every request (attend_internal.h). */
kvc_status kvc_attend_plan(kvc_attend_req *reqs, int n_req, const kvc_attend_opts *o, struct kvc_pool *pool,
                           int n_threads, kvc_attend_ws *ws, double *t_select) {
    *t_select = 0.0;
    /* planning is cheap unless units are scored: fork only for selection */
    int any_select = 0;
    for (int i = 0; i < n_req; i++) any_select |= reqs[i].plan.budget >= 0;
    plan_ctx pc = {.reqs = reqs, .ws = ws, .o = o};
    if (!any_select) {
        kvc_pool_run(NULL, n_req, plan_task, &pc);
        return KVC_OK;
    }
    kvc_pool_run(n_req > 1 ? pool : NULL, n_req, prep_task, &pc);
    int n_tasks = 0;
    KVC_TRY(plan_score_tasks(ws, reqs, n_req, n_threads, o->score_units, &n_tasks));
    double t0 = kvc_now_s();
    select_ctx sc = {.pc = pc, .n_score = n_tasks};
    kvc_pool_run(pool, n_tasks + n_req, select_task, &sc);
    for (int t = 0; t < n_tasks; t++) ws->times.score_s += ws->stasks[t].t;
    *t_select = kvc_now_s() - t0;
    ws->times.select_wall_s += *t_select;
    return KVC_OK;
}
