/* Streams (docs/design.md §4): the chunk list of one (layer, KV head) and its
 * dense hot window (f16 unless the method stores f32 or bf16) — creation,
 * insertion and replacement of chunks (swap-in of background work, eviction
 * of whole chunks), pushing tokens into the hot window and sealing its oldest
 * tokens into a chunk. */
#include "kv/stream.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/near.h"

kvc_status kvc_stream_create(int layer, int head, int dim, int hot_type, kvc_stream **out) {
    *out = NULL;
    kvc_stream *s = calloc(1, sizeof *s);
    if (!s) return kvc_fail(KVC_ERR_NOMEM, "stream (layer %d, head %d)", layer, head);
    s->layer = layer;
    s->head = head;
    s->dim = dim;
    kvc_codec hc = {.ops = kvc_codec_dense((kvc_dense_type)hot_type), .dim = dim, .cfg = NULL};
    kvc_status st = hc.ops ? kvc_chunk_encode(&hc, &hc, NULL, NULL, 0, dim, 0, NULL, NULL, &s->hot)
                           : kvc_fail(KVC_ERR_ARG, "stream: hot window type %d", hot_type);
    if (st != KVC_OK) {
        free(s);
        return st;
    }
    s->hot->flags = KVC_CHUNK_HOT;
    *out = s;
    return KVC_OK;
}

void kvc_stream_chunk_free(kvc_stream *s, kvc_chunk *c) {
    if (!c) return;
    if (c->user && s->chunk_user_free) s->chunk_user_free(s->chunk_user_ctx, c);
    kvc_chunk_free(c);
}

void kvc_stream_clear(kvc_stream *s) {
    for (int i = 0; i < s->n_chunks; i++) kvc_stream_chunk_free(s, s->chunks[i]);
    s->n_chunks = 0;
    s->hot->kc.ops->drop_front(&s->hot->kc, s->hot->kb, s->hot->n);
    s->hot->vc.ops->drop_front(&s->hot->vc, s->hot->vb, s->hot->n);
    s->hot->n = 0;
    s->hot->pos0 = 0;
    s->n_pos = 0;
    kvc_near_free(s->near); /* positions will be given again */
    s->near = NULL;
    s->version++;
}

void kvc_stream_free(kvc_stream *s) {
    if (!s) return;
    for (int i = 0; i < s->n_chunks; i++) kvc_stream_chunk_free(s, s->chunks[i]);
    free(s->chunks);
    kvc_chunk_free(s->hot);
    kvc_xform_release(s->xf);
    free(s->sel_cache);
    kvc_near_free(s->near);
    free(s->stage);
    free(s);
}

int64_t kvc_stream_live_tokens(const kvc_stream *s) {
    int64_t n = s->hot->n;
    for (int i = 0; i < s->n_chunks; i++) n += s->chunks[i]->n - s->chunks[i]->n_dead;
    return n;
}

static kvc_status grow(kvc_stream *s, int need) {
    if (need <= s->cap_chunks) return KVC_OK;
    int cap = s->cap_chunks ? s->cap_chunks * 2 : 16;
    while (cap < need) cap *= 2;
    kvc_chunk **c = realloc(s->chunks, (size_t)cap * sizeof *c);
    if (!c) return kvc_fail(KVC_ERR_NOMEM, "chunk list of %d", cap);
    s->chunks = c;
    s->cap_chunks = cap;
    return KVC_OK;
}

kvc_status kvc_stream_replace(kvc_stream *s, int first, int count, kvc_chunk **new_chunks,
                              int n_new) {
    KVC_CHECK(first >= 0 && count >= 0 && first + count <= s->n_chunks && n_new >= 0, KVC_ERR_ARG,
              "stream replace: chunks [%d, %d+%d) outside [0, %d)", first, first, count,
              s->n_chunks);
    KVC_TRY(grow(s, s->n_chunks - count + n_new));
    for (int i = first; i < first + count; i++) kvc_stream_chunk_free(s, s->chunks[i]);
    memmove(s->chunks + first + n_new, s->chunks + first + count,
            (size_t)(s->n_chunks - first - count) * sizeof *s->chunks);
    for (int i = 0; i < n_new; i++) s->chunks[first + i] = new_chunks[i];
    s->n_chunks += n_new - count;
    if (count > 0 || first + n_new < s->n_chunks) { /* not an append: the near buffer's units may be gone */
        kvc_near_free(s->near);
        s->near = NULL;
    }
    s->version++;
    return KVC_OK;
}

kvc_status kvc_stream_insert(kvc_stream *s, int at, kvc_chunk *c) {
    return kvc_stream_replace(s, at, 0, &c, 1);
}

kvc_status kvc_stream_hot_f32(kvc_stream *s, int begin, int end, const float **k, const float **v) {
    kvc_chunk *h = s->hot;
    KVC_CHECK(begin >= 0 && begin <= end && end <= h->n, KVC_ERR_INTERNAL, "hot rows [%d, %d) of %d", begin,
              end, h->n);
    size_t need = (size_t)2 * (end - begin) * s->dim;
    if (need > s->stage_cap) {
        float *b = realloc(s->stage, need * sizeof *b);
        if (!b) return kvc_fail(KVC_ERR_NOMEM, "hot window staging (%d tokens)", end - begin);
        s->stage = b;
        s->stage_cap = need;
    }
    float *kf = s->stage, *vf = s->stage + (size_t)(end - begin) * s->dim;
    h->kc.ops->decode(&h->kc, h->kb, begin, end, kf, s->dim);
    h->vc.ops->decode(&h->vc, h->vb, begin, end, vf, s->dim);
    *k = kf;
    *v = vf;
    return KVC_OK;
}

/* Appends n tokens to a dense chunk (the hot window, the sink chunk) as the
 * stream's next positions. */
static kvc_status dense_push(kvc_stream *s, kvc_chunk *c, const float *k, const float *v, int n, int ld) {
    KVC_TRY(c->kc.ops->append(&c->kc, c->kb, k, n, ld));
    kvc_status st = c->vc.ops->append(&c->vc, c->vb, v, n, ld);
    if (st != KVC_OK) { /* keep K and V the same length */
        kvc_dense_truncate(c->kb, c->n);
        return st;
    }
    c->n += n;
    s->n_pos += n;
    return KVC_OK;
}

kvc_status kvc_stream_hot_push(kvc_stream *s, const float *k, const float *v, int n, int ld) {
    if (s->hot->n == 0) s->hot->pos0 = s->n_pos;
    return dense_push(s, s->hot, k, v, n, ld);
}

kvc_status kvc_stream_sink_push(kvc_stream *s, const float *k, const float *v, int n, int ld) {
    kvc_chunk *c = s->n_chunks ? s->chunks[0] : NULL;
    if (!c || !(c->flags & KVC_CHUNK_SINK)) {
        KVC_CHECK(s->n_chunks == 0 && s->hot->n == 0, KVC_ERR_INTERNAL,
                  "sink tokens at position %lld after %d chunks and %d hot tokens", (long long)s->n_pos,
                  s->n_chunks, s->hot->n);
        kvc_codec dc = {.ops = s->hot->kc.ops, .dim = s->dim, .cfg = NULL};
        KVC_TRY(kvc_chunk_encode(&dc, &dc, NULL, NULL, 0, s->dim, s->n_pos, NULL, NULL, &c));
        c->flags = KVC_CHUNK_SINK | KVC_CHUNK_ALWAYS;
        kvc_status st = kvc_stream_insert(s, 0, c);
        if (st != KVC_OK) {
            kvc_chunk_free(c);
            return st;
        }
    }
    KVC_TRY(dense_push(s, c, k, v, n, ld));
    s->version++;
    return KVC_OK;
}

kvc_status kvc_stream_hot_seal(kvc_stream *s, int n, kvc_build_fn build, void *ctx) {
    kvc_chunk *h = s->hot;
    KVC_CHECK(n >= 0 && n <= h->n, KVC_ERR_INTERNAL, "hot seal: %d of %d tokens", n, h->n);
    if (n == 0) return KVC_OK;
    const float *k, *v;
    KVC_TRY(kvc_stream_hot_f32(s, 0, n, &k, &v));
    kvc_chunk *c = NULL;
    if (build) {
        KVC_TRY(build(ctx, s, k, v, n, h->pos0, &c));
    } else {
        kvc_codec f32 = {.ops = &kvc_codec_f32, .dim = s->dim, .cfg = NULL};
        KVC_TRY(kvc_chunk_encode(&f32, &f32, k, v, n, s->dim, h->pos0, NULL, NULL, &c));
    }
    if (c) { /* NULL: the builder stored the tokens itself */
        kvc_status st = kvc_stream_insert(s, s->n_chunks, c);
        if (st != KVC_OK) {
            kvc_stream_chunk_free(s, c);
            return st;
        }
    }
    s->version++;
    h->kc.ops->drop_front(&h->kc, h->kb, n);
    h->vc.ops->drop_front(&h->vc, h->vb, n);
    h->n -= n;
    h->pos0 += n;
    return KVC_OK;
}
