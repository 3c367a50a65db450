/* Codecs "bitmap_quant_k" / "bitmap_quant_v": per-token top-k pruning (the
 * bitmap tiles of bitmap.c) followed by KIVI's asymmetric min/scale
 * quantization of the kept values (the MUSTAFAR paper §4.2.2). Layout and grouping:
 * bitmap_quant.h; byte layout: docs/formats.md "Bitmap tiles". Scalar qk / pv
 * only: the composition is measured for accuracy and size, as in the paper.
 *
 *   blob: header | bits [n][nt] u64 | codes [n][wpt] u32 | mins, scales f16
 *   K: mins/scales [ceil(n/group)][dim]      V: mins/scales [n][ceil(keep/group)]
 * Rounding follows quant.h: min rounded down and scale up to f16, codes to
 * nearest, so every kept value is within scale/2 of its decoded value. */
#include "kv/codec/bitmap_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"
#include "kv/blob_arena.h"
#include "kv/codec/bitmap.h"
#include "kv/codec/quant.h"
#include "kv/codec/prune.h"

typedef struct bq_blob {
    int n, d, keep, nt, bits, group, wpt, gpt; /* gpt: V groups per token */
    int n_scale;                               /* entries of mins (= of scales) */
    uint64_t *bits_;
    uint32_t *codes;
    kvc_f16 *mins, *scales;
    size_t alloc;
} bq_blob;

kvc_status kvc_bitmap_quant_cfg_check(const kvc_bitmap_quant_cfg *cfg, int dim) {
    KVC_CHECK(cfg != NULL, KVC_ERR_ARG, "bitmap_quant codec: missing parameters");
    KVC_CHECK(cfg->bits == 1 || cfg->bits == 2 || cfg->bits == 4, KVC_ERR_ARG,
              "bitmap_quant codec: bits %d not supported with pruning (1, 2 or 4)", cfg->bits);
    KVC_CHECK(cfg->group >= 1 && cfg->group <= KVC_QUANT_MAX_N, KVC_ERR_ARG,
              "bitmap_quant codec: group %d outside [1, %d]", cfg->group, KVC_QUANT_MAX_N);
    KVC_CHECK(dim >= 1 && dim <= KVC_BITMAP_MAX_D, KVC_ERR_ARG,
              "bitmap_quant codec: dim %d outside [1, %d]", dim, KVC_BITMAP_MAX_D);
    KVC_CHECK(cfg->keep >= 0 && cfg->keep <= dim, KVC_ERR_ARG,
              "bitmap_quant codec: keep %d outside [0, %d]", cfg->keep, dim);
    return KVC_OK;
}

static kvc_status bq_alloc(const kvc_bitmap_quant_cfg *cfg, int dim, int n, int is_k, bq_blob **out) {
    KVC_TRY(kvc_bitmap_quant_cfg_check(cfg, dim));
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "bitmap_quant codec: %d tokens", n);
    int nt = kvc_bitmap_tiles(dim), wpt = kvc_quant_words(cfg->bits, cfg->keep);
    int gpt = (cfg->keep + cfg->group - 1) / cfg->group;
    size_t n_scale = is_k ? (size_t)((n + cfg->group - 1) / cfg->group) * dim : (size_t)n * gpt;
    size_t hdr = (sizeof(bq_blob) + 63) & ~(size_t)63;
    size_t b_bits = (size_t)n * nt * 8, b_codes = (size_t)n * wpt * 4, b_sc = n_scale * 2;
    size_t alloc = hdr + b_bits + b_codes + 2 * b_sc;
    char *mem = kvc_blob_calloc(alloc);
    if (!mem) return kvc_fail(KVC_ERR_NOMEM, "bitmap_quant blob of %d tokens (%zu bytes)", n, alloc);
    bq_blob *b = (bq_blob *)mem;
    *b = (bq_blob){.n = n, .d = dim, .keep = cfg->keep, .nt = nt, .bits = cfg->bits,
                   .group = cfg->group, .wpt = wpt, .gpt = gpt, .n_scale = (int)n_scale,
                   .alloc = alloc};
    b->bits_ = (uint64_t *)(mem + hdr);
    b->codes = (uint32_t *)(mem + hdr + b_bits);
    b->mins = (kvc_f16 *)(mem + hdr + b_bits + b_codes);
    b->scales = b->mins + n_scale;
    *out = b;
    return KVC_OK;
}

/* min (rounded down) and scale (rounded up) of values in [lo, hi] for `bits`. */
static void min_scale(float lo, float hi, int bits, kvc_f16 *mn, kvc_f16 *sc) {
    if (!(lo <= hi)) lo = hi = 0.0f; /* no values (or NaN) */
    *mn = kvc_f16_round_down(lo);
    float m = kvc_f16_to_f32(*mn);
    float range = hi - m;
    int qmax = (1 << bits) - 1;
    *sc = range > 0.0f ? kvc_f16_round_up(range / (float)qmax) : 0;
}

static uint8_t code_of(float x, kvc_f16 mn, kvc_f16 sc, int bits) {
    float s = kvc_f16_to_f32(sc);
    if (!(s > 0.0f)) return 0;
    float c = rintf((x - kvc_f16_to_f32(mn)) / s);
    int qmax = (1 << bits) - 1;
    if (!(c >= 0.0f)) return 0; /* also NaN */
    return (uint8_t)(c > (float)qmax ? qmax : (int)c);
}

/* Kept channels of token i in order (returns count). */
static int kept_channels(const bq_blob *b, int i, int *ch) {
    int w = 0;
    for (int t = 0; t < b->nt; t++) {
        uint64_t m = b->bits_[(size_t)i * b->nt + t];
        while (m) {
            ch[w++] = t * 64 + __builtin_ctzll(m);
            m &= m - 1;
        }
    }
    return w;
}

static void prune_masks(bq_blob *b, const float *x, int ld) {
    uint64_t mask[KVC_BITMAP_MAX_D / 64];
    for (int i = 0; i < b->n; i++) {
        kvc_prune_topk(x + (size_t)i * ld, b->d, b->keep, mask);
        int nt = b->nt;
        for (int t = 0; t < nt; t++) b->bits_[(size_t)i * nt + t] = mask[t];
        if (b->d & 63) b->bits_[(size_t)i * nt + nt - 1] &= (1ull << (b->d & 63)) - 1;
    }
}

static kvc_status bq_encode_k(const kvc_codec *c, const float *x, int n, int ld, void **out) {
    bq_blob *b;
    *out = NULL;
    KVC_TRY(bq_alloc(c->cfg, c->dim, n, 1, &b));
    prune_masks(b, x, ld);
    int d = b->d, ch[KVC_BITMAP_MAX_D];
    float lo[KVC_BITMAP_MAX_D], hi[KVC_BITMAP_MAX_D];
    uint8_t codes[KVC_BITMAP_MAX_D];
    for (int g0 = 0, gi = 0; g0 < n; g0 += b->group, gi++) {
        int g1 = g0 + b->group < n ? g0 + b->group : n;
        for (int j = 0; j < d; j++) lo[j] = INFINITY, hi[j] = -INFINITY;
        for (int i = g0; i < g1; i++) {
            int w = kept_channels(b, i, ch);
            for (int r = 0; r < w; r++) {
                float v = x[(size_t)i * ld + ch[r]];
                if (v < lo[ch[r]]) lo[ch[r]] = v;
                if (v > hi[ch[r]]) hi[ch[r]] = v;
            }
        }
        kvc_f16 *mn = b->mins + (size_t)gi * d, *sc = b->scales + (size_t)gi * d;
        for (int j = 0; j < d; j++) min_scale(lo[j], hi[j], b->bits, &mn[j], &sc[j]);
        for (int i = g0; i < g1; i++) {
            int w = kept_channels(b, i, ch);
            for (int r = 0; r < w; r++)
                codes[r] = code_of(x[(size_t)i * ld + ch[r]], mn[ch[r]], sc[ch[r]], b->bits);
            kvc_quant_pack(b->bits, codes, w, b->codes + (size_t)i * b->wpt);
        }
    }
    *out = b;
    return KVC_OK;
}

static kvc_status bq_encode_v(const kvc_codec *c, const float *x, int n, int ld, void **out) {
    bq_blob *b;
    *out = NULL;
    KVC_TRY(bq_alloc(c->cfg, c->dim, n, 0, &b));
    prune_masks(b, x, ld);
    int ch[KVC_BITMAP_MAX_D];
    uint8_t codes[KVC_BITMAP_MAX_D];
    for (int i = 0; i < n; i++) {
        int w = kept_channels(b, i, ch);
        for (int g = 0; g < b->gpt; g++) {
            int r0 = g * b->group, r1 = r0 + b->group < w ? r0 + b->group : w;
            float lo = INFINITY, hi = -INFINITY;
            for (int r = r0; r < r1; r++) {
                float v = x[(size_t)i * ld + ch[r]];
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
            kvc_f16 *mn = b->mins + (size_t)i * b->gpt + g, *sc = b->scales + (size_t)i * b->gpt + g;
            min_scale(lo, hi, b->bits, mn, sc);
            for (int r = r0; r < r1; r++) codes[r] = code_of(x[(size_t)i * ld + ch[r]], *mn, *sc, b->bits);
        }
        kvc_quant_pack(b->bits, codes, w, b->codes + (size_t)i * b->wpt);
    }
    *out = b;
    return KVC_OK;
}

/* Token i decoded sparsely: its kept channels and their values; returns the count. */
static int token_values(const bq_blob *b, int is_k, int i, int *ch, float *val) {
    uint8_t codes[KVC_BITMAP_MAX_D];
    int w = kept_channels(b, i, ch);
    kvc_quant_unpack(b->bits, b->codes + (size_t)i * b->wpt, w, codes);
    for (int r = 0; r < w; r++) {
        size_t si = is_k ? (size_t)(i / b->group) * b->d + ch[r] : (size_t)i * b->gpt + r / b->group;
        val[r] = (float)codes[r] * kvc_f16_to_f32(b->scales[si]) + kvc_f16_to_f32(b->mins[si]);
    }
    return w;
}

static void bq_qk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                  int end, float *s, int lds) {
    const bq_blob *b = blob;
    int is_k = c->ops == &kvc_codec_bitmap_quant_k, ch[KVC_BITMAP_MAX_D];
    float val[KVC_BITMAP_MAX_D];
    for (int i = begin, j = 0; i < end; i++, j++) {
        int w = token_values(b, is_k, i, ch, val);
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * ldq;
            float acc = 0.0f;
            for (int e = 0; e < w; e++) acc += qg[ch[e]] * val[e];
            s[(size_t)g * lds + j] = acc;
        }
    }
}

static void bq_pv(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                  int end, float *o, int ldo) {
    const bq_blob *b = blob;
    int is_k = c->ops == &kvc_codec_bitmap_quant_k, ch[KVC_BITMAP_MAX_D];
    float val[KVC_BITMAP_MAX_D];
    for (int i = begin, j = 0; i < end; i++, j++) {
        int w = token_values(b, is_k, i, ch, val);
        for (int g = 0; g < G; g++) {
            float pg = p[(size_t)g * ldp + j];
            if (pg == 0.0f) continue;
            float *og = o + (size_t)g * ldo;
            for (int e = 0; e < w; e++) og[ch[e]] += pg * val[e];
        }
    }
}

static void bq_decode(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    const bq_blob *b = blob;
    int is_k = c->ops == &kvc_codec_bitmap_quant_k, ch[KVC_BITMAP_MAX_D];
    float val[KVC_BITMAP_MAX_D];
    for (int i = begin; i < end; i++) {
        float *xi = x + (size_t)(i - begin) * ld;
        memset(xi, 0, (size_t)b->d * sizeof(float));
        int w = token_values(b, is_k, i, ch, val);
        for (int e = 0; e < w; e++) xi[ch[e]] = val[e];
    }
}

static int bq_count(const kvc_codec *c, const void *blob) {
    (void)c;
    return ((const bq_blob *)blob)->n;
}

/* payload: code words; meta: bitmaps, mins, scales, header. */
static void bq_bytes(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    (void)c;
    const bq_blob *b = blob;
    *payload = (uint64_t)b->n * b->wpt * 4;
    *meta = b->alloc - *payload;
}

static void bq_free(const kvc_codec *c, void *blob) {
    (void)c;
    kvc_blob_free(blob);
}

const kvc_codec_ops kvc_codec_bitmap_quant_k = {
    .name = "bitmap_quant_k",
    .granule = 1,
    .encode = bq_encode_k,
    .count = bq_count,
    .qk = bq_qk,
    .pv = bq_pv,
    .decode = bq_decode,
    .bytes = bq_bytes,
    .free = bq_free,
};

const kvc_codec_ops kvc_codec_bitmap_quant_v = {
    .name = "bitmap_quant_v",
    .granule = 1,
    .encode = bq_encode_v,
    .count = bq_count,
    .qk = bq_qk,
    .pv = bq_pv,
    .decode = bq_decode,
    .bytes = bq_bytes,
    .free = bq_free,
};
