/* The quant codecs (docs/design.md §4 "Codec"; KIVI, and KVmix "Asymmetric Low-Bit
 * Quantization"): "quant_k" stores keys per channel in groups along tokens,
 * "quant_v" stores values per token in groups along channels, both at 1-4 bits
 * with f16 min and scale (math and packing in quant_pack.c). qk and pv run the
 * fused dequantise-and-multiply kernel (kvc_quant_wsum) directly on the packed
 * tiles; no dense copy is made. Blob layouts are described in quant.h. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/blob_arena.h"
#include "kv/codec/quant.h"

typedef struct qblob {
    int32_t n, bits, group, dim;
    int32_t n_tiles;  /* K: tiles of `group` tokens; V: channel groups */
    int32_t pad;
    uint8_t data[];   /* 8-byte aligned */
} qblob;

enum { HEADER_BYTES = sizeof(qblob), HEAD_CHUNK = 16 };

kvc_status kvc_quant_cfg_check(const kvc_quant_cfg *cfg) {
    KVC_CHECK(cfg != NULL, KVC_ERR_ARG, "quant codec: missing parameters");
    KVC_CHECK(cfg->bits >= 1 && cfg->bits <= 4, KVC_ERR_ARG,
              "quant codec: bits %d not supported (1, 2, 3 or 4)", cfg->bits);
    KVC_CHECK(cfg->group >= 1 && cfg->group <= KVC_QUANT_MAX_N, KVC_ERR_ARG,
              "quant codec: group %d out of range [1, %d]", cfg->group, KVC_QUANT_MAX_N);
    return KVC_OK;
}

static const kvc_quant_cfg *cfg_of(const kvc_codec *c) { return (const kvc_quant_cfg *)c->cfg; }

/* ---- keys: tiles of `group` tokens, one row per channel ------------------------ */

static size_t k_tile_bytes(int bits, int dim, int tn) {
    return (size_t)dim * 4 + (size_t)dim * 4 * kvc_quant_words(bits, tn);
}

static kvc_qtile k_tile(const qblob *b, int t) {
    const uint8_t *base = b->data + (size_t)t * k_tile_bytes(b->bits, b->dim, b->group);
    int tn = b->n - t * b->group;
    if (tn > b->group) tn = b->group;
    kvc_qtile v = {(const kvc_f16 *)base, (const kvc_f16 *)(base + (size_t)b->dim * 2),
                   (const uint32_t *)(base + (size_t)b->dim * 4), b->dim, tn, b->bits};
    return v;
}

static size_t k_data_bytes(int bits, int group, int dim, int n) {
    int full = n / group, rest = n % group;
    return (size_t)full * k_tile_bytes(bits, dim, group) + (rest ? k_tile_bytes(bits, dim, rest) : 0);
}

void kvc_quant_k_bytes(const kvc_quant_cfg *cfg, int dim, int n, uint64_t *payload, uint64_t *meta) {
    int full = n / cfg->group, rest = n % cfg->group;
    uint64_t words = (uint64_t)full * kvc_quant_words(cfg->bits, cfg->group) +
                     (rest ? (uint64_t)kvc_quant_words(cfg->bits, rest) : 0);
    *payload = words * 4 * (uint64_t)dim;
    *meta = (uint64_t)(full + (rest ? 1 : 0)) * 4 * (uint64_t)dim + HEADER_BYTES;
}

static kvc_status encode_k(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    const kvc_quant_cfg *q = cfg_of(c);
    KVC_TRY(kvc_quant_cfg_check(q));
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "quant_k: negative token count %d", n);
    qblob *b = kvc_blob_alloc(HEADER_BYTES + k_data_bytes(q->bits, q->group, c->dim, n));
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "quant_k: blob of %d tokens", n);
    b->n = n;
    b->bits = q->bits;
    b->group = q->group;
    b->dim = c->dim;
    b->pad = 0;
    b->n_tiles = (n + q->group - 1) / q->group;
    for (int t = 0; t < b->n_tiles; t++) {
        kvc_qtile v = k_tile(b, t);
        /* row = channel (stride 1), values = the tile's tokens (stride ld) */
        kvc_quant_encode(x + (size_t)t * q->group * ld, 1, ld, c->dim, v.n, q->bits,
                         (kvc_f16 *)v.mins, (kvc_f16 *)v.scales, (uint32_t *)v.words);
    }
    *blob = b;
    return KVC_OK;
}

static int count_q(const kvc_codec *c, const void *blob) { return ((const qblob *)blob)->n; }

static void qk_k(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                 int end, float *s, int lds) {
    const qblob *b = blob;
    kvc_quant_wsum_fn wsum = kvc_quant_wsum_k;
    float tmp[HEAD_CHUNK * KVC_QUANT_MAX_N];
    for (int t0 = begin; t0 < end;) {
        int tile = t0 / b->group, tb = tile * b->group;
        kvc_qtile v = k_tile(b, tile);
        int te = end < tb + v.n ? end : tb + v.n;
        for (int h0 = 0; h0 < G; h0 += HEAD_CHUNK) {
            int nh = G - h0 < HEAD_CHUNK ? G - h0 : HEAD_CHUNK;
            if (t0 == tb && te == tb + v.n) { /* whole tile: straight into s */
                for (int h = 0; h < nh; h++)
                    memset(s + (size_t)(h0 + h) * lds + (t0 - begin), 0, sizeof(float) * v.n);
                wsum(&v, q + (size_t)h0 * ldq, ldq, nh, s + (size_t)h0 * lds + (t0 - begin), lds);
            } else {
                memset(tmp, 0, sizeof(float) * nh * KVC_QUANT_MAX_N);
                wsum(&v, q + (size_t)h0 * ldq, ldq, nh, tmp, KVC_QUANT_MAX_N);
                for (int h = 0; h < nh; h++)
                    memcpy(s + (size_t)(h0 + h) * lds + (t0 - begin), tmp + h * KVC_QUANT_MAX_N + (t0 - tb),
                           sizeof(float) * (te - t0));
            }
        }
        t0 = te;
    }
}

static void decode_k(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    const qblob *b = blob;
    float *tmp = malloc(sizeof(float) * (size_t)b->dim * KVC_QUANT_MAX_N);
    if (!tmp) return; /* decode is reference-only; callers check counts */
    for (int t0 = begin; t0 < end;) {
        int tile = t0 / b->group, tb = tile * b->group;
        kvc_qtile v = k_tile(b, tile);
        int te = end < tb + v.n ? end : tb + v.n;
        kvc_quant_decode(&v, tmp, KVC_QUANT_MAX_N); /* [channel][token] */
        for (int t = t0; t < te; t++)
            for (int d = 0; d < b->dim; d++)
                x[(size_t)(t - begin) * ld + d] = tmp[(size_t)d * KVC_QUANT_MAX_N + (t - tb)];
        t0 = te;
    }
    free(tmp);
}

static void bytes_k(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const qblob *b = blob;
    kvc_quant_cfg q = {b->bits, b->group, 1}; /* 11 per word: KVmix's 3-bit codes */
    kvc_quant_k_bytes(&q, b->dim, b->n, payload, meta);
}

static void free_q(const kvc_codec *c, void *blob) { kvc_blob_free(blob); }

const kvc_codec_ops kvc_codec_quant_k = {
    .name = "quant_k",
    .granule = 32,
    .encode = encode_k,
    .count = count_q,
    .qk = qk_k,
    .decode = decode_k,
    .bytes = bytes_k,
    .free = free_q,
};

/* ---- values: per token, groups of `group` channels --------------------------- */

static int v_channels(const qblob *b, int cg) {
    int cw = b->dim - cg * b->group;
    return cw > b->group ? b->group : cw;
}

static size_t v_region_bytes(int bits, int n, int cw) {
    return (size_t)n * 4 + (size_t)n * 4 * kvc_quant_words(bits, cw);
}

/* Rows [row0, row0+rows) of channel group cg. */
static kvc_qtile v_tile(const qblob *b, int cg, int row0, int rows) {
    const uint8_t *base = b->data;
    for (int i = 0; i < cg; i++) base += v_region_bytes(b->bits, b->n, v_channels(b, i));
    int cw = v_channels(b, cg), wpr = kvc_quant_words(b->bits, cw);
    kvc_qtile v = {(const kvc_f16 *)base + row0, (const kvc_f16 *)(base + (size_t)b->n * 2) + row0,
                   (const uint32_t *)(base + (size_t)b->n * 4) + (size_t)row0 * wpr, rows, cw,
                   b->bits};
    return v;
}

void kvc_quant_v_bytes(const kvc_quant_cfg *cfg, int dim, int n, uint64_t *payload, uint64_t *meta) {
    uint64_t words = 0;
    int groups = 0;
    for (int c0 = 0; c0 < dim; c0 += cfg->group, groups++) {
        int cw = dim - c0 < cfg->group ? dim - c0 : cfg->group;
        words += (uint64_t)kvc_quant_words(cfg->bits, cw);
    }
    *payload = words * 4 * (uint64_t)n;
    *meta = (uint64_t)groups * 4 * (uint64_t)n + HEADER_BYTES;
}

static kvc_status encode_v(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    const kvc_quant_cfg *q = cfg_of(c);
    KVC_TRY(kvc_quant_cfg_check(q));
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "quant_v: negative token count %d", n);
    uint64_t payload, meta;
    kvc_quant_v_bytes(q, c->dim, n, &payload, &meta);
    qblob *b = kvc_blob_alloc(payload + meta);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "quant_v: blob of %d tokens", n);
    b->n = n;
    b->bits = q->bits;
    b->group = q->group;
    b->dim = c->dim;
    b->pad = 0;
    b->n_tiles = (c->dim + q->group - 1) / q->group;
    for (int cg = 0; cg < b->n_tiles; cg++) {
        kvc_qtile v = v_tile(b, cg, 0, n);
        /* row = token (stride ld), values = the group's channels (stride 1) */
        kvc_quant_encode(x + (size_t)cg * q->group, ld, 1, n, v.n, q->bits, (kvc_f16 *)v.mins,
                         (kvc_f16 *)v.scales, (uint32_t *)v.words);
    }
    *blob = b;
    return KVC_OK;
}

static void pv_v(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                 int end, float *o, int ldo) {
    const qblob *b = blob;
    kvc_quant_wsum_fn wsum = kvc_quant_wsum_k;
    if (end <= begin) return;
    for (int cg = 0; cg < b->n_tiles; cg++) {
        kvc_qtile v = v_tile(b, cg, begin, end - begin);
        wsum(&v, p, ldp, G, o + (size_t)cg * b->group, ldo);
    }
}

static void decode_v(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    const qblob *b = blob;
    if (end <= begin) return;
    for (int cg = 0; cg < b->n_tiles; cg++) {
        kvc_qtile v = v_tile(b, cg, begin, end - begin);
        kvc_quant_decode(&v, x + (size_t)cg * b->group, ld);
    }
}

static void bytes_v(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const qblob *b = blob;
    kvc_quant_cfg q = {b->bits, b->group, 1}; /* 11 per word: KVmix's 3-bit codes */
    kvc_quant_v_bytes(&q, b->dim, b->n, payload, meta);
}

const kvc_codec_ops kvc_codec_quant_v = {
    .name = "quant_v",
    .granule = 1,
    .encode = encode_v,
    .count = count_q,
    .pv = pv_v,
    .decode = decode_v,
    .bytes = bytes_v,
    .free = free_q,
};
