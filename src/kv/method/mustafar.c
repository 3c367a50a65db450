/* Method `mustafar` (the MUSTAFAR paper): per-token unstructured pruning of K and V
 * to separate target sparsities (§2: magnitude for both, output-aware
 * |k| ⊙ Σ|q| for K as an option, §2.1 Figure 3), a local dense window of the
 * newest tokens (§2, 32 tokens), tokens leaving it pruned and compressed in
 * blocks into bitmap tiles (§3, Figure 5; codec/bitmap.c) on which decode
 * attention runs directly (src/kernels/<isa>/kv_bitmap_<isa>.c).
 *
 * Compositions (§4.2): "+kivi" quantizes the kept values with KIVI's bits and
 * group (codec/bitmap_quant.c: prune, then quantize); "+h2o" evicts tokens by
 * accumulated attention on top (h2o.c; the surviving tokens stay pruned).
 * A side with sparsity 0 is stored dense f16 (or KIVI-quantized with +kivi),
 * as the paper's K0 / V0 rows keep that side unpruned. The tiles' kept values
 * are bf16 by default, which the AVX-512 kernels widen with a shift instead
 * of a conversion, at the same quality as the paper's f16 (dtype=f16;
 * docs/methods.md "mustafar"). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/bitmap_quant.h"
#include "kv/codec/dense.h"
#include "kv/codec/quant.h"
#include "kv/method/method.h"
#include "kv/codec/prune.h"

typedef struct mustafar_cfg {
    float k, v;   /* target sparsities */
    int window;   /* dense local window (tokens) */
    int block;    /* tokens pruned and compressed together */
    int outaware; /* K scored by |k| * sum|q| over the window's queries */
    int dtype;    /* bitmap tiles' values: 0 bf16, 1 f16 (the order of "choices") */
} mustafar_cfg;

static const kvc_param mustafar_params[] = {
    {.key = "k", .type = KVC_PARAM_FLOAT, .offset = offsetof(mustafar_cfg, k), .def = "0.5",
     .min = 0, .max = 1, .help = "key sparsity: fraction of each key's channels pruned"},
    {.key = "v", .type = KVC_PARAM_FLOAT, .offset = offsetof(mustafar_cfg, v), .def = "0.5",
     .min = 0, .max = 1, .help = "value sparsity: fraction of each value's channels pruned"},
    {.key = "window", .type = KVC_PARAM_INT, .offset = offsetof(mustafar_cfg, window), .def = "32",
     .min = 0, .max = 65536, .help = "newest tokens kept dense (the local window)"},
    {.key = "block", .type = KVC_PARAM_INT, .offset = offsetof(mustafar_cfg, block), .def = "64",
     .min = 1, .max = 65536, .help = "tokens leaving the window are compressed in blocks of this many"},
    {.key = "outaware", .type = KVC_PARAM_BOOL, .offset = offsetof(mustafar_cfg, outaware),
     .def = "0", .help = "prune keys by |k| * sum |q| over the queries seen in the window (§2.1)"},
    {.key = "dtype", .type = KVC_PARAM_ENUM, .offset = offsetof(mustafar_cfg, dtype), .def = "bf16",
     .choices = "bf16|f16",
     .help = "element type of the kept values in the bitmap tiles (f16: the paper's); +kivi quantizes them"},
};

/* Per cache: the codec instances every sealed chunk uses. */
typedef struct mustafar_state {
    mustafar_cfg cfg;
    int dim, G, keep_k, keep_v;
    kvc_bitmap_cfg bk, bv;
    kvc_bitmap_quant_cfg qk, qv;
    kvc_quant_cfg kivi;
    kvc_codec kc, vc;
} mustafar_state;

/* Per stream, output-aware only: for each hot token (oldest first, token e at
 * position pos0 + e) the sum of |q| over the group's queries seen so far, and
 * how many queries that was (at most `window`). */
typedef struct mustafar_stream {
    int64_t pos0;
    int n, cap;
    float *qsum; /* [cap][dim] */
    int *seen;   /* [cap] */
    float *scratch; /* [block-sized][dim] pre-masked keys */
    int scratch_n;
} mustafar_stream;

/* Reads an int parameter of another layer's cfg through its table (the KIVI
 * engineer's struct layout is theirs; its table says where "bits" lives). */
static int layer_int(const kvc_method *m, const void *cfg, const char *key, int def) {
    for (int i = 0; i < m->n_params; i++) {
        const kvc_param *p = &m->params[i];
        if (strcmp(p->key, key) == 0 &&
            (p->type == KVC_PARAM_INT || p->type == KVC_PARAM_ENUM || p->type == KVC_PARAM_BOOL))
            return *(const int *)((const char *)cfg + p->offset);
    }
    return def;
}

static kvc_status mustafar_create(const kvc_method_env *env, void **state) {
    mustafar_state *st = calloc(1, sizeof *st);
    if (!st) return kvc_fail(KVC_ERR_NOMEM, "mustafar state");
    st->cfg = *(const mustafar_cfg *)env->cfg;
    st->dim = env->head_dim;
    st->G = env->n_heads / env->n_kv_heads;
    if (st->dim > KVC_BITMAP_MAX_D) {
        free(st);
        return kvc_fail(KVC_ERR_UNSUPPORTED, "mustafar: head_dim %d above %d", env->head_dim,
                        KVC_BITMAP_MAX_D);
    }
    st->keep_k = kvc_prune_keep_count(st->cfg.k, st->dim);
    st->keep_v = kvc_prune_keep_count(st->cfg.v, st->dim);
    int kivi = -1;
    for (int i = 1; i < env->n_stack; i++)
        if (strcmp(env->stack[i]->name, "kivi") == 0) kivi = i;
    if (kivi < 0) {
        kvc_codec dense = {.ops = &kvc_codec_f16, .dim = st->dim, .cfg = NULL};
        const kvc_codec_ops *bitmap = st->cfg.dtype == 0 ? &kvc_codec_bitmap_bf16 : &kvc_codec_bitmap_f16;
        st->bk.keep = st->keep_k;
        st->bv.keep = st->keep_v;
        st->kc = st->keep_k < st->dim ? (kvc_codec){.ops = bitmap, .dim = st->dim, .cfg = &st->bk} : dense;
        st->vc = st->keep_v < st->dim ? (kvc_codec){.ops = bitmap, .dim = st->dim, .cfg = &st->bv} : dense;
    } else {
        st->kivi.bits = layer_int(env->stack[kivi], env->stack_cfg[kivi], "bits", 2);
        st->kivi.group = layer_int(env->stack[kivi], env->stack_cfg[kivi], "group", 32);
        st->qk = (kvc_bitmap_quant_cfg){st->keep_k, st->kivi.bits, st->kivi.group};
        st->qv = (kvc_bitmap_quant_cfg){st->keep_v, st->kivi.bits, st->kivi.group};
        kvc_status s = KVC_OK;
        if (st->keep_k < st->dim) s = kvc_bitmap_quant_cfg_check(&st->qk, st->dim);
        else s = kvc_quant_cfg_check(&st->kivi);
        if (s == KVC_OK && st->keep_v < st->dim) s = kvc_bitmap_quant_cfg_check(&st->qv, st->dim);
        if (s != KVC_OK) {
            free(st);
            return s;
        }
        st->kc = st->keep_k < st->dim
                     ? (kvc_codec){.ops = &kvc_codec_bitmap_quant_k, .dim = st->dim, .cfg = &st->qk}
                     : (kvc_codec){.ops = &kvc_codec_quant_k, .dim = st->dim, .cfg = &st->kivi};
        st->vc = st->keep_v < st->dim
                     ? (kvc_codec){.ops = &kvc_codec_bitmap_quant_v, .dim = st->dim, .cfg = &st->qv}
                     : (kvc_codec){.ops = &kvc_codec_quant_v, .dim = st->dim, .cfg = &st->kivi};
    }
    *state = st;
    return KVC_OK;
}

static void mustafar_destroy(void *state) { free(state); }

static kvc_status mustafar_stream_init(void *state, kvc_stream *s, void **sstate) {
    mustafar_state *st = state;
    *sstate = NULL;
    if (!st->cfg.outaware || st->keep_k >= st->dim) return KVC_OK;
    mustafar_stream *ms = calloc(1, sizeof *ms);
    if (!ms) return kvc_fail(KVC_ERR_NOMEM, "mustafar stream state");
    ms->pos0 = s->n_pos;
    *sstate = ms;
    return KVC_OK;
}

static void mustafar_stream_free(void *state, kvc_stream *s, void *sstate) {
    mustafar_stream *ms = sstate;
    if (!ms) return;
    free(ms->qsum);
    free(ms->seen);
    free(ms->scratch);
    free(ms);
}

static kvc_status reserve(mustafar_stream *ms, int need, int dim) {
    if (need <= ms->cap) return KVC_OK;
    int cap = ms->cap ? ms->cap * 2 : 64;
    while (cap < need) cap *= 2;
    float *q = realloc(ms->qsum, (size_t)cap * dim * sizeof *q);
    if (!q) return kvc_fail(KVC_ERR_NOMEM, "mustafar query sums (%d tokens)", cap);
    ms->qsum = q;
    int *sn = realloc(ms->seen, (size_t)cap * sizeof *sn);
    if (!sn) return kvc_fail(KVC_ERR_NOMEM, "mustafar query counts (%d tokens)", cap);
    ms->seen = sn;
    ms->cap = cap;
    return KVC_OK;
}

/* A prefill chunk grows the per-token query sums and the key scratch to the
 * chunk's size; decode needs only the window and one block. Giving the rest
 * back keeps a decoding cache's buffers at a few window's worth (failed
 * shrinks keep the larger buffers). */
static void shrink_after_prefill(const mustafar_state *st, mustafar_stream *ms) {
    int d = st->dim;
    if (ms->scratch_n > st->cfg.block) {
        free(ms->scratch);
        ms->scratch = NULL;
        ms->scratch_n = 0;
    }
    int cap = 64;
    while (cap < 2 * ms->n) cap *= 2;
    if (ms->cap <= 2 * cap) return;
    float *q = realloc(ms->qsum, (size_t)cap * d * sizeof *q);
    if (!q) return;
    ms->qsum = q;
    ms->cap = cap; /* `seen` may stay larger if its shrink fails */
    int *sn = realloc(ms->seen, (size_t)cap * sizeof *sn);
    if (sn) ms->seen = sn;
}

/* New hot tokens start with no queries seen. In prefill the chunk's queries q
 * [n][G][dim] are the next queries of every hot token: token e takes the
 * queries at positions >= its own until it has seen `window` of them (its own
 * query and the next window-1, Figure 3), via prefix sums over the chunk. */
static kvc_status mustafar_on_append(void *state, kvc_stream *s, void *sstate, int n,
                                     const float *k, const float *v, const float *q) {
    mustafar_state *st = state;
    mustafar_stream *ms = sstate;
    if (!ms) return KVC_OK;
    int d = st->dim, G = st->G, W = st->cfg.window > 0 ? st->cfg.window : 1;
    if (ms->n == 0) ms->pos0 = s->n_pos - n; /* the first hot token (sinks stay out of the window) */
    KVC_TRY(reserve(ms, ms->n + n, d));
    memset(ms->qsum + (size_t)ms->n * d, 0, (size_t)n * d * sizeof(float));
    memset(ms->seen + ms->n, 0, (size_t)n * sizeof(int));
    ms->n += n;
    if (!q) return KVC_OK;
    int64_t qpos0 = s->n_pos - n; /* position of query 0 */
    double *pre = malloc((size_t)(n + 1) * d * sizeof *pre);
    if (!pre) return kvc_fail(KVC_ERR_NOMEM, "mustafar prefix sums (%d x %d)", n + 1, d);
    memset(pre, 0, (size_t)d * sizeof *pre);
    for (int i = 0; i < n; i++) {
        double *row = pre + (size_t)(i + 1) * d, *prev = pre + (size_t)i * d;
        for (int c = 0; c < d; c++) row[c] = prev[c];
        for (int g = 0; g < G; g++)
            for (int c = 0; c < d; c++) row[c] += fabsf(q[((size_t)i * G + g) * d + c]);
    }
    for (int e = 0; e < ms->n; e++) {
        int64_t pe = ms->pos0 + e;
        int i0 = pe > qpos0 ? (int)(pe - qpos0) : 0;
        int cnt = W - ms->seen[e];
        if (cnt > n - i0) cnt = n - i0;
        if (cnt <= 0) continue;
        float *qs = ms->qsum + (size_t)e * d;
        const double *a = pre + (size_t)i0 * d, *b = pre + (size_t)(i0 + cnt) * d;
        for (int c = 0; c < d; c++) qs[c] += (float)(b[c] - a[c]);
        ms->seen[e] += cnt;
    }
    free(pre);
    return KVC_OK;
}

/* Decode: the query q [G][dim] is the next query of every hot token still
 * inside its window of `window` queries. */
static kvc_status mustafar_on_query(void *state, kvc_stream *s, void *sstate, const float *q) {
    mustafar_state *st = state;
    mustafar_stream *ms = sstate;
    if (!ms) return KVC_OK;
    int d = st->dim, W = st->cfg.window > 0 ? st->cfg.window : 1;
    float absq[KVC_BITMAP_MAX_D] = {0};
    kvc_prune_accumulate_absq(q, st->G, d, absq);
    for (int e = 0; e < ms->n; e++) {
        if (ms->seen[e] >= W) continue;
        float *qs = ms->qsum + (size_t)e * d;
        for (int c = 0; c < d; c++) qs[c] += absq[c];
        ms->seen[e]++;
    }
    return KVC_OK;
}

static int mustafar_hot_leave(void *state, kvc_stream *s, void *sstate) {
    const mustafar_state *st = state;
    int over = s->hot->n - st->cfg.window;
    return over >= st->cfg.block ? over - over % st->cfg.block : 0;
}

static kvc_status mustafar_build_chunk(void *state, kvc_stream *s, void *sstate, const float *k,
                                       const float *v, int n, int64_t pos0, kvc_chunk **out) {
    mustafar_state *st = state;
    mustafar_stream *ms = sstate;
    int d = st->dim;
    const float *kin = k;
    if (ms) {
        /* output-aware: zero the channels the score prunes, then the codec's
         * magnitude top-k keeps exactly the surviving values */
        KVC_CHECK(ms->pos0 == pos0 && ms->n >= n, KVC_ERR_INTERNAL,
                  "mustafar: query sums for positions %lld.. (%d), chunk at %lld (%d)",
                  (long long)ms->pos0, ms->n, (long long)pos0, n);
        if (ms->scratch_n < n) {
            float *sc = realloc(ms->scratch, (size_t)n * d * sizeof *sc);
            if (!sc) return kvc_fail(KVC_ERR_NOMEM, "mustafar key scratch (%d tokens)", n);
            ms->scratch = sc;
            ms->scratch_n = n;
        }
        float score[KVC_BITMAP_MAX_D];
        uint64_t mask[KVC_BITMAP_MAX_D / 64];
        for (int i = 0; i < n; i++) {
            const float *ki = k + (size_t)i * d;
            float *o = ms->scratch + (size_t)i * d;
            if (ms->seen[i] > 0) {
                kvc_prune_outaware_score(ki, ms->qsum + (size_t)i * d, d, score);
                kvc_prune_topk(score, d, st->keep_k, mask);
            } else { /* no query has seen it (a bulk load without queries): magnitude */
                kvc_prune_topk(ki, d, st->keep_k, mask);
            }
            for (int c = 0; c < d; c++) o[c] = (mask[c >> 6] >> (c & 63) & 1) ? ki[c] : 0.0f;
        }
        kin = ms->scratch;
    }
    KVC_TRY(kvc_chunk_encode(&st->kc, &st->vc, kin, v, n, d, pos0, NULL, NULL, out));
    if (ms) {
        ms->n -= n;
        ms->pos0 += n;
        memmove(ms->qsum, ms->qsum + (size_t)n * d, (size_t)ms->n * d * sizeof(float));
        memmove(ms->seen, ms->seen + n, (size_t)ms->n * sizeof(int));
        shrink_after_prefill(st, ms);
    }
    return KVC_OK;
}

static uint64_t mustafar_buffer_bytes(const void *state, const kvc_stream *s, const void *sstate) {
    const mustafar_state *st = state;
    const mustafar_stream *ms = sstate;
    if (!ms) return 0;
    return (uint64_t)ms->cap * (st->dim * sizeof(float) + sizeof(int)) +
           (uint64_t)ms->scratch_n * st->dim * sizeof(float) + sizeof *ms;
}

static const char *const mustafar_stacks[] = {"kivi", "h2o", "rot", "sinks", NULL};

const kvc_method kvc_method_mustafar = {
    .name = "mustafar",
    .summary = "per-token unstructured pruning of K and V into bitmap tiles; attention on the tiles",
    .paper = "MUSTAFAR (Joo et al., NeurIPS 2025)",
    .flags = KVC_METHOD_BASE,
    .params = mustafar_params,
    .n_params = (int)(sizeof mustafar_params / sizeof mustafar_params[0]),
    .positional = -1,
    .cfg_size = sizeof(mustafar_cfg),
    .stacks_with = mustafar_stacks,
    .ops = {
        .create = mustafar_create,
        .destroy = mustafar_destroy,
        .stream_init = mustafar_stream_init,
        .stream_free = mustafar_stream_free,
        .on_append = mustafar_on_append,
        .hot_leave = mustafar_hot_leave,
        .build_chunk = mustafar_build_chunk,
        .on_query = mustafar_on_query,
        .buffer_bytes = mustafar_buffer_bytes,
    },
};
