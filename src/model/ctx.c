/* The inference context of include/kvcomp.h (kvc_ctx_*): one sequence's run
 * state, KV cache (built from the method spec) and thread pool, and the
 * position bookkeeping around the forward pass in llama.c. Prefill runs the
 * prompt in chunks of n_batch tokens, each attending to the cached past and
 * densely to itself (docs/design.md §2). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "kv/cache.h"
#include "kv/cache_impl.h"
#include "model/model.h"

struct kvc_ctx {
    kvc_model *m;
    kvc_pool *pool;
    kvc_cache *cache;
    kvc_run *run;
    int n_ctx, n_batch, pos;
};

void kvc_ctx_free(kvc_ctx *c) {
    if (!c) return;
    kvc_run_free(c->run);
    kvc_cache_free(c->cache);
    kvc_pool_free(c->pool);
    free(c);
}

/* The cache's view of the vocabulary: a token's bytes (sentkv's boundaries). */
static int token_text(void *model, int32_t token, char *buf, int cap) {
    return kvc_token_piece(model, token, 0, buf, cap);
}

kvc_status kvc_ctx_create(kvc_model *m, const kvc_ctx_params *p, kvc_ctx **out) {
    KVC_CHECK(m != NULL && out != NULL, KVC_ERR_ARG, "kvc_ctx_create: NULL argument");
    *out = NULL;
    kvc_ctx_params d = {0};
    if (!p) p = &d;
    KVC_CHECK(p->n_ctx >= 0 && p->n_ctx <= (1 << 24), KVC_ERR_ARG,
              "context size %d outside [0, 16777216]", p->n_ctx);
    KVC_CHECK(p->n_batch >= 0 && p->n_batch <= 65536, KVC_ERR_ARG,
              "batch size %d outside [0, 65536]", p->n_batch);
    kvc_ctx *c = calloc(1, sizeof *c);
    KVC_CHECK(c != NULL, KVC_ERR_NOMEM, "cannot allocate the context");
    c->m = m;
    c->n_ctx = p->n_ctx > 0 ? p->n_ctx : m->cfg.ctx_train;
    c->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (c->n_batch > c->n_ctx) c->n_batch = c->n_ctx;
    const char *spec = p->kv_spec && *p->kv_spec ? p->kv_spec : KVC_DEFAULT_KV;
    kvc_cache_shape shape = {m->cfg.n_layers, m->cfg.n_heads, m->cfg.n_kv_heads,
                             m->cfg.head_dim, c->n_ctx};
    kvc_status st = kvc_pool_create(p->n_threads, &c->pool);
    if (st == KVC_OK) st = kvc_cache_create(&shape, spec, c->pool, &c->cache);
    if (st == KVC_OK) kvc_cache_set_token_text(c->cache, token_text, m);
    if (st == KVC_OK)
        st = kvc_run_create(m, c->n_batch, kvc_pool_threads(c->pool), &c->run);
    if (st != KVC_OK) {
        kvc_ctx_free(c);
        return st;
    }
    *out = c;
    return KVC_OK;
}

void kvc_ctx_reset(kvc_ctx *c) {
    kvc_cache_reset(c->cache);
    c->pos = 0;
}

int kvc_ctx_pos(const kvc_ctx *c) { return c->pos; }

int kvc_ctx_batch(const kvc_ctx *c) { return c->n_batch; }

static kvc_status check_room(const kvc_ctx *c, int n) {
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "token count %d is negative", n);
    KVC_CHECK((int64_t)c->pos + n <= c->n_ctx, KVC_ERR_RANGE,
              "%d tokens after %d already processed exceed the context of %d tokens; "
              "raise it with -c %lld (the model was trained for %d)",
              n, c->pos, c->n_ctx, (long long)c->pos + n, c->m->cfg.ctx_train);
    return KVC_OK;
}

static kvc_status prefill(kvc_ctx *c, const int32_t *tokens, int n, float *logits, int all) {
    KVC_CHECK(tokens != NULL || n == 0, KVC_ERR_ARG, "prefill: NULL tokens");
    KVC_TRY(check_room(c, n));
    const int nv_rows = c->m->cfg.n_vocab;
    for (int i = 0; i < n; i++)
        KVC_CHECK(tokens[i] >= 0 && tokens[i] < nv_rows, KVC_ERR_ARG,
                  "prompt token %d: id %d outside [0, %d)", i, tokens[i], nv_rows);
    const size_t nv = (size_t)c->m->cfg.n_vocab;
    for (int i = 0; i < n; i += c->n_batch) {
        int b = n - i < c->n_batch ? n - i : c->n_batch;
        float *lg = NULL;
        if (logits && all) lg = logits + (size_t)i * nv;
        else if (logits && i + b == n) lg = logits;
        KVC_TRY(kvc_forward_batch(c->m, c->run, c->cache, c->pool, tokens + i, b, c->pos, lg, all));
        c->pos += b;
    }
    return KVC_OK;
}

kvc_status kvc_ctx_prefill(kvc_ctx *c, const int32_t *tokens, int n, float *logits) {
    return prefill(c, tokens, n, logits, 0);
}

kvc_status kvc_ctx_prefill_all(kvc_ctx *c, const int32_t *tokens, int n, float *logits) {
    return prefill(c, tokens, n, logits, 1);
}

kvc_status kvc_ctx_decode(kvc_ctx *c, int32_t token, float *logits) {
    KVC_TRY(check_room(c, 1));
    KVC_TRY(kvc_forward_token(c->m, c->run, c->cache, c->pool, token, c->pos, logits));
    c->pos++;
    return KVC_OK;
}

void kvc_ctx_cache_stats(const kvc_ctx *c, kvc_cache_stats *out) {
    kvc_cache_stats_get(c->cache, out);
}

void kvc_ctx_timing_get(const kvc_ctx *c, kvc_ctx_timing *out) {
    out->weights_s = c->run->t.weights_s;
    out->attention_s = c->run->t.attention_s;
    out->cache_s = c->run->t.cache_s;
}

void kvc_ctx_set_kv_observer(kvc_ctx *c, kvc_kv_observer_fn fn, void *user) {
    if (!c) return;
    c->run->kv_obs = fn;
    c->run->kv_obs_user = fn ? user : NULL;
}

kvc_status kvc_ctx_append_kv(kvc_ctx *c, const int32_t *tokens, int n, const float *k,
                             const float *v) {
    KVC_CHECK(c && (n == 0 || (tokens && k && v)), KVC_ERR_ARG, "append kv: NULL argument");
    KVC_TRY(check_room(c, n));
    const kvc_config *cf = &c->m->cfg;
    const size_t kvd = (size_t)cf->n_kv_heads * cf->head_dim;
    for (int i = 0; i < n; i++)
        KVC_CHECK(tokens[i] >= 0 && tokens[i] < cf->n_vocab, KVC_ERR_ARG,
                  "append kv: token %d: id %d outside [0, %d)", i, tokens[i], cf->n_vocab);
    kvc_cache_observe_tokens(c->cache, tokens, n);
    for (int l = 0; l < cf->n_layers; l++) /* as a prefill chunk appends, without attention */
        KVC_TRY(kvc_cache_append_n(c->cache, l, n, k + (size_t)l * n * kvd, v + (size_t)l * n * kvd,
                                   NULL));
    c->pos += n;
    return KVC_OK;
}
