/* The decode attention driver's private parts (attend.c, attend_plan.c): the
 * per-request planning state, the work items and parts, the per-thread
 * scratch and the workspace that holds them across calls. */
#ifndef KVC_KV_ATTEND_INTERNAL_H
#define KVC_KV_ATTEND_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "kv/attend.h"
#include "kv/select/topk.h"

enum { TILE = 256, MAX_THREADS = 256, SERIAL_TOKENS = 8192 };
/* item.ci of the stream's near buffer (kv/near.h); -1 is the hot window. */
enum { KVC_NEAR_CI = -2 };
/* Scoring tasks: about total units / (SCORE_TASKS_PER_THREAD * threads) units
 * each (dynamic hand-out evens out a thread slowed by a neighbour), within
 * [SCORE_TASK_MIN, SCORE_TASK_MAX] (a 16-unit min/max block of 64 channels is
 * 0.2-0.7 µs, so a task of 1024 units is 13-45 µs against ~0.1 µs to hand it
 * out). */
enum { SCORE_TASKS_PER_THREAD = 8, SCORE_TASK_MIN = 1024, SCORE_TASK_MAX = 16384 };

typedef struct item {
    int ci;        /* chunk index, -1 = hot window, KVC_NEAR_CI = near buffer */
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
    int64_t near_copied;           /* tokens gathered into the near buffer, summed over calls */
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

/* Grows *p (elements of size es) to hold at least n; *cap in elements. */
static inline int grow(void *pp, size_t *cap, size_t n, size_t es) {
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
static inline int grow_int(void *pp, int *cap, size_t n, size_t es) {
    size_t c = (size_t)*cap;
    int ok = grow(pp, &c, n, es);
    *cap = (int)c;
    return ok;
}

/* Phase 1, planning (attend_plan.c): for every request the scaled query, the
 * transform groups, the selection if the method gave a budget, and the work
 * items. *t_select: the wall time of the selection rounds (0 without). */
kvc_status kvc_attend_plan(kvc_attend_req *reqs, int n_req, const kvc_attend_opts *o, struct kvc_pool *pool,
                           int n_threads, kvc_attend_ws *ws, double *t_select);

#endif
