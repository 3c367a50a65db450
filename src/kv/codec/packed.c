/* The packed_f16 codec (packed.h): per-vector group selection and packing,
 * the blob, and the scalar reference kernels. */
#include "kv/codec/packed.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/blob_arena.h"
#include "kv/codec/prune.h"

typedef struct packed_blob {
    int n, d, group, keep, nw, nv;
    uint32_t *bits;
    kvc_f16 *vals;
    size_t alloc;
} packed_blob;

kvc_status kvc_packed_cfg_check(const kvc_packed_cfg *c, int dim) {
    KVC_CHECK(dim >= 1 && dim <= KVC_PACKED_MAX_D, KVC_ERR_ARG,
              "packed codec: dim %d outside [1, %d]", dim, KVC_PACKED_MAX_D);
    KVC_CHECK(c->group == 1 || c->group == 2 || c->group == 4, KVC_ERR_ARG,
              "packed codec: group %d is not 1, 2 or 4", c->group);
    KVC_CHECK(dim % c->group == 0, KVC_ERR_ARG, "packed codec: dim %d is not a multiple of group %d",
              dim, c->group);
    KVC_CHECK(c->keep >= 1 && c->keep <= dim / c->group, KVC_ERR_ARG,
              "packed codec: keep %d groups outside [1, %d]", c->keep, dim / c->group);
    return KVC_OK;
}

double kvc_packed_select(const float *x, int d, int group, int keep, uint32_t *bits) {
    int ng = d / group;
    float e[KVC_PACKED_MAX_D] = {0}; /* zeroed: GCC cannot see that ng entries are set */
    uint64_t mask[KVC_PACKED_MAX_D / 64];
    for (int g = 0; g < ng; g++) {
        float s = 0.0f;
        for (int j = 0; j < group; j++) s += x[g * group + j] * x[g * group + j];
        e[g] = s;
    }
    kvc_prune_topk(e, ng, keep, mask);
    double kept = 0.0;
    int nw = (ng + 31) / 32;
    for (int w = 0; w < nw; w++) bits[w] = (uint32_t)(mask[w / 2] >> (32 * (w & 1)));
    for (int g = 0; g < ng; g++)
        if (mask[g >> 6] >> (g & 63) & 1) kept += e[g];
    return kept;
}

void kvc_packed_pack(const float *x, const uint32_t *bits, int d, int group, kvc_f16 *vals) {
    int nw = kvc_packed_words(d, group);
    for (int w = 0; w < nw; w++)
        for (uint32_t b = bits[w]; b; b &= b - 1) {
            int c0 = (w * 32 + __builtin_ctz(b)) * group;
            for (int j = 0; j < group; j++) *vals++ = kvc_f32_to_f16(x[c0 + j]);
        }
}

void kvc_packed_unpack(const uint32_t *bits, const kvc_f16 *vals, int d, int group, float *x) {
    memset(x, 0, (size_t)d * sizeof *x);
    int nw = kvc_packed_words(d, group);
    for (int w = 0; w < nw; w++)
        for (uint32_t b = bits[w]; b; b &= b - 1) {
            int c0 = (w * 32 + __builtin_ctz(b)) * group;
            for (int j = 0; j < group; j++) x[c0 + j] = kvc_f16_to_f32(*vals++);
        }
}

/* ---- scalar reference kernels ------------------------------------------------ */

static void qk_ref(const kvc_packed_view *k, int n, const float *q, int G, int ldq, float *s,
                   int lds) {
    for (int t = 0; t < n; t++) {
        const uint32_t *bits = k->bits + (size_t)t * k->nw;
        for (int h = 0; h < G; h++) {
            const kvc_f16 *v = k->vals + (size_t)t * k->nv;
            const float *qh = q + (size_t)h * ldq;
            float acc = 0.0f;
            for (int w = 0; w < k->nw; w++)
                for (uint32_t b = bits[w]; b; b &= b - 1) {
                    int c0 = (w * 32 + __builtin_ctz(b)) * k->group;
                    for (int j = 0; j < k->group; j++) acc += qh[c0 + j] * kvc_f16_to_f32(*v++);
                }
            s[(size_t)h * lds + t] = acc;
        }
    }
}

static void pv_ref(const kvc_packed_view *vw, int n, const float *p, int G, int ldp, float *o,
                   int ldo) {
    for (int t = 0; t < n; t++) {
        const uint32_t *bits = vw->bits + (size_t)t * vw->nw;
        for (int h = 0; h < G; h++) {
            float pt = p[(size_t)h * ldp + t];
            if (pt == 0.0f) continue;
            const kvc_f16 *v = vw->vals + (size_t)t * vw->nv;
            float *oh = o + (size_t)h * ldo;
            for (int w = 0; w < vw->nw; w++)
                for (uint32_t b = bits[w]; b; b &= b - 1) {
                    int c0 = (w * 32 + __builtin_ctz(b)) * vw->group;
                    for (int j = 0; j < vw->group; j++) oh[c0 + j] += pt * kvc_f16_to_f32(*v++);
                }
        }
    }
}

const kvc_packed_kernels kvc_packed_ref = {.qk = qk_ref, .pv = pv_ref};
kvc_packed_kernels kvc_packed_k = {.qk = qk_ref, .pv = pv_ref};

/* ---- the codec ----------------------------------------------------------------- */

static kvc_status pk_encode(const kvc_codec *c, const float *x, int n, int ld, void **out) {
    *out = NULL;
    KVC_CHECK(c->cfg, KVC_ERR_ARG, "packed codec: no parameters");
    const kvc_packed_cfg *cfg = c->cfg;
    int d = c->dim;
    KVC_TRY(kvc_packed_cfg_check(cfg, d));
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "packed codec: %d tokens", n);
    int nw = kvc_packed_words(d, cfg->group), nv = cfg->keep * cfg->group;
    size_t hdr = (sizeof(packed_blob) + 63) & ~(size_t)63;
    size_t nbits = (size_t)n * nw * sizeof(uint32_t), nvals = (size_t)n * nv * sizeof(kvc_f16);
    size_t alloc = (hdr + nbits + nvals + KVC_PACKED_PAD + 63) & ~(size_t)63;
    char *mem = kvc_blob_alloc(alloc);
    if (!mem) return kvc_fail(KVC_ERR_NOMEM, "packed blob of %d tokens (%zu bytes)", n, alloc);
    packed_blob *b = (packed_blob *)mem;
    *b = (packed_blob){.n = n, .d = d, .group = cfg->group, .keep = cfg->keep, .nw = nw, .nv = nv,
                       .bits = (uint32_t *)(mem + hdr), .vals = (kvc_f16 *)(mem + hdr + nbits),
                       .alloc = alloc};
    memset(mem + hdr + nbits + nvals, 0, alloc - hdr - nbits - nvals);
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * ld;
        uint32_t *bi = b->bits + (size_t)i * nw;
        kvc_packed_select(xi, d, cfg->group, cfg->keep, bi);
        kvc_packed_pack(xi, bi, d, cfg->group, b->vals + (size_t)i * nv);
    }
    *out = b;
    return KVC_OK;
}

kvc_packed_view kvc_packed_blob_view(const void *blob, int begin) {
    const packed_blob *b = blob;
    return (kvc_packed_view){.bits = b->bits + (size_t)begin * b->nw,
                             .vals = b->vals + (size_t)begin * b->nv,
                             .d = b->d, .group = b->group, .nw = b->nw, .nv = b->nv};
}

static int pk_count(const kvc_codec *c, const void *blob) { return ((const packed_blob *)blob)->n; }

static void pk_qk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                  int end, float *s, int lds) {
    if (end <= begin) return;
    kvc_packed_view v = kvc_packed_blob_view(blob, begin);
    for (int h = 0; h < G; h += KVC_PACKED_MAX_G) {
        int gb = G - h < KVC_PACKED_MAX_G ? G - h : KVC_PACKED_MAX_G;
        kvc_packed_k.qk(&v, end - begin, q + (size_t)h * ldq, gb, ldq, s + (size_t)h * lds, lds);
    }
}

static void pk_pv(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                  int end, float *o, int ldo) {
    if (end <= begin) return;
    kvc_packed_view v = kvc_packed_blob_view(blob, begin);
    for (int h = 0; h < G; h += KVC_PACKED_MAX_G) {
        int gb = G - h < KVC_PACKED_MAX_G ? G - h : KVC_PACKED_MAX_G;
        kvc_packed_k.pv(&v, end - begin, p + (size_t)h * ldp, gb, ldp, o + (size_t)h * ldo, ldo);
    }
}

/* Bitmaps and values of tokens [begin, end) into L2, one hint per cache line:
 * the driver calls it for the next item's scattered ranges (MosaicKV's
 * selected blocks are 4-16 tokens, too short for the hardware prefetcher). */
static void pk_prefetch(const kvc_codec *c, const void *blob, int begin, int end) {
    const packed_blob *b = blob;
    const char *p = (const char *)(b->bits + (size_t)begin * b->nw), *e = (const char *)(b->bits + (size_t)end * b->nw);
    for (; p < e; p += 64) __builtin_prefetch(p, 0, 2);
    p = (const char *)(b->vals + (size_t)begin * b->nv);
    e = (const char *)(b->vals + (size_t)end * b->nv);
    for (; p < e; p += 64) __builtin_prefetch(p, 0, 2);
}

static void pk_decode(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    const packed_blob *b = blob;
    for (int i = begin; i < end; i++)
        kvc_packed_unpack(b->bits + (size_t)i * b->nw, b->vals + (size_t)i * b->nv, b->d, b->group,
                          x + (size_t)(i - begin) * ld);
}

/* payload: the kept f16 values; meta: bitmaps, header, padding. */
static void pk_bytes(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const packed_blob *b = blob;
    *payload = (uint64_t)b->n * b->nv * sizeof(kvc_f16);
    *meta = b->alloc - *payload;
}

static void pk_free(const kvc_codec *c, void *blob) { kvc_blob_free(blob); }

const kvc_codec_ops kvc_codec_packed_f16 = {
    .name = "packed_f16",
    .granule = 1,
    .encode = pk_encode,
    .count = pk_count,
    .qk = pk_qk,
    .pv = pk_pv,
    .prefetch = pk_prefetch,
    .decode = pk_decode,
    .bytes = pk_bytes,
    .free = pk_free,
};
