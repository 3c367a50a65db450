/* Appending whole units to dense f16 chunks with an optional min/max index
 * (unit_chunks.h). The blobs grow by the dense codec's append; the index
 * grows by one entry per unit, so chunk tokens and index tokens stay equal
 * (a failed index entry takes the unit's rows back out). */
#include "kv/method/unit_chunks.h"

#include "base/status.h"
#include "kv/codec/dense.h"
#include "kv/select/minmax.h"

/* The min/max index's flags (KVC_MM_*) in `indexed`. */
static int index_flags(int indexed) { return indexed & ~KVC_UNITS_INDEXED; }

/* The last chunk if the next unit of len tokens at position pos may join it. */
static kvc_chunk *open_chunk(kvc_stream *s, const kvc_codec *c, int block, int indexed,
                             uint32_t flags, int64_t pos, int len) {
    if (s->n_chunks == 0) return NULL;
    kvc_chunk *last = s->chunks[s->n_chunks - 1];
    int same_index = indexed ? last->sel.ops == &kvc_selector_minmax &&
                                   kvc_minmax_flags(last->sel.index) == index_flags(indexed)
                             : last->sel.ops == NULL;
    if (last->kc.ops != c->ops || last->vc.ops != c->ops || last->pos || last->dead || !same_index ||
        last->flags != flags || last->pos0 + last->n != pos || last->n == 0)
        return NULL;
    return last->n + (int64_t)len <= block ? last : NULL;
}

/* A fresh min/max index over the units' keys. */
static kvc_status index_units(int dim, int indexed, const float *k, const int *len, int n_units,
                              kvc_minmax **out) {
    KVC_TRY(kvc_minmax_create_fmt(dim, index_flags(indexed), out));
    size_t off = 0;
    for (int u = 0; u < n_units; u++) {
        kvc_status st = len[u] >= 1 ? kvc_minmax_add(*out, k + off * dim, len[u], dim)
                                    : kvc_fail(KVC_ERR_ARG, "unit chunks: unit %d of %d tokens", u, len[u]);
        if (st != KVC_OK) {
            kvc_selector_minmax.free(*out);
            *out = NULL;
            return st;
        }
        off += (size_t)len[u];
    }
    return KVC_OK;
}

kvc_status kvc_unit_chunks_encode(kvc_stream *s, const kvc_codec *c, int indexed, uint32_t flags, const float *k,
                                  const float *v, int64_t pos0, const int *len, int n_units) {
    int64_t n = 0;
    for (int u = 0; u < n_units; u++) n += len[u];
    KVC_CHECK(n <= INT32_MAX, KVC_ERR_RANGE, "unit chunks: %lld tokens in one chunk", (long long)n);
    kvc_minmax *x = NULL;
    KVC_TRY(index_units(s->dim, indexed, k, len, n_units, &x));
    kvc_chunk *ch = NULL;
    kvc_status st = kvc_chunk_encode(c, c, k, v, (int)n, s->dim, pos0, NULL, NULL, &ch);
    if (st != KVC_OK) {
        kvc_selector_minmax.free(x);
        return st;
    }
    ch->sel = (kvc_select_index){.ops = &kvc_selector_minmax, .index = x};
    ch->flags = flags;
    st = kvc_stream_insert(s, s->n_chunks, ch);
    if (st != KVC_OK) kvc_chunk_free(ch);
    return st;
}

static kvc_status new_chunk(kvc_stream *s, const kvc_codec *c, int indexed, uint32_t flags,
                            int64_t pos, kvc_chunk **out) {
    kvc_chunk *ch = NULL;
    KVC_TRY(kvc_chunk_encode(c, c, NULL, NULL, 0, s->dim, pos, NULL, NULL, &ch));
    ch->flags = flags;
    kvc_status st = KVC_OK;
    if (indexed) {
        kvc_minmax *x = NULL;
        st = kvc_minmax_create_fmt(s->dim, index_flags(indexed), &x);
        if (st == KVC_OK) ch->sel = (kvc_select_index){.ops = &kvc_selector_minmax, .index = x};
    }
    if (st == KVC_OK) st = kvc_stream_insert(s, s->n_chunks, ch);
    if (st != KVC_OK) {
        kvc_chunk_free(ch);
        return st;
    }
    *out = ch;
    return KVC_OK;
}

/* Appends one unit's rows to ch (and its index entry). */
static kvc_status append_unit(kvc_stream *s, kvc_chunk *ch, const float *k, const float *v, int len) {
    int d = s->dim;
    KVC_TRY(ch->kc.ops->append(&ch->kc, ch->kb, k, len, d));
    kvc_status st = ch->vc.ops->append(&ch->vc, ch->vb, v, len, d);
    if (st == KVC_OK && ch->sel.ops) st = kvc_minmax_add(ch->sel.index, k, len, d);
    if (st != KVC_OK) {
        kvc_dense_truncate(ch->kb, ch->n);
        kvc_dense_truncate(ch->vb, ch->n);
        return st;
    }
    ch->n += len;
    return KVC_OK;
}

kvc_status kvc_unit_chunks_append(kvc_stream *s, int block, int indexed, uint32_t flags,
                                  const float *k, const float *v, int64_t pos0, const int *len,
                                  int n_units) {
    KVC_CHECK(block >= 1, KVC_ERR_ARG, "unit chunks: block %d", block);
    kvc_codec c = {.ops = kvc_codec_dense(KVC_DENSE_F16), .dim = s->dim, .cfg = NULL};
    size_t off = 0;
    int64_t pos = pos0;
    for (int u = 0; u < n_units; u++) {
        KVC_CHECK(len[u] >= 1, KVC_ERR_ARG, "unit chunks: unit %d of %d tokens", u, len[u]);
        kvc_chunk *ch = open_chunk(s, &c, block, indexed, flags, pos, len[u]);
        if (!ch) {
            kvc_chunk *last = s->n_chunks ? s->chunks[s->n_chunks - 1] : NULL;
            if (last && last->kc.ops == c.ops && last->vc.ops == c.ops) { /* full: no more growth */
                kvc_dense_trim(&last->kc, last->kb);
                kvc_dense_trim(&last->vc, last->vb);
            }
            KVC_TRY(new_chunk(s, &c, indexed, flags, pos, &ch));
        }
        KVC_TRY(append_unit(s, ch, k + off * s->dim, v + off * s->dim, len[u]));
        off += (size_t)len[u];
        pos += len[u];
    }
    s->version++;
    return KVC_OK;
}
