/* The attention driver (attend.c) on hand-built streams: transform groups
 * (a rotation with channel truncation shared by consecutive chunks), a page
 * selector with a token budget, dead (evicted) tokens, the attention-weights
 * callback, chunks of different codecs — for 1..4 threads and every split,
 * against a double-precision attention over the decoded tokens the driver
 * should have attended.
 * Tolerance: |Δ| <= 3e-5 * (1 + |ref|) per output element (f32 accumulation,
 * polynomial exp, rotation applied to q and o instead of K and V). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/threadpool.h"
#include "kv/attend.h"
#include "kv/codec/dense.h"
#include "kv/prefill.h"

enum { D = 48, DT = 40, G = 3, PAGE = 16 };

static uint64_t rs = 4242;
static float frand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rs >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* ---- a test transform: x' = x R[:, :DT], R orthonormal D x D ---------------- */

typedef struct rot {
    float r[D * D]; /* row-major R */
} rot;

static void mat_apply(const rot *R, const float *x, int n, int ldx, float *y, int ldy, int fwd) {
    for (int i = 0; i < n; i++) {
        if (fwd) /* y[:DT] = x R[:, :DT] */
            for (int c = 0; c < DT; c++) {
                double a = 0;
                for (int j = 0; j < D; j++) a += (double)x[i * ldx + j] * R->r[j * D + c];
                y[i * ldy + c] = (float)a;
            }
        else /* y[:D] = x' R[:, :DT]^T */
            for (int j = 0; j < D; j++) {
                double a = 0;
                for (int c = 0; c < DT; c++) a += (double)x[i * ldx + c] * R->r[j * D + c];
                y[i * ldy + j] = (float)a;
            }
    }
}
static void rot_prepare_q(const kvc_xform *x, const float *q, int g, int ldq, float *qt, int ldt) {
    mat_apply(x->state, q, g, ldq, qt, ldt, 1);
}
static void rot_finish_out(const kvc_xform *x, const float *ot, int g, int ldt, float *out, int ldo) {
    mat_apply(x->state, ot, g, ldt, out, ldo, 0);
}
static void rot_restore(const kvc_xform *x, int which, const float *xt, int n, int ldt, float *out, int ld) {
    (void)which;
    mat_apply(x->state, xt, n, ldt, out, ld, 0);
}
static uint64_t rot_bytes(const kvc_xform *x) { (void)x; return sizeof(rot); }
static void rot_free(kvc_xform *x) { free(x->state); free(x); }
static const kvc_xform_ops rot_ops = {.name = "test_rot", .prepare_q = rot_prepare_q, .finish_out = rot_finish_out,
                                      .restore = rot_restore, .bytes = rot_bytes, .free = rot_free};

static kvc_xform *make_rot(void) {
    rot *R = malloc(sizeof *R);
    for (int i = 0; i < D * D; i++) R->r[i] = frand();
    for (int c = 0; c < D; c++) { /* Gram-Schmidt on columns */
        for (int p = 0; p < c; p++) {
            double dot = 0;
            for (int j = 0; j < D; j++) dot += (double)R->r[j * D + c] * R->r[j * D + p];
            for (int j = 0; j < D; j++) R->r[j * D + c] -= (float)dot * R->r[j * D + p];
        }
        double nn = 0;
        for (int j = 0; j < D; j++) nn += (double)R->r[j * D + c] * R->r[j * D + c];
        for (int j = 0; j < D; j++) R->r[j * D + c] /= (float)sqrt(nn);
    }
    kvc_xform *x = calloc(1, sizeof *x);
    x->ops = &rot_ops;
    atomic_init(&x->refs, 1);
    x->dim_in = D;
    x->dim_k = x->dim_v = DT;
    x->state = R;
    return x;
}

/* ---- a test selector: pages of PAGE tokens, exact max score over the page ---- */

typedef struct pages {
    int n, dim;
    float *k; /* stored-space keys [n][dim] */
} pages;

static int pg_n_units(const void *ix) { const pages *p = ix; return (p->n + PAGE - 1) / PAGE; }
static kvc_range pg_unit(const void *ix, int u) {
    const pages *p = ix;
    kvc_range r = {u * PAGE, (u + 1) * PAGE < p->n ? (u + 1) * PAGE : p->n};
    return r;
}
static int pg_range_calls; /* score_range calls (the driver cut a chunk into pieces) */
static void pg_score_range(const void *ix, const float *q, int g, int ldq, int u0, int u1, float *scores) {
    const pages *p = ix;
    assert_int_equal(u0 % KVC_SCORE_ALIGN, 0);
    assert_true(u1 > u0 && u1 <= pg_n_units(ix) && (u1 % KVC_SCORE_ALIGN == 0 || u1 == pg_n_units(ix)));
    for (int u = u0; u < u1; u++) {
        kvc_range r = pg_unit(ix, u);
        float best = -INFINITY;
        for (int t = r.begin; t < r.end; t++)
            for (int h = 0; h < g; h++) {
                float a = 0;
                for (int j = 0; j < p->dim; j++) a += q[h * ldq + j] * p->k[t * p->dim + j];
                if (a > best) best = a;
            }
        scores[u - u0] = best;
    }
}
static void pg_score_cut(const void *ix, const float *q, int g, int ldq, int u0, int u1, float *scores) {
    __atomic_fetch_add(&pg_range_calls, 1, __ATOMIC_RELAXED);
    pg_score_range(ix, q, g, ldq, u0, u1, scores);
}
static void pg_score(const void *ix, const float *q, int g, int ldq, float *scores) {
    pg_score_range(ix, q, g, ldq, 0, pg_n_units(ix), scores);
}
static uint64_t pg_bytes(const void *ix) { const pages *p = ix; return (uint64_t)p->n * p->dim * 4; }
static void pg_free(void *ix) { pages *p = ix; free(p->k); free(p); }
static const kvc_selector_ops page_ops = {.name = "test_pages", .n_units = pg_n_units, .unit = pg_unit,
                                          .score = pg_score, .score_range = pg_score_cut, .bytes = pg_bytes,
                                          .free = pg_free};

/* ---- building a stream ------------------------------------------------------ */

typedef struct world {
    kvc_stream *s;
    int selectable[64]; /* per chunk */
} world;

/* Chunk of n tokens: codec dense type t, transform x (or NULL), selectable or not. */
static void add_chunk(world *w, int n, kvc_dense_type t, kvc_xform *x, int selectable, int dead_every) {
    float *k = malloc((size_t)n * D * 4), *v = malloc((size_t)n * D * 4);
    for (int i = 0; i < n * D; i++) k[i] = 2.0f * frand(), v[i] = frand();
    for (int i = 0; i < n; i += 11) k[i * D + 1] = 25.0f; /* outlier channel */
    int dim = x ? DT : D;
    float *kt = k, *vt = v;
    if (x) {
        kt = malloc((size_t)n * DT * 4);
        vt = malloc((size_t)n * DT * 4);
        mat_apply(x->state, k, n, D, kt, DT, 1);
        mat_apply(x->state, v, n, D, vt, DT, 1);
    }
    kvc_codec c = {.ops = kvc_codec_dense(t), .dim = dim, .cfg = NULL};
    kvc_chunk *ch = NULL;
    assert_int_equal(kvc_chunk_encode(&c, &c, kt, vt, n, dim, w->s->n_pos, NULL, x, &ch), KVC_OK);
    if (selectable) {
        pages *p = malloc(sizeof *p);
        p->n = n;
        p->dim = dim;
        p->k = malloc((size_t)n * dim * 4);
        kvc_chunk_decode(ch, 0, 0, NULL, NULL, dim); /* (empty range is fine) */
        c.ops->decode(&c, ch->kb, 0, n, p->k, dim);
        ch->sel = (kvc_select_index){.ops = &page_ops, .index = p};
    }
    if (dead_every)
        for (int i = 0; i < n; i += dead_every) assert_int_equal(kvc_chunk_kill(ch, i), KVC_OK);
    w->selectable[w->s->n_chunks] = selectable;
    assert_int_equal(kvc_stream_insert(w->s, w->s->n_chunks, ch), KVC_OK);
    w->s->n_pos += n;
    if (x) free(kt), free(vt);
    free(k);
    free(v);
}

static void build_world(world *w) {
    assert_int_equal(kvc_stream_create(0, 0, D, KVC_DENSE_F32, &w->s), KVC_OK);
    kvc_xform *x1 = make_rot(), *x2 = make_rot();
    add_chunk(w, 300, KVC_DENSE_F16, NULL, 1, 0);
    add_chunk(w, 77, KVC_DENSE_F32, x1, 1, 0);
    add_chunk(w, 260, KVC_DENSE_BF16, x1, 1, 7); /* same transform group, some dead */
    add_chunk(w, 50, KVC_DENSE_F32, NULL, 0, 0);  /* unselectable, between groups */
    add_chunk(w, 513, KVC_DENSE_F16, x2, 1, 0);
    add_chunk(w, 40, KVC_DENSE_F16, x2, 0, 0);   /* in x2's group, unselectable */
    add_chunk(w, 16, KVC_DENSE_F32, NULL, 1, 1);  /* entirely dead */
    kvc_xform_release(x1);
    kvc_xform_release(x2);
    float hk[5 * D], hv[5 * D];
    for (int i = 0; i < 5 * D; i++) hk[i] = frand(), hv[i] = frand();
    assert_int_equal(kvc_stream_hot_push(w->s, hk, hv, 5, D), KVC_OK);
}

/* out[:D] = softmax(q . k_t / sqrt(D)) v over the tokens t < total with live[t], in double. */
static void attend_f64(const float *q, const float *k, const float *v, const uint8_t *live, int total,
                       float *out) {
    double m = -INFINITY, l = 0, *sc = malloc((size_t)total * 8), o[D] = {0};
    for (int t = 0; t < total; t++) {
        if (!live[t]) continue;
        double a = 0;
        for (int j = 0; j < D; j++) a += (double)q[j] * k[t * D + j];
        sc[t] = a / sqrt((double)D);
        if (sc[t] > m) m = sc[t];
    }
    for (int t = 0; t < total; t++) {
        if (!live[t]) continue;
        double p = exp(sc[t] - m);
        l += p;
        for (int j = 0; j < D; j++) o[j] += p * v[t * D + j];
    }
    for (int j = 0; j < D; j++) out[j] = (float)(o[j] / l);
    free(sc);
}

/* Double-precision attention over the tokens of `s` flagged in `use` (per chunk, per token). */
static void reference(const kvc_stream *s, const float *q, uint8_t **use, float *out) {
    int total = s->hot->n;
    for (int ci = 0; ci < s->n_chunks; ci++) total += s->chunks[ci]->n;
    float *k = malloc((size_t)total * D * 4), *v = malloc((size_t)total * D * 4);
    uint8_t *live = malloc((size_t)total);
    int off = 0;
    for (int ci = 0; ci <= s->n_chunks; ci++) {
        const kvc_chunk *c = ci < s->n_chunks ? s->chunks[ci] : s->hot;
        assert_int_equal(kvc_chunk_decode(c, 0, c->n, k + off * D, v + off * D, D), KVC_OK);
        for (int i = 0; i < c->n; i++) live[off + i] = !kvc_chunk_is_dead(c, i) && (ci == s->n_chunks || use[ci][i]);
        off += c->n;
    }
    for (int g = 0; g < G; g++) attend_f64(q + g * D, k, v, live, total, out + g * D);
    free(k); free(v); free(live);
}

typedef struct cb_state {
    int n_sel;
    int32_t ci[4096];
    kvc_range r[4096];
    double psum;
    int dead_nonzero;
    const kvc_stream *s;
} cb_state;

static void on_select(void *ctx, int req, int n, const int32_t *ci, const kvc_range *u) {
    cb_state *cs = ctx;
    assert_int_equal(req, 0);
    cs->n_sel = n;
    memcpy(cs->ci, ci, (size_t)n * sizeof *ci);
    memcpy(cs->r, u, (size_t)n * sizeof *u);
}
static void on_attn(void *ctx, int req, int ci, const kvc_range *r, int nr, const float *p) {
    cb_state *cs = ctx;
    (void)req;
    const kvc_chunk *c = ci < 0 ? cs->s->hot : cs->s->chunks[ci];
    int j = 0;
    for (int i = 0; i < nr; i++)
        for (int t = r[i].begin; t < r[i].end; t++, j++) {
            cs->psum += p[j];
            if (kvc_chunk_is_dead(c, t) && p[j] != 0.0f) cs->dead_nonzero++;
            assert_true(p[j] >= 0.0f);
        }
}

static void expect_close(const float *a, const float *ref, int n, const char *what, int split, int nt) {
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - ref[i]) <= 3e-5f * (1.0f + fabsf(ref[i]))))
            fail_msg("%s (split %d, threads %d): element %d: %g vs %g", what, split, nt, i, a[i], ref[i]);
}

static void run(int budget) {
    world w = {0};
    build_world(&w);
    float q[G * D], out[G * D], ref[G * D];
    for (int i = 0; i < G * D; i++) q[i] = 3.0f * frand();
    kvc_attend_ws *ws;
    assert_int_equal(kvc_attend_ws_create(&ws), KVC_OK);
    for (int nt = 1; nt <= 4; nt++) {
        kvc_pool *pool;
        assert_int_equal(kvc_pool_create(nt, &pool), KVC_OK);
        for (int split = 0; split <= 6; split++) {
            cb_state cs = {.s = w.s};
            kvc_attend_req rq = {.s = w.s, .q = q, .out = out, .plan = {.budget = budget, .reuse = 0}, .want_attn = 1};
            kvc_attend_opts o = {.G = G, .split = split, .on_attn = on_attn, .on_select = on_select, .cb_ctx = &cs,
                                 .min_split_tokens = 64};
            assert_int_equal(kvc_attend(&rq, 1, &o, pool, ws), KVC_OK);
            uint8_t *use[64];
            for (int ci = 0; ci < w.s->n_chunks; ci++) {
                const kvc_chunk *c = w.s->chunks[ci];
                use[ci] = calloc((size_t)c->n, 1);
                if (budget < 0 || !w.selectable[ci]) memset(use[ci], 1, (size_t)c->n);
            }
            if (budget >= 0) {
                int tot = 0;
                for (int i = 0; i < cs.n_sel; i++) {
                    assert_true(w.selectable[cs.ci[i]]);
                    for (int t = cs.r[i].begin; t < cs.r[i].end; t++) use[cs.ci[i]][t] = 1;
                    tot += cs.r[i].end - cs.r[i].begin;
                }
                assert_true(tot <= budget);
                int avail = 0;
                for (int ci = 0; ci < w.s->n_chunks; ci++) avail += w.selectable[ci] ? w.s->chunks[ci]->n : 0;
                int want = budget < avail ? budget : avail;
                assert_true(tot > want - PAGE); /* filled up to the last page that fits */
            }
            reference(w.s, q, use, ref);
            expect_close(out, ref, G * D, budget < 0 ? "all tokens" : "selected tokens", split, nt);
            assert_true(fabs(cs.psum - G) < 1e-3);
            assert_int_equal(cs.dead_nonzero, 0);
            for (int ci = 0; ci < w.s->n_chunks; ci++) free(use[ci]);
        }
        kvc_pool_free(pool);
    }
    kvc_attend_ws_free(ws);
    kvc_stream_free(w.s);
}

static void test_all_tokens(void **state) { (void)state; kvc_codecs_init(); run(-1); }
static void test_budget(void **state) { (void)state; kvc_codecs_init(); run(256); run(0); run(100000); }

/* The top units are the highest-scoring ones: with a budget of 5 pages, no
 * unselected selectable page scores above the lowest selected one. */
static void test_selection_is_top(void **state) {
    (void)state;
    kvc_codecs_init();
    world w = {0};
    build_world(&w);
    float q[G * D], out[G * D];
    for (int i = 0; i < G * D; i++) q[i] = frand();
    kvc_attend_ws *ws;
    assert_int_equal(kvc_attend_ws_create(&ws), KVC_OK);
    cb_state cs = {.s = w.s};
    kvc_attend_req rq = {.s = w.s, .q = q, .out = out, .plan = {.budget = 5 * PAGE, .reuse = 1}};
    kvc_attend_opts o = {.G = G, .on_select = on_select, .cb_ctx = &cs};
    assert_int_equal(kvc_attend(&rq, 1, &o, NULL, ws), KVC_OK);
    assert_int_equal(cs.n_sel, 5);
    /* scores as the driver sees them: scaled query, transformed for transform chunks */
    float qs[G * D], qt[G * DT];
    for (int i = 0; i < G * D; i++) qs[i] = q[i] / sqrtf((float)D);
    float lowest = INFINITY, best_other = -INFINITY;
    for (int ci = 0; ci < w.s->n_chunks; ci++) {
        const kvc_chunk *c = w.s->chunks[ci];
        if (!w.selectable[ci]) continue;
        const float *qq = qs;
        int ld = D;
        if (c->xf) {
            c->xf->ops->prepare_q(c->xf, qs, G, D, qt, DT);
            qq = qt;
            ld = DT;
        }
        int nu = c->sel.ops->n_units(c->sel.index);
        float sc[64];
        c->sel.ops->score(c->sel.index, qq, G, ld, sc);
        for (int u = 0; u < nu; u++) {
            kvc_range r = c->sel.ops->unit(c->sel.index, u);
            int chosen = 0;
            for (int i = 0; i < cs.n_sel; i++) chosen |= cs.ci[i] == ci && cs.r[i].begin == r.begin;
            if (chosen && sc[u] < lowest) lowest = sc[u];
            if (!chosen && r.end - r.begin == PAGE && sc[u] > best_other) best_other = sc[u];
        }
    }
    assert_true(lowest >= best_other);
    /* reuse: same stream version gives the same selection without rescoring */
    cb_state cs2 = {.s = w.s};
    o.cb_ctx = &cs2;
    for (int i = 0; i < G * D; i++) q[i] = frand();
    assert_int_equal(kvc_attend(&rq, 1, &o, NULL, ws), KVC_OK);
    assert_int_equal(cs2.n_sel, cs.n_sel);
    assert_memory_equal(cs2.r, cs.r, (size_t)cs.n_sel * sizeof(kvc_range));
    kvc_attend_ws_free(ws);
    kvc_stream_free(w.s);
}

/* The scoring of several streams cut into tasks of any size (pieces of
 * chunks of 16, 32, 48 units, whole chunks, the automatic size), on 1-4
 * threads: every request selects the same units as scoring on one thread in
 * one piece per chunk, and the outputs are the same. */
typedef struct multi_sel {
    int n[3];
    int32_t ci[3][4096];
    kvc_range r[3][4096];
} multi_sel;

static void on_select_multi(void *ctx, int req, int n, const int32_t *ci, const kvc_range *u) {
    multi_sel *m = ctx;
    assert_true(req >= 0 && req < 3 && n <= 4096);
    m->n[req] = n;
    memcpy(m->ci[req], ci, (size_t)n * sizeof *ci);
    memcpy(m->r[req], u, (size_t)n * sizeof *u);
}

static void test_score_tasks(void **state) {
    (void)state;
    kvc_codecs_init();
    world w[3] = {{0}};
    for (int i = 0; i < 3; i++) build_world(&w[i]);
    float q[3][G * D], out[3][G * D], want[3][G * D];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < G * D; j++) q[i][j] = 3.0f * frand();
    kvc_attend_ws *ws;
    assert_int_equal(kvc_attend_ws_create(&ws), KVC_OK);
    const int budgets[] = {0, 40, 256, 700, 100000};
    for (int bi = 0; bi < 5; bi++) {
        static multi_sel ref, got;
        kvc_attend_req rq[3];
        for (int i = 0; i < 3; i++)
            rq[i] = (kvc_attend_req){.s = w[i].s, .q = q[i], .out = want[i], .plan = {.budget = budgets[bi]}};
        kvc_attend_opts o = {.G = G, .on_select = on_select_multi, .cb_ctx = &ref, .score_units = 100000};
        memset(&ref, 0, sizeof ref);
        pg_range_calls = 0;
        assert_int_equal(kvc_attend(rq, 3, &o, NULL, ws), KVC_OK);
        assert_int_equal(pg_range_calls, 0); /* one piece per chunk */
        for (int nt = 1; nt <= 4; nt++) {
            kvc_pool *pool;
            assert_int_equal(kvc_pool_create(nt, &pool), KVC_OK);
            const int units[] = {0, 1, 16, 32, 48};
            for (int ui = 0; ui < 5; ui++) {
                for (int i = 0; i < 3; i++) rq[i].out = out[i];
                o.cb_ctx = &got;
                o.score_units = units[ui];
                memset(&got, 0, sizeof got);
                pg_range_calls = 0;
                assert_int_equal(kvc_attend(rq, 3, &o, pool, ws), KVC_OK);
                if (units[ui] >= 1 && units[ui] <= 32) assert_true(pg_range_calls > 0); /* the 33-unit chunk was cut */
                for (int i = 0; i < 3; i++) {
                    assert_int_equal(got.n[i], ref.n[i]);
                    assert_memory_equal(got.ci[i], ref.ci[i], (size_t)ref.n[i] * sizeof(int32_t));
                    assert_memory_equal(got.r[i], ref.r[i], (size_t)ref.n[i] * sizeof(kvc_range));
                    expect_close(out[i], want[i], G * D, "cut scoring", units[ui], nt);
                }
            }
            kvc_pool_free(pool);
        }
    }
    kvc_attend_ws_free(ws);
    for (int i = 0; i < 3; i++) kvc_stream_free(w[i].s);
}

/* Chunked prefill over the same past (transforms, dead tokens, mixed codecs):
 * query i attends to every live past token plus chunk tokens 0..i. */
static void test_prefill_over_world(void **state) {
    (void)state;
    kvc_codecs_init();
    world w = {0};
    build_world(&w);
    int n = 150; /* not a multiple of the query tile */
    float *q = malloc((size_t)n * G * D * 4), *k = malloc((size_t)n * D * 4), *v = malloc((size_t)n * D * 4);
    float *out = malloc((size_t)n * G * D * 4), ref[G * D];
    for (int i = 0; i < n * G * D; i++) q[i] = 2.0f * frand();
    for (int i = 0; i < n * D; i++) k[i] = 2.0f * frand(), v[i] = frand();
    kvc_prefill_ws *pw;
    assert_int_equal(kvc_prefill_ws_create(&pw), KVC_OK);
    /* two calls over a split of the query range, as the cache's tasks do */
    assert_int_equal(kvc_prefill_attend(w.s, G, n, q, G * D, k, v, D, out, G * D, 0, 64, pw), KVC_OK);
    assert_int_equal(kvc_prefill_attend(w.s, G, n, q, G * D, k, v, D, out, G * D, 64, n, pw), KVC_OK);
    for (int i = 0; i < n; i += 7) {
        /* reference: decode the past, append the chunk's rows 0..i, attend in double */
        int past = w.s->hot->n;
        for (int ci = 0; ci < w.s->n_chunks; ci++) past += w.s->chunks[ci]->n;
        int tot = past + i + 1;
        float *kk = malloc((size_t)tot * D * 4), *vv = malloc((size_t)tot * D * 4);
        uint8_t *live = malloc((size_t)tot);
        int off = 0;
        for (int ci = 0; ci <= w.s->n_chunks; ci++) {
            const kvc_chunk *c = ci < w.s->n_chunks ? w.s->chunks[ci] : w.s->hot;
            assert_int_equal(kvc_chunk_decode(c, 0, c->n, kk + off * D, vv + off * D, D), KVC_OK);
            for (int t = 0; t < c->n; t++) live[off + t] = !kvc_chunk_is_dead(c, t);
            off += c->n;
        }
        memcpy(kk + off * D, k, (size_t)(i + 1) * D * 4);
        memcpy(vv + off * D, v, (size_t)(i + 1) * D * 4);
        memset(live + off, 1, (size_t)(i + 1));
        for (int g = 0; g < G; g++) attend_f64(q + (i * G + g) * D, kk, vv, live, tot, ref + g * D);
        expect_close(out + (size_t)i * G * D, ref, G * D, "prefill over a compressed past", 0, 1);
        free(kk); free(vv); free(live);
    }
    kvc_prefill_ws_free(pw);
    free(q); free(k); free(v); free(out);
    kvc_stream_free(w.s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_tokens),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_selection_is_top),
        cmocka_unit_test(test_score_tasks),
        cmocka_unit_test(test_prefill_over_world),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
