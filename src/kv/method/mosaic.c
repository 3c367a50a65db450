/* Method `mosaic` (MosaicKV: dynamic two-D KV cache compression with packed
 * sparse attention; docs/methods.md "mosaic"). Per stream:
 *
 * - The update buffer (§5.3) is the hot window: new tokens stay dense until
 *   `window` of them are there, then leave together.
 * - Leaving tokens join the open segment. The segment's original K and V stay
 *   in a CPU-side buffer (the paper's CPU compression buffer, §5.4) with their
 *   incrementally updated second moments (§5.5); meanwhile the tokens are
 *   compressed temporarily with the previous segment's strategy (a dense f16
 *   chunk before the first strategy exists) so that attention sees them at once.
 * - Prompt tokens (appended in batches) close a segment every `segment`
 *   tokens, and the prompt's last, shorter segment closes when decoding
 *   starts (the paper encodes every input segment at prefill); decode tokens (one per step) close it when their accumulated
 *   compression loss under the previous strategy reaches `segloss`, or at
 *   `maxseg` tokens (§4.3).
 * - Closing a segment computes its strategy (mosaic_strategy.c: rotation,
 *   truncation, rates and group sizes by loss, block size by variance), encodes
 *   it in the packed two-D format with its block index, and replaces the
 *   segment's temporary chunks by the final one.
 * - Each query attends the hot window, the blocks the selector ranks best
 *   within `tokens` of the selectable tokens (stage 2, §4.2), and the dense
 *   chunks of a segment that has no strategy yet.
 *
 * - Decode segments close on the manager thread (mosaic_manager.c, §5.4):
 *   decode continues with the temporary chunks and the step hook swaps the
 *   final chunk in when it is ready; prompt segments close at once (the
 *   paper encodes them during prefill).
 *
 * Switches rotate / pervector / dynamic give the ablation steps of the
 * paper's Figure 9. */
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/method/method.h"
#include "kv/method/mosaic_manager.h"
#include "kv/method/mosaic_strategy.h"

typedef struct mosaic_cfg {
    float keep, tokens, trunc, loss, var, segloss;
    int segment, maxseg, window, group, block, rotate, pervector, dynamic, async;
} mosaic_cfg;

#define P_FLOAT(k, f, d, lo, hi, h) \
    {.key = k, .type = KVC_PARAM_FLOAT, .offset = offsetof(mosaic_cfg, f), .def = d, .min = lo, .max = hi, .help = h}
#define P_INT(k, f, d, lo, hi, h) \
    {.key = k, .type = KVC_PARAM_INT, .offset = offsetof(mosaic_cfg, f), .def = d, .min = lo, .max = hi, .help = h}
#define P_BOOL(k, f, d, h) {.key = k, .type = KVC_PARAM_BOOL, .offset = offsetof(mosaic_cfg, f), .def = d, .help = h}

static const kvc_param mosaic_params[] = {
    P_FLOAT("keep", keep, "0.25", 0.01, 1, "fraction of head_dim elements kept per K/V vector (middle rate candidate)"),
    P_FLOAT("tokens", tokens, "0.1", 0, 1, "fraction of the compressed tokens attended (stage-2 block selection)"),
    P_FLOAT("trunc", trunc, "0.25", 0, 0.75, "fraction of rotated channels truncated per segment"),
    P_FLOAT("loss", loss, "0.15", 0, 1, "loss threshold of the rate / group-size choice (fraction of energy dropped)"),
    P_FLOAT("var", var, "0.5", 0, 1, "threshold of intra-block key variance / segment variance for the block size"),
    P_FLOAT("segloss", segloss, "64", 0, 1e9, "decode segments close when their accumulated loss reaches this"),
    P_INT("segment", segment, "2048", 32, 1 << 20, "prompt tokens per segment"),
    P_INT("maxseg", maxseg, "2048", 32, 1 << 20, "longest decode segment (tokens)"),
    P_INT("window", window, "32", 16, 4096, "update buffer: new tokens kept dense, compressed this many at a time"),
    P_INT("group", group, "0", 0, 4, "element group size 1, 2 or 4; 0: chosen per segment by loss"),
    P_INT("block", block, "0", 0, 16, "token block size 4, 8 or 16; 0: chosen per segment by variance"),
    P_BOOL("rotate", rotate, "1", "rotate each segment by its eigenvectors (0: original channels)"),
    P_BOOL("pervector", pervector, "1", "per-vector top-r elements (0: one channel set per segment, dense)"),
    P_BOOL("dynamic", dynamic, "1", "per-segment rate, group and block choice (0: keep, group 1, block 8)"),
    P_BOOL("async", async, "1", "close decode segments on the manager thread (0: on the decode path)"),
};

static kvc_status mosaic_check(const void *cfgp) {
    const mosaic_cfg *c = cfgp;
    KVC_CHECK(c->group == 0 || c->group == 1 || c->group == 2 || c->group == 4, KVC_ERR_ARG,
              "mosaic: group=%d is not 0, 1, 2 or 4", c->group);
    KVC_CHECK(c->block == 0 || c->block == 4 || c->block == 8 || c->block == 16, KVC_ERR_ARG,
              "mosaic: block=%d is not 0, 4, 8 or 16", c->block);
    KVC_CHECK(c->keep <= 1.0f - c->trunc, KVC_ERR_ARG,
              "mosaic: keep=%g exceeds the %g of the channels left by trunc=%g", c->keep,
              1.0f - c->trunc, c->trunc);
    KVC_CHECK(c->window % 16 == 0, KVC_ERR_ARG, "mosaic: window=%d is not a multiple of 16 (the largest block)",
              c->window);
    return KVC_OK;
}

typedef struct mosaic_state {
    mosaic_cfg cfg;
    kvc_mosaic_opts opts;
    int dim;
    kvc_mosaic_manager *mgr;     /* NULL: async=0 */
    atomic_llong pending_steps;  /* step boundaries that found a segment still being closed */
    atomic_llong waits;          /* times the cache thread waited for the manager (stream free) */
} mosaic_state;

typedef struct mosaic_stream {
    kvc_mosaic_strategy cur; /* strategy of the last closed segment; cur.xf NULL: none yet */
    float *ok, *ov;          /* open segment's original rows [cap][dim] */
    int n_open, cap;
    int64_t open_pos0;
    int n_temp;              /* its temporary chunks: the last n_temp of the stream */
    int decode;              /* the open segment has decode tokens */
    int batch;               /* the last append was a prompt batch (several tokens or queries) */
    double loss;             /* their accumulated loss under cur */
    kvc_cov ck, cv;
    kvc_mosaic_job *pending; /* segments closing on the manager, oldest first */
    uint64_t seq, cur_seq;   /* segments closed so far; the one cur came from */
} mosaic_stream;

static kvc_status mosaic_create(const kvc_method_env *env, void **state) {
    const mosaic_cfg *c = env->cfg;
    KVC_CHECK(env->head_dim % 4 == 0 && env->head_dim <= KVC_PACKED_MAX_D, KVC_ERR_UNSUPPORTED,
              "mosaic: head_dim %d is not a multiple of 4 up to %d", env->head_dim, KVC_PACKED_MAX_D);
    mosaic_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "mosaic state");
    st->cfg = *c;
    st->dim = env->head_dim;
    st->opts = (kvc_mosaic_opts){.keep = c->keep, .trunc = c->trunc, .loss = c->loss, .var = c->var,
                                 .group = c->group, .block = c->block, .rotate = c->rotate,
                                 .pervector = c->pervector, .dynamic = c->dynamic};
    if (c->async) {
        kvc_status r = kvc_mosaic_manager_start(&st->mgr);
        if (r != KVC_OK) {
            free(st);
            return r;
        }
    }
    *state = st;
    return KVC_OK;
}

static void mosaic_destroy(void *state) {
    mosaic_state *st = state;
    kvc_mosaic_manager_stop(st->mgr);
    free(st);
}

/* Frees a stream state; segments still closing on the manager are waited
 * for (their jobs own memory the manager is using) and discarded. */
static void stream_release(mosaic_state *st, mosaic_stream *ms) {
    while (ms->pending) {
        kvc_mosaic_job *j = ms->pending;
        if (!atomic_load_explicit(&j->done, memory_order_acquire)) {
            atomic_fetch_add(&st->waits, 1);
            while (!atomic_load_explicit(&j->done, memory_order_acquire)) {
                struct timespec ts = {0, 100000};
                nanosleep(&ts, NULL);
            }
        }
        ms->pending = j->next_pending;
        kvc_mosaic_job_free(j);
    }
    kvc_mosaic_strategy_clear(&ms->cur);
    free(ms->ok);
    free(ms->ov);
    kvc_cov_free(&ms->ck);
    kvc_cov_free(&ms->cv);
    free(ms);
}

static kvc_status mosaic_stream_init(void *state, kvc_stream *s, void **sstate) {
    const mosaic_state *st = state;
    mosaic_stream *ms = calloc(1, sizeof *ms);
    if (!ms) return kvc_fail(KVC_ERR_NOMEM, "mosaic stream state");
    kvc_status r = kvc_cov_init(&ms->ck, st->dim);
    if (r == KVC_OK) r = kvc_cov_init(&ms->cv, st->dim);
    if (r != KVC_OK) {
        stream_release(state, ms);
        return r;
    }
    *sstate = ms;
    return KVC_OK;
}

static void mosaic_stream_free(void *state, kvc_stream *s, void *sstate) {
    if (sstate) stream_release(state, sstate);
}

static int mosaic_hot_leave(void *state, kvc_stream *s, void *sstate) {
    int w = ((const mosaic_state *)state)->cfg.window;
    return s->hot->n >= w ? s->hot->n - s->hot->n % w : 0;
}

static kvc_status open_reserve(mosaic_stream *ms, int need, int d) {
    if (need <= ms->cap) return KVC_OK;
    int cap = ms->cap ? ms->cap : 256;
    while (cap < need) cap *= 2;
    float *k = realloc(ms->ok, (size_t)cap * d * sizeof *k);
    if (k) ms->ok = k;
    float *v = k ? realloc(ms->ov, (size_t)cap * d * sizeof *v) : NULL;
    if (v) ms->ov = v;
    if (!k || !v) return kvc_fail(KVC_ERR_NOMEM, "mosaic open segment (%d tokens)", cap);
    ms->cap = cap;
    return KVC_OK;
}

/* Inserts a chunk at the end of the stream (freed on failure). */
static kvc_status push_chunk(kvc_stream *s, kvc_chunk *c) {
    kvc_status st = kvc_stream_insert(s, s->n_chunks, c);
    if (st != KVC_OK) kvc_stream_chunk_free(s, c);
    return st;
}

/* Puts a closed segment's chunk in place of its temporary chunks: those of
 * job j sit before the temporary chunks of every newer pending segment and
 * of the open one. Its strategy becomes the current one unless a newer
 * segment's already is. Takes the job out of the pending list and frees it. */
static kvc_status apply_job(kvc_stream *s, mosaic_stream *ms, kvc_mosaic_job *j) {
    if (j->st != KVC_OK) return kvc_fail(j->st, "mosaic: closing a segment: %s", j->err);
    int after = ms->n_temp;
    for (kvc_mosaic_job *o = j->next_pending; o; o = o->next_pending) after += o->n_temp;
    int first = s->n_chunks - after - j->n_temp;
    KVC_CHECK(first >= 0, KVC_ERR_INTERNAL, "mosaic: temporary chunks [%d, +%d) of %d", first,
              j->n_temp, s->n_chunks);
    KVC_TRY(kvc_stream_replace(s, first, j->n_temp, &j->chunk, 1));
    j->chunk = NULL; /* the stream owns it */
    if (j->seq > ms->cur_seq) {
        kvc_mosaic_strategy_clear(&ms->cur);
        ms->cur = j->strat;
        ms->cur_seq = j->seq;
        j->strat = (kvc_mosaic_strategy){0};
    }
    kvc_mosaic_job **pp = &ms->pending;
    while (*pp != j) pp = &(*pp)->next_pending;
    *pp = j->next_pending;
    kvc_mosaic_job_free(j);
    return KVC_OK;
}

/* Closes the open segment: a job with the segment's rows and second moments
 * (moved out of the stream), run here or on the manager; the stream starts
 * a new open segment at once. */
static kvc_status close_segment(mosaic_state *st, kvc_stream *s, mosaic_stream *ms, int async) {
    int d = st->dim;
    kvc_mosaic_job *j = calloc(1, sizeof *j);
    if (!j) return kvc_fail(KVC_ERR_NOMEM, "mosaic: segment job");
    kvc_status r = kvc_cov_init(&j->ck, d);
    if (r == KVC_OK) r = kvc_cov_init(&j->cv, d);
    if (r != KVC_OK) {
        kvc_mosaic_job_free(j);
        return r;
    }
    /* swap the accumulators: the job takes the segment's, the stream keeps fresh ones */
    kvc_cov t = j->ck; j->ck = ms->ck; ms->ck = t;
    t = j->cv; j->cv = ms->cv; ms->cv = t;
    j->opts = st->opts;
    j->d = d;
    j->n = ms->n_open;
    j->pos0 = ms->open_pos0;
    j->k = ms->ok;
    j->v = ms->ov;
    j->n_temp = ms->n_temp;
    j->seq = ++ms->seq;
    ms->ok = ms->ov = NULL;
    ms->cap = 0;
    ms->n_temp = 0;
    ms->n_open = 0;
    ms->decode = 0;
    ms->loss = 0.0;
    kvc_mosaic_job **pp = &ms->pending; /* newest last */
    while (*pp) pp = &(*pp)->next_pending;
    *pp = j;
    if (async && st->mgr) {
        kvc_mosaic_manager_submit(st->mgr, j);
        return KVC_OK;
    }
    kvc_mosaic_job_run(j);
    return apply_job(s, ms, j);
}

/* Step boundary: segments the manager finished replace their temporary chunks. */
static kvc_status mosaic_step(void *state, kvc_stream *s, void *sstate) {
    mosaic_state *st = state;
    mosaic_stream *ms = sstate;
    KVC_CHECK(ms, KVC_ERR_NOMEM, "mosaic: stream state missing (a failed reset)");
    int waiting = 0;
    for (kvc_mosaic_job *j = ms->pending, *next; j; j = next) {
        next = j->next_pending;
        if (atomic_load_explicit(&j->done, memory_order_acquire)) KVC_TRY(apply_job(s, ms, j));
        else waiting = 1;
    }
    if (waiting) atomic_fetch_add(&st->pending_steps, 1);
    return KVC_OK;
}

/* How many of the n tokens k, v join the open segment before it must close,
 * and whether it closes after them. */
static int tokens_until_close(const mosaic_state *st, mosaic_stream *ms, const float *k,
                              const float *v, int n, int batch, int *close) {
    const mosaic_cfg *c = &st->cfg;
    int d = st->dim;
    *close = 0;
    if (batch && !ms->decode) {
        int room = c->segment - ms->n_open;
        if (n >= room) *close = 1;
        return n < room ? n : room;
    }
    ms->decode = 1;
    int room = c->maxseg - ms->n_open;
    int take = n < room ? n : room;
    if (take == room) *close = 1;
    if (!ms->cur.xf) return take;
    for (int i = 0; i < take; i++) {
        ms->loss += 0.5 * (kvc_mosaic_vector_loss(&ms->cur, 0, k + (size_t)i * d) +
                           kvc_mosaic_vector_loss(&ms->cur, 1, v + (size_t)i * d));
        if (ms->loss >= c->segloss) {
            *close = 1;
            return i + 1;
        }
    }
    return take;
}

/* Tokens leaving the update buffer: into the open segment, which closes when
 * full; tokens of a segment still open are stored temporarily. */
static kvc_status mosaic_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                     const float *v, int n, int64_t pos0, kvc_chunk **out) {
    mosaic_state *st = state;
    mosaic_stream *ms = sstate;
    KVC_CHECK(ms, KVC_ERR_NOMEM, "mosaic: stream state missing (a failed reset)");
    int d = st->dim;
    int batch = ms->batch;
    *out = NULL;
    for (int done = 0; done < n;) {
        const float *kb = k + (size_t)done * d, *vb = v + (size_t)done * d;
        int close;
        int take = tokens_until_close(st, ms, kb, vb, n - done, batch, &close);
        KVC_TRY(open_reserve(ms, ms->n_open + take, d));
        if (ms->n_open == 0) ms->open_pos0 = pos0 + done;
        memcpy(ms->ok + (size_t)ms->n_open * d, kb, (size_t)take * d * sizeof *kb);
        memcpy(ms->ov + (size_t)ms->n_open * d, vb, (size_t)take * d * sizeof *vb);
        kvc_cov_add(&ms->ck, kb, take, d);
        kvc_cov_add(&ms->cv, vb, take, d);
        ms->n_open += take;
        if (close) {
            KVC_TRY(close_segment(st, s, ms, ms->decode)); /* prompt segments close at once */
        } else {
            kvc_chunk *c = NULL;
            if (ms->cur.xf) {
                KVC_TRY(kvc_mosaic_encode(&ms->cur, kb, vb, take, d, pos0 + done, &c));
            } else {
                kvc_codec f16 = {.ops = &kvc_codec_f16, .dim = d};
                KVC_TRY(kvc_chunk_encode(&f16, &f16, kb, vb, take, d, pos0 + done, NULL, NULL, &c));
            }
            KVC_TRY(push_chunk(s, c));
            ms->n_temp++;
        }
        done += take;
    }
    return KVC_OK;
}

/* Prompt tokens arrive in batches (or with their queries), decode tokens one
 * at a time: the first decode token closes the prompt's open tail segment. */
static kvc_status mosaic_on_append(void *state, kvc_stream *s, void *sstate, int n, const float *k,
                                   const float *v, const float *q) {
    mosaic_stream *ms = sstate;
    KVC_CHECK(ms, KVC_ERR_NOMEM, "mosaic: stream state missing (a failed reset)");
    ms->batch = n > 1 || q != NULL;
    if (!ms->batch && !ms->decode && ms->n_open > 0) return close_segment(state, s, ms, 0);
    return KVC_OK;
}

static kvc_select_plan mosaic_select(void *state, kvc_stream *s, void *sstate) {
    const mosaic_state *st = state;
    int64_t selectable = 0;
    for (int i = 0; i < s->n_chunks; i++)
        if (s->chunks[i]->sel.ops) selectable += s->chunks[i]->n;
    return (kvc_select_plan){.budget = llround((double)st->cfg.tokens * selectable), .reuse = 0};
}

static uint64_t mosaic_buffer_bytes(const void *state, const kvc_stream *s, const void *sstate) {
    const mosaic_stream *ms = sstate;
    int d = ((const mosaic_state *)state)->dim;
    if (!ms) return 0;
    uint64_t b = sizeof *ms + (uint64_t)ms->cap * d * 2 * sizeof(float) + (uint64_t)2 * d * d * sizeof(double);
    for (const kvc_mosaic_job *j = ms->pending; j; j = j->next_pending) /* the CPU-side copies */
        b += sizeof *j + (uint64_t)j->n * d * 2 * sizeof(float) + (uint64_t)2 * d * d * sizeof(double);
    return b;
}

static void mosaic_background(void *state, kvc_cache_stats *acc) {
    mosaic_state *st = state;
    if (st->mgr) {
        int64_t jobs;
        double busy;
        kvc_mosaic_manager_stats(st->mgr, &jobs, &busy);
        acc->bg_jobs += (uint64_t)jobs;
        acc->bg_busy_s += busy;
    }
    acc->bg_pending_steps += (uint64_t)atomic_load(&st->pending_steps);
    acc->bg_waits += (uint64_t)atomic_load(&st->waits);
}

static const char *const mosaic_stacks[] = {"sinks", NULL};

const kvc_method kvc_method_mosaic = {
    .name = "mosaic",
    .summary = "per-segment rotation, channel truncation, per-vector top-r in packed bitmaps; top-k token blocks",
    .paper = "MosaicKV: Serving Long-Context LLM with Dynamic Two-D KV Cache Compression (Qiang et al., SJTU IPADS)",
    .flags = KVC_METHOD_BASE,
    .params = mosaic_params,
    .n_params = (int)(sizeof mosaic_params / sizeof mosaic_params[0]),
    .positional = -1,
    .cfg_size = sizeof(mosaic_cfg),
    .check = mosaic_check,
    .stacks_with = mosaic_stacks,
    .ops = {
        .create = mosaic_create,
        .destroy = mosaic_destroy,
        .stream_init = mosaic_stream_init,
        .stream_free = mosaic_stream_free,
        .on_append = mosaic_on_append,
        .hot_leave = mosaic_hot_leave,
        .build_chunk = mosaic_build_chunk,
        .step = mosaic_step,
        .select = mosaic_select,
        .buffer_bytes = mosaic_buffer_bytes,
        .background = mosaic_background,
    },
};
