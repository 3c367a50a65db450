/* Chunks (docs/design.md §4): building a chunk from dense rows with two codecs,
 * freeing it, marking tokens evicted, decoding it back to the original space
 * (codec decode + the transform's restore), and its byte accounting. */
#include "kv/chunk.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

kvc_status kvc_chunk_encode(const kvc_codec *kc, const kvc_codec *vc, const float *k,
                            const float *v, int n, int ld, int64_t pos0, const int32_t *pos,
                            kvc_xform *xf, kvc_chunk **out) {
    *out = NULL;
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "chunk: token count %d is negative", n);
    kvc_chunk *c = calloc(1, sizeof *c);
    if (!c) return kvc_fail(KVC_ERR_NOMEM, "chunk of %d tokens", n);
    c->n = n;
    c->pos0 = pos0;
    c->kc = *kc;
    c->vc = *vc;
    kvc_status st = kc->ops->encode(kc, k, n, ld, &c->kb);
    if (st == KVC_OK) st = vc->ops->encode(vc, v, n, ld, &c->vb);
    if (st == KVC_OK && pos) {
        c->pos = malloc((size_t)(n ? n : 1) * sizeof *c->pos);
        if (!c->pos) st = kvc_fail(KVC_ERR_NOMEM, "chunk positions (%d)", n);
        else memcpy(c->pos, pos, (size_t)n * sizeof *c->pos);
    }
    if (st != KVC_OK) {
        kvc_chunk_free(c);
        return st;
    }
    c->xf = kvc_xform_retain(xf);
    *out = c;
    return KVC_OK;
}

void kvc_chunk_free(kvc_chunk *c) {
    if (!c) return;
    if (c->kb) c->kc.ops->free(&c->kc, c->kb);
    if (c->vb) c->vc.ops->free(&c->vc, c->vb);
    if (c->sel.ops && c->sel.index) c->sel.ops->free(c->sel.index);
    kvc_xform_release(c->xf);
    free(c->pos);
    free(c->dead);
    free(c);
}

kvc_status kvc_chunk_kill(kvc_chunk *c, int i) {
    KVC_CHECK(i >= 0 && i < c->n, KVC_ERR_ARG, "chunk kill: token %d outside [0, %d)", i, c->n);
    if (!c->dead) {
        c->dead = calloc((size_t)(c->n + 63) / 64, sizeof *c->dead);
        if (!c->dead) return kvc_fail(KVC_ERR_NOMEM, "dead mask of %d tokens", c->n);
    }
    uint64_t bit = 1ull << (i & 63);
    if (!(c->dead[i >> 6] & bit)) {
        c->dead[i >> 6] |= bit;
        c->n_dead++;
    }
    return KVC_OK;
}

static kvc_status decode_one(const kvc_chunk *c, int which, int begin, int end, float *x, int ld) {
    const kvc_codec *cd = which ? &c->vc : &c->kc;
    const void *blob = which ? c->vb : c->kb;
    if (!c->xf) {
        cd->ops->decode(cd, blob, begin, end, x, ld);
        return KVC_OK;
    }
    int n = end - begin, dt = cd->dim;
    float *tmp = malloc((size_t)(n ? n : 1) * dt * sizeof *tmp);
    if (!tmp) return kvc_fail(KVC_ERR_NOMEM, "chunk decode scratch (%d x %d)", n, dt);
    cd->ops->decode(cd, blob, begin, end, tmp, dt);
    c->xf->ops->restore(c->xf, which, tmp, n, dt, x, ld);
    free(tmp);
    return KVC_OK;
}

kvc_status kvc_chunk_decode(const kvc_chunk *c, int begin, int end, float *k, float *v, int ld) {
    KVC_CHECK(begin >= 0 && begin <= end && end <= c->n, KVC_ERR_ARG,
              "chunk decode: range [%d, %d) outside [0, %d)", begin, end, c->n);
    if (k) KVC_TRY(decode_one(c, 0, begin, end, k, ld));
    if (v) KVC_TRY(decode_one(c, 1, begin, end, v, ld));
    return KVC_OK;
}

void kvc_chunk_bytes(const kvc_chunk *c, uint64_t *payload, uint64_t *meta, uint64_t *index) {
    uint64_t p, m;
    c->kc.ops->bytes(&c->kc, c->kb, &p, &m);
    *payload += p;
    *meta += m;
    c->vc.ops->bytes(&c->vc, c->vb, &p, &m);
    *payload += p;
    *meta += m;
    *meta += sizeof *c;
    if (c->pos) *meta += (uint64_t)c->n * sizeof *c->pos;
    if (c->dead) *meta += (uint64_t)(c->n + 63) / 64 * 8;
    /* A shared transform is counted once per transform group by the caller. */
    if (c->sel.ops && c->sel.index) *index += c->sel.ops->bytes(c->sel.index);
}
