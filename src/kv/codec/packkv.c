/* The PackKV codecs "packkv_k" / "packkv_v" (format and math in packkv.h):
 * token quantization with a relative scale, bit-packing of each block's codes
 * into packs, a blob of independent blocks behind an offset table (appending
 * encodes new blocks after the old ones), optional channel centers per block,
 * decode, and qk / pv that walk the requested token range block by block
 * through the active fused kernels. */
#include "kv/codec/packkv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/status.h"

typedef struct pkblob {
    int32_t n, dim, block, pack, vmajor, center, group;
    int32_t n_blocks, cap_blocks;
    uint32_t *offs;     /* [cap_blocks + 1]: block i is data[offs[i] .. offs[i+1]) */
    uint8_t *centered;  /* [cap_blocks]: 1 if block i stores channel centers */
    uint8_t *data;      /* cap_data + KVC_PK_OVERREAD bytes */
    uint64_t cap_data;
    uint64_t payload;   /* residual bytes of all blocks */
} pkblob;

static const kvc_pk_cfg *cfg_of(const kvc_codec *c) { return (const kvc_pk_cfg *)c->cfg; }

kvc_status kvc_pk_cfg_check(const kvc_pk_cfg *cfg, const char *who) {
    KVC_CHECK(cfg != NULL, KVC_ERR_ARG, "%s: no parameters", who);
    KVC_CHECK(cfg->rel >= KVC_PK_MIN_REL && cfg->rel <= 1.0f, KVC_ERR_ARG,
              "%s: rel=%g out of range (allowed %g..1: codes must fit 8 bits)", who,
              (double)cfg->rel, (double)KVC_PK_MIN_REL);
    KVC_CHECK(cfg->pack == 8 || cfg->pack == 16, KVC_ERR_ARG, "%s: pack=%d (allowed 8 or 16)", who,
              cfg->pack);
    KVC_CHECK(cfg->block >= cfg->pack && cfg->block <= KVC_PK_MAX_BLOCK && cfg->block % cfg->pack == 0,
              KVC_ERR_ARG, "%s: block=%d must be a multiple of pack=%d in %d..%d", who, cfg->block,
              cfg->pack, cfg->pack, KVC_PK_MAX_BLOCK);
    KVC_CHECK(cfg->group <= 1 ||
                  ((cfg->group == KVC_PK_KGROUP || cfg->group == KVC_PK_VGROUP) && cfg->pack == 16),
              KVC_ERR_ARG, "%s: group=%d (allowed 1, or %d for keys / %d for values with pack=16)",
              who, cfg->group, KVC_PK_KGROUP, KVC_PK_VGROUP);
    return KVC_OK;
}

/* rel * range rounded toward zero to bf16 (so the error stays within rel/2 of
 * the range); 0 when it is not a normal number. */
static uint16_t scale_down(float rel, float range) {
    float s = rel * range;
    if (!(s >= 1.17549435e-38f) || !isfinite(s)) return 0;
    uint32_t u;
    memcpy(&u, &s, 4);
    return (uint16_t)(u >> 16);
}

void kvc_pk_quantize(const float *x, int dim, float rel, float *mn, uint16_t *scale, uint8_t *codes) {
    float lo = x[0], hi = x[0];
    for (int c = 1; c < dim; c++) {
        if (x[c] < lo) lo = x[c];
        if (x[c] > hi) hi = x[c];
    }
    uint16_t sb = scale_down(rel, hi - lo);
    *mn = lo;
    *scale = sb;
    if (!sb) {
        memset(codes, 0, (size_t)dim);
        return;
    }
    float inv = 1.0f / kvc_bf16_to_f32(sb);
    for (int c = 0; c < dim; c++) {
        float v = (x[c] - lo) * inv;
        v = v >= 0.0f ? v : 0.0f; /* also maps NaN to 0 */
        codes[c] = (uint8_t)(v < (float)KVC_PK_MAX_CODE ? lrintf(v) : KVC_PK_MAX_CODE);
    }
}

/* ---- channel centers ------------------------------------------------------------- */

/* The k-th smallest of v[0..n) (v is reordered); v holds no NaN. */
static float kth_smallest(float *v, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot) i++;
            while (v[j] > pivot) j--;
            if (i <= j) {
                float t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return v[k];
    }
    return v[k];
}

int kvc_pk_centers(const float *x, int n, int ld, int dim, uint16_t *centers) {
    float col[KVC_PK_MAX_BLOCK];
    int n_centered = 0;
    for (int c = 0; c < dim; c++) {
        int m = 0;
        float lo = 0.0f, hi = 0.0f;
        for (int t = 0; t < n && t < KVC_PK_MAX_BLOCK; t++) {
            float v = x[(size_t)t * ld + c];
            v = v == v ? v : 0.0f;
            lo = m == 0 || v < lo ? v : lo;
            hi = m == 0 || v > hi ? v : hi;
            col[m++] = v;
        }
        float med = m ? kth_smallest(col, m, (m - 1) / 2) : 0.0f;
        if (!(fabsf(med) > KVC_PK_CENTER_RATIO * (hi - lo))) med = 0.0f; /* not an offset channel */
        med = med > 65504.0f ? 65504.0f : med < -65504.0f ? -65504.0f : med;
        centers[c] = kvc_f32_to_f16(med);
        n_centered += centers[c] != 0;
    }
    return n_centered;
}

int kvc_pk_quantize_block(const kvc_pk_cfg *cfg, const float *x, int n, int ld, int dim,
                          uint16_t *centers, float *mins, uint16_t *scales, uint8_t *codes, int ldc) {
    float row[KVC_PK_MAX_DIM], cf[KVC_PK_MAX_DIM], mn;
    uint16_t sc;
    int centered = cfg->center && kvc_pk_centers(x, n, ld, dim, centers) > 0;
    if (centered) /* the centers as floats once, not once per token */
        for (int c = 0; c < dim; c++) cf[c] = kvc_f16_to_f32(centers[c]);
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * ld;
        if (centered) {
            for (int c = 0; c < dim; c++) row[c] = xt[c] - cf[c];
            xt = row;
        }
        kvc_pk_quantize(xt, dim, cfg->rel, mins ? &mins[t] : &mn, scales ? &scales[t] : &sc,
                        codes + (size_t)t * ldc);
    }
    return centered;
}

/* ---- block layout ------------------------------------------------------------------ */

typedef struct layout {
    int np, npad, items, units;
    uint32_t o_scales, o_centers, o_widths, o_pmins, o_data;
} layout;

static layout layout_of(int nb, int dim, int pack, int group, int has_centers) {
    layout l;
    l.np = (nb + pack - 1) / pack;
    l.npad = l.np * pack;
    l.items = l.np * dim;
    l.units = l.items / group;
    l.o_scales = (uint32_t)l.npad * 4;
    l.o_centers = l.o_scales + (uint32_t)l.npad * 2;
    l.o_widths = l.o_centers + (has_centers ? (uint32_t)dim * 2 : 0);
    l.o_pmins = l.o_widths + (uint32_t)(l.units + 1) / 2;
    l.o_data = l.o_pmins + (uint32_t)l.items;
    return l;
}

static int block_tokens(const pkblob *b, int i) {
    int left = b->n - i * b->block;
    return left < b->block ? left : b->block;
}

kvc_pk_block kvc_pk_block_of(const void *blob, int i) {
    const pkblob *b = blob;
    const uint8_t *base = b->data + b->offs[i];
    int nb = block_tokens(b, i);
    layout l = layout_of(nb, b->dim, b->pack, b->group, b->centered[i]);
    return (kvc_pk_block){(const float *)base, (const uint16_t *)(base + l.o_scales),
                          b->centered[i] ? (const uint16_t *)(base + l.o_centers) : NULL,
                          base + l.o_widths, base + l.o_pmins, base + l.o_data,
                          nb, l.np, b->dim, b->pack, b->vmajor, b->group};
}

int kvc_pk_n_blocks(const void *blob) { return ((const pkblob *)blob)->n_blocks; }

/* Pack and channel of the k-th item of unit u (the order of kvc_pk_unit). */
static void unit_pc(int u, int k, int np, int dim, int group, int vmajor, int *p, int *c) {
    if (vmajor) {
        *p = u % np;
        *c = u / np * group + k;
    } else {
        *p = u / (dim / group);
        *c = u % (dim / group) * group + k;
    }
}

/* The width of unit u, the largest of its `group` items' widths (codes
 * [nb][dim]), and its items' pmins into pmins[u*group ..] unless pmins is NULL. */
static int unit_width(const uint8_t *codes, int nb, int dim, int pack, int group, int vmajor, int u,
                      uint8_t *pmins) {
    int np = (nb + pack - 1) / pack, w = 0;
    for (int k = 0; k < group; k++) {
        int item = u * group + k, p, c, lo = 255, hi = 0;
        unit_pc(u, k, np, dim, group, vmajor, &p, &c);
        int t1 = (p + 1) * pack < nb ? (p + 1) * pack : nb;
        for (int t = p * pack; t < t1; t++) {
            int x8 = codes[(size_t)t * dim + c];
            lo = x8 < lo ? x8 : lo;
            hi = x8 > hi ? x8 : hi;
        }
        int wi = kvc_pk_width((unsigned)(hi - lo));
        w = wi > w ? wi : w;
        if (pmins) pmins[item] = (uint8_t)lo;
    }
    return w;
}

/* Writes the block of nb quantized tokens (mins, scales, codes [nb][dim];
 * centers[dim] or NULL) at dst (block_bytes of them). */
static void write_block(const float *mins, const uint16_t *scales, const uint16_t *centers,
                        const uint8_t *codes, int nb, int dim, int pack, int group, int vmajor,
                        uint8_t *dst) {
    layout l = layout_of(nb, dim, pack, group, centers != NULL);
    memset(dst, 0, l.o_data);
    memcpy(dst, mins, sizeof *mins * (size_t)nb);
    memcpy(dst + l.o_scales, scales, sizeof *scales * (size_t)nb);
    if (centers) memcpy(dst + l.o_centers, centers, sizeof *centers * (size_t)dim);
    uint8_t *widths = dst + l.o_widths, *pmins = dst + l.o_pmins, *out = dst + l.o_data;
    for (int u = 0; u < l.units; u++) {
        int w = unit_width(codes, nb, dim, pack, group, vmajor, u, pmins),
            bytes = pack * group * w / 8;
        widths[u >> 1] |= (uint8_t)(w << ((u & 1) * 4));
        memset(out, 0, (size_t)bytes);
        for (int k = 0; k < group && w; k++) {
            int item = u * group + k, p, c;
            unit_pc(u, k, l.np, dim, group, vmajor, &p, &c);
            for (int t = p * pack; t < (p + 1) * pack && t < nb; t++) {
                int bit = kvc_pk_rindex(vmajor, group, t - p * pack, k) * w;
                unsigned r = (unsigned)(codes[(size_t)t * dim + c] - pmins[item]) << (bit & 7);
                out[bit >> 3] |= (uint8_t)r;
                if ((bit & 7) + w > 8) out[(bit >> 3) + 1] |= (uint8_t)(r >> 8);
            }
        }
        out += bytes;
    }
}

/* Bytes of the block the codes encode to, padded to 4 so that every block's
 * f32 mins are aligned; *residual gets the residual bytes alone. */
static uint32_t block_bytes(const uint8_t *codes, int nb, int dim, int pack, int group, int vmajor,
                            int has_centers, uint32_t *residual) {
    layout l = layout_of(nb, dim, pack, group, has_centers);
    uint32_t data = 0;
    for (int u = 0; u < l.units; u++)
        data +=
            (uint32_t)(pack * group * unit_width(codes, nb, dim, pack, group, vmajor, u, NULL) / 8);
    *residual = data;
    return (l.o_data + data + 3) & ~3u;
}

static kvc_status reserve(pkblob *b, int n_blocks, uint64_t data_bytes) {
    if (n_blocks > b->cap_blocks) {
        int cap = b->cap_blocks * 2 > n_blocks ? b->cap_blocks * 2 : n_blocks;
        uint32_t *o = realloc(b->offs, sizeof *o * ((size_t)cap + 1));
        if (!o) return kvc_fail(KVC_ERR_NOMEM, "packkv: offsets of %d blocks", cap);
        b->offs = o;
        uint8_t *f = realloc(b->centered, (size_t)cap);
        if (!f) return kvc_fail(KVC_ERR_NOMEM, "packkv: flags of %d blocks", cap);
        b->centered = f;
        b->cap_blocks = cap;
    }
    if (data_bytes > b->cap_data) {
        uint64_t cap = b->cap_data * 2 > data_bytes ? b->cap_data * 2 : data_bytes;
        KVC_CHECK(cap + KVC_PK_OVERREAD <= UINT32_MAX, KVC_ERR_RANGE,
                  "packkv: blob of %llu bytes exceeds the 32-bit block offsets", (unsigned long long)cap);
        uint8_t *d = realloc(b->data, cap + KVC_PK_OVERREAD);
        if (!d) return kvc_fail(KVC_ERR_NOMEM, "packkv: %llu bytes of blocks", (unsigned long long)cap);
        memset(d + b->cap_data, 0, cap + KVC_PK_OVERREAD - b->cap_data);
        b->data = d;
        b->cap_data = cap;
    }
    return KVC_OK;
}

/* Gives back the spare capacity of a freshly encoded blob (realloc to a
 * smaller size cannot fail in a way that loses the data: keep the old block). */
static void trim(pkblob *b) {
    uint64_t used = b->offs[b->n_blocks];
    uint8_t *d = realloc(b->data, used + KVC_PK_OVERREAD);
    if (d) b->data = d, b->cap_data = used;
    uint32_t *o = realloc(b->offs, sizeof *o * ((size_t)b->n_blocks + 1));
    uint8_t *f = b->n_blocks ? realloc(b->centered, (size_t)b->n_blocks) : NULL;
    if (o) b->offs = o;
    if (f) b->centered = f;
    if (o || f) b->cap_blocks = b->n_blocks; /* a failed one keeps its larger size */
}

static kvc_status append_pk(const kvc_codec *c, void *blob, const float *x, int n, int ld) {
    pkblob *b = blob;
    const kvc_pk_cfg *cfg = cfg_of(c);
    KVC_CHECK(n >= 0 && n <= INT32_MAX - b->n, KVC_ERR_ARG, "packkv: cannot append %d tokens to %d", n, b->n);
    KVC_CHECK(n == 0 || b->n % b->block == 0, KVC_ERR_ARG,
              "packkv: cannot append after a ragged block (%d tokens, block %d)", b->n, b->block);
    if (n == 0) return KVC_OK;
    /* scratch: mins [block], scales [block], centers [dim], codes [block][dim] */
    float *mins = malloc((sizeof(float) + sizeof(uint16_t) + (size_t)b->dim) * b->block +
                         sizeof(uint16_t) * b->dim);
    if (!mins) return kvc_fail(KVC_ERR_NOMEM, "packkv: code scratch of %d x %d", b->block, b->dim);
    uint16_t *scales = (uint16_t *)(mins + b->block), *centers = scales + b->block;
    uint8_t *codes = (uint8_t *)(centers + b->dim);
    kvc_status st = KVC_OK;
    for (int t0 = 0; t0 < n && st == KVC_OK; t0 += b->block) {
        int nb = n - t0 < b->block ? n - t0 : b->block;
        /* codes first: the block's size depends on its widths */
        int has_centers = kvc_pk_quantize_block(cfg, x + (size_t)t0 * ld, nb, ld, b->dim, centers, mins,
                                                scales, codes, b->dim);
        uint32_t residual, bytes = block_bytes(codes, nb, b->dim, b->pack, b->group, b->vmajor,
                                               has_centers, &residual);
        uint64_t at = b->n_blocks ? b->offs[b->n_blocks] : 0;
        st = reserve(b, b->n_blocks + 1, at + bytes);
        if (st != KVC_OK) break;
        write_block(mins, scales, has_centers ? centers : NULL, codes, nb, b->dim, b->pack,
                    b->group, b->vmajor, b->data + at);
        b->centered[b->n_blocks] = (uint8_t)has_centers;
        b->offs[b->n_blocks] = (uint32_t)at;
        b->offs[++b->n_blocks] = (uint32_t)(at + bytes);
        b->n += nb;
        b->payload += residual;
    }
    free(mins);
    return st;
}

static kvc_status encode_pk(const kvc_codec *c, const float *x, int n, int ld, void **blob, int vmajor,
                            const char *who) {
    const kvc_pk_cfg *cfg = cfg_of(c);
    KVC_TRY(kvc_pk_cfg_check(cfg, who));
    KVC_CHECK(c->dim > 0 && c->dim <= KVC_PK_MAX_DIM, KVC_ERR_ARG, "%s: dim=%d (allowed 1..%d)", who,
              c->dim, KVC_PK_MAX_DIM);
    KVC_CHECK(n >= 0 && ld >= c->dim, KVC_ERR_ARG, "%s: %d tokens with row stride %d (dim %d)", who, n,
              ld, c->dim);
    int group = cfg->group > 1 ? cfg->group : 1;
    KVC_CHECK(group == 1 || group == (vmajor ? KVC_PK_VGROUP : KVC_PK_KGROUP), KVC_ERR_ARG,
              "%s: group=%d (the grouped layout of %s has %d channels per unit)", who, group,
              vmajor ? "values" : "keys", vmajor ? KVC_PK_VGROUP : KVC_PK_KGROUP);
    KVC_CHECK(c->dim % group == 0, KVC_ERR_ARG,
              "%s: group=%d needs a dim that is a multiple of it (dim %d)", who, group, c->dim);
    pkblob *b = calloc(1, sizeof *b);
    if (!b) return kvc_fail(KVC_ERR_NOMEM, "%s: blob", who);
    *b = (pkblob){.dim = c->dim, .block = cfg->block, .pack = cfg->pack, .vmajor = vmajor,
                  .center = cfg->center != 0, .group = group};
    kvc_status st = reserve(b, 1, 0);
    if (st == KVC_OK) {
        b->offs[0] = 0;
        st = append_pk(c, b, x, n, ld);
    }
    if (st == KVC_OK) trim(b);
    if (st != KVC_OK) {
        free(b->offs);
        free(b->centered);
        free(b->data);
        free(b);
        return st;
    }
    *blob = b;
    return KVC_OK;
}

static kvc_status encode_k(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    return encode_pk(c, x, n, ld, blob, 0, "packkv_k");
}
static kvc_status encode_v(const kvc_codec *c, const float *x, int n, int ld, void **blob) {
    return encode_pk(c, x, n, ld, blob, 1, "packkv_v");
}

static int count_pk(const kvc_codec *c, const void *blob) {
    (void)c;
    return ((const pkblob *)blob)->n;
}

static void free_pk(const kvc_codec *c, void *blob) {
    (void)c;
    pkblob *b = blob;
    if (!b) return;
    free(b->offs);
    free(b->centered);
    free(b->data);
    free(b);
}

/* Reconstructs tokens [j0, j1) of one block into x (rows ld apart, row 0 = j0). */
static void decode_block(const kvc_pk_block *v, int j0, int j1, float *x, int ld) {
    const uint8_t *src = v->data;
    for (int u = 0; u < v->np * v->dim / v->group; u++) {
        int w = kvc_pk_unit_width(v, u);
        for (int k = 0; k < v->group; k++) {
            int item = u * v->group + k, p, c;
            unit_pc(u, k, v->np, v->dim, v->group, v->vmajor, &p, &c);
            for (int t = p * v->pack; t < (p + 1) * v->pack; t++)
                if (t >= j0 && t < j1) {
                    int r = kvc_pk_residual(src, w,
                                            kvc_pk_rindex(v->vmajor, v->group, t - p * v->pack, k));
                    float s = kvc_bf16_to_f32(v->scales[t]);
                    float y = fmaf((float)(v->pmins[item] + r), s, v->mins[t]);
                    x[(size_t)(t - j0) * ld + c] =
                        v->centers ? y + kvc_f16_to_f32(v->centers[c]) : y;
                }
        }
        src += (size_t)v->pack * v->group * w / 8;
    }
}

/* The block holding token t0 (< end), its first token *tb, and the end of
 * the part of [t0, end) inside it. */
static int block_at(const pkblob *b, int t0, int end, kvc_pk_block *v, int *tb) {
    int bi = t0 / b->block;
    *tb = bi * b->block;
    *v = kvc_pk_block_of(b, bi);
    return end < *tb + v->n ? end : *tb + v->n;
}

static void decode_pk(const kvc_codec *c, const void *blob, int begin, int end, float *x, int ld) {
    (void)c;
    kvc_pk_block v;
    for (int t0 = begin, tb, te; t0 < end; t0 = te) {
        te = block_at(blob, t0, end, &v, &tb);
        decode_block(&v, t0 - tb, te - tb, x + (size_t)(t0 - begin) * ld, ld);
    }
}

/* The f16 centers of a block as floats. */
static void centers_f32(const kvc_pk_block *v, float *out) {
    for (int c = 0; c < v->dim; c++) out[c] = kvc_f16_to_f32(v->centers[c]);
}

/* Adds q_h . centers to the scores s[h*lds + j], j < n, of a centered block. */
static void add_center_scores(const kvc_pk_block *v, const float *q, int ldq, int G, int n, float *s,
                              int lds) {
    float cf[KVC_PK_MAX_DIM];
    centers_f32(v, cf);
    for (int h = 0; h < G; h++) {
        float qc = 0.0f;
        for (int c = 0; c < v->dim; c++) qc += q[(size_t)h * ldq + c] * cf[c];
        for (int j = 0; j < n; j++) s[(size_t)h * lds + j] += qc;
    }
}

/* Adds center_c * sum_j p[h*ldp + j], j < n, to the outputs of a centered block. */
static void add_center_outputs(const kvc_pk_block *v, const float *p, int ldp, int G, int n, float *o,
                               int ldo) {
    float cf[KVC_PK_MAX_DIM];
    centers_f32(v, cf);
    for (int h = 0; h < G; h++) {
        float sp = 0.0f;
        for (int j = 0; j < n; j++) sp += p[(size_t)h * ldp + j];
        for (int c = 0; c < v->dim; c++) o[(size_t)h * ldo + c] += sp * cf[c];
    }
}

static void qk_pk(const kvc_codec *c, const void *blob, const float *q, int G, int ldq, int begin,
                  int end, float *s, int lds) {
    (void)c;
    kvc_pk_block v;
    for (int t0 = begin, tb, te; t0 < end; t0 = te) {
        te = block_at(blob, t0, end, &v, &tb);
        kvc_pk_k.qk(&v, q, ldq, G, t0 - tb, te - tb, s + (t0 - begin), lds);
        if (v.centers) add_center_scores(&v, q, ldq, G, te - t0, s + (t0 - begin), lds);
    }
}

static void pv_pk(const kvc_codec *c, const void *blob, const float *p, int G, int ldp, int begin,
                  int end, float *o, int ldo) {
    (void)c;
    kvc_pk_block v;
    for (int t0 = begin, tb, te; t0 < end; t0 = te) {
        te = block_at(blob, t0, end, &v, &tb);
        kvc_pk_k.pv(&v, p + (t0 - begin), ldp, G, t0 - tb, te - tb, o, ldo);
        if (v.centers) add_center_outputs(&v, p + (t0 - begin), ldp, G, te - t0, o, ldo);
    }
}

/* Payload: the residual bytes. Meta: everything else (blob header, block
 * offsets and center flags, per-token mins and scales, channel centers, pack
 * widths and mins, the padding of blocks to 4 bytes, the over-read pad and
 * unused capacity). */
static void bytes_pk(const kvc_codec *c, const void *blob, uint64_t *payload, uint64_t *meta) {
    (void)c;
    const pkblob *b = blob;
    *payload = b->payload;
    *meta = sizeof *b + sizeof *b->offs * ((uint64_t)b->cap_blocks + 1) + (uint64_t)b->cap_blocks +
            b->cap_data + KVC_PK_OVERREAD -
            b->payload;
}

const kvc_codec_ops kvc_codec_packkv_k = {
    .name = "packkv_k",
    .granule = 16,
    .encode = encode_k,
    .append = append_pk,
    .count = count_pk,
    .qk = qk_pk,
    .decode = decode_pk,
    .bytes = bytes_pk,
    .free = free_pk,
};

const kvc_codec_ops kvc_codec_packkv_v = {
    .name = "packkv_v",
    .granule = 16,
    .encode = encode_v,
    .append = append_pk,
    .count = count_pk,
    .pv = pv_pk,
    .decode = decode_pk,
    .bytes = bytes_pk,
    .free = free_pk,
};
