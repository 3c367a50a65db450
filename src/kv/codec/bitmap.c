/* Bitmap tile codec (MUSTAFAR §3, Figure 5b, Appendix C): packing of pruned
 * tokens into 64-channel tiles (64-bit bitmap + f16 or bf16 kept values), unpacking,
 * and the scalar reference kernels that compute q·k and p·v directly on the
 * tiles. Layout and its justification: docs/formats.md "Bitmap tiles". */
#include "kv/codec/bitmap.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/blob_arena.h"
#include "kv/codec/prune.h"

void kvc_bitmap_pack_scalar(const float *x, const uint64_t *mask, int d, int bf16, uint64_t *bits,
                            uint16_t *vals) {
    int nt = kvc_bitmap_tiles(d), w = 0;
    for (int t = 0; t < nt; t++) {
        uint64_t m = mask[t];
        if (t == nt - 1 && (d & 63)) m &= (1ull << (d & 63)) - 1; /* never bits past d */
        bits[t] = m;
        while (m) {
            int c = t * 64 + __builtin_ctzll(m);
            vals[w++] = kvc_bitmap_narrow(x[c], bf16);
            m &= m - 1;
        }
    }
}

void kvc_bitmap_unpack(const uint64_t *bits, const uint16_t *vals, int d, int bf16, float *x) {
    int nt = kvc_bitmap_tiles(d), r = 0;
    for (int c = 0; c < d; c++) x[c] = 0.0f;
    for (int t = 0; t < nt; t++) {
        uint64_t m = bits[t];
        while (m) {
            x[t * 64 + __builtin_ctzll(m)] = kvc_bitmap_widen(vals[r++], bf16);
            m &= m - 1;
        }
    }
}

void kvc_qk_bitmap_scalar(const kvc_bitmap_view *k, int n, const float *q, int g, int ldq,
                              float *s, int lds) {
    int d = k->d, nt = kvc_bitmap_tiles(d);
    for (int h0 = 0; h0 < g; h0 += KVC_BITMAP_MAX_G) { /* heads in blocks of MAX_G */
        int gb = g - h0 < KVC_BITMAP_MAX_G ? g - h0 : KVC_BITMAP_MAX_G;
        const float *qb = q + (size_t)h0 * ldq;
        for (int i = 0; i < n; i++) {
            const uint64_t *bits = k->bits + (size_t)i * nt;
            const uint16_t *vals = k->vals + (size_t)i * k->keep;
            float acc[KVC_BITMAP_MAX_G] = {0};
            for (int t = 0; t < nt; t++) {
                uint64_t m = bits[t];
                while (m) {
                    int c = t * 64 + __builtin_ctzll(m);
                    float x = kvc_bitmap_widen(*vals++, k->bf16);
                    for (int h = 0; h < gb; h++) acc[h] += qb[(size_t)h * ldq + c] * x;
                    m &= m - 1;
                }
            }
            for (int h = 0; h < gb; h++) s[(size_t)(h0 + h) * lds + i] = acc[h];
        }
    }
}

void kvc_pv_bitmap_scalar(const kvc_bitmap_view *v, int n, const float *p, int g, int ldp,
                              float *o, int ldo) {
    int d = v->d, nt = kvc_bitmap_tiles(d);
    for (int i = 0; i < n; i++) {
        const uint64_t *bits = v->bits + (size_t)i * nt;
        const uint16_t *vals = v->vals + (size_t)i * v->keep;
        for (int t = 0; t < nt; t++) {
            uint64_t m = bits[t];
            while (m) {
                int c = t * 64 + __builtin_ctzll(m);
                float x = kvc_bitmap_widen(*vals++, v->bf16);
                for (int h = 0; h < g; h++) o[(size_t)h * ldo + c] += p[(size_t)h * ldp + i] * x;
                m &= m - 1;
            }
        }
    }
}

const kvc_bitmap_kernels kvc_bitmap_ref = {kvc_qk_bitmap_scalar, kvc_pv_bitmap_scalar,
                                           kvc_bitmap_pack_scalar};
kvc_bitmap_kernels kvc_bitmap_k = {kvc_qk_bitmap_scalar, kvc_pv_bitmap_scalar,
                                   kvc_bitmap_pack_scalar};

void kvc_bitmap_pack(const float *x, const uint64_t *mask, int d, int bf16, uint64_t *bits,
                     uint16_t *vals) {
    kvc_bitmap_k.pack(x, mask, d, bf16, bits, vals);
}

/* ---- codec ----------------------------------------------------------------- */

/* One allocation: this header, bits [n][nt], vals [n][keep] + KVC_BITMAP_PAD. */
typedef struct bitmap_blob {
    int n, d, keep, nt, bf16;
    uint64_t *bits;
    uint16_t *vals;
    size_t alloc; /* bytes of the allocation */
} bitmap_blob;

/* The value type comes from the codec (ops), not the cfg: a blob's name
 * always says how its values are stored. */
static int is_bf16(const kvc_codec *c) { return c->ops == &kvc_codec_bitmap_bf16; }

static kvc_status bm_encode(const kvc_codec *c, const float *x, int n, int ld, void **out) {
    const kvc_bitmap_cfg *cfg = c->cfg;
    int d = c->dim, keep = cfg->keep, nt = kvc_bitmap_tiles(d), bf16 = is_bf16(c);
    *out = NULL;
    KVC_CHECK(d >= 1 && d <= KVC_BITMAP_MAX_D, KVC_ERR_ARG, "bitmap codec: dim %d outside [1, %d]",
              d, KVC_BITMAP_MAX_D);
    KVC_CHECK(keep >= 0 && keep <= d, KVC_ERR_ARG, "bitmap codec: keep %d outside [0, %d]", keep, d);
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "bitmap codec: %d tokens", n);
    size_t hdr = (sizeof(bitmap_blob) + 63) & ~(size_t)63;
    size_t nbits = (size_t)n * nt * sizeof(uint64_t);
    size_t nvals = (size_t)n * keep * sizeof(uint16_t);
    size_t alloc = (hdr + nbits + nvals + KVC_BITMAP_PAD + 63) & ~(size_t)63;
    char *mem = kvc_blob_alloc(alloc);
    if (!mem) return kvc_fail(KVC_ERR_NOMEM, "bitmap blob of %d tokens (%zu bytes)", n, alloc);
    bitmap_blob *b = (bitmap_blob *)mem;
    b->n = n;
    b->d = d;
    b->keep = keep;
    b->nt = nt;
    b->bf16 = bf16;
    b->bits = (uint64_t *)(mem + hdr);
    b->vals = (uint16_t *)(mem + hdr + nbits);
    b->alloc = alloc;
    memset(mem + hdr + nbits + nvals, 0, alloc - hdr - nbits - nvals); /* padding */
    uint64_t mask[KVC_BITMAP_MAX_D / 64];
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * ld;
        kvc_prune_topk(xi, d, keep, mask);
        kvc_bitmap_pack(xi, mask, d, bf16, b->bits + (size_t)i * nt, b->vals + (size_t)i * keep);
    }
    *out = b;
    return KVC_OK;
}

static int bm_count(const kvc_codec *c, const void *blob) {
    (void)c;
    return ((const bitmap_blob *)blob)->n;
}

kvc_bitmap_view kvc_bitmap_blob_view(const void *blob, int begin) {
    const bitmap_blob *b = blob;
    kvc_bitmap_view v = {b->bits + (size_t)begin * b->nt, b->vals + (size_t)begin * b->keep, b->d,
                         b->keep, b->bf16};
    return v;
}

static void bm_qk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                  int end, float *s, int lds) {
    (void)c;
    if (end <= begin) return;
    kvc_bitmap_view v = kvc_bitmap_blob_view(blob, begin);
    kvc_bitmap_k.qk(&v, end - begin, q, G, ldq, s, lds);
}

static void bm_pv(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                  int end, float *o, int ldo) {
    (void)c;
    if (end <= begin) return;
    kvc_bitmap_view v = kvc_bitmap_blob_view(blob, begin);
    kvc_bitmap_k.pv(&v, end - begin, p, G, ldp, o, ldo);
}

static void bm_decode(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    (void)c;
    const bitmap_blob *b = blob;
    for (int i = begin; i < end; i++)
        kvc_bitmap_unpack(b->bits + (size_t)i * b->nt, b->vals + (size_t)i * b->keep, b->d,
                          b->bf16, x + (size_t)(i - begin) * ld);
}

/* payload: the kept 16-bit values; meta: bitmaps, header, padding (no offsets are
 * stored: token t's values start at t * keep). */
static void bm_bytes(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    (void)c;
    const bitmap_blob *b = blob;
    *payload = (uint64_t)b->n * b->keep * sizeof(uint16_t);
    *meta = b->alloc - *payload;
}

static void bm_free(const kvc_codec *c, void *blob) {
    (void)c;
    kvc_blob_free(blob);
}

/* The two codecs differ only in their name, which says how the values are
 * stored (is_bf16). */
#define BITMAP_CODEC(NAME)                                                                         \
    {                                                                                              \
        .name = NAME, .granule = 4, /* the AVX-512 q·k reduces four tokens at a time */           \
        .encode = bm_encode, .count = bm_count, .qk = bm_qk, .pv = bm_pv, .decode = bm_decode,    \
        .bytes = bm_bytes, .free = bm_free,                                                        \
    }
const kvc_codec_ops kvc_codec_bitmap_f16 = BITMAP_CODEC("bitmap_f16");
const kvc_codec_ops kvc_codec_bitmap_bf16 = BITMAP_CODEC("bitmap_bf16");
