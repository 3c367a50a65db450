/* The KV cache as the forward pass sees it (cache.h; docs/design.md §2, §4): a
 * grid of streams (layer × KV head) driven by a parsed method spec. Appends
 * go to each stream's hot window and through the method hooks (step,
 * on_append, hot_leave, build_chunk); decode attention goes through the
 * driver (attend.c) with the method's selection plan; prefill attention
 * through prefill.c; stats sum the codecs', selectors' and methods' bytes. */
#include "kv/cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "kv/attend.h"
#include "kv/cache_impl.h"
#include "kv/codec/dense.h"
#include "kv/codec/codec.h"
#include "kv/near.h"
#include "kv/prefill.h"

static void chunk_user_free(void *ctx, kvc_chunk *c) {
    kvc_cache *cc = ctx;
    for (int i = 0; i < cc->spec.n && c->user; i++)
        if (cc->spec.m[i]->ops.chunk_free) cc->spec.m[i]->ops.chunk_free(cc->mstate[i], c);
}

void kvc_cache_free(kvc_cache *c) {
    if (!c) return;
    if (c->streams) {
        for (int i = 0; i < c->n_streams; i++) {
            kvc_stream *s = c->streams[i];
            if (!s) continue;
            for (int j = c->spec.n - 1; j >= 0; j--)
                if (c->spec.m[j]->ops.stream_free) c->spec.m[j]->ops.stream_free(c->mstate[j], s, s->mstate[j]);
            kvc_stream_free(s);
        }
    }
    for (int j = c->spec.n - 1; j >= 0; j--)
        if (c->mstate_created[j] && c->spec.m[j]->ops.destroy) c->spec.m[j]->ops.destroy(c->mstate[j]);
    kvc_spec_free(&c->spec);
    free(c->streams);
    for (int i = 0; c->usage && i < c->n_streams; i++) kvc_sel_usage_free(&c->usage[i]);
    free(c->usage);
    free(c->reqs);
    free(c->hook_st);
    free(c->qmap);
    kvc_attend_ws_free(c->ws);
    for (int i = 0; i < c->n_pws; i++) kvc_prefill_ws_free(c->pws[i]);
    free(c->pws);
    free(c);
}

/* The space a stream lives in, from the layer of the stack that provides one
 * (the `rot` modifier): a transform that maps keys, values and queries alike. */
static kvc_status set_stream_space(kvc_cache *c, kvc_stream *s) {
    for (int j = 0; j < c->spec.n; j++) {
        if (!c->spec.m[j]->ops.stream_xform) continue;
        kvc_xform *x = c->spec.m[j]->ops.stream_xform(c->mstate[j], s->layer, s->head);
        KVC_CHECK(x && x->ops->apply && x->dim_in == s->dim && x->dim_k == s->dim && x->dim_v == s->dim,
                  KVC_ERR_INTERNAL, "method %s: stream transform of layer %d, head %d does not map %d channels",
                  c->spec.m[j]->name, s->layer, s->head, s->dim);
        KVC_CHECK(!s->xf, KVC_ERR_ARG, "KV spec: two layers give the streams a transformed space");
        s->xf = kvc_xform_retain(x);
        c->any_xf = 1;
    }
    return KVC_OK;
}

static kvc_status init_streams(kvc_cache *c) {
    const kvc_method *base = c->spec.m[0];
    int hot = base->ops.hot_type ? base->ops.hot_type(c->mstate[0]) : KVC_DENSE_F16;
    for (int l = 0; l < c->shape.n_layers; l++)
        for (int h = 0; h < c->shape.n_kv_heads; h++) {
            kvc_stream *s;
            KVC_TRY(kvc_stream_create(l, h, c->shape.head_dim, hot, &s));
            c->streams[l * c->shape.n_kv_heads + h] = s;
            s->chunk_user_free = chunk_user_free;
            s->chunk_user_ctx = c;
            KVC_TRY(set_stream_space(c, s));
            for (int j = 0; j < c->spec.n; j++)
                if (c->spec.m[j]->ops.stream_init)
                    KVC_TRY(c->spec.m[j]->ops.stream_init(c->mstate[j], s, &s->mstate[j]));
        }
    return KVC_OK;
}

kvc_status kvc_cache_create(const kvc_cache_shape *shape, const char *spec, struct kvc_pool *pool,
                            kvc_cache **out) {
    *out = NULL;
    KVC_CHECK(shape && shape->n_layers > 0 && shape->n_heads > 0 && shape->n_kv_heads > 0 &&
                  shape->head_dim > 0 && shape->max_tokens > 0,
              KVC_ERR_ARG, "cache shape: layers %d, heads %d, kv heads %d, head dim %d, max tokens %d must be positive",
              shape ? shape->n_layers : 0, shape ? shape->n_heads : 0, shape ? shape->n_kv_heads : 0,
              shape ? shape->head_dim : 0, shape ? shape->max_tokens : 0);
    KVC_CHECK(shape->n_heads % shape->n_kv_heads == 0, KVC_ERR_ARG,
              "cache shape: %d query heads not a multiple of %d KV heads", shape->n_heads, shape->n_kv_heads);
    KVC_CHECK(shape->head_dim <= 1024, KVC_ERR_UNSUPPORTED, "cache shape: head dim %d above 1024", shape->head_dim);
    kvc_codecs_init();
    kvc_cache *c = calloc(1, sizeof *c);
    if (!c) return kvc_fail(KVC_ERR_NOMEM, "cache");
    c->shape = *shape;
    c->G = shape->n_heads / shape->n_kv_heads;
    c->pool = pool;
    c->n_streams = shape->n_layers * shape->n_kv_heads;
    kvc_status st = kvc_spec_parse(spec ? spec : KVC_DEFAULT_KV, &c->spec);
    if (st != KVC_OK) {
        free(c);
        return st;
    }
    c->streams = calloc((size_t)c->n_streams, sizeof *c->streams);
    c->reqs = calloc((size_t)shape->n_kv_heads, sizeof *c->reqs);
    c->hook_st = calloc((size_t)shape->n_kv_heads, sizeof *c->hook_st);
    c->usage = calloc((size_t)c->n_streams, sizeof *c->usage);
    if (!c->streams || !c->reqs || !c->hook_st || !c->usage) st = kvc_fail(KVC_ERR_NOMEM, "cache streams (%d)", c->n_streams);
    if (st == KVC_OK) st = kvc_attend_ws_create(&c->ws);
    c->n_pws = pool ? kvc_pool_threads(pool) : 1;
    c->pws = calloc((size_t)c->n_pws, sizeof *c->pws);
    if (!c->pws) {
        c->n_pws = 0; /* kvc_cache_free walks pws[0..n_pws) */
        st = kvc_fail(KVC_ERR_NOMEM, "prefill workspaces");
    }
    for (int i = 0; i < c->n_pws && st == KVC_OK; i++) st = kvc_prefill_ws_create(&c->pws[i]);
    c->i_hot_leave = c->i_build = c->i_select = -1;
    for (int j = 0; j < c->spec.n && st == KVC_OK; j++) {
        const kvc_method *m = c->spec.m[j];
        kvc_method_env env = {
            .n_layers = shape->n_layers, .n_heads = shape->n_heads, .n_kv_heads = shape->n_kv_heads,
            .head_dim = shape->head_dim, .max_tokens = shape->max_tokens, .cfg = c->spec.cfg[j],
            .n_stack = c->spec.n, .pool = pool,
        };
        for (int i = 0; i < c->spec.n; i++) env.stack[i] = c->spec.m[i], env.stack_cfg[i] = c->spec.cfg[i];
        if (m->ops.create) {
            st = m->ops.create(&env, &c->mstate[j]);
            if (st == KVC_OK) c->mstate_created[j] = 1;
        }
        if (m->ops.sink_tokens && st == KVC_OK) c->sinks = m->ops.sink_tokens(c->mstate[j]);
        if (m->ops.hot_leave && c->i_hot_leave < 0) c->i_hot_leave = j;
        if (m->ops.build_chunk && c->i_build < 0) c->i_build = j;
        if (m->ops.select && c->i_select < 0) c->i_select = j;
        if (m->flags & KVC_METHOD_WANTS_ATTN) c->want_attn = 1;
        if (m->ops.on_append) c->any_on_append = 1;
    }
    if (st == KVC_OK) st = init_streams(c);
    if (st == KVC_OK && c->any_xf && !(c->qmap = malloc((size_t)shape->n_heads * shape->head_dim * sizeof *c->qmap)))
        st = kvc_fail(KVC_ERR_NOMEM, "mapped queries");
    if (st != KVC_OK) {
        kvc_cache_free(c);
        return st;
    }
    *out = c;
    return KVC_OK;
}

void kvc_cache_reset(kvc_cache *c) {
    /* Method states are rebuilt per stream so methods never see stale history. */
    for (int i = 0; i < c->n_streams; i++) {
        kvc_stream *s = c->streams[i];
        for (int j = c->spec.n - 1; j >= 0; j--)
            if (c->spec.m[j]->ops.stream_free) {
                c->spec.m[j]->ops.stream_free(c->mstate[j], s, s->mstate[j]);
                s->mstate[j] = NULL;
            }
        kvc_stream_clear(s);
        c->tokens_seen = 0;
        free(s->sel_cache);
        s->sel_cache = NULL;
        kvc_sel_usage_forget(&c->usage[i]);
        for (int j = 0; j < c->spec.n; j++)
            if (c->spec.m[j]->ops.stream_init &&
                c->spec.m[j]->ops.stream_init(c->mstate[j], s, &s->mstate[j]) != KVC_OK)
                s->mstate[j] = NULL; /* reported at the next append via the method */
    }
}

void kvc_cache_set_token_text(kvc_cache *c, kvc_token_text_fn text, void *ctx) {
    c->token_text = text;
    c->token_text_ctx = ctx;
}

void kvc_cache_observe_tokens(kvc_cache *c, const int32_t *tokens, int n) {
    if (n <= 0) return;
    for (int j = 0; j < c->spec.n; j++)
        if (c->spec.m[j]->ops.on_tokens)
            c->spec.m[j]->ops.on_tokens(c->mstate[j], tokens, n, c->tokens_seen, c->token_text, c->token_text_ctx);
    c->tokens_seen += n;
}

int kvc_cache_tokens(const kvc_cache *c, int layer) {
    if (layer < 0 || layer >= c->shape.n_layers) return 0;
    return (int)c->streams[layer * c->shape.n_kv_heads]->n_pos;
}

/* ---- append ------------------------------------------------------------------- */

typedef struct build_ctx {
    kvc_cache *c;
} build_ctx;

static kvc_status build_wrap(void *ctx, kvc_stream *s, const float *k, const float *v, int n,
                             int64_t pos0, kvc_chunk **out) {
    kvc_cache *c = ctx;
    int j = c->i_build;
    return c->spec.m[j]->ops.build_chunk(c->mstate[j], s, s->mstate[j], k, v, n, pos0, out);
}

/* k, v rows [n] at stride ld mapped into the stream's space: *kv [2][n][dim]
 * (malloc'd, the caller frees it). */
static kvc_status map_kv(const kvc_stream *s, int n, const float *k, const float *v, int ld, float **kv) {
    int d = s->dim;
    *kv = malloc((size_t)2 * n * d * sizeof **kv);
    if (!*kv) return kvc_fail(KVC_ERR_NOMEM, "mapped keys and values (%d tokens)", n);
    s->xf->ops->apply(s->xf, 0, k, n, ld, *kv, d);
    s->xf->ops->apply(s->xf, 1, v, n, ld, *kv + (size_t)n * d, d);
    return KVC_OK;
}

/* Stores n tokens (mapped into the stream's space unless already): those
 * still within the first c->sinks positions in the sink chunk, the rest in the
 * hot window (*n_hot of them, the last ones). */
static kvc_status push_tokens(kvc_cache *c, kvc_stream *s, int n, const float *k, const float *v, int ld,
                              int mapped, int *n_hot) {
    float *kv = NULL;
    if (s->xf && !mapped) {
        KVC_TRY(map_kv(s, n, k, v, ld, &kv));
        k = kv;
        v = kv + (size_t)n * s->dim;
        ld = s->dim;
    }
    int sink = s->n_pos < c->sinks ? (int)(c->sinks - s->n_pos < n ? c->sinks - s->n_pos : n) : 0;
    kvc_status st = sink ? kvc_stream_sink_push(s, k, v, sink, ld) : KVC_OK;
    if (st == KVC_OK && n > sink)
        st = kvc_stream_hot_push(s, k + (size_t)sink * ld, v + (size_t)sink * ld, n - sink, ld);
    free(kv);
    *n_hot = n - sink;
    return st;
}

/* Appends n tokens to one stream: k, v rows at stride ld; q (n rows at stride
 * ldq of G*dim floats) or NULL; all in the original space unless `mapped`
 * (prefill maps them into the stream's space before it attends). Sink tokens
 * never reach the method's hooks. */
static kvc_status append_stream(kvc_cache *c, kvc_stream *s, int n, const float *k, const float *v,
                                int ld, const float *q, int ldq, float *qbuf, int mapped) {
    int d = s->dim, n_hot;
    for (int j = 0; j < c->spec.n; j++)
        if (c->spec.m[j]->ops.step) KVC_TRY(c->spec.m[j]->ops.step(c->mstate[j], s, s->mstate[j]));
    KVC_TRY(push_tokens(c, s, n, k, v, ld, mapped, &n_hot));
    if (q) q += (size_t)(n - n_hot) * ldq;
    n = n_hot;
    if (n == 0) return KVC_OK;
    if (c->any_on_append) {
        const float *qg = NULL;
        if (q && qbuf) {
            for (int i = 0; i < n; i++) memcpy(qbuf + (size_t)i * c->G * d, q + (size_t)i * ldq, (size_t)c->G * d * 4);
            if (s->xf && !mapped) s->xf->ops->prepare_q(s->xf, qbuf, n * c->G, d, qbuf, d);
            qg = qbuf;
        }
        const float *hk, *hv; /* the tokens as stored (f16-rounded in an f16 window) */
        KVC_TRY(kvc_stream_hot_f32(s, s->hot->n - n, s->hot->n, &hk, &hv));
        for (int j = 0; j < c->spec.n; j++)
            if (c->spec.m[j]->ops.on_append)
                KVC_TRY(c->spec.m[j]->ops.on_append(c->mstate[j], s, s->mstate[j], n, hk, hv, qg));
    }
    if (c->i_hot_leave >= 0) {
        int j = c->i_hot_leave;
        int leave = c->spec.m[j]->ops.hot_leave(c->mstate[j], s, s->mstate[j]);
        KVC_CHECK(leave >= 0 && leave <= s->hot->n, KVC_ERR_INTERNAL,
                  "method %s: hot_leave returned %d of %d hot tokens", c->spec.m[j]->name, leave, s->hot->n);
        if (leave > 0) KVC_TRY(kvc_stream_hot_seal(s, leave, c->i_build >= 0 ? build_wrap : NULL, c));
    }
    return KVC_OK;
}

typedef struct append_job {
    kvc_cache *c;
    int layer, n;
    const float *k, *v, *q;
    float *qbuf; /* [n_kv][n][G][d] or NULL */
    int mapped;  /* k, v, q already in the streams' spaces */
} append_job;

static void append_task(void *ctx, int h, int thread) {
    (void)thread;
    append_job *a = ctx;
    kvc_cache *c = a->c;
    int nkv = c->shape.n_kv_heads, d = c->shape.head_dim;
    kvc_stream *s = c->streams[a->layer * nkv + h];
    const float *q = a->q ? a->q + (size_t)h * c->G * d : NULL;
    float *qb = a->qbuf ? a->qbuf + (size_t)h * a->n * c->G * d : NULL;
    c->hook_st[h] = append_stream(c, s, a->n, a->k + (size_t)h * d, a->v + (size_t)h * d, nkv * d, q,
                                  c->shape.n_heads * d, qb, a->mapped);
}

static kvc_status append_layer(kvc_cache *c, int layer, int n, const float *k, const float *v,
                               const float *q, int mapped) {
    KVC_CHECK(layer >= 0 && layer < c->shape.n_layers, KVC_ERR_ARG, "cache: layer %d outside [0, %d)",
              layer, c->shape.n_layers);
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "cache: appending %d tokens", n);
    int64_t have = c->streams[layer * c->shape.n_kv_heads]->n_pos;
    KVC_CHECK(have + n <= c->shape.max_tokens, KVC_ERR_RANGE,
              "cache layer %d: %lld + %d tokens exceed the capacity of %d tokens", layer,
              (long long)have, n, c->shape.max_tokens);
    if (n == 0) return KVC_OK;
    append_job a = {.c = c, .layer = layer, .n = n, .k = k, .v = v, .q = q, .qbuf = NULL, .mapped = mapped};
    if (q && c->any_on_append) {
        a.qbuf = malloc((size_t)c->shape.n_kv_heads * n * c->G * c->shape.head_dim * sizeof(float));
        if (!a.qbuf) return kvc_fail(KVC_ERR_NOMEM, "prefill queries for the method (%d tokens)", n);
    }
    kvc_pool_run(c->shape.n_kv_heads > 1 ? c->pool : NULL, c->shape.n_kv_heads, append_task, &a);
    free(a.qbuf);
    for (int h = 0; h < c->shape.n_kv_heads; h++) KVC_TRY(c->hook_st[h]);
    return KVC_OK;
}

kvc_status kvc_cache_append_n(kvc_cache *c, int layer, int n, const float *k, const float *v,
                              const float *q) {
    return append_layer(c, layer, n, k, v, q, 0);
}

kvc_status kvc_cache_append(kvc_cache *c, int layer, const float *k, const float *v) {
    return kvc_cache_append_n(c, layer, 1, k, v, NULL);
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct attn_cb_ctx {
    kvc_cache *c;
} attn_cb_ctx;

static void on_attn_cb(void *ctx, int req, int ci, const kvc_range *r, int nr, const float *p) {
    kvc_cache *c = ctx;
    kvc_stream *s = c->reqs[req].s;
    for (int j = 0; j < c->spec.n; j++)
        if (c->spec.m[j]->ops.on_attn) c->spec.m[j]->ops.on_attn(c->mstate[j], s, s->mstate[j], ci, r, nr, p);
}

static void on_select_cb(void *ctx, int req, int n_units, const int32_t *ci, const kvc_range *u) {
    kvc_cache *c = ctx;
    kvc_stream *s = c->reqs[req].s;
    kvc_sel_usage_select(&c->usage[s->layer * c->shape.n_kv_heads + s->head], s, n_units, ci, u);
    for (int j = 0; j < c->spec.n; j++)
        if (c->spec.m[j]->ops.on_select)
            c->spec.m[j]->ops.on_select(c->mstate[j], s, s->mstate[j], n_units, ci, u);
}

static kvc_status after_attend(kvc_cache *c) {
    for (int j = 0; j < c->spec.n; j++)
        if (c->spec.m[j]->ops.after_attend) KVC_TRY(c->spec.m[j]->ops.after_attend(c->mstate[j]));
    return KVC_OK;
}

kvc_status kvc_cache_attend_opts(kvc_cache *c, int layer, const float *q, float *out, int split) {
    KVC_CHECK(layer >= 0 && layer < c->shape.n_layers, KVC_ERR_ARG, "cache: layer %d outside [0, %d)",
              layer, c->shape.n_layers);
    int nkv = c->shape.n_kv_heads, d = c->shape.head_dim;
    for (int h = 0; h < nkv; h++) {
        kvc_stream *s = c->streams[layer * nkv + h];
        const float *qh = q + (size_t)h * c->G * d;
        if (s->xf) { /* the query once into the stream's space */
            float *qm = c->qmap + (size_t)h * c->G * d;
            s->xf->ops->prepare_q(s->xf, qh, c->G, d, qm, d);
            qh = qm;
        }
        for (int j = 0; j < c->spec.n; j++)
            if (c->spec.m[j]->ops.on_query) KVC_TRY(c->spec.m[j]->ops.on_query(c->mstate[j], s, s->mstate[j], qh));
        kvc_select_plan plan = {.budget = -1, .reuse = 0};
        if (c->i_select >= 0) {
            int j = c->i_select;
            plan = c->spec.m[j]->ops.select(c->mstate[j], s, s->mstate[j]);
        }
        c->reqs[h] = (kvc_attend_req){.s = s, .q = qh, .out = out + (size_t)h * c->G * d, .plan = plan,
                                      .want_attn = c->want_attn};
    }
    kvc_attend_opts o = {.G = c->G, .split = split, .on_attn = c->want_attn ? on_attn_cb : NULL,
                         .on_select = on_select_cb, .cb_ctx = c};
    KVC_TRY(kvc_attend(c->reqs, nkv, &o, c->pool, c->ws));
    for (int h = 0; h < nkv; h++) { /* and the output once back */
        const kvc_xform *x = c->reqs[h].s->xf;
        if (!x) continue;
        float *oh = out + (size_t)h * c->G * d, *tmp = c->qmap + (size_t)h * c->G * d;
        memcpy(tmp, oh, (size_t)c->G * d * sizeof *tmp);
        x->ops->finish_out(x, tmp, c->G, d, oh, d);
    }
    KVC_TRY(after_attend(c));
    for (int h = 0; h < nkv; h++) kvc_sel_usage_read(&c->usage[layer * nkv + h], c->reqs[h].s, c->reqs[h].n_read);
    return KVC_OK;
}

kvc_status kvc_cache_attend(kvc_cache *c, int layer, const float *q, float *out) {
    return kvc_cache_attend_opts(c, layer, q, out, 0);
}

/* ---- prefill ----------------------------------------------------------------------- */

typedef struct prefill_job {
    kvc_cache *c;
    int layer, n, n_tiles;
    const float *q, *k, *v;
    float *out;
    kvc_status *st; /* per task */
} prefill_job;

static void prefill_task(void *ctx, int task, int thread) {
    prefill_job *p = ctx;
    kvc_cache *c = p->c;
    int nkv = c->shape.n_kv_heads, d = c->shape.head_dim, nh = c->shape.n_heads;
    int h = task / p->n_tiles, tile = task % p->n_tiles;
    kvc_stream *s = c->streams[p->layer * nkv + h];
    int t0 = tile * KVC_PREFILL_QTILE;
    p->st[task] = kvc_prefill_attend(s, c->G, p->n, p->q + (size_t)h * c->G * d, nh * d, p->k + (size_t)h * d,
                                     p->v + (size_t)h * d, nkv * d, p->out + (size_t)h * c->G * d, nh * d, t0,
                                     t0 + KVC_PREFILL_QTILE, c->pws[thread]);
}

/* OpenBLAS (pthreads) would start its own threads inside each of our tasks;
 * the tasks already fill the machine, so BLAS runs single-threaded meanwhile. */
int openblas_get_num_threads(void);
void openblas_set_num_threads(int n);

/* Prefill attention of one layer (q, k, v, out in the streams' spaces). */
static kvc_status prefill_layer(kvc_cache *c, int layer, int n, const float *q, const float *k,
                                const float *v, float *out) {
    int nkv = c->shape.n_kv_heads;
    prefill_job p = {.c = c, .layer = layer, .n = n, .n_tiles = (n + KVC_PREFILL_QTILE - 1) / KVC_PREFILL_QTILE,
                     .q = q, .k = k, .v = v, .out = out};
    int n_tasks = nkv * p.n_tiles;
    p.st = malloc((size_t)n_tasks * sizeof *p.st);
    if (!p.st) return kvc_fail(KVC_ERR_NOMEM, "prefill tasks (%d)", n_tasks);
    int parallel = c->pool && kvc_pool_threads(c->pool) > 1 && n_tasks > 1;
    int blas_threads = parallel ? openblas_get_num_threads() : 1;
    if (parallel) openblas_set_num_threads(1);
    kvc_pool_run(parallel ? c->pool : NULL, n_tasks, prefill_task, &p);
    if (parallel) openblas_set_num_threads(blas_threads);
    kvc_status st = KVC_OK;
    for (int i = 0; i < n_tasks && st == KVC_OK; i++) st = p.st[i];
    free(p.st);
    KVC_TRY(st);
    return after_attend(c);
}

/* Prefill when streams live in transformed spaces: a stream's transform
 * fitted to its first rows (calibrate, while the stream is empty), queries,
 * keys and values mapped into them once, attention and the method hooks
 * there, the outputs mapped back row by row. */
static kvc_status prefill_mapped(kvc_cache *c, int layer, int n, const float *q, const float *k,
                                 const float *v, float *out) {
    int nkv = c->shape.n_kv_heads, nh = c->shape.n_heads, d = c->shape.head_dim, G = c->G;
    size_t nq = (size_t)n * nh * d, nk = (size_t)n * nkv * d;
    float *qm = malloc(nq * sizeof *qm), *km = malloc(2 * nk * sizeof *km);
    if (!qm || !km) {
        free(qm);
        free(km);
        return kvc_fail(KVC_ERR_NOMEM, "mapped prefill rows (%d tokens)", n);
    }
    float *vm = km + nk;
    memcpy(qm, q, nq * sizeof *qm);
    memcpy(km, k, nk * sizeof *km);
    memcpy(vm, v, nk * sizeof *vm);
    for (int h = 0; h < nkv; h++) {
        const kvc_stream *s = kvc_cache_stream(c, layer, h);
        kvc_xform *x = s->xf;
        if (!x) continue;
        if (s->n_pos == 0 && x->ops->calibrate)
            x->ops->calibrate(x, q + (size_t)h * G * d, nh * d, G, k + (size_t)h * d, nkv * d, n);
        x->ops->apply(x, 0, k + (size_t)h * d, n, nkv * d, km + (size_t)h * d, nkv * d);
        x->ops->apply(x, 1, v + (size_t)h * d, n, nkv * d, vm + (size_t)h * d, nkv * d);
        for (int g = 0; g < G; g++)
            x->ops->prepare_q(x, q + (size_t)(h * G + g) * d, n, nh * d, qm + (size_t)(h * G + g) * d, nh * d);
    }
    kvc_status st = prefill_layer(c, layer, n, qm, km, vm, out);
    for (int h = 0; h < nkv && st == KVC_OK; h++) {
        const kvc_xform *x = kvc_cache_stream(c, layer, h)->xf;
        float row[1024];
        for (int t = 0; x && t < n; t++)
            for (int g = 0; g < G; g++) {
                float *o = out + (size_t)t * nh * d + (size_t)(h * G + g) * d;
                memcpy(row, o, (size_t)d * sizeof *row);
                x->ops->finish_out(x, row, 1, d, o, d);
            }
    }
    if (st == KVC_OK) st = append_layer(c, layer, n, km, vm, qm, 1);
    free(qm);
    free(km);
    return st;
}

kvc_status kvc_cache_prefill(kvc_cache *c, int layer, int n, const float *q, const float *k,
                             const float *v, float *out) {
    KVC_CHECK(layer >= 0 && layer < c->shape.n_layers, KVC_ERR_ARG, "cache: layer %d outside [0, %d)",
              layer, c->shape.n_layers);
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "cache prefill: %d tokens", n);
    int nkv = c->shape.n_kv_heads;
    int64_t have = c->streams[layer * nkv]->n_pos;
    KVC_CHECK(have + n <= c->shape.max_tokens, KVC_ERR_RANGE,
              "cache layer %d: %lld + %d tokens exceed the capacity of %d tokens", layer,
              (long long)have, n, c->shape.max_tokens);
    if (n == 0) return KVC_OK;
    if (c->any_xf) return prefill_mapped(c, layer, n, q, k, v, out);
    KVC_TRY(prefill_layer(c, layer, n, q, k, v, out));
    return append_layer(c, layer, n, k, v, q, 0);
}

/* ---- stats ---------------------------------------------------------------------- */

/* Unused capacity of a chunk's appendable (dense) blobs. */
static uint64_t chunk_spare(const kvc_chunk *ch) {
    return kvc_dense_spare_bytes(&ch->kc, ch->kb) + kvc_dense_spare_bytes(&ch->vc, ch->vb);
}

void kvc_cache_stats_get(const kvc_cache *c, kvc_cache_stats *out) {
    memset(out, 0, sizeof *out);
    uint64_t live = 0, seen = 0, hot = 0, spare = 0, read = 0, ctx = 0, sel = 0, reused = 0;
    const kvc_xform *prev_space = NULL;
    for (int i = 0; i < c->n_streams; i++) {
        const kvc_stream *s = c->streams[i];
        if (s->xf && s->xf != prev_space) out->meta_bytes += s->xf->ops->bytes(s->xf); /* once for streams that share it */
        prev_space = s->xf;
        const kvc_xform *prev = NULL;
        for (int ci = 0; ci < s->n_chunks; ci++) {
            const kvc_chunk *ch = s->chunks[ci];
            kvc_chunk_bytes(ch, &out->payload_bytes, &out->meta_bytes, &out->index_bytes);
            if (ch->xf && ch->xf != prev && ch->xf->ops->bytes) out->meta_bytes += ch->xf->ops->bytes(ch->xf);
            prev = ch->xf;
            out->meta_bytes -= chunk_spare(ch); /* counted as reserved below */
            spare += chunk_spare(ch);
        }
        uint64_t p = 0, m = 0, x = 0;
        kvc_chunk_bytes(s->hot, &p, &m, &x);
        out->window_bytes += p + m - chunk_spare(s->hot);
        spare += chunk_spare(s->hot);
        hot += (uint64_t)s->hot->n;
        out->buffer_bytes += kvc_near_bytes(s->near);
        for (int j = 0; j < c->spec.n; j++)
            if (c->spec.m[j]->ops.buffer_bytes)
                out->buffer_bytes += c->spec.m[j]->ops.buffer_bytes(c->mstate[j], s, s->mstate[j]);
        live += (uint64_t)kvc_stream_live_tokens(s);
        read += c->usage[i].read, ctx += c->usage[i].context;
        sel += c->usage[i].selected, reused += c->usage[i].reused;
        seen += (uint64_t)s->n_pos;
    }
    for (int j = 0; j < c->spec.n; j++) {
        if (c->spec.m[j]->ops.far_stats)
            c->spec.m[j]->ops.far_stats(c->mstate[j], out);
        if (c->spec.m[j]->ops.background) c->spec.m[j]->ops.background(c->mstate[j], out);
    }
    out->buffer_bytes += kvc_attend_ws_bytes(c->ws);
    for (int i = 0; i < c->n_pws; i++) out->buffer_bytes += kvc_prefill_ws_bytes(c->pws[i]);
    int nl = c->shape.n_layers, nkv = c->shape.n_kv_heads, d = c->shape.head_dim;
    out->tokens = live / (uint64_t)(nl * nkv);
    out->context_tokens = seen / (uint64_t)(nl * nkv);
    out->window_tokens = hot / (uint64_t)(nl * nkv);
    uint64_t total = out->payload_bytes + out->meta_bytes + out->index_bytes + out->window_bytes;
    out->in_use_bytes = total;
    out->reserved_bytes = spare + out->buffer_bytes;
    out->read_fraction = ctx ? (double)read / (double)ctx : 0.0;
    out->reuse_rate = sel ? (double)reused / (double)sel : 0.0;
    if (out->context_tokens > 0) {
        out->bytes_per_token = (double)total / (double)out->context_tokens;
        out->bits_per_element = (double)total * 8.0 / ((double)out->context_tokens * nl * nkv * d * 2);
        double f16 = (double)out->context_tokens * nl * nkv * d * 2 * 2;
        out->ratio_vs_f16 = total ? f16 / (double)total : 0.0;
    }
}

void kvc_cache_attend_times(const kvc_cache *c, kvc_attend_times *out) { kvc_attend_ws_times(c->ws, out); }
