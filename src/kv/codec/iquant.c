/* The integer-kernel quant codecs "iq_k" / "iq_v" (layouts and math in
 * iquant.h): encoding straight into the integer layouts through the quant
 * codec's row math (kvc_quant_params, kvc_quant_code: the codes, mins and
 * scales equal quant_k / quant_v's); qk / pv walk the requested token
 * ranges tile by tile and call the active kernels (kvc_iq_k). Also the scalar
 * reference kernels every SIMD variant is tested against. */
#include "kv/codec/iquant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kv/blob_arena.h"

enum { HEADER = 64, MAX_DIM = KVC_IQ_MAX_DIM };

typedef struct iqblob {
    int32_t n, bits, group, dim;
    int32_t n_tiles; /* K: tiles of `group` tokens; V: channel groups */
    int32_t npad;    /* V: tokens rounded up to KVC_IQ_VBLOCK */
    int64_t stats;   /* K: offset of the per-tile largest scales in data (a view per tile reads it) */
    uint8_t pad_[HEADER - 32];
    uint8_t data[]; /* 64-byte aligned */
} iqblob;

static const kvc_quant_cfg *cfg_of(const kvc_codec *c) { return (const kvc_quant_cfg *)c->cfg; }
static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

int kvc_iq_supports(const kvc_quant_cfg *cfg, int dim) {
    return cfg && cfg->bits >= 1 && cfg->bits <= 4 && cfg->group % 16 == 0 &&
           cfg->group > 0 && cfg->group <= KVC_QUANT_MAX_N && dim > 0 && dim % 16 == 0 &&
           dim <= MAX_DIM;
}

void kvc_quant_codecs(const kvc_quant_cfg *cfg, int dim, kvc_codec *k, kvc_codec *v) {
    int iq = kvc_iq_supports(cfg, dim);
    *k = (kvc_codec){.ops = iq ? &kvc_codec_iq_k : &kvc_codec_quant_k, .dim = dim, .cfg = cfg};
    *v = (kvc_codec){.ops = iq ? &kvc_codec_iq_v : &kvc_codec_quant_v, .dim = dim, .cfg = cfg};
}

static kvc_status check(const kvc_codec *c, int n, const char *who) {
    KVC_TRY(kvc_quant_cfg_check(cfg_of(c)));
    KVC_CHECK(kvc_iq_supports(cfg_of(c), c->dim), KVC_ERR_ARG,
              "%s: bits %d, group %d, dim %d not supported (bits 1-4, group and dim multiples of 16, dim <= %d)",
              who, cfg_of(c)->bits, cfg_of(c)->group, c->dim, MAX_DIM);
    KVC_CHECK(n >= 0, KVC_ERR_ARG, "%s: negative token count %d", who, n);
    return KVC_OK;
}

static iqblob *blob_alloc(size_t data_bytes, int n, int bits, int group, int dim) {
    iqblob *b = kvc_blob_calloc(round64(HEADER + data_bytes));
    if (!b) return NULL;
    b->n = n, b->bits = bits, b->group = group, b->dim = dim;
    return b;
}

/* A code row of up to MAX_DIM values (one key token's channels, padded with
 * zero codes to whole words; one value token's channels) as bytes. */
typedef struct code_row {
    uint8_t c[MAX_DIM + 32];
} code_row;

/* Word k of a key token from its channel codes: byte b, bit field j is channel
 * 4j + b of the word's cpw = 32/bits channels, i.e. the OR over j of the
 * little-endian 32-bit loads of codes [4j, 4j + 4) shifted by bits*j (each
 * code < 2^bits, so the fields do not overlap). */
static uint32_t k_word(const uint8_t *c, int bits) {
    uint32_t w = 0;
    for (int j = 0; j < 8 / bits; j++) {
        uint32_t four;
        memcpy(&four, c + 4 * j, 4);
        w |= four << (bits * j);
    }
    return w;
}

/* All key words of one token from its channel codes (padded with zeros to
 * whole words): one plane, or for 3 bits the low two bits' words then the
 * high bit's. */
static void k_words(const uint8_t *codes, int bits, int dim, uint32_t *out) {
    if (bits != 3) {
        for (int w = 0; w < kvc_iq_kwords(bits, dim); w++)
            out[(size_t)w * KVC_IQ_KBLOCK] = k_word(codes + w * kvc_iq_cpw(bits), bits);
        return;
    }
    code_row lo = {{0}}, hi = {{0}};
    for (int c = 0; c < dim; c++) lo.c[c] = codes[c] & 3, hi.c[c] = codes[c] >> 2;
    int kw2 = kvc_iq_plane_kwords(2, dim);
    for (int w = 0; w < kw2; w++) out[(size_t)w * KVC_IQ_KBLOCK] = k_word(lo.c + w * 16, 2);
    for (int w = 0; w < kvc_iq_plane_kwords(1, dim); w++)
        out[(size_t)(kw2 + w) * KVC_IQ_KBLOCK] = k_word(hi.c + w * 32, 1);
}

static int count_iq(const kvc_codec *c, const void *blob) { return ((const iqblob *)blob)->n; }
static void free_iq(const kvc_codec *c, void *blob) { kvc_blob_free(blob); }

/* ---- keys ---------------------------------------------------------------------- */

static size_t k_tile_bytes(int bits, int dim, int tn) {
    int nb = (tn + KVC_IQ_KBLOCK - 1) / KVC_IQ_KBLOCK;
    return (size_t)dim * 4 + (size_t)nb * kvc_iq_kwords(bits, dim) * KVC_IQ_KBLOCK * 4;
}

/* The tiles, then (64-byte aligned, as every tile's size is a multiple of 64)
 * two floats per tile: its largest scale and the reciprocal. */
static size_t k_tiles_bytes(int bits, int group, int dim, int n) {
    int full = n / group, rest = n % group;
    return (size_t)full * k_tile_bytes(bits, dim, group) + (rest ? k_tile_bytes(bits, dim, rest) : 0);
}

static size_t k_data_bytes(int bits, int group, int dim, int n) {
    return k_tiles_bytes(bits, group, dim, n) + (size_t)(n + group - 1) / group * 2 * sizeof(float);
}

static float *k_stats(const iqblob *b) { return (float *)(b->data + b->stats); }

static kvc_iq_ktile k_tile(const iqblob *b, int t) {
    const uint8_t *base = b->data + (size_t)t * k_tile_bytes(b->bits, b->dim, b->group);
    const float *st = k_stats(b) + 2 * (size_t)t;
    int tn = b->n - t * b->group;
    if (tn > b->group) tn = b->group;
    return (kvc_iq_ktile){(const kvc_f16 *)base, (const kvc_f16 *)(base + (size_t)b->dim * 2),
                          (const uint32_t *)(base + (size_t)b->dim * 4), tn, b->dim, b->bits, st[0], st[1]};
}

kvc_iq_ktile kvc_iq_ktile_of(const void *blob, int t) { return k_tile(blob, t); }

/* Keys are quantized per channel over the tile's tokens: one pass over the
 * tokens for each channel's min and max (in token order, as the row encoder
 * meets them: it decides the sign of a zero min), the f16 parameters per
 * channel, then each token's codes packed straight into its words. */
static void encode_k_tile(const float *x, int ld, const kvc_iq_ktile *t, int kvmix3, float *stats) {
    int dim = t->dim, bits = t->bits, kw = kvc_iq_kwords(bits, dim);
    float mn[MAX_DIM], mx[MAX_DIM], minf[MAX_DIM], scf[MAX_DIM];
    for (int c = 0; c < dim; c++) mn[c] = INFINITY, mx[c] = -INFINITY;
    for (int j = 0; j < t->n; j++) {
        const float *row = x + (size_t)j * ld;
        for (int c = 0; c < dim; c++) {
            float v = row[c];
            mn[c] = v < mn[c] ? v : mn[c]; /* NaN compares false: ignored */
            mx[c] = v > mx[c] ? v : mx[c];
        }
    }
    kvc_f16 *mins = (kvc_f16 *)t->mins, *scales = (kvc_f16 *)t->scales;
    float smax = 0.0f;
    for (int c = 0; c < dim; c++) {
        kvc_quant_params(mn[c], mx[c], bits, &mins[c], &scales[c]);
        minf[c] = kvc_f16_to_f32(mins[c]);
        scf[c] = kvc_f16_to_f32(scales[c]);
        if (!(scf[c] <= smax)) smax = scf[c]; /* as kvc_iq_tile_smax */
    }
    stats[0] = smax;
    stats[1] = 1.0f / smax;
    uint32_t *codes = (uint32_t *)t->codes;
    code_row cr = {{0}}; /* channels dim.. stay 0: the last word's padding */
    for (int j = 0; j < t->n; j++) {
        const float *row = x + (size_t)j * ld;
        /* token j is value j of each channel's row: with kvmix3,
         * kvc_quant_qmax clamps 3-bit codes in the slots where KVmix's
         * 11-per-word packing has 2 bits, so the codes equal the quant
         * codecs' */
        int qm = kvmix3 ? kvc_quant_qmax(bits, j) : (1 << bits) - 1;
        for (int c = 0; c < dim; c++) cr.c[c] = (uint8_t)kvc_quant_code(row[c], minf[c], scf[c], qm);
        k_words(cr.c, bits, dim, codes + (size_t)(j / KVC_IQ_KBLOCK) * kw * KVC_IQ_KBLOCK + j % KVC_IQ_KBLOCK);
    }
}

static kvc_status encode_k(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    KVC_TRY(check(c, n, "iq_k"));
    const kvc_quant_cfg *q = cfg_of(c);
    iqblob *b = blob_alloc(k_data_bytes(q->bits, q->group, c->dim, n), n, q->bits, q->group, c->dim);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "iq_k: blob of %d tokens", n);
    b->n_tiles = (n + q->group - 1) / q->group;
    b->stats = (int64_t)k_tiles_bytes(q->bits, q->group, c->dim, n);
    for (int t = 0; t < b->n_tiles; t++) {
        kvc_iq_ktile v = k_tile(b, t);
        encode_k_tile(x + (size_t)t * q->group * ld, ld, &v, q->kvmix3, k_stats(b) + 2 * (size_t)t);
    }
    *blob = b;
    return KVC_OK;
}

enum { QK_TILES = 16 }; /* tiles per kernel call: the query's largest element is found once per call */

static void qk_k(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                 int end, float *s, int lds) {
    const iqblob *b = blob;
    kvc_iq_ktile tiles[QK_TILES];
    for (int t0 = begin; t0 < end;) {
        int first = t0 / b->group, nt = 0, tb = first * b->group, te = t0;
        while (nt < QK_TILES && te < end) {
            tiles[nt] = k_tile(b, first + nt);
            te = tb + nt * b->group + tiles[nt].n;
            nt++;
        }
        if (te > end) te = end;
        kvc_iq_k.qk(tiles, nt, q, ldq, G, t0 - tb, te - tb, s + (t0 - begin), lds);
        t0 = te;
    }
}

/* The channel codes of key word w (the inverse of k_word). */
static void k_unword(uint32_t w, int bits, uint8_t *c) {
    uint32_t mask = ((1u << bits) - 1) * 0x01010101u;
    for (int j = 0; j < 8 / bits; j++) {
        uint32_t four = (w >> (bits * j)) & mask;
        memcpy(c + 4 * j, &four, 4);
    }
}

/* code * scale + min per value (the quant codecs' decode, same rounding: no
 * fused multiply-add), 16 values at a time (dims and groups are multiples of
 * 16, so the fixed-length loop vectorizes with no tail). */
static void dequant16(const uint8_t *code, const float *sc, const float *mn, float *out) {
    for (int i = 0; i < 16; i++) out[i] = (float)code[i] * sc[i] + mn[i];
}

/* Prefill decodes the whole past once per query tile (kv/prefill.c), so this
 * runs over every cached token many times: parameters widened once per
 * tile, codes unpacked a word at a time. */
static void decode_k(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    const iqblob *b = blob;
    int dim = b->dim, bits = b->bits, lb = kvc_iq_lo_bits(bits), kwl = kvc_iq_plane_kwords(lb, dim);
    int kw = kvc_iq_kwords(bits, dim);
    float sc[MAX_DIM], mn[MAX_DIM];
    code_row cr, hi;
    kvc_iq_ktile v = {0};
    for (int j = begin, cur = -1; j < end; j++) {
        int ti = j / b->group, jt = j % b->group;
        if (ti != cur) {
            v = k_tile(b, ti);
            for (int d = 0; d < dim; d++) sc[d] = kvc_f16_to_f32(v.scales[d]), mn[d] = kvc_f16_to_f32(v.mins[d]);
            cur = ti;
        }
        const uint32_t *wp = v.codes + (size_t)(jt / KVC_IQ_KBLOCK) * kw * KVC_IQ_KBLOCK + jt % KVC_IQ_KBLOCK;
        for (int w = 0; w < kwl; w++) k_unword(wp[(size_t)w * KVC_IQ_KBLOCK], lb, cr.c + w * kvc_iq_cpw(lb));
        if (bits == 3) {
            for (int w = kwl; w < kw; w++) k_unword(wp[(size_t)w * KVC_IQ_KBLOCK], 1, hi.c + (w - kwl) * 32);
            for (int d = 0; d < dim; d++) cr.c[d] += (uint8_t)(4 * hi.c[d]);
        }
        float *out = x + (size_t)(j - begin) * ld;
        for (int d = 0; d < dim; d += 16) dequant16(cr.c + d, sc + d, mn + d, out + d);
    }
}

static void bytes_k(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const iqblob *b = blob;
    uint64_t all = HEADER + k_data_bytes(b->bits, b->group, b->dim, b->n);
    *meta = HEADER + (uint64_t)b->n_tiles * (b->dim * 4 + 2 * sizeof(float));
    *payload = all - *meta;
}

const kvc_codec_ops kvc_codec_iq_k = {
    .name = "iq_k",
    .granule = 32,
    .encode = encode_k,
    .count = count_iq,
    .qk = qk_k,
    .decode = decode_k,
    .bytes = bytes_k,
    .free = free_iq,
};

/* ---- values --------------------------------------------------------------------- */

static int v_npad(int n) { return (n + KVC_IQ_VBLOCK - 1) / KVC_IQ_VBLOCK * KVC_IQ_VBLOCK; }
static size_t v_param_bytes(int ng, int npad) { return round64((size_t)ng * npad * 4); }
static size_t v_code_bytes(int bits, int dim, int npad) { return (size_t)npad / KVC_IQ_VBLOCK * bits * dim * 4; }

static kvc_iq_vblob v_view(const iqblob *b) {
    size_t plane = (size_t)b->n_tiles * b->npad;
    return (kvc_iq_vblob){(const kvc_f16 *)b->data, (const kvc_f16 *)b->data + plane,
                          (const uint32_t *)(b->data + v_param_bytes(b->n_tiles, b->npad)),
                          b->n, b->npad, b->dim, b->group, b->bits};
}

kvc_iq_vblob kvc_iq_vblob_of(const void *blob) { return v_view(blob); }

static kvc_status encode_v(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    KVC_TRY(check(c, n, "iq_v"));
    const kvc_quant_cfg *q = cfg_of(c);
    int ng = (c->dim + q->group - 1) / q->group, npad = v_npad(n);
    iqblob *b = blob_alloc(v_param_bytes(ng, npad) + v_code_bytes(q->bits, c->dim, npad), n, q->bits,
                           q->group, c->dim);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "iq_v: blob of %d tokens", n);
    b->n_tiles = ng;
    b->npad = npad;
    kvc_iq_vblob v = v_view(b);
    int lb = kvc_iq_lo_bits(q->bits);
    uint32_t *codes = (uint32_t *)v.codes;
    kvc_f16 *mins = (kvc_f16 *)v.mins, *scales = (kvc_f16 *)v.scales;
    code_row cr;
    /* Values are quantized per token and channel group; token r of a block of
     * tpw tokens sits in byte r % 4, bit field r / 4 of its channels' words. */
    for (int t = 0; t < n; t++) {
        const float *row = x + (size_t)t * ld;
        for (int g = 0; g < ng; g++) {
            int c0 = g * q->group, c1 = c->dim - c0 < q->group ? c->dim : c0 + q->group;
            float mn = INFINITY, mx = -INFINITY;
            for (int j = c0; j < c1; j++) {
                mn = row[j] < mn ? row[j] : mn; /* NaN compares false: ignored */
                mx = row[j] > mx ? row[j] : mx;
            }
            size_t pi = (size_t)g * npad + t;
            kvc_quant_params(mn, mx, q->bits, &mins[pi], &scales[pi]);
            float minf = kvc_f16_to_f32(mins[pi]), scf = kvc_f16_to_f32(scales[pi]);
            /* channel j is value j - c0 of the group's row (kvmix3's slots
             * as in the keys) */
            for (int j = c0; j < c1; j++)
                cr.c[j] = (uint8_t)kvc_quant_code(row[j], minf, scf,
                                                  q->kvmix3 ? kvc_quant_qmax(q->bits, j - c0) : (1 << q->bits) - 1);
        }
        int shift = kvc_iq_vshift(t, lb), lmask = (1 << lb) - 1;
        uint32_t *out = codes + kvc_iq_vrow(q->bits, t, lb, 0) * c->dim;
        for (int j = 0; j < c->dim; j++) out[j] |= (uint32_t)(cr.c[j] & lmask) << shift;
        if (q->bits == 3) {
            int hs = kvc_iq_vshift(t, 1);
            uint32_t *hout = codes + kvc_iq_vrow(3, t, 1, 2) * c->dim;
            for (int j = 0; j < c->dim; j++) hout[j] |= (uint32_t)(cr.c[j] >> 2) << hs;
        }
    }
    *blob = b;
    return KVC_OK;
}

static void pv_v(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                 int end, float *o, int ldo) {
    kvc_iq_vblob v = v_view(blob);
    if (end > begin) kvc_iq_k.pv(&v, p, ldp, G, begin, end, o, ldo);
}

static void decode_v(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    kvc_iq_vblob v = v_view(blob);
    int lb = kvc_iq_lo_bits(v.bits);
    uint32_t mask = (1u << lb) - 1;
    for (int j = begin; j < end; j++) {
        int shift = kvc_iq_vshift(j, lb), hs = kvc_iq_vshift(j, 1);
        const uint32_t *row = v.codes + kvc_iq_vrow(v.bits, j, lb, 0) * v.dim;
        const uint32_t *hrow = v.bits == 3 ? v.codes + kvc_iq_vrow(3, j, 1, 2) * v.dim : NULL;
        float *out = x + (size_t)(j - begin) * ld;
        for (int d0 = 0; d0 < v.dim; d0 += 16) { /* 16 channels lie in one group */
            size_t pi = (size_t)(d0 / v.group) * v.npad + j;
            float s = kvc_f16_to_f32(v.scales[pi]), m = kvc_f16_to_f32(v.mins[pi]);
            for (int i = 0; i < 16; i++) {
                uint32_t code = (row[d0 + i] >> shift) & mask;
                if (hrow) code += 4 * ((hrow[d0 + i] >> hs) & 1u);
                out[d0 + i] = (float)code * s + m;
            }
        }
    }
}

static void bytes_v(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    const iqblob *b = blob;
    *payload = v_code_bytes(b->bits, b->dim, b->npad);
    *meta = HEADER + v_param_bytes(b->n_tiles, b->npad);
}

const kvc_codec_ops kvc_codec_iq_v = {
    .name = "iq_v",
    .granule = KVC_IQ_VBLOCK,
    .encode = encode_v,
    .count = count_iq,
    .pv = pv_v,
    .decode = decode_v,
    .bytes = bytes_v,
    .free = free_iq,
};

/* ---- scalar reference kernels ----------------------------------------------------- */

float kvc_iq_qmax(const float *q, int dim) {
    float m = 0.0f;
    for (int c = 0; c < dim; c++) {
        float a = fabsf(q[c]);
        if (!(a <= m)) m = a; /* NaN propagates: the query is then unusable */
    }
    return m;
}

float kvc_iq_tile_smax(const kvc_f16 *scales, int dim) {
    float smax = 0.0f;
    for (int c = 0; c < dim; c++) {
        float sc = kvc_f16_to_f32(scales[c]);
        if (!(sc <= smax)) smax = sc;
    }
    return smax;
}

float kvc_iq_query_ref(const float *q, float qmax, const kvc_f16 *scales, int dim, int bits, int8_t *hi,
                       int8_t *lo) {
    float smax = kvc_iq_tile_smax(scales, dim);
    size_t width = ((size_t)dim + 31) / 32 * 32; /* padded to the widest word (1 bit: 32 channels) */
    memset(hi, 0, width);
    memset(lo, 0, width);
    if (!(qmax > 0.0f) || !isfinite(qmax) || !(smax > 0.0f) || !isfinite(smax)) return 0.0f;
    const long qlim = kvc_iq_query_max(bits);
    float qn = (float)qlim / qmax, inv_s = 1.0f / smax;
    for (int c = 0; c < dim; c++) {
        long v = lrintf((q[c] * qn) * (kvc_f16_to_f32(scales[c]) * inv_s));
        v = v > qlim ? qlim : v < -qlim ? -qlim : v;
        long h = (v + 128 + 256 * 256) / 256 - 256; /* floor((v + 128) / 256) */
        hi[c] = (int8_t)h;
        lo[c] = (int8_t)(v - 256 * h);
    }
    return qmax * (1.0f / (float)qlim) * smax;
}

static void qk_ref(const kvc_iq_ktile *t, int nt, const float *q, int ldq, int G, int j0, int j1, float *s,
                   int lds) {
    int8_t hi[MAX_DIM + 64], lo[MAX_DIM + 64];
    int group = t[0].n;
    for (int h = 0; h < G; h++) {
        const float *qh = q + (size_t)h * ldq;
        float qmax = kvc_iq_qmax(qh, t[0].dim);
        for (int i = 0; i < nt; i++) {
            int tb = i * group, a = j0 > tb ? j0 : tb, e = j1 < tb + t[i].n ? j1 : tb + t[i].n;
            if (a >= e) continue;
            float alpha = kvc_iq_query_ref(qh, qmax, t[i].scales, t[i].dim, t[i].bits, hi, lo);
            float cterm = 0.0f;
            for (int c = 0; c < t[i].dim; c++) cterm += qh[c] * kvc_f16_to_f32(t[i].mins[c]);
            for (int j = a; j < e; j++) {
                int32_t dh = 0, dl = 0;
                for (int c = 0; c < t[i].dim; c++) {
                    int code = kvc_iq_kcode(&t[i], j - tb, c);
                    dh += hi[c] * code;
                    dl += lo[c] * code;
                }
                int32_t dot = dh * 256 + dl;
                s[(size_t)h * lds + j - j0] = fmaf(alpha, (float)dot, cterm);
            }
        }
    }
}

static void pv_ref(const kvc_iq_vblob *v, const float *p, int ldp, int G, int j0, int j1, float *o,
                   int ldo) {
    int ng = (v->dim + v->group - 1) / v->group;
    for (int h = 0; h < G; h++) {
        const float *ph = p + (size_t)h * ldp - j0; /* ph[j]: weight of token j */
        float *oh = o + (size_t)h * ldo;
        for (int g = 0; g < ng; g++) {
            int c0 = g * v->group, c1 = c0 + v->group < v->dim ? c0 + v->group : v->dim;
            const kvc_f16 *sc = v->scales + (size_t)g * v->npad, *mn = v->mins + (size_t)g * v->npad;
            float mterm = 0.0f;
            for (int b0 = j0 - j0 % KVC_IQ_VBLOCK; b0 < j1; b0 += KVC_IQ_VBLOCK) {
                int lo = b0 > j0 ? b0 : j0, hi = b0 + KVC_IQ_VBLOCK < j1 ? b0 + KVC_IQ_VBLOCK : j1;
                float w[KVC_IQ_VBLOCK], wmax = 0.0f;
                for (int j = lo; j < hi; j++) {
                    w[j - lo] = ph[j] * kvc_f16_to_f32(sc[j]);
                    mterm += ph[j] * kvc_f16_to_f32(mn[j]);
                    if (w[j - lo] > wmax) wmax = w[j - lo];
                }
                if (!(wmax > 0.0f) || !isfinite(wmax)) continue;
                float inv = 255.0f / wmax, beta = wmax * (1.0f / 255.0f);
                int wq[KVC_IQ_VBLOCK];
                for (int j = lo; j < hi; j++) {
                    long q = lrintf(w[j - lo] * inv);
                    wq[j - lo] = (int)(q < 0 ? 0 : q > 255 ? 255 : q);
                }
                for (int c = c0; c < c1; c++) {
                    int32_t acc = 0;
                    for (int j = lo; j < hi; j++) acc += wq[j - lo] * kvc_iq_vcode(v, j, c);
                    oh[c] = fmaf(beta, (float)acc, oh[c]);
                }
            }
            for (int c = c0; c < c1; c++) oh[c] += mterm;
        }
    }
}

const kvc_iq_kernels kvc_iq_ref = {.qk = qk_ref, .pv = pv_ref};
kvc_iq_kernels kvc_iq_k = {.qk = qk_ref, .pv = pv_ref};
