/* Method `h2o` (H2O, Zhang et al. 2023; the token-eviction baseline of
 * the MUSTAFAR paper §4.2.1): keep the tokens with the largest accumulated attention
 * ("heavy hitters") plus the most recent tokens, within a budget given as a
 * fraction of the tokens seen (the paper's setting: 10% heavy + 10% recent).
 *
 * Accumulated attention of a token = the sum, over every query that attended
 * it and the G query heads of its KV group, of its softmax probability. In
 * decode the driver reports the probabilities (on_attn); in prefill the method
 * recomputes the chunk's attention rows itself (the queries arrive in
 * on_append) with the codecs' qk over the live tokens, causal inside the chunk.
 * The lowest-scoring non-recent tokens beyond the budget are evicted
 * (kvc_chunk_kill) before every decode attention, before every append and
 * after every prefill chunk's scoring. Tokens in the hot window cannot be
 * evicted, so a prefill chunk's own tokens become candidates when they have
 * left it, i.e. at the next chunk or the first decode step; when the
 * dead tokens reach `compact` of the sealed ones, the stream's sealed chunks
 * are rebuilt from their live tokens (decode, re-encode with the same codecs,
 * positions kept), which frees the evicted tokens' memory.
 *
 * As a base it stores sealed chunks dense f16 (dtype) in blocks; as a modifier
 * ("mustafar:...+h2o:budget=0.2") it only evicts, and the base's chunks stay
 * as they are: re-encoding a bitmap chunk from its decoded rows is exact
 * (the kept values are the only non-zeros and already bf16 or f16). Tokens in the
 * hot window are never evicted (they count as recent), nor are the tokens of
 * a sink chunk (`+sinks`), which count within the budget. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/method/budget.h"
#include "kv/method/method.h"
#include "kv/softmax.h"

typedef struct h2o_cfg {
    float budget;  /* fraction of seen tokens kept (heavy + recent) */
    float recent;  /* fraction of seen tokens kept as the most recent */
    int block;     /* base only: tokens per sealed chunk */
    int dtype;     /* base only: f32 | f16 | bf16 */
    float compact; /* rebuild when dead >= compact * sealed tokens */
} h2o_cfg;

static const kvc_param h2o_params[] = {
    {.key = "budget", .type = KVC_PARAM_FLOAT, .offset = offsetof(h2o_cfg, budget), .def = "0.2",
     .min = 0, .max = 1, .help = "fraction of the tokens seen that stay cached (heavy hitters + recent)"},
    {.key = "recent", .type = KVC_PARAM_FLOAT, .offset = offsetof(h2o_cfg, recent), .def = "0.1",
     .min = 0, .max = 1, .help = "fraction of the tokens seen kept as the most recent (<= budget)"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(h2o_cfg, block), .def = "64",
     .min = 1, .max = 65536, .help = "as a base: tokens per sealed chunk"},
    {.key = "dtype", .type = KVC_PARAM_ENUM, .offset = offsetof(h2o_cfg, dtype), .def = "f16",
     .choices = "f32|f16|bf16", .help = "as a base: element type of the kept keys and values"},
    {.key = "compact", .type = KVC_PARAM_FLOAT, .offset = offsetof(h2o_cfg, compact), .def = "0.25",
     .min = 0, .max = 1, .help = "rebuild chunks when this fraction of sealed tokens is evicted"},
};

static kvc_status h2o_check(const void *cfgp) {
    const h2o_cfg *cfg = cfgp;
    KVC_CHECK(cfg->recent <= cfg->budget, KVC_ERR_ARG,
              "h2o: recent=%g must not exceed budget=%g", cfg->recent, cfg->budget);
    return KVC_OK;
}

enum { H2O_MAGIC = 0x48324f31u, H2O_QBLOCK = 16, H2O_REBUILD_CHUNK = 256 };

/* chunk->user of every sealed chunk: accumulated attention per token. */
typedef struct h2o_chunk {
    uint32_t magic;
    int n;
    float acc[];
} h2o_chunk;

typedef struct h2o_state {
    h2o_cfg cfg;
    int dim, G;
} h2o_state;

typedef struct h2o_stream {
    int64_t hot_pos0;  /* position of hot_acc[0] */
    int hot_n, hot_cap;
    float *hot_acc;
    float *scores;     /* prefill scratch [rows][L] */
    size_t scores_cap;
} h2o_stream;

static kvc_status h2o_create(const kvc_method_env *env, void **state) {
    h2o_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "h2o state");
    st->cfg = *(const h2o_cfg *)env->cfg;
    st->dim = env->head_dim;
    st->G = env->n_heads / env->n_kv_heads;
    *state = st;
    return KVC_OK;
}

static void h2o_destroy(void *state) { free(state); }

static kvc_status h2o_stream_init(void *state, kvc_stream *s, void **sstate) {
    h2o_stream *hs = calloc(1, sizeof *hs);
    if (!hs) return kvc_fail(KVC_ERR_NOMEM, "h2o stream state");
    hs->hot_pos0 = s->n_pos - s->hot->n;
    *sstate = hs;
    return KVC_OK;
}

static void h2o_stream_free(void *state, kvc_stream *s, void *sstate) {
    h2o_stream *hs = sstate;
    if (!hs) return;
    free(hs->hot_acc);
    free(hs->scores);
    free(hs);
}

static void h2o_chunk_free(void *state, kvc_chunk *c) {
    h2o_chunk *u = c->user;
    if (u && u->magic == H2O_MAGIC) {
        free(u);
        c->user = NULL;
    }
}

static h2o_chunk *chunk_scores(const kvc_chunk *c) {
    h2o_chunk *u = c->user;
    return u && u->magic == H2O_MAGIC ? u : NULL;
}

static kvc_status new_scores(int n, h2o_chunk **out) {
    h2o_chunk *u = calloc(1, sizeof *u + (size_t)(n ? n : 1) * sizeof(float));
    if (!u) return kvc_fail(KVC_ERR_NOMEM, "h2o scores of %d tokens", n);
    u->magic = H2O_MAGIC;
    u->n = n;
    *out = u;
    return KVC_OK;
}

/* Brings the bookkeeping in line with the stream: chunks sealed since the last
 * call take their tokens' scores from the hot scores; new hot tokens start at 0. */
static kvc_status sync(h2o_stream *hs, kvc_stream *s) {
    int64_t hot_start = s->n_pos - s->hot->n;
    if (hs->hot_pos0 < hot_start) {
        for (int ci = s->n_chunks - 1; ci >= 0 && !s->chunks[ci]->user && !(s->chunks[ci]->flags & KVC_CHUNK_SINK);
             ci--) {
            kvc_chunk *c = s->chunks[ci];
            h2o_chunk *u = NULL;
            KVC_TRY(new_scores(c->n, &u));
            for (int i = 0; i < c->n; i++) {
                int64_t e = kvc_chunk_pos(c, i) - hs->hot_pos0;
                u->acc[i] = e >= 0 && e < hs->hot_n ? hs->hot_acc[e] : 0.0f;
            }
            c->user = u;
        }
        int drop = (int)(hot_start - hs->hot_pos0);
        if (drop > hs->hot_n) drop = hs->hot_n;
        if (hs->hot_n > drop) /* hot_acc is still NULL before the first scored window */
            memmove(hs->hot_acc, hs->hot_acc + drop, (size_t)(hs->hot_n - drop) * sizeof(float));
        hs->hot_n -= drop;
        hs->hot_pos0 = hot_start;
    }
    for (int ci = 0; ci < s->n_chunks; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        KVC_CHECK(c->user == NULL || chunk_scores(c), KVC_ERR_UNSUPPORTED,
                  "h2o: chunk %d of stream (%d, %d) carries another method's data", ci, s->layer, s->head);
    }
    int need = s->hot->n;
    if (need > hs->hot_cap) {
        int cap = hs->hot_cap ? hs->hot_cap * 2 : 64;
        while (cap < need) cap *= 2;
        float *a = realloc(hs->hot_acc, (size_t)cap * sizeof *a);
        if (!a) return kvc_fail(KVC_ERR_NOMEM, "h2o hot scores (%d)", cap);
        hs->hot_acc = a;
        hs->hot_cap = cap;
    }
    for (int e = hs->hot_n; e < need; e++) hs->hot_acc[e] = 0.0f;
    hs->hot_n = need;
    return KVC_OK;
}

/* ---- eviction and compaction ---------------------------------------------------- */

typedef struct cand {
    float acc;
    int64_t pos;
    int ci, i;
} cand;

/* Higher score first; equal scores: the older token first (deterministic). */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->acc != y->acc) return x->acc > y->acc ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int compatible(const kvc_chunk *a, const kvc_chunk *b) {
    return a->kc.ops == b->kc.ops && a->kc.cfg == b->kc.cfg && a->vc.ops == b->vc.ops &&
           a->vc.cfg == b->vc.cfg && a->kc.dim == b->kc.dim && a->vc.dim == b->vc.dim;
}

static int rebuildable(const kvc_chunk *c) {
    return !c->xf && !c->sel.ops && !(c->flags & (KVC_CHUNK_HOT | KVC_CHUNK_FAR | KVC_CHUNK_ALWAYS));
}

/* Rebuilds chunks [first, last) (compatible, rebuildable) from their live
 * tokens into chunks of at most H2O_REBUILD_CHUNK tokens. */
static kvc_status rebuild_run(kvc_stream *s, int first, int last, int *n_new_out) {
    int d = s->dim, live = 0;
    for (int ci = first; ci < last; ci++) live += s->chunks[ci]->n - s->chunks[ci]->n_dead;
    int n_new = (live + H2O_REBUILD_CHUNK - 1) / H2O_REBUILD_CHUNK;
    float *k = malloc((size_t)(live ? live : 1) * d * sizeof *k);
    float *v = malloc((size_t)(live ? live : 1) * d * sizeof *v);
    float *acc = malloc((size_t)(live ? live : 1) * sizeof *acc);
    int32_t *pos = malloc((size_t)(live ? live : 1) * sizeof *pos);
    kvc_chunk **nc = calloc((size_t)(n_new ? n_new : 1), sizeof *nc);
    kvc_status st = KVC_OK;
    if (!k || !v || !acc || !pos || !nc) st = kvc_fail(KVC_ERR_NOMEM, "h2o rebuild of %d tokens", live);
    int w = 0;
    for (int ci = first; ci < last && st == KVC_OK; ci++) {
        kvc_chunk *c = s->chunks[ci];
        h2o_chunk *u = chunk_scores(c);
        for (int i = 0; i < c->n && st == KVC_OK; i++) {
            if (kvc_chunk_is_dead(c, i)) continue;
            st = kvc_chunk_decode(c, i, i + 1, k + (size_t)w * d, v + (size_t)w * d, d);
            acc[w] = u ? u->acc[i] : 0.0f;
            pos[w] = (int32_t)kvc_chunk_pos(c, i);
            w++;
        }
    }
    const kvc_chunk *proto = s->chunks[first];
    for (int j = 0; j < n_new && st == KVC_OK; j++) {
        int b = j * H2O_REBUILD_CHUNK, n = live - b < H2O_REBUILD_CHUNK ? live - b : H2O_REBUILD_CHUNK;
        st = kvc_chunk_encode(&proto->kc, &proto->vc, k + (size_t)b * d, v + (size_t)b * d, n, d, pos[b],
                              pos + b, NULL, &nc[j]);
        h2o_chunk *u = NULL;
        if (st == KVC_OK) st = new_scores(n, &u);
        if (st == KVC_OK) {
            memcpy(u->acc, acc + b, (size_t)n * sizeof(float));
            nc[j]->user = u;
        }
    }
    if (st == KVC_OK) st = kvc_stream_replace(s, first, last - first, nc, n_new);
    if (st != KVC_OK) {
        for (int j = 0; j < n_new && nc; j++) {
            if (!nc[j]) continue;
            free(nc[j]->user);
            nc[j]->user = NULL;
            kvc_chunk_free(nc[j]);
        }
    }
    free(k), free(v), free(acc), free(pos), free(nc);
    *n_new_out = n_new;
    return st;
}

static kvc_status compact(const h2o_state *st, kvc_stream *s) {
    int64_t sealed = 0, dead = 0;
    for (int ci = 0; ci < s->n_chunks; ci++) sealed += s->chunks[ci]->n, dead += s->chunks[ci]->n_dead;
    if (dead == 0 || (double)dead < st->cfg.compact * (double)sealed) return KVC_OK;
    int ci = 0;
    while (ci < s->n_chunks) {
        if (!rebuildable(s->chunks[ci])) {
            ci++;
            continue;
        }
        int end = ci + 1, any_dead = s->chunks[ci]->n_dead > 0;
        while (end < s->n_chunks && rebuildable(s->chunks[end]) && compatible(s->chunks[ci], s->chunks[end])) {
            any_dead |= s->chunks[end]->n_dead > 0;
            end++;
        }
        if (!any_dead) {
            ci = end;
            continue;
        }
        int n_new;
        KVC_TRY(rebuild_run(s, ci, end, &n_new));
        ci += n_new;
    }
    return KVC_OK;
}

/* Keeps ceil(budget * seen) tokens: the newest ceil(recent * seen), and the
 * heavy hitters — the highest accumulated scores among the older live tokens,
 * for the rest of the budget. Older tokens still in the hot window compete for
 * the heavy slots like the others but cannot be evicted until they are sealed
 * (the next call evicts them if they still lose). */
static kvc_status evict(const h2o_state *st, h2o_stream *hs, kvc_stream *s) {
    int64_t seen = s->n_pos;
    int64_t keep = kvc_budget_tokens(st->cfg.budget, seen);
    int64_t n_recent = kvc_budget_tokens(st->cfg.recent, seen);
    int64_t recent_from = seen - n_recent;
    int64_t hot_from = seen - s->hot->n;
    int64_t live = kvc_stream_live_tokens(s);
    if (live <= keep) return KVC_OK;
    int64_t slots = keep - n_recent;
    int64_t n_cand = 0;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        if (c->flags & KVC_CHUNK_SINK) { /* kept, within the budget */
            slots -= c->n;
            continue;
        }
        for (int i = 0; i < c->n; i++)
            if (!kvc_chunk_is_dead(c, i) && kvc_chunk_pos(c, i) < recent_from) n_cand++;
    }
    int64_t n_hot_cand = recent_from > hot_from ? recent_from - hot_from : 0;
    if (n_cand + n_hot_cand <= slots) return KVC_OK;
    cand *cs = malloc((size_t)(n_cand + n_hot_cand) * sizeof *cs);
    if (!cs) return kvc_fail(KVC_ERR_NOMEM, "h2o eviction candidates (%lld)", (long long)n_cand);
    int64_t w = 0;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        const kvc_chunk *c = s->chunks[ci];
        const h2o_chunk *u = chunk_scores(c);
        for (int i = 0; i < c->n && !(c->flags & KVC_CHUNK_SINK); i++) { /* sinks are never evicted */
            int64_t p = kvc_chunk_pos(c, i);
            if (kvc_chunk_is_dead(c, i) || p >= recent_from) continue;
            cs[w++] = (cand){u ? u->acc[i] : 0.0f, p, ci, i};
        }
    }
    for (int64_t e = 0; e < n_hot_cand; e++) /* hot: ci = -1 */
        cs[w++] = (cand){e < hs->hot_n ? hs->hot_acc[e] : 0.0f, hot_from + e, -1, (int)e};
    qsort(cs, (size_t)w, sizeof *cs, cand_cmp);
    kvc_status r = KVC_OK;
    for (int64_t j = slots > 0 ? slots : 0; j < w && r == KVC_OK; j++)
        if (cs[j].ci >= 0) r = kvc_chunk_kill(s->chunks[cs[j].ci], cs[j].i);
    free(cs);
    if (r == KVC_OK) s->version++;
    return r == KVC_OK ? compact(st, s) : r;
}

/* ---- accumulation ---------------------------------------------------------------- */

/* Prefill: the chunk's n queries (G heads each) attend to every live token,
 * causally to the chunk's own tokens (the last n hot rows); the probabilities
 * are added to the tokens' scores. */
static kvc_status score_prefill(const h2o_state *st, h2o_stream *hs, kvc_stream *s, int n,
                                const float *q) {
    int d = st->dim, G = st->G;
    int64_t L = s->hot->n;
    for (int ci = 0; ci < s->n_chunks; ci++) {
        KVC_CHECK(!s->chunks[ci]->xf, KVC_ERR_UNSUPPORTED, "h2o: chunks with a transform are not supported");
        L += s->chunks[ci]->n;
    }
    size_t rows = (size_t)H2O_QBLOCK * G;
    size_t need = rows * (size_t)L + rows * d;
    if (need > hs->scores_cap) {
        float *b = realloc(hs->scores, need * sizeof *b);
        if (!b) return kvc_fail(KVC_ERR_NOMEM, "h2o prefill scores (%zu floats)", need);
        hs->scores = b;
        hs->scores_cap = need;
    }
    float *S = hs->scores, *qs = hs->scores + rows * (size_t)L;
    float scale = 1.0f / sqrtf((float)d);
    int hn = s->hot->n;
    for (int i0 = 0; i0 < n; i0 += H2O_QBLOCK) {
        int nq = n - i0 < H2O_QBLOCK ? n - i0 : H2O_QBLOCK, R = nq * G;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < d; c++) qs[(size_t)r * d + c] = q[(size_t)i0 * G * d + (size_t)r * d + c] * scale;
        int64_t off = 0;
        for (int ci = 0; ci < s->n_chunks; ci++) {
            const kvc_chunk *c = s->chunks[ci];
            if (c->n) c->kc.ops->qk(&c->kc, c->kb, qs, R, d, 0, c->n, S + off, (int)L);
            if (c->dead)
                for (int i = 0; i < c->n; i++)
                    if (kvc_chunk_is_dead(c, i))
                        for (int r = 0; r < R; r++) S[(size_t)r * L + off + i] = -INFINITY;
            off += c->n;
        }
        if (hn) s->hot->kc.ops->qk(&s->hot->kc, s->hot->kb, qs, R, d, 0, hn, S + off, (int)L);
        for (int r = 0; r < R; r++) {
            int qi = i0 + r / G;
            int vis = hn - n + qi + 1; /* hot rows visible to query qi */
            float *row = S + (size_t)r * L;
            int len = (int)(off + vis);
            float m = kvc_softmax_k.max(row, len);
            float sum = kvc_softmax_k.exp_sum(row, len, m);
            float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
            int64_t o = 0;
            for (int ci = 0; ci < s->n_chunks; ci++) {
                const kvc_chunk *c = s->chunks[ci];
                h2o_chunk *u = chunk_scores(c); /* NULL: a sink chunk, never evicted */
                for (int i = 0; u && i < c->n; i++) u->acc[i] += row[o + i] * inv;
                o += c->n;
            }
            for (int j = 0; j < vis; j++) hs->hot_acc[j] += row[off + j] * inv;
        }
    }
    /* The score rows ([queries][all tokens]) are scratch of this prefill chunk: a
     * cache that goes on to decode should not hold them (at 8K tokens they were
     * about half the memory of an h2o:0.5 cache). */
    free(hs->scores);
    hs->scores = NULL;
    hs->scores_cap = 0;
    return KVC_OK;
}

static kvc_status h2o_on_append(void *state, kvc_stream *s, void *sstate, int n, const float *k,
                                const float *v, const float *q) {
    const h2o_state *st = state;
    h2o_stream *hs = sstate;
    KVC_TRY(sync(hs, s));
    if (!q) return KVC_OK; /* decode: scores arrive in on_attn, eviction at on_query */
    KVC_TRY(evict(st, hs, s)); /* the previous chunk's tokens, sealed since */
    KVC_TRY(score_prefill(st, hs, s, n, q));
    return evict(st, hs, s);
}

/* Before a decode attention: tokens sealed by the last append become
 * candidates, and the budget is enforced for this query. */
static kvc_status h2o_on_query(void *state, kvc_stream *s, void *sstate, const float *q) {
    const h2o_state *st = state;
    h2o_stream *hs = sstate;
    KVC_TRY(sync(hs, s));
    return evict(st, hs, s);
}

static kvc_status h2o_step(void *state, kvc_stream *s, void *sstate) {
    const h2o_state *st = state;
    h2o_stream *hs = sstate;
    KVC_TRY(sync(hs, s));
    return evict(st, hs, s);
}

static void h2o_on_attn(void *state, kvc_stream *s, void *sstate, int ci, const kvc_range *r,
                        int nr, const float *p) {
    h2o_stream *hs = sstate;
    if (sync(hs, s) != KVC_OK) return; /* out of memory: this step's scores are lost */
    float *acc;
    int lim;
    if (ci < 0) {
        acc = hs->hot_acc;
        lim = hs->hot_n;
    } else {
        h2o_chunk *u = chunk_scores(s->chunks[ci]);
        if (!u) return;
        acc = u->acc;
        lim = u->n;
    }
    for (int j = 0; j < nr; j++)
        for (int i = r[j].begin; i < r[j].end; i++, p++)
            if (i < lim) acc[i] += *p;
}

/* ---- as a base ------------------------------------------------------------------- */

static int h2o_hot_leave(void *state, kvc_stream *s, void *sstate) {
    const h2o_state *st = state;
    int n = s->hot->n;
    return n >= st->cfg.block ? n - n % st->cfg.block : 0;
}

static kvc_status h2o_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                  const float *v, int n, int64_t pos0, kvc_chunk **out) {
    const h2o_state *st = state;
    kvc_codec c = {.ops = kvc_codec_dense((kvc_dense_type)st->cfg.dtype), .dim = s->dim, .cfg = NULL};
    return kvc_chunk_encode(&c, &c, k, v, n, s->dim, pos0, NULL, NULL, out);
}

static uint64_t h2o_buffer_bytes(const void *state, const kvc_stream *s, const void *sstate) {
    const h2o_stream *hs = sstate;
    uint64_t b = sizeof *hs + (uint64_t)hs->hot_cap * sizeof(float) + hs->scores_cap * sizeof(float);
    for (int ci = 0; ci < s->n_chunks; ci++)
        if (chunk_scores(s->chunks[ci])) b += sizeof(h2o_chunk) + (uint64_t)s->chunks[ci]->n * sizeof(float);
    return b;
}

const kvc_method kvc_method_h2o = {
    .name = "h2o",
    .summary = "heavy hitters by accumulated attention + recent tokens within a budget; evicts the rest",
    .paper = "H2O (Zhang et al., NeurIPS 2023; baseline of MUSTAFAR §4.2.1)",
    .flags = KVC_METHOD_BASE | KVC_METHOD_MODIFIER | KVC_METHOD_WANTS_ATTN,
    .params = h2o_params,
    .n_params = (int)(sizeof h2o_params / sizeof h2o_params[0]),
    .positional = 0,
    .cfg_size = sizeof(h2o_cfg),
    .check = h2o_check,
    .ops = {
        .create = h2o_create,
        .destroy = h2o_destroy,
        .stream_init = h2o_stream_init,
        .stream_free = h2o_stream_free,
        .step = h2o_step,
        .on_append = h2o_on_append,
        .hot_leave = h2o_hot_leave,
        .build_chunk = h2o_build_chunk,
        .chunk_free = h2o_chunk_free,
        .on_query = h2o_on_query,
        .on_attn = h2o_on_attn,
        .buffer_bytes = h2o_buffer_bytes,
    },
};
